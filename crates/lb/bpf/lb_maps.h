/* The maps: written as whole entries by the control plane (services, lookup, reals, laddrs),
 * or owned by the packet path (connection tables, cursors, counters). Sizes given here are
 * placeholders: the loader sets each from AttachConfig before load. */
#ifndef LB_MAPS_H
#define LB_MAPS_H

/* A service as the packet names it. An address-only entry (proto ICMP/ICMPv6, port 0)
 * marks a VIP whose echo requests are answered. Addresses: IPv4 in the first 4 bytes, the
 * rest zero. */
struct lb_vip_key {
	__u8 addr[16];
	__be16 port;
	__u8 proto;
	__u8 family;
};

struct lb_vip {
	__u32 id;          /* index of svc_stats, rr_cursor, lookup rows and laddrs rows */
	__u32 lookup_len;  /* mh: ring size; rr/wrr: sequence length; 0: no real has weight */
	__u8 sched;        /* LB_SCHED_* */
	__u8 flags;        /* LB_VIP_* */
	__u8 laddr_count;  /* full-NAT local addresses in use */
	__u8 pad;
};

struct lb_real {
	__u8 addr[16];
	__be16 port;
	__u8 family;
	__u8 mode;      /* LB_MODE_* */
	__be16 gue_port; /* tunnel mode: GUE to this UDP port; 0: IP in IP */
	__u8 tun_flags; /* LB_TUN_* */
	__u8 pad;
};

struct lb_laddr {
	__u8 addr[16];
	__u8 family;
	__u8 pad[3];
};

/* A flow as it arrives: the connection tables' key, in both directions. */
struct lb_flow {
	__u8 src[16];
	__u8 dst[16];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 family;
	__u8 pad[2];
};

/* A client->VIP connection, per CPU. */
struct lb_conn {
	__u32 real;     /* real slot */
	__be16 lport;   /* full-NAT local port */
	__u8 laddr;     /* full-NAT local address index */
	__u8 flags;     /* LB_CONN_* */
	__u32 hash;     /* flow_hash of the flow, kept so a tunnel packet need not recompute it */
	__u32 port_checked; /* full-NAT UDP: when its port was last found its own, seen_ns >> 30 */
	__u64 seen_ns;
};

/* A NAT or full-NAT connection as its replies name it (key: the reply's flow), or, marked
 * LB_REV_FWD under a key marked LB_FLOW_FWD, as its client's packets name it: the shared
 * copy of the connection entry, for a packet that reaches another CPU than its SYN did. */
struct lb_rev {
	__u8 vip[16];
	__u8 client[16];
	__be16 vport;
	__be16 cport;
	__u32 real;
	__u32 service;
	__u8 flags;    /* LB_REV_* */
	__u8 laddr;    /* forward entries: the full-NAT local address index */
	__be16 lport;  /* forward entries: the full-NAT local port */
	__u64 seen_ns;
	__u32 real_isn; /* half-open reply entries with LB_REV_ANSWERED: the real's ISN */
	__u32 opened;   /* when the entry was made, lb_now() >> 20 (about a millisecond) */
};

struct lb_counters {
	__u64 conns;
	__u64 in_pkts;
	__u64 out_pkts;
	__u64 in_bytes;
	__u64 out_bytes;
};

struct lb_rate {
	__u64 sec;
	__u64 count;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct lb_vip_key);
	__type(value, struct lb_vip);
} services SEC(".maps");

/* Real slots: row service id * cfg_ring_size. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} lookup SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_real);
} reals SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LB_MAX_LADDRS);
	__type(key, __u32);
	__type(value, struct lb_laddr);
} laddrs SEC(".maps");

/* One LRU table per CPU (the loader creates them and puts them in the outer array): no two
 * CPUs ever share a table, so no LRU lock is contended between CPUs. */
struct lb_conn_table {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, struct lb_flow);
	__type(value, struct lb_conn);
};

/* clang describes a type reached only through map definitions as a forward declaration,
 * which libbpf cannot size: these constants make lb_conn and lb_flow complete in BTF (and in
 * the skeleton's types). */
const volatile struct lb_conn lb_conn_btf = {};
const volatile struct lb_flow lb_flow_btf = {};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct lb_conn_table);
} conns SEC(".maps");

/* Replies of NAT and full-NAT connections: one table every CPU reads (a reply may arrive
 * on any CPU), inserted once per connection; per-CPU LRU lists, so an insert takes only its
 * own CPU's list lock besides the bucket lock. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__type(key, struct lb_flow);
	__type(value, struct lb_rev);
} rev SEC(".maps");

/* TCP connections in their handshake, keyed and valued as `rev`: the forward entry from the
 * client's SYN and, for NAT and full-NAT, the reply entry, until the client's first segment
 * that proves the handshake moves both to `rev` (docs/LB.md, "Half-open connections"). A SYN
 * flood churns this table alone, so established connections are never evicted for it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__type(key, struct lb_flow);
	__type(value, struct lb_rev);
} half_open SEC(".maps");

/* UDP flows, keyed and valued as `rev`: their forward entries and, for NAT and full-NAT,
 * their reply entries. A datagram proves nothing about its source, so a flood of new UDP
 * flows can only be held apart: it churns this table alone, never a TCP connection of `rev`
 * (docs/LB.md, "UDP flows"). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__type(key, struct lb_flow);
	__type(value, struct lb_rev);
} udp_flows SEC(".maps");

/* The table of protocol `proto`'s established flows: `rev` for TCP, `udp_flows`
 * for UDP. For inserts; lookups go through flow_entry(). */
static __always_inline void *flows_of(__u8 proto)
{
	return proto == WS_IPPROTO_TCP ? (void *)&rev : (void *)&udp_flows;
}

/* The entry under `k` in the table of its protocol. Two call sites, each with its own map,
 * so the verifier inlines both lookups. */
static __always_inline struct lb_rev *flow_entry(const struct lb_flow *k)
{
	if (k->proto == WS_IPPROTO_TCP)
		return bpf_map_lookup_elem(&rev, k);
	return bpf_map_lookup_elem(&udp_flows, k);
}

/* Scratch space of the full-NAT UDP port functions (fnat_udp_alloc, fnat_udp_port_lost), per
 * CPU: a global function shares the program's 512 bytes of stack, of which the program's
 * frame (456 bytes) leaves it too few for a flow key and what the probes keep. */
struct lb_port_scratch {
	struct lb_flow k;
	struct lb_flow old; /* the client flow of a port taken from an unanswered flow */
	struct lb_rev v;
	__u64 now;
	__u32 slot;
	__u32 key;
	__u32 cpu;
	__u32 base;   /* the first port of this CPU's share */
	__u32 share;  /* ports in the share */
	__be16 spare; /* the first probed port of an unanswered flow idle a second */
	__u8 family;
	__u8 laddr;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_port_scratch);
} port_scratch SEC(".maps");

/* The key of single-entry arrays, where no stack is to spare. */
const volatile __u32 lb_key_zero = 0;

/* Datagrams to a VIP in fragments, by (source, destination, protocol, IP ID): where the
 * first fragment (the one with the ports) went, so that the later ones, which carry no
 * ports, go to the same real with the same translation (Cilium's fragment map). Shared: a
 * datagram's fragments may run on different CPUs (a veth runs each on its sender's CPU, and a
 * NIC's RSS may hash a first fragment by its ports and the rest by addresses only). Written
 * once per datagram by its first fragment, read by the others; per-CPU LRU lists. */
struct lb_frag_key {
	__u8 src[16];
	__u8 dst[16];
	__be32 id;      /* IPv4: the 16-bit identification; IPv6: the fragment header's */
	__u8 proto;
	__u8 family;
	__u8 pad[2];
};

struct lb_frag {
	__u32 real;     /* real slot */
	__u32 service;  /* service id (counters, the full-NAT local address row) */
	__u32 hash;     /* the flow hash (the tunnel's outer source) */
	__be16 lport;   /* full-NAT local port (unused: later fragments carry no ports) */
	__u8 laddr;     /* full-NAT local address index */
	__u8 pad;
	__u64 seen_ns;  /* when the first fragment passed */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, LB_MAX_FRAGS); /* the loader's: 1,024 per CPU, at least this */
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__type(key, struct lb_frag_key);
	__type(value, struct lb_frag);
} frags SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} rr_cursor SEC(".maps");

/* The FIB's answer for the way to a real, per CPU and real slot, kept for a second: the
 * established packet's FIB lookup was the largest single cost on the path to a real. It is
 * checked against the real's address (a reused slot) and the ingress port, and serves only
 * packets no longer than one the FIB accepted. */
struct lb_nh {
	__u8 dst[16];
	__u8 src[16];       /* the FIB's source address, when it was asked for one */
	__u32 ifindex;      /* egress */
	__u32 in_ifindex;
	__u32 ok_len;       /* the longest IP packet the FIB accepted on this way */
	__u8 smac[6];
	__u8 dmac[6];
	__u8 has_src;       /* src is filled (a real whose mode changed may not have it) */
	__u8 pad[3];
	__u64 until_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_nh);
} nh_cache SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} port_cursor SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_rate);
} rate SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_counters);
} svc_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lb_counters);
} real_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LB_NR_REASONS);
	__type(key, __u32);
	__type(value, __u64);
} reasons SEC(".maps");

static __always_inline void count(enum lb_reason reason)
{
	__u32 key = reason;
	__u64 *slot = bpf_map_lookup_elem(&reasons, &key);

	if (slot)
		*slot += 1; /* per-CPU slot: no race */
}

/* Per-CPU traffic counters of a service and a real. */
static __always_inline void account(__u32 service, __u32 real, int conn, int out, __u32 bytes)
{
	struct lb_counters *s = bpf_map_lookup_elem(&svc_stats, &service);
	struct lb_counters *r = bpf_map_lookup_elem(&real_stats, &real);

	if (s) {
		s->conns += conn;
		if (out) {
			s->out_pkts++;
			s->out_bytes += bytes;
		} else {
			s->in_pkts++;
			s->in_bytes += bytes;
		}
	}
	if (r) {
		r->conns += conn;
		if (out) {
			r->out_pkts++;
			r->out_bytes += bytes;
		} else {
			r->in_pkts++;
			r->in_bytes += bytes;
		}
	}
}

/* The own MAC of each interface the program serves, by ifindex: written by the loader at
 * attach (and, for a program only loaded, for every interface of the namespace it was loaded
 * in). A frame sent to any other MAC is not this host's to forward. */
struct lb_ifmac {
	__u8 mac[6];
	__u8 pad[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LB_MAX_IFACES);
	__type(key, __u32);
	__type(value, struct lb_ifmac);
} if_macs SEC(".maps");

#endif
