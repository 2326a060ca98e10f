// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The load balancer's data path: one XDP program on every interface the daemon serves,
 * specialized at load by the constants of lb_consts.h. A packet for a VIP goes to a real
 * (DR, tunnel, NAT, full-NAT); a real's reply of a NAT connection goes back to its client;
 * ICMP for a VIP is answered or steered. Everything else, and everything the program cannot
 * do exactly, is XDP_PASS, counted by reason. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "ws/csum.h"

#include "lb_consts.h"
#include "lb_maps.h"
#include "lb_pkt.h"
#include "lb_sched.h"
#include "lb_fwd.h"
#include "lb_nat.h"
#include "lb_handshake.h"
#include "lb_icmp.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

static __always_inline struct lb_vip *find_vip(const __u8 *addr, __be16 port, __u8 proto,
					       __u8 fam)
{
	struct lb_vip_key k = {};

	copy16(k.addr, addr);
	k.port = port;
	k.proto = proto;
	k.family = fam;
	return bpf_map_lookup_elem(&services, &k);
}

/* The shared forward entry of the client flow `p`. */
static __always_inline struct lb_rev *fwd_lookup(const struct lb_pkt *p)
{
	struct lb_flow k;

	fwd_key(&k, p);
	return flow_entry(&k);
}

/* Whether real slot `slot` holds a real (a removed real's slot is cleared). */
static __always_inline int real_present(__u32 slot)
{
	struct lb_real *r = bpf_map_lookup_elem(&reals, &slot);

	return r && r->family;
}

/* A SYN of a flow that had a connection before (the client reused its port): the other
 * CPUs may still hold the old connection in their own tables (on a veth a flow's packets
 * run on whichever CPU sends them), and would send the new connection's next packets to the
 * old real. Dropping their entries makes them learn the new one from the shared entry. This
 * runs only for a reused flow, never per packet. */
static __always_inline void forget_elsewhere(const struct lb_flow *k, __u32 self)
{
	for (__u32 i = 0; i < 1024; i++) {
		__u32 idx = i;
		void *t;

		if (i >= cfg_nr_cpus)
			break;
		if (i == self)
			continue;
		t = bpf_map_lookup_elem(&conns, &idx);
		if (t)
			bpf_map_delete_elem(t, k);
	}
}

/* A packet no entry knows: a SYN or a UDP datagram opens a connection, scheduled here and
 * remembered (a SYN's in `half_open` only, docs/LB.md "Half-open connections"); another TCP
 * segment is placed where its hash points for DR and tunnel, resumes a NAT connection whose
 * reply entry exists, and is the kernel's for full-NAT. 0 with *realp set, or the verdict. */
static __always_inline int schedule(const struct lb_pkt *p, struct lb_vip *vip, void *table,
				    __u64 now, struct lb_conn *fresh, struct lb_real **realp,
				    enum lb_reason *why)
{
	int tcp = p->flow.proto == WS_IPPROTO_TCP;
	int syn = tcp && (p->tcp_flags & (LB_TCP_SYN | LB_TCP_ACK)) == LB_TCP_SYN;
	int limited = (syn || !tcp) && over_rate(now);
	__u32 hash = flow_hash(&p->flow), slot;
	struct lb_real *real;

	if (!vip->lookup_len) {
		*why = LB_DROP_NO_REAL;
		return XDP_DROP;
	}
	/* Only a SYN moves the rr/wrr cursor: a UDP flow has no opening packet, so it is placed
	 * by hash over the sequence, the same on every CPU it may reach. */
	if (pick(vip, hash, syn && !limited, &slot)) {
		*why = LB_PASS_MAP;
		return XDP_PASS;
	}
	real = bpf_map_lookup_elem(&reals, &slot);
	if (!real || !real->family) {
		*why = LB_PASS_NO_REAL;
		return XDP_PASS;
	}
	if (!LB_HAS_MODE(real->mode)) {
		*why = LB_PASS_MODE_OFF;
		return XDP_PASS;
	}
	fresh->real = slot;
	fresh->hash = hash;
	fresh->seen_ns = now;
	if (real->mode == LB_MODE_NAT && tcp && !syn) {
		/* Resume only a connection the real saw open: its reply entry exists. */
		struct lb_flow k;

		rev_key(&k, real, p->flow.src, p->flow.sport, p->flow.proto);
		if (!bpf_map_lookup_elem(&rev, &k)) {
			*why = LB_PASS_NO_CONN;
			return XDP_PASS;
		}
		fresh->flags = LB_CONN_TOA_ACKED;
	} else if (real->mode == LB_MODE_FNAT && tcp && !syn) {
		*why = LB_PASS_NO_CONN;
		return XDP_PASS;
	}
	if (real->mode == LB_MODE_FNAT) {
		int rc = fnat_alloc(vip, real, slot, p, hash, now, fresh);

		if (rc) {
			*why = rc;
			return rc == LB_DROP_NO_PORT ? XDP_DROP : XDP_PASS;
		}
	} else if (real->mode == LB_MODE_NAT) {
		nat_insert(syn ? (void *)&half_open : flows_of(p->flow.proto), real, slot, vip->id,
			   p, now);
	}
	/* One insert (one bucket lock) per connection, none per packet. A rate-limited DR or
	 * tunnel connection is not remembered: its hash places it again. NAT and full-NAT ones
	 * always are: their reply entry (and local port) lives only there. */
	if (!limited || real->mode == LB_MODE_NAT || real->mode == LB_MODE_FNAT) {
		if (syn) {
			fwd_insert(&half_open, p, vip->id, fresh, 0, now);
		} else {
			fwd_insert(flows_of(p->flow.proto), p, vip->id, fresh,
				   tcp ? LB_REV_ACKED : 0, now);
			if (table)
				bpf_map_update_elem(table, &p->flow, fresh, BPF_ANY);
		}
	}
	if (limited)
		count(LB_RATE_LIMITED);
	*realp = real;
	return 0;
}

/* A SYN: a retransmission keeps its half-open connection (and its real: rr/wrr would
 * otherwise send it to the next real while the first one's SYN-ACK is on its way, and the
 * client would talk to one real through the entry of another). Any other SYN opens a new
 * connection on the flow, and whatever the flow had before is over: its entry here, on the
 * other CPUs and in `rev`, so that no later segment finds the old real. Returns the
 * half-open entry of a retransmission, or NULL. */
static __always_inline struct lb_rev *syn_seen(const struct lb_pkt *p, void *table, __u32 cpu,
					       int had_conn)
{
	struct lb_rev *h = half_lookup(p);
	struct lb_flow k;

	if (h && !(h->flags & LB_REV_CLOSED) && real_present(h->real))
		return h;
	if (had_conn && table)
		bpf_map_delete_elem(table, &p->flow);
	fwd_key(&k, p);
	if (bpf_map_lookup_elem(&rev, &k)) {
		if (cfg_nr_cpus > 1)
			forget_elsewhere(&p->flow, cpu);
		bpf_map_delete_elem(&rev, &k);
	}
	return NULL;
}

/* The frags key of a fragment's datagram. */
static __always_inline void frag_key(struct lb_frag_key *k, const struct lb_pkt *p)
{
	copy16(k->src, p->flow.src);
	copy16(k->dst, p->flow.dst);
	k->id = p->ip_id;
	k->proto = p->flow.proto;
	k->family = p->flow.family;
	k->pad[0] = 0;
	k->pad[1] = 0;
}

/* The first fragment of a datagram to a VIP: where it goes, for the later fragments. One
 * insert per fragmented datagram; a reused IP ID's first fragment overwrites the old entry. */
static __always_inline void frag_note(const struct lb_pkt *p, __u32 service,
				      const struct lb_conn *c)
{
	struct lb_frag_key k;
	struct lb_frag v = {};

	frag_key(&k, p);
	v.real = c->real;
	v.service = service;
	v.hash = c->hash;
	v.laddr = c->laddr;
	v.lport = c->lport;
	v.seen_ns = lb_now();
	if (!bpf_map_update_elem(&frags, &k, &v, BPF_ANY))
		count(LB_FRAG_NOTED);
}

/* A packet for a VIP's service. */
static __always_inline int serve(struct xdp_md *ctx, const struct lb_pkt *p, struct lb_vip *vip,
				 enum lb_reason *why)
{
	int tcp = p->flow.proto == WS_IPPROTO_TCP;
	int syn = tcp && (p->tcp_flags & (LB_TCP_SYN | LB_TCP_ACK)) == LB_TCP_SYN;
	__u32 cpu = bpf_get_smp_processor_id();
	__u64 now = lb_now();
	struct lb_conn fresh = {}, *c = NULL;
	struct lb_real *real = NULL;
	struct lb_rev *f, *h = NULL;
	int first_ack = 0, is_new = 0;
	struct lb_laddr *la = NULL;
	void *table;
	__u32 slot;

	table = bpf_map_lookup_elem(&conns, &cpu);
	if (table)
		c = bpf_map_lookup_elem(table, &p->flow);
	if (syn) {
		h = syn_seen(p, table, cpu, c != NULL);
		c = NULL;
	}
	if (c) {
		/* Established, on this CPU: the fast path. A full-NAT UDP flow's port may have
		 * gone to another flow (docs/LB.md, "UDP flows"): tested once a second. Such a
		 * datagram is dropped, not scheduled again in this pass: that takes the verifier
		 * past its million instructions. */
		if (!tcp && c->port_checked != (__u32)(now >> 30)) {
			if (fnat_udp_port_lost(p, vip->id, c->real, (__u32)c->laddr << 16 | c->lport)) {
				*why = LB_DROP_UDP_PORT_LOST;
				return XDP_DROP;
			}
			c->port_checked = now >> 30;
		}
		slot = c->real;
		c->seen_ns = now;
		fresh = *c;
	} else if (!syn && (f = fwd_lookup(p))) {
		/* Established on another CPU (a veth has no RSS affinity: a flow runs on its
		 * sender's CPU; a NIC's RSS table may be rebalanced): the shared forward entry
		 * has the connection, and this CPU learns it. Without it, rr and wrr would place
		 * the packet elsewhere, and so would mh once the table changed. */
		slot = f->real;
		fresh.real = slot;
		fresh.hash = flow_hash(&p->flow);
		fresh.laddr = f->laddr;
		fresh.lport = f->lport;
		fresh.flags = LB_CONN_TOA_ACKED;
		fresh.seen_ns = now;
		/* The forward entry may name a port its full-NAT UDP flow has lost, as the
		 * CPU's entry may (the fast path above). */
		if (!tcp) {
			if (fnat_udp_port_lost(p, vip->id, slot,
					       (__u32)fresh.laddr << 16 | fresh.lport)) {
				*why = LB_DROP_UDP_PORT_LOST;
				return XDP_DROP;
			}
			fresh.port_checked = now >> 30;
		}
		if (table)
			bpf_map_update_elem(table, &p->flow, &fresh, BPF_ANY);
	} else if (h || (tcp && !syn && (h = half_lookup(p)))) {
		/* Half-open: a retransmitted SYN, or a client segment that may prove the
		 * handshake (lb_handshake.h). Either way it goes to the connection's real. */
		slot = h->real;
		real = bpf_map_lookup_elem(&reals, &slot);
		if (!real || !real->family) {
			*why = LB_PASS_NO_REAL;
			return XDP_PASS;
		}
		fresh.real = slot;
		fresh.hash = flow_hash(&p->flow);
		fresh.laddr = h->laddr;
		fresh.lport = h->lport;
		fresh.seen_ns = now;
		if (syn) {
			h->seen_ns = now;
			/* Its reply entry, should the LRU have taken it. */
			if (real->mode == LB_MODE_NAT)
				nat_insert(&half_open, real, slot, vip->id, p, now);
		} else if (promote(ctx, p, vip, real, h, now)) {
			first_ack = 1;
			fresh.flags = LB_CONN_TOA_ACKED;
			if (table)
				bpf_map_update_elem(table, &p->flow, &fresh, BPF_ANY);
		} else {
			count(LB_HALF_OPEN_UNPROVEN);
		}
	} else {
		int rc = schedule(p, vip, table, now, &fresh, &real, why);

		if (rc)
			return rc;
		slot = fresh.real;
		is_new = syn || !tcp;
	}
	if (!real) {
		real = bpf_map_lookup_elem(&reals, &slot);
		if (!real || !real->family) {
			*why = LB_PASS_NO_REAL;
			return XDP_PASS;
		}
	}

	if (p->frag == LB_FRAG_FIRST)
		frag_note(p, vip->id, &fresh);
	account(vip->id, slot, is_new, 0, p->l3_len);
	/* Only a FIN or RST pays the lookup; every mode, so the listing tells DR and tunnel
	 * connections that closed from open ones too. */
	if (tcp && (p->tcp_flags & (LB_TCP_FIN | LB_TCP_RST)))
		fwd_close(p, now);
	switch (real->mode) {
	case LB_MODE_DR:
		if (LB_HAS_MODE(LB_MODE_DR))
			return fwd_dr(ctx, p, real, slot, why);
		break;
	case LB_MODE_TUNNEL:
		if (LB_HAS_MODE(LB_MODE_TUNNEL))
			return fwd_tunnel(ctx, p, real, slot, fresh.hash, why);
		break;
	case LB_MODE_NAT:
		if (LB_HAS_MODE(LB_MODE_NAT)) {
			if (tcp && (p->tcp_flags & (LB_TCP_FIN | LB_TCP_RST)))
				rev_close(real, p->flow.src, p->flow.sport, p->flow.proto, now);
			return nat_forward(ctx, p, real, slot, 0, 0, 0, why);
		}
		break;
	case LB_MODE_FNAT:
		if (LB_HAS_MODE(LB_MODE_FNAT)) {
			__u32 key = vip->id * LB_MAX_LADDRS + fresh.laddr;

			la = bpf_map_lookup_elem(&laddrs, &key);
			if (!la) {
				*why = LB_PASS_NO_LADDR;
				return XDP_PASS;
			}
			if (tcp && (p->tcp_flags & (LB_TCP_FIN | LB_TCP_RST)))
				rev_close(real, la->addr, fresh.lport, p->flow.proto, now);
			int toa = tcp && (vip->flags & LB_VIP_TOA) && (syn || first_ack);

			/* A first fragment cannot grow: the later ones' offsets would be wrong. */
			if (toa && p->frag) {
				count(LB_TOA_NO_ROOM);
				toa = 0;
			}
			return nat_forward(ctx, p, real, slot, la, fresh.lport, toa, why);
		}
		break;
	}
	*why = LB_PASS_MODE_OFF;
	return XDP_PASS;
}

/* Echo request to a VIP: answered from the VIP. */
static __always_inline int icmp_echo(struct xdp_md *ctx, const struct lb_pkt *p,
				     enum lb_reason *why)
{
	void *data = pkt_data(ctx), *end = pkt_end(ctx);
	struct ethhdr *eth = data;
	__u8 mac[6];

	if ((void *)(eth + 1) > end)
		return XDP_PASS;
	__builtin_memcpy(mac, eth->h_source, 6);
	__builtin_memcpy(eth->h_source, eth->h_dest, 6);
	__builtin_memcpy(eth->h_dest, mac, 6);
	if (p->flow.family == WS_AF_INET) {
		struct iphdr *iph = data + LB_L3_OFF;
		struct icmphdr *ic = data + LB_L4_OFF_V4;

		if ((void *)(ic + 1) > end)
			return XDP_PASS;
		__u16 *ttl_word = (__u16 *)&iph->ttl; /* TTL and protocol */
		__u16 old_word = *ttl_word, new_word = old_word;

		/* Swapped addresses leave the header's sum as it was; the TTL's change is
		 * applied incrementally, so the answer keeps the checksum the request had. The
		 * word is written whole: a byte store then a 16-bit load of it may be reordered. */
		iph->saddr = *(__be32 *)p->flow.dst;
		iph->daddr = *(__be32 *)p->flow.src;
		((__u8 *)&new_word)[0] = 64;
		*ttl_word = new_word;
		iph->check = csum_apply(iph->check, csum_diff16(0, old_word, new_word));
		ic->type = 0;
		ic->checksum = csum_apply(ic->checksum, csum_diff16(0, bpf_htons(0x0800), 0));
	} else {
		struct ipv6hdr *ip6h = data + LB_L3_OFF;
		struct icmp6hdr *ic = data + LB_L4_OFF_V6;

		if ((void *)(ic + 1) > end)
			return XDP_PASS;
		/* Swapped addresses leave the pseudo-header sum as it was. */
		__builtin_memcpy(&ip6h->saddr, p->flow.dst, 16);
		__builtin_memcpy(&ip6h->daddr, p->flow.src, 16);
		ip6h->hop_limit = 64;
		ic->icmp6_type = 129;
		ic->icmp6_cksum = csum_apply(ic->icmp6_cksum,
					     csum_diff16(0, bpf_htons(128 << 8), bpf_htons(129 << 8)));
	}
	*why = LB_ICMP_ECHO;
	return tx_back(ctx);
}

/* Frag-needed / packet-too-big about a VIP's flow (it quotes VIP:VPORT -> client): to the
 * real that flow goes to, translated for a NAT or full-NAT real (lb_icmp.h). */
static __always_inline int icmp_too_big(struct xdp_md *ctx, const struct lb_pkt *p,
					enum lb_reason *why)
{
	void *data = pkt_data(ctx), *end = pkt_end(ctx);
	int v4 = p->flow.family == WS_AF_INET;
	void *inner = data + (v4 ? LB_L4_OFF_V4 : LB_L4_OFF_V6) + 8;
	struct lb_flow f = {};
	struct lb_vip *vip;
	struct lb_real *real;
	__be16 *ports;
	__u32 slot, cpu = bpf_get_smp_processor_id();
	void *table;

	*why = LB_PASS_ICMP;
	if (v4) {
		struct iphdr *iph = inner;

		if ((void *)(iph + 1) + 4 > end || iph->ihl != 5)
			return XDP_PASS;
		*(__be32 *)f.src = iph->daddr;
		*(__be32 *)f.dst = iph->saddr;
		f.proto = iph->protocol;
		ports = (void *)(iph + 1);
	} else {
		struct ipv6hdr *ip6h = inner;

		if ((void *)(ip6h + 1) + 4 > end)
			return XDP_PASS;
		copy16(f.src, (__u8 *)&ip6h->daddr);
		copy16(f.dst, (__u8 *)&ip6h->saddr);
		f.proto = ip6h->nexthdr;
		ports = (void *)(ip6h + 1);
	}
	if (f.proto != WS_IPPROTO_TCP && f.proto != WS_IPPROTO_UDP)
		return XDP_PASS;
	f.family = p->flow.family;
	f.sport = ports[1];
	f.dport = ports[0];
	vip = find_vip(f.dst, f.dport, f.proto, f.family);
	if (!vip)
		return XDP_PASS;
	/* The client's flow as its packets name it: this CPU's entry, else the shared forward
	 * entry (the connection's SYN ran elsewhere), else, for DR and tunnel only, where its
	 * hash points. An ICMP never schedules a NAT connection. */
	__u32 hash = flow_hash(&f);
	struct lb_conn *c = NULL;
	struct lb_rev *fw = NULL;
	__be16 lport = 0;
	__u8 laddr = 0;
	int known = 1;

	table = bpf_map_lookup_elem(&conns, &cpu);
	if (table)
		c = bpf_map_lookup_elem(table, &f);
	if (c) {
		slot = c->real;
		laddr = c->laddr;
		lport = c->lport;
	} else {
		struct lb_flow k = f;

		k.pad[0] = LB_FLOW_FWD;
		fw = conn_entry(&k);
		if (fw) {
			slot = fw->real;
			laddr = fw->laddr;
			lport = fw->lport;
		} else if (pick(vip, hash, 0, &slot)) {
			return XDP_PASS;
		} else {
			known = 0;
		}
	}
	real = bpf_map_lookup_elem(&reals, &slot);
	if (!real || !real->family)
		return XDP_PASS;
	int v;

	if (real->mode == LB_MODE_DR && LB_HAS_MODE(LB_MODE_DR)) {
		v = fwd_dr(ctx, p, real, slot, why);
	} else if (real->mode == LB_MODE_TUNNEL && LB_HAS_MODE(LB_MODE_TUNNEL)) {
		/* The connection's own outer source (its hash, not the ICMP's); never an ICMP
		 * answered with an ICMP. */
		struct lb_pkt q = *p;

		q.df = 0;
		v = fwd_tunnel(ctx, &q, real, slot, hash, why);
	} else if ((real->mode == LB_MODE_NAT && LB_HAS_MODE(LB_MODE_NAT)) ||
		   (real->mode == LB_MODE_FNAT && LB_HAS_MODE(LB_MODE_FNAT))) {
		struct lb_laddr *la = NULL;

		if (!known) {
			*why = LB_PASS_ICMP_NAT;
			return XDP_PASS;
		}
		if (real->mode == LB_MODE_FNAT) {
			__u32 key = vip->id * LB_MAX_LADDRS + laddr;

			la = bpf_map_lookup_elem(&laddrs, &key);
			if (!la) {
				*why = LB_PASS_NO_LADDR;
				return XDP_PASS;
			}
		}
		return icmp_to_real(ctx, p, &f, real, slot, la, lport, why);
	} else {
		*why = LB_PASS_MODE_OFF;
		return XDP_PASS;
	}
	if (v == XDP_PASS)
		return XDP_PASS;
	*why = LB_ICMP_TOO_BIG_FWD;
	return v;
}

/* Martian addresses: LB_DROP_MARTIAN for those the kernel always drops, LB_PASS_MARTIAN for
 * those whose fate depends on its settings or that are its own to deliver, 0 for neither.
 * IPv4, as ip_route_input_slow: a source in 0/8, multicast or 255.255.255.255, a destination
 * in 0/8 are dropped; a loopback source or destination is dropped unless route_localnet is on
 * (the kernel's); a multicast or limited-broadcast destination is never forwarded (the
 * kernel's). 240/4 is not martian to Linux. IPv6, as ip6_rcv_core and ip6_forward: a multicast
 * or unspecified source and a loopback source or destination are dropped, and so is a
 * v4-mapped source (every Linux real drops its SYNs, tcp_v6_conn_request; full-NAT would hide
 * it from the real); a multicast destination is the kernel's. */
static __always_inline int martian(const struct lb_pkt *p)
{
	const __u8 *s = p->flow.src, *d = p->flow.dst;
	const __u32 *s32 = (const __u32 *)s, *d32 = (const __u32 *)d;

	if (p->flow.family == WS_AF_INET) {
		if (s[0] == 0 || (s[0] & 0xf0) == 0xe0 || s32[0] == 0xffffffff || d[0] == 0)
			return LB_DROP_MARTIAN;
		if (s[0] == 127 || d[0] == 127 || (d[0] & 0xf0) == 0xe0 || d32[0] == 0xffffffff)
			return LB_PASS_MARTIAN;
		return 0;
	}
	if (s[0] == 0xff)
		return LB_DROP_MARTIAN;
	if (s32[0] == 0 && s32[1] == 0 &&
	    ((s32[2] == 0 && (s32[3] == 0 || s32[3] == bpf_htonl(1))) ||
	     s32[2] == bpf_htonl(0xffff)))
		return LB_DROP_MARTIAN;
	if (d32[0] == 0 && d32[1] == 0 && d32[2] == 0 && d32[3] == bpf_htonl(1))
		return LB_DROP_MARTIAN;
	if (d[0] == 0xff)
		return LB_PASS_MARTIAN;
	return 0;
}

/* Whether the frame is this host's to act on: -1 if so, else the verdict (and why). Only a
 * frame sent to the ingress interface's own MAC is: XDP runs before the kernel's receive
 * path, which marks a frame for another host PACKET_OTHERHOST and drops it (ip_rcv), and never
 * forwards one that came as a broadcast or multicast (ip_forward takes PACKET_HOST only). Then
 * its addresses must not be martian. Checked only for a frame the program would forward or
 * answer: one lookup and a few compares, off the path of everything that goes to the kernel
 * anyway. */
static __always_inline int admit(struct xdp_md *ctx, const struct lb_pkt *p, enum lb_reason *why)
{
	struct ethhdr *eth = pkt_data(ctx);
	__u32 ifindex = ctx->ingress_ifindex;
	struct lb_ifmac *own;
	int m;

	if ((void *)(eth + 1) > pkt_end(ctx)) {
		*why = LB_PASS_BAD_HEADER;
		return XDP_PASS;
	}
	if (eth->h_dest[0] & 1) {
		*why = LB_PASS_MAC_MULTICAST;
		return XDP_PASS;
	}
	own = bpf_map_lookup_elem(&if_macs, &ifindex);
	if (!own) {
		*why = LB_PASS_MAP;
		return XDP_PASS;
	}
	if (*(__u32 *)eth->h_dest != *(__u32 *)own->mac ||
	    *(__u16 *)(eth->h_dest + 4) != *(__u16 *)(own->mac + 4)) {
		*why = LB_PASS_NOT_OUR_MAC;
		return XDP_PASS;
	}
	m = martian(p);
	if (m) {
		*why = m;
		return m == LB_DROP_MARTIAN ? XDP_DROP : XDP_PASS;
	}
	return -1;
}

/* A later fragment (offset > 0, no ports) of a TCP or UDP datagram: where its first
 * fragment went, with the same translation of the addresses (the transport checksum, in the
 * first fragment, was adjusted there for the whole datagram). One whose first fragment was
 * not seen (out of order, evicted, older than the reassembly timeout) cannot be placed: to a
 * VIP address it is dropped and counted, as a host drops an incomplete datagram (no ICMP:
 * Linux's ip_expire answers only when it holds the first fragment), since the kernel, which
 * does not own the VIP, could only route it elsewhere; to any other address it is the
 * kernel's. */
static __always_inline int serve_frag(struct xdp_md *ctx, const struct lb_pkt *p,
				      enum lb_reason *why)
{
	struct lb_frag_key k;
	struct lb_frag *e;
	struct lb_real *real;
	__u32 slot;
	int v;

	frag_key(&k, p);
	e = bpf_map_lookup_elem(&frags, &k);
	if (e && lb_now() - e->seen_ns > LB_FRAG_TIMEOUT_NS)
		e = NULL;
	if (!e && !find_vip(p->flow.dst, 0,
			    p->flow.family == WS_AF_INET ? WS_IPPROTO_ICMP : WS_IPPROTO_ICMPV6,
			    p->flow.family)) {
		*why = LB_PASS_FRAGMENT;
		return XDP_PASS;
	}
	v = admit(ctx, p, why);
	if (v >= 0)
		return v;
	if (!e) {
		*why = LB_DROP_FRAG_UNPLACED;
		return XDP_DROP;
	}
	/* Spent: not forwarded, and not answered here (IPv4's icmp_send answers a first
	 * fragment only): the kernel's, whose forwarding drops it. */
	if (p->ttl <= 1) {
		*why = LB_PASS_TTL;
		return XDP_PASS;
	}
	slot = e->real;
	real = bpf_map_lookup_elem(&reals, &slot);
	if (!real || !real->family) {
		*why = LB_PASS_NO_REAL;
		return XDP_PASS;
	}
	account(e->service, slot, 0, 0, p->l3_len);
	v = XDP_PASS;
	*why = LB_PASS_MODE_OFF;
	if (real->mode == LB_MODE_DR && LB_HAS_MODE(LB_MODE_DR)) {
		v = fwd_dr(ctx, p, real, slot, why);
	} else if (real->mode == LB_MODE_TUNNEL && LB_HAS_MODE(LB_MODE_TUNNEL)) {
		v = fwd_tunnel(ctx, p, real, slot, e->hash, why);
	} else if (real->mode == LB_MODE_NAT && LB_HAS_MODE(LB_MODE_NAT)) {
		v = nat_forward(ctx, p, real, slot, 0, 0, 0, why);
	} else if (real->mode == LB_MODE_FNAT && LB_HAS_MODE(LB_MODE_FNAT)) {
		__u32 key = e->service * LB_MAX_LADDRS + e->laddr;
		struct lb_laddr *la = bpf_map_lookup_elem(&laddrs, &key);

		if (!la) {
			*why = LB_PASS_NO_LADDR;
			return XDP_PASS;
		}
		v = nat_forward(ctx, p, real, slot, la, 0, 0, why);
	}
	if (v != XDP_PASS)
		count(LB_FRAG_FOLLOWED);
	return v;
}

/* Whether the frame's TCP/UDP checksum may still be partial (see lb_complete_csum). */
static __always_inline int partial_csum(struct xdp_md *ctx, const struct lb_pkt *p)
{
	void *data = pkt_data(ctx), *end = pkt_end(ctx);

	if (p->flow.family == WS_AF_INET) {
		struct iphdr *iph = data + LB_L3_OFF;

		return (void *)(iph + 1) <= end && ws_l4_csum_may_be_partial_v4(iph, end);
	}
	struct ipv6hdr *ip6h = data + LB_L3_OFF;

	return (void *)(ip6h + 1) <= end && ws_l4_csum_may_be_partial_v6(ip6h, end);
}

SEC("xdp")
int lb_xdp(struct xdp_md *ctx)
{
	enum lb_reason why = LB_PASS_NOT_VIP;
	struct lb_pkt p = {};
	struct lb_vip *vip;
	int verdict = XDP_PASS;

	if (parse(ctx, &p, &why) < 0)
		goto out;
	if (p.frag == LB_FRAG_LATER) {
		verdict = serve_frag(ctx, &p, &why);
		goto out;
	}
	if (p.flow.proto == WS_IPPROTO_TCP || p.flow.proto == WS_IPPROTO_UDP) {
		struct lb_rev *r = NULL;

		vip = find_vip(p.flow.dst, p.flow.dport, p.flow.proto, p.flow.family);
		/* A reply's fragments are the kernel's: its later fragments have no entry. */
		if (!vip && p.frag) {
			why = LB_PASS_FRAGMENT;
			goto out;
		}
		if (!vip && LB_HAS_NAT)
			r = reply_entry(&p);
		if (!vip && !r) {
			why = LB_PASS_NOT_VIP;
			goto out;
		}
		verdict = admit(ctx, &p, &why);
		if (verdict >= 0)
			goto out;
		verdict = XDP_PASS;
		if (p.ttl <= 1) {
			/* Spent: not forwarded. Sent to a VIP or a full-NAT local address (this
			 * host's own), it is answered with time exceeded from that address, as
			 * IPVS answers; a NAT reply (to the client) is the kernel's, whose
			 * forwarding answers it as a router does. */
			if (vip || (r->flags & LB_REV_FNAT))
				verdict = send_icmp_error(ctx, &p, 0, 1, &why);
			else
				why = LB_PASS_TTL;
			goto out;
		}
		if (r)
			note_syn_ack(ctx, &p, r);
		if (partial_csum(ctx, &p)) {
			if (lb_complete_csum(ctx, p.flow.family == WS_AF_INET6, p.flow.proto)) {
				why = LB_PASS_CSUM_PARTIAL;
				goto out;
			}
			count(LB_CSUM_COMPLETED);
		}
		if (vip) {
			verdict = serve(ctx, &p, vip, &why);
			goto out;
		}
		verdict = nat_reply(ctx, &p, r, &why);
		goto out;
	}
	if (p.flow.proto == WS_IPPROTO_ICMP || p.flow.proto == WS_IPPROTO_ICMPV6) {
		__u8 *l4 = pkt_data(ctx) + (p.flow.family == WS_AF_INET ? LB_L4_OFF_V4 : LB_L4_OFF_V6);
		__u8 type;

		/* ICMP with IPv4 options (an echo answer would have to echo them, an error's
		 * quote follows them) is not built: the kernel's. */
		if (p.hl != 20 && p.flow.family == WS_AF_INET) {
			why = LB_PASS_IP_OPTIONS;
			goto out;
		}

		if ((void *)(l4 + 8) > pkt_end(ctx))
			goto out;
		type = l4[0];
		int too_big = (p.flow.family == WS_AF_INET && type == 3 && l4[1] == 4) ||
			      (p.flow.family == WS_AF_INET6 && type == 2);

		vip = find_vip(p.flow.dst, 0, p.flow.proto, p.flow.family);
		if (!vip) {
			/* To a full-NAT local address or a NAT client: maybe about a packet
			 * sent towards a real (one reverse-table lookup, for too-big only). */
			why = LB_PASS_NOT_VIP;
			if (!too_big || !LB_HAS_NAT)
				goto out;
			verdict = admit(ctx, &p, &why);
			if (verdict >= 0)
				goto out;
			verdict = XDP_PASS;
			/* An ICMP error is never answered with one: a spent one is the kernel's. */
			if (p.ttl <= 1)
				why = LB_PASS_TTL;
			else
				verdict = icmp_to_client(ctx, &p, &why);
			goto out;
		}
		verdict = admit(ctx, &p, &why);
		if (verdict >= 0)
			goto out;
		verdict = XDP_PASS;
		why = LB_PASS_ICMP;
		if ((p.flow.family == WS_AF_INET && type == 8) ||
		    (p.flow.family == WS_AF_INET6 && type == 128))
			verdict = icmp_echo(ctx, &p, &why);
		else if (too_big && p.ttl <= 1)
			why = LB_PASS_TTL; /* never an ICMP error answered with one */
		else if (too_big)
			verdict = icmp_too_big(ctx, &p, &why);
		goto out;
	}
	why = LB_PASS_NOT_VIP;
out:
	count(why);
	return verdict;
}
