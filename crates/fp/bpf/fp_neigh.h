/* Next hops whose neighbour entry is STALE. The kernel's first packet to such a neighbour moves
 * it to DELAY, and from there to a probe that confirms the address or fails it
 * (neigh_event_send); the FIB helper uses any valid entry as it stands and drives nothing, so a
 * dead next hop would be used until the entry goes. The daemon keeps this set from the
 * neighbour events (the helper cannot read an entry's state); a packet to a next hop in it is
 * the kernel's, one every STALE_HANDED_NS, and the rest go out as the kernel sends them
 * meanwhile (DELAY and PROBE use the cached address), never from the route cache
 * (docs/FASTPATH.md, "Neighbours"). One set, shared by every port's program. */
#ifndef FP_NEIGH_H
#define FP_NEIGH_H

#define NEIGH_STALE_MAX 16384
#define STALE_HANDED_NS (100 * 1000 * 1000ULL)

struct neigh_key {
	__u32 ifindex;
	__u32 family; /* WS_AF_INET or WS_AF_INET6: the next hop's, which an IPv4 route may give as IPv6 */
	__u8 addr[16]; /* an IPv4 address in the first four bytes */
};

/* The value: when a packet was last handed to the kernel for it (bpf_ktime_get_ns; 0: never). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, NEIGH_STALE_MAX);
	__type(key, struct neigh_key);
	__type(value, __u64);
} neigh_stale SEC(".maps");

/* Entry 0: how many next hops the daemon holds STALE (or 1 where they overflowed the set, which
 * then holds none and every next hop counts as STALE): no lookup while it is 0. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u32);
} neigh_stale_n SEC(".maps");

#define NEIGH_STALE_COUNT 0
#define NEIGH_STALE_ALL 1

enum stale_hop {
	HOP_FRESH,
	/* STALE, and another packet went to the kernel for it moments ago: forward, uncached */
	HOP_STALE_HANDED,
	/* STALE: this packet is the kernel's */
	HOP_STALE,
};

/* Where the FIB helper's answer `fib` (egress and next hop) stands; `handed` is set to the
 * entry to stamp (hand_stale) once the packet is known to be the kernel's. */
static __always_inline enum stale_hop stale_next_hop(const struct bpf_fib_lookup *fib,
						     __u64 **handed)
{
	__u32 key = NEIGH_STALE_COUNT;
	__u32 *n = bpf_map_lookup_elem(&neigh_stale_n, &key);
	struct neigh_key k = {};
	__u64 *at;

	*handed = NULL;
	if (!n || !*(volatile __u32 *)n)
		return HOP_FRESH;
	key = NEIGH_STALE_ALL;
	n = bpf_map_lookup_elem(&neigh_stale_n, &key);
	if (n && *(volatile __u32 *)n)
		return HOP_STALE;
	k.ifindex = fib->ifindex;
	k.family = fib->family;
	if (fib->family == WS_AF_INET)
		__builtin_memcpy(k.addr, &fib->ipv4_dst, 4);
	else
		__builtin_memcpy(k.addr, fib->ipv6_dst, 16);
	at = bpf_map_lookup_elem(&neigh_stale, &k);
	if (!at)
		return HOP_FRESH;
	if (*at && bpf_ktime_get_ns() - *at < STALE_HANDED_NS)
		return HOP_STALE_HANDED;
	*handed = at;
	return HOP_STALE;
}

/* The packet goes to the kernel for its STALE next hop. Racy across CPUs: at worst two go. */
static __always_inline void hand_stale(__u64 *handed)
{
	if (handed)
		*handed = bpf_ktime_get_ns();
}

#endif
