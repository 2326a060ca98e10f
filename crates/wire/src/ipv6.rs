//! IPv6 fixed header (RFC 8200), basic: no extension-header walking.

use crate::ipv4::IpProtocol;
use crate::{get_u16, put_u16, Error, Result};

pub const HEADER_LEN: usize = 40;

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
    pub fn src(&self) -> [u8; 16] {
        let mut a = [0; 16];
        a.copy_from_slice(&self.b()[field::SRC]);
        a
    }
    pub fn dst(&self) -> [u8; 16] {
        let mut a = [0; 16];
        a.copy_from_slice(&self.b()[field::DST]);
        a
    }
    pub fn payload(&self) -> &[u8] {
        &self.b()[HEADER_LEN..HEADER_LEN + self.payload_len()]
    }
}

/// A parsed IPv6 fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Repr {
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub next_header: IpProtocol,
    pub payload_len: usize,
    pub hop_limit: u8,
}

impl Ipv6Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Result<Self> {
        Ok(Ipv6Repr {
            src: p.src(),
            dst: p.dst(),
            next_header: p.next_header(),
            payload_len: p.payload_len(),
            hop_limit: p.hop_limit(),
        })
    }

    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        if self.payload_len > u16::MAX as usize {
            return Err(Error::Malformed);
        }
        let b = buf.get_mut(..HEADER_LEN).ok_or(Error::Truncated)?;
        b[field::VER_TC_FLOW].copy_from_slice(&[0x60, 0, 0, 0]);
        put_u16(b, field::PAYLOAD_LEN.start, self.payload_len as u16);
        b[field::NEXT_HEADER] = self.next_header.into();
        b[field::HOP_LIMIT] = self.hop_limit;
        b[field::SRC].copy_from_slice(&self.src);
        b[field::DST].copy_from_slice(&self.dst);
        Ok(HEADER_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let mut src = [0u8; 16];
        src[0] = 0xfd;
        src[15] = 1;
        let mut dst = src;
        dst[15] = 2;
        let r = Ipv6Repr {
            src,
            dst,
            next_header: IpProtocol::Udp,
            payload_len: 8,
            hop_limit: 64,
        };
        let mut b = [0u8; 48];
        r.emit(&mut b).unwrap();
        let p = Ipv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Ipv6Repr::parse(&p).unwrap(), r);
        assert_eq!(p.payload().len(), 8);
        assert_eq!(
            Ipv6Packet::new_checked(&b[..47]).unwrap_err(),
            Error::Truncated
        );
    }
}
