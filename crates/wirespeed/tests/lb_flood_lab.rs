//! Floods at the load balancer with good clients alongside, one lab each: SYN floods at a
//! full-NAT VIP with one local address, a DR and a tunnel VIP (docs/LB.md, "Half-open
//! connections"), and a flood of new UDP flows at the same full-NAT VIP's UDP port ("UDP
//! flows").
//!
//! ```text
//!  c0 eth0 ──> lb eth0   spoofed SYNs to TCP VIP:6379 (or datagrams to UDP VIP:6379) from
//!                        103,000 lab sources (198.18.32.0 to 198.19.255.250, skipping the
//!                        lab's own subnets), sent out of c0's link by the in-kernel generator
//!                        at WS_LB_FLOOD_RATE a second
//!  c1 ──> VIP:6379       8 TCP connections held open (keep-alive), asked every half second;
//!                        and new ones one after another, during the flood and after it;
//!                        under the UDP flood, new UDP flows too; the backends echo every
//!                        datagram, the flood's too
//! ```
//!
//! Asserted: at least 99% of the new connections tried during the flood succeed (connect and
//! an answer within 3 s each), every one tried in the 5 s after it succeeds, and every held
//! connection answers throughout (under the UDP flood, held idle and asked after it). Under
//! the UDP flood, every one of 20 new UDP flows right after it is answered: the ports of the
//! flood's flows, each answered once, go to new flows (docs/LB.md, "UDP flows"). The size: WS_LB_FLOOD_SYNS SYNs or WS_LB_FLOOD_DATAGRAMS
//! datagrams (default 300,000 each) at WS_LB_FLOOD_RATE (default 100,000 a second);
//! docs/LB.md's figures are from 2,000,000. Each run prints its figures (`lbflood <mode>:
//! ...`).
//!
//! Run: flock /tmp/ws-priv.lock nice -n 5 cargo test --profile ci -p wirespeed --features
//! wirespeed/dpdk,wirespeed-net/dpdk,wirespeed-nic/dpdk --test lb_flood_lab -- --test-threads=1
//! --nocapture

#[allow(dead_code)]
mod lb_common;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lb_common::clients::{self, Held};
use lb_common::{
    configure, lb_rng, mode_lab, reals_for, vip, LbLab, ALL, BACKENDS, LADDR4, REDIS, VIP4,
};
use wirespeed_testkit::craft::{eth, udp, Ip4, Tcp, ETH_IPV4};
use wirespeed_xdpgen::Gen;

/// The source /24s of the flood: none of the lab's own (clients 198.18.10-11, reals
/// 198.18.100-103, VIP 198.18.200, tunnel sources 198.18.240, local address 198.18.250).
fn source_nets() -> Vec<[u8; 3]> {
    let low = (32u8..100).chain(104..192).map(|c| [198, 18, c]);
    let high = (0u8..=255).map(|c| [198, 19, c]);
    low.chain(high).collect()
}

/// What a flood sends: SYNs, or datagrams of new UDP flows.
#[derive(Clone, Copy, PartialEq)]
enum Flood {
    Syn,
    Udp,
}

impl Flood {
    fn what(self) -> &'static str {
        match self {
            Flood::Syn => "SYNs",
            Flood::Udp => "datagrams",
        }
    }

    /// Where the generator finds the L4 checksum it adjusts (Gen::distinct_sources).
    fn l4_checksum_offset(self) -> u32 {
        match self {
            Flood::Syn => 50,
            Flood::Udp => 40,
        }
    }
}

/// The generator's frame table: a SYN or a datagram from each source /24 to the VIP, last
/// octet and source port 0 (the generator fills them in, checksums adjusted:
/// Gen::distinct_sources).
fn flood_frames(kind: Flood, dst_mac: [u8; 6], src_mac: [u8; 6]) -> Vec<Vec<u8>> {
    source_nets()
        .into_iter()
        .enumerate()
        .map(|(i, net)| {
            let src = [net[0], net[1], net[2], 0];
            let dst = VIP4.octets();
            let (proto, l4) = match kind {
                Flood::Syn => {
                    let tcp = Tcp {
                        dport: REDIS,
                        seq: 0x5eed_0000 + i as u32,
                        flags: 0x02,
                        window: 64240,
                        ..Tcp::default()
                    };
                    (6, tcp.segment(src, dst))
                }
                Flood::Udp => (17, udp(0, REDIS, b"flood", src, dst)),
            };
            let mut ip = Ip4::new(src, dst, proto);
            ip.id = 0;
            let f = eth(dst_mac, src_mac, ETH_IPV4, &ip.packet(&l4));
            let mut frame = vec![0u8; Gen::FRAME_LEN];
            frame[..f.len()].copy_from_slice(&f);
            frame
        })
        .collect()
}

fn mac_of(lab: &LbLab, role: &str, ifname: &str) -> [u8; 6] {
    let text = lab.exec(role, "cat", &[&format!("/sys/class/net/{ifname}/address")]);
    let b: Vec<u8> = text
        .trim()
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).expect("a MAC"))
        .collect();
    b.try_into().expect("6 bytes")
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What the good clients saw.
#[derive(Default, Debug)]
struct Tally {
    tried: u64,
    served: u64,
    failures: Vec<String>,
}

impl Tally {
    fn add(&mut self, r: Result<usize, String>) {
        self.tried += 1;
        match r {
            Ok(_) => self.served += 1,
            Err(e) if self.failures.len() < 5 => self.failures.push(e),
            Err(_) => {}
        }
    }
}

/// New connections from `ns` one after another, 20 ms apart, while `go` holds or until
/// `until`; with `held`, the held connections are asked every half second too. Returns the
/// new connections' tally and the held connections' failed answers.
fn good_clients(
    ns: &str,
    target: SocketAddr,
    go: Option<Arc<AtomicBool>>,
    until: Option<Instant>,
    mut held: Vec<Held>,
) -> (Tally, Vec<String>, Vec<Held>) {
    wirespeed_sys::netns::in_netns(ns, move || {
        let mut t = Tally::default();
        let mut held_failed = Vec::new();
        let mut next_ask = Instant::now();
        loop {
            let going = go.as_ref().is_none_or(|g| g.load(Ordering::Relaxed))
                && until.is_none_or(|u| Instant::now() < u);
            if !going {
                break;
            }
            t.add(clients::probe(target, None));
            if Instant::now() >= next_ask {
                for (i, h) in held.iter_mut().enumerate() {
                    if let Err(e) = clients::ping(&mut h.stream) {
                        held_failed.push(format!("held {i}: {e}"));
                    }
                }
                next_ask = Instant::now() + Duration::from_millis(500);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        (t, held_failed, held)
    })
    .expect("setns")
}

/// A UDP echo on every backend at port 6379, answering every datagram, the flood's too (as a
/// DNS server answers spoofed queries), until dropped.
struct UdpEchoes {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<std::io::Result<()>>>,
}

impl Drop for UdpEchoes {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn udp_echoes(lab: &LbLab) -> UdpEchoes {
    let stop = Arc::new(AtomicBool::new(false));
    let threads = (0..BACKENDS)
        .map(|j| {
            let stop = stop.clone();
            wirespeed_sys::netns::spawn_in(&lab.ns_name(&format!("b{j}")), move || {
                let sock = UdpSocket::bind(("0.0.0.0", REDIS)).expect("bind the UDP echo");
                sock.set_read_timeout(Some(Duration::from_millis(100)))
                    .unwrap();
                let mut buf = [0u8; 2048];
                while !stop.load(Ordering::Relaxed) {
                    if let Ok((n, from)) = sock.recv_from(&mut buf) {
                        let _ = sock.send_to(&buf[..n], from);
                    }
                }
            })
            .expect("setns")
        })
        .collect();
    UdpEchoes { stop, threads }
}

/// Up to `flows` new UDP flows from `ns` to `target`, `gap` apart while `go` holds, each from
/// a port of its own and asked up to 3 times, 500 ms apart, as a DNS client asks: served when
/// the echo comes back.
fn udp_clients(
    ns: &str,
    target: SocketAddr,
    go: Option<Arc<AtomicBool>>,
    flows: u32,
    gap: Duration,
) -> Tally {
    wirespeed_sys::netns::in_netns(ns, move || {
        let mut t = Tally::default();
        for i in 0..flows {
            if go.as_ref().is_some_and(|g| !g.load(Ordering::Relaxed)) {
                break;
            }
            std::thread::sleep(gap);
            let ask = || -> Result<usize, String> {
                let sock = UdpSocket::bind("0.0.0.0:0").map_err(|e| e.to_string())?;
                sock.connect(target).map_err(|e| e.to_string())?;
                sock.set_read_timeout(Some(Duration::from_millis(500)))
                    .map_err(|e| e.to_string())?;
                let req = format!("ask {i}");
                let mut buf = [0u8; 64];
                for _ in 0..3 {
                    sock.send(req.as_bytes()).map_err(|e| e.to_string())?;
                    if let Ok(n) = sock.recv(&mut buf) {
                        if &buf[..n] == req.as_bytes() {
                            return Ok(n);
                        }
                    }
                }
                Err(format!("flow {i}: no answer to 3 tries"))
            };
            t.add(ask());
        }
        t
    })
    .expect("setns")
}

/// The UDP service beside the TCP one: VIP:6379 over UDP to every backend in `mode`, where
/// udp_echoes() answers.
fn configure_udp(lab: &LbLab, mode: &str) {
    let v = vip(VIP4, REDIS).to_string();
    lab.lb_ok(&["-A", "-u", &v, "-s", "mh"]);
    if mode == "-b" {
        lab.lb_ok(&["--add-laddr", "-z", &LADDR4.to_string(), "-u", &v]);
    }
    for (r, m, w) in reals_for(mode, false, REDIS, &[1; BACKENDS]) {
        lab.lb_ok(&[
            "-a",
            "-u",
            &v,
            "-r",
            &r.to_string(),
            m,
            "-w",
            &w.to_string(),
        ]);
    }
}

fn flood(tag: &str, mode: &str, kind: Flood) {
    let syns = match kind {
        Flood::Syn => env_u64("WS_LB_FLOOD_SYNS", 300_000),
        Flood::Udp => env_u64("WS_LB_FLOOD_DATAGRAMS", 300_000),
    };
    let rate = env_u64("WS_LB_FLOOD_RATE", 100_000);
    let sources = source_nets().len() as u64 * 250;
    let mut rng = lb_rng(tag);
    let (lab, _pids) = mode_lab(tag, mode, &mut rng);
    let service = vip(VIP4, REDIS);
    configure(&lab, mode, service, "wrr", &[], &[1; BACKENDS]);
    let mut echoes = None;
    if kind == Flood::Udp {
        configure_udp(&lab, mode);
        echoes = Some(udp_echoes(&lab));
        let before = udp_clients(&lab.ns_name("c1"), service, None, 4, Duration::ZERO);
        assert_eq!(
            before.served, 4,
            "{tag}: UDP flows before the flood: {before:?}"
        );
    }
    clients::warm_up(&lab, "c1", service, &ALL);
    let held = clients::hold(&lab.ns_name("c1"), service, 8);

    let frames = flood_frames(kind, mac_of(&lab, "lb", "eth0"), mac_of(&lab, "c0", "eth0"));
    let l4_checksum_offset = kind.l4_checksum_offset();
    let go = Arc::new(AtomicBool::new(true));
    let c1 = lab.ns_name("c1");
    // An LRU evicts what was used least recently, so under the UDP flood the held
    // connections stay idle, as the ones a flood would take, and are asked after it.
    let (asked_during, mut idle) = match kind {
        Flood::Syn => (held, Vec::new()),
        Flood::Udp => (Vec::new(), held),
    };
    let started = Instant::now();
    let (sent, (during, held_failed, mut held), udp_during) = std::thread::scope(|s| {
        let good = {
            let (c1, go) = (c1.clone(), go.clone());
            s.spawn(move || good_clients(&c1, service, Some(go), None, asked_during))
        };
        let udp_good = (kind == Flood::Udp).then(|| {
            let (c1, go) = (c1.clone(), go.clone());
            s.spawn(move || udp_clients(&c1, service, Some(go), 1000, Duration::from_millis(50)))
        });
        let sent = lab
            .ns("c0")
            .run(move || -> Result<u64, String> {
                let gen = Gen::load_frame(&frames[0]).map_err(|e| e.to_string())?;
                gen.set_frame_table(&frames).map_err(|e| e.to_string())?;
                gen.distinct_sources(Some(l4_checksum_offset))
                    .map_err(|e| e.to_string())?;
                let ifindex = wirespeed_sys::packet::if_index("eth0").map_err(|e| e.to_string())?;
                gen.blast_paced(&frames[0], ifindex, syns, rate)
                    .map_err(|e| e.to_string())
            })
            .expect("setns");
        go.store(false, Ordering::Relaxed);
        let udp_during = udp_good.map(|h| h.join().expect("UDP clients"));
        (sent, good.join().expect("good clients"), udp_during)
    });
    let flood_s = started.elapsed().as_secs_f64();
    let sent = sent.unwrap_or_else(|e| panic!("{tag}: the generator: {e}"));
    // New UDP flows right after the flood: the ports its unanswered flows hold are taken
    // once idle a second (docs/LB.md, "UDP flows"), not after the UDP idle time.
    let udp_after = (kind == Flood::Udp)
        .then(|| udp_clients(&c1, service, None, 20, Duration::from_millis(20)));
    drop(echoes);
    held.append(&mut idle);
    let after_until = Instant::now() + Duration::from_secs(5);
    let (after, held_failed_after, held) =
        good_clients(&c1, service, None, Some(after_until), held);
    let listing = lab.lb_ok(&["-L", "-n", "--stats"]);
    let reasons = lb_common::reasons();
    let pct = |t: &Tally| 100.0 * t.served as f64 / t.tried.max(1) as f64;
    println!(
        "lbflood {mode}: {sent} {} from {sources} sources in {flood_s:.1} s ({:.0}/s); new \
         connections during: {}/{} ({:.2}%), in the 5 s after: {}/{} ({:.2}%); held: {} of {} \
         answered throughout",
        kind.what(),
        sent as f64 / flood_s,
        during.served,
        during.tried,
        pct(&during),
        after.served,
        after.tried,
        pct(&after),
        held.len() - held_failed.len().min(held.len()),
        held.len()
    );
    if let (Some(during), Some(after)) = (&udp_during, &udp_after) {
        println!(
            "lbflood {mode}: new UDP flows during: {}/{} ({:.2}%), right after: {}/{}",
            during.served,
            during.tried,
            pct(during),
            after.served,
            after.tried
        );
    }
    println!("lbflood {mode}: data path reasons: {reasons}");
    assert!(
        sent >= syns * 9 / 10,
        "{tag}: only {sent} of {syns} {} sent",
        kind.what()
    );
    assert!(
        during.tried >= 10 && during.served * 100 >= during.tried * 99,
        "{tag}: {}/{} new connections during the flood; first failures {:?}; {listing}",
        during.served,
        during.tried,
        during.failures
    );
    assert!(
        after.tried > 0 && after.served == after.tried,
        "{tag}: {}/{} new connections after the flood; first failures {:?}",
        after.served,
        after.tried,
        after.failures
    );
    if let Some(after) = &udp_after {
        assert!(
            after.served == after.tried,
            "{tag}: {}/{} new UDP flows right after the flood; first failures {:?}",
            after.served,
            after.tried,
            after.failures
        );
    }
    let lost: Vec<&String> = held_failed.iter().chain(&held_failed_after).collect();
    assert!(lost.is_empty(), "{tag}: held connections lost: {lost:?}");
}

#[test]
fn a_syn_flood_at_a_full_nat_vip_with_one_local_address_spares_good_clients() {
    flood("lbflb", "-b", Flood::Syn);
}

#[test]
fn a_syn_flood_at_a_dr_vip_spares_good_clients() {
    flood("lbflg", "-g", Flood::Syn);
}

#[test]
fn a_syn_flood_at_a_tunnel_vip_spares_good_clients() {
    flood("lbfli", "-i", Flood::Syn);
}

#[test]
fn a_udp_flood_at_a_full_nat_vip_spares_its_tcp_connections() {
    flood("lbflu", "-b", Flood::Udp);
}
