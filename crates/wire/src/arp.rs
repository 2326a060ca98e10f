//! ARP for IPv4 over Ethernet (RFC 826).

use crate::ethernet::MacAddr;
use crate::ipv4::Ipv4Addr;
use crate::{get_u16, put_u16, Error, Result};
use core::ops::Range;

/// ARP packet length for Ethernet/IPv4.
pub const PACKET_LEN: usize = 28;

/// Byte ranges of the fields of an Ethernet/IPv4 ARP packet.
pub mod field {
    use core::ops::Range;
    pub const HTYPE: Range<usize> = 0..2;
    pub const PTYPE: Range<usize> = 2..4;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: Range<usize> = 6..8;
    pub const SHA: Range<usize> = 8..14;
    pub const SPA: Range<usize> = 14..18;
    pub const THA: Range<usize> = 18..24;
    pub const TPA: Range<usize> = 24..28;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArpOperation {
    Request,
    Reply,
    Unknown(u16),
}

impl From<u16> for ArpOperation {
    fn from(v: u16) -> Self {
        match v {
            1 => ArpOperation::Request,
            2 => ArpOperation::Reply,
            o => ArpOperation::Unknown(o),
        }
    }
}

impl From<ArpOperation> for u16 {
    fn from(v: ArpOperation) -> u16 {
        match v {
            ArpOperation::Request => 1,
            ArpOperation::Reply => 2,
            ArpOperation::Unknown(o) => o,
        }
    }
}

/// A view over an ARP packet.
#[derive(Debug, Clone)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < PACKET_LEN {
            return Err(Error::Truncated);
        }
        Ok(ArpPacket { buffer })
    }
    pub fn hardware_type(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::HTYPE.start)
    }
    pub fn protocol_type(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::PTYPE.start)
    }
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }
    pub fn operation(&self) -> ArpOperation {
        get_u16(self.buffer.as_ref(), field::OPER.start).into()
    }
    fn mac_at(&self, at: Range<usize>) -> MacAddr {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buffer.as_ref()[at]);
        MacAddr(m)
    }
    fn ip_at(&self, at: Range<usize>) -> Ipv4Addr {
        let mut a = [0; 4];
        a.copy_from_slice(&self.buffer.as_ref()[at]);
        Ipv4Addr(a)
    }
    pub fn sender_mac(&self) -> MacAddr {
        self.mac_at(field::SHA)
    }
    pub fn sender_ip(&self) -> Ipv4Addr {
        self.ip_at(field::SPA)
    }
    pub fn target_mac(&self) -> MacAddr {
        self.mac_at(field::THA)
    }
    pub fn target_ip(&self) -> Ipv4Addr {
        self.ip_at(field::TPA)
    }
}

/// An Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpRepr {
    pub operation: ArpOperation,
    pub sender_mac: MacAddr,
    pub sender_ip: Ipv4Addr,
    pub target_mac: MacAddr,
    pub target_ip: Ipv4Addr,
}

impl ArpRepr {
    /// Parses; anything but Ethernet (1) or IEEE 802 (6) / IPv4 (0x0800) with 6/4 address
    /// lengths is `Unsupported`. Linux's `arp_process` takes both hardware types on an
    /// Ethernet device.
    pub fn parse<T: AsRef<[u8]>>(p: &ArpPacket<T>) -> Result<Self> {
        if !matches!(p.hardware_type(), 1 | 6)
            || p.protocol_type() != 0x0800
            || p.hardware_len() != 6
            || p.protocol_len() != 4
        {
            return Err(Error::Unsupported);
        }
        Ok(ArpRepr {
            operation: p.operation(),
            sender_mac: p.sender_mac(),
            sender_ip: p.sender_ip(),
            target_mac: p.target_mac(),
            target_ip: p.target_ip(),
        })
    }

    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let b = buf.get_mut(..PACKET_LEN).ok_or(Error::Truncated)?;
        put_u16(b, field::HTYPE.start, 1);
        put_u16(b, field::PTYPE.start, 0x0800);
        b[field::HLEN] = 6;
        b[field::PLEN] = 4;
        put_u16(b, field::OPER.start, self.operation.into());
        b[field::SHA].copy_from_slice(&self.sender_mac.0);
        b[field::SPA].copy_from_slice(&self.sender_ip.0);
        b[field::THA].copy_from_slice(&self.target_mac.0);
        b[field::TPA].copy_from_slice(&self.target_ip.0);
        Ok(PACKET_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let r = ArpRepr {
            operation: ArpOperation::Request,
            sender_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            sender_ip: Ipv4Addr([198, 18, 0, 1]),
            target_mac: MacAddr::ZERO,
            target_ip: Ipv4Addr([198, 18, 0, 2]),
        };
        let mut b = [0u8; 28];
        r.emit(&mut b).unwrap();
        assert_eq!(
            ArpRepr::parse(&ArpPacket::new_checked(&b[..]).unwrap()).unwrap(),
            r
        );
        b[1] = 6; // hardware type 6 (IEEE 802), as Linux takes it on Ethernet
        assert_eq!(
            ArpRepr::parse(&ArpPacket::new_checked(&b[..]).unwrap()).unwrap(),
            r
        );
        b[1] = 7; // ARCnet
        assert_eq!(
            ArpRepr::parse(&ArpPacket::new_checked(&b[..]).unwrap()).unwrap_err(),
            Error::Unsupported
        );
        assert!(ArpPacket::new_checked(&b[..27]).is_err());
    }
}
