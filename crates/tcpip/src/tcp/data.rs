//! Received data in the synchronized states: in-order bytes into the receive ring,
//! out-of-order ranges beside it (`sack.rs`), delayed and immediate ACKs.

use super::sack::{held_already, held_fin, insert_ooo, insert_ooo_fin, merge_ooo};
use super::tcb::Owner;
use super::{Ctx, Tcp, TcpState};
use crate::{Error, EventKind, Instant};
use wirespeed_wire::SeqNumber;

impl Tcp {
    /// Takes the segment's payload. Returns whether its FIN is next in sequence; None when
    /// the connection was reset for data nobody will read.
    pub(super) fn data_input(
        &mut self,
        cx: &mut Ctx<'_>,
        idx: u32,
        seq: SeqNumber,
        payload: &[u8],
        has_fin: bool,
    ) -> Option<bool> {
        if self.unreadable(cx, idx, seq, payload) {
            return None;
        }
        let t = &self.conns[idx as usize];
        if !matches!(
            t.state,
            TcpState::Established | TcpState::FinWait1 | TcpState::FinWait2
        ) {
            self.after_peer_fin(cx, idx, seq, payload, has_fin);
            return Some(false);
        }
        let taken = self.take_payload(cx, idx, seq, payload);
        let fin = seq.add(payload.len());
        let fin_next = has_fin && self.take_fin(cx, idx, fin, payload.is_empty(), taken.whole);
        Some(taken.fin_next || fin_next)
    }

    /// Whether the segment brings new data nobody will read: past the peer's FIN it is
    /// ignored, unanswered, as Linux ignores it; otherwise after close() (or straddling
    /// the peer's FIN) it resets the connection, as Linux does.
    #[inline]
    fn unreadable(&mut self, cx: &mut Ctx<'_>, idx: u32, seq: SeqNumber, payload: &[u8]) -> bool {
        let t = &self.conns[idx as usize];
        let new_data = !payload.is_empty() && seq.add(payload.len()).gt(t.rcv_nxt);
        if !new_data {
            return false;
        }
        if t.fin_received && !seq.lt(t.rcv_nxt) {
            cx.stats.tcp_data_after_fin += 1;
            return true;
        }
        if t.owner == Owner::Released || t.fin_received {
            cx.stats.tcp_data_after_close += 1;
            self.abort_conn(cx, idx, Error::Aborted);
            return true;
        }
        false
    }

    /// Takes the payload of a segment in a state that receives data: what arrived before
    /// is reported (D-SACK), the rest goes in order into the ring or beside it out of
    /// order, as far as the ring has room.
    #[inline]
    fn take_payload(
        &mut self,
        cx: &mut Ctx<'_>,
        idx: u32,
        seq: SeqNumber,
        payload: &[u8],
    ) -> Taken {
        let mut taken = Taken {
            whole: true,
            fin_next: false,
        };
        if payload.is_empty() {
            return taken;
        }
        let t = &mut self.conns[idx as usize];
        let gen = t.gen;
        let skip = t.rcv_nxt.diff(seq).max(0) as usize;
        if skip > 0 {
            // Some or all of it arrived before: report what was duplicated, at once
            // (the sender is waiting to learn whether its retransmission was needed).
            t.dsack = Some((seq, seq.add(skip.min(payload.len()))));
            t.ack_now = true;
            self.mark_dirty(idx, gen);
        }
        let t = &mut self.conns[idx as usize];
        if skip >= payload.len() {
            cx.stats.tcp_duplicate_segments += 1;
            t.ack_now = true;
            self.mark_dirty(idx, gen);
            return taken;
        }
        let data = &payload[skip..];
        let seg_seq = seq.add(skip);
        let off = seg_seq.diff(t.rcv_nxt) as usize;
        let room = t.recv.free();
        if off >= room {
            taken.whole = false;
            t.ack_now = true;
            self.mark_dirty(idx, gen);
            return taken;
        }
        taken.whole = data.len() <= room - off;
        let data = &data[..data.len().min(room - off)];
        if off == 0 {
            taken.fin_next = self.take_in_order(cx, idx, data);
        } else if !self.take_out_of_order(cx, idx, seg_seq, data) {
            taken.whole = false;
        }
        taken
    }

    /// Data at RCV.NXT: into the ring, with the out-of-order ranges it joins, and
    /// acknowledged at once or after the delayed-ACK timeout. Returns whether a FIN held
    /// out of order is next now.
    #[inline]
    fn take_in_order(&mut self, cx: &mut Ctx<'_>, idx: u32, data: &[u8]) -> bool {
        let t = &mut self.conns[idx as usize];
        let gen = t.gen;
        let had_ooo = t.ooo_len > 0;
        t.recv.write_at(t.recv.len(), data);
        t.recv.extend(data.len());
        t.rcv_nxt = t.rcv_nxt.add(data.len());
        let fin_next = merge_ooo(t);
        t.unacked_segs = t.unacked_segs.saturating_add(1);
        if had_ooo || t.unacked_segs >= 2 {
            t.ack_now = true;
            self.mark_dirty(idx, gen);
        } else if t.delack_at == Instant::NEVER {
            t.delack_at = cx.now.add(cx.cfg.delayed_ack);
        }
        self.conn_event(cx, idx, EventKind::Readable);
        fin_next
    }

    /// Data beyond a gap: held as an out-of-order range and answered with a duplicate ACK
    /// (one per segment). False when there was no room to hold it.
    fn take_out_of_order(
        &mut self,
        cx: &mut Ctx<'_>,
        idx: u32,
        seg_seq: SeqNumber,
        data: &[u8],
    ) -> bool {
        let t = &mut self.conns[idx as usize];
        cx.stats.tcp_ooo_segments += 1;
        if let Some(dup) = held_already(t, seg_seq, data.len()) {
            t.dsack = Some(dup);
        }
        let held = insert_ooo(t, seg_seq, data);
        if !held {
            cx.stats.tcp_ooo_dropped += 1;
        }
        if t.ack_now {
            t.dup_acks_owed = t.dup_acks_owed.saturating_add(1).min(8);
        }
        t.ack_now = true;
        let gen = t.gen;
        self.mark_dirty(idx, gen);
        held
    }

    /// The segment's FIN, at sequence `fin` (`alone`: the segment has no payload; `whole`:
    /// all its payload was taken). Returns whether it is next in sequence.
    fn take_fin(
        &mut self,
        cx: &mut Ctx<'_>,
        idx: u32,
        fin: SeqNumber,
        alone: bool,
        whole: bool,
    ) -> bool {
        let t = &mut self.conns[idx as usize];
        if fin == t.rcv_nxt {
            return true;
        }
        // Beyond a gap: held as an out-of-order range, so the duplicate ACK
        // SACKs it and the FIN is taken when the gap fills (Linux's
        // tcp_data_queue_ofo). A FIN alone must be inside the window.
        let fits = !alone || (fin.diff(t.rcv_nxt).max(0) as usize) < t.recv.free();
        if whole && fits && fin.gt(t.rcv_nxt) {
            let held = held_fin(t) == Some(fin);
            if insert_ooo_fin(t, fin) && held {
                // A repeat: a duplicate, its FIN included (tcp_dsack_set).
                let start = match t.dsack {
                    Some((s, e)) if e == fin => s,
                    _ => fin,
                };
                t.dsack = Some((start, fin.add(1)));
            }
            if alone {
                // One duplicate ACK per out-of-order segment, as for data.
                cx.stats.tcp_ooo_segments += 1;
                if t.ack_now {
                    t.dup_acks_owed = t.dup_acks_owed.saturating_add(1).min(8);
                }
            }
        }
        t.ack_now = true;
        let gen = t.gen;
        self.mark_dirty(idx, gen);
        false
    }

    /// A segment in a state that takes no more data, the peer's FIN received: old data
    /// or the FIN again get an ACK.
    fn after_peer_fin(
        &mut self,
        cx: &mut Ctx<'_>,
        idx: u32,
        seq: SeqNumber,
        payload: &[u8],
        has_fin: bool,
    ) {
        let t = &mut self.conns[idx as usize];
        let gen = t.gen;
        if !payload.is_empty() && t.fin_received && seq.lt(t.rcv_nxt) {
            // Old data after the peer's FIN (a zero-window probe, a retransmission): a
            // duplicate ACK reporting it, as Linux's tcp_data_queue answers a retransmit.
            cx.stats.tcp_duplicate_segments += 1;
            t.dsack = Some((seq, seq.add(payload.len())));
            t.ack_now = true;
            self.mark_dirty(idx, gen);
        } else if has_fin && seq.add(payload.len()) == t.rcv_nxt.sub(1) && t.fin_received {
            // A retransmitted FIN: re-ACK it (and restart TIME_WAIT).
            t.ack_now = true;
            if t.state == TcpState::TimeWait {
                t.keep_at = cx.now.add(cx.cfg.time_wait);
            }
            self.mark_dirty(idx, gen);
        }
    }
}

/// What taking a segment's payload did.
struct Taken {
    /// The whole payload was taken, in order or not: only then is its FIN.
    whole: bool,
    /// A FIN held out of order is next in sequence now.
    fin_next: bool,
}
