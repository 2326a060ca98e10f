/* Maps shared by the probe programs. Per-CPU counters: no atomics on the hot path. */
#pragma once

#define MAX_SYSCALLS 512

/* Index into `locality`. */
enum locality_slot {
	RX_LOCAL = 0,
	RX_REMOTE = 1,
	TX_LOCAL = 2,
	TX_REMOTE = 3,
	LOCALITY_SLOTS = 4,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_SYSCALLS);
	__type(key, __u32);
	__type(value, __u64);
} syscalls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LOCALITY_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} locality SEC(".maps");

/* socket -> CPU of the target task's last tcp_sendmsg on it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u32);
} producer_cpu SEC(".maps");

static __always_inline void bump(void *map, __u32 key)
{
	__u64 *v = bpf_map_lookup_elem(map, &key);
	if (v)
		*v += 1;
}
