//! The DPDK driver on virtual devices, without hugepages: a net_ring loopback port, and a
//! net_af_packet port on a lab veth whose peer uses plain kernel sockets. Root; one test,
//! because the EAL can start once per process.
//! Run: `cargo test -p wirespeed-nic --features dpdk --test dpdk`.
#![cfg(feature = "dpdk")]

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use wirespeed_lab::{netns::add_addr, Netns, Veth};
use wirespeed_nic::dpdk::{DpdkPort, DpdkPortConfig, Eal};
use wirespeed_nic::FrameIo;
use wirespeed_testkit::frame::udp_frame;
use wirespeed_testkit::parse::parse_udp;

const SERVED: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 10);
const PEER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const MAC_A: [u8; 6] = [0x02, 0, 0, 0x18, 0, 0x0a];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0x18, 0, 0x0b];

fn mac_str(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn send(q: &mut impl FrameIo, frame: &[u8]) {
    assert!(q.tx_frame(|buf| {
        buf[..frame.len()].copy_from_slice(frame);
        frame.len()
    }));
}

fn collect(q: &mut impl FrameIo, want: usize, pick: impl Fn(&[u8]) -> bool) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    while got.len() < want && Instant::now() < deadline {
        if q.rx_burst(64, |f| {
            if pick(f) {
                got.push(f.to_vec())
            }
        }) == 0
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    got
}

#[test]
fn dpdk_ring_loopback_and_af_packet_on_a_lab_veth() {
    wirespeed_lab::require_root();
    let id = std::process::id() % 100_000;
    let a = Netns::create(&format!("ws-d{id}a")).unwrap();
    let b = Netns::create(&format!("ws-d{id}b")).unwrap();
    let _veth = Veth::create(&a, "da0", &b, "db0", 1).unwrap();
    for (ns, ifname, mac) in [(&a, "da0", MAC_A), (&b, "db0", MAC_B)] {
        ns.ip(&["link", "set", ifname, "down"]).unwrap();
        ns.ip(&["link", "set", ifname, "address", &mac_str(mac)])
            .unwrap();
        ns.ip(&["link", "set", ifname, "up"]).unwrap();
    }
    add_addr(&a, "da0", "198.18.0.1/24").unwrap();
    add_addr(&b, "db0", "198.18.0.2/24").unwrap();
    // The peer reaches the served address at our MAC without ARP (the DPDK side has no stack).
    b.ip(&[
        "neigh",
        "add",
        "198.18.0.10",
        "lladdr",
        &mac_str(MAC_A),
        "dev",
        "db0",
    ])
    .unwrap();

    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let b_name = b.name().to_string();
    let peer = std::thread::spawn(move || {
        wirespeed_sys::netns::enter(&b_name).unwrap();
        let s = UdpSocket::bind(SocketAddrV4::new(PEER, 9000)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        ready_tx.send(()).unwrap();
        let mut buf = [0u8; 2048];
        let got = s
            .recv_from(&mut buf)
            .map(|(n, from)| (buf[..n].to_vec(), from));
        for i in 0..5 {
            s.send_to(
                format!("to-dpdk-{i}").as_bytes(),
                SocketAddrV4::new(SERVED, 7000),
            )
            .unwrap();
        }
        got
    });
    ready_rx.recv_timeout(Duration::from_secs(5)).unwrap();

    let (ring_frames, received, port_stats) = a
        .run(|| {
            let vdev = "--vdev=net_af_packet0,iface=da0".to_string();
            let prefix = format!("--file-prefix=ws-nic-{}", std::process::id());
            let eal = Eal::init(&[
                "wirespeed-nic-test",
                "--no-huge",
                "-m",
                "128",
                "--no-pci",
                "--no-shconf",
                &prefix,
                "--no-telemetry",
                "--log-level=error",
                "-l",
                "0",
                "--vdev=net_ring0",
                &vdev,
            ])
            .unwrap();
            assert!(
                Eal::init(&["again"]).is_err(),
                "the EAL starts once per process"
            );
            assert_eq!(
                DpdkPort::available(&eal),
                ["net_ring0", "net_af_packet0"],
                "the ports the EAL found, in id order"
            );
            let cfg = DpdkPortConfig {
                pool_size: 1023,
                pool_cache: 32,
                descriptors: 256,
                ..DpdkPortConfig::default()
            };

            // net_ring0: what it sends, it receives.
            let mut ring = DpdkPort::start(&eal, "net_ring0", &cfg).unwrap();
            let mut rq = ring.queue(0).unwrap();
            assert!(ring.queue(0).is_err(), "a queue is taken once");
            for i in 0..10u8 {
                send(&mut rq, &[i; 64]);
            }
            rq.flush();
            let ring_frames = collect(&mut rq, 10, |_| true);
            assert_eq!(rq.stats().tx_frames, 10);

            // net_af_packet0 on da0: a crafted datagram reaches the peer's kernel socket, and the
            // peer's datagrams reach us.
            let mut port = DpdkPort::start(&eal, "net_af_packet0", &cfg).unwrap();
            let mut q = port.queue(0).unwrap();
            send(
                &mut q,
                &udp_frame(MAC_B, MAC_A, SERVED, PEER, 7000, 9000, b"from-dpdk"),
            );
            q.flush();
            let received = collect(&mut q, 5, |f| matches!(parse_udp(f), Some((_, _, 7000, _))));
            (ring_frames, received, port.stats().unwrap())
        })
        .unwrap();

    // The EAL leaves an empty runtime directory behind even with --no-shconf.
    let run_dir = format!("/var/run/dpdk/ws-nic-{}", std::process::id());
    let _ = std::fs::remove_dir(&run_dir);
    let _ = std::fs::remove_dir("/var/run/dpdk");

    assert_eq!(
        ring_frames,
        (0..10u8).map(|i| vec![i; 64]).collect::<Vec<_>>(),
        "ring loopback keeps order"
    );
    let (data, from) = peer
        .join()
        .unwrap()
        .expect("peer received the DPDK-built datagram");
    assert_eq!(data, b"from-dpdk");
    assert_eq!(
        from,
        std::net::SocketAddr::V4(SocketAddrV4::new(SERVED, 7000))
    );
    let payloads: Vec<_> = received.iter().map(|f| parse_udp(f).unwrap().3).collect();
    assert_eq!(
        payloads,
        (0..5)
            .map(|i| format!("to-dpdk-{i}").into_bytes())
            .collect::<Vec<_>>()
    );
    assert!(
        port_stats.opackets >= 1 && port_stats.ipackets >= 5,
        "{port_stats:?}"
    );
}
