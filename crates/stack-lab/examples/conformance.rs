//! `conformance`: crafted frames to our stack and to Linux in twin lab namespaces, replies
//! compared field by field (docs/TCPIP.md, "Conformance against Linux"). Root.
//!
//! ```text
//! cargo build --release && cargo run --release -p wirespeed-stack-lab --example conformance -- --seed 42
//! ```
//!
//! Exit status: 0 when every difference is in the table of accepted differences and known
//! stack gaps, 1 when one is not, 2 when the run could not be made.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use wirespeed_stack_lab::cases::Class;
use wirespeed_stack_lab::{run, Options};

#[derive(Parser)]
#[command(about = "Differential conformance of the bypass TCP/IP stack against Linux (root)")]
struct Args {
    /// Seed of the generated cases (printed; default: from the clock). The same seed draws
    /// the same cases.
    #[arg(long)]
    seed: Option<u64>,
    /// How many cases to run.
    #[arg(long, default_value_t = 300)]
    cases: usize,
    /// How long each case listens for replies after its last frame, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 150)]
    window_ms: u64,
    /// How long a stateful case waits for each answer while it drives the connection, in
    /// milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 500)]
    setup_ms: u64,
    /// Stop starting cases after this many seconds (the run then reports what it did).
    #[arg(long, value_name = "S", default_value_t = 600)]
    max_seconds: u64,
    /// Only these classes, comma-separated (control, eth-dst, ip-source, ip-header,
    /// ip-options, fragments, tcp-listen, tcp-closed, tcp-options, arp, icmp, other-proto,
    /// tcp-state; ip6-header, ip6-addr, ip6-ext, ip6-frag, icmp6, ndp, tcp6, udp6,
    /// tcp6-state), or the groups ipv4 and ipv6.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    only: Vec<String>,
    /// The wirespeed binary twin A serves with (default: `wirespeed` beside this program's
    /// directory, i.e. target/release/wirespeed for target/release/examples/conformance).
    #[arg(long, value_name = "PATH")]
    wirespeed: Option<PathBuf>,
    /// The CPU of twin A's one shard.
    #[arg(long, value_name = "N", default_value_t = 0)]
    serve_cpu: usize,
    /// Print the whole record as JSON on stdout (verdict lines stay on stderr).
    #[arg(long)]
    json: bool,
    /// No verdict line per case, only the summary.
    #[arg(long)]
    quiet: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut only = Vec::new();
    for name in &args.only {
        match Class::parse_group(name) {
            Some(c) => only.extend(c),
            None => {
                eprintln!("conformance: --only: no class `{name}` (see --help for the list)");
                return ExitCode::from(2);
            }
        }
    }
    let seed = args.seed.unwrap_or_else(wirespeed_testkit::rng::clock_seed);
    eprintln!("conformance: seed {seed} (repeat with --seed {seed})");
    let mut opts = Options::new(
        seed,
        args.wirespeed
            .unwrap_or_else(wirespeed_stack_lab::serve::default_wirespeed),
    );
    opts.cases = args.cases;
    opts.window = Duration::from_millis(args.window_ms);
    opts.setup_limit = Duration::from_millis(args.setup_ms);
    opts.max_total = Duration::from_secs(args.max_seconds);
    opts.only = only;
    opts.twin.serve_cpu = args.serve_cpu;
    opts.progress = !args.quiet;
    let report = match run(&opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("conformance: {e}");
            return ExitCode::from(2);
        }
    };
    eprint!("{}", report.summary());
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report.json()).unwrap_or_default()
        );
    }
    if report.unexplained().is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
