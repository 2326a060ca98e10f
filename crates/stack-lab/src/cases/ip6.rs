//! IPv6: header edges, martian addresses, extension headers, fragment headers, UDP and next
//! headers nobody handles. Every case comes from its own off-link address (fd01::/16,
//! `craft::peer_ip6`) unless it is about the address itself.

use super::{ipv6_frame, Case, Script};
use crate::craft::{self, ext, opt, Ip6, Tcp, DUT_IP6, DUT_LL6, PROTO_ICMPV6, PROTO_TCP};
use wirespeed_testkit::rng::Rng;

/// The payload a header edge rides on, to `dst`: a SYN to the listening port or an echo
/// request (from `c.peer6`).
fn carrier(c: &Case, r: &mut Rng, dst: [u8; 16]) -> (u8, Vec<u8>, &'static str) {
    if r.one_in(2) {
        (PROTO_TCP, syn(c, r, dst), "SYN")
    } else {
        (PROTO_ICMPV6, echo(c, dst), "echo")
    }
}

fn src(c: &Case) -> [u8; 16] {
    c.peer6.expect("an IPv6 case")
}

/// A SYN with Linux's options from the case to `dst`.
fn syn(c: &Case, r: &mut Rng, dst: [u8; 16]) -> Vec<u8> {
    Tcp {
        sport: c.sport,
        dport: c.dport,
        seq: c.our_isn,
        flags: craft::SYN,
        window: 64240,
        options: opt::linux_syn(1440, r.u32(), 7),
        ..Tcp::default()
    }
    .segment6(src(c), dst)
}

/// An echo request from the case to `dst`.
fn echo(c: &Case, dst: [u8; 16]) -> Vec<u8> {
    let id = c.sport.to_be_bytes();
    craft::icmp6(128, 0, [id[0], id[1], 0, 6], b"ws-echo6-data", src(c), dst)
}

pub(super) fn header(c: &mut Case, r: &mut Rng) {
    let (proto, l4, what) = carrier(c, r, DUT_IP6);
    let mut h = Ip6::new(src(c), DUT_IP6, proto);
    let edge = r.below(19);
    match edge {
        0 => h.hop_limit = 0,
        1 => h.hop_limit = 1,
        2 => h.hop_limit = 255,
        3 => h.tclass = 0x03,
        4 => h.tclass = 0x02,
        5 => h.tclass = 0xb8,
        6 => h.flow = 0x12345,
        7 => {
            h.flow = 0xfffff;
            h.tclass = 0xb9;
        }
        _ => {}
    }
    c.flow6 = h.flow;
    let mut p = h.packet(&l4);
    let n = l4.len();
    let name = match edge {
        0 => "hop limit 0",
        1 => "hop limit 1",
        2 => "hop limit 255",
        3 => "traffic class ECN CE",
        4 => "traffic class ECT(0)",
        5 => "traffic class DSCP EF",
        6 => "flow label 0x12345",
        7 => "flow label 0xfffff, traffic class 0xb9",
        8 => {
            p[4..6].copy_from_slice(&((n - 8) as u16).to_be_bytes());
            "payload length 8 bytes short"
        }
        9 => {
            p[4..6].copy_from_slice(&((n + 20) as u16).to_be_bytes());
            "payload length past the frame"
        }
        10 => {
            p[4..6].copy_from_slice(&0u16.to_be_bytes());
            "payload length 0 (no jumbo option)"
        }
        11 => {
            p[4..6].copy_from_slice(&4u16.to_be_bytes());
            "payload length 4 (shorter than the transport header)"
        }
        12 => {
            p[0] = (p[0] & 0x0f) | 0x40;
            "version 4"
        }
        13 => {
            p[0] = (p[0] & 0x0f) | 0x70;
            "version 7"
        }
        14 => "12 bytes of link padding after the packet",
        15 => "to eth broadcast",
        16 => "to eth 33:33:00:00:00:01 (all-nodes group), IP unicast",
        17 => "to eth another host's unicast",
        _ => {
            p.truncate(30);
            "the IPv6 header cut at 30 bytes"
        }
    };
    let mut f = super::to_dut6(&p);
    match edge {
        14 => f.extend_from_slice(&[0xee; 12]),
        15 => f[..6].copy_from_slice(&[0xff; 6]),
        16 => f[..6].copy_from_slice(&[0x33, 0x33, 0, 0, 0, 1]),
        17 => f[..6].copy_from_slice(&[0x02, 0x77, 0x73, 0, 0, 0x99]),
        _ => {}
    }
    craft::pad_to_minimum(&mut f);
    c.what = format!("{what}, IPv6 {name}");
    c.script = Script::Frames(vec![f]);
}

/// Martian sources (the reply would go to them) and destinations that are not ours.
pub(super) fn addresses(c: &mut Case, r: &mut Rng) {
    let mapped = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 19, 16, 1];
    let compat = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 198, 19, 16, 1];
    let mut doc = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    doc[12..].copy_from_slice(&(c.index as u32).to_be_bytes());
    let sources: Vec<([u8; 16], String)> = vec![
        (craft::ALL_NODES6, "multicast ff02::1".into()),
        (
            ip6(&[0xff0e, 0, 0, 0, 0, 0, 0, 5]),
            "multicast ff0e::5".into(),
        ),
        (ip6(&[0, 0, 0, 0, 0, 0, 0, 1]), "loopback ::1".into()),
        (mapped, "v4-mapped ::ffff:198.19.16.1".into()),
        (compat, "v4-compatible ::198.19.16.1".into()),
        ([0; 16], "unspecified ::".into()),
        (DUT_IP6, "our own address".into()),
        (DUT_LL6, "our link-local address".into()),
        (craft::link_local6(c.index), "a link-local address".into()),
        (craft::onlink_ip6(c.index), "an on-link address".into()),
        (doc, "a global address (2001:db8::/32)".into()),
        (
            ip6(&[0xfec0, 0, 0, 0, 0, 0, 0, 1]),
            "site-local fec0::1".into(),
        ),
    ];
    let other_sn = craft::solicited_node(ip6(&[0xfd00, 0, 0, 0, 0, 0, 0, 3]));
    let dsts: Vec<([u8; 16], String)> = vec![
        (
            ip6(&[0xfd00, 0, 0, 0, 0, 0, 0, 3]),
            "another address on our prefix (fd00::3)".into(),
        ),
        (
            ip6(&[0xfd01, 0, 0, 0, 0, 0, 0, 9]),
            "an off-link address (fd01::9)".into(),
        ),
        (
            ip6(&[0xff02, 0, 0, 0, 0, 0, 0, 2]),
            "all routers ff02::2".into(),
        ),
        (other_sn, "another address's solicited-node group".into()),
        (
            craft::solicited_node(DUT_IP6),
            "our solicited-node group ff02::1:ff00:2".into(),
        ),
        (craft::ALL_NODES6, "all nodes ff02::1".into()),
        (
            ip6(&[0xff05, 0, 0, 0, 0, 0, 0, 0x1234]),
            "a site-scope group ff05::1234".into(),
        ),
        (ip6(&[0, 0, 0, 0, 0, 0, 0, 1]), "loopback ::1".into()),
        ([0; 16], "unspecified ::".into()),
        (
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 2],
            "v4-mapped ::ffff:198.18.0.2 (our IPv4 address)".into(),
        ),
        (DUT_LL6, "our link-local address".into()),
    ];
    if r.one_in(2) {
        let (s, name) = r.pick(&sources);
        c.peer6 = Some(s);
        let (proto, l4, what) = carrier(c, r, DUT_IP6);
        c.what = format!("{what} from {name}");
        let f = ipv6_frame(&Ip6::new(s, DUT_IP6, proto), &l4);
        c.script = Script::Frames(vec![f]);
    } else {
        let (d, name) = r.pick(&dsts);
        if d == DUT_LL6 && r.one_in(2) {
            c.peer6 = Some(craft::link_local6(c.index));
        }
        let (proto, l4, what) = carrier(c, r, d);
        let from = if c.peer6.is_some_and(|p| p[0] == 0xfe) {
            " from a link-local address"
        } else {
            ""
        };
        c.what = format!("{what} to {name}{from}");
        let f = ipv6_frame(&Ip6::new(src(c), d, proto), &l4);
        c.script = Script::Frames(vec![f]);
    }
}

/// An address from 8 groups.
fn ip6(g: &[u16; 8]) -> [u8; 16] {
    let mut a = [0u8; 16];
    for (i, x) in g.iter().enumerate() {
        a[2 * i..2 * i + 2].copy_from_slice(&x.to_be_bytes());
    }
    a
}

/// Option types of each action class (RFC 8200 §4.2, the two high bits), from the
/// experimental values (RFC 4727): 00 skip, 01 discard, 10 discard and always answer a
/// parameter problem, 11 discard and answer unless the destination is multicast.
const UNKNOWN_OPTIONS: [(u8, &str); 4] = [
    (0x1e, "00 (skip)"),
    (0x5e, "01 (discard)"),
    (0x9e, "10 (discard, parameter problem)"),
    (0xde, "11 (discard, parameter problem unless multicast)"),
];

/// Next-header values of the extension headers: hop-by-hop options, routing, destination
/// options.
const HBH: u8 = 0;
const ROUTING: u8 = 43;
const DST: u8 = 60;

/// Extension header chains in front of a SYN or an echo (or an echo to all nodes).
pub(super) fn extensions(c: &mut Case, r: &mut Rng) {
    // Routing headers (13) are drawn five times as often as the other edges: they have the
    // most variants.
    let edge = match r.below(28) {
        24..=27 => 13,
        e => e,
    };
    let multicast = edge == 12;
    let dst = if multicast {
        craft::ALL_NODES6
    } else {
        DUT_IP6
    };
    let (proto, l4, what) = if multicast {
        (PROTO_ICMPV6, echo(c, dst), "echo to ff02::1")
    } else {
        carrier(c, r, dst)
    };
    let (unknown, action) = r.pick(&UNKNOWN_OPTIONS);
    let hop = craft::peer_ip6(c.index + 1_000_000);
    let rt_type = r.pick(&[0u8, 2, 3, 4, 253]);
    let segs = u8::from(r.one_in(2));
    // (first next header, the headers' bytes in order, a name)
    let (first, headers, name) = match edge {
        0..=12 => options_header(r, edge, proto, unknown, action),
        13 => {
            let addrs: Vec<[u8; 16]> = if rt_type == 2 || segs == 1 {
                vec![hop]
            } else {
                vec![hop, DUT_IP6]
            };
            (
                ROUTING,
                vec![ext::routing(proto, rt_type, segs, &addrs)],
                format!("routing header type {rt_type}, segments left {segs}"),
            )
        }
        _ => unusual_headers(edge, proto, hop),
    };
    let mut payload: Vec<u8> = headers.concat();
    payload.extend_from_slice(&l4);
    c.what = format!("{what}, {name}");
    let f = ipv6_frame(&Ip6::new(src(c), dst, first), &payload);
    c.script = Script::Frames(vec![f]);
}

/// Extension headers to send: (the first next header, the headers' bytes in order, a name).
type Headers = (u8, Vec<Vec<u8>>, String);

/// One hop-by-hop or destination options header before the upper-layer `proto`: padding,
/// each unknown option's action, and (`edge` 12) a drawn one, `unknown` with its `action`.
fn options_header(r: &mut Rng, edge: usize, proto: u8, unknown: u8, action: &str) -> Headers {
    match edge {
        0 => (
            HBH,
            vec![ext::options(proto, &[])],
            "hop-by-hop with PadN".into(),
        ),
        1 => (
            HBH,
            vec![ext::options(proto, &[0; 6])],
            "hop-by-hop with 6 Pad1".into(),
        ),
        2 => (
            DST,
            vec![ext::options(proto, &[])],
            "destination options with PadN".into(),
        ),
        3 => (
            DST,
            vec![ext::options(proto, &[0; 6])],
            "destination options with 6 Pad1".into(),
        ),
        4..=7 => {
            let (t, a) = UNKNOWN_OPTIONS[edge - 4];
            (
                DST,
                vec![ext::options(proto, &[t, 2, 0, 0])],
                format!("destination options, unknown option {t:#04x}, action {a}"),
            )
        }
        8..=11 => {
            let (t, a) = UNKNOWN_OPTIONS[edge - 8];
            (
                HBH,
                vec![ext::options(proto, &[t, 2, 0, 0])],
                format!("hop-by-hop, unknown option {t:#04x}, action {a}"),
            )
        }
        _ => {
            let first = r.pick(&[HBH, DST]);
            (
                first,
                vec![ext::options(proto, &[unknown, 2, 0, 0])],
                format!(
                    "{}, unknown option {unknown:#04x}, action {action}",
                    if first == HBH {
                        "hop-by-hop"
                    } else {
                        "destination options"
                    }
                ),
            )
        }
    }
}

/// Headers out of the usual order or repeated, a chain of every kind, an unknown or no
/// next header, options that are malformed or many, and the MLD router alert (`edge` from
/// 14), before the upper-layer `proto`; `hop` is a routing header's address.
fn unusual_headers(edge: usize, proto: u8, hop: [u8; 16]) -> Headers {
    match edge {
        14 => (
            DST,
            vec![ext::options(HBH, &[]), ext::options(proto, &[])],
            "hop-by-hop after destination options".into(),
        ),
        15 => (
            HBH,
            vec![
                ext::options(DST, &[]),
                ext::options(ROUTING, &[]),
                ext::routing(DST, 0, 0, &[hop]),
                ext::options(proto, &[0x1e, 0]),
            ],
            "a chain: hop-by-hop, destination options, routing (type 0, segments left 0), destination options".into(),
        ),
        16 => (
            DST,
            vec![ext::options(59, &[])],
            "destination options, then no next header (59), then the upper-layer bytes".into(),
        ),
        17 => (
            DST,
            vec![ext::options(253, &[])],
            "destination options, then next header 253".into(),
        ),
        18 => (
            DST,
            // 8 bytes of header; the option claims 8 bytes of data where 4 are left.
            vec![vec![proto, 0, 0x1e, 8, 0, 0, 0, 0]],
            "destination options, an option's length past the header".into(),
        ),
        19 => {
            let mut h = vec![proto, 1, 1, 12];
            h.extend_from_slice(&[0; 12]);
            (
                DST,
                vec![h],
                "destination options, PadN of 14 bytes".into(),
            )
        }
        20 => (
            DST,
            vec![ext::options(proto, &[1, 4, 0, 0, 0x5a, 0])],
            "destination options, PadN with non-zero contents".into(),
        ),
        21 => {
            let opts: Vec<u8> = (0..9).flat_map(|_| [0x1e, 0]).collect();
            (
                DST,
                vec![ext::options(proto, &opts)],
                "destination options, 9 unknown options of action 00".into(),
            )
        }
        22 => (
            HBH,
            vec![ext::options(HBH, &[]), ext::options(proto, &[])],
            "two hop-by-hop headers".into(),
        ),
        _ => (
            HBH,
            vec![ext::options(proto, &[5, 2, 0, 0])],
            "hop-by-hop with router alert (MLD)".into(),
        ),
    }
}

/// A SYN (40 bytes of TCP) or an echo (56 bytes of ICMPv6) behind fragment headers.
pub(super) fn fragments(c: &mut Case, r: &mut Rng) {
    const FRAG: u8 = 44;
    let (proto, mut l4, what) = carrier(c, r, DUT_IP6);
    if proto == PROTO_ICMPV6 {
        let id = c.sport.to_be_bytes();
        l4 = craft::icmp6(128, 0, [id[0], id[1], 0, 9], &[0x5a; 48], src(c), DUT_IP6);
    }
    let n = l4.len();
    let id = 0x5000_0000 | c.index as u32;
    let plans: Vec<(Vec<(usize, usize)>, &str)> = vec![
        (vec![(0, n)], "atomic (offset 0, no more)"),
        (vec![(0, 24), (24, n)], "2 in order"),
        (vec![(24, n), (0, 24)], "2 reversed"),
        (vec![(0, 16), (16, 32), (32, n)], "3 in order"),
        (vec![(0, 24)], "first alone"),
        (vec![(24, n)], "last alone"),
        (
            vec![(0, 8), (8, n)],
            "tiny first (8 bytes of the upper layer)",
        ),
        (vec![(0, 24), (0, 24), (24, n)], "first duplicated"),
        (vec![(0, 24), (24, n), (24, n)], "last duplicated"),
        (vec![(0, 32), (24, n)], "overlapping"),
        (
            vec![(0, 20)],
            "a first fragment of 20 bytes (not a multiple of 8) with more to come",
        ),
    ];
    let (plan, name) = r.pick(&plans);
    // Overlapping pieces that disagree: the second's first byte flipped (RFC 5722: the
    // whole datagram is dropped either way).
    let differ = name == "overlapping" && r.one_in(2);
    let frames = plan
        .iter()
        .enumerate()
        .map(|(i, &(start, end))| {
            let end = end.min(n);
            let more = end < n;
            let mut payload = ext::fragment(proto, start, more, id);
            payload.extend_from_slice(&l4[start..end]);
            if differ && i == 1 {
                payload[8] ^= 0xff;
            }
            let mut f = ipv6_frame(&Ip6::new(src(c), DUT_IP6, FRAG), &payload);
            craft::pad_to_minimum(&mut f);
            f
        })
        .collect();
    c.what = if differ {
        format!("{what} in fragments: overlapping, different bytes")
    } else {
        format!("{what} in fragments: {name}")
    };
    c.script = Script::Frames(frames);
}

/// UDP to ports nobody serves, UDP edges, and next headers nobody handles.
pub(super) fn udp(c: &mut Case, r: &mut Rng) {
    let s = src(c);
    let mut dst = DUT_IP6;
    let (proto, l4, name): (u8, Vec<u8>, String) = match r.below(10) {
        0 => {
            let d = craft::udp6(c.sport, 53, b"\x12\x34\x01\x00", s, dst);
            (craft::PROTO_UDP, d, "UDP to port 53".into())
        }
        1 => {
            let d = craft::udp6(c.sport, 8080, b"hello", s, dst);
            (craft::PROTO_UDP, d, "UDP to port 8080".into())
        }
        2 => {
            let mut d = craft::udp6(c.sport, 9, b"discard", s, dst);
            d[6..8].copy_from_slice(&[0, 0]);
            (craft::PROTO_UDP, d, "UDP to port 9, checksum 0".into())
        }
        3 => {
            let mut d = craft::udp6(c.sport, 9, b"discard", s, dst);
            d[7] ^= 0x21;
            (craft::PROTO_UDP, d, "UDP to port 9, bad checksum".into())
        }
        4 => {
            let mut d = craft::udp6(c.sport, 9, b"jumbo?", s, dst);
            d[4..8].copy_from_slice(&[0; 4]);
            let sum = craft::checksum6(s, dst, craft::PROTO_UDP, &d);
            d[6..8].copy_from_slice(&sum.to_be_bytes());
            (craft::PROTO_UDP, d, "UDP to port 9, length field 0".into())
        }
        5 => {
            let mut d = craft::udp6(c.sport, 9, b"ab", s, dst);
            d.extend_from_slice(b"trailing");
            (
                craft::PROTO_UDP,
                d,
                "UDP to port 9, length shorter than the datagram".into(),
            )
        }
        6 => {
            let mut d = craft::udp6(c.sport, 9, b"abcd", s, dst);
            d[4..6].copy_from_slice(&40u16.to_be_bytes());
            d[6..8].copy_from_slice(&[0, 0]);
            let sum = craft::checksum6(s, dst, craft::PROTO_UDP, &d);
            d[6..8].copy_from_slice(&sum.to_be_bytes());
            (
                craft::PROTO_UDP,
                d,
                "UDP to port 9, length past the datagram".into(),
            )
        }
        7 => {
            dst = craft::ALL_NODES6;
            let d = craft::udp6(c.sport, 9, b"everyone", s, dst);
            (craft::PROTO_UDP, d, "UDP to ff02::1 port 9".into())
        }
        8 => {
            let p = r.pick(&[253u8, 254, 1]);
            (p, vec![0u8; 16], format!("next header {p}"))
        }
        _ => (
            craft::PROTO_TCP,
            vec![0x27, 0x10, 0x1f, 0x90, 0, 0, 0, 1],
            "TCP, 8 bytes (a truncated header)".into(),
        ),
    };
    c.what = name;
    let mut f = ipv6_frame(&Ip6::new(s, dst, proto), &l4);
    craft::pad_to_minimum(&mut f);
    c.script = Script::Frames(vec![f]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cases::{one, Class};

    #[test]
    fn extension_headers_are_whole_multiples_of_8() {
        assert_eq!(ext::options(6, &[]).len(), 8);
        assert_eq!(
            ext::options(6, &[0x1e, 2, 0, 0]),
            [6, 0, 0x1e, 2, 0, 0, 1, 0]
        );
        assert_eq!(ext::options(6, &[0; 6]).len(), 8);
        assert_eq!(ext::options(6, &[0; 7]).len(), 16);
        let rh = ext::routing(6, 0, 1, &[[1; 16]]);
        assert_eq!((rh.len(), rh[1]), (24, 2));
        for i in 0..300 {
            let c = one(4, i, Class::Ip6Ext);
            let Script::Frames(f) = &c.script else {
                panic!("stateless")
            };
            let plen = u16::from_be_bytes([f[0][18], f[0][19]]) as usize;
            assert_eq!(plen + 54, f[0].len(), "{}", c.what);
        }
    }

    #[test]
    fn fragments_carry_their_offsets() {
        for i in 0..100 {
            let c = one(4, i, Class::Ip6Frag);
            let Script::Frames(f) = &c.script else {
                panic!("stateless")
            };
            assert!(f.iter().all(|x| x[20] == 44), "{}", c.what);
        }
    }
}
