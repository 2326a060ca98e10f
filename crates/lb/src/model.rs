//! What the load balancer is told (services and their real servers, as ipvsadm names them),
//! what the data path is given (a [`Plan`]: lookup tables over stable real-server slots), and
//! the seam between the two ([`DataPlane`]).

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Result;

/// `-t` or `-u`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    Tcp,
    Udp,
}

impl Proto {
    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Proto::Tcp => 6,
            Proto::Udp => 17,
        }
    }

    /// As `ipvsadm -L` prints it.
    pub fn ipvs_name(self) -> &'static str {
        match self {
            Proto::Tcp => "TCP",
            Proto::Udp => "UDP",
        }
    }

    /// The ipvsadm flag.
    pub fn flag(self) -> &'static str {
        match self {
            Proto::Tcp => "-t",
            Proto::Udp => "-u",
        }
    }
}

/// A virtual service: protocol, VIP and port (ipvsadm's `-t|-u VIP:PORT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ServiceKey {
    pub proto: Proto,
    pub vip: SocketAddr,
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.proto.ipvs_name(), self.vip)
    }
}

/// `-s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheduler {
    /// Maglev hashing: a client flow keeps its real while the set of reals changes, and a
    /// change moves about the share of the reals that changed.
    Mh,
    /// Round robin, per CPU (no shared counter on the packet path).
    Rr,
    /// Weighted round robin, per CPU.
    Wrr,
}

impl Scheduler {
    pub fn name(self) -> &'static str {
        match self {
            Scheduler::Mh => "mh",
            Scheduler::Rr => "rr",
            Scheduler::Wrr => "wrr",
        }
    }

    pub fn parse(s: &str) -> Result<Scheduler> {
        match s {
            "mh" => Ok(Scheduler::Mh),
            "rr" => Ok(Scheduler::Rr),
            "wrr" => Ok(Scheduler::Wrr),
            _ => Err(crate::Error::Invalid(format!(
                "scheduler `{s}` is not one of mh, rr, wrr"
            ))),
        }
    }
}

/// How packets reach a real server (`-g`, `-i`, `-m`, `-b`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// `-g`: direct routing. Only the MAC addresses change; the real holds the VIP on its
    /// loopback and answers the client directly.
    Dr,
    /// `-i`: IP-in-IP (or GUE) to the real, which decapsulates and answers directly.
    Tunnel,
    /// `-m`: destination NAT; the reply comes back through the load balancer.
    Nat,
    /// `-b`: destination and source NAT to one of the service's local addresses; both
    /// directions pass through the load balancer.
    FullNat,
}

impl Mode {
    /// As `ipvsadm -L` prints the forwarding method.
    pub fn ipvs_name(self) -> &'static str {
        match self {
            Mode::Dr => "Route",
            Mode::Tunnel => "Tunnel",
            Mode::Nat => "Masq",
            Mode::FullNat => "FullNat",
        }
    }

    /// The ipvsadm flag.
    pub fn flag(self) -> &'static str {
        match self {
            Mode::Dr => "-g",
            Mode::Tunnel => "-i",
            Mode::Nat => "-m",
            Mode::FullNat => "-b",
        }
    }
}

/// `--tun-type`: how a tunnel-mode real's packets are encapsulated (ipvsadm 1.31's spelling).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TunnelKind {
    Ipip,
    Gue,
}

impl TunnelKind {
    pub fn parse(s: &str) -> Result<TunnelKind> {
        match s {
            "ipip" => Ok(TunnelKind::Ipip),
            "gue" => Ok(TunnelKind::Gue),
            _ => Err(crate::Error::Invalid(format!(
                "--tun-type `{s}` is not built; give ipip (the default) or gue"
            ))),
        }
    }
}

/// A tunnel-mode real's encapsulation. Meaningless (and kept `Ipip`) in the other modes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Tunnel {
    /// IP in IP: IPIP, IP6IP6, 6in4 or 4in6 by the VIP's and the real's families.
    #[default]
    Ipip,
    /// GUE variant 1 (Katran's): outer IP and UDP to `port`, whose payload is the inner IP
    /// packet itself. `csum`: the outer UDP checksum is filled (always for an IPv6 real, where
    /// UDP requires it; for an IPv4 real only with `--tun-csum`, else it is zero).
    Gue { port: u16, csum: bool },
}

impl Tunnel {
    pub fn kind(self) -> TunnelKind {
        match self {
            Tunnel::Ipip => TunnelKind::Ipip,
            Tunnel::Gue { .. } => TunnelKind::Gue,
        }
    }

    /// The bytes the encapsulation adds in front of the inner packet, by the outer family.
    pub fn overhead(self, outer_v4: bool) -> u32 {
        let ip = if outer_v4 { 20 } else { 40 };
        match self {
            Tunnel::Ipip => ip,
            Tunnel::Gue { .. } => ip + 8,
        }
    }

    /// The `-a` options that give it back, as ipvsadm-save prints them (nothing for IPIP,
    /// ipvsadm's default).
    pub fn save_args(self) -> String {
        match self {
            Tunnel::Ipip => String::new(),
            Tunnel::Gue { port, csum } => {
                format!(
                    " --tun-type gue --tun-port {port} {}",
                    if csum { "--tun-csum" } else { "--tun-nocsum" }
                )
            }
        }
    }
}

/// What the health checker last concluded about a real.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// No check is configured for its service, or none has concluded yet.
    Unchecked,
    Up,
    Down,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Real {
    /// Port 0: the service's port.
    pub addr: SocketAddr,
    pub mode: Mode,
    /// Tunnel mode's encapsulation (`--tun-type`); `Ipip` in the other modes.
    #[serde(default)]
    pub tunnel: Tunnel,
    /// As configured (`-w`). 0 quiesces: established connections stay, new ones go elsewhere.
    pub weight: u32,
    pub health: Health,
}

impl Real {
    /// The weight the scheduler uses: 0 while the real is down.
    pub fn effective_weight(&self) -> u32 {
        if self.health == Health::Down {
            0
        } else {
            self.weight
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CheckKind {
    /// A TCP connect to the real's address and port.
    Tcp,
    /// `GET PATH`; up on any 2xx or 3xx status.
    Http { path: String },
    /// `PING`; up on `+PONG`.
    Redis,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthCheck {
    pub kind: CheckKind,
    pub interval: Duration,
    pub timeout: Duration,
    /// Consecutive successes that bring a down real back.
    pub rise: u32,
    /// Consecutive failures that take an up real out.
    pub fall: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Service {
    pub key: ServiceKey,
    pub scheduler: Scheduler,
    pub reals: Vec<Real>,
    /// Full-NAT local addresses (`--add-laddr`); the data path gives each CPU a disjoint share
    /// of each one's ports.
    pub laddrs: Vec<IpAddr>,
    /// Full-NAT: carry the client's address to the real as a TOA option (kind 254).
    pub toa: bool,
    pub check: Option<HealthCheck>,
}

/// Everything the data path needs, built from the services by [`crate::plan`]. Indexes are
/// the data path's: a service's position is its id, a real's slot is its index in `reals`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Maglev lookup table size (a prime).
    pub ring_size: u32,
    pub services: Vec<PlannedService>,
    /// By slot. A slot keeps its real across plans while the real stays in its service, so
    /// connection-table entries stay valid; `None` is a free slot.
    pub reals: Vec<Option<PlannedReal>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedService {
    pub key: ServiceKey,
    pub scheduler: Scheduler,
    /// Real slots. `mh`: the Maglev table, `ring_size` entries, indexed by flow hash. `rr` and
    /// `wrr`: the weighted sequence each CPU walks with its own cursor. Empty when no real has
    /// a weight: new connections are then dropped and counted, established ones go on.
    pub lookup: Vec<u32>,
    pub laddrs: Vec<IpAddr>,
    pub toa: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedReal {
    /// The service this real belongs to (its index in [`Plan::services`]).
    pub service: u32,
    /// The port is the real's, or the service's where the real said 0.
    pub addr: SocketAddr,
    pub mode: Mode,
    /// Tunnel mode's encapsulation; `Ipip` in the other modes.
    pub tunnel: Tunnel,
}

/// Traffic counters, as `ipvsadm -L --stats` shows them. `out_*` count the replies that pass
/// back through the load balancer (NAT and full-NAT only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    pub conns: u64,
    pub in_pkts: u64,
    pub out_pkts: u64,
    pub in_bytes: u64,
    pub out_bytes: u64,
}

impl std::ops::AddAssign for Counters {
    fn add_assign(&mut self, o: Counters) {
        self.conns += o.conns;
        self.in_pkts += o.in_pkts;
        self.out_pkts += o.out_pkts;
        self.in_bytes += o.in_bytes;
        self.out_bytes += o.out_bytes;
    }
}

/// ipvsadm's ActiveConn and InActConn of a real: its open TCP connections, and its closed TCP
/// and UDP ones, counted from the data path's connection entries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnCounts {
    pub active: u64,
    pub inactive: u64,
}

/// Counters summed over CPUs, indexed like the [`Plan`] they were taken under.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub services: Vec<Counters>,
    /// By real slot.
    pub reals: Vec<Counters>,
    /// Packets the data path handed to the kernel or dropped, by reason name, summed over CPUs.
    pub reasons: Vec<(String, u64)>,
}

/// The data path as the daemon drives it: the XDP program in production, a recording fake in
/// the daemon's tests.
pub trait DataPlane {
    /// Makes the data path carry out `plan`. Connections whose real keeps its slot keep
    /// their real; a real whose weight went to 0 keeps its established connections.
    fn apply(&mut self, plan: &Plan) -> Result<()>;
    /// Counters, indexed like the last plan applied.
    fn stats(&self) -> Result<Stats>;
    /// Zeroes the counters (`-Z`).
    fn zero(&mut self) -> Result<()>;
    /// Connections per real slot, counted now, indexed like the last plan applied (`-L`'s
    /// ActiveConn and InActConn). A data plane that keeps no connections has none.
    fn conn_counts(&self) -> Result<Vec<ConnCounts>> {
        Ok(Vec::new())
    }
    /// The program is attached on every interface it was given (`lb announce` announces
    /// nothing otherwise). One given no interface (the tests' fakes) is.
    fn attached_everywhere(&self) -> bool {
        true
    }
    /// The interfaces it was given that are down or have lost their carrier: the node can
    /// forward nothing through them, so it announces nothing while one is listed. Asked on
    /// every turn of the daemon's loop, where the data path also follows the changes it
    /// must (an interface's new MAC).
    fn links_down(&mut self) -> Vec<String> {
        Vec::new()
    }
}
