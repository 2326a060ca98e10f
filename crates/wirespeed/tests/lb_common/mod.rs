//! The load balancer's lab as a user builds it: the `lb` topology (2 clients, 4 backends, the
//! lb node routing between them) made with plain `ip` commands and every device setting at the
//! kernel's default, then `wirespeed lb run` on the lb node with the fix it prints applied.
//!
//! What a user could have differently is drawn from a seed that every test prints
//! (`WS_LB_SEED=N` repeats a run): rx/tx queues per veth, GRO on the lb's own interfaces,
//! TX checksum offload and TSO on the clients and the backends (a sender with TX checksum
//! offload, the veth default, hands over frames whose TCP checksum is only partial), and a
//! tunnel source prefix.

pub mod checks;
pub mod clients;
pub mod reals;

use std::fs::File;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use wirespeed_lab::topo::{Lab, LabSpec, Topology};
use wirespeed_lab::Netns;
use wirespeed_sys::process;
use wirespeed_sys::signal::Signal;

pub const CLIENTS: usize = 2;
pub const BACKENDS: usize = 4;
/// The virtual addresses: outside every lab link, so the clients reach them through their
/// default route, the lb node.
pub const VIP4: Ipv4Addr = Ipv4Addr::new(198, 18, 200, 1);
pub const VIP6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xc8, 0, 0, 0, 0, 0, 1);
/// Full-NAT local addresses: off every link too, so the backends send replies to them through
/// their default route, the lb node, where the data path translates them back.
pub const LADDR4: Ipv4Addr = Ipv4Addr::new(198, 18, 250, 1);
pub const LADDR6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xfa, 0, 0, 0, 0, 0, 1);

/// Client `i`'s addresses (the lab's leaf `.1` / `::1` on link 10 + i).
pub fn cip4(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 10 + i as u8, 1)
}
/// Backend `j`'s addresses (link 100 + j).
pub fn rip4(j: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 100 + j as u8, 1)
}
pub fn rip6(j: usize) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 100 + j as u16, 0, 0, 0, 0, 0, 1)
}

pub const REDIS: u16 = 6379;
pub const HTTP: u16 = 80;
pub const ALL: [usize; BACKENDS] = [0, 1, 2, 3];

pub fn vip(ip: impl Into<IpAddr>, port: u16) -> SocketAddr {
    SocketAddr::new(ip.into(), port)
}

/// The lab for `mode` with its reals prepared, redis and nginx on every backend and the daemon
/// running; the redis pids by backend.
pub fn mode_lab(tag: &str, mode: &str, rng: &mut Rng) -> (LbLab, Vec<u32>) {
    let mut lab = LbLab::up(tag, rng);
    reals::prepare(&mut lab, mode);
    let pids = reals::start_backends(&mut lab, mode);
    lab.start_daemon();
    (lab, pids)
}

/// The reals of a service on `port` for `mode`: every backend, by the address family the
/// mode uses under a VIP of `family_v6` (tunnel mode carries a v6 VIP to v4 reals in 6in4).
pub fn reals_for<'m>(
    mode: &'m str,
    v6_vip: bool,
    port: u16,
    weights: &[u32],
) -> Vec<(SocketAddr, &'m str, u32)> {
    (0..BACKENDS)
        .map(|j| {
            let ip: IpAddr = if v6_vip && mode != "-i" {
                rip6(j).into()
            } else {
                rip4(j).into()
            };
            (SocketAddr::new(ip, port), mode, weights[j])
        })
        .collect()
}

/// `-A` + `--add-laddr` (full-NAT) + `-a` for each backend.
pub fn configure(
    lab: &LbLab,
    mode: &str,
    service: SocketAddr,
    sched: &str,
    extra: &[&str],
    weights: &[u32],
) {
    let reals = reals_for(mode, service.is_ipv6(), service.port(), weights);
    let v = service.to_string();
    let mut a = vec!["-A", "-t", &v, "-s", sched];
    a.extend_from_slice(extra);
    lab.lb_ok(&a);
    if mode == "-b" {
        let laddr = if service.is_ipv6() {
            LADDR6.to_string()
        } else {
            LADDR4.to_string()
        };
        lab.lb_ok(&["--add-laddr", "-z", &laddr, "-t", &v]);
    }
    for (j, (r, m, w)) in reals.into_iter().enumerate() {
        let (r, w) = (r.to_string(), w.to_string());
        let queues = lab.rx_queues(&format!("b{j}"));
        let out = lab.lb(&["-a", "-t", &v, "-r", &r, m, "-w", &w]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "-a {r} failed: {err}");
        // `-a` says what doctor says about the way to the real.
        assert_eq!(
            err.contains("RX queues"),
            queues > 1,
            "-a {r} (b{j} with {queues} RX queues) warned: {err:?}"
        );
    }
    lab.apply_queue_fixes();
}

/// `ADDR:PORT` as ipvsadm writes it (`[v6]:port`).
pub fn hostport(ip: IpAddr, port: u16) -> String {
    SocketAddr::new(ip, port).to_string()
}

pub use wirespeed_testkit::rng::Rng;
// Each test binary that includes this module uses a part of it.
#[allow(unused_imports)]
pub use wirespeed_testkit::wait::{wait_for, wait_for_every};

/// A generator seeded from `WS_LB_SEED`, else from the clock; the seed is printed either way.
pub fn lb_rng(test: &str) -> Rng {
    Rng::seeded("WS_LB_SEED", test)
}

/// Every process a test starts, stopped (SIGTERM, then SIGKILL) when this drops, whether the
/// test passed or panicked.
#[derive(Default)]
pub struct Procs {
    children: Vec<(String, Child)>,
}

impl Procs {
    /// Starts `program args` in namespace `ns`; stdout and stderr go to `log`.
    pub fn spawn(&mut self, what: &str, ns: &str, program: &str, args: &[&str], log: &Path) -> u32 {
        let out = File::create(log).expect("log file");
        let err = out.try_clone().expect("log file");
        let child = Command::new("ip")
            .args(["netns", "exec", ns, program])
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("start {program}: {e}"));
        let pid = child.id();
        self.children.push((what.to_string(), child));
        pid
    }

    /// The exit status of `pid` if it has exited.
    pub fn exited(&mut self, pid: u32) -> Option<std::process::ExitStatus> {
        let (_, c) = self.children.iter_mut().find(|(_, c)| c.id() == pid)?;
        c.try_wait().ok().flatten()
    }

    /// Stops `pid` with `signal` and waits (bounded) for it, then forgets it.
    pub fn stop(&mut self, pid: u32, signal: Signal) {
        if let Some(i) = self.children.iter().position(|(_, c)| c.id() == pid) {
            let (what, child) = self.children.remove(i);
            stop_child(&what, child, signal);
        }
    }
}

fn stop_child(what: &str, mut child: Child, signal: Signal) {
    if child.try_wait().ok().flatten().is_some() {
        return;
    }
    let _ = process::kill(child.id(), signal);
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if child.try_wait().ok().flatten().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("{what} (pid {}) ignored {signal:?}; killing it", child.id());
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for Procs {
    fn drop(&mut self) {
        // The newest first: the daemon and clients go before the servers they use.
        while let Some((what, child)) = self.children.pop() {
            stop_child(&what, child, Signal::Terminate);
        }
    }
}

/// A directory for configs, logs and captures, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("ws-lb-lab-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The lab, the processes in it and the daemon's socket. Fields drop in order: processes first
/// (they hold the namespaces), then the namespaces, then the files.
pub struct LbLab {
    pub procs: Procs,
    pub lab: Lab,
    pub dir: TempDir,
    pub name: String,
    pub socket: PathBuf,
    pub daemon: Option<u32>,
    /// Extra `lb run` options drawn from the seed (e.g. `--tunnel-src`).
    pub run_args: Vec<String>,
    pub started: Instant,
}

impl Drop for LbLab {
    fn drop(&mut self) {
        println!(
            "{}: {:.1} s from lab up to teardown",
            self.name,
            self.started.elapsed().as_secs_f64()
        );
    }
}

/// Runs `cmd` and returns its output; the error says what ran and what it printed.
pub fn output(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null());
    cmd.output()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"))
}

/// Runs `cmd` and panics unless it succeeds; returns stdout.
pub fn ok(cmd: &mut Command) -> String {
    let out = output(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_wirespeed")
}

impl LbLab {
    /// Builds the lab with kernel defaults and applies the seed's variations. The daemon is
    /// not started (see [`LbLab::start_daemon`]).
    pub fn up(name: &str, rng: &mut Rng) -> LbLab {
        wirespeed_lab::require_root();
        // A crash of an earlier run may have left this lab's namespaces and record behind.
        let _ = wirespeed_lab::topo::down(name);
        let mut spec = LabSpec::new(name, Topology::Lb);
        spec.clients = CLIENTS;
        spec.backends = BACKENDS;
        spec.queues = 1 + rng.below(2) as u32;
        let started = Instant::now();
        let lab = Lab::up(&spec).expect("lab up");
        println!("{name}: lab up in {:.1} s", started.elapsed().as_secs_f64());
        let dir = TempDir::new(name);
        let socket = dir.0.join("lb.sock");
        let mut me = LbLab {
            procs: Procs::default(),
            lab,
            dir,
            name: name.to_string(),
            socket,
            daemon: None,
            run_args: vec![],
            started,
        };
        let mut notes = vec![format!("{} queues per veth", spec.queues)];
        for ifc in me.lb_ifaces() {
            if rng.coin() {
                me.exec("lb", "ethtool", &["-K", &ifc, "gro", "on"]);
                notes.push(format!("lb:{ifc} gro on"));
            }
        }
        let roles = (0..CLIENTS)
            .map(|i| format!("c{i}"))
            .chain((0..BACKENDS).map(|j| format!("b{j}")));
        // WS_LB_TX_OFF=1 turns TX checksum offload off on every leaf: a diagnosis knob that
        // tells a partial-checksum failure from any other (the seed's draws stay the same).
        let tx_off = std::env::var_os("WS_LB_TX_OFF").is_some();
        for role in roles {
            let tx = rng.coin() && !tx_off;
            let tso = tx && rng.coin();
            if !tx {
                // TSO needs TX checksumming; ethtool turns both off together.
                me.exec(&role, "ethtool", &["-K", "eth0", "tx", "off"]);
            } else if !tso {
                me.exec(&role, "ethtool", &["-K", "eth0", "tso", "off"]);
            }
            notes.push(format!(
                "{role}: tx-checksum {}, tso {}",
                on_off(tx),
                on_off(tso)
            ));
        }
        if rng.coin() {
            me.run_args = vec!["--tunnel-src".into(), "198.18.240.0/24".into()];
            notes.push("lb run --tunnel-src 198.18.240.0/24".into());
        }
        // The lab's lb node is also the clients' and backends' router: DR and tunnel reals
        // answer clients directly, from the VIP, through it. A router with no route back to the
        // VIP forwards those replies only with reverse-path filtering off, and a new namespace
        // inherits the host's setting.
        me.sysctl("lb", "net.ipv4.conf.all.rp_filter", "0");
        me.sysctl("lb", "net.ipv4.conf.default.rp_filter", "0");
        for ifc in me.lb_ifaces() {
            me.sysctl("lb", &format!("net.ipv4.conf.{ifc}.rp_filter"), "0");
        }
        println!("{name}: variation: {}", notes.join(", "));
        me
    }

    pub fn ns(&self, role: &str) -> &Netns {
        self.lab
            .ns(role)
            .unwrap_or_else(|| panic!("no node {role}"))
    }

    pub fn ns_name(&self, role: &str) -> String {
        self.ns(role).name().to_string()
    }

    /// The lb node's interfaces, clients' first (eth0, eth1, then the backends' eth2..).
    pub fn lb_ifaces(&self) -> Vec<String> {
        self.lab
            .node("lb")
            .expect("lb node")
            .ifaces
            .iter()
            .map(|i| i.name.clone())
            .collect()
    }

    /// Runs `program args` in `role`'s namespace and asserts it succeeds.
    pub fn exec(&self, role: &str, program: &str, args: &[&str]) -> String {
        ok(Command::new("ip")
            .args(["netns", "exec", &self.ns_name(role), program])
            .args(args))
    }

    pub fn sysctl(&self, role: &str, key: &str, value: &str) {
        self.exec(role, "sysctl", &["-qw", &format!("{key}={value}")]);
    }

    /// `wirespeed lb ARGS` in the lb node against this lab's daemon.
    pub fn lb(&self, args: &[&str]) -> Output {
        output(
            Command::new("ip")
                .args(["netns", "exec", &self.ns_name("lb"), bin(), "lb"])
                .args(args)
                .env("WIRESPEED_LB_SOCKET", &self.socket),
        )
    }

    /// Runs `wirespeed lb doctor` and applies the RX-queue fixes it prints for the veths to
    /// the reals, as a user would; then every real's link must have one RX queue. A veth
    /// queues each XDP frame by the sending CPU where a NIC's RSS keeps a flow on one queue,
    /// and with two queues a real's kernel reset about one connection in 200,000 (docs/LB.md).
    pub fn apply_queue_fixes(&self) {
        let out = self.lb(&["doctor"]);
        let text = String::from_utf8_lossy(&out.stdout);
        for line in text.lines().filter(|l| l.contains("ethtool -L")) {
            let (_, fix) = line
                .rsplit_once(": ")
                .expect("doctor's `problem: fix` line");
            println!("{}: applying doctor's fix: {fix}", self.name);
            for cmd in fix.split("; ") {
                let words: Vec<&str> = cmd.split_whitespace().collect();
                if cmd.starts_with("ip netns exec ") {
                    ok(Command::new(words[0]).args(&words[1..]));
                } else {
                    // Where doctor ran: the lb node.
                    self.exec("lb", words[0], &words[1..]);
                }
            }
        }
        for j in 0..BACKENDS {
            let role = format!("b{j}");
            assert_eq!(
                self.rx_queues(&role),
                1,
                "{role}'s eth0 still has more than one RX queue after doctor's fixes; doctor said:\n{text}"
            );
        }
    }

    /// The RX queues in use on `role`'s eth0 (`ethtool -l`).
    pub fn rx_queues(&self, role: &str) -> u64 {
        let channels = self.exec(role, "ethtool", &["-l", "eth0"]);
        wirespeed_lb::doctor::current_rx_channels(&channels)
            .unwrap_or_else(|| panic!("no RX channels for {role}: {channels}"))
    }

    /// `wirespeed lb ARGS`, which must succeed; its stdout.
    pub fn lb_ok(&self, args: &[&str]) -> String {
        let out = self.lb(args);
        assert!(
            out.status.success(),
            "wirespeed lb {} failed ({}): {}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// One attempt at `wirespeed lb run` on every lb interface: Ok once the daemon answers
    /// `-L -n`, Err(what it printed) when it exits.
    pub fn try_daemon(&mut self) -> Result<u32, String> {
        let log = self.dir.0.join("lb-run.log");
        let mut args: Vec<String> = vec!["lb".into(), "run".into()];
        for i in self.lb_ifaces() {
            args.push("--iface".into());
            args.push(i);
        }
        args.push("--socket".into());
        args.push(self.socket.display().to_string());
        // No router learns these labs' VIPs, so a stop need not wait out a drain.
        args.extend(["--drain".into(), "0".into()]);
        args.extend(self.run_args.iter().cloned());
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let ns = self.ns_name("lb");
        let pid = self
            .procs
            .spawn("wirespeed lb run", &ns, bin(), &argv, &log);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.procs.exited(pid) {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                self.procs.stop(pid, Signal::Kill);
                return Err(format!("exit {status}: {text}"));
            }
            if self.socket.exists() && self.lb(&["-L", "-n"]).status.success() {
                self.daemon = Some(pid);
                return Ok(pid);
            }
            assert!(
                Instant::now() < deadline,
                "wirespeed lb run neither answered nor exited in 30 s: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts the daemon as a user would: run it, and while it refuses with a command that
    /// turns on GRO on a veth peer, run that command and try again.
    pub fn start_daemon(&mut self) -> u32 {
        let mut applied = vec![];
        for _ in 0..=self.lb_ifaces().len() {
            match self.try_daemon() {
                Ok(pid) => {
                    println!(
                        "{}: lb run started after {} printed fix(es): {}",
                        self.name,
                        applied.len(),
                        applied.join("; ")
                    );
                    return pid;
                }
                Err(text) => {
                    let mut fixes = gro_fixes(&text);
                    if fixes.is_empty() && text.contains("gro on") {
                        // The refusal names no runnable command: find the peers as a user
                        // would (the lab's record) so the other tests still run;
                        // lb_run_on_a_default_lab_refuses... fails on this.
                        println!(
                            "{}: the refusal gives no runnable command: {text}",
                            self.name
                        );
                        fixes = self.peer_gro_fixes(&text);
                    }
                    assert!(
                        !fixes.is_empty(),
                        "wirespeed lb run refused without a GRO fix to apply: {text}"
                    );
                    for f in fixes {
                        assert!(!applied.contains(&f), "the printed fix did not take: {f}");
                        let words: Vec<&str> = f.split_whitespace().collect();
                        ok(Command::new(words[0]).args(&words[1..]));
                        applied.push(f);
                    }
                }
            }
        }
        panic!(
            "wirespeed lb run still refuses after {}",
            applied.join("; ")
        );
    }

    /// `ip netns exec NS ethtool -K eth0 gro on` for the peer of each lb interface that
    /// `text` names (every leaf has its one link on eth0).
    fn peer_gro_fixes(&self, text: &str) -> Vec<String> {
        let words: Vec<&str> = text.split(|c: char| !c.is_ascii_alphanumeric()).collect();
        let node = self.lab.node("lb").expect("lb node");
        node.ifaces
            .iter()
            .filter(|i| words.contains(&i.name.as_str()))
            .map(|i| {
                format!(
                    "ip netns exec {} ethtool -K eth0 gro on",
                    self.ns_name(&i.peer)
                )
            })
            .collect()
    }

    /// The daemon's log so far (for failure messages).
    pub fn daemon_log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("lb-run.log")).unwrap_or_default()
    }
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// The commands `ip netns exec NS ethtool -K DEV gro on` in `text`.
pub fn gro_fixes(text: &str) -> Vec<String> {
    let mut out = vec![];
    for line in text.lines() {
        let mut rest = line;
        while let Some(at) = rest.find("ip netns exec ") {
            let tail = &rest[at..];
            let words: Vec<&str> = tail
                .split(|c: char| c.is_whitespace() || "`'\";,".contains(c))
                .filter(|w| !w.is_empty())
                .take(9)
                .collect();
            if words.len() == 9
                && words[4] == "ethtool"
                && words[5] == "-K"
                && words[7] == "gro"
                && words[8] == "on"
            {
                let cmd = words.join(" ");
                if !out.contains(&cmd) {
                    out.push(cmd);
                }
            }
            rest = &tail["ip netns exec ".len()..];
        }
    }
    out
}

#[test]
fn gro_fixes_are_read_from_the_refusal() {
    let t = "lb run: eth2 drops redirected frames (its peer runs no NAPI): ip netns exec ws-x-b0 ethtool -K eth0 gro on\nand `ip netns exec ws-x-b1 ethtool -K eth0 gro on`";
    assert_eq!(
        gro_fixes(t),
        vec![
            "ip netns exec ws-x-b0 ethtool -K eth0 gro on",
            "ip netns exec ws-x-b1 ethtool -K eth0 gro on"
        ]
    );
    assert!(gro_fixes("no fix here").is_empty());
}

/// The data path's pass/drop reasons with a nonzero count (`bpftool map dump name reasons`,
/// summed over CPUs), for failure messages: what the program did with the packets. The names
/// are read from `enum lb_reason` in crates/lb/bpf/lb_consts.h, in order.
pub fn reasons() -> String {
    let header = concat!(env!("CARGO_MANIFEST_DIR"), "/../lb/bpf/lb_consts.h");
    let text = std::fs::read_to_string(header).unwrap_or_default();
    let names: Vec<String> = text
        .split("enum lb_reason {")
        .nth(1)
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with('}'))
        .filter_map(|l| l.strip_prefix("LB_"))
        .map(|l| {
            l.split([' ', ',', '='])
                .next()
                .unwrap_or_default()
                .to_lowercase()
        })
        .collect();
    let out = output(Command::new("bpftool").args(["-j", "map", "dump", "name", "reasons"]));
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) else {
        return format!("(bpftool: {})", String::from_utf8_lossy(&out.stderr).trim());
    };
    // One map gives its elements; several maps of that name give one object per map.
    let arr = v.as_array().cloned().unwrap_or_default();
    let maps: Vec<Vec<serde_json::Value>> = if arr.iter().any(|e| e.get("elements").is_some()) {
        arr.iter()
            .map(|m| m["elements"].as_array().cloned().unwrap_or_default())
            .collect()
    } else {
        vec![arr]
    };
    let mut parts = vec![];
    for (i, elems) in maps.iter().enumerate() {
        let mut mine = vec![];
        for e in elems {
            // With BTF, bpftool gives the raw bytes and a `formatted` copy in numbers.
            let e = e.get("formatted").unwrap_or(e);
            let key = e["key"].as_u64().unwrap_or(0) as usize;
            let sum: u64 = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["value"].as_u64())
                .sum();
            if sum > 0 {
                let name = names.get(key).map_or("?", String::as_str);
                mine.push(format!("{name} {sum}"));
            }
        }
        parts.push(format!("[map {i}] {}", mine.join(", ")));
    }
    format!("data path reasons: {}", parts.join(" "))
}

/// The data path's entries for client source port `port` (every client): per CPU table
/// (`lb_conn<cpu>`) and the shared `rev` table, each as map, client address, key kind (0:
/// the flow, 1: a forward entry), real slot and flags. For failure messages: which real
/// each CPU would send the flow to.
pub fn entries_for_port(port: u16) -> String {
    let mut names: Vec<String> = (0..1024)
        .map(|c| format!("lb_conn{c}"))
        .take_while(|n| {
            output(Command::new("bpftool").args(["map", "show", "name", n]))
                .status
                .success()
        })
        .collect();
    names.push("rev".into());
    let mut out = vec![];
    for name in names {
        let dump = output(Command::new("bpftool").args(["-j", "map", "dump", "name", &name]));
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&dump.stdout) else {
            continue;
        };
        let bytes = |x: &serde_json::Value| -> Vec<u8> {
            x.as_array()
                .into_iter()
                .flatten()
                .filter_map(|b| u8::from_str_radix(b.as_str()?.trim_start_matches("0x"), 16).ok())
                .collect()
        };
        for e in v.as_array().into_iter().flatten() {
            let (k, val) = (bytes(&e["key"]), bytes(&e["value"]));
            if k.len() < 40 || u16::from_be_bytes([k[32], k[33]]) != port {
                continue;
            }
            // lb_conn: real at 0, flags at 7; lb_rev: real at 36, flags at 44.
            let (real, flags) = if name == "rev" && val.len() >= 45 {
                (
                    u32::from_ne_bytes([val[36], val[37], val[38], val[39]]),
                    val[44],
                )
            } else if val.len() >= 8 {
                (u32::from_ne_bytes([val[0], val[1], val[2], val[3]]), val[7])
            } else {
                continue;
            };
            out.push(format!(
                "{name}: client {}.{}.{}.{} kind {} real {real} flags {flags:#x}",
                k[0], k[1], k[2], k[3], k[38]
            ));
        }
    }
    out.join("; ")
}
