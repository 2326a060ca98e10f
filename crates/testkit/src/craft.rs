//! Raw frames whose every field is the caller's, lies included: IPv4 options of any length,
//! TCP data offsets and option lengths that lie, IPv6 extension headers as bytes, fragments
//! that overlap. For tests that must send what `frame`'s `Repr`s refuse to write (the stack's
//! conformance cases, floods of crafted SYNs). Checksums come from `wirespeed_wire::checksum`,
//! as in `frame`, unless the caller spoils them afterwards; `csum` verifies them independently.

use wirespeed_wire::checksum;
use wirespeed_wire::IpAddress;
use wirespeed_wire::Ipv4Addr as WireIp;
use wirespeed_wire::Ipv6Addr as WireIp6;

pub const ETH_IPV4: u16 = 0x0800;
pub const ETH_ARP: u16 = 0x0806;
pub const ETH_IPV6: u16 = 0x86dd;
pub const PROTO_ICMP: u8 = 1;
pub const PROTO_TCP: u8 = 6;
pub const PROTO_UDP: u8 = 17;
pub const PROTO_ICMPV6: u8 = 58;

/// TCP flag bits.
pub use wirespeed_wire::tcp::flags::{ACK, CWR, ECE, FIN, PSH, RST, SYN, URG};

/// An Ethernet II frame (the test kit's one Ethernet builder).
pub use crate::frame::ethernet as eth;

/// An IPv4 header's fields, options as raw bytes (padded with zeros, EOL, to a multiple of 4).
#[derive(Debug, Clone)]
pub struct Ip4 {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    pub ttl: u8,
    pub tos: u8,
    pub id: u16,
    pub df: bool,
    pub mf: bool,
    /// Fragment offset in 8-byte units.
    pub frag: u16,
    pub proto: u8,
    pub options: Vec<u8>,
}

impl Ip4 {
    /// A plain header from `src` to `dst`: TTL 64, DF, no options.
    pub fn new(src: [u8; 4], dst: [u8; 4], proto: u8) -> Ip4 {
        Ip4 {
            src,
            dst,
            ttl: 64,
            tos: 0,
            id: 0x1234,
            df: true,
            mf: false,
            frag: 0,
            proto,
            options: Vec::new(),
        }
    }

    /// The header followed by `payload`, header checksum filled in.
    pub fn packet(&self, payload: &[u8]) -> Vec<u8> {
        let mut opts = self.options.clone();
        while !opts.len().is_multiple_of(4) {
            opts.push(0);
        }
        let hl = 20 + opts.len().min(40);
        let mut p = vec![0u8; hl];
        p[0] = 0x40 | (hl / 4) as u8;
        p[1] = self.tos;
        p[2..4].copy_from_slice(&((hl + payload.len()) as u16).to_be_bytes());
        p[4..6].copy_from_slice(&self.id.to_be_bytes());
        let flags = (u16::from(self.df) << 14) | (u16::from(self.mf) << 13);
        p[6..8].copy_from_slice(&(flags | (self.frag & 0x1fff)).to_be_bytes());
        p[8] = self.ttl;
        p[9] = self.proto;
        p[12..16].copy_from_slice(&self.src);
        p[16..20].copy_from_slice(&self.dst);
        p[20..hl].copy_from_slice(&opts[..hl - 20]);
        fix_ip_checksum(&mut p);
        p.extend_from_slice(payload);
        p
    }
}

/// An IPv6 header's fields; the extension headers are part of the payload the caller passes
/// (`ext::*` builds them), `next_header` names the first.
#[derive(Debug, Clone)]
pub struct Ip6 {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub hop_limit: u8,
    pub tclass: u8,
    /// 20 bits.
    pub flow: u32,
    pub next_header: u8,
}

impl Ip6 {
    /// A plain header from `src` to `dst`: hop limit 64, traffic class and flow label 0.
    pub fn new(src: [u8; 16], dst: [u8; 16], next_header: u8) -> Ip6 {
        Ip6 {
            src,
            dst,
            hop_limit: 64,
            tclass: 0,
            flow: 0,
            next_header,
        }
    }

    /// The header followed by `payload` (payload length from it).
    pub fn packet(&self, payload: &[u8]) -> Vec<u8> {
        let mut p = Vec::with_capacity(40 + payload.len());
        let w = (6u32 << 28) | (u32::from(self.tclass) << 20) | (self.flow & 0xf_ffff);
        p.extend_from_slice(&w.to_be_bytes());
        p.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        p.push(self.next_header);
        p.push(self.hop_limit);
        p.extend_from_slice(&self.src);
        p.extend_from_slice(&self.dst);
        p.extend_from_slice(payload);
        p
    }
}

/// IPv6 extension headers, raw: each takes the next header and its body.
pub mod ext {
    /// A hop-by-hop (0) or destination options (60) header around `options` (TLVs), padded
    /// with PadN (or Pad1) to a multiple of 8.
    pub fn options(next: u8, options: &[u8]) -> Vec<u8> {
        let mut h = vec![next, 0];
        h.extend_from_slice(options);
        let pad = (8 - h.len() % 8) % 8;
        match pad {
            0 => {}
            1 => h.push(0),
            n => {
                h.push(1);
                h.push((n - 2) as u8);
                h.extend(std::iter::repeat_n(0, n - 2));
            }
        }
        h[1] = (h.len() / 8 - 1) as u8;
        h
    }

    /// A routing header of `rtype` with `segments_left` and `addresses` (16 bytes each),
    /// after 4 reserved bytes (type 0, 2) or SRH's last entry, flags and tag (type 4).
    pub fn routing(next: u8, rtype: u8, segments_left: u8, addresses: &[[u8; 16]]) -> Vec<u8> {
        let mut h = vec![next, (addresses.len() * 2) as u8, rtype, segments_left];
        if rtype == 4 {
            let last = addresses.len().saturating_sub(1) as u8;
            h.extend_from_slice(&[last, 0, 0, 0]);
        } else {
            h.extend_from_slice(&[0; 4]);
        }
        for a in addresses {
            h.extend_from_slice(a);
        }
        h
    }

    /// A fragment header: offset in bytes (a multiple of 8), more fragments, identification.
    pub fn fragment(next: u8, offset: usize, more: bool, id: u32) -> Vec<u8> {
        let mut h = vec![next, 0];
        h.extend_from_slice(&((offset as u16 & 0xfff8) | u16::from(more)).to_be_bytes());
        h.extend_from_slice(&id.to_be_bytes());
        h
    }
}

/// The checksum of an upper-layer message over IPv6 (`protocol`'s pseudo-header), for the
/// message `m` whose checksum field is zero.
pub fn checksum6(src: [u8; 16], dst: [u8; 16], protocol: u8, m: &[u8]) -> u16 {
    checksum::transport(WireIp6(src), WireIp6(dst), protocol, m)
}

/// An ICMPv6 message: type, code, the 4 bytes after the checksum, and data; checksum filled.
pub fn icmp6(
    ty: u8,
    code: u8,
    rest: [u8; 4],
    data: &[u8],
    src: [u8; 16],
    dst: [u8; 16],
) -> Vec<u8> {
    let mut m = vec![ty, code, 0, 0];
    m.extend_from_slice(&rest);
    m.extend_from_slice(data);
    let c = checksum6(src, dst, PROTO_ICMPV6, &m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    m
}

/// A neighbour discovery link-layer address option (1: source, 2: target).
pub fn nd_lladdr(kind: u8, mac: [u8; 6]) -> Vec<u8> {
    let mut o = vec![kind, 1];
    o.extend_from_slice(&mac);
    o
}

/// A neighbour solicitation for `target` with `options`.
pub fn ns(target: [u8; 16], options: &[u8], src: [u8; 16], dst: [u8; 16]) -> Vec<u8> {
    let mut body = target.to_vec();
    body.extend_from_slice(options);
    icmp6(135, 0, [0; 4], &body, src, dst)
}

/// A neighbour advertisement (`flags`: R 0x80, S 0x40, O 0x20) for `target`.
pub fn na(flags: u8, target: [u8; 16], options: &[u8], src: [u8; 16], dst: [u8; 16]) -> Vec<u8> {
    let mut body = target.to_vec();
    body.extend_from_slice(options);
    icmp6(136, 0, [flags, 0, 0, 0], &body, src, dst)
}

/// A UDP datagram over IPv6 with its checksum.
pub fn udp6(sport: u16, dport: u16, payload: &[u8], src: [u8; 16], dst: [u8; 16]) -> Vec<u8> {
    let mut d = Vec::with_capacity(8 + payload.len());
    d.extend_from_slice(&sport.to_be_bytes());
    d.extend_from_slice(&dport.to_be_bytes());
    d.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    d.extend_from_slice(&[0, 0]);
    d.extend_from_slice(payload);
    let c = checksum6(src, dst, PROTO_UDP, &d);
    d[6..8].copy_from_slice(&c.to_be_bytes());
    d
}

/// Recomputes the header checksum of the IPv4 packet `p` (after an edit).
pub fn fix_ip_checksum(p: &mut [u8]) {
    let hl = ((p[0] & 0x0f) as usize * 4).min(p.len());
    p[10] = 0;
    p[11] = 0;
    let c = checksum::checksum(&p[..hl]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
}

/// A TCP segment's fields; options raw (padded with zeros to a multiple of 4), `doff`
/// overrides the data offset the options imply (to make it lie).
#[derive(Debug, Clone, Default)]
pub struct Tcp {
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub window: u16,
    pub urgent: u16,
    pub options: Vec<u8>,
    pub payload: Vec<u8>,
    pub doff: Option<u8>,
}

impl Tcp {
    /// The segment with its checksum for `src` -> `dst`.
    pub fn segment(&self, src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
        self.segment_ip(WireIp(src).into(), WireIp(dst).into())
    }

    /// The segment with its checksum for `src` -> `dst` over IPv6.
    pub fn segment6(&self, src: [u8; 16], dst: [u8; 16]) -> Vec<u8> {
        self.segment_ip(WireIp6(src).into(), WireIp6(dst).into())
    }

    fn segment_ip(&self, src: IpAddress, dst: IpAddress) -> Vec<u8> {
        let mut opts = self.options.clone();
        while !opts.len().is_multiple_of(4) {
            opts.push(0);
        }
        opts.truncate(40);
        let hl = 20 + opts.len();
        let mut s = vec![0u8; hl];
        s[0..2].copy_from_slice(&self.sport.to_be_bytes());
        s[2..4].copy_from_slice(&self.dport.to_be_bytes());
        s[4..8].copy_from_slice(&self.seq.to_be_bytes());
        s[8..12].copy_from_slice(&self.ack.to_be_bytes());
        s[12] = self.doff.unwrap_or((hl / 4) as u8) << 4;
        s[13] = self.flags;
        s[14..16].copy_from_slice(&self.window.to_be_bytes());
        s[18..20].copy_from_slice(&self.urgent.to_be_bytes());
        s[20..].copy_from_slice(&opts);
        s.extend_from_slice(&self.payload);
        let c = checksum::transport(src, dst, PROTO_TCP, &s);
        s[16..18].copy_from_slice(&c.to_be_bytes());
        s
    }
}

/// TCP option encodings.
pub mod opt {
    pub fn mss(v: u16) -> Vec<u8> {
        let b = v.to_be_bytes();
        vec![2, 4, b[0], b[1]]
    }
    pub fn ws(shift: u8) -> Vec<u8> {
        vec![1, 3, 3, shift]
    }
    pub fn sack_perm() -> Vec<u8> {
        vec![1, 1, 4, 2]
    }
    pub fn ts(val: u32, ecr: u32) -> Vec<u8> {
        let mut o = vec![1, 1, 8, 10];
        o.extend_from_slice(&val.to_be_bytes());
        o.extend_from_slice(&ecr.to_be_bytes());
        o
    }
    /// The options Linux puts in a SYN: MSS, SACK-permitted, timestamps, window scale.
    pub fn linux_syn(mss_v: u16, tsval: u32, shift: u8) -> Vec<u8> {
        let mut o = mss(mss_v);
        o.extend_from_slice(&[4, 2, 8, 10]);
        o.extend_from_slice(&tsval.to_be_bytes());
        o.extend_from_slice(&[0, 0, 0, 0]);
        o.extend_from_slice(&ws(shift));
        o
    }
}

/// An ICMP message: type, code, the 4 bytes after the checksum, and data; checksum filled.
pub fn icmp(ty: u8, code: u8, rest: [u8; 4], data: &[u8]) -> Vec<u8> {
    let mut m = vec![ty, code, 0, 0];
    m.extend_from_slice(&rest);
    m.extend_from_slice(data);
    let c = checksum::checksum(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    m
}

/// A UDP datagram with its checksum.
pub fn udp(sport: u16, dport: u16, payload: &[u8], src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
    let mut d = Vec::with_capacity(8 + payload.len());
    d.extend_from_slice(&sport.to_be_bytes());
    d.extend_from_slice(&dport.to_be_bytes());
    d.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    d.extend_from_slice(&[0, 0]);
    d.extend_from_slice(payload);
    let c = checksum::transport(WireIp(src), WireIp(dst), PROTO_UDP, &d);
    d[6..8].copy_from_slice(&c.to_be_bytes());
    d
}

/// An ARP packet for Ethernet/IPv4.
pub fn arp(op: u16, sha: [u8; 6], spa: [u8; 4], tha: [u8; 6], tpa: [u8; 4]) -> Vec<u8> {
    let mut a = vec![0, 1, 8, 0, 6, 4];
    a.extend_from_slice(&op.to_be_bytes());
    a.extend_from_slice(&sha);
    a.extend_from_slice(&spa);
    a.extend_from_slice(&tha);
    a.extend_from_slice(&tpa);
    a
}

/// `packet` (a whole IPv4 packet) cut into fragments at the given payload offsets (multiples
/// of 8 except for the last piece's end), each piece with its own header: offset, MF and
/// checksum set. Pieces are `(start, end)` byte ranges of the payload and may overlap.
pub fn fragments(h: &Ip4, payload: &[u8], pieces: &[(usize, usize)]) -> Vec<Vec<u8>> {
    pieces
        .iter()
        .map(|&(start, end)| {
            let end = end.min(payload.len());
            let mut part = h.clone();
            part.df = false;
            part.frag = (start / 8) as u16;
            part.mf = end < payload.len();
            if start > 0 {
                // The crafted options (none has the copy bit) go in the first fragment only.
                part.options.clear();
            }
            part.packet(&payload[start..end])
        })
        .collect()
}

/// Pads `frame` with zeros to the 60 bytes a NIC would send at least.
pub fn pad_to_minimum(frame: &mut Vec<u8>) {
    if frame.len() < 60 {
        frame.resize(60, 0);
    }
}

/// Flag bits as letters, tcpdump's order and more: F S R P A U E C (`.` for none).
pub fn flag_letters(flags: u8) -> String {
    let names = ['F', 'S', 'R', 'P', 'A', 'U', 'E', 'C'];
    let s: String = (0..8)
        .filter(|b| flags & (1 << b) != 0)
        .map(|b| names[b])
        .collect();
    if s.is_empty() {
        ".".into()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    const A: [u8; 4] = [198, 19, 16, 0];
    const B: [u8; 4] = [198, 18, 0, 2];

    /// Checksums as wire fills them verify with the kit's independent sum.
    #[test]
    fn built_packets_verify() {
        let t = Tcp {
            sport: 1,
            dport: 2,
            flags: SYN,
            options: opt::linux_syn(1460, 7, 7),
            ..Tcp::default()
        };
        let seg = t.segment(A, B);
        assert_eq!(seg.len(), 40);
        let (src, dst) = (IpAddr::from(A), IpAddr::from(B));
        let sum = crate::csum::sum16(&seg, crate::csum::pseudo(src, dst, PROTO_TCP, seg.len()));
        assert_eq!(crate::csum::fold(sum), 0, "a filled checksum verifies");
        let mut h = Ip4::new(A, B, PROTO_TCP);
        h.options = vec![7, 7, 4, 0, 0, 0, 0];
        let p = h.packet(&seg);
        assert_eq!(p[0], 0x47);
        assert!(crate::csum::ipv4_header_ok(&p));
    }

    #[test]
    fn fragments_cover_the_payload() {
        let h = Ip4::new(A, B, PROTO_TCP);
        let payload = [7u8; 40];
        let f = fragments(&h, &payload, &[(0, 16), (16, 40)]);
        assert_eq!(f.len(), 2);
        assert_eq!(f[0][6] & 0x20, 0x20, "first has MF");
        assert_eq!(u16::from_be_bytes([f[1][6], f[1][7]]) & 0x1fff, 2);
        assert_eq!(f[1].len(), 20 + 24);
    }

    #[test]
    fn flag_letters_read_like_tcpdump() {
        assert_eq!(flag_letters(SYN | ACK), "SA");
        assert_eq!(flag_letters(0), ".");
        assert_eq!(flag_letters(0xff), "FSRPAUEC");
    }
}
