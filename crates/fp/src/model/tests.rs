//! The model's unit tests: events in, plan out.

use super::*;
use crate::kernel::family::AF_INET6;
use crate::kernel::routes::Recount;
use crate::model::features::*;
use crate::model::plan::*;

fn link(index: u32, name: &str) -> Link {
    Link::from(wirespeed_netlink::route::Link {
        index,
        name: name.into(),
        kind: "veth".into(),
        mac: Some([2, 0, 0, 0, 0, index as u8]),
        mtu: 1500,
        master: None,
        up: true,
        loopback: false,
        bridge: None,
        ..Default::default()
    })
}

/// The kernel's report for a device that takes XDP-redirected frames.
fn takes_xdp(ifindex: u32) -> Event {
    Event::XdpFeatures {
        ifindex,
        features: Some(NETDEV_XDP_ACT_NDO_XMIT | 0x3),
    }
}

fn forwarding_model() -> Model {
    let mut m = Model::default();
    for (i, n) in [(1, "lo"), (2, "d0"), (3, "d1")] {
        let mut l = link(i, n);
        if n == "lo" {
            l.link.loopback = true;
            l.link.mac = None;
        }
        m.apply(&Event::LinkNew(l));
        m.apply(&takes_xdp(i));
        m.sysctls.v4_forwarding.insert(n.into(), true);
    }
    m.sysctls.v6_forwarding = true;
    m
}

#[test]
fn routers_on_every_ethernet_port() {
    let p = forwarding_model().plan();
    assert_eq!(p.ports[&2].tx_ports, vec![2, 3]);
    assert_eq!(p.ports.len(), 2);
    assert!(
        !p.ports[&2].features.tc,
        "every egress takes XDP frames: XDP"
    );
    assert!(p.ports[&2].features.router_v4 && p.ports[&2].features.router_v6);
    assert_eq!(p.ports[&3].features.mac, [2, 0, 0, 0, 0, 3]);
}

#[test]
fn a_vrf_and_its_ports_are_not_served() {
    // The invariant behind counting a VRF's rule as a default (netlink::FRA_L3MDEV): no
    // served port has a VRF among its masters, and a VRF device is no port.
    let mut m = forwarding_model();
    let mut vrf = link(4, "mgmt");
    vrf.link.kind = "vrf".into();
    let mut port = link(5, "m0");
    port.link.master = Some(4);
    for l in [vrf, port] {
        let i = l.index;
        m.apply(&Event::LinkNew(l));
        m.apply(&takes_xdp(i));
    }
    let p = m.plan();
    assert_eq!(p.ports.keys().copied().collect::<Vec<_>>(), [2, 3]);
    assert_eq!(p.ports[&2].tx_ports, vec![2, 3]);
}

#[test]
fn policy_rules_the_helper_cannot_evaluate_send_the_family_to_the_kernel() {
    let mut m = forwarding_model();
    let rule = |helper_exact: bool| RuleKey {
        family: AF_INET,
        priority: 100,
        table: 100,
        default: false,
        helper_exact,
        looks_at_ports: false,
        detail: String::new(),
    };
    m.replace_rules(AF_INET, &[rule(true), rule(false)]);
    let p = m.plan();
    assert!(p.ports[&2].off_v4 && p.ports[&2].features.router_v4);
    assert!(!p.ports[&2].off_v6);
    assert!(p.ports[&2].notes[0].contains("1 IPv4 policy rules with a selector"));
    m.replace_rules(AF_INET, &[]);
    assert!(!m.plan().ports[&2].off_v4);
}

#[test]
fn policy_rules_the_helper_evaluates_keep_the_router_and_turn_the_route_cache_off() {
    let mut m = forwarding_model();
    let rule = |family: u8| RuleKey {
        family,
        priority: 100,
        table: 100,
        default: false,
        helper_exact: true,
        looks_at_ports: family == AF_INET,
        detail: String::new(),
    };
    m.replace_rules(AF_INET6, &[rule(AF_INET6), rule(AF_INET6)]);
    let p = &m.plan().ports[&2];
    assert!(!p.off_v4 && !p.off_v6);
    assert_eq!(
        (p.route_cache, p.policy_rules),
        (
            RouteCache {
                v4: true,
                v6: false
            },
            PolicyRules {
                v4: false,
                v6: true,
                v4_ports: false
            }
        )
    );
    assert!(p.notes.iter().any(|n| n.contains("2 IPv6 policy rules")));
    assert_eq!(p.switches().policy_rules, p.policy_rules);
    m.replace_rules(AF_INET, &[rule(AF_INET)]);
    m.replace_rules(AF_INET6, &[]);
    let p = &m.plan().ports[&2];
    assert_eq!(
        (
            p.route_cache.v4,
            p.policy_rules.v4,
            p.policy_rules.v4_ports,
            p.route_cache.v6
        ),
        (false, true, true, true)
    );
}

#[test]
fn link_down_leaves_the_tx_ports_and_delete_leaves_the_plan() {
    let mut m = forwarding_model();
    let mut l = link(3, "d1");
    l.link.up = false;
    assert!(m.apply(&Event::LinkNew(l)));
    let p = m.plan();
    assert_eq!(p.ports[&3].tx_ports, vec![2]);
    assert!(p.ports.contains_key(&3), "a down link stays attached");
    assert!(p.ports[&3].notes.iter().any(|n| n.contains("link down")));
    assert!(m.apply(&Event::LinkDel(2)));
    assert_eq!(m.plan().ports.keys().copied().collect::<Vec<_>>(), vec![3]);
    assert!(m.apply(&Event::LinkDel(3)));
    assert!(m.plan().ports.is_empty());
    let plain = RouteChange {
        family: AF_INET,
        delete: false,
        replace: false,
        source_specific: false,
        multipath: false,
        nhid: None,
        mtu: None,
        realm: false,
        custom_local: false,
    };
    assert!(!m.apply(&Event::Route(plain)));
    assert!(m.apply(&Event::Route(RouteChange {
        multipath: true,
        ..plain
    })));
}

#[test]
fn bridge_ports_forwarding_off_and_rp_filter_are_respected() {
    let mut m = forwarding_model();
    let mut l = link(4, "p0");
    l.link.master = Some(9);
    m.apply(&Event::LinkNew(l));
    m.sysctls.v4_forwarding.insert("d0".into(), false);
    m.sysctls.rp_filter.insert("d1".into(), 1);
    let p = m.plan();
    assert!(!p.ports.contains_key(&4));
    assert!(p.ports[&2].off_v4 && !p.ports[&3].off_v4);
    assert!(!p.ports[&3].off_v6);
    // rp_filter keeps the router, checking each source, on its port only.
    assert!(p.ports[&3].rp_filter_v4 && !p.ports[&2].rp_filter_v4);
}

#[test]
fn each_familys_route_cache_goes_off_with_its_own_uncacheable_routes() {
    let mut m = forwarding_model();
    assert_eq!(m.plan().ports[&2].route_cache, RouteCache::both(true));
    // With nothing counted, a nexthop event changes no count (a route through a new object
    // comes with its own route event); the watcher drops the cached answers all the same.
    let nexthop = NexthopChange {
        delete: false,
        id: Some(71),
        group: true,
    };
    assert!(!m.apply(&Event::Nexthop(nexthop)));
    // An IPv6 route through that group turns the IPv6 cache off, without a dump.
    let through_group = RouteChange {
        family: AF_INET6,
        delete: false,
        replace: false,
        source_specific: false,
        multipath: false,
        nhid: Some(71),
        mtu: None,
        realm: false,
        custom_local: false,
    };
    assert!(m.apply(&Event::Route(through_group)));
    assert_eq!(m.routes.take_recount(), Recount::No);
    let p = m.plan();
    assert_eq!(
        p.ports[&2].route_cache,
        RouteCache {
            v4: true,
            v6: false
        }
    );
    assert!(p.ports[&2]
        .notes
        .iter()
        .any(|n| n.contains("1 IPv6 multipath, nexthop-group or source-specific")));
    // Its deletion may be the last: the watcher dumps before the cache is on again.
    assert!(!m.apply(&Event::Route(RouteChange {
        delete: true,
        ..through_group
    })));
    assert_eq!(m.routes.take_recount(), Recount::Now);
    m.routes.v4.uncacheable = 2;
    m.routes.v6.uncacheable = 0;
    assert_eq!(
        m.plan().ports[&2].route_cache,
        RouteCache {
            v4: false,
            v6: true
        }
    );
    m.no_route_cache = true;
    m.routes.v4.uncacheable = 0;
    assert_eq!(m.plan().ports[&2].route_cache, RouteCache::both(false));
}

#[test]
fn a_multipath_hash_policy_other_than_0_hands_its_family_to_the_kernel_with_multipath_routes() {
    let mut m = forwarding_model();
    // Policy 0 (the default): the FIB helper hashes as the kernel's forwarding does.
    m.routes.v4.multipath = 1;
    m.routes.v6.multipath = 1;
    let p = m.plan();
    assert!(p.ports.values().all(|pp| !pp.off_v4 && !pp.off_v6));
    // Policy 1 for IPv4 only: IPv4 goes to the kernel, with the reason; IPv6 stays.
    m.sysctls.unevented.multipath_hash_policy = [1, 0];
    let p = m.plan();
    for pp in p.ports.values() {
        assert!(pp.off_v4 && !pp.off_v6);
        assert!(pp.notes.iter().any(|n| n
            == "router4 -> kernel: 1 multipath routes hashed by fib_multipath_hash_policy 1 (only 0 is hashed as the kernel does)"));
    }
    // Any policy but 0, either family.
    m.sysctls.unevented.multipath_hash_policy = [0, 3];
    assert!(m.plan().ports.values().all(|pp| !pp.off_v4 && pp.off_v6));
    // Without multipath routes the policy picks nothing.
    m.routes.v4.multipath = 0;
    m.routes.v6.multipath = 0;
    m.sysctls.unevented.multipath_hash_policy = [2, 1];
    assert!(m.plan().ports.values().all(|pp| !pp.off_v4 && !pp.off_v6));
}

#[test]
fn a_ruleset_that_may_run_conntrack_hands_its_family_to_the_kernel() {
    let mut m = forwarding_model();
    let p = m.plan();
    assert!(p
        .ports
        .values()
        .all(|pp| pp.reassembly == Reassembly::default() && !pp.off_v4));
    m.filter.reassembly_v4 = Some("ip table host chain in: a match on ct".into());
    let p = m.plan();
    for pp in p.ports.values() {
        assert_eq!(
            pp.reassembly,
            Reassembly {
                v4: true,
                v6: false
            }
        );
        assert_eq!(pp.switches().reassembly, pp.reassembly);
        assert!(
            pp.off_v4 && !pp.off_v6,
            "conntrack tracks every IPv4 packet"
        );
        assert!(pp.notes.iter().any(|n| n
            == "router4 -> kernel: conntrack tracks every forwarded packet (ip table host chain in: a match on ct)"));
    }
}

#[test]
fn the_local_addresses_reach_every_routed_port_and_too_many_hand_ipv4_over() {
    let mut m = forwarding_model();
    m.local_v4 = [[198, 18, 0, 2], [198, 18, 1, 1]].into_iter().collect();
    let p = m.plan();
    for pp in p.ports.values() {
        assert_eq!(pp.local_v4, vec![[198, 18, 0, 2], [198, 18, 1, 1]]);
        assert!(!pp.off_v4);
    }
    m.local_v4 = (0..=LOCAL_V4_MAX as u32)
        .map(|i| (0xc612_0000 + i).to_be_bytes())
        .collect();
    assert!(m.plan().ports.values().all(|pp| pp.off_v4));
}

#[test]
fn selection_limits_the_ports() {
    let mut m = forwarding_model();
    m.only = Some(vec!["d1".into()]);
    assert_eq!(m.plan().ports.keys().copied().collect::<Vec<_>>(), vec![3]);
}

fn bridged_model(filtering: bool) -> Model {
    let mut m = forwarding_model();
    let mut br = link(9, "br0");
    br.link.kind = "bridge".into();
    br.link.bridge = Some(BridgeAttrs {
        vlan_filtering: filtering,
        vlan_protocol: 0x8100,
        ..BridgeAttrs::default()
    });
    m.apply(&Event::LinkNew(br));
    for (i, kind) in [(4, "veth"), (5, "eth")] {
        let mut p = link(i, &format!("p{i}"));
        p.link.kind = kind.into();
        p.link.master = Some(9);
        m.apply(&Event::LinkNew(p));
        m.apply(&takes_xdp(i));
        m.bridge_ports.insert(
            i,
            BridgePort {
                index: i,
                bridge: 9,
                mtu: 1500,
                state: BR_STATE_FORWARDING,
                vlans: [
                    (1, BRIDGE_VLAN_INFO_PVID | BRIDGE_VLAN_INFO_UNTAGGED),
                    (7, 0),
                ]
                .into(),
                unsupported: vec![],
                vlan_states: Default::default(),
            },
        );
    }
    m
}

#[test]
fn bridge_ports_get_the_bridge_module_and_their_tables() {
    let m = bridged_model(true);
    let p = m.plan();
    assert!(
        !p.ports.contains_key(&9),
        "the bridge device itself is not served"
    );
    for i in [4, 5] {
        let f = p.ports[&i].features;
        assert!(f.bridge && !f.router_v4 && !f.router_v6);
        assert!(f.tc, "a bridge with a veth port is served at TC");
    }
    assert_eq!(
        p.bridge_ports[&4],
        BrPortVal {
            bridge: 9,
            mtu: 1500,
            pvid: 1,
            state: 3,
            vlan_filtering: true,
            ip_check: 0,
            fdb_refresh_ns: 0,
        }
    );
    assert_eq!(p.bridge_vlans.len(), 4);
    // A VLAN whose own STP state is learning leaves the module's table: its frames are the
    // kernel's, on the way in and out.
    let mut m2 = bridged_model(true);
    m2.bridge_ports
        .get_mut(&5)
        .unwrap()
        .vlan_states
        .insert(7, 2);
    let p2 = m2.plan();
    assert!(p2.bridge_vlans.contains_key(&(4, 7)) && !p2.bridge_vlans.contains_key(&(5, 7)));
    assert!(p2.bridge_vlans.contains_key(&(5, 1)));
    assert!(p.ports[&4].tx_ports.contains(&4) && p.ports[&4].tx_ports.contains(&5));
    // Without filtering, no VLAN table; with a forced hook, XDP.
    let mut m = bridged_model(false);
    m.bridge_hook = BridgeHook::Xdp;
    let p = m.plan();
    assert!(p.bridge_vlans.is_empty() && !p.ports[&4].features.tc);
}

#[test]
fn bridge_ports_the_module_cannot_serve_go_to_the_kernel() {
    let mut m = bridged_model(false);
    m.bridge_ports.get_mut(&4).unwrap().state = 2;
    m.bridge_ports.get_mut(&5).unwrap().unsupported = vec!["isolated"];
    let p = m.plan();
    assert!(p.bridge_ports.is_empty());
    assert!(p.ports[&4].notes[0].contains("STP state learning"));
    assert!(p.ports[&5].notes[0].contains("isolated"));
    let mut m = bridged_model(false);
    m.bridge_kernel = Some("br_netfilter".into());
    assert!(m.plan().bridge_ports.is_empty());
    let mut m = bridged_model(true);
    m.links
        .get_mut(&9)
        .unwrap()
        .link
        .bridge
        .as_mut()
        .unwrap()
        .vlan_protocol = 0x88a8;
    assert!(m.plan().ports[&4].notes[0].contains("0x88a8"));
    let mut m = bridged_model(true);
    m.links
        .get_mut(&9)
        .unwrap()
        .link
        .bridge
        .as_mut()
        .unwrap()
        .vlan_stats = true;
    assert!(m.plan().ports[&4].notes[0].contains("vlan_stats_enabled"));
    // An FDB event is a map write, not a plan change.
    let mut m = bridged_model(false);
    let entry = FdbEntry {
        key: FdbKey {
            bridge: 9,
            vid: 0,
            mac: [2, 0, 0, 0, 0, 1],
        },
        port: 4,
    };
    assert!(!m.apply(&Event::Fdb { add: true, entry }));
    assert_eq!(m.fdb.get(&entry.key), Some(&4));
    assert!(!m.apply(&Event::Fdb { add: false, entry }));
    assert!(m.fdb.is_empty());
}

#[test]
fn an_egress_without_xdp_delivery_moves_the_router_to_tc() {
    let mut m = forwarding_model();
    // The sink-side veth's peer turns GRO off: the kernel clears NDO_XMIT on d1.
    assert!(m.apply(&Event::XdpFeatures {
        ifindex: 3,
        features: Some(0x3),
    }));
    let p = m.plan();
    for idx in [2, 3] {
        assert!(p.ports[&idx].features.tc, "port {idx} routes at TC");
        assert_eq!(p.ports[&idx].tx_ports, vec![2, 3]);
        assert!(p.ports[&idx]
            .notes
            .iter()
            .any(|n| n.contains("router at TC: egress d1") && n.contains("veth peer")));
    }
    // GRO back on: XDP again.
    assert!(m.apply(&takes_xdp(3)));
    assert!(!m.plan().ports[&2].features.tc);
    // The same report again changes nothing.
    assert!(!m.apply(&takes_xdp(3)));
}

#[test]
fn unknown_xdp_features_mean_tc() {
    let mut m = forwarding_model();
    m.xdp_features = None;
    let p = m.plan();
    assert!(p.ports[&2].features.tc);
    assert!(p.ports[&2].notes.iter().any(|n| n.contains("Linux < 6.3")));
    // A device the report does not list is no XDP target either.
    let mut m = forwarding_model();
    m.apply(&Event::LinkNew(link(7, "d7")));
    assert!(m.plan().ports[&2].features.tc);
}

#[test]
fn a_down_port_does_not_decide_the_hook() {
    let mut m = forwarding_model();
    let mut l = link(3, "d1");
    l.link.up = false;
    m.apply(&Event::LinkNew(l));
    m.apply(&Event::XdpFeatures {
        ifindex: 3,
        features: Some(0),
    });
    assert!(!m.plan().ports[&2].features.tc);
}

#[test]
fn a_forced_xdp_bridge_never_redirects_into_a_port_without_xdp_delivery() {
    let mut m = bridged_model(false);
    m.bridge_hook = BridgeHook::Xdp;
    m.apply(&Event::XdpFeatures {
        ifindex: 5,
        features: None,
    });
    let p = m.plan();
    assert!(!p.ports[&4].features.tc);
    assert_eq!(p.ports[&4].tx_ports, vec![4]);
    assert!(p.ports[&5]
        .notes
        .iter()
        .any(|n| n.contains("not an XDP redirect target")));
    // Auto puts that bridge at TC, where every port takes the redirect.
    m.bridge_hook = BridgeHook::Auto;
    let p = m.plan();
    assert!(p.ports[&4].features.tc && p.ports[&5].features.tc);
    assert_eq!(p.ports[&5].tx_ports, vec![4, 5]);
}

#[test]
fn ports_whose_frames_others_claim_first_are_not_served() {
    // A promiscuous bridge device gets a copy of every frame its ports forward.
    let mut m = bridged_model(false);
    m.links.get_mut(&9).unwrap().link.promisc = true;
    let p = m.plan();
    assert!(p.bridge_ports.is_empty());
    assert!(p.ports[&4].notes[0].contains("promiscuous"));
    // A switchdev port: the hardware may have forwarded already.
    let mut m = forwarding_model();
    m.links.get_mut(&2).unwrap().link.switchdev = true;
    assert!(!m.plan().ports.contains_key(&2));
    // An ipvlan on d1 (same namespace) takes frames for its addresses in its rx_handler.
    let mut m = forwarding_model();
    let mut upper = link(7, "ipv0");
    upper.link.kind = "ipvlan".into();
    upper.link.lower = Some(3);
    upper.link.claims_lower = true;
    m.links.insert(7, upper.clone());
    let p = m.plan();
    assert!(!p.ports.contains_key(&3) && p.ports.contains_key(&2));
    // A macvlan in its own MAC's modes claims nothing the router would take.
    upper.link.kind = "macvlan".into();
    upper.link.claims_lower = false;
    m.links.insert(7, upper);
    assert!(m.plan().ports.contains_key(&3));
}

#[test]
fn a_capture_moves_its_ports_to_tc_and_a_socket_of_one_family_takes_that_family() {
    use crate::kernel::taps::{TapCount, Taps};
    let capture = TapCount {
        all: 1,
        ..TapCount::default()
    };
    // tcpdump -i d1: every routed port at TC (d1 takes no XDP redirect, nor may its frames
    // be taken before the capture sees them), both families still fast.
    let mut m = forwarding_model();
    m.taps = Taps([(3, capture)].into());
    let p = m.plan();
    for idx in [2, 3] {
        let port = &p.ports[&idx];
        assert!(port.features.tc && !port.off_v4 && !port.off_v6);
        assert!(
            port.notes
                .iter()
                .any(|n| n.contains("router at TC: egress d1 has 1 packet captures")),
            "{:?}",
            port.notes
        );
    }
    // tcpdump -i any: the same for every port.
    m.taps = Taps([(0, capture)].into());
    assert!(m.plan().ports[&2].features.tc);
    // A DHCP client's socket bound to IPv4 on d0: IPv4 received there is the kernel's.
    m.taps = Taps(
        [(
            2,
            TapCount {
                ipv4: 1,
                ..TapCount::default()
            },
        )]
        .into(),
    );
    let p = m.plan();
    assert!(
        !p.ports[&2].features.tc,
        "a socket of one protocol sees no egress: XDP"
    );
    assert!(p.ports[&2].off_v4 && !p.ports[&2].off_v6 && !p.ports[&3].off_v4);
    assert!(p.ports[&2]
        .notes
        .iter()
        .any(|n| n.contains("router4 -> kernel: 1 packet sockets bound to IPv4")));
    // A bridge port with a capture: its bridge at TC, and forced to XDP, the port is the
    // kernel's.
    let mut m = bridged_model(false);
    m.taps = Taps([(5, capture)].into());
    m.bridge_hook = BridgeHook::Auto;
    let p = m.plan();
    assert!(p.ports[&4].features.tc && p.bridge_ports.contains_key(&5));
    m.bridge_hook = BridgeHook::Xdp;
    let p = m.plan();
    assert!(!p.bridge_ports.contains_key(&5) && p.bridge_ports.contains_key(&4));
    assert!(p.ports[&5].notes[0].contains("has 1 packet captures"));
}

#[test]
fn receive_offloads_that_hide_what_xdp_sees_are_followed() {
    // LRO: the forwarding path drops merged skbs; the port is not served.
    let mut m = forwarding_model();
    m.links.get_mut(&3).unwrap().lro = true;
    let p = m.plan();
    assert!(!p.ports.contains_key(&3) && p.ports.contains_key(&2));
    // Tags in metadata (every veth): at XDP the program asks the driver for them.
    let mut m = forwarding_model();
    for l in m.links.values_mut() {
        l.strips_vlan = !l.loopback;
    }
    for i in [2, 3] {
        m.apply(&Event::XdpFeatures {
            ifindex: i,
            features: Some(NETDEV_XDP_ACT_NDO_XMIT | 0x3 | XDP_RX_VLAN_TAG),
        });
    }
    let p = m.plan();
    assert!(!p.ports[&2].features.tc && p.ports[&2].features.vlan_meta);
    // A driver that strips tags and cannot show them: every routed port at TC, and the note
    // says what to do.
    m.links.get_mut(&3).unwrap().link.kind = "eth".into();
    m.apply(&takes_xdp(3));
    let p = m.plan();
    for i in [2, 3] {
        let port = &p.ports[&i];
        assert!(port.features.tc && !port.features.vlan_meta);
        assert!(
            port.notes
                .iter()
                .any(|n| n.contains("router at TC: d1 strips VLAN tags")
                    && n.contains("ethtool -K d1 rxvlan off")),
            "{:?}",
            port.notes
        );
    }
    // A bridge port like it: its bridge at TC, or forced to XDP, the port is the kernel's.
    let mut m = bridged_model(false);
    m.links.get_mut(&5).unwrap().strips_vlan = true;
    m.links.get_mut(&4).unwrap().link.kind = "eth".into();
    let p = m.plan();
    assert!(p.ports[&4].features.tc);
    assert!(p.ports[&4]
        .notes
        .iter()
        .any(|n| n.contains("port p5 strips VLAN tags")));
    m.bridge_hook = BridgeHook::Xdp;
    let p = m.plan();
    assert!(!p.bridge_ports.contains_key(&5) && p.bridge_ports.contains_key(&4));
    assert!(!p.ports[&4].features.vlan_meta, "p4 strips nothing");
}

#[test]
fn ipvs_services_and_selinux_checking_everything_hand_their_families_over() {
    use crate::kernel::forward_hooks::{ForwardHooks, Selinux};
    let mut m = forwarding_model();
    m.forward_hooks = ForwardHooks {
        ipvs: [0, 2],
        selinux: Selinux::Passes,
    };
    let p = &m.plan().ports[&2];
    assert!(!p.off_v4 && p.off_v6);
    assert!(p
        .notes
        .iter()
        .any(|n| n.contains("router6 -> kernel: 2 IPVS virtual services")));
    m.forward_hooks = ForwardHooks {
        ipvs: [0, 0],
        selinux: Selinux::ChecksAll,
    };
    let p = &m.plan().ports[&2];
    assert!(p.off_v4 && p.off_v6);
    // Peer controls alone: the kernel's, unless the operator says no label is in use.
    m.forward_hooks.selinux = Selinux::ChecksIfLabeled;
    assert!(m.plan().ports[&2].off_v4);
    m.assume_no_selinux_labels = true;
    assert!(!m.plan().ports[&2].off_v4 && !m.plan().ports[&2].off_v6);
}

#[test]
fn ipv6_forwarding_off_and_multiple_spanning_trees_go_to_the_kernel() {
    let mut m = forwarding_model();
    m.sysctls.v6_forwarding = false;
    let p = &m.plan().ports[&2];
    assert!(p.off_v6 && !p.off_v4);
    assert!(p
        .notes
        .iter()
        .any(|n| n == "router6 -> kernel: IPv6 forwarding disabled"));
    let mut m = bridged_model(false);
    m.links
        .get_mut(&9)
        .unwrap()
        .link
        .bridge
        .as_mut()
        .unwrap()
        .mst = true;
    let p = m.plan();
    assert!(p.bridge_ports.is_empty());
    assert!(p.ports[&4].notes[0].contains("multiple spanning tree"));
}
