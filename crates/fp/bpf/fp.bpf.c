// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The fast path: one program per interface, its modules chained by inline calls and switched
 * on or off by load-time constants (fp_consts.h). Everything it does not handle exactly as
 * Linux would goes to the kernel (XDP_PASS). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "ws/parse.h"
#include "ws/csum.h"

#include "fp_consts.h"
#include "fp_maps.h"
#include "fp_parse.h"
#include "fp_stats.h"
#include "fp_router.h"
#include "fp_bridge.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* A sysctl of gate class `class` was written and the daemon has not read it back yet (the
 * class is closed): the kernel decides as the new value says. */
static __always_inline bool sysctl_unread(__u32 class)
{
	__u32 w = GATE_WRITES, a = GATE_ACKED;
	struct sysctl_gate *writes = bpf_map_lookup_elem(&sysctl_gate, &w);
	struct sysctl_gate *acked = bpf_map_lookup_elem(&sysctl_gate, &a);

	if (class >= GATE_CLASSES)
		return true;
	return !writes || !acked || writes->count[class] != acked->count[class];
}

/* The routers behind the checks both hooks make: Ethernet, no tag, IP, to this port's MAC,
 * the family switched on. */
static __always_inline enum router_verdict route(const struct rt_in *in, struct fp_pkt *p,
						 __u32 *oif, enum fp_reason *why)
{
	if (parse_eth(p) < 0) {
		*why = FP_PASS_BAD_HEADER;
		return RT_PASS;
	}
	if (p->proto == WS_ETH_P_8021Q || p->proto == WS_ETH_P_8021AD) {
		*why = FP_PASS_VLAN;
		return RT_PASS;
	}
	if (p->proto != WS_ETH_P_IP && p->proto != WS_ETH_P_IPV6) {
		*why = FP_PASS_NOT_IP;
		return RT_PASS;
	}
	if (!mac_is_ours(p->eth)) {
		*why = FP_PASS_NOT_HOST;
		return RT_PASS;
	}

	__u32 zero = 0;
	struct fp_ctl *c = bpf_map_lookup_elem(&ctl, &zero);

	*why = FP_PASS_DISABLED;
	if (!c)
		return RT_PASS;
	if (p->proto == WS_ETH_P_IP) {
		if (!cfg_router_v4 || c->off_v4)
			return RT_PASS;
		if (c->multipath_v4 && sysctl_unread(GATE_CLASS_HASH_V4)) {
			*why = FP_PASS_HASH_POLICY;
			return RT_PASS;
		}
		if (sysctl_unread(GATE_CLASS_FWD_V4)) {
			*why = FP_PASS_SYSCTL_UNREAD;
			return RT_PASS;
		}
		return router_v4(in, p, c, oif, why);
	}
	if (!cfg_router_v6 || c->off_v6)
		return RT_PASS;
	if (c->multipath_v6 && sysctl_unread(GATE_CLASS_HASH_V6)) {
		*why = FP_PASS_HASH_POLICY;
		return RT_PASS;
	}
	if (sysctl_unread(GATE_CLASS_MTU_V6)) {
		*why = FP_PASS_SYSCTL_UNREAD;
		return RT_PASS;
	}
	return router_v6(in, p, c, oif, why);
}

/* The mark an XDP program leaves in a frame's metadata for its TC stage (fp_ctl.tc_stage):
 * "forward this skb". Metadata rides from XDP_PASS into the skb on veth, generic XDP and most
 * NIC drivers; where a driver has none, the frame goes to the kernel unmarked. */
#define FP_META_TC_STAGE 0x77737463u /* "wstc" */

/* A frame whose checksum may be partial goes to the TC stage when one is attached
 * (fp_ctl.tc_stage) and the driver keeps metadata: marked here, 1. Else 0: the kernel's. */
static __always_inline int mark_for_tc_stage(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct fp_ctl *c = bpf_map_lookup_elem(&ctl, &zero);

	if (!c || !c->tc_stage)
		return 0;
	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(__u32)))
		return 0;

	__u32 *meta = (void *)(long)ctx->data_meta;

	if ((void *)(meta + 1) > (void *)(long)ctx->data)
		return 0;
	*meta = FP_META_TC_STAGE;
	return 1;
}

/* The driver's copy of a VLAN tag it took off the frame (Linux 6.8+; weak: a program that
 * calls it is loaded only where the device reports it, Features::vlan_meta). */
extern int bpf_xdp_metadata_rx_vlan_tag(const struct xdp_md *ctx, __be16 *vlan_proto,
					__u16 *vlan_tci) __ksym __weak;

/* ctl.standby: the port's successor is being loaded, and the kernel carries every frame. */
static __always_inline bool standing_by(void)
{
	__u32 zero = 0;
	struct fp_ctl *c = bpf_map_lookup_elem(&ctl, &zero);

	return !c || c->standby;
}

static __always_inline int fp_xdp_frame(struct xdp_md *ctx)
{
	struct fp_pkt p = {
		.data = (void *)(long)ctx->data,
		.data_end = (void *)(long)ctx->data_end,
	};
	enum fp_reason why = FP_PASS_NOT_IP;
	enum router_verdict v;
	__u32 oif = 0;

	if (standing_by()) {
		count(FP_PASS_STANDBY);
		return XDP_PASS;
	}
	/* A bridge port: bridging is all this port's traffic may get from the fast path; what
	 * the bridge module passes (local delivery included) is the kernel's. */
	if (cfg_bridge) {
		/* A bridge-nf-* switch written and not read back: br_netfilter may filter now. */
		if (sysctl_unread(GATE_CLASS_BRIDGE)) {
			count(FP_PASS_SYSCTL_UNREAD);
			return XDP_PASS;
		}
		oif = bridge_xdp(ctx, &why);
		if (!oif && why == FP_PASS_CSUM_PARTIAL && mark_for_tc_stage(ctx))
			return XDP_PASS; /* the TC stage counts its verdict */
		count(why);
		if (oif)
			return bpf_redirect_map(&tx_ports, oif, XDP_DROP);
		return XDP_PASS;
	}

	struct rt_in in = {
		.ctx = ctx,
		.in_if = in_ifindex(ctx),
		.l3_len = (__u32)(p.data_end - p.data) - sizeof(struct ethhdr),
	};

	v = route(&in, &p, &oif, &why);
	if (v == RT_PASS && why == FP_PASS_CSUM_PARTIAL && mark_for_tc_stage(ctx))
		return XDP_PASS; /* the TC stage counts its verdict */
	count(why);
	if (v == RT_REDIRECT) {
		count_mib(&p, in.l3_len, 1);
		return bpf_redirect_map(&tx_ports, oif, XDP_PASS);
	}
	if (v == RT_DROP)
		return XDP_DROP;
	return XDP_PASS;
}

SEC("xdp")
int fp_xdp(struct xdp_md *ctx)
{
	return fp_xdp_frame(ctx);
}

/* fp_xdp for a device whose driver may have taken a frame's VLAN tag off and kept it in
 * metadata (every veth; a NIC with rx-vlan-offload), bound to that device so that it may ask
 * the driver. A frame that came tagged is the kernel's, which gives it to a VLAN device on the
 * port or, with none, drops it (PACKET_OTHERHOST) or bridges it tag and all: the program
 * would have taken it for untagged. Only "no tag" (-ENODATA) lets it on. */
SEC("xdp")
int fp_xdp_vlan(struct xdp_md *ctx)
{
	__be16 proto;
	__u16 tci;

	if (bpf_xdp_metadata_rx_vlan_tag(ctx, &proto, &tci) != -ENODATA) {
		count(FP_PASS_VLAN);
		return XDP_PASS;
	}
	return fp_xdp_frame(ctx);
}

/* Bytes the router reads from the start of an skb: Ethernet, the largest IPv4 header, and
 * TCP/UDP ports; pulled into the linear part when an skb has them in fragments. */
#define TC_PULL_LEN 128

/* The kernel's rt_tos2priority(): the forwarding path sets an IPv4 packet's priority from
 * its TOS, and the egress qdisc classifies by it. */
static __always_inline __u32 tos_priority(__u8 tos)
{
	switch ((tos >> 3) & 3) {
	case 1:
		return 2; /* TC_PRIO_BULK */
	case 2:
		return 6; /* TC_PRIO_INTERACTIVE */
	case 3:
		return 4; /* TC_PRIO_INTERACTIVE_BULK */
	default:
		return 0; /* TC_PRIO_BESTEFFORT */
	}
}

/* The network-layer length of each segment of a GSO skb, which is what the kernel checks
 * against the egress MTU when it forwards one (skb_gso_validate_network_len): the L3 and L4
 * headers plus gso_size. UDP counts its 8-byte header, as for a UDP_SEGMENT sender's skb
 * (QUIC stacks send so); a guest's UFO skb, the other UDP kind, counts gso_size from the UDP
 * header on, so this is the larger of the two lengths: what it lets through fits either way,
 * and what it finds too long goes to the kernel, which decides. 0 for anything but plain TCP
 * or UDP over IPv4 or IPv6 (no options or extension headers): the kernel's. */
static __always_inline __u32 gso_segment_len(struct __sk_buff *skb, const struct fp_pkt *p)
{
	__u32 l3 = 0;
	__u8 proto;

	if (p->proto == WS_ETH_P_IP) {
		struct iphdr *iph = p->l3;

		if ((void *)(iph + 1) > p->data_end || iph->ihl != 5)
			return 0;
		l3 = sizeof(*iph);
		proto = iph->protocol;
	} else {
		struct ipv6hdr *ip6h = p->l3;

		if ((void *)(ip6h + 1) > p->data_end)
			return 0;
		l3 = sizeof(*ip6h);
		proto = ip6h->nexthdr;
	}
	if (proto == WS_IPPROTO_UDP)
		return l3 + sizeof(struct udphdr) + skb->gso_size;
	if (proto != WS_IPPROTO_TCP)
		return 0;

	struct tcphdr *th = p->l3 + l3;

	if ((void *)(th + 1) > p->data_end)
		return 0;
	return l3 + th->doff * 4 + skb->gso_size;
}

/* The router at TC ingress: for a port whose frames must leave through a device that takes
 * no XDP-redirected frames (a veth whose peer runs no NAPI: the kernel default), a TC
 * redirect is an skb, which every device takes. */
static __always_inline int router_tc(struct __sk_buff *skb)
{
	enum fp_reason why = FP_PASS_NOT_IP;
	enum router_verdict v = RT_PASS;
	__u32 oif = 0;
	__u32 want = skb->len < TC_PULL_LEN ? skb->len : TC_PULL_LEN;

	/* A tag the device took off is in the skb's metadata, not the data. */
	if (skb->vlan_present) {
		count(FP_PASS_VLAN);
		return FP_TC_KERNEL;
	}
	if (skb->data_end - skb->data < want)
		bpf_skb_pull_data(skb, want);
	/* The pull moved the data: the pointers are read afresh, each a load at a constant
	 * offset from the context (the verifier refuses a context pointer plus a register). */
	asm volatile("" : "+r"(skb));

	struct fp_pkt p = {
		.data = (void *)(long)skb->data,
		.data_end = (void *)(long)skb->data_end,
	};
	struct rt_in in = {
		.ctx = skb,
		.in_if = cfg_ifindex ? cfg_ifindex : skb->ingress_ifindex,
		.l3_len = skb->len - sizeof(struct ethhdr),
		.tc = 1,
	};

	if (skb->gso_size) {
		/* route() parses again; this only needs the headers. */
		if (parse_eth(&p) == 0)
			in.mtu_len = gso_segment_len(skb, &p);
		if (!in.mtu_len) {
			count(FP_PASS_GSO);
			return FP_TC_KERNEL;
		}
	}
	v = route(&in, &p, &oif, &why);
	count(why);
	if (v == RT_DROP)
		return TC_ACT_SHOT;
	if (v != RT_REDIRECT)
		return FP_TC_KERNEL;
	/* What ip_forward() does to the skb besides the header: priority from the TOS (unless
	 * net.ipv4.ip_forward_update_priority is 0), no receive timestamp carried into the egress
	 * qdisc. */
	__u32 zero = 0;
	struct fp_ctl *c = bpf_map_lookup_elem(&ctl, &zero);

	if (p.proto == WS_ETH_P_IP && c && !c->keep_priority) {
		struct iphdr *iph = p.l3;

		if ((void *)(iph + 1) <= p.data_end)
			skb->priority = tos_priority(iph->tos);
	}
	skb->tstamp = 0;
	count_mib(&p, in.l3_len, skb->gso_segs ? skb->gso_segs : 1);
	return bpf_redirect(oif, 0);
}

/* The same modules at TC ingress, for ports whose egress takes no XDP-redirected frames
 * (the veths of a pod network, any veth whose peer runs no NAPI): a TC redirect transmits an
 * skb, which every device takes. Also the TC stage behind an XDP program (cfg_tc_stage). */
SEC("tc")
int fp_tc(struct __sk_buff *skb)
{
	enum fp_reason why = FP_PASS_DISABLED;
	__u32 oif = 0;

	/* The TC stage behind an XDP program takes only the frames that program marked; the rest
	 * it passed are the kernel's, and were counted there. The mark is wiped: an skb may keep
	 * its metadata through a redirect into the next namespace, whose own stage must not read
	 * it as its own program's. */
	if (cfg_tc_stage) {
		__u32 *meta = (void *)(long)skb->data_meta;

		if ((void *)(meta + 1) > (void *)(long)skb->data || *meta != FP_META_TC_STAGE)
			return FP_TC_KERNEL;
		*meta = 0;
	}
	if (standing_by()) {
		count(FP_PASS_STANDBY);
		return FP_TC_KERNEL;
	}
	if (!cfg_bridge)
		return router_tc(skb);
	if (sysctl_unread(GATE_CLASS_BRIDGE)) {
		count(FP_PASS_SYSCTL_UNREAD);
		return FP_TC_KERNEL;
	}
	oif = bridge_tc(skb, &why);
	count(why);
	if (oif)
		return bpf_redirect(oif, 0);
	return FP_TC_KERNEL;
}
