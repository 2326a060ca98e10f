//! wirespeed-lb-bench: an L4 load balancer against nftables DNAT on the `lb` lab, single core,
//! on the DUT; shared by the `lb_bench` example and the showdown's load-balancer rows.
//!
//! The method is fp_bench's on-the-DUT one: the in-kernel generator ([`wirespeed_xdpgen`]) runs
//! on the DUT's CPU in the load balancer's namespace and makes 64-byte frames arrive on its
//! client-side interface, where they meet the balancer's XDP program (or, with none attached,
//! the kernel and its nftables rules) and leave towards 4 backends whose XDP sinks count
//! them. Generator and balancer share one core that is always busy, so pps is the path's
//! speed and 1e9 / pps its cost per packet. The backends receive on the other core (their
//! veths' NAPI threaded and pinned there), as a NIC's receiver is another machine: the DUT
//! pays for the transmit, not for the receiver. Only frames that look translated as the
//! mode asks are counted; one frame per row and side is checked in full before measuring, and
//! a wrong one fails the row. The balancer and nftables alternate round by round on the same
//! frames.
//!
//! The balancer under test comes in through [`Balancer`]; [`xdp::XdpBalancer`] is `wirespeed
//! lb`'s XDP data path, the one lb_bench and the showdown measure.

pub mod frames;
mod lab;
pub mod nft;
mod opts;
mod redis;
mod run;
pub mod xdp;

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use wirespeed_load::stats::Ratio;

pub use opts::Opts;
pub use run::{measure_once, run, SideFigures};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Invalid(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Load(#[from] wirespeed_load::Error),
    #[error(transparent)]
    Xdpgen(#[from] wirespeed_xdpgen::Error),
}

pub type Result<T> = std::result::Result<T, Error>;

/// How the balancer reaches the reals (ipvsadm's -g, -i, -m, -b).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Dr,
    Tunnel,
    Nat,
    FullNat,
}

impl Mode {
    pub const ALL: [Mode; 4] = [Mode::Dr, Mode::Tunnel, Mode::Nat, Mode::FullNat];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Dr => "DR",
            Mode::Tunnel => "tunnel (IPIP)",
            Mode::Nat => "NAT",
            Mode::FullNat => "full-NAT",
        }
    }

    /// What nftables does in this mode's row: DNAT, plus SNAT for full-NAT.
    fn linux(self) -> Mode {
        if self == Mode::FullNat {
            Mode::FullNat
        } else {
            Mode::Nat
        }
    }
}

/// What the clients send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Traffic {
    /// SYNs of new connections (the same flows over and over: every SYN is scheduled anew).
    TcpSyn,
    /// ACK segments of established connections.
    TcpAck,
    Udp,
}

impl Traffic {
    pub const ALL: [Traffic; 3] = [Traffic::TcpSyn, Traffic::TcpAck, Traffic::Udp];

    pub fn name(self) -> &'static str {
        match self {
            Traffic::TcpSyn => "TCP SYN",
            Traffic::TcpAck => "TCP ACK",
            Traffic::Udp => "UDP",
        }
    }
}

/// One service the balancer must carry: protocol number, the VIP's port, the reals' port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServicePorts {
    pub proto: u8,
    pub vport: u16,
    pub rport: u16,
}

/// What the balancer under test is asked to set up, in the load balancer's namespace.
#[derive(Clone, Debug)]
pub struct Setup {
    /// Its interfaces there: the clients' side first, then one per backend.
    pub ifaces: Vec<String>,
    pub mode: Mode,
    pub vip: Ipv4Addr,
    pub services: Vec<ServicePorts>,
    /// One real per backend, equal weights.
    pub reals: Vec<Ipv4Addr>,
    /// Full-NAT's local addresses (16, as a DPVS full-NAT service gets several: each gives
    /// every real 64 Ki ports).
    pub laddrs: Vec<Ipv4Addr>,
    /// Full-NAT: the client address as a TOA option on the first segments.
    pub toa: bool,
    /// The new-connection rate guard per CPU: set far above what one core reaches, so the
    /// rows measure the path, not the guard.
    pub new_conns_per_sec_per_cpu: u32,
}

/// A balancer set up by [`Balancer::start`]; dropping it detaches it.
pub trait Running {
    /// Packets it handed to the kernel or dropped, by reason (to explain a row's losses).
    fn reasons(&self) -> Vec<(String, u64)>;
}

/// The balancer under test.
pub trait Balancer: Send + Sync {
    /// One line: what it is (goes into the report).
    fn describe(&self) -> String;
    /// Attaches to `setup.ifaces` in the calling thread's namespace (the load balancer's) and
    /// configures `setup`'s services.
    fn start(&self, setup: &Setup) -> Result<Box<dyn Running>>;
}

/// One pps row: the balancer against nftables, round by round.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PpsRow {
    pub name: String,
    /// Per round.
    pub lb_pps: Vec<f64>,
    pub nft_pps: Vec<f64>,
    pub lb_pps_median: f64,
    pub nft_pps_median: f64,
    /// lb / nft, per round.
    pub ratio: Option<Ratio>,
    /// CPU time per packet on the DUT's core (busy share x 1e9 / pps), medians: generator,
    /// path and sink together.
    pub lb_ns_per_packet: f64,
    pub nft_ns_per_packet: f64,
    /// Of the frames the generator ran, the share that reached a backend translated right.
    pub lb_delivered_pct: f64,
    pub nft_delivered_pct: f64,
    /// What the balancer passed to the kernel or dropped in its last round, by reason.
    pub lb_reasons: Vec<(String, u64)>,
}

/// The balancer's pps on 2 CPUs against 1 (full-NAT, established TCP).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Scaling {
    pub name: String,
    pub one_cpu_pps: Vec<f64>,
    pub two_cpu_pps: Vec<f64>,
    pub ratio: Option<Ratio>,
}

/// redis-benchmark PING through the VIP against the same backends direct.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RedisRow {
    pub mode: String,
    pub command: String,
    pub vip_rps: Vec<f64>,
    pub direct_rps: Vec<f64>,
    /// vip / direct, per round.
    pub ratio: Option<Ratio>,
}

/// Everything one lb_bench run measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Report {
    pub command: String,
    pub date: String,
    pub uname_r: String,
    pub nproc: usize,
    pub commit: String,
    pub balancer: String,
    pub method: String,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub rounds: usize,
    pub dut_cpu: usize,
    /// Where the backends receive in the single-core rows (threaded NAPI pinned there).
    #[serde(default)]
    pub other_cpu: usize,
    pub flows: usize,
    /// The instrument alone: generator + an XDP drop on the DUT's core, ns per frame.
    pub baseline_ns_per_packet: Option<f64>,
    /// The floor of any XDP forwarder here: generator + MACs set and redirected to a backend
    /// + its sink, ns per frame (the lowest a DR row could cost).
    pub forward_floor_ns_per_packet: Option<f64>,
    pub rows: Vec<PpsRow>,
    /// Full-NAT new connections per second (every SYN from a source never seen before).
    pub new_connections: Option<PpsRow>,
    pub scaling: Option<Scaling>,
    pub redis: Vec<RedisRow>,
    /// Rows that failed, and why.
    pub failed: Vec<String>,
}

fn median(v: &[f64]) -> f64 {
    wirespeed_load::stats::median(v.iter().copied()).unwrap_or(0.0)
}

impl Report {
    /// The tables, in Markdown.
    pub fn markdown(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let ratio = |r: &Option<Ratio>| {
            r.map_or("n/a".into(), |r| {
                format!("{:.2}x ({:.2}-{:.2})", r.median, r.min, r.max)
            })
        };
        let _ = writeln!(
            s,
            "lb_bench: {} vs nftables DNAT (jhash map; + SNAT for full-NAT), {} flows, 64-byte frames, \
             {:.1} s measured after {:.1} s warm-up, {} round(s) alternating; on the DUT: generator \
             and path on CPU {}, the backends' receive on CPU {}",
            self.balancer,
            self.flows,
            self.duration_s,
            self.warmup_s,
            self.rounds,
            self.dut_cpu,
            self.other_cpu
        );
        if let Some(b) = self.baseline_ns_per_packet {
            let _ = writeln!(
                s,
                "instrument alone (generator + XDP drop on the DUT's core): {b:.0} ns/packet"
            );
        }
        if let Some(f) = self.forward_floor_ns_per_packet {
            let _ = writeln!(
                s,
                "bare XDP forward (generator + MACs set + redirect + backend's sink): {f:.0} ns/packet"
            );
        }
        let pps_rows: Vec<&PpsRow> = self
            .rows
            .iter()
            .chain(self.new_connections.iter())
            .collect();
        if !pps_rows.is_empty() {
            let _ = writeln!(s);
            let _ = writeln!(
                s,
                "| row | LB Mpps | nft Mpps | ratio median (min-max) | LB ns/pkt | nft ns/pkt | delivered LB / nft |"
            );
            let _ = writeln!(s, "|---|---|---|---|---|---|---|");
            for r in pps_rows {
                let _ = writeln!(
                    s,
                    "| {} | {:.3} | {:.3} | {} | {:.0} | {:.0} | {:.0}% / {:.0}% |",
                    r.name,
                    r.lb_pps_median / 1e6,
                    r.nft_pps_median / 1e6,
                    ratio(&r.ratio),
                    r.lb_ns_per_packet,
                    r.nft_ns_per_packet,
                    r.lb_delivered_pct,
                    r.nft_delivered_pct
                );
            }
        }
        if let Some(sc) = &self.scaling {
            let _ = writeln!(s);
            let _ = writeln!(
                s,
                "| {} | 1 CPU Mpps | 2 CPUs Mpps | 2 / 1 median (min-max) |",
                sc.name
            );
            let _ = writeln!(s, "|---|---|---|---|");
            let _ = writeln!(
                s,
                "| LB | {:.3} | {:.3} | {} |",
                median(&sc.one_cpu_pps) / 1e6,
                median(&sc.two_cpu_pps) / 1e6,
                ratio(&sc.ratio)
            );
        }
        if !self.redis.is_empty() {
            let _ = writeln!(s);
            let _ = writeln!(
                s,
                "| redis-benchmark PING | through the VIP req/s | direct req/s | VIP / direct median (min-max) |"
            );
            let _ = writeln!(s, "|---|---|---|---|");
            for r in &self.redis {
                let _ = writeln!(
                    s,
                    "| {} | {:.0} | {:.0} | {} |",
                    r.mode,
                    median(&r.vip_rps),
                    median(&r.direct_rps),
                    ratio(&r.ratio)
                );
            }
            if let Some(r) = self.redis.first() {
                let _ = writeln!(s, "\nclient: `{}`", r.command);
            }
        }
        for f in &self.failed {
            let _ = writeln!(s, "\nFAILED: {f}");
        }
        s
    }
}
