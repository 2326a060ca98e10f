//! `wirespeed bench http|echo`: the load generators (see crates/load).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use wirespeed_load::bypass::BypassClient;
use wirespeed_load::echo::{self, EchoParser};
use wirespeed_load::http::{build_request, HttpParser, Target};
use wirespeed_load::report::Summary;
use wirespeed_load::{self as load, LoadSpec};
use wirespeed_load::{cpu, parse_duration};

use super::{BypassArgs, StackArg};

#[derive(clap::Args)]
#[command(
    after_help = "Exit status 1 when no request (message) completed: the figures are still \
                  printed (and written by --json), and stderr says why in one line."
)]
pub struct Args {
    #[command(subcommand)]
    kind: Kind,
}

#[derive(clap::Subcommand)]
enum Kind {
    /// HTTP/1.1 load (wrk-like closed loop, or wrk2-like open loop with --rate).
    Http(HttpArgs),
    /// Echo load: ping-pong or streaming messages of --size bytes.
    Echo(EchoArgs),
}

#[derive(clap::Args, Clone)]
struct Common {
    /// Connections in total.
    #[arg(short = 'c', long)]
    connections: Option<usize>,
    /// Worker threads (default: one per CPU in --cpus, else 1).
    #[arg(short = 't', long, default_value_t = 0)]
    threads: usize,
    /// CPUs to pin the worker threads to, e.g. 0 or 0,2-3.
    #[arg(long)]
    cpus: Option<String>,
    /// Warm-up before measuring (not counted).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    warmup: Duration,
    /// Measured interval.
    #[arg(short = 'd', long, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,
    /// Open loop: total requests (messages) per second; latency runs from the intended send time.
    #[arg(long)]
    rate: Option<f64>,
    /// Reset a connection that makes no progress for this long (counted as a timeout).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    timeout: Duration,
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Client I/O engine on the kernel stack: uring (batched, fewest syscalls; falls back to
    /// epoll) or epoll.
    #[arg(long, value_enum, default_value = "uring")]
    engine: EngineArg,
    #[command(flatten)]
    bypass: BypassArgs,
}

fn label_stack(s: &mut Summary, c: &Common) {
    match c.bypass.stack {
        StackArg::Kernel => {}
        StackArg::Xdp => s.engine = "our TCP/IP over AF_XDP".into(),
        StackArg::Dpdk => s.engine = "our TCP/IP over DPDK".into(),
    }
}

/// Runs the load on the stack `c` asks for.
fn load_on<P: wirespeed_load::ResponseParser>(
    c: &Common,
    spec: &LoadSpec,
    parser: P,
) -> anyhow::Result<load::LoadResult> {
    match c.bypass.stack {
        StackArg::Kernel => Ok(load::run(spec, parser)?),
        StackArg::Xdp | StackArg::Dpdk => {
            let device = c.bypass.device()?;
            if c.bypass.ip.is_empty() {
                anyhow::bail!(
                    "--stack xdp|dpdk needs --ip ADDR/LEN (the address our client stack uses)"
                );
            }
            let (ip, prefix_len, ipv6) = c.bypass.addresses()?;
            let x = BypassClient {
                device,
                ip,
                prefix_len,
                gateway: c.bypass.ipv4_gateway(),
                ipv6,
                congestion_control: c.bypass.congestion_control,
            };
            let also_v6 = x
                .ipv6
                .map(|v6| format!(" and {}", v6.addr))
                .unwrap_or_default();
            eprintln!(
                "wirespeed bench: client on our stack over {} as {}{also_v6}",
                x.describe(),
                x.ip
            );
            Ok(load::bypass::run(spec, parser, &x)?)
        }
    }
}

#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq, Debug)]
enum EngineArg {
    Uring,
    Epoll,
}

/// What `bench http|echo --help` says below the flags about our stack as a client.
const BYPASS_CLIENT_NOTE: &str = "With --stack xdp|dpdk the client runs closed loop (no --rate), \
                                  at most 1024 connections.";

#[derive(clap::Args)]
#[command(after_help = BYPASS_CLIENT_NOTE)]
struct HttpArgs {
    /// http://HOST:PORT/PATH
    url: String,
    #[command(flatten)]
    common: Common,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 1)]
    pipeline: usize,
    /// Extra request header, `Name: value` (repeatable).
    #[arg(short = 'H', long = "header")]
    headers: Vec<String>,
    #[arg(long, default_value = "GET")]
    method: String,
}

#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq, Debug)]
enum EchoMode {
    /// Each connection sends one message and waits for it to come back.
    Pingpong,
    /// Few connections, many messages in flight on each.
    Stream,
}

#[derive(clap::Args)]
#[command(after_help = BYPASS_CLIENT_NOTE)]
struct EchoArgs {
    /// HOST:PORT of an echo server.
    addr: String,
    #[command(flatten)]
    common: Common,
    #[arg(long, value_enum, default_value = "pingpong")]
    mode: EchoMode,
    /// Message size in bytes.
    #[arg(long, default_value_t = 512)]
    size: usize,
    /// Messages in flight per connection in stream mode.
    #[arg(long, default_value_t = 64)]
    depth: usize,
}

fn spec(
    c: &Common,
    addr: std::net::SocketAddr,
    default_conns: usize,
    depth: usize,
    request: Vec<u8>,
) -> anyhow::Result<LoadSpec> {
    let cpus = c.cpus.as_deref().map(cpu::parse_cpu_list).transpose()?;
    Ok(LoadSpec {
        addr,
        connections: c.connections.unwrap_or(default_conns),
        threads: c.threads,
        cpus,
        warmup: c.warmup,
        duration: c.duration,
        depth,
        rate: c.rate,
        timeout: c.timeout,
        request,
        live: true,
        phase: None,
        engine: match c.engine {
            EngineArg::Uring => load::Engine::Uring,
            EngineArg::Epoll => load::Engine::Epoll,
        },
    })
}

/// The one line to print when no request completed: a run of zeros with no error counted
/// (every connection still in its handshake) otherwise looks like a quiet success.
fn nothing_completed(s: &Summary, addr: SocketAddr, unit: &str) -> Option<String> {
    if s.requests > 0 {
        return None;
    }
    let why = if s.errors.connect > 0 {
        format!(
            "every connect failed ({} times): is a server listening at {addr}?",
            s.errors.connect
        )
    } else if s.errors.total() > 0 {
        format!(
            "the connections failed ({} errors above): does {addr} speak this protocol?",
            s.errors.total()
        )
    } else {
        format!(
            "no connection finished its handshake or got an answer: nothing answered at {addr} \
             (with --stack xdp|dpdk: do the replies reach the interface we took over?)"
        )
    };
    Some(format!(
        "bench: no {unit} completed in {:.2}s; {why}",
        s.duration_s
    ))
}

fn finish(s: &Summary, json: Option<&PathBuf>, addr: SocketAddr, unit: &str) -> anyhow::Result<()> {
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(s)?;
        std::fs::write(path, text + "\n").with_context(|| format!("write {}", path.display()))?;
    }
    // The figures (and the JSON) are still written, for the error counts; the exit status says
    // the run failed, so a script does not take the zeros for a measurement.
    match nothing_completed(s, addr, unit) {
        Some(line) => Err(anyhow::anyhow!(line)),
        None => Ok(()),
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.kind {
        Kind::Http(a) => {
            let target = Target::parse(&a.url)?;
            let req = build_request(&a.method, &target, &a.headers)?;
            let spec = spec(&a.common, target.addr, 64, a.pipeline, req)?;
            let r = load_on(&a.common, &spec, HttpParser::default()).context("http load")?;
            let mut s = Summary::from_result(&r);
            label_stack(&mut s, &a.common);
            let cpus = a.common.cpus.as_deref().unwrap_or("any");
            print!(
                "{}",
                s.text(
                    &format!("wirespeed bench http {} (client CPUs {cpus})", a.url),
                    "req"
                )
            );
            finish(&s, a.common.json.as_ref(), target.addr, "request")
        }
        Kind::Echo(a) => {
            let addr = Target::parse(&format!("http://{}/", a.addr))?.addr;
            let (conns, depth) = match a.mode {
                EchoMode::Pingpong => (64, 1),
                EchoMode::Stream => (4, a.depth.max(1)),
            };
            let spec = spec(&a.common, addr, conns, depth, echo::message(a.size))?;
            let r = load_on(&a.common, &spec, EchoParser::new(a.size)).context("echo load")?;
            let mut s = Summary::from_result(&r);
            label_stack(&mut s, &a.common);
            s.gbps = Some(s.rps * a.size as f64 * 8.0 / 1e9);
            print!(
                "{}",
                s.text(
                    &format!(
                        "wirespeed bench echo {} ({:?}, {} B)",
                        a.addr, a.mode, a.size
                    ),
                    "msg"
                )
            );
            finish(&s, a.common.json.as_ref(), addr, "message")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_that_completed_nothing_says_why_in_one_line() {
        let addr: SocketAddr = "198.18.0.2:8080".parse().unwrap();
        let mut s = Summary::from_result(&load::LoadResult {
            hist: wirespeed_load::hist::LatencyHist::new(),
            requests: 10,
            bytes_read: 100,
            bytes_written: 50,
            duration: Duration::from_secs(1),
            errors: load::Errors::default(),
            client_cpu: Duration::from_millis(500),
            open_loop: false,
            threads: 1,
            connections: 4,
            engine: load::Engine::Epoll,
        });
        assert_eq!(nothing_completed(&s, addr, "request"), None);
        s.requests = 0;
        let quiet = nothing_completed(&s, addr, "request").unwrap();
        assert!(quiet.contains("no request completed in 1.00s"), "{quiet}");
        assert!(
            quiet.contains("no connection finished its handshake"),
            "{quiet}"
        );
        s.errors.connect = 3;
        let refused = nothing_completed(&s, addr, "message").unwrap();
        assert!(
            refused.contains("every connect failed (3 times)"),
            "{refused}"
        );
        assert!(refused.contains("198.18.0.2:8080"), "{refused}");
        assert!(!refused.contains('\n'));
    }
}
