//! ARP and ICMP cases.

use super::{ipv4_frame, Case, Script};
use crate::craft::{self, Ip4, DUT_IP, DUT_MAC, PEER_MAC};
use wirespeed_testkit::rng::Rng;

/// A crafted station MAC for case `c` (replies to it still reach the peer's end).
fn station_mac(c: &Case) -> [u8; 6] {
    let i = (c.index as u32).to_be_bytes();
    [0x02, 0x5a, i[0], i[1], i[2], i[3]]
}

/// An ARP frame to send: (Ethernet destination, operation, sender MAC, sender address,
/// target MAC, target address, the case's name).
type Arp = (
    [u8; 6],
    u16,
    [u8; 6],
    [u8; 4],
    [u8; 6],
    [u8; 4],
    &'static str,
);

/// ARP: one message of the kinds below, from the peer or another station of its link, then
/// perhaps with a bad hardware length or type, cut short, or from another Ethernet source.
pub(super) fn arp(c: &mut Case, r: &mut Rng) {
    let sha = if r.one_in(2) {
        PEER_MAC
    } else {
        station_mac(c)
    };
    let me = c.peer_ip;
    let mut variants = well_formed(sha, me);
    variants.extend(malformed(sha, me));
    let (dst, op, sha, spa, tha, tpa, name) = r.pick(&variants);
    c.peer_ip = if spa == [0; 4] || spa == DUT_IP {
        c.peer_ip
    } else {
        spa
    };
    let mut a = craft::arp(op, sha, spa, tha, tpa);
    let mut what = name.to_string();
    match r.below(8) {
        0 => {
            a[4] = 8;
            what.push_str(", hardware length 8");
        }
        1 => {
            a[0..2].copy_from_slice(&6u16.to_be_bytes());
            what.push_str(", hardware type 6");
        }
        2 => {
            a.truncate(20);
            what.push_str(", truncated to 20 bytes");
        }
        _ => {}
    }
    let src = if r.one_in(4) {
        station_mac(c)
    } else {
        PEER_MAC
    };
    if src != sha {
        what.push_str(", Ethernet source differs from the sender MAC");
    }
    let mut f = craft::eth(dst, src, craft::ETH_ARP, &a);
    if r.one_in(2) {
        craft::pad_to_minimum(&mut f);
    }
    c.what = what;
    c.script = Script::Frames(vec![f]);
}

/// Well-formed messages a neighbour `me` (MAC `sha`) may send: requests for our address,
/// probes and announcements (RFC 5227, ours a conflict), gratuitous ARP, unsolicited
/// replies, requests for other addresses.
fn well_formed(sha: [u8; 6], me: [u8; 4]) -> Vec<Arp> {
    let bcast = [0xff; 6];
    vec![
        (
            bcast,
            1,
            sha,
            me,
            [0; 6],
            DUT_IP,
            "request for our address, broadcast",
        ),
        (
            DUT_MAC,
            1,
            sha,
            me,
            [0; 6],
            DUT_IP,
            "request for our address, unicast",
        ),
        (
            bcast,
            1,
            sha,
            me,
            [0xff; 6],
            DUT_IP,
            "request, target MAC ff:ff:ff:ff:ff:ff",
        ),
        (
            bcast,
            1,
            sha,
            [0; 4],
            [0; 6],
            DUT_IP,
            "probe for our address (sender 0.0.0.0, RFC 5227)",
        ),
        (
            bcast,
            1,
            sha,
            [0; 4],
            [0; 6],
            [198, 19, 0, 77],
            "probe for another address",
        ),
        (
            bcast,
            1,
            sha,
            DUT_IP,
            [0; 6],
            DUT_IP,
            "announcement of our own address (conflict)",
        ),
        (
            bcast,
            1,
            sha,
            DUT_IP,
            [0; 6],
            [198, 19, 0, 78],
            "request from our own address (conflict)",
        ),
        (bcast, 1, sha, me, [0; 6], me, "gratuitous request"),
        (bcast, 2, sha, me, bcast, me, "gratuitous reply"),
        (
            DUT_MAC,
            2,
            sha,
            me,
            DUT_MAC,
            DUT_IP,
            "unsolicited reply to us",
        ),
        (
            bcast,
            1,
            sha,
            me,
            [0; 6],
            [198, 19, 0, 79],
            "request for another address",
        ),
        (
            bcast,
            1,
            sha,
            me,
            [0; 6],
            [198, 19, 255, 255],
            "request for the subnet broadcast",
        ),
    ]
}

/// Messages Linux must refuse or ignore: a multicast or zero sender MAC, an operation
/// neither request nor reply, a multicast or loopback sender address.
fn malformed(sha: [u8; 6], me: [u8; 4]) -> Vec<Arp> {
    let bcast = [0xff; 6];
    vec![
        (
            bcast,
            1,
            [0x01, 0, 0x5e, 0, 0, 9],
            me,
            [0; 6],
            DUT_IP,
            "request from a multicast sender MAC",
        ),
        (
            bcast,
            1,
            [0; 6],
            me,
            [0; 6],
            DUT_IP,
            "request from sender MAC 00:00:00:00:00:00",
        ),
        (
            bcast,
            3,
            sha,
            me,
            [0; 6],
            DUT_IP,
            "operation 3 (RARP request)",
        ),
        (bcast, 0, sha, me, [0; 6], DUT_IP, "operation 0"),
        (
            bcast,
            1,
            sha,
            [224, 0, 0, 9],
            [0; 6],
            DUT_IP,
            "request from a multicast sender address",
        ),
        (
            bcast,
            1,
            sha,
            [127, 0, 0, 1],
            [0; 6],
            DUT_IP,
            "request from 127.0.0.1",
        ),
    ]
}

pub(super) fn icmp(c: &mut Case, r: &mut Rng) {
    let id = c.sport.to_be_bytes();
    let rest = [id[0], id[1], 0, 3];
    let mut h = Ip4::new(c.peer_ip, DUT_IP, craft::PROTO_ICMP);
    let (msg, name): (Vec<u8>, String) = match r.below(14) {
        0 => (craft::icmp(8, 0, rest, &[]), "echo, no data".into()),
        1 => (
            craft::icmp(8, 0, rest, &[0xa5; 57]),
            "echo, 57 bytes (odd)".into(),
        ),
        2 => (
            craft::icmp(8, 0, rest, &[0x3c; 1400]),
            "echo, 1400 bytes".into(),
        ),
        3 => (
            craft::icmp(8, 5, rest, b"code five"),
            "echo with code 5".into(),
        ),
        4 => {
            let mut m = craft::icmp(8, 0, rest, b"bad checksum");
            m[3] ^= 0x10;
            (m, "echo with a bad checksum".into())
        }
        5 => (craft::icmp(0, 0, rest, b"unsolicited"), "echo reply".into()),
        6 => {
            // Linux's icmp_timestamp reads the 4-byte originate time only.
            let originate = [0x01, 0x23, 0x45, 0x67];
            let (code, body, what) = match r.below(4) {
                0 => (0, [&originate[..], &[0; 8]].concat(), "timestamp request"),
                1 => (0, originate.to_vec(), "timestamp request, originate only"),
                2 => (
                    0,
                    originate[..3].to_vec(),
                    "timestamp request, 3 bytes of it",
                ),
                _ => (
                    9,
                    [&originate[..], &[0x77; 16]].concat(),
                    "timestamp request, code 9, 20 bytes",
                ),
            };
            (craft::icmp(13, code, rest, &body), what.into())
        }
        7 => (craft::icmp(15, 0, rest, &[]), "information request".into()),
        8 => (
            craft::icmp(17, 0, rest, &[0; 4]),
            "address mask request".into(),
        ),
        9 => {
            let quoted = Ip4::new(DUT_IP, c.peer_ip, craft::PROTO_TCP)
                .packet(&[0x1f, 0x90, 0x27, 0x10, 0, 0, 0, 1]);
            (
                craft::icmp(3, 3, [0; 4], &quoted),
                "port unreachable about our segment".into(),
            )
        }
        10 => (craft::icmp(255, 0, rest, b"?"), "type 255".into()),
        11 => {
            h.dst = [198, 19, 255, 255];
            (
                craft::icmp(8, 0, rest, b"to broadcast"),
                "echo to the subnet broadcast".into(),
            )
        }
        12 => {
            h.ttl = 1;
            h.df = false;
            (
                craft::icmp(8, 0, rest, b"ttl one"),
                "echo, TTL 1, DF clear".into(),
            )
        }
        _ => (
            craft::icmp(8, 0, rest, b"trunc")[..3].to_vec(),
            "3 bytes of ICMP".into(),
        ),
    };
    c.what = name;
    let mut f = ipv4_frame(&h, &msg);
    craft::pad_to_minimum(&mut f);
    c.script = Script::Frames(vec![f]);
}
