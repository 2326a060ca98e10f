//! The bypass engine of the load generator: the client side on our own TCP/IP stack
//! (`wirespeed bench ... --stack xdp|dpdk`).
//!
//! `wirespeed_net::Stack::bypass` takes the device over (one driver queue and one stack per
//! shard); each shard runs its connections as async tasks on `wirespeed_net::TcpStream`, the
//! socket API the servers use. The protocol (closed loop with `depth` requests in flight, the
//! response parsers, what counts) is [`Conn`]'s, as in every engine; this file only moves
//! bytes.
//!
//! Steering: on AF_XDP the bifurcation program sends the shard's sockets the frames for the
//! client's address on its local port range, and ARP for it; everything else stays with the
//! kernel. Local ports are picked so that replies hash to the shard's own queue where the
//! driver's RSS can be modelled; where it cannot (veth, DPDK ports) more than one shard is
//! refused.

use std::cell::RefCell;
use std::net::{Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wirespeed_net::bypass::{BypassConfig, CongestionAlgorithm, Device, Ipv6Subnet};
use wirespeed_net::{ShardStack, Stack};

use crate::conn::{Conn, ResponseParser, Tally, Workload};
use crate::spec::{Engine, LoadResult, LoadSpec};
use crate::{Error, Result};

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
    /// An IPv6 address beside `ip`, for servers given by an IPv6 address.
    pub ipv6: Option<Ipv6Subnet>,
    /// Congestion control of the client's connections.
    pub congestion_control: CongestionAlgorithm,
}

impl BypassClient {
    /// For the start line: `AF_XDP on IF` / `DPDK`.
    pub fn describe(&self) -> String {
        match &self.device {
            Device::Xdp { iface, .. } => format!("AF_XDP on {iface}"),
            Device::Dpdk { .. } => "DPDK".to_string(),
        }
    }
}

/// When the measured interval runs.
#[derive(Clone, Copy)]
struct Window {
    measure_from: Instant,
    end: Instant,
}

fn invalid(msg: String) -> Error {
    Error::Invalid(msg)
}

/// Runs the load of `spec` from our stack on `x`, parsing with clones of `parser`.
pub fn run<P: ResponseParser>(spec: &LoadSpec, parser: P, x: &BypassClient) -> Result<LoadResult> {
    check(spec, x)?;
    let cpus = spec.cpus.clone().unwrap_or_else(|| vec![0]);
    let shards = if spec.threads == 0 {
        cpus.len()
    } else {
        spec.threads
    }
    .clamp(1, spec.connections);
    let stack = bring_up(spec, x, shards)?;
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
    let per_shard = wirespeed_rt::Runtime::builder()
        .cpus(cpus.iter().copied().cycle().take(shards).collect())
        .engine(wirespeed_rt::EngineKind::Epoll)
        .run(move || {
            let shard = wirespeed_rt::shard_id();
            let stack = shard_stacks.start();
            let parser = parser.lock().expect("parser").clone();
            let (spec, marks) = (spec2.clone(), marks.clone());
            async move {
                let stack = Rc::new(stack.map_err(|e| e.to_string())?);
                let tally = Rc::new(RefCell::new(Tally::default()));
                let work = Rc::new(Workload::new(&spec.request, spec.depth.max(1), false));
                let mut tasks = Vec::new();
                for _ in (shard..spec.connections).step_by(wirespeed_rt::shard_count()) {
                    let conn = Conn::new(parser.clone(), &work, start, start, Duration::ZERO);
                    tasks.push(wirespeed_rt::spawn(connection(
                        stack.clone(),
                        spec.addr,
                        work.clone(),
                        spec.timeout,
                        conn,
                        window.end,
                        tally.clone(),
                    )));
                }
                wirespeed_rt::sleep_until(window.measure_from).await;
                tally.borrow_mut().start_measuring();
                let c0 = crate::cpu::self_cpu_time();
                wirespeed_rt::sleep_until(window.end).await;
                tally.borrow_mut().stop_measuring();
                if shard == 0 {
                    let c1 = crate::cpu::self_cpu_time();
                    *marks.lock().expect("cpu marks") = (c0, c1);
                }
                for t in tasks {
                    t.await;
                }
                if let Some(s) = stack.bypass_stats() {
                    eprintln!(
                        "wirespeed bench: shard {shard} stack: rx {} tx {} frames; tcp retransmits {}, out-of-order {}, duplicates {}",
                        s.rx_frames,
                        s.tx_frames,
                        s.tcp_retransmits,
                        s.tcp_ooo_segments,
                        s.tcp_duplicate_segments
                    );
                }
                let t = tally.replace(Tally::default());
                Ok::<_, String>(t)
            }
        })
        .map_err(|e| invalid(format!("client runtime: {e}")))?;
    drop(stack);

    let mut total = Tally::default();
    for r in per_shard {
        total.merge(&r.map_err(|e| invalid(format!("client shard failed: {e}")))?);
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
        engine: Engine::Epoll,
    })
}

/// What our stack's client cannot do: refused before anything is brought up.
fn check(spec: &LoadSpec, x: &BypassClient) -> Result<()> {
    if spec.addr.is_ipv6() && x.ipv6.is_none() {
        return Err(invalid(
            "--stack xdp|dpdk: an IPv6 server needs an IPv6 --ip for our stack too".into(),
        ));
    }
    if spec.rate.is_some() {
        return Err(invalid(
            "--stack xdp|dpdk runs closed loop only; drop --rate".into(),
        ));
    }
    if spec.connections == 0 || spec.connections > PORTS as usize {
        return Err(invalid(format!(
            "--stack xdp|dpdk: 1 to {PORTS} connections (its local port range), not {}",
            spec.connections
        )));
    }
    Ok(())
}

/// Our stack on `x`'s device, `shards` shards, the client's port range steered to it.
fn bring_up(spec: &LoadSpec, x: &BypassClient, shards: usize) -> Result<Stack> {
    let stack = Stack::bypass(&BypassConfig {
        device: x.device.clone(),
        ip: x.ip,
        prefix_len: x.prefix_len,
        gateway: x.gateway,
        ipv6: x.ipv6,
        shards,
        tcp_ports: (FIRST_PORT..FIRST_PORT + PORTS).collect(),
        icmp: false,
        max_connections: spec.connections * 2,
        backlog: 0, // a client listens on nothing
        ephemeral_ports: Some((FIRST_PORT, FIRST_PORT + PORTS - 1)),
        opens_connections: true,
        log_prefix: "wirespeed bench",
        busy_poll_us: 0,
        waits_in_io_uring: false,
        congestion_control: x.congestion_control,
    })
    .map_err(|e| invalid(e.to_string()))?;
    for note in stack.notes() {
        eprintln!("wirespeed bench: {note}");
    }
    Ok(stack)
}

/// One connection, closed loop: `depth` requests in flight; responses make room for the
/// next. On an error or a stall the connection is counted, dropped and opened again, until
/// the end.
async fn connection<P: ResponseParser>(
    stack: Rc<ShardStack>,
    server: SocketAddr,
    work: Rc<Workload>,
    stall: Duration,
    mut conn: Conn<P>,
    end: Instant,
    tally: Rc<RefCell<Tally>>,
) {
    while Instant::now() < end {
        let mut s = match wirespeed_rt::timeout(stall, stack.connect(server)).await {
            Ok(Ok(s)) => s,
            _ => {
                tally.borrow_mut().error(|e| e.connect += 1);
                wirespeed_rt::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        conn.reset(Instant::now());
        conn.queue(&work, Instant::now());
        loop {
            let bytes = conn.to_write(&work);
            if !bytes.is_empty() {
                match s.write(bytes).await {
                    Ok(n) if n > 0 => {
                        conn.wrote(n, Instant::now(), &mut tally.borrow_mut());
                        continue;
                    }
                    _ => {
                        tally.borrow_mut().error(|e| e.write += 1);
                        break;
                    }
                }
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let read = wirespeed_rt::timeout(
                stall.min(left + Duration::from_millis(1)),
                s.read(conn.read_space()),
            )
            .await;
            let now = Instant::now();
            let mut t = tally.borrow_mut();
            match read {
                Ok(Ok(0)) | Ok(Err(_)) => {
                    t.error(|e| e.read += 1);
                    break;
                }
                Ok(Ok(n)) => {
                    if conn.received(n, now, &mut t).is_err() {
                        t.error(|e| e.parse += 1);
                        break;
                    }
                }
                Err(_) => {
                    if now < end {
                        t.error(|e| e.timeout += 1);
                    }
                    break;
                }
            }
            if now < end {
                conn.queue(&work, now);
            }
        }
    }
}
