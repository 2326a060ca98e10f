//! The socket calls on connections and listeners (the stack's `tcp_*` methods forward here).

use super::congestion::CongestionControl;
use super::tcb::Owner;
use super::{flow_key, is_link_local, Ctx, Listener, Tcb, Tcp, TcpInfo, TcpState};
use crate::{Config, ConnId, Error, EventKind, Handle, ListenerId, Result};
use std::collections::VecDeque;
use wirespeed_wire::IpAddress;

impl Tcp {
    pub(crate) fn listen(&mut self, port: u16, backlog: usize) -> Result<ListenerId> {
        if port == 0 {
            return Err(Error::InvalidInput);
        }
        if self.listen_ports.contains_key(&port) {
            return Err(Error::AddrInUse);
        }
        let backlog = backlog.clamp(1, 65535);
        let idx = match self.listeners.iter().position(|l| !l.open) {
            Some(i) => i,
            None => {
                self.listeners.push(Listener {
                    gen: 0,
                    open: false,
                    port: 0,
                    backlog: 0,
                    syn_rcvd: 0,
                    accept_queue: VecDeque::new(),
                    ev_mask: 0,
                });
                self.listeners.len() - 1
            }
        };
        let l = &mut self.listeners[idx];
        l.gen = l.gen.wrapping_add(1);
        l.open = true;
        l.port = port;
        l.backlog = backlog;
        l.syn_rcvd = 0;
        l.accept_queue.clear();
        l.accept_queue.reserve(backlog);
        l.ev_mask = 0;
        self.listen_ports.insert(port, idx as u32);
        Ok(ListenerId {
            idx: idx as u32,
            gen: l.gen,
        })
    }

    pub(super) fn listener_ok(&self, id: ListenerId) -> Result<usize> {
        match self.listeners.get(id.idx as usize) {
            Some(l) if l.open && l.gen == id.gen => Ok(id.idx as usize),
            _ => Err(Error::InvalidHandle),
        }
    }

    pub(crate) fn unlisten(&mut self, cx: &mut Ctx<'_>, id: ListenerId) -> Result<()> {
        let li = self.listener_ok(id)?;
        let port = self.listeners[li].port;
        self.listen_ports.remove(&port);
        self.listeners[li].open = false;
        self.listeners[li].gen = self.listeners[li].gen.wrapping_add(1);
        let queued: Vec<(u32, u32)> = self.listeners[li].accept_queue.drain(..).collect();
        for (idx, gen) in queued {
            if self.conns[idx as usize].gen == gen {
                self.abort_conn(cx, idx, Error::Aborted);
            }
        }
        // Half-open connections of this listener.
        for idx in 0..self.conns.len() as u32 {
            let t = &self.conns[idx as usize];
            if t.in_use && t.owner == Owner::Listener(li as u32) {
                self.abort_conn(cx, idx, Error::Aborted);
            }
        }
        self.listeners[li].syn_rcvd = 0;
        Ok(())
    }

    pub(crate) fn accept(&mut self, cx: &mut Ctx<'_>, id: ListenerId) -> Result<ConnId> {
        let li = self.listener_ok(id)?;
        while let Some((idx, gen)) = self.listeners[li].accept_queue.pop_front() {
            let t = &mut self.conns[idx as usize];
            if t.gen != gen || !t.in_use {
                continue;
            }
            t.owner = Owner::User;
            let h = t.handle(idx);
            // Report what arrived before the accept so the runtime need not guess.
            if t.recv.len() > 0 || t.fin_received || t.error.is_some() {
                let mut m = t.ev_mask;
                cx.event(Handle::Tcp(h), EventKind::Readable, &mut m);
                self.conns[idx as usize].ev_mask = m;
            }
            return Ok(h);
        }
        Err(Error::WouldBlock)
    }

    pub(crate) fn connect(
        &mut self,
        cx: &mut Ctx<'_>,
        remote: IpAddress,
        remote_port: u16,
        mut port_ok: impl FnMut(u16) -> bool,
    ) -> Result<ConnId> {
        let (lo, hi) = cx.cfg.ephemeral_ports;
        let span = (hi - lo) as u32 + 1;
        // No address of `remote`'s family: connect_from refuses it.
        let local = cx.local_addr(remote).unwrap_or(remote);
        for _ in 0..span {
            self.port_cursor = self.port_cursor.wrapping_add(1);
            let port = lo + (self.port_cursor % span) as u16;
            if self.listen_ports.contains_key(&port)
                || self.demux.contains_key(&flow_key(
                    remote,
                    is_link_local(local),
                    remote_port,
                    port,
                ))
            {
                continue;
            }
            if !port_ok(port) {
                continue;
            }
            return self.connect_from(cx, remote, remote_port, port);
        }
        Err(Error::NoPorts)
    }

    pub(crate) fn connect_from(
        &mut self,
        cx: &mut Ctx<'_>,
        remote: IpAddress,
        remote_port: u16,
        local_port: u16,
    ) -> Result<ConnId> {
        let local = match cx.local_addr(remote) {
            Some(a) if remote_port != 0 && local_port != 0 => a,
            _ => return Err(Error::InvalidInput),
        };
        if remote.is_unspecified() || remote.is_multicast() {
            return Err(Error::InvalidInput);
        }
        if self.demux.contains_key(&flow_key(
            remote,
            is_link_local(local),
            remote_port,
            local_port,
        )) {
            return Err(Error::AddrInUse);
        }
        let idx = self
            .alloc_tcb(cx, remote, local, remote_port, local_port)
            .ok_or(Error::TableFull)?;
        self.attach_buffers(cx, idx);
        let offer_wscale = cx.cfg.window_scaling;
        let t = &mut self.conns[idx as usize];
        t.state = TcpState::SynSent;
        t.owner = Owner::User;
        t.offer_wscale = offer_wscale;
        t.ts_enabled = cx.cfg.timestamps; // offered; cleared if the peer does not echo
        t.sack_ok = cx.cfg.sack_permitted;
        // Armed now, not at the first SYN: if ARP never resolves the next hop, the RTO
        // retries (re-asking ARP) and finally fails the connect with TimedOut.
        t.rto_at = cx.now.add_micros(t.rto as u64);
        let h = t.handle(idx);
        self.mark_dirty(idx, h.gen);
        self.schedule(idx);
        Ok(h)
    }

    pub(super) fn conn(&self, c: ConnId) -> Result<&Tcb> {
        match self.conns.get(c.idx as usize) {
            Some(t) if t.in_use && t.gen == c.gen && t.owner == Owner::User => Ok(t),
            _ => Err(Error::InvalidHandle),
        }
    }

    pub(super) fn conn_mut(&mut self, c: ConnId) -> Result<&mut Tcb> {
        match self.conns.get_mut(c.idx as usize) {
            Some(t) if t.in_use && t.gen == c.gen && t.owner == Owner::User => Ok(t),
            _ => Err(Error::InvalidHandle),
        }
    }

    pub(crate) fn state(&self, c: ConnId) -> Result<TcpState> {
        Ok(self.conn(c)?.state)
    }

    pub(crate) fn error(&self, c: ConnId) -> Result<Option<Error>> {
        Ok(self.conn(c)?.error)
    }

    pub(crate) fn endpoints(&self, c: ConnId) -> Result<(IpAddress, u16, u16)> {
        let t = self.conn(c)?;
        Ok((t.remote_ip, t.remote_port, t.local_port))
    }

    pub(crate) fn local_ip(&self, c: ConnId, cfg: &Config) -> Result<IpAddress> {
        Ok(self.conn(c)?.local_ip(cfg))
    }

    pub(crate) fn info(&self, c: ConnId) -> Result<TcpInfo> {
        let t = self.conn(c)?;
        Ok(TcpInfo {
            state: t.state,
            mss: t.mss,
            cwnd: t.cc.cwnd(),
            ssthresh: t.cc.ssthresh(),
            congestion: t.cc.algorithm(),
            in_flight: t.flight(),
            send_buffered: t.send.len() as u32,
            peer_window: t.snd_wnd,
            receive_window: t.rcv_window(),
            receive_buffered: t.recv.len() as u32,
            srtt_us: t.srtt,
            rto_us: t.rto,
            persist: t.persist,
            in_recovery: t.in_recovery,
            retries: t.retries,
        })
    }

    pub(crate) fn send_capacity(&self, c: ConnId) -> Result<usize> {
        Ok(self.conn(c)?.send.free())
    }

    pub(crate) fn recv_available(&self, c: ConnId) -> Result<usize> {
        Ok(self.conn(c)?.recv.len())
    }

    pub(crate) fn recv(&mut self, c: ConnId, buf: &mut [u8]) -> Result<usize> {
        let t = self.conn_mut(c)?;
        if t.recv.len() == 0 {
            if let Some(e) = t.error {
                return Err(e);
            }
            if t.fin_received || buf.is_empty() {
                return Ok(0);
            }
            return match t.state {
                TcpState::SynSent
                | TcpState::SynReceived
                | TcpState::Established
                | TcpState::FinWait1
                | TcpState::FinWait2 => Err(Error::WouldBlock),
                _ => Ok(0),
            };
        }
        let n = t.recv.pop(buf);
        // Window update: tell a sender we throttled that the window reopened.
        let free = t.rcv_window();
        let cap = t.recv.capacity() as u32;
        if t.last_adv_wnd < cap / 2 && free >= cap / 2 && !t.fin_received {
            t.ack_now = true;
            self.mark_dirty(c.idx, c.gen);
        }
        Ok(n)
    }

    pub(crate) fn recv_slices(&self, c: ConnId) -> Result<(&[u8], &[u8])> {
        Ok(self.conn(c)?.recv.slices())
    }

    pub(crate) fn recv_consume(&mut self, c: ConnId, n: usize) -> Result<()> {
        let t = self.conn_mut(c)?;
        t.recv.consume(n);
        let free = t.rcv_window();
        let cap = t.recv.capacity() as u32;
        if t.last_adv_wnd < cap / 2 && free >= cap / 2 && !t.fin_received {
            t.ack_now = true;
            self.mark_dirty(c.idx, c.gen);
        }
        Ok(())
    }

    pub(crate) fn send(&mut self, c: ConnId, data: &[u8]) -> Result<usize> {
        let t = self.conn_mut(c)?;
        if let Some(e) = t.error {
            return Err(e);
        }
        match t.state {
            TcpState::SynSent
            | TcpState::SynReceived
            | TcpState::Established
            | TcpState::CloseWait => {}
            TcpState::Closed => return Err(Error::NotConnected),
            _ => return Err(Error::BrokenPipe),
        }
        if t.fin_queued {
            return Err(Error::BrokenPipe);
        }
        if data.is_empty() {
            return Ok(0);
        }
        let n = t.send.push(data);
        if n == 0 {
            return Err(Error::WouldBlock);
        }
        if matches!(t.state, TcpState::Established | TcpState::CloseWait) {
            self.mark_dirty(c.idx, c.gen);
        }
        Ok(n)
    }

    pub(crate) fn shutdown(&mut self, cx: &mut Ctx<'_>, c: ConnId) -> Result<()> {
        self.conn(c)?;
        self.begin_close(cx, c.idx);
        Ok(())
    }

    pub(crate) fn close(&mut self, cx: &mut Ctx<'_>, c: ConnId) -> Result<()> {
        self.conn(c)?;
        self.begin_close(cx, c.idx);
        let t = &mut self.conns[c.idx as usize];
        t.owner = Owner::Released;
        match t.state {
            TcpState::Closed => self.free_tcb(cx, c.idx),
            TcpState::FinWait2 => {
                t.keep_at = cx.now.add(cx.cfg.fin_timeout);
                self.schedule(c.idx);
            }
            _ => {}
        }
        Ok(())
    }

    pub(crate) fn abort(&mut self, cx: &mut Ctx<'_>, c: ConnId) -> Result<()> {
        self.conn(c)?;
        self.abort_conn(cx, c.idx, Error::Aborted);
        if self.conns[c.idx as usize].in_use {
            self.free_tcb(cx, c.idx);
        }
        Ok(())
    }

    pub(super) fn begin_close(&mut self, cx: &mut Ctx<'_>, idx: u32) {
        let t = &mut self.conns[idx as usize];
        match t.state {
            TcpState::SynSent => {
                self.set_closed(cx, idx, None);
            }
            TcpState::SynReceived | TcpState::Established => {
                t.fin_queued = true;
                t.state = TcpState::FinWait1;
                let g = t.gen;
                self.mark_dirty(idx, g);
            }
            TcpState::CloseWait => {
                t.fin_queued = true;
                t.state = TcpState::LastAck;
                let g = t.gen;
                self.mark_dirty(idx, g);
            }
            _ => {}
        }
    }
}
