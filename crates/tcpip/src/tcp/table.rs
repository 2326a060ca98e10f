//! The connection table: allocating and freeing slots, moving to CLOSED, aborting.

use super::controller::Congestion;
use super::output::ack_seq;
use super::tcb::Owner;
use super::{address_words, dur_us, flow_key, is_link_local, Ctx, Tcb, Tcp, TcpState};
use crate::ring::Ring;
use crate::util::keyed_hash;
use crate::{Error, EventKind, Handle, Instant};
use wirespeed_wire::tcp::flags;
use wirespeed_wire::{IpAddress, SeqNumber, TcpOptions, TcpRepr};

/// Spare send and receive rings kept for the next connections (each kind).
const POOL_SPARE: usize = 64;

impl Tcp {
    /// Bytes of send and receive rings held, by connections and spare.
    pub(crate) fn buffer_bytes(&self) -> usize {
        let held: usize = (self.conns.iter())
            .map(|t| t.send.capacity() + t.recv.capacity())
            .sum();
        let spare: usize = (self.send_pool.iter().chain(self.recv_pool.iter()))
            .map(|b| b.len())
            .sum();
        held + spare
    }

    /// Gives connection `idx` its send and receive rings, from the pools when they hold
    /// some. A passive open gets them only when its handshake completes: a half-open
    /// connection holds no buffer, so a SYN flood costs a slot per SYN and nothing more.
    pub(super) fn attach_buffers(&mut self, cx: &Ctx<'_>, idx: u32) {
        if self.conns[idx as usize].recv.capacity() != 0 {
            return; // an active open has had them from the start
        }
        let send = self
            .send_pool
            .pop()
            .map(Ring::from_box)
            .unwrap_or_else(|| Ring::new(cx.cfg.send_buffer));
        let recv = self
            .recv_pool
            .pop()
            .map(Ring::from_box)
            .unwrap_or_else(|| Ring::new(cx.cfg.recv_buffer));
        let t = &mut self.conns[idx as usize];
        t.send = send;
        t.recv = recv;
        t.send.clear();
        t.recv.clear();
    }

    pub(super) fn alloc_tcb(
        &mut self,
        cx: &mut Ctx<'_>,
        remote: IpAddress,
        local: IpAddress,
        rport: u16,
        lport: u16,
    ) -> Option<u32> {
        if self.live_conns >= cx.cfg.max_connections {
            cx.stats.tcp_table_full += 1;
            return None;
        }
        let idx = match self.free_conns.pop() {
            Some(i) => i,
            None => {
                self.conns.push(Tcb::empty());
                (self.conns.len() - 1) as u32
            }
        };
        let now = cx.now;
        let secret = cx.cfg.secret;
        let key = flow_key(remote, is_link_local(local), rport, lport);
        // RFC 6528: ISN = clock (4 µs ticks) + keyed hash of the 4-tuple.
        let [r0, r1] = address_words(remote);
        let [l0, l1] = address_words(local);
        let ports = ((rport as u64) << 16) | lport as u64;
        let isn = (keyed_hash(secret, &[r0, r1, ports, l0, l1]) as u32)
            .wrapping_add((now.micros() / 4) as u32);
        let gen = self.conns[idx as usize].gen.wrapping_add(1);
        let mut rcv_wscale = 0u8;
        while rcv_wscale < 14 && (cx.cfg.recv_buffer >> rcv_wscale) > 65535 {
            rcv_wscale += 1;
        }
        let t = &mut self.conns[idx as usize];
        *t = Tcb::empty();
        t.gen = gen;
        t.in_use = true;
        t.remote_ip = remote;
        t.to_link_local = is_link_local(local);
        t.remote_port = rport;
        t.local_port = lport;
        t.iss = SeqNumber(isn);
        t.snd_una = t.iss;
        t.snd_nxt = t.iss;
        t.snd_max = t.iss;
        t.recover = t.iss;
        t.rcv_wscale = if cx.cfg.window_scaling { rcv_wscale } else { 0 };
        t.rto = dur_us(cx.cfg.initial_rto);
        t.cc = Congestion::new(cx.cfg.congestion_control);
        t.ts_offset = (isn >> 7).rotate_left(13);
        self.demux.insert(key, idx);
        self.live_conns += 1;
        Some(idx)
    }

    /// Returns the slot and its buffers to the pools.
    pub(super) fn free_tcb(&mut self, cx: &mut Ctx<'_>, idx: u32) {
        let t = &mut self.conns[idx as usize];
        if !t.in_use {
            return;
        }
        let key = t.key();
        if let Owner::Listener(li) = t.owner {
            if t.state == TcpState::SynReceived {
                if let Some(l) = self.listeners.get_mut(li as usize) {
                    l.syn_rcvd = l.syn_rcvd.saturating_sub(1);
                }
            }
        }
        let send = std::mem::replace(&mut t.send, Ring::from_box(Box::new([])));
        let recv = std::mem::replace(&mut t.recv, Ring::from_box(Box::new([])));
        t.in_use = false;
        t.gen = t.gen.wrapping_add(1);
        t.state = TcpState::Closed;
        t.in_dirty = false;
        if self.demux.get(&key) == Some(&idx) {
            self.demux.remove(&key);
        }
        // Spare rings beyond POOL_SPARE go back to the allocator: a burst of connections
        // leaves no lasting footprint (docs/TCPIP.md, "Memory under attack").
        if send.capacity() == cx.cfg.send_buffer && self.send_pool.len() < POOL_SPARE {
            self.send_pool.push(send.into_box());
        }
        if recv.capacity() == cx.cfg.recv_buffer && self.recv_pool.len() < POOL_SPARE {
            self.recv_pool.push(recv.into_box());
        }
        self.free_conns.push(idx);
        self.live_conns -= 1;
    }

    /// Moves to CLOSED: leaves the demux table, stops timers, tells the application.
    /// Frees the slot at once unless the application still holds the handle.
    pub(super) fn set_closed(&mut self, cx: &mut Ctx<'_>, idx: u32, err: Option<Error>) {
        let t = &mut self.conns[idx as usize];
        if !t.in_use {
            return;
        }
        let key = t.key();
        if let (TcpState::SynReceived, Owner::Listener(li)) = (t.state, t.owner) {
            if let Some(l) = self.listeners.get_mut(li as usize) {
                l.syn_rcvd = l.syn_rcvd.saturating_sub(1);
            }
        }
        let t = &mut self.conns[idx as usize];
        t.state = TcpState::Closed;
        if t.error.is_none() {
            t.error = err;
        }
        t.rto_at = Instant::NEVER;
        t.delack_at = Instant::NEVER;
        t.keep_at = Instant::NEVER;
        t.send.clear();
        if self.demux.get(&key) == Some(&idx) {
            self.demux.remove(&key);
        }
        match t.owner {
            Owner::User => {
                let h = Handle::Tcp(t.handle(idx));
                let mut m = t.ev_mask;
                cx.event(h, EventKind::Readable, &mut m);
                cx.event(h, EventKind::Closed, &mut m);
                self.conns[idx as usize].ev_mask = m;
            }
            Owner::Released | Owner::Listener(_) => self.free_tcb(cx, idx),
        }
    }

    /// Sends RST (if synchronized) and closes with `err`.
    pub(super) fn abort_conn(&mut self, cx: &mut Ctx<'_>, idx: u32, err: Error) {
        let t = &self.conns[idx as usize];
        if !t.in_use {
            return;
        }
        if !matches!(
            t.state,
            TcpState::Closed | TcpState::SynSent | TcpState::TimeWait
        ) {
            let repr = TcpRepr {
                src_port: t.local_port,
                dst_port: t.remote_port,
                seq: ack_seq(t),
                ack: Some(t.rcv_nxt),
                flags: flags::RST,
                window: 0,
                options: TcpOptions::default(),
            };
            let (ip, mac) = (t.remote_ip, t.mac_at(self.neigh_epoch));
            cx.send_ctrl_with(t.local_ip(cx.cfg), ip, mac, &repr, t.ip_options());
        }
        self.set_closed(cx, idx, Some(err));
    }

    pub(super) fn conn_event(&mut self, cx: &mut Ctx<'_>, idx: u32, kind: EventKind) {
        let t = &self.conns[idx as usize];
        if t.owner != Owner::User {
            return;
        }
        let h = Handle::Tcp(t.handle(idx));
        let mut m = t.ev_mask;
        cx.event(h, kind, &mut m);
        self.conns[idx as usize].ev_mask = m;
    }
}
