//! The bifurcation program's verdicts, through BPF_PROG_TEST_RUN with packet fixtures.
//! Needs root (CAP_BPF) but no namespace: nothing is attached.

mod common;

use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use common::*;
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
    // SAFETY: plain socket(2); the fd is owned at once.
    let fd = unsafe { libc::socket(44, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    assert!(
        fd >= 0,
        "socket(AF_XDP): {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: fresh fd.
    unsafe { OwnedFd::from_raw_fd(fd) }
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
        ETH_IPV4,
        &ipv4(PEER, dst, 6, 0, &tcp_syn(40000, dport)),
    )
}

#[test]
fn arp_for_the_served_address_is_redirected() {
    let (b, _s) = loaded(&config());
    let req = ethernet(
        BROADCAST,
        MAC_B,
        ETH_ARP,
        &arp(1, MAC_B, PEER, [0; 6], SERVED),
    );
    assert_eq!(b.test_run(&req).unwrap(), XDP_REDIRECT);
    let reply = ethernet(MAC_A, MAC_B, ETH_ARP, &arp(2, MAC_B, PEER, MAC_A, SERVED));
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
        ETH_ARP,
        &arp(1, MAC_B, PEER, [0; 6], OTHER),
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
fn ipv6_passes() {
    let (b, _s) = loaded(&config());
    let mut v6 = vec![0x60, 0, 0, 0, 0, 20, 6, 64];
    v6.extend_from_slice(&[0xfd; 32]);
    v6.extend_from_slice(&tcp_syn(40000, 80));
    assert_eq!(
        b.test_run(&ethernet(MAC_A, MAC_B, ETH_IPV6, &v6)).unwrap(),
        XDP_PASS
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
        ETH_ARP,
        &arp(1, MAC_B, PEER, [0; 6], SERVED),
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
        ETH_IPV4,
        &ipv4(PEER, SERVED, 6, 0x2000, &tcp_syn(1, 80)),
    );
    assert_eq!(
        b.test_run(&first_fragment).unwrap(),
        XDP_PASS,
        "fragments go to the kernel"
    );
    let later_fragment = ethernet(
        MAC_A,
        MAC_B,
        ETH_IPV4,
        &ipv4(PEER, SERVED, 6, 0x0010, &[0; 20]),
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
    let gre = ethernet(MAC_A, MAC_B, ETH_IPV4, &ipv4(PEER, SERVED, 47, 0, &[0; 16]));
    let fragment = ethernet(
        MAC_A,
        MAC_B,
        ETH_IPV4,
        &ipv4(PEER, SERVED, 6, 0x2000, &tcp_syn(1, 80)),
    );
    let mut arp_ieee802 = ethernet(
        BROADCAST,
        MAC_B,
        ETH_ARP,
        &arp(1, MAC_B, PEER, [0; 6], SERVED),
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
    let mut ip = ipv4(PEER, SERVED, 6, 0, &[]);
    ip[0] = 0x46;
    ip.extend_from_slice(&[1, 1, 1, 0]); // NOP NOP NOP EOL
    ip.extend_from_slice(&tcp_syn(40000, 80));
    assert_eq!(
        b.test_run(&ethernet(MAC_A, MAC_B, ETH_IPV4, &ip)).unwrap(),
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
    let mut tcp = tcp_syn(40000, 80);
    tcp.resize(9000 - 20, 0);
    let tcp = ethernet(MAC_A, MAC_B, ETH_IPV4, &ipv4(PEER, SERVED, 6, 0, &tcp));
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
        ETH_ARP,
        &arp(1, MAC_B, PEER, [0; 6], SERVED),
    );
    assert_eq!(b.test_run(&req).unwrap(), XDP_PASS);
    assert_eq!(b.test_run(&tcp_to(SERVED, 80)).unwrap(), XDP_PASS);
    let ping = ethernet(
        MAC_A,
        MAC_B,
        ETH_IPV4,
        &ipv4(PEER, SERVED, 1, 0, &[8, 0, 0, 0, 0, 1, 0, 1]),
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
