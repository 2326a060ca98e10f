/* Header parsing: bounds-checked views into the packet. */
#ifndef FP_PARSE_H
#define FP_PARSE_H

struct fp_pkt {
	void *data;
	void *data_end;
	struct ethhdr *eth;
	__u16 proto;   /* host order */
	void *l3;
};

static __always_inline int parse_eth(struct fp_pkt *p)
{
	struct ethhdr *eth = p->data;

	if ((void *)(eth + 1) > p->data_end)
		return -1;
	p->eth = eth;
	p->proto = bpf_ntohs(eth->h_proto);
	p->l3 = eth + 1;
	return 0;
}

static __always_inline int mac_is_ours(const struct ethhdr *eth)
{
	int i;

#pragma unroll
	for (i = 0; i < ETH_ALEN; i++)
		if (eth->h_dest[i] != cfg_if_mac[i])
			return 0;
	return 1;
}

/* RFC 1071 sum of a 20-byte IPv4 header; 0 means the checksum is right. */
static __always_inline __u16 ipv4_hdr_csum_check(const struct iphdr *iph)
{
	const __u16 *w = (const __u16 *)iph;
	__u32 sum = 0;
	int i;

#pragma unroll
	for (i = 0; i < 10; i++)
		sum += w[i];
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

#endif
