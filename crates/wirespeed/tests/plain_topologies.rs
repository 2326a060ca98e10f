//! New-user smoke tests: topologies built the way a user builds them, with plain `ip`
//! commands (`ip netns add`, `ip link add ... type veth peer ...`, `ip addr`, `ip link set
//! up`), every device feature left as the kernel sets it, never the lab crate's topology or
//! tuning code, and namespaces whose names do not start with `ws-` (so the product treats
//! them as a user's, not as its own lab). Root; everything is removed on drop.
//!
//! A default veth has TX checksum offload and TSO on, so its peer's TCP/UDP segments arrive
//! with partial checksums (docs/TCPIP.md): our own labs turn that off, these tests do not.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wirespeed_sys::signal::Signal;
use wirespeed_sys::{netns, process};

use wirespeed_testkit::rng::Rng;

fn require_root() {
    assert!(
        process::is_root(),
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

    /// Runs `f` on a thread that has entered the namespace (sockets it opens live there).
    fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        netns::in_netns(&self.0, f).expect("enter the namespace")
    }
}

impl Drop for PlainNs {
    fn drop(&mut self) {
        let _ = run("ip", &["netns", "del", &self.0]);
        // The exit summary of a `serve_xdp` here, if one ran, goes with the namespace.
        let _ = std::fs::remove_file(summary_path(self));
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
        UserPair::with_queues(tag, net, 1)
    }

    /// A pair whose veths have `queues` tx and rx queues each (`ip link add ... numtxqueues N
    /// numrxqueues N`), as a multi-queue NIC has: the sender's flow hash picks the queue.
    fn with_queues(tag: &str, net: u8, queues: u32) -> UserPair {
        require_root();
        let q = queues.to_string();
        let id = std::process::id();
        let a = PlainNs::add(format!("wsplain-{id}-{tag}a"));
        let b = PlainNs::add(format!("wsplain-{id}-{tag}b"));
        let (a_if, b_if) = (format!("{tag}a0"), format!("{tag}b0"));
        a.ip(&[
            "link",
            "add",
            &a_if,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            &b_if,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
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

    /// `wirespeed serve http` on the kernel stack in the peer namespace, and where it listens.
    fn kernel_server(&self) -> (Wirespeed, String) {
        let listen = format!("{}:8080", self.peer());
        let server = Wirespeed::start(
            &self.b,
            &["serve", "http", "--cpus", "0", "--listen", &listen],
            "listening on",
        )
        .expect("kernel server");
        (server, listen)
    }

    /// `bench http --stack xdp --allow-host` from `a`, one thread, `conns` connections, to the
    /// plaintext endpoint at `listen`: the summary JSON, or stderr when it failed.
    fn bench_xdp(&self, listen: &str, conns: usize) -> Result<serde_json::Value, String> {
        let ip = format!("{}/24", self.ours());
        let conns = conns.to_string();
        let args = [
            "--stack",
            "xdp",
            "--iface",
            &self.a_if,
            "--ip",
            &ip,
            "--allow-host",
            "-c",
            &conns,
        ];
        bench_bypass(&self.a, &format!("http://{listen}/plaintext"), &args)
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

/// `wirespeed ARGS` in `ns`, running; SIGINT and reaped on drop. Its stderr is echoed and
/// kept, so a test can read what it said (`stop`).
struct Wirespeed {
    child: Child,
    stderr: Arc<Mutex<String>>,
    copier: Option<std::thread::JoinHandle<()>>,
}

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
            eprint!("{line}");
            seen.push_str(&line);
            if line.contains(ready) {
                break;
            }
        }
        let stderr = Arc::new(Mutex::new(seen));
        let kept = stderr.clone();
        let copier = std::thread::spawn(move || {
            let mut line = String::new();
            while err.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                eprint!("{line}");
                kept.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        Ok(Wirespeed {
            child,
            stderr,
            copier: Some(copier),
        })
    }

    /// What it wrote to stderr so far.
    fn said(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Stops it (SIGINT) and returns everything it wrote to stderr.
    fn stop(mut self) -> String {
        self.interrupt();
        self.said()
    }

    fn interrupt(&mut self) {
        let _ = process::kill(self.child.id(), Signal::Interrupt);
        let _ = self.child.wait();
        if let Some(c) = self.copier.take() {
            let _ = c.join();
        }
    }
}

impl Drop for Wirespeed {
    fn drop(&mut self) {
        if self.copier.is_some() {
            self.interrupt();
        }
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

    // --metrics exports the bypass stack's counters (docs/METRICS.md).
    pair.a.ip(&["link", "set", "lo", "up"]);
    args.extend(["--allow-host", "--metrics", "127.0.0.1:9119"]);
    let _serve = Wirespeed::start(&pair.a, &args, "listening on").expect("serve --allow-host");
    let body = curl_until_answered(&pair, &format!("http://{listen}/plaintext"));
    assert_eq!(body, "Hello, World!");
    std::thread::sleep(std::time::Duration::from_millis(600)); // a publication period passes
    let out = pair
        .a
        .command("curl")
        .args(["-sS", "--max-time", "5", "http://127.0.0.1:9119/metrics"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let segments_in = text
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                r#"wirespeed_serve_stack_events_total{shard="0",counter="tcp_segments_in"} "#,
            )
        })
        .unwrap_or_else(|| panic!("no stack counters in /metrics: {text}"));
    assert!(segments_in.parse::<u64>().unwrap() > 0, "{text}");
    assert!(
        text.contains(r#"counter="tcp_listen_dropped"} 0"#),
        "{text}"
    );
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
        .args(if args.contains(&"-c") {
            &[][..]
        } else {
            &["-c", "4"]
        })
        .args(["--cpus", "0", "--warmup", "500ms", "-d", "1s", "--json"])
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

/// Requests were answered and nothing went wrong; `context` heads a failure's message.
fn assert_clean_load(v: &serde_json::Value, context: &str) {
    assert!(v["requests"].as_u64().unwrap_or(0) > 0, "{context}: {v}");
    for kind in ["connect", "read", "write", "timeout", "non2xx", "parse"] {
        assert_eq!(
            v["errors"][kind].as_u64(),
            Some(0),
            "{context}: {kind} errors: {v}"
        );
    }
}

#[test]
fn bench_xdp_outside_a_lab_namespace_needs_allow_host_and_then_loads_a_kernel_server() {
    let pair = UserPair::new("k", 66);
    let (_server, listen) = pair.kernel_server();
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
    assert_clean_load(&v, "bench");
}

#[test]
fn bench_dpdk_loads_a_kernel_server_in_the_peer_namespace() {
    let pair = UserPair::new("b", 65);
    let (_server, listen) = pair.kernel_server();
    let ip = format!("{}/24", pair.ours());
    let eal = pair.dpdk_args();
    let v = bench_bypass(
        &pair.a,
        &format!("http://{listen}/plaintext"),
        &["--stack", "dpdk", "--dpdk-args", &eal, "--ip", &ip],
    )
    .unwrap_or_else(|e| panic!("bench --stack dpdk: {e}"));
    assert_clean_load(&v, "bench");
}

// ---- The bypass stack against a peer with default offloads (partial checksums) ----

const MIB: usize = 1024 * 1024;

/// A deterministic byte stream (xorshift), so both ends can check data without storing it.
struct Pattern(u64);
impl Pattern {
    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            *b = self.0 as u8;
        }
    }
}

/// Sends `total` pattern bytes on a connection to `addr` and checks the echo byte for byte.
fn echo_checked(addr: &str, seed: u64, total: usize) -> Result<(), String> {
    let s = TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(10))
        .map_err(|e| format!("connect to {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let mut p = Pattern(seed);
        let mut buf = vec![0u8; 64 * 1024];
        let mut left = total;
        while left > 0 {
            let n = left.min(buf.len());
            p.fill(&mut buf[..n]);
            w.write_all(&buf[..n])?;
            left -= n;
        }
        w.shutdown(Shutdown::Write)
    });
    let mut r = s;
    let mut p = Pattern(seed);
    let (mut buf, mut want) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    let mut got = 0;
    let checked = loop {
        if got == total {
            break Ok(());
        }
        let n = match r.read(&mut buf[..(total - got).min(64 * 1024)]) {
            Ok(0) => break Err(format!("EOF after {got} of {total} bytes")),
            Ok(n) => n,
            Err(e) => break Err(format!("read at {got} of {total}: {e}")),
        };
        p.fill(&mut want[..n]);
        if let Some(i) = (0..n).find(|&i| buf[i] != want[i]) {
            break Err(format!("corrupt byte at offset {}", got + i));
        }
        got += n;
    };
    // Every byte back means every byte was written: let the writer send its FIN before the
    // socket closes under it (else its shutdown may meet a closed socket). On an error it may
    // be blocked writing, so close first.
    if checked.is_err() {
        let _ = r.shutdown(Shutdown::Both);
    }
    let written = writer.join().unwrap();
    let _ = r.shutdown(Shutdown::Both);
    checked.and(written.map_err(|e| format!("write: {e}")))
}

/// The sum of `name N` over every line of `text` (e.g. each shard's "partial checksums taken").
fn counter(text: &str, name: &str) -> u64 {
    text.match_indices(name)
        .filter_map(|(i, _)| {
            text[i + name.len()..]
                .split(|c: char| !c.is_ascii_digit())
                .find(|s| !s.is_empty())
                .and_then(|s| s.parse::<u64>().ok())
        })
        .sum()
}

/// Where [`serve_xdp`] in `ns` writes its exit summary (`--summary-json`).
fn summary_path(ns: &PlainNs) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("{}-serve-summary.json", ns.name()))
}

/// The sum over the shards of the stack counters `names` in the exit summary of the last
/// [`serve_xdp`] in `ns` (stopped), e.g. `tcp_rx_csum_partial`.
fn stack_counter(ns: &PlainNs, names: &[&str]) -> u64 {
    let path = summary_path(ns);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (did serve exit?)", path.display()));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let shards = v["stack"]
        .as_array()
        .expect("stack counters in the summary");
    shards
        .iter()
        .flat_map(|s| names.iter().map(move |n| s[*n].as_u64().unwrap()))
        .sum()
}

/// `wirespeed serve APP --stack xdp --allow-host` on `iface` in `ns`, taking `ip`/24, port 8080.
fn serve_xdp(ns: &PlainNs, iface: &str, ip: &str, app: &str) -> Wirespeed {
    serve_xdp_on(ns, iface, ip, app, "0")
}

/// [`serve_xdp`] with one shard per CPU of `cpus` (`--cpus`).
fn serve_xdp_on(ns: &PlainNs, iface: &str, ip: &str, app: &str, cpus: &str) -> Wirespeed {
    let cidr = format!("{ip}/24");
    let listen = format!("{ip}:8080");
    let summary = summary_path(ns);
    let _ = std::fs::remove_file(&summary);
    Wirespeed::start(
        ns,
        &[
            "serve",
            app,
            "--stack",
            "xdp",
            "--iface",
            iface,
            "--cpus",
            cpus,
            "--ip",
            &cidr,
            "--listen",
            &listen,
            "--allow-host",
            "--summary-json",
            summary.to_str().unwrap(),
        ],
        "listening on",
    )
    .unwrap_or_else(|e| panic!("serve {app} --stack xdp on {iface}: {e}"))
}

/// `n` curls from the peer to our plaintext endpoint, each of which must answer.
fn curl_plaintext(pair: &UserPair, ip: &str, n: usize) {
    let url = format!("http://{ip}:8080/plaintext");
    assert_eq!(curl_until_answered(pair, &url), "Hello, World!");
    for i in 1..n {
        assert_eq!(
            pair.curl(&url).as_deref(),
            Some("Hello, World!"),
            "curl {i} of {n} to {url}"
        );
    }
}

/// The stack counted partial checksums taken and none refused (the exit summary of the last
/// [`serve_xdp`] in `ns`), and the serve log explains no drop.
fn assert_partials_taken(ns: &PlainNs, log: &str) {
    assert!(
        stack_counter(ns, PARTIALS_TAKEN) > 0,
        "no partial checksum seen: are the veth's offloads still at their default?\n{log}"
    );
    assert_eq!(stack_counter(ns, PARTIALS_REFUSED), 0, "{log}");
    assert!(!log.contains("dropping"), "{log}");
}

/// The stack counters of partial checksums taken, and refused.
const PARTIALS_TAKEN: &[&str] = &["tcp_rx_csum_partial", "udp_rx_csum_partial"];
const PARTIALS_REFUSED: &[&str] = &["tcp_bad_checksum_partial", "udp_bad_checksum_partial"];

/// The user's case of docs/TCPIP.md, "Partial checksums (a veth peer with checksum offload)": a
/// peer with default offloads (TX checksum offload on, so its
/// segments carry partial checksums) talks to the bypass server. Before partial checksums
/// were taken on a software device, no handshake ever completed here.
#[test]
fn bypass_server_answers_a_peer_with_default_offloads() {
    let pair = UserPair::new("p", 61);
    let ours = pair.ours();
    let srv = serve_xdp(&pair.a, &pair.a_if, &ours, "http");
    curl_plaintext(&pair, &ours, 10);
    // The frames really carried partial checksums (else this test would not cover the case),
    // none was refused, and no drop was explained to the user.
    assert_partials_taken(&pair.a, &srv.stop());

    // 16 MiB each way through our echo server, checked byte for byte.
    let srv = serve_xdp(&pair.a, &pair.a_if, &ours, "echo");
    let addr = format!("{ours}:8080");
    let echoed = pair
        .b
        .run(move || echo_checked(&addr, 0x5eed_0015, 16 * MIB));
    let log = srv.stop();
    echoed.unwrap_or_else(|e| panic!("16 MiB echo from a peer with default offloads: {e}\n{log}"));
    assert_partials_taken(&pair.a, &log);
}

/// A user of docs/TCPIP.md, "IPv6": one server, dual stack. `--ip` twice on a plain veth pair at the kernel's
/// defaults (the peer's IPv6 address added with plain `ip`, DAD and all): curl over IPv4 and
/// over IPv6 at the same time, ping6, and 16 MiB echoed over IPv6 and checked byte for byte
/// (the TCP checksums of IPv6 frames left to the device, as for IPv4); then our stack as a
/// dual-stack client.
#[test]
fn bypass_server_answers_curl_over_ipv6_and_ipv4_at_once() {
    let pair = UserPair::new("s", 62);
    let b_if = "sb0";
    pair.b
        .ip(&["-6", "addr", "add", "fd00:62::1/64", "dev", b_if]);
    let (v4, v6) = (pair.ours(), "fd00:62::2");
    let serve = |app: &str| {
        let (cidr4, listen) = (format!("{v4}/24"), format!("{v4}:8080"));
        let args = [
            "serve",
            app,
            "--stack",
            "xdp",
            "--iface",
            &pair.a_if,
            "--cpus",
            "0",
            "--ip",
            &cidr4,
            "--ip",
            "fd00:62::2/64",
            "--listen",
            &listen,
            "--allow-host",
        ];
        Wirespeed::start(&pair.a, &args, "listening on")
            .unwrap_or_else(|e| panic!("serve {app} dual stack: {e}"))
    };
    let srv = serve("http");
    // Our address is tentative for a second (DAD), the peer's too: wait for both.
    let url6 = format!("http://[{v6}]:8080/plaintext");
    assert_eq!(curl_until_answered(&pair, &url6), "Hello, World!");
    let url4 = format!("http://{v4}:8080/plaintext");
    let each = |url: &str| {
        for i in 0..20 {
            let got = pair.curl(url);
            assert_eq!(got.as_deref(), Some("Hello, World!"), "curl {i} to {url}");
        }
    };
    std::thread::scope(|s| {
        let both = [s.spawn(|| each(&url4)), s.spawn(|| each(&url6))];
        both.into_iter().for_each(|t| t.join().unwrap());
    });
    let ping = pair
        .b
        .command("ping")
        .args(["-6", "-c", "2", "-W", "2", v6])
        .output()
        .unwrap();
    assert!(
        ping.status.success(),
        "ping6: {}",
        String::from_utf8_lossy(&ping.stdout)
    );
    let log = srv.stop();
    assert!(log.contains(&format!("and [{v6}]:8080")), "{log}");
    assert!(!log.contains("dropping"), "{log}");

    let srv = serve("echo");
    let addr = format!("[{v6}]:8080");
    let echoed = pair
        .b
        .run(move || echo_checked(&addr, 0x5eed_0062, 16 * MIB));
    let log = srv.stop();
    echoed.unwrap_or_else(|e| panic!("16 MiB echo over IPv6: {e}\n{log}"));
    assert_eq!(peer_csum_errors(&pair.b), 0, "{log}");

    // The other way round: our stack as the client (`bench --ip` twice) loads a kernel
    // server over IPv6.
    let listen = "[fd00:62::1]:8081";
    let args = ["serve", "http", "--cpus", "0", "--listen", listen];
    let _server = Wirespeed::start(&pair.b, &args, "listening on").expect("kernel server");
    let cidr4 = format!("{v4}/24");
    let args = [
        "--stack",
        "xdp",
        "--iface",
        &pair.a_if,
        "--ip",
        &cidr4,
        "--ip",
        "fd00:62::2/64",
        "--allow-host",
    ];
    let url = format!("http://{listen}/plaintext");
    let v = bench_bypass(&pair.a, &url, &args).expect("bench over IPv6 from our stack");
    assert_clean_load(&v, "bench over IPv6");
}

/// A TCP counter of the namespace's own (`nstat -az NAME`, since the namespace was made).
fn nstat(ns: &PlainNs, name: &str) -> u64 {
    let out = ns.command("nstat").args(["-az", name]).output().unwrap();
    counter(&String::from_utf8_lossy(&out.stdout), name)
}

/// The peer's count of TCP segments it dropped for a bad checksum.
fn peer_csum_errors(ns: &PlainNs) -> u64 {
    nstat(ns, "TcpInCsumErrors")
}

/// SYNs the peer sent again because nothing answered the first within its timeout (1 s): on a
/// link that loses nothing, a SYN our stack never saw. (A kernel client rehashes its flow on
/// each retry, so a SYN on a queue nobody served got through on a later retry, slowly.)
fn peer_syn_retransmits(ns: &PlainNs) -> u64 {
    nstat(ns, "TcpExtTCPSynRetrans")
}

/// TX checksum offload through AF_XDP TX metadata, where the device under our socket cannot
/// checksum (`ethtool -K IF tx off`, as on a NIC without the offload): the stack leaves only
/// the pseudo-header sum and asks the kernel to complete it, which it must do in software
/// before the frame leaves, or the peer (which trusts nothing it did not see summed) drops
/// every segment. 16 MiB each way are echoed and checked byte for byte, and the peer counts no
/// bad checksum. Where the kernel cannot complete copy-mode requests (before 6.18), serve says
/// so and sums in software, and the same must hold.
#[test]
fn bypass_server_on_a_device_without_checksum_offload_sends_complete_checksums() {
    echo_with_checksums_left_to_a_device_without_offload(UserPair::new("o", 64));
}

/// The same at a 9000-byte MTU, where every full frame is chained over three UMEM chunks and
/// the request travels in front of the first of them (an unaligned UMEM, `offload.rs`).
#[test]
fn bypass_server_without_device_checksums_at_a_jumbo_mtu_sends_complete_checksums() {
    let pair = UserPair::new("q", 67);
    pair.a.ip(&["link", "set", &pair.a_if, "mtu", "9000"]);
    pair.b.ip(&["link", "set", "qb0", "mtu", "9000"]);
    echo_with_checksums_left_to_a_device_without_offload(pair);
}

fn echo_with_checksums_left_to_a_device_without_offload(pair: UserPair) {
    let off = pair
        .a
        .command("ethtool")
        .args(["-K", &pair.a_if, "tx", "off"])
        .output()
        .unwrap();
    assert!(off.status.success(), "ethtool tx off: {off:?}");
    let ours = pair.ours();
    let srv = serve_xdp(&pair.a, &pair.a_if, &ours, "echo");
    let said = srv.said();
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let new_kernel = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse::<u32>().ok())
        .take(2)
        .collect::<Vec<_>>()
        >= vec![6, 18];
    let offloaded = said.contains("TCP checksums completed by the kernel/NIC");
    assert_eq!(
        offloaded, new_kernel,
        "kernel {release}: offload expected only from 6.18\n{said}"
    );
    let before = peer_csum_errors(&pair.b);
    let addr = format!("{ours}:8080");
    let echoed = pair
        .b
        .run(move || echo_checked(&addr, 0x5eed_0016, 16 * MIB));
    let log = srv.stop();
    echoed
        .unwrap_or_else(|e| panic!("16 MiB echo, our device without TX checksumming: {e}\n{log}"));
    assert_eq!(
        peer_csum_errors(&pair.b),
        before,
        "the peer saw bad checksums\n{log}"
    );
    assert_partials_taken(&pair.a, &log);
}

/// A macvlan over the veth (the software device a container often gets) passes the peer's
/// partial checksums on too (XDP runs in generic mode there): requests are served the same way.
/// But the veth under it runs no XDP, so the kernel leaves the peer's TSO on and a bulk
/// sender's 64 KiB segments reach our AF_XDP socket whole, longer than its buffers: the
/// kernel drops them, and serve must say so once, with the fix.
#[test]
fn bypass_server_on_a_macvlan_over_a_default_veth() {
    let pair = UserPair::new("m", 62);
    pair.a.ip(&[
        "link", "add", "mv0", "link", &pair.a_if, "type", "macvlan", "mode", "bridge",
    ]);
    pair.a.ip(&["link", "set", "mv0", "up"]);
    let ours = pair.ours();
    let srv = serve_xdp(&pair.a, "mv0", &ours, "echo");
    // Small exchanges: served, their partial checksums taken.
    let addr = format!("{ours}:8080");
    let small = addr.clone();
    let echoed = pair.b.run(move || echo_checked(&small, 7, 1000));
    echoed.expect("a 1000-byte echo through the macvlan");
    // A bulk sender: segments above the MTU, lost before our stack; told once.
    pair.b.run(move || {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
        let chunk = vec![0x55u8; 256 * 1024];
        for _ in 0..16 {
            if s.write_all(&chunk).is_err() {
                break;
            }
        }
    });
    let told = "dropping frames longer than";
    let deadline = Instant::now() + Duration::from_secs(5);
    while !srv.said().contains(told) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = srv.stop();
    assert_eq!(log.matches(told).count(), 1, "{log}");
    assert!(log.contains("ethtool -K PEER tso off gso off"), "{log}");
    assert!(stack_counter(&pair.a, PARTIALS_TAKEN) > 0, "{log}");
    assert_eq!(stack_counter(&pair.a, PARTIALS_REFUSED), 0, "{log}");
}

/// Clients a user's Linux host may run that our stack does not speak: MPTCP (its SYN carries
/// MP_CAPABLE) and TCP Fast Open (data in the SYN, no cookie asked: `tcp_fastopen` 5). Both
/// must fall back to plain TCP: we answer without MP_CAPABLE, and we acknowledge the SYN but
/// not its data, which the client sends again. Each echo is checked, and the peer's own
/// counters show that the fallback, not a plain connection, happened.
#[test]
fn bypass_server_answers_mptcp_and_fast_open_clients_as_plain_tcp() {
    let pair = UserPair::new("f", 70);
    let mptcp = sh_in(&pair.b, "sysctl -qw net.mptcp.enabled=1");
    assert!(mptcp, "net.mptcp.enabled in the peer's namespace");
    assert!(sh_in(&pair.b, "sysctl -qw net.ipv4.tcp_fastopen=5"));
    let ours = pair.ours();
    let srv = serve_xdp(&pair.a, &pair.a_if, &ours, "echo");
    let addr: std::net::SocketAddr = format!("{ours}:8080").parse().unwrap();
    let echoed = pair.b.run(move || -> Result<(), String> {
        use socket2::{Domain, Protocol, SockAddr, Socket, Type};
        let sa = SockAddr::from(addr);
        let echo = |s: Socket, what: &str, sent: &[u8]| -> Result<(), String> {
            let mut s = TcpStream::from(s);
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut back = vec![0u8; sent.len()];
            s.read_exact(&mut back)
                .map_err(|e| format!("{what}: read: {e}"))?;
            if back != sent {
                return Err(format!("{what}: the echo differs"));
            }
            Ok(())
        };
        for i in 0..4u8 {
            let msg = vec![b'm' + i; 30_000];
            let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::MPTCP))
                .map_err(|e| format!("an MPTCP socket: {e}"))?;
            s.connect_timeout(&sa, Duration::from_secs(5))
                .map_err(|e| format!("MPTCP connect: {e}"))?;
            s.send(&msg).map_err(|e| format!("MPTCP send: {e}"))?;
            echo(s, "MPTCP", &msg)?;
            let msg = vec![b'f' + i; 1000];
            let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
            let sent = s
                .send_to_with_flags(&msg, &sa, libc::MSG_FASTOPEN)
                .map_err(|e| format!("a Fast Open connect: {e}"))?;
            if sent < msg.len() {
                s.send(&msg[sent..])
                    .map_err(|e| format!("Fast Open send: {e}"))?;
            }
            echo(s, "Fast Open", &msg)?;
        }
        Ok(())
    });
    let log = srv.stop();
    echoed.unwrap_or_else(|e| panic!("{e}\n{log}"));
    assert_eq!(
        nstat(&pair.b, "MPTcpExtMPCapableFallbackSYNACK"),
        4,
        "{log}"
    );
    assert_eq!(nstat(&pair.b, "TcpExtTCPFastOpenActiveFail"), 4, "{log}");
    assert_eq!(peer_syn_retransmits(&pair.b), 0, "{log}");
}

/// A user lowers the MTU of the interface we serve on while we run (`ip link set IF mtu
/// 1280`, the peer's end left at 1500). Connections opened afterwards must offer the new MSS,
/// or the device drops every full-sized segment the peer sends them: serve follows the MTU
/// within a second and says so in one line.
#[test]
fn bypass_server_follows_an_mtu_lowered_while_it_runs() {
    let pair = UserPair::new("u", 72);
    let ours = pair.ours();
    let srv = serve_xdp(&pair.a, &pair.a_if, &ours, "echo");
    let addr = format!("{ours}:8080");
    let before = addr.clone();
    let echoed = pair
        .b
        .run(move || echo_checked(&before, 0x1500, 256 * 1024));
    echoed.unwrap_or_else(|e| panic!("before the change: {e}\n{}", srv.said()));
    pair.a.ip(&["link", "set", &pair.a_if, "mtu", "1280"]);
    let told = "'s MTU is now 1280: connections opened from now on use it";
    let deadline = Instant::now() + Duration::from_secs(5);
    while !srv.said().contains(told) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let echoed = pair.b.run(move || echo_checked(&addr, 0x1280, 256 * 1024));
    let log = srv.stop();
    echoed.unwrap_or_else(|e| panic!("after the MTU went down: {e}\n{log}"));
    assert_eq!(log.matches(told).count(), 1, "{log}");
}

/// A peer whose MAC changes under an open connection (`ip link set DEV address`). At the
/// kernel's default (`arp_notify` 0) Linux announces nothing, but it flushes its neighbours
/// and asks for ours again, from the new MAC: the stack moves the connection to it at once
/// (docs/TCPIP.md, "Neighbours that move"). The echo goes on over the same connection,
/// checked byte for byte; before, every segment went to the old MAC until the connection
/// timed out.
#[test]
fn bypass_server_follows_a_peer_whose_mac_changes() {
    let pair = UserPair::new("h", 74);
    let ours = pair.ours();
    let srv = serve_xdp(&pair.a, &pair.a_if, &ours, "echo");
    let addr = format!("{ours}:8080");
    let after = pair.b.run(move || -> Result<Duration, String> {
        let s = TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(10))
            .map_err(|e| format!("connect to {addr}: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let (mut out, mut back) = (Pattern(0x7401), Pattern(0x7401));
        let mut exchange = |what: &str| -> Result<(), String> {
            let mut buf = vec![0u8; 256 * 1024];
            out.fill(&mut buf);
            (&s).write_all(&buf)
                .map_err(|e| format!("{what}: write: {e}"))?;
            let mut want = vec![0u8; buf.len()];
            back.fill(&mut want);
            (&s).read_exact(&mut buf)
                .map_err(|e| format!("{what}: read: {e}"))?;
            (buf == want)
                .then_some(())
                .ok_or(format!("{what}: corrupt echo"))
        };
        exchange("before the move")?;
        let moved = Command::new("ip")
            .args(["link", "set", "dev", "hb0", "address", "02:00:00:00:74:01"])
            .status()
            .unwrap();
        assert!(moved.success(), "ip link set hb0 address");
        let started = Instant::now();
        exchange("after the move")?;
        Ok(started.elapsed())
    });
    let after = after.unwrap_or_else(|e| panic!("{e}\n{}", srv.said()));
    let log = srv.stop();
    let moved = stack_counter(&pair.a, &["neighbour_moved"]);
    let rechecks = stack_counter(&pair.a, &["neighbour_rechecks"]);
    let rto = stack_counter(&pair.a, &["tcp_rto_expired"]);
    eprintln!(
        "the echo after the move took {after:.1?}: {moved} moves, {rechecks} checks, {rto} \
         timeouts"
    );
    assert_eq!(moved, 1, "the peer's new MAC was not taken\n{log}");
}

/// ICMP errors, with Linux beside us as the judge: the kernel keeps an address of its own on
/// the interface our stack serves, and the peer sends ten datagrams at once to a closed UDP
/// port of each. Both answer the same number of port unreachables: six, the burst of the
/// destination's bucket (docs/TCPIP.md, "ICMP errors"; before it, the stack answered all ten).
#[test]
fn bypass_server_limits_icmp_errors_per_destination_as_linux_does() {
    let pair = UserPair::new("l", 75);
    let ours = pair.ours();
    let kernel = format!("198.18.{}.3", pair.net);
    pair.a
        .ip(&["addr", "add", &format!("{kernel}/24"), "dev", &pair.a_if]);
    let srv = serve_xdp(&pair.a, &pair.a_if, &ours, "echo");
    let mut answered = Vec::new();
    for target in [ours, kernel] {
        let ping = pair
            .b
            .command("ping")
            .args(["-c1", "-W2", &target])
            .output();
        assert!(
            ping.unwrap().status.success(),
            "{target} does not answer ping"
        );
        let before = nstat(&pair.b, "IcmpInDestUnreachs");
        let to = format!("{target}:9");
        pair.b.run(move || {
            let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
            for _ in 0..10 {
                s.send_to(b"x", &to).unwrap();
            }
        });
        std::thread::sleep(Duration::from_millis(300));
        answered.push(nstat(&pair.b, "IcmpInDestUnreachs") - before);
    }
    let log = srv.stop();
    eprintln!(
        "port unreachables for 10 datagrams at once: ours {}, Linux {}",
        answered[0], answered[1]
    );
    assert_eq!(answered[0], answered[1], "ours, then Linux's\n{log}");
    assert_eq!(
        stack_counter(&pair.a, &["icmp_rate_limited_host"]),
        10 - answered[0]
    );
}

/// A jumbo MTU (9000 on both ends, every offload at its default): the bifurcation program is
/// an xdp.frags program, so the veth keeps the MTU with it attached, and serve opens
/// multi-buffer sockets, so 16 MiB each way are echoed in segments of up to 8960 bytes (the
/// peer's TSO goes off while XDP is on its peer, so no segment is above the MTU).
#[test]
fn bypass_server_echoes_at_a_jumbo_mtu() {
    let pair = UserPair::new("j", 63);
    pair.a.ip(&["link", "set", &pair.a_if, "mtu", "9000"]);
    pair.b.ip(&["link", "set", "jb0", "mtu", "9000"]);
    let ours = pair.ours();
    let srv = serve_xdp(&pair.a, &pair.a_if, &ours, "echo");
    let addr = format!("{ours}:8080");
    let echoed = pair.b.run(move || echo_checked(&addr, 0x9000, 16 * MIB));
    let log = srv.stop();
    echoed.unwrap_or_else(|e| panic!("16 MiB echo at MTU 9000: {e}\n{log}"));
    assert!(!log.contains("dropping"), "{log}");
    // 16 MiB in 1460-byte segments would be over 11,000 data segments in alone (their ACKs
    // come on top); in 8960-byte ones about 1,900.
    let segments_in = stack_counter(&pair.a, &["tcp_segments_in"]);
    assert!(
        segments_in > 0 && segments_in < (16 * MIB / 3000) as u64,
        "the peer's segments were not jumbo: {segments_in} in\n{log}"
    );
}

// ---- A device with more rx queues than shards ----

/// How many of `iface`'s rx queues redirected frames to AF_XDP (`ethtool -S` on a veth).
fn queues_redirecting(ns: &PlainNs, iface: &str) -> usize {
    let out = ns.command("ethtool").args(["-S", iface]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("_xdp_redirect:") && !l.trim_end().ends_with(": 0"))
        .count()
}

/// A multi-queue device (a veth made with 4 queues, as a NIC has several) under one shard:
/// the peer's flow hash spreads connections over all four queues, and the XDP program can
/// hand a frame only to its own queue's socket, so every queue needs a socket. Before serve
/// opened one per queue (the extra ones receive-only, in the shard's poller), the connections
/// hashed to queues 1-3 never completed a handshake, and nothing said why.
#[test]
fn bypass_server_with_one_shard_serves_every_queue_of_a_multiqueue_device() {
    let pair = UserPair::with_queues("n", 68, 4);
    let ours = pair.ours();
    let srv = serve_xdp(&pair.a, &pair.a_if, &ours, "echo");
    assert!(
        srv.said().contains("rx queues 0-3 on 1 shard(s)"),
        "{}",
        srv.said()
    );
    let addr = format!("{ours}:8080");
    let echoed = pair.b.run(move || {
        (0..16u64)
            .map(|i| {
                echo_checked(&addr, 0x4e_0000 + i, 256 * 1024)
                    .map_err(|e| format!("connection {i}: {e}"))
            })
            .collect::<Result<Vec<()>, String>>()
    });
    let used = queues_redirecting(&pair.a, &pair.a_if);
    let log = srv.stop();
    echoed.unwrap_or_else(|e| panic!("16 checked echoes over a 4-queue veth: {e}\n{log}"));
    assert_eq!(
        peer_syn_retransmits(&pair.b),
        0,
        "SYNs went unanswered\n{log}"
    );
    // The flows really spread (else this test would not cover the case).
    assert!(
        used >= 2,
        "all 16 connections landed on one queue ({used})\n{log}"
    );
    assert!(!log.contains("dropping"), "{log}");
}

/// The same for a client: `bench --stack xdp` with one thread on a 4-queue veth, against a
/// kernel server whose host sends every reply on its tx queue 2 (XPS: every CPU to queue 2),
/// so they all arrive on our rx queue 2, a queue no shard owns. Before, no connection got
/// past its SYN.
#[test]
fn bench_xdp_with_one_thread_takes_replies_on_a_queue_no_shard_owns() {
    let pair = UserPair::with_queues("r", 69, 4);
    let (_server, listen) = pair.kernel_server();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    for q in 0..4 {
        let mask = if q == 2 { cpu_mask(cpus) } else { "0".into() };
        let path = format!("/sys/class/net/rb0/queues/tx-{q}/xps_cpus");
        let out = pair
            .b
            .command("sh")
            .args(["-c", &format!("echo {mask} > {path}")])
            .output()
            .unwrap();
        assert!(out.status.success(), "{path}: {out:?}");
    }
    let v = pair
        .bench_xdp(&listen, 16)
        .unwrap_or_else(|e| panic!("bench --stack xdp: {e}"));
    assert_clean_load(&v, "bench");
    assert_eq!(v["connections"].as_u64(), Some(16), "{v}");
    let out = pair
        .a
        .command("ethtool")
        .args(["-S", &pair.a_if])
        .output()
        .unwrap();
    let stats = String::from_utf8_lossy(&out.stdout);
    assert!(
        counter(&stats, "rx_queue_2_xdp_redirect: ") > 0,
        "the replies did not come in on queue 2:\n{stats}"
    );
}

/// A CPU mask (sysfs format: 32-bit hex groups, comma-separated) of CPUs `0..n`.
fn cpu_mask(n: usize) -> String {
    let mut groups: Vec<String> = (0..n.div_ceil(32))
        .map(|g| {
            let bits = (n - g * 32).min(32);
            format!(
                "{:08x}",
                if bits == 32 {
                    u32::MAX
                } else {
                    (1u32 << bits) - 1
                }
            )
        })
        .collect();
    groups.reverse();
    groups.join(",")
}

// ---- Device and peer settings drawn at random ----

/// `sh -c CMD` in `ns`; whether it succeeded.
fn sh_in(ns: &PlainNs, cmd: &str) -> bool {
    ns.command("sh")
        .args(["-c", cmd])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// How many random draws a test makes: `WS_PLAIN_DRAWS`, else `default`.
fn draw_count(default: usize) -> usize {
    std::env::var("WS_PLAIN_DRAWS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Draws a configuration a user might have, applies it to a fresh pair and returns it as one
/// line: queues per veth, MTU, each end's offloads, the peer's TCP sysctls, the shard count.
fn random_pair(rng: &mut Rng, draw: usize) -> (UserPair, String, String) {
    let queues = *rng.pick(&[&1u32, &1, &2, &4]);
    let pair = UserPair::with_queues(&format!("z{draw}"), 71, queues);
    let mtus = [&1280u32, &1500, &1500, &2000, &4000, &9000];
    let mtu = *rng.pick(&mtus);
    // Half the time the peer's end keeps another MTU, as when a user sets only one end.
    let mut other = rng.fork();
    let peer_mtu = if other.coin() {
        mtu
    } else {
        *other.pick(&mtus)
    };
    pair.a
        .ip(&["link", "set", &pair.a_if, "mtu", &mtu.to_string()]);
    pair.b.ip(&[
        "link",
        "set",
        &format!("z{draw}b0"),
        "mtu",
        &peer_mtu.to_string(),
    ]);
    let mut line = format!("queues {queues}, mtu {mtu}, peer mtu {peer_mtu}");
    for (ns, dev) in [
        (&pair.a, pair.a_if.clone()),
        (&pair.b, format!("z{draw}b0")),
    ] {
        for feature in ["tx", "tso", "gso", "gro", "rx", "sg"] {
            let value = rng.pick(&["on", "on", "off"]);
            // A device may refuse a combination (TSO without TX checksumming): it then keeps
            // what it can, as it would for a user.
            let taken = sh_in(ns, &format!("ethtool -K {dev} {feature} {value}"));
            line.push_str(&format!(
                ", {dev} {feature} {value}{}",
                if taken { "" } else { " (refused)" }
            ));
        }
    }
    let allowed = pair
        .b
        .command("cat")
        .arg("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let allowed: Vec<&str> = allowed.split_whitespace().collect();
    let mut sysctls: Vec<(&str, String)> = [
        "tcp_sack",
        "tcp_timestamps",
        "tcp_window_scaling",
        "tcp_dsack",
    ]
    .into_iter()
    .map(|k| (k, rng.pick(&["1", "1", "0"]).to_string()))
    .collect();
    sysctls.push(("tcp_ecn", rng.pick(&["0", "1", "2"]).to_string()));
    // Drawn from the fork, as the peer's MTU: SYN cookies always (2) or under pressure only
    // (1, the default), for the draws in which the peer is the server.
    sysctls.push(("tcp_syncookies", other.pick(&["1", "2"]).to_string()));
    if !allowed.is_empty() {
        sysctls.push(("tcp_congestion_control", rng.pick(&allowed).to_string()));
    }
    // The smallest with window scaling off found the zero-window stall that
    // `Tcb::seg_limit` fixed (docs/TCPIP.md, "Segment size"; seed 638060).
    let buffers = [
        "4096 16384 4194304",
        "4096 131072 6291456",
        "4096 8192 65536",
    ];
    sysctls.push(("tcp_rmem", rng.pick(&buffers).to_string()));
    sysctls.push(("tcp_wmem", rng.pick(&buffers).to_string()));
    for (key, value) in &sysctls {
        let set = sh_in(&pair.b, &format!("sysctl -qw net.ipv4.{key}='{value}'"));
        assert!(set, "peer sysctl net.ipv4.{key}={value}");
        line.push_str(&format!(", {key} {value}"));
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let shard_cpus = if queues >= 2 && cpus >= 2 && rng.coin() {
        "0,1"
    } else {
        "0"
    };
    line.push_str(&format!(", shards on CPUs {shard_cpus}"));
    (pair, line, shard_cpus.to_string())
}

/// The bypass server under configurations we did not choose: for each of a few draws (8, or
/// `WS_PLAIN_DRAWS`; the seed is printed, `WS_PLAIN_SEED` repeats it) a fresh plain pair gets
/// a random queue count, MTU, offloads on both ends and TCP settings on the Linux peer, and
/// six connections of random length (1 byte to 1 MiB) are echoed and checked byte for byte.
/// Nothing may be lost, and nothing may need explaining.
#[test]
fn bypass_server_echoes_under_random_device_and_peer_settings() {
    let mut rng = Rng::seeded("WS_PLAIN_SEED", "random settings");
    let draws = draw_count(8);
    for draw in 0..draws {
        let (pair, settings, shard_cpus) = random_pair(&mut rng, draw);
        println!("draw {draw}: {settings}");
        let ours = pair.ours();
        let srv = serve_xdp_on(&pair.a, &pair.a_if, &ours, "echo", &shard_cpus);
        let lengths: Vec<usize> = (0..6)
            .map(|_| *rng.pick(&[&1usize, &100, &1460, &65_536, &300_000, &MIB]))
            .collect();
        let seed = rng.next_u64();
        let addr = format!("{ours}:8080");
        let echoed = pair.b.run(move || {
            lengths
                .iter()
                .enumerate()
                .map(|(i, &n)| {
                    echo_checked(&addr, seed + i as u64, n)
                        .map_err(|e| format!("connection {i} ({n} bytes): {e}"))
                })
                .collect::<Result<Vec<()>, String>>()
        });
        let log = srv.stop();
        if let Err(e) = echoed {
            panic!("draw {draw} ({settings}): {e}\n{log}");
        }
        assert!(
            !log.contains("dropping"),
            "draw {draw} ({settings}):\n{log}"
        );
        let syn_retransmits = peer_syn_retransmits(&pair.b);
        assert_eq!(
            syn_retransmits, 0,
            "draw {draw} ({settings}): the peer sent {syn_retransmits} SYNs again\n{log}"
        );
    }
}

/// The bypass client under configurations we did not choose: as above, with the Linux peer
/// as a kernel HTTP server and `bench --stack xdp` (one thread: on a veth the reply queue
/// cannot be predicted, so more client shards are refused) loading it over 8 connections.
/// Every request must be answered without an error, and the server may not have sent a
/// SYN-ACK twice.
#[test]
fn bench_xdp_loads_a_kernel_server_under_random_device_and_peer_settings() {
    let mut rng = Rng::seeded("WS_PLAIN_SEED", "random settings, client");
    let draws = draw_count(4);
    for draw in 0..draws {
        let (pair, settings, _) = random_pair(&mut rng, draw + 100);
        println!("draw {draw}: {settings}");
        let (_server, listen) = pair.kernel_server();
        let v = pair
            .bench_xdp(&listen, 8)
            .unwrap_or_else(|e| panic!("draw {draw} ({settings}): bench --stack xdp: {e}"));
        assert_clean_load(&v, &format!("draw {draw} ({settings})"));
        let syn_retransmits = peer_syn_retransmits(&pair.b);
        assert_eq!(
            syn_retransmits, 0,
            "draw {draw} ({settings}): the server sent {syn_retransmits} SYN-ACKs again"
        );
    }
}

/// A client behind a narrower link than ours, which still offers a full-sized MSS (a tunnel,
/// or `advmss` on its route): the Linux router between us drops our 1500-byte segments and
/// answers "fragmentation needed" (IPv4) or "packet too big" (IPv6). Our stack must take the
/// smaller path MTU, or every full-sized segment is lost for good (a PMTU black hole): 4 MiB
/// each way are echoed bit-exact over both families.
#[test]
fn bypass_server_takes_the_path_mtu_a_router_reports() {
    let pair = UserPair::new("p", 73);
    let router = &pair.b;
    router.ip(&["-6", "addr", "add", "fd00:73::1/64", "dev", "pb0", "nodad"]);
    let client = PlainNs::add(format!("wsplain-{}-pc", std::process::id()));
    router.ip(&[
        "link",
        "add",
        "pr1",
        "mtu",
        "1280",
        "type",
        "veth",
        "peer",
        "name",
        "pc0",
        "mtu",
        "1280",
        "netns",
        client.name(),
    ]);
    router.ip(&["addr", "add", "198.18.74.1/24", "dev", "pr1"]);
    router.ip(&["-6", "addr", "add", "fd00:74::1/64", "dev", "pr1", "nodad"]);
    router.ip(&["link", "set", "pr1", "up"]);
    client.ip(&["addr", "add", "198.18.74.2/24", "dev", "pc0"]);
    client.ip(&["-6", "addr", "add", "fd00:74::2/64", "dev", "pc0", "nodad"]);
    client.ip(&["link", "set", "pc0", "up"]);
    // The client offers the MSS of a 1500-byte path although its own link carries 1280.
    client.ip(&[
        "route",
        "add",
        "default",
        "via",
        "198.18.74.1",
        "advmss",
        "1460",
    ]);
    client.ip(&[
        "-6",
        "route",
        "add",
        "default",
        "via",
        "fd00:74::1",
        "advmss",
        "1440",
    ]);
    for key in ["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"] {
        let out = router
            .command("sysctl")
            .args(["-qw", key])
            .output()
            .unwrap();
        assert!(out.status.success(), "sysctl {key}");
    }
    let (v4, v6) = (pair.ours(), "fd00:73::2");
    let cidr4 = format!("{v4}/24");
    let args = [
        "serve",
        "echo",
        "--stack",
        "xdp",
        "--iface",
        &pair.a_if,
        "--cpus",
        "0",
        "--ip",
        &cidr4,
        "--ip",
        "fd00:73::2/64",
        "--gateway",
        "198.18.73.1",
        "--gateway",
        "fd00:73::1",
        "--listen",
        &format!("{v4}:8080"),
        "--allow-host",
    ];
    let srv = Wirespeed::start(&pair.a, &args, "listening on").expect("serve echo");
    // Our IPv6 address is tentative for a second (DAD).
    std::thread::sleep(Duration::from_millis(1500));
    for addr in [format!("{v4}:8080"), format!("[{v6}]:8080")] {
        let to = addr.clone();
        let echoed = client.run(move || echo_checked(&to, 0x9a7, 4 * MIB));
        echoed.unwrap_or_else(|e| panic!("4 MiB echo to {addr}: {e}\n{}", srv.said()));
    }
    let log = srv.stop();
    // The router did report: the path MTU was found, not avoided.
    assert!(nstat(router, "IcmpOutDestUnreachs") > 0, "{log}");
    assert!(nstat(router, "Icmp6OutPktTooBigs") > 0, "{log}");
}
