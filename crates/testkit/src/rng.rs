//! A seeded generator for tests that draw their configuration at random, so that a failing
//! run can be repeated with the seed it printed.

/// splitmix64.
pub struct Rng(u64);

impl Rng {
    /// The seed from the environment variable `var`, else from the clock; printed either way.
    pub fn seeded(var: &str, test: &str) -> Rng {
        let seed = std::env::var(var)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64 % 1_000_000)
                    .unwrap_or(1)
            });
        println!("{test}: seed {seed} (repeat with {var}={seed})");
        Rng(seed)
    }

    /// The next draw (splitmix64 steps without end, so it is no `Iterator`).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }

    /// A second generator derived from this one's state, which it leaves as it was: a draw
    /// added later takes from a fork, so the draws an old seed made stay the same.
    pub fn fork(&self) -> Rng {
        Rng(self.0 ^ 0x6a09_e667_f3bc_c908)
    }

    /// One of `choices`, each as likely.
    pub fn pick<'a, T: ?Sized>(&mut self, choices: &[&'a T]) -> &'a T {
        choices[self.below(choices.len())]
    }
}
