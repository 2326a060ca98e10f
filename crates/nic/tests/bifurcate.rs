//! The bifurcation program's verdicts, through BPF_PROG_TEST_RUN with packet fixtures.
//! Needs root (CAP_BPF) but no namespace: nothing is attached.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, OwnedFd};
use wirespeed_testkit::frame::{
    arp_packet, bare_tcp_syn, ethernet, ipv4_raw, udp_frame, ETH_P_ARP, ETH_P_IP, ETH_P_IPV6,
};

use wirespeed_nic::bifurcate::{VerdictCounters, XDP_PASS, XDP_REDIRECT};
use wirespeed_nic::{AttachScope, Bifurcation, BifurcationConfig, Protocol};

const SERVED: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 10);
const OTHER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const PEER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
const BROADCAST: [u8; 6] = [0xff; 6];

/// An AF_XDP socket for slot 0 of the XSKMAP. Test runs only need the map entry to exist.
fn xdp_socket() -> OwnedFd {
    wirespeed_sys::xsk::socket().expect("socket(AF_XDP)")
}

fn loaded(cfg: &BifurcationConfig) -> (Bifurcation, OwnedFd) {
    wirespeed_lab::require_root();
    let mut b = Bifurcation::load(cfg).expect("load");
    let sock = xdp_socket();
    b.register_fd(0, &sock)
        .expect("register socket for queue 0");
    (b, sock)
}

fn config() -> BifurcationConfig {
    BifurcationConfig {
        tcp_ports: vec![80],
        udp_ports: vec![7000],
        ..BifurcationConfig::new(SERVED)
    }
}

fn tcp_to(dst: Ipv4Addr, dport: u16) -> Vec<u8> {
    ethernet(
        MAC_A,
        MAC_B,
        ETH_P_IP,
        &ipv4_raw(PEER, dst, 6, 0, &bare_tcp_syn(40000, dport)),
    )
}

#[test]
fn arp_for_the_served_address_is_redirected() {
    let (b, _s) = loaded(&config());
    let req = ethernet(
        BROADCAST,
        MAC_B,
        ETH_P_ARP,
        &arp_packet(1, MAC_B, PEER, [0; 6], SERVED),
    );
    assert_eq!(b.test_run(&req).unwrap(), XDP_REDIRECT);
    let reply = ethernet(
        MAC_A,
        MAC_B,
        ETH_P_ARP,
        &arp_packet(2, MAC_B, PEER, MAC_A, SERVED),
    );
    assert_eq!(
        b.test_run(&reply).unwrap(),
        XDP_REDIRECT,
        "replies to our own requests too"
    );
}

#[test]
fn arp_for_another_address_passes() {
    let (b, _s) = loaded(&config());
    let req = ethernet(
        BROADCAST,
        MAC_B,
        ETH_P_ARP,
        &arp_packet(1, MAC_B, PEER, [0; 6], OTHER),
    );
    assert_eq!(b.test_run(&req).unwrap(), XDP_PASS);
}

#[test]
fn tcp_to_a_served_port_is_redirected_and_other_ports_pass() {
    let (mut b, _s) = loaded(&config());
    assert_eq!(b.test_run(&tcp_to(SERVED, 80)).unwrap(), XDP_REDIRECT);
    assert_eq!(
        b.test_run(&tcp_to(SERVED, 22)).unwrap(),
        XDP_PASS,
        "other port"
    );
    assert_eq!(
        b.test_run(&tcp_to(OTHER, 80)).unwrap(),
        XDP_PASS,
        "served port on another address"
    );
    // Ports change while loaded.
    b.add_port(Protocol::Tcp, 22).unwrap();
    assert_eq!(b.test_run(&tcp_to(SERVED, 22)).unwrap(), XDP_REDIRECT);
    b.remove_port(Protocol::Tcp, 80).unwrap();
    assert_eq!(b.test_run(&tcp_to(SERVED, 80)).unwrap(), XDP_PASS);
}

#[test]
fn udp_ports_are_separate_from_tcp_ports() {
    let (b, _s) = loaded(&config());
    let udp = |dport| udp_frame(MAC_A, MAC_B, PEER, SERVED, 5000, dport, b"hi");
    assert_eq!(b.test_run(&udp(7000)).unwrap(), XDP_REDIRECT);
    assert_eq!(
        b.test_run(&udp(80)).unwrap(),
        XDP_PASS,
        "80 is served for TCP only"
    );
    assert_eq!(
        b.test_run(&tcp_to(SERVED, 7000)).unwrap(),
        XDP_PASS,
        "7000 is served for UDP only"
    );
}

#[test]
fn truncated_and_fragmented_frames_pass() {
    let (b, _s) = loaded(&config());
    let whole = tcp_to(SERVED, 80);
    for len in [14, 20, 33, 34 + 10] {
        assert_eq!(b.test_run(&whole[..len]).unwrap(), XDP_PASS, "cut at {len}");
    }
    let arp_req = ethernet(
        BROADCAST,
        MAC_B,
        ETH_P_ARP,
        &arp_packet(1, MAC_B, PEER, [0; 6], SERVED),
    );
    assert_eq!(
        b.test_run(&arp_req[..30]).unwrap(),
        XDP_PASS,
        "truncated ARP"
    );
    let mut bad_ihl = whole.clone();
    bad_ihl[14] = 0x44;
    assert_eq!(b.test_run(&bad_ihl).unwrap(), XDP_PASS, "IHL below 5");
    let first_fragment = ethernet(
        MAC_A,
        MAC_B,
        ETH_P_IP,
        &ipv4_raw(PEER, SERVED, 6, 0x2000, &bare_tcp_syn(1, 80)),
    );
    assert_eq!(
        b.test_run(&first_fragment).unwrap(),
        XDP_PASS,
        "fragments go to the kernel"
    );
    let later_fragment = ethernet(
        MAC_A,
        MAC_B,
        ETH_P_IP,
        &ipv4_raw(PEER, SERVED, 6, 0x0010, &[0; 20]),
    );
    assert_eq!(b.test_run(&later_fragment).unwrap(), XDP_PASS);
    let c = b.counters().unwrap();
    assert_eq!(c.passed_malformed, 8, "{c:?}");
}

/// The address the stack's alone: what a host answers (an unserved port's RST, ICMP
/// unreachable, reassembly, IEEE 802 ARP) goes to the stack; other addresses still pass.
#[test]
fn the_whole_address_is_the_stacks_when_the_kernel_owns_none() {
    let whole = BifurcationConfig {
        steer_all: true,
        steer_fragments: true,
        ..config()
    };
    let (b, _s) = loaded(&whole);
    let (narrow, _s2) = loaded(&config());
    let udp_closed = udp_frame(MAC_A, MAC_B, PEER, SERVED, 5000, 53, b"hi");
    let gre = ethernet(
        MAC_A,
        MAC_B,
        ETH_P_IP,
        &ipv4_raw(PEER, SERVED, 47, 0, &[0; 16]),
    );
    let fragment = ethernet(
        MAC_A,
        MAC_B,
        ETH_P_IP,
        &ipv4_raw(PEER, SERVED, 6, 0x2000, &bare_tcp_syn(1, 80)),
    );
    let mut arp_ieee802 = ethernet(
        BROADCAST,
        MAC_B,
        ETH_P_ARP,
        &arp_packet(1, MAC_B, PEER, [0; 6], SERVED),
    );
    arp_ieee802[14 + 1] = 6; // hardware type 6
    for (what, frame) in [
        ("TCP to an unserved port", tcp_to(SERVED, 22)),
        ("UDP to a closed port", udp_closed),
        ("another IP protocol", gre),
        ("a fragment", fragment.clone()),
        ("ARP of hardware type IEEE 802", arp_ieee802),
    ] {
        assert_eq!(b.test_run(&frame).unwrap(), XDP_REDIRECT, "{what}");
        assert_eq!(
            narrow.test_run(&frame).unwrap(),
            XDP_PASS,
            "{what}, port steering"
        );
    }
    assert_eq!(b.test_run(&tcp_to(OTHER, 80)).unwrap(), XDP_PASS);
    // With several queues a fragment stays the kernel's.
    let (several, _s3) = loaded(&BifurcationConfig {
        steer_fragments: false,
        ..whole
    });
    assert_eq!(several.test_run(&fragment).unwrap(), XDP_PASS);
    assert_eq!(several.test_run(&tcp_to(SERVED, 22)).unwrap(), XDP_REDIRECT);
}

#[test]
fn ip_options_are_skipped_to_find_the_ports() {
    let (b, _s) = loaded(&config());
    let mut ip = ipv4_raw(PEER, SERVED, 6, 0, &[]);
    ip[0] = 0x46;
    ip.extend_from_slice(&[1, 1, 1, 0]); // NOP NOP NOP EOL
    ip.extend_from_slice(&bare_tcp_syn(40000, 80));
    assert_eq!(
        b.test_run(&ethernet(MAC_A, MAC_B, ETH_P_IP, &ip)).unwrap(),
        XDP_REDIRECT
    );
}

/// BPF_PROG_TEST_RUN puts what does not fit one page (minus head and tail room, about 3.5 KB)
/// of a frame in fragments, as a veth does with a jumbo frame: the program steers it by the
/// headers in the linear part. (Kernel 6.18 runs such a frame through a program without the
/// frags flag too, so this checks the verdicts only; the lab test `jumbo_frames_cross_...`
/// checks the flag: without it a veth at MTU 9000 refuses the attach with ERANGE.)
#[test]
fn jumbo_frames_in_fragments_are_steered_by_their_linear_headers() {
    let (b, _s) = loaded(&config());
    let jumbo = |dport| udp_frame(MAC_A, MAC_B, PEER, SERVED, 5000, dport, &[7; 8972]);
    assert_eq!(jumbo(7000).len(), 9014);
    assert_eq!(b.test_run(&jumbo(7000)).unwrap(), XDP_REDIRECT);
    assert_eq!(b.test_run(&jumbo(7001)).unwrap(), XDP_PASS, "not served");
    let mut tcp = bare_tcp_syn(40000, 80);
    tcp.resize(9000 - 20, 0);
    let tcp = ethernet(MAC_A, MAC_B, ETH_P_IP, &ipv4_raw(PEER, SERVED, 6, 0, &tcp));
    assert_eq!(b.test_run(&tcp).unwrap(), XDP_REDIRECT);
    let c = b.counters().unwrap();
    assert_eq!((c.redirected, c.passed_other), (2, 1), "{c:?}");
}

#[test]
fn a_queue_without_a_socket_passes_even_ours() {
    wirespeed_lab::require_root();
    let b = Bifurcation::load(&config()).unwrap();
    assert_eq!(b.test_run(&tcp_to(SERVED, 80)).unwrap(), XDP_PASS);
    let c = b.counters().unwrap();
    assert_eq!(
        c,
        VerdictCounters {
            passed_no_socket: 1,
            ..VerdictCounters::default()
        }
    );
}

#[test]
fn switched_off_features_pass() {
    let cfg = BifurcationConfig {
        steer_arp: false,
        steer_tcp: false,
        steer_icmp: true,
        ..config()
    };
    let (b, s) = loaded(&cfg);
    let req = ethernet(
        BROADCAST,
        MAC_B,
        ETH_P_ARP,
        &arp_packet(1, MAC_B, PEER, [0; 6], SERVED),
    );
    assert_eq!(b.test_run(&req).unwrap(), XDP_PASS);
    assert_eq!(b.test_run(&tcp_to(SERVED, 80)).unwrap(), XDP_PASS);
    let ping = ethernet(
        MAC_A,
        MAC_B,
        ETH_P_IP,
        &ipv4_raw(PEER, SERVED, 1, 0, &[8, 0, 0, 0, 0, 1, 0, 1]),
    );
    assert_eq!(b.test_run(&ping).unwrap(), XDP_REDIRECT, "ICMP steering on");
    assert!(s.as_raw_fd() >= 0);
}

#[test]
fn attaching_outside_a_lab_namespace_is_refused() {
    wirespeed_lab::require_root();
    let mut b = Bifurcation::load(&config()).unwrap();
    let err = b.attach("lo", AttachScope::LabOnly).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("lab network namespace"), "{text}");
    assert!(
        text.contains("pass --allow-host"),
        "the refusal names the flag: {text}"
    );
    assert_eq!(b.attached_to(), None);
}

// IPv6: frames built by hand (checksums are left 0: the program reads none).

const SERVED6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0xab, 0xcd0a);
const OTHER6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
const PEER6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2);
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
const IPPROTO_ICMPV6: u8 = 58;

fn config6() -> BifurcationConfig {
    BifurcationConfig {
        served_ipv6: Some(SERVED6),
        ..config()
    }
}

/// The solicited-node group of `a` (RFC 4291 2.7.1): ff02::1:ff and its low 24 bits.
fn solicited_node(a: Ipv6Addr) -> Ipv6Addr {
    let o = a.octets();
    let mut g = [0u8; 16];
    g[..2].copy_from_slice(&[0xff, 0x02]);
    g[11..13].copy_from_slice(&[0x01, 0xff]);
    g[13..].copy_from_slice(&o[13..]);
    Ipv6Addr::from(g)
}

/// The Ethernet destination of an IPv6 packet: 33:33 and the group's low 32 bits for
/// multicast (RFC 2464 7), else our MAC.
fn mac_for(dst: Ipv6Addr) -> [u8; 6] {
    let o = dst.octets();
    if dst.is_multicast() {
        [0x33, 0x33, o[12], o[13], o[14], o[15]]
    } else {
        MAC_A
    }
}

/// An IPv6 extension header.
#[derive(Clone, Copy)]
enum Ext {
    HopByHop,
    Routing,
    DestOpts,
    /// A fragment header: offset in 8-octet units, more fragments.
    Fragment(u16, bool),
}

impl Ext {
    fn number(self) -> u8 {
        match self {
            Ext::HopByHop => 0,
            Ext::Routing => 43,
            Ext::DestOpts => 60,
            Ext::Fragment(..) => 44,
        }
    }

    /// The header with `next` as its next header. Options headers are 16 bytes (length 1,
    /// so the program must use the length field), padded with PadN.
    fn bytes(self, next: u8) -> Vec<u8> {
        match self {
            Ext::HopByHop | Ext::DestOpts => {
                let mut h = vec![next, 1, 1, 12];
                h.resize(16, 0);
                h
            }
            // Type 4 (segment routing), segments left 0: done with, as a host sees it.
            Ext::Routing => vec![next, 0, 4, 0, 0, 0, 0, 0],
            Ext::Fragment(offset, more) => {
                let field = (offset << 3) | u16::from(more);
                let mut h = vec![next, 0];
                h.extend_from_slice(&field.to_be_bytes());
                h.extend_from_slice(&[0x12, 0x34, 0x56, 0x78]);
                h
            }
        }
    }
}

/// Ethernet + IPv6 + the extension headers in order + the upper-layer `payload` of protocol
/// `proto`.
fn ipv6_frame(src: Ipv6Addr, dst: Ipv6Addr, exts: &[Ext], proto: u8, payload: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    for (i, e) in exts.iter().enumerate() {
        let next = exts.get(i + 1).map_or(proto, |n| n.number());
        body.extend_from_slice(&e.bytes(next));
    }
    body.extend_from_slice(payload);
    let first = exts.first().map_or(proto, |e| e.number());
    let mut ip = vec![0x60, 0, 0, 0];
    ip.extend_from_slice(&(body.len() as u16).to_be_bytes());
    ip.extend_from_slice(&[first, if proto == IPPROTO_ICMPV6 { 255 } else { 64 }]);
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&dst.octets());
    ip.extend_from_slice(&body);
    ethernet(mac_for(dst), MAC_B, ETH_P_IPV6, &ip)
}

fn tcp6_to(dst: Ipv6Addr, exts: &[Ext], dport: u16) -> Vec<u8> {
    ipv6_frame(PEER6, dst, exts, 6, &bare_tcp_syn(40000, dport))
}

fn udp6_to(dst: Ipv6Addr, dport: u16) -> Vec<u8> {
    let mut u = vec![0x13, 0x88];
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&[0, 10, 0, 0, b'h', b'i']);
    ipv6_frame(PEER6, dst, &[], 17, &u)
}

/// An ICMPv6 message: type, code, checksum 0, then `rest`.
fn icmp6(kind: u8, rest: &[u8]) -> Vec<u8> {
    let mut m = vec![kind, 0, 0, 0];
    m.extend_from_slice(rest);
    m
}

/// A Neighbour Solicitation (135) or Advertisement (136) for `target`, with a link-layer
/// address option.
fn nd(kind: u8, flags: u8, target: Ipv6Addr) -> Vec<u8> {
    let mut rest = vec![flags, 0, 0, 0];
    rest.extend_from_slice(&target.octets());
    rest.extend_from_slice(&[if kind == 135 { 1 } else { 2 }, 1]);
    rest.extend_from_slice(&MAC_B);
    icmp6(kind, &rest)
}

fn ns(src: Ipv6Addr, dst: Ipv6Addr, target: Ipv6Addr) -> Vec<u8> {
    ipv6_frame(src, dst, &[], IPPROTO_ICMPV6, &nd(135, 0, target))
}

/// An advertisement, solicited and override flags set (or only override to all nodes).
fn na(dst: Ipv6Addr, target: Ipv6Addr) -> Vec<u8> {
    let flags = if dst.is_multicast() { 0x20 } else { 0x60 };
    ipv6_frame(PEER6, dst, &[], IPPROTO_ICMPV6, &nd(136, flags, target))
}

fn echo6(kind: u8) -> Vec<u8> {
    ipv6_frame(
        PEER6,
        SERVED6,
        &[],
        IPPROTO_ICMPV6,
        &icmp6(kind, &[0, 1, 0, 1, b'x']),
    )
}

#[test]
fn ipv6_tcp_and_udp_to_served_ports_are_redirected_and_others_pass() {
    let (mut b, _s) = loaded(&config6());
    assert_eq!(
        b.test_run(&tcp6_to(SERVED6, &[], 80)).unwrap(),
        XDP_REDIRECT
    );
    assert_eq!(b.test_run(&udp6_to(SERVED6, 7000)).unwrap(), XDP_REDIRECT);
    for (what, frame) in [
        ("TCP to an unserved port", tcp6_to(SERVED6, &[], 22)),
        ("TCP to a UDP port", tcp6_to(SERVED6, &[], 7000)),
        ("UDP to a TCP port", udp6_to(SERVED6, 80)),
        ("TCP to another address", tcp6_to(OTHER6, &[], 80)),
        ("UDP to another address", udp6_to(OTHER6, 7000)),
        ("TCP to our IPv4 address's bytes", {
            let mut v4_mapped = [0u8; 16];
            v4_mapped[10..12].copy_from_slice(&[0xff, 0xff]);
            v4_mapped[12..].copy_from_slice(&SERVED.octets());
            tcp6_to(Ipv6Addr::from(v4_mapped), &[], 80)
        }),
    ] {
        assert_eq!(b.test_run(&frame).unwrap(), XDP_PASS, "{what}");
    }
    // The port map is shared with IPv4 and changes while loaded.
    b.add_port(Protocol::Tcp, 22).unwrap();
    assert_eq!(
        b.test_run(&tcp6_to(SERVED6, &[], 22)).unwrap(),
        XDP_REDIRECT
    );
    assert_eq!(b.test_run(&tcp_to(SERVED, 22)).unwrap(), XDP_REDIRECT);
    b.remove_port(Protocol::Tcp, 80).unwrap();
    assert_eq!(b.test_run(&tcp6_to(SERVED6, &[], 80)).unwrap(), XDP_PASS);
    let c = b.counters().unwrap();
    assert_eq!(
        (c.redirected, c.passed_other, c.passed_malformed),
        (4, 7, 0),
        "{c:?}"
    );
}

#[test]
fn ipv6_extension_headers_are_walked_to_the_transport_header() {
    let (b, _s) = loaded(&config6());
    let hbh = [Ext::HopByHop];
    assert_eq!(
        b.test_run(&tcp6_to(SERVED6, &hbh, 80)).unwrap(),
        XDP_REDIRECT
    );
    assert_eq!(
        b.test_run(&tcp6_to(SERVED6, &hbh, 22)).unwrap(),
        XDP_PASS,
        "hop-by-hop, then an unserved port"
    );
    let chain = [Ext::HopByHop, Ext::DestOpts, Ext::Routing, Ext::DestOpts];
    assert_eq!(
        b.test_run(&tcp6_to(SERVED6, &chain, 80)).unwrap(),
        XDP_REDIRECT,
        "RFC 8200's order"
    );
    let six = [Ext::DestOpts; 6];
    assert_eq!(
        b.test_run(&tcp6_to(SERVED6, &six, 80)).unwrap(),
        XDP_REDIRECT,
        "six headers, the walk's bound"
    );
    let c = b.counters().unwrap();
    assert_eq!((c.redirected, c.passed_malformed), (3, 0), "{c:?}");
    // What the walk cannot finish is the kernel's, counted malformed.
    let seven = [Ext::DestOpts; 7];
    assert_eq!(
        b.test_run(&tcp6_to(SERVED6, &seven, 80)).unwrap(),
        XDP_PASS,
        "seven headers"
    );
    let cut = tcp6_to(SERVED6, &chain, 80);
    for len in [
        14 + 40 + 1,
        14 + 40 + 10,
        14 + 40 + 16 + 16 + 4,
        cut.len() - 1,
    ] {
        assert_eq!(b.test_run(&cut[..len]).unwrap(), XDP_PASS, "cut at {len}");
    }
    let c = b.counters().unwrap();
    assert_eq!((c.redirected, c.passed_malformed), (3, 5), "{c:?}");
}

#[test]
fn ipv6_fragments_are_the_stacks_only_with_steer_fragments() {
    let fragments = [
        (
            "a first fragment",
            tcp6_to(SERVED6, &[Ext::Fragment(0, true)], 80),
        ),
        (
            "a later fragment",
            ipv6_frame(PEER6, SERVED6, &[Ext::Fragment(185, false)], 6, &[0; 24]),
        ),
        (
            "a fragment behind hop-by-hop",
            tcp6_to(SERVED6, &[Ext::HopByHop, Ext::Fragment(0, true)], 80),
        ),
    ];
    let (b, _s) = loaded(&config6());
    for (what, frame) in &fragments {
        assert_eq!(b.test_run(frame).unwrap(), XDP_PASS, "{what}");
    }
    assert_eq!(b.counters().unwrap().passed_malformed, 3);
    let (reassembling, _s2) = loaded(&BifurcationConfig {
        steer_fragments: true,
        ..config6()
    });
    for (what, frame) in &fragments {
        assert_eq!(
            reassembling.test_run(frame).unwrap(),
            XDP_REDIRECT,
            "{what}, steer_fragments"
        );
    }
    let elsewhere = tcp6_to(OTHER6, &[Ext::Fragment(0, true)], 80);
    assert_eq!(
        reassembling.test_run(&elsewhere).unwrap(),
        XDP_PASS,
        "a fragment to another address"
    );
}

#[test]
fn ipv6_the_whole_address_is_the_stacks_with_steer_all() {
    let whole = BifurcationConfig {
        steer_all: true,
        ..config6()
    };
    let (b, _s) = loaded(&whole);
    for (what, frame) in [
        ("TCP to an unserved port", tcp6_to(SERVED6, &[], 22)),
        ("UDP to a closed port", udp6_to(SERVED6, 53)),
        (
            "another protocol",
            ipv6_frame(PEER6, SERVED6, &[], 47, &[0; 16]),
        ),
        ("no next header", ipv6_frame(PEER6, SERVED6, &[], 59, &[])),
        ("a router advertisement sent to us", {
            ipv6_frame(PEER6, SERVED6, &[], IPPROTO_ICMPV6, &icmp6(134, &[0; 12]))
        }),
        ("an echo request", echo6(128)),
        (
            "seven extension headers",
            tcp6_to(SERVED6, &[Ext::DestOpts; 7], 22),
        ),
    ] {
        assert_eq!(b.test_run(&frame).unwrap(), XDP_REDIRECT, "{what}");
    }
    let fragment = tcp6_to(SERVED6, &[Ext::Fragment(0, true)], 22);
    assert_eq!(
        b.test_run(&fragment).unwrap(),
        XDP_PASS,
        "a fragment without steer_fragments"
    );
    assert_eq!(
        b.test_run(&tcp6_to(OTHER6, &[], 22)).unwrap(),
        XDP_PASS,
        "another address"
    );
    let ra = ipv6_frame(PEER6, ALL_NODES, &[], IPPROTO_ICMPV6, &icmp6(134, &[0; 12]));
    assert_eq!(b.test_run(&ra).unwrap(), XDP_PASS, "multicast is not ours");
    let (all_fragments, _s2) = loaded(&BifurcationConfig {
        steer_fragments: true,
        ..whole
    });
    assert_eq!(all_fragments.test_run(&fragment).unwrap(), XDP_REDIRECT);
}

#[test]
fn neighbour_solicitations_for_the_served_address_are_redirected() {
    let (b, _s) = loaded(&config6());
    let group = solicited_node(SERVED6);
    assert_eq!(group.to_string(), "ff02::1:ffab:cd0a");
    assert_eq!(
        b.test_run(&ns(PEER6, group, SERVED6)).unwrap(),
        XDP_REDIRECT,
        "address resolution"
    );
    assert_eq!(
        b.test_run(&ns(Ipv6Addr::UNSPECIFIED, group, SERVED6))
            .unwrap(),
        XDP_REDIRECT,
        "duplicate address detection"
    );
    assert_eq!(
        b.test_run(&ns(PEER6, SERVED6, SERVED6)).unwrap(),
        XDP_REDIRECT,
        "unreachability detection, unicast"
    );
    for (what, frame) in [
        ("another target", ns(PEER6, solicited_node(OTHER6), OTHER6)),
        (
            "another target in our solicited-node group",
            ns(
                PEER6,
                group,
                Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 1, 0xab, 0xcd0a),
            ),
        ),
        (
            "our target, another group",
            ns(PEER6, solicited_node(OTHER6), SERVED6),
        ),
        ("our target, all nodes", ns(PEER6, ALL_NODES, SERVED6)),
    ] {
        assert_eq!(b.test_run(&frame).unwrap(), XDP_PASS, "{what}");
    }
    let solicitation = ns(PEER6, group, SERVED6);
    assert_eq!(
        b.test_run(&solicitation[..solicitation.len() - 16])
            .unwrap(),
        XDP_PASS,
        "target cut off"
    );
    let c = b.counters().unwrap();
    assert_eq!(
        (c.redirected, c.passed_other, c.passed_malformed),
        (3, 4, 1),
        "{c:?}"
    );
}

#[test]
fn neighbour_advertisements_to_us_and_of_our_address_are_redirected() {
    let (b, _s) = loaded(&config6());
    assert_eq!(
        b.test_run(&na(SERVED6, PEER6)).unwrap(),
        XDP_REDIRECT,
        "an answer to our solicitation"
    );
    assert_eq!(
        b.test_run(&na(ALL_NODES, SERVED6)).unwrap(),
        XDP_REDIRECT,
        "someone else claims our address"
    );
    assert_eq!(
        b.test_run(&na(ALL_NODES, PEER6)).unwrap(),
        XDP_PASS,
        "an unsolicited advertisement of another address"
    );
    assert_eq!(
        b.test_run(&na(OTHER6, PEER6)).unwrap(),
        XDP_PASS,
        "an advertisement to another address"
    );
    assert_eq!(
        b.test_run(&na(solicited_node(SERVED6), SERVED6)).unwrap(),
        XDP_PASS,
        "our target, another group than all nodes"
    );
}

#[test]
fn other_ipv6_multicast_passes_and_what_a_host_answers_at_its_groups_is_the_stacks_alone() {
    let whole = BifurcationConfig {
        steer_icmp: true,
        steer_all: true,
        ..config6()
    };
    let (b, _s) = loaded(&whole);
    let (shared, _s2) = loaded(&BifurcationConfig {
        steer_icmp: true,
        ..config6()
    });
    let mut ra_body = vec![64, 0, 0x07, 0x08];
    ra_body.resize(12, 0);
    let ra = ipv6_frame(
        Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1),
        ALL_NODES,
        &[],
        IPPROTO_ICMPV6,
        &icmp6(134, &ra_body),
    );
    let mut mld_query = vec![0, 0, 0, 0];
    mld_query.extend_from_slice(&[0; 16]);
    let mld = ipv6_frame(
        Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1),
        ALL_NODES,
        &[Ext::HopByHop],
        IPPROTO_ICMPV6,
        &icmp6(130, &mld_query),
    );
    // The kernel's, whoever owns the address: it keeps its router and group membership.
    for (what, frame) in [("a router advertisement", &ra), ("an MLD query", &mld)] {
        assert_eq!(b.test_run(frame).unwrap(), XDP_PASS, "{what}");
        assert_eq!(shared.test_run(frame).unwrap(), XDP_PASS, "{what}");
    }
    let echo_to_all = ipv6_frame(PEER6, ALL_NODES, &[], IPPROTO_ICMPV6, &icmp6(128, &[0; 4]));
    let udp_to_group = {
        let mut f = udp6_to(SERVED6, 7000);
        f[14 + 24..14 + 40].copy_from_slice(&solicited_node(SERVED6).octets());
        f
    };
    let ns_to_all = ns(PEER6, ALL_NODES, SERVED6);
    // Where the address is the stack's alone, so is what a host with it answers at all
    // nodes and at its solicited-node group; where the kernel shares it, the kernel's.
    for (what, frame) in [
        ("an echo request to all nodes", &echo_to_all),
        ("UDP to our solicited-node group", &udp_to_group),
        ("a solicitation for our address to all nodes", &ns_to_all),
    ] {
        assert_eq!(
            b.test_run(frame).unwrap(),
            XDP_REDIRECT,
            "{what}, steer_all"
        );
        assert_eq!(shared.test_run(frame).unwrap(), XDP_PASS, "{what}, shared");
    }
    let ns_other = ns(PEER6, ALL_NODES, OTHER6);
    assert_eq!(b.test_run(&ns_other).unwrap(), XDP_PASS, "another target");
    let c = b.counters().unwrap();
    assert_eq!((c.passed_other, c.passed_malformed), (3, 0), "{c:?}");
}

#[test]
fn icmpv6_echo_and_errors_follow_steer_icmp() {
    let unreachable = {
        let mut quoted = vec![0, 0, 0, 0];
        quoted.extend_from_slice(&tcp6_to(PEER6, &[], 40000)[14..]);
        ipv6_frame(OTHER6, SERVED6, &[], IPPROTO_ICMPV6, &icmp6(1, &quoted))
    };
    let too_big = ipv6_frame(
        OTHER6,
        SERVED6,
        &[],
        IPPROTO_ICMPV6,
        &icmp6(2, &[0, 0, 5, 0]),
    );
    let frames = [
        ("an echo request", echo6(128)),
        ("an echo reply", echo6(129)),
        ("destination unreachable", unreachable),
        ("packet too big", too_big),
    ];
    let (off, _s) = loaded(&config6());
    let (on, _s2) = loaded(&BifurcationConfig {
        steer_icmp: true,
        ..config6()
    });
    for (what, frame) in &frames {
        assert_eq!(
            off.test_run(frame).unwrap(),
            XDP_PASS,
            "{what}, steer_icmp off"
        );
        assert_eq!(
            on.test_run(frame).unwrap(),
            XDP_REDIRECT,
            "{what}, steer_icmp on"
        );
    }
    let redirect = ipv6_frame(OTHER6, SERVED6, &[], IPPROTO_ICMPV6, &icmp6(137, &[0; 36]));
    assert_eq!(
        on.test_run(&redirect).unwrap(),
        XDP_PASS,
        "a redirect is neither echo nor error"
    );
    // Neighbour discovery follows steer_arp, not steer_icmp.
    let (no_nd, _s3) = loaded(&BifurcationConfig {
        steer_arp: false,
        steer_icmp: true,
        ..config6()
    });
    assert_eq!(no_nd.test_run(&echo6(128)).unwrap(), XDP_REDIRECT);
    for (what, frame) in [
        (
            "a solicitation",
            ns(PEER6, solicited_node(SERVED6), SERVED6),
        ),
        ("a unicast solicitation", ns(PEER6, SERVED6, SERVED6)),
        ("an advertisement to us", na(SERVED6, PEER6)),
        ("a duplicate's advertisement", na(ALL_NODES, SERVED6)),
    ] {
        assert_eq!(
            no_nd.test_run(&frame).unwrap(),
            XDP_PASS,
            "{what}, steer_arp off"
        );
    }
}

#[test]
fn ipv6_passes_when_no_ipv6_address_is_served() {
    let cfg = BifurcationConfig {
        steer_icmp: true,
        steer_all: true,
        steer_fragments: true,
        ..config()
    };
    assert_eq!(cfg.served_ipv6, None, "the default");
    let (b, _s) = loaded(&cfg);
    let zeros = Ipv6Addr::UNSPECIFIED;
    for (what, frame) in [
        ("TCP to a served port", tcp6_to(SERVED6, &[], 80)),
        ("TCP to ::", tcp6_to(zeros, &[], 80)),
        (
            "a solicitation for ::",
            ns(PEER6, solicited_node(zeros), zeros),
        ),
        ("an advertisement of :: to all nodes", na(ALL_NODES, zeros)),
        ("an echo request", echo6(128)),
    ] {
        assert_eq!(b.test_run(&frame).unwrap(), XDP_PASS, "{what}");
    }
    assert_eq!(
        b.test_run(&tcp_to(SERVED, 22)).unwrap(),
        XDP_REDIRECT,
        "IPv4 still"
    );
    let c = b.counters().unwrap();
    assert_eq!((c.passed_other, c.passed_malformed), (5, 0), "{c:?}");
}

#[test]
fn ipv6_alone_is_served_when_the_ipv4_address_is_unspecified() {
    let (b, _s) = loaded(&BifurcationConfig {
        served_ipv4: Ipv4Addr::UNSPECIFIED,
        ..config6()
    });
    assert_eq!(
        b.test_run(&tcp6_to(SERVED6, &[], 80)).unwrap(),
        XDP_REDIRECT
    );
    assert_eq!(
        b.test_run(&ns(PEER6, solicited_node(SERVED6), SERVED6))
            .unwrap(),
        XDP_REDIRECT
    );
    assert_eq!(
        b.test_run(&tcp_to(Ipv4Addr::UNSPECIFIED, 80)).unwrap(),
        XDP_PASS
    );
    let arp_for_zero = ethernet(
        BROADCAST,
        MAC_B,
        ETH_P_ARP,
        &arp_packet(1, MAC_B, PEER, [0; 6], Ipv4Addr::UNSPECIFIED),
    );
    assert_eq!(b.test_run(&arp_for_zero).unwrap(), XDP_PASS);
}

#[test]
fn a_multicast_or_unspecified_ipv6_address_is_refused() {
    wirespeed_lab::require_root();
    for bad in [Ipv6Addr::UNSPECIFIED, ALL_NODES, solicited_node(SERVED6)] {
        let err = Bifurcation::load(&BifurcationConfig {
            served_ipv6: Some(bad),
            ..config()
        })
        .unwrap_err();
        assert!(err.to_string().contains("unicast"), "{bad}: {err}");
    }
}

#[test]
fn truncated_ipv6_frames_pass() {
    let (b, _s) = loaded(&BifurcationConfig {
        steer_all: true,
        ..config6()
    });
    let whole = tcp6_to(SERVED6, &[], 80);
    assert_eq!(b.test_run(&whole).unwrap(), XDP_REDIRECT);
    for len in [14, 15, 14 + 24, 14 + 39] {
        assert_eq!(b.test_run(&whole[..len]).unwrap(), XDP_PASS, "cut at {len}");
    }
    let mut version4 = whole.clone();
    version4[14] = 0x40;
    assert_eq!(
        b.test_run(&version4).unwrap(),
        XDP_PASS,
        "version 4 in an IPv6 frame"
    );
    let c = b.counters().unwrap();
    assert_eq!((c.redirected, c.passed_malformed), (1, 5), "{c:?}");
    // Port steering needs the transport header whole.
    let (ports, _s2) = loaded(&config6());
    for len in [14 + 40, 14 + 40 + 3] {
        assert_eq!(
            ports.test_run(&whole[..len]).unwrap(),
            XDP_PASS,
            "cut at {len}"
        );
    }
    let echo = echo6(128);
    let (icmp, _s3) = loaded(&BifurcationConfig {
        steer_icmp: true,
        ..config6()
    });
    assert_eq!(
        icmp.test_run(&echo[..14 + 40 + 3]).unwrap(),
        XDP_PASS,
        "ICMPv6 cut"
    );
    assert_eq!(ports.counters().unwrap().passed_malformed, 2);
    assert_eq!(icmp.counters().unwrap().passed_malformed, 1);
}

/// The link-local address the kernel gives an interface with MAC 02:00:00:00:00:0a.
const LINK_LOCAL6: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0xff, 0xfe00, 0x0a);

#[test]
fn the_stacks_link_local_address_is_steered_as_the_served_one() {
    let with_ll = BifurcationConfig {
        served_ipv6_link_local: Some(LINK_LOCAL6),
        steer_icmp: true,
        ..config6()
    };
    let (b, _s) = loaded(&with_ll);
    let group = solicited_node(LINK_LOCAL6);
    assert_eq!(group.to_string(), "ff02::1:ff00:a");
    let echo = ipv6_frame(
        PEER6,
        LINK_LOCAL6,
        &[],
        IPPROTO_ICMPV6,
        &icmp6(128, &[0, 1, 0, 1]),
    );
    for (what, frame) in [
        ("TCP to a served port", tcp6_to(LINK_LOCAL6, &[], 80)),
        ("UDP to a served port", udp6_to(LINK_LOCAL6, 7000)),
        ("an echo request", echo.clone()),
        ("address resolution", ns(PEER6, group, LINK_LOCAL6)),
        (
            "duplicate address detection",
            ns(Ipv6Addr::UNSPECIFIED, group, LINK_LOCAL6),
        ),
        (
            "a unicast solicitation",
            ns(PEER6, LINK_LOCAL6, LINK_LOCAL6),
        ),
        ("an advertisement to it", na(LINK_LOCAL6, PEER6)),
        ("a duplicate's advertisement", na(ALL_NODES, LINK_LOCAL6)),
        ("the served address still", tcp6_to(SERVED6, &[], 80)),
        (
            "the served address's group still",
            ns(PEER6, solicited_node(SERVED6), SERVED6),
        ),
    ] {
        assert_eq!(b.test_run(&frame).unwrap(), XDP_REDIRECT, "{what}");
    }
    for (what, frame) in [
        ("TCP to an unserved port", tcp6_to(LINK_LOCAL6, &[], 22)),
        (
            "another link-local address",
            tcp6_to(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0x0a), &[], 80),
        ),
        (
            "another target in its group",
            ns(PEER6, group, Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 1, 0, 0x0a)),
        ),
    ] {
        assert_eq!(b.test_run(&frame).unwrap(), XDP_PASS, "{what}");
    }
    // With steer_all, everything to it and to its solicited-node group.
    let (whole, _s2) = loaded(&BifurcationConfig {
        steer_all: true,
        ..with_ll.clone()
    });
    let mut to_group = udp6_to(LINK_LOCAL6, 53);
    to_group[14 + 24..14 + 40].copy_from_slice(&group.octets());
    for frame in [tcp6_to(LINK_LOCAL6, &[], 22), to_group] {
        assert_eq!(whole.test_run(&frame).unwrap(), XDP_REDIRECT);
    }
    // Without it, the kernel keeps what is sent to the link-local address.
    let (without, _s3) = loaded(&BifurcationConfig {
        served_ipv6_link_local: None,
        ..with_ll
    });
    for frame in [
        tcp6_to(LINK_LOCAL6, &[], 80),
        echo,
        ns(PEER6, group, LINK_LOCAL6),
    ] {
        assert_eq!(without.test_run(&frame).unwrap(), XDP_PASS);
    }
}

#[test]
fn a_link_local_address_alone_is_refused() {
    wirespeed_lab::require_root();
    let err = Bifurcation::load(&BifurcationConfig {
        served_ipv6_link_local: Some(LINK_LOCAL6),
        ..config()
    })
    .unwrap_err();
    assert!(err.to_string().contains("needs a served IPv6"), "{err}");
}
