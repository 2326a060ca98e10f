//! A small seeded generator (splitmix64), so that a run's cases can be drawn again from its
//! printed seed.

#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn u32(&mut self) -> u32 {
        self.next_u64() as u32
    }

    /// Uniform in `0..n` (0 when n is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability 1/n.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    pub fn pick<T: Clone>(&mut self, choices: &[T]) -> T {
        choices[self.below(choices.len())].clone()
    }

    /// A generator for case `index`: each case draws from its own, so adding a draw to one
    /// kind of case does not change the others of a seed.
    pub fn for_case(seed: u64, index: usize) -> Rng {
        let mut r = Rng(seed ^ (index as u64).wrapping_mul(0xd1b5_4a32_d192_ed03));
        r.next_u64();
        r
    }
}

/// A seed from the clock, for runs without `--seed` (six digits, easy to retype).
pub fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64 % 1_000_000)
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_draws() {
        let a: Vec<u64> = (0..5).map(|_| Rng::for_case(9, 3).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(
            Rng::for_case(9, 3).next_u64(),
            Rng::for_case(9, 4).next_u64()
        );
        let mut r = Rng::new(1);
        assert!((0..100).all(|_| r.below(7) < 7));
    }
}
