//! The rows. Keep docs/TCPIP.md ("Conformance against Linux") in step: a unit test checks
//! that it names every row with its kind.

use super::{align_field, all, Kind, Known, Match};
use crate::cases::{Case, Class, Script};
use crate::compare::Outcome;
use crate::craft::{self, DUT_IP6, DUT_LL6};
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
        id: "flow-label-zero",
        kind: Kind::Accepted,
        reason: "the stack sends every IPv6 packet with flow label 0 (docs/TCPIP.md, Not supported), an unlabelled flow (RFC 6437 §3: a source that does not label its flows sets 0; the label is a hint for load balancing, nobody may rely on it); Linux labels TCP, UDP and ICMPv6 packets with a hash of the flow (net.ipv6.auto_flowlabels=1), and its echo replies too (flowlabel_reflect=0: the request's label is not copied). Only a zero label against a non-zero one is aligned",
        matches: Match::Part(|_, a, b| {
            align_field(a, b, "ip6.flow", |ours, linux| ours == "0" && linux == "auto")
        }),
    },
    Known {
        id: "unicast-ns-answer-names-our-mac",
        kind: Kind::Accepted,
        reason: "a neighbour solicitation sent unicast to our address: Linux answers without the target link-layer option and with Override clear (ndisc_recv_ns: both only for a multicast solicitation); the stack's advertisement has both, as RFC 4861 §7.2.4 allows (the option MAY be omitted) and asks (Override SHOULD be set for a node's own unicast address): the solicitor already has our MAC and is told it again (docs/TCPIP.md, IPv6)",
        matches: Match::Part(|c, a, b| frame_dst6(c) == Some(DUT_IP6) && align_unicast_na(a, b)),
    },
    Known {
        id: "udp6-short-length-quoted-whole",
        kind: Kind::Accepted,
        reason: "a UDP length shorter than the IPv6 payload: both answer port unreachable; Linux quotes the datagram cut to the UDP length (__udp6_lib_rcv trimmed it before the port lookup), the stack quotes it as received, as much of it as fits (RFC 4443 §3.1)",
        matches: Match::Part(|c, a, b| {
            c.class == Class::Udp6
                && c.what.contains("length shorter than the datagram")
                && align_field(a, b, "icmp6.len", |ours, linux| {
                    ours.parse::<usize>().unwrap_or(0) > linux.parse::<usize>().unwrap_or(0)
                })
                && align_field(a, b, "icmp6.data", |_, _| true)
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
        id: "no-link-local-address",
        kind: Kind::StackGap,
        reason: "the stack has no link-local address (RFC 4291 §2.1: every interface has one); Linux's d0 has fe80::77:73ff:fe00:2 (EUI-64 of its MAC): it answers datagrams to it (an RST, an echo reply) and drops those from it as its own; the stack ignores the first (twin A's kernel, which owns that address behind the XDP program, has no route back) and answers the second",
        matches: Match::Case(|s| {
            let to_ll = frame_dst6(s.case) == Some(DUT_LL6)
                && s.ours_silent()
                && !s.linux.replies.is_empty();
            let from_ll = frame_src6(s.case) == Some(DUT_LL6)
                && s.linux.replies.is_empty()
                && all(&s.ours.replies, |r| {
                    r.get("ip6.dst") == Some("fe80::77:73ff:fe00:2")
                });
            to_ll || from_ll
        }),
    },
    Known {
        id: "udp6-length-zero-dropped",
        kind: Kind::Accepted,
        reason: "a UDP length of 0 in an ordinary datagram: a length of 0 belongs to a jumbogram (RFC 2675 §4: with a jumbo payload option, over 65535 bytes), which the stack does not take: it drops the datagram as malformed; Linux's __udp6_lib_rcv takes a length of 0 anywhere as \"the rest of the packet\" and answers port unreachable",
        matches: Match::Case(|s| {
            s.case.class == Class::Udp6
                && s.case.what.contains("length field 0")
                && s.ours_silent()
                && all(&s.linux.replies, |r| {
                    r.icmp6_type() == Some(1) && r.get("icmp6.code") == Some("4")
                })
        }),
    },
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

/// The IPv6 source and destination of a stateless case's first frame.
fn frame_addrs6(c: &Case) -> Option<([u8; 16], [u8; 16])> {
    let Script::Frames(f) = &c.script else {
        return None;
    };
    let f = f.first()?;
    if f.len() < 54 || u16::from_be_bytes([f[12], f[13]]) != craft::ETH_IPV6 {
        return None;
    }
    Some((f[22..38].try_into().ok()?, f[38..54].try_into().ok()?))
}

fn frame_src6(c: &Case) -> Option<[u8; 16]> {
    frame_addrs6(c).map(|a| a.0)
}

fn frame_dst6(c: &Case) -> Option<[u8; 16]> {
    frame_addrs6(c).map(|a| a.1)
}

/// Our neighbour advertisement with Override and our MAC where Linux's has neither (and is
/// otherwise the same): Linux's fields taken. True when one was.
fn align_unicast_na(a: &mut Outcome, b: &Outcome) -> bool {
    let mut changed = false;
    for x in &mut a.replies {
        if x.icmp6_type() != Some(136) || b.replies.contains(x) {
            continue;
        }
        let Some(y) = b.replies.iter().find(|y| {
            y.icmp6_type() == Some(136)
                && y.get("nd.target") == x.get("nd.target")
                && y.get("ip6.dst") == x.get("ip6.dst")
        }) else {
            continue;
        };
        let ours_full = x.get("icmp6.rest") == Some("60000000")
            && x.get("nd.opts") == Some("tll=02:77:73:00:00:02");
        let linux_bare = y.get("icmp6.rest") == Some("40000000") && y.get("nd.opts") == Some("-");
        if ours_full && linux_bare {
            for k in ["icmp6.rest", "icmp6.len", "nd.opts", "icmp6.data"] {
                let v = y.get(k).unwrap_or("-").to_string();
                x.set(k, v);
            }
            changed = true;
        }
    }
    changed
}
