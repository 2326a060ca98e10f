// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The fast path: one program per interface, its modules chained by inline calls and switched
 * on or off by load-time constants (fp_consts.h). Everything it does not handle exactly as
 * Linux would goes to the kernel (XDP_PASS). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "fp_consts.h"
#include "fp_maps.h"
#include "fp_stats.h"
#include "fp_parse.h"
#include "fp_router.h"
#include "fp_bridge.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("xdp")
int fp_xdp(struct xdp_md *ctx)
{
	struct fp_pkt p = {
		.data = (void *)(long)ctx->data,
		.data_end = (void *)(long)ctx->data_end,
	};
	enum fp_reason why = FP_PASS_NOT_IP;
	enum router_verdict v = RT_PASS;
	__u32 oif = 0;

	/* A bridge port: bridging is all this port's traffic may get from the fast path; what
	 * the bridge module passes (local delivery included) is the kernel's. */
	if (cfg_bridge) {
		oif = bridge_xdp(ctx, &why);
		count(why);
		if (oif)
			return bpf_redirect_map(&tx_ports, oif, XDP_DROP);
		return XDP_PASS;
	}
	if (parse_eth(&p) < 0) {
		count(FP_PASS_BAD_HEADER);
		return XDP_PASS;
	}
	if (p.proto == ETH_P_8021Q || p.proto == ETH_P_8021AD) {
		count(FP_PASS_VLAN);
		return XDP_PASS;
	}
	if (p.proto != ETH_P_IP && p.proto != ETH_P_IPV6) {
		count(FP_PASS_NOT_IP);
		return XDP_PASS;
	}
	if (!mac_is_ours(p.eth)) {
		count(FP_PASS_NOT_HOST);
		return XDP_PASS;
	}

	__u32 zero = 0;
	struct fp_ctl *c = bpf_map_lookup_elem(&ctl, &zero);

	if (!c) {
		why = FP_PASS_DISABLED;
	} else if (p.proto == ETH_P_IP) {
		if (cfg_router_v4 && !c->off_v4)
			v = router_v4(ctx, &p, c, &oif, &why);
		else
			why = FP_PASS_DISABLED;
	} else {
		if (cfg_router_v6 && !c->off_v6)
			v = router_v6(ctx, &p, c, &oif, &why);
		else
			why = FP_PASS_DISABLED;
	}
	count(why);
	if (v == RT_REDIRECT)
		return bpf_redirect_map(&tx_ports, oif, XDP_PASS);
	if (v == RT_DROP)
		return XDP_DROP;
	return XDP_PASS;
}

/* The same modules at TC ingress, for ports whose frames end in local sockets or containers
 * (the veths of a pod network): a TC redirect transmits into a veth like the bridge does,
 * while an XDP redirect would need a program or NAPI on the peer inside the container. */
SEC("tc")
int fp_tc(struct __sk_buff *skb)
{
	enum fp_reason why = FP_PASS_DISABLED;
	__u32 oif = 0;

	if (cfg_bridge)
		oif = bridge_tc(skb, &why);
	count(why);
	if (oif)
		return bpf_redirect(oif, 0);
	return TC_ACT_OK;
}
