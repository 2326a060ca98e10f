//! Fast path vs Linux on the `line` lab: pps for router, gateway (100 rules), gateway (one
//! ipset), and on a bridge lab for the bridge, with minimum-size frames, measured two ways:
//! from an in-kernel generator (BPF_PROG_RUN live frames, XDP_TX) in the source namespace on
//! CPU 0 with the DUT's receive NAPI thread pinned to CPU 1; and with the frames arriving on
//! the DUT's ingress from the same kind of generator run on CPU 1 in the DUT's namespace (one
//! core for everything). Then the pod-to-pod TCP request/response through a bridge at TC;
//! then the daemon's response time per configuration command. Run as root:
//!   cargo run --release -p wirespeed-fp-lab --example fp_bench -- [secs] [rounds] [row]
//! `row`: only the pps rows whose name contains it, nothing else (for profiling); `pod`:
//! only the pod-to-pod part; `scrape`: only the router row with and without a Prometheus-like
//! scrape of `--metrics` every second, side by side (scrape/mod.rs); `routes`: only the
//! response to a route change beside a full table of routes through nexthop objects
//! (fulltable/mod.rs); `vm`: only a bridge of two VM taps, Linux against the bridge module
//! at XDP and at TC (vm/mod.rs).

#[path = "../tests/common/mod.rs"]
mod common;
mod fulltable;
mod pod;
mod responses;
mod scrape;
mod vm;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use wirespeed_bench::xdpgen::Gen;
use wirespeed_fp::model::BridgeHook;
use wirespeed_fp_lab::pkt::{self, L4};

fn mac(ns: &wirespeed_lab::Netns, ifname: &str) -> [u8; 6] {
    pkt::parse_mac(
        &ns.exec("cat", &[&format!("/sys/class/net/{ifname}/address")])
            .unwrap(),
    )
    .unwrap()
}

fn ifindex(ns: &wirespeed_lab::Netns, ifname: &str) -> u32 {
    ns.exec("cat", &[&format!("/sys/class/net/{ifname}/ifindex")])
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn pin_self(cpu: usize) {
    // Best effort, as before: an unpinned run only measures less steadily.
    let _ = wirespeed_sys::process::set_affinity(&[cpu]);
}

/// Pins every threaded-NAPI kthread of the DUT's veths to CPU 1. Attaching or detaching XDP
/// re-creates a veth's NAPI, so this runs before every measurement.
fn pin_napi() -> usize {
    let out = std::process::Command::new("ps")
        .args(["-eLo", "tid,comm"])
        .output()
        .unwrap();
    let mut n = 0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut w = line.split_whitespace();
        let (Some(tid), Some(comm)) = (w.next(), w.next()) else {
            continue;
        };
        if comm.starts_with("napi/d0-") || comm.starts_with("napi/d1-") {
            let _ = std::process::Command::new("taskset")
                .args(["-pc", "1", tid])
                .output();
            n += 1;
        }
    }
    n
}

struct Sample {
    pps: f64,
    offered: f64,
    cpu1: f64,
}

/// The three namespaces of a line-shaped lab: generator, DUT, sink.
struct Ends<'a> {
    src: &'a wirespeed_lab::Netns,
    dut: &'a wirespeed_lab::Netns,
    sink: &'a wirespeed_lab::Netns,
}

fn measure(lab: &Ends, gen: &Arc<Gen>, frame: &[u8], warm: Duration, secs: Duration) -> Sample {
    pin_napi();
    let src_if = ifindex(lab.src, "v0");
    let g = gen.clone();
    let f = frame.to_vec();
    let total = warm + secs + Duration::from_millis(200);
    let h = spawn_in_ns(lab.src.name(), move || {
        pin_self(0);
        let t = Instant::now();
        (g.blast(&f, src_if, total).unwrap(), t.elapsed())
    });
    let s = sample(gen, warm, secs, h);
    if std::env::var_os("FP_BENCH_DEBUG").is_some() {
        for (ns, dev) in [(lab.dut, "d0"), (lab.dut, "d1"), (lab.sink, "s0")] {
            let st = ns.exec("ethtool", &["-S", dev]).unwrap_or_default();
            let nz: Vec<&str> = st
                .lines()
                .filter(|l| !l.trim_end().ends_with(": 0"))
                .collect();
            eprintln!("{dev}: {}", nz.join(" | "));
        }
    }
    s
}

/// As `measure`, but the frames arrive on the DUT's `d0` (index `d0`) from a generator in the
/// DUT's namespace on CPU 1: one core runs the generator, the DUT's receive path (its XDP
/// program, or the kernel) and the sink, back to back.
fn measure_local(
    lab: &Ends,
    d0: u32,
    gen: &Arc<Gen>,
    frame: &[u8],
    warm: Duration,
    secs: Duration,
) -> Sample {
    let g = gen.clone();
    let f = frame.to_vec();
    let total = warm + secs + Duration::from_millis(200);
    let h = spawn_in_ns(lab.dut.name(), move || {
        pin_self(1);
        let t = Instant::now();
        (g.receive(&f, d0, total).unwrap(), t.elapsed())
    });
    sample(gen, warm, secs, h)
}

/// The sink's rate and CPU 1's busy share over `secs` after `warm`, while `generator` (which
/// returns the frames it ran and for how long) runs.
fn sample(
    gen: &Gen,
    warm: Duration,
    secs: Duration,
    generator: std::thread::JoinHandle<(u64, Duration)>,
) -> Sample {
    std::thread::sleep(warm);
    let (c0, t0, u0) = (
        gen.sink_count().unwrap(),
        Instant::now(),
        wirespeed_bench::cpu::jiffies_per_cpu(),
    );
    std::thread::sleep(secs);
    let (c1, t1, u1) = (
        gen.sink_count().unwrap(),
        Instant::now(),
        wirespeed_bench::cpu::jiffies_per_cpu(),
    );
    let (frames, ran) = generator.join().unwrap();
    let cpu1 = u1
        .get(1)
        .zip(u0.get(1))
        .map(|(a, b)| (a.0 - b.0) as f64 / (a.1 - b.1).max(1) as f64)
        .unwrap_or(0.0);
    Sample {
        pps: (c1 - c0) as f64 / (t1 - t0).as_secs_f64(),
        offered: frames as f64 / ran.as_secs_f64(),
        cpu1,
    }
}

/// UDP with 18 bytes of payload: a 60-byte (minimum-size) frame over IPv4.
fn udp18() -> L4 {
    L4::Udp {
        sport: 1000,
        dport: 2000,
        payload: vec![0; 18],
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let secs = Duration::from_secs(args.get(1).and_then(|s| s.parse().ok()).unwrap_or(3));
    let rounds: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3);
    // A third argument keeps only the pps rows whose name contains it (for profiling one
    // row), or with `pod` only the pod-to-pod part; the response times then do not run.
    let only = args.get(3).cloned();
    let wanted = |name: &str| only.as_deref().is_none_or(|o| name.contains(o));
    let warm = Duration::from_secs(1);
    if only.as_deref() == Some("pod") {
        pod::pod_to_pod(secs, rounds);
        return;
    }
    if only.as_deref() == Some("vm") {
        vm::vm_bridge(secs, rounds);
        return;
    }

    let lab = line("b");
    if only.as_deref() == Some("routes") {
        fulltable::run(&lab.dut);
        return;
    }
    let (src_mac, dut_mac, sink_mac) = (
        mac(&lab.src, "v0"),
        mac(&lab.dut, "d0"),
        mac(&lab.sink, "s0"),
    );
    let fmt = |m: [u8; 6]| {
        m.iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    lab.dut
        .ip(&[
            "neigh",
            "replace",
            "198.18.1.2",
            "lladdr",
            &fmt(sink_mac),
            "dev",
            "d1",
            "nud",
            "permanent",
        ])
        .unwrap();
    lab.dut
        .ip(&[
            "neigh",
            "replace",
            "198.18.0.1",
            "lladdr",
            &fmt(src_mac),
            "dev",
            "d0",
            "nud",
            "permanent",
        ])
        .unwrap();
    // d0 must run NAPI to take XDP_TX frames from the generator even without our program.
    lab.dut.exec("ethtool", &["-K", "d0", "gro", "on"]).unwrap();
    // Threaded NAPI: the DUT's receive work runs in a kthread we can pin, apart from the
    // generator.
    lab.dut
        .exec("sh", &["-c", "echo 1 > /sys/class/net/d0/threaded"])
        .unwrap();
    let frame = pkt::ipv4(
        dut_mac,
        src_mac,
        [198, 18, 0, 1],
        [198, 19, 7, 1],
        64,
        &[],
        &udp18(),
    );
    let gen = Arc::new(Gen::load(frame.as_slice().try_into().expect("60-byte frame")).unwrap());
    let sink_if = ifindex(&lab.sink, "s0");
    let g = gen.clone();
    let mut sink = Some(
        spawn_in_ns(lab.sink.name(), move || g.attach_sink(sink_if).unwrap())
            .join()
            .unwrap(),
    );

    let arms = if only.as_deref() == Some("scrape") {
        "fast path not scraped and scraped"
    } else {
        "Linux and fast path"
    };
    println!(
        "fp_bench: {} s measured after {} s warm-up, {rounds} rounds, {arms} alternating",
        secs.as_secs(),
        warm.as_secs()
    );
    println!("generator: BPF_PROG_RUN live frames (XDP_TX) on CPU 0; DUT veth NAPI threads on CPU 1 ({} pinned)", pin_napi());
    println!();
    if only.as_deref() == Some("scrape") {
        let ends = Ends {
            src: &lab.src,
            dut: &lab.dut,
            sink: &lab.sink,
        };
        let d0 = ifindex(&lab.dut, "d0");
        scrape::run(&ends, d0, &gen, &frame, (warm, secs, rounds));
        return;
    }
    println!("| config | Linux Mpps (median) | fast path Mpps (median) | ratio median (min-max) | offered Mpps | DUT CPU1 busy L / FP |");
    println!("|---|---|---|---|---|---|");

    // Frames to 4,096 destinations over the 50 prefixes, sent round robin: each destination
    // comes back only after all the others, more of them than the route cache has slots.
    let spread: Vec<[u8; Gen::FRAME_LEN]> = (0..Gen::MAX_FRAMES)
        .map(|n| {
            let dst = [198, 19, (n % 50) as u8, (1 + n / 50) as u8];
            let f = pkt::ipv4(dut_mac, src_mac, [198, 18, 0, 1], dst, 64, &[], &udp18());
            f.as_slice().try_into().expect("60-byte frame")
        })
        .collect();
    // (row, fast path with its route cache, frames to cycle through (none: the one flow),
    // set-up on top of the previous rows')
    // The same flow as a local sender with checksum offload (a veth's default) hands it over:
    // the UDP checksum field holds only the pseudo-header sum (CHECKSUM_PARTIAL). An XDP
    // redirect would deliver it corrupt, so the XDP router passes it marked, and the TC stage
    // behind it routes the skb.
    let mut partial = frame.clone();
    {
        let (src, dst) = ([198u16 << 8 | 18, 1], [198u16 << 8 | 19, 7 << 8 | 1]);
        let udp_len = (partial.len() - 14 - 20) as u64;
        let mut sum: u64 =
            src.iter().chain(dst.iter()).map(|w| *w as u64).sum::<u64>() + 17 + udp_len;
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        partial[40..42].copy_from_slice(&(sum as u16).to_be_bytes());
    }
    let partial: [u8; Gen::FRAME_LEN] = partial.as_slice().try_into().expect("60-byte frame");
    // The same flow's datagrams cut by their sender: a middle fragment (offset 1,480, more to
    // come), which carries no ports. Linux forwards it as it is, without conntrack.
    let mut fragment = frame.clone();
    pkt::make_ipv4_fragment(&mut fragment, 185, true);
    let fragment: [u8; Gen::FRAME_LEN] = fragment.as_slice().try_into().expect("60-byte frame");
    type Config<'a> = (&'a str, bool, &'a [[u8; Gen::FRAME_LEN]], &'a dyn Fn());
    let configs: [Config; 11] = [
        ("router (50 prefixes)", true, &[], &|| {}),
        (
            "router at XDP, partial UDP checksums (TC stage)",
            true,
            std::slice::from_ref(&partial),
            &|| {},
        ),
        (
            "router, IPv4 fragments",
            true,
            std::slice::from_ref(&fragment),
            &|| {},
        ),
        ("router, route cache off", false, &[], &|| {}),
        // The flow's route with two next hops (the same one twice): every packet asks the
        // FIB, and reads the sysctl gate that a hash policy write closes (docs/FASTPATH.md,
        // "ECMP").
        (
            "router, ECMP route (the sysctl gate read)",
            true,
            &[],
            &|| {
                lab.dut
                    .ip(&[
                        "route",
                        "replace",
                        "198.19.7.0/24",
                        "nexthop",
                        "via",
                        "198.18.1.2",
                        "nexthop",
                        "via",
                        "198.18.1.2",
                    ])
                    .unwrap();
            },
        ),
        // A tc classifier of the user's on d0's ingress (it matches everything and only
        // counts): it runs after XDP, so d0's packets are the kernel's.
        (
            "router, a tc classifier on d0's ingress (to the kernel)",
            true,
            &[],
            &|| {
                lab.dut
                    .ip(&["route", "replace", "198.19.7.0/24", "via", "198.18.1.2"])
                    .unwrap();
                for cmd in [
                    "qdisc add dev d0 clsact",
                    "filter add dev d0 ingress protocol all prio 1 u32 match u32 0 0",
                ] {
                    lab.dut
                        .exec("tc", &cmd.split(' ').collect::<Vec<_>>())
                        .unwrap();
                }
            },
        ),
        (
            "router, 4,096 destinations round robin",
            true,
            &spread,
            &|| {
                lab.dut
                    .exec("tc", &["qdisc", "del", "dev", "d0", "clsact"])
                    .unwrap();
            },
        ),
        // Debian's default (sysctl.d/50-default.conf), which new namespaces inherit: the
        // router checks each packet's source with a second FIB lookup. Before the gateway
        // rows, which set it back to 0 and build on each other's rules (the ipset is what the
        // response times poll).
        (
            "router, rp_filter 2 (loose: Debian's default)",
            true,
            &[],
            &|| {
                for dev in ["d0", "d1"] {
                    lab.dut
                        .sysctl(&format!("net.ipv4.conf.{dev}.rp_filter"), "2")
                        .unwrap();
                }
            },
        ),
        // A source-based policy rule (table 100 is empty, so every lookup falls through to
        // main): the router stays on, with its caches off and the source checked as the
        // kernel does with custom rules. Before, IPv4 went to the kernel (about 1.0x).
        (
            "router, a policy rule (from 198.18.0.0/24), rp_filter 2",
            true,
            &[],
            &|| {
                lab.dut
                    .ip(&[
                        "rule",
                        "add",
                        "from",
                        "198.18.0.0/24",
                        "table",
                        "100",
                        "pref",
                        "100",
                    ])
                    .unwrap();
            },
        ),
        ("gateway (100 iptables rules)", true, &[], &|| {
            let _ = lab.dut.ip(&["rule", "del", "pref", "100"]);
            for dev in ["d0", "d1"] {
                lab.dut
                    .sysctl(&format!("net.ipv4.conf.{dev}.rp_filter"), "0")
                    .unwrap();
            }
            let mut rules = String::from("*filter\n:FORWARD ACCEPT [0:0]\n");
            for x in 0..100 {
                rules.push_str(&format!(
                    "-A FORWARD -s 198.18.{}.{}/32 -d 198.19.{}.0/24 -j DROP\n",
                    100 + x / 200,
                    x % 200 + 1,
                    x % 50
                ));
            }
            rules.push_str("COMMIT\n");
            use std::io::Write;
            let mut c = lab
                .dut
                .command("iptables-nft-restore")
                .stdin(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            c.stdin.take().unwrap().write_all(rules.as_bytes()).unwrap();
            assert!(c.wait().unwrap().success());
        }),
        ("gateway (one ipset, 100 members)", true, &[], &|| {
            lab.dut.exec("iptables-nft", &["-F", "FORWARD"]).unwrap();
            let mut restore = String::from("create blk hash:ip family inet\n");
            for x in 0..100 {
                restore.push_str(&format!(
                    "add blk 198.18.{}.{}\n",
                    100 + x / 200,
                    x % 200 + 1
                ));
            }
            use std::io::Write;
            let mut c = lab
                .dut
                .command("ipset")
                .arg("restore")
                .stdin(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            c.stdin
                .take()
                .unwrap()
                .write_all(restore.as_bytes())
                .unwrap();
            assert!(c.wait().unwrap().success());
            lab.dut
                .exec(
                    "iptables-nft",
                    &[
                        "-A",
                        "FORWARD",
                        "-m",
                        "set",
                        "--match-set",
                        "blk",
                        "src",
                        "-j",
                        "DROP",
                    ],
                )
                .unwrap();
        }),
    ];
    let ends = Ends {
        src: &lab.src,
        dut: &lab.dut,
        sink: &lab.sink,
    };
    let d0 = ifindex(&lab.dut, "d0");
    let mut local_rows = Vec::new();
    // A routed row both ways: through the veths, printed now, and on the DUT, printed with
    // the others at the end.
    let mut both_ways = |name: &str, fp: Fp, frame: &[u8]| {
        let row = compare(name, rounds, &lab.dut, fp, &|| {
            measure(&ends, &gen, frame, warm, secs)
        });
        println!("{row}");
        let fp = Fp {
            unbound: true,
            ..fp
        };
        local_rows.push(compare(name, rounds, &lab.dut, fp, &|| {
            measure_local(&ends, d0, &gen, frame, warm, secs)
        }));
    };
    const ROUTED: Fp = Fp {
        hook: BridgeHook::Auto,
        route_cache: true,
        unbound: false,
    };

    // The sink's veth as the kernel leaves it (no XDP program, GRO off): an XDP redirect
    // into d1 would be dropped, so the fast path routes at TC ingress. Counted by a TC sink.
    let name = "router at TC (sink veth at kernel defaults)";
    if wanted(name) {
        drop(sink.take());
        lab.sink
            .exec("ethtool", &["-K", "s0", "gro", "off"])
            .unwrap();
        let g = gen.clone();
        let tc_sink = spawn_in_ns(lab.sink.name(), move || g.attach_sink_tc(sink_if).unwrap())
            .join()
            .unwrap();
        both_ways(name, ROUTED, &frame);
        drop(tc_sink);
        lab.sink
            .exec("ethtool", &["-K", "s0", "gro", "on"])
            .unwrap();
        let g = gen.clone();
        sink = Some(
            spawn_in_ns(lab.sink.name(), move || g.attach_sink(sink_if).unwrap())
                .join()
                .unwrap(),
        );
    }
    // IPv6: one flow to fd00:c::7 (routed via the sink, fd00:b::2), 64-byte frames (the
    // smallest UDP datagram with 2 bytes of payload). The generator writes the first 60
    // bytes of each frame from its table; the other 4 are the run's own input frame, the
    // same frame.
    let name = "router, IPv6 (1 prefix)";
    if wanted(name) {
        for (dev, addr, m) in [("d1", "fd00:b::2", sink_mac), ("d0", "fd00:a::1", src_mac)] {
            lab.dut
                .ip(&[
                    "-6",
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
        let frame6 = pkt::ipv6(
            dut_mac,
            src_mac,
            "fd00:a::1".parse::<std::net::Ipv6Addr>().unwrap().octets(),
            "fd00:c::7".parse::<std::net::Ipv6Addr>().unwrap().octets(),
            64,
            false,
            &L4::Udp {
                sport: 1000,
                dport: 2000,
                payload: vec![0; 2],
            },
        );
        let head: [u8; Gen::FRAME_LEN] = frame6[..Gen::FRAME_LEN].try_into().unwrap();
        gen.set_frames(&[head]).unwrap();
        both_ways(name, ROUTED, &frame6);
        gen.set_frames(&[]).unwrap();
    }
    for (name, route_cache, frames, setup) in configs {
        setup();
        if !wanted(name) {
            continue;
        }
        gen.set_frames(frames).unwrap();
        let fp = Fp {
            hook: BridgeHook::Auto,
            route_cache,
            unbound: false,
        };
        both_ways(name, fp, &frame);
    }
    gen.set_frames(&[]).unwrap();
    drop(sink);

    // The bridge: the same generator, frames addressed to the sink's MAC across br0.
    let br = bridge_line("bb");
    let br_ends = Ends {
        src: &br.src,
        dut: &br.dut,
        sink: &br.sink,
    };
    let (bsrc_mac, bsink_mac) = (mac(&br.src, "v0"), mac(&br.sink, "s0"));
    // Static FDB entries: the sink sends nothing, so it would never be learned.
    for (m, dev) in [(bsrc_mac, "d0"), (bsink_mac, "d1")] {
        br.dut
            .exec(
                "bridge",
                &["fdb", "replace", &fmt(m), "dev", dev, "master", "static"],
            )
            .unwrap();
    }
    br.dut.exec("ethtool", &["-K", "d0", "gro", "on"]).unwrap();
    br.dut
        .exec("sh", &["-c", "echo 1 > /sys/class/net/d0/threaded"])
        .unwrap();
    let bframe = pkt::ipv4(
        bsink_mac,
        bsrc_mac,
        [198, 18, 2, 1],
        [198, 18, 2, 2],
        64,
        &[],
        &L4::Udp {
            sport: 1000,
            dport: 2000,
            payload: vec![0; 18],
        },
    );
    let bgen = Arc::new(Gen::load(bframe.as_slice().try_into().expect("60-byte frame")).unwrap());
    let bsink_if = ifindex(&br.sink, "s0");
    let g = bgen.clone();
    let _bsink = spawn_in_ns(br.sink.name(), move || g.attach_sink(bsink_if).unwrap())
        .join()
        .unwrap();
    let name = "bridge (2 ports, XDP)";
    if wanted(name) {
        let fp = Fp {
            hook: BridgeHook::Xdp,
            route_cache: true,
            unbound: false,
        };
        let row = compare(name, rounds, &br.dut, fp, &|| {
            measure(&br_ends, &bgen, &bframe, warm, secs)
        });
        println!("{row}");
        let bd0 = ifindex(&br.dut, "d0");
        let fp = Fp {
            unbound: true,
            ..fp
        };
        local_rows.push(compare(name, rounds, &br.dut, fp, &|| {
            measure_local(&br_ends, bd0, &bgen, &bframe, warm, secs)
        }));
    }
    drop(_bsink);

    println!();
    println!(
        "The same, with the frames arriving on d0 from BPF_PROG_RUN live frames run in the DUT's"
    );
    println!(
        "namespace on CPU 1 (gen_rx: the program on d0 by tail call, else the kernel's stack):"
    );
    println!("generator, DUT and sink share one core, which is always busy; no veth wake-ups.");
    println!();
    println!("| config | Linux Mpps (median) | fast path Mpps (median) | ratio median (min-max) | frames run Mpps | CPU1 busy L / FP |");
    println!("|---|---|---|---|---|---|");
    for row in &local_rows {
        println!("{row}");
    }

    if only.is_some() {
        return;
    }
    pod::pod_to_pod(secs, rounds);

    responses::routed(&lab.dut);
    fulltable::run(&lab.dut);
    responses::bridged(&br.dut);
}

/// Runs `f` with the daemon attached in `dut`, checking that something was fast-pathed.
/// How the fast path's daemon runs in a row.
#[derive(Clone, Copy)]
struct Fp {
    hook: BridgeHook,
    route_cache: bool,
    /// On the DUT: the generator tail-calls the port's program, which a device-bound one (a
    /// veth's, which asks the driver for VLAN tags) refuses, so the program is loaded unbound.
    unbound: bool,
}

fn with_daemon<T>(dut: &wirespeed_lab::Netns, fp: Fp, name: &str, f: impl FnOnce() -> T) -> T {
    let mut d = RunningDaemon::start_config(
        dut,
        wirespeed_fp::daemon::Config {
            bridge_hook: fp.hook,
            route_cache: fp.route_cache,
            unbound_xdp: fp.unbound,
            ..Default::default()
        },
    );
    d.wait_for("attached", |s| {
        s.ports.len() == 2 && s.ports.iter().all(|p| !p.modules.is_empty())
    });
    let out = f();
    let s = d.status().unwrap();
    if std::env::var_os("FP_BENCH_DEBUG").is_some() {
        eprintln!(
            "{:?}",
            s.ports
                .iter()
                .map(|p| (&p.name, &p.reasons))
                .collect::<Vec<_>>()
        );
    }
    d.stop();
    // A row that says so in its name measures what the fast path leaves to the kernel.
    let to_kernel = name.contains("(to the kernel)");
    assert!(
        s.ports.iter().any(|p| p.fast_pathed > 0) != to_kernel,
        "{name}: fast-pathed {}: {:?}",
        s.ports.iter().map(|p| p.fast_pathed).sum::<u64>(),
        s.ports
    );
    // Rows of partial checksums at XDP say so in their name: the TC stage behind the XDP
    // router routes them, none goes to the kernel.
    if name.contains("(TC stage)") {
        assert!(
            s.ports
                .iter()
                .all(|p| !p.reasons.contains_key("pass_csum_partial")),
            "{name}: partial checksums went to the kernel: {:?}",
            s.ports
        );
    }
    out
}

/// `rounds` of Linux then fast path (the daemon in `dut`, run as `opts` says), each
/// measured by `m`; prints one table row of medians and ratios.
fn compare(
    name: &str,
    rounds: usize,
    dut: &wirespeed_lab::Netns,
    opts: Fp,
    m: &dyn Fn() -> Sample,
) -> String {
    let (mut lin, mut fp, mut ratios, mut offered) = (vec![], vec![], vec![], vec![]);
    let (mut cpu_l, mut cpu_f) = (vec![], vec![]);
    for _ in 0..rounds {
        let l = m();
        let f = with_daemon(dut, opts, name, m);
        ratios.push(f.pps / l.pps.max(1.0));
        lin.push(l.pps);
        fp.push(f.pps);
        offered.push(l.offered.max(f.offered));
        cpu_l.push(l.cpu1);
        cpu_f.push(f.cpu1);
    }
    let (rmin, rmax) = (
        ratios.iter().cloned().fold(f64::MAX, f64::min),
        ratios.iter().cloned().fold(0.0, f64::max),
    );
    format!(
        "| {name} | {:.3} | {:.3} | {:.2}x ({:.2}-{:.2}) | {:.2} | {:.0}% / {:.0}% |",
        median(&mut lin) / 1e6,
        median(&mut fp) / 1e6,
        median(&mut ratios),
        rmin,
        rmax,
        median(&mut offered) / 1e6,
        median(&mut cpu_l) * 100.0,
        median(&mut cpu_f) * 100.0
    )
}

fn pct(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * q).round() as usize]
}
