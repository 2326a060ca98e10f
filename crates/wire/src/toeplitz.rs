//! The Toeplitz hash that NICs use for receive-side scaling (RSS).
//!
//! A shard that opens connections picks source ports whose hash lands on its own receive
//! queue, so replies come back to the core that sent the request.

use crate::ipv4::Ipv4Addr;

/// The 40-byte key from Microsoft's RSS specification, the default of many drivers.
pub const MICROSOFT_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// Toeplitz hash of `input` under `key`. Inputs longer than `key.len() - 4` bytes only use
/// the key bits available (extra input bits hash against zero key bits).
pub fn hash(key: &[u8], input: &[u8]) -> u32 {
    let key_bit = |i: usize| -> u32 {
        let byte = key.get(i / 8).copied().unwrap_or(0);
        ((byte >> (7 - (i % 8))) & 1) as u32
    };
    // The 32-bit window of the key starting at bit i, slid one bit per input bit.
    let mut window: u32 = 0;
    for i in 0..32 {
        window = (window << 1) | key_bit(i);
    }
    let mut result = 0u32;
    for (byte_idx, byte) in input.iter().enumerate() {
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                result ^= window;
            }
            window = (window << 1) | key_bit(byte_idx * 8 + bit + 32);
        }
    }
    result
}

/// RSS hash of an IPv4 TCP/UDP 4-tuple, as the NIC computes it for a packet travelling
/// `src` → `dst` (input order: source address, destination address, source port,
/// destination port).
pub fn hash_ipv4_ports(
    key: &[u8],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    src_port: u16,
    dst_port: u16,
) -> u32 {
    let mut input = [0u8; 12];
    input[0..4].copy_from_slice(&src.0);
    input[4..8].copy_from_slice(&dst.0);
    input[8..10].copy_from_slice(&src_port.to_be_bytes());
    input[10..12].copy_from_slice(&dst_port.to_be_bytes());
    hash(key, &input)
}

/// RSS hash over the IPv4 addresses only.
pub fn hash_ipv4(key: &[u8], src: Ipv4Addr, dst: Ipv4Addr) -> u32 {
    let mut input = [0u8; 8];
    input[0..4].copy_from_slice(&src.0);
    input[4..8].copy_from_slice(&dst.0);
    hash(key, &input)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published verification suite ("Verifying the RSS Hash Calculation", Microsoft):
    /// (destination, source, dst port, src port, IPv4-only hash, IPv4-with-TCP hash).
    type Vector = ([u8; 4], u16, [u8; 4], u16, u32, u32);
    const VECTORS: [Vector; 5] = [
        (
            [161, 142, 100, 80],
            1766,
            [66, 9, 149, 187],
            2794,
            0x323e8fc2,
            0x51ccc178,
        ),
        (
            [65, 69, 140, 83],
            4739,
            [199, 92, 111, 2],
            14230,
            0xd718262a,
            0xc626b0ea,
        ),
        (
            [12, 22, 207, 184],
            38024,
            [24, 19, 198, 95],
            12898,
            0xd2d0a5de,
            0x5c2b394a,
        ),
        (
            [209, 142, 163, 6],
            2217,
            [38, 27, 205, 30],
            48228,
            0x82989176,
            0xafc7327f,
        ),
        (
            [202, 188, 127, 2],
            1303,
            [153, 39, 163, 191],
            44251,
            0x5d1809c5,
            0x10e828a2,
        ),
    ];

    #[test]
    fn microsoft_test_vectors() {
        for (dst, dport, src, sport, ip_only, with_ports) in VECTORS {
            let (s, d) = (Ipv4Addr(src), Ipv4Addr(dst));
            assert_eq!(hash_ipv4(&MICROSOFT_KEY, s, d), ip_only, "{s} -> {d}");
            assert_eq!(
                hash_ipv4_ports(&MICROSOFT_KEY, s, d, sport, dport),
                with_ports,
                "{s}:{sport} -> {d}:{dport}"
            );
        }
    }
}
