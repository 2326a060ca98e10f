/* Bounds-checked header access. Every helper returns NULL when the header does not fit in the
 * frame, so a truncated frame is never read past its end (and the verifier can see it). */
#pragma once

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>

struct cursor {
	void *pos;
	void *end;
};

/* ARP for IPv4 over Ethernet (RFC 826): the fixed-size layout that carries addresses. */
struct arp_ipv4 {
	__be16 htype;
	__be16 ptype;
	__u8 hlen;
	__u8 plen;
	__be16 oper;
	__u8 sha[ETH_ALEN];
	__be32 spa;
	__u8 tha[ETH_ALEN];
	__be32 tpa;
} __attribute__((packed));

static __always_inline void *take(struct cursor *c, __u32 len)
{
	void *start = c->pos;

	if (start + len > c->end)
		return NULL;
	c->pos = start + len;
	return start;
}

/* The IPv4 header including options, or NULL when it is truncated or its IHL is invalid. */
static __always_inline struct iphdr *take_ipv4(struct cursor *c)
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
static __always_inline int is_fragment(const struct iphdr *ip)
{
	return (ip->frag_off & bpf_htons(0x3fff)) != 0;
}
