//! Cases generated from a seed: what to send, and to whom replies will go.
//!
//! Case `i` belongs to a class picked round-robin from a weighted cycle (so every class is
//! drawn in any run of a few dozen cases) and draws its details from its own generator
//! (`Rng::for_case(seed, i)`), so a seed always gives the same cases. Each case has its own
//! crafted peer address and source port (`craft::peer_ip`, `craft::peer_port`), which is how
//! replies are told apart from late frames of earlier cases.

mod arp_icmp;
mod ip;
mod tcp;

use serde::Serialize;

use crate::craft::{self, Ip4, Tcp, DUT_IP, DUT_MAC, PEER_MAC};
use crate::flow::Flow;
use crate::rng::Rng;

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
        }
    }

    pub const ALL: [Class; 13] = [
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
    ];

    pub fn parse(s: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// The order classes come in: the stateful class most often, it has the most to explore.
const CYCLE: [Class; 20] = [
    Class::Control,
    Class::TcpState,
    Class::TcpListen,
    Class::TcpOptions,
    Class::Arp,
    Class::TcpState,
    Class::IpOptions,
    Class::Icmp,
    Class::TcpClosed,
    Class::TcpState,
    Class::IpHeader,
    Class::Fragments,
    Class::TcpListen,
    Class::TcpState,
    Class::IpSource,
    Class::EthDst,
    Class::TcpOptions,
    Class::TcpState,
    Class::OtherProto,
    Class::Arp,
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
        Class::TcpState => crate::flow::generate(&mut c, &mut r),
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

/// A SYN from the case's address, port and ISN to its destination port, with `options`.
pub(crate) fn syn_with(c: &Case, options: Vec<u8>) -> Vec<u8> {
    Tcp {
        sport: c.sport,
        dport: c.dport,
        seq: c.our_isn,
        flags: craft::SYN,
        window: 64240,
        options,
        ..Tcp::default()
    }
    .segment(c.peer_ip, DUT_IP)
}

/// An echo request body of the case (id from the port, a short text).
pub(crate) fn echo(c: &Case) -> Vec<u8> {
    let id = c.sport.to_be_bytes();
    craft::icmp(8, 0, [id[0], id[1], 0, 7], b"ws-echo-data")
}

/// `packet` behind an Ethernet header from the peer to the DUT.
pub(crate) fn to_dut(packet: &[u8]) -> Vec<u8> {
    craft::eth(DUT_MAC, PEER_MAC, craft::ETH_IPV4, packet)
}

/// `l4` in `h` in a frame from the peer to the DUT.
pub(crate) fn ipv4_frame(h: &Ip4, l4: &[u8]) -> Vec<u8> {
    to_dut(&h.packet(l4))
}

/// Flag bits as letters, tcpdump's order and more: F S R P A U E C (`.` for none).
pub fn flag_letters(flags: u8) -> String {
    let names = ['F', 'S', 'R', 'P', 'A', 'U', 'E', 'C'];
    let s: String = (0..8)
        .filter(|b| flags & (1 << b) != 0)
        .map(|b| names[b])
        .collect();
    if s.is_empty() {
        ".".into()
    } else {
        s
    }
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
    }

    #[test]
    fn flag_letters_read_like_tcpdump() {
        assert_eq!(flag_letters(craft::SYN | craft::ACK), "SA");
        assert_eq!(flag_letters(0), ".");
        assert_eq!(flag_letters(0xff), "FSRPAUEC");
    }
}
