//! IPv6 addresses and the fixed header (RFC 8200). The extension headers that may follow
//! it are [`crate::ipv6_ext`]'s.

use crate::ipv4::IpProtocol;
use crate::{get_u16, put_u16, Error, Result};

pub const HEADER_LEN: usize = 40;

/// An IPv6 address in network byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Ipv6Addr(pub [u8; 16]);

impl Ipv6Addr {
    pub const UNSPECIFIED: Ipv6Addr = Ipv6Addr([0; 16]);
    /// ff02::1, every node on the link.
    pub const ALL_NODES: Ipv6Addr = Ipv6Addr([0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);

    pub fn is_multicast(&self) -> bool {
        self.0[0] == 0xff
    }
    pub fn is_unspecified(&self) -> bool {
        *self == Self::UNSPECIFIED
    }
    pub fn is_loopback(&self) -> bool {
        self.0 == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    }
    /// fe80::/10.
    pub fn is_link_local(&self) -> bool {
        self.0[0] == 0xfe && self.0[1] & 0xc0 == 0x80
    }
    /// ::ffff:0:0/96, an IPv4 address written as IPv6 (never a source on the wire).
    pub fn is_v4_mapped(&self) -> bool {
        self.0[..10] == [0; 10] && self.0[10..12] == [0xff, 0xff]
    }
    /// The solicited-node multicast address of this address (RFC 4291 §2.7.1):
    /// ff02::1:ff00:0/104 and its low 24 bits.
    pub fn solicited_node(&self) -> Ipv6Addr {
        let mut a = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 0];
        a[13..].copy_from_slice(&self.0[13..]);
        Ipv6Addr(a)
    }
    /// True for the solicited-node groups, ff02::1:ff00:0/104 (RFC 4291 §2.7.1), as Linux's
    /// `ipv6_addr_is_solict_mult`.
    pub fn is_solicited_node(&self) -> bool {
        self.0[..13] == [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff]
    }
    /// The Ethernet group address a multicast destination maps to (RFC 2464 §7).
    pub fn multicast_mac(&self) -> crate::MacAddr {
        let a = &self.0;
        crate::MacAddr([0x33, 0x33, a[12], a[13], a[14], a[15]])
    }
    /// The link-local address of an interface with MAC `mac`: fe80::/64 and the modified
    /// EUI-64 interface identifier (RFC 4291 §2.5.1 and App. A: ff:fe between the MAC's
    /// halves, the universal/local bit flipped), as Linux's addrconf makes it
    /// (`addr_gen_mode` 0).
    pub fn link_local_eui64(mac: crate::MacAddr) -> Ipv6Addr {
        let m = mac.0;
        let mut a = [0u8; 16];
        a[..2].copy_from_slice(&[0xfe, 0x80]);
        a[8..].copy_from_slice(&[m[0] ^ 0x02, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]]);
        Ipv6Addr(a)
    }
    /// True when `self` and `other` share the first `prefix_len` bits.
    pub fn same_prefix(&self, other: Ipv6Addr, prefix_len: u8) -> bool {
        let (a, b) = (u128::from_be_bytes(self.0), u128::from_be_bytes(other.0));
        let mask = match prefix_len.min(128) {
            0 => 0,
            n => u128::MAX << (128 - n as u32),
        };
        a & mask == b & mask
    }
}

impl From<std::net::Ipv6Addr> for Ipv6Addr {
    fn from(a: std::net::Ipv6Addr) -> Self {
        Ipv6Addr(a.octets())
    }
}

impl From<Ipv6Addr> for std::net::Ipv6Addr {
    fn from(a: Ipv6Addr) -> Self {
        std::net::Ipv6Addr::from(a.0)
    }
}

/// The 16 bytes, in network order (what `checksum`'s pseudo-header sums).
impl AsRef<[u8]> for Ipv6Addr {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl core::fmt::Display for Ipv6Addr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        std::net::Ipv6Addr::from(self.0).fmt(f)
    }
}

/// Byte ranges of the fixed header's fields.
pub mod field {
    use core::ops::Range;
    /// Version (4 bits), traffic class (8), flow label (20).
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    pub const PAYLOAD_LEN: Range<usize> = 4..6;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Range<usize> = 8..24;
    pub const DST: Range<usize> = 24..40;
}

/// A view over an IPv6 packet; `new_checked` guarantees header and payload length fit.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[field::VER_TC_FLOW.start] >> 4 != 6 {
            return Err(Error::Malformed);
        }
        if b.len() < HEADER_LEN + get_u16(b, field::PAYLOAD_LEN.start) as usize {
            return Err(Error::Truncated);
        }
        Ok(Ipv6Packet { buffer })
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    pub fn traffic_class(&self) -> u8 {
        let b = &self.b()[field::VER_TC_FLOW];
        (b[0] << 4) | (b[1] >> 4)
    }
    pub fn flow_label(&self) -> u32 {
        let b = &self.b()[field::VER_TC_FLOW];
        (((b[1] & 0x0f) as u32) << 16) | get_u16(b, 2) as u32
    }
    pub fn payload_len(&self) -> usize {
        get_u16(self.b(), field::PAYLOAD_LEN.start) as usize
    }
    pub fn next_header(&self) -> IpProtocol {
        self.b()[field::NEXT_HEADER].into()
    }
    pub fn hop_limit(&self) -> u8 {
        self.b()[field::HOP_LIMIT]
    }
    pub fn src(&self) -> Ipv6Addr {
        let mut a = [0; 16];
        a.copy_from_slice(&self.b()[field::SRC]);
        Ipv6Addr(a)
    }
    pub fn dst(&self) -> Ipv6Addr {
        let mut a = [0; 16];
        a.copy_from_slice(&self.b()[field::DST]);
        Ipv6Addr(a)
    }
    pub fn payload(&self) -> &[u8] {
        &self.b()[HEADER_LEN..HEADER_LEN + self.payload_len()]
    }
}

/// A parsed IPv6 fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Repr {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub next_header: IpProtocol,
    pub payload_len: usize,
    pub hop_limit: u8,
    /// DSCP and ECN (the ECN codepoints are `ipv4::ecn`'s).
    pub traffic_class: u8,
}

impl Ipv6Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Result<Self> {
        Ok(Ipv6Repr {
            src: p.src(),
            dst: p.dst(),
            next_header: p.next_header(),
            payload_len: p.payload_len(),
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
        })
    }

    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        if self.payload_len > u16::MAX as usize {
            return Err(Error::Malformed);
        }
        let b = buf.get_mut(..HEADER_LEN).ok_or(Error::Truncated)?;
        let tc = self.traffic_class;
        b[field::VER_TC_FLOW].copy_from_slice(&[0x60 | tc >> 4, tc << 4, 0, 0]);
        put_u16(b, field::PAYLOAD_LEN.start, self.payload_len as u16);
        b[field::NEXT_HEADER] = self.next_header.into();
        b[field::HOP_LIMIT] = self.hop_limit;
        b[field::SRC].copy_from_slice(&self.src.0);
        b[field::DST].copy_from_slice(&self.dst.0);
        Ok(HEADER_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let mut src = Ipv6Addr::UNSPECIFIED;
        src.0[0] = 0xfd;
        src.0[15] = 1;
        let mut dst = src;
        dst.0[15] = 2;
        let r = Ipv6Repr {
            src,
            dst,
            next_header: IpProtocol::Udp,
            payload_len: 8,
            hop_limit: 64,
            traffic_class: 0xb9,
        };
        let mut b = [0u8; 48];
        r.emit(&mut b).unwrap();
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Ipv6Repr::parse(&p).unwrap(), r);
        assert_eq!(p.payload().len(), 8);
        assert_eq!(p.traffic_class(), 0xb9);
        assert_eq!(
            Ipv6Packet::new_checked(&b[..47]).unwrap_err(),
            Error::Truncated
        );
    }
}

#[cfg(test)]
mod address_tests {
    use super::*;

    #[test]
    fn solicited_node_and_its_mac() {
        let a: Ipv6Addr = "fd00::12:3456"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .into();
        assert_eq!(a.solicited_node().to_string(), "ff02::1:ff12:3456");
        assert!(a.solicited_node().is_solicited_node() && !a.is_solicited_node());
        assert!(!Ipv6Addr::ALL_NODES.is_solicited_node());
        assert_eq!(
            a.solicited_node().multicast_mac().0,
            [0x33, 0x33, 0xff, 0x12, 0x34, 0x56]
        );
        let b: Ipv6Addr = "fd00::1:0:0".parse::<std::net::Ipv6Addr>().unwrap().into();
        assert!(a.same_prefix(b, 64) && !a.same_prefix(b, 100) && a.same_prefix(b, 0));
        assert!(Ipv6Addr::ALL_NODES.is_multicast() && !a.is_link_local());
    }

    #[test]
    fn link_local_address_from_a_mac() {
        // RFC 4291 App. A's example: 34-56-78-9A-BC-DE becomes 3656:78ff:fe9a:bcde.
        let ll = Ipv6Addr::link_local_eui64(crate::MacAddr([0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde]));
        assert_eq!(ll.to_string(), "fe80::3656:78ff:fe9a:bcde");
        assert!(ll.is_link_local());
        // A locally administered MAC (U/L set) loses the bit: what Linux gives 02:77:73:0:0:2.
        let ll = Ipv6Addr::link_local_eui64(crate::MacAddr([2, 0x77, 0x73, 0, 0, 2]));
        assert_eq!(ll.to_string(), "fe80::77:73ff:fe00:2");
    }
}
