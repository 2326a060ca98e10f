//! GUE tunnel fixtures through BPF_PROG_TEST_RUN (the IP-in-IP ones are in fixtures.rs): an
//! input frame gives an expected verdict and output frame, byte for byte, with the outer
//! headers, the UDP length and every checksum computed here from scratch. The FIB the program
//! asks is a real one, in a lab namespace (see common::lab).

mod common;

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use common::*;
use wirespeed_lb::datapath::{Reason, XdpDataPlane, XDP_PASS, XDP_REDIRECT, XDP_TX};
use wirespeed_lb::model::{
    DataPlane, Mode, Plan, PlannedReal, PlannedService, Proto, Scheduler, ServiceKey, Tunnel,
};

const VIP4: &str = "198.18.100.1";
const VIP6: &str = "fd00:100::1";
const CLIENT4: &str = "198.18.50.5";
const CLIENT6: &str = "fd00:50::5";
const REAL4: &str = "198.18.2.10";
const REAL6: &str = "fd00:2::10";
/// The lab's own addresses on the reals' side: the FIB's source for the outer header.
const LB4: &str = "198.18.2.1";
const LB6: &str = "fd00:2::1";
const GUE_PORT: u16 = 6080;

/// One service (`proto` VIP:80, mh) to one GUE real at `real`:8080.
fn gue_plan(proto: Proto, vip: &str, real: &str, csum: bool) -> Plan {
    let vip = SocketAddr::new(ip(vip), 80);
    Plan {
        ring_size: RING,
        services: vec![PlannedService {
            key: ServiceKey { proto, vip },
            scheduler: Scheduler::Mh,
            lookup: vec![0; RING as usize],
            laddrs: Vec::new(),
            toa: false,
        }],
        reals: vec![Some(PlannedReal {
            service: 0,
            addr: SocketAddr::new(ip(real), 8080),
            mode: Mode::Tunnel,
            tunnel: Tunnel::Gue {
                port: GUE_PORT,
                csum,
            },
        })],
    }
}

/// The frame GUE sends to real 0: Ethernet, the outer IP header (as common::ip_header writes
/// it: DF, TTL 64), UDP from `sport` to the GUE port whose payload is `inner` itself, the
/// UDP checksum over all of it (or zero).
fn gue_frame(lab: &Lab, src: &str, dst: &str, sport: u16, inner: &[u8], csum: bool) -> Vec<u8> {
    let l4 = L4::Udp {
        sport,
        dport: GUE_PORT,
        payload: inner.to_vec(),
    };
    let (proto, mut udp) = l4_bytes(ip(src), ip(dst), &l4);
    assert_eq!(udp.len(), inner.len() + 8, "UDP length");
    if !csum {
        udp[6..8].copy_from_slice(&[0, 0]);
    }
    let mut p = ip_header(ip(src), ip(dst), proto, udp.len());
    p.extend(udp);
    eth(REAL_MACS[0], lab.out_mac, ip(dst).is_ipv6(), &p)
}

/// The UDP source port of a GUE frame to a real of family `outer_v6`.
fn gue_sport(out: &[u8], outer_v6: bool) -> u16 {
    let udp = 14 + if outer_v6 { 40 } else { 20 };
    u16::from_be_bytes([out[udp], out[udp + 1]])
}

/// Sends `inner` and checks the output against the expected GUE frame: the source port and
/// (IPv6) flow label are the flow hash's, taken from the output and checked for range.
fn check_gue(
    lab: &Lab,
    dp: &XdpDataPlane,
    inner: &[u8],
    outer: (&str, &str),
    csum: bool,
) -> Vec<u8> {
    let inner_v6 = inner[0] >> 4 == 6;
    let outer_v6 = ip(outer.1).is_ipv6();
    let input = eth(lab.in_mac, ROUTER_MAC, inner_v6, inner);
    let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
    assert_eq!(v, XDP_REDIRECT, "{out:02x?}");
    let sport = gue_sport(&out, outer_v6);
    assert!(sport >= 0xc000, "source port {sport} in the dynamic range");
    // The inner packet is forwarded: one hop less.
    let mut expect = gue_frame(lab, outer.0, outer.1, sport, &hop(inner), csum);
    let inner_proto = if inner_v6 { inner[6] } else { inner[9] };
    if !outer_v6 && (inner_proto == 1 || inner_proto == 58) {
        // A too-big forwarded to the real goes without DF (never an ICMP about an ICMP).
        expect[20] &= !0x40;
        expect[24..26].copy_from_slice(&[0, 0]);
        let c = fold(sum16(&expect[14..34], 0));
        expect[24..26].copy_from_slice(&c.to_be_bytes());
    }
    if outer_v6 {
        // Traffic class of the inner packet (0), the flow hash as flow label.
        assert_eq!(out[15] >> 4, 0, "traffic class");
        expect[15..18].copy_from_slice(&out[15..18]);
    }
    assert_eq!(out, expect, "GUE frame");
    verify_checksums(&out);
    verify_checksums(&eth(
        lab.in_mac,
        ROUTER_MAC,
        inner_v6,
        &out[out.len() - inner.len()..],
    ));
    out
}

/// TCP with an odd-length payload: the checksums must hold whatever the parity.
fn odd_tcp(sport: u16) -> L4 {
    L4::Tcp {
        sport,
        dport: 80,
        flags: ACK | PSH,
        options: Vec::new(),
        payload: b"hello".to_vec(),
    }
}

#[test]
fn gue_v4_in_v4_without_and_with_its_udp_checksum() {
    with_lab(
        "gue44",
        cfg(),
        gue_plan(Proto::Tcp, VIP4, REAL4, false),
        |lab, dp| {
            let inner = ip_packet(ip(CLIENT4), ip(VIP4), &tcp(40000, 80, SYN));
            let out = check_gue(&lab, dp, &inner, (LB4, REAL4), false);
            assert_eq!(
                &out[40..42],
                &[0, 0],
                "no UDP checksum by default over IPv4"
            );
            assert_eq!(count(dp, Reason::FwdTunnel), 1);

            // --tun-csum: the checksum over the whole datagram, for TCP and for UDP inside.
            dp.apply(&gue_plan(Proto::Tcp, VIP4, REAL4, true)).unwrap();
            let inner = ip_packet(ip(CLIENT4), ip(VIP4), &odd_tcp(40001));
            check_gue(&lab, dp, &inner, (LB4, REAL4), true);
            dp.apply(&gue_plan(Proto::Udp, VIP4, REAL4, true)).unwrap();
            let inner = ip_packet(ip(CLIENT4), ip(VIP4), &udp(40002, 80));
            check_gue(&lab, dp, &inner, (LB4, REAL4), true);
            // An IPv4 UDP datagram sent without checksum: nothing to derive one from, and over
            // IPv4 the outer one may be zero.
            let mut bare = inner.clone();
            bare[26..28].copy_from_slice(&[0, 0]);
            let out = check_gue(&lab, dp, &bare, (LB4, REAL4), false);
            assert_eq!(&out[40..42], &[0, 0]);
        },
    );
}

#[test]
fn gue_v6_in_v6_always_carries_its_udp_checksum() {
    with_lab(
        "gue66",
        cfg(),
        gue_plan(Proto::Tcp, VIP6, REAL6, true),
        |lab, dp| {
            let inner = ip_packet(ip(CLIENT6), ip(VIP6), &tcp(40000, 80, SYN));
            let out = check_gue(&lab, dp, &inner, (LB6, REAL6), true);
            assert_ne!(&out[60..62], &[0, 0], "a UDP checksum over IPv6");
            let inner = ip_packet(ip(CLIENT6), ip(VIP6), &odd_tcp(40001));
            check_gue(&lab, dp, &inner, (LB6, REAL6), true);
            dp.apply(&gue_plan(Proto::Udp, VIP6, REAL6, true)).unwrap();
            let inner = ip_packet(ip(CLIENT6), ip(VIP6), &udp(40002, 80));
            check_gue(&lab, dp, &inner, (LB6, REAL6), true);
            assert_eq!(count(dp, Reason::FwdTunnel), 3);
        },
    );
}

#[test]
fn gue_across_families_v6_in_v4_and_v4_in_v6() {
    with_lab(
        "gue64",
        cfg(),
        gue_plan(Proto::Tcp, VIP6, REAL4, false),
        |lab, dp| {
            let inner = ip_packet(ip(CLIENT6), ip(VIP6), &odd_tcp(40000));
            check_gue(&lab, dp, &inner, (LB4, REAL4), false);

            dp.apply(&gue_plan(Proto::Tcp, VIP4, REAL6, true)).unwrap();
            let inner = ip_packet(ip(CLIENT4), ip(VIP4), &odd_tcp(40001));
            check_gue(&lab, dp, &inner, (LB6, REAL6), true);

            // An IPv4 UDP datagram without checksum cannot get the IPv6 real's mandatory outer
            // one without reading all of it: the kernel's, untouched.
            dp.apply(&gue_plan(Proto::Udp, VIP4, REAL6, true)).unwrap();
            let inner = ip_packet(ip(CLIENT4), ip(VIP4), &udp(40002, 80));
            check_gue(&lab, dp, &inner, (LB6, REAL6), true);
            let mut bare = inner.clone();
            bare[26..28].copy_from_slice(&[0, 0]);
            let input = eth(lab.in_mac, ROUTER_MAC, false, &bare);
            let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
            assert_eq!((v, &out), (XDP_PASS, &input));
            assert_eq!(count(dp, Reason::PassGueNoCsum), 1);
        },
    );
}

#[test]
fn the_udp_source_port_follows_the_flow() {
    with_lab(
        "guesp",
        cfg(),
        gue_plan(Proto::Tcp, VIP4, REAL4, false),
        |lab, dp| {
            let mut ports = BTreeSet::new();
            for sport in 40000..40016 {
                let inner = ip_packet(ip(CLIENT4), ip(VIP4), &tcp(sport, 80, SYN));
                let out = check_gue(&lab, dp, &inner, (LB4, REAL4), false);
                let again = check_gue(&lab, dp, &inner, (LB4, REAL4), false);
                assert_eq!(out, again, "one flow, one source port");
                ports.insert(gue_sport(&out, false));
            }
            assert!(ports.len() > 8, "flows spread over source ports: {ports:?}");
        },
    );
}

/// A TCP segment whose IP packet is `len` bytes long.
fn big_tcp(len: usize, v6: bool) -> L4 {
    let hdr = if v6 { 40 } else { 20 } + 20;
    L4::Tcp {
        sport: 40000,
        dport: 80,
        flags: ACK,
        options: Vec::new(),
        payload: vec![0x5a; len - hdr],
    }
}

#[test]
fn too_big_counts_the_gue_overhead() {
    // The lab's MTU is 1500: GUE leaves 1472 bytes of inner packet over IPv4, 1452 over IPv6.
    for (tag, vip, client, real, outer, mtu) in [
        ("gtb4", VIP4, CLIENT4, REAL4, (LB4, REAL4), 1472usize),
        ("gtb6", VIP6, CLIENT6, REAL6, (LB6, REAL6), 1452),
    ] {
        with_lab(
            tag,
            cfg(),
            gue_plan(Proto::Tcp, vip, real, true),
            move |lab, dp| {
                let v6 = ip(vip).is_ipv6();
                let fits = ip_packet(ip(client), ip(vip), &big_tcp(mtu, v6));
                check_gue(&lab, dp, &fits, outer, true);
                let inner = ip_packet(ip(client), ip(vip), &big_tcp(mtu + 1, v6));
                let input = eth(lab.in_mac, ROUTER_MAC, v6, &inner);
                let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
                assert_eq!(v, XDP_TX);
                let icmp = if v6 {
                    L4::Icmp {
                        ty: 2,
                        code: 0,
                        rest: (mtu as u32).to_be_bytes(),
                        payload: inner[..48].to_vec(),
                    }
                } else {
                    let m = (mtu as u16).to_be_bytes();
                    L4::Icmp {
                        ty: 3,
                        code: 4,
                        rest: [0, 0, m[0], m[1]],
                        payload: inner[..28].to_vec(),
                    }
                };
                let (vip, client): (IpAddr, IpAddr) = (ip(vip), ip(client));
                assert_eq!(out, frame(ROUTER_MAC, lab.in_mac, vip, client, &icmp));
                verify_checksums(&out);
                assert_eq!(count(dp, Reason::IcmpTooBigSent), 1);
            },
        );
    }
}

#[test]
fn a_too_big_for_a_gue_flow_reaches_its_real_with_checksums_right() {
    // ICMPv4 (no pseudo-header) and ICMPv6 (one) inside a checksummed GUE datagram.
    for (tag, vip, client, real, outer, router) in [
        ("gic4", VIP4, CLIENT4, REAL4, (LB4, REAL4), "198.18.50.1"),
        ("gic6", VIP6, CLIENT6, REAL6, (LB6, REAL6), "fd00:50::1"),
    ] {
        with_lab(
            tag,
            cfg(),
            gue_plan(Proto::Tcp, vip, real, true),
            move |lab, dp| {
                let quoted = ip_packet(ip(vip), ip(client), &tcp(80, 40000, ACK));
                let icmp = if ip(vip).is_ipv6() {
                    L4::Icmp {
                        ty: 2,
                        code: 0,
                        rest: 1400u32.to_be_bytes(),
                        payload: quoted[..48].to_vec(),
                    }
                } else {
                    L4::Icmp {
                        ty: 3,
                        code: 4,
                        rest: [0, 0, 0x05, 0x00],
                        payload: quoted[..28].to_vec(),
                    }
                };
                let inner = ip_packet(ip(router), ip(vip), &icmp);
                check_gue(&lab, dp, &inner, outer, true);
                assert_eq!(count(dp, Reason::IcmpTooBigFwd), 1);
            },
        );
    }
}
