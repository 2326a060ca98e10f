//! The rows. Keep docs/TCPIP.md ("Conformance against Linux") in step: a unit test checks
//! that it names every row with its kind.

use super::{align_field, Kind, Known, Match};
use crate::cases::{Case, Class, Script};
use crate::compare::Outcome;
use crate::craft::{self, DUT_IP6};
use crate::normalize::Reply;

pub const TABLE: &[Known] = &[
    // Parts of a case, removed or aligned before the rest is compared.
    Known {
        id: "fin-ack-timing",
        kind: Kind::Accepted,
        reason: "a peer's FIN: both stacks delay its ACK (Linux's tcp_fin in pingpong mode, our delayed_ack) so that the application's close sends one FIN+ACK; when the close comes after the delay, on either twin (the scheduler's, not the stack's), that side sends a pure ACK and then the FIN. A pure ACK beside a FIN+ACK of the same SEQ and ACK, on one side only, is removed",
        matches: Match::Part(|_, a, b| strip_fin_ack_split(a, b) | strip_fin_ack_split(b, a)),
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
    // Whole cases.
];

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
