//! Frame fixtures for the tests, built by hand so the tests do not depend on the stack under
//! test (and are readable next to the RFC layouts).
#![allow(dead_code)]

use std::net::Ipv4Addr;

pub const ETH_IPV4: u16 = 0x0800;
pub const ETH_ARP: u16 = 0x0806;
pub const ETH_IPV6: u16 = 0x86dd;

pub fn ethernet(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + payload.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// ARP for IPv4 over Ethernet; `oper` 1 is a request, 2 a reply.
pub fn arp(oper: u16, sha: [u8; 6], spa: Ipv4Addr, tha: [u8; 6], tpa: Ipv4Addr) -> Vec<u8> {
    let mut a = Vec::with_capacity(28);
    a.extend_from_slice(&1u16.to_be_bytes());
    a.extend_from_slice(&ETH_IPV4.to_be_bytes());
    a.extend_from_slice(&[6, 4]);
    a.extend_from_slice(&oper.to_be_bytes());
    a.extend_from_slice(&sha);
    a.extend_from_slice(&spa.octets());
    a.extend_from_slice(&tha);
    a.extend_from_slice(&tpa.octets());
    a
}

/// The Internet checksum (RFC 1071) of `data`, folded, starting from `sum`.
pub fn checksum(mut sum: u32, data: &[u8]) -> u16 {
    for chunk in data.chunks(2) {
        let word = if chunk.len() == 2 {
            u16::from_be_bytes([chunk[0], chunk[1]])
        } else {
            u16::from(chunk[0]) << 8
        };
        sum += u32::from(word);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An IPv4 header (no options) in front of `payload`, with a correct header checksum.
pub fn ipv4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, frag_off: u16, payload: &[u8]) -> Vec<u8> {
    let total = (20 + payload.len()) as u16;
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&[0x12, 0x34]);
    h.extend_from_slice(&frag_off.to_be_bytes());
    h.extend_from_slice(&[64, protocol, 0, 0]);
    h.extend_from_slice(&src.octets());
    h.extend_from_slice(&dst.octets());
    let c = checksum(0, &h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h.extend_from_slice(payload);
    h
}

/// A UDP datagram with a correct checksum over the IPv4 pseudo header.
pub fn udp(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let len = (8 + data.len()) as u16;
    let mut u = Vec::with_capacity(len as usize);
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&len.to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(data);
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&src.octets());
    pseudo.extend_from_slice(&dst.octets());
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&len.to_be_bytes());
    pseudo.extend_from_slice(&u);
    let mut c = checksum(0, &pseudo);
    if c == 0 {
        c = 0xffff;
    }
    u[6..8].copy_from_slice(&c.to_be_bytes());
    u
}

/// A bare TCP SYN header (no options, checksum left 0: XDP does not check it).
pub fn tcp_syn(sport: u16, dport: u16) -> Vec<u8> {
    let mut t = vec![0u8; 20];
    t[0..2].copy_from_slice(&sport.to_be_bytes());
    t[2..4].copy_from_slice(&dport.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = 0x02;
    t[14..16].copy_from_slice(&65535u16.to_be_bytes());
    t
}

/// Ethernet + IPv4 + UDP in one go.
pub fn udp_frame(
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    data: &[u8],
) -> Vec<u8> {
    ethernet(
        dst_mac,
        src_mac,
        ETH_IPV4,
        &ipv4(src, dst, 17, 0, &udp(src, dst, sport, dport, data)),
    )
}

/// Parses Ethernet + IPv4 + UDP: (source, source port, destination port, payload), or None.
pub fn parse_udp(frame: &[u8]) -> Option<(Ipv4Addr, u16, u16, Vec<u8>)> {
    if frame.len() < 14 + 20 + 8 || frame[12..14] != ETH_IPV4.to_be_bytes() || frame[23] != 17 {
        return None;
    }
    let ihl = usize::from(frame[14] & 0x0f) * 4;
    let src = Ipv4Addr::new(frame[26], frame[27], frame[28], frame[29]);
    let u = frame.get(14 + ihl..)?;
    let len = usize::from(u16::from_be_bytes([u[4], u[5]]));
    Some((
        src,
        u16::from_be_bytes([u[0], u[1]]),
        u16::from_be_bytes([u[2], u[3]]),
        u.get(8..len)?.to_vec(),
    ))
}

/// Parses an ARP request: (sender MAC, sender address, target address), or None.
pub fn parse_arp_request(frame: &[u8]) -> Option<([u8; 6], Ipv4Addr, Ipv4Addr)> {
    if frame.len() < 14 + 28 || frame[12..14] != ETH_ARP.to_be_bytes() || frame[20..22] != [0, 1] {
        return None;
    }
    let a = &frame[14..];
    let sha: [u8; 6] = a[8..14].try_into().ok()?;
    Some((
        sha,
        Ipv4Addr::new(a[14], a[15], a[16], a[17]),
        Ipv4Addr::new(a[24], a[25], a[26], a[27]),
    ))
}

/// True when the UDP checksum of an Ethernet + IPv4 + UDP frame verifies (or is 0: absent).
pub fn udp_checksum_ok(frame: &[u8]) -> bool {
    let ihl = usize::from(frame[14] & 0x0f) * 4;
    let ip = &frame[14..];
    let u = &ip[ihl..];
    let len = usize::from(u16::from_be_bytes([u[4], u[5]]));
    if u[6] == 0 && u[7] == 0 {
        return true;
    }
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&ip[12..20]);
    pseudo.extend_from_slice(&[0, 17]);
    pseudo.extend_from_slice(&(len as u16).to_be_bytes());
    pseudo.extend_from_slice(&u[..len]);
    checksum(0, &pseudo) == 0
}
