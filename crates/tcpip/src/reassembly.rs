//! IPv4 reassembly with Linux's rules and bounds: net/ipv4/ip_fragment.c (`ip_defrag`,
//! `ip_frag_queue`, `ip_frag_too_far`, `ip_frag_reinit`, `ip_frag_reasm`, `ip_expire`) and
//! net/ipv4/inet_fragment.c (`inet_frag_find`, `inet_frag_queue_insert`), Linux 6.x.
//!
//! One queue per (source, protocol, ident): the destination is always ours, since fragments
//! for anyone else are dropped before they get here. A queue keeps the fragments' payloads
//! back to back in arrival order, so holes cost nothing; when the datagram is whole they are
//! copied in offset order behind the first fragment's header, and the datagram goes through
//! `Stack::ipv4_input` as if it had never been fragmented. An overlap drops the queue, a
//! duplicate only itself (RFC 5722, as Linux since 4.19). Bounds: `Config::ipfrag_*`.

use crate::util::FlowHashBuilder;
use crate::{Config, Instant, Stack, Stats};
use std::collections::HashMap;
use std::mem::take;
use std::time::Duration;
use wirespeed_wire::icmpv4::error_type;
use wirespeed_wire::{checksum, ipv4, Ipv4Addr, Ipv4Packet, Ipv4Repr, MacAddr};

/// ICMP time exceeded code "fragment reassembly time exceeded" (RFC 792; Linux
/// `ICMP_EXC_FRAGTIME`).
const FRAG_TIME: u8 = 1;
/// What a queue costs besides its buffers, as Linux charges `sizeof(struct ipq)`: the
/// struct, its index and source entries.
const QUEUE_COST: usize = size_of::<Queue>() + 64;
/// Buffers of ended queues kept for the next ones, so steady fragmented traffic does not
/// allocate.
const SPARES: usize = 4;
/// Table entries kept once every queue is gone: what a flood grew is given back.
const KEEP: usize = 64;
/// RFC 3168 codepoints as Linux ORs them over the fragments (`ip4_frag_ecn`): 1 << ECN.
const ECN_NOT_ECT: u8 = 1 << 0;
const ECN_CE: u8 = 1 << 3;
const NIL: u32 = u32::MAX;

/// The datagram a fragment completed (header first), or the offset-0 fragment of a queue
/// that timed out, with the link-layer facts of that first fragment. Give the buffer back
/// with [`Reassembly::recycle`].
pub(crate) struct Datagram {
    buf: Vec<u8>,
    pub(crate) src_mac: MacAddr,
    /// Sent to our MAC alone (Linux `PACKET_HOST`), not to a group address.
    pub(crate) to_host: bool,
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
    /// Linux answers with ICMP time exceeded about this offset-0 fragment (`ip_expire`).
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

/// A queue's buffers, reused through `Reassembly::spares`.
#[derive(Default)]
struct Bufs {
    /// Payloads as received, back to back in arrival order.
    data: Vec<u8>,
    pieces: Vec<Piece>,
    blocks: Vec<Blocks>,
}

impl Bufs {
    fn clear(&mut self) {
        self.data.clear();
        self.pieces.clear();
        self.blocks.clear();
    }

    fn capacity_bytes(&self) -> usize {
        self.data.capacity()
            + self.pieces.capacity() * size_of::<Piece>()
            + self.blocks.capacity() * size_of::<Blocks>()
    }
}

/// What placing a fragment came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fit {
    Kept,
    Duplicate,
    Overlap,
    /// It contradicts the queue (Linux `discard_qp`).
    Malformed,
}

/// One datagram being reassembled (Linux `struct ipq`).
struct Queue {
    key: u64,
    src: Ipv4Addr,
    bufs: Bufs,
    /// End of the fragment that ends highest (Linux `fragments_tail`).
    tail_end: u32,
    /// The datagram's length once its last fragment is in; the highest end before that.
    len: u32,
    /// Payload bytes held (Linux `meat`): the datagram is whole when it reaches `len`.
    meat: u32,
    first_in: bool,
    last_in: bool,
    /// The offset-0 fragment: its header (options included) becomes the datagram's, and an
    /// ICMP error quotes it, so its payload as received is kept at `first_pos`.
    header: [u8; 60],
    header_len: u8,
    first_pos: u32,
    first_len: u32,
    first_mac: MacAddr,
    first_to_host: bool,
    /// OR of `1 << ECN` over the fragments (Linux `ipq->ecn`).
    ecn: u8,
    /// The source's fragment count when this queue last took one (`ipfrag_max_dist`).
    rid: u32,
    deadline: Instant,
    /// Bytes this queue adds to `Reassembly::mem`.
    charged: usize,
    /// Neighbours in the deadline list.
    prev: u32,
    next: u32,
}

impl Queue {
    fn new(key: u64, src: Ipv4Addr, bufs: Bufs, deadline: Instant) -> Queue {
        Queue {
            key,
            src,
            bufs,
            tail_end: 0,
            len: 0,
            meat: 0,
            first_in: false,
            last_in: false,
            header: [0; 60],
            header_len: 0,
            first_pos: 0,
            first_len: 0,
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
    /// multiple of 8), or None when it contradicts the queue or is empty.
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

    /// Stores a fragment `insert` kept: its payload as received (the bytes past `end` are
    /// used only to quote the first fragment).
    fn keep(&mut self, off: u32, end: u32, pkt: &Ipv4Packet<&[u8]>, mac: MacAddr, to_host: bool) {
        let pos = self.bufs.data.len() as u32;
        let payload = pkt.payload();
        self.bufs.data.extend_from_slice(payload);
        let len = end - off;
        self.bufs.pieces.push(Piece { off, len, pos });
        self.meat += len;
        self.ecn |= 1 << (pkt.dscp_ecn() & 3);
        if off == 0 {
            let h = pkt.header();
            self.header[..h.len()].copy_from_slice(h);
            self.header_len = h.len() as u8;
            (self.first_pos, self.first_len) = (pos, payload.len() as u32);
            (self.first_mac, self.first_to_host) = (mac, to_host);
            self.first_in = true;
        }
    }

    fn complete(&self) -> bool {
        self.first_in && self.last_in && self.meat == self.len
    }

    /// Linux's `ip_frag_reasm` into `out`: false for mixed ECN (RFC 3168 5.3) or a datagram
    /// over 65535 bytes.
    fn assemble(&mut self, out: &mut Vec<u8>) -> bool {
        let hl = self.header_len as usize;
        let total = hl + self.len as usize;
        let mixed_ecn = self.ecn & ECN_NOT_ECT != 0 && self.ecn != ECN_NOT_ECT;
        if mixed_ecn || total > u16::MAX as usize {
            return false;
        }
        out.clear();
        out.extend_from_slice(&self.header[..hl]);
        // Pieces are disjoint and tile [0, len): in offset order they are the payload.
        self.bufs.pieces.sort_unstable_by_key(|p| p.off);
        for p in &self.bufs.pieces {
            let at = p.pos as usize;
            out.extend_from_slice(&self.bufs.data[at..at + p.len as usize]);
        }
        finish_header(&mut out[..hl], total, self.ecn);
        true
    }

    /// The offset-0 fragment as it came, for the ICMP error (`quote` is the buffer to use).
    fn first_fragment(&self, mut quote: Vec<u8>) -> Datagram {
        let hl = self.header_len as usize;
        let at = self.first_pos as usize;
        quote.clear();
        quote.extend_from_slice(&self.header[..hl]);
        quote.extend_from_slice(&self.bufs.data[at..at + self.first_len as usize]);
        Datagram {
            buf: quote,
            src_mac: self.first_mac,
            to_host: self.first_to_host,
        }
    }
}

/// The first fragment's header made the datagram's (Linux `ip_frag_reasm`): its whole
/// length, no fragment bits, CE if a fragment had it (RFC 3168), a new checksum.
fn finish_header(h: &mut [u8], total: usize, ecn: u8) {
    h[ipv4::field::TOTAL_LEN].copy_from_slice(&(total as u16).to_be_bytes());
    // Linux keeps DF when the largest fragment had it; only a forwarder would care.
    h[ipv4::field::FLAGS_FRAG].fill(0);
    if ecn & ECN_CE != 0 {
        h[ipv4::field::DSCP_ECN] |= 3;
    }
    h[ipv4::field::CHECKSUM].fill(0);
    let c = checksum::checksum(h);
    h[ipv4::field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
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

/// The reassembly queues of one stack.
pub(crate) struct Reassembly {
    high_thresh: usize,
    timeout: Duration,
    max_dist: u32,
    slots: Vec<Queue>,
    free: Vec<u32>,
    index: HashMap<u64, u32, FlowHashBuilder>,
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

impl Reassembly {
    /// Allocates nothing until the first fragment.
    pub(crate) fn new(cfg: &Config) -> Reassembly {
        let h = FlowHashBuilder {
            seed: cfg.secret ^ 0x0f4a_9e11,
        };
        Reassembly {
            high_thresh: cfg.ipfrag_high_thresh,
            timeout: cfg.ipfrag_time,
            max_dist: cfg.ipfrag_max_dist,
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

    /// Takes one fragment for us (its checksum, source and destination already checked);
    /// returns the datagram it completed. Run `expire` first: a queue past its deadline
    /// takes nothing more (Linux's timer has fired).
    pub(crate) fn input(
        &mut self,
        now: Instant,
        pkt: &Ipv4Packet<&[u8]>,
        (mac, to_host): (MacAddr, bool),
        stats: &mut Stats,
    ) -> Option<Datagram> {
        if self.high_thresh == 0 {
            stats.ip_fragments_dropped += 1;
            return None;
        }
        // `inet_frag_find`: over the threshold every fragment is refused, even one that
        // would complete a queue; memory comes back as queues complete or time out.
        if self.mem > self.high_thresh {
            stats.ip_frag_mem_exceeded += 1;
            return None;
        }
        let i = self.find_or_create(now, pkt);
        if self.too_far(i) {
            self.restart(i, now);
            stats.ip_frag_too_far += 1;
        }
        match self.place(i, pkt, mac, to_host) {
            Fit::Kept if self.slots[i].complete() => self.reassemble(i, stats),
            Fit::Kept => None,
            Fit::Duplicate => {
                stats.ip_frag_duplicate += 1;
                None
            }
            Fit::Overlap => {
                stats.ip_frag_overlap_dropped += 1;
                self.kill(i);
                None
            }
            Fit::Malformed => {
                stats.ip_frag_malformed += 1;
                self.kill(i);
                None
            }
        }
    }

    /// Ends the oldest queue if its deadline has come (Linux `ip_expire`).
    pub(crate) fn expire(&mut self, now: Instant, stats: &mut Stats) -> Option<Timeout> {
        let i = self.head as usize;
        if self.slots.get(i)?.deadline > now {
            return None;
        }
        stats.ip_frag_timeout += 1;
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

    /// Linux `ip_find`: the queue of the fragment's (source, protocol, ident), made if new.
    fn find_or_create(&mut self, now: Instant, pkt: &Ipv4Packet<&[u8]>) -> usize {
        let src = pkt.src();
        let proto = u8::from(pkt.protocol()) as u64;
        let key = (src.to_u32() as u64) << 32 | (pkt.ident() as u64) << 8 | proto;
        if let Some(&i) = self.index.get(&key) {
            return i as usize;
        }
        let bufs = self.spares.pop().unwrap_or_default();
        let q = Queue::new(key, src, bufs, now.add(self.timeout));
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
        let peer = self
            .peers
            .entry(src.to_u32())
            .or_insert(Peer { rid: 0, queues: 0 });
        peer.queues += 1;
        self.recharge(i);
        i
    }

    /// Linux `ip_frag_too_far`: more than `max_dist` fragments from this source arrived
    /// since this queue last took one, so it has probably lost some.
    fn too_far(&mut self, i: usize) -> bool {
        let q = &mut self.slots[i];
        let Some(peer) = self.peers.get_mut(&q.src.to_u32()) else {
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

    /// Linux `ip_frag_queue` from its length checks to the insertion.
    fn place(&mut self, i: usize, pkt: &Ipv4Packet<&[u8]>, mac: MacAddr, to_host: bool) -> Fit {
        let q = &mut self.slots[i];
        let off = pkt.frag_offset() as u32;
        let Some(end) = q.end_of(off, pkt.payload().len() as u32, pkt.more_frags()) else {
            return Fit::Malformed;
        };
        let fit = q.insert(off, end);
        if fit == Fit::Kept {
            q.keep(off, end, pkt, mac, to_host);
            self.recharge(i);
        }
        fit
    }

    /// The queue is whole: the datagram, or nothing when Linux's `ip_frag_reasm` fails.
    fn reassemble(&mut self, i: usize, stats: &mut Stats) -> Option<Datagram> {
        let ok = self.slots[i].assemble(&mut self.out);
        let q = &self.slots[i];
        let (src_mac, to_host) = (q.first_mac, q.first_to_host);
        self.kill(i);
        if !ok {
            stats.ip_frag_malformed += 1;
            return None;
        }
        stats.ip_frag_reassembled += 1;
        Some(Datagram {
            buf: take(&mut self.out),
            src_mac,
            to_host,
        })
    }

    /// Removes a queue (Linux `inet_frag_kill`), keeping its buffers for the next ones.
    fn kill(&mut self, i: usize) {
        self.unlink(i);
        let q = &mut self.slots[i];
        self.index.remove(&q.key);
        self.mem -= q.charged;
        let mut bufs = take(&mut q.bufs);
        let src = q.src.to_u32();
        if let Some(p) = self.peers.get_mut(&src) {
            p.queues -= 1;
            if p.queues == 0 {
                self.peers.remove(&src);
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
        let cost = QUEUE_COST + q.bufs.capacity_bytes();
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

impl Stack {
    /// A fragment for us, checked like any datagram: queued, and the datagram it completes
    /// goes through `ipv4_input` as if never fragmented (Linux `ip_local_deliver`). It
    /// carries the first fragment's link-layer facts, as Linux's reassembled skb does.
    pub(crate) fn ipv4_fragment(
        &mut self,
        src_mac: MacAddr,
        to_host: bool,
        pkt: &Ipv4Packet<&[u8]>,
    ) {
        let now = self.now;
        self.expire_fragments(now);
        let from = (src_mac, to_host);
        if let Some(d) = self.frag.input(now, pkt, from, &mut self.stats) {
            self.ipv4_input(d.src_mac, d.to_host, d.bytes());
            self.frag.recycle(d);
        }
    }

    /// Ends the reassembly queues whose time is up, answering with ICMP time exceeded where
    /// Linux does.
    pub(crate) fn expire_fragments(&mut self, now: Instant) {
        while let Some(t) = self.frag.expire(now, &mut self.stats) {
            if let Timeout::Answer(first) = t {
                self.answer_timeout(&first);
                self.frag.recycle(first);
            }
        }
    }

    /// ICMP "fragment reassembly time exceeded" about the offset-0 fragment; Linux sends
    /// none without a route back (`icmp_route_lookup`).
    fn answer_timeout(&mut self, first: &Datagram) {
        let Ok(pkt) = Ipv4Packet::new_checked(first.bytes()) else {
            return;
        };
        let Ok(ip) = Ipv4Repr::parse_fragment(&pkt) else {
            return;
        };
        if self.next_hop(ip.src.into()).is_some() {
            let ty = error_type::TIME_EXCEEDED;
            self.send_icmp_error(first.src_mac, &ip, first.bytes(), ty, FRAG_TIME, 0);
        }
    }
}

// A child module, so that the tests reach the queues' internals.
#[cfg(test)]
#[path = "tests/reassembly_queues.rs"]
mod tests;
