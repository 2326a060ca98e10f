/* Maps filled by the controller from kernel state. */
#ifndef FP_MAPS_H
#define FP_MAPS_H

/* Egress ports the router may redirect to, keyed by ifindex. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
} tx_ports SEC(".maps");

/* Per-CPU packet counters, one slot per enum fp_reason. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FP_NR_REASONS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* What the kernel's IP MIBs count of each packet it forwards, for the packets the routers
 * forward instead, which it never sees: per CPU, one entry per family (0 IPv4, 1 IPv6). Linux
 * alone counts each in InReceives and OutTransmits, its length in InOctets and OutOctets, and
 * its ECN codepoint (once per segment) in In{NoECT,ECT1,ECT0,CE}Pkts: the kernel's count plus
 * these is what Linux alone counts (docs/FASTPATH.md, "Counters"). */
struct fp_mib {
	__u64 packets;
	__u64 octets;
	__u64 ecn[4]; /* by codepoint: Not-ECT, ECT(1), ECT(0), CE */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct fp_mib);
} mib SEC(".maps");

/* Runtime switches that change often (policy rules appear, forwarding or rp_filter toggled):
 * flipping a word here takes microseconds, where swapping a program waits for the kernel's XDP
 * dispatcher update. Nonzero: hand that family to the kernel. */
#define LOCAL_V4_INLINE 8

struct fp_ctl {
	__u32 off_v4;
	__u32 off_v6;
	/* The filter, as far as it changes with the rules: which fields some rule constrains
	 * (of those compiled in, cfg_filter_fields), whether a chain is compiled at all, and
	 * the chain policies. A rule added or deleted is then map writes, never a program
	 * swap, whose XDP dispatcher update costs milliseconds. */
	__u32 filter_fields;
	__u8 filter_v4;
	__u8 filter_v6;
	__u8 policy_drop_v4;
	__u8 policy_drop_v6;
	/* The IPv4 next-hop cache (route_cache_v4): entries from another generation are
	 * misses. The daemon writes a new generation after every rtnetlink event (route,
	 * neighbour, link, address, netconf, rule), never reusing one. */
	__u32 route_gen;
	/* Zero while the kernel's answer could depend on more than the destination, TOS and
	 * ingress port (multipath routes, nexthop groups, policy rules): every packet asks the
	 * FIB. */
	__u8 route_cache_v4;
	/* The same for IPv6 (route_cache_v6): zero while an IPv6 route is multipath, uses a
	 * nexthop group or is source-specific (`from`), or there are IPv6 policy rules. */
	__u8 route_cache_v6;
	/* net.ipv4.conf.{all,<port>}.rp_filter is on (strict or loose): every packet's source
	 * must route back out this port (router_v4). */
	__u8 rp_filter_v4;
	/* This namespace's IPv4 addresses (a forwarded packet from one is the kernel's): up to
	 * LOCAL_V4_INLINE of them here, compared in turn with the ctl value the packet has
	 * already loaded; with more, local_v4_in_map, and the local_v4 hash holds them all. A
	 * hash lookup on every packet cost the router about 60 ns (docs/BENCHMARKS.md, §6). */
	__u8 local_v4_n;
	__u8 local_v4_in_map;
	/* Policy rules beyond the kernel's defaults, all of them ones the FIB helper evaluates
	 * as the kernel's input path does (else the family is off): the lookups then carry the
	 * packet's ports as the kernel's flow dissector finds them, the source check asks as
	 * fib_validate_source does (from the egress port, ports swapped, even with rp_filter
	 * off), and an IPv6 packet whose ports sit behind an extension header goes to the
	 * kernel. policy_rules_v4 is 2 where some IPv4 rule selects by protocol or ports. */
	__u8 policy_rules_v4;
	__u8 policy_rules_v6;
	/* This XDP program's fp_tc twin is attached at TC ingress behind it (the TC stage): a
	 * frame whose L4 checksum a local sender left partial is marked in its metadata and
	 * forwarded there, as an skb that keeps the checksum state, instead of by the kernel. */
	__u8 tc_stage;
	/* Conntrack may reassemble this family's fragments before the kernel routes them (some
	 * rule of the ruleset uses it, or does what we cannot read): a fragment is then the
	 * kernel's, which holds it until its datagram is whole and sends it on cut as it came. */
	__u8 reassembly_v4;
	__u8 reassembly_v6;
	/* This family has multipath routes (inline or through a nexthop group): while its sysctl
	 * gate is closed (fp_sysctl_gate.h) the kernel hashes its flows. */
	__u8 multipath_v4;
	__u8 multipath_v6;
	__be32 local_v4[LOCAL_V4_INLINE];
	/* The smallest MTU of an IPv4 route that has one of its own, unlocked (`ip route add ...
	 * mtu N`; 0: none). The kernel's forwarding honours it (ip_dst_mtu_maybe_forward); the FIB
	 * helper checks only a locked one. A longer packet is the kernel's, whatever its route. */
	__u32 route_mtu_v4;
	/* net.ipv6.conf.all.proxy_ndp is on: ip6_forward delivers an NDP message to a proxied
	 * address locally (ip6_forward_proxy_check), so NDP is the kernel's. */
	__u8 proxy_ndp;
	/* A user added a local route (`ip route add local ...`): from then on the kernel checks
	 * every source in full, rp_filter or not (fib_has_custom_local_routes, never cleared), and
	 * drops one routed back as local or broadcast. */
	__u8 source_check_v4;
	/* net.ipv4.ip_forward_update_priority is 0: a forwarded skb keeps its priority. */
	__u8 keep_priority;
	/* The daemon is loading this port's next program (the verifier may take seconds): until
	 * it is swapped in, every frame is the kernel's, so no frame meets the old rules. */
	__u8 standby;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fp_ctl);
} ctl SEC(".maps");

/* This namespace's own IPv4 addresses (IFA_LOCAL), keyed in network order, when there are more
 * than fp_ctl holds. The kernel drops a packet to be forwarded whose source is one of them
 * (fib_validate_source: a martian source, even with rp_filter off), and the FIB lookup on the
 * destination cannot see that. */
#define LOCAL_V4_MAX 1024

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LOCAL_V4_MAX);
	__type(key, __be32);
	__type(value, __u8);
} local_v4 SEC(".maps");

/* The kernel FIB's answers for recent IPv4 destinations, per CPU and direct-mapped: one
 * array slot per hashed destination, no locks, a collision only costs a FIB lookup. This
 * is what brings a forwarded packet below the cost of bpf_fib_lookup (about 90 ns here,
 * docs/benchmarks/fp.md). Only answers that ended in a redirect are kept. */
#define ROUTE_CACHE_BITS 10

struct route_cache_v4 {
	__u32 gen;
	__be32 dst;
	__u32 in_ifindex;
	__u32 oif;
	/* The largest packet the FIB has let through to this destination (its MTU check):
	 * a larger one asks again. */
	__u16 max_len;
	__u8 tos;
	__u8 unused;
	__u8 dmac[WS_ETH_ALEN];
	__u8 smac[WS_ETH_ALEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1 << ROUTE_CACHE_BITS);
	__type(key, __u32);
	__type(value, struct route_cache_v4);
} route_cache_v4 SEC(".maps");

/* The same for IPv6 destinations, under the same generation. With no policy rules (with
 * them the cache is off), no multipath, nexthop-group or source-specific route, the FIB's answer
 * depends on the destination and the ingress port alone. An IPv6 lookup walks the fib6 tree
 * and costs more than IPv4's (docs/BENCHMARKS.md, §6). */
struct route_cache_v6 {
	__u32 gen;
	__u32 in_ifindex;
	__u32 oif;
	__u16 max_len;
	__u8 dmac[WS_ETH_ALEN];
	__u8 smac[WS_ETH_ALEN];
	__u8 unused[2];
	struct in6_addr dst;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1 << ROUTE_CACHE_BITS);
	__type(key, __u32);
	__type(value, struct route_cache_v6);
} route_cache_v6 SEC(".maps");

/* Sources that passed the reverse-path check (rp_filter_v4), per CPU and direct-mapped like
 * the route cache, under the same generation: the check is a second FIB lookup, which cost
 * the router with Debian's default rp_filter about 120 ns a packet (docs/BENCHMARKS.md, §6).
 * Only passes are kept; a source that fails is the kernel's every time. Used only where the
 * route cache is (no multipath, no nexthop objects, default policy rules): then the answer
 * depends on nothing but the source, the TOS and the ingress port. */
#define RP_CACHE_BITS 10

struct rp_cache_v4 {
	__u32 gen;
	__be32 src;
	__u32 in_ifindex;
	__u8 tos;
	__u8 unused[3];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1 << RP_CACHE_BITS);
	__type(key, __u32);
	__type(value, struct rp_cache_v4);
} rp_cache_v4 SEC(".maps");

#include "fp_sysctl_gate.h"
#include "fp_neigh.h"

#endif
