//! Opening and closing: simultaneous open and close, RST rules, SYN cookies, TIME_WAIT reuse, keepalive and the timeouts that end connections.

use super::*;

#[test]
fn simultaneous_close() {
    let mut p = Pair::new();
    let (c, s, _) = p.connect();
    p.st[0].tcp_shutdown(c).unwrap();
    p.st[1].tcp_shutdown(s).unwrap();
    assert!(p.run(Duration::from_secs(5), |p| {
        p.st[0].tcp_state(c) == Ok(TcpState::TimeWait)
            && p.st[1].tcp_state(s) == Ok(TcpState::TimeWait)
    }));
}

#[test]
fn simultaneous_open() {
    let mut p = Pair::new();
    let now = p.now;
    let a = p.st[0].tcp_connect_from(now, IP_B, 5000, 6000).unwrap();
    let b = p.st[1].tcp_connect_from(now, IP_A, 6000, 5000).unwrap();
    // Data queued before the handshake completes must survive the SYN being acked.
    assert_eq!(p.st[0].tcp_send(a, b"early"), Ok(5));
    assert!(p.run(Duration::from_secs(10), |p| {
        p.st[0].tcp_state(a) == Ok(TcpState::Established)
            && p.st[1].tcp_state(b) == Ok(TcpState::Established)
    }));
    let mut got = Vec::new();
    assert!(p.run(Duration::from_secs(5), |p| {
        let mut buf = [0u8; 16];
        if let Ok(n) = p.st[1].tcp_recv(b, &mut buf) {
            got.extend_from_slice(&buf[..n]);
        }
        got.len() >= 5
    }));
    assert_eq!(got, b"early");
}

#[test]
fn connect_refused_in_syn_sent() {
    let mut p = Pair::new();
    let now = p.now;
    let c = p.st[0].tcp_connect(now, IP_B, 81, |_| true).unwrap();
    assert!(p.run(Duration::from_secs(5), |p| p.st[0].tcp_state(c)
        == Ok(TcpState::Closed)));
    assert_eq!(p.st[0].tcp_error(c), Ok(Some(Error::ConnectionRefused)));
    assert_eq!(
        p.st[0].tcp_recv(c, &mut [0u8; 4]),
        Err(Error::ConnectionRefused)
    );
    assert!(p.st[1].stats().tcp_rst_sent >= 1);
    let evs: Vec<Event> = p.st[0].drain_events().collect();
    assert!(evs.contains(&Event {
        handle: Handle::Tcp(c),
        kind: EventKind::Closed
    }));
}

/// An abort (RST) from either side, in each synchronized state, resets the peer.
#[test]
fn rst_in_synchronized_states() {
    // (a shuts down first?, which side aborts, state of the peer when the RST arrives)
    for (half_close, aborter, peer_state) in [
        (false, 0, TcpState::Established),
        (true, 0, TcpState::CloseWait), // a in FIN_WAIT_2 aborts
        (true, 1, TcpState::FinWait2),  // b in CLOSE_WAIT aborts
    ] {
        let mut p = Pair::new();
        let (c, s, _) = p.connect();
        if half_close {
            p.st[0].tcp_shutdown(c).unwrap();
        }
        let conn = [c, s];
        let peer = 1 - aborter;
        assert!(
            p.run(Duration::from_secs(5), |p| p.st[peer].tcp_state(conn[peer])
                == Ok(peer_state))
        );
        p.st[aborter].tcp_abort(conn[aborter]).unwrap();
        assert!(
            p.run(Duration::from_secs(5), |p| p.st[peer].tcp_state(conn[peer])
                == Ok(TcpState::Closed))
        );
        assert_eq!(
            p.st[peer].tcp_error(conn[peer]),
            Ok(Some(Error::ConnectionReset)),
            "{peer_state:?}"
        );
        assert_eq!(p.st[aborter].connection_count(), 0);
    }
}

#[test]
fn rst_in_syn_received_frees_half_open() {
    let mut p = Pair::new();
    let _l = p.st[1].tcp_listen(80, 4).unwrap();
    let now = p.now;
    let c = p.st[0].tcp_connect(now, IP_B, 80, |_| true).unwrap();
    // Let the SYN through, drop the final ACK so b stays in SYN_RCVD, then abort a.
    p.filter = Some(Box::new(|from, f| {
        !(from == 0 && f.len() >= 54 && f[47] == flags::ACK)
    }));
    assert!(p.run(Duration::from_secs(1), |p| p.st[0].tcp_state(c)
        == Ok(TcpState::Established)));
    assert_eq!(p.st[1].connection_count(), 1);
    p.filter = None;
    p.st[0].tcp_abort(c).unwrap();
    assert!(p.run(Duration::from_secs(1), |p| p.st[1].connection_count() == 0));
}

#[test]
fn syn_cookies_when_backlog_full() {
    let mut p = Pair::new();
    let l = p.st[1].tcp_listen(80, 1).unwrap();
    let now = p.now;
    let conns: Vec<ConnId> = (0..4)
        .map(|_| p.st[0].tcp_connect(now, IP_B, 80, |_| true).unwrap())
        .collect();
    assert!(p.run(Duration::from_secs(5), |p| conns
        .iter()
        .all(|&c| p.st[0].tcp_state(c) == Ok(TcpState::Established))));
    assert!(
        p.st[1].stats().tcp_syn_cookies_sent >= 1,
        "{:?}",
        p.st[1].stats()
    );
    // Accept one, making room for the cookie connections as their ACKs are retried.
    let mut accepted = Vec::new();
    for &c in &conns {
        p.st[0].tcp_send(c, b"ping").unwrap();
    }
    assert!(p.run(Duration::from_secs(30), |p| {
        while let Ok(s) = p.st[1].tcp_accept(l) {
            accepted.push(s);
        }
        accepted.len() == conns.len()
            && accepted
                .iter()
                .all(|&s| p.st[1].tcp_recv_available(s).unwrap_or(0) == 4)
    }));
    assert!(
        p.st[1].stats().tcp_syn_cookies_accepted >= 1,
        "{:?}",
        p.st[1].stats()
    );
}

#[test]
fn time_wait_reuse_by_new_syn() {
    let mut p = Pair::new();
    let l = p.st[1].tcp_listen(80, 8).unwrap();
    let now = p.now;
    let c = p.st[0].tcp_connect_from(now, IP_B, 80, 40000).unwrap();
    let mut s = None;
    assert!(p.run(Duration::from_secs(5), |p| {
        s = s.or_else(|| p.st[1].tcp_accept(l).ok());
        s.is_some()
    }));
    let s = s.unwrap();
    // Server closes first: the server holds TIME_WAIT.
    p.st[1].tcp_close(s).unwrap();
    assert!(p.run(Duration::from_secs(5), |p| p.st[0]
        .tcp_recv(c, &mut [0u8; 4])
        == Ok(0)));
    p.st[0].tcp_close(c).unwrap();
    assert!(p.run(Duration::from_secs(5), |p| p.st[0].connection_count() == 0));
    assert_eq!(p.st[1].connection_count(), 1, "server in TIME_WAIT");
    // Same 4-tuple again, well before TIME_WAIT ends.
    p.run(Duration::from_secs(2), |_| false);
    let now = p.now;
    let c2 = p.st[0].tcp_connect_from(now, IP_B, 80, 40000).unwrap();
    assert!(p.run(Duration::from_secs(5), |p| p.st[1].tcp_accept(l).is_ok()));
    assert_eq!(p.st[0].tcp_state(c2), Ok(TcpState::Established));
    assert_eq!(p.st[1].stats().tcp_time_wait_reused, 1);
}

#[test]
fn keepalive_times_out_dead_peer() {
    let mut a = config(0);
    a.keepalive = Some(Keepalive {
        idle: Duration::from_secs(10),
        interval: Duration::from_secs(1),
        probes: 3,
    });
    let mut p = Pair::with(a, config(1));
    let (c, _s, _) = p.connect();
    // Peer alive: probes are answered, nothing happens.
    p.run(Duration::from_secs(25), |_| false);
    assert!(p.st[0].stats().tcp_keepalive_probes >= 2);
    assert_eq!(p.st[0].tcp_state(c), Ok(TcpState::Established));
    p.cut = true;
    assert!(p.run(Duration::from_secs(30), |p| p.st[0].tcp_state(c)
        == Ok(TcpState::Closed)));
    assert_eq!(p.st[0].tcp_error(c), Ok(Some(Error::TimedOut)));
}

#[test]
fn retransmission_timeout_gives_up() {
    let mut p = Pair::new();
    let (c, _s, _) = p.connect();
    p.cut = true;
    p.st[0].tcp_send(c, b"into the void").unwrap();
    assert!(p.run(Duration::from_secs(3600), |p| p.st[0].tcp_state(c)
        == Ok(TcpState::Closed)));
    assert_eq!(p.st[0].tcp_error(c), Ok(Some(Error::TimedOut)));
}

#[test]
fn connect_to_unresolvable_host_times_out() {
    let mut p = Pair::new();
    let now = p.now;
    let c = p.st[0]
        .tcp_connect(now, Ipv4Addr::new(198, 18, 0, 99), 80, |_| true)
        .unwrap();
    assert!(p.run(Duration::from_secs(600), |p| p.st[0].tcp_state(c)
        == Ok(TcpState::Closed)));
    assert_eq!(p.st[0].tcp_error(c), Ok(Some(Error::TimedOut)));
    assert!(p.st[0].stats().arp_requests_sent >= 3);
}

#[test]
fn half_open_timeout_returns_backlog_room() {
    let mut p = Pair::new();
    let l = p.st[1].tcp_listen(80, 1).unwrap();
    // The client's SYN arrives, but nothing from b gets back: b holds a half-open connection.
    p.filter = Some(Box::new(|from, f| from == 0 || f[12..14] != [0x08, 0x00]));
    let now = p.now;
    let _c = p.st[0].tcp_connect(now, IP_B, 80, |_| true).unwrap();
    assert!(p.run(Duration::from_secs(1), |p| p.st[1].connection_count() == 1));
    assert!(
        p.run(Duration::from_secs(600), |p| p.st[1].connection_count()
            == 0)
    );
    // SYN-ACK retries exhausted; the backlog slot is free again, no cookies needed.
    p.filter = None;
    p.cut = false;
    let now = p.now;
    let c2 = p.st[0].tcp_connect(now, IP_B, 80, |_| true).unwrap();
    assert!(p.run(Duration::from_secs(5), |p| p.st[0].tcp_state(c2)
        == Ok(TcpState::Established)));
    assert!(p.run(Duration::from_secs(5), |p| p.st[1].tcp_accept(l).is_ok()));
}

#[test]
fn data_after_close_is_reset_and_fin_wait_2_times_out() {
    let mut p = Pair::new();
    let (c, s, _) = p.connect();
    // b closes; a keeps sending: b answers with RST.
    p.st[1].tcp_close(s).unwrap();
    assert!(p.run(Duration::from_secs(5), |p| p.st[0].tcp_state(c)
        == Ok(TcpState::CloseWait)));
    p.st[0].tcp_send(c, b"late data").unwrap();
    let ok = p.run(Duration::from_secs(5), |p| {
        p.st[0].tcp_state(c) == Ok(TcpState::Closed)
    });
    assert!(
        ok,
        "{:?} {:?} {:?}",
        p.st[0].tcp_state(c),
        p.st[0].stats(),
        p.st[1].stats()
    );
    assert_eq!(p.st[0].tcp_error(c), Ok(Some(Error::ConnectionReset)));
    assert_eq!(p.st[1].stats().tcp_data_after_close, 1);
    assert_eq!(p.st[1].connection_count(), 0);

    // An orphan in FIN_WAIT_2 whose peer never closes goes away after fin_timeout.
    let mut p = Pair::new();
    let (c, s, _) = p.connect();
    p.st[1].tcp_close(s).unwrap();
    assert!(p.run(Duration::from_secs(5), |p| p.st[0].tcp_state(c)
        == Ok(TcpState::CloseWait)));
    assert_eq!(p.st[1].connection_count(), 1);
    assert!(
        p.run(Duration::from_secs(120), |p| p.st[1].connection_count()
            == 0)
    );
}

/// RST in the closing states: the connection ends at once (RFC 9293 3.10.7.4).
#[test]
fn rst_in_closing_states() {
    for target in [
        TcpState::FinWait1,
        TcpState::Closing,
        TcpState::LastAck,
        TcpState::TimeWait,
    ] {
        let mut p = Pair::new();
        let (c, s, _) = p.connect();
        match target {
            TcpState::FinWait1 => {
                p.filter = Some(Box::new(|from, f| from == 0 || f[12..14] != [0x08, 0x00]));
                p.st[0].tcp_shutdown(c).unwrap();
            }
            TcpState::Closing => {
                p.filter = Some(Box::new(|_, f| !is_pure_ack(f)));
                p.st[0].tcp_shutdown(c).unwrap();
                p.st[1].tcp_shutdown(s).unwrap();
            }
            TcpState::LastAck => {
                p.st[1].tcp_shutdown(s).unwrap();
                assert!(p.run(Duration::from_secs(5), |p| p.st[0].tcp_state(c)
                    == Ok(TcpState::CloseWait)));
                p.filter = Some(Box::new(|_, f| !is_pure_ack(f)));
                p.st[0].tcp_shutdown(c).unwrap();
            }
            _ => p.st[0].tcp_shutdown(c).unwrap(),
        }
        if target == TcpState::TimeWait {
            p.st[1].tcp_shutdown(s).unwrap();
        }
        assert!(
            p.run(Duration::from_secs(5), |p| p.st[0].tcp_state(c)
                == Ok(target)),
            "did not reach {target:?}: {:?}",
            p.st[0].tcp_state(c)
        );
        inject_rst(&mut p, 0, c);
        assert_eq!(
            p.st[0].tcp_state(c),
            Ok(TcpState::Closed),
            "RST in {target:?}"
        );
        let want = if target == TcpState::FinWait1 {
            Some(Error::ConnectionReset)
        } else {
            None
        };
        assert_eq!(p.st[0].tcp_error(c), Ok(want), "{target:?}");
        assert_eq!(p.st[0].stats().tcp_resets_received, 1);
    }
}
