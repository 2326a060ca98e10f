//! The decapsulator (bpf/decap.bpf.c) through BPF_PROG_TEST_RUN: each tunnel the load
//! balancer sends (IPIP, 6in4, IP6IP6, 4in6, and GUE to a GUE port) to a VIP comes out as the inner packet behind the
//! same Ethernet addresses, with XDP_PASS and its counter; everything else passes unchanged,
//! counted by reason. The live test, with the load balancer, is crates/wirespeed/tests/lb_tunnel.rs.
//!
//! Needs root (BPF); run under the lab lock:
//! `flock /tmp/ws-priv.lock cargo test --profile ci -p wirespeed-lb --test decap -- --test-threads=1`

use std::net::IpAddr;

use wirespeed_lb::datapath::XDP_PASS;
use wirespeed_lb::decap::{Decap, DecapConfig, XdpMode, COUNTERS};
use wirespeed_testkit::csum::verify_checksums;
use wirespeed_testkit::frame::*;
use wirespeed_testkit::lb_lab::ip;

const VIP4: &str = "198.18.100.1";
const VIP6: &str = "fd00:100::1";
const CLIENT4: &str = "198.18.50.5";
const CLIENT6: &str = "fd00:50::5";
const LB4: &str = "198.18.2.1";
const REAL4: &str = "198.18.2.10";
const LB6: &str = "fd00:2::1";
const REAL6: &str = "fd00:2::10";
const REAL_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x02, 0x10];
const LB_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x02, 0x01];
const GUE_PORT: u16 = 6080;

fn load(outer_dsts: &[&str]) -> Decap {
    load_gue(outer_dsts, &[GUE_PORT])
}

fn load_gue(outer_dsts: &[&str], gue_ports: &[u16]) -> Decap {
    wirespeed_lab::require_root();
    let dsts: Vec<IpAddr> = outer_dsts.iter().map(|a| ip(a)).collect();
    Decap::load(&[ip(VIP4), ip(VIP6)], &dsts, gue_ports).unwrap()
}

/// `inner` as GUE variant 1: UDP from `src` to `dst`:`port` (checksum computed), the inner
/// IP packet its payload, behind the real's Ethernet addresses.
fn gue(src: &str, dst: &str, port: u16, inner: &[u8]) -> Vec<u8> {
    let l4 = L4::Udp {
        sport: 50000,
        dport: port,
        payload: inner.to_vec(),
    };
    frame(REAL_MAC, LB_MAC, ip(src), ip(dst), &l4)
}

/// `inner` inside an outer header from `src` to `dst` (protocol 4 or 41 by the inner
/// family), behind the real's Ethernet addresses.
fn tunneled(src: &str, dst: &str, inner: &[u8]) -> Vec<u8> {
    let proto = if inner[0] >> 4 == 6 { 41 } else { 4 };
    let mut p = ip_header(ip(src), ip(dst), proto, inner.len());
    p.extend(inner);
    eth(REAL_MAC, LB_MAC, ip(src).is_ipv6(), &p)
}

/// The only counters that moved since `before`, by name.
fn moved(d: &Decap, before: &[(&'static str, u64)]) -> Vec<(&'static str, u64)> {
    d.counters()
        .unwrap()
        .into_iter()
        .zip(before)
        .filter(|((_, now), (_, was))| now != was)
        .map(|((n, now), (_, was))| (n, now - was))
        .collect()
}

/// Runs `input`; asserts the verdict is XDP_PASS and exactly `counter` moved, by one.
fn run(d: &Decap, input: &[u8], counter: &str) -> Vec<u8> {
    let before = d.counters().unwrap();
    let (verdict, out) = d.test_run(input).unwrap();
    assert_eq!(verdict, XDP_PASS, "{counter}");
    assert_eq!(moved(d, &before), vec![(counter_name(counter), 1)]);
    out
}

fn counter_name(n: &str) -> &'static str {
    COUNTERS
        .iter()
        .find(|c| **c == n)
        .unwrap_or_else(|| panic!("no counter {n}"))
}

#[test]
fn each_tunnel_to_a_vip_becomes_its_inner_packet() {
    let d = load(&[]);
    let cases = [
        (LB4, REAL4, CLIENT4, VIP4, "decap_ipip"),
        (LB4, REAL4, CLIENT6, VIP6, "decap_6in4"),
        (LB6, REAL6, CLIENT6, VIP6, "decap_ip6ip6"),
        (LB6, REAL6, CLIENT4, VIP4, "decap_4in6"),
    ];
    for (osrc, odst, client, vip, counter) in cases {
        for l4 in [tcp(40000, 80, SYN), udp(40000, 53)] {
            let inner = ip_packet(ip(client), ip(vip), &l4);
            let out = run(&d, &tunneled(osrc, odst, &inner), counter);
            let expect = eth(REAL_MAC, LB_MAC, ip(vip).is_ipv6(), &inner);
            assert_eq!(out, expect, "{counter} {l4:?}");
            verify_checksums(&out);
        }
    }
}

#[test]
fn gue_to_a_vip_on_a_gue_port_becomes_its_inner_packet() {
    let d = load(&[]);
    let cases = [
        (LB4, REAL4, CLIENT4, VIP4, "decap_gue_v4"),
        (LB4, REAL4, CLIENT6, VIP6, "decap_gue_v4"),
        (LB6, REAL6, CLIENT6, VIP6, "decap_gue_v6"),
        (LB6, REAL6, CLIENT4, VIP4, "decap_gue_v6"),
    ];
    for (osrc, odst, client, vip, counter) in cases {
        for l4 in [tcp(40000, 80, SYN), udp(40000, 53)] {
            let inner = ip_packet(ip(client), ip(vip), &l4);
            let out = run(&d, &gue(osrc, odst, GUE_PORT, &inner), counter);
            let expect = eth(REAL_MAC, LB_MAC, ip(vip).is_ipv6(), &inner);
            assert_eq!(out, expect, "{counter} {l4:?}");
            verify_checksums(&out);
        }
    }
}

#[test]
fn gue_elsewhere_or_malformed_passes_unchanged() {
    let d = load(&[]);
    let to_vip4 = ip_packet(ip(CLIENT4), ip(VIP4), &tcp(40000, 80, SYN));
    let to_vip6 = ip_packet(ip(CLIENT6), ip(VIP6), &tcp(40000, 80, SYN));
    let to_other = ip_packet(ip(CLIENT4), ip("198.18.100.2"), &tcp(40000, 80, SYN));
    // A UDP length that disagrees with the IP length.
    let mut bad_len = gue(LB4, REAL4, GUE_PORT, &to_vip4);
    bad_len[38..40].copy_from_slice(&((to_vip4.len() + 4) as u16).to_be_bytes());
    // A GUE variant 0 header (version bits 00) is not decapsulated: the load balancer sends
    // variant 1 only.
    let mut variant0 = vec![0u8, 4, 0, 0];
    variant0.extend(&to_vip4);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (gue(LB4, REAL4, GUE_PORT + 1, &to_vip4), "pass_not_tunnel"),
        (gue(LB6, REAL6, GUE_PORT + 1, &to_vip6), "pass_not_tunnel"),
        (gue(LB4, REAL4, GUE_PORT, &variant0), "pass_not_tunnel"),
        (gue(LB4, REAL4, GUE_PORT, &to_other), "pass_not_vip"),
        (bad_len, "pass_bad_header"),
        (gue(LB4, REAL4, GUE_PORT, &to_vip4[..12]), "pass_bad_header"),
    ];
    for (input, counter) in cases {
        let out = run(&d, &input, counter);
        assert_eq!(out, input, "{counter}: the frame passes unchanged");
    }
}

#[test]
fn only_the_given_gue_ports_are_decapsulated() {
    let d = load_gue(&[REAL4], &[7000, 7001]);
    let to_vip4 = ip_packet(ip(CLIENT4), ip(VIP4), &tcp(40000, 80, SYN));
    for port in [7000, 7001] {
        let out = run(&d, &gue(LB4, REAL4, port, &to_vip4), "decap_gue_v4");
        assert_eq!(&out[14..], &to_vip4[..]);
    }
    let input = gue(LB4, REAL4, GUE_PORT, &to_vip4);
    assert_eq!(run(&d, &input, "pass_not_tunnel"), input);
    // The outer-destination filter holds for GUE too.
    let input = gue(LB4, "198.18.2.11", 7000, &to_vip4);
    assert_eq!(run(&d, &input, "pass_not_local"), input);
    let none = load_gue(&[], &[]);
    let input = gue(LB4, REAL4, GUE_PORT, &to_vip4);
    assert_eq!(run(&none, &input, "pass_not_tunnel"), input);
    let err = Decap::load(&[ip(VIP4)], &[], &[0])
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("1-65535"), "{err}");
}

#[test]
fn what_is_no_tunnel_to_a_vip_passes_unchanged() {
    let d = load(&[]);
    let to_vip4 = ip_packet(ip(CLIENT4), ip(VIP4), &tcp(40000, 80, SYN));
    let to_other = ip_packet(ip(CLIENT4), ip("198.18.100.2"), &tcp(40000, 80, SYN));
    let to_other6 = ip_packet(ip(CLIENT6), ip("fd00:100::2"), &udp(40000, 53));

    let mut options = tunneled(LB4, REAL4, &to_vip4);
    // IHL 6 with a 4-byte NOP option: the outer header is 24 bytes.
    options[14] = 0x46;
    options.splice(34..34, [1u8, 1, 1, 1]);
    let mut fragment = tunneled(LB4, REAL4, &to_vip4);
    fragment[20] = 0x20; // more fragments
    let mut ext = tunneled(LB6, REAL6, &to_vip4);
    ext[20] = 60; // destination options
    let mut vlan = tunneled(LB4, REAL4, &to_vip4);
    vlan.splice(12..12, [0x81, 0x00, 0x00, 0x05]);
    let mut arp = tunneled(LB4, REAL4, &to_vip4);
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    let full = tunneled(LB4, REAL4, &to_vip4);
    // (BPF_PROG_TEST_RUN refuses frames shorter than an Ethernet header, so none is tried.)
    // Cut inside the inner header, with the outer length made to match: the outer header is
    // whole, the inner one is not.
    let mut cut_inner = full[..14 + 20 + 12].to_vec();
    cut_inner[16..18].copy_from_slice(&32u16.to_be_bytes());
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (tunneled(LB4, REAL4, &to_other), "pass_not_vip"),
        (tunneled(LB6, REAL6, &to_other6), "pass_not_vip"),
        (
            frame(
                REAL_MAC,
                LB_MAC,
                ip(CLIENT4),
                ip(VIP4),
                &tcp(40000, 80, SYN),
            ),
            "pass_not_tunnel",
        ),
        (
            frame(REAL_MAC, LB_MAC, ip(CLIENT6), ip(VIP6), &udp(40000, 53)),
            "pass_not_tunnel",
        ),
        (options, "pass_ip_options"),
        (fragment, "pass_fragment"),
        (ext, "pass_ip_options"),
        (vlan, "pass_vlan"),
        (arp, "pass_not_ip"),
        (full[..14 + 20 + 10].to_vec(), "pass_bad_header"),
        (cut_inner, "pass_bad_header"),
        (full[..14 + 10].to_vec(), "pass_bad_header"),
    ];
    for (input, counter) in cases {
        let out = run(&d, &input, counter);
        assert_eq!(out, input, "{counter}: the frame passes unchanged");
    }
}

#[test]
fn given_outer_destinations_only_those_are_decapsulated() {
    let d = load(&[REAL4, REAL6]);
    let to_vip4 = ip_packet(ip(CLIENT4), ip(VIP4), &tcp(40000, 80, SYN));
    let to_vip6 = ip_packet(ip(CLIENT6), ip(VIP6), &tcp(40000, 80, SYN));
    for (src, dst, inner, counter) in [
        (LB4, REAL4, &to_vip4, "decap_ipip"),
        (LB6, REAL6, &to_vip6, "decap_ip6ip6"),
        (LB4, "198.18.2.11", &to_vip4, "pass_not_local"),
        (LB6, "fd00:2::11", &to_vip6, "pass_not_local"),
    ] {
        let input = tunneled(src, dst, inner);
        let out = run(&d, &input, counter);
        if counter == "pass_not_local" {
            assert_eq!(out, input);
        } else {
            assert_eq!(&out[14..], &inner[..]);
        }
    }
}

#[test]
fn attach_is_refused_outside_a_lab_namespace_and_without_a_vip() {
    wirespeed_lab::require_root();
    let cfg = DecapConfig {
        ifaces: vec!["lo".into()],
        vips: vec![ip(VIP4)],
        ..DecapConfig::default()
    };
    // The test runs in the host's namespace: nothing may be attached here.
    let err = Decap::attach(&cfg).err().expect("refused").to_string();
    assert!(
        err.contains("refusing to attach outside a lab namespace"),
        "{err}"
    );
    assert!(err.contains("--allow-host"), "{err}");
    let err = Decap::load(&[], &[], &[])
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("pass --vip"), "{err}");
}

#[test]
fn attach_runs_native_on_a_veth_generic_on_lo_and_detaches_on_drop() {
    wirespeed_lab::require_root();
    let ns =
        wirespeed_lab::Netns::create(&format!("ws-dcp{}", std::process::id() % 100000)).unwrap();
    ns.ip(&["link", "add", "r0", "type", "veth", "peer", "name", "r0p"])
        .unwrap();
    ns.ip(&["link", "set", "r0", "up"]).unwrap();
    ns.ip(&["link", "set", "lo", "up"]).unwrap();
    let shown = |dev: &str| ns.ip(&["-d", "link", "show", dev]).unwrap();
    let (d, modes) = wirespeed_sys::netns::in_netns(ns.name(), || {
        let d = Decap::attach(&DecapConfig {
            ifaces: vec!["r0".into(), "lo".into()],
            vips: vec![ip(VIP4)],
            ..DecapConfig::default()
        })
        .unwrap();
        let modes: Vec<_> = d
            .attached()
            .into_iter()
            .map(|(n, m)| (n.to_string(), m))
            .collect();
        (d, modes)
    })
    .unwrap();
    // lo has no driver XDP: the native attach is refused and generic mode takes it.
    assert_eq!(
        modes,
        vec![
            ("r0".to_string(), XdpMode::Native),
            ("lo".to_string(), XdpMode::Generic)
        ]
    );
    assert!(shown("r0").contains("prog/xdp id"), "{}", shown("r0"));
    assert!(shown("r0").contains("name decap"), "{}", shown("r0"));
    assert!(shown("lo").contains(" xdpgeneric "), "{}", shown("lo"));
    assert!(shown("lo").contains("name decap"), "{}", shown("lo"));
    drop(d);
    for dev in ["r0", "lo"] {
        assert!(!shown(dev).contains("prog/xdp"), "{}", shown(dev));
    }
    let err = wirespeed_sys::netns::in_netns(ns.name(), || {
        Decap::attach(&DecapConfig {
            ifaces: vec!["nosuch0".into()],
            vips: vec![ip(VIP4)],
            ..DecapConfig::default()
        })
        .err()
        .map(|e| e.to_string())
    })
    .unwrap()
    .expect("refused");
    assert!(err.contains("no interface nosuch0"), "{err}");
}
