/* Bridge module: forwards a frame between two ports of a Linux bridge when the kernel's FDB
 * already knows where it goes, exactly as the bridge would. Everything the bridge would do
 * more than one known-unicast forward (flood, learn, deliver locally, filter, drop) is the
 * kernel's: the frame is passed. The decision is shared by the XDP and the TC hook; only the
 * VLAN tag edits differ (in the packet at XDP, in skb metadata at TC). */
#ifndef FP_BRIDGE_H
#define FP_BRIDGE_H

#define BR_STATE_FORWARDING 3
#define BRIDGE_VLAN_INFO_UNTAGGED (1 << 2)

/* One bridge port, keyed by its ifindex. Filled from the kernel's bridge port state. */
struct br_port {
	__u32 bridge;        /* ifindex of the bridge the port belongs to */
	__u32 mtu;           /* the port's MTU: larger frames are the kernel's to drop */
	__u16 pvid;          /* VLAN for untagged ingress (0: none, untagged is dropped) */
	__u8 state;          /* STP state (BR_STATE_*) */
	__u8 vlan_filtering; /* the bridge's vlan_filtering */
	__u8 ip_check;       /* BR_CHECK_*: br_netfilter validates these untagged frames */
	__u8 pad[3];
	/* How often a frame goes to the kernel to refresh the FDB entries it touches (0:
	 * never, the bridge's ageing_time is 0): a fraction of the ageing time, at most 1 s. */
	__u64 fdb_refresh_ns;
};

/* br_netfilter (bridge-nf-call-ip{,6}tables) validates untagged IP headers before the IP
 * hooks even with no table there: it drops bad headers and checksums, trims padding and
 * parses options. The fast path forwards only frames that validation leaves untouched. */
#define BR_CHECK_IPV4 1
#define BR_CHECK_IPV6 2

struct br_vlan_key {
	__u32 ifindex;
	__u16 vid;
	__u16 pad;
};

struct br_fdb_key {
	__u32 bridge;
	__u16 vid; /* 0 on a bridge without vlan_filtering */
	__u8 mac[WS_ETH_ALEN];
};

/* An FDB entry: its port, and when a frame last went to the kernel from this MAC (which
 * refreshes the kernel's `updated`, the entry's ageing clock: br_fdb_update) and to it
 * (`used`, br_handle_frame_finish). Fast-pathed frames refresh neither, so one of them goes
 * to the kernel every fdb_refresh_ns: an active station's entry never ages out, as under
 * Linux alone. */
struct br_fdb_val {
	__u32 port; /* ifindex, 0: local to the bridge */
	__u32 pad;
	__u64 updated_ns;
	__u64 used_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct br_port);
} br_ports SEC(".maps");

/* Port VLAN membership; the value is the BRIDGE_VLAN_INFO_* flags. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct br_vlan_key);
	__type(value, __u16);
} br_vlans SEC(".maps");

/* The kernel's FDB: where a MAC lives. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct br_fdb_key);
	__type(value, struct br_fdb_val);
} br_fdb SEC(".maps");

/* What the hook must do to the frame's tag on the way out. */
enum br_tag {
	BR_TAG_KEEP,
	BR_TAG_POP,
	BR_TAG_PUSH,
};

struct br_frame {
	__u32 in_ifindex;
	const __u8 *dmac;
	const __u8 *smac;
	void *l3;       /* after the Ethernet header and any tag in the data */
	void *data_end;
	__be16 proto;   /* EtherType of l3 */
	__u32 l2_payload; /* bytes after the Ethernet header and any tag */
	__u8 tagged;      /* an 802.1Q tag came with the frame */
	__u8 gso;         /* a GSO skb (TC only): its size is no bar, as for the kernel's bridge */
	__u16 vid;        /* its VID when tagged */
};

static __always_inline int mac_is_group(const __u8 *mac)
{
	return mac[0] & 1;
}

/* True when br_netfilter's header validation would leave the frame as it is. */
static __always_inline int br_ip_clean(const struct br_frame *f, __u8 check)
{
	if (f->proto == bpf_htons(WS_ETH_P_IP) && (check & BR_CHECK_IPV4)) {
		struct iphdr *iph = f->l3;

		if ((void *)(iph + 1) > f->data_end)
			return 0;
		if (iph->version != 4 || iph->ihl != 5)
			return 0; /* options are parsed there: the kernel's */
		if (ws_ipv4_hdr_csum_check(iph) != 0)
			return 0;
		return bpf_ntohs(iph->tot_len) == f->l2_payload;
	}
	if (f->proto == bpf_htons(WS_ETH_P_IPV6) && (check & BR_CHECK_IPV6)) {
		struct ipv6hdr *ip6h = f->l3;

		if ((void *)(ip6h + 1) > f->data_end)
			return 0;
		if (ip6h->version != 6 || ip6h->nexthdr == WS_IPPROTO_HOPOPTS)
			return 0;
		return bpf_ntohs(ip6h->payload_len) + sizeof(*ip6h) == f->l2_payload;
	}
	return 1;
}

/* Whether the frame goes to the kernel to refresh the FDB entries of its source and
 * destination (struct br_fdb_val): the first frame of each refresh period does, and the
 * kernel bridges it as it would have. Racing CPUs may both pass one: harmless. */
static __always_inline int fdb_refresh_due(const struct br_port *in, struct br_fdb_val *src,
					   struct br_fdb_val *dst)
{
	__u64 now;

	if (!in->fdb_refresh_ns)
		return 0;
	now = bpf_ktime_get_coarse_ns();
	if (now - src->updated_ns < in->fdb_refresh_ns && now - dst->used_ns < in->fdb_refresh_ns)
		return 0;
	src->updated_ns = now;
	dst->used_ns = now;
	return 1;
}

/* Returns the egress port, or 0 with *why set when the kernel must handle the frame. */
static __always_inline __u32 bridge_decide(const struct br_frame *f, enum br_tag *tag, __u16 *vid_out,
					   enum fp_reason *why)
{
	struct br_port *in, *out;
	struct br_fdb_key k = {};
	struct br_vlan_key vk = {};
	struct br_fdb_val *dst, *src;
	__u32 oif;
	__u16 vid = 0, *vflags;

	*tag = BR_TAG_KEEP;
	in = bpf_map_lookup_elem(&br_ports, &f->in_ifindex);
	if (!in || in->state != BR_STATE_FORWARDING)
		return 0;
	if (mac_is_group(f->dmac) || mac_is_group(f->smac))
		return 0; /* flooding, multicast and invalid sources are the kernel's */
	/* Ring redundancy (MRP) and connectivity fault management (CFM) frames are consumed by
	 * the bridge where an instance is configured (br_process_frame_type), else bridged: the
	 * kernel does whichever applies. */
	if (f->proto == bpf_htons(WS_ETH_P_MRP) || f->proto == bpf_htons(WS_ETH_P_CFM))
		return 0;
	if (in->vlan_filtering) {
		if (f->tagged)
			vid = f->vid;
		else
			vid = in->pvid;
		if (vid == 0)
			return 0; /* priority-tagged or no PVID: the kernel decides */
		vk.ifindex = f->in_ifindex;
		vk.vid = vid;
		if (!bpf_map_lookup_elem(&br_vlans, &vk))
			return 0; /* ingress filtering drops it */
	}
	k.bridge = in->bridge;
	k.vid = vid;
	/* Learning stays with the kernel: a source it has not learned on this port (new, or
	 * moved) goes to it, and the FDB event then brings the entry here. */
	__builtin_memcpy(k.mac, f->smac, WS_ETH_ALEN);
	src = bpf_map_lookup_elem(&br_fdb, &k);
	if (!src || src->port != f->in_ifindex)
		return 0;
	__builtin_memcpy(k.mac, f->dmac, WS_ETH_ALEN);
	dst = bpf_map_lookup_elem(&br_fdb, &k);
	if (!dst)
		return 0; /* unknown unicast: the kernel floods */
	oif = dst->port;
	if (oif == 0 || oif == f->in_ifindex)
		return 0; /* local delivery, or the kernel's hairpin rules */
	out = bpf_map_lookup_elem(&br_ports, &oif);
	if (!out || out->bridge != in->bridge || out->state != BR_STATE_FORWARDING)
		return 0;
	/* The kernel's bridge forwards a GSO skb whatever its size or the egress MTU
	 * (is_skb_forwardable): the egress device segments it, or takes it whole. */
	if (f->l2_payload > out->mtu && !f->gso)
		return 0;
	if (in->ip_check && !f->tagged && !br_ip_clean(f, in->ip_check))
		return 0;
	if (in->vlan_filtering) {
		vk.ifindex = oif;
		vflags = bpf_map_lookup_elem(&br_vlans, &vk);
		if (!vflags)
			return 0; /* egress filtering drops it */
		if (*vflags & BRIDGE_VLAN_INFO_UNTAGGED)
			*tag = f->tagged ? BR_TAG_POP : BR_TAG_KEEP;
		else
			*tag = f->tagged ? BR_TAG_KEEP : BR_TAG_PUSH;
	}
	if (fdb_refresh_due(in, src, dst)) {
		*why = FP_PASS_FDB_REFRESH;
		return 0;
	}
	*vid_out = vid;
	return oif;
}

/* XDP: parses the frame (at most one 802.1Q tag), decides, and edits the tag in place.
 * Returns the egress ifindex, 0 to pass. */
static __always_inline __u32 bridge_xdp(struct xdp_md *ctx, enum fp_reason *why)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct br_frame f = {};
	enum br_tag tag;
	__u16 vid = 0;
	__u32 oif;
	__u32 hdr = sizeof(*eth);

	*why = FP_PASS_BRIDGE;
	if ((void *)(eth + 1) > data_end) {
		*why = FP_PASS_BAD_HEADER;
		return 0;
	}
	if (eth->h_proto == bpf_htons(WS_ETH_P_8021AD))
		return 0;
	if (eth->h_proto == bpf_htons(WS_ETH_P_8021Q)) {
		struct ws_vlan_tag *vt = (void *)(eth + 1);

		if ((void *)(vt + 1) > data_end) {
			*why = FP_PASS_BAD_HEADER;
			return 0;
		}
		/* A second tag (QinQ) is the kernel's. */
		if (vt->inner_proto == bpf_htons(WS_ETH_P_8021Q) || vt->inner_proto == bpf_htons(WS_ETH_P_8021AD))
			return 0;
		f.tagged = 1;
		f.vid = ws_vlan_id(vt);
		f.proto = vt->inner_proto;
		hdr += WS_VLAN_HLEN;
	} else {
		f.proto = eth->h_proto;
	}
	f.l3 = data + hdr;
	f.data_end = data_end;
	f.in_ifindex = in_ifindex(ctx);
	f.dmac = eth->h_dest;
	f.smac = eth->h_source;
	f.l2_payload = (__u32)(data_end - data) - hdr;
	oif = bridge_decide(&f, &tag, &vid, why);
	if (!oif)
		return 0;
	if (ws_csum_may_be_partial(f.proto, f.l3, data_end)) {
		*why = FP_PASS_CSUM_PARTIAL;
		return 0;
	}
	/* The frame is edited below: from here on, passing it to the kernel would hand it an
	 * altered frame, so the redirect must not be able to fall back. */
	if (!bpf_map_lookup_elem(&tx_ports, &oif)) {
		*why = FP_PASS_NO_TX_PORT;
		return 0;
	}

	if (tag == BR_TAG_POP) {
		__u8 macs[2 * WS_ETH_ALEN];

		__builtin_memcpy(macs, eth, sizeof(macs));
		if (bpf_xdp_adjust_head(ctx, WS_VLAN_HLEN))
			return 0;
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		if (data + 2 * WS_ETH_ALEN > data_end)
			return 0;
		__builtin_memcpy(data, macs, sizeof(macs));
	} else if (tag == BR_TAG_PUSH) {
		__u8 macs[2 * WS_ETH_ALEN];
		struct ws_vlan_tag *vt;

		__builtin_memcpy(macs, eth, sizeof(macs));
		if (bpf_xdp_adjust_head(ctx, -WS_VLAN_HLEN))
			return 0;
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		if (data + 2 * WS_ETH_ALEN + sizeof(*vt) + 2 > data_end)
			return 0;
		__builtin_memcpy(data, macs, sizeof(macs));
		*(__be16 *)(data + 2 * WS_ETH_ALEN) = bpf_htons(WS_ETH_P_8021Q);
		vt = data + 2 * WS_ETH_ALEN + 2;
		/* The bridge tags with the PVID and priority 0; the inner EtherType is already in
		 * place: it is the old h_proto, right after the new tag. */
		vt->tci = bpf_htons(vid);
	}
	*why = FP_BRIDGED;
	return oif;
}

/* TC ingress: the kernel has already moved the tag into skb metadata; the helpers edit it. */
static __always_inline __u32 bridge_tc(struct __sk_buff *skb, enum fp_reason *why)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct br_frame f = {};
	enum br_tag tag;
	__u16 vid = 0;
	__u32 oif;

	*why = FP_PASS_BRIDGE;
	if ((void *)(eth + 1) > data_end) {
		*why = FP_PASS_BAD_HEADER;
		return 0;
	}
	/* A tag still in the data is a second one (QinQ): the kernel's. */
	if (eth->h_proto == bpf_htons(WS_ETH_P_8021Q) || eth->h_proto == bpf_htons(WS_ETH_P_8021AD))
		return 0;
	if (skb->vlan_present) {
		if (skb->vlan_proto != bpf_htons(WS_ETH_P_8021Q))
			return 0;
		f.tagged = 1;
		f.vid = skb->vlan_tci & WS_VLAN_VID_MASK;
	}
	f.proto = eth->h_proto;
	f.l3 = eth + 1;
	f.data_end = data_end;
	f.in_ifindex = skb->ifindex;
	f.dmac = eth->h_dest;
	f.smac = eth->h_source;
	/* At TC ingress skb->len counts the Ethernet header but not an offloaded tag. */
	f.l2_payload = skb->len - sizeof(*eth);
	f.gso = skb->gso_size != 0;
	oif = bridge_decide(&f, &tag, &vid, why);
	if (!oif)
		return 0;
	if (tag == BR_TAG_POP && bpf_skb_vlan_pop(skb))
		return 0;
	if (tag == BR_TAG_PUSH && bpf_skb_vlan_push(skb, bpf_htons(WS_ETH_P_8021Q), vid))
		return 0;
	*why = FP_BRIDGED;
	return oif;
}

#endif
