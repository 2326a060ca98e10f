//! The load side of one round: the row's load against its server, the server's probe
//! snapshotted at the edges of the measured interval.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use wirespeed_load::echo::EchoParser;
use wirespeed_load::http::{build_request, HttpParser, Target};
use wirespeed_load::{self as load, LoadSpec, PHASE_DONE, PHASE_MEASURING};
use wirespeed_probe::ProbeReport;
use wirespeed_sys::netns;

use crate::plan::{RoundPlan, PORT};
use crate::results::{RoundFigures, Workload};
use crate::rows::{
    Placement, RowSpec, ECHO_SIZE, PINGPONG_CONNECTIONS, STREAM_CONNECTIONS, STREAM_DEPTH,
};

/// The server's probe as the load side sees it: snapshots at the edges of the measured
/// interval (here, or on the server host over the control connection).
pub(crate) trait ServerProbe {
    fn begin(&mut self) -> anyhow::Result<()>;
    fn end(&mut self) -> anyhow::Result<ProbeReport>;
}

/// The client's side of one round: the row's load against `addr` (from namespace `ns` when
/// given, else from here) on the client CPUs of `at`, one thread on each, the server's probe
/// snapshotted at the edges of the measured interval, the figures of both sides.
pub(crate) fn drive(
    spec: &RowSpec,
    plan: &RoundPlan,
    at: &Placement,
    addr: std::net::Ipv4Addr,
    ns: Option<String>,
    probe: &mut dyn ServerProbe,
) -> anyhow::Result<RoundFigures> {
    let target = Target::parse(&format!("http://{addr}:{PORT}/plaintext"))?;
    let phase = Arc::new(AtomicU8::new(0));
    let (connections, depth, request) = match spec.workload {
        Workload::Http | Workload::HttpScaling => (
            plan.connections * spec.shards,
            1,
            build_request("GET", &target, &[])?,
        ),
        Workload::EchoPingPong => (
            PINGPONG_CONNECTIONS,
            1,
            wirespeed_load::echo::message(ECHO_SIZE),
        ),
        Workload::EchoStream => (
            STREAM_CONNECTIONS,
            STREAM_DEPTH,
            wirespeed_load::echo::message(ECHO_SIZE),
        ),
        Workload::LbFullNatPps => bail!("the load balancer rows have no client (lb_rows)"),
    };
    let load_spec = LoadSpec {
        addr: target.addr,
        connections,
        threads: at.client.len(),
        cpus: Some(at.client.clone()),
        warmup: plan.warmup,
        duration: plan.duration,
        depth,
        rate: None,
        timeout: Duration::from_secs(2),
        request,
        live: false,
        phase: Some(phase.clone()),
        engine: load::Engine::Uring,
    };
    let workload = spec.workload;
    let run = move || match workload {
        Workload::Http | Workload::HttpScaling => load::run(&load_spec, HttpParser::default()),
        _ => load::run(&load_spec, EchoParser::new(ECHO_SIZE)),
    };
    // The load threads inherit the client namespace from this one.
    let client = match ns {
        Some(ns) => netns::spawn_in(&ns, run)?,
        None => std::thread::spawn(move || Ok(run())),
    };
    let wait_phase = |want: u8| {
        while phase.load(Ordering::SeqCst) < want && !client.is_finished() {
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    wait_phase(PHASE_MEASURING);
    probe.begin()?;
    wait_phase(PHASE_DONE);
    let mut report = probe.end()?;
    let result = client
        .join()
        .map_err(|_| anyhow::anyhow!("load thread panicked"))???;
    report.set_requests(Some(result.requests));

    let l = &result.hist.percentiles();
    let fig = RoundFigures {
        rps: result.rps(),
        pps: None,
        p50_us: l.p50,
        p99_us: l.p99,
        p9999_us: l.p9999,
        cpu_us_per_req: report.cpu.us_per_req,
        syscalls_per_req: report.syscalls.as_ref().and_then(|s| s.per_req),
        ctx_switches_per_s: report.ctx_switches.per_s,
        locality_pct: report.locality.as_ref().and_then(|l| l.pct),
        client_cpu_pct: result.client_cpu_pct(),
        client_cpu_us_per_req: result.client_cpu_us_per_req(),
        server_cpu_pct: report.cpu.pct,
        errors: result.errors.total(),
    };
    if let Some(e) = &report.bpf_error {
        eprintln!("  note: {e}");
    }
    Ok(fig)
}
