/* The sysctl gate: writes to the sysctls the routers depend on that the kernel reports with no
 * event, the multipath hash policies and fields of each family. The sysctl hook
 * (fp_sysctl.bpf.c) counts every write in entry GATE_WRITES before the kernel applies it; the
 * daemon copies the count into entry GATE_ACKED once it has read the new value back and set
 * the routers by it (two entries, so that neither side's write can undo the other's). While
 * the two differ, a family with multipath routes is the kernel's: no flow is hashed on a
 * policy that no longer holds (docs/FASTPATH.md, "ECMP"). One map, shared by the hook and
 * every port's program. */
#ifndef FP_SYSCTL_GATE_H
#define FP_SYSCTL_GATE_H

#define GATE_WRITES 0
#define GATE_ACKED 1

struct sysctl_gate {
	__u32 count[2]; /* [IPv4, IPv6] */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct sysctl_gate);
} sysctl_gate SEC(".maps");

#endif
