#ifndef FP_STATS_H
#define FP_STATS_H

static __always_inline void count(enum fp_reason reason)
{
	__u32 key = reason;
	__u64 *slot = bpf_map_lookup_elem(&counters, &key);

	/* Per-CPU slot: a plain add is race-free here. */
	if (slot)
		*slot += 1;
}

#endif
