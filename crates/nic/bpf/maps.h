/* Maps shared with user space: the AF_XDP sockets, the served ports and the verdict counters. */
#pragma once

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* Upper bound on rx queues (and so on shards) per interface. */
#define MAX_QUEUES 256
/* Upper bound on distinct served (protocol, port) pairs. */
#define MAX_SERVED_PORTS 1024

/* One AF_XDP socket per rx queue, keyed by the queue index the frame arrived on: the kernel
 * only accepts a redirect to the socket bound to that very queue. */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

/* Key: (IP protocol << 16) | port in host order. The value is unused (presence is the answer). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_SERVED_PORTS);
	__type(key, __u32);
	__type(value, __u8);
} served_ports SEC(".maps");

enum verdict_counter {
	CNT_REDIRECT = 0,    /* handed to the queue's AF_XDP socket */
	CNT_PASS_OTHER = 1,  /* not ours: the kernel keeps it */
	CNT_PASS_NO_SOCKET = 2, /* ours, but no socket on this queue: the kernel gets it */
	/* truncated headers; a fragment, or more IPv6 extension headers than the walk's bound,
	 * to a served address: the kernel decides */
	CNT_PASS_MALFORMED = 3,
	CNT_MAX = 4,
};

/* Per-CPU so the data path never shares a cache line between cores. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} verdicts SEC(".maps");

static __always_inline void count(__u32 which)
{
	__u64 *c = bpf_map_lookup_elem(&verdicts, &which);

	if (c)
		*c += 1;
}
