//! The fast path as a new user meets it. Namespaces and veths are made with plain `ip`
//! commands and every device feature stays at the kernel's default: GRO off, TX checksum
//! offload and TSO on, no XDP program on any peer. The namespaces are not named like our labs,
//! so `wirespeed fp run` needs `--allow-host`, as on a user's machine. Nothing here calls the
//! lab crate. Traffic comes from this test binary itself, run inside a namespace with
//! `ip netns exec` (the ignored `traffic_child` test), so it takes no shortcut our labs take.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use wirespeed_fp::status::{read_status_file, Status};

/// Namespaces made by hand, deleted on drop (their veths go with them).
struct Namespaces(Vec<String>);

impl Namespaces {
    fn new(tag: &str, roles: &[&str]) -> Namespaces {
        // Unique per test too: tests of one binary may run side by side.
        static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = std::process::id() % 100_000;
        let names: Vec<String> = roles
            .iter()
            .map(|r| format!("plain{tag}{id}-{n}{r}"))
            .collect();
        let mut made = Namespaces(Vec::new());
        for n in &names {
            ip(&["netns", "add", n]);
            made.0.push(n.clone());
        }
        made
    }

    fn name(&self, i: usize) -> &str {
        &self.0[i]
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn ip(args: &[&str]) {
    run(Command::new("ip").args(args));
}

/// Runs `cmd args` inside namespace `ns`.
fn exec(ns: &str, cmd: &str, args: &[&str]) -> Output {
    run(Command::new("ip")
        .args(["netns", "exec", ns, cmd])
        .args(args))
}

fn require_root() {
    assert_eq!(
        std::fs::metadata("/proc/self").map(|m| m.uid()).ok(),
        Some(0),
        "these tests create network namespaces: run as root (make test does)"
    );
}

/// Waits until no IPv6 address in `ns` is still tentative (duplicate address detection).
fn wait_for_dad(ns: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !exec(ns, "ip", &["-6", "addr", "show", "tentative"])
        .stdout
        .is_empty()
    {
        assert!(Instant::now() < deadline, "{ns}: IPv6 DAD did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// src (v0) -- (d0) dut (d1) -- (s0) sink, IPv4 and IPv6, the DUT forwarding.
fn plain_line() -> Namespaces {
    require_root();
    let ns = Namespaces::new("l", &["s", "d", "k"]);
    let (s, d, k) = (ns.name(0), ns.name(1), ns.name(2));
    ip(&[
        "link", "add", "v0", "netns", s, "type", "veth", "peer", "d0", "netns", d,
    ]);
    ip(&[
        "link", "add", "d1", "netns", d, "type", "veth", "peer", "s0", "netns", k,
    ]);
    address_line(&ns);
    ns
}

/// The line's addresses and routes on devices v0 (source), d0 and d1 (DUT) and s0 (sink)
/// that exist already: 198.18.0.0/24 and fd00:a::/64 on the source's side, 198.18.1.0/24
/// and fd00:b::/64 on the sink's, the DUT forwarding.
fn address_line(ns: &Namespaces) {
    let (s, d, k) = (ns.name(0), ns.name(1), ns.name(2));
    for (n, dev, addrs) in [
        (s, "v0", ["198.18.0.1/24", "fd00:a::1/64"]),
        (d, "d0", ["198.18.0.2/24", "fd00:a::2/64"]),
        (d, "d1", ["198.18.1.1/24", "fd00:b::1/64"]),
        (k, "s0", ["198.18.1.2/24", "fd00:b::2/64"]),
    ] {
        for a in addrs {
            exec(n, "ip", &["addr", "add", a, "dev", dev]);
        }
        exec(n, "ip", &["link", "set", dev, "up"]);
        exec(n, "ip", &["link", "set", "lo", "up"]);
    }
    exec(s, "ip", &["route", "add", "default", "via", "198.18.0.2"]);
    exec(
        s,
        "ip",
        &["-6", "route", "add", "default", "via", "fd00:a::2"],
    );
    exec(k, "ip", &["route", "add", "default", "via", "198.18.1.1"]);
    exec(
        k,
        "ip",
        &["-6", "route", "add", "default", "via", "fd00:b::1"],
    );
    exec(d, "sysctl", &["-qw", "net.ipv4.ip_forward=1"]);
    exec(d, "sysctl", &["-qw", "net.ipv6.conf.all.forwarding=1"]);
    for n in [s, d, k] {
        wait_for_dad(n);
    }
}

/// `plain_line` with the DUT's far side an overlay, as Flannel or a Docker overlay network
/// builds one: d1 is a VXLAN device (VNI 42, MTU 1450 as the kernel sets it) over an
/// underlay veth u0 -- u1 into the sink, whose end of the tunnel holds the sink's addresses.
fn plain_line_over_vxlan() -> Namespaces {
    require_root();
    let ns = Namespaces::new("x", &["s", "d", "k"]);
    let (s, d, k) = (ns.name(0), ns.name(1), ns.name(2));
    ip(&[
        "link", "add", "v0", "netns", s, "type", "veth", "peer", "d0", "netns", d,
    ]);
    ip(&[
        "link", "add", "u0", "netns", d, "type", "veth", "peer", "u1", "netns", k,
    ]);
    for (n, dev, addr) in [(d, "u0", "198.18.9.1/24"), (k, "u1", "198.18.9.2/24")] {
        exec(n, "ip", &["addr", "add", addr, "dev", dev]);
        exec(n, "ip", &["link", "set", dev, "up"]);
    }
    for (n, dev, local, remote, under) in [
        (d, "d1", "198.18.9.1", "198.18.9.2", "u0"),
        (k, "s0", "198.18.9.2", "198.18.9.1", "u1"),
    ] {
        exec(
            n,
            "ip",
            &[
                "link", "add", dev, "type", "vxlan", "id", "42", "local", local, "remote", remote,
                "dstport", "4789", "dev", under,
            ],
        );
    }
    address_line(&ns);
    ns
}

/// Two hosts on one bridge in the DUT: a (v0) -- (p0) br0 (p1) -- (v1) b.
fn plain_bridge() -> Namespaces {
    require_root();
    let ns = Namespaces::new("b", &["a", "d", "b"]);
    let (a, d, b) = (ns.name(0), ns.name(1), ns.name(2));
    exec(d, "ip", &["link", "add", "br0", "type", "bridge"]);
    ip(&[
        "link", "add", "v0", "netns", a, "type", "veth", "peer", "p0", "netns", d,
    ]);
    ip(&[
        "link", "add", "v1", "netns", b, "type", "veth", "peer", "p1", "netns", d,
    ]);
    for p in ["p0", "p1"] {
        exec(d, "ip", &["link", "set", p, "master", "br0"]);
        exec(d, "ip", &["link", "set", p, "up"]);
    }
    exec(d, "ip", &["link", "set", "br0", "up"]);
    exec(a, "ip", &["addr", "add", "198.18.2.1/24", "dev", "v0"]);
    exec(b, "ip", &["addr", "add", "198.18.2.2/24", "dev", "v1"]);
    exec(a, "ip", &["link", "set", "v0", "up"]);
    exec(b, "ip", &["link", "set", "v1", "up"]);
    // The bridge forwards once its ports have left the listening and learning states.
    let deadline = Instant::now() + Duration::from_secs(40);
    while !String::from_utf8_lossy(&exec(d, "bridge", &["link", "show"]).stdout)
        .lines()
        .filter(|l| l.contains("state forwarding"))
        .count()
        .eq(&2)
    {
        assert!(Instant::now() < deadline, "bridge ports never forwarding");
        std::thread::sleep(Duration::from_millis(100));
    }
    ns
}

/// `wirespeed fp run` in a namespace, killed on drop if a failed assertion leaves it running.
struct FastPath {
    child: Child,
    status: PathBuf,
}

impl FastPath {
    fn start(ns: &str) -> FastPath {
        Self::start_with(ns, &[])
    }

    /// As `start`, with more `fp run` arguments.
    fn start_with(ns: &str, args: &[&str]) -> FastPath {
        let status = std::env::temp_dir().join(format!("ws-plain-fp-{ns}.json"));
        let _ = std::fs::remove_file(&status);
        let child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(env!("CARGO_BIN_EXE_wirespeed"))
            .args(["fp", "run", "--allow-host", "--status"])
            .arg(&status)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn wirespeed fp run");
        FastPath { child, status }
    }

    /// Waits (bounded) until the status satisfies `pred`.
    fn wait_for(&self, what: &str, pred: impl Fn(&Status) -> bool) -> Status {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(s) = read_status_file(&self.status) {
                if pred(&s) {
                    return s;
                }
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for: {what}; last status {:?}",
                read_status_file(&self.status).ok()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The status after the daemon's next write (it writes at least once a second).
    fn fresh_status(&self) -> Status {
        let since = read_status_file(&self.status).map_or(0, |s| s.updated_unix_ms);
        self.wait_for("a fresh status", |s| s.updated_unix_ms > since)
    }

    fn stop(mut self) {
        // `ip netns exec` runs the daemon in its own process (execvp): the signal reaches it.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let status = self.child.wait().expect("daemon exit");
        assert!(status.success(), "fp run exited with {status} on SIGTERM");
    }
}

impl Drop for FastPath {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.status);
    }
}

/// Packets the ports counted under `reason` (e.g. `pass_martian`).
fn reason_total(s: &Status, reason: &str) -> u64 {
    s.ports.iter().filter_map(|p| p.reasons.get(reason)).sum()
}

fn totals(s: &Status) -> (u64, u64) {
    (
        s.ports.iter().map(|p| p.fast_pathed).sum(),
        s.ports.iter().map(|p| p.passed).sum(),
    )
}

// --- traffic, from this binary run inside a namespace ---------------------------------------

/// Starts `traffic_child` in `ns` with the job in WS_PLAIN_JOB.
fn spawn_job(ns: &str, job: &str) -> Child {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(std::env::current_exe().expect("test binary"))
        .args(["--exact", "traffic_child", "--ignored", "--nocapture", "-q"])
        .env("WS_PLAIN_JOB", job)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn traffic child")
}

/// The `RESULT a b` line a job printed: (a, b).
fn job_result(child: Child) -> (u64, u64) {
    let out = child.wait_with_output().expect("traffic child");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("traffic child printed no result: {text}"));
    let mut f = line.split_whitespace().map(|v| v.parse::<u64>().unwrap());
    (f.next().unwrap(), f.next().unwrap())
}

/// A stream of bytes both ends can regenerate: xorshift64 from a seed.
struct Pattern(u64);

impl Pattern {
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            chunk.copy_from_slice(&self.0.to_le_bytes()[..chunk.len()]);
        }
    }
}

/// FNV-1a over everything fed to it.
struct Digest(u64);

impl Digest {
    fn new() -> Digest {
        Digest(0xcbf2_9ce4_8422_2325)
    }
    fn feed(&mut self, b: &[u8]) {
        for x in b {
            self.0 = (self.0 ^ *x as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// Not a test of its own: the traffic end that the tests above start inside a namespace.
/// Jobs (WS_PLAIN_JOB): `tcp-recv ADDR` (prints bytes and digest), `tcp-send ADDR BYTES`,
/// `udp-recv ADDR COUNT` (prints datagrams received and receive-buffer overflows),
/// `udp-send ADDR COUNT SIZE PPS [SRC]`.
#[test]
#[ignore = "run by the other tests inside a namespace"]
fn traffic_child() {
    let job = std::env::var("WS_PLAIN_JOB").expect("WS_PLAIN_JOB");
    let w: Vec<&str> = job.split_whitespace().collect();
    let addr: SocketAddr = w[1].parse().unwrap();
    let (a, b) = match w[0] {
        "tcp-recv" => {
            let l = TcpListener::bind(addr).unwrap();
            println!("READY");
            let (mut c, _) = l.accept().unwrap();
            c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let (mut n, mut d, mut buf) = (0u64, Digest::new(), vec![0u8; 1 << 16]);
            loop {
                let k = c.read(&mut buf).unwrap();
                if k == 0 {
                    break;
                }
                d.feed(&buf[..k]);
                n += k as u64;
            }
            (n, d.0)
        }
        "tcp-send" => {
            let total: u64 = w[2].parse().unwrap();
            let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
            let (mut p, mut d, mut buf) = (Pattern(0x9e37_79b9), Digest::new(), vec![0u8; 1 << 16]);
            let mut sent = 0u64;
            while sent < total {
                let k = (total - sent).min(buf.len() as u64) as usize;
                p.fill(&mut buf[..k]);
                d.feed(&buf[..k]);
                c.write_all(&buf[..k]).unwrap();
                sent += k as u64;
            }
            c.shutdown(std::net::Shutdown::Write).unwrap();
            // Wait for the receiver to close: everything was read.
            let _ = c.read(&mut buf);
            (sent, d.0)
        }
        "udp-recv" => {
            let s = UdpSocket::bind(addr).unwrap();
            let want: u64 = w[2].parse().unwrap();
            let overflows_before = udp_rcvbuf_errors();
            println!("READY");
            // Until all arrived, or 2 s without a datagram (10 s before the first).
            s.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            let (mut n, mut buf, mut last) = (0u64, vec![0u8; 65536], Instant::now());
            let mut quiet = Duration::from_secs(10);
            while n < want && last.elapsed() < quiet {
                if s.recv(&mut buf).is_ok() {
                    n += 1;
                    last = Instant::now();
                    quiet = Duration::from_secs(2);
                }
            }
            // Datagrams the kernel delivered to this host but dropped for a full socket
            // buffer: the receiver's loss, not the path's.
            (n, udp_rcvbuf_errors() - overflows_before)
        }
        "udp-send" => {
            let (count, size, pps): (u64, usize, u64) = (
                w[2].parse().unwrap(),
                w[3].parse().unwrap(),
                w[4].parse().unwrap(),
            );
            // An optional source address: one the router's reverse-path filter may refuse.
            let bind: SocketAddr = match w.get(5) {
                Some(src) => format!("{src}:0").parse().unwrap(),
                None if addr.is_ipv4() => "0.0.0.0:0".parse().unwrap(),
                None => "[::]:0".parse().unwrap(),
            };
            let s = UdpSocket::bind(bind).unwrap();
            let buf = vec![0x5au8; size];
            let gap = Duration::from_secs_f64(1.0 / pps as f64);
            let mut due = Instant::now();
            for _ in 0..count {
                // Paced, and never in a burst to catch up after a stall (this machine is
                // shared), so that no socket buffer overflows on either path.
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                s.send_to(&buf, addr).unwrap();
                due = due.max(Instant::now()) + gap;
            }
            (count, count * size as u64)
        }
        other => panic!("unknown job {other}"),
    };
    println!("RESULT {a} {b}");
}

/// Waits for a receiving job to print READY.
fn ready(child: &mut Child) -> std::io::BufReader<std::process::ChildStdout> {
    use std::io::BufRead;
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while out.read_line(&mut line).unwrap() > 0 {
        if line.contains("READY") {
            return out;
        }
        line.clear();
    }
    panic!("traffic child ended before it was ready");
}

/// Reads the rest of a receiving job's output after `ready`: its RESULT.
fn rest_result(
    mut out: std::io::BufReader<std::process::ChildStdout>,
    mut child: Child,
) -> (u64, u64) {
    let mut text = String::new();
    out.read_to_string(&mut text).unwrap();
    child.wait().unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("no result: {text}"));
    let mut f = line.split_whitespace().map(|v| v.parse::<u64>().unwrap());
    (f.next().unwrap(), f.next().unwrap())
}

/// A TCP transfer of `bytes` from `from` to `to_ns` listening on `addr`: (bytes, digest)
/// as sent and as received.
fn tcp_transfer(from: &str, to_ns: &str, addr: &str, bytes: u64) -> ((u64, u64), (u64, u64)) {
    let mut rx = spawn_job(to_ns, &format!("tcp-recv {addr}"));
    let out = ready(&mut rx);
    let tx = spawn_job(from, &format!("tcp-send {addr} {bytes}"));
    let sent = job_result(tx);
    (sent, rest_result(out, rx))
}

/// `count` UDP datagrams of `size` bytes at `pps` from `from` to `addr` in `to_ns`: how many
/// arrived, with those the receiving host dropped for a full socket buffer (a slow receiver
/// on this shared machine, not the path).
fn udp_burst(from: &str, to_ns: &str, addr: &str, count: u64, size: usize, pps: u64) -> u64 {
    udp_burst_from(from, None, to_ns, addr, count, size, pps)
}

/// [`udp_burst`] from the source address `src`, where given.
fn udp_burst_from(
    from: &str,
    src: Option<&str>,
    to_ns: &str,
    addr: &str,
    count: u64,
    size: usize,
    pps: u64,
) -> u64 {
    let mut rx = spawn_job(to_ns, &format!("udp-recv {addr} {count}"));
    let out = ready(&mut rx);
    job_result(spawn_job(
        from,
        &format!("udp-send {addr} {count} {size} {pps} {}", src.unwrap_or("")),
    ));
    let (got, overflowed) = rest_result(out, rx);
    if overflowed > 0 {
        println!("{addr}: {overflowed} datagrams arrived but overflowed the receiving socket");
    }
    got + overflowed
}

/// UdpRcvbufErrors plus Udp6RcvbufErrors in the calling process's network namespace.
fn udp_rcvbuf_errors() -> u64 {
    let snmp = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let (names, values) = (udp.next().unwrap_or(""), udp.next().unwrap_or(""));
    let v4 = names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "RcvbufErrors")
        .and_then(|(_, v)| v.parse::<u64>().ok())
        .unwrap_or(0);
    let v6 = std::fs::read_to_string("/proc/net/snmp6")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Udp6RcvbufErrors"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    v4 + v6
}

/// Pings `dst` from `ns` `count` times: how many answers came back.
fn pings(ns: &str, dst: &str, count: u32) -> u32 {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "ping", "-c", &count.to_string()])
        .args(["-i", "0.01", "-W", "1", "-q", dst])
        .output()
        .expect("ping");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split(',')
        .find_map(|p| p.trim().strip_suffix(" received"))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// What a line delivers end to end: pings v4 and v6, UDP datagrams, and a TCP transfer
/// (bytes, digest received, digest sent).
#[derive(Debug, PartialEq, Eq)]
struct Delivered {
    ping4: u32,
    ping6: u32,
    udp4: u64,
    udp6: u64,
    tcp: (u64, u64, u64),
}

const TCP_BYTES: u64 = 64 << 20;

fn line_traffic(ns: &Namespaces) -> Delivered {
    let (s, k) = (ns.name(0), ns.name(2));
    let ((_, sent_digest), (got, got_digest)) = tcp_transfer(s, k, "198.18.1.2:5001", TCP_BYTES);
    Delivered {
        ping4: pings(s, "198.18.1.2", 20),
        ping6: pings(s, "fd00:b::2", 20),
        udp4: udp_burst(s, k, "198.18.1.2:5002", 2000, 1000, 5_000),
        udp6: udp_burst(s, k, "[fd00:b::2]:5002", 2000, 1000, 5_000),
        tcp: (got, got_digest, sent_digest),
    }
}

/// Linux alone delivers all of `line_traffic` in this lab, or the lab is broken.
fn assert_everything_delivered(linux: &Delivered) {
    assert_eq!(
        *linux,
        Delivered {
            ping4: 20,
            ping6: 20,
            udp4: 2000,
            udp6: 2000,
            tcp: (TCP_BYTES, linux.tcp.2, linux.tcp.2),
        },
        "Linux alone must deliver everything in this lab"
    );
}

/// `line_traffic` with the fast path running in the lab: it must deliver as Linux alone did,
/// and fast-path most of it. The status after it.
fn line_traffic_fast(ns: &Namespaces, fp: &FastPath, linux: &Delivered) -> Status {
    let with_fp = line_traffic(ns);
    let st = fp.fresh_status();
    assert_eq!(
        &with_fp, linux,
        "the fast path delivered otherwise than Linux"
    );
    let (fast, passed) = totals(&st);
    println!("fast-pathed {fast}, passed {passed}: {:?}", st.ports);
    assert!(
        fast > passed,
        "most of the routed traffic should be fast-pathed: {fast} fast-pathed, {passed} passed"
    );
    st
}

#[test]
fn a_line_at_kernel_defaults_delivers_with_the_fast_path_what_it_delivers_without() {
    let ns = plain_line();
    let linux = line_traffic(&ns);
    assert_everything_delivered(&linux);

    let fp = FastPath::start(ns.name(1));
    let s = fp.wait_for("both ports attached", |s| {
        s.ports.len() == 2 && s.ports.iter().all(|p| !p.modules.is_empty())
    });
    // The veth peers run no NAPI: an XDP redirect into them would be dropped, so the router
    // runs at TC, and the status says why.
    for p in &s.ports {
        assert_eq!(p.hook, "tc (ingress)", "{}: {:?}", p.name, p.notes);
        assert!(
            p.notes
                .iter()
                .any(|n| n.contains("router at TC") && n.contains("no NAPI")),
            "{}: {:?}",
            p.name,
            p.notes
        );
    }
    line_traffic_fast(&ns, &fp, &linux);
    fp.stop();
}

/// The far side an overlay (VXLAN, which takes no XDP-redirected frames): the router runs at
/// TC, forwards into the tunnel, and delivers as Linux alone does, with the path MTU the
/// tunnel lowers (1450) found as Linux finds it.
#[test]
fn a_line_into_a_vxlan_overlay_delivers_with_the_fast_path_what_it_delivers_without() {
    let ns = plain_line_over_vxlan();
    let linux = line_traffic(&ns);
    assert_everything_delivered(&linux);
    let fp = FastPath::start(ns.name(1));
    let st = fp.wait_for("the three ports attached", |s| {
        s.ports.len() == 3 && s.ports.iter().all(|p| !p.modules.is_empty())
    });
    for p in &st.ports {
        assert_eq!(p.hook, "tc (ingress)", "{}: {:?}", p.name, p.notes);
    }
    let st = line_traffic_fast(&ns, &fp, &linux);
    let into_tunnel = st
        .ports
        .iter()
        .find(|p| p.name == "d0")
        .map_or(0, |p| p.fast_pathed);
    assert!(into_tunnel > 0, "nothing was routed into the tunnel");
    fp.stop();
}

/// Datagrams larger than the path MTU, which a plain UDP socket's host fragments (4,000 bytes:
/// three fragments each at MTU 1500). Across a plain line the router forwards the fragments
/// as Linux does. A host firewall's conntrack rule on the router's input chain turns on
/// conntrack for every packet, forwarded ones too (it tracks them, and its defrag reassembles
/// every fragment before routing): the fast path then leaves the family to the kernel, which
/// still delivers as Linux does.
#[test]
fn a_line_forwards_fragments_as_linux_does_and_leaves_them_to_conntrack_where_it_reassembles() {
    let ns = plain_line();
    let (s, k) = (ns.name(0), ns.name(2));
    const DATAGRAMS: u64 = 300;
    let fragmented = || {
        (
            udp_burst(s, k, "198.18.1.2:5003", DATAGRAMS, 4000, 2_000),
            udp_burst(s, k, "[fd00:b::2]:5003", DATAGRAMS, 4000, 2_000),
        )
    };
    let linux = fragmented();
    assert_eq!(
        linux,
        (DATAGRAMS, DATAGRAMS),
        "Linux alone must deliver every datagram in this lab"
    );
    let fp = FastPath::start(ns.name(1));
    let st = fp.wait_for("both ports attached", |s| {
        s.ports.len() == 2 && s.ports.iter().all(|p| !p.modules.is_empty())
    });
    let fragments = 2 * 3 * DATAGRAMS;

    let (fast_before, _) = totals(&st);
    assert_eq!(fragmented(), linux, "the fast path delivered otherwise");
    let st = fp.fresh_status();
    let fast = totals(&st).0 - fast_before;
    println!("fast-pathed {fast}: {:?}", st.ports);
    assert_eq!(reason_total(&st, "pass_fragment"), 0, "{:?}", st.ports);
    assert!(
        fast >= fragments,
        "{fast} fast-pathed of {fragments} fragments"
    );

    exec(
        ns.name(1),
        "nft",
        &["add table inet host; add chain inet host in { type filter hook input priority 0; policy accept; }; add rule inet host in ct state established,related accept"],
    );
    let st = fp.wait_for("both families handed to conntrack", |s| {
        s.ports.iter().all(|p| {
            ["router4", "router6"].iter().all(|r| {
                p.notes
                    .iter()
                    .any(|n| n.starts_with(&format!("{r} -> kernel: conntrack")))
            })
        })
    });
    let passed_before = reason_total(&st, "pass_disabled");
    assert_eq!(
        fragmented(),
        linux,
        "with conntrack, the fast path delivered otherwise"
    );
    let passed = reason_total(&fp.fresh_status(), "pass_disabled") - passed_before;
    assert!(
        passed >= fragments,
        "{passed} of {fragments} fragments left to conntrack"
    );
    fp.stop();
}

/// GRO on both outer peers (as a container runtime or `ethtool -K gro on` leaves them) puts
/// the router at XDP, while every offload stays at its default: the senders' TCP and UDP
/// checksums arrive partial, which an XDP redirect would deliver corrupt. The XDP router marks
/// those frames and its TC stage routes them as skbs, so they are fast-pathed, not handed to
/// the kernel (before the TC stage, all of them went to the kernel as `pass_csum_partial`).
#[test]
fn a_line_with_gro_routes_partial_checksums_at_the_tc_stage_behind_xdp() {
    let ns = plain_line();
    let (s, d, k) = (ns.name(0), ns.name(1), ns.name(2));
    exec(s, "ethtool", &["-K", "v0", "gro", "on"]);
    exec(k, "ethtool", &["-K", "s0", "gro", "on"]);
    let linux = line_traffic(&ns);
    assert_everything_delivered(&linux);

    let fp = FastPath::start(d);
    let st = fp.wait_for("both ports at XDP", |s| {
        s.ports.len() == 2
            && s.ports
                .iter()
                .all(|p| p.hook == "xdp (native)" && !p.modules.is_empty())
    });
    for p in &st.ports {
        assert!(
            p.notes.iter().any(|n| n.contains("at TC behind XDP")),
            "{}: no TC stage: {:?}",
            p.name,
            p.notes
        );
    }
    let st = line_traffic_fast(&ns, &fp, &linux);
    assert_eq!(
        reason_total(&st, "pass_csum_partial"),
        0,
        "partial checksums went to the kernel"
    );
    fp.stop();
}

/// Debian, like every distribution with systemd's sysctl.d/50-default.conf, sets
/// `net.ipv4.conf.default.rp_filter = 2`, and a namespace made afterwards inherits it on every
/// interface. The fast path keeps routing IPv4 there (it used to hand all of it to the kernel)
/// and refuses what Linux refuses: a source with no route back (both modes), and one routed
/// back out the other port (strict only).
#[test]
fn a_line_with_debians_rp_filter_routes_fast_and_refuses_the_sources_linux_refuses() {
    for mode in ["2", "1"] {
        let ns = plain_line();
        let (s, d, k) = (ns.name(0), ns.name(1), ns.name(2));
        for dev in ["d0", "d1"] {
            exec(
                d,
                "sysctl",
                &["-qw", &format!("net.ipv4.conf.{dev}.rp_filter={mode}")],
            );
        }
        // Sources the sender may use: one in the far subnet (routed back out d1), one the
        // DUT has no route to.
        let (far, unrouted) = ("198.18.1.77", "198.19.200.1");
        for a in [far, unrouted] {
            exec(s, "ip", &["addr", "add", &format!("{a}/32"), "dev", "v0"]);
        }
        let traffic = |ns: &Namespaces| {
            let spoofed = |src| udp_burst_from(s, Some(src), k, "198.18.1.2:5003", 200, 200, 2_000);
            (line_traffic(ns), spoofed(far), spoofed(unrouted))
        };
        let linux = traffic(&ns);
        let far_expected = if mode == "2" { 200 } else { 0 };
        assert_eq!(
            (linux.1, linux.2),
            (far_expected, 0),
            "rp_filter {mode}: Linux alone"
        );
        assert_eq!(linux.0.ping4, 20, "rp_filter {mode}: Linux alone routes");

        let fp = FastPath::start(d);
        let st = fp.wait_for("both ports attached", |s| {
            s.ports.len() == 2 && s.ports.iter().all(|p| !p.modules.is_empty())
        });
        for p in &st.ports {
            assert!(
                p.modules.iter().any(|m| m == "router4"),
                "rp_filter {mode}: {} must keep the IPv4 router: {:?} {:?}",
                p.name,
                p.modules,
                p.notes
            );
        }
        let with_fp = traffic(&ns);
        let st = fp.fresh_status();
        assert_eq!(
            with_fp, linux,
            "rp_filter {mode}: the fast path delivered otherwise than Linux"
        );
        let (fast, passed) = totals(&st);
        let refused: u64 = reason_total(&st, "pass_rp_filter");
        println!("rp_filter {mode}: fast-pathed {fast}, passed {passed}, of them pass_rp_filter {refused}");
        assert!(
            fast > passed,
            "rp_filter {mode}: {fast} fast-pathed, {passed} passed"
        );
        assert!(
            refused >= 400,
            "rp_filter {mode}: the 400 spoofed datagrams go to the kernel as pass_rp_filter, got {refused}"
        );
        fp.stop();
    }
}

/// A router drops a packet to be forwarded whose source is one of its own addresses (a
/// martian source, `fib_validate_source`), with rp_filter off too. The fast path's FIB lookup
/// is on the destination, so it keeps the namespace's addresses to see it: before, it
/// forwarded all 200 such datagrams that Linux dropped.
#[test]
fn a_line_refuses_sources_that_are_the_routers_own_addresses_like_linux() {
    let ns = plain_line();
    let (s, d, k) = (ns.name(0), ns.name(1), ns.name(2));
    let ours = "198.18.1.1"; // the DUT's address on d1
    exec(
        s,
        "ip",
        &["addr", "add", &format!("{ours}/32"), "dev", "v0"],
    );
    // The sender's ARP for its gateway would carry that source too, and the DUT ignores an
    // ARP request from its own address: the gateway's MAC is set by hand.
    let d0_mac = String::from_utf8_lossy(&exec(d, "cat", &["/sys/class/net/d0/address"]).stdout)
        .trim()
        .to_string();
    exec(
        s,
        "ip",
        &[
            "neigh",
            "replace",
            "198.18.0.2",
            "lladdr",
            &d0_mac,
            "dev",
            "v0",
            "nud",
            "permanent",
        ],
    );
    // Pings first: they resolve the DUT's neighbour for the sink, so that the datagrams
    // after them would be forwarded if their source were not checked.
    let traffic = || {
        (
            pings(s, "198.18.1.2", 20),
            udp_burst_from(s, Some(ours), k, "198.18.1.2:5003", 200, 200, 2_000),
        )
    };
    let linux = traffic();
    assert_eq!(linux, (20, 0), "Linux alone");
    let fp = FastPath::start(d);
    fp.wait_for("both ports attached", |s| {
        s.ports.len() == 2 && s.ports.iter().all(|p| !p.modules.is_empty())
    });
    let with_fp = traffic();
    let st = fp.fresh_status();
    assert_eq!(
        with_fp, linux,
        "the fast path delivered otherwise than Linux"
    );
    let martians: u64 = reason_total(&st, "pass_martian");
    let (fast, _) = totals(&st);
    println!("fast-pathed {fast}, pass_martian {martians}");
    assert!(fast >= 20, "the pings are fast-pathed: {fast}");
    assert!(
        martians >= 200,
        "the 200 datagrams go to the kernel: {martians}"
    );
    fp.stop();
}

/// Streams UDP through a fresh line while both peers' GRO is switched on and off twice:
/// (datagrams that arrived, sent), and the hooks the fast path (if running) moved to.
fn stream_across_gro_toggles(with_fp: bool) -> (u64, u64, Vec<&'static str>) {
    let ns = plain_line();
    let (s, d, k) = (ns.name(0), ns.name(1), ns.name(2));
    let fp = with_fp.then(|| FastPath::start(d));
    if let Some(fp) = &fp {
        fp.wait_for("routing at TC", |s| {
            s.ports.len() == 2 && s.ports.iter().all(|p| p.hook == "tc (ingress)")
        });
    }
    // A steady stream across all the switches: 4 s at 5,000 datagrams/s.
    let (count, pps) = (20_000u64, 5_000u64);
    let mut rx = spawn_job(k, &format!("udp-recv 198.18.1.2:5003 {count}"));
    let out = ready(&mut rx);
    let tx = spawn_job(s, &format!("udp-send 198.18.1.2:5003 {count} 200 {pps}"));
    let mut hooks = Vec::new();
    for (gro, want) in [
        ("on", "xdp (native)"),
        ("off", "tc (ingress)"),
        ("on", "xdp (native)"),
        ("off", "tc (ingress)"),
    ] {
        std::thread::sleep(Duration::from_millis(500));
        // Both peers: either direction's egress decides the hook.
        exec(s, "ethtool", &["-K", "v0", "gro", gro]);
        exec(k, "ethtool", &["-K", "s0", "gro", gro]);
        if let Some(fp) = &fp {
            fp.wait_for(want, |s| s.ports.iter().all(|p| p.hook == want));
            hooks.push(want);
        }
    }
    job_result(tx);
    let (got, overflowed) = rest_result(out, rx);
    println!("{got} arrived, {overflowed} more overflowed the receiving socket");
    let got = got + overflowed;
    if let Some(fp) = fp {
        fp.stop();
    }
    (got, count, hooks)
}

#[test]
fn the_hook_follows_a_peers_gro_and_loses_no_more_than_linux() {
    let (linux, count, _) = stream_across_gro_toggles(false);
    let (fast, _, hooks) = stream_across_gro_toggles(true);
    println!(
        "of {count} datagrams: Linux alone {linux}, with the fast path {fast} (hooks {hooks:?})"
    );
    assert_eq!(
        fast, linux,
        "the fast path lost datagrams while its hook switched"
    );
}

/// The plain bridge's traffic (TCP, pings, UDP) with and without the fast path: it must
/// deliver as Linux alone does and fast-path most of it. `xdp`: GRO on at the outer peers and
/// `--bridge-hook xdp`, so the ports run at XDP, where the senders' partial checksums go to the
/// TC stage.
fn bridge_delivers_as_linux(xdp: bool) {
    let ns = plain_bridge();
    let (a, d, b) = (ns.name(0), ns.name(1), ns.name(2));
    if xdp {
        exec(a, "ethtool", &["-K", "v0", "gro", "on"]);
        exec(b, "ethtool", &["-K", "v1", "gro", "on"]);
    }
    let traffic = || {
        let ((_, sent), (got, digest)) = tcp_transfer(a, b, "198.18.2.2:5001", TCP_BYTES);
        (
            pings(a, "198.18.2.2", 20),
            udp_burst(a, b, "198.18.2.2:5002", 2000, 1000, 20_000),
            got,
            digest == sent,
        )
    };
    let linux = traffic();
    assert_eq!(linux, (20, 2000, TCP_BYTES, true), "Linux alone");
    let fp = if xdp {
        FastPath::start_with(d, &["--bridge-hook", "xdp"])
    } else {
        FastPath::start(d)
    };
    let st = fp.wait_for("both bridge ports attached", |s| {
        s.ports.len() == 2 && s.ports.iter().all(|p| p.modules == ["bridge"])
    });
    if xdp {
        for p in &st.ports {
            assert!(
                p.hook.starts_with("xdp") && p.notes.iter().any(|n| n.contains("behind XDP")),
                "{}: {} {:?}",
                p.name,
                p.hook,
                p.notes
            );
        }
    }
    let with_fp = traffic();
    let st = fp.fresh_status();
    assert_eq!(
        with_fp, linux,
        "the fast path delivered otherwise than Linux"
    );
    let (fast, passed) = totals(&st);
    println!("fast-pathed {fast}, passed {passed}: {:?}", st.ports);
    assert!(fast > passed, "{fast} fast-pathed, {passed} passed");
    assert_eq!(
        reason_total(&st, "pass_csum_partial"),
        0,
        "partial checksums went to the kernel"
    );
    // The TCP transfer's sender has TSO on (a veth's default): at TC its bytes arrive as
    // about a thousand super-frames, which the kernel's bridge forwards whatever their size,
    // and so must the fast path. What is left to the kernel is a few frames: ARP, and what
    // came before the bridge had learned both stations.
    assert!(
        reason_total(&st, "pass_bridge") < 100,
        "{} frames went to the kernel's bridge: {:?}",
        reason_total(&st, "pass_bridge"),
        st.ports
    );
    fp.stop();
}

#[test]
fn a_bridge_at_kernel_defaults_delivers_with_the_fast_path_what_it_delivers_without() {
    bridge_delivers_as_linux(false);
}

#[test]
fn a_bridge_forced_to_xdp_forwards_partial_checksums_at_the_tc_stage() {
    bridge_delivers_as_linux(true);
}

// --- a bridge of VM taps -----------------------------------------------------------------------

use wirespeed_sys::tap::{GuestOffloads, Tap, VnetHeader};
use wirespeed_testkit::frame::{self, L4};

const VM_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const VM_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

/// An IPv4 frame from VM A to VM B (198.18.2.1 -> 198.18.2.2) carrying `l4` (UDP or TCP).
/// `partial`: the checksum field gets the pseudo-header sum and the header asks the device to
/// finish it, as a guest with checksum offload sends; otherwise the checksum is complete.
/// `gso_size`: a TCP super-frame to be cut into segments of that size.
fn vm_frame(l4: L4, partial: bool, gso_size: u16) -> (VnetHeader, Vec<u8>) {
    let (src, dst) = ([198, 18, 2, 1], [198, 18, 2, 2]);
    let mut f = frame::frame(VM_B, VM_A, src.into(), dst.into(), &l4);
    let mut hdr = VnetHeader::default();
    if partial || gso_size > 0 {
        let (csum_start, csum_offset) = frame::make_l4_checksum_partial_v4(&mut f);
        hdr.flags = VnetHeader::NEEDS_CSUM;
        hdr.csum_start = csum_start;
        hdr.csum_offset = csum_offset;
    }
    if gso_size > 0 {
        hdr.gso_type = VnetHeader::GSO_TCPV4;
        hdr.gso_size = gso_size;
        hdr.hdr_len = 54;
    }
    (hdr, f)
}

fn udp(seq: u32, len: usize) -> L4 {
    let mut payload = vec![0u8; len];
    Pattern(seq as u64 + 1).fill(&mut payload);
    payload[..4].copy_from_slice(&seq.to_be_bytes());
    L4::Udp {
        sport: 40000,
        dport: 5003,
        payload,
    }
}

fn tcp(seq: u32, len: usize) -> L4 {
    let mut payload = vec![0u8; len];
    Pattern(seq as u64 + 7).fill(&mut payload);
    L4::Tcp(frame::Tcp {
        sport: 40001,
        dport: 5004,
        flags: frame::PSH | frame::ACK,
        seq: seq.wrapping_mul(100_000),
        ack: 0,
        window: 64240,
        options: vec![],
        payload,
    })
}

/// What VM A sends in one run: UDP with complete and with partial checksums, TCP segments
/// with partial checksums, and TCP super-frames (GSO) as a guest with TSO hands them over.
fn vm_traffic() -> Vec<(VnetHeader, Vec<u8>)> {
    (0..240u32)
        .map(|i| match i % 4 {
            0 => vm_frame(udp(i, 18 + (i as usize * 37) % 1400), false, 0),
            1 => vm_frame(udp(i, 18 + (i as usize * 53) % 1400), true, 0),
            2 => vm_frame(tcp(i, 1 + (i as usize * 29) % 1400), true, 0),
            _ => vm_frame(tcp(i, 3000 + (i as usize * 101) % 20_000), true, 1448),
        })
        .collect()
}

/// Everything VM B's tap hands over from VM A until it is quiet for 300 ms.
fn vm_b_receives(b: &Tap) -> Vec<(VnetHeader, Vec<u8>)> {
    let mut got = vec![];
    while let Some((h, f)) = b.recv(Duration::from_millis(300)).expect("tap read") {
        if f.len() >= 14 && f[6..12] == VM_A {
            got.push((h, f));
        }
    }
    got
}

/// A received frame as the guest reads it: a GSO frame's `hdr_len` is what the kernel's skb
/// happened to hold in its linear part (`skb_headlen`), a hint that depends on how the skb
/// was built on the way, not on the frame, so it is left out.
fn as_guest_sees(f: &(VnetHeader, Vec<u8>)) -> (VnetHeader, &[u8]) {
    let mut h = f.0;
    if h.gso_type != 0 {
        h.hdr_len = 0;
    }
    (h, &f.1)
}

/// A bridge of two VM taps, as libvirt's default network and most VM hosts make one; the two
/// "guests" are this test, holding the taps' file descriptors as a VMM does, with virtio-net
/// checksum and TSO offloads on. Returns the namespace and the taps of VM A and VM B.
fn vm_bridge() -> (Namespaces, Tap, Tap) {
    require_root();
    let ns = Namespaces::new("v", &["d"]);
    let d = ns.name(0).to_string();
    exec(&d, "ip", &["link", "add", "br0", "type", "bridge"]);
    let offloads = GuestOffloads {
        csum: true,
        tso: true,
    };
    let taps: Vec<Tap> = ["vm0", "vm1"]
        .iter()
        .map(|name| {
            let name = name.to_string();
            wirespeed_sys::netns::in_netns(&d, move || Tap::create(&name, offloads))
                .expect("setns")
                .expect("create tap")
        })
        .collect();
    for t in &taps {
        exec(&d, "ip", &["link", "set", t.name(), "master", "br0"]);
        exec(&d, "ip", &["link", "set", t.name(), "up"]);
    }
    exec(&d, "ip", &["link", "set", "br0", "up"]);
    let deadline = Instant::now() + Duration::from_secs(40);
    while String::from_utf8_lossy(&exec(&d, "bridge", &["link", "show"]).stdout)
        .lines()
        .filter(|l| l.contains("state forwarding"))
        .count()
        < 2
    {
        assert!(Instant::now() < deadline, "bridge ports never forwarding");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut taps = taps.into_iter();
    let (a, b) = (taps.next().unwrap(), taps.next().unwrap());
    (ns, a, b)
}

/// One run of VM A's traffic to VM B, after each guest has sent a frame the bridge learns
/// its MAC from.
fn vm_run(a: &Tap, b: &Tap) -> Vec<(VnetHeader, Vec<u8>)> {
    let (_, mut hello) = vm_frame(udp(u32::MAX, 32), false, 0);
    hello[0..6].copy_from_slice(&VM_A);
    hello[6..12].copy_from_slice(&VM_B);
    b.send(VnetHeader::default(), &hello).expect("VM B sends");
    let (h, f) = vm_frame(udp(u32::MAX - 1, 32), false, 0);
    a.send(h, &f).expect("VM A sends");
    while a
        .recv(Duration::from_millis(100))
        .expect("tap read")
        .is_some()
    {}
    vm_b_receives(b);
    for (h, f) in vm_traffic() {
        a.send(h, &f).expect("VM A sends");
    }
    vm_b_receives(b)
}

/// VM A's traffic to VM B through the bridge, without and then with the fast path (`fp run`
/// with `args`): VM B must get the same frames, headers and all. Returns each port's hook
/// and status notes.
fn vm_bridge_delivers_as_linux(args: &[&str]) -> Vec<(String, String, Vec<String>)> {
    let (ns, a, b) = vm_bridge();
    let d = ns.name(0);
    let sent = vm_traffic();
    let linux = vm_run(&a, &b);
    assert_eq!(
        linux.len(),
        sent.len(),
        "Linux alone delivered {} of {}",
        linux.len(),
        sent.len()
    );
    let fp = FastPath::start_with(d, args);
    let st = fp.wait_for("both taps attached", |s| {
        s.ports.len() == 2 && s.ports.iter().all(|p| p.modules == ["bridge"])
    });
    let hooks = st
        .ports
        .iter()
        .map(|p| (p.name.clone(), p.hook.clone(), p.notes.clone()))
        .collect();
    let with_fp = vm_run(&a, &b);
    let st = fp.fresh_status();
    let (fast, passed) = totals(&st);
    println!("fast-pathed {fast}, passed {passed}: {:?}", st.ports);
    assert_eq!(
        with_fp.len(),
        linux.len(),
        "frames VM B got with the fast path"
    );
    for (i, (x, y)) in with_fp.iter().zip(&linux).enumerate() {
        assert_eq!(
            as_guest_sees(x),
            as_guest_sees(y),
            "frame {i} (kind {}): header {:?} against Linux's {:?}, {} against {} bytes, first \
             differing byte {:?}",
            i % 4,
            x.0,
            y.0,
            x.1.len(),
            y.1.len(),
            x.1.iter().zip(&y.1).position(|(p, q)| p != q)
        );
    }
    assert!(fast > passed, "{fast} fast-pathed, {passed} passed");
    assert_eq!(
        reason_total(&st, "pass_csum_partial"),
        0,
        "partial checksums went to the kernel"
    );
    if st.ports.iter().all(|p| p.hook.starts_with("tc")) {
        // At TC the super-frames are skbs, which the kernel's bridge forwards whatever their
        // size: so does the fast path. (At XDP the kernel hands a tap's GSO frame to the
        // program as an skb, generic XDP, whose redirect refuses frames over the MTU: those
        // go to the kernel.)
        assert_eq!(
            reason_total(&st, "pass_bridge"),
            0,
            "TSO super-frames went to the kernel"
        );
    }
    fp.stop();
    hooks
}

/// Where the daemon puts a bridge of taps: at TC, where a guest's TSO super-frames are
/// forwarded as they are.
#[test]
fn a_bridge_of_vm_taps_runs_at_tc_and_forwards_their_tso_super_frames() {
    let hooks = vm_bridge_delivers_as_linux(&[]);
    for (name, hook, notes) in hooks {
        assert!(
            hook.starts_with("tc") && notes.iter().any(|n| n.contains("is a tap")),
            "{name}: {hook} {notes:?}"
        );
    }
}

/// At XDP (a tap takes XDP-redirected frames, so `--bridge-hook xdp` can put it there) the
/// guest's partial checksums go to the TC stage, and its super-frames to the kernel.
#[test]
fn a_bridge_of_vm_taps_forced_to_xdp_delivers_what_linux_delivers() {
    for (name, hook, notes) in vm_bridge_delivers_as_linux(&["--bridge-hook", "xdp"]) {
        assert!(
            hook.starts_with("xdp") && notes.iter().any(|n| n.contains("behind XDP")),
            "{name}: {hook} {notes:?}"
        );
    }
}
