// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Traffic generator and sink for benchmarks. gen_tx runs under BPF_PROG_RUN with
 * BPF_F_TEST_XDP_LIVE_FRAMES in the source namespace: every run transmits the frame out of the
 * source interface. sink_drop counts and drops at the sink, as early as the kernel allows, so
 * the sink costs next to nothing. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} sink_count SEC(".maps");

/* The frame to send. Live frames are recycled pages: a DUT that rewrites headers in place
 * (TTL, MACs) would otherwise get its own output back, so every run writes the frame anew. */
#define GEN_LEN 60
const volatile __u8 frame[GEN_LEN] = {};

SEC("xdp")
int gen_tx(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;

	if (data + GEN_LEN > end)
		return XDP_ABORTED;
	/* Byte by byte: a memcpy from a volatile source would be folded to the zero initializer. */
#pragma unroll
	for (int i = 0; i < GEN_LEN; i++)
		((__u8 *)data)[i] = frame[i];
	return XDP_TX;
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
