//! A small NETLINK_ROUTE / NETLINK_NETFILTER / NETLINK_XFRM reader: multicast event sockets and dump
//! requests. Parsing is pure (`parse_*`), unit-tested on byte fixtures; only `Socket` does I/O.

use std::collections::BTreeSet;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use crate::error::{Error, Result};
use crate::model::{BridgeAttrs, BridgePort, Event, FdbEntry, FdbKey, Link, RuleKey};
use crate::neigh::{NeighKey, NeighState};
use crate::routes::{NexthopChange, RouteChange, RouteCounts};

pub const NETLINK_ROUTE: i32 = 0;
pub const NETLINK_NETFILTER: i32 = 12;

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
pub const RTM_NEWLINK: u16 = 16;
pub const RTM_DELLINK: u16 = 17;
pub const RTM_GETLINK: u16 = 18;
pub const RTM_NEWADDR: u16 = 20;
pub const RTM_DELADDR: u16 = 21;
pub const RTM_GETADDR: u16 = 22;
pub const RTM_NEWROUTE: u16 = 24;
pub const RTM_DELROUTE: u16 = 25;
pub const RTM_GETROUTE: u16 = 26;
pub const RTM_NEWNEIGH: u16 = 28;
pub const RTM_DELNEIGH: u16 = 29;
pub const RTM_NEWRULE: u16 = 32;
pub const RTM_DELRULE: u16 = 33;
pub const RTM_GETRULE: u16 = 34;
pub const RTM_GETNEIGH: u16 = 30;
pub const RTM_NEWNETCONF: u16 = 80;
pub const RTM_NEWVLAN: u16 = 112;
pub const RTM_DELVLAN: u16 = 113;
pub const RTM_DELNETCONF: u16 = 81;
/// tc: qdiscs, classes, filters (classifiers) and their chains.
pub const RTM_NEWQDISC: u16 = 36;
pub const RTM_DELQDISC: u16 = 37;
pub const RTM_NEWTCLASS: u16 = 40;
pub const RTM_DELTCLASS: u16 = 41;
pub const RTM_NEWTFILTER: u16 = 44;
pub const RTM_DELTFILTER: u16 = 45;
pub const RTM_NEWCHAIN: u16 = 100;
pub const RTM_DELCHAIN: u16 = 101;

const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLM_F_DUMP: u16 = 0x300;

/// rtnetlink multicast groups the watcher joins (RTNLGRP_*).
pub const ROUTE_GROUPS: [u32; 14] = [
    1,  // LINK
    3,  // NEIGH
    4,  // TC
    5,  // IPV4_IFADDR
    7,  // IPV4_ROUTE
    8,  // IPV4_RULE
    9,  // IPV6_IFADDR
    11, // IPV6_ROUTE
    12, // IPV6_IFINFO: an RA's MTU, which sets the device's IPv6 MTU with no other event
    19, // IPV6_RULE
    24, // IPV4_NETCONF
    25, // IPV6_NETCONF
    32, // NEXTHOP
    33, // BRVLAN
];
/// NFNLGRP_NFTABLES: every nftables ruleset change (iptables-nft included).
pub const NFT_GROUP: u32 = 7;

const IFLA_ADDRESS: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_MASTER: u16 = 10;
const IFLA_LINKINFO: u16 = 18;
const IFLA_LINK: u16 = 5;
const IFLA_PROMISCUITY: u16 = 30;
const IFLA_PHYS_SWITCH_ID: u16 = 36;
const IFLA_LINK_NETNSID: u16 = 37;
const IFLA_MACVLAN_MODE: u16 = 1;
const MACVLAN_MODE_PASSTHRU: u32 = 8;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;
const IFLA_PROTINFO: u16 = 12;
const IFLA_AF_SPEC: u16 = 26;
const IFLA_EXT_MASK: u16 = 29;
const IFLA_BR_AGEING_TIME: u16 = 4;
const IFLA_BR_VLAN_FILTERING: u16 = 7;
const IFLA_BR_VLAN_PROTOCOL: u16 = 8;
const IFLA_BR_NF_CALL_IPTABLES: u16 = 36;
const IFLA_BR_NF_CALL_IP6TABLES: u16 = 37;
const IFLA_BR_VLAN_STATS_ENABLED: u16 = 41;
const IFLA_BR_MULTI_BOOLOPT: u16 = 46;
/// BR_BOOLOPT_MST_ENABLE: per-VLAN spanning tree instances.
const BR_BOOLOPT_MST: u32 = 1 << 2;
pub const AF_BRIDGE: u8 = 7;
const IFF_UP: u32 = 1;
const IFF_LOWER_UP: u32 = 1 << 16;
const IFF_LOOPBACK: u32 = 1 << 3;

const FRA_PRIORITY: u16 = 6;
const FRA_TABLE: u16 = 15;
/// Rule selectors that bpf_fib_lookup evaluates as the kernel's input path does, given the
/// packet's protocol and ports: dst, src, iifname, goto, suppress_ifgroup,
/// suppress_prefixlength, oifname (never matches a forwarded packet, in either), ip_proto,
/// sport and dport ranges and their masks (a single port is dumped with mask 0xffff since
/// Linux 6.16). Left out: fwmark and its mask (an skb's mark may be set before routing; XDP
/// has none), realms, tunnel id, uid range, dscp, flow label, and anything newer than this
/// list. l3mdev (19, a VRF's rule) is exact for another reason: see [`FRA_L3MDEV`].
const HELPER_EXACT_SELECTORS: [u16; 13] = [1, 2, 3, 4, 13, 14, 17, 19, 22, 23, 24, 28, 29];
/// The selector of a VRF's rule (`1000: from all lookup [l3mdev-table]`, which the kernel adds
/// to both families with the first VRF device). It matches a flow whose input or output
/// interface has an l3 master device (a VRF) among its masters, master of master included
/// (`l3mdev_update_flow`, which the FIB helper's lookup runs too). The fast path routes only
/// from ports with no master at all (`model::eligible` refuses any master but a bridge, and a
/// bridge port's routed frames go up the bridge to the kernel) and only to such ports (the tx
/// ports), so for every lookup it makes the selector matches neither in the helper nor in
/// the kernel: the rule changes no answer, and counts as a default rule unless inverted.
const FRA_L3MDEV: u16 = 19;
const FIB_RULE_INVERT: u32 = 0x2;
/// FR_ACT_TO_TBL, FR_ACT_GOTO, FR_ACT_NOP, FR_ACT_BLACKHOLE, FR_ACT_UNREACHABLE,
/// FR_ACT_PROHIBIT: the kernel's fib_rules_lookup, which the helper calls too.
const HELPER_EXACT_ACTIONS: [u8; 6] = [1, 2, 3, 6, 7, 8];

mod bridge;
pub use bridge::{
    dump_bridge_ports, dump_fdb, dump_vlan_states, parse_bridge_port, parse_fdb, parse_vlan_states,
};

/// One netlink message: type and payload (after the 16-byte header).
#[derive(Debug)]
pub struct Msg<'a> {
    pub ty: u16,
    pub flags: u16,
    pub payload: &'a [u8],
}

/// Splits a datagram into messages; stops at the first malformed one.
pub fn messages(buf: &[u8]) -> Vec<Msg<'_>> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + 16 <= buf.len() {
        let len = u32::from_ne_bytes(buf[off..off + 4].try_into().unwrap_or([0; 4])) as usize;
        let ty = u16::from_ne_bytes([buf[off + 4], buf[off + 5]]);
        let flags = u16::from_ne_bytes([buf[off + 6], buf[off + 7]]);
        if len < 16 || off + len > buf.len() {
            break;
        }
        out.push(Msg {
            ty,
            flags,
            payload: &buf[off + 16..off + len],
        });
        off += (len + 3) & !3;
    }
    out
}

/// Iterates the rtattrs in `buf`: (type without flag bits, value).
pub fn attrs(buf: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + 4 <= buf.len() {
        let len = u16::from_ne_bytes([buf[off], buf[off + 1]]) as usize;
        let ty = u16::from_ne_bytes([buf[off + 2], buf[off + 3]]) & 0x3fff;
        if len < 4 || off + len > buf.len() {
            break;
        }
        out.push((ty, &buf[off + 4..off + len]));
        off += (len + 3) & !3;
    }
    out
}

pub(crate) fn u32_of(v: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(v.get(..4)?.try_into().ok()?))
}

pub(crate) fn cstr(v: &[u8]) -> String {
    let end = v.iter().position(|b| *b == 0).unwrap_or(v.len());
    String::from_utf8_lossy(&v[..end]).into_owned()
}

/// RTM_NEWLINK / RTM_DELLINK payload -> Link.
pub fn parse_link(payload: &[u8]) -> Option<Link> {
    if payload.len() < 16 {
        return None;
    }
    let index = i32::from_ne_bytes(payload[4..8].try_into().ok()?);
    let flags = u32::from_ne_bytes(payload[8..12].try_into().ok()?);
    let mut link = Link {
        index: u32::try_from(index).ok()?,
        up: flags & IFF_UP != 0 && flags & IFF_LOWER_UP != 0,
        loopback: flags & IFF_LOOPBACK != 0,
        ..Link::default()
    };
    let mut other_netns = false;
    for (ty, v) in attrs(&payload[16..]) {
        match ty {
            IFLA_LINK => link.lower = u32_of(v).filter(|l| *l != 0 && *l != link.index),
            IFLA_LINK_NETNSID => other_netns = true,
            IFLA_PROMISCUITY => link.promisc = u32_of(v).is_some_and(|p| p > 0),
            IFLA_PHYS_SWITCH_ID => link.switchdev = !v.is_empty(),
            IFLA_IFNAME => link.name = cstr(v),
            IFLA_ADDRESS if v.len() == 6 => link.mac = Some(v.try_into().ok()?),
            IFLA_MTU => link.mtu = u32_of(v).unwrap_or(0),
            IFLA_MASTER => link.master = u32_of(v).filter(|m| *m != 0),
            IFLA_LINKINFO => {
                let mut data = None;
                for (ity, iv) in attrs(v) {
                    match ity {
                        IFLA_INFO_KIND => link.kind = cstr(iv),
                        IFLA_INFO_DATA => data = Some(iv),
                        _ => {}
                    }
                }
                let passthru = || {
                    data.map(attrs).unwrap_or_default().iter().any(|(t, m)| {
                        *t == IFLA_MACVLAN_MODE && u32_of(m) == Some(MACVLAN_MODE_PASSTHRU)
                    })
                };
                link.claims_lower = match link.kind.as_str() {
                    "ipvlan" | "ipvtap" | "macsec" => true,
                    "macvlan" | "macvtap" => passthru(),
                    _ => false,
                };
                if let (Some(data), "bridge") = (data, link.kind.as_str()) {
                    let mut b = BridgeAttrs {
                        vlan_protocol: 0x8100,
                        ..BridgeAttrs::default()
                    };
                    for (bty, bv) in attrs(data) {
                        match bty {
                            IFLA_BR_AGEING_TIME => b.ageing_cs = u32_of(bv).unwrap_or(0),
                            IFLA_BR_VLAN_FILTERING => {
                                b.vlan_filtering = bv.first().is_some_and(|x| *x != 0)
                            }
                            IFLA_BR_NF_CALL_IPTABLES => {
                                b.nf_call_v4 = bv.first().is_some_and(|x| *x != 0)
                            }
                            IFLA_BR_NF_CALL_IP6TABLES => {
                                b.nf_call_v6 = bv.first().is_some_and(|x| *x != 0)
                            }
                            IFLA_BR_VLAN_STATS_ENABLED => {
                                b.vlan_stats = bv.first().is_some_and(|x| *x != 0)
                            }
                            IFLA_BR_MULTI_BOOLOPT => {
                                b.mst = u32_of(bv).is_some_and(|v| v & BR_BOOLOPT_MST != 0)
                            }
                            IFLA_BR_VLAN_PROTOCOL if bv.len() >= 2 => {
                                b.vlan_protocol = u16::from_be_bytes([bv[0], bv[1]])
                            }
                            _ => {}
                        }
                    }
                    link.bridge = Some(b);
                }
            }
            _ => {}
        }
    }
    if other_netns {
        // Its lower's index is another namespace's.
        link.lower = None;
    }
    Some(link)
}

/// RTM_NEWRULE payload -> the rule's identity, and whether it is one of the kernel's default
/// rules (local/main/default lookups with no selector).
pub fn parse_rule(payload: &[u8]) -> Option<RuleKey> {
    if payload.len() < 12 {
        return None;
    }
    let family = payload[0];
    let (dst_len, src_len, tos, table8, action) =
        (payload[1], payload[2], payload[3], payload[4], payload[7]);
    let mut priority = 0u32;
    let mut table = table8 as u32;
    let mut selectors = Vec::new();
    for (ty, v) in attrs(&payload[12..]) {
        match ty {
            FRA_PRIORITY => priority = u32_of(v).unwrap_or(0),
            FRA_TABLE => table = u32_of(v).unwrap_or(table),
            // protocol (21) says who added it; suppress_* (13, 14) at their "off" values
            21 => {}
            13 | 14 if u32_of(v) == Some(u32::MAX) => {}
            _ => selectors.push((ty, v.to_vec())),
        }
    }
    let plain = dst_len == 0 && src_len == 0 && tos == 0 && action == 1 && selectors.is_empty();
    let inverted = u32_of(&payload[8..12]).unwrap_or(0) & FIB_RULE_INVERT != 0;
    let vrf_only = selectors
        .iter()
        .any(|(ty, v)| *ty == FRA_L3MDEV && v.first().is_some_and(|&b| b != 0))
        && !inverted;
    let default = plain && matches!((priority, table), (0, 255) | (32766, 254))
        || (plain && family == 2 && (priority, table) == (32767, 253))
        || vrf_only;
    // (A TOS selector is left out: the helper has masked the TOS byte differently from the
    // input path in some kernels.)
    let helper_exact = tos == 0
        && HELPER_EXACT_ACTIONS.contains(&action)
        && selectors
            .iter()
            .all(|(ty, _)| HELPER_EXACT_SELECTORS.contains(ty));
    // ip_proto, sport/dport ranges and masks: the kernel then dissects each packet's ports.
    let looks_at_ports = selectors
        .iter()
        .any(|(ty, _)| matches!(ty, 22 | 23 | 24 | 28 | 29));
    Some(RuleKey {
        family,
        priority,
        table,
        default,
        helper_exact,
        looks_at_ports,
        detail: format!("{dst_len}/{src_len}/{tos}/{action}/{selectors:?}"),
    })
}

const RTM_NEWNEXTHOP: u16 = 104;
const RTM_DELNEXTHOP: u16 = 105;
const RTM_GETNEXTHOP: u16 = 106;
const RTA_METRICS: u16 = 8;
const RTAX_LOCK: u16 = 1;
const RTAX_MTU: u16 = 2;
const RTA_MULTIPATH: u16 = 9;
const RTA_FLOW: u16 = 11;
const RTN_LOCAL: u8 = 2;
const RTPROT_KERNEL: u8 = 2;
const RTA_NH_ID: u16 = 30;
const NHA_ID: u16 = 1;
const NHA_GROUP: u16 = 2;
const NLM_F_REPLACE: u16 = 0x100;

/// An RTM_NEWROUTE/DELROUTE payload (rtmsg and attributes) and its header's flags -> what it
/// says about its route.
pub fn parse_route(payload: &[u8], delete: bool, flags: u16) -> Option<RouteChange> {
    if payload.len() < 12 {
        return None;
    }
    let mut c = RouteChange {
        family: payload[0],
        delete,
        replace: flags & NLM_F_REPLACE != 0,
        source_specific: payload[2] != 0, // rtm_src_len
        multipath: false,
        nhid: None,
        mtu: None,
        realm: false,
        // rtm_type RTN_LOCAL, rtm_protocol not RTPROT_KERNEL (the kernel's own for addresses)
        custom_local: payload[0] == 2 && payload[7] == RTN_LOCAL && payload[5] != RTPROT_KERNEL,
    };
    for (ty, v) in attrs(&payload[12..]) {
        match ty {
            RTA_MULTIPATH => {
                c.multipath = true;
                c.realm |= next_hops_have_realms(v);
            }
            RTA_FLOW => c.realm |= u32_of(v).is_some_and(|f| f != 0),
            RTA_METRICS => c.mtu = unlocked_mtu(v),
            // An id that does not parse counts as a group.
            RTA_NH_ID => c.nhid = Some(u32_of(v).unwrap_or(u32::MAX)),
            _ => {}
        }
    }
    Some(c)
}

/// Whether a next hop of RTA_MULTIPATH (struct rtnexthop, 8 bytes, then its attributes)
/// carries a realm.
fn next_hops_have_realms(mut v: &[u8]) -> bool {
    while v.len() >= 8 {
        let len = (u16::from_ne_bytes([v[0], v[1]]) as usize).min(v.len());
        if len < 8 {
            return false;
        }
        if attrs(&v[8..len])
            .iter()
            .any(|(ty, f)| *ty == RTA_FLOW && u32_of(f).is_some_and(|f| f != 0))
        {
            return true;
        }
        v = v.get((len + 3) & !3..).unwrap_or_default();
    }
    false
}

/// A route's own MTU from its RTA_METRICS (nested RTAX_* attributes), unless RTAX_LOCK
/// locks it.
fn unlocked_mtu(metrics: &[u8]) -> Option<u32> {
    let m = attrs(metrics);
    let get = |ty: u16| {
        m.iter()
            .find(|(t, _)| *t == ty)
            .and_then(|(_, v)| u32_of(v))
    };
    let locked = get(RTAX_LOCK).unwrap_or(0) & (1 << RTAX_MTU) != 0;
    get(RTAX_MTU).filter(|&mtu| mtu != 0 && !locked)
}

/// An RTM_NEWNEXTHOP/DELNEXTHOP payload (nhmsg and attributes) -> the object's id and
/// whether it is a group.
pub fn parse_nexthop(payload: &[u8], delete: bool) -> NexthopChange {
    let a = payload.get(8..).map(attrs).unwrap_or_default();
    NexthopChange {
        delete,
        id: a
            .iter()
            .find(|(ty, _)| *ty == NHA_ID)
            .and_then(|(_, v)| u32_of(v)),
        group: a.iter().any(|(ty, _)| *ty == NHA_GROUP),
    }
}

/// The ids of every nexthop object that is a group (all families).
pub fn dump_nexthop_groups(s: &mut Socket) -> Result<BTreeSet<u32>> {
    let nhmsg = [0u8; 8]; // AF_UNSPEC: every family
    Ok(s.dump(RTM_GETNEXTHOP, &nhmsg)?
        .iter()
        .filter(|(t, _)| *t == RTM_NEWNEXTHOP)
        .map(|(_, p)| parse_nexthop(p, false))
        .filter_map(|c| c.id.filter(|_| c.group))
        .collect())
}

/// Dumps every route of `family` (AF_INET or AF_INET6, all tables) and counts the
/// uncacheable and the hashed ones ([`RouteChange`], `groups` as there).
pub fn count_routes(
    s: &mut Socket,
    family: u8,
    groups: Option<&BTreeSet<u32>>,
) -> Result<RouteCounts> {
    let mut hdr = [0u8; 12]; // rtmsg
    hdr[0] = family;
    let mut c = RouteCounts::default();
    for (_, p) in s
        .dump(RTM_GETROUTE, &hdr)?
        .iter()
        .filter(|(t, _)| *t == RTM_NEWROUTE)
    {
        if let Some(r) = parse_route(p, false, 0) {
            c.add(&r, groups);
        }
    }
    Ok(c)
}

/// The neighbour states (`include/net/neighbour.h` NUD_*).
const NUD_STALE: u16 = 0x04;
const NDA_DST: u16 = 1;
/// A proxy entry (`ip neigh add proxy`): an address answered for, not a next hop.
const NTF_PROXY: u8 = 0x08;

/// Parses an IPv4 or IPv6 neighbour message (ndmsg and its attributes); None for any other
/// family, a proxy entry or a message cut short.
pub fn parse_neigh(payload: &[u8], delete: bool) -> Option<NeighState> {
    // struct ndmsg { u8 family, pad1; u16 pad2; s32 ifindex; u16 state; u8 flags, type; }
    let hdr = payload.get(..12)?;
    let family = hdr[0];
    let len = match family {
        2 => 4,   // AF_INET
        10 => 16, // AF_INET6
        _ => return None,
    };
    if hdr[10] & NTF_PROXY != 0 {
        return None;
    }
    let ifindex = u32::from_ne_bytes(hdr[4..8].try_into().ok()?);
    let state = u16::from_ne_bytes(hdr[8..10].try_into().ok()?);
    let dst = attrs(&payload[12..])
        .into_iter()
        .find(|(ty, v)| *ty == NDA_DST && v.len() == len)?
        .1;
    let mut addr = [0u8; 16];
    addr[..len].copy_from_slice(dst);
    Some(NeighState {
        key: NeighKey {
            ifindex,
            family,
            addr,
        },
        stale: !delete && state & NUD_STALE != 0,
    })
}

/// Every IPv4 and IPv6 neighbour that is STALE now.
pub fn dump_stale_neighbours(s: &mut Socket) -> Result<std::collections::BTreeSet<NeighKey>> {
    let mut out = std::collections::BTreeSet::new();
    for family in [2u8, 10]
    /* AF_INET, AF_INET6 */
    {
        let mut req = [0u8; 12]; // ndmsg
        req[0] = family;
        for (ty, payload) in s.dump(RTM_GETNEIGH, &req)? {
            if ty != RTM_NEWNEIGH {
                continue;
            }
            if let Some(n) = parse_neigh(&payload, false).filter(|n| n.stale) {
                out.insert(n.key);
            }
        }
    }
    Ok(out)
}

/// Classifies one event message; dumps of links and rules go through the same parsers.
pub fn parse_event(msg: &Msg<'_>) -> Option<Event> {
    match msg.ty {
        // The bridge reports its ports' STP state and VLANs as AF_BRIDGE link messages.
        RTM_NEWLINK | RTM_DELLINK if msg.payload.first() == Some(&AF_BRIDGE) => Some(Event::Bridge),
        // IPv6's per-device state (RTNLGRP_IPV6_IFINFO: RA flags, an RA's MTU): read as
        // netconf, which rereads the switches and drops every cached answer.
        RTM_NEWLINK if msg.payload.first() == Some(&10) => Some(Event::Netconf),
        RTM_NEWVLAN | RTM_DELVLAN => Some(Event::Bridge),
        RTM_NEWLINK => parse_link(msg.payload).map(Event::LinkNew),
        RTM_DELLINK => parse_link(msg.payload).map(|l| Event::LinkDel(l.index)),
        RTM_NEWNEIGH | RTM_DELNEIGH if msg.payload.first() == Some(&AF_BRIDGE) => {
            parse_fdb(msg.payload).map(|entry| Event::Fdb {
                add: msg.ty == RTM_NEWNEIGH,
                entry,
            })
        }
        RTM_NEWRULE | RTM_DELRULE => {
            let family = *msg.payload.first()?;
            Some(Event::Rules { family })
        }
        RTM_NEWNETCONF | RTM_DELNETCONF => Some(Event::Netconf),
        // Classified against the nexthop groups the model keeps (routes::RouteLedger).
        RTM_NEWROUTE | RTM_DELROUTE => {
            parse_route(msg.payload, msg.ty == RTM_DELROUTE, msg.flags).map(Event::Route)
        }
        RTM_NEWNEXTHOP | RTM_DELNEXTHOP => Some(Event::Nexthop(parse_nexthop(
            msg.payload,
            msg.ty == RTM_DELNEXTHOP,
        ))),
        RTM_NEWADDR | RTM_DELADDR => Some(Event::Addr),
        RTM_NEWQDISC | RTM_DELQDISC | RTM_NEWTCLASS | RTM_DELTCLASS | RTM_NEWTFILTER
        | RTM_DELTFILTER | RTM_NEWCHAIN | RTM_DELCHAIN => Some(Event::Tc),
        RTM_NEWNEIGH | RTM_DELNEIGH => Some(Event::Neigh(parse_neigh(
            msg.payload,
            msg.ty == RTM_DELNEIGH,
        ))),
        _ => None,
    }
}

/// A netlink socket.
pub struct Socket {
    sock: socket2::Socket,
    seq: u32,
}

impl Socket {
    pub fn open(protocol: i32) -> Result<Socket> {
        let io_err = |what: &str| {
            let what = what.to_string();
            move |err| Error::Io { what, err }
        };
        let sock = socket2::Socket::new(
            socket2::Domain::from(libc::AF_NETLINK),
            socket2::Type::RAW.nonblocking().cloexec(),
            Some(socket2::Protocol::from(protocol)),
        )
        .map_err(io_err("netlink socket"))?;
        // Bound (port id assigned by the kernel): multicast events skip an unbound socket,
        // whose port id 0 is the kernel's own.
        wirespeed_sys::socket::bind_netlink(&sock).map_err(io_err("bind netlink"))?;
        // Bursts of events (50 routes at once) must not overflow the queue; failure only
        // means a smaller buffer.
        let _ = wirespeed_sys::socket::set_int_option(
            &sock,
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            4 << 20,
        );
        Ok(Socket { sock, seq: 1 })
    }

    pub fn join(&self, group: u32) -> Result<()> {
        wirespeed_sys::socket::set_int_option(
            &self.sock,
            libc::SOL_NETLINK,
            libc::NETLINK_ADD_MEMBERSHIP,
            group as libc::c_int,
        )
        .map_err(|err| Error::Io {
            what: format!("join netlink group {group}"),
            err,
        })
    }

    pub fn raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// Reads one datagram without blocking; Ok(None) when nothing is queued. An overrun
    /// (ENOBUFS) is reported as Ok(Some(empty)) so the caller resyncs.
    pub fn recv(&self, buf: &mut [u8]) -> Result<Option<usize>> {
        use std::io::Read;
        match (&self.sock).read(buf) {
            Ok(n) => Ok(Some(n)),
            Err(e) => match e.raw_os_error() {
                Some(libc::EAGAIN) => Ok(None),
                Some(libc::ENOBUFS) => Ok(Some(0)),
                Some(libc::EINTR) => Ok(None),
                _ => Err(Error::Io {
                    what: "netlink recv".into(),
                    err: e,
                }),
            },
        }
    }

    /// Sends a dump request (`ty` with the family header `hdr`) and returns each reply
    /// message's (type, payload) until NLMSG_DONE.
    pub fn dump(&mut self, ty: u16, hdr: &[u8]) -> Result<Vec<(u16, Vec<u8>)>> {
        self.exchange(ty, NLM_F_REQUEST | NLM_F_DUMP, hdr)
    }

    /// Sends one request that is not a dump (a get), asking for an acknowledgement, and
    /// returns its reply messages.
    pub fn get(&mut self, ty: u16, hdr: &[u8]) -> Result<Vec<(u16, Vec<u8>)>> {
        self.exchange(ty, NLM_F_REQUEST | NLM_F_ACK, hdr)
    }

    /// One request and its replies, up to NLMSG_DONE or the acknowledgement.
    fn exchange(&mut self, ty: u16, flags: u16, hdr: &[u8]) -> Result<Vec<(u16, Vec<u8>)>> {
        self.seq = self.seq.wrapping_add(1);
        let len = 16 + hdr.len();
        let mut req = Vec::with_capacity(len);
        req.extend_from_slice(&(len as u32).to_ne_bytes());
        req.extend_from_slice(&ty.to_ne_bytes());
        req.extend_from_slice(&flags.to_ne_bytes());
        req.extend_from_slice(&self.seq.to_ne_bytes());
        req.extend_from_slice(&0u32.to_ne_bytes());
        req.extend_from_slice(hdr);
        self.sock.send(&req).map_err(|err| Error::Io {
            what: "netlink send".into(),
            err,
        })?;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let n = match self.recv(&mut buf)? {
                Some(n) => n,
                None => {
                    if std::time::Instant::now() > deadline {
                        return Err(Error::Netlink("dump timed out".into()));
                    }
                    wirespeed_sys::bpf::poll_readable(
                        &[Some(self.as_fd())],
                        std::time::Duration::from_millis(100),
                    );
                    continue;
                }
            };
            for m in messages(&buf[..n]) {
                match m.ty {
                    NLMSG_DONE => return Ok(out),
                    NLMSG_ERROR => {
                        let errno = m
                            .payload
                            .get(..4)
                            .map(|b| i32::from_ne_bytes(b.try_into().unwrap_or([0; 4])));
                        if errno != Some(0) {
                            return Err(Error::Netlink(format!(
                                "request {ty} failed: errno {errno:?}"
                            )));
                        }
                        return Ok(out);
                    }
                    _ => out.push((m.ty, m.payload.to_vec())),
                }
            }
        }
    }
}

/// Dumps all links.
pub fn dump_links(s: &mut Socket) -> Result<Vec<Link>> {
    let hdr = [0u8; 16]; // ifinfomsg, AF_UNSPEC
    Ok(s.dump(RTM_GETLINK, &hdr)?
        .iter()
        .filter(|(t, _)| *t == RTM_NEWLINK)
        .filter_map(|(_, p)| parse_link(p))
        .collect())
}

const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;

/// The local address of an IPv4 address message (ifaddrmsg): IFA_LOCAL, else IFA_ADDRESS (the
/// same on a broadcast link; IFA_ADDRESS is the peer's on a point-to-point one).
pub fn parse_addr_v4(payload: &[u8]) -> Option<[u8; 4]> {
    if payload.len() < 8 || payload[0] != 2 {
        return None; // not AF_INET
    }
    let attrs = attrs(&payload[8..]);
    let get = |ty: u16| {
        attrs
            .iter()
            .find(|(t, _)| *t == ty)
            .and_then(|(_, v)| v.get(..4)?.try_into().ok())
    };
    get(IFA_LOCAL).or_else(|| get(IFA_ADDRESS))
}

/// Dumps this namespace's IPv4 addresses.
pub fn dump_addrs_v4(s: &mut Socket) -> Result<std::collections::BTreeSet<[u8; 4]>> {
    let mut hdr = [0u8; 8]; // ifaddrmsg
    hdr[0] = 2; // AF_INET
    Ok(s.dump(RTM_GETADDR, &hdr)?
        .iter()
        .filter(|(t, _)| *t == RTM_NEWADDR)
        .filter_map(|(_, p)| parse_addr_v4(p))
        .collect())
}

/// Dumps the policy rules of one family.
pub fn dump_rules(s: &mut Socket, family: u8) -> Result<Vec<RuleKey>> {
    let mut hdr = [0u8; 12]; // fib_rule_hdr
    hdr[0] = family;
    Ok(s.dump(RTM_GETRULE, &hdr)?
        .iter()
        .filter(|(t, _)| *t == RTM_NEWRULE)
        .filter_map(|(_, p)| parse_rule(p))
        .collect())
}

/// One netlink attribute, padded: for building test input here and in nftevent.
#[cfg(test)]
pub(crate) fn attr(ty: u16, v: &[u8]) -> Vec<u8> {
    let mut a = Vec::new();
    a.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
    a.extend_from_slice(&ty.to_ne_bytes());
    a.extend_from_slice(v);
    while a.len() % 4 != 0 {
        a.push(0);
    }
    a
}

#[cfg(test)]
#[path = "tests/netlink.rs"]
mod tests;
