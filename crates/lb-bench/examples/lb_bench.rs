//! The load balancer against nftables DNAT on the `lb` lab: per mode (DR, tunnel, NAT,
//! full-NAT), 64-byte TCP SYN, TCP ACK and UDP frames from 4,096 flows to 4 reals, single core
//! on the DUT (fp_bench's on-the-DUT method), the two alternating round by round; then
//! full-NAT new connections per second, the pps on 2 CPUs against 1, and redis-benchmark PING
//! through the VIP against the backends direct. The measuring code is this crate (the
//! showdown's LB rows run it too); this file reads the arguments and plugs in the XDP data
//! path (`xdp::XdpBalancer`). Run as root:
//!   cargo run --release -p wirespeed-lb-bench --example lb_bench -- [secs] [rounds] [row] [--json]
//!     [--no-toa]
//! `row`: only the rows whose name contains it (`full-NAT`, `UDP`, `new connections`,
//! `2 CPUs`, `redis`, `baseline`). `--json`: all figures as JSON on stdout instead of the
//! tables. `--no-toa`: full-NAT without the TOA option (by default it carries the client's
//! address, as the product does). Progress goes to stderr; a failed row makes the exit status
//! 1. Defaults: 3 s measured after 1 s of warm-up, 3 rounds.

use std::sync::Arc;
use std::time::Duration;

use wirespeed_lb_bench as lb;

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let no_toa = args.iter().any(|a| a == "--no-toa");
    args.retain(|a| a != "--json" && a != "--no-toa");
    if !wirespeed_sys::process::is_root() {
        eprintln!("lb_bench builds network namespaces and loads XDP programs: run it as root");
        std::process::exit(2);
    }
    let secs: f64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let rounds: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(3);
    let mut opts = lb::Opts::new(
        "lbb",
        Duration::from_secs(1),
        Duration::from_secs_f64(secs),
        rounds,
    );
    opts.only = args.get(2).cloned();
    opts.toa = !no_toa;
    // Enough requests that a run lasts about as long as a pps measurement.
    opts.redis_requests = ((secs * 400_000.0) as usize).max(100_000);
    match lb::run(&opts, Arc::new(lb::xdp::XdpBalancer)) {
        Ok(report) => {
            if json {
                match serde_json::to_string_pretty(&report) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("lb_bench: {e}");
                        std::process::exit(1);
                    }
                }
            } else {
                println!("{}", report.markdown());
            }
            if !report.failed.is_empty() {
                std::process::exit(1);
            }
        }
        Err(e) => {
            eprintln!("lb_bench: {e}");
            std::process::exit(1);
        }
    }
}
