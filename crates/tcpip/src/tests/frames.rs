//! Frame-level behaviour: ARP, ICMP, UDP, VLAN, hand-crafted segments, garbage input, TX sinks.

use super::*;

#[test]
fn udp_round_trip_and_icmp_echo() {
    let mut p = Pair::new();
    let ua = p.st[0].udp_bind(5353).unwrap();
    let ub = p.st[1].udp_bind(53).unwrap();
    assert_eq!(p.st[1].udp_bind(53), Err(Error::AddrInUse));
    p.st[0].udp_send_to(ua, IP_B, 53, b"query").unwrap();
    let mut buf = [0u8; 64];
    assert!(p.run(Duration::from_secs(5), |p| {
        if let Ok((n, ip, port)) = p.st[1].udp_recv_from(ub, &mut buf) {
            assert_eq!((&buf[..n], ip, port), (&b"query"[..], IP_A.into(), 5353));
            p.st[1].udp_send_to(ub, ip, port, b"answer").unwrap();
        }
        p.st[0].udp_recv_from(ua, &mut [0u8; 64]).is_ok()
    }));
    // ICMP echo request to b, crafted by hand.
    let data = b"abcdefgh";
    let l4 = kit::L4::Icmp {
        ty: 8,
        code: 5,
        rest: [0, 1, 0, 2],
        payload: data.to_vec(),
    };
    let h = kit::IpHeader {
        ident: 9,
        dont_frag: false,
        ..kit::IpHeader::default()
    };
    let f = ipv4_frame((MAC_A, IP_A), (MAC_B, IP_B), &h, &l4);
    p.st[1].receive(p.now, &f);
    let mut sink = VecSink::new();
    p.st[1].transmit(p.now, &mut sink);
    let reply = sink
        .frames
        .iter()
        .find(|f| f.len() == f.len() && f[23] == 1)
        .expect("echo reply");
    let ip = Ipv4Packet::new_checked(&reply[14..]).unwrap();
    assert_eq!(ip.dst(), IP_A);
    let r = Icmpv4Repr::parse(&Icmpv4Packet::new_checked(ip.payload()).unwrap()).unwrap();
    assert_eq!(
        r,
        Icmpv4Repr::EchoReply {
            code: 5,
            ident: 1,
            seq_no: 2,
            data
        }
    );
}

#[test]
fn arp_reply_and_fragment_drop_and_counters() {
    let mut cfg = config(1);
    cfg.ipfrag_high_thresh = 0; // reassembly off
    let mut s = Stack::new(cfg);
    let now = Instant::from_millis(1);
    let f = arp_frame(ArpOperation::Request, IP_A, IP_B);
    s.receive(now, &f);
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    assert_eq!(sink.frames.len(), 1);
    let a = ArpRepr::parse(&ArpPacket::new_checked(&sink.frames[0][14..]).unwrap()).unwrap();
    assert_eq!(
        (a.operation, a.sender_mac, a.target_ip),
        (ArpOperation::Reply, MAC_B, IP_A)
    );
    // With reassembly off, a fragment is dropped and counted.
    let udp = kit::L4::Raw {
        proto: 17,
        payload: vec![0; 8],
    };
    let h = kit::IpHeader {
        ident: 1,
        dont_frag: false,
        ..kit::IpHeader::default()
    };
    let mut f = ipv4_frame((MAC_A, IP_A), (MAC_B, IP_B), &h, &udp);
    kit::make_ipv4_fragment(&mut f, 0, true);
    s.receive(now, &f);
    assert_eq!(s.stats().ip_fragments_dropped, 1);
    s.receive(now, &[0u8; 5]);
    assert_eq!(s.stats().eth_truncated, 1);
}

#[test]
fn hand_crafted_handshake_and_rst_rules() {
    let mut s = Stack::new(config(1));
    let l = s.tcp_listen(80, 4).unwrap();
    let now = Instant::from_millis(5);
    // Segment to a closed port: RST with ack = seq + len.
    s.receive(now, &segment(1000, 81, 500, None, flags::SYN, &[]));
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    let (r, _) = parse_out(&sink.frames[0]);
    assert_eq!(
        (r.flags & flags::RST != 0, r.ack),
        (true, Some(SeqNumber(501)))
    );
    // Handshake by hand.
    s.receive(now, &segment(1000, 80, 500, None, flags::SYN, &[]));
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    let (synack, _) = parse_out(&sink.frames[0]);
    assert_eq!(
        synack.flags & (flags::SYN | flags::ACK),
        flags::SYN | flags::ACK
    );
    assert_eq!(synack.ack, Some(SeqNumber(501)));
    let iss = synack.seq.0;
    s.receive(
        now,
        &segment(
            1000,
            80,
            501,
            Some(iss + 1),
            flags::ACK | flags::PSH,
            b"GET",
        ),
    );
    let c = s.tcp_accept(l).unwrap();
    assert_eq!(s.tcp_recv_available(c), Ok(3));
    // An in-window RST that is not exactly RCV.NXT draws a challenge ACK, no reset.
    s.receive(now, &segment(1000, 80, 510, None, flags::RST, &[]));
    assert_eq!(s.tcp_state(c), Ok(TcpState::Established));
    assert_eq!(s.stats().tcp_challenge_acks, 1);
    // A SYN on the established connection: challenge ACK too.
    s.receive(now, &segment(1000, 80, 504, None, flags::SYN, &[]));
    assert_eq!(s.stats().tcp_challenge_acks, 2);
    // Out-of-order data then the hole: one contiguous read.
    s.receive(
        now,
        &segment(1000, 80, 507, Some(iss + 1), flags::ACK, b"DEF"),
    );
    assert_eq!(s.tcp_recv_available(c), Ok(3));
    s.receive(
        now,
        &segment(1000, 80, 504, Some(iss + 1), flags::ACK, b"ABC"),
    );
    let mut b = [0u8; 16];
    assert_eq!(s.tcp_recv(c, &mut b), Ok(9));
    assert_eq!(&b[..9], b"GETABCDEF");
    // Exact RST resets.
    s.receive(now, &segment(1000, 80, 510, None, flags::RST, &[]));
    assert_eq!(s.tcp_state(c), Ok(TcpState::Closed));
    assert_eq!(s.tcp_recv(c, &mut b), Err(Error::ConnectionReset));
}

#[test]
fn garbage_frames_never_panic() {
    let mut s = Stack::new(config(1));
    s.tcp_listen(80, 4).unwrap();
    let mut rng = XorShift(42);
    let valid = segment(1000, 80, 500, None, flags::SYN, b"hello");
    for i in 0..20000u64 {
        let mut f = if i % 2 == 0 {
            valid.clone()
        } else {
            vec![0u8; (rng.next() % 100) as usize]
        };
        let flips = 1 + rng.next() % 4;
        for _ in 0..flips {
            if f.is_empty() {
                break;
            }
            let at = (rng.next() as usize) % f.len();
            f[at] = rng.next() as u8;
        }
        if i % 7 == 0 {
            let cut = (rng.next() as usize) % (f.len() + 1);
            f.truncate(cut);
        }
        s.receive(Instant::from_micros(i * 100), &f);
        let mut sink = VecSink::new();
        s.transmit(Instant::from_micros(i * 100), &mut sink);
    }
    let st = s.stats();
    assert!(
        st.eth_truncated
            + st.eth_not_for_us
            + st.ip_bad_checksum
            + st.tcp_bad_checksum
            + st.ip_malformed
            > 0
    );
}

#[test]
fn rss_port_filter_is_honoured() {
    let mut p = Pair::new();
    let now = p.now;
    let want = |port: u16| {
        toeplitz::hash_ipv4_ports(&toeplitz::MICROSOFT_KEY, IP_B, IP_A, 80, port) % 4 == 1
    };
    let c = p.st[0].tcp_connect(now, IP_B, 80, want).unwrap();
    let (_, _, lport) = p.st[0].tcp_endpoints(c).unwrap();
    assert!(want(lport));
}

#[test]
fn closure_sink_and_full_sink_keep_output() {
    let mut s = Stack::new(config(1));
    let now = Instant::from_millis(1);
    // Two ARP requests to answer; a sink with no room keeps them queued.
    for ip in [IP_A, Ipv4Addr::new(198, 18, 0, 3)] {
        s.receive(now, &arp_frame(ArpOperation::Request, ip, IP_B));
    }
    assert_eq!(
        s.transmit(now, &mut |_: &mut dyn FnMut(&mut [u8]) -> usize| false),
        0
    );
    assert_eq!(s.queued_frames(), 2);
    assert_eq!(s.poll_at(), Some(now));
    let mut frames = Vec::new();
    let mut buf = [0u8; 1514];
    let sent = s.transmit(now, &mut |fill: &mut dyn FnMut(&mut [u8]) -> usize| {
        let n = fill(&mut buf);
        frames.push(buf[..n].to_vec());
        true
    });
    assert_eq!(sent, 2);
    assert_eq!(frames.len(), 2);
    assert_eq!(s.queued_frames(), 0);
}

#[test]
fn connection_state_stays_compact() {
    // Per-connection control state (buffers excluded) should stay within a few cache lines:
    // 384 bytes for IPv4 alone, 16 more since the remote address may be IPv6, 8 for the
    // pointer to a passive open's IP options (docs/TCPIP.md, "IP options").
    let size = std::mem::size_of::<crate::tcp::Tcb>();
    assert!(size <= 408, "Tcb is {size} bytes");
    eprintln!("Tcb: {size} bytes");
}

#[test]
fn vlan_tagged_link() {
    let mut a = config(0);
    let mut b = config(1);
    a.vlan_id = Some(100);
    b.vlan_id = Some(100);
    let mut p = Pair::with(a, b);
    let (c, s, _) = p.connect();
    p.st[0].tcp_send(c, b"tagged").unwrap();
    assert!(
        p.run(Duration::from_secs(5), |p| p.st[1].tcp_recv_available(s)
            == Ok(6))
    );
    // An untagged frame is not for a tagged stack.
    let f = segment(1000, 80, 1, None, flags::SYN, &[]);
    let now = p.now;
    p.st[1].receive(now, &f);
    assert_eq!(p.st[1].stats().eth_vlan_mismatch, 1);
}

#[test]
fn static_arp_entry_skips_resolution() {
    let mut p = Pair::new();
    assert!(p.st[0].neighbour_add_static(IP_B, MAC_B));
    let (c, _s, _) = p.connect();
    assert_eq!(p.st[0].stats().arp_requests_sent, 0);
    assert_eq!(p.st[0].tcp_state(c), Ok(TcpState::Established));
}

/// The IPv4 datagram in `frame` (Ethernet first) cut in two fragments at payload offset
/// `at` (a multiple of 8), each checksummed.
fn split_frame(frame: &[u8], at: usize) -> [Vec<u8>; 2] {
    let hl = Ipv4Packet::new_checked(&frame[14..]).unwrap().header_len();
    let payload = &frame[14 + hl..];
    let piece = |from: usize, to: usize, more: bool| {
        let mut f = frame[..14 + hl].to_vec();
        f.extend_from_slice(&payload[from..to]);
        f[16..18].copy_from_slice(&((hl + to - from) as u16).to_be_bytes());
        let word = (from / 8) as u16 | if more { 0x2000 } else { 0 };
        f[20..22].copy_from_slice(&word.to_be_bytes());
        f[24..26].fill(0);
        let c = checksum::checksum(&f[14..14 + hl]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        f
    };
    [piece(0, at, true), piece(at, payload.len(), false)]
}

fn syn_frame(ident: u16) -> Vec<u8> {
    let syn = peer_syn(TcpOptions {
        mss: Some(1460),
        ..Default::default()
    });
    let l4 = kit::L4::Tcp(kit::Tcp::from_repr(&syn, &[]));
    ipv4_frame((MAC_A, IP_A), (MAC_B, IP_B), &ip_ident(ident), &l4)
}

#[test]
fn a_syn_in_two_fragments_gets_a_syn_ack() {
    let mut s = Stack::new(config(1));
    s.tcp_listen(80, 4).unwrap();
    let now = Instant::from_millis(5);
    // The first fragment holds only the ports and the sequence number; the last comes first.
    let [first, last] = split_frame(&syn_frame(7), 8);
    s.receive(now, &last);
    assert_eq!(s.stats().tcp_segments_in, 0);
    s.receive(now, &first);
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    let (r, _) = parse_out(&sink.frames[0]);
    assert_eq!(r.flags & (flags::SYN | flags::ACK), flags::SYN | flags::ACK);
    assert_eq!(r.ack, Some(SeqNumber(501)));
    assert_eq!(s.stats().ip_frag_reassembled, 1);
}

#[test]
fn an_unfinished_datagram_times_out_with_icmp_time_exceeded() {
    let mut s = Stack::new(config(1));
    let now = Instant::from_millis(5);
    // Datagram 1 lacks its last fragment, datagram 2 its first: only 1 is answered.
    let [first, _] = split_frame(&syn_frame(1), 8);
    let [_, last] = split_frame(&syn_frame(2), 8);
    s.receive(now, &first);
    s.receive(now, &last);
    let due = now.add(Duration::from_secs(30));
    assert_eq!(s.poll_at(), Some(due));
    let mut sink = VecSink::new();
    s.transmit(now.add(Duration::from_millis(29_999)), &mut sink);
    assert!(sink.frames.is_empty());
    s.transmit(due, &mut sink);
    assert_eq!(sink.frames.len(), 1);
    let ip = Ipv4Packet::new_checked(&sink.frames[0][14..]).unwrap();
    assert_eq!((ip.dst(), ip.protocol()), (IP_A, IpProtocol::Icmp));
    let icmp = ip.payload();
    assert!(Icmpv4Packet::new_checked(icmp).unwrap().verify_checksum());
    // Time exceeded, fragment reassembly; the first fragment quoted whole (28 bytes).
    assert_eq!((icmp[0], icmp[1]), (11, 1));
    assert_eq!(&icmp[8..], &first[14..]);
    assert_eq!(s.stats().ip_frag_timeout, 2);
    assert_eq!(s.poll_at(), None);
}

#[test]
fn every_counter_is_named_once_in_order() {
    let st = Stats {
        tcp_listen_dropped: 7,
        ..Default::default()
    };
    let names = Stats::NAMES;
    assert_eq!(names.len(), st.values().count());
    let at = names
        .iter()
        .position(|&n| n == "tcp_listen_dropped")
        .unwrap();
    assert_eq!(st.values().nth(at), Some(7));
    let mut sorted = names.to_vec();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len());
}
