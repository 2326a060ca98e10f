//! `lb doctor`'s side (docs/LB.md, "Doctor"): what the daemon was last told of the sessions,
//! one line for each that is not up.

use std::net::IpAddr;

use super::{notification_name, Reason, Reported, State, CONF_LINE, STALE_AFTER};
use crate::doctor::Problem;

/// How long a session may be connecting, never having gone down, before doctor names it.
const CONNECTING_TOO_LONG: u64 = 30;

/// `lb doctor` on a node that announces: each session that is not up, why, and what fixes
/// it; or one line when the state is unknown (ExaBGP without `neighbor-changes`, or a report
/// so old that `lb announce` is gone).
pub fn check_sessions(reported: Option<&Reported>, now: u64) -> Vec<Problem> {
    let Some(r) = reported.filter(|r| !r.sessions.is_empty()) else {
        return vec![Problem {
            problem: "the state of this node's BGP sessions is unknown (ExaBGP does not tell lb announce of them)".into(),
            fix: format!("add `{CONF_LINE}` to each neighbor's api block in exabgp.conf, next to `processes [ lb ];`, and restart ExaBGP"),
        }];
    };
    if r.ago_s > STALE_AFTER.as_secs() {
        return vec![Problem {
            problem: format!(
                "lb announce last reported the BGP sessions {} s ago (ExaBGP or its lb announce process has stopped)",
                r.ago_s
            ),
            fix: "start ExaBGP with `run wirespeed lb announce` as its process and see its log"
                .into(),
        }];
    }
    let mut out = Vec::new();
    for s in &r.sessions {
        let n = s.neighbor;
        let reason = match (s.state, &s.last_down) {
            (State::Up, _) => continue,
            (_, Some(reason)) => reason,
            (_, None) => {
                let for_s = now.saturating_sub(s.since);
                if for_s >= CONNECTING_TOO_LONG {
                    out.push(Problem {
                        problem: format!("BGP session to {n} is not up (connecting for {for_s} s)"),
                        fix: format!("check that the router has a neighbor for this node and see ExaBGP's log: ping -c1 {n}"),
                    });
                }
                continue;
            }
        };
        let (why, fix) = explain(n, reason);
        out.push(Problem {
            problem: format!("BGP session to {n} is down ({why})"),
            fix,
        });
    }
    out
}

/// What a reason says, and what fixes it.
fn explain(n: IpAddr, reason: &Reason) -> (String, String) {
    let log = format!("see ExaBGP's log and the router's for neighbor {n}");
    match reason {
        Reason::Notification {
            sent,
            code,
            subcode,
            detail,
        } => {
            let who = if *sent {
                "ExaBGP sent"
            } else {
                "the router sent"
            };
            let mut why = format!("{who} {}", notification_name(*code, *subcode));
            if !detail.is_empty() {
                why = format!("{why}; {detail}");
            }
            let fix = match (*code, *subcode, *sent) {
                (2, 2, true) => format!("set peer-as in exabgp.conf's neighbor {n} to the router's own AS (FRR: router bgp ASN) and restart ExaBGP"),
                (2, 2, false) => format!("set local-as in exabgp.conf's neighbor {n} to the AS the router expects of this node (FRR: neighbor ADDR remote-as ASN), or change that remote-as"),
                (2, 3, _) => format!("give this node a router-id of its own in exabgp.conf's neighbor {n} (its address), unlike the router's and other nodes'"),
                (2, 6, _) => format!("set hold-time in exabgp.conf's neighbor {n} to 0 or at least 3"),
                (2, 4 | 7, _) => format!("match the families in exabgp.conf's neighbor {n} with the router's address-family for this node"),
                (4, _, _) => format!("keepalives stopped crossing the link: ping -c1 {n}"),
                (6, _, false) => format!("the router closed the session: check its neighbor for this node (shutdown, maximum-prefix), {log}"),
                _ => log,
            };
            (why, fix)
        }
        Reason::Connection(text) => (
            format!("no TCP connection: {text}"),
            format!("check neighbor {n} and local-address in exabgp.conf, and that the router has a neighbor for this node's address: ping -c1 {n}"),
        ),
        Reason::Other(text) => (format!("ExaBGP: {text}"), log),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{BAD_PEER_AS_RECEIVED, BAD_PEER_AS_SENT, BROKEN_TCP, DECONFIGURED};
    use super::super::{parse_line, Sessions};
    use super::*;

    fn reported(lines: &[&str], ago_s: u64) -> Reported {
        let mut s = Sessions::default();
        for l in lines {
            let (n, e) = parse_line(l).unwrap();
            s.apply(n, e, 1000);
        }
        Reported {
            ago_s,
            sessions: s.list(),
        }
    }

    fn doctor(r: Option<&Reported>, now: u64) -> Vec<String> {
        check_sessions(r, now)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn doctor_names_a_session_that_is_down_with_its_fix() {
        let r = reported(&["neighbor 198.18.0.2 connected", BAD_PEER_AS_SENT], 1);
        assert_eq!(
            doctor(Some(&r), 1001),
            ["BGP session to 198.18.0.2 is down (ExaBGP sent OPEN message error, bad peer AS; ASN in OPEN (65000) did not match ASN expected (65099)): set peer-as in exabgp.conf's neighbor 198.18.0.2 to the router's own AS (FRR: router bgp ASN) and restart ExaBGP"]
        );
        // Reconnecting after a failure is still down, for the same reason.
        let r = reported(&[BAD_PEER_AS_RECEIVED, "neighbor 198.18.0.2 connected"], 1);
        assert_eq!(
            doctor(Some(&r), 1001),
            ["BGP session to 198.18.0.2 is down (the router sent OPEN message error, bad peer AS): set local-as in exabgp.conf's neighbor 198.18.0.2 to the AS the router expects of this node (FRR: neighbor ADDR remote-as ASN), or change that remote-as"]
        );
        let r = reported(&[BROKEN_TCP], 1);
        assert_eq!(
            doctor(Some(&r), 1001),
            ["BGP session to 198.18.0.6 is down (no TCP connection: Broken TCP connection): check neighbor 198.18.0.6 and local-address in exabgp.conf, and that the router has a neighbor for this node's address: ping -c1 198.18.0.6"]
        );
        let r = reported(&[DECONFIGURED], 1);
        assert_eq!(
            doctor(Some(&r), 1001),
            ["BGP session to 198.18.0.2 is down (the router sent cease, peer de-configured): the router closed the session: check its neighbor for this node (shutdown, maximum-prefix), see ExaBGP's log and the router's for neighbor 198.18.0.2"]
        );
    }

    #[test]
    fn doctor_says_nothing_of_a_session_that_is_up_or_just_connecting() {
        let up = reported(&[BAD_PEER_AS_SENT, "neighbor 198.18.0.2 up"], 0);
        assert!(doctor(Some(&up), 1100).is_empty());
        let connecting = reported(&["neighbor 198.18.0.2 connected"], 0);
        assert!(doctor(Some(&connecting), 1010).is_empty());
        assert_eq!(
            doctor(Some(&connecting), 1040),
            ["BGP session to 198.18.0.2 is not up (connecting for 40 s): check that the router has a neighbor for this node and see ExaBGP's log: ping -c1 198.18.0.2"]
        );
    }

    #[test]
    fn doctor_says_the_state_is_unknown_without_reports_or_with_an_old_one() {
        let unknown = ["the state of this node's BGP sessions is unknown (ExaBGP does not tell lb announce of them): add `neighbor-changes;` to each neighbor's api block in exabgp.conf, next to `processes [ lb ];`, and restart ExaBGP"];
        assert_eq!(doctor(None, 0), unknown);
        assert_eq!(
            doctor(
                Some(&Reported {
                    ago_s: 0,
                    sessions: vec![]
                }),
                0
            ),
            unknown
        );
        let old = reported(&["neighbor 198.18.0.2 up"], 60);
        assert_eq!(
            doctor(Some(&old), 1060),
            ["lb announce last reported the BGP sessions 60 s ago (ExaBGP or its lb announce process has stopped): start ExaBGP with `run wirespeed lb announce` as its process and see its log"]
        );
    }
}
