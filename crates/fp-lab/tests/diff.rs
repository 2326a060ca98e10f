//! Differential harness: the same generated frames through the `line` lab with and without
//! the fast path, for a router, a gateway with 100 rules and a gateway with a set. What
//! arrives where (bytes + interface) must be identical; what is missing was dropped in both.
//! Then the same for a bridge, with the bridge module at XDP and at TC.

use std::time::Duration;

use wirespeed_fp::model::BridgeHook;
use wirespeed_fp::status::Status;
use wirespeed_fp_lab::harness::{self, Capture, PacketSocket, Targets};
use wirespeed_fp_lab::line::*;
use wirespeed_lab::netns::add_addr;
use wirespeed_lab::Netns;
use wirespeed_testkit::frame as pkt;

const PER_CONFIG: usize = 3400;

fn mac(ns: &wirespeed_lab::Netns, ifname: &str) -> [u8; 6] {
    pkt::parse_mac(
        &ns.exec("cat", &[&format!("/sys/class/net/{ifname}/address")])
            .unwrap(),
    )
    .unwrap()
}

fn v6(s: &str) -> [u8; 16] {
    s.parse::<std::net::Ipv6Addr>().unwrap().octets()
}

fn targets(dut_mac: [u8; 6], src_mac: [u8; 6]) -> Targets {
    Targets {
        dut_mac,
        src_mac,
        src4: [198, 18, 0, 1],
        src6: v6("fd00:a::1"),
        routed4: (0..PREFIXES)
            .flat_map(|x| [[198, 19, x as u8, 1], [198, 19, x as u8, 77]])
            .collect(),
        routed6: vec![v6("fd00:c::1"), v6("fd00:c::99")],
        unknown4: vec![[198, 19, 200, 1], [198, 19, 251, 7]],
        unknown_src4: [198, 18, 0, 3],
        unknown6: vec![v6("fd00:d::1"), v6("fd00:ee::5")],
        special4: vec![
            [198, 18, 0, 2],
            [198, 18, 1, 1],
            [198, 18, 0, 255],
            [255, 255, 255, 255],
            [224, 0, 0, 1],
            [239, 1, 2, 3],
        ],
        special6: vec![v6("fd00:a::2"), v6("fd00:b::1"), v6("ff02::1")],
    }
}

/// Sends `frames` from v0 in `src` and returns what v0 and s0 (in `sink`) received, with the
/// frames the DUT originates from `dut_addrs` normalized.
fn run_once(src: &Netns, sink: &Netns, frames: &[Vec<u8>], dut_addrs: &[[u8; 4]]) -> Capture {
    let tx = spawn_in_ns(src.name(), || PacketSocket::open("v0").unwrap())
        .join()
        .unwrap();
    let rx = spawn_in_ns(sink.name(), || PacketSocket::open("s0").unwrap())
        .join()
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    tx.drain();
    rx.drain();
    for chunk in frames.chunks(16) {
        for f in chunk {
            tx.send(f).unwrap();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(400));
    let mut cap = Capture::new();
    for (point, sock) in [("source v0", &tx), ("sink s0", &rx)] {
        for f in sock.drain() {
            if let Some(n) = harness::normalize(&f, dut_addrs) {
                *cap.entry((point.to_string(), n)).or_insert(0) += 1;
            }
        }
    }
    cap
}

/// Prints the comparison of two runs and returns the number of divergences; at least
/// `min_arrived` frames must have arrived for the comparison to mean anything.
fn report(
    name: &str,
    sent: usize,
    kernel: &Capture,
    fast: &Capture,
    s: &Status,
    min_arrived: usize,
) -> usize {
    let div = harness::divergences(kernel, fast);
    let arrived: usize = kernel.values().sum();
    eprintln!(
        "{name}: {sent} frames, {arrived} arrived (kernel), {} divergences; fast path: {:?}",
        div.len(),
        s.ports
            .iter()
            .map(|p| (p.name.clone(), p.hook.clone(), p.fast_pathed, p.passed))
            .collect::<Vec<_>>()
    );
    let shown = std::env::var("DIFF_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    for (point, bytes, k, f) in div.iter().take(20) {
        eprintln!(
            "  {point}: kernel {k} fast {f}: {:02x?}",
            &bytes[..bytes.len().min(shown)]
        );
    }
    assert!(
        arrived > min_arrived,
        "{name}: too little arrived for a meaningful comparison"
    );
    div.len()
}

fn compare(lab: &Line, name: &str, seed: u64, t: &Targets, expect_fast: bool) -> usize {
    let frames = harness::generate(t, seed, PER_CONFIG);
    let dut_addrs = [[198, 18, 0, 2], [198, 18, 1, 1]];
    let kernel = run_once(&lab.src, &lab.sink, &frames, &dut_addrs);
    let mut d = RunningDaemon::start(&lab.dut, None);
    d.wait_for("ports attached", |s| s.ports.len() == 2);
    let fast = run_once(&lab.src, &lab.sink, &frames, &dut_addrs);
    let s = d.wait_for("counters", |s| {
        !expect_fast || s.ports.iter().any(|p| p.fast_pathed > 0)
    });
    d.stop();
    report(name, frames.len(), &kernel, &fast, &s, PER_CONFIG / 4)
}

#[test]
fn fast_path_and_kernel_agree_on_ten_thousand_frames() {
    let lab = line("x");
    // An egress MTU below the ingress one: DF frames that no longer fit, and fragmentation.
    lab.dut.ip(&["link", "set", "d1", "mtu", "1400"]).unwrap();
    lab.sink.ip(&["link", "set", "s0", "mtu", "1400"]).unwrap();
    let (src_mac, sink_mac, dut_mac) = (
        mac(&lab.src, "v0"),
        mac(&lab.sink, "s0"),
        mac(&lab.dut, "d0"),
    );
    let fmt = |m: [u8; 6]| {
        m.iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    // Resolved neighbours: no resolution traffic, whose timing would differ between runs.
    for (addr, m, dev) in [
        ("198.18.1.2", sink_mac, "d1"),
        ("198.18.0.3", src_mac, "d0"),
        ("fd00:b::2", sink_mac, "d1"),
        ("198.18.0.1", src_mac, "d0"),
        ("fd00:a::1", src_mac, "d0"),
    ] {
        lab.dut
            .ip(&[
                "neigh",
                "replace",
                addr,
                "lladdr",
                &fmt(m),
                "dev",
                dev,
                "nud",
                "permanent",
            ])
            .unwrap();
    }
    // Every ICMP error the kernel owes, without rate limits that depend on timing.
    for (k, v) in [
        ("net.ipv4.icmp_ratelimit", "0"),
        ("net.ipv4.icmp_msgs_per_sec", "1000000"),
        ("net.ipv4.icmp_msgs_burst", "1000000"),
        ("net.ipv6.icmp.ratelimit", "0"),
        ("net.ipv6.auto_flowlabels", "0"),
    ] {
        lab.dut.sysctl(k, v).unwrap();
    }
    // The endpoints only observe: their capture taps sit before this ingress drop.
    for (ns, dev) in [(&lab.src, "v0"), (&lab.sink, "s0")] {
        ns.exec("nft", &["add table netdev obs"]).unwrap();
        ns.exec("nft", &[&format!("add chain netdev obs in {{ type filter hook ingress device {dev} priority 0; policy drop; }}")]).unwrap();
    }
    let t = targets(dut_mac, src_mac);
    let mut total = 0;

    total += compare(&lab, "router", 1, &t, true);

    let mut rules = String::from("*filter\n:FORWARD ACCEPT [0:0]\n");
    for x in 0..90 {
        rules.push_str(&format!(
            "-A FORWARD -d 198.19.{}.{}/32 -j DROP\n",
            x % 10,
            1 + 76 * (x / 45)
        ));
    }
    rules.push_str("-A FORWARD -p tcp --dport 22 -j DROP\n-A FORWARD -p udp -s 198.18.0.1 --dport 53 -j DROP\n");
    for p in [80, 443, 4000, 5000, 8080, 9, 1, 2] {
        rules.push_str(&format!(
            "-A FORWARD -p tcp --dport {p} -d 198.19.20.0/24 -j DROP\n"
        ));
    }
    rules.push_str("COMMIT\n");
    {
        use std::io::Write;
        let mut c = lab
            .dut
            .command("iptables-nft-restore")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(rules.as_bytes()).unwrap();
        assert!(c.wait().unwrap().success());
    }
    lab.dut
        .exec(
            "ip6tables-nft",
            &["-A", "FORWARD", "-p", "tcp", "--dport", "80", "-j", "DROP"],
        )
        .unwrap();
    total += compare(&lab, "gateway, 100 rules", 2, &t, true);
    lab.dut.exec("iptables-nft", &["-F", "FORWARD"]).unwrap();
    lab.dut.exec("ip6tables-nft", &["-F", "FORWARD"]).unwrap();

    let elems: Vec<String> = (0..PREFIXES)
        .filter(|x| x % 3 == 0)
        .map(|x| format!("198.19.{x}.77"))
        .collect();
    let script = format!(
        "table inet gw {{\n set blk {{ type ipv4_addr; elements = {{ {} }} }}\n chain fw {{ type filter hook forward priority 0; policy accept;\n  ip daddr @blk drop\n  udp dport 4000 ip dscp 0x10 drop\n  ip6 daddr fd00:c::99 tcp dport {{ 22, 443 }} drop\n  meta l4proto udp udp dport 5000 drop\n }}\n}}\n",
        elems.join(", ")
    );
    let path = std::env::temp_dir().join(format!("{}.nft", lab.dut.name()));
    std::fs::write(&path, script).unwrap();
    lab.dut
        .exec("nft", &["-f", path.to_str().unwrap()])
        .unwrap();
    let _ = std::fs::remove_file(&path);
    total += compare(&lab, "gateway, one set", 3, &t, true);

    // A host firewall on the input chain only, as most hosts have: its conntrack rule turns
    // conntrack on for every packet, forwarded ones too (so both families are the kernel's),
    // and its defrag holds every forwarded fragment until its datagram is whole (none of
    // these ever is). Reassembly timeouts are pushed past the test: the ICMP error one sends
    // would land in whichever run is capturing then.
    lab.dut.exec("nft", &["flush ruleset"]).unwrap();
    lab.dut.sysctl("net.ipv4.ipfrag_time", "3600").unwrap();
    lab.dut
        .exec(
            "nft",
            &["add table inet host; add chain inet host in { type filter hook input priority 0; policy accept; }; add rule inet host in ct state established,related accept"],
        )
        .unwrap();
    total += compare(&lab, "router, conntrack on the input chain", 4, &t, false);

    assert_eq!(
        total, 0,
        "the fast path decided differently from the kernel"
    );
}

const PER_BRIDGE_CONFIG: usize = 2500;

fn fmt_mac(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The same frames through a bridge, kernel alone and then with the bridge module at `hook`.
fn compare_bridge(
    lab: &BridgeLine,
    name: &str,
    seed: u64,
    t: &harness::L2Targets,
    hook: BridgeHook,
) -> usize {
    let frames = harness::generate_l2(t, seed, PER_BRIDGE_CONFIG);
    let bridge_addr = [[198, 18, 2, 3]];
    let kernel = run_once(&lab.src, &lab.sink, &frames, &bridge_addr);
    let mut d = RunningDaemon::start_with(&lab.dut, None, hook);
    d.wait_for("bridge ports attached", |s| {
        // The notes name the hook's reason; none may send the bridge to the kernel.
        s.ports.len() == 2
            && s.ports
                .iter()
                .all(|p| p.notes.iter().all(|n| !n.contains("-> kernel")))
    });
    let fast = run_once(&lab.src, &lab.sink, &frames, &bridge_addr);
    let s = d.wait_for("counters", |s| s.ports.iter().any(|p| p.fast_pathed > 0));
    d.stop();
    report(
        name,
        frames.len(),
        &kernel,
        &fast,
        &s,
        PER_BRIDGE_CONFIG / 2,
    )
}

#[test]
fn bridge_fast_path_and_kernel_agree() {
    let lab = bridge_line("d");
    let (src_mac, sink_mac, br_mac) = (
        mac(&lab.src, "v0"),
        mac(&lab.sink, "s0"),
        mac(&lab.dut, "br0"),
    );
    let src_macs = vec![src_mac, [0x02, 0xaa, 0, 0, 0, 1]];
    let sink_macs = vec![sink_mac, [0x02, 0xbb, 0, 0, 0, 2]];
    // A fixed FDB: learning off, static entries (replacing whatever the endpoints' first
    // frames taught). Learning during the first run would otherwise change the state the
    // second run starts from.
    let bridge = |args: &[&str]| {
        lab.dut.exec("bridge", args).unwrap();
    };
    for dev in ["d0", "d1"] {
        bridge(&["link", "set", "dev", dev, "learning", "off"]);
    }
    for (macs, dev) in [(&src_macs, "d0"), (&sink_macs, "d1")] {
        for m in macs.iter() {
            bridge(&[
                "fdb",
                "replace",
                &fmt_mac(*m),
                "dev",
                dev,
                "master",
                "static",
            ]);
        }
    }
    add_addr(&lab.dut, "br0", "fd00:2::3/64").unwrap();
    // Local delivery answers the source: resolved neighbours, no rate limits.
    for (addr, m) in [
        ("198.18.2.1", src_mac),
        ("198.18.2.4", src_mac),
        ("fd00:2::1", src_mac),
    ] {
        lab.dut
            .ip(&[
                "neigh",
                "replace",
                addr,
                "lladdr",
                &fmt_mac(m),
                "dev",
                "br0",
                "nud",
                "permanent",
            ])
            .unwrap();
    }
    for (k, v) in [
        ("net.ipv4.icmp_ratelimit", "0"),
        ("net.ipv4.icmp_msgs_per_sec", "1000000"),
        ("net.ipv4.icmp_msgs_burst", "1000000"),
        ("net.ipv6.icmp.ratelimit", "0"),
        ("net.ipv6.auto_flowlabels", "0"),
    ] {
        lab.dut.sysctl(k, v).unwrap();
    }
    for (ns, dev) in [(&lab.src, "v0"), (&lab.sink, "s0")] {
        ns.exec("nft", &["add table netdev obs"]).unwrap();
        ns.exec("nft", &[&format!("add chain netdev obs in {{ type filter hook ingress device {dev} priority 0; policy drop; }}")]).unwrap();
    }
    let t = harness::L2Targets {
        src_macs,
        sink_macs,
        bridge_mac: br_mac,
        ip: Targets {
            dut_mac: br_mac,
            src_mac,
            src4: [198, 18, 2, 1],
            src6: v6("fd00:2::1"),
            routed4: vec![[198, 18, 2, 2], [198, 18, 2, 9]],
            routed6: vec![v6("fd00:2::2"), v6("fd00:2::9")],
            unknown4: vec![[198, 19, 0, 1]],
            unknown_src4: [198, 18, 2, 4],
            unknown6: vec![v6("fd00:d::1")],
            special4: vec![[198, 18, 2, 3], [198, 18, 2, 255], [224, 0, 0, 1]],
            special6: vec![v6("fd00:2::3"), v6("ff02::1")],
        },
    };
    let mut total = 0;
    total += compare_bridge(&lab, "bridge at XDP", 11, &t, BridgeHook::Xdp);
    total += compare_bridge(&lab, "bridge at TC", 12, &t, BridgeHook::Tc);
    assert_eq!(
        total, 0,
        "the bridge module decided differently from the kernel"
    );
}
