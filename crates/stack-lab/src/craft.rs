//! What the conformance cases craft with: the test kit's raw frame builder
//! (`wirespeed_testkit::craft`, re-exported here) and the twin labs' addresses, which both
//! twins use, so a reply's addresses compare byte for byte.

pub use wirespeed_testkit::craft::*;

/// The address both DUTs answer for: our stack through `serve --ip` in twin A, the kernel's
/// own address in twin B.
pub const DUT_IP: [u8; 4] = [198, 18, 0, 2];
/// Prefix of the DUTs' subnet: 198.18.0.0/15, the whole benchmarking range, so every crafted
/// peer address is on-link.
pub const PREFIX_LEN: u8 = 15;
/// The DUTs' default gateway (answered by the harness's ARP responder, owned by nobody).
pub const GATEWAY: [u8; 4] = [198, 18, 0, 1];
/// The DUT end's MAC in both twins (set explicitly, locally administered).
pub const DUT_MAC: [u8; 6] = [0x02, 0x77, 0x73, 0x00, 0x00, 0x02];
/// The peer end's MAC in both twins; crafted frames come from it and ARP answers name it.
pub const PEER_MAC: [u8; 6] = [0x02, 0x77, 0x73, 0x00, 0x00, 0x01];
/// The listening port (HTTP) on both DUTs.
pub const HTTP_PORT: u16 = 8080;
/// A port nobody listens on.
pub const CLOSED_PORT: u16 = 8081;

/// The IPv6 address both DUTs answer for: fd00::2 (`serve --ip fd00::2/64` in twin A, the
/// kernel's own in twin B).
pub const DUT_IP6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
/// The DUTs' IPv6 prefix length: fd00::/64 is on-link, the crafted sources (fd01::/16) are
/// not.
pub const PREFIX6_LEN: u8 = 64;
/// The DUTs' IPv6 default gateway fd00::1 (answered by the harness's neighbour discovery,
/// owned by nobody).
pub const GATEWAY6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
/// The link-local address the kernel gives the DUT end (EUI-64 of `DUT_MAC`):
/// fe80::77:73ff:fe00:2. Twin B's Linux owns it; in twin A our stack owns it too (its
/// kernel has it as well, behind the XDP program that steers it to the stack).
pub const DUT_LL6: [u8; 16] = [
    0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x77, 0x73, 0xff, 0xfe, 0, 0, 2,
];
/// ff02::1, all nodes.
pub const ALL_NODES6: [u8; 16] = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

/// The crafted peer address of case `index`: one per case (198.19.16.0 onwards, a pool of
/// 4000 that the index wraps around), which the peer kernel does not own, so the DUTs'
/// replies reach nobody but the harness, and a late retransmission for an earlier case
/// cannot be taken for a reply in a later one.
pub fn peer_ip(index: usize) -> [u8; 4] {
    let n = 16 * 256 + (index % 4000) as u32;
    [198, 19, (n >> 8) as u8, n as u8]
}

/// The crafted source port of case `index` (unique within a run of up to 50 000 cases).
pub fn peer_port(index: usize) -> u16 {
    10_000 + (index % 50_000) as u16
}

/// The crafted IPv6 peer address of case `index`: fd01::10:XXXX:XXXX, off-link (the DUTs
/// reach it through the gateway), one per case and never reused in a run.
pub fn peer_ip6(index: usize) -> [u8; 16] {
    let mut a = [0xfd, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0];
    a[12..].copy_from_slice(&(index as u32).to_be_bytes());
    a
}

/// An on-link crafted IPv6 address of case `index` (neighbour discovery comes from a
/// neighbour): fd00::5a:XXXX:XXXX.
pub fn onlink_ip6(index: usize) -> [u8; 16] {
    let mut a = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x5a, 0, 0, 0, 0];
    a[12..].copy_from_slice(&(index as u32).to_be_bytes());
    a
}

/// A crafted link-local address of case `index`: fe80::5a:XXXX:XXXX.
pub fn link_local6(index: usize) -> [u8; 16] {
    let mut a = onlink_ip6(index);
    a[..2].copy_from_slice(&[0xfe, 0x80]);
    a
}

/// The solicited-node group of `a` (RFC 4291 §2.7.1).
pub fn solicited_node(a: [u8; 16]) -> [u8; 16] {
    let mut g = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 0];
    g[13..].copy_from_slice(&a[13..]);
    g
}

/// The Ethernet group address of an IPv6 multicast address (RFC 2464 §7).
pub fn multicast_mac6(a: [u8; 16]) -> [u8; 6] {
    [0x33, 0x33, a[12], a[13], a[14], a[15]]
}

/// An IPv6 address as text (`fd00::2`).
pub fn ip6_text(a: [u8; 16]) -> String {
    std::net::Ipv6Addr::from(a).to_string()
}
