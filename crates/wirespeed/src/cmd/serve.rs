//! `wirespeed serve http|echo`: thread-per-core servers on the chosen stack.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Subcommand, ValueEnum};
use serde::Serialize;
use wirespeed_http::metrics::{self, ServeStats};
use wirespeed_http::server;
use wirespeed_http::shard::{self, ShardSummary};
use wirespeed_net::bypass::socket::BypassStack;
use wirespeed_net::bypass::{BypassConfig, BypassStats};
use wirespeed_net::kernel::{ListenOptions, Locality};
use wirespeed_net::{KernelConfig, Stack};
use wirespeed_rt::{EngineKind, Runtime};

use super::{BypassArgs, StackArg};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    app: App,
}

#[derive(Subcommand)]
enum App {
    /// HTTP/1.1: GET /plaintext and GET /json (TechEmpower style), keep-alive and pipelining.
    Http {
        #[command(flatten)]
        common: Common,
        /// Answer every read with one canned plaintext response and parse nothing (the seed's
        /// tcp_httpd mode).
        #[arg(long)]
        fixed: bool,
    },
    /// Echo: every byte received is sent back (the Photon seed's server).
    Echo {
        #[command(flatten)]
        common: Common,
    },
}

#[derive(Clone, Copy, ValueEnum, Debug, PartialEq)]
enum EngineArg {
    /// Edge-triggered epoll with recv/send and epoll_pwait2.
    Epoll,
    /// io_uring: multishot accept and recv with provided buffers (falls back to epoll if the
    /// kernel lacks them).
    Uring,
}

#[derive(Clone, Copy, ValueEnum, Debug, PartialEq)]
enum LocalityArg {
    /// SO_REUSEPORT with a CBPF program that hands each connection to the shard on the CPU
    /// that received it (perfect locality).
    Cbpf,
    /// SO_REUSEPORT with the kernel's hash.
    None,
}

#[derive(clap::Args, Clone)]
struct Common {
    /// CPUs to run on, one shard pinned to each, e.g. `1` or `0-3,6`. Default: every CPU this
    /// process may use.
    #[arg(long, value_name = "LIST")]
    cpus: Option<String>,
    /// Address and port to listen on.
    #[arg(long, value_name = "ADDR:PORT", default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// Kernel I/O engine of each shard.
    #[arg(long, value_enum, default_value = "epoll")]
    engine: EngineArg,
    /// When a shard has nothing to do, wait in epoll_pwait2 / io_uring for at most this many
    /// microseconds and then look again, instead of sleeping until an event (0). 100 is the
    /// seed's busy-poll setting.
    #[arg(long, value_name = "US", default_value_t = 0)]
    poll_us: u32,
    /// Busy polling for this many microseconds. Kernel stack: NAPI busy polling, preferred
    /// over the queue's interrupt, on each shard's epoll instance or io_uring ring (the shard
    /// polls its queue itself before it sleeps); not SO_BUSY_POLL on the sockets, which would
    /// poll the queue on every read that finds nothing, once per request in an event loop.
    /// With --stack xdp: SO_BUSY_POLL and SO_PREFER_BUSY_POLL on each AF_XDP socket, whose
    /// wakeup syscalls then poll the queue; in copy mode on Linux 6.13+ the kernel cannot
    /// (the socket has no NAPI ID), so with --engine uring and --idle-sleep-us a waiting
    /// shard's ring polls the queue's NAPI by ID instead; the listening line says which.
    /// 0 turns it off.
    #[arg(long, value_name = "US", default_value_t = 0)]
    busy_poll_us: u32,
    /// --stack xdp: a shard whose AF_XDP queue has been idle this many microseconds sleeps
    /// until a frame arrives (or a TCP timer is due) instead of spinning, which leaves its CPU
    /// to others, the kernel's receive work among them. 0 spins for ever, as DPDK does;
    /// --stack dpdk always spins.
    #[arg(long, value_name = "US", default_value_t = 0)]
    idle_sleep_us: u32,
    /// How connections are placed on shards.
    #[arg(long, value_enum, default_value = "cbpf")]
    locality: LocalityArg,
    /// Close a connection after this long without traffic (e.g. 60s, 500ms).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = wirespeed_load::parse_duration)]
    idle_timeout: Duration,
    /// Connections per shard; past it new connections are refused (HTTP: 503, then close).
    /// --stack xdp|dpdk: the shard's connection table holds twice this (closing and
    /// TIME_WAIT connections among them); when it is full a SYN gets a SYN cookie.
    #[arg(long, value_name = "N", default_value_t = 16384)]
    max_conns: usize,
    /// Each listener's backlog: half-open and not yet accepted connections. Kernel stack: the
    /// listen() backlog, which net.core.somaxconn caps and tcp_max_syn_backlog bounds; our
    /// stack: past it a SYN is answered with a SYN cookie, which holds no state (4096 is
    /// Linux's somaxconn default).
    #[arg(long, value_name = "N", default_value_t = 4096)]
    backlog: u32,
    /// Write the exit summary as JSON to this file as well: the totals, each shard's, and with
    /// --stack xdp|dpdk each shard's stack counters by name (`stack`).
    #[arg(long, value_name = "FILE")]
    summary_json: Option<std::path::PathBuf>,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics on the kernel stack, answered
    /// by shard 0 (docs/METRICS.md), e.g. 127.0.0.1:9103.
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<SocketAddr>,
    #[command(flatten)]
    bypass: BypassArgs,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Http { fixed: bool },
    Echo,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let (common, kind) = match args.app {
        App::Http { common, fixed } => (common, Kind::Http { fixed }),
        App::Echo { common } => (common, Kind::Echo),
    };
    let cpus = match &common.cpus {
        Some(list) => {
            wirespeed_rt::sys::parse_cpu_list(list).map_err(|e| anyhow::anyhow!("--cpus: {e}"))?
        }
        None => wirespeed_rt::sys::allowed_cpus().context("reading the CPU affinity")?,
    };
    check_flags(&common)?;
    let engine = match common.engine {
        EngineArg::Epoll => EngineKind::Epoll,
        EngineArg::Uring => EngineKind::Uring,
    };
    let rt = Runtime::builder()
        .cpus(cpus.clone())
        .engine(engine)
        .poll_us(common.poll_us)
        .napi_busy_poll_us(common.busy_poll_us)
        .idle_sleep_us(common.idle_sleep_us)
        .handle_signals(true)
        .build()?;
    // Bound before anything starts, so a taken port is the one error; shard 0 takes it.
    let metrics_listener = common
        .metrics
        .map(|addr| {
            metrics::bind(addr).with_context(|| {
                format!("--metrics {addr}: cannot listen there (is the address local and the port free?)")
            })
        })
        .transpose()?;
    let metrics_listener = std::sync::Mutex::new(metrics_listener);
    let app = match kind {
        Kind::Http { fixed: true } => "http (fixed)",
        Kind::Http { fixed: false } => "http",
        Kind::Echo => "echo",
    };
    let stack = open_stack(&common, &cpus)?;
    for note in stack.notes() {
        eprintln!("wirespeed serve: {note}");
    }
    let bound = stack.listen_addr().unwrap_or(common.listen);
    print_start(app, &common, &stack, rt.engine(), &cpus, bound);
    if let Some(addr) = common.metrics {
        eprintln!("wirespeed serve: metrics on http://{addr}/metrics");
    }
    let cfg = server::Config {
        idle_timeout: common.idle_timeout,
        fixed: matches!(kind, Kind::Http { fixed: true }),
    };
    let shard_app = match kind {
        Kind::Http { .. } => shard::App::Http,
        Kind::Echo => shard::App::Echo,
    };
    let max_conns = common.max_conns;
    let stack_counters = match common.bypass.stack {
        StackArg::Kernel => &[][..],
        StackArg::Xdp | StackArg::Dpdk => BypassStats::NAMES,
    };
    let stats = ServeStats::new(cpus.len(), stack_counters);
    let shards = stack.shards();
    let per_shard = rt.run(move || {
        let (shards, cfg) = (shards.clone(), cfg.clone());
        let id = wirespeed_rt::shard_id();
        let my_stats = stats.shard(id);
        let scrapes = if id == 0 {
            metrics_listener
                .lock()
                .ok()
                .and_then(|mut l| l.take())
                .map(|l| (l, stats.clone()))
        } else {
            None
        };
        async move {
            let net = shards.start().map_err(|e| e.to_string())?;
            let listener = net.listen(bound).map_err(|e| e.to_string())?;
            if let Some((l, all)) = scrapes {
                wirespeed_rt::spawn(metrics::serve(l, all));
            }
            if let Some(bypass) = net.bypass() {
                wirespeed_rt::spawn(publish_stack_counters(bypass, my_stats.clone()));
            }
            let summary = shard::serve(listener, cfg, shard_app, max_conns, my_stats).await;
            let stack = net.bypass_stats();
            if let Some(s) = &stack {
                eprintln!(
                    "wirespeed serve: shard {} stack: {s}",
                    wirespeed_rt::shard_id()
                );
            }
            Ok::<_, String>((summary, stack))
        }
    })?;
    drop(stack);

    let mut shards = Vec::new();
    let mut stacks = Vec::new();
    for r in per_shard {
        let (summary, stack) = r.map_err(|e| anyhow::anyhow!("shard failed: {e}"))?;
        shards.push(summary);
        stacks.extend(stack);
    }
    print_summary(app, engine, &shards, &stacks, common.summary_json)
}

/// Refuses the flags that cannot work, and says once which ones do nothing here.
fn check_flags(common: &Common) -> anyhow::Result<()> {
    if common.max_conns == 0 {
        bail!("--max-conns must be at least 1");
    }
    if common.backlog == 0 {
        bail!("--backlog must be at least 1");
    }
    // Accepted so that one command line serves every stack, but said once where it does
    // nothing: only an AF_XDP socket gives a shard something to sleep on.
    if common.idle_sleep_us > 0 && common.bypass.stack != StackArg::Xdp {
        let why = match common.bypass.stack {
            StackArg::Dpdk => "a DPDK queue has no fd to sleep on, so its shard spins",
            _ => "kernel-stack shards already sleep in epoll/io_uring",
        };
        eprintln!("wirespeed serve: --idle-sleep-us applies to --stack xdp only; {why}");
    }
    Ok(())
}

/// The stack `--stack` picks, listening (kernel) or taking the device over (xdp, dpdk).
fn open_stack(common: &Common, cpus: &[usize]) -> anyhow::Result<Stack> {
    Ok(match common.bypass.stack {
        StackArg::Kernel => Stack::kernel(&KernelConfig {
            cpus: cpus.to_vec(),
            listen: Some(common.listen),
            options: ListenOptions {
                locality: match common.locality {
                    LocalityArg::Cbpf => Locality::Cbpf,
                    LocalityArg::None => Locality::None,
                },
                backlog: common.backlog.min(i32::MAX as u32) as i32,
                ..ListenOptions::default()
            },
        })?,
        StackArg::Xdp | StackArg::Dpdk => Stack::bypass(&bypass_config(common, cpus.len())?)?,
    })
}

/// The start line: what serves where, on which stack and engine.
fn print_start(
    app: &str,
    common: &Common,
    stack: &Stack,
    engine: EngineKind,
    cpus: &[usize],
    bound: SocketAddr,
) {
    // The bypass stack answers on its IPv6 address too, at the same port.
    let also_v6 = match (common.bypass.stack, common.bypass.addresses()) {
        (StackArg::Xdp | StackArg::Dpdk, Ok((_, _, Some(v6)))) => {
            format!(" and [{}]:{}", v6.addr, bound.port())
        }
        _ => String::new(),
    };
    eprintln!(
        "wirespeed serve {app}: listening on {bound}{also_v6}; {} shard(s) on CPUs {:?}; stack {}, engine {}, poll-us {}, busy-poll-us {}, locality {}",
        cpus.len(),
        cpus,
        stack.description(),
        engine,
        common.poll_us,
        common.busy_poll_us,
        match common.locality {
            LocalityArg::Cbpf => "cbpf",
            LocalityArg::None => "none",
        }
    );
}

/// The exit line, the totals of every shard, and with --summary-json the same as JSON,
/// each shard's and each stack's counters with them.
fn print_summary(
    app: &str,
    engine: EngineKind,
    shards: &[ShardSummary],
    stacks: &[BypassStats],
    summary_json: Option<std::path::PathBuf>,
) -> anyhow::Result<()> {
    let total = shards.iter().fold(ShardSummary::default(), |mut t, s| {
        t.add(s);
        t
    });
    let errors = total.errors();
    let local_pct = if total.connections > 0 {
        100.0 * total.local_connections as f64 / total.connections as f64
    } else {
        0.0
    };
    eprintln!(
        "wirespeed serve {app}: connections {}, requests {}, errors {} (400: {}, 431: {}, 404: {}, other: {}), idle-closed {}, refused {}, accepted on their rx CPU {:.1}%",
        total.connections,
        total.requests,
        errors,
        total.bad_request,
        total.headers_too_large,
        total.not_found,
        total.other_errors,
        total.idle_closed,
        total.refused,
        local_pct
    );
    let Some(path) = summary_json else {
        return Ok(());
    };
    #[derive(Serialize)]
    struct Summary<'a> {
        app: &'a str,
        engine: String,
        total: &'a ShardSummary,
        errors: u64,
        shards: &'a [ShardSummary],
        /// --stack xdp|dpdk: each shard's `tcpip::Stats`, every counter by its name.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        stack: Vec<serde_json::Map<String, serde_json::Value>>,
    }
    let s = Summary {
        app,
        engine: engine.to_string(),
        total: &total,
        errors,
        shards,
        stack: stacks
            .iter()
            .map(|st| {
                BypassStats::NAMES
                    .iter()
                    .zip(st.values())
                    .map(|(n, v)| (n.to_string(), v.into()))
                    .collect()
            })
            .collect(),
    };
    std::fs::write(&path, serde_json::to_vec_pretty(&s)?)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// `--stack xdp|dpdk`'s flags as the bypass stack's configuration.
fn bypass_config(common: &Common, shards: usize) -> anyhow::Result<BypassConfig> {
    let stack = match common.bypass.stack {
        StackArg::Dpdk => "dpdk",
        _ => "xdp",
    };
    let device = common.bypass.device()?;
    if common.bypass.ip.is_empty() {
        bail!("--stack {stack} needs --ip ADDR/LEN (the address our stack serves)");
    }
    let (addr, prefix_len, ipv6) = common.bypass.addresses()?;
    let port = common.listen.port();
    if port == 0 {
        bail!("--stack {stack} needs an explicit port in --listen");
    }
    Ok(BypassConfig {
        device,
        ip: addr,
        prefix_len,
        gateway: common.bypass.ipv4_gateway(),
        ipv6,
        shards,
        tcp_ports: vec![port],
        icmp: true,
        max_connections: common.max_conns * 2,
        backlog: common.backlog,
        ephemeral_ports: None,
        opens_connections: false,
        log_prefix: "wirespeed serve",
        busy_poll_us: common.busy_poll_us,
        waits_in_io_uring: common.engine == EngineArg::Uring && common.idle_sleep_us > 0,
        congestion_control: common.bypass.congestion_control,
    })
}

/// How often a shard copies its bypass stack's counters where `--metrics` reads them.
const STACK_COUNTERS_PERIOD: Duration = Duration::from_millis(250);

/// Copies the shard's stack counters for `--metrics` every STACK_COUNTERS_PERIOD: the
/// stack is the shard's alone, so the scraping shard reads a copy, never the stack.
async fn publish_stack_counters(stack: BypassStack, into: metrics::ShardStats) {
    loop {
        into.publish_stack(stack.stats().values());
        wirespeed_rt::sleep(STACK_COUNTERS_PERIOD).await;
    }
}
