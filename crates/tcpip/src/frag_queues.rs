//! The reassembly queues both IP families share, with Linux's rules and bounds: what
//! net/ipv4/inet_fragment.c does for both (`inet_frag_find`, `inet_frag_queue_insert`,
//! `inet_frag_kill`) and what net/ipv4/ip_fragment.c and net/ipv6/reassembly.c do alike
//! (`ip_frag_queue` / `ip6_frag_queue`'s length rules, the ECN combination, `ip_expire` /
//! `ip6_frag_expire`), Linux 6.x. A [`Family`] says the rest: a queue's key, how the first
//! fragment's header becomes the datagram's, which counters count (IPv4: `reassembly.rs`,
//! IPv6: `ipv6_frag.rs`).
//!
//! A queue keeps the fragments' payloads back to back in arrival order, so holes cost
//! nothing; when the datagram is whole they are copied in offset order behind the header
//! the family made from the first fragment's. An overlap drops the queue, a duplicate only
//! itself (RFC 5722, as Linux since 4.19). Each family has its own queues, memory bound and
//! timeout, as Linux has an `fqdir` per family.

use crate::util::FlowHashBuilder;
use crate::{Instant, Stats};
use std::collections::HashMap;
use std::hash::Hash;
use std::mem::take;
use std::time::Duration;
use wirespeed_wire::MacAddr;

/// Buffers of ended queues kept for the next ones, so steady fragmented traffic does not
/// allocate.
const SPARES: usize = 4;
/// Table entries kept once every queue is gone: what a flood grew is given back.
const KEEP: usize = 64;
/// RFC 3168 codepoints as Linux ORs them over the fragments (`ip4_frag_ecn`,
/// `ip6_frag_ecn`): 1 << ECN.
const ECN_NOT_ECT: u8 = 1 << 0;
const ECN_CE: u8 = 1 << 3;
const NIL: u32 = u32::MAX;

/// What a family's counters count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FragCount {
    /// A fragment dropped because reassembly is off (a memory bound of 0).
    Off,
    Reassembled,
    Duplicate,
    /// A queue dropped for an overlap.
    Overlap,
    /// A queue dropped for a fragment that contradicts it, or when whole.
    Malformed,
    MemExceeded,
    /// A queue restarted by `ipfrag_max_dist`.
    TooFar,
    Timeout,
}

/// What differs between IPv4 and IPv6 reassembly.
pub(crate) trait Family {
    /// What tells a datagram's fragments from others' (Linux's `frag_v4_compare_key`,
    /// `frag_v6_compare_key`).
    type Key: Copy + Eq + Hash;
    /// The source, for `ipfrag_max_dist`'s per-source fragment counter; None where the
    /// family has no such counter (IPv6, in Linux too).
    fn source(key: &Self::Key) -> Option<u32>;
    /// Writes into `out` (empty) the datagram's header, made from the first fragment's
    /// `head` (everything before its data; `next_header_at`: where in it the field that
    /// named the IPv6 fragment header lies) for `len` bytes of reassembled data, with CE
    /// if a fragment had it (`ce`). False when Linux drops the datagram (too long).
    fn write_header(
        out: &mut Vec<u8>,
        head: &[u8],
        next_header_at: usize,
        len: usize,
        ce: bool,
    ) -> bool;
    /// Counts `what` in this family's counter.
    fn count(stats: &mut Stats, what: FragCount);
}

/// One fragment as the queues see it, whatever its family.
pub(crate) struct Fragment<'a, K> {
    pub(crate) key: K,
    /// Everything before its data: the IPv4 header with its options; the IPv6 fixed
    /// header, the extension headers before the fragment header, and the fragment header.
    pub(crate) head: &'a [u8],
    /// Its data as received (with MF, IPv4's may run past a multiple of 8: those bytes
    /// are cut).
    pub(crate) data: &'a [u8],
    /// Where its data go, in bytes (a multiple of 8).
    pub(crate) offset: u32,
    /// More fragments follow (MF, M).
    pub(crate) more: bool,
    /// Its ECN codepoint.
    pub(crate) ecn: u8,
    /// IPv6: where in `head` the field that named the fragment header lies (Linux's
    /// `nhoff`); IPv4: 0.
    pub(crate) next_header_at: u16,
}

/// The datagram a fragment completed (header first), or the offset-0 fragment of a queue
/// that timed out, with the link-layer facts of that first fragment. Give the buffer back
/// with [`Queues::recycle`].
pub(crate) struct Datagram {
    buf: Vec<u8>,
    pub(crate) src_mac: MacAddr,
    /// Sent to our MAC alone (Linux `PACKET_HOST`), not to a group address.
    pub(crate) to_host: bool,
    /// Where the data after the header start: a reassembled IPv6 datagram's fragmentable
    /// part, whose headers are walked on from there.
    pub(crate) head_len: usize,
    /// IPv6: the field that named the fragment header (now naming what followed it).
    pub(crate) next_header_at: usize,
}

impl Datagram {
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf
    }
}

/// How a queue ended at its deadline.
pub(crate) enum Timeout {
    /// No ICMP: its offset-0 fragment never came, or came to a group address.
    Quiet,
    /// Linux answers with time exceeded about this offset-0 fragment (`ip_expire`,
    /// `ip6_frag_expire`).
    Answer(Datagram),
}

/// 64 blocks of 8 bytes: which are held, and where Linux's "runs" start. A fragment that
/// starts where the highest one ends extends that run, any other starts its own, and one
/// inside a single run is a duplicate (`inet_frag_queue_insert`).
#[derive(Clone, Copy, Default)]
struct Blocks {
    held: u64,
    starts: u64,
}

/// Where one kept fragment's bytes are in `Bufs::data`.
#[derive(Clone, Copy)]
struct Piece {
    off: u32,
    len: u32,
    pos: u32,
}

/// A queue's buffers, reused through `Queues::spares`.
#[derive(Default)]
struct Bufs {
    /// Payloads as received, back to back in arrival order.
    data: Vec<u8>,
    pieces: Vec<Piece>,
    blocks: Vec<Blocks>,
    /// The offset-0 fragment's head ([`Fragment::head`]).
    head: Vec<u8>,
}

impl Bufs {
    fn clear(&mut self) {
        self.data.clear();
        self.pieces.clear();
        self.blocks.clear();
        self.head.clear();
    }

    fn capacity_bytes(&self) -> usize {
        self.data.capacity()
            + self.pieces.capacity() * size_of::<Piece>()
            + self.blocks.capacity() * size_of::<Blocks>()
            + self.head.capacity()
    }
}

/// What placing a fragment came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fit {
    Kept,
    Duplicate,
    Overlap,
    /// It contradicts the queue (Linux `discard_qp`, `discard_fq`).
    Malformed,
}

/// One datagram being reassembled (Linux `struct ipq`, `struct frag_queue`).
struct Queue<K> {
    key: K,
    bufs: Bufs,
    /// End of the fragment that ends highest (Linux `fragments_tail`).
    tail_end: u32,
    /// The datagram's length once its last fragment is in; the highest end before that.
    len: u32,
    /// Payload bytes held (Linux `meat`): the datagram is whole when it reaches `len`.
    meat: u32,
    first_in: bool,
    last_in: bool,
    /// The offset-0 fragment: its head (`bufs.head`) becomes the datagram's header, and an
    /// ICMP error quotes it, so its payload as received is kept at `first_pos`.
    first_pos: u32,
    first_len: u32,
    first_next_header_at: u16,
    first_mac: MacAddr,
    first_to_host: bool,
    /// OR of `1 << ECN` over the fragments (Linux `ipq->ecn`, `frag_queue->ecn`).
    ecn: u8,
    /// The source's fragment count when this queue last took one (`ipfrag_max_dist`).
    rid: u32,
    deadline: Instant,
    /// Bytes this queue adds to `Queues::mem`.
    charged: usize,
    /// Neighbours in the deadline list.
    prev: u32,
    next: u32,
}

impl<K> Queue<K> {
    fn new(key: K, bufs: Bufs, deadline: Instant) -> Queue<K> {
        Queue {
            key,
            bufs,
            tail_end: 0,
            len: 0,
            meat: 0,
            first_in: false,
            last_in: false,
            first_pos: 0,
            first_len: 0,
            first_next_header_at: 0,
            first_mac: MacAddr::ZERO,
            first_to_host: false,
            ecn: 0,
            rid: 0,
            deadline,
            charged: 0,
            prev: NIL,
            next: NIL,
        }
    }

    /// Empties the queue for a fresh start (Linux `ip_frag_reinit`); `rid` stays.
    fn reset(&mut self) {
        self.bufs.clear();
        (self.tail_end, self.len, self.meat, self.ecn) = (0, 0, 0, 0);
        (self.first_in, self.last_in) = (false, false);
    }

    /// The fragment's end after Linux's length rules (a fragment with MF is cut to a
    /// multiple of 8: IPv4's `ip_frag_queue`; IPv6 answered one that is not with a parameter
    /// problem before), or None when it contradicts the queue or is empty.
    fn end_of(&mut self, off: u32, len: u32, more: bool) -> Option<u32> {
        let mut end = off + len;
        if !more {
            if end < self.len || (self.last_in && end != self.len) {
                return None;
            }
            (self.last_in, self.len) = (true, end);
        } else {
            end &= !7;
            if end > self.len {
                if self.last_in {
                    return None;
                }
                self.len = end;
            }
        }
        (end != off).then_some(end)
    }

    /// Linux's `inet_frag_queue_insert`, on 8-byte blocks: fragment offsets are multiples
    /// of 8, and so are the ends of all but the last fragment.
    fn insert(&mut self, off: u32, end: u32) -> Fit {
        let (b0, b1) = (off as usize / 8, (end as usize).div_ceil(8));
        let empty = self.bufs.pieces.is_empty();
        if empty || self.tail_end < end {
            if !empty && off < self.tail_end {
                return Fit::Overlap;
            }
            let extends_run = !empty && off == self.tail_end;
            self.tail_end = end;
            mark(&mut self.bufs.blocks, b0, b1, !extends_run);
            return Fit::Kept;
        }
        match scan(&self.bufs.blocks, b0, b1) {
            (0, _) => {
                mark(&mut self.bufs.blocks, b0, b1, true);
                Fit::Kept
            }
            (held, false) if held == b1 - b0 => Fit::Duplicate,
            _ => Fit::Overlap,
        }
    }

    /// Stores a fragment `insert` kept: its data as received (the bytes past `end` are
    /// used only to quote the first fragment).
    fn keep(&mut self, end: u32, frag: &Fragment<'_, K>, (mac, to_host): (MacAddr, bool)) {
        let (off, pos) = (frag.offset, self.bufs.data.len() as u32);
        self.bufs.data.extend_from_slice(frag.data);
        let len = end - off;
        self.bufs.pieces.push(Piece { off, len, pos });
        self.meat += len;
        self.ecn |= 1 << (frag.ecn & 3);
        if off == 0 {
            self.bufs.head.clear();
            self.bufs.head.extend_from_slice(frag.head);
            (self.first_pos, self.first_len) = (pos, frag.data.len() as u32);
            self.first_next_header_at = frag.next_header_at;
            (self.first_mac, self.first_to_host) = (mac, to_host);
            self.first_in = true;
        }
    }

    fn complete(&self) -> bool {
        self.first_in && self.last_in && self.meat == self.len
    }

    /// Linux's `ip_frag_reasm` / `ip6_frag_reasm` into `out`: false for mixed ECN
    /// (RFC 3168 5.3) or what the family refuses (a datagram too long).
    fn assemble<F: Family<Key = K>>(&mut self, out: &mut Vec<u8>) -> bool {
        let mixed_ecn = self.ecn & ECN_NOT_ECT != 0 && self.ecn != ECN_NOT_ECT;
        out.clear();
        let nh_at = self.first_next_header_at as usize;
        let (len, ce) = (self.len as usize, self.ecn & ECN_CE != 0);
        if mixed_ecn || !F::write_header(out, &self.bufs.head, nh_at, len, ce) {
            return false;
        }
        // Pieces are disjoint and tile [0, len): in offset order they are the payload.
        self.bufs.pieces.sort_unstable_by_key(|p| p.off);
        for p in &self.bufs.pieces {
            let at = p.pos as usize;
            out.extend_from_slice(&self.bufs.data[at..at + p.len as usize]);
        }
        true
    }

    /// The offset-0 fragment as it came, for the ICMP error (`quote` is the buffer to use).
    fn first_fragment(&self, mut quote: Vec<u8>) -> Datagram {
        let at = self.first_pos as usize;
        quote.clear();
        quote.extend_from_slice(&self.bufs.head);
        quote.extend_from_slice(&self.bufs.data[at..at + self.first_len as usize]);
        Datagram {
            buf: quote,
            src_mac: self.first_mac,
            to_host: self.first_to_host,
            head_len: self.bufs.head.len(),
            next_header_at: self.first_next_header_at as usize,
        }
    }
}

/// Calls `f(word, mask)` for each word of the blocks [b0, b1).
fn each_word(b0: usize, b1: usize, mut f: impl FnMut(usize, u64)) {
    let mut b = b0;
    while b < b1 {
        let (w, lo) = (b / 64, b % 64);
        let hi = (b1 - w * 64).min(64);
        f(w, (u64::MAX >> (64 - (hi - lo))) << lo);
        b = w * 64 + hi;
    }
}

/// Marks the blocks [b0, b1) held; `new_run`: a run starts at b0.
fn mark(blocks: &mut Vec<Blocks>, b0: usize, b1: usize, new_run: bool) {
    if blocks.len() < b1.div_ceil(64) {
        blocks.resize(b1.div_ceil(64), Blocks::default());
    }
    each_word(b0, b1, |w, m| blocks[w].held |= m);
    if new_run {
        blocks[b0 / 64].starts |= 1 << (b0 % 64);
    }
}

/// How many of the blocks [b0, b1) are held, and whether a run starts inside, after b0.
fn scan(blocks: &[Blocks], b0: usize, b1: usize) -> (usize, bool) {
    let (mut held, mut split) = (0, false);
    each_word(b0, b1, |w, m| {
        let x = blocks.get(w).copied().unwrap_or_default();
        let after_b0 = if w == b0 / 64 {
            m & !(1 << (b0 % 64))
        } else {
            m
        };
        held += (x.held & m).count_ones() as usize;
        split |= x.starts & after_b0 != 0;
    });
    (held, split)
}

/// What Linux keeps per source in its `inet_peer` for reassembly: the fragment counter of
/// `ipfrag_max_dist`. Held while the source has a queue.
struct Peer {
    rid: u32,
    queues: u32,
}

/// One family's reassembly queues (Linux's `fqdir`): its bounds, queues and memory.
pub(crate) struct Queues<F: Family> {
    high_thresh: usize,
    timeout: Duration,
    max_dist: u32,
    slots: Vec<Queue<F::Key>>,
    free: Vec<u32>,
    index: HashMap<F::Key, u32, FlowHashBuilder>,
    peers: HashMap<u32, Peer, FlowHashBuilder>,
    /// Oldest and newest queue. A deadline is set to now + timeout when its queue is made or
    /// restarted, and the queue goes to the tail, so the list is in deadline order.
    head: u32,
    tail: u32,
    /// Bytes held (Linux `fqdir->mem`): each queue's cost and buffers.
    mem: usize,
    spares: Vec<Bufs>,
    /// Where a datagram is assembled; lent out in a `Datagram`.
    out: Vec<u8>,
}

impl<F: Family> Queues<F> {
    /// What a queue costs besides its buffers, as Linux charges `sizeof(struct ipq)`: the
    /// struct, its index and source entries.
    pub(crate) const QUEUE_COST: usize = size_of::<Queue<F::Key>>() + 64;

    /// Queues bounded by `high_thresh` bytes (0: reassembly off), each kept `timeout` from
    /// its first fragment, restarted by `max_dist` (0: off); `seed` keys the index's hash.
    /// Allocates nothing until the first fragment.
    pub(crate) fn new(high_thresh: usize, timeout: Duration, max_dist: u32, seed: u64) -> Self {
        let h = FlowHashBuilder { seed };
        Queues {
            high_thresh,
            timeout,
            max_dist,
            slots: Vec::new(),
            free: Vec::new(),
            index: HashMap::with_hasher(h),
            peers: HashMap::with_hasher(h),
            head: NIL,
            tail: NIL,
            mem: 0,
            spares: Vec::new(),
            out: Vec::new(),
        }
    }

    /// The earliest queue deadline.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.slots.get(self.head as usize).map(|q| q.deadline)
    }

    /// Takes one fragment for us (its headers already checked), `from` a MAC, to ours
    /// alone or not; returns the datagram it completed. Run `expire` first: a queue past
    /// its deadline takes nothing more (Linux's timer has fired).
    pub(crate) fn input(
        &mut self,
        now: Instant,
        frag: &Fragment<'_, F::Key>,
        from: (MacAddr, bool),
        stats: &mut Stats,
    ) -> Option<Datagram> {
        if self.high_thresh == 0 {
            F::count(stats, FragCount::Off);
            return None;
        }
        // `inet_frag_find`: over the threshold every fragment is refused, even one that
        // would complete a queue; memory comes back as queues complete or time out.
        if self.mem > self.high_thresh {
            F::count(stats, FragCount::MemExceeded);
            return None;
        }
        let i = self.find_or_create(now, frag.key);
        if self.too_far(i) {
            self.restart(i, now);
            F::count(stats, FragCount::TooFar);
        }
        let fit = self.place(i, frag, from);
        let dropped = match fit {
            Fit::Kept if self.slots[i].complete() => return self.reassemble(i, stats),
            Fit::Kept => return None,
            Fit::Duplicate => FragCount::Duplicate,
            Fit::Overlap => FragCount::Overlap,
            Fit::Malformed => FragCount::Malformed,
        };
        F::count(stats, dropped);
        if fit != Fit::Duplicate {
            self.kill(i);
        }
        None
    }

    /// Ends the oldest queue if its deadline has come (Linux `ip_expire`, `ip6_frag_expire`).
    pub(crate) fn expire(&mut self, now: Instant, stats: &mut Stats) -> Option<Timeout> {
        let i = self.head as usize;
        if self.slots.get(i)?.deadline > now {
            return None;
        }
        F::count(stats, FragCount::Timeout);
        let q = &self.slots[i];
        let t = if q.first_in && q.first_to_host {
            Timeout::Answer(q.first_fragment(take(&mut self.out)))
        } else {
            Timeout::Quiet
        };
        self.kill(i);
        Some(t)
    }

    /// Takes back the buffer of a `Datagram`.
    pub(crate) fn recycle(&mut self, d: Datagram) {
        self.out = d.buf;
    }

    /// Linux `inet_frag_find`: the queue of the fragment's key, made if new.
    fn find_or_create(&mut self, now: Instant, key: F::Key) -> usize {
        if let Some(&i) = self.index.get(&key) {
            return i as usize;
        }
        let bufs = self.spares.pop().unwrap_or_default();
        let q = Queue::new(key, bufs, now.add(self.timeout));
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = q;
                i as usize
            }
            None => {
                self.slots.push(q);
                self.slots.len() - 1
            }
        };
        self.index.insert(key, i as u32);
        self.link_tail(i);
        // Linux looks the source's inet_peer up only while `ipfrag_max_dist` is on.
        if let Some(src) = F::source(&key).filter(|_| self.max_dist != 0) {
            let peer = self.peers.entry(src).or_insert(Peer { rid: 0, queues: 0 });
            peer.queues += 1;
        }
        self.recharge(i);
        i
    }

    /// Linux `ip_frag_too_far`: more than `max_dist` fragments from this source arrived
    /// since this queue last took one, so it has probably lost some.
    fn too_far(&mut self, i: usize) -> bool {
        let q = &mut self.slots[i];
        let Some(peer) = F::source(&q.key).and_then(|s| self.peers.get_mut(&s)) else {
            return false;
        };
        if self.max_dist == 0 {
            return false;
        }
        peer.rid = peer.rid.wrapping_add(1);
        let start = std::mem::replace(&mut q.rid, peer.rid);
        !q.bufs.pieces.is_empty() && peer.rid.wrapping_sub(start) > self.max_dist
    }

    /// Linux `ip_frag_reinit`: the queue starts over, empty, with a new deadline.
    fn restart(&mut self, i: usize, now: Instant) {
        self.slots[i].reset();
        self.slots[i].deadline = now.add(self.timeout);
        self.unlink(i);
        self.link_tail(i);
        self.recharge(i);
    }

    /// Linux `ip_frag_queue` / `ip6_frag_queue` from their length checks to the insertion.
    fn place(&mut self, i: usize, frag: &Fragment<'_, F::Key>, from: (MacAddr, bool)) -> Fit {
        let q = &mut self.slots[i];
        let off = frag.offset;
        let Some(end) = q.end_of(off, frag.data.len() as u32, frag.more) else {
            return Fit::Malformed;
        };
        let fit = q.insert(off, end);
        if fit == Fit::Kept {
            q.keep(end, frag, from);
            self.recharge(i);
        }
        fit
    }

    /// The queue is whole: the datagram, or nothing when Linux's reassembly fails.
    fn reassemble(&mut self, i: usize, stats: &mut Stats) -> Option<Datagram> {
        let ok = self.slots[i].assemble::<F>(&mut self.out);
        let q = &self.slots[i];
        let d = Datagram {
            buf: Vec::new(),
            src_mac: q.first_mac,
            to_host: q.first_to_host,
            head_len: self.out.len().saturating_sub(q.len as usize),
            next_header_at: q.first_next_header_at as usize,
        };
        self.kill(i);
        if !ok {
            F::count(stats, FragCount::Malformed);
            return None;
        }
        F::count(stats, FragCount::Reassembled);
        Some(Datagram {
            buf: take(&mut self.out),
            ..d
        })
    }

    /// Removes a queue (Linux `inet_frag_kill`), keeping its buffers for the next ones.
    fn kill(&mut self, i: usize) {
        self.unlink(i);
        let q = &mut self.slots[i];
        self.index.remove(&q.key);
        self.mem -= q.charged;
        let mut bufs = take(&mut q.bufs);
        if let Some(src) = F::source(&q.key) {
            if let Some(p) = self.peers.get_mut(&src) {
                p.queues -= 1;
                if p.queues == 0 {
                    self.peers.remove(&src);
                }
            }
        }
        if self.spares.len() < SPARES {
            bufs.clear();
            self.spares.push(bufs);
        }
        self.free.push(i as u32);
        if self.index.is_empty() {
            self.shrink();
        }
    }

    /// No queue is left: tables a flood grew go back to `KEEP` entries.
    fn shrink(&mut self) {
        self.slots.clear();
        self.free.clear();
        self.slots.shrink_to(KEEP);
        self.free.shrink_to(KEEP);
        self.index.shrink_to(KEEP);
        self.peers.shrink_to(KEEP);
    }

    fn recharge(&mut self, i: usize) {
        let q = &mut self.slots[i];
        let cost = Self::QUEUE_COST + q.bufs.capacity_bytes();
        self.mem = self.mem - q.charged + cost;
        q.charged = cost;
    }

    fn link_tail(&mut self, i: usize) {
        (self.slots[i].prev, self.slots[i].next) = (self.tail, NIL);
        match self.tail {
            NIL => self.head = i as u32,
            t => self.slots[t as usize].next = i as u32,
        }
        self.tail = i as u32;
    }

    fn unlink(&mut self, i: usize) {
        let (p, n) = (self.slots[i].prev, self.slots[i].next);
        match p {
            NIL => self.head = n,
            p => self.slots[p as usize].next = n,
        }
        match n {
            NIL => self.tail = p,
            n => self.slots[n as usize].prev = p,
        }
    }
}

// A child module, so that the tests reach the queues' internals.
#[cfg(test)]
mod tests;
