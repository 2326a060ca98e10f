//! Fixtures of half-open connections (docs/LB.md, "Half-open connections"): a SYN is
//! remembered in `half_open` alone, the client's proof of the handshake moves it to the
//! established tables, and a SYN flood neither evicts an established connection nor runs the
//! full-NAT local ports out.

use super::*;

const REAL: &str = "198.18.2.10";
const LADDR: &str = "198.18.2.1";

/// A SYN from the `i`-th spoofed source of a flood: 198.18.64.0/18, ports from 1024.
fn flood_syn(lab: &Lab, i: u32) -> Vec<u8> {
    let src = format!("198.18.{}.{}", 64 + (i / 250) % 64, 1 + i % 250);
    let sport = 1024 + (i / 16000) as u16;
    frame(
        lab.in_mac,
        ROUTER_MAC,
        ip(&src),
        ip(VIP4),
        &tcp(sport, 80, SYN),
    )
}

/// A full-NAT connection through its whole handshake (SYN, the real's SYN-ACK, the client's
/// ACK); returns its local port.
fn establish(lab: &Lab, dp: &XdpDataPlane, cport: u16) -> u16 {
    let (v, out) = dp
        .test_run(&lab.client_tcp(CLIENT4, VIP4, cport, SYN), lab.in_idx)
        .unwrap();
    assert_eq!(v, XDP_REDIRECT);
    let lport = sport_of(&out);
    real_syn_ack(lab, dp, REAL, LADDR, lport);
    let (v, out) = dp
        .test_run(&lab.client_tcp(CLIENT4, VIP4, cport, ACK), lab.in_idx)
        .unwrap();
    assert_eq!((v, sport_of(&out)), (XDP_REDIRECT, lport));
    lport
}

/// The established connection still goes both ways with its own local port.
fn still_established(lab: &Lab, dp: &XdpDataPlane, cport: u16, lport: u16) {
    let (v, out) = dp
        .test_run(&lab.client_tcp(CLIENT4, VIP4, cport, ACK | PSH), lab.in_idx)
        .unwrap();
    assert_eq!(
        (v, sport_of(&out)),
        (XDP_REDIRECT, lport),
        "the client's segment still reaches the real from its port"
    );
    let reply = frame(
        lab.out_mac,
        REAL_MACS[0],
        ip(REAL),
        ip(LADDR),
        &tcp(8080, lport, ACK),
    );
    let (v, out) = dp.test_run(&reply, lab.out_idx).unwrap();
    assert_eq!(v, XDP_REDIRECT, "the real's reply is still translated");
    assert_eq!(
        out,
        hopped(&frame(
            ROUTER_MAC,
            lab.in_mac,
            ip(VIP4),
            ip(CLIENT4),
            &tcp(80, cport, ACK)
        ))
    );
}

#[test]
fn a_segment_that_proves_no_handshake_is_forwarded_but_not_promoted() {
    with_lab(
        "hopr",
        cfg(),
        fnat_plan(VIP4, REAL, LADDR, false),
        |lab, dp| {
            let (_, out) = dp
                .test_run(&lab.client_tcp(CLIENT4, VIP4, 40000, SYN), lab.in_idx)
                .unwrap();
            let lport = sport_of(&out);
            assert_eq!(dp.program().half_open_count(), (1, 1));
            // An ACK before the real answered (a spoofer's blind guess): it reaches the real,
            // which resets it, and the connection stays half-open.
            let (v, out) = dp
                .test_run(&lab.client_tcp(CLIENT4, VIP4, 40000, ACK), lab.in_idx)
                .unwrap();
            assert_eq!((v, sport_of(&out)), (XDP_REDIRECT, lport));
            assert_eq!(count(dp, Reason::HalfOpenUnproven), 1);
            assert_eq!(dp.program().half_open_count(), (1, 1));
            assert_eq!((dp.program().rev_count(), dp.program().fwd_count()), (0, 0));
            assert_eq!(dp.program().conn_count(0), 0);
            // The real's SYN-ACK, then the ACK of it: established.
            real_syn_ack(&lab, dp, REAL, LADDR, lport);
            dp.test_run(&lab.client_tcp(CLIENT4, VIP4, 40000, ACK), lab.in_idx)
                .unwrap();
            assert_eq!(dp.program().half_open_count(), (0, 0));
            assert_eq!((dp.program().rev_count(), dp.program().fwd_count()), (1, 1));
            assert_eq!(dp.program().conn_count(0), 1);
            assert_eq!(count(dp, Reason::HalfOpenUnproven), 1);
        },
    );
}

#[test]
fn a_syn_flood_evicts_no_established_connection() {
    // Small tables: 4,096 entries per CPU, and 45,000 SYNs.
    let c = AttachConfig {
        conns_per_cpu: 4096,
        ..cfg()
    };
    with_lab("hoev", c, fnat_plan(VIP4, REAL, LADDR, false), |lab, dp| {
        let lport = establish(&lab, dp, 40000);
        for i in 0..45_000 {
            let (v, _) = dp.test_run(&flood_syn(&lab, i), lab.in_idx).unwrap();
            assert_eq!(v, XDP_REDIRECT, "SYN {i}");
        }
        still_established(&lab, dp, 40000, lport);
        assert_eq!(count(dp, Reason::DropNoPort), 0);
    });
}

#[test]
fn a_syn_flood_takes_half_open_ports_never_an_established_ones() {
    // Tables as large as the port share (32,256 ports per CPU with two CPUs): the flood runs
    // through every port of this CPU's share, and then again.
    let c = AttachConfig {
        conns_per_cpu: 1 << 16,
        ..cfg()
    };
    with_lab("hopt", c, fnat_plan(VIP4, REAL, LADDR, false), |lab, dp| {
        let lport = establish(&lab, dp, 40000);
        let (lo, hi) = dp.program().port_share(0);
        let share = hi - lo;
        let mut ports = std::collections::HashSet::new();
        for i in 0..share + share / 4 {
            let (v, out) = dp.test_run(&flood_syn(&lab, i), lab.in_idx).unwrap();
            assert_eq!(v, XDP_REDIRECT, "SYN {i}: a port was found");
            let p = sport_of(&out);
            assert_ne!(p, lport, "SYN {i} took the established connection's port");
            ports.insert(p);
        }
        assert_eq!(
            ports.len() as u32,
            share - 1,
            "every port but the established one"
        );
        assert_eq!(count(dp, Reason::DropNoPort), 0);
        assert!(count(dp, Reason::HalfOpenReclaimed) > 0);
        still_established(&lab, dp, 40000, lport);
    });
}
