//! New-user smoke tests: topologies built the way a user builds them, with plain `ip`
//! commands (`ip netns add`, `ip link add ... type veth peer ...`, `ip addr`, `ip link set
//! up`), every device feature left as the kernel sets it, never the lab crate's topology or
//! tuning code, and namespaces whose names do not start with `ws-` (so the product treats
//! them as a user's, not as its own lab). Root; everything is removed on drop.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn require_root() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "these tests build network namespaces: run them as root"
    );
}

fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} {args:?}: {e}"))
}

fn ip(args: &[&str]) {
    let out = run("ip", args);
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A network namespace made with `ip netns add`, deleted (with its interfaces) on drop.
struct PlainNs(String);

impl PlainNs {
    fn add(name: String) -> PlainNs {
        let _ = run("ip", &["netns", "del", &name]); // a leftover of a crashed run
        ip(&["netns", "add", &name]);
        let ns = PlainNs(name);
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    fn name(&self) -> &str {
        &self.0
    }

    fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", self.0.as_str()];
        all.extend_from_slice(args);
        ip(&all);
    }

    /// `ip netns exec NS program args...`
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0, program]);
        c
    }
}

impl Drop for PlainNs {
    fn drop(&mut self) {
        let _ = run("ip", &["netns", "del", &self.0]);
    }
}

// ---- The bypass stack on a user's interfaces: `--allow-host` and `--stack dpdk` ----

/// Two namespaces `wsplain-PID-<tag>a` / `...b` joined by a veth `<tag>a0` <-> `<tag>b0`,
/// `b` holding 198.18.<net>.1/24 (the peer, Linux), `a` left without an address: our stack
/// answers for 198.18.<net>.2 there.
struct UserPair {
    a: PlainNs,
    b: PlainNs,
    a_if: String,
    net: u8,
}

impl UserPair {
    fn new(tag: &str, net: u8) -> UserPair {
        require_root();
        let id = std::process::id();
        let a = PlainNs::add(format!("wsplain-{id}-{tag}a"));
        let b = PlainNs::add(format!("wsplain-{id}-{tag}b"));
        let (a_if, b_if) = (format!("{tag}a0"), format!("{tag}b0"));
        a.ip(&[
            "link",
            "add",
            &a_if,
            "type",
            "veth",
            "peer",
            "name",
            &b_if,
            "netns",
            b.name(),
        ]);
        b.ip(&["addr", "add", &format!("198.18.{net}.1/24"), "dev", &b_if]);
        a.ip(&["link", "set", &a_if, "up"]);
        b.ip(&["link", "set", &b_if, "up"]);
        UserPair { a, b, a_if, net }
    }

    fn ours(&self) -> String {
        format!("198.18.{}.2", self.net)
    }

    fn peer(&self) -> String {
        format!("198.18.{}.1", self.net)
    }

    /// `curl` from the peer namespace; its output, or None when it failed.
    fn curl(&self, url: &str) -> Option<String> {
        let out = self
            .b
            .command("curl")
            .args(["-s", "--max-time", "3", url])
            .output()
            .unwrap();
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// EAL arguments for a net_af_packet port on `a`'s veth, without hugepages.
    fn dpdk_args(&self) -> String {
        format!(
            "--no-huge -m 256 --no-pci --no-shconf --no-telemetry --log-level=error -l 0 \
             --file-prefix={} --vdev=net_af_packet0,iface={}",
            self.a.name(),
            self.a_if
        )
    }
}

impl Drop for UserPair {
    fn drop(&mut self) {
        // The EAL leaves its (empty) runtime directory behind even with --no-shconf.
        let _ = std::fs::remove_dir(format!("/var/run/dpdk/{}", self.a.name()));
        let _ = std::fs::remove_dir("/var/run/dpdk");
    }
}

/// `wirespeed ARGS` in `ns`, running; SIGINT and reaped on drop.
struct Wirespeed(Child);

impl Wirespeed {
    /// Starts it and waits for `ready` on stderr; Err(stderr) when it exits first.
    fn start(ns: &PlainNs, args: &[&str], ready: &str) -> Result<Wirespeed, String> {
        let mut child = ns
            .command(env!("CARGO_BIN_EXE_wirespeed"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut seen = String::new();
        let mut line = String::new();
        loop {
            line.clear();
            if err.read_line(&mut line).unwrap_or(0) == 0 {
                let _ = child.wait();
                return Err(seen);
            }
            seen.push_str(&line);
            if line.contains(ready) {
                break;
            }
        }
        std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::stderr()));
        Ok(Wirespeed(child))
    }
}

impl Drop for Wirespeed {
    fn drop(&mut self) {
        // SAFETY: signals our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
        let _ = self.0.wait();
    }
}

/// curl until it answers (the first SYN may race the peer's ARP), for at most 10 s.
fn curl_until_answered(pair: &UserPair, url: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(body) = pair.curl(url) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "curl {url} from {} got no answer",
            pair.b.name()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn serve_xdp_outside_a_lab_namespace_needs_allow_host_and_then_answers_curl() {
    let pair = UserPair::new("x", 63);
    let ip = format!("{}/24", pair.ours());
    let listen = format!("{}:8080", pair.ours());
    let mut args = vec![
        "serve", "http", "--stack", "xdp", "--iface", &pair.a_if, "--cpus", "0", "--ip", &ip,
        "--listen", &listen,
    ];

    let refused = Wirespeed::start(&pair.a, &args, "listening on")
        .err()
        .expect("serve --stack xdp outside a ws-* namespace must refuse without --allow-host");
    let refusal: Vec<&str> = refused.lines().collect();
    assert_eq!(refusal.len(), 1, "one line: {refused}");
    assert!(
        refusal[0].contains("pass --allow-host to use a host interface"),
        "{refused}"
    );

    args.push("--allow-host");
    let _serve = Wirespeed::start(&pair.a, &args, "listening on").expect("serve --allow-host");
    let body = curl_until_answered(&pair, &format!("http://{listen}/plaintext"));
    assert_eq!(body, "Hello, World!");
    // The kernel keeps the peer side: a ping to the peer's own address is Linux's business.
    let out = pair
        .b
        .command("ping")
        .args(["-c", "1", "-W", "2", &pair.peer()])
        .output()
        .unwrap();
    assert!(out.status.success());
}

#[test]
fn serve_dpdk_on_an_af_packet_vdev_answers_curl() {
    let pair = UserPair::new("d", 64);
    let ip = format!("{}/24", pair.ours());
    let listen = format!("{}:8080", pair.ours());
    let eal = pair.dpdk_args();
    let _serve = Wirespeed::start(
        &pair.a,
        &[
            "serve",
            "http",
            "--stack",
            "dpdk",
            "--dpdk-args",
            &eal,
            "--cpus",
            "0",
            "--ip",
            &ip,
            "--listen",
            &listen,
        ],
        "listening on",
    )
    .expect("serve --stack dpdk");
    for _ in 0..3 {
        let body = curl_until_answered(&pair, &format!("http://{listen}/plaintext"));
        assert_eq!(body, "Hello, World!");
    }
    let json = curl_until_answered(&pair, &format!("http://{listen}/json"));
    assert!(json.contains("\"message\""), "{json}");
}

/// `wirespeed bench http URL ARGS` in `ns`, 4 connections for a second on CPU 0; the JSON
/// summary, or Err(stderr) when it fails.
fn bench_bypass(ns: &PlainNs, url: &str, args: &[&str]) -> Result<serde_json::Value, String> {
    let json = std::env::temp_dir().join(format!(
        "wsplain-bench-{}-{}.json",
        std::process::id(),
        ns.name()
    ));
    let out = ns
        .command(env!("CARGO_BIN_EXE_wirespeed"))
        .args(["bench", "http", url])
        .args(args)
        .args([
            "--cpus", "0", "-c", "4", "--warmup", "500ms", "-d", "1s", "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&json).unwrap_or_default();
    let _ = std::fs::remove_file(&json);
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(serde_json::from_str(&text).unwrap())
}

/// Requests were answered and nothing went wrong.
fn assert_clean_load(v: &serde_json::Value) {
    assert!(v["requests"].as_u64().unwrap_or(0) > 0, "{v}");
    for kind in ["connect", "read", "write", "timeout", "non2xx", "parse"] {
        assert_eq!(v["errors"][kind].as_u64(), Some(0), "{kind} errors: {v}");
    }
}

#[test]
fn bench_xdp_outside_a_lab_namespace_needs_allow_host_and_then_loads_a_kernel_server() {
    let pair = UserPair::new("k", 66);
    let listen = format!("{}:8080", pair.peer());
    let _server = Wirespeed::start(
        &pair.b,
        &["serve", "http", "--cpus", "0", "--listen", &listen],
        "listening on",
    )
    .expect("kernel server");
    let url = format!("http://{listen}/plaintext");
    let ip = format!("{}/24", pair.ours());
    let args = ["--stack", "xdp", "--iface", &pair.a_if, "--ip", &ip];
    let refused = bench_bypass(&pair.a, &url, &args)
        .expect_err("bench --stack xdp outside a ws-* namespace must refuse without --allow-host");
    let last = refused.lines().last().unwrap_or_default();
    assert!(
        last.contains("pass --allow-host to use a host interface"),
        "{refused}"
    );

    let mut args = args.to_vec();
    args.push("--allow-host");
    let v = bench_bypass(&pair.a, &url, &args).expect("bench --stack xdp --allow-host");
    assert_clean_load(&v);
}

#[test]
fn bench_dpdk_loads_a_kernel_server_in_the_peer_namespace() {
    let pair = UserPair::new("b", 65);
    let listen = format!("{}:8080", pair.peer());
    let _server = Wirespeed::start(
        &pair.b,
        &["serve", "http", "--cpus", "0", "--listen", &listen],
        "listening on",
    )
    .expect("kernel server");
    let ip = format!("{}/24", pair.ours());
    let eal = pair.dpdk_args();
    let v = bench_bypass(
        &pair.a,
        &format!("http://{listen}/plaintext"),
        &["--stack", "dpdk", "--dpdk-args", &eal, "--ip", &ip],
    )
    .unwrap_or_else(|e| panic!("bench --stack dpdk: {e}"));
    assert_clean_load(&v);
}
