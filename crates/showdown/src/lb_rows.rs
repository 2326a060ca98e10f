//! The showdown's load-balancer rows: full-NAT pps of 64-byte TCP segments of established
//! connections (4,096 flows, 4 reals) through nftables DNAT+SNAT (row 12) and through
//! `wirespeed lb`'s XDP data path (row 13), measured as lb_bench measures them
//! (`wirespeed_lb_bench`, on the DUT: generator and path on the server CPU, the backends'
//! receive on the other).

use std::sync::Arc;
use std::time::Duration;

use crate::results::RoundFigures;
use wirespeed_lb_bench::{self as lb, Balancer, Mode, Traffic};

/// The lab the rows build (ws-sdlb-*).
const LAB: &str = "sdlb";

/// One round of one LB row: `xdp` the balancer, else nftables. Returns the figures (`pps`;
/// CPU-µs/req holds the CPU time per packet) and what ran.
pub fn round(
    xdp: bool,
    dut_cpu: usize,
    other_cpu: usize,
    warmup: Duration,
    duration: Duration,
) -> anyhow::Result<(RoundFigures, String)> {
    let mut opts = lb::Opts::new(LAB, warmup, duration, 1);
    opts.dut_cpu = dut_cpu;
    opts.other_cpu = other_cpu;
    let balancer: Option<Arc<dyn Balancer>> = if xdp {
        Some(Arc::new(lb::xdp::XdpBalancer))
    } else {
        None
    };
    let line = match &balancer {
        Some(b) => format!("{}, full-NAT, on the DUT (CPU {dut_cpu})", b.describe()),
        None => format!(
            "nftables: jhash DNAT map + SNAT, kernel forwarding, on the DUT (CPU {dut_cpu})"
        ),
    };
    let s = lb::measure_once(&opts, balancer, Mode::FullNat, Traffic::TcpAck)?;
    Ok((
        RoundFigures {
            pps: Some(s.pps),
            cpu_us_per_req: Some(s.ns_per_packet / 1000.0),
            server_cpu_pct: s.busy * 100.0,
            ..Default::default()
        },
        line,
    ))
}
