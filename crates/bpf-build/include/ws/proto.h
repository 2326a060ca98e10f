/* Protocol numbers and header constants for every BPF program of the project, the one place
 * they are written, under a WS_ prefix so they mean the same with "vmlinux.h" (which has no
 * #defines) and with the uapi headers. lb's build.rs reads the WS_AF_ and WS_IPPROTO_ ones
 * for the Rust side. */
#pragma once

#define WS_ETH_ALEN 6
#define WS_ETH_P_IP 0x0800
#define WS_ETH_P_ARP 0x0806
#define WS_ETH_P_IPV6 0x86DD
#define WS_ETH_P_8021Q 0x8100
#define WS_ETH_P_8021AD 0x88A8
#define WS_ETH_P_MRP 0x88E3
#define WS_ETH_P_CFM 0x8902

#define WS_AF_INET 2
#define WS_AF_INET6 10

#define WS_VLAN_HLEN 4
#define WS_VLAN_VID_MASK 0x0fff

#define WS_IP_DF 0x4000
#define WS_IP_MF 0x2000
#define WS_IP_OFFSET 0x1FFF

#define WS_IPPROTO_HOPOPTS 0
#define WS_IPPROTO_ICMP 1
#define WS_IPPROTO_IPIP 4
#define WS_IPPROTO_TCP 6
#define WS_IPPROTO_UDP 17
#define WS_IPPROTO_DCCP 33
#define WS_IPPROTO_IPV6 41
#define WS_IPPROTO_ROUTING 43
#define WS_IPPROTO_FRAGMENT 44 /* IPv6 fragment header */
#define WS_IPPROTO_ESP 50
#define WS_IPPROTO_AH 51
#define WS_IPPROTO_ICMPV6 58
#define WS_IPPROTO_DSTOPTS 60
#define WS_IPPROTO_SCTP 132
#define WS_IPPROTO_UDPLITE 136
