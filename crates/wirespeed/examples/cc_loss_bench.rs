//! Throughput under loss, by congestion control: our stack with reno and with cubic beside
//! Linux's TCP with the same two, each sending one bulk stream through the lab's impairment
//! link (random loss only) to the same Linux receiver.
//!
//!   flock /tmp/wirespeed-bench.lock cargo run --profile release -p wirespeed \
//!     --example cc_loss_bench -- [--loss 0,0.5,1,2] [--rounds 3] [--secs 2] [--json PATH]
//!
//! Lab (root; its own namespaces, 198.18.52.0/24): sender namespace `s0` (our stack at .2 on
//! an AF_XDP socket, the kernel at .3 on the same interface) <-> impairment link (a middle
//! namespace forwarding with AF_PACKET, `wirespeed_lab::impair`; this kernel has no netem)
//! <-> receiver namespace `c0` (.1, a Linux sink that reads and counts). TX checksum and
//! segmentation offloads are off on both ends, as in `tests/bypass.rs`, so each side sends
//! MSS-sized frames and each frame meets the loss alone.
//!
//! Each round runs, per loss rate, ours-reno, Linux-reno, ours-cubic, Linux-cubic in turn
//! (the alternation of docs/BENCHMARKING.md rule 1); Linux's algorithm is set on its socket
//! (`TCP_CONGESTION`, see `linux_socket`), ours is `StackConfig::congestion_control`.
//! Senders run on CPU 1, the sink on CPU 0; the impairment link's two threads are not
//! pinned. A run counts what the sink received in `--secs` after `--warmup-ms`; the table
//! gives the median of the rounds in Mb/s and the median [min, max] of the pairwise ratios
//! ours/Linux for the same algorithm.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::Parser;
use serde::Serialize;
use wirespeed_lab::impair::{ImpairedLink, Impairment};
use wirespeed_lab::netns::add_addr;
use wirespeed_lab::{Netns, Veth};
use wirespeed_net::bypass::socket::{BypassStack, StackConfig};
use wirespeed_net::bypass::CongestionAlgorithm;
use wirespeed_nic::{AttachScope, Bifurcation, BifurcationConfig, InterfaceInfo};
use wirespeed_nic::{XskConfig, XskSocket};

const SINK: Ipv4Addr = Ipv4Addr::new(198, 18, 52, 1);
const OURS: Ipv4Addr = Ipv4Addr::new(198, 18, 52, 2);
const LINUX: Ipv4Addr = Ipv4Addr::new(198, 18, 52, 3);
const SINK_PORT: u16 = 9000;
const SENDER_CPU: usize = 1;
const SINK_CPU: usize = 0;
const CHUNK: usize = 64 * 1024;

#[derive(Parser)]
struct Args {
    /// Loss rates in percent, each frame each way.
    #[arg(long, value_delimiter = ',', default_value = "0,0.5,1,2")]
    loss: Vec<f64>,
    /// Rounds per loss rate (the table shows medians).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 2.0)]
    secs: f64,
    /// Unmeasured start of each run, milliseconds.
    #[arg(long, default_value_t = 500)]
    warmup_ms: u64,
    /// Write the runs and the table as JSON here as well.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

/// Who sends: our stack or Linux's, with which algorithm.
#[derive(Debug, Clone, Copy, Serialize)]
struct Sender {
    ours: bool,
    cc: &'static str,
}

impl Sender {
    fn label(self) -> String {
        format!("{} {}", if self.ours { "ours" } else { "linux" }, self.cc)
    }
}

const SENDERS: [Sender; 4] = [
    Sender {
        ours: true,
        cc: "reno",
    },
    Sender {
        ours: false,
        cc: "reno",
    },
    Sender {
        ours: true,
        cc: "cubic",
    },
    Sender {
        ours: false,
        cc: "cubic",
    },
];

struct Lab {
    sink: Netns,
    middle: Netns,
    sender: Netns,
}

fn lab() -> anyhow::Result<Lab> {
    wirespeed_lab::require_root();
    let id = std::process::id() % 10000;
    let sink = Netns::create(&format!("ws-ccc{id}"))?;
    let middle = Netns::create(&format!("ws-ccm{id}"))?;
    let sender = Netns::create(&format!("ws-ccs{id}"))?;
    Veth::create(&sink, "c0", &middle, "m0", 1)?;
    Veth::create(&middle, "m1", &sender, "s0", 1)?;
    add_addr(&sink, "c0", "198.18.52.1/24")?;
    add_addr(&sender, "s0", "198.18.52.3/24")?;
    for (ns, dev) in [(&sink, "c0"), (&sender, "s0")] {
        ns.exec(
            "ethtool",
            &["-K", dev, "tx", "off", "tso", "off", "gso", "off"],
        )?;
    }
    Ok(Lab {
        sink,
        middle,
        sender,
    })
}

/// What the sink saw in the measured window.
#[derive(Debug, Clone, Copy, Serialize)]
struct Measured {
    bytes: u64,
    secs: f64,
}

impl Measured {
    fn mbps(self) -> f64 {
        self.bytes as f64 * 8.0 / self.secs / 1e6
    }
}

/// Accepts the connection from `from` (a late duplicate of an earlier run's SYN may wait in
/// the queue before it) and counts what arrives between `warm` and `end` from its accept.
fn sink_one(
    l: &TcpListener,
    from: SocketAddrV4,
    warm: Duration,
    end: Duration,
) -> anyhow::Result<Measured> {
    let give_up = Instant::now() + Duration::from_secs(10);
    l.set_nonblocking(true)?;
    let mut s = loop {
        anyhow::ensure!(
            Instant::now() < give_up,
            "no connection from {from} in 10 s"
        );
        let (s, peer) = match l.accept() {
            Ok(got) => got,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if peer == std::net::SocketAddr::V4(from) || (from.port() == 0 && peer.ip() == *from.ip()) {
            s.set_nonblocking(false)?;
            break s;
        }
    };
    s.set_read_timeout(Some(Duration::from_millis(50)))?;
    let start = Instant::now();
    let mut buf = vec![0u8; CHUNK];
    let (mut total, mut mark) = (0u64, None);
    loop {
        match s.read(&mut buf) {
            Ok(0) => anyhow::bail!("the sender closed before the run ended"),
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.into()),
        }
        let at = start.elapsed();
        if mark.is_none() && at >= warm {
            mark = Some((at, total));
        }
        if at >= end {
            let (t0, b0) = mark.unwrap_or((at, total));
            return Ok(Measured {
                bytes: total - b0,
                secs: (at - t0).as_secs_f64(),
            });
        }
    }
}

/// A kernel TCP socket in the sender namespace, connected to the sink, with the algorithm
/// `cc` set on it (`TCP_CONGESTION`, what the namespace's `net.ipv4.tcp_congestion_control`
/// would give it: a namespace other than the host's may only set the algorithms in the
/// host's `tcp_allowed_congestion_control`, which this leaves as it is).
fn linux_socket(cc: &str) -> anyhow::Result<TcpStream> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    s.set_tcp_congestion(cc.as_bytes())?;
    let set = s.tcp_congestion()?;
    let set = String::from_utf8_lossy(&set);
    let set = set.trim_end_matches('\0');
    anyhow::ensure!(set == cc, "the socket kept {set}, not {cc}");
    s.connect(&SocketAddrV4::new(SINK, SINK_PORT).into())?;
    Ok(s.into())
}

/// Linux sends from the sender namespace's kernel address until the sink hangs up.
fn linux_send(lab: &Lab, cc: &'static str) -> anyhow::Result<()> {
    let mut s = lab.sender.run(move || linux_socket(cc))??;
    wirespeed_sys::process::set_affinity(&[SENDER_CPU])?;
    // A sink that never accepts us must not hold the run for ever.
    s.set_write_timeout(Some(Duration::from_secs(3)))?;
    let buf = vec![0x5au8; CHUNK];
    while s.write_all(&buf).is_ok() {}
    Ok(())
}

/// Our stack sends from 198.18.52.2 on an AF_XDP socket of `s0`, local port `port`, until
/// the sink hangs up or `until` passes.
fn ours_send(lab: &Lab, cc: CongestionAlgorithm, port: u16, until: Instant) -> anyhow::Result<()> {
    lab.sender.run(move || ours_send_in_ns(cc, port, until))?
}

fn ours_send_in_ns(cc: CongestionAlgorithm, port: u16, until: Instant) -> anyhow::Result<()> {
    let info = InterfaceInfo::query("s0")?;
    let mut bcfg = BifurcationConfig::new(OURS);
    bcfg.tcp_ports = vec![port];
    let mut prog = Bifurcation::load(&bcfg)?;
    prog.attach("s0", AttachScope::LabOnly)?;
    let sock = XskSocket::open("s0", 0, &XskConfig::default())?;
    prog.register(&sock)?;
    let mut cfg = StackConfig::for_interface(OURS, 24, &info);
    cfg.max_connections = 16;
    cfg.congestion_control = cc;
    let sock = Mutex::new(Some(sock));
    let out = wirespeed_rt::Runtime::builder()
        .cpus(vec![SENDER_CPU])
        .run(move || {
            let sock = sock.lock().expect("socket").take().expect("one shard");
            let cfg = cfg.clone();
            async move { ours_stream(BypassStack::start(&cfg, sock), port, until).await }
        })?;
    drop(prog);
    out.into_iter()
        .next()
        .unwrap_or(Ok(()))
        .map_err(|e| anyhow::anyhow!(e))
}

async fn ours_stream(stack: BypassStack, port: u16, until: Instant) -> Result<(), String> {
    let remote = SocketAddrV4::new(SINK, SINK_PORT);
    let conn = wirespeed_rt::timeout(
        Duration::from_secs(10),
        stack.connect_with(remote.into(), |p| p == port),
    )
    .await
    .map_err(|_| "connect timed out".to_string())?
    .map_err(|e| format!("connect: {e}"))?;
    let mut conn = wirespeed_net::TcpStream::from(conn);
    let buf = vec![0x5au8; CHUNK];
    while Instant::now() < until {
        match wirespeed_rt::timeout(Duration::from_secs(1), conn.write(&buf)).await {
            Ok(Ok(_)) => {}
            // The sink hung up (its run is over) or stalled: either ends ours.
            _ => break,
        }
    }
    Ok(())
}

/// One run: a sender of `who` streams to the sink; returns what the sink measured.
fn run_once(
    lab: &Lab,
    l: &TcpListener,
    who: Sender,
    port: u16,
    a: &Args,
) -> anyhow::Result<Measured> {
    let warm = Duration::from_millis(a.warmup_ms);
    let end = warm + Duration::from_secs_f64(a.secs);
    let until = Instant::now() + end + Duration::from_secs(2);
    std::thread::scope(|scope| {
        let sender = scope.spawn(move || {
            if who.ours {
                let cc = who.cc.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
                ours_send(lab, cc, port, until)
            } else {
                linux_send(lab, who.cc)
            }
        });
        // Ours comes from its own port; Linux's from the kernel's address, any port.
        let from = if who.ours {
            SocketAddrV4::new(OURS, port)
        } else {
            SocketAddrV4::new(LINUX, 0)
        };
        let sink = scope.spawn(move || {
            wirespeed_sys::process::set_affinity(&[SINK_CPU])?;
            sink_one(l, from, warm, end)
        });
        let measured = sink.join().expect("sink thread");
        if let Err(e) = sender.join().expect("sender thread") {
            eprintln!("cc_loss_bench: {}: {e:#}", who.label());
        }
        measured
    })
}

#[derive(Serialize)]
struct Row {
    loss_pct: f64,
    /// Mb/s per sender (SENDERS order), one per round.
    runs: Vec<Vec<f64>>,
    median_mbps: Vec<f64>,
    /// ours/linux per round: reno, then cubic.
    ratio_reno: Vec<f64>,
    ratio_cubic: Vec<f64>,
    frames_forwarded: u64,
    frames_dropped: u64,
}

fn median(v: &[f64]) -> f64 {
    wirespeed_load::stats::median(v.iter().copied()).unwrap_or(f64::NAN)
}

fn spread(v: &[f64]) -> String {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.2} [{:.2}, {:.2}]", median(v), min, max)
}

/// Every round of every sender at one loss rate.
fn measure_loss(
    lab: &Lab,
    l: &TcpListener,
    loss: f64,
    port: &mut u16,
    a: &Args,
) -> anyhow::Result<Row> {
    let imp = Impairment {
        loss_pct: loss,
        duplicate_pct: 0.0,
        reorder_pct: 0.0,
        seed: 0x5eed ^ (loss * 1000.0) as u64,
    };
    let link = ImpairedLink::start(&lab.middle, "m0", "m1", imp)?;
    let mut runs = vec![Vec::new(); SENDERS.len()];
    for round in 0..a.rounds {
        for (i, who) in SENDERS.into_iter().enumerate() {
            *port += 1;
            let m = run_once(lab, l, who, *port, a)?;
            eprintln!(
                "loss {loss}% round {round}: {:<12} {:8.1} Mb/s",
                who.label(),
                m.mbps()
            );
            runs[i].push(m.mbps());
        }
    }
    let c = &link.counters;
    let (fwd, drop) = (
        c.forwarded.load(std::sync::atomic::Ordering::Relaxed),
        c.dropped.load(std::sync::atomic::Ordering::Relaxed),
    );
    let ratio = |o: usize, k: usize| -> Vec<f64> {
        runs[o].iter().zip(&runs[k]).map(|(x, y)| x / y).collect()
    };
    Ok(Row {
        loss_pct: loss,
        median_mbps: runs.iter().map(|r| median(r)).collect(),
        ratio_reno: ratio(0, 1),
        ratio_cubic: ratio(2, 3),
        runs,
        frames_forwarded: fwd,
        frames_dropped: drop,
    })
}

fn print_table(rows: &[Row], a: &Args) {
    println!(
        "throughput under loss, Mb/s, median of {} rounds of {} s (senders on CPU {SENDER_CPU}, sink on CPU {SINK_CPU})",
        a.rounds, a.secs
    );
    println!(
        "| loss | ours reno | linux reno | ours/linux reno | ours cubic | linux cubic | ours/linux cubic | frames dropped |"
    );
    println!("|---:|---:|---:|---|---:|---:|---|---:|");
    for r in rows {
        let m = &r.median_mbps;
        println!(
            "| {}% | {:.1} | {:.1} | {} | {:.1} | {:.1} | {} | {} of {} |",
            r.loss_pct,
            m[0],
            m[1],
            spread(&r.ratio_reno),
            m[2],
            m[3],
            spread(&r.ratio_cubic),
            r.frames_dropped,
            r.frames_forwarded + r.frames_dropped
        );
    }
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let lab = lab()?;
    let l = lab
        .sink
        .run(|| TcpListener::bind(SocketAddrV4::new(SINK, SINK_PORT)))??;
    let mut port = 40_000u16;
    let mut rows = Vec::new();
    for &loss in &a.loss {
        rows.push(measure_loss(&lab, &l, loss, &mut port, &a)?);
    }
    print_table(&rows, &a);
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_vec_pretty(&rows)?)?;
    }
    Ok(())
}
