//! Single-producer single-consumer rings shared with the kernel (the AF_XDP fill, completion,
//! rx and tx rings).
//!
//! Each ring is a power-of-two array of descriptors plus a producer and a consumer index, all
//! in memory mapped from the socket. The indices are free-running `u32`s (they wrap at 2^32,
//! never at the ring size); the slot of index `i` is `i & mask`. The full ring holds `size`
//! entries: `producer - consumer` (wrapping) is the number of entries in it.
//!
//! Memory ordering, the same contract the kernel keeps on its side:
//! - a producer writes descriptors, then publishes them with a *release* store of the producer
//!   index; the consumer reads the producer index with an *acquire* load before it reads them;
//! - a consumer reads descriptors, then frees the slots with a *release* store of the consumer
//!   index; the producer reads the consumer index with an *acquire* load before it overwrites
//!   them.
//!
//! Both sides cache the other side's index and only reload it when the cached value says the
//! ring is full (producer) or empty (consumer), so a burst costs one shared load at most.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};

/// `XDP_RING_NEED_WAKEUP` in the ring's flags word.
pub const NEED_WAKEUP: u32 = 1;

/// Where one ring's parts live. All pointers are into memory that outlives the ring views
/// built from it (an mmap of the socket, or a test buffer).
#[derive(Debug, Clone, Copy)]
pub struct RawRing {
    pub producer: *const AtomicU32,
    pub consumer: *const AtomicU32,
    /// The flags word, or null on kernels without need_wakeup support.
    pub flags: *const AtomicU32,
    /// `size` descriptors.
    pub descs: *mut u8,
    /// A power of two.
    pub size: u32,
}

/// The producing side of a ring (we produce: fill and tx rings).
#[derive(Debug)]
pub struct Producer<T: Copy> {
    raw: RawRing,
    mask: u32,
    /// Our next index to reserve: entries below it are written or reserved.
    cached_prod: u32,
    /// The consumer index last seen, plus `size`: the first index we may not reserve.
    cached_cons: u32,
    _t: PhantomData<T>,
}

/// The consuming side of a ring (we consume: completion and rx rings).
#[derive(Debug)]
pub struct Consumer<T: Copy> {
    raw: RawRing,
    mask: u32,
    /// The producer index last seen: entries below it are readable.
    cached_prod: u32,
    /// Our next index to read: entries below it are peeked (released on `release`).
    cached_cons: u32,
    _t: PhantomData<T>,
}

fn check(raw: &RawRing) -> u32 {
    assert!(
        raw.size.is_power_of_two(),
        "ring size must be a power of two"
    );
    raw.size - 1
}

impl<T: Copy> Producer<T> {
    /// # Safety
    /// `raw` must describe a live ring of `raw.size` elements of `T`, valid for as long as this
    /// view exists, whose producer index no one else writes.
    pub unsafe fn new(raw: RawRing) -> Producer<T> {
        let mask = check(&raw);
        // SAFETY: the caller guarantees the index pointers are valid.
        let (prod, cons) = unsafe {
            (
                (*raw.producer).load(Ordering::Relaxed),
                (*raw.consumer).load(Ordering::Acquire),
            )
        };
        Producer {
            raw,
            mask,
            cached_prod: prod,
            cached_cons: cons.wrapping_add(raw.size),
            _t: PhantomData,
        }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: valid for the life of the view (constructor contract).
        unsafe { &*self.raw.consumer }
    }

    /// Free slots, at least `want` if that many are free: reloads the consumer index only
    /// when the cached one says there are fewer.
    pub fn free(&mut self, want: u32) -> u32 {
        let free = self.cached_cons.wrapping_sub(self.cached_prod);
        if free >= want {
            return free;
        }
        self.cached_cons = self
            .consumer()
            .load(Ordering::Acquire)
            .wrapping_add(self.raw.size);
        self.cached_cons.wrapping_sub(self.cached_prod)
    }

    /// Reserves `n` slots and returns the index of the first, or None when fewer are free.
    pub fn reserve(&mut self, n: u32) -> Option<u32> {
        if self.free(n) < n {
            return None;
        }
        let first = self.cached_prod;
        self.cached_prod = self.cached_prod.wrapping_add(n);
        Some(first)
    }

    /// Writes the descriptor of a reserved index.
    pub fn write(&mut self, index: u32, value: T) {
        debug_assert!(
            self.cached_prod.wrapping_sub(index).wrapping_sub(1) < self.raw.size,
            "write outside reservation"
        );
        // SAFETY: masking keeps the slot inside the `size`-element array, and a reserved slot
        // lies beyond the published producer index, so the consumer does not read it yet.
        unsafe {
            (self.raw.descs as *mut T)
                .add((index & self.mask) as usize)
                .write_volatile(value)
        }
    }

    /// Takes back the last reserved slot (not yet submitted), when its frame was abandoned.
    pub fn unreserve_last(&mut self) {
        self.unreserve(1);
    }

    /// Takes back the last `n` reserved slots (not yet submitted): a frame that needed fewer
    /// descriptors than were reserved for it, or none.
    pub fn unreserve(&mut self, n: u32) {
        self.cached_prod = self.cached_prod.wrapping_sub(n);
    }

    /// Publishes every reserved (and written) slot to the consumer.
    pub fn submit(&mut self) {
        // SAFETY: valid for the life of the view; we are the only writer of this index.
        unsafe { (*self.raw.producer).store(self.cached_prod, Ordering::Release) }
    }

    /// Entries published but not yet taken by the consumer.
    pub fn pending(&self) -> u32 {
        // SAFETY: valid for the life of the view.
        let published = unsafe { (*self.raw.producer).load(Ordering::Relaxed) };
        published.wrapping_sub(self.consumer().load(Ordering::Acquire))
    }

    /// True when the kernel asks to be woken up to process this ring.
    pub fn needs_wakeup(&self) -> bool {
        needs_wakeup(&self.raw)
    }

    pub fn size(&self) -> u32 {
        self.raw.size
    }
}

impl<T: Copy> Consumer<T> {
    /// # Safety
    /// As for [`Producer::new`], with "consumer index" in place of "producer index".
    pub unsafe fn new(raw: RawRing) -> Consumer<T> {
        let mask = check(&raw);
        // SAFETY: the caller guarantees the index pointers are valid.
        let (prod, cons) = unsafe {
            (
                (*raw.producer).load(Ordering::Acquire),
                (*raw.consumer).load(Ordering::Relaxed),
            )
        };
        Consumer {
            raw,
            mask,
            cached_prod: prod,
            cached_cons: cons,
            _t: PhantomData,
        }
    }

    /// Entries ready to read, reloading the producer index only when the cache says none.
    pub fn available(&mut self) -> u32 {
        let mut n = self.cached_prod.wrapping_sub(self.cached_cons);
        if n == 0 {
            // SAFETY: valid for the life of the view.
            self.cached_prod = unsafe { (*self.raw.producer).load(Ordering::Acquire) };
            n = self.cached_prod.wrapping_sub(self.cached_cons);
        }
        n
    }

    /// Takes up to `max` entries: returns (first index, count), count 0 when empty. The slots
    /// stay ours until [`Consumer::release`].
    pub fn peek(&mut self, max: u32) -> (u32, u32) {
        let n = self.available().min(max);
        let first = self.cached_cons;
        self.cached_cons = self.cached_cons.wrapping_add(n);
        (first, n)
    }

    /// Reads the descriptor at a peeked index.
    pub fn read(&self, index: u32) -> T {
        // SAFETY: masking keeps the slot inside the array; a peeked slot lies below the
        // producer index we loaded with acquire, so its contents are complete, and above the
        // published consumer index, so the producer does not overwrite it yet.
        unsafe {
            (self.raw.descs as *const T)
                .add((index & self.mask) as usize)
                .read_volatile()
        }
    }

    /// Gives every peeked slot back to the producer.
    pub fn release(&mut self) {
        // SAFETY: valid for the life of the view; we are the only writer of this index.
        unsafe { (*self.raw.consumer).store(self.cached_cons, Ordering::Release) }
    }

    pub fn needs_wakeup(&self) -> bool {
        needs_wakeup(&self.raw)
    }
}

fn needs_wakeup(raw: &RawRing) -> bool {
    if raw.flags.is_null() {
        return true;
    }
    // SAFETY: non-null flags point into the live ring (constructor contract).
    unsafe { (*raw.flags).load(Ordering::Relaxed) & NEED_WAKEUP != 0 }
}

// SAFETY: the views only touch memory the constructor contract keeps alive, and each side has a
// single owner; moving that owner to another thread is fine.
unsafe impl<T: Copy + Send> Send for Producer<T> {}
// SAFETY: as above.
unsafe impl<T: Copy + Send> Send for Consumer<T> {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A ring in ordinary memory, to drive both sides without a kernel.
    struct TestRing {
        producer: AtomicU32,
        consumer: AtomicU32,
        flags: AtomicU32,
        descs: Box<[std::cell::UnsafeCell<u64>]>,
    }

    // SAFETY: the test uses the ring as the SPSC protocol allows (one producer, one consumer).
    unsafe impl Sync for TestRing {}

    impl TestRing {
        fn new(size: u32, start: u32) -> Arc<TestRing> {
            Arc::new(TestRing {
                producer: AtomicU32::new(start),
                consumer: AtomicU32::new(start),
                flags: AtomicU32::new(0),
                descs: (0..size).map(|_| std::cell::UnsafeCell::new(0)).collect(),
            })
        }
        fn raw(&self) -> RawRing {
            RawRing {
                producer: &self.producer,
                consumer: &self.consumer,
                flags: &self.flags,
                descs: self.descs.as_ptr() as *mut u8,
                size: self.descs.len() as u32,
            }
        }
        fn pair(self: &Arc<Self>) -> (Producer<u64>, Consumer<u64>) {
            // SAFETY: the Arc is held by the test for as long as the views live.
            unsafe { (Producer::new(self.raw()), Consumer::new(self.raw())) }
        }
    }

    #[test]
    fn fills_to_size_and_no_further() {
        let r = TestRing::new(8, 0);
        let (mut p, mut c) = r.pair();
        assert_eq!(p.free(1), 8);
        let first = p.reserve(8).unwrap();
        assert!(p.reserve(1).is_none(), "a full ring accepts nothing");
        for i in 0..8 {
            p.write(first + i, i as u64 * 10);
        }
        assert_eq!(c.available(), 0, "nothing is visible before submit");
        p.submit();
        assert_eq!(p.pending(), 8);
        let (idx, n) = c.peek(5);
        assert_eq!((idx, n), (0, 5));
        assert_eq!(
            (0..n).map(|i| c.read(idx + i)).collect::<Vec<_>>(),
            vec![0, 10, 20, 30, 40]
        );
        assert!(
            p.reserve(1).is_none(),
            "peeked but unreleased slots are still taken"
        );
        c.release();
        assert_eq!(p.free(1), 5);
        assert_eq!(p.pending(), 3);
    }

    #[test]
    fn indices_wrap_at_u32_max_not_at_ring_size() {
        let start = u32::MAX - 5;
        let r = TestRing::new(4, start);
        let (mut p, mut c) = r.pair();
        let mut next = 0u64;
        let mut expect = 0u64;
        for _round in 0..10 {
            let n = p.free(4);
            assert_eq!(n, 4);
            let first = p.reserve(3).unwrap();
            for i in 0..3 {
                p.write(first.wrapping_add(i), next);
                next += 1;
            }
            p.submit();
            let (idx, n) = c.peek(u32::MAX);
            assert_eq!(n, 3);
            for i in 0..n {
                assert_eq!(c.read(idx.wrapping_add(i)), expect);
                expect += 1;
            }
            c.release();
        }
        assert_eq!(r.producer.load(Ordering::Relaxed), start.wrapping_add(30));
        assert_eq!(r.consumer.load(Ordering::Relaxed), start.wrapping_add(30));
    }

    #[test]
    fn need_wakeup_follows_the_flag_word() {
        let r = TestRing::new(4, 0);
        let (p, c) = r.pair();
        assert!(!p.needs_wakeup() && !c.needs_wakeup());
        r.flags.store(NEED_WAKEUP, Ordering::Relaxed);
        assert!(p.needs_wakeup() && c.needs_wakeup());
    }

    #[test]
    #[should_panic(expected = "power of two")]
    fn rejects_sizes_that_are_not_powers_of_two() {
        let r = TestRing::new(6, 0);
        let _ = r.pair();
    }

    /// Producer and consumer on two threads: every value arrives once, in order. With wrong
    /// orderings this fails on weakly ordered machines and under the thread sanitizer.
    #[test]
    fn spsc_across_threads_delivers_everything_in_order() {
        const N: u64 = 200_000;
        let r = TestRing::new(64, u32::MAX - 1000);
        let (mut p, mut c) = r.pair();
        let keep = Arc::clone(&r);
        let producer = std::thread::spawn(move || {
            let _keep = keep;
            let mut next = 0u64;
            while next < N {
                let want = 16.min((N - next) as u32);
                let n = p.free(want).min(want);
                if n == 0 {
                    std::thread::yield_now();
                    continue;
                }
                let first = p.reserve(n).unwrap();
                for i in 0..n {
                    p.write(first.wrapping_add(i), next);
                    next += 1;
                }
                p.submit();
            }
        });
        let mut expect = 0u64;
        while expect < N {
            let (idx, n) = c.peek(32);
            if n == 0 {
                std::thread::yield_now();
                continue;
            }
            for i in 0..n {
                assert_eq!(c.read(idx.wrapping_add(i)), expect);
                expect += 1;
            }
            c.release();
        }
        producer.join().unwrap();
    }
}
