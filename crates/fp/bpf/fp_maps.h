/* Maps filled by the controller from kernel state. */
#ifndef FP_MAPS_H
#define FP_MAPS_H

/* Egress ports the router may redirect to, keyed by ifindex. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
} tx_ports SEC(".maps");

/* Per-CPU packet counters, one slot per enum fp_reason. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FP_NR_REASONS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* Runtime switches that change often (policy rules appear, forwarding or rp_filter toggled):
 * flipping a word here takes microseconds, where swapping a program waits for the kernel's XDP
 * dispatcher update. Nonzero: hand that family to the kernel. */
struct fp_ctl {
	__u32 off_v4;
	__u32 off_v6;
	/* The filter, as far as it changes with the rules: which fields some rule constrains
	 * (of those compiled in, cfg_filter_fields), whether a chain is compiled at all, and
	 * the chain policies. A rule added or deleted is then map writes, never a program
	 * swap, whose XDP dispatcher update costs milliseconds. */
	__u32 filter_fields;
	__u8 filter_v4;
	__u8 filter_v6;
	__u8 policy_drop_v4;
	__u8 policy_drop_v6;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fp_ctl);
} ctl SEC(".maps");

#endif
