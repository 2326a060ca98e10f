//! Segment arrival: parsing and demux, then the checks every state shares (RFC 9293
//! 3.10.7.4: PAWS, acceptability, RST, SYN), then the state's own processing in
//! `handshake.rs`, `ack.rs`, `data.rs` and `closing.rs`.

use super::tcb::Owner;
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
        let now = cx.now;
        let has_syn = repr.flags & flags::SYN != 0;
        let has_rst = repr.flags & flags::RST != 0;
        let has_fin = repr.flags & flags::FIN != 0;
        let t = &mut self.conns[idx as usize];
        let gen = t.gen;
        if let Some(k) = cx.cfg.keepalive {
            t.keep_probes = 0;
            if matches!(
                t.state,
                TcpState::Established | TcpState::CloseWait | TcpState::FinWait2
            ) {
                t.keep_at = now.add(k.idle);
            }
        }

        if t.state == TcpState::SynSent {
            self.syn_sent_input(cx, idx, src_mac, repr);
            return;
        }

        let mut seq = repr.seq;
        let mut has_syn = has_syn;
        if t.state == TcpState::SynReceived && has_syn && seq == t.irs {
            if repr.ack.is_none() {
                // Our SYN-ACK was lost: the peer retransmitted its SYN. Answer again.
                t.snd_nxt = t.iss;
                self.mark_dirty(idx, gen);
                return;
            }
            // Simultaneous open: the peer's SYN-ACK repeats the SYN we already took; use
            // it as the ACK of ours.
            seq = seq.add(1);
            has_syn = false;
        }
        let seg_len = payload.len() + has_syn as usize + has_fin as usize;

        // PAWS (RFC 7323 5): drop segments with an older timestamp than the last accepted.
        if t.ts_enabled && !has_rst {
            if let Some((tsval, _)) = repr.options.timestamps {
                // A half-open connection too: Linux's tcp_check_req rejects by the SYN's
                // timestamp and answers with a bare ACK.
                if (tsval.wrapping_sub(t.ts_recent) as i32) < 0 {
                    cx.stats.tcp_paws_rejected += 1;
                    t.ack_now = true;
                    self.mark_dirty(idx, gen);
                    return;
                }
            }
        }

        // Acceptability, as Linux's tcp_sequence(): the segment must end at or after the
        // RCV.NXT we last advertised from (RCV.WUP) and start no later than the window's right
        // edge. RFC 9293's stricter test (zero-length segments exactly at RCV.NXT when the
        // window is zero) drops a peer's ACKs whenever its view of our window is stale, and
        // with both ends throttled that deadlocks (found by the many-streams test).
        // A passive open has no rings until its handshake ends: its window is what its SYN-ACK
        // offered (Linux's req->rsk_rcv_wnd).
        let wnd = if t.recv.capacity() == 0 {
            t.rcv_adv.diff(t.rcv_nxt).max(0) as u32
        } else {
            t.rcv_window()
        };
        let rcv_nxt = t.rcv_nxt;
        let acceptable = if t.state == TcpState::SynReceived {
            in_window(seq, seq.add(seg_len), rcv_nxt, rcv_nxt.add(wnd as usize))
        } else {
            seq.add(seg_len).ge(t.rcv_wup) && seq.le(rcv_nxt.add(wnd as usize))
        };
        if !acceptable {
            if !has_rst && t.state == TcpState::SynReceived {
                // Linux's tcp_check_req: a bare ACK, nothing else taken from the segment (no
                // D-SACK, no ACK field, no timestamp).
                cx.stats.tcp_out_of_window += 1;
                t.ack_now = true;
                self.mark_dirty(idx, gen);
                return;
            }
            if !has_rst {
                if seq.add(seg_len).le(rcv_nxt) && seg_len > 0 {
                    cx.stats.tcp_duplicate_segments += 1;
                    if !payload.is_empty() {
                        t.dsack = Some((seq, seq.add(payload.len())));
                    }
                } else {
                    cx.stats.tcp_out_of_window += 1;
                }
                t.ack_now = true;
                if t.state == TcpState::TimeWait && has_fin {
                    t.keep_at = now.add(cx.cfg.time_wait);
                }
                self.mark_dirty(idx, gen);
                if let Some(ack) = repr.ack {
                    let t = &self.conns[idx as usize];
                    // Not where it would end the connection (our FIN outstanding): Linux takes
                    // no ACK from a refused segment, and there no stall needs one.
                    let fin_pending = matches!(t.state, TcpState::LastAck | TcpState::Closing);
                    if t.state.awaits_acks()
                        && !fin_pending
                        && !has_syn
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
                    } else if seg_len == 0 || wnd == 0 {
                        // Still learn window openings from a zero-window probe reply path.
                        self.ack_window_only(idx, repr, ack);
                    }
                }
            }
            return;
        }

        if has_rst {
            // RFC 5961 3.2: exact match resets, anything else in window gets a challenge ACK.
            if seq == t.rcv_nxt {
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
            } else {
                cx.stats.tcp_challenge_acks += 1;
                t.ack_now = true;
                self.mark_dirty(idx, gen);
            }
            return;
        }

        if has_syn && t.state == TcpState::SynReceived && matches!(t.owner, Owner::Listener(_)) {
            // A half-open connection takes no second SYN: Linux's tcp_check_req resets it
            // (an invalid ACK first gets the RST a listener sends, the connection kept).
            let bad_ack = repr.ack.is_some_and(|a| a != t.iss.add(1));
            let (ip, local) = (t.remote_ip, t.local_ip(cx.cfg));
            self.reply_rst(cx, src_mac, ip, local, repr, payload.len());
            if !bad_ack {
                cx.stats.tcp_half_open_resets += 1;
                self.free_tcb(cx, idx);
            }
            return;
        }
        if has_syn {
            // RFC 5961 4: a SYN on a synchronized connection gets a challenge ACK.
            cx.stats.tcp_challenge_acks += 1;
            t.ack_now = true;
            self.mark_dirty(idx, gen);
            return;
        }

        let Some(ack) = repr.ack else { return };
        if t.ecn && ecn_input(cx, t, repr, payload) {
            self.mark_dirty(idx, gen);
        }
        let t = &mut self.conns[idx as usize];

        if t.ts_enabled {
            if let Some((tsval, _)) = repr.options.timestamps {
                // RFC 7323 4.3: only an acceptable segment moves TS.Recent. As the conformance
                // harness found Linux doing: an ACK of unsent data moves nothing; an old ACK
                // moves it only in ESTABLISHED (elsewhere tcp_rcv_state_process takes the ACK
                // before the timestamp).
                let ack_ok = match t.state {
                    TcpState::Established => ack.le(t.snd_max),
                    TcpState::SynReceived => ack.gt(t.snd_una) && ack.le(t.snd_max),
                    _ => ack.ge(t.snd_una) && ack.le(t.snd_max),
                };
                if seq.le(t.rcv_nxt) && ack_ok {
                    t.ts_recent = tsval;
                }
            }
        }

        if t.state == TcpState::SynReceived
            && !self.syn_received_ack(cx, idx, src_mac, repr, seq, ack)
        {
            return;
        }
        self.synchronized_input(cx, idx, repr, seq, ack, payload, has_fin);
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

/// A half-open connection's acceptability test, Linux's `tcp_in_window` (tcp_check_req):
/// stricter than an established one's, a segment ending at RCV.NXT is out of window.
fn in_window(seq: SeqNumber, end: SeqNumber, start: SeqNumber, edge: SeqNumber) -> bool {
    seq == start || (end.gt(start) && seq.lt(edge)) || (seq == edge && seq == end)
}

/// RFC 3168 6.1.3, as Linux: the peer's CWR ends our echo; a CE-marked data segment starts
/// it. Either is acknowledged at once when it carries data (the sender's window may be down
/// to one segment): returns whether to.
fn ecn_input(cx: &mut Ctx<'_>, t: &mut super::tcb::Tcb, repr: &TcpRepr, payload: &[u8]) -> bool {
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
