// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The write hooks: a cgroup/sysctl and a cgroup/setsockopt program on the cgroup2 root, so
 * they run for every write to /proc/sys and every setsockopt from any process, before the
 * kernel applies it. A write to one of the sysctls the fast path reads that come with no
 * event, or a legacy x_tables table replaced (any network namespace: the hook cannot tell
 * which, so every daemon re-reads its own), closes that class of the sysctl gate
 * (fp_sysctl_gate.h). They never refuse a write. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "fp_sysctl_gate.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define NAME_LEN 64

/* Whether `name` starts with the `n` bytes of `prefix`; `wild` is a position that matches any
 * byte (-1: none). */
static __always_inline int starts_with(const char *name, const char *prefix, int n, int wild)
{
	for (int i = 0; i < n && i < NAME_LEN; i++)
		if (i != wild && name[i] != prefix[i])
			return 0;
	return 1;
}

/* Whether the `len` bytes of `name` end in "/mtu". */
static __always_inline int ends_in_mtu(const char *name, long len)
{
	for (int i = 0; i + 4 <= NAME_LEN; i++)
		if (i + 4 == len)
			return name[i] == '/' && name[i + 1] == 'm' && name[i + 2] == 't' &&
			       name[i + 3] == 'u';
	return 0;
}

/* The gate class a write to `name` closes, or -1. The prefixes live on the stack: a static
 * string would land where libbpf looks for no data. */
static __always_inline int gate_class(const char *name, long len)
{
	char hash[] = "net/ipvX/fib_multipath_hash_"; /* byte 7: the family */
	char fwd[] = "net/ipv4/ip_forward_u";        /* update_priority, use_pmtu */
	char conf6[] = "net/ipv6/conf/";
	char brnf[] = "net/bridge/bridge-nf-";

	if (len >= (long)sizeof(hash) - 1 && starts_with(name, hash, sizeof(hash) - 1, 7)) {
		if (name[7] == '4')
			return GATE_CLASS_HASH_V4;
		if (name[7] == '6')
			return GATE_CLASS_HASH_V6;
		return -1;
	}
	if (len >= (long)sizeof(fwd) - 1 && starts_with(name, fwd, sizeof(fwd) - 1, -1))
		return GATE_CLASS_FWD_V4;
	if (len > (long)sizeof(conf6) - 1 && starts_with(name, conf6, sizeof(conf6) - 1, -1) &&
	    ends_in_mtu(name, len))
		return GATE_CLASS_MTU_V6;
	if (len >= (long)sizeof(brnf) - 1 && starts_with(name, brnf, sizeof(brnf) - 1, -1))
		return GATE_CLASS_BRIDGE;
	return -1;
}

static __always_inline void close_class(int class)
{
	__u32 key = GATE_WRITES;
	struct sysctl_gate *g = bpf_map_lookup_elem(&sysctl_gate, &key);

	if (g && class >= 0 && class < GATE_CLASSES)
		__sync_fetch_and_add(&g->count[class], 1);
}

SEC("cgroup/sysctl")
int fp_sysctl(struct bpf_sysctl *ctx)
{
	char name[NAME_LEN] = {};
	long len;
	int class;

	if (!ctx->write)
		return 1;
	/* A name longer than the buffer (-E2BIG) is none of ours. */
	len = bpf_sysctl_get_name(ctx, name, sizeof(name), 0);
	if (len <= 0)
		return 1;
	class = gate_class(name, len);
	close_class(class);
	return 1;
}

/* The legacy x_tables (iptables-legacy, ip6tables-legacy, ebtables-legacy) replace a table
 * with one setsockopt on a raw socket, which no event reports: the matching classes close
 * before the kernel applies it, as for a sysctl. Level and option numbers: the uapi headers'
 * IPT_SO_SET_REPLACE (SOL_IP), IP6T_SO_SET_REPLACE (SOL_IPV6), EBT_SO_SET_ENTRIES (SOL_IP). */
#define SOL_IP 0
#define SOL_IPV6 41
#define IPT_SO_SET_REPLACE 64
#define EBT_SO_SET_ENTRIES 128

/* Network namespaces (by cookie) in which an ebtables-legacy table was written: such a table,
 * once there, filters every bridged frame until the namespace goes, and it cannot be read
 * without being created (EBT_SO_GET_INFO instantiates it). A write that failed counts too. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u32);
} ebtables_written SEC(".maps");

SEC("cgroup/setsockopt")
int fp_setsockopt(struct bpf_sockopt *ctx)
{
	/* Whatever it reads, the program hands the kernel the caller's own buffer (optlen 0): an
	 * option whose handler writes back into it (IPV6_FLOWLABEL_MGR returns the flow label it
	 * chose) would otherwise write into the hook's copy, and `ping -F 0` would send label 0
	 * (the kernel's custom_multipath_hash.sh selftest found it). */
	ctx->optlen = 0;
	if (ctx->level == SOL_IP && ctx->optname == IPT_SO_SET_REPLACE) {
		close_class(GATE_CLASS_FWD_V4);
		close_class(GATE_CLASS_BRIDGE);
	} else if (ctx->level == SOL_IPV6 && ctx->optname == IPT_SO_SET_REPLACE) {
		close_class(GATE_CLASS_MTU_V6);
		close_class(GATE_CLASS_BRIDGE);
	} else if (ctx->level == SOL_IP && ctx->optname == EBT_SO_SET_ENTRIES) {
		__u64 cookie = bpf_get_netns_cookie(ctx);
		__u32 one = 1;

		bpf_map_update_elem(&ebtables_written, &cookie, &one, BPF_ANY);
		close_class(GATE_CLASS_BRIDGE);
	}
	return 1;
}
