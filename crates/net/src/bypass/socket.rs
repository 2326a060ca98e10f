//! The bypass stack's sockets: our TCP/IP (`wirespeed-tcpip`) over a shard's driver queues
//! (`wirespeed_nic::AnyQueue`), one instance per shard.
//!
//! Each shard owns one [`BypassStack`]: a `tcpip::Stack`, its own driver queue (receive and
//! transmit) and, where the device has more rx queues than there are shards, the rx queues no
//! shard owns, shared out among the shards (receive only: a flow's frames all arrive on one
//! queue, so its connection lives in that queue's shard). A runtime poller (`rt::add_poller`)
//! runs every loop turn: receive a burst from each queue, hand each frame to the stack, wake
//! the tasks whose sockets have events, then let the stack emit into its own queue's TX ring
//! and flush. The tasks call into the same stack through their socket handles; both sides run on
//! the shard's thread, so the stack sits in an `Rc<RefCell<_>>` and nothing is locked.

use std::cell::RefCell;
use std::future::poll_fn;
use std::io::{self, IoSlice};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Instant as StdInstant;

use wirespeed_nic::rss::{FourTuple, RssModel};
use wirespeed_nic::{AnyQueue, FrameIo, InterfaceInfo};
use wirespeed_tcpip::{self as tcpip, ConnId, EventKind, Handle, ListenerId, Stack, TcpState};

/// Frames taken from the driver per poll.
const RX_BURST: usize = 64;
/// Bytes of Ethernet header in front of an IP packet of MTU size (no VLAN tag).
const ETHERNET_HEADER: usize = 14;

#[derive(Default)]
struct Wakers {
    readers: Vec<Option<Waker>>,
    writers: Vec<Option<Waker>>,
    acceptors: Vec<Option<Waker>>,
}

fn park(list: &mut Vec<Option<Waker>>, index: usize, w: &Waker) {
    if list.len() <= index {
        list.resize(index + 1, None);
    }
    match &mut list[index] {
        Some(old) if old.will_wake(w) => {}
        slot => *slot = Some(w.clone()),
    }
}

fn wake(list: &mut [Option<Waker>], index: usize) {
    if let Some(w) = list.get_mut(index).and_then(Option::take) {
        w.wake();
    }
}

struct Inner {
    stack: Stack,
    /// The shard's own queue: frames in and every frame out.
    dev: AnyQueue,
    /// Further rx queues this shard serves (none unless the device has more than shards).
    rx_only: Vec<AnyQueue>,
    wakers: Wakers,
    epoch: StdInstant,
    rx_steering: Option<RxSteering>,
    /// Told once per cause when the stack starts dropping traffic a user would expect taken.
    on_drop_cause: Option<Box<dyn Fn(DropCause)>>,
    /// Causes already told (`DropCause::bit`).
    drop_causes_told: u32,
    /// When to ask the driver next about frames it lost for their size, and its link's MTU.
    next_device_check: tcpip::Instant,
    /// The link's MTU when last asked (None: the driver owns its device, or cannot tell).
    link_mtu: Option<u32>,
}

/// How often the poller asks the driver about lost frames and its link's MTU (syscalls for
/// AF_XDP).
const DEVICE_CHECK_US: u64 = 1_000_000;

/// Traffic the stack drops although a user would expect it taken: the peer is configured for
/// a different kind of device than ours. [`BypassStack::on_drop_cause`] hears of each cause
/// once; [`DropCause::explain`] says it in one line with the command that fixes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropCause {
    /// Frames longer than the driver's buffers (`capacity` bytes) were lost before they
    /// reached the stack: a sender on this host hands over segments above the MTU (TSO/GSO)
    /// and nothing on the way cut them (a veth cuts them itself only while XDP runs on the
    /// veth we serve on, not on a macvlan above it).
    OversizedFrames { capacity: usize },
    /// TCP/UDP segments whose checksum field holds only the pseudo-header sum (the sender left
    /// it to checksum offload) arrive on a stack set up for a hardware device, which should
    /// never pass such frames on (`accept_partial_checksums` off), so they count as bad
    /// checksums (`tcp_bad_checksum_partial`,
    /// `udp_bad_checksum_partial`).
    PartialChecksums,
    /// The interface's MTU changed to `mtu` while we run; connections opened from now on use
    /// `used` (the new MTU, or the one our buffers were sized for at start when it is
    /// larger). Told on every change, not once: open connections keep the MSS they agreed,
    /// and after a lower MTU the device drops their segments above it.
    LinkMtuChanged { mtu: u32, used: u32 },
}

impl DropCause {
    /// A distinct bit per cause, for "told once" sets.
    pub fn bit(self) -> u32 {
        match self {
            DropCause::PartialChecksums => 1,
            DropCause::OversizedFrames { .. } => 2,
            DropCause::LinkMtuChanged { .. } => 4,
        }
    }

    /// One line for the operator: what is dropped on `iface`, why, and the fix.
    pub fn explain(self, iface: &str) -> String {
        match self {
            DropCause::PartialChecksums => format!(
                "dropping TCP/UDP segments with partial checksums on {iface}, taken for a \
                 hardware device: the sender left checksums to offload and nothing completed \
                 them; turn checksum offload off on the sending interface \
                 (`ethtool -K PEER tx off`)"
            ),
            DropCause::OversizedFrames { capacity } => format!(
                "dropping frames longer than {capacity} bytes on {iface} before our stack sees \
                 them: a sender on this host hands over segments above the MTU (TSO/GSO); turn \
                 segmentation offload off on the sending interface \
                 (`ethtool -K PEER tso off gso off`)"
            ),
            DropCause::LinkMtuChanged { mtu, used } if used < mtu => format!(
                "{iface}'s MTU is now {mtu}, above the {used} our buffers were sized for: \
                 connections opened from now on use {used}, open ones keep their MSS; restart \
                 to use {mtu}"
            ),
            DropCause::LinkMtuChanged { mtu, used } if used > mtu => format!(
                "{iface}'s MTU is now {mtu}, below the 576 bytes every IPv4 link must carry: \
                 connections opened from now on use {used} and lose their segments above \
                 {mtu}; set the MTU to 576 or more (`ip link set {iface} mtu 1500`)"
            ),
            DropCause::LinkMtuChanged { mtu, .. } => format!(
                "{iface}'s MTU is now {mtu}: connections opened from now on use it; open ones \
                 keep the MSS they agreed, and lose their segments above {mtu} if it went down"
            ),
        }
    }
}

impl Inner {
    /// The stack's time at the clock reading `wall`.
    fn stack_time(&self, wall: StdInstant) -> tcpip::Instant {
        tcpip::Instant::from_micros(wall.saturating_duration_since(self.epoch).as_micros() as u64)
    }

    /// One poll round for a shard that may sleep: when nothing moved, the instant by which the
    /// stack's timers (retransmission, delayed ACK, TIME-WAIT) need the next round. The round
    /// and the deadline take the shard's clock reading of this loop turn (`rt::now`), which
    /// the loop makes anyway: an idle round is the common one, and its own readings (three,
    /// before) were 2-3% of a streaming shard's time in `perf`.
    fn poll_or_deadline(&mut self) -> wirespeed_rt::Polled {
        let wall = wirespeed_rt::now();
        if self.poll_at(wall) {
            return wirespeed_rt::Polled::Worked;
        }
        // Wake for the device check too, so an idle shard sees a changed MTU before the next
        // connection's SYN.
        let at = self
            .stack
            .poll_at()
            .map_or(self.next_device_check, |at| at.min(self.next_device_check));
        let until = wall.checked_add(at.since(self.stack_time(wall)));
        wirespeed_rt::Polled::Idle { until }
    }

    /// One poll round at this loop turn's clock reading; returns whether anything moved.
    fn poll(&mut self) -> bool {
        self.poll_at(wirespeed_rt::now())
    }

    /// One poll round at the clock reading `wall`; returns whether anything moved.
    fn poll_at(&mut self, wall: StdInstant) -> bool {
        let now = self.stack_time(wall);
        let Inner {
            stack,
            dev,
            rx_only,
            wakers,
            on_drop_cause,
            drop_causes_told,
            next_device_check,
            link_mtu,
            ..
        } = self;
        let device_check = now >= *next_device_check;
        if device_check {
            *next_device_check = now.add_micros(DEVICE_CHECK_US);
            // A user may change the MTU under us (`ip link set IF mtu N`): follow it for new
            // connections (before this round's frames: a SYN may be what woke us), or after a
            // lower one the device drops every segment they send.
            let mtu = dev.link_mtu();
            if let (Some(was), Some(mtu)) = (*link_mtu, mtu) {
                if mtu != was {
                    let used = stack.set_mtu(mtu as usize) as u32;
                    if let Some(tell) = on_drop_cause {
                        tell(DropCause::LinkMtuChanged { mtu, used });
                    }
                }
            }
            *link_mtu = mtu.or(*link_mtu);
        }
        let mut received = dev.rx_burst(RX_BURST, |frame| stack.receive(now, frame));
        for q in rx_only.iter_mut() {
            received += q.rx_burst(RX_BURST, |frame| stack.receive(now, frame));
        }
        if let Some(tell) = on_drop_cause {
            let mut told = |cause: DropCause| {
                if *drop_causes_told & cause.bit() == 0 {
                    *drop_causes_told |= cause.bit();
                    tell(cause);
                }
            };
            let st = stack.stats();
            if received > 0 && st.tcp_bad_checksum_partial + st.udp_bad_checksum_partial > 0 {
                told(DropCause::PartialChecksums);
            }
            if device_check {
                let oversized = std::iter::once(&mut *dev)
                    .chain(rx_only.iter_mut())
                    .map(|q| q.rx_oversized_since_last())
                    .sum::<u64>();
                if oversized > 0 {
                    told(DropCause::OversizedFrames {
                        capacity: dev.frame_capacity(),
                    });
                }
            }
        }
        let mut events = 0;
        while let Some(ev) = stack.pop_event() {
            events += 1;
            match (ev.handle, ev.kind) {
                (Handle::Tcp(c), EventKind::Readable) => wake(&mut wakers.readers, c.index()),
                (Handle::Tcp(c), EventKind::Writable) => wake(&mut wakers.writers, c.index()),
                (Handle::Tcp(c), EventKind::Closed) => {
                    wake(&mut wakers.readers, c.index());
                    wake(&mut wakers.writers, c.index());
                }
                (Handle::Listener(l), _) => wake(&mut wakers.acceptors, listener_index(l)),
                _ => {}
            }
        }
        let sent = stack.transmit(now, &mut |fill: &mut dyn FnMut(&mut [u8]) -> usize| {
            dev.tx_frame(|buf| fill(buf))
        });
        self.dev.flush();
        received > 0 || events > 0 || sent > 0
    }
}

fn listener_index(l: ListenerId) -> usize {
    l.index()
}

/// How to build a shard's stack.
#[derive(Debug, Clone)]
pub struct StackConfig {
    pub ip: Ipv4Addr,
    pub prefix_len: u8,
    pub gateway: Option<Ipv4Addr>,
    /// An IPv6 address beside `ip` (dual stack), its prefix length and router.
    pub ipv6: Option<Ipv6Subnet>,
    pub mac: [u8; 6],
    pub mtu: usize,
    pub max_connections: usize,
    /// Local ports for connections this stack opens (None: the stack's default range). The
    /// flow bifurcation program must steer them to this shard's socket.
    pub ephemeral_ports: Option<(u16, u16)>,
    /// The rx queues this shard serves and how the NIC picks queues: `connect` chooses local
    /// ports whose replies land on one of them.
    pub rx_steering: Option<RxSteering>,
    /// Take TCP/UDP segments with partial checksums (`tcpip::Config::accept_partial_checksums`):
    /// only for a device that passes them on (a software device: veth, macvlan, ...).
    /// [`StackConfig::for_interface`] sets it from the kernel's description of the interface.
    pub accept_partial_checksums: bool,
    /// Congestion control of every connection (`tcpip::Config::congestion_control`).
    pub congestion_control: tcpip::CongestionAlgorithm,
}

impl StackConfig {
    pub fn new(ip: Ipv4Addr, prefix_len: u8, mac: [u8; 6], mtu: usize) -> StackConfig {
        StackConfig {
            ip,
            prefix_len,
            gateway: None,
            ipv6: None,
            mac,
            mtu,
            max_connections: 1024,
            ephemeral_ports: None,
            rx_steering: None,
            accept_partial_checksums: false,
            congestion_control: tcpip::CongestionAlgorithm::default(),
        }
    }

    /// A stack on `info`'s interface: its MAC and MTU, and partial checksums taken where the
    /// device passes them on (a software device such as a veth; see
    /// `InterfaceInfo::partial_checksums_possible`).
    pub fn for_interface(ip: Ipv4Addr, prefix_len: u8, info: &InterfaceInfo) -> StackConfig {
        let mut c = StackConfig::new(ip, prefix_len, info.mac, info.mtu as usize);
        c.accept_partial_checksums = info.partial_checksums_possible();
        c
    }
}

/// The stack's IPv6 address, its on-link prefix length and its router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Subnet {
    pub addr: Ipv6Addr,
    pub prefix_len: u8,
    pub gateway: Option<Ipv6Addr>,
}

/// A shard's receive queues and the interface's RSS model.
#[derive(Debug, Clone)]
pub struct RxSteering {
    pub model: RssModel,
    pub queues: Vec<u32>,
}

impl RxSteering {
    /// Whether the replies of `local:port <-> remote:remote_port` arrive on one of our queues.
    /// A model that cannot tell (veth, an unknown hash) accepts every port: then the XDP
    /// program steers, which works only where one shard serves every queue.
    pub fn port_ok(&self, local: IpAddr, remote: SocketAddr, port: u16) -> bool {
        let replies = FourTuple {
            src: remote.ip(),
            dst: local,
            src_port: remote.port(),
            dst_port: port,
        };
        match self.model.queue_for(&replies) {
            Some(q) => self.queues.contains(&q),
            None => true,
        }
    }
}

fn random_u64() -> u64 {
    wirespeed_sys::random::u64().unwrap_or_else(|_| {
        // Only the ISN/cookie secret depends on this; the clock is a weak but working fallback.
        StdInstant::now().elapsed().as_nanos() as u64 ^ std::process::id() as u64
    })
}

/// A shard's bypass stack. Cloning shares it (within the shard).
#[derive(Clone)]
pub struct BypassStack {
    inner: Rc<RefCell<Inner>>,
}

impl BypassStack {
    /// Builds the stack over `queue` and registers its poller with the current shard.
    pub fn start(cfg: &StackConfig, queue: impl Into<AnyQueue>) -> BypassStack {
        BypassStack::start_with_rx_queues(cfg, queue.into(), Vec::new())
    }

    /// Like [`BypassStack::start`] over `dev`, also taking frames from `rx_only` (rx queues that no shard
    /// owns; nothing is sent on them).
    pub fn start_with_rx_queues(
        cfg: &StackConfig,
        dev: AnyQueue,
        rx_only: Vec<AnyQueue>,
    ) -> BypassStack {
        let mut c = tcpip::Config::new(tcpip::MacAddr(cfg.mac), cfg.ip.into(), cfg.prefix_len);
        c.gateway = cfg.gateway.map(Into::into);
        if let Some(v6) = &cfg.ipv6 {
            c.ipv6 = Some(v6.addr.into());
            c.ipv6_prefix_len = v6.prefix_len;
            c.ipv6_gateway = v6.gateway.map(Into::into);
        }
        // Never build a frame the driver cannot send: an MTU above what its buffers hold
        // (e.g. a jumbo interface over single-chunk AF_XDP) is cut to what they hold.
        let driver_mtu = dev.frame_capacity().saturating_sub(ETHERNET_HEADER);
        c.mtu = cfg.mtu.min(driver_mtu).clamp(576, 9000);
        c.max_connections = cfg.max_connections;
        if let Some(range) = cfg.ephemeral_ports {
            c.ephemeral_ports = range;
        }
        c.secret = random_u64();
        c.accept_partial_checksums = cfg.accept_partial_checksums;
        c.congestion_control = cfg.congestion_control;
        // The device completes TCP checksums where it can (AF_XDP TX metadata): the stack then
        // leaves the pseudo-header sum and never reads a payload to sum it.
        c.tx_checksum_offload = dev.tx_checksum_offload();
        let stack = Stack::new(c);
        let inner = Rc::new(RefCell::new(Inner {
            stack,
            dev,
            rx_only,
            wakers: Wakers::default(),
            epoch: StdInstant::now(),
            rx_steering: cfg.rx_steering.clone(),
            on_drop_cause: None,
            drop_causes_told: 0,
            next_device_check: tcpip::Instant::ZERO,
            link_mtu: None,
        }));
        let poller = inner.clone();
        let (wake_fds, napi_ids): (Option<Vec<_>>, Vec<_>) = {
            let i = inner.borrow();
            let queues = || std::iter::once(&i.dev).chain(&i.rx_only);
            (
                queues().map(AnyQueue::wake_fd).collect(),
                queues().filter_map(AnyQueue::queue_napi_id).collect(),
            )
        };
        let wake_fds = wake_fds.filter(|_| wirespeed_rt::idle_sleep_us() > 0);
        let sleeps = match wake_fds.map(|fds| {
            wirespeed_rt::add_poller_with_wakeup(&fds, move || {
                poller.borrow_mut().poll_or_deadline()
            })
        }) {
            Some(Ok(())) => true,
            Some(Err(e)) => {
                eprintln!(
                    "wirespeed: shard {} cannot sleep on its AF_XDP socket ({e}); it spins instead",
                    wirespeed_rt::shard_id()
                );
                false
            }
            // A shard that never sleeps, or a driver without an fd (DPDK).
            None => false,
        };
        for id in napi_ids.into_iter().filter(|_| sleeps) {
            if wirespeed_rt::engine_kind() == wirespeed_rt::EngineKind::Uring {
                if let Err(e) = wirespeed_rt::busy_poll_napi(id) {
                    eprintln!(
                        "wirespeed: shard {} cannot busy-poll its queue's NAPI {id} ({e}); its queue runs in the kernel's NAPI context instead",
                        wirespeed_rt::shard_id()
                    );
                }
            }
        }
        if !sleeps {
            let poller = inner.clone();
            wirespeed_rt::add_poller(move || poller.borrow_mut().poll());
        }
        BypassStack { inner }
    }

    pub fn listen(&self, port: u16, backlog: usize) -> io::Result<BypassListener> {
        let id = self
            .inner
            .borrow_mut()
            .stack
            .tcp_listen(port, backlog)
            .map_err(to_io)?;
        Ok(BypassListener {
            stack: self.clone(),
            id,
            port,
        })
    }

    /// Opens a connection from a local port whose replies arrive on this shard's queue
    /// (`StackConfig::rx_steering`; any free port without it).
    pub async fn connect(&self, addr: SocketAddr) -> io::Result<BypassStream> {
        let (steering, local) = {
            let i = self.inner.borrow();
            let remote = tcpip::IpAddress::from(addr.ip());
            let local = i.stack.config().local_addr(remote).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::AddrNotAvailable,
                    format!("our stack has no address of {addr}'s family: give --ip one"),
                )
            })?;
            (i.rx_steering.clone(), IpAddr::from(local))
        };
        self.connect_with(addr, move |port| {
            steering
                .as_ref()
                .is_none_or(|s| s.port_ok(local, addr, port))
        })
        .await
    }

    /// Opens a connection; `port_ok` filters the local ports tried.
    pub async fn connect_with(
        &self,
        addr: SocketAddr,
        port_ok: impl FnMut(u16) -> bool,
    ) -> io::Result<BypassStream> {
        let id = {
            let mut i = self.inner.borrow_mut();
            let now = i.stack_time(wirespeed_rt::now());
            i.stack
                .tcp_connect(now, tcpip::IpAddress::from(addr.ip()), addr.port(), port_ok)
                .map_err(to_io)?
        };
        let stream = BypassStream {
            stack: self.clone(),
            id,
        };
        poll_fn(|cx| {
            let mut i = self.inner.borrow_mut();
            match i.stack.tcp_state(id) {
                Ok(TcpState::SynSent) | Ok(TcpState::SynReceived) => {
                    park(&mut i.wakers.writers, id.index(), cx.waker());
                    Poll::Pending
                }
                Ok(TcpState::Closed) | Err(_) => {
                    let e = i
                        .stack
                        .tcp_error(id)
                        .ok()
                        .flatten()
                        .unwrap_or(tcpip::Error::ConnectionRefused);
                    Poll::Ready(Err(to_io(e)))
                }
                Ok(_) => Poll::Ready(Ok(())),
            }
        })
        .await?;
        Ok(stream)
    }

    /// Calls `tell` the first time the stack drops traffic for each [`DropCause`] (from the
    /// shard's poller, right after the burst that showed it, while the poller holds the
    /// stack: `tell` must not call back into this `BypassStack`).
    pub fn on_drop_cause(&self, tell: impl Fn(DropCause) + 'static) {
        self.inner.borrow_mut().on_drop_cause = Some(Box::new(tell));
    }

    /// The address this stack answers for.
    pub fn local_ip(&self) -> Ipv4Addr {
        self.inner.borrow().stack.config().ipv4.into()
    }

    pub fn stats(&self) -> tcpip::Stats {
        self.inner.borrow().stack.stats().clone()
    }
}

fn to_io(e: tcpip::Error) -> io::Error {
    use io::ErrorKind as K;
    let kind = match e {
        tcpip::Error::WouldBlock => K::WouldBlock,
        tcpip::Error::InvalidHandle | tcpip::Error::NotConnected => K::NotConnected,
        tcpip::Error::ConnectionReset => K::ConnectionReset,
        tcpip::Error::ConnectionRefused => K::ConnectionRefused,
        tcpip::Error::TimedOut => K::TimedOut,
        tcpip::Error::Aborted => K::ConnectionAborted,
        tcpip::Error::BrokenPipe => K::BrokenPipe,
        tcpip::Error::AddrInUse => K::AddrInUse,
        tcpip::Error::InvalidInput | tcpip::Error::MessageTooLong => K::InvalidInput,
        tcpip::Error::NoPorts | tcpip::Error::TableFull => K::OutOfMemory,
    };
    io::Error::new(kind, e.to_string())
}

pub struct BypassListener {
    stack: BypassStack,
    id: ListenerId,
    port: u16,
}

impl BypassListener {
    pub async fn accept(&self) -> io::Result<BypassStream> {
        let id = poll_fn(|cx| {
            let mut i = self.stack.inner.borrow_mut();
            match i.stack.tcp_accept(self.id) {
                Ok(c) => Poll::Ready(Ok(c)),
                Err(tcpip::Error::WouldBlock) => {
                    park(&mut i.wakers.acceptors, listener_index(self.id), cx.waker());
                    Poll::Pending
                }
                Err(e) => Poll::Ready(Err(to_io(e))),
            }
        })
        .await?;
        Ok(BypassStream {
            stack: self.stack.clone(),
            id,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        let ip: std::net::Ipv4Addr = self.stack.inner.borrow().stack.config().ipv4.into();
        SocketAddr::V4(SocketAddrV4::new(ip, self.port))
    }
}

impl Drop for BypassListener {
    fn drop(&mut self) {
        let _ = self.stack.inner.borrow_mut().stack.tcp_unlisten(self.id);
    }
}

pub struct BypassStream {
    stack: BypassStack,
    id: ConnId,
}

impl BypassStream {
    pub async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        poll_fn(|cx| {
            let mut i = self.stack.inner.borrow_mut();
            match i.stack.tcp_recv(self.id, buf) {
                Ok(n) => Poll::Ready(Ok(n)),
                Err(tcpip::Error::WouldBlock) => {
                    park(&mut i.wakers.readers, self.id.index(), cx.waker());
                    Poll::Pending
                }
                Err(e) => Poll::Ready(Err(to_io(e))),
            }
        })
        .await
    }

    pub async fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        poll_fn(|cx| {
            let mut i = self.stack.inner.borrow_mut();
            match i.stack.tcp_send(self.id, buf) {
                Ok(0) | Err(tcpip::Error::WouldBlock) => {
                    park(&mut i.wakers.writers, self.id.index(), cx.waker());
                    Poll::Pending
                }
                Ok(n) => Poll::Ready(Ok(n)),
                Err(e) => Poll::Ready(Err(to_io(e))),
            }
        })
        .await
    }

    /// Writes the slices in order, as many bytes as the send buffer takes (at least one once
    /// it has room), and returns the count: the stack copies into its own buffer, so one call
    /// per slice costs no syscall.
    pub async fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if bufs.iter().all(|b| b.is_empty()) {
            return Ok(0);
        }
        poll_fn(|cx| {
            let mut i = self.stack.inner.borrow_mut();
            let mut total = 0;
            for b in bufs.iter().filter(|b| !b.is_empty()) {
                match i.stack.tcp_send(self.id, b) {
                    Ok(n) => {
                        total += n;
                        if n < b.len() {
                            break;
                        }
                    }
                    Err(tcpip::Error::WouldBlock) => break,
                    Err(e) if total == 0 => return Poll::Ready(Err(to_io(e))),
                    Err(_) => break,
                }
            }
            if total == 0 {
                park(&mut i.wakers.writers, self.id.index(), cx.waker());
                return Poll::Pending;
            }
            Poll::Ready(Ok(total))
        })
        .await
    }

    pub async fn write_all(&mut self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            let n = self.write(buf).await?;
            buf = &buf[n..];
        }
        Ok(())
    }

    /// The connection's congestion, window and timer state (Linux's TCP_INFO).
    pub fn info(&self) -> io::Result<tcpip::TcpInfo> {
        self.stack
            .inner
            .borrow()
            .stack
            .tcp_info(self.id)
            .map_err(to_io)
    }

    pub fn shutdown_write(&self) -> io::Result<()> {
        self.stack
            .inner
            .borrow_mut()
            .stack
            .tcp_shutdown(self.id)
            .map_err(to_io)
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        let i = self.stack.inner.borrow();
        let (_remote, _rport, lport) = i.stack.tcp_endpoints(self.id).map_err(to_io)?;
        // The address the connection is on: its SYN's (the link-local one, maybe).
        let ip = i.stack.tcp_local_addr(self.id).map_err(to_io)?;
        Ok(SocketAddr::new(ip.into(), lport))
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        let (ip, rport, _lport) = self
            .stack
            .inner
            .borrow()
            .stack
            .tcp_endpoints(self.id)
            .map_err(to_io)?;
        Ok(SocketAddr::new(ip.into(), rport))
    }
}

impl Drop for BypassStream {
    fn drop(&mut self) {
        // Graceful close (FIN after the queued data); the stack finishes it on its own.
        let _ = self.stack.inner.borrow_mut().stack.tcp_close(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wirespeed_nic::rss::DEFAULT_TOEPLITZ_KEY;

    /// The MTU line says what the stack uses, which is the new MTU only within [576, the
    /// MTU we started with].
    #[test]
    fn the_mtu_line_names_the_mtu_new_connections_use() {
        let line = |mtu, used| DropCause::LinkMtuChanged { mtu, used }.explain("eth0");
        assert!(line(1280, 1280).contains("connections opened from now on use it"));
        let above = line(9000, 1500);
        assert!(
            above.contains("use 1500") && above.contains("restart"),
            "{above}"
        );
        let below = line(500, 576);
        assert!(
            below.contains("use 576") && below.contains("lose their segments above 500"),
            "{below}"
        );
        assert!(!below.contains("use it"), "{below}");
    }

    /// The Microsoft RSS verification vector: 66.9.149.187:2794 -> 161.142.100.80:1766
    /// hashes to 0x51ccc178, so with a 128-entry table of `i % 4` its replies land on queue
    /// 0x78 % 4 = 0.
    #[test]
    fn ports_are_chosen_by_the_queue_their_replies_hash_to() {
        let model = RssModel::Toeplitz {
            key: DEFAULT_TOEPLITZ_KEY.to_vec(),
            indirection: (0..128).map(|i| i % 4).collect(),
        };
        let local = IpAddr::from([161, 142, 100, 80]);
        let remote = SocketAddr::from(([66, 9, 149, 187], 2794));
        let on = |queue| RxSteering {
            model: model.clone(),
            queues: vec![queue],
        };
        assert!(on(0).port_ok(local, remote, 1766));
        for q in 1..4 {
            assert!(!on(q).port_ok(local, remote, 1766));
        }
        // Every port lands on exactly one of the four queues.
        for port in 40_000..40_256 {
            let n = (0..4)
                .filter(|q| on(*q).port_ok(local, remote, port))
                .count();
            assert_eq!(n, 1, "port {port}");
        }
        // A shard that serves two queues takes the ports of both.
        let two = RxSteering {
            model: model.clone(),
            queues: vec![1, 3],
        };
        for port in 40_000..40_256 {
            assert_eq!(
                two.port_ok(local, remote, port),
                on(1).port_ok(local, remote, port) || on(3).port_ok(local, remote, port),
                "port {port}"
            );
        }
        // A model that cannot tell leaves the choice to the XDP program: any port.
        let unknown = RxSteering {
            model: RssModel::Unknown("veth".into()),
            queues: vec![3],
        };
        assert!(unknown.port_ok(local, remote, 1766));
    }
}
