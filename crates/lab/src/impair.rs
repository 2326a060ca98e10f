//! A seeded L2 impairment link: the lab's stand-in for `tc netem`, which this kernel lacks
//! (CONFIG_NET_SCH_NETEM is off).
//!
//! A thread inside a middle namespace holds an AF_PACKET socket on each of two interfaces and
//! forwards every frame from one to the other, dropping, duplicating or reordering (holding a
//! frame back until the next one has passed) with the configured probabilities. The two outer
//! namespaces see one Ethernet segment. Frames are forwarded as they are, so the sending
//! interfaces must not use TSO/GSO (`ethtool -K IF tx off tso off gso off`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use wirespeed_sys::packet::PacketSocket;

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

fn packet_socket(ifname: &str) -> Result<PacketSocket> {
    PacketSocket::bind(ifname).map_err(|source| Error::Io {
        what: format!("AF_PACKET socket on {ifname}"),
        err: source,
    })
}

/// How long a receive waits, so the thread notices `stop` and releases a held frame.
const RECV_TIMEOUT: Duration = Duration::from_millis(100);

struct Rng(u64);
impl Rng {
    fn pct(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % 1_000_000) as f64 / 10_000.0
    }
}

fn forward(
    from: PacketSocket,
    to: PacketSocket,
    imp: Impairment,
    stop: Arc<AtomicBool>,
    c: Arc<Counters>,
) {
    let mut rng = Rng(imp.seed | 1);
    let mut buf = vec![0u8; 65536];
    let mut held: Option<Vec<u8>> = None;
    // A frame the kernel would not take is lost, as on a real link.
    let send = |frame: &[u8]| drop(to.send(frame));
    while !stop.load(Ordering::Relaxed) {
        let Ok(Some(got)) = from.recv(&mut buf, RECV_TIMEOUT) else {
            // Timeout: release a held frame so a quiet link does not keep it forever.
            if let Some(f) = held.take() {
                send(&f);
            }
            continue;
        };
        if got.kind.is_outgoing() {
            continue; // our own transmissions on this interface
        }
        let frame = &buf[..got.len];
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
