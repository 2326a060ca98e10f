//! Data transfer: handshakes, bulk and many-stream transfers through impairments, zero windows, option negotiation.

use super::*;

#[test]
fn handshake_data_both_ways_and_close() {
    let mut p = Pair::new();
    let (c, s, _) = p.connect();
    assert!(
        p.st[0].stats().arp_requests_sent >= 1,
        "active open resolved its peer by ARP"
    );
    assert_eq!(p.st[0].tcp_send(c, b"hello").unwrap(), 5);
    let mut got = Vec::new();
    assert!(p.run(Duration::from_secs(5), |p| {
        let mut b = [0u8; 64];
        if let Ok(n) = p.st[1].tcp_recv(s, &mut b) {
            got.extend_from_slice(&b[..n]);
        }
        got == b"hello"
    }));
    // Zero-copy read path: peek, then consume.
    p.st[0].tcp_send(c, b"peek").unwrap();
    assert!(
        p.run(Duration::from_secs(5), |p| p.st[1].tcp_recv_available(s)
            == Ok(4))
    );
    let (x, y) = p.st[1].tcp_recv_slices(s).unwrap();
    assert_eq!([x, y].concat(), b"peek");
    p.st[1].tcp_recv_consume(s, 4).unwrap();
    assert_eq!(p.st[1].tcp_recv(s, &mut [0u8; 8]), Err(Error::WouldBlock));
    p.st[1].tcp_send(s, b"world!").unwrap();
    let mut got = Vec::new();
    assert!(p.run(Duration::from_secs(5), |p| {
        let mut b = [0u8; 64];
        if let Ok(n) = p.st[0].tcp_recv(c, &mut b) {
            got.extend_from_slice(&b[..n]);
        }
        got == b"world!"
    }));
    // Events told the client about readable data.
    let evs: Vec<Event> = p.st[0].drain_events().collect();
    assert!(
        evs.contains(&Event {
            handle: Handle::Tcp(c),
            kind: EventKind::Readable
        }),
        "{evs:?}"
    );
    // Client closes first: it ends in TIME_WAIT, the server in CLOSED (freed).
    p.st[0].tcp_shutdown(c).unwrap();
    assert!(p.run(Duration::from_secs(5), |p| p.st[1]
        .tcp_recv(s, &mut [0u8; 8])
        == Ok(0)));
    p.st[1].tcp_close(s).unwrap();
    assert!(p.run(Duration::from_secs(5), |p| p.st[0].tcp_state(c)
        == Ok(TcpState::TimeWait)));
    assert!(p.run(Duration::from_secs(5), |p| p.st[1].connection_count() == 0));
    assert_eq!(p.st[0].tcp_recv(c, &mut [0u8; 8]), Ok(0));
    p.st[0].tcp_close(c).unwrap();
    assert_eq!(p.st[0].tcp_state(c), Err(Error::InvalidHandle));
    // TIME_WAIT expires after 2*MSL.
    assert!(
        p.run(Duration::from_secs(120), |p| p.st[0].connection_count()
            == 0)
    );
}

per_cc! {
    fn bulk_transfer_both_directions(cc) {
        let mut p = Pair::new_cc(cc);
        let (c, s, _) = p.connect();
        transfer(&mut p, 0, c, s, 1 << 20, Duration::from_secs(60));
        transfer(&mut p, 1, s, c, 1 << 20, Duration::from_secs(60));
        assert_eq!(p.st[0].stats().tcp_retransmits, 0);
    }
}

per_cc! {
    fn sixteen_mib_through_loss_reorder_and_duplication(cc) {
        let mut a = config_cc(0, cc);
        let mut b = config_cc(1, cc);
        a.send_buffer = 256 * 1024;
        b.recv_buffer = 256 * 1024;
        let mut p = Pair::with(a, b);
        let (c, s, _) = p.connect();
        p.impair = Impair {
            loss: 10,
            dup: 10,
            reorder: 10,
        };
        transfer(&mut p, 0, c, s, 16 << 20, Duration::from_secs(3600));
        let st = p.st[0].stats();
        assert!(
            st.tcp_retransmits > 0 && st.tcp_fast_retransmits > 0,
            "{st:?} {:?}",
            p.st[1].stats()
        );
        eprintln!(
            "sender: retx {} rto {} fast {} segs {}",
            st.tcp_retransmits, st.tcp_rto_expired, st.tcp_fast_retransmits, st.tcp_segments_out
        );
        assert!(p.st[1].stats().tcp_ooo_segments > 0);
        assert!(p.st[1].stats().tcp_duplicate_segments > 0);
    }
}

per_cc! {
    /// An echo both ways through loss, duplication and reordering on a link with a 1500-byte
    /// MTU, as the bypass lab's Linux client runs it: each end holds out-of-order data while
    /// it sends, so its data segments carry SACK blocks, and they must still fit the MTU (the
    /// link drops longer frames). Before segments shrank for their SACK blocks, every full one
    /// sent while a hole was open was lost, and the lab's echo went from RTO to RTO.
    fn an_echo_through_loss_fits_its_sack_blocks_in_the_mtu(cc) {
        let mut p = Pair::new_cc(cc);
        let (c, s, _) = p.connect();
        p.mtu = Some(1500);
        p.impair = Impair {
            loss: 10,
            dup: 10,
            reorder: 10,
        };
        let total = 4usize << 20;
        let pattern = |i: usize| ((i as u64).wrapping_mul(2654435761) >> 7) as u8;
        let (mut sent, mut got) = (0usize, 0usize);
        let mut echo: Vec<u8> = Vec::new();
        let mut buf = vec![0u8; 32 * 1024];
        let ok = p.run(Duration::from_secs(600), |p| {
            while sent < total {
                let n = (total - sent).min(buf.len());
                for (i, b) in buf[..n].iter_mut().enumerate() {
                    *b = pattern(sent + i);
                }
                match p.st[0].tcp_send(c, &buf[..n]) {
                    Ok(k) => sent += k,
                    Err(_) => break,
                }
            }
            // The server echoes what it reads, reading only what it can send back.
            loop {
                if !echo.is_empty() {
                    if let Ok(k) = p.st[1].tcp_send(s, &echo) {
                        echo.drain(..k);
                    }
                    if !echo.is_empty() {
                        break;
                    }
                }
                match p.st[1].tcp_recv(s, &mut buf) {
                    Ok(n) if n > 0 => echo.extend_from_slice(&buf[..n]),
                    _ => break,
                }
            }
            while let Ok(n) = p.st[0].tcp_recv(c, &mut buf) {
                if n == 0 {
                    break;
                }
                for (i, &b) in buf[..n].iter().enumerate() {
                    assert_eq!(b, pattern(got + i), "byte {} corrupted", got + i);
                }
                got += n;
            }
            got == total
        });
        assert!(ok, "echo stalled: sent {sent}, echoed back {got} of {total}");
        let (client, server) = (p.st[0].stats(), p.st[1].stats());
        assert!(
            client.tcp_ooo_segments > 0 && server.tcp_ooo_segments > 0,
            "both ends held out-of-order data"
        );
        assert_eq!(p.oversized, 0, "frames over the MTU");
        for st in [client, server] {
            assert!(st.tcp_rto_expired <= 2, "{st:?}");
        }
    }
}

#[test]
fn zero_window_and_persist_probes() {
    let mut a = config(0);
    let mut b = config(1);
    b.recv_buffer = 4096;
    a.send_buffer = 64 * 1024;
    let _ = &mut a;
    let mut p = Pair::with(a, b);
    let (c, s, _) = p.connect();
    let data = vec![7u8; 20000];
    let mut sent = 0;
    // The receiver does not read: the window closes and the sender starts probing.
    p.run(Duration::from_secs(20), |p| {
        if sent < data.len() {
            if let Ok(n) = p.st[0].tcp_send(c, &data[sent..]) {
                sent += n;
            }
        }
        false
    });
    assert_eq!(p.st[1].tcp_recv_available(s).unwrap(), 4096);
    assert!(
        p.st[0].stats().tcp_zero_window_probes >= 2,
        "{:?}",
        p.st[0].stats()
    );
    assert_eq!(p.st[0].stats().tcp_timeouts, 0);
    assert_eq!(p.st[0].tcp_state(c), Ok(TcpState::Established));
    // Reading reopens the window and the rest arrives.
    let mut total = 0;
    assert!(p.run(Duration::from_secs(60), |p| {
        if sent < data.len() {
            if let Ok(n) = p.st[0].tcp_send(c, &data[sent..]) {
                sent += n;
            }
        }
        let mut b = [0u8; 1000];
        while let Ok(n) = p.st[1].tcp_recv(s, &mut b) {
            if n == 0 {
                break;
            }
            total += n;
        }
        total == data.len()
    }));
}

#[test]
fn ten_thousand_connections_request_response() {
    let mut a = config(0);
    let mut b = config(1);
    for c in [&mut a, &mut b] {
        c.max_connections = 10_000;
        c.send_buffer = 2048;
        c.recv_buffer = 2048;
    }
    let mut p = Pair::with(a, b);
    let l = p.st[1].tcp_listen(80, 10_000).unwrap();
    let now = p.now;
    let clients: Vec<ConnId> = (0..10_000)
        .map(|_| p.st[0].tcp_connect(now, IP_B, 80, |_| true).unwrap())
        .collect();
    let mut servers = Vec::new();
    assert!(p.run(Duration::from_secs(30), |p| {
        while let Ok(s) = p.st[1].tcp_accept(l) {
            servers.push(s);
        }
        servers.len() == clients.len()
    }));
    assert_eq!(p.st[1].connection_count(), 10_000);
    assert_eq!(p.st[1].stats().tcp_syn_cookies_sent, 0);
    // One request and response on every connection, driven by events only.
    for &c in &clients {
        p.st[0].tcp_send(c, b"req").unwrap();
    }
    let mut answered = 0;
    let mut buf = [0u8; 16];
    assert!(p.run(Duration::from_secs(30), |p| {
        let evs: Vec<Event> = p.st[1].drain_events().collect();
        for ev in evs {
            if let (Handle::Tcp(s), EventKind::Readable) = (ev.handle, ev.kind) {
                if p.st[1].tcp_recv(s, &mut buf) == Ok(3) {
                    p.st[1].tcp_send(s, b"resp").unwrap();
                }
            }
        }
        let evs: Vec<Event> = p.st[0].drain_events().collect();
        for ev in evs {
            if let (Handle::Tcp(c), EventKind::Readable) = (ev.handle, ev.kind) {
                if p.st[0].tcp_recv(c, &mut buf) == Ok(4) {
                    answered += 1;
                }
            }
        }
        answered == clients.len()
    }));
}

per_cc! {
    fn many_streams_both_ways_through_impairments(cc) {
        for seed in 1u64..=12 {
            let mut p = Pair::new_cc(cc);
            p.rng = XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let l = p.st[1].tcp_listen(80, 64).unwrap();
            let now = p.now;
            let clients: Vec<ConnId> = (0..16)
                .map(|_| p.st[0].tcp_connect(now, IP_B, 80, |_| true).unwrap())
                .collect();
            p.impair = Impair {
                loss: 20,
                dup: 20,
                reorder: 50,
            };
            let mut servers = Vec::new();
            assert!(p.run(Duration::from_secs(60), |p| {
                while let Ok(s) = p.st[1].tcp_accept(l) {
                    servers.push(s);
                }
                servers.len() == clients.len()
            }));
            // Each connection: client sends N bytes then closes; server echoes and closes.
            const N: usize = 200_000;
            let pattern = |conn: usize, i: usize| (i.wrapping_mul(31) ^ conn.wrapping_mul(131)) as u8;
            let mut sent = vec![0usize; 16];
            let mut echoed = vec![0usize; 16];
            let mut back = vec![0usize; 16];
            let mut pending: Vec<Vec<u8>> = vec![Vec::new(); 16];
            let mut client_eof = [false; 16];
            let mut chunk = vec![0u8; 8192];
            let mut buf = vec![0u8; 8192];
            // Servers are accepted in SYN order, which the link may have reordered: match by port.
            let ports: Vec<u16> = clients
                .iter()
                .map(|&c| p.st[0].tcp_endpoints(c).unwrap().2)
                .collect();
            servers.sort_by_key(|&s| {
                ports
                    .iter()
                    .position(|&pt| pt == p.st[1].tcp_endpoints(s).unwrap().1)
                    .unwrap()
            });
            let ok = p.run(Duration::from_secs(3600), |p| {
                for k in 0..16 {
                    let (c, s) = (clients[k], servers[k]);
                    if sent[k] < N {
                        let n = (N - sent[k]).min(chunk.len());
                        for (i, b) in chunk[..n].iter_mut().enumerate() {
                            *b = pattern(k, sent[k] + i);
                        }
                        if let Ok(m) = p.st[0].tcp_send(c, &chunk[..n]) {
                            sent[k] += m;
                            if sent[k] == N {
                                p.st[0].tcp_shutdown(c).unwrap();
                            }
                        }
                    }
                    // Server: echo what it reads; close after EOF once everything is echoed.
                    if pending[k].is_empty() {
                        match p.st[1].tcp_recv(s, &mut buf) {
                            Ok(0) if echoed[k] == N => {
                                let _ = p.st[1].tcp_close(s);
                                echoed[k] += 1; // closed marker
                            }
                            Ok(n) if n > 0 => pending[k].extend_from_slice(&buf[..n]),
                            _ => {}
                        }
                    }
                    if !pending[k].is_empty() {
                        if let Ok(m) = p.st[1].tcp_send(s, &pending[k]) {
                            echoed[k] += m;
                            pending[k].drain(..m);
                        }
                    }
                    loop {
                        match p.st[0].tcp_recv(c, &mut buf) {
                            Ok(0) => {
                                client_eof[k] = true;
                                break;
                            }
                            Ok(n) => {
                                for (i, &b) in buf[..n].iter().enumerate() {
                                    assert_eq!(
                                        b,
                                        pattern(k, back[k] + i),
                                        "seed {seed} conn {k} byte {}",
                                        back[k] + i
                                    );
                                }
                                back[k] += n;
                            }
                            Err(_) => break,
                        }
                    }
                }
                client_eof.iter().all(|&e| e)
            });
            if !ok {
                for k in 0..16 {
                    if back[k] != N {
                        for (side, h) in [(0, clients[k]), (1, servers[k])] {
                            let t = &p.st[side].tcp.conns[h.idx as usize];
                            eprintln!("side {side} conn {k}: in_use {} st {:?} una {} nxt {} max {} wnd {} cwnd {} ssthresh {} rec {} inrec {} dup {} persist {} rto_at {:?} rto {} retries {} sendlen {} recvlen {} rcv_nxt {} ooo {:?} ack_now {} heap_at {:?} now {:?} dirty {} owner {:?}", t.in_use, t.state, t.snd_una.0, t.snd_nxt.0, t.snd_max.0, t.snd_wnd, t.cc.cwnd(), t.cc.ssthresh(), t.recover.0, t.in_recovery, t.dupacks, t.persist, t.rto_at, t.rto, t.retries, t.send.len(), t.recv.len(), t.rcv_nxt.0, &t.ooo[..t.ooo_len as usize], t.ack_now, t.heap_at, p.now, t.in_dirty, t.owner);
                        }
                    }
                }
            }
            assert!(
                ok,
                "seed {seed}: sent {sent:?} echoed {echoed:?} back {back:?}"
            );
            assert!(back.iter().all(|&b| b == N));
        }
    }
}

#[test]
fn option_negotiation_and_small_mtu() {
    // a offers nothing optional and has a 576-byte MTU; b offers everything.
    let mut a = config(0);
    a.timestamps = false;
    a.window_scaling = false;
    a.sack_permitted = false;
    a.mtu = 576;
    let mut p = Pair::with(a, config(1));
    let (c, s, _) = p.connect();
    {
        let (ta, tb) = (
            &p.st[0].tcp.conns[c.idx as usize],
            &p.st[1].tcp.conns[s.idx as usize],
        );
        assert!(!ta.ts_enabled && !tb.ts_enabled && !ta.sack_ok && !tb.sack_ok);
        assert_eq!(
            (ta.snd_wscale, ta.rcv_wscale, tb.snd_wscale, tb.rcv_wscale),
            (0, 0, 0, 0)
        );
        assert_eq!(tb.mss, 536, "b sends at most a's MSS");
        assert_eq!(ta.mss, 536, "a's own MTU caps what it sends");
    }
    p.impair = Impair {
        loss: 20,
        dup: 10,
        reorder: 20,
    };
    transfer(&mut p, 1, s, c, 512 * 1024, Duration::from_secs(600));
    // Both ends with everything on: scaling and timestamps are in use.
    let mut p = Pair::new();
    let (c, s, _) = p.connect();
    let (ta, tb) = (
        &p.st[0].tcp.conns[c.idx as usize],
        &p.st[1].tcp.conns[s.idx as usize],
    );
    assert!(ta.ts_enabled && tb.ts_enabled && ta.sack_ok && tb.sack_ok);
    assert_eq!(
        (ta.snd_wscale, tb.snd_wscale),
        (tb.rcv_wscale, ta.rcv_wscale)
    );
    assert_eq!(ta.mss, 1448);
}

/// A peer whose whole window is about one of our segments (a Linux host with an 8 KiB receive
/// buffer and no window scaling, MTU 4000, offers 3960) gets segments of at most half the
/// largest window it has offered; once it offers more, full-sized ones.
#[test]
fn segments_are_bounded_by_half_the_largest_window_the_peer_offered() {
    let mut cfg = config(1);
    cfg.mtu = 4000;
    let mut s = Stack::new(cfg);
    let l = s.tcp_listen(80, 4).unwrap();
    let now = Instant::from_millis(5);
    let syn_opts = TcpOptions {
        mss: Some(3960),
        ..Default::default()
    };
    s.receive(now, &peer_segment(500, None, flags::SYN, 3960, syn_opts));
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    let iss = parse_out(&sink.frames[0]).0.seq.0;
    s.receive(
        now,
        &peer_segment(501, Some(iss + 1), flags::ACK, 3960, TcpOptions::default()),
    );
    let c = s.tcp_accept(l).unwrap();
    assert_eq!(s.tcp_info(c).unwrap().mss, 3960);
    assert_eq!(s.tcp_send(c, &[1u8; 20000]), Ok(20000));
    let sent = |s: &mut Stack| {
        let mut sink = VecSink::new();
        s.transmit(now, &mut sink);
        let lens: Vec<usize> = sink.frames.iter().map(|f| parse_out(f).1.len()).collect();
        lens
    };
    assert_eq!(sent(&mut s), vec![1980, 1980]);
    // The peer takes both and offers 64 KiB: the bound is then above the MSS.
    s.receive(
        now,
        &peer_segment(
            501,
            Some(iss + 1 + 3960),
            flags::ACK,
            65535,
            TcpOptions::default(),
        ),
    );
    let lens = sent(&mut s);
    assert!(lens.len() > 1 && lens[0] == 3960, "{lens:?}");
}

/// Sender-side silly-window avoidance (RFC 9293 3.8.6.2.1). A receiver that opens its window
/// a few bytes at a time (a naive stack, or one driven to it on purpose) must not get a
/// segment per opening: we send only a full segment, all that is queued, or half the largest
/// window it has offered; with nothing in flight to bring an ACK, the override timeout sends
/// what fits, and a window update that makes room sends at once.
#[test]
fn sender_avoids_silly_windows() {
    let mut s = Stack::new(config(1));
    let mut now = Instant::from_millis(5);
    let (c, iss) = accept_with_sack(&mut s, now);
    let ack = Some(iss + 1);
    // The handshake offered 65,535 bytes; now the peer offers 100.
    s.receive(
        now,
        &peer_segment(501, ack, flags::ACK, 100, TcpOptions::default()),
    );
    assert_eq!(s.tcp_send(c, &[9u8; 5000]), Ok(5000));
    let data_out = |s: &mut Stack, now: Instant| -> Vec<(u32, usize)> {
        let mut sink = VecSink::new();
        s.transmit(now, &mut sink);
        sink.frames
            .iter()
            .map(|f| parse_out(f))
            .filter(|(_, p)| !p.is_empty())
            .map(|(r, p)| (r.seq.0, p.len()))
            .collect()
    };
    assert_eq!(data_out(&mut s, now), vec![], "100 bytes of window: hold");
    // The window opens by a few bytes: still less than a segment, all data or half of 65,535.
    s.receive(
        now,
        &peer_segment(501, ack, flags::ACK, 400, TcpOptions::default()),
    );
    assert_eq!(data_out(&mut s, now), vec![]);
    // Room for two full segments: both leave at once, and not the 80 bytes beyond them.
    s.receive(
        now,
        &peer_segment(501, ack, flags::ACK, 3000, TcpOptions::default()),
    );
    assert_eq!(
        data_out(&mut s, now),
        vec![(iss + 1, 1460), (iss + 1 + 1460, 1460)]
    );
    // The peer takes them but offers only 100 more, and never updates it: with nothing in
    // flight, the override timeout sends the 100 bytes, not a zero-window probe.
    s.receive(
        now,
        &peer_segment(
            501,
            Some(iss + 1 + 2920),
            flags::ACK,
            100,
            TcpOptions::default(),
        ),
    );
    assert_eq!(data_out(&mut s, now), vec![]);
    let mut sent = Vec::new();
    for _ in 0..50 {
        now = now.add(Duration::from_millis(100));
        sent.extend(data_out(&mut s, now));
        if !sent.is_empty() {
            break;
        }
    }
    assert_eq!(sent, vec![(iss + 1 + 2920, 100)]);
    assert_eq!(s.stats().tcp_zero_window_probes, 0, "{:?}", s.stats());
    // All that is queued fits the window: it goes, however small.
    s.receive(
        now,
        &peer_segment(
            501,
            Some(iss + 1 + 3020),
            flags::ACK,
            65535,
            TcpOptions::default(),
        ),
    );
    let rest: usize = data_out(&mut s, now).iter().map(|&(_, n)| n).sum();
    assert_eq!(rest, 5000 - 3020);
}

per_cc! {
    /// Silly-window avoidance waits on the peer's window only: a segment that the congestion
    /// window alone keeps short still leaves, so that a lossy path keeps enough segments in
    /// flight to bring the duplicate ACKs that repair a loss (holding it made a lossy 256 MiB
    /// echo take 166 s instead of 99, docs/TCPIP.md).
    fn a_segment_short_of_the_congestion_window_still_leaves(cc) {
        let mut s = Stack::new(config_cc(1, cc));
        let now = Instant::from_millis(5);
        let (c, iss) = accept_with_sack(&mut s, now);
        assert_eq!(s.tcp_send(c, &[9u8; 20000]), Ok(20000));
        let data_out = |s: &mut Stack| -> Vec<usize> {
            let mut sink = VecSink::new();
            s.transmit(now, &mut sink);
            sink.frames
                .iter()
                .map(|f| parse_out(f).1.len())
                .filter(|&n| n > 0)
                .collect()
        };
        // The initial window: ten whole segments.
        assert_eq!(data_out(&mut s), vec![1460; 10]);
        // 300 bytes acknowledged: slow start grows the window by 300, which leaves 600 bytes of
        // room under it, while the peer offers 65,535.
        s.receive(
            now,
            &peer_segment(
                501,
                Some(iss + 1 + 300),
                flags::ACK,
                65535,
                TcpOptions::default(),
            ),
        );
        assert_eq!(data_out(&mut s), vec![600]);
    }
}
