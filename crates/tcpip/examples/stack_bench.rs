//! CPU cost of the stack itself: two stacks in one thread, frames passed through memory.
//!
//!   cargo run --release -p wirespeed-tcpip --example stack_bench -- [--conns N] [--buf BYTES] [--secs S] [--json PATH]
//!
//! Prints (and optionally writes as JSON) request/response transactions per second over N
//! connections (64-byte request, 64-byte response, both ends on this one core, so each
//! transaction pays for client and server processing), and one-connection bulk throughput.
//! No NIC, no syscalls: this is the ceiling the stack puts on a shard, not an end-to-end
//! figure.

use std::time::Instant as WallClock;
use wirespeed_tcpip::{
    Config, ConnId, Error, Event, EventKind, Handle, Instant, Ipv4Addr, MacAddr, Stack,
};

struct Wire {
    frames: Vec<[u8; 1536]>,
    lens: Vec<usize>,
    count: usize,
}

fn step(st: &mut [Stack; 2], wires: &mut [Wire; 2], now: Instant) -> usize {
    for side in 0..2 {
        let w = &mut wires[side];
        w.count = 0;
        st[side].transmit(now, &mut |fill: &mut dyn FnMut(&mut [u8]) -> usize| {
            if w.count == w.frames.len() {
                return false;
            }
            let n = fill(&mut w.frames[w.count]);
            w.lens[w.count] = n;
            w.count += 1;
            true
        });
    }
    let mut n = 0;
    for side in 0..2 {
        let w = &wires[side];
        for i in 0..w.count {
            st[1 - side].receive(now, &w.frames[i][..w.lens[i]]);
        }
        n += w.count;
    }
    n
}

fn stacks(conns: usize, buf: usize) -> [Stack; 2] {
    let mk = |i: u8| {
        let mut c = Config::new(
            MacAddr([2, 0, 0, 0, 0, i]),
            Ipv4Addr::new(198, 18, 0, i),
            24,
        );
        c.max_connections = conns + 16;
        c.send_buffer = buf;
        c.recv_buffer = buf;
        c
    };
    [Stack::new(mk(1)), Stack::new(mk(2))]
}

fn wires() -> [Wire; 2] {
    let w = || Wire {
        frames: vec![[0u8; 1536]; 8192],
        lens: vec![0; 8192],
        count: 0,
    };
    [w(), w()]
}

/// The stacks' clock: 10 µs per call, i.e. per poll round, as on a fast LAN. Not wall time:
/// one thread serving both ends of 100 000 connections needs ~0.4 s per round, and a wall
/// clock would make every such round look like a stalled network (spurious loss probes and
/// RTOs), which measures the bench, not the stack.
struct Clock(u64);

impl Clock {
    fn tick(&mut self) -> Instant {
        self.0 += 10;
        Instant::from_micros(1_000_000 + self.0)
    }
}

fn pingpong(nconns: usize, secs: f64, buf_size: usize) -> (f64, f64, usize) {
    let mut st = stacks(nconns, buf_size);
    let mut w = wires();
    let mut clock = Clock(0);
    // One ephemeral port range per (address, port) pair: spread over several listeners.
    let nlisten = nconns.div_ceil(25_000);
    let listeners: Vec<_> = (0..nlisten)
        .map(|i| st[1].tcp_listen(80 + i as u16, nconns).unwrap())
        .collect();
    let b_ip = Ipv4Addr::new(198, 18, 0, 2);
    let mut clients = Vec::with_capacity(nconns);
    for i in 0..nconns {
        let port = 80 + (i % nlisten) as u16;
        clients.push(
            st[0]
                .tcp_connect(clock.tick(), b_ip, port, |_| true)
                .unwrap(),
        );
        if clients.len() % 1024 == 0 {
            step(&mut st, &mut w, clock.tick());
        }
    }
    let mut servers: Vec<ConnId> = Vec::with_capacity(nconns);
    while servers.len() < nconns {
        step(&mut st, &mut w, clock.tick());
        for &l in &listeners {
            while let Ok(s) = st[1].tcp_accept(l) {
                servers.push(s);
            }
        }
    }
    let req = [b'q'; 64];
    let resp = [b'r'; 64];
    let mut buf = [0u8; 4096];
    for &c in &clients {
        st[0].tcp_send(c, &req).unwrap();
    }
    let t0 = WallClock::now();
    let mut done = 0u64;
    let mut frames = 0usize;
    let mut evs: Vec<Event> = Vec::with_capacity(4 * nconns);
    while t0.elapsed().as_secs_f64() < secs {
        frames += step(&mut st, &mut w, clock.tick());
        evs.clear();
        evs.extend(st[1].drain_events());
        for ev in &evs {
            if let (Handle::Tcp(s), EventKind::Readable) = (ev.handle, ev.kind) {
                while let Ok(n) = st[1].tcp_recv(s, &mut buf) {
                    if n == 0 {
                        break;
                    }
                    let _ = st[1].tcp_send(s, &resp);
                }
            }
        }
        evs.clear();
        evs.extend(st[0].drain_events());
        for ev in &evs {
            if let (Handle::Tcp(c), EventKind::Readable) = (ev.handle, ev.kind) {
                loop {
                    match st[0].tcp_recv(c, &mut buf) {
                        Ok(0) => break,
                        Ok(n) => {
                            done += (n / resp.len()) as u64;
                            let _ = st[0].tcp_send(c, &req);
                        }
                        Err(Error::WouldBlock) => break,
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        }
    }
    let el = t0.elapsed().as_secs_f64();
    for (i, s) in st.iter().enumerate() {
        let x = s.stats();
        eprintln!(
            "  side {i}: segments out {}, retransmits {}, loss probes {}, RTOs {}",
            x.tcp_segments_out, x.tcp_retransmits, x.tcp_loss_probes, x.tcp_rto_expired
        );
    }
    (
        done as f64 / el,
        frames as f64 / el,
        st[1].connection_count(),
    )
}

fn bulk(secs: f64) -> (f64, f64) {
    let mut st = stacks(1, 1 << 20);
    let mut w = wires();
    let mut clock = Clock(0);
    let l = st[1].tcp_listen(80, 1).unwrap();
    let c = st[0]
        .tcp_connect(clock.tick(), Ipv4Addr::new(198, 18, 0, 2), 80, |_| true)
        .unwrap();
    let s = loop {
        step(&mut st, &mut w, clock.tick());
        if let Ok(s) = st[1].tcp_accept(l) {
            break s;
        }
    };
    let chunk = vec![0xabu8; 256 * 1024];
    let mut buf = vec![0u8; 256 * 1024];
    let t0 = WallClock::now();
    let mut bytes = 0u64;
    let mut frames = 0usize;
    while t0.elapsed().as_secs_f64() < secs {
        while st[0].tcp_send(c, &chunk).is_ok() {}
        frames += step(&mut st, &mut w, clock.tick());
        while let Ok(n) = st[1].tcp_recv(s, &mut buf) {
            if n == 0 {
                break;
            }
            bytes += n as u64;
        }
    }
    let el = t0.elapsed().as_secs_f64();
    (bytes as f64 * 8.0 / el / 1e9, frames as f64 / el)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let nconns: usize = arg("--conns").and_then(|v| v.parse().ok()).unwrap_or(1000);
    let secs: f64 = arg("--secs").and_then(|v| v.parse().ok()).unwrap_or(3.0);
    let buf_size: usize = arg("--buf").and_then(|v| v.parse().ok()).unwrap_or(4096);
    let (tps, pp_fps, held) = pingpong(nconns, secs, buf_size);
    println!(
        "pingpong: {nconns} connections ({held} held), 64 B request / 64 B response: {:.0} transactions/s, {:.0} frames/s, {:.0} ns per transaction (both ends, one core)",
        tps,
        pp_fps,
        1e9 / tps
    );
    let (gbps, bulk_fps) = bulk(secs);
    println!("bulk: one connection, 1 MiB buffers: {gbps:.2} Gbit/s of payload, {bulk_fps:.0} frames/s (both ends, one core)");
    if let Some(path) = arg("--json") {
        let json = format!(
            "{{\"bench\":\"tcpip_stack_bench\",\"conns\":{nconns},\"secs\":{secs},\"pingpong_tps\":{tps:.0},\"pingpong_frames_per_s\":{pp_fps:.0},\"ns_per_transaction\":{:.1},\"bulk_gbit_per_s\":{gbps:.3},\"bulk_frames_per_s\":{bulk_fps:.0}}}\n",
            1e9 / tps
        );
        if let Err(e) = std::fs::write(&path, json) {
            eprintln!("stack_bench: cannot write {path}: {e}");
            std::process::exit(1);
        }
    }
}
