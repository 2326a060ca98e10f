// SPDX-License-Identifier: MIT OR Apache-2.0
/* Every shared helper used once, against this kernel's vmlinux.h (as fp's programs are
 * written): no uapi #defines, so XDP verdicts come from the enum. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "ws/parse.h"
#include "ws/csum.h"

SEC("xdp")
int prog(struct xdp_md *ctx)
{
	struct ws_cursor c = {
		.pos = (void *)(long)ctx->data,
		.end = (void *)(long)ctx->data_end,
	};
	struct ethhdr *eth = ws_take(&c, sizeof(*eth));
	struct iphdr *ip;

	if (!eth)
		return XDP_PASS;
	if (ws_is_vlan_proto(eth->h_proto)) {
		struct ws_vlan_tag *tag = ws_take(&c, sizeof(*tag));

		if (!tag || ws_vlan_id(tag) == 1)
			return XDP_DROP;
	}
	ip = ws_take_ipv4(&c);
	if (!ip || ws_is_fragment(ip) || ws_ipv4_hdr_csum_check(ip))
		return XDP_PASS;
	return ws_csum_may_be_partial(eth->h_proto, ip, c.end) ? XDP_PASS : XDP_DROP;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
