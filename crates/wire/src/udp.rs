//! UDP (RFC 768) over IPv4.

use crate::checksum;
use crate::ip::{addr, IpAddress};
use crate::{get_u16, put_u16, Error, Result};

pub const HEADER_LEN: usize = 8;

/// Byte ranges of the header's fields.
pub mod field {
    use core::ops::Range;
    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    /// Header plus payload.
    pub const LENGTH: Range<usize> = 4..6;
    pub const CHECKSUM: Range<usize> = 6..8;
}

/// A view over a UDP datagram; `new_checked` guarantees the length it takes fits the buffer.
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
    /// The datagram's length: its length field, or over IPv6 the payload's for a field of 0.
    len: usize,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    pub fn new_checked(buffer: T) -> Result<Self> {
        Self::checked(buffer, false)
    }

    /// As [`UdpPacket::new_checked`], for a datagram over IPv6: a length field of 0 means the
    /// rest of the payload, as Linux's `__udp6_lib_rcv` reads it anywhere (RFC 2675 §4 sets 0
    /// for a jumbogram, whose length only the IPv6 payload can give).
    pub fn new_checked_ipv6(buffer: T) -> Result<Self> {
        Self::checked(buffer, true)
    }

    fn checked(buffer: T, ipv6: bool) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let len = match get_u16(b, field::LENGTH.start) as usize {
            0 if ipv6 => b.len(),
            n => n,
        };
        if len < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if b.len() < len {
            return Err(Error::Truncated);
        }
        Ok(UdpPacket { buffer, len })
    }
    pub fn src_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::SRC_PORT.start)
    }
    pub fn dst_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::DST_PORT.start)
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len() == HEADER_LEN
    }
    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::CHECKSUM.start)
    }
    /// Verifies the checksum; a zero checksum means "not computed" and passes over IPv4
    /// only (RFC 8200 §8.1: over IPv6 it is an error, and Linux drops it).
    pub fn verify_checksum(
        &self,
        src: impl Into<IpAddress> + Copy,
        dst: impl Into<IpAddress> + Copy,
    ) -> bool {
        (self.checksum() == 0 && !src.into().is_v6())
            || checksum::transport(
                addr(src),
                addr(dst),
                17,
                &self.buffer.as_ref()[..self.len()],
            ) == 0
    }
    /// Whether the checksum is complete (or zero), partial (left to offload) or bad.
    pub fn checksum_state(
        &self,
        src: impl Into<IpAddress> + Copy,
        dst: impl Into<IpAddress> + Copy,
    ) -> checksum::TransportChecksum {
        if self.checksum() == 0 {
            if src.into().is_v6() {
                return checksum::TransportChecksum::Bad;
            }
            return checksum::TransportChecksum::Complete;
        }
        checksum::classify(
            addr(src),
            addr(dst),
            17,
            &self.buffer.as_ref()[..self.len()],
            field::CHECKSUM.start,
        )
    }
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.len()]
    }
}

/// A parsed UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpRepr {
    pub src_port: u16,
    pub dst_port: u16,
}

impl UdpRepr {
    pub fn parse<T: AsRef<[u8]>>(
        p: &UdpPacket<T>,
        src: impl Into<IpAddress> + Copy,
        dst: impl Into<IpAddress> + Copy,
    ) -> Result<Self> {
        if !p.verify_checksum(src, dst) {
            return Err(Error::Checksum);
        }
        Ok(Self::parse_unverified(p))
    }

    /// The ports, without looking at the checksum (see [`UdpPacket::checksum_state`]).
    pub fn parse_unverified<T: AsRef<[u8]>>(p: &UdpPacket<T>) -> Self {
        UdpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
        }
    }

    /// Writes header + `payload_len` bytes that the caller has already placed at
    /// `buf[8..8 + payload_len]`, and the checksum over both.
    pub fn emit(
        &self,
        buf: &mut [u8],
        payload_len: usize,
        src: impl Into<IpAddress> + Copy,
        dst: impl Into<IpAddress> + Copy,
    ) -> Result<usize> {
        let len = HEADER_LEN + payload_len;
        if len > u16::MAX as usize {
            return Err(Error::Malformed);
        }
        let b = buf.get_mut(..len).ok_or(Error::Truncated)?;
        put_u16(b, field::SRC_PORT.start, self.src_port);
        put_u16(b, field::DST_PORT.start, self.dst_port);
        put_u16(b, field::LENGTH.start, len as u16);
        put_u16(b, field::CHECKSUM.start, 0);
        let mut c = checksum::transport(addr(src), addr(dst), 17, b);
        if c == 0 {
            c = 0xffff; // zero means "no checksum" in UDP
        }
        put_u16(b, field::CHECKSUM.start, c);
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Ipv4Addr;

    #[test]
    fn a_length_field_of_zero_is_the_rest_of_an_ipv6_payload_only() {
        let d = [0, 7, 0, 9, 0, 0, 0, 0, b'h', b'i'];
        let p = UdpPacket::new_checked_ipv6(&d[..]).unwrap();
        assert_eq!((p.len(), p.payload()), (10, &b"hi"[..]));
        assert_eq!(
            UdpPacket::new_checked(&d[..]).unwrap_err(),
            Error::Malformed
        );
        // A field shorter than the header is malformed over either family.
        let mut short = d;
        short[5] = 4;
        assert!(UdpPacket::new_checked_ipv6(&short[..]).is_err());
    }

    #[test]
    fn roundtrip() {
        let (s, d) = (Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2));
        let mut b = [0u8; 13];
        b[8..].copy_from_slice(b"hello");
        let r = UdpRepr {
            src_port: 1000,
            dst_port: 53,
        };
        r.emit(&mut b, 5, s, d).unwrap();
        let p = UdpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(UdpRepr::parse(&p, s, d).unwrap(), r);
        assert_eq!(p.payload(), b"hello");
        assert_eq!(
            UdpRepr::parse(&p, d, Ipv4Addr::new(1, 1, 1, 1)).unwrap_err(),
            Error::Checksum
        );
        b[4] = 0;
        b[5] = 4;
        assert_eq!(
            UdpPacket::new_checked(&b[..]).unwrap_err(),
            Error::Malformed
        );
    }
}
