//! rtnetlink (NETLINK_ROUTE): the message types and multicast groups, and links as the
//! kernel reports them (`RTM_NEWLINK`: dumps, single gets and events).

use crate::{attrs, cstr, u32_of, Result, Socket};

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
pub const RTM_GETNEIGH: u16 = 30;
pub const RTM_NEWRULE: u16 = 32;
pub const RTM_DELRULE: u16 = 33;
pub const RTM_GETRULE: u16 = 34;
/// tc: qdiscs, classes, filters (classifiers) and their chains.
pub const RTM_NEWQDISC: u16 = 36;
pub const RTM_DELQDISC: u16 = 37;
pub const RTM_NEWTCLASS: u16 = 40;
pub const RTM_DELTCLASS: u16 = 41;
pub const RTM_NEWTFILTER: u16 = 44;
pub const RTM_DELTFILTER: u16 = 45;
pub const RTM_NEWNETCONF: u16 = 80;
pub const RTM_DELNETCONF: u16 = 81;
pub const RTM_NEWCHAIN: u16 = 100;
pub const RTM_DELCHAIN: u16 = 101;
pub const RTM_NEWNEXTHOP: u16 = 104;
pub const RTM_DELNEXTHOP: u16 = 105;
pub const RTM_GETNEXTHOP: u16 = 106;
pub const RTM_NEWVLAN: u16 = 112;
pub const RTM_DELVLAN: u16 = 113;

/// The multicast group of link events (RTNLGRP_LINK): RTM_NEWLINK and RTM_DELLINK.
pub const RTNLGRP_LINK: u32 = 1;

pub const AF_BRIDGE: u8 = 7;

pub const IFLA_ADDRESS: u16 = 1;
pub const IFLA_IFNAME: u16 = 3;
pub const IFLA_MTU: u16 = 4;
pub const IFLA_LINK: u16 = 5;
pub const IFLA_MASTER: u16 = 10;
pub const IFLA_LINKINFO: u16 = 18;
pub const IFLA_PROTINFO: u16 = 12;
pub const IFLA_AF_SPEC: u16 = 26;
pub const IFLA_EXT_MASK: u16 = 29;
pub const IFLA_PROMISCUITY: u16 = 30;
pub const IFLA_PHYS_SWITCH_ID: u16 = 36;
pub const IFLA_LINK_NETNSID: u16 = 37;
pub const IFLA_MACVLAN_MODE: u16 = 1;
pub const MACVLAN_MODE_PASSTHRU: u32 = 8;
pub const IFLA_INFO_KIND: u16 = 1;
pub const IFLA_INFO_DATA: u16 = 2;
pub const IFLA_BR_AGEING_TIME: u16 = 4;
pub const IFLA_BR_VLAN_FILTERING: u16 = 7;
pub const IFLA_BR_VLAN_PROTOCOL: u16 = 8;
pub const IFLA_BR_NF_CALL_IPTABLES: u16 = 36;
pub const IFLA_BR_NF_CALL_IP6TABLES: u16 = 37;
pub const IFLA_BR_VLAN_STATS_ENABLED: u16 = 41;
pub const IFLA_BR_MULTI_BOOLOPT: u16 = 46;
/// BR_BOOLOPT_MST_ENABLE: per-VLAN spanning tree instances.
pub const BR_BOOLOPT_MST: u32 = 1 << 2;
pub const IFF_UP: u32 = 1;
pub const IFF_LOWER_UP: u32 = 1 << 16;
pub const IFF_LOOPBACK: u32 = 1 << 3;
/// struct ifinfomsg.
pub const IFINFOMSG_LEN: usize = 16;

/// A link as an `RTM_NEWLINK` message describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    /// IFLA_INFO_KIND ("veth", "bridge", ...); "" for a hardware device, whose driver
    /// registers no kind.
    pub kind: String,
    pub mac: Option<[u8; 6]>,
    pub mtu: u32,
    pub master: Option<u32>,
    /// IFF_UP and IFF_LOWER_UP.
    pub up: bool,
    pub loopback: bool,
    /// For a bridge device: its VLAN settings.
    pub bridge: Option<BridgeAttrs>,
    /// IFLA_PROMISCUITY > 0 (a user's `promisc on`, or a capture's): a bridge device then
    /// gets a copy of every frame its ports forward (`br_handle_frame_finish`, local_rcv).
    pub promisc: bool,
    /// IFLA_PHYS_SWITCH_ID: a switchdev port, whose hardware may already have forwarded.
    pub switchdev: bool,
    /// IFLA_LINK in this namespace (no IFLA_LINK_NETNSID): the device this one sits on.
    pub lower: Option<u32>,
    /// An upper that shares its lower's MAC and claims frames in its rx_handler, after XDP
    /// and tc ingress have run on the lower: ipvlan, ipvtap, macsec, macvlan passthru.
    pub claims_lower: bool,
}

/// A bridge device's settings (IFLA_INFO_DATA of kind "bridge").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct BridgeAttrs {
    pub vlan_filtering: bool,
    /// EtherType of the bridge's tags (0x8100 802.1Q, 0x88a8 802.1ad).
    pub vlan_protocol: u16,
    /// The bridge's own nf_call_iptables / nf_call_ip6tables options.
    pub nf_call_v4: bool,
    pub nf_call_v6: bool,
    /// Multiple spanning trees: port states per VLAN group, not in the port's state.
    pub mst: bool,
    /// Per-VLAN packet and byte counts (vlan_stats_enabled): with VLAN filtering the kernel
    /// counts every frame it bridges in them.
    pub vlan_stats: bool,
    /// IFLA_BR_AGEING_TIME, in centiseconds: how long a learned FDB entry outlives its
    /// station's last frame (0: nothing is learned, the bridge floods).
    pub ageing_cs: u32,
}

/// RTM_NEWLINK / RTM_DELLINK payload (ifinfomsg and attributes) -> Link.
pub fn parse_link(payload: &[u8]) -> Option<Link> {
    if payload.len() < IFINFOMSG_LEN {
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
    for (ty, v) in attrs(&payload[IFINFOMSG_LEN..]) {
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
                    link.bridge = Some(parse_bridge_attrs(data));
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

fn parse_bridge_attrs(data: &[u8]) -> BridgeAttrs {
    let mut b = BridgeAttrs {
        vlan_protocol: 0x8100,
        ..BridgeAttrs::default()
    };
    let on = |v: &[u8]| v.first().is_some_and(|x| *x != 0);
    for (ty, v) in attrs(data) {
        match ty {
            IFLA_BR_AGEING_TIME => b.ageing_cs = u32_of(v).unwrap_or(0),
            IFLA_BR_VLAN_FILTERING => b.vlan_filtering = on(v),
            IFLA_BR_NF_CALL_IPTABLES => b.nf_call_v4 = on(v),
            IFLA_BR_NF_CALL_IP6TABLES => b.nf_call_v6 = on(v),
            IFLA_BR_VLAN_STATS_ENABLED => b.vlan_stats = on(v),
            IFLA_BR_MULTI_BOOLOPT => b.mst = u32_of(v).is_some_and(|v| v & BR_BOOLOPT_MST != 0),
            IFLA_BR_VLAN_PROTOCOL if v.len() >= 2 => {
                b.vlan_protocol = u16::from_be_bytes([v[0], v[1]])
            }
            _ => {}
        }
    }
    b
}

/// Dumps all links.
pub fn dump_links(s: &mut Socket) -> Result<Vec<Link>> {
    let hdr = [0u8; IFINFOMSG_LEN]; // AF_UNSPEC
    Ok(s.dump(RTM_GETLINK, &hdr)?
        .iter()
        .filter(|(t, _)| *t == RTM_NEWLINK)
        .filter_map(|(_, p)| parse_link(p))
        .collect())
}

/// The link with index `index`: one `RTM_GETLINK` request. None when the answer does not
/// parse.
pub fn get_link(s: &mut Socket, index: u32) -> Result<Option<Link>> {
    let mut hdr = [0u8; IFINFOMSG_LEN]; // AF_UNSPEC
    hdr[4..8].copy_from_slice(&(index as i32).to_ne_bytes());
    Ok(s.get(RTM_GETLINK, &hdr)?
        .iter()
        .filter(|(t, _)| *t == RTM_NEWLINK)
        .find_map(|(_, p)| parse_link(p)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attr;

    /// An `RTM_NEWLINK` payload as the kernel builds it: ifinfomsg, IFLA_IFNAME, then
    /// IFLA_LINKINFO holding IFLA_INFO_KIND "veth" (NLA_F_NESTED set, as the kernel does).
    #[test]
    fn the_kind_and_flags_of_a_link_are_read_from_a_newlink_message() {
        let mut msg = vec![0u8; IFINFOMSG_LEN];
        msg[4..8].copy_from_slice(&7i32.to_ne_bytes());
        msg[8..12].copy_from_slice(&(IFF_UP | IFF_LOOPBACK).to_ne_bytes());
        msg.extend(attr(IFLA_IFNAME, b"b0\0"));
        msg.extend(attr(
            IFLA_LINKINFO | 0x8000,
            &attr(IFLA_INFO_KIND, b"veth\0"),
        ));
        let l = parse_link(&msg).unwrap();
        assert_eq!(
            (l.index, l.name.as_str(), l.kind.as_str()),
            (7, "b0", "veth")
        );
        assert!(l.loopback && !l.up, "{l:?}");
        // Without IFLA_LINKINFO (a hardware device): no kind. Truncated: nothing, no panic.
        assert_eq!(parse_link(&msg[..IFINFOMSG_LEN + 8]).unwrap().kind, "");
        assert_eq!(parse_link(&msg[..10]), None);
    }
}
