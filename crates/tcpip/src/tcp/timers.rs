//! Timers: each connection's earliest deadline sits in one heap; due connections run
//! their delayed-ACK, keepalive, TIME_WAIT/FIN_WAIT_2, loss-probe and retransmission
//! timers here. Also the list of connections with output pending (`dirty`).

use super::congestion::CongestionControl;
use super::tcb::Owner;
use super::{dur_us, Ctx, Tcp, TcpState};
use crate::{Error, Instant};
use std::cmp::Reverse;
use wirespeed_wire::TcpOptions;
use wirespeed_wire::TcpRepr;

/// Tail loss probes per stall before the RTO takes over: one, as Linux's `tlp_high_seq`
/// allows.
pub(super) const MAX_PROBES: u8 = 1;

/// Retransmission timeouts in a row after which a connection suspects its next hop, and the
/// stack asks the link for that MAC again: Linux's `tcp_retries1` (3), past which
/// `tcp_write_timeout` tells the network layer (docs/TCPIP.md, "Neighbours that move").
const SUSPECT_NEXT_HOP_AFTER: u8 = 3;

impl Tcp {
    /// Runs every connection timer due at `now`.
    pub(crate) fn run_timers(&mut self, cx: &mut Ctx<'_>, now: Instant) {
        while let Some(&Reverse((at, idx, gen))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            let Some(t) = self.conns.get_mut(idx as usize) else {
                continue;
            };
            if t.gen != gen || !t.in_use {
                continue;
            }
            if t.heap_at == at {
                t.heap_at = Instant::NEVER;
            }
            self.tcb_timers(cx, idx, now);
            self.schedule(idx);
        }
    }

    /// The earliest connection deadline, if any.
    pub(crate) fn next_timer(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Puts `idx`'s earliest deadline into the heap unless an earlier entry is there already.
    pub(super) fn schedule(&mut self, idx: u32) {
        let t = &mut self.conns[idx as usize];
        if !t.in_use {
            return;
        }
        let d = t.next_deadline();
        if d < t.heap_at {
            t.heap_at = d;
            self.timers.push(Reverse((d, idx, t.gen)));
        }
    }

    /// Queues connection `idx` for output on the next transmit.
    pub(super) fn mark_dirty(&mut self, idx: u32, gen: u32) {
        if let Some(t) = self.conns.get_mut(idx as usize) {
            if t.gen == gen && t.in_use && !t.in_dirty {
                t.in_dirty = true;
                self.dirty.push((idx, gen));
            }
        }
    }

    /// A next hop resolved: connections that waited for it can send again.
    pub(crate) fn neighbour_resolved(&mut self) {
        let waiting = std::mem::take(&mut self.arp_waiting);
        for &(idx, gen) in &waiting {
            self.mark_dirty(idx, gen);
        }
        self.arp_waiting = waiting;
        self.arp_waiting.clear();
    }

    /// Whether any connection has output pending.
    pub(crate) fn has_output(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// Runs connection `idx`'s due timers: delayed ACK, keepalive and the closing states'
    /// timeouts, tail loss probe, retransmission (or persist).
    fn tcb_timers(&mut self, cx: &mut Ctx<'_>, idx: u32, now: Instant) {
        let t = &mut self.conns[idx as usize];
        let gen = t.gen;
        if t.delack_at <= now {
            t.delack_at = Instant::NEVER;
            t.ack_now = true;
            self.mark_dirty(idx, gen);
        }
        if self.conns[idx as usize].keep_at <= now && !self.keep_timer(cx, idx, now) {
            return;
        }
        self.loss_probe_timer(cx, idx, now);
        if self.conns[idx as usize].rto_at <= now {
            self.rto_timer(cx, idx, now);
        }
    }

    /// The keep timer ran out: TIME_WAIT ends, an orphan in FIN_WAIT_2 times out, or a
    /// keepalive probe goes. False when the connection is gone.
    fn keep_timer(&mut self, cx: &mut Ctx<'_>, idx: u32, now: Instant) -> bool {
        let t = &mut self.conns[idx as usize];
        t.keep_at = Instant::NEVER;
        match t.state {
            TcpState::TimeWait => {
                self.set_closed(cx, idx, None);
                false
            }
            TcpState::FinWait2 if t.owner == Owner::Released => {
                // Orphan whose peer never sent FIN (tcp_fin_timeout).
                cx.stats.tcp_timeouts += 1;
                self.abort_conn(cx, idx, Error::TimedOut);
                false
            }
            TcpState::Established | TcpState::CloseWait | TcpState::FinWait2 => {
                self.keepalive(cx, idx, now)
            }
            _ => true,
        }
    }

    /// A keepalive probe, or the timeout when the peer answered none of them. False when
    /// the connection timed out.
    fn keepalive(&mut self, cx: &mut Ctx<'_>, idx: u32, now: Instant) -> bool {
        let Some(k) = cx.cfg.keepalive else {
            return true;
        };
        let t = &mut self.conns[idx as usize];
        if t.keep_probes >= k.probes {
            cx.stats.tcp_timeouts += 1;
            self.abort_conn(cx, idx, Error::TimedOut);
            return false;
        }
        t.keep_probes += 1;
        t.keep_at = now.add(k.interval);
        cx.stats.tcp_keepalive_probes += 1;
        // A keepalive probe is an ACK with seq = SND.NXT - 1: the peer must
        // answer it with an ACK.
        let out = TcpRepr {
            src_port: t.local_port,
            dst_port: t.remote_port,
            seq: t.snd_una.sub(1),
            ack: Some(t.rcv_nxt),
            flags: 0,
            window: (t.rcv_window() >> t.rcv_wscale).min(65535) as u16,
            options: TcpOptions::default(),
        };
        let (ip, mac) = (t.remote_ip, t.mac_at(self.neigh_epoch));
        let local = t.local_ip(cx.cfg);
        cx.send_ctrl_with(local, ip, mac, &out, t.ip_options());
        true
    }

    /// A tail loss probe, when one is due with data in flight (RFC 8985 7.3).
    fn loss_probe_timer(&mut self, cx: &mut Ctx<'_>, idx: u32, now: Instant) {
        let t = &mut self.conns[idx as usize];
        // A probe due with the RTO goes in its place (the probe timeout is capped at the RTO:
        // Linux arms one or the other on one timer).
        if t.tlp_at > now || t.tlp_at > t.rto_at {
            return;
        }
        t.tlp_at = Instant::NEVER;
        let in_flight = t.snd_max.gt(t.snd_una) && t.state.awaits_acks();
        // Also in fast recovery: there the probe resends a retransmission that was lost
        // again, which NewReno alone can only repair with the RTO.
        if in_flight && !t.persist && t.tlp_probes < MAX_PROBES {
            cx.stats.tcp_loss_probes += 1;
            t.tlp_probes += 1;
            t.retransmit_one = true;
            // The RTO restarts from the probe (Linux's tcp_send_loss_probe).
            t.rto_at = now.add_micros(t.rto as u64);
            let gen = t.gen;
            self.mark_dirty(idx, gen);
        }
    }

    /// The retransmission timer ran out: a persist probe, or, with something outstanding,
    /// the timeout (after too many retries) or a backed-off retransmission.
    fn rto_timer(&mut self, cx: &mut Ctx<'_>, idx: u32, now: Instant) {
        let t = &mut self.conns[idx as usize];
        let gen = t.gen;
        t.rto_at = Instant::NEVER;
        t.tlp_at = Instant::NEVER;
        if t.persist {
            // Zero-window probe (or, on a small open window, the silly-window override
            // that output sends instead); backoff like the RTO.
            if t.snd_wnd == 0 {
                cx.stats.tcp_zero_window_probes += 1;
            }
            t.persist_backoff = t.persist_backoff.saturating_add(1).min(16);
            t.retransmit_one = true; // output sends a 1-byte probe while persisting
            self.mark_dirty(idx, gen);
            return;
        }
        let handshake = matches!(t.state, TcpState::SynSent | TcpState::SynReceived);
        if !t.snd_max.gt(t.snd_una) && !handshake {
            return;
        }
        let limit = if handshake {
            cx.cfg.syn_retransmits
        } else {
            cx.cfg.max_retransmits
        };
        if t.retries >= limit {
            cx.stats.tcp_timeouts += 1;
            self.abort_conn(cx, idx, Error::TimedOut);
            return;
        }
        cx.stats.tcp_rto_expired += 1;
        t.retries += 1;
        if t.retries >= SUSPECT_NEXT_HOP_AFTER {
            cx.out.suspects.push(t.remote_ip);
        }
        t.rto = ((t.rto as u64) * 2).min(dur_us(cx.cfg.max_rto) as u64) as u32;
        // Re-armed here, not only when the retransmission leaves: it may not leave
        // (next hop unresolved) and the connection must still time out.
        t.rto_at = now.add_micros(t.rto as u64);
        t.rtt_active = false;
        if handshake {
            t.snd_nxt = t.iss;
        } else {
            // RFC 5681 3.1 eq. 4 and RFC 6582 recovery guard; go back N.
            let mss = t.mss;
            let flight = t.flight();
            t.cc.on_rto(flight, mss);
            t.in_recovery = false;
            t.dupacks = 0;
            t.recover = t.snd_max;
            t.snd_nxt = t.snd_una;
            // RFC 6675 5.1: after a timeout the scoreboard is not trusted.
            t.sacked_len = 0;
            t.retransmit_hole = false;
        }
        self.mark_dirty(idx, gen);
    }
}
