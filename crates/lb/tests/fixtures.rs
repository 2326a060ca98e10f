//! Data-path fixtures through BPF_PROG_TEST_RUN, Katran-style: an input frame gives an
//! expected verdict and output frame, per mode and feature. The FIB the program asks is a
//! real one, in a lab namespace (see common::lab); every output frame's checksums are
//! recomputed from scratch.

mod common;

use std::net::SocketAddr;

use common::*;
use wirespeed_lb::datapath::{
    stats::reason_count, AttachConfig, Reason, XdpDataPlane, XDP_DROP, XDP_PASS, XDP_REDIRECT,
    XDP_TX,
};
use wirespeed_lb::model::{
    DataPlane, Mode, Plan, PlannedReal, PlannedService, Proto, Scheduler, ServiceKey,
};

const RING: u32 = 7;
const VIP4: &str = "198.18.100.1";
const VIP6: &str = "fd00:100::1";
const CLIENT4: &str = "198.18.50.5";
const CLIENT6: &str = "fd00:50::5";

fn cfg() -> AttachConfig {
    AttachConfig {
        ring_size: RING,
        max_services: 8,
        max_reals: 16,
        conns_per_cpu: 1024,
        new_conns_per_sec_per_cpu: 0,
        ..AttachConfig::default()
    }
}

fn sa(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(common::ip(ip), port)
}

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

fn count(dp: &XdpDataPlane, r: Reason) -> u64 {
    reason_count(dp.program(), r).unwrap()
}

/// Runs `f` inside the lab's namespace, pinned to CPU 0, with the program loaded.
fn with_lab(
    tag: &str,
    cfg: AttachConfig,
    plan: Plan,
    f: impl FnOnce(Lab, &mut XdpDataPlane) + Send + 'static,
) {
    let (ns, lab) = lab(tag);
    ns.run(move || {
        pin(0);
        let mut dp = XdpDataPlane::load(&cfg).unwrap();
        dp.apply(&plan).unwrap();
        f(lab, &mut dp);
    })
    .unwrap();
}

#[test]
fn dr_v4_rewrites_only_the_macs() {
    let plan = one_service(VIP4, Mode::Dr, &["198.18.2.10"], &[0]);
    with_lab("dr4", cfg(), plan, |lab, dp| {
        let l4 = tcp(40000, 80, SYN);
        let input = frame(lab.in_mac, ROUTER_MAC, ip(CLIENT4), ip(VIP4), &l4);
        let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
        assert_eq!(v, XDP_REDIRECT);
        let expect = frame(REAL_MACS[0], lab.out_mac, ip(CLIENT4), ip(VIP4), &l4);
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
            frame(REAL_MACS[0], lab.out_mac, ip(CLIENT6), ip(VIP6), &l4)
        );
        verify_checksums(&out);
    });
}

/// The frame a tunnel sends: Ethernet to the real, the outer header, the packet as it came.
fn tunneled(lab: &Lab, real: usize, src: &str, dst: &str, inner: &[u8]) -> Vec<u8> {
    let inner_proto = if inner[0] >> 4 == 4 { 4 } else { 41 };
    let mut p = ip_header(ip(src), ip(dst), inner_proto, inner.len());
    p.extend(inner);
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
            let expect = frame(
                REAL_MACS[0],
                lab.out_mac,
                ip(client),
                ip(real_ip),
                &tcp(40000, 8080, SYN),
            );
            assert_eq!(out, expect, "DNAT to the real");
            verify_checksums(&out);
            assert_eq!(dp.program().rev_count(), 1);

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
            let expect = frame(
                ROUTER_MAC,
                lab.in_mac,
                ip(vip),
                ip(client),
                &tcp(80, 40000, SYN | ACK),
            );
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
                let expect = frame(
                    REAL_MACS[0],
                    lab.out_mac,
                    ip(laddr),
                    ip(real_ip),
                    &tcp(lport, 8080, SYN),
                );
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
                let expect = frame(
                    ROUTER_MAC,
                    lab.in_mac,
                    ip(vip),
                    ip(client),
                    &tcp(80, 40000, SYN | ACK),
                );
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
