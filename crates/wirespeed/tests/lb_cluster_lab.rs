//! Load-balancer nodes behind BGP and ECMP (docs/LB.md, "A cluster lab"): `wirespeed lab up
//! lb-cluster` builds a router running Debian's FRR, three lb nodes each running `lb run` and
//! ExaBGP on two arms, four reals and two clients. The test serves one VIP per mode (DR,
//! tunnel, full-NAT, each `mh`), holds 600 connections per mode, and faults one node at a time:
//! a node added, SIGTERM with its drain, SIGKILL of its daemon (behind the router's
//! hash-threshold group, then behind a resilient one), SIGKILL of its speaker, its link to the
//! reals down, and a silent node. For each it splits the held connections by what ECMP did to them (on the
//! faulted node, moved between the others, untouched) by asking the router's kernel
//! (`ip route get` with the 5-tuple), and reports which kept their real and how long the
//! longest waited for an answer.
//!
//! Run: flock /tmp/ws-priv.lock cargo test --profile ci -p wirespeed --test lb_cluster_lab --
//! --test-threads=1 --nocapture (root; the exabgp, frr and redis-server packages).

mod lb_cluster;
#[allow(dead_code)]
mod lb_common;

use std::net::IpAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use lb_cluster::ecmp::{moved_without, Resilient};
use lb_cluster::held::{by_real, report, run_fault, Split};
use lb_cluster::{
    configure_node, digests, laddr, node_addr, ns, prepare_reals, rip, Cluster, Mode, DRAIN,
    HOLD_DOWN_S, MODES, NODES, PORT,
};
use lb_common::{bin, ok, output, wait_for};
use wirespeed_sys::signal::Signal;

/// At least 99.9% of a mode's connections kept their real and answered.
fn assert_kept(fault: &str, splits: &[Split]) {
    let kept_modes = MODES.iter().zip(splits).filter(|(m, _)| m.survives_moves());
    let (mut total, mut lost) = (0, 0);
    for (_, s) in kept_modes {
        total += s.on_node + s.moved + s.untouched;
        lost += s.lost_on_node + s.lost_moved + s.lost_untouched;
    }
    assert!(
        lost * 1000 <= total,
        "{fault}: DR and tunnel lost {lost} of {total} connections ({splits:?})"
    );
}

fn stop(pid: u32, signal: Signal) {
    let _ = wirespeed_sys::process::kill(pid, signal);
}

#[test]
fn a_cluster_keeps_dr_and_tunnel_connections_through_node_faults() {
    let started = Instant::now();
    // 1,800 held connections need more descriptors than the usual soft limit of 1,024.
    wirespeed_sys::process::raise_open_files(8192).expect("raise the open-files limit");
    let mut c = Cluster::up();
    prepare_reals(&mut c);
    for n in 0..NODES {
        configure_node(&c, n);
    }
    // The same reals added in three orders give the same tables on every node.
    let d0 = digests(&c, 0);
    assert_eq!(d0.len(), MODES.len());
    for n in 1..NODES {
        assert_eq!(digests(&c, n), d0, "lb{n}'s tables differ from lb0's");
    }
    let peer = output(Command::new(bin()).args([
        "lb",
        "doctor",
        "--socket",
        &c.socket(0),
        "--peer",
        &c.socket(1),
    ]));
    assert!(
        peer.status.success(),
        "doctor --peer: {}",
        String::from_utf8_lossy(&peer.stdout)
    );
    // A weight that differs is named.
    let vip = format!("{}:{PORT}", Mode::Dr.vip());
    let real = format!("{}:{PORT}", rip(0));
    c.lb(2, &["-e", "-t", &vip, "-r", &real, "-g", "-w", "2"]);
    let differ = output(Command::new(bin()).args([
        "lb",
        "doctor",
        "--socket",
        &c.socket(0),
        "--peer",
        &c.socket(2),
    ]));
    let text = String::from_utf8_lossy(&differ.stdout);
    assert!(
        !differ.status.success() && text.contains(&real) && text.contains("weight"),
        "doctor --peer with a weight that differs: {text}"
    );
    c.lb(2, &["-e", "-t", &vip, "-r", &real, "-g", "-w", "1"]);
    // Each node's full-NAT local address is announced by that node alone.
    for n in 0..NODES {
        let routed = wait_for(Duration::from_secs(10), || {
            (c.paths(laddr(n)) == [IpAddr::from(node_addr(n))]).then_some(())
        });
        assert!(
            routed.is_some(),
            "lb{n}'s local address routes to {:?}",
            c.paths(laddr(n))
        );
    }

    // Every node as its doctor sees it: its BGP session up, blackhole routes, forwarding and
    // neighbours in order; what it names is only what this lab chose: the tunnel's 20 bytes
    // (the reals advertise an MSS that fits) and the full-NAT service, whose moved connections
    // are lost.
    let fnat = format!(
        "TCP {} (mh): connections that ECMP moves",
        Mode::FullNat.service()
    );
    for n in 0..NODES {
        let lb_ns = ns(&format!("lb{n}"));
        let doc = output(
            Command::new("ip")
                .args(["netns", "exec", &lb_ns, bin(), "lb", "doctor"])
                .args(["--socket", &c.socket(n)]),
        );
        let text = String::from_utf8_lossy(&doc.stdout);
        let unexpected: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with("tunnel to ") && !l.starts_with(&fnat))
            .collect();
        assert!(unexpected.is_empty(), "doctor on lb{n}: {text}");
    }

    // Node added: lb2 drained while the connections open, then announced again.
    c.lb(2, &["drain"]);
    c.until_paths(&[0, 1], "lb2 drained");
    let (conns, w) = run_fault(
        &mut c,
        "node added (lb2)",
        &[0, 1, 2],
        Duration::from_secs(15),
        |c| {
            c.lb(2, &["drain", "--undo"]);
        },
    );
    let splits = report("node added (lb2)", &conns, usize::MAX, w);
    assert_kept("node added", &splits);
    drop(conns);

    // SIGTERM with drain: withdrawn at once, forwarding for the drain, then detached.
    let (conns, w) = run_fault(
        &mut c,
        "SIGTERM of lb run on lb1",
        &[0, 2],
        DRAIN + Duration::from_secs(12),
        |c| {
            stop(c.pid(1, "lb run"), Signal::Terminate);
        },
    );
    let splits = report("SIGTERM of lb run on lb1 (drain 3 s)", &conns, 1, w);
    for (m, s) in MODES.iter().zip(&splits) {
        if m.survives_moves() {
            let lost = s.lost_on_node + s.lost_moved + s.lost_untouched;
            assert_eq!(
                lost,
                0,
                "SIGTERM: {} lost {lost} connections ({s:?})",
                m.name()
            );
            assert!(
                s.longest <= DRAIN,
                "SIGTERM: a {} request waited {:?}, longer than the drain",
                m.name(),
                s.longest
            );
        }
    }
    drop(conns);
    c.restart(1, "lb run");
    configure_node(&c, 1);
    c.until_paths(&[0, 1, 2], "lb1 back");

    // SIGKILL of a node's daemon.
    let (conns, w) = run_fault(
        &mut c,
        "SIGKILL of lb run on lb0",
        &[1, 2],
        Duration::from_secs(15),
        |c| {
            stop(c.pid(0, "lb run"), Signal::Kill);
        },
    );
    let splits = report("SIGKILL of lb run on lb0", &conns, 0, w);
    assert_kept("SIGKILL", &splits);
    for (m, s) in MODES.iter().zip(&splits) {
        if m.survives_moves() {
            assert!(
                s.longest <= Duration::from_secs(5),
                "SIGKILL: a {} connection waited {:?}",
                m.name(),
                s.longest
            );
        } else {
            // Full-NAT: what ECMP left on its node survives; the rest is the report's.
            assert_eq!(
                s.lost_untouched, 0,
                "SIGKILL: full-NAT lost connections ECMP left alone ({s:?})"
            );
        }
    }
    let (resilient, threshold) = moved_without(&conns, 0);
    // The stand-in router is IPv4 only: compare the IPv4 modes' connections.
    let v4 = MODES.iter().zip(&splits).filter(|(m, _)| !m.v6());
    let moved_here: usize = v4.map(|(_, s)| s.moved).sum();
    println!(
        "  without lb0, of the other nodes' IPv4 connections: resilient nexthops move {resilient}, hash-threshold {threshold} (the router moved {moved_here})"
    );
    assert_eq!(
        resilient, 0,
        "a resilient group moved connections of the nodes that stayed"
    );
    assert_eq!(
        threshold, moved_here,
        "the kernel's hash-threshold answer differs from what the router did"
    );
    drop(conns);
    c.restart(0, "lb run");
    configure_node(&c, 0);
    c.until_paths(&[0, 1, 2], "lb0 back");

    // The same fault behind a resilient group on the router that follows BGP (ecmp::Resilient):
    // nothing of the nodes that stay moves, so full-NAT keeps every connection outside the
    // killed node's share. lb0 again, whose loss moves connections of the others under
    // hash-threshold (removing the middle of three ranges would not).
    let resilient = Resilient::follow();
    let (conns, w) = run_fault(
        &mut c,
        "SIGKILL of lb run on lb0, resilient nexthops",
        &[1, 2],
        Duration::from_secs(15),
        |c| {
            stop(c.pid(0, "lb run"), Signal::Kill);
        },
    );
    let changes = resilient.changes();
    let splits = report(
        "SIGKILL of lb run on lb0 behind a resilient nexthop group (IPv4 VIPs)",
        &conns,
        0,
        w,
    );
    let (_, threshold) = moved_without(&conns, 0);
    println!("  hash-threshold would have moved {threshold} of these IPv4 connections between lb1 and lb2");
    assert_eq!(
        changes, 1,
        "the resilient group followed BGP {changes} times"
    );
    assert!(
        threshold > 0,
        "hash-threshold moves nothing here: the fault shows no difference"
    );
    assert_kept("SIGKILL, resilient", &splits);
    for (m, s) in MODES.iter().zip(&splits).filter(|(m, _)| !m.v6()) {
        assert_eq!(
            s.moved,
            0,
            "{}: a resilient group moved connections ({s:?})",
            m.name()
        );
        assert_eq!(
            s.lost_moved + s.lost_untouched,
            0,
            "{}: lost connections outside lb0's share behind a resilient group ({s:?})",
            m.name()
        );
    }
    drop(conns);
    c.restart(0, "lb run");
    configure_node(&c, 0);
    c.until_paths(&[0, 1, 2], "lb0 back");

    // SIGKILL of a node's speaker: its BGP session closes, the router withdraws at once.
    let (conns, w) = run_fault(
        &mut c,
        "SIGKILL of ExaBGP on lb2",
        &[0, 1],
        Duration::from_secs(15),
        |c| {
            stop(c.pid(2, "exabgp"), Signal::Kill);
        },
    );
    let splits = report("SIGKILL of ExaBGP on lb2", &conns, 2, w);
    assert_kept("speaker SIGKILL", &splits);
    drop(conns);
    c.restart(2, "exabgp");
    c.until_paths(&[0, 1, 2], "lb2's speaker back");

    // The reals' side lost: lb2's arm to the reals unplugged (its port on the router's reals
    // bridge shut). Its BGP session stays up: lb2 sees no carrier on eth1 and withdraws.
    let port = c.port(2, "reals");
    let rt_link = |state: &str| {
        ok(Command::new("ip").args(["-n", &ns("rt"), "link", "set", &port, state]));
    };
    let (conns, w) = run_fault(
        &mut c,
        "lb2's link to the reals down",
        &[0, 1],
        Duration::from_secs(15),
        |_| rt_link("down"),
    );
    let splits = report(
        "lb2's link to the reals down (its BGP session up)",
        &conns,
        2,
        w,
    );
    assert_kept("reals' link down", &splits);
    let fnat = &splits[MODES.iter().position(|m| *m == Mode::FullNat).unwrap()];
    assert_eq!(
        fnat.lost_untouched, 0,
        "reals' link down: full-NAT ({fnat:?})"
    );
    assert!(
        c.session_up(2),
        "lb2's BGP session went down with its reals' link"
    );
    let doc = output(
        Command::new("ip")
            .args(["netns", "exec", &ns("lb2"), bin(), "lb", "doctor"])
            .args(["--socket", &c.socket(2)]),
    );
    let text = String::from_utf8_lossy(&doc.stdout);
    assert!(
        text.contains("eth1 has no carrier"),
        "doctor on lb2: {text}"
    );
    drop(conns);
    rt_link("up");
    c.until_paths(&[0, 1, 2], "lb2's link to the reals back");

    // A backend change during a node loss (Maglev, section 3.3): lb0 dies while r3 leaves the
    // others' tables. Measured and reported; what ECMP left alone on a real that stays is kept.
    let (conns, w) = run_fault(
        &mut c,
        "SIGKILL of lb0 while r3 is deleted",
        &[1, 2],
        Duration::from_secs(15),
        |c| {
            stop(c.pid(0, "lb run"), Signal::Kill);
            for n in [1, 2] {
                for m in MODES {
                    c.lb(n, &["-d", "-t", &m.service(), "-r", &m.real(3)]);
                }
            }
        },
    );
    report(
        "SIGKILL of lb run on lb0 while r3 is deleted on lb1 and lb2",
        &conns,
        0,
        w,
    );
    for m in MODES {
        let r = by_real(&conns, m, 0, 3);
        println!(
            "  {:<8} on r3: {} (lost {}); on the other reals: moved {} (lost {}), untouched {} (lost {})",
            m.name(), r.on_real, r.lost_on_real, r.moved, r.lost_moved, r.untouched, r.lost_untouched
        );
        assert_eq!(
            r.lost_untouched,
            0,
            "{}: a connection ECMP left alone lost its real ({r:?})",
            m.name()
        );
    }
    drop(conns);
    c.restart(0, "lb run");
    configure_node(&c, 0);
    for n in [1, 2] {
        for m in MODES {
            c.lb(n, &["-a", "-t", &m.service(), "-r", &m.real(3), m.flag()]);
        }
    }
    c.until_paths(&[0, 1, 2], "lb0 back with r3 everywhere");

    // A flapping real: a VIP whose one real's weight flips every 200 ms for 2 s costs the
    // router a withdrawal and one announcement after the last flip, not one per flip.
    let flap_vip = "198.18.200.9:6379";
    let real0 = format!("{}:{PORT}", rip(0));
    c.lb(0, &["-A", "-t", flap_vip, "-s", "mh"]);
    c.lb(0, &["-a", "-t", flap_vip, "-r", &real0, "-g"]);
    let flap = flap_vip
        .split(':')
        .next()
        .unwrap()
        .parse::<IpAddr>()
        .unwrap();
    let routed = wait_for(Duration::from_secs(10), || {
        (c.paths(flap) == [IpAddr::from(node_addr(0))]).then_some(())
    });
    assert!(routed.is_some(), "the flapping VIP was not announced");
    let updates = c.updates_from(0);
    for i in 0..10 {
        let w = if i % 2 == 0 { "0" } else { "1" };
        c.lb(0, &["-e", "-t", flap_vip, "-r", &real0, "-g", "-w", w]);
        std::thread::sleep(Duration::from_millis(200));
    }
    let back = wait_for(Duration::from_secs(10), || {
        (c.paths(flap) == [IpAddr::from(node_addr(0))]).then_some(())
    });
    assert!(
        back.is_some(),
        "the flapping VIP did not come back after the last flip"
    );
    std::thread::sleep(Duration::from_millis(500));
    let sent = c.updates_from(0) - updates;
    println!("flapping real: 10 weight flips in 2 s, {sent} BGP updates from lb0 (hold-down {HOLD_DOWN_S} s)");
    assert!(
        sent <= 3,
        "a flapping real sent {sent} updates: the hold-down did not bound them"
    );
    c.lb(0, &["-D", "-t", flap_vip]);

    // A silent node: lb1's switch port shut, so nothing reaches it and it can tell no one;
    // the router's BGP hold timer notices (this kernel has no matchall or netem to drop with).
    let port = c.port(1, "rack");
    let (conns, w) = run_fault(
        &mut c,
        "silent lb1",
        &[0, 2],
        Duration::from_secs(20),
        |_| {
            ok(Command::new("ip").args(["-n", &ns("rt"), "link", "set", &port, "down"]));
        },
    );
    let splits = report(
        "silent lb1 (switch port down; BGP hold time 3 s)",
        &conns,
        1,
        w,
    );
    assert_kept("silent node", &splits);
    drop(conns);
    println!("lb_cluster_lab: {:.1} s", started.elapsed().as_secs_f64());
}
