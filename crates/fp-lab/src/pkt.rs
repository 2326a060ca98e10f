//! Small frame builders for fixtures, the differential harness and the generator. Plain byte
//! layouts (deliberately odd ones too: IP options, hop-by-hop headers, raw protocols) with
//! correct checksums from `wirespeed_wire::checksum`; no parsing.

use wirespeed_wire::checksum::{accumulate, checksum, fold};

pub const ETH_P_IP: u16 = 0x0800;
pub const ETH_P_IPV6: u16 = 0x86DD;
pub const ETH_P_ARP: u16 = 0x0806;

/// What goes above IP.
#[derive(Debug, Clone)]
pub enum L4 {
    Udp {
        sport: u16,
        dport: u16,
        payload: Vec<u8>,
    },
    Tcp {
        sport: u16,
        dport: u16,
        payload: Vec<u8>,
    },
    Icmp {
        payload: Vec<u8>,
    },
    Raw {
        proto: u8,
        payload: Vec<u8>,
    },
}

impl L4 {
    fn proto(&self, v6: bool) -> u8 {
        match self {
            L4::Udp { .. } => 17,
            L4::Tcp { .. } => 6,
            L4::Icmp { .. } => {
                if v6 {
                    58
                } else {
                    1
                }
            }
            L4::Raw { proto, .. } => *proto,
        }
    }

    /// The transport bytes with their checksum, given the pseudo-header sum.
    fn bytes(&self, pseudo: u64, v6: bool) -> Vec<u8> {
        let (mut b, csum_at) = match self {
            L4::Udp {
                sport,
                dport,
                payload,
            } => {
                let len = 8 + payload.len() as u16;
                let mut b = Vec::with_capacity(len as usize);
                b.extend_from_slice(&sport.to_be_bytes());
                b.extend_from_slice(&dport.to_be_bytes());
                b.extend_from_slice(&len.to_be_bytes());
                b.extend_from_slice(&[0, 0]);
                b.extend_from_slice(payload);
                (b, Some(6))
            }
            L4::Tcp {
                sport,
                dport,
                payload,
            } => {
                let mut b = Vec::with_capacity(20 + payload.len());
                b.extend_from_slice(&sport.to_be_bytes());
                b.extend_from_slice(&dport.to_be_bytes());
                b.extend_from_slice(&1u32.to_be_bytes()); // seq
                b.extend_from_slice(&0u32.to_be_bytes()); // ack
                b.extend_from_slice(&[0x50, 0x02]); // 20-byte header, SYN
                b.extend_from_slice(&8192u16.to_be_bytes());
                b.extend_from_slice(&[0, 0, 0, 0]);
                b.extend_from_slice(payload);
                (b, Some(16))
            }
            L4::Icmp { payload } => {
                // echo request, id 1, seq 1
                let mut b = vec![if v6 { 128 } else { 8 }, 0, 0, 0, 0, 1, 0, 1];
                b.extend_from_slice(payload);
                (b, Some(2))
            }
            L4::Raw { payload, .. } => (payload.clone(), None),
        };
        if let Some(at) = csum_at {
            // ICMPv4 has no pseudo-header.
            let start = if matches!(self, L4::Icmp { .. }) && !v6 {
                0
            } else {
                pseudo
            };
            let mut c = !fold(accumulate(start + b.len() as u64, &b));
            if matches!(self, L4::Icmp { .. }) && !v6 {
                c = checksum(&b);
            }
            if c == 0 && matches!(self, L4::Udp { .. }) {
                c = 0xffff;
            }
            b[at..at + 2].copy_from_slice(&c.to_be_bytes());
        }
        b
    }
}

fn eth(dst: [u8; 6], src: [u8; 6], proto: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(128);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&proto.to_be_bytes());
    f
}

/// Ethernet + IPv4 (+ `options`, a multiple of 4 bytes) + L4.
/// Sets the TOS byte of an IPv4 frame built by [`ipv4`] and its header checksum again.
pub fn set_tos(frame: &mut [u8], tos: u8) {
    let ip = &mut frame[14..34];
    ip[1] = tos;
    ip[10..12].copy_from_slice(&[0, 0]);
    let c = checksum(ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
}

pub fn ipv4(
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    src: [u8; 4],
    dst: [u8; 4],
    ttl: u8,
    options: &[u8],
    l4: &L4,
) -> Vec<u8> {
    let proto = l4.proto(false);
    let pseudo = accumulate(accumulate(0, &src), &dst) + proto as u64;
    let body = l4.bytes(pseudo, false);
    let ihl = 5 + options.len() / 4;
    let tot = (ihl * 4 + body.len()) as u16;
    let mut ip = vec![0x40 | ihl as u8, 0];
    ip.extend_from_slice(&tot.to_be_bytes());
    ip.extend_from_slice(&[0x12, 0x34, 0x40, 0x00, ttl, proto, 0, 0]);
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    ip.extend_from_slice(options);
    let c = checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut f = eth(dst_mac, src_mac, ETH_P_IP);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&body);
    f
}

/// Makes an `ipv4` frame (no VLAN tag) a fragment: `offset` in 8-byte units, `more` for MF,
/// DF cleared as on every fragment; the header checksum follows.
pub fn make_ipv4_fragment(frame: &mut [u8], offset: u16, more: bool) {
    let flags_offset = offset & 0x1fff | if more { 0x2000 } else { 0 };
    frame[20..22].copy_from_slice(&flags_offset.to_be_bytes());
    frame[24..26].fill(0);
    let ihl = usize::from(frame[14] & 0x0f) * 4;
    let c = checksum(&frame[14..14 + ihl]);
    frame[24..26].copy_from_slice(&c.to_be_bytes());
}

/// Turns an `ipv4` frame's TCP or UDP checksum (no IP options) into what a sender with
/// checksum offload hands over: the pseudo-header sum alone, for the device to finish.
/// Returns where the checksum's coverage starts and where the field is from there, as a
/// virtio-net header says them (csum_start, csum_offset).
pub fn make_l4_checksum_partial_v4(frame: &mut [u8]) -> (u16, u16) {
    let l4 = 14 + 20;
    let proto = frame[14 + 9];
    let at = if proto == 17 { 6 } else { 16 };
    let len = (frame.len() - l4) as u64;
    let pseudo = accumulate(accumulate(0, &frame[26..30]), &frame[30..34]) + proto as u64 + len;
    frame[l4 + at..l4 + at + 2].copy_from_slice(&fold(pseudo).to_be_bytes());
    (l4 as u16, at as u16)
}

/// Ethernet + IPv6 (+ a hop-by-hop header when `hbh`) + L4.
pub fn ipv6(
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    src: [u8; 16],
    dst: [u8; 16],
    hop: u8,
    hbh: bool,
    l4: &L4,
) -> Vec<u8> {
    let proto = l4.proto(true);
    let pseudo = accumulate(accumulate(0, &src), &dst) + proto as u64;
    let mut body = l4.bytes(pseudo, true);
    let mut next = proto;
    if hbh {
        // 8 bytes: next header, length 0, PadN
        let mut h = vec![proto, 0, 1, 4, 0, 0, 0, 0];
        h.append(&mut body);
        body = h;
        next = 0;
    }
    let mut f = eth(dst_mac, src_mac, ETH_P_IPV6);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(body.len() as u16).to_be_bytes());
    f.extend_from_slice(&[next, hop]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&body);
    f
}

/// Makes an `ipv6` frame without extension headers a fragment: an 8-byte fragment header
/// (identification 9) goes in front of its upper-layer header, `offset` in 8-byte units,
/// `more` for M.
pub fn make_ipv6_fragment(frame: &mut Vec<u8>, offset: u16, more: bool) {
    const AT: usize = 14 + 40;
    let next = frame[14 + 6];
    let offset_more = (offset << 3) | u16::from(more);
    let mut header = vec![next, 0];
    header.extend_from_slice(&offset_more.to_be_bytes());
    header.extend_from_slice(&9u32.to_be_bytes());
    frame.splice(AT..AT, header);
    frame[14 + 6] = 44;
    let len = u16::from_be_bytes([frame[18], frame[19]]) + 8;
    frame[18..20].copy_from_slice(&len.to_be_bytes());
}

/// A gratuitous ARP request, for "not IP" cases.
pub fn arp(src_mac: [u8; 6], ip: [u8; 4]) -> Vec<u8> {
    let mut f = eth([0xff; 6], src_mac, ETH_P_ARP);
    f.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&ip);
    f
}

pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    let mut parts = s.trim().split(':');
    for b in m.iter_mut() {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    if parts.next().is_some() {
        return None;
    }
    Some(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_header_checksum_verifies() {
        let f = ipv4(
            [2; 6],
            [4; 6],
            [198, 18, 0, 1],
            [198, 18, 1, 1],
            64,
            &[],
            &L4::Udp {
                sport: 1,
                dport: 2,
                payload: vec![0; 18],
            },
        );
        assert_eq!(f.len(), 60);
        assert_eq!(checksum(&f[14..34]), 0);
    }

    #[test]
    fn udp_checksum_verifies_with_pseudo_header() {
        let f = ipv6(
            [2; 6],
            [4; 6],
            [0xfd; 16],
            [0xfd; 16],
            64,
            false,
            &L4::Udp {
                sport: 7,
                dport: 9,
                payload: vec![1, 2, 3],
            },
        );
        let udp = &f[54..];
        let pseudo = accumulate(0, &f[22..54]) + 17 + udp.len() as u64;
        assert_eq!(fold(accumulate(pseudo, udp)), 0xffff);
    }

    #[test]
    fn parses_macs() {
        assert_eq!(parse_mac("02:00:00:00:00:0a"), Some([2, 0, 0, 0, 0, 10]));
        assert_eq!(parse_mac("02:00"), None);
    }
}
