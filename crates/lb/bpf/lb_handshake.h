/* Half-open connections (docs/LB.md, "Half-open connections"): a TCP connection lives in
 * `half_open` from its SYN until the client's first segment that proves the handshake, and
 * only then moves to `rev` and this CPU's table. A spoofed source never sees the real's
 * SYN-ACK, so for NAT and full-NAT, whose replies cross the load balancer, the proof is an
 * acknowledgement of that SYN-ACK's sequence number; for DR and tunnel the replies go around
 * the load balancer and any non-SYN segment is taken as the proof. */
#ifndef LB_HANDSHAKE_H
#define LB_HANDSHAKE_H

/* The sequence (ack 0) or acknowledgement (ack 1) number of the frame's TCP header, host
 * order; parse() checked the header lies in the frame. */
static __always_inline __u32 tcp_seq_field(struct xdp_md *ctx, const struct lb_pkt *p, int ack)
{
	void *data = pkt_data(ctx), *end = pkt_end(ctx);
	struct tcphdr *th = data + LB_L3_OFF + (p->hl & 0x3f);

	if ((void *)(th + 1) > end)
		return 0;
	return bpf_ntohl(ack ? th->ack_seq : th->seq);
}

/* Whether `p` is a SYN-ACK. */
static __always_inline int is_syn_ack(const struct lb_pkt *p)
{
	return p->flow.proto == WS_IPPROTO_TCP &&
	       (p->tcp_flags & (LB_TCP_SYN | LB_TCP_ACK)) == (LB_TCP_SYN | LB_TCP_ACK);
}

/* The entry a real's packet `p` is a reply of. A SYN-ACK belongs to a connection in its
 * handshake first; anything else to an established one first (a reused client port may leave
 * an old one). */
static __always_inline struct lb_rev *reply_entry(const struct lb_pkt *p)
{
	struct lb_rev *r;

	if (is_syn_ack(p)) {
		r = bpf_map_lookup_elem(&half_open, &p->flow);
		if (r)
			return r;
	}
	r = flow_entry(&p->flow);
	if (!r && p->flow.proto == WS_IPPROTO_TCP)
		r = bpf_map_lookup_elem(&half_open, &p->flow);
	return r;
}

/* A real's SYN-ACK for the connection of entry `r`, admitted: the entry is marked answered,
 * with the real's ISN, which the client's proof must acknowledge. */
static __always_inline void note_syn_ack(struct xdp_md *ctx, const struct lb_pkt *p,
					 struct lb_rev *r)
{
	if (!is_syn_ack(p))
		return;
	r->real_isn = tcp_seq_field(ctx, p, 0);
	r->flags |= LB_REV_ANSWERED;
}

/* The half-open forward entry of the client flow `p`, or NULL. */
static __always_inline struct lb_rev *half_lookup(const struct lb_pkt *p)
{
	struct lb_flow k;

	fwd_key(&k, p);
	return bpf_map_lookup_elem(&half_open, &k);
}

/* The key of a NAT or full-NAT connection's reply entry: RIP:RPORT -> CIP:CPORT, or
 * LADDR:LPORT for full-NAT. 0, or -1 when the local address is gone. */
static __always_inline int reply_key(struct lb_flow *k, const struct lb_pkt *p,
				     const struct lb_vip *vip, const struct lb_real *real,
				     const struct lb_rev *h)
{
	if (real->mode == LB_MODE_FNAT) {
		__u32 key = vip->id * LB_MAX_LADDRS + h->laddr;
		struct lb_laddr *la = bpf_map_lookup_elem(&laddrs, &key);

		if (!la)
			return -1;
		rev_key(k, real, la->addr, h->lport, p->flow.proto);
	} else {
		rev_key(k, real, p->flow.src, p->flow.sport, p->flow.proto);
	}
	return 0;
}

/* The client segment `p` of the half-open connection `h` proves the handshake: it moves to
 * `rev` (forward entry marked acked, and the reply entry for NAT and full-NAT). 1 when it
 * did; 0 when the segment proves nothing (no SYN-ACK seen, another acknowledgement number,
 * a reply entry taken by another client), and the connection stays half-open. */
static __always_inline int promote(struct xdp_md *ctx, const struct lb_pkt *p,
				   const struct lb_vip *vip, const struct lb_real *real,
				   struct lb_rev *h, __u64 now)
{
	struct lb_flow k;
	struct lb_rev v;

	if (real->mode == LB_MODE_NAT || real->mode == LB_MODE_FNAT) {
		struct lb_rev *r;

		if (reply_key(&k, p, vip, real, h))
			return 0;
		r = bpf_map_lookup_elem(&half_open, &k);
		if (!r || !(r->flags & LB_REV_ANSWERED) || r->cport != p->flow.sport ||
		    !same16(r->client, p->flow.src))
			return 0;
		/* The client acknowledges the SYN-ACK, and at most 64 KiB of data after it (a
		 * SYN-ACK may carry some): a blind guess succeeds once in 65,536. */
		if (tcp_seq_field(ctx, p, 1) - (r->real_isn + 1) >= 0x10000)
			return 0;
		v = *r;
		v.seen_ns = now;
		bpf_map_update_elem(&rev, &k, &v, BPF_ANY);
		bpf_map_delete_elem(&half_open, &k);
	}
	v = *h;
	v.flags |= LB_REV_ACKED;
	v.seen_ns = now;
	fwd_key(&k, p);
	bpf_map_update_elem(&rev, &k, &v, BPF_ANY);
	bpf_map_delete_elem(&half_open, &k);
	return 1;
}

#endif
