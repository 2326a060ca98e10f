//! The handshake: SYN_SENT (active open) and SYN_RECEIVED (passive or simultaneous open),
//! and the option negotiation both share.

use super::congestion::CongestionControl;
use super::tcb::Owner;
use super::{dur_us, Ctx, Tcb, Tcp, TcpState, DEFAULT_MSS};
use crate::{Error, EventKind, Handle, Instant, ListenerId};
use wirespeed_wire::tcp::flags;
use wirespeed_wire::{MacAddr, SeqNumber, TcpOptions, TcpRepr};

impl Tcp {
    /// A segment in SYN_SENT: the peer's SYN-ACK (or its SYN: a simultaneous open), or RST.
    pub(super) fn syn_sent_input(
        &mut self,
        cx: &mut Ctx<'_>,
        idx: u32,
        src_mac: MacAddr,
        repr: &TcpRepr,
    ) {
        let now = cx.now;
        let (min_rto, max_rto) = (dur_us(cx.cfg.min_rto), dur_us(cx.cfg.max_rto));
        let has_syn = repr.flags & flags::SYN != 0;
        let has_rst = repr.flags & flags::RST != 0;
        let t = &mut self.conns[idx as usize];
        let gen = t.gen;
        if let Some(ack) = repr.ack {
            if ack.le(t.iss) || ack.gt(t.snd_max) {
                if !has_rst {
                    cx.stats.tcp_bad_ack += 1;
                    let out = TcpRepr {
                        src_port: repr.dst_port,
                        dst_port: repr.src_port,
                        seq: ack,
                        ack: None,
                        flags: flags::RST,
                        window: 0,
                        options: TcpOptions::default(),
                    };
                    let (ip, local) = (t.remote_ip, t.local_ip(cx.cfg));
                    cx.send_ctrl(local, ip, Some(src_mac), &out);
                }
                return;
            }
        }
        if has_rst {
            if repr.ack.is_some() {
                cx.stats.tcp_resets_received += 1;
                self.set_closed(cx, idx, Some(Error::ConnectionRefused));
            }
            return;
        }
        if !has_syn {
            return;
        }
        let (ws, ts, sack) = (t.offer_wscale, t.ts_enabled, t.sack_ok);
        let mss_limit = cx.cfg.mss_for(t.remote_ip);
        t.irs = repr.seq;
        t.rcv_nxt = repr.seq.add(1);
        t.rcv_wup = t.rcv_nxt;
        negotiate(t, &repr.options, ws, ts, sack, mss_limit);
        t.set_snd_wnd(repr.window as u32);
        t.snd_wl1 = repr.seq;
        if let Some(ack) = repr.ack {
            t.snd_wl2 = ack;
            t.snd_una = ack;
            t.snd_nxt = t.snd_nxt.max(ack);
            if t.rtt_active && t.retries == 0 {
                let s = now.since(t.rtt_at).as_micros() as u32;
                t.update_rtt(s, min_rto, max_rto);
            }
            t.rtt_active = false;
            t.retries = 0;
            t.rto_at = Instant::NEVER;
            t.state = TcpState::Established;
            t.ack_now = true;
            let mss = t.mss;
            t.cc.on_established(mss);
            if let Some(k) = cx.cfg.keepalive {
                t.keep_at = now.add(k.idle);
            }
            self.mark_dirty(idx, gen);
            self.conn_event(cx, idx, EventKind::Writable);
        } else {
            // Simultaneous open: answer with SYN-ACK from the same ISS.
            t.state = TcpState::SynReceived;
            t.snd_nxt = t.iss;
            self.mark_dirty(idx, gen);
        }
        self.schedule(idx);
    }

    /// The ACK that completes a passive (or simultaneous) open, after the checks all states
    /// share. False: the segment is answered (RST for a bad ACK) and processing stops.
    pub(super) fn syn_received_ack(
        &mut self,
        cx: &mut Ctx<'_>,
        idx: u32,
        src_mac: MacAddr,
        repr: &TcpRepr,
        seq: SeqNumber,
        ack: SeqNumber,
    ) -> bool {
        let now = cx.now;
        let (min_rto, max_rto) = (dur_us(cx.cfg.min_rto), dur_us(cx.cfg.max_rto));
        let t = &mut self.conns[idx as usize];
        let gen = t.gen;
        if ack.le(t.snd_una) || ack.gt(t.snd_max) {
            cx.stats.tcp_bad_ack += 1;
            let out = TcpRepr {
                src_port: repr.dst_port,
                dst_port: repr.src_port,
                seq: ack,
                ack: None,
                flags: flags::RST,
                window: 0,
                options: TcpOptions::default(),
            };
            let (ip, local) = (t.remote_ip, t.local_ip(cx.cfg));
            cx.send_ctrl(local, ip, Some(src_mac), &out);
            return false;
        }
        self.attach_buffers(cx, idx);
        let t = &mut self.conns[idx as usize];
        t.state = TcpState::Established;
        // The ACK covers our SYN; whatever else it covers is data, for `ack_input`.
        if t.rtt_active && t.retries == 0 {
            let s = now.since(t.rtt_at).as_micros().min(u32::MAX as u128) as u32;
            t.update_rtt(s, min_rto, max_rto);
        }
        t.rtt_active = false;
        t.retries = 0;
        t.snd_una = t.iss.add(1);
        t.snd_nxt = t.snd_nxt.max(t.snd_una);
        if t.snd_max.le(t.snd_una) {
            t.rto_at = Instant::NEVER;
        }
        // Data queued during the handshake (simultaneous open) can go now.
        self.mark_dirty(idx, gen);
        let t = &mut self.conns[idx as usize];
        let mss = t.mss;
        t.cc.on_established(mss);
        let w = (repr.window as u32) << t.snd_wscale;
        t.set_snd_wnd(w);
        t.snd_wl1 = seq;
        t.snd_wl2 = ack;
        if let Some(k) = cx.cfg.keepalive {
            t.keep_at = now.add(k.idle);
        }
        match t.owner {
            Owner::Listener(li) => {
                let l = &mut self.listeners[li as usize];
                l.syn_rcvd = l.syn_rcvd.saturating_sub(1);
                l.accept_queue.push_back((idx, gen));
                let h = Handle::Listener(ListenerId {
                    idx: li,
                    gen: l.gen,
                });
                let mut m = l.ev_mask;
                cx.event(h, EventKind::Acceptable, &mut m);
                self.listeners[li as usize].ev_mask = m;
            }
            Owner::User => self.conn_event(cx, idx, EventKind::Writable),
            Owner::Released => {}
        }
        true
    }
}

/// Applies the peer's SYN options (and ours as allowed) to a new connection.
pub(super) fn negotiate(
    t: &mut Tcb,
    o: &TcpOptions,
    wscale_ok: bool,
    ts_ok: bool,
    sack_ok: bool,
    mss_limit: u16,
) {
    match (wscale_ok, o.window_scale) {
        (true, Some(ws)) => {
            t.snd_wscale = ws.min(14);
            t.offer_wscale = true;
        }
        _ => {
            t.snd_wscale = 0;
            t.rcv_wscale = 0;
            t.offer_wscale = false;
        }
    }
    t.ts_enabled = ts_ok && o.timestamps.is_some();
    if let Some((tsval, _)) = o.timestamps {
        t.ts_recent = tsval;
    }
    t.sack_ok = sack_ok && o.sack_permitted;
    let peer_mss = o.mss.unwrap_or(DEFAULT_MSS).max(64) as u32;
    let ts_overhead = if t.ts_enabled { 12 } else { 0 };
    t.mss = peer_mss.min(mss_limit as u32) - ts_overhead;
}
