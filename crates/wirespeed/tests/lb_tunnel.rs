//! Tunnel mode end to end, on a kernel that may have no ipip/sit/fou (this lab's): a client,
//! the load balancer (`wirespeed lb run`, tunnel-mode services for a v4 VIP and a v6 VIP to the
//! real's v4 address and to its v6 address: IPIP, 6in4, 4in6, IP6IP6; and the same four over
//! GUE) and a real running `wirespeed lb decap`, in three lab namespaces joined by veths and
//! set up with plain `ip` commands. The real holds the VIPs on lo and answers the client
//! directly, through the load balancer's kernel as a router. Also `lb doctor --real`: before
//! the decapsulator runs it names `wirespeed lb decap` as the fix (when the kernel lacks the
//! module), and with it running it finds nothing.
//!
//! Needs root; run under the lab lock:
//! `flock /tmp/ws-priv.lock cargo test --profile ci -p wirespeed --test lb_tunnel -- --test-threads=1`

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use wirespeed_lab::netns::{add_addr, Veth};
use wirespeed_lab::Netns;

const BIN: &str = env!("CARGO_BIN_EXE_wirespeed");
const VIP4: &str = "198.18.100.1";
const VIP6: &str = "fd00:100::1";
/// Services on PORT go to the v4 real (IPIP, 6in4), on PORT6 to the v6 real (4in6, IP6IP6).
const PORT: u16 = 7000;
const PORT6: u16 = 7001;

/// A child process, killed on drop if it is still running (a failing test leaves none).
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The daemon's socket directory, removed however the test ends.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Proc {
    /// SIGTERM, then its exit status and the rest of its stdout.
    fn stop(mut self) -> (std::process::ExitStatus, String) {
        let pid = self.0.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        let mut rest = String::new();
        if let Some(mut out) = self.0.stdout.take() {
            out.read_to_string(&mut rest).unwrap();
        }
        (self.0.wait().unwrap(), rest)
    }
}

fn wirespeed(ns: &Netns, args: &[&str], socket: &std::path::Path) -> Output {
    Command::new("ip")
        .args(["netns", "exec", ns.name(), BIN])
        .args(args)
        .env("WIRESPEED_LB_SOCKET", socket)
        .output()
        .unwrap()
}

/// `wirespeed lb doctor --real ... --mode tunnel --netns REAL [extra]`, run from the host as a
/// user would: (exit code, stdout).
fn doctor(real: &Netns, extra: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(BIN)
        .args([
            "lb",
            "doctor",
            "--real",
            &format!("{VIP4},{VIP6}"),
            "--mode",
            "tunnel",
            "--netns",
            real.name(),
        ])
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Accepts one connection on `listener` and echoes what it reads, up to `n` bytes.
fn echo_once(listener: TcpListener, n: usize) -> std::thread::JoinHandle<SocketAddr> {
    std::thread::spawn(move || {
        let (mut s, peer) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = vec![0u8; n];
        s.read_exact(&mut buf).unwrap();
        s.write_all(&buf).unwrap();
        peer
    })
}

/// Client, load balancer and real namespaces (names from `tag`), addressed and routed, the
/// VIPs on the real's lo; the real advertises `advmss` (v4, v6) on its default routes.
struct Topo {
    client: Netns,
    lb: Netns,
    real: Netns,
    _links: [Veth; 2],
}

impl Topo {
    fn build(tag: char, advmss: (&str, &str)) -> Topo {
        wirespeed_lab::require_root();
        let id = std::process::id() % 100000;
        let client = Netns::create(&format!("ws-{tag}c{id}")).unwrap();
        let lb = Netns::create(&format!("ws-{tag}l{id}")).unwrap();
        let real = Netns::create(&format!("ws-{tag}r{id}")).unwrap();
        let v1 = Veth::create(&lb, "in0", &client, "c0", 1).unwrap();
        let v2 = Veth::create(&lb, "out0", &real, "r0", 1).unwrap();
        for (ns, dev, a) in [
            (&client, "c0", "198.18.1.2/24"),
            (&client, "c0", "fd00:1::2/64"),
            (&lb, "in0", "198.18.1.1/24"),
            (&lb, "in0", "fd00:1::1/64"),
            (&lb, "out0", "198.18.2.1/24"),
            (&lb, "out0", "fd00:2::1/64"),
            (&real, "r0", "198.18.2.10/24"),
            (&real, "r0", "fd00:2::10/64"),
            (&real, "lo", &format!("{VIP4}/32")),
            (&real, "lo", &format!("{VIP6}/128")),
        ] {
            add_addr(ns, dev, a).unwrap();
        }
        client
            .ip(&["route", "add", "default", "via", "198.18.1.1"])
            .unwrap();
        client
            .ip(&["-6", "route", "add", "default", "via", "fd00:1::1"])
            .unwrap();
        // The real answers the client directly, by its default routes through the load
        // balancer; their advmss leaves room for the outer headers, as doctor asks (IPv6: it
        // assumes 6in6 on a real with a global IPv6 address).
        for (fam, gw, mss) in [
            ("-4", "198.18.2.1", advmss.0),
            ("-6", "fd00:2::1", advmss.1),
        ] {
            real.ip(&[
                fam, "route", "add", "default", "via", gw, "dev", "r0", "advmss", mss,
            ])
            .unwrap();
        }
        for key in [
            "net.ipv4.conf.all.rp_filter",
            "net.ipv4.conf.lo.rp_filter",
            "net.ipv4.conf.r0.rp_filter",
        ] {
            real.sysctl(key, "0").unwrap();
        }
        // The load balancer's kernel forwards the replies (and the program's FIB lookups
        // need forwarding on).
        lb.sysctl("net.ipv4.ip_forward", "1").unwrap();
        lb.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
        // The veth peers run NAPI, so they take the program's redirects and XDP_TX.
        client.exec("ethtool", &["-K", "c0", "gro", "on"]).unwrap();
        real.exec("ethtool", &["-K", "r0", "gro", "on"]).unwrap();
        Topo {
            client,
            lb,
            real,
            _links: [v1, v2],
        }
    }

    /// `wirespeed lb run` on the load balancer with `commands` applied, the reals'
    /// neighbours resolved: the daemon, its socket and the socket's directory.
    fn start_lb(&self, commands: &[String]) -> (Proc, PathBuf, TempDir) {
        let dir = TempDir(PathBuf::from(format!(
            "/tmp/ws-lbtun-{}",
            std::process::id()
        )));
        let socket = dir.0.join("lb.sock");
        let daemon = Proc(
            Command::new("ip")
                .args(["netns", "exec", self.lb.name(), BIN])
                .args(["lb", "run", "--iface", "in0", "--iface", "out0"])
                .args(["--ring-size", "251", "--drain", "0", "--socket"])
                .arg(&socket)
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while !socket.exists() {
            assert!(
                Instant::now() < deadline,
                "the daemon never opened its socket"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        for cmd in commands {
            let mut args = vec!["lb"];
            args.extend(cmd.split(' '));
            let out = wirespeed(&self.lb, &args, &socket);
            assert!(
                out.status.success(),
                "{cmd}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // The real's neighbour resolved before the first SYN (the daemon also keeps it so).
        self.lb
            .exec("ping", &["-c", "1", "-W", "2", "198.18.2.10"])
            .unwrap();
        self.lb
            .exec("ping", &["-c", "1", "-W", "2", "fd00:2::10"])
            .unwrap();
        (daemon, socket, dir)
    }

    /// The decapsulator on the real, as doctor's fix says (with `extra` options), with
    /// --json for its counters; returns once it has attached, natively, to r0.
    fn start_decap(&self, extra: &[&str]) -> Proc {
        let mut decap = Proc(
            Command::new("ip")
                .args(["netns", "exec", self.real.name(), BIN])
                .args(["lb", "decap", "--iface", "r0", "--vip"])
                .arg(format!("{VIP4},{VIP6}"))
                .args(extra)
                .arg("--json")
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
        );
        let mut first = String::new();
        BufReader::new(decap.0.stdout.as_mut().unwrap())
            .read_line(&mut first)
            .unwrap();
        let attached: serde_json::Value = serde_json::from_str(&first).unwrap();
        assert_eq!(attached["iface"], "r0", "{first}");
        assert_eq!(attached["mode"], "native", "{first}");
        decap
    }
}

/// Stops the decapsulator: its counters, after checking it detached.
fn stop_decap(real: &Netns, decap: Proc) -> serde_json::Value {
    let (status, rest) = decap.stop();
    assert!(status.success(), "{status}");
    assert!(
        !real
            .ip(&["-d", "link", "show", "r0"])
            .unwrap()
            .contains("prog/xdp"),
        "decap detached at exit"
    );
    let last: serde_json::Value = serde_json::from_str(rest.lines().last().unwrap()).unwrap();
    last["counters"].clone()
}

/// TCP echo servers on `targets` in the real; a client connects to each through the VIPs and
/// sends its message; returns, per target, the peer the real saw. Asserts each echo.
fn echo_through(t: &Topo, targets: &[String], msgs: &[&'static [u8; 6]]) -> Vec<String> {
    let to_bind = targets.to_vec();
    let listeners = wirespeed_sys::netns::in_netns(t.real.name(), move || {
        to_bind
            .iter()
            .map(|t| TcpListener::bind(t.as_str()).unwrap())
            .collect::<Vec<_>>()
    })
    .unwrap();
    let servers: Vec<_> = listeners.into_iter().map(|l| echo_once(l, 6)).collect();
    let to_connect = targets.to_vec();
    let sent: Vec<&'static [u8; 6]> = msgs.to_vec();
    let echoed = wirespeed_sys::netns::in_netns(t.client.name(), move || {
        let mut got = Vec::new();
        for (vip, msg) in to_connect.iter().zip(sent) {
            let addr: SocketAddr = vip.parse().unwrap();
            let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
                .unwrap_or_else(|e| panic!("connect {vip}: {e}"));
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.write_all(msg).unwrap();
            let mut buf = [0u8; 6];
            s.read_exact(&mut buf)
                .unwrap_or_else(|e| panic!("read from {vip}: {e}"));
            got.push(buf.to_vec());
        }
        got
    })
    .unwrap();
    let want: Vec<Vec<u8>> = msgs.iter().map(|m| m.to_vec()).collect();
    assert_eq!(echoed, want);
    servers
        .into_iter()
        .map(|s| s.join().unwrap().ip().to_string())
        .collect()
}

#[test]
fn tunnel_mode_reaches_a_real_that_decapsulates_in_xdp() {
    let t = Topo::build('t', ("1440", "1400"));
    // Before the decapsulator: the VIPs cannot be decapsulated, and on a kernel without
    // ipip/ip6_tunnel doctor's one problem names `wirespeed lb decap`.
    let decap_cmd = format!(
        "ip netns exec {} wirespeed lb decap --iface r0 --vip {VIP4},{VIP6}",
        t.real.name()
    );
    let (code, text) = doctor(&t.real, &[]);
    assert_eq!(code, Some(1), "{text}");
    if !wirespeed_lb::doctor::kernel_has_module("ipip")
        && !wirespeed_lb::doctor::kernel_has_module("ip6_tunnel")
    {
        assert_eq!(
            text,
            format!("no tunl0, ip6tnl0 (this kernel has no ipip, ip6_tunnel module) and no decap program on the ingress, so tunnelled packets to the VIP are not decapsulated: {decap_cmd}\n")
        );
    }
    let (daemon, socket, _dir) = t.start_lb(&[
        format!("-A -t {VIP4}:{PORT} -s mh"),
        format!("-a -t {VIP4}:{PORT} -r 198.18.2.10 -i"),
        format!("-A -t [{VIP6}]:{PORT} -s mh"),
        format!("-a -t [{VIP6}]:{PORT} -r 198.18.2.10 -i"),
        format!("-A -t {VIP4}:{PORT6} -s mh"),
        format!("-a -t {VIP4}:{PORT6} -r [fd00:2::10] -i"),
        format!("-A -t [{VIP6}]:{PORT6} -s mh"),
        format!("-a -t [{VIP6}]:{PORT6} -r [fd00:2::10] -i"),
    ]);
    let decap = t.start_decap(&[]);
    assert_eq!(
        doctor(&t.real, &[]),
        (Some(0), "doctor: no problem found\n".into())
    );
    let targets = [
        format!("{VIP4}:{PORT}"),
        format!("[{VIP6}]:{PORT}"),
        format!("{VIP4}:{PORT6}"),
        format!("[{VIP6}]:{PORT6}"),
    ];
    let peers = echo_through(&t, &targets, &[b"ipip..", b"6in4..", b"4in6..", b"ip6ip6"]);
    // The real sees the client itself (tunnel mode keeps the packet as the client sent it).
    assert_eq!(
        peers,
        ["198.18.1.2", "fd00:1::2", "198.18.1.2", "fd00:1::2"]
    );
    let counters = stop_decap(&t.real, decap);
    let counter = |n: &str| counters[n].as_u64().unwrap();
    // SYN, the handshake's ACK, the data: at least three packets each way in.
    for n in ["decap_ipip", "decap_6in4", "decap_4in6", "decap_ip6ip6"] {
        assert!(counter(n) >= 3, "{n}: {counters}");
    }
    let (status, _) = daemon.stop();
    assert!(status.success(), "{status}");
    assert!(!socket.exists(), "the daemon removed its socket");
}

/// redis-server on `port` in the real, bound to both VIPs; waits until it answers.
fn start_redis(real: &Netns, port: u16) -> Proc {
    let p = port.to_string();
    let redis = Proc(
        Command::new("ip")
            .args(["netns", "exec", real.name(), "redis-server", "--port", &p])
            .args(["--bind", VIP4, VIP6, "--save", "", "--appendonly", "no"])
            .args(["--protected-mode", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while real
        .exec("redis-cli", &["-h", VIP4, "-p", &p, "ping"])
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "redis-server on {p} never answered"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    redis
}

/// `redis-cli` in the client: its stdout.
fn redis_cli(client: &Netns, vip: &str, port: u16, args: &[&str]) -> String {
    let p = port.to_string();
    let mut argv = vec!["-h", vip, "-p", &p];
    argv.extend_from_slice(args);
    client
        .exec("redis-cli", &argv)
        .unwrap_or_else(|e| panic!("redis-cli -h {vip} -p {p}: {e}"))
}

#[test]
fn gue_tunnel_reals_carry_redis_to_a_real_that_decapsulates_gue() {
    // GUE adds 8 bytes of UDP to the outer IP header: 28 over IPv4, 48 over IPv6.
    let t = Topo::build('g', ("1432", "1392"));
    // Before the decapsulator: doctor names it, with the GUE ports.
    let (code, text) = doctor(&t.real, &["--gue-port", "6080,6081"]);
    assert_eq!(code, Some(1), "{text}");
    if !wirespeed_lb::doctor::kernel_has_module("fou") {
        let want = format!(
            "nothing takes GUE on UDP port 6080, 6081 (no fou port, no decap program serving it on every ingress device), so GUE packets to the VIP are not decapsulated: ip netns exec {} wirespeed lb decap --iface r0 --vip {VIP4},{VIP6} --gue-port 6080,6081",
            t.real.name()
        );
        assert!(text.lines().any(|l| l == want), "{text}");
    }
    // An advmss that fits IPIP but not GUE is named too.
    t.real
        .ip(&[
            "route",
            "change",
            "default",
            "via",
            "198.18.2.1",
            "dev",
            "r0",
            "advmss",
            "1440",
        ])
        .unwrap();
    let (_, text) = doctor(&t.real, &["--gue-port", "6080,6081"]);
    assert!(
        text.contains(
            "advertise MSS 1440, but a tunnelled segment fits 1432 (28-byte outer header"
        ),
        "{text}"
    );
    t.real
        .ip(&[
            "route",
            "change",
            "default",
            "via",
            "198.18.2.1",
            "dev",
            "r0",
            "advmss",
            "1432",
        ])
        .unwrap();

    // v4 real: GUE to 6080 without checksum (IPIP's 6in4 counterpart for the v6 VIP); v6
    // real: GUE to 6081, with the checksum IPv6 requires.
    let gue4 = "-i --tun-type gue --tun-port 6080";
    let gue6 = "-i --tun-type gue --tun-port 6081";
    let (daemon, socket, _dir) = t.start_lb(&[
        format!("-A -t {VIP4}:6379 -s mh"),
        format!("-a -t {VIP4}:6379 -r 198.18.2.10 {gue4}"),
        format!("-A -t [{VIP6}]:6379 -s mh"),
        format!("-a -t [{VIP6}]:6379 -r 198.18.2.10 {gue4}"),
        format!("-A -t {VIP4}:6380 -s mh"),
        format!("-a -t {VIP4}:6380 -r [fd00:2::10] {gue6}"),
        format!("-A -t [{VIP6}]:6380 -s mh"),
        format!("-a -t [{VIP6}]:6380 -r [fd00:2::10] {gue6}"),
    ]);
    let saved = wirespeed(&t.lb, &["lb", "save"], &socket);
    let saved = String::from_utf8_lossy(&saved.stdout);
    assert!(
        saved.contains(&format!(
            "-a -t {VIP4}:6379 -r 198.18.2.10:6379 -i -w 1 --tun-type gue --tun-port 6080 --tun-nocsum"
        )),
        "{saved}"
    );
    assert!(
        saved.contains(&format!(
            "-a -t {VIP4}:6380 -r [fd00:2::10]:6380 -i -w 1 --tun-type gue --tun-port 6081 --tun-csum"
        )),
        "{saved}"
    );
    let decap = t.start_decap(&["--gue-port", "6080,6081"]);
    assert_eq!(
        doctor(&t.real, &["--gue-port", "6080,6081"]),
        (Some(0), "doctor: no problem found\n".into())
    );
    let _redis = [start_redis(&t.real, 6379), start_redis(&t.real, 6380)];
    for vip in [VIP4, VIP6] {
        for port in [6379, 6380] {
            assert_eq!(redis_cli(&t.client, vip, port, &["ping"]).trim(), "PONG");
        }
    }
    // Many flows through one GUE real: redis-benchmark, as the issue runs it.
    let out = t
        .client
        .exec(
            "redis-benchmark",
            &[
                "-h",
                VIP4,
                "-p",
                "6379",
                "-t",
                "ping_inline",
                "-n",
                "2000",
                "-c",
                "8",
            ],
        )
        .unwrap();
    assert!(out.contains("requests per second"), "{out}");
    let clients = redis_cli(&t.client, VIP6, 6380, &["client", "list"]);
    assert!(
        clients.contains("addr=[fd00:1::2]:") || clients.contains("addr=fd00:1::2:"),
        "the real sees the client: {clients}"
    );

    let counters = stop_decap(&t.real, decap);
    let counter = |n: &str| counters[n].as_u64().unwrap();
    assert!(counter("decap_gue_v4") >= 2000, "{counters}");
    assert!(counter("decap_gue_v6") >= 6, "{counters}");
    for n in ["decap_ipip", "decap_6in4", "decap_4in6", "decap_ip6ip6"] {
        assert_eq!(counter(n), 0, "{n}: {counters}");
    }
    let (status, _) = daemon.stop();
    assert!(status.success(), "{status}");
}
