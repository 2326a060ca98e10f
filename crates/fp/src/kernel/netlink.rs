//! The fast path's reading of rtnetlink: events and dumps into the model's types, over the
//! framing and socket of `wirespeed_netlink`. Parsing is pure (`parse_*`), unit-tested on byte
//! fixtures.

use std::collections::BTreeSet;

use crate::error::Result;
use crate::kernel::family::{AF_INET, AF_INET6};
use crate::kernel::neigh::{NeighKey, NeighState};
use crate::kernel::routes::{NexthopChange, RouteChange, RouteCounts};
use crate::model::{BridgePort, Event, FdbEntry, FdbKey, Link, RuleKey};

#[cfg(test)]
pub(crate) use wirespeed_netlink::attr;
pub use wirespeed_netlink::route::{
    AF_BRIDGE, RTM_DELADDR, RTM_DELCHAIN, RTM_DELLINK, RTM_DELNEIGH, RTM_DELNETCONF,
    RTM_DELNEXTHOP, RTM_DELQDISC, RTM_DELROUTE, RTM_DELRULE, RTM_DELTCLASS, RTM_DELTFILTER,
    RTM_DELVLAN, RTM_GETADDR, RTM_GETLINK, RTM_GETNEIGH, RTM_GETNEXTHOP, RTM_GETROUTE, RTM_GETRULE,
    RTM_NEWADDR, RTM_NEWCHAIN, RTM_NEWLINK, RTM_NEWNEIGH, RTM_NEWNETCONF, RTM_NEWNEXTHOP,
    RTM_NEWQDISC, RTM_NEWROUTE, RTM_NEWRULE, RTM_NEWTCLASS, RTM_NEWTFILTER, RTM_NEWVLAN,
};
#[cfg(test)]
use wirespeed_netlink::route::{
    IFF_LOWER_UP, IFF_UP, IFLA_ADDRESS, IFLA_IFNAME, IFLA_INFO_KIND, IFLA_LINKINFO,
};
use wirespeed_netlink::route::{IFLA_AF_SPEC, IFLA_EXT_MASK, IFLA_MASTER, IFLA_MTU, IFLA_PROTINFO};
pub(crate) use wirespeed_netlink::u32_of;
use wirespeed_netlink::NLM_F_REPLACE;
pub use wirespeed_netlink::{attrs, messages, Msg, Socket, NETLINK_NETFILTER, NETLINK_ROUTE};

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

/// RTM_NEWLINK / RTM_DELLINK payload -> Link.
pub fn parse_link(payload: &[u8]) -> Option<Link> {
    wirespeed_netlink::route::parse_link(payload).map(Link::from)
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
        || (plain && family == AF_INET && (priority, table) == (32767, 253))
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
        custom_local: payload[0] == AF_INET
            && payload[7] == RTN_LOCAL
            && payload[5] != RTPROT_KERNEL,
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
        AF_INET => 4,
        AF_INET6 => 16,
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

/// Dumps all links.
pub fn dump_links(s: &mut Socket) -> Result<Vec<Link>> {
    Ok(wirespeed_netlink::route::dump_links(s)?
        .into_iter()
        .map(Link::from)
        .collect())
}

const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;

/// The local address of an IPv4 address message (ifaddrmsg): IFA_LOCAL, else IFA_ADDRESS (the
/// same on a broadcast link; IFA_ADDRESS is the peer's on a point-to-point one).
pub fn parse_addr_v4(payload: &[u8]) -> Option<[u8; 4]> {
    if payload.len() < 8 || payload[0] != AF_INET {
        return None;
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
    hdr[0] = AF_INET;
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

#[cfg(test)]
mod tests;
