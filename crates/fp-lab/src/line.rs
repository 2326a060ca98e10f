//! The fast path's lab for its privileged tests and fp_bench: a `line` of three namespaces
//! and a daemon running inside the DUT.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wirespeed_fp::daemon::{Config, Daemon};
use wirespeed_fp::status::{read_status_file, Status};
use wirespeed_lab::netns::add_addr;
use wirespeed_lab::{Netns, Veth};

/// source (v0) <-> (d0) dut (d1) <-> (s0) sink
pub struct Line {
    pub src: Netns,
    pub dut: Netns,
    pub sink: Netns,
    _a: Veth,
    _b: Veth,
}

pub const PREFIXES: u32 = 50;

pub fn line(tag: &str) -> Line {
    wirespeed_lab::require_root();
    let id = std::process::id() % 100000;
    let src = Netns::create(&format!("ws-f{tag}{id}s")).unwrap();
    let dut = Netns::create(&format!("ws-f{tag}{id}d")).unwrap();
    let sink = Netns::create(&format!("ws-f{tag}{id}k")).unwrap();
    // Link-local addresses skip duplicate address detection, so neighbour discovery works at once.
    for ns in [&src, &dut, &sink] {
        ns.sysctl("net.ipv6.conf.default.accept_dad", "0").unwrap();
        ns.sysctl("net.ipv6.conf.all.accept_dad", "0").unwrap();
    }
    let a = Veth::create(&src, "v0", &dut, "d0", 1).unwrap();
    let b = Veth::create(&dut, "d1", &sink, "s0", 1).unwrap();
    for (ns, dev, addr) in [
        (&src, "v0", "198.18.0.1/24"),
        (&src, "v0", "fd00:a::1/64"),
        (&dut, "d0", "198.18.0.2/24"),
        (&dut, "d0", "fd00:a::2/64"),
        (&dut, "d1", "198.18.1.1/24"),
        (&dut, "d1", "fd00:b::1/64"),
        (&sink, "s0", "198.18.1.2/24"),
        (&sink, "s0", "fd00:b::2/64"),
        (&sink, "lo", "fd00:c::1/128"),
    ] {
        add_addr(ns, dev, addr).unwrap();
    }
    src.ip(&["route", "add", "default", "via", "198.18.0.2"])
        .unwrap();
    src.ip(&["-6", "route", "add", "default", "via", "fd00:a::2"])
        .unwrap();
    sink.ip(&["route", "add", "default", "via", "198.18.1.1"])
        .unwrap();
    sink.ip(&["-6", "route", "add", "default", "via", "fd00:b::1"])
        .unwrap();
    let mut batch_sink = String::new();
    let mut batch_dut = String::new();
    for x in 0..PREFIXES {
        batch_sink.push_str(&format!("addr add 198.19.{x}.1/32 dev lo\n"));
        batch_dut.push_str(&format!("route add 198.19.{x}.0/24 via 198.18.1.2\n"));
    }
    batch_dut.push_str("route add fd00:c::/64 via fd00:b::2\n");
    ip_batch(&sink, &batch_sink);
    ip_batch(&dut, &batch_dut);
    dut.sysctl("net.ipv4.ip_forward", "1").unwrap();
    dut.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
    // A veth delivers XDP-redirected frames only into a peer that runs NAPI: GRO on, or an
    // XDP program of its own.
    for (ns, dev) in [(&src, "v0"), (&sink, "s0")] {
        ns.exec("ethtool", &["-K", dev, "gro", "on"]).unwrap();
    }
    Line {
        src,
        dut,
        sink,
        _a: a,
        _b: b,
    }
}

pub use wirespeed_testkit::netns::ifindex;

pub fn ip_batch(ns: &Netns, batch: &str) {
    use std::io::Write;
    let mut child = ns
        .command("ip")
        .args(["-batch", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(batch.as_bytes())
        .unwrap();
    assert!(
        child.wait().unwrap().success(),
        "ip -batch failed in {}",
        ns.name()
    );
}

/// Runs `f` on a thread inside namespace `name`, without waiting for it.
pub fn spawn_in_ns<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> JoinHandle<T> {
    let name = name.to_string();
    std::thread::spawn(move || {
        wirespeed_sys::netns::enter(&name).unwrap();
        f()
    })
}

pub struct RunningDaemon {
    pub status_path: PathBuf,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl RunningDaemon {
    pub fn start(dut: &Netns, only: Option<Vec<String>>) -> RunningDaemon {
        Self::start_with(dut, only, Default::default())
    }

    pub fn start_with(
        dut: &Netns,
        only: Option<Vec<String>>,
        bridge_hook: wirespeed_fp::model::BridgeHook,
    ) -> RunningDaemon {
        Self::start_config(
            dut,
            Config {
                only,
                bridge_hook,
                ..Config::default()
            },
        )
    }

    /// Starts the daemon in `dut` with `cfg`, its status file in the temporary directory.
    pub fn start_config(dut: &Netns, cfg: Config) -> RunningDaemon {
        let status_path = std::env::temp_dir().join(format!("{}-fp-status.json", dut.name()));
        let _ = std::fs::remove_file(&status_path);
        let stop = Arc::new(AtomicBool::new(false));
        let cfg = Config {
            status_path: status_path.clone(),
            ..cfg
        };
        let s = stop.clone();
        let handle = spawn_in_ns(dut.name(), move || {
            Daemon::new(cfg)
                .expect("daemon")
                .run(&s)
                .expect("daemon run");
        });
        let d = RunningDaemon {
            status_path,
            stop,
            handle: Some(handle),
        };
        d.wait_for("startup", |s| s.running);
        d
    }

    pub fn status(&self) -> Option<Status> {
        read_status_file(&self.status_path).ok()
    }

    /// Waits (bounded) until the daemon's status satisfies `pred`. The bound is generous:
    /// a change that swaps programs waits for the verifier, seconds on a loaded 2-CPU host.
    pub fn wait_for(&self, what: &str, pred: impl Fn(&Status) -> bool) -> Status {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(s) = self.status() {
                if pred(&s) {
                    return s;
                }
            }
            if Instant::now() >= deadline {
                // The whole status goes to stderr; the panic line stays short enough to read.
                let last = self.status();
                eprintln!("last status: {last:#?}");
                let brief = last.map(|s| {
                    format!(
                        "running {}, {} ports, filter_v4 {:?}, filter_v6 {:?}, rule events {:?}, \
                         last response {:?}, errors {:?}",
                        s.running,
                        s.ports.len(),
                        s.filter_v4,
                        s.filter_v6,
                        s.nft_rule_events,
                        s.responses.first(),
                        s.errors.last()
                    )
                });
                panic!("timed out waiting for: {what}; {brief:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().expect("daemon thread");
        }
    }
}

impl Drop for RunningDaemon {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        let _ = std::fs::remove_file(&self.status_path);
    }
}

/// True when `dst` answers within a few tries (the first may wait for neighbour resolution).
pub fn ping(from: &Netns, dst: &str) -> bool {
    (0..3).any(|_| ping_once(from, dst))
}

pub fn ping_once(from: &Netns, dst: &str) -> bool {
    let v6 = dst.contains(':');
    let mut args = vec!["-c1", "-W1", dst];
    if v6 {
        args.insert(0, "-6");
    }
    from.exec("ping", &args).is_ok()
}

pub fn forwarded(s: &Status, port: &str) -> u64 {
    s.ports
        .iter()
        .find(|p| p.name == port)
        .map(|p| {
            ["forwarded", "forwarded_cached"]
                .iter()
                .map(|r| p.reasons.get(*r).copied().unwrap_or(0))
                .sum()
        })
        .unwrap_or(0)
}

/// source (v0) <-> (d0) [br0 in dut] (d1) <-> (s0) sink, on 198.18.2.0/24.
///
/// The bridge does not filter VLANs: this lab's kernel is built without
/// CONFIG_BRIDGE_VLAN_FILTERING and 802.1Q, so tagged frames cross it as a trunk, with their
/// tags, and VLAN filtering is checked with BPF_PROG_TEST_RUN instead (tests/bridge.rs).
pub struct BridgeLine {
    pub src: Netns,
    pub dut: Netns,
    pub sink: Netns,
    _a: Veth,
    _b: Veth,
}

pub fn bridge_line(tag: &str) -> BridgeLine {
    wirespeed_lab::require_root();
    let id = std::process::id() % 100000;
    let src = Netns::create(&format!("ws-b{tag}{id}s")).unwrap();
    let dut = Netns::create(&format!("ws-b{tag}{id}d")).unwrap();
    let sink = Netns::create(&format!("ws-b{tag}{id}k")).unwrap();
    for ns in [&src, &dut, &sink] {
        ns.sysctl("net.ipv6.conf.default.accept_dad", "0").unwrap();
        ns.sysctl("net.ipv6.conf.all.accept_dad", "0").unwrap();
    }
    let a = Veth::create(&src, "v0", &dut, "d0", 1).unwrap();
    let b = Veth::create(&dut, "d1", &sink, "s0", 1).unwrap();
    ip_batch(
        &dut,
        "link add br0 type bridge\n\
         link set d0 master br0\n\
         link set d1 master br0\n\
         link set br0 up\n",
    );
    add_addr(&dut, "br0", "198.18.2.3/24").unwrap();
    for (ns, dev, addr) in [
        (&src, "v0", "198.18.2.1/24"),
        (&src, "v0", "fd00:2::1/64"),
        (&sink, "s0", "198.18.2.2/24"),
        (&sink, "s0", "fd00:2::2/64"),
    ] {
        add_addr(ns, dev, addr).unwrap();
    }
    // XDP-redirected frames need NAPI on the receiving veth (see `line`).
    for (ns, dev) in [(&src, "v0"), (&sink, "s0")] {
        ns.exec("ethtool", &["-K", dev, "gro", "on"]).unwrap();
    }
    BridgeLine {
        src,
        dut,
        sink,
        _a: a,
        _b: b,
    }
}

/// A pod network: a node with bridge cni0 (198.18.4.1/24) and one veth per pod, each pod a
/// namespace with eth0 at 198.18.4.(10 + i) and a default route through the node.
pub struct PodNet {
    pub node: Netns,
    pub pods: Vec<Netns>,
    _veths: Vec<Veth>,
}

pub fn pod_network(tag: &str, pods: usize) -> PodNet {
    wirespeed_lab::require_root();
    let id = std::process::id() % 100000;
    let node = Netns::create(&format!("ws-p{tag}{id}n")).unwrap();
    ip_batch(&node, "link add cni0 type bridge\nlink set cni0 up\n");
    add_addr(&node, "cni0", "198.18.4.1/24").unwrap();
    let mut ns = Vec::new();
    let mut veths = Vec::new();
    for i in 0..pods {
        let pod = Netns::create(&format!("ws-p{tag}{id}p{i}")).unwrap();
        let host_if = format!("vpod{i}");
        veths.push(Veth::create(&node, &host_if, &pod, "eth0", 1).unwrap());
        node.ip(&["link", "set", &host_if, "master", "cni0"])
            .unwrap();
        add_addr(&pod, "eth0", &format!("198.18.4.{}/24", 10 + i)).unwrap();
        pod.ip(&["route", "add", "default", "via", "198.18.4.1"])
            .unwrap();
        ns.push(pod);
    }
    PodNet {
        node,
        pods: ns,
        _veths: veths,
    }
}

pub fn bridged(s: &Status, port: &str) -> u64 {
    s.ports
        .iter()
        .find(|p| p.name == port)
        .map(|p| p.reasons.get("bridged").copied().unwrap_or(0))
        .unwrap_or(0)
}

/// A status written after now (the daemon rewrites it every 500 ms): counters read after
/// every packet sent before the call.
pub fn fresh(d: &RunningDaemon) -> Status {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    d.wait_for("a fresh status", |s| s.updated_unix_ms > now)
}
