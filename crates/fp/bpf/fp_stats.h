#ifndef FP_STATS_H
#define FP_STATS_H

static __always_inline void count(enum fp_reason reason)
{
	__u32 key = reason;
	__u64 *slot = bpf_map_lookup_elem(&counters, &key);

	/* Per-CPU slot: a plain add is race-free here. */
	if (slot)
		*slot += 1;
}

/* A packet the router forwards, as the kernel's IP MIBs would have counted it (struct
 * fp_mib): `l3_len` bytes, `segs` segments (a GSO skb's, else 1). */
static __always_inline void count_mib(const struct fp_pkt *p, __u32 l3_len, __u32 segs)
{
	__u32 key = p->proto == WS_ETH_P_IPV6;
	struct fp_mib *m = bpf_map_lookup_elem(&mib, &key);
	__u8 ecn;

	if (!m)
		return;
	if (p->proto == WS_ETH_P_IP) {
		struct iphdr *iph = p->l3;

		if ((void *)(iph + 1) > p->data_end)
			return;
		ecn = iph->tos & 3;
	} else {
		struct ipv6hdr *ip6h = p->l3;

		if ((void *)(ip6h + 1) > p->data_end)
			return;
		ecn = (ip6h->flow_lbl[0] >> 4) & 3; /* the traffic class's low bits */
	}
	/* Per-CPU value: plain adds are race-free. */
	m->packets += 1;
	m->octets += l3_len;
	m->ecn[ecn] += segs;
}

#endif
