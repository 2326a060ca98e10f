//! `wirespeed showdown`: the seed ladder for HTTP plaintext on this machine.
//!
//! A `pair` lab per row and round (client namespace <-> server namespace over a veth), the
//! server pinned to CPU 1, the load generator (crates/load) pinned to CPU 0 with 256
//! connections, rows alternating round by round, probes on the server over exactly the
//! measured interval. Results: the table on stdout, results/showdown.{json,md}, and the charts
//! (results/showdown.svg, showdown-echo.svg, showdown-lb.svg, each with its PNG).
//!
//! Adding a row (the bypass rows: AF_XDP, DPDK) means adding a [`Server`] variant that knows
//! how to start that server in the server namespace (`start_server`, `showdown_server.rs`),
//! and a [`RowSpec`] in [`ladder`] (`showdown_rows.rs`).
//!
//! Rows 14-19 scale rows 4 and 7 to 2, 4 and 8 shards, one CPU and one veth queue per shard
//! and as many load generator threads on CPUs of their own ([`Placement`]); a machine with
//! fewer than twice as many CPUs skips them, saying so.
//!
//! Rows 12 and 13 are the L4 load balancer's: full-NAT pps through nftables and through
//! `wirespeed lb`, measured on an `lb` lab of their own by lb_bench's code (`showdown_lb.rs`).
//!
//! `--role server|client` runs the same rows between two hosts instead of the lab: the
//! client drives the load and the rounds, the server starts each row's server and probes it
//! (`showdown_remote.rs`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{bail, Context};
use wirespeed_lab::topo::{self, Lab, LabSpec, RxModel, Topology};
use wirespeed_load::echo::EchoParser;
use wirespeed_load::http::{build_request, HttpParser, Target};
use wirespeed_load::parse_duration;
use wirespeed_load::{self as load, LoadSpec, PHASE_DONE, PHASE_MEASURING};
use wirespeed_probe::{Probe, ProbeOpts, ProbeReport};
use wirespeed_showdown::chart as showdown_chart;
use wirespeed_showdown::results::{RoundFigures, Row, Showdown};
use wirespeed_sys::netns;
use wirespeed_sys::signal::Signals;

#[path = "showdown_lb.rs"]
mod lb_rows;
#[path = "showdown_remote.rs"]
mod remote;
#[path = "showdown_rows.rs"]
mod rows;
#[path = "showdown_server.rs"]
mod server;

use rows::{
    fill_from_ladder, ladder, too_few_cpus, with_base_rows, Placement, RowSpec, Server, Workload,
    ECHO_SIZE, MODERATION_DEFER_HARD_IRQS, MODERATION_GRO_FLUSH_TIMEOUT_NS, PINGPONG_CONNECTIONS,
    STREAM_CONNECTIONS, STREAM_DEPTH,
};
use server::start_server;

const LAB: &str = "sd";
/// The server's CPU in every one-shard row, and on a server host (`--role server`).
const SERVER_CPU: usize = 1;
const CLIENT_CPU: usize = 0;
const PORT: u16 = 8080;
/// nginx's prefix, config, pid and temp files (not the results directory).
const NGINX_DIR: &str = "/run/wirespeed/showdown-nginx";

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
    #[arg(long, value_parser = dur)]
    warmup: Option<Duration>,
    /// Measured interval per row and round (default 5s, or 2s with --quick).
    #[arg(short = 'd', long, value_parser = dur)]
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
    #[arg(long, default_value = "napi", value_parser = rx_model)]
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
    #[arg(long, default_value_t = 9000, value_parser = echo_mtu)]
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

fn echo_mtu(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(m) if (1280..=9000).contains(&m) => Ok(m),
        _ => Err(format!(
            "`{s}` is not an MTU this showdown runs: give 1280..=9000"
        )),
    }
}

fn rx_model(s: &str) -> Result<RxModel, String> {
    RxModel::parse(s).map_err(|e| e.to_string())
}

fn dur(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

/// The address the bypass stack serves: the server's subnet, host 100.
fn bypass_addr(kernel_addr: std::net::Ipv4Addr) -> std::net::Ipv4Addr {
    let o = kernel_addr.octets();
    std::net::Ipv4Addr::new(o[0], o[1], o[2], 100)
}

/// Where the row's server answers.
fn serve_addr(spec: &RowSpec, lab: &Lab) -> anyhow::Result<std::net::Ipv4Addr> {
    let kernel = lab
        .node("s")
        .and_then(|n| n.addr4())
        .context("server address")?;
    Ok(match spec.server {
        Server::WirespeedXdp { .. } => bypass_addr(kernel),
        _ => kernel,
    })
}

/// SIGINT/SIGTERM, blocked on the main thread before any other thread starts and read from a
/// signalfd between steps, so an interrupted showdown still takes its lab down. The servers it
/// starts unblock them again (`unblock_signals`), so they stop on SIGINT as usual.
static SIGNALS: OnceLock<Signals> = OnceLock::new();
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

fn block_signals() -> anyhow::Result<()> {
    let _ = SIGNALS.set(super::block_termination()?);
    Ok(())
}

fn check_interrupt() -> anyhow::Result<()> {
    if let Some(Ok(Some(_))) = SIGNALS.get().map(Signals::take) {
        INTERRUPTED.store(true, Ordering::SeqCst);
    }
    if INTERRUPTED.load(Ordering::SeqCst) {
        bail!("interrupted; the lab was taken down and host settings restored");
    }
    Ok(())
}

fn which(prog: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(prog))
        .find(|p| p.is_file())
}

fn shell(cmd: &str) -> String {
    Command::new("sh")
        .args(["-c", cmd])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// How long each row and round is traced with the BPF probes, after its measured interval.
const TRACED_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Clone, Copy)]
struct Plan {
    connections: usize,
    rx_model: RxModel,
    napi_defer_hard_irqs: u32,
    gro_flush_timeout_ns: u64,
    /// The echo rows' link MTU (`--mtu`).
    echo_mtu: u32,
    warmup: Duration,
    duration: Duration,
    bpf: bool,
}

/// One round of one row: its figures, the server's command line, and every setting its lab
/// applied.
struct RoundRun {
    figures: RoundFigures,
    server: String,
    settings: Vec<String>,
    /// The MTU of the server's link, where it was read.
    mtu: Option<u32>,
}

fn run_row(spec: &RowSpec, plan: &Plan, out: &Path) -> anyhow::Result<RoundRun> {
    run_row_at(spec, &Placement::for_shards(spec.shards), plan, out)
}

/// [`run_row`] on the CPUs of `at`, one veth queue per server CPU.
fn run_row_at(spec: &RowSpec, at: &Placement, plan: &Plan, out: &Path) -> anyhow::Result<RoundRun> {
    check_interrupt()?;
    if let Server::LoadBalancer { xdp } = spec.server {
        let (figures, server) =
            lb_rows::round(xdp, at.server[0], at.client[0], plan.warmup, plan.duration)?;
        return Ok(RoundRun {
            figures,
            server,
            settings: vec![],
            mtu: None,
        });
    }
    let mut ls = LabSpec::new(LAB, Topology::Pair);
    ls.profile = spec.profile;
    ls.rx_model = plan.rx_model;
    ls.napi_defer_hard_irqs = plan.napi_defer_hard_irqs;
    ls.gro_flush_timeout_ns = plan.gro_flush_timeout_ns;
    ls.napi_defer_roles = vec!["s".into()];
    ls.queues = at.server.len() as u32;
    ls.cpus.insert("c".into(), at.client.clone());
    ls.cpus.insert("s".into(), at.server.clone());
    let lab = Lab::up(&ls).context("lab up")?;
    let mut settings = vec![format!(
        "lab {}: client CPUs {}, server CPUs {}, {} queue(s) per veth, profile {}",
        ls.topology.name(),
        at.client_list(),
        at.server_list(),
        ls.queues,
        ls.profile.name()
    )];
    settings.extend(lab.tuning.iter().cloned());
    if matches!(spec.workload, Workload::EchoPingPong | Workload::EchoStream) {
        set_mtu(&lab, plan.echo_mtu, &mut settings)?;
    }
    let mtu = link_mtu(&lab, "s");
    let (server, line) = start_server(
        spec,
        &at.server_list(),
        &lab,
        &out.join("showdown-server.log"),
        Path::new(NGINX_DIR),
    )?;

    let addr = serve_addr(spec, &lab)?;
    let client_ns = Some(format!("ws-{LAB}-c"));
    let probe_opts = |bpf| ProbeOpts {
        pid: server.pid(),
        cpus: Some(at.server.clone()),
        bpf,
        receive_threads: lab.napi_threads("s").to_vec(),
    };
    // The BPF probes run a program on every syscall and received packet of the machine:
    // about 3 µs per request on the syscall-bound rows (docs/INSTRUMENTS.md). So the
    // figures come from an untraced interval, and the syscall and locality figures from a
    // short traced one after it, on the same server.
    let mut probe = LocalProbe(Some(Probe::prepare(&probe_opts(false))?));
    let mut figures = drive(spec, plan, at, addr, client_ns.clone(), &mut probe)?;
    if plan.bpf {
        let traced_plan = Plan {
            warmup: Duration::from_millis(200),
            duration: TRACED_INTERVAL,
            ..*plan
        };
        let mut traced = LocalProbe(Some(Probe::prepare(&probe_opts(true))?));
        let t = drive(spec, &traced_plan, at, addr, client_ns, &mut traced)?;
        figures.syscalls_per_req = t.syscalls_per_req;
        figures.locality_pct = t.locality_pct;
    }
    drop(server);
    lab.down()?;
    Ok(RoundRun {
        figures,
        server: line,
        settings,
        mtu,
    })
}

/// Sets `mtu` on both ends of the lab's link (before any server or XDP program is on it).
fn set_mtu(lab: &Lab, mtu: u32, settings: &mut Vec<String>) -> anyhow::Result<()> {
    for role in ["c", "s"] {
        let (Some(ns), Some(i)) = (lab.ns(role), lab.node(role).and_then(|n| n.ifaces.first()))
        else {
            bail!("lab has no `{role}` node");
        };
        ns.ip(&["link", "set", &i.name, "mtu", &mtu.to_string()])
            .with_context(|| format!("set MTU {mtu} on {role}:{}", i.name))?;
        settings.push(format!("{role}:{} mtu {mtu}", i.name));
    }
    Ok(())
}

/// The MTU of node `role`'s first interface, as the kernel reports it.
fn link_mtu(lab: &Lab, role: &str) -> Option<u32> {
    let name = &lab.node(role)?.ifaces.first()?.name;
    let text = lab.ns(role)?.ip(&["-o", "link", "show", name]).ok()?;
    let mut words = text.split_whitespace();
    words.find(|w| *w == "mtu")?;
    words.next()?.parse().ok()
}

/// The server's probe as the load side sees it: snapshots at the edges of the measured
/// interval (here, or on the server host over the control connection).
trait ServerProbe {
    fn begin(&mut self) -> anyhow::Result<()>;
    fn end(&mut self) -> anyhow::Result<ProbeReport>;
}

/// A probe on a server in this machine's lab.
struct LocalProbe(Option<Probe>);

impl ServerProbe for LocalProbe {
    fn begin(&mut self) -> anyhow::Result<()> {
        Ok(self.0.as_mut().context("probe already ended")?.begin()?)
    }

    fn end(&mut self) -> anyhow::Result<ProbeReport> {
        Ok(self.0.take().context("probe already ended")?.end()?)
    }
}

/// The client's side of one round: the row's load against `addr` (from namespace `ns` when
/// given, else from here) on the client CPUs of `at`, one thread on each, the server's probe
/// snapshotted at the edges of the measured interval, the figures of both sides.
fn drive(
    spec: &RowSpec,
    plan: &Plan,
    at: &Placement,
    addr: std::net::Ipv4Addr,
    ns: Option<String>,
    probe: &mut dyn ServerProbe,
) -> anyhow::Result<RoundFigures> {
    let target = Target::parse(&format!("http://{addr}:{PORT}/plaintext"))?;
    let phase = Arc::new(AtomicU8::new(0));
    let (connections, depth, request) = match spec.workload {
        Workload::Http => (
            plan.connections * spec.shards,
            1,
            build_request("GET", &target, &[])?,
        ),
        Workload::EchoPingPong => (
            PINGPONG_CONNECTIONS,
            1,
            wirespeed_load::echo::message(ECHO_SIZE),
        ),
        Workload::EchoStream => (
            STREAM_CONNECTIONS,
            STREAM_DEPTH,
            wirespeed_load::echo::message(ECHO_SIZE),
        ),
        Workload::LbFullNatPps => bail!("the load balancer rows have no client (lb_rows)"),
    };
    let load_spec = LoadSpec {
        addr: target.addr,
        connections,
        threads: at.client.len(),
        cpus: Some(at.client.clone()),
        warmup: plan.warmup,
        duration: plan.duration,
        depth,
        rate: None,
        timeout: Duration::from_secs(2),
        request,
        live: false,
        phase: Some(phase.clone()),
        engine: load::Engine::Uring,
    };
    let workload = spec.workload;
    let run = move || match workload {
        Workload::Http => load::run(&load_spec, HttpParser::default()),
        _ => load::run(&load_spec, EchoParser::new(ECHO_SIZE)),
    };
    // The load threads inherit the client namespace from this one.
    let client = match ns {
        Some(ns) => netns::spawn_in(&ns, run)?,
        None => std::thread::spawn(move || Ok(run())),
    };
    let wait_phase = |want: u8| {
        while phase.load(Ordering::SeqCst) < want && !client.is_finished() {
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    wait_phase(PHASE_MEASURING);
    probe.begin()?;
    wait_phase(PHASE_DONE);
    let mut report = probe.end()?;
    let result = client
        .join()
        .map_err(|_| anyhow::anyhow!("load thread panicked"))???;
    report.set_requests(Some(result.requests));

    let l = &result.hist.percentiles();
    let fig = RoundFigures {
        rps: result.rps(),
        p50_us: l.p50,
        p99_us: l.p99,
        p9999_us: l.p9999,
        cpu_us_per_req: report.cpu.us_per_req,
        syscalls_per_req: report.syscalls.as_ref().and_then(|s| s.per_req),
        ctx_switches_per_s: report.ctx_switches.per_s,
        locality_pct: report.locality.as_ref().and_then(|l| l.pct),
        client_cpu_pct: result.client_cpu_pct(),
        client_cpu_us_per_req: result.client_cpu_us_per_req(),
        server_cpu_pct: report.cpu.pct,
        errors: result.errors.total(),
    };
    if let Some(e) = &report.bpf_error {
        eprintln!("  note: {e}");
    }
    Ok(fig)
}

fn write_reports(sd: &Showdown, out: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
    let json = out.join("showdown.json");
    std::fs::write(&json, serde_json::to_string_pretty(sd)? + "\n")
        .with_context(|| format!("write {}", json.display()))?;
    std::fs::write(out.join("showdown.md"), sd.markdown())?;
    let mut written = vec![json, out.join("showdown.md")];
    let mut png_error = None;
    for svg in showdown_chart::write_svgs(sd, out)? {
        written.push(svg.clone());
        if png_error.is_some() {
            // An earlier run's PNG would not show this run's figures.
            let _ = std::fs::remove_file(svg.with_extension("png"));
            continue;
        }
        match showdown_chart::png(&svg) {
            Ok(png) => written.push(png),
            Err(why) => {
                let _ = std::fs::remove_file(svg.with_extension("png"));
                png_error = Some(why);
            }
        }
    }
    if let Some(why) = png_error {
        eprintln!("{why}");
    }
    println!("{}", sd.table());
    let names: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
    println!("wrote {}", names.join(", "));
    Ok(())
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if let Some(path) = &a.render {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
        let mut sd: Showdown =
            serde_json::from_str(&text).with_context(|| format!("parse {}", path.display()))?;
        fill_from_ladder(&mut sd);
        return write_reports(&sd, &a.out);
    }
    match a.role {
        Some(Role::Server) => {
            let listen = a.listen.context(
                "--role server needs --listen ADDR:PORT, the address the client's --peer names",
            )?;
            block_signals()?;
            return remote::serve(listen, a.allow_host);
        }
        Some(Role::Client) => {
            let peer = a.peer.context(
                "--role client needs --peer ADDR:PORT, the server host's --listen address",
            )?;
            block_signals()?;
            let mut control = remote::Control::connect(peer)?;
            let server_cpus = format!("{SERVER_CPU} on the server host {peer}");
            return measure(
                &a,
                &server_cpus,
                &remote::lab_only,
                &mut |row, spec, plan, _| control.round(row, spec, plan),
            );
        }
        None => {}
    }
    if !wirespeed_lab::is_root() {
        bail!("the showdown builds network namespaces and loads BPF probes: run it as root (sudo make run)");
    }
    block_signals()?;
    // A lab left by a crashed run would make `lab up` refuse.
    let _ = topo::down(LAB);
    let ncpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let result = measure(
        &a,
        &SERVER_CPU.to_string(),
        &|spec| nginx_missing(spec).or_else(|| too_few_cpus(spec, ncpus)),
        &mut |_, spec, plan, out| run_row(spec, plan, out),
    );
    let _ = topo::down(LAB);
    result
}

/// Why a row cannot run in this machine's lab before it starts: nginx not installed.
fn nginx_missing(spec: &RowSpec) -> Option<String> {
    (matches!(spec.server, Server::Nginx) && which("nginx").is_none())
        .then(|| "nginx is not installed (make deps installs it)".into())
}

/// One round of one row (its 1-based number, its spec), wherever it runs.
type RunRound<'a> = dyn FnMut(usize, &RowSpec, &Plan, &Path) -> anyhow::Result<RoundRun> + 'a;

/// The showdown's rounds over the chosen rows, each round of each row run by `run_round`
/// (rows that `skip` names a reason for are skipped), then the reports.
fn measure(
    a: &Args,
    server_cpus: &str,
    skip: &dyn Fn(&RowSpec) -> Option<String>,
    run_round: &mut RunRound,
) -> anyhow::Result<()> {
    let rounds = a.rounds.unwrap_or(if a.quick { 1 } else { 3 }).max(1);
    let plan = Plan {
        connections: a.connections,
        rx_model: a.rx_model,
        napi_defer_hard_irqs: a.napi_defer_hard_irqs,
        gro_flush_timeout_ns: a.gro_flush_timeout_ns,
        echo_mtu: a.mtu,
        warmup: a
            .warmup
            .unwrap_or(Duration::from_millis(if a.quick { 500 } else { 1000 })),
        duration: a
            .duration
            .unwrap_or(Duration::from_secs(if a.quick { 2 } else { 5 })),
        bpf: !a.no_bpf,
    };
    let wanted: Option<Vec<usize>> = a.rows.as_deref().map(|s| {
        with_base_rows(
            &ladder(),
            s.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        )
    });
    std::fs::create_dir_all(&a.out).with_context(|| format!("create {}", a.out.display()))?;
    let out = std::fs::canonicalize(&a.out)?;
    let _ = std::fs::remove_file(out.join("showdown-server.log"));
    let _ = std::fs::remove_file(out.join("showdown-server.json"));

    let mut rows: Vec<(RowSpec, Row)> = ladder()
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i == 0 || wanted.as_ref().is_none_or(|w| w.contains(&(i + 1))))
        .map(|(i, spec)| {
            let row = Row {
                row: i + 1,
                base_row: spec.base_row,
                name: spec.name.into(),
                profile: spec.profile.name().into(),
                workload: spec.workload_name().into(),
                seed_ratio: spec.seed.map(|s| s.ratio),
                seed_source: spec.seed.map(|s| s.source.into()),
                ..Default::default()
            };
            (spec, row)
        })
        .collect();
    for (spec, row) in rows.iter_mut() {
        row.skipped = skip(spec);
    }

    eprintln!(
        "showdown: {} rows x {rounds} round(s), {:.1}s warm-up + {:.1}s each, {} connections; client CPU {CLIENT_CPU}, server CPU {SERVER_CPU} (scaling rows: a CPU per shard on each side)",
        rows.len(),
        plan.warmup.as_secs_f64(),
        plan.duration.as_secs_f64(),
        plan.connections
    );
    for round in 1..=rounds {
        for (spec, row) in rows.iter_mut() {
            if row.skipped.is_some() {
                continue;
            }
            match run_round(row.row, spec, &plan, &out) {
                Ok(RoundRun {
                    figures: fig,
                    server: line,
                    settings,
                    mtu,
                }) => {
                    eprintln!(
                        "  round {round}/{rounds} row {} {:<22} {:>9.0} req/s  p99 {:>7.0} us  server {:>5.1}% CPU  client {:>5.1}% CPU",
                        row.row, row.name, fig.rps, fig.p99_us, fig.server_cpu_pct, fig.client_cpu_pct
                    );
                    row.server = line;
                    row.profile_settings = settings;
                    row.mtu = mtu;
                    row.rounds.push(fig);
                }
                Err(e) => {
                    check_interrupt()?;
                    eprintln!(
                        "  round {round}/{rounds} row {} {}: {e:#}",
                        row.row, row.name
                    );
                    if row.rounds.is_empty() && round == rounds {
                        row.skipped = Some(format!("failed: {e:#}"));
                    }
                }
            }
        }
    }
    let mut sd = Showdown {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        date: shell("date -u +%Y-%m-%dT%H:%M:%SZ"),
        uname_r: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
        tcp_congestion_control: std::fs::read_to_string(
            "/proc/sys/net/ipv4/tcp_congestion_control",
        )
        .unwrap_or_default()
        .trim()
        .to_string(),
        nproc: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        commit: shell("git rev-parse --short HEAD 2>/dev/null"),
        client_cpus: CLIENT_CPU.to_string(),
        server_cpus: server_cpus.to_string(),
        connections: plan.connections,
        warmup_s: plan.warmup.as_secs_f64(),
        duration_s: plan.duration.as_secs_f64(),
        rounds,
        latency: "closed loop (wrk-like), 1 request in flight per connection".into(),
        rows: rows
            .into_iter()
            .map(|(_, mut r)| {
                if r.skipped.is_none() && r.rounds.is_empty() {
                    r.skipped = Some("no round completed".into());
                }
                r.summarize();
                r
            })
            .collect(),
    };
    sd.compute_ratios();
    write_reports(&sd, &out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scaling rows' plumbing, on any machine: rows 14 and 15 (2 shards) with the two
    /// shards on CPUs 0 and 1 and the load generator on CPU 0, overlapping (a figure from
    /// this says nothing; that the lab gets two queues, the server two shards that both
    /// serve, and the load two threads' worth of connections, does).
    #[test]
    fn a_two_shard_row_runs_two_shards_on_two_queues() {
        assert!(
            wirespeed_lab::is_root(),
            "this test builds a lab: run it as root"
        );
        let _ = topo::down(LAB);
        let ladder = ladder();
        let out = std::env::temp_dir().join(format!("ws-showdown-test-{}", std::process::id()));
        std::fs::create_dir_all(&out).unwrap();
        let plan = Plan {
            connections: 8,
            rx_model: RxModel::Napi,
            napi_defer_hard_irqs: MODERATION_DEFER_HARD_IRQS,
            gro_flush_timeout_ns: MODERATION_GRO_FLUSH_TIMEOUT_NS,
            echo_mtu: 1500,
            warmup: Duration::from_millis(200),
            duration: Duration::from_millis(800),
            bpf: false,
        };
        let at = Placement {
            client: vec![0],
            server: vec![0, 1],
        };
        for row in [14, 15] {
            let spec = &ladder[row - 1];
            assert_eq!(spec.shards, 2, "{}", spec.name);
            // What start_server asks the bypass server to write at exit (--summary-json).
            let summary = out.join("showdown-server.json");
            let _ = std::fs::remove_file(&summary);
            let run = run_row_at(spec, &at, &plan, &out).unwrap();
            assert!(run.server.contains("--cpus 0,1"), "{}", run.server);
            assert!(
                run.settings[0].contains("server CPUs 0,1, 2 queue(s) per veth"),
                "{:?}",
                run.settings
            );
            let fig = &run.figures;
            assert!(fig.rps > 0.0 && fig.errors == 0, "row {row}: {fig:?}");
            if matches!(spec.server, Server::WirespeedXdp { .. }) {
                // Each shard's queue got frames: its stack's rx_frames in the exit summary.
                let text = std::fs::read_to_string(&summary).unwrap();
                let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                for shard in 0..2 {
                    let rx = v["stack"][shard]["rx_frames"].as_u64();
                    assert!(rx.is_some_and(|n| n > 0), "shard {shard} idle:\n{text}");
                }
            }
        }
        let _ = std::fs::remove_dir_all(&out);
    }

    #[test]
    fn the_echo_mtu_is_a_jumbo_or_ordinary_mtu_or_a_one_line_refusal() {
        assert_eq!(echo_mtu("9000"), Ok(9000));
        assert_eq!(echo_mtu("1280"), Ok(1280));
        for bad in ["1279", "9001", "jumbo", ""] {
            let err = echo_mtu(bad).unwrap_err();
            assert!(err.contains("1280..=9000") && !err.contains('\n'), "{err}");
        }
    }
}
