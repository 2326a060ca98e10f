//! An independent Internet checksum (RFC 1071), written from scratch and deliberately not
//! `wirespeed_wire::checksum`, so that tests check wire's checksums (and the data paths')
//! against a second implementation.

use std::net::IpAddr;

/// One's-complement sum of `b` (an odd length padded with a zero byte) added to `acc`, not
/// yet folded or inverted.
pub fn sum16(b: &[u8], mut acc: u32) -> u32 {
    for c in b.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        acc += u32::from(w);
    }
    acc
}

/// Folds the carries of `acc` into 16 bits and inverts: the checksum field's value, or 0
/// when `acc` summed a region whose checksum is right.
pub fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

fn addr_bytes(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(v) => v.octets().to_vec(),
        IpAddr::V6(v) => v.octets().to_vec(),
    }
}

/// The pseudo-header's sum (RFC 793 for IPv4, RFC 8200 8.1 for IPv6) for `len` bytes of
/// transport `proto`.
pub fn pseudo(src: IpAddr, dst: IpAddr, proto: u8, len: usize) -> u32 {
    let mut acc = sum16(&addr_bytes(src), 0);
    acc = sum16(&addr_bytes(dst), acc);
    acc + u32::from(proto) + len as u32
}

/// The checksum field a sender with checksum offload leaves for the device
/// (`CHECKSUM_PARTIAL`): the pseudo-header sum folded, not inverted, over no transport byte.
pub fn partial(src: IpAddr, dst: IpAddr, proto: u8, len: usize) -> u16 {
    !fold(pseudo(src, dst, proto, len))
}

/// Whether the IPv4 header at the start of `p` has a right header checksum.
pub fn ipv4_header_ok(p: &[u8]) -> bool {
    let hl = usize::from(p[0] & 0xf) * 4;
    fold(sum16(&p[..hl], 0)) == 0
}

/// Whether the UDP checksum of an untagged Ethernet + IPv4 + UDP frame verifies or is 0
/// (absent), over the length the UDP header gives; nothing else of the frame is checked.
pub fn udp_checksum_ok(frame: &[u8]) -> bool {
    let ip = &frame[14..];
    let u = &ip[usize::from(ip[0] & 0x0f) * 4..];
    let len = usize::from(u16::from_be_bytes([u[4], u[5]]));
    if u[6..8] == [0, 0] {
        return true;
    }
    let s: [u8; 4] = ip[12..16].try_into().unwrap();
    let d: [u8; 4] = ip[16..20].try_into().unwrap();
    fold(sum16(&u[..len], pseudo(s.into(), d.into(), 17, len))) == 0
}

/// Checks every checksum of an Ethernet frame (behind at most one 802.1Q tag) from
/// scratch: the IPv4 header, TCP/UDP/ICMP/ICMPv6, and for a tunnel the inner packet's too.
/// A UDP checksum of zero is absent. Panics with what is wrong.
pub fn verify_checksums(f: &[u8]) {
    if let Err(e) = check_frame(f) {
        panic!("{e}");
    }
}

/// Whether [`verify_checksums`] finds every checksum of `f` right.
pub fn checksums_ok(f: &[u8]) -> bool {
    check_frame(f).is_ok()
}

/// What [`verify_checksums`] finds wrong in `f`, if anything.
pub fn check_frame(f: &[u8]) -> Result<(), String> {
    let (et, l3) = match u16::from_be_bytes([f[12], f[13]]) {
        0x8100 => (u16::from_be_bytes([f[16], f[17]]), 18),
        et => (et, 14),
    };
    check_ip(&f[l3..], et == 0x86dd)
}

fn expect(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}

fn check_ip(p: &[u8], v6: bool) -> Result<(), String> {
    let (src, dst, proto, l4): (IpAddr, IpAddr, u8, &[u8]) = if !v6 {
        expect(p[0] >> 4 == 4, || format!("IPv4 version {}", p[0] >> 4))?;
        let hl = usize::from(p[0] & 0xf) * 4;
        expect(ipv4_header_ok(p), || "IPv4 header checksum".into())?;
        let tot = usize::from(u16::from_be_bytes([p[2], p[3]]));
        expect(tot == p.len(), || {
            format!("IPv4 total length {tot}, packet {}", p.len())
        })?;
        let s: [u8; 4] = p[12..16].try_into().unwrap();
        let d: [u8; 4] = p[16..20].try_into().unwrap();
        (s.into(), d.into(), p[9], &p[hl..tot])
    } else {
        expect(p[0] >> 4 == 6, || format!("IPv6 version {}", p[0] >> 4))?;
        let pl = usize::from(u16::from_be_bytes([p[4], p[5]]));
        expect(pl + 40 == p.len(), || {
            format!("IPv6 payload length {pl}, packet {}", p.len())
        })?;
        let s: [u8; 16] = p[8..24].try_into().unwrap();
        let d: [u8; 16] = p[24..40].try_into().unwrap();
        (s.into(), d.into(), p[6], &p[40..])
    };
    let transport_ok = || fold(sum16(l4, pseudo(src, dst, proto, l4.len()))) == 0;
    match proto {
        4 => check_ip(l4, false),
        41 => check_ip(l4, true),
        1 => expect(fold(sum16(l4, 0)) == 0, || "ICMP checksum".into()),
        6 => expect(transport_ok(), || "TCP checksum".into()),
        58 => expect(transport_ok(), || "ICMPv6 checksum".into()),
        // Zero: the sender computed none (RFC 768).
        17 => expect(l4[6..8] == [0, 0] || transport_ok(), || {
            "UDP checksum".into()
        }),
        _ => Err(format!("unexpected protocol {proto}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_1071_example_sums_and_folds() {
        // RFC 1071 4.1's example words: sum ddf2, checksum 220d.
        let b = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum16(&b, 0)), !0xddf2);
        assert_eq!(sum16(&[0xab], 0), 0xab00, "an odd byte is padded");
    }

    #[test]
    fn a_wrong_checksum_is_found() {
        let f = crate::frame::frame(
            [2; 6],
            [4; 6],
            "198.18.0.1".parse().unwrap(),
            "198.18.0.2".parse().unwrap(),
            &crate::frame::udp(1, 2),
        );
        assert!(checksums_ok(&f));
        let mut bad = f.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(!checksums_ok(&bad));
        let mut bad = f;
        bad[14 + 8] ^= 1;
        assert!(!checksums_ok(&bad));
    }
}
