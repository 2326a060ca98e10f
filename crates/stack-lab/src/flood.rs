//! The SYN flood: spoofed SYNs from a large pool of lab sources at `wirespeed serve http`,
//! once on our stack (`--stack xdp`) and once on Linux's (`--stack kernel`, the same
//! application), each in a lab of its own (docs/TCPIP.md, "Memory under attack"). Measured:
//! how many of a good client's requests, each on a new connection, are served during the
//! flood, and the server's resident memory idle, at its peak during the flood, and a while
//! after it.
//!
//! ```text
//!  ws-cf<T>p<s> [p0 198.18.0.1/24] <-> [d0] ws-cf<T>d<s>   serve http, 198.18.0.2:8080
//!   flood: xdpgen live frames out of p0 (BPF_PROG_RUN), sources 198.18.1.0-198.19.255.250
//!   good client: Linux TCP from 198.18.0.1, one connection per request
//!
//!  with --ipv6 (FloodOptions::ipv6): the same, and fd00::1/64 on p0, fd00::2/64 on d0
//!  (ours: a second --ip and --gateway fd00::1; Linux: its address and a default route)
//!   flood: 74-byte SYNs, sources fd00:1::1:1-fd00:1::2:ffff, to [fd00::2]:8080
//!   good client: Linux TCP from fd00::1 to [fd00::2]:8080
//! ```
//!
//! The sources are off-link for both servers (their replies go to the MAC of 198.18.0.1, or
//! of fd00::1, where the peer kernel, not forwarding, drops them): no address is anybody's,
//! so nothing answers a SYN-ACK, as in a spoofed flood. d0 has GRO on, so that the veth
//! delivers the frames the generator transmits with XDP_TX (it does only into a peer that
//! runs NAPI). The IPv6 addresses skip duplicate address detection (`nodad`) on the kernel's
//! side, so that they serve at once.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use wirespeed_lab::Netns;
use wirespeed_xdpgen::Gen;

use crate::craft::{eth, Ip4, Tcp, DUT_MAC, ETH_IPV4, HTTP_PORT, PEER_MAC, PROTO_TCP};
use crate::serve::ServeProcess;
use crate::twin::{lab, pair};
use crate::Error;
use wirespeed_wire::checksum;

/// The server's stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stack {
    /// Ours over AF_XDP.
    Ours,
    /// Linux's (the same server on kernel sockets).
    Linux,
}

impl Stack {
    pub fn name(self) -> &'static str {
        match self {
            Stack::Ours => "ours (--stack xdp)",
            Stack::Linux => "Linux (--stack kernel)",
        }
    }
}

/// One flood's settings.
#[derive(Debug, Clone)]
pub struct FloodOptions {
    /// The `wirespeed` binary that serves.
    pub wirespeed: PathBuf,
    /// SYNs to send.
    pub syns: u64,
    /// SYNs per second offered (paced in 20 runs a second).
    pub rate: u64,
    /// How long after the flood the memory is read again.
    pub after: Duration,
    /// The server's one CPU.
    pub serve_cpu: usize,
    /// `serve --backlog` (None: its default).
    pub backlog: Option<u32>,
    /// Flood and serve over IPv6 (fd00::2) instead of IPv4 (the server has both).
    pub ipv6: bool,
}

/// What one flood measured.
#[derive(Debug, Clone, Serialize)]
pub struct FloodFigures {
    pub stack: Stack,
    /// The flood and the good client were IPv6.
    pub ipv6: bool,
    /// SYNs handed to the veth, the frames d0 received meanwhile (its rx_packets: the
    /// flood's and the good client's), and the distinct sources among the SYNs.
    pub syns_sent: u64,
    pub d0_received: u64,
    pub sources: u64,
    pub flood_seconds: f64,
    /// A good client's requests during the flood, each on a new connection, and how many got
    /// their response within `GOOD_TIMEOUT`.
    pub good_tried: u64,
    pub good_served: u64,
    /// The server's resident set (VmRSS, KiB): idle, the peak sampled every 100 ms during
    /// the flood, and after `after`.
    pub rss_idle_kib: u64,
    pub rss_peak_kib: u64,
    pub rss_after_kib: u64,
    pub after_seconds: f64,
    /// A good request after the wait succeeded too.
    pub served_after: bool,
}

/// A good request's deadline: Linux retries a lost SYN after 1 s, so a SYN lost to the
/// flood costs a second, not the request.
const GOOD_TIMEOUT: Duration = Duration::from_secs(3);
/// Source /24s: 198.18.1.0 to 198.19.255.0 (198.18.0.0/24 is the link).
const SOURCE_NETS: usize = 511;
/// Sources per /24 the generator draws (its `distinct_sources`: last octet 1..=250).
const SOURCES_PER_NET: u64 = 250;
const DUT_ADDR: [u8; 4] = [198, 18, 0, 2];
/// IPv6: the DUT, the peer (the DUTs' router), both on fd00::/64.
const DUT_ADDR6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
const PEER_ADDR6: &str = "fd00::1";
const ETH_IPV6: u16 = 0x86dd;
/// IPv6 source blocks: fd00:1::1:0/112 and fd00:1::2:0/112 (off-link: the link is
/// fd00::/64). Two, so that with the generator's 65,535 sources per block (its
/// `distinct_sources`: low 16 bits 1..=65535) there are 131,070; 65,535 being odd, the two
/// take turns through all of them.
const SOURCE_BLOCKS6: usize = 2;
const SOURCES_PER_BLOCK6: u64 = 65_535;

/// Floods one server and measures it; `progress` gets a line per phase.
pub fn flood(
    stack: Stack,
    o: &FloodOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<FloodFigures, Error> {
    let twin = match stack {
        Stack::Ours => 'f',
        Stack::Linux => 'g',
    };
    let p = pair(std::process::id() % 100_000, twin)?;
    p.peer
        .ip(&["addr", "add", "198.18.0.1/24", "dev", "p0"])
        .map_err(lab)?;
    if o.ipv6 {
        let cidr = format!("{PEER_ADDR6}/64");
        p.peer
            .ip(&["-6", "addr", "add", &cidr, "dev", "p0", "nodad"])
            .map_err(lab)?;
    }
    p.dut
        .exec("ethtool", &["-K", "d0", "gro", "on"])
        .map_err(lab)?;
    let server = start_server(stack, &p.dut, o)?;
    let target = if o.ipv6 {
        SocketAddr::from((DUT_ADDR6, HTTP_PORT))
    } else {
        SocketAddr::from((DUT_ADDR, HTTP_PORT))
    };
    let family = if o.ipv6 { "IPv6" } else { "IPv4" };
    progress(&format!("{}: listening; idle", stack.name()));
    let warm = good_requests(&p.peer, target, 20, Duration::from_millis(20), None)?;
    if warm.1 == 0 {
        return Err(Error::Preflight(format!(
            "{}: no good request served before the flood: {}",
            stack.name(),
            server.said().trim()
        )));
    }
    std::thread::sleep(Duration::from_secs(1));
    let rss_idle_kib = rss_kib(server.pid())?;

    progress(&format!(
        "{}: flooding {} {family} SYNs at {}/s",
        stack.name(),
        o.syns,
        o.rate
    ));
    let rx0 = rx_packets(&p.dut)?;
    let flooding = Arc::new(AtomicBool::new(true));
    let (sent, (good_tried, good_served), rss_peak_kib, flood_seconds) = std::thread::scope(|s| {
        let t0 = Instant::now();
        let gen = s.spawn(|| {
            let r = send_syns(&p.peer, o.syns, o.rate, o.ipv6);
            flooding.store(false, Ordering::Relaxed);
            r
        });
        let good = s.spawn(|| {
            good_requests(
                &p.peer,
                target,
                u64::MAX,
                Duration::from_millis(50),
                Some(flooding.clone()),
            )
        });
        let mut peak = rss_idle_kib;
        while flooding.load(Ordering::Relaxed) {
            peak = peak.max(rss_kib(server.pid()).unwrap_or(0));
            std::thread::sleep(Duration::from_millis(100));
        }
        let secs = t0.elapsed().as_secs_f64();
        let sent = gen.join().expect("generator thread");
        let good = good.join().expect("good client thread");
        Ok::<_, Error>((sent?, good?, peak, secs))
    })?;

    let d0_received = rx_packets(&p.dut)?.saturating_sub(rx0);
    progress(&format!(
        "{}: flood over ({sent} SYNs in {flood_seconds:.1} s, {d0_received} frames received, {good_served}/{good_tried} good); waiting {} s",
        stack.name(),
        o.after.as_secs()
    ));
    let t_after = Instant::now();
    std::thread::sleep(o.after);
    let rss_after_kib = rss_kib(server.pid())?;
    let after_seconds = t_after.elapsed().as_secs_f64();
    let (_, served) = good_requests(&p.peer, target, 5, Duration::from_millis(20), None)?;
    if let Some(summary) = server.stop().lines().find(|l| l.contains("syn cookies")) {
        progress(&format!("{}: {}", stack.name(), summary.trim()));
    }
    let pool = if o.ipv6 {
        SOURCE_BLOCKS6 as u64 * SOURCES_PER_BLOCK6
    } else {
        SOURCE_NETS as u64 * SOURCES_PER_NET
    };
    Ok(FloodFigures {
        stack,
        ipv6: o.ipv6,
        syns_sent: sent,
        d0_received,
        sources: sent.min(pool),
        flood_seconds,
        good_tried,
        good_served,
        rss_idle_kib,
        rss_peak_kib,
        rss_after_kib,
        after_seconds,
        served_after: served == 5,
    })
}

fn start_server(stack: Stack, dut: &Netns, o: &FloodOptions) -> Result<ServeProcess, Error> {
    let cpu = o.serve_cpu.to_string();
    // Ours answers on every address it has, the listening port on each; Linux's socket on
    // [::] takes both families (net.ipv6.bindv6only is 0 in a new namespace).
    let listen = match (stack, o.ipv6) {
        (Stack::Linux, true) => format!("[::]:{HTTP_PORT}"),
        _ => format!("198.18.0.2:{HTTP_PORT}"),
    };
    let backlog = o.backlog.map(|b| b.to_string());
    let mut args = vec!["serve", "http", "--cpus", &cpu, "--listen", &listen];
    if let Some(b) = &backlog {
        args.extend(["--backlog", b]);
    }
    let (dut6, gateway6) = (format!("{DUT_ADDR6}/64"), PEER_ADDR6.to_string());
    match stack {
        Stack::Ours => {
            args.extend([
                "--stack",
                "xdp",
                "--iface",
                "d0",
                "--ip",
                "198.18.0.2/24",
                "--gateway",
                "198.18.0.1",
            ]);
            if o.ipv6 {
                args.extend(["--ip", &dut6, "--gateway", &gateway6]);
            }
        }
        Stack::Linux => {
            dut.ip(&["addr", "add", "198.18.0.2/24", "dev", "d0"])
                .map_err(lab)?;
            dut.ip(&["route", "add", "default", "via", "198.18.0.1"])
                .map_err(lab)?;
            if o.ipv6 {
                dut.ip(&["-6", "addr", "add", &dut6, "dev", "d0", "nodad"])
                    .map_err(lab)?;
                dut.ip(&["-6", "route", "add", "default", "via", &gateway6])
                    .map_err(lab)?;
            }
            args.extend(["--stack", "kernel"]);
        }
    }
    ServeProcess::start(dut, &o.wirespeed, &args)
        .map_err(|e| Error::Setup(format!("{}: {e}", stack.name())))
}

/// The flood's frame table: a SYN from each source /24, last octet and source port 0 (the
/// generator fills them in, checksums adjusted).
fn syn_frames() -> Vec<Vec<u8>> {
    (0..SOURCE_NETS)
        .map(|i| {
            let net = 256 + i as u32; // 198.18.1.0 onwards
            let src = [198, 18 + (net >> 8) as u8, net as u8, 0];
            let tcp = Tcp {
                dport: HTTP_PORT,
                seq: 0x5eed_0000 + i as u32,
                flags: 0x02,
                window: 64240,
                ..Tcp::default()
            };
            let mut ip = Ip4::new(src, DUT_ADDR, PROTO_TCP);
            ip.id = 0;
            let f = eth(
                DUT_MAC,
                PEER_MAC,
                ETH_IPV4,
                &ip.packet(&tcp.segment(src, DUT_ADDR)),
            );
            let mut frame = vec![0u8; Gen::FRAME_LEN];
            frame[..f.len()].copy_from_slice(&f);
            frame
        })
        .collect()
}

/// The IPv6 flood's frame table: a 74-byte SYN from each source block (fd00:1::1:0,
/// fd00:1::2:0), low 16 bits and source port 0 (the generator fills them in, the TCP
/// checksum adjusted).
fn syn_frames6() -> Vec<Vec<u8>> {
    (0..SOURCE_BLOCKS6)
        .map(|i| {
            let src = Ipv6Addr::new(0xfd00, 1, 0, 0, 0, 0, 1 + i as u16, 0);
            let tcp = Tcp {
                dport: HTTP_PORT,
                seq: 0x5eed_0000 + i as u32,
                flags: 0x02,
                window: 64240,
                ..Tcp::default()
            };
            let mut seg = tcp.segment([0; 4], [0; 4]);
            seg[16..18].fill(0);
            let c = checksum::transport(src.octets(), DUT_ADDR6.octets(), PROTO_TCP, &seg);
            seg[16..18].copy_from_slice(&c.to_be_bytes());
            let mut ip = vec![0x60, 0, 0, 0];
            ip.extend_from_slice(&(seg.len() as u16).to_be_bytes());
            ip.extend_from_slice(&[PROTO_TCP, 64]);
            ip.extend_from_slice(&src.octets());
            ip.extend_from_slice(&DUT_ADDR6.octets());
            ip.extend_from_slice(&seg);
            eth(DUT_MAC, PEER_MAC, ETH_IPV6, &ip)
        })
        .collect()
}

/// Sends `syns` SYNs (IPv6 ones with `ipv6`) out of the peer's p0, paced at `rate` a second;
/// returns how many were handed to the veth. Bounded: three times the time the rate needs.
fn send_syns(peer: &Netns, syns: u64, rate: u64, ipv6: bool) -> Result<u64, Error> {
    peer.run(move || {
        // The generator's counter moves one source per SYN: TCP's checksum at byte 50 over
        // IPv4, 70 over IPv6.
        let (frames, l4_checksum) = if ipv6 {
            (syn_frames6(), 70)
        } else {
            (syn_frames(), 50)
        };
        let gen =
            Gen::load_frame(&frames[0]).map_err(|e| Error::Setup(format!("generator: {e}")))?;
        let setup = |r: wirespeed_xdpgen::Result<()>| {
            r.map_err(|e| Error::Setup(format!("generator: {e}")))
        };
        setup(gen.set_frame_table(&frames))?;
        setup(gen.distinct_sources(Some(l4_checksum)))?;
        let ifindex =
            wirespeed_sys::packet::if_index("p0").map_err(|e| Error::Setup(e.to_string()))?;
        gen.blast_paced(&frames[0], ifindex, syns, rate)
            .map_err(|e| Error::Io(format!("generator: {e}")))
    })
    .map_err(lab)?
}

/// Up to `count` good requests from the peer, one connection each, `gap` apart, while
/// `while_set` (if given) holds: (tried, served).
fn good_requests(
    peer: &Netns,
    target: SocketAddr,
    count: u64,
    gap: Duration,
    while_set: Option<Arc<AtomicBool>>,
) -> Result<(u64, u64), Error> {
    peer.run(move || {
        let (mut tried, mut served) = (0u64, 0u64);
        while tried < count && while_set.as_ref().is_none_or(|f| f.load(Ordering::Relaxed)) {
            tried += 1;
            served += good_request(target) as u64;
            std::thread::sleep(gap);
        }
        (tried, served)
    })
    .map_err(lab)
}

/// One request on a new connection: true when a complete 200 response came back within
/// `GOOD_TIMEOUT`.
fn good_request(target: SocketAddr) -> bool {
    let deadline = Instant::now() + GOOD_TIMEOUT;
    let Ok(mut s) = TcpStream::connect_timeout(&target, GOOD_TIMEOUT) else {
        return false;
    };
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() || s.set_read_timeout(Some(left)).is_err() {
        return false;
    }
    let host = match target.ip() {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => format!("[{a}]"),
    };
    let request = format!("GET /plaintext HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    if s.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
        if response_complete(&got) {
            return got.starts_with(b"HTTP/1.1 200");
        }
    }
    false
}

/// Headers ended and, where a Content-Length says how much, the body is all there.
fn response_complete(got: &[u8]) -> bool {
    let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    got.len() >= end + 4 + len
}

/// d0's received frames (`ip netns exec` mounts the namespace's own sysfs).
fn rx_packets(dut: &Netns) -> Result<u64, Error> {
    let v = dut
        .exec("cat", &["/sys/class/net/d0/statistics/rx_packets"])
        .map_err(lab)?;
    v.trim()
        .parse()
        .map_err(|_| Error::Io(format!("d0 rx_packets: `{}`", v.trim())))
}

/// The resident set of process `pid`, KiB (VmRSS).
fn rss_kib(pid: u32) -> Result<u64, Error> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| Error::Io(format!("/proc/{pid}/status: {e}")))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| Error::Io(format!("/proc/{pid}/status: no VmRSS")))
}
