//! Fixtures of fragments (IPv4 and IPv6) and IPv4 options to a VIP (docs/LB.md, "Fragments
//! and IP options"): a datagram's later fragments, which carry no ports, go where its first
//! fragment went, with the same translation, in every mode; a later fragment whose first was not seen is dropped
//! and counted, never handed on silently; a connection whose segments carry IP options (a
//! record route) goes through every mode with its options carried as they came.

use super::*;

const REALS: [&str; 2] = ["198.18.2.10", "198.18.2.11"];
const LADDR: &str = "198.18.2.1";
const REALS6: [&str; 2] = ["fd00:2::10", "fd00:2::11"];
const LADDR6: &str = "fd00:2::1";

/// Splits the IP packet (IPv4 without options, or IPv6 without extension headers) of an
/// Ethernet frame into two fragments of datagram `id`: the first holds the IP header and
/// `first` bytes of the payload (a multiple of 8), more fragments following; the second the
/// rest, at offset `first`. IPv4: DF cleared, as a fragment has it; IPv6: a fragment header
/// behind the IPv6 header.
fn fragments(f: &[u8], id: u32, first: usize) -> (Vec<u8>, Vec<u8>) {
    assert_eq!(first % 8, 0);
    if f[12] == 0x86 {
        let next = f[20];
        let part = |bytes: &[u8], off: usize, more: bool| {
            let mut o = f[..54].to_vec();
            o[18..20].copy_from_slice(&((8 + bytes.len()) as u16).to_be_bytes());
            o[20] = 44;
            o.extend([next, 0]);
            o.extend((off as u16 | u16::from(more)).to_be_bytes());
            o.extend(id.to_be_bytes());
            o.extend(bytes);
            o
        };
        return (
            part(&f[54..54 + first], 0, true),
            part(&f[54 + first..], first, false),
        );
    }
    assert_eq!(f[14] & 0xf, 5, "no options");
    let part = |bytes: &[u8], off: usize, mf: bool| {
        let mut o = f[..34].to_vec();
        o.extend(bytes);
        o[16..18].copy_from_slice(&((20 + bytes.len()) as u16).to_be_bytes());
        o[18..20].copy_from_slice(&(id as u16).to_be_bytes());
        let fo = (off / 8) as u16 | if mf { 0x2000 } else { 0 };
        o[20..22].copy_from_slice(&fo.to_be_bytes());
        fix_ipv4_csum(&mut o);
        o
    };
    (
        part(&f[34..34 + first], 0, true),
        part(&f[34 + first..], first, false),
    )
}

/// The datagram of two fragments (Ethernet frames, the first at offset 0), as the receiver
/// reassembles it: the header of the first without its fragment bits (IPv6: without its
/// fragment header), the payloads in order.
fn reassemble(a: &[u8], b: &[u8]) -> Vec<u8> {
    if a[12] == 0x86 {
        assert_eq!((a[20], b[20]), (44, 44), "fragment headers");
        assert_eq!(u16::from_be_bytes([a[56], a[57]]), 1, "first: M, offset 0");
        assert_eq!(
            (u16::from_be_bytes([b[56], b[57]]) & 0xfff8) as usize,
            a.len() - 62,
            "the second fragment follows the first"
        );
        assert_eq!(a[58..62], b[58..62], "one identification");
        let mut o = a[..54].to_vec();
        o[20] = a[54];
        o.extend(&a[62..]);
        o.extend(&b[62..]);
        let pl = (o.len() - 54) as u16;
        o[18..20].copy_from_slice(&pl.to_be_bytes());
        return o;
    }
    let (hl_a, hl_b) = ((a[14] & 0xf) as usize * 4, (b[14] & 0xf) as usize * 4);
    assert_eq!(
        u16::from_be_bytes([a[20], a[21]]),
        0x2000,
        "first: MF, offset 0"
    );
    let first_len = a.len() - 14 - hl_a;
    assert_eq!(
        (u16::from_be_bytes([b[20], b[21]]) & 0x1fff) as usize * 8,
        first_len,
        "the second fragment follows the first"
    );
    assert_eq!(a[18..20], b[18..20], "one IP ID");
    let mut o = a.to_vec();
    o.extend(&b[14 + hl_b..]);
    let tot = (o.len() - 14) as u16;
    o[16..18].copy_from_slice(&tot.to_be_bytes());
    o[20..22].copy_from_slice(&[0, 0]);
    fix_ipv4_csum(&mut o);
    o
}

/// The inner packet of a tunnel frame behind its Ethernet header (IPIP: 20 outer bytes,
/// IP6IP6: 40), with the inner packet's EtherType.
fn inner_of(f: &[u8]) -> Vec<u8> {
    let outer = if f[12] == 0x86 { 40 } else { 20 };
    let inner = &f[14 + outer..];
    eth(
        f[..6].try_into().unwrap(),
        f[6..12].try_into().unwrap(),
        inner[0] >> 4 == 6,
        inner,
    )
}

/// The source port of a first fragment (IPv4 options or an IPv6 fragment header included).
fn sport_at(f: &[u8]) -> u16 {
    let l4 = if f[12] == 0x86 {
        if f[20] == 44 {
            62
        } else {
            54
        }
    } else {
        14 + (f[14] & 0xf) as usize * 4
    };
    u16::from_be_bytes([f[l4], f[l4 + 1]])
}

/// A UDP datagram of 48 bytes (8 of header, 40 of data), split after 24.
fn datagram(sport: u16, dport: u16) -> L4 {
    L4::Udp {
        sport,
        dport,
        payload: (0..40).collect(),
    }
}

/// The addresses of one family's fixtures.
#[derive(Clone, Copy)]
struct Fam {
    vip: &'static str,
    client: &'static str,
    reals: [&'static str; 2],
    laddr: &'static str,
}

const V4: Fam = Fam {
    vip: VIP4,
    client: CLIENT4,
    reals: REALS,
    laddr: LADDR,
};
const V6: Fam = Fam {
    vip: VIP6,
    client: CLIENT6,
    reals: REALS6,
    laddr: LADDR6,
};

/// A UDP service VIP:80 over both reals (slots 0 and 1 in the ring), in `mode`.
fn udp_plan_of(fam: Fam, mode: Mode) -> Plan {
    let mut plan = one_service(fam.vip, mode, &fam.reals, &[0, 1]);
    plan.services[0].key.proto = Proto::Udp;
    if mode == Mode::FullNat {
        plan.services[0].laddrs = vec![ip(fam.laddr)];
    }
    plan
}

fn udp_plan(mode: Mode) -> Plan {
    udp_plan_of(V4, mode)
}

/// Sends datagrams in two fragments, in order, from several source ports (so that both
/// reals are used), and checks each fragment against the expected translation and the
/// reassembled datagram's every checksum.
fn two_fragments_follow_the_first(mode: Mode, tag: &str, fam: Fam) {
    with_lab(tag, cfg(), udp_plan_of(fam, mode), move |lab, dp| {
        let v6 = fam.vip.contains(':');
        let mut reals_seen = std::collections::BTreeSet::new();
        for (i, sport) in (40000..40006).enumerate() {
            let id = 0x1000 + i as u32;
            let l4 = datagram(sport, 80);
            let input = frame(lab.in_mac, ROUTER_MAC, ip(fam.client), ip(fam.vip), &l4);
            let (f1, f2) = fragments(&input, id, 24);
            let (v1, o1) = dp.test_run(&f1, lab.in_idx).unwrap();
            assert_eq!(v1, XDP_REDIRECT, "first fragment, port {sport}");
            let (v2, o2) = dp.test_run(&f2, lab.in_idx).unwrap();
            assert_eq!(v2, XDP_REDIRECT, "second fragment, port {sport}");
            let r = real_of(&o1);
            assert_eq!(real_of(&o2), r, "both fragments to one real");
            reals_seen.insert(r);
            let real = fam.reals[r];
            let (e1, e2, datagram_out) = match mode {
                Mode::Tunnel => {
                    // The inner fragments one hop on, in IPIP with DF clear (as theirs), or
                    // in IP6IP6 with the flow's label (the same for both fragments).
                    let (i1, i2) = fragments(&input, id, 24);
                    let outer = |inner: &[u8], out: &[u8]| {
                        let mut t = tunneled(&lab, r, fam.laddr, real, &inner[14..]);
                        if v6 {
                            t[15..18].copy_from_slice(&out[15..18]);
                        } else {
                            t[20] &= !0x40;
                            fix_ipv4_csum(&mut t);
                        }
                        t
                    };
                    assert_eq!(o1[15..18], o2[15..18], "one outer flow label");
                    let d = reassemble(&inner_of(&o1), &inner_of(&o2));
                    (outer(&i1, &o1), outer(&i2, &o2), d)
                }
                _ => {
                    let (src, l4_out) = match mode {
                        Mode::Dr => (fam.client, l4.clone()),
                        Mode::Nat => (fam.client, datagram(sport, 8080)),
                        _ => (fam.laddr, datagram(sport_at(&o1), 8080)),
                    };
                    let dst = if mode == Mode::Dr { fam.vip } else { real };
                    let whole = frame(REAL_MACS[r], lab.out_mac, ip(src), ip(dst), &l4_out);
                    let (e1, e2) = fragments(&whole, id, 24);
                    (hopped(&e1), hopped(&e2), reassemble(&o1, &o2))
                }
            };
            assert_eq!(o1, e1, "first fragment, port {sport}");
            assert_eq!(o2, e2, "second fragment, port {sport}");
            // The transport checksum, adjusted in the first fragment, is right for the
            // whole datagram.
            verify_checksums(&datagram_out);
        }
        assert_eq!(reals_seen.len(), 2, "both reals used: {reals_seen:?}");
        assert_eq!(count(dp, Reason::FragNoted), 6);
        assert_eq!(count(dp, Reason::FragFollowed), 6);
    });
}

#[test]
fn a_later_fragment_without_its_first_is_dropped_and_counted() {
    for (mode, tag) in [
        (Mode::Dr, "fudr"),
        (Mode::Tunnel, "futn"),
        (Mode::Nat, "funt"),
        (Mode::FullNat, "fufn"),
    ] {
        with_lab(tag, cfg(), udp_plan(mode), move |lab, dp| {
            // Its first fragment never came (lost, or behind it): no real can be named.
            let input = frame(
                lab.in_mac,
                ROUTER_MAC,
                ip(CLIENT4),
                ip(VIP4),
                &datagram(41000, 80),
            );
            let (f1, f2) = fragments(&input, 0x2000, 24);
            let (v, _) = dp.test_run(&f2, lab.in_idx).unwrap();
            assert_eq!(v, XDP_DROP, "{mode:?}: a later fragment without its first");
            assert_eq!(count(dp, Reason::DropFragUnplaced), 1);
            // The first of another datagram (another IP ID) names no real for it either.
            let (g1, _) = fragments(&input, 0x2001, 24);
            assert_eq!(dp.test_run(&g1, lab.in_idx).unwrap().0, XDP_REDIRECT);
            assert_eq!(dp.test_run(&f2, lab.in_idx).unwrap().0, XDP_DROP);
            assert_eq!(count(dp, Reason::DropFragUnplaced), 2);
            assert_eq!(count(dp, Reason::FragFollowed), 0);
            // Its own first fragment, late: from then on the datagram's fragments follow.
            assert_eq!(dp.test_run(&f1, lab.in_idx).unwrap().0, XDP_REDIRECT);
            assert_eq!(dp.test_run(&f2, lab.in_idx).unwrap().0, XDP_REDIRECT);
            assert_eq!(count(dp, Reason::FragFollowed), 1);
            // To an address that is no VIP's: the kernel's, as before.
            let other = frame(
                lab.in_mac,
                ROUTER_MAC,
                ip(CLIENT4),
                ip("198.18.2.10"),
                &datagram(41000, 80),
            );
            let (_, o2) = fragments(&other, 0x2002, 24);
            let (v, out) = dp.test_run(&o2, lab.in_idx).unwrap();
            assert_eq!((v, out), (XDP_PASS, o2));
            assert_eq!(count(dp, Reason::PassFragment), 1);
        });
    }
}

#[test]
fn a_fragment_to_a_gue_real_with_an_outer_checksum_is_the_kernels() {
    // GUE's outer checksum leans on the inner datagram's own, which a fragment lacks.
    let mut plan = udp_plan(Mode::Tunnel);
    plan.reals[0] = Some(PlannedReal {
        service: 0,
        addr: sa(REALS[0], 8080),
        mode: Mode::Tunnel,
        tunnel: wirespeed_lb::model::Tunnel::Gue {
            port: 6080,
            csum: true,
        },
    });
    plan.services[0].lookup = vec![0; RING as usize];
    with_lab("fgue", cfg(), plan, |lab, dp| {
        let input = frame(
            lab.in_mac,
            ROUTER_MAC,
            ip(CLIENT4),
            ip(VIP4),
            &datagram(41000, 80),
        );
        let (f1, f2) = fragments(&input, 0x3000, 24);
        for f in [f1, f2] {
            let (v, out) = dp.test_run(&f, lab.in_idx).unwrap();
            assert_eq!((v, out), (XDP_PASS, f));
        }
        assert_eq!(count(dp, Reason::PassFragGueCsum), 2);
        // Unfragmented, the same datagram goes by GUE.
        assert_eq!(dp.test_run(&input, lab.in_idx).unwrap().0, XDP_REDIRECT);
    });
}

#[test]
fn dr_two_fragments_reach_the_first_ones_real() {
    two_fragments_follow_the_first(Mode::Dr, "frdr", V4);
    two_fragments_follow_the_first(Mode::Dr, "f6dr", V6);
}

#[test]
fn tunnel_two_fragments_reach_the_first_ones_real() {
    two_fragments_follow_the_first(Mode::Tunnel, "frtn", V4);
    two_fragments_follow_the_first(Mode::Tunnel, "f6tn", V6);
}

#[test]
fn nat_two_fragments_reach_the_first_ones_real_translated() {
    two_fragments_follow_the_first(Mode::Nat, "frnt", V4);
    two_fragments_follow_the_first(Mode::Nat, "f6nt", V6);
}

#[test]
fn full_nat_two_fragments_reach_the_first_ones_real_translated() {
    two_fragments_follow_the_first(Mode::FullNat, "frfn", V4);
    two_fragments_follow_the_first(Mode::FullNat, "f6fn", V6);
}

/// A record-route option with room for two addresses, and the end of the options: 12 bytes.
const RECORD_ROUTE: [u8; 12] = [7, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];

/// The frame with IPv4 options `opts` (a multiple of 4 bytes) after its 20-byte IP header:
/// header length, total length and header checksum follow; the transport checksum does not
/// cover the options.
fn with_options(f: &[u8], opts: &[u8]) -> Vec<u8> {
    assert_eq!(f[14], 0x45);
    assert_eq!(opts.len() % 4, 0);
    let mut o = f[..34].to_vec();
    o.extend(opts);
    o.extend(&f[34..]);
    o[14] = 0x45 + (opts.len() / 4) as u8;
    let tot = u16::from_be_bytes([o[16], o[17]]) + opts.len() as u16;
    o[16..18].copy_from_slice(&tot.to_be_bytes());
    fix_ipv4_csum(&mut o);
    o
}

/// A client segment with the record route, as the router hands it to the load balancer.
fn rr_segment(lab: &Lab, flags: u8, options: Vec<u8>) -> Vec<u8> {
    let l4 = seg(40000, 80, flags, options, b"data".to_vec());
    with_options(
        &frame(lab.in_mac, ROUTER_MAC, ip(CLIENT4), ip(VIP4), &l4),
        &RECORD_ROUTE,
    )
}

/// A connection whose every segment carries a record-route option, through its handshake:
/// the SYN and the client's ACK reach the real with the options as they came (NAT and
/// full-NAT: translated, full-NAT with TOA behind the TCP options; the real's SYN-ACK, with
/// the option too, translated back); a spent SYN is answered quoting the options.
fn record_route_reaches_the_real(mode: Mode, tag: &str) {
    let real = REALS[0];
    let plan = if mode == Mode::FullNat {
        fnat_plan(VIP4, real, LADDR, true)
    } else {
        one_service(VIP4, mode, &[real], &[0])
    };
    with_lab(tag, cfg(), plan, move |lab, dp| {
        // What the real gets from a client segment (`lport`: full-NAT's local port).
        let expect = |flags: u8, tcp_opts: Vec<u8>, lport: u16| -> Vec<u8> {
            let (src, sport, dst, dport) = match mode {
                Mode::Dr | Mode::Tunnel => (CLIENT4, 40000, VIP4, 80),
                Mode::Nat => (CLIENT4, 40000, real, 8080),
                _ => (LADDR, lport, real, 8080),
            };
            let l4 = seg(sport, dport, flags, tcp_opts, b"data".to_vec());
            let f = with_options(
                &frame(REAL_MACS[0], lab.out_mac, ip(src), ip(dst), &l4),
                &RECORD_ROUTE,
            );
            if mode == Mode::Tunnel {
                tunneled(&lab, 0, "198.18.2.1", real, &f[14..])
            } else {
                hopped(&f)
            }
        };
        let syn = rr_segment(&lab, SYN, MSS.to_vec());
        let (v, out) = dp.test_run(&syn, lab.in_idx).unwrap();
        assert_eq!(v, XDP_REDIRECT, "{mode:?}: the SYN with a record route");
        verify_checksums(&out);
        let lport = if mode == Mode::FullNat {
            sport_at(&out)
        } else {
            0
        };
        let toa_of = |o: Vec<u8>| {
            if mode == Mode::FullNat {
                [o, toa(40000, CLIENT4)].concat()
            } else {
                o
            }
        };
        assert_eq!(
            out,
            expect(SYN, toa_of(MSS.to_vec()), lport),
            "{mode:?}: SYN"
        );

        if matches!(mode, Mode::Nat | Mode::FullNat) {
            // The real's SYN-ACK echoes the option (as Linux does): translated back.
            let dst = if mode == Mode::Nat { CLIENT4 } else { LADDR };
            let dport = if mode == Mode::Nat { 40000 } else { lport };
            let reply = with_options(
                &frame(
                    lab.out_mac,
                    REAL_MACS[0],
                    ip(real),
                    ip(dst),
                    &tcp(8080, dport, SYN | ACK),
                ),
                &RECORD_ROUTE,
            );
            let (v, out) = dp.test_run(&reply, lab.out_idx).unwrap();
            assert_eq!(v, XDP_REDIRECT, "{mode:?}: the SYN-ACK");
            let back = with_options(
                &frame(
                    ROUTER_MAC,
                    lab.in_mac,
                    ip(VIP4),
                    ip(CLIENT4),
                    &tcp(80, 40000, SYN | ACK),
                ),
                &RECORD_ROUTE,
            );
            assert_eq!(out, hopped(&back), "{mode:?}: SYN-ACK");
            verify_checksums(&out);
        }
        // The client's ACK proves the handshake (it acknowledges the SYN-ACK's 1000).
        let (v, out) = dp
            .test_run(&rr_segment(&lab, ACK, Vec::new()), lab.in_idx)
            .unwrap();
        assert_eq!(v, XDP_REDIRECT, "{mode:?}: the ACK");
        verify_checksums(&out);
        assert_eq!(out, expect(ACK, toa_of(Vec::new()), lport), "{mode:?}: ACK");
        assert_eq!(
            dp.program().half_open_count(),
            (0, 0),
            "{mode:?}: established"
        );
        assert_eq!(count(dp, Reason::PassIpOptions), 0);

        // A spent SYN with options: time exceeded from the VIP, quoting the header with its
        // options and 8 bytes.
        let mut spent = rr_segment(&lab, SYN, Vec::new());
        spent[22] = 1;
        fix_ipv4_csum(&mut spent);
        let (v, out) = dp.test_run(&spent, lab.in_idx).unwrap();
        assert_eq!(v, XDP_TX, "{mode:?}: a spent SYN is answered");
        let icmp = L4::Icmp {
            ty: 11,
            code: 0,
            rest: [0; 4],
            payload: spent[14..14 + 32 + 8].to_vec(),
        };
        assert_eq!(
            out,
            frame(ROUTER_MAC, lab.in_mac, ip(VIP4), ip(CLIENT4), &icmp)
        );
        verify_checksums(&out);
    });
}

#[test]
fn dr_a_syn_with_a_record_route_reaches_the_real() {
    record_route_reaches_the_real(Mode::Dr, "ordr");
}

#[test]
fn tunnel_a_syn_with_a_record_route_reaches_the_real() {
    record_route_reaches_the_real(Mode::Tunnel, "ortn");
}

#[test]
fn nat_a_syn_with_a_record_route_reaches_the_real_translated() {
    record_route_reaches_the_real(Mode::Nat, "ornt");
}

#[test]
fn full_nat_a_syn_with_a_record_route_reaches_the_real_translated_with_toa() {
    record_route_reaches_the_real(Mode::FullNat, "orfn");
}

#[test]
fn gue_with_a_checksum_carries_a_datagram_with_options() {
    // The outer checksum sums the inner packet without reading it: behind options too.
    let mut plan = udp_plan(Mode::Tunnel);
    plan.reals[0] = Some(PlannedReal {
        service: 0,
        addr: sa(REALS[0], 8080),
        mode: Mode::Tunnel,
        tunnel: wirespeed_lb::model::Tunnel::Gue {
            port: 6080,
            csum: true,
        },
    });
    plan.services[0].lookup = vec![0; RING as usize];
    with_lab("ogue", cfg(), plan, |lab, dp| {
        let plain = frame(
            lab.in_mac,
            ROUTER_MAC,
            ip(CLIENT4),
            ip(VIP4),
            &datagram(41000, 80),
        );
        let input = with_options(&plain, &RECORD_ROUTE);
        let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
        assert_eq!(v, XDP_REDIRECT);
        // Outer IPv4 and UDP to port 6080, then the packet one hop on, options and all.
        assert_eq!(&out[14 + 9], &17, "outer UDP");
        assert_eq!(&out[36..38], &6080u16.to_be_bytes());
        assert_ne!(&out[40..42], &[0, 0], "an outer checksum");
        assert_eq!(&out[42..], &hop(&input[14..])[..]);
        verify_checksums(&out);
        assert_eq!(count(dp, Reason::FwdTunnel), 1);
    });
}

#[test]
fn ipv6_fragments_not_served_are_counted_apart_from_other_extension_headers() {
    let mut plan = one_service(VIP6, Mode::Dr, &["fd00:2::10"], &[0]);
    plan.services[0].key.proto = Proto::Udp;
    with_lab("fr6", cfg(), plan, |lab, dp| {
        // The datagram's UDP header and data behind an extension header `next` (8 bytes).
        let with_ext = |next: u8, ext: [u8; 8]| {
            let plain = frame(
                lab.in_mac,
                ROUTER_MAC,
                ip(CLIENT6),
                ip(VIP6),
                &datagram(41000, 80),
            );
            let mut f = plain[..54].to_vec();
            f.extend(ext);
            f.extend(&plain[54..]);
            let pl = u16::from_be_bytes([f[18], f[19]]) + 8;
            f[18..20].copy_from_slice(&pl.to_be_bytes());
            f[20] = next;
            f
        };
        // An atomic fragment (offset 0, no more: RFC 8021), a fragment of ICMPv6, and a
        // hop-by-hop header (padding).
        let atomic = with_ext(44, [17, 0, 0, 0, 0, 0, 0, 7]);
        let icmp = with_ext(44, [58, 0, 0, 1, 0, 0, 0, 8]);
        let hbh = with_ext(0, [17, 0, 1, 4, 0, 0, 0, 0]);
        for (f, why, n) in [
            (atomic, Reason::PassIp6Fragment, 1),
            (icmp, Reason::PassIp6Fragment, 2),
            (hbh, Reason::PassIpOptions, 1),
        ] {
            let (v, out) = dp.test_run(&f, lab.in_idx).unwrap();
            assert_eq!((v, out), (XDP_PASS, f));
            assert_eq!(count(dp, why), n, "{why:?}");
        }
        // A later fragment whose first never came: dropped and counted, as over IPv4.
        let input = frame(
            lab.in_mac,
            ROUTER_MAC,
            ip(CLIENT6),
            ip(VIP6),
            &datagram(41000, 80),
        );
        let (_, f2) = fragments(&input, 9, 24);
        assert_eq!(dp.test_run(&f2, lab.in_idx).unwrap().0, XDP_DROP);
        assert_eq!(count(dp, Reason::DropFragUnplaced), 1);
    });
}
