// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The sysctl hook: a cgroup/sysctl program on the cgroup2 root, so it runs for every write to
 * /proc/sys from any process, before the kernel applies it. A write to
 * net/ipv4/fib_multipath_hash_* or net/ipv6/fib_multipath_hash_* (any network namespace: the
 * hook cannot tell which, so every daemon re-reads its own) closes that family's sysctl gate
 * (fp_sysctl_gate.h). It never refuses a write. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "fp_sysctl_gate.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define NAME_LEN 40

SEC("cgroup/sysctl")
int fp_sysctl(struct bpf_sysctl *ctx)
{
	/* "net/ipv4/fib_multipath_hash_" or the same with ipv6; byte 7 is the family. On the
	 * stack: a static string would land where libbpf looks for no data. */
	char prefix[] = "net/ipvX/fib_multipath_hash_";
	char name[NAME_LEN] = {};
	__u32 key = GATE_WRITES, family;

	if (!ctx->write)
		return 1;
	if (bpf_sysctl_get_name(ctx, name, sizeof(name), 0) < (long)sizeof(prefix) - 1)
		return 1;
	for (int i = 0; i < (int)sizeof(prefix) - 1; i++)
		if (i != 7 && name[i] != prefix[i])
			return 1;
	if (name[7] == '4')
		family = 0;
	else if (name[7] == '6')
		family = 1;
	else
		return 1;
	struct sysctl_gate *g = bpf_map_lookup_elem(&sysctl_gate, &key);
	if (g)
		__sync_fetch_and_add(&g->count[family], 1);
	return 1;
}
