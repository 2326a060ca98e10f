//! TCP: connection table, state machine, output, timers and the socket API.
//!
//! One `Tcb` per connection lives in a slab (`Stack::conns`) indexed by a `u32`; the
//! 4-tuple demux is a hash map from a packed `u64` (remote address, remote port, local port;
//! the local address is the stack's own) to that index: one lookup per segment, no
//! allocation. Send and receive buffers are rings allocated once per connection and
//! recycled through pools.

use crate::ring::Ring;
use crate::stack::Stack;
use crate::util::keyed_hash;
use crate::{ConnId, Error, EventKind, Handle, Instant, ListenerId, Result, TxSink};
use std::collections::VecDeque;
use std::time::Duration;
use wirespeed_wire::checksum::TransportChecksum;
use wirespeed_wire::tcp::{fill_checksum, flags};
use wirespeed_wire::{
    ipv4, EtherType, IpProtocol, Ipv4Addr, MacAddr, SeqNumber, TcpOptions, TcpPacket, TcpRepr,
};

/// Connection states (RFC 9293). LISTEN is not here: listeners are separate objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TcpState {
    Closed,
    SynSent,
    SynReceived,
    Established,
    FinWait1,
    FinWait2,
    CloseWait,
    Closing,
    LastAck,
    TimeWait,
}

impl TcpState {
    /// Synchronized states in which data we sent may still await its ACK: an ACK advancing
    /// SND.UNA means something here (FIN_WAIT_2 and TIME_WAIT have nothing left in flight).
    fn awaits_acks(self) -> bool {
        matches!(
            self,
            TcpState::Established
                | TcpState::CloseWait
                | TcpState::FinWait1
                | TcpState::Closing
                | TcpState::LastAck
        )
    }
}

/// Who holds a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// Not yet accepted: in a listener's SYN_RCVD set or accept queue.
    Listener(u32),
    /// The application holds a `ConnId`.
    User,
    /// The application closed its handle; the stack finishes the connection and frees it.
    Released,
}

/// Most out-of-order ranges kept per connection (more are dropped and retransmitted).
const MAX_OOO: usize = 4;
/// Most SACKed ranges remembered per connection (more are ignored: retransmission stays
/// correct, only less precise).
const MAX_SACKED: usize = 4;
/// Dup-ACK threshold for fast retransmit.
const DUPACK_THRESHOLD: u8 = 3;
/// MSS assumed when the peer sends none (RFC 9293).
const DEFAULT_MSS: u16 = 536;
/// SYN-cookie MSS table (3 bits in the cookie).
const COOKIE_MSS: [u16; 8] = [536, 1200, 1360, 1400, 1440, 1460, 4036, 8960];
/// Lifetime of a SYN-cookie time slot in microseconds (64 s, as Linux).
const COOKIE_SLOT_US: u64 = 64_000_000;

/// Karn's rule (RFC 6298 3), widened: an ACK for a retransmitted segment cannot tell which
/// copy it answers, and the cumulative ACK past the timed segment waits for any earlier hole
/// to be repaired, so retransmitting the timed segment or anything before it cancels the
/// measurement. Without this a sample spans the whole loss recovery; a larger RTT then slows
/// the next recovery, whose sample is larger still (a smoothed RTT of 1.5 s was seen on a
/// sub-millisecond lab link under 1% loss).
fn karn(t: &mut Tcb, seq: SeqNumber) {
    if t.rtt_active && seq.le(t.rtt_seq) {
        t.rtt_active = false;
    }
}

/// What `Stack::tcp_info` reports for one connection; byte counts unscaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpInfo {
    pub state: TcpState,
    pub mss: u32,
    pub cwnd: u32,
    pub ssthresh: u32,
    /// Sent and not yet acknowledged.
    pub in_flight: u32,
    /// In the send buffer: in flight plus not yet sent.
    pub send_buffered: u32,
    /// The peer's receive window as we last learned it.
    pub peer_window: u32,
    pub receive_window: u32,
    /// Received in order, not yet read by the application.
    pub receive_buffered: u32,
    pub srtt_us: u32,
    pub rto_us: u32,
    /// Probing a zero window.
    pub persist: bool,
    pub in_recovery: bool,
    /// Consecutive retransmission timeouts.
    pub retries: u8,
}

pub(crate) struct Tcb {
    pub(crate) gen: u32,
    pub(crate) in_use: bool,
    pub(crate) state: TcpState,
    pub(crate) owner: Owner,
    pub(crate) error: Option<Error>,
    pub(crate) remote_ip: Ipv4Addr,
    pub(crate) remote_port: u16,
    pub(crate) local_port: u16,
    pub(crate) peer_mac: Option<MacAddr>,

    // Send side: `send` holds bytes from snd_una on (unacked, then unsent).
    pub(crate) iss: SeqNumber,
    pub(crate) snd_una: SeqNumber,
    pub(crate) snd_nxt: SeqNumber,
    pub(crate) snd_max: SeqNumber,
    pub(crate) snd_wnd: u32,
    pub(crate) snd_wl1: SeqNumber,
    pub(crate) snd_wl2: SeqNumber,
    pub(crate) snd_wscale: u8,
    pub(crate) send: Ring,
    /// The application is done writing: a FIN follows the buffered data.
    pub(crate) fin_queued: bool,
    pub(crate) mss: u32,
    pub(crate) cwnd: u32,
    pub(crate) ssthresh: u32,
    pub(crate) dupacks: u8,
    pub(crate) in_recovery: bool,
    pub(crate) recover: SeqNumber,
    pub(crate) retransmit_one: bool,
    /// SACK scoreboard: ranges above SND.UNA the peer reported holding, sorted.
    pub(crate) sacked: [(SeqNumber, SeqNumber); MAX_SACKED],
    pub(crate) sacked_len: u8,
    /// Next sequence the SACK-driven hole retransmission considers (this recovery episode).
    pub(crate) rexmit_next: SeqNumber,
    /// Retransmit the next un-SACKed hole (RFC 6675 NextSeg rule 1) on the next output.
    pub(crate) retransmit_hole: bool,

    // RTT estimation (RFC 6298), microseconds.
    pub(crate) srtt: u32,
    pub(crate) rttvar: u32,
    pub(crate) rto: u32,
    pub(crate) rtt_seq: SeqNumber,
    pub(crate) rtt_at: Instant,
    pub(crate) rtt_active: bool,
    pub(crate) retries: u8,

    // Receive side: `recv` holds in-order bytes not yet read; out-of-order bytes sit past
    // its end at their sequence offset, described by `ooo`.
    pub(crate) irs: SeqNumber,
    pub(crate) rcv_nxt: SeqNumber,
    pub(crate) rcv_wscale: u8,
    pub(crate) recv: Ring,
    pub(crate) ooo: [(SeqNumber, SeqNumber); MAX_OOO],
    pub(crate) ooo_len: u8,
    /// Start of the most recently received out-of-order segment (reported first in SACK).
    pub(crate) ooo_last: SeqNumber,
    pub(crate) fin_received: bool,
    pub(crate) last_adv_wnd: u32,
    /// Right edge of the window last advertised.
    pub(crate) rcv_adv: SeqNumber,
    /// RCV.NXT when we last sent an ACK (the left edge of the window the peer knows).
    pub(crate) rcv_wup: SeqNumber,

    // Options.
    pub(crate) ts_enabled: bool,
    pub(crate) ts_recent: u32,
    pub(crate) ts_offset: u32,
    pub(crate) sack_ok: bool,
    /// Offer window scaling in our SYN / SYN-ACK.
    pub(crate) offer_wscale: bool,

    // Timers; `rto_at` doubles as the persist timer while `persist` is set.
    pub(crate) rto_at: Instant,
    /// Tail loss probe (RFC 8985 section 7, simplified): when ACKs stop for about two RTTs
    /// with data in flight, resend the segment at SND.UNA. That repairs the first hole at
    /// once (a lost tail, or a retransmission lost again in recovery), or makes the receiver
    /// SACK what it has, instead of waiting out the RTO and going back N. At most
    /// `MAX_PROBES` per stall.
    pub(crate) tlp_at: Instant,
    pub(crate) tlp_probes: u8,
    pub(crate) persist: bool,
    pub(crate) persist_backoff: u8,
    pub(crate) delack_at: Instant,
    pub(crate) keep_at: Instant,
    pub(crate) keep_probes: u8,
    pub(crate) heap_at: Instant,

    pub(crate) ack_now: bool,
    /// Extra duplicate ACKs owed: RFC 5681 wants one per out-of-order segment, and several
    /// may arrive between two `transmit` calls.
    pub(crate) dup_acks_owed: u8,
    pub(crate) unacked_segs: u8,
    pub(crate) in_dirty: bool,
    pub(crate) ev_mask: u8,
}

impl Tcb {
    fn empty() -> Tcb {
        Tcb {
            gen: 0,
            in_use: false,
            state: TcpState::Closed,
            owner: Owner::Released,
            error: None,
            remote_ip: Ipv4Addr::UNSPECIFIED,
            remote_port: 0,
            local_port: 0,
            peer_mac: None,
            iss: SeqNumber(0),
            snd_una: SeqNumber(0),
            snd_nxt: SeqNumber(0),
            snd_max: SeqNumber(0),
            snd_wnd: 0,
            snd_wl1: SeqNumber(0),
            snd_wl2: SeqNumber(0),
            snd_wscale: 0,
            send: Ring::from_box(Box::new([])),
            fin_queued: false,
            mss: DEFAULT_MSS as u32,
            cwnd: 0,
            ssthresh: u32::MAX,
            dupacks: 0,
            in_recovery: false,
            recover: SeqNumber(0),
            retransmit_one: false,
            sacked: [(SeqNumber(0), SeqNumber(0)); MAX_SACKED],
            sacked_len: 0,
            rexmit_next: SeqNumber(0),
            retransmit_hole: false,
            srtt: 0,
            rttvar: 0,
            rto: 1_000_000,
            rtt_seq: SeqNumber(0),
            rtt_at: Instant::ZERO,
            rtt_active: false,
            retries: 0,
            irs: SeqNumber(0),
            rcv_nxt: SeqNumber(0),
            rcv_wscale: 0,
            recv: Ring::from_box(Box::new([])),
            ooo: [(SeqNumber(0), SeqNumber(0)); MAX_OOO],
            ooo_len: 0,
            ooo_last: SeqNumber(0),
            fin_received: false,
            last_adv_wnd: 0,
            rcv_adv: SeqNumber(0),
            rcv_wup: SeqNumber(0),
            ts_enabled: false,
            ts_recent: 0,
            ts_offset: 0,
            sack_ok: false,
            offer_wscale: false,
            rto_at: Instant::NEVER,
            tlp_at: Instant::NEVER,
            tlp_probes: 0,
            persist: false,
            persist_backoff: 0,
            delack_at: Instant::NEVER,
            keep_at: Instant::NEVER,
            keep_probes: 0,
            heap_at: Instant::NEVER,
            ack_now: false,
            dup_acks_owed: 0,
            unacked_segs: 0,
            in_dirty: false,
            ev_mask: 0,
        }
    }

    pub(crate) fn next_deadline(&self) -> Instant {
        self.rto_at
            .min(self.delack_at)
            .min(self.keep_at)
            .min(self.tlp_at)
    }

    /// The probe timeout: two smoothed RTTs, at least 10 ms as in Linux, so that a peer's
    /// delayed ACK (up to 40 ms on Linux, 5 ms here) rarely looks like a loss; never past
    /// the RTO.
    fn pto_us(&self) -> u64 {
        (2 * self.srtt as u64).max(10_000).min(self.rto as u64)
    }

    fn key(&self) -> u64 {
        flow_key(self.remote_ip, self.remote_port, self.local_port)
    }

    /// Sequence number of our FIN (valid when `fin_queued`).
    fn fin_seq(&self) -> SeqNumber {
        self.snd_una.add(self.send.len())
    }

    fn fin_sent(&self) -> bool {
        self.fin_queued && self.snd_max.gt(self.fin_seq())
    }

    /// Window to advertise, unscaled bytes.
    fn rcv_window(&self) -> u32 {
        self.recv.free().min(u32::MAX as usize) as u32
    }

    fn handle(&self, idx: u32) -> ConnId {
        ConnId { idx, gen: self.gen }
    }

    fn update_rtt(&mut self, sample_us: u32, min_rto: u32, max_rto: u32) {
        let r = sample_us.max(1);
        if self.srtt == 0 {
            self.srtt = r;
            self.rttvar = r / 2;
        } else {
            let delta = self.srtt.abs_diff(r);
            self.rttvar = (3 * (self.rttvar as u64) / 4 + delta as u64 / 4) as u32;
            self.srtt = (7 * (self.srtt as u64) / 8 + r as u64 / 8) as u32;
        }
        let rto = self.srtt as u64 + (4 * self.rttvar as u64).max(1000);
        self.rto = rto.clamp(min_rto as u64, max_rto as u64) as u32;
    }

    fn flight(&self) -> u32 {
        self.snd_max.diff(self.snd_una).max(0) as u32
    }
}

pub(crate) struct Listener {
    pub(crate) gen: u32,
    pub(crate) open: bool,
    pub(crate) port: u16,
    pub(crate) backlog: usize,
    pub(crate) syn_rcvd: usize,
    pub(crate) accept_queue: VecDeque<(u32, u32)>,
    pub(crate) ev_mask: u8,
}

fn flow_key(ip: Ipv4Addr, rport: u16, lport: u16) -> u64 {
    ((ip.to_u32() as u64) << 32) | ((rport as u64) << 16) | lport as u64
}

fn dur_us(d: Duration) -> u32 {
    d.as_micros().min(u32::MAX as u128) as u32
}

impl Stack {
    // ----------------------------------------------------------------- socket API

    /// Opens a listener on `port` with room for `backlog` connections that are
    /// handshaking or waiting in the accept queue. Beyond that, SYN cookies (if enabled)
    /// keep accepting without state.
    pub fn tcp_listen(&mut self, port: u16, backlog: usize) -> Result<ListenerId> {
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

    fn listener_ok(&self, id: ListenerId) -> Result<usize> {
        match self.listeners.get(id.idx as usize) {
            Some(l) if l.open && l.gen == id.gen => Ok(id.idx as usize),
            _ => Err(Error::InvalidHandle),
        }
    }

    /// Closes a listener; connections not yet accepted are reset.
    pub fn tcp_unlisten(&mut self, id: ListenerId) -> Result<()> {
        let li = self.listener_ok(id)?;
        let port = self.listeners[li].port;
        self.listen_ports.remove(&port);
        self.listeners[li].open = false;
        self.listeners[li].gen = self.listeners[li].gen.wrapping_add(1);
        let queued: Vec<(u32, u32)> = self.listeners[li].accept_queue.drain(..).collect();
        for (idx, gen) in queued {
            if self.conns[idx as usize].gen == gen {
                self.abort_conn(idx, Error::Aborted);
            }
        }
        // Half-open connections of this listener.
        for idx in 0..self.conns.len() as u32 {
            let t = &self.conns[idx as usize];
            if t.in_use && t.owner == Owner::Listener(li as u32) {
                self.abort_conn(idx, Error::Aborted);
            }
        }
        self.listeners[li].syn_rcvd = 0;
        Ok(())
    }

    /// Takes an established connection from the listener's accept queue.
    pub fn tcp_accept(&mut self, id: ListenerId) -> Result<ConnId> {
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
                self.push_event(Handle::Tcp(h), EventKind::Readable, &mut m);
                self.conns[idx as usize].ev_mask = m;
            }
            return Ok(h);
        }
        Err(Error::WouldBlock)
    }

    /// Opens a connection to `remote:remote_port` from the first free ephemeral port that
    /// `port_ok` accepts (e.g. one whose RSS hash lands on this shard's queue, see
    /// [`crate::toeplitz`]). Completion is signalled by a `Writable` event (or `Closed`).
    pub fn tcp_connect(
        &mut self,
        now: Instant,
        remote: Ipv4Addr,
        remote_port: u16,
        mut port_ok: impl FnMut(u16) -> bool,
    ) -> Result<ConnId> {
        let (lo, hi) = self.cfg.ephemeral_ports;
        let span = (hi - lo) as u32 + 1;
        for _ in 0..span {
            self.port_cursor = self.port_cursor.wrapping_add(1);
            let port = lo + (self.port_cursor % span) as u16;
            if self.listen_ports.contains_key(&port)
                || self
                    .demux
                    .contains_key(&flow_key(remote, remote_port, port))
            {
                continue;
            }
            if !port_ok(port) {
                continue;
            }
            return self.tcp_connect_from(now, remote, remote_port, port);
        }
        Err(Error::NoPorts)
    }

    /// Opens a connection from a given local port.
    pub fn tcp_connect_from(
        &mut self,
        now: Instant,
        remote: Ipv4Addr,
        remote_port: u16,
        local_port: u16,
    ) -> Result<ConnId> {
        self.now = self.now.max(now);
        if remote_port == 0
            || local_port == 0
            || remote == Ipv4Addr::UNSPECIFIED
            || remote.is_multicast()
        {
            return Err(Error::InvalidInput);
        }
        if self
            .demux
            .contains_key(&flow_key(remote, remote_port, local_port))
        {
            return Err(Error::AddrInUse);
        }
        let idx = self
            .alloc_tcb(remote, remote_port, local_port)
            .ok_or(Error::TableFull)?;
        let offer_wscale = self.cfg.window_scaling;
        let t = &mut self.conns[idx as usize];
        t.state = TcpState::SynSent;
        t.owner = Owner::User;
        t.offer_wscale = offer_wscale;
        t.ts_enabled = self.cfg.timestamps; // offered; cleared if the peer does not echo
        t.sack_ok = self.cfg.sack_permitted;
        // Armed now, not at the first SYN: if ARP never resolves the next hop, the RTO
        // retries (re-asking ARP) and finally fails the connect with TimedOut.
        t.rto_at = self.now.add_micros(t.rto as u64);
        let h = t.handle(idx);
        self.mark_dirty(idx, h.gen);
        self.schedule(idx);
        Ok(h)
    }

    fn conn(&self, c: ConnId) -> Result<&Tcb> {
        match self.conns.get(c.idx as usize) {
            Some(t) if t.in_use && t.gen == c.gen && t.owner == Owner::User => Ok(t),
            _ => Err(Error::InvalidHandle),
        }
    }

    fn conn_mut(&mut self, c: ConnId) -> Result<&mut Tcb> {
        match self.conns.get_mut(c.idx as usize) {
            Some(t) if t.in_use && t.gen == c.gen && t.owner == Owner::User => Ok(t),
            _ => Err(Error::InvalidHandle),
        }
    }

    pub fn tcp_state(&self, c: ConnId) -> Result<TcpState> {
        Ok(self.conn(c)?.state)
    }

    /// Why the connection failed, if it did.
    pub fn tcp_error(&self, c: ConnId) -> Result<Option<Error>> {
        Ok(self.conn(c)?.error)
    }

    /// (remote address, remote port, local port).
    pub fn tcp_endpoints(&self, c: ConnId) -> Result<(Ipv4Addr, u16, u16)> {
        let t = self.conn(c)?;
        Ok((t.remote_ip, t.remote_port, t.local_port))
    }

    /// A snapshot of the connection's sending and receiving state, as Linux's TCP_INFO.
    pub fn tcp_info(&self, c: ConnId) -> Result<TcpInfo> {
        let t = self.conn(c)?;
        Ok(TcpInfo {
            state: t.state,
            mss: t.mss,
            cwnd: t.cwnd,
            ssthresh: t.ssthresh,
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

    /// Bytes that `tcp_send` would accept now.
    pub fn tcp_send_capacity(&self, c: ConnId) -> Result<usize> {
        Ok(self.conn(c)?.send.free())
    }

    /// Bytes ready for `tcp_recv`.
    pub fn tcp_recv_available(&self, c: ConnId) -> Result<usize> {
        Ok(self.conn(c)?.recv.len())
    }

    /// Reads received bytes. `Ok(0)` means end of stream (the peer sent FIN and everything
    /// before it was read); `WouldBlock` means wait for `Readable`.
    pub fn tcp_recv(&mut self, c: ConnId, buf: &mut [u8]) -> Result<usize> {
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

    /// Zero-copy read: the received bytes as (up to) two slices in order, without consuming
    /// them. Parse in place, then [`Stack::tcp_recv_consume`] what was used. Both empty with
    /// `Ok`: nothing buffered (check `tcp_recv` for end of stream or an error).
    pub fn tcp_recv_slices(&self, c: ConnId) -> Result<(&[u8], &[u8])> {
        Ok(self.conn(c)?.recv.slices())
    }

    /// Consumes `n` bytes after [`Stack::tcp_recv_slices`] (clipped to what is buffered).
    pub fn tcp_recv_consume(&mut self, c: ConnId, n: usize) -> Result<()> {
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

    /// Queues bytes for sending; returns how many were taken (`WouldBlock` when the send
    /// buffer is full: wait for `Writable`).
    pub fn tcp_send(&mut self, c: ConnId, data: &[u8]) -> Result<usize> {
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

    /// Half-close: queue a FIN after the buffered data; the handle stays valid for reading.
    pub fn tcp_shutdown(&mut self, c: ConnId) -> Result<()> {
        self.conn(c)?;
        self.begin_close(c.idx);
        Ok(())
    }

    /// Graceful close: queues a FIN after the buffered data and releases the handle. The
    /// stack finishes the exchange (FIN_WAIT, TIME_WAIT) on its own.
    pub fn tcp_close(&mut self, c: ConnId) -> Result<()> {
        self.conn(c)?;
        self.begin_close(c.idx);
        let t = &mut self.conns[c.idx as usize];
        t.owner = Owner::Released;
        match t.state {
            TcpState::Closed => self.free_tcb(c.idx),
            TcpState::FinWait2 => {
                t.keep_at = self.now.add(self.cfg.fin_timeout);
                self.schedule(c.idx);
            }
            _ => {}
        }
        Ok(())
    }

    /// Abortive close: sends RST (when synchronized) and frees the connection now.
    pub fn tcp_abort(&mut self, c: ConnId) -> Result<()> {
        self.conn(c)?;
        self.abort_conn(c.idx, Error::Aborted);
        if self.conns[c.idx as usize].in_use {
            self.free_tcb(c.idx);
        }
        Ok(())
    }

    fn begin_close(&mut self, idx: u32) {
        let t = &mut self.conns[idx as usize];
        match t.state {
            TcpState::SynSent => {
                self.set_closed(idx, None);
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

    // ------------------------------------------------------------- table management

    fn alloc_tcb(&mut self, remote: Ipv4Addr, rport: u16, lport: u16) -> Option<u32> {
        if self.live_conns >= self.cfg.max_connections {
            self.stats.tcp_table_full += 1;
            return None;
        }
        let idx = match self.free_conns.pop() {
            Some(i) => i,
            None => {
                self.conns.push(Tcb::empty());
                (self.conns.len() - 1) as u32
            }
        };
        let send = self
            .send_pool
            .pop()
            .map(Ring::from_box)
            .unwrap_or_else(|| Ring::new(self.cfg.send_buffer));
        let recv = self
            .recv_pool
            .pop()
            .map(Ring::from_box)
            .unwrap_or_else(|| Ring::new(self.cfg.recv_buffer));
        let now = self.now;
        let secret = self.cfg.secret;
        let key = flow_key(remote, rport, lport);
        // RFC 6528: ISN = clock (4 µs ticks) + keyed hash of the 4-tuple.
        let isn = (keyed_hash(secret, &[key, self.cfg.ipv4.to_u32() as u64]) as u32)
            .wrapping_add((now.micros() / 4) as u32);
        let gen = self.conns[idx as usize].gen.wrapping_add(1);
        let mut rcv_wscale = 0u8;
        while rcv_wscale < 14 && (self.cfg.recv_buffer >> rcv_wscale) > 65535 {
            rcv_wscale += 1;
        }
        let t = &mut self.conns[idx as usize];
        *t = Tcb::empty();
        t.gen = gen;
        t.in_use = true;
        t.remote_ip = remote;
        t.remote_port = rport;
        t.local_port = lport;
        t.send = send;
        t.recv = recv;
        t.send.clear();
        t.recv.clear();
        t.iss = SeqNumber(isn);
        t.snd_una = t.iss;
        t.snd_nxt = t.iss;
        t.snd_max = t.iss;
        t.recover = t.iss;
        t.rcv_wscale = if self.cfg.window_scaling {
            rcv_wscale
        } else {
            0
        };
        t.rto = dur_us(self.cfg.initial_rto);
        t.ts_offset = (isn >> 7).rotate_left(13);
        self.demux.insert(key, idx);
        self.live_conns += 1;
        Some(idx)
    }

    /// Returns the slot and its buffers to the pools.
    pub(crate) fn free_tcb(&mut self, idx: u32) {
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
        if send.capacity() == self.cfg.send_buffer {
            self.send_pool.push(send.into_box());
        }
        if recv.capacity() == self.cfg.recv_buffer {
            self.recv_pool.push(recv.into_box());
        }
        self.free_conns.push(idx);
        self.live_conns -= 1;
    }

    /// Moves to CLOSED: leaves the demux table, stops timers, tells the application.
    /// Frees the slot at once unless the application still holds the handle.
    fn set_closed(&mut self, idx: u32, err: Option<Error>) {
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
                self.push_event(h, EventKind::Readable, &mut m);
                self.push_event(h, EventKind::Closed, &mut m);
                self.conns[idx as usize].ev_mask = m;
            }
            Owner::Released | Owner::Listener(_) => self.free_tcb(idx),
        }
    }

    /// Sends RST (if synchronized) and closes with `err`.
    fn abort_conn(&mut self, idx: u32, err: Error) {
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
            let (ip, mac) = (t.remote_ip, t.peer_mac);
            self.queue_tcp_ctrl(ip, mac, &repr);
        }
        self.set_closed(idx, Some(err));
    }

    fn conn_event(&mut self, idx: u32, kind: EventKind) {
        let t = &self.conns[idx as usize];
        if t.owner != Owner::User {
            return;
        }
        let h = Handle::Tcp(t.handle(idx));
        let mut m = t.ev_mask;
        self.push_event(h, kind, &mut m);
        self.conns[idx as usize].ev_mask = m;
    }

    // ----------------------------------------------------------------- input

    pub(crate) fn tcp_input(
        &mut self,
        src_mac: MacAddr,
        ip: &wirespeed_wire::Ipv4Repr,
        data: &[u8],
    ) {
        let pkt = match TcpPacket::new_checked(data) {
            Ok(p) => p,
            Err(_) => {
                self.stats.tcp_malformed += 1;
                return;
            }
        };
        match pkt.checksum_state(ip.src, ip.dst) {
            TransportChecksum::Complete => {}
            TransportChecksum::Partial if self.cfg.accept_partial_checksums => {
                self.stats.tcp_rx_csum_partial += 1;
            }
            TransportChecksum::Partial => {
                self.stats.tcp_bad_checksum += 1;
                self.stats.tcp_bad_checksum_partial += 1;
                return;
            }
            TransportChecksum::Bad => {
                self.stats.tcp_bad_checksum += 1;
                return;
            }
        }
        let repr = match TcpRepr::parse_unverified(&pkt) {
            Ok(r) => r,
            Err(wirespeed_wire::Error::Malformed)
                if pkt.src_port() != 0
                    && pkt.dst_port() != 0
                    && !(pkt.syn() && (pkt.fin() || pkt.rst())) =>
            {
                self.stats.tcp_bad_options += 1;
                return;
            }
            Err(_) => {
                self.stats.tcp_malformed += 1;
                return;
            }
        };
        self.stats.tcp_segments_in += 1;
        let payload = pkt.payload();
        let key = flow_key(ip.src, repr.src_port, repr.dst_port);
        if let Some(&idx) = self.demux.get(&key) {
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
                    self.stats.tcp_time_wait_reused += 1;
                    self.free_tcb(idx);
                    self.listen_input(src_mac, ip.src, &repr, payload);
                    return;
                }
            }
            self.tcb_input(idx, src_mac, &repr, payload);
            return;
        }
        self.listen_input(src_mac, ip.src, &repr, payload);
    }

    /// A segment with no connection: passive open, SYN cookie, or RST.
    fn listen_input(&mut self, src_mac: MacAddr, src: Ipv4Addr, repr: &TcpRepr, payload: &[u8]) {
        let li = match self.listen_ports.get(&repr.dst_port) {
            Some(&li) => li,
            None => {
                self.stats.tcp_no_listener += 1;
                self.reply_rst(src_mac, src, repr, payload.len());
                return;
            }
        };
        if repr.flags & flags::RST != 0 {
            return;
        }
        let syn = repr.flags & flags::SYN != 0;
        if syn && repr.ack.is_none() {
            let l = &self.listeners[li as usize];
            if l.syn_rcvd + l.accept_queue.len() >= l.backlog {
                if self.cfg.syn_cookies {
                    self.send_syn_cookie(src_mac, src, repr);
                } else {
                    self.stats.tcp_backlog_full += 1;
                }
                return;
            }
            let Some(idx) = self.alloc_tcb(src, repr.src_port, repr.dst_port) else {
                return; // table full: the peer retries
            };
            self.listeners[li as usize].syn_rcvd += 1;
            let (wscale_ok, ts_ok, sack_ok) = (
                self.cfg.window_scaling,
                self.cfg.timestamps,
                self.cfg.sack_permitted,
            );
            let mtu = self.cfg.mtu;
            let keep = self.cfg.keepalive;
            let t = &mut self.conns[idx as usize];
            t.state = TcpState::SynReceived;
            t.owner = Owner::Listener(li);
            t.peer_mac = Some(src_mac);
            t.irs = repr.seq;
            t.rcv_nxt = repr.seq.add(1);
            t.rcv_wup = t.rcv_nxt;
            negotiate(t, &repr.options, wscale_ok, ts_ok, sack_ok, mtu);
            t.snd_wnd = repr.window as u32; // never scaled in a SYN
            t.snd_wl1 = repr.seq;
            let _ = keep;
            let g = t.gen;
            self.mark_dirty(idx, g);
            return;
        }
        if !syn && repr.ack.is_some() && self.cfg.syn_cookies {
            if let Some(mss) = self.check_syn_cookie(src, repr) {
                let l = &self.listeners[li as usize];
                if l.accept_queue.len() >= l.backlog {
                    self.stats.tcp_backlog_full += 1;
                    return;
                }
                let Some(idx) = self.alloc_tcb(src, repr.src_port, repr.dst_port) else {
                    return;
                };
                self.stats.tcp_syn_cookies_accepted += 1;
                self.listeners[li as usize].syn_rcvd += 1;
                let mtu = self.cfg.mtu;
                let t = &mut self.conns[idx as usize];
                let iss = repr.ack.unwrap_or_default().sub(1);
                t.state = TcpState::SynReceived;
                t.owner = Owner::Listener(li);
                t.peer_mac = Some(src_mac);
                t.iss = iss;
                t.snd_una = iss;
                t.snd_nxt = iss.add(1);
                t.snd_max = iss.add(1);
                t.irs = repr.seq.sub(1);
                t.rcv_nxt = repr.seq;
                t.rcv_wup = t.rcv_nxt;
                t.rcv_wscale = 0; // the cookie could not carry the scale we did not offer
                t.mss = (mss as u32).min(mtu as u32 - 40);
                t.snd_wl1 = repr.seq;
                self.tcb_input(idx, src_mac, repr, payload);
                return;
            }
            self.stats.tcp_syn_cookies_rejected += 1;
        }
        self.stats.tcp_no_listener += 1;
        self.reply_rst(src_mac, src, repr, payload.len());
    }

    fn cookie_hash(&self, src: Ipv4Addr, repr: &TcpRepr, their_isn: u32, slot: u64) -> u32 {
        let key = flow_key(src, repr.src_port, repr.dst_port);
        keyed_hash(
            self.cfg.secret ^ 0x0c00_c1e5,
            &[key, their_isn as u64, slot],
        ) as u32
    }

    fn send_syn_cookie(&mut self, src_mac: MacAddr, src: Ipv4Addr, repr: &TcpRepr) {
        let slot = self.now.micros() / COOKIE_SLOT_US;
        let peer_mss = repr
            .options
            .mss
            .unwrap_or(DEFAULT_MSS)
            .min((self.cfg.mtu - 40) as u16);
        let mss_idx = COOKIE_MSS.iter().rposition(|&m| m <= peer_mss).unwrap_or(0) as u32;
        let h = self.cookie_hash(src, repr, repr.seq.0, slot);
        let cookie = (((slot & 31) as u32) << 27) | (h & 0x07ff_fff8) | mss_idx;
        let out = TcpRepr {
            src_port: repr.dst_port,
            dst_port: repr.src_port,
            seq: SeqNumber(cookie),
            ack: Some(repr.seq.add(1)),
            flags: flags::SYN,
            window: self.cfg.recv_buffer.min(65535) as u16,
            options: TcpOptions {
                mss: Some((self.cfg.mtu - 40) as u16),
                ..Default::default()
            },
        };
        self.stats.tcp_syn_cookies_sent += 1;
        self.queue_tcp_ctrl(src, Some(src_mac), &out);
    }

    /// Validates the ACK of a cookie SYN-ACK; returns the MSS it encodes.
    fn check_syn_cookie(&self, src: Ipv4Addr, repr: &TcpRepr) -> Option<u16> {
        if repr.flags & (flags::SYN | flags::RST | flags::FIN) != 0 {
            return None;
        }
        let cookie = repr.ack?.sub(1).0;
        let their_isn = repr.seq.sub(1).0;
        let now_slot = self.now.micros() / COOKIE_SLOT_US;
        for slot in [now_slot, now_slot.wrapping_sub(1)] {
            if (slot & 31) as u32 != cookie >> 27 {
                continue;
            }
            let h = self.cookie_hash(src, repr, their_isn, slot);
            if h & 0x07ff_fff8 == cookie & 0x07ff_fff8 {
                return Some(COOKIE_MSS[(cookie & 7) as usize]);
            }
        }
        None
    }

    /// RST in reply to a segment that has no connection (RFC 9293 3.10.7.1).
    fn reply_rst(&mut self, src_mac: MacAddr, src: Ipv4Addr, repr: &TcpRepr, payload_len: usize) {
        if repr.flags & flags::RST != 0 {
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
        self.queue_tcp_ctrl(src, Some(src_mac), &out);
    }

    /// Queues a payload-less segment outside any connection's output (RST, cookie SYN-ACK).
    fn queue_tcp_ctrl(&mut self, dst: Ipv4Addr, mac: Option<MacAddr>, repr: &TcpRepr) {
        if repr.flags & flags::RST != 0 {
            self.stats.tcp_rst_sent += 1;
        }
        self.stats.tcp_segments_out += 1;
        let ip = self.ip_repr(dst, IpProtocol::Tcp, repr.header_len());
        let src = self.cfg.ipv4;
        let e = self.eth_len;
        let build = move |buf: &mut [u8]| -> usize {
            let t = e + ipv4::HEADER_LEN;
            let end = t + repr.header_len();
            if buf.len() < end {
                return 0;
            }
            let _ = ip.emit(&mut buf[e..]);
            let _ = repr.emit(&mut buf[t..]);
            fill_checksum(&mut buf[t..end], src, dst);
            end
        };
        match mac {
            Some(m) => {
                let eth = self.eth_repr(m, EtherType::Ipv4);
                if !self.ctrl.push_with(dst, |buf| {
                    let _ = eth.emit(buf);
                    build(buf)
                }) {
                    self.stats.ctrl_queue_full += 1;
                }
            }
            None => {
                self.send_ip_frame(dst, build);
            }
        }
    }

    /// Segment processing for an existing connection (RFC 9293 3.10.7.3/3.10.7.4).
    fn tcb_input(&mut self, idx: u32, src_mac: MacAddr, repr: &TcpRepr, payload: &[u8]) {
        let now = self.now;
        let (min_rto, max_rto) = (dur_us(self.cfg.min_rto), dur_us(self.cfg.max_rto));
        let has_syn = repr.flags & flags::SYN != 0;
        let has_rst = repr.flags & flags::RST != 0;
        let has_fin = repr.flags & flags::FIN != 0;
        let t = &mut self.conns[idx as usize];
        let gen = t.gen;
        if let Some(k) = self.cfg.keepalive {
            t.keep_probes = 0;
            if matches!(
                t.state,
                TcpState::Established | TcpState::CloseWait | TcpState::FinWait2
            ) {
                t.keep_at = now.add(k.idle);
            }
        }

        if t.state == TcpState::SynSent {
            if let Some(ack) = repr.ack {
                if ack.le(t.iss) || ack.gt(t.snd_max) {
                    if !has_rst {
                        self.stats.tcp_bad_ack += 1;
                        let out = TcpRepr {
                            src_port: repr.dst_port,
                            dst_port: repr.src_port,
                            seq: ack,
                            ack: None,
                            flags: flags::RST,
                            window: 0,
                            options: TcpOptions::default(),
                        };
                        let ip = t.remote_ip;
                        self.queue_tcp_ctrl(ip, Some(src_mac), &out);
                    }
                    return;
                }
            }
            if has_rst {
                if repr.ack.is_some() {
                    self.stats.tcp_resets_received += 1;
                    self.set_closed(idx, Some(Error::ConnectionRefused));
                }
                return;
            }
            if !has_syn {
                return;
            }
            let (ws, ts, sack, mtu) = (t.offer_wscale, t.ts_enabled, t.sack_ok, self.cfg.mtu);
            t.irs = repr.seq;
            t.rcv_nxt = repr.seq.add(1);
            t.rcv_wup = t.rcv_nxt;
            negotiate(t, &repr.options, ws, ts, sack, mtu);
            t.snd_wnd = repr.window as u32;
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
                t.cwnd = initial_cwnd(t.mss);
                if let Some(k) = self.cfg.keepalive {
                    t.keep_at = now.add(k.idle);
                }
                self.mark_dirty(idx, gen);
                self.conn_event(idx, EventKind::Writable);
            } else {
                // Simultaneous open: answer with SYN-ACK from the same ISS.
                t.state = TcpState::SynReceived;
                t.snd_nxt = t.iss;
                self.mark_dirty(idx, gen);
            }
            self.schedule(idx);
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
                if (tsval.wrapping_sub(t.ts_recent) as i32) < 0 && t.state != TcpState::SynReceived
                {
                    self.stats.tcp_paws_rejected += 1;
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
        let wnd = t.rcv_window();
        let rcv_nxt = t.rcv_nxt;
        let acceptable = seq.add(seg_len).ge(t.rcv_wup) && seq.le(rcv_nxt.add(wnd as usize));
        if !acceptable {
            if !has_rst {
                if seq.add(seg_len).le(rcv_nxt) && seg_len > 0 {
                    self.stats.tcp_duplicate_segments += 1;
                } else {
                    self.stats.tcp_out_of_window += 1;
                }
                t.ack_now = true;
                if t.state == TcpState::TimeWait && has_fin {
                    t.keep_at = now.add(self.cfg.time_wait);
                }
                self.mark_dirty(idx, gen);
                if let Some(ack) = repr.ack {
                    let t = &self.conns[idx as usize];
                    if t.state.awaits_acks() && !has_syn && ack.gt(t.snd_una) && ack.le(t.snd_max) {
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
                        self.stats.tcp_acks_on_refused_segments += 1;
                        self.tcb_input(idx, src_mac, &ack_only, &[]);
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
                self.stats.tcp_resets_received += 1;
                match t.state {
                    TcpState::SynReceived if matches!(t.owner, Owner::Listener(_)) => {
                        self.free_tcb(idx)
                    }
                    TcpState::TimeWait | TcpState::LastAck | TcpState::Closing => {
                        self.set_closed(idx, None)
                    }
                    _ => self.set_closed(idx, Some(Error::ConnectionReset)),
                }
            } else {
                self.stats.tcp_challenge_acks += 1;
                t.ack_now = true;
                self.mark_dirty(idx, gen);
            }
            return;
        }

        if has_syn {
            // RFC 5961 4: a SYN on a synchronized connection gets a challenge ACK.
            self.stats.tcp_challenge_acks += 1;
            t.ack_now = true;
            self.mark_dirty(idx, gen);
            return;
        }

        let Some(ack) = repr.ack else { return };

        if t.ts_enabled {
            if let Some((tsval, _)) = repr.options.timestamps {
                if seq.le(t.rcv_nxt) {
                    t.ts_recent = tsval;
                }
            }
        }

        if t.state == TcpState::SynReceived {
            if ack.le(t.snd_una) || ack.gt(t.snd_max) {
                self.stats.tcp_bad_ack += 1;
                let out = TcpRepr {
                    src_port: repr.dst_port,
                    dst_port: repr.src_port,
                    seq: ack,
                    ack: None,
                    flags: flags::RST,
                    window: 0,
                    options: TcpOptions::default(),
                };
                let ip = t.remote_ip;
                self.queue_tcp_ctrl(ip, Some(src_mac), &out);
                return;
            }
            t.state = TcpState::Established;
            // The ACK covers our SYN; whatever else it covers is data, handled below.
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
            t.cwnd = initial_cwnd(t.mss);
            t.snd_wnd = (repr.window as u32) << t.snd_wscale;
            t.snd_wl1 = seq;
            t.snd_wl2 = ack;
            if let Some(k) = self.cfg.keepalive {
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
                    self.push_event(h, EventKind::Acceptable, &mut m);
                    self.listeners[li as usize].ev_mask = m;
                }
                Owner::User => self.conn_event(idx, EventKind::Writable),
                Owner::Released => {}
            }
        }

        // ACK processing.
        let t = &mut self.conns[idx as usize];
        if ack.gt(t.snd_max) {
            self.stats.tcp_bad_ack += 1;
            t.ack_now = true;
            self.mark_dirty(idx, gen);
            return;
        }
        let mut fin_acked = false;
        if ack.gt(t.snd_una) {
            let acked = ack.diff(t.snd_una) as usize;
            let data_acked = acked.min(t.send.len());
            if t.fin_queued && acked > t.send.len() {
                fin_acked = true;
            }
            t.send.consume(data_acked);
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
                if ack.ge(t.recover) {
                    // Full ACK: leave fast recovery (RFC 6582 3.2 step 3).
                    t.in_recovery = false;
                    t.cwnd = t.ssthresh.min(t.flight() + mss).max(mss);
                    t.dupacks = 0;
                } else {
                    // Partial ACK: retransmit the next hole, deflate by what was acked. With
                    // SACK, skip what this episode already retransmitted.
                    if t.sacked_len > 0 && t.rexmit_next.gt(t.snd_una) {
                        t.retransmit_hole = true;
                    } else {
                        t.retransmit_one = true;
                    }
                    t.cwnd = t
                        .cwnd
                        .saturating_sub(acked as u32)
                        .saturating_add(mss)
                        .max(mss);
                }
            } else {
                t.dupacks = 0;
                if t.cwnd < t.ssthresh {
                    t.cwnd = t.cwnd.saturating_add((acked as u32).min(mss));
                } else {
                    t.cwnd = t.cwnd.saturating_add(
                        ((mss as u64 * mss as u64) / t.cwnd.max(1) as u64).max(1) as u32,
                    );
                }
            }
            t.rto_at = if t.snd_max.gt(t.snd_una) {
                now.add_micros(t.rto as u64)
            } else {
                Instant::NEVER
            };
            t.tlp_probes = 0;
            t.tlp_at = if t.snd_max.gt(t.snd_una) {
                now.add_micros(t.pto_us())
            } else {
                Instant::NEVER
            };
            t.persist = false;
            if data_acked > 0 {
                self.conn_event(idx, EventKind::Writable);
            }
            self.mark_dirty(idx, gen);
        } else if ack == t.snd_una
            && payload.is_empty()
            && !has_fin
            && t.snd_max.gt(t.snd_una)
            && t.snd_wnd != 0
            && !t.persist
            && (((repr.window as u32) << t.snd_wscale) == t.snd_wnd
                || sacks_above(t, &repr.options))
        {
            t.dupacks = t.dupacks.saturating_add(1);
            let mss = t.mss;
            if t.dupacks == DUPACK_THRESHOLD && !t.in_recovery && ack.gt(t.recover.sub(1)) {
                // Fast retransmit, enter NewReno fast recovery (RFC 6582 3.2 step 2).
                self.stats.tcp_fast_retransmits += 1;
                t.ssthresh = (t.flight() / 2).max(2 * mss);
                t.cwnd = t.ssthresh + 3 * mss;
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
                    t.cwnd = t.cwnd.saturating_add(mss);
                }
                self.mark_dirty(idx, gen);
            }
        }
        let t = &mut self.conns[idx as usize];
        if t.sack_ok && (t.sacked_len > 0 || repr.options.sack_count > 0) {
            sack_update(t, &repr.options);
        }
        // Window update (RFC 9293 3.10.7.4, SND.WL1/WL2 rule).
        if t.snd_wl1.lt(seq) || (t.snd_wl1 == seq && t.snd_wl2.le(ack)) {
            let was_zero = t.snd_wnd == 0;
            t.snd_wnd = (repr.window as u32) << t.snd_wscale;
            t.snd_wl1 = seq;
            t.snd_wl2 = ack;
            if was_zero && t.snd_wnd > 0 {
                t.persist = false;
                t.persist_backoff = 0;
                if t.snd_max.le(t.snd_una) {
                    t.rto_at = Instant::NEVER;
                }
                self.mark_dirty(idx, gen);
            }
        }

        let t = &mut self.conns[idx as usize];
        if fin_acked {
            match t.state {
                TcpState::FinWait1 => {
                    t.state = TcpState::FinWait2;
                    t.rto_at = Instant::NEVER;
                    if t.owner == Owner::Released {
                        t.keep_at = now.add(self.cfg.fin_timeout);
                    }
                }
                TcpState::Closing => {
                    t.state = TcpState::TimeWait;
                    t.rto_at = Instant::NEVER;
                    t.keep_at = now.add(self.cfg.time_wait);
                }
                TcpState::LastAck => {
                    self.set_closed(idx, None);
                    return;
                }
                _ => {}
            }
        }

        // Data.
        let t = &mut self.conns[idx as usize];
        let mut fin_in_order = false;
        if !payload.is_empty() && t.owner == Owner::Released && seq.add(payload.len()).gt(t.rcv_nxt)
        {
            // Nobody will read it: reset, as Linux does for data after close().
            self.stats.tcp_data_after_close += 1;
            self.abort_conn(idx, Error::Aborted);
            return;
        }
        let t = &mut self.conns[idx as usize];
        if matches!(
            t.state,
            TcpState::Established | TcpState::FinWait1 | TcpState::FinWait2
        ) {
            if !payload.is_empty() {
                let skip = t.rcv_nxt.diff(seq).max(0) as usize;
                if skip < payload.len() {
                    let data = &payload[skip..];
                    let seg_seq = seq.add(skip);
                    let off = seg_seq.diff(t.rcv_nxt) as usize;
                    let room = t.recv.free();
                    if off < room {
                        let data = &data[..data.len().min(room - off)];
                        if off == 0 {
                            let had_ooo = t.ooo_len > 0;
                            t.recv.write_at(t.recv.len(), data);
                            t.recv.extend(data.len());
                            t.rcv_nxt = t.rcv_nxt.add(data.len());
                            merge_ooo(t);
                            t.unacked_segs = t.unacked_segs.saturating_add(1);
                            if had_ooo || t.unacked_segs >= 2 {
                                t.ack_now = true;
                                self.mark_dirty(idx, gen);
                            } else if t.delack_at == Instant::NEVER {
                                t.delack_at = now.add(self.cfg.delayed_ack);
                            }
                            self.conn_event(idx, EventKind::Readable);
                        } else {
                            self.stats.tcp_ooo_segments += 1;
                            if !insert_ooo(t, seg_seq, data) {
                                self.stats.tcp_ooo_dropped += 1;
                            }
                            if t.ack_now {
                                t.dup_acks_owed = t.dup_acks_owed.saturating_add(1).min(8);
                            }
                            t.ack_now = true;
                            self.mark_dirty(idx, gen);
                        }
                    } else {
                        t.ack_now = true;
                        self.mark_dirty(idx, gen);
                    }
                } else {
                    self.stats.tcp_duplicate_segments += 1;
                    t.ack_now = true;
                    self.mark_dirty(idx, gen);
                }
            }
            let t = &mut self.conns[idx as usize];
            if has_fin {
                if seq.add(payload.len()) == t.rcv_nxt {
                    fin_in_order = true;
                } else {
                    t.ack_now = true;
                    self.mark_dirty(idx, gen);
                }
            }
        } else if has_fin && seq.add(payload.len()) == t.rcv_nxt.sub(1) && t.fin_received {
            // A retransmitted FIN: re-ACK it (and restart TIME_WAIT).
            t.ack_now = true;
            if t.state == TcpState::TimeWait {
                t.keep_at = now.add(self.cfg.time_wait);
            }
            self.mark_dirty(idx, gen);
        }

        if fin_in_order {
            let t = &mut self.conns[idx as usize];
            t.rcv_nxt = t.rcv_nxt.add(1);
            t.fin_received = true;
            t.ack_now = true;
            let our_fin_acked = t.fin_queued && t.snd_una.gt(t.fin_seq()) || fin_acked;
            match t.state {
                TcpState::Established => t.state = TcpState::CloseWait,
                TcpState::FinWait1 if !our_fin_acked => t.state = TcpState::Closing,
                TcpState::FinWait1 | TcpState::FinWait2 => {
                    t.state = TcpState::TimeWait;
                    t.rto_at = Instant::NEVER;
                    t.keep_at = now.add(self.cfg.time_wait);
                }
                _ => {}
            }
            self.mark_dirty(idx, gen);
            self.conn_event(idx, EventKind::Readable);
        }
        self.schedule(idx);
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
                t.snd_wnd = w;
                t.persist = false;
                t.persist_backoff = 0;
                let g = t.gen;
                self.mark_dirty(idx, g);
            }
        }
    }

    // ----------------------------------------------------------------- timers

    pub(crate) fn tcb_timers(&mut self, idx: u32, now: Instant) {
        let max_rto = dur_us(self.cfg.max_rto) as u64;
        let max_retx = self.cfg.max_retransmits;
        let syn_retx = self.cfg.syn_retransmits;
        let t = &mut self.conns[idx as usize];
        let gen = t.gen;
        if t.delack_at <= now {
            t.delack_at = Instant::NEVER;
            t.ack_now = true;
            self.mark_dirty(idx, gen);
        }
        let t = &mut self.conns[idx as usize];
        if t.keep_at <= now {
            t.keep_at = Instant::NEVER;
            match t.state {
                TcpState::TimeWait => {
                    self.set_closed(idx, None);
                    return;
                }
                TcpState::FinWait2 if t.owner == Owner::Released => {
                    // Orphan whose peer never sent FIN (tcp_fin_timeout).
                    self.stats.tcp_timeouts += 1;
                    self.abort_conn(idx, Error::TimedOut);
                    return;
                }
                TcpState::Established | TcpState::CloseWait | TcpState::FinWait2 => {
                    if let Some(k) = self.cfg.keepalive {
                        if t.keep_probes >= k.probes {
                            self.stats.tcp_timeouts += 1;
                            self.abort_conn(idx, Error::TimedOut);
                            return;
                        }
                        t.keep_probes += 1;
                        t.keep_at = now.add(k.interval);
                        self.stats.tcp_keepalive_probes += 1;
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
                        let (ip, mac) = (t.remote_ip, t.peer_mac);
                        self.queue_tcp_ctrl(ip, mac, &out);
                    }
                }
                _ => {}
            }
        }
        let t = &mut self.conns[idx as usize];
        if t.tlp_at <= now && t.rto_at > now {
            t.tlp_at = Instant::NEVER;
            let in_flight = t.snd_max.gt(t.snd_una) && t.state.awaits_acks();
            // Also in fast recovery: there the probe resends a retransmission that was lost
            // again, which NewReno alone can only repair with the RTO.
            if in_flight && !t.persist && t.tlp_probes < MAX_PROBES {
                self.stats.tcp_loss_probes += 1;
                t.tlp_probes += 1;
                t.retransmit_one = true;
                t.tlp_at = now.add_micros(t.pto_us() << t.tlp_probes);
                self.mark_dirty(idx, gen);
            }
        }
        let t = &mut self.conns[idx as usize];
        if t.rto_at <= now {
            t.rto_at = Instant::NEVER;
            t.tlp_at = Instant::NEVER;
            if t.persist {
                // Zero-window probe: push one byte past the window; backoff like the RTO.
                self.stats.tcp_zero_window_probes += 1;
                t.persist_backoff = t.persist_backoff.saturating_add(1).min(16);
                t.retransmit_one = true; // output sends a 1-byte probe while persisting
                self.mark_dirty(idx, gen);
                return;
            }
            let outstanding = t.snd_max.gt(t.snd_una)
                || matches!(t.state, TcpState::SynSent | TcpState::SynReceived);
            if !outstanding {
                return;
            }
            let limit = if matches!(t.state, TcpState::SynSent | TcpState::SynReceived) {
                syn_retx
            } else {
                max_retx
            };
            if t.retries >= limit {
                self.stats.tcp_timeouts += 1;
                self.abort_conn(idx, Error::TimedOut);
                return;
            }
            self.stats.tcp_rto_expired += 1;
            t.retries += 1;
            t.rto = ((t.rto as u64) * 2).min(max_rto) as u32;
            // Re-armed here, not only when the retransmission leaves: it may not leave
            // (next hop unresolved) and the connection must still time out.
            t.rto_at = now.add_micros(t.rto as u64);
            t.rtt_active = false;
            match t.state {
                TcpState::SynSent | TcpState::SynReceived => t.snd_nxt = t.iss,
                _ => {
                    // RFC 5681 3.1 eq. 4 and RFC 6582 recovery guard; go back N.
                    let mss = t.mss;
                    t.ssthresh = (t.flight() / 2).max(2 * mss);
                    t.cwnd = mss;
                    t.in_recovery = false;
                    t.dupacks = 0;
                    t.recover = t.snd_max;
                    t.snd_nxt = t.snd_una;
                    // RFC 6675 5.1: after a timeout the scoreboard is not trusted.
                    t.sacked_len = 0;
                    t.retransmit_hole = false;
                }
            }
            self.mark_dirty(idx, gen);
        }
    }

    // ----------------------------------------------------------------- output

    /// Sends what connection `idx` has to send. False when the sink ran out of buffers.
    pub(crate) fn tcp_output<S: TxSink + ?Sized>(&mut self, idx: u32, sink: &mut S) -> bool {
        let now = self.now;
        let t = &mut self.conns[idx as usize];
        if !t.in_use || t.state == TcpState::Closed {
            return true;
        }
        if t.peer_mac.is_none() {
            let remote = t.remote_ip;
            let Some(hop) = self.next_hop(remote) else {
                self.abort_conn(idx, Error::NotConnected);
                return true;
            };
            match self.resolve(hop) {
                Some(m) => self.conns[idx as usize].peer_mac = Some(m),
                None => {
                    let g = self.conns[idx as usize].gen;
                    self.arp_waiting.push((idx, g));
                    return true;
                }
            }
        }
        let t = &mut self.conns[idx as usize];
        match t.state {
            TcpState::SynSent | TcpState::SynReceived => {
                if t.snd_nxt != t.iss && t.ack_now && t.state == TcpState::SynReceived {
                    let nxt = ack_seq(t);
                    return self.emit(idx, sink, nxt, flags::ACK, 0, 0).is_some();
                }
                if t.snd_nxt == t.iss {
                    let fl = if t.state == TcpState::SynSent {
                        flags::SYN
                    } else {
                        flags::SYN | flags::ACK
                    };
                    if t.snd_nxt == t.iss && !t.rtt_active && t.retries == 0 {
                        t.rtt_active = true;
                        t.rtt_at = now;
                        t.rtt_seq = t.iss;
                    }
                    let iss = t.iss;
                    if self.emit(idx, sink, iss, fl, 0, 0).is_none() {
                        return false;
                    }
                    let t = &mut self.conns[idx as usize];
                    t.snd_nxt = t.iss.add(1);
                    t.snd_max = t.snd_max.max(t.snd_nxt);
                    if t.rto_at == Instant::NEVER {
                        t.rto_at = now.add_micros(t.rto as u64);
                    }
                    self.schedule(idx);
                }
                return true;
            }
            TcpState::TimeWait => {
                if t.ack_now {
                    let nxt = ack_seq(t);
                    if self.emit(idx, sink, nxt, flags::ACK, 0, 0).is_none() {
                        return false;
                    }
                }
                return true;
            }
            _ => {}
        }

        let mut sent: u16 = 0;
        let max_burst = self.cfg.max_burst.max(1);
        loop {
            if sent >= max_burst {
                // Yield to the other connections; we are next in line again.
                let g = self.conns[idx as usize].gen;
                self.mark_dirty(idx, g);
                break;
            }
            let t = &mut self.conns[idx as usize];
            let buffered = t.send.len();
            if t.retransmit_one {
                t.retransmit_one = false;
                let una = t.snd_una;
                if t.persist {
                    // Zero-window probe, as Linux sends it: no data, SEQ = SND.UNA - 1. The
                    // peer must answer with an ACK carrying its current window, and no
                    // sequence space is used, so the probe cannot confuse either side.
                    if buffered > 0 {
                        let seq = t.snd_una.sub(1);
                        if self.emit(idx, sink, seq, flags::ACK, 0, 0).is_none() {
                            t_retry_probe(&mut self.conns[idx as usize]);
                            return false;
                        }
                        let t = &mut self.conns[idx as usize];
                        let backoff = (t.rto as u64) << t.persist_backoff.min(16);
                        t.rto_at = now.add_micros(backoff.min(dur_us(self.cfg.max_rto) as u64));
                        self.schedule(idx);
                    }
                    return true;
                }
                let len = buffered.min(t.mss as usize);
                let fin = t.fin_queued && len == buffered && t.fin_sent();
                if len > 0 || fin {
                    self.stats.tcp_retransmits += 1;
                    karn(t, una);
                    let fl = flags::ACK
                        | if fin { flags::FIN } else { 0 }
                        | if len > 0 { flags::PSH } else { 0 };
                    if self.emit(idx, sink, una, fl, 0, len).is_none() {
                        self.conns[idx as usize].retransmit_one = true;
                        return false;
                    }
                    let t = &mut self.conns[idx as usize];
                    t.rto_at = now.add_micros(t.rto as u64);
                    t.rexmit_next = t.rexmit_next.max(una.add(len));
                    sent += 1;
                }
                continue;
            }
            if t.retransmit_hole {
                t.retransmit_hole = false;
                if let Some((seq, len)) = next_hole(t) {
                    let off = seq.diff(t.snd_una) as usize;
                    self.stats.tcp_retransmits += 1;
                    karn(t, seq);
                    self.stats.tcp_sack_retransmits += 1;
                    if self.emit(idx, sink, seq, flags::ACK, off, len).is_none() {
                        self.conns[idx as usize].retransmit_hole = true;
                        return false;
                    }
                    let t = &mut self.conns[idx as usize];
                    t.rexmit_next = seq.add(len);
                    sent += 1;
                    continue;
                }
                // No hole left below the highest SACK: behave as NewReno (inflate).
                t.cwnd = t.cwnd.saturating_add(t.mss);
            }
            let sent_off = t.snd_nxt.diff(t.snd_una).max(0) as usize;
            let unsent = buffered.saturating_sub(sent_off);
            let in_flight = t.snd_nxt.diff(t.snd_una).max(0) as u32;
            let wnd = t.snd_wnd.min(t.cwnd);
            let avail = wnd.saturating_sub(in_flight) as usize;
            let len = unsent.min(avail).min(t.mss as usize);
            let can_fin = matches!(
                t.state,
                TcpState::FinWait1 | TcpState::Closing | TcpState::LastAck
            );
            // The FIN rides on (or follows) the segment that sends the last buffered byte.
            let fin = t.fin_queued && can_fin && sent_off + len == buffered;
            if len > 0 || fin {
                // No Nagle: servers on this stack always want TCP_NODELAY behaviour.
                let nxt = t.snd_nxt;
                if t.snd_nxt.lt(t.snd_max) {
                    self.stats.tcp_retransmits += 1;
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
                if self.emit(idx, sink, nxt, fl, sent_off, len).is_none() {
                    return false;
                }
                let t = &mut self.conns[idx as usize];
                t.snd_nxt = t.snd_nxt.add(len + fin as usize);
                t.snd_max = t.snd_max.max(t.snd_nxt);
                if t.rto_at == Instant::NEVER || t.persist {
                    t.persist = false;
                    t.rto_at = now.add_micros(t.rto as u64);
                }
                if t.tlp_at == Instant::NEVER && t.tlp_probes == 0 {
                    t.tlp_at = now.add_micros(t.pto_us());
                }
                sent += 1;
                continue;
            }
            // Nothing sendable. A zero window with data waiting and nothing in flight
            // starts the persist timer.
            if unsent > 0 && t.snd_wnd == 0 && in_flight == 0 && !t.persist {
                t.persist = true;
                t.persist_backoff = 0;
                t.rto_at = now.add_micros(t.rto as u64);
            }
            if t.ack_now && sent == 0 {
                let nxt = ack_seq(t);
                let copies = 1 + t.dup_acks_owed;
                t.dup_acks_owed = 0;
                for _ in 0..copies {
                    if self.emit(idx, sink, nxt, flags::ACK, 0, 0).is_none() {
                        return false;
                    }
                }
            }
            self.conns[idx as usize].dup_acks_owed = 0;
            break;
        }
        self.schedule(idx);
        true
    }

    /// Writes one segment of connection `idx` into the sink: `len` payload bytes starting
    /// `off` bytes into the send buffer. None when the sink has no buffer.
    fn emit<S: TxSink + ?Sized>(
        &mut self,
        idx: u32,
        sink: &mut S,
        seq: SeqNumber,
        fl: u8,
        off: usize,
        len: usize,
    ) -> Option<()> {
        let now = self.now;
        self.ip_ident = self.ip_ident.wrapping_add(1);
        let t = &self.conns[idx as usize];
        let mac = t.peer_mac?;
        let syn = fl & flags::SYN != 0;
        let mut opts = TcpOptions::default();
        let ts_now = (now.millis() as u32).wrapping_add(t.ts_offset);
        if syn {
            opts.mss = Some((self.cfg.mtu - 40) as u16);
            if t.offer_wscale {
                opts.window_scale = Some(t.rcv_wscale);
            }
            opts.sack_permitted = t.sack_ok;
            if t.ts_enabled {
                opts.timestamps = Some((
                    ts_now,
                    if t.state == TcpState::SynSent {
                        0
                    } else {
                        t.ts_recent
                    },
                ));
            }
        } else {
            if t.ts_enabled {
                opts.timestamps = Some((ts_now, t.ts_recent));
            }
            if t.sack_ok && t.ooo_len > 0 {
                // RFC 2018: the first block holds the most recently received data; the
                // others follow in sequence order.
                let ranges = &t.ooo[..t.ooo_len as usize];
                let latest = ranges
                    .iter()
                    .position(|&(s, e)| t.ooo_last.ge(s) && t.ooo_last.lt(e))
                    .unwrap_or(0);
                let mut n = 0;
                for i in std::iter::once(latest)
                    .chain((0..ranges.len()).filter(|&i| i != latest))
                    .take(3)
                {
                    opts.sack_blocks[n] = (ranges[i].0 .0, ranges[i].1 .0);
                    n += 1;
                }
                opts.sack_count = n as u8;
            }
        }
        // Receiver-side silly window avoidance (RFC 9293 3.8.6.2.2): move the right edge
        // only by at least min(MSS, buffer/2); the edge never moves left.
        let free = t.rcv_window();
        let cur = (t.rcv_adv.diff(t.rcv_nxt).max(0) as u32).min(free);
        let step = t.mss.min(t.recv.capacity() as u32 / 2);
        let adv = if syn || free >= cur.saturating_add(step) {
            free
        } else {
            cur
        };
        let window = if syn {
            adv.min(65535)
        } else {
            (adv >> t.rcv_wscale).min(65535)
        } as u16;
        let ack = if t.state == TcpState::SynSent && fl & flags::ACK == 0 {
            None
        } else {
            Some(t.rcv_nxt)
        };
        let repr = TcpRepr {
            src_port: t.local_port,
            dst_port: t.remote_port,
            seq,
            ack,
            flags: fl & !flags::ACK,
            window,
            options: opts,
        };
        let eth = crate::wire::EthernetRepr {
            dst: mac,
            src: self.cfg.mac,
            vlan_id: self.cfg.vlan_id,
            ethertype: EtherType::Ipv4,
        };
        let e = eth.header_len();
        let th = e + ipv4::HEADER_LEN;
        let pl = th + repr.header_len();
        let end = pl + len;
        let ip = wirespeed_wire::Ipv4Repr {
            src: self.cfg.ipv4,
            dst: t.remote_ip,
            protocol: IpProtocol::Tcp,
            payload_len: end - th,
            ttl: 64,
            ident: self.ip_ident,
            dont_frag: true,
        };
        let (src_ip, dst_ip) = (self.cfg.ipv4, t.remote_ip);
        let mut too_small = false;
        let send_buf = &t.send;
        let ok = sink.tx_frame(&mut |buf: &mut [u8]| {
            if buf.len() < end {
                // A sink with buffers below max_frame_len() is misconfigured: the segment is
                // dropped (counted) and retransmission covers it, rather than a partial frame.
                too_small = true;
                return 0;
            }
            send_buf.peek_at(off, &mut buf[pl..end]);
            let _ = eth.emit(buf);
            let _ = ip.emit(&mut buf[e..]);
            let _ = repr.emit(&mut buf[th..]);
            fill_checksum(&mut buf[th..end], src_ip, dst_ip);
            end
        });
        if !ok {
            self.stats.tx_sink_full += 1;
            return None;
        }
        if too_small {
            self.stats.tx_buffer_too_small += 1;
        }
        self.stats.tx_frames += 1;
        self.stats.tcp_segments_out += 1;
        let t = &mut self.conns[idx as usize];
        if ack.is_some() {
            t.ack_now = false;
            t.delack_at = Instant::NEVER;
            t.unacked_segs = 0;
            t.last_adv_wnd = (window as u32) << if syn { 0 } else { t.rcv_wscale };
            t.rcv_adv = t.rcv_nxt.add(t.last_adv_wnd as usize);
            t.rcv_wup = t.rcv_nxt;
        }
        Some(())
    }
}

/// The probe could not leave (no TX buffer): try again on the next `transmit`.
fn t_retry_probe(t: &mut Tcb) {
    t.retransmit_one = true;
}

/// Tail loss probes per stall before the RTO takes over.
const MAX_PROBES: u8 = 2;

/// Prunes the scoreboard below SND.UNA and merges the ACK's SACK blocks (those inside
/// (SND.UNA, SND.MAX]). Returns whether the scoreboard holds any range afterwards.
fn sack_update(t: &mut Tcb, o: &TcpOptions) -> bool {
    let (una, max) = (t.snd_una, t.snd_max);
    let mut n = 0;
    for i in 0..t.sacked_len as usize {
        let (s, e) = t.sacked[i];
        if e.gt(una) {
            t.sacked[n] = (s.max(una), e);
            n += 1;
        }
    }
    t.sacked_len = n as u8;
    for &(l, r) in &o.sack_blocks[..(o.sack_count as usize).min(4)] {
        let (l, r) = (SeqNumber(l).max(una), SeqNumber(r));
        if !l.lt(r) || r.gt(max) {
            continue; // empty, stale or beyond what we sent: ignore (RFC 2883 D-SACK too)
        }
        let mut start = l;
        let mut end = r;
        let mut kept = [(SeqNumber(0), SeqNumber(0)); MAX_SACKED];
        let mut k = 0;
        for &(s, e) in &t.sacked[..t.sacked_len as usize] {
            if e.lt(start) || s.gt(end) {
                kept[k] = (s, e);
                k += 1;
            } else {
                start = start.min(s);
                end = end.max(e);
            }
        }
        if k == MAX_SACKED {
            continue; // table full: this block is forgotten
        }
        let pos = kept[..k]
            .iter()
            .position(|&(s, _)| s.gt(start))
            .unwrap_or(k);
        for i in (pos..k).rev() {
            kept[i + 1] = kept[i];
        }
        kept[pos] = (start, end);
        t.sacked = kept;
        t.sacked_len = (k + 1) as u8;
    }
    t.sacked_len > 0
}

/// The next hole to retransmit: the first sequence at or above `rexmit_next` (and SND.UNA)
/// that is neither SACKed nor beyond the highest SACKed byte, and how much of it fits in
/// one segment before the next SACKed range.
fn next_hole(t: &Tcb) -> Option<(SeqNumber, usize)> {
    let ranges = &t.sacked[..t.sacked_len as usize];
    let high = ranges.iter().map(|&(_, e)| e).reduce(|a, b| a.max(b))?;
    let mut s = t.rexmit_next.max(t.snd_una);
    for &(a, e) in ranges {
        if s.ge(a) && s.lt(e) {
            s = e;
        }
    }
    if !s.lt(high) {
        return None;
    }
    let next_sacked = ranges
        .iter()
        .map(|&(a, _)| a)
        .filter(|a| a.gt(s))
        .reduce(|a, b| a.min(b))
        .unwrap_or(high);
    let buffered_end = t.snd_una.add(t.send.len());
    let limit = next_sacked.min(buffered_end);
    let len = (limit.diff(s).max(0) as usize).min(t.mss as usize);
    (len > 0).then_some((s, len))
}

/// SEQ for segments without data (ACKs, RSTs): SND.MAX, but never beyond the right edge of
/// the peer's window (Linux's tcp_acceptable_seq), so the peer's acceptability test passes
/// even after a go-back-N rewind (SND.NXT too low) or a window that closed under data
/// already sent (SND.MAX too high).
fn ack_seq(t: &Tcb) -> SeqNumber {
    let edge = t.snd_una.add(t.snd_wnd as usize);
    if t.snd_max.gt(edge) {
        edge
    } else {
        t.snd_max
    }
}

/// Whether an ACK reports SACKed data above SND.UNA (RFC 6675's duplicate-ACK test). A
/// receiver that SACKs counts as sending duplicate ACKs even when its window moves between
/// them, which Linux's does while its application keeps reading; without this, every loss
/// waits for the RTO.
fn sacks_above(t: &Tcb, o: &TcpOptions) -> bool {
    t.sack_ok
        && o.sack_blocks[..(o.sack_count as usize).min(4)]
            .iter()
            .any(|&(_, right)| SeqNumber(right).gt(t.snd_una))
}

/// Applies the peer's SYN options (and ours as allowed) to a new connection.
fn negotiate(t: &mut Tcb, o: &TcpOptions, wscale_ok: bool, ts_ok: bool, sack_ok: bool, mtu: usize) {
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
    t.mss = peer_mss.min(mtu as u32 - 40) - ts_overhead;
}

/// RFC 6928 initial window: 10 segments (capped to 14600 bytes' worth for large MSS).
fn initial_cwnd(mss: u32) -> u32 {
    (10 * mss).min((4 * mss).max(14600))
}

/// Records an out-of-order range (data already written into the ring by the caller is not
/// assumed: this writes it). Returns false when the range table is full.
fn insert_ooo(t: &mut Tcb, seq: SeqNumber, data: &[u8]) -> bool {
    let mut start = seq;
    let mut end = seq.add(data.len());
    // Merge with every overlapping or adjacent range.
    let mut kept: [(SeqNumber, SeqNumber); MAX_OOO] = [(SeqNumber(0), SeqNumber(0)); MAX_OOO];
    let mut n = 0;
    for &(s, e) in &t.ooo[..t.ooo_len as usize] {
        if e.lt(start) || s.gt(end) {
            kept[n] = (s, e);
            n += 1;
        } else {
            start = start.min(s);
            end = end.max(e);
        }
    }
    if n == MAX_OOO {
        return false;
    }
    let off = seq.diff(t.rcv_nxt) as usize;
    t.recv.write_at(t.recv.len() + off, data);
    // Keep sorted by start.
    let pos = kept[..n]
        .iter()
        .position(|&(s, _)| s.gt(start))
        .unwrap_or(n);
    for i in (pos..n).rev() {
        kept[i + 1] = kept[i];
    }
    kept[pos] = (start, end);
    t.ooo = kept;
    t.ooo_len = (n + 1) as u8;
    t.ooo_last = seq;
    true
}

/// After in-order data advanced `rcv_nxt`, absorbs out-of-order ranges it now reaches.
fn merge_ooo(t: &mut Tcb) {
    while t.ooo_len > 0 {
        let (s, e) = t.ooo[0];
        if s.gt(t.rcv_nxt) {
            break;
        }
        if e.gt(t.rcv_nxt) {
            let n = e.diff(t.rcv_nxt) as usize;
            t.recv.extend(n);
            t.rcv_nxt = e;
        }
        t.ooo.copy_within(1..t.ooo_len as usize, 0);
        t.ooo_len -= 1;
    }
}
