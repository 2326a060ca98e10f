//! ICMPv6 and neighbour discovery cases.
//!
//! Neighbour discovery comes from an on-link crafted address (fd00::5a:…, `craft::onlink_ip6`)
//! or a link-local one, as a neighbour's would. Nothing here may change what a DUT knows about
//! the gateway or another case: no advertisement names the gateway, a router advertisement
//! has lifetime 0 and no options, a redirect does not come from the first hop.

use super::{ipv6_frame, Case, Script};
use crate::craft::{
    self, ext, Ip6, Tcp, ACK, ALL_NODES6, DUT_IP6, DUT_MAC, PEER_MAC, PROTO_ICMPV6, SYN,
};
use wirespeed_testkit::rng::Rng;

const NA_ROUTER: u8 = 0x80;
const NA_SOLICITED: u8 = 0x40;
const NA_OVERRIDE: u8 = 0x20;

/// A crafted station MAC for case `c`.
fn station_mac(c: &Case) -> [u8; 6] {
    let i = (c.index as u32).to_be_bytes();
    [0x02, 0x5b, i[0], i[1], i[2], i[3]]
}

/// The DUT's own segment to the case's address, as an ICMPv6 error would quote it.
fn our_segment(c: &Case, src: [u8; 16]) -> Vec<u8> {
    let t = Tcp {
        sport: craft::HTTP_PORT,
        dport: c.sport,
        seq: 0x1000,
        ack: c.our_isn.wrapping_add(1),
        flags: SYN | ACK,
        window: 65535,
        ..Tcp::default()
    };
    Ip6::new(DUT_IP6, src, craft::PROTO_TCP).packet(&t.segment6(DUT_IP6, src))
}

pub(super) fn icmp6(c: &mut Case, r: &mut Rng) {
    let src = c.peer6.expect("an IPv6 case");
    let id = c.sport.to_be_bytes();
    let rest = [id[0], id[1], 0, 3];
    let mut h = Ip6::new(src, DUT_IP6, PROTO_ICMPV6);
    let m = |ty: u8, code: u8, rest: [u8; 4], data: &[u8], dst: [u8; 16]| {
        craft::icmp6(ty, code, rest, data, src, dst)
    };
    let (msg, name): (Vec<u8>, String) = match r.below(19) {
        0 => (m(128, 0, rest, &[], DUT_IP6), "echo, no data".into()),
        1 => (
            m(128, 0, rest, &[0xa5; 57], DUT_IP6),
            "echo, 57 bytes (odd)".into(),
        ),
        2 => (
            m(128, 0, rest, &[0x3c; 1400], DUT_IP6),
            "echo, 1400 bytes".into(),
        ),
        3 => (
            m(128, 5, rest, b"code five", DUT_IP6),
            "echo with code 5".into(),
        ),
        4 => {
            let mut x = m(128, 0, rest, b"bad checksum", DUT_IP6);
            x[3] ^= 0x10;
            (x, "echo with a bad checksum".into())
        }
        5 => {
            let mut x = m(128, 0, rest, b"no checksum", DUT_IP6);
            x[2..4].copy_from_slice(&[0, 0]);
            (x, "echo with checksum 0".into())
        }
        6 => (
            m(129, 0, rest, b"unsolicited", DUT_IP6),
            "echo reply".into(),
        ),
        7 => (
            m(200, 0, rest, b"?", DUT_IP6),
            "unknown informational type 200".into(),
        ),
        8 => (
            m(100, 0, [0; 4], &our_segment(c, src), DUT_IP6),
            "unknown error type 100".into(),
        ),
        9 => (
            m(1, 4, [0; 4], &our_segment(c, src), DUT_IP6),
            "port unreachable about our segment".into(),
        ),
        10 => (
            m(2, 0, 1280u32.to_be_bytes(), &our_segment(c, src), DUT_IP6),
            "packet too big (MTU 1280) about our segment".into(),
        ),
        11 => (
            m(3, 0, [0; 4], &our_segment(c, src), DUT_IP6),
            "time exceeded about our segment".into(),
        ),
        12 => (
            m(4, 0, 6u32.to_be_bytes(), &our_segment(c, src), DUT_IP6),
            "parameter problem about our segment".into(),
        ),
        13 => {
            h.dst = ALL_NODES6;
            (
                m(128, 0, rest, b"everyone", ALL_NODES6),
                "echo to all nodes ff02::1".into(),
            )
        }
        14 => {
            h.dst = craft::solicited_node(DUT_IP6);
            (
                m(128, 0, rest, b"solicited", h.dst),
                "echo to our solicited-node group".into(),
            )
        }
        15 => {
            h.hop_limit = 1;
            h.flow = 0xabcde;
            c.flow6 = h.flow;
            (
                m(128, 0, rest, b"labelled", DUT_IP6),
                "echo, hop limit 1, flow label 0xabcde".into(),
            )
        }
        16 => {
            h.tclass = 0xb8;
            (
                m(128, 0, rest, b"dscp", DUT_IP6),
                "echo, traffic class DSCP EF".into(),
            )
        }
        17 => (
            m(128, 0, rest, b"trunc", DUT_IP6)[..3].to_vec(),
            "3 bytes of ICMPv6".into(),
        ),
        _ => (
            m(139, 0, [0; 4], &[0; 16], DUT_IP6),
            "node information query (139)".into(),
        ),
    };
    c.what = name;
    let mut f = ipv6_frame(&h, &msg);
    craft::pad_to_minimum(&mut f);
    c.script = Script::Frames(vec![f]);
}

/// One neighbour discovery message: what to send, in words.
struct Nd {
    eth_dst: [u8; 6],
    eth_src: [u8; 6],
    h: Ip6,
    msg: Vec<u8>,
}

/// Neighbour discovery: one message of the thirty kinds below, from an on-link or link-local
/// neighbour of the case.
pub(super) fn ndp(c: &mut Case, r: &mut Rng) {
    let edge = r.below(30);
    let (mut x, name) = match edge {
        0..=9 => solicitation(c, edge),
        10..=19 => unusual_solicitation(c, edge),
        20..=25 => advertisement(c, edge),
        _ => router_message(c, edge),
    };
    // Replies go to the solicitation's source (or all nodes); a DAD probe's answer is
    // recognized by its type.
    c.peer6 = Some(x.h.src).filter(|s| *s != [0; 16]).or(c.peer6);
    if edge == 0 && r.one_in(4) {
        // The same solicitation behind an atomic fragment header: never taken (RFC 6980).
        let m = std::mem::take(&mut x.msg);
        x.msg = ext::fragment(PROTO_ICMPV6, 0, false, 0x77);
        x.msg.extend_from_slice(&m);
        x.h.next_header = 44;
        c.what = format!("{name}, in an atomic fragment");
    } else {
        c.what = name.to_string();
    }
    let mut f = craft::eth(x.eth_dst, x.eth_src, craft::ETH_IPV6, &x.h.packet(&x.msg));
    craft::pad_to_minimum(&mut f);
    c.script = Script::Frames(vec![f]);
}

/// A neighbour discovery message from our peer's MAC, `src` to `dst`, with hop limit 255.
fn nd(eth_dst: [u8; 6], src: [u8; 16], dst: [u8; 16], msg: Vec<u8>) -> Nd {
    let mut h = Ip6::new(src, dst, PROTO_ICMPV6);
    h.hop_limit = 255;
    Nd {
        eth_dst,
        eth_src: PEER_MAC,
        h,
        msg,
    }
}

/// Neighbour solicitations for our address (RFC 4861 7.1.1): multicast or unicast, with
/// or without a source lladdr, DAD probes (RFC 4862 5.4), and an invalid hop limit or code
/// (`edge` below 10).
fn solicitation(c: &Case, edge: usize) -> (Nd, &'static str) {
    let me = craft::onlink_ip6(c.index);
    let sn = craft::solicited_node(DUT_IP6);
    let sn_mac = craft::multicast_mac6(sn);
    let slla = craft::nd_lladdr(1, PEER_MAC);
    let nonce = [14u8, 1, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66];
    match edge {
        0 => (
            nd(sn_mac, me, sn, craft::ns(DUT_IP6, &slla, me, sn)),
            "NS for our address to its solicited-node group, with source lladdr",
        ),
        1 => (
            nd(sn_mac, me, sn, craft::ns(DUT_IP6, &[], me, sn)),
            "NS for our address to its solicited-node group, no source lladdr",
        ),
        2 => (
            nd(DUT_MAC, me, DUT_IP6, craft::ns(DUT_IP6, &slla, me, DUT_IP6)),
            "NS for our address, unicast, with source lladdr",
        ),
        3 => (
            nd(DUT_MAC, me, DUT_IP6, craft::ns(DUT_IP6, &[], me, DUT_IP6)),
            "NS for our address, unicast, no source lladdr",
        ),
        4 => (
            nd(sn_mac, [0; 16], sn, craft::ns(DUT_IP6, &[], [0; 16], sn)),
            "DAD probe for our address (from ::)",
        ),
        5 => (
            nd(sn_mac, [0; 16], sn, craft::ns(DUT_IP6, &nonce, [0; 16], sn)),
            "DAD probe for our address (from ::) with a nonce option",
        ),
        6 => (
            nd(sn_mac, [0; 16], sn, craft::ns(DUT_IP6, &slla, [0; 16], sn)),
            "DAD probe for our address with a source lladdr (invalid)",
        ),
        7 => (
            nd(
                DUT_MAC,
                [0; 16],
                DUT_IP6,
                craft::ns(DUT_IP6, &[], [0; 16], DUT_IP6),
            ),
            "DAD probe for our address sent unicast (invalid)",
        ),
        8 => {
            let mut n = nd(sn_mac, me, sn, craft::ns(DUT_IP6, &slla, me, sn));
            n.h.hop_limit = 254;
            (n, "NS for our address with hop limit 254")
        }
        _ => {
            let mut m = craft::ns(DUT_IP6, &slla, me, sn);
            m[1] = 1;
            m[2..4].copy_from_slice(&[0, 0]);
            let sum = craft::checksum6(me, sn, PROTO_ICMPV6, &m);
            m[2..4].copy_from_slice(&sum.to_be_bytes());
            (nd(sn_mac, me, sn, m), "NS for our address with code 1")
        }
    }
}

/// Unusual neighbour solicitations: for another target or sent to another group, with
/// broken or unknown options, or from a link-local, off-link or other station's source
/// (`edge` 10 to 19).
fn unusual_solicitation(c: &Case, edge: usize) -> (Nd, &'static str) {
    let me = craft::onlink_ip6(c.index);
    let ll = craft::link_local6(c.index);
    let sn = craft::solicited_node(DUT_IP6);
    let sn_mac = craft::multicast_mac6(sn);
    let all_mac = craft::multicast_mac6(ALL_NODES6);
    let slla = craft::nd_lladdr(1, PEER_MAC);
    let other = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3];
    match edge {
        10 => {
            let g = craft::solicited_node(other);
            (
                nd(
                    craft::multicast_mac6(g),
                    me,
                    g,
                    craft::ns(other, &slla, me, g),
                ),
                "NS for another address (fd00::3)",
            )
        }
        11 => (
            nd(
                all_mac,
                me,
                ALL_NODES6,
                craft::ns(DUT_IP6, &slla, me, ALL_NODES6),
            ),
            "NS for our address sent to all nodes ff02::1",
        ),
        12 => (
            nd(sn_mac, me, sn, craft::ns(ALL_NODES6, &slla, me, sn)),
            "NS for a multicast target (ff02::1)",
        ),
        13 => {
            let mut m = craft::ns(DUT_IP6, &[], me, sn);
            m.truncate(20);
            m[2..4].copy_from_slice(&[0, 0]);
            let sum = craft::checksum6(me, sn, PROTO_ICMPV6, &m);
            m[2..4].copy_from_slice(&sum.to_be_bytes());
            (nd(sn_mac, me, sn, m), "NS cut to 20 bytes (target cut)")
        }
        14 => (
            nd(
                sn_mac,
                me,
                sn,
                craft::ns(DUT_IP6, &[1, 0, 0, 0, 0, 0, 0, 0], me, sn),
            ),
            "NS for our address with an option of length 0",
        ),
        15 => {
            let mut o = vec![200u8, 1, 1, 2, 3, 4, 5, 6];
            o.extend_from_slice(&slla);
            (
                nd(sn_mac, me, sn, craft::ns(DUT_IP6, &o, me, sn)),
                "NS for our address with an unknown option (200) and source lladdr",
            )
        }
        16 => {
            let mut o = vec![1u8, 2];
            o.extend_from_slice(&PEER_MAC);
            o.extend_from_slice(&[0; 8]);
            (
                nd(sn_mac, me, sn, craft::ns(DUT_IP6, &o, me, sn)),
                "NS for our address with a 16-byte source lladdr option",
            )
        }
        17 => (
            nd(sn_mac, ll, sn, craft::ns(DUT_IP6, &slla, ll, sn)),
            "NS for our address from a link-local address",
        ),
        18 => {
            let off = c.peer6.expect("an IPv6 case");
            (
                nd(sn_mac, off, sn, craft::ns(DUT_IP6, &slla, off, sn)),
                "NS for our address from an off-link address",
            )
        }
        _ => {
            let mac = station_mac(c);
            let mut n = nd(
                sn_mac,
                me,
                sn,
                craft::ns(DUT_IP6, &craft::nd_lladdr(1, mac), me, sn),
            );
            n.eth_src = mac;
            (
                n,
                "NS for our address from another station's MAC (source lladdr that MAC)",
            )
        }
    }
}

/// Neighbour advertisements (RFC 4861 7.1.2): unsolicited and solicited, for a neighbour
/// or for our own address, and the invalid ones (`edge` 20 to 25).
fn advertisement(c: &Case, edge: usize) -> (Nd, &'static str) {
    let me = craft::onlink_ip6(c.index);
    let all_mac = craft::multicast_mac6(ALL_NODES6);
    let tlla = |mac| craft::nd_lladdr(2, mac);
    match edge {
        20 => (
            nd(
                all_mac,
                me,
                ALL_NODES6,
                craft::na(NA_OVERRIDE, me, &tlla(PEER_MAC), me, ALL_NODES6),
            ),
            "unsolicited NA to all nodes for a neighbour",
        ),
        21 => (
            nd(
                DUT_MAC,
                me,
                DUT_IP6,
                craft::na(NA_SOLICITED | NA_OVERRIDE, me, &tlla(PEER_MAC), me, DUT_IP6),
            ),
            "solicited NA to us for a neighbour we never asked for",
        ),
        22 => (
            nd(
                all_mac,
                me,
                ALL_NODES6,
                craft::na(NA_SOLICITED, me, &tlla(PEER_MAC), me, ALL_NODES6),
            ),
            "NA with the solicited flag to all nodes (invalid)",
        ),
        23 => (
            nd(
                all_mac,
                me,
                ALL_NODES6,
                craft::na(NA_OVERRIDE, DUT_IP6, &tlla(station_mac(c)), me, ALL_NODES6),
            ),
            "NA to all nodes with our address as target (a duplicate)",
        ),
        24 => (
            nd(
                DUT_MAC,
                me,
                DUT_IP6,
                craft::na(
                    NA_SOLICITED | NA_OVERRIDE,
                    DUT_IP6,
                    &tlla(station_mac(c)),
                    me,
                    DUT_IP6,
                ),
            ),
            "solicited NA to us with our address as target",
        ),
        _ => {
            let mut n = nd(
                all_mac,
                me,
                ALL_NODES6,
                craft::na(NA_OVERRIDE | NA_ROUTER, me, &tlla(PEER_MAC), me, ALL_NODES6),
            );
            n.h.hop_limit = 64;
            (n, "NA with hop limit 64 (invalid)")
        }
    }
}

/// Router solicitation and advertisements, and a redirect (RFC 4861 6 and 8), none of which
/// may change our first hop (`edge` from 26).
fn router_message(c: &Case, edge: usize) -> (Nd, &'static str) {
    let me = craft::onlink_ip6(c.index);
    let ll = craft::link_local6(c.index);
    let all_mac = craft::multicast_mac6(ALL_NODES6);
    let slla = craft::nd_lladdr(1, PEER_MAC);
    match edge {
        26 => {
            let routers = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
            (
                nd(
                    craft::multicast_mac6(routers),
                    me,
                    routers,
                    craft::icmp6(133, 0, [0; 4], &slla, me, routers),
                ),
                "router solicitation to all routers",
            )
        }
        27 => {
            // Hop limit, flags, lifetime, reachable time, retransmission timer: all 0.
            let body = [0u8; 8];
            (
                nd(
                    all_mac,
                    ll,
                    ALL_NODES6,
                    craft::icmp6(134, 0, [0; 4], &body, ll, ALL_NODES6),
                ),
                "router advertisement from a link-local address, lifetime 0, no options",
            )
        }
        28 => {
            let body = [0u8; 8];
            (
                nd(
                    all_mac,
                    me,
                    ALL_NODES6,
                    craft::icmp6(134, 0, [0; 4], &body, me, ALL_NODES6),
                ),
                "router advertisement from a global address (invalid)",
            )
        }
        _ => {
            // Redirect: target (the better hop), then destination (the case's off-link
            // address), from a link-local router that is not our first hop.
            let mut body = me.to_vec();
            body.extend_from_slice(&c.peer6.expect("an IPv6 case"));
            (
                nd(
                    DUT_MAC,
                    ll,
                    DUT_IP6,
                    craft::icmp6(137, 0, [0; 4], &body, ll, DUT_IP6),
                ),
                "redirect from a link-local router that is not our first hop",
            )
        }
    }
}
