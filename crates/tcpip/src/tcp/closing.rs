//! Closing: our FIN acknowledged (FIN_WAIT_1, CLOSING, LAST_ACK) and the peer's FIN
//! received in order (to CLOSE_WAIT, CLOSING or TIME_WAIT). Timeouts of the closing states
//! (TIME_WAIT, the orphan FIN_WAIT_2 limit) are in `timers.rs`.

use super::tcb::Owner;
use super::{Ctx, Tcp, TcpState};
use crate::{EventKind, Instant};

impl Tcp {
    /// An ACK covered our FIN. False when that closed the connection (LAST_ACK).
    pub(super) fn our_fin_acked(&mut self, cx: &mut Ctx<'_>, idx: u32) -> bool {
        let now = cx.now;
        let t = &mut self.conns[idx as usize];
        match t.state {
            TcpState::FinWait1 => {
                t.state = TcpState::FinWait2;
                t.rto_at = Instant::NEVER;
                if t.owner == Owner::Released {
                    t.keep_at = now.add(cx.cfg.fin_timeout);
                }
            }
            TcpState::Closing => {
                t.state = TcpState::TimeWait;
                t.rto_at = Instant::NEVER;
                t.keep_at = now.add(cx.cfg.time_wait);
            }
            TcpState::LastAck => {
                self.set_closed(cx, idx, None);
                return false;
            }
            _ => {}
        }
        true
    }

    /// The peer's FIN arrived in sequence (`fin_acked`: this segment also acknowledged ours).
    pub(super) fn fin_input(&mut self, cx: &mut Ctx<'_>, idx: u32, fin_acked: bool) {
        let now = cx.now;
        let gen = self.conns[idx as usize].gen;
        let t = &mut self.conns[idx as usize];
        t.rcv_nxt = t.rcv_nxt.add(1);
        t.fin_received = true;
        // Nothing lies beyond a FIN: Linux's tcp_fin purges its out-of-order queue.
        t.ooo_len = 0;
        t.ooo_fin = false;
        let our_fin_acked = t.fin_queued && t.snd_una.gt(t.fin_seq()) || fin_acked;
        match t.state {
            TcpState::Established => {
                // Linux's tcp_fin delays this ACK (pingpong): an application that closes at
                // EOF, as servers do, then sends one FIN+ACK instead of an ACK and a FIN.
                t.state = TcpState::CloseWait;
                if !t.ack_now && t.delack_at == Instant::NEVER {
                    t.delack_at = now.add(cx.cfg.delayed_ack);
                }
            }
            _ => t.ack_now = true,
        }
        match t.state {
            TcpState::CloseWait => {}
            TcpState::FinWait1 if !our_fin_acked => t.state = TcpState::Closing,
            TcpState::FinWait1 | TcpState::FinWait2 => {
                t.state = TcpState::TimeWait;
                t.rto_at = Instant::NEVER;
                t.keep_at = now.add(cx.cfg.time_wait);
            }
            _ => {}
        }
        self.mark_dirty(idx, gen);
        self.conn_event(cx, idx, EventKind::Readable);
    }
}
