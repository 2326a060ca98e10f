//! Multi-buffer AF_XDP (`XDP_USE_SG`): frames longer than one UMEM chunk.
//!
//! Receiving, the kernel splits such a frame over several rx descriptors, each in a buffer
//! taken from the fill ring (256 bytes after the buffer's address, `XDP_PACKET_HEADROOM`),
//! every one but the last flagged `XDP_PKT_CONTD`. The stack wants one contiguous `&[u8]`:
//! - In copy mode the UMEM is unaligned ([`RxLayout::Strip`]): the fill addresses are not
//!   chunks but a strip, `room` = chunk - 256 bytes apart, so a piece's bytes end exactly where
//!   the next fill address's piece begins. The kernel takes fill addresses in ring order and
//!   we give them back in the order they came (rx order), so the ring keeps the strip's
//!   order, and a frame's pieces lie end to end unless the frame wraps from the strip's end
//!   to its start. Such a frame is lent straight from the UMEM, its pieces checked end to end
//!   by address ([`end_to_end`]); nothing is assumed. In copy mode the kernel writes only a
//!   piece's bytes, never the 256 bytes in front of it (which hold the previous piece's tail):
//!   it would write XDP metadata there, which our program never adds.
//! - Otherwise (the wrap, a frame whose pieces span two bursts, zero-copy's aligned chunks)
//!   [`RxGather`] copies the pieces into one per-socket buffer.
//!
//! Either way a frame longer than `max_frame` is dropped whole and counted in
//! `Stats::rx_oversized`, never truncated. A frame that fits one descriptor is lent straight
//! from the UMEM, as on a socket without multi-buffer.
//!
//! Sending, the transmit chunks are grouped into [`TxRuns`]: runs of consecutive chunks, each
//! long enough for the largest frame. `tx_frame` lends a whole run as one contiguous buffer
//! (no copy) and posts one descriptor per chunk the frame covers, chained with
//! `XDP_PKT_CONTD`; the run is free again once the kernel has completed every one of them
//! (completions are matched by address, so their order does not matter).

use super::{Mapping, XskSocket};
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

    /// Pieces of a frame have been taken and its last has not.
    pub(super) fn in_frame(&self) -> bool {
        self.in_frame
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

/// Where a socket's receive buffers lie in its UMEM, and how a received descriptor's address
/// leads back to the fill-ring address it was given as. See the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RxLayout {
    /// One chunk of `frame_size` bytes per fill address (an aligned UMEM, or one frame per
    /// chunk): a descriptor's buffer is its chunk.
    Chunks { frame_size: u32 },
    /// Fill addresses `room` bytes apart in an unaligned UMEM: a descriptor carries its fill
    /// address in the low 48 bits.
    Strip { room: u32 },
}

impl RxLayout {
    /// The layout for a socket with chunks of `frame_size` bytes that chains frames over them
    /// (`chained`) or not, in zero-copy mode or copy mode. Chained frames in copy mode get a
    /// strip; zero-copy keeps whole chunks, since what a driver does with unaligned buffers
    /// varies.
    pub(super) fn new(frame_size: u32, chained: bool, zero_copy: bool) -> RxLayout {
        if chained && !zero_copy {
            RxLayout::Strip {
                room: frame_size - super::XDP_PACKET_HEADROOM as u32,
            }
        } else {
            RxLayout::Chunks { frame_size }
        }
    }

    /// Whether the UMEM must be registered unaligned for this layout.
    pub(super) fn unaligned(self) -> bool {
        matches!(self, RxLayout::Strip { .. })
    }

    /// The `k`-th receive buffer's fill address.
    pub(super) fn fill_addr(self, k: u32) -> u64 {
        match self {
            RxLayout::Chunks { frame_size } => u64::from(k) * u64::from(frame_size),
            RxLayout::Strip { room } => u64::from(k) * u64::from(room),
        }
    }

    /// The fill address a received descriptor's buffer was given as.
    pub(super) fn returned(self, raw: u64) -> u64 {
        match self {
            RxLayout::Chunks { frame_size } => {
                super::offload::rx_addr(raw) & !(u64::from(frame_size) - 1)
            }
            RxLayout::Strip { .. } => raw & libc::XSK_UNALIGNED_BUF_ADDR_MASK,
        }
    }
}

/// The frame whose first descriptor is `desc(from)`, when its pieces (up to `desc(to - 1)`)
/// lie end to end in the UMEM and it ends by `to` within `max` bytes: (UMEM offset of its
/// first byte, its length, the descriptors it took). None: gather it by copying.
pub(super) fn end_to_end(
    desc: impl Fn(u32) -> libc::xdp_desc,
    from: u32,
    to: u32,
    max: usize,
) -> Option<(u64, usize, u32)> {
    let start = super::offload::rx_addr(desc(from).addr);
    let mut end = start;
    for j in from..to {
        let d = desc(j);
        if super::offload::rx_addr(d.addr) != end {
            return None;
        }
        end += u64::from(d.len);
        if end - start > max as u64 {
            return None;
        }
        if d.options & libc::XDP_PKT_CONTD == 0 {
            return Some((start, (end - start) as usize, j - from + 1));
        }
    }
    None
}

/// The rx descriptors `first..first + n` of a multi-buffer socket: calls `f` for each
/// complete frame and pushes every descriptor's fill address onto `addrs` (for the fill ring),
/// in rx order. Returns the frames delivered.
#[allow(clippy::too_many_arguments)]
pub(super) fn rx_gathered<F: FnMut(&[u8])>(
    gather: &mut RxGather,
    rx: &Consumer<libc::xdp_desc>,
    umem: &Mapping,
    layout: RxLayout,
    stats: &mut Stats,
    first: u32,
    n: u32,
    addrs: &mut Vec<u64>,
    f: &mut F,
) -> usize {
    let mut delivered = 0;
    let desc = |i: u32| rx.read(first.wrapping_add(i));
    let mut i = 0;
    while i < n {
        let d = desc(i);
        let continued = d.options & libc::XDP_PKT_CONTD != 0;
        if continued && !gather.in_frame() {
            if let Some((at, len, pieces)) = end_to_end(desc, i, n, gather.max) {
                if let Some(frame) = super::rx_frame(umem, at, len as u32) {
                    stats.rx_frames += 1;
                    stats.rx_bytes += len as u64;
                    f(frame);
                    delivered += 1;
                    addrs.extend((i..i + pieces).map(|j| layout.returned(desc(j).addr)));
                    i += pieces;
                    continue;
                }
            }
        }
        let piece = super::rx_frame(umem, d.addr, d.len);
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
                stats.rx_gathered += 1;
                stats.rx_bytes += frame.len() as u64;
                f(frame);
                delivered += 1;
            }
            Step::Oversized => stats.rx_oversized += 1,
            Step::Invalid => stats.rx_dropped += 1,
        }
        addrs.push(layout.returned(d.addr));
        i += 1;
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

    fn desc(addr: u64, len: u32, options: u32) -> libc::xdp_desc {
        libc::xdp_desc { addr, len, options }
    }

    #[test]
    fn the_strip_puts_fill_addresses_a_pieces_room_apart_and_returns_them_from_the_low_bits() {
        let strip = RxLayout::new(4096, true, false);
        assert_eq!(strip, RxLayout::Strip { room: 3840 });
        assert!(strip.unaligned());
        for (chained, zero_copy) in [(false, false), (true, true), (false, true)] {
            let layout = RxLayout::new(4096, chained, zero_copy);
            assert_eq!(layout, RxLayout::Chunks { frame_size: 4096 });
            assert!(!layout.unaligned());
        }
        assert_eq!(strip.fill_addr(0), 0);
        assert_eq!(strip.fill_addr(2), 7680);
        // An unaligned descriptor: fill address 7680, its bytes 256 after it.
        assert_eq!(strip.returned(7680 | (256 << 48)), 7680);
        let chunks = RxLayout::Chunks { frame_size: 4096 };
        assert_eq!(chunks.fill_addr(2), 8192);
        assert_eq!(chunks.returned(8192 + 256), 8192, "aligned: the chunk");
        assert_eq!(chunks.returned(8192 | (256 << 48)), 8192);
    }

    #[test]
    fn a_frame_is_lent_only_when_its_pieces_lie_end_to_end_within_the_burst_and_the_limit() {
        let c = libc::XDP_PKT_CONTD;
        let at = |fill: u64| fill | (256 << 48);
        // Three pieces from consecutive strip addresses: 3840 + 3840 + 1334 = 9014 bytes.
        let frame = [
            desc(at(0), 3840, c),
            desc(at(3840), 3840, c),
            desc(at(7680), 1334, 0),
            desc(at(11520), 60, 0),
        ];
        let get = |d: &[libc::xdp_desc]| {
            let d = d.to_vec();
            move |i: u32| d[i as usize]
        };
        assert_eq!(end_to_end(get(&frame), 0, 4, 9014), Some((256, 9014, 3)));
        assert_eq!(end_to_end(get(&frame), 3, 4, 9014), Some((11776, 60, 1)));
        assert_eq!(end_to_end(get(&frame), 0, 4, 9013), None, "over the limit");
        assert_eq!(
            end_to_end(get(&frame), 0, 2, 9014),
            None,
            "its end is in the next burst"
        );
        // The strip wrapped: the second piece starts at the strip's first address.
        let wrapped = [desc(at(7680), 3840, c), desc(at(0), 100, 0)];
        assert_eq!(end_to_end(get(&wrapped), 0, 2, 9014), None);
        // Aligned chunks: each piece 256 bytes into its own chunk, a gap between them.
        let chunks = [desc(4096 + 256, 3840, c), desc(8192 + 256, 100, 0)];
        assert_eq!(end_to_end(get(&chunks), 0, 2, 9014), None);
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
