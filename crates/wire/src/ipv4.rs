//! IPv4 headers (RFC 791).

use crate::checksum;
use crate::{get_u16, put_u16, Error, Result};

/// An IPv4 address in network byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Ipv4Addr(pub [u8; 4]);

impl Ipv4Addr {
    pub const UNSPECIFIED: Ipv4Addr = Ipv4Addr([0; 4]);
    pub const BROADCAST: Ipv4Addr = Ipv4Addr([255; 4]);

    pub const fn new(a: u8, b: u8, c: u8, d: u8) -> Self {
        Ipv4Addr([a, b, c, d])
    }
    pub fn to_u32(self) -> u32 {
        u32::from_be_bytes(self.0)
    }
    pub fn from_u32(v: u32) -> Self {
        Ipv4Addr(v.to_be_bytes())
    }
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 0xf0 == 0xe0
    }
    /// True when `self` and `other` share the first `prefix_len` bits.
    pub fn same_subnet(&self, other: Ipv4Addr, prefix_len: u8) -> bool {
        let mask = if prefix_len == 0 {
            0
        } else {
            u32::MAX << (32 - prefix_len.min(32) as u32)
        };
        self.to_u32() & mask == other.to_u32() & mask
    }
}

impl From<std::net::Ipv4Addr> for Ipv4Addr {
    fn from(a: std::net::Ipv4Addr) -> Self {
        Ipv4Addr(a.octets())
    }
}

impl From<Ipv4Addr> for std::net::Ipv4Addr {
    fn from(a: Ipv4Addr) -> Self {
        std::net::Ipv4Addr::from(a.0)
    }
}

/// The 4 bytes, in network order (what `checksum`'s pseudo-header sums).
impl AsRef<[u8]> for Ipv4Addr {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl core::fmt::Display for Ipv4Addr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}.{}.{}.{}", self.0[0], self.0[1], self.0[2], self.0[3])
    }
}

/// IP protocol numbers this stack knows by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpProtocol {
    Icmp,
    Tcp,
    Udp,
    Icmpv6,
    Unknown(u8),
}

impl From<u8> for IpProtocol {
    fn from(v: u8) -> Self {
        match v {
            1 => IpProtocol::Icmp,
            6 => IpProtocol::Tcp,
            17 => IpProtocol::Udp,
            58 => IpProtocol::Icmpv6,
            o => IpProtocol::Unknown(o),
        }
    }
}

impl From<IpProtocol> for u8 {
    fn from(v: IpProtocol) -> u8 {
        match v {
            IpProtocol::Icmp => 1,
            IpProtocol::Tcp => 6,
            IpProtocol::Udp => 17,
            IpProtocol::Icmpv6 => 58,
            IpProtocol::Unknown(o) => o,
        }
    }
}

/// Header length without options.
pub const HEADER_LEN: usize = 20;

/// ECN codepoints (RFC 3168 5): the low two bits of the DS field.
pub mod ecn {
    pub const NOT_ECT: u8 = 0;
    pub const ECT1: u8 = 1;
    pub const ECT0: u8 = 2;
    pub const CE: u8 = 3;
}

/// Byte ranges of the fixed header's fields (options, if any, follow `DST`).
pub mod field {
    use core::ops::Range;
    /// Version (high nibble) and header length in 32-bit words (low nibble).
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const TOTAL_LEN: Range<usize> = 2..4;
    pub const IDENT: Range<usize> = 4..6;
    /// Flags (3 bits) and fragment offset (13 bits, in 8-byte units).
    pub const FLAGS_FRAG: Range<usize> = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Range<usize> = 10..12;
    pub const SRC: Range<usize> = 12..16;
    pub const DST: Range<usize> = 16..20;
}

/// A view over an IPv4 packet. `new_checked` guarantees that the header (with options) and
/// the total length fit in the buffer; the buffer may be longer (Ethernet padding).
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[field::VER_IHL] >> 4 != 4 {
            return Err(Error::Malformed);
        }
        let hl = ((b[field::VER_IHL] & 0x0f) as usize) * 4;
        if hl < HEADER_LEN {
            return Err(Error::Malformed);
        }
        let total = get_u16(b, field::TOTAL_LEN.start) as usize;
        if total < hl {
            return Err(Error::Malformed);
        }
        if b.len() < total {
            return Err(Error::Truncated);
        }
        Ok(Ipv4Packet { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    pub fn header_len(&self) -> usize {
        ((self.b()[field::VER_IHL] & 0x0f) as usize) * 4
    }
    /// Length of the options (header length minus 20).
    pub fn options_len(&self) -> usize {
        self.header_len() - HEADER_LEN
    }
    pub fn dscp_ecn(&self) -> u8 {
        self.b()[field::DSCP_ECN]
    }
    pub fn total_len(&self) -> usize {
        get_u16(self.b(), field::TOTAL_LEN.start) as usize
    }
    pub fn ident(&self) -> u16 {
        get_u16(self.b(), field::IDENT.start)
    }
    pub fn dont_frag(&self) -> bool {
        self.b()[field::FLAGS_FRAG.start] & 0x40 != 0
    }
    pub fn more_frags(&self) -> bool {
        self.b()[field::FLAGS_FRAG.start] & 0x20 != 0
    }
    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> usize {
        ((get_u16(self.b(), field::FLAGS_FRAG.start) & 0x1fff) as usize) * 8
    }
    /// True when this is any fragment (first, middle or last) of a larger datagram.
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }
    pub fn ttl(&self) -> u8 {
        self.b()[field::TTL]
    }
    pub fn protocol(&self) -> IpProtocol {
        self.b()[field::PROTOCOL].into()
    }
    pub fn header_checksum(&self) -> u16 {
        get_u16(self.b(), field::CHECKSUM.start)
    }
    pub fn src(&self) -> Ipv4Addr {
        let mut a = [0; 4];
        a.copy_from_slice(&self.b()[field::SRC]);
        Ipv4Addr(a)
    }
    pub fn dst(&self) -> Ipv4Addr {
        let mut a = [0; 4];
        a.copy_from_slice(&self.b()[field::DST]);
        Ipv4Addr(a)
    }
    pub fn verify_checksum(&self) -> bool {
        checksum::checksum(&self.b()[..self.header_len()]) == 0
    }
    /// The payload, cut at the total length (Ethernet padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..self.total_len()]
    }
    /// The header as received, options included.
    pub fn header(&self) -> &[u8] {
        &self.b()[..self.header_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Decrements the TTL and patches the checksum incrementally (RFC 1624).
    pub fn decrement_ttl(&mut self) {
        let b = self.buffer.as_mut();
        // TTL and protocol form one 16-bit word of the checksum.
        let old = get_u16(b, field::TTL);
        b[field::TTL] = b[field::TTL].saturating_sub(1);
        let new = get_u16(b, field::TTL);
        let c = checksum::update_u16(get_u16(b, field::CHECKSUM.start), old, new);
        put_u16(b, field::CHECKSUM.start, c);
    }
}

/// A parsed IPv4 header (options are skipped on parse and never emitted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Repr {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub protocol: IpProtocol,
    pub payload_len: usize,
    pub ttl: u8,
    pub ident: u16,
    pub dont_frag: bool,
    /// The DS field (RFC 2474) with ECN in its low two bits (RFC 3168, [`ecn`]).
    pub dscp_ecn: u8,
}

impl Ipv4Repr {
    /// Parses a checked view; verifies the header checksum. Fragments are reported as
    /// `Unsupported`: a caller that reassembles uses [`Ipv4Repr::parse_fragment`].
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Result<Self> {
        let r = Self::parse_fragment(p)?;
        if p.is_fragment() {
            return Err(Error::Unsupported);
        }
        Ok(r)
    }

    /// Like [`Ipv4Repr::parse`], but takes fragments too: then `payload_len` is this
    /// fragment's, and the view's `more_frags` and `frag_offset` place it in its datagram.
    pub fn parse_fragment<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Result<Self> {
        if !p.verify_checksum() {
            return Err(Error::Checksum);
        }
        Ok(Ipv4Repr {
            src: p.src(),
            dst: p.dst(),
            protocol: p.protocol(),
            payload_len: p.total_len() - p.header_len(),
            ttl: p.ttl(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            dscp_ecn: p.dscp_ecn(),
        })
    }

    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes a 20-byte header with its checksum at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        self.emit_with_options(buf, &[])
    }

    /// Writes the header followed by `options` (a multiple of 4 bytes, at most 40);
    /// returns the header's length.
    pub fn emit_with_options(&self, buf: &mut [u8], options: &[u8]) -> Result<usize> {
        let hl = HEADER_LEN + options.len();
        if !options.len().is_multiple_of(4) || hl > 60 {
            return Err(Error::Malformed);
        }
        let total = hl + self.payload_len;
        if total > u16::MAX as usize {
            return Err(Error::Malformed);
        }
        let b = buf.get_mut(..hl).ok_or(Error::Truncated)?;
        b[field::VER_IHL] = 0x40 | (hl / 4) as u8;
        b[field::DSCP_ECN] = self.dscp_ecn;
        put_u16(b, field::TOTAL_LEN.start, total as u16);
        put_u16(b, field::IDENT.start, self.ident);
        put_u16(
            b,
            field::FLAGS_FRAG.start,
            if self.dont_frag { 0x4000 } else { 0 },
        );
        b[field::TTL] = self.ttl;
        b[field::PROTOCOL] = self.protocol.into();
        put_u16(b, field::CHECKSUM.start, 0);
        b[field::SRC].copy_from_slice(&self.src.0);
        b[field::DST].copy_from_slice(&self.dst.0);
        b[HEADER_LEN..].copy_from_slice(options);
        let c = checksum::checksum(b);
        put_u16(b, field::CHECKSUM.start, c);
        Ok(hl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Ipv4Repr {
        Ipv4Repr {
            src: Ipv4Addr::new(198, 18, 0, 1),
            dst: Ipv4Addr::new(198, 18, 0, 2),
            protocol: IpProtocol::Tcp,
            payload_len: 4,
            ttl: 64,
            ident: 0x1234,
            dont_frag: true,
            dscp_ecn: 0,
        }
    }

    #[test]
    fn roundtrip_and_padding() {
        let mut b = [0u8; 40]; // longer than total length: trailing Ethernet padding
        sample().emit(&mut b).unwrap();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&p).unwrap(), sample());
        assert_eq!(p.payload().len(), 4);
        assert_eq!(p.options_len(), 0);
        assert_eq!(p.header(), &b[..20]);
    }

    #[test]
    fn checksum_and_ttl() {
        let mut b = [0u8; 24];
        sample().emit(&mut b).unwrap();
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.decrement_ttl();
        assert!(p.verify_checksum());
        assert_eq!(p.ttl(), 63);
        b[12] ^= 1;
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&p).unwrap_err(), Error::Checksum);
    }

    #[test]
    fn malformed() {
        let mut b = [0u8; 24];
        sample().emit(&mut b).unwrap();
        let mut bad = b;
        bad[0] = 0x44; // IHL 16 bytes
        assert_eq!(
            Ipv4Packet::new_checked(&bad[..]).unwrap_err(),
            Error::Malformed
        );
        let mut bad = b;
        bad[0] = 0x65;
        assert_eq!(
            Ipv4Packet::new_checked(&bad[..]).unwrap_err(),
            Error::Malformed
        );
        assert_eq!(
            Ipv4Packet::new_checked(&b[..23]).unwrap_err(),
            Error::Truncated
        );
        let mut opt = b;
        opt[0] = 0x46; // 4 bytes of options, total length 24 still covers it
        let p = Ipv4Packet::new_checked(&opt[..]).unwrap();
        assert_eq!(p.options_len(), 4);
        assert_eq!(p.payload().len(), 0);
    }

    #[test]
    fn fragments() {
        let mut b = [0u8; 24];
        sample().emit(&mut b).unwrap();
        b[6] = 0x20; // more fragments
        b[10] = 0;
        b[11] = 0;
        let c = checksum::checksum(&b[..20]);
        b[10..12].copy_from_slice(&c.to_be_bytes());
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.is_fragment());
        assert_eq!(Ipv4Repr::parse(&p).unwrap_err(), Error::Unsupported);
        let f = Ipv4Repr::parse_fragment(&p).unwrap();
        assert_eq!(
            f,
            Ipv4Repr {
                dont_frag: false, // 0x20 replaced DF with MF
                dscp_ecn: 0,
                ..sample()
            }
        );
        assert!(p.more_frags() && p.frag_offset() == 0);
        b[7] = 3; // offset 24 bytes, checksum now stale
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Ipv4Repr::parse_fragment(&p).unwrap_err(), Error::Checksum);
    }

    #[test]
    fn subnet() {
        let a = Ipv4Addr::new(198, 18, 1, 7);
        assert!(a.same_subnet(Ipv4Addr::new(198, 18, 1, 200), 24));
        assert!(!a.same_subnet(Ipv4Addr::new(198, 18, 2, 7), 24));
        assert!(a.same_subnet(Ipv4Addr::new(1, 2, 3, 4), 0));
        assert!(!a.same_subnet(Ipv4Addr::new(198, 18, 1, 8), 32));
    }
}
