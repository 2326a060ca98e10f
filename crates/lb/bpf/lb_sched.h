/* Choosing a real: the service's lookup row (Maglev by hash, rr/wrr by this CPU's cursor),
 * the per-CPU connection table, and the new-connection rate guard. */
#ifndef LB_SCHED_H
#define LB_SCHED_H

/* The real slot for a flow of `vip`: rr/wrr advance this CPU's cursor when `cursor`, else
 * (and always for mh) the hash picks, so that a flow that lost its entry lands where its
 * hash says, the same on every CPU. -1: no entry. */
static __always_inline int pick(const struct lb_vip *vip, __u32 hash, int cursor, __u32 *slot)
{
	__u32 ring = cfg_ring_size;
	__u32 idx, key, *s;

	if (!vip->lookup_len || vip->lookup_len > ring || vip->id >= cfg_max_services)
		return -1;
	if (vip->sched != LB_SCHED_MH && cursor) {
		__u32 *cur = bpf_map_lookup_elem(&rr_cursor, &vip->id);

		if (!cur)
			return -1;
		idx = *cur % vip->lookup_len;
		*cur = idx + 1;
	} else {
		idx = hash % vip->lookup_len;
	}
	key = vip->id * ring + idx;
	s = bpf_map_lookup_elem(&lookup, &key);
	if (!s)
		return -1;
	*slot = *s;
	return 0;
}

/* Katran's guard: whether this CPU opened more than its share of entries this second. Over
 * it, connections are still scheduled, by hash, but not remembered. */
static __always_inline int over_rate(__u64 now)
{
	__u32 zero = 0;
	struct lb_rate *r;
	__u64 sec = now / LB_NS;

	if (!cfg_new_conns_per_sec)
		return 0;
	r = bpf_map_lookup_elem(&rate, &zero);
	if (!r)
		return 0;
	if (r->sec != sec) {
		r->sec = sec;
		r->count = 0;
	}
	r->count++;
	return r->count > cfg_new_conns_per_sec;
}

#endif
