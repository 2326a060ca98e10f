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
        assert_eq!(dp.program().half_open_count().1 as u64, 6 - limited);
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
        // ICMP with IPv4 options (NOP, NOP, NOP, end): an answer would have to echo them.
        let ping = L4::Icmp {
            ty: 8,
            code: 0,
            rest: [0, 1, 0, 1],
            payload: vec![0; 16],
        };
        let plain = frame(lab.in_mac, ROUTER_MAC, ip(CLIENT4), ip(VIP4), &ping);
        let mut options = plain[..34].to_vec();
        options.extend([1, 1, 1, 0]);
        options.extend(&plain[34..]);
        options[14] = 0x46; // IHL 6
        options[17] += 4; // total length
        fix_ipv4_csum(&mut options);

        // A header changed by hand gets its checksum fixed, or it would be a bad checksum.
        // Fragments the data path does not serve: of ICMP, and a first fragment too short
        // to hold its TCP header (the frame's padding holds the rest).
        let echo = L4::Icmp {
            ty: 8,
            code: 0,
            rest: [0, 1, 0, 1],
            payload: vec![0; 16],
        };
        let mut frag = frame(lab.in_mac, ROUTER_MAC, ip(CLIENT4), ip(VIP4), &echo);
        frag[20] = 0x20; // MF
        fix_ipv4_csum(&mut frag);
        let mut tiny = good.clone();
        tiny[20] = 0x20; // MF
        tiny[16..18].copy_from_slice(&36u16.to_be_bytes()); // 16 bytes of TCP header
        fix_ipv4_csum(&mut tiny);
        let mut long = good.clone();
        long[17] = long[17].wrapping_add(40); // total length beyond the frame
        fix_ipv4_csum(&mut long);
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
            ("ICMP with IP options", options, Reason::PassIpOptions),
            ("ICMP fragment", frag, Reason::PassFragment),
            ("first fragment of 16 bytes", tiny, Reason::PassFragment),
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
                dp.program().half_open_count().0,
                20 * cpus.min(dp.program().shape.nr_cpus as usize),
                "each SYN's reply entry waits in half_open"
            );
        },
    );
}

#[test]
fn a_service_without_weight_drops_new_connections_and_keeps_established_ones() {
    let plan = one_service(VIP4, Mode::Dr, &["198.18.2.10"], &[0]);
    with_lab("none", cfg(), plan, |lab, dp| {
        let pkt = |port, flags| lab.client_tcp(CLIENT4, VIP4, port, flags);
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
        assert_eq!((v, out), (XDP_PASS, syn.clone()));
        assert_eq!(count(dp, Reason::PassNoNeigh), 1);

        // Resolved, the FIB's MAC; changed, the new MAC once the CPU's cached way to the
        // real (kept for a second) has run out.
        let set_mac = |m: &str| {
            let st = std::process::Command::new("ip")
                .args(["neigh", "replace", "198.18.2.13", "lladdr", m])
                .args(["dev", "out0", "nud", "permanent"])
                .status()
                .unwrap();
            assert!(st.success());
        };
        set_mac("02:00:00:00:13:01");
        let (v, out) = dp.test_run(&syn, lab.in_idx).unwrap();
        assert_eq!(v, XDP_REDIRECT);
        assert_eq!(out[..6], [2, 0, 0, 0, 0x13, 1]);
        set_mac("02:00:00:00:13:02");
        std::thread::sleep(std::time::Duration::from_millis(1200));
        let (v, out) = dp.test_run(&syn, lab.in_idx).unwrap();
        assert_eq!(v, XDP_REDIRECT);
        assert_eq!(out[..6], [2, 0, 0, 0, 0x13, 2], "the changed neighbour");
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

#[test]
fn a_retransmitted_full_nat_syn_keeps_its_local_port() {
    with_lab(
        "rsyn",
        cfg(),
        fnat_plan(VIP4, "198.18.2.10", "198.18.2.1", false),
        |lab, dp| {
            let syn = frame(
                lab.in_mac,
                ROUTER_MAC,
                ip(CLIENT4),
                ip(VIP4),
                &tcp(40000, 80, SYN),
            );
            let (_, first) = dp.test_run(&syn, lab.in_idx).unwrap();
            let (_, again) = dp.test_run(&syn, lab.in_idx).unwrap();
            assert_eq!(sport_of(&again), sport_of(&first));
            assert_eq!(
                dp.program().half_open_count(),
                (1, 1),
                "one reply entry and one forward entry for one connection"
            );
        },
    );
}

#[test]
fn udp_through_nat_keeps_its_checksums_and_a_zero_checksum_stays_zero() {
    let mut plan = one_service(VIP4, Mode::Nat, &["198.18.2.10"], &[0]);
    plan.services[0].key.proto = Proto::Udp;
    with_lab("udp", cfg(), plan, |lab, dp| {
        let input = frame(
            lab.in_mac,
            ROUTER_MAC,
            ip(CLIENT4),
            ip(VIP4),
            &udp(40000, 80),
        );
        let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
        assert_eq!(v, XDP_REDIRECT);
        let expect = hopped(&frame(
            REAL_MACS[0],
            lab.out_mac,
            ip(CLIENT4),
            ip("198.18.2.10"),
            &udp(40000, 8080),
        ));
        assert_eq!(out, expect);
        verify_checksums(&out);
        let reply = frame(
            lab.out_mac,
            REAL_MACS[0],
            ip("198.18.2.10"),
            ip(CLIENT4),
            &udp(8080, 40000),
        );
        let (v, out) = dp.test_run(&reply, lab.out_idx).unwrap();
        assert_eq!(v, XDP_REDIRECT);
        assert_eq!(
            out,
            hopped(&frame(
                ROUTER_MAC,
                lab.in_mac,
                ip(VIP4),
                ip(CLIENT4),
                &udp(80, 40000)
            ))
        );
        verify_checksums(&out);

        let mut no_sum = frame(
            lab.in_mac,
            ROUTER_MAC,
            ip(CLIENT4),
            ip(VIP4),
            &udp(40001, 80),
        );
        no_sum[40..42].copy_from_slice(&[0, 0]);
        let (_, out) = dp.test_run(&no_sum, lab.in_idx).unwrap();
        assert_eq!(&out[40..42], &[0, 0], "no checksum stays no checksum");
        verify_checksums(&out);
    });
}

#[test]
fn too_big_follows_a_tunnel_flow_and_unknown_nat_ones_go_to_the_kernel() {
    let plan = one_service(VIP4, Mode::Tunnel, &["198.18.2.10"], &[0]);
    with_lab("tbt", cfg(), plan, |lab, dp| {
        let syn = ip_packet(ip(CLIENT4), ip(VIP4), &tcp(40000, 80, SYN));
        let (_, out) = dp
            .test_run(&eth(lab.in_mac, ROUTER_MAC, false, &syn), lab.in_idx)
            .unwrap();
        let outer_src = out[26..30].to_vec();
        let quoted = ip_packet(ip(VIP4), ip(CLIENT4), &tcp(80, 40000, ACK));
        let icmp = L4::Icmp {
            ty: 3,
            code: 4,
            rest: [0, 0, 0x05, 0x00],
            payload: quoted[..28].to_vec(),
        };
        let inner = ip_packet(ip("198.18.50.1"), ip(VIP4), &icmp);
        let (v, out) = dp
            .test_run(&eth(lab.in_mac, ROUTER_MAC, false, &inner), lab.in_idx)
            .unwrap();
        assert_eq!(v, XDP_REDIRECT);
        let src = format!(
            "{}.{}.{}.{}",
            outer_src[0], outer_src[1], outer_src[2], outer_src[3]
        );
        let mut expect = tunneled(&lab, 0, &src, "198.18.2.10", &inner);
        // The outer DF follows the ICMP packet's own (set by the builder).
        expect[20] = out[20];
        let c = fold(
            sum16(&expect[14..34], 0) + (!u16::from_be_bytes([expect[24], expect[25]])) as u32,
        );
        expect[24..26].copy_from_slice(&c.to_be_bytes());
        assert_eq!(out, expect);
        verify_checksums(&out);

        dp.apply(&one_service(VIP4, Mode::Nat, &["198.18.2.10"], &[0]))
            .unwrap();
        // A NAT flow no table knows (fixtures_icmp.rs has the known ones): never scheduled.
        let quoted = ip_packet(ip(VIP4), ip(CLIENT4), &tcp(80, 40001, ACK));
        let icmp = L4::Icmp {
            ty: 3,
            code: 4,
            rest: [0, 0, 0x05, 0x00],
            payload: quoted[..28].to_vec(),
        };
        let input = frame(lab.in_mac, ROUTER_MAC, ip("198.18.50.1"), ip(VIP4), &icmp);
        let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
        assert_eq!((v, out), (XDP_PASS, input));
        assert_eq!(count(dp, Reason::PassIcmpNat), 1);
    });
}

#[test]
fn a_removed_service_and_its_echo_go_to_the_kernel() {
    let plan = one_service(VIP4, Mode::Dr, &["198.18.2.10"], &[0]);
    with_lab("rm", cfg(), plan, |lab, dp| {
        dp.apply(&Plan {
            ring_size: RING,
            ..Plan::default()
        })
        .unwrap();
        let syn = frame(
            lab.in_mac,
            ROUTER_MAC,
            ip(CLIENT4),
            ip(VIP4),
            &tcp(40000, 80, SYN),
        );
        assert_eq!(dp.test_run(&syn, lab.in_idx).unwrap().0, XDP_PASS);
        let echo = L4::Icmp {
            ty: 8,
            code: 0,
            rest: [0; 4],
            payload: Vec::new(),
        };
        let ping = frame(lab.in_mac, ROUTER_MAC, ip(CLIENT4), ip(VIP4), &echo);
        assert_eq!(dp.test_run(&ping, lab.in_idx).unwrap().0, XDP_PASS);
        assert_eq!(count(dp, Reason::PassNotVip), 2);
    });
}

#[test]
fn tunnel_4in6_carries_a_v4_vip_to_a_v6_real() {
    let plan = one_service(VIP4, Mode::Tunnel, &["fd00:2::10"], &[0]);
    with_lab("4in6", cfg(), plan, |lab, dp| {
        let inner = ip_packet(ip(CLIENT4), ip(VIP4), &tcp(40000, 80, SYN));
        let (v, out) = dp
            .test_run(&eth(lab.in_mac, ROUTER_MAC, false, &inner), lab.in_idx)
            .unwrap();
        assert_eq!(v, XDP_REDIRECT);
        let mut expect = tunneled(&lab, 0, "fd00:2::1", "fd00:2::10", &inner);
        expect[15..18].copy_from_slice(&out[15..18]);
        assert_eq!(out, expect);
        verify_checksums(&out);
    });
}

#[test]
fn packet_too_big_v6_reaches_the_dr_real_of_the_flow() {
    let plan = one_service(VIP6, Mode::Dr, &["fd00:2::10", "fd00:2::11"], &[0, 1]);
    with_lab("ptb6", cfg(), plan, |lab, dp| {
        for port in 40000..40004 {
            let syn = frame(
                lab.in_mac,
                ROUTER_MAC,
                ip(CLIENT6),
                ip(VIP6),
                &tcp(port, 80, SYN),
            );
            let (_, out) = dp.test_run(&syn, lab.in_idx).unwrap();
            let real_mac: [u8; 6] = out[..6].try_into().unwrap();
            let quoted = ip_packet(ip(VIP6), ip(CLIENT6), &tcp(80, port, ACK));
            let icmp = L4::Icmp {
                ty: 2,
                code: 0,
                rest: 1280u32.to_be_bytes(),
                payload: quoted[..48].to_vec(),
            };
            let input = frame(lab.in_mac, ROUTER_MAC, ip("fd00:50::1"), ip(VIP6), &icmp);
            let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
            assert_eq!(v, XDP_REDIRECT);
            assert_eq!(
                out,
                hopped(&frame(
                    real_mac,
                    lab.out_mac,
                    ip("fd00:50::1"),
                    ip(VIP6),
                    &icmp
                ))
            );
            verify_checksums(&out);
        }
    });
}

#[test]
fn a_fin_marks_the_full_nat_port_closed_for_reuse() {
    with_lab(
        "fin",
        cfg(),
        fnat_plan(VIP4, "198.18.2.10", "198.18.2.1", false),
        |lab, dp| {
            let pkt = |flags| {
                frame(
                    lab.in_mac,
                    ROUTER_MAC,
                    ip(CLIENT4),
                    ip(VIP4),
                    &tcp(40000, 80, flags),
                )
            };
            let (_, out) = dp.test_run(&pkt(SYN), lab.in_idx).unwrap();
            real_syn_ack(&lab, dp, "198.18.2.10", "198.18.2.1", sport_of(&out));
            dp.test_run(&pkt(ACK), lab.in_idx).unwrap();
            // lb_rev.flags sits after vip, client, vport, cport, real and service.
            let flags = |dp: &XdpDataPlane| {
                let rev = &dp.program().maps.rev;
                let k = rev
                    .keys()
                    .find(|k| !wirespeed_lb::datapath::loader::is_forward_key(k))
                    .expect("one reply entry");
                rev.lookup(&k, libbpf_rs::MapFlags::ANY).unwrap().unwrap()[44]
            };
            assert_eq!(flags(dp) & 0x02, 0, "open");
            let (v, _) = dp.test_run(&pkt(FIN | ACK), lab.in_idx).unwrap();
            assert_eq!(v, XDP_REDIRECT);
            assert_eq!(
                flags(dp) & 0x02,
                0x02,
                "closed: its port may go to another connection after the grace"
            );
            assert_eq!(flags(dp) & 0x01, 0x01, "a full-NAT entry");
        },
    );
}

#[test]
fn udp_flows_of_a_wrr_service_are_placed_by_hash_the_same_on_every_cpu() {
    let mut plan = one_service(VIP4, Mode::Dr, &["198.18.2.10", "198.18.2.11"], &[0]);
    plan.services[0].key.proto = Proto::Udp;
    plan.services[0].scheduler = Scheduler::Wrr;
    plan.services[0].lookup = vec![0, 1, 1];
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    with_lab("uwrr", cfg(), plan, move |lab, dp| {
        let mut per_real = [0; 2];
        for port in 40000..40060 {
            let f = frame(
                lab.in_mac,
                ROUTER_MAC,
                ip(CLIENT4),
                ip(VIP4),
                &udp(port, 80),
            );
            pin(0);
            let (_, out) = dp.test_run(&f, lab.in_idx).unwrap();
            let r = real_of(&out);
            per_real[r] += 1;
            if cpus > 1 && dp.program().shape.nr_cpus > 1 {
                pin(1);
                let (_, out) = dp.test_run(&f, lab.in_idx).unwrap();
                assert_eq!(
                    real_of(&out),
                    r,
                    "port {port}: the same real from another CPU"
                );
            }
        }
        pin(0);
        assert!(
            per_real[0] > 0 && per_real[1] > per_real[0],
            "both reals, real 1 more: {per_real:?}"
        );
    });
}

/// The frame as a local sender with checksum offload hands it over: the TCP/UDP checksum
/// field holds only the pseudo-header sum (CHECKSUM_PARTIAL).
fn partial(mut f: Vec<u8>) -> Vec<u8> {
    let v6 = f[12] == 0x86;
    let (l4, src, dst): (usize, IpAddr, IpAddr) = if v6 {
        let s: [u8; 16] = f[22..38].try_into().unwrap();
        let d: [u8; 16] = f[38..54].try_into().unwrap();
        (54, s.into(), d.into())
    } else {
        let s: [u8; 4] = f[26..30].try_into().unwrap();
        let d: [u8; 4] = f[30..34].try_into().unwrap();
        (34, s.into(), d.into())
    };
    let proto = if v6 { f[20] } else { f[23] };
    let at = l4 + if proto == 6 { 16 } else { 6 };
    let sum = !fold(pseudo(src, dst, proto, f.len() - l4));
    f[at..at + 2].copy_from_slice(&sum.to_be_bytes());
    f
}

#[test]
fn a_partial_checksum_from_a_local_sender_is_completed() {
    let plan = fnat_plan(VIP4, "198.18.2.10", "198.18.2.1", false);
    with_lab("part", cfg(), plan, |lab, dp| {
        // An odd-length payload: the last byte is summed on its own.
        let l4 = seg(40000, 80, SYN, MSS.to_vec(), b"abc".to_vec());
        let input = partial(frame(lab.in_mac, ROUTER_MAC, ip(CLIENT4), ip(VIP4), &l4));
        let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
        assert_eq!(v, XDP_REDIRECT);
        verify_checksums(&out);
        assert_eq!(count(dp, Reason::CsumCompleted), 1);
        // DR and tunnel forward the frame as it is: completed too.
        dp.apply(&one_service(VIP6, Mode::Dr, &["fd00:2::10"], &[0]))
            .unwrap();
        let input = partial(frame(
            lab.in_mac,
            ROUTER_MAC,
            ip(CLIENT6),
            ip(VIP6),
            &tcp(40000, 80, SYN),
        ));
        let (v, out) = dp.test_run(&input, lab.in_idx).unwrap();
        assert_eq!(v, XDP_REDIRECT);
        assert_eq!(
            out,
            hopped(&frame(
                REAL_MACS[0],
                lab.out_mac,
                ip(CLIENT6),
                ip(VIP6),
                &tcp(40000, 80, SYN)
            ))
        );
        assert_eq!(count(dp, Reason::CsumCompleted), 2);
    });
}

#[test]
fn plans_from_services_spread_by_weight_and_a_removal_moves_only_its_share() {
    use wirespeed_lb::model::{Health, Real, Service};
    const M: u32 = 251;
    let svc = |reals: &[(&str, u32)]| Service {
        key: ServiceKey {
            proto: Proto::Tcp,
            vip: sa(VIP4, 80),
        },
        scheduler: Scheduler::Mh,
        reals: reals
            .iter()
            .map(|(a, w)| Real {
                addr: sa(a, 8080),
                mode: Mode::Dr,
                tunnel: Default::default(),
                weight: *w,
                health: Health::Unchecked,
            })
            .collect(),
        laddrs: Vec::new(),
        toa: false,
        check: None,
    };
    let three = [("198.18.2.10", 1), ("198.18.2.11", 1), ("198.18.2.12", 2)];
    let first = wirespeed_lb::plan::build(&[svc(&three)], M, None).unwrap();
    let c = AttachConfig {
        ring_size: M,
        // Room for every flow: an eviction would be a miss, placed by the new table.
        conns_per_cpu: 8192,
        ..cfg()
    };
    with_lab("plan", c, first.clone(), move |lab, dp| {
        let syn = |port| {
            frame(
                lab.in_mac,
                ROUTER_MAC,
                ip(CLIENT4),
                ip(VIP4),
                &tcp(port, 80, SYN),
            )
        };
        let ack = |port| {
            frame(
                lab.in_mac,
                ROUTER_MAC,
                ip(CLIENT4),
                ip(VIP4),
                &tcp(port, 80, ACK),
            )
        };
        let mut placed = Vec::new();
        let mut per_real = [0u32; 3];
        for port in 20000..22000 {
            let (_, out) = dp.test_run(&syn(port), lab.in_idx).unwrap();
            let r = real_of(&out);
            per_real[r] += 1;
            placed.push(r);
        }
        // 1:1:2 over 2000 connections: 500, 500, 1000, give or take what the hash does.
        for (r, want) in [(0, 500.0), (1, 500.0), (2, 1000.0)] {
            let got = per_real[r] as f64;
            assert!(
                (got - want).abs() / want < 0.15,
                "real {r}: {got} of 2000, want about {want}"
            );
        }
        // Real 1 leaves: its slot empties, the others keep theirs.
        let two = [("198.18.2.10", 1), ("198.18.2.12", 2)];
        let second = wirespeed_lb::plan::build(&[svc(&two)], M, Some(&first)).unwrap();
        dp.apply(&second).unwrap();
        let (mut others, mut moved) = (0, 0);
        for (i, port) in (20000..22000).enumerate() {
            let before = placed[i];
            if before != 1 {
                let (v, out) = dp.test_run(&ack(port), lab.in_idx).unwrap();
                assert_eq!(
                    (v, real_of(&out)),
                    (XDP_REDIRECT, before),
                    "established flows of the others stay"
                );
            }
            // The same flow opening anew is scheduled afresh on the new table.
            let (_, out) = dp.test_run(&syn(port), lab.in_idx).unwrap();
            let now = real_of(&out);
            assert_ne!(now, 1, "nothing new goes to the removed real");
            if before != 1 {
                others += 1;
                moved += (now != before) as u32;
            }
        }
        // Maglev: the removed real's flows move, the others' (almost) all stay.
        assert!(moved * 10 < others, "{moved} of {others} other flows moved");
    });
}

#[test]
fn a_nat_connection_found_on_another_cpu_keeps_its_translation() {
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("one CPU: nothing to show");
        return;
    }
    with_lab(
        "xcpu",
        cfg(),
        fnat_plan(VIP4, "198.18.2.10", "198.18.2.1", false),
        |lab, dp| {
            let pkt = |flags| {
                frame(
                    lab.in_mac,
                    ROUTER_MAC,
                    ip(CLIENT4),
                    ip(VIP4),
                    &tcp(40000, 80, flags),
                )
            };
            let (_, syn) = dp.test_run(&pkt(SYN), lab.in_idx).unwrap();
            assert_eq!(dp.program().half_open_count(), (1, 1));
            real_syn_ack(&lab, dp, "198.18.2.10", "198.18.2.1", sport_of(&syn));
            pin(1);
            let (v, ack) = dp.test_run(&pkt(ACK), lab.in_idx).unwrap();
            pin(0);
            assert_eq!((dp.program().rev_count(), dp.program().fwd_count()), (1, 1));
            assert_eq!(dp.program().half_open_count(), (0, 0));
            assert_eq!(v, XDP_REDIRECT, "not handed to the kernel as unknown");
            assert_eq!(sport_of(&ack), sport_of(&syn), "the SYN's local port");
            verify_checksums(&ack);
            assert_eq!(
                dp.program().conn_count(1),
                1,
                "CPU 1 learned the connection"
            );
            assert_eq!(count(dp, Reason::PassNoConn), 0);
        },
    );
}

#[test]
fn on_veths_an_answer_leaves_by_redirect_not_xdp_tx() {
    let (ns, lab) = lab("txr");
    ns.run(move || {
        pin(0);
        let prog = wirespeed_lb::datapath::Program::load_for(&cfg(), true).unwrap();
        prog.set_namespace_macs().unwrap();
        let mut dp_plan = one_service(VIP4, Mode::Dr, &["198.18.2.10"], &[0]);
        dp_plan.ring_size = RING;
        wirespeed_lb::datapath::maps::apply(&prog, None, &dp_plan).unwrap();
        let echo = |t| L4::Icmp {
            ty: t,
            code: 0,
            rest: [0, 1, 0, 1],
            payload: Vec::new(),
        };
        let input = frame(lab.in_mac, ROUTER_MAC, ip(CLIENT4), ip(VIP4), &echo(8));
        let (v, out) = prog.test_run(&input, lab.in_idx).unwrap();
        assert_eq!(v, XDP_REDIRECT);
        assert_eq!(
            out,
            frame(ROUTER_MAC, lab.in_mac, ip(VIP4), ip(CLIENT4), &echo(0))
        );
    })
    .unwrap();
}
