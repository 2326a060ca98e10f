//! An in-memory wire between two [`MemPort`]s, for deterministic tests of the stack.
//!
//! Frames written with `tx_frame` travel to the other end at `flush` (as on a real NIC,
//! nothing leaves before the kick). Each direction can lose, reorder and duplicate frames with
//! given probabilities, drawn from a seeded generator: the same seed and the same calls give
//! the same wire, run after run.
//!
//! Buffers come from a per-direction pool allocated up front, so a steady-state test does not
//! allocate per frame. Each direction sits behind a mutex so the two ends may live on two
//! threads; this driver is for tests, not for the data path.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::{FrameIo, Stats};

/// Impairments of one direction. Probabilities are in [0, 1]; out-of-range values are clamped.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Impairments {
    /// Probability that a frame is lost.
    pub loss: f64,
    /// Probability that a frame is held back and delivered after the next one.
    pub reorder: f64,
    /// Probability that a frame is delivered twice.
    pub duplicate: f64,
}

/// Shape of a pair.
#[derive(Debug, Clone, Copy)]
pub struct MemConfig {
    /// Largest frame, in bytes.
    pub frame_capacity: usize,
    /// Frames a receive queue holds; more are dropped (counted as `rx_dropped` at the receiver).
    pub queue_depth: usize,
    /// Frames a port can have queued by `tx_frame` before `flush`.
    pub tx_ring: usize,
    /// Seed of the impairment generator (each direction derives its own stream from it).
    pub seed: u64,
    pub a_to_b: Impairments,
    pub b_to_a: Impairments,
    /// Both ports complete the TCP checksum of each IPv4 TCP frame they send, in software, as
    /// a device with checksum offload does ([`FrameIo::tx_checksum_offload`] says so to the
    /// stack above, which then leaves only the pseudo-header sum).
    pub tx_checksum_offload: bool,
}

impl Default for MemConfig {
    fn default() -> Self {
        MemConfig {
            frame_capacity: 2048,
            queue_depth: 1024,
            tx_ring: 256,
            seed: 1,
            a_to_b: Impairments::default(),
            b_to_a: Impairments::default(),
            tx_checksum_offload: false,
        }
    }
}

/// Builds the two ends of a wire.
#[derive(Debug)]
pub struct MemPair;

impl MemPair {
    /// A lossless pair with default sizes.
    pub fn lossless() -> (MemPort, MemPort) {
        MemPair::with_config(MemConfig::default())
    }

    pub fn with_config(cfg: MemConfig) -> (MemPort, MemPort) {
        let ab = Arc::new(Mutex::new(Link::new(
            &cfg,
            cfg.a_to_b,
            cfg.seed ^ 0x9e37_79b9_7f4a_7c15,
        )));
        let ba = Arc::new(Mutex::new(Link::new(
            &cfg,
            cfg.b_to_a,
            cfg.seed ^ 0xc2b2_ae3d_27d4_eb4f,
        )));
        let a = MemPort::new(&cfg, Arc::clone(&ab), Arc::clone(&ba));
        let b = MemPort::new(&cfg, ba, ab);
        (a, b)
    }
}

/// One direction of the wire.
#[derive(Debug)]
struct Link {
    imp: Impairments,
    rng: SplitMix64,
    queue: VecDeque<Vec<u8>>,
    /// A frame held back by reordering: it goes out right behind the next frame, or to the
    /// receiver when it finds the queue empty, so it is never stuck.
    held: Option<Vec<u8>>,
    /// Recycled buffers, shared by both ends of this direction.
    pool: Vec<Vec<u8>>,
    depth: usize,
    /// Frames lost to a full queue, reported by the receiving port.
    overflowed: u64,
    /// Frames still to be lost on purpose ([`MemPort::drop_next`]).
    drop_next: u64,
}

impl Link {
    fn new(cfg: &MemConfig, imp: Impairments, seed: u64) -> Link {
        let pool_size = cfg.queue_depth + cfg.tx_ring + 2;
        Link {
            imp: Impairments {
                loss: clamp(imp.loss),
                reorder: clamp(imp.reorder),
                duplicate: clamp(imp.duplicate),
            },
            rng: SplitMix64(seed),
            queue: VecDeque::with_capacity(cfg.queue_depth + 2),
            held: None,
            pool: (0..pool_size)
                .map(|_| Vec::with_capacity(cfg.frame_capacity))
                .collect(),
            depth: cfg.queue_depth,
            overflowed: 0,
            drop_next: 0,
        }
    }

    fn buffer(&mut self) -> Vec<u8> {
        // The pool only runs dry if a test keeps more frames in flight than it configured.
        self.pool.pop().unwrap_or_default()
    }

    fn recycle(&mut self, mut buf: Vec<u8>) {
        buf.clear();
        self.pool.push(buf);
    }

    fn enqueue(&mut self, frame: Vec<u8>) {
        if self.queue.len() >= self.depth {
            self.overflowed += 1;
            self.recycle(frame);
        } else {
            self.queue.push_back(frame);
        }
    }

    /// Puts one transmitted frame on the wire; returns how many were lost.
    fn send(&mut self, frame: Vec<u8>) -> u64 {
        if self.drop_next > 0 {
            self.drop_next -= 1;
            self.recycle(frame);
            return 1;
        }
        if self.rng.chance(self.imp.loss) {
            self.recycle(frame);
            return 1;
        }
        if self.rng.chance(self.imp.duplicate) {
            let mut copy = self.buffer();
            copy.extend_from_slice(&frame);
            self.enqueue(copy);
        }
        if self.held.is_none() && self.rng.chance(self.imp.reorder) {
            self.held = Some(frame);
            return 0;
        }
        self.enqueue(frame);
        if let Some(held) = self.held.take() {
            self.enqueue(held);
        }
        0
    }
}

fn clamp(p: f64) -> f64 {
    if p.is_nan() {
        0.0
    } else {
        p.clamp(0.0, 1.0)
    }
}

/// A small, fast, seedable generator (SplitMix64); good enough to draw impairments.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        // 53 random bits as a float in [0, 1).
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

/// One end of an in-memory wire. `Send`, so the two ends may run on two threads.
#[derive(Debug)]
pub struct MemPort {
    tx: Arc<Mutex<Link>>,
    rx: Arc<Mutex<Link>>,
    /// Frames built by `tx_frame`, waiting for `flush`.
    pending: Vec<Vec<u8>>,
    /// A burst taken from the receive queue, handed to the callback outside the lock.
    burst: Vec<Vec<u8>>,
    tx_ring: usize,
    capacity: usize,
    checksum_offload: bool,
    stats: Stats,
}

impl MemPort {
    fn new(cfg: &MemConfig, tx: Arc<Mutex<Link>>, rx: Arc<Mutex<Link>>) -> MemPort {
        MemPort {
            tx,
            rx,
            pending: Vec::with_capacity(cfg.tx_ring),
            burst: Vec::with_capacity(cfg.queue_depth),
            tx_ring: cfg.tx_ring.max(1),
            capacity: cfg.frame_capacity,
            checksum_offload: cfg.tx_checksum_offload,
            stats: Stats::default(),
        }
    }

    /// Changes the impairments of the direction this port sends on (e.g. to lose exactly the
    /// next frames of a handshake and then heal the wire).
    pub fn set_tx_impairments(&mut self, imp: Impairments) {
        let mut link = lock(&self.tx);
        link.imp = Impairments {
            loss: clamp(imp.loss),
            reorder: clamp(imp.reorder),
            duplicate: clamp(imp.duplicate),
        };
    }

    /// Loses exactly the next `n` frames this port sends (on top of any impairments): for
    /// tests that need one particular segment to vanish.
    pub fn drop_next(&mut self, n: u64) {
        lock(&self.tx).drop_next = n;
    }

    /// Frames waiting in this port's receive queue (held-back frames included).
    pub fn rx_queued(&self) -> usize {
        let link = lock(&self.rx);
        link.queue.len() + usize::from(link.held.is_some())
    }
}

/// A poisoned lock only means the other end's thread panicked; the queue itself is intact.
fn lock(m: &Mutex<Link>) -> MutexGuard<'_, Link> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl FrameIo for MemPort {
    fn rx_burst<F: FnMut(&[u8])>(&mut self, max: usize, mut f: F) -> usize {
        {
            let mut link = lock(&self.rx);
            if link.queue.is_empty() {
                if let Some(held) = link.held.take() {
                    link.queue.push_back(held);
                }
            }
            let n = max.min(link.queue.len());
            self.burst.extend(link.queue.drain(..n));
            self.stats.rx_dropped += std::mem::take(&mut link.overflowed);
        }
        let n = self.burst.len();
        for frame in &self.burst {
            self.stats.rx_frames += 1;
            self.stats.rx_bytes += frame.len() as u64;
            f(frame);
        }
        if n > 0 {
            let mut link = lock(&self.rx);
            for buf in self.burst.drain(..) {
                link.recycle(buf);
            }
        }
        n
    }

    fn tx_frame<F: FnOnce(&mut [u8]) -> usize>(&mut self, f: F) -> bool {
        if self.pending.len() >= self.tx_ring {
            self.stats.tx_ring_full += 1;
            return false;
        }
        let mut buf = lock(&self.tx).buffer();
        buf.resize(self.capacity, 0);
        let len = f(&mut buf);
        if len == 0 || len > self.capacity {
            if len > self.capacity {
                self.stats.tx_invalid += 1;
            }
            lock(&self.tx).recycle(buf);
            return len == 0;
        }
        buf.truncate(len);
        if self.checksum_offload {
            if let Some((start, offset)) = wirespeed_wire::tcp::checksum_offload_at(&buf) {
                wirespeed_wire::tcp::complete_checksum(&mut buf, start, offset);
            }
        }
        self.pending.push(buf);
        true
    }

    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let mut link = lock(&self.tx);
        for frame in self.pending.drain(..) {
            self.stats.tx_frames += 1;
            self.stats.tx_bytes += frame.len() as u64;
            self.stats.tx_dropped += link.send(frame);
        }
    }

    fn frame_capacity(&self) -> usize {
        self.capacity
    }

    fn tx_checksum_offload(&self) -> bool {
        self.checksum_offload
    }

    fn stats(&self) -> &Stats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(port: &mut MemPort, payload: &[u8]) -> bool {
        port.tx_frame(|buf| {
            buf[..payload.len()].copy_from_slice(payload);
            payload.len()
        })
    }

    fn drain(port: &mut MemPort) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        while port.rx_burst(16, |f| got.push(f.to_vec())) > 0 {}
        got
    }

    #[test]
    fn frames_cross_only_at_flush_and_in_order() {
        let (mut a, mut b) = MemPair::lossless();
        for i in 0..5u8 {
            assert!(send(&mut a, &[i; 60]));
        }
        assert!(drain(&mut b).is_empty(), "nothing crosses before flush");
        a.flush();
        let got = drain(&mut b);
        assert_eq!(got.len(), 5);
        for (i, f) in got.iter().enumerate() {
            assert_eq!(f, &vec![i as u8; 60]);
        }
        assert_eq!(a.stats().tx_frames, 5);
        assert_eq!(a.stats().tx_bytes, 300);
        assert_eq!(b.stats().rx_frames, 5);
        // The other direction works too.
        assert!(send(&mut b, b"pong"));
        b.flush();
        assert_eq!(drain(&mut a), vec![b"pong".to_vec()]);
    }

    #[test]
    fn bounded_rings_refuse_and_count() {
        let cfg = MemConfig {
            tx_ring: 2,
            queue_depth: 3,
            ..MemConfig::default()
        };
        let (mut a, mut b) = MemPair::with_config(cfg);
        assert!(send(&mut a, b"1") && send(&mut a, b"2"));
        assert!(!send(&mut a, b"3"), "tx ring of 2 is full");
        assert_eq!(a.stats().tx_ring_full, 1);
        a.flush();
        assert!(send(&mut a, b"3") && send(&mut a, b"4"));
        a.flush();
        assert_eq!(drain(&mut b).len(), 3, "queue depth 3 keeps three");
        assert_eq!(b.stats().rx_dropped, 1);
    }

    #[test]
    fn builder_lengths_are_checked() {
        let (mut a, mut b) = MemPair::lossless();
        let cap = a.frame_capacity();
        assert!(a.tx_frame(|buf| buf.len()), "a full-capacity frame is fine");
        assert!(!a.tx_frame(|_| cap + 1));
        assert!(a.tx_frame(|_| 0), "zero abandons quietly");
        a.flush();
        assert_eq!(drain(&mut b).len(), 1);
        assert_eq!(a.stats().tx_invalid, 1);
    }

    fn run_impaired(seed: u64, imp: Impairments, n: u32) -> Vec<u32> {
        let cfg = MemConfig {
            seed,
            a_to_b: imp,
            queue_depth: 4096,
            tx_ring: 4096,
            ..MemConfig::default()
        };
        let (mut a, mut b) = MemPair::with_config(cfg);
        for i in 0..n {
            assert!(send(&mut a, &i.to_be_bytes()));
        }
        a.flush();
        drain(&mut b)
            .iter()
            .map(|f| u32::from_be_bytes([f[0], f[1], f[2], f[3]]))
            .collect()
    }

    #[test]
    fn impairments_are_seeded_and_repeatable() {
        let imp = Impairments {
            loss: 0.1,
            reorder: 0.1,
            duplicate: 0.1,
        };
        let one = run_impaired(42, imp, 1000);
        let two = run_impaired(42, imp, 1000);
        assert_eq!(one, two, "same seed, same wire");
        assert_ne!(
            one,
            run_impaired(43, imp, 1000),
            "another seed, another wire"
        );

        let mut sorted = one.clone();
        sorted.sort_unstable();
        let dups = sorted.windows(2).filter(|w| w[0] == w[1]).count();
        sorted.dedup();
        let lost = 1000 - sorted.len();
        let reordered = one.windows(2).filter(|w| w[1] < w[0]).count();
        assert!((50..150).contains(&lost), "about 10% lost, got {lost}");
        assert!(
            (50..150).contains(&dups),
            "about 10% duplicated, got {dups}"
        );
        assert!(reordered > 30, "some frames reordered, got {reordered}");
    }

    #[test]
    fn drop_next_loses_exactly_those_frames() {
        let (mut a, mut b) = MemPair::lossless();
        a.drop_next(2);
        for i in 0..4u8 {
            assert!(send(&mut a, &[i]));
        }
        a.flush();
        assert_eq!(drain(&mut b), vec![vec![2], vec![3]]);
        assert_eq!(a.stats().tx_dropped, 2);
        assert_eq!(a.stats().tx_frames, 4);
    }

    #[test]
    fn a_held_back_frame_is_never_stuck() {
        let imp = Impairments {
            reorder: 1.0,
            ..Impairments::default()
        };
        assert_eq!(
            run_impaired(7, imp, 1),
            vec![0],
            "the only frame still arrives"
        );
        assert_eq!(run_impaired(7, imp, 2), vec![1, 0]);
    }

    #[test]
    fn ends_work_from_two_threads() {
        let (mut a, mut b) = MemPair::lossless();
        let t = std::thread::spawn(move || {
            let mut echoed = 0;
            while echoed < 100 {
                let mut frames = Vec::new();
                b.rx_burst(32, |f| frames.push(f.to_vec()));
                for f in &frames {
                    assert!(send(&mut b, f));
                }
                echoed += frames.len();
                b.flush();
            }
        });
        let mut back = 0;
        for i in 0..100u32 {
            assert!(send(&mut a, &i.to_be_bytes()));
            a.flush();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while back < 100 && std::time::Instant::now() < deadline {
            back += a.rx_burst(32, |_| {});
        }
        t.join().unwrap();
        assert_eq!(back, 100);
    }
}
