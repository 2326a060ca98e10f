/* Constants of the load balancer's data path, its reasons, and the load-time constants. */
#ifndef LB_CONSTS_H
#define LB_CONSTS_H

#include "ws/proto.h"

/* lb_pkt.frag: a fragment's place in its datagram. */
#define LB_FRAG_FIRST 1 /* offset 0, more following: it carries the transport header */
#define LB_FRAG_LATER 2 /* offset > 0: no transport header */
/* Datagrams whose first fragment the frags map remembers (at least; the loader gives it 1,024
 * per CPU), and for how long (Linux's ipfrag_time, the reassembly timeout). */
#define LB_MAX_FRAGS 8192
#define LB_FRAG_TIMEOUT_NS (30ULL * 1000000000ULL)

#define LB_TCP_FIN 0x01
#define LB_TCP_SYN 0x02
#define LB_TCP_RST 0x04
#define LB_TCP_ACK 0x10

#define LB_NS 1000000000ULL

/* Forwarding methods, as model.rs's Mode (the loader maps one onto the other). */
#define LB_MODE_DR 0
#define LB_MODE_TUNNEL 1
#define LB_MODE_NAT 2
#define LB_MODE_FNAT 3

/* lb_real.tun_flags */
#define LB_TUN_CSUM 0x01 /* GUE: fill the outer UDP checksum (an IPv6 real always has it) */
#define LB_GUE_OVERHEAD 8 /* the UDP header GUE adds to the IP-in-IP overhead */

/* Schedulers: mh indexes the Maglev table by hash; rr and wrr walk a sequence per CPU. */
#define LB_SCHED_MH 0
#define LB_SCHED_RR 1

/* lb_vip.flags */
#define LB_VIP_TOA 0x01  /* full-NAT: carry the client address as TOA */
#define LB_VIP_ECHO 0x02 /* an address-only entry: answer ICMP echo for this VIP */

/* lb_conn.flags */
#define LB_CONN_TOA_ACKED 0x01 /* the first non-SYN segment carried TOA */

/* lb_rev.flags */
#define LB_REV_FNAT 0x01   /* full-NAT: the reply's destination is translated back too */
#define LB_REV_CLOSED 0x02 /* FIN or RST seen: the local port may be reused after a grace */
#define LB_REV_FWD 0x04    /* a forward entry: client flow -> real, local address and port */
#define LB_REV_ACKED 0x08  /* a forward entry promoted from `half_open`: the client proved
                            * the handshake (docs/LB.md, "Half-open connections") */
#define LB_REV_ANSWERED 0x10 /* a half-open reply entry whose real sent its SYN-ACK
                              * (real_isn holds its sequence number), or a UDP reply
                              * entry whose real answered LB_UDP_ASSURED_NS or more after
                              * the flow opened */

/* lb_flow.pad[0] of a forward entry's key: keeps client flows apart from reply flows. */
#define LB_FLOW_FWD 1

/* A UDP flow whose real answers this long after it opened has lasted, and keeps its full-NAT
 * port under a flood; one answered sooner is a single exchange, or a flood the real answers
 * (conntrack's ASSURED, nf_conntrack_proto_udp.c). */
#define LB_UDP_ASSURED_NS (2 * LB_NS)

/* Full-NAT local addresses per service (laddrs map: service id * LB_MAX_LADDRS + i). */
#define LB_MAX_LADDRS 16
/* Local ports a new connection probes before it is dropped (the client retries). */
#define LB_PORT_PROBES 8
#define LB_PORT_LO 1024
#define LB_PORT_RANGE (65536 - LB_PORT_LO)
/* Interfaces whose own MAC the program knows (if_macs). */
#define LB_MAX_IFACES 256
/* The longest TCP/UDP segment whose partial checksum the program completes. */
#define LB_CSUM_MAX 1480

/* Why a packet was forwarded, answered, handed to the kernel or dropped, and events worth a
 * count on top of that (a TOA, the rate guard). build.rs generates the Rust side (Reason) from
 * this list: one LB_ name per line, values implicit. */
enum lb_reason {
	LB_FWD_DR = 0,        /* DR: MAC rewritten to the real's */
	LB_FWD_TUNNEL,        /* encapsulated to the real (IPIP, IP6IP6, 6in4, 4in6, GUE) */
	LB_FWD_NAT,           /* NAT: destination translated to the real */
	LB_FWD_FNAT,          /* full-NAT: destination and source translated */
	LB_FWD_REPLY,         /* a real's reply translated back to the client */
	LB_ICMP_ECHO,         /* echo request to a VIP answered */
	LB_ICMP_TOO_BIG_FWD,  /* frag-needed / packet-too-big for a VIP flow sent to its real */
	LB_ICMP_TOO_BIG_SENT, /* too big to encapsulate: frag-needed / too-big sent to the client */
	LB_RATE_LIMITED,      /* event: a new connection over the rate guard, not remembered */
	LB_TOA_ADDED,         /* event: TOA option inserted */
	LB_TOA_NO_ROOM,       /* event: TOA wanted but no option space or MTU: sent without */
	LB_CSUM_COMPLETED,    /* event: a partial L4 checksum (local sender) completed */
	LB_HALF_OPEN_RECLAIMED, /* event: a full-NAT SYN took the oldest probed half-open port */
	LB_HALF_OPEN_UNPROVEN, /* event: a client segment not proving its handshake (forwarded) */
	LB_PASS_NOT_IP,       /* neither IPv4 nor IPv6, or a family no VIP uses */
	LB_PASS_VLAN,         /* tagged frame */
	LB_PASS_BAD_HEADER,   /* truncated or inconsistent headers: the kernel decides */
	LB_PASS_IP_OPTIONS,   /* IPv6 extension headers, or ICMP with IPv4 options */
	LB_PASS_FRAGMENT,     /* fragment not to a VIP, IPv4 not TCP/UDP, or a first too short */
	LB_PASS_NOT_VIP,      /* not for a VIP and not a reply the reverse table knows */
	LB_PASS_ICMP,         /* ICMP the data path does not answer (to the kernel) */
	LB_PASS_ICMP_NAT,     /* too-big quoting a NAT/full-NAT flow no table knows (never scheduled) */
	LB_PASS_NO_CONN,      /* NAT/full-NAT TCP segment of a connection the real never saw open */
	LB_PASS_NO_REAL,      /* the lookup names a free real slot (a plan being applied) */
	LB_PASS_NO_LADDR,     /* full-NAT service without a local address of the real's family */
	LB_PASS_MODE_OFF,     /* the real's mode or family is not compiled into this program */
	LB_PASS_NO_NEIGH,     /* next hop not resolved: the kernel resolves it */
	LB_PASS_TOO_BIG,      /* larger than the egress MTU and not answered with ICMP */
	LB_PASS_NO_SRC,       /* tunnel: no source address for the outer header */
	LB_PASS_FIB_OTHER,    /* any other FIB answer (no route, blackhole, forwarding off) */
	LB_PASS_MAP,          /* a map the program needs has no entry (should not happen) */
	LB_PASS_CSUM_PARTIAL, /* a partial L4 checksum too long to complete here */
	LB_DROP_NO_REAL,      /* a new connection to a service where no real has weight */
	LB_DROP_NO_PORT,      /* full-NAT SYN or UDP flow: every probed local port busy */
	LB_ICMP_TOO_BIG_NAT,  /* too-big for a NAT flow translated and sent to its real */
	LB_ICMP_TOO_BIG_FNAT, /* too-big for a full-NAT flow translated and sent to its real */
	LB_ICMP_TOO_BIG_REPLY, /* too-big from the real's side translated and sent to the client */
	LB_PASS_GUE_NO_CSUM,  /* GUE to an IPv6 real of an IPv4 UDP datagram without checksum */
	LB_PASS_BAD_CSUM,     /* IPv4 header checksum wrong: the kernel drops it (ip_rcv_core) */
	LB_PASS_NOT_OUR_MAC,  /* to another host's MAC: the kernel drops it (PACKET_OTHERHOST) */
	LB_PASS_MAC_MULTICAST, /* to a broadcast or multicast MAC: the kernel's, never forwarded */
	LB_DROP_MARTIAN,      /* a source or destination the kernel's routing always drops */
	LB_PASS_MARTIAN,      /* loopback (route_localnet decides), multicast/broadcast dst: kernel's */
	LB_ICMP_TIME_EXCEEDED, /* TTL/hop limit <= 1 to a VIP or a local address: answered, not sent on */
	LB_PASS_TTL,          /* TTL/hop limit <= 1 of a NAT reply or an ICMP error: the kernel's */
	LB_FRAG_NOTED,        /* event: a VIP's first fragment remembered for the rest (frags) */
	LB_FRAG_FOLLOWED,     /* event: a later fragment sent on where its first fragment went */
	LB_DROP_FRAG_UNPLACED, /* a later fragment to a VIP whose first fragment was not seen */
	LB_PASS_FRAG_GUE_CSUM, /* a fragment to a GUE real with an outer UDP checksum */
	LB_PASS_IP6_FRAGMENT, /* an IPv6 fragment not served: not TCP/UDP, or atomic */
	LB_DROP_UDP_PORT_LOST, /* full-NAT UDP flow lost its port: forgotten, next one gets a new */
	LB_UDP_UNASSURED_RECLAIMED, /* event: a full-NAT UDP flow took the port of one not lasting */
	LB_NR_REASONS,
};

/* Load-time constants: the loader writes them before the verifier sees the program. */
const volatile __u32 cfg_ring_size = 65537;
const volatile __u32 cfg_max_services = 1;
const volatile __u32 cfg_max_reals = 1;
const volatile __u32 cfg_nr_cpus = 1;
/* New connection-table entries per CPU per second; 0: no guard. */
const volatile __u32 cfg_new_conns_per_sec = 0;
/* Modes compiled in: bit (1 << LB_MODE_*). */
const volatile __u8 cfg_modes = 0xf;
const volatile __u8 cfg_v4 = 1;
const volatile __u8 cfg_v6 = 1;
/* Send frames back out of their ingress port by bpf_redirect rather than XDP_TX: a veth
 * transmits XDP_TX frames to its peer but wakes the peer only when the peer runs an XDP
 * program, so a lone reply (an echo answer) would wait for the next packet. */
const volatile __u8 cfg_tx_redirect = 0;
/* Tunnel outer source prefixes; length 0: the FIB's source address for the real. */
const volatile __u8 cfg_tun_src_v4[4] = {};
const volatile __u8 cfg_tun_src_v4_len = 0;
const volatile __u8 cfg_tun_src_v6[16] = {};
const volatile __u8 cfg_tun_src_v6_len = 0;
/* Full-NAT local-port reuse: a closed connection's port after this grace, an idle one's
 * after the idle time (seconds). */
const volatile __u32 cfg_closed_grace_s = 2;
const volatile __u32 cfg_idle_tcp_s = 900;
const volatile __u32 cfg_idle_udp_s = 300;
/* A half-open connection's entries may be reused after this (seconds; IPVS's SYN_RECV time). */
const volatile __u32 cfg_half_open_s = 60;

#define LB_HAS_MODE(m) (cfg_modes & (1 << (m)))
#define LB_HAS_NAT (LB_HAS_MODE(LB_MODE_NAT) || LB_HAS_MODE(LB_MODE_FNAT))

#endif
