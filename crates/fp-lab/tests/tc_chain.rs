//! The fast path's TC programs in a tcx chain with someone else's: what they forward skips the
//! programs behind them (a documented limit), what they leave to the kernel goes on to those
//! programs, as it would without the fast path. Before, a packet left to the kernel ended the
//! chain at our program (TC_ACT_OK), so a user's program behind it never saw it.

mod common;

use common::*;
use wirespeed_bench::xdpgen::Gen;
use wirespeed_lab::Netns;

fn mac(ns: &Netns, dev: &str) -> String {
    ns.exec("cat", &[&format!("/sys/class/net/{dev}/address")])
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn a_tc_program_behind_the_router_sees_what_it_leaves_to_the_kernel() {
    let lab = line("c");
    // The outer peers without NAPI (GRO off, the kernel's default): the router runs at TC.
    for (ns, dev) in [(&lab.src, "v0"), (&lab.sink, "s0")] {
        ns.exec("ethtool", &["-K", dev, "gro", "off"]).unwrap();
    }
    // Nothing but the test's pings reaches d0: no IPv6 from the source (router solicitations
    // and MLD reports would be left to the kernel and counted behind), and permanent
    // neighbours, since the program behind ours drops whatever reaches it, ARP included.
    let neigh = |ns: &Netns, addr: &str, mac: &str, dev: &str| {
        let args = format!("neigh replace {addr} lladdr {mac} dev {dev} nud permanent");
        ns.ip(&args.split(' ').collect::<Vec<_>>()).unwrap();
    };
    lab.src
        .sysctl("net.ipv6.conf.v0.disable_ipv6", "1")
        .unwrap();
    neigh(&lab.src, "198.18.0.2", &mac(&lab.dut, "d0"), "v0");
    neigh(&lab.dut, "198.18.0.1", &mac(&lab.src, "v0"), "d0");
    neigh(&lab.dut, "198.18.1.2", &mac(&lab.sink, "s0"), "d1");
    neigh(&lab.sink, "198.18.1.1", &mac(&lab.dut, "d1"), "s0");

    // A counting, dropping program at TC ingress on d0, attached first: the fast path's own
    // goes in front of it.
    let d0 = ifindex(&lab.dut, "d0");
    let (gen, _behind) = lab
        .dut
        .run(move || {
            let gen = Gen::load(&[0u8; Gen::FRAME_LEN]).unwrap();
            let link = gen.attach_sink_tc(d0).unwrap();
            (gen, link)
        })
        .unwrap();
    let mut d = RunningDaemon::start(&lab.dut, None);
    d.wait_for("d0 and d1 routed at TC", |s| {
        s.ports.len() == 2
            && s.ports
                .iter()
                .all(|p| p.hook == "tc (ingress)" && !p.modules.is_empty())
    });

    // Forwarded: redirected by the router, so the program behind it never sees it.
    let before = gen.sink_count().unwrap();
    for _ in 0..3 {
        assert!(ping_once(&lab.src, "198.18.1.2"), "forwarded ping lost");
    }
    assert_eq!(
        gen.sink_count().unwrap(),
        before,
        "a forwarded packet went on"
    );
    d.wait_for("forwarded at TC", |s| forwarded(s, "d0") >= 3);

    // Addressed to the router itself: left to the kernel, so it goes on to the program
    // behind, which drops it (as it would without the fast path).
    for _ in 0..3 {
        assert!(
            !ping_once(&lab.src, "198.18.0.2"),
            "a packet left to the kernel skipped the program behind the router"
        );
    }
    let behind = gen.sink_count().unwrap() - before;
    assert!(behind >= 3, "the program behind counted {behind}");
    d.stop();
}
