// SPDX-License-Identifier: MIT OR Apache-2.0
/* Flow bifurcation: frames for the served IPv4 or IPv6 address and served ports (plus ARP and
 * NDP for those addresses) go to the AF_XDP socket of the queue they arrived on; everything
 * else is XDP_PASS, so management traffic and other applications keep using the kernel stack.
 * Where the addresses are the stack's alone (steer_all), every frame to them is the stack's.
 *
 * IPv6 (served_ipv6 set) mirrors IPv4, and the stack's link-local address (served_ipv6_ll, when
 * set) is one more served address: wherever served_ipv6 is named below, so is it. To the served
 * address: TCP and UDP to a served port (the same port map as IPv4), ICMPv6 echo request and
 * reply and ICMPv6 errors (steer_icmp), Neighbour Solicitations and Advertisements (steer_arp),
 * everything unfragmented with steer_all. Hop-by-hop, routing and destination options headers
 * are walked (at most WS_IPV6_MAX_EXT of them) to find the transport header; a fragment header
 * stops the walk and is a fragment as in IPv4; a chain that does not end within the walk or
 * within the frame's linear part passes, unless steer_all. To a multicast group: a Neighbour
 * Solicitation whose target is served_ipv6, sent to its solicited-node group ff02::1:ffXX:XXXX,
 * and a Neighbour Advertisement whose target is served_ipv6 sent to all nodes (ff02::1, a
 * duplicate address) are the stack's (steer_arp); with steer_all, also everything to that
 * solicited-node group, and an echo request or a solicitation for served_ipv6 to all nodes
 * (what a host with the address answers there). Other multicast (router advertisements, MLD,
 * ...) passes. ICMPv6 checksums are left to the stack.
 *
 * When in doubt (truncated, neither IPv4 nor IPv6; fragmented unless steer_fragments) the frame
 * passes: the kernel is the fallback and never gets less than it would without this program.
 *
 * It is an xdp.frags program (multi-buffer aware), so a veth or NIC keeps a jumbo MTU with it
 * attached. It reads headers from the frame's linear part only (data..data_end): a frame
 * whose headers do not all lie there counts as truncated and passes. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "ws/parse.h"

#include "config.h"
#include "maps.h"

#define ARPHRD_ETHER_BE bpf_htons(1)
#define ARPHRD_IEEE802_BE bpf_htons(6)

#define ICMPV6_ECHO_REQUEST 128
#define ICMPV6_ECHO_REPLY 129
#define NDISC_NEIGHBOUR_SOLICITATION 135
#define NDISC_NEIGHBOUR_ADVERTISEMENT 136

/* The first four bytes of every ICMPv6 message (RFC 4443). */
struct icmp6_head {
	__u8 type;
	__u8 code;
	__be16 checksum;
};

/* What follows them in a Neighbour Solicitation or Advertisement (RFC 4861 4.3, 4.4): flags
 * (reserved in a solicitation), then the target address; options follow. */
struct nd_body {
	__be32 flags;
	__be32 target[4];
};

static __always_inline int port_served(__u8 proto, __be16 dport)
{
	__u32 key = ((__u32)proto << 16) | bpf_ntohs(dport);

	return bpf_map_lookup_elem(&served_ports, &key) != NULL;
}

/* True when the IPv6 address at `a` (network order words) is served_ipv6 or, where there is
 * one, served_ipv6_ll. */
static __always_inline int is_served_ipv6(const __be32 *a)
{
	return (a[0] == served_ipv6[0] && a[1] == served_ipv6[1] && a[2] == served_ipv6[2] &&
		a[3] == served_ipv6[3]) ||
	       (serve_ipv6_ll && a[0] == served_ipv6_ll[0] && a[1] == served_ipv6_ll[1] &&
		a[2] == served_ipv6_ll[2] && a[3] == served_ipv6_ll[3]);
}

/* The last word of the solicited-node group of an address whose last word is `w`. */
static __always_inline __be32 solicited_node_low(__be32 w)
{
	return bpf_htonl(0xff000000) | (w & bpf_htonl(0x00ffffff));
}

/* True when `a` is the solicited-node group, ff02::1:ffXX:XXXX (RFC 4291 2.7.1), of
 * served_ipv6 or served_ipv6_ll. */
static __always_inline int is_solicited_node_group(const __be32 *a)
{
	return a[0] == bpf_htonl(0xff020000) && a[1] == 0 && a[2] == bpf_htonl(1) &&
	       (a[3] == solicited_node_low(served_ipv6[3]) ||
		(serve_ipv6_ll && a[3] == solicited_node_low(served_ipv6_ll[3])));
}

/* True when `a` is the all-nodes group ff02::1. */
static __always_inline int is_all_nodes_group(const __be32 *a)
{
	return a[0] == bpf_htonl(0xff020000) && a[1] == 0 && a[2] == 0 && a[3] == bpf_htonl(1);
}

/* An IPv6 frame to a multicast group: neighbour discovery about served_ipv6 is ours (a
 * solicitation to its solicited-node group, an advertisement of a duplicate to all nodes).
 * Where the address is the stack's alone (steer_all), so is what a host with that address
 * answers at those groups: everything to its solicited-node group, and at all nodes an echo
 * request and a solicitation for the address. The rest of all nodes (router advertisements,
 * MLD queries) stays the kernel's. */
static __always_inline int classify_ipv6_multicast(struct ws_cursor *c, const struct ipv6hdr *ip6,
						   __u8 nexthdr, int walk)
{
	const __be32 *daddr = ip6->daddr.in6_u.u6_addr32;
	int our_group = is_solicited_node_group(daddr);
	struct icmp6_head *icmp;
	struct nd_body *nd;

	if (steer_all && our_group)
		return 1;
	if (walk != WS_IPV6_WALK_DONE || nexthdr != WS_IPPROTO_ICMPV6)
		return 0;
	icmp = ws_take(c, sizeof(*icmp));
	if (!icmp)
		return -1;
	if (icmp->type == ICMPV6_ECHO_REQUEST)
		return steer_all && is_all_nodes_group(daddr);
	if (icmp->type == NDISC_NEIGHBOUR_SOLICITATION) {
		if (!our_group && !(steer_all && is_all_nodes_group(daddr)))
			return 0;
	} else if (icmp->type == NDISC_NEIGHBOUR_ADVERTISEMENT) {
		if (!is_all_nodes_group(daddr))
			return 0;
	} else {
		return 0;
	}
	nd = ws_take(c, sizeof(*nd));
	if (!nd)
		return -1;
	return is_served_ipv6(nd->target);
}

/* 1 when the IPv6 frame is ours, 0 when it belongs to the kernel, -1 when it is malformed. */
static __always_inline int classify_ipv6(struct ws_cursor *c)
{
	struct ipv6hdr *ip6 = ws_take_ipv6(c);
	__u8 nexthdr;
	int walk;

	if (!ip6)
		return -1;
	nexthdr = ip6->nexthdr;
	if (!is_served_ipv6(ip6->daddr.in6_u.u6_addr32)) {
		if (!(steer_arp || steer_all) || ip6->daddr.in6_u.u6_addr8[0] != 0xff)
			return 0;
		walk = ws_ipv6_skip_ext(c, &nexthdr);
		return classify_ipv6_multicast(c, ip6, nexthdr, walk);
	}
	walk = ws_ipv6_skip_ext(c, &nexthdr);
	if (walk == WS_IPV6_WALK_FRAGMENT)
		return steer_fragments ? 1 : -1;
	/* The address is the stack's alone: so is a chain the walk could not finish (a fragment
	 * header past the walk's bound included). */
	if (steer_all)
		return 1;
	if (walk != WS_IPV6_WALK_DONE)
		return -1;

	if (nexthdr == WS_IPPROTO_TCP && steer_tcp) {
		struct tcphdr *tcp = ws_take(c, sizeof(*tcp));

		if (!tcp)
			return -1;
		return port_served(WS_IPPROTO_TCP, tcp->dest);
	}
	if (nexthdr == WS_IPPROTO_UDP && steer_udp) {
		struct udphdr *udp = ws_take(c, sizeof(*udp));

		if (!udp)
			return -1;
		return port_served(WS_IPPROTO_UDP, udp->dest);
	}
	if (nexthdr == WS_IPPROTO_ICMPV6 && (steer_icmp || steer_arp)) {
		struct icmp6_head *icmp = ws_take(c, sizeof(*icmp));

		if (!icmp)
			return -1;
		/* Errors (the types below 128, RFC 4443 2.1), echo request and echo reply. */
		if (icmp->type <= ICMPV6_ECHO_REPLY)
			return steer_icmp;
		if (icmp->type == NDISC_NEIGHBOUR_SOLICITATION ||
		    icmp->type == NDISC_NEIGHBOUR_ADVERTISEMENT)
			return steer_arp;
		return 0;
	}
	return 0;
}

/* 1 when the frame is ours, 0 when it belongs to the kernel, -1 when it is malformed. */
static __always_inline int classify(struct ws_cursor *c)
{
	struct ethhdr *eth = ws_take(c, sizeof(*eth));
	struct iphdr *ip;

	if (!eth)
		return -1;

	if (eth->h_proto == bpf_htons(ETH_P_IPV6))
		return serve_ipv6 ? classify_ipv6(c) : 0;
	if (served_ipv4 == 0)
		return 0;

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

	if (served_ipv4 == 0 && !serve_ipv6) {
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
