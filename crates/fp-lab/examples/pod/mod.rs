//! `fp_bench SECS ROUNDS pod` (and the end of a full run): pod-to-pod request/response
//! through a node's bridge, Linux against the fast path's bridge module at TC.

use super::*;

/// One TCP connection between two pods of a pod network, 64-byte request and response,
/// as fast as it goes for `secs`: (round trips per second, latencies in microseconds).
fn ping_pong(net: &PodNet, secs: Duration) -> (f64, Vec<f64>) {
    use std::io::{Read, Write};
    let listener = spawn_in_ns(net.pods[1].name(), || {
        std::net::TcpListener::bind("198.18.4.11:7100").unwrap()
    })
    .join()
    .unwrap();
    let srv = std::thread::spawn(move || {
        pin_self(1);
        let (mut s, _) = listener.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut buf = [0u8; 64];
        while s.read_exact(&mut buf).is_ok() {
            if s.write_all(&buf).is_err() {
                break;
            }
        }
    });
    let out = spawn_in_ns(net.pods[0].name(), move || {
        pin_self(0);
        let mut s = std::net::TcpStream::connect("198.18.4.11:7100").unwrap();
        s.set_nodelay(true).unwrap();
        let mut buf = [0u8; 64];
        let mut lat = Vec::with_capacity(1 << 20);
        let warm_until = Instant::now() + Duration::from_millis(300);
        while Instant::now() < warm_until {
            s.write_all(&buf).unwrap();
            s.read_exact(&mut buf).unwrap();
        }
        let t0 = Instant::now();
        while t0.elapsed() < secs {
            let t = Instant::now();
            s.write_all(&buf).unwrap();
            s.read_exact(&mut buf).unwrap();
            lat.push(t.elapsed().as_secs_f64() * 1e6);
        }
        (lat.len() as f64 / t0.elapsed().as_secs_f64(), lat)
    })
    .join()
    .unwrap();
    srv.join().unwrap();
    out
}

/// Pod-to-pod request/response through the node's bridge, Linux against the bridge module
/// at TC (the hook `auto` picks for veth ports).
pub fn pod_to_pod(secs: Duration, rounds: usize) {
    let net = pod_network("bp", 2);
    println!();
    println!(
        "| pod-to-pod TCP, 64 B request/response, 1 connection | Linux | fast path (TC) | ratio |"
    );
    println!("|---|---|---|---|");
    let (mut rl, mut rf, mut ratio) = (vec![], vec![], vec![]);
    let (mut p50l, mut p50f, mut p99l, mut p99f) = (vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        let (l, mut ll) = ping_pong(&net, secs);
        let (f, mut lf) = with_daemon(
            &net.node,
            Fp {
                hook: BridgeHook::Auto,
                route_cache: true,
                unbound: false,
            },
            "pod-to-pod",
            || ping_pong(&net, secs),
        );
        rl.push(l);
        rf.push(f);
        ratio.push(f / l);
        p50l.push(pct(&mut ll, 0.5));
        p50f.push(pct(&mut lf, 0.5));
        p99l.push(pct(&mut ll, 0.99));
        p99f.push(pct(&mut lf, 0.99));
    }
    let (ml, mf) = (median(&mut rl), median(&mut rf));
    println!(
        "| round trips/s (median of {rounds}) | {:.0} | {:.0} | {:.2}x |",
        ml,
        mf,
        median(&mut ratio)
    );
    let (a, b) = (median(&mut p50l), median(&mut p50f));
    println!("| latency p50 us | {a:.1} | {b:.1} | {:.2}x |", b / a);
    let (a, b) = (median(&mut p99l), median(&mut p99f));
    println!("| latency p99 us | {a:.1} | {b:.1} | {:.2}x |", b / a);
}
