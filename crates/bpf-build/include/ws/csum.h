/* Checksums in BPF: the IPv4 header check, the one's-complement fold, and whether a frame's
 * L4 checksum may still be partial (CHECKSUM_PARTIAL from a local sender with offload).
 *
 * Include the kernel's types first ("vmlinux.h" or the uapi headers for iphdr, ipv6hdr,
 * tcphdr and udphdr), then <bpf/bpf_helpers.h> and <bpf/bpf_endian.h>. */
#pragma once

#include "ws/proto.h"

/* RFC 1071 sum of a 20-byte IPv4 header, five 32-bit words at a time; 0 means the checksum
 * is right. */
static __always_inline __u16 ws_ipv4_hdr_csum_check(const struct iphdr *iph)
{
	const __u32 *w = (const __u32 *)iph;
	__u64 sum = (__u64)w[0] + w[1] + w[2] + w[3] + w[4];

	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* One's-complement sum of n 32-bit words, folded to 16 bits (as the words lie in memory, so
 * the result compares with a checksum field as loaded). */
static __always_inline __u16 ws_csum_fold32(__u64 sum)
{
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)((sum & 0xffff) + (sum >> 16));
}

/* Whether an L4 checksum may still be partial: the frame comes from a local sender with
 * checksum offload (a veth peer: the kernel's default) that left the TCP/UDP checksum field
 * holding only the pseudo-header sum, to be completed on the way out (CHECKSUM_PARTIAL). XDP
 * cannot see that state, and a frame redirected from XDP arrives with the field as it is, so
 * its receiver drops it; the kernel's forwarding path keeps the state and delivers. Such frames
 * are the kernel's. A complete checksum equals the pseudo-header sum by chance once in 65,536
 * frames: those go to the kernel too, slower and never wrong. SCTP (CRC32c offload) and IPv6
 * headers that could hide the transport header are treated as partial. `l4_len` is the
 * transport length from the IP header. */
static __always_inline int ws_l4_csum_may_be_partial(__u8 proto, const __u32 *addrs, int words,
						  void *l4, void *data_end, __u32 l4_len)
{
	__u16 *field;
	__u64 sum = 0;

	if (proto == WS_IPPROTO_TCP) {
		struct tcphdr *th = l4;

		if ((void *)(th + 1) > data_end)
			return 0;
		field = &th->check;
	} else if (proto == WS_IPPROTO_UDP) {
		struct udphdr *uh = l4;

		if ((void *)(uh + 1) > data_end)
			return 0;
		field = &uh->check;
	} else {
		return proto == WS_IPPROTO_SCTP;
	}
	for (int i = 0; i < words; i++)
		sum += addrs[i];
	/* Each term on its own into the 64-bit sum: added together in 32 bits first, they
	 * overflow for some lengths (UDP 0x3f0 with protocol 17) and the carry is lost. */
	sum += bpf_htonl(l4_len);
	sum += bpf_htonl(proto);
	return *field == ws_csum_fold32(sum);
}

static __always_inline int ws_l4_csum_may_be_partial_v4(const struct iphdr *iph, void *data_end)
{
	__u32 hlen = iph->ihl * 4;

	/* A fragment's checksum was completed before the sender fragmented. */
	if (iph->frag_off & bpf_htons(WS_IP_MF | WS_IP_OFFSET))
		return 0;
	return ws_l4_csum_may_be_partial(iph->protocol, &iph->saddr, 2, (void *)iph + hlen, data_end,
				      bpf_ntohs(iph->tot_len) - hlen);
}

static __always_inline int ws_l4_csum_may_be_partial_v6(const struct ipv6hdr *ip6h, void *data_end)
{
	switch (ip6h->nexthdr) {
	case WS_IPPROTO_TCP:
	case WS_IPPROTO_UDP:
	case WS_IPPROTO_SCTP:
		return ws_l4_csum_may_be_partial(ip6h->nexthdr, (const __u32 *)&ip6h->saddr, 8,
					      (void *)(ip6h + 1), data_end,
					      bpf_ntohs(ip6h->payload_len));
	case 43:  /* routing */
	case 60:  /* destination options */
	case 51:  /* AH */
	case 135: /* mobility */
	case 139: /* HIP */
	case 140: /* shim6 */
		return 1;
	default:
		return 0;
	}
}

/* The same for any frame: `proto` is the EtherType (network order) of what `l3` points at. */
static __always_inline int ws_csum_may_be_partial(__be16 proto, void *l3, void *data_end)
{
	if (proto == bpf_htons(WS_ETH_P_IP)) {
		struct iphdr *iph = l3;

		return (void *)(iph + 1) <= data_end && ws_l4_csum_may_be_partial_v4(iph, data_end);
	}
	if (proto == bpf_htons(WS_ETH_P_IPV6)) {
		struct ipv6hdr *ip6h = l3;

		return (void *)(ip6h + 1) <= data_end && ws_l4_csum_may_be_partial_v6(ip6h, data_end);
	}
	return 0;
}
