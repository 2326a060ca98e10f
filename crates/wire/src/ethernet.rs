//! Ethernet II frames, with awareness of one 802.1Q VLAN tag.

use crate::{get_u16, put_u16, Error, Result};

/// A 48-bit MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    /// All zeroes (the unknown target hardware address in ARP requests).
    pub const ZERO: MacAddr = MacAddr([0; 6]);

    /// True for group (multicast and broadcast) addresses.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 != 0
    }
}

impl core::fmt::Display for MacAddr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

/// EtherType values this stack knows by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EtherType {
    Ipv4,
    Arp,
    Ipv6,
    Vlan,
    Unknown(u16),
}

impl From<u16> for EtherType {
    fn from(v: u16) -> Self {
        match v {
            0x0800 => EtherType::Ipv4,
            0x0806 => EtherType::Arp,
            0x86dd => EtherType::Ipv6,
            0x8100 => EtherType::Vlan,
            o => EtherType::Unknown(o),
        }
    }
}

impl From<EtherType> for u16 {
    fn from(v: EtherType) -> u16 {
        match v {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Ipv6 => 0x86dd,
            EtherType::Vlan => 0x8100,
            EtherType::Unknown(o) => o,
        }
    }
}

/// Untagged header length.
pub const HEADER_LEN: usize = 14;
/// Length of one 802.1Q tag.
pub const VLAN_TAG_LEN: usize = 4;

/// Byte ranges of the header's fields. With an 802.1Q tag, `ETHERTYPE` holds the tag's TPID
/// (0x8100) and the payload's EtherType follows the tag.
pub mod field {
    use core::ops::Range;
    pub const DST: Range<usize> = 0..6;
    pub const SRC: Range<usize> = 6..12;
    pub const ETHERTYPE: Range<usize> = 12..14;
    /// The tag's control information (priority, DEI, 12-bit VLAN id).
    pub const VLAN_TCI: Range<usize> = 14..16;
    pub const VLAN_ETHERTYPE: Range<usize> = 16..18;
}

/// A view over an Ethernet frame. The payload starts after the VLAN tag when there is one.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
    header_len: usize,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Checks that the (possibly tagged) header fits.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let header_len = if get_u16(b, field::ETHERTYPE.start) == 0x8100 {
            if b.len() < HEADER_LEN + VLAN_TAG_LEN {
                return Err(Error::Truncated);
            }
            HEADER_LEN + VLAN_TAG_LEN
        } else {
            HEADER_LEN
        };
        Ok(EthernetFrame { buffer, header_len })
    }

    pub fn dst(&self) -> MacAddr {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        MacAddr(m)
    }

    pub fn src(&self) -> MacAddr {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        MacAddr(m)
    }

    /// The VLAN id (12 bits) when the frame carries an 802.1Q tag.
    pub fn vlan_id(&self) -> Option<u16> {
        (self.header_len > HEADER_LEN)
            .then(|| get_u16(self.buffer.as_ref(), field::VLAN_TCI.start) & 0x0fff)
    }

    /// The EtherType of the payload (the inner one for tagged frames).
    pub fn ethertype(&self) -> EtherType {
        let at = if self.header_len > HEADER_LEN {
            field::VLAN_ETHERTYPE.start
        } else {
            field::ETHERTYPE.start
        };
        EtherType::from(get_u16(self.buffer.as_ref(), at))
    }

    pub fn header_len(&self) -> usize {
        self.header_len
    }

    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len..]
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }
}

/// Parsed Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetRepr {
    pub dst: MacAddr,
    pub src: MacAddr,
    pub vlan_id: Option<u16>,
    pub ethertype: EtherType,
}

impl EthernetRepr {
    pub fn parse<T: AsRef<[u8]>>(frame: &EthernetFrame<T>) -> Self {
        EthernetRepr {
            dst: frame.dst(),
            src: frame.src(),
            vlan_id: frame.vlan_id(),
            ethertype: frame.ethertype(),
        }
    }

    /// Header length this repr emits.
    pub fn header_len(&self) -> usize {
        if self.vlan_id.is_some() {
            HEADER_LEN + VLAN_TAG_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Writes the header at the start of `buf`; returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let len = self.header_len();
        if buf.len() < len {
            return Err(Error::Truncated);
        }
        buf[field::DST].copy_from_slice(&self.dst.0);
        buf[field::SRC].copy_from_slice(&self.src.0);
        let ethertype_at = match self.vlan_id {
            Some(vid) => {
                put_u16(buf, field::ETHERTYPE.start, 0x8100);
                put_u16(buf, field::VLAN_TCI.start, vid & 0x0fff);
                field::VLAN_ETHERTYPE.start
            }
            None => field::ETHERTYPE.start,
        };
        put_u16(buf, ethertype_at, self.ethertype.into());
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_untagged_and_tagged() {
        for vlan_id in [None, Some(42)] {
            let r = EthernetRepr {
                dst: MacAddr([1, 2, 3, 4, 5, 6]),
                src: MacAddr([7, 8, 9, 10, 11, 12]),
                vlan_id,
                ethertype: EtherType::Ipv4,
            };
            let mut buf = [0u8; 64];
            let n = r.emit(&mut buf).unwrap();
            buf[n] = 0x45;
            let f = EthernetFrame::new_checked(&buf[..]).unwrap();
            assert_eq!(EthernetRepr::parse(&f), r);
            assert_eq!(f.payload()[0], 0x45);
        }
    }

    #[test]
    fn short_frames_rejected() {
        assert_eq!(
            EthernetFrame::new_checked(&[0u8; 13][..]).unwrap_err(),
            Error::Truncated
        );
        let mut b = [0u8; 16];
        b[12] = 0x81;
        assert_eq!(
            EthernetFrame::new_checked(&b[..]).unwrap_err(),
            Error::Truncated
        );
    }
}
