//! ActiveConn and InActConn in `-L -n` and `--json`, end to end without a lab of backends: the
//! daemon's logic over the loaded XDP program, configured with ipvsadm commands, connections
//! opened and closed by frames through BPF_PROG_TEST_RUN, and the listing read back.

mod common;

use common::*;
use wirespeed_lb::control::{Reply, Request};
use wirespeed_lb::daemon::Daemon;
use wirespeed_lb::datapath::{AttachConfig, XdpDataPlane, XDP_REDIRECT};
use wirespeed_lb::ipvsadm::{parse_args, ListOptions};
use wirespeed_lb::listing::format_list;

const RING: u32 = 7;
const VIP: &str = "198.18.100.1";
const CLIENT: &str = "198.18.50.5";
const RST: u8 = 0x04;

fn cfg(conns_per_cpu: u32) -> AttachConfig {
    AttachConfig {
        ring_size: RING,
        max_services: 8,
        max_reals: 16,
        conns_per_cpu,
        new_conns_per_sec_per_cpu: 0,
        ..AttachConfig::default()
    }
}

fn ok(d: &mut Daemon<XdpDataPlane>, line: &str) {
    let words: Vec<&str> = line.split_whitespace().collect();
    match d.handle(Request::Command(parse_args(&words).unwrap())) {
        Reply::Done { .. } => {}
        other => panic!("{line}: {other:?}"),
    }
}

/// (ActiveConn, InActConn) of each real line of `-L -n`, by its address column.
fn listed(d: &Daemon<XdpDataPlane>) -> Vec<(String, u64, u64)> {
    let text = format_list(&d.view().unwrap(), &ListOptions::default());
    text.lines()
        .filter(|l| l.starts_with("  -> ") && !l.contains("RemoteAddress"))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (
                w[1].to_string(),
                w[4].parse().unwrap(),
                w[5].parse().unwrap(),
            )
        })
        .collect()
}

fn counts(d: &Daemon<XdpDataPlane>, real: &str) -> (u64, u64) {
    listed(d)
        .into_iter()
        .find(|(a, _, _)| a == real)
        .map(|(_, a, i)| (a, i))
        .unwrap_or_else(|| panic!("{real} not listed: {:?}", listed(d)))
}

#[test]
fn active_and_inactive_connections_are_counted_per_real_in_the_listing() {
    let (ns, lab) = lab("cnt");
    ns.run(move || {
        pin(0);
        let dp = XdpDataPlane::load(&cfg(1024)).unwrap();
        let mut d = Daemon::new(dp, RING).unwrap();
        for line in [
            "-A -t 198.18.100.1:80 -s mh",
            "-a -t 198.18.100.1:80 -r 198.18.2.10:8080 -m",
            "-A -t 198.18.100.1:81 -s mh",
            "--add-laddr -z 198.18.2.1 -t 198.18.100.1:81",
            "-a -t 198.18.100.1:81 -r 198.18.2.11:8080 -b",
            "-A -u 198.18.100.1:53 -s mh",
            "-a -u 198.18.100.1:53 -r 198.18.2.12:53 -m",
            "-A -t 198.18.100.1:82 -s mh",
            "-a -t 198.18.100.1:82 -r 198.18.2.10 -g",
        ] {
            ok(&mut d, line);
        }
        let send = |d: &Daemon<XdpDataPlane>, l4: L4| {
            let f = frame(lab.in_mac, ROUTER_MAC, ip(CLIENT), ip(VIP), &l4);
            let (v, out) = d.data_plane().test_run(&f, lab.in_idx).unwrap();
            assert_eq!(v, XDP_REDIRECT, "{l4:?}");
            out
        };
        // The real's answer to `dst`:`dport` (the client, or the full-NAT local port).
        let from_real = |d: &Daemon<XdpDataPlane>, real: &str, dst: &str, dport: u16, flags| {
            let f = frame(
                lab.out_mac,
                REAL_MACS[0],
                ip(real),
                ip(dst),
                &tcp(8080, dport, flags),
            );
            let (v, _) = d.data_plane().test_run(&f, lab.out_idx).unwrap();
            assert_eq!(v, XDP_REDIRECT);
        };
        for r in ["198.18.2.10:8080", "198.18.2.11:8080", "198.18.2.12:53"] {
            assert_eq!(counts(&d, r), (0, 0), "nothing yet");
        }

        // NAT: 5 connections in their handshake are inactive, as ipvsadm lists SYN_RECV;
        // the real's SYN-ACK and the client's ACK make them active. The client closes two
        // (FIN), the real resets one (its RST comes back through the load balancer).
        for port in 41000..41005 {
            send(&d, tcp(port, 80, SYN));
        }
        assert_eq!(counts(&d, "198.18.2.10:8080"), (0, 5), "half-open");
        for port in 41000..41005 {
            from_real(&d, "198.18.2.10", CLIENT, port, SYN | ACK);
            send(&d, tcp(port, 80, ACK));
        }
        assert_eq!(counts(&d, "198.18.2.10:8080"), (5, 0));
        send(&d, tcp(41000, 80, FIN | ACK));
        send(&d, tcp(41001, 80, FIN | ACK));
        from_real(&d, "198.18.2.10", CLIENT, 41002, RST | ACK);
        assert_eq!(counts(&d, "198.18.2.10:8080"), (2, 3));

        // Full-NAT: 3 connections, one reset by the client in its handshake.
        let mut lports = Vec::new();
        for port in 42000..42003 {
            let out = send(&d, tcp(port, 81, SYN));
            lports.push(u16::from_be_bytes([out[34], out[35]]));
        }
        send(&d, tcp(42000, 81, RST));
        assert_eq!(counts(&d, "198.18.2.11:8080"), (0, 3));
        for (port, lport) in (42001..42003).zip(&lports[1..]) {
            from_real(&d, "198.18.2.11", "198.18.2.1", *lport, SYN | ACK);
            send(&d, tcp(port, 81, ACK));
        }
        assert_eq!(counts(&d, "198.18.2.11:8080"), (2, 1));

        // UDP flows are inactive, as IPVS counts them.
        send(&d, udp(43000, 53));
        send(&d, udp(43001, 53));
        assert_eq!(counts(&d, "198.18.2.12:53"), (0, 2));

        // DR: the real's answers go around the load balancer, so the client's first segment
        // after its SYN is the proof; its FIN is all the load balancer sees of a close.
        for port in [44000, 44001] {
            send(&d, tcp(port, 82, SYN));
            send(&d, tcp(port, 82, ACK));
        }
        send(&d, tcp(44000, 82, FIN | ACK));
        assert_eq!(counts(&d, "198.18.2.10:82"), (1, 1));

        // A closed flow that opens again is in its handshake, then active again.
        send(&d, tcp(41000, 80, SYN));
        assert_eq!(counts(&d, "198.18.2.10:8080"), (2, 3));
        from_real(&d, "198.18.2.10", CLIENT, 41000, SYN | ACK);
        send(&d, tcp(41000, 80, ACK));
        assert_eq!(counts(&d, "198.18.2.10:8080"), (3, 2));
        // Untouched by all of this: the other services' reals.
        assert_eq!(counts(&d, "198.18.2.11:8080"), (2, 1));

        // `--json` carries the same numbers.
        let json = serde_json::to_value(d.view().unwrap()).unwrap();
        let real = &json["services"][0]["reals"][0];
        assert_eq!(real["addr"], "198.18.2.10:8080");
        assert_eq!(
            (real["active_conns"].as_u64(), real["inact_conns"].as_u64()),
            (Some(3), Some(2))
        );
    })
    .unwrap();
}

#[test]
fn a_walk_longer_than_one_batch_counts_every_connection() {
    // More forward entries than one BPF_MAP_LOOKUP_BATCH call copies (4,096): the walk goes
    // on from where the kernel left it, and misses none.
    const N: u16 = 5000;
    let (ns, lab) = lab("cntb");
    ns.run(move || {
        pin(0);
        let dp = XdpDataPlane::load(&cfg(8192)).unwrap();
        let mut d = Daemon::new(dp, RING).unwrap();
        ok(&mut d, "-A -t 198.18.100.1:80 -s mh");
        ok(&mut d, "-a -t 198.18.100.1:80 -r 198.18.2.10 -g");
        for port in 20000..20000 + N {
            let f = frame(
                lab.in_mac,
                ROUTER_MAC,
                ip(CLIENT),
                ip(VIP),
                &tcp(port, 80, SYN),
            );
            let (v, _) = d.data_plane().test_run(&f, lab.in_idx).unwrap();
            assert_eq!(v, XDP_REDIRECT);
            // DR: the client's ACK proves the handshake; the connection leaves half_open.
            let ack = frame(
                lab.in_mac,
                ROUTER_MAC,
                ip(CLIENT),
                ip(VIP),
                &tcp(port, 80, ACK),
            );
            d.data_plane().test_run(&ack, lab.in_idx).unwrap();
        }
        for port in 20000..20010 {
            let f = frame(
                lab.in_mac,
                ROUTER_MAC,
                ip(CLIENT),
                ip(VIP),
                &tcp(port, 80, RST),
            );
            d.data_plane().test_run(&f, lab.in_idx).unwrap();
        }
        assert_eq!(counts(&d, "198.18.2.10:80"), (N as u64 - 10, 10));
    })
    .unwrap();
}
