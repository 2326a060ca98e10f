// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The decapsulator for a tunnel-mode real: on a host whose kernel has no tunl0, sit0 or
 * ip6tnl0 (or no fou), it takes the load balancer's IPIP, 6in4, IP6IP6 and 4in6 packets, and
 * its GUE datagrams (variant 1: the UDP payload is the inner IP packet) to a configured UDP
 * port, for a configured VIP, strips the outer headers in place and hands the inner packet to the kernel (XDP_PASS),
 * which delivers it to the VIP on lo as if it had arrived bare. Everything else passes
 * unchanged. The inner packet is not touched: its checksums are end to end. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "ws/proto.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define DECAP_FAMILY_V4 4
#define DECAP_FAMILY_V6 6
#define ETH_ALEN 6

/* What happened to a frame, the index of the per-CPU `counters` array. The order is kept by
 * crates/lb/src/decap.rs (`COUNTERS`): change both together. */
enum decap_reason {
	DECAP_IPIP = 0,      /* v4 in v4, stripped */
	DECAP_6IN4,          /* v6 in v4 (protocol 41), stripped */
	DECAP_IP6IP6,        /* v6 in v6, stripped */
	DECAP_4IN6,          /* v4 in v6, stripped */
	DECAP_PASS_NOT_IP,   /* neither IPv4 nor IPv6 */
	DECAP_PASS_VLAN,     /* a tagged frame */
	DECAP_PASS_BAD_HEADER, /* truncated or inconsistent outer or inner header */
	DECAP_PASS_IP_OPTIONS, /* outer IPv4 options or IPv6 extension headers */
	DECAP_PASS_FRAGMENT, /* an outer IPv4 fragment */
	DECAP_PASS_NOT_TUNNEL, /* outer protocol neither 4 nor 41, nor UDP to a GUE port */
	DECAP_PASS_NOT_LOCAL, /* outer destination not one of the addresses given at load */
	DECAP_PASS_NOT_VIP,  /* inner destination not a configured VIP */
	DECAP_PASS_ADJUST,   /* bpf_xdp_adjust_head refused (the frame is unchanged) */
	DECAP_GUE_V4,        /* GUE over IPv4 (either inner family), stripped */
	DECAP_GUE_V6,        /* GUE over IPv6 (either inner family), stripped */
	DECAP_NR_REASONS,
};

/* A VIP or a local address: IPv4 in the first four bytes, the rest zero. */
struct decap_addr {
	__u8 addr[16];
	__u8 family;
	__u8 pad[3];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct decap_addr);
	__type(value, __u8);
} vips SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct decap_addr);
	__type(value, __u8);
} outer_dsts SEC(".maps");

/* The UDP ports (network order) whose datagrams are GUE: `lb decap --gue-port`. A map rather
 * than a constant so that `lb doctor --real` can read which ports a running decap serves. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __be16);
	__type(value, __u8);
} gue_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DECAP_NR_REASONS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* Set at load: 1 when outer destinations were given (only those are decapsulated), 0 for
 * any outer destination. */
const volatile __u8 cfg_check_outer_dst = 0;

static __always_inline int count(enum decap_reason r)
{
	__u32 k = r;
	__u64 *c = bpf_map_lookup_elem(&counters, &k);

	if (c)
		*c += 1;
	return XDP_PASS;
}

static __always_inline void addr_v4(struct decap_addr *k, __be32 a)
{
	__builtin_memset(k, 0, sizeof(*k));
	__builtin_memcpy(k->addr, &a, 4);
	k->family = DECAP_FAMILY_V4;
}

static __always_inline void addr_v6(struct decap_addr *k, const struct in6_addr *a)
{
	__builtin_memset(k, 0, sizeof(*k));
	__builtin_memcpy(k->addr, a, 16);
	k->family = DECAP_FAMILY_V6;
}

/* The inner header at `inner` is complete and goes to a VIP: 0, else the reason to pass. */
static __always_inline int inner_to_vip(void *inner, void *end, int v6)
{
	struct decap_addr k;

	if (v6) {
		struct ipv6hdr *ip6h = inner;

		if ((void *)(ip6h + 1) > end || ip6h->version != 6)
			return DECAP_PASS_BAD_HEADER;
		addr_v6(&k, &ip6h->daddr);
	} else {
		struct iphdr *iph = inner;

		if ((void *)(iph + 1) > end || iph->version != 4 || iph->ihl < 5)
			return DECAP_PASS_BAD_HEADER;
		addr_v4(&k, iph->daddr);
	}
	if (!bpf_map_lookup_elem(&vips, &k))
		return DECAP_PASS_NOT_VIP;
	return 0;
}

/* A GUE datagram's UDP header at `udp`, `ip_payload` bytes of outer IP payload: 0 with the
 * inner family in *inner_v6, else the reason to pass. Variant 1 only: the payload's first
 * nibble is the inner IP version (a variant 0 GUE header starts with bits 00). The outer UDP
 * checksum is not verified: the inner packet's checksums are end to end. */
static __always_inline int gue_inner(struct udphdr *udp, void *end, __u32 ip_payload,
				     int *inner_v6)
{
	__u8 *first = (void *)(udp + 1);

	if ((void *)(first + 1) > end)
		return DECAP_PASS_BAD_HEADER;
	if (!bpf_map_lookup_elem(&gue_ports, &udp->dest))
		return DECAP_PASS_NOT_TUNNEL;
	if (bpf_ntohs(udp->len) != ip_payload)
		return DECAP_PASS_BAD_HEADER;
	if (*first >> 4 == 4)
		*inner_v6 = 0;
	else if (*first >> 4 == 6)
		*inner_v6 = 1;
	else
		return DECAP_PASS_NOT_TUNNEL;
	return 0;
}

SEC("xdp")
int decap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct decap_addr k;
	__u8 dmac[ETH_ALEN], smac[ETH_ALEN];
	__u32 outer_len;
	int inner_v6, why;
	enum decap_reason done;

	if ((void *)(eth + 1) > end)
		return count(DECAP_PASS_BAD_HEADER);
	if (eth->h_proto == bpf_htons(WS_ETH_P_IP)) {
		struct iphdr *iph = (void *)(eth + 1);

		if ((void *)(iph + 1) > end)
			return count(DECAP_PASS_BAD_HEADER);
		if (iph->version != 4 || iph->ihl < 5)
			return count(DECAP_PASS_BAD_HEADER);
		if (iph->ihl != 5)
			return count(DECAP_PASS_IP_OPTIONS);
		if (iph->protocol != WS_IPPROTO_IPIP && iph->protocol != WS_IPPROTO_IPV6 &&
		    iph->protocol != WS_IPPROTO_UDP)
			return count(DECAP_PASS_NOT_TUNNEL);
		if (iph->frag_off & bpf_htons(0x3fff))
			return count(DECAP_PASS_FRAGMENT);
		if (bpf_ntohs(iph->tot_len) < 20 ||
		    (void *)iph + bpf_ntohs(iph->tot_len) > end)
			return count(DECAP_PASS_BAD_HEADER);
		if (cfg_check_outer_dst) {
			addr_v4(&k, iph->daddr);
			if (!bpf_map_lookup_elem(&outer_dsts, &k))
				return count(DECAP_PASS_NOT_LOCAL);
		}
		if (iph->protocol == WS_IPPROTO_UDP) {
			struct udphdr *udp = (void *)(iph + 1);

			why = gue_inner(udp, end, bpf_ntohs(iph->tot_len) - sizeof(*iph), &inner_v6);
			if (why)
				return count(why);
			why = inner_to_vip(udp + 1, end, inner_v6);
			outer_len = sizeof(*iph) + sizeof(*udp);
			done = DECAP_GUE_V4;
		} else {
			inner_v6 = iph->protocol == WS_IPPROTO_IPV6;
			why = inner_to_vip(iph + 1, end, inner_v6);
			outer_len = sizeof(*iph);
			done = inner_v6 ? DECAP_6IN4 : DECAP_IPIP;
		}
	} else if (eth->h_proto == bpf_htons(WS_ETH_P_IPV6)) {
		struct ipv6hdr *ip6h = (void *)(eth + 1);
		__u8 nh;

		if ((void *)(ip6h + 1) > end || ip6h->version != 6)
			return count(DECAP_PASS_BAD_HEADER);
		nh = ip6h->nexthdr;
		if (nh != WS_IPPROTO_IPIP && nh != WS_IPPROTO_IPV6 && nh != WS_IPPROTO_UDP) {
			/* Hop-by-hop, routing, fragment, destination options: a tunnel behind them
			 * (ip6tnl's encapsulation limit, say) is not looked for. */
			if (nh == 0 || nh == 43 || nh == 44 || nh == 60)
				return count(DECAP_PASS_IP_OPTIONS);
			return count(DECAP_PASS_NOT_TUNNEL);
		}
		if ((void *)(ip6h + 1) + bpf_ntohs(ip6h->payload_len) > end)
			return count(DECAP_PASS_BAD_HEADER);
		if (cfg_check_outer_dst) {
			addr_v6(&k, &ip6h->daddr);
			if (!bpf_map_lookup_elem(&outer_dsts, &k))
				return count(DECAP_PASS_NOT_LOCAL);
		}
		if (nh == WS_IPPROTO_UDP) {
			struct udphdr *udp = (void *)(ip6h + 1);

			why = gue_inner(udp, end, bpf_ntohs(ip6h->payload_len), &inner_v6);
			if (why)
				return count(why);
			why = inner_to_vip(udp + 1, end, inner_v6);
			outer_len = sizeof(*ip6h) + sizeof(*udp);
			done = DECAP_GUE_V6;
		} else {
			inner_v6 = nh == WS_IPPROTO_IPV6;
			why = inner_to_vip(ip6h + 1, end, inner_v6);
			outer_len = sizeof(*ip6h);
			done = inner_v6 ? DECAP_IP6IP6 : DECAP_4IN6;
		}
	} else if (eth->h_proto == bpf_htons(0x8100) || eth->h_proto == bpf_htons(0x88A8)) {
		return count(DECAP_PASS_VLAN);
	} else {
		return count(DECAP_PASS_NOT_IP);
	}
	if (why)
		return count(why);

	/* The Ethernet header moves forward over the outer IP header: its MACs are kept (the
	 * frame was for this host), its EtherType becomes the inner family's. */
	__builtin_memcpy(dmac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(smac, eth->h_source, ETH_ALEN);
	if (bpf_xdp_adjust_head(ctx, outer_len))
		return count(DECAP_PASS_ADJUST);
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > end)
		return count(DECAP_PASS_BAD_HEADER); /* cannot happen: the inner header was checked */
	__builtin_memcpy(eth->h_dest, dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, smac, ETH_ALEN);
	eth->h_proto = bpf_htons(inner_v6 ? WS_ETH_P_IPV6 : WS_ETH_P_IP);
	return count(done);
}
