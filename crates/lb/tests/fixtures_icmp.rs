//! ICMP errors about NAT and full-NAT connections, through BPF_PROG_TEST_RUN: a frag-needed or
//! packet-too-big that quotes a connection's packet leaves translated as the side it is sent to
//! would have seen it (docs/LB.md, "ICMP"). Every expected frame is built from scratch by
//! tests/common (the translated quote with its checksums computed anew), compared byte for
//! byte, and its checksums, the quoted ones included, recomputed.

mod common;

use std::net::IpAddr;

use libbpf_rs::MapCore;

use common::*;
use wirespeed_lb::datapath::{Reason, XdpDataPlane, XDP_PASS, XDP_REDIRECT};
use wirespeed_lb::model::{Mode, Plan, PlannedReal, PlannedService, Proto, Scheduler, ServiceKey};

const VIP4: &str = "198.18.100.1";
const VIP6: &str = "fd00:100::1";
const CLIENT4: &str = "198.18.50.5";
const CLIENT6: &str = "fd00:50::5";
/// A router on the client's path (behind the lab's router) and one on the reals' side.
const CROUTER4: &str = "198.18.50.1";
const CROUTER6: &str = "fd00:50::1";
const RROUTER4: &str = "198.18.2.20";
const RROUTER6: &str = "fd00:2::20";

/// One address family's cast: VIP, client, real, full-NAT local address, routers.
#[derive(Clone, Copy)]
struct Cast {
    vip: &'static str,
    client: &'static str,
    real: &'static str,
    laddr: &'static str,
    crouter: &'static str,
    rrouter: &'static str,
}

const V4: Cast = Cast {
    vip: VIP4,
    client: CLIENT4,
    real: "198.18.2.10",
    laddr: "198.18.2.1",
    crouter: CROUTER4,
    rrouter: RROUTER4,
};
const V6: Cast = Cast {
    vip: VIP6,
    client: CLIENT6,
    real: "fd00:2::10",
    laddr: "fd00:2::1",
    crouter: CROUTER6,
    rrouter: RROUTER6,
};

/// VIP:80 (TCP or UDP) to one real at port 8080 in `mode`; full-NAT with the cast's local
/// address.
fn plan(c: Cast, proto: Proto, mode: Mode) -> Plan {
    Plan {
        ring_size: RING,
        services: vec![PlannedService {
            key: ServiceKey {
                proto,
                vip: sa(c.vip, 80),
            },
            scheduler: Scheduler::Mh,
            lookup: vec![0; RING as usize],
            laddrs: if mode == Mode::FullNat {
                vec![ip(c.laddr)]
            } else {
                Vec::new()
            },
            toa: false,
        }],
        reals: vec![Some(PlannedReal {
            service: 0,
            addr: sa(c.real, 8080),
            mode,
            tunnel: Default::default(),
        })],
    }
}

/// The transport header the connection's packets carry (ports given), with a payload.
fn l4(proto: Proto, sport: u16, dport: u16) -> L4 {
    match proto {
        Proto::Tcp => tcp(sport, dport, ACK),
        Proto::Udp => udp(sport, dport),
    }
}

/// A too-big error (IPv4 frag-needed, MTU 1400; IPv6 packet-too-big, MTU 1400) quoting the
/// first `keep` bytes of `quoted` (None: all of it).
fn too_big(v6: bool, quoted: &[u8], keep: Option<usize>) -> L4 {
    let n = keep.unwrap_or(quoted.len()).min(quoted.len());
    L4::Icmp {
        ty: if v6 { 2 } else { 3 },
        code: if v6 { 0 } else { 4 },
        rest: if v6 {
            1400u32.to_be_bytes()
        } else {
            [0, 0, 0x05, 0x78]
        },
        payload: quoted[..n].to_vec(),
    }
}

/// Checks, from scratch, what `verify_checksums` cannot see: the quoted IPv4 header's
/// checksum and, when the quote holds the whole packet, its transport checksum.
fn verify_quote(out: &[u8]) {
    let v6 = out[12] == 0x86;
    let q = &out[14 + if v6 { 48 } else { 28 }..];
    if !v6 {
        assert_eq!(fold(sum16(&q[..20], 0)), 0, "quoted IPv4 header checksum");
    }
    let (hl, total) = if v6 {
        (40, 40 + u16::from_be_bytes([q[4], q[5]]) as usize)
    } else {
        (20, u16::from_be_bytes([q[2], q[3]]) as usize)
    };
    if q.len() == total {
        let addr = |at: usize| -> IpAddr {
            if v6 {
                <[u8; 16]>::try_from(&q[at..at + 16]).unwrap().into()
            } else {
                <[u8; 4]>::try_from(&q[at..at + 4]).unwrap().into()
            }
        };
        let (src, dst) = if v6 {
            (addr(8), addr(24))
        } else {
            (addr(12), addr(16))
        };
        let proto = if v6 { q[6] } else { q[9] };
        let seg = &q[hl..];
        assert_eq!(
            fold(sum16(seg, pseudo(src, dst, proto, seg.len()))),
            0,
            "quoted transport checksum"
        );
    }
}

/// The local port full-NAT chose (the source port of the frame it sent).
fn sport_of(frame: &[u8]) -> u16 {
    let l4 = if frame[12] == 0x86 { 54 } else { 34 };
    u16::from_be_bytes([frame[l4], frame[l4 + 1]])
}

/// Opens the connection CLIENT:40000 -> VIP:80 (a SYN, or a UDP datagram) and returns the
/// port the real sees it from (full-NAT: the local port; else 40000).
fn open(dp: &XdpDataPlane, lab: &Lab, c: Cast, proto: Proto) -> u16 {
    let first = match proto {
        Proto::Tcp => tcp(40000, 80, SYN),
        Proto::Udp => udp(40000, 80),
    };
    let input = frame(lab.in_mac, ROUTER_MAC, ip(c.client), ip(c.vip), &first);
    let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
    assert_eq!(v, XDP_REDIRECT, "the connection opens");
    let sport = sport_of(&out);
    if proto == Proto::Tcp {
        // The real's SYN-ACK to where the SYN came from (the client, or the full-NAT local
        // address and port), then the client's ACK: established.
        let from: IpAddr = if out[12] == 0x86 {
            <[u8; 16]>::try_from(&out[22..38]).unwrap().into()
        } else {
            <[u8; 4]>::try_from(&out[26..30]).unwrap().into()
        };
        let syn_ack = frame(
            lab.out_mac,
            REAL_MACS[0],
            ip(c.real),
            from,
            &tcp(8080, sport, SYN | ACK),
        );
        assert_eq!(dp.test_run(&syn_ack, lab.out_idx).unwrap().0, XDP_REDIRECT);
        let ack = frame(
            lab.in_mac,
            ROUTER_MAC,
            ip(c.client),
            ip(c.vip),
            &tcp(40000, 80, ACK),
        );
        assert_eq!(dp.test_run(&ack, lab.in_idx).unwrap().0, XDP_REDIRECT);
    }
    sport
}

/// A client-side error about VIP:80 -> CLIENT:40000 (quote cut at `keep`) goes to the real,
/// quoting RIP:8080 -> CLIENT:40000 (NAT) or RIP:8080 -> LADDR:LPORT (full-NAT), from the
/// same router (NAT) or the local address (full-NAT).
fn client_side_case(c: Cast, proto: Proto, mode: Mode, keep: Option<usize>) {
    let v6 = ip(c.vip).is_ipv6();
    // A namespace name of its own per mode: the NAT and full-NAT tests may run at once.
    let tag = if mode == Mode::Nat { "icn" } else { "icb" };
    with_lab(tag, cfg(), plan(c, proto, mode), move |lab, dp| {
        let lport = open(dp, &lab, c, proto);
        let quoted = ip_packet(ip(c.vip), ip(c.client), &l4(proto, 80, 40000));
        let input = frame(
            lab.in_mac,
            ROUTER_MAC,
            ip(c.crouter),
            ip(c.vip),
            &too_big(v6, &quoted, keep),
        );
        let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
        let (outer_src, seen_to, seen_port) = if mode == Mode::FullNat {
            (c.laddr, c.laddr, lport)
        } else {
            (c.crouter, c.client, 40000)
        };
        let translated = ip_packet(ip(c.real), ip(seen_to), &l4(proto, 8080, seen_port));
        let expect = hopped(&frame(
            REAL_MACS[0],
            lab.out_mac,
            ip(outer_src),
            ip(c.real),
            &too_big(v6, &translated, keep),
        ));
        assert_eq!(v, XDP_REDIRECT, "{mode:?} {proto:?} keep {keep:?}");
        assert_eq!(out, expect, "{mode:?} {proto:?} keep {keep:?}");
        verify_checksums(&out);
        verify_quote(&out);
        let (done, other) = if mode == Mode::FullNat {
            (Reason::IcmpTooBigFnat, Reason::IcmpTooBigNat)
        } else {
            (Reason::IcmpTooBigNat, Reason::IcmpTooBigFnat)
        };
        assert_eq!((count(dp, done), count(dp, other)), (1, 0));
        assert_eq!(count(dp, Reason::PassIcmpNat), 0);
    });
}

#[test]
fn nat_too_big_from_the_clients_path_reaches_the_real_translated() {
    // IPv4 routers quote the IP header and 8 bytes (no TCP checksum in it); IPv6 ones as
    // much as fits, here all of it. A whole quote has its TCP/UDP checksum adjusted.
    client_side_case(V4, Proto::Tcp, Mode::Nat, Some(28));
    client_side_case(V4, Proto::Tcp, Mode::Nat, None);
    client_side_case(V4, Proto::Udp, Mode::Nat, Some(28));
    client_side_case(V6, Proto::Tcp, Mode::Nat, None);
    client_side_case(V6, Proto::Udp, Mode::Nat, Some(48));
}

#[test]
fn full_nat_too_big_from_the_clients_path_reaches_the_real_from_the_local_address() {
    client_side_case(V4, Proto::Tcp, Mode::FullNat, Some(28));
    client_side_case(V4, Proto::Tcp, Mode::FullNat, None);
    client_side_case(V4, Proto::Udp, Mode::FullNat, None);
    client_side_case(V6, Proto::Tcp, Mode::FullNat, None);
    client_side_case(V6, Proto::Udp, Mode::FullNat, Some(48));
}

#[test]
fn a_quoted_udp_datagram_without_checksum_keeps_none() {
    with_lab("icu0", cfg(), plan(V4, Proto::Udp, Mode::Nat), |lab, dp| {
        open(dp, &lab, V4, Proto::Udp);
        let mut quoted = ip_packet(ip(VIP4), ip(CLIENT4), &udp(80, 40000));
        quoted[26..28].copy_from_slice(&[0, 0]);
        let input = frame(
            lab.in_mac,
            ROUTER_MAC,
            ip(CROUTER4),
            ip(VIP4),
            &too_big(false, &quoted, Some(28)),
        );
        let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
        assert_eq!(v, XDP_REDIRECT);
        let mut translated = ip_packet(ip(V4.real), ip(CLIENT4), &udp(8080, 40000));
        translated[26..28].copy_from_slice(&[0, 0]);
        let expect = hopped(&frame(
            REAL_MACS[0],
            lab.out_mac,
            ip(CROUTER4),
            ip(V4.real),
            &too_big(false, &translated, Some(28)),
        ));
        assert_eq!(out, expect);
        verify_checksums(&out);
        verify_quote(&out);
    });
}

#[test]
fn another_cpu_finds_the_connection_in_the_shared_forward_entry() {
    for (c, mode) in [(V4, Mode::FullNat), (V6, Mode::Nat)] {
        let v6 = ip(c.vip).is_ipv6();
        with_lab("icf", cfg(), plan(c, Proto::Tcp, mode), move |lab, dp| {
            let lport = open(dp, &lab, c, Proto::Tcp);
            // This CPU forgets the connection (as another CPU never knew it): only the
            // shared forward entry remains.
            for t in &dp.program().maps.conn_tables {
                for k in t.keys().collect::<Vec<_>>() {
                    t.delete(&k).unwrap();
                }
            }
            assert!(dp.program().fwd_count() >= 1);
            let quoted = ip_packet(ip(c.vip), ip(c.client), &tcp(80, 40000, ACK));
            let input = frame(
                lab.in_mac,
                ROUTER_MAC,
                ip(c.crouter),
                ip(c.vip),
                &too_big(v6, &quoted, None),
            );
            let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
            assert_eq!(v, XDP_REDIRECT);
            let (src, to, port) = if mode == Mode::FullNat {
                (c.laddr, c.laddr, lport)
            } else {
                (c.crouter, c.client, 40000)
            };
            let translated = ip_packet(ip(c.real), ip(to), &tcp(8080, port, ACK));
            let expect = hopped(&frame(
                REAL_MACS[0],
                lab.out_mac,
                ip(src),
                ip(c.real),
                &too_big(v6, &translated, None),
            ));
            assert_eq!(out, expect, "{mode:?}");
            verify_checksums(&out);
            verify_quote(&out);
        });
    }
}

#[test]
fn an_unknown_flow_and_a_truncated_quote_go_to_the_kernel() {
    for c in [V4, V6] {
        let v6 = ip(c.vip).is_ipv6();
        with_lab(
            "icx",
            cfg(),
            plan(c, Proto::Tcp, Mode::FullNat),
            move |lab, dp| {
                open(dp, &lab, c, Proto::Tcp);
                // A flow no table knows: never scheduled for an ICMP.
                let quoted = ip_packet(ip(c.vip), ip(c.client), &tcp(80, 40001, ACK));
                let input = frame(
                    lab.in_mac,
                    ROUTER_MAC,
                    ip(c.crouter),
                    ip(c.vip),
                    &too_big(v6, &quoted, None),
                );
                let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
                assert_eq!((v, &out), (XDP_PASS, &input), "unknown flow");
                assert_eq!(count(dp, Reason::PassIcmpNat), 1);
                // The known flow, quoted with only 4 bytes after its IP header: the ports but
                // not the rest of the 8 bytes every router quotes.
                let quoted = ip_packet(ip(c.vip), ip(c.client), &tcp(80, 40000, ACK));
                let hl = if v6 { 40 } else { 20 };
                let input = frame(
                    lab.in_mac,
                    ROUTER_MAC,
                    ip(c.crouter),
                    ip(c.vip),
                    &too_big(v6, &quoted, Some(hl + 4)),
                );
                let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
                assert_eq!((v, &out), (XDP_PASS, &input), "truncated quote");
                assert_eq!(count(dp, Reason::PassIcmp), 1);
                assert_eq!(count(dp, Reason::IcmpTooBigFnat), 0);
            },
        );
    }
}

#[test]
fn too_big_from_the_reals_path_reaches_the_client_translated() {
    for (c, mode) in [
        (V4, Mode::FullNat),
        (V6, Mode::FullNat),
        (V4, Mode::Nat),
        (V6, Mode::Nat),
    ] {
        let v6 = ip(c.vip).is_ipv6();
        with_lab("icr", cfg(), plan(c, Proto::Tcp, mode), move |lab, dp| {
            let lport = open(dp, &lab, c, Proto::Tcp);
            // A router between the load balancer and the real about the packet the load
            // balancer sent: LADDR:LPORT -> RIP:8080 (full-NAT, to the local address) or
            // CLIENT:40000 -> RIP:8080 (NAT, to the client).
            let (from, port) = if mode == Mode::FullNat {
                (c.laddr, lport)
            } else {
                (c.client, 40000)
            };
            let quoted = ip_packet(ip(from), ip(c.real), &tcp(port, 8080, ACK));
            let input = frame(
                lab.out_mac,
                REAL_MACS[0],
                ip(c.rrouter),
                ip(from),
                &too_big(v6, &quoted, Some(if v6 { 48 } else { 28 })),
            );
            let (v, out) = dp.test_run(&input, lab.out_idx).unwrap();
            assert_eq!(v, XDP_REDIRECT, "{mode:?}");
            // To the client from the VIP, about CLIENT:40000 -> VIP:80; the MTU as the
            // router said it.
            let translated = ip_packet(ip(c.client), ip(c.vip), &tcp(40000, 80, ACK));
            let expect = hopped(&frame(
                ROUTER_MAC,
                lab.in_mac,
                ip(c.vip),
                ip(c.client),
                &too_big(v6, &translated, Some(if v6 { 48 } else { 28 })),
            ));
            assert_eq!(out, expect, "{mode:?}");
            verify_checksums(&out);
            verify_quote(&out);
            assert_eq!(count(dp, Reason::IcmpTooBigReply), 1);

            // About a local port no connection has: the kernel's.
            let quoted = ip_packet(ip(from), ip(c.real), &tcp(port ^ 1, 8080, ACK));
            let other = frame(
                lab.out_mac,
                REAL_MACS[0],
                ip(c.rrouter),
                ip(from),
                &too_big(v6, &quoted, None),
            );
            let (v, out) = dp.test_run(&other, lab.out_idx).unwrap();
            assert_eq!((v, &out), (XDP_PASS, &other));
            assert_eq!(count(dp, Reason::IcmpTooBigReply), 1);
        });
    }
}
