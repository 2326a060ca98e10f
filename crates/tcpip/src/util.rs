//! Small keyed hashes: the demux table hasher and the ISN / SYN-cookie function.

use std::hash::{BuildHasher, Hasher};

/// A fast hasher for the packed 4-tuple key (one multiply and a fold). Seeded by the
/// stack secret so remote peers cannot predict bucket placement.
#[derive(Clone, Copy, Default)]
pub(crate) struct FlowHasher {
    state: u64,
}

impl Hasher for FlowHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        let x = (self.state ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.state = x ^ (x >> 29);
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64)
    }
    #[inline]
    fn write_u16(&mut self, v: u16) {
        self.write_u64(v as u64)
    }
    #[inline]
    fn finish(&self) -> u64 {
        let x = self.state.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^ (x >> 31)
    }
}

#[derive(Clone, Copy, Default)]
pub(crate) struct FlowHashBuilder {
    pub(crate) seed: u64,
}

impl BuildHasher for FlowHashBuilder {
    type Hasher = FlowHasher;
    fn build_hasher(&self) -> FlowHasher {
        FlowHasher { state: self.seed }
    }
}

/// A keyed 64-bit mix of several words (SplitMix-style rounds). Not cryptographic: it makes
/// ISNs and cookies unguessable to an off-path attacker who does not know the secret, which
/// is the property RFC 6528 asks for, but it is no PRF proof.
pub(crate) fn keyed_hash(secret: u64, words: &[u64]) -> u64 {
    let mut h = secret ^ 0x243f_6a88_85a3_08d3;
    for &w in words {
        h ^= w;
        h = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
        h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^= h >> 31;
    }
    h
}

/// A deterministic PRNG (xorshift64*) for tests and port cursors.
#[derive(Debug, Clone)]
pub(crate) struct XorShift(pub(crate) u64);

impl XorShift {
    #[allow(dead_code)]
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0.max(1);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}
