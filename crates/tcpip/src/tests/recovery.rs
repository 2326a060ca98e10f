//! Loss recovery: RTO, tail loss probes, SACK, ACKs on refused segments, RTT sampling.

use super::*;

per_cc! {
    fn rto_retransmits_lost_segment(cc) {
        let mut p = Pair::new_cc(cc);
        let (c, s, _) = p.connect();
        // Drop the data segment and the tail loss probe: a lone segment has no dup ACKs, so
        // once the probe is spent the RTO fires.
        send_through_losses(&mut p, c, s, 2);
        assert_eq!(p.st[0].stats().tcp_loss_probes, 1);
        assert_eq!(p.st[0].stats().tcp_rto_expired, 1);
    }
}

per_cc! {
    fn tail_loss_probe_repairs_a_lone_lost_segment_before_the_rto(cc) {
        let mut p = Pair::new_cc(cc);
        let (c, s, _) = p.connect();
        send_through_losses(&mut p, c, s, 1);
        assert_eq!(p.st[0].stats().tcp_loss_probes, 1);
        assert_eq!(p.st[0].stats().tcp_rto_expired, 0);
    }
}

/// A connection accepted on port 80 from a peer (port 1000, ISN 500, MSS 1460, SACK) whose
/// handshake ACK came `rtt` after our SYN-ACK: that is its smoothed RTT, half of it the RTT
/// variance. Returns it, our ISS and when it was established.
fn accept_after(s: &mut Stack, rtt: Duration) -> (ConnId, u32, Instant) {
    let l = s.tcp_listen(80, 4).unwrap();
    let t0 = Instant::from_millis(5);
    let syn_opts = TcpOptions {
        mss: Some(1460),
        sack_permitted: true,
        ..Default::default()
    };
    s.receive(t0, &peer_segment(500, None, flags::SYN, 65535, syn_opts));
    let mut sink = VecSink::new();
    s.transmit(t0, &mut sink);
    let iss = parse_out(&sink.frames[0]).0.seq.0;
    let t = t0.add(rtt);
    s.receive(t, &segment(1000, 80, 501, Some(iss + 1), flags::ACK, &[]));
    let c = s.tcp_accept(l).unwrap();
    assert_eq!(s.tcp_info(c).unwrap().srtt_us as u128, rtt.as_micros());
    (c, iss, t)
}

/// The segments (SEQ, payload length) the stack sends at `at`.
fn sent_at(s: &mut Stack, at: Instant) -> Vec<(u32, usize)> {
    let mut sink = VecSink::new();
    s.transmit(at, &mut sink);
    sink.frames
        .iter()
        .map(|f| {
            let (r, data) = parse_out(f);
            (r.seq.0, data.len())
        })
        .collect()
}

/// One segment unacknowledged: the probe waits two smoothed RTTs plus the peer's delayed-ACK
/// allowance (the minimum RTO, 200 ms), as Linux's tcp_schedule_loss_probe and RFC 8985 7.2.
#[test]
fn a_lone_segment_is_probed_after_two_rtts_and_the_delayed_ack_allowance() {
    let mut s = Stack::new(config(1));
    // SRTT 300 ms, RTTVAR 150 ms: the RTO (900 ms) comes after the probe (800 ms).
    let (c, iss, t) = accept_after(&mut s, Duration::from_millis(300));
    s.tcp_send(c, b"request").unwrap();
    assert_eq!(sent_at(&mut s, t), vec![(iss + 1, 7)]);
    assert_eq!(sent_at(&mut s, t.add_micros(799_999)), vec![]);
    assert_eq!(sent_at(&mut s, t.add_micros(800_000)), vec![(iss + 1, 7)]);
    assert_eq!(
        (s.stats().tcp_loss_probes, s.stats().tcp_rto_expired),
        (1, 0)
    );
}

/// A FIN alone is one segment too.
#[test]
fn a_lone_fin_is_probed_after_two_rtts_and_the_delayed_ack_allowance() {
    let mut s = Stack::new(config(1));
    let (c, iss, t) = accept_after(&mut s, Duration::from_millis(300));
    s.tcp_shutdown(c).unwrap();
    assert_eq!(sent_at(&mut s, t), vec![(iss + 1, 0)]);
    assert_eq!(sent_at(&mut s, t.add_micros(799_999)), vec![]);
    assert_eq!(sent_at(&mut s, t.add_micros(800_000)), vec![(iss + 1, 0)]);
    assert_eq!(s.stats().tcp_loss_probes, 1);
}

/// Two segments unacknowledged: two smoothed RTTs and 2 ms (Linux's TCP_TIMEOUT_MIN); the
/// probe resends the first.
#[test]
fn several_segments_are_probed_after_two_rtts_and_2_ms() {
    let mut s = Stack::new(config(1));
    let (c, iss, t) = accept_after(&mut s, Duration::from_millis(300));
    s.tcp_send(c, &[7u8; 2 * 1460]).unwrap();
    assert_eq!(
        sent_at(&mut s, t),
        vec![(iss + 1, 1460), (iss + 1 + 1460, 1460)]
    );
    assert_eq!(sent_at(&mut s, t.add_micros(601_999)), vec![]);
    assert_eq!(
        sent_at(&mut s, t.add_micros(602_000)),
        vec![(iss + 1, 1460)]
    );
    assert_eq!(s.stats().tcp_loss_probes, 1);
}

/// The probe never waits past the RTO: new data restarts its timer, but a probe due with the
/// RTO goes in the RTO's place, and the RTO restarts from it (Linux arms one or the other).
#[test]
fn the_probe_comes_no_later_than_the_rto() {
    let mut s = Stack::new(config(1));
    let (c, iss, t) = accept_after(&mut s, Duration::from_millis(300));
    s.tcp_send(c, b"request").unwrap();
    assert_eq!(sent_at(&mut s, t), vec![(iss + 1, 7)]);
    // The RTO is due at t + 900 ms; a second segment at t + 500 ms would be probed 602 ms
    // later.
    s.tcp_send(c, b"another").unwrap();
    assert_eq!(sent_at(&mut s, t.add_micros(500_000)), vec![(iss + 8, 7)]);
    assert_eq!(sent_at(&mut s, t.add_micros(899_999)), vec![]);
    assert_eq!(sent_at(&mut s, t.add_micros(900_000)), vec![(iss + 1, 14)]);
    assert_eq!(
        (s.stats().tcp_loss_probes, s.stats().tcp_rto_expired),
        (1, 0)
    );
    // One probe per stall: then the RTO, a whole RTO after the probe.
    assert_eq!(sent_at(&mut s, t.add_micros(1_799_999)), vec![]);
    assert_eq!(
        sent_at(&mut s, t.add_micros(1_800_000)),
        vec![(iss + 1, 14)]
    );
    assert_eq!(
        (s.stats().tcp_loss_probes, s.stats().tcp_rto_expired),
        (1, 1)
    );
}

/// A probe resends only what was sent: bytes written since go as new data. Past SND.MAX the
/// peer's ACK would be for data never sent, and refused, and both ends stalled.
#[test]
fn a_probe_resends_only_what_was_sent() {
    let mut s = Stack::new(config(1));
    let (c, iss, t) = accept_after(&mut s, Duration::from_millis(300));
    s.tcp_send(c, b"request").unwrap();
    assert_eq!(sent_at(&mut s, t), vec![(iss + 1, 7)]);
    let at = t.add_micros(800_000);
    s.tcp_send(c, b"more bytes").unwrap();
    assert_eq!(sent_at(&mut s, at), vec![(iss + 1, 7), (iss + 8, 10)]);
    assert_eq!(s.stats().tcp_loss_probes, 1);
}

/// Three duplicate ACKs for a lone segment draw no fast retransmit: one segment cannot
/// cause them (Linux counts at most packets_out - 1).
#[test]
fn a_lone_segment_draws_no_fast_retransmit() {
    let mut s = Stack::new(config(1));
    let (c, iss, t) = accept_after(&mut s, Duration::from_millis(300));
    s.tcp_send(c, b"response").unwrap();
    assert_eq!(sent_at(&mut s, t), vec![(iss + 1, 8)]);
    let dup = peer_segment(501, Some(iss + 1), flags::ACK, 65535, TcpOptions::default());
    for _ in 0..3 {
        s.receive(t, &dup);
    }
    assert_eq!(sent_at(&mut s, t), vec![]);
    assert_eq!(s.stats().tcp_fast_retransmits, 0);
}

per_cc! {
    /// Linux's receiver moves its window between duplicate ACKs while its application reads;
    /// SACK blocks above SND.UNA still mark them as duplicates (RFC 6675), so fast retransmit
    /// fires instead of waiting for the RTO.
    fn sack_marks_duplicate_acks_despite_window_changes(cc) {
        let mut s = Stack::new(config_cc(1, cc));
        let _l = s.tcp_listen(80, 4).unwrap();
        let now = Instant::from_millis(5);
        let syn_opts = TcpOptions {
            mss: Some(1460),
            sack_permitted: true,
            ..Default::default()
        };
        s.receive(now, &peer_segment(100, None, flags::SYN, 65535, syn_opts));
        let mut sink = VecSink::new();
        s.transmit(now, &mut sink);
        let (synack, _) = parse_out(&sink.frames[0]);
        assert!(synack.options.sack_permitted);
        let iss = synack.seq.0;
        s.receive(
            now,
            &peer_segment(101, Some(iss + 1), flags::ACK, 65535, TcpOptions::default()),
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
            s.receive(
                now,
                &peer_segment(101, Some(iss + 1), flags::ACK, window, o),
            );
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
}

per_cc! {
    /// A recovery that sent no new data (the application had none) ends with the window at
    /// ssthresh, as Linux's tcp_end_cwnd_reduction: RFC 6582's "flight plus one segment" left
    /// one segment here, and each lone segment then waited out the peer's delayed ACK (the
    /// loss benchmark ran at a fifth of its speed).
    fn recovery_ends_with_the_window_at_ssthresh(cc) {
        let mut s = Stack::new(config_cc(1, cc));
        let (c, iss, now) = accept_after(&mut s, Duration::from_millis(1));
        s.tcp_send(c, &[7u8; 8 * 1460]).unwrap();
        assert_eq!(sent_at(&mut s, now).len(), 8);
        for i in 0..3u32 {
            let mut o = TcpOptions::default();
            o.sack_blocks[0] = (iss + 1 + 1460, iss + 1 + 1460 * (2 + i));
            o.sack_count = 1;
            s.receive(now, &peer_segment(501, Some(iss + 1), flags::ACK, 65535, o));
        }
        assert_eq!(sent_at(&mut s, now), vec![(iss + 1, 1460)], "fast retransmit");
        let ssthresh = s.tcp_info(c).unwrap().ssthresh;
        let all = iss + 1 + 8 * 1460;
        s.receive(now, &peer_segment(501, Some(all), flags::ACK, 65535, TcpOptions::default()));
        let info = s.tcp_info(c).unwrap();
        assert_eq!((info.in_flight, info.cwnd), (0, ssthresh));
        assert!(ssthresh >= 4 * 1460, "{info:?}");
    }
}

per_cc! {
    /// Three segments lost from one window: the SACK scoreboard retransmits every hole within
    /// the same recovery episode, without waiting for an RTO per hole.
    fn sack_recovers_several_holes_in_one_window(cc) {
        let mut p = Pair::new_cc(cc);
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
}

#[test]
fn sack_blocks_report_the_latest_segment_first() {
    let mut s = Stack::new(config(1));
    let now = Instant::from_millis(5);
    let (_c, iss) = accept_with_sack(&mut s, now);
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

/// RFC 2883: a duplicate (a retransmission of data we hold, such as a tail loss probe after a
/// stall) is reported once, as the first SACK block of the next ACK, so the sender can undo
/// its congestion response. Whole, partial and out-of-order duplicates.
#[test]
fn duplicates_are_reported_once_as_a_dsack_block() {
    let mut s = Stack::new(config(1));
    let now = Instant::from_millis(5);
    let (_c, iss) = accept_with_sack(&mut s, now);
    let ack = Some(iss + 1);
    // The SACK blocks of the ACK that answers `len` bytes at `seq` (None: no ACK yet).
    let answer = |s: &mut Stack, seq: u32, len: usize| {
        s.receive(
            now,
            &segment(1000, 80, seq, ack, flags::ACK, &vec![3u8; len]),
        );
        let mut sink = VecSink::new();
        s.transmit(now, &mut sink);
        let (r, _) = parse_out(sink.frames.last()?);
        Some(r.options.sack_blocks[..r.options.sack_count as usize].to_vec())
    };
    // In order: 501..521; the first is ACKed with a delay, the second at once.
    assert_eq!(answer(&mut s, 501, 10), None);
    assert_eq!(answer(&mut s, 511, 10), Some(vec![]));
    // The same bytes again.
    assert_eq!(answer(&mut s, 511, 10), Some(vec![(511, 521)]));
    // Half old, half new: only the old half is a duplicate.
    assert_eq!(answer(&mut s, 516, 10), Some(vec![(516, 521)]));
    assert_eq!(s.stats().tcp_dsacks_sent, 2);
    // Out of order, then again: D-SACK first, then the block that holds it.
    assert_eq!(answer(&mut s, 601, 10), Some(vec![(601, 611)]));
    assert_eq!(answer(&mut s, 601, 10), Some(vec![(601, 611), (601, 611)]));
    // Reported once: the next ACK carries only the out-of-order blocks.
    assert_eq!(answer(&mut s, 621, 10), Some(vec![(621, 631), (601, 611)]));
    assert_eq!(s.stats().tcp_dsacks_sent, 3);
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

per_cc! {
    fn a_retransmitted_segment_gives_no_rtt_sample(cc) {
        let mut p = Pair::new_cc(cc);
        let (c, s, _) = p.connect();
        let srtt_before = p.st[0].tcp_info(c).unwrap().srtt_us;
        assert!(
            srtt_before < 1_000,
            "handshake RTT {srtt_before} µs on a 100 µs link"
        );
        // The timed segment is lost; the tail loss probe (in the RTO's place, 200 ms later)
        // repairs it. The ACK cannot tell the copies apart, so it must not become a sample.
        send_through_losses(&mut p, c, s, 1);
        p.run(Duration::from_millis(50), |_| false);
        assert_eq!(p.st[0].stats().tcp_loss_probes, 1);
        let info = p.st[0].tcp_info(c).unwrap();
        assert!(
            info.srtt_us < 1_000,
            "smoothed RTT {} µs after a 200 ms recovery: the retransmission was sampled",
            info.srtt_us
        );
        assert_eq!((info.in_flight, info.send_buffered), (0, 0));
    }
}

/// What the stack answers to a segment from the peer of `accept_with_sack`: the ACK field
/// and SACK blocks of its last frame (None: nothing sent yet).
fn answer_to(s: &mut Stack, now: Instant, frame: &[u8]) -> Option<(u32, Vec<(u32, u32)>)> {
    s.receive(now, frame);
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    let (r, _) = parse_out(sink.frames.last()?);
    let blocks = r.options.sack_blocks[..r.options.sack_count as usize].to_vec();
    Some((r.ack?.0, blocks))
}

/// A FIN beyond a gap is held as Linux's tcp_data_queue_ofo holds it: the duplicate ACK
/// SACKs its one sequence number, and the FIN is taken, once, when the gap fills.
#[test]
fn a_fin_beyond_a_gap_is_sacked_and_taken_when_the_gap_fills() {
    let mut s = Stack::new(config(1));
    let now = Instant::from_millis(5);
    let (c, iss) = accept_with_sack(&mut s, now);
    let ack = Some(iss + 1);
    let fin = segment(1000, 80, 511, ack, flags::FIN | flags::ACK, &[]);
    assert_eq!(answer_to(&mut s, now, &fin), Some((501, vec![(511, 512)])));
    assert_eq!(s.tcp_state(c), Ok(TcpState::Established));
    // Again: a duplicate, reported first.
    assert_eq!(
        answer_to(&mut s, now, &fin),
        Some((501, vec![(511, 512), (511, 512)]))
    );
    // The gap fills: data and FIN acknowledged at once, the stream ends.
    let gap = segment(1000, 80, 501, ack, flags::ACK, &[4u8; 10]);
    assert_eq!(answer_to(&mut s, now, &gap), Some((512, vec![])));
    assert_eq!(s.tcp_state(c), Ok(TcpState::CloseWait));
    let mut buf = [0u8; 64];
    assert_eq!(s.tcp_recv(c, &mut buf), Ok(10));
    assert_eq!(s.tcp_recv(c, &mut buf), Ok(0));
    // The FIN again is an old one: re-acknowledged, nothing moves.
    assert_eq!(answer_to(&mut s, now, &fin), Some((512, vec![])));
    assert_eq!(s.tcp_state(c), Ok(TcpState::CloseWait));
}

/// Data and FIN beyond a gap: one SACK block covers both.
#[test]
fn data_and_fin_beyond_a_gap_are_sacked_together() {
    let mut s = Stack::new(config(1));
    let now = Instant::from_millis(5);
    let (c, iss) = accept_with_sack(&mut s, now);
    let ack = Some(iss + 1);
    let tail = segment(1000, 80, 511, ack, flags::FIN | flags::ACK, &[5u8; 10]);
    assert_eq!(answer_to(&mut s, now, &tail), Some((501, vec![(511, 522)])));
    let gap = segment(1000, 80, 501, ack, flags::ACK, &[4u8; 10]);
    assert_eq!(answer_to(&mut s, now, &gap), Some((522, vec![])));
    assert_eq!(s.tcp_state(c), Ok(TcpState::CloseWait));
    let mut buf = [0u8; 64];
    assert_eq!(s.tcp_recv(c, &mut buf), Ok(20));
    assert_eq!((&buf[..10], &buf[10..20]), (&[4u8; 10][..], &[5u8; 10][..]));
    assert_eq!(s.tcp_recv(c, &mut buf), Ok(0));
}

/// In FIN_WAIT_2 the held FIN, once in order, ends in TIME_WAIT.
#[test]
fn a_held_fin_closes_fin_wait_2_when_the_gap_fills() {
    let mut s = Stack::new(config(1));
    let now = Instant::from_millis(5);
    let (c, iss) = accept_with_sack(&mut s, now);
    s.tcp_shutdown(c).unwrap();
    s.transmit(now, &mut VecSink::new());
    let ack = Some(iss + 2);
    s.receive(now, &segment(1000, 80, 501, ack, flags::ACK, &[]));
    assert_eq!(s.tcp_state(c), Ok(TcpState::FinWait2));
    let fin = segment(1000, 80, 511, ack, flags::FIN | flags::ACK, &[]);
    assert_eq!(answer_to(&mut s, now, &fin), Some((501, vec![(511, 512)])));
    let gap = segment(1000, 80, 501, ack, flags::ACK, &[4u8; 10]);
    assert_eq!(answer_to(&mut s, now, &gap), Some((512, vec![])));
    assert_eq!(s.tcp_state(c), Ok(TcpState::TimeWait));
}
