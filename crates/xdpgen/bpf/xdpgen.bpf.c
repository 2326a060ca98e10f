// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Traffic generator and sink for benchmarks. gen_tx runs under BPF_PROG_RUN with
 * BPF_F_TEST_XDP_LIVE_FRAMES in the source namespace: every run transmits the frame out of the
 * source interface. gen_rx runs the same way in the DUT's namespace, on the DUT's ingress
 * interface: the frame arrives there as if received, meets the XDP program in `dut` (tail
 * call) or, with the slot empty, the kernel's stack (XDP_PASS), all on the calling CPU.
 * sink_drop counts and drops at the sink, as early as the kernel allows, so the sink costs
 * next to nothing; it also counts the frames that look as expected (sink_expect) and keeps one
 * sample frame for userspace to check in full. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} sink_count SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} dut SEC(".maps");

/* The frame to send. Live frames are recycled pages: a DUT that rewrites headers in place
 * (TTL, MACs) would otherwise get its own output back, so every run writes the frame anew.
 * Its length is frame_len, set at load: GEN_LEN (minimum size, IPv4) or more, up to
 * GEN_MAX_LEN (an IPv6 SYN is 74 bytes). Read-only data, so the verifier knows it and drops
 * the path not taken: a GEN_LEN generator runs exactly the stores it always ran. */
#define GEN_LEN 60
#define GEN_MAX_LEN 96
const volatile __u32 frame_len = GEN_LEN;
/* As 8-byte words (of a GEN_LEN frame the first 7 and a half): 8 stores instead of 60 keep
 * the generator's share of a shared core small. */
const volatile __u64 frame_words[GEN_MAX_LEN / 8] = {};

/* Optionally, frames to cycle through instead (frame_count of them, 0: the one above), e.g.
 * one per destination: a route cache then meets as many destinations as there are frames,
 * each again only after all the others. GEN_LEN frames live in `frames`, longer ones in
 * `frames_long` (userspace shrinks the one it does not use to one entry): a GEN_LEN table
 * keeps one cache line per frame. */
#define GEN_FRAMES 4096
struct gen_frame {
	__u64 words[8];
};

struct gen_frame_long {
	__u64 words[GEN_MAX_LEN / 8];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GEN_FRAMES);
	__type(key, __u32);
	__type(value, struct gen_frame);
} frames SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GEN_FRAMES);
	__type(key, __u32);
	__type(value, struct gen_frame_long);
} frames_long SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} frame_count SEC(".maps");

/* Where each CPU's generator is in the frame table, and optionally the window of it the CPU
 * cycles through (len 0: all of it), so that generators on two CPUs can carry disjoint flows
 * as RSS would spread them. Per CPU, so that they share no written cache line (a measurement
 * of scaling must not measure the instrument). */
struct gen_cursor {
	__u32 next_frame;
	__u32 first;
	__u32 len;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gen_cursor);
} cursor SEC(".maps");

/* Optionally, every frame run gets a source of its own from a counter n, and the checksums
 * are fixed incrementally; which fields, the L4 checksum's offset says:
 *  - 40 (UDP) or 50 (TCP): IPv4 without options. The source address's last octet takes
 *    1 + n % 250 and the L4 source port 1024 + (n / 250) % 64000; the IPv4 and L4 checksums
 *    are fixed. 16 million distinct sources.
 *  - 60 (UDP) or 70 (TCP): IPv6 without extension headers. The source address's low 16 bits
 *    take 1 + n % 65535 and the source port 1024 + (n / 65535) % 64000; the L4 checksum is
 *    fixed (IPv6 has no header checksum; a UDP checksum that comes out 0 is sent as 0xffff).
 * The frame must carry 0 in those bits of the address and port 0, its checksums computed so:
 * new connections, each frame. */
/* One counter for all CPUs: distinct sources are for one generator at a time. */
static __u32 vary_next;

struct gen_vary {
	__u32 on;
	__u32 l4_csum_off; /* from the frame's start: 50/70 for TCP, 40/60 for UDP */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gen_vary);
} vary SEC(".maps");


static __always_inline __u16 csum_add(__u16 csum_be, __u32 add)
{
	__u32 sum = (~bpf_ntohs(csum_be) & 0xffff) + add;

	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return bpf_htons(~sum & 0xffff);
}

/* The frame table's next index for this CPU; false while there is no table. */
static __always_inline int next_frame(__u32 *count, __u32 *index)
{
	__u32 zero = 0;
	struct gen_cursor *c = count && *count ? bpf_map_lookup_elem(&cursor, &zero) : NULL;

	if (!c)
		return 0;
	__u32 first = c->len ? c->first : 0;
	__u32 stop = c->len ? c->first + c->len : *count;
	__u32 i = c->next_frame;

	if (stop > *count)
		stop = *count;
	/* Outside the window (or a table shorter than the last one): start over. */
	if (i < first || i >= stop)
		i = first;
	c->next_frame = i + 1 >= stop ? first : i + 1;
	*index = i;
	return 1;
}

/* A frame longer than GEN_LEN: its whole words, then 4, 2 and 1 bytes as its length asks.
 * `len` is frame_len, a constant to the verifier, so every branch here is decided at load. */
static __always_inline int write_long(void *data, void *end, __u32 *count)
{
	const __u64 *words = (const __u64 *)frame_words;
	__u32 len = frame_len;
	__u32 i;

	if (len > GEN_MAX_LEN || data + len > end)
		return -1;
	if (next_frame(count, &i)) {
		struct gen_frame_long *f = bpf_map_lookup_elem(&frames_long, &i);

		if (f)
			words = f->words;
	}
#pragma unroll
	for (int k = 0; k < GEN_MAX_LEN / 8; k++)
		if (8 * k + 8 <= len)
			((__u64 *)data)[k] = words[k];
	if (len & 7) {
		__u32 at = len & ~7u;
		__u64 tail = words[len / 8];

		if (len & 4) {
			*(__u32 *)(data + at) = (__u32)tail; /* little-endian: the word's first bytes */
			tail >>= 32;
			at += 4;
		}
		if (len & 2) {
			*(__u16 *)(data + at) = (__u16)tail;
			tail >>= 16;
			at += 2;
		}
		if (len & 1)
			*(__u8 *)(data + at) = (__u8)tail;
	}
	return 0;
}

static __always_inline int write_frame(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	const __u64 *words = (const __u64 *)frame_words;
	__u32 zero = 0;
	__u32 *count = bpf_map_lookup_elem(&frame_count, &zero);

	if (frame_len != GEN_LEN) {
		if (write_long(data, end, count))
			return -1;
	} else {
		__u32 i;

		if (data + GEN_LEN > end)
			return -1;
		if (next_frame(count, &i)) {
			struct gen_frame *f = bpf_map_lookup_elem(&frames, &i);

			if (f)
				words = f->words;
		}
#pragma unroll
		for (int i = 0; i < 7; i++)
			((__u64 *)data)[i] = words[i];
		*(__u32 *)(data + 56) = (__u32)words[7]; /* little-endian: bytes 56..59 */
	}

	struct gen_vary *v = bpf_map_lookup_elem(&vary, &zero);
	if (v && v->on) {
		__u32 n = vary_next++;
		__u32 off = v->l4_csum_off;
		__u8 *p = data;

		if (off == 40 || off == 50) {
			__u32 octet = 1 + n % 250;
			__u32 sport = 1024 + (n / 250) % 64000;

			p[29] = octet;
			*(__u16 *)(p + 34) = bpf_htons(sport);
			*(__u16 *)(p + 24) = csum_add(*(__u16 *)(p + 24), octet);
			if (off == 50)
				*(__u16 *)(p + 50) = csum_add(*(__u16 *)(p + 50), octet + sport);
			else
				*(__u16 *)(p + 40) = csum_add(*(__u16 *)(p + 40), octet + sport);
		} else if (off == 60 || off == 70) {
			__u32 low = 1 + n % 65535;
			__u32 sport = 1024 + (n / 65535) % 64000;

			if ((void *)(p + 62) > end)
				return 0;
			if (off == 70) {
				if ((void *)(p + 72) > end)
					return 0;
				*(__u16 *)(p + 70) = csum_add(*(__u16 *)(p + 70), low + sport);
			} else {
				__u16 c = csum_add(*(__u16 *)(p + 60), low + sport);

				*(__u16 *)(p + 60) = c ? c : 0xffff;
			}
			*(__u16 *)(p + 36) = bpf_htons(low);
			*(__u16 *)(p + 54) = bpf_htons(sport);
		}
	}
	return 0;
}

SEC("xdp")
int gen_tx(struct xdp_md *ctx)
{
	if (write_frame(ctx))
		return XDP_ABORTED;
	return XDP_TX;
}

/* Frames gen_rx has run, per CPU: the offered load over exactly the interval the sinks are
 * read over. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} rx_count SEC(".maps");

SEC("xdp")
int gen_rx(struct xdp_md *ctx)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&rx_count, &zero);

	if (n)
		*n += 1;
	if (write_frame(ctx))
		return XDP_ABORTED;
	bpf_tail_call(ctx, &dut, 0);
	return XDP_PASS;
}

/* What a correct frame looks like at the sink: up to SINK_WORDS 4-byte words at offsets below
 * SINK_SPAN, each compared under a mask (bytes in frame order). Frames that match are counted
 * in sink_match as well as sink_count; n == 0 matches every frame. */
#define SINK_WORDS 8
#define SINK_SPAN 128
struct sink_word {
	__u32 off;
	__u32 mask;
	__u32 value;
};
struct sink_expect {
	__u32 n;
	__u32 pad;
	struct sink_word w[SINK_WORDS];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sink_expect);
} sink_expect SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} sink_match SEC(".maps");

/* The first frame to arrive after userspace zeroed `len`, for a full check in userspace. */
struct sink_sample {
	__u32 len; /* the frame's length (the copy is at most SINK_SPAN bytes) */
	__u32 pad;
	__u8 data[SINK_SPAN];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sink_sample);
} sink_sample SEC(".maps");

static __always_inline int sink_matches(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 zero = 0;
	struct sink_expect *e = bpf_map_lookup_elem(&sink_expect, &zero);

	if (!e)
		return 1;
#pragma unroll
	for (int i = 0; i < SINK_WORDS; i++) {
		if (i >= e->n)
			break;
		__u32 off = e->w[i].off & (SINK_SPAN - 1);
		__u32 word;

		if (data + off + 4 > end)
			return 0;
		__builtin_memcpy(&word, data + off, 4);
		if ((word & e->w[i].mask) != e->w[i].value)
			return 0;
	}
	return 1;
}

/* What may be a sample: IPv4, or IPv6 carrying TCP, UDP or a tunnel. The kernel's own ARP,
 * neighbour discovery and MLD on the lab's links are noise. */
static __always_inline int sampled(struct xdp_md *ctx)
{
	__u8 *p = (void *)(long)ctx->data;

	if ((void *)(p + 21) > (void *)(long)ctx->data_end)
		return 0;
	if (p[12] == 0x08 && p[13] == 0x00)
		return 1;
	return p[12] == 0x86 && p[13] == 0xdd &&
	       (p[20] == 6 || p[20] == 17 || p[20] == 4 || p[20] == 41);
}

/* The sequence number a sink answers a TCP SYN with (0: it answers nothing). A balancer that
 * keeps a connection half-open until the client acknowledges the real's SYN-ACK (the wirespeed
 * load balancer's NAT and full-NAT) needs the backends to answer while connections are primed;
 * the measured frames then acknowledge this number plus one. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} sink_syn_ack SEC(".maps");

/* A plain IPv4 TCP SYN (no IP options) turned into its SYN-ACK in place: addresses, ports and
 * MACs swapped (the checksums do not see a swap), sequence `isn`, acknowledgement the SYN's
 * plus one; the TCP checksum follows the three changed words. 1 when answered. */
static __always_inline int answer_syn(struct xdp_md *ctx, __u32 isn)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	struct tcphdr *th = (void *)(ip + 1);
	__u8 mac[6];
	__be32 a;
	__be16 port;
	__u16 old_flags, new_flags;
	__u32 sum;

	if ((void *)(th + 1) > end || eth->h_proto != bpf_htons(0x0800) || ip->ihl != 5 ||
	    ip->protocol != 6 || ((__u8 *)th)[13] != 0x02)
		return 0;
	__builtin_memcpy(mac, eth->h_source, 6);
	__builtin_memcpy(eth->h_source, eth->h_dest, 6);
	__builtin_memcpy(eth->h_dest, mac, 6);
	a = ip->saddr;
	ip->saddr = ip->daddr;
	ip->daddr = a;
	port = th->source;
	th->source = th->dest;
	th->dest = port;
	old_flags = *(__u16 *)((__u8 *)th + 12);
	((__u8 *)th)[13] = 0x12;
	new_flags = *(__u16 *)((__u8 *)th + 12);
	__be32 old_seq = th->seq, old_ack = th->ack_seq;

	th->ack_seq = bpf_htonl(bpf_ntohl(old_seq) + 1);
	th->seq = bpf_htonl(isn);
	sum = (__u16)~th->check;
	sum += (__u16)~old_flags + new_flags;
	sum += (__u16)~(old_seq & 0xffff) + (__u16)~(old_seq >> 16);
	sum += (__u16)~(old_ack & 0xffff) + (__u16)~(old_ack >> 16);
	sum += (th->seq & 0xffff) + (th->seq >> 16) + (th->ack_seq & 0xffff) + (th->ack_seq >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	th->check = ~sum;
	return 1;
}

SEC("xdp")
int sink_drop(struct xdp_md *ctx)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&sink_count, &zero);
	struct sink_sample *s = bpf_map_lookup_elem(&sink_sample, &zero);
	__u32 *isn = bpf_map_lookup_elem(&sink_syn_ack, &zero);

	if (n)
		*n += 1;
	if (isn && *isn && answer_syn(ctx, *isn))
		return XDP_TX;
	if (sink_matches(ctx)) {
		__u64 *m = bpf_map_lookup_elem(&sink_match, &zero);

		if (m)
			*m += 1;
	}
	if (s && s->len == 0 && sampled(ctx)) {
		__u32 len = ctx->data_end - ctx->data;
		__u32 take = len - 1;
		long err;

		/* The verifier wants the copy's size in [1, SINK_SPAN] by construction; the empty
		 * asm keeps the compiler from folding the mask away for lengths it knows are small. */
		asm volatile("" : "+r"(take));
		take = (take & (SINK_SPAN - 1)) + 1;
		if (len > SINK_SPAN)
			err = bpf_xdp_load_bytes(ctx, 0, s->data, SINK_SPAN);
		else
			err = bpf_xdp_load_bytes(ctx, 0, s->data, take);
		if (len >= 14 && err == 0)
			s->len = len;
	}
	return XDP_DROP;
}

/* The same sink at TC ingress. It leaves the sink's veth without NAPI (no XDP program, and
 * GRO off as the kernel leaves it), so that the DUT's egress into it takes no XDP-redirected
 * frames: the case the fast path serves from TC. */
SEC("tc")
int sink_drop_tc(struct __sk_buff *skb)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&sink_count, &zero);

	if (n)
		*n += 1;
	return 2; /* TC_ACT_SHOT */
}

/* The floor of any XDP forwarder on this lab: set the MACs and redirect to one interface,
 * nothing looked up. Attached in the DUT's place, it tells how much of a forwarder's cost per
 * packet is the redirect and the receiving side rather than its own work. */
struct fwd_cfg {
	__u32 ifindex;
	__u8 dst[6];
	__u8 src[6];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fwd_cfg);
} fwd_to SEC(".maps");

SEC("xdp")
int fwd_redirect(struct xdp_md *ctx)
{
	__u8 *p = (void *)(long)ctx->data;
	__u32 zero = 0;
	struct fwd_cfg *c = bpf_map_lookup_elem(&fwd_to, &zero);

	if (!c || (void *)(p + 14) > (void *)(long)ctx->data_end)
		return XDP_PASS;
	__builtin_memcpy(p, c->dst, 6);
	__builtin_memcpy(p + 6, c->src, 6);
	return bpf_redirect(c->ifindex, 0);
}
