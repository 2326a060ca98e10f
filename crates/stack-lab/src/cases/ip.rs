//! Ethernet and IPv4 edges (destination MACs, martian sources, header fields, options,
//! fragments) and protocols other than TCP and ICMP.

use super::{echo, ipv4_frame, plain_syn, to_dut, Case, Script};
use crate::craft::{self, Ip4, DUT_IP, DUT_MAC, PEER_MAC};
use wirespeed_testkit::rng::Rng;

/// The payload a header edge rides on: a SYN to the listening port or an echo request.
fn carrier(c: &Case, r: &mut Rng) -> (u8, Vec<u8>, &'static str) {
    if r.one_in(2) {
        (craft::PROTO_TCP, plain_syn(c, r), "SYN")
    } else {
        (craft::PROTO_ICMP, echo(c), "echo")
    }
}

pub(super) fn eth_dst(c: &mut Case, r: &mut Rng) {
    let dsts: [([u8; 6], &str); 5] = [
        ([0xff; 6], "broadcast"),
        (
            [0x01, 0x00, 0x5e, 0x00, 0x00, 0x01],
            "IPv4 multicast 01:00:5e:00:00:01",
        ),
        (
            [0x33, 0x33, 0x00, 0x00, 0x00, 0x01],
            "IPv6 multicast 33:33:00:00:00:01",
        ),
        (
            [0x02, 0x77, 0x73, 0x00, 0x00, 0x99],
            "another host's unicast",
        ),
        (
            [0x03, 0x77, 0x73, 0x00, 0x00, 0x02],
            "our MAC with the group bit",
        ),
    ];
    let (dst, name) = r.pick(&dsts);
    let mut f = match r.below(3) {
        0 => {
            let (proto, l4, what) = carrier(c, r);
            c.what = format!("{what} to eth {name}");
            ipv4_frame(&Ip4::new(c.peer_ip, DUT_IP, proto), &l4)
        }
        1 => {
            let (proto, l4, what) = carrier(c, r);
            c.what = format!("{what} to eth {name}, IP dst 255.255.255.255");
            ipv4_frame(&Ip4::new(c.peer_ip, [255; 4], proto), &l4)
        }
        _ => {
            c.what = format!("ARP request for our address to eth {name}");
            let a = craft::arp(1, PEER_MAC, c.peer_ip, [0; 6], DUT_IP);
            craft::eth(DUT_MAC, PEER_MAC, craft::ETH_ARP, &a)
        }
    };
    f[..6].copy_from_slice(&dst);
    c.script = Script::Frames(vec![f]);
}

pub(super) fn source(c: &mut Case, r: &mut Rng) {
    let sources: [([u8; 4], &str); 12] = [
        ([0, 0, 0, 0], "0.0.0.0"),
        ([0, 1, 2, 3], "0/8"),
        ([127, 0, 0, 1], "127.0.0.1"),
        ([127, 9, 8, 7], "127/8"),
        ([240, 0, 0, 5], "240/4"),
        ([250, 1, 2, 3], "240/4 (250.1.2.3)"),
        ([255, 255, 255, 255], "255.255.255.255"),
        ([224, 0, 0, 5], "multicast 224.0.0.5"),
        ([239, 1, 2, 3], "multicast 239.1.2.3"),
        (DUT_IP, "our own address"),
        ([198, 19, 255, 255], "our subnet's broadcast 198.19.255.255"),
        ([198, 18, 0, 0], "our subnet's network address 198.18.0.0"),
    ];
    let (src, name) = r.pick(&sources);
    c.peer_ip = src;
    let (proto, l4, what) = carrier(c, r);
    c.what = format!("{what} from {name}");
    c.script = Script::Frames(vec![ipv4_frame(&Ip4::new(src, DUT_IP, proto), &l4)]);
}

/// Header edges; each returns what it did and edits the packet `p` (checksum fixed after,
/// unless the edge is the checksum).
pub(super) fn header(c: &mut Case, r: &mut Rng) {
    let (proto, l4, what) = carrier(c, r);
    let mut h = Ip4::new(c.peer_ip, DUT_IP, proto);
    let edge = r.below(17);
    match edge {
        0 => h.ttl = 0,
        1 => h.ttl = 1,
        2 => h.tos = 0x03,
        3 => h.tos = 0x02,
        4 => h.tos = 0xb8,
        5 => h.df = false,
        6 => h.dst = [198, 19, 255, 255],
        7 => h.dst = [198, 18, 0, 0],
        8 => h.dst = [224, 0, 0, 1],
        _ => {}
    }
    let mut p = h.packet(&l4);
    let name = match edge {
        0 => "TTL 0".to_string(),
        1 => "TTL 1".into(),
        2 => "TOS ECN CE".into(),
        3 => "TOS ECT(0)".into(),
        4 => "TOS DSCP EF".into(),
        5 => "DF clear".into(),
        6 => "dst our subnet's broadcast".into(),
        7 => "dst our subnet's network address".into(),
        8 => "dst 224.0.0.1".into(),
        _ => spoil_header(&mut p, edge),
    };
    c.what = format!("{what}, IP {name}");
    let mut f = to_dut(&p);
    if edge == 16 {
        f.extend_from_slice(&[0xee; 12]);
    }
    c.script = Script::Frames(vec![f]);
}

/// The header edges that need the built packet.
fn spoil_header(p: &mut [u8], edge: usize) -> String {
    let total = p.len();
    let name = match edge {
        9 => {
            p[10] ^= 0x5a;
            return "bad header checksum".into();
        }
        10 => {
            p[0] = 0x65;
            "version 6"
        }
        11 => {
            p[0] = 0x44;
            "IHL 4"
        }
        12 => {
            p[2..4].copy_from_slice(&((total + 20) as u16).to_be_bytes());
            "total length past the frame"
        }
        13 => {
            p[2..4].copy_from_slice(&24u16.to_be_bytes());
            "total length shorter than the transport header"
        }
        14 => {
            p[6] |= 0x80;
            "reserved flag set"
        }
        15 => {
            p[6] = 0x20;
            "MF set, offset 0 (a first fragment alone)"
        }
        _ => "12 bytes of link padding after the packet",
    };
    craft::fix_ip_checksum(p);
    name.into()
}

/// IPv4 options, valid and malformed, on a SYN or an echo.
pub(super) fn options(c: &mut Case, r: &mut Rng) {
    let (proto, l4, what) = carrier(c, r);
    let hop = [198, 19, 200, 1];
    let mut rr = vec![7, 11, 4];
    rr.extend_from_slice(&[0; 8]);
    let mut rr_full = vec![7, 7, 8];
    rr_full.extend_from_slice(&hop);
    let mut lsrr = vec![131, 7, 4];
    lsrr.extend_from_slice(&hop);
    let mut ssrr = vec![137, 7, 4];
    ssrr.extend_from_slice(&hop);
    let mut ts = vec![68, 12, 5, 0];
    ts.extend_from_slice(&[0; 8]);
    let mut ts_addr = vec![68, 12, 5, 1];
    ts_addr.extend_from_slice(&[0; 8]);
    // What an answer echoes (Linux's __ip_options_echo): room left or not, and the edges
    // where it refuses to answer at all.
    let mut rr3 = vec![7, 15, 4];
    rr3.extend_from_slice(&[0; 12]);
    let mut rr_part = vec![7, 9, 4];
    rr_part.extend_from_slice(&[0; 6]);
    let mut ts_addr2 = vec![68, 20, 5, 1];
    ts_addr2.extend_from_slice(&[0; 16]);
    let mut pre_ours = vec![68, 12, 5, 3];
    pre_ours.extend_from_slice(&DUT_IP);
    pre_ours.extend_from_slice(&[0; 4]);
    let mut pre_other = vec![68, 12, 5, 3];
    pre_other.extend_from_slice(&hop);
    pre_other.extend_from_slice(&[0; 4]);
    let mut both = vec![68, 8, 5, 0, 0, 0, 0, 0, 1, 7, 7, 4, 0, 0, 0, 0];
    both.truncate(15);
    let choices: Vec<(Vec<u8>, &str)> = vec![
        (vec![1, 1, 1, 1], "4 NOPs"),
        (vec![0, 0, 0, 0], "EOL"),
        (vec![1, 0, 0, 0], "NOP then EOL"),
        (rr, "record route, room for 2"),
        (rr_full, "record route, full"),
        (vec![7, 7, 2, 0, 0, 0, 0], "record route, pointer 2"),
        (lsrr, "loose source route"),
        (ssrr, "strict source route"),
        (ts, "timestamp"),
        (ts_addr, "timestamp with addresses"),
        (vec![148, 4, 0, 0], "router alert"),
        (vec![0x9e, 4, 0, 0], "unknown option 158"),
        (vec![7, 0, 0, 0], "option length 0"),
        (vec![7, 1, 0, 0], "option length 1"),
        (
            vec![7, 40, 4, 0, 0, 0, 0, 0],
            "option length past the header",
        ),
        (vec![68, 3, 5, 0], "timestamp length 3"),
        (rr3, "record route, room for 3"),
        (rr_part, "record route, room for 1 and a part"),
        (vec![68, 8, 5, 0, 0, 0, 0, 0], "timestamp, room for 1"),
        (
            vec![68, 8, 9, 0x20, 0, 0, 0, 1],
            "timestamp, full, overflow 2",
        ),
        (ts_addr2, "timestamp with addresses, room for 2"),
        (pre_ours, "timestamp, prespecified: our address"),
        (pre_other, "timestamp, prespecified: another address"),
        (both, "timestamp then record route"),
    ];
    let (opts, name) = r.pick(&choices);
    let mut h = Ip4::new(c.peer_ip, DUT_IP, proto);
    h.options = opts;
    c.what = format!("{what}, IP options: {name}");
    c.script = Script::Frames(vec![ipv4_frame(&h, &l4)]);
}

/// A SYN (40 bytes of TCP) or an echo in fragments.
pub(super) fn fragments(c: &mut Case, r: &mut Rng) {
    let (proto, mut l4, what) = carrier(c, r);
    if proto == craft::PROTO_ICMP {
        // 56 bytes, as ping sends: longer than the 24 bytes the overlapping plan keeps first.
        let id = c.sport.to_be_bytes();
        l4 = craft::icmp(8, 0, [id[0], id[1], 0, 9], &[0x5a; 48]);
    }
    let mut h = Ip4::new(c.peer_ip, DUT_IP, proto);
    h.id = 0x4000 | (c.index as u16 & 0x3fff);
    let n = l4.len();
    let plans: Vec<(Vec<(usize, usize)>, &str)> = vec![
        (vec![(0, 16), (16, n)], "2 in order"),
        (vec![(0, 8), (8, n)], "tiny first (8 bytes)"),
        (vec![(16, n), (0, 16)], "2 reversed"),
        (vec![(0, 8), (8, 16), (16, n)], "3 in order"),
        (vec![(0, 16), (0, 16), (16, n)], "first duplicated"),
        (vec![(0, 16), (16, n), (16, n)], "last duplicated"),
        (vec![(0, 24), (16, n)], "overlapping, same bytes"),
        (vec![(0, 16)], "first alone"),
        (vec![(16, n)], "last alone"),
    ];
    let (plan, name) = r.pick(&plans);
    let mut frames: Vec<Vec<u8>> = craft::fragments(&h, &l4, &plan)
        .iter()
        .map(|p| to_dut(p))
        .collect();
    if name.starts_with("overlapping") && r.one_in(2) {
        // The second piece's overlap carries other bytes (its first: for the SYN, the TCP
        // checksum's high byte), so the datagram depends on which copy the receiver keeps.
        let last = frames.last_mut().expect("two pieces");
        let at = 14 + 20;
        last[at] ^= 0xff;
        c.what = format!("{what} in fragments: overlapping, different bytes");
    } else {
        c.what = format!("{what} in fragments: {name}");
    }
    for f in &mut frames {
        craft::pad_to_minimum(f);
    }
    c.script = Script::Frames(frames);
}

/// UDP to ports nobody serves and IP protocols nobody handles.
pub(super) fn other_proto(c: &mut Case, r: &mut Rng) {
    let (proto, l4, name): (u8, Vec<u8>, String) = match r.below(5) {
        0 => {
            let d = craft::udp(c.sport, 8080, b"hello", c.peer_ip, DUT_IP);
            (craft::PROTO_UDP, d, "UDP to port 8080".into())
        }
        1 => {
            let d = craft::udp(c.sport, 53, b"\x12\x34\x01\x00", c.peer_ip, DUT_IP);
            (craft::PROTO_UDP, d, "UDP to port 53".into())
        }
        2 => {
            let mut d = craft::udp(c.sport, 9, b"discard", c.peer_ip, DUT_IP);
            d[6] = 0;
            d[7] = 0;
            (craft::PROTO_UDP, d, "UDP to port 9 without checksum".into())
        }
        3 => {
            let p = r.pick(&[47u8, 132, 253, 41]);
            (p, vec![0u8; 16], format!("IP protocol {p}"))
        }
        _ => (
            2,
            vec![0x11, 0x64, 0xee, 0x9b, 0, 0, 0, 0],
            "IGMP query".into(),
        ),
    };
    c.what = name;
    let mut f = ipv4_frame(&Ip4::new(c.peer_ip, DUT_IP, proto), &l4);
    craft::pad_to_minimum(&mut f);
    c.script = Script::Frames(vec![f]);
}
