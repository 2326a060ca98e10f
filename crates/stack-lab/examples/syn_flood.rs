//! `syn_flood`: spoofed SYNs from 127,750 lab sources (IPv4) or 131,070 (`--ipv6`) at
//! `wirespeed serve http`, on our stack and on Linux's, one after the other; prints how many of
//! a good client's requests were served during the flood and the server's memory before,
//! during and after it (docs/TCPIP.md, "Memory under attack"). Root.
//!
//! ```text
//! cargo build --release && cargo build --release -p wirespeed-stack-lab --example syn_flood
//! target/release/examples/syn_flood --syns 3000000 --rate 300000
//! target/release/examples/syn_flood --syns 3000000 --rate 300000 --ipv6
//! ```
//!
//! Exit status: 0 when the runs were made (the figures are what they are), 2 when one could
//! not be.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use wirespeed_stack_lab::flood::{flood, FloodFigures, FloodOptions, Stack};

#[derive(Parser)]
#[command(about = "SYN flood at wirespeed serve, our stack beside Linux's (root)")]
struct Args {
    /// SYNs sent at each server.
    #[arg(long, default_value_t = 2_500_000)]
    syns: u64,
    /// SYNs per second offered (paced in 20 runs a second; the figures say what was reached).
    #[arg(long, default_value_t = 300_000)]
    rate: u64,
    /// Seconds after the flood before the memory is read again.
    #[arg(long, value_name = "S", default_value_t = 30)]
    after: u64,
    /// Only this stack: ours or linux (default: both, ours first).
    #[arg(long, value_name = "STACK")]
    only: Option<String>,
    /// The server's CPU (the generator and the good client run wherever the scheduler puts
    /// them: give this one to the server alone, with --cpus elsewhere if needed).
    #[arg(long, value_name = "N", default_value_t = 1)]
    serve_cpu: usize,
    /// `serve --backlog N` (default: serve's).
    #[arg(long, value_name = "N")]
    backlog: Option<u32>,
    /// The wirespeed binary that serves (default: `wirespeed` beside this program's
    /// directory, i.e. target/release/wirespeed).
    #[arg(long, value_name = "PATH")]
    wirespeed: Option<PathBuf>,
    /// Flood over IPv6 instead: SYNs from fd00:1::/64 to [fd00::2]:8080, the good client
    /// from fd00::1 (the server serves both families).
    #[arg(long)]
    ipv6: bool,
    /// Print the figures as JSON on stdout instead of the table.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let stacks = match args.only.as_deref() {
        None => vec![Stack::Ours, Stack::Linux],
        Some("ours") => vec![Stack::Ours],
        Some("linux") => vec![Stack::Linux],
        Some(other) => {
            eprintln!("syn_flood: --only {other}: say `ours` or `linux`");
            return ExitCode::from(2);
        }
    };
    let o = FloodOptions {
        wirespeed: args
            .wirespeed
            .unwrap_or_else(wirespeed_stack_lab::serve::default_wirespeed),
        syns: args.syns,
        rate: args.rate,
        after: Duration::from_secs(args.after),
        serve_cpu: args.serve_cpu,
        backlog: args.backlog,
        ipv6: args.ipv6,
    };
    let mut all = Vec::new();
    for stack in stacks {
        match flood(stack, &o, &mut |line| eprintln!("syn_flood: {line}")) {
            Ok(f) => all.push(f),
            Err(e) => {
                eprintln!("syn_flood: {}: {e}", stack.name());
                return ExitCode::from(2);
            }
        }
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&all).unwrap_or_default());
    } else {
        print_table(&all);
    }
    ExitCode::SUCCESS
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

fn print_table(all: &[FloodFigures]) {
    println!(
        "| server | IP | SYNs | received | sources | SYN/s | good served | RSS idle MiB | peak (x idle) | after {}s (x idle) | served after |",
        all.first().map_or(0.0, |f| f.after_seconds).round()
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for f in all {
        let idle = f.rss_idle_kib.max(1) as f64;
        println!(
            "| {} | {} | {} | {} | {} | {:.0} | {}/{} ({:.1}%) | {} | {} ({:.2}x) | {} ({:.2}x) | {} |",
            f.stack.name(),
            if f.ipv6 { "v6" } else { "v4" },
            f.syns_sent,
            f.d0_received,
            f.sources,
            f.syns_sent as f64 / f.flood_seconds.max(1e-9),
            f.good_served,
            f.good_tried,
            100.0 * f.good_served as f64 / f.good_tried.max(1) as f64,
            mib(f.rss_idle_kib),
            mib(f.rss_peak_kib),
            f.rss_peak_kib as f64 / idle,
            mib(f.rss_after_kib),
            f.rss_after_kib as f64 / idle,
            if f.served_after { "yes" } else { "no" },
        );
    }
}
