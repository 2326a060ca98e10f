//! The AF_XDP driver: one socket on one (interface, rx queue), with its own UMEM.
//!
//! Layout of a socket's UMEM: `rx_frames + tx_frames` chunks of `frame_size` bytes. The first
//! `rx_frames` chunks circulate between the fill ring, the kernel and the rx ring; the others
//! are the transmit pool (a free stack, the tx ring and the completion ring). Every ring is as
//! large as the chunks that can be in it, so a reservation for a chunk we hold never fails.
//!
//! Sharing nothing: each shard opens its own socket on its own queue, with its own UMEM (no
//! `XDP_SHARED_UMEM`), so no memory or index is written by two shards.
//!
//! Wakeups: with need_wakeup (the default) the kernel sets a flag on the fill and tx rings
//! when it wants a syscall; the driver makes one (`recvfrom` / `sendto` with `MSG_DONTWAIT`)
//! only then, or on every empty rx poll when busy polling is on (the syscall is what runs the
//! driver's NAPI then).

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

use crate::ring::{Consumer, Producer, RawRing};
use crate::{Error, FrameIo, Result, Stats};

mod sys {
    //! The AF_XDP ABI from `<linux/if_xdp.h>`, spelled out so that the layout is ours to check.
    pub const AF_XDP: libc::c_int = 44;
    pub const SOL_XDP: libc::c_int = 283;

    pub const XDP_MMAP_OFFSETS: libc::c_int = 1;
    pub const XDP_RX_RING: libc::c_int = 2;
    pub const XDP_TX_RING: libc::c_int = 3;
    pub const XDP_UMEM_REG: libc::c_int = 4;
    pub const XDP_UMEM_FILL_RING: libc::c_int = 5;
    pub const XDP_UMEM_COMPLETION_RING: libc::c_int = 6;
    pub const XDP_STATISTICS: libc::c_int = 7;
    pub const XDP_OPTIONS: libc::c_int = 8;

    pub const XDP_COPY: u16 = 1 << 1;
    pub const XDP_ZEROCOPY: u16 = 1 << 2;
    pub const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
    pub const XDP_OPTIONS_ZEROCOPY: u32 = 1;

    pub const XDP_PGOFF_RX_RING: libc::off_t = 0;
    pub const XDP_PGOFF_TX_RING: libc::off_t = 0x8000_0000;
    pub const XDP_UMEM_PGOFF_FILL_RING: libc::off_t = 0x1_0000_0000;
    pub const XDP_UMEM_PGOFF_COMPLETION_RING: libc::off_t = 0x1_8000_0000;

    pub const SO_BUSY_POLL: libc::c_int = 46;
    pub const SO_PREFER_BUSY_POLL: libc::c_int = 69;
    pub const SO_BUSY_POLL_BUDGET: libc::c_int = 70;

    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct SockaddrXdp {
        pub family: u16,
        pub flags: u16,
        pub ifindex: u32,
        pub queue_id: u32,
        pub shared_umem_fd: u32,
    }

    /// `struct xdp_umem_reg` with every field spelled out, so no padding byte reaches the
    /// kernel: kernels before 6.8 read the first 28 bytes, later ones all 32
    /// (`tx_metadata_len`, which must be 0 for us).
    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct UmemReg {
        pub addr: u64,
        pub len: u64,
        pub chunk_size: u32,
        pub headroom: u32,
        pub flags: u32,
        pub tx_metadata_len: u32,
    }

    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct RingOffset {
        pub producer: u64,
        pub consumer: u64,
        pub desc: u64,
        pub flags: u64,
    }

    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct MmapOffsets {
        pub rx: RingOffset,
        pub tx: RingOffset,
        pub fr: RingOffset,
        pub cr: RingOffset,
    }

    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
    pub struct Desc {
        pub addr: u64,
        pub len: u32,
        pub options: u32,
    }
}

/// Bytes the kernel reserves in front of each received frame in a UMEM chunk.
const XDP_PACKET_HEADROOM: usize = 256;

/// How the socket binds to the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BindMode {
    /// The kernel copies frames between the driver's buffers and the UMEM. Works on every
    /// driver with XDP (veth included).
    Copy,
    /// The driver DMAs into the UMEM. Fails with [`Error::ZeroCopyUnsupported`] where the
    /// driver cannot (veth cannot).
    ZeroCopy,
    /// Zero-copy where the driver can, else copy; [`XskSocket::fallback`] says why it fell back.
    #[default]
    PreferZeroCopy,
}

/// Busy-poll socket options (`SO_BUSY_POLL`, `SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL_BUDGET`).
/// With them, the shard's own `recvfrom`/`sendto` wakeups run the driver's NAPI instead of
/// interrupts (pair it with the interface's `napi_defer_hard_irqs` and `gro_flush_timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusyPoll {
    /// Microseconds the kernel may busy poll in one syscall.
    pub usecs: u32,
    /// Packets one busy-poll round may process.
    pub budget: u16,
    /// Fail the open when the kernel lacks an option (otherwise a missing option is reported
    /// through [`XskSocket::busy_poll_missing`] and ignored).
    pub required: bool,
}

impl Default for BusyPoll {
    fn default() -> Self {
        BusyPoll {
            usecs: 20,
            budget: 64,
            required: false,
        }
    }
}

/// Shape of one AF_XDP socket.
#[derive(Debug, Clone)]
pub struct XskConfig {
    /// Bytes per UMEM chunk: 2048 or 4096 (aligned mode needs a power of two).
    pub frame_size: u32,
    /// Chunks for receiving; also the size of the fill and rx rings (a power of two).
    pub rx_frames: u32,
    /// Chunks for sending; also the size of the tx and completion rings (a power of two).
    pub tx_frames: u32,
    pub mode: BindMode,
    /// Ask the kernel to say when it needs a syscall (saves one per burst when it does not).
    pub need_wakeup: bool,
    pub busy_poll: Option<BusyPoll>,
}

impl Default for XskConfig {
    fn default() -> Self {
        XskConfig {
            frame_size: 2048,
            rx_frames: 2048,
            tx_frames: 2048,
            mode: BindMode::default(),
            need_wakeup: true,
            busy_poll: None,
        }
    }
}

impl XskConfig {
    fn validate(&self) -> Result<()> {
        if self.frame_size != 2048 && self.frame_size != 4096 {
            return Err(Error::Config(format!(
                "frame_size {} must be 2048 or 4096",
                self.frame_size
            )));
        }
        for (name, v) in [("rx_frames", self.rx_frames), ("tx_frames", self.tx_frames)] {
            if !v.is_power_of_two() || !(8..=1 << 16).contains(&v) {
                return Err(Error::Config(format!(
                    "{name} {v} must be a power of two in 8..=65536"
                )));
            }
        }
        Ok(())
    }
}

/// The kernel's counters for one socket (`XDP_STATISTICS`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KernelStats {
    /// Frames dropped for lack of a fill-ring buffer or rx-ring slot, among others.
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    /// Frames dropped because the rx ring was full.
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the kernel found the tx ring empty when woken.
    pub tx_ring_empty_descs: u64,
}

/// An anonymous mapping, unmapped on drop.
#[derive(Debug)]
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mapping {
    fn anonymous(len: usize) -> Result<Mapping> {
        // SAFETY: a fresh private anonymous mapping aliases nothing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        Mapping::checked(p, len, "mmap UMEM")
    }

    fn ring(fd: RawFd, len: usize, pgoff: libc::off_t, what: &str) -> Result<Mapping> {
        // SAFETY: mapping a ring of the socket at the offset the ABI assigns to it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff,
            )
        };
        Mapping::checked(p, len, what)
    }

    fn checked(p: *mut libc::c_void, len: usize, what: &str) -> Result<Mapping> {
        if p == libc::MAP_FAILED {
            return Err(Error::os(what));
        }
        Ok(Mapping {
            ptr: NonNull::new(p as *mut u8)
                .ok_or_else(|| Error::Config(format!("{what}: null")))?,
            len,
        })
    }

    /// Pointer `off` bytes into the mapping; the offsets come from the kernel and are checked.
    fn at(&self, off: u64, need: usize) -> Result<*mut u8> {
        let off = usize::try_from(off).map_err(|_| Error::Config("ring offset".into()))?;
        if !matches!(off.checked_add(need), Some(end) if end <= self.len) {
            return Err(Error::Config(format!(
                "ring offset {off}+{need} beyond mapping of {}",
                self.len
            )));
        }
        // SAFETY: in bounds, checked just above.
        Ok(unsafe { self.ptr.as_ptr().add(off) })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we own the mapping; nothing derived from it outlives the socket that owns it.
        unsafe { libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len) };
    }
}

fn setsockopt<T>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> std::io::Result<()> {
    // SAFETY: value is a live T and its size is passed with it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            value as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn getsockopt<T: Default>(fd: RawFd, level: libc::c_int, name: libc::c_int) -> std::io::Result<T> {
    let mut value = T::default();
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: value is a live T and len its size; the kernel writes at most len bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            &mut value as *mut T as *mut libc::c_void,
            &mut len,
        )
    };
    if rc == 0 {
        Ok(value)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The index of `ifname` in the calling thread's network namespace.
pub fn ifindex(ifname: &str) -> Result<u32> {
    let c = CString::new(ifname).map_err(|_| Error::NoSuchInterface(ifname.to_string()))?;
    // SAFETY: c is a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        return Err(Error::NoSuchInterface(ifname.to_string()));
    }
    Ok(idx)
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
    rx: Consumer<sys::Desc>,
    tx: Producer<sys::Desc>,
    _rings: [Mapping; 4],
    umem: Mapping,
    frame_size: u32,
    /// Chunks free for transmit.
    tx_free: Vec<u64>,
    /// Chunks written by `tx_frame` since the last `flush`, with their lengths (for stats).
    tx_queued: u32,
    tx_queued_bytes: u64,
    /// Chunk addresses taken from the rx ring in the current burst.
    rx_addrs: Vec<u64>,
    need_wakeup: bool,
    busy_poll: bool,
    zero_copy: bool,
    fallback: Option<String>,
    busy_poll_missing: Vec<&'static str>,
    ifname: String,
    queue: u32,
    stats: Stats,
    /// The kernel's counters when `rx_oversized_since_last` last read them.
    kernel_seen: KernelStats,
}

// SAFETY: the socket owns its mappings and rings outright; moving it to another thread moves
// the only handle to them. It is not Sync: all methods that touch rings take &mut self.
unsafe impl Send for XskSocket {}

impl XskSocket {
    /// Opens a socket on `ifname` queue `queue` (in the calling thread's network namespace).
    /// Frames reach it only once an XDP program redirects them to it, e.g. after
    /// [`crate::Bifurcation::register`].
    pub fn open(ifname: &str, queue: u32, cfg: &XskConfig) -> Result<XskSocket> {
        cfg.validate()?;
        let index = ifindex(ifname)?;
        match cfg.mode {
            BindMode::Copy => XskSocket::open_mode(ifname, index, queue, cfg, false),
            BindMode::ZeroCopy => XskSocket::open_mode(ifname, index, queue, cfg, true),
            BindMode::PreferZeroCopy => match XskSocket::open_mode(ifname, index, queue, cfg, true)
            {
                Ok(s) => Ok(s),
                Err(zc_error) => {
                    // A failed bind leaves the socket half set up; start over on a fresh one.
                    // If copy mode fails too, its error is the one that explains the problem.
                    let mut s = XskSocket::open_mode(ifname, index, queue, cfg, false)?;
                    s.fallback = Some(match zc_error {
                        Error::ZeroCopyUnsupported { source, .. } => format!(
                            "zero-copy AF_XDP is not supported by `{ifname}` queue {queue} ({source}); using copy mode"
                        ),
                        other => format!("zero-copy bind failed ({other}); using copy mode"),
                    });
                    Ok(s)
                }
            },
        }
    }

    fn open_mode(
        ifname: &str,
        index: u32,
        queue: u32,
        cfg: &XskConfig,
        zero_copy: bool,
    ) -> Result<XskSocket> {
        // SAFETY: plain socket(2); the result is checked and owned at once.
        let raw = unsafe { libc::socket(sys::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(Error::os(
                "socket(AF_XDP) (needs root/CAP_NET_RAW and a kernel with AF_XDP)",
            ));
        }
        // SAFETY: raw is a fresh fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let fdr = fd.as_raw_fd();

        let frames = (cfg.rx_frames + cfg.tx_frames) as usize;
        let umem = Mapping::anonymous(frames * cfg.frame_size as usize)?;
        let reg = sys::UmemReg {
            addr: umem.ptr.as_ptr() as u64,
            len: umem.len as u64,
            chunk_size: cfg.frame_size,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        let os = |what: &str| {
            let what = what.to_string();
            move |source| Error::Os { what, source }
        };
        setsockopt(fdr, sys::SOL_XDP, sys::XDP_UMEM_REG, &reg).map_err(os("register UMEM"))?;
        setsockopt(fdr, sys::SOL_XDP, sys::XDP_UMEM_FILL_RING, &cfg.rx_frames)
            .map_err(os("size fill ring"))?;
        setsockopt(
            fdr,
            sys::SOL_XDP,
            sys::XDP_UMEM_COMPLETION_RING,
            &cfg.tx_frames,
        )
        .map_err(os("size completion ring"))?;
        setsockopt(fdr, sys::SOL_XDP, sys::XDP_RX_RING, &cfg.rx_frames)
            .map_err(os("size rx ring"))?;
        setsockopt(fdr, sys::SOL_XDP, sys::XDP_TX_RING, &cfg.tx_frames)
            .map_err(os("size tx ring"))?;
        let off: sys::MmapOffsets = getsockopt(fdr, sys::SOL_XDP, sys::XDP_MMAP_OFFSETS)
            .map_err(os("read ring offsets"))?;

        let u64s = std::mem::size_of::<u64>();
        let descs = std::mem::size_of::<sys::Desc>();
        let map = |o: &sys::RingOffset,
                   size: u32,
                   elem: usize,
                   pgoff,
                   what: &str|
         -> Result<(Mapping, RawRing)> {
            let len = o.desc as usize + size as usize * elem;
            let m = Mapping::ring(fdr, len, pgoff, what)?;
            let raw = RawRing {
                producer: m.at(o.producer, 4)? as *const _,
                consumer: m.at(o.consumer, 4)? as *const _,
                flags: m.at(o.flags, 4)? as *const _,
                descs: m.at(o.desc, size as usize * elem)?,
                size,
            };
            Ok((m, raw))
        };
        let (fill_m, fill_r) = map(
            &off.fr,
            cfg.rx_frames,
            u64s,
            sys::XDP_UMEM_PGOFF_FILL_RING,
            "mmap fill ring",
        )?;
        let (comp_m, comp_r) = map(
            &off.cr,
            cfg.tx_frames,
            u64s,
            sys::XDP_UMEM_PGOFF_COMPLETION_RING,
            "mmap completion ring",
        )?;
        let (rx_m, rx_r) = map(
            &off.rx,
            cfg.rx_frames,
            descs,
            sys::XDP_PGOFF_RX_RING,
            "mmap rx ring",
        )?;
        let (tx_m, tx_r) = map(
            &off.tx,
            cfg.tx_frames,
            descs,
            sys::XDP_PGOFF_TX_RING,
            "mmap tx ring",
        )?;
        // SAFETY: each RawRing points into a mapping that the socket keeps until it drops, and
        // each index we write (fill/tx producer, comp/rx consumer) has this socket as its only
        // user-space writer.
        let (mut fill, comp, rx, tx) = unsafe {
            (
                Producer::new(fill_r),
                Consumer::new(comp_r),
                Consumer::new(rx_r),
                Producer::new(tx_r),
            )
        };

        // Every receive chunk starts in the fill ring.
        let first = fill
            .reserve(cfg.rx_frames)
            .ok_or_else(|| Error::Config("fresh fill ring is not empty".into()))?;
        for i in 0..cfg.rx_frames {
            fill.write(
                first.wrapping_add(i),
                u64::from(i) * u64::from(cfg.frame_size),
            );
        }
        fill.submit();
        let tx_free = (cfg.rx_frames..cfg.rx_frames + cfg.tx_frames)
            .rev()
            .map(|i| u64::from(i) * u64::from(cfg.frame_size))
            .collect();

        let mut busy_poll_missing = Vec::new();
        if let Some(bp) = cfg.busy_poll {
            let opts: [(&'static str, libc::c_int, libc::c_int); 3] = [
                ("SO_PREFER_BUSY_POLL", sys::SO_PREFER_BUSY_POLL, 1),
                ("SO_BUSY_POLL", sys::SO_BUSY_POLL, bp.usecs as libc::c_int),
                (
                    "SO_BUSY_POLL_BUDGET",
                    sys::SO_BUSY_POLL_BUDGET,
                    libc::c_int::from(bp.budget),
                ),
            ];
            for (name, opt, value) in opts {
                if let Err(source) = setsockopt(fdr, libc::SOL_SOCKET, opt, &value) {
                    if bp.required {
                        return Err(Error::Os {
                            what: format!("set {name}"),
                            source,
                        });
                    }
                    busy_poll_missing.push(name);
                }
            }
        }

        let mut flags = if zero_copy {
            sys::XDP_ZEROCOPY
        } else {
            sys::XDP_COPY
        };
        if cfg.need_wakeup {
            flags |= sys::XDP_USE_NEED_WAKEUP;
        }
        let sa = sys::SockaddrXdp {
            family: sys::AF_XDP as u16,
            flags,
            ifindex: index,
            queue_id: queue,
            shared_umem_fd: 0,
        };
        // SAFETY: sa is a valid sockaddr_xdp and its size is passed with it.
        let rc = unsafe {
            libc::bind(
                fdr,
                &sa as *const sys::SockaddrXdp as *const libc::sockaddr,
                std::mem::size_of::<sys::SockaddrXdp>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            let source = std::io::Error::last_os_error();
            // EOPNOTSUPP is the driver saying it has no zero-copy; EINVAL also comes from a
            // queue that does not exist, so it is not taken as "unsupported".
            if zero_copy && source.raw_os_error() == Some(libc::EOPNOTSUPP) {
                return Err(Error::ZeroCopyUnsupported {
                    ifname: ifname.to_string(),
                    queue,
                    source,
                });
            }
            let mode = if zero_copy { "zero-copy" } else { "copy" };
            return Err(Error::Os {
                what: format!("bind AF_XDP socket to `{ifname}` queue {queue} in {mode} mode"),
                source,
            });
        }
        let opts: std::io::Result<u32> = getsockopt(fdr, sys::SOL_XDP, sys::XDP_OPTIONS);
        let zero_copy = opts
            .map(|o| o & sys::XDP_OPTIONS_ZEROCOPY != 0)
            .unwrap_or(zero_copy);

        Ok(XskSocket {
            fd,
            fill,
            comp,
            rx,
            tx,
            _rings: [fill_m, comp_m, rx_m, tx_m],
            umem,
            frame_size: cfg.frame_size,
            tx_free,
            tx_queued: 0,
            tx_queued_bytes: 0,
            rx_addrs: Vec::with_capacity(cfg.rx_frames as usize),
            need_wakeup: cfg.need_wakeup,
            busy_poll: cfg.busy_poll.is_some(),
            zero_copy,
            fallback: None,
            busy_poll_missing,
            ifname: ifname.to_string(),
            queue,
            stats: Stats::default(),
            kernel_seen: KernelStats::default(),
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

    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Sleeps until a frame waits in the rx ring or `timeout` passes; true when one waits.
    /// For a shard that has been idle for a while and wants to stop spinning.
    pub fn wait_readable(&self, timeout: std::time::Duration) -> Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: one valid pollfd.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(Error::Os {
                what: "poll AF_XDP socket".into(),
                source: e,
            });
        }
        Ok(rc > 0 && pfd.revents & libc::POLLIN != 0)
    }

    /// The kernel's drop counters for this socket (a syscall: for reports, not per burst).
    pub fn kernel_stats(&self) -> Result<KernelStats> {
        getsockopt(self.fd.as_raw_fd(), sys::SOL_XDP, sys::XDP_STATISTICS).map_err(|source| {
            Error::Os {
                what: "read XDP_STATISTICS".into(),
                source,
            }
        })
    }

    fn chunk_mut(&mut self, addr: u64) -> &mut [u8] {
        // SAFETY: addr is one of our transmit chunks (from the free stack), which lies inside
        // the UMEM and which the kernel does not read until we publish a tx descriptor for it.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.umem.ptr.as_ptr().add(addr as usize),
                self.capacity(),
            )
        }
    }

    /// The largest frame, received or sent: the kernel keeps `XDP_PACKET_HEADROOM` (256 bytes)
    /// in front of every received frame, so a chunk holds `frame_size - 256` bytes of frame
    /// (1792 with 2048-byte chunks: enough for a 1500-byte MTU; use 4096 for larger MTUs).
    /// Sending stays within the same bound so that both directions agree.
    fn capacity(&self) -> usize {
        self.frame_size as usize - XDP_PACKET_HEADROOM
    }

    fn chunk_base(&self, addr: u64) -> u64 {
        addr & !(u64::from(self.frame_size) - 1)
    }

    /// Makes the wakeup syscall; transient refusals are normal (the kernel is busy). Returns
    /// true when the kernel stopped early with more work left (EAGAIN: in copy mode one
    /// `sendto` sends at most a budget of frames, 32 by default).
    fn wake(&mut self, rx: bool) -> bool {
        let fd = self.fd.as_raw_fd();
        // SAFETY: zero-length calls with null buffers; they only kick the kernel.
        let rc = unsafe {
            if rx {
                libc::recvfrom(
                    fd,
                    std::ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            } else {
                libc::sendto(
                    fd,
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                )
            }
        };
        self.stats.wakeups += 1;
        if rc >= 0 {
            return false;
        }
        let e = std::io::Error::last_os_error().raw_os_error();
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
            let base = self.chunk_base(addr);
            self.tx_free.push(base);
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
    let start = usize::try_from(addr).ok()?;
    let end = start.checked_add(len as usize)?;
    if end > umem.len {
        return None;
    }
    // SAFETY: in bounds (checked above). The kernel finished writing this chunk before it
    // published the rx descriptor (acquire in the ring), and does not touch it again until we
    // put it back in the fill ring.
    Some(unsafe { std::slice::from_raw_parts(umem.ptr.as_ptr().add(start), len as usize) })
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
            addrs.push(self.chunk_base(d.addr));
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
        n as usize
    }

    fn tx_frame<F: FnOnce(&mut [u8]) -> usize>(&mut self, f: F) -> bool {
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
        let len = f(self.chunk_mut(addr));
        if len == 0 || len > self.capacity() {
            if len > 0 {
                self.stats.tx_invalid += 1;
            }
            // Give the slot back: it is the last one reserved and not yet written.
            self.tx.unreserve_last();
            self.tx_free.push(addr);
            return len == 0;
        }
        self.tx.write(
            slot,
            sys::Desc {
                addr,
                len: len as u32,
                options: 0,
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

    /// The kernel counts a frame longer than a chunk in `rx_dropped` (copy mode and zero-copy
    /// alike, without XDP_USE_SG), and so it counts a frame that found the fill ring empty;
    /// the latter also counts in `rx_fill_ring_empty_descs`. So drops in an interval where the
    /// fill ring never ran empty are oversized frames. (Our fill ring holds every receive
    /// chunk we are not reading, so it runs empty only when the rx ring is full of them.)
    fn rx_oversized_since_last(&mut self) -> u64 {
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
    fn abi_layouts_match_the_kernel_headers() {
        assert_eq!(std::mem::size_of::<sys::SockaddrXdp>(), 16);
        assert_eq!(std::mem::size_of::<sys::UmemReg>(), 32, "no padding");
        assert_eq!(std::mem::size_of::<sys::MmapOffsets>(), 128);
        assert_eq!(std::mem::size_of::<sys::Desc>(), 16);
        assert_eq!(std::mem::size_of::<KernelStats>(), 48);
    }

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
