//! A new user's topologies: network namespaces and veths made with plain `ip` commands, every
//! device feature left as the kernel sets it (no ethtool, nothing from `crates/lab`), and the
//! product run on them as a user would run it.
//!
//! A default veth has TX checksum offload and TSO on, so its peer's TCP/UDP segments arrive
//! with partial checksums (see docs/TCPIP.md): our own labs turn that off, these tests do not.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const MIB: usize = 1024 * 1024;

/// Runs `ip ARGS`, panicking with its stderr when it fails.
fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// A network namespace made with `ip netns add`, deleted (with its devices) on drop.
pub struct PlainNs {
    pub name: String,
}

impl PlainNs {
    pub fn add(name: String) -> PlainNs {
        assert_eq!(
            // SAFETY: geteuid has no preconditions.
            unsafe { libc::geteuid() },
            0,
            "plain topology tests need root (they run as root in CI)"
        );
        // A namespace left by a killed earlier run with our pid would make `add` fail.
        let _ = Command::new("ip")
            .args(["netns", "del", &name])
            .stderr(Stdio::null())
            .status();
        ip(&["netns", "add", &name]);
        let ns = PlainNs { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        ns
    }

    /// `program` to be run inside the namespace (`ip netns exec`, which execs it: the child's
    /// pid is the program's).
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Runs `program ARGS` in the namespace; its stdout, or its stderr as the error.
    pub fn exec(&self, program: &str, args: &[&str]) -> Result<String, String> {
        let out = self
            .command(program)
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "{program} {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// Runs `f` on a thread that has entered the namespace (sockets it opens live there).
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/var/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let ns = std::fs::File::open(&path).expect("open the namespace");
            // SAFETY: setns on a valid namespace fd; it moves only this thread.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .expect("thread in the namespace panicked")
    }
}

impl Drop for PlainNs {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Two namespaces joined by one veth, addressed and brought up with `ip` only:
/// `peer` (device `a0`, PEER_IP) <-> `ours` (device `b0`, KERNEL_IP; the product takes it over).
pub struct PlainPair {
    pub peer: PlainNs,
    pub ours: PlainNs,
}

impl PlainPair {
    pub const PEER_DEV: &'static str = "a0";
    pub const OUR_DEV: &'static str = "b0";

    /// Namespaces `ws-<tag>p-<pid>` and `ws-<tag>o-<pid>`; `peer_cidr` on a0, `our_cidr` on b0.
    pub fn new(tag: &str, peer_cidr: &str, our_cidr: &str) -> PlainPair {
        let pid = std::process::id();
        let peer = PlainNs::add(format!("ws-{tag}p-{pid}"));
        let ours = PlainNs::add(format!("ws-{tag}o-{pid}"));
        ip(&[
            "link",
            "add",
            Self::PEER_DEV,
            "netns",
            &peer.name,
            "type",
            "veth",
            "peer",
            "name",
            Self::OUR_DEV,
            "netns",
            &ours.name,
        ]);
        for (ns, dev, cidr) in [
            (&peer, Self::PEER_DEV, peer_cidr),
            (&ours, Self::OUR_DEV, our_cidr),
        ] {
            ip(&["-n", &ns.name, "addr", "add", cidr, "dev", dev]);
            ip(&["-n", &ns.name, "link", "set", dev, "up"]);
        }
        PlainPair { peer, ours }
    }
}

/// `wirespeed ARGS` in a namespace, started once it says it is listening; SIGINT on drop.
/// Its stderr is kept (and echoed) so a test can read the exit summary.
struct Wirespeed {
    child: Child,
    stderr: Arc<Mutex<String>>,
    copier: Option<std::thread::JoinHandle<()>>,
}

impl Wirespeed {
    fn start(ns: &PlainNs, args: &[&str]) -> Wirespeed {
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
        while !seen.contains("listening on") {
            line.clear();
            if err.read_line(&mut line).unwrap() == 0 {
                let _ = child.wait();
                panic!("wirespeed {} did not start:\n{seen}", args.join(" "));
            }
            eprint!("{line}");
            seen.push_str(&line);
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
        Wirespeed {
            child,
            stderr,
            copier: Some(copier),
        }
    }

    /// Stops it (SIGINT) and returns everything it wrote to stderr.
    fn stop(mut self) -> String {
        self.interrupt();
        self.stderr.lock().unwrap().clone()
    }

    fn interrupt(&mut self) {
        // SAFETY: signals our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
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
    let _ = r.shutdown(Shutdown::Both);
    let written = writer.join().unwrap();
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

const PEER_IP: &str = "198.18.61.1";
const OUR_IP: &str = "198.18.61.2";

/// `wirespeed serve APP --stack xdp` on `iface` in `ns`, taking `ip`/24, port 8080.
fn serve_xdp(ns: &PlainNs, iface: &str, ip: &str, app: &str) -> Wirespeed {
    let cidr = format!("{ip}/24");
    let listen = format!("{ip}:8080");
    Wirespeed::start(
        ns,
        &[
            "serve", app, "--stack", "xdp", "--iface", iface, "--cpus", "1", "--ip", &cidr,
            "--listen", &listen,
        ],
    )
}

/// `n` curls from `ns` to our plaintext endpoint at `ip`, each of which must answer.
fn curl_plaintext(ns: &PlainNs, ip: &str, n: usize) {
    let url = format!("http://{ip}:8080/plaintext");
    for i in 0..n {
        let out = ns.exec("curl", &["-sS", "--connect-timeout", "5", "-m", "10", &url]);
        assert_eq!(
            out.as_deref(),
            Ok("Hello, World!"),
            "curl {i} of {n} to {url}"
        );
    }
}

/// The serve log shows partial checksums taken, none refused, and no drop explained.
fn assert_partials_taken(log: &str) {
    assert!(
        counter(log, "partial checksums taken ") > 0,
        "no partial checksum seen: are the veth's offloads still at their default?\n{log}"
    );
    assert_eq!(counter(log, "(partial "), 0, "{log}");
    assert!(!log.contains("dropping"), "{log}");
}

/// The user's case of issue 15: a peer with default offloads talks to the bypass server.
/// Before partial checksums were taken on a veth, no handshake ever completed here.
#[test]
fn bypass_server_answers_a_peer_with_default_offloads() {
    let pair = PlainPair::new(
        "bx",
        &format!("{PEER_IP}/24"),
        "198.18.61.3/24", // the kernel's own address on b0
    );

    let srv = serve_xdp(&pair.ours, PlainPair::OUR_DEV, OUR_IP, "http");
    curl_plaintext(&pair.peer, OUR_IP, 10);
    // The kernel keeps its own address on the interface.
    pair.peer
        .exec("ping", &["-c", "2", "-i", "0.2", "-W", "2", "198.18.61.3"])
        .expect("the kernel's address on b0 is unreachable");
    // The frames really carried partial checksums (else this test would not cover the case),
    // none was refused, and no drop was explained to the user.
    assert_partials_taken(&srv.stop());

    // 16 MiB each way through our echo server, checked byte for byte.
    let srv = serve_xdp(&pair.ours, PlainPair::OUR_DEV, OUR_IP, "echo");
    let addr = format!("{OUR_IP}:8080");
    let echoed = pair
        .peer
        .run(move || echo_checked(&addr, 0x5eed_0015, 16 * MIB));
    let log = srv.stop();
    echoed.unwrap_or_else(|e| panic!("16 MiB echo from a peer with default offloads: {e}\n{log}"));
    assert_partials_taken(&log);
}

/// A macvlan over the veth (the software device a container often gets) passes the peer's
/// partial checksums on too (XDP runs in generic mode there): requests are served the same way.
/// But the veth under it runs no XDP, so the kernel leaves the peer's TSO on and a bulk
/// sender's 64 KiB segments reach our AF_XDP socket whole, longer than its buffers: the
/// kernel drops them, and serve must say so once, with the fix.
#[test]
fn bypass_server_on_a_macvlan_over_a_default_veth() {
    let pair = PlainPair::new("mv", "198.18.62.1/24", "198.18.62.3/24");
    ip(&[
        "-n",
        &pair.ours.name,
        "link",
        "add",
        "mv0",
        "link",
        PlainPair::OUR_DEV,
        "type",
        "macvlan",
        "mode",
        "bridge",
    ]);
    ip(&["-n", &pair.ours.name, "link", "set", "mv0", "up"]);
    let srv = serve_xdp(&pair.ours, "mv0", "198.18.62.2", "echo");
    // Small exchanges: served, their partial checksums taken.
    let echoed = pair.peer.run(|| echo_checked("198.18.62.2:8080", 7, 1000));
    echoed.expect("a 1000-byte echo through the macvlan");
    // A bulk sender: segments above the MTU, lost before our stack; told once.
    pair.peer.run(|| {
        let mut s = TcpStream::connect("198.18.62.2:8080").unwrap();
        s.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
        let chunk = vec![0x55u8; 256 * 1024];
        for _ in 0..16 {
            if s.write_all(&chunk).is_err() {
                break;
            }
        }
    });
    let told = "dropping frames longer than";
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !srv.stderr.lock().unwrap().contains(told) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = srv.stop();
    assert_eq!(log.matches(told).count(), 1, "{log}");
    assert!(log.contains("ethtool -K PEER tso off gso off"), "{log}");
    assert!(counter(&log, "partial checksums taken ") > 0, "{log}");
    assert_eq!(counter(&log, "(partial "), 0, "{log}");
}
