//! Frames the data path must not forward as they came (issue 46): a corrupt IPv4 header,
//! a frame for another host's MAC, a martian address, a TTL that is spent. Each case runs
//! through BPF_PROG_TEST_RUN in every mode it concerns (DR, tunnel, NAT, full-NAT with TOA),
//! v4 and where it applies v6, and checks the verdict, the frame and the reason counted.

mod common;

use common::*;
use std::net::IpAddr;

use wirespeed_lb::datapath::{Reason, XdpDataPlane, XDP_DROP, XDP_PASS, XDP_REDIRECT, XDP_TX};
use wirespeed_lb::model::{Mode, Plan, PlannedReal, PlannedService, Proto, Scheduler, ServiceKey};

const VIP4: &str = "198.18.100.1";
const VIP6: &str = "fd00:100::1";
const CLIENT4: &str = "198.18.50.5";
const CLIENT6: &str = "fd00:50::5";

const MODES: [Mode; 4] = [Mode::Dr, Mode::Tunnel, Mode::Nat, Mode::FullNat];

/// TCP VIP:80 (mh) to one real of `mode` on the real-side link, port 8080; full-NAT from
/// the load balancer's address there, with TOA.
fn plan(mode: Mode, v6: bool) -> Plan {
    let (vip, real, laddr) = if v6 {
        (VIP6, "fd00:2::10", "fd00:2::1")
    } else {
        (VIP4, "198.18.2.10", "198.18.2.1")
    };
    let full_nat = mode == Mode::FullNat;
    Plan {
        ring_size: RING,
        services: vec![PlannedService {
            key: ServiceKey {
                proto: Proto::Tcp,
                vip: sa(vip, 80),
            },
            scheduler: Scheduler::Mh,
            lookup: vec![0; RING as usize],
            laddrs: if full_nat {
                vec![ip(laddr)]
            } else {
                Vec::new()
            },
            toa: full_nat,
        }],
        reals: vec![Some(PlannedReal {
            service: 0,
            addr: sa(real, 8080),
            mode,
            tunnel: Default::default(),
        })],
    }
}

/// A lab namespace tag (namespace names are at most 15 characters).
fn tag(prefix: &str, mode: Mode, v6: bool) -> String {
    let m = match mode {
        Mode::Dr => "d",
        Mode::Tunnel => "t",
        Mode::Nat => "n",
        Mode::FullNat => "f",
    };
    format!("{prefix}{m}{}", if v6 { 6 } else { 4 })
}

/// The addresses of a client and the VIP of the family.
fn ends(v6: bool) -> (&'static str, &'static str) {
    if v6 {
        (CLIENT6, VIP6)
    } else {
        (CLIENT4, VIP4)
    }
}

/// Runs `input` and requires that it goes to the kernel exactly as it came.
fn passes_unchanged(dp: &XdpDataPlane, lab: &Lab, input: &[u8], what: &str) {
    let (v, out) = dp.test_run(input, lab.in_idx).unwrap();
    assert_eq!(v, XDP_PASS, "{what}: verdict");
    assert_eq!(
        out, input,
        "{what}: the frame must reach the kernel as it came"
    );
}

/// Runs `input` and requires that it is forwarded (to the real, towards the client).
fn forwarded(dp: &XdpDataPlane, lab: &Lab, input: &[u8], what: &str) -> Vec<u8> {
    let (v, out) = dp.test_run(input, lab.in_idx).unwrap();
    assert_eq!(v, XDP_REDIRECT, "{what}: verdict");
    verify_checksums(&out);
    out
}

const IP4_CSUM: usize = 14 + 10;

#[test]
fn a_corrupt_ipv4_header_goes_to_the_kernel_untranslated_in_every_mode() {
    for mode in MODES {
        with_lab(
            &tag("cs", mode, false),
            cfg(),
            plan(mode, false),
            move |lab, dp| {
                // IPv4 only: an IPv6 header has no checksum.
                let (client, vip) = ends(false);
                let good = lab.client_tcp(client, vip, 40000, SYN);
                let right = u16::from_be_bytes([good[IP4_CSUM], good[IP4_CSUM + 1]]);
                for (i, bad) in [0x1234u16, 0, 0xffff].into_iter().enumerate() {
                    let mut f = lab.client_tcp(client, vip, 40001 + i as u16, SYN);
                    assert_ne!(
                        u16::from_be_bytes([f[IP4_CSUM], f[IP4_CSUM + 1]]),
                        bad,
                        "the fixture's own checksum is not the bad one"
                    );
                    assert_ne!(right, bad);
                    f[IP4_CSUM..IP4_CSUM + 2].copy_from_slice(&bad.to_be_bytes());
                    passes_unchanged(dp, &lab, &f, &format!("{mode:?} SYN, check {bad:#06x}"));
                }
                // An echo request to the VIP with a corrupt header is not answered.
                let echo = L4::Icmp {
                    ty: 8,
                    code: 0,
                    rest: [0x12, 0x34, 0, 1],
                    payload: b"abcdefgh".to_vec(),
                };
                let mut f = frame(lab.in_mac, ROUTER_MAC, ip(client), ip(vip), &echo);
                f[IP4_CSUM] ^= 0x40;
                passes_unchanged(dp, &lab, &f, &format!("{mode:?} echo"));
                assert_eq!(count(dp, Reason::PassBadCsum), 4, "{mode:?}");
                // The same SYN with its right checksum is forwarded: the case is the checksum.
                forwarded(dp, &lab, &good, &format!("{mode:?} good SYN"));
            },
        );
    }
}

const OTHER_HOST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x09, 0x99];
const BROADCAST_MAC: [u8; 6] = [0xff; 6];
const MCAST4_MAC: [u8; 6] = [0x01, 0x00, 0x5e, 0, 0, 0x01];
const MCAST6_MAC: [u8; 6] = [0x33, 0x33, 0, 0, 0, 0x01];

#[test]
fn a_frame_not_sent_to_the_ingress_ports_mac_goes_to_the_kernel_in_every_mode() {
    for v6 in [false, true] {
        for mode in MODES {
            with_lab(
                &tag("mac", mode, v6),
                cfg(),
                plan(mode, v6),
                move |lab, dp| {
                    let (client, vip) = ends(v6);
                    let syn = |dmac: [u8; 6], sport: u16| {
                        frame(dmac, ROUTER_MAC, ip(client), ip(vip), &tcp(sport, 80, SYN))
                    };
                    let mcast = if v6 { MCAST6_MAC } else { MCAST4_MAC };
                    let what = |w: &str| format!("{mode:?} v6={v6}: {w}");
                    // Another host's MAC, and the load balancer's own MAC on its other port.
                    passes_unchanged(dp, &lab, &syn(OTHER_HOST_MAC, 40001), &what("other host"));
                    passes_unchanged(dp, &lab, &syn(lab.out_mac, 40002), &what("other port"));
                    assert_eq!(count(dp, Reason::PassNotOurMac), 2, "{}", what("counted"));
                    passes_unchanged(dp, &lab, &syn(BROADCAST_MAC, 40003), &what("broadcast"));
                    passes_unchanged(dp, &lab, &syn(mcast, 40004), &what("multicast"));
                    let echo = L4::Icmp {
                        ty: if v6 { 128 } else { 8 },
                        code: 0,
                        rest: [0x12, 0x34, 0, 1],
                        payload: b"abcdefgh".to_vec(),
                    };
                    let f = frame(BROADCAST_MAC, ROUTER_MAC, ip(client), ip(vip), &echo);
                    passes_unchanged(dp, &lab, &f, &what("echo to the broadcast MAC"));
                    assert_eq!(
                        count(dp, Reason::PassMacMulticast),
                        3,
                        "{}",
                        what("counted")
                    );
                    assert_eq!(dp.program().rev_count(), 0, "{}", what("nothing opened"));
                    // Sent to the port's own MAC, the same SYN is forwarded.
                    let out = forwarded(dp, &lab, &syn(lab.in_mac, 40005), &what("own MAC"));
                    // A real's reply to another MAC is not translated either.
                    if matches!(mode, Mode::Nat | Mode::FullNat) {
                        let (real, dst) = if v6 {
                            (
                                "fd00:2::10",
                                if mode == Mode::Nat {
                                    client
                                } else {
                                    "fd00:2::1"
                                },
                            )
                        } else {
                            (
                                "198.18.2.10",
                                if mode == Mode::Nat {
                                    client
                                } else {
                                    "198.18.2.1"
                                },
                            )
                        };
                        let lport = u16::from_be_bytes([
                            out[14 + if v6 { 40 } else { 20 }],
                            out[15 + if v6 { 40 } else { 20 }],
                        ]);
                        let reply = |dmac| {
                            frame(
                                dmac,
                                REAL_MACS[0],
                                ip(real),
                                ip(dst),
                                &tcp(8080, lport, SYN | ACK),
                            )
                        };
                        let (v, got) = dp.test_run(&reply(OTHER_HOST_MAC), lab.out_idx).unwrap();
                        assert_eq!(
                            (v, got),
                            (XDP_PASS, reply(OTHER_HOST_MAC)),
                            "{}",
                            what("reply")
                        );
                        assert_eq!(
                            count(dp, Reason::PassNotOurMac),
                            3,
                            "{}",
                            what("reply counted")
                        );
                        let (v, got) = dp.test_run(&reply(lab.out_mac), lab.out_idx).unwrap();
                        assert_eq!(v, XDP_REDIRECT, "{}", what("reply to the own MAC"));
                        verify_checksums(&got);
                    }
                },
            );
        }
    }
}

#[test]
fn martian_sources_are_dropped_or_left_to_the_kernel_in_every_mode() {
    for v6 in [false, true] {
        for mode in MODES {
            with_lab(
                &tag("mt", mode, v6),
                cfg(),
                plan(mode, v6),
                move |lab, dp| {
                    let (_, vip) = ends(v6);
                    let what = |w: &str| format!("{mode:?} v6={v6}: from {w}");
                    let syn = |src: &str, sport: u16| {
                        frame(
                            lab.in_mac,
                            ROUTER_MAC,
                            ip(src),
                            ip(vip),
                            &tcp(sport, 80, SYN),
                        )
                    };
                    // Dropped by the kernel's routing whatever its settings.
                    let dropped: &[&str] = if v6 {
                        &["::", "::1", "ff02::1", "ff0e::1", "::ffff:198.18.50.5"]
                    } else {
                        &[
                            "0.0.0.0",
                            "0.1.2.3",
                            "224.0.0.1",
                            "239.1.2.3",
                            "255.255.255.255",
                        ]
                    };
                    for (i, src) in dropped.iter().enumerate() {
                        let (v, _) = dp
                            .test_run(&syn(src, 41000 + i as u16), lab.in_idx)
                            .unwrap();
                        assert_eq!(v, XDP_DROP, "{}", what(src));
                    }
                    assert_eq!(
                        count(dp, Reason::DropMartian),
                        dropped.len() as u64,
                        "{}",
                        what("martians: counted")
                    );
                    if !v6 {
                        // Loopback: route_localnet decides, so the kernel does.
                        passes_unchanged(dp, &lab, &syn("127.0.0.1", 41010), &what("127.0.0.1"));
                        assert_eq!(
                            count(dp, Reason::PassMartian),
                            1,
                            "{}",
                            what("127/8 counted")
                        );
                        // An echo request from 0.0.0.0 is not answered.
                        let echo = L4::Icmp {
                            ty: 8,
                            code: 0,
                            rest: [0x12, 0x34, 0, 1],
                            payload: b"abcdefgh".to_vec(),
                        };
                        let f = frame(lab.in_mac, ROUTER_MAC, ip("0.0.0.0"), ip(vip), &echo);
                        let (v, _) = dp.test_run(&f, lab.in_idx).unwrap();
                        assert_eq!(v, XDP_DROP, "{}", what("echo"));
                    }
                    assert_eq!(
                        (dp.program().rev_count(), dp.program().fwd_count()),
                        (0, 0),
                        "{}",
                        what("martians: no connection opened")
                    );
                    // Not martian to Linux: a class E source (v4), a global one (v6) go on.
                    let src = if v6 { "2001:db8::5" } else { "240.0.0.1" };
                    forwarded(dp, &lab, &syn(src, 41020), &what(src));
                },
            );
        }
    }
}

/// `f` with its IPv4 TTL or IPv6 hop limit set to `ttl` (the IPv4 checksum fixed).
fn with_ttl(mut f: Vec<u8>, ttl: u8) -> Vec<u8> {
    if f[12..14] == [0x86, 0xdd] {
        f[14 + 7] = ttl;
    } else {
        f[14 + 8] = ttl;
        fix_ipv4_csum(&mut f);
    }
    f
}

/// The time-exceeded answer to `input` (an Ethernet frame from `smac` to `dmac`): from the
/// address it was sent to, back to its sender, quoting its IP header and 8 bytes.
fn time_exceeded(input: &[u8], v6: bool) -> Vec<u8> {
    let hl = if v6 { 40 } else { 20 };
    let (src, dst) = if v6 {
        let s: [u8; 16] = input[22..38].try_into().unwrap();
        let d: [u8; 16] = input[38..54].try_into().unwrap();
        (IpAddr::from(d), IpAddr::from(s))
    } else {
        let s: [u8; 4] = input[26..30].try_into().unwrap();
        let d: [u8; 4] = input[30..34].try_into().unwrap();
        (IpAddr::from(d), IpAddr::from(s))
    };
    let icmp = L4::Icmp {
        ty: if v6 { 3 } else { 11 },
        code: 0,
        rest: [0; 4],
        payload: input[14..14 + hl + 8].to_vec(),
    };
    let dmac: [u8; 6] = input[6..12].try_into().unwrap();
    let smac: [u8; 6] = input[0..6].try_into().unwrap();
    frame(dmac, smac, src, dst, &icmp)
}

#[test]
fn a_spent_ttl_is_answered_with_time_exceeded_and_others_lose_one_hop_in_every_mode() {
    for v6 in [false, true] {
        for mode in MODES {
            with_lab(
                &tag("tl", mode, v6),
                cfg(),
                plan(mode, v6),
                move |lab, dp| {
                    let (client, vip) = ends(v6);
                    let what = |w: &str| format!("{mode:?} v6={v6}: {w}");
                    let syn = |sport: u16, ttl: u8| {
                        with_ttl(lab.client_tcp(client, vip, sport, SYN), ttl)
                    };
                    for (i, ttl) in [1u8, 0].into_iter().enumerate() {
                        let input = syn(42000 + i as u16, ttl);
                        let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
                        assert_eq!(v, XDP_TX, "{}", what(&format!("TTL {ttl}: answered")));
                        assert_eq!(out, time_exceeded(&input, v6), "{}", what("the answer"));
                        verify_checksums(&out);
                    }
                    assert_eq!(
                        count(dp, Reason::IcmpTimeExceeded),
                        2,
                        "{}",
                        what("counted")
                    );
                    assert_eq!(
                        (dp.program().rev_count(), dp.program().fwd_count()),
                        (0, 0),
                        "{}",
                        what("a spent SYN opens no connection")
                    );
                    // TTL 2 goes on with 1 (a tunnel's inner packet; the outer starts at 64).
                    let out = forwarded(dp, &lab, &syn(42002, 2), &what("TTL 2"));
                    let inner = 14
                        + if mode == Mode::Tunnel {
                            if v6 {
                                40
                            } else {
                                20
                            }
                        } else {
                            0
                        };
                    assert_eq!(
                        out[inner + if v6 { 7 } else { 8 }],
                        1,
                        "{}",
                        what("one hop less")
                    );
                    // A real's reply with TTL 1: to a full-NAT local address (ours), answered
                    // from it; to a NAT client, the kernel's (its forwarding answers as a router).
                    if matches!(mode, Mode::Nat | Mode::FullNat) {
                        let l3 = if v6 { 40 } else { 20 };
                        let lport = u16::from_be_bytes([out[14 + l3], out[15 + l3]]);
                        let (real, laddr) = if v6 {
                            ("fd00:2::10", "fd00:2::1")
                        } else {
                            ("198.18.2.10", "198.18.2.1")
                        };
                        let dst = if mode == Mode::Nat { client } else { laddr };
                        let reply = with_ttl(
                            frame(
                                lab.out_mac,
                                REAL_MACS[0],
                                ip(real),
                                ip(dst),
                                &tcp(8080, lport, SYN | ACK),
                            ),
                            1,
                        );
                        let (v, out) = dp.test_run(&reply, lab.out_idx).unwrap();
                        if mode == Mode::Nat {
                            assert_eq!((v, out), (XDP_PASS, reply), "{}", what("NAT reply"));
                            assert_eq!(count(dp, Reason::PassTtl), 1, "{}", what("counted"));
                        } else {
                            assert_eq!(v, XDP_TX, "{}", what("full-NAT reply"));
                            assert_eq!(out, time_exceeded(&reply, v6), "{}", what("its answer"));
                            verify_checksums(&out);
                        }
                    }
                    // An ICMP error is never answered with one: a spent too-big is the kernel's.
                    let quoted = ip_packet(ip(vip), ip(client), &tcp(80, 42002, ACK));
                    let too_big = L4::Icmp {
                        ty: if v6 { 2 } else { 3 },
                        code: if v6 { 0 } else { 4 },
                        rest: [0, 0, 0x05, 0x00],
                        payload: quoted[..if v6 { 48 } else { 28 }].to_vec(),
                    };
                    let f = with_ttl(
                        frame(lab.in_mac, ROUTER_MAC, ip(client), ip(vip), &too_big),
                        1,
                    );
                    passes_unchanged(dp, &lab, &f, &what("spent too-big"));
                    // An echo request is answered whatever its TTL: it is not forwarded.
                    let echo = L4::Icmp {
                        ty: if v6 { 128 } else { 8 },
                        code: 0,
                        rest: [0x12, 0x34, 0, 1],
                        payload: b"abcdefgh".to_vec(),
                    };
                    let f = with_ttl(frame(lab.in_mac, ROUTER_MAC, ip(client), ip(vip), &echo), 1);
                    assert_eq!(
                        dp.test_run(&f, lab.in_idx).unwrap().0,
                        XDP_TX,
                        "{}",
                        what("echo")
                    );
                },
            );
        }
    }
}
