//! Packet formats for the wirespeed userspace stack.
//!
//! Every header has a zero-copy view (`XxxPacket<T: AsRef<[u8]>>`) whose constructor
//! `new_checked` validates the length once, so accessors never index out of bounds, and a
//! `XxxRepr` that parses a view into plain values and emits those values into a buffer.
//! Nothing here does I/O, allocates, uses `unsafe` or panics on any input: malformed input
//! is reported as [`Error`].
//!
//! IPv6 is three modules: the address and fixed header ([`ipv6`]), the extension headers
//! as Linux's receive path walks them ([`ipv6_ext`]), and neighbour discovery's options and
//! rules ([`ndisc`]) beside the ICMPv6 messages ([`icmpv6`]).
//!
//! Also here: Internet checksums (full, with the IPv4 pseudo-header, and the RFC 1624
//! incremental update) and the Toeplitz RSS hash used to choose source ports whose flows land
//! on a given receive queue.

#![forbid(unsafe_code)]

pub mod arp;
pub mod checksum;
pub mod ethernet;
pub mod icmpv4;
pub mod icmpv6;
pub mod ip;
pub mod ip_options;
pub mod ip_options_echo;
pub mod ipv4;
pub mod ipv6;
pub mod ipv6_ext;
pub mod ipv6_options;
pub mod ndisc;
pub mod tcp;
pub mod toeplitz;
pub mod udp;

pub use arp::{ArpOperation, ArpPacket, ArpRepr};
pub use ethernet::{EtherType, EthernetFrame, EthernetRepr, MacAddr};
pub use icmpv4::{Icmpv4Error, Icmpv4Packet, Icmpv4Repr};
pub use icmpv6::{Icmpv6Error, Icmpv6Packet, Icmpv6Repr};
pub use ip::{IpAddress, IpRepr};
pub use ipv4::{IpProtocol, Ipv4Addr, Ipv4Packet, Ipv4Repr};
pub use ipv6::{Ipv6Addr, Ipv6Packet, Ipv6Repr};
pub use ipv6_ext::{ExtDiscard, ExtWalk, FragmentHeader};
pub use tcp::{SeqNumber, TcpControl, TcpOptions, TcpPacket, TcpRepr};
pub use udp::{UdpPacket, UdpRepr};

/// Why a buffer could not be parsed or emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The buffer is shorter than the header (or than the length the header claims).
    Truncated,
    /// A field holds a value that the format forbids (bad version, header length, ...).
    Malformed,
    /// The checksum does not verify.
    Checksum,
    /// Well-formed, but a variant this crate does not handle (e.g. non-Ethernet ARP).
    Unsupported,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Error::Truncated => "truncated packet",
            Error::Malformed => "malformed packet",
            Error::Checksum => "bad checksum",
            Error::Unsupported => "unsupported packet variant",
        })
    }
}

impl std::error::Error for Error {}

/// Result of parsing or emitting.
pub type Result<T> = core::result::Result<T, Error>;

#[inline]
pub(crate) fn get_u16(b: &[u8], at: usize) -> u16 {
    // Callers have checked the length in `new_checked`; `get` keeps this panic-free anyway.
    match b.get(at..at + 2) {
        Some(s) => u16::from_be_bytes([s[0], s[1]]),
        None => 0,
    }
}

#[inline]
pub(crate) fn get_u32(b: &[u8], at: usize) -> u32 {
    match b.get(at..at + 4) {
        Some(s) => u32::from_be_bytes([s[0], s[1], s[2], s[3]]),
        None => 0,
    }
}

#[inline]
pub(crate) fn put_u16(b: &mut [u8], at: usize, v: u16) {
    if let Some(s) = b.get_mut(at..at + 2) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}

#[inline]
pub(crate) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    if let Some(s) = b.get_mut(at..at + 4) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}
