//! An IP address of either family, for what works the same over IPv4 and IPv6: the
//! transport checksums' pseudo-header, connection keys, neighbour caches.

use crate::ethernet::EtherType;
use crate::ipv4::{IpProtocol, Ipv4Addr, Ipv4Repr};
use crate::ipv6::{Ipv6Addr, Ipv6Repr};
use crate::Result;

/// An IPv4 or IPv6 address in network byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpAddress {
    V4(Ipv4Addr),
    V6(Ipv6Addr),
}

impl IpAddress {
    /// The address's bytes: 4 or 16.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            IpAddress::V4(a) => &a.0,
            IpAddress::V6(a) => &a.0,
        }
    }
    pub fn is_v6(&self) -> bool {
        matches!(self, IpAddress::V6(_))
    }
    pub fn is_unspecified(&self) -> bool {
        match self {
            IpAddress::V4(a) => *a == Ipv4Addr::UNSPECIFIED,
            IpAddress::V6(a) => *a == Ipv6Addr::UNSPECIFIED,
        }
    }
    pub fn is_multicast(&self) -> bool {
        match self {
            IpAddress::V4(a) => a.is_multicast(),
            IpAddress::V6(a) => a.is_multicast(),
        }
    }
}

/// `a` as an [`IpAddress`], for the headers' generic address parameters (what `checksum`
/// takes is the address's bytes, [`AsRef<[u8]>`]).
pub(crate) fn addr(a: impl Into<IpAddress>) -> IpAddress {
    a.into()
}

/// [`IpAddress::as_bytes`].
impl AsRef<[u8]> for IpAddress {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl Default for IpAddress {
    fn default() -> Self {
        IpAddress::V4(Ipv4Addr::UNSPECIFIED)
    }
}

impl From<Ipv4Addr> for IpAddress {
    fn from(a: Ipv4Addr) -> Self {
        IpAddress::V4(a)
    }
}

impl From<Ipv6Addr> for IpAddress {
    fn from(a: Ipv6Addr) -> Self {
        IpAddress::V6(a)
    }
}

impl From<std::net::IpAddr> for IpAddress {
    fn from(a: std::net::IpAddr) -> Self {
        match a {
            std::net::IpAddr::V4(a) => IpAddress::V4(a.into()),
            std::net::IpAddr::V6(a) => IpAddress::V6(a.into()),
        }
    }
}

impl From<IpAddress> for std::net::IpAddr {
    fn from(a: IpAddress) -> Self {
        match a {
            IpAddress::V4(a) => std::net::IpAddr::V4(a.into()),
            IpAddress::V6(a) => std::net::IpAddr::V6(a.into()),
        }
    }
}

impl core::fmt::Display for IpAddress {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            IpAddress::V4(a) => a.fmt(f),
            IpAddress::V6(a) => a.fmt(f),
        }
    }
}

/// The header of a datagram to send, of either family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpRepr {
    V4(Ipv4Repr),
    V6(Ipv6Repr),
}

impl IpRepr {
    /// A header from `src` to `dst` (which must be of one family; `src`'s decides) with no
    /// options or extension headers: IPv4 with DF set and `ident`, IPv6 without a flow label.
    /// `ecn` is the ECN codepoint (`ipv4::ecn`), the DSCP 0.
    pub fn new(
        src: IpAddress,
        dst: IpAddress,
        protocol: IpProtocol,
        payload_len: usize,
        ecn: u8,
        ident: u16,
    ) -> IpRepr {
        match (src, dst) {
            (IpAddress::V6(src), IpAddress::V6(dst)) => IpRepr::V6(Ipv6Repr {
                src,
                dst,
                next_header: protocol,
                payload_len,
                hop_limit: 64,
                traffic_class: ecn,
            }),
            (src, dst) => IpRepr::V4(Ipv4Repr {
                src: v4_of(src),
                dst: v4_of(dst),
                protocol,
                payload_len,
                ttl: 64,
                ident,
                dont_frag: true,
                dscp_ecn: ecn,
            }),
        }
    }

    pub fn header_len(&self) -> usize {
        match self {
            IpRepr::V4(_) => crate::ipv4::HEADER_LEN,
            IpRepr::V6(_) => crate::ipv6::HEADER_LEN,
        }
    }

    pub fn ethertype(&self) -> EtherType {
        match self {
            IpRepr::V4(_) => EtherType::Ipv4,
            IpRepr::V6(_) => EtherType::Ipv6,
        }
    }

    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        self.emit_with_options(buf, &[])
    }

    /// Like [`IpRepr::emit`], with IPv4 `options` after the fixed header (a multiple of 4
    /// bytes); IPv6 takes none here. Returns the header's length.
    pub fn emit_with_options(&self, buf: &mut [u8], options: &[u8]) -> Result<usize> {
        match self {
            IpRepr::V4(r) => r.emit_with_options(buf, options),
            IpRepr::V6(r) if options.is_empty() => r.emit(buf),
            IpRepr::V6(_) => Err(crate::Error::Malformed),
        }
    }
}

/// The header length of `family`'s datagrams as this crate emits them (no options).
pub fn header_len_for(a: IpAddress) -> usize {
    match a {
        IpAddress::V4(_) => crate::ipv4::HEADER_LEN,
        IpAddress::V6(_) => crate::ipv6::HEADER_LEN,
    }
}

fn v4_of(a: IpAddress) -> Ipv4Addr {
    match a {
        IpAddress::V4(a) => a,
        IpAddress::V6(_) => Ipv4Addr::UNSPECIFIED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_of_each_family() {
        let (a, b) = (Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2));
        let r = IpRepr::new(a.into(), b.into(), IpProtocol::Tcp, 20, 2, 7);
        let mut buf = [0u8; 60];
        assert_eq!((r.emit(&mut buf), r.ethertype()), (Ok(20), EtherType::Ipv4));
        let p = crate::Ipv4Packet::new_checked(&buf[..40]).unwrap();
        assert_eq!((p.dst(), p.dscp_ecn(), p.ident()), (b, 2, 7));
        let (c, d) = (Ipv6Addr([0xfd; 16]), Ipv6Addr::ALL_NODES);
        let r = IpRepr::new(c.into(), d.into(), IpProtocol::Udp, 20, 1, 7);
        assert_eq!((r.emit(&mut buf), r.header_len()), (Ok(40), 40));
        let p = crate::Ipv6Packet::new_checked(&buf[..60]).unwrap();
        assert_eq!((p.src(), p.dst(), p.traffic_class()), (c, d, 1));
    }
}
