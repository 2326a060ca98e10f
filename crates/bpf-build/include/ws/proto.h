/* Protocol numbers and header constants for BPF programs, under a WS_ prefix so they mean
 * the same with "vmlinux.h" (which has no #defines) and with the uapi headers. */
#pragma once

#define WS_ETH_ALEN 6
#define WS_ETH_P_IP 0x0800
#define WS_ETH_P_ARP 0x0806
#define WS_ETH_P_IPV6 0x86DD
#define WS_ETH_P_8021Q 0x8100
#define WS_ETH_P_8021AD 0x88A8

#define WS_VLAN_HLEN 4
#define WS_VLAN_VID_MASK 0x0fff

#define WS_IP_MF 0x2000
#define WS_IP_OFFSET 0x1FFF

#define WS_IPPROTO_ICMP 1
#define WS_IPPROTO_TCP 6
#define WS_IPPROTO_UDP 17
#define WS_IPPROTO_ICMPV6 58
#define WS_IPPROTO_SCTP 132
