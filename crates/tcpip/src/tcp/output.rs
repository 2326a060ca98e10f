//! Connection output: SYN and SYN-ACK, data within the send and congestion windows,
//! retransmissions (go-back-N after an RTO, the next hole from the SACK scoreboard, loss
//! and zero-window probes), and pure ACKs. Segments are built in place in the caller's
//! `TxSink` buffer; the payload is copied once, from the send ring.

use super::congestion::CongestionControl;
use super::rtt::karn;
use super::sack::next_hole;
use super::{dur_us, Ctx, Tcb, Tcp, TcpState};
use crate::{Error, Instant, TxSink};
use std::ops::Range;
use wirespeed_wire::ip_options_echo;
use wirespeed_wire::tcp::{fill_checksum, fill_partial_checksum, flags};
use wirespeed_wire::{
    ipv4, IpAddress, IpProtocol, IpRepr, MacAddr, SeqNumber, TcpOptions, TcpRepr,
};

/// Whether a connection on the pending-output list can send now.
pub(crate) enum OutputReady {
    /// Stale entry, or nothing to do (closed): skip it.
    Skip,
    /// The peer's MAC is not known yet: the stack resolves this address first.
    Unrouted(wirespeed_wire::IpAddress),
    Ready,
}

impl Tcp {
    /// Takes the list of connections with output pending; hand it back with
    /// [`Tcp::return_output_list`].
    pub(crate) fn take_output_list(&mut self) -> Vec<(u32, u32)> {
        std::mem::replace(&mut self.dirty, std::mem::take(&mut self.dirty_spare))
    }

    /// Gives the list back; entries from `stopped_at` on (the sink filled up) stay pending.
    pub(crate) fn return_output_list(&mut self, mut list: Vec<(u32, u32)>, stopped_at: usize) {
        if stopped_at < list.len() {
            self.dirty.extend_from_slice(&list[stopped_at..]);
        }
        list.clear();
        self.dirty_spare = list;
    }

    /// Takes entry (`idx`, `gen`) off the pending list and says whether it can send.
    pub(crate) fn output_ready(&mut self, idx: u32, gen: u32) -> OutputReady {
        let Some(t) = self.conns.get_mut(idx as usize) else {
            return OutputReady::Skip;
        };
        if t.gen != gen || !t.in_dirty {
            return OutputReady::Skip;
        }
        t.in_dirty = false;
        if !t.in_use || t.state == TcpState::Closed {
            return OutputReady::Skip;
        }
        match t.mac_at(self.neigh_epoch) {
            Some(_) => OutputReady::Ready,
            None => OutputReady::Unrouted(t.remote_ip),
        }
    }

    /// The stack resolved the peer's (or the gateway's) MAC.
    pub(crate) fn set_peer_mac(&mut self, idx: u32, mac: MacAddr) {
        let epoch = self.neigh_epoch;
        self.conns[idx as usize].set_mac(mac, epoch);
    }

    /// A neighbour's MAC changed: every connection looks its next hop up again before its
    /// next segment (one compare per segment). Only when the epoch wraps, once in 65,535
    /// moves, are the connections walked, so that no old epoch comes round again.
    pub(crate) fn neighbour_moved(&mut self) {
        match self.neigh_epoch.checked_add(1) {
            Some(e) => self.neigh_epoch = e,
            None => {
                self.conns.iter_mut().for_each(Tcb::forget_mac);
                self.neigh_epoch = 1;
            }
        }
    }

    /// The MAC connection `idx` would send to now, without resolving.
    #[cfg(test)]
    pub(crate) fn current_mac(&self, idx: u32) -> Option<MacAddr> {
        self.conns[idx as usize].mac_at(self.neigh_epoch)
    }

    /// The next hop is being resolved: output resumes when [`Tcp::neighbour_resolved`] is called.
    pub(crate) fn wait_for_arp(&mut self, idx: u32) {
        let g = self.conns[idx as usize].gen;
        self.arp_waiting.push((idx, g));
    }

    /// No route to the peer: the connection fails.
    pub(crate) fn abort_unroutable(&mut self, cx: &mut Ctx<'_>, idx: u32) {
        self.abort_conn(cx, idx, Error::NotConnected);
    }

    /// The sink filled up before connection (`idx`, `gen`) finished: it stays pending.
    pub(crate) fn output_blocked(&mut self, idx: u32, gen: u32) {
        if let Some(t) = self.conns.get_mut(idx as usize) {
            if t.gen == gen {
                t.in_dirty = true;
            }
        }
    }

    /// Sends what connection `idx` has to send. False when the sink ran out of buffers.
    /// The stack resolves the next hop first (see [`Tcp::output_ready`]).
    pub(crate) fn output<S: TxSink + ?Sized>(
        &mut self,
        cx: &mut Ctx<'_>,
        idx: u32,
        sink: &mut S,
    ) -> bool {
        let t = &self.conns[idx as usize];
        if !t.in_use {
            return true;
        }
        match t.state {
            TcpState::Closed => true,
            TcpState::SynSent | TcpState::SynReceived => self.output_handshake(cx, idx, sink),
            TcpState::TimeWait => self.output_time_wait(cx, idx, sink),
            _ => self.output_data(cx, idx, sink),
        }
    }

    /// Output while the handshake runs: our SYN or SYN-ACK (once; the retransmission timer
    /// resends it), or the ACK a SYN-RECEIVED connection owes after its SYN-ACK went.
    fn output_handshake<S: TxSink + ?Sized>(
        &mut self,
        cx: &mut Ctx<'_>,
        idx: u32,
        sink: &mut S,
    ) -> bool {
        let now = cx.now;
        let t = &mut self.conns[idx as usize];
        if t.snd_nxt != t.iss && t.ack_now && t.state == TcpState::SynReceived {
            let nxt = ack_seq(t);
            return self.emit(cx, idx, sink, nxt, flags::ACK, 0, 0).is_some();
        }
        if t.snd_nxt != t.iss {
            return true;
        }
        let fl = if t.state == TcpState::SynSent {
            flags::SYN
        } else {
            flags::SYN | flags::ACK
        };
        if !t.rtt_active && t.retries == 0 {
            t.rtt_active = true;
            t.rtt_at = now;
            t.rtt_seq = t.iss;
        }
        let iss = t.iss;
        if self.emit(cx, idx, sink, iss, fl, 0, 0).is_none() {
            return false;
        }
        let t = &mut self.conns[idx as usize];
        t.snd_nxt = t.iss.add(1);
        t.snd_max = t.snd_max.max(t.snd_nxt);
        if t.rto_at == Instant::NEVER {
            t.rto_at = now.add_micros(t.rto as u64);
        }
        self.schedule(idx);
        true
    }

    /// Output in TIME-WAIT: only the ACK that answers a retransmitted FIN.
    fn output_time_wait<S: TxSink + ?Sized>(
        &mut self,
        cx: &mut Ctx<'_>,
        idx: u32,
        sink: &mut S,
    ) -> bool {
        let t = &self.conns[idx as usize];
        if !t.ack_now {
            return true;
        }
        let nxt = ack_seq(t);
        self.emit(cx, idx, sink, nxt, flags::ACK, 0, 0).is_some()
    }

    /// Output of a synchronized connection: up to `max_burst` segments, each the first
    /// thing owed of a retransmission after a timeout (or a probe), the next SACK hole, or
    /// new data; then the ACK owed if nothing carried it.
    #[inline]
    fn output_data<S: TxSink + ?Sized>(
        &mut self,
        cx: &mut Ctx<'_>,
        idx: u32,
        sink: &mut S,
    ) -> bool {
        let mut sent: u16 = 0;
        let max_burst = cx.cfg.max_burst.max(1);
        loop {
            if sent >= max_burst {
                // Yield to the other connections; we are next in line again.
                let g = self.conns[idx as usize].gen;
                self.mark_dirty(idx, g);
                break;
            }
            let step = if self.conns[idx as usize].retransmit_one {
                self.retransmit_first(cx, idx, sink)
            } else if let Some(step) = self.retransmit_hole(cx, idx, sink) {
                step
            } else {
                self.send_new_data(cx, idx, sink, sent)
            };
            match step {
                Step::Sent => sent += 1,
                Step::Again => {}
                Step::Idle => break,
                Step::Full => return false,
                Step::Done => return true,
            }
        }
        self.schedule(idx);
        true
    }

    /// After a retransmission timeout: the first unacknowledged segment again, or, under
    /// the persist timer, a zero-window probe or the silly-window override.
    #[inline]
    fn retransmit_first<S: TxSink + ?Sized>(
        &mut self,
        cx: &mut Ctx<'_>,
        idx: u32,
        sink: &mut S,
    ) -> Step {
        let now = cx.now;
        let t = &mut self.conns[idx as usize];
        t.retransmit_one = false;
        if t.persist && t.snd_wnd > 0 {
            // The persist timer ran out on a window that is open but smaller than
            // silly-window avoidance waits for: the override timeout (RFC 9293
            // 3.8.6.2.1) sends what fits.
            t.persist = false;
            t.sws_override = true;
            return Step::Again;
        }
        let buffered = t.send.len();
        if t.persist {
            return self.zero_window_probe(cx, idx, sink, buffered);
        }
        let una = t.snd_una;
        // Only what was sent: past SND.MAX the peer's window may not reach, and its ACK
        // for such bytes would be one for data never sent.
        let sent_len = (t.snd_max.diff(una).max(0) as usize).min(buffered);
        let len = sent_len.min(t.seg_limit() as usize);
        let fin = t.fin_queued && len == buffered && t.fin_sent();
        if len == 0 && !fin {
            return Step::Again;
        }
        cx.stats.tcp_retransmits += 1;
        karn(t, una);
        let fl =
            flags::ACK | if fin { flags::FIN } else { 0 } | if len > 0 { flags::PSH } else { 0 };
        if self.emit(cx, idx, sink, una, fl, 0, len).is_none() {
            self.conns[idx as usize].retransmit_one = true;
            return Step::Full;
        }
        let t = &mut self.conns[idx as usize];
        t.rto_at = now.add_micros(t.rto as u64);
        t.rexmit_next = t.rexmit_next.max(una.add(len));
        Step::Sent
    }

    /// Zero-window probe, as Linux sends it: no data, SEQ = SND.UNA - 1. The peer must
    /// answer with an ACK carrying its current window, and no sequence space is used, so
    /// the probe cannot confuse either side.
    fn zero_window_probe<S: TxSink + ?Sized>(
        &mut self,
        cx: &mut Ctx<'_>,
        idx: u32,
        sink: &mut S,
        buffered: usize,
    ) -> Step {
        if buffered == 0 {
            return Step::Done;
        }
        let seq = self.conns[idx as usize].snd_una.sub(1);
        if self.emit(cx, idx, sink, seq, flags::ACK, 0, 0).is_none() {
            // No TX buffer: the probe goes on the next transmit.
            self.conns[idx as usize].retransmit_one = true;
            return Step::Full;
        }
        let t = &mut self.conns[idx as usize];
        let backoff = (t.rto as u64) << t.persist_backoff.min(16);
        t.rto_at = cx
            .now
            .add_micros(backoff.min(dur_us(cx.cfg.max_rto) as u64));
        self.schedule(idx);
        Step::Done
    }

    /// In SACK recovery: the next hole of the scoreboard. None when no retransmission of a
    /// hole is owed, or no hole is left below the highest SACK (then recovery inflates the
    /// window as NewReno does and new data may go).
    #[inline]
    fn retransmit_hole<S: TxSink + ?Sized>(
        &mut self,
        cx: &mut Ctx<'_>,
        idx: u32,
        sink: &mut S,
    ) -> Option<Step> {
        let t = &mut self.conns[idx as usize];
        if !t.retransmit_hole {
            return None;
        }
        t.retransmit_hole = false;
        let Some((seq, len)) = next_hole(t) else {
            let mss = t.mss;
            t.cc.on_recovery_dupack(mss);
            return None;
        };
        let off = seq.diff(t.snd_una) as usize;
        cx.stats.tcp_retransmits += 1;
        karn(t, seq);
        cx.stats.tcp_sack_retransmits += 1;
        if self
            .emit(cx, idx, sink, seq, flags::ACK, off, len)
            .is_none()
        {
            self.conns[idx as usize].retransmit_hole = true;
            return Some(Step::Full);
        }
        self.conns[idx as usize].rexmit_next = seq.add(len);
        Some(Step::Sent)
    }

    /// The next segment from SND.NXT, as far as the windows allow; when none can go, the
    /// persist timer and the ACK owed (`sent`: segments already sent in this burst).
    #[inline]
    fn send_new_data<S: TxSink + ?Sized>(
        &mut self,
        cx: &mut Ctx<'_>,
        idx: u32,
        sink: &mut S,
        sent: u16,
    ) -> Step {
        let next = next_segment(&mut self.conns[idx as usize]);
        if next.len > 0 || next.fin {
            self.send_segment(cx, idx, sink, &next)
        } else {
            self.nothing_sendable(cx, idx, sink, &next, sent)
        }
    }

    /// Sends the segment `next` describes and advances SND.NXT and the timers past it.
    #[inline]
    fn send_segment<S: TxSink + ?Sized>(
        &mut self,
        cx: &mut Ctx<'_>,
        idx: u32,
        sink: &mut S,
        next: &NextSegment,
    ) -> Step {
        let now = cx.now;
        let t = &mut self.conns[idx as usize];
        let NextSegment {
            sent_off,
            unsent,
            len,
            fin,
            ..
        } = *next;
        // No Nagle: servers on this stack always want TCP_NODELAY behaviour.
        let nxt = t.snd_nxt;
        if t.snd_nxt.lt(t.snd_max) {
            cx.stats.tcp_retransmits += 1;
            karn(t, nxt);
        } else if !t.rtt_active {
            t.rtt_active = true;
            t.rtt_at = now;
            t.rtt_seq = nxt;
        }
        let fl = flags::ACK
            | if fin { flags::FIN } else { 0 }
            | if len > 0 && len == unsent {
                flags::PSH
            } else {
                0
            };
        if self.emit(cx, idx, sink, nxt, fl, sent_off, len).is_none() {
            return Step::Full;
        }
        let t = &mut self.conns[idx as usize];
        let end = nxt.add(len + fin as usize);
        let new_data = end.gt(t.snd_max);
        if new_data {
            t.snd_last_len = end.diff(nxt).min(u16::MAX as i32) as u16;
        }
        t.snd_nxt = end;
        t.snd_max = t.snd_max.max(t.snd_nxt);
        if t.rto_at == Instant::NEVER || t.persist {
            t.persist = false;
            t.rto_at = now.add_micros(t.rto as u64);
        }
        // Each segment of new data restarts the probe timer (RFC 8985 7.2; Linux's
        // tcp_write_xmit), not a retransmission.
        if new_data && t.tlp_probes == 0 {
            t.tlp_at = now.add_micros(t.pto_us(now, dur_us(cx.cfg.min_rto) as u64));
        }
        Step::Sent
    }

    /// Nothing sendable. A zero window, or one too small to use, with data waiting and
    /// nothing in flight starts the persist timer; an ACK owed goes now unless a segment of
    /// this burst carried it, with the duplicates owed.
    #[inline]
    fn nothing_sendable<S: TxSink + ?Sized>(
        &mut self,
        cx: &mut Ctx<'_>,
        idx: u32,
        sink: &mut S,
        next: &NextSegment,
        sent: u16,
    ) -> Step {
        let t = &mut self.conns[idx as usize];
        if next.unsent > 0 && (t.snd_wnd == 0 || next.silly) && next.in_flight == 0 && !t.persist {
            t.persist = true;
            t.persist_backoff = 0;
            t.rto_at = cx.now.add_micros(t.rto as u64);
        }
        if t.ack_now && sent == 0 {
            let nxt = ack_seq(t);
            let copies = 1 + t.dup_acks_owed;
            t.dup_acks_owed = 0;
            for _ in 0..copies {
                if self.emit(cx, idx, sink, nxt, flags::ACK, 0, 0).is_none() {
                    return Step::Full;
                }
            }
        }
        self.conns[idx as usize].dup_acks_owed = 0;
        Step::Idle
    }

    /// Writes one segment of connection `idx` into the sink: `len` payload bytes starting
    /// `off` bytes into the send buffer. None when the sink has no buffer.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn emit<S: TxSink + ?Sized>(
        &mut self,
        cx: &mut Ctx<'_>,
        idx: u32,
        sink: &mut S,
        seq: SeqNumber,
        fl: u8,
        off: usize,
        len: usize,
    ) -> Option<()> {
        *cx.ip_ident = cx.ip_ident.wrapping_add(1);
        let t = &self.conns[idx as usize];
        let mac = t.mac_at(self.neigh_epoch)?;
        let syn = fl & flags::SYN != 0;
        let options = if syn {
            syn_options(cx, t)
        } else {
            segment_options(cx, t)
        };
        let window = advertised_window(cx, t, syn);
        let ack = if t.state == TcpState::SynSent && fl & flags::ACK == 0 {
            None
        } else {
            Some(t.rcv_nxt)
        };
        let (fl, ecn) = ecn_marks(t, fl, seq, len);
        let repr = TcpRepr {
            src_port: t.local_port,
            dst_port: t.remote_port,
            seq,
            ack,
            flags: fl & !flags::ACK,
            window,
            options,
        };
        write_segment(cx, t, sink, mac, &repr, ecn, off..off + len)?;
        let t = &mut self.conns[idx as usize];
        if fl & flags::CWR != 0 {
            t.ecn_cwr = false;
        }
        if ack.is_some() {
            // The segment carries the ACK owed and the window it advertises.
            t.ack_now = false;
            t.dsack = None;
            t.delack_at = Instant::NEVER;
            t.unacked_segs = 0;
            t.last_adv_wnd = (window as u32) << if syn { 0 } else { t.rcv_wscale };
            t.rcv_adv = t.rcv_nxt.add(t.last_adv_wnd as usize);
            t.rcv_wup = t.rcv_nxt;
        }
        Some(())
    }
}

/// What one step of a connection's send loop did (`Tcp::output_data`).
enum Step {
    /// A segment went: it counts against the burst.
    Sent,
    /// Nothing went, and the loop looks again.
    Again,
    /// Nothing more to send: the loop ends and the connection's timers are scheduled.
    Idle,
    /// The sink has no buffer: the connection stays pending.
    Full,
    /// Output is over for this turn: the persist timer is running.
    Done,
}

/// The next segment of new data (or the FIN) a connection may send, as the send and
/// congestion windows and silly-window avoidance allow.
#[derive(Clone, Copy)]
struct NextSegment {
    /// Where SND.NXT is in the send buffer.
    sent_off: usize,
    /// Bytes buffered and not sent yet.
    unsent: usize,
    /// Bytes between SND.UNA and SND.NXT.
    in_flight: u32,
    /// The payload's length: 0 when no data may go.
    len: usize,
    fin: bool,
    /// Silly-window avoidance holds data back.
    silly: bool,
}

/// The next segment of `t` from SND.NXT. Takes the silly-window override, if one was set.
#[inline]
fn next_segment(t: &mut Tcb) -> NextSegment {
    let buffered = t.send.len();
    let sent_off = t.snd_nxt.diff(t.snd_una).max(0) as usize;
    let unsent = buffered.saturating_sub(sent_off);
    let in_flight = t.snd_nxt.diff(t.snd_una).max(0) as u32;
    let wnd = t.snd_wnd.min(t.cc.cwnd());
    let avail = wnd.saturating_sub(in_flight) as usize;
    let seg_limit = t.seg_limit() as usize;
    let len = unsent.min(avail).min(seg_limit);
    // Sender-side silly-window avoidance (RFC 9293 3.8.6.2.1): when the peer's
    // window is what keeps a segment short, it goes only if it is all that is
    // queued or at least half the largest window the peer has offered. Otherwise an
    // ACK in flight or a window update brings us back, or, with nothing in flight,
    // the persist timer's override. A segment that only the congestion window keeps
    // short still goes (Linux, counting that window in segments, would send a whole
    // one): holding it leaves fewer segments in flight to bring the duplicate ACKs
    // that repair a loss, and a lossy 256 MiB echo took 166 s instead of 99.
    let usable = t.snd_wnd.saturating_sub(in_flight) as usize;
    let overridden = std::mem::take(&mut t.sws_override);
    let silly = !overridden
        && usable < unsent
        && usable < seg_limit
        && (usable as u64) * 2 < u64::from(t.max_snd_wnd);
    let len = if silly { 0 } else { len };
    let can_fin = matches!(
        t.state,
        TcpState::FinWait1 | TcpState::Closing | TcpState::LastAck
    );
    // The FIN rides on (or follows) the segment that sends the last buffered byte.
    let fin = t.fin_queued && can_fin && sent_off + len == buffered;
    NextSegment {
        sent_off,
        unsent,
        in_flight,
        len,
        fin,
        silly,
    }
}

/// The options of a SYN or SYN-ACK of `t`: what it offers (MSS, window scale, SACK,
/// timestamps).
fn syn_options(cx: &Ctx<'_>, t: &Tcb) -> TcpOptions {
    let mut opts = TcpOptions {
        mss: Some(cx.cfg.mss_for(t.remote_ip)),
        sack_permitted: t.sack_ok,
        ..TcpOptions::default()
    };
    if t.offer_wscale {
        opts.window_scale = Some(t.rcv_wscale);
    }
    if t.ts_enabled {
        let echo = if t.state == TcpState::SynSent {
            0
        } else {
            t.ts_recent
        };
        opts.timestamps = Some((ts_value(cx, t), echo));
    }
    opts
}

/// The options of a synchronized connection's segment: timestamps and SACK blocks.
#[inline]
fn segment_options(cx: &mut Ctx<'_>, t: &Tcb) -> TcpOptions {
    let mut opts = TcpOptions::default();
    if t.ts_enabled {
        opts.timestamps = Some((ts_value(cx, t), t.ts_recent));
    }
    if t.sack_ok {
        // RFC 2883: a D-SACK block, when there is one, goes first; then (RFC 2018)
        // the most recently received out-of-order data, the others in sequence order.
        let ranges = &t.ooo[..t.ooo_len as usize];
        let latest = ranges
            .iter()
            .position(|&(s, e)| t.ooo_last.ge(s) && t.ooo_last.lt(e))
            .unwrap_or(0);
        let ooo = std::iter::once(latest)
            .chain((0..ranges.len()).filter(|&i| i != latest))
            .filter(|&i| i < ranges.len())
            .map(|i| ranges[i]);
        cx.stats.tcp_dsacks_sent += t.dsack.is_some() as u64;
        let blocks = t.sack_blocks_out();
        for (n, (s, e)) in t.dsack.into_iter().chain(ooo).take(blocks).enumerate() {
            opts.sack_blocks[n] = (s.0, e.0);
            opts.sack_count = n as u8 + 1;
        }
    }
    opts
}

/// The timestamp value `t` sends now (RFC 7323: our clock in ms, plus its offset).
#[inline]
fn ts_value(cx: &Ctx<'_>, t: &Tcb) -> u32 {
    (cx.now.millis() as u32).wrapping_add(t.ts_offset)
}

/// The window field of a segment of `t`.
#[inline]
fn advertised_window(cx: &Ctx<'_>, t: &Tcb, syn: bool) -> u16 {
    // Receiver-side silly window avoidance (RFC 9293 3.8.6.2.2): move the right edge
    // only by at least min(MSS, buffer/2); the edge never moves left.
    // A passive open's rings come with its handshake's end: its SYN-ACK offers the
    // buffer it will have.
    let free = if t.recv.capacity() == 0 {
        cx.cfg.recv_buffer.min(u32::MAX as usize) as u32
    } else {
        t.rcv_window()
    };
    let cur = (t.rcv_adv.diff(t.rcv_nxt).max(0) as u32).min(free);
    let step = t.mss.min(t.recv.capacity() as u32 / 2);
    let adv = if syn || free >= cur.saturating_add(step) {
        free
    } else {
        cur
    };
    if syn {
        adv.min(65535) as u16
    } else {
        (adv >> t.rcv_wscale).min(65535) as u16
    }
}

/// Builds the frame of segment `repr` of `t` to `mac` in a sink buffer, the payload
/// copied from the send buffer's bytes `payload`, and counts it. None when the sink has
/// no buffer.
#[inline]
fn write_segment<S: TxSink + ?Sized>(
    cx: &mut Ctx<'_>,
    t: &Tcb,
    sink: &mut S,
    mac: MacAddr,
    repr: &TcpRepr,
    ecn: u8,
    payload: Range<usize>,
) -> Option<()> {
    let dst_ip = t.remote_ip;
    let src_ip = t.local_ip(cx.cfg);
    let tcp_len = repr.header_len() + payload.len();
    let ip = IpRepr::new(src_ip, dst_ip, IpProtocol::Tcp, tcp_len, ecn, *cx.ip_ident);
    let eth = crate::wire::EthernetRepr {
        dst: mac,
        src: cx.cfg.mac,
        vlan_id: cx.cfg.vlan_id,
        ethertype: ip.ethertype(),
    };
    let mut ip_opts = [0u8; ip_options_echo::MAX_LEN];
    let ip_opts = match (src_ip, t.ip_opts.as_deref()) {
        (IpAddress::V4(a), Some(o)) => {
            o.write(&mut ip_opts, a, crate::wall_clock_ms());
            &ip_opts[..o.len()]
        }
        _ => &[],
    };
    let e = eth.header_len();
    let th = e + ip.header_len() + ip_opts.len();
    let pl = th + repr.header_len();
    let end = pl + payload.len();
    let mut too_small = false;
    let send_buf = &t.send;
    let offload = cx.cfg.tx_checksum_offload;
    let ok = sink.tx_frame(&mut |buf: &mut [u8]| {
        if buf.len() < end {
            // A sink with buffers below max_frame_len() is misconfigured: the segment is
            // dropped (counted) and retransmission covers it, rather than a partial frame.
            too_small = true;
            return 0;
        }
        send_buf.peek_at(payload.start, &mut buf[pl..end]);
        let _ = eth.emit(buf);
        let _ = ip.emit_with_options(&mut buf[e..], ip_opts);
        let _ = repr.emit(&mut buf[th..]);
        if offload {
            fill_partial_checksum(&mut buf[th..end], src_ip, dst_ip);
        } else {
            fill_checksum(&mut buf[th..end], src_ip, dst_ip);
        }
        end
    });
    if !ok {
        cx.stats.tx_sink_full += 1;
        return None;
    }
    if too_small {
        cx.stats.tx_buffer_too_small += 1;
    }
    cx.stats.tx_frames += 1;
    cx.stats.tcp_segments_out += 1;
    Some(())
}

/// The ECN marks of a segment of `t` (RFC 3168 6.1, as Linux's `tcp_ecn_send`): ECE on an
/// ECN-setup SYN-ACK and, while we echo a mark, on every segment; new data goes ECT(0), the
/// first after a reduction with CWR; retransmissions and bare ACKs go Not-ECT.
fn ecn_marks(t: &Tcb, fl: u8, seq: SeqNumber, len: usize) -> (u8, u8) {
    if !t.ecn {
        return (fl, ipv4::ecn::NOT_ECT);
    }
    if fl & flags::SYN != 0 {
        return (fl | flags::ECE, ipv4::ecn::NOT_ECT);
    }
    let fl = if t.ecn_echo { fl | flags::ECE } else { fl };
    if len > 0 && seq.ge(t.snd_max) {
        let cwr = if t.ecn_cwr { flags::CWR } else { 0 };
        return (fl | cwr, ipv4::ecn::ECT0);
    }
    (fl, ipv4::ecn::NOT_ECT)
}

/// SEQ for segments without data (ACKs, RSTs): SND.MAX, but never beyond the right edge of
/// the peer's window (Linux's tcp_acceptable_seq), so the peer's acceptability test passes
/// even after a go-back-N rewind (SND.NXT too low) or a window that closed under data
/// already sent (SND.MAX too high).
pub(super) fn ack_seq(t: &Tcb) -> SeqNumber {
    let edge = t.snd_una.add(t.snd_wnd as usize);
    if t.snd_max.gt(edge) {
        edge
    } else {
        t.snd_max
    }
}
