//! Runs a load on the kernel engines: one thread per CPU, the live line, the summed result.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::conn::{ResponseParser, Tally};
use crate::cpu;
use crate::spec::{Engine, LoadResult, LoadSpec, PHASE_DONE, PHASE_MEASURING};
use crate::worker::{sleep_until, PaddedCounter, Worker};
use crate::{Error, Result};

/// Runs the load described by `spec`, parsing responses with clones of `parser`.
pub fn run<P: ResponseParser>(spec: &LoadSpec, parser: P) -> Result<LoadResult> {
    check(spec)?;
    let mut threads = if spec.threads > 0 {
        spec.threads
    } else {
        spec.cpus.as_ref().map_or(1, |c| c.len())
    };
    threads = threads.clamp(1, spec.connections);
    let depth = spec.depth.clamp(1, 1024);
    let engine = match spec.engine {
        Engine::Uring if io_uring::IoUring::new(8).is_err() => Engine::Epoll,
        e => e,
    };

    let start = Instant::now() + Duration::from_millis(20);
    let measure_at = start + spec.warmup;
    let end_at = measure_at + spec.duration;
    let counters: Arc<Vec<PaddedCounter>> = Arc::new(
        (0..threads)
            .map(|_| PaddedCounter(AtomicU64::new(0)))
            .collect(),
    );
    let abort = Arc::new(AtomicBool::new(false));

    let mut handles = Vec::with_capacity(threads);
    for t in 0..threads {
        let conn_ids: Vec<usize> = (t..spec.connections).step_by(threads).collect();
        let w = Worker {
            addr: spec.addr,
            conn_ids,
            total_conns: spec.connections,
            cpu: spec.cpus.as_ref().map(|c| c[t % c.len()]),
            depth,
            rate: spec.rate,
            timeout: spec.timeout,
            request: spec.request.clone(),
            start,
            measure_at,
            end_at,
            counters: counters.clone(),
            index: t,
            abort: abort.clone(),
        };
        let p = parser.clone();
        let h = std::thread::Builder::new()
            .name(format!("ws-load-{t}"))
            .spawn(move || match engine {
                Engine::Epoll => crate::epoll::run_worker(w, p),
                Engine::Uring => crate::uring::run_worker(w, p),
            })
            .map_err(|source| Error::Io {
                what: "spawn load thread".into(),
                source,
            })?;
        handles.push(h);
    }

    let (client_cpu, measured) = sample_interval(spec, &counters, measure_at, end_at);
    let total = join_workers(handles, &abort)?;
    Ok(LoadResult {
        hist: total.hist,
        requests: total.requests,
        bytes_read: total.bytes_read,
        bytes_written: total.bytes_written,
        duration: measured,
        errors: total.errors,
        client_cpu,
        open_loop: spec.rate.is_some(),
        threads,
        connections: spec.connections,
        engine,
    })
}

fn check(spec: &LoadSpec) -> Result<()> {
    if spec.connections == 0 {
        return Err(Error::Invalid("need at least one connection".into()));
    }
    if spec.request.is_empty() {
        return Err(Error::Invalid("empty request".into()));
    }
    if let Some(r) = spec.rate {
        if !(r > 0.0 && r.is_finite()) {
            return Err(Error::Invalid(format!("bad rate {r}")));
        }
    }
    Ok(())
}

/// The measured interval, seen from the main thread: it only samples CPU time at the edges
/// and prints the live line. Returns the client's CPU time and the interval's length.
fn sample_interval(
    spec: &LoadSpec,
    counters: &[PaddedCounter],
    measure_at: Instant,
    end_at: Instant,
) -> (Duration, Duration) {
    let tty = spec.live && is_stdout_tty();
    sleep_until(measure_at);
    if let Some(p) = &spec.phase {
        p.store(PHASE_MEASURING, Ordering::SeqCst);
    }
    let cpu0 = cpu::self_cpu_time();
    let t0 = Instant::now();
    let mut last = (t0, sum(counters));
    while Instant::now() < end_at {
        let next = (Instant::now() + Duration::from_secs(1)).min(end_at);
        sleep_until(next);
        if tty {
            let now = (Instant::now(), sum(counters));
            let rate =
                (now.1.saturating_sub(last.1)) as f64 / (now.0 - last.0).as_secs_f64().max(1e-9);
            println!(
                "  {:>5.1}s  {:>12.0} req/s",
                (now.0 - t0).as_secs_f64(),
                rate
            );
            last = now;
        }
    }
    let cpu1 = cpu::self_cpu_time();
    let measured = Instant::now() - t0;
    if let Some(p) = &spec.phase {
        p.store(PHASE_DONE, Ordering::SeqCst);
    }
    (cpu1.saturating_sub(cpu0), measured)
}

/// Joins the load threads and sums their tallies; the first error wins (and stops the rest).
fn join_workers(
    handles: Vec<std::thread::JoinHandle<Result<Tally>>>,
    abort: &AtomicBool,
) -> Result<Tally> {
    let mut total = Tally::default();
    let mut first_err = None;
    for h in handles {
        match h.join() {
            Ok(Ok(t)) => total.merge(&t),
            Ok(Err(e)) => {
                abort.store(true, Ordering::Relaxed);
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert(Error::Invalid("a load thread panicked".into()));
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(total),
    }
}

fn sum(c: &[PaddedCounter]) -> u64 {
    c.iter().map(|c| c.0.load(Ordering::Relaxed)).sum()
}

fn is_stdout_tty() -> bool {
    wirespeed_sys::socket::stdout_is_tty()
}
