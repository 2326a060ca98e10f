//! The cluster lab's site (docs/LB.md, "A cluster lab"): `wirespeed lab up lb-cluster` as a
//! user runs it, the reals prepared for DR and tunnel as `lb doctor --real` asks, one `mh`
//! service per mode on every node, and the router's paths to the VIPs.

pub mod ecmp;
pub mod held;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::lb_common::{bin, ok, output, wait_for, Procs};

pub const LAB: &str = "clt";
pub const PORT: u16 = 6379;
pub const BACKENDS: usize = 4;
pub const NODES: usize = 3;
pub const HOLD_DOWN_S: f64 = 1.0;
pub const DRAIN: Duration = Duration::from_secs(3);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    Dr,
    Tunnel,
    FullNat,
    /// DR to the reals' IPv6 addresses under an IPv6 VIP: a /128 route over the same sessions.
    Dr6,
}

pub const MODES: [Mode; 4] = [Mode::Dr, Mode::Tunnel, Mode::FullNat, Mode::Dr6];

impl Mode {
    pub fn flag(self) -> &'static str {
        match self {
            Mode::Dr | Mode::Dr6 => "-g",
            Mode::Tunnel => "-i",
            Mode::FullNat => "-b",
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Mode::Dr => "DR",
            Mode::Tunnel => "tunnel",
            Mode::FullNat => "full-NAT",
            Mode::Dr6 => "DR IPv6",
        }
    }
    pub fn v6(self) -> bool {
        self == Mode::Dr6
    }
    pub fn vip(self) -> IpAddr {
        match self {
            Mode::Dr6 => Ipv6Addr::new(0xfd00, 0xc8, 0, 0, 0, 0, 0, 1).into(),
            m => Ipv4Addr::new(198, 18, 200, 1 + m as u8).into(),
        }
    }
    /// The VIP's host route, as the router holds it.
    pub fn prefix(self) -> String {
        format!("{}/{}", self.vip(), if self.v6() { 128 } else { 32 })
    }
    /// Real `j`, node `n` and client `c` in this mode's family.
    pub fn rip(self, j: usize) -> IpAddr {
        if self.v6() {
            Ipv6Addr::new(0xfd00, 2, 0, 0, 0, 0, 0, 100 + j as u16).into()
        } else {
            rip(j).into()
        }
    }
    pub fn node(self, n: usize) -> IpAddr {
        if self.v6() {
            Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 0, 10 + n as u16).into()
        } else {
            node_addr(n).into()
        }
    }
    pub fn client(self, c: usize) -> IpAddr {
        if self.v6() {
            Ipv6Addr::new(0xfd00, 10 + c as u16, 0, 0, 0, 0, 0, 1).into()
        } else {
            Ipv4Addr::new(198, 18, 10 + c as u8, 1).into()
        }
    }
    /// `ADDR:PORT` of real `j` as ipvsadm takes it.
    pub fn real(self, j: usize) -> String {
        std::net::SocketAddr::new(self.rip(j), PORT).to_string()
    }
    pub fn service(self) -> String {
        std::net::SocketAddr::new(self.vip(), PORT).to_string()
    }
    /// Whether a connection that ECMP moves to another node keeps its real (docs/LB.md,
    /// "Modes in a cluster"): DR and tunnel with `mh` do; full-NAT's state lives on one node.
    pub fn survives_moves(self) -> bool {
        self != Mode::FullNat
    }
}

/// Real `j` on the reals' segment, which every node's second arm is on.
pub fn rip(j: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 2, 100 + j as u8)
}
pub fn node_addr(n: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 1, 10 + n as u8)
}
/// Node `n`'s full-NAT local address, announced by that node alone.
pub fn laddr(n: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 250, 1 + n as u8)
}
pub fn ns(role: &str) -> String {
    format!("ws-{LAB}-{role}")
}

/// The lab, up while this lives; the reals' processes are in `procs` (dropped first).
pub struct Cluster {
    procs: Procs,
    run_dir: PathBuf,
    /// The daemons `lab up` started, as `lab list --json` records them.
    daemons: Vec<serde_json::Value>,
    logs: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // The processes go with the namespaces: lab down kills whatever runs in them.
        self.procs = Procs::default();
        let _ = output(Command::new(bin()).args(["lab", "down", LAB]));
        let _ = std::fs::remove_dir_all(&self.logs);
    }
}

impl Cluster {
    pub fn up() -> Cluster {
        wirespeed_lab::require_root();
        let _ = output(Command::new(bin()).args(["lab", "down", LAB]));
        let up = ok(Command::new(bin()).args([
            "lab",
            "up",
            "lb-cluster",
            "--name",
            LAB,
            "--announce-hold-down",
            &HOLD_DOWN_S.to_string(),
            "--drain",
            &DRAIN.as_secs_f64().to_string(),
        ]));
        print!("{up}");
        let labs: serde_json::Value =
            serde_json::from_str(&ok(Command::new(bin()).args(["lab", "list", "--json"])))
                .expect("lab list --json");
        let rec = labs
            .as_array()
            .and_then(|a| a.iter().find(|l| l["name"] == LAB))
            .expect("the lab's record")
            .clone();
        let logs = std::env::temp_dir().join(format!("ws-lb-cluster-{}", std::process::id()));
        std::fs::create_dir_all(&logs).unwrap();
        Cluster {
            procs: Procs::default(),
            run_dir: PathBuf::from(rec["run_dir"].as_str().expect("run_dir")),
            daemons: rec["daemons"].as_array().cloned().unwrap_or_default(),
            logs,
        }
    }

    pub fn socket(&self, n: usize) -> String {
        self.run_dir
            .join(format!("lb{n}.sock"))
            .display()
            .to_string()
    }

    pub fn lb(&self, n: usize, args: &[&str]) -> String {
        ok(Command::new(bin())
            .arg("lb")
            .args(args)
            .args(["--socket", &self.socket(n)]))
    }

    pub fn daemon(&self, n: usize, what: &str) -> &serde_json::Value {
        let role = format!("lb{n}");
        self.daemons
            .iter()
            .find(|d| d["role"] == role.as_str() && d["what"] == what)
            .unwrap_or_else(|| panic!("no {what} on {role} in the lab's record"))
    }

    pub fn pid(&self, n: usize, what: &str) -> u32 {
        self.daemon(n, what)["pid"].as_u64().unwrap() as u32
    }

    /// Starts node `n`'s `what` again with the command line `lab up` gave it.
    pub fn restart(&mut self, n: usize, what: &str) {
        let d = self.daemon(n, what).clone();
        let argv: Vec<String> = d["argv"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect();
        let args: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
        let log = self
            .logs
            .join(format!("lb{n}-{}.log", what.replace(' ', "-")));
        let pid = self
            .procs
            .spawn(what, d["ns"].as_str().unwrap(), &argv[0], &args, &log);
        let role = format!("lb{n}");
        let entry = self
            .daemons
            .iter_mut()
            .find(|d| d["role"] == role.as_str() && d["what"] == what)
            .unwrap();
        entry["pid"] = pid.into();
        if what == "lb run" {
            let up = wait_for(Duration::from_secs(20), || {
                output(Command::new(bin()).args(["lb", "-L", "-n", "--socket", &self.socket(n)]))
                    .status
                    .success()
                    .then_some(())
            });
            assert!(
                up.is_some(),
                "lb run on lb{n} did not come back: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
    }

    /// The nexthops the router's kernel has for `vip`.
    pub fn paths(&self, vip: impl Into<IpAddr>) -> Vec<IpAddr> {
        router_paths(vip.into())
    }

    /// The router's port of node `n` on `bridge` (`rack` or `reals`), to shut.
    pub fn port(&self, n: usize, bridge: &str) -> String {
        let ports =
            ok(Command::new("ip").args(["-n", &ns("rt"), "-o", "link", "show", "master", bridge]));
        ports
            .lines()
            .find(|l| l.contains(&format!("link-netns {}", ns(&format!("lb{n}")))))
            .and_then(|l| l.split(':').nth(1))
            .and_then(|p| p.trim().split('@').next())
            .unwrap_or_else(|| panic!("lb{n}'s port on {bridge}: {ports}"))
            .to_string()
    }

    /// Whether the router's BGP session with node `n` is established.
    pub fn session_up(&self, n: usize) -> bool {
        let sessions = wirespeed_lab::lb_cluster::sessions(&self.run_dir).unwrap_or_default();
        let addr = node_addr(n).to_string();
        sessions
            .iter()
            .any(|(a, st)| *a == addr && st == "Established")
    }

    /// The BGP UPDATE messages the router has received from node `n`.
    pub fn updates_from(&self, n: usize) -> u64 {
        let vty = self.run_dir.join("rt").display().to_string();
        let addr = node_addr(n).to_string();
        let out = ok(Command::new("vtysh").args([
            "--vty_socket",
            &vty,
            "-d",
            "bgpd",
            "-c",
            &format!("show bgp neighbors {addr} json"),
        ]));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        v[&addr]["messageStats"]["updatesRecv"]
            .as_u64()
            .unwrap_or_else(|| panic!("no update count for {addr} in {out}"))
    }

    /// Waits until every VIP has exactly the paths of `nodes`; the time it took.
    pub fn until_paths(&self, nodes: &[usize], what: &str) -> Duration {
        let t = Instant::now();
        let done = wait_for(Duration::from_secs(20), || {
            MODES
                .iter()
                .all(|&m| self.paths(m.vip()) == want(m, nodes))
                .then_some(())
        });
        assert!(
            done.is_some(),
            "{what}: the router's paths to the VIPs are {:?}, want the nodes {nodes:?}",
            MODES.map(|m| self.paths(m.vip()))
        );
        t.elapsed()
    }
}

/// The router's paths to `m`'s VIP when `nodes` announce it, sorted as [`Cluster::paths`].
pub fn want(m: Mode, nodes: &[usize]) -> Vec<IpAddr> {
    let mut want: Vec<IpAddr> = nodes.iter().map(|&n| m.node(n)).collect();
    want.sort();
    want
}

/// The nexthops the router's kernel has for `vip` in its main table, where zebra installs what
/// BGP chose.
pub fn router_paths(vip: IpAddr) -> Vec<IpAddr> {
    let (family, len) = if vip.is_ipv6() {
        ("-6", 128)
    } else {
        ("-4", 32)
    };
    let prefix = format!("{vip}/{len}");
    let out =
        output(Command::new("ip").args(["-n", &ns("rt"), "-j", family, "route", "show", &prefix]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let mut hops = vec![];
    for r in v.as_array().into_iter().flatten() {
        if let Some(g) = r["gateway"].as_str() {
            hops.extend(g.parse::<IpAddr>().ok());
        }
        for h in r["nexthops"].as_array().into_iter().flatten() {
            hops.extend(h["gateway"].as_str().and_then(|g| g.parse::<IpAddr>().ok()));
        }
    }
    hops.sort();
    hops
}

/// Every real holds the DR and tunnel VIPs on `lo` and answers no ARP for them, filters no
/// reverse path, decapsulates the tunnel VIP (`lb decap`: this kernel may lack ipip) and
/// advertises an MSS that fits the tunnel; then redis answers on its RIP and both VIPs, and
/// `lb doctor --real` finds nothing to fix.
pub fn prepare_reals(c: &mut Cluster) {
    let (dr, tun) = (Mode::Dr.vip().to_string(), Mode::Tunnel.vip().to_string());
    let dr6 = Mode::Dr6.vip().to_string();
    for j in 0..BACKENDS {
        let role = format!("r{j}");
        let n = ns(&role);
        let ip = |args: &[&str]| ok(Command::new("ip").args(["-n", &n]).args(args));
        for v in [&dr, &tun] {
            ip(&["addr", "add", &format!("{v}/32"), "dev", "lo"]);
        }
        ip(&["-6", "addr", "add", &Mode::Dr6.prefix(), "dev", "lo"]);
        let mut sysctls = vec![];
        for dev in ["all", "default", "lo", "eth0"] {
            sysctls.push(format!("net.ipv4.conf.{dev}.rp_filter=0"));
        }
        for dev in ["all", "eth0"] {
            sysctls.push(format!("net.ipv4.conf.{dev}.arp_ignore=1"));
            sysctls.push(format!("net.ipv4.conf.{dev}.arp_announce=2"));
        }
        ok(Command::new("ip")
            .args(["netns", "exec", &n, "sysctl", "-qw"])
            .args(&sysctls));
        ip(&[
            "route",
            "change",
            "default",
            "via",
            "198.18.2.254",
            "dev",
            "eth0",
            "advmss",
            "1440",
        ]);
        let log = c.logs.join(format!("decap-{role}.log"));
        c.procs.spawn(
            "lb decap",
            &n,
            bin(),
            &["lb", "decap", "--iface", "eth0", "--vip", &tun],
            &log,
        );
        let attached = wait_for(Duration::from_secs(15), || {
            let link = output(Command::new("ip").args(["-n", &n, "-d", "link", "show", "eth0"]));
            String::from_utf8_lossy(&link.stdout)
                .contains("prog/xdp")
                .then_some(())
        });
        assert!(attached.is_some(), "lb decap on {role} did not attach");
        let dir = c.logs.join(format!("redis-{role}"));
        std::fs::create_dir_all(&dir).unwrap();
        let (rip_s, dir_s) = (rip(j).to_string(), dir.display().to_string());
        let rip6 = Mode::Dr6.rip(j).to_string();
        c.procs.spawn(
            "redis-server",
            &n,
            "redis-server",
            &[
                "--bind",
                &rip_s,
                &dr,
                &tun,
                &rip6,
                &dr6,
                "--port",
                "6379",
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
                "--logfile",
                "",
                "--dir",
                &dir_s,
                "--maxclients",
                "10000",
            ],
            &c.logs.join(format!("redis-{role}.log")),
        );
        let dr_vips = format!("{dr},{dr6}");
        for (vips, mode) in [(&dr_vips, "dr"), (&tun, "tunnel")] {
            let out = output(Command::new(bin()).args([
                "lb", "doctor", "--real", vips, "--mode", mode, "--netns", &n,
            ]));
            assert!(
                out.status.success(),
                "doctor --real on {role} ({mode}): {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
    }
}

/// Node `n`'s services, its reals added in an order of its own (the tables must still agree),
/// and a blackhole route for each VIP, as `lb doctor` asks of a node that announces.
pub fn configure_node(c: &Cluster, n: usize) {
    for m in MODES {
        let vip = m.service();
        c.lb(n, &["-A", "-t", &vip, "-s", "mh"]);
        for k in 0..BACKENDS {
            c.lb(
                n,
                &[
                    "-a",
                    "-t",
                    &vip,
                    "-r",
                    &m.real((k + n) % BACKENDS),
                    m.flag(),
                ],
            );
        }
        if m == Mode::FullNat {
            c.lb(n, &["--add-laddr", "-z", &laddr(n).to_string(), "-t", &vip]);
        }
        let family = if m.v6() { "-6" } else { "-4" };
        let _ = output(Command::new("ip").args([
            "-n",
            &ns(&format!("lb{n}")),
            family,
            "route",
            "replace",
            "blackhole",
            &m.prefix(),
        ]));
    }
}

/// The `table_digest` of each service on node `n`, by VIP.
pub fn digests(c: &Cluster, n: usize) -> Vec<(String, String)> {
    let v: serde_json::Value = serde_json::from_str(&c.lb(n, &["-L", "-n", "--json"])).unwrap();
    let mut out: Vec<(String, String)> = v["services"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["key"]["vip"].as_str().unwrap_or("").to_string(),
                s["table_digest"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    out.sort();
    out
}
