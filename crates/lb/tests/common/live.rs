//! The program attached for real: a client namespace, the load balancer's, and a real's,
//! joined by veths; live TCP through full-NAT and a ping answered by the program.

use super::*;
use std::io::{Read, Write};
use wirespeed_lab::{Netns, Veth};

#[test]
fn live_full_nat_tcp_and_echo_through_the_attached_program() {
    wirespeed_lab::require_root();
    let id = std::process::id() % 100000;
    let client = Netns::create(&format!("ws-lc{id}")).unwrap();
    let lb = Netns::create(&format!("ws-ll{id}")).unwrap();
    let realns = Netns::create(&format!("ws-lr{id}")).unwrap();
    Veth::create(&lb, "in0", &client, "c0", 1).unwrap();
    Veth::create(&lb, "out0", &realns, "r0", 1).unwrap();
    for (ns, dev, a) in [
        (&client, "c0", "198.18.1.2/24"),
        (&lb, "in0", "198.18.1.1/24"),
        (&lb, "out0", "198.18.2.1/24"),
        (&realns, "r0", "198.18.2.10/24"),
    ] {
        wirespeed_lab::netns::add_addr(ns, dev, a).unwrap();
    }
    client
        .ip(&["route", "add", "198.18.100.0/24", "via", "198.18.1.1"])
        .unwrap();
    lb.sysctl("net.ipv4.ip_forward", "1").unwrap();
    // The peers run NAPI, so the veths take the program's XDP_TX and redirects.
    client.exec("ethtool", &["-K", "c0", "gro", "on"]).unwrap();
    realns.exec("ethtool", &["-K", "r0", "gro", "on"]).unwrap();
    // Neighbours resolved before the first packet (the daemon's job in production).
    lb.exec("ping", &["-c", "1", "-W", "2", "198.18.1.2"])
        .unwrap();
    lb.exec("ping", &["-c", "1", "-W", "2", "198.18.2.10"])
        .unwrap();

    let listener = wirespeed_sys::netns::in_netns(realns.name(), || {
        std::net::TcpListener::bind("198.18.2.10:8080").unwrap()
    })
    .unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, peer) = listener.accept().unwrap();
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).unwrap();
        s.write_all(&buf).unwrap();
        peer
    });

    let plan = fnat_plan(VIP4, "198.18.2.10", "198.18.2.1", false);
    let lbname = lb.name().to_string();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let holder = wirespeed_sys::netns::spawn_in(&lbname, move || {
        let c = AttachConfig {
            ifaces: vec!["in0".into(), "out0".into()],
            ..cfg()
        };
        let mut dp = XdpDataPlane::attach(&c).unwrap();
        dp.apply(&plan).unwrap();
        ready_tx.send(()).unwrap();
        rx.recv().unwrap();
        dp.stats().unwrap()
    })
    .unwrap();
    ready_rx.recv().unwrap();

    let echoed = wirespeed_sys::netns::in_netns(client.name(), || {
        let mut s = std::net::TcpStream::connect_timeout(
            &"198.18.100.1:80".parse().unwrap(),
            std::time::Duration::from_secs(5),
        )
        .unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        s.write_all(b"hello").unwrap();
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).unwrap();
        buf
    })
    .unwrap();
    assert_eq!(&echoed, b"hello");
    let peer = server.join().unwrap();
    assert_eq!(
        peer.ip(),
        ip("198.18.2.1"),
        "the real sees the local address"
    );
    let ping = client.exec("ping", &["-c", "1", "-W", "2", "198.18.100.1"]);
    tx.send(()).unwrap();
    let st = holder.join().unwrap().unwrap();
    let reason = |n: &str| {
        st.reasons
            .iter()
            .find(|(r, _)| r == n)
            .map_or(0, |(_, c)| *c)
    };
    let seen: Vec<_> = st.reasons.iter().filter(|(_, c)| *c > 0).collect();
    assert!(ping.is_ok(), "ping through the program: {ping:?}; {seen:?}");
    assert!(reason("fwd_fnat") >= 3, "{:?}", st.reasons);
    assert!(reason("fwd_reply") >= 2, "{:?}", st.reasons);
    assert_eq!(
        reason("icmp_echo"),
        1,
        "the ping was answered by the program"
    );
    assert_eq!(st.services[0].conns, 1);
    // Veth senders offload their checksums: the program completed them.
    assert!(reason("csum_completed") >= 1, "{:?}", st.reasons);
}
