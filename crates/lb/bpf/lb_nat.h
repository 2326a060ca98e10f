/* NAT and full-NAT: address and port rewrites with incremental checksums, the reverse table
 * and its per-CPU local-port shares, TOA, and replies translated back. */
#ifndef LB_NAT_H
#define LB_NAT_H

/* Rewrites the source (when nsrc) and the destination (when ndst) address and port of the
 * frame's IP packet; checksums follow. `proto` 0: a later fragment, whose addresses alone
 * change (its datagram's transport checksum lives in the first fragment, adjusted there). */
static __always_inline int rewrite(struct xdp_md *ctx, __u8 fam, __u8 proto, __u32 hl,
				   const __u8 *nsrc, __be16 nsport, const __u8 *ndst,
				   __be16 ndport)
{
	void *data = pkt_data(ctx), *end = pkt_end(ctx);
	__u64 acc = 0; /* pseudo-header (addresses) */
	__be16 *sport, *dport, *check;
	void *l4;

	if (fam == WS_AF_INET) {
		struct iphdr *iph = data + LB_L3_OFF;

		if ((void *)(iph + 1) > end)
			return -1;
		if (nsrc) {
			acc = csum_diff32(acc, iph->saddr, *(__be32 *)nsrc);
			iph->saddr = *(__be32 *)nsrc;
		}
		if (ndst) {
			acc = csum_diff32(acc, iph->daddr, *(__be32 *)ndst);
			iph->daddr = *(__be32 *)ndst;
		}
		iph->check = csum_apply(iph->check, acc);
		l4 = (void *)iph + iph->ihl * 4; /* behind the options, if any */
	} else {
		struct ipv6hdr *ip6h = data + LB_L3_OFF;
		__u32 *s = (__u32 *)&ip6h->saddr, *d = (__u32 *)&ip6h->daddr;

		if ((void *)(ip6h + 1) > end)
			return -1;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			if (nsrc) {
				acc = csum_diff32(acc, s[i], ((const __u32 *)nsrc)[i]);
				s[i] = ((const __u32 *)nsrc)[i];
			}
			if (ndst) {
				acc = csum_diff32(acc, d[i], ((const __u32 *)ndst)[i]);
				d[i] = ((const __u32 *)ndst)[i];
			}
		}
		l4 = data + LB_L3_OFF + (hl & 0x3f); /* behind a fragment header, if any */
	}
	if (proto == WS_IPPROTO_TCP) {
		struct tcphdr *th = l4;

		if ((void *)(th + 1) > end)
			return -1;
		sport = &th->source;
		dport = &th->dest;
		check = &th->check;
	} else if (proto == WS_IPPROTO_UDP) {
		struct udphdr *uh = l4;

		if ((void *)(uh + 1) > end)
			return -1;
		sport = &uh->source;
		dport = &uh->dest;
		check = &uh->check;
	} else {
		return 0;
	}
	if (nsrc) {
		acc = csum_diff16(acc, *sport, nsport);
		*sport = nsport;
	}
	if (ndst) {
		acc = csum_diff16(acc, *dport, ndport);
		*dport = ndport;
	}
	/* UDP over IPv4 may carry no checksum (0); a computed 0 is sent as 0xffff. */
	if (proto == WS_IPPROTO_UDP && fam == WS_AF_INET && *check == 0)
		return 0;
	*check = csum_apply(*check, acc);
	if (proto == WS_IPPROTO_UDP && *check == 0)
		*check = 0xffff;
	return 0;
}

/* Inserts TOA (kind 254: port and address of the client, DPVS's layout; 8 bytes for IPv4,
 * 20 for IPv6) after the TCP options: the headers move `grow` bytes to the front. The
 * caller checked that the option space and the MTU have room. */
static __always_inline int toa_insert(struct xdp_md *ctx, const struct lb_pkt *p, __u32 grow)
{
	int v4 = p->flow.family == WS_AF_INET;
	__u32 l4_off = LB_L3_OFF + p->hl; /* IPv4 options included */
	__u32 hdrs = l4_off + p->tcp_doff; /* bytes that move: eth, IP, TCP with options */
	void *data, *end;
	__u64 acc = 0;

	if (bpf_xdp_adjust_head(ctx, -(int)grow))
		return -1;
	data = pkt_data(ctx);
	end = pkt_end(ctx);
	/* Ascending 2-byte copy: the destination lies below the source, so no byte is
	 * overwritten before it is read. Every header length is even. */
	for (__u32 i = 0; i < (LB_L3_OFF + 60 + 60) / 2; i++) {
		__u16 *dst = data + i * 2;
		__u16 *src = data + grow + i * 2;

		if (i * 2 >= hdrs)
			break;
		if ((void *)(src + 1) > end)
			return -1;
		*dst = *src;
	}
	if (hdrs > l4_off + 60 || l4_off > LB_L3_OFF + 60)
		return -1;
	__u8 *opt = data + hdrs;
	struct tcphdr *th = data + l4_off;

	if ((void *)(th + 1) > end || (void *)opt + 8 > end)
		return -1;
	if (!v4 && (void *)opt + 20 > end)
		return -1;
	/* The option's words into the TCP checksum. */
	opt[0] = 254;
	opt[1] = grow;
	*(__be16 *)(opt + 2) = p->flow.sport;
	acc = csum_diff16(acc, 0, *(__u16 *)opt);
	acc = csum_diff16(acc, 0, *(__u16 *)(opt + 2));
	if (v4) {
		__builtin_memcpy(opt + 4, p->flow.src, 4);
		acc = csum_diff32(acc, 0, *(__u32 *)(opt + 4));
	} else {
		__builtin_memcpy(opt + 4, p->flow.src, 16);
#pragma unroll
		for (int i = 0; i < 4; i++)
			acc = csum_diff32(acc, 0, *(__u32 *)(opt + 4 + i * 4));
	}
	/* Data offset (the word it shares with the flags) and the pseudo-header length. */
	__u16 old_word = *(__u16 *)((__u8 *)th + 12);

	th->doff += grow / 4;
	acc = csum_diff16(acc, old_word, *(__u16 *)((__u8 *)th + 12));
	__u32 tcp_len = p->l3_len - p->hl;

	acc = csum_diff16(acc, bpf_htons(tcp_len), bpf_htons(tcp_len + grow));
	th->check = csum_apply(th->check, acc);
	if (v4) {
		struct iphdr *iph = data + LB_L3_OFF;

		if ((void *)(iph + 1) > end)
			return -1;
		__be16 old_len = iph->tot_len;

		/* Incremental: a header is never given a checksum it did not arrive with. */
		iph->tot_len = bpf_htons(p->l3_len + grow);
		iph->check = csum_apply(iph->check, csum_diff16(0, old_len, iph->tot_len));
	} else {
		struct ipv6hdr *ip6h = data + LB_L3_OFF;

		if ((void *)(ip6h + 1) > end)
			return -1;
		ip6h->payload_len = bpf_htons(p->l3_len - 40 + grow);
	}
	return 0;
}

static __always_inline void rev_key(struct lb_flow *k, const struct lb_real *real,
				    const __u8 *dst, __be16 dport, __u8 proto)
{
	__builtin_memset(k, 0, sizeof(*k));
	copy16(k->src, real->addr);
	copy16(k->dst, dst);
	k->sport = real->port;
	k->dport = dport;
	k->proto = proto;
	k->family = real->family;
}

static __always_inline void rev_value(struct lb_rev *v, const struct lb_pkt *p, __u32 slot,
				      __u32 service, __u8 flags, __u64 now)
{
	__builtin_memset(v, 0, sizeof(*v));
	copy16(v->vip, p->flow.dst);
	copy16(v->client, p->flow.src);
	v->vport = p->flow.dport;
	v->cport = p->flow.sport;
	v->real = slot;
	v->service = service;
	v->flags = flags;
	v->seen_ns = now;
	v->opened = now >> 20;
}

/* Whether a full-NAT local port's old connection is over: closed a grace ago, or idle. */
static __always_inline int port_reusable(const struct lb_rev *old, __u8 proto, __u64 now)
{
	__u64 idle = now - old->seen_ns;

	if ((old->flags & LB_REV_CLOSED) && idle > (__u64)cfg_closed_grace_s * LB_NS)
		return 1;
	return idle > (__u64)(proto == WS_IPPROTO_TCP ? cfg_idle_tcp_s : cfg_idle_udp_s) * LB_NS;
}

/* Whether a half-open connection's entry may be taken: it closed (an RST), or its handshake
 * did not finish within cfg_half_open_s. */
static __always_inline int half_open_reusable(const struct lb_rev *old, __u64 now)
{
	return (old->flags & LB_REV_CLOSED) || now - old->seen_ns > (__u64)cfg_half_open_s * LB_NS;
}

/* The ports of this CPU's share: [LB_PORT_LO + cpu * share, + share). */
static __always_inline __u32 port_share(void)
{
	return LB_PORT_RANGE / (cfg_nr_cpus ? cfg_nr_cpus : 1);
}

/* Whether the port of a UDP flow not marked answered (its real never answered, or only within
 * LB_UDP_ASSURED_NS of its opening) may go to a new flow when every probed port is busy: the
 * flow has been idle a second, time for a request's answer. */
static __always_inline int unassured_reusable(const struct lb_rev *old, __u64 now)
{
	return !(old->flags & LB_REV_ANSWERED) && now - old->seen_ns > LB_NS;
}

/* The flow that held the port s->spare of local address s->laddr under reply entry `old` is
 * forgotten on this CPU, where the port was handed out, and in its forward entry, unless
 * either names another port by now: its next datagram takes a port of its own. */
static __always_inline void udp_forget(struct lb_port_scratch *s, const struct lb_rev *old)
{
	struct lb_conn *e;
	struct lb_rev *f;
	void *table;

	__builtin_memset(&s->old, 0, sizeof(s->old));
	copy16(s->old.src, old->client);
	copy16(s->old.dst, old->vip);
	s->old.sport = old->cport;
	s->old.dport = old->vport;
	s->old.proto = WS_IPPROTO_UDP;
	s->old.family = s->family;
	table = bpf_map_lookup_elem(&conns, &s->cpu);
	if (table) {
		e = bpf_map_lookup_elem(table, &s->old);
		if (e && e->lport == s->spare && e->laddr == s->laddr)
			bpf_map_delete_elem(table, &s->old);
	}
	s->old.pad[0] = LB_FLOW_FWD;
	f = bpf_map_lookup_elem(&udp_flows, &s->old);
	if (f && f->lport == s->spare && f->laddr == s->laddr)
		bpf_map_delete_elem(&udp_flows, &s->old);
}

/* Full-NAT UDP: a local port of this CPU's share for the new flow `p` of service `service`
 * to real slot `slot` from local address `laddr`; its reply entry is inserted into udp_flows.
 * A port is taken from the flow that holds it when that flow is idle (port_reusable), or,
 * every probe busy (a flood of new flows), when its real never answered it and it has been
 * idle a second: the first such probed, which the cursor handed out longest ago. That flow is
 * forgotten (udp_forget): its datagrams never leave from a port another flow holds (docs/LB.md,
 * "UDP flows"). The port in network order, or 0 when every probe is busy.
 *
 * A global function, as fnat_udp_port_lost() below: the verifier walks the probes once,
 * not on each path of serve() that reaches them. */
__noinline int fnat_udp_alloc(const struct lb_pkt *p, __u32 service, __u32 slot, __u32 laddr)
{
	struct lb_port_scratch *s;
	struct lb_real *real;
	struct lb_laddr *la;
	struct lb_rev *old;
	__u32 *cursor;

	/* What the probes need lives in scratch, not in registers: with more live values than
	 * the four callee-saved registers, the compiler spilled them to a 72-byte frame, past
	 * what the program's 456 leave of 512 (docs/LB.md, "UDP flows"). */
	s = bpf_map_lookup_elem(&port_scratch, (const void *)&lb_key_zero);
	cursor = bpf_map_lookup_elem(&port_cursor, (const void *)&lb_key_zero);
	if (!s || !p || !cursor)
		return 0;
	s->cpu = bpf_get_smp_processor_id();
	s->share = port_share();
	if (!s->share || s->cpu >= cfg_nr_cpus)
		return 0;
	s->base = LB_PORT_LO + s->cpu * s->share;
	s->slot = slot;
	real = bpf_map_lookup_elem(&reals, &s->slot);
	s->key = service * LB_MAX_LADDRS + laddr;
	la = bpf_map_lookup_elem(&laddrs, &s->key);
	if (!real || !la)
		return 0;
	s->now = lb_now();
	s->family = real->family;
	s->laddr = laddr;
	s->spare = 0;
	rev_key(&s->k, real, la->addr, 0, WS_IPPROTO_UDP);
	rev_value(&s->v, p, slot, service, LB_REV_FNAT, s->now);
	for (int i = 0; i < LB_PORT_PROBES; i++) {
		s->k.dport = bpf_htons(s->base + (*cursor % s->share));
		*cursor += 1;
		if (bpf_map_update_elem(&udp_flows, &s->k, &s->v, BPF_NOEXIST) == 0)
			return s->k.dport;
		/* This CPU alone hands out this port: replacing the entry races with no other
		 * allocation. */
		old = bpf_map_lookup_elem(&udp_flows, &s->k);
		if (!old)
			continue;
		if (port_reusable(old, WS_IPPROTO_UDP, s->now) &&
		    bpf_map_update_elem(&udp_flows, &s->k, &s->v, BPF_ANY) == 0)
			return s->k.dport;
		if (!s->spare && unassured_reusable(old, s->now))
			s->spare = s->k.dport;
	}
	if (!s->spare)
		return 0;
	s->k.dport = s->spare;
	old = bpf_map_lookup_elem(&udp_flows, &s->k);
	if (!old || !unassured_reusable(old, s->now))
		return 0;
	udp_forget(s, old);
	if (bpf_map_update_elem(&udp_flows, &s->k, &s->v, BPF_ANY))
		return 0;
	s->key = LB_UDP_UNASSURED_RECLAIMED;
	__u64 *n = bpf_map_lookup_elem(&reasons, &s->key);
	if (n)
		*n += 1;
	return s->spare;
}

/* Full-NAT: a local address and a port of this CPU's share whose reverse entry this
 * connection may take; the entry is inserted. 0, or the reason. */
static __always_inline int fnat_alloc(const struct lb_vip *vip, const struct lb_real *real,
				      __u32 slot, const struct lb_pkt *p, __u32 hash, __u64 now,
				      struct lb_conn *c)
{
	struct lb_flow k;
	struct lb_rev v;
	struct lb_laddr *la;
	__u32 li, key, zero = 0, cpu = bpf_get_smp_processor_id();
	__u32 share = port_share();
	__u32 *cursor;

	if (!vip->laddr_count || vip->laddr_count > LB_MAX_LADDRS)
		return LB_PASS_NO_LADDR;
	li = hash % vip->laddr_count;
	key = vip->id * LB_MAX_LADDRS + li;
	la = bpf_map_lookup_elem(&laddrs, &key);
	if (!la || la->family != real->family)
		return LB_PASS_NO_LADDR;
	if (p->flow.proto != WS_IPPROTO_TCP) {
		int port = fnat_udp_alloc(p, vip->id, slot, li);

		if (!port)
			return LB_DROP_NO_PORT;
		c->laddr = li;
		c->lport = (__be16)port;
		return 0;
	}
	cursor = bpf_map_lookup_elem(&port_cursor, &zero);
	if (!cursor || !share || cpu >= cfg_nr_cpus)
		return LB_PASS_MAP;
	rev_key(&k, real, la->addr, 0, p->flow.proto);
	rev_value(&v, p, slot, vip->id, LB_REV_FNAT, now);
	/* TCP: the reply entry waits in half_open until the handshake is proven. A port an
	 * established connection holds is never taken; one a half-open connection holds is, when
	 * that one closed or expired, or else (every probe busy: a flood) the first probed, which
	 * the cursor handed out longest ago. */
	__be16 spare = 0;

	for (int i = 0; i < LB_PORT_PROBES; i++) {
		struct lb_rev *old;

		k.dport = bpf_htons(LB_PORT_LO + cpu * share + (*cursor % share));
		*cursor += 1;
		old = bpf_map_lookup_elem(&rev, &k);
		if (old) {
			if (!port_reusable(old, p->flow.proto, now))
				continue;
			/* Gone, so that no reply of the new connection finds the old client. */
			bpf_map_delete_elem(&rev, &k);
		}
		if (bpf_map_update_elem(&half_open, &k, &v, BPF_NOEXIST) == 0)
			goto got;
		old = bpf_map_lookup_elem(&half_open, &k);
		if (old && half_open_reusable(old, now) &&
		    bpf_map_update_elem(&half_open, &k, &v, BPF_ANY) == 0)
			goto got;
		if (!spare)
			spare = k.dport;
	}
	if (!spare)
		return LB_DROP_NO_PORT;
	k.dport = spare;
	if (bpf_map_update_elem(&half_open, &k, &v, BPF_ANY))
		return LB_DROP_NO_PORT;
	count(LB_HALF_OPEN_RECLAIMED);
got:
	c->laddr = li;
	c->lport = k.dport;
	return 0;
}

/* The shared forward entry of a connection (see lb_rev). */
static __always_inline void fwd_key(struct lb_flow *k, const struct lb_pkt *p)
{
	*k = p->flow;
	k->pad[0] = LB_FLOW_FWD;
}

/* The forward entry of connection `c` into `map`: `half_open` from a SYN, else the table of
 * its protocol (flows_of): a TCP connection past its handshake, or a UDP flow. */
static __always_inline void fwd_insert(void *map, const struct lb_pkt *p, __u32 service,
				       const struct lb_conn *c, __u8 flags, __u64 now)
{
	struct lb_flow k;
	struct lb_rev v;

	fwd_key(&k, p);
	rev_value(&v, p, c->real, service, LB_REV_FWD | flags, now);
	v.laddr = c->laddr;
	v.lport = c->lport;
	bpf_map_update_elem(map, &k, &v, BPF_ANY);
}

/* The entry under `k`: an established flow's (`rev`, `udp_flows`), else a TCP connection's
 * in its handshake. Only for a FIN or RST and an ICMP error: never per packet. */
static __always_inline struct lb_rev *conn_entry(const struct lb_flow *k)
{
	struct lb_rev *e = flow_entry(k);

	if (e || k->proto != WS_IPPROTO_TCP)
		return e;
	return bpf_map_lookup_elem(&half_open, k);
}

/* Marks the forward entry of the client flow `p` closed (a FIN or RST from the client):
 * `wirespeed lb -L` counts it in InActConn from then on. */
static __always_inline void fwd_close(const struct lb_pkt *p, __u64 now)
{
	struct lb_flow k;
	struct lb_rev *f;

	fwd_key(&k, p);
	f = conn_entry(&k);
	if (f) {
		f->flags |= LB_REV_CLOSED;
		f->seen_ns = now;
	}
}

/* Full-NAT UDP: whether the flow `p` of service `service`, whose entries name real slot
 * `slot`, local address `laddr` and port `lport` (`laddr_lport`: laddr << 16 | lport), has
 * lost that port. If so the flow is forgotten (its entry in this CPU's table, and its forward
 * entry unless another CPU gave it a new port already), so that its next datagram is
 * scheduled afresh and takes a new port; if not, the port's entry is refreshed. Any other
 * mode's flow holds no port: 0.
 *
 * The port is the flow's while the port's reply entry names it. That entry can go while the
 * flow's entries stay: the LRU evicts it under pressure, or the allocator takes the port of an
 * entry idle for the UDP idle time, which a one-way flow reaches while it still sends. The
 * port then goes to another flow, and this one's datagrams would reach the real as that
 * flow's (docs/LB.md, "UDP flows").
 *
 * A global function: the verifier walks it once, not once for each of the thousands of paths
 * through serve() that reach it; its keys live in port_scratch, since the program's frame
 * leaves it too little stack for them. */
__noinline int fnat_udp_port_lost(const struct lb_pkt *p, __u32 service, __u32 slot,
				  __u32 laddr_lport)
{
	struct lb_port_scratch *s;
	__u32 laddr = laddr_lport >> 16, lport = laddr_lport & 0xffff;
	struct lb_real *real;
	struct lb_laddr *la;
	struct lb_rev *r;
	void *table;

	s = bpf_map_lookup_elem(&port_scratch, (const void *)&lb_key_zero);
	if (!s || !p)
		return 0;
	s->slot = slot;
	real = bpf_map_lookup_elem(&reals, &s->slot);
	s->key = service * LB_MAX_LADDRS + laddr;
	la = bpf_map_lookup_elem(&laddrs, &s->key);
	if (!real || real->mode != LB_MODE_FNAT || !la)
		return 0;
	rev_key(&s->k, real, la->addr, (__be16)lport, p->flow.proto);
	r = bpf_map_lookup_elem(&udp_flows, &s->k);
	if (r && r->cport == p->flow.sport && r->vport == p->flow.dport &&
	    same16(r->client, p->flow.src) && same16(r->vip, p->flow.dst)) {
		__u64 now = lb_now();

		if (now - r->seen_ns > LB_NS)
			r->seen_ns = now; /* at most once a second: the cache line is shared */
		return 0;
	}
	s->cpu = bpf_get_smp_processor_id();
	table = bpf_map_lookup_elem(&conns, &s->cpu);
	if (table)
		bpf_map_delete_elem(table, &p->flow);
	s->k = p->flow;
	s->k.pad[0] = LB_FLOW_FWD;
	r = bpf_map_lookup_elem(&udp_flows, &s->k);
	if (r && r->lport == (__be16)lport && r->laddr == laddr)
		bpf_map_delete_elem(&udp_flows, &s->k);
	return 1;
}

/* NAT: the reverse entry of a new connection into `map` (`half_open` for a TCP SYN,
 * `udp_flows` for UDP). Inserted once; an entry for the same reply flow is this connection's unless it
 * closed, and then it is replaced. */
static __always_inline void nat_insert(void *map, const struct lb_real *real, __u32 slot,
				       __u32 service, const struct lb_pkt *p, __u64 now)
{
	struct lb_flow k;
	struct lb_rev v;

	rev_key(&k, real, p->flow.src, p->flow.sport, p->flow.proto);
	rev_value(&v, p, slot, service, 0, now);
	if (bpf_map_update_elem(map, &k, &v, BPF_NOEXIST) == 0)
		return;
	struct lb_rev *old = bpf_map_lookup_elem(map, &k);

	if (old && (old->flags & LB_REV_CLOSED))
		bpf_map_update_elem(map, &k, &v, BPF_ANY);
}

/* Marks the reverse entry of a connection closing (FIN or RST from the client). */
static __always_inline void rev_close(const struct lb_real *real, const __u8 *dst, __be16 dport,
				      __u8 proto, __u64 now)
{
	struct lb_flow k;
	struct lb_rev *r;

	rev_key(&k, real, dst, dport, proto);
	r = conn_entry(&k);
	if (r) {
		r->flags |= LB_REV_CLOSED;
		r->seen_ns = now;
	}
}

/* NAT and full-NAT, client to real: TOA if asked (and it fits), then the destination (and
 * for full-NAT the source) translated, then out towards the real. */
static __always_inline int nat_forward(struct xdp_md *ctx, const struct lb_pkt *p,
				       const struct lb_real *real, __u32 slot,
				       const struct lb_laddr *la, __be16 lport, int toa,
				       enum lb_reason *why)
{
	__u8 fam = p->flow.family;
	__u32 grow = 0;
	struct bpf_fib_lookup f;
	int rc;

	if (real->family != fam) {
		*why = LB_PASS_MODE_OFF;
		return XDP_PASS;
	}
	if (toa) {
		grow = fam == WS_AF_INET ? 8 : 20;
		if (p->tcp_doff + grow > 60) {
			count(LB_TOA_NO_ROOM);
			grow = 0;
		}
	}
	rc = fib_real(ctx, &f, slot, real, la ? la->addr : p->flow.src, p->flow.proto,
		      p->l3_len + grow, 0);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED && grow) {
		count(LB_TOA_NO_ROOM);
		grow = 0;
		rc = fib_real(ctx, &f, slot, real, la ? la->addr : p->flow.src, p->flow.proto,
			      p->l3_len, 0);
	}
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return fib_fail(rc, why);
	if (grow) {
		if (toa_insert(ctx, p, grow) < 0) {
			*why = LB_PASS_BAD_HEADER;
			return XDP_DROP; /* the headers may be half moved: never the kernel's */
		}
		count(LB_TOA_ADDED);
	}
	if (rewrite(ctx, fam, p->frag == LB_FRAG_LATER ? 0 : p->flow.proto, p->hl,
		    la ? la->addr : 0, lport, real->addr, real->port)) {
		*why = LB_PASS_BAD_HEADER;
		return XDP_PASS;
	}
	*why = la ? LB_FWD_FNAT : LB_FWD_NAT;
	return emit(ctx, &f);
}

/* A real's reply found in the reverse table: from the VIP again (and, full-NAT, to the
 * client), out towards the client. */
static __always_inline int nat_reply(struct xdp_md *ctx, const struct lb_pkt *p, struct lb_rev *r,
				     enum lb_reason *why)
{
	__u8 fam = p->flow.family;
	int fnat = r->flags & LB_REV_FNAT;
	const __u8 *dst = fnat ? r->client : p->flow.dst;
	struct bpf_fib_lookup f;
	__u64 now = lb_now();
	int rc;

	if (p->flow.proto == WS_IPPROTO_TCP && (p->tcp_flags & (LB_TCP_FIN | LB_TCP_RST))) {
		r->flags |= LB_REV_CLOSED;
		r->seen_ns = now;
	} else {
		/* Written once a second at most: the entry's cache line is shared. A UDP flow
		 * whose real answers it once it has lasted keeps its port under a flood
		 * (docs/LB.md, "UDP flows"). */
		if (p->flow.proto != WS_IPPROTO_TCP && !(r->flags & LB_REV_ANSWERED) &&
		    (__u32)(now >> 20) - r->opened > (__u32)(LB_UDP_ASSURED_NS >> 20))
			r->flags |= LB_REV_ANSWERED;
		if (now - r->seen_ns > LB_NS)
			r->seen_ns = now;
	}
	rc = fib(ctx, &f, fam, r->vip, dst, p->flow.proto, p->l3_len, 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return fib_fail(rc, why);
	account(r->service, r->real, 0, 1, p->l3_len);
	if (rewrite(ctx, fam, p->flow.proto, p->hl, r->vip, r->vport, fnat ? r->client : 0,
		    r->cport)) {
		*why = LB_PASS_BAD_HEADER;
		return XDP_PASS;
	}
	*why = LB_FWD_REPLY;
	return emit(ctx, &f);
}

#endif
