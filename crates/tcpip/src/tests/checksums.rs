//! Checksums: partial (offload) checksums taken only where allowed; what we send is complete.

use super::*;

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

/// `Stats`'s one line sums the checksum and reassembly reasons as `serve`'s exit summary
/// has always printed them.
#[test]
fn stats_display_is_one_line_with_the_summed_reasons() {
    let s = Stats {
        rx_frames: 10,
        tx_frames: 9,
        tcp_bad_checksum: 1,
        udp_bad_checksum: 2,
        ip_bad_checksum: 3,
        tcp_rx_csum_partial: 4,
        udp_rx_csum_partial: 1,
        ip_frag_timeout: 1,
        ip_fragments_dropped: 1,
        tcp_syn_cookies_sent: 7,
        ..Stats::default()
    };
    let line = s.to_string();
    assert!(
        line.starts_with("rx 10 tx 9 frames; tcp segments in 0 out 0,"),
        "{line}"
    );
    assert!(
        line.contains("bad checksums 6 (partial 0), partial checksums taken 5,"),
        "{line}"
    );
    assert!(
        line.contains("reassembled 0 (failures 2), syn cookies sent 7 (accepted 0)"),
        "{line}"
    );
    assert!(!line.contains('\n'));
}
