//! LISTEN: passive opens, SYN cookies when the backlog is full, and RSTs for segments that
//! match no connection.

use super::handshake::negotiate;
use super::tcb::Owner;
use super::{address_words, Ctx, Tcp, TcpState, DEFAULT_MSS};
use crate::util::keyed_hash;
use wirespeed_wire::ip_options_echo::EchoedOptions;
use wirespeed_wire::tcp::flags;
use wirespeed_wire::{ipv4, IpAddress, MacAddr, SeqNumber, TcpControl, TcpOptions, TcpRepr};

/// SYN-cookie MSS table (3 bits in the cookie).
const COOKIE_MSS: [u16; 8] = [536, 1200, 1360, 1400, 1440, 1460, 4036, 8960];
/// Lifetime of a SYN-cookie time slot in microseconds (64 s, as Linux).
const COOKIE_SLOT_US: u64 = 64_000_000;

impl Tcp {
    /// A segment with no connection, from `src` to `local` (one of our addresses): passive
    /// open, SYN cookie, or RST.
    pub(super) fn listen_input(
        &mut self,
        cx: &mut Ctx<'_>,
        src_mac: MacAddr,
        src: IpAddress,
        local: IpAddress,
        repr: &TcpRepr,
        payload: &[u8],
    ) {
        let li = match self.listen_ports.get(&repr.dst_port) {
            Some(&li) => li,
            None => {
                cx.stats.tcp_no_listener += 1;
                self.reply_rst(cx, src_mac, src, local, repr, payload.len());
                return;
            }
        };
        // Linux (tcp_inbound_hash) drops a signed segment for a socket without a key.
        if repr.options.md5_signature || repr.options.auth_malformed {
            cx.stats.tcp_md5_unexpected += 1;
            return;
        }
        let f = repr.flags;
        if f & flags::RST != 0 {
            return;
        }
        // RFC 9293 3.10.7.2: without ACK only a SYN is taken (Linux: not with FIN); anything
        // else is dropped unanswered, so FIN, NULL and Xmas scans learn nothing.
        if repr.ack.is_none() && (f & flags::SYN == 0 || f & flags::FIN != 0) {
            cx.stats.tcp_listen_dropped += 1;
            return;
        }
        let syn = f & flags::SYN != 0;
        if syn && repr.ack.is_none() {
            let l = &self.listeners[li as usize];
            if l.syn_rcvd + l.accept_queue.len() >= l.backlog {
                if cx.cfg.syn_cookies {
                    self.send_syn_cookie(cx, src_mac, src, local, repr);
                } else {
                    cx.stats.tcp_backlog_full += 1;
                }
                return;
            }
            let Some(idx) = self.alloc_tcb(cx, src, local, repr.src_port, repr.dst_port) else {
                // The table is full (of half-open connections, under a flood): a cookie
                // holds no slot, and a real client's handshake still completes.
                if cx.cfg.syn_cookies {
                    self.send_syn_cookie(cx, src_mac, src, local, repr);
                }
                return;
            };
            self.listeners[li as usize].syn_rcvd += 1;
            let (wscale_ok, ts_ok, sack_ok) = (
                cx.cfg.window_scaling,
                cx.cfg.timestamps,
                cx.cfg.sack_permitted,
            );
            let (ip_opts, mss_limit) = passive_ip_options(cx, src);
            let keep = cx.cfg.keepalive;
            let t = &mut self.conns[idx as usize];
            t.state = TcpState::SynReceived;
            t.owner = Owner::Listener(li);
            t.set_mac(src_mac, self.neigh_epoch);
            t.ip_opts = ip_opts;
            t.irs = repr.seq;
            t.rcv_nxt = repr.seq.add(1);
            t.rcv_wup = t.rcv_nxt;
            negotiate(t, &repr.options, wscale_ok, ts_ok, sack_ok, mss_limit);
            // RFC 3168 6.1.1: an ECN-setup SYN has ECE and CWR, and is itself not ECT.
            let ecn_setup = flags::ECE | flags::CWR;
            t.ecn = cx.cfg.ecn && f & ecn_setup == ecn_setup && cx.ecn == ipv4::ecn::NOT_ECT;
            t.ecn_recover = t.iss;
            cx.stats.tcp_ecn_negotiated += t.ecn as u64;
            t.set_snd_wnd(repr.window as u32); // never scaled in a SYN
            t.snd_wl1 = repr.seq;
            let _ = keep;
            let g = t.gen;
            self.mark_dirty(idx, g);
            return;
        }
        if !syn && repr.ack.is_some() && cx.cfg.syn_cookies {
            if let Some(mss) = self.check_syn_cookie(cx, src, repr) {
                let l = &self.listeners[li as usize];
                if l.accept_queue.len() >= l.backlog {
                    cx.stats.tcp_backlog_full += 1;
                    return;
                }
                let Some(idx) = self.alloc_tcb(cx, src, local, repr.src_port, repr.dst_port) else {
                    return;
                };
                cx.stats.tcp_syn_cookies_accepted += 1;
                self.listeners[li as usize].syn_rcvd += 1;
                // Linux's cookie_v4_check takes the options of the ACK that completes it.
                let (ip_opts, mss_limit) = passive_ip_options(cx, src);
                let t = &mut self.conns[idx as usize];
                let iss = repr.ack.unwrap_or_default().sub(1);
                t.state = TcpState::SynReceived;
                t.owner = Owner::Listener(li);
                t.set_mac(src_mac, self.neigh_epoch);
                t.ip_opts = ip_opts;
                t.iss = iss;
                t.snd_una = iss;
                t.snd_nxt = iss.add(1);
                t.snd_max = iss.add(1);
                t.irs = repr.seq.sub(1);
                t.rcv_nxt = repr.seq;
                t.rcv_wup = t.rcv_nxt;
                t.rcv_wscale = 0; // the cookie could not carry the scale we did not offer
                t.mss = (mss as u32).min(mss_limit as u32);
                t.snd_wl1 = repr.seq;
                self.tcb_input(cx, idx, src_mac, repr, payload);
                return;
            }
            cx.stats.tcp_syn_cookies_rejected += 1;
        }
        cx.stats.tcp_no_listener += 1;
        self.reply_rst(cx, src_mac, src, local, repr, payload.len());
    }

    fn cookie_hash(
        &self,
        cx: &Ctx<'_>,
        src: IpAddress,
        repr: &TcpRepr,
        their_isn: u32,
        slot: u64,
    ) -> u32 {
        let [a0, a1] = address_words(src);
        let ports = ((repr.src_port as u64) << 16) | repr.dst_port as u64;
        let words = [a0, a1, ports, their_isn as u64, slot];
        keyed_hash(cx.cfg.secret ^ 0x0c00_c1e5, &words) as u32
    }

    fn send_syn_cookie(
        &mut self,
        cx: &mut Ctx<'_>,
        src_mac: MacAddr,
        src: IpAddress,
        local: IpAddress,
        repr: &TcpRepr,
    ) {
        let slot = cx.now.micros() / COOKIE_SLOT_US;
        let peer_mss = repr
            .options
            .mss
            .unwrap_or(DEFAULT_MSS)
            .min(cx.cfg.mss_for(src));
        let mss_idx = COOKIE_MSS.iter().rposition(|&m| m <= peer_mss).unwrap_or(0) as u32;
        let h = self.cookie_hash(cx, src, repr, repr.seq.0, slot);
        let cookie = (((slot & 31) as u32) << 27) | (h & 0x07ff_fff8) | mss_idx;
        let out = TcpRepr {
            src_port: repr.dst_port,
            dst_port: repr.src_port,
            seq: SeqNumber(cookie),
            ack: Some(repr.seq.add(1)),
            flags: flags::SYN,
            window: cx.cfg.recv_buffer.min(65535) as u16,
            options: TcpOptions {
                mss: Some(cx.cfg.mss_for(src)),
                ..Default::default()
            },
        };
        cx.stats.tcp_syn_cookies_sent += 1;
        // A SYN whose options cannot be echoed gets a SYN-ACK without (tcp_v4_save_options).
        let ip_opts = cx.reply_opts.unwrap_or_default();
        cx.send_ctrl_with(local, src, Some(src_mac), &out, ip_opts);
    }

    /// Validates the ACK of a cookie SYN-ACK; returns the MSS it encodes.
    fn check_syn_cookie(&self, cx: &Ctx<'_>, src: IpAddress, repr: &TcpRepr) -> Option<u16> {
        if repr.flags & (flags::SYN | flags::RST | flags::FIN) != 0 {
            return None;
        }
        let cookie = repr.ack?.sub(1).0;
        let their_isn = repr.seq.sub(1).0;
        let now_slot = cx.now.micros() / COOKIE_SLOT_US;
        for slot in [now_slot, now_slot.wrapping_sub(1)] {
            if (slot & 31) as u32 != cookie >> 27 {
                continue;
            }
            let h = self.cookie_hash(cx, src, repr, their_isn, slot);
            if h & 0x07ff_fff8 == cookie & 0x07ff_fff8 {
                return Some(COOKIE_MSS[(cookie & 7) as usize]);
            }
        }
        None
    }

    /// RST in reply to a segment from `src` to `local` that has no connection (RFC 9293
    /// 3.10.7.1), from the address it came to.
    pub(super) fn reply_rst(
        &mut self,
        cx: &mut Ctx<'_>,
        src_mac: MacAddr,
        src: IpAddress,
        local: IpAddress,
        repr: &TcpRepr,
        payload_len: usize,
    ) {
        if repr.control() == TcpControl::Rst {
            return;
        }
        let out = match repr.ack {
            Some(ack) => TcpRepr {
                src_port: repr.dst_port,
                dst_port: repr.src_port,
                seq: ack,
                ack: None,
                flags: flags::RST,
                window: 0,
                options: TcpOptions::default(),
            },
            None => {
                let seg_len = payload_len
                    + (repr.flags & flags::SYN != 0) as usize
                    + (repr.flags & flags::FIN != 0) as usize;
                TcpRepr {
                    src_port: repr.dst_port,
                    dst_port: repr.src_port,
                    seq: SeqNumber(0),
                    ack: Some(repr.seq.add(seg_len)),
                    flags: flags::RST,
                    window: 0,
                    options: TcpOptions::default(),
                }
            }
        };
        cx.send_ctrl(local, src, Some(src_mac), &out);
    }
}

/// The IP options a passive open's segments carry (those of the segment that opens it,
/// echoed; none where they cannot be), and the MSS limit they leave: they take room from the
/// MSS (Linux's `icsk_ext_hdr_len`), but not from the MSS we offer.
fn passive_ip_options(cx: &Ctx<'_>, src: IpAddress) -> (Option<Box<EchoedOptions>>, u16) {
    let opts = cx.reply_opts.unwrap_or_default();
    let mss_limit = cx.cfg.mss_for(src) - opts.len() as u16;
    ((!opts.is_empty()).then(|| Box::new(opts)), mss_limit)
}
