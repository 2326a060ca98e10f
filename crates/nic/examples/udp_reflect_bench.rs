//! UDP ping-pong through a lab veth: the kernel's UDP socket against an AF_XDP reflector at
//! frame level (no TCP/IP stack: it swaps the addresses and sends the frame back), side by
//! side, alternating rounds (BENCHMARKING.md rules 1-6).
//!
//! Run as root: `cargo run --release -p wirespeed-nic --example udp_reflect_bench [-- ROUNDS SECS WINDOW]`
//! Server side pinned to CPU 1, client to CPU 0. Writes results/nic-udp-reflect.json.
//!
//! Both servers run with the bifurcation program attached (the kernel round's datagrams go
//! to 198.18.0.1, which the program passes; the AF_XDP round's go to 198.18.0.10, which it
//! redirects). The AF_XDP server busy-polls, so its CPU is 100% by design; compare the CPU
//! per request, which counts the server thread plus softirq time on CPU 1.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wirespeed_lab::{netns::add_addr, Netns, Veth};
use wirespeed_nic::{
    AttachScope, Bifurcation, BifurcationConfig, BindMode, FrameIo, XskConfig, XskSocket,
};

const KERNEL_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const SERVED: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 10);
const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const MAC_A: &str = "02:00:00:18:00:0a";
const MAC_B: &str = "02:00:00:18:00:0b";
const PORT: u16 = 7000;
const PAYLOAD: usize = 64;

fn pin(cpu: usize) {
    wirespeed_sys::process::set_affinity(&[cpu]).expect("pin");
}

fn thread_cpu() -> Duration {
    wirespeed_sys::process::thread_cpu()
}

/// Softirq time of `cpu` so far (from /proc/stat, in clock ticks converted to a Duration).
fn softirq(cpu: usize) -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let name = format!("cpu{cpu} ");
    let ticks: u64 = stat
        .lines()
        .find(|l| l.starts_with(&name))
        .and_then(|l| l.split_whitespace().nth(7))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let hz = wirespeed_sys::process::clock_ticks();
    Duration::from_micros(ticks * 1_000_000 / hz)
}

fn enter(ns: &str) {
    wirespeed_sys::netns::enter(ns).expect("netns");
}

/// Closed-loop client: `window` datagrams in flight; returns (requests, client CPU) counted
/// only after `warmup`.
fn client(
    ns: String,
    target: Ipv4Addr,
    window: usize,
    warmup: Duration,
    measure: Duration,
) -> (u64, Duration) {
    enter(&ns);
    pin(0);
    let s = UdpSocket::bind(SocketAddrV4::new(CLIENT, 0)).unwrap();
    s.connect(SocketAddrV4::new(target, PORT)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let msg = [0x5au8; PAYLOAD];
    let mut buf = [0u8; 2048];
    let start = Instant::now();
    let (mut counted, mut cpu0, mut measuring) = (0u64, Duration::ZERO, false);
    for _ in 0..window {
        let _ = s.send(&msg);
    }
    loop {
        let now = Instant::now();
        if !measuring && now >= start + warmup {
            measuring = true;
            cpu0 = thread_cpu();
        }
        if now >= start + warmup + measure {
            break;
        }
        match s.recv(&mut buf) {
            Ok(_) => {
                if measuring {
                    counted += 1;
                }
                let _ = s.send(&msg);
            }
            // A lost datagram: refill the window.
            Err(_) => {
                for _ in 0..window {
                    let _ = s.send(&msg);
                }
            }
        }
    }
    (counted, thread_cpu() - cpu0)
}

fn kernel_server(ns: String, stop: Arc<AtomicBool>) -> Duration {
    enter(&ns);
    pin(1);
    let s = UdpSocket::bind(SocketAddrV4::new(KERNEL_IP, PORT)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut buf = [0u8; 2048];
    let cpu0 = thread_cpu();
    while !stop.load(Ordering::Relaxed) {
        if let Ok((n, from)) = s.recv_from(&mut buf) {
            let _ = s.send_to(&buf[..n], from);
        }
    }
    thread_cpu() - cpu0
}

/// Swaps Ethernet, IPv4 and UDP source and destination: the checksums stay valid (both
/// are sums over the same, reordered, words).
fn reflect(frame: &mut [u8]) -> bool {
    if frame.len() < 42 || frame[12..14] != [0x08, 0x00] || frame[23] != 17 {
        return false;
    }
    let ihl = usize::from(frame[14] & 0x0f) * 4;
    if ihl < 20 || frame.len() < 14 + ihl + 8 {
        return false;
    }
    for i in 0..6 {
        frame.swap(i, 6 + i);
    }
    for i in 0..4 {
        frame.swap(26 + i, 30 + i);
    }
    let u = 14 + ihl;
    frame.swap(u, u + 2);
    frame.swap(u + 1, u + 3);
    true
}

fn xsk_server(mut sock: XskSocket, stop: Arc<AtomicBool>) -> (Duration, XskSocket) {
    pin(1);
    let mut arena = vec![0u8; 64 * 2048];
    let mut lens = [0usize; 64];
    let cpu0 = thread_cpu();
    while !stop.load(Ordering::Relaxed) {
        let mut n = 0;
        sock.rx_burst(64, |f| {
            let len = f.len().min(2048);
            arena[n * 2048..n * 2048 + len].copy_from_slice(&f[..len]);
            lens[n] = len;
            n += 1;
        });
        for i in 0..n {
            let frame = &mut arena[i * 2048..i * 2048 + lens[i]];
            if reflect(frame) {
                sock.tx_frame(|buf| {
                    buf[..frame.len()].copy_from_slice(frame);
                    frame.len()
                });
            }
        }
        sock.flush();
    }
    (thread_cpu() - cpu0, sock)
}

#[derive(Debug, Clone, Copy)]
struct Row {
    rps: f64,
    client_cpu: f64,
    server_cpu_us_per_req: f64,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Rounds, seconds per measurement and the client's window, from the command line.
struct Args {
    rounds: usize,
    secs: u64,
    window: usize,
}

impl Args {
    fn parse() -> Args {
        let args: Vec<String> = std::env::args().collect();
        let arg = |i: usize, default: u64, lo: u64, hi: u64| {
            args.get(i)
                .and_then(|a| a.parse().ok())
                .unwrap_or(default)
                .clamp(lo, hi)
        };
        Args {
            rounds: arg(1, 3, 1, 10) as usize,
            secs: arg(2, 3, 1, 30),
            window: arg(3, 16, 1, 256) as usize,
        }
    }
}

/// The two namespaces and the veth between them: the server's side `a`, the client's `b`.
struct Lab {
    a: Netns,
    b: Netns,
    _veth: Veth,
}

fn lab() -> Lab {
    let id = std::process::id() % 100_000;
    let a = Netns::create(&format!("ws-nb{id}a")).unwrap();
    let b = Netns::create(&format!("ws-nb{id}b")).unwrap();
    let veth = Veth::create(&a, "ra0", &b, "rb0", 1).unwrap();
    for (ns, ifname, mac) in [(&a, "ra0", MAC_A), (&b, "rb0", MAC_B)] {
        ns.ip(&["link", "set", ifname, "down"]).unwrap();
        ns.ip(&["link", "set", ifname, "address", mac]).unwrap();
        ns.ip(&["link", "set", ifname, "up"]).unwrap();
    }
    add_addr(&a, "ra0", "198.18.0.1/24").unwrap();
    add_addr(&b, "rb0", "198.18.0.2/24").unwrap();
    b.ip(&["neigh", "add", "198.18.0.10", "lladdr", MAC_A, "dev", "rb0"])
        .unwrap();
    // veth offloads the peer's UDP checksum (CHECKSUM_PARTIAL): frames reach AF_XDP with only
    // the pseudo-header sum in the checksum field, and the reflections would be dropped by the
    // peer as corrupt. A real NIC computes it in hardware before the wire.
    if std::env::var_os("KEEP_TX_OFFLOAD").is_none() {
        b.exec("ethtool", &["-K", "rb0", "tx", "off"]).unwrap();
    }
    Lab { a, b, _veth: veth }
}

/// The bifurcation program on `ra0`, steering the served port to an AF_XDP socket on queue 0.
fn reflector(a: &Netns) -> (Bifurcation, XskSocket) {
    a.run(|| {
        let cfg = BifurcationConfig {
            udp_ports: vec![PORT],
            ..BifurcationConfig::new(SERVED)
        };
        let mut bif = Bifurcation::load(&cfg).unwrap();
        let cfg = XskConfig {
            mode: BindMode::Copy,
            ..XskConfig::default()
        };
        let sock = XskSocket::open("ra0", 0, &cfg).unwrap();
        bif.register(&sock).unwrap();
        bif.attach("ra0", AttachScope::LabOnly).unwrap();
        (bif, sock)
    })
    .unwrap()
}

/// One round of one server kind: the server on CPU 1, the client on CPU 0. The AF_XDP
/// socket goes to the server thread and comes back in `sock`.
fn round(lab: &Lab, kind: &str, sock: &mut Option<XskSocket>, args: &Args) -> Row {
    let (warmup, measure) = (Duration::from_secs(1), Duration::from_secs(args.secs));
    let stop = Arc::new(AtomicBool::new(false));
    let si0 = softirq(1);
    let t0 = Instant::now();
    let server = {
        let stop = Arc::clone(&stop);
        let a_name = lab.a.name().to_string();
        if kind == "kernel" {
            std::thread::spawn(move || (kernel_server(a_name, stop), None))
        } else {
            let s = sock.take().expect("the socket is back from the last round");
            std::thread::spawn(move || {
                let (cpu, s) = xsk_server(s, stop);
                (cpu, Some(s))
            })
        }
    };
    std::thread::sleep(Duration::from_millis(100));
    let target = if kind == "kernel" { KERNEL_IP } else { SERVED };
    let b_name = lab.b.name().to_string();
    let window = args.window;
    let (reqs, client_cpu) =
        std::thread::spawn(move || client(b_name, target, window, warmup, measure))
            .join()
            .unwrap();
    stop.store(true, Ordering::Relaxed);
    let (server_cpu, back) = server.join().unwrap();
    if let Some(s) = &back {
        if std::env::var_os("VERBOSE").is_some() {
            eprintln!("  af_xdp driver stats: {:?}", s.stats());
        }
    }
    if back.is_some() {
        *sock = back;
    }
    // Server CPU is taken over the whole run (warm-up included) and scaled to the measured
    // window; softirq likewise.
    let scale = measure.as_secs_f64() / t0.elapsed().as_secs_f64();
    let server_total = (server_cpu + (softirq(1) - si0)).as_secs_f64() * scale;
    Row {
        rps: reqs as f64 / measure.as_secs_f64(),
        client_cpu: client_cpu.as_secs_f64() / measure.as_secs_f64(),
        server_cpu_us_per_req: if reqs > 0 {
            server_total * 1e6 / reqs as f64
        } else {
            f64::NAN
        },
    }
}

/// The paired ratio's median, min and max, printed and written to results/.
fn report(rows: &[(&str, Row)], args: &Args) {
    let of = |k: &str| {
        rows.iter()
            .filter(|(n, _)| *n == k)
            .map(|(_, r)| *r)
            .collect::<Vec<_>>()
    };
    let (kern, xdp) = (of("kernel"), of("af_xdp"));
    let mut ratios: Vec<f64> = kern.iter().zip(&xdp).map(|(k, x)| x.rps / k.rps).collect();
    let (min, max) = ratios
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &r| (lo.min(r), hi.max(r)));
    let med = median(&mut ratios);
    let (rounds, window, secs) = (args.rounds, args.window, args.secs);
    println!(
        "af_xdp/kernel req/s: median {med:.2}x (min {min:.2}, max {max:.2}) over {rounds} rounds"
    );
    println!("pinning: server CPU 1, client CPU 0; window {window}; {PAYLOAD} B payload; {secs} s + 1 s warm-up");
    if kern.iter().chain(&xdp).any(|r| r.client_cpu > 0.95) {
        println!(
            "note: the client sat at ~100% of its CPU in some rows: those rows measure the client"
        );
    }
    let uname = wirespeed_lab::sh("uname", &["-r"]).unwrap_or_default();
    let commit = wirespeed_lab::sh("git", &["rev-parse", "--short", "HEAD"]).unwrap_or_default();
    let json_rows: Vec<String> = rows
        .iter()
        .map(|(k, r)| {
            format!(
                "{{\"stack\":\"{k}\",\"rps\":{:.0},\"client_cpu\":{:.3},\"server_cpu_us_per_req\":{:.3}}}",
                r.rps, r.client_cpu, r.server_cpu_us_per_req
            )
        })
        .collect();
    let json = format!(
        "{{\"bench\":\"nic-udp-reflect\",\"kernel\":\"{}\",\"commit\":\"{}\",\"window\":{window},\"payload\":{PAYLOAD},\
         \"secs\":{secs},\"ratio_median\":{med:.3},\"ratio_min\":{min:.3},\"ratio_max\":{max:.3},\"rows\":[{}]}}\n",
        uname.trim(),
        commit.trim(),
        json_rows.join(",")
    );
    let _ = std::fs::create_dir_all("results");
    if std::fs::write("results/nic-udp-reflect.json", json).is_ok() {
        println!("wrote results/nic-udp-reflect.json");
    }
}

fn main() {
    wirespeed_lab::require_root();
    let args = Args::parse();
    let lab = lab();
    let (bif, sock) = reflector(&lab.a);
    let mut sock = Some(sock);
    let mut rows: Vec<(&str, Row)> = Vec::new();
    for n in 0..args.rounds {
        for kind in ["kernel", "af_xdp"] {
            let row = round(&lab, kind, &mut sock, &args);
            println!(
                "round {n} {kind:>7}: {:>9.0} req/s  client CPU {:>4.0}%  server CPU {:>6.2} us/req",
                row.rps,
                row.client_cpu * 100.0,
                row.server_cpu_us_per_req
            );
            if std::env::var_os("VERBOSE").is_some() {
                eprintln!("  verdicts {:?}", bif.counters());
            }
            rows.push((kind, row));
        }
    }
    drop(sock);
    drop(bif);
    report(&rows, &args);
}
