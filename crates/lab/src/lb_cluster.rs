//! The `lb-cluster` lab's daemons (docs/LB.md, "A cluster lab"). The router runs Debian's FRR:
//! bgpd learns each VIP from every lb node and zebra installs the equal-cost paths, hashed on
//! the 5-tuple (`fib_multipath_hash_policy` 3 with the ports in `fib_multipath_hash_fields`;
//! policy 1 on a veth would reuse the socket's random hash). Each lb node runs `wirespeed lb
//! run` on both its arms (eth0 on the rack, eth1 on the reals' segment) and ExaBGP with
//! `wirespeed lb announce` as its process, from AS [`NODE_AS`] to the router's [`ROUTER_AS`].
//! BGP is FRR's and ExaBGP's; nothing here speaks it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::daemon::Daemon;
use crate::plan::{RACK, RACK_SUBNET, REALS, REALS_SUBNET};
use crate::state;
use crate::topo::Lab;
use crate::{sh, Error, Result};

pub const ROUTER_AS: u32 = 65000;
pub const NODE_AS: u32 = 65001;
/// The router's address on the rack: the nodes' BGP peer and everyone's gateway.
pub const ROUTER_ADDR: &str = "198.18.1.254";
/// BGP keepalive and hold time on both ends, seconds: a node that dies silently is noticed
/// within the hold time (docs/LB.md, "Several nodes: announcing over BGP").
pub const KEEPALIVE_S: u32 = 1;
pub const HOLD_S: u32 = 3;

/// What the nodes' daemons are started with.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// The `wirespeed` binary the nodes run.
    pub exe: PathBuf,
    /// `lb run --announce-hold-down`, seconds.
    pub hold_down_s: f64,
    /// `lb run --drain`, seconds.
    pub drain_s: f64,
}

/// The directory of a cluster lab's configs, sockets and logs.
pub fn run_dir(lab: &str) -> PathBuf {
    state::state_dir().join(lab)
}

/// The control socket of node `role` (`lb0`...), for `wirespeed lb ... --socket`.
pub fn socket(run_dir: &Path, role: &str) -> PathBuf {
    run_dir.join(format!("{role}.sock"))
}

/// The directory of the router's vty sockets, for `vtysh --vty_socket`.
pub fn router_vty(run_dir: &Path) -> PathBuf {
    run_dir.join("rt")
}

/// Node `role`'s address on the rack.
fn node_addr(lab: &Lab, role: &str) -> Result<String> {
    lab.node(role)
        .and_then(|n| n.addr4())
        .map(|a| a.to_string())
        .ok_or_else(|| Error::Invalid(format!("lb-cluster: node {role} has no address")))
}

fn lb_roles(lab: &Lab) -> Vec<String> {
    let roles = lab.record().nodes.iter().map(|n| n.role.clone());
    roles.filter(|r| r.starts_with("lb")).collect()
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|err| Error::Io {
        what: format!("write {}", path.display()),
        err,
    })
}

/// Starts the router's FRR and every node's daemon and speaker, waits until each node's BGP
/// session is up, and records the daemons in the lab. Returns what it did, one line each.
pub fn start(lab: &mut Lab, opts: &ClusterOptions) -> Result<Vec<String>> {
    let dir = run_dir(lab.name());
    let _ = std::fs::remove_dir_all(&dir);
    let vty = router_vty(&dir);
    std::fs::create_dir_all(&vty).map_err(|err| Error::Io {
        what: format!("create {}", vty.display()),
        err,
    })?;
    // FRR's daemons drop to the frr user; their pid files and sockets live here.
    sh("chown", &["frr:frr", &vty.display().to_string()])?;
    let mut notes = vec![];
    let mut daemons = vec![];
    let started = (|| -> Result<()> {
        notes.extend(start_router(lab, &dir, &mut daemons)?);
        for role in lb_roles(lab) {
            notes.push(start_node(lab, &dir, &role, opts, &mut daemons)?);
        }
        notes.push(wait_for_sessions(lab, &dir, &daemons)?);
        Ok(())
    })();
    lab.set_daemons(dir, daemons)?;
    started.map(|()| notes)
}

fn router_config(lab: &Lab) -> Result<String> {
    let mut c = format!(
        "frr defaults traditional\nhostname rt\n!\nrouter bgp {ROUTER_AS}\n \
         bgp router-id {ROUTER_ADDR}\n no bgp ebgp-requires-policy\n \
         neighbor nodes peer-group\n neighbor nodes remote-as {NODE_AS}\n \
         neighbor nodes timers {KEEPALIVE_S} {HOLD_S}\n neighbor nodes timers connect 1\n"
    );
    for role in lb_roles(lab) {
        c += &format!(" neighbor {} peer-group nodes\n", node_addr(lab, &role)?);
    }
    c += " address-family ipv4 unicast\n  maximum-paths 16\n exit-address-family\n";
    c += " address-family ipv6 unicast\n  neighbor nodes activate\n  maximum-paths 16\n \
          exit-address-family\n";
    Ok(c)
}

/// zebra, then bgpd (which needs zebra's socket), on the router.
fn start_router(lab: &Lab, dir: &Path, daemons: &mut Vec<Daemon>) -> Result<Vec<String>> {
    let rt = lab
        .ns("rt")
        .ok_or_else(|| Error::Invalid("lb-cluster: no router".into()))?;
    let mut notes = vec![];
    // Policy 3 hashes the fields named in fib_multipath_hash_fields, whose default (0x7) has
    // no ports: 0x37 adds them (Documentation/networking/ip-sysctl.rst).
    for v in ["4", "6"] {
        rt.sysctl(&format!("net.ipv{v}.fib_multipath_hash_policy"), "3")?;
        rt.sysctl(&format!("net.ipv{v}.fib_multipath_hash_fields"), "0x37")?;
    }
    notes.push(
        "rt: fib_multipath_hash_policy=3, fib_multipath_hash_fields=0x37 (IPv4 and IPv6: \
         addresses, protocol, ports)"
            .into(),
    );
    // `lb run` needs a NAPI on its veth's peer to take XDP_TX frames (docs/LB.md, "Daemon").
    for bridge in [RACK, REALS] {
        let ports = rt.ip(&["-o", "link", "show", "master", bridge])?;
        for port in ports.lines().filter_map(|l| l.split(':').nth(1)) {
            let port = port.trim().split('@').next().unwrap_or_default();
            rt.exec("ethtool", &["-K", port, "gro", "on"])?;
        }
    }
    notes.push(format!(
        "rt: gro on for the {RACK} and {REALS} ports (the fix lb run names)"
    ));
    let vty = router_vty(dir);
    let v = vty.display().to_string();
    write(&vty.join("zebra.conf"), "hostname rt\n")?;
    write(&vty.join("bgpd.conf"), &router_config(lab)?)?;
    let zserv = format!("{v}/zserv.api");
    let frr = |name: &str| -> Vec<String> {
        let mut a: Vec<String> = [
            format!("/usr/lib/frr/{name}"),
            "-f".into(),
            format!("{v}/{name}.conf"),
            "-i".into(),
            format!("{v}/{name}.pid"),
            "-z".into(),
            zserv.clone(),
            "--vty_socket".into(),
            v.clone(),
        ]
        .into();
        if name == "bgpd" {
            a.extend(["-P".into(), "0".into()]);
        }
        a
    };
    let zebra = Daemon::start(
        rt.name(),
        "rt",
        "zebra",
        &frr("zebra"),
        dir.join("rt-zebra.log"),
    )?;
    daemons.push(zebra);
    wait(Duration::from_secs(10), || Path::new(&zserv).exists()).map_err(|_| {
        Error::Invalid(format!(
            "lb-cluster: zebra did not open {zserv}: {} (is the frr package installed? make deps)",
            daemons[0].log_tail(5)
        ))
    })?;
    daemons.push(Daemon::start(
        rt.name(),
        "rt",
        "bgpd",
        &frr("bgpd"),
        dir.join("rt-bgpd.log"),
    )?);
    notes.push(format!(
        "rt: FRR zebra and bgpd, AS {ROUTER_AS}, maximum-paths 16, timers {KEEPALIVE_S} {HOLD_S}; \
         vtysh --vty_socket {v}"
    ));
    Ok(notes)
}

/// `lb run` on the node's two arms and ExaBGP running `lb announce` against it.
fn start_node(
    lab: &Lab,
    dir: &Path,
    role: &str,
    opts: &ClusterOptions,
    daemons: &mut Vec<Daemon>,
) -> Result<String> {
    let ns = lab
        .ns(role)
        .ok_or_else(|| Error::Invalid(format!("lb-cluster: no node {role}")))?
        .name()
        .to_string();
    let exe = opts.exe.display().to_string();
    let sock = socket(dir, role).display().to_string();
    let run: Vec<String> = [
        &exe,
        "lb",
        "run",
        "--iface",
        "eth0",
        "--iface",
        "eth1",
        "--socket",
        &sock,
        "--announce-hold-down",
        &opts.hold_down_s.to_string(),
        "--drain",
        &opts.drain_s.to_string(),
    ]
    .map(String::from)
    .into();
    let lb = Daemon::start(
        &ns,
        role,
        "lb run",
        &run,
        dir.join(format!("{role}-lb.log")),
    )?;
    let answered = wait(Duration::from_secs(20), || {
        sh(&exe, &["lb", "-L", "-n", "--socket", &sock]).is_ok() || !lb.alive()
    });
    if answered.is_err() || !lb.alive() {
        return Err(Error::Invalid(format!(
            "lb-cluster: lb run on {role} did not start: {}",
            lb.log_tail(5)
        )));
    }
    daemons.push(lb);
    let addr = node_addr(lab, role)?;
    // IPv6 routes over this IPv4 session need an IPv6 next hop, the node's on the rack (IPv4
    // stays `self`); not `self,ADDR`: ExaBGP splits its `run` line at commas.
    let addr6 = lab
        .node(role)
        .and_then(|n| n.ifaces.first())
        .and_then(|i| i.v6.split('/').next().map(str::to_string))
        .ok_or_else(|| Error::Invalid(format!("lb-cluster: node {role} has no IPv6 address")))?;
    let conf = dir.join(format!("{role}-exabgp.conf"));
    write(
        &conf,
        &format!(
            "process lb {{\n    run {exe} lb announce --socket {sock} --next-hop {addr6};\n    \
             encoder text;\n}}\n\
             neighbor {ROUTER_ADDR} {{\n    router-id {addr};\n    local-address {addr};\n    \
             local-as {NODE_AS};\n    peer-as {ROUTER_AS};\n    hold-time {HOLD_S};\n    \
             family {{\n        ipv4 unicast;\n        ipv6 unicast;\n    }}\n    api {{\n        \
             processes [ lb ];\n        neighbor-changes;\n    }}\n}}\n"
        ),
    )?;
    // Root, so that `lb announce` may open the daemon's 0600 socket; no CLI pipes.
    let exabgp: Vec<String> = [
        "env",
        "exabgp.daemon.user=root",
        "exabgp.daemon.drop=false",
        "exabgp.api.cli=false",
        "exabgp.log.destination=stdout",
        "exabgp",
        &conf.display().to_string(),
    ]
    .map(String::from)
    .into();
    let log = dir.join(format!("{role}-exabgp.log"));
    daemons.push(Daemon::start(&ns, role, "exabgp", &exabgp, log)?);
    Ok(format!(
        "{role}: lb run on eth0 ({addr}, the rack) and eth1 (the reals), wirespeed lb ... --socket {sock}; ExaBGP AS {NODE_AS}"
    ))
}

/// The BGP state of each neighbour of the router, by address.
pub fn sessions(run_dir: &Path) -> Result<Vec<(String, String)>> {
    let v = router_vty(run_dir).display().to_string();
    let out = sh(
        "vtysh",
        &[
            "--vty_socket",
            &v,
            "-d",
            "bgpd",
            "-c",
            "show bgp summary json",
        ],
    )?;
    let json: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    let peers = json["ipv4Unicast"]["peers"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    Ok(peers
        .into_iter()
        .map(|(addr, p)| (addr, p["state"].as_str().unwrap_or("?").to_string()))
        .collect())
}

fn wait_for_sessions(lab: &Lab, dir: &Path, daemons: &[Daemon]) -> Result<String> {
    let n = lb_roles(lab).len();
    let t = Instant::now();
    let up =
        || sessions(dir).is_ok_and(|s| s.iter().filter(|(_, st)| st == "Established").count() == n);
    if wait(Duration::from_secs(30), up).is_err() {
        let exabgp = daemons.iter().find(|d| d.what == "exabgp");
        return Err(Error::Invalid(format!(
            "lb-cluster: BGP sessions not up after 30 s: {:?}; ExaBGP says: {}",
            sessions(dir).unwrap_or_default(),
            exabgp.map(|d| d.log_tail(5)).unwrap_or_default()
        )));
    }
    Ok(format!(
        "rt: {n} BGP sessions established in {:.1} s; the rack is {RACK} (198.18.{RACK_SUBNET}.0/24), the reals' segment {REALS} (198.18.{REALS_SUBNET}.0/24)",
        t.elapsed().as_secs_f64()
    ))
}

/// Polls `done` every 100 ms until it holds or `limit` passes.
fn wait(limit: Duration, mut done: impl FnMut() -> bool) -> std::result::Result<(), ()> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if done() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(())
}
