//! Multi-buffer AF_XDP (`XDP_USE_SG`): frames longer than one UMEM chunk.
//!
//! Receiving, the kernel splits such a frame over several rx descriptors, each in a chunk of
//! its own (after the chunk's 256 bytes of headroom), every one but the last flagged
//! `XDP_PKT_CONTD`. [`RxGather`] copies the pieces into one per-socket buffer, so the stack
//! still gets one contiguous `&[u8]`; a frame longer than that buffer is dropped whole and
//! counted in `Stats::rx_oversized`, never truncated. A frame that fits one descriptor is lent
//! straight from the UMEM, as on a socket without multi-buffer.
//!
//! Sending, the transmit chunks are grouped into [`TxRuns`]: runs of consecutive chunks, each
//! long enough for the largest frame. `tx_frame` lends a whole run as one contiguous buffer
//! (no copy) and posts one descriptor per chunk the frame covers, chained with
//! `XDP_PKT_CONTD`; the run is free again once the kernel has completed every one of them
//! (completions are matched by address, so their order does not matter).

use super::{rx_frame, Mapping, XskSocket};
use crate::ring::Consumer;
use crate::Stats;

/// What one rx descriptor meant for the frame it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// A whole frame in this one descriptor: lend it from the UMEM as it is.
    Whole,
    /// A piece of a longer frame; more follow.
    More,
    /// The last piece: [`RxGather::frame`] holds the whole frame.
    Gathered,
    /// The last piece of a frame longer than the buffer: drop it (counted as oversized).
    Oversized,
    /// The last piece of a frame one of whose descriptors pointed outside the UMEM: drop it.
    Invalid,
}

/// Reassembles frames that arrive in several descriptors. See the module docs.
#[derive(Debug)]
pub(super) struct RxGather {
    frame: Vec<u8>,
    max: usize,
    /// Pieces of a frame have been taken and its last piece has not arrived yet (pieces of one
    /// frame may span two bursts).
    in_frame: bool,
    oversized: bool,
    invalid: bool,
}

impl RxGather {
    pub(super) fn new(max: usize) -> RxGather {
        RxGather {
            frame: Vec::with_capacity(max),
            max,
            in_frame: false,
            oversized: false,
            invalid: false,
        }
    }

    /// Takes one descriptor's bytes (`None`: its descriptor pointed outside the UMEM);
    /// `continued` is its `XDP_PKT_CONTD` flag.
    pub(super) fn step(&mut self, piece: Option<&[u8]>, continued: bool) -> Step {
        if !self.in_frame {
            if !continued && piece.is_some() {
                return Step::Whole;
            }
            self.frame.clear();
            self.in_frame = true;
        }
        match piece {
            None => self.invalid = true,
            Some(p) if self.frame.len() + p.len() <= self.max => {
                if !self.oversized {
                    self.frame.extend_from_slice(p);
                }
            }
            Some(_) => {
                self.oversized = true;
                self.frame.clear();
            }
        }
        if continued {
            return Step::More;
        }
        self.in_frame = false;
        let invalid = std::mem::take(&mut self.invalid);
        let oversized = std::mem::take(&mut self.oversized);
        if invalid {
            Step::Invalid
        } else if oversized {
            Step::Oversized
        } else {
            Step::Gathered
        }
    }

    pub(super) fn frame(&self) -> &[u8] {
        &self.frame
    }
}

/// The transmit chunks as runs of `per_run` consecutive chunks. See the module docs.
#[derive(Debug)]
pub(super) struct TxRuns {
    /// UMEM address of the first transmit chunk.
    base: u64,
    chunk: u64,
    per_run: u32,
    free: Vec<u32>,
    /// Descriptors of each run that the kernel has not completed yet.
    in_flight: Vec<u8>,
}

impl TxRuns {
    /// `chunks` transmit chunks of `chunk` bytes from UMEM address `base`, grouped by
    /// `per_run` (1..=255); a remainder shorter than a run is left unused.
    pub(super) fn new(base: u64, chunk: u32, chunks: u32, per_run: u32) -> TxRuns {
        let runs = chunks / per_run.max(1);
        TxRuns {
            base,
            chunk: u64::from(chunk),
            per_run,
            free: (0..runs).rev().collect(),
            in_flight: vec![0; runs as usize],
        }
    }

    pub(super) fn per_run(&self) -> u32 {
        self.per_run
    }

    pub(super) fn take(&mut self) -> Option<u32> {
        self.free.pop()
    }

    /// Returns a run that was taken but never posted.
    pub(super) fn put_back(&mut self, run: u32) {
        self.free.push(run);
    }

    pub(super) fn addr(&self, run: u32) -> u64 {
        self.base + u64::from(run) * u64::from(self.per_run) * self.chunk
    }

    /// Descriptors a frame of `len` bytes needs: one per chunk it touches, or with `head`
    /// bytes of TX metadata in front (an unaligned UMEM), one per `chunk - head` bytes, since
    /// the kernel counts the metadata's room into each descriptor's chunk length.
    pub(super) fn descriptors(&self, head: u64, len: usize) -> u32 {
        (len as u64).div_ceil(self.chunk - head).max(1) as u32
    }

    /// The descriptors of a frame `len` bytes long that starts `head` bytes into run `run`:
    /// (address, length, options). With a head (TX metadata, an unaligned UMEM) the pieces
    /// are `chunk - head` long and straddle chunk boundaries: the kernel wants each, with the
    /// metadata room in front of it, no longer than a chunk.
    pub(super) fn pieces(
        &self,
        run: u32,
        head: u64,
        len: usize,
    ) -> impl Iterator<Item = (u64, u32, u32)> {
        let addr = self.addr(run) + head;
        let n = self.descriptors(head, len);
        let chunk = self.chunk - head;
        (0..n).map(move |i| {
            let off = u64::from(i) * chunk;
            let piece = (len as u64 - off).min(chunk) as u32;
            let options = if i + 1 < n { libc::XDP_PKT_CONTD } else { 0 };
            (addr + off, piece, options)
        })
    }

    /// Run `run` was posted as `descriptors` descriptors.
    pub(super) fn posted(&mut self, run: u32, descriptors: u32) {
        self.in_flight[run as usize] = descriptors as u8;
    }

    /// The kernel completed the descriptor at `addr`; the run is free after its last one.
    /// False for an address that is no descriptor of ours in flight (never expected).
    pub(super) fn completed(&mut self, addr: u64) -> bool {
        let Some(off) = addr.checked_sub(self.base) else {
            return false;
        };
        let run = off / (self.chunk * u64::from(self.per_run));
        let Some(left) = self.in_flight.get_mut(run as usize) else {
            return false;
        };
        if *left == 0 {
            return false;
        }
        *left -= 1;
        if *left == 0 {
            self.free.push(run as u32);
        }
        true
    }

    pub(super) fn free_runs(&self) -> usize {
        self.free.len()
    }
}

/// A socket's multi-buffer state: present only when it binds with `XDP_USE_SG`.
#[derive(Debug)]
pub(super) struct MultiBuffer {
    /// The largest frame either way: the gather buffer's size and the lent tx buffer's.
    pub(super) max_frame: usize,
    pub(super) gather: RxGather,
    pub(super) runs: TxRuns,
}

/// The rx descriptors `first..first + n` of a multi-buffer socket: calls `f` for each
/// complete frame and pushes every descriptor's chunk onto `addrs` (for the fill ring).
/// Returns the frames delivered.
#[allow(clippy::too_many_arguments)]
pub(super) fn rx_gathered<F: FnMut(&[u8])>(
    gather: &mut RxGather,
    rx: &Consumer<libc::xdp_desc>,
    umem: &Mapping,
    chunk_mask: u64,
    stats: &mut Stats,
    first: u32,
    n: u32,
    addrs: &mut Vec<u64>,
    f: &mut F,
) -> usize {
    let mut delivered = 0;
    for i in 0..n {
        let d = rx.read(first.wrapping_add(i));
        let piece = rx_frame(umem, d.addr, d.len);
        let continued = d.options & libc::XDP_PKT_CONTD != 0;
        match gather.step(piece, continued) {
            Step::Whole => {
                if let Some(frame) = piece {
                    stats.rx_frames += 1;
                    stats.rx_bytes += frame.len() as u64;
                    f(frame);
                    delivered += 1;
                }
            }
            Step::More => {}
            Step::Gathered => {
                let frame = gather.frame();
                stats.rx_frames += 1;
                stats.rx_bytes += frame.len() as u64;
                f(frame);
                delivered += 1;
            }
            Step::Oversized => stats.rx_oversized += 1,
            Step::Invalid => stats.rx_dropped += 1,
        }
        addrs.push(super::offload::rx_addr(d.addr) & chunk_mask);
    }
    delivered
}

impl XskSocket {
    /// `tx_frame` on a multi-buffer socket: lends a run of chunks, posts one descriptor per
    /// chunk the frame covers.
    pub(super) fn tx_frame_chained<F: FnOnce(&mut [u8]) -> usize>(&mut self, f: F) -> bool {
        let Some(multi) = self.multi.as_mut() else {
            return false;
        };
        if multi.runs.free_runs() == 0 {
            self.reclaim();
        }
        let Some(multi) = self.multi.as_mut() else {
            return false;
        };
        let (max_frame, per_run) = (multi.max_frame, multi.runs.per_run());
        let Some(run) = multi.runs.take() else {
            self.stats.tx_ring_full += 1;
            return false;
        };
        let addr = multi.runs.addr(run);
        let Some(slot) = self.tx.reserve(per_run) else {
            multi.runs.put_back(run);
            self.stats.tx_ring_full += 1;
            return false;
        };
        // The frame lies after its metadata (offload.rs), contiguous over the run's chunks.
        let head = self.tx_head();
        let len = f(self.umem_mut(addr + head, max_frame));
        let valid = len > 0 && len <= max_frame;
        let request = if valid {
            self.tx_options(addr, addr + head, len)
        } else {
            0
        };
        let Some(multi) = self.multi.as_mut() else {
            return false;
        };
        if !valid {
            if len > 0 {
                self.stats.tx_invalid += 1;
            }
            // Give the slots back: they are the last reserved and not yet written.
            self.tx.unreserve(per_run);
            multi.runs.put_back(run);
            return len == 0;
        }
        let used = multi.runs.descriptors(head, len);
        self.tx.unreserve(per_run - used);
        for (i, (addr, piece, mut options)) in multi.runs.pieces(run, head, len).enumerate() {
            if i == 0 {
                options |= request;
            }
            self.tx.write(
                slot.wrapping_add(i as u32),
                libc::xdp_desc {
                    addr,
                    len: piece,
                    options,
                },
            );
        }
        multi.runs.posted(run, used);
        self.tx_queued += 1;
        self.tx_queued_bytes += len as u64;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_descriptor_frame_is_lent_whole_and_chains_are_gathered() {
        let mut g = RxGather::new(10);
        assert_eq!(g.step(Some(b"abc"), false), Step::Whole);
        assert_eq!(g.step(Some(b"abcd"), true), Step::More);
        assert_eq!(g.step(Some(b"efgh"), true), Step::More);
        assert_eq!(g.step(Some(b"ij"), false), Step::Gathered);
        assert_eq!(g.frame(), b"abcdefghij", "exactly the buffer's size fits");
        assert_eq!(
            g.step(Some(b"xyz"), false),
            Step::Whole,
            "next frame is fresh"
        );
        assert_eq!(g.step(Some(b"12"), true), Step::More);
        assert_eq!(g.step(Some(b"3"), false), Step::Gathered);
        assert_eq!(g.frame(), b"123", "the earlier frame's bytes are gone");
    }

    #[test]
    fn an_oversized_or_invalid_chain_is_dropped_whole_and_the_next_frame_is_clean() {
        let mut g = RxGather::new(8);
        assert_eq!(g.step(Some(b"abcdef"), true), Step::More);
        assert_eq!(g.step(Some(b"ghi"), true), Step::More);
        assert_eq!(g.step(Some(b"j"), false), Step::Oversized);
        assert_eq!(g.step(Some(b"ab"), true), Step::More);
        assert_eq!(g.step(Some(b"cd"), false), Step::Gathered);
        assert_eq!(g.frame(), b"abcd");
        assert_eq!(g.step(Some(b"ab"), true), Step::More);
        assert_eq!(g.step(None, true), Step::More);
        assert_eq!(g.step(Some(b"cd"), false), Step::Invalid);
        assert_eq!(g.step(None, false), Step::Invalid, "a lone bad descriptor");
        assert_eq!(g.step(Some(b"ok"), false), Step::Whole);
    }

    #[test]
    fn runs_post_one_descriptor_per_chunk_chained_until_the_last() {
        let runs = TxRuns::new(1 << 20, 4096, 16, 3);
        assert_eq!(runs.addr(0), 1 << 20);
        assert_eq!(runs.addr(2), (1 << 20) + 6 * 4096);
        let c = libc::XDP_PKT_CONTD;
        let base = runs.addr(1);
        assert_eq!(
            runs.pieces(1, 0, 9014).collect::<Vec<_>>(),
            vec![
                (base, 4096, c),
                (base + 4096, 4096, c),
                (base + 8192, 9014 - 8192, 0)
            ]
        );
        assert_eq!(
            runs.pieces(1, 0, 4096).collect::<Vec<_>>(),
            vec![(base, 4096, 0)]
        );
        assert_eq!(runs.descriptors(0, 60), 1);
        assert_eq!(runs.descriptors(0, 4097), 2);
        assert_eq!(runs.descriptors(32, 4064), 1);
        assert_eq!(runs.descriptors(32, 4065), 2);
    }

    #[test]
    fn with_metadata_in_front_the_pieces_straddle_chunks_and_complete_in_their_run() {
        let mut runs = TxRuns::new(1 << 20, 4096, 16, 3);
        let c = libc::XDP_PKT_CONTD;
        let run = runs.take().unwrap();
        let at = runs.addr(run) + 32;
        let pieces: Vec<_> = runs.pieces(run, 32, 9014).collect();
        assert_eq!(
            pieces,
            vec![
                (at, 4064, c),
                (at + 4064, 4064, c),
                (at + 8128, 9014 - 8128, 0)
            ]
        );
        // The last piece ends inside the run (3 chunks hold 32 + 9014 bytes).
        assert!(at + 9014 <= runs.addr(run) + 3 * 4096);
        runs.posted(run, 3);
        let before = runs.free_runs();
        for (addr, _, _) in pieces {
            assert!(runs.completed(addr), "{addr:#x} belongs to run {run}");
        }
        assert_eq!(runs.free_runs(), before + 1);
    }

    #[test]
    fn a_run_is_free_again_after_its_last_completion_in_any_order() {
        // 7 chunks in runs of 3: two runs, the seventh chunk unused.
        let mut runs = TxRuns::new(8192, 4096, 7, 3);
        assert_eq!(runs.free_runs(), 2);
        let a = runs.take().unwrap();
        let b = runs.take().unwrap();
        assert_eq!(runs.take(), None);
        runs.posted(a, 3);
        runs.posted(b, 1);
        let pa: Vec<u64> = runs.pieces(a, 0, 9000).map(|p| p.0).collect();
        assert!(runs.completed(runs.addr(b)));
        assert_eq!(runs.free_runs(), 1, "b's only descriptor completed");
        assert!(runs.completed(pa[2]));
        assert!(runs.completed(pa[0]));
        assert_eq!(runs.free_runs(), 1, "a still has one descriptor in flight");
        assert!(runs.completed(pa[1]));
        assert_eq!(runs.free_runs(), 2);
        assert!(!runs.completed(pa[1]), "a completion twice is refused");
        assert!(!runs.completed(0), "an address below the transmit chunks");
        assert!(!runs.completed(8192 + 6 * 4096), "the unused chunk");
        let again = runs.take().unwrap();
        runs.put_back(again);
        assert_eq!(runs.free_runs(), 2);
    }
}
