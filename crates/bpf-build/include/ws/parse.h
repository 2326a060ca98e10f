/* Bounds-checked header access, shared by every BPF program of the project. Each helper
 * returns NULL (or fails) when the header does not fit in the frame, so a truncated frame is
 * never read past its end and the verifier can see it.
 *
 * Include the kernel's types first, either "vmlinux.h" or the uapi headers (<linux/bpf.h>,
 * <linux/if_ether.h>, <linux/ip.h>), then <bpf/bpf_helpers.h> and <bpf/bpf_endian.h>. The
 * constants below carry a WS_ prefix because vmlinux.h has no #defines and the uapi headers
 * have only some of them. */
#pragma once

#include "ws/proto.h"

/* A read position in a frame and the frame's end. */
struct ws_cursor {
	void *pos;
	void *end;
};

/* ARP for IPv4 over Ethernet (RFC 826): the fixed-size layout that carries addresses. */
struct ws_arp_ipv4 {
	__be16 htype;
	__be16 ptype;
	__u8 hlen;
	__u8 plen;
	__be16 oper;
	__u8 sha[WS_ETH_ALEN];
	__be32 spa;
	__u8 tha[WS_ETH_ALEN];
	__be32 tpa;
} __attribute__((packed));

/* An 802.1Q/802.1ad tag as it sits after the MAC addresses (its TPID is the EtherType
 * before it). */
struct ws_vlan_tag {
	__be16 tci;
	__be16 inner_proto;
};

/* The next `len` bytes, advancing the cursor, or NULL when they are not all in the frame. */
static __always_inline void *ws_take(struct ws_cursor *c, __u32 len)
{
	void *start = c->pos;

	if (start + len > c->end)
		return NULL;
	c->pos = start + len;
	return start;
}

/* The IPv4 header including options, or NULL when it is truncated or its IHL is invalid. */
static __always_inline struct iphdr *ws_take_ipv4(struct ws_cursor *c)
{
	struct iphdr *ip = c->pos;
	__u32 hlen;

	if ((void *)(ip + 1) > c->end)
		return NULL;
	hlen = ip->ihl * 4;
	if (ip->version != 4 || hlen < sizeof(*ip))
		return NULL;
	if (c->pos + hlen > c->end)
		return NULL;
	c->pos += hlen;
	return ip;
}

/* True for any fragment: only a whole datagram carries ports we can match. */
static __always_inline int ws_is_fragment(const struct iphdr *ip)
{
	return (ip->frag_off & bpf_htons(WS_IP_MF | WS_IP_OFFSET)) != 0;
}

/* True for the EtherTypes that announce a VLAN tag (802.1Q, 802.1ad), network order. */
static __always_inline int ws_is_vlan_proto(__be16 proto)
{
	return proto == bpf_htons(WS_ETH_P_8021Q) || proto == bpf_htons(WS_ETH_P_8021AD);
}

/* The VLAN id (12 bits) of a tag. */
static __always_inline __u16 ws_vlan_id(const struct ws_vlan_tag *tag)
{
	return bpf_ntohs(tag->tci) & WS_VLAN_VID_MASK;
}

/* IPv6 extension headers (RFC 8200, 4.1) as next-header values. */
#define WS_IPPROTO_HOPOPTS 0
#define WS_IPPROTO_ROUTING 43
#define WS_IPPROTO_FRAGMENT 44
#define WS_IPPROTO_DSTOPTS 60

/* How many extension headers ws_ipv6_skip_ext walks at most: the bound of a loop the verifier
 * follows pass by pass, enough for RFC 8200's order (hop-by-hop, destination options,
 * routing, destination options) with room to spare. */
#define WS_IPV6_MAX_EXT 6

/* What ws_ipv6_skip_ext found. */
#define WS_IPV6_WALK_DONE 0      /* the cursor is at the header *nexthdr names */
#define WS_IPV6_WALK_FRAGMENT 1  /* a fragment header: the cursor is at it */
#define WS_IPV6_WALK_TRUNCATED 2 /* an extension header runs past the end */
#define WS_IPV6_WALK_TOO_DEEP 3  /* more than WS_IPV6_MAX_EXT extension headers */

/* The fixed IPv6 header (extension headers follow it), or NULL when it is truncated or its
 * version is not 6. */
static __always_inline struct ipv6hdr *ws_take_ipv6(struct ws_cursor *c)
{
	struct ipv6hdr *ip6 = c->pos;

	if ((void *)(ip6 + 1) > c->end || ip6->version != 6)
		return NULL;
	c->pos = ip6 + 1;
	return ip6;
}

/* True for the extension headers ws_ipv6_skip_ext steps over (all of the form next header,
 * length in 8-octet units beyond the first 8, RFC 8200 4.3-4.6). */
static __always_inline int ws_ipv6_is_skippable_ext(__u8 nexthdr)
{
	return nexthdr == WS_IPPROTO_HOPOPTS || nexthdr == WS_IPPROTO_ROUTING ||
	       nexthdr == WS_IPPROTO_DSTOPTS;
}

/* Steps over hop-by-hop, routing and destination options headers from the cursor, where
 * *nexthdr (the IPv6 header's next header) says what lies: on WS_IPV6_WALK_DONE the cursor
 * is at the upper-layer header (or an extension header walked no further, ESP or AH) and
 * *nexthdr is its protocol. A fragment header stops the walk (WS_IPV6_WALK_FRAGMENT). */
static __always_inline int ws_ipv6_skip_ext(struct ws_cursor *c, __u8 *nexthdr)
{
	int i;

	for (i = 0; i < WS_IPV6_MAX_EXT; i++) {
		__u8 *h = c->pos;
		__u32 len;

		if (*nexthdr == WS_IPPROTO_FRAGMENT)
			return WS_IPV6_WALK_FRAGMENT;
		if (!ws_ipv6_is_skippable_ext(*nexthdr))
			return WS_IPV6_WALK_DONE;
		if ((void *)(h + 2) > c->end)
			return WS_IPV6_WALK_TRUNCATED;
		len = ((__u32)h[1] + 1) * 8;
		if (c->pos + len > c->end)
			return WS_IPV6_WALK_TRUNCATED;
		*nexthdr = h[0];
		c->pos += len;
	}
	if (*nexthdr == WS_IPPROTO_FRAGMENT)
		return WS_IPV6_WALK_FRAGMENT;
	return ws_ipv6_is_skippable_ext(*nexthdr) ? WS_IPV6_WALK_TOO_DEEP : WS_IPV6_WALK_DONE;
}
