/* ICMP errors about NAT and full-NAT connections. A frag-needed (IPv4 type 3 code 4) or
 * packet-too-big (IPv6 type 2) quotes the packet it is about: that packet's IP header and as
 * much of its payload as the router kept (8 bytes at least). Translated, the error reads as
 * the side it is sent to would have sent and seen the quoted packet: the outer addresses, the
 * quoted addresses and ports, and every checksum follow. The quoted transport checksum covers
 * a payload that is mostly cut off, so it cannot be recomputed: it is adjusted for the
 * addresses and ports that change, when the quote holds it (as IPVS does). The next-hop MTU
 * is left as the router said it. Offsets are fixed: outer and quoted IPv4 headers without
 * options, IPv6 without extension headers (anything else is the kernel's). */
#ifndef LB_ICMP_H
#define LB_ICMP_H

/* The quoted packet: after the outer IP header and the 8-byte ICMP header. */
#define LB_QUOTE_OFF_V4 (LB_L4_OFF_V4 + 8)
#define LB_QUOTE_OFF_V6 (LB_L4_OFF_V6 + 8)
/* Bytes of the quoted transport header that hold its checksum's end: TCP 18, UDP 8. */
#define LB_QUOTE_TCP_CSUM_END 18
#define LB_QUOTE_UDP_CSUM_END 8

/* The quoted transport header's ports and, when the quote holds it, its checksum: `addrs` is
 * the sum of the quoted addresses' changes (the pseudo-header's part). Returns the changes
 * inside the ICMP message (ports, checksum field) for the ICMP checksum. */
static __always_inline __u64 quote_ports(__be16 *qp, void *end, __u8 proto, __u32 qlen,
					 __u64 addrs, __be16 sport, __be16 dport)
{
	__u64 ports = 0, icmp = 0;
	__be16 *check = 0;

	ports = csum_diff16(ports, qp[0], sport);
	qp[0] = sport;
	ports = csum_diff16(ports, qp[1], dport);
	qp[1] = dport;
	if (proto == WS_IPPROTO_TCP && qlen >= LB_QUOTE_TCP_CSUM_END &&
	    (void *)qp + LB_QUOTE_TCP_CSUM_END <= end)
		check = qp + 8;
	else if (proto == WS_IPPROTO_UDP && qp[3])
		check = qp + 3; /* 0: an IPv4 datagram without checksum stays without */
	if (check) {
		__u16 old = *check, c = csum_apply(*check, addrs + ports);

		if (proto == WS_IPPROTO_UDP && c == 0)
			c = 0xffff;
		*check = c;
		icmp = csum_diff16(icmp, old, c);
	}
	return icmp + ports;
}

/* Rewrites the ICMP error in the frame: its outer source and destination, and the quoted
 * packet's source and destination addresses and ports (a value that stays is passed as it
 * is: every pointer is valid, which keeps the verifier's view of them simple); checksums
 * follow. 0, or -1 before any write when the quote is too short (its IP header and 8 bytes)
 * or not TCP/UDP. */
static __always_inline int icmp_xlat(struct xdp_md *ctx, __u8 fam, __u32 l3_len, const __u8 *osrc,
				     const __u8 *odst, const __u8 *qsrc, __be16 qsport,
				     const __u8 *qdst, __be16 qdport)
{
	void *data = pkt_data(ctx), *end = pkt_end(ctx);
	__u64 outer = 0, addrs = 0, icmp = 0;
	__be16 *qp;
	__u8 proto;

	if (fam == WS_AF_INET) {
		struct iphdr *iph = data + LB_L3_OFF;
		struct icmphdr *ic = data + LB_L4_OFF_V4;
		struct iphdr *q = data + LB_QUOTE_OFF_V4;

		qp = data + LB_QUOTE_OFF_V4 + 20;
		if ((void *)(qp + 4) > end || l3_len < 20 + 8 + 20 + 8 || q->ihl != 5)
			return -1;
		proto = q->protocol;
		if (proto != WS_IPPROTO_TCP && proto != WS_IPPROTO_UDP)
			return -1;
		outer = csum_diff32(outer, iph->saddr, *(__be32 *)osrc);
		iph->saddr = *(__be32 *)osrc;
		outer = csum_diff32(outer, iph->daddr, *(__be32 *)odst);
		iph->daddr = *(__be32 *)odst;
		iph->check = csum_apply(iph->check, outer);
		addrs = csum_diff32(addrs, q->saddr, *(__be32 *)qsrc);
		q->saddr = *(__be32 *)qsrc;
		addrs = csum_diff32(addrs, q->daddr, *(__be32 *)qdst);
		q->daddr = *(__be32 *)qdst;
		__u16 old = q->check;

		q->check = csum_apply(q->check, addrs);
		icmp = csum_diff16(icmp, old, q->check);
		/* v4: the ICMP checksum covers the message alone, not the outer addresses. */
		icmp += addrs + quote_ports(qp, end, proto, l3_len - 48, addrs, qsport, qdport);
		ic->checksum = csum_apply(ic->checksum, icmp);
		return 0;
	}
	struct ipv6hdr *ip6h = data + LB_L3_OFF;
	struct icmp6hdr *ic = data + LB_L4_OFF_V6;
	struct ipv6hdr *q = data + LB_QUOTE_OFF_V6;
	__u32 *os, *od, *qs, *qd;

	qp = data + LB_QUOTE_OFF_V6 + 40;
	if ((void *)(qp + 4) > end || l3_len < 40 + 8 + 40 + 8)
		return -1;
	proto = q->nexthdr;
	if (proto != WS_IPPROTO_TCP && proto != WS_IPPROTO_UDP)
		return -1;
	os = (__u32 *)&ip6h->saddr;
	od = (__u32 *)&ip6h->daddr;
	qs = (__u32 *)&q->saddr;
	qd = (__u32 *)&q->daddr;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		outer = csum_diff32(outer, os[i], ((const __u32 *)osrc)[i]);
		os[i] = ((const __u32 *)osrc)[i];
		outer = csum_diff32(outer, od[i], ((const __u32 *)odst)[i]);
		od[i] = ((const __u32 *)odst)[i];
		addrs = csum_diff32(addrs, qs[i], ((const __u32 *)qsrc)[i]);
		qs[i] = ((const __u32 *)qsrc)[i];
		addrs = csum_diff32(addrs, qd[i], ((const __u32 *)qdst)[i]);
		qd[i] = ((const __u32 *)qdst)[i];
	}
	/* v6: the ICMPv6 checksum covers the pseudo-header, so the outer addresses count. */
	icmp = outer + addrs + quote_ports(qp, end, proto, l3_len - 88, addrs, qsport, qdport);
	ic->icmp6_cksum = csum_apply(ic->icmp6_cksum, icmp);
	return 0;
}

/* Client side: an error from a router on the client's path about the VIP's packet to the
 * client (VIP:VPORT -> CIP:CPORT, the connection `cf` names CIP:CPORT -> VIP:VPORT), for a
 * NAT or full-NAT connection found in the tables. Sent to the real as it would have seen it:
 * NAT, from the router about RIP:RPORT -> CIP:CPORT; full-NAT, from the local address about
 * RIP:RPORT -> LADDR:LPORT. */
static __always_inline int icmp_to_real(struct xdp_md *ctx, const struct lb_pkt *p,
					const struct lb_flow *cf, const struct lb_real *real,
					__u32 slot, const struct lb_laddr *la, __be16 lport,
					enum lb_reason *why)
{
	struct bpf_fib_lookup f;
	/* Two valid pointers, never one and NULL (clang turns that choice into a mask the
	 * verifier refuses on a pointer); no copies (the program's stack is near its limit). */
	const __u8 *src = la ? la->addr : p->flow.src;
	const __u8 *to = la ? la->addr : cf->src;
	__be16 to_port = la ? lport : cf->sport;
	int rc;

	if (real->family != p->flow.family) {
		*why = LB_PASS_MODE_OFF;
		return XDP_PASS;
	}
	if (la && la->family != real->family) {
		*why = LB_PASS_NO_LADDR;
		return XDP_PASS;
	}
	rc = fib_real(ctx, &f, slot, real, src, p->flow.proto, p->l3_len, 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return fib_fail(rc, why);
	if (icmp_xlat(ctx, p->flow.family, p->l3_len, src, real->addr, real->addr, real->port, to,
		      to_port)) {
		*why = LB_PASS_ICMP;
		return XDP_PASS;
	}
	*why = la ? LB_ICMP_TOO_BIG_FNAT : LB_ICMP_TOO_BIG_NAT;
	return emit(ctx, &f);
}

/* Real side: an error not addressed to a VIP that quotes a packet the load balancer sent
 * towards a real: full-NAT LADDR:LPORT -> RIP:RPORT (to the local address), NAT
 * CIP:CPORT -> RIP:RPORT (to the client). The reply entry of that connection (the quoted
 * flow reversed) names it; the error goes to the client from the VIP, about
 * CIP:CPORT -> VIP:VPORT. The MTU stays: the real's path limits what the client may send. */
static __always_inline int icmp_to_client(struct xdp_md *ctx, const struct lb_pkt *p,
					  enum lb_reason *why)
{
	void *data = pkt_data(ctx), *end = pkt_end(ctx);
	struct bpf_fib_lookup f;
	struct lb_flow k = {};
	struct lb_rev *r;
	int rc;

	*why = LB_PASS_NOT_VIP;
	if (p->flow.family == WS_AF_INET) {
		struct iphdr *q = data + LB_QUOTE_OFF_V4;
		__be16 *qp = data + LB_QUOTE_OFF_V4 + 20;

		if ((void *)(qp + 2) > end || q->ihl != 5)
			return XDP_PASS;
		/* Addressed to the quoted packet's sender, as a router sends it. */
		if (q->saddr != *(__be32 *)p->flow.dst)
			return XDP_PASS;
		*(__be32 *)k.src = q->daddr;
		*(__be32 *)k.dst = q->saddr;
		k.proto = q->protocol;
		k.sport = qp[1];
		k.dport = qp[0];
	} else {
		struct ipv6hdr *q = data + LB_QUOTE_OFF_V6;
		__be16 *qp = data + LB_QUOTE_OFF_V6 + 40;

		if ((void *)(qp + 2) > end)
			return XDP_PASS;
		copy16(k.src, (__u8 *)&q->daddr);
		copy16(k.dst, (__u8 *)&q->saddr);
		if (!same16(k.dst, p->flow.dst))
			return XDP_PASS;
		k.proto = q->nexthdr;
		k.sport = qp[1];
		k.dport = qp[0];
	}
	if (k.proto != WS_IPPROTO_TCP && k.proto != WS_IPPROTO_UDP)
		return XDP_PASS;
	k.family = p->flow.family;
	r = conn_entry(&k);
	if (!r || (r->flags & LB_REV_FWD))
		return XDP_PASS;
	rc = fib(ctx, &f, p->flow.family, r->vip, r->client, p->flow.proto, p->l3_len, 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return fib_fail(rc, why);
	/* NAT: the error is addressed to the client and quotes CIP:CPORT already; rewriting
	 * them with the same values changes nothing. */
	if (icmp_xlat(ctx, p->flow.family, p->l3_len, r->vip, r->client, r->client, r->cport,
		      r->vip, r->vport)) {
		*why = LB_PASS_ICMP;
		return XDP_PASS;
	}
	*why = LB_ICMP_TOO_BIG_REPLY;
	return emit(ctx, &f);
}

#endif
