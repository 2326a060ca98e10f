//! Segment arrival: parsing and demux, then the checks every state shares (RFC 9293
//! 3.10.7.4: PAWS, acceptability, RST, SYN), then the state's own processing in
//! `handshake.rs`, `ack.rs`, `data.rs` and `closing.rs`.

use super::tcb::{Owner, Tcb};
use super::{flow_key, is_link_local, Ctx, Tcp, TcpState};
use crate::Error;
use crate::IpHeader;
use wirespeed_wire::checksum::TransportChecksum;
use wirespeed_wire::tcp::flags;
use wirespeed_wire::{ipv4, MacAddr, SeqNumber, TcpOptions, TcpPacket, TcpRepr};

impl Tcp {
    /// One TCP segment addressed to the stack (`data`: the IP payload).
    pub(crate) fn input(&mut self, cx: &mut Ctx<'_>, src_mac: MacAddr, ip: &IpHeader, data: &[u8]) {
        cx.ecn = ip.ecn;
        let pkt = match TcpPacket::new_checked(data) {
            Ok(p) => p,
            Err(_) => {
                cx.stats.tcp_malformed += 1;
                return;
            }
        };
        // Taking partial checksums (a software device), one needs no sum over the segment.
        let state = if cx.cfg.accept_partial_checksums {
            pkt.checksum_state_trusting_partial(ip.src, ip.dst)
        } else {
            pkt.checksum_state(ip.src, ip.dst)
        };
        match state {
            TransportChecksum::Complete => {}
            TransportChecksum::Partial if cx.cfg.accept_partial_checksums => {
                cx.stats.tcp_rx_csum_partial += 1;
            }
            TransportChecksum::Partial => {
                cx.stats.tcp_bad_checksum += 1;
                cx.stats.tcp_bad_checksum_partial += 1;
                return;
            }
            TransportChecksum::Bad => {
                cx.stats.tcp_bad_checksum += 1;
                return;
            }
        }
        let repr = TcpRepr::parse_unverified(&pkt);
        if repr.options.malformed {
            // Counted, not dropped: as Linux, the options before the bad one stand.
            cx.stats.tcp_bad_options += 1;
        }
        cx.stats.tcp_segments_in += 1;
        let payload = pkt.payload();
        let key = flow_key(ip.src, is_link_local(ip.dst), repr.src_port, repr.dst_port);
        if let Some(&idx) = self.demux.get(&key) {
            if repr.options.md5_signature || repr.options.auth_malformed {
                cx.stats.tcp_md5_unexpected += 1;
                return;
            }
            let t = &self.conns[idx as usize];
            let is_new_syn = repr.flags & (flags::SYN | flags::ACK | flags::RST) == flags::SYN;
            if t.state == TcpState::TimeWait && is_new_syn {
                // RFC 6191 / RFC 9293 3.10.7.4: a new SYN may reuse a TIME_WAIT 4-tuple when
                // its sequence number (or timestamp) is beyond the old incarnation.
                let newer_ts = match (t.ts_enabled, repr.options.timestamps) {
                    (true, Some((tsval, _))) => (tsval.wrapping_sub(t.ts_recent) as i32) > 0,
                    _ => false,
                };
                if repr.seq.gt(t.rcv_nxt) || newer_ts {
                    cx.stats.tcp_time_wait_reused += 1;
                    self.free_tcb(cx, idx);
                    self.listen_input(cx, src_mac, ip.src, ip.dst, &repr, payload);
                    return;
                }
            }
            self.tcb_input(cx, idx, src_mac, &repr, payload);
            return;
        }
        self.listen_input(cx, src_mac, ip.src, ip.dst, &repr, payload);
    }

    /// Segment processing for an existing connection (RFC 9293 3.10.7.3/3.10.7.4).
    pub(super) fn tcb_input(
        &mut self,
        cx: &mut Ctx<'_>,
        idx: u32,
        src_mac: MacAddr,
        repr: &TcpRepr,
        payload: &[u8],
    ) {
        let has_rst = repr.flags & flags::RST != 0;
        self.restart_keepalive(cx, idx);
        if self.conns[idx as usize].state == TcpState::SynSent {
            self.syn_sent_input(cx, idx, src_mac, repr);
            return;
        }
        let Some(span) = self.span(idx, repr, payload.len()) else {
            return;
        };
        if !has_rst && self.paws_rejects(cx, idx, repr) {
            return;
        }
        if !acceptable(&self.conns[idx as usize], span) {
            if !has_rst {
                self.refuse_segment(cx, idx, src_mac, repr, span);
            }
            return;
        }
        if has_rst {
            self.rst_input(cx, idx, span.seq);
            return;
        }
        if span.syn {
            self.syn_input(cx, idx, src_mac, repr, payload.len());
            return;
        }
        let Some(ack) = repr.ack else { return };
        let t = &mut self.conns[idx as usize];
        if t.ecn && ecn_input(cx, t, repr, payload) {
            let gen = t.gen;
            self.mark_dirty(idx, gen);
        }
        update_ts_recent(&mut self.conns[idx as usize], repr, span.seq, ack);
        if self.conns[idx as usize].state == TcpState::SynReceived
            && !self.syn_received_ack(cx, idx, src_mac, repr, span.seq, ack)
        {
            return;
        }
        self.synchronized_input(cx, idx, repr, span.seq, ack, payload, span.fin);
    }

    /// Any segment restarts the keepalive timer of a connection that keeps alive.
    #[inline]
    fn restart_keepalive(&mut self, cx: &Ctx<'_>, idx: u32) {
        let Some(k) = cx.cfg.keepalive else { return };
        let t = &mut self.conns[idx as usize];
        t.keep_probes = 0;
        if matches!(
            t.state,
            TcpState::Established | TcpState::CloseWait | TcpState::FinWait2
        ) {
            t.keep_at = cx.now.add(k.idle);
        }
    }

    /// The segment's span in sequence space. A SYN-RECEIVED connection takes the peer's
    /// repeated SYN here: None when it answers a bare one with its SYN-ACK again.
    #[inline]
    fn span(&mut self, idx: u32, repr: &TcpRepr, payload: usize) -> Option<Span> {
        let t = &mut self.conns[idx as usize];
        let mut seq = repr.seq;
        let mut syn = repr.flags & flags::SYN != 0;
        let fin = repr.flags & flags::FIN != 0;
        if t.state == TcpState::SynReceived && syn && seq == t.irs {
            if repr.ack.is_none() {
                // Our SYN-ACK was lost: the peer retransmitted its SYN. Answer again.
                t.snd_nxt = t.iss;
                let gen = t.gen;
                self.mark_dirty(idx, gen);
                return None;
            }
            // Simultaneous open: the peer's SYN-ACK repeats the SYN we already took; use
            // it as the ACK of ours.
            seq = seq.add(1);
            syn = false;
        }
        Some(Span {
            seq,
            len: payload + syn as usize + fin as usize,
            payload,
            syn,
            fin,
        })
    }

    /// PAWS (RFC 7323 5): whether the segment is dropped for a timestamp older than the
    /// last accepted one. It is answered with a bare ACK.
    #[inline]
    fn paws_rejects(&mut self, cx: &mut Ctx<'_>, idx: u32, repr: &TcpRepr) -> bool {
        let t = &mut self.conns[idx as usize];
        if !t.ts_enabled {
            return false;
        }
        let Some((tsval, _)) = repr.options.timestamps else {
            return false;
        };
        // A half-open connection too: Linux's tcp_check_req rejects by the SYN's
        // timestamp and answers with a bare ACK.
        if (tsval.wrapping_sub(t.ts_recent) as i32) >= 0 {
            return false;
        }
        cx.stats.tcp_paws_rejected += 1;
        t.ack_now = true;
        let gen = t.gen;
        self.mark_dirty(idx, gen);
        true
    }

    /// A segment outside the receive window (no RST): counted and answered with an ACK.
    /// Its ACK field is still taken where it is news.
    fn refuse_segment(
        &mut self,
        cx: &mut Ctx<'_>,
        idx: u32,
        src_mac: MacAddr,
        repr: &TcpRepr,
        span: Span,
    ) {
        let t = &mut self.conns[idx as usize];
        let gen = t.gen;
        let Span { seq, len, .. } = span;
        if t.state == TcpState::SynReceived {
            // Linux's tcp_check_req: a bare ACK, nothing else taken from the segment (no
            // D-SACK, no ACK field, no timestamp).
            cx.stats.tcp_out_of_window += 1;
            t.ack_now = true;
            self.mark_dirty(idx, gen);
            return;
        }
        if seq.add(len).le(t.rcv_nxt) && len > 0 {
            cx.stats.tcp_duplicate_segments += 1;
            if span.payload > 0 {
                t.dsack = Some((seq, seq.add(span.payload)));
            }
        } else {
            cx.stats.tcp_out_of_window += 1;
        }
        t.ack_now = true;
        if t.state == TcpState::TimeWait && span.fin {
            t.keep_at = cx.now.add(cx.cfg.time_wait);
        }
        let (rcv_nxt, wnd) = (t.rcv_nxt, receive_window(t));
        self.mark_dirty(idx, gen);
        let Some(ack) = repr.ack else { return };
        let t = &self.conns[idx as usize];
        // Not where it would end the connection (our FIN outstanding): Linux takes
        // no ACK from a refused segment, and there no stall needs one.
        let fin_pending = matches!(t.state, TcpState::LastAck | TcpState::Closing);
        if t.state.awaits_acks()
            && !fin_pending
            && !span.syn
            && ack.gt(t.snd_una)
            && ack.le(t.snd_max)
        {
            // The data is refused, but a new ACK is still news: the peer's
            // zero-window probes (an old sequence number) and its segments past a
            // closed window carry the only acknowledgements of our data while we
            // are not reading. Dropping them leaves our send buffer full until a
            // timer breaks the stall (RFC 9293 3.10.7.4 asks to accept valid ACKs
            // at a zero window). ACK fields only grow in the peer's send order, so
            // a new one's window is also the peer's latest.
            let ack_only = TcpRepr {
                seq: rcv_nxt,
                flags: flags::ACK,
                options: TcpOptions {
                    timestamps: None,
                    ..repr.options
                },
                ..*repr
            };
            cx.stats.tcp_acks_on_refused_segments += 1;
            self.tcb_input(cx, idx, src_mac, &ack_only, &[]);
        } else if len == 0 || wnd == 0 {
            // Still learn window openings from a zero-window probe reply path.
            self.ack_window_only(idx, repr, ack);
        }
    }

    /// An acceptable RST (RFC 5961 3.2): at exactly RCV.NXT it resets the connection,
    /// anywhere else in the window it gets a challenge ACK.
    fn rst_input(&mut self, cx: &mut Ctx<'_>, idx: u32, seq: SeqNumber) {
        let t = &mut self.conns[idx as usize];
        if seq != t.rcv_nxt {
            cx.stats.tcp_challenge_acks += 1;
            t.ack_now = true;
            let gen = t.gen;
            self.mark_dirty(idx, gen);
            return;
        }
        cx.stats.tcp_resets_received += 1;
        match t.state {
            TcpState::SynReceived if matches!(t.owner, Owner::Listener(_)) => {
                self.free_tcb(cx, idx)
            }
            TcpState::TimeWait | TcpState::LastAck | TcpState::Closing => {
                self.set_closed(cx, idx, None)
            }
            _ => self.set_closed(cx, idx, Some(Error::ConnectionReset)),
        }
    }

    /// An acceptable SYN on a connection that has taken one already.
    fn syn_input(
        &mut self,
        cx: &mut Ctx<'_>,
        idx: u32,
        src_mac: MacAddr,
        repr: &TcpRepr,
        payload: usize,
    ) {
        let t = &mut self.conns[idx as usize];
        if t.state == TcpState::SynReceived && matches!(t.owner, Owner::Listener(_)) {
            // A half-open connection takes no second SYN: Linux's tcp_check_req resets it
            // (an invalid ACK first gets the RST a listener sends, the connection kept).
            let bad_ack = repr.ack.is_some_and(|a| a != t.iss.add(1));
            let (ip, local) = (t.remote_ip, t.local_ip(cx.cfg));
            self.reply_rst(cx, src_mac, ip, local, repr, payload);
            if !bad_ack {
                cx.stats.tcp_half_open_resets += 1;
                self.free_tcb(cx, idx);
            }
            return;
        }
        // RFC 5961 4: a SYN on a synchronized connection gets a challenge ACK.
        cx.stats.tcp_challenge_acks += 1;
        t.ack_now = true;
        let gen = t.gen;
        self.mark_dirty(idx, gen);
    }

    /// For segments we reject on sequence grounds: still take a window update from their
    /// ACK field, so a zero-window sender learns the window reopened.
    fn ack_window_only(&mut self, idx: u32, repr: &TcpRepr, ack: SeqNumber) {
        let t = &mut self.conns[idx as usize];
        if !t.state.awaits_acks() {
            return;
        }
        if ack == t.snd_una || (ack.gt(t.snd_una) && ack.le(t.snd_max)) {
            let w = (repr.window as u32) << t.snd_wscale;
            if t.snd_wnd == 0 && w > 0 {
                t.set_snd_wnd(w);
                t.persist = false;
                t.persist_backoff = 0;
                let g = t.gen;
                self.mark_dirty(idx, g);
            }
        }
    }
}

/// Where a segment lies in sequence space, once a SYN-RECEIVED connection has taken a
/// repeated SYN as the ACK of its own.
#[derive(Clone, Copy)]
struct Span {
    seq: SeqNumber,
    /// Its length in sequence space: the payload, the SYN and the FIN.
    len: usize,
    /// The payload's length.
    payload: usize,
    syn: bool,
    fin: bool,
}

/// The window the acceptability test allows. A passive open has no rings until its
/// handshake ends: its window is what its SYN-ACK offered (Linux's req->rsk_rcv_wnd).
#[inline]
fn receive_window(t: &Tcb) -> u32 {
    if t.recv.capacity() == 0 {
        t.rcv_adv.diff(t.rcv_nxt).max(0) as u32
    } else {
        t.rcv_window()
    }
}

/// Acceptability, as Linux's tcp_sequence(): the segment must end at or after the
/// RCV.NXT we last advertised from (RCV.WUP) and start no later than the window's right
/// edge. RFC 9293's stricter test (zero-length segments exactly at RCV.NXT when the
/// window is zero) drops a peer's ACKs whenever its view of our window is stale, and
/// with both ends throttled that deadlocks (found by the many-streams test).
#[inline]
fn acceptable(t: &Tcb, span: Span) -> bool {
    let (seq, rcv_nxt) = (span.seq, t.rcv_nxt);
    let edge = rcv_nxt.add(receive_window(t) as usize);
    if t.state == TcpState::SynReceived {
        in_window(seq, seq.add(span.len), rcv_nxt, edge)
    } else {
        seq.add(span.len).ge(t.rcv_wup) && seq.le(edge)
    }
}

/// RFC 7323 4.3: only an acceptable segment moves TS.Recent. As the conformance harness
/// found Linux doing: an ACK of unsent data moves nothing; an old ACK moves it only in
/// ESTABLISHED (elsewhere tcp_rcv_state_process takes the ACK before the timestamp).
#[inline]
fn update_ts_recent(t: &mut Tcb, repr: &TcpRepr, seq: SeqNumber, ack: SeqNumber) {
    if !t.ts_enabled {
        return;
    }
    let Some((tsval, _)) = repr.options.timestamps else {
        return;
    };
    let ack_ok = match t.state {
        TcpState::Established => ack.le(t.snd_max),
        TcpState::SynReceived => ack.gt(t.snd_una) && ack.le(t.snd_max),
        _ => ack.ge(t.snd_una) && ack.le(t.snd_max),
    };
    if seq.le(t.rcv_nxt) && ack_ok {
        t.ts_recent = tsval;
    }
}

/// A half-open connection's acceptability test, Linux's `tcp_in_window` (tcp_check_req):
/// stricter than an established one's, a segment ending at RCV.NXT is out of window.
fn in_window(seq: SeqNumber, end: SeqNumber, start: SeqNumber, edge: SeqNumber) -> bool {
    seq == start || (end.gt(start) && seq.lt(edge)) || (seq == edge && seq == end)
}

/// RFC 3168 6.1.3, as Linux: the peer's CWR ends our echo; a CE-marked data segment starts
/// it. Either is acknowledged at once when it carries data (the sender's window may be down
/// to one segment): returns whether to.
fn ecn_input(cx: &mut Ctx<'_>, t: &mut Tcb, repr: &TcpRepr, payload: &[u8]) -> bool {
    let mut ack_at_once = false;
    if repr.flags & flags::CWR != 0 {
        t.ecn_echo = false;
        ack_at_once = !payload.is_empty();
    }
    if !payload.is_empty() && cx.ecn == ipv4::ecn::CE {
        cx.stats.tcp_ecn_ce_received += 1;
        t.ecn_echo = true;
        ack_at_once = true;
    }
    t.ack_now |= ack_at_once;
    ack_at_once
}
