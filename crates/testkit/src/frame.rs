//! Test frames built with `wirespeed_wire`'s `Repr`s (Ethernet and 802.1Q, IPv4 with options
//! and fragments, IPv6 with a hop-by-hop or fragment header, TCP, UDP, ICMP/ICMPv6, ARP),
//! their checksums by wire's code; `crate::csum` checks them independently.

use std::net::IpAddr;

use wirespeed_wire::checksum;
use wirespeed_wire::{
    ArpOperation, ArpRepr, EtherType, EthernetRepr, FragmentHeader, IpProtocol, Ipv4Repr, Ipv6Repr,
    MacAddr, SeqNumber, TcpOptions, TcpRepr, UdpRepr,
};

pub const ETH_P_IP: u16 = 0x0800;
pub const ETH_P_IPV6: u16 = 0x86DD;
pub const ETH_P_ARP: u16 = 0x0806;

pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const PSH: u8 = 0x08;
pub const ACK: u8 = 0x10;

/// A TCP segment: raw option bytes (a multiple of 4) go behind the 20-byte header.
#[derive(Clone, Debug)]
pub struct Tcp {
    pub sport: u16,
    pub dport: u16,
    pub flags: u8,
    pub seq: u32,
    /// Sent only when `flags` has ACK.
    pub ack: u32,
    pub window: u16,
    pub options: Vec<u8>,
    pub payload: Vec<u8>,
}

impl Default for Tcp {
    /// Sequence 1000, acknowledgment 2000, window 65535, no flags, options or payload.
    fn default() -> Self {
        Tcp {
            sport: 0,
            dport: 0,
            flags: 0,
            seq: 1000,
            ack: 2000,
            window: 65535,
            options: Vec::new(),
            payload: Vec::new(),
        }
    }
}

impl Tcp {
    /// The segment wire's `repr` describes, its options as wire writes them, carrying
    /// `payload`: for tests that state a segment as a `TcpRepr`.
    pub fn from_repr(repr: &TcpRepr, payload: &[u8]) -> Tcp {
        let mut header = vec![0; repr.header_len()];
        repr.emit(&mut header).unwrap();
        Tcp {
            sport: repr.src_port,
            dport: repr.dst_port,
            flags: header[13],
            seq: repr.seq.0,
            ack: repr.ack.map_or(0, |a| a.0),
            window: repr.window,
            options: header[20..].to_vec(),
            payload: payload.to_vec(),
        }
    }
}

/// What goes above IP.
#[derive(Clone, Debug)]
pub enum L4 {
    Tcp(Tcp),
    Udp {
        sport: u16,
        dport: u16,
        payload: Vec<u8>,
    },
    /// ICMP or ICMPv6 (by the address family): type, code, the 4 bytes after the checksum,
    /// and the rest.
    Icmp {
        ty: u8,
        code: u8,
        rest: [u8; 4],
        payload: Vec<u8>,
    },
    /// An echo request (ICMP type 8 or ICMPv6 type 128, by the family), id 1, sequence 1.
    Echo {
        payload: Vec<u8>,
    },
    /// Any protocol, its bytes as given (no checksum).
    Raw {
        proto: u8,
        payload: Vec<u8>,
    },
}

impl L4 {
    /// The IP protocol number over IPv4 or (`v6`) IPv6.
    pub fn proto(&self, v6: bool) -> u8 {
        match self {
            L4::Tcp(_) => 6,
            L4::Udp { .. } => 17,
            L4::Icmp { .. } | L4::Echo { .. } => {
                if v6 {
                    58
                } else {
                    1
                }
            }
            L4::Raw { proto, .. } => *proto,
        }
    }
}

/// A TCP segment with `flags` and the payload "ping" (see [`Tcp`]'s defaults).
pub fn tcp(sport: u16, dport: u16, flags: u8) -> L4 {
    L4::Tcp(Tcp {
        sport,
        dport,
        flags,
        payload: b"ping".to_vec(),
        ..Tcp::default()
    })
}

/// A SYN with sequence 1 and window 8192 carrying `payload`.
pub fn tcp_syn(sport: u16, dport: u16, payload: Vec<u8>) -> L4 {
    L4::Tcp(Tcp {
        sport,
        dport,
        flags: SYN,
        seq: 1,
        window: 8192,
        payload,
        ..Tcp::default()
    })
}

/// A UDP datagram with 18 bytes of 0xab.
pub fn udp(sport: u16, dport: u16) -> L4 {
    L4::Udp {
        sport,
        dport,
        payload: vec![0xab; 18],
    }
}

fn addr_bytes(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(v) => v.octets().to_vec(),
        IpAddr::V6(v) => v.octets().to_vec(),
    }
}

fn tcp_bytes(src: IpAddr, dst: IpAddr, t: &Tcp) -> Vec<u8> {
    assert!(
        t.options.len().is_multiple_of(4),
        "TCP options pad to 4 bytes"
    );
    let repr = TcpRepr {
        src_port: t.sport,
        dst_port: t.dport,
        seq: SeqNumber(t.seq),
        ack: (t.flags & ACK != 0).then_some(SeqNumber(t.ack)),
        flags: t.flags,
        window: t.window,
        options: TcpOptions::default(),
    };
    let mut b = vec![0; repr.header_len()];
    repr.emit(&mut b).unwrap();
    b[12] = (((b.len() + t.options.len()) / 4) as u8) << 4;
    b.extend(&t.options);
    b.extend(&t.payload);
    let c = checksum::transport(addr_bytes(src), addr_bytes(dst), 6, &b);
    b[16..18].copy_from_slice(&c.to_be_bytes());
    b
}

/// The transport header and payload with its checksum over (src, dst): (protocol, bytes).
pub fn l4_bytes(src: IpAddr, dst: IpAddr, l4: &L4) -> (u8, Vec<u8>) {
    let v6 = src.is_ipv6();
    let icmp = |ty: u8, code: u8, rest: &[u8; 4], payload: &[u8]| {
        let mut b = vec![ty, code, 0, 0];
        b.extend(rest);
        b.extend(payload);
        let c = if v6 {
            checksum::transport(addr_bytes(src), addr_bytes(dst), 58, &b)
        } else {
            checksum::checksum(&b)
        };
        b[2..4].copy_from_slice(&c.to_be_bytes());
        b
    };
    let b = match l4 {
        L4::Tcp(t) => tcp_bytes(src, dst, t),
        L4::Udp {
            sport,
            dport,
            payload,
        } => {
            let mut b = vec![0; 8];
            b.extend(payload);
            let repr = UdpRepr {
                src_port: *sport,
                dst_port: *dport,
            };
            repr.emit(&mut b, payload.len(), src, dst).unwrap();
            b
        }
        L4::Icmp {
            ty,
            code,
            rest,
            payload,
        } => icmp(*ty, *code, rest, payload),
        L4::Echo { payload } => icmp(if v6 { 128 } else { 8 }, 0, &[0, 1, 0, 1], payload),
        L4::Raw { payload, .. } => payload.clone(),
    };
    (l4.proto(v6), b)
}

/// The IP header's fields beyond addresses and protocol.
#[derive(Clone, Debug)]
pub struct IpHeader {
    /// TTL or hop limit.
    pub ttl: u8,
    /// IPv4 only.
    pub ident: u16,
    /// IPv4 only.
    pub dont_frag: bool,
    /// The DS field (IPv4) or traffic class (IPv6).
    pub tos: u8,
    /// IPv4 options, a multiple of 4 bytes.
    pub options: Vec<u8>,
    /// IPv6 only: an 8-byte hop-by-hop header (PadN) in front of the transport.
    pub hop_by_hop: bool,
}

impl Default for IpHeader {
    /// TTL 64, identification 0, DF set, no options or extension header.
    fn default() -> Self {
        IpHeader {
            ttl: 64,
            ident: 0,
            dont_frag: true,
            tos: 0,
            options: Vec::new(),
            hop_by_hop: false,
        }
    }
}

/// An IP header (IPv4: DF set, TTL 64, id 0; IPv6: hop limit 64, traffic class and flow
/// label 0) for `payload_len` bytes of `proto`.
pub fn ip_header(src: IpAddr, dst: IpAddr, proto: u8, payload_len: usize) -> Vec<u8> {
    ip_header_with(src, dst, proto, payload_len, &IpHeader::default())
}

/// An IP header as `h` says, with its extension header when `h` asks for one.
pub fn ip_header_with(
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    payload_len: usize,
    h: &IpHeader,
) -> Vec<u8> {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let repr = Ipv4Repr {
                src: s.into(),
                dst: d.into(),
                protocol: IpProtocol::from(proto),
                payload_len,
                ttl: h.ttl,
                ident: h.ident,
                dont_frag: h.dont_frag,
                dscp_ecn: h.tos,
            };
            let mut b = vec![0; 20 + h.options.len()];
            repr.emit_with_options(&mut b, &h.options).unwrap();
            b
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            // 8 bytes: next header, length 0, PadN over the other 4.
            let hbh = [proto, 0, 1, 4, 0, 0, 0, 0];
            let ext: &[u8] = if h.hop_by_hop { &hbh } else { &[] };
            let repr = Ipv6Repr {
                src: s.into(),
                dst: d.into(),
                next_header: IpProtocol::from(if h.hop_by_hop { 0 } else { proto }),
                payload_len: ext.len() + payload_len,
                hop_limit: h.ttl,
                traffic_class: h.tos,
            };
            let mut b = vec![0; 40];
            repr.emit(&mut b).unwrap();
            b.extend(ext);
            b
        }
        _ => panic!("mixed families"),
    }
}

/// The IP packet (header and transport) with [`ip_header`]'s defaults.
pub fn ip_packet(src: IpAddr, dst: IpAddr, l4: &L4) -> Vec<u8> {
    ip_packet_with(src, dst, l4, &IpHeader::default())
}

/// The IP packet with the header `h`.
pub fn ip_packet_with(src: IpAddr, dst: IpAddr, l4: &L4, h: &IpHeader) -> Vec<u8> {
    let (proto, b) = l4_bytes(src, dst, l4);
    let mut p = ip_header_with(src, dst, proto, b.len(), h);
    p.extend(b);
    p
}

/// An Ethernet frame of `ethertype` around `payload`, behind an 802.1Q tag when `vlan`.
pub fn ethernet_vlan(
    dst: [u8; 6],
    src: [u8; 6],
    vlan: Option<u16>,
    ethertype: u16,
    payload: &[u8],
) -> Vec<u8> {
    let repr = EthernetRepr {
        dst: MacAddr(dst),
        src: MacAddr(src),
        vlan_id: vlan,
        ethertype: EtherType::from(ethertype),
    };
    let mut f = vec![0; repr.header_len()];
    repr.emit(&mut f).unwrap();
    f.extend(payload);
    f
}

/// An Ethernet frame behind the tag `tag` (TPID, TCI) as given: an 802.1ad TPID or a
/// priority, which [`ethernet_vlan`] does not write.
pub fn ethernet_tagged(
    dst: [u8; 6],
    src: [u8; 6],
    tag: Option<(u16, u16)>,
    ethertype: u16,
    payload: &[u8],
) -> Vec<u8> {
    let mut f = ethernet(dst, src, ethertype, payload);
    if let Some((tpid, tci)) = tag {
        let [a, b] = tpid.to_be_bytes();
        let [c, d] = tci.to_be_bytes();
        f.splice(12..12, [a, b, c, d]);
    }
    f
}

/// An untagged Ethernet frame of `ethertype` around `payload`.
pub fn ethernet(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    ethernet_vlan(dst, src, None, ethertype, payload)
}

/// An Ethernet frame around an IPv4 or (`v6`) IPv6 packet.
pub fn eth(dmac: [u8; 6], smac: [u8; 6], v6: bool, payload: &[u8]) -> Vec<u8> {
    ethernet(dmac, smac, if v6 { ETH_P_IPV6 } else { ETH_P_IP }, payload)
}

/// Ethernet, IP with [`ip_header`]'s defaults, and `l4`.
pub fn frame(dmac: [u8; 6], smac: [u8; 6], src: IpAddr, dst: IpAddr, l4: &L4) -> Vec<u8> {
    eth(dmac, smac, src.is_ipv6(), &ip_packet(src, dst, l4))
}

/// Ethernet + IPv4 (identification 0x1234, DF, `ttl`, `options`: a multiple of 4 bytes) +
/// `l4`.
pub fn ipv4(
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    src: [u8; 4],
    dst: [u8; 4],
    ttl: u8,
    options: &[u8],
    l4: &L4,
) -> Vec<u8> {
    let h = IpHeader {
        ttl,
        ident: 0x1234,
        options: options.to_vec(),
        ..IpHeader::default()
    };
    let p = ip_packet_with(src.into(), dst.into(), l4, &h);
    eth(dst_mac, src_mac, false, &p)
}

/// Ethernet + IPv6 (hop limit `hop`, a hop-by-hop header when `hbh`) + `l4`.
pub fn ipv6(
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    src: [u8; 16],
    dst: [u8; 16],
    hop: u8,
    hbh: bool,
    l4: &L4,
) -> Vec<u8> {
    let h = IpHeader {
        ttl: hop,
        hop_by_hop: hbh,
        ..IpHeader::default()
    };
    let p = ip_packet_with(src.into(), dst.into(), l4, &h);
    eth(dst_mac, src_mac, true, &p)
}

/// An IPv4 header (no options, identification 0x1234, TTL 64, the flags-and-offset word
/// `frag_off` as given) in front of `payload` as given: for frames a parser must steer by
/// their headers alone.
pub fn ipv4_raw(
    src: std::net::Ipv4Addr,
    dst: std::net::Ipv4Addr,
    proto: u8,
    frag_off: u16,
    payload: &[u8],
) -> Vec<u8> {
    let h = IpHeader {
        ident: 0x1234,
        dont_frag: false,
        ..IpHeader::default()
    };
    let mut p = ip_header_with(src.into(), dst.into(), proto, payload.len(), &h);
    p[6..8].copy_from_slice(&frag_off.to_be_bytes());
    p[10..12].fill(0);
    let c = checksum::checksum(&p);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p.extend(payload);
    p
}

/// A bare 20-byte TCP SYN header (sequence 0, window 65535), its checksum left 0: for an XDP
/// parser, which does not check it.
pub fn bare_tcp_syn(sport: u16, dport: u16) -> Vec<u8> {
    let repr = TcpRepr {
        src_port: sport,
        dst_port: dport,
        seq: SeqNumber(0),
        ack: None,
        flags: SYN,
        window: 65535,
        options: TcpOptions::default(),
    };
    let mut b = vec![0; repr.header_len()];
    repr.emit(&mut b).unwrap();
    b
}

/// Ethernet + IPv4 ([`ipv4_raw`]'s header, not a fragment) + UDP with its checksum.
pub fn udp_frame(
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    src: std::net::Ipv4Addr,
    dst: std::net::Ipv4Addr,
    sport: u16,
    dport: u16,
    data: &[u8],
) -> Vec<u8> {
    let l4 = L4::Udp {
        sport,
        dport,
        payload: data.to_vec(),
    };
    let (proto, udp) = l4_bytes(src.into(), dst.into(), &l4);
    ethernet(
        dst_mac,
        src_mac,
        ETH_P_IP,
        &ipv4_raw(src, dst, proto, 0, &udp),
    )
}

/// Recomputes the IPv4 header checksum of an untagged Ethernet frame (a fixture that
/// changed a header field by hand).
pub fn fix_ipv4_csum(f: &mut [u8]) {
    let hl = usize::from(f[14] & 0xf) * 4;
    f[24..26].fill(0);
    let c = checksum::checksum(&f[14..14 + hl]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
}

/// Sets the DS byte of an untagged IPv4 frame, and its header checksum again.
pub fn set_tos(frame: &mut [u8], tos: u8) {
    frame[15] = tos;
    fix_ipv4_csum(frame);
}

/// Makes an untagged IPv4 frame a fragment: `offset` in 8-byte units, `more` for MF, DF
/// cleared as on every fragment; the header checksum follows.
pub fn make_ipv4_fragment(frame: &mut [u8], offset: u16, more: bool) {
    let flags_offset = offset & 0x1fff | if more { 0x2000 } else { 0 };
    frame[20..22].copy_from_slice(&flags_offset.to_be_bytes());
    fix_ipv4_csum(frame);
}

/// Makes an untagged IPv6 frame without extension headers a fragment: an 8-byte fragment
/// header (identification 9) goes in front of its upper-layer header, `offset` in 8-byte
/// units, `more` for M.
pub fn make_ipv6_fragment(frame: &mut Vec<u8>, offset: u16, more: bool) {
    const AT: usize = 14 + 40;
    let header = FragmentHeader {
        next_header: IpProtocol::from(frame[14 + 6]),
        offset_bytes: usize::from(offset) * 8,
        more,
        ident: 9,
    };
    let mut b = [0; 8];
    header.emit(&mut b).unwrap();
    frame.splice(AT..AT, b);
    frame[14 + 6] = 44;
    let len = u16::from_be_bytes([frame[18], frame[19]]) + 8;
    frame[18..20].copy_from_slice(&len.to_be_bytes());
}

/// Turns an untagged IPv4 frame's TCP or UDP checksum (no IP options) into what a sender
/// with checksum offload hands over (`CHECKSUM_PARTIAL`): the pseudo-header sum alone, for
/// the device to finish. Returns (csum_start, csum_offset) as a virtio-net header says them.
pub fn make_l4_checksum_partial_v4(frame: &mut [u8]) -> (u16, u16) {
    let l4 = 14 + 20;
    let proto = frame[14 + 9];
    let at = if proto == 17 { 6 } else { 16 };
    let len = (frame.len() - l4) as u16;
    let c = checksum::partial(&frame[26..30], &frame[30..34], proto, len);
    frame[l4 + at..l4 + at + 2].copy_from_slice(&c.to_be_bytes());
    (l4 as u16, at as u16)
}

/// An IP packet as a router forwards it, one hop on: TTL (IPv4, header checksum recomputed)
/// or hop limit less one.
pub fn hop(p: &[u8]) -> Vec<u8> {
    let mut p = p.to_vec();
    if p[0] >> 4 == 4 {
        p[8] -= 1;
        let hl = usize::from(p[0] & 0xf) * 4;
        p[10..12].fill(0);
        let c = checksum::checksum(&p[..hl]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
    } else {
        p[7] -= 1;
    }
    p
}

/// An untagged Ethernet frame whose IP packet went one hop (see [`hop`]).
pub fn hopped(f: &[u8]) -> Vec<u8> {
    let mut out = f[..14].to_vec();
    out.extend(hop(&f[14..]));
    out
}

/// An ARP packet for IPv4 over Ethernet; `oper` 1 is a request, 2 a reply.
pub fn arp_packet(
    oper: u16,
    sha: [u8; 6],
    spa: std::net::Ipv4Addr,
    tha: [u8; 6],
    tpa: std::net::Ipv4Addr,
) -> Vec<u8> {
    let repr = ArpRepr {
        operation: ArpOperation::from(oper),
        sender_mac: MacAddr(sha),
        sender_ip: spa.into(),
        target_mac: MacAddr(tha),
        target_ip: tpa.into(),
    };
    let mut b = vec![0; 28];
    repr.emit(&mut b).unwrap();
    b
}

/// A gratuitous ARP request from `src_mac` for `ip`, broadcast.
pub fn arp(src_mac: [u8; 6], ip: [u8; 4]) -> Vec<u8> {
    let a = arp_packet(1, src_mac, ip.into(), [0; 6], ip.into());
    ethernet([0xff; 6], src_mac, ETH_P_ARP, &a)
}

/// A MAC address written aa:bb:cc:dd:ee:ff.
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
    use crate::csum::{check_frame, verify_checksums};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn every_builder_frame_verifies_independently() {
        let (m1, m2) = ([2; 6], [4; 6]);
        let tcp_opts = L4::Tcp(Tcp {
            sport: 1,
            dport: 2,
            flags: SYN,
            options: vec![2, 4, 5, 0xb4],
            payload: vec![7; 3],
            ..Tcp::default()
        });
        let icmp = L4::Icmp {
            ty: 3,
            code: 4,
            rest: [0, 0, 5, 0xdc],
            payload: vec![1; 9],
        };
        for (s, d) in [("198.18.0.1", "198.18.0.2"), ("fd00::1", "fd00::2")] {
            for l4 in [tcp(1, 2, ACK), tcp_opts.clone(), udp(3, 4), icmp.clone()] {
                verify_checksums(&frame(m1, m2, ip(s), ip(d), &l4));
                let h = IpHeader {
                    options: if s.contains(':') { vec![] } else { vec![1; 4] },
                    hop_by_hop: s.contains(':'),
                    ..IpHeader::default()
                };
                let p = ip_packet_with(ip(s), ip(d), &l4, &h);
                if h.hop_by_hop {
                    assert_eq!((p[6], p[40]), (0, l4.proto(true)));
                } else {
                    verify_checksums(&eth(m1, m2, false, &p));
                }
            }
        }
        let echo = L4::Echo { payload: vec![] };
        verify_checksums(&ipv4(
            m1,
            m2,
            [198, 18, 0, 1],
            [198, 18, 0, 2],
            9,
            &[],
            &echo,
        ));
        let mut f = ipv4(m1, m2, [198, 18, 0, 1], [198, 18, 0, 2], 9, &[], &udp(1, 2));
        make_ipv4_fragment(&mut f, 185, true);
        assert!(crate::csum::ipv4_header_ok(&f[14..]));
        make_l4_checksum_partial_v4(&mut f);
        assert_eq!(check_frame(&f), Err("UDP checksum".into()));
    }

    #[test]
    fn tcp_layout_and_one_hop() {
        let f = frame(
            [2; 6],
            [4; 6],
            ip("198.18.0.1"),
            ip("198.18.0.2"),
            &tcp(7, 80, SYN),
        );
        // seq 1000, no ACK number on a SYN, 20-byte header, window 65535.
        assert_eq!(
            &f[34 + 4..34 + 16],
            &[0, 0, 3, 0xe8, 0, 0, 0, 0, 0x50, 2, 0xff, 0xff]
        );
        let h = hopped(&f);
        assert_eq!(h[14 + 8], 63);
        verify_checksums(&h);
    }

    #[test]
    fn a_tcp_repr_becomes_the_same_header() {
        let repr = TcpRepr {
            src_port: 1000,
            dst_port: 80,
            seq: SeqNumber(500),
            ack: Some(SeqNumber(9)),
            flags: PSH,
            window: 4096,
            options: TcpOptions {
                mss: Some(1460),
                sack_permitted: true,
                ..TcpOptions::default()
            },
        };
        let mut header = vec![0; repr.header_len()];
        repr.emit(&mut header).unwrap();
        let (src, dst) = (ip("198.18.0.1"), ip("198.18.0.2"));
        let l4 = L4::Tcp(Tcp::from_repr(&repr, b"hi"));
        let (_, b) = l4_bytes(src, dst, &l4);
        assert_eq!(
            (&b[..16], &b[18..header.len()]),
            (&header[..16], &header[18..])
        );
        assert_eq!(&b[header.len()..], b"hi");
        verify_checksums(&frame([2; 6], [4; 6], src, dst, &l4));
    }

    #[test]
    fn an_ipv6_fragment_header_goes_in_front_of_the_transport() {
        let mut f = ipv6(
            [2; 6],
            [4; 6],
            [0xfd; 16],
            [0xfd; 16],
            64,
            false,
            &udp(1, 2),
        );
        let len = f.len();
        make_ipv6_fragment(&mut f, 185, false);
        assert_eq!(f.len(), len + 8);
        assert_eq!((f[20], &f[54..62]), (44, &[17, 0, 5, 0xc8, 0, 0, 0, 9][..]));
    }

    #[test]
    fn arp_and_vlan_frames() {
        let a = arp([2; 6], [198, 18, 0, 1]);
        assert_eq!((a.len(), &a[12..14], a[21]), (42, &[8, 6][..], 1));
        let v = ethernet_vlan([2; 6], [4; 6], Some(10), ETH_P_IP, &[1]);
        assert_eq!(&v[12..19], &[0x81, 0, 0, 10, 8, 0, 1]);
        let q = ethernet_tagged([2; 6], [4; 6], Some((0x88a8, 0xa00a)), ETH_P_IP, &[1]);
        assert_eq!(&q[12..19], &[0x88, 0xa8, 0xa0, 10, 8, 0, 1]);
        assert_eq!(parse_mac("02:00:00:00:00:0a"), Some([2, 0, 0, 0, 0, 10]));
        assert_eq!(parse_mac("02:00"), None);
    }
}
