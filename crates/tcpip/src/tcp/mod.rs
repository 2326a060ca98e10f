//! TCP: the connection table, the state machine, output and timers.
//!
//! One `Tcb` per connection lives in a slab (`Tcp::conns`) indexed by a `u32`; the
//! 4-tuple demux is a hash map from a [`FlowKey`] (remote address, remote port, local port;
//! the local address is the stack's own in that family) to that index: one lookup per
//! segment, no allocation. Send and receive buffers are rings allocated once per connection and
//! recycled through pools.
//!
//! TCP does not know the stack around it. Each call gets a [`Ctx`]: the configuration, the
//! counters, the clock, and an [`Actions`] buffer into which it writes what the stack must
//! do afterwards (queue a control segment such as an RST or a SYN cookie, report a readiness
//! event). Connection output writes straight into the caller's `TxSink`; the stack resolves
//! the next hop first. Deadlines stay here: each connection's earliest one is kept in a heap
//! that the stack asks with [`Tcp::next_timer`].
//!
//! Files: `tcb.rs` (the connection block), `api.rs` (socket calls), `table.rs` (allocation,
//! close, abort), `input.rs` (demux and checks common to all states), `listen.rs` (LISTEN,
//! SYN cookies), `handshake.rs` (SYN_SENT and SYN_RECEIVED), `ack.rs` and `data.rs`
//! (synchronized states), `closing.rs` (FIN handling), `output.rs`, `timers.rs`, `sack.rs`
//! (scoreboard and out-of-order ranges), `rtt.rs`, `congestion.rs` (what the algorithms share), `newreno.rs`, `cubic.rs`,
//! `controller.rs` (the enum a connection holds).

mod ack;
mod api;
mod closing;
mod congestion;
mod controller;
mod cubic;
mod data;
mod handshake;
mod input;
mod listen;
mod newreno;
mod output;
mod pmtu;
mod rtt;
mod sack;
mod table;
mod tcb;
mod timers;

#[cfg(test)]
pub(crate) use congestion::CongestionControl;
pub use congestion::{CongestionAlgorithm, UnknownCongestionAlgorithm};
pub(crate) use output::OutputReady;
pub(crate) use pmtu::QuotedSegment;
pub(crate) use tcb::Tcb;
pub use tcb::{TcpInfo, TcpState};

use crate::util::FlowHashBuilder;
use crate::{Config, Event, EventKind, Handle, Instant, Stats};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::time::Duration;
use wirespeed_wire::ip_options_echo::{EchoRefused, EchoedOptions};
use wirespeed_wire::{IpAddress, Ipv6Addr, MacAddr, TcpControl, TcpRepr};

/// SACK blocks a segment carries at most: as many as fit beside the timestamp option in the
/// 40 bytes of TCP options (RFC 2018 3), with or without it.
const SACK_BLOCKS_SENT: usize = 3;
/// Most out-of-order ranges kept per connection (more are dropped and retransmitted).
const MAX_OOO: usize = 4;
/// Most SACKed ranges remembered per connection (more are ignored: retransmission stays
/// correct, only less precise).
const MAX_SACKED: usize = 4;
/// Dup-ACK threshold for fast retransmit.
const DUPACK_THRESHOLD: u8 = 3;
/// MSS assumed when the peer sends none (RFC 9293).
const DEFAULT_MSS: u16 = 536;

/// A listening port.
pub(crate) struct Listener {
    pub(crate) gen: u32,
    pub(crate) open: bool,
    pub(crate) port: u16,
    pub(crate) backlog: usize,
    pub(crate) syn_rcvd: usize,
    pub(crate) accept_queue: VecDeque<(u32, u32)>,
    pub(crate) ev_mask: u8,
}

/// A payload-less segment sent outside any connection's output (RST, SYN cookie,
/// keepalive probe), for the stack to frame and queue. `mac: None`: resolve `dst` first.
#[derive(Clone, Copy)]
pub(crate) struct CtrlSegment {
    /// One of our addresses: the one the answered segment came to, or the connection's.
    pub(crate) src: IpAddress,
    pub(crate) dst: IpAddress,
    pub(crate) mac: Option<MacAddr>,
    pub(crate) repr: TcpRepr,
    /// IPv4 options: those of the segment it answers, echoed, or its connection's.
    pub(crate) ip_opts: EchoedOptions,
}

/// What a TCP call asks the stack to do once it returns. Both lists are reused buffers:
/// the stack empties them after every call, so steady state allocates nothing.
pub(crate) struct Actions {
    pub(crate) segments: Vec<CtrlSegment>,
    pub(crate) events: Vec<Event>,
    /// Peers whose connections time out unanswered: the stack checks their next hop's MAC.
    pub(crate) suspects: Vec<IpAddress>,
}

impl Actions {
    pub(crate) fn with_capacity(n: usize) -> Actions {
        Actions {
            segments: Vec::with_capacity(n),
            events: Vec::with_capacity(n),
            suspects: Vec::new(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.segments.is_empty() && self.events.is_empty() && self.suspects.is_empty()
    }
}

/// What the stack lends TCP for one call.
pub(crate) struct Ctx<'a> {
    pub(crate) cfg: &'a Config,
    pub(crate) stats: &'a mut Stats,
    pub(crate) now: Instant,
    /// The stack's IPv4 identification counter (connection output numbers its frames).
    pub(crate) ip_ident: &'a mut u16,
    pub(crate) out: &'a mut Actions,
    /// The ECN codepoint of the datagram whose segment is being taken (`ipv4::ecn`;
    /// NOT_ECT outside input).
    pub(crate) ecn: u8,
    /// Our IPv6 link-local address while it is usable (DAD over), the source of a connection
    /// to a link-local address (`addr6::select_source`).
    pub(crate) link_local: Option<Ipv6Addr>,
    /// The IPv4 options an answer to that segment carries (its own, echoed; none outside
    /// input). A refusal means no RST or ACK answers it, and its SYN-ACK goes without.
    pub(crate) reply_opts: Result<EchoedOptions, EchoRefused>,
}

impl Ctx<'_> {
    /// Asks the stack to queue a control segment that answers the segment being taken, with
    /// its IP options echoed (Linux's `ip_send_unicast_reply`).
    fn send_ctrl(&mut self, src: IpAddress, dst: IpAddress, mac: Option<MacAddr>, repr: &TcpRepr) {
        match self.reply_opts {
            Ok(opts) => self.send_ctrl_with(src, dst, mac, repr, opts),
            Err(EchoRefused) => self.stats.ip_options_unechoable += 1,
        }
    }

    /// Asks the stack to queue a control segment with IP options `ip_opts`.
    fn send_ctrl_with(
        &mut self,
        src: IpAddress,
        dst: IpAddress,
        mac: Option<MacAddr>,
        repr: &TcpRepr,
        ip_opts: EchoedOptions,
    ) {
        if repr.control() == TcpControl::Rst {
            self.stats.tcp_rst_sent += 1;
        }
        self.stats.tcp_segments_out += 1;
        self.out.segments.push(CtrlSegment {
            src,
            dst,
            mac,
            repr: *repr,
            ip_opts,
        });
    }

    /// The address a connection to `remote` goes from (`addr6::select_source`).
    fn local_addr(&self, remote: IpAddress) -> Option<IpAddress> {
        crate::addr6::select_source(self.cfg, self.link_local, remote)
    }

    /// Reports an event unless one of the same kind for the same socket is pending
    /// (`mask` is the socket's set of pending kinds).
    fn event(&mut self, handle: Handle, kind: EventKind, mask: &mut u8) {
        if *mask & kind.bit() == 0 {
            *mask |= kind.bit();
            self.out.events.push(Event { handle, kind });
        }
    }
}

/// All TCP state of one stack: connections, listeners, and their scheduling.
pub(crate) struct Tcp {
    pub(crate) conns: Vec<Tcb>,
    free_conns: Vec<u32>,
    live_conns: usize,
    demux: HashMap<FlowKey, u32, FlowHashBuilder>,
    listeners: Vec<Listener>,
    listen_ports: HashMap<u16, u32, FlowHashBuilder>,
    /// Connections with something to send, in the order they asked.
    dirty: Vec<(u32, u32)>,
    dirty_spare: Vec<(u32, u32)>,
    /// Connections whose next hop is being resolved.
    arp_waiting: Vec<(u32, u32)>,
    timers: BinaryHeap<Reverse<(Instant, u32, u32)>>,
    send_pool: Vec<Box<[u8]>>,
    recv_pool: Vec<Box<[u8]>>,
    port_cursor: u32,
    /// Bumped when a neighbour's MAC changes: a connection's MAC taken at another epoch is
    /// looked up again before its next segment (docs/TCPIP.md, "Neighbours that move").
    /// Never 0, the epoch of a connection without a MAC.
    neigh_epoch: u16,
}

impl Tcp {
    /// Tables sized from `cfg.max_connections` up front.
    pub(crate) fn new(cfg: &Config) -> Tcp {
        let h = FlowHashBuilder { seed: cfg.secret };
        let n = cfg.max_connections.max(1);
        Tcp {
            conns: Vec::with_capacity(n),
            free_conns: Vec::with_capacity(n),
            live_conns: 0,
            demux: HashMap::with_capacity_and_hasher(n, h),
            listeners: Vec::new(),
            listen_ports: HashMap::with_hasher(h),
            dirty: Vec::with_capacity(n),
            dirty_spare: Vec::with_capacity(n),
            arp_waiting: Vec::new(),
            timers: BinaryHeap::with_capacity(2 * n),
            send_pool: Vec::new(),
            recv_pool: Vec::new(),
            port_cursor: (cfg.secret as u32) ^ ((cfg.secret >> 32) as u32),
            neigh_epoch: 1,
        }
    }

    /// Number of connections held (all states).
    pub(crate) fn connection_count(&self) -> usize {
        self.live_conns
    }

    /// Clears `bit` from a socket's pending events once the application took that event.
    pub(crate) fn event_taken(&mut self, handle: Handle, bit: u8) {
        match handle {
            Handle::Tcp(c) => {
                if let Some(t) = self.conns.get_mut(c.idx as usize) {
                    if t.gen == c.gen {
                        t.ev_mask &= !bit;
                    }
                }
            }
            Handle::Listener(l) => {
                if let Some(x) = self.listeners.get_mut(l.idx as usize) {
                    if x.gen == l.gen {
                        x.ev_mask &= !bit;
                    }
                }
            }
            Handle::Udp(_) => {}
        }
    }
}

/// A connection's demux key: the remote address as 128 bits (an IPv4 one as IPv4-mapped
/// IPv6, a source IPv6 TCP input never takes), both ports, and which of our addresses it
/// came to (one per family, and over IPv6 the link-local one beside it).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct FlowKey {
    addr: u128,
    ports: u32,
    to_link_local: bool,
}

impl Hash for FlowKey {
    /// Three words into the flow hasher (a derived `u128` would hash it byte by byte).
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_u64(self.addr as u64);
        h.write_u64((self.addr >> 64) as u64);
        h.write_u64(u64::from(self.ports) | u64::from(self.to_link_local) << 32);
    }
}

fn flow_key(ip: IpAddress, to_link_local: bool, rport: u16, lport: u16) -> FlowKey {
    let addr = match ip {
        IpAddress::V4(a) => 0xffff_0000_0000 | a.to_u32() as u128,
        IpAddress::V6(a) => u128::from_be_bytes(a.0),
    };
    FlowKey {
        addr,
        ports: ((rport as u32) << 16) | lport as u32,
        to_link_local,
    }
}

/// Whether `local` (one of our addresses) is the IPv6 link-local one.
fn is_link_local(local: IpAddress) -> bool {
    matches!(local, IpAddress::V6(a) if a.is_link_local())
}

/// The words of an address for the keyed hash (ISNs, SYN cookies).
fn address_words(ip: IpAddress) -> [u64; 2] {
    match ip {
        IpAddress::V4(a) => [a.to_u32() as u64, 0],
        IpAddress::V6(a) => {
            let v = u128::from_be_bytes(a.0);
            [v as u64, (v >> 64) as u64]
        }
    }
}

fn dur_us(d: Duration) -> u32 {
    d.as_micros().min(u32::MAX as u128) as u32
}
