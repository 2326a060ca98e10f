//! AF_XDP and bifurcation on a real veth pair between two lab namespaces. Needs root; never
//! skips. Namespace A holds our side (`xa0`, kernel address 198.18.0.1, served address
//! 198.18.0.10 which only the AF_XDP sockets answer for); namespace B holds the peer (`xb0`,
//! 198.18.0.2) with plain kernel sockets.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};
use wirespeed_testkit::csum::udp_checksum_ok;
use wirespeed_testkit::frame::{arp_packet, ethernet, udp_frame, ETH_P_ARP};
use wirespeed_testkit::parse::{parse_arp_request, parse_udp};

use wirespeed_lab::{netns::add_addr, Netns, Veth};
use wirespeed_nic::{
    AttachScope, Bifurcation, BifurcationConfig, BindMode, BusyPoll, Error, FrameIo, XskConfig,
    XskSocket,
};

const OURS: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const SERVED: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 10);
const PEER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const MAC_A: [u8; 6] = [0x02, 0, 0, 0x18, 0, 0x0a];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0x18, 0, 0x0b];
const SERVED_PORT: u16 = 7000;

struct Lab {
    a: Netns,
    b: Netns,
    _veth: Veth,
}

fn mac_str(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Two namespaces joined by a 2-queue veth pair; `tag` keeps names unique per test.
fn lab(tag: &str) -> Lab {
    wirespeed_lab::require_root();
    let id = std::process::id() % 100_000;
    let a = Netns::create(&format!("ws-x{tag}{id}a")).unwrap();
    let b = Netns::create(&format!("ws-x{tag}{id}b")).unwrap();
    let veth = Veth::create(&a, "xa0", &b, "xb0", 2).unwrap();
    for (ns, ifname, mac) in [(&a, "xa0", MAC_A), (&b, "xb0", MAC_B)] {
        ns.ip(&["link", "set", ifname, "down"]).unwrap();
        ns.ip(&["link", "set", ifname, "address", &mac_str(mac)])
            .unwrap();
        ns.ip(&["link", "set", ifname, "up"]).unwrap();
    }
    add_addr(&a, "xa0", "198.18.0.1/24").unwrap();
    add_addr(&b, "xb0", "198.18.0.2/24").unwrap();
    Lab { a, b, _veth: veth }
}

fn small_config(mode: BindMode) -> XskConfig {
    XskConfig {
        rx_frames: 256,
        tx_frames: 256,
        mode,
        ..XskConfig::default()
    }
}

/// Pins the calling thread to one CPU (so the peer's XPS picks the tx queue of that CPU).
fn pin_to_cpu(cpu: usize) {
    wirespeed_sys::process::set_affinity(&[cpu]).unwrap();
}

/// Polls every socket until `want` frames matching `pick` arrived or 5 s passed; returns
/// (queue, frame) in arrival order. Frames that do not match are dropped.
fn collect(
    socks: &mut [XskSocket],
    want: usize,
    pick: impl Fn(&[u8]) -> bool,
) -> Vec<(u32, Vec<u8>)> {
    collect_for(socks, want, Duration::from_secs(5), pick)
}

fn collect_for(
    socks: &mut [XskSocket],
    want: usize,
    timeout: Duration,
    pick: impl Fn(&[u8]) -> bool,
) -> Vec<(u32, Vec<u8>)> {
    let deadline = Instant::now() + timeout;
    let mut got = Vec::new();
    while got.len() < want && Instant::now() < deadline {
        let mut n = 0;
        for s in socks.iter_mut() {
            let q = s.queue();
            n += s.rx_burst(64, |f| {
                if pick(f) {
                    got.push((q, f.to_vec()));
                }
            });
        }
        if n == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    got
}

fn send_from_peer(lab: &Lab, cpu: usize, sport: u16, count: usize, tag: &str) {
    let tag = tag.to_string();
    lab.b
        .run(move || {
            pin_to_cpu(cpu);
            let s = UdpSocket::bind(SocketAddrV4::new(PEER, sport)).unwrap();
            for i in 0..count {
                s.send_to(
                    format!("{tag}-{i}").as_bytes(),
                    SocketAddrV4::new(SERVED, SERVED_PORT),
                )
                .unwrap();
            }
        })
        .unwrap();
}

#[test]
fn bifurcated_af_xdp_receives_served_traffic_and_transmits_to_the_peer() {
    let lab = lab("r");
    // The peer's XPS: CPU 0 sends on tx queue 0, CPU 1 on tx queue 1; on veth the peer's tx
    // queue is our rx queue.
    lab.b
        .exec(
            "sh",
            &["-c", "echo 1 > /sys/class/net/xb0/queues/tx-0/xps_cpus && echo 2 > /sys/class/net/xb0/queues/tx-1/xps_cpus"],
        )
        .unwrap();

    let (bif, mut socks) = lab
        .a
        .run(|| {
            let cfg = BifurcationConfig {
                udp_ports: vec![SERVED_PORT],
                ..BifurcationConfig::new(SERVED)
            };
            let mut bif = Bifurcation::load(&cfg)?;
            bif.attach("xa0", AttachScope::LabOnly)?;
            let mut socks = Vec::new();
            for q in 0..2 {
                let s = XskSocket::open("xa0", q, &small_config(BindMode::Copy))?;
                bif.register(&s)?;
                socks.push(s);
            }
            Ok::<_, Error>((bif, socks))
        })
        .unwrap()
        .unwrap();
    let link = lab.a.ip(&["link", "show", "xa0"]).unwrap();
    assert!(link.contains("xdp"), "program attached: {link}");

    assert!(
        !socks[0].wait_readable(Duration::from_millis(20)).unwrap(),
        "nothing sent yet"
    );

    // 1. The peer's kernel resolves the served address: its ARP request reaches our socket
    //    and our hand-made reply lets the datagram it queued go out.
    send_from_peer(&lab, 0, 5000, 1, "first");
    let woke = socks
        .iter()
        .any(|s| s.wait_readable(Duration::from_millis(500)).unwrap());
    assert!(woke, "poll(2) wakes an idle shard when a frame arrives");
    let arp_req = collect(&mut socks, 1, |f| parse_arp_request(f).is_some());
    assert_eq!(
        arp_req.len(),
        1,
        "ARP request for the served address reaches the AF_XDP socket"
    );
    let (queue, req) = &arp_req[0];
    let (sha, spa, tpa) = parse_arp_request(req).unwrap();
    assert_eq!((sha, spa, tpa), (MAC_B, PEER, SERVED));
    let sock = &mut socks[*queue as usize];
    assert!(sock.tx_frame(|buf| {
        let reply = ethernet(
            MAC_B,
            MAC_A,
            ETH_P_ARP,
            &arp_packet(2, MAC_A, SERVED, MAC_B, PEER),
        );
        buf[..reply.len()].copy_from_slice(&reply);
        reply.len()
    }));
    sock.flush();
    let first = collect(&mut socks, 1, |f| parse_udp(f).is_some());
    assert_eq!(first.len(), 1, "the queued datagram follows the ARP reply");
    assert_eq!(
        parse_udp(&first[0].1).unwrap(),
        (PEER, 5000, SERVED_PORT, b"first-0".to_vec())
    );
    let neigh = lab.b.ip(&["neigh", "show", "198.18.0.10"]).unwrap();
    assert!(
        neigh.contains(&mac_str(MAC_A)),
        "peer learnt our MAC from the crafted reply: {neigh}"
    );

    // 2. Each queue receives what the peer sends on the matching tx queue.
    for cpu in 0..2 {
        send_from_peer(&lab, cpu, 5100 + cpu as u16, 20, &format!("cpu{cpu}"));
    }
    let got = collect(&mut socks, 40, |f| parse_udp(f).is_some());
    assert_eq!(got.len(), 40, "all datagrams to the served port arrive");
    let mut per_queue = [0usize; 2];
    for (q, f) in &got {
        let (src, sport, dport, data) = parse_udp(f).unwrap();
        assert_eq!((src, dport), (PEER, SERVED_PORT));
        let cpu = usize::from(sport - 5100);
        assert!(String::from_utf8_lossy(&data).starts_with(&format!("cpu{cpu}-")));
        assert_eq!(*q as usize, cpu, "XPS on the peer picks our rx queue");
        per_queue[*q as usize] += 1;
    }
    assert_eq!(per_queue, [20, 20]);

    // 3. A datagram built by hand on each queue reaches a plain UDP socket on the peer.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let b_name = lab.b.name().to_string();
    let receiver = std::thread::spawn(move || {
        wirespeed_sys::netns::enter(&b_name).unwrap();
        let s = UdpSocket::bind(SocketAddrV4::new(PEER, 9000)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        ready_tx.send(()).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        while got.len() < 2 {
            let Ok((n, from)) = s.recv_from(&mut buf) else {
                break;
            };
            got.push((buf[..n].to_vec(), from));
        }
        got
    });
    ready_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    for (q, s) in socks.iter_mut().enumerate() {
        let frame = udp_frame(
            MAC_B,
            MAC_A,
            SERVED,
            PEER,
            SERVED_PORT,
            9000,
            format!("from-queue-{q}").as_bytes(),
        );
        assert!(s.tx_frame(|buf| {
            buf[..frame.len()].copy_from_slice(&frame);
            frame.len()
        }));
        s.flush();
    }
    let mut received = receiver.join().unwrap();
    received.sort();
    let from = std::net::SocketAddr::V4(SocketAddrV4::new(SERVED, SERVED_PORT));
    assert_eq!(
        received,
        vec![
            (b"from-queue-0".to_vec(), from),
            (b"from-queue-1".to_vec(), from)
        ]
    );

    // 4. Bifurcation: the kernel still owns its own address while the program is attached.
    lab.b
        .exec("ping", &["-c", "3", "-i", "0.2", "-W", "2", "198.18.0.1"])
        .unwrap();
    let c = bif.counters().unwrap();
    assert!(c.redirected >= 42, "{c:?}");
    assert!(
        c.passed_other >= 3,
        "pings and their ARP went to the kernel: {c:?}"
    );

    for s in socks.iter_mut() {
        s.flush();
        let k = s.kernel_stats().unwrap();
        assert_eq!((k.rx_invalid_descs, k.tx_invalid_descs), (0, 0), "{k:?}");
    }
    let total: u64 = socks.iter().map(|s| s.stats().rx_frames).sum();
    assert!(total >= 42, "{total}");
    assert_eq!(socks.iter().map(|s| s.stats().tx_frames).sum::<u64>(), 3);
    eprintln!(
        "stats: {:?} / {:?}; verdicts {c:?}",
        socks[0].stats(),
        socks[1].stats()
    );

    // 5. Dropping the loader detaches the program.
    drop(bif);
    let link = lab.a.ip(&["link", "show", "xa0"]).unwrap();
    assert!(!link.contains("xdp"), "detached on drop: {link}");
    let _ = OURS;
}

/// The kernel only delivers a redirect to the socket bound to the frame's own rx queue: a
/// socket put in another queue's slot receives nothing, and the frames are lost (not passed).
/// This is why `register` takes the slot from the socket, and why the XDP program cannot
/// steer frames between shards' sockets.
#[test]
fn a_socket_in_another_queues_slot_gets_nothing() {
    let lab = lab("m");
    lab.b.exec("sh", &["-c", "echo 1 > /sys/class/net/xb0/queues/tx-0/xps_cpus && echo 2 > /sys/class/net/xb0/queues/tx-1/xps_cpus"]).unwrap();
    lab.b
        .ip(&[
            "neigh",
            "add",
            "198.18.0.10",
            "lladdr",
            &mac_str(MAC_A),
            "dev",
            "xb0",
        ])
        .unwrap();
    let (bif, mut sock, mismatch) = lab
        .a
        .run(|| {
            let cfg = BifurcationConfig {
                udp_ports: vec![SERVED_PORT],
                ..BifurcationConfig::new(SERVED)
            };
            let mut bif = Bifurcation::load(&cfg).unwrap();
            let sock = XskSocket::open("xa0", 1, &small_config(BindMode::Copy)).unwrap();
            // register() refuses a socket of another interface than the attached one.
            wirespeed_lab::sh(
                "ip",
                &["link", "add", "d0", "type", "veth", "peer", "name", "d1"],
            )
            .unwrap();
            wirespeed_lab::sh("ip", &["link", "set", "d0", "up"]).unwrap();
            let mut other = Bifurcation::load(&cfg).unwrap();
            other.attach("d0", AttachScope::LabOnly).unwrap();
            let mismatch = other.register(&sock).map_err(|e| e.to_string());
            bif.attach("xa0", AttachScope::LabOnly).unwrap();
            bif.register_fd(0, &sock).unwrap(); // wrong slot on purpose: the socket is on queue 1
            (bif, sock, mismatch)
        })
        .unwrap();
    assert!(mismatch.unwrap_err().contains("attached to `d0`"));
    send_from_peer(&lab, 0, 5200, 10, "lost");
    let got = collect_for(
        std::slice::from_mut(&mut sock),
        1,
        Duration::from_secs(1),
        |f| parse_udp(f).is_some(),
    );
    assert!(
        got.is_empty(),
        "queue 0 frames never reach a queue 1 socket"
    );
    let c = bif.counters().unwrap();
    assert!(c.redirected >= 10, "the program redirected them: {c:?}");
}

/// `frame_capacity()` is exact: with 2048-byte chunks a 1792-byte frame arrives, a 1793-byte
/// one is dropped by the kernel (it keeps 256 bytes of headroom in every chunk).
#[test]
fn the_largest_received_frame_is_frame_capacity() {
    let lab = lab("c");
    for (ns, ifname) in [(&lab.a, "xa0"), (&lab.b, "xb0")] {
        ns.ip(&["link", "set", ifname, "mtu", "2000"]).unwrap();
    }
    lab.b
        .ip(&[
            "neigh",
            "add",
            "198.18.0.10",
            "lladdr",
            &mac_str(MAC_A),
            "dev",
            "xb0",
        ])
        .unwrap();
    let (_bif, mut socks) = lab
        .a
        .run(|| {
            let cfg = BifurcationConfig {
                udp_ports: vec![SERVED_PORT],
                ..BifurcationConfig::new(SERVED)
            };
            let mut bif = Bifurcation::load(&cfg).unwrap();
            bif.attach("xa0", AttachScope::LabOnly).unwrap();
            let socks: Vec<_> = (0..2)
                .map(|q| {
                    // Busy-poll sockets: rx must work the same, with or without the kernel
                    // able to busy-poll them (below).
                    let cfg = XskConfig {
                        busy_poll: Some(BusyPoll::default()),
                        ..small_config(BindMode::Copy)
                    };
                    let s = XskSocket::open("xa0", q, &cfg).unwrap();
                    bif.register(&s).unwrap();
                    s
                })
                .collect();
            (bif, socks)
        })
        .unwrap();
    let cap = socks[0].frame_capacity();
    assert_eq!(cap, 1792);
    lab.b
        .run(move || {
            let s = UdpSocket::bind(SocketAddrV4::new(PEER, 5300)).unwrap();
            // Ethernet 14 + IPv4 20 + UDP 8 = 42 bytes of headers.
            for frame_len in [cap, cap + 1, cap] {
                s.send_to(
                    &vec![7u8; frame_len - 42],
                    SocketAddrV4::new(SERVED, SERVED_PORT),
                )
                .unwrap();
            }
        })
        .unwrap();
    let got = collect_for(&mut socks, 3, Duration::from_secs(1), |f| {
        parse_udp(f).is_some()
    });
    let lens: Vec<usize> = got.iter().map(|(_, f)| f.len()).collect();
    assert_eq!(
        lens,
        vec![cap, cap],
        "the frame one byte too long is dropped"
    );
    // Busy polling asked for: a copy-mode socket on Linux 6.13+ has no NAPI ID even after its
    // frames arrived, so the socket says busy polling is impossible and makes no wakeup calls
    // for it; where it can busy-poll, its empty polls make a recvfrom.
    for s in &socks {
        match s.busy_poll_impossible() {
            Some(why) => {
                assert_eq!(s.napi_id(), 0, "said impossible, yet a NAPI ID: {why}");
                assert_eq!(s.stats().wakeups, 0, "wakeups for nothing: {why}");
                // The queue's NAPI (the veth runs one while XDP is attached) is still found,
                // for an io_uring to poll by ID.
                assert!(
                    s.queue_napi_id().is_some_and(|id| id > 0),
                    "no NAPI ID found for the queue of a veth with XDP: {why}"
                );
            }
            None => assert!(
                s.stats().wakeups > 0,
                "busy polling makes a recvfrom on empty polls"
            ),
        }
    }
}

/// veth leaves the peer kernel's UDP checksum to "hardware" (CHECKSUM_PARTIAL), so the frame
/// reaching AF_XDP carries only the pseudo-header sum; with the peer's tx offload off it is
/// complete. The bypass stack must know this (docs/NIC.md, "Checksums on veth").
#[test]
fn veth_peer_checksums_are_partial_unless_tx_offload_is_off() {
    let lab = lab("k");
    lab.b
        .ip(&[
            "neigh",
            "add",
            "198.18.0.10",
            "lladdr",
            &mac_str(MAC_A),
            "dev",
            "xb0",
        ])
        .unwrap();
    let (_bif, mut socks) = lab
        .a
        .run(|| {
            let cfg = BifurcationConfig {
                udp_ports: vec![SERVED_PORT],
                ..BifurcationConfig::new(SERVED)
            };
            let mut bif = Bifurcation::load(&cfg).unwrap();
            bif.attach("xa0", AttachScope::LabOnly).unwrap();
            let socks: Vec<_> = (0..2)
                .map(|q| {
                    let s = XskSocket::open("xa0", q, &small_config(BindMode::Copy)).unwrap();
                    bif.register(&s).unwrap();
                    s
                })
                .collect();
            (bif, socks)
        })
        .unwrap();
    let mut verdicts = Vec::new();
    for offload in ["on", "off"] {
        lab.b
            .exec("ethtool", &["-K", "xb0", "tx", offload])
            .unwrap();
        send_from_peer(&lab, 0, 5400, 1, offload);
        let got = collect(&mut socks, 1, |f| parse_udp(f).is_some());
        assert_eq!(got.len(), 1);
        verdicts.push(udp_checksum_ok(&got[0].1));
    }
    assert_eq!(
        verdicts,
        vec![false, true],
        "partial with tx offload on, complete with it off"
    );
}

/// More frames in one flush than one copy-mode `sendto` sends: flush keeps kicking while the
/// kernel answers EAGAIN, so the whole burst leaves.
#[test]
fn one_flush_sends_a_burst_larger_than_the_kernel_tx_budget() {
    const N: usize = 200;
    let lab = lab("t");
    let mut sock = lab
        .a
        .run(|| XskSocket::open("xa0", 0, &small_config(BindMode::Copy)))
        .unwrap()
        .unwrap();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let b_name = lab.b.name().to_string();
    let receiver = std::thread::spawn(move || {
        wirespeed_sys::netns::enter(&b_name).unwrap();
        let s = UdpSocket::bind(SocketAddrV4::new(PEER, 9001)).unwrap();
        wirespeed_sys::socket::set_int_option(&s, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 8 << 20)
            .unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        ready_tx.send(()).unwrap();
        let mut n = 0;
        let mut buf = [0u8; 2048];
        while n < N && s.recv_from(&mut buf).is_ok() {
            n += 1;
        }
        n
    });
    ready_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    for i in 0..N {
        let frame = udp_frame(
            MAC_B,
            MAC_A,
            SERVED,
            PEER,
            SERVED_PORT,
            9001,
            format!("burst-{i}").as_bytes(),
        );
        assert!(sock.tx_frame(|buf| {
            buf[..frame.len()].copy_from_slice(&frame);
            frame.len()
        }));
    }
    sock.flush();
    let wakeups = sock.stats().wakeups;
    assert_eq!(
        receiver.join().unwrap(),
        N,
        "every frame of the burst arrives"
    );
    assert!(
        wakeups >= (N / 32) as u64,
        "copy mode needed several kicks: {wakeups}"
    );
    // The completions come back: all transmit chunks are free again.
    for _ in 0..100 {
        sock.flush();
    }
    assert_eq!(sock.stats().tx_ring_full, 0);
    eprintln!("burst of {N}: {} wakeups", sock.stats().wakeups);
}

#[test]
fn zero_copy_on_veth_fails_clearly_or_falls_back() {
    let lab = lab("z");
    let (strict, fallback, bad_queue) = lab
        .a
        .run(|| {
            let strict = XskSocket::open("xa0", 0, &small_config(BindMode::ZeroCopy)).map(|_| ());
            let fallback = XskSocket::open("xa0", 0, &small_config(BindMode::PreferZeroCopy))
                .map(|s| (s.is_zero_copy(), s.fallback().map(str::to_string)));
            // A queue that does not exist is not "zero-copy unsupported", in either mode.
            let bad_queue = [BindMode::ZeroCopy, BindMode::PreferZeroCopy]
                .map(|mode| XskSocket::open("xa0", 5, &small_config(mode)).map(|_| ()));
            (strict, fallback, bad_queue)
        })
        .unwrap();
    let [strict_bad, prefer_bad] = bad_queue;
    let e = strict_bad.unwrap_err();
    assert!(
        matches!(e, Error::Os { .. }) && e.to_string().contains("queue 5 in zero-copy mode"),
        "{e}"
    );
    let e = prefer_bad.unwrap_err();
    assert!(
        e.to_string().contains("queue 5 in copy mode"),
        "the copy-mode error explains it: {e}"
    );
    let err = strict.unwrap_err();
    assert!(matches!(err, Error::ZeroCopyUnsupported { .. }), "{err}");
    assert!(
        err.to_string().contains("BindMode::Copy"),
        "says what to do: {err}"
    );
    let (zc, why) = fallback.unwrap();
    assert!(!zc);
    let why = why.expect("fallback reason");
    assert!(why.contains("using copy mode"), "{why}");
}

#[test]
fn interface_facts_busy_poll_options_and_one_socket_per_queue() {
    let lab = lab("b");
    let (missing, second, third, info, rss) = lab
        .a
        .run(|| {
            let info = wirespeed_nic::InterfaceInfo::query("xa0").unwrap();
            let rss = wirespeed_nic::rss::RssModel::for_interface("xa0").unwrap();
            assert_eq!(
                wirespeed_nic::rss::read_rss("xa0").unwrap(),
                None,
                "veth reports no RSS table"
            );
            let cfg = XskConfig {
                busy_poll: Some(BusyPoll {
                    required: true,
                    ..BusyPoll::default()
                }),
                ..small_config(BindMode::Copy)
            };
            let s = XskSocket::open("xa0", 0, &cfg).unwrap();
            let second = XskSocket::open("xa0", 0, &small_config(BindMode::Copy)).map(|_| ());
            let third = XskSocket::open("xa0", 2, &small_config(BindMode::Copy)).map(|_| ());
            (s.busy_poll_missing().to_vec(), second, third, info, rss)
        })
        .unwrap();
    // The link kind comes from rtnetlink: a veth is a software device, so the stack on it
    // takes partial checksums.
    assert_eq!(
        (info.kind.as_deref(), info.driver.as_str(), info.loopback),
        (Some("veth"), "veth", false),
        "{info:?}"
    );
    assert!(info.partial_checksums_possible());
    assert_eq!(
        (info.mac, info.mtu, info.rx_queues),
        (MAC_A, 1500, 2),
        "{info:?}"
    );
    assert!(
        matches!(rss, wirespeed_nic::rss::RssModel::Unknown(ref why) if why.contains("veth")),
        "{rss:?}"
    );
    assert!(
        missing.is_empty(),
        "kernel 6.x has all busy-poll options: {missing:?}"
    );
    let second = second.expect_err("a queue takes one socket (no shared UMEM between shards)");
    assert!(
        second.to_string().contains("already has an AF_XDP socket"),
        "the error says why: {second}"
    );
    assert!(third.is_err(), "queue 2 does not exist on a 2-queue veth");
}

/// The kernel lets go of a closed socket's queue from a workqueue, after `close` returns; a
/// socket reopened at once on the same queue (a restarted server) must still bind.
#[test]
fn a_queue_reopens_at_once_after_its_socket_closes() {
    let lab = lab("o");
    let opened = lab
        .a
        .run(|| {
            (0..50)
                .map(|_| XskSocket::open("xa0", 1, &small_config(BindMode::Copy)).map(drop))
                .collect::<Result<Vec<()>, _>>()
                .map(|v| v.len())
        })
        .unwrap();
    assert_eq!(opened.map_err(|e| e.to_string()), Ok(50));
}

/// A jumbo MTU both ways: with the xdp.frags program a 9000-byte MTU stays on the veth, the
/// multi-buffer socket receives 9014-byte frames whole (chained over 4096-byte chunks) and
/// sends them (runs of chunks, recycled on completion); a frame over `max_frame` is dropped
/// and counted, never truncated.
#[test]
fn jumbo_frames_cross_a_veth_both_ways_and_an_oversized_one_is_counted() {
    const ROUNDS: usize = 40;
    const PER_ROUND: usize = 8;
    let lab = lab("j");
    for (ns, ifname) in [(&lab.a, "xa0"), (&lab.b, "xb0")] {
        ns.ip(&["link", "set", ifname, "mtu", "9000"]).unwrap();
    }
    let neigh = [
        "neigh",
        "add",
        "198.18.0.10",
        "lladdr",
        &mac_str(MAC_A),
        "dev",
        "xb0",
    ];
    lab.b.ip(&neigh).unwrap();
    let jumbo = |max_frame: u32| XskConfig {
        max_frame: Some(max_frame),
        ..XskConfig::for_mtu(9000)
    };
    let (mut bif, mut socks) = lab
        .a
        .run(move || {
            let cfg = BifurcationConfig {
                udp_ports: vec![SERVED_PORT],
                ..BifurcationConfig::new(SERVED)
            };
            let mut bif = Bifurcation::load(&cfg)?;
            bif.attach("xa0", AttachScope::LabOnly)?;
            let mut socks = Vec::new();
            for q in 0..2 {
                let s = XskSocket::open("xa0", q, &jumbo(9014))?;
                bif.register(&s)?;
                socks.push(s);
            }
            Ok::<_, Error>((bif, socks))
        })
        .unwrap()
        .unwrap();
    let link = lab.a.ip(&["link", "show", "xa0"]).unwrap();
    assert!(link.contains("mtu 9000") && link.contains("xdp"), "{link}");
    assert_eq!(socks[0].frame_capacity(), 9014);

    // Receive: one descriptor (100), two (5000), three (9014: the whole MTU).
    let peer = lab.b.name().to_string();
    lab_send_lens(&peer, vec![100, 5000, 9014]);
    let got = collect(&mut socks, 3, |f| parse_udp(f).is_some());
    let lens: Vec<usize> = got.iter().map(|(_, f)| f.len()).collect();
    assert_eq!(lens, vec![100, 5000, 9014], "whole frames, in order");
    for (_, f) in &got {
        let (_, _, _, payload) = parse_udp(f).unwrap();
        assert!(payload.iter().all(|&b| b == 7), "gathered bytes intact");
    }
    // One flow, one queue: the short socket below sits on it.
    let queue = got[0].0;

    // Many more, each frame's payload its own byte, in rounds that the sockets drain: round
    // the receive strip several times (2048 buffers, 3 per 9014-byte frame). Frames whose
    // pieces lie end to end are lent from the UMEM; only those that wrap round the strip or
    // that a 64-descriptor burst cuts are gathered by copying.
    const STRIP_ROUNDS: usize = 24;
    const STRIP_PER_ROUND: usize = 100;
    let lens = [9014, 100, 5000, 9014, 7681, 3840, 3841];
    let before: u64 = socks.iter().map(|s| s.stats().rx_gathered).sum();
    let mut multi_piece = 0;
    for round in 0..STRIP_ROUNDS {
        let frames: Vec<(usize, u8)> = (0..STRIP_PER_ROUND)
            .map(|i| {
                let n = round * STRIP_PER_ROUND + i;
                (lens[n % lens.len()], (n % 251) as u8)
            })
            .collect();
        multi_piece += frames.iter().filter(|(len, _)| *len > 3840).count();
        lab_send(&peer, frames.clone());
        let got = collect(&mut socks, frames.len(), |f| parse_udp(f).is_some());
        let seen: Vec<(usize, u8)> = got
            .iter()
            .map(|(_, f)| (f.len(), parse_udp(f).unwrap().3[0]))
            .collect();
        assert_eq!(seen, frames, "round {round}: every frame whole, in order");
        for (_, f) in &got {
            let payload = parse_udp(f).unwrap().3;
            assert!(
                payload.iter().all(|&b| b == payload[0]),
                "round {round}: a {}-byte frame's bytes are its own",
                f.len()
            );
        }
    }
    let gathered = socks.iter().map(|s| s.stats().rx_gathered).sum::<u64>() - before;
    assert!(
        gathered * 4 <= multi_piece as u64,
        "{gathered} of {multi_piece} multi-piece frames gathered by copying: the strip does not hold"
    );

    // Send: from queue 0's socket, enough rounds to reuse every run of chunks several times.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let receiver_ns = peer.clone();
    let receiver = std::thread::spawn(move || {
        wirespeed_sys::netns::enter(&receiver_ns).unwrap();
        let s = UdpSocket::bind(SocketAddrV4::new(PEER, 9002)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        ready_tx.send(()).unwrap();
        let mut lens = Vec::new();
        let mut buf = vec![0u8; 65536];
        while lens.len() < ROUNDS * PER_ROUND {
            let Ok((n, _)) = s.recv_from(&mut buf) else {
                break;
            };
            assert!(buf[..n].iter().all(|&b| b == 9), "payload intact");
            lens.push(n);
        }
        lens
    });
    ready_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    let sizes = [8972, 60, 4000, 8972];
    let mut sent = Vec::new();
    let sock = &mut socks[0];
    for round in 0..ROUNDS {
        for i in 0..PER_ROUND {
            let payload = vec![9u8; sizes[(round + i) % sizes.len()]];
            let frame = udp_frame(MAC_B, MAC_A, SERVED, PEER, SERVED_PORT, 9002, &payload);
            let mut tries = 0;
            while !sock.tx_frame(|buf| {
                buf[..frame.len()].copy_from_slice(&frame);
                frame.len()
            }) {
                tries += 1;
                assert!(tries < 1000, "runs of chunks come back on completion");
                sock.flush();
                std::thread::sleep(Duration::from_millis(1));
            }
            sent.push(payload.len());
        }
        sock.flush();
        // Let the peer drain its socket buffer between rounds.
        std::thread::sleep(Duration::from_millis(5));
    }
    let received = receiver.join().unwrap();
    assert_eq!(received, sent, "every frame arrives whole, in order");
    let st = *sock.stats();
    assert_eq!(
        (st.tx_invalid, st.tx_frames),
        (0, sent.len() as u64),
        "{st:?}"
    );

    // A socket whose frames are shorter than the MTU: the 9014-byte frame is dropped whole
    // and counted, the next one still arrives.
    drop(socks);
    let mut short = lab
        .a
        .run(move || XskSocket::open("xa0", queue, &jumbo(6014)))
        .unwrap()
        .unwrap();
    bif.register(&short).unwrap();
    lab_send_lens(&peer, vec![9014, 6014]);
    let got = collect(std::slice::from_mut(&mut short), 1, |f| {
        parse_udp(f).is_some()
    });
    let lens: Vec<usize> = got.iter().map(|(_, f)| f.len()).collect();
    assert_eq!(
        lens,
        vec![6014],
        "the longer frame is not truncated into view"
    );
    assert_eq!(short.stats().rx_oversized, 1);
    assert_eq!(short.rx_oversized_since_last(), 1);
    assert_eq!(short.rx_oversized_since_last(), 0, "since the last call");
}

/// Sends one UDP datagram per frame length (Ethernet + IPv4 + UDP = 42 bytes of headers) from
/// the peer's namespace, on CPU 0 (so they arrive in order on one queue).
fn lab_send_lens(peer_ns: &str, lens: Vec<usize>) {
    lab_send(peer_ns, lens.into_iter().map(|len| (len, 7)).collect());
}

/// [`lab_send_lens`] with each frame's payload byte.
fn lab_send(peer_ns: &str, frames: Vec<(usize, u8)>) {
    let peer_ns = peer_ns.to_string();
    std::thread::spawn(move || {
        wirespeed_sys::netns::enter(&peer_ns).unwrap();
        pin_to_cpu(0);
        let s = UdpSocket::bind(SocketAddrV4::new(PEER, 5600)).unwrap();
        for (len, byte) in frames {
            s.send_to(
                &vec![byte; len - 42],
                SocketAddrV4::new(SERVED, SERVED_PORT),
            )
            .unwrap();
        }
    })
    .join()
    .unwrap();
}
