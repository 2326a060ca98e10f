//! Frames for the data-path fixtures, built byte by byte, checksums computed here from
//! scratch; and the lab namespace whose FIB the program consults.

#![allow(dead_code)]

use std::net::{IpAddr, SocketAddr};

use wirespeed_lb::datapath::{stats::reason_count, AttachConfig, Reason, XdpDataPlane};
use wirespeed_lb::model::{DataPlane, Plan};

use wirespeed_lab::Netns;

/// The fixtures' lookup ring: a small prime, so that a test can fill it by hand.
pub const RING: u32 = 7;

/// The data path as the fixtures attach it: small tables, no new-connection rate guard.
pub fn cfg() -> AttachConfig {
    AttachConfig {
        ring_size: RING,
        max_services: 8,
        max_reals: 16,
        conns_per_cpu: 1024,
        new_conns_per_sec_per_cpu: 0,
        ..AttachConfig::default()
    }
}

pub fn sa(addr: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip(addr), port)
}

pub const ROUTER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x01, 0x02];
pub const REAL_MACS: [[u8; 6]; 3] = [
    [0x02, 0, 0, 0, 0x02, 0x10],
    [0x02, 0, 0, 0, 0x02, 0x11],
    [0x02, 0, 0, 0, 0x02, 0x12],
];

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// One's-complement sum of `b` (odd length padded), not yet inverted.
pub fn sum16(b: &[u8], mut acc: u32) -> u32 {
    for c in b.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        acc += w as u32;
    }
    acc
}

pub fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

fn addr_bytes(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(v) => v.octets().to_vec(),
        IpAddr::V6(v) => v.octets().to_vec(),
    }
}

pub fn pseudo(src: IpAddr, dst: IpAddr, proto: u8, len: usize) -> u32 {
    let mut acc = sum16(&addr_bytes(src), 0);
    acc = sum16(&addr_bytes(dst), acc);
    acc + proto as u32 + len as u32
}

#[derive(Clone, Debug)]
pub enum L4 {
    Tcp {
        sport: u16,
        dport: u16,
        flags: u8,
        options: Vec<u8>,
        payload: Vec<u8>,
    },
    Udp {
        sport: u16,
        dport: u16,
        payload: Vec<u8>,
    },
    /// ICMP or ICMPv6 (by the address family): type, code, the 4 bytes after the checksum,
    /// and the rest.
    Icmp {
        ty: u8,
        code: u8,
        rest: [u8; 4],
        payload: Vec<u8>,
    },
}

pub const SYN: u8 = 0x02;
pub const ACK: u8 = 0x10;
pub const FIN: u8 = 0x01;
pub const PSH: u8 = 0x08;

pub fn tcp(sport: u16, dport: u16, flags: u8) -> L4 {
    L4::Tcp {
        sport,
        dport,
        flags,
        options: Vec::new(),
        payload: b"ping".to_vec(),
    }
}

pub fn udp(sport: u16, dport: u16) -> L4 {
    L4::Udp {
        sport,
        dport,
        payload: vec![0xab; 18],
    }
}

/// The transport header and payload with its checksum over (src, dst).
pub fn l4_bytes(src: IpAddr, dst: IpAddr, l4: &L4) -> (u8, Vec<u8>) {
    let (proto, mut b, csum_at) = match l4 {
        L4::Tcp {
            sport,
            dport,
            flags,
            options,
            payload,
        } => {
            assert!(options.len() % 4 == 0);
            let mut b = Vec::new();
            b.extend(sport.to_be_bytes());
            b.extend(dport.to_be_bytes());
            b.extend(1000u32.to_be_bytes()); // seq
            b.extend(if flags & ACK != 0 { 2000u32 } else { 0 }.to_be_bytes());
            b.push((((20 + options.len()) / 4) as u8) << 4);
            b.push(*flags);
            b.extend(65535u16.to_be_bytes());
            b.extend([0, 0, 0, 0]); // check, urgent
            b.extend(options);
            b.extend(payload);
            (6u8, b, 16)
        }
        L4::Udp {
            sport,
            dport,
            payload,
        } => {
            let mut b = Vec::new();
            b.extend(sport.to_be_bytes());
            b.extend(dport.to_be_bytes());
            b.extend(((8 + payload.len()) as u16).to_be_bytes());
            b.extend([0, 0]);
            b.extend(payload);
            (17u8, b, 6)
        }
        L4::Icmp {
            ty,
            code,
            rest,
            payload,
        } => {
            let mut b = vec![*ty, *code, 0, 0];
            b.extend(rest);
            b.extend(payload);
            (if src.is_ipv4() { 1u8 } else { 58u8 }, b, 2)
        }
    };
    let acc = if proto == 1 {
        0
    } else {
        pseudo(src, dst, proto, b.len())
    };
    let mut c = fold(sum16(&b, acc));
    if proto == 17 && c == 0 {
        c = 0xffff;
    }
    b[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
    (proto, b)
}

/// An IP header for `payload_len` bytes of `proto` (IPv4: DF set, TTL 64, id 0; IPv6: hop
/// limit 64, traffic class and flow label 0).
pub fn ip_header(src: IpAddr, dst: IpAddr, proto: u8, payload_len: usize) -> Vec<u8> {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut h = vec![0x45, 0];
            h.extend(((20 + payload_len) as u16).to_be_bytes());
            h.extend([0, 0, 0x40, 0, 64, proto, 0, 0]);
            h.extend(s.octets());
            h.extend(d.octets());
            let c = fold(sum16(&h, 0));
            h[10..12].copy_from_slice(&c.to_be_bytes());
            h
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let mut h = vec![0x60, 0, 0, 0];
            h.extend((payload_len as u16).to_be_bytes());
            h.extend([proto, 64]);
            h.extend(s.octets());
            h.extend(d.octets());
            h
        }
        _ => panic!("mixed families"),
    }
}

/// The IP packet (header and transport).
pub fn ip_packet(src: IpAddr, dst: IpAddr, l4: &L4) -> Vec<u8> {
    let (proto, b) = l4_bytes(src, dst, l4);
    let mut p = ip_header(src, dst, proto, b.len());
    p.extend(b);
    p
}

pub fn eth(dmac: [u8; 6], smac: [u8; 6], v6: bool, payload: &[u8]) -> Vec<u8> {
    let mut f = dmac.to_vec();
    f.extend(smac);
    f.extend(if v6 { [0x86, 0xdd] } else { [0x08, 0x00] });
    f.extend(payload);
    f
}

pub fn frame(dmac: [u8; 6], smac: [u8; 6], src: IpAddr, dst: IpAddr, l4: &L4) -> Vec<u8> {
    eth(dmac, smac, src.is_ipv6(), &ip_packet(src, dst, l4))
}

/// An IP packet as the data path forwards it, one hop on: TTL (IPv4, header checksum
/// recomputed) or hop limit less one.
pub fn hop(p: &[u8]) -> Vec<u8> {
    let mut p = p.to_vec();
    if p[0] >> 4 == 4 {
        p[8] -= 1;
        let hl = (p[0] & 0xf) as usize * 4;
        p[10..12].copy_from_slice(&[0, 0]);
        let c = fold(sum16(&p[..hl], 0));
        p[10..12].copy_from_slice(&c.to_be_bytes());
    } else {
        p[7] -= 1;
    }
    p
}

/// An Ethernet frame whose IP packet went one hop (see `hop`).
pub fn hopped(f: &[u8]) -> Vec<u8> {
    let mut out = f[..14].to_vec();
    out.extend(hop(&f[14..]));
    out
}

/// Recomputes the IPv4 header checksum of an Ethernet frame (a fixture that changed a header
/// field by hand).
pub fn fix_ipv4_csum(f: &mut [u8]) {
    let hl = (f[14] & 0xf) as usize * 4;
    f[24..26].copy_from_slice(&[0, 0]);
    let c = fold(sum16(&f[14..14 + hl], 0));
    f[24..26].copy_from_slice(&c.to_be_bytes());
}

/// Checks every checksum of an Ethernet frame from scratch: IPv4 header, TCP/UDP/ICMP, and
/// for a tunnel the inner packet's too. Panics with what is wrong.
pub fn verify_checksums(f: &[u8]) {
    let et = u16::from_be_bytes([f[12], f[13]]);
    verify_ip(&f[14..], et == 0x86dd);
}

fn verify_ip(p: &[u8], v6: bool) {
    let (src, dst, proto, l4): (IpAddr, IpAddr, u8, &[u8]) = if !v6 {
        assert_eq!(p[0] >> 4, 4, "IPv4 version");
        let hl = (p[0] & 0xf) as usize * 4;
        assert_eq!(fold(sum16(&p[..hl], 0)), 0, "IPv4 header checksum");
        let tot = u16::from_be_bytes([p[2], p[3]]) as usize;
        assert_eq!(tot, p.len(), "IPv4 total length");
        let s: [u8; 4] = p[12..16].try_into().unwrap();
        let d: [u8; 4] = p[16..20].try_into().unwrap();
        (s.into(), d.into(), p[9], &p[hl..tot])
    } else {
        assert_eq!(p[0] >> 4, 6, "IPv6 version");
        let pl = u16::from_be_bytes([p[4], p[5]]) as usize;
        assert_eq!(pl + 40, p.len(), "IPv6 payload length");
        let s: [u8; 16] = p[8..24].try_into().unwrap();
        let d: [u8; 16] = p[24..40].try_into().unwrap();
        (s.into(), d.into(), p[6], &p[40..])
    };
    match proto {
        4 => verify_ip(l4, false),
        41 => verify_ip(l4, true),
        1 => assert_eq!(fold(sum16(l4, 0)), 0, "ICMP checksum"),
        6 | 58 => assert_eq!(
            fold(sum16(l4, pseudo(src, dst, proto, l4.len()))),
            0,
            "{} checksum",
            if proto == 6 { "TCP" } else { "ICMPv6" }
        ),
        17 => {
            if u16::from_be_bytes([l4[6], l4[7]]) != 0 {
                assert_eq!(
                    fold(sum16(l4, pseudo(src, dst, 17, l4.len()))),
                    0,
                    "UDP checksum"
                );
            }
        }
        _ => panic!("unexpected protocol {proto}"),
    }
}

/// The lab: one namespace, a client-side veth (in0: 198.18.1.1/24, fd00:1::1/64; clients in
/// 198.18.50.0/24 and fd00:50::/64 behind the router 198.18.1.2 / fd00:1::2) and a real-side
/// veth (out0: 198.18.2.1/24, fd00:2::1/64; reals .10-.12 / ::10-::12 with permanent
/// neighbours; .13 / ::13 unresolved).
#[derive(Clone, Copy, Debug)]
pub struct Lab {
    pub in_idx: u32,
    pub out_idx: u32,
    pub in_mac: [u8; 6],
    pub out_mac: [u8; 6],
}

impl Lab {
    /// A TCP segment from `client`:`sport` to `vip`:80, as the router hands it to the
    /// client-side port.
    pub fn client_tcp(&self, client: &str, vip: &str, sport: u16, flags: u8) -> Vec<u8> {
        frame(
            self.in_mac,
            ROUTER_MAC,
            ip(client),
            ip(vip),
            &tcp(sport, 80, flags),
        )
    }
}

fn ifindex(ns: &Netns, ifname: &str) -> u32 {
    ns.exec("cat", &[&format!("/sys/class/net/{ifname}/ifindex")])
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn mac(ns: &Netns, ifname: &str) -> [u8; 6] {
    let s = ns
        .exec("cat", &[&format!("/sys/class/net/{ifname}/address")])
        .unwrap();
    let v: Vec<u8> = s
        .trim()
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    v.try_into().unwrap()
}

fn mac_str(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

pub fn lab(tag: &str) -> (Netns, Lab) {
    wirespeed_lab::require_root();
    let ns = Netns::create(&format!("ws-lb{}{}", tag, std::process::id() % 100000)).unwrap();
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
    let neigh = |addr: &str, m: [u8; 6], dev: &str| {
        ns.ip(&[
            "neigh",
            "add",
            addr,
            "lladdr",
            &mac_str(m),
            "dev",
            dev,
            "nud",
            "permanent",
        ])
        .unwrap();
    };
    neigh("198.18.1.2", ROUTER_MAC, "in0");
    neigh("fd00:1::2", ROUTER_MAC, "in0");
    for (i, m) in REAL_MACS.iter().enumerate() {
        neigh(&format!("198.18.2.{}", 10 + i), *m, "out0");
        neigh(&format!("fd00:2::{}", 10 + i), *m, "out0");
    }
    ns.ip(&["route", "add", "198.18.50.0/24", "via", "198.18.1.2"])
        .unwrap();
    ns.ip(&["-6", "route", "add", "fd00:50::/64", "via", "fd00:1::2"])
        .unwrap();
    ns.sysctl("net.ipv4.ip_forward", "1").unwrap();
    ns.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
    let l = Lab {
        in_idx: ifindex(&ns, "in0"),
        out_idx: ifindex(&ns, "out0"),
        in_mac: mac(&ns, "in0"),
        out_mac: mac(&ns, "out0"),
    };
    (ns, l)
}

/// Pins the calling thread to `cpu`: per-CPU tables, cursors and port shares are then this
/// CPU's for every run.
pub fn pin(cpu: usize) {
    wirespeed_sys::process::set_affinity(&[cpu]).unwrap();
}

/// The count of reason `r` in the loaded program.
pub fn count(dp: &XdpDataPlane, r: Reason) -> u64 {
    reason_count(dp.program(), r).unwrap()
}

/// Runs `f` inside a fresh lab namespace, pinned to CPU 0, with the program loaded.
pub fn with_lab(
    tag: &str,
    cfg: AttachConfig,
    plan: Plan,
    f: impl FnOnce(Lab, &mut XdpDataPlane) + Send + 'static,
) {
    let (ns, lab) = lab(tag);
    ns.run(move || {
        pin(0);
        let mut dp = XdpDataPlane::load(&cfg).unwrap();
        dp.apply(&plan).unwrap();
        f(lab, &mut dp);
    })
    .unwrap();
}
