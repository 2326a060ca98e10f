//! wirespeed-probe: CPU, syscall, context-switch and packet-locality probes on a server process.
//!
//! Probes on a running server process, over a measured interval:
//!
//! - CPU time: the process's user+sys from `/proc/PID/stat` plus softirq time on its CPUs
//!   from `/proc/stat` (the CPUs of its affinity mask unless given), plus the user+sys time of
//!   the threads that do its receive work where that is threaded (NAPI threads);
//! - context switches: voluntary and involuntary, summed over `/proc/PID/task/*/status`;
//! - syscalls by name and packet locality: BPF (see `bpf/probe.bpf.c` for the definitions).
//!
//! [`measure`] snapshots everything, runs the caller's closure (a sleep, or a load run that
//! returns how many requests it completed), snapshots again and reports the differences.

#![deny(unsafe_code)]

pub mod bpf;
pub mod procfs;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use wirespeed_load::Result;

#[derive(Clone, Debug, Default)]
pub struct ProbeOpts {
    pub pid: i32,
    /// CPUs whose softirq time is charged to the process; default: its affinity mask.
    pub cpus: Option<Vec<usize>>,
    /// Load the BPF probes (syscalls, locality). Without them only /proc figures are reported.
    pub bpf: bool,
    /// Threads that do the process's receive work (its interfaces' NAPI threads, when NAPI
    /// is threaded): their CPU time is the server's wherever they run, as a NIC host pays
    /// its own interrupts and softirqs.
    pub receive_threads: Vec<u32>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CpuFigures {
    pub user_s: f64,
    pub sys_s: f64,
    /// Softirq time on `softirq_cpus` from /proc/stat.
    pub softirq_s: f64,
    pub softirq_cpus: Vec<usize>,
    /// The part of `softirq_s` added to the total. Without CONFIG_IRQ_TIME_ACCOUNTING a
    /// softirq tick that interrupts the server is already in its sys time, so only the share
    /// of softirq time that fell outside the server's own run time is added (estimated as
    /// softirq_s times the CPUs' idle-of-server share).
    pub softirq_charged_s: f64,
    pub irq_time_accounting: bool,
    /// User + sys time of `ProbeOpts::receive_threads`.
    #[serde(default)]
    pub receive_threads_s: f64,
    /// user + sys + softirq_charged + receive_threads
    pub total_s: f64,
    /// total_s / duration_s, in percent of one CPU
    pub pct: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub us_per_req: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CtxFigures {
    pub voluntary: u64,
    pub involuntary: u64,
    pub voluntary_per_s: f64,
    pub involuntary_per_s: f64,
    pub per_s: f64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SyscallFigures {
    pub total: u64,
    pub by_name: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_req: Option<f64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub per_req_by_name: BTreeMap<String, f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LocalityFigures {
    pub rx_local: u64,
    pub rx_remote: u64,
    pub tx_local: u64,
    pub tx_remote: u64,
    pub rx_pct: Option<f64>,
    pub tx_pct: Option<f64>,
    /// Local share of all rx and tx samples together.
    pub pct: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ProbeReport {
    pub pid: i32,
    pub duration_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
    pub cpu: CpuFigures,
    pub ctx_switches: CtxFigures,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub syscalls: Option<SyscallFigures>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locality: Option<LocalityFigures>,
    /// Why the BPF figures are missing, when they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bpf_error: Option<String>,
}

fn pct(local: u64, remote: u64) -> Option<f64> {
    let n = local + remote;
    (n > 0).then(|| 100.0 * local as f64 / n as f64)
}

/// Probes `opts.pid` while `during` runs; `during` returns the requests served, if known.
pub fn measure(opts: &ProbeOpts, during: impl FnOnce() -> Option<u64>) -> Result<ProbeReport> {
    let mut p = Probe::prepare(opts)?;
    p.begin()?;
    let requests = during();
    let mut r = p.end()?;
    r.set_requests(requests);
    Ok(r)
}

/// A probe in three steps, for callers whose measured interval starts and ends elsewhere
/// (the showdown): [`Probe::prepare`] loads the BPF programs (slow), [`Probe::begin`] and
/// [`Probe::end`] only take snapshots (fast), so the interval is exact.
pub struct Probe {
    pid: i32,
    cpus: Vec<usize>,
    receive_threads: Vec<u32>,
    session: Option<Result<bpf::Session>>,
    start: Option<(procfs::ProcSnapshot, Option<bpf::BpfCounts>, Instant)>,
}

impl Probe {
    pub fn prepare(opts: &ProbeOpts) -> Result<Probe> {
        let cpus = match &opts.cpus {
            Some(c) => c.clone(),
            None => wirespeed_load::cpu::affinity_of(opts.pid)?,
        };
        let session = if opts.bpf {
            Some(bpf::Session::start(opts.pid))
        } else {
            None
        };
        Ok(Probe {
            pid: opts.pid,
            cpus,
            receive_threads: opts.receive_threads.clone(),
            session,
            start: None,
        })
    }

    pub fn begin(&mut self) -> Result<()> {
        let b0 = match &self.session {
            Some(Ok(s)) => Some(s.counts()?),
            _ => None,
        };
        let p0 = procfs::ProcSnapshot::take(self.pid, &self.cpus, &self.receive_threads)?;
        self.start = Some((p0, b0, Instant::now()));
        Ok(())
    }

    pub fn end(self) -> Result<ProbeReport> {
        let Some((p0, b0, t0)) = self.start else {
            return Err(wirespeed_load::Error::Invalid(
                "probe ended before it began".into(),
            ));
        };
        let elapsed = t0.elapsed();
        let p1 = procfs::ProcSnapshot::take(self.pid, &self.cpus, &self.receive_threads)?;
        let mut report = report_from(self.pid, &self.cpus, &p0, &p1, elapsed, None);
        match self.session {
            Some(Ok(s)) => {
                let b = s.counts()?.since(b0.as_ref());
                let total = b.syscalls.values().sum();
                report.syscalls = Some(SyscallFigures {
                    total,
                    by_name: b.syscalls,
                    ..Default::default()
                });
                if let Some([rl, rr, tl, tr]) = b.locality {
                    report.locality = Some(LocalityFigures {
                        rx_local: rl,
                        rx_remote: rr,
                        tx_local: tl,
                        tx_remote: tr,
                        rx_pct: pct(rl, rr),
                        tx_pct: pct(tl, tr),
                        pct: pct(rl + tl, rr + tr),
                    });
                }
                report.bpf_error = b.locality_error;
            }
            Some(Err(e)) => report.bpf_error = Some(e.to_string()),
            None => {}
        }
        Ok(report)
    }
}

fn report_from(
    pid: i32,
    cpus: &[usize],
    p0: &procfs::ProcSnapshot,
    p1: &procfs::ProcSnapshot,
    elapsed: Duration,
    requests: Option<u64>,
) -> ProbeReport {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let d = p1.since(p0);
    let irq_time_accounting = procfs::irq_time_accounting();
    let softirq_charged_s = if irq_time_accounting {
        d.softirq_s
    } else {
        let own_share = ((d.user_s + d.sys_s) / (secs * cpus.len().max(1) as f64)).clamp(0.0, 1.0);
        d.softirq_s * (1.0 - own_share)
    };
    let total = d.user_s + d.sys_s + softirq_charged_s + d.receive_threads_s;
    let vol = d.voluntary;
    let invol = d.involuntary;
    ProbeReport {
        pid,
        duration_s: secs,
        requests,
        cpu: CpuFigures {
            user_s: d.user_s,
            sys_s: d.sys_s,
            softirq_s: d.softirq_s,
            softirq_cpus: cpus.to_vec(),
            softirq_charged_s,
            irq_time_accounting,
            receive_threads_s: d.receive_threads_s,
            total_s: total,
            pct: 100.0 * total / secs,
            us_per_req: requests.filter(|&r| r > 0).map(|r| total * 1e6 / r as f64),
        },
        ctx_switches: CtxFigures {
            voluntary: vol,
            involuntary: invol,
            voluntary_per_s: vol as f64 / secs,
            involuntary_per_s: invol as f64 / secs,
            per_s: (vol + invol) as f64 / secs,
        },
        syscalls: None,
        locality: None,
        bpf_error: None,
    }
}

impl ProbeReport {
    /// Sets the requests served in the interval and the per-request figures from them.
    pub fn set_requests(&mut self, requests: Option<u64>) {
        self.requests = requests;
        let per = |n: f64| requests.filter(|&r| r > 0).map(|r| n / r as f64);
        self.cpu.us_per_req = per(self.cpu.total_s * 1e6);
        if let Some(sc) = &mut self.syscalls {
            sc.per_req = per(sc.total as f64);
            sc.per_req_by_name = sc
                .by_name
                .iter()
                .filter_map(|(k, &v)| Some((k.clone(), per(v as f64)?)))
                .collect();
        }
    }

    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(s, "probe pid {} for {:.2}s", self.pid, self.duration_s);
        let c = &self.cpu;
        let _ = writeln!(
            s,
            "  CPU: user {:.3}s sys {:.3}s softirq {:.3}s on CPUs {:?} ({:.3}s charged) = {:.1}% of one CPU",
            c.user_s, c.sys_s, c.softirq_s, c.softirq_cpus, c.softirq_charged_s, c.pct
        );
        if c.receive_threads_s > 0.0 {
            let _ = writeln!(
                s,
                "  of which receive (NAPI) threads: {:.3}s",
                c.receive_threads_s
            );
        }
        if let (Some(r), Some(us)) = (self.requests, c.us_per_req) {
            let _ = writeln!(s, "  {r} requests: {us:.2} CPU-us/request");
        }
        let x = &self.ctx_switches;
        let _ = writeln!(
            s,
            "  context switches/s: {:.0} voluntary, {:.0} involuntary",
            x.voluntary_per_s, x.involuntary_per_s
        );
        if let Some(sc) = &self.syscalls {
            let _ = write!(s, "  syscalls: {}", sc.total);
            if let Some(p) = sc.per_req {
                let _ = write!(s, " ({p:.2}/request)");
            }
            let _ = writeln!(s);
            let mut top: Vec<_> = sc.by_name.iter().collect();
            top.sort_by(|a, b| b.1.cmp(a.1));
            for (name, n) in top.into_iter().take(10) {
                let _ = writeln!(s, "    {name:<20} {n:>12}");
            }
        }
        if let Some(l) = &self.locality {
            let f = |p: Option<f64>| p.map_or("n/a".to_string(), |p| format!("{p:.1}%"));
            let _ = writeln!(
                s,
                "  locality: rx {} ({} of {}), tx {} ({} of {}), all {}",
                f(l.rx_pct),
                l.rx_local,
                l.rx_local + l.rx_remote,
                f(l.tx_pct),
                l.tx_local,
                l.tx_local + l.tx_remote,
                f(l.pct)
            );
        }
        if let Some(e) = &self.bpf_error {
            let _ = writeln!(s, "  BPF probes unavailable: {e}");
        }
        s
    }
}
