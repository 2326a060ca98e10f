/* L3 router module: forwards what the kernel's FIB would forward, exactly as the kernel
 * would, and hands everything else to the kernel. */
#ifndef FP_ROUTER_H
#define FP_ROUTER_H

#include "fp_filter.h"

enum router_verdict {
	RT_REDIRECT,
	RT_DROP,
	RT_PASS,
};

/* What the router needs from the hook it runs at (XDP or TC ingress). */
struct rt_in {
	void *ctx;       /* for bpf_fib_lookup: an xdp_md or an __sk_buff */
	__u32 in_if;     /* ingress ifindex */
	__u32 l3_len;    /* bytes from the L3 header to the packet's end (all of an skb) */
	/* The length the egress MTU is checked against: one segment's for a GSO skb, as the
	 * kernel's forwarding path checks it (skb_gso_validate_network_len); 0 for the
	 * header's own length. */
	__u32 mtu_len;
	/* An skb: its CHECKSUM_COMPLETE sum must follow the header edits (XDP has none). */
	int tc;
};

static __always_inline enum fp_reason fib_reason(int rc)
{
	switch (rc) {
	case BPF_FIB_LKUP_RET_NOT_FWDED:
		return FP_PASS_NOT_FWDED;
	case BPF_FIB_LKUP_RET_BLACKHOLE:
	case BPF_FIB_LKUP_RET_UNREACHABLE:
	case BPF_FIB_LKUP_RET_PROHIBIT:
		return FP_PASS_UNREACHABLE;
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		return FP_PASS_NO_NEIGH;
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:
		return FP_PASS_FRAG_NEEDED;
	case BPF_FIB_LKUP_RET_FWD_DISABLED:
		return FP_PASS_FWD_DISABLED;
	default:
		return FP_PASS_FIB_OTHER;
	}
}

/* The ports the kernel's flow dissector reports for a transport header at `l4` (the
 * fib_rules_require_fldissect lookups: __skb_flow_get_ports, proto_ports_offset): the
 * first four bytes for TCP, UDP, UDP-Lite, DCCP, SCTP and ESP (its SPI), the next four for
 * AH, none for anything else or a header cut short (`end`: the packet's last byte + 1). */
static __always_inline void flow_ports(__u8 proto, const void *l4, const void *end,
				       const void *data_end, __be16 *sport, __be16 *dport)
{
	const __be16 *ports;
	int off;

	*sport = 0;
	*dport = 0;
	switch (proto) {
	case WS_IPPROTO_TCP:
	case WS_IPPROTO_UDP:
	case WS_IPPROTO_UDPLITE:
	case WS_IPPROTO_DCCP:
	case WS_IPPROTO_SCTP:
	case WS_IPPROTO_ESP:
		off = 0;
		break;
	case WS_IPPROTO_AH:
		off = 4;
		break;
	default:
		return;
	}
	ports = l4 + off;
	if ((const void *)(ports + 2) > end || (const void *)(ports + 2) > data_end)
		return;
	*sport = ports[0];
	*dport = ports[1];
}

/* Checks the FIB answer against our egress ports, then rewrites the MACs. The caller has
 * already made every check that could still turn the packet back to the kernel. */
static __always_inline int egress_ok(struct bpf_fib_lookup *fib, __u32 in_ifindex, enum fp_reason *why)
{
	__u32 oif = fib->ifindex;

	if (oif == in_ifindex) {
		*why = FP_PASS_SAME_IF;
		return 0;
	}
	if (!bpf_map_lookup_elem(&tx_ports, &oif)) {
		*why = FP_PASS_NO_TX_PORT;
		return 0;
	}
	return 1;
}

/* The kernel's source check (fib_validate_source) on a port with rp_filter on, strict or
 * loose: a packet whose source the FIB routes back out the port it came in on, by a unicast
 * route, passes both. Anything else is the kernel's: a source routed out another port may
 * still pass (loose mode, or another nexthop of a multipath route), and one with no unicast
 * route is the kernel's to drop and count (IPReversePathFilter). With the policy rules at the
 * kernel's defaults the lookup depends on nothing else.
 *
 * With other policy rules, or once a user has added a local route (ctl.source_check_v4), the
 * kernel asks the reverse question even with rp_filter off, and drops a source it finds local
 * or broadcast; and it asks as a rule sees it: from the
 * forward answer's egress port (a rule's `iif` sees that port), with the protocol and the
 * ports swapped. Older kernels did not swap them: where a rule looks at ports, both are
 * asked, and the packet is fast-pathed only if both pass. The helper refuses a lookup from a
 * port that does not forward (FWD_DISABLED); the kernel then decides. */
static __always_inline int source_lookup_ok_v4(const struct rt_in *in, const struct iphdr *iph,
					       const struct fp_ctl *c, __u32 out_if,
					       __be16 rev_sport, __be16 rev_dport)
{
	struct bpf_fib_lookup rev = {};
	int rc;

	rev.family = WS_AF_INET;
	rev.tos = iph->tos;
	rev.ipv4_src = iph->daddr;
	rev.ipv4_dst = iph->saddr;
	rev.ifindex = in->in_if;
	if (c->policy_rules_v4) {
		rev.ifindex = out_if;
		rev.l4_protocol = iph->protocol;
		rev.sport = rev_sport;
		rev.dport = rev_dport;
	}
	rc = bpf_fib_lookup(in->ctx, &rev, sizeof(rev), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return 0;
	return !c->rp_filter_v4 || rev.ifindex == in->in_if;
}

static __always_inline int rp_filter_ok_v4(const struct rt_in *in, const struct iphdr *iph,
					   const struct fp_ctl *c, __u32 out_if, __be16 sport,
					   __be16 dport)
{
	if (!source_lookup_ok_v4(in, iph, c, out_if, dport, sport))
		return 0;
	return c->policy_rules_v4 < 2 || sport == dport ||
	       source_lookup_ok_v4(in, iph, c, out_if, sport, dport);
}

/* rp_filter_ok_v4 through the source cache (rp_cache_v4) when `cache` is set: a source that
 * passed under generation `gen`, read before any FIB lookup of this packet, passes again. */
static __always_inline int rp_filter_cached_ok_v4(const struct rt_in *in, const struct iphdr *iph,
						  const struct fp_ctl *c, __u32 out_if,
						  __be16 sport, __be16 dport, int cache,
						  __u32 gen)
{
	struct rp_cache_v4 *seen = NULL;

	if (cache) {
		__u32 slot = (bpf_ntohl(iph->saddr) * 0x9E3779B1u) >> (32 - RP_CACHE_BITS);

		seen = bpf_map_lookup_elem(&rp_cache_v4, &slot);
		if (seen && seen->gen == gen && seen->src == iph->saddr &&
		    seen->in_ifindex == in->in_if && seen->tos == iph->tos)
			return 1;
	}
	if (!rp_filter_ok_v4(in, iph, c, out_if, sport, dport))
		return 0;
	if (seen) {
		seen->gen = gen;
		seen->src = iph->saddr;
		seen->in_ifindex = in->in_if;
		seen->tos = iph->tos;
	}
	return 1;
}

/* Whether `saddr` is one of this namespace's IPv4 addresses (fp_ctl.local_v4). */
static __always_inline int local_source_v4(const struct fp_ctl *c, __be32 saddr)
{
	if (c->local_v4_in_map)
		return bpf_map_lookup_elem(&local_v4, &saddr) != NULL;
#pragma unroll
	for (int i = 0; i < LOCAL_V4_INLINE; i++)
		if (i < c->local_v4_n && c->local_v4[i] == saddr)
			return 1;
	return 0;
}

static __always_inline void rewrite_macs(struct ethhdr *eth, struct bpf_fib_lookup *fib)
{
	__builtin_memcpy(eth->h_dest, fib->dmac, WS_ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib->smac, WS_ETH_ALEN);
}

/* ICMP errors, the types icmp_is_err and icmpv6_is_err name. Among a multipath route's next
 * hops the kernel picks for an error by hashing the packet it quotes (ip_multipath_l3_keys,
 * ip6_multipath_l3_keys), which a remote router's error does not share addresses with; the FIB
 * helper hashes the header it is given. Errors are rare: the kernel forwards them all. */
static __always_inline int icmp_error_v4(const struct iphdr *iph, void *data_end)
{
	const __u8 *type = (const void *)(iph + 1); /* ihl is 5 here */

	/* A non-first fragment starts with payload, not a type, and the kernel hashes it by
	 * its own addresses (ip_multipath_l3_keys). */
	if (iph->protocol != WS_IPPROTO_ICMP || (iph->frag_off & bpf_htons(WS_IP_OFFSET)) ||
	    (void *)(type + 1) > data_end)
		return 0;
	/* destination unreachable, source quench, redirect, time exceeded, parameter problem */
	return *type == 3 || *type == 4 || *type == 5 || *type == 11 || *type == 12;
}

static __always_inline int icmp_error_v6(const struct ipv6hdr *ip6h, void *data_end)
{
	const __u8 *type = (const void *)(ip6h + 1);

	if (ip6h->nexthdr != WS_IPPROTO_ICMPV6 || (void *)(type + 1) > data_end)
		return 0;
	/* destination unreachable, packet too big, time exceeded, parameter problem */
	return *type >= 1 && *type <= 4;
}

/* Router and neighbour solicitations and advertisements, and redirects (ICMPv6 133-137). */
static __always_inline int ndisc_v6(const struct ipv6hdr *ip6h, void *data_end)
{
	const __u8 *type = (const void *)(ip6h + 1);

	if (ip6h->nexthdr != WS_IPPROTO_ICMPV6 || (void *)(type + 1) > data_end)
		return 0;
	return *type >= 133 && *type <= 137;
}

/* IPv4 source or destination the kernel treats specially (0/8, 127/8, multicast, class E,
 * limited broadcast): never fast-pathed. */
static __always_inline int ipv4_martian(__be32 addr)
{
	__u8 first = bpf_ntohl(addr) >> 24;

	return first == 0 || first == 127 || first >= 224;
}

static __always_inline enum router_verdict router_v4(const struct rt_in *in, struct fp_pkt *p,
						     const struct fp_ctl *c, __u32 *oif,
						     enum fp_reason *why)
{
	struct iphdr *iph = p->l3;
	struct bpf_fib_lookup fib = {};
	__u32 hit = FILTER_HIT_NONE;
	__u16 tot_len;
	__u32 check;
	int fragment;
	int rc;

	if ((void *)(iph + 1) > p->data_end) {
		*why = FP_PASS_BAD_HEADER;
		return RT_PASS;
	}
	if (iph->version != 4) {
		*why = FP_PASS_BAD_HEADER;
		return RT_PASS;
	}
	if (iph->ihl != 5) {
		*why = FP_PASS_IP_OPTIONS;
		return RT_PASS;
	}
	tot_len = bpf_ntohs(iph->tot_len);
	/* Padding or truncation: the kernel trims or drops; let it. */
	if (tot_len != in->l3_len || ws_ipv4_hdr_csum_check(iph) != 0) {
		*why = FP_PASS_BAD_HEADER;
		return RT_PASS;
	}
	/* Without conntrack the kernel forwards a fragment as it is, and so does the router: a
	 * policy rule sees its ports as 0 (below), the filter takes it as nftables does
	 * (filter_v4). With conntrack its defrag holds every fragment until the datagram is
	 * whole (reassembly_v4): the kernel's. */
	fragment = (iph->frag_off & bpf_htons(WS_IP_MF | WS_IP_OFFSET)) != 0;
	if (fragment && *(volatile __u8 *)&c->reassembly_v4) {
		*why = FP_PASS_FRAGMENT;
		return RT_PASS;
	}
	if (iph->ttl <= 1) {
		*why = FP_PASS_TTL;
		return RT_PASS;
	}
	if (ipv4_martian(iph->saddr) || ipv4_martian(iph->daddr)) {
		*why = FP_PASS_MARTIAN;
		return RT_PASS;
	}
	/* A source that is one of our own addresses: the kernel drops it (or, with accept_local,
	 * forwards it); either way it is the kernel's. */
	if (local_source_v4(c, iph->saddr)) {
		*why = FP_PASS_MARTIAN;
		return RT_PASS;
	}
	/* An skb keeps its checksum state across a TC redirect; an XDP frame does not. A
	 * fragment's is complete: the kernel finishes a checksum before it fragments. */
	if (!in->tc && !fragment && ws_l4_csum_may_be_partial_v4(iph, p->data_end)) {
		*why = FP_PASS_CSUM_PARTIAL;
		return RT_PASS;
	}
	if (icmp_error_v4(iph, p->data_end)) {
		*why = FP_PASS_ICMP_ERROR;
		return RT_PASS;
	}

	/* A cached answer stands for bpf_fib_lookup only if it is of this generation and for the
	 * same destination, TOS and ingress port, and the packet is no longer than one the FIB
	 * passed: with no policy rules and no multipath those are all the FIB's answer depends
	 * on, and any change to it comes with an rtnetlink event, hence a new generation. */
	__u32 in_if = in->in_if;
	__u16 mtu_len = in->mtu_len ? in->mtu_len : tot_len;
	struct route_cache_v4 *hop = NULL;

	if (c->route_mtu_v4 && mtu_len > c->route_mtu_v4) {
		*why = FP_PASS_FRAG_NEEDED;
		return RT_PASS;
	}
	__be16 sport = 0, dport = 0;
	enum fp_reason forwarded = FP_FORWARDED;
	enum stale_hop stale = HOP_FRESH;
	__u64 *handed = NULL;
	__u32 gen = 0;
	/* Read once: both caches must agree on whether `gen` was read. */
	int cache = *(volatile __u8 *)&c->route_cache_v4;

	/* Only a policy rule looks at them (the multipath hashes the helper may take, policy
	 * 0, do not): without rules no packet pays for reading them. The kernel's flow
	 * dissector reads none from a fragment, the first one included, so neither do we. */
	if (c->policy_rules_v4 && !fragment)
		flow_ports(iph->protocol, iph + 1, (void *)iph + tot_len, p->data_end, &sport,
			   &dport);

	if (cache) {
		__u32 slot = (bpf_ntohl(iph->daddr) * 0x9E3779B1u) >> (32 - ROUTE_CACHE_BITS);

		/* Read before the FIB is asked: an answer stored under it is stale once a
		 * newer generation is written. */
		gen = *(volatile __u32 *)&c->route_gen;
		hop = bpf_map_lookup_elem(&route_cache_v4, &slot);
	}
	if (hop && hop->gen == gen && hop->dst == iph->daddr && hop->in_ifindex == in_if &&
	    hop->tos == iph->tos && mtu_len <= hop->max_len) {
		fib.ifindex = hop->oif;
		__builtin_memcpy(fib.dmac, hop->dmac, WS_ETH_ALEN);
		__builtin_memcpy(fib.smac, hop->smac, WS_ETH_ALEN);
		forwarded = FP_FORWARDED_CACHED;
	} else {
		fib.family = WS_AF_INET;
		fib.tos = iph->tos;
		fib.l4_protocol = iph->protocol;
		fib.tot_len = mtu_len;
		fib.ipv4_src = iph->saddr;
		fib.ipv4_dst = iph->daddr;
		fib.sport = sport;
		fib.dport = dport;
		fib.ifindex = in_if;
		rc = bpf_fib_lookup(in->ctx, &fib, sizeof(fib), 0);
		if (rc != BPF_FIB_LKUP_RET_SUCCESS) {
			*why = fib_reason(rc);
			return RT_PASS;
		}
		if (!egress_ok(&fib, in_if, why))
			return RT_PASS;
		stale = stale_next_hop(&fib, &handed);
		if (hop && stale == HOP_FRESH) {
			hop->gen = gen;
			hop->dst = iph->daddr;
			hop->in_ifindex = in_if;
			hop->oif = fib.ifindex;
			hop->max_len = mtu_len;
			hop->tos = iph->tos;
			__builtin_memcpy(hop->dmac, fib.dmac, WS_ETH_ALEN);
			__builtin_memcpy(hop->smac, fib.smac, WS_ETH_ALEN);
		}
	}
	/* After the forward answer, as the kernel validates the source only of a packet it
	 * routes; per packet, since the route cache is keyed by destination (the source cache
	 * keeps the sources that passed). */
	if ((c->rp_filter_v4 || c->policy_rules_v4 || c->source_check_v4) &&
	    !rp_filter_cached_ok_v4(in, iph, c, fib.ifindex, sport, dport, cache, gen)) {
		*why = FP_PASS_RP_FILTER;
		return RT_PASS;
	}
	if (cfg_filter_v4 && c->filter_v4) {
		int f = filter_v4(p, iph, fib.ifindex, c, &hit);

		if (f == FILTER_DROP) {
			count_filter_hit(hit, in->l3_len);
			*why = FP_DROPPED_FILTER;
			return RT_DROP;
		}
		if (f == FILTER_KERNEL) {
			*why = FP_PASS_FILTER;
			return RT_PASS;
		}
	}
	/* Last: a packet the kernel would not have forwarded does not drive the neighbour. */
	if (stale == HOP_STALE) {
		hand_stale(handed);
		*why = FP_PASS_NEIGH_STALE;
		return RT_PASS;
	}

	/* The kernel's own ip_decrease_ttl(): same bytes out as the slow path. The header's
	 * one's-complement sum does not change, so neither does an skb's CHECKSUM_COMPLETE. */
	check = iph->check;
	check += bpf_htons(0x0100);
	iph->check = (__u16)(check + (check >= 0xFFFF));
	iph->ttl--;
	rewrite_macs(p->eth, &fib);
	count_filter_hit(hit, in->l3_len);
	*oif = fib.ifindex;
	*why = forwarded;
	return RT_REDIRECT;
}

static __always_inline int ipv6_special(const struct in6_addr *a)
{
	__u32 w0 = bpf_ntohl(a->in6_u.u6_addr32[0]);

	/* multicast ff00::/8, link-local fe80::/10 */
	if ((w0 >> 24) == 0xff || (w0 & 0xffc00000) == 0xfe800000)
		return 1;
	/* :: and ::1 (and the rest of ::/96, IPv4-compatible, which the kernel rejects) */
	if (w0 == 0 && a->in6_u.u6_addr32[1] == 0 && a->in6_u.u6_addr32[2] == 0)
		return 1;
	return 0;
}

static __always_inline int ipv6_addr_equal(const struct in6_addr *a, const struct in6_addr *b)
{
	return ((a->in6_u.u6_addr32[0] ^ b->in6_u.u6_addr32[0]) |
		(a->in6_u.u6_addr32[1] ^ b->in6_u.u6_addr32[1]) |
		(a->in6_u.u6_addr32[2] ^ b->in6_u.u6_addr32[2]) |
		(a->in6_u.u6_addr32[3] ^ b->in6_u.u6_addr32[3])) == 0;
}

static __always_inline enum router_verdict router_v6(const struct rt_in *in, struct fp_pkt *p,
						     const struct fp_ctl *c, __u32 *oif,
						     enum fp_reason *why)
{
	struct ipv6hdr *ip6h = p->l3;
	struct bpf_fib_lookup fib = {};
	__u32 hit = FILTER_HIT_NONE;
	__u16 payload_len;
	int rc;

	if ((void *)(ip6h + 1) > p->data_end || ip6h->version != 6) {
		*why = FP_PASS_BAD_HEADER;
		return RT_PASS;
	}
	payload_len = bpf_ntohs(ip6h->payload_len);
	if (sizeof(*ip6h) + payload_len != in->l3_len) {
		*why = FP_PASS_BAD_HEADER;
		return RT_PASS;
	}
	if (ip6h->nexthdr == WS_IPPROTO_HOPOPTS) {
		*why = FP_PASS_IP_OPTIONS;
		return RT_PASS;
	}
	if (ip6h->hop_limit <= 1) {
		*why = FP_PASS_TTL;
		return RT_PASS;
	}
	if (ipv6_special(&ip6h->saddr) || ipv6_special(&ip6h->daddr)) {
		*why = FP_PASS_MARTIAN;
		return RT_PASS;
	}
	if (!in->tc && ws_l4_csum_may_be_partial_v6(ip6h, p->data_end)) {
		*why = FP_PASS_CSUM_PARTIAL;
		return RT_PASS;
	}
	if (icmp_error_v6(ip6h, p->data_end)) {
		*why = FP_PASS_ICMP_ERROR;
		return RT_PASS;
	}
	if (c->proxy_ndp && ndisc_v6(ip6h, p->data_end)) {
		*why = FP_PASS_NOT_FWDED;
		return RT_PASS;
	}
	/* As for IPv4, conntrack's defrag holds a fragment (behind these headers too). */
	if (*(volatile __u8 *)&c->reassembly_v6 &&
	    (ip6h->nexthdr == WS_IPPROTO_ROUTING || ip6h->nexthdr == WS_IPPROTO_DSTOPTS ||
	     ip6h->nexthdr == WS_IPPROTO_FRAGMENT)) {
		*why = ip6h->nexthdr == WS_IPPROTO_FRAGMENT ? FP_PASS_FRAGMENT : FP_PASS_IP_OPTIONS;
		return RT_PASS;
	}
	/* The flow dissector walks routing, destination-options and fragment headers to the
	 * ports a policy rule may match; with rules, such a packet is the kernel's. */
	if (*(volatile __u8 *)&c->policy_rules_v6 &&
	    (ip6h->nexthdr == WS_IPPROTO_ROUTING || ip6h->nexthdr == WS_IPPROTO_DSTOPTS ||
	     ip6h->nexthdr == WS_IPPROTO_FRAGMENT)) {
		*why = FP_PASS_IP_OPTIONS;
		return RT_PASS;
	}

	/* As router_v4's cache: same destination and ingress port, no longer a packet than
	 * the FIB passed, the current generation. */
	__u32 in_if = in->in_if;
	__u16 mtu_len = in->mtu_len ? in->mtu_len : sizeof(*ip6h) + payload_len;
	struct route_cache_v6 *hop = NULL;
	enum fp_reason forwarded = FP_FORWARDED;
	enum stale_hop stale = HOP_FRESH;
	__u64 *handed = NULL;
	__u32 gen = 0;

	if (*(volatile __u8 *)&c->route_cache_v6) {
		__u32 h = ip6h->daddr.in6_u.u6_addr32[2] ^ ip6h->daddr.in6_u.u6_addr32[3];
		__u32 slot = (bpf_ntohl(h) * 0x9E3779B1u) >> (32 - ROUTE_CACHE_BITS);

		gen = *(volatile __u32 *)&c->route_gen;
		hop = bpf_map_lookup_elem(&route_cache_v6, &slot);
	}
	if (hop && hop->gen == gen && hop->in_ifindex == in_if && mtu_len <= hop->max_len &&
	    ipv6_addr_equal(&hop->dst, &ip6h->daddr)) {
		fib.ifindex = hop->oif;
		__builtin_memcpy(fib.dmac, hop->dmac, WS_ETH_ALEN);
		__builtin_memcpy(fib.smac, hop->smac, WS_ETH_ALEN);
		forwarded = FP_FORWARDED_CACHED;
	} else {
		fib.family = WS_AF_INET6;
		fib.flowinfo = *(__be32 *)ip6h & bpf_htonl(0x0FFFFFFF);
		fib.l4_protocol = ip6h->nexthdr;
		fib.tot_len = mtu_len;
		__builtin_memcpy(fib.ipv6_src, &ip6h->saddr, sizeof(fib.ipv6_src));
		__builtin_memcpy(fib.ipv6_dst, &ip6h->daddr, sizeof(fib.ipv6_dst));
		if (c->policy_rules_v6)
			flow_ports(ip6h->nexthdr, ip6h + 1, (void *)(ip6h + 1) + payload_len,
				   p->data_end, &fib.sport, &fib.dport);
		fib.ifindex = in_if;
		rc = bpf_fib_lookup(in->ctx, &fib, sizeof(fib), 0);
		if (rc != BPF_FIB_LKUP_RET_SUCCESS) {
			*why = fib_reason(rc);
			return RT_PASS;
		}
		if (!egress_ok(&fib, in_if, why))
			return RT_PASS;
		stale = stale_next_hop(&fib, &handed);
		if (hop && stale == HOP_FRESH) {
			hop->gen = gen;
			hop->in_ifindex = in_if;
			hop->oif = fib.ifindex;
			hop->max_len = mtu_len;
			__builtin_memcpy(hop->dmac, fib.dmac, WS_ETH_ALEN);
			__builtin_memcpy(hop->smac, fib.smac, WS_ETH_ALEN);
			__builtin_memcpy(&hop->dst, &ip6h->daddr, sizeof(hop->dst));
		}
	}
	if (cfg_filter_v6 && c->filter_v6) {
		int f = filter_v6(p, ip6h, fib.ifindex, c, &hit);

		if (f == FILTER_DROP) {
			count_filter_hit(hit, in->l3_len);
			*why = FP_DROPPED_FILTER;
			return RT_DROP;
		}
		if (f == FILTER_KERNEL) {
			*why = FP_PASS_FILTER;
			return RT_PASS;
		}
	}
	if (stale == HOP_STALE) {
		hand_stale(handed);
		*why = FP_PASS_NEIGH_STALE;
		return RT_PASS;
	}

	if (in->tc) {
		/* No header checksum absorbs the change: fold it into an skb's
		 * CHECKSUM_COMPLETE sum (a no-op for other skbs). */
		__be32 before = ((__be32 *)ip6h)[1], after;

		ip6h->hop_limit--;
		after = ((__be32 *)ip6h)[1];
		bpf_csum_update(in->ctx, bpf_csum_diff(&before, 4, &after, 4, 0));
	} else {
		ip6h->hop_limit--;
	}
	rewrite_macs(p->eth, &fib);
	count_filter_hit(hit, in->l3_len);
	*oif = fib.ifindex;
	*why = forwarded;
	return RT_REDIRECT;
}

#endif
