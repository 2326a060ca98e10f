//! Data-path fixtures through BPF_PROG_TEST_RUN, Katran-style: an input frame gives an
//! expected verdict and output frame, per mode and feature. The FIB the program asks is a
//! real one, in a lab namespace (see common::lab); every output frame's checksums are
//! recomputed from scratch.

mod common;

use std::net::{IpAddr, SocketAddr};

use libbpf_rs::MapCore;

use common::*;
use wirespeed_lb::datapath::{
    AttachConfig, Reason, XdpDataPlane, XDP_DROP, XDP_PASS, XDP_REDIRECT, XDP_TX,
};
use wirespeed_lb::model::{
    DataPlane, Mode, Plan, PlannedReal, PlannedService, Proto, Scheduler, ServiceKey,
};

const VIP4: &str = "198.18.100.1";
const VIP6: &str = "fd00:100::1";
const CLIENT4: &str = "198.18.50.5";
const CLIENT6: &str = "fd00:50::5";

fn service(proto: Proto, vip: SocketAddr, sched: Scheduler, lookup: Vec<u32>) -> PlannedService {
    PlannedService {
        key: ServiceKey { proto, vip },
        scheduler: sched,
        lookup,
        laddrs: Vec::new(),
        toa: false,
    }
}

fn real(service: u32, addr: SocketAddr, mode: Mode) -> Option<PlannedReal> {
    Some(PlannedReal {
        service,
        addr,
        mode,
        tunnel: Default::default(),
    })
}

/// A one-service plan: TCP VIP:80 (mh over the given slots, repeated to fill the ring) to
/// reals of `mode` at `addrs` (port 8080).
fn one_service(vip: &str, mode: Mode, addrs: &[&str], slots: &[u32]) -> Plan {
    let lookup = (0..RING as usize).map(|i| slots[i % slots.len()]).collect();
    Plan {
        ring_size: RING,
        services: vec![service(Proto::Tcp, sa(vip, 80), Scheduler::Mh, lookup)],
        reals: addrs.iter().map(|a| real(0, sa(a, 8080), mode)).collect(),
    }
}

#[test]
fn dr_v4_rewrites_only_the_macs() {
    let plan = one_service(VIP4, Mode::Dr, &["198.18.2.10"], &[0]);
    with_lab("dr4", cfg(), plan, |lab, dp| {
        let l4 = tcp(40000, 80, SYN);
        let input = frame(lab.in_mac, ROUTER_MAC, ip(CLIENT4), ip(VIP4), &l4);
        let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
        assert_eq!(v, XDP_REDIRECT);
        let expect = hopped(&frame(
            REAL_MACS[0],
            lab.out_mac,
            ip(CLIENT4),
            ip(VIP4),
            &l4,
        ));
        assert_eq!(out, expect);
        verify_checksums(&out);
        assert_eq!(count(dp, Reason::FwdDr), 1);
    });
}

#[test]
fn dr_v6_rewrites_only_the_macs() {
    let plan = one_service(VIP6, Mode::Dr, &["fd00:2::10"], &[0]);
    with_lab("dr6", cfg(), plan, |lab, dp| {
        let l4 = udp(40000, 80);
        let mut plan = one_service(VIP6, Mode::Dr, &["fd00:2::10"], &[0]);
        plan.services[0].key.proto = Proto::Udp;
        dp.apply(&plan).unwrap();
        let input = frame(lab.in_mac, ROUTER_MAC, ip(CLIENT6), ip(VIP6), &l4);
        let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
        assert_eq!(v, XDP_REDIRECT);
        assert_eq!(
            out,
            hopped(&frame(
                REAL_MACS[0],
                lab.out_mac,
                ip(CLIENT6),
                ip(VIP6),
                &l4
            ))
        );
        verify_checksums(&out);
    });
}

/// The frame a tunnel sends: Ethernet to the real, the outer header, the packet as it came
/// less one hop.
fn tunneled(lab: &Lab, real: usize, src: &str, dst: &str, inner: &[u8]) -> Vec<u8> {
    let inner_proto = if inner[0] >> 4 == 4 { 4 } else { 41 };
    let mut p = ip_header(ip(src), ip(dst), inner_proto, inner.len());
    p.extend(hop(inner));
    eth(REAL_MACS[real], lab.out_mac, ip(dst).is_ipv6(), &p)
}

#[test]
fn tunnel_ipip_from_the_fib_source() {
    let plan = one_service(VIP4, Mode::Tunnel, &["198.18.2.10"], &[0]);
    with_lab("ipip", cfg(), plan, |lab, dp| {
        let inner = ip_packet(ip(CLIENT4), ip(VIP4), &tcp(40000, 80, SYN));
        let input = eth(lab.in_mac, ROUTER_MAC, false, &inner);
        let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
        assert_eq!(v, XDP_REDIRECT);
        assert_eq!(out, tunneled(&lab, 0, "198.18.2.1", "198.18.2.10", &inner));
        verify_checksums(&out);
        assert_eq!(count(dp, Reason::FwdTunnel), 1);
    });
}

#[test]
fn tunnel_ip6ip6_with_the_flow_hash_as_flow_label() {
    let plan = one_service(VIP6, Mode::Tunnel, &["fd00:2::10"], &[0]);
    with_lab("i66", cfg(), plan, |lab, dp| {
        let inner = ip_packet(ip(CLIENT6), ip(VIP6), &tcp(40000, 80, SYN));
        let input = eth(lab.in_mac, ROUTER_MAC, true, &inner);
        let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
        assert_eq!(v, XDP_REDIRECT);
        let mut expect = tunneled(&lab, 0, "fd00:2::1", "fd00:2::10", &inner);
        // The flow label is the flow's hash: whatever it is, the same for the flow's
        // every packet.
        assert_eq!(out[15] >> 4, 0, "traffic class of the inner packet (0)");
        expect[15..18].copy_from_slice(&out[15..18]);
        assert_eq!(out, expect);
        verify_checksums(&out);
        let (_, again) = dp.test_run(&input, lab.in_idx).unwrap();
        assert_eq!(again, out);
    });
}

#[test]
fn tunnel_6in4_takes_its_source_from_the_prefix_and_the_flow_hash() {
    let plan = one_service(VIP6, Mode::Tunnel, &["198.18.2.10"], &[0]);
    let c = AttachConfig {
        tunnel_src_v4: Some(("198.18.60.0".parse().unwrap(), 24)),
        ..cfg()
    };
    with_lab("6in4", c, plan, |lab, dp| {
        let mut srcs = std::collections::BTreeSet::new();
        for port in 40000..40016 {
            let inner = ip_packet(ip(CLIENT6), ip(VIP6), &tcp(port, 80, SYN));
            let input = eth(lab.in_mac, ROUTER_MAC, true, &inner);
            let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
            assert_eq!(v, XDP_REDIRECT);
            assert_eq!(
                &out[26..29],
                &[198, 18, 60],
                "outer source in the prefix: {out:02x?}"
            );
            let src = format!("198.18.60.{}", out[29]);
            assert_eq!(out, tunneled(&lab, 0, &src, "198.18.2.10", &inner));
            verify_checksums(&out);
            let (_, again) = dp.test_run(&input, lab.in_idx).unwrap();
            assert_eq!(again[26..30], out[26..30], "one source per flow");
            srcs.insert(out[29]);
        }
        assert!(srcs.len() > 4, "flows spread over sources: {srcs:?}");
    });
}

/// A TCP segment whose IP packet is `len` bytes long.
fn big_tcp(sport: u16, len: usize, v6: bool) -> L4 {
    let hdr = if v6 { 40 } else { 20 } + 20;
    L4::Tcp {
        sport,
        dport: 80,
        flags: ACK,
        options: Vec::new(),
        payload: vec![0x5a; len - hdr],
    }
}

#[test]
fn tunnel_too_big_is_answered_with_icmp_or_passed() {
    let plan = one_service(VIP4, Mode::Tunnel, &["198.18.2.10"], &[0]);
    with_lab("tbig", cfg(), plan, |lab, dp| {
        // A small packet first: the way to the real is then cached for small packets, and
        // the big one must still meet the MTU.
        let small = frame(
            lab.in_mac,
            ROUTER_MAC,
            ip(CLIENT4),
            ip(VIP4),
            &tcp(40001, 80, SYN),
        );
        let (v, _) = dp.test_run(&small, lab.in_idx).unwrap();
        assert_eq!(v, XDP_REDIRECT);
        // IPv4 with DF: frag-needed from the VIP, MTU 1500 - 20, quoting header and 8 bytes.
        let inner = ip_packet(ip(CLIENT4), ip(VIP4), &big_tcp(40000, 1500, false));
        let input = eth(lab.in_mac, ROUTER_MAC, false, &inner);
        let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
        assert_eq!(v, XDP_TX);
        let icmp = L4::Icmp {
            ty: 3,
            code: 4,
            rest: [0, 0, 0x05, 0xc8],
            payload: inner[..28].to_vec(),
        };
        assert_eq!(
            out,
            frame(ROUTER_MAC, lab.in_mac, ip(VIP4), ip(CLIENT4), &icmp)
        );
        verify_checksums(&out);
        assert_eq!(count(dp, Reason::IcmpTooBigSent), 1);

        // Without DF: the kernel's (it fragments).
        let mut no_df = input.clone();
        no_df[20] = 0;
        let c =
            fold(sum16(&no_df[14..34], 0) + (!u16::from_be_bytes([no_df[24], no_df[25]])) as u32);
        no_df[24..26].copy_from_slice(&c.to_be_bytes());
        verify_checksums(&no_df);
        let (v, _) = dp.test_run(&no_df, lab.in_idx).unwrap();
        assert_eq!(v, XDP_PASS);
        assert_eq!(count(dp, Reason::PassTooBig), 1);

        // IPv6: packet-too-big with MTU 1500 - 40.
        let plan6 = one_service(VIP6, Mode::Tunnel, &["fd00:2::10"], &[0]);
        dp.apply(&plan6).unwrap();
        let inner = ip_packet(ip(CLIENT6), ip(VIP6), &big_tcp(40000, 1500, true));
        let input = eth(lab.in_mac, ROUTER_MAC, true, &inner);
        let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
        assert_eq!(v, XDP_TX);
        let icmp = L4::Icmp {
            ty: 2,
            code: 0,
            rest: 1460u32.to_be_bytes(),
            payload: inner[..48].to_vec(),
        };
        assert_eq!(
            out,
            frame(ROUTER_MAC, lab.in_mac, ip(VIP6), ip(CLIENT6), &icmp)
        );
        verify_checksums(&out);
    });
}

#[test]
fn nat_translates_both_directions() {
    for (vip, client, real_ip) in [
        (VIP4, CLIENT4, "198.18.2.10"),
        (VIP6, CLIENT6, "fd00:2::10"),
    ] {
        let plan = one_service(vip, Mode::Nat, &[real_ip], &[0]);
        with_lab("nat", cfg(), plan, move |lab, dp| {
            let input = frame(
                lab.in_mac,
                ROUTER_MAC,
                ip(client),
                ip(vip),
                &tcp(40000, 80, SYN),
            );
            let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
            assert_eq!(v, XDP_REDIRECT);
            let expect = hopped(&frame(
                REAL_MACS[0],
                lab.out_mac,
                ip(client),
                ip(real_ip),
                &tcp(40000, 8080, SYN),
            ));
            assert_eq!(out, expect, "DNAT to the real");
            verify_checksums(&out);
            assert_eq!(dp.program().rev_count(), 0);
            assert_eq!(dp.program().half_open_count(), (1, 1), "in its handshake");

            // The real's SYN-ACK, arriving on its side: from the VIP again, to the client.
            let reply = frame(
                lab.out_mac,
                REAL_MACS[0],
                ip(real_ip),
                ip(client),
                &tcp(8080, 40000, SYN | ACK),
            );
            let (v, out) = dp.test_run(&reply, lab.out_idx).unwrap();
            assert_eq!(v, XDP_REDIRECT);
            let expect = hopped(&frame(
                ROUTER_MAC,
                lab.in_mac,
                ip(vip),
                ip(client),
                &tcp(80, 40000, SYN | ACK),
            ));
            assert_eq!(out, expect, "SNAT back to the VIP");
            verify_checksums(&out);

            // UDP over NAT too (checksum kept right).
            let st = dp.stats().unwrap();
            assert_eq!(st.services[0].conns, 1);
            assert_eq!(st.services[0].in_pkts, 1);
            assert_eq!(st.services[0].out_pkts, 1);
            assert_eq!(st.reals[0].out_pkts, 1);
            assert_eq!(count(dp, Reason::FwdReply), 1);
        });
    }
}

/// The local port full-NAT chose (the source port of the frame it sent).
fn sport_of(frame: &[u8]) -> u16 {
    let l4 = if frame[12] == 0x86 { 54 } else { 34 };
    u16::from_be_bytes([frame[l4], frame[l4 + 1]])
}

fn fnat_plan(vip: &str, real_ip: &str, laddr: &str, toa: bool) -> Plan {
    let mut plan = one_service(vip, Mode::FullNat, &[real_ip], &[0]);
    plan.services[0].laddrs = vec![ip(laddr)];
    plan.services[0].toa = toa;
    plan
}

#[test]
fn full_nat_translates_both_directions() {
    for (vip, client, real_ip, laddr) in [
        (VIP4, CLIENT4, "198.18.2.10", "198.18.2.1"),
        (VIP6, CLIENT6, "fd00:2::10", "fd00:2::1"),
    ] {
        with_lab(
            "fnat",
            cfg(),
            fnat_plan(vip, real_ip, laddr, false),
            move |lab, dp| {
                let input = frame(
                    lab.in_mac,
                    ROUTER_MAC,
                    ip(client),
                    ip(vip),
                    &tcp(40000, 80, SYN),
                );
                let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
                assert_eq!(v, XDP_REDIRECT);
                let lport = sport_of(&out);
                let (lo, hi) = dp.program().port_share(0);
                assert!(
                    (lo..hi).contains(&(lport as u32)),
                    "port {lport} in CPU 0's share"
                );
                let expect = hopped(&frame(
                    REAL_MACS[0],
                    lab.out_mac,
                    ip(laddr),
                    ip(real_ip),
                    &tcp(lport, 8080, SYN),
                ));
                assert_eq!(out, expect);
                verify_checksums(&out);

                let reply = frame(
                    lab.out_mac,
                    REAL_MACS[0],
                    ip(real_ip),
                    ip(laddr),
                    &tcp(8080, lport, SYN | ACK),
                );
                let (v, out) = dp.test_run(&reply, lab.out_idx).unwrap();
                assert_eq!(v, XDP_REDIRECT);
                let expect = hopped(&frame(
                    ROUTER_MAC,
                    lab.in_mac,
                    ip(vip),
                    ip(client),
                    &tcp(80, 40000, SYN | ACK),
                ));
                assert_eq!(out, expect);
                verify_checksums(&out);

                // The client's ACK takes the same local port.
                let ack = frame(
                    lab.in_mac,
                    ROUTER_MAC,
                    ip(client),
                    ip(vip),
                    &tcp(40000, 80, ACK),
                );
                let (_, out) = dp.test_run(&ack, lab.in_idx).unwrap();
                assert_eq!(sport_of(&out), lport);
                verify_checksums(&out);
            },
        );
    }
}

fn toa(port: u16, client: &str) -> Vec<u8> {
    let a = ip(client);
    let mut o = vec![254, if a.is_ipv4() { 8 } else { 20 }];
    o.extend(port.to_be_bytes());
    match a {
        IpAddr::V4(v) => o.extend(v.octets()),
        IpAddr::V6(v) => o.extend(v.octets()),
    }
    o
}

fn seg(sport: u16, dport: u16, flags: u8, options: Vec<u8>, payload: Vec<u8>) -> L4 {
    L4::Tcp {
        sport,
        dport,
        flags,
        options,
        payload,
    }
}

const MSS: [u8; 4] = [2, 4, 0x05, 0xb4];

/// The real's SYN-ACK (sequence 1000: every test ACK, acknowledging 2000, proves it) to the
/// full-NAT local port `lport`, translated back to the client.
fn real_syn_ack(lab: &Lab, dp: &XdpDataPlane, real_ip: &str, laddr: &str, lport: u16) {
    let reply = frame(
        lab.out_mac,
        REAL_MACS[0],
        ip(real_ip),
        ip(laddr),
        &tcp(8080, lport, SYN | ACK),
    );
    let (v, _) = dp.test_run(&reply, lab.out_idx).unwrap();
    assert_eq!(v, XDP_REDIRECT, "the SYN-ACK goes back to the client");
}

#[test]
fn toa_rides_on_the_syn_and_the_first_ack_only() {
    for (vip, client, real_ip, laddr) in [
        (VIP4, CLIENT4, "198.18.2.10", "198.18.2.1"),
        (VIP6, CLIENT6, "fd00:2::10", "fd00:2::1"),
    ] {
        with_lab(
            "toa",
            cfg(),
            fnat_plan(vip, real_ip, laddr, true),
            move |lab, dp| {
                let send = |flags: u8, opts: Vec<u8>| {
                    let l4 = seg(40000, 80, flags, opts, b"data".to_vec());
                    let input = frame(lab.in_mac, ROUTER_MAC, ip(client), ip(vip), &l4);
                    let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
                    assert_eq!(v, XDP_REDIRECT);
                    verify_checksums(&out);
                    out
                };
                let out = send(SYN, MSS.to_vec());
                let lport = sport_of(&out);
                let opts = [MSS.to_vec(), toa(40000, client)].concat();
                let expect = seg(lport, 8080, SYN, opts, b"data".to_vec());
                assert_eq!(
                    out,
                    hopped(&frame(
                        REAL_MACS[0],
                        lab.out_mac,
                        ip(laddr),
                        ip(real_ip),
                        &expect
                    )),
                    "SYN"
                );
                real_syn_ack(&lab, dp, real_ip, laddr, lport);

                let out = send(ACK, Vec::new());
                let expect = seg(lport, 8080, ACK, toa(40000, client), b"data".to_vec());
                assert_eq!(
                    out,
                    hopped(&frame(
                        REAL_MACS[0],
                        lab.out_mac,
                        ip(laddr),
                        ip(real_ip),
                        &expect
                    )),
                    "first ACK"
                );

                let out = send(ACK | PSH, Vec::new());
                let expect = seg(lport, 8080, ACK | PSH, Vec::new(), b"data".to_vec());
                assert_eq!(
                    out,
                    hopped(&frame(
                        REAL_MACS[0],
                        lab.out_mac,
                        ip(laddr),
                        ip(real_ip),
                        &expect
                    )),
                    "later"
                );
                assert_eq!(count(dp, Reason::ToaAdded), 2);
            },
        );
    }
}

#[test]
fn toa_that_does_not_fit_is_left_out_and_counted() {
    with_lab(
        "tfit",
        cfg(),
        fnat_plan(VIP4, "198.18.2.10", "198.18.2.1", true),
        |lab, dp| {
            // 40 bytes of options already: no option space left.
            let full = [MSS.to_vec(), vec![1; 36]].concat();
            let l4 = seg(40000, 80, SYN, full.clone(), Vec::new());
            let input = frame(lab.in_mac, ROUTER_MAC, ip(CLIENT4), ip(VIP4), &l4);
            let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
            assert_eq!(v, XDP_REDIRECT);
            let lport = sport_of(&out);
            let expect = seg(lport, 8080, SYN, full, Vec::new());
            assert_eq!(
                out,
                hopped(&frame(
                    REAL_MACS[0],
                    lab.out_mac,
                    ip("198.18.2.1"),
                    ip("198.18.2.10"),
                    &expect
                ))
            );
            verify_checksums(&out);
            assert_eq!(count(dp, Reason::ToaNoRoom), 1);
            real_syn_ack(&lab, dp, "198.18.2.10", "198.18.2.1", lport);

            // A first ACK that fills the MTU (1500): 8 more bytes would not go out.
            let l4 = seg(40000, 80, ACK, Vec::new(), vec![7; 1500 - 40]);
            let input = frame(lab.in_mac, ROUTER_MAC, ip(CLIENT4), ip(VIP4), &l4);
            let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
            assert_eq!(v, XDP_REDIRECT);
            assert_eq!(out.len(), input.len(), "sent without TOA");
            verify_checksums(&out);
            assert_eq!(count(dp, Reason::ToaNoRoom), 2);
            assert_eq!(count(dp, Reason::ToaAdded), 0);
        },
    );
}

#[test]
fn echo_to_a_vip_is_answered_v4_and_v6() {
    let mut plan = one_service(VIP4, Mode::Dr, &["198.18.2.10"], &[0]);
    plan.services.push(service(
        Proto::Tcp,
        sa(VIP6, 80),
        Scheduler::Mh,
        vec![1; RING as usize],
    ));
    plan.reals.push(real(1, sa("fd00:2::10", 80), Mode::Dr));
    with_lab("echo", cfg(), plan, |lab, dp| {
        for (vip, client, ty, reply) in [(VIP4, CLIENT4, 8, 0), (VIP6, CLIENT6, 128, 129)] {
            let echo = |t| L4::Icmp {
                ty: t,
                code: 0,
                rest: [0x12, 0x34, 0, 1],
                payload: b"abcdefgh".to_vec(),
            };
            let input = frame(lab.in_mac, ROUTER_MAC, ip(client), ip(vip), &echo(ty));
            let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
            assert_eq!(v, XDP_TX);
            assert_eq!(
                out,
                frame(ROUTER_MAC, lab.in_mac, ip(vip), ip(client), &echo(reply))
            );
            verify_checksums(&out);
        }
        assert_eq!(count(dp, Reason::IcmpEcho), 2);
        // Echo to an address that is no VIP: the kernel's.
        let other = L4::Icmp {
            ty: 8,
            code: 0,
            rest: [0; 4],
            payload: Vec::new(),
        };
        let input = frame(
            lab.in_mac,
            ROUTER_MAC,
            ip(CLIENT4),
            ip("198.18.1.1"),
            &other,
        );
        assert_eq!(dp.test_run(&input, lab.in_idx).unwrap().0, XDP_PASS);
    });
}

#[test]
fn too_big_for_a_vip_flow_reaches_the_flows_real() {
    // Two DR reals; the ICMP must follow the connection, wherever its SYN went.
    let plan = one_service(VIP4, Mode::Dr, &["198.18.2.10", "198.18.2.11"], &[0, 1]);
    with_lab("itb", cfg(), plan, |lab, dp| {
        for port in 40000..40008 {
            let syn = frame(
                lab.in_mac,
                ROUTER_MAC,
                ip(CLIENT4),
                ip(VIP4),
                &tcp(port, 80, SYN),
            );
            let (_, out) = dp.test_run(&syn, lab.in_idx).unwrap();
            let real_mac: [u8; 6] = out[..6].try_into().unwrap();
            // A router on the way back says the VIP's reply (VIP:80 -> client) was too big.
            let quoted = ip_packet(ip(VIP4), ip(CLIENT4), &tcp(80, port, ACK));
            let icmp = L4::Icmp {
                ty: 3,
                code: 4,
                rest: [0, 0, 0x05, 0x00],
                payload: quoted[..28].to_vec(),
            };
            let input = frame(lab.in_mac, ROUTER_MAC, ip("198.18.50.1"), ip(VIP4), &icmp);
            let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
            assert_eq!(v, XDP_REDIRECT);
            assert_eq!(
                out,
                hopped(&frame(
                    real_mac,
                    lab.out_mac,
                    ip("198.18.50.1"),
                    ip(VIP4),
                    &icmp
                ))
            );
            verify_checksums(&out);
        }
        assert_eq!(count(dp, Reason::IcmpTooBigFwd), 8);
    });
}

/// The index of the real whose MAC a frame is sent to.
fn real_of(out: &[u8]) -> usize {
    REAL_MACS
        .iter()
        .position(|m| &out[..6] == m)
        .expect("sent to a real")
}

#[test]
fn quiesced_real_keeps_its_flows_and_a_syn_ignores_a_stale_entry() {
    let plan = one_service(VIP4, Mode::Dr, &["198.18.2.10", "198.18.2.11"], &[0]);
    with_lab("qui", cfg(), plan, |lab, dp| {
        let pkt = |port, flags| lab.client_tcp(CLIENT4, VIP4, port, flags);
        let (_, out) = dp.test_run(&pkt(40000, SYN), lab.in_idx).unwrap();
        assert_eq!(real_of(&out), 0);
        // Real 0 goes to weight 0: the lookup names only real 1; real 0 keeps its slot.
        dp.apply(&one_service(
            VIP4,
            Mode::Dr,
            &["198.18.2.10", "198.18.2.11"],
            &[1],
        ))
        .unwrap();
        let (v, out) = dp.test_run(&pkt(40000, ACK), lab.in_idx).unwrap();
        assert_eq!(
            (v, real_of(&out)),
            (XDP_REDIRECT, 0),
            "established flow stays"
        );
        let (_, out) = dp.test_run(&pkt(40001, SYN), lab.in_idx).unwrap();
        assert_eq!(real_of(&out), 1, "a new connection goes elsewhere");
        // The same client port opening anew (its entry is stale): scheduled afresh.
        let (_, out) = dp.test_run(&pkt(40000, SYN), lab.in_idx).unwrap();
        assert_eq!(real_of(&out), 1, "a SYN never takes the stale entry's real");
        let (_, out) = dp.test_run(&pkt(40000, ACK), lab.in_idx).unwrap();
        assert_eq!(real_of(&out), 1, "and its entry now says so");
        assert_eq!(count(dp, Reason::DropNoReal), 0);
    });
}

#[test]
fn a_retransmitted_syn_keeps_its_real_under_rr_on_any_cpu_and_a_new_connection_moves_on() {
    // rr moves its cursor on every SYN it schedules: a retransmitted SYN scheduled afresh
    // would reach the next real while the first one's SYN-ACK is on its way (a reset).
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut plan = one_service(VIP4, Mode::Dr, &["198.18.2.10", "198.18.2.11"], &[0]);
    plan.services[0].scheduler = Scheduler::Rr;
    plan.services[0].lookup = vec![0, 1];
    with_lab("rtx", cfg(), plan, move |lab, dp| {
        let pkt = |port, flags| lab.client_tcp(CLIENT4, VIP4, port, flags);
        let real = |port, flags| real_of(&dp.test_run(&pkt(port, flags), lab.in_idx).unwrap().1);
        let first = real(40000, SYN);
        assert_eq!(real(40000, SYN), first, "retransmitted on the same CPU");
        if dp.program().shape.nr_cpus > 1 && cpus > 1 {
            pin(1);
            // Move CPU 1's cursor, so that scheduling afresh there would pick the other real.
            assert_eq!(real(41000, SYN), first);
            assert_eq!(real(40000, SYN), first, "retransmitted on another CPU");
            pin(0);
        }
        assert_eq!(real(40000, ACK), first);
        // The handshake is over: a SYN on the flow now opens a new connection.
        let next = real(40000, SYN);
        assert_ne!(
            next, first,
            "a reused port after an ACK is scheduled afresh"
        );
        assert_eq!(real(40000, SYN), next, "and its own retransmission stays");
        // A connection closed (FIN) before its handshake ended: a new one moves on too.
        let closing = real(40001, SYN);
        assert_eq!(real(40001, FIN), closing);
        assert_ne!(
            real(40001, SYN),
            closing,
            "a SYN after a FIN is a new connection"
        );
    });
}

#[test]
fn a_hit_keeps_the_entrys_real_another_cpu_finds_the_shared_entry_a_lost_one_follows_the_hash() {
    // Counted here: inside the lab's closure this thread is pinned to one CPU.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        eprintln!("one CPU: the other CPU's table cannot be shown apart");
    }
    let plan = one_service(VIP4, Mode::Dr, &["198.18.2.10", "198.18.2.11"], &[0]);
    with_lab("lru", cfg(), plan, move |lab, dp| {
        let pkt = |flags| {
            frame(
                lab.in_mac,
                ROUTER_MAC,
                ip(CLIENT4),
                ip(VIP4),
                &tcp(40000, 80, flags),
            )
        };
        let (_, out) = dp.test_run(&pkt(SYN), lab.in_idx).unwrap();
        assert_eq!(real_of(&out), 0);
        assert_eq!(
            (dp.program().conn_count(0), dp.program().fwd_count()),
            (0, 0),
            "a SYN alone is remembered in half_open only"
        );
        assert_eq!(dp.program().half_open_count(), (0, 1));
        dp.apply(&one_service(
            VIP4,
            Mode::Dr,
            &["198.18.2.10", "198.18.2.11"],
            &[1],
        ))
        .unwrap();
        let (_, out) = dp.test_run(&pkt(ACK), lab.in_idx).unwrap();
        assert_eq!(real_of(&out), 0, "the handshake's real");
        assert_eq!(
            (dp.program().conn_count(0), dp.program().fwd_count()),
            (1, 1),
            "the ACK moved it to this CPU's table and the shared one (DR too)"
        );
        assert_eq!(dp.program().half_open_count(), (0, 0));
        let (_, out) = dp.test_run(&pkt(ACK), lab.in_idx).unwrap();
        assert_eq!(real_of(&out), 0, "hit: the entry's real");
        // Another CPU has no entry of its own for the flow (a veth runs a flow on its
        // sender's CPU): the shared forward entry keeps the connection's real although the
        // table now names real 1 only, and that CPU learns it.
        if dp.program().shape.nr_cpus > 1 && cpus > 1 {
            pin(1);
            let (_, out) = dp.test_run(&pkt(ACK), lab.in_idx).unwrap();
            assert_eq!(real_of(&out), 0, "another CPU: the shared entry's real");
            assert_eq!(dp.program().conn_count(1), 1);
            // The client reuses its port for a new connection, whose SYN runs on CPU 0 and
            // goes to real 1: CPU 1 must not keep sending the flow to real 0.
            pin(0);
            let (_, out) = dp.test_run(&pkt(SYN), lab.in_idx).unwrap();
            assert_eq!(real_of(&out), 1, "a new connection follows the table");
            pin(1);
            let (_, out) = dp.test_run(&pkt(ACK), lab.in_idx).unwrap();
            assert_eq!(real_of(&out), 1, "another CPU forgot the old connection");
            pin(0);
        }
        // Losing every entry (evictions): the control plane's lookup is all a miss has.
        let maps = &dp.program().maps;
        for table in maps.conn_tables.iter().chain(std::iter::once(&maps.rev)) {
            for k in table.keys().collect::<Vec<_>>() {
                table.delete(&k).unwrap();
            }
        }
        let (_, out) = dp.test_run(&pkt(ACK), lab.in_idx).unwrap();
        assert_eq!(real_of(&out), 1, "every entry lost: the hash's real");
    });
}

#[path = "common/guards.rs"]
mod guards;

#[path = "common/half_open.rs"]
mod half_open;

#[path = "common/live.rs"]
mod live;

#[path = "common/fragments.rs"]
mod fragments;
