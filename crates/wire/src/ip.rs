//! An IP address of either family, for what works the same over IPv4 and IPv6: the
//! transport checksums' pseudo-header, connection keys, neighbour caches.

use crate::ipv4::Ipv4Addr;
use crate::ipv6::Ipv6Addr;

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
