//! The DPDK driver (cargo feature `dpdk`): one [`DpdkQueue`] per (port, queue), behind
//! [`FrameIo`], over DPDK 22.11 from the distribution (`libdpdk-dev`).
//!
//! DPDK's data-path functions are inline C; `dpdk/shim.c` wraps each in one call, and every
//! call that touches frames takes a whole burst, so a burst costs a handful of FFI crossings,
//! not one per frame.
//!
//! The EAL is process-global: [`Eal::init`] runs once per process (a second call is an error).
//! Without hugepages and NICs it runs on virtual devices, e.g.
//! `--no-huge -m 128 --no-pci --no-shconf --vdev=net_af_packet0,iface=veth0` (a kernel
//! interface through a packet socket, opened in the network namespace of the thread that calls
//! `init`) or `--vdev=net_ring0` (a loopback port: what it sends, it receives).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::{Error, FrameIo, Result, Stats};
use wirespeed_sys::signal::{Blocked, Signal};

/// Frames per rx burst and the tx batch size.
const BURST: usize = 64;

#[repr(C)]
struct RteMbuf {
    _opaque: [u8; 0],
}

#[repr(C)]
struct RteMempool {
    _opaque: [u8; 0],
}

/// Port counters as DPDK reports them (`rte_eth_stats`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PortStats {
    pub ipackets: u64,
    pub opackets: u64,
    pub ibytes: u64,
    pub obytes: u64,
    /// Frames the hardware (or vdev) dropped for lack of rx descriptors.
    pub imissed: u64,
    pub ierrors: u64,
    pub oerrors: u64,
    /// Frames dropped for lack of mbufs.
    pub rx_nombuf: u64,
}

extern "C" {
    fn ws_dpdk_eal_init(argc: c_int, argv: *mut *mut c_char) -> c_int;
    fn ws_dpdk_strerror(err: c_int) -> *const c_char;
    fn ws_dpdk_pool_create(
        name: *const c_char,
        n: u32,
        cache: u32,
        data_room: u16,
    ) -> *mut RteMempool;
    fn ws_dpdk_pool_free(mp: *mut RteMempool);
    fn ws_dpdk_port_by_name(name: *const c_char, port: *mut u16) -> c_int;
    fn ws_dpdk_next_port(from: u16, port: *mut u16, name: *mut c_char) -> c_int;
    fn ws_dpdk_port_start(
        port: u16,
        nrxq: u16,
        ntxq: u16,
        nb_desc: u16,
        mp: *mut RteMempool,
    ) -> c_int;
    fn ws_dpdk_port_stop(port: u16) -> c_int;
    fn ws_dpdk_port_mac(port: u16, mac: *mut u8) -> c_int;
    fn ws_dpdk_rx_burst(port: u16, queue: u16, pkts: *mut *mut RteMbuf, n: u16) -> u16;
    fn ws_dpdk_tx_burst(port: u16, queue: u16, pkts: *mut *mut RteMbuf, n: u16) -> u16;
    fn ws_dpdk_mbuf_views(
        pkts: *mut *mut RteMbuf,
        n: u16,
        data: *mut *mut c_void,
        len: *mut u16,
        seg_ok: *mut u8,
    );
    fn ws_dpdk_alloc_bulk(mp: *mut RteMempool, pkts: *mut *mut RteMbuf, n: u32) -> c_int;
    fn ws_dpdk_mbuf_room(m: *mut RteMbuf, room: *mut u16) -> *mut c_void;
    fn ws_dpdk_mbuf_set_len(m: *mut RteMbuf, len: u16);
    fn ws_dpdk_free_bulk(pkts: *mut *mut RteMbuf, n: u32);
    fn ws_dpdk_port_stats(port: u16, out: *mut PortStats) -> c_int;
}

/// DPDK's own error numbers start above the system's (`RTE_MIN_ERRNO` in rte_errno.h).
const RTE_MIN_ERRNO: c_int = 1000;

fn dpdk_error(what: impl Into<String>, rc: c_int) -> Error {
    let errno = rc.abs();
    // A system errno already says its text through the io::Error; only DPDK's own numbers
    // need rte_strerror, or the line would say the same words twice.
    let source = if errno >= RTE_MIN_ERRNO {
        // SAFETY: rte_strerror returns a static or thread-local NUL-terminated string.
        let text = unsafe { CStr::from_ptr(ws_dpdk_strerror(errno)) }
            .to_string_lossy()
            .into_owned();
        std::io::Error::other(text)
    } else {
        std::io::Error::from_raw_os_error(errno)
    };
    Error::Os {
        what: what.into(),
        err: source,
    }
}

static EAL_STARTED: AtomicBool = AtomicBool::new(false);

/// Proof that the EAL is initialised (the process-wide DPDK runtime).
#[derive(Debug)]
pub struct Eal {
    _private: (),
}

impl Eal {
    /// `rte_eal_init` with `args` (the first is the program name). Once per process.
    /// The calling thread keeps its CPU set and signal mask (see `ThreadState`).
    pub fn init(args: &[&str]) -> Result<Eal> {
        if EAL_STARTED.swap(true, Ordering::AcqRel) {
            return Err(Error::Config(
                "the DPDK EAL is already initialised in this process".into(),
            ));
        }
        let owned: Vec<CString> = args
            .iter()
            .map(|a| {
                CString::new(*a)
                    .map_err(|_| Error::Config(format!("EAL argument {a:?} contains NUL")))
            })
            .collect::<Result<_>>()?;
        // rte_eal_init may permute argv; the CStrings stay alive for the whole call (and the
        // EAL copies what it keeps).
        let mut argv: Vec<*mut c_char> = owned.iter().map(|c| c.as_ptr() as *mut c_char).collect();
        let kept = ThreadState::save();
        // SAFETY: argv holds argc valid NUL-terminated strings.
        let rc = unsafe { ws_dpdk_eal_init(argv.len() as c_int, argv.as_mut_ptr()) };
        kept.restore();
        if rc < 0 {
            return Err(dpdk_error(
                format!(
                    "rte_eal_init {} failed (the EAL's log above says why; without hugepages \
                     pass --no-huge -m 256)",
                    args.join(" ")
                ),
                rc,
            ));
        }
        Ok(Eal { _private: () })
    }
}

/// What `rte_eal_init` changes on the calling thread and what its own threads inherit: the
/// EAL pins the caller to its main lcore, and the threads it starts (interrupts, service
/// lcores) inherit the caller's signal mask. While the EAL starts, SIGINT and SIGTERM are
/// blocked, so that its threads never take them (a runtime reads them from a signalfd on its
/// own threads); afterwards the caller gets its CPU set and mask back.
struct ThreadState {
    cpus: Option<Vec<usize>>,
    blocked: Option<Blocked>,
}

impl ThreadState {
    fn save() -> ThreadState {
        ThreadState {
            cpus: wirespeed_sys::process::affinity(0).ok(),
            blocked: Blocked::new(&[Signal::Interrupt, Signal::Terminate]).ok(),
        }
    }

    fn restore(self) {
        if let Some(cpus) = &self.cpus {
            let _ = wirespeed_sys::process::set_affinity(cpus);
        }
        drop(self.blocked); // the mask as it was
    }
}

/// Shape of a port.
#[derive(Debug, Clone)]
pub struct DpdkPortConfig {
    pub rx_queues: u16,
    pub tx_queues: u16,
    /// Descriptors per queue.
    pub descriptors: u16,
    /// Mbufs in the port's pool (shared by its queues), and the per-lcore cache.
    pub pool_size: u32,
    pub pool_cache: u32,
    /// Mbuf data room, headroom included (2048 + 128 holds a 1500-byte MTU frame).
    pub data_room: u16,
}

impl Default for DpdkPortConfig {
    fn default() -> Self {
        DpdkPortConfig {
            rx_queues: 1,
            tx_queues: 1,
            descriptors: 1024,
            pool_size: 8191,
            pool_cache: 256,
            data_room: 2048 + 128,
        }
    }
}

struct PortInner {
    port: u16,
    pool: NonNull<RteMempool>,
}

// SAFETY: DPDK ports and mempools may be used from any thread; queues split the data path so
// that each (port, queue) has one user.
unsafe impl Send for PortInner {}
// SAFETY: as above; the shared parts (stats, MAC) are thread-safe in DPDK.
unsafe impl Sync for PortInner {}

impl Drop for PortInner {
    fn drop(&mut self) {
        // SAFETY: the last queue is gone; nothing uses the port or the pool any more.
        unsafe {
            ws_dpdk_port_stop(self.port);
            ws_dpdk_pool_free(self.pool.as_ptr());
        }
    }
}

/// A started DPDK port; hand its queues to shards with [`DpdkPort::queue`].
pub struct DpdkPort {
    inner: Arc<PortInner>,
    cfg: DpdkPortConfig,
    taken: Vec<bool>,
}

impl std::fmt::Debug for DpdkPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpdkPort")
            .field("port", &self.inner.port)
            .field("cfg", &self.cfg)
            .finish()
    }
}

/// Room for a port name (DPDK's RTE_ETH_NAME_MAX_LEN).
const PORT_NAME_MAX: usize = 64;

impl DpdkPort {
    /// The names of the ports the EAL found (vdevs from `--vdev`, PCI devices it may use), in
    /// port id order.
    pub fn available(_eal: &Eal) -> Vec<String> {
        let mut names = Vec::new();
        let mut from = 0u16;
        loop {
            let mut port = 0u16;
            let mut name = [0 as c_char; PORT_NAME_MAX];
            // SAFETY: valid out pointers; name has RTE_ETH_NAME_MAX_LEN bytes.
            let rc = unsafe { ws_dpdk_next_port(from, &mut port, name.as_mut_ptr()) };
            if rc < 0 {
                return names;
            }
            // SAFETY: DPDK wrote a NUL-terminated name into the buffer.
            names.push(
                unsafe { CStr::from_ptr(name.as_ptr()) }
                    .to_string_lossy()
                    .into_owned(),
            );
            match port.checked_add(1) {
                Some(next) => from = next,
                None => return names,
            }
        }
    }

    /// Configures and starts the port named `name` (a vdev name such as `net_ring0`, or a PCI
    /// address).
    pub fn start(_eal: &Eal, name: &str, cfg: &DpdkPortConfig) -> Result<DpdkPort> {
        if cfg.rx_queues == 0 || cfg.tx_queues == 0 || !cfg.descriptors.is_power_of_two() {
            return Err(Error::Config(format!("bad DPDK port config {cfg:?}")));
        }
        let cname = CString::new(name).map_err(|_| Error::Config(format!("port name {name:?}")))?;
        let mut port = 0u16;
        // SAFETY: valid string and out pointer.
        let rc = unsafe { ws_dpdk_port_by_name(cname.as_ptr(), &mut port) };
        if rc < 0 {
            return Err(dpdk_error(
                format!("no DPDK port `{name}` (pass it with --vdev)"),
                rc,
            ));
        }
        let pool_name =
            CString::new(format!("ws_pool_{port}")).expect("no NUL in a formatted number");
        // SAFETY: valid name; the pool is freed when the port's last user drops.
        let pool = unsafe {
            ws_dpdk_pool_create(
                pool_name.as_ptr(),
                cfg.pool_size,
                cfg.pool_cache,
                cfg.data_room,
            )
        };
        let pool = NonNull::new(pool).ok_or_else(|| {
            Error::Config(format!(
                "cannot create mbuf pool for `{name}` (-m too small?)"
            ))
        })?;
        // SAFETY: port id from DPDK, live pool.
        let rc = unsafe {
            ws_dpdk_port_start(
                port,
                cfg.rx_queues,
                cfg.tx_queues,
                cfg.descriptors,
                pool.as_ptr(),
            )
        };
        if rc < 0 {
            // SAFETY: the pool is ours and unused.
            unsafe { ws_dpdk_pool_free(pool.as_ptr()) };
            return Err(dpdk_error(format!("start DPDK port `{name}`"), rc));
        }
        let queues = cfg.rx_queues.max(cfg.tx_queues) as usize;
        Ok(DpdkPort {
            inner: Arc::new(PortInner { port, pool }),
            cfg: cfg.clone(),
            taken: vec![false; queues],
        })
    }

    /// Queue `q` (rx queue q and tx queue q), once.
    pub fn queue(&mut self, q: u16) -> Result<DpdkQueue> {
        if q >= self.cfg.rx_queues || q >= self.cfg.tx_queues {
            return Err(Error::Config(format!(
                "queue {q} outside the port's {} queues",
                self.cfg.rx_queues
            )));
        }
        if std::mem::replace(&mut self.taken[q as usize], true) {
            return Err(Error::Config(format!("queue {q} already taken")));
        }
        Ok(DpdkQueue {
            inner: Arc::clone(&self.inner),
            queue: q,
            capacity: self.cfg.data_room.saturating_sub(128) as usize,
            free: Vec::with_capacity(BURST),
            pending: Vec::with_capacity(BURST * 4),
            pending_bytes: Vec::with_capacity(BURST * 4),
            stats: Stats::default(),
        })
    }

    pub fn mac(&self) -> Result<[u8; 6]> {
        let mut mac = [0u8; 6];
        // SAFETY: mac has room for 6 bytes.
        let rc = unsafe { ws_dpdk_port_mac(self.inner.port, mac.as_mut_ptr()) };
        if rc < 0 {
            return Err(dpdk_error("read port MAC", rc));
        }
        Ok(mac)
    }

    pub fn stats(&self) -> Result<PortStats> {
        let mut s = PortStats::default();
        // SAFETY: s is a valid out struct of the layout the shim writes.
        let rc = unsafe { ws_dpdk_port_stats(self.inner.port, &mut s) };
        if rc < 0 {
            return Err(dpdk_error("read port stats", rc));
        }
        Ok(s)
    }
}

/// One (port, queue) of a DPDK port: a driver queue for one shard.
pub struct DpdkQueue {
    inner: Arc<PortInner>,
    queue: u16,
    capacity: usize,
    /// Fresh mbufs taken from the pool in bulk, for tx_frame.
    free: Vec<*mut RteMbuf>,
    /// Built frames not yet accepted by the tx queue, and their lengths.
    pending: Vec<*mut RteMbuf>,
    pending_bytes: Vec<u16>,
    stats: Stats,
}

// SAFETY: the queue owns its mbufs; DPDK allows a queue to be driven from any single thread.
unsafe impl Send for DpdkQueue {}

impl std::fmt::Debug for DpdkQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpdkQueue")
            .field("port", &self.inner.port)
            .field("queue", &self.queue)
            .finish()
    }
}

impl FrameIo for DpdkQueue {
    fn rx_burst<F: FnMut(&[u8])>(&mut self, max: usize, mut f: F) -> usize {
        let mut pkts = [std::ptr::null_mut::<RteMbuf>(); BURST];
        let want = max.min(BURST) as u16;
        // SAFETY: pkts has room for `want` pointers.
        let n = unsafe { ws_dpdk_rx_burst(self.inner.port, self.queue, pkts.as_mut_ptr(), want) };
        if n == 0 {
            return 0;
        }
        let mut data = [std::ptr::null_mut::<c_void>(); BURST];
        let mut len = [0u16; BURST];
        let mut seg_ok = [0u8; BURST];
        // SAFETY: the first n entries are mbufs DPDK just gave us; the out arrays hold n.
        unsafe {
            ws_dpdk_mbuf_views(
                pkts.as_mut_ptr(),
                n,
                data.as_mut_ptr(),
                len.as_mut_ptr(),
                seg_ok.as_mut_ptr(),
            )
        };
        for i in 0..n as usize {
            if seg_ok[i] == 0 {
                // Multi-segment frames (jumbo) are not for this stack: count and drop.
                self.stats.rx_dropped += 1;
                continue;
            }
            // SAFETY: data/len describe the mbuf's single segment, which we own until the
            // free below.
            let frame =
                unsafe { std::slice::from_raw_parts(data[i] as *const u8, len[i] as usize) };
            self.stats.rx_frames += 1;
            self.stats.rx_bytes += u64::from(len[i]);
            f(frame);
        }
        // SAFETY: we own these n mbufs and nothing refers to them any more.
        unsafe { ws_dpdk_free_bulk(pkts.as_mut_ptr(), u32::from(n)) };
        n as usize
    }

    fn tx_frame<F: FnOnce(&mut [u8]) -> usize>(&mut self, f: F) -> bool {
        if self.pending.len() >= self.pending.capacity() {
            self.stats.tx_ring_full += 1;
            return false;
        }
        if self.free.is_empty() {
            let mut bulk = [std::ptr::null_mut::<RteMbuf>(); BURST];
            // SAFETY: bulk holds BURST pointers; the pool is alive while the port is.
            let rc = unsafe {
                ws_dpdk_alloc_bulk(self.inner.pool.as_ptr(), bulk.as_mut_ptr(), BURST as u32)
            };
            if rc != 0 {
                self.stats.tx_ring_full += 1;
                return false;
            }
            self.free.extend_from_slice(&bulk);
        }
        let Some(m) = self.free.pop() else {
            return false;
        };
        let mut room = 0u16;
        // SAFETY: m is a fresh mbuf we own.
        let data = unsafe { ws_dpdk_mbuf_room(m, &mut room) };
        let cap = (room as usize).min(self.capacity);
        // SAFETY: `room` bytes from the data pointer belong to the mbuf, which we own.
        let buf = unsafe { std::slice::from_raw_parts_mut(data as *mut u8, cap) };
        let len = f(buf);
        if len == 0 || len > cap {
            if len > cap {
                self.stats.tx_invalid += 1;
            }
            self.free.push(m);
            return len == 0;
        }
        // SAFETY: m is ours; len fits its room.
        unsafe { ws_dpdk_mbuf_set_len(m, len as u16) };
        self.pending.push(m);
        self.pending_bytes.push(len as u16);
        true
    }

    fn flush(&mut self) {
        let mut sent_total = 0usize;
        while sent_total < self.pending.len() {
            let chunk = (self.pending.len() - sent_total).min(BURST) as u16;
            // SAFETY: the pending mbufs are ours; DPDK takes ownership of those it accepts.
            let sent = unsafe {
                ws_dpdk_tx_burst(
                    self.inner.port,
                    self.queue,
                    self.pending.as_mut_ptr().add(sent_total),
                    chunk,
                )
            } as usize;
            for &b in &self.pending_bytes[sent_total..sent_total + sent] {
                self.stats.tx_frames += 1;
                self.stats.tx_bytes += u64::from(b);
            }
            sent_total += sent;
            if sent < chunk as usize {
                break; // the tx queue is full: keep the rest for the next flush
            }
        }
        self.pending.drain(..sent_total);
        self.pending_bytes.drain(..sent_total);
    }

    fn frame_capacity(&self) -> usize {
        self.capacity
    }

    fn stats(&self) -> &Stats {
        &self.stats
    }
}

impl Drop for DpdkQueue {
    fn drop(&mut self) {
        for list in [&mut self.free, &mut self.pending] {
            if !list.is_empty() {
                // SAFETY: these mbufs are ours and unused.
                unsafe { ws_dpdk_free_bulk(list.as_mut_ptr(), list.len() as u32) };
                list.clear();
            }
        }
    }
}
