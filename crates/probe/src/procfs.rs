//! /proc counters: process CPU time, softirq time per CPU, context switches.

use std::fs;

use wirespeed_load::{Error, Result};

#[derive(Clone, Debug, Default)]
pub struct ProcSnapshot {
    user_ticks: u64,
    sys_ticks: u64,
    softirq_ticks: u64,
    receive_thread_ticks: u64,
    voluntary: u64,
    involuntary: u64,
}

#[derive(Clone, Debug, Default)]
pub struct ProcDelta {
    pub user_s: f64,
    pub sys_s: f64,
    pub softirq_s: f64,
    pub receive_threads_s: f64,
    pub voluntary: u64,
    pub involuntary: u64,
}

fn clk_tck() -> f64 {
    wirespeed_sys::process::clock_ticks() as f64
}

fn read(path: &str) -> Result<String> {
    fs::read_to_string(path).map_err(|source| Error::Io {
        what: format!("read {path}"),
        source,
    })
}

/// utime and stime (fields 14 and 15) of a /proc/PID/stat line. The command name may hold
/// spaces and parentheses, so fields are counted from the last ')'.
pub fn parse_stat_times(stat: &str) -> Option<(u64, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After ')': state is field 3, so utime (14) is index 11 and stime (15) index 12.
    Some((f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?))
}

/// Softirq ticks of the given CPUs from /proc/stat.
pub fn parse_softirq(stat: &str, cpus: &[usize]) -> u64 {
    stat.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let cpu: usize = it.next()?.strip_prefix("cpu")?.parse().ok()?;
            if !cpus.contains(&cpu) {
                return None;
            }
            // user nice system idle iowait irq softirq
            it.nth(6)?.parse::<u64>().ok()
        })
        .sum()
}

/// (voluntary, involuntary) from a /proc/PID/task/TID/status text.
pub fn parse_ctxt(status: &str) -> (u64, u64) {
    let mut v = (0, 0);
    for l in status.lines() {
        if let Some(x) = l.strip_prefix("voluntary_ctxt_switches:") {
            v.0 = x.trim().parse().unwrap_or(0);
        } else if let Some(x) = l.strip_prefix("nonvoluntary_ctxt_switches:") {
            v.1 = x.trim().parse().unwrap_or(0);
        }
    }
    v
}

impl ProcSnapshot {
    /// `receive_threads`: pids whose user+sys time is counted apart (a thread that has gone
    /// counts nothing).
    pub fn take(pid: i32, cpus: &[usize], receive_threads: &[u32]) -> Result<ProcSnapshot> {
        let stat = read(&format!("/proc/{pid}/stat"))?;
        let (user_ticks, sys_ticks) = parse_stat_times(&stat)
            .ok_or_else(|| Error::Invalid(format!("cannot parse /proc/{pid}/stat")))?;
        let softirq_ticks = parse_softirq(&read("/proc/stat")?, cpus);
        let receive_thread_ticks = receive_threads
            .iter()
            .filter_map(|t| parse_stat_times(&fs::read_to_string(format!("/proc/{t}/stat")).ok()?))
            .map(|(u, s)| u + s)
            .sum();
        let (mut voluntary, mut involuntary) = (0, 0);
        let dir = format!("/proc/{pid}/task");
        for e in fs::read_dir(&dir)
            .map_err(|source| Error::Io {
                what: format!("read {dir}"),
                source,
            })?
            .flatten()
        {
            // A thread may exit between the listing and the read; it simply stops counting.
            if let Ok(s) = fs::read_to_string(e.path().join("status")) {
                let (v, i) = parse_ctxt(&s);
                voluntary += v;
                involuntary += i;
            }
        }
        Ok(ProcSnapshot {
            user_ticks,
            sys_ticks,
            softirq_ticks,
            receive_thread_ticks,
            voluntary,
            involuntary,
        })
    }

    pub fn since(&self, earlier: &ProcSnapshot) -> ProcDelta {
        let hz = clk_tck();
        ProcDelta {
            user_s: self.user_ticks.saturating_sub(earlier.user_ticks) as f64 / hz,
            sys_s: self.sys_ticks.saturating_sub(earlier.sys_ticks) as f64 / hz,
            softirq_s: self.softirq_ticks.saturating_sub(earlier.softirq_ticks) as f64 / hz,
            receive_threads_s: self
                .receive_thread_ticks
                .saturating_sub(earlier.receive_thread_ticks) as f64
                / hz,
            voluntary: self.voluntary.saturating_sub(earlier.voluntary),
            involuntary: self.involuntary.saturating_sub(earlier.involuntary),
        }
    }
}

/// Whether the kernel accounts irq/softirq time apart from task time
/// (CONFIG_IRQ_TIME_ACCOUNTING). Unknown counts as no.
pub fn irq_time_accounting() -> bool {
    static CACHE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CACHE.get_or_init(|| {
        let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let cfg = std::process::Command::new("sh")
            .args([
                "-c",
                &format!(
                    "zcat /proc/config.gz 2>/dev/null || cat /boot/config-{} 2>/dev/null",
                    release.trim()
                ),
            ])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        cfg.lines()
            .any(|l| l.trim() == "CONFIG_IRQ_TIME_ACCOUNTING=y")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_formats() {
        let stat =
            "1234 (my (odd) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0 1 0 0";
        assert_eq!(parse_stat_times(stat), Some((250, 75)));
        let s = "cpu  10 0 10 100 0 0 7 0 0 0\ncpu0 1 0 1 50 0 0 3 0 0 0\ncpu1 1 0 1 50 0 0 4 0 0 0\nintr 5\n";
        assert_eq!(parse_softirq(s, &[1]), 4);
        assert_eq!(parse_softirq(s, &[0, 1]), 7);
        let st = "Name:\tx\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(parse_ctxt(st), (12, 3));
    }

    #[test]
    fn own_process_snapshot() {
        let pid = std::process::id() as i32;
        let a = ProcSnapshot::take(pid, &[0], &[]).unwrap();
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(100) {
            std::hint::black_box(0);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
        let d = ProcSnapshot::take(pid, &[0], &[]).unwrap().since(&a);
        assert!(d.user_s + d.sys_s > 0.0);
        assert!(d.voluntary >= 1);
        assert_eq!(d.receive_threads_s, 0.0);
    }

    /// A receive thread's CPU time is counted apart, by its pid; a pid that is gone counts 0.
    #[test]
    fn receive_threads_are_counted_by_pid() {
        let pid = std::process::id() as i32;
        let (to_main, from_spinner) = std::sync::mpsc::channel();
        let (to_spinner, from_main) = std::sync::mpsc::channel::<()>();
        let own_stat = || fs::read_to_string("/proc/thread-self/stat").unwrap();
        let spinner = std::thread::spawn(move || {
            let tid: u32 = own_stat().split(' ').next().unwrap().parse().unwrap();
            to_main.send(tid).unwrap();
            from_main.recv().unwrap();
            // Spin until this thread has used 100 ms of CPU by its own account.
            let t0 = parse_stat_times(&own_stat()).map(|(u, s)| u + s).unwrap();
            let want = (0.1 * clk_tck()) as u64;
            while parse_stat_times(&own_stat()).map(|(u, s)| u + s).unwrap() - t0 < want {
                for _ in 0..100_000 {
                    std::hint::black_box(0);
                }
            }
            to_main.send(0).unwrap();
            // Stay alive until the main thread has taken its second snapshot.
            let _ = from_main.recv();
        });
        let tid = from_spinner.recv().unwrap();
        let gone = u32::MAX;
        let a = ProcSnapshot::take(pid, &[0], &[tid, gone]).unwrap();
        to_spinner.send(()).unwrap();
        from_spinner.recv().unwrap();
        let d = ProcSnapshot::take(pid, &[0], &[tid, gone])
            .unwrap()
            .since(&a);
        drop(to_spinner);
        spinner.join().unwrap();
        // The spinner saw 100 ms in its own stat; user and system time are each rounded
        // down to a tick there, so a snapshot's difference may show one tick less.
        assert!(d.receive_threads_s >= 0.1 - 1.5 / clk_tck(), "{d:?}");
        // The process's own time includes its threads' (read a moment apart: a tick's slack).
        assert!(
            d.user_s + d.sys_s + 2.0 / clk_tck() >= d.receive_threads_s,
            "{d:?}"
        );
    }
}
