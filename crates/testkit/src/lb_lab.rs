//! The load balancer fixtures' lab: one namespace whose FIB and neighbours the XDP data path
//! consults under BPF_PROG_TEST_RUN (docs/LB.md), shared by lb's fixtures and lb_prog_bench.

use std::net::{IpAddr, SocketAddr};

use wirespeed_lab::Netns;

use crate::frame::{frame, tcp};
use crate::netns::{ifindex, mac, mac_str};

pub const ROUTER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x01, 0x02];
pub const REAL_MACS: [[u8; 6]; 3] = [
    [0x02, 0, 0, 0, 0x02, 0x10],
    [0x02, 0, 0, 0, 0x02, 0x11],
    [0x02, 0, 0, 0, 0x02, 0x12],
];

/// An address literal, parsed.
pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// An address literal and a port.
pub fn sa(addr: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip(addr), port)
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
