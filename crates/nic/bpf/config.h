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
