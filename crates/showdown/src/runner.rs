//! Runs a showdown: the rounds over the chosen rows (here in the lab, or as one of two hosts),
//! then the reports: the table on stdout, showdown.{json,md} and the charts.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context};
use wirespeed_lab::topo;
use wirespeed_sys::signal::Signals;

use crate::chart;
use crate::interrupt::{self, check_interrupt};
use crate::lab_round::run_row;
use crate::plan::{Mode, Plan, RoundPlan, RoundRun, CLIENT_CPU, LAB, SERVER_CPU};
use crate::remote;
use crate::results::{Row, Showdown};
use crate::rows::{fill_from_ladder, ladder, too_few_cpus, with_base_rows, RowSpec};
use crate::server::nginx_missing;

fn shell(cmd: &str) -> String {
    Command::new("sh")
        .args(["-c", cmd])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

fn write_reports(sd: &Showdown, out: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
    let json = out.join("showdown.json");
    std::fs::write(&json, serde_json::to_string_pretty(sd)? + "\n")
        .with_context(|| format!("write {}", json.display()))?;
    std::fs::write(out.join("showdown.md"), sd.markdown())?;
    let mut written = vec![json, out.join("showdown.md")];
    let mut png_error = None;
    for svg in chart::write_svgs(sd, out)? {
        written.push(svg.clone());
        if png_error.is_some() {
            // An earlier run's PNG would not show this run's figures.
            let _ = std::fs::remove_file(svg.with_extension("png"));
            continue;
        }
        match chart::png(&svg) {
            Ok(png) => written.push(png),
            Err(why) => {
                let _ = std::fs::remove_file(svg.with_extension("png"));
                png_error = Some(why);
            }
        }
    }
    if let Some(why) = png_error {
        eprintln!("{why}");
    }
    println!("{}", sd.table());
    let names: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
    println!("wrote {}", names.join(", "));
    Ok(())
}

/// Runs `plan`. `signals` (SIGINT and SIGTERM, blocked by the caller before any thread
/// started) are read between steps; a render needs none.
pub fn run(plan: &Plan, signals: Option<Signals>) -> anyhow::Result<()> {
    if let Some(signals) = signals {
        interrupt::keep(signals);
    }
    match &plan.mode {
        Mode::Render(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("read {}", path.display()))?;
            let mut sd: Showdown =
                serde_json::from_str(&text).with_context(|| format!("parse {}", path.display()))?;
            fill_from_ladder(&mut sd);
            write_reports(&sd, &plan.out)
        }
        Mode::Server { listen, allow_host } => remote::serve(*listen, *allow_host),
        Mode::Client { peer } => {
            let mut control = remote::Control::connect(*peer)?;
            let server_cpus = format!("{SERVER_CPU} on the server host {peer}");
            measure(
                plan,
                &server_cpus,
                &remote::lab_only,
                &mut |row, spec, round, _| control.round(row, spec, round),
            )
        }
        Mode::Lab => {
            if !wirespeed_lab::is_root() {
                bail!("the showdown builds network namespaces and loads BPF probes: run it as root (sudo make run)");
            }
            // A lab left by a crashed run would make `lab up` refuse.
            let _ = topo::down(LAB);
            let ncpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            let result = measure(
                plan,
                &SERVER_CPU.to_string(),
                &|spec| nginx_missing(spec).or_else(|| too_few_cpus(spec, ncpus)),
                &mut |_, spec, round, out| run_row(spec, round, out),
            );
            let _ = topo::down(LAB);
            result
        }
    }
}

/// One round of one row (its 1-based number, its spec), wherever it runs.
type RunRound<'a> = dyn FnMut(usize, &RowSpec, &RoundPlan, &Path) -> anyhow::Result<RoundRun> + 'a;

/// The showdown's rounds over the chosen rows, each round of each row run by `run_round`
/// (rows that `skip` names a reason for are skipped), then the reports.
fn measure(
    plan: &Plan,
    server_cpus: &str,
    skip: &dyn Fn(&RowSpec) -> Option<String>,
    run_round: &mut RunRound,
) -> anyhow::Result<()> {
    let (rounds, round_plan) = (plan.rounds.max(1), &plan.round);
    std::fs::create_dir_all(&plan.out).with_context(|| format!("create {}", plan.out.display()))?;
    let out = std::fs::canonicalize(&plan.out)?;
    let _ = std::fs::remove_file(out.join("showdown-server.log"));
    let _ = std::fs::remove_file(out.join("showdown-server.json"));

    let mut rows = chosen_rows(plan.rows.as_deref());
    for (spec, row) in rows.iter_mut() {
        row.skipped = skip(spec);
    }
    eprintln!(
        "showdown: {} rows x {rounds} round(s), {:.1}s warm-up + {:.1}s each, {} connections; client CPU {CLIENT_CPU}, server CPU {SERVER_CPU} (scaling rows: a CPU per shard on each side)",
        rows.len(),
        round_plan.warmup.as_secs_f64(),
        round_plan.duration.as_secs_f64(),
        round_plan.connections
    );
    for round in 1..=rounds {
        for (spec, row) in rows.iter_mut() {
            if row.skipped.is_some() {
                continue;
            }
            run_one(round, rounds, spec, row, round_plan, &out, run_round)?;
        }
    }
    let mut sd = showdown(rows, round_plan, rounds, server_cpus);
    sd.compute_ratios();
    write_reports(&sd, &out)
}

/// Row 1, the rows `wanted` names and their base rows (every row when None), each with its
/// results row.
fn chosen_rows(wanted: Option<&[usize]>) -> Vec<(RowSpec, Row)> {
    let wanted = wanted.map(|w| with_base_rows(&ladder(), w.to_vec()));
    ladder()
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i == 0 || wanted.as_ref().is_none_or(|w| w.contains(&(i + 1))))
        .map(|(i, spec)| {
            let row = Row {
                row: i + 1,
                base_row: spec.base_row,
                name: spec.name.into(),
                profile: spec.profile.name().into(),
                workload: Some(spec.workload),
                seed_ratio: spec.seed.map(|s| s.ratio),
                seed_source: spec.seed.map(|s| s.source.into()),
                ..Default::default()
            };
            (spec, row)
        })
        .collect()
}

/// One round of one row: its figures go into `row`; a failure is said in one line (and, when
/// it was the row's last chance, makes the row skipped). Only an interrupt stops the showdown.
fn run_one(
    round: usize,
    rounds: usize,
    spec: &RowSpec,
    row: &mut Row,
    plan: &RoundPlan,
    out: &Path,
    run_round: &mut RunRound,
) -> anyhow::Result<()> {
    match run_round(row.row, spec, plan, out) {
        Ok(RoundRun {
            figures: fig,
            server: line,
            settings,
            mtu,
        }) => {
            let unit = if fig.pps.is_some() { "pps" } else { "req/s" };
            eprintln!(
                "  round {round}/{rounds} row {} {:<22} {:>9.0} {unit}  p99 {:>7.0} us  server {:>5.1}% CPU  client {:>5.1}% CPU",
                row.row, row.name, fig.rate(), fig.p99_us, fig.server_cpu_pct, fig.client_cpu_pct
            );
            row.server = line;
            row.profile_settings = settings;
            row.mtu = mtu;
            row.rounds.push(fig);
        }
        Err(e) => {
            check_interrupt()?;
            eprintln!(
                "  round {round}/{rounds} row {} {}: {e:#}",
                row.row, row.name
            );
            if row.rounds.is_empty() && round == rounds {
                row.skipped = Some(format!("failed: {e:#}"));
            }
        }
    }
    Ok(())
}

/// The results of the rounds run, with this machine's description.
fn showdown(
    rows: Vec<(RowSpec, Row)>,
    plan: &RoundPlan,
    rounds: usize,
    server_cpus: &str,
) -> Showdown {
    Showdown {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        date: shell("date -u +%Y-%m-%dT%H:%M:%SZ"),
        uname_r: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
        tcp_congestion_control: std::fs::read_to_string(
            "/proc/sys/net/ipv4/tcp_congestion_control",
        )
        .unwrap_or_default()
        .trim()
        .to_string(),
        nproc: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        commit: shell("git rev-parse --short HEAD 2>/dev/null"),
        client_cpus: CLIENT_CPU.to_string(),
        server_cpus: server_cpus.to_string(),
        connections: plan.connections,
        warmup_s: plan.warmup.as_secs_f64(),
        duration_s: plan.duration.as_secs_f64(),
        rounds,
        latency: "closed loop (wrk-like), 1 request in flight per connection".into(),
        rows: rows
            .into_iter()
            .map(|(_, mut r)| {
                if r.skipped.is_none() && r.rounds.is_empty() {
                    r.skipped = Some("no round completed".into());
                }
                r.summarize();
                r
            })
            .collect(),
    }
}
