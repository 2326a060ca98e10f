//! `wirespeed serve http|echo`: thread-per-core servers on the chosen stack.

use std::cell::Cell;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Subcommand, ValueEnum};
use serde::Serialize;
use wirespeed_http::date::DateCache;
use wirespeed_http::server::{self, Stats};
use wirespeed_net::bypass::{Bypass, BypassConfig, ShardDevice};
use wirespeed_net::kernel::{bind_group, ListenOptions, Listener, Locality};
use wirespeed_net::user::UserStack;
use wirespeed_net::{TcpListener, TcpStream};
use wirespeed_rt::{Either, EngineKind, Runtime};

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
enum StackArg {
    /// The Linux TCP/IP stack through epoll or io_uring.
    Kernel,
    /// Kernel bypass: our TCP/IP stack on an AF_XDP socket per shard (shard i owns rx queue i
    /// of --iface); an XDP program sends only --ip's traffic for the served port (and ARP for
    /// --ip) to the shards, everything else stays with the kernel.
    Xdp,
    /// Kernel bypass: our TCP/IP stack on a DPDK port (the one that --dpdk-args gives the
    /// EAL), one queue per shard. Needs a binary built with the `dpdk` feature.
    Dpdk,
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
    /// The TCP/IP stack that carries the sockets.
    #[arg(long, value_enum, default_value = "kernel")]
    stack: StackArg,
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
    /// Socket busy polling: SO_BUSY_POLL (and SO_PREFER_BUSY_POLL) with this many microseconds
    /// on every socket; for io_uring also NAPI busy polling on the ring. 0 turns it off.
    #[arg(long, value_name = "US", default_value_t = 0)]
    busy_poll_us: u32,
    /// How connections are placed on shards.
    #[arg(long, value_enum, default_value = "cbpf")]
    locality: LocalityArg,
    /// Close a connection after this long without traffic (e.g. 60s, 500ms).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = super::parse_duration)]
    idle_timeout: Duration,
    /// Connections per shard; past it new connections are refused (HTTP: 503, then close).
    #[arg(long, value_name = "N", default_value_t = 16384)]
    max_conns: usize,
    /// --stack xdp: the interface whose queues the shards take over (inside a ws-* lab
    /// namespace, or any interface with --allow-host).
    #[arg(long, value_name = "IF")]
    iface: Option<String>,
    /// --stack xdp: attach to any interface, the host's own included (off: only inside a
    /// ws-* lab namespace).
    #[arg(long)]
    allow_host: bool,
    /// --stack dpdk: the EAL's arguments, one string, e.g. `--no-huge -m 256 --no-pci
    /// --vdev=net_af_packet0,iface=eth1` or `-a 0000:3b:00.0`; they must name exactly one port.
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    dpdk_args: Option<String>,
    /// --stack xdp|dpdk: the address our stack answers for, with its prefix, e.g.
    /// 198.18.0.2/24. Give it an address the kernel does not own, so the two never compete.
    #[arg(long, value_name = "ADDR/LEN")]
    ip: Option<String>,
    /// --stack xdp|dpdk: the next hop for destinations outside --ip's prefix.
    #[arg(long, value_name = "ADDR")]
    gateway: Option<std::net::Ipv4Addr>,
    /// Write the exit summary as JSON to this file as well.
    #[arg(long, value_name = "FILE")]
    summary_json: Option<std::path::PathBuf>,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Http { fixed: bool },
    Echo,
}

/// What one shard did; summed into the exit line.
#[derive(Debug, Default, Clone, Serialize)]
struct ShardSummary {
    cpu: usize,
    connections: u64,
    requests: u64,
    bad_request: u64,
    headers_too_large: u64,
    not_found: u64,
    other_errors: u64,
    idle_closed: u64,
    refused: u64,
    /// Accepted connections whose SO_INCOMING_CPU was this shard's CPU.
    local_connections: u64,
    bytes_echoed: u64,
}

struct ShardState {
    stats: Stats,
    date: DateCache,
    active: Cell<usize>,
    local: Cell<u64>,
    echoed: Cell<u64>,
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
    if common.max_conns == 0 {
        bail!("--max-conns must be at least 1");
    }
    let engine = match common.engine {
        EngineArg::Epoll => EngineKind::Epoll,
        EngineArg::Uring => EngineKind::Uring,
    };
    let opts = ListenOptions {
        locality: match common.locality {
            LocalityArg::Cbpf => Locality::Cbpf,
            LocalityArg::None => Locality::None,
        },
        busy_poll_us: common.busy_poll_us,
        ..ListenOptions::default()
    };
    let rt = Runtime::builder()
        .cpus(cpus.clone())
        .engine(engine)
        .poll_us(common.poll_us)
        .napi_busy_poll_us(common.busy_poll_us)
        .handle_signals(true)
        .build()?;
    let app = match kind {
        Kind::Http { fixed: true } => "http (fixed)",
        Kind::Http { fixed: false } => "http",
        Kind::Echo => "echo",
    };
    let (sources, bound, bypass) = match common.stack {
        StackArg::Kernel => {
            let fds = bind_group(common.listen, &cpus, &opts)?;
            let bound = socket2::SockRef::from(&fds[0])
                .local_addr()
                .ok()
                .and_then(|a| a.as_socket())
                .unwrap_or(common.listen);
            (
                fds.into_iter()
                    .map(ListenerSource::Kernel)
                    .collect::<Vec<_>>(),
                bound,
                None,
            )
        }
        StackArg::Xdp | StackArg::Dpdk => {
            let (sources, bound, bypass) = open_bypass(&common, cpus.len())?;
            (sources, bound, Some(bypass))
        }
    };
    let drops_on = bypass.as_ref().map(|b| b.iface.clone()).unwrap_or_default();
    let stack_name = match &bypass {
        None => "kernel".to_string(),
        Some(b) => format!("bypass, {}", b.description),
    };
    eprintln!(
        "wirespeed serve {app}: listening on {bound}; {} shard(s) on CPUs {:?}; stack {stack_name}, engine {}, poll-us {}, busy-poll-us {}, locality {}",
        cpus.len(),
        cpus,
        rt.engine(),
        common.poll_us,
        common.busy_poll_us,
        match common.locality {
            LocalityArg::Cbpf => "cbpf",
            LocalityArg::None => "none",
        }
    );

    let sources: Arc<Mutex<Vec<Option<ListenerSource>>>> =
        Arc::new(Mutex::new(sources.into_iter().map(Some).collect()));
    let cfg = server::Config {
        idle_timeout: common.idle_timeout,
        fixed: matches!(kind, Kind::Http { fixed: true }),
    };
    let max_conns = common.max_conns;
    let port = bound.port();
    let per_shard = rt.run(move || {
        let source = sources
            .lock()
            .expect("listener table")
            .get_mut(wirespeed_rt::shard_id())
            .and_then(Option::take);
        let (cfg, opts) = (cfg.clone(), opts.clone());
        let drops_on = drops_on.clone();
        async move {
            let source = source.ok_or_else(|| "no listener for this shard".to_string())?;
            let listener = match source {
                ListenerSource::Kernel(fd) => {
                    TcpListener::from_kernel(Listener::new(fd, opts).map_err(|e| e.to_string())?)
                }
                ListenerSource::User(ShardDevice { queue, stack }) => {
                    let user = UserStack::start(&stack, queue);
                    user.on_drop_cause(move |cause| {
                        super::tell_drop_cause_once("serve", cause, &drops_on)
                    });
                    let listener = TcpListener::User(user.listen(port, 4096).map_err(|e| e.to_string())?);
                    let summary = shard_main(listener, cfg, kind, max_conns).await.map_err(|e| e.to_string());
                    let s = user.stats();
                    eprintln!(
                        "wirespeed serve: shard {} stack: rx {} tx {} frames; tcp segments in {} out {}, retransmits {} (fast {}, rto {}, loss probes {}), out-of-order {} (dropped {}), duplicates {}, bad checksums {} (partial {}), partial checksums taken {}",
                        wirespeed_rt::shard_id(),
                        s.rx_frames,
                        s.tx_frames,
                        s.tcp_segments_in,
                        s.tcp_segments_out,
                        s.tcp_retransmits,
                        s.tcp_fast_retransmits,
                        s.tcp_rto_expired,
                        s.tcp_loss_probes,
                        s.tcp_ooo_segments,
                        s.tcp_ooo_dropped,
                        s.tcp_duplicate_segments,
                        s.tcp_bad_checksum + s.udp_bad_checksum + s.ip_bad_checksum,
                        s.tcp_bad_checksum_partial + s.udp_bad_checksum_partial,
                        s.tcp_rx_csum_partial + s.udp_rx_csum_partial
                    );
                    return summary;
                }
            };
            shard_main(listener, cfg, kind, max_conns)
                .await
                .map_err(|e| e.to_string())
        }
    })?;

    let mut shards = Vec::new();
    for r in per_shard {
        shards.push(r.map_err(|e| anyhow::anyhow!("shard failed: {e}"))?);
    }
    let total = shards.iter().fold(ShardSummary::default(), |mut t, s| {
        t.connections += s.connections;
        t.requests += s.requests;
        t.bad_request += s.bad_request;
        t.headers_too_large += s.headers_too_large;
        t.not_found += s.not_found;
        t.other_errors += s.other_errors;
        t.idle_closed += s.idle_closed;
        t.refused += s.refused;
        t.local_connections += s.local_connections;
        t.bytes_echoed += s.bytes_echoed;
        t
    });
    let errors = total.bad_request + total.headers_too_large + total.not_found + total.other_errors;
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
    if let Some(path) = common.summary_json {
        #[derive(Serialize)]
        struct Summary<'a> {
            app: &'a str,
            engine: String,
            total: &'a ShardSummary,
            errors: u64,
            shards: &'a [ShardSummary],
        }
        let s = Summary {
            app,
            engine: rt_engine_name(engine),
            total: &total,
            errors,
            shards: &shards,
        };
        std::fs::write(&path, serde_json::to_vec_pretty(&s)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn rt_engine_name(e: EngineKind) -> String {
    e.to_string()
}

/// What a shard needs to open its listener; built on the main thread in shard order.
#[allow(clippy::large_enum_variant)] // a handful, built once at start
enum ListenerSource {
    Kernel(OwnedFd),
    User(ShardDevice),
}

/// Takes the device over for the bypass stack (`wirespeed_net::bypass`): one queue per shard.
/// The returned `Bypass` keeps the XDP program attached while it lives.
fn open_bypass(
    common: &Common,
    shards: usize,
) -> anyhow::Result<(Vec<ListenerSource>, SocketAddr, Bypass)> {
    let stack = match common.stack {
        StackArg::Dpdk => "dpdk",
        _ => "xdp",
    };
    let device = super::bypass_client::device(
        common.stack == StackArg::Dpdk,
        common.iface.as_deref(),
        common.allow_host,
        common.dpdk_args.as_deref(),
    )?;
    let ip = common.ip.as_deref().with_context(|| {
        format!("--stack {stack} needs --ip ADDR/LEN (the address our stack serves)")
    })?;
    let (addr, prefix_len) = super::bypass_client::parse_ip_prefix(ip)?;
    let port = common.listen.port();
    if port == 0 {
        bail!("--stack {stack} needs an explicit port in --listen");
    }
    let mut bypass = Bypass::open(&BypassConfig {
        device,
        ip: addr,
        prefix_len,
        gateway: common.gateway,
        shards,
        tcp_ports: vec![port],
        icmp: true,
        max_connections: common.max_conns * 2,
        ephemeral_ports: None,
        opens_connections: false,
    })?;
    for note in &bypass.notes {
        eprintln!("wirespeed serve: {note}");
    }
    let sources = std::mem::take(&mut bypass.shards)
        .into_iter()
        .map(ListenerSource::User)
        .collect();
    Ok((sources, SocketAddr::new(addr.into(), port), bypass))
}

async fn shard_main(
    listener: TcpListener,
    cfg: server::Config,
    kind: Kind,
    max_conns: usize,
) -> std::io::Result<ShardSummary> {
    let state = Rc::new(ShardState {
        stats: Stats::default(),
        date: DateCache::default(),
        active: Cell::new(0),
        local: Cell::new(0),
        echoed: Cell::new(0),
    });
    let ticker = state.clone();
    let _date_task = wirespeed_rt::spawn(async move {
        let mut every_second = wirespeed_rt::interval(Duration::from_secs(1));
        loop {
            every_second.tick().await;
            ticker.date.refresh();
        }
    });
    let cfg = Rc::new(cfg);
    loop {
        let conn = match wirespeed_rt::select(wirespeed_rt::shutdown_signal(), listener.accept())
            .await
        {
            Either::Left(()) => break,
            Either::Right(Ok(c)) => c,
            Either::Right(Err(e)) => {
                // EMFILE and friends: back off briefly instead of spinning on the error.
                if e.raw_os_error() == Some(libc::EMFILE) || e.raw_os_error() == Some(libc::ENFILE)
                {
                    eprintln!("wirespeed serve: accept: {e} (raise the fd limit with ulimit -n)");
                }
                wirespeed_rt::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if conn.incoming_cpu() == Some(wirespeed_rt::cpu()) {
            state.local.set(state.local.get() + 1);
        }
        let st = state.clone();
        if st.active.get() >= max_conns {
            wirespeed_rt::spawn(async move {
                match kind {
                    Kind::Http { .. } => server::refuse(conn, &st.date, &st.stats).await,
                    Kind::Echo => st.stats.refused.set(st.stats.refused.get() + 1),
                }
            });
            continue;
        }
        st.active.set(st.active.get() + 1);
        let cfg = cfg.clone();
        wirespeed_rt::spawn(async move {
            match kind {
                Kind::Http { .. } => {
                    server::serve_connection(conn, &cfg, &st.date, &st.stats).await
                }
                Kind::Echo => echo_connection(conn, &cfg, &st).await,
            }
            st.active.set(st.active.get() - 1);
        });
    }
    // Graceful stop: no new connections; give open ones a moment to finish their exchange.
    drop(listener);
    let deadline = wirespeed_rt::now() + Duration::from_millis(500);
    while state.active.get() > 0 && wirespeed_rt::now() < deadline {
        wirespeed_rt::sleep(Duration::from_millis(10)).await;
    }
    let s = &state.stats;
    Ok(ShardSummary {
        cpu: wirespeed_rt::cpu(),
        connections: s.connections.get() + s.refused.get(),
        requests: s.requests.get(),
        bad_request: s.bad_request.get(),
        headers_too_large: s.headers_too_large.get(),
        not_found: s.not_found.get(),
        other_errors: s.other_errors.get(),
        idle_closed: s.idle_closed.get(),
        refused: s.refused.get(),
        local_connections: state.local.get(),
        bytes_echoed: state.echoed.get(),
    })
}

async fn echo_connection(mut conn: TcpStream, cfg: &server::Config, st: &ShardState) {
    st.stats.connections.set(st.stats.connections.get() + 1);
    let mut buf = vec![0u8; 64 * 1024];
    let mut idle = wirespeed_rt::sleep(cfg.idle_timeout);
    loop {
        let n = match wirespeed_rt::race(&mut idle, conn.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => n,
            Err(_) => {
                st.stats.idle_closed.set(st.stats.idle_closed.get() + 1);
                return;
            }
            _ => return,
        };
        match wirespeed_rt::race(&mut idle, conn.write_all(&buf[..n])).await {
            Ok(Ok(())) => {}
            _ => return,
        }
        st.echoed.set(st.echoed.get() + n as u64);
        st.stats.requests.set(st.stats.requests.get() + 1);
        idle.reset(wirespeed_rt::now() + cfg.idle_timeout);
    }
}
