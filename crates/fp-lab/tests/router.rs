//! Router module fixtures through BPF_PROG_TEST_RUN: input frame -> expected verdict and
//! output bytes. The FIB the program consults is a real one, in a lab namespace.

use wirespeed_fp::datapath::loader::Program;
use wirespeed_fp::datapath::stats::Reason;
use wirespeed_fp::datapath::test_run::{SkbMeta, TC_KERNEL, TC_REDIRECT, XDP_PASS, XDP_REDIRECT};
use wirespeed_fp::model::features::{Features, PolicyRules, Reassembly, RouteCache, Switches};
use wirespeed_lab::Netns;
use wirespeed_testkit::csum;
use wirespeed_testkit::frame::{self as pkt, L4};

use wirespeed_fp_lab::line::ifindex;

const NEXT_HOP_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x02, 0x02];
const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x01, 0x02];
const SRC4: [u8; 4] = [198, 18, 1, 2];
const DST4: [u8; 4] = [198, 18, 100, 7];

fn v6(last: u16, net: u16) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[0] = 0xfd;
    a[2..4].copy_from_slice(&net.to_be_bytes());
    a[14..16].copy_from_slice(&last.to_be_bytes());
    a
}

struct Lab {
    ns: Netns,
    in_idx: u32,
    out_idx: u32,
    in_mac: [u8; 6],
    out_mac: [u8; 6],
}

fn mac(ns: &Netns, ifname: &str) -> [u8; 6] {
    pkt::parse_mac(
        &ns.exec("cat", &[&format!("/sys/class/net/{ifname}/address")])
            .unwrap(),
    )
    .unwrap()
}

/// One namespace, two veth pairs: in0 (198.18.1.1/24, fd00:1::1/64) and out0
/// (198.18.2.1/24, fd00:2::1/64) with a permanent neighbour 198.18.2.2 / fd00:2::2 that routes
/// to 198.18.100.0/24 and fd00:100::/64 point at.
fn lab(tag: &str) -> Lab {
    wirespeed_lab::require_root();
    let ns = Netns::create(&format!("ws-fr{}{}", tag, std::process::id() % 100000)).unwrap();
    for (a, b) in [("in0", "in0p"), ("out0", "out0p")] {
        ns.ip(&["link", "add", a, "type", "veth", "peer", "name", b])
            .unwrap();
        ns.ip(&["link", "set", a, "up"]).unwrap();
        ns.ip(&["link", "set", b, "up"]).unwrap();
    }
    for (dev, a) in [
        ("in0", "198.18.1.1/24"),
        ("out0", "198.18.2.1/24"),
        ("in0", "fd00:1::1/64"),
        ("out0", "fd00:2::1/64"),
    ] {
        wirespeed_lab::netns::add_addr(&ns, dev, a).unwrap();
    }
    let nh = "02:00:00:00:02:02";
    ns.ip(&[
        "neigh",
        "add",
        "198.18.2.2",
        "lladdr",
        nh,
        "dev",
        "out0",
        "nud",
        "permanent",
    ])
    .unwrap();
    ns.ip(&[
        "-6",
        "neigh",
        "add",
        "fd00:2::2",
        "lladdr",
        nh,
        "dev",
        "out0",
        "nud",
        "permanent",
    ])
    .unwrap();
    ns.ip(&[
        "neigh",
        "add",
        "198.18.1.9",
        "lladdr",
        nh,
        "dev",
        "in0",
        "nud",
        "permanent",
    ])
    .unwrap();
    ns.ip(&["route", "add", "198.18.100.0/24", "via", "198.18.2.2"])
        .unwrap();
    ns.ip(&["route", "add", "198.18.101.0/24", "via", "198.18.2.3"])
        .unwrap();
    ns.ip(&["-6", "route", "add", "fd00:100::/64", "via", "fd00:2::2"])
        .unwrap();
    // A station on the ingress side, routes that answer themselves and one with a
    // lightweight tunnel (hands_the_kernel_everything_it_must_decide).
    for cmd in [
        "-6 neigh add fd00:1::9 lladdr 02:00:00:00:02:02 dev in0 nud permanent",
        "route add blackhole 198.18.102.0/24",
        "-6 route add blackhole fd00:102::/64",
        "route add 198.18.103.0/24 encap ip id 1 dst 198.18.2.2 via 198.18.2.2 dev out0",
    ] {
        ns.ip(&cmd.split(' ').collect::<Vec<_>>()).unwrap();
    }
    ns.sysctl("net.ipv4.ip_forward", "1").unwrap();
    ns.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
    let in_idx = ifindex(&ns, "in0");
    let out_idx = ifindex(&ns, "out0");
    let in_mac = mac(&ns, "in0");
    let out_mac = mac(&ns, "out0");
    Lab {
        ns,
        in_idx,
        out_idx,
        in_mac,
        out_mac,
    }
}

fn router_features(mac: [u8; 6]) -> Features {
    Features {
        router_v4: true,
        router_v6: true,
        mac,
        ..Features::default()
    }
}

fn udp() -> L4 {
    L4::Udp {
        sport: 1000,
        dport: 2000,
        payload: vec![0xab; 18],
    }
}

/// An ICMP error of `ty` quoting an IPv4 UDP header (checksum left 0: the router reads only
/// the type).
fn icmp_error(ty: u8) -> L4 {
    let mut payload = vec![ty, 0, 0, 0, 0, 0, 0, 0, 0x45, 0, 0, 28];
    payload.resize(8 + 28, 0);
    L4::Raw { proto: 1, payload }
}

fn icmp6_error(ty: u8) -> L4 {
    let mut payload = vec![ty, 0, 0, 0, 0, 0, 0x05, 0xdc, 0x60];
    payload.resize(8 + 48, 0);
    L4::Raw { proto: 58, payload }
}

#[test]
fn forwards_ipv4_and_ipv6_like_the_kernel() {
    let lab = lab("a");
    let (in_idx, out_idx, in_mac, out_mac) = (lab.in_idx, lab.out_idx, lab.in_mac, lab.out_mac);
    lab.ns
        .run(move || {
            let prog = Program::load(&router_features(in_mac)).unwrap();
            prog.set_tx_ports(&[in_idx, out_idx]).unwrap();

            let input = pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 64, &[], &udp());
            let expect = pkt::ipv4(NEXT_HOP_MAC, out_mac, SRC4, DST4, 63, &[], &udp());
            let (verdict, out) = prog.test_run(&input, in_idx).unwrap();
            assert_eq!(verdict, XDP_REDIRECT);
            assert_eq!(
                out, expect,
                "IPv4: TTL-1, checksum, MACs rewritten; nothing else"
            );

            let input = pkt::ipv6(in_mac, PEER_MAC, v6(2, 1), v6(9, 0x100), 64, false, &udp());
            let expect = pkt::ipv6(
                NEXT_HOP_MAC,
                out_mac,
                v6(2, 1),
                v6(9, 0x100),
                63,
                false,
                &udp(),
            );
            let (verdict, out) = prog.test_run(&input, in_idx).unwrap();
            assert_eq!(verdict, XDP_REDIRECT);
            assert_eq!(out, expect, "IPv6: hop limit-1, MACs rewritten");

            // TTL 2 is the last one forwarded; its checksum update must carry correctly.
            let input = pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 2, &[], &udp());
            let expect = pkt::ipv4(NEXT_HOP_MAC, out_mac, SRC4, DST4, 1, &[], &udp());
            assert_eq!(
                prog.test_run(&input, in_idx).unwrap(),
                (XDP_REDIRECT, expect)
            );

            // ICMP that is not an error (echo) is forwarded like any datagram.
            let echo = L4::Echo {
                payload: vec![7; 24],
            };
            let input = pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 64, &[], &echo);
            assert_eq!(prog.test_run(&input, in_idx).unwrap().0, XDP_REDIRECT);
            let input = pkt::ipv6(in_mac, PEER_MAC, v6(2, 1), v6(9, 0x100), 64, false, &echo);
            assert_eq!(prog.test_run(&input, in_idx).unwrap().0, XDP_REDIRECT);

            let c = prog.counters().unwrap();
            assert_eq!(c.forwarded(), 5);
        })
        .unwrap();
}

#[test]
fn hands_the_kernel_everything_it_must_decide() {
    let lab = lab("b");
    let (in_idx, out_idx, in_mac) = (lab.in_idx, lab.out_idx, lab.in_mac);
    lab.ns
        .run(move || {
            let prog = Program::load(&router_features(in_mac)).unwrap();
            prog.set_tx_ports(&[in_idx, out_idx]).unwrap();
            let mut bad_csum = pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 64, &[], &udp());
            bad_csum[24] ^= 0xff;
            let cases: Vec<(&str, Vec<u8>, Reason)> = vec![
                (
                    "ttl 1",
                    pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 1, &[], &udp()),
                    Reason::PassTtl,
                ),
                (
                    "ttl 0",
                    pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 0, &[], &udp()),
                    Reason::PassTtl,
                ),
                (
                    "hop limit 1",
                    pkt::ipv6(in_mac, PEER_MAC, v6(2, 1), v6(9, 0x100), 1, false, &udp()),
                    Reason::PassTtl,
                ),
                (
                    "unknown dst",
                    pkt::ipv4(in_mac, PEER_MAC, SRC4, [198, 19, 200, 1], 64, &[], &udp()),
                    Reason::PassNotFwded,
                ),
                (
                    "unknown dst6",
                    pkt::ipv6(in_mac, PEER_MAC, v6(2, 1), v6(9, 0x999), 64, false, &udp()),
                    Reason::PassNotFwded,
                ),
                (
                    "local dst",
                    pkt::ipv4(in_mac, PEER_MAC, SRC4, [198, 18, 2, 1], 64, &[], &udp()),
                    Reason::PassNotFwded,
                ),
                (
                    "no neighbour",
                    pkt::ipv4(in_mac, PEER_MAC, SRC4, [198, 18, 101, 1], 64, &[], &udp()),
                    Reason::PassNoNeigh,
                ),
                (
                    "ip options",
                    pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 64, &[1, 1, 1, 0], &udp()),
                    Reason::PassIpOptions,
                ),
                (
                    "hop-by-hop",
                    pkt::ipv6(in_mac, PEER_MAC, v6(2, 1), v6(9, 0x100), 64, true, &udp()),
                    Reason::PassIpOptions,
                ),
                ("bad checksum", bad_csum, Reason::PassBadHeader),
                (
                    "not our MAC",
                    pkt::ipv4([2, 9, 9, 9, 9, 9], PEER_MAC, SRC4, DST4, 64, &[], &udp()),
                    Reason::PassNotHost,
                ),
                (
                    "multicast dst",
                    pkt::ipv4(in_mac, PEER_MAC, SRC4, [239, 1, 1, 1], 64, &[], &udp()),
                    Reason::PassMartian,
                ),
                (
                    "link-local dst6",
                    pkt::ipv6(
                        in_mac,
                        PEER_MAC,
                        v6(2, 1),
                        {
                            let mut a = v6(9, 0);
                            a[0] = 0xfe;
                            a[1] = 0x80;
                            a
                        },
                        64,
                        false,
                        &udp(),
                    ),
                    Reason::PassMartian,
                ),
                ("arp", pkt::arp(PEER_MAC, SRC4), Reason::PassNotIp),
                (
                    "back out the same port",
                    pkt::ipv4(in_mac, PEER_MAC, SRC4, [198, 18, 1, 9], 64, &[], &udp()),
                    Reason::PassSameIf,
                ),
                (
                    "back out the same port (IPv6: ndisc_send_redirect)",
                    pkt::ipv6(in_mac, PEER_MAC, v6(2, 1), v6(9, 1), 64, false, &udp()),
                    Reason::PassSameIf,
                ),
                (
                    "blackhole route (ip_error answers)",
                    pkt::ipv4(in_mac, PEER_MAC, SRC4, [198, 18, 102, 1], 64, &[], &udp()),
                    Reason::PassUnreachable,
                ),
                (
                    "blackhole route6",
                    pkt::ipv6(in_mac, PEER_MAC, v6(2, 1), v6(1, 0x102), 64, false, &udp()),
                    Reason::PassUnreachable,
                ),
                (
                    "a route with a lightweight tunnel (encap ip)",
                    pkt::ipv4(in_mac, PEER_MAC, SRC4, [198, 18, 103, 1], 64, &[], &udp()),
                    Reason::PassFibOther,
                ),
                // The kernel hashes an ICMP error by the packet it quotes among multipath
                // next hops; the FIB helper cannot be asked that way.
                (
                    "icmp time exceeded",
                    pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 64, &[], &icmp_error(11)),
                    Reason::PassIcmpError,
                ),
                (
                    "icmp destination unreachable",
                    pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 64, &[], &icmp_error(3)),
                    Reason::PassIcmpError,
                ),
                (
                    "icmpv6 packet too big",
                    pkt::ipv6(
                        in_mac,
                        PEER_MAC,
                        v6(2, 1),
                        v6(9, 0x100),
                        64,
                        false,
                        &icmp6_error(2),
                    ),
                    Reason::PassIcmpError,
                ),
            ];
            for (name, frame, reason) in &cases {
                let before = prog.counters().unwrap().get(*reason);
                let (verdict, out) = prog.test_run(frame, in_idx).unwrap();
                assert_eq!(verdict, XDP_PASS, "{name}: expected XDP_PASS");
                assert_eq!(&out, frame, "{name}: a passed frame must be untouched");
                assert_eq!(
                    prog.counters().unwrap().get(*reason),
                    before + 1,
                    "{name}: counted as {reason:?}"
                );
            }
        })
        .unwrap();
}

#[test]
fn egress_outside_the_port_set_and_disabled_families_pass() {
    let lab = lab("c");
    let (in_idx, in_mac) = (lab.in_idx, lab.in_mac);
    lab.ns
        .run(move || {
            let prog = Program::load(&router_features(in_mac)).unwrap();
            prog.set_tx_ports(&[in_idx]).unwrap();
            let frame = pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 64, &[], &udp());
            assert_eq!(
                prog.test_run(&frame, in_idx).unwrap(),
                (XDP_PASS, frame.clone())
            );
            assert_eq!(prog.counters().unwrap().get(Reason::PassNoTxPort), 1);

            let v4_only = Program::load(&Features {
                router_v4: true,
                mac: in_mac,
                ..Features::default()
            })
            .unwrap();
            let frame6 = pkt::ipv6(in_mac, PEER_MAC, v6(2, 1), v6(9, 0x100), 64, false, &udp());
            assert_eq!(
                v4_only.test_run(&frame6, in_idx).unwrap(),
                (XDP_PASS, frame6.clone())
            );
            assert_eq!(v4_only.counters().unwrap().get(Reason::PassDisabled), 1);
        })
        .unwrap();
}

/// While the daemon loads a port's next program, the running one stands by: every frame is
/// the kernel's, at XDP and at TC, until the next ctl write takes it back.
#[test]
fn a_program_standing_by_hands_every_frame_to_the_kernel() {
    let lab = lab("s");
    let (in_idx, out_idx, in_mac, out_mac) = (lab.in_idx, lab.out_idx, lab.in_mac, lab.out_mac);
    lab.ns
        .run(move || {
            let frame = pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 64, &[], &udp());
            let routed = pkt::ipv4(NEXT_HOP_MAC, out_mac, SRC4, DST4, 63, &[], &udp());
            let xdp = Program::load(&router_features(in_mac)).unwrap();
            let tc = Program::load(&Features {
                tc: true,
                ..router_features(in_mac)
            })
            .unwrap();
            for prog in [&xdp, &tc] {
                prog.set_tx_ports(&[in_idx, out_idx]).unwrap();
                prog.set_ctl(&router_features(in_mac), Switches::default())
                    .unwrap();
            }
            assert_eq!(
                xdp.test_run(&frame, in_idx).unwrap(),
                (XDP_REDIRECT, routed.clone())
            );
            assert_eq!(
                tc.test_run_skb(&frame, in_idx, 0).unwrap(),
                (TC_REDIRECT, routed.clone())
            );

            for prog in [&xdp, &tc] {
                prog.stand_by().unwrap();
                // A new route generation keeps it standing by.
                prog.invalidate_routes().unwrap();
            }
            assert_eq!(
                xdp.test_run(&frame, in_idx).unwrap(),
                (XDP_PASS, frame.clone())
            );
            assert_eq!(tc.test_run_skb(&frame, in_idx, 0).unwrap().0, TC_KERNEL);
            for prog in [&xdp, &tc] {
                assert_eq!(prog.counters().unwrap().get(Reason::PassStandby), 1);
                prog.set_ctl(&router_features(in_mac), Switches::default())
                    .unwrap();
            }
            assert_eq!(
                xdp.test_run(&frame, in_idx).unwrap(),
                (XDP_REDIRECT, routed.clone())
            );
            assert_eq!(
                tc.test_run_skb(&frame, in_idx, 0).unwrap(),
                (TC_REDIRECT, routed)
            );
        })
        .unwrap();
}

#[test]
fn filter_drops_accepts_and_defers_like_the_chain() {
    use wirespeed_fp::filter::FilterPlan;
    let lab = lab("d");
    let (in_idx, out_idx, in_mac) = (lab.in_idx, lab.out_idx, lab.in_mac);
    lab.ns
        .run(move || {
            let json = r#"{"nftables": [
              {"chain": {"family": "inet", "table": "gw", "name": "fwd", "type": "filter", "hook": "forward", "prio": 0, "policy": "accept"}},
              {"set": {"family": "inet", "name": "bad", "table": "gw", "type": "ipv4_addr", "flags": ["interval"], "elem": [{"prefix": {"addr": "198.18.100.64", "len": 26}}]}},
              {"rule": {"family": "inet", "table": "gw", "chain": "fwd", "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": "@bad"}}, {"drop": null}]}},
              {"rule": {"family": "inet", "table": "gw", "chain": "fwd", "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "udp", "field": "dport"}}, "right": 53}}, {"accept": null}]}},
              {"rule": {"family": "inet", "table": "gw", "chain": "fwd", "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 22}}, {"drop": null}]}},
              {"rule": {"family": "inet", "table": "gw", "chain": "fwd", "expr": [{"match": {"op": "==", "left": {"meta": {"key": "oifname"}}, "right": "out0"}}, {"match": {"op": "==", "left": {"payload": {"protocol": "udp", "field": "dport"}}, "right": 4000}}, {"drop": null}]}},
              {"rule": {"family": "inet", "table": "gw", "chain": "fwd", "expr": [{"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": "new"}}, {"match": {"op": "==", "left": {"payload": {"protocol": "udp", "field": "dport"}}, "right": 5000}}, {"accept": null}]}},
              {"rule": {"family": "inet", "table": "gw", "chain": "fwd", "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip6", "field": "saddr"}}, "right": {"prefix": {"addr": "fd00:1::", "len": 64}}}}, {"match": {"op": "==", "left": {"payload": {"protocol": "udp", "field": "dport"}}, "right": 2000}}, {"drop": null}]}}
            ]}"#;
            let plan = FilterPlan::from_nft_json(json, false, false).unwrap();
            let mut f = router_features(in_mac);
            f.filter_v4 = true;
            f.filter_v6 = true;
            f.filter_fields = plan.fields();
            let prog = Program::load(&f).unwrap();
            prog.set_tx_ports(&[in_idx, out_idx]).unwrap();
            prog.write_filter(&plan.tables("in0", &|n| (n == "out0").then_some(out_idx))).unwrap();
            let u = |d| L4::Udp { sport: 1000, dport: d, payload: vec![0; 18] };
            let t = |d| pkt::tcp_syn(1000, d, vec![]);
            let cases: Vec<(&str, Vec<u8>, u32, Reason)> = vec![
                ("set member", pkt::ipv4(in_mac, PEER_MAC, SRC4, [198, 18, 100, 70], 64, &[], &u(53)), 1, Reason::DroppedFilter),
                ("dns accepted", pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 64, &[], &u(53)), XDP_REDIRECT, Reason::Forwarded),
                ("ssh dropped", pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 64, &[], &t(22)), 1, Reason::DroppedFilter),
                ("udp 22 passes", pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 64, &[], &u(22)), XDP_REDIRECT, Reason::Forwarded),
                ("oif+port", pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 64, &[], &u(4000)), 1, Reason::DroppedFilter),
                ("ct rule", pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 64, &[], &u(5000)), XDP_PASS, Reason::PassFilter),
                ("v6 prefix+port", pkt::ipv6(in_mac, PEER_MAC, v6(2, 1), v6(9, 0x100), 64, false, &u(2000)), 1, Reason::DroppedFilter),
                ("v6 other port", pkt::ipv6(in_mac, PEER_MAC, v6(2, 1), v6(9, 0x100), 64, false, &u(2001)), XDP_REDIRECT, Reason::Forwarded),
                ("v6 ssh", pkt::ipv6(in_mac, PEER_MAC, v6(2, 1), v6(9, 0x100), 64, false, &t(22)), 1, Reason::DroppedFilter),
            ];
            // A forwarded packet counts as answered by the FIB or by the route cache,
            // depending on whether an earlier one ran on the same CPU.
            let count = |r: Reason| {
                let c = prog.counters().unwrap();
                if r == Reason::Forwarded { c.forwarded() } else { c.get(r) }
            };
            let judged = |name: &str, frame: &[u8], verdict: u32, reason: Reason| {
                let before = count(reason);
                let (v, _) = prog.test_run(frame, in_idx).unwrap();
                assert_eq!(v, verdict, "{name}");
                assert_eq!(count(reason), before + 1, "{name}: {reason:?}");
            };
            for (name, frame, verdict, reason) in &cases {
                judged(name, frame, *verdict, *reason);
            }

            // Fragments: a first one carries its transport header (IPv6: behind the fragment
            // header) and is judged on it; a later one, while rules look at ports, is the
            // kernel's (how nftables takes it depends on the kernel, docs/FASTPATH.md).
            let v4 = |dst, l4: &L4, offset, more| {
                let mut f = pkt::ipv4(in_mac, PEER_MAC, SRC4, dst, 64, &[], l4);
                pkt::make_ipv4_fragment(&mut f, offset, more);
                f
            };
            let v6 = |l4: &L4, offset, more| {
                let mut f = pkt::ipv6(in_mac, PEER_MAC, v6(2, 1), v6(9, 0x100), 64, false, l4);
                pkt::make_ipv6_fragment(&mut f, offset, more);
                f
            };
            let fragments: Vec<(&str, Vec<u8>, u32, Reason)> = vec![
                ("first fragment, ssh", v4(DST4, &t(22), 0, true), 1, Reason::DroppedFilter),
                ("first fragment, dns", v4(DST4, &u(53), 0, true), XDP_REDIRECT, Reason::Forwarded),
                ("later fragment", v4(DST4, &t(22), 185, false), XDP_PASS, Reason::PassFilter),
                ("v6 first fragment, ssh", v6(&t(22), 0, true), 1, Reason::DroppedFilter),
                ("v6 first fragment, 2001", v6(&u(2001), 0, true), XDP_REDIRECT, Reason::Forwarded),
                ("v6 later fragment", v6(&u(2001), 185, true), XDP_PASS, Reason::PassFilter),
            ];
            for (name, frame, verdict, reason) in &fragments {
                judged(name, frame, *verdict, *reason);
            }
            // Rules on addresses alone judge a later fragment as any packet.
            let addresses = FilterPlan::from_nft_json(
                r#"{"nftables": [
              {"chain": {"family": "inet", "table": "gw", "name": "fwd", "type": "filter", "hook": "forward", "prio": 0, "policy": "accept"}},
              {"set": {"family": "inet", "name": "bad", "table": "gw", "type": "ipv4_addr", "flags": ["interval"], "elem": [{"prefix": {"addr": "198.18.100.64", "len": 26}}]}},
              {"rule": {"family": "inet", "table": "gw", "chain": "fwd", "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": "@bad"}}, {"drop": null}]}}
            ]}"#,
                false,
                false,
            )
            .unwrap();
            assert_eq!(addresses.rules_v4.len(), 1);
            let mut want = f;
            want.filter_fields = addresses.fields();
            prog.write_filter(&addresses.tables("in0", &|n| (n == "out0").then_some(out_idx))).unwrap();
            prog.set_ctl(&want, Switches::default()).unwrap();
            for (name, frame, verdict, reason) in [
                ("later fragment to a set member", v4([198, 18, 100, 70], &t(22), 185, false), 1, Reason::DroppedFilter),
                ("later fragment elsewhere", v4(DST4, &t(22), 185, false), XDP_REDIRECT, Reason::Forwarded),
            ] {
                judged(name, &frame, verdict, reason);
            }
        })
        .unwrap();
}

/// Keeps the calling thread on one CPU: the route cache is per CPU, and a test run uses the
/// caller's.
fn pin_to_first_allowed_cpu() {
    let cpu = wirespeed_sys::process::affinity(0).unwrap()[0];
    wirespeed_sys::process::set_affinity(&[cpu]).unwrap();
}

/// Points the permanent neighbour `addr` on out0 (a next hop) at `mac`.
fn next_hop_mac_is(addr: &str, mac: &str) {
    ip_here(&[
        "neigh",
        "replace",
        addr,
        "lladdr",
        mac,
        "dev",
        "out0",
        "nud",
        "permanent",
    ]);
}

/// `ip` in the calling thread's namespace (the closure of `Netns::run`).
fn ip_here(args: &[&str]) {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "ip {args:?}: {out:?}");
}

#[test]
fn route_cache_answers_until_invalidated_and_never_past_a_longer_packet() {
    let lab = lab("e");
    let (in_idx, out_idx, in_mac, out_mac) = (lab.in_idx, lab.out_idx, lab.in_mac, lab.out_mac);
    lab.ns
        .run(move || {
            pin_to_first_allowed_cpu();
            let prog = Program::load(&router_features(in_mac)).unwrap();
            prog.set_tx_ports(&[in_idx, out_idx]).unwrap();
            let frame = pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 64, &[], &udp());
            let via = |mac: [u8; 6]| pkt::ipv4(mac, out_mac, SRC4, DST4, 63, &[], &udp());
            let forwarded = (XDP_REDIRECT, via(NEXT_HOP_MAC));
            // The first packet asks the FIB and fills the cache; the next is answered from
            // it, with the same bytes out.
            assert_eq!(prog.test_run(&frame, in_idx).unwrap(), forwarded);
            assert_eq!(prog.test_run(&frame, in_idx).unwrap(), forwarded);
            let c = prog.counters().unwrap();
            assert_eq!(
                (c.get(Reason::Forwarded), c.get(Reason::ForwardedCached)),
                (1, 1)
            );

            // The next hop moves. Until a new generation the cached answer stands: the
            // window that the daemon's response time bounds.
            let new_mac = [0x02, 0, 0, 0, 0x02, 0x99];
            next_hop_mac_is("198.18.2.2", "02:00:00:00:02:99");
            assert_eq!(prog.test_run(&frame, in_idx).unwrap(), forwarded);
            prog.invalidate_routes().unwrap();
            let moved = (XDP_REDIRECT, via(new_mac));
            assert_eq!(prog.test_run(&frame, in_idx).unwrap(), moved);

            // A longer packet than any the FIB passed asks the FIB again: its MTU check is
            // never skipped. The egress MTU drops under the cached answer.
            ip_here(&["link", "set", "out0", "mtu", "500"]);
            let big = L4::Udp {
                sport: 1000,
                dport: 2000,
                payload: vec![0xab; 600],
            };
            let big_frame = pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 64, &[], &big);
            let before = prog.counters().unwrap().get(Reason::PassFragNeeded);
            assert_eq!(
                prog.test_run(&big_frame, in_idx).unwrap(),
                (XDP_PASS, big_frame.clone())
            );
            assert_eq!(
                prog.counters().unwrap().get(Reason::PassFragNeeded),
                before + 1
            );

            // Switched off, every packet asks the FIB.
            next_hop_mac_is("198.18.2.2", "02:00:00:00:02:02");
            assert_eq!(prog.test_run(&frame, in_idx).unwrap(), moved);
            prog.set_ctl(
                &prog.features,
                Switches {
                    route_cache: RouteCache::both(false),
                    ..Switches::default()
                },
            )
            .unwrap();
            assert_eq!(prog.test_run(&frame, in_idx).unwrap(), forwarded);
        })
        .unwrap();
}

/// IPv6 has its own route cache, under the same generation and the same rules.
#[test]
fn ipv6_route_cache_answers_until_invalidated() {
    let lab = lab("6");
    let (in_idx, out_idx, in_mac, out_mac) = (lab.in_idx, lab.out_idx, lab.in_mac, lab.out_mac);
    lab.ns
        .run(move || {
            pin_to_first_allowed_cpu();
            let prog = Program::load(&router_features(in_mac)).unwrap();
            prog.set_tx_ports(&[in_idx, out_idx]).unwrap();
            let (src, dst) = (v6(2, 1), v6(7, 0x100));
            let frame = pkt::ipv6(in_mac, PEER_MAC, src, dst, 64, false, &udp());
            let via = |mac: [u8; 6]| pkt::ipv6(mac, out_mac, src, dst, 63, false, &udp());
            let forwarded = (XDP_REDIRECT, via(NEXT_HOP_MAC));
            let counts = || {
                let c = prog.counters().unwrap();
                (c.get(Reason::Forwarded), c.get(Reason::ForwardedCached))
            };
            assert_eq!(prog.test_run(&frame, in_idx).unwrap(), forwarded);
            assert_eq!(prog.test_run(&frame, in_idx).unwrap(), forwarded);
            assert_eq!(counts(), (1, 1), "the FIB once, then the cache");

            // The next hop moves: the cached answer stands until a new generation.
            next_hop_mac_is("fd00:2::2", "02:00:00:00:02:99");
            assert_eq!(prog.test_run(&frame, in_idx).unwrap(), forwarded);
            prog.invalidate_routes().unwrap();
            let moved = (XDP_REDIRECT, via([0x02, 0, 0, 0, 0x02, 0x99]));
            assert_eq!(prog.test_run(&frame, in_idx).unwrap(), moved);

            // A longer packet than the cached answer's asks the FIB (its MTU check).
            ip_here(&["link", "set", "out0", "mtu", "1280"]);
            let big = L4::Udp {
                sport: 1000,
                dport: 2000,
                payload: vec![0xab; 1300],
            };
            let big_frame = pkt::ipv6(in_mac, PEER_MAC, src, dst, 64, false, &big);
            let before = prog.counters().unwrap().get(Reason::PassFragNeeded);
            assert_eq!(
                prog.test_run(&big_frame, in_idx).unwrap(),
                (XDP_PASS, big_frame.clone())
            );
            assert_eq!(
                prog.counters().unwrap().get(Reason::PassFragNeeded),
                before + 1
            );

            // IPv6 off, IPv4 on: every IPv6 packet asks the FIB, and sees the move back at
            // once.
            next_hop_mac_is("fd00:2::2", "02:00:00:00:02:02");
            assert_eq!(prog.test_run(&frame, in_idx).unwrap(), moved);
            let v4_only = RouteCache {
                v4: true,
                v6: false,
            };
            prog.set_ctl(
                &prog.features,
                Switches {
                    route_cache: v4_only,
                    ..Switches::default()
                },
            )
            .unwrap();
            let (fib, cached) = counts();
            assert_eq!(prog.test_run(&frame, in_idx).unwrap(), forwarded);
            assert_eq!(prog.test_run(&frame, in_idx).unwrap(), forwarded);
            assert_eq!(counts(), (fib + 2, cached));
        })
        .unwrap();
}

/// rp_filter on (Debian's default, loose, which a new namespace inherits): a source that the
/// FIB routes back out the ingress port is forwarded; one routed out another port, or not by
/// a unicast route at all, goes to the kernel, which accepts or drops it as its mode says.
/// The route cache, keyed by destination, never stands in for the source's check.
#[test]
fn reverse_path_filter_fast_paths_only_sources_routed_back_out_the_ingress_port() {
    let lab = lab("r");
    let (in_idx, out_idx, in_mac, out_mac) = (lab.in_idx, lab.out_idx, lab.in_mac, lab.out_mac);
    lab.ns
        .ip(&["route", "add", "blackhole", "198.18.77.0/24"])
        .unwrap();
    lab.ns
        .run(move || {
            let prog = Program::load(&router_features(in_mac)).unwrap();
            prog.set_tx_ports(&[in_idx, out_idx]).unwrap();
            let from = |src: [u8; 4]| pkt::ipv4(in_mac, PEER_MAC, src, DST4, 64, &[], &udp());
            let forwarded = |src: [u8; 4]| {
                (
                    XDP_REDIRECT,
                    pkt::ipv4(NEXT_HOP_MAC, out_mac, src, DST4, 63, &[], &udp()),
                )
            };
            let via_out0 = [198, 18, 2, 77];
            let blackholed = [198, 18, 77, 1];
            let unrouted = [198, 19, 9, 9];
            for cache in [true, false] {
                prog.set_ctl(
                    &prog.features,
                    Switches {
                        route_cache: RouteCache::both(cache),
                        rp_filter_v4: true,
                        ..Switches::default()
                    },
                )
                .unwrap();
                // Twice each: the second may be answered from the route cache.
                for _ in 0..2 {
                    assert_eq!(prog.test_run(&from(SRC4), in_idx).unwrap(), forwarded(SRC4));
                    for (name, src) in [
                        ("routed out out0", via_out0),
                        ("blackholed", blackholed),
                        ("no route", unrouted),
                    ] {
                        let before = prog.counters().unwrap().get(Reason::PassRpFilter);
                        assert_eq!(
                            prog.test_run(&from(src), in_idx).unwrap(),
                            (XDP_PASS, from(src)),
                            "{name} (cache {cache}): the kernel's to decide"
                        );
                        assert_eq!(
                            prog.counters().unwrap().get(Reason::PassRpFilter),
                            before + 1,
                            "{name}: counted as pass_rp_filter"
                        );
                    }
                }
            }
            // With rp_filter off the source is not looked at, as in the kernel.
            prog.set_ctl(&prog.features, Switches::default()).unwrap();
            for src in [via_out0, unrouted] {
                assert_eq!(prog.test_run(&from(src), in_idx).unwrap(), forwarded(src));
            }
        })
        .unwrap();
}

/// The sources that passed the reverse-path check are cached like next hops: under the route
/// generation, so a route change the daemon has reported (a new generation) is seen by the
/// next packet, and never with the route cache off.
#[test]
fn reverse_path_answers_are_cached_until_the_routes_change() {
    let lab = lab("s");
    let (in_idx, out_idx, in_mac, out_mac) = (lab.in_idx, lab.out_idx, lab.in_mac, lab.out_mac);
    lab.ns
        .ip(&["route", "add", "198.18.50.0/24", "via", "198.18.1.9"])
        .unwrap();
    lab.ns
        .run(move || {
            pin_to_first_allowed_cpu();
            let prog = Program::load(&router_features(in_mac)).unwrap();
            prog.set_tx_ports(&[in_idx, out_idx]).unwrap();
            let src = [198, 18, 50, 5];
            let frame = pkt::ipv4(in_mac, PEER_MAC, src, DST4, 64, &[], &udp());
            let forwarded = (
                XDP_REDIRECT,
                pkt::ipv4(NEXT_HOP_MAC, out_mac, src, DST4, 63, &[], &udp()),
            );
            let passed = (XDP_PASS, frame.clone());
            let rp_passes = || prog.counters().unwrap().get(Reason::PassRpFilter);
            prog.set_ctl(
                &prog.features,
                Switches {
                    rp_filter_v4: true,
                    ..Switches::default()
                },
            )
            .unwrap();
            // Routed back out in0: checked by the FIB once, then from the cache.
            assert_eq!(prog.test_run(&frame, in_idx).unwrap(), forwarded);
            assert_eq!(prog.test_run(&frame, in_idx).unwrap(), forwarded);

            // The source's route moves to out0. Until a new generation the cached pass
            // stands (the window the daemon's response time bounds, as for next hops): the
            // FIB alone would now refuse it.
            ip_here(&["route", "replace", "198.18.50.0/24", "via", "198.18.2.2"]);
            assert_eq!(prog.test_run(&frame, in_idx).unwrap(), forwarded);
            prog.invalidate_routes().unwrap();
            let before = rp_passes();
            assert_eq!(prog.test_run(&frame, in_idx).unwrap(), passed);
            assert_eq!(prog.test_run(&frame, in_idx).unwrap(), passed);
            assert_eq!(rp_passes(), before + 2, "a refused source is never cached");

            // Back in0, reported: forwarded, and cached again.
            ip_here(&["route", "replace", "198.18.50.0/24", "via", "198.18.1.9"]);
            prog.invalidate_routes().unwrap();
            assert_eq!(prog.test_run(&frame, in_idx).unwrap(), forwarded);
            assert_eq!(prog.test_run(&frame, in_idx).unwrap(), forwarded);

            // With the route cache off (multipath, nexthop objects) every packet asks the
            // FIB: the same unreported move is seen at once.
            prog.set_ctl(
                &prog.features,
                Switches {
                    route_cache: RouteCache::both(false),
                    rp_filter_v4: true,
                    ..Switches::default()
                },
            )
            .unwrap();
            ip_here(&["route", "replace", "198.18.50.0/24", "via", "198.18.2.2"]);
            assert_eq!(prog.test_run(&frame, in_idx).unwrap(), passed);
        })
        .unwrap();
}

/// A source that is one of the router's own addresses is a martian to the kernel, which drops
/// it even with rp_filter off; the FIB lookup on the destination cannot tell, so the fast
/// path hands it over, with the route cache on or off.
#[test]
fn a_source_that_is_one_of_our_addresses_goes_to_the_kernel() {
    let lab = lab("l");
    let (in_idx, out_idx, in_mac, out_mac) = (lab.in_idx, lab.out_idx, lab.in_mac, lab.out_mac);
    lab.ns
        .run(move || {
            let prog = Program::load(&router_features(in_mac)).unwrap();
            prog.set_tx_ports(&[in_idx, out_idx]).unwrap();
            let ours = [[198, 18, 1, 1], [198, 18, 2, 1]];
            prog.set_local_v4(&ours).unwrap();
            let from = |src: [u8; 4]| pkt::ipv4(in_mac, PEER_MAC, src, DST4, 64, &[], &udp());
            for cache in [true, false] {
                prog.set_ctl(
                    &prog.features,
                    Switches {
                        route_cache: RouteCache::both(cache),
                        ..Switches::default()
                    },
                )
                .unwrap();
                for _ in 0..2 {
                    assert_eq!(
                        prog.test_run(&from(SRC4), in_idx).unwrap(),
                        (
                            XDP_REDIRECT,
                            pkt::ipv4(NEXT_HOP_MAC, out_mac, SRC4, DST4, 63, &[], &udp())
                        )
                    );
                    for src in ours {
                        let before = prog.counters().unwrap().get(Reason::PassMartian);
                        assert_eq!(
                            prog.test_run(&from(src), in_idx).unwrap(),
                            (XDP_PASS, from(src)),
                            "source {src:?} (cache {cache})"
                        );
                        assert_eq!(
                            prog.counters().unwrap().get(Reason::PassMartian),
                            before + 1
                        );
                    }
                }
            }
            // More addresses than the ctl value holds: the program asks the hash instead.
            let many: Vec<[u8; 4]> = (1..=10u8).map(|i| [198, 18, 50, i]).chain(ours).collect();
            prog.set_local_v4(&many).unwrap();
            for src in [ours[0], [198, 18, 50, 10]] {
                assert_eq!(
                    prog.test_run(&from(src), in_idx).unwrap(),
                    (XDP_PASS, from(src)),
                    "{src:?} among {} addresses",
                    many.len()
                );
            }
            // An address removed is forwarded again; a route-generation write and a switches
            // write keep the rest.
            prog.set_local_v4(&ours[1..]).unwrap();
            prog.invalidate_routes().unwrap();
            let verdict = |src| prog.test_run(&from(src), in_idx).unwrap().0;
            assert_eq!(verdict(ours[0]), XDP_REDIRECT);
            assert_eq!(verdict(ours[1]), XDP_PASS);
            prog.set_ctl(&prog.features, Switches::default()).unwrap();
            assert_eq!(verdict(ours[1]), XDP_PASS);
        })
        .unwrap();
}

#[test]
fn a_partial_checksum_goes_to_the_kernel_at_every_length() {
    let lab = lab("p");
    let (in_idx, out_idx, in_mac) = (lab.in_idx, lab.out_idx, lab.in_mac);
    lab.ns
        .run(move || {
            let prog = Program::load(&router_features(in_mac)).unwrap();
            prog.set_tx_ports(&[in_idx, out_idx]).unwrap();
            let (src6, dst6) = (v6(2, 1), v6(9, 0x100));
            let (mut partial, mut passed_complete) = (0u64, 0u64);
            // Every transport length up to a 1,500-byte packet, both protocols, both
            // families: the sum's carries differ with the length (the bug this guards
            // against lost one for UDP lengths 0x3ef-0x3ff).
            for len in 0..1440usize {
                for tcp in [false, true] {
                    let payload = vec![(len % 251) as u8; len];
                    let (l4, proto, field_at) = if tcp {
                        (pkt::tcp_syn(1000, 2000, payload), 6u8, 16)
                    } else {
                        (
                            L4::Udp {
                                sport: 1000,
                                dport: 2000,
                                payload,
                            },
                            17u8,
                            6,
                        )
                    };
                    for v4 in [true, false] {
                        let (mut frame, l3) = if v4 {
                            (pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 64, &[], &l4), 20)
                        } else {
                            (pkt::ipv6(in_mac, PEER_MAC, src6, dst6, 64, false, &l4), 40)
                        };
                        let l4_len = frame.len() - 14 - l3;
                        let field = 14 + l3 + field_at;
                        let sum = if v4 {
                            csum::partial(SRC4.into(), DST4.into(), proto, l4_len).to_be_bytes()
                        } else {
                            csum::partial(src6.into(), dst6.into(), proto, l4_len).to_be_bytes()
                        };
                        // The complete frame is forwarded, unless its checksum happens to
                        // equal the pseudo-header sum (then the kernel's: slower, not wrong).
                        let coincides = frame[field..field + 2] == sum;
                        let (verdict, _) = prog.test_run(&frame, in_idx).unwrap();
                        if coincides {
                            passed_complete += 1;
                            assert_eq!(verdict, XDP_PASS);
                        } else {
                            assert_eq!(
                                verdict, XDP_REDIRECT,
                                "complete checksum, v4 {v4}, tcp {tcp}, length {l4_len}"
                            );
                        }
                        frame[field..field + 2].copy_from_slice(&sum);
                        let (verdict, _) = prog.test_run(&frame, in_idx).unwrap();
                        assert_eq!(
                            verdict, XDP_PASS,
                            "partial checksum redirected: v4 {v4}, tcp {tcp}, length {l4_len}"
                        );
                        partial += 1;
                    }
                }
            }
            let c = prog.counters().unwrap();
            assert_eq!(c.get(Reason::PassCsumPartial), partial + passed_complete);
        })
        .unwrap();
}

/// With its TC stage attached (fp_ctl.tc_stage), the XDP router hands a partial-checksum
/// frame to the kernel's receive path marked in its metadata, for the stage to route, and
/// leaves the counting to the stage; the stage passes, uncounted, anything unmarked.
#[test]
fn a_partial_checksum_is_marked_for_the_tc_stage_when_one_is_attached() {
    const MARK: [u8; 4] = 0x77737463u32.to_ne_bytes();
    let lab = lab("q");
    let (in_idx, out_idx, in_mac) = (lab.in_idx, lab.out_idx, lab.in_mac);
    lab.ns
        .run(move || {
            let prog = Program::load(&router_features(in_mac)).unwrap();
            prog.set_tx_ports(&[in_idx, out_idx]).unwrap();
            let payload = vec![7u8; 100];
            let l4 = L4::Udp {
                sport: 1000,
                dport: 2000,
                payload,
            };
            let mut frame = pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 64, &[], &l4);
            let l4_len = frame.len() - 14 - 20;
            let field = 14 + 20 + 6;
            frame[field..field + 2].copy_from_slice(
                &csum::partial(SRC4.into(), DST4.into(), 17, l4_len).to_be_bytes(),
            );

            // No stage attached: the kernel's, counted here.
            let (verdict, out) = prog.test_run(&frame, in_idx).unwrap();
            assert_eq!((verdict, out.as_slice()), (XDP_PASS, frame.as_slice()));
            assert_eq!(prog.counters().unwrap().get(Reason::PassCsumPartial), 1);

            prog.set_tc_stage(true).unwrap();
            let (verdict, out) = prog.test_run(&frame, in_idx).unwrap();
            assert_eq!(verdict, XDP_PASS);
            assert_eq!(out[..4], MARK, "no mark in the metadata");
            assert_eq!(&out[4..], frame.as_slice(), "the frame itself changed");
            let c = prog.counters().unwrap();
            assert_eq!(c.get(Reason::PassCsumPartial), 1, "counted at XDP: {c:?}");
            // A complete checksum is still redirected at XDP, unmarked.
            let mut complete = frame.clone();
            complete[field..field + 2].copy_from_slice(&[0, 0]);
            assert_eq!(prog.test_run(&complete, in_idx).unwrap().0, XDP_REDIRECT);

            // The stage, on an skb without the mark: the kernel's, not counted again, and
            // the programs and classifiers behind it at TC ingress still see it (TCX_NEXT).
            let before = prog.counters().unwrap();
            assert_eq!(prog.test_run_tc_stage(&frame).unwrap(), Some(TC_KERNEL));
            assert_eq!(prog.counters().unwrap(), before);
        })
        .unwrap();
}

/// Policy rules that select by protocol, ports, source and ingress port keep the router on:
/// the program passes the FIB helper the ports the kernel's flow dissector would find, and
/// asks the reverse question as fib_validate_source does, from the egress port with the ports
/// swapped (an `iif out0` rule applies to it, as in the kernel).
#[test]
fn policy_rules_pick_the_next_hop_by_ports_source_and_ingress() {
    let lab = lab("p");
    let (in_idx, out_idx, in_mac, out_mac) = (lab.in_idx, lab.out_idx, lab.in_mac, lab.out_mac);
    let ns = &lab.ns;
    let nh2 = "02:00:00:00:02:03";
    for args in [
        "neigh add 198.18.2.3 lladdr 02:00:00:00:02:03 dev out0 nud permanent",
        "-6 neigh add fd00:2::3 lladdr 02:00:00:00:02:03 dev out0 nud permanent",
        "route add 198.18.100.0/24 via 198.18.2.3 table 100",
        "-6 route add fd00:100::/64 via fd00:2::3 table 100",
        "rule add ipproto udp dport 2000 table 100 pref 100",
        "rule add from 198.18.1.77 table 100 pref 101",
        "rule add iif in0 to 198.18.100.8 table 100 pref 102",
        "-6 rule add ipproto udp sport 1000 table 100 pref 100",
        // The source check of a packet forwarded out out0 asks from out0 (not lo, not in0):
        // table 102 sends 198.18.1.66 and .67 back out out0, and .68 too, but only from lo.
        "route add 198.18.1.66 via 198.18.2.2 table 102",
        "route add 198.18.1.67 via 198.18.2.2 table 102",
        "route add 198.18.1.68 via 198.18.2.2 table 102",
        "rule add iif out0 from 198.18.100.0/24 to 198.18.1.66 table 102 pref 103",
        "rule add iif in0 from 198.18.100.0/24 to 198.18.1.67 table 102 pref 104",
        "rule add iif lo from 198.18.100.0/24 to 198.18.1.68 table 102 pref 105",
    ] {
        ns.ip(&args.split(' ').collect::<Vec<_>>()).unwrap();
    }
    let nh2 = pkt::parse_mac(nh2).unwrap();
    lab.ns
        .run(move || {
            let prog = Program::load(&router_features(in_mac)).unwrap();
            prog.set_tx_ports(&[in_idx, out_idx]).unwrap();
            let switches = |rp_filter_v4: bool| Switches {
                route_cache: RouteCache::both(false),
                rp_filter_v4,
                policy_rules: PolicyRules {
                    v4: true,
                    v6: true,
                    v4_ports: true,
                },
                ..Switches::default()
            };
            prog.set_ctl(&prog.features, switches(false)).unwrap();
            let flow = |src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16| {
                let l4 = L4::Udp {
                    sport,
                    dport,
                    payload: vec![0xab; 18],
                };
                (
                    pkt::ipv4(in_mac, PEER_MAC, src, dst, 64, &[], &l4),
                    move |mac: [u8; 6]| pkt::ipv4(mac, out_mac, src, dst, 63, &[], &l4),
                )
            };
            let dst8 = [198, 18, 100, 8];
            for (what, src, dst, sport, dport, via) in [
                ("dport 2000", SRC4, DST4, 1000, 2000, nh2),
                ("dport 2001", SRC4, DST4, 1000, 2001, NEXT_HOP_MAC),
                ("from 198.18.1.77", [198, 18, 1, 77], DST4, 5, 6, nh2),
                ("iif in0 to .8", SRC4, dst8, 5, 6, nh2),
            ] {
                let (input, output) = flow(src, dst, sport, dport);
                assert_eq!(
                    prog.test_run(&input, in_idx).unwrap(),
                    (XDP_REDIRECT, output(via)),
                    "{what}"
                );
            }
            // The ports of TCP too, and none for ICMP (a `dport` rule never matches it).
            let tcp = pkt::tcp_syn(1000, 2000, vec![]);
            let input = pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 64, &[], &tcp);
            assert_eq!(
                prog.test_run(&input, in_idx).unwrap(),
                (
                    XDP_REDIRECT,
                    pkt::ipv4(NEXT_HOP_MAC, out_mac, SRC4, DST4, 63, &[], &tcp)
                ),
                "TCP dport 2000 is not `ipproto udp`"
            );
            let udp6 = |sport: u16| L4::Udp {
                sport,
                dport: 7,
                payload: vec![1; 8],
            };
            // fd00:1::2 -> fd00:100::9 from the peer, or as forwarded through `via`.
            let ipv6_in =
                |l4: &L4| pkt::ipv6(in_mac, PEER_MAC, v6(2, 1), v6(9, 0x100), 64, false, l4);
            let ipv6_out = |via: [u8; 6], l4: &L4| {
                pkt::ipv6(via, out_mac, v6(2, 1), v6(9, 0x100), 63, false, l4)
            };
            for (sport, via) in [(1000, nh2), (1001, NEXT_HOP_MAC)] {
                let input = ipv6_in(&udp6(sport));
                let output = ipv6_out(via, &udp6(sport));
                assert_eq!(
                    prog.test_run(&input, in_idx).unwrap(),
                    (XDP_REDIRECT, output),
                    "IPv6 sport {sport}"
                );
            }
            // A fragment header (an atomic fragment) before the UDP header: the kernel's
            // dissector walks it to the ports, so with IPv6 rules the packet is the kernel's.
            // (Routing and destination-options headers already are, at XDP: their UDP
            // checksum may be partial.)
            let mut frag = vec![17u8, 0, 0, 0, 0, 0, 0, 9]; // next UDP, offset 0, M 0, id 9
            frag.extend_from_slice(&[0x03, 0xe8, 0, 7, 0, 16, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]);
            let behind = L4::Raw {
                proto: 44,
                payload: frag,
            };
            let input = ipv6_in(&behind);
            let before = prog.counters().unwrap().get(Reason::PassIpOptions);
            assert_eq!(
                prog.test_run(&input, in_idx).unwrap(),
                (XDP_PASS, input.clone()),
                "ports behind an IPv6 extension header"
            );
            assert_eq!(
                prog.counters().unwrap().get(Reason::PassIpOptions),
                before + 1,
                "{:?}",
                prog.counters().unwrap().nonzero()
            );
            // With policy rules the kernel checks the source even with rp_filter off, and
            // drops one it finds broadcast (198.18.1.255): the kernel's to decide.
            let (input, _) = flow([198, 18, 1, 255], DST4, 5, 6);
            assert_eq!(
                prog.test_run(&input, in_idx).unwrap(),
                (XDP_PASS, input.clone()),
                "a broadcast source under policy rules"
            );
            // rp_filter: 198.18.1.66-68 route back out in0 in the main table, but the kernel's
            // reverse lookup (from the egress port, out0) meets the `iif out0` rule for .66
            // and goes out out0: the kernel's. The `iif in0` and `iif lo` rules never apply.
            prog.set_ctl(&prog.features, switches(true)).unwrap();
            let (input, _) = flow([198, 18, 1, 66], DST4, 5, 6);
            assert_eq!(
                prog.test_run(&input, in_idx).unwrap(),
                (XDP_PASS, input.clone()),
                "reverse path through the `iif out0` rule"
            );
            for src in [[198, 18, 1, 67], [198, 18, 1, 68]] {
                let (input, output) = flow(src, DST4, 5, 6);
                assert_eq!(
                    prog.test_run(&input, in_idx).unwrap(),
                    (XDP_REDIRECT, output(NEXT_HOP_MAC)),
                    "{src:?}: `iif in0` and `iif lo` do not see the source check"
                );
            }
            let (input, output) = flow(SRC4, DST4, 5, 6);
            assert_eq!(
                prog.test_run(&input, in_idx).unwrap(),
                (XDP_REDIRECT, output(NEXT_HOP_MAC)),
                "a source routed back out in0 still passes"
            );
        })
        .unwrap();
}

/// At TC a GSO skb is measured by its segments, as `ip_forward` measures it
/// (skb_gso_validate_network_len): a TCP or UDP super-frame whose segments fit the egress MTU
/// is routed whatever its total length, one whose segments do not is the kernel's, and so is
/// the same frame as one packet (over the MTU, DF set).
#[test]
fn gso_skbs_at_tc_are_sized_by_their_segments() {
    let lab = lab("g");
    let (in_idx, out_idx, in_mac, out_mac) = (lab.in_idx, lab.out_idx, lab.in_mac, lab.out_mac);
    lab.ns
        .run(move || {
            let prog = Program::load(&Features {
                tc: true,
                ..router_features(in_mac)
            })
            .unwrap();
            prog.set_tx_ports(&[in_idx, out_idx]).unwrap();
            let payload = vec![0xab; 2800];
            let (sport, dport) = (1000, 2000);
            let tcp = pkt::tcp_syn(sport, dport, payload.clone());
            let udp = L4::Udp {
                sport,
                dport,
                payload,
            };
            // The egress MTU is 1500: IPv4 20 bytes, then the L4 header.
            for (name, l4, l4_header) in [("TCP", tcp, 20u32), ("UDP", udp, 8)] {
                let frame = pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 64, &[], &l4);
                let routed = pkt::ipv4(NEXT_HOP_MAC, out_mac, SRC4, DST4, 63, &[], &l4);
                let largest = 1500 - 20 - l4_header;
                assert_eq!(
                    prog.test_run_skb(&frame, in_idx, largest).unwrap(),
                    (TC_REDIRECT, routed),
                    "{name}: segments of exactly the MTU"
                );
                assert_eq!(
                    prog.test_run_skb(&frame, in_idx, largest + 1).unwrap().0,
                    TC_KERNEL,
                    "{name}: segments one byte over"
                );
                assert_eq!(
                    prog.test_run_skb(&frame, in_idx, 0).unwrap().0,
                    TC_KERNEL,
                    "{name}: not GSO"
                );
            }
            assert_eq!(prog.counters().unwrap().get(Reason::PassGso), 0);
        })
        .unwrap();
}

/// What `ip_forward` does to an skb's priority: set from the TOS (rt_tos2priority: TOS 0x10,
/// low delay, is TC_PRIO_INTERACTIVE, 6), unless net.ipv4.ip_forward_update_priority is 0,
/// when the packet keeps the one it came with.
#[test]
fn the_tc_router_sets_the_priority_from_the_tos_unless_told_not_to() {
    let lab = lab("q");
    let (in_idx, out_idx, in_mac) = (lab.in_idx, lab.out_idx, lab.in_mac);
    lab.ns
        .run(move || {
            let prog = Program::load(&Features {
                tc: true,
                ..router_features(in_mac)
            })
            .unwrap();
            prog.set_tx_ports(&[in_idx, out_idx]).unwrap();
            let l4 = L4::Udp {
                sport: 1000,
                dport: 2000,
                payload: vec![0; 32],
            };
            let mut frame = pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 64, &[], &l4);
            pkt::set_tos(&mut frame, 0x10);
            let came = SkbMeta {
                priority: 3,
                tstamp: 123_456_789,
            };
            let run = |f: &[u8]| prog.test_run_skb_meta(f, in_idx, came).unwrap();
            // The priority from the TOS; the receive timestamp cleared, as ip_forward_finish
            // clears it (skb_clear_tstamp).
            assert_eq!(
                run(&frame),
                (
                    TC_REDIRECT,
                    SkbMeta {
                        priority: 6,
                        tstamp: 0
                    }
                ),
            );
            // ip6_forward sets no priority.
            let v6 = pkt::ipv6(in_mac, PEER_MAC, v6(2, 1), v6(9, 0x100), 64, false, &l4);
            assert_eq!(
                run(&v6),
                (
                    TC_REDIRECT,
                    SkbMeta {
                        priority: 3,
                        tstamp: 0
                    }
                ),
            );
            prog.set_ctl(
                &prog.features,
                Switches {
                    keep_priority: true,
                    ..Switches::default()
                },
            )
            .unwrap();
            assert_eq!(
                run(&frame).1.priority,
                3,
                "ip_forward_update_priority 0: the priority it came with"
            );
        })
        .unwrap();
}

/// IPv4 fragments are routed as the kernel routes them when nothing in it would reassemble
/// them: first, middle and last alike, and a non-first ICMP fragment whose payload starts like
/// an error's type. A policy rule on ports sees a fragment's as 0, as the kernel's flow
/// dissector does (it reads none from any fragment). Where conntrack may reassemble them
/// (`reassembly`) they are the kernel's, counted as pass_fragment, while whole datagrams are
/// still routed; an IPv6 fragment likewise.
#[test]
fn fragments_are_routed_unless_the_kernel_would_reassemble_them() {
    let lab = lab("g");
    let (in_idx, out_idx, in_mac, out_mac) = (lab.in_idx, lab.out_idx, lab.in_mac, lab.out_mac);
    lab.ns
        .run(move || {
            let prog = Program::load(&router_features(in_mac)).unwrap();
            prog.set_tx_ports(&[in_idx, out_idx]).unwrap();
            let cut = |mut f: Vec<u8>, shape: Option<(u16, bool)>| {
                if let Some((offset, more)) = shape {
                    pkt::make_ipv4_fragment(&mut f, offset, more);
                }
                f
            };
            let input =
                |l4: &L4, shape| cut(pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 64, &[], l4), shape);
            let routed = |l4: &L4, shape| {
                (
                    XDP_REDIRECT,
                    cut(
                        pkt::ipv4(NEXT_HOP_MAC, out_mac, SRC4, DST4, 63, &[], l4),
                        shape,
                    ),
                )
            };
            let passed = |l4: &L4, shape| (XDP_PASS, input(l4, shape));
            // Payload bytes that read as "destination unreachable" where a header would be.
            let like_an_error = L4::Raw {
                proto: 1,
                payload: vec![3, 1, 0, 0, 0, 0, 0, 0, 0x45, 0, 0, 28],
            };
            let whole = None;
            let fragments = [Some((0, true)), Some((185, true)), Some((185, false))];
            let frag6 = L4::Raw {
                proto: 44,
                // next UDP, offset 185, M 1, id 9; then what would follow in the datagram
                payload: vec![
                    17, 0, 0x05, 0xc9, 0, 0, 0, 9, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab,
                ],
            };
            let input6 = pkt::ipv6(in_mac, PEER_MAC, v6(2, 1), v6(9, 0x100), 64, false, &frag6);
            let routed6 = (
                XDP_REDIRECT,
                pkt::ipv6(
                    NEXT_HOP_MAC,
                    out_mac,
                    v6(2, 1),
                    v6(9, 0x100),
                    63,
                    false,
                    &frag6,
                ),
            );
            let fragment_passes = || prog.counters().unwrap().get(Reason::PassFragment);

            for shape in fragments {
                assert_eq!(
                    prog.test_run(&input(&udp(), shape), in_idx).unwrap(),
                    routed(&udp(), shape),
                    "{shape:?}"
                );
            }
            for shape in &fragments[1..] {
                assert_eq!(
                    prog.test_run(&input(&like_an_error, *shape), in_idx)
                        .unwrap(),
                    routed(&like_an_error, *shape),
                    "a non-first ICMP fragment {shape:?} carries no ICMP header"
                );
            }
            assert_eq!(
                prog.test_run(&input6, in_idx).unwrap(),
                routed6,
                "an IPv6 fragment"
            );
            assert_eq!(fragment_passes(), 0);

            // A rule on udp's (2000) that makes 198.18.100.0/24 unreachable: it takes the
            // whole datagram, never a fragment, the first one included.
            ip_here(&[
                "rule", "add", "pref", "100", "ipproto", "udp", "dport", "2000", "table", "100",
            ]);
            ip_here(&[
                "route",
                "add",
                "unreachable",
                "198.18.100.0/24",
                "table",
                "100",
            ]);
            prog.set_ctl(
                &prog.features,
                Switches {
                    route_cache: RouteCache::both(false),
                    policy_rules: PolicyRules {
                        v4: true,
                        v6: false,
                        v4_ports: true,
                    },
                    ..Switches::default()
                },
            )
            .unwrap();
            prog.invalidate_routes().unwrap();
            assert_eq!(
                prog.test_run(&input(&udp(), whole), in_idx).unwrap(),
                passed(&udp(), whole),
                "the rule's: unreachable, the kernel's to answer"
            );
            for shape in fragments {
                assert_eq!(
                    prog.test_run(&input(&udp(), shape), in_idx).unwrap(),
                    routed(&udp(), shape),
                    "policy rules: {shape:?} has no ports"
                );
            }
            ip_here(&["rule", "del", "pref", "100"]);
            ip_here(&[
                "route",
                "del",
                "unreachable",
                "198.18.100.0/24",
                "table",
                "100",
            ]);

            prog.set_ctl(
                &prog.features,
                Switches {
                    reassembly: Reassembly { v4: true, v6: true },
                    ..Switches::default()
                },
            )
            .unwrap();
            prog.invalidate_routes().unwrap();
            for shape in fragments {
                assert_eq!(
                    prog.test_run(&input(&udp(), shape), in_idx).unwrap(),
                    passed(&udp(), shape),
                    "conntrack may reassemble: {shape:?}"
                );
            }
            assert_eq!(
                prog.test_run(&input6, in_idx).unwrap(),
                (XDP_PASS, input6.clone()),
                "conntrack may reassemble: IPv6"
            );
            assert_eq!(
                fragment_passes(),
                4,
                "{:?}",
                prog.counters().unwrap().nonzero()
            );
            assert_eq!(
                prog.test_run(&input(&udp(), whole), in_idx).unwrap(),
                routed(&udp(), whole),
                "a whole datagram"
            );
        })
        .unwrap();
}

/// Two switches for what `ip6_forward` and `ip_forward` consult beyond the FIB's answer:
/// with `proxy_ndp` on, an NDP message (ICMPv6 133-137) is the kernel's (it delivers one to a
/// proxied address locally); with a route's own MTU, a longer IPv4 packet is (frag needed).
#[test]
fn proxy_ndp_and_a_route_mtu_leave_their_packets_to_the_kernel() {
    let lab = lab("n");
    let (in_idx, out_idx, in_mac, out_mac) = (lab.in_idx, lab.out_idx, lab.in_mac, lab.out_mac);
    lab.ns
        .run(move || {
            let prog = Program::load(&router_features(in_mac)).unwrap();
            prog.set_tx_ports(&[in_idx, out_idx]).unwrap();
            let (src, dst) = (v6(2, 1), v6(7, 0x100));
            // A neighbour solicitation to a global address, as a NUD probe sends it.
            let mut ns = vec![135, 0, 0, 0, 0, 0, 0, 0];
            ns.extend_from_slice(&dst);
            let ns = L4::Raw {
                proto: 58,
                payload: ns,
            };
            let solicit = pkt::ipv6(in_mac, PEER_MAC, src, dst, 255, false, &ns);
            let forwarded = pkt::ipv6(NEXT_HOP_MAC, out_mac, src, dst, 254, false, &ns);
            assert_eq!(
                prog.test_run(&solicit, in_idx).unwrap(),
                (XDP_REDIRECT, forwarded),
                "proxy_ndp off: routed as any packet"
            );
            let udp4 = |len: usize| {
                let l4 = L4::Udp {
                    sport: 1000,
                    dport: 2000,
                    payload: vec![0; len - 28],
                };
                pkt::ipv4(in_mac, PEER_MAC, SRC4, DST4, 64, &[], &l4)
            };
            let switches = Switches {
                proxy_ndp: true,
                route_mtu_v4: 1400,
                ..Switches::default()
            };
            prog.set_ctl(&prog.features, switches).unwrap();
            assert_eq!(
                prog.test_run(&solicit, in_idx).unwrap(),
                (XDP_PASS, solicit.clone()),
                "proxy_ndp on: the kernel's"
            );
            let before = prog.counters().unwrap().get(Reason::PassFragNeeded);
            let (fits, over) = (udp4(1400), udp4(1401));
            assert_eq!(prog.test_run(&fits, in_idx).unwrap().0, XDP_REDIRECT);
            assert_eq!(prog.test_run(&over, in_idx).unwrap(), (XDP_PASS, over));
            assert_eq!(
                prog.counters().unwrap().get(Reason::PassFragNeeded),
                before + 1
            );
        })
        .unwrap();
}
