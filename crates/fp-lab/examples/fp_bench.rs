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

mod fulltable;
mod pod;
mod responses;
mod routed;
mod scrape;
mod vm;

use std::sync::Arc;
use std::time::{Duration, Instant};

use wirespeed_fp::model::BridgeHook;
use wirespeed_fp_lab::line::*;
use wirespeed_testkit::frame::{self as pkt, L4};
use wirespeed_testkit::netns::{mac, mac_str};
use wirespeed_xdpgen::{Gen, Link};

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
        wirespeed_load::cpu::jiffies_per_cpu(),
    );
    std::thread::sleep(secs);
    let (c1, t1, u1) = (
        gen.sink_count().unwrap(),
        Instant::now(),
        wirespeed_load::cpu::jiffies_per_cpu(),
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
    wirespeed_load::stats::median(v.iter().copied()).unwrap_or(f64::NAN)
}

/// `[secs] [rounds] [row]` from the command line (see the module doc).
struct Args {
    secs: Duration,
    rounds: usize,
    /// Only the pps rows whose name contains it (for profiling one row), or one of the
    /// parts the module doc names; the response times then do not run.
    only: Option<String>,
}

impl Args {
    fn parse() -> Args {
        let args: Vec<String> = std::env::args().collect();
        Args {
            secs: Duration::from_secs(args.get(1).and_then(|s| s.parse().ok()).unwrap_or(3)),
            rounds: args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3),
            only: args.get(3).cloned(),
        }
    }

    fn wanted(&self, name: &str) -> bool {
        self.only.as_deref().is_none_or(|o| name.contains(o))
    }
}

const WARM: Duration = Duration::from_secs(1);

/// The line lab's MACs: the generator's `v0`, the DUT's `d0` and the sink's `s0`.
struct Macs {
    src: [u8; 6],
    dut: [u8; 6],
    sink: [u8; 6],
}

/// Static neighbours both ways (the sink sends nothing to be learned from), GRO on d0 so that
/// it runs NAPI for the generator's XDP_TX frames even without our program, and threaded
/// NAPI, so that the DUT's receive work runs in a kthread we can pin apart from the generator.
fn prepare_line(lab: &Line) -> Macs {
    let macs = Macs {
        src: mac(&lab.src, "v0"),
        dut: mac(&lab.dut, "d0"),
        sink: mac(&lab.sink, "s0"),
    };
    for (addr, m, dev) in [
        ("198.18.1.2", macs.sink, "d1"),
        ("198.18.0.1", macs.src, "d0"),
    ] {
        let lladdr = mac_str(m);
        lab.dut
            .ip(&[
                "neigh",
                "replace",
                addr,
                "lladdr",
                &lladdr,
                "dev",
                dev,
                "nud",
                "permanent",
            ])
            .unwrap();
    }
    lab.dut.exec("ethtool", &["-K", "d0", "gro", "on"]).unwrap();
    lab.dut
        .exec("sh", &["-c", "echo 1 > /sys/class/net/d0/threaded"])
        .unwrap();
    macs
}

/// The generator's XDP sink on the sink namespace's `s0`.
fn xdp_sink(ns: &wirespeed_lab::Netns, gen: &Arc<Gen>) -> Link {
    let (g, sink_if) = (gen.clone(), ifindex(ns, "s0"));
    spawn_in_ns(ns.name(), move || g.attach_sink(sink_if).unwrap())
        .join()
        .unwrap()
}

/// Measures rows both ways and keeps the rows measured on the DUT, which are printed after
/// the others.
struct Bench<'a> {
    args: &'a Args,
    ends: Ends<'a>,
    d0: u32,
    gen: &'a Arc<Gen>,
    local_rows: &'a mut Vec<String>,
}

impl Bench<'_> {
    /// A row through the veths, printed now, and the same on the DUT, kept for the end.
    fn both_ways(&mut self, name: &str, fp: Fp, frame: &[u8]) {
        let (secs, rounds) = (self.args.secs, self.args.rounds);
        let row = compare(name, rounds, self.ends.dut, fp, &|| {
            measure(&self.ends, self.gen, frame, WARM, secs)
        });
        println!("{row}");
        let fp = Fp {
            unbound: true,
            ..fp
        };
        let local = compare(name, rounds, self.ends.dut, fp, &|| {
            measure_local(&self.ends, self.d0, self.gen, frame, WARM, secs)
        });
        self.local_rows.push(local);
    }
}

const ROUTED: Fp = Fp {
    hook: BridgeHook::Auto,
    route_cache: true,
    unbound: false,
};

/// The sink's veth as the kernel leaves it (no XDP program, GRO off): an XDP redirect into d1
/// would be dropped, so the fast path routes at TC ingress. Counted by a TC sink, while the
/// XDP sink is away.
fn router_at_tc(bench: &mut Bench, sink: &mut Option<Link>, frame: &[u8]) {
    let name = "router at TC (sink veth at kernel defaults)";
    let ns = bench.ends.sink;
    drop(sink.take());
    ns.exec("ethtool", &["-K", "s0", "gro", "off"]).unwrap();
    let (g, sink_if) = (bench.gen.clone(), ifindex(ns, "s0"));
    let tc_sink = spawn_in_ns(ns.name(), move || g.attach_sink_tc(sink_if).unwrap())
        .join()
        .unwrap();
    bench.both_ways(name, ROUTED, frame);
    drop(tc_sink);
    ns.exec("ethtool", &["-K", "s0", "gro", "on"]).unwrap();
    *sink = Some(xdp_sink(ns, bench.gen));
}

/// IPv6: one flow to fd00:c::7 (routed via the sink, fd00:b::2), 64-byte frames (the smallest
/// UDP datagram with 2 bytes of payload). The generator writes the first 60 bytes of each
/// frame from its table; the other 4 are the run's own input frame, the same frame.
fn router_ipv6(bench: &mut Bench, macs: &Macs) {
    for (dev, addr, m) in [
        ("d1", "fd00:b::2", macs.sink),
        ("d0", "fd00:a::1", macs.src),
    ] {
        let lladdr = mac_str(m);
        bench
            .ends
            .dut
            .ip(&[
                "-6",
                "neigh",
                "replace",
                addr,
                "lladdr",
                &lladdr,
                "dev",
                dev,
                "nud",
                "permanent",
            ])
            .unwrap();
    }
    let frame6 = pkt::ipv6(
        macs.dut,
        macs.src,
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
    bench.gen.set_frames(&[head]).unwrap();
    bench.both_ways("router, IPv6 (1 prefix)", ROUTED, &frame6);
    bench.gen.set_frames(&[]).unwrap();
}

/// The routed rows on the line lab, then the bridge's on a lab of its own, which it returns
/// (the response times use it); with `scrape`, only the scrape comparison, and no bridge lab.
fn pps_rows(
    args: &Args,
    lab: &Line,
    macs: &Macs,
    local_rows: &mut Vec<String>,
) -> Option<BridgeLine> {
    let frame = pkt::ipv4(
        macs.dut,
        macs.src,
        [198, 18, 0, 1],
        [198, 19, 7, 1],
        64,
        &[],
        &udp18(),
    );
    let gen = Arc::new(Gen::load(frame.as_slice().try_into().expect("60-byte frame")).unwrap());
    let mut sink = Some(xdp_sink(&lab.sink, &gen));
    print_header(args);
    let ends = Ends {
        src: &lab.src,
        dut: &lab.dut,
        sink: &lab.sink,
    };
    let d0 = ifindex(&lab.dut, "d0");
    if args.only.as_deref() == Some("scrape") {
        scrape::run(&ends, d0, &gen, &frame, (WARM, args.secs, args.rounds));
        return None;
    }
    println!("| config | Linux Mpps (median) | fast path Mpps (median) | ratio median (min-max) | offered Mpps | DUT CPU1 busy L / FP |");
    println!("|---|---|---|---|---|---|");
    let mut bench = Bench {
        args,
        ends,
        d0,
        gen: &gen,
        local_rows,
    };
    if args.wanted("router at TC (sink veth at kernel defaults)") {
        router_at_tc(&mut bench, &mut sink, &frame);
    }
    if args.wanted("router, IPv6 (1 prefix)") {
        router_ipv6(&mut bench, macs);
    }
    let frames = routed::Frames::new(&frame, macs.dut, macs.src);
    for row in routed::rows(&frames) {
        (row.setup)(&lab.dut);
        if !args.wanted(row.name) {
            continue;
        }
        gen.set_frames(row.frames).unwrap();
        let fp = Fp {
            route_cache: row.route_cache,
            ..ROUTED
        };
        bench.both_ways(row.name, fp, &frame);
    }
    gen.set_frames(&[]).unwrap();
    drop(sink);
    Some(bridge_rows(args, bench.local_rows))
}

fn print_header(args: &Args) {
    let arms = if args.only.as_deref() == Some("scrape") {
        "fast path not scraped and scraped"
    } else {
        "Linux and fast path"
    };
    println!(
        "fp_bench: {} s measured after {} s warm-up, {} rounds, {arms} alternating",
        args.secs.as_secs(),
        WARM.as_secs(),
        args.rounds
    );
    println!("generator: BPF_PROG_RUN live frames (XDP_TX) on CPU 0; DUT veth NAPI threads on CPU 1 ({} pinned)", pin_napi());
    println!();
}

/// The bridge: the same kind of generator, frames addressed to the sink's MAC across br0.
fn bridge_rows(args: &Args, local_rows: &mut Vec<String>) -> BridgeLine {
    let br = bridge_line("bb");
    let (bsrc_mac, bsink_mac) = (mac(&br.src, "v0"), mac(&br.sink, "s0"));
    // Static FDB entries: the sink sends nothing, so it would never be learned.
    for (m, dev) in [(bsrc_mac, "d0"), (bsink_mac, "d1")] {
        br.dut
            .exec(
                "bridge",
                &[
                    "fdb",
                    "replace",
                    &mac_str(m),
                    "dev",
                    dev,
                    "master",
                    "static",
                ],
            )
            .unwrap();
    }
    br.dut.exec("ethtool", &["-K", "d0", "gro", "on"]).unwrap();
    br.dut
        .exec("sh", &["-c", "echo 1 > /sys/class/net/d0/threaded"])
        .unwrap();
    let name = "bridge (2 ports, XDP)";
    if !args.wanted(name) {
        return br;
    }
    let bframe = pkt::ipv4(
        bsink_mac,
        bsrc_mac,
        [198, 18, 2, 1],
        [198, 18, 2, 2],
        64,
        &[],
        &udp18(),
    );
    let bgen = Arc::new(Gen::load(bframe.as_slice().try_into().expect("60-byte frame")).unwrap());
    let bsink = xdp_sink(&br.sink, &bgen);
    let mut bench = Bench {
        args,
        ends: Ends {
            src: &br.src,
            dut: &br.dut,
            sink: &br.sink,
        },
        d0: ifindex(&br.dut, "d0"),
        gen: &bgen,
        local_rows,
    };
    let fp = Fp {
        hook: BridgeHook::Xdp,
        ..ROUTED
    };
    bench.both_ways(name, fp, &bframe);
    drop(bsink);
    br
}

fn print_local_rows(rows: &[String]) {
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
    for row in rows {
        println!("{row}");
    }
}

fn main() {
    let args = Args::parse();
    match args.only.as_deref() {
        Some("pod") => return pod::pod_to_pod(args.secs, args.rounds),
        Some("vm") => return vm::vm_bridge(args.secs, args.rounds),
        _ => {}
    }
    let lab = line("b");
    if args.only.as_deref() == Some("routes") {
        return fulltable::run(&lab.dut);
    }
    let macs = prepare_line(&lab);
    let mut local_rows = Vec::new();
    let Some(br) = pps_rows(&args, &lab, &macs, &mut local_rows) else {
        return;
    };
    print_local_rows(&local_rows);
    if args.only.is_some() {
        return;
    }
    pod::pod_to_pod(args.secs, args.rounds);
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
