//! Steady-state traffic must not allocate: a counting global allocator watches two stacks
//! exchanging requests/responses and a bulk stream after warm-up. (The count is this thread's,
//! so the harness's own threads are not counted.)

use wirespeed_sys::alloc::CountingAlloc;
use wirespeed_tcpip::{Config, ConnId, Error, Instant, Ipv4Addr, MacAddr, Stack};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc::new();

/// A wire with preallocated frame slots (the harness itself must not allocate).
struct Wire {
    frames: Vec<[u8; 1600]>,
    lens: Vec<usize>,
    count: usize,
}

impl Wire {
    fn new() -> Wire {
        Wire {
            frames: vec![[0u8; 1600]; 4096],
            lens: vec![0; 4096],
            count: 0,
        }
    }
}

fn step(st: &mut [Stack; 2], wires: &mut [Wire; 2], now: Instant) {
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
    for side in 0..2 {
        let w = &wires[side];
        for i in 0..w.count {
            st[1 - side].receive(now, &w.frames[i][..w.lens[i]]);
        }
    }
}

#[test]
fn no_allocation_per_segment_in_steady_state() {
    let a_ip = Ipv4Addr::new(198, 18, 0, 1);
    let b_ip = Ipv4Addr::new(198, 18, 0, 2);
    let mut st = [
        Stack::new(Config::new(MacAddr([2, 0, 0, 0, 0, 1]), a_ip, 24)),
        Stack::new(Config::new(MacAddr([2, 0, 0, 0, 0, 2]), b_ip, 24)),
    ];
    let mut wires = [Wire::new(), Wire::new()];
    let l = st[1].tcp_listen(80, 64).unwrap();
    let mut now = Instant::from_millis(1);
    let conns: Vec<ConnId> = (0..8)
        .map(|_| st[0].tcp_connect(now, b_ip, 80, |_| true).unwrap())
        .collect();
    let mut servers: Vec<ConnId> = Vec::with_capacity(8);
    for _ in 0..20 {
        now = now.add_micros(100);
        step(&mut st, &mut wires, now);
        while let Ok(s) = st[1].tcp_accept(l) {
            servers.push(s);
        }
    }
    assert_eq!(servers.len(), 8);
    let mut buf = [0u8; 65536];
    let payload = [0x5au8; 16384];
    let mut round = |st: &mut [Stack; 2], wires: &mut [Wire; 2], now: &mut Instant| {
        // Ping-pong on every connection plus a 16 KiB chunk one way.
        for (i, &c) in conns.iter().enumerate() {
            st[0].tcp_send(c, b"GET / HTTP/1.1\r\n\r\n").unwrap();
            if i == 0 {
                let _ = st[0].tcp_send(c, &payload);
            }
        }
        for _ in 0..4 {
            *now = now.add_micros(50);
            step(st, wires, *now);
            for &s in &servers {
                match st[1].tcp_recv(s, &mut buf) {
                    Ok(n) if n > 0 => {
                        st[1].tcp_send(s, b"HTTP/1.1 200 OK\r\n\r\n").unwrap();
                    }
                    Ok(_) | Err(Error::WouldBlock) => {}
                    Err(e) => panic!("{e}"),
                }
            }
            for &c in &conns {
                let _ = st[0].tcp_recv(c, &mut buf);
            }
            while st[0].pop_event().is_some() {}
            while st[1].pop_event().is_some() {}
        }
        // Let delayed ACKs and timers run too.
        *now = now.add_micros(10_000);
        step(st, wires, *now);
    };
    for _ in 0..200 {
        round(&mut st, &mut wires, &mut now);
    }
    let before = ALLOC.allocations_on_this_thread();
    assert!(before > 0, "the counting allocator is in use");
    let segs_before = st[0].stats().tcp_segments_out + st[1].stats().tcp_segments_out;
    for _ in 0..1000 {
        round(&mut st, &mut wires, &mut now);
    }
    let allocs = ALLOC.allocations_on_this_thread() - before;
    let segs = st[0].stats().tcp_segments_out + st[1].stats().tcp_segments_out - segs_before;
    assert!(segs > 20_000, "traffic flowed: {segs} segments");
    assert_eq!(allocs, 0, "{allocs} allocations for {segs} segments");
}
