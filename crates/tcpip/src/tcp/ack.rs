//! ACK processing in the synchronized states: SND.UNA advances, RTT samples, duplicate
//! ACKs and NewReno/SACK loss recovery (reported to congestion control), and the send
//! window update. Then the segment's data (`data.rs`) and FIN (`closing.rs`).

use super::congestion::CongestionControl;
use super::sack::{sack_update, sacks_above};
use super::tcb::Tcb;
use super::{dur_us, Ctx, Tcp, DUPACK_THRESHOLD};
use crate::{EventKind, Instant};
use wirespeed_wire::tcp::flags;
use wirespeed_wire::{SeqNumber, TcpRepr};

impl Tcp {
    /// A segment that passed the common checks on a synchronized connection (SYN_RECEIVED
    /// completed by now), with its ACK field `ack`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn synchronized_input(
        &mut self,
        cx: &mut Ctx<'_>,
        idx: u32,
        repr: &TcpRepr,
        seq: SeqNumber,
        ack: SeqNumber,
        payload: &[u8],
        has_fin: bool,
    ) {
        let Some(fin_acked) = self.ack_input(cx, idx, repr, seq, ack, payload, has_fin) else {
            return;
        };
        if fin_acked && !self.our_fin_acked(cx, idx) {
            return;
        }
        let Some(fin_in_order) = self.data_input(cx, idx, seq, payload, has_fin) else {
            return;
        };
        if fin_in_order {
            self.fin_input(cx, idx, fin_acked);
        }
        self.schedule(idx);
    }

    /// The ACK field and window of a segment. Returns whether it acknowledged our FIN;
    /// None when the segment is to be dropped (an ACK for data never sent).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn ack_input(
        &mut self,
        cx: &mut Ctx<'_>,
        idx: u32,
        repr: &TcpRepr,
        seq: SeqNumber,
        ack: SeqNumber,
        payload: &[u8],
        has_fin: bool,
    ) -> Option<bool> {
        if self.ack_refused(cx, idx, ack) {
            return None;
        }
        let t = &self.conns[idx as usize];
        let mut fin_acked = false;
        if ack.gt(t.snd_una) {
            fin_acked = self.new_ack(cx, idx, ack);
        } else if is_duplicate_ack(t, repr, ack, payload, has_fin) {
            self.duplicate_ack(cx, idx, repr, ack);
        }
        let t = &mut self.conns[idx as usize];
        // RFC 3168 6.1.2: an echoed mark reduces the window once per window of data, and
        // the next new data says so with CWR.
        if t.ecn && repr.flags & flags::ECE != 0 && !t.in_recovery && t.snd_una.ge(t.ecn_recover) {
            let (flight, mss) = (t.flight(), t.mss);
            t.cc.on_ecn_echo(flight, mss);
            t.ecn_cwr = true;
            t.ecn_recover = t.snd_max;
            cx.stats.tcp_ecn_reductions += 1;
        }
        if t.sack_ok && (t.sacked_len > 0 || repr.options.sack_count > 0) {
            sack_update(t, &repr.options);
        }
        self.window_update(idx, repr, seq, ack);
        Some(fin_acked)
    }

    /// Whether the segment is dropped for its ACK field, with an ACK in answer: one for
    /// data never sent, or one too far behind to be the peer's.
    #[inline]
    fn ack_refused(&mut self, cx: &mut Ctx<'_>, idx: u32, ack: SeqNumber) -> bool {
        let t = &mut self.conns[idx as usize];
        if ack.gt(t.snd_max) {
            // An ACK for data never sent: ACK, drop the segment (RFC 9293 3.10.7.4), as
            // Linux does in every state (the conformance harness, docs/TCPIP.md).
            cx.stats.tcp_bad_ack += 1;
        } else {
            // RFC 5961 5.2: an ACK further behind SND.UNA than the peer can have seen us
            // send (Linux: min(largest window, bytes acknowledged)) gets a challenge ACK,
            // its data dropped: blind data injection guesses the sequence number but not
            // the ACK.
            let behind = t.snd_una.diff(ack);
            if behind <= 0 || behind as u64 <= t.bytes_acked.min(u64::from(t.max_snd_wnd)) {
                return false;
            }
            cx.stats.tcp_challenge_acks += 1;
        }
        t.ack_now = true;
        let gen = t.gen;
        self.mark_dirty(idx, gen);
        true
    }

    /// An ACK that advances SND.UNA: the acknowledged data leaves the send buffer, an RTT
    /// sample is taken, recovery and congestion control learn of it, and the timers
    /// restart. Returns whether it acknowledged our FIN.
    #[inline]
    fn new_ack(&mut self, cx: &mut Ctx<'_>, idx: u32, ack: SeqNumber) -> bool {
        let now = cx.now;
        let (min_rto, max_rto) = (dur_us(cx.cfg.min_rto), dur_us(cx.cfg.max_rto));
        let t = &mut self.conns[idx as usize];
        let gen = t.gen;
        let acked = ack.diff(t.snd_una) as usize;
        let data_acked = acked.min(t.send.len());
        let fin_acked = t.fin_queued && acked > t.send.len();
        t.send.consume(data_acked);
        t.bytes_acked += data_acked as u64;
        t.snd_una = ack;
        if t.snd_nxt.lt(ack) {
            t.snd_nxt = ack;
        }
        if t.rtt_active && ack.gt(t.rtt_seq) {
            let s = now.since(t.rtt_at).as_micros().min(u32::MAX as u128) as u32;
            t.update_rtt(s, min_rto, max_rto);
            t.rtt_active = false;
        }
        t.retries = 0;
        let mss = t.mss;
        if t.in_recovery {
            recovery_ack(t, ack, acked as u32);
        } else {
            t.dupacks = 0;
            t.cc.on_ack(acked as u32, mss, now, t.srtt);
        }
        t.rto_at = if t.snd_max.gt(t.snd_una) {
            now.add_micros(t.rto as u64)
        } else {
            Instant::NEVER
        };
        t.tlp_probes = 0;
        t.tlp_at = if t.snd_max.gt(t.snd_una) {
            now.add_micros(t.pto_us(now, min_rto as u64))
        } else {
            Instant::NEVER
        };
        t.persist = false;
        if data_acked > 0 {
            self.conn_event(cx, idx, EventKind::Writable);
        }
        self.mark_dirty(idx, gen);
        fin_acked
    }

    /// A duplicate ACK: the third enters fast recovery with a fast retransmit; in recovery
    /// each further one releases a retransmission (or inflates the window).
    #[inline]
    fn duplicate_ack(&mut self, cx: &mut Ctx<'_>, idx: u32, repr: &TcpRepr, ack: SeqNumber) {
        let t = &mut self.conns[idx as usize];
        let gen = t.gen;
        t.dupacks = t.dupacks.saturating_add(1);
        let mss = t.mss;
        if t.dupacks == DUPACK_THRESHOLD && !t.in_recovery && ack.gt(t.recover.sub(1)) {
            // Fast retransmit, enter NewReno fast recovery (RFC 6582 3.2 step 2).
            cx.stats.tcp_fast_retransmits += 1;
            let flight = t.flight();
            t.cc.on_fast_retransmit(flight, mss);
            t.recover = t.snd_max;
            t.in_recovery = true;
            t.retransmit_one = true;
            t.rexmit_next = t.snd_una;
            t.rtt_active = false;
            self.mark_dirty(idx, gen);
        } else if t.in_recovery && t.dupacks > DUPACK_THRESHOLD {
            // With a scoreboard, each further duplicate ACK releases one retransmission
            // of a hole (output inflates cwnd instead when no hole is left).
            if t.sack_ok && sack_update(t, &repr.options) {
                t.retransmit_hole = true;
            } else {
                t.cc.on_recovery_dupack(mss);
            }
            self.mark_dirty(idx, gen);
        }
    }

    /// Window update (RFC 9293 3.10.7.4, SND.WL1/WL2 rule).
    #[inline]
    fn window_update(&mut self, idx: u32, repr: &TcpRepr, seq: SeqNumber, ack: SeqNumber) {
        let t = &mut self.conns[idx as usize];
        if !(t.snd_wl1.lt(seq) || (t.snd_wl1 == seq && t.snd_wl2.le(ack))) {
            return;
        }
        let was_zero = t.snd_wnd == 0;
        let w = (repr.window as u32) << t.snd_wscale;
        let grew = w > t.snd_wnd;
        t.set_snd_wnd(w);
        t.snd_wl1 = seq;
        t.snd_wl2 = ack;
        if was_zero && t.snd_wnd > 0 {
            t.persist = false;
            t.persist_backoff = 0;
            if t.snd_max.le(t.snd_una) {
                t.rto_at = Instant::NEVER;
            }
        }
        // A wider window may let held data go (silly-window avoidance waits for one).
        if grew {
            let gen = t.gen;
            self.mark_dirty(idx, gen);
        }
    }
}

/// In fast recovery, an ACK of `acked` new bytes up to `ack`: a full ACK ends recovery
/// (RFC 6582 3.2 step 3); a partial one retransmits the next hole and deflates the window
/// by what was acknowledged.
#[inline]
fn recovery_ack(t: &mut Tcb, ack: SeqNumber, acked: u32) {
    let mss = t.mss;
    if ack.ge(t.recover) {
        t.in_recovery = false;
        t.cc.on_recovery_end(mss);
        t.dupacks = 0;
        return;
    }
    // With SACK, skip what this episode already retransmitted.
    if t.sacked_len > 0 && t.rexmit_next.gt(t.snd_una) {
        t.retransmit_hole = true;
    } else {
        t.retransmit_one = true;
    }
    t.cc.on_partial_ack(acked, mss);
}

/// Whether an ACK at SND.UNA counts as a duplicate (RFC 5681 2): no data, no FIN, data
/// outstanding, the window unchanged (or new SACK information), and not persisting.
#[inline]
fn is_duplicate_ack(
    t: &Tcb,
    repr: &TcpRepr,
    ack: SeqNumber,
    payload: &[u8],
    has_fin: bool,
) -> bool {
    ack == t.snd_una
        && payload.is_empty()
        && !has_fin
        && t.snd_max.gt(t.snd_una)
        && t.snd_wnd != 0
        && !t.persist
        // A lone segment cannot draw duplicate ACKs: Linux counts at most packets_out - 1
        // (tcp_limit_reno_sacked), so only its loss probe or RTO resends it.
        && !t.one_segment_out()
        && (((repr.window as u32) << t.snd_wscale) == t.snd_wnd
            || sacks_above(t, &repr.options))
}
