//! The clients: a small Rust redis client that opens connections to the VIP from a client
//! namespace and learns which backend answered (each redis binds its own RIP, and `CONFIG GET
//! bind` names it), the real tools (redis-benchmark, curl, `wirespeed bench`), and a reader
//! for tcpdump's captures.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use socket2::{Domain, SockAddr, Socket, Type};

use super::{bin, output, rip4, wait_for, LbLab, BACKENDS};

const IO_TIMEOUT: Duration = Duration::from_secs(3);

/// Which backend a `CONFIG GET bind` reply came from: the one whose RIP is among the bound
/// addresses (whole words, so 198.18.10.1 never matches 198.18.100.1).
pub fn backend_of_reply(reply: &str) -> Option<usize> {
    let words: Vec<&str> = reply.split_whitespace().collect();
    (0..BACKENDS).find(|&j| words.contains(&rip4(j).to_string().as_str()))
}

/// Sends `CONFIG GET bind` and returns the backend that answered.
pub fn ask(stream: &mut TcpStream) -> Result<usize, String> {
    stream
        .write_all(b"CONFIG GET bind\r\n")
        .map_err(|e| format!("send: {e}"))?;
    // *2 $4 bind $N value: five CRLFs in all.
    let mut reply = Vec::new();
    let mut buf = [0u8; 512];
    while reply.windows(2).filter(|w| w == b"\r\n").count() < 5 {
        let n = stream.read(&mut buf).map_err(|e| format!("receive: {e}"))?;
        if n == 0 {
            return Err(format!(
                "closed after {:?}",
                String::from_utf8_lossy(&reply)
            ));
        }
        reply.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&reply);
    backend_of_reply(&text).ok_or_else(|| format!("no backend address in {text:?}"))
}

/// PING -> +PONG on an open connection.
pub fn ping(stream: &mut TcpStream) -> Result<(), String> {
    stream
        .write_all(b"PING\r\n")
        .map_err(|e| format!("send: {e}"))?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 64];
    while !reply.ends_with(b"\r\n") {
        let n = stream.read(&mut buf).map_err(|e| format!("receive: {e}"))?;
        if n == 0 {
            return Err("closed".into());
        }
        reply.extend_from_slice(&buf[..n]);
    }
    if reply == b"+PONG\r\n" {
        Ok(())
    } else {
        Err(format!("answer {:?}", String::from_utf8_lossy(&reply)))
    }
}

/// Opens a connection to `target` (from `src` if given), bounded by the I/O timeout. The
/// socket closes with a reset (SO_LINGER 0), so that no TIME_WAIT holds its port and a fixed
/// source port can be used again at once.
pub fn connect(target: SocketAddr, src: Option<SocketAddr>) -> Result<TcpStream, String> {
    let s = Socket::new(Domain::for_address(target), Type::STREAM, None)
        .map_err(|e| format!("socket: {e}"))?;
    s.set_linger(Some(Duration::ZERO))
        .map_err(|e| format!("linger: {e}"))?;
    if let Some(src) = src {
        s.set_reuse_address(true)
            .map_err(|e| format!("reuseaddr: {e}"))?;
        s.bind(&SockAddr::from(src))
            .map_err(|e| format!("bind {src}: {e}"))?;
    }
    s.connect_timeout(&SockAddr::from(target), IO_TIMEOUT)
        .map_err(|e| format!("connect: {e}"))?;
    let t: TcpStream = s.into();
    t.set_read_timeout(Some(IO_TIMEOUT)).ok();
    t.set_write_timeout(Some(IO_TIMEOUT)).ok();
    t.set_nodelay(true).ok();
    Ok(t)
}

/// One new connection: connect, ask which backend, close.
pub fn probe(target: SocketAddr, src: Option<SocketAddr>) -> Result<usize, String> {
    let mut s = connect(target, src)?;
    let from = s
        .local_addr()
        .map_or_else(|_| "?".into(), |a| a.to_string());
    ask(&mut s).map_err(|e| format!("{e} (from {from})"))
}

/// The results until the fifth failure: a data path that loses connections makes each of
/// them wait out a timeout, and five say enough.
fn until_failures(
    results: impl Iterator<Item = Result<usize, String>>,
) -> Vec<Result<usize, String>> {
    let mut failed = 0;
    results
        .take_while(|r| {
            let go = failed < 5;
            failed += usize::from(r.is_err());
            go
        })
        .collect()
}

/// `n` new connections to `target` from namespace `ns` on `threads` threads, each from a
/// port the kernel picks; the backend of each, or why it failed.
pub fn probes(
    ns: &str,
    target: SocketAddr,
    n: usize,
    threads: usize,
) -> Vec<Result<usize, String>> {
    let per = n.div_ceil(threads);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let count = per.min(n.saturating_sub(t * per));
            wirespeed_sys::netns::spawn_in(ns, move || {
                until_failures((0..count).map(|_| probe(target, None)))
            })
            .expect("probe thread")
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().expect("probe thread").expect("setns"))
        .collect()
}

/// One new connection from each of `ports` on `src` to `target`, from namespace `ns` on
/// `threads` threads; the backend of each, or why it failed.
pub fn probes_from(
    ns: &str,
    target: SocketAddr,
    src: IpAddr,
    ports: &[u16],
    threads: usize,
) -> Vec<Result<usize, String>> {
    let handles: Vec<_> = ports
        .chunks(ports.len().div_ceil(threads).max(1))
        .map(|chunk| {
            let chunk = chunk.to_vec();
            wirespeed_sys::netns::spawn_in(ns, move || {
                until_failures(
                    chunk
                        .iter()
                        .map(|&p| probe(target, Some(SocketAddr::new(src, p)))),
                )
            })
            .expect("probe thread")
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().expect("probe thread").expect("setns"))
        .collect()
}

/// One connection from each of `ports` on `src` (a fixed set of flows), one at a time: the
/// backend each lands on, in the order of `ports`.
pub fn placements(
    ns: &str,
    target: SocketAddr,
    src: IpAddr,
    ports: &[u16],
) -> Vec<Result<usize, String>> {
    let ports = ports.to_vec();
    wirespeed_sys::netns::in_netns(ns, move || {
        let results = ports
            .iter()
            .map(|&p| probe(target, Some(SocketAddr::new(src, p))));
        until_failures(results)
    })
    .expect("setns")
}

/// An open connection and the backend it reached.
pub struct Held {
    pub stream: TcpStream,
    pub backend: usize,
}

/// Opens and keeps `n` connections to `target` from `ns`; each has answered once.
pub fn hold(ns: &str, target: SocketAddr, n: usize) -> Vec<Held> {
    wirespeed_sys::netns::in_netns(ns, move || {
        (0..n)
            .map(|i| {
                let mut stream = connect(target, None)
                    .unwrap_or_else(|e| panic!("held connection {i} to {target}: {e}"));
                let backend = ask(&mut stream)
                    .unwrap_or_else(|e| panic!("held connection {i} to {target}: {e}"));
                Held { stream, backend }
            })
            .collect()
    })
    .expect("setns")
}

/// Counts per backend, and the failures.
pub fn tally(results: &[Result<usize, String>]) -> ([usize; BACKENDS], Vec<String>) {
    let mut per = [0usize; BACKENDS];
    let mut failed = vec![];
    for r in results {
        match r {
            Ok(j) => per[*j] += 1,
            Err(e) => failed.push(e.clone()),
        }
    }
    (per, failed)
}

/// New connections until every backend has answered one (the daemon resolves the reals'
/// neighbours and the clients their gateway's as they start): bounded, then asserts.
pub fn warm_up(lab: &LbLab, client: &str, target: SocketAddr, backends: &[usize]) {
    let ns = lab.ns_name(client);
    let mut seen = [false; BACKENDS];
    let mut last_err = String::new();
    let done = wait_for(Duration::from_secs(20), || {
        for r in probes(&ns, target, 16, 4) {
            match r {
                Ok(j) => seen[j] = true,
                Err(e) => last_err = e,
            }
        }
        backends.iter().all(|&j| seen[j]).then_some(())
    });
    assert!(
        done.is_some(),
        "{client} -> {target}: backends answered {seen:?} of {backends:?} in 20 s; last error {last_err}; daemon log: {}; {}",
        lab.daemon_log(),
        super::reasons()
    );
}

/// `redis-benchmark -h HOST -p 6379 -t ping_inline -P 10 -n 20000 -c 20 -q` in `client`; the
/// requests per second it reports.
pub fn redis_benchmark(lab: &LbLab, client: &str, host: IpAddr) -> f64 {
    let h = host.to_string();
    let out = output(Command::new("ip").args([
        "netns",
        "exec",
        &lab.ns_name(client),
        "timeout",
        "60",
        "redis-benchmark",
        "-h",
        &h,
        "-p",
        "6379",
        "-t",
        "ping_inline",
        "-P",
        "10",
        "-n",
        "20000",
        "-c",
        "20",
        "-q",
    ]));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "redis-benchmark -h {h} from {client}: {} {text} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // -q prints progress lines ending in \r, then `PING_INLINE: N requests per second, ...`.
    let rate = text
        .split(['\r', '\n'])
        .filter_map(|l| {
            let l = l.trim();
            let rest = l.strip_prefix("PING_INLINE:")?;
            let n = rest.split_whitespace().next()?;
            l.contains("requests per second")
                .then(|| n.parse::<f64>().ok())?
        })
        .next_back()
        .unwrap_or_else(|| panic!("no rate in redis-benchmark's output: {text}"));
    println!(
        "{}: redis-benchmark {client} -> {h}: {rate:.0} requests/s",
        lab.name
    );
    rate
}

/// `curl URL` from `client`: the body (the backend's name).
pub fn curl(lab: &LbLab, client: &str, url: &str) -> String {
    let out = output(Command::new("ip").args([
        "netns",
        "exec",
        &lab.ns_name(client),
        "curl",
        "-sS",
        "-g",
        "--max-time",
        "5",
        url,
    ]));
    assert!(
        out.status.success(),
        "curl {url} from {client}: {}; {}",
        String::from_utf8_lossy(&out.stderr),
        super::reasons()
    );
    let body = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        body.len() == 2 && body.starts_with('b'),
        "curl {url} from {client}: the body names no backend: {body:?}"
    );
    body
}

/// `wirespeed bench http URL` from `client`, 8 connections for a second; asserts requests
/// were answered and no error of any kind occurred. Returns the requests per second.
pub fn bench(lab: &LbLab, client: &str, url: &str) -> f64 {
    let json = lab.dir.0.join(format!("bench-{client}.json"));
    let out = output(
        Command::new("ip")
            .args(["netns", "exec", &lab.ns_name(client), bin()])
            .args([
                "bench", "http", url, "-c", "8", "--warmup", "200ms", "-d", "1s",
            ])
            .arg("--json")
            .arg(&json),
    );
    assert!(
        out.status.success(),
        "wirespeed bench http {url} from {client}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("bench json")).expect("json");
    assert!(v["requests"].as_u64().unwrap_or(0) > 0, "{v}");
    for kind in ["connect", "read", "write", "timeout", "non2xx", "parse"] {
        assert_eq!(v["errors"][kind].as_u64(), Some(0), "{kind} errors: {v}");
    }
    let rps = v["rps"].as_f64().unwrap_or(0.0);
    println!(
        "{}: wirespeed bench {client} -> {url}: {rps:.0} req/s, no errors",
        lab.name
    );
    rps
}

/// A TCP segment read from a capture.
#[derive(Debug)]
pub struct Segment {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub flags: u8,
    /// The option bytes (between the fixed header and the data).
    pub options: Vec<u8>,
}

pub const SYN: u8 = 0x02;
pub const ACK: u8 = 0x10;

/// The IPv4 TCP segments of a pcap file (Ethernet link type), as tcpdump -w writes it.
pub fn read_pcap(bytes: &[u8]) -> Vec<Segment> {
    assert!(
        bytes.len() >= 24,
        "capture too short: {} bytes",
        bytes.len()
    );
    let magic = u32::from_le_bytes(bytes[0..4].try_into().unwrap());
    assert!(
        magic == 0xa1b2_c3d4 || magic == 0xa1b2_3c4d,
        "not a little-endian pcap file (magic {magic:#x})"
    );
    let linktype = u32::from_le_bytes(bytes[20..24].try_into().unwrap());
    assert_eq!(linktype, 1, "capture link type {linktype}, want Ethernet");
    let mut out = vec![];
    let mut at = 24;
    while at + 16 <= bytes.len() {
        let caplen = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        let frame = &bytes[at + 16..(at + 16 + caplen).min(bytes.len())];
        at += 16 + caplen;
        if let Some(s) = tcp_of_frame(frame) {
            out.push(s);
        }
    }
    out
}

fn tcp_of_frame(f: &[u8]) -> Option<Segment> {
    if f.len() < 14 + 20 || f[12..14] != [0x08, 0x00] {
        return None;
    }
    let ip = &f[14..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    if ip[0] >> 4 != 4 || ip[9] != 6 || ip.len() < ihl + 20 {
        return None;
    }
    let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let tcp = &ip[ihl..];
    let doff = usize::from(tcp[12] >> 4) * 4;
    if doff < 20 || tcp.len() < doff {
        return None;
    }
    Some(Segment {
        src: SocketAddr::new(src.into(), u16::from_be_bytes([tcp[0], tcp[1]])),
        dst: SocketAddr::new(dst.into(), u16::from_be_bytes([tcp[2], tcp[3]])),
        flags: tcp[13],
        options: tcp[20..doff].to_vec(),
    })
}

/// The TCP options as (kind, value) pairs; None when they do not parse.
pub fn tcp_options(opts: &[u8]) -> Option<Vec<(u8, Vec<u8>)>> {
    let mut out = vec![];
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            0 => break,
            1 => i += 1,
            kind => {
                let len = usize::from(*opts.get(i + 1)?);
                if len < 2 || i + len > opts.len() {
                    return None;
                }
                out.push((kind, opts[i + 2..i + len].to_vec()));
                i += len;
            }
        }
    }
    Some(out)
}
