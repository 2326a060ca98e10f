//! redis-benchmark PING through the VIP against the same backends direct: real clients and
//! servers, the balancer's whole path (both directions for full-NAT, the direct return for DR).

use std::net::Ipv4Addr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::lab::Bench;
use super::opts::Opts;
use super::{Balancer, Mode, RedisRow, ServicePorts};
use crate::{Error, Result};
use wirespeed_load::stats::Ratio;

const PORT: u16 = 6379;

fn io(what: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        what: what.into(),
        source,
    }
}

/// redis-server processes on the backends, killed on drop.
struct Servers(Vec<Child>);

impl Drop for Servers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn ip(ns: &str, args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(["-n", ns])
        .args(args)
        .output()
        .map_err(io("run ip"))?;
    if !out.status.success() {
        return Err(Error::Invalid(format!(
            "ip -n {ns} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Starts redis-server on every backend, bound to its address and to the VIP (which DR's reals
/// hold on their loopback), pinned to `cpu`; waits until each answers.
fn start_servers(bench: &Bench, vip: Ipv4Addr, reals: &[Ipv4Addr], cpu: usize) -> Result<Servers> {
    let mut servers = Servers(vec![]);
    // A veth hands locally sent TCP segments over with their checksum left to offload
    // (partial); the kernel completes it when it forwards, an XDP program moving the frame to
    // another device cannot. Clients and servers behind a NIC send complete checksums: so do
    // these.
    for ns in bench.backend_ns.iter().chain([&bench.client_ns]) {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "ethtool", "-K", "eth0", "tx", "off"])
            .output()
            .map_err(io("run ethtool"))?;
        if !out.status.success() {
            return Err(Error::Invalid(format!(
                "ethtool -K eth0 tx off in {ns}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
    }
    for (ns, real) in bench.backend_ns.iter().zip(reals) {
        // DR: the real accepts the VIP's packets as its own and answers from it.
        let _ = ip(ns, &["addr", "add", &format!("{vip}/32"), "dev", "lo"]);
        let child = Command::new("ip")
            .args(["netns", "exec", ns, "taskset", "-c", &cpu.to_string()])
            .args(["redis-server", "--bind"])
            .arg(real.to_string())
            .arg(vip.to_string())
            .args(["--port", &PORT.to_string()])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(io("start redis-server (apt-get install redis-server)"))?;
        servers.0.push(child);
    }
    for real in reals {
        let t = Instant::now();
        while ping(bench, *real).is_err() {
            if t.elapsed() > Duration::from_secs(5) {
                return Err(Error::Invalid(format!(
                    "redis-server on {real}:{PORT} did not answer within 5 s"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(servers)
}

fn ping(bench: &Bench, addr: Ipv4Addr) -> Result<()> {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &bench.client_ns,
            "timeout",
            "3",
            "redis-cli",
            "-h",
        ])
        .arg(addr.to_string())
        .args(["-p", &PORT.to_string(), "ping"])
        .output()
        .map_err(io("run redis-cli"))?;
    if String::from_utf8_lossy(&out.stdout).contains("PONG") {
        Ok(())
    } else {
        Err(Error::Invalid(format!("no PONG from {addr}")))
    }
}

fn client_args(requests: usize) -> Vec<String> {
    [
        "-t",
        "ping_inline",
        "-P",
        "10",
        "-c",
        "50",
        "-n",
        &requests.to_string(),
        "-q",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// redis-benchmark from the client namespace, pinned to `cpu`: requests per second. Killed
/// after `limit` (a path that stops answering must not hang the run).
fn benchmark(
    bench: &Bench,
    addr: Ipv4Addr,
    cpu: usize,
    requests: usize,
    limit: Duration,
) -> Result<f64> {
    let out = Command::new("ip")
        .args(["netns", "exec", &bench.client_ns, "timeout"])
        .arg(limit.as_secs().max(1).to_string())
        .args(["taskset", "-c", &cpu.to_string()])
        .args(["redis-benchmark", "-h"])
        .arg(addr.to_string())
        .args(["-p", &PORT.to_string()])
        .args(client_args(requests))
        .stdin(Stdio::null())
        .output()
        .map_err(io("run redis-benchmark (apt-get install redis-tools)"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "PING_INLINE: 123456.79 requests per second, p50=0.151 msec" (the last of the \r-updated
    // progress lines)
    text.split(['\r', '\n'])
        .filter_map(|l| {
            let (_, rest) = l.split_once("PING_INLINE:")?;
            let (num, _) = rest.trim().split_once(" requests per second")?;
            num.trim().parse::<f64>().ok()
        })
        .next_back()
        .ok_or_else(|| {
            Error::Invalid(format!(
                "redis-benchmark to {addr} printed no rate: {} {}",
                text.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        })
}

/// Rounds of: redis-benchmark through the VIP with the balancer in `mode`, then the same
/// against one backend direct with the balancer detached. Called in the lb namespace.
pub(super) fn compare(
    bench: &Bench,
    balancer: &dyn Balancer,
    mode: Mode,
    opts: &Opts,
) -> Result<RedisRow> {
    let mut setup = bench.setup(mode, opts.toa);
    setup.services = vec![ServicePorts {
        proto: 6,
        vport: PORT,
        rport: PORT,
    }];
    let servers = start_servers(bench, setup.vip, &setup.reals, opts.dut_cpu)?;
    let direct = setup.reals[0];
    let mut row = RedisRow {
        mode: mode.name().into(),
        command: format!(
            "redis-benchmark -h ADDR -p {PORT} {} (taskset -c {}; servers on CPU {})",
            client_args(opts.redis_requests).join(" "),
            opts.other_cpu,
            opts.dut_cpu
        ),
        ..Default::default()
    };
    // Far above a healthy run: 20,000 requests per second at least.
    let limit = Duration::from_secs(10 + opts.redis_requests as u64 / 20_000);
    for round in 1..=opts.rounds {
        let running = balancer.start(&setup)?;
        ping(bench, setup.vip).map_err(|e| {
            Error::Invalid(format!(
                "{e} through the VIP in {}: the balancer's pass/drop reasons: {:?}",
                mode.name(),
                running.reasons()
            ))
        })?;
        let vip = benchmark(bench, setup.vip, opts.other_cpu, opts.redis_requests, limit)?;
        drop(running);
        let d = benchmark(bench, direct, opts.other_cpu, opts.redis_requests, limit)?;
        eprintln!(
            "  redis-benchmark {} round {round}/{}: through the VIP {vip:.0} req/s, direct {d:.0} req/s",
            mode.name(),
            opts.rounds
        );
        row.vip_rps.push(vip);
        row.direct_rps.push(d);
    }
    drop(servers);
    row.ratio = Ratio::of(
        row.vip_rps
            .iter()
            .zip(&row.direct_rps)
            .map(|(v, d)| v / d.max(1.0))
            .collect(),
    );
    Ok(row)
}
