//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! Addresses come in as their bytes (`AsRef<[u8]>`: 4 or 16 in network order, which
//! `Ipv4Addr`, `Ipv6Addr` and `IpAddress` give), so this file depends on no header's types
//! and every header may use it.

/// Adds `data` as big-endian 16-bit words to an accumulator (no folding).
///
/// Chain calls to cover several disjoint pieces; each piece but the last must have even
/// length for the result to equal the checksum of the concatenation.
#[inline]
pub fn accumulate(acc: u64, data: &[u8]) -> u64 {
    // 32-bit words summed into two independent 64-bit lanes: no carry handling in the loop
    // (2^16 = 1 mod 0xffff, so 32-bit words fold to the same 16-bit sum), and the two
    // lanes let the CPU add in parallel. Overflow would need ~16 GiB of input.
    let mut a0: u64 = (acc & 0xffff_ffff) + (acc >> 32);
    let mut a1: u64 = 0;
    let word = |c: &[u8]| u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as u64;
    let mut chunks = data.chunks_exact(16);
    for c in &mut chunks {
        a0 += word(&c[0..4]) + word(&c[4..8]);
        a1 += word(&c[8..12]) + word(&c[12..16]);
    }
    let mut words = chunks.remainder().chunks_exact(4);
    for c in &mut words {
        a0 += word(c);
    }
    let rest = words.remainder();
    let mut pairs = rest.chunks_exact(2);
    for p in &mut pairs {
        a1 += u16::from_be_bytes([p[0], p[1]]) as u64;
    }
    if let [last] = pairs.remainder() {
        a1 += (*last as u64) << 8;
    }
    let s = a0 + a1;
    (s & 0xffff_ffff) + (s >> 32)
}

/// Folds an accumulator to 16 bits (not complemented).
#[inline]
pub fn fold(mut acc: u64) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The checksum of `data`: complement of the folded ones' complement sum.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !fold(accumulate(0, data))
}

/// The accumulated pseudo-header for TCP/UDP/ICMPv6 checksums: IPv4's (RFC 793) or IPv6's
/// (RFC 8200 §8.1), whose sums are the same formula over 4- or 16-byte addresses.
#[inline]
pub fn pseudo_header(
    src: impl AsRef<[u8]>,
    dst: impl AsRef<[u8]>,
    protocol: u8,
    length: u16,
) -> u64 {
    let mut acc = accumulate(0, src.as_ref());
    acc = accumulate(acc, dst.as_ref());
    acc + protocol as u64 + length as u64
}

/// The TCP/UDP checksum over the pseudo-header and `segment` (checksum field included
/// as it is in the buffer: zero it before computing, leave it to verify).
#[inline]
pub fn transport(
    src: impl AsRef<[u8]>,
    dst: impl AsRef<[u8]>,
    protocol: u8,
    segment: &[u8],
) -> u16 {
    let acc = pseudo_header(src, dst, protocol, segment.len() as u16);
    !fold(accumulate(acc, segment))
}

/// The TCP/UDP checksum field a sender's kernel leaves for the device to complete
/// (`CHECKSUM_PARTIAL`): the folded pseudo-header sum over `length` bytes of segment, not
/// complemented and covering no byte of the segment (Linux: `~csum_tcpudp_magic(saddr, daddr,
/// len, proto, 0)` in `__tcp_v4_send_check` and `udp4_hwcsum`). A veth hands such frames on
/// as they are, since they never cross a wire; see `docs/TCPIP.md`.
#[inline]
pub fn partial(src: impl AsRef<[u8]>, dst: impl AsRef<[u8]>, protocol: u8, length: u16) -> u16 {
    fold(pseudo_header(src, dst, protocol, length))
}

/// What a received TCP/UDP checksum field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportChecksum {
    /// The checksum verifies (or, UDP only, is zero: "not computed").
    Complete,
    /// It does not verify but equals [`partial`]: the sender left it to offload.
    Partial,
    /// Neither.
    Bad,
}

/// As [`classify`], for a receiver that takes partial checksums: a field that equals
/// [`partial`] is [`TransportChecksum::Partial`] at once, without summing the segment.
/// Only a software device (veth, ...) hands such frames on, and the kernel trusts them the
/// same way (`CHECKSUM_PARTIAL`: they never crossed a wire); other fields are summed as usual.
/// (A complete checksum that happens to equal the partial value is then called partial: the
/// frame is taken either way.)
#[inline]
pub fn classify_trusting_partial(
    src: impl AsRef<[u8]> + Copy,
    dst: impl AsRef<[u8]> + Copy,
    protocol: u8,
    segment: &[u8],
    field_at: usize,
) -> TransportChecksum {
    let field = segment
        .get(field_at..field_at + 2)
        .map(|f| u16::from_be_bytes([f[0], f[1]]));
    if field == Some(partial(src, dst, protocol, segment.len() as u16)) {
        return TransportChecksum::Partial;
    }
    classify(src, dst, protocol, segment, field_at)
}

/// Classifies the checksum of a TCP/UDP `segment` (checksum field at `field_at`, as received).
#[inline]
pub fn classify(
    src: impl AsRef<[u8]> + Copy,
    dst: impl AsRef<[u8]> + Copy,
    protocol: u8,
    segment: &[u8],
    field_at: usize,
) -> TransportChecksum {
    if transport(src, dst, protocol, segment) == 0 {
        return TransportChecksum::Complete;
    }
    let field = match segment.get(field_at..field_at + 2) {
        Some(f) => u16::from_be_bytes([f[0], f[1]]),
        None => return TransportChecksum::Bad,
    };
    if field == partial(src, dst, protocol, segment.len() as u16) {
        TransportChecksum::Partial
    } else {
        TransportChecksum::Bad
    }
}

/// RFC 1624 eqn. 3: the new checksum after one 16-bit word of the covered data changes from
/// `old` to `new`: HC' = ~(~HC + ~m + m').
#[inline]
pub fn update_u16(checksum: u16, old: u16, new: u16) -> u16 {
    let acc = (!checksum) as u64 + (!old) as u64 + new as u64;
    !fold(acc)
}

/// [`update_u16`] for a 32-bit field (an address or sequence number).
#[inline]
pub fn update_u32(checksum: u16, old: u32, new: u32) -> u16 {
    let c = update_u16(checksum, (old >> 16) as u16, (new >> 16) as u16);
    update_u16(c, old as u16, new as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv4::Ipv4Addr;

    /// Headers of two frames captured on a veth in its default state (tx-checksumming on,
    /// `tcpdump -x` on the peer): the field holds the folded pseudo-header sum.
    #[test]
    fn partial_matches_what_linux_leaves_on_a_veth() {
        let (a, b) = (Ipv4Addr::new(198, 18, 99, 1), Ipv4Addr::new(198, 18, 99, 2));
        // A SYN, TCP length 40: field 0x5257.
        assert_eq!(partial(a, b, 6, 40), 0x5257);
        // 6 bytes of data, TCP length 38: field 0x5255.
        assert_eq!(partial(a, b, 6, 38), 0x5255);
        // A UDP datagram of 3 bytes, UDP length 11: field 0x5245.
        assert_eq!(partial(a, b, 17, 11), 0x5245);
    }

    /// Trusting partials skips the sum only for a field holding the partial value: a complete
    /// checksum is still verified, and a bad one still refused.
    #[test]
    fn trusting_partial_skips_the_sum_only_for_the_partial_value() {
        let (a, b) = (Ipv4Addr::new(198, 18, 99, 1), Ipv4Addr::new(198, 18, 99, 2));
        let mut seg: Vec<u8> = (0..9000u32).map(|i| (i * 31 + 5) as u8).collect();
        let at = 16;
        seg[at..at + 2].copy_from_slice(&partial(a, b, 6, 9000).to_be_bytes());
        let trusting = |seg: &[u8]| classify_trusting_partial(a, b, 6, seg, at);
        assert_eq!(trusting(&seg), TransportChecksum::Partial);
        seg[100] ^= 0xff; // the bytes are not read: still partial
        assert_eq!(trusting(&seg), TransportChecksum::Partial);
        assert_eq!(classify(a, b, 6, &seg, at), TransportChecksum::Partial);
        seg[at..at + 2].copy_from_slice(&[0, 0]);
        let sum = transport(a, b, 6, &seg);
        seg[at..at + 2].copy_from_slice(&sum.to_be_bytes());
        assert_eq!(trusting(&seg), TransportChecksum::Complete);
        seg[200] ^= 0x01;
        assert_eq!(trusting(&seg), TransportChecksum::Bad);
        assert_eq!(trusting(&seg[..10]), TransportChecksum::Bad, "no field");
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: the sum of these words is ddf2 (folded), checksum 220d.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(accumulate(0, &data)), 0xddf2);
        assert_eq!(checksum(&data), 0x220d);
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(checksum(&[0xab]), checksum(&[0xab, 0x00]));
        let long: Vec<u8> = (0..101u32).map(|i| (i * 7) as u8).collect();
        let mut padded = long.clone();
        padded.push(0);
        assert_eq!(checksum(&long), checksum(&padded));
    }

    #[test]
    fn wide_sum_matches_naive() {
        let data: Vec<u8> = (0..1500u32).map(|i| (i * 131 + 7) as u8).collect();
        for len in [0, 1, 2, 7, 8, 9, 63, 64, 1499, 1500] {
            let mut acc: u32 = 0;
            for c in data[..len].chunks(2) {
                let w = if c.len() == 2 {
                    u16::from_be_bytes([c[0], c[1]])
                } else {
                    (c[0] as u16) << 8
                };
                acc += w as u32;
            }
            while acc >> 16 != 0 {
                acc = (acc & 0xffff) + (acc >> 16);
            }
            assert_eq!(checksum(&data[..len]), !(acc as u16), "len {len}");
        }
    }

    #[test]
    fn incremental_matches_full() {
        let mut data: Vec<u8> = (0..40u32).map(|i| (i * 37 + 3) as u8).collect();
        data[10] = 0;
        data[11] = 0;
        let c = checksum(&data);
        data[10..12].copy_from_slice(&c.to_be_bytes());
        for (old, new) in [
            (0x1234u32, 0xfedc_ba98u32),
            (0xffff_ffff, 0),
            (0, 0xffff_ffff),
        ] {
            let mut d = data.clone();
            d[20..24].copy_from_slice(&old.to_be_bytes());
            d[10] = 0;
            d[11] = 0;
            let c0 = checksum(&d);
            d[20..24].copy_from_slice(&new.to_be_bytes());
            let c1 = checksum(&d);
            let inc = update_u32(c0, old, new);
            // 0x0000 and 0xffff are the same value in ones' complement arithmetic.
            assert!(
                inc == c1 || (inc ^ c1) == 0xffff && (inc == 0 || c1 == 0),
                "{inc:x} {c1:x}"
            );
        }
        // A buffer with its checksum embedded verifies to 0.
        assert_eq!(checksum(&data), 0);
    }
}
