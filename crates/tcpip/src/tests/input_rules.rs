//! The receive path's rules as Linux has them (docs/TCPIP.md, "Input rules"): martian
//! sources, link-layer group frames, IP options, segments a listener drops, lenient TCP
//! options, MD5 without a key, ARP probes, RFC 5961's old ACKs, data past the peer's FIN,
//! ECN (RFC 3168), destination unreachable for closed UDP ports and unknown protocols,
//! and what a half-open connection and one past both FINs answer (tcp_check_req,
//! tcp_validate_incoming).

use super::*;

/// A TCP segment from `src` in a frame to `dst_mac`, with raw IP options and raw TCP options
/// (each padded to 4 bytes), checksummed.
pub(super) struct Crafted<'a> {
    pub(super) dst_mac: MacAddr,
    pub(super) src: Ipv4Addr,
    pub(super) dscp_ecn: u8,
    pub(super) ip_options: &'a [u8],
    pub(super) dport: u16,
    pub(super) seq: u32,
    pub(super) ack: Option<u32>,
    pub(super) flags: u8,
    pub(super) tcp_options: &'a [u8],
    pub(super) payload: &'a [u8],
}

impl Default for Crafted<'_> {
    fn default() -> Self {
        Crafted {
            dst_mac: MAC_B,
            src: IP_A,
            dscp_ecn: 0,
            ip_options: &[],
            dport: 80,
            seq: 500,
            ack: None,
            flags: flags::SYN,
            tcp_options: &[],
            payload: &[],
        }
    }
}

fn padded(b: &[u8]) -> Vec<u8> {
    let mut v = b.to_vec();
    while !v.len().is_multiple_of(4) {
        v.push(0);
    }
    v
}

impl Crafted<'_> {
    /// The frame: IP identification 0, no DF, TTL 64; TCP from port 1000, window 65535.
    pub(super) fn frame(&self) -> Vec<u8> {
        let h = kit::IpHeader {
            dont_frag: false,
            tos: self.dscp_ecn,
            options: padded(self.ip_options),
            ..kit::IpHeader::default()
        };
        let l4 = kit::L4::Tcp(kit::Tcp {
            sport: 1000,
            dport: self.dport,
            flags: self.flags | if self.ack.is_some() { flags::ACK } else { 0 },
            seq: self.seq,
            ack: self.ack.unwrap_or(0),
            window: 65535,
            options: padded(self.tcp_options),
            payload: self.payload.to_vec(),
        });
        ipv4_frame((MAC_A, self.src), (self.dst_mac, IP_B), &h, &l4)
    }
}

/// A stack for B listening on port 80, with a gateway unless `on_link_only`.
pub(super) fn listening(on_link_only: bool) -> Stack {
    let mut c = config(1);
    if !on_link_only {
        c.gateway = Some(IP_A);
    }
    let mut s = Stack::new(c);
    s.tcp_listen(80, 8).unwrap();
    s
}

/// What `s` sends after taking `frame`.
pub(super) fn answer(s: &mut Stack, frame: &[u8]) -> Vec<Vec<u8>> {
    let now = Instant::from_millis(1000);
    s.receive(now, frame);
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    sink.frames
}

/// What `s` sends now, with no frame taken.
fn flush(s: &mut Stack) -> Vec<Vec<u8>> {
    let mut sink = VecSink::new();
    s.transmit(Instant::from_millis(1000), &mut sink);
    sink.frames
}

fn tcp_flags_of(f: &[u8]) -> u8 {
    parse_out(f).0.flags
}

#[test]
fn martian_sources_are_not_answered() {
    for src in [
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::new(127, 0, 0, 1),
        Ipv4Addr::new(224, 0, 0, 1),
        Ipv4Addr::BROADCAST,
        IP_B,
    ] {
        let mut s = listening(false);
        let syn = Crafted {
            src,
            ..Default::default()
        };
        assert!(answer(&mut s, &syn.frame()).is_empty(), "{src:?}");
        assert_eq!(s.stats().ip_bad_source, 1, "{src:?}");
    }
    // The rest of 0/8 (unicast since Linux 5.3) and 240/4 are no martians: answered along
    // the default route, as Linux answers them.
    let mut s = listening(false);
    let syn = Crafted {
        src: Ipv4Addr::new(0, 1, 2, 3),
        ..Default::default()
    };
    assert_eq!(
        tcp_flags_of(&answer(&mut s, &syn.frame())[0]),
        flags::SYN | flags::ACK
    );
    let syn = Crafted {
        src: Ipv4Addr::new(240, 0, 0, 1),
        ..Default::default()
    };
    assert_eq!(
        tcp_flags_of(&answer(&mut s, &syn.frame())[0]),
        flags::SYN | flags::ACK
    );
    // Without a route back (off-link, no gateway) nothing is answered.
    let mut s = listening(true);
    assert!(answer(&mut s, &syn.frame()).is_empty());
    assert_eq!(s.stats().ip_no_route_back, 1);
}

#[test]
fn tcp_in_a_group_frame_is_dropped_but_ping_is_answered() {
    let mut s = listening(false);
    let syn = Crafted {
        dst_mac: MacAddr::BROADCAST,
        ..Default::default()
    };
    assert!(answer(&mut s, &syn.frame()).is_empty());
    assert_eq!(s.stats().tcp_not_host_mac, 1);
    let multicast = Crafted {
        dst_mac: MacAddr([1, 0, 0x5e, 0, 0, 1]),
        ..Default::default()
    };
    assert!(answer(&mut s, &multicast.frame()).is_empty());
    assert_eq!(s.stats().tcp_not_host_mac, 2);
}

#[test]
fn source_routes_are_dropped_and_bad_options_get_a_parameter_problem() {
    let mut s = listening(false);
    let lsrr = Crafted {
        ip_options: &[131, 7, 4, 198, 18, 0, 9],
        ..Default::default()
    };
    assert!(answer(&mut s, &lsrr.frame()).is_empty());
    assert_eq!(s.stats().ip_source_routed, 1);
    for (opts, pointer) in [
        (&[7u8, 0][..], 20u8),
        (&[1, 7, 1][..], 21),
        (&[7, 9, 4][..], 20),
    ] {
        let bad = Crafted {
            ip_options: opts,
            ..Default::default()
        };
        let sent = bad.frame();
        let out = answer(&mut s, &sent);
        assert_eq!(out.len(), 1, "{opts:?}");
        let ip = Ipv4Packet::new_checked(&out[0][14..]).unwrap();
        assert_eq!((ip.protocol(), ip.dst()), (IpProtocol::Icmp, IP_A));
        let icmp = ip.payload();
        assert_eq!((icmp[0], icmp[1], icmp[4]), (12, 0, pointer), "{opts:?}");
        // It quotes the datagram from its IP header on.
        assert_eq!(&icmp[8..], &sent[14..]);
    }
    // Record route and timestamp options are taken.
    let rr = Crafted {
        ip_options: &[7, 7, 4, 0, 0, 0, 0],
        ..Default::default()
    };
    assert_eq!(
        tcp_flags_of(&answer(&mut s, &rr.frame())[0]),
        flags::SYN | flags::ACK
    );
}

#[test]
fn a_listener_drops_what_has_no_ack_and_is_no_syn() {
    use flags::*;
    for fl in [FIN, 0, PSH, URG, FIN | PSH | URG, SYN | FIN, 0x40, 0x80] {
        let mut s = listening(false);
        let seg = Crafted {
            flags: fl,
            ..Default::default()
        };
        assert!(answer(&mut s, &seg.frame()).is_empty(), "flags {fl:#x}");
        assert_eq!(s.stats().tcp_listen_dropped, 1, "flags {fl:#x}");
        // A closed port answers every one of them with a RST.
        let closed = Crafted { dport: 81, ..seg };
        let out = answer(&mut s, &closed.frame());
        assert_eq!(tcp_flags_of(&out[0]) & RST, RST, "flags {fl:#x}");
    }
    // An ACK at a listener gets a RST; a RST gets nothing.
    let mut s = listening(false);
    let ack = Crafted {
        flags: 0,
        ack: Some(7),
        ..Default::default()
    };
    assert_eq!(tcp_flags_of(&answer(&mut s, &ack.frame())[0]), flags::RST);
    let rst = Crafted {
        flags: flags::RST,
        ..Default::default()
    };
    assert!(answer(&mut s, &rst.frame()).is_empty());
}

#[test]
fn malformed_tcp_options_are_read_as_linux_reads_them() {
    // MSS, then an unknown option claiming 255 bytes: the MSS stands, the SYN is answered.
    let mut s = listening(false);
    let syn = Crafted {
        tcp_options: &[2, 4, 0x02, 0x18, 99, 255],
        ..Default::default()
    };
    let out = answer(&mut s, &syn.frame());
    assert_eq!(tcp_flags_of(&out[0]), flags::SYN | flags::ACK);
    assert_eq!(s.stats().tcp_bad_options, 1);
    for opts in [&[1u8, 0][..], &[1, 1, 1, 1, 3, 3][..], &[5, 1][..]] {
        let mut s = listening(false);
        let syn = Crafted {
            tcp_options: opts,
            ..Default::default()
        };
        let out = answer(&mut s, &syn.frame());
        assert_eq!(tcp_flags_of(&out[0]), flags::SYN | flags::ACK, "{opts:?}");
    }
}

#[test]
fn a_bad_length_where_a_signature_would_fit_is_dropped() {
    // Linux walks for an MD5 option while 18 bytes remain: an unknown option claiming 255
    // bytes there makes the listener drop the SYN (the harness's 18-byte case).
    let opts = [
        99u8, 255, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7, 1, 1,
    ];
    let mut s = listening(false);
    let syn = Crafted {
        tcp_options: &opts,
        ..Default::default()
    };
    assert!(answer(&mut s, &syn.frame()).is_empty());
    assert_eq!(s.stats().tcp_md5_unexpected, 1);
}

#[test]
fn an_md5_signature_without_a_key_is_dropped_by_a_socket_only() {
    let mut md5 = vec![19u8, 18];
    md5.extend_from_slice(&[0xab; 16]);
    let mut s = listening(false);
    let syn = Crafted {
        tcp_options: &md5,
        ..Default::default()
    };
    assert!(answer(&mut s, &syn.frame()).is_empty());
    assert_eq!(s.stats().tcp_md5_unexpected, 1);
    let closed = Crafted {
        dport: 81,
        tcp_options: &md5,
        ..Default::default()
    };
    assert_eq!(
        tcp_flags_of(&answer(&mut s, &closed.frame())[0]),
        flags::RST | flags::ACK
    );
}

#[test]
fn arp_probes_are_answered_and_our_own_address_is_not() {
    let mut s = Stack::new(config(1));
    let probe = arp_frame(ArpOperation::Request, Ipv4Addr::UNSPECIFIED, IP_B);
    let out = answer(&mut s, &probe);
    assert_eq!(out.len(), 1);
    assert_eq!(&out[0][..6], &MAC_A.0);
    let a = ArpRepr::parse(&ArpPacket::new_checked(&out[0][14..]).unwrap()).unwrap();
    assert_eq!(
        (a.operation, a.sender_ip, a.target_mac, a.target_ip),
        (ArpOperation::Reply, IP_B, MAC_A, Ipv4Addr::UNSPECIFIED)
    );
    // A probe for another address, and a request claiming our own address: nothing.
    let other = arp_frame(ArpOperation::Request, Ipv4Addr::UNSPECIFIED, IP_A);
    assert!(answer(&mut s, &other).is_empty());
    let conflict = arp_frame(ArpOperation::Request, IP_B, IP_B);
    assert!(answer(&mut s, &conflict).is_empty());
    let loopback = arp_frame(ArpOperation::Request, Ipv4Addr::new(127, 0, 0, 1), IP_B);
    assert!(answer(&mut s, &loopback).is_empty());
    assert_eq!(s.stats().arp_bad_sender, 2);
}

/// A connection accepted from the peer's port 1000 (ISN 500); returns it and our ISS.
fn established(s: &mut Stack) -> (ConnId, u32) {
    let now = Instant::from_millis(1000);
    let l = s.tcp_listen(80, 4).unwrap();
    let syn = Crafted::default();
    let out = answer(s, &syn.frame());
    let iss = parse_out(&out[0]).0.seq.0;
    s.receive(now, &segment(1000, 80, 501, Some(iss + 1), flags::ACK, &[]));
    (s.tcp_accept(l).unwrap(), iss)
}

#[test]
fn an_ack_far_behind_gets_a_challenge_ack_and_its_data_is_dropped() {
    let mut s = Stack::new(config(1));
    let (c, iss) = established(&mut s);
    // Nothing of ours acknowledged yet: any ACK below SND.UNA is too old (RFC 5961 5.2).
    let old = segment(
        1000,
        80,
        501,
        Some(iss.wrapping_sub(100)),
        flags::ACK,
        b"injected",
    );
    let out = answer(&mut s, &old);
    assert_eq!(out.len(), 1);
    assert_eq!(parse_out(&out[0]).0.ack, Some(SeqNumber(501)));
    assert_eq!(s.tcp_recv(c, &mut [0u8; 64]), Err(Error::WouldBlock));
    // ACK of data never sent: answered with an ACK, its data dropped (RFC 9293, Linux).
    let ahead = segment(1000, 80, 501, Some(iss + 1000), flags::ACK, b"ahead");
    let out = answer(&mut s, &ahead);
    assert_eq!(out.len(), 1);
    assert_eq!(tcp_flags_of(&out[0]), flags::ACK);
    assert_eq!(s.tcp_recv(c, &mut [0u8; 64]), Err(Error::WouldBlock));
}

#[test]
fn data_past_the_peers_fin_is_ignored() {
    let mut s = Stack::new(config(1));
    let (c, iss) = established(&mut s);
    let fin = segment(1000, 80, 501, Some(iss + 1), flags::FIN | flags::ACK, &[]);
    assert!(answer(&mut s, &fin).is_empty(), "the FIN's ACK is delayed");
    // The application closes at EOF: one FIN+ACK acknowledges the peer's FIN (tcp_fin's
    // pingpong ACK).
    s.tcp_close(c).unwrap();
    let out = flush(&mut s);
    assert_eq!(out.len(), 1);
    let (ours, _) = parse_out(&out[0]);
    assert_eq!(
        (ours.flags & flags::FIN, ours.ack),
        (flags::FIN, Some(SeqNumber(502)))
    );
    // LAST_ACK: data after the FIN draws no RST.
    let late = segment(1000, 80, 502, Some(iss + 1), flags::ACK, b"late");
    let out = answer(&mut s, &late);
    assert!(out.iter().all(|f| tcp_flags_of(f) & flags::RST == 0));
    assert_eq!(s.stats().tcp_data_after_fin, 1);
}

#[test]
fn an_ecn_setup_syn_gets_an_ecn_setup_syn_ack() {
    let ecn_setup = flags::ECE | flags::CWR;
    let answered = |fl: u8, dscp_ecn: u8| {
        let mut s = listening(false);
        let syn = Crafted {
            flags: flags::SYN | fl,
            dscp_ecn,
            ..Default::default()
        };
        tcp_flags_of(&answer(&mut s, &syn.frame())[0])
    };
    let syn_ack = flags::SYN | flags::ACK;
    assert_eq!(answered(ecn_setup, 0), syn_ack | flags::ECE);
    // Not with ECE alone, nor from a SYN that is itself ECT (RFC 3168 6.1.1).
    assert_eq!(answered(flags::ECE, 0), syn_ack);
    assert_eq!(answered(ecn_setup, ipv4::ecn::ECT0), syn_ack);
    assert_eq!(answered(0, 0), syn_ack);
}

/// An ECN connection from the peer's port 1000; returns it and our ISS.
fn ecn_established(s: &mut Stack) -> (ConnId, u32) {
    let now = Instant::from_millis(1000);
    let l = s.tcp_listen(80, 4).unwrap();
    let syn = Crafted {
        flags: flags::SYN | flags::ECE | flags::CWR,
        ..Default::default()
    };
    let iss = parse_out(&answer(s, &syn.frame())[0]).0.seq.0;
    s.receive(now, &segment(1000, 80, 501, Some(iss + 1), flags::ACK, &[]));
    (s.tcp_accept(l).unwrap(), iss)
}

fn ecn_field(f: &[u8]) -> u8 {
    f[15] & 3
}

#[test]
fn ecn_marks_are_echoed_until_cwr_and_new_data_is_ect() {
    let mut s = Stack::new(config(1));
    let (c, iss) = ecn_established(&mut s);
    assert_eq!(s.stats().tcp_ecn_negotiated, 1);
    s.tcp_send(c, b"response").unwrap();
    let out = flush(&mut s);
    assert_eq!(ecn_field(&out[0]), ipv4::ecn::ECT0);
    assert_eq!(tcp_flags_of(&out[0]) & (flags::ECE | flags::CWR), 0);
    // A CE-marked request: acknowledged at once with ECE, and ECE stays until CWR.
    let ce = Crafted {
        flags: flags::PSH,
        ack: Some(iss + 9),
        seq: 501,
        dscp_ecn: ipv4::ecn::CE,
        payload: b"marked",
        ..Default::default()
    };
    let out = answer(&mut s, &ce.frame());
    assert_eq!(tcp_flags_of(&out[0]) & flags::ECE, flags::ECE);
    assert_eq!(
        ecn_field(&out[0]),
        ipv4::ecn::NOT_ECT,
        "a bare ACK is not ECT"
    );
    let more = segment(
        1000,
        80,
        507,
        Some(iss + 9),
        flags::ACK | flags::PSH,
        b"more",
    );
    // Not CE itself: its ACK goes out delayed, still with ECE.
    s.receive(Instant::from_millis(1000), &more);
    let mut sink = VecSink::new();
    s.transmit(Instant::from_millis(1500), &mut sink);
    let out = sink.frames;
    assert_eq!(tcp_flags_of(&out[0]) & flags::ECE, flags::ECE);
    let cwr = segment(
        1000,
        80,
        511,
        Some(iss + 9),
        flags::ACK | flags::CWR,
        b"cwr",
    );
    let out = answer(&mut s, &cwr);
    assert_eq!(tcp_flags_of(&out[0]) & flags::ECE, 0);
    assert_eq!(s.stats().tcp_ecn_ce_received, 1);
}

#[test]
fn an_echo_reduces_the_window_once_and_the_next_data_says_cwr() {
    let mut s = Stack::new(config(1));
    let (c, iss) = ecn_established(&mut s);
    s.tcp_send(c, &[7u8; 4000]).unwrap();
    let sent = flush(&mut s);
    assert!(sent.len() > 2);
    let before = s.tcp_info(c).unwrap().cwnd;
    // The peer echoes a mark on the ACKs of the first and second segments: one reduction
    // for the window, then the ACK of everything.
    let seg = parse_out(&sent[0]).1.len() as u32;
    for n in [1, 2] {
        let ece = segment(
            1000,
            80,
            501,
            Some(iss + 1 + n * seg),
            flags::ACK | flags::ECE,
            &[],
        );
        s.receive(Instant::from_millis(1000), &ece);
    }
    assert_eq!(s.stats().tcp_ecn_reductions, 1);
    assert!(s.tcp_info(c).unwrap().cwnd < before);
    s.receive(
        Instant::from_millis(1000),
        &segment(1000, 80, 501, Some(iss + 4001), flags::ACK, &[]),
    );
    s.tcp_send(c, &[8u8; 100]).unwrap();
    let out = flush(&mut s);
    let first_new = out
        .iter()
        .find(|f| !parse_out(f).1.is_empty())
        .expect("new data");
    assert_eq!(tcp_flags_of(first_new) & flags::CWR, flags::CWR);
}

#[test]
fn half_open_connections_hold_no_buffers() {
    let mut s = Stack::new(config(1));
    let l = s.tcp_listen(80, 4096).unwrap();
    let now = Instant::from_millis(1000);
    for port in 1000..2000u16 {
        let syn = segment(port, 80, 500, None, flags::SYN, &[]);
        s.receive(now, &syn);
    }
    flush(&mut s);
    assert_eq!(s.connection_count(), 1000);
    assert_eq!(s.tcp_buffer_bytes(), 0);
    // One completes its handshake: it alone gets its rings.
    let syn = segment(3000, 80, 500, None, flags::SYN, &[]);
    let out = answer(&mut s, &syn);
    let iss = parse_out(&out[0]).0.seq.0;
    s.receive(now, &segment(3000, 80, 501, Some(iss + 1), flags::ACK, &[]));
    let c = s.tcp_accept(l).unwrap();
    let want = s.config().send_buffer + s.config().recv_buffer;
    assert_eq!(s.tcp_buffer_bytes(), want);
    s.tcp_send(c, b"ok").unwrap();
}

/// A datagram of IP protocol `proto` carrying `l4` from A to B (identification 0, no DF),
/// in a frame to `dst_mac`.
pub(super) fn datagram(dst_mac: MacAddr, proto: u8, l4: &[u8]) -> Vec<u8> {
    let h = kit::IpHeader {
        dont_frag: false,
        ..kit::IpHeader::default()
    };
    let raw = kit::L4::Raw {
        proto,
        payload: l4.to_vec(),
    };
    ipv4_frame((MAC_A, IP_A), (dst_mac, IP_B), &h, &raw)
}

#[test]
fn closed_udp_ports_and_unknown_protocols_get_destination_unreachable() {
    let mut s = listening(false);
    // 5000 -> 53, "hi", no checksum (RFC 768: zero is none).
    let udp = [0x13, 0x88, 0, 53, 0, 10, 0, 0, b'h', b'i'];
    for (proto, l4, code) in [(17u8, &udp[..], 3u8), (47, &[0u8; 16][..], 2)] {
        let sent = datagram(MAC_B, proto, l4);
        let out = answer(&mut s, &sent);
        assert_eq!(out.len(), 1, "protocol {proto}");
        let ip = Ipv4Packet::new_checked(&out[0][14..]).unwrap();
        assert_eq!((ip.protocol(), ip.dst()), (IpProtocol::Icmp, IP_A));
        let icmp = ip.payload();
        assert_eq!((icmp[0], icmp[1]), (3, code), "protocol {proto}");
        assert_eq!(&icmp[8..], &sent[14..], "quotes the datagram");
    }
    // IGMP has a handler in Linux, which answers nothing; nor does it answer a group frame
    // (icmp_send: PACKET_HOST only) or a datagram with a bad checksum.
    let igmp = [0x11, 0x64, 0xee, 0x9b, 0, 0, 0, 0];
    assert!(answer(&mut s, &datagram(MAC_B, 2, &igmp)).is_empty());
    assert!(answer(&mut s, &datagram(MacAddr::BROADCAST, 17, &udp)).is_empty());
    let mut bad = udp;
    bad[6..8].copy_from_slice(&[0x12, 0x34]);
    assert!(answer(&mut s, &datagram(MAC_B, 17, &bad)).is_empty());
    assert_eq!(s.stats().udp_no_socket, 2);
}

/// How many frames `s` sends at `ms` after taking `frame` `n` times.
fn answers_at(s: &mut Stack, ms: u64, frame: &[u8], n: usize) -> usize {
    let now = Instant::from_millis(ms);
    (0..n)
        .map(|_| {
            s.receive(now, frame);
            let mut sink = VecSink::new();
            s.transmit(now, &mut sink);
            sink.frames.len()
        })
        .sum()
}

/// Linux's limit of ICMP errors per destination (`inet_peer_xrlim_allow`, `icmp_ratelimit`
/// 1 s, `XRLIM_BURST_FACTOR` 6) under the host's budget: six at once, then one a second;
/// another destination has its own, and the errors refused take nothing from the budget.
#[test]
fn a_destination_gets_six_errors_at_once_then_one_a_second() {
    let mut s = listening(false);
    let udp = [0x13, 0x88, 0, 53, 0, 10, 0, 0, b'h', b'i'];
    let from_a = datagram(MAC_B, 17, &udp);
    assert_eq!(answers_at(&mut s, 1000, &from_a, 10), 6);
    assert_eq!(s.stats().icmp_rate_limited_host, 4);
    assert_eq!(answers_at(&mut s, 1999, &from_a, 3), 0, "within the second");
    assert_eq!(answers_at(&mut s, 2000, &from_a, 3), 1);
    let raw = kit::L4::Raw {
        proto: 17,
        payload: udp.to_vec(),
    };
    let other = Ipv4Addr::new(203, 0, 113, 9);
    let from_other = ipv4_frame(
        (MAC_A, other),
        (MAC_B, IP_B),
        &kit::IpHeader::default(),
        &raw,
    );
    assert_eq!(answers_at(&mut s, 2000, &from_other, 10), 6);
    assert_eq!(s.stats().icmp_errors_sent, 13);
    assert_eq!(
        s.stats().icmp_rate_limited,
        0,
        "the host's budget had credit throughout"
    );
}

/// A half-open connection from port 1000 (SYN at 500, SACK permitted): its listener and
/// our ISS.
fn half_open(s: &mut Stack) -> (ListenerId, u32) {
    let l = s.tcp_listen(80, 4).unwrap();
    let syn = Crafted {
        tcp_options: &[4, 2],
        ..Default::default()
    };
    let out = answer(s, &syn.frame());
    (l, parse_out(&out[0]).0.seq.0)
}

#[test]
fn a_second_syn_resets_a_half_open_connection() {
    let mut s = Stack::new(config(1));
    let (_, iss) = half_open(&mut s);
    // The first SYN again: the SYN-ACK again.
    let out = answer(&mut s, &segment(1000, 80, 500, None, flags::SYN, &[]));
    assert_eq!(parse_out(&out[0]).0.seq.0, iss);
    // Another SYN inside the window: an RST, and the half-open connection is gone.
    let out = answer(&mut s, &segment(1000, 80, 900, None, flags::SYN, &[]));
    assert_eq!(out.len(), 1);
    let (rst, _) = parse_out(&out[0]);
    assert_eq!(
        (rst.flags, rst.ack),
        (flags::RST | flags::ACK, Some(SeqNumber(901)))
    );
    assert_eq!(s.connection_count(), 0);
    assert_eq!(s.stats().tcp_half_open_resets, 1);
}

#[test]
fn a_half_open_connection_answers_an_old_segment_with_a_bare_ack_and_stays_half_open() {
    let mut s = Stack::new(config(1));
    let (l, iss) = half_open(&mut s);
    // A keepalive-like byte ending at RCV.NXT: out of a half-open window (tcp_in_window).
    let old = Crafted {
        seq: 500,
        ack: Some(iss + 1),
        flags: 0,
        payload: b"k",
        ..Default::default()
    };
    let out = answer(&mut s, &old.frame());
    assert_eq!(out.len(), 1);
    let (ack, _) = parse_out(&out[0]);
    assert_eq!((ack.flags, ack.ack), (flags::ACK, Some(SeqNumber(501))));
    assert_eq!(
        ack.options.sack_count, 0,
        "no D-SACK from a half-open connection"
    );
    // Its ACK field completed nothing: the connection is still half-open.
    assert_eq!(s.tcp_accept(l), Err(Error::WouldBlock));
    assert_eq!(s.connection_count(), 1);
}

#[test]
fn after_both_fins_a_refused_segment_gets_a_duplicate_ack_and_ends_nothing() {
    let mut s = Stack::new(config(1));
    let (c, iss) = established(&mut s);
    answer(
        &mut s,
        &segment(1000, 80, 501, Some(iss + 1), flags::FIN | flags::ACK, &[]),
    );
    s.tcp_close(c).unwrap();
    let out = flush(&mut s);
    assert!(
        out.iter().any(|f| tcp_flags_of(f) & flags::FIN != 0),
        "our FIN"
    );
    // LAST_ACK. A zero-window probe (one below RCV.NXT), acknowledging our FIN: Linux
    // refuses it whole (tcp_sequence) and answers a duplicate ACK; the FIN stays unacked.
    let probe = segment(1000, 80, 501, Some(iss + 2), flags::ACK, &[]);
    let out = answer(&mut s, &probe);
    assert_eq!(out.len(), 1);
    assert_eq!(tcp_flags_of(&out[0]), flags::ACK);
    assert_eq!(s.connection_count(), 1);
}

#[test]
fn a_fin_not_followed_by_a_close_is_acknowledged_when_the_delayed_ack_is_due() {
    let mut s = Stack::new(config(1));
    let (_c, iss) = established(&mut s);
    let fin = segment(1000, 80, 501, Some(iss + 1), flags::FIN | flags::ACK, &[]);
    assert!(answer(&mut s, &fin).is_empty());
    let later = Instant::from_millis(1000).add(s.config().delayed_ack);
    let mut sink = VecSink::new();
    s.transmit(later, &mut sink);
    assert_eq!(sink.frames.len(), 1);
    let (ack, _) = parse_out(&sink.frames[0]);
    assert_eq!((ack.flags, ack.ack), (flags::ACK, Some(SeqNumber(502))));
}

#[test]
fn the_subnets_broadcast_address_as_a_source_is_answered_at_the_link_broadcast() {
    let mut s = listening(true);
    let syn = Crafted {
        src: Ipv4Addr::new(198, 18, 0, 255),
        ..Default::default()
    };
    let out = answer(&mut s, &syn.frame());
    assert_eq!(out.len(), 1);
    let eth = EthernetFrame::new_checked(&out[0][..]).unwrap();
    assert_eq!(eth.dst(), MacAddr::BROADCAST);
    assert_eq!(tcp_flags_of(&out[0]), flags::SYN | flags::ACK);
}

#[test]
fn a_half_open_connection_rejects_an_old_timestamp_with_a_bare_ack() {
    let mut s = Stack::new(config(1));
    let l = s.tcp_listen(80, 4).unwrap();
    let ts = |val: u32| {
        let mut o = vec![1, 1, 8, 10];
        o.extend_from_slice(&val.to_be_bytes());
        o.extend_from_slice(&0u32.to_be_bytes());
        o
    };
    let syn_ts = ts(1000);
    let syn = Crafted {
        tcp_options: &syn_ts,
        ..Default::default()
    };
    let out = answer(&mut s, &syn.frame());
    let iss = parse_out(&out[0]).0.seq.0;
    // PAWS (tcp_check_req): data at RCV.NXT with a TSval older than the SYN's is refused.
    let old_ts = ts(500);
    let data = Crafted {
        seq: 501,
        ack: Some(iss + 1),
        flags: 0,
        tcp_options: &old_ts,
        payload: b"0123456789",
        ..Default::default()
    };
    let out = answer(&mut s, &data.frame());
    assert_eq!(out.len(), 1);
    let (ack, _) = parse_out(&out[0]);
    assert_eq!((ack.flags, ack.ack), (flags::ACK, Some(SeqNumber(501))));
    assert_eq!(
        ack.options.timestamps.map(|t| t.1),
        Some(1000),
        "echoes the SYN's"
    );
    assert_eq!(s.tcp_accept(l), Err(Error::WouldBlock));
    assert_eq!(s.stats().tcp_paws_rejected, 1);
}
