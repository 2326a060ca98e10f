//! Path MTU discovery (docs/TCPIP.md, "Path MTU"): a router between the pair drops what is
//! larger than its next link and answers with "fragmentation needed" or "packet too big";
//! the transfer must shrink its segments and finish, bit-exact.

use super::*;
use std::cell::RefCell;
use std::net::IpAddr;
use std::rc::Rc;

const IP6_A: Ipv6Addr = Ipv6Addr([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
const IP6_B: Ipv6Addr = Ipv6Addr([0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);

/// The ICMP error a router at A's side of the path sends B about B's too-large `frame`.
fn icmp_about(frame: &[u8], mtu: u32) -> Vec<u8> {
    let dgram = &frame[14..];
    let v6 = frame[12..14] == [0x86, 0xdd];
    let (from, to) = if v6 {
        (IpAddr::from(IP6_A.0), IpAddr::from(IP6_B.0))
    } else {
        (IpAddr::from(IP_A.0), IpAddr::from(IP_B.0))
    };
    let l4 = if v6 {
        let quoted = &dgram[..dgram.len().min(1280 - 48)];
        kit::L4::Icmp {
            ty: 2,
            code: 0,
            rest: mtu.to_be_bytes(),
            payload: quoted.to_vec(),
        }
    } else {
        // RFC 1191: the next-hop MTU in the low half of the second word.
        kit::L4::Icmp {
            ty: 3,
            code: 4,
            rest: (mtu & 0xffff).to_be_bytes(),
            payload: dgram[..28].to_vec(),
        }
    };
    let h = kit::IpHeader {
        ident: 7,
        dont_frag: false,
        ..kit::IpHeader::default()
    };
    let p = kit::ip_packet_with(from, to, &l4, &h);
    kit::eth(MAC_B.0, MAC_A.0, v6, &p)
}

/// Sends 300 KB from B to A through a link of `link_mtu` that reports `reported` (what the
/// router puts in its message). Returns B's counters and the largest datagram B sent once it
/// had the first report.
fn through_a_narrow_link(v6: bool, link_mtu: usize, reported: u32) -> (Stats, usize) {
    let mut a = config(0);
    let mut b = config(1);
    if v6 {
        a.ipv6 = Some(IP6_A);
        b.ipv6 = Some(IP6_B);
        a.ipv6_dad = false;
        b.ipv6_dad = false;
    }
    let mut p = Pair::with(a, b);
    let l = p.st[0].tcp_listen(80, 4).unwrap();
    let now = p.now;
    let dst = if v6 {
        IpAddress::V6(IP6_A)
    } else {
        IpAddress::V4(IP_A)
    };
    let c = p.st[1].tcp_connect(now, dst, 80, |_| true).unwrap();
    let mut server = None;
    assert!(p.run(Duration::from_secs(5), |p| {
        server = server.or_else(|| p.st[0].tcp_accept(l).ok());
        server.is_some() && p.st[1].tcp_state(c) == Ok(TcpState::Established)
    }));
    let reports: Rc<RefCell<Vec<Vec<u8>>>> = Rc::default();
    let largest_after = Rc::new(RefCell::new(0usize));
    let told = Rc::new(RefCell::new(false));
    let (r, big, t) = (reports.clone(), largest_after.clone(), told.clone());
    p.filter = Some(Box::new(move |from, f| {
        let len = f.len() - 14;
        if from == 1 && *t.borrow() {
            let mut b = big.borrow_mut();
            *b = (*b).max(len);
        }
        if from == 1 && len > link_mtu {
            r.borrow_mut().push(icmp_about(f, reported));
            return false;
        }
        true
    }));
    // The router's messages reach B as the transfer runs.
    let pending = reports.clone();
    p.rewrite = None;
    let mut delivered = 0;
    let inject = move |p: &mut Pair| {
        let msgs: Vec<Vec<u8>> = pending.borrow()[delivered..].to_vec();
        delivered += msgs.len();
        let now = p.now;
        for m in msgs {
            p.st[1].receive(now, &m);
            *told.borrow_mut() = true;
        }
    };
    transfer_with(&mut p, 1, c, server.unwrap(), 300_000, inject);
    let largest = *largest_after.borrow();
    (p.st[1].stats().clone(), largest)
}

#[test]
fn fragmentation_needed_shrinks_the_segments_and_the_transfer_finishes() {
    let (st, largest) = through_a_narrow_link(false, 1200, 1200);
    assert!(st.tcp_pmtu_reductions >= 1);
    assert!(largest <= 1200, "sent {largest} bytes after the report");
}

#[test]
fn a_router_that_reports_no_mtu_gets_linuxs_minimum() {
    // An old router's MTU field of 0 (RFC 1191 5) is taken as 552 (ip_rt_min_pmtu).
    let (st, largest) = through_a_narrow_link(false, 1000, 0);
    assert!(st.tcp_pmtu_reductions >= 1);
    assert!(largest <= 552, "sent {largest} bytes after the report");
}

#[test]
fn packet_too_big_shrinks_ipv6_segments_to_the_minimum_mtu() {
    let (st, largest) = through_a_narrow_link(true, 1280, 1280);
    assert!(st.tcp_pmtu_reductions >= 1);
    assert!(largest <= 1280, "sent {largest} bytes after the report");
}

#[test]
fn a_report_about_what_is_not_in_flight_is_ignored() {
    let mut s = Stack::new(config(1));
    let now = Instant::from_millis(1000);
    let (c, iss) = accept_with_sack(&mut s, now);
    s.tcp_send(c, &[1u8; 1000]).unwrap();
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    let seg = sink.frames[0].clone();
    // The same segment with a sequence number far ahead of what was sent.
    let mut forged = seg.clone();
    let tcp_at = 14 + 20;
    forged[tcp_at + 4..tcp_at + 8].copy_from_slice(&(iss + 100_000).to_be_bytes());
    s.receive(now, &icmp_about(&forged, 600));
    assert_eq!(s.stats().icmp_out_of_window, 1);
    assert_eq!(s.stats().tcp_pmtu_reductions, 0);
    // About a connection that does not exist.
    forged[tcp_at..tcp_at + 2].copy_from_slice(&4444u16.to_be_bytes());
    s.receive(now, &icmp_about(&forged, 600));
    assert_eq!(s.stats().icmp_no_connection, 1);
    // A larger MTU than the connection's changes nothing.
    s.receive(now, &icmp_about(&seg, 9000));
    assert_eq!(s.stats().tcp_pmtu_reductions, 0);
    // The real one: the segment goes again at once, in the smaller size.
    s.receive(now, &icmp_about(&seg, 600));
    assert_eq!(s.stats().tcp_pmtu_reductions, 1);
    let mut sink = VecSink::new();
    s.transmit(now, &mut sink);
    let (first, payload) = parse_out(&sink.frames[0]);
    assert_eq!(first.seq.0, iss + 1);
    assert_eq!(payload.len(), 600 - 40);
}
