/* Parsing (Ethernet, then IPv4, options included, or IPv6 without extension headers: the L4
 * header lies at LB_L3_OFF + hl, fixed for IPv6 and the common IPv4 header, 20 to 60 bytes
 * with options), the flow hash, and incremental checksums. */
#ifndef LB_PKT_H
#define LB_PKT_H

#define LB_L3_OFF 14
#define LB_L4_OFF_V4 (LB_L3_OFF + 20)
#define LB_L4_OFF_V6 (LB_L3_OFF + 40)

struct lb_pkt {
	struct lb_flow flow;
	__u32 l3_len;  /* IP total length, header included */
	__u8 tcp_flags;
	__u8 df;       /* IPv4 DF set (IPv6: always 1) */
	__u8 tos;
	__u8 tcp_doff; /* bytes */
	__u8 ttl;      /* IPv4 TTL, IPv6 hop limit */
	__u8 frag;     /* 0, LB_FRAG_FIRST or LB_FRAG_LATER */
	__u8 hl;       /* IP header length: IPv4 20-60 (options), IPv6 40, 48 (fragment) */
	__be32 ip_id;  /* a fragment's datagram: IPv4 identification, IPv6 fragment header's */
};

static __always_inline void *pkt_data(struct xdp_md *ctx)
{
	return (void *)(long)ctx->data;
}

static __always_inline void *pkt_end(struct xdp_md *ctx)
{
	return (void *)(long)ctx->data_end;
}

static __always_inline void copy16(__u8 *dst, const __u8 *src)
{
	__builtin_memcpy(dst, src, 16);
}

/* Incremental checksums (RFC 1624) through a 64-bit accumulator of differences: the sum of
 * ~old and new words, 32 or 16 bits at a time, as they lie in memory. */
static __always_inline __u64 csum_diff32(__u64 acc, __u32 from, __u32 to)
{
	return acc + (__u32)~from + to;
}

static __always_inline __u64 csum_diff16(__u64 acc, __u16 from, __u16 to)
{
	return acc + (__u16)~from + to;
}

static __always_inline __u16 csum_fold(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)((s & 0xffff) + (s >> 16));
}

/* The checksum field `check` after the changes summed in acc. */
static __always_inline __u16 csum_apply(__u16 check, __u64 acc)
{
	return ~csum_fold(acc + (__u16)~check);
}

/* A full IPv4 header checksum (20 bytes, check field taken as zero): only for a header the
 * program writes whole (an ICMP answer, a tunnel's outer header). A header that arrived is
 * verified by parse and then only ever updated incrementally. */
static __always_inline void ipv4_csum(struct iphdr *iph)
{
	__u16 *w = (__u16 *)iph;
	__u64 s = 0;

	iph->check = 0;
#pragma unroll
	for (int i = 0; i < 10; i++)
		s += w[i];
	iph->check = ~csum_fold(s);
}

/* Whether an IPv4 header's checksum is right: its words, the checksum and the options among
 * them, sum to 0xffff (RFC 1071). Options (up to 40 bytes, only for a header that has them)
 * are copied to the stack and summed there: a loop over a variable length of packet is
 * what the verifier cannot follow. (A valid header's words sum to 0xffff, the
 * one's-complement zero: a sum over data that includes it is the same without it, so a sum
 * may skip an IPv4 header it knows is valid.) */
static __always_inline int ipv4_csum_ok(struct xdp_md *ctx, const struct iphdr *iph)
{
	const __u16 *w = (const __u16 *)iph;
	__u32 opt_len = iph->ihl * 4 - 20;
	__u64 s = 0;

#pragma unroll
	for (int i = 0; i < 10; i++)
		s += w[i];
	if (opt_len) {
		__u32 opts[10] = {};

		if (opt_len > 40 || bpf_xdp_load_bytes(ctx, LB_L3_OFF + 20, opts, opt_len))
			return 0;
		s += (__u32)bpf_csum_diff(0, 0, opts, sizeof(opts), 0);
	}
	return csum_fold(s) == 0xffff;
}

/* Fills p from the frame; 0, or -1 with the reason the frame is the kernel's. */
static __always_inline int parse(struct xdp_md *ctx, struct lb_pkt *p, enum lb_reason *why)
{
	void *data = pkt_data(ctx), *end = pkt_end(ctx);
	struct ethhdr *eth = data;
	void *l4;
	__u32 avail;

	*why = LB_PASS_BAD_HEADER;
	if ((void *)(eth + 1) > end)
		return -1;
	avail = (__u32)(end - data) - LB_L3_OFF;
	if (eth->h_proto == bpf_htons(WS_ETH_P_IP)) {
		struct iphdr *iph = data + LB_L3_OFF;

		if (!cfg_v4) {
			*why = LB_PASS_NOT_IP;
			return -1;
		}
		if ((void *)(iph + 1) > end)
			return -1;
		if (iph->version != 4 || iph->ihl < 5)
			return -1;
		/* Options (up to 40 bytes) are carried as they came: the transport header
		 * follows them. */
		p->hl = iph->ihl * 4;
		if ((void *)iph + p->hl > end)
			return -1;
		/* The header checksum, as ip_rcv_core checks it before anything else looks at
		 * the packet: nothing is translated or answered from a corrupt header (full-NAT
		 * and the echo answer would otherwise send it on with a valid checksum). */
		if (!ipv4_csum_ok(ctx, iph)) {
			*why = LB_PASS_BAD_CSUM;
			return -1;
		}
		/* A fragment of TCP or UDP: the first one (offset 0) carries the ports and is
		 * served as any packet; a later one carries none and follows its first (lb_xdp).
		 * Other protocols' fragments are the kernel's. */
		if (iph->frag_off & bpf_htons(WS_IP_MF | WS_IP_OFFSET)) {
			if (iph->protocol != WS_IPPROTO_TCP && iph->protocol != WS_IPPROTO_UDP) {
				*why = LB_PASS_FRAGMENT;
				return -1;
			}
			p->frag = (iph->frag_off & bpf_htons(WS_IP_OFFSET)) ? LB_FRAG_LATER
									     : LB_FRAG_FIRST;
			p->ip_id = (__be32)iph->id;
		}
		p->l3_len = bpf_ntohs(iph->tot_len);
		if (p->l3_len < p->hl || p->l3_len > avail)
			return -1;
		*(__be32 *)p->flow.src = iph->saddr;
		*(__be32 *)p->flow.dst = iph->daddr;
		p->flow.proto = iph->protocol;
		p->flow.family = WS_AF_INET;
		p->df = !!(iph->frag_off & bpf_htons(WS_IP_DF));
		p->tos = iph->tos;
		p->ttl = iph->ttl;
		if (p->frag == LB_FRAG_LATER)
			return 0; /* no transport header: the frags map has the flow */
		l4 = (void *)iph + p->hl;
	} else if (eth->h_proto == bpf_htons(WS_ETH_P_IPV6)) {
		struct ipv6hdr *ip6h = data + LB_L3_OFF;

		if (!cfg_v6) {
			*why = LB_PASS_NOT_IP;
			return -1;
		}
		if ((void *)(ip6h + 1) > end)
			return -1;
		if (ip6h->version != 6)
			return -1;
		p->l3_len = 40 + bpf_ntohs(ip6h->payload_len);
		if (p->l3_len > avail)
			return -1;
		copy16(p->flow.src, (__u8 *)&ip6h->saddr);
		copy16(p->flow.dst, (__u8 *)&ip6h->daddr);
		p->flow.proto = ip6h->nexthdr;
		p->flow.family = WS_AF_INET6;
		p->df = 1;
		p->tos = (ip6h->priority << 4) | (ip6h->flow_lbl[0] >> 4);
		p->ttl = ip6h->hop_limit;
		p->hl = 40;
		l4 = ip6h + 1;
		if (p->flow.proto == WS_IPPROTO_FRAGMENT) {
			/* A fragment header right behind the IPv6 header, of TCP or UDP: served
			 * as an IPv4 fragment is. Others (ICMPv6, an atomic fragment, a header
			 * after other extension headers) are the kernel's. */
			struct frag_hdr *fh = l4;
			__u16 off;

			if ((void *)(fh + 1) > end || p->l3_len < 48)
				return -1;
			off = bpf_ntohs(fh->frag_off);
			if ((fh->nexthdr != WS_IPPROTO_TCP && fh->nexthdr != WS_IPPROTO_UDP) ||
			    off == 0) {
				*why = LB_PASS_IP6_FRAGMENT;
				return -1;
			}
			p->flow.proto = fh->nexthdr;
			p->frag = (off & 0xfff8) ? LB_FRAG_LATER : LB_FRAG_FIRST;
			p->ip_id = fh->identification;
			p->hl = 48;
			if (p->frag == LB_FRAG_LATER)
				return 0;
			l4 = fh + 1;
		}
		if (p->flow.proto != WS_IPPROTO_TCP && p->flow.proto != WS_IPPROTO_UDP &&
		    p->flow.proto != WS_IPPROTO_ICMPV6) {
			*why = LB_PASS_IP_OPTIONS;
			return -1;
		}
	} else if (eth->h_proto == bpf_htons(0x8100) || eth->h_proto == bpf_htons(0x88A8)) {
		*why = LB_PASS_VLAN;
		return -1;
	} else {
		*why = LB_PASS_NOT_IP;
		return -1;
	}

	if (p->flow.proto == WS_IPPROTO_TCP) {
		struct tcphdr *th = l4;

		if ((void *)(th + 1) > end || th->doff < 5)
			return -1;
		p->tcp_doff = th->doff * 4;
		if (l4 + p->tcp_doff > end)
			return -1;
		p->flow.sport = th->source;
		p->flow.dport = th->dest;
		p->tcp_flags = ((__u8 *)th)[13];
		/* A first fragment must hold the whole transport header (RFC 1858). */
		if (p->frag && p->l3_len < (__u32)p->hl + p->tcp_doff) {
			*why = LB_PASS_FRAGMENT;
			return -1;
		}
	} else if (p->flow.proto == WS_IPPROTO_UDP) {
		struct udphdr *uh = l4;

		if ((void *)(uh + 1) > end)
			return -1;
		p->flow.sport = uh->source;
		p->flow.dport = uh->dest;
		if (p->frag && p->l3_len < (__u32)p->hl + 8) {
			*why = LB_PASS_FRAGMENT;
			return -1;
		}
	} else if (p->flow.proto == WS_IPPROTO_ICMP || p->flow.proto == WS_IPPROTO_ICMPV6) {
		if (l4 + 8 > end)
			return -1;
	}
	return 0;
}

static __always_inline __u32 mix32(__u32 h)
{
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	h ^= h >> 16;
	return h;
}

/* The clock of connection ages, the rate guard and the FIB cache: the coarse monotonic clock
 * (the last tick's time, a load instead of a TSC read; two reads were about a tenth of an
 * established packet's cost). Every use counts seconds, where a tick (1-10 ms) does not show. */
static __always_inline __u64 lb_now(void)
{
	return bpf_ktime_get_coarse_ns();
}

/* The flow's hash: Maglev's index, rr's fallback, the tunnel source's host bits. Same for
 * every CPU and every packet of the flow. */
static __always_inline __u32 flow_hash(const struct lb_flow *f)
{
	const __u32 *w = (const __u32 *)f;
	__u32 h = 0x9e3779b9;

#pragma unroll
	for (int i = 0; i < (int)(sizeof(*f) / 4); i++)
		h = mix32(h ^ w[i]) + i;
	return h;
}

/* Completes the TCP/UDP checksum of a frame from a local sender with checksum offload
 * (CHECKSUM_PARTIAL: the field holds only the pseudo-header sum). XDP cannot see that state,
 * and a frame it transmits arrives as it is, so the receiver would drop it. The sum is
 * computed from scratch, which is right whatever the field held (a complete checksum equal to
 * the pseudo-header sum by chance, once in 65,536 frames, comes out unchanged). A global
 * function: the verifier walks its loop once, not once per path that calls it. */
__noinline int lb_complete_csum(struct xdp_md *ctx, __u32 v6, __u32 proto)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	__u64 sum = 0;
	__u32 l4_len;
	__u16 *field;
	void *l4;

	if (!v6) {
		struct iphdr *iph = data + LB_L3_OFF;

		__u32 hl;

		if ((void *)(iph + 1) > end)
			return -1;
		hl = iph->ihl * 4; /* options: the transport header follows them */
		l4_len = bpf_ntohs(iph->tot_len) - hl;
		sum = (__u64)iph->saddr + iph->daddr;
		l4 = data + LB_L3_OFF + hl;
	} else {
		struct ipv6hdr *ip6h = data + LB_L3_OFF;
		__u32 *a = (__u32 *)&ip6h->saddr;

		if ((void *)(ip6h + 1) > end)
			return -1;
		l4_len = bpf_ntohs(ip6h->payload_len);
#pragma unroll
		for (int i = 0; i < 8; i++)
			sum += a[i];
		l4 = data + LB_L4_OFF_V6;
	}
	if (l4_len > LB_CSUM_MAX)
		return -1;
	sum += bpf_htonl(l4_len);
	sum += bpf_htonl(proto);
	if (proto == WS_IPPROTO_TCP) {
		struct tcphdr *th = l4;

		if ((void *)(th + 1) > end)
			return -1;
		field = &th->check;
	} else {
		struct udphdr *uh = l4;

		if ((void *)(uh + 1) > end)
			return -1;
		field = &uh->check;
	}
	*field = 0;
	for (__u32 i = 0; i < LB_CSUM_MAX / 2; i++) {
		__u16 *w = l4 + i * 2;

		if (i * 2 + 2 > l4_len)
			break;
		if ((void *)(w + 1) > end)
			return -1;
		sum += *w;
	}
	if (l4_len & 1) {
		/* Masked: the verifier must see the offset bounded (l4_len >= 1 here). */
		__u8 *b = l4 + ((l4_len - 1) & 0x7ff);

		if ((void *)(b + 1) > end)
			return -1;
		sum += *b; /* the low byte of its word, as the words were loaded */
	}
	__u16 c = ~csum_fold(sum);

	if (proto == WS_IPPROTO_UDP && c == 0)
		c = 0xffff;
	*field = c;
	return 0;
}

#endif
