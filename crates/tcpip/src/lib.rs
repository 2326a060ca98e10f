//! A sans-I/O userspace TCP/IP stack, one instance per shard.
//!
//! The stack never performs I/O and never reads a clock: the shard's poll loop hands it
//! received frames with [`Stack::receive`], lets it emit frames into device buffers with
//! [`Stack::transmit`] (through a [`TxSink`], so an AF_XDP driver can lend UMEM frames and
//! nothing is copied twice), and asks [`Stack::poll_at`] when the next timer is due. Time is
//! an [`Instant`] the caller passes in (microseconds on any monotonic clock).
//!
//! A poll loop looks like this (`nic` is a `wirespeed_nic::FrameIo`):
//!
//! ```ignore
//! loop {
//!     let now = Instant::from_micros(clock_us());
//!     nic.rx_burst(64, |frame| stack.receive(now, frame));
//!     for ev in stack.drain_events() { runtime.wake(ev.handle, ev.kind); }
//!     runtime.run_ready_tasks(&mut stack);       // tcp_recv / tcp_send / tcp_accept ...
//!     stack.transmit(now, &mut |fill: &mut dyn FnMut(&mut [u8]) -> usize| nic.tx_frame(|buf| fill(buf)));
//!     nic.flush();
//!     idle_until(stack.poll_at());               // busy-poll or sleep until the next timer
//! }
//! ```
//!
//! Sockets are plain handles ([`ConnId`], [`ListenerId`], [`UdpId`]) into tables the stack
//! owns; every operation is a method on [`Stack`]. Readiness is reported through an event
//! queue ([`Stack::drain_events`]): each socket has at most one pending event of each kind,
//! so an async runtime wakes exactly the tasks that can progress without scanning sockets.
//!
//! One stack owns one IPv4 address on one Ethernet interface (optionally one 802.1Q VLAN).
//! Nothing inside is shared, locked or atomic: a connection never leaves its shard.
//!
//! See `docs/TCPIP.md` for the design, what is supported and what is not.

#![forbid(unsafe_code)]

mod addr6;
mod frag_queues;
mod frame_queue;
mod icmp;
mod icmpv6;
mod ipv6;
mod ipv6_frag;
mod ndp;
mod neighbour;
mod pmtu;
mod reassembly;
mod ring;
mod sockets;
mod stack;
mod tcp;
mod udp;
mod util;

#[cfg(test)]
mod tests;

pub use stack::{Stack, VecSink};
pub use tcp::{CongestionAlgorithm, TcpInfo, TcpState, UnknownCongestionAlgorithm};
pub use wirespeed_wire as wire;
pub use wirespeed_wire::toeplitz;
pub use wirespeed_wire::{IpAddress, Ipv4Addr, Ipv6Addr, MacAddr};

use std::time::Duration;

/// What transport input needs from the IP header it came under, of either family.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IpHeader {
    pub(crate) src: IpAddress,
    pub(crate) dst: IpAddress,
    /// The ECN codepoint (`ipv4::ecn`).
    pub(crate) ecn: u8,
}

/// The time of day now in milliseconds since midnight UTC: RFC 791's timestamp (Linux's
/// `inet_current_timestamp`), for ICMP timestamp replies and IP timestamp options. The one
/// reading of the wall clock; everything else runs on the caller's [`Instant`].
pub(crate) fn wall_clock_ms() -> u32 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    wirespeed_wire::ip_options_echo::ms_since_midnight(since_epoch.as_millis() as u64)
}

/// A point in time: microseconds since an arbitrary epoch chosen by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

#[allow(clippy::should_implement_trait)] // `add(Duration)` saturates; no `Add` impl on purpose
impl Instant {
    pub const ZERO: Instant = Instant(0);
    /// Later than any real time: "no deadline".
    pub const NEVER: Instant = Instant(u64::MAX);

    pub const fn from_micros(us: u64) -> Self {
        Instant(us)
    }
    pub const fn from_millis(ms: u64) -> Self {
        Instant(ms.saturating_mul(1000))
    }
    pub const fn micros(self) -> u64 {
        self.0
    }
    pub const fn millis(self) -> u64 {
        self.0 / 1000
    }
    /// `self + d`, saturating at [`Instant::NEVER`].
    pub fn add(self, d: Duration) -> Instant {
        Instant(
            self.0
                .saturating_add(d.as_micros().min(u64::MAX as u128) as u64),
        )
    }
    pub const fn add_micros(self, us: u64) -> Instant {
        Instant(self.0.saturating_add(us))
    }
    /// `self - earlier` (zero if `earlier` is later).
    pub fn since(self, earlier: Instant) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }
}

/// TCP keepalive settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// Idle time before the first probe.
    pub idle: Duration,
    /// Time between unanswered probes.
    pub interval: Duration,
    /// Unanswered probes before the connection is reset with [`Error::TimedOut`].
    pub probes: u8,
}

/// Stack configuration. [`Config::new`] fills in defaults suited to a LAN server.
#[derive(Debug, Clone)]
pub struct Config {
    pub mac: MacAddr,
    pub ipv4: Ipv4Addr,
    pub prefix_len: u8,
    pub gateway: Option<Ipv4Addr>,
    /// An IPv6 address beside the IPv4 one (dual stack); `None`: IPv6 frames are counted
    /// and dropped (`ipv6_unsupported`). With it the stack also owns its link-local address
    /// ([`Config::ipv6_link_local`]), as every Linux interface does.
    pub ipv6: Option<Ipv6Addr>,
    /// The IPv6 on-link prefix length (64 by default).
    pub ipv6_prefix_len: u8,
    /// The IPv6 default router (on-link).
    pub ipv6_gateway: Option<Ipv6Addr>,
    /// Run duplicate address detection (RFC 4862 §5.4) for `ipv6` and the link-local address
    /// before using them: one probe each at the first `transmit`, then `arp_retry` (1 s)
    /// tentative, as Linux's defaults (`dad_transmits` 1, `retrans_time` 1 s). Off: usable
    /// at once, as `ip addr add ... nodad`.
    pub ipv6_dad: bool,
    /// IP MTU (the Ethernet payload size), 576..=9000.
    pub mtu: usize,
    /// Accept only frames with this 802.1Q VLAN id and tag every frame sent; `None`: untagged.
    pub vlan_id: Option<u16>,
    /// Most TCP connections (all states, TIME_WAIT included) this stack will hold.
    pub max_connections: usize,
    /// Per-connection send buffer bytes.
    pub send_buffer: usize,
    /// Per-connection receive buffer bytes (the most we ever advertise).
    pub recv_buffer: usize,
    /// Bytes of queued datagrams per UDP socket (each datagram costs 8 bytes more).
    pub udp_recv_buffer: usize,
    /// Answer SYNs with SYN cookies when a listener's backlog is full.
    pub syn_cookies: bool,
    pub window_scaling: bool,
    pub timestamps: bool,
    pub sack_permitted: bool,
    /// Answer an ECN-setup SYN (ECE and CWR, not itself ECT) with an ECN-setup SYN-ACK and
    /// use ECN on that connection (RFC 3168), as Linux's default `tcp_ecn` = 2 does; active
    /// opens never ask for it.
    pub ecn: bool,
    /// Longest an ACK for received data is held back hoping to piggyback it.
    pub delayed_ack: Duration,
    pub initial_rto: Duration,
    pub min_rto: Duration,
    pub max_rto: Duration,
    /// Retransmissions of one segment (or SYN) before the connection fails with TimedOut.
    pub max_retransmits: u8,
    /// Retransmissions of a SYN or SYN-ACK before the attempt is dropped (Linux: 6 and 5).
    pub syn_retransmits: u8,
    /// How long an orphaned connection (closed by the application) may sit in FIN_WAIT_2
    /// waiting for the peer's FIN (Linux `tcp_fin_timeout`).
    pub fin_timeout: Duration,
    /// Most segments one connection sends per `transmit` call before yielding to the others.
    pub max_burst: u16,
    /// TIME_WAIT duration (2*MSL).
    pub time_wait: Duration,
    pub keepalive: Option<Keepalive>,
    /// Lifetime of a learned neighbour entry (ARP or NDP).
    pub arp_timeout: Duration,
    /// Time between ARP requests or neighbour solicitations for an unresolved address (3
    /// tries, then give up).
    pub arp_retry: Duration,
    /// Ephemeral port range for active opens, inclusive.
    pub ephemeral_ports: (u16, u16),
    /// Secret for initial sequence numbers, SYN cookies and the demux hash: give each
    /// stack a random value (the stack has no entropy source of its own).
    pub secret: u64,
    /// Take TCP/UDP segments whose checksum field holds only the pseudo-header sum, as a
    /// sender's kernel leaves it for checksum offload to complete (`CHECKSUM_PARTIAL`).
    /// Set it only for a device that hands such frames on unfinished, a veth: they never
    /// crossed a wire, and Linux itself trusts them there. Off (the default), they are bad
    /// checksums. Counted in `tcp_rx_csum_partial` / `udp_rx_csum_partial` when taken and
    /// in `*_bad_checksum_partial` when dropped; see `docs/TCPIP.md`.
    pub accept_partial_checksums: bool,
    /// The device completes the TCP checksum of every IPv4 frame it sends (AF_XDP TX
    /// metadata in copy mode, a NIC's checksum offload): the stack writes only the
    /// pseudo-header sum into the field (`wire::tcp::fill_partial_checksum`) and never reads
    /// a segment's payload for it. Every IPv4 TCP frame, data and control alike, so the
    /// device can request completion for all of them (`wire::tcp::checksum_offload_at`).
    /// Off (the default): full checksums.
    pub tx_checksum_offload: bool,
    /// Most bytes the IPv4 reassembly queues may hold (Linux `ipfrag_high_thresh`, 4 MiB).
    /// Above it every fragment is dropped (`ip_frag_mem_exceeded`) until queues complete or
    /// time out, as in Linux since 4.17 (`ipfrag_low_thresh` and its eviction are gone).
    /// 0 turns reassembly off: fragments are dropped (`ip_fragments_dropped`).
    pub ipfrag_high_thresh: usize,
    /// How long an incomplete datagram is kept from its first fragment (Linux `ipfrag_time`,
    /// 30 s); then it is dropped, with ICMP time exceeded if its offset-0 fragment came.
    pub ipfrag_time: Duration,
    /// Most bytes the IPv6 reassembly queues may hold (Linux `ip6frag_high_thresh`, 4 MiB),
    /// apart from IPv4's: Linux keeps each family's fragments in its own `fqdir`, with its
    /// own bound. Above it every IPv6 fragment is dropped (`ip6_frag_mem_exceeded`) until
    /// queues complete or time out; 0 turns IPv6 reassembly off (`ip6_fragments_dropped`).
    pub ip6frag_high_thresh: usize,
    /// How long an incomplete IPv6 datagram is kept from its first fragment (Linux
    /// `ip6frag_time`, 60 s: `IPV6_FRAG_TIMEOUT`, RFC 8200 §4.5's 60 seconds, twice IPv4's);
    /// then it is dropped, with ICMPv6 time exceeded if its offset-0 fragment came to us.
    pub ip6frag_time: Duration,
    /// Linux `ipfrag_max_dist` (64): a queue that took no fragment while more than this many
    /// fragments from its source arrived is restarted empty (it has probably lost some, and
    /// its ident may come round again). 0: off. IPv4 only, as in Linux.
    pub ipfrag_max_dist: u32,
    /// How every connection's congestion window opens and closes, by Linux's names: `cubic`
    /// (RFC 9438, the default, as Linux's `tcp_congestion_control` defaults) or `reno`
    /// (NewReno). See `docs/TCPIP.md`, "Congestion control".
    pub congestion_control: CongestionAlgorithm,
}

impl Config {
    /// Our address in `remote`'s family (IPv6 only where one is configured) that a datagram
    /// to `remote` goes from: over IPv6 the link-local one to a link-local destination (RFC
    /// 6724 rule 2, scope), `ipv6` elsewhere. (While the link-local address is not usable,
    /// its DAD under way or failed, the stack sends from `ipv6` instead.)
    pub fn local_addr(&self, remote: IpAddress) -> Option<IpAddress> {
        addr6::select_source(self, self.ipv6_link_local(), remote)
    }

    /// Our IPv6 link-local address, where IPv6 is configured: fe80::/64 and the modified
    /// EUI-64 of `mac` (RFC 4291 §2.5.1), what Linux's addrconf gives every interface.
    pub fn ipv6_link_local(&self) -> Option<Ipv6Addr> {
        self.ipv6.map(|_| Ipv6Addr::link_local_eui64(self.mac))
    }

    /// The TCP MSS that fits the MTU over `remote`'s family.
    pub fn mss_for(&self, remote: IpAddress) -> u16 {
        (self.mtu - wirespeed_wire::ip::header_len_for(remote) - 20).min(u16::MAX as usize) as u16
    }

    pub fn new(mac: MacAddr, ipv4: Ipv4Addr, prefix_len: u8) -> Config {
        Config {
            mac,
            ipv4,
            prefix_len,
            gateway: None,
            ipv6: None,
            ipv6_prefix_len: 64,
            ipv6_gateway: None,
            ipv6_dad: true,
            mtu: 1500,
            vlan_id: None,
            max_connections: 1024,
            send_buffer: 64 * 1024,
            recv_buffer: 64 * 1024,
            udp_recv_buffer: 256 * 1024,
            syn_cookies: true,
            window_scaling: true,
            timestamps: true,
            sack_permitted: true,
            ecn: true,
            delayed_ack: Duration::from_millis(5),
            initial_rto: Duration::from_secs(1),
            min_rto: Duration::from_millis(200),
            max_rto: Duration::from_secs(60),
            max_retransmits: 12,
            syn_retransmits: 5,
            fin_timeout: Duration::from_secs(60),
            max_burst: 64,
            time_wait: Duration::from_secs(60),
            keepalive: None,
            arp_timeout: Duration::from_secs(60),
            arp_retry: Duration::from_secs(1),
            ephemeral_ports: (32768, 60999),
            secret: 0x5eed_cafe_f00d_d00d,
            accept_partial_checksums: false,
            tx_checksum_offload: false,
            ipfrag_high_thresh: 4 * 1024 * 1024,
            ipfrag_time: Duration::from_secs(30),
            ipfrag_max_dist: 64,
            ip6frag_high_thresh: 4 * 1024 * 1024,
            ip6frag_time: Duration::from_secs(60),
            congestion_control: CongestionAlgorithm::Cubic,
        }
    }
}

/// Errors of socket operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Nothing can be done now; an event will tell when to retry.
    WouldBlock,
    /// The handle is stale (closed) or was never valid.
    InvalidHandle,
    /// The operation needs an established connection.
    NotConnected,
    /// The peer reset the connection.
    ConnectionReset,
    /// The peer refused the connection (RST in reply to our SYN).
    ConnectionRefused,
    /// Retransmissions or keepalive probes went unanswered.
    TimedOut,
    /// The connection was aborted locally.
    Aborted,
    /// Sending after `tcp_shutdown`/`tcp_close`.
    BrokenPipe,
    /// The port (or 4-tuple) is taken.
    AddrInUse,
    /// No ephemeral port passed the filter and was free.
    NoPorts,
    /// The connection, listener or socket table is full.
    TableFull,
    /// A datagram larger than the MTU allows.
    MessageTooLong,
    /// An argument is out of range (e.g. port 0).
    InvalidInput,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Error::WouldBlock => "operation would block",
            Error::InvalidHandle => "invalid or closed socket handle",
            Error::NotConnected => "socket not connected",
            Error::ConnectionReset => "connection reset by peer",
            Error::ConnectionRefused => "connection refused",
            Error::TimedOut => "connection timed out",
            Error::Aborted => "connection aborted",
            Error::BrokenPipe => "socket is shut down for writing",
            Error::AddrInUse => "address in use",
            Error::NoPorts => "no free ephemeral port",
            Error::TableFull => "socket table full",
            Error::MessageTooLong => "message too long",
            Error::InvalidInput => "invalid argument",
        })
    }
}

impl std::error::Error for Error {}

pub type Result<T> = core::result::Result<T, Error>;

/// A TCP connection handle. Valid from `tcp_accept`/`tcp_connect` until `tcp_close` or
/// `tcp_abort`; stale handles are detected (generation counter), never confused with reuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId {
    pub(crate) idx: u32,
    pub(crate) gen: u32,
}

impl ConnId {
    /// A small dense number (slot index), handy for indexing per-connection tables.
    pub fn index(&self) -> usize {
        self.idx as usize
    }
}

/// A TCP listener handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListenerId {
    pub(crate) idx: u32,
    pub(crate) gen: u32,
}

impl ListenerId {
    /// A small dense number (slot index), for per-listener tables such as waker lists.
    pub fn index(&self) -> usize {
        self.idx as usize
    }
}

/// A UDP socket handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpId {
    pub(crate) idx: u32,
    pub(crate) gen: u32,
}

impl UdpId {
    /// A small dense number (slot index), for per-socket tables.
    pub fn index(&self) -> usize {
        self.idx as usize
    }
}

/// Any socket handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Handle {
    Tcp(ConnId),
    Listener(ListenerId),
    Udp(UdpId),
}

/// What became possible on a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// Data, end of stream or an error can be read (`tcp_recv`, `udp_recv_from`).
    Readable,
    /// Send buffer space opened, or an active open completed.
    Writable,
    /// A listener has a connection to accept.
    Acceptable,
    /// The connection is finished (closed, reset, timed out); `tcp_state` says how.
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Event {
    pub handle: Handle,
    pub kind: EventKind,
}

impl EventKind {
    pub(crate) fn bit(self) -> u8 {
        match self {
            EventKind::Readable => 1,
            EventKind::Writable => 2,
            EventKind::Acceptable => 4,
            EventKind::Closed => 8,
        }
    }
}

/// Where [`Stack::transmit`] writes frames. It mirrors the NIC drivers' `tx_frame`: the
/// driver lends a buffer (for AF_XDP, a UMEM chunk) and the stack builds the frame in place,
/// so a segment's payload is copied exactly once, from the send buffer into the frame.
///
/// Any `FnMut(&mut dyn FnMut(&mut [u8]) -> usize) -> bool` is a sink, so a driver plugs in
/// with a closure: `stack.transmit(now, &mut |fill: &mut dyn FnMut(&mut [u8]) -> usize|
/// nic.tx_frame(|buf| fill(buf)))`.
pub trait TxSink {
    /// Lends `fill` a buffer of at least [`Stack::max_frame_len`] bytes; `fill` writes one
    /// frame and returns its length (0: nothing to send). Returns false, without calling
    /// `fill`, when no buffer is free now: the stack keeps its output for the next call.
    fn tx_frame(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> usize) -> bool;
}

impl<F: FnMut(&mut dyn FnMut(&mut [u8]) -> usize) -> bool> TxSink for F {
    fn tx_frame(&mut self, fill: &mut dyn FnMut(&mut [u8]) -> usize) -> bool {
        self(fill)
    }
}

/// Declares the counters struct and, from the same list, its names in order: `--metrics`
/// exports every counter under its field's name, so a new one is exported as it is added.
macro_rules! counters {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* pub $field:ident: u64,)* }) => {
        $(#[$m])*
        pub struct $name {
            $($(#[$fm])* pub $field: u64,)*
        }

        impl $name {
            /// Every counter's name, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($field)),*];

            /// Every counter's value, in the order of [`Self::NAMES`].
            pub fn values(&self) -> impl Iterator<Item = u64> {
                [$(self.$field),*].into_iter()
            }
        }
    };
}

counters! {
/// Per-reason counters. Every frame that is dropped increments exactly one `*_dropped`-style
/// reason here; nothing from the network panics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub rx_frames: u64,
    pub tx_frames: u64,
    /// `transmit` stopped because the sink had no free buffer.
    pub tx_sink_full: u64,
    /// Frames not sent because the sink's buffer was below `max_frame_len()`.
    pub tx_buffer_too_small: u64,
    pub eth_truncated: u64,
    pub eth_not_for_us: u64,
    pub eth_vlan_mismatch: u64,
    pub eth_unknown_type: u64,
    /// IPv6 frames on a stack without an IPv6 address.
    pub ipv6_unsupported: u64,
    pub ip6_truncated: u64,
    pub ip6_malformed: u64,
    /// IPv6 sources Linux's `ipv6_rcv` drops: multicast, loopback, IPv4-mapped, our own
    /// addresses (the link-local one too); loopback or IPv4-mapped destinations too.
    pub ip6_bad_source: u64,
    /// IPv6 datagrams to another address than ours (configured or link-local), their
    /// solicited-node groups or all-nodes.
    pub ip6_not_for_us: u64,
    /// Datagrams whose extension headers Linux discards without an answer (an option whose
    /// type says "discard", a truncated chain).
    pub ip6_bad_ext_headers: u64,
    /// Datagrams answered with ICMPv6 parameter problem (a bad extension header or option,
    /// an unknown next header).
    pub ip6_param_problems: u64,
    /// Datagrams that end in "no next header" (59): dropped silently.
    pub ip6_no_next_header: u64,
    /// Datagrams to one of our IPv6 addresses while it is tentative (duplicate address
    /// detection under way) or after its DAD failed: dropped, as Linux does not own such an
    /// address.
    pub ip6_tentative: u64,
    /// IPv6 fragments dropped because IPv6 reassembly is off (`ip6frag_high_thresh` 0).
    pub ip6_fragments_dropped: u64,
    pub icmp6_malformed: u64,
    pub icmp6_bad_checksum: u64,
    /// ICMPv6 messages of types the stack takes no action on (errors about our datagrams
    /// among them: counted, not acted on).
    pub icmp6_unsupported: u64,
    pub icmp6_echo_replies: u64,
    /// Neighbour discovery messages that fail RFC 4861 §7.1's checks (hop limit 255, ...).
    pub ndp_invalid: u64,
    /// Neighbour discovery about another node's address that we neither resolve nor
    /// know (solicitations for other targets, unsolicited advertisements): not taken.
    pub ndp_other_target: u64,
    pub ndp_solicitations_sent: u64,
    pub ndp_advertisements_sent: u64,
    /// Another node claimed one of our IPv6 addresses (configured or link-local) during
    /// duplicate address detection: the stack never uses it, as Linux marks it `dadfailed`.
    pub ndp_dad_conflicts: u64,
    pub arp_malformed: u64,
    pub arp_unsupported: u64,
    pub arp_requests_sent: u64,
    pub arp_replies_sent: u64,
    pub arp_cache_full: u64,
    /// Neighbours whose MAC changed (a gratuitous ARP, or the answer to a check): their
    /// connections took the new one (docs/TCPIP.md, "Neighbours that move").
    pub neighbour_moved: u64,
    /// Checks of a known neighbour's MAC sent because a connection through it timed out
    /// `tcp_retries1` times unanswered.
    pub neighbour_rechecks: u64,
    pub arp_pending_dropped: u64,
    /// ARP messages from our own address or a martian one (Linux's `arp_process` checks the
    /// sender as a route source): not answered, not learned.
    pub arp_bad_sender: u64,
    pub ip_truncated: u64,
    pub ip_malformed: u64,
    pub ip_bad_checksum: u64,
    /// IPv4 fragments dropped because reassembly is off (`ipfrag_high_thresh` 0).
    pub ip_fragments_dropped: u64,
    pub ip_not_for_us: u64,
    pub ip_unknown_protocol: u64,
    /// Martian sources, as Linux's `ip_route_input_slow` and `fib_validate_source` judge
    /// them: 0/8, 127/8, multicast, broadcast, our own address; and multicast source MACs.
    pub ip_bad_source: u64,
    /// Source-routed datagrams (LSRR/SSRR), dropped as Linux drops them by default
    /// (`accept_source_route` off for "all").
    pub ip_source_routed: u64,
    /// Datagrams with malformed options, answered with ICMP parameter problem.
    pub ip_bad_options: u64,
    /// Answers not sent because the request's record-route or timestamp option had room for
    /// part of an entry only (Linux's `__ip_options_echo` refuses it; a SYN-ACK goes without).
    pub ip_options_unechoable: u64,
    /// TCP segments and ICMP requests from a source with no route back (off-link, no
    /// gateway): Linux cannot answer them either, and takes no connection from one.
    pub ip_no_route_back: u64,
    pub icmp_errors_sent: u64,
    /// ICMP errors not sent: over Linux's global budget (`icmp_msgs_per_sec`/`_burst`).
    pub icmp_rate_limited: u64,
    /// ICMP errors not sent because their destination had one too many (Linux's
    /// `RateLimitHost`: six at once, then one a second; over IPv6 one per 250 ms on the
    /// link, 62 ms through the router).
    pub icmp_rate_limited_host: u64,
    pub icmp_malformed: u64,
    pub icmp_bad_checksum: u64,
    pub icmp_unsupported: u64,
    pub icmp_echo_replies: u64,
    pub icmp_timestamp_replies: u64,
    /// ICMP errors about a segment of no connection that takes them (none, half-open,
    /// TIME_WAIT): ignored, as Linux ignores them.
    pub icmp_no_connection: u64,
    /// ICMP errors quoting a sequence number outside what is in flight (RFC 5927 4.1, Linux's
    /// OUTOFWINDOWICMPS): ignored.
    pub icmp_out_of_window: u64,
    /// Connections whose MSS a path MTU message lowered (docs/TCPIP.md, "Path MTU").
    pub tcp_pmtu_reductions: u64,
    pub udp_malformed: u64,
    /// UDP datagrams dropped for a checksum that is neither complete nor (when
    /// `accept_partial_checksums` is on) partial.
    pub udp_bad_checksum: u64,
    /// Of `udp_bad_checksum`: those whose field held the pseudo-header sum, a partial checksum
    /// on a stack told that its device cannot produce them (`accept_partial_checksums` off).
    pub udp_bad_checksum_partial: u64,
    /// UDP datagrams taken with a partial checksum (`accept_partial_checksums` on).
    pub udp_rx_csum_partial: u64,
    pub udp_no_socket: u64,
    pub udp_rx_buffer_full: u64,
    pub tcp_malformed: u64,
    /// TCP segments dropped for a checksum that is neither complete nor (when
    /// `accept_partial_checksums` is on) partial.
    pub tcp_bad_checksum: u64,
    /// Of `tcp_bad_checksum`: those whose field held the pseudo-header sum, a partial checksum
    /// on a stack told that its device cannot produce them (`accept_partial_checksums` off).
    pub tcp_bad_checksum_partial: u64,
    /// TCP segments taken with a partial checksum (`accept_partial_checksums` on).
    pub tcp_rx_csum_partial: u64,
    /// Segments whose option list ended at a malformed option: taken, as Linux takes them,
    /// with the options before it.
    pub tcp_bad_options: u64,
    pub tcp_no_listener: u64,
    /// Segments that reached a listener without ACK and were not a SYN (FIN, NULL, Xmas
    /// scans; SYN+FIN): dropped unanswered (RFC 9293 3.10.7.2).
    pub tcp_listen_dropped: u64,
    /// Segments for a socket that carry a TCP-MD5 signature, or options Linux's signature
    /// walk refuses (`TcpOptions::auth_malformed`): the stack holds no keys, and Linux drops
    /// both for a socket without one.
    pub tcp_md5_unexpected: u64,
    /// TCP segments in a link-layer broadcast or multicast frame (Linux: not PACKET_HOST).
    pub tcp_not_host_mac: u64,
    pub tcp_rst_sent: u64,
    pub tcp_backlog_full: u64,
    pub tcp_table_full: u64,
    pub tcp_syn_cookies_sent: u64,
    pub tcp_syn_cookies_accepted: u64,
    pub tcp_syn_cookies_rejected: u64,
    pub tcp_out_of_window: u64,
    /// Refused segments (old, or past our window) whose new ACK was still taken.
    pub tcp_acks_on_refused_segments: u64,
    pub tcp_paws_rejected: u64,
    pub tcp_bad_ack: u64,
    pub tcp_challenge_acks: u64,
    /// Connections that negotiated ECN (RFC 3168).
    pub tcp_ecn_negotiated: u64,
    /// Data segments taken with a CE mark: our ACKs echo it (ECE) until the peer's CWR.
    pub tcp_ecn_ce_received: u64,
    /// Congestion window reductions for an ECN echo (at most one per window of data).
    pub tcp_ecn_reductions: u64,
    pub tcp_ooo_segments: u64,
    pub tcp_ooo_dropped: u64,
    pub tcp_duplicate_segments: u64,
    /// ACKs that reported a duplicate as their first SACK block (RFC 2883 D-SACK).
    pub tcp_dsacks_sent: u64,
    pub tcp_retransmits: u64,
    /// Tail loss probes sent (a retransmission at SND.UNA after ~2 RTTs without an ACK).
    pub tcp_loss_probes: u64,
    pub tcp_rto_expired: u64,
    pub tcp_fast_retransmits: u64,
    /// Retransmissions of holes chosen from the peer's SACK blocks (during fast recovery).
    pub tcp_sack_retransmits: u64,
    pub tcp_zero_window_probes: u64,
    pub tcp_keepalive_probes: u64,
    pub tcp_timeouts: u64,
    pub tcp_resets_received: u64,
    /// Half-open connections reset by a second SYN (Linux's tcp_check_req: EmbryonicRsts).
    pub tcp_half_open_resets: u64,
    pub tcp_time_wait_reused: u64,
    /// Data arrived for a connection the application had closed: answered with RST.
    pub tcp_data_after_close: u64,
    /// Data wholly past the peer's FIN: ignored, unanswered, as Linux ignores it.
    pub tcp_data_after_fin: u64,
    pub tcp_segments_in: u64,
    pub tcp_segments_out: u64,
    pub ctrl_queue_full: u64,
    /// IPv4 datagrams reassembled from fragments (Linux ReasmOKs).
    pub ip_frag_reassembled: u64,
    /// Fragments dropped as duplicates (inside one run of what their queue holds, Linux's
    /// test); the queue is kept.
    pub ip_frag_duplicate: u64,
    /// Reassembly queues dropped, with the fragment that overlapped what they held
    /// (RFC 5722; Linux ReasmOverlaps).
    pub ip_frag_overlap_dropped: u64,
    /// Reassembly queues dropped, with the fragment that contradicted them (a second last
    /// fragment with another end, data past the last one, an empty fragment), or when whole
    /// (over 65535 bytes, or not-ECT mixed with ECT/CE).
    pub ip_frag_malformed: u64,
    /// Fragments dropped because the queues held more than `ipfrag_high_thresh`.
    pub ip_frag_mem_exceeded: u64,
    /// Reassembly queues restarted empty by `ipfrag_max_dist` (what they held dropped).
    pub ip_frag_too_far: u64,
    /// Reassembly queues dropped incomplete after `ipfrag_time` (Linux ReasmTimeout); the
    /// ICMP time exceeded sent for some is counted in `icmp_errors_sent`.
    pub ip_frag_timeout: u64,
    /// IPv6 datagrams reassembled from fragments (Linux Ip6ReasmOKs). The `ip6_frag_*`
    /// counters are IPv6's own, as Linux keeps Ip6Reasm* apart from IPv4's; they count as
    /// their `ip_frag_*` namesakes do.
    pub ip6_frag_reassembled: u64,
    /// IPv6 fragments dropped as duplicates; the queue is kept.
    pub ip6_frag_duplicate: u64,
    /// IPv6 reassembly queues dropped for an overlap (RFC 5722; Linux ReasmOverlaps).
    pub ip6_frag_overlap_dropped: u64,
    /// IPv6 reassembly queues dropped for a contradicting or empty fragment, or when whole
    /// (a payload over 65535 bytes, or not-ECT mixed with ECT/CE).
    pub ip6_frag_malformed: u64,
    /// IPv6 fragments dropped because the queues held more than `ip6frag_high_thresh`.
    pub ip6_frag_mem_exceeded: u64,
    /// IPv6 reassembly queues dropped incomplete after `ip6frag_time`; the ICMPv6 time
    /// exceeded sent for some is counted in `icmp_errors_sent`.
    pub ip6_frag_timeout: u64,
}
}

/// One line of what a user asks about a stack first: frames, TCP segments, loss and repair,
/// checksums, reassembly and SYN cookies (`serve`'s exit summary per shard). The rest are
/// in the fields, by name.
impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self;
        write!(
            f,
            "rx {} tx {} frames; tcp segments in {} out {}, retransmits {} (fast {}, rto {}, loss probes {}), out-of-order {} (dropped {}), duplicates {}, bad checksums {} (partial {}), partial checksums taken {}, ip datagrams reassembled {} (failures {}), syn cookies sent {} (accepted {})",
            s.rx_frames,
            s.tx_frames,
            s.tcp_segments_in,
            s.tcp_segments_out,
            s.tcp_retransmits,
            s.tcp_fast_retransmits,
            s.tcp_rto_expired,
            s.tcp_loss_probes,
            s.tcp_ooo_segments,
            s.tcp_ooo_dropped,
            s.tcp_duplicate_segments,
            s.tcp_bad_checksum + s.udp_bad_checksum + s.ip_bad_checksum,
            s.tcp_bad_checksum_partial + s.udp_bad_checksum_partial,
            s.tcp_rx_csum_partial + s.udp_rx_csum_partial,
            s.ip_frag_reassembled,
            // Linux's ReasmFails: queues given up, fragments refused.
            s.ip_frag_timeout
                + s.ip_frag_overlap_dropped
                + s.ip_frag_malformed
                + s.ip_frag_too_far
                + s.ip_frag_mem_exceeded
                + s.ip_fragments_dropped,
            s.tcp_syn_cookies_sent,
            s.tcp_syn_cookies_accepted
        )
    }
}
