//! Neighbours that move (docs/TCPIP.md): B's address goes to another MAC while A has a
//! connection to it, as when a router's address fails over to another box.

use super::*;

/// The MAC that B's address moves to.
pub(super) const MAC_NEW: MacAddr = MacAddr([2, 0, 0, 0, 0, 0x42]);

/// From now on B answers from `MAC_NEW`, and what A sends to B's old MAC is lost. B's stack
/// keeps its own MAC: frames to the new one are handed to it, and its frames, ARP included,
/// leave with the new one.
pub(super) fn move_b(p: &mut Pair) {
    p.filter = Some(Box::new(|from, f| !(from == 0 && f[0..6] == MAC_B.0)));
    p.rewrite = Some(Box::new(|from, f| {
        let replace = |f: &mut [u8], at: usize, old: MacAddr, new: MacAddr| {
            if f[at..at + 6] == old.0 {
                f[at..at + 6].copy_from_slice(&new.0);
            }
        };
        let arp = f[12..14] == kit::ETH_P_ARP.to_be_bytes();
        if from == 0 {
            replace(f, 0, MAC_NEW, MAC_B);
            if arp {
                replace(f, 32, MAC_NEW, MAC_B);
            }
        } else {
            replace(f, 6, MAC_B, MAC_NEW);
            if arp {
                replace(f, 22, MAC_B, MAC_NEW);
            }
        }
    }));
}

#[test]
fn a_gratuitous_arp_moves_the_connections_at_once() {
    let mut p = Pair::new();
    let (c, s, _) = p.connect();
    move_b(&mut p);
    let now = p.now;
    // B's gratuitous ARP: a request for its own address from its new MAC, as keepalived sends
    // after a failover.
    let garp = arp_frame_from(ArpOperation::Request, MAC_NEW, IP_B, IP_B);
    p.st[0].receive(now, &garp);
    assert_eq!(p.st[0].stats().neighbour_moved, 1);
    transfer_within(&mut p, 0, c, s, 200_000, Duration::from_secs(5), |_| {});
    let st = p.st[0].stats();
    assert_eq!(
        (
            st.tcp_rto_expired,
            st.tcp_retransmits,
            st.neighbour_rechecks
        ),
        (0, 0, 0),
        "nothing sent to the old MAC"
    );
}

#[test]
fn a_neighbour_that_moves_unannounced_is_asked_for_after_three_timeouts() {
    let mut p = Pair::new();
    let (c, s, _) = p.connect();
    move_b(&mut p);
    let requests = p.st[0].stats().arp_requests_sent;
    transfer_within(&mut p, 0, c, s, 50_000, Duration::from_secs(60), |_| {});
    let st = p.st[0].stats();
    assert_eq!(st.tcp_timeouts, 0);
    assert_eq!(st.neighbour_moved, 1);
    // Every check was answered at its first request (a later timeout may check again: a
    // second after the last answer, a neighbour may be checked once more).
    assert!(st.neighbour_rechecks >= 1);
    assert_eq!(st.arp_requests_sent, requests + st.neighbour_rechecks);
    // Three timeouts went unanswered before the first check; at the latest the fourth's
    // retransmission reached B.
    assert!(
        (3..=4).contains(&st.tcp_rto_expired),
        "{} timeouts",
        st.tcp_rto_expired
    );
}

#[test]
fn a_neighbour_that_did_not_move_is_checked_without_being_dropped() {
    // B is gone: every frame A sends is lost. The connection's timeouts past the third ask
    // for B's MAC again, once a resolution is over and at most once a second, and the
    // retransmissions still go to B's MAC meanwhile.
    let mut p = Pair::new();
    let (c, _s, _) = p.connect();
    let seen = std::rc::Rc::new(std::cell::RefCell::new((0u64, Vec::new())));
    let log = seen.clone();
    p.filter = Some(Box::new(move |from, f| {
        if from == 0 {
            let mut l = log.borrow_mut();
            if f[12..14] == kit::ETH_P_ARP.to_be_bytes() {
                l.0 += 1;
            } else {
                l.1.push(MacAddr([f[0], f[1], f[2], f[3], f[4], f[5]]));
            }
        }
        from != 0
    }));
    p.st[0].tcp_send(c, b"into the void").unwrap();
    p.run(Duration::from_secs(40), |_| false);
    let st = p.st[0].stats();
    assert!(st.tcp_rto_expired >= 5, "{} timeouts", st.tcp_rto_expired);
    assert!(
        (1..=st.tcp_rto_expired - 2).contains(&st.neighbour_rechecks),
        "{} checks for {} timeouts",
        st.neighbour_rechecks,
        st.tcp_rto_expired
    );
    assert_eq!(st.neighbour_moved, 0);
    let (arp, macs) = &*seen.borrow();
    // Each check is a request and its retries: the resolution's MAX_TRIES.
    assert!(*arp >= st.neighbour_rechecks && *arp <= 3 * st.neighbour_rechecks);
    assert!(
        !macs.is_empty() && macs.iter().all(|&m| m == MAC_B),
        "{macs:?}"
    );
}

#[test]
fn an_epoch_that_wraps_leaves_no_connection_with_an_old_mac() {
    let mut p = Pair::new();
    let (c, _, _) = p.connect();
    let idx = c.index() as u32;
    assert_eq!(p.st[0].tcp.current_mac(idx), Some(MAC_B));
    // 65,535 moves bring the epoch back to the one the connection took its MAC at.
    for _ in 0..u16::MAX {
        p.st[0].tcp.neighbour_moved();
    }
    assert_eq!(p.st[0].tcp.current_mac(idx), None);
}
