//! What becomes of a service's connections when the router's ECMP moves them to another node
//! (docs/LB.md, "Modes in a cluster"). The other node has no entry for them, and the data path
//! (bpf/lb.bpf.c, `schedule`) places such a packet by its mode and scheduler:
//!
//! - DR and tunnel: a segment without an entry goes where the flow's hash points in the lookup
//!   table. With `mh` that is the same real on every node whose table agrees. With `rr` and
//!   `wrr` a SYN was placed by the CPU's cursor, not the hash, so a TCP connection's later
//!   segments reach another real, which resets it; a UDP flow is always placed by hash, so
//!   it survives.
//! - full-NAT: a TCP segment without an entry is the kernel's (`pass_no_conn`), so the
//!   connection is lost; a UDP flow gets a new local address and port, a new flow to the real.
//! - NAT: the reals answer through their one gateway, so only one node can carry the service.
//!
//! `lb doctor` names those services on a node that announces, with each VIP that lacks a
//! blackhole route and each BGP session that is not up ([`check_node`]).

use std::net::{IpAddr, SocketAddr};

use serde_json::Value;

use crate::doctor::{Host, Problem};
use crate::listing::ListView;
use crate::model::{Mode, Proto, Scheduler, Service, ServiceKey};

/// The fate of a connection that ECMP moves to a node that did not open it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The other node sends it to the same real.
    Survives,
    /// The other node sends it to another real, which resets it.
    Reset,
    /// The other node cannot forward it: its state lived on the node that opened it.
    Lost,
    /// The service cannot run on more than one node at all.
    NotSupported,
}

/// [`after_move`]'s answer: the outcome, and unless the connections survive, what is wrong and
/// the command that fixes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfterMove {
    pub outcome: Outcome,
    pub problem: Option<Problem>,
}

/// What happens to the connections of service `key` (scheduler, reals with their modes) that
/// ECMP moves to another node. A service without reals yet is judged by its scheduler alone.
pub fn after_move(
    key: &ServiceKey,
    scheduler: Scheduler,
    reals: &[(SocketAddr, Mode)],
) -> AfterMove {
    let name = format!("{key} ({})", scheduler.name());
    let proto = key.proto.flag();
    let vip = key.vip;
    let tcp = key.proto == Proto::Tcp;
    let to_mh = if scheduler != Scheduler::Mh && tcp {
        format!("; wirespeed lb -E {proto} {vip} -s mh")
    } else {
        String::new()
    };
    let by_tunnel = |rip: &SocketAddr| {
        format!("forward by tunnel (or DR): wirespeed lb -e {proto} {vip} -r {rip} -i{to_mh}")
    };
    if let Some((rip, _)) = reals.iter().find(|(_, m)| *m == Mode::Nat) {
        return AfterMove {
            outcome: Outcome::NotSupported,
            problem: Some(Problem {
                problem: format!(
                    "{name}: NAT cannot run on several nodes: its reals answer through their one gateway"
                ),
                fix: format!("announce {} from one node only, or {}", vip.ip(), by_tunnel(rip)),
            }),
        };
    }
    if let Some((rip, _)) = reals.iter().find(|(_, m)| *m == Mode::FullNat) {
        let problem = if tcp {
            "connections that ECMP moves to another node are lost: their local port lives on the node that opened them"
        } else {
            "flows that ECMP moves to another node reach the real from another local address and port, as new flows"
        };
        return AfterMove {
            outcome: Outcome::Lost,
            problem: Some(Problem {
                problem: format!("{name}: {problem}"),
                fix: by_tunnel(rip),
            }),
        };
    }
    if scheduler != Scheduler::Mh && tcp {
        return AfterMove {
            outcome: Outcome::Reset,
            problem: Some(Problem {
                problem: format!(
                    "{name}: connections that ECMP moves to another node are reset: there a segment without its entry goes where its hash points, not to the real its SYN was given in turn"
                ),
                fix: format!("wirespeed lb -E {proto} {vip} -s mh"),
            }),
        };
    }
    AfterMove {
        outcome: Outcome::Survives,
        problem: None,
    }
}

/// [`after_move`] for a configured service.
pub fn service_after_move(s: &Service) -> AfterMove {
    let reals: Vec<(SocketAddr, Mode)> = s.reals.iter().map(|r| (r.addr, r.mode)).collect();
    after_move(&s.key, s.scheduler, &reals)
}

/// `lb doctor` on a node that announces its VIPs alongside others (an `lb announce` has
/// connected): each BGP session that is not up ([`crate::session::check_sessions`]), each
/// service whose connections do not survive ECMP moving them to another node, and each VIP
/// without a blackhole route (or a local address). Without one, what the data path passes to the kernel for a VIP, and all of
/// it while the daemon is down and the route not yet withdrawn, is routed back to the router,
/// which sends it here again until its TTL runs out.
pub fn check_node(view: &ListView, host: &Host) -> Vec<Problem> {
    if !view.announcing {
        return Vec::new();
    }
    let local: Vec<IpAddr> = host.addrs(None).into_iter().map(|a| a.1).collect();
    let mut blackholes = Vec::new();
    for family in ["-4", "-6"] {
        blackholes.extend(blackhole_prefixes(&host.ip_json(&[
            family,
            "route",
            "show",
            "table",
            "all",
            "type",
            "blackhole",
        ])));
    }
    let mut out = crate::session::check_sessions(view.bgp.as_ref(), crate::session::unix_now());
    out.extend(check_cluster(view, &blackholes, &local, host));
    out
}

/// [`check_node`] over what the host was found to have: blackhole routes' prefixes and local
/// addresses.
fn check_cluster(
    view: &ListView,
    blackholes: &[(IpAddr, u8)],
    local: &[IpAddr],
    host: &Host,
) -> Vec<Problem> {
    let mut out = Vec::new();
    let mut vips: Vec<IpAddr> = Vec::new();
    for s in &view.services {
        let reals: Vec<_> = s.reals.iter().map(|r| (r.addr, r.mode)).collect();
        out.extend(after_move(&s.key, s.scheduler, &reals).problem);
        if !vips.contains(&s.key.vip.ip()) {
            vips.push(s.key.vip.ip());
        }
    }
    for vip in vips {
        let dropped = local.contains(&vip)
            || blackholes
                .iter()
                .any(|(net, len)| prefix_contains(*net, *len, vip));
        if !dropped {
            out.push(Problem {
                problem: format!(
                    "VIP {vip} has no blackhole route, so its packets that reach the kernel (all of them while the daemon is down) go back to the router and loop"
                ),
                fix: host.fix(&format!(
                    "ip route add blackhole {}",
                    crate::announce::host_prefix(vip)
                )),
            });
        }
    }
    out
}

/// The prefixes of `ip -j route show type blackhole`: `dst` is an address for a host route,
/// `ADDR/LEN` otherwise, or `default`.
fn blackhole_prefixes(routes: &Value) -> Vec<(IpAddr, u8)> {
    routes
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["type"] == "blackhole")
        .filter_map(|r| {
            let dst = r["dst"].as_str()?;
            if dst == "default" {
                return Some(if r["family"] == "inet6" || dst.contains(':') {
                    (IpAddr::from([0u16; 8]), 0)
                } else {
                    (IpAddr::from([0u8; 4]), 0)
                });
            }
            match dst.split_once('/') {
                Some((a, l)) => Some((a.parse().ok()?, l.parse().ok()?)),
                None => {
                    let a: IpAddr = dst.parse().ok()?;
                    Some((a, if a.is_ipv4() { 32 } else { 128 }))
                }
            }
        })
        .collect()
}

fn prefix_contains(net: IpAddr, len: u8, a: IpAddr) -> bool {
    let (net, a, bits) = match (net, a) {
        (IpAddr::V4(n), IpAddr::V4(a)) => (u32::from(n) as u128, u32::from(a) as u128, 32),
        (IpAddr::V6(n), IpAddr::V6(a)) => (u128::from(n), u128::from(a), 128),
        _ => return false,
    };
    let len = u32::from(len).min(bits);
    let drop = bits - len;
    drop >= bits || (net >> drop) == (a >> drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(proto: Proto) -> ServiceKey {
        ServiceKey {
            proto,
            vip: "198.18.100.1:80".parse().unwrap(),
        }
    }

    fn announcing_view() -> ListView {
        let mut view = crate::listing::tests::sample_view();
        view.announcing = true;
        let mut second = view.services[0].clone();
        second.key.vip = "[fd00::10]:80".parse().unwrap();
        second.scheduler = Scheduler::Wrr;
        view.services.push(second);
        view
    }

    #[test]
    fn an_announcing_node_names_services_a_move_breaks_and_vips_without_a_blackhole() {
        let host = Host { netns: None };
        let view = announcing_view();
        let got = check_cluster(&view, &[], &[], &host);
        let lines: Vec<String> = got.iter().map(|p| p.to_string()).collect();
        assert_eq!(
            lines,
            vec![
                "TCP [fd00::10]:80 (wrr): connections that ECMP moves to another node are reset: there a segment without its entry goes where its hash points, not to the real its SYN was given in turn: wirespeed lb -E -t [fd00::10]:80 -s mh".to_string(),
                "VIP 198.18.0.10 has no blackhole route, so its packets that reach the kernel (all of them while the daemon is down) go back to the router and loop: ip route add blackhole 198.18.0.10/32".to_string(),
                "VIP fd00::10 has no blackhole route, so its packets that reach the kernel (all of them while the daemon is down) go back to the router and loop: ip route add blackhole fd00::10/128".to_string(),
            ]
        );
        // A host route, a covering prefix, or the VIP as a local address all drop them.
        let blackholes = [("198.18.0.0".parse().unwrap(), 16)];
        let local = ["fd00::10".parse().unwrap()];
        assert_eq!(check_cluster(&view, &blackholes, &local, &host).len(), 1);
        let elsewhere = [
            ("198.18.1.0".parse().unwrap(), 24),
            ("fd00::11".parse().unwrap(), 128),
        ];
        assert_eq!(check_cluster(&view, &elsewhere, &[], &host).len(), 3);
        let netns = Host {
            netns: Some("lb1".into()),
        };
        let fix = &check_cluster(&view, &elsewhere, &[], &netns)[1].fix;
        assert_eq!(
            fix,
            "ip netns exec lb1 ip route add blackhole 198.18.0.10/32"
        );
    }

    #[test]
    fn a_node_that_does_not_announce_has_no_cluster_problems() {
        let mut view = announcing_view();
        view.announcing = false;
        let host = Host {
            netns: Some("wirespeed-doctor-no-such-netns".into()),
        };
        let problems = check_node(&view, &host);
        assert!(
            !problems.iter().any(|p| p.problem.contains("ECMP")
                || p.problem.contains("blackhole")
                || p.problem.contains("BGP")),
            "{problems:?}"
        );
        view.announcing = true;
        let problems = check_node(&view, &host);
        assert!(
            problems.iter().any(|p| p.problem.contains("ECMP")),
            "{problems:?}"
        );
        // No session reported: the first line says so.
        assert!(
            problems[0].problem.contains("BGP sessions is unknown"),
            "{problems:?}"
        );
    }

    #[test]
    fn blackhole_routes_are_read_from_ip_json() {
        let routes = serde_json::json!([
            {"type": "blackhole", "dst": "198.18.100.1", "flags": []},
            {"type": "blackhole", "dst": "198.18.200.0/24", "flags": []},
            {"type": "blackhole", "dst": "fd00::10", "flags": []},
            {"type": "blackhole", "dst": "default", "family": "inet6", "flags": []},
            {"dst": "198.18.0.0/16", "dev": "eth0", "flags": []}
        ]);
        let got = blackhole_prefixes(&routes);
        let want: Vec<(IpAddr, u8)> = vec![
            ("198.18.100.1".parse().unwrap(), 32),
            ("198.18.200.0".parse().unwrap(), 24),
            ("fd00::10".parse().unwrap(), 128),
            ("::".parse().unwrap(), 0),
        ];
        assert_eq!(got, want);
        assert!(prefix_contains(
            want[1].0,
            24,
            "198.18.200.7".parse().unwrap()
        ));
        assert!(!prefix_contains(
            want[1].0,
            24,
            "198.18.201.7".parse().unwrap()
        ));
        assert!(prefix_contains(want[3].0, 0, "fd00::1".parse().unwrap()));
        assert!(!prefix_contains(
            want[3].0,
            0,
            "198.18.0.1".parse().unwrap()
        ));
        assert!(!prefix_contains(
            want[2].0,
            128,
            "fd00::11".parse().unwrap()
        ));
    }

    const MODES: [Mode; 4] = [Mode::Dr, Mode::Tunnel, Mode::Nat, Mode::FullNat];
    const SCHEDULERS: [Scheduler; 3] = [Scheduler::Mh, Scheduler::Rr, Scheduler::Wrr];

    /// Every mode, scheduler and protocol, against the data path's placement of a packet
    /// without an entry.
    #[test]
    fn every_mode_and_scheduler_has_its_outcome() {
        let rip: SocketAddr = "198.18.70.2:80".parse().unwrap();
        for proto in [Proto::Tcp, Proto::Udp] {
            for mode in MODES {
                for sched in SCHEDULERS {
                    let want = match (mode, sched, proto) {
                        (Mode::Nat, _, _) => Outcome::NotSupported,
                        (Mode::FullNat, _, _) => Outcome::Lost,
                        (_, Scheduler::Mh, _) | (_, _, Proto::Udp) => Outcome::Survives,
                        _ => Outcome::Reset,
                    };
                    let got = after_move(&key(proto), sched, &[(rip, mode)]);
                    assert_eq!(got.outcome, want, "{proto:?} {mode:?} {sched:?}");
                    assert_eq!(
                        got.problem.is_none(),
                        want == Outcome::Survives,
                        "{proto:?} {mode:?} {sched:?}: a problem exactly when they do not survive"
                    );
                }
            }
        }
    }

    #[test]
    fn each_problem_names_the_service_and_the_command_that_fixes_it() {
        let rip: SocketAddr = "198.18.70.2:80".parse().unwrap();
        let p = |mode, sched, proto| {
            let p = after_move(&key(proto), sched, &[(rip, mode)])
                .problem
                .unwrap();
            format!("{p}")
        };
        let wrr = p(Mode::Dr, Scheduler::Wrr, Proto::Tcp);
        assert!(
            wrr.starts_with(
                "TCP 198.18.100.1:80 (wrr): connections that ECMP moves to another node are reset"
            ),
            "{wrr}"
        );
        assert!(
            wrr.ends_with(": wirespeed lb -E -t 198.18.100.1:80 -s mh"),
            "{wrr}"
        );
        let fnat = p(Mode::FullNat, Scheduler::Rr, Proto::Tcp);
        assert!(
            fnat.contains("(rr): connections that ECMP moves to another node are lost"),
            "{fnat}"
        );
        assert!(
            fnat.ends_with("wirespeed lb -e -t 198.18.100.1:80 -r 198.18.70.2:80 -i; wirespeed lb -E -t 198.18.100.1:80 -s mh"),
            "full-NAT with rr needs both the tunnel and mh: {fnat}"
        );
        let fnat_mh = p(Mode::FullNat, Scheduler::Mh, Proto::Tcp);
        assert!(fnat_mh.ends_with("-r 198.18.70.2:80 -i"), "{fnat_mh}");
        let nat = p(Mode::Nat, Scheduler::Mh, Proto::Udp);
        assert!(
            nat.starts_with("UDP 198.18.100.1:80 (mh): NAT cannot run on several nodes"),
            "{nat}"
        );
        assert!(nat.contains("announce 198.18.100.1 from one node only, or forward by tunnel (or DR): wirespeed lb -e -u 198.18.100.1:80 -r 198.18.70.2:80 -i"), "{nat}");
    }

    #[test]
    fn one_real_of_a_worse_mode_decides_the_service() {
        let dr: SocketAddr = "198.18.70.2:80".parse().unwrap();
        let fnat: SocketAddr = "198.18.70.3:80".parse().unwrap();
        let nat: SocketAddr = "198.18.70.4:80".parse().unwrap();
        let reals = [(dr, Mode::Dr), (fnat, Mode::FullNat)];
        let got = after_move(&key(Proto::Tcp), Scheduler::Mh, &reals);
        assert_eq!(got.outcome, Outcome::Lost);
        assert!(got.problem.unwrap().fix.contains("-r 198.18.70.3:80 -i"));
        let reals = [(dr, Mode::Dr), (fnat, Mode::FullNat), (nat, Mode::Nat)];
        let got = after_move(&key(Proto::Tcp), Scheduler::Wrr, &reals);
        assert_eq!(got.outcome, Outcome::NotSupported);
    }

    #[test]
    fn a_service_without_reals_is_judged_by_its_scheduler() {
        for sched in SCHEDULERS {
            let want = if sched == Scheduler::Mh {
                Outcome::Survives
            } else {
                Outcome::Reset
            };
            assert_eq!(after_move(&key(Proto::Tcp), sched, &[]).outcome, want);
            assert_eq!(
                after_move(&key(Proto::Udp), sched, &[]).outcome,
                Outcome::Survives
            );
        }
    }
}
