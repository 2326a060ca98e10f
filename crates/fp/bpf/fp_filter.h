/* Filter module: the supported subset of the nftables forward chain, compiled by the
 * controller into one rule bitmap per field value. A packet's candidate rules are the AND of
 * the bitmaps its fields select; the lowest set bit is the first rule that matches, as in
 * the chain's order. Cost: one lookup per field, whatever the number of rules.
 *
 * A field value's bitmap holds only the rules that constrain that field; the rules that leave
 * it unconstrained are one wildcard bitmap per field (f_defaults), ORed in at lookup. Adding a
 * rule that matches on one field then writes that field's entries and a few wildcard words,
 * not every entry of every other field (512 protocol slots, every prefix). */
#ifndef FP_FILTER_H
#define FP_FILTER_H

#define FILTER_WORDS 4 /* 256 rules */
#define FILTER_MAX_RULES (FILTER_WORDS * 64)

enum filter_verdict {
	FILTER_ACCEPT = 0,
	FILTER_DROP = 1,
	FILTER_KERNEL = 2, /* a rule we cannot evaluate exactly may match: kernel decides */
};

/* Slots of f_defaults: per field, the rules without a constraint on it (the wildcard); and
 * per family, the rules that apply on this interface at all. */
enum filter_field {
	FF_PROTO = 0,
	FF_SPORT,
	FF_DPORT,
	FF_OIF,
	FF_BASE4, /* the rules that apply to IPv4 on this interface */
	FF_BASE6,
	FF_SRC,
	FF_DST,
	FF_NR,
};

#define FIELD_SRC (1 << 0)
#define FIELD_DST (1 << 1)
#define FIELD_PROTO (1 << 2)
#define FIELD_SPORT (1 << 3)
#define FIELD_DPORT (1 << 4)
#define FIELD_OIF (1 << 5)

struct rule_set {
	__u64 w[FILTER_WORDS];
};

struct lpm_v4 {
	__u32 prefixlen;
	__u32 addr;
};

struct lpm_v6 {
	__u32 prefixlen;
	__u8 addr[16];
};

struct port_key {
	__u8 proto;
	__u8 pad;
	__u16 port; /* host order */
};

#define LPM_MAP(name, keytype)                          \
	struct {                                        \
		__uint(type, BPF_MAP_TYPE_LPM_TRIE);    \
		__uint(max_entries, 4096);              \
		__uint(map_flags, BPF_F_NO_PREALLOC);   \
		__type(key, keytype);                   \
		__type(value, struct rule_set);         \
	} name SEC(".maps")

/* Each LPM map holds a /0 entry (often empty), so a lookup never misses. */
LPM_MAP(f_src4, struct lpm_v4);
LPM_MAP(f_dst4, struct lpm_v4);
LPM_MAP(f_src6, struct lpm_v6);
LPM_MAP(f_dst6, struct lpm_v6);

/* Index: family (0 v4, 1 v6) * 256 + L4 protocol. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 512);
	__type(key, __u32);
	__type(value, struct rule_set);
} f_proto SEC(".maps");

#define PORT_MAP(name)                                 \
	struct {                                       \
		__uint(type, BPF_MAP_TYPE_HASH);       \
		__uint(max_entries, 4096);             \
		__type(key, struct port_key);          \
		__type(value, struct rule_set);        \
	} name SEC(".maps")

PORT_MAP(f_sport);
PORT_MAP(f_dport);

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct rule_set);
} f_oif SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FF_NR);
	__type(key, __u32);
	__type(value, struct rule_set);
} f_defaults SEC(".maps");

/* Verdict of each rule, by position, and the slot of f_hits that counts it. */
struct rule_action {
	__u32 verdict;
	__u32 slot;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FILTER_MAX_RULES);
	__type(key, __u32);
	__type(value, struct rule_action);
} f_actions SEC(".maps");

/* What the kernel's rule counters (`counter`, as iptables-nft puts on every rule) would have
 * counted of the packets the filter judged and the fast path then finished: per CPU, one slot
 * per rule (the daemon gives each nftables rule one for as long as it exists, whatever its
 * position). Shared by every port's program. Counted only once the packet is finished here:
 * one the kernel gets after the filter's verdict it counts itself. The chain policy has no
 * counter in nftables. */
#define FILTER_HIT_SLOTS 1024
#define FILTER_HIT_NONE 0xffffffff

struct filter_hits {
	__u64 packets;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FILTER_HIT_SLOTS);
	__type(key, __u32);
	__type(value, struct filter_hits);
} f_hits SEC(".maps");

/* A packet judged by slot `slot` (FILTER_HIT_NONE: not judged) was finished by the fast
 * path: `len` bytes of it from the network header on, as the kernel's counters count. */
static __always_inline void count_filter_hit(__u32 slot, __u32 len)
{
	struct filter_hits *h;

	if (slot == FILTER_HIT_NONE)
		return;
	h = bpf_map_lookup_elem(&f_hits, &slot);
	if (h) {
		h->packets += 1;
		h->bytes += len;
	}
}

/* Nonzero while the controller rewrites the tables in place: meanwhile every packet the filter
 * would judge goes to the kernel, so no packet sees half-old, half-new tables. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} f_paused SEC(".maps");

static __always_inline int filter_paused(void)
{
	__u32 zero = 0;
	__u32 *p = bpf_map_lookup_elem(&f_paused, &zero);

	return !p || *p;
}

static __always_inline int lowest_bit(__u64 w)
{
	int n = 0;

	if (!(w & 0xffffffffULL)) { n += 32; w >>= 32; }
	if (!(w & 0xffffULL)) { n += 16; w >>= 16; }
	if (!(w & 0xffULL)) { n += 8; w >>= 8; }
	if (!(w & 0xfULL)) { n += 4; w >>= 4; }
	if (!(w & 0x3ULL)) { n += 2; w >>= 2; }
	if (!(w & 0x1ULL)) { n += 1; }
	return n;
}

/* acc &= (the rules constraining `field` that this value matches, s, or none when the value
 * has no entry) | (the rules not constraining the field). */
static __always_inline int and_field(struct rule_set *acc, const struct rule_set *s, __u32 field)
{
	const struct rule_set *wild = bpf_map_lookup_elem(&f_defaults, &field);
	int i;

	if (!wild)
		return -1;
#pragma unroll
	for (i = 0; i < FILTER_WORDS; i++)
		acc->w[i] &= (s ? s->w[i] : 0) | wild->w[i];
	return 0;
}

/* ANDs the L4 fields (protocol, ports, egress interface) into acc. l4 points past the L3
 * header; returns -1 when the ports cannot be read. */
static __always_inline int filter_l4(struct fp_pkt *p, struct rule_set *acc, __u32 family,
				     __u8 proto, void *l4, __u32 oif, __u32 fields)
{
	const struct rule_set *s;
	struct port_key pk = { .proto = proto };
	__u32 key = family * 256 + proto;
	__u16 sport = 0, dport = 0;

	if (fields & FIELD_PROTO) {
		s = bpf_map_lookup_elem(&f_proto, &key);
		if (!s || and_field(acc, s, FF_PROTO) < 0)
			return -1;
	}
	if (!(fields & (FIELD_SPORT | FIELD_DPORT | FIELD_OIF)))
		return 0;
	if ((fields & (FIELD_SPORT | FIELD_DPORT)) &&
	    (proto == WS_IPPROTO_TCP || proto == WS_IPPROTO_UDP)) {
		__be16 *ports = l4;

		if ((void *)(ports + 2) > p->data_end)
			return -1;
		sport = bpf_ntohs(ports[0]);
		dport = bpf_ntohs(ports[1]);
	}
	if (fields & FIELD_SPORT) {
		pk.port = sport;
		if (and_field(acc, bpf_map_lookup_elem(&f_sport, &pk), FF_SPORT) < 0)
			return -1;
	}
	if (fields & FIELD_DPORT) {
		pk.port = dport;
		if (and_field(acc, bpf_map_lookup_elem(&f_dport, &pk), FF_DPORT) < 0)
			return -1;
	}
	if (fields & FIELD_OIF) {
		if (and_field(acc, bpf_map_lookup_elem(&f_oif, &oif), FF_OIF) < 0)
			return -1;
	}
	return 0;
}

/* The first rule that matches decides; with none, the chain policy. *slot: what counts it. */
static __always_inline int filter_decide(struct rule_set *acc, __u8 policy_drop, __u32 *slot)
{
	__u32 rule = FILTER_MAX_RULES;
	struct rule_action *action;
	int i;

#pragma unroll
	for (i = 0; i < FILTER_WORDS; i++) {
		if (acc->w[i] && rule == FILTER_MAX_RULES)
			rule = i * 64 + lowest_bit(acc->w[i]);
	}
	if (rule >= FILTER_MAX_RULES)
		return policy_drop ? FILTER_DROP : FILTER_ACCEPT;
	action = bpf_map_lookup_elem(&f_actions, &rule);
	if (!action)
		return FILTER_KERNEL;
	*slot = action->slot;
	return action->verdict;
}

static __always_inline int filter_v4(struct fp_pkt *p, struct iphdr *iph, __u32 oif,
				     const struct fp_ctl *c, __u32 *slot)
{
	__u32 fields = cfg_filter_fields & c->filter_fields;
	struct rule_set acc;
	const struct rule_set *s;
	struct lpm_v4 k = { .prefixlen = 32 };

	__u32 base = FF_BASE4;

	if (filter_paused())
		return FILTER_KERNEL;
	s = bpf_map_lookup_elem(&f_defaults, &base);
	if (!s)
		return FILTER_KERNEL;
	acc = *s;
	if (fields & FIELD_SRC) {
		k.addr = iph->saddr;
		s = bpf_map_lookup_elem(&f_src4, &k);
		if (!s || and_field(&acc, s, FF_SRC) < 0)
			return FILTER_KERNEL;
	}
	if (fields & FIELD_DST) {
		k.addr = iph->daddr;
		s = bpf_map_lookup_elem(&f_dst4, &k);
		if (!s || and_field(&acc, s, FF_DST) < 0)
			return FILTER_KERNEL;
	}
	/* A non-first fragment carries no transport header, and whether a rule on its protocol
	 * or ports takes it depends on the kernel: nft_payload has read no transport header of
	 * one since 5.17, but its fast path for short loads (nft_payload_fast_eval) still does
	 * on 6.18, where such rules match the payload's bytes (the differential harness); a fix
	 * was posted to netfilter-devel in April 2026. Rules on addresses and interfaces alone
	 * judge it the same way in all of them. */
	if ((iph->frag_off & bpf_htons(WS_IP_OFFSET)) &&
	    (fields & (FIELD_PROTO | FIELD_SPORT | FIELD_DPORT)))
		return FILTER_KERNEL;
	if (filter_l4(p, &acc, 0, iph->protocol, iph + 1, oif, fields) < 0)
		return FILTER_KERNEL;
	return filter_decide(&acc, c->policy_drop_v4, slot);
}

static __always_inline int filter_v6(struct fp_pkt *p, struct ipv6hdr *ip6h, __u32 oif,
				     const struct fp_ctl *c, __u32 *slot)
{
	__u32 fields = cfg_filter_fields & c->filter_fields;
	struct rule_set acc;
	const struct rule_set *s;
	struct lpm_v6 k = { .prefixlen = 128 };
	__u8 nh = ip6h->nexthdr;
	void *l4 = ip6h + 1;
	__u32 base = FF_BASE6;

	if (filter_paused())
		return FILTER_KERNEL;
	/* A first fragment's header: nftables (ipv6_find_hdr) walks past it to the transport
	 * header. A later one has none, and no port rule took one in the differential harness
	 * (reading its payload as ports dropped 15 that Linux forwarded); we do not model how
	 * nftables takes it: the kernel's. */
	if (nh == 44) {
		const __u8 *frag = l4;

		if ((void *)(frag + 8) > p->data_end || (frag[2] | (frag[3] & 0xf8)))
			return FILTER_KERNEL;
		nh = frag[0];
		l4 = (void *)(frag + 8);
	}
	/* Other extension headers hide the transport header that nftables would match on. */
	if (nh == 0 || nh == 43 || nh == 44 || nh == 50 || nh == 51 || nh == 60 || nh == 135 ||
	    nh == 139 || nh == 140)
		return FILTER_KERNEL;
	s = bpf_map_lookup_elem(&f_defaults, &base);
	if (!s)
		return FILTER_KERNEL;
	acc = *s;
	if (fields & FIELD_SRC) {
		__builtin_memcpy(k.addr, &ip6h->saddr, 16);
		s = bpf_map_lookup_elem(&f_src6, &k);
		if (!s || and_field(&acc, s, FF_SRC) < 0)
			return FILTER_KERNEL;
	}
	if (fields & FIELD_DST) {
		__builtin_memcpy(k.addr, &ip6h->daddr, 16);
		s = bpf_map_lookup_elem(&f_dst6, &k);
		if (!s || and_field(&acc, s, FF_DST) < 0)
			return FILTER_KERNEL;
	}
	if (filter_l4(p, &acc, 1, nh, l4, oif, fields) < 0)
		return FILTER_KERNEL;
	return filter_decide(&acc, c->policy_drop_v6, slot);
}

#endif
