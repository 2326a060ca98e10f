//! The load balancer's XDP program alone: what one packet costs it, per mode and packet
//! class, as the kernel clocks it under BPF_PROG_TEST_RUN. No veth, no generator and no
//! receiving CPU take part, so a change to the program (a check, a lookup) shows at a
//! resolution lb_bench's whole-path rows cannot give on a small VM (docs/BENCHMARKS.md, 8a).
//!
//! Each run is one BPF_PROG_TEST_RUN with `repeat` 1: the program rewrites its frame, and a
//! second repeat would see its own output. The kernel's clock covers the program alone, plus
//! a constant for the clock reads, which the `floor` row (a frame to no VIP) shows. The FIB
//! lookups are real, in the lab namespace the fixtures use (wirespeed_testkit::lb_lab). Run as root:
//!   cargo run --release -p wirespeed-lb --example lb_prog_bench -- [runs] [rounds] [--json]
//! Defaults: 200,000 runs a row a round (SYN and new UDP flow rows 30,000), 5 rounds; a row's
//! figure is the median of its rounds' per-run medians, with the rounds' range.

use std::net::SocketAddr;

use wirespeed_lb::datapath::{AttachConfig, XdpDataPlane, XDP_PASS, XDP_REDIRECT, XDP_TX};
use wirespeed_lb::model::{
    DataPlane, Mode, Plan, PlannedReal, PlannedService, Proto, Scheduler, ServiceKey,
};
use wirespeed_testkit::frame::*;
use wirespeed_testkit::lb_lab::{ip, lab, pin, Lab, REAL_MACS, ROUTER_MAC};

/// The lookup ring: a small prime, as the fixtures'.
const RING: u32 = 7;
const VIP: &str = "198.18.100.1";
const REAL: &str = "198.18.2.10";
const LADDR: &str = "198.18.2.1";
/// Established flows the ACK and UDP rows cycle through (source ports from 20,000).
const FLOWS: u16 = 256;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Class {
    Syn,
    Ack,
    Udp,
    UdpNew,
}

/// A plan with a TCP and a UDP service on VIP:80, one real in `mode` at REAL:8080.
fn plan(mode: Mode) -> Plan {
    let service = |proto| PlannedService {
        key: ServiceKey {
            proto,
            vip: SocketAddr::new(ip(VIP), 80),
        },
        scheduler: Scheduler::Mh,
        lookup: vec![if proto == Proto::Tcp { 0 } else { 1 }; RING as usize],
        laddrs: if mode == Mode::FullNat {
            vec![ip(LADDR)]
        } else {
            Vec::new()
        },
        toa: false,
    };
    let real = |service| {
        Some(PlannedReal {
            service,
            addr: SocketAddr::new(ip(REAL), 8080),
            mode,
            tunnel: Default::default(),
        })
    };
    Plan {
        ring_size: RING,
        services: vec![service(Proto::Tcp), service(Proto::Udp)],
        reals: vec![real(0), real(1)],
    }
}

fn client_frame(lab: &Lab, sport: u16, class: Class) -> Vec<u8> {
    let l4 = match class {
        Class::Syn => tcp(sport, 80, SYN),
        Class::Ack => tcp(sport, 80, ACK),
        Class::Udp | Class::UdpNew => udp(sport, 80),
    };
    frame(lab.in_mac, ROUTER_MAC, ip("198.18.50.5"), ip(VIP), &l4)
}

fn source_port(frame: &[u8]) -> u16 {
    u16::from_be_bytes([frame[34], frame[35]])
}

/// Takes flow `sport` through its whole handshake (SYN, the real's SYN-ACK, the client's ACK),
/// so that its ACKs are an established connection's in every mode.
fn establish(lab: &Lab, dp: &XdpDataPlane, mode: Mode, sport: u16) {
    let (v, out) = dp
        .test_run(&client_frame(lab, sport, Class::Syn), lab.in_idx)
        .expect("test run");
    assert_eq!(
        v, XDP_REDIRECT,
        "{mode:?}: the SYN of flow {sport} goes to the real"
    );
    let reply = match mode {
        Mode::Nat => Some(("198.18.50.5", sport)),
        Mode::FullNat => Some((LADDR, source_port(&out))),
        _ => None,
    };
    if let Some((to, port)) = reply {
        let syn_ack = frame(
            lab.out_mac,
            REAL_MACS[0],
            ip(REAL),
            ip(to),
            &tcp(8080, port, SYN | ACK),
        );
        let (v, _) = dp.test_run(&syn_ack, lab.out_idx).expect("test run");
        assert_eq!(v, XDP_REDIRECT, "{mode:?}: the real's SYN-ACK goes back");
    }
    let (v, _) = dp
        .test_run(&client_frame(lab, sport, Class::Ack), lab.in_idx)
        .expect("test run");
    assert_eq!(
        v, XDP_REDIRECT,
        "{mode:?}: the handshake's ACK goes to the real"
    );
}

/// The median ns a run over `runs` runs of `next(i)`'s frames, every verdict `want`. The
/// median, not the mean: a run the hypervisor or an interrupt stretched is one run, not a
/// shift of the row.
fn clock(
    dp: &XdpDataPlane,
    lab: &Lab,
    runs: u32,
    want: &[u32],
    next: impl Fn(u32) -> Vec<u8>,
) -> f64 {
    let frames: Vec<Vec<u8>> = (0..runs).map(next).collect();
    let mut ns: Vec<f64> = frames
        .iter()
        .map(|f| {
            let (v, _, ns) = dp
                .program()
                .test_run_timed(f, lab.in_idx)
                .expect("test run");
            assert!(want.contains(&v), "verdict {v}, expected one of {want:?}");
            ns as f64
        })
        .collect();
    median(&mut ns)
}

/// One round of one row: a fresh program, its flows established, `runs` runs clocked.
fn round(lab: &Lab, mode: Option<Mode>, class: Class, runs: u32) -> f64 {
    // The fixtures' small tables (tests/fixtures/lab.rs), room for every flow, no rate guard.
    let cfg = AttachConfig {
        ring_size: RING,
        max_services: 8,
        max_reals: 16,
        conns_per_cpu: 65_536,
        new_conns_per_sec_per_cpu: 0,
        ..AttachConfig::default()
    };
    let mut dp = XdpDataPlane::load(&cfg).expect("load the program");
    let Some(mode) = mode else {
        // The floor: a frame to an address that is no VIP goes to the kernel untouched.
        dp.apply(&plan(Mode::Dr)).expect("apply");
        let f = frame(
            lab.in_mac,
            ROUTER_MAC,
            ip("198.18.50.5"),
            ip("198.18.2.10"),
            &udp(20000, 80),
        );
        return clock(&dp, lab, runs, &[XDP_PASS], |_| f.clone());
    };
    dp.apply(&plan(mode)).expect("apply");
    let forward = [XDP_REDIRECT, XDP_TX];
    match class {
        // A new connection each run, from source ports no other run used (at most 30,000,
        // under one CPU's 32,256 full-NAT local ports, so none is refused for want of one).
        Class::Syn | Class::UdpNew => clock(&dp, lab, runs.min(30_000), &forward, |i| {
            client_frame(lab, 20_000 + i as u16, class)
        }),
        Class::Ack => {
            for p in 0..FLOWS {
                establish(lab, &dp, mode, 20_000 + p);
            }
            clock(&dp, lab, runs, &forward, |i| {
                client_frame(lab, 20_000 + (i % FLOWS as u32) as u16, Class::Ack)
            })
        }
        Class::Udp => {
            for p in 0..FLOWS {
                let f = client_frame(lab, 20_000 + p, Class::Udp);
                dp.test_run(&f, lab.in_idx).expect("test run");
            }
            clock(&dp, lab, runs, &forward, |i| {
                client_frame(lab, 20_000 + (i % FLOWS as u32) as u16, Class::Udp)
            })
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!(
            "usage: lb_prog_bench [runs] [rounds] [--json]\n  runs: BPF_PROG_TEST_RUNs a row \
             a round (default 200000; SYN and new-flow rows at most 30000)\n  rounds: rounds a row \
             (default 5)\n  --json: the figures as JSON on stdout"
        );
        return;
    }
    let json = args.iter().any(|a| a == "--json");
    args.retain(|a| a != "--json");
    if !wirespeed_sys::process::is_root() {
        eprintln!(
            "lb_prog_bench builds a network namespace and loads XDP programs: run it as root"
        );
        std::process::exit(2);
    }
    let runs: u32 = args.first().and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let rounds: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(5);
    let mut rows: Vec<(String, Option<Mode>, Class)> =
        vec![("floor: a frame to no VIP".into(), None, Class::Udp)];
    for (name, mode) in [
        ("DR", Mode::Dr),
        ("tunnel (IPIP)", Mode::Tunnel),
        ("NAT", Mode::Nat),
        ("full-NAT", Mode::FullNat),
    ] {
        for (cname, class) in [
            ("TCP SYN, new connection", Class::Syn),
            ("TCP ACK, established", Class::Ack),
            ("UDP, established", Class::Udp),
            ("UDP, new flow", Class::UdpNew),
        ] {
            rows.push((format!("{name} {cname}"), Some(mode), class));
        }
    }
    let (ns, lab) = lab("pb");
    let results = ns
        .run(move || {
            pin(0);
            let mut per_row = vec![Vec::new(); rows.len()];
            // Rows alternate within a round, so that a slow spell of the VM spreads over all.
            for r in 0..rounds {
                eprintln!("lb_prog_bench: round {}/{rounds}", r + 1);
                for (i, (_, mode, class)) in rows.iter().enumerate() {
                    per_row[i].push(round(&lab, *mode, *class, runs));
                }
            }
            rows.into_iter()
                .map(|r| r.0)
                .zip(per_row)
                .collect::<Vec<_>>()
        })
        .expect("run in the lab namespace");
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    if json {
        let rows: Vec<serde_json::Value> = results
            .into_iter()
            .map(|(name, mut v)| {
                let (lo, hi) = (
                    v.iter().cloned().fold(f64::MAX, f64::min),
                    v.iter().cloned().fold(0.0, f64::max),
                );
                serde_json::json!({"row": name, "ns": median(&mut v), "min": lo, "max": hi})
            })
            .collect();
        let doc = serde_json::json!({"kernel": kernel.trim(), "runs": runs, "rounds": rounds, "rows": rows});
        println!("{}", serde_json::to_string_pretty(&doc).expect("json"));
        return;
    }
    println!("| row | ns a packet (median of {rounds} rounds) | rounds' range |");
    println!("|---|---:|---|");
    for (name, mut v) in results {
        let (lo, hi) = (
            v.iter().cloned().fold(f64::MAX, f64::min),
            v.iter().cloned().fold(0.0, f64::max),
        );
        println!("| {name} | {:.1} | {lo:.1}-{hi:.1} |", median(&mut v));
    }
    eprintln!("# Linux {}, {runs} runs a row a round", kernel.trim());
}
