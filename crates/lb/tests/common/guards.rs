//! Fixtures of what keeps the data path honest: the rate guard, what is the kernel's (not a
//! VIP, bad headers), rr/wrr cursors, the full-NAT port share of each CPU, services without
//! weight, and the attach checks.

use super::*;

#[test]
fn the_rate_guard_schedules_without_remembering() {
    let c = AttachConfig {
        new_conns_per_sec_per_cpu: 2,
        ..cfg()
    };
    let plan = one_service(VIP4, Mode::Dr, &["198.18.2.10"], &[0]);
    with_lab("rate", c, plan, |lab, dp| {
        for port in 40000..40006 {
            let syn = frame(
                lab.in_mac,
                ROUTER_MAC,
                ip(CLIENT4),
                ip(VIP4),
                &tcp(port, 80, SYN),
            );
            let (v, out) = dp.test_run(&syn, lab.in_idx).unwrap();
            assert_eq!((v, real_of(&out)), (XDP_REDIRECT, 0), "still forwarded");
        }
        // Six new connections against two a second: at least three over the guard even if
        // a second ended in between.
        let limited = count(dp, Reason::RateLimited);
        assert!(limited >= 3, "{limited} over the guard");
        assert_eq!(dp.program().conn_count(0) as u64, 6 - limited);
        let st = dp.stats().unwrap();
        assert_eq!(st.services[0].conns, 6, "every one counted as a connection");
    });
}

#[test]
fn what_is_no_vip_goes_to_the_kernel() {
    let plan = one_service(VIP4, Mode::Dr, &["198.18.2.10"], &[0]);
    with_lab("novip", cfg(), plan, |lab, dp| {
        let cases = [
            frame(
                lab.in_mac,
                ROUTER_MAC,
                ip(CLIENT4),
                ip(VIP4),
                &tcp(40000, 81, SYN),
            ),
            frame(
                lab.in_mac,
                ROUTER_MAC,
                ip(CLIENT4),
                ip(VIP4),
                &udp(40000, 80),
            ),
            frame(
                lab.in_mac,
                ROUTER_MAC,
                ip(CLIENT4),
                ip("198.18.100.2"),
                &tcp(40000, 80, SYN),
            ),
            frame(
                lab.in_mac,
                ROUTER_MAC,
                ip(CLIENT6),
                ip(VIP6),
                &tcp(40000, 80, SYN),
            ),
        ];
        for (i, f) in cases.iter().enumerate() {
            let (v, out) = dp.test_run(f, lab.in_idx).unwrap();
            assert_eq!(
                (v, &out),
                (XDP_PASS, f),
                "case {i} untouched, to the kernel"
            );
        }
        assert_eq!(count(dp, Reason::PassNotVip), 4);
    });
}

#[test]
fn bad_and_truncated_headers_go_to_the_kernel() {
    let plan = one_service(VIP4, Mode::Nat, &["198.18.2.10"], &[0]);
    with_lab("bad", cfg(), plan, |lab, dp| {
        let good = frame(
            lab.in_mac,
            ROUTER_MAC,
            ip(CLIENT4),
            ip(VIP4),
            &tcp(40000, 80, SYN),
        );
        let mut options = good.clone();
        options[14] = 0x46; // IHL 6
        let mut frag = good.clone();
        frag[20] = 0x20; // MF
        let mut long = good.clone();
        long[17] = long[17].wrapping_add(40); // total length beyond the frame
        let mut doff = good.clone();
        doff[14 + 20 + 12] = 0x40; // TCP data offset 4
        let mut vlan = good[..12].to_vec();
        vlan.extend([0x81, 0, 0, 7]);
        vlan.extend(&good[12..]);
        let mut arp = good[..12].to_vec();
        arp.extend([0x08, 0x06]);
        arp.extend([0u8; 28]);
        let cases: Vec<(&str, Vec<u8>, Reason)> = vec![
            ("ethernet only", good[..14].to_vec(), Reason::PassBadHeader),
            (
                "half an IP header",
                good[..24].to_vec(),
                Reason::PassBadHeader,
            ),
            (
                "half a TCP header",
                good[..44].to_vec(),
                Reason::PassBadHeader,
            ),
            ("IP options", options, Reason::PassIpOptions),
            ("fragment", frag, Reason::PassFragment),
            ("length beyond the frame", long, Reason::PassBadHeader),
            ("data offset < 5", doff, Reason::PassBadHeader),
            ("VLAN tag", vlan, Reason::PassVlan),
            ("ARP", arp, Reason::PassNotIp),
        ];
        for (what, f, why) in cases {
            let before = count(dp, why);
            let (v, out) = dp.test_run(&f, lab.in_idx).unwrap();
            assert_eq!((v, out), (XDP_PASS, f), "{what}: untouched, to the kernel");
            assert_eq!(count(dp, why), before + 1, "{what}: counted as {why:?}");
        }
        assert_eq!(dp.program().rev_count(), 0, "nothing translated");
    });
}

#[test]
fn rr_and_wrr_walk_their_sequence_with_this_cpus_cursor() {
    let mut plan = one_service(VIP4, Mode::Dr, &["198.18.2.10", "198.18.2.11"], &[0]);
    // wrr with weights 1:2 as the plan writes it: a sequence, any length.
    plan.services[0].scheduler = Scheduler::Wrr;
    plan.services[0].lookup = vec![0, 1, 1];
    with_lab("wrr", cfg(), plan, |lab, dp| {
        let mut seen = Vec::new();
        for port in 40000..40006 {
            let syn = frame(
                lab.in_mac,
                ROUTER_MAC,
                ip(CLIENT4),
                ip(VIP4),
                &tcp(port, 80, SYN),
            );
            let (_, out) = dp.test_run(&syn, lab.in_idx).unwrap();
            seen.push(real_of(&out));
        }
        assert_eq!(seen, [0, 1, 1, 0, 1, 1]);
        // Established flows keep their real; only openings move the cursor.
        let ack = frame(
            lab.in_mac,
            ROUTER_MAC,
            ip(CLIENT4),
            ip(VIP4),
            &tcp(40000, 80, ACK),
        );
        let (_, out) = dp.test_run(&ack, lab.in_idx).unwrap();
        assert_eq!(real_of(&out), 0);
        let syn = frame(
            lab.in_mac,
            ROUTER_MAC,
            ip(CLIENT4),
            ip(VIP4),
            &tcp(40006, 80, SYN),
        );
        let (_, out) = dp.test_run(&syn, lab.in_idx).unwrap();
        assert_eq!(real_of(&out), 0, "the cursor went on from where it was");
    });
}

#[test]
fn full_nat_ports_come_from_this_cpus_share() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    with_lab(
        "port",
        cfg(),
        fnat_plan(VIP4, "198.18.2.10", "198.18.2.1", false),
        move |lab, dp| {
            for cpu in 0..cpus.min(dp.program().shape.nr_cpus as usize) {
                pin(cpu);
                let (lo, hi) = dp.program().port_share(cpu as u32);
                let mut ports = std::collections::BTreeSet::new();
                for port in 0..20 {
                    let syn = frame(
                        lab.in_mac,
                        ROUTER_MAC,
                        ip(CLIENT4),
                        ip(VIP4),
                        &tcp(30000 + cpu as u16 * 100 + port, 80, SYN),
                    );
                    let (v, out) = dp.test_run(&syn, lab.in_idx).unwrap();
                    assert_eq!(v, XDP_REDIRECT);
                    let lport = sport_of(&out) as u32;
                    assert!(
                        (lo..hi).contains(&lport),
                        "CPU {cpu}: port {lport} outside [{lo}, {hi})"
                    );
                    ports.insert(lport);
                }
                assert_eq!(ports.len(), 20, "CPU {cpu}: every connection its own port");
            }
            pin(0);
            assert_eq!(
                dp.program().rev_count(),
                20 * cpus.min(dp.program().shape.nr_cpus as usize)
            );
        },
    );
}

#[test]
fn a_service_without_weight_drops_new_connections_and_keeps_established_ones() {
    let plan = one_service(VIP4, Mode::Dr, &["198.18.2.10"], &[0]);
    with_lab("none", cfg(), plan, |lab, dp| {
        let pkt = |port, flags| {
            frame(
                lab.in_mac,
                ROUTER_MAC,
                ip(CLIENT4),
                ip(VIP4),
                &tcp(port, 80, flags),
            )
        };
        dp.test_run(&pkt(40000, SYN), lab.in_idx).unwrap();
        let mut empty = one_service(VIP4, Mode::Dr, &["198.18.2.10"], &[0]);
        empty.services[0].lookup.clear();
        dp.apply(&empty).unwrap();
        let (v, out) = dp.test_run(&pkt(40000, ACK), lab.in_idx).unwrap();
        assert_eq!((v, real_of(&out)), (XDP_REDIRECT, 0));
        let (v, _) = dp.test_run(&pkt(40001, SYN), lab.in_idx).unwrap();
        assert_eq!(v, XDP_DROP);
        assert_eq!(count(dp, Reason::DropNoReal), 1);
        // Zeroing clears every counter.
        dp.zero().unwrap();
        assert_eq!(count(dp, Reason::DropNoReal), 0);
        assert_eq!(dp.stats().unwrap().services[0].in_pkts, 0);
    });
}

#[test]
fn a_real_whose_neighbour_is_unresolved_is_the_kernels() {
    let plan = one_service(VIP4, Mode::Dr, &["198.18.2.13"], &[0]);
    with_lab("neigh", cfg(), plan, |lab, dp| {
        let syn = frame(
            lab.in_mac,
            ROUTER_MAC,
            ip(CLIENT4),
            ip(VIP4),
            &tcp(40000, 80, SYN),
        );
        let (v, out) = dp.test_run(&syn, lab.in_idx).unwrap();
        assert_eq!((v, out), (XDP_PASS, syn));
        assert_eq!(count(dp, Reason::PassNoNeigh), 1);
    });
}

#[test]
fn attach_refuses_a_veth_whose_peer_runs_no_napi_and_detaches_on_drop() {
    let (ns, _) = lab("att");
    let peer_gro = ns.exec("ethtool", &["-K", "in0p", "gro", "off"]);
    assert!(peer_gro.is_ok());
    let name = ns.name().to_string();
    let c = AttachConfig {
        ifaces: vec!["in0".into()],
        ..cfg()
    };
    let c2 = c.clone();
    let err = ns
        .run(move || XdpDataPlane::attach(&c2).err().map(|e| e.to_string()))
        .unwrap()
        .expect("refused");
    assert!(err.contains("gro on"), "{err}");
    ns.exec("ethtool", &["-K", "in0p", "gro", "on"]).unwrap();
    let attached = ns
        .run(move || {
            let dp = XdpDataPlane::attach(&c).unwrap();
            let on = wirespeed_sys::bpf::xdp_query(dp.attached()[0].1)
                .unwrap()
                .prog_id
                != 0;
            let idx = dp.attached()[0].1;
            drop(dp);
            // A child another test forks in parallel may hold the link's fd until its
            // exec closes it (close-on-exec): wait for that, however long it takes.
            let mut left = wirespeed_sys::bpf::xdp_query(idx).unwrap().prog_id;
            for _ in 0..500 {
                if left == 0 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
                left = wirespeed_sys::bpf::xdp_query(idx).unwrap().prog_id;
            }
            (on, left)
        })
        .unwrap();
    assert_eq!(
        attached,
        (true, 0),
        "attached, then detached on drop ({name})"
    );
}
