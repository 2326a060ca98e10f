//! `wirespeed probe PID`: CPU per request, syscalls per request, context switches and packet
//! locality of a running server over a measured interval (see crates/probe).

use std::time::Duration;

use anyhow::Context;
use wirespeed_load::{cpu, parse_duration};
use wirespeed_probe::{self as probe, ProbeOpts};

#[derive(clap::Args)]
pub struct Args {
    /// Process to probe (all its threads).
    pid: i32,
    /// Measured interval.
    #[arg(short = 'd', long, default_value = "5s", value_parser = dur)]
    duration: Duration,
    /// Requests served during the interval (from the load generator), for per-request figures.
    #[arg(long)]
    requests: Option<u64>,
    /// CPUs whose softirq time is charged to the server (default: its affinity mask).
    #[arg(long)]
    cpus: Option<String>,
    /// Skip the BPF probes (syscalls, locality).
    #[arg(long)]
    no_bpf: bool,
    /// Print JSON instead of text; `--json FILE` writes it to FILE.
    #[arg(long, num_args = 0..=1, default_missing_value = "-")]
    json: Option<String>,
}

fn dur(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let opts = ProbeOpts {
        pid: a.pid,
        cpus: a.cpus.as_deref().map(cpu::parse_cpu_list).transpose()?,
        bpf: !a.no_bpf,
        receive_threads: vec![],
    };
    let requests = a.requests;
    let d = a.duration;
    let report = probe::measure(&opts, move || {
        std::thread::sleep(d);
        requests
    })
    .with_context(|| format!("probe pid {}", a.pid))?;
    match a.json.as_deref() {
        Some("-") => println!("{}", serde_json::to_string_pretty(&report)?),
        Some(path) => {
            std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
                .with_context(|| format!("write {path}"))?;
            print!("{}", report.text());
        }
        None => print!("{}", report.text()),
    }
    Ok(())
}
