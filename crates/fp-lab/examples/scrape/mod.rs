//! `fp_bench SECS ROUNDS scrape`: what a Prometheus scraping `fp run --metrics` every second
//! costs the fast path. The router row (one flow over the 50 prefixes), offered both ways
//! (on the DUT, and through the source veth), with the daemon serving `--metrics` in both
//! arms; in one arm a scraper in the DUT's namespace fetches `/metrics` once a second, as a
//! Prometheus with `scrape_interval: 1s` does. The arms alternate, `rounds` times each.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

const METRICS: &str = "127.0.0.1:9101";

pub fn run(
    ends: &Ends,
    d0: u32,
    gen: &Arc<Gen>,
    frame: &[u8],
    (warm, secs, rounds): (Duration, Duration, usize),
) {
    println!(
        "| row | fast path Mpps, not scraped (median) | scraped every 1 s (median) | ratio median (min-max) | DUT CPU1 busy not / scraped | scrapes per round |"
    );
    println!("|---|---|---|---|---|---|");
    for local in [true, false] {
        let name = if local {
            "router (50 prefixes), on the DUT"
        } else {
            "router (50 prefixes), veth"
        };
        let m = || {
            if local {
                measure_local(ends, d0, gen, frame, warm, secs)
            } else {
                measure(ends, gen, frame, warm, secs)
            }
        };
        let (mut quiet, mut scraped, mut ratios) = (vec![], vec![], vec![]);
        let (mut cpu_q, mut cpu_s, mut scrapes) = (vec![], vec![], vec![]);
        for _ in 0..rounds {
            let (q, _) = with_metrics(ends.dut, false, &m);
            let (s, n) = with_metrics(ends.dut, true, &m);
            assert!(
                n as f64 >= secs.as_secs_f64(),
                "{name}: only {n} scrapes in a {} s round",
                secs.as_secs()
            );
            ratios.push(s.pps / q.pps.max(1.0));
            quiet.push(q.pps);
            scraped.push(s.pps);
            cpu_q.push(q.cpu1);
            cpu_s.push(s.cpu1);
            scrapes.push(n as f64);
        }
        let (rmin, rmax) = (
            ratios.iter().cloned().fold(f64::MAX, f64::min),
            ratios.iter().cloned().fold(0.0, f64::max),
        );
        println!(
            "| {name} | {:.3} | {:.3} | {:.3}x ({:.3}-{:.3}) | {:.0}% / {:.0}% | {:.0} |",
            median(&mut quiet) / 1e6,
            median(&mut scraped) / 1e6,
            median(&mut ratios),
            rmin,
            rmax,
            median(&mut cpu_q) * 100.0,
            median(&mut cpu_s) * 100.0,
            median(&mut scrapes)
        );
    }
}

/// One GET /metrics; true when the answer is a 200 with the fast path's series.
fn scrape_once() -> bool {
    let Ok(mut s) = std::net::TcpStream::connect(METRICS) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    if s.write_all(b"GET /metrics HTTP/1.1\r\nHost: fp\r\nAccept: text/plain\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut text = String::new();
    s.read_to_string(&mut text).is_ok()
        && text.starts_with("HTTP/1.1 200 OK")
        && text.contains("wirespeed_fp_packets_total{")
}

/// Runs `m` with the daemon (serving `--metrics`) in `dut`, scraped every second when
/// `scrape`; the sample and how many scrapes succeeded.
fn with_metrics(dut: &wirespeed_lab::Netns, scrape: bool, m: &dyn Fn() -> Sample) -> (Sample, u64) {
    let mut d = RunningDaemon::start_config(
        dut,
        wirespeed_fp::daemon::Config {
            metrics: Some(METRICS.parse().unwrap()),
            ..Default::default()
        },
    );
    d.wait_for("attached", |s| {
        s.ports.len() == 2 && s.ports.iter().all(|p| !p.modules.is_empty())
    });
    let stop = Arc::new(AtomicBool::new(false));
    let scraper = scrape.then(|| {
        let stop = stop.clone();
        spawn_in_ns(dut.name(), move || {
            let mut ok = 0u64;
            let mut next = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                if Instant::now() >= next {
                    ok += u64::from(scrape_once());
                    next += Duration::from_secs(1);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            ok
        })
    });
    let sample = m();
    stop.store(true, Ordering::Relaxed);
    let scrapes = scraper.map_or(0, |h| h.join().unwrap());
    let s = d.status().unwrap();
    d.stop();
    assert!(
        s.ports.iter().any(|p| p.fast_pathed > 0),
        "nothing fast-pathed: {:?}",
        s.ports
    );
    (sample, scrapes)
}
