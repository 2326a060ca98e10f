//! IPv6: duplicate address detection, neighbour discovery, echo, TCP and UDP over IPv6 beside
//! IPv4 on the same stacks, and the input rules of `ipv6_input`.

use super::*;
use wirespeed_wire::icmpv6::{Icmpv6Packet, Icmpv6Repr};

const IP6_A: Ipv6Addr = Ipv6Addr([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
const IP6_B: Ipv6Addr = Ipv6Addr([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
/// The link-local addresses of A and B, fe80::ff:fe00:1 and fe80::ff:fe00:2 (the EUI-64 of
/// 02:00:00:00:00:01 and ...:02).
const LL_A: Ipv6Addr = Ipv6Addr([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, 1]);
const LL_B: Ipv6Addr = Ipv6Addr([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, 2]);

/// [`config_cc`] with an IPv6 address (and DAD as the stack defaults to it).
fn dual_config(side: usize, cc: CongestionAlgorithm) -> Config {
    let mut c = config_cc(side, cc);
    c.ipv6 = Some(if side == 0 { IP6_A } else { IP6_B });
    c
}

/// A stack for side `side` whose IPv6 address is usable at once (`nodad`).
fn no_dad(side: usize) -> Config {
    let mut c = dual_config(side, CongestionAlgorithm::Cubic);
    c.ipv6_dad = false;
    c
}

fn dual_pair(cc: CongestionAlgorithm) -> Pair {
    Pair::with(dual_config(0, cc), dual_config(1, cc))
}

/// Runs until both stacks own their IPv6 addresses (DAD over).
fn settle(p: &mut Pair) {
    p.run(Duration::from_millis(1100), |_| false);
    assert!(p
        .st
        .iter()
        .all(|s| s.ipv6_usable() && s.link_local_usable()));
}

/// b listens on 80, a connects to `dst`; returns (client, server).
fn connect_to(p: &mut Pair, dst: IpAddress) -> (ConnId, ConnId) {
    let l = p.st[1].tcp_listen(80, 16).unwrap();
    let now = p.now;
    let c = p.st[0].tcp_connect(now, dst, 80, |_| true).unwrap();
    let mut server = None;
    assert!(p.run(Duration::from_secs(30), |p| {
        if server.is_none() {
            server = p.st[1].tcp_accept(l).ok();
        }
        server.is_some() && p.st[0].tcp_state(c) == Ok(TcpState::Established)
    }));
    (c, server.unwrap())
}

/// The ICMPv6 messages in `frames` (IPv6 header, message).
fn icmpv6_of(frames: &[Vec<u8>]) -> Vec<(Ipv6Repr, Vec<u8>)> {
    frames
        .iter()
        .filter(|f| f.len() > 14 + 40 && f[12..14] == [0x86, 0xdd])
        .filter_map(|f| {
            let p = Ipv6Packet::new_checked(&f[14..]).ok()?;
            let ip = Ipv6Repr::parse(&p).ok()?;
            (ip.next_header == IpProtocol::Icmpv6).then(|| (ip, p.payload().to_vec()))
        })
        .collect()
}

#[test]
fn dad_probes_both_addresses_once_then_they_are_used() {
    let mut s = Stack::new(dual_config(1, CongestionAlgorithm::Cubic));
    assert_eq!(s.config().ipv6_link_local(), Some(LL_B));
    assert!(!s.ipv6_usable() && !s.link_local_usable());
    let mut sink = VecSink::new();
    s.transmit(Instant::from_millis(1000), &mut sink);
    let msgs = icmpv6_of(&sink.frames);
    assert_eq!(msgs.len(), 2, "one DAD probe for each address");
    for (i, target) in [IP6_B, LL_B].into_iter().enumerate() {
        let (ip, msg) = &msgs[i];
        assert_eq!(
            (ip.src, ip.dst, ip.hop_limit),
            (Ipv6Addr::UNSPECIFIED, target.solicited_node(), 255)
        );
        let pkt = Icmpv6Packet::new_checked(&msg[..]).unwrap();
        assert_eq!(
            Icmpv6Repr::parse(&pkt, ip.src, ip.dst).unwrap(),
            Icmpv6Repr::NeighborSolicit {
                target,
                source_lladdr: None
            }
        );
        assert_eq!(
            &sink.frames[i][..6],
            &target.solicited_node().multicast_mac().0
        );
    }
    // Nothing but neighbour discovery reaches a tentative address.
    s.receive(Instant::from_millis(1500), &syn6_to(LL_B, 80, LL_A));
    assert_eq!(s.stats().ip6_tentative, 1);
    s.transmit(Instant::from_millis(1999), &mut VecSink::new());
    assert!(
        !s.ipv6_usable() && !s.link_local_usable(),
        "tentative for retrans_time (1 s)"
    );
    s.transmit(Instant::from_millis(2000), &mut VecSink::new());
    assert!(s.ipv6_usable() && s.link_local_usable());
}

#[test]
fn a_second_node_with_our_address_fails_dad() {
    // Both sides claim IP6_B: each hears the other's probe, and neither keeps the address.
    let mut a = dual_config(0, CongestionAlgorithm::Cubic);
    a.ipv6 = Some(IP6_B);
    let mut p = Pair::with(a, dual_config(1, CongestionAlgorithm::Cubic));
    p.run(Duration::from_millis(1500), |_| false);
    for s in &p.st {
        assert!(!s.ipv6_usable());
        assert_eq!(s.stats().ndp_dad_conflicts, 1);
        // Their link-local addresses differ, and stay (Linux's accept_dad 1).
        assert!(s.link_local_usable());
    }
}

per_cc! {
    fn tcp_over_ipv6_beside_ipv4(cc) {
        let mut p = dual_pair(cc);
        settle(&mut p);
        let (c6, s6) = connect_to(&mut p, IP6_B.into());
        assert_eq!(p.st[0].stats().ndp_solicitations_sent, 3, "DAD probes, then one for B");
        assert_eq!(p.st[1].stats().ndp_advertisements_sent, 1);
        assert_eq!(p.st[1].tcp_endpoints(s6).unwrap().0, IpAddress::V6(IP6_A));
        assert_eq!(p.st[0].tcp_info(c6).unwrap().mss, 1500 - 40 - 20 - 12, "MSS for IPv6");
        transfer(&mut p, 0, c6, s6, 1 << 20, Duration::from_secs(60));
        // IPv4 to the same stacks on the same port, at the same time as IPv6.
        let now = p.now;
        let c4 = p.st[0].tcp_connect(now, IP_B, 80, |_| true).unwrap();
        assert!(p.run(Duration::from_secs(5), |p| p.st[0].tcp_state(c4) == Ok(TcpState::Established)));
        transfer(&mut p, 1, s6, c6, 1 << 20, Duration::from_secs(60));
    }
}

per_cc! {
    fn sixty_four_mib_over_ipv6_through_loss_and_duplication(cc) {
        let mut a = dual_config(0, cc);
        let mut b = dual_config(1, cc);
        a.send_buffer = 512 * 1024;
        b.recv_buffer = 512 * 1024;
        let mut p = Pair::with(a, b);
        settle(&mut p);
        let (c, s) = connect_to(&mut p, IP6_B.into());
        p.impair = Impair {
            loss: 10,
            dup: 10,
            reorder: 0,
        };
        transfer(&mut p, 0, c, s, 64 << 20, Duration::from_secs(3600));
        let (tx, rx) = (p.st[0].stats(), p.st[1].stats());
        assert!(tx.tcp_retransmits > 0 && rx.tcp_duplicate_segments > 0, "{tx:?}");
    }
}

#[test]
fn echo_udp_and_port_unreachable_over_ipv6() {
    let mut p = dual_pair(CongestionAlgorithm::Cubic);
    settle(&mut p);
    let ua = p.st[0].udp_bind(5353).unwrap();
    let ub = p.st[1].udp_bind(53).unwrap();
    p.st[0].udp_send_to(ua, IP6_B, 53, b"query").unwrap();
    let mut buf = [0u8; 64];
    assert!(p.run(Duration::from_secs(2), |p| {
        if let Ok((n, ip, port)) = p.st[1].udp_recv_from(ub, &mut buf) {
            assert_eq!(
                (&buf[..n], ip, port),
                (&b"query"[..], IpAddress::V6(IP6_A), 5353)
            );
            return true;
        }
        false
    }));
    // A datagram to a port without a socket: ICMPv6 destination unreachable, port (4).
    let mut seen = Vec::new();
    p.filter = Some(Box::new(move |from, f| {
        if from == 1 {
            seen.extend(icmpv6_of(&[f.to_vec()]));
            assert!(seen.iter().all(|(_, m)| m[0] != 1 || m[1] == 4));
        }
        true
    }));
    p.st[0].udp_send_to(ua, IP6_B, 54, b"nobody").unwrap();
    p.run(Duration::from_millis(100), |_| false);
    assert_eq!(p.st[1].stats().icmp_errors_sent, 1);
}

/// Linux's ICMPv6 limit per destination (`icmpv6_xrlim_allow`): six errors at once, then one
/// per `icmpv6_time` (1 s) halved for every 32 bits of the route's prefix below 128: 250 ms
/// for a neighbour on our /64, 62.5 ms for a host through the default route.
#[test]
fn an_ipv6_destination_gets_errors_at_its_routes_interval() {
    let mut c = no_dad(1);
    c.ipv6_gateway = Some(LL_A);
    let mut s = Stack::new(c);
    s.neighbour_add_static(LL_A, MAC_A);
    s.neighbour_add_static(IP6_A, MAC_A);
    let off_link = Ipv6Addr([0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]);
    for (src, interval_ms, t) in [(IP6_A, 250, 1000), (off_link, 62, 3000)] {
        let (_, udp) = kit::l4_bytes(src.0.into(), IP6_B.0.into(), &kit::udp(5000, 54));
        let f = v6_frame(src, IP6_B, IpProtocol::Udp, (64, 0), &udp);
        let errors = |s: &mut Stack, ms: u64, n: usize| -> usize {
            let now = Instant::from_millis(ms);
            (0..n)
                .map(|_| {
                    s.receive(now, &f);
                    let mut sink = VecSink::new();
                    s.transmit(now, &mut sink);
                    icmpv6_of(&sink.frames).len()
                })
                .sum()
        };
        assert_eq!(errors(&mut s, t, 10), 6, "{src:?}");
        assert_eq!(errors(&mut s, t + interval_ms - 1, 2), 0, "{src:?}");
        assert_eq!(errors(&mut s, t + interval_ms + 1, 2), 1, "{src:?}");
    }
    assert_eq!(s.stats().icmp_rate_limited_host, 2 * (4 + 2 + 1));
}

#[test]
fn ping6_is_answered_with_the_request_traffic_class_and_code() {
    let mut s = Stack::new(no_dad(1));
    let req = Icmpv6Repr::EchoRequest {
        code: 5,
        ident: 7,
        seq_no: 9,
        data: b"ping",
    };
    let f = icmpv6_frame(&req, IP6_A, IP6_B, (64, 0xb8));
    let now = Instant::from_millis(1000);
    s.receive(now, &f);
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    let msgs = icmpv6_of(&sink.frames);
    assert_eq!(msgs.len(), 1, "{:?}", s.stats());
    let (ip, msg) = &msgs[0];
    assert_eq!((ip.src, ip.dst, ip.traffic_class), (IP6_B, IP6_A, 0xb8));
    let pkt = Icmpv6Packet::new_checked(&msg[..]).unwrap();
    assert_eq!(
        Icmpv6Repr::parse(&pkt, ip.src, ip.dst).unwrap(),
        Icmpv6Repr::EchoReply {
            code: 5,
            ident: 7,
            seq_no: 9,
            data: b"ping"
        }
    );
}

/// Ethernet (A to B) around an IPv6 header (next header `next`, hop limit and traffic
/// class `(hops, tc)`) and `payload`.
fn v6_frame(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    next: IpProtocol,
    (hops, tc): (u8, u8),
    payload: &[u8],
) -> Vec<u8> {
    let h = kit::IpHeader {
        ttl: hops,
        tos: tc,
        ..kit::IpHeader::default()
    };
    let ip = kit::ip_header_with(src.0.into(), dst.0.into(), next.into(), payload.len(), &h);
    let mut f = kit::eth(MAC_B.0, MAC_A.0, true, &ip);
    f.extend_from_slice(payload);
    f
}

/// Ethernet (A to B) and IPv6 (hop limit and traffic class `hops_tc`) around the ICMPv6
/// message `m` from `src` to `dst`, checksummed.
fn icmpv6_frame(m: &Icmpv6Repr, src: Ipv6Addr, dst: Ipv6Addr, hops_tc: (u8, u8)) -> Vec<u8> {
    let mut b = vec![0u8; m.buffer_len()];
    m.emit(src, dst, &mut b).unwrap();
    v6_frame(src, dst, IpProtocol::Icmpv6, hops_tc, &b)
}

/// The TCP segment `repr` (no payload) from `src` to `dst`, checksummed.
fn tcp6_bytes(repr: &TcpRepr, src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
    let l4 = kit::L4::Tcp(kit::Tcp::from_repr(repr, &[]));
    kit::l4_bytes(src.0.into(), dst.0.into(), &l4).1
}

/// Runs `f` through a fresh stack (B, no DAD) at t = 1 s and returns what it sent.
fn answers(f: &[u8]) -> (Vec<Vec<u8>>, Stats) {
    let mut s = Stack::new(no_dad(1));
    let _ = s.tcp_listen(80, 4).unwrap();
    let now = Instant::from_millis(1000);
    s.neighbour_add_static(IP6_A, MAC_A);
    s.neighbour_add_static(LL_A, MAC_A);
    s.receive(now, f);
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    (sink.frames, s.stats().clone())
}

/// A SYN from A's port 1000 to B's port `dport` over IPv6, after `ext` (extension headers,
/// whose first next-header byte the caller set) when given.
fn syn6(dport: u16, src: Ipv6Addr, ext: &[u8], first: IpProtocol) -> Vec<u8> {
    syn6_between(src, IP6_B, dport, ext, first)
}

/// A SYN from `src` port 1000 to `dst` port `dport`, with no extension headers.
fn syn6_to(dst: Ipv6Addr, dport: u16, src: Ipv6Addr) -> Vec<u8> {
    syn6_between(src, dst, dport, &[], IpProtocol::Tcp)
}

fn syn6_between(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    dport: u16,
    ext: &[u8],
    first: IpProtocol,
) -> Vec<u8> {
    let repr = TcpRepr {
        src_port: 1000,
        dst_port: dport,
        seq: SeqNumber(500),
        ack: None,
        flags: flags::SYN,
        window: 65535,
        options: TcpOptions::default(),
    };
    let mut upper = ext.to_vec();
    upper.extend(tcp6_bytes(&repr, src, dst));
    v6_frame(src, dst, first, (64, 0), &upper)
}

#[test]
fn a_syn_after_hop_by_hop_and_destination_options_is_answered() {
    // Hop-by-hop (next: destination options) with a PadN, then destination options (next:
    // TCP) with Pad1s: both skipped, as Linux skips them.
    let ext = [60, 0, 1, 4, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0];
    let (out, st) = answers(&syn6(80, IP6_A, &ext, IpProtocol::Unknown(0)));
    assert_eq!(out.len(), 1, "{st:?}");
    let p = Ipv6Packet::new_checked(&out[0][14..]).unwrap();
    let t = TcpPacket::new_checked(p.payload()).unwrap();
    assert!(t.syn() && t.ack());
    assert!(t.verify_checksum(IP6_B, IP6_A));
}

#[test]
fn an_unknown_next_header_is_answered_with_parameter_problem() {
    // Protocol 1 (ICMP for IPv4) has no IPv6 handler: code 1, pointing at byte 6.
    let f = v6_frame(IP6_A, IP6_B, IpProtocol::Icmp, (64, 0), &[0; 8]);
    let (out, st) = answers(&f);
    assert_eq!(st.ip6_param_problems, 1);
    let msgs = icmpv6_of(&out);
    assert_eq!(msgs.len(), 1);
    let m = &msgs[0].1;
    assert_eq!((m[0], m[1], &m[4..8]), (4, 1, &[0, 0, 0, 6][..]));
    assert_eq!(&m[8..], &f[14..], "quotes the datagram");
}

#[test]
fn an_unknown_next_header_in_a_broadcast_frame_is_not_answered() {
    // The same datagram as above in a frame to ff:ff:ff:ff:ff:ff (Linux: not PACKET_HOST).
    let mut f = v6_frame(IP6_A, IP6_B, IpProtocol::Icmp, (64, 0), &[0; 8]);
    f[..6].copy_from_slice(&MacAddr::BROADCAST.0);
    let (out, st) = answers(&f);
    assert_eq!(st.ip6_param_problems, 1);
    assert!(icmpv6_of(&out).is_empty());
}

#[test]
fn martian_and_foreign_ipv6_is_dropped_unanswered() {
    let mut multicast_src = IP6_A;
    multicast_src.0[0] = 0xff;
    let mut loopback = Ipv6Addr::UNSPECIFIED;
    loopback.0[15] = 1;
    for (src, why) in [
        (multicast_src, "multicast source"),
        (loopback, "loopback source"),
        (IP6_B, "our own address as source"),
        (LL_B, "our own link-local address as source"),
    ] {
        let (out, st) = answers(&syn6(80, src, &[], IpProtocol::Tcp));
        assert!(out.is_empty(), "{why}");
        assert_eq!(st.ip6_bad_source, 1, "{why}");
    }
    // An IPv4-mapped source: TCP refuses it (Linux's tcp_v6_conn_request), so a peer
    // cannot pose as the IPv4 one our demux keys by that address.
    let mapped = Ipv6Addr([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 1]);
    let (out, st) = answers(&syn6(80, mapped, &[], IpProtocol::Tcp));
    assert!(out.is_empty());
    assert_eq!(st.ip6_bad_source, 1);
    let mut f = syn6(80, IP6_A, &[], IpProtocol::Tcp);
    f[14 + 24 + 15] = 9; // another destination
    let (out, st) = answers(&f);
    assert!(out.is_empty());
    assert_eq!(st.ip6_not_for_us, 1);
}

#[test]
fn a_neighbour_solicitation_is_answered_only_at_hop_limit_255() {
    let ns = Icmpv6Repr::NeighborSolicit {
        target: IP6_B,
        source_lladdr: Some(MAC_A),
    };
    let group = IP6_B.solicited_node();
    for (hops, answered) in [(255, true), (64, false)] {
        let mut f = icmpv6_frame(&ns, IP6_A, group, (hops, 0));
        f[..6].copy_from_slice(&group.multicast_mac().0);
        let (out, st) = answers(&f);
        let msgs = icmpv6_of(&out);
        assert_eq!(msgs.len(), answered as usize, "hop limit {hops}: {st:?}");
        if answered {
            let (ip, m) = &msgs[0];
            let pkt = Icmpv6Packet::new_checked(&m[..]).unwrap();
            assert_eq!((ip.dst, ip.hop_limit), (IP6_A, 255));
            assert_eq!(
                Icmpv6Repr::parse(&pkt, ip.src, ip.dst).unwrap(),
                Icmpv6Repr::NeighborAdvert {
                    router: false,
                    solicited: true,
                    override_: true,
                    target: IP6_B,
                    target_lladdr: Some(MAC_B),
                }
            );
        } else {
            assert_eq!(st.ndp_invalid, 1);
        }
    }
}

/// The IPv6 form of a gratuitous ARP: B's unsolicited advertisement of its address from a
/// new MAC, to every node, with Override (docs/TCPIP.md, "Neighbours that move").
#[test]
fn an_unsolicited_advertisement_from_a_new_mac_moves_the_connections() {
    use super::neighbours::{move_b, MAC_NEW};
    let mut p = dual_pair(CongestionAlgorithm::Cubic);
    settle(&mut p);
    let (c, s) = connect_to(&mut p, IP6_B.into());
    move_b(&mut p);
    let na = Icmpv6Repr::NeighborAdvert {
        router: false,
        solicited: false,
        override_: true,
        target: IP6_B,
        target_lladdr: Some(MAC_NEW),
    };
    let mut f = icmpv6_frame(&na, IP6_B, Ipv6Addr::ALL_NODES, (255, 0));
    f[..6].copy_from_slice(&Ipv6Addr::ALL_NODES.multicast_mac().0);
    f[6..12].copy_from_slice(&MAC_NEW.0);
    let now = p.now;
    p.st[0].receive(now, &f);
    assert_eq!(p.st[0].stats().neighbour_moved, 1);
    transfer_within(&mut p, 0, c, s, 200_000, Duration::from_secs(5), |_| {});
    let st = p.st[0].stats();
    assert_eq!((st.tcp_rto_expired, st.tcp_retransmits), (0, 0));
}

#[test]
fn a_syn_to_a_closed_port_over_ipv6_gets_a_rst() {
    let (out, _) = answers(&syn6(81, IP6_A, &[], IpProtocol::Tcp));
    assert_eq!(out.len(), 1);
    let p = Ipv6Packet::new_checked(&out[0][14..]).unwrap();
    let t = TcpPacket::new_checked(p.payload()).unwrap();
    assert!(t.rst() && t.ack() && t.ack_number() == SeqNumber(501));
}

#[test]
fn a_connection_opened_while_tentative_solicits_when_dad_ends() {
    // No settle: A connects at once, while its address is tentative; its solicitation for
    // B must leave when DAD ends, not a retry (1 s) later.
    let mut p = dual_pair(CongestionAlgorithm::Cubic);
    let l = p.st[1].tcp_listen(80, 4).unwrap();
    let now = p.now;
    let c = p.st[0].tcp_connect(now, IP6_B, 80, |_| true).unwrap();
    let start = p.now;
    assert!(p.run(Duration::from_secs(3), |p| {
        p.st[0].tcp_state(c) == Ok(TcpState::Established) && p.st[1].tcp_accept(l).is_ok()
    }));
    let took = p.now.since(start);
    assert!(
        took < Duration::from_millis(1100),
        "established after {took:?}"
    );
    assert_eq!(
        p.st[0].stats().ndp_solicitations_sent,
        3,
        "the DAD probes and one for B"
    );
}

/// One fragment of the datagram in `frame` (Ethernet, a fixed IPv6 header naming the upper
/// layer, the upper layer): the upper layer's bytes [`from`, `to`) of datagram `ident`,
/// behind `hbh` (a hop-by-hop header naming the fragment header, or nothing).
fn fragment6(frame: &[u8], hbh: &[u8], (from, to): (usize, usize), ident: u32) -> Vec<u8> {
    let upper = &frame[54..];
    let mut f = frame[..54].to_vec();
    f[20] = if hbh.is_empty() { 44 } else { 0 };
    f.extend_from_slice(hbh);
    let mut fh = [0u8; 8];
    wirespeed_wire::ipv6_ext::FragmentHeader {
        next_header: frame[20].into(),
        offset_bytes: from,
        more: to < upper.len(),
        ident,
    }
    .emit(&mut fh)
    .unwrap();
    f.extend_from_slice(&fh);
    f.extend_from_slice(&upper[from..to]);
    let plen = (f.len() - 54) as u16;
    f[18..20].copy_from_slice(&plen.to_be_bytes());
    f
}

/// The datagram in `frame` cut in fragments at the upper layer's offsets `cuts`.
fn fragments6(frame: &[u8], hbh: &[u8], cuts: &[usize], ident: u32) -> Vec<Vec<u8>> {
    let mut at = vec![0];
    at.extend_from_slice(cuts);
    at.push(frame.len() - 54);
    at.windows(2)
        .map(|w| fragment6(frame, hbh, (w[0], w[1]), ident))
        .collect()
}

/// B without DAD, listening on port 80, A's MAC known.
fn fragment_station(cfg: Config) -> Stack {
    let mut s = Stack::new(cfg);
    s.tcp_listen(80, 4).unwrap();
    s.neighbour_add_static(IP6_A, MAC_A);
    s
}

/// `frames` into `s` at `now`; what it sent.
fn feed(s: &mut Stack, now: Instant, frames: &[&Vec<u8>]) -> Vec<Vec<u8>> {
    for f in frames {
        s.receive(now, f);
    }
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    sink.frames
}

/// A SYN from A's port 1000 to B's port 80 with 20 bytes of options (40 in all).
fn long_syn6() -> Vec<u8> {
    let repr = peer_syn(TcpOptions {
        mss: Some(1440),
        window_scale: Some(7),
        sack_permitted: true,
        timestamps: Some((1, 0)),
        ..Default::default()
    });
    let t = tcp6_bytes(&repr, IP6_A, IP6_B);
    assert_eq!(t.len(), 40);
    v6_frame(IP6_A, IP6_B, IpProtocol::Tcp, (64, 0), &t)
}

/// The answer to a SYN from A's port 1000 (sequence 500) (port 80, sequence 500).
fn is_syn_ack(f: &[u8]) -> bool {
    let p = Ipv6Packet::new_checked(&f[14..]).unwrap();
    let t = TcpPacket::new_checked(p.payload()).unwrap();
    t.syn() && t.ack() && t.ack_number() == SeqNumber(501) && t.verify_checksum(IP6_B, IP6_A)
}

const T1: Instant = Instant::from_millis(1000);

/// A station that got [`long_syn6`] in two fragments, fragment `first` (0 or 1) first, and
/// answered it with a SYN-ACK once both were in.
fn syn_in_two_ipv6_fragments(first: usize) -> Stack {
    let mut s = fragment_station(no_dad(1));
    // The first fragment holds the TCP header (RFC 7112) and part of its options.
    let f = fragments6(&long_syn6(), &[], &[24], 1);
    assert!(feed(&mut s, T1, &[&f[first]]).is_empty());
    let out = feed(&mut s, T1, &[&f[1 - first]]);
    assert_eq!(out.len(), 1, "{:?}", s.stats());
    assert!(is_syn_ack(&out[0]));
    s
}

#[test]
fn a_syn_in_two_ipv6_fragments_gets_a_syn_ack() {
    let s = syn_in_two_ipv6_fragments(0);
    assert_eq!(s.stats().ip6_frag_reassembled, 1);
    assert_eq!(s.stats().ip6_fragments_dropped, 0);
}

#[test]
fn a_syn_in_two_ipv6_fragments_last_first_gets_a_syn_ack() {
    syn_in_two_ipv6_fragments(1);
}

#[test]
fn a_duplicate_ipv6_fragment_is_dropped_alone() {
    let mut s = fragment_station(no_dad(1));
    let f = fragments6(&long_syn6(), &[], &[24], 1);
    let out = feed(&mut s, T1, &[&f[0], &f[0], &f[1]]);
    assert_eq!(out.len(), 1);
    assert!(is_syn_ack(&out[0]));
    let st = s.stats();
    assert_eq!((st.ip6_frag_duplicate, st.ip6_frag_reassembled), (1, 1));
}

#[test]
fn an_overlapping_ipv6_fragment_drops_the_queue() {
    let mut s = fragment_station(no_dad(1));
    let syn = long_syn6();
    let first = fragment6(&syn, &[], (0, 32), 1);
    let overlapping = fragment6(&syn, &[], (24, 40), 1);
    assert!(feed(&mut s, T1, &[&first, &overlapping]).is_empty());
    assert_eq!(s.stats().ip6_frag_overlap_dropped, 1);
    // What was held went with it: the rest alone completes nothing.
    assert!(feed(&mut s, T1, &[&fragment6(&syn, &[], (32, 40), 1)]).is_empty());
    assert_eq!(s.stats().ip6_frag_reassembled, 0);
}

#[test]
fn an_unfinished_ipv6_datagram_times_out_after_60_s_with_time_exceeded() {
    let mut s = fragment_station(no_dad(1));
    // Datagram 1 lacks its last fragment, datagram 2 its first: only 1 is answered.
    let syn = long_syn6();
    let first = fragment6(&syn, &[], (0, 24), 1);
    let last = fragment6(&syn, &[], (24, 40), 2);
    assert!(feed(&mut s, T1, &[&first, &last]).is_empty());
    let due = T1.add(Duration::from_secs(60));
    assert_eq!(s.poll_at(), Some(due));
    assert!(feed(&mut s, T1.add(Duration::from_millis(59_999)), &[]).is_empty());
    let out = feed(&mut s, due, &[]);
    let msgs = icmpv6_of(&out);
    assert_eq!((out.len(), msgs.len()), (1, 1));
    let (ip, m) = &msgs[0];
    assert_eq!((ip.src, ip.dst), (IP6_B, IP6_A));
    assert!(Icmpv6Packet::new_checked(&m[..])
        .unwrap()
        .verify_checksum(IP6_B, IP6_A));
    // Time exceeded, fragment reassembly; the first fragment quoted whole.
    assert_eq!((m[0], m[1]), (3, 1));
    assert_eq!(&m[8..], &first[14..]);
    assert_eq!(s.stats().ip6_frag_timeout, 2);
    assert_eq!(s.stats().ip_frag_timeout, 0);
    assert_eq!(s.poll_at(), None);
}

#[test]
fn over_ip6frag_high_thresh_ipv6_fragments_are_refused() {
    let mut cfg = no_dad(1);
    cfg.ip6frag_high_thresh = 4 * crate::frag_queues::Queues::<crate::ipv6_frag::V6>::QUEUE_COST;
    let mut s = fragment_station(cfg);
    // First fragments of datagrams that never complete, until the queues hold too much.
    let mut queued = 0;
    while s.stats().ip6_frag_mem_exceeded == 0 {
        let f = fragments6(&long_syn6(), &[], &[24], 100 + queued);
        assert!(feed(&mut s, T1, &[&f[0]]).is_empty());
        queued += 1;
        assert!(queued <= 4, "{:?}", s.stats());
    }
    queued -= 1;
    // Then every fragment is refused, even those of a datagram that would be whole.
    let f = fragments6(&long_syn6(), &[], &[24], 1);
    assert!(feed(&mut s, T1, &[&f[0], &f[1]]).is_empty());
    assert_eq!(s.stats().ip6_frag_mem_exceeded, 3);
    // Memory comes back as the queues time out (each answered: its first fragment came).
    let later = T1.add(Duration::from_secs(60));
    assert_eq!(icmpv6_of(&feed(&mut s, later, &[])).len(), queued as usize);
    let out = feed(&mut s, later, &[&f[0], &f[1]]);
    assert_eq!(out.len(), 1);
    assert!(is_syn_ack(&out[0]));
    // IPv4's bound is its own: at 1 byte it does not stop IPv6.
    let mut cfg = no_dad(1);
    cfg.ipfrag_high_thresh = 1;
    let mut s = fragment_station(cfg);
    assert_eq!(feed(&mut s, T1, &[&f[0], &f[1]]).len(), 1);
}

#[test]
fn a_udp_datagram_of_3000_bytes_in_three_ipv6_fragments_is_delivered_whole() {
    let mut s = Stack::new(no_dad(1));
    let sock = s.udp_bind(53).unwrap();
    let payload: Vec<u8> = (0..3000).map(|i| (i * 7 + 1) as u8).collect();
    let udp = kit::L4::Udp {
        sport: 5000,
        dport: 53,
        payload: payload.clone(),
    };
    let (_, u) = kit::l4_bytes(IP6_A.0.into(), IP6_B.0.into(), &udp);
    let f = v6_frame(IP6_A, IP6_B, IpProtocol::Udp, (64, 0), &u);
    // Behind a hop-by-hop header (PadN), which stays in the reassembled datagram.
    let hbh = [44, 0, 1, 4, 0, 0, 0, 0];
    let frags = fragments6(&f, &hbh, &[1232, 2464], 9);
    assert_eq!(frags.len(), 3);
    feed(&mut s, T1, &[&frags[2], &frags[0], &frags[1]]);
    let mut buf = vec![0u8; 4096];
    let (n, ip, port) = s.udp_recv_from(sock, &mut buf).expect("reassembled");
    assert_eq!(
        (&buf[..n], ip, port),
        (&payload[..], IpAddress::V6(IP6_A), 5000)
    );
    assert_eq!(s.stats().ip6_frag_reassembled, 1);
}

#[test]
fn an_atomic_fragment_is_taken_without_reassembly() {
    let mut s = fragment_station(no_dad(1));
    // Offset 0, M clear (RFC 6946): the walk goes on past it to TCP.
    let atomic = [6, 0, 0, 0, 0, 0, 0, 5];
    let syn = syn6(80, IP6_A, &atomic, IpProtocol::Unknown(44));
    let out = feed(&mut s, T1, &[&syn]);
    assert_eq!(out.len(), 1, "{:?}", s.stats());
    assert!(is_syn_ack(&out[0]));
    assert_eq!(s.stats().ip6_frag_reassembled, 0);
    assert_eq!(s.frag.v6.next_deadline(), None, "no queue");
}

#[test]
fn a_ping_in_fragments_is_answered_and_a_solicitation_in_fragments_is_not() {
    let mut s = fragment_station(no_dad(1));
    // An echo request whose second fragment starts with 135, a neighbour solicitation's
    // type: only the reassembled message's type counts.
    let req = Icmpv6Repr::EchoRequest {
        code: 0,
        ident: 7,
        seq_no: 1,
        data: &[135; 24],
    };
    let f = icmpv6_frame(&req, IP6_A, IP6_B, (64, 0));
    let frags = fragments6(&f, &[], &[8], 3);
    let msgs = icmpv6_of(&feed(&mut s, T1, &[&frags[0], &frags[1]]));
    assert_eq!(msgs.len(), 1, "{:?}", s.stats());
    assert_eq!(msgs[0].1[0], 129, "an echo reply");
    // A solicitation reassembled is still one that came in fragments (suppress_frag_ndisc).
    let ns = Icmpv6Repr::NeighborSolicit {
        target: IP6_B,
        source_lladdr: Some(MAC_A),
    };
    let f = icmpv6_frame(&ns, IP6_A, IP6_B, (255, 0));
    let frags = fragments6(&f, &[], &[16], 4);
    assert!(feed(&mut s, T1, &[&frags[0], &frags[1]]).is_empty());
    assert_eq!(s.stats().ndp_invalid, 1);
    assert_eq!(s.stats().ip6_frag_reassembled, 2);
}

#[test]
fn a_multicast_solicitation_without_our_senders_mac_is_answered_only_if_we_know_it() {
    let ns = Icmpv6Repr::NeighborSolicit {
        target: IP6_B,
        source_lladdr: None,
    };
    let group = IP6_B.solicited_node();
    let mut f = icmpv6_frame(&ns, IP6_A, group, (255, 0));
    f[..6].copy_from_slice(&group.multicast_mac().0);
    let now = Instant::from_millis(1000);
    for known in [false, true] {
        let mut s = Stack::new(no_dad(1));
        if known {
            s.neighbour_add_static(IP6_A, MAC_A);
        }
        s.receive(now, &f);
        let mut sink = VecSink::new();
        s.transmit(now, &mut sink);
        assert_eq!(
            icmpv6_of(&sink.frames).len(),
            known as usize,
            "known: {known}"
        );
        assert_eq!(s.stats().ndp_invalid, !known as u64);
    }
}

/// A neighbour solicitation for `target` from `src` (with A's MAC), to `target`'s
/// solicited-node group.
fn solicitation(src: Ipv6Addr, target: Ipv6Addr) -> Vec<u8> {
    let ns = Icmpv6Repr::NeighborSolicit {
        target,
        source_lladdr: (!src.is_unspecified()).then_some(MAC_A),
    };
    let group = target.solicited_node();
    let mut f = icmpv6_frame(&ns, src, group, (255, 0));
    f[..6].copy_from_slice(&group.multicast_mac().0);
    f
}

#[test]
fn a_solicitation_for_our_link_local_address_is_answered_from_it() {
    for src in [LL_A, IP6_A] {
        let (out, st) = answers(&solicitation(src, LL_B));
        let msgs = icmpv6_of(&out);
        assert_eq!(msgs.len(), 1, "from {src}: {st:?}");
        let (ip, m) = &msgs[0];
        assert_eq!((ip.src, ip.dst, ip.hop_limit), (LL_B, src, 255));
        let pkt = Icmpv6Packet::new_checked(&m[..]).unwrap();
        assert_eq!(
            Icmpv6Repr::parse(&pkt, ip.src, ip.dst).unwrap(),
            Icmpv6Repr::NeighborAdvert {
                router: false,
                solicited: true,
                override_: true,
                target: LL_B,
                target_lladdr: Some(MAC_B),
            }
        );
    }
}

#[test]
fn an_echo_to_our_link_local_address_is_answered_from_it() {
    // From a link-local neighbour and from a global one: the reply comes from the address
    // the request was sent to (Linux's icmpv6_echo_reply), whatever the sender's scope.
    for src in [LL_A, IP6_A] {
        let req = Icmpv6Repr::EchoRequest {
            code: 0,
            ident: 7,
            seq_no: 1,
            data: b"ll",
        };
        let f = icmpv6_frame(&req, src, LL_B, (64, 0));
        let (out, st) = answers(&f);
        let msgs = icmpv6_of(&out);
        assert_eq!(msgs.len(), 1, "from {src}: {st:?}");
        assert_eq!((msgs[0].0.src, msgs[0].0.dst), (LL_B, src));
        assert_eq!(msgs[0].1[0], 129, "an echo reply");
        assert_eq!(st.icmp6_echo_replies, 1);
    }
}

#[test]
fn a_syn_to_our_link_local_address_is_answered_from_it() {
    // A listening port answers with a SYN-ACK, a closed one with an RST, both from LL_B.
    for (dport, src) in [(80, LL_A), (81, LL_A), (80, IP6_A)] {
        let (out, st) = answers(&syn6_to(LL_B, dport, src));
        assert_eq!(out.len(), 1, "port {dport} from {src}: {st:?}");
        let p = Ipv6Packet::new_checked(&out[0][14..]).unwrap();
        assert_eq!((p.src(), p.dst()), (LL_B, src));
        let t = TcpPacket::new_checked(p.payload()).unwrap();
        assert!(t.verify_checksum(LL_B, src));
        match dport {
            80 => assert!(t.syn() && t.ack()),
            _ => assert!(t.rst() && t.ack_number() == SeqNumber(501)),
        }
    }
}

#[test]
fn a_connection_over_link_local_addresses_carries_data() {
    // A opens to B's link-local address: from its own (RFC 6724 rule 2), resolved by NDP.
    let mut p = dual_pair(CongestionAlgorithm::Cubic);
    settle(&mut p);
    let (c, s) = connect_to(&mut p, LL_B.into());
    assert_eq!(p.st[0].tcp_local_addr(c), Ok(IpAddress::V6(LL_A)));
    assert_eq!(p.st[1].tcp_local_addr(s), Ok(IpAddress::V6(LL_B)));
    assert_eq!(p.st[1].tcp_endpoints(s).unwrap().0, IpAddress::V6(LL_A));
    transfer(&mut p, 0, c, s, 256 << 10, Duration::from_secs(30));
}

#[test]
fn the_same_peer_and_ports_to_our_two_addresses_are_two_connections() {
    // Linux has a socket per local address: a SYN to the other one opens another.
    let mut s = Stack::new(no_dad(1));
    let _ = s.tcp_listen(80, 4).unwrap();
    let now = Instant::from_millis(1000);
    s.neighbour_add_static(IP6_A, MAC_A);
    let mut sink = VecSink::new();
    for dst in [LL_B, IP6_B] {
        s.receive(now, &syn6_to(dst, 80, IP6_A));
        s.transmit(now, &mut sink);
    }
    let from: Vec<Ipv6Addr> = (sink.frames.iter())
        .map(|f| Ipv6Packet::new_checked(&f[14..]).unwrap().src())
        .collect();
    assert_eq!(from, [LL_B, IP6_B], "{:?}", s.stats());
    assert_eq!(s.connection_count(), 2);
}

#[test]
fn a_conflict_on_the_link_local_address_fails_it_alone() {
    // During DAD another node probes B's link-local address: B never uses it, and keeps its
    // configured address (Linux's addrconf_dad_failure with accept_dad 1, its default).
    let mut s = Stack::new(dual_config(1, CongestionAlgorithm::Cubic));
    s.transmit(Instant::from_millis(1000), &mut VecSink::new());
    s.receive(
        Instant::from_millis(1200),
        &solicitation(Ipv6Addr::UNSPECIFIED, LL_B),
    );
    assert_eq!(s.stats().ndp_dad_conflicts, 1);
    s.transmit(Instant::from_millis(2000), &mut VecSink::new());
    assert!(s.ipv6_usable() && !s.link_local_usable());
    // A second claim changes nothing more.
    s.receive(
        Instant::from_millis(2100),
        &solicitation(Ipv6Addr::UNSPECIFIED, LL_B),
    );
    assert_eq!(s.stats().ndp_dad_conflicts, 1);
    let now = Instant::from_millis(2200);
    s.neighbour_add_static(LL_A, MAC_A);
    let tentative = s.stats().ip6_tentative;
    // Neither a solicitation for it nor a SYN to it is answered.
    s.receive(now, &solicitation(LL_A, LL_B));
    let _ = s.tcp_listen(80, 4).unwrap();
    s.receive(now, &syn6_to(LL_B, 80, LL_A));
    assert_eq!(s.stats().ip6_tentative, tentative + 2);
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    assert!(sink.frames.is_empty());
    // What goes to a link-local neighbour now leaves from the configured address, as
    // Linux's source selection passes over a failed one; what comes to the configured
    // address from one is answered.
    s.receive(now, &syn6_to(IP6_B, 80, LL_A));
    let u = s.udp_bind(53).unwrap();
    s.udp_send_to(u, LL_A, 53, b"hi").unwrap();
    s.transmit(now, &mut sink);
    assert_eq!(sink.frames.len(), 2, "{:?}", s.stats());
    for f in &sink.frames {
        let p = Ipv6Packet::new_checked(&f[14..]).unwrap();
        assert_eq!((p.src(), p.dst()), (IP6_B, LL_A));
    }
}

#[test]
fn a_link_local_destination_is_on_link_and_resolved_from_our_link_local_address() {
    let mut s = Stack::new(no_dad(1));
    let far = Ipv6Addr([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]);
    let now = Instant::from_millis(1000);
    s.transmit(now, &mut VecSink::new());
    let u = s.udp_bind(53).unwrap();
    s.udp_send_to(u, far, 53, b"hi").unwrap();
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    let msgs = icmpv6_of(&sink.frames);
    assert_eq!(msgs.len(), 1, "a solicitation, the datagram parked");
    let (ip, m) = &msgs[0];
    assert_eq!((ip.src, ip.dst), (LL_B, far.solicited_node()));
    assert_eq!(m[0], 135);
}
