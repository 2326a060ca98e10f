//! Deterministic tests: two stacks wired back to back through an in-memory link that can
//! lose, duplicate, reorder and delay frames (seeded PRNG, virtual clock), plus
//! hand-crafted frames.

use crate::tcp::CongestionControl;
use crate::util::XorShift;
use crate::Error;
use crate::*;
use std::time::Duration;
use wirespeed_wire::tcp::{fill_checksum, flags};
use wirespeed_wire::*;

const MAC_A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const MAC_B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
const IP_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

/// Sees every frame (sending side, bytes); returns false to drop it.
pub(crate) type FrameFilter = Box<dyn FnMut(usize, &[u8]) -> bool>;

#[derive(Default, Clone, Copy)]
pub(crate) struct Impair {
    /// Per-mille probabilities.
    pub loss: u32,
    pub dup: u32,
    pub reorder: u32,
}

pub(crate) struct Pair {
    pub st: [Stack; 2],
    pub now: Instant,
    /// (deliver at, sequence for stable order, destination side, frame)
    queue: Vec<(Instant, u64, usize, Vec<u8>)>,
    seq: u64,
    pub rng: XorShift,
    pub impair: Impair,
    pub delay_us: u64,
    /// Drop every frame (link cut).
    pub cut: bool,
    /// Inspect/filter frames: return false to drop. (side sending, frame)
    pub filter: Option<FrameFilter>,
    /// Rewrite frames as they leave (side sending, frame), after `filter`.
    pub rewrite: Option<FrameRewrite>,
}

/// Changes a frame in flight (sending side, bytes).
pub(crate) type FrameRewrite = Box<dyn FnMut(usize, &mut [u8])>;

pub(crate) fn config(side: usize) -> Config {
    let (mac, ip) = if side == 0 {
        (MAC_A, IP_A)
    } else {
        (MAC_B, IP_B)
    };
    let mut c = Config::new(mac, ip, 24);
    c.secret = 0x1234_5678 + side as u64;
    c
}

impl Pair {
    pub fn new() -> Pair {
        Pair::with(config(0), config(1))
    }

    pub fn with(a: Config, b: Config) -> Pair {
        Pair {
            st: [Stack::new(a), Stack::new(b)],
            now: Instant::from_millis(1000),
            queue: Vec::new(),
            seq: 0,
            rng: XorShift(0x9e37_79b9),
            impair: Impair::default(),
            delay_us: 50,
            cut: false,
            filter: None,
            rewrite: None,
        }
    }

    fn chance(&mut self, permille: u32) -> bool {
        permille > 0 && (self.rng.next() % 1000) < permille as u64
    }

    fn enqueue(&mut self, from: usize, mut frame: Vec<u8>) {
        if self.cut {
            return;
        }
        if let Some(f) = self.filter.as_mut() {
            if !f(from, &frame) {
                return;
            }
        }
        if let Some(r) = self.rewrite.as_mut() {
            r(from, &mut frame);
        }
        if self.chance(self.impair.loss) {
            return;
        }
        let copies = if self.chance(self.impair.dup) { 2 } else { 1 };
        for _ in 0..copies {
            let mut at = self.now.add_micros(self.delay_us);
            if self.chance(self.impair.reorder) {
                at = at.add_micros(self.delay_us * 3 + self.rng.next() % 500);
            }
            self.seq += 1;
            self.queue.push((at, self.seq, 1 - from, frame.clone()));
        }
    }

    /// Delivers due frames, lets `app` act, transmits; advances the virtual clock.
    /// Returns true when `app` reports done before `max` of virtual time passed.
    pub fn run(&mut self, max: Duration, mut app: impl FnMut(&mut Pair) -> bool) -> bool {
        let deadline = self.now.add(max);
        loop {
            self.queue.sort_by_key(|&(at, seq, _, _)| (at, seq));
            let due = self
                .queue
                .iter()
                .take_while(|(at, ..)| *at <= self.now)
                .count();
            let frames: Vec<_> = self.queue.drain(..due).collect();
            for (_, _, to, f) in frames {
                let now = self.now;
                self.st[to].receive(now, &f);
            }
            if app(self) {
                return true;
            }
            for side in 0..2 {
                let mut sink = VecSink::new();
                let now = self.now;
                self.st[side].transmit(now, &mut sink);
                for f in sink.frames {
                    self.enqueue(side, f);
                }
            }
            let mut next = self.queue.iter().map(|q| q.0).min();
            for s in &self.st {
                if let Some(t) = s.poll_at() {
                    next = Some(next.map_or(t, |n: Instant| n.min(t)));
                }
            }
            let next = next
                .unwrap_or(self.now.add_micros(1000))
                .max(self.now.add_micros(1));
            if next > deadline {
                // Stop at the deadline so a later phase starts at a predictable time.
                self.now = deadline;
                return false;
            }
            self.now = next;
        }
    }

    /// b listens on 80, a connects; returns (client on a, server on b, listener).
    pub fn connect(&mut self) -> (ConnId, ConnId, ListenerId) {
        let l = self.st[1].tcp_listen(80, 16).unwrap();
        let now = self.now;
        let c = self.st[0].tcp_connect(now, IP_B, 80, |_| true).unwrap();
        let mut server = None;
        let ok = self.run(Duration::from_secs(30), |p| {
            if server.is_none() {
                server = p.st[1].tcp_accept(l).ok();
            }
            server.is_some() && p.st[0].tcp_state(c) == Ok(TcpState::Established)
        });
        assert!(
            ok,
            "handshake did not complete: {:?}",
            self.st[0].tcp_state(c)
        );
        (c, server.unwrap(), l)
    }
}

/// Sends `total` bytes of a deterministic pattern from side `from` and checks them bit-exact
/// at the other side; both directions close afterwards.
fn transfer(p: &mut Pair, from: usize, tx: ConnId, rx: ConnId, total: usize, max: Duration) {
    let pattern = |i: usize| ((i as u64).wrapping_mul(2654435761) >> 7) as u8;
    let mut sent = 0usize;
    let mut received = 0usize;
    let mut chunk = vec![0u8; 32 * 1024];
    let mut buf = vec![0u8; 32 * 1024];
    let mut closed = false;
    let mut eof = false;
    let ok = p.run(max, |p| {
        while sent < total {
            let n = (total - sent).min(chunk.len());
            for (i, b) in chunk[..n].iter_mut().enumerate() {
                *b = pattern(sent + i);
            }
            match p.st[from].tcp_send(tx, &chunk[..n]) {
                Ok(k) => sent += k,
                Err(Error::WouldBlock) => break,
                Err(e) => panic!("send: {e}"),
            }
        }
        if sent == total && !closed {
            p.st[from].tcp_shutdown(tx).unwrap();
            closed = true;
        }
        loop {
            match p.st[1 - from].tcp_recv(rx, &mut buf) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => {
                    for (i, &b) in buf[..n].iter().enumerate() {
                        assert_eq!(b, pattern(received + i), "byte {} corrupted", received + i);
                    }
                    received += n;
                }
                Err(Error::WouldBlock) => break,
                Err(e) => panic!("recv: {e}"),
            }
        }
        eof
    });
    assert!(
        ok,
        "transfer stalled: sent {sent}, received {received} of {total}"
    );
    assert_eq!(received, total);
}

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

#[test]
fn bulk_transfer_both_directions() {
    let mut p = Pair::new();
    let (c, s, _) = p.connect();
    transfer(&mut p, 0, c, s, 1 << 20, Duration::from_secs(60));
    transfer(&mut p, 1, s, c, 1 << 20, Duration::from_secs(60));
    assert_eq!(p.st[0].stats().tcp_retransmits, 0);
}

#[test]
fn sixteen_mib_through_loss_reorder_and_duplication() {
    let mut a = config(0);
    let mut b = config(1);
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

/// Sends one short message from side 0 on `c` with its first `lost` transmissions dropped,
/// and runs until side 1 has read it all on `s`.
fn send_through_losses(p: &mut Pair, c: ConnId, s: ConnId, lost: usize) {
    let mut dropped = 0;
    p.filter = Some(Box::new(move |from, f| {
        if from == 0 && f.len() > 60 && dropped < lost {
            dropped += 1;
            return false;
        }
        true
    }));
    p.st[0].tcp_send(c, b"lost once").unwrap();
    let mut got = Vec::new();
    assert!(p.run(Duration::from_secs(10), |p| {
        let mut b = [0u8; 64];
        if let Ok(n) = p.st[1].tcp_recv(s, &mut b) {
            got.extend_from_slice(&b[..n]);
        }
        got == b"lost once"
    }));
}

#[test]
fn rto_retransmits_lost_segment() {
    let mut p = Pair::new();
    let (c, s, _) = p.connect();
    // Drop the data segment and both tail loss probes: a lone segment has no dup ACKs, so
    // once the probes are spent the RTO fires.
    send_through_losses(&mut p, c, s, 3);
    assert_eq!(p.st[0].stats().tcp_loss_probes, 2);
    assert_eq!(p.st[0].stats().tcp_rto_expired, 1);
}

#[test]
fn tail_loss_probe_repairs_a_lone_lost_segment_before_the_rto() {
    let mut p = Pair::new();
    let (c, s, _) = p.connect();
    send_through_losses(&mut p, c, s, 1);
    assert_eq!(p.st[0].stats().tcp_loss_probes, 1);
    assert_eq!(p.st[0].stats().tcp_rto_expired, 0);
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

/// A hand-built TCP segment from A to B.
fn segment(sport: u16, dport: u16, seq: u32, ack: Option<u32>, fl: u8, payload: &[u8]) -> Vec<u8> {
    let repr = TcpRepr {
        src_port: sport,
        dst_port: dport,
        seq: SeqNumber(seq),
        ack: ack.map(SeqNumber),
        flags: fl,
        window: 65535,
        options: TcpOptions::default(),
    };
    let hl = repr.header_len();
    let mut f = vec![0u8; 14 + 20 + hl + payload.len()];
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
        protocol: IpProtocol::Tcp,
        payload_len: hl + payload.len(),
        ttl: 64,
        ident: 1,
        dont_frag: true,
    }
    .emit(&mut f[14..])
    .unwrap();
    repr.emit(&mut f[34..]).unwrap();
    f[34 + hl..].copy_from_slice(payload);
    fill_checksum(&mut f[34..], IP_A, IP_B);
    f
}

fn parse_out(f: &[u8]) -> (TcpRepr, Vec<u8>) {
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    let t = TcpPacket::new_checked(ip.payload()).unwrap();
    (
        TcpRepr::parse(&t, ip.src(), ip.dst()).unwrap(),
        t.payload().to_vec(),
    )
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

/// An RST with the exact expected sequence number, injected from the peer's address.
fn inject_rst(p: &mut Pair, side: usize, conn: ConnId) {
    let t = &p.st[side].tcp.conns[conn.idx as usize];
    let repr = TcpRepr {
        src_port: t.remote_port,
        dst_port: t.local_port,
        seq: t.rcv_nxt,
        ack: None,
        flags: flags::RST,
        window: 0,
        options: TcpOptions::default(),
    };
    let (src_mac, dst_mac, src, dst) = if side == 0 {
        (MAC_B, MAC_A, IP_B, IP_A)
    } else {
        (MAC_A, MAC_B, IP_A, IP_B)
    };
    let mut f = vec![0u8; 54];
    EthernetRepr {
        dst: dst_mac,
        src: src_mac,
        vlan_id: None,
        ethertype: EtherType::Ipv4,
    }
    .emit(&mut f)
    .unwrap();
    Ipv4Repr {
        src,
        dst,
        protocol: IpProtocol::Tcp,
        payload_len: 20,
        ttl: 64,
        ident: 7,
        dont_frag: true,
    }
    .emit(&mut f[14..])
    .unwrap();
    repr.emit(&mut f[34..]).unwrap();
    fill_checksum(&mut f[34..], src, dst);
    let now = p.now;
    p.st[side].receive(now, &f);
}

fn is_pure_ack(f: &[u8]) -> bool {
    f.len() >= 54
        && f[12..14] == [0x08, 0x00]
        && f[47] == flags::ACK
        && u16::from_be_bytes([f[16], f[17]]) as usize == 20 + ((f[46] >> 4) as usize) * 4
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

#[test]
fn connection_state_stays_compact() {
    // Per-connection control state (buffers excluded) should stay within a few cache lines.
    let size = std::mem::size_of::<crate::tcp::Tcb>();
    assert!(size <= 384, "Tcb is {size} bytes");
    eprintln!("Tcb: {size} bytes");
}

#[test]
fn many_streams_both_ways_through_impairments() {
    for seed in 1u64..=12 {
        let mut p = Pair::new();
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

/// Linux's receiver moves its window between duplicate ACKs while its application reads;
/// SACK blocks above SND.UNA still mark them as duplicates (RFC 6675), so fast retransmit
/// fires instead of waiting for the RTO.
#[test]
fn sack_marks_duplicate_acks_despite_window_changes() {
    let mut s = Stack::new(config(1));
    let _l = s.tcp_listen(80, 4).unwrap();
    let now = Instant::from_millis(5);
    let seg = |seq: u32, ack: Option<u32>, fl: u8, window: u16, options: TcpOptions| {
        let repr = TcpRepr {
            src_port: 1000,
            dst_port: 80,
            seq: SeqNumber(seq),
            ack: ack.map(SeqNumber),
            flags: fl,
            window,
            options,
        };
        let hl = repr.header_len();
        let mut f = vec![0u8; 14 + 20 + hl];
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
            protocol: IpProtocol::Tcp,
            payload_len: hl,
            ttl: 64,
            ident: 1,
            dont_frag: true,
        }
        .emit(&mut f[14..])
        .unwrap();
        repr.emit(&mut f[34..]).unwrap();
        fill_checksum(&mut f[34..], IP_A, IP_B);
        f
    };
    let syn_opts = TcpOptions {
        mss: Some(1460),
        sack_permitted: true,
        ..Default::default()
    };
    s.receive(now, &seg(100, None, flags::SYN, 65535, syn_opts));
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    let (synack, _) = parse_out(&sink.frames[0]);
    assert!(synack.options.sack_permitted);
    let iss = synack.seq.0;
    s.receive(
        now,
        &seg(101, Some(iss + 1), flags::ACK, 65535, TcpOptions::default()),
    );
    let c = s.tcp_accept(_l).unwrap();
    s.tcp_send(c, &[7u8; 8 * 1460]).unwrap();
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    assert_eq!(sink.frames.len(), 8);
    // The first segment is lost; three ACKs for iss+1, each with a different window and a
    // growing SACK block.
    for (i, window) in [60000u16, 58000, 56000].into_iter().enumerate() {
        let mut o = TcpOptions::default();
        o.sack_blocks[0] = (iss + 1 + 1460, iss + 1 + 1460 * (2 + i as u32));
        o.sack_count = 1;
        s.receive(now, &seg(101, Some(iss + 1), flags::ACK, window, o));
    }
    assert_eq!(s.stats().tcp_fast_retransmits, 1);
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    let (r, data) = parse_out(&sink.frames[0]);
    assert_eq!(
        (r.seq.0, data.len()),
        (iss + 1, 1460),
        "the hole is retransmitted"
    );
}

/// Three segments lost from one window: the SACK scoreboard retransmits every hole within
/// the same recovery episode, without waiting for an RTO per hole.
#[test]
fn sack_recovers_several_holes_in_one_window() {
    let mut p = Pair::new();
    let (c, s, _) = p.connect();
    let mut data_segments = 0;
    p.filter = Some(Box::new(move |from, f| {
        if from == 0 && f.len() > 1000 {
            data_segments += 1;
            return !matches!(data_segments, 3 | 5 | 7);
        }
        true
    }));
    transfer(&mut p, 0, c, s, 40 * 1448, Duration::from_secs(10));
    let st = p.st[0].stats();
    assert_eq!(st.tcp_fast_retransmits, 1, "{st:?}");
    assert!(st.tcp_sack_retransmits >= 1, "{st:?}");
    assert_eq!(
        st.tcp_retransmits, 3,
        "exactly the three holes, nothing spurious: {st:?}"
    );
    assert_eq!(st.tcp_rto_expired, 0, "{st:?}");
}

#[test]
fn sack_blocks_report_the_latest_segment_first() {
    let mut s = Stack::new(config(1));
    let l = s.tcp_listen(80, 4).unwrap();
    let now = Instant::from_millis(5);
    // A SYN offering SACK-permitted.
    let syn = {
        let repr = TcpRepr {
            src_port: 1000,
            dst_port: 80,
            seq: SeqNumber(500),
            ack: None,
            flags: flags::SYN,
            window: 65535,
            options: TcpOptions {
                mss: Some(1460),
                sack_permitted: true,
                ..Default::default()
            },
        };
        let hl = repr.header_len();
        let mut f = vec![0u8; 34 + hl];
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
            protocol: IpProtocol::Tcp,
            payload_len: hl,
            ttl: 64,
            ident: 1,
            dont_frag: true,
        }
        .emit(&mut f[14..])
        .unwrap();
        repr.emit(&mut f[34..]).unwrap();
        fill_checksum(&mut f[34..], IP_A, IP_B);
        f
    };
    s.receive(now, &syn);
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    let iss = parse_out(&sink.frames[0]).0.seq.0;
    s.receive(now, &segment(1000, 80, 501, Some(iss + 1), flags::ACK, &[]));
    let _c = s.tcp_accept(l).unwrap();
    // Two disjoint out-of-order segments; the later-arriving one is lower in sequence.
    s.receive(
        now,
        &segment(1000, 80, 601, Some(iss + 1), flags::ACK, &[1u8; 10]),
    );
    s.receive(
        now,
        &segment(1000, 80, 521, Some(iss + 1), flags::ACK, &[2u8; 10]),
    );
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    let (r, _) = parse_out(sink.frames.last().unwrap());
    assert_eq!(r.options.sack_count, 2);
    assert_eq!(r.options.sack_blocks[0], (521, 531));
    assert_eq!(r.options.sack_blocks[1], (601, 611));
}

#[test]
fn refused_segments_still_deliver_a_new_ack() {
    let mut s = Stack::new(config(1));
    let l = s.tcp_listen(80, 4).unwrap();
    let now = Instant::from_millis(5);
    s.receive(now, &segment(1000, 80, 500, None, flags::SYN, &[]));
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    let iss = parse_out(&sink.frames[0]).0.seq.0;
    s.receive(now, &segment(1000, 80, 501, Some(iss + 1), flags::ACK, &[]));
    let c = s.tcp_accept(l).unwrap();
    let room = s.tcp_send_capacity(c).unwrap();
    assert_eq!(s.tcp_send(c, b"hello"), Ok(5));
    s.transmit(now, &mut VecSink::new());
    assert_eq!(s.tcp_send_capacity(c), Ok(room - 5));

    // A zero-window probe as Linux sends it: one below RCV.NXT, no data. Refused (and
    // answered), but its ACK of 3 bytes frees them.
    s.receive(now, &segment(1000, 80, 500, Some(iss + 4), flags::ACK, &[]));
    assert_eq!(s.tcp_send_capacity(c), Ok(room - 2));
    assert_eq!(s.stats().tcp_acks_on_refused_segments, 1);
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    assert!(
        sink.frames.iter().any(|f| is_pure_ack(f)),
        "a refused segment is answered"
    );

    // Data far past the window's right edge: the data is dropped, the ACK taken.
    let far = 501u32.wrapping_add(0x4000_0000);
    s.receive(
        now,
        &segment(1000, 80, far, Some(iss + 6), flags::ACK, b"x"),
    );
    assert_eq!(s.tcp_send_capacity(c), Ok(room));
    assert_eq!(s.tcp_recv_available(c), Ok(0));
    assert_eq!(s.stats().tcp_acks_on_refused_segments, 2);

    // An old segment whose ACK is not new changes nothing, and an ACK beyond what we sent is
    // not taken from a refused segment either.
    s.receive(now, &segment(1000, 80, 500, Some(iss + 6), flags::ACK, &[]));
    s.receive(
        now,
        &segment(1000, 80, 500, Some(iss + 99), flags::ACK, &[]),
    );
    assert_eq!(s.stats().tcp_acks_on_refused_segments, 2);
    assert_eq!(s.tcp_state(c), Ok(TcpState::Established));
    assert_eq!(s.tcp_recv_available(c), Ok(0));
}

#[test]
fn a_retransmitted_segment_gives_no_rtt_sample() {
    let mut p = Pair::new();
    let (c, s, _) = p.connect();
    let srtt_before = p.st[0].tcp_info(c).unwrap().srtt_us;
    assert!(
        srtt_before < 1_000,
        "handshake RTT {srtt_before} µs on a 100 µs link"
    );
    // The timed segment is lost; the tail loss probe (at least 10 ms later) repairs it. The ACK
    // cannot tell the copies apart, so it must not become a 10 ms sample.
    send_through_losses(&mut p, c, s, 1);
    p.run(Duration::from_millis(50), |_| false);
    assert_eq!(p.st[0].stats().tcp_loss_probes, 1);
    let info = p.st[0].tcp_info(c).unwrap();
    assert!(
        info.srtt_us < 1_000,
        "smoothed RTT {} µs after a 10 ms recovery: the retransmission was sampled",
        info.srtt_us
    );
    assert_eq!((info.in_flight, info.send_buffered), (0, 0));
}

/// The TCP/UDP checksum field of an untagged IPv4 frame: its offset in the frame, and the
/// transport segment's (source, destination, protocol, length).
fn transport_checksum_field(f: &[u8]) -> Option<(usize, Ipv4Addr, Ipv4Addr, u8, u16)> {
    let ip = Ipv4Packet::new_checked(f.get(14..)?).ok()?;
    let at = 14 + ip.header_len();
    let len = ip.payload().len() as u16;
    match ip.protocol() {
        IpProtocol::Tcp => Some((at + 16, ip.src(), ip.dst(), 6, len)),
        IpProtocol::Udp => Some((at + 6, ip.src(), ip.dst(), 17, len)),
        _ => None,
    }
}

/// Leaves the frame's TCP/UDP checksum as a sender with checksum offload does before the
/// device completes it: the folded pseudo-header sum, not complemented.
fn make_partial(f: &mut [u8]) {
    if let Some((at, src, dst, proto, len)) = transport_checksum_field(f) {
        let partial = checksum::partial_v4(src, dst, proto, len);
        f[at..at + 2].copy_from_slice(&partial.to_be_bytes());
    }
}

/// A checksum field that is neither complete nor partial.
fn corrupt_checksum(f: &mut [u8]) {
    if let Some((at, src, dst, proto, len)) = transport_checksum_field(f) {
        let partial = checksum::partial_v4(src, dst, proto, len);
        let bad = (partial ^ 0x0100).max(1);
        f[at..at + 2].copy_from_slice(&bad.to_be_bytes());
    }
}

/// Every TCP/UDP frame the stack sends carries a complete checksum (we never rely on
/// offload), and its IPv4 header checksum verifies.
fn assert_fully_checksummed(f: &[u8]) {
    if f.len() < 14 + 20 || f[12..14] != [0x08, 0x00] {
        return; // not IPv4 (ARP)
    }
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    Ipv4Repr::parse(&ip).expect("IPv4 header checksum");
    let state = match ip.protocol() {
        IpProtocol::Tcp => TcpPacket::new_checked(ip.payload())
            .unwrap()
            .checksum_state(ip.src(), ip.dst()),
        IpProtocol::Udp => {
            let u = UdpPacket::new_checked(ip.payload()).unwrap();
            assert_ne!(u.checksum(), 0, "UDP sent without a checksum");
            u.checksum_state(ip.src(), ip.dst())
        }
        _ => return,
    };
    assert_eq!(state, checksum::TransportChecksum::Complete);
}

fn accepting_partial(side: usize) -> Config {
    let mut c = config(side);
    c.accept_partial_checksums = true;
    c
}

#[test]
fn partial_tcp_checksums_are_taken_when_allowed_and_what_we_send_is_complete() {
    // A sends with checksum offload as a veth peer does; B is told its device is a veth.
    let mut p = Pair::with(config(0), accepting_partial(1));
    let sent_ok = std::rc::Rc::new(std::cell::Cell::new(0u64));
    let counted = sent_ok.clone();
    p.rewrite = Some(Box::new(move |from, f| {
        if f[12..14] == [0x08, 0x00] {
            assert_fully_checksummed(f);
            counted.set(counted.get() + 1);
        }
        if from == 0 {
            make_partial(f);
        }
    }));
    let (c, s, _) = p.connect();
    transfer(&mut p, 0, c, s, 256 * 1024, Duration::from_secs(60));
    let st = p.st[1].stats();
    assert!(st.tcp_rx_csum_partial > 100, "{st:?}");
    assert_eq!((st.tcp_bad_checksum, st.tcp_bad_checksum_partial), (0, 0));
    assert_eq!(
        p.st[0].stats().tcp_rx_csum_partial,
        0,
        "B sent complete checksums"
    );
    assert!(sent_ok.get() > 100);
}

#[test]
fn partial_tcp_checksums_are_bad_where_the_device_cannot_produce_them() {
    let mut s = Stack::new(config(1));
    s.tcp_listen(80, 4).unwrap();
    let now = Instant::from_millis(5);
    let mut syn = segment(1000, 80, 500, None, flags::SYN, &[]);
    make_partial(&mut syn);
    s.receive(now, &syn);
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    assert!(sink.frames.is_empty(), "a partial SYN must not be answered");
    let st = s.stats();
    assert_eq!(
        (
            st.tcp_bad_checksum,
            st.tcp_bad_checksum_partial,
            st.tcp_rx_csum_partial
        ),
        (1, 1, 0)
    );
    assert_eq!(st.tcp_segments_in, 0);
}

#[test]
fn corrupt_tcp_checksums_are_dropped_whether_or_not_partial_ones_are_taken() {
    for accept in [false, true] {
        let mut cfg = config(1);
        cfg.accept_partial_checksums = accept;
        let mut s = Stack::new(cfg);
        s.tcp_listen(80, 4).unwrap();
        let now = Instant::from_millis(5);
        let mut syn = segment(1000, 80, 500, None, flags::SYN, &[]);
        corrupt_checksum(&mut syn);
        s.receive(now, &syn);
        // A segment with the right checksum but a payload changed after it was computed.
        let mut data = segment(1000, 80, 501, Some(1), flags::ACK, b"payload");
        make_partial(&mut data);
        let last = data.len() - 1;
        data[last] ^= 0xff;
        // Still partial: a partial checksum covers no payload, so it cannot tell.
        s.receive(now, &data);
        let mut sink = VecSink::new();
        s.transmit(now, &mut sink);
        let st = s.stats();
        if accept {
            assert_eq!((st.tcp_bad_checksum, st.tcp_rx_csum_partial), (1, 1));
            // The partial ACK met no connection: answered with a RST, nothing else.
            assert_eq!(sink.frames.len(), 1);
            assert_eq!(st.tcp_rst_sent, 1);
        } else {
            assert_eq!((st.tcp_bad_checksum, st.tcp_bad_checksum_partial), (2, 1));
            assert!(sink.frames.is_empty());
        }
        assert_eq!(st.tcp_syn_cookies_sent + st.tcp_segments_in, accept as u64);
    }
}

#[test]
fn partial_udp_checksums_are_taken_only_when_allowed_and_corrupt_ones_never() {
    for accept in [false, true] {
        let mut a = config(0);
        a.accept_partial_checksums = false;
        let mut b = config(1);
        b.accept_partial_checksums = accept;
        let mut p = Pair::with(a, b);
        let ua = p.st[0].udp_bind(5353).unwrap();
        let ub = p.st[1].udp_bind(53).unwrap();
        let corrupt_next = std::rc::Rc::new(std::cell::Cell::new(false));
        let flag = corrupt_next.clone();
        p.rewrite = Some(Box::new(move |from, f| {
            assert_fully_checksummed(f);
            if from == 0 && transport_checksum_field(f).is_some_and(|t| t.3 == 17) {
                if flag.get() {
                    corrupt_checksum(f);
                } else {
                    make_partial(f);
                }
            }
        }));
        p.st[0].udp_send_to(ua, IP_B, 53, b"partial").unwrap();
        let mut buf = [0u8; 64];
        let mut got = None;
        p.run(Duration::from_secs(5), |p| {
            if let Ok((n, _, _)) = p.st[1].udp_recv_from(ub, &mut buf) {
                got = Some(buf[..n].to_vec());
            }
            got.is_some()
        });
        corrupt_next.set(true);
        p.st[0].udp_send_to(ua, IP_B, 53, b"corrupt").unwrap();
        let mut corrupt_got = false;
        p.run(Duration::from_secs(1), |p| {
            corrupt_got |= p.st[1].udp_recv_from(ub, &mut buf).is_ok();
            corrupt_got
        });
        assert!(!corrupt_got, "a corrupt datagram was delivered");
        let st = p.st[1].stats();
        if accept {
            assert_eq!(got.as_deref(), Some(&b"partial"[..]));
            assert_eq!((st.udp_rx_csum_partial, st.udp_bad_checksum), (1, 1));
            assert_eq!(st.udp_bad_checksum_partial, 0);
        } else {
            assert_eq!(got, None);
            assert_eq!((st.udp_rx_csum_partial, st.udp_bad_checksum), (0, 2));
            assert_eq!(st.udp_bad_checksum_partial, 1);
        }
    }
}

#[test]
fn the_ipv4_header_checksum_is_never_taken_as_partial() {
    let mut cfg = config(1);
    cfg.accept_partial_checksums = true;
    let mut s = Stack::new(cfg);
    s.tcp_listen(80, 4).unwrap();
    let mut syn = segment(1000, 80, 500, None, flags::SYN, &[]);
    make_partial(&mut syn);
    // The IPv4 header checksum replaced by the header's own folded sum (what a "partial"
    // header checksum would look like): still bad.
    syn[24..26].copy_from_slice(&[0, 0]);
    let sum = checksum::fold(checksum::accumulate(0, &syn[14..34]));
    syn[24..26].copy_from_slice(&sum.to_be_bytes());
    s.receive(Instant::from_millis(5), &syn);
    assert_eq!(s.stats().ip_bad_checksum, 1);
    assert_eq!(s.stats().tcp_rx_csum_partial, 0);
}
