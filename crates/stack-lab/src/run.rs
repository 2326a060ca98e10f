//! A whole run: twins up, preflight, the cases on both twins at once (one thread per twin,
//! each case's window on both at the same time), verdicts as they complete.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::cases::{self, Case, Class};
use crate::compare::{self, Outcome};
use crate::known;
use crate::report::{CaseResult, Report};
use crate::side::Side;
use crate::twin::{TwinConfig, Twins};
use crate::Error;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    pub seed: u64,
    pub cases: usize,
    /// How long each case listens for replies after its last frame.
    pub window: Duration,
    /// How long a stateful case waits for each answer while it drives the connection.
    pub setup_limit: Duration,
    /// The whole run stops starting cases after this long.
    pub max_total: Duration,
    /// Only these classes (all when empty).
    pub only: Vec<Class>,
    pub twin: TwinConfig,
    /// Print a verdict line per case on stderr.
    pub progress: bool,
}

impl Options {
    pub fn new(seed: u64, wirespeed: std::path::PathBuf) -> Options {
        Options {
            seed,
            cases: 300,
            window: Duration::from_millis(150),
            setup_limit: Duration::from_millis(500),
            max_total: Duration::from_secs(600),
            only: Vec::new(),
            twin: TwinConfig {
                wirespeed,
                serve_cpu: 0,
            },
            progress: true,
        }
    }
}

/// Runs the cases of `opts.seed` against both twins.
pub fn run(opts: &Options) -> Result<Report, Error> {
    let started = Instant::now();
    let mut twins = Twins::up(&opts.twin)?;
    let mut ours = Side::new(
        "ours",
        twins.peer_socket('a')?,
        opts.window,
        opts.setup_limit,
    );
    let mut linux = Side::new(
        "linux",
        twins.peer_socket('b')?,
        opts.window,
        opts.setup_limit,
    );
    let cases = cases::generate(opts.seed, opts.cases, &opts.only);
    let v6 = cases.iter().any(|c| c.class.is_v6());
    preflight(opts.seed, v6, &mut ours, &mut linux).map_err(|e| {
        let said = twins.serve_log().trim().replace('\n', " | ");
        match e {
            Error::Preflight(why) => {
                Error::Preflight(format!("{why}; wirespeed serve said: {said}"))
            }
            other => other,
        }
    })?;
    let deadline = started + opts.max_total;
    let (results, complete) = run_cases(opts, &cases, &mut ours, &mut linux, deadline)?;
    let serve_log = twins.stop_serve();
    Ok(Report {
        seed: opts.seed,
        window: opts.window,
        results,
        planned: cases.len(),
        complete,
        strays: (ours.strays, linux.strays),
        stray_sample: (ours.stray_sample.clone(), linux.stray_sample.clone()),
        linux_settings: twins.linux_settings.clone(),
        serve_log,
        elapsed: started.elapsed(),
    })
}

/// Both twins must answer a plain SYN with a SYN-ACK and a plain echo with a reply, within
/// 5 s (an XDP program may take a moment to see its first frame); with `v6`, over IPv6 too,
/// within 5 s more (each DUT's IPv6 address is tentative for about a second after it is
/// configured: duplicate address detection).
fn preflight(seed: u64, v6: bool, ours: &mut Side, linux: &mut Side) -> Result<(), Error> {
    let families: &[bool] = if v6 { &[false, true] } else { &[false] };
    for &ipv6 in families {
        let until = Instant::now() + Duration::from_secs(5);
        for side in [&mut *ours, &mut *linux] {
            let mut n = 0;
            loop {
                let [syn, echo] = if ipv6 {
                    cases::preflight6(seed, n)
                } else {
                    cases::preflight(seed, n)
                };
                let a = side.run(&syn).map_err(|e| io(side.name, e))?;
                let b = side.run(&echo).map_err(|e| io(side.name, e))?;
                let synack = a.replies.iter().any(|r| r.tcp_flags() == Some("SA"));
                let reply = b
                    .replies
                    .iter()
                    .any(|r| r.icmp_type() == Some(0) || r.icmp6_type() == Some(129));
                if synack && reply {
                    break;
                }
                if Instant::now() > until {
                    let family = if ipv6 { "IPv6" } else { "IPv4" };
                    return Err(Error::Preflight(format!(
                        "twin {} does not answer over {family}: SYN-ACK {synack}, echo reply {reply} (replies: {:?} {:?})",
                        side.name,
                        a.replies.iter().map(|r| r.line()).collect::<Vec<_>>(),
                        b.replies.iter().map(|r| r.line()).collect::<Vec<_>>()
                    )));
                }
                n += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    Ok(())
}

fn io(side: &str, e: std::io::Error) -> Error {
    Error::Io(format!("twin {side}: {e}"))
}

type Done = Result<Outcome, std::io::Error>;

/// The cases on both sides at once; verdicts in case order. Returns the results and whether
/// every case ran (false: the time bound cut the run short).
fn run_cases(
    opts: &Options,
    cases: &[Case],
    ours: &mut Side,
    linux: &mut Side,
    deadline: Instant,
) -> Result<(Vec<CaseResult>, bool), Error> {
    let (tx_a, rx_a) = mpsc::channel::<Done>();
    let (tx_b, rx_b) = mpsc::channel::<Done>();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| worker(ours, cases, deadline, &stop, tx_a));
        s.spawn(|| worker(linux, cases, deadline, &stop, tx_b));
        let r = collect(opts, cases, &rx_a, &rx_b);
        // On an error, the other twin's worker stops at its next case.
        stop.store(true, Ordering::Relaxed);
        r
    })
}

/// The verdicts, case by case, as both workers deliver.
fn collect(
    opts: &Options,
    cases: &[Case],
    rx_a: &mpsc::Receiver<Done>,
    rx_b: &mpsc::Receiver<Done>,
) -> Result<(Vec<CaseResult>, bool), Error> {
    let mut results = Vec::with_capacity(cases.len());
    for case in cases {
        let (Ok(a), Ok(b)) = (rx_a.recv(), rx_b.recv()) else {
            return Ok((results, false));
        };
        let a = a.map_err(|e| io("ours", e))?;
        let b = b.map_err(|e| io("linux", e))?;
        let r = judge(case, a, b);
        if opts.progress {
            eprintln!("{}", r.progress_line(cases.len()));
        }
        results.push(r);
    }
    Ok((results, true))
}

fn worker(
    side: &mut Side,
    cases: &[Case],
    deadline: Instant,
    stop: &AtomicBool,
    tx: mpsc::Sender<Done>,
) {
    for case in cases {
        if Instant::now() > deadline || stop.load(Ordering::Relaxed) {
            return;
        }
        let r = side.run(case);
        let failed = r.is_err();
        if tx.send(r).is_err() || failed {
            return;
        }
    }
}

/// Compares one case's outcomes and finds its verdict.
pub fn judge(case: &Case, ours: Outcome, linux: Outcome) -> CaseResult {
    let diffs = compare::differences(&ours, &linux);
    let (verdict, unexplained) = known::verdict(case, &ours, &linux, &diffs);
    CaseResult {
        case: case.clone(),
        ours,
        linux,
        diffs,
        unexplained,
        verdict,
    }
}
