// SPDX-License-Identifier: MIT OR Apache-2.0
/* Flow bifurcation: frames for the served IPv4 address and served ports (plus ARP for that
 * address) go to the AF_XDP socket of the queue they arrived on; everything else is XDP_PASS,
 * so management traffic and other applications keep using the kernel stack. Where the
 * address is the stack's alone (steer_all), every frame to it is the stack's.
 *
 * When in doubt (truncated, not IPv4; fragmented unless steer_fragments) the frame passes: the
 * kernel is the fallback and never gets less than it would without this program.
 *
 * It is an xdp.frags program (multi-buffer aware), so a veth or NIC keeps a jumbo MTU with it
 * attached. It reads headers from the frame's linear part only (data..data_end): a frame
 * whose headers do not all lie there counts as truncated and passes. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "ws/parse.h"

#include "config.h"
#include "maps.h"

#define ARPHRD_ETHER_BE bpf_htons(1)
#define ARPHRD_IEEE802_BE bpf_htons(6)

static __always_inline int port_served(__u8 proto, __be16 dport)
{
	__u32 key = ((__u32)proto << 16) | bpf_ntohs(dport);

	return bpf_map_lookup_elem(&served_ports, &key) != NULL;
}

/* 1 when the frame is ours, 0 when it belongs to the kernel, -1 when it is malformed. */
static __always_inline int classify(struct ws_cursor *c)
{
	struct ethhdr *eth = ws_take(c, sizeof(*eth));
	struct iphdr *ip;

	if (!eth)
		return -1;

	if (eth->h_proto == bpf_htons(ETH_P_ARP)) {
		struct ws_arp_ipv4 *arp;

		if (!steer_arp)
			return 0;
		arp = ws_take(c, sizeof(*arp));
		if (!arp)
			return -1;
		/* Linux's arp_process takes IEEE 802 (6) beside Ethernet (1) on an Ethernet port:
		 * where the address is ours alone, so does the stack. */
		if ((arp->htype != ARPHRD_ETHER_BE &&
		     !(steer_all && arp->htype == ARPHRD_IEEE802_BE)) ||
		    arp->ptype != bpf_htons(ETH_P_IP) || arp->hlen != ETH_ALEN || arp->plen != 4)
			return 0;
		return arp->tpa == served_ipv4;
	}

	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return 0;
	ip = ws_take_ipv4(c);
	if (!ip)
		return -1;
	if (ip->daddr != served_ipv4)
		return 0;
	if (ws_is_fragment(ip))
		return steer_fragments ? 1 : -1;
	if (steer_all)
		return 1;

	if (ip->protocol == IPPROTO_TCP && steer_tcp) {
		struct tcphdr *tcp = ws_take(c, sizeof(*tcp));

		if (!tcp)
			return -1;
		return port_served(IPPROTO_TCP, tcp->dest);
	}
	if (ip->protocol == IPPROTO_UDP && steer_udp) {
		struct udphdr *udp = ws_take(c, sizeof(*udp));

		if (!udp)
			return -1;
		return port_served(IPPROTO_UDP, udp->dest);
	}
	if (ip->protocol == IPPROTO_ICMP && steer_icmp)
		return 1;
	return 0;
}

SEC("xdp.frags")
int xdp_bifurcate(struct xdp_md *ctx)
{
	struct ws_cursor c = {
		.pos = (void *)(long)ctx->data,
		.end = (void *)(long)ctx->data_end,
	};
	int ours;
	long action;

	if (served_ipv4 == 0) {
		count(CNT_PASS_OTHER);
		return XDP_PASS;
	}
	ours = classify(&c);
	if (ours < 0) {
		count(CNT_PASS_MALFORMED);
		return XDP_PASS;
	}
	if (!ours) {
		count(CNT_PASS_OTHER);
		return XDP_PASS;
	}
	/* With no socket on this queue the lower bits (XDP_PASS) are the verdict. Never add
	 * XDP metadata (bpf_xdp_adjust_meta) to a redirected frame: in copy mode the kernel
	 * would write it in front of each piece, over the previous piece's tail in the
	 * receive strip of a multi-buffer socket (src/xsk/chain.rs). */
	action = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
	count(action == XDP_REDIRECT ? CNT_REDIRECT : CNT_PASS_NO_SOCKET);
	return action;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
