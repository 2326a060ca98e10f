//! `wirespeed bench ... --stack xdp|dpdk`: the load generator's client side on our own TCP/IP
//! stack. Each shard owns one driver queue (an rx queue's AF_XDP socket, or a DPDK queue) and
//! one `UserStack`, both from `wirespeed_net::bypass`; its connections are ordinary async
//! tasks on the socket API (the same `wirespeed_net::TcpStream` the servers use), closed loop
//! with `depth` requests in flight, parsed by the same response parsers as the kernel-stack
//! client.
//!
//! Steering: on AF_XDP the bifurcation program sends the shard's sockets the frames for `--ip`
//! on the client's local port range, and ARP for `--ip`; everything else stays with the
//! kernel. Local ports are picked so that replies hash to the shard's own queue where the
//! driver's RSS can be modelled; where it cannot (veth, DPDK ports) more than one shard is
//! refused.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use wirespeed_bench::hist::LatencyHist;
use wirespeed_bench::load::{Errors, LoadResult, LoadSpec, Outcome, ResponseParser};
use wirespeed_net::bypass::{BypassConfig, Device};
use wirespeed_net::{ShardStack, Stack};

/// Local ports of the client's connections: the bifurcation program steers this range.
const FIRST_PORT: u16 = 40_000;
const PORTS: u16 = 1024;

/// Where the client's stack lives.
#[derive(Debug, Clone)]
pub struct BypassClient {
    pub device: Device,
    pub ip: Ipv4Addr,
    pub prefix_len: u8,
    pub gateway: Option<Ipv4Addr>,
}

impl BypassClient {
    /// From the device and `--ip ADDR/LEN` (and `--gateway`).
    pub fn new(
        device: Device,
        ip: Option<&str>,
        gateway: Option<Ipv4Addr>,
    ) -> anyhow::Result<BypassClient> {
        let ip =
            ip.context("--stack xdp|dpdk needs --ip ADDR/LEN (the address our client stack uses)")?;
        let (ip, prefix_len) = super::parse_ip_prefix(ip)?;
        Ok(BypassClient {
            device,
            ip,
            prefix_len,
            gateway,
        })
    }

    /// For the start line: `AF_XDP on IF` / `DPDK`.
    pub fn describe(&self) -> String {
        match &self.device {
            Device::Xdp { iface, .. } => format!("AF_XDP on {iface}"),
            Device::Dpdk { .. } => "DPDK".to_string(),
        }
    }
}

#[derive(Default)]
struct ShardTotals {
    hist: LatencyHist,
    requests: u64,
    bytes_read: u64,
    bytes_written: u64,
    errors: Errors,
}

/// When the measured interval runs, shared by a shard's connections.
#[derive(Clone, Copy)]
struct Window {
    measure_from: Instant,
    end: Instant,
}

impl Window {
    fn measuring(&self, t: Instant) -> bool {
        t >= self.measure_from && t < self.end
    }
}

/// Runs the load of `spec` from our stack on `x`, parsing with clones of `parser`.
pub fn run<P: ResponseParser>(
    spec: &LoadSpec,
    parser: P,
    x: &BypassClient,
) -> anyhow::Result<LoadResult> {
    let SocketAddr::V4(server) = spec.addr else {
        bail!("--stack xdp|dpdk: our stack speaks IPv4 only; give an IPv4 server address");
    };
    if spec.rate.is_some() {
        bail!("--stack xdp|dpdk runs closed loop only; drop --rate");
    }
    if spec.connections == 0 || spec.connections > PORTS as usize {
        bail!(
            "--stack xdp|dpdk: 1 to {PORTS} connections (its local port range), not {}",
            spec.connections
        );
    }
    let cpus = spec.cpus.clone().unwrap_or_else(|| vec![0]);
    let shards = if spec.threads == 0 {
        cpus.len()
    } else {
        spec.threads
    }
    .clamp(1, spec.connections);
    let stack = Stack::bypass(&BypassConfig {
        device: x.device.clone(),
        ip: x.ip,
        prefix_len: x.prefix_len,
        gateway: x.gateway,
        shards,
        tcp_ports: (FIRST_PORT..FIRST_PORT + PORTS).collect(),
        icmp: false,
        max_connections: spec.connections * 2,
        ephemeral_ports: Some((FIRST_PORT, FIRST_PORT + PORTS - 1)),
        opens_connections: true,
        log_prefix: "wirespeed bench",
    })?;
    for note in stack.notes() {
        eprintln!("wirespeed bench: {note}");
    }
    let shard_stacks = stack.shards();
    let start = Instant::now() + Duration::from_millis(100);
    let window = Window {
        measure_from: start + spec.warmup,
        end: start + spec.warmup + spec.duration,
    };
    let cpu_marks = Arc::new(Mutex::new((Duration::ZERO, Duration::ZERO)));
    let marks = cpu_marks.clone();
    let spec2 = spec.clone();
    // The runtime shares its shard closure between threads; the parser only needs Send.
    let parser = Mutex::new(parser);
    let rt = wirespeed_rt::Runtime::builder()
        .cpus(cpus.iter().copied().cycle().take(shards).collect())
        .engine(wirespeed_rt::EngineKind::Epoll);
    let per_shard = rt
        .run(move || {
            let shard = wirespeed_rt::shard_id();
            let stack = shard_stacks.start();
            let parser = parser.lock().expect("parser").clone();
            let (spec, marks) = (spec2.clone(), marks.clone());
            async move {
                let stack = Rc::new(stack.map_err(|e| e.to_string())?);
                let totals = Rc::new(RefCell::new(ShardTotals::default()));
                let request = Rc::new(spec.request.clone());
                let mut tasks = Vec::new();
                for _ in (shard..spec.connections).step_by(wirespeed_rt::shard_count()) {
                    tasks.push(wirespeed_rt::spawn(connection(
                        stack.clone(),
                        SocketAddr::V4(server),
                        request.clone(),
                        spec.depth.max(1),
                        spec.timeout,
                        parser.clone(),
                        window,
                        totals.clone(),
                    )));
                }
                if shard == 0 {
                    wirespeed_rt::sleep_until(window.measure_from).await;
                    let c0 = wirespeed_bench::cpu::self_cpu_time();
                    wirespeed_rt::sleep_until(window.end).await;
                    let c1 = wirespeed_bench::cpu::self_cpu_time();
                    *marks.lock().expect("cpu marks") = (c0, c1);
                }
                for t in tasks {
                    t.await;
                }
                let s = stack.bypass_stats().unwrap_or_default();
                eprintln!(
                    "wirespeed bench: shard {shard} stack: rx {} tx {} frames; tcp retransmits {}, out-of-order {}, duplicates {}",
                    s.rx_frames,
                    s.tx_frames,
                    s.tcp_retransmits,
                    s.tcp_ooo_segments,
                    s.tcp_duplicate_segments
                );
                let t = totals.replace(ShardTotals::default());
                Ok::<_, String>(t)
            }
        })
        .context("client runtime")?;
    drop(stack);

    let mut total = ShardTotals::default();
    for r in per_shard {
        let t = r.map_err(|e| anyhow::anyhow!("client shard failed: {e}"))?;
        total.hist.merge(&t.hist);
        total.requests += t.requests;
        total.bytes_read += t.bytes_read;
        total.bytes_written += t.bytes_written;
        total.errors.add(&t.errors);
    }
    let (c0, c1) = *cpu_marks.lock().expect("cpu marks");
    Ok(LoadResult {
        hist: total.hist,
        requests: total.requests,
        bytes_read: total.bytes_read,
        bytes_written: total.bytes_written,
        duration: spec.duration,
        errors: total.errors,
        client_cpu: c1.saturating_sub(c0),
        open_loop: false,
        threads: shards,
        connections: spec.connections,
        engine: wirespeed_bench::load::Engine::Epoll,
    })
}

/// One connection, closed loop: `depth` requests in flight; a response sends the next. On
/// an error or a stall the connection is counted, dropped and opened again, until the end.
#[allow(clippy::too_many_arguments)]
async fn connection<P: ResponseParser>(
    stack: Rc<ShardStack>,
    server: SocketAddr,
    request: Rc<Vec<u8>>,
    depth: usize,
    stall: Duration,
    mut parser: P,
    w: Window,
    totals: Rc<RefCell<ShardTotals>>,
) {
    let count = |f: &dyn Fn(&mut ShardTotals)| {
        if w.measuring(Instant::now()) {
            f(&mut totals.borrow_mut());
        }
    };
    let mut buf = vec![0u8; 64 * 1024];
    while Instant::now() < w.end {
        let conn = match wirespeed_rt::timeout(stall, stack.connect(server)).await {
            Ok(Ok(c)) => c,
            _ => {
                count(&|t| t.errors.connect += 1);
                wirespeed_rt::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let mut s = conn;
        parser.reset();
        let mut sent_at: VecDeque<Instant> = VecDeque::with_capacity(depth);
        let mut have = 0usize;
        let mut ok = true;
        for _ in 0..depth {
            if s.write_all(&request).await.is_err() {
                ok = false;
                break;
            }
            sent_at.push_back(Instant::now());
            count(&|t| t.bytes_written += request.len() as u64);
        }
        if !ok {
            count(&|t| t.errors.write += 1);
            continue;
        }
        'conn: while Instant::now() < w.end {
            let left = w.end.saturating_duration_since(Instant::now());
            let n = match wirespeed_rt::timeout(
                stall.min(left + Duration::from_millis(1)),
                s.read(&mut buf[have..]),
            )
            .await
            {
                Ok(Ok(0)) | Ok(Err(_)) => {
                    count(&|t| t.errors.read += 1);
                    break;
                }
                Ok(Ok(n)) => n,
                Err(_) => {
                    if Instant::now() < w.end {
                        count(&|t| t.errors.timeout += 1);
                    }
                    break;
                }
            };
            have += n;
            count(&|t| t.bytes_read += n as u64);
            let mut off = 0;
            loop {
                let p = match parser.advance(&buf[off..have]) {
                    Ok(p) => p,
                    Err(_) => {
                        count(&|t| t.errors.parse += 1);
                        break 'conn;
                    }
                };
                if p.consumed == 0 && p.done.is_none() {
                    break;
                }
                off += p.consumed;
                if let Some(outcome) = p.done {
                    let now = Instant::now();
                    if let Some(t0) = sent_at.pop_front() {
                        if w.measuring(now) {
                            let mut t = totals.borrow_mut();
                            t.hist.record_ns(now.duration_since(t0).as_nanos() as u64);
                            t.requests += 1;
                            if outcome == Outcome::Non2xx {
                                t.errors.non2xx += 1;
                            }
                        }
                    }
                    if now < w.end {
                        if s.write_all(&request).await.is_err() {
                            count(&|t| t.errors.write += 1);
                            break 'conn;
                        }
                        sent_at.push_back(Instant::now());
                        count(&|t| t.bytes_written += request.len() as u64);
                    }
                }
            }
            buf.copy_within(off..have, 0);
            have -= off;
            if have == buf.len() {
                // A response larger than the buffer: the parsers here never need that.
                count(&|t| t.errors.parse += 1);
                break;
            }
        }
    }
}
