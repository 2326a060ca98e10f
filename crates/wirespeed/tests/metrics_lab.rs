//! `--metrics` scraped by a real Prometheus (Debian's `prometheus`; docs/METRICS.md). Each test runs
//! the daemons in a lab, pushes traffic through them, starts Prometheus in the same namespace
//! with a generated config (scrape every 1 s, temporary storage), quiesces the traffic, and
//! reads the series back through Prometheus's HTTP API (`/api/v1/query`): the fast-pathed
//! packets per port must equal `wirespeed fp status --json`, the connections per real
//! `wirespeed lb -L -n --stats --json`, the requests `serve`'s own count, all read at the same
//! quiesced moment. `promtool check metrics` must find nothing to say about any endpoint.
//!
//! Run: flock /tmp/ws-priv.lock nice -n 5 cargo test --profile ci -p wirespeed --features
//! wirespeed/dpdk,wirespeed-net/dpdk,wirespeed-nic/dpdk --test metrics_lab -- --test-threads=1

#[allow(dead_code)]
mod lb_common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lb_common::{clients, lb_rng, output, reals, vip, wait_for, LbLab, Procs, REDIS, VIP4};
use wirespeed_lab::topo::{Lab, LabSpec, Topology};

const PROMETHEUS_PORT: u16 = 9090;
const FP_METRICS: &str = "127.0.0.1:9101";
const LB_METRICS: &str = "127.0.0.1:9102";
const SERVE_METRICS: &str = "127.0.0.1:9103";

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Runs `program args` in namespace `ns`; its stdout, or a panic with what it said.
fn in_ns(ns: &str, program: &str, args: &[&str]) -> String {
    lb_common::ok(
        Command::new("ip")
            .args(["netns", "exec", ns, program])
            .args(args),
    )
}

/// A Prometheus in namespace `ns` scraping `targets` (job name -> ADDR:PORT) every second.
struct Prometheus {
    ns: String,
}

impl Prometheus {
    fn start(procs: &mut Procs, ns: &str, dir: &Path, targets: &[(&str, &str)]) -> Prometheus {
        assert!(
            Path::new("/usr/bin/prometheus").exists(),
            "Debian's prometheus is not installed: run make deps (scripts/install-deps.sh)"
        );
        let mut cfg = String::from(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\nscrape_configs:\n",
        );
        for (job, addr) in targets {
            cfg.push_str(&format!(
                "  - job_name: {job}\n    static_configs:\n      - targets: ['{addr}']\n"
            ));
        }
        let config = dir.join("prometheus.yml");
        std::fs::write(&config, cfg).unwrap();
        let storage = dir.join("prometheus-data");
        std::fs::create_dir_all(&storage).unwrap();
        let args = [
            format!("--config.file={}", config.display()),
            format!("--storage.tsdb.path={}", storage.display()),
            format!("--web.listen-address=127.0.0.1:{PROMETHEUS_PORT}"),
            "--log.level=warn".to_string(),
        ];
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        procs.spawn(
            "prometheus",
            ns,
            "prometheus",
            &argv,
            &dir.join("prometheus.log"),
        );
        let p = Prometheus { ns: ns.to_string() };
        let ready = wait_for(Duration::from_secs(30), || {
            let out = output(Command::new("ip").args([
                "netns",
                "exec",
                ns,
                "curl",
                "-sf",
                &format!("http://127.0.0.1:{PROMETHEUS_PORT}/-/ready"),
            ]));
            out.status.success().then_some(())
        });
        assert!(
            ready.is_some(),
            "prometheus did not become ready in 30 s: {}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
        p
    }

    /// `/api/v1/query`: each result's labels and value.
    fn query(&self, promql: &str) -> Vec<(BTreeMap<String, String>, f64)> {
        let text = in_ns(
            &self.ns,
            "curl",
            &[
                "-sfG",
                "--data-urlencode",
                &format!("query={promql}"),
                &format!("http://127.0.0.1:{PROMETHEUS_PORT}/api/v1/query"),
            ],
        );
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["status"], "success", "{promql}: {text}");
        v["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let labels = r["metric"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect();
                let value = r["value"][1].as_str().unwrap().parse::<f64>().unwrap();
                (labels, value)
            })
            .collect()
    }

    /// Waits until every target of `job` has been scraped successfully after `since` (unix
    /// seconds), so the stored samples were read after that moment.
    fn scraped_after(&self, job: &str, since: f64) {
        let q = format!("timestamp(up{{job=\"{job}\"}} == 1)");
        let done = wait_for(Duration::from_secs(20), || {
            let r = self.query(&q);
            (!r.is_empty() && r.iter().all(|(_, t)| *t > since)).then_some(())
        });
        assert!(
            done.is_some(),
            "prometheus has no successful scrape of {job} after {since}: {:?}",
            self.query(&format!("up{{job=\"{job}\"}}"))
        );
    }

    /// `promql`'s results as label `key` -> value.
    fn by(&self, promql: &str, key: &str) -> BTreeMap<String, u64> {
        self.query(promql)
            .into_iter()
            .map(|(l, v)| (l.get(key).cloned().unwrap_or_default(), v as u64))
            .collect()
    }
}

/// `promtool check metrics` on what `addr`'s /metrics serves in `ns`: no error, no lint.
fn promtool_clean(ns: &str, addr: &str) -> String {
    let text = in_ns(ns, "curl", &["-sf", &format!("http://{addr}/metrics")]);
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package)");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics on {addr}: {} {said}\n{text}",
        out.status
    );
    text
}

/// A directory removed on drop.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir(tag: &str) -> TempDir {
    let p = std::env::temp_dir().join(format!("ws-metrics-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    TempDir(p)
}

/// `fp status --json`'s fast-pathed count per port and when the status was written; None
/// before the daemon has written one.
fn fp_status_fast_pathed(ns: &str, status: &Path) -> Option<(BTreeMap<String, u64>, u64)> {
    let out = output(
        Command::new("ip")
            .args(["netns", "exec", ns, env!("CARGO_BIN_EXE_wirespeed")])
            .args(["fp", "status", "--json", "--status"])
            .arg(status),
    );
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ports = v["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["fast_pathed"].as_u64().unwrap(),
            )
        })
        .collect();
    Some((ports, v["updated_unix_ms"].as_u64().unwrap()))
}

#[test]
fn prometheus_reads_fp_and_serve_as_their_own_status_says() {
    wirespeed_lab::require_root();
    let name = format!("mf{}", std::process::id() % 10_000);
    let _ = wirespeed_lab::topo::down(&name);
    let lab = Lab::up(&LabSpec::new(&name, Topology::Line)).expect("lab up");
    // A veth delivers XDP-redirected frames only into a peer that runs NAPI (GRO on).
    for role in ["src", "snk"] {
        lab.ns(role)
            .unwrap()
            .exec("ethtool", &["-K", "eth0", "gro", "on"])
            .unwrap();
    }
    let (src, dut) = (lab.ns("src").unwrap(), lab.ns("dut").unwrap());
    let dir = temp_dir(&name);
    let status = dir.0.join("fp-status.json");
    let mut procs = Procs::default();
    let bin = env!("CARGO_BIN_EXE_wirespeed");
    let st = status.display().to_string();
    procs.spawn(
        "fp run",
        dut.name(),
        bin,
        &["fp", "run", "--status", &st, "--metrics", FP_METRICS],
        &dir.0.join("fp.log"),
    );
    procs.spawn(
        "serve",
        dut.name(),
        bin,
        &[
            "serve",
            "http",
            "--cpus",
            "0",
            "--listen",
            "127.0.0.1:8080",
            "--metrics",
            SERVE_METRICS,
        ],
        &dir.0.join("serve.log"),
    );
    let attached = wait_for(Duration::from_secs(20), || {
        let (ports, _) = fp_status_fast_pathed(dut.name(), &status)?;
        (ports.len() == 2).then_some(())
    });
    assert!(attached.is_some(), "fp run did not attach both ports");
    let prom = Prometheus::start(
        &mut procs,
        dut.name(),
        &dir.0,
        &[("fp", FP_METRICS), ("serve", SERVE_METRICS)],
    );

    // Traffic: pings through the DUT (fast-pathed once the neighbours are known), and
    // requests to serve.
    for _ in 0..3 {
        src.exec(
            "ping",
            &["-c", "50", "-i", "0.005", "-W", "1", "-q", "198.18.2.1"],
        )
        .expect("pings through the fast path");
    }
    let (ok_requests, missing) = (9u64, 3u64);
    for i in 0..ok_requests + missing {
        let path = if i < ok_requests { "plaintext" } else { "nope" };
        let _ = output(Command::new("ip").args([
            "netns",
            "exec",
            dut.name(),
            "curl",
            "-s",
            &format!("http://127.0.0.1:8080/{path}"),
        ]));
    }

    // Quiesced: the status written after the last packet is what both must say.
    let quiet = unix_now();
    let (fast, _) = wait_for(Duration::from_secs(10), || {
        let (ports, updated) = fp_status_fast_pathed(dut.name(), &status)?;
        (updated as f64 / 1000.0 > quiet + 0.1).then_some((ports, updated))
    })
    .expect("fp status is written every 0.5 s");
    let read_at = unix_now();
    assert!(
        fast.values().sum::<u64>() >= 100,
        "too little fast-pathed: {fast:?}"
    );
    prom.scraped_after("fp", read_at);
    prom.scraped_after("serve", read_at);
    let scraped = prom.by(
        "sum by (port) (wirespeed_fp_packets_total{job=\"fp\",path=\"fast\"})",
        "port",
    );
    assert_eq!(
        scraped, fast,
        "fast-pathed per port: Prometheus vs fp status --json"
    );
    let (again, _) = fp_status_fast_pathed(dut.name(), &status).expect("fp status");
    assert_eq!(again, fast, "the traffic was not quiesced");
    let swaps = prom.query("wirespeed_fp_program_swaps_total");
    assert_eq!(swaps.len(), 2, "one swap counter per port: {swaps:?}");
    let responses = prom.query("wirespeed_fp_response_seconds_count");
    assert!(
        responses.first().is_some_and(|(_, n)| *n >= 1.0),
        "the startup response is in the histogram: {responses:?}"
    );

    let requests = prom.query("sum(wirespeed_serve_requests_total)");
    assert_eq!(requests[0].1 as u64, ok_requests + missing, "{requests:?}");
    let not_found = prom.query("sum(wirespeed_serve_errors_total{kind=\"not_found\"})");
    assert_eq!(not_found[0].1 as u64, missing);
    let conns = prom.query("sum(wirespeed_serve_connections_total)");
    assert_eq!(
        conns[0].1 as u64,
        ok_requests + missing,
        "curl opens one each"
    );

    let fp_text = promtool_clean(dut.name(), FP_METRICS);
    assert!(fp_text.contains("wirespeed_fp_response_seconds_bucket{le=\"+Inf\"}"));
    promtool_clean(dut.name(), SERVE_METRICS);
    // Other paths are 404, HEAD has no body.
    let code = in_ns(
        dut.name(),
        "curl",
        &[
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &format!("http://{FP_METRICS}/"),
        ],
    );
    assert_eq!(code, "404");
    let head = in_ns(
        dut.name(),
        "curl",
        &["-sI", &format!("http://{SERVE_METRICS}/metrics")],
    );
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");

    drop(procs);
    lab.down().unwrap();
}

#[test]
fn prometheus_reads_lb_connections_per_real_as_lb_list_says() {
    let tag = "lbmet";
    let mut rng = lb_rng(tag);
    let mut lab = LbLab::up(tag, &mut rng);
    lab.run_args.extend(["--metrics".into(), LB_METRICS.into()]);
    reals::prepare(&mut lab, "-m");
    reals::start_backends(&mut lab, "-m");
    lab.start_daemon();
    let service = vip(VIP4, REDIS);
    lb_common::configure(&lab, "-m", service, "rr", &[], &[1; lb_common::BACKENDS]);
    let ns = lab.ns_name("lb");
    let dir = lab.dir.0.clone();
    let prom = Prometheus::start(&mut lab.procs, &ns, &dir, &[("lb", LB_METRICS)]);

    for c in ["c0", "c1"] {
        clients::warm_up(&lab, c, service, &lb_common::ALL);
        let results = clients::probes(&lab.ns_name(c), service, 40, 4);
        assert!(
            results.iter().all(Result::is_ok),
            "connections through {service} failed: {:?}",
            results
                .iter()
                .filter(|r| r.is_err())
                .take(3)
                .collect::<Vec<_>>()
        );
    }

    // Quiesced: no client runs now. Read the listing, then wait for a scrape after it.
    let listing = || -> BTreeMap<String, u64> {
        let text = lab.lb_ok(&["-L", "-n", "--stats", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["services"][0]["reals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["addr"].as_str().unwrap().to_string(),
                    r["stats"]["conns"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let started = Instant::now();
    let listed = listing();
    let read_at = unix_now();
    assert!(
        listed.values().sum::<u64>() >= 80,
        "fewer connections listed than made: {listed:?}"
    );
    prom.scraped_after("lb", read_at);
    let scraped = prom.by(
        &format!("wirespeed_lb_real_connections_total{{job=\"lb\",vip=\"{service}\"}}"),
        "real",
    );
    assert_eq!(
        scraped, listed,
        "connections per real: Prometheus vs lb -L -n --stats --json"
    );
    assert_eq!(listing(), listed, "the traffic was not quiesced");
    let up = prom.query("sum(wirespeed_lb_real_up)");
    assert_eq!(
        up[0].1 as usize,
        lb_common::BACKENDS,
        "unchecked reals count as up"
    );
    let forwarded = prom.query("sum(wirespeed_lb_packets_by_reason_total{reason=\"fwd_nat\"})");
    assert!(forwarded[0].1 > 0.0, "{forwarded:?}");
    println!(
        "{tag}: listing and scrape agreed {:.1} s after the traffic stopped",
        started.elapsed().as_secs_f64()
    );
    promtool_clean(&ns, LB_METRICS);
}
