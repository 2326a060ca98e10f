/* Which tasks the probes count: the threads of one process, fixed before load. */
#pragma once

const volatile __u32 target_tgid = 0;

static __always_inline bool is_target(void)
{
	return (bpf_get_current_pid_tgid() >> 32) == target_tgid;
}
