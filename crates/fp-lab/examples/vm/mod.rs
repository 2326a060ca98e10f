//! `fp_bench SECS ROUNDS vm`: a bridge of two VM taps, Linux alone against the bridge module
//! at XDP and at TC. A stand-in VM (`wirespeed_sys::tap`, held as QEMU holds a tap) writes
//! frames into one tap as fast as it can and reads what comes out of the other: frames a
//! second. Three kinds: as a guest with virtio-net offloads sends them, 60 KB TCP
//! super-frames (TSO) and 1,400-byte UDP frames with partial checksums; and the same UDP
//! frames with complete checksums, as a guest without checksum offload sends them.

use super::*;
use wirespeed_sys::tap::{GuestOffloads, Tap, VnetHeader};

const VM_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const VM_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

/// An IPv4 frame from VM A to VM B carrying `l4`, its checksum left partial as a guest with
/// checksum offload leaves it (unless `complete`); `gso_size` > 0 makes it a TCP
/// super-frame.
fn guest_frame(l4: L4, gso_size: u16, complete: bool) -> (VnetHeader, Vec<u8>) {
    let mut f = pkt::ipv4(VM_B, VM_A, [198, 18, 2, 1], [198, 18, 2, 2], 64, &[], &l4);
    if complete {
        return (VnetHeader::default(), f);
    }
    let (csum_start, csum_offset) = pkt::make_l4_checksum_partial_v4(&mut f);
    let mut h = VnetHeader {
        flags: VnetHeader::NEEDS_CSUM,
        csum_start,
        csum_offset,
        ..VnetHeader::default()
    };
    if gso_size > 0 {
        h.gso_type = VnetHeader::GSO_TCPV4;
        h.gso_size = gso_size;
        h.hdr_len = 54;
    }
    (h, f)
}

/// Frames a second VM B receives while VM A writes `frame` for `secs`.
fn rate(a: &Tap, b: &Tap, frame: &(VnetHeader, Vec<u8>), secs: Duration) -> f64 {
    let mut buf = vec![0u8; 65_536];
    let mut drain = |b: &Tap, wait: Duration| {
        let mut n = 0u64;
        while b.recv_into(&mut buf, wait).expect("tap read").is_some() {
            n += 1;
        }
        n
    };
    drain(b, Duration::from_millis(50));
    let t0 = Instant::now();
    let mut got = 0;
    while t0.elapsed() < secs {
        match a.send(frame.0, &frame.1) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("VM A: {e}"),
        }
        got += drain(b, Duration::ZERO);
    }
    let elapsed = t0.elapsed();
    got += drain(b, Duration::from_millis(20));
    got as f64 / elapsed.as_secs_f64()
}

pub fn vm_bridge(secs: Duration, rounds: usize) {
    let ns =
        wirespeed_lab::Netns::create(&format!("ws-bv{}", std::process::id() % 100000)).unwrap();
    ns.ip(&["link", "add", "br0", "type", "bridge"]).unwrap();
    let offloads = GuestOffloads {
        csum: true,
        tso: true,
    };
    let open = |name: &'static str| {
        spawn_in_ns(ns.name(), move || Tap::create(name, offloads).unwrap())
            .join()
            .unwrap()
    };
    let (a, b) = (open("vm0"), open("vm1"));
    for t in ["vm0", "vm1"] {
        ns.ip(&["link", "set", t, "master", "br0"]).unwrap();
        ns.ip(&["link", "set", t, "up"]).unwrap();
    }
    ns.ip(&["link", "set", "br0", "up"]).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // Each guest sends once, so that the bridge knows both stations.
    let hello = |from: &Tap, src: [u8; 6], dst: [u8; 6]| {
        let mut f = pkt::ipv4(
            dst,
            src,
            [198, 18, 2, 9],
            [198, 18, 2, 8],
            64,
            &[],
            &udp18(),
        );
        f[..6].copy_from_slice(&dst);
        from.send(VnetHeader::default(), &f).unwrap();
    };
    hello(&b, VM_B, VM_A);
    hello(&a, VM_A, VM_B);
    pin_self(0);
    let super_frame = guest_frame(pkt::tcp_syn(40001, 5004, vec![0x5a; 60_000]), 1448, false);
    let udp = L4::Udp {
        sport: 40000,
        dport: 5003,
        payload: vec![0xa5; 1372],
    };
    let small = guest_frame(udp.clone(), 0, false);
    let small_complete = guest_frame(udp, 0, true);
    println!();
    println!("| bridge of two VM taps, frames/s | Linux | fast path at XDP | vs Linux | fast path at TC (default) | vs Linux |");
    println!("|---|---|---|---|---|---|");
    for (name, frame) in [
        ("60 KB TCP super-frames (TSO)", &super_frame),
        ("1,400 B UDP, partial checksum", &small),
        ("1,400 B UDP, complete checksum", &small_complete),
    ] {
        let (mut l, mut x, mut t, mut rx, mut rt) = (vec![], vec![], vec![], vec![], vec![]);
        for _ in 0..rounds {
            let lin = rate(&a, &b, frame, secs);
            let at = |hook| {
                let mut d = RunningDaemon::start_config(
                    &ns,
                    wirespeed_fp::daemon::Config {
                        bridge_hook: hook,
                        ..Default::default()
                    },
                );
                d.wait_for("both taps attached", |s| {
                    s.ports.len() == 2 && s.ports.iter().all(|p| !p.modules.is_empty())
                });
                let r = rate(&a, &b, frame, secs);
                let s = d.status().unwrap();
                d.stop();
                // What the row stands for: at XDP a super-frame reaches the program as an
                // skb and goes to the kernel; everything else is bridged.
                let to_kernel: u64 = s.ports.iter().map(|p| p.passed).sum();
                let bridged: u64 = s.ports.iter().map(|p| p.fast_pathed).sum();
                let expect_kernel = hook == BridgeHook::Xdp && frame.0.gso_type != 0;
                assert!(
                    if expect_kernel {
                        bridged < to_kernel
                    } else {
                        to_kernel < bridged
                    },
                    "{name}, {hook:?}: {bridged} bridged, {to_kernel} to the kernel: {:?}",
                    s.ports
                );
                r
            };
            let (xdp, tc) = (at(BridgeHook::Xdp), at(BridgeHook::Auto));
            l.push(lin);
            x.push(xdp);
            t.push(tc);
            rx.push(xdp / lin);
            rt.push(tc / lin);
        }
        let range = |v: &[f64]| {
            let lo = v.iter().cloned().fold(f64::MAX, f64::min);
            let hi = v.iter().cloned().fold(0.0, f64::max);
            format!("{lo:.2}-{hi:.2}")
        };
        let (spread_x, spread_t) = (range(&rx), range(&rt));
        println!(
            "| {name} | {:.0} | {:.0} | {:.2}x ({spread_x}) | {:.0} | {:.2}x ({spread_t}) |",
            median(&mut l),
            median(&mut x),
            median(&mut rx),
            median(&mut t),
            median(&mut rt),
        );
    }
}
