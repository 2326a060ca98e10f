/* Leaving the load balancer: the FIB lookup that names the egress port and MACs, DR (MACs
 * only), the tunnels (IP in IP and GUE), and the ICMP answer for a frame too big to encapsulate. */
#ifndef LB_FWD_H
#define LB_FWD_H

/* Asks the kernel's FIB for the way to `dst` (family `fam`) of an IP packet `tot_len` long.
 * With want_src the FIB also chooses the source address (written back into fib). */
static __always_inline int fib(struct xdp_md *ctx, struct bpf_fib_lookup *fib, __u8 fam,
			       const __u8 *src, const __u8 *dst, __u8 proto, __u32 tot_len,
			       int want_src)
{
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = fam;
	fib->l4_protocol = proto;
	fib->tot_len = tot_len;
	fib->ifindex = ctx->ingress_ifindex;
	if (fam == WS_AF_INET) {
		fib->ipv4_src = *(__be32 *)src;
		fib->ipv4_dst = *(__be32 *)dst;
	} else {
		__builtin_memcpy(fib->ipv6_src, src, 16);
		__builtin_memcpy(fib->ipv6_dst, dst, 16);
	}
	return bpf_fib_lookup(ctx, fib, sizeof(*fib), want_src ? BPF_FIB_LOOKUP_SRC : 0);
}

/* Whether two 16-byte addresses are equal (BPF has no memcmp). */
static __always_inline int same16(const __u8 *a, const __u8 *b)
{
	const __u32 *x = (const __u32 *)a, *y = (const __u32 *)b;

	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2] && x[3] == y[3];
}

/* The way to `real` (slot `slot`): the CPU's cached FIB answer while it is fresh (a second),
 * else the FIB's, which is then cached. Route and neighbour changes reach the packets within
 * that second; a longer packet than the FIB accepted asks it again (the MTU). */
static __always_inline int fib_real(struct xdp_md *ctx, struct bpf_fib_lookup *f, __u32 slot,
				    const struct lb_real *real, const __u8 *src, __u8 proto,
				    __u32 tot_len, int want_src)
{
	__u64 now = lb_now();
	struct lb_nh *nh = bpf_map_lookup_elem(&nh_cache, &slot);
	int rc;

	if (nh && now < nh->until_ns && tot_len <= nh->ok_len &&
	    nh->in_ifindex == ctx->ingress_ifindex && (nh->has_src || !want_src) &&
	    same16(nh->dst, real->addr)) {
		f->ifindex = nh->ifindex;
		__builtin_memcpy(f->smac, nh->smac, 6);
		__builtin_memcpy(f->dmac, nh->dmac, 6);
		if (want_src) {
			if (real->family == WS_AF_INET)
				f->ipv4_src = *(__be32 *)nh->src;
			else
				__builtin_memcpy(f->ipv6_src, nh->src, 16);
		}
		return BPF_FIB_LKUP_RET_SUCCESS;
	}
	rc = fib(ctx, f, real->family, src, real->addr, proto, tot_len, want_src);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS || !nh)
		return rc;
	if (now >= nh->until_ns || !same16(nh->dst, real->addr) ||
	    nh->in_ifindex != ctx->ingress_ifindex || (want_src && !nh->has_src))
		nh->ok_len = 0;
	copy16(nh->dst, real->addr);
	nh->has_src = want_src != 0;
	if (want_src) {
		if (real->family == WS_AF_INET)
			*(__be32 *)nh->src = f->ipv4_src;
		else
			__builtin_memcpy(nh->src, f->ipv6_src, 16);
	}
	nh->ifindex = f->ifindex;
	nh->in_ifindex = ctx->ingress_ifindex;
	if (tot_len > nh->ok_len)
		nh->ok_len = tot_len;
	__builtin_memcpy(nh->smac, f->smac, 6);
	__builtin_memcpy(nh->dmac, f->dmac, 6);
	nh->until_ns = now + 1000000000ULL;
	return rc;
}

static __always_inline int fib_fail(int rc, enum lb_reason *why)
{
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH)
		*why = LB_PASS_NO_NEIGH;
	else if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED)
		*why = LB_PASS_TOO_BIG;
	else if (rc == BPF_FIB_LKUP_RET_NO_SRC_ADDR)
		*why = LB_PASS_NO_SRC;
	else
		*why = LB_PASS_FIB_OTHER;
	return XDP_PASS;
}

/* Takes one from the TTL (IPv4, its checksum updated incrementally) or hop limit of the IP
 * packet at `off`: every packet the program forwards to another host loses one, as a
 * router's does and as IPVS's does (decrement_ttl, every forwarding method, since Linux 5.3).
 * The caller made sure it was above 1 (lb_xdp answers or passes the others). */
static __always_inline void ttl_dec_at(struct xdp_md *ctx, __u32 off, int v4)
{
	void *data = pkt_data(ctx), *end = pkt_end(ctx);

	if (v4) {
		struct iphdr *iph = data + off;
		__u16 *word, old, new;

		if ((void *)(iph + 1) > end)
			return;
		/* The 16-bit word of TTL and protocol, changed as a whole (a byte store then a
		 * 16-bit load of the same word may be reordered by the compiler). */
		word = (__u16 *)&iph->ttl;
		old = *word;
		new = old;
		((__u8 *)&new)[0] -= 1;
		*word = new;
		iph->check = csum_apply(iph->check, csum_diff16(0, old, new));
	} else {
		struct ipv6hdr *ip6h = data + off;

		if ((void *)(ip6h + 1) > end)
			return;
		ip6h->hop_limit -= 1;
	}
}

/* The same, for the packet right behind the Ethernet header. */
static __always_inline void ttl_dec(struct xdp_md *ctx)
{
	struct ethhdr *eth = pkt_data(ctx);

	if ((void *)(eth + 1) > pkt_end(ctx))
		return;
	ttl_dec_at(ctx, LB_L3_OFF, eth->h_proto == bpf_htons(WS_ETH_P_IP));
}

/* Writes the FIB's MACs and sends the frame out of its egress port, as it is. */
static __always_inline int emit_as_is(struct xdp_md *ctx, const struct bpf_fib_lookup *fib)
{
	struct ethhdr *eth = pkt_data(ctx);

	if ((void *)(eth + 1) > pkt_end(ctx))
		return XDP_PASS;
	__builtin_memcpy(eth->h_dest, fib->dmac, 6);
	__builtin_memcpy(eth->h_source, fib->smac, 6);
	if (fib->ifindex == ctx->ingress_ifindex && !cfg_tx_redirect)
		return XDP_TX;
	return bpf_redirect(fib->ifindex, 0);
}

/* A forwarded packet: its TTL or hop limit less one, out of its egress port. */
static __always_inline int emit(struct xdp_md *ctx, const struct bpf_fib_lookup *fib)
{
	ttl_dec(ctx);
	return emit_as_is(ctx, fib);
}

/* Out of the port the frame came in by (an answer to its sender). */
static __always_inline int tx_back(struct xdp_md *ctx)
{
	if (cfg_tx_redirect)
		return bpf_redirect(ctx->ingress_ifindex, 0);
	return XDP_TX;
}

/* DR: the frame as it came, to the real's MAC on the same L2. */
static __always_inline int fwd_dr(struct xdp_md *ctx, const struct lb_pkt *p,
				  const struct lb_real *real, __u32 slot, enum lb_reason *why)
{
	struct bpf_fib_lookup f;
	int rc;

	if (real->family != p->flow.family) {
		*why = LB_PASS_MODE_OFF;
		return XDP_PASS;
	}
	rc = fib_real(ctx, &f, slot, real, p->flow.src, p->flow.proto, p->l3_len, 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return fib_fail(rc, why);
	*why = LB_FWD_DR;
	return emit(ctx, &f);
}

/* Answers the sender of a frame with an ICMP error from the address the frame was sent to,
 * carrying the original IP header and 8 bytes after it: too big to encapsulate, frag-needed
 * (IPv4) or packet-too-big (IPv6) with `mtu` the largest inner packet that fits; or, with
 * `exceeded`, time exceeded in transit (its TTL or hop limit was spent). */
static __always_inline int send_icmp_error(struct xdp_md *ctx, const struct lb_pkt *p, __u32 mtu,
					   int exceeded, enum lb_reason *why)
{
	int v4 = p->flow.family == WS_AF_INET;
	__u32 hl = v4 ? (p->hl & 0x3f) : 40;          /* the original's header, options included */
	__u32 keep = LB_L3_OFF + hl + 8;              /* of the original: eth, IP, 8 bytes */
	__u32 grow = (v4 ? 20 : 40) + 8;             /* new IP and ICMP headers */
	__u32 len = (__u32)(pkt_end(ctx) - pkt_data(ctx));
	__u8 dmac[6], smac[6];
	struct ethhdr *eth = pkt_data(ctx);
	void *data, *end;
	__u64 sum;

	*why = exceeded ? LB_PASS_TTL : LB_PASS_TOO_BIG;
	if ((void *)(eth + 1) > pkt_end(ctx) || len < keep)
		return XDP_PASS;
	__builtin_memcpy(dmac, eth->h_source, 6);
	__builtin_memcpy(smac, eth->h_dest, 6);
	if (bpf_xdp_adjust_tail(ctx, (int)keep - (int)len))
		return XDP_PASS;
	if (bpf_xdp_adjust_head(ctx, -(int)grow))
		return XDP_PASS;
	data = pkt_data(ctx);
	end = pkt_end(ctx);
	eth = data;
	/* Constant bounds for the new headers and the quote's fixed part; the quote's bytes
	 * after IPv4 options are checked where they are read. */
	if (data + LB_L3_OFF + grow + (v4 ? 28 : 48) > end)
		return XDP_DROP; /* the frame is already reshaped: never hand the kernel half */
	__builtin_memcpy(eth->h_dest, dmac, 6);
	__builtin_memcpy(eth->h_source, smac, 6);
	if (v4) {
		struct iphdr *iph = data + LB_L3_OFF;
		struct icmphdr *ic = (void *)(iph + 1);
		struct iphdr *orig = (void *)(ic + 1);

		__u8 *after = (void *)orig + hl; /* the 8 bytes after the quoted header */

		if ((void *)(orig + 1) > end || (void *)(after + 8) > end)
			return XDP_DROP;
		eth->h_proto = bpf_htons(WS_ETH_P_IP);
		iph->version = 4;
		iph->ihl = 5;
		iph->tos = 0;
		iph->tot_len = bpf_htons(20 + 8 + hl + 8);
		iph->id = 0;
		iph->frag_off = bpf_htons(WS_IP_DF);
		iph->ttl = 64;
		iph->protocol = WS_IPPROTO_ICMP;
		iph->saddr = orig->daddr;
		iph->daddr = orig->saddr;
		ipv4_csum(iph);
		ic->type = exceeded ? 11 : 3;
		ic->code = exceeded ? 0 : 4;
		ic->checksum = 0;
		ic->un.frag.__unused = 0;
		ic->un.frag.mtu = bpf_htons(mtu);
		/* The quoted header, options included, is valid (parse verified it, nothing
		 * changed it yet): its words sum to zero and are left out. */
		sum = bpf_csum_diff(0, 0, (__be32 *)ic, 8, 0);
		sum += bpf_csum_diff(0, 0, (__be32 *)after, 8, 0);
		ic->checksum = ~csum_fold(sum);
	} else {
		struct ipv6hdr *ip6h = data + LB_L3_OFF;
		struct icmp6hdr *ic = (void *)(ip6h + 1);
		struct ipv6hdr *orig = (void *)(ic + 1);

		if ((void *)(orig + 1) + 8 > end)
			return XDP_DROP;
		eth->h_proto = bpf_htons(WS_ETH_P_IPV6);
		*(__be32 *)ip6h = bpf_htonl(0x60000000);
		ip6h->payload_len = bpf_htons(8 + 48);
		ip6h->nexthdr = WS_IPPROTO_ICMPV6;
		ip6h->hop_limit = 64;
		ip6h->saddr = orig->daddr;
		ip6h->daddr = orig->saddr;
		ic->icmp6_type = exceeded ? 3 : 2;
		ic->icmp6_code = 0;
		ic->icmp6_cksum = 0;
		ic->icmp6_dataun.un_data32[0] = bpf_htonl(mtu);
		sum = bpf_csum_diff(0, 0, (__be32 *)ic, 8 + 48, 0);
		sum += bpf_csum_diff(0, 0, (__be32 *)&ip6h->saddr, 32, 0);
		sum += bpf_htonl(8 + 48);
		sum += bpf_htonl(WS_IPPROTO_ICMPV6);
		ic->icmp6_cksum = ~csum_fold(sum);
	}
	*why = exceeded ? LB_ICMP_TIME_EXCEEDED : LB_ICMP_TOO_BIG_SENT;
	return tx_back(ctx);
}

static __always_inline int send_too_big(struct xdp_md *ctx, const struct lb_pkt *p, __u32 mtu,
					enum lb_reason *why)
{
	return send_icmp_error(ctx, p, mtu, 0, why);
}

/* The tunnel's outer source: the configured prefix with the flow hash as host bits (the
 * real's RSS then spreads the flows), or 0 when the FIB is to choose. */
static __always_inline int tunnel_src(__u8 fam, __u32 hash, __u8 *src)
{
	if (fam == WS_AF_INET) {
		__u32 len = cfg_tun_src_v4_len;
		__u32 pfx, mask;

		if (!len)
			return 0;
		/* Byte by byte through the volatile: a plain copy would read the initializer. */
		__u8 b[4];

#pragma unroll
		for (int i = 0; i < 4; i++)
			b[i] = cfg_tun_src_v4[i];
		__builtin_memcpy(&pfx, b, 4);
		mask = len >= 32 ? 0 : (0xffffffffu >> len);
		*(__be32 *)src = (pfx & ~bpf_htonl(mask)) | (bpf_htonl(hash) & bpf_htonl(mask));
		return 1;
	}
	if (!cfg_tun_src_v6_len)
		return 0;
	/* Prefixes up to /96: the hash fills the last 32 bits. */
#pragma unroll
	for (int i = 0; i < 12; i++)
		src[i] = cfg_tun_src_v6[i];
	*(__be32 *)(src + 12) = bpf_htonl(hash);
	return 1;
}

/* GUE's UDP source port from the flow hash, in the dynamic range (49152-65535): the real's
 * RSS hashes the outer ports, so its queues spread the flows, and one flow keeps its port. */
static __always_inline __be16 gue_sport(__u32 hash)
{
	return bpf_htons(0xc000 | ((hash ^ (hash >> 16)) & 0x3fff));
}

/* GUE's outer UDP checksum without reading the payload (Linux's local checksum offload):
 * the inner packet's own transport checksum makes its transport bytes sum to the complement
 * of its pseudo-header, so the outer sum needs only the outer pseudo-header, the UDP header
 * (check 0), the inner IP header and the inner pseudo-header: a bounded cost whatever the
 * packet's length. `addrs` and `udp` are the written outer header's addresses and UDP header,
 * `in_ip` the inner IP header (no options: parse refused them). 0 when the inner packet
 * gives nothing to lean on (IPv4 UDP sent without checksum) or is truncated. */
static __always_inline int gue_csum(const struct lb_pkt *p, void *addrs, __u32 addrs_len,
				    struct udphdr *udp, void *in_ip, void *end)
{
	__u8 proto = p->flow.proto;
	__u64 sum, in_sum;
	__u16 *l4_check;
	void *l4;

	sum = bpf_csum_diff(0, 0, addrs, addrs_len, 0);
	sum += bpf_htonl(bpf_ntohs(udp->len));
	sum += bpf_htonl(WS_IPPROTO_UDP);
	sum += bpf_csum_diff(0, 0, (__be32 *)udp, 8, 0);
	/* The inner IP header, and the inner pseudo-header's addresses. An IPv4 header, options
	 * included, has a valid checksum (verified by parse, its TTL's change applied
	 * incrementally), so its words sum to the one's-complement zero: left out. */
	if (p->flow.family == WS_AF_INET) {
		l4 = in_ip + (p->hl & 0x3f);
		if (in_ip + 20 > end || l4 + 8 > end)
			return 0;
		in_sum = bpf_csum_diff(0, 0, in_ip + 12, 8, 0);
		in_sum += bpf_htonl(p->l3_len - p->hl);
	} else {
		l4 = in_ip + 40;
		if (l4 + 8 > end)
			return 0;
		sum += bpf_csum_diff(0, 0, in_ip, 40, 0);
		in_sum = bpf_csum_diff(0, 0, in_ip + 8, 32, 0);
		in_sum += bpf_htonl(p->l3_len - 40);
	}
	if (proto == WS_IPPROTO_UDP) {
		l4_check = l4 + 6;
		/* Checked again where it is read: behind IPv4 options its offset varies. */
		if ((void *)(l4_check + 1) > end)
			return 0;
		if (p->flow.family == WS_AF_INET && !*l4_check)
			return 0;
	}
	/* The inner transport bytes sum to minus the inner pseudo-header (ICMPv4 has none: its
	 * bytes sum to zero). */
	if (proto != WS_IPPROTO_ICMP) {
		in_sum += bpf_htonl(proto);
		sum += (__u16)~csum_fold(in_sum);
	}
	udp->check = ~csum_fold(sum);
	if (!udp->check)
		udp->check = 0xffff;
	return 1;
}

/* Tunnel: the frame's IP packet inside an outer IPv4 (IPIP, 6in4) or IPv6 (IP6IP6, 4in6)
 * header to the real, or for a GUE real behind an outer IP and UDP header to its port. */
static __always_inline int fwd_tunnel(struct xdp_md *ctx, const struct lb_pkt *p,
				      const struct lb_real *real, __u32 slot, __u32 hash,
				      enum lb_reason *why)
{
	int outer4 = real->family == WS_AF_INET;
	int gue = real->gue_port != 0;
	__u32 olen = (outer4 ? 20 : 40) + (gue ? LB_GUE_OVERHEAD : 0);
	__u8 inner = p->flow.family == WS_AF_INET ? WS_IPPROTO_IPIP : WS_IPPROTO_IPV6;
	__u8 proto = gue ? WS_IPPROTO_UDP : inner;
	__u8 src[16] = {};
	struct bpf_fib_lookup f;
	int own_src, rc;
	void *data, *end;
	struct ethhdr *eth;
	struct udphdr *udp;

	/* GUE's outer checksum leans on the inner transport checksum, which covers the whole
	 * datagram, not a fragment of it: such a fragment is the kernel's. */
	if (gue && p->frag && (!outer4 || (real->tun_flags & LB_TUN_CSUM))) {
		*why = LB_PASS_FRAG_GUE_CSUM;
		return XDP_PASS;
	}
	own_src = tunnel_src(real->family, hash, src);
	rc = fib_real(ctx, &f, slot, real, src, proto, p->l3_len + olen, !own_src);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
		if (p->df && f.mtu_result > olen)
			return send_too_big(ctx, p, f.mtu_result - olen, why);
		*why = LB_PASS_TOO_BIG;
		return XDP_PASS;
	}
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return fib_fail(rc, why);
	/* An IPv6 real's GUE must carry a UDP checksum: refused before the frame is touched. */
	if (gue && !outer4 && p->flow.family == WS_AF_INET && p->flow.proto == WS_IPPROTO_UDP) {
		struct udphdr *u = pkt_data(ctx) + LB_L3_OFF + (p->hl & 0x3f);

		if ((void *)(u + 1) > pkt_end(ctx)) {
			*why = LB_PASS_BAD_HEADER;
			return XDP_PASS;
		}
		if (!u->check) {
			*why = LB_PASS_GUE_NO_CSUM;
			return XDP_PASS;
		}
	}
	if (bpf_xdp_adjust_head(ctx, -(int)olen)) {
		*why = LB_PASS_MAP;
		return XDP_PASS;
	}
	/* The inner packet is the one forwarded: it loses one hop (IPVS decrements before it
	 * encapsulates), before GUE's checksum sums its header; the outer header starts afresh. */
	ttl_dec_at(ctx, LB_L3_OFF + olen, p->flow.family == WS_AF_INET);
	data = pkt_data(ctx);
	end = pkt_end(ctx);
	eth = data;
	if (outer4) {
		struct iphdr *o = data + LB_L3_OFF;

		if ((void *)(o + 1) > end)
			return XDP_DROP;
		eth->h_proto = bpf_htons(WS_ETH_P_IP);
		o->version = 4;
		o->ihl = 5;
		o->tos = p->tos;
		o->tot_len = bpf_htons(p->l3_len + olen);
		o->id = 0;
		o->frag_off = p->df ? bpf_htons(WS_IP_DF) : 0;
		o->ttl = 64;
		o->protocol = proto;
		o->saddr = own_src ? *(__be32 *)src : f.ipv4_src;
		o->daddr = *(__be32 *)real->addr;
		ipv4_csum(o);
		udp = (void *)(o + 1);
	} else {
		struct ipv6hdr *o = data + LB_L3_OFF;

		if ((void *)(o + 1) > end)
			return XDP_DROP;
		eth->h_proto = bpf_htons(WS_ETH_P_IPV6);
		/* Version 6, the inner traffic class, the flow hash as flow label. */
		*(__be32 *)o = bpf_htonl(0x60000000 | ((__u32)p->tos << 20) | (hash & 0xfffff));
		o->payload_len = bpf_htons(p->l3_len + olen - 40);
		o->nexthdr = proto;
		o->hop_limit = 64;
		if (own_src)
			__builtin_memcpy(&o->saddr, src, 16);
		else
			__builtin_memcpy(&o->saddr, f.ipv6_src, 16);
		__builtin_memcpy(&o->daddr, real->addr, 16);
		udp = (void *)(o + 1);
	}
	if (gue) {
		if ((void *)(udp + 1) > end)
			return XDP_DROP;
		udp->source = gue_sport(hash);
		udp->dest = real->gue_port;
		udp->len = bpf_htons(p->l3_len + LB_GUE_OVERHEAD);
		udp->check = 0;
		if (!outer4 || (real->tun_flags & LB_TUN_CSUM)) {
			void *addrs = data + LB_L3_OFF + (outer4 ? 12 : 8);

			if (!gue_csum(p, addrs, outer4 ? 8 : 32, udp, udp + 1, end) && !outer4)
				return XDP_DROP; /* cannot happen: checked before the frame changed */
		}
	}
	*why = LB_FWD_TUNNEL;
	return emit_as_is(ctx, &f);
}

#endif
