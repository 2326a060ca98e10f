/* Load-time configuration of the bifurcation program.
 *
 * These live in .rodata: the loader writes them before load, so the verifier sees constants
 * and prunes the branches of features that are off (nothing is looked up at run time for
 * them). */
#pragma once

#include <linux/types.h>

/* The IPv4 address the bypass stack serves, in network byte order. 0 disables IPv4 steering
 * (ARP and IPv4 all pass); with no IPv6 address either, everything passes. */
const volatile __u32 served_ipv4 = 0;

/* The IPv6 address the bypass stack serves, as four words in network byte order, and whether
 * there is one (0 disables IPv6 steering: every IPv6 frame passes). Never multicast or
 * unspecified (the loader refuses those). */
const volatile __u32 served_ipv6[4] = {};
const volatile __u8 serve_ipv6 = 0;

/* The stack's link-local address beside served_ipv6 (fe80::/64 and the EUI-64 of its MAC,
 * which every Linux interface has), steered as served_ipv6 is, and whether there is one (only
 * with serve_ipv6). */
const volatile __u32 served_ipv6_ll[4] = {};
const volatile __u8 serve_ipv6_ll = 0;

/* Feature switches (0 or 1). The same switches govern both families. */
const volatile __u8 steer_tcp = 1;   /* TCP to a served address:port where port is in served_ports */
const volatile __u8 steer_udp = 1;   /* UDP likewise */
/* ARP and NDP for the served addresses: ARP whose target protocol address is served_ipv4;
 * Neighbour Solicitations and Advertisements to served_ipv6; a Solicitation whose target is
 * served_ipv6 sent to its solicited-node group; an Advertisement whose target is served_ipv6
 * sent to all nodes (ff02::1: a duplicate address). */
const volatile __u8 steer_arp = 1;
/* ICMP to served_ipv4; ICMPv6 echo request and reply and ICMPv6 errors to served_ipv6 (the
 * stack answers echo requests). */
const volatile __u8 steer_icmp = 0;
/* The served addresses are the stack's alone (the kernel owns no such address): every
 * unfragmented IPv4 or IPv6 frame to one of them is the stack's, unserved ports and other
 * protocols included, and every ARP for served_ipv4 (IEEE 802 hardware type included), so
 * that the stack answers them as a host does (an RST, ICMP unreachable). */
const volatile __u8 steer_all = 0;
/* Fragments to a served address are the stack's too (it reassembles them): only with one
 * queue, since RSS may hash a datagram's fragments to another queue than its flow's segments. */
const volatile __u8 steer_fragments = 0;
