/* Constants shared by the fast-path modules, and the load-time feature switches. */
#ifndef FP_CONSTS_H
#define FP_CONSTS_H

#include "ws/proto.h"

#define TC_ACT_SHOT 2
#define ENODATA 61 /* the XDP metadata kfuncs' "not there" */
/* What the TC programs return for a packet they leave to the kernel: tcx's TCX_NEXT (the
 * same -1 as TC_ACT_UNSPEC), so that the programs and classifiers behind ours at TC ingress
 * still see it, as they would without the fast path. TC_ACT_OK would end the chain there. */
#define FP_TC_KERNEL (-1)

/* Why a packet was fast-pathed, dropped or handed to the kernel. build.rs generates the Rust
 * side (Reason in src/counters.rs) from this list: one FP_ name per line, values implicit. */
enum fp_reason {
	FP_FORWARDED = 0,    /* redirected by the router */
	FP_DROPPED_FILTER,   /* dropped by a filter rule or the chain policy */
	FP_PASS_NOT_IP,      /* neither IPv4 nor IPv6 (ARP, LLDP, ...) */
	FP_PASS_VLAN,        /* tagged frame and no bridge module on this port */
	FP_PASS_NOT_HOST,    /* L2 destination is not this interface (kernel drops or floods) */
	FP_PASS_BAD_HEADER,  /* truncated, bad checksum or length mismatch: kernel decides */
	FP_PASS_IP_OPTIONS,  /* IPv4 options or IPv6 hop-by-hop header (any extension header with IPv6 policy rules) */
	FP_PASS_FRAGMENT,    /* a fragment conntrack may reassemble */
	FP_PASS_TTL,         /* TTL / hop limit <= 1: kernel sends ICMP time exceeded */
	FP_PASS_MARTIAN,     /* special source/destination (multicast, loopback, link-local), or a local source */
	FP_PASS_DISABLED,    /* this family is not fast-pathed (policy rules, no forwarding) */
	FP_PASS_NOT_FWDED,   /* local, broadcast or no route: not a forwarding decision */
	FP_PASS_UNREACHABLE, /* blackhole/unreachable/prohibit route: kernel answers */
	FP_PASS_NO_NEIGH,    /* next hop not resolved: kernel resolves it */
	FP_PASS_FRAG_NEEDED, /* larger than the egress MTU */
	FP_PASS_FWD_DISABLED,/* forwarding is off on the ingress interface */
	FP_PASS_SAME_IF,     /* egress == ingress: kernel sends an ICMP redirect */
	FP_PASS_NO_TX_PORT,  /* egress interface is not one of ours */
	FP_PASS_FILTER,      /* a rule the fast path cannot evaluate may match */
	FP_PASS_FIB_OTHER,   /* any other FIB lookup result */
	FP_BRIDGED,          /* forwarded by the bridge module (FDB hit) */
	FP_PASS_BRIDGE,      /* bridge: no FDB entry, local MAC, STP state or VLAN miss */
	FP_FORWARDED_CACHED, /* redirected by the router on the route cache's answer */
	FP_PASS_GSO,         /* TC: a GSO skb the router cannot size per segment */
	FP_PASS_CSUM_PARTIAL,/* XDP: the L4 checksum may still be partial (local sender), no TC stage */
	FP_PASS_RP_FILTER,   /* rp_filter on and the source not routed back out this port (with policy rules: or not by a unicast route) */
	FP_PASS_ICMP_ERROR,  /* an ICMP error: the kernel hashes it by the packet it quotes */
	FP_PASS_HASH_POLICY, /* multipath routes, and a hash policy written that the daemon has not read back */
	FP_PASS_NEIGH_STALE, /* the next hop's neighbour entry is STALE: the kernel's packet moves it on */
	FP_PASS_SYSCTL_UNREAD, /* a sysctl the path reads was written, and the daemon has not read it back */
	FP_PASS_FDB_REFRESH, /* bridge: the kernel's FDB entries of its source and destination are refreshed by this frame */
	FP_PASS_STANDBY,     /* the daemon is loading this port's next program: the kernel's meanwhile */
	FP_NR_REASONS,
};

/* Load-time constants: the controller sets them before load so that the verifier drops the
 * code of every module an interface does not need. */
const volatile __u8 cfg_router_v4 = 0;
const volatile __u8 cfg_router_v6 = 0;
const volatile __u8 cfg_filter_v4 = 0;
const volatile __u8 cfg_filter_v6 = 0;
const volatile __u8 cfg_bridge = 0;
/* The MAC of the interface the program is attached to: frames addressed elsewhere are the
 * kernel's to drop or flood. */
const volatile __u8 cfg_if_mac[WS_ETH_ALEN] = {};
/* Its ifindex (0: read it from the context, as under BPF_PROG_TEST_RUN in the tests). The
 * context's ingress_ifindex is three dependent loads (xdp->rxq->dev->ifindex) per packet. */
const volatile __u32 cfg_ifindex = 0;
/* Filter fields compiled in (FIELD_* in fp_filter.h): the lookups of the others are compiled
 * out. The controller compiles all of them in and switches them at run time (fp_ctl), so
 * that rule edits never need a new program. */
const volatile __u8 cfg_filter_fields = 0xff;
/* fp_tc is the TC stage behind this port's XDP program (loaded from the same object, so the
 * two share every map): it forwards only the frames the XDP program marked for it. */
const volatile __u8 cfg_tc_stage = 0;

#endif
