//! Cases generated from a seed: what to send, and to whom replies will go.
//!
//! Case `i` belongs to a class picked round-robin from a weighted cycle (so every class is
//! drawn in any run of a few dozen cases) and draws its details from its own generator
//! (`Rng::for_case(seed, i)`), so a seed always gives the same cases. Each case has its own
//! crafted peer address and source port (`craft::peer_ip`, `craft::peer_port`), which is how
//! replies are told apart from late frames of earlier cases.

mod arp_icmp;
pub mod flow;
mod icmp6;
mod ip;
mod ip6;
mod tcp;

use serde::Serialize;

use crate::craft::{self, Ip4, Ip6, Tcp, DUT_IP, DUT_IP6, DUT_MAC, PEER_MAC};
use flow::Flow;
use wirespeed_testkit::rng::Rng;

/// What a case exercises; the summary and the table of known differences go by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    /// A plain SYN to the listening port or a plain echo: both twins must agree, or the
    /// harness itself is broken.
    Control,
    /// Ethernet destination: broadcast, multicast, another host's unicast.
    EthDst,
    /// IPv4 sources a host must not answer: 0/8, 127/8, 240/4, multicast, broadcast, ours.
    IpSource,
    /// IPv4 header edges: checksum, version, IHL, total length, TTL, TOS, flags, special
    /// destinations.
    IpHeader,
    /// IPv4 options: NOP/EOL, record route, source routes, timestamps, malformed lengths.
    IpOptions,
    /// A SYN or an echo in fragments: in order, reversed, duplicated, overlapping, tiny.
    Fragments,
    /// Flag combinations to the listening port.
    TcpListen,
    /// Flag combinations to a port nobody listens on.
    TcpClosed,
    /// TCP options of a SYN: valid, malformed lengths, MD5, AO, MSS edges, data offsets.
    TcpOptions,
    /// ARP: requests, probes (RFC 5227), conflicts, gratuitous, malformed.
    Arp,
    /// ICMP: echo edges and the other types.
    Icmp,
    /// UDP and unknown IP protocols.
    OtherProto,
    /// A connection driven into a state, then one edge segment.
    TcpState,
    /// IPv6 header edges: hop limit, traffic class, flow label, payload length, version,
    /// Ethernet destinations.
    Ip6Header,
    /// IPv6 martian sources and destinations that are not ours.
    Ip6Addr,
    /// IPv6 extension headers: options of each action, routing headers, chains, next
    /// headers.
    Ip6Ext,
    /// IPv6 fragment headers: atomic, alone, a SYN or an echo in fragments.
    Ip6Frag,
    /// ICMPv6: echo edges, unknown types, errors, checksums.
    Icmp6,
    /// Neighbour discovery: solicitations, advertisements, router messages, redirects.
    Ndp,
    /// TCP over IPv6: flag combinations to the listening port and a closed one.
    Tcp6,
    /// UDP over IPv6 and next headers nobody handles.
    Udp6,
    /// A connection over IPv6 driven into a state, then one edge segment.
    Tcp6State,
}

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::Control => "control",
            Class::EthDst => "eth-dst",
            Class::IpSource => "ip-source",
            Class::IpHeader => "ip-header",
            Class::IpOptions => "ip-options",
            Class::Fragments => "fragments",
            Class::TcpListen => "tcp-listen",
            Class::TcpClosed => "tcp-closed",
            Class::TcpOptions => "tcp-options",
            Class::Arp => "arp",
            Class::Icmp => "icmp",
            Class::OtherProto => "other-proto",
            Class::TcpState => "tcp-state",
            Class::Ip6Header => "ip6-header",
            Class::Ip6Addr => "ip6-addr",
            Class::Ip6Ext => "ip6-ext",
            Class::Ip6Frag => "ip6-frag",
            Class::Icmp6 => "icmp6",
            Class::Ndp => "ndp",
            Class::Tcp6 => "tcp6",
            Class::Udp6 => "udp6",
            Class::Tcp6State => "tcp6-state",
        }
    }

    /// The IPv6 classes (`--only ipv6`).
    pub const V6: [Class; 9] = [
        Class::Ip6Header,
        Class::Ip6Addr,
        Class::Ip6Ext,
        Class::Ip6Frag,
        Class::Icmp6,
        Class::Ndp,
        Class::Tcp6,
        Class::Udp6,
        Class::Tcp6State,
    ];

    pub fn is_v6(self) -> bool {
        Class::V6.contains(&self)
    }

    pub const ALL: [Class; 22] = [
        Class::Control,
        Class::EthDst,
        Class::IpSource,
        Class::IpHeader,
        Class::IpOptions,
        Class::Fragments,
        Class::TcpListen,
        Class::TcpClosed,
        Class::TcpOptions,
        Class::Arp,
        Class::Icmp,
        Class::OtherProto,
        Class::TcpState,
        Class::Ip6Header,
        Class::Ip6Addr,
        Class::Ip6Ext,
        Class::Ip6Frag,
        Class::Icmp6,
        Class::Ndp,
        Class::Tcp6,
        Class::Udp6,
        Class::Tcp6State,
    ];

    pub fn parse(s: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.name() == s)
    }

    /// A class by name, or a group: `ipv6` (every IPv6 class), `ipv4` (the others).
    pub fn parse_group(s: &str) -> Option<Vec<Class>> {
        match s {
            "ipv6" => Some(Class::V6.to_vec()),
            "ipv4" => Some(Class::ALL.into_iter().filter(|c| !c.is_v6()).collect()),
            _ => Class::parse(s).map(|c| vec![c]),
        }
    }
}

/// The order classes come in: the stateful classes most often, they have the most to
/// explore; a third of the cycle is IPv6.
const CYCLE: [Class; 30] = [
    Class::Control,
    Class::TcpState,
    Class::TcpListen,
    Class::Ip6Ext,
    Class::TcpOptions,
    Class::Arp,
    Class::Tcp6State,
    Class::TcpState,
    Class::IpOptions,
    Class::Icmp,
    Class::Ndp,
    Class::TcpClosed,
    Class::TcpState,
    Class::Ip6Header,
    Class::IpHeader,
    Class::Fragments,
    Class::Icmp6,
    Class::TcpListen,
    Class::TcpState,
    Class::Tcp6,
    Class::IpSource,
    Class::EthDst,
    Class::Ip6Addr,
    Class::TcpOptions,
    Class::TcpState,
    Class::Udp6,
    Class::OtherProto,
    Class::Arp,
    Class::Ip6Frag,
    Class::Tcp6State,
];

/// What the harness does for a case.
#[derive(Debug, Clone)]
pub enum Script {
    /// Send these frames back to back, then listen for the window.
    Frames(Vec<Vec<u8>>),
    /// Drive a connection into a state (the handshake done by the harness, each side's ISN
    /// tracked apart), then send one edge segment and listen for the window.
    Flow(Flow),
}

/// One generated case.
#[derive(Debug, Clone)]
pub struct Case {
    pub index: usize,
    pub class: Class,
    /// What was drawn, in words (`flags=FSRPAUEC seq=...`).
    pub what: String,
    /// The address replies go to: the crafted source (a martian one for `ip-source`).
    pub peer_ip: [u8; 4],
    /// In an IPv6 case, the IPv6 address replies go to (`peer_ip` is then unused).
    pub peer6: Option<[u8; 16]>,
    /// The flow label the case's frames carry (IPv6; 0 for none): a reply that copies it
    /// normalizes to `copied`.
    pub flow6: u32,
    pub sport: u16,
    pub dport: u16,
    /// Our side's initial sequence number (the same on both twins), for relative ACKs.
    pub our_isn: u32,
    pub script: Script,
}

/// `n` cases of `seed`, the classes in `only` (all when empty).
pub fn generate(seed: u64, n: usize, only: &[Class]) -> Vec<Case> {
    let cycle: Vec<Class> = CYCLE
        .iter()
        .copied()
        .filter(|c| only.is_empty() || only.contains(c))
        .collect();
    let cycle = if cycle.is_empty() {
        only.to_vec()
    } else {
        cycle
    };
    (0..n)
        .map(|i| one(seed, i, cycle[i % cycle.len()]))
        .collect()
}

/// Case `index` of class `class`.
pub fn one(seed: u64, index: usize, class: Class) -> Case {
    let mut r = Rng::for_case(seed, index);
    let mut c = Case {
        index,
        class,
        what: String::new(),
        peer_ip: craft::peer_ip(index),
        peer6: class.is_v6().then(|| craft::peer_ip6(index)),
        flow6: 0,
        sport: craft::peer_port(index),
        dport: craft::HTTP_PORT,
        our_isn: r.u32(),
        script: Script::Frames(Vec::new()),
    };
    match class {
        Class::Control => control(&mut c, &mut r),
        Class::EthDst => ip::eth_dst(&mut c, &mut r),
        Class::IpSource => ip::source(&mut c, &mut r),
        Class::IpHeader => ip::header(&mut c, &mut r),
        Class::IpOptions => ip::options(&mut c, &mut r),
        Class::Fragments => ip::fragments(&mut c, &mut r),
        Class::OtherProto => ip::other_proto(&mut c, &mut r),
        Class::TcpListen => tcp::flags(&mut c, &mut r, craft::HTTP_PORT),
        Class::TcpClosed => tcp::flags(&mut c, &mut r, craft::CLOSED_PORT),
        Class::TcpOptions => tcp::options(&mut c, &mut r),
        Class::Arp => arp_icmp::arp(&mut c, &mut r),
        Class::Icmp => arp_icmp::icmp(&mut c, &mut r),
        Class::TcpState | Class::Tcp6State => flow::generate(&mut c, &mut r),
        Class::Ip6Header => ip6::header(&mut c, &mut r),
        Class::Ip6Addr => ip6::addresses(&mut c, &mut r),
        Class::Ip6Ext => ip6::extensions(&mut c, &mut r),
        Class::Ip6Frag => ip6::fragments(&mut c, &mut r),
        Class::Udp6 => ip6::udp(&mut c, &mut r),
        Class::Tcp6 => {
            let port = if r.one_in(3) {
                craft::CLOSED_PORT
            } else {
                craft::HTTP_PORT
            };
            tcp::flags(&mut c, &mut r, port)
        }
        Class::Icmp6 => icmp6::icmp6(&mut c, &mut r),
        Class::Ndp => icmp6::ndp(&mut c, &mut r),
    }
    c
}

/// The preflight's cases (attempt `n`): a plain SYN and a plain echo from addresses and
/// ports outside every generated case's (198.19.0.x, ports 9000+).
pub fn preflight(seed: u64, n: usize) -> [Case; 2] {
    let mut r = Rng::for_case(seed, usize::MAX - n);
    let mut c = one(seed, usize::MAX - n, Class::Control);
    c.peer_ip = [198, 19, 0, 10 + (n % 200) as u8];
    c.sport = 9000 + (n % 1000) as u16;
    c.what = "preflight SYN".into();
    let syn = plain_syn(&c, &mut r);
    c.script = Script::Frames(vec![ipv4_frame(
        &Ip4::new(c.peer_ip, DUT_IP, craft::PROTO_TCP),
        &syn,
    )]);
    let mut e = c.clone();
    e.what = "preflight echo".into();
    e.script = Script::Frames(vec![ipv4_frame(
        &Ip4::new(e.peer_ip, DUT_IP, craft::PROTO_ICMP),
        &echo(&e),
    )]);
    [c, e]
}

/// The IPv6 preflight's cases (attempt `n`): a plain SYN and a plain echo over IPv6, from
/// fd01:0:0:ff::N (outside every generated case's addresses). Both DUTs take IPv6 only once
/// duplicate address detection is over: the run waits on these.
pub fn preflight6(seed: u64, n: usize) -> [Case; 2] {
    let [mut c, mut e] = preflight(seed, n);
    let mut a = [0xfd, 0x01, 0, 0, 0, 0, 0, 0xff, 0, 0, 0, 0, 0, 0, 0, 0];
    a[12..].copy_from_slice(&(n as u32).to_be_bytes());
    c.peer6 = Some(a);
    e.peer6 = Some(a);
    c.what = "preflight SYN over IPv6".into();
    e.what = "preflight echo over IPv6".into();
    let mut r = Rng::for_case(seed, usize::MAX - n);
    c.script = Script::Frames(vec![ipv6_frame(
        &Ip6::new(a, DUT_IP6, craft::PROTO_TCP),
        &plain_syn(&c, &mut r),
    )]);
    e.script = Script::Frames(vec![ipv6_frame(
        &Ip6::new(a, DUT_IP6, craft::PROTO_ICMPV6),
        &echo(&e),
    )]);
    [c, e]
}

fn control(c: &mut Case, r: &mut Rng) {
    if r.one_in(2) {
        c.what = "plain SYN to the listening port".into();
        let f = ipv4_frame(
            &Ip4::new(c.peer_ip, DUT_IP, craft::PROTO_TCP),
            &plain_syn(c, r),
        );
        c.script = Script::Frames(vec![f]);
    } else {
        c.what = "plain echo request".into();
        let m = craft::icmp(8, 0, [0x12, 0x34, 0, 1], b"wirespeed conformance");
        let f = ipv4_frame(&Ip4::new(c.peer_ip, DUT_IP, craft::PROTO_ICMP), &m);
        c.script = Script::Frames(vec![f]);
    }
}

/// A SYN to the listening port with Linux's options, from the case's address and ISN.
pub(crate) fn plain_syn(c: &Case, r: &mut Rng) -> Vec<u8> {
    syn_with(c, craft::opt::linux_syn(1460, r.u32(), 7))
}

/// A SYN from the case's address, port and ISN to its destination port, with `options`
/// (over IPv6 in an IPv6 case, to `DUT_IP6`).
pub(crate) fn syn_with(c: &Case, options: Vec<u8>) -> Vec<u8> {
    let t = Tcp {
        sport: c.sport,
        dport: c.dport,
        seq: c.our_isn,
        flags: craft::SYN,
        window: 64240,
        options,
        ..Tcp::default()
    };
    match c.peer6 {
        Some(src) => t.segment6(src, DUT_IP6),
        None => t.segment(c.peer_ip, DUT_IP),
    }
}

/// An echo request body of the case (id from the port, a short text); ICMPv6 from the
/// case's address to `DUT_IP6` in an IPv6 case.
pub(crate) fn echo(c: &Case) -> Vec<u8> {
    let id = c.sport.to_be_bytes();
    match c.peer6 {
        Some(src) => craft::icmp6(128, 0, [id[0], id[1], 0, 7], b"ws-echo-data", src, DUT_IP6),
        None => craft::icmp(8, 0, [id[0], id[1], 0, 7], b"ws-echo-data"),
    }
}

/// A TCP segment of the case in a frame to the DUT (IPv6 in an IPv6 case).
pub(crate) fn tcp_frame(c: &Case, t: &Tcp) -> Vec<u8> {
    match c.peer6 {
        Some(src) => ipv6_frame(
            &Ip6::new(src, DUT_IP6, craft::PROTO_TCP),
            &t.segment6(src, DUT_IP6),
        ),
        None => ipv4_frame(
            &Ip4::new(c.peer_ip, DUT_IP, craft::PROTO_TCP),
            &t.segment(c.peer_ip, DUT_IP),
        ),
    }
}

/// `packet` (IPv6) behind an Ethernet header from the peer to the DUT.
pub(crate) fn to_dut6(packet: &[u8]) -> Vec<u8> {
    craft::eth(DUT_MAC, PEER_MAC, craft::ETH_IPV6, packet)
}

/// `payload` (extension headers included) in `h` in a frame from the peer to the DUT; to
/// the group's Ethernet address when the destination is multicast.
pub(crate) fn ipv6_frame(h: &Ip6, payload: &[u8]) -> Vec<u8> {
    let mut f = to_dut6(&h.packet(payload));
    if h.dst[0] == 0xff {
        f[..6].copy_from_slice(&craft::multicast_mac6(h.dst));
    }
    f
}

/// `packet` behind an Ethernet header from the peer to the DUT.
pub(crate) fn to_dut(packet: &[u8]) -> Vec<u8> {
    craft::eth(DUT_MAC, PEER_MAC, craft::ETH_IPV4, packet)
}

/// `l4` in `h` in a frame from the peer to the DUT.
pub(crate) fn ipv4_frame(h: &Ip4, l4: &[u8]) -> Vec<u8> {
    to_dut(&h.packet(l4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_cases_and_every_class() {
        let a = generate(42, 60, &[]);
        let b = generate(42, 60, &[]);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.what, y.what);
            if let (Script::Frames(f), Script::Frames(g)) = (&x.script, &y.script) {
                assert_eq!(f, g);
            }
        }
        for class in Class::ALL {
            assert!(a.iter().any(|c| c.class == class), "{class:?} never drawn");
        }
        let other = generate(43, 60, &[]);
        assert!(a.iter().zip(&other).any(|(x, y)| x.what != y.what));
    }

    #[test]
    fn only_draws_the_classes_asked_for() {
        let a = generate(1, 20, &[Class::Arp]);
        assert!(a.iter().all(|c| c.class == Class::Arp));
        assert_eq!(Class::parse("tcp-state"), Some(Class::TcpState));
        let v6 = Class::parse_group("ipv6").unwrap();
        let b = generate(1, 40, &v6);
        for class in Class::V6 {
            assert!(b.iter().any(|c| c.class == class), "{class:?} never drawn");
        }
        assert!(b.iter().all(|c| c.class.is_v6() && c.peer6.is_some()));
        let v4 = Class::parse_group("ipv4").unwrap();
        assert!(generate(1, 40, &v4).iter().all(|c| c.peer6.is_none()));
    }

    #[test]
    fn v6_cases_are_ipv6_frames_from_their_own_address() {
        for i in 0..400 {
            let class = Class::V6[i % Class::V6.len()];
            let c = one(9, i, class);
            let Script::Frames(frames) = &c.script else {
                continue;
            };
            assert!(!frames.is_empty(), "{}", c.what);
            for f in frames {
                let et = u16::from_be_bytes([f[12], f[13]]);
                assert_eq!(et, craft::ETH_IPV6, "{}: {}", class.name(), c.what);
            }
        }
    }
}
