//! A seeded L2 impairment link: the lab's stand-in for `tc netem`, which this kernel lacks
//! (CONFIG_NET_SCH_NETEM is off).
//!
//! A thread inside a middle namespace holds an AF_PACKET socket on each of two interfaces and
//! forwards every frame from one to the other, dropping, duplicating or reordering (holding a
//! frame back until the next one has passed) with the configured probabilities. The two outer
//! namespaces see one Ethernet segment. Frames are forwarded as they are, so the sending
//! interfaces must not use TSO/GSO (`ethtool -K IF tx off tso off gso off`).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::{Error, Netns, Result};

/// Probabilities in percent, each applied independently per frame.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Impairment {
    pub loss_pct: f64,
    pub duplicate_pct: f64,
    pub reorder_pct: f64,
    pub seed: u64,
}

/// What the link did, per direction summed.
#[derive(Debug, Default)]
pub struct Counters {
    pub forwarded: AtomicU64,
    pub dropped: AtomicU64,
    pub duplicated: AtomicU64,
    pub reordered: AtomicU64,
}

/// A running impairment link; stops when dropped.
pub struct ImpairedLink {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    pub counters: Arc<Counters>,
}

fn packet_socket(ifname: &str) -> Result<OwnedFd> {
    let io = |what: &str| Error::Io {
        what: format!("{what} ({ifname})"),
        source: std::io::Error::last_os_error(),
    };
    // SAFETY: socket() returns a new fd or -1.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            (libc::ETH_P_ALL as u16).to_be() as i32,
        )
    };
    if fd < 0 {
        return Err(io("AF_PACKET socket"));
    }
    // SAFETY: fd was just created and is owned here.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let cname = std::ffi::CString::new(ifname)
        .map_err(|_| Error::Invalid(format!("bad interface name {ifname}")))?;
    // SAFETY: cname is a valid C string.
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if index == 0 {
        return Err(io("if_nametoindex"));
    }
    // SAFETY: sockaddr_ll is plain data.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    sll.sll_ifindex = index as i32;
    // SAFETY: binds to a valid sockaddr_ll of the stated size.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &sll as *const _ as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    if rc < 0 {
        return Err(io("bind AF_PACKET"));
    }
    // A 100 ms receive timeout lets the thread notice `stop`.
    let tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 100_000,
    };
    // SAFETY: sets a timeval option from a live struct.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            &tv as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::timeval>() as u32,
        )
    };
    Ok(fd)
}

struct Rng(u64);
impl Rng {
    fn pct(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % 1_000_000) as f64 / 10_000.0
    }
}

fn forward(from: OwnedFd, to: OwnedFd, imp: Impairment, stop: Arc<AtomicBool>, c: Arc<Counters>) {
    let mut rng = Rng(imp.seed | 1);
    let mut buf = vec![0u8; 65536];
    let mut held: Option<Vec<u8>> = None;
    let send = |frame: &[u8]| {
        // SAFETY: sends from a live buffer on a bound packet socket.
        unsafe { libc::send(to.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
    };
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: sockaddr_ll is plain data; recvfrom writes at most its size.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
        // SAFETY: receives into a live buffer of its length.
        let n = unsafe {
            libc::recvfrom(
                from.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                0,
                &mut sll as *mut _ as *mut libc::sockaddr,
                &mut len,
            )
        };
        if n <= 0 {
            // Timeout: release a held frame so a quiet link does not keep it forever.
            if let Some(f) = held.take() {
                send(&f);
            }
            continue;
        }
        // libc declares PACKET_OUTGOING as c_int in some versions and u8 in others.
        #[allow(clippy::unnecessary_cast)]
        let outgoing = libc::PACKET_OUTGOING as u8;
        if sll.sll_pkttype == outgoing {
            continue; // our own transmissions on this interface
        }
        let frame = &buf[..n as usize];
        if rng.pct() < imp.loss_pct {
            c.dropped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if held.is_none() && rng.pct() < imp.reorder_pct {
            c.reordered.fetch_add(1, Ordering::Relaxed);
            held = Some(frame.to_vec());
            continue;
        }
        send(frame);
        if rng.pct() < imp.duplicate_pct {
            c.duplicated.fetch_add(1, Ordering::Relaxed);
            send(frame);
        }
        if let Some(f) = held.take() {
            send(&f);
        }
        c.forwarded.fetch_add(1, Ordering::Relaxed);
    }
}

impl ImpairedLink {
    /// Forwards between `a` and `b` (interfaces inside `ns`) in both directions.
    pub fn start(ns: &Netns, a: &str, b: &str, imp: Impairment) -> Result<ImpairedLink> {
        for dev in [a, b] {
            ns.ip(&["link", "set", dev, "up"])?;
            ns.exec(
                "ethtool",
                &[
                    "-K", dev, "tx", "off", "tso", "off", "gso", "off", "gro", "off",
                ],
            )?;
        }
        let (a, b) = (a.to_string(), b.to_string());
        let socks = ns.run(move || -> Result<_> {
            Ok((
                packet_socket(&a)?,
                packet_socket(&a)?,
                packet_socket(&b)?,
                packet_socket(&b)?,
            ))
        })??;
        let (a_rx, a_tx, b_rx, b_tx) = socks;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let mut threads = Vec::new();
        let (s1, c1) = (stop.clone(), counters.clone());
        threads.push(std::thread::spawn(move || forward(a_rx, b_tx, imp, s1, c1)));
        let (s2, c2) = (stop.clone(), counters.clone());
        let imp2 = Impairment {
            seed: imp.seed.rotate_left(17) ^ 0x5555,
            ..imp
        };
        threads.push(std::thread::spawn(move || {
            forward(b_rx, a_tx, imp2, s2, c2)
        }));
        Ok(ImpairedLink {
            stop,
            threads,
            counters,
        })
    }
}

impl Drop for ImpairedLink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
