//! Our stack against Linux, frame by frame. Crafted frames (generated from a
//! printed seed) go to `serve http --stack xdp` in one lab twin and to Linux in an identical
//! other, over IPv4 and IPv6 (a third of the cases); the replies are compared field by field
//! (crates/stack-lab, docs/TCPIP.md "Conformance against Linux"). Fails on a difference that
//! the table of accepted differences and known stack gaps (crates/stack-lab/src/known/rows.rs)
//! does not explain.
//!
//! `WS_CONFORMANCE_SEED=N` repeats a run, `WS_CONFORMANCE_CASES=N` sets the count (300, about
//! a minute). Root.

use std::path::PathBuf;
use std::time::Duration;

use wirespeed_stack_lab::{run, Options};

fn env_u64(var: &str) -> Option<u64> {
    std::env::var(var).ok().and_then(|v| v.parse().ok())
}

#[test]
fn our_stack_answers_crafted_frames_as_linux_does() {
    wirespeed_lab::require_root();
    let seed = env_u64("WS_CONFORMANCE_SEED").unwrap_or_else(wirespeed_testkit::rng::clock_seed);
    println!("conformance: seed {seed} (repeat with WS_CONFORMANCE_SEED={seed})");
    eprintln!("conformance: seed {seed} (repeat with WS_CONFORMANCE_SEED={seed})");
    let mut opts = Options::new(seed, PathBuf::from(env!("CARGO_BIN_EXE_wirespeed")));
    opts.cases = env_u64("WS_CONFORMANCE_CASES").unwrap_or(300) as usize;
    opts.max_total = Duration::from_secs(150);
    let report = run(&opts).unwrap_or_else(|e| panic!("conformance (seed {seed}): {e}"));
    let summary = report.summary();
    eprint!("{summary}");
    assert!(
        report.results.len() * 10 >= report.planned * 9,
        "only {} of {} cases ran in the time bound (seed {seed})",
        report.results.len(),
        report.planned
    );
    let bad = report.unexplained();
    let details: Vec<String> = bad
        .iter()
        .map(|r| r.progress_line(report.planned))
        .collect();
    assert!(
        bad.is_empty(),
        "differences from Linux that no row of crates/stack-lab/src/known.rs explains \
         (repeat with WS_CONFORMANCE_SEED={seed}):\n{}\n{summary}",
        details.join("\n")
    );
}
