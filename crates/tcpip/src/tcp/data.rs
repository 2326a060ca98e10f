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
        let now = cx.now;
        let gen = self.conns[idx as usize].gen;
        let t = &mut self.conns[idx as usize];
        let mut fin_in_order = false;
        let new_data = !payload.is_empty() && seq.add(payload.len()).gt(t.rcv_nxt);
        if new_data && t.fin_received && !seq.lt(t.rcv_nxt) {
            // Wholly past the peer's FIN: ignored, unanswered, as Linux ignores it.
            cx.stats.tcp_data_after_fin += 1;
            return None;
        }
        if new_data && (t.owner == Owner::Released || t.fin_received) {
            // Nobody will read it: reset, as Linux does for data after close() (and for data
            // that straddles the peer's FIN).
            cx.stats.tcp_data_after_close += 1;
            self.abort_conn(cx, idx, Error::Aborted);
            return None;
        }
        let t = &mut self.conns[idx as usize];
        if matches!(
            t.state,
            TcpState::Established | TcpState::FinWait1 | TcpState::FinWait2
        ) {
            // Whether the whole payload was taken, in order or not: only then is its FIN.
            let mut whole = true;
            if !payload.is_empty() {
                let skip = t.rcv_nxt.diff(seq).max(0) as usize;
                if skip > 0 {
                    // Some or all of it arrived before: report what was duplicated, at once
                    // (the sender is waiting to learn whether its retransmission was needed).
                    t.dsack = Some((seq, seq.add(skip.min(payload.len()))));
                    t.ack_now = true;
                    self.mark_dirty(idx, gen);
                }
                let t = &mut self.conns[idx as usize];
                if skip < payload.len() {
                    let data = &payload[skip..];
                    let seg_seq = seq.add(skip);
                    let off = seg_seq.diff(t.rcv_nxt) as usize;
                    let room = t.recv.free();
                    if off < room {
                        whole = data.len() <= room - off;
                        let data = &data[..data.len().min(room - off)];
                        if off == 0 {
                            let had_ooo = t.ooo_len > 0;
                            t.recv.write_at(t.recv.len(), data);
                            t.recv.extend(data.len());
                            t.rcv_nxt = t.rcv_nxt.add(data.len());
                            fin_in_order = merge_ooo(t);
                            t.unacked_segs = t.unacked_segs.saturating_add(1);
                            if had_ooo || t.unacked_segs >= 2 {
                                t.ack_now = true;
                                self.mark_dirty(idx, gen);
                            } else if t.delack_at == Instant::NEVER {
                                t.delack_at = now.add(cx.cfg.delayed_ack);
                            }
                            self.conn_event(cx, idx, EventKind::Readable);
                        } else {
                            cx.stats.tcp_ooo_segments += 1;
                            if let Some(dup) = held_already(t, seg_seq, data.len()) {
                                t.dsack = Some(dup);
                            }
                            if !insert_ooo(t, seg_seq, data) {
                                cx.stats.tcp_ooo_dropped += 1;
                                whole = false;
                            }
                            if t.ack_now {
                                t.dup_acks_owed = t.dup_acks_owed.saturating_add(1).min(8);
                            }
                            t.ack_now = true;
                            self.mark_dirty(idx, gen);
                        }
                    } else {
                        whole = false;
                        t.ack_now = true;
                        self.mark_dirty(idx, gen);
                    }
                } else {
                    cx.stats.tcp_duplicate_segments += 1;
                    t.ack_now = true;
                    self.mark_dirty(idx, gen);
                }
            }
            let t = &mut self.conns[idx as usize];
            if has_fin {
                let fin = seq.add(payload.len());
                if fin == t.rcv_nxt {
                    fin_in_order = true;
                } else {
                    // Beyond a gap: held as an out-of-order range, so the duplicate ACK
                    // SACKs it and the FIN is taken when the gap fills (Linux's
                    // tcp_data_queue_ofo). A FIN alone must be inside the window.
                    let fits = !payload.is_empty()
                        || (fin.diff(t.rcv_nxt).max(0) as usize) < t.recv.free();
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
                        if payload.is_empty() {
                            // One duplicate ACK per out-of-order segment, as for data.
                            cx.stats.tcp_ooo_segments += 1;
                            if t.ack_now {
                                t.dup_acks_owed = t.dup_acks_owed.saturating_add(1).min(8);
                            }
                        }
                    }
                    t.ack_now = true;
                    self.mark_dirty(idx, gen);
                }
            }
        } else if !payload.is_empty() && t.fin_received && seq.lt(t.rcv_nxt) {
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
                t.keep_at = now.add(cx.cfg.time_wait);
            }
            self.mark_dirty(idx, gen);
        }
        Some(fin_in_order)
    }
}
