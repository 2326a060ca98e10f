//! Frame I/O drivers for the bypass stack, behind one small trait.
//!
//! A shard owns one driver queue and drives it from its busy-poll loop:
//!
//! ```text
//! loop {
//!     nic.rx_burst(64, |frame| stack.on_frame(frame, now));
//!     while let Some(out) = stack.next_frame() {            // pseudo code
//!         if !nic.tx_frame(|buf| out.emit(buf)) { break; }   // ring full: try next round
//!     }
//!     nic.flush();                                           // one kick for the whole burst
//! }
//! ```
//!
//! Drivers:
//! - [`xsk::XskSocket`]: an AF_XDP socket on one (interface, rx queue), with its own UMEM and
//!   rings ([`ring`]). Copy and zero-copy binds, need_wakeup, busy-poll socket options.
//! - [`mem::MemPort`]: the two ends of an in-memory wire for deterministic tests, with seeded
//!   loss, reordering and duplication.
//! - `dpdk::DpdkQueue` (cargo feature `dpdk`): one queue of a DPDK port (DPDK 22.11, vdevs
//!   such as net_af_packet and net_ring work without hugepages).
//!
//! And around them:
//! - [`bifurcate::Bifurcation`]: the XDP program that sends only the served IPv4 address and
//!   ports (plus ARP for that address) to the queue's AF_XDP socket and passes everything else
//!   to the kernel.
//! - [`rss`]: which rx queue a 4-tuple lands on, where the driver can tell.
//! - [`iface::InterfaceInfo`]: the interface's index, MAC, MTU and rx queue count.
//!
//! [`AnyQueue`] wraps any of them for code that picks the driver at run time.
//!
//! Nothing here takes a lock or an atomic read-modify-write on the data path: a driver queue
//! belongs to exactly one shard. The in-memory pair is the exception (a mutex per direction);
//! it exists for tests.

pub mod bifurcate;
#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod iface;
pub mod mem;
pub mod ring;
pub mod rss;
pub mod xsk;

mod netns;

pub use bifurcate::{AttachScope, Bifurcation, BifurcationConfig, Protocol};
pub use iface::InterfaceInfo;
pub use mem::{Impairments, MemPair, MemPort};
pub use xsk::{BindMode, BusyPoll, XskConfig, XskSocket};

/// Errors of driver setup and control. The data path itself does not fail: it counts.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    // The cause is part of the message, not a `source`, so a printed chain says it once.
    #[error("{what}: {err}")]
    Os { what: String, err: std::io::Error },
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("interface `{0}` not found in this network namespace")]
    NoSuchInterface(String),
    #[error(
        "zero-copy AF_XDP is not supported by `{ifname}` queue {queue} ({err}); \
         use BindMode::Copy or BindMode::PreferZeroCopy to fall back to copy mode"
    )]
    ZeroCopyUnsupported {
        ifname: String,
        queue: u32,
        err: std::io::Error,
    },
    #[error(
        "refusing to attach XDP to `{ifname}`: {reason}; pass --allow-host to use a host interface"
    )]
    NotInLab { ifname: String, reason: String },
    #[error("bpf: {what}: {err}")]
    Bpf { what: String, err: libbpf_rs::Error },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn bpf(what: impl Into<String>) -> impl FnOnce(libbpf_rs::Error) -> Error {
        let what = what.into();
        move |err| Error::Bpf { what, err }
    }
}

/// One driver queue: bursts of received frames in, frames to send out.
///
/// Frames are whole Ethernet frames without the FCS. The driver owns the buffers: a received
/// frame is lent to the callback and recycled when it returns (so the stack copies what it
/// keeps), and a frame to send is written straight into a driver buffer (for AF_XDP, into the
/// UMEM the kernel reads from), so there is no copy on either side inside the driver.
///
/// The methods never block and never fail: what goes wrong is counted in [`Stats`].
pub trait FrameIo {
    /// Calls `f` for up to `max` received frames, in arrival order, and returns how many.
    /// Returns 0 when nothing is waiting (after kicking the kernel if the driver needs it).
    fn rx_burst<F: FnMut(&[u8])>(&mut self, max: usize, f: F) -> usize;

    /// Lends `f` a buffer of [`FrameIo::frame_capacity`] bytes to write one frame into; `f`
    /// returns the frame's length. Returns false, without calling `f`, when no buffer or ring
    /// slot is free (counted as `tx_ring_full`): flush and try again on the next round.
    /// A length of 0 abandons the buffer (and returns true: nothing was refused); a length
    /// above the capacity is counted as `tx_invalid`, nothing is sent and it returns false.
    /// The buffer's contents are whatever an earlier frame left: write every byte you send.
    /// Frames are not sent until [`FrameIo::flush`].
    fn tx_frame<F: FnOnce(&mut [u8]) -> usize>(&mut self, f: F) -> bool;

    /// Hands every frame queued by `tx_frame` to the wire (one kick for the burst, only when
    /// the driver asks for one) and recycles the buffers of frames already sent.
    fn flush(&mut self);

    /// The largest frame `tx_frame` can build and `rx_burst` can deliver, in bytes.
    fn frame_capacity(&self) -> usize;

    /// Frames lost before `rx_burst` since the last call because they were longer than
    /// [`FrameIo::frame_capacity`] (e.g. a sender's TSO/GSO segments that nothing cut to the
    /// MTU), where the driver can tell; 0 otherwise. May make a syscall: call it rarely (the
    /// socket layer asks once a second).
    fn rx_oversized_since_last(&mut self) -> u64 {
        0
    }

    /// The MTU of the kernel interface under the queue now, where a user can change it while
    /// we run (AF_XDP); None where the driver owns the device (DPDK) or has none. A syscall:
    /// call it rarely (the socket layer asks once a second).
    fn link_mtu(&self) -> Option<u32> {
        None
    }

    /// True when the driver completes the TCP checksum of every IPv4 TCP frame it sends
    /// (AF_XDP TX metadata; the in-memory port when asked to): the builder then writes only
    /// the pseudo-header sum into the field (`wire::tcp::fill_partial_checksum`), and must do
    /// so for every such frame. False: frames leave exactly as built.
    fn tx_checksum_offload(&self) -> bool {
        false
    }

    /// Counters since the driver was created.
    fn stats(&self) -> &Stats;
}

/// Driver-side counters. Plain integers: each driver queue has one owner.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Frames delivered to `rx_burst` callbacks, and their bytes.
    pub rx_frames: u64,
    pub rx_bytes: u64,
    /// Frames handed to the wire by `flush`, and their bytes.
    pub tx_frames: u64,
    pub tx_bytes: u64,
    /// Frames lost before reaching us: a full receive queue (mem), descriptors the kernel
    /// gave us that point outside the UMEM (AF_XDP; never expected), multi-segment frames
    /// (DPDK). The kernel's own AF_XDP
    /// drop counters are in [`xsk::XskSocket::kernel_stats`].
    pub rx_dropped: u64,
    /// Frames longer than the frame capacity that the driver itself dropped (an AF_XDP
    /// multi-buffer socket: a chain longer than `max_frame`).
    pub rx_oversized: u64,
    /// Frames the driver reassembled by copying their pieces into one buffer (an AF_XDP
    /// multi-buffer socket, where the pieces do not lie end to end in the UMEM: `xsk/chain.rs`);
    /// every other frame is lent to `rx_burst` where it lies.
    pub rx_gathered: u64,
    /// `tx_frame` calls refused because no buffer or ring slot was free.
    pub tx_ring_full: u64,
    /// Frames whose builder returned a length above the frame capacity.
    pub tx_invalid: u64,
    /// Frames sent but lost on the way on purpose (mem: impairments and `drop_next`).
    pub tx_dropped: u64,
    /// Syscalls made to wake the kernel (AF_XDP need_wakeup / busy poll), and how many of
    /// them failed with something other than a transient "try again".
    pub wakeups: u64,
    pub wakeup_errors: u64,
}

impl std::ops::AddAssign<&Stats> for Stats {
    /// Sums counters, e.g. over the shards of one interface for a report.
    fn add_assign(&mut self, o: &Stats) {
        self.rx_frames += o.rx_frames;
        self.rx_bytes += o.rx_bytes;
        self.tx_frames += o.tx_frames;
        self.tx_bytes += o.tx_bytes;
        self.rx_dropped += o.rx_dropped;
        self.rx_oversized += o.rx_oversized;
        self.rx_gathered += o.rx_gathered;
        self.tx_ring_full += o.tx_ring_full;
        self.tx_invalid += o.tx_invalid;
        self.tx_dropped += o.tx_dropped;
        self.wakeups += o.wakeups;
        self.wakeup_errors += o.wakeup_errors;
    }
}

impl<T: FrameIo + ?Sized> FrameIo for &mut T {
    fn rx_burst<F: FnMut(&[u8])>(&mut self, max: usize, f: F) -> usize {
        (**self).rx_burst(max, f)
    }
    fn tx_frame<F: FnOnce(&mut [u8]) -> usize>(&mut self, f: F) -> bool {
        (**self).tx_frame(f)
    }
    fn flush(&mut self) {
        (**self).flush()
    }
    fn frame_capacity(&self) -> usize {
        (**self).frame_capacity()
    }
    fn rx_oversized_since_last(&mut self) -> u64 {
        (**self).rx_oversized_since_last()
    }
    fn link_mtu(&self) -> Option<u32> {
        (**self).link_mtu()
    }
    fn tx_checksum_offload(&self) -> bool {
        (**self).tx_checksum_offload()
    }
    fn stats(&self) -> &Stats {
        (**self).stats()
    }
}

/// Any driver queue, for code that picks the driver at run time (`--stack xdp` vs tests)
/// without making everything generic. One `match` per call: per burst, not per byte.
// One per shard, so its size does not matter, and boxing would add a pointer chase per call.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum AnyQueue {
    Xsk(XskSocket),
    Mem(MemPort),
    #[cfg(feature = "dpdk")]
    Dpdk(dpdk::DpdkQueue),
}

macro_rules! each_driver {
    ($self:expr, $q:ident => $body:expr) => {
        match $self {
            AnyQueue::Xsk($q) => $body,
            AnyQueue::Mem($q) => $body,
            #[cfg(feature = "dpdk")]
            AnyQueue::Dpdk($q) => $body,
        }
    };
}

impl AnyQueue {
    /// An fd that polls readable when frames wait on the receive ring, for a shard that sleeps
    /// when idle: the AF_XDP socket's. None where the driver has none (DPDK, the in-memory
    /// port): those shards spin.
    pub fn wake_fd(&self) -> Option<std::os::fd::RawFd> {
        match self {
            AnyQueue::Xsk(q) => Some(std::os::fd::AsRawFd::as_raw_fd(q)),
            _ => None,
        }
    }

    /// The queue's NAPI ID, for a shard to busy-poll by ID where its socket cannot
    /// (`XskSocket::queue_napi_id`).
    pub fn queue_napi_id(&self) -> Option<u32> {
        match self {
            AnyQueue::Xsk(q) => q.queue_napi_id(),
            _ => None,
        }
    }
}

impl FrameIo for AnyQueue {
    fn rx_burst<F: FnMut(&[u8])>(&mut self, max: usize, f: F) -> usize {
        each_driver!(self, q => q.rx_burst(max, f))
    }
    fn tx_frame<F: FnOnce(&mut [u8]) -> usize>(&mut self, f: F) -> bool {
        each_driver!(self, q => q.tx_frame(f))
    }
    fn flush(&mut self) {
        each_driver!(self, q => q.flush())
    }
    fn frame_capacity(&self) -> usize {
        each_driver!(self, q => q.frame_capacity())
    }
    fn rx_oversized_since_last(&mut self) -> u64 {
        each_driver!(self, q => q.rx_oversized_since_last())
    }
    fn link_mtu(&self) -> Option<u32> {
        each_driver!(self, q => q.link_mtu())
    }
    fn tx_checksum_offload(&self) -> bool {
        each_driver!(self, q => q.tx_checksum_offload())
    }
    fn stats(&self) -> &Stats {
        each_driver!(self, q => q.stats())
    }
}

impl From<XskSocket> for AnyQueue {
    fn from(q: XskSocket) -> Self {
        AnyQueue::Xsk(q)
    }
}

impl From<MemPort> for AnyQueue {
    fn from(q: MemPort) -> Self {
        AnyQueue::Mem(q)
    }
}

#[cfg(feature = "dpdk")]
impl From<dpdk::DpdkQueue> for AnyQueue {
    fn from(q: dpdk::DpdkQueue) -> Self {
        AnyQueue::Dpdk(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn echo_once(q: &mut impl FrameIo) -> usize {
        let mut frames = Vec::new();
        q.rx_burst(8, |f| frames.push(f.to_vec()));
        for f in &frames {
            q.tx_frame(|buf| {
                buf[..f.len()].copy_from_slice(f);
                f.len()
            });
        }
        q.flush();
        frames.len()
    }

    #[test]
    fn any_queue_and_references_drive_like_the_driver() {
        let (a, b) = MemPair::lossless();
        let mut a = AnyQueue::from(a);
        let mut b = AnyQueue::from(b);
        assert!(a.tx_frame(|buf| {
            buf[..3].copy_from_slice(b"abc");
            3
        }));
        a.flush();
        assert_eq!(echo_once(&mut &mut b), 1, "through &mut AnyQueue");
        let mut back = Vec::new();
        a.rx_burst(8, |f| back.push(f.to_vec()));
        assert_eq!(back, vec![b"abc".to_vec()]);
        assert_eq!(
            (
                a.stats().tx_frames,
                b.stats().rx_frames,
                b.stats().tx_frames
            ),
            (1, 1, 1)
        );
        assert_eq!(a.frame_capacity(), 2048);
        let mut total = Stats::default();
        total += a.stats();
        total += b.stats();
        assert_eq!(
            (total.rx_frames, total.tx_frames, total.tx_bytes),
            (2, 2, 6)
        );
    }
}
