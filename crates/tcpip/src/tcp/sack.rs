//! Selective acknowledgement, both directions: the scoreboard of what the peer SACKed
//! (RFC 2018, RFC 6675) and the next hole to retransmit; the out-of-order ranges we hold
//! (which our SACK blocks report).

use super::{Tcb, MAX_OOO, MAX_SACKED};
use wirespeed_wire::{SeqNumber, TcpOptions};

/// Prunes the scoreboard below SND.UNA and merges the ACK's SACK blocks (those inside
/// (SND.UNA, SND.MAX]). Returns whether the scoreboard holds any range afterwards.
pub(super) fn sack_update(t: &mut Tcb, o: &TcpOptions) -> bool {
    let (una, max) = (t.snd_una, t.snd_max);
    let mut n = 0;
    for i in 0..t.sacked_len as usize {
        let (s, e) = t.sacked[i];
        if e.gt(una) {
            t.sacked[n] = (s.max(una), e);
            n += 1;
        }
    }
    t.sacked_len = n as u8;
    for &(l, r) in &o.sack_blocks[..(o.sack_count as usize).min(4)] {
        let (l, r) = (SeqNumber(l).max(una), SeqNumber(r));
        if !l.lt(r) || r.gt(max) {
            continue; // empty, stale or beyond what we sent: ignore (RFC 2883 D-SACK too)
        }
        let mut start = l;
        let mut end = r;
        let mut kept = [(SeqNumber(0), SeqNumber(0)); MAX_SACKED];
        let mut k = 0;
        for &(s, e) in &t.sacked[..t.sacked_len as usize] {
            if e.lt(start) || s.gt(end) {
                kept[k] = (s, e);
                k += 1;
            } else {
                start = start.min(s);
                end = end.max(e);
            }
        }
        if k == MAX_SACKED {
            continue; // table full: this block is forgotten
        }
        let pos = kept[..k]
            .iter()
            .position(|&(s, _)| s.gt(start))
            .unwrap_or(k);
        for i in (pos..k).rev() {
            kept[i + 1] = kept[i];
        }
        kept[pos] = (start, end);
        t.sacked = kept;
        t.sacked_len = (k + 1) as u8;
    }
    t.sacked_len > 0
}

/// The next hole to retransmit: the first sequence at or above `rexmit_next` (and SND.UNA)
/// that is neither SACKed nor beyond the highest SACKed byte, and how much of it fits in
/// one segment before the next SACKed range.
pub(super) fn next_hole(t: &Tcb) -> Option<(SeqNumber, usize)> {
    let ranges = &t.sacked[..t.sacked_len as usize];
    let high = ranges.iter().map(|&(_, e)| e).reduce(|a, b| a.max(b))?;
    let mut s = t.rexmit_next.max(t.snd_una);
    for &(a, e) in ranges {
        if s.ge(a) && s.lt(e) {
            s = e;
        }
    }
    if !s.lt(high) {
        return None;
    }
    let next_sacked = ranges
        .iter()
        .map(|&(a, _)| a)
        .filter(|a| a.gt(s))
        .reduce(|a, b| a.min(b))
        .unwrap_or(high);
    let buffered_end = t.snd_una.add(t.send.len());
    let limit = next_sacked.min(buffered_end);
    let len = (limit.diff(s).max(0) as usize).min(t.seg_limit() as usize);
    (len > 0).then_some((s, len))
}

/// Whether an ACK reports SACKed data above SND.UNA (RFC 6675's duplicate-ACK test). A
/// receiver that SACKs counts as sending duplicate ACKs even when its window moves between
/// them, which Linux's does while its application keeps reading; without this, every loss
/// waits for the RTO.
pub(super) fn sacks_above(t: &Tcb, o: &TcpOptions) -> bool {
    t.sack_ok
        && o.sack_blocks[..(o.sack_count as usize).min(4)]
            .iter()
            .any(|&(_, right)| SeqNumber(right).gt(t.snd_una))
}

/// Records an out-of-order range (data already written into the ring by the caller is not
/// assumed: this writes it). Returns false when the range table is full, or the data goes
/// past a FIN we hold (a confused peer's: Linux's tcp_fin drops it then).
pub(super) fn insert_ooo(t: &mut Tcb, seq: SeqNumber, data: &[u8]) -> bool {
    let end = seq.add(data.len());
    if held_fin(t).is_some_and(|f| end.gt(f)) || !insert_range(t, seq, end) {
        return false;
    }
    let off = seq.diff(t.rcv_nxt) as usize;
    t.recv.write_at(t.recv.len() + off, data);
    true
}

/// Records the peer's FIN at `fin`, beyond RCV.NXT, as an out-of-order range of its one
/// sequence number, as Linux's tcp_data_queue_ofo queues it: our SACK blocks then cover it.
/// Returns whether it is held: not when the range table is full, nor before data we hold (a
/// confused peer's).
pub(super) fn insert_ooo_fin(t: &mut Tcb, fin: SeqNumber) -> bool {
    if held_fin(t) == Some(fin) {
        t.ooo_last = fin;
        return true;
    }
    let beyond = t.ooo[..t.ooo_len as usize].iter().any(|&(_, e)| e.gt(fin));
    if beyond || !insert_range(t, fin, fin.add(1)) {
        return false;
    }
    t.ooo_fin = true;
    true
}

/// The peer's FIN held out of order: the last sequence number of the last range.
pub(super) fn held_fin(t: &Tcb) -> Option<SeqNumber> {
    let last = (t.ooo_len as usize).checked_sub(1)?;
    t.ooo_fin.then(|| t.ooo[last].1.sub(1))
}

/// Merges [`start`, `end`) into the out-of-order ranges, kept sorted; it becomes the latest.
fn insert_range(t: &mut Tcb, start: SeqNumber, end: SeqNumber) -> bool {
    let seq = start;
    let (mut start, mut end) = (start, end);
    // Merge with every overlapping or adjacent range.
    let mut kept: [(SeqNumber, SeqNumber); MAX_OOO] = [(SeqNumber(0), SeqNumber(0)); MAX_OOO];
    let mut n = 0;
    for &(s, e) in &t.ooo[..t.ooo_len as usize] {
        if e.lt(start) || s.gt(end) {
            kept[n] = (s, e);
            n += 1;
        } else {
            start = start.min(s);
            end = end.max(e);
        }
    }
    if n == MAX_OOO {
        return false;
    }
    // Keep sorted by start.
    let pos = kept[..n]
        .iter()
        .position(|&(s, _)| s.gt(start))
        .unwrap_or(n);
    for i in (pos..n).rev() {
        kept[i + 1] = kept[i];
    }
    kept[pos] = (start, end);
    t.ooo = kept;
    t.ooo_len = (n + 1) as u8;
    t.ooo_last = seq;
    true
}

/// The part of `len` bytes at `seq` that an out-of-order range already holds (the first such
/// overlap), for a D-SACK.
pub(super) fn held_already(t: &Tcb, seq: SeqNumber, len: usize) -> Option<(SeqNumber, SeqNumber)> {
    let end = seq.add(len);
    t.ooo[..t.ooo_len as usize].iter().find_map(|&(s, e)| {
        let (lo, hi) = (seq.max(s), end.min(e));
        hi.gt(lo).then_some((lo, hi))
    })
}

/// After in-order data advanced `rcv_nxt`, absorbs out-of-order ranges it now reaches.
/// Returns true when that reached the peer's out-of-order FIN: RCV.NXT stops before it (the
/// caller takes the FIN).
pub(super) fn merge_ooo(t: &mut Tcb) -> bool {
    if held_fin(t).is_some_and(|f| f.lt(t.rcv_nxt)) {
        // In-order data ran past it (a confused peer): Linux drops that FIN too.
        t.ooo_fin = false;
    }
    while t.ooo_len > 0 {
        let (s, e) = t.ooo[0];
        if s.gt(t.rcv_nxt) {
            break;
        }
        if t.ooo_fin && t.ooo_len == 1 {
            let fin = e.sub(1);
            t.recv.extend(fin.diff(t.rcv_nxt) as usize);
            t.rcv_nxt = fin;
            t.ooo_len = 0;
            t.ooo_fin = false;
            return true;
        }
        if e.gt(t.rcv_nxt) {
            let n = e.diff(t.rcv_nxt) as usize;
            t.recv.extend(n);
            t.rcv_nxt = e;
        }
        t.ooo.copy_within(1..t.ooo_len as usize, 0);
        t.ooo_len -= 1;
    }
    false
}
