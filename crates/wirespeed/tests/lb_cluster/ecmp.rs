//! What the router's kernel does with each held connection: `ip route get` with its 5-tuple as
//! it arrives on its client's link (fib_multipath_hash_policy 3 hashes exactly that), on the
//! lab's router or on a namespace that stands in for a router with other nexthop groups; and a
//! resilient group on the lab's router that follows BGP's paths.

use std::net::IpAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::held::Conn;
use super::{node_addr, ns, router_paths, Mode, MODES, NODES, PORT};
use crate::lb_common::{ok, output};

/// The node the router's kernel sends each connection to now: `ip route get` with its
/// 5-tuple, as it arrives on the client's link (the hash of fib_multipath_hash_policy 3).
pub fn route_nodes(conns: &[Conn]) -> Vec<usize> {
    route_nodes_in(&ns("rt"), &conns.iter().collect::<Vec<_>>())
}

pub fn route_nodes_in(router: &str, conns: &[&Conn]) -> Vec<usize> {
    let batch: String = conns
        .iter()
        .map(|k| {
            format!(
                "route get {} from {} iif eth{} ipproto tcp sport {} dport {PORT}\n",
                k.mode.vip(),
                k.mode.client(k.client),
                k.client,
                k.sport
            )
        })
        .collect();
    let file = std::env::temp_dir().join(format!("ws-cluster-batch-{}", std::process::id()));
    std::fs::write(&file, batch).unwrap();
    let out = ok(Command::new("ip").args(["-n", router, "-batch", &file.display().to_string()]));
    let _ = std::fs::remove_file(&file);
    let nodes: Vec<usize> = out
        .lines()
        .filter(|l| l.contains(" via "))
        .map(|l| {
            let mut via = l.split(" via ").nth(1).unwrap().split_whitespace();
            // IPv6 answers name the family: `via inet6 fd00:1::a`.
            let a: IpAddr = via.find(|w| *w != "inet6").unwrap().parse().unwrap();
            let node = |n: usize| MODES.iter().any(|m| m.node(n) == a);
            (0..NODES).find(|&n| node(n)).unwrap_or(usize::MAX)
        })
        .collect();
    assert_eq!(nodes.len(), conns.len(), "ip route get answered: {out}");
    nodes
}

/// What a resilient nexthop group on the router would change when node `gone` leaves, asked of
/// the kernel: a namespace with the router's hash settings and addresses answers `ip route get`
/// for every held connection, first through a resilient group of the three nodes and a
/// hash-threshold one (what FRR's zebra installs), then through each without `gone`. Returns
/// the connections of the other nodes each moved: (resilient, hash-threshold).
pub fn moved_without(conns: &[Conn], gone: usize) -> (usize, usize) {
    // The stand-in router has IPv4 links only.
    let conns: Vec<&Conn> = conns.iter().filter(|k| !k.mode.v6()).collect();
    let name = ns("rh");
    let _ = output(Command::new("ip").args(["netns", "del", &name]));
    ok(Command::new("ip").args(["netns", "add", &name]));
    let ip = |args: &[&str]| ok(Command::new("ip").args(["-n", &name]).args(args));
    let sys = |k: &str, v: &str| {
        ok(Command::new("ip").args(["netns", "exec", &name, "sysctl", "-qw", &format!("{k}={v}")]))
    };
    sys("net.ipv4.ip_forward", "1");
    sys("net.ipv4.fib_multipath_hash_policy", "3");
    sys("net.ipv4.fib_multipath_hash_fields", "0x37");
    // Veth pairs inside the namespace stand in for its links (this kernel has no dummy).
    for (dev, addr) in [
        ("rack", "198.18.1.254/24"),
        ("eth0", "198.18.10.254/24"),
        ("eth1", "198.18.11.254/24"),
    ] {
        let peer = format!("{dev}p");
        ip(&["link", "add", dev, "type", "veth", "peer", "name", &peer]);
        ip(&["addr", "add", addr, "dev", dev]);
        ip(&["link", "set", dev, "up"]);
        ip(&["link", "set", &peer, "up"]);
    }
    for n in 0..NODES {
        let id = (1 + n).to_string();
        ip(&[
            "nexthop",
            "add",
            "id",
            &id,
            "via",
            &node_addr(n).to_string(),
            "dev",
            "rack",
        ]);
    }
    let all = "1/2/3";
    let left: Vec<String> = (0..NODES)
        .filter(|&n| n != gone)
        .map(|n| (1 + n).to_string())
        .collect();
    let left = left.join("/");
    let mut moved = vec![];
    for kind in ["resilient", "mpath"] {
        let group = |members: &str, verb: &str| {
            let mut a = vec!["nexthop", verb, "id", "100", "group", members, "type", kind];
            if kind == "resilient" {
                a.extend(["buckets", "512"]);
            }
            ip(&a);
        };
        group(all, "replace");
        for m in v4_modes() {
            ip(&["route", "replace", &m.prefix(), "nhid", "100"]);
        }
        let before = route_nodes_in(&name, &conns);
        group(&left, "replace");
        let after = route_nodes_in(&name, &conns);
        let n = before
            .iter()
            .zip(&after)
            .filter(|(b, a)| **b != gone && b != a)
            .count();
        moved.push(n);
        for m in v4_modes() {
            ip(&["route", "del", &m.prefix()]);
        }
        ip(&["nexthop", "del", "id", "100"]);
    }
    let _ = output(Command::new("ip").args(["netns", "del", &name]));
    (moved[0], moved[1])
}

/// A resilient nexthop group on the lab's router that follows BGP. FRR 8.4's zebra installs
/// BGP's paths as a hash-threshold group only, so this keeps a resilient group (id 900, one
/// nexthop 901.. per node) equal to the paths zebra installed for the VIPs, and sends the IPv4
/// VIPs through it by policy routing (table 900), which zebra neither reads nor writes: what a
/// routing daemon that installs resilient groups does. BGP stays FRR's and ExaBGP's.
pub struct Resilient {
    stop: Arc<AtomicBool>,
    follower: Option<JoinHandle<usize>>,
}

const GROUP: &str = "900";

fn rt_ip(args: &[&str]) -> std::process::Output {
    output(Command::new("ip").args(["-n", &ns("rt")]).args(args))
}

/// The nodes zebra routes the DR VIP to (every IPv4 VIP has the same paths).
fn bgp_nodes() -> Vec<usize> {
    let hops = router_paths(Mode::Dr.vip());
    (0..NODES)
        .filter(|&n| hops.contains(&IpAddr::from(node_addr(n))))
        .collect()
}

/// Makes group 900 the resilient group of `nodes`' nexthops.
fn set_group(nodes: &[usize]) {
    let members: Vec<String> = nodes.iter().map(|n| (901 + n).to_string()).collect();
    let members = members.join("/");
    let set = ["nexthop", "replace", "id", GROUP, "group", &members];
    ok(Command::new("ip").args(["-n", &ns("rt")]).args(set).args([
        "type",
        "resilient",
        "buckets",
        "512",
    ]));
}

fn v4_modes() -> impl Iterator<Item = Mode> {
    MODES.into_iter().filter(|m| !m.v6())
}

impl Resilient {
    /// Builds the group from the paths BGP has now and follows them every 20 ms.
    pub fn follow() -> Resilient {
        for n in 0..NODES {
            let id = (901 + n).to_string();
            let via = node_addr(n).to_string();
            ok(Command::new("ip")
                .args(["-n", &ns("rt"), "nexthop", "replace", "id", &id])
                .args(["via", &via, "dev", "rack"]));
        }
        let mut nodes = bgp_nodes();
        assert!(!nodes.is_empty(), "no BGP paths to follow");
        set_group(&nodes);
        for m in v4_modes() {
            let p = m.prefix();
            ok(Command::new("ip").args([
                "-n",
                &ns("rt"),
                "route",
                "replace",
                &p,
                "nhid",
                GROUP,
                "table",
                GROUP,
            ]));
            ok(Command::new("ip").args([
                "-n",
                &ns("rt"),
                "rule",
                "add",
                "to",
                &p,
                "lookup",
                GROUP,
                "pref",
                GROUP,
            ]));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let follower = std::thread::spawn(move || {
            let mut changes = 0;
            while !stopped.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
                let now = bgp_nodes();
                if now != nodes && !now.is_empty() {
                    set_group(&now);
                    nodes = now;
                    changes += 1;
                }
            }
            changes
        });
        Resilient {
            stop,
            follower: Some(follower),
        }
    }

    /// Stops following; the times the group changed.
    pub fn changes(mut self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.follower.take().map_or(0, |f| f.join().unwrap())
    }
}

impl Drop for Resilient {
    /// The router goes back to zebra's routes alone.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(f) = self.follower.take() {
            let _ = f.join();
        }
        for m in v4_modes() {
            let _ = rt_ip(&["rule", "del", "to", &m.prefix(), "lookup", GROUP]);
        }
        let _ = rt_ip(&["route", "flush", "table", GROUP]);
        let _ = rt_ip(&["nexthop", "del", "id", GROUP]);
        for n in 0..NODES {
            let _ = rt_ip(&["nexthop", "del", "id", &(901 + n).to_string()]);
        }
    }
}
