//! `wirespeed showdown`: the seed ladder for HTTP plaintext on this machine.
//!
//! A `pair` lab per row and round (client namespace <-> server namespace over a veth), the
//! server pinned to CPU 1, the load generator (crates/bench) pinned to CPU 0 with 256
//! connections, rows alternating round by round, probes on the server over exactly the
//! measured interval. Results: the table on stdout, results/showdown.{json,md}, and the charts
//! (results/showdown.svg, showdown-echo.svg, showdown-lb.svg, each with its PNG).
//!
//! Adding a row (the bypass rows: AF_XDP, DPDK) means adding a [`Server`] variant that knows
//! how to start that server in the server namespace, and a [`RowSpec`] in [`ladder`].
//!
//! Rows 12 and 13 are the L4 load balancer's: full-NAT pps through nftables and through
//! `wirespeed lb`, measured on an `lb` lab of their own by lb_bench's code (`showdown_lb.rs`).

use std::fs::File;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use wirespeed_bench::echo::EchoParser;
use wirespeed_bench::http::{build_request, HttpParser, Target};
use wirespeed_bench::load::{self, LoadSpec, PHASE_DONE, PHASE_MEASURING};
use wirespeed_bench::parse_duration;
use wirespeed_bench::probe::{Probe, ProbeOpts};
use wirespeed_bench::showdown::{RoundFigures, Row, Showdown};
use wirespeed_bench::showdown_chart;
use wirespeed_bench::showdown_seed::{self as seed, SeedRatio};
use wirespeed_lab::topo::{self, Lab, LabSpec, Profile, Topology};
use wirespeed_sys::signal::{CommandExt as _, Signal, Signals};
use wirespeed_sys::{netns, process};

#[path = "showdown_lb.rs"]
mod lb_rows;

const LAB: &str = "sd";
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
    /// Only these rows, e.g. 1,2,6 (row 1 is always run: it is the reference). HTTP: 1 untuned
    /// kernel, 2 tuned kernel, 3 + perfect locality, 4 + busy poll, 5 io_uring, 6 nginx,
    /// 7 bypass; echo: 8 ping-pong kernel, 9 ping-pong bypass, 10 stream kernel, 11 stream
    /// bypass; L4 load balancer, full-NAT pps of 64-byte TCP: 12 nftables, 13 wirespeed lb.
    #[arg(long)]
    rows: Option<String>,
    /// Skip the BPF probes (no syscall or locality figures).
    #[arg(long)]
    no_bpf: bool,
    /// Measure nothing: rewrite the table, Markdown and SVG from an earlier showdown.json.
    #[arg(long, value_name = "JSON")]
    render: Option<PathBuf>,
}

fn dur(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

/// How a row's server is started in the server namespace.
#[derive(Clone, Debug)]
enum Server {
    /// `wirespeed serve http|echo --stack kernel ...`
    Wirespeed {
        app: &'static str,
        engine: &'static str,
        poll_us: u32,
        busy_poll_us: u32,
        locality: &'static str,
    },
    /// nginx, one worker (master_process off), access_log off; the distribution's build.
    Nginx,
    /// `wirespeed serve http|echo --stack xdp`: our TCP/IP stack on an AF_XDP socket on the
    /// server namespace's interface, answering for its own address ([`bypass_addr`]) beside
    /// the kernel's.
    WirespeedXdp { app: &'static str },
    /// No server: the load balancer's rows forward packets (`xdp`: `wirespeed lb`, else
    /// nftables DNAT+SNAT).
    LoadBalancer { xdp: bool },
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

/// What the client sends.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Workload {
    /// GET /plaintext, `--connections` connections, one request in flight each.
    Http,
    /// 512-byte messages, each sent when the previous one came back (Photon's ping-pong).
    EchoPingPong,
    /// 512-byte messages, many in flight on few connections (Photon's streaming).
    EchoStream,
    /// 64-byte TCP segments of 4,096 established connections through a full-NAT load
    /// balancer to 4 reals (lb_bench's rows; req/s is packets/s).
    LbFullNatPps,
}

impl Workload {
    /// As the results name it (`Row::workload`; the charts group rows by it).
    fn name(self) -> &'static str {
        match self {
            Workload::Http => "http",
            Workload::EchoPingPong => "echo-pingpong",
            Workload::EchoStream => "echo-stream",
            Workload::LbFullNatPps => "lb-fullnat-pps",
        }
    }
}

const ECHO_SIZE: usize = 512;
const PINGPONG_CONNECTIONS: usize = 64;
const STREAM_CONNECTIONS: usize = 4;
const STREAM_DEPTH: usize = 64;

#[derive(Clone, Debug)]
struct RowSpec {
    name: &'static str,
    profile: Profile,
    server: Server,
    workload: Workload,
    /// The row whose figures this one is compared with (1-based).
    base_row: usize,
    /// The seed's figure for the same step over the seed's own base, where it has one.
    seed: Option<SeedRatio>,
}

fn http(name: &'static str, profile: Profile, server: Server, seed: Option<SeedRatio>) -> RowSpec {
    RowSpec {
        name,
        profile,
        server,
        workload: Workload::Http,
        base_row: 1,
        seed,
    }
}

fn echo_kernel() -> Server {
    Server::Wirespeed {
        app: "echo",
        engine: "epoll",
        poll_us: 100,
        busy_poll_us: 50,
        locality: "cbpf",
    }
}

/// The seed ladder (rows 1-6), the bypass stack (7), Photon's echo table (8-11), and the L4
/// load balancer against nftables (12-13).
fn ladder() -> Vec<RowSpec> {
    let ws = |engine, poll_us, busy_poll_us, locality| Server::Wirespeed {
        app: "http",
        engine,
        poll_us,
        busy_poll_us,
        locality,
    };
    vec![
        http(
            "untuned kernel",
            Profile::Default,
            ws("epoll", 0, 0, "none"),
            Some(seed::HTTP_UNTUNED),
        ),
        http(
            "tuned kernel",
            Profile::Tuned,
            ws("epoll", 0, 0, "none"),
            Some(seed::HTTP_OS_TUNED),
        ),
        http(
            "+ perfect locality",
            Profile::Tuned,
            ws("epoll", 0, 0, "cbpf"),
            Some(seed::HTTP_PERFECT_LOCALITY),
        ),
        http(
            "+ busy poll (epoll)",
            Profile::Tuned,
            ws("epoll", 100, 50, "cbpf"),
            Some(seed::HTTP_BUSY_POLL),
        ),
        // Seed 000 ran neither io_uring nor nginx.
        http(
            "io_uring",
            Profile::Tuned,
            ws("uring", 100, 50, "cbpf"),
            None,
        ),
        http("nginx (1 worker)", Profile::Tuned, Server::Nginx, None),
        http(
            "bypass: our stack on AF_XDP",
            Profile::Default,
            Server::WirespeedXdp { app: "http" },
            Some(seed::HTTP_BYPASS),
        ),
        // The bypass rows run on the default profile: the tuned profile's knobs (RPS/XPS,
        // GRO, NAPI deferral, busy_read) act on the kernel's receive path, which frames that
        // XDP takes away never reach, and on veth they cost more than they save (row 2 vs
        // row 1). So row 7 is compared with row 1, the same lab untuned, and the echo pairs
        // run on that lab too.
        // Photon's echo table: the busy-polled kernel server against the bypass stack, each
        // pair compared with its own kernel row.
        RowSpec {
            name: "echo ping-pong 512 B: kernel (epoll, busy poll)",
            profile: Profile::Default,
            server: echo_kernel(),
            workload: Workload::EchoPingPong,
            base_row: 8,
            seed: Some(seed::ECHO_PINGPONG_KERNEL),
        },
        RowSpec {
            name: "echo ping-pong 512 B: bypass (vs row 8)",
            profile: Profile::Default,
            server: Server::WirespeedXdp { app: "echo" },
            workload: Workload::EchoPingPong,
            base_row: 8,
            seed: Some(seed::ECHO_PINGPONG_BYPASS),
        },
        RowSpec {
            name: "echo stream 512 B: kernel (epoll, busy poll)",
            profile: Profile::Default,
            server: echo_kernel(),
            workload: Workload::EchoStream,
            base_row: 10,
            seed: Some(seed::ECHO_STREAM_KERNEL),
        },
        RowSpec {
            name: "echo stream 512 B: bypass (vs row 10)",
            profile: Profile::Default,
            server: Server::WirespeedXdp { app: "echo" },
            workload: Workload::EchoStream,
            base_row: 10,
            seed: Some(seed::ECHO_STREAM_BYPASS),
        },
        // The L4 load balancer (issue 17): full-NAT pps, on the DUT, against nftables. The
        // DPVS seed gives no kernel figure to divide DPVS's by, so these rows have no seed
        // ratio (showdown_seed).
        RowSpec {
            name: "L4 LB full-NAT 64 B TCP pps: nftables DNAT+SNAT",
            profile: Profile::Default,
            server: Server::LoadBalancer { xdp: false },
            workload: Workload::LbFullNatPps,
            base_row: 12,
            seed: None,
        },
        RowSpec {
            name: "L4 LB full-NAT 64 B TCP pps: wirespeed lb (vs row 12)",
            profile: Profile::Default,
            server: Server::LoadBalancer { xdp: true },
            workload: Workload::LbFullNatPps,
            base_row: 12,
            seed: None,
        },
    ]
}

/// SIGINT/SIGTERM, blocked on the main thread before any other thread starts and read from a
/// signalfd between steps, so an interrupted showdown still takes its lab down. The servers it
/// starts unblock them again (`unblock_signals`), so they stop on SIGINT as usual.
static SIGNALS: OnceLock<Signals> = OnceLock::new();
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

fn block_signals() -> anyhow::Result<()> {
    let signals = Signals::termination().context("block SIGINT/SIGTERM")?;
    let _ = SIGNALS.set(signals);
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

/// A running server process, stopped (SIGINT, then SIGKILL) on drop.
struct ServerProc {
    child: Child,
}

impl ServerProc {
    fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        let _ = process::kill(self.child.id(), Signal::Interrupt);
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(3) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn nginx_conf(dir: &Path, listen: &str) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir.join("logs"))?;
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "worker_processes 1;\nmaster_process off;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/logs/error.log;\n\
             events {{ worker_connections 4096; }}\nhttp {{\n  access_log off;\n  keepalive_requests 100000000;\n  \
             client_body_temp_path {d}/tmp;\n  proxy_temp_path {d}/tmp;\n  fastcgi_temp_path {d}/tmp;\n  uwsgi_temp_path {d}/tmp;\n  \
             scgi_temp_path {d}/tmp;\n  server {{\n    listen {listen};\n    location /plaintext {{ default_type text/plain; return 200 \"Hello, World!\"; }}\n  \
             }}\n}}\n",
            d = dir.display()
        ),
    )?;
    std::fs::create_dir_all(dir.join("tmp"))?;
    Ok(conf)
}

/// Starts the row's server; what it changes in the lab on the way (beyond the profile) goes
/// into `settings`.
fn start_server(
    spec: &RowSpec,
    lab: &Lab,
    log: &Path,
    workdir: &Path,
    settings: &mut Vec<String>,
) -> anyhow::Result<(ServerProc, String)> {
    let ns = lab.ns("s").context("lab has no server node")?;
    let addr = serve_addr(spec, lab)?;
    let listen = format!("{addr}:{PORT}");
    let logf = File::options()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("open {}", log.display()))?;
    let (mut cmd, line) = match &spec.server {
        Server::Wirespeed {
            app,
            engine,
            poll_us,
            busy_poll_us,
            locality,
        } => {
            let exe = std::env::current_exe()?;
            let args: Vec<String> = vec![
                "serve".into(),
                app.to_string(),
                "--stack".into(),
                "kernel".into(),
                "--cpus".into(),
                SERVER_CPU.to_string(),
                "--listen".into(),
                listen.clone(),
                "--engine".into(),
                engine.to_string(),
                "--poll-us".into(),
                poll_us.to_string(),
                "--busy-poll-us".into(),
                busy_poll_us.to_string(),
                "--locality".into(),
                locality.to_string(),
            ];
            let mut c = ns.command(exe.to_str().context("binary path")?);
            c.args(&args);
            (c, format!("wirespeed {}", args.join(" ")))
        }
        Server::WirespeedXdp { app } => {
            let exe = std::env::current_exe()?;
            let iface = lab
                .node("s")
                .and_then(|n| n.ifaces.first())
                .map(|i| i.name.clone())
                .context("server interface")?;
            // AF_XDP sees frames as the peer built them: with TX checksum or segmentation
            // offload on, the client's veth would hand over unchecksummed or oversized frames.
            for (role, n) in [("c", lab.node("c")), ("s", lab.node("s"))] {
                if let (Some(ns), Some(i)) = (lab.ns(role), n.and_then(|n| n.ifaces.first())) {
                    ns.exec(
                        "ethtool",
                        &["-K", &i.name, "tx", "off", "tso", "off", "gso", "off"],
                    )
                    .context("turn off TX offloads for the bypass row")?;
                    settings.push(format!("{role}:{} tx off tso off gso off", i.name));
                }
            }
            let args: Vec<String> = vec![
                "serve".into(),
                app.to_string(),
                "--stack".into(),
                "xdp".into(),
                "--iface".into(),
                iface,
                "--ip".into(),
                format!("{addr}/24"),
                "--cpus".into(),
                SERVER_CPU.to_string(),
                "--listen".into(),
                listen.clone(),
            ];
            let mut c = ns.command(exe.to_str().context("binary path")?);
            c.args(&args);
            (c, format!("wirespeed {}", args.join(" ")))
        }
        Server::LoadBalancer { .. } => {
            bail!("the load balancer rows start no server (run_row measures them)")
        }
        Server::Nginx => {
            let conf = nginx_conf(workdir, &listen)?;
            let mut c = ns.command("taskset");
            c.args(["-c", &SERVER_CPU.to_string(), "nginx", "-c"])
                .arg(&conf)
                .arg("-p")
                .arg(workdir);
            (
                c,
                format!(
                    "taskset -c {SERVER_CPU} nginx (1 worker, master_process off, access_log off)"
                ),
            )
        }
    };
    let child = cmd
        .unblock_signals()
        .stdin(Stdio::null())
        .stdout(logf.try_clone()?)
        .stderr(logf)
        .spawn()
        .with_context(|| format!("start `{line}`"))?;
    let mut server = ServerProc { child };
    // Ready when a connection from the client namespace succeeds.
    let target: SocketAddr = listen.parse()?;
    let client = lab.ns("c").context("lab has no client node")?;
    let t = Instant::now();
    loop {
        check_interrupt()?;
        let ok = client
            .run(move || TcpStream::connect_timeout(&target, Duration::from_millis(200)).is_ok())?;
        if ok {
            break;
        }
        if let Ok(Some(st)) = server.child.try_wait() {
            bail!(
                "`{line}` exited with {st} before listening; see {}",
                log.display()
            );
        }
        if t.elapsed() > Duration::from_secs(10) {
            bail!(
                "`{line}` did not accept connections on {listen} within 10 s; see {}",
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // ip netns exec and taskset exec the server, so this pid is the server's.
    let _ = &mut server;
    Ok((server, line))
}

struct Plan {
    connections: usize,
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
}

fn run_row(spec: &RowSpec, plan: &Plan, out: &Path) -> anyhow::Result<RoundRun> {
    check_interrupt()?;
    if let Server::LoadBalancer { xdp } = spec.server {
        let (figures, server) =
            lb_rows::round(xdp, SERVER_CPU, CLIENT_CPU, plan.warmup, plan.duration)?;
        return Ok(RoundRun {
            figures,
            server,
            settings: vec![],
        });
    }
    let mut ls = LabSpec::new(LAB, Topology::Pair);
    ls.profile = spec.profile;
    ls.cpus.insert("c".into(), vec![CLIENT_CPU]);
    ls.cpus.insert("s".into(), vec![SERVER_CPU]);
    let lab = Lab::up(&ls).context("lab up")?;
    let mut settings = vec![format!(
        "lab {}: client CPU {CLIENT_CPU}, server CPU {SERVER_CPU}, {} queue(s) per veth, profile {}",
        ls.topology.name(),
        ls.queues,
        ls.profile.name()
    )];
    settings.extend(lab.tuning.iter().cloned());
    let (server, line) = start_server(
        spec,
        &lab,
        &out.join("showdown-server.log"),
        Path::new(NGINX_DIR),
        &mut settings,
    )?;

    let addr = serve_addr(spec, &lab)?;
    let target = Target::parse(&format!("http://{addr}:{PORT}/plaintext"))?;
    let phase = Arc::new(AtomicU8::new(0));
    let (connections, depth, request) = match spec.workload {
        Workload::Http => (plan.connections, 1, build_request("GET", &target, &[])?),
        Workload::EchoPingPong => (
            PINGPONG_CONNECTIONS,
            1,
            wirespeed_bench::echo::message(ECHO_SIZE),
        ),
        Workload::EchoStream => (
            STREAM_CONNECTIONS,
            STREAM_DEPTH,
            wirespeed_bench::echo::message(ECHO_SIZE),
        ),
        Workload::LbFullNatPps => bail!("the load balancer rows have no client (lb_rows)"),
    };
    let load_spec = LoadSpec {
        addr: target.addr,
        connections,
        threads: 1,
        cpus: Some(vec![CLIENT_CPU]),
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
    let mut probe = Probe::prepare(&ProbeOpts {
        pid: server.pid(),
        cpus: Some(vec![SERVER_CPU]),
        bpf: plan.bpf,
    })?;
    let workload = spec.workload;
    // The load threads inherit the client namespace from this one.
    let client = netns::spawn_in(&format!("ws-{LAB}-c"), move || match workload {
        Workload::Http => load::run(&load_spec, HttpParser::default()),
        _ => load::run(&load_spec, EchoParser::new(ECHO_SIZE)),
    })?;
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
    drop(server);
    lab.down()?;

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
    Ok(RoundRun {
        figures: fig,
        server: line,
        settings,
    })
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

/// Fills what results from before a field existed lack, from the ladder row of the same
/// name: the workload and the seed's ratio (the seed's figure is the step's, not the run's).
fn fill_from_ladder(sd: &mut Showdown) {
    let ladder = ladder();
    for row in sd.rows.iter_mut() {
        let Some(spec) = ladder.iter().find(|s| s.name == row.name) else {
            continue;
        };
        if row.workload.is_empty() {
            row.workload = spec.workload.name().into();
        }
        if row.seed_ratio.is_none() {
            if let Some(seed) = spec.seed {
                row.seed_ratio = Some(seed.ratio);
                row.seed_source = Some(seed.source.into());
            }
        }
    }
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
    if !wirespeed_lab::is_root() {
        bail!("the showdown builds network namespaces and loads BPF probes: run it as root (sudo make run)");
    }
    block_signals()?;
    let rounds = a.rounds.unwrap_or(if a.quick { 1 } else { 3 }).max(1);
    let plan = Plan {
        connections: a.connections,
        warmup: a
            .warmup
            .unwrap_or(Duration::from_millis(if a.quick { 500 } else { 1000 })),
        duration: a
            .duration
            .unwrap_or(Duration::from_secs(if a.quick { 2 } else { 5 })),
        bpf: !a.no_bpf,
    };
    let wanted: Option<Vec<usize>> = a
        .rows
        .as_deref()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect());
    std::fs::create_dir_all(&a.out).with_context(|| format!("create {}", a.out.display()))?;
    let out = std::fs::canonicalize(&a.out)?;
    let _ = std::fs::remove_file(out.join("showdown-server.log"));
    // A lab left by a crashed run would make `lab up` refuse.
    let _ = topo::down(LAB);

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
                workload: spec.workload.name().into(),
                seed_ratio: spec.seed.map(|s| s.ratio),
                seed_source: spec.seed.map(|s| s.source.into()),
                ..Default::default()
            };
            (spec, row)
        })
        .collect();
    if which("nginx").is_none() {
        for (spec, row) in rows.iter_mut() {
            if matches!(spec.server, Server::Nginx) {
                row.skipped = Some("nginx is not installed (make deps installs it)".into());
            }
        }
    }

    eprintln!(
        "showdown: {} rows x {rounds} round(s), {:.1}s warm-up + {:.1}s each, {} connections; client CPU {CLIENT_CPU}, server CPU {SERVER_CPU}",
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
            match run_row(spec, &plan, &out) {
                Ok(RoundRun {
                    figures: fig,
                    server: line,
                    settings,
                }) => {
                    eprintln!(
                        "  round {round}/{rounds} row {} {:<22} {:>9.0} req/s  p99 {:>7.0} us  server {:>5.1}% CPU  client {:>5.1}% CPU",
                        row.row, row.name, fig.rps, fig.p99_us, fig.server_cpu_pct, fig.client_cpu_pct
                    );
                    row.server = line;
                    row.profile_settings = settings;
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
    let _ = topo::down(LAB);

    let mut sd = Showdown {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        date: shell("date -u +%Y-%m-%dT%H:%M:%SZ"),
        uname_r: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
        nproc: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        commit: shell("git rev-parse --short HEAD 2>/dev/null"),
        client_cpus: CLIENT_CPU.to_string(),
        server_cpus: SERVER_CPU.to_string(),
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

    #[test]
    fn seed_ratios_sit_on_the_steps_the_seeds_ran() {
        let ladder = ladder();
        let seeded: Vec<usize> = ladder
            .iter()
            .enumerate()
            .filter(|(_, s)| s.seed.is_some())
            .map(|(i, _)| i + 1)
            .collect();
        // Not io_uring (5), nginx (6) or the load balancer (12, 13): no seed ran them.
        assert_eq!(seeded, [1, 2, 3, 4, 7, 8, 9, 10, 11]);
        // A seeded row's base row is its seed's base: 1.00x on both sides.
        for s in ladder.iter().filter(|s| s.seed.is_some()) {
            let base = &ladder[s.base_row - 1];
            assert_eq!(base.seed.map(|b| b.ratio), Some(1.0), "{}", s.name);
        }
    }

    #[test]
    fn rendering_older_results_fills_the_seed_and_workload_by_row_name() {
        let ladder = ladder();
        let mut sd = Showdown {
            rows: [1, 12]
                .into_iter()
                .map(|n| Row {
                    row: n + 1,
                    name: ladder[n].name.into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        fill_from_ladder(&mut sd);
        assert_eq!(sd.rows[0].workload, "http");
        assert_eq!(sd.rows[0].seed_ratio, Some(seed::HTTP_OS_TUNED.ratio));
        assert!(sd.rows[0]
            .seed_source
            .as_deref()
            .unwrap()
            .contains("726,154"));
        assert_eq!(sd.rows[1].workload, "lb-fullnat-pps");
        assert_eq!(sd.rows[1].seed_ratio, None);
    }
}
