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
            assert_eq!((&buf[..n], ip, port), (&b"query"[..], IP_A, 5353));
            p.st[1].udp_send_to(ub, ip, port, b"answer").unwrap();
        }
        p.st[0].udp_recv_from(ua, &mut [0u8; 64]).is_ok()
    }));
    // ICMP echo request to b, crafted by hand.
    let data = b"abcdefgh";
    let icmp = Icmpv4Repr::EchoRequest {
        ident: 1,
        seq_no: 2,
        data,
    };
    let mut f = vec![0u8; 14 + 20 + icmp.buffer_len()];
    EthernetRepr {
        dst: MAC_B,
        src: MAC_A,
        vlan_id: None,
        ethertype: EtherType::Ipv4,
    }
    .emit(&mut f)
    .unwrap();
    Ipv4Repr {
        src: IP_A,
        dst: IP_B,
        protocol: IpProtocol::Icmp,
        payload_len: icmp.buffer_len(),
        ttl: 64,
        ident: 9,
        dont_frag: false,
    }
    .emit(&mut f[14..])
    .unwrap();
    icmp.emit(&mut f[34..]).unwrap();
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
            ident: 1,
            seq_no: 2,
            data
        }
    );
}

#[test]
fn arp_reply_and_fragment_drop_and_counters() {
    let mut s = Stack::new(config(1));
    let now = Instant::from_millis(1);
    let mut f = vec![0u8; 60];
    EthernetRepr {
        dst: MacAddr::BROADCAST,
        src: MAC_A,
        vlan_id: None,
        ethertype: EtherType::Arp,
    }
    .emit(&mut f)
    .unwrap();
    ArpRepr {
        operation: ArpOperation::Request,
        sender_mac: MAC_A,
        sender_ip: IP_A,
        target_mac: MacAddr::ZERO,
        target_ip: IP_B,
    }
    .emit(&mut f[14..])
    .unwrap();
    s.receive(now, &f);
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    assert_eq!(sink.frames.len(), 1);
    let a = ArpRepr::parse(&ArpPacket::new_checked(&sink.frames[0][14..]).unwrap()).unwrap();
    assert_eq!(
        (a.operation, a.sender_mac, a.target_ip),
        (ArpOperation::Reply, MAC_B, IP_A)
    );
    // A fragment is dropped and counted.
    let mut f = vec![0u8; 14 + 28];
    EthernetRepr {
        dst: MAC_B,
        src: MAC_A,
        vlan_id: None,
        ethertype: EtherType::Ipv4,
    }
    .emit(&mut f)
    .unwrap();
    Ipv4Repr {
        src: IP_A,
        dst: IP_B,
        protocol: IpProtocol::Udp,
        payload_len: 8,
        ttl: 64,
        ident: 1,
        dont_frag: false,
    }
    .emit(&mut f[14..])
    .unwrap();
    f[14 + 6] = 0x20; // MF
    f[14 + 10] = 0;
    f[14 + 11] = 0;
    let c = checksum::checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
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
        let mut f = vec![0u8; 60];
        EthernetRepr {
            dst: MacAddr::BROADCAST,
            src: MAC_A,
            vlan_id: None,
            ethertype: EtherType::Arp,
        }
        .emit(&mut f)
        .unwrap();
        ArpRepr {
            operation: ArpOperation::Request,
            sender_mac: MAC_A,
            sender_ip: ip,
            target_mac: MacAddr::ZERO,
            target_ip: IP_B,
        }
        .emit(&mut f[14..])
        .unwrap();
        s.receive(now, &f);
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
    // Per-connection control state (buffers excluded) should stay within a few cache lines.
    let size = std::mem::size_of::<crate::tcp::Tcb>();
    assert!(size <= 384, "Tcb is {size} bytes");
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
    assert!(p.st[0].arp_add_static(IP_B, MAC_B));
    let (c, _s, _) = p.connect();
    assert_eq!(p.st[0].stats().arp_requests_sent, 0);
    assert_eq!(p.st[0].tcp_state(c), Ok(TcpState::Established));
}
