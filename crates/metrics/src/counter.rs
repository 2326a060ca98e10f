//! A counter that one thread writes and any thread reads. The writer is the only one that
//! changes it, so an increment is a relaxed load and a relaxed store (two plain moves on x86),
//! not an atomic read-modify-write: no lock and no locked instruction on the request path.
//! A reader at scrape time sees each shard's latest value or one a moment older.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Only the owning thread may call this (a second writer would lose counts).
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed)
    }

    /// Adds one; only the owning thread may call this.
    pub fn bump(&self) {
        self.add(1)
    }

    /// Adds `n`; only the owning thread may call this.
    pub fn add(&self, n: u64) {
        self.set(self.get().wrapping_add(n))
    }

    /// Subtracts one (a gauge going down); only the owning thread may call this.
    pub fn drop_one(&self) {
        self.set(self.get().saturating_sub(1))
    }
}

/// The sum of one counter over its owners (shards, CPUs).
pub fn sum<'a>(counters: impl IntoIterator<Item = &'a Counter>) -> u64 {
    counters.into_iter().map(Counter::get).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn each_writer_owns_its_counter_and_the_sum_adds_them() {
        let shards: Arc<Vec<Counter>> = Arc::new((0..4).map(|_| Counter::default()).collect());
        std::thread::scope(|s| {
            for i in 0..4 {
                let shards = shards.clone();
                s.spawn(move || {
                    for _ in 0..10_000 * (i + 1) {
                        shards[i].bump();
                    }
                });
            }
        });
        assert_eq!(shards[3].get(), 40_000);
        assert_eq!(sum(shards.iter()), 100_000);
    }

    #[test]
    fn gauge_up_and_down() {
        let c = Counter::default();
        c.bump();
        c.add(2);
        c.drop_one();
        assert_eq!(c.get(), 2);
        c.set(0);
        c.drop_one();
        assert_eq!(c.get(), 0);
    }
}
