/* Load-time configuration of the bifurcation program.
 *
 * These live in .rodata: the loader writes them before load, so the verifier sees constants
 * and prunes the branches of features that are off (nothing is looked up at run time for
 * them). */
#pragma once

#include <linux/types.h>

/* The IPv4 address the bypass stack serves, in network byte order. 0 disables IPv4 steering
 * entirely (everything passes). */
const volatile __u32 served_ipv4 = 0;

/* Feature switches (0 or 1). */
const volatile __u8 steer_tcp = 1;   /* TCP to served_ipv4:port where port is in served_ports */
const volatile __u8 steer_udp = 1;   /* UDP likewise */
const volatile __u8 steer_arp = 1;   /* ARP whose target protocol address is served_ipv4 */
const volatile __u8 steer_icmp = 0;  /* ICMP to served_ipv4 (echo is answered by the stack) */
/* served_ipv4 is the stack's alone (the kernel owns no such address): every unfragmented
 * IPv4 frame to it is the stack's, unserved ports and other protocols included, and every ARP
 * for it, so that the stack answers them as a host does (an RST, ICMP unreachable). */
const volatile __u8 steer_all = 0;
/* Fragments to served_ipv4 are the stack's too (it reassembles them): only with one queue,
 * since RSS may hash a datagram's fragments to another queue than its flow's segments. */
const volatile __u8 steer_fragments = 0;
