//! Unit tests of the netlink parsers, on hand-built messages.

use super::bridge::*;
use super::*;
use crate::kernel::routes::RouteChange;

/// An ifaddrmsg for `family` with the given attributes.
fn addr_msg(family: u8, attrs: &[Vec<u8>]) -> Vec<u8> {
    let mut p = vec![family, 24, 0, 0];
    p.extend_from_slice(&3u32.to_ne_bytes());
    attrs.iter().for_each(|a| p.extend_from_slice(a));
    p
}

#[test]
fn an_address_message_gives_its_local_address() {
    let local = [198, 18, 0, 1];
    let peer = [198, 18, 0, 2];
    // Point-to-point: IFA_LOCAL is ours, IFA_ADDRESS the peer's.
    let ptp = addr_msg(
        AF_INET,
        &[attr(IFA_ADDRESS, &peer), attr(IFA_LOCAL, &local)],
    );
    assert_eq!(parse_addr_v4(&ptp), Some(local));
    let only_address = addr_msg(AF_INET, &[attr(IFA_ADDRESS, &local)]);
    assert_eq!(parse_addr_v4(&only_address), Some(local));
    assert_eq!(
        parse_addr_v4(&addr_msg(AF_INET6, &[attr(IFA_LOCAL, &[0; 16])])),
        None
    );
    assert_eq!(parse_addr_v4(&addr_msg(AF_INET, &[])), None);
    assert_eq!(parse_addr_v4(&[2, 24]), None);
}

fn msg(ty: u16, payload: &[u8]) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&((16 + payload.len()) as u32).to_ne_bytes());
    m.extend_from_slice(&ty.to_ne_bytes());
    m.extend_from_slice(&[0; 10]);
    m.extend_from_slice(payload);
    m
}

fn link_payload() -> Vec<u8> {
    let mut p = vec![0u8; 16];
    p[4..8].copy_from_slice(&7i32.to_ne_bytes());
    p[8..12].copy_from_slice(&(IFF_UP | IFF_LOWER_UP).to_ne_bytes());
    p.extend(attr(IFLA_IFNAME, b"d0\0"));
    p.extend(attr(IFLA_ADDRESS, &[2, 0, 0, 0, 0, 9]));
    p.extend(attr(IFLA_MTU, &1500u32.to_ne_bytes()));
    p.extend(attr(IFLA_LINKINFO, &attr(IFLA_INFO_KIND, b"veth\0")));
    p
}

#[test]
fn parses_a_link_message() {
    let buf = msg(RTM_NEWLINK, &link_payload());
    let msgs = messages(&buf);
    assert_eq!(msgs.len(), 1);
    match parse_event(&msgs[0]) {
        Some(Event::LinkNew(l)) => {
            assert_eq!(
                (l.index, l.name.as_str(), l.kind.as_str(), l.mtu, l.up),
                (7, "d0", "veth", 1500, true)
            );
            assert_eq!(l.mac, Some([2, 0, 0, 0, 0, 9]));
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn truncated_input_never_panics() {
    let buf = msg(RTM_NEWLINK, &link_payload());
    for cut in 0..buf.len() {
        for m in messages(&buf[..cut]) {
            let _ = parse_event(&m);
        }
        let _ = parse_link(&buf[16.min(cut)..cut]);
        let _ = parse_rule(&buf[16.min(cut)..cut]);
    }
}

fn rule(priority: u32, table: u32, extra: &[u8]) -> Vec<u8> {
    let mut p = vec![2u8, 0, 0, 0, table.min(255) as u8, 0, 0, 1, 0, 0, 0, 0];
    p.extend(attr(FRA_PRIORITY, &priority.to_ne_bytes()));
    p.extend(attr(FRA_TABLE, &table.to_ne_bytes()));
    p.extend_from_slice(extra);
    p
}

#[test]
fn tells_default_rules_from_custom_ones() {
    assert!(parse_rule(&rule(0, 255, &[])).unwrap().default);
    assert!(parse_rule(&rule(32766, 254, &[])).unwrap().default);
    assert!(parse_rule(&rule(32767, 253, &[])).unwrap().default);
    assert!(!parse_rule(&rule(100, 100, &[])).unwrap().default);
    // same priority and table as main, but with an iif selector
    assert!(
        !parse_rule(&rule(32766, 254, &attr(3, b"d0\0")))
            .unwrap()
            .default
    );
}

#[test]
fn a_vrfs_rule_counts_as_a_default_unless_inverted() {
    // `1000: from all lookup [l3mdev-table]`: FRA_L3MDEV 1 (a u8), table 0.
    let vrf = rule(1000, 0, &attr(19, &[1]));
    let r = parse_rule(&vrf).unwrap();
    assert!(r.default && r.helper_exact, "{r:?}");
    let mut inverted = vrf.clone();
    inverted[8..12].copy_from_slice(&2u32.to_ne_bytes()); // FIB_RULE_INVERT
    let r = parse_rule(&inverted).unwrap();
    assert!(
        !r.default && r.helper_exact,
        "inverted, it matches every lookup: {r:?}"
    );
    // With another selector beside it, it still matches nothing the fast path asks.
    let mut both = rule(900, 10, &attr(19, &[1]));
    both.extend(attr(3, b"d0\0"));
    assert!(parse_rule(&both).unwrap().default);
    // FRA_L3MDEV 0 selects nothing: a plain rule.
    assert!(
        !parse_rule(&rule(1000, 10, &attr(19, &[0])))
            .unwrap()
            .default
    );
}

#[test]
fn tells_rules_the_fib_helper_evaluates_from_the_rest() {
    let exact = |payload: &[u8]| parse_rule(payload).unwrap().helper_exact;
    let with_header = |dst_len: u8, src_len: u8, tos: u8, action: u8, extra: &[u8]| {
        let mut p = rule(100, 100, extra);
        p[1..4].copy_from_slice(&[dst_len, src_len, tos]);
        p[7] = action;
        p
    };
    // `from 198.18.5.0/24`, `to ...`, `iif d0`, `oif d1`, `ipproto udp`, `sport 1-2`,
    // `dport 7003`, `suppress_prefixlength 0`, `goto 200`, `not from ...` (a header flag)
    for (src_len, dst_len, extra) in [
        (24, 0, attr(2, &[198, 18, 5, 0])),
        (0, 25, attr(1, &[198, 19, 200, 0])),
        (0, 0, attr(3, b"d0\0")),
        (0, 0, attr(17, b"d1\0")),
        (0, 0, attr(22, &[17])),
        (0, 0, attr(23, &[0, 1, 0, 2])),
        (0, 0, attr(24, &[0x1b, 0x5b, 0x1b, 0x5b])),
        (0, 0, attr(28, &[0xff, 0xff])),
        (0, 0, attr(29, &[0xff, 0xff])),
        (0, 0, attr(14, &0u32.to_ne_bytes())),
        (0, 0, attr(4, &200u32.to_ne_bytes())),
    ] {
        assert!(
            exact(&with_header(dst_len, src_len, 0, 1, &extra)),
            "{extra:?}"
        );
    }
    let mut inverted = with_header(0, 24, 0, 1, &attr(2, &[198, 18, 5, 0]));
    inverted[8..12].copy_from_slice(&2u32.to_ne_bytes()); // FIB_RULE_INVERT
    assert!(exact(&inverted));
    // blackhole, unreachable, prohibit, nop, goto: the kernel's own rule lookup answers
    for action in [2, 3, 6, 7, 8] {
        assert!(exact(&with_header(0, 0, 0, action, &[])), "action {action}");
    }
    // fwmark (and its mask), realms, tun_id, uidrange, dscp, flowlabel, an attribute not yet
    // known; a TOS selector; an unknown action.
    for ty in [10u16, 16, 11, 12, 20, 25, 26, 99] {
        assert!(
            !exact(&with_header(0, 0, 0, 1, &attr(ty, &1u32.to_ne_bytes()))),
            "attribute {ty}"
        );
    }
    assert!(!exact(&with_header(0, 0, 0x10, 1, &[])));
    // Which look at the protocol or ports (the kernel then dissects every packet).
    let ports = |extra: &[u8]| {
        parse_rule(&with_header(0, 0, 0, 1, extra))
            .unwrap()
            .looks_at_ports
    };
    for ty in [22u16, 23, 24, 28, 29] {
        assert!(ports(&attr(ty, &[0, 1, 0, 2])), "attribute {ty}");
    }
    assert!(!ports(&attr(2, &[198, 18, 5, 0])) && !ports(&attr(3, b"d0\0")));
    assert!(!exact(&with_header(0, 0, 0, 4, &[])));
    // The defaults are exact too (they change nothing either way).
    assert!(exact(&rule(32766, 254, &[])));
}

fn bridge_port_payload() -> Vec<u8> {
    let mut p = vec![0u8; 16];
    p[0] = AF_BRIDGE;
    p[4..8].copy_from_slice(&4i32.to_ne_bytes());
    p.extend(attr(IFLA_MASTER, &9u32.to_ne_bytes()));
    p.extend(attr(IFLA_MTU, &1500u32.to_ne_bytes()));
    let mut prot = attr(IFLA_BRPORT_STATE, &[3]);
    prot.extend(attr(IFLA_BRPORT_ISOLATED, &[0]));
    p.extend(attr(IFLA_PROTINFO | 0x8000, &prot));
    let vlan = |flags: u16, vid: u16| {
        let mut v = flags.to_ne_bytes().to_vec();
        v.extend_from_slice(&vid.to_ne_bytes());
        attr(IFLA_BRIDGE_VLAN_INFO, &v)
    };
    let mut spec = vlan(2 | 4, 10);
    spec.extend(vlan(BRIDGE_VLAN_INFO_RANGE_BEGIN, 20));
    spec.extend(vlan(BRIDGE_VLAN_INFO_RANGE_END, 22));
    p.extend(attr(IFLA_AF_SPEC | 0x8000, &spec));
    p
}

#[test]
fn parses_a_bridge_port_with_vlans_and_ranges() {
    let port = parse_bridge_port(&bridge_port_payload()).unwrap();
    assert_eq!(
        (port.index, port.bridge, port.mtu, port.state),
        (4, 9, 1500, 3)
    );
    assert!(port.unsupported.is_empty());
    let vids: Vec<(u16, u16)> = port.vlans.into_iter().collect();
    assert_eq!(vids, vec![(10, 6), (20, 0), (21, 0), (22, 0)]);
    // The same message is an event that asks for a resync, not a link.
    let buf = msg(RTM_NEWLINK, &bridge_port_payload());
    assert_eq!(parse_event(&messages(&buf)[0]), Some(Event::Bridge));
    // An isolated port is noted as unsupported.
    let mut p = bridge_port_payload();
    p.extend(attr(IFLA_PROTINFO, &attr(IFLA_BRPORT_ISOLATED, &[1])));
    assert_eq!(parse_bridge_port(&p).unwrap().unsupported, vec!["isolated"]);
    p.extend(attr(IFLA_PROTINFO, &attr(IFLA_BRPORT_NEIGH_SUPPRESS, &[1])));
    assert_eq!(
        parse_bridge_port(&p).unwrap().unsupported,
        vec!["isolated", "neigh_suppress"]
    );
    p.extend(attr(
        IFLA_PROTINFO,
        &attr(IFLA_BRPORT_NEIGH_VLAN_SUPPRESS, &[1]),
    ));
    assert_eq!(
        parse_bridge_port(&p).unwrap().unsupported,
        vec!["isolated", "neigh_suppress", "per-VLAN neigh_suppress"]
    );
}

/// A VLAN dump's entries (RTM_NEWVLAN): a range's state applies to each of its VLANs, and
/// forwarding ones are not listed.
#[test]
fn per_vlan_states_other_than_forwarding_are_read() {
    let entry = |vid: u16, end: Option<u16>, state: u8| {
        let mut info = 0u16.to_ne_bytes().to_vec();
        info.extend_from_slice(&vid.to_ne_bytes());
        let mut e = attr(BRIDGE_VLANDB_ENTRY_INFO, &info);
        if let Some(end) = end {
            e.extend(attr(BRIDGE_VLANDB_ENTRY_RANGE, &end.to_ne_bytes()));
        }
        e.extend(attr(BRIDGE_VLANDB_ENTRY_STATE, &[state]));
        attr(BRIDGE_VLANDB_ENTRY | 0x8000, &e)
    };
    let mut p = vec![AF_BRIDGE, 0, 0, 0];
    p.extend_from_slice(&4u32.to_ne_bytes());
    p.extend(entry(10, None, 3));
    p.extend(entry(20, Some(22), 2));
    p.extend(entry(30, None, 4));
    assert_eq!(
        parse_vlan_states(&p),
        vec![(4, 20, 2), (4, 21, 2), (4, 22, 2), (4, 30, 4)]
    );
    assert!(parse_vlan_states(&p[..6]).is_empty());
    assert!(parse_vlan_states(&[]).is_empty());
}

fn fdb_payload(ifindex: i32, state: u16, master: Option<u32>) -> Vec<u8> {
    let mut p = vec![0u8; 12];
    p[0] = AF_BRIDGE;
    p[4..8].copy_from_slice(&ifindex.to_ne_bytes());
    p[8..10].copy_from_slice(&state.to_ne_bytes());
    p.extend(attr(NDA_LLADDR, &[2, 0, 0, 0, 0, 7]));
    p.extend(attr(NDA_VLAN, &10u16.to_ne_bytes()));
    if let Some(m) = master {
        p.extend(attr(NDA_MASTER, &m.to_ne_bytes()));
    }
    p
}

#[test]
fn parses_fdb_entries_and_tells_local_ones() {
    let e = parse_fdb(&fdb_payload(4, 0x02, Some(9))).unwrap();
    assert_eq!(
        (e.key.bridge, e.key.vid, e.key.mac, e.port),
        (9, 10, [2, 0, 0, 0, 0, 7], 4)
    );
    assert_eq!(
        parse_fdb(&fdb_payload(4, NUD_PERMANENT, Some(9)))
            .unwrap()
            .port,
        0
    );
    assert_eq!(parse_fdb(&fdb_payload(9, 0x02, Some(9))).unwrap().port, 0);
    // A device's own address list ("self", no master) is not the bridge's FDB.
    assert!(parse_fdb(&fdb_payload(4, NUD_PERMANENT, None)).is_none());
    let buf = msg(RTM_DELNEIGH, &fdb_payload(4, 0x02, Some(9)));
    match parse_event(&messages(&buf)[0]) {
        Some(Event::Fdb { add: false, entry }) => assert_eq!(entry.port, 4),
        other => panic!("unexpected {other:?}"),
    }
    for cut in 0..fdb_payload(4, 2, Some(9)).len() {
        let _ = parse_fdb(&fdb_payload(4, 2, Some(9))[..cut]);
        let _ = parse_bridge_port(&bridge_port_payload()[..cut]);
    }
}

fn rtmsg(family: u8, src_len: u8) -> Vec<u8> {
    vec![family, 24, src_len, 0, 254, 3, 0, 1, 0, 0, 0, 0]
}

fn change(payload: &[u8]) -> RouteChange {
    parse_route(payload, false, 0).unwrap()
}

#[test]
fn tells_multipath_and_nexthop_object_routes() {
    let plain = [rtmsg(AF_INET, 0), attr(5, &[198, 18, 1, 2])].concat(); // RTA_GATEWAY
    let multipath = [rtmsg(AF_INET, 0), attr(RTA_MULTIPATH, &[0; 8])].concat();
    let nhid = [rtmsg(AF_INET, 0), attr(RTA_NH_ID, &7u32.to_ne_bytes())].concat();
    // `ip -6 route add fd00:c::/64 from fd00:a::/64 via ...`: source-specific.
    let from = [rtmsg(AF_INET6, 64), attr(5, &[0xfd; 16])].concat();
    let no_groups = BTreeSet::new();
    let group_7: BTreeSet<u32> = [7].into();
    for groups in [None, Some(&no_groups), Some(&group_7)] {
        assert!(!change(&plain).uncacheable(groups));
        assert!(change(&multipath).uncacheable(groups) && change(&multipath).hashed(groups));
        assert!(change(&from).uncacheable(groups) && !change(&from).hashed(groups));
        assert!(!change(&plain).hashed(groups));
    }
    // A nexthop object is hashed, and so uncacheable, only when it is a group, or when the
    // groups are not known.
    let nh = change(&nhid);
    assert!(nh.hashed(None) && nh.uncacheable(None));
    assert!(nh.hashed(Some(&group_7)) && nh.uncacheable(Some(&group_7)));
    assert!(!nh.hashed(Some(&no_groups)) && !nh.uncacheable(Some(&no_groups)));
    assert_eq!(parse_route(&rtmsg(AF_INET, 0)[..5], false, 0), None);
    // Events carry what the message says, with the header's replace flag and the kind.
    let ev = parse_event(&Msg {
        ty: 24, // RTM_NEWROUTE
        flags: 0x100 | 0x400,
        payload: &nhid,
    });
    assert_eq!(
        ev,
        Some(Event::Route(RouteChange {
            family: AF_INET,
            delete: false,
            replace: true,
            source_specific: false,
            multipath: false,
            nhid: Some(7),
            mtu: None,
            realm: false,
            custom_local: false,
        }))
    );
    let ev = parse_event(&Msg {
        ty: 25, // RTM_DELROUTE
        flags: 0,
        payload: &multipath,
    });
    assert!(matches!(ev, Some(Event::Route(c)) if c.delete && c.multipath && !c.replace));
}

#[test]
fn tells_nexthop_groups_from_single_next_hops() {
    // `ip nexthop add id 11 via 198.18.1.2 dev d1`
    let single = [
        vec![2u8, 0, 4, 0, 0, 0, 0, 0],
        attr(NHA_ID, &11u32.to_ne_bytes()),
        attr(6, &[198, 18, 1, 2]),
    ]
    .concat();
    let c = parse_nexthop(&single, false);
    assert_eq!((c.id, c.group), (Some(11), false));
    // `ip nexthop add id 20 group 11/12`: two struct nexthop_grp of 8 bytes.
    let group = [
        vec![0u8; 8],
        attr(NHA_ID, &20u32.to_ne_bytes()),
        attr(
            NHA_GROUP,
            &[11, 0, 0, 0, 0, 0, 0, 0, 12, 0, 0, 0, 0, 0, 0, 0],
        ),
    ]
    .concat();
    let c = parse_nexthop(&group, true);
    assert_eq!((c.id, c.group, c.delete), (Some(20), true, true));
    for cut in 0..group.len() {
        let _ = parse_nexthop(&group[..cut], false);
    }
    assert_eq!(
        parse_event(&Msg {
            ty: 105, // RTM_DELNEXTHOP
            flags: 0,
            payload: &group,
        }),
        Some(Event::Nexthop(c))
    );
}

#[test]
fn reads_a_routes_own_mtu_unless_it_is_locked() {
    let metrics = |m: &[Vec<u8>]| [rtmsg(AF_INET, 0), attr(RTA_METRICS, &m.concat())].concat();
    let mtu = attr(RTAX_MTU, &1400u32.to_ne_bytes());
    assert_eq!(change(&metrics(std::slice::from_ref(&mtu))).mtu, Some(1400));
    let locked = attr(RTAX_LOCK, &(1u32 << RTAX_MTU).to_ne_bytes());
    assert_eq!(change(&metrics(&[locked, mtu.clone()])).mtu, None);
    let other_lock = attr(RTAX_LOCK, &(1u32 << 4).to_ne_bytes());
    assert_eq!(change(&metrics(&[other_lock, mtu])).mtu, Some(1400));
    let advmss = attr(8, &1360u32.to_ne_bytes()); // RTAX_ADVMSS, no MTU
    assert_eq!(change(&metrics(&[advmss])).mtu, None);
    assert_eq!(change(&rtmsg(AF_INET, 0)).mtu, None);
}

#[test]
fn reads_which_neighbours_are_stale() {
    use crate::kernel::neigh::NeighKey;
    let parse = parse_neigh;
    let ndmsg = |family: u8, ifindex: u32, state: u16, flags: u8| {
        let mut m = vec![family, 0, 0, 0];
        m.extend_from_slice(&ifindex.to_ne_bytes());
        m.extend_from_slice(&state.to_ne_bytes());
        m.extend_from_slice(&[flags, 1]);
        m
    };
    const NDA_DST: u16 = 1;
    let v4 = [ndmsg(AF_INET, 7, 0x04, 0), attr(NDA_DST, &[198, 18, 1, 2])].concat();
    let n = parse(&v4, false).unwrap();
    let mut addr = [0u8; 16];
    addr[..4].copy_from_slice(&[198, 18, 1, 2]);
    assert_eq!(
        n.key,
        NeighKey {
            ifindex: 7,
            family: AF_INET,
            addr
        }
    );
    assert!(n.stale);
    assert!(!parse(&v4, true).unwrap().stale, "deleted");
    let delay = [ndmsg(AF_INET, 7, 0x08, 0), attr(NDA_DST, &[198, 18, 1, 2])].concat();
    assert!(!parse(&delay, false).unwrap().stale);
    let mut a6 = [0u8; 16];
    a6[0] = 0xfd;
    a6[15] = 2;
    let v6 = [ndmsg(AF_INET6, 3, 0x04, 0), attr(NDA_DST, &a6)].concat();
    assert_eq!(parse(&v6, false).unwrap().key.addr, a6);
    // A proxy entry, a bridge FDB entry, an address of the wrong length: not next hops.
    let proxy = [
        ndmsg(AF_INET, 7, 0x04, 0x08),
        attr(NDA_DST, &[198, 18, 1, 2]),
    ]
    .concat();
    assert_eq!(parse(&proxy, false), None);
    let fdb = [ndmsg(7, 7, 0x04, 0), attr(NDA_DST, &[198, 18, 1, 2])].concat();
    assert_eq!(parse(&fdb, false), None);
    let short = [ndmsg(AF_INET6, 3, 0x04, 0), attr(NDA_DST, &[198, 18, 1, 2])].concat();
    assert_eq!(parse(&short, false), None);
    for cut in 0..v6.len() {
        let _ = parse(&v6[..cut], false);
    }
}

#[test]
fn reads_realms_and_a_users_local_routes() {
    const RTA_FLOW: u16 = 11;
    let realm = attr(RTA_FLOW, &5u32.to_ne_bytes());
    assert!(change(&[rtmsg(AF_INET, 0), realm.clone()].concat()).realm);
    assert!(!change(&[rtmsg(AF_INET, 0), attr(RTA_FLOW, &[0; 4])].concat()).realm);
    // A next hop of a multipath route with a realm of its own: rtnexthop, then attributes.
    let hop = |attrs: &[u8]| {
        let mut h = ((8 + attrs.len()) as u16).to_ne_bytes().to_vec();
        h.extend_from_slice(&[0, 0, 3, 0, 0, 0]);
        h.extend_from_slice(attrs);
        h
    };
    let gw = attr(5, &[198, 18, 1, 2]);
    let hops = [hop(&gw), hop(&[gw.clone(), realm].concat())].concat();
    let c = change(&[rtmsg(AF_INET, 0), attr(RTA_MULTIPATH, &hops)].concat());
    assert!(c.multipath && c.realm);
    let c = change(&[rtmsg(AF_INET, 0), attr(RTA_MULTIPATH, &hop(&gw))].concat());
    assert!(c.multipath && !c.realm);
    for cut in 0..hops.len() {
        let _ = change(&[rtmsg(AF_INET, 0), attr(RTA_MULTIPATH, &hops[..cut])].concat());
    }
    // rtm_type RTN_LOCAL (2): a user's (protocol boot, 3) counts; the kernel's own for an
    // address (protocol kernel, 2) does not, nor an IPv6 one.
    let local = |family: u8, protocol: u8| {
        let mut m = rtmsg(family, 0);
        m[5] = protocol;
        m[7] = 2;
        change(&m).custom_local
    };
    assert!(local(AF_INET, 3));
    assert!(!local(AF_INET, 2));
    assert!(!local(AF_INET6, 3));
    assert!(!change(&rtmsg(AF_INET, 0)).custom_local);
}

#[test]
fn ipv6_device_info_counts_as_netconf() {
    let mut ifinfo = vec![0u8; 16];
    ifinfo[0] = AF_INET6;
    ifinfo[4..8].copy_from_slice(&3u32.to_ne_bytes());
    let m = Msg {
        ty: RTM_NEWLINK,
        flags: 0,
        payload: &ifinfo,
    };
    assert_eq!(parse_event(&m), Some(Event::Netconf));
}

#[test]
fn reads_what_claims_a_links_frames() {
    let ifinfo = |index: u32| {
        let mut m = vec![0u8; 16];
        m[4..8].copy_from_slice(&index.to_ne_bytes());
        m
    };
    let kind = |k: &str, data: &[u8]| {
        let mut nested = attr(1, format!("{k}\0").as_bytes()); // IFLA_INFO_KIND
        if !data.is_empty() {
            nested.extend(attr(2, data)); // IFLA_INFO_DATA
        }
        attr(18, &nested) // IFLA_LINKINFO
    };
    let lower = attr(5, &3u32.to_ne_bytes()); // IFLA_LINK
    let ipvlan = parse_link(&[ifinfo(7), lower.clone(), kind("ipvlan", &[])].concat()).unwrap();
    assert_eq!((ipvlan.lower, ipvlan.claims_lower), (Some(3), true));
    let passthru = attr(1, &8u32.to_ne_bytes()); // IFLA_MACVLAN_MODE passthru
    let mv = parse_link(&[ifinfo(7), lower.clone(), kind("macvlan", &passthru)].concat()).unwrap();
    assert!(mv.claims_lower);
    let bridge_mode = attr(1, &4u32.to_ne_bytes());
    let mv =
        parse_link(&[ifinfo(7), lower.clone(), kind("macvlan", &bridge_mode)].concat()).unwrap();
    assert!(!mv.claims_lower);
    // Its lower in another namespace (IFLA_LINK_NETNSID): not one of ours.
    let away = [
        ifinfo(7),
        lower,
        attr(37, &0i32.to_ne_bytes()),
        kind("ipvlan", &[]),
    ]
    .concat();
    assert_eq!(parse_link(&away).unwrap().lower, None);
    let sw = parse_link(&[ifinfo(2), attr(36, &[1, 2, 3, 4])].concat()).unwrap();
    assert!(sw.switchdev);
    let promisc = parse_link(&[ifinfo(9), attr(30, &1u32.to_ne_bytes())].concat()).unwrap();
    assert!(promisc.promisc);
    assert!(!parse_link(&ifinfo(9)).unwrap().promisc);
}
