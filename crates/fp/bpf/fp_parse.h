/* Header parsing: bounds-checked views into the packet. The checksum helpers are the
 * project's shared ones (ws/csum.h). */
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

static __always_inline __u32 in_ifindex(const struct xdp_md *ctx)
{
	return cfg_ifindex ? cfg_ifindex : ctx->ingress_ifindex;
}

static __always_inline int mac_is_ours(const struct ethhdr *eth)
{
	/* Two loads and compares against constants the verifier folds in, not six. */
	__u32 lo = (__u32)cfg_if_mac[0] | (__u32)cfg_if_mac[1] << 8 | (__u32)cfg_if_mac[2] << 16 |
		   (__u32)cfg_if_mac[3] << 24;
	__u16 hi = (__u16)cfg_if_mac[4] | (__u16)cfg_if_mac[5] << 8;

	return *(const __u32 *)eth->h_dest == lo && *(const __u16 *)(eth->h_dest + 4) == hi;
}

#endif
