//! The fast path's TC programs in a tcx chain with someone else's. What they leave to the
//! kernel goes on to the programs behind them, as it would without the fast path (before, a
//! packet left to the kernel ended the chain at our program, TC_ACT_OK). And a port with
//! another owner's tcx program is left to the kernel whole: what the router forwarded skipped
//! the program behind it, which Linux alone runs for every packet (the daemon polls tcx
//! programs: they come with no event).

use wirespeed_fp_lab::line::*;
use wirespeed_lab::Netns;
use wirespeed_xdpgen::Gen;

fn mac(ns: &Netns, dev: &str) -> String {
    ns.exec("cat", &[&format!("/sys/class/net/{dev}/address")])
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn a_tc_program_of_someone_elses_sees_every_packet_as_without_the_fast_path() {
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
    let (gen, behind) = lab
        .dut
        .run(move || {
            let gen = Gen::load(&[0u8; Gen::FRAME_LEN]).unwrap();
            let link = gen.attach_sink_tc(d0).unwrap();
            (gen, link)
        })
        .unwrap();
    // Linux alone: the program drops what reaches it, forwarded or not.
    let linux_before = gen.sink_count().unwrap();
    assert!(!ping_once(&lab.src, "198.18.1.2"), "Linux alone forwarded");
    assert!(gen.sink_count().unwrap() > linux_before);

    let mut d = RunningDaemon::start(&lab.dut, None);
    d.wait_for("d0 left to the kernel, d1 routed at TC", |s| {
        s.ports.len() == 2
            && s.ports.iter().all(|p| p.hook == "tc (ingress)")
            && s.ports.iter().any(|p| {
                p.name == "d0"
                    && p.notes.iter().any(|n| {
                        n.starts_with("router4 -> kernel: 1 tcx programs of others at ingress")
                    })
            })
    });
    // Forwarded or addressed to the router itself, a packet reaches the program behind ours
    // and is dropped there, as without the fast path.
    let before = gen.sink_count().unwrap();
    for dst in ["198.18.1.2", "198.18.1.2", "198.18.0.2"] {
        assert!(
            !ping_once(&lab.src, dst),
            "{dst}: a packet skipped the program behind the router"
        );
    }
    let seen = gen.sink_count().unwrap() - before;
    assert!(seen >= 3, "the program behind counted {seen}");
    assert_eq!(forwarded(&d.status().unwrap(), "d0"), 0);

    // Its program gone, d0 is fast-pathed again.
    drop(behind);
    d.wait_for("d0 routed again", |s| {
        s.ports
            .iter()
            .any(|p| p.name == "d0" && p.modules.contains(&"router4".to_string()))
    });
    assert!(ping(&lab.src, "198.18.1.2"), "forwarded ping lost");
    d.wait_for("forwarded at TC", |s| forwarded(s, "d0") >= 1);
    d.stop();
}
