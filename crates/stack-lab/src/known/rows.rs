//! The rows. Keep docs/TCPIP.md ("Conformance against Linux") in step: a unit test checks
//! that it names every row with its kind.

use super::{align_field, all, Kind, Known, Match};
use crate::cases::{Case, Class, Script};
use crate::compare::Outcome;
use crate::flow::Edge;
use crate::normalize::Reply;

pub const TABLE: &[Known] = &[
    // Parts of a case, removed or aligned before the rest is compared.
    Known {
        id: "early-tail-loss-probe",
        kind: Kind::StackGap,
        reason: "with one segment (or a FIN) unacknowledged, our tail loss probe fires after max(2 SRTT, 10 ms) and repeats the segment inside the window; Linux adds the delayed-ACK allowance (2 SRTT + 200 ms, tcp_schedule_loss_probe), as RFC 8985 does (docs/TCPIP.md, Not supported)",
        matches: Match::Part(strip_early_probes),
    },
    Known {
        id: "fin-ack-timing",
        kind: Kind::Accepted,
        reason: "a peer's FIN: both stacks delay its ACK (Linux's tcp_fin in pingpong mode, our delayed_ack) so that the application's close sends one FIN+ACK; when the close comes after the delay, on either twin (the scheduler's, not the stack's), that side sends a pure ACK and then the FIN. A pure ACK beside a FIN+ACK of the same SEQ and ACK, on one side only, is removed",
        matches: Match::Part(|_, a, b| strip_fin_ack_split(a, b) | strip_fin_ack_split(b, a)),
    },
    Known {
        id: "ip-options-not-echoed",
        kind: Kind::StackGap,
        reason: "Linux echoes a received record-route or timestamp option in its answer (ip_options_echo: SYN-ACK, RST, echo reply); the stack sends no IP options",
        matches: Match::Part(|_, a, b| {
            align_field(a, b, "ip.opts", |ours, linux| {
                ours == "-" && (linux.starts_with("7/") || linux.starts_with("68/"))
            })
        }),
    },
    Known {
        id: "no-sack-for-out-of-order-fin",
        kind: Kind::StackGap,
        reason: "a FIN beyond RCV.NXT: Linux queues it out of order and its duplicate ACK carries a SACK block for it; the stack keeps no out-of-order range for a FIN alone, so its ACK has no SACK block",
        matches: Match::Part(|c, a, b| {
            matches!(&c.script, Script::Flow(f) if f.edge == Edge::FinAhead)
                && align_field(a, b, "tcp.opts", |ours, linux| {
                    linux.contains("sack(") && without_sack(linux) == ours
                })
        }),
    },
    // Whole cases.
    Known {
        id: "icmp-timestamp-ignored",
        kind: Kind::StackGap,
        reason: "Linux answers an ICMP timestamp request with a timestamp reply (icmp_timestamp); the stack ignores it (ICMP other than echo request is not answered, docs/TCPIP.md)",
        matches: Match::Case(|s| {
            s.case.class == Class::Icmp
                && s.case.what == "timestamp request"
                && s.ours_silent()
                && all(&s.linux.replies, |r| r.icmp_type() == Some(14))
        }),
    },
];

/// SACK blocks removed from an option set (`mss=1460,sack(..),ts(..)` without the sack).
fn without_sack(opts: &str) -> String {
    let kept: Vec<&str> = opts
        .split(',')
        .filter(|o| !o.starts_with("sack("))
        .collect();
    if kept.is_empty() {
        "-".into()
    } else {
        kept.join(",")
    }
}

/// The ports and the sequence range [start, end) that a data or FIN segment of ours covers
/// (from its ISN-relative SEQ, `d+N`).
fn seg_range(r: &Reply) -> Option<(String, i64, i64)> {
    if !r.carries_data_or_fin() {
        return None;
    }
    let seq: i64 = r.get("tcp.seq")?.strip_prefix('d')?.parse().ok()?;
    let len: i64 = r.get("tcp.len")?.parse().ok()?;
    let fin = i64::from(r.tcp_flags()?.contains('F'));
    Some((r.get("tcp.ports")?.to_string(), seq, seq + len + fin))
}

/// Our segments whose bytes (or FIN) we had already sent, in the setup or earlier in the
/// window: retransmissions. Each one that Linux also retransmitted (the same range, beyond
/// its first sending) stays; the rest go.
fn strip_early_probes(_: &Case, a: &mut Outcome, b: &mut Outcome) -> bool {
    let covered = |sent: &[(String, i64, i64)], k: &(String, i64, i64)| {
        sent.iter().any(|s| s.0 == k.0 && s.1 <= k.1 && k.2 <= s.2)
    };
    let mut linux: Vec<_> = b.replies.iter().filter_map(seg_range).collect();
    let mut sent: Vec<_> = a.setup.iter().filter_map(seg_range).collect();
    let mut kept = Vec::new();
    let mut removed = 0;
    for r in &a.replies {
        match seg_range(r) {
            Some(k) if covered(&sent, &k) => match linux.iter().position(|x| *x == k) {
                Some(i) => {
                    linux.remove(i);
                    kept.push(r.clone());
                }
                None => removed += 1,
            },
            Some(k) => {
                // A first sending: Linux's own first sending of it is its counterpart.
                if let Some(i) = linux.iter().position(|x| *x == k) {
                    linux.remove(i);
                }
                sent.push(k);
                kept.push(r.clone());
            }
            None => kept.push(r.clone()),
        }
    }
    a.replies = kept;
    removed > 0
}

/// `x`'s pure ACK where `x` also sent a FIN with the same SEQ and ACK, and `y` sent that FIN
/// but not the pure ACK: removed from `x`. True when one was.
fn strip_fin_ack_split(x: &mut Outcome, y: &Outcome) -> bool {
    let fin_like = |r: &Reply, v: &[Reply]| {
        v.iter().any(|f| {
            f.tcp_flags().is_some_and(|fl| fl.contains('F'))
                && f.get("tcp.ack") == r.get("tcp.ack")
                && f.get("tcp.seq") == r.get("tcp.seq")
        })
    };
    let before = x.replies.len();
    let all = x.replies.clone();
    x.replies.retain(|r| {
        let pure_ack = r.tcp_flags() == Some("A") && r.get("tcp.len") == Some("0");
        !(pure_ack && fin_like(r, &all) && fin_like(r, &y.replies) && !y.replies.contains(r))
    });
    x.replies.len() != before
}
