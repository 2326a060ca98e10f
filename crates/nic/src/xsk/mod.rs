//! The AF_XDP driver: one socket on one (interface, rx queue), with its own UMEM.
//!
//! Layout of a socket's UMEM: `rx_frames + tx_frames` chunks of `frame_size` bytes. The first
//! `rx_frames` chunks hold the `rx_frames` receive buffers, which circulate between the fill
//! ring, the kernel and the rx ring (one per chunk, or a strip across them for a copy-mode
//! socket that chains frames: `chain.rs`); the others are the transmit pool (a free stack,
//! the tx ring and the completion ring). Every ring is as
//! large as the chunks that can be in it, so a reservation for a chunk we hold never fails.
//!
//! Frames longer than a chunk (jumbo MTUs): with [`XskConfig::max_frame`] above a chunk's
//! room the socket binds with `XDP_USE_SG` and chains chunks (`chain.rs`); without it, a
//! frame is one descriptor in one chunk and nothing is copied.
//!
//! Sharing nothing: each shard opens its own socket on its own queue, with its own UMEM (no
//! `XDP_SHARED_UMEM`), so no memory or index is written by two shards.
//!
//! Wakeups: with need_wakeup (the default) the kernel sets a flag on the fill and tx rings
//! when it wants a syscall; the driver makes one (`recvfrom` / `sendto` with `MSG_DONTWAIT`)
//! only then, or on every empty rx poll when busy polling is on (the syscall is what runs the
//! driver's NAPI then).

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

mod busy_poll;
mod chain;
mod config;
mod offload;

pub use config::{BindMode, BusyPoll, XskConfig};

use chain::{MultiBuffer, RxGather, RxLayout, TxRuns};
use offload::TxChecksum;
use wirespeed_sys::mmap::Mapping;
use wirespeed_sys::xsk;

use crate::iface;
use crate::ring::{Consumer, Producer, RawRing};
use crate::{Error, FrameIo, Result, Stats};

// The AF_XDP ABI (`<linux/if_xdp.h>`) is libc's: `sockaddr_xdp`, `xdp_umem_reg`,
// `xdp_mmap_offsets`, `xdp_desc`, `xdp_statistics`, `xdp_options` and the `XDP_*` constants.

/// Bytes the kernel reserves in front of each received frame in a UMEM chunk.
const XDP_PACKET_HEADROOM: usize = 256;

/// The kernel's counters for one socket (`XDP_STATISTICS`): `rx_dropped` (no fill-ring
/// buffer or rx-ring slot, among others), `rx_invalid_descs`, `tx_invalid_descs`,
/// `rx_ring_full`, `rx_fill_ring_empty_descs`, `tx_ring_empty_descs`.
pub type KernelStats = libc::xdp_statistics;

fn no_kernel_stats() -> KernelStats {
    libc::xdp_statistics {
        rx_dropped: 0,
        rx_invalid_descs: 0,
        tx_invalid_descs: 0,
        rx_ring_full: 0,
        rx_fill_ring_empty_descs: 0,
        tx_ring_empty_descs: 0,
    }
}

/// Pointer `off` bytes into mapping `m`; the offsets come from the kernel and are checked.
fn at(m: &Mapping, off: u64, need: usize) -> Result<*mut u8> {
    let off = usize::try_from(off).map_err(|_| Error::Config("ring offset".into()))?;
    if !matches!(off.checked_add(need), Some(end) if end <= m.len()) {
        return Err(Error::Config(format!(
            "ring offset {off}+{need} beyond mapping of {}",
            m.len()
        )));
    }
    // SAFETY: in bounds, checked just above.
    Ok(unsafe { m.as_ptr().add(off) })
}

/// A fresh AF_XDP socket.
fn xdp_socket() -> Result<OwnedFd> {
    wirespeed_sys::xsk::socket().map_err(os(
        "socket(AF_XDP) (needs root/CAP_NET_RAW and a kernel with AF_XDP)",
    ))
}

/// The error of a failed socket option call: `what` was being done.
fn os(what: &str) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.to_string();
    move |source| Error::Os { what, err: source }
}

/// A socket's four rings, mapped: its UMEM's fill and completion rings, its rx and tx
/// rings, each as large as the chunks that can be in it.
struct Rings {
    fill: Producer<u64>,
    comp: Consumer<u64>,
    rx: Consumer<libc::xdp_desc>,
    tx: Producer<libc::xdp_desc>,
    /// The mappings behind them, in that order.
    maps: [Mapping; 4],
}

impl Rings {
    /// Sizes socket `fd`'s rings as `cfg` asks and maps them.
    fn map(fd: RawFd, cfg: &XskConfig) -> Result<Rings> {
        let size = xsk::set_ring_size;
        size(&fd, libc::XDP_UMEM_FILL_RING, cfg.rx_frames).map_err(os("size fill ring"))?;
        size(&fd, libc::XDP_UMEM_COMPLETION_RING, cfg.tx_frames)
            .map_err(os("size completion ring"))?;
        size(&fd, libc::XDP_RX_RING, cfg.rx_frames).map_err(os("size rx ring"))?;
        size(&fd, libc::XDP_TX_RING, cfg.tx_frames).map_err(os("size tx ring"))?;
        let off = xsk::mmap_offsets(&fd).map_err(os("read ring offsets"))?;

        let u64s = std::mem::size_of::<u64>();
        let descs = std::mem::size_of::<libc::xdp_desc>();
        let (fill_m, fill_r) = map_ring(
            fd,
            &off.fr,
            cfg.rx_frames,
            u64s,
            libc::XDP_UMEM_PGOFF_FILL_RING as libc::off_t,
            "mmap fill ring",
        )?;
        let (comp_m, comp_r) = map_ring(
            fd,
            &off.cr,
            cfg.tx_frames,
            u64s,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING as libc::off_t,
            "mmap completion ring",
        )?;
        let (rx_m, rx_r) = map_ring(
            fd,
            &off.rx,
            cfg.rx_frames,
            descs,
            libc::XDP_PGOFF_RX_RING,
            "mmap rx ring",
        )?;
        let (tx_m, tx_r) = map_ring(
            fd,
            &off.tx,
            cfg.tx_frames,
            descs,
            libc::XDP_PGOFF_TX_RING,
            "mmap tx ring",
        )?;
        // SAFETY: each RawRing points into a mapping that the socket keeps until it drops, and
        // each index we write (fill/tx producer, comp/rx consumer) has this socket as its only
        // user-space writer.
        let (fill, comp, rx, tx) = unsafe {
            (
                Producer::new(fill_r),
                Consumer::new(comp_r),
                Consumer::new(rx_r),
                Producer::new(tx_r),
            )
        };
        Ok(Rings {
            fill,
            comp,
            rx,
            tx,
            maps: [fill_m, comp_m, rx_m, tx_m],
        })
    }
}

/// Maps one ring of socket `fd`: `size` elements of `elem` bytes at the offsets `o`, at
/// page offset `pgoff`.
fn map_ring(
    fd: RawFd,
    o: &libc::xdp_ring_offset,
    size: u32,
    elem: usize,
    pgoff: libc::off_t,
    what: &str,
) -> Result<(Mapping, RawRing)> {
    let len = o.desc as usize + size as usize * elem;
    let m = Mapping::shared(&fd, len, pgoff as u64, true).map_err(os(what))?;
    let raw = RawRing {
        producer: at(&m, o.producer, 4)? as *const _,
        consumer: at(&m, o.consumer, 4)? as *const _,
        flags: at(&m, o.flags, 4)? as *const _,
        descs: at(&m, o.desc, size as usize * elem)?,
        size,
    };
    Ok((m, raw))
}

/// The bind flags: the mode, need_wakeup, and `XDP_USE_SG` for a socket that chains
/// chunks (`chain.rs`).
fn bind_flags(zero_copy: bool, need_wakeup: bool, multi_buffer: bool) -> u16 {
    let mut flags = if zero_copy {
        libc::XDP_ZEROCOPY
    } else {
        libc::XDP_COPY
    };
    if need_wakeup {
        flags |= libc::XDP_USE_NEED_WAKEUP;
    }
    if multi_buffer {
        flags |= libc::XDP_USE_SG;
    }
    flags
}

/// Binds socket `fd` to `ifname` (`index`) queue `queue` with `flags`.
fn bind(fd: RawFd, ifname: &str, index: u32, queue: u32, flags: u16) -> Result<()> {
    let Err(source) = xsk::bind(&fd, index, queue, flags) else {
        return Ok(());
    };
    let zero_copy = flags & libc::XDP_ZEROCOPY != 0;
    // EOPNOTSUPP is the driver saying it has no zero-copy; EINVAL also comes from a
    // queue that does not exist, so it is not taken as "unsupported".
    if zero_copy && source.raw_os_error() == Some(libc::EOPNOTSUPP) {
        return Err(Error::ZeroCopyUnsupported {
            ifname: ifname.to_string(),
            queue,
            err: source,
        });
    }
    let mode = if zero_copy { "zero-copy" } else { "copy" };
    Err(Error::Os {
        what: format!("bind AF_XDP socket to `{ifname}` queue {queue} in {mode} mode"),
        err: source,
    })
}

/// One AF_XDP socket: a driver queue for one shard. See the module docs.
///
/// Opening resolves the interface in the calling thread's network namespace; afterwards the
/// socket may be used from any thread (it is `Send`, not `Sync`).
#[derive(Debug)]
pub struct XskSocket {
    // Order matters for drop: close the socket before unmapping its rings and UMEM.
    fd: OwnedFd,
    fill: Producer<u64>,
    comp: Consumer<u64>,
    rx: Consumer<libc::xdp_desc>,
    tx: Producer<libc::xdp_desc>,
    _rings: [Mapping; 4],
    umem: Mapping,
    frame_size: u32,
    /// Chunks free for transmit.
    tx_free: Vec<u64>,
    /// Chunks written by `tx_frame` since the last `flush`, with their lengths (for stats).
    tx_queued: u32,
    tx_queued_bytes: u64,
    /// Fill addresses taken from the rx ring in the current burst.
    rx_addrs: Vec<u64>,
    /// Where the receive buffers lie (`chain.rs`).
    rx_layout: RxLayout,
    need_wakeup: bool,
    busy_poll: bool,
    zero_copy: bool,
    fallback: Option<String>,
    busy_poll_missing: Vec<&'static str>,
    /// Why the busy polling asked for cannot work (`busy_poll.rs`).
    busy_poll_impossible: Option<String>,
    /// The queue's NAPI ID, where the socket cannot busy-poll it (`busy_poll.rs`).
    queue_napi: Option<u32>,
    ifname: String,
    queue: u32,
    stats: Stats,
    /// The kernel's counters when `rx_oversized_since_last` last read them.
    kernel_seen: KernelStats,
    /// Our own `rx_oversized` count when `rx_oversized_since_last` last read it.
    oversized_seen: u64,
    /// Multi-buffer state, when the socket binds with `XDP_USE_SG`.
    multi: Option<MultiBuffer>,
    /// Whether transmitted TCP frames carry a checksum request (`offload.rs`).
    tx_checksum: TxChecksum,
}

// SAFETY: the socket owns its mappings and rings outright; moving it to another thread moves
// the only handle to them. It is not Sync: all methods that touch rings take &mut self.
unsafe impl Send for XskSocket {}

/// How long [`XskSocket::open`] waits for a queue held by a socket that was just closed.
const QUEUE_RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

impl XskSocket {
    /// Opens a socket on `ifname` queue `queue` (in the calling thread's network namespace).
    /// Frames reach it only once an XDP program redirects them to it, e.g. after
    /// [`crate::Bifurcation::register`].
    pub fn open(ifname: &str, queue: u32, cfg: &XskConfig) -> Result<XskSocket> {
        cfg.validate()?;
        let index = iface::ifindex(ifname)?;
        let open_mode =
            |zero_copy| XskSocket::open_mode_when_free(ifname, index, queue, cfg, zero_copy);
        match cfg.mode {
            BindMode::Copy => open_mode(false),
            BindMode::ZeroCopy => open_mode(true),
            BindMode::PreferZeroCopy => match open_mode(true) {
                Ok(s) => Ok(s),
                Err(zc_error) => {
                    // A failed bind leaves the socket half set up; start over on a fresh one.
                    // If copy mode fails too, its error is the one that explains the problem.
                    let mut s = open_mode(false)?;
                    s.fallback = Some(match zc_error {
                        Error::ZeroCopyUnsupported { err: source, .. } => format!(
                            "zero-copy AF_XDP is not supported by `{ifname}` queue {queue} ({source}); using copy mode"
                        ),
                        other => format!("zero-copy bind failed ({other}); using copy mode"),
                    });
                    Ok(s)
                }
            },
        }
    }

    /// [`XskSocket::open_mode`], retried while the queue is busy for up to
    /// [`QUEUE_RELEASE_WAIT`]: the kernel frees a closed socket's hold on its queue from a
    /// workqueue, after `close` has returned, so a socket reopened on the same queue (a
    /// restarted server, the next test) can find it still taken for a few milliseconds.
    fn open_mode_when_free(
        ifname: &str,
        index: u32,
        queue: u32,
        cfg: &XskConfig,
        zero_copy: bool,
    ) -> Result<XskSocket> {
        let deadline = std::time::Instant::now() + QUEUE_RELEASE_WAIT;
        loop {
            match XskSocket::open_mode(ifname, index, queue, cfg, zero_copy) {
                Err(Error::Os { err, .. })
                    if err.raw_os_error() == Some(libc::EBUSY)
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(Error::Os { what, err }) if err.raw_os_error() == Some(libc::EBUSY) => {
                    return Err(Error::Os {
                        what: format!(
                            "{what}: the queue already has an AF_XDP socket (stop the program \
                             that holds it, or pick another queue)"
                        ),
                        err,
                    })
                }
                other => return other,
            }
        }
    }

    /// Opens a socket in one bind mode: the UMEM and its four rings, every receive buffer
    /// in the fill ring, the busy-poll options, then the bind.
    fn open_mode(
        ifname: &str,
        index: u32,
        queue: u32,
        cfg: &XskConfig,
        zero_copy: bool,
    ) -> Result<XskSocket> {
        let fd = xdp_socket()?;
        let fdr = fd.as_raw_fd();

        let frames = (cfg.rx_frames + cfg.tx_frames) as usize;
        let umem =
            Mapping::anonymous(frames * cfg.frame_size as usize, true).map_err(os("mmap UMEM"))?;
        let rx_layout = RxLayout::new(cfg.frame_size, cfg.chunks_per_frame().is_some(), zero_copy);
        let tx_checksum = offload::register_umem(
            fdr,
            umem.as_ptr() as u64,
            umem.len() as u64,
            cfg.frame_size,
            cfg.tx_checksum_offload,
            zero_copy,
            rx_layout.unaligned(),
        )?;
        let Rings {
            mut fill,
            comp,
            rx,
            tx,
            maps,
        } = Rings::map(fdr, cfg)?;

        // Every receive buffer starts in the fill ring, in order (a strip depends on that).
        // The strip's last buffer ends at (rx_frames - 1) * room + frame_size, inside the
        // receive chunks.
        let first = fill
            .reserve(cfg.rx_frames)
            .ok_or_else(|| Error::Config("fresh fill ring is not empty".into()))?;
        for i in 0..cfg.rx_frames {
            fill.write(first.wrapping_add(i), rx_layout.fill_addr(i));
        }
        fill.submit();
        let tx_free = (cfg.rx_frames..cfg.rx_frames + cfg.tx_frames)
            .rev()
            .map(|i| u64::from(i) * u64::from(cfg.frame_size))
            .collect();

        let busy_poll_missing = match &cfg.busy_poll {
            Some(bp) => busy_poll::set_options(fdr, bp)?,
            None => Vec::new(),
        };
        let multi = cfg.chunks_per_frame().map(|per_run| MultiBuffer {
            max_frame: cfg.max_frame.unwrap_or(0) as usize,
            gather: RxGather::new(cfg.max_frame.unwrap_or(0) as usize),
            runs: TxRuns::new(
                u64::from(cfg.rx_frames) * u64::from(cfg.frame_size),
                cfg.frame_size,
                cfg.tx_frames,
                per_run,
            ),
        });
        let flags = bind_flags(zero_copy, cfg.need_wakeup, multi.is_some());
        bind(fdr, ifname, index, queue, flags)?;
        let zero_copy = xsk::options(&fdr)
            .map(|flags| flags & libc::XDP_OPTIONS_ZEROCOPY != 0)
            .unwrap_or(zero_copy);
        let busy_poll_impossible = cfg.busy_poll.and_then(|_| {
            busy_poll::impossible(
                &offload::kernel_release(),
                zero_copy,
                busy_poll::napi_id(fdr),
            )
        });
        let queue_napi = busy_poll_impossible
            .as_ref()
            .and_then(|_| wirespeed_netlink::netdev::rx_queue_napi_id(index, queue).ok()?);

        Ok(XskSocket {
            fd,
            fill,
            comp,
            rx,
            tx,
            _rings: maps,
            umem,
            frame_size: cfg.frame_size,
            tx_free,
            tx_queued: 0,
            tx_queued_bytes: 0,
            rx_addrs: Vec::with_capacity(cfg.rx_frames as usize),
            rx_layout,
            need_wakeup: cfg.need_wakeup,
            // No wakeup calls for a busy poll that cannot happen.
            busy_poll: cfg.busy_poll.is_some() && busy_poll_impossible.is_none(),
            busy_poll_impossible,
            queue_napi,
            zero_copy,
            fallback: None,
            busy_poll_missing,
            ifname: ifname.to_string(),
            queue,
            stats: Stats::default(),
            kernel_seen: no_kernel_stats(),
            oversized_seen: 0,
            multi,
            tx_checksum,
        })
    }

    /// True when the kernel reports the socket bound in zero-copy mode.
    pub fn is_zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// Why a [`BindMode::PreferZeroCopy`] open fell back to copy mode, if it did.
    pub fn fallback(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// Busy-poll options the kernel refused (empty when all took, or none were asked for).
    pub fn busy_poll_missing(&self) -> &[&'static str] {
        &self.busy_poll_missing
    }

    /// The socket's busy-poll time as the kernel holds it (`SO_BUSY_POLL`), in microseconds;
    /// 0 when off.
    pub fn busy_poll_us(&self) -> u32 {
        wirespeed_sys::socket::int_option(&self.fd, libc::SOL_SOCKET, libc::SO_BUSY_POLL)
            .map_or(0, |v| v.max(0) as u32)
    }

    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Sleeps until a frame waits in the rx ring or `timeout` passes; true when one waits.
    /// For a shard that has been idle for a while and wants to stop spinning.
    pub fn wait_readable(&self, timeout: std::time::Duration) -> Result<bool> {
        xsk::wait_readable(&self.fd, timeout).map_err(|err| Error::Os {
            what: "poll AF_XDP socket".into(),
            err,
        })
    }

    /// The kernel's drop counters for this socket (a syscall: for reports, not per burst).
    pub fn kernel_stats(&self) -> Result<KernelStats> {
        xsk::statistics(&self.fd).map_err(|source| Error::Os {
            what: "read XDP_STATISTICS".into(),
            err: source,
        })
    }

    /// `len` bytes of transmit buffer at UMEM address `addr`.
    fn umem_mut(&mut self, addr: u64, len: usize) -> &mut [u8] {
        debug_assert!(
            matches!((addr as usize).checked_add(len), Some(end) if end <= self.umem.len()),
            "transmit buffer beyond the UMEM"
        );
        // SAFETY: in bounds: addr and len come from the socket's own layout (a transmit
        // chunk and its room, or a run and `max_frame`, which `XskConfig::validate` fits); addr is one of our transmit chunks or runs (from
        // the free stack or runs), which the kernel does not read until we publish a tx
        // descriptor for it.
        unsafe { std::slice::from_raw_parts_mut(self.umem.as_ptr().add(addr as usize), len) }
    }

    /// The largest frame, received or sent: the kernel keeps `XDP_PACKET_HEADROOM` (256 bytes)
    /// in front of every received frame, so a chunk holds `frame_size - 256` bytes of frame
    /// (1792 with 2048-byte chunks: enough for a 1500-byte MTU; 3840 with 4096). Sending stays
    /// within the same bound so that both directions agree. A multi-buffer socket takes
    /// `max_frame` both ways.
    fn capacity(&self) -> usize {
        match &self.multi {
            Some(m) => m.max_frame,
            None => self.frame_size as usize - XDP_PACKET_HEADROOM,
        }
    }

    fn chunk_base(&self, addr: u64) -> u64 {
        addr & !(u64::from(self.frame_size) - 1)
    }

    /// Makes the wakeup syscall; transient refusals are normal (the kernel is busy). Returns
    /// true when the kernel stopped early with more work left (EAGAIN: in copy mode one
    /// `sendto` sends at most a budget of frames, 32 by default).
    fn wake(&mut self, rx: bool) -> bool {
        let kicked = if rx {
            xsk::kick_rx(&self.fd)
        } else {
            xsk::kick_tx(&self.fd)
        };
        self.stats.wakeups += 1;
        let Err(e) = kicked else {
            return false;
        };
        let e = e.raw_os_error();
        if !matches!(
            e,
            Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS) | Some(libc::ENETDOWN)
        ) {
            self.stats.wakeup_errors += 1;
        }
        e == Some(libc::EAGAIN)
    }

    /// Moves completed transmit chunks back to the free stack.
    fn reclaim(&mut self) {
        let (first, n) = self.comp.peek(self.comp_size());
        for i in 0..n {
            let addr = self.comp.read(first.wrapping_add(i));
            match self.multi.as_mut() {
                None => {
                    let base = self.chunk_base(addr);
                    self.tx_free.push(base);
                }
                Some(m) => {
                    // The kernel completes only descriptors we posted.
                    let ours = m.runs.completed(addr);
                    debug_assert!(ours, "completion of {addr:#x}, not a descriptor in flight");
                }
            }
        }
        if n > 0 {
            self.comp.release();
        }
    }

    fn comp_size(&self) -> u32 {
        self.tx.size()
    }
}

/// A received frame's bytes, or None when its descriptor points outside the UMEM.
fn rx_frame(umem: &Mapping, addr: u64, len: u32) -> Option<&[u8]> {
    let addr = offload::rx_addr(addr);
    let start = usize::try_from(addr).ok()?;
    let end = start.checked_add(len as usize)?;
    if end > umem.len() {
        return None;
    }
    // SAFETY: in bounds (checked above). The kernel finished writing this chunk before it
    // published the rx descriptor (acquire in the ring), and does not touch it again until we
    // put it back in the fill ring.
    Some(unsafe { std::slice::from_raw_parts(umem.as_ptr().add(start), len as usize) })
}

impl AsRawFd for XskSocket {
    /// For `poll(2)` when a shard wants to sleep while idle (POLLIN: frames in the rx ring).
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl FrameIo for XskSocket {
    fn rx_burst<F: FnMut(&[u8])>(&mut self, max: usize, mut f: F) -> usize {
        if max == 0 {
            return 0;
        }
        let max = u32::try_from(max).unwrap_or(u32::MAX);
        let (first, n) = self.rx.peek(max);
        if n == 0 {
            // In copy mode the kernel copies frames in from its own receive path (the driver's
            // NAPI poll or the generic XDP hook) and never waits for us, although it leaves the
            // fill ring's need-wakeup flag set: a kick would be a wasted syscall per empty
            // poll. Zero-copy drivers and busy polling do need the kick.
            let kick = self.busy_poll
                || (self.zero_copy && (!self.need_wakeup || self.fill.needs_wakeup()));
            if kick {
                let _ = self.wake(true);
            }
            return 0;
        }
        let mut addrs = std::mem::take(&mut self.rx_addrs);
        let mut delivered = n as usize;
        if let Some(multi) = self.multi.as_mut() {
            delivered = chain::rx_gathered(
                &mut multi.gather,
                &self.rx,
                &self.umem,
                self.rx_layout,
                &mut self.stats,
                first,
                n,
                &mut addrs,
                &mut f,
            );
        } else {
            for i in 0..n {
                let d = self.rx.read(first.wrapping_add(i));
                match rx_frame(&self.umem, d.addr, d.len) {
                    Some(frame) => {
                        self.stats.rx_frames += 1;
                        self.stats.rx_bytes += u64::from(d.len);
                        f(frame);
                    }
                    None => self.stats.rx_dropped += 1,
                }
                addrs.push(self.rx_layout.returned(d.addr));
            }
        }
        self.rx.release();
        // The fill ring has a slot for every receive chunk, so this cannot fail; should it,
        // the chunks would be leaked rather than the ring corrupted.
        if let Some(slot) = self.fill.reserve(n) {
            for (i, addr) in addrs.iter().enumerate() {
                self.fill.write(slot.wrapping_add(i as u32), *addr);
            }
            self.fill.submit();
        }
        addrs.clear();
        self.rx_addrs = addrs;
        delivered
    }

    fn tx_frame<F: FnOnce(&mut [u8]) -> usize>(&mut self, f: F) -> bool {
        if self.multi.is_some() {
            return self.tx_frame_chained(f);
        }
        if self.tx_free.is_empty() {
            self.reclaim();
        }
        let Some(addr) = self.tx_free.pop() else {
            self.stats.tx_ring_full += 1;
            return false;
        };
        let Some(slot) = self.tx.reserve(1) else {
            self.tx_free.push(addr);
            self.stats.tx_ring_full += 1;
            return false;
        };
        let frame_at = addr + self.tx_head();
        let len = f(self.umem_mut(frame_at, self.capacity()));
        if len == 0 || len > self.capacity() {
            if len > 0 {
                self.stats.tx_invalid += 1;
            }
            // Give the slot back: it is the last one reserved and not yet written.
            self.tx.unreserve_last();
            self.tx_free.push(addr);
            return len == 0;
        }
        let options = self.tx_options(addr, frame_at, len);
        self.tx.write(
            slot,
            libc::xdp_desc {
                addr: frame_at,
                len: len as u32,
                options,
            },
        );
        self.tx_queued += 1;
        self.tx_queued_bytes += len as u64;
        true
    }

    fn flush(&mut self) {
        if self.tx_queued > 0 {
            self.tx.submit();
            self.stats.tx_frames += u64::from(self.tx_queued);
            self.stats.tx_bytes += self.tx_queued_bytes;
            self.tx_queued = 0;
            self.tx_queued_bytes = 0;
        }
        // Kick only while the kernel has descriptors it has not taken, and only if it asks.
        // In copy mode each kick sends one budget and answers EAGAIN if more is left, so kick
        // again (bounded by the ring: a budget is at least one frame).
        let mut kicks = self.tx.size() / 32 + 2;
        while kicks > 0 && self.tx.pending() > 0 && (!self.need_wakeup || self.tx.needs_wakeup()) {
            kicks -= 1;
            if !self.wake(false) {
                break;
            }
        }
        self.reclaim();
    }

    fn frame_capacity(&self) -> usize {
        self.capacity()
    }

    fn tx_checksum_offload(&self) -> bool {
        self.tx_head() > 0
    }

    fn link_mtu(&self) -> Option<u32> {
        iface::mtu(&self.ifname).ok()
    }

    /// The kernel counts a frame longer than a chunk in `rx_dropped` (copy mode and zero-copy
    /// alike, without XDP_USE_SG), and so it counts a frame that found the fill ring empty;
    /// the latter also counts in `rx_fill_ring_empty_descs`. So drops in an interval where the
    /// fill ring never ran empty are oversized frames. (Our fill ring holds every receive
    /// chunk we are not reading, so it runs empty only when the rx ring is full of them.)
    /// A multi-buffer socket counts its own: frames longer than `max_frame`.
    fn rx_oversized_since_last(&mut self) -> u64 {
        let ours = self.stats.rx_oversized - self.oversized_seen;
        self.oversized_seen = self.stats.rx_oversized;
        if self.multi.is_some() {
            return ours;
        }
        let Ok(k) = self.kernel_stats() else {
            return 0;
        };
        let dropped = k.rx_dropped.saturating_sub(self.kernel_seen.rx_dropped);
        let fill_empty = k
            .rx_fill_ring_empty_descs
            .saturating_sub(self.kernel_seen.rx_fill_ring_empty_descs);
        self.kernel_seen = k;
        if fill_empty == 0 {
            dropped
        } else {
            0
        }
    }

    fn stats(&self) -> &Stats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_are_validated_before_any_syscall() {
        let bad = XskConfig {
            frame_size: 3000,
            ..XskConfig::default()
        };
        assert!(matches!(
            XskSocket::open("lo", 0, &bad),
            Err(Error::Config(_))
        ));
        let bad = XskConfig {
            rx_frames: 1000,
            ..XskConfig::default()
        };
        assert!(matches!(
            XskSocket::open("lo", 0, &bad),
            Err(Error::Config(_))
        ));
        assert!(matches!(
            XskSocket::open("ws-none-such", 0, &XskConfig::default()),
            Err(Error::NoSuchInterface(_))
        ));
    }
}
