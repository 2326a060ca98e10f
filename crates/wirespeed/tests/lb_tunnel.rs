//! Tunnel mode end to end, on a kernel that may have no ipip/sit (this lab's): a client, the
//! load balancer (`wirespeed lb run`, tunnel-mode services for a v4 VIP and a v6 VIP to the
//! real's v4 address and to its v6 address: IPIP, 6in4, 4in6, IP6IP6) and a real running
//! `wirespeed lb decap`, in three lab
//! namespaces joined by veths and set up with plain `ip` commands. The real holds the VIPs on
//! lo and answers the client directly, through the load balancer's kernel as a router. Also
//! `lb doctor --real`: before the decapsulator runs it names `wirespeed lb decap` as the fix
//! (when the kernel lacks the module), and with it running it finds nothing.
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

/// `wirespeed lb doctor --real ... --mode tunnel --netns REAL`, run from the host as a user
/// would: (exit code, stdout).
fn doctor(real: &Netns) -> (Option<i32>, String) {
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

#[test]
fn tunnel_mode_reaches_a_real_that_decapsulates_in_xdp() {
    wirespeed_lab::require_root();
    let id = std::process::id() % 100000;
    let client = Netns::create(&format!("ws-tc{id}")).unwrap();
    let lb = Netns::create(&format!("ws-tl{id}")).unwrap();
    let real = Netns::create(&format!("ws-tr{id}")).unwrap();
    let _v1 = Veth::create(&lb, "in0", &client, "c0", 1).unwrap();
    let _v2 = Veth::create(&lb, "out0", &real, "r0", 1).unwrap();
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
    // balancer; their advmss leaves room for the outer header, as doctor asks (IPv6: it
    // assumes 6in6 on a real with a global IPv6 address).
    real.ip(&[
        "route",
        "add",
        "default",
        "via",
        "198.18.2.1",
        "dev",
        "r0",
        "advmss",
        "1440",
    ])
    .unwrap();
    real.ip(&[
        "-6",
        "route",
        "add",
        "default",
        "via",
        "fd00:2::1",
        "dev",
        "r0",
        "advmss",
        "1400",
    ])
    .unwrap();
    for key in [
        "net.ipv4.conf.all.rp_filter",
        "net.ipv4.conf.lo.rp_filter",
        "net.ipv4.conf.r0.rp_filter",
    ] {
        real.sysctl(key, "0").unwrap();
    }
    // The load balancer's kernel forwards the replies (and the program's FIB lookups need
    // forwarding on).
    lb.sysctl("net.ipv4.ip_forward", "1").unwrap();
    lb.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
    // The veth peers run NAPI, so they take the program's redirects and XDP_TX.
    client.exec("ethtool", &["-K", "c0", "gro", "on"]).unwrap();
    real.exec("ethtool", &["-K", "r0", "gro", "on"]).unwrap();

    // Before the decapsulator: the VIPs cannot be decapsulated, and on a kernel without
    // ipip/ip6_tunnel doctor's one problem names `wirespeed lb decap`.
    let decap_cmd = format!(
        "ip netns exec {} wirespeed lb decap --iface r0 --vip {VIP4},{VIP6}",
        real.name()
    );
    let (code, text) = doctor(&real);
    assert_eq!(code, Some(1), "{text}");
    if !wirespeed_lb::doctor::kernel_has_module("ipip")
        && !wirespeed_lb::doctor::kernel_has_module("ip6_tunnel")
    {
        assert_eq!(
            text,
            format!("no tunl0, ip6tnl0 (this kernel has no ipip, ip6_tunnel module) and no decap program on the ingress, so tunnelled packets to the VIP are not decapsulated: {decap_cmd}\n")
        );
    }

    // The load balancer.
    let dir = TempDir(PathBuf::from(format!(
        "/tmp/ws-lbtun-{}",
        std::process::id()
    )));
    let socket = dir.0.join("lb.sock");
    let daemon = Proc(
        Command::new("ip")
            .args(["netns", "exec", lb.name(), BIN])
            .args(["lb", "run", "--iface", "in0", "--iface", "out0"])
            .args(["--ring-size", "251", "--socket"])
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
    for cmd in [
        format!("-A -t {VIP4}:{PORT} -s mh"),
        format!("-a -t {VIP4}:{PORT} -r 198.18.2.10 -i"),
        format!("-A -t [{VIP6}]:{PORT} -s mh"),
        format!("-a -t [{VIP6}]:{PORT} -r 198.18.2.10 -i"),
        format!("-A -t {VIP4}:{PORT6} -s mh"),
        format!("-a -t {VIP4}:{PORT6} -r [fd00:2::10] -i"),
        format!("-A -t [{VIP6}]:{PORT6} -s mh"),
        format!("-a -t [{VIP6}]:{PORT6} -r [fd00:2::10] -i"),
    ] {
        let mut args = vec!["lb"];
        args.extend(cmd.split(' '));
        let out = wirespeed(&lb, &args, &socket);
        assert!(
            out.status.success(),
            "{cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The real's neighbour resolved before the first SYN (the daemon also keeps it so).
    lb.exec("ping", &["-c", "1", "-W", "2", "198.18.2.10"])
        .unwrap();
    lb.exec("ping", &["-c", "1", "-W", "2", "fd00:2::10"])
        .unwrap();

    // The decapsulator on the real, as doctor's fix says, with --json for its counters.
    let mut decap = Proc(
        Command::new("ip")
            .args(["netns", "exec", real.name(), BIN])
            .args(["lb", "decap", "--iface", "r0", "--vip"])
            .arg(format!("{VIP4},{VIP6}"))
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
    assert_eq!(
        doctor(&real),
        (Some(0), "doctor: no problem found\n".into())
    );

    // A TCP server on each VIP in the real; a client through the VIPs.
    let targets = [
        format!("{VIP4}:{PORT}"),
        format!("[{VIP6}]:{PORT}"),
        format!("{VIP4}:{PORT6}"),
        format!("[{VIP6}]:{PORT6}"),
    ];
    let to_bind = targets.clone();
    let listeners = wirespeed_sys::netns::in_netns(real.name(), move || {
        to_bind
            .iter()
            .map(|t| TcpListener::bind(t.as_str()).unwrap())
            .collect::<Vec<_>>()
    })
    .unwrap();
    let servers: Vec<_> = listeners.into_iter().map(|l| echo_once(l, 6)).collect();
    let to_connect = targets.clone();
    let echoed = wirespeed_sys::netns::in_netns(client.name(), move || {
        let mut got = Vec::new();
        for (vip, msg) in to_connect
            .iter()
            .zip([b"ipip..", b"6in4..", b"4in6..", b"ip6ip6"])
        {
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
    assert_eq!(
        echoed,
        [b"ipip..", b"6in4..", b"4in6..", b"ip6ip6"].map(|m| m.to_vec())
    );
    let peers: Vec<String> = servers
        .into_iter()
        .map(|s| s.join().unwrap().ip().to_string())
        .collect();
    // The real sees the client itself (tunnel mode keeps the packet as the client sent it).
    assert_eq!(
        peers,
        ["198.18.1.2", "fd00:1::2", "198.18.1.2", "fd00:1::2"]
    );

    let (status, rest) = decap.stop();
    assert!(status.success(), "{status}");
    let last: serde_json::Value = serde_json::from_str(rest.lines().last().unwrap()).unwrap();
    let counter = |n: &str| last["counters"][n].as_u64().unwrap();
    // SYN, the handshake's ACK, the data: at least three packets each way in.
    assert!(counter("decap_ipip") >= 3, "{last}");
    assert!(counter("decap_6in4") >= 3, "{last}");
    assert!(counter("decap_4in6") >= 3, "{last}");
    assert!(counter("decap_ip6ip6") >= 3, "{last}");
    assert!(
        !real
            .ip(&["-d", "link", "show", "r0"])
            .unwrap()
            .contains("prog/xdp"),
        "decap detached at exit"
    );
    let (status, _) = daemon.stop();
    assert!(status.success(), "{status}");
    assert!(!socket.exists(), "the daemon removed its socket");
}
