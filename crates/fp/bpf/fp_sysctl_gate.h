/* The sysctl gate: writes to the sysctls the fast path depends on that the kernel reports with
 * no event. The sysctl hook (fp_sysctl.bpf.c) counts every write in entry GATE_WRITES, by
 * class, before the kernel applies it; the daemon copies a class's count into entry
 * GATE_ACKED once it has read the new values back and set the data path by them (two
 * entries, so that neither side's write can undo the other's). While a class's two counts
 * differ, what depends on it is the kernel's: nothing is forwarded on a value that no longer
 * holds (docs/FASTPATH.md, "Sysctls without events"). One map, shared by the hook and every
 * port's program. */
#ifndef FP_SYSCTL_GATE_H
#define FP_SYSCTL_GATE_H

#define GATE_WRITES 0
#define GATE_ACKED 1

/* The classes: what a write closes. */
#define GATE_CLASS_HASH_V4 0 /* net/ipv4/fib_multipath_hash_*: IPv4 with multipath routes */
#define GATE_CLASS_HASH_V6 1 /* net/ipv6/fib_multipath_hash_*: IPv6 with multipath routes */
#define GATE_CLASS_FWD_V4 2  /* net/ipv4/ip_forward_update_priority, ip_forward_use_pmtu, an
                              * iptables-legacy table replaced: IPv4 */
#define GATE_CLASS_MTU_V6 3  /* net/ipv6/conf/<dev>/mtu (the route cache's lengths), an
                              * ip6tables-legacy table replaced: IPv6 */
#define GATE_CLASS_BRIDGE 4  /* net/bridge/bridge-nf-*, a legacy iptables, ip6tables or
                              * ebtables table replaced: the bridge module */
#define GATE_CLASSES 5

struct sysctl_gate {
	__u32 count[GATE_CLASSES];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct sysctl_gate);
} sysctl_gate SEC(".maps");

#endif
