// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Traffic generator and sink for benchmarks. gen_tx runs under BPF_PROG_RUN with
 * BPF_F_TEST_XDP_LIVE_FRAMES in the source namespace: every run transmits the frame out of the
 * source interface. gen_rx runs the same way in the DUT's namespace, on the DUT's ingress
 * interface: the frame arrives there as if received, meets the XDP program in `dut` (tail
 * call) or, with the slot empty, the kernel's stack (XDP_PASS), all on the calling CPU.
 * sink_drop counts and drops at the sink, as early as the kernel allows, so the sink costs
 * next to nothing. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

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
 * (TTL, MACs) would otherwise get its own output back, so every run writes the frame anew. */
#define GEN_LEN 60
/* As 8-byte words (the last half used): 8 stores instead of 60 keep the generator's share of
 * a shared core small. */
const volatile __u64 frame_words[8] = {};

/* Optionally, frames to cycle through instead (frame_count of them, 0: the one above), e.g.
 * one per destination: a route cache then meets as many destinations as there are frames,
 * each again only after all the others. */
#define GEN_FRAMES 4096
struct gen_frame {
	__u64 words[8];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GEN_FRAMES);
	__type(key, __u32);
	__type(value, struct gen_frame);
} frames SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} frame_count SEC(".maps");

/* One generator thread runs at a time, so a plain global is enough. */
static __u32 next_frame;

static __always_inline int write_frame(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	const __u64 *words = (const __u64 *)frame_words;
	__u32 zero = 0;
	__u32 *count = bpf_map_lookup_elem(&frame_count, &zero);

	if (data + GEN_LEN > end)
		return -1;
	if (count && *count) {
		__u32 i = next_frame;
		struct gen_frame *f;

		next_frame = i + 1 >= *count ? 0 : i + 1;
		f = bpf_map_lookup_elem(&frames, &i);
		if (f)
			words = f->words;
	}
#pragma unroll
	for (int i = 0; i < 7; i++)
		((__u64 *)data)[i] = words[i];
	*(__u32 *)(data + 56) = (__u32)words[7]; /* little-endian: bytes 56..59 */
	return 0;
}

SEC("xdp")
int gen_tx(struct xdp_md *ctx)
{
	if (write_frame(ctx))
		return XDP_ABORTED;
	return XDP_TX;
}

SEC("xdp")
int gen_rx(struct xdp_md *ctx)
{
	if (write_frame(ctx))
		return XDP_ABORTED;
	bpf_tail_call(ctx, &dut, 0);
	return XDP_PASS;
}

SEC("xdp")
int sink_drop(struct xdp_md *ctx)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&sink_count, &zero);

	if (n)
		*n += 1;
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
