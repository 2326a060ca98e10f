// SPDX-License-Identifier: GPL-2.0 OR MIT
/* Probes for one server process: syscalls by number and packet locality.
 *
 * Locality as docs/INSTRUMENTS.md ("`wirespeed probe PID`") defines it: a packet is local when it is handled on the CPU of the task that
 * consumes (rx) or produces (tx) it.
 *  - rx: at the end of a recvmsg that delivered data (sock:sock_recv_length), the consuming
 *    task's CPU is compared with sk->sk_incoming_cpu, the CPU on which the kernel last
 *    processed an incoming segment for that socket. One sample per successful receive.
 *  - tx: every successful sendmsg (sock:sock_send_length) records the producing task's CPU
 *    for its socket; at net:net_dev_start_xmit each skb of such a socket is compared with the CPU
 *    that hands it to the device. One sample per transmitted skb (after the socket's first
 *    send).
 * Only BTF tracepoints and a raw tracepoint are used: this kernel has no kprobes, and here
 * it refuses fentry programs (EPERM at load), while tp_btf and raw_tp load.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "probe_maps.h"
#include "probe_filter.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* raw_syscalls:sys_enter, attached as a raw tracepoint: no tracefs needed. */
SEC("raw_tp/sys_enter")
int BPF_PROG(count_syscall, struct pt_regs *regs, long id)
{
	if (!is_target())
		return 0;
	__u32 key = id < 0 || id >= MAX_SYSCALLS ? MAX_SYSCALLS - 1 : (__u32)id;
	bump(&syscalls, key);
	return 0;
}

/* sock:sock_recv_length fires in the receiving task at the end of every recvmsg. */
SEC("tp_btf/sock_recv_length")
int BPF_PROG(rx_locality, struct sock *sk, int ret, int flags)
{
	if (ret <= 0 || !is_target())
		return 0;
	int in_cpu = sk->__sk_common.skc_incoming_cpu;
	if (in_cpu < 0)
		return 0;
	bump(&locality, (__u32)in_cpu == bpf_get_smp_processor_id() ? RX_LOCAL : RX_REMOTE);
	return 0;
}

/* sock:sock_send_length fires in the sending task at the end of every sendmsg. */
SEC("tp_btf/sock_send_length")
int BPF_PROG(tx_producer, struct sock *sk, int ret, int flags)
{
	if (ret <= 0 || !is_target())
		return 0;
	__u64 key = (__u64)sk;
	__u32 cpu = bpf_get_smp_processor_id();
	bpf_map_update_elem(&producer_cpu, &key, &cpu, BPF_ANY);
	return 0;
}

/* net:net_dev_start_xmit, not net_dev_xmit: after the driver's xmit the skb may be gone. */
SEC("tp_btf/net_dev_start_xmit")
int BPF_PROG(tx_locality, struct sk_buff *skb, struct net_device *dev)
{
	__u64 key = (__u64)skb->sk;
	if (!key)
		return 0;
	__u32 *cpu = bpf_map_lookup_elem(&producer_cpu, &key);
	if (!cpu)
		return 0;
	bump(&locality, *cpu == bpf_get_smp_processor_id() ? TX_LOCAL : TX_REMOTE);
	return 0;
}
