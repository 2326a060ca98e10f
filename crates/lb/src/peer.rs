//! `wirespeed lb doctor --peer`: this node's listing against another node's. Load balancers
//! behind one ECMP route must send a flow to the same real whichever of them it reaches, so
//! their services, reals, weights, health and ring size must agree, and then so do their tables
//! (docs/LB.md, "Several nodes: tables that agree"). Each difference is one [`Problem`].

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use crate::control::{self, Reply, Request};
use crate::doctor::Problem;
use crate::error::io;
use crate::listing::{health_word, ListView, RealView, ServiceView};
use crate::model::{Health, ServiceKey, Tunnel};
use crate::{Error, Result};

/// The peer's listing: asked of its daemon when `path` is a unix socket, else read from a file
/// holding its `wirespeed lb -L -n --json`.
pub fn peer_view(path: &Path) -> Result<ListView> {
    let meta = std::fs::metadata(path).map_err(io(format!("--peer {}", path.display())))?;
    if meta.file_type().is_socket() {
        return match control::request(path, &Request::View)? {
            Reply::List(view) => Ok(view),
            Reply::Error(e) => Err(Error::Invalid(format!(
                "the peer's daemon on {}: {e}",
                path.display()
            ))),
            Reply::Done { .. } | Reply::Announceable(_) => Err(Error::Invalid(format!(
                "the daemon on {} answered with something else than its configuration; are both the same wirespeed version?",
                path.display()
            ))),
        };
    }
    let text =
        std::fs::read_to_string(path).map_err(io(format!("read --peer {}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| {
        Error::Invalid(format!(
            "--peer {} is not a load balancer's listing ({e}); write it on the peer with `wirespeed lb -L -n --json > FILE`",
            path.display()
        ))
    })
}

/// Every difference between this node's listing (`here`) and the peer's, one line each: the
/// ring size, services present on one side only, schedulers, reals, their weights, forwarding
/// and health; and, where none of those explains it, the lookup tables' digests. The flow
/// hash that indexes the tables has no seed (bpf/lb_pkt.h, `flow_hash`): nothing else to compare.
pub fn compare(here: &ListView, peer: &ListView) -> Vec<Problem> {
    let mut out = Vec::new();
    if here.ring_size != peer.ring_size {
        out.push(Problem {
            problem: format!(
                "ring size {} here, {} on the peer, so every mh table differs",
                here.ring_size, peer.ring_size
            ),
            fix: "start both daemons with the same size: wirespeed lb run --ring-size N"
                .to_string(),
        });
    }
    let (ours, theirs) = (services_by_key(here), services_by_key(peer));
    let keys: BTreeSet<ServiceKey> = ours.keys().chain(theirs.keys()).copied().collect();
    for key in keys {
        match (ours.get(&key), theirs.get(&key)) {
            (Some(s), None) => out.push(one_side_service(
                s,
                "here, not on the peer",
                "on the peer",
                "here",
            )),
            (None, Some(s)) => out.push(one_side_service(
                s,
                "on the peer, not here",
                "here",
                "on the peer",
            )),
            (Some(a), Some(b)) => {
                let found = compare_service(a, b);
                let explained = !found.is_empty() || here.ring_size != peer.ring_size;
                out.extend(found);
                if !explained {
                    out.extend(compare_digests(a, b));
                }
            }
            (None, None) => {}
        }
    }
    out
}

fn services_by_key(v: &ListView) -> BTreeMap<ServiceKey, &ServiceView> {
    v.services.iter().map(|s| (s.key, s)).collect()
}

fn reals_by_addr(s: &ServiceView) -> BTreeMap<SocketAddr, &RealView> {
    s.reals.iter().map(|r| (r.addr, r)).collect()
}

/// A service one node has and the other lacks: add it where it is missing, or delete it.
fn one_side_service(s: &ServiceView, side: &str, missing: &str, present: &str) -> Problem {
    let flag = s.key.proto.flag();
    Problem {
        problem: format!("service {} {side}", s.key),
        fix: format!(
            "wirespeed lb -A {flag} {} -s {} {missing} (and its reals), or wirespeed lb -D {flag} {} {present}",
            s.key.vip,
            s.scheduler.name(),
            s.key.vip
        ),
    }
}

/// The differences inside one service both nodes have, `a` here and `b` on the peer.
fn compare_service(a: &ServiceView, b: &ServiceView) -> Vec<Problem> {
    let mut out = Vec::new();
    let (flag, vip) = (a.key.proto.flag(), a.key.vip);
    let name = format!("service {}", a.key);
    if a.scheduler != b.scheduler {
        out.push(Problem {
            problem: format!(
                "{name}: scheduler {} here, {} on the peer",
                a.scheduler.name(),
                b.scheduler.name()
            ),
            fix: format!(
                "wirespeed lb -E {flag} {vip} -s {} here, or -s {} on the peer",
                b.scheduler.name(),
                a.scheduler.name()
            ),
        });
    }
    let (ours, theirs) = (reals_by_addr(a), reals_by_addr(b));
    let addrs: BTreeSet<SocketAddr> = ours.keys().chain(theirs.keys()).copied().collect();
    for addr in addrs {
        let (r, p) = match (ours.get(&addr), theirs.get(&addr)) {
            (Some(r), Some(p)) => (r, p),
            (Some(r), None) => {
                out.push(Problem {
                    problem: format!("{name}: real {addr} here, not on the peer"),
                    fix: format!(
                        "wirespeed lb -a {flag} {vip} -r {addr} {} -w {} on the peer, or wirespeed lb -d {flag} {vip} -r {addr} here",
                        real_flags(r),
                        r.weight
                    ),
                });
                continue;
            }
            (None, Some(p)) => {
                out.push(Problem {
                    problem: format!("{name}: real {addr} on the peer, not here"),
                    fix: format!(
                        "wirespeed lb -a {flag} {vip} -r {addr} {} -w {} here, or wirespeed lb -d {flag} {vip} -r {addr} on the peer",
                        real_flags(p),
                        p.weight
                    ),
                });
                continue;
            }
            (None, None) => continue,
        };
        if r.weight != p.weight {
            out.push(Problem {
                problem: format!(
                    "{name}: real {addr} weight {} here, {} on the peer",
                    r.weight, p.weight
                ),
                fix: format!(
                    "wirespeed lb -e {flag} {vip} -r {addr} -w {} here, or -w {} on the peer",
                    p.weight, r.weight
                ),
            });
        }
        if (r.mode, r.tunnel) != (p.mode, p.tunnel) {
            out.push(Problem {
                problem: format!(
                    "{name}: real {addr} forwarded by {} here, {} on the peer",
                    forwarding(r),
                    forwarding(p)
                ),
                fix: format!(
                    "wirespeed lb -e {flag} {vip} -r {addr} {} here, or {} on the peer",
                    real_flags(p),
                    real_flags(r)
                ),
            });
        }
        // Unchecked and up schedule alike; down takes the real out of the table.
        if (r.health == Health::Down) != (p.health == Health::Down) {
            out.push(Problem {
                problem: format!(
                    "{name}: real {addr} {} here, {} on the peer, so the tables differ until the checks agree",
                    health_word(r.health),
                    health_word(p.health)
                ),
                fix: format!(
                    "check the way to {addr} from each node: wirespeed lb doctor (the node that sees it down has the problem)"
                ),
            });
        }
    }
    out
}

/// Digests that differ although everything that fills the table agrees.
fn compare_digests(a: &ServiceView, b: &ServiceView) -> Option<Problem> {
    if a.table_digest == b.table_digest {
        return None;
    }
    let name = format!("service {}", a.key);
    if a.table_digest.is_empty() || b.table_digest.is_empty() {
        let older = if a.table_digest.is_empty() {
            "this node's"
        } else {
            "the peer's"
        };
        return Some(Problem {
            problem: format!(
                "{name}: {older} listing has no table digest (an older wirespeed), so the tables cannot be compared"
            ),
            fix: "run the same wirespeed version on every node".to_string(),
        });
    }
    let sizes = if a.ring_size == b.ring_size {
        String::new()
    } else {
        format!(
            " ({} entries here, {} on the peer)",
            a.ring_size, b.ring_size
        )
    };
    Some(Problem {
        problem: format!(
            "{name}: lookup table digest {} here, {} on the peer{sizes}, though reals, weights and health agree",
            a.table_digest, b.table_digest
        ),
        fix: "run the same wirespeed version on every node (older ones fill the table in the order reals were added)".to_string(),
    })
}

/// `-g`, `-m`, `-b`, or `-i` with the tunnel's options, as `-a` and `-e` take them.
fn real_flags(r: &RealView) -> String {
    format!(
        "{}{}",
        r.mode.flag(),
        r.tunnel.map(Tunnel::save_args).unwrap_or_default()
    )
}

/// The forwarding method as `-L` names it, with a tunnel's encapsulation.
fn forwarding(r: &RealView) -> String {
    match r.tunnel {
        Some(Tunnel::Gue { port, csum }) => format!(
            "{} (GUE port {port}{})",
            r.mode.ipvs_name(),
            if csum { ", checksum" } else { "" }
        ),
        Some(Tunnel::Ipip) => format!("{} (IPIP)", r.mode.ipvs_name()),
        None => r.mode.ipvs_name().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::listing::Rates;
    use crate::model::{Counters, Mode, Proto, Scheduler};

    fn real(addr: &str, weight: u32) -> RealView {
        RealView {
            addr: addr.parse().unwrap(),
            mode: Mode::Dr,
            tunnel: None,
            weight,
            health: Health::Unchecked,
            active_conns: 0,
            inact_conns: 0,
            stats: Counters::default(),
            rate: Rates::default(),
        }
    }

    fn service(vip: &str, scheduler: Scheduler, reals: Vec<RealView>) -> ServiceView {
        ServiceView {
            key: ServiceKey {
                proto: Proto::Tcp,
                vip: vip.parse().unwrap(),
            },
            scheduler,
            ring_size: 65537,
            table_digest: "0123456789abcdef".into(),
            laddrs: vec![],
            toa: true,
            check: None,
            stats: Counters::default(),
            rate: Rates::default(),
            reals,
        }
    }

    fn node() -> ListView {
        ListView {
            ring_size: 65537,
            services: vec![
                service(
                    "198.18.100.1:80",
                    Scheduler::Mh,
                    vec![
                        real("198.18.2.10:8080", 1),
                        real("198.18.2.11:8080", 2),
                        real("198.18.2.12:8080", 1),
                    ],
                ),
                service(
                    "198.18.100.2:53",
                    Scheduler::Mh,
                    vec![real("198.18.2.20:53", 1)],
                ),
            ],
            warnings: vec![],
            ifaces: vec!["eth0".into()],
            announcing: false,
            bgp: None,
        }
    }

    fn problems(here: &ListView, peer: &ListView) -> Vec<String> {
        compare(here, peer)
            .iter()
            .map(|p| p.problem.clone())
            .collect()
    }

    #[test]
    fn nodes_that_agree_have_nothing_to_say_whatever_their_order_and_counters() {
        let here = node();
        let mut peer = node();
        peer.services.reverse();
        peer.services[1].reals.reverse();
        peer.services[1].reals[0].stats.conns = 7;
        peer.services[1].reals[1].health = Health::Up;
        peer.ifaces = vec!["eth1".into()];
        assert_eq!(compare(&here, &peer), vec![]);
    }

    #[test]
    fn each_difference_is_named_on_its_own_line() {
        let here = node();
        let mut peer = node();
        peer.ring_size = 32749;
        let web = &mut peer.services[0];
        web.reals[0].weight = 3;
        web.reals.remove(2);
        web.reals.push(real("198.18.2.13:8080", 1));
        web.reals[1].mode = Mode::Tunnel;
        web.reals[1].tunnel = Some(Tunnel::Gue {
            port: 6080,
            csum: false,
        });
        peer.services[1].scheduler = Scheduler::Rr;
        peer.services
            .push(service("198.18.100.3:443", Scheduler::Wrr, vec![]));
        let found = compare(&here, &peer);
        let lines: Vec<String> = found.iter().map(|p| p.problem.clone()).collect();
        assert_eq!(
            lines,
            [
                "ring size 65537 here, 32749 on the peer, so every mh table differs",
                "service TCP 198.18.100.1:80: real 198.18.2.10:8080 weight 1 here, 3 on the peer",
                "service TCP 198.18.100.1:80: real 198.18.2.11:8080 forwarded by Route here, Tunnel (GUE port 6080) on the peer",
                "service TCP 198.18.100.1:80: real 198.18.2.12:8080 here, not on the peer",
                "service TCP 198.18.100.1:80: real 198.18.2.13:8080 on the peer, not here",
                "service TCP 198.18.100.2:53: scheduler mh here, rr on the peer",
                "service TCP 198.18.100.3:443 on the peer, not here",
            ]
        );
        // Each line says what to run, on which node.
        let fixes: Vec<&str> = found.iter().map(|p| p.fix.as_str()).collect();
        assert_eq!(
            fixes[1],
            "wirespeed lb -e -t 198.18.100.1:80 -r 198.18.2.10:8080 -w 3 here, or -w 1 on the peer"
        );
        assert_eq!(
            fixes[2],
            "wirespeed lb -e -t 198.18.100.1:80 -r 198.18.2.11:8080 -i --tun-type gue --tun-port 6080 --tun-nocsum here, or -g on the peer"
        );
        assert_eq!(
            fixes[3],
            "wirespeed lb -a -t 198.18.100.1:80 -r 198.18.2.12:8080 -g -w 1 on the peer, or wirespeed lb -d -t 198.18.100.1:80 -r 198.18.2.12:8080 here"
        );
        assert_eq!(
            fixes[5],
            "wirespeed lb -E -t 198.18.100.2:53 -s rr here, or -s mh on the peer"
        );
        assert_eq!(
            fixes[6],
            "wirespeed lb -A -t 198.18.100.3:443 -s wrr here (and its reals), or wirespeed lb -D -t 198.18.100.3:443 on the peer"
        );
        assert!(found.iter().all(|p| !p.to_string().contains('\n')));
    }

    #[test]
    fn a_real_down_on_one_node_only_is_named_and_unchecked_counts_as_up() {
        let here = node();
        let mut peer = node();
        peer.services[0].reals[1].health = Health::Down;
        peer.services[0].reals[2].health = Health::Up;
        assert_eq!(
            problems(&here, &peer),
            ["service TCP 198.18.100.1:80: real 198.18.2.11:8080 unchecked here, down on the peer, so the tables differ until the checks agree"]
        );
    }

    #[test]
    fn digests_are_compared_where_nothing_else_explains_them() {
        let here = node();
        let mut peer = node();
        peer.services[1].table_digest = "fedcba9876543210".into();
        peer.services[1].ring_size = 65536;
        assert_eq!(
            problems(&here, &peer),
            ["service TCP 198.18.100.2:53: lookup table digest 0123456789abcdef here, fedcba9876543210 on the peer (65537 entries here, 65536 on the peer), though reals, weights and health agree"]
        );
        // A weight that differs explains the digest: one line, not two.
        peer.services[1].reals[0].weight = 2;
        assert_eq!(problems(&here, &peer).len(), 1);
        // A listing from a version without digests.
        let mut old = node();
        old.services[0].table_digest.clear();
        assert_eq!(
            problems(&here, &old),
            ["service TCP 198.18.100.1:80: the peer's listing has no table digest (an older wirespeed), so the tables cannot be compared"]
        );
    }

    #[test]
    fn the_peer_is_read_from_its_json_listing_or_its_daemons_socket() {
        let dir = std::env::temp_dir().join(format!("ws-lb-peer-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("peer.json");
        std::fs::write(&file, serde_json::to_string_pretty(&node()).unwrap()).unwrap();
        assert_eq!(peer_view(&file).unwrap(), node());
        std::fs::write(&file, "IP Virtual Server version 1.2.1 (size=65537)\n").unwrap();
        let e = peer_view(&file).unwrap_err().to_string();
        assert!(e.contains("wirespeed lb -L -n --json > FILE"), "{e}");
        let e = peer_view(&dir.join("absent")).unwrap_err().to_string();
        assert!(e.starts_with("--peer "), "{e}");

        let socket = dir.join("lb.sock");
        let server = control::Server::bind(&socket).unwrap();
        let serve = std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while std::time::Instant::now() < deadline {
                if let Some(client) = server.accept() {
                    control::serve_client(client, |req| match req {
                        Request::View => Reply::List(node()),
                        other => Reply::Error(format!("unexpected {other:?}")),
                    });
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        });
        let got = peer_view(&socket);
        serve.join().unwrap();
        assert_eq!(got.unwrap(), node());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
