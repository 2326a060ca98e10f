//! CPU lists, thread pinning and the process's own CPU time.

use std::time::Duration;

use wirespeed_sys::process;

use crate::{Error, Result};

/// Parses a CPU list such as `0`, `0-3` or `0,2-3`.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || Error::Invalid(format!("bad CPU list `{s}` (want e.g. 0,2-3)"));
        match part.split_once('-') {
            Some((a, b)) => {
                let a: usize = a.trim().parse().map_err(|_| bad())?;
                let b: usize = b.trim().parse().map_err(|_| bad())?;
                if a > b || b >= 1024 {
                    return Err(bad());
                }
                cpus.extend(a..=b);
            }
            None => {
                let c: usize = part.parse().map_err(|_| bad())?;
                if c >= 1024 {
                    return Err(bad());
                }
                cpus.push(c);
            }
        }
    }
    if cpus.is_empty() {
        return Err(Error::Invalid(format!("empty CPU list `{s}`")));
    }
    Ok(cpus)
}

/// Pins the calling thread to one CPU.
pub fn pin_current_thread(cpu: usize) -> Result<()> {
    process::set_affinity(&[cpu]).map_err(|source| Error::Io {
        what: format!("pin thread to CPU {cpu}"),
        source,
    })
}

/// The CPUs a process (0 = this one) may run on.
pub fn affinity_of(pid: i32) -> Result<Vec<usize>> {
    let id = u32::try_from(pid).map_err(|_| Error::Invalid(format!("bad pid {pid}")))?;
    process::affinity(id).map_err(|source| Error::Io {
        what: format!("sched_getaffinity({pid})"),
        source,
    })
}

/// User plus system CPU time this process has used so far (all threads).
pub fn self_cpu_time() -> Duration {
    process::rusage().cpu()
}

/// Busy and total jiffies of each CPU since boot, from /proc/stat (busy: all but idle and
/// iowait); two samples give each CPU's busy share over the interval. Empty if unreadable.
pub fn jiffies_per_cpu() -> Vec<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    s.lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .map(|l| {
            let v: Vec<u64> = l
                .split_whitespace()
                .skip(1)
                .filter_map(|x| x.parse().ok())
                .collect();
            let total: u64 = v.iter().sum();
            let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
            (total - idle, total)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0").unwrap(), vec![0]);
        assert_eq!(parse_cpu_list("0-2,5").unwrap(), vec![0, 1, 2, 5]);
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("x").is_err());
        assert!(parse_cpu_list("").is_err());
    }
}
