//! `wirespeed showdown`: the seed ladder for HTTP plaintext, echo and the L4 load balancer on
//! this machine (crates/showdown runs it; docs/INSTRUMENTS.md says how). `--role
//! server|client` runs the same rows between two hosts instead of the lab.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use wirespeed_lab::topo::RxModel;
use wirespeed_load::parse_duration;
use wirespeed_showdown::{
    parse_echo_mtu, Mode, Plan, RoundPlan, MODERATION_DEFER_HARD_IRQS,
    MODERATION_GRO_FLUSH_TIMEOUT_NS,
};

#[derive(clap::Args)]
pub struct Args {
    /// One round, 0.5 s warm-up, 2 s measured per row (under 2 minutes).
    #[arg(long)]
    quick: bool,
    /// Where results go.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// HTTP connections of the load generator (rows 1-7; the echo rows use their own counts).
    #[arg(short = 'c', long, default_value_t = 256)]
    connections: usize,
    /// Rounds (default 3, or 1 with --quick).
    #[arg(long)]
    rounds: Option<usize>,
    /// Warm-up before each measured interval, not counted (default 1s, or 0.5s with --quick).
    #[arg(long, value_parser = parse_duration)]
    warmup: Option<Duration>,
    /// Measured interval per row and round (default 5s, or 2s with --quick).
    #[arg(short = 'd', long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Only these rows, e.g. 1,2,6 (row 1 is always run: it is the reference; so is each
    /// chosen row's base row, e.g. 8 for 9). HTTP: 1 untuned
    /// kernel, 2 tuned kernel, 3 + perfect locality, 4 + busy poll, 5 io_uring, 6 nginx,
    /// 7 bypass; echo: 8 ping-pong kernel, 9 ping-pong bypass, 10 stream kernel, 11 stream
    /// bypass; L4 load balancer, full-NAT pps of 64-byte TCP: 12 nftables, 13 wirespeed lb;
    /// scaling (a CPU per shard on each side; skipped without 2 CPUs per shard): 14, 16, 18
    /// row 4 on 2, 4, 8 shards, 15, 17, 19 row 7 on as many.
    #[arg(long)]
    rows: Option<String>,
    /// Skip the BPF probes (no syscall or locality figures).
    #[arg(long)]
    no_bpf: bool,
    /// How the lab stands in for a NIC's receive queues: `napi` (each veth queue's NAPI polls
    /// in a thread, on the default CPUs in the untuned rows 1 and 7-11 and pinned to its side's
    /// CPU in the tuned rows, as IRQ affinity pins a NIC queue), `napi-host` (the same, with
    /// the untuned rows' threads kept on their side's CPUs, as a host's interrupts stay on
    /// that host), `rps` (tuned rows: the sender's softirq hands each packet over by IPI),
    /// `sender` (the veth default: the receive runs on the sending CPU). docs/INSTRUMENTS.md
    /// compares them.
    #[arg(long, default_value = "napi", value_parser = RxModel::parse)]
    rx_model: RxModel,
    /// Tuned rows: interrupt moderation on the server's queue, as napi_defer_hard_irqs (the
    /// load generator's queue is left alone). 0 turns it off. docs/INSTRUMENTS.md has the
    /// measurement.
    #[arg(long, value_name = "N", default_value_t = MODERATION_DEFER_HARD_IRQS)]
    napi_defer_hard_irqs: u32,
    /// Tuned rows: the moderation's timer, the server queue's gro_flush_timeout in ns (the
    /// kernel's documented pairing with preferred busy polling).
    #[arg(long, value_name = "NS", default_value_t = MODERATION_GRO_FLUSH_TIMEOUT_NS)]
    gro_flush_timeout_ns: u64,
    /// The MTU of the echo rows' veths (8-11, both stacks alike), 1280..=9000. The HTTP rows
    /// keep 1500. A datacenter NIC runs 9000: there our stack sends jumbo frames through
    /// multi-buffer AF_XDP, as the kernel sends jumbo segments.
    #[arg(long, default_value_t = 9000, value_parser = parse_echo_mtu)]
    mtu: u32,
    /// Measure nothing: rewrite the table, Markdown and charts from an earlier showdown.json.
    #[arg(long, value_name = "JSON")]
    render: Option<PathBuf>,
    /// Two hosts instead of the lab: `server` on the host under test (with --listen), `client`
    /// on the load host (with --peer); the client says which row runs next and writes the
    /// results.
    #[arg(long, value_enum)]
    role: Option<Role>,
    /// `--role server`: the control connection's address; each row's server listens on the
    /// same address, port 8080.
    #[arg(long, value_name = "ADDR:PORT", requires = "role")]
    listen: Option<SocketAddr>,
    /// `--role client`: the server host's --listen address.
    #[arg(long, value_name = "ADDR:PORT", requires = "role")]
    peer: Option<SocketAddr>,
    /// `--role server`: let the tuned rows change the real interface's settings (restored
    /// after each row). Without it they are refused, except on a lab address (198.18.0.0/15).
    #[arg(long, requires = "role")]
    allow_host: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum)]
enum Role {
    Server,
    Client,
}

/// The plan that `a` asks for: --quick's and the defaults' rounds and times, the rows, the mode.
fn plan(a: Args) -> anyhow::Result<Plan> {
    let mode = match (a.render, a.role) {
        (Some(path), _) => Mode::Render(path),
        (None, Some(Role::Server)) => Mode::Server {
            listen: a.listen.context(
                "--role server needs --listen ADDR:PORT, the address the client's --peer names",
            )?,
            allow_host: a.allow_host,
        },
        (None, Some(Role::Client)) => Mode::Client {
            peer: a.peer.context(
                "--role client needs --peer ADDR:PORT, the server host's --listen address",
            )?,
        },
        (None, None) => Mode::Lab,
    };
    let ms = |quick, normal| Duration::from_millis(if a.quick { quick } else { normal });
    Ok(Plan {
        mode,
        out: a.out,
        rounds: a.rounds.unwrap_or(if a.quick { 1 } else { 3 }).max(1),
        rows: a
            .rows
            .as_deref()
            .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect()),
        round: RoundPlan {
            connections: a.connections,
            rx_model: a.rx_model,
            napi_defer_hard_irqs: a.napi_defer_hard_irqs,
            gro_flush_timeout_ns: a.gro_flush_timeout_ns,
            echo_mtu: a.mtu,
            warmup: a.warmup.unwrap_or(ms(500, 1000)),
            duration: a.duration.unwrap_or(ms(2000, 5000)),
            bpf: !a.no_bpf,
        },
    })
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let plan = plan(a)?;
    // Blocked before any thread starts, read between steps: an interrupted showdown still
    // takes its lab down and restores the host's settings.
    let signals = match plan.mode {
        Mode::Render(_) => None,
        _ => Some(super::block_termination()?),
    };
    wirespeed_showdown::run(&plan, signals)
}
