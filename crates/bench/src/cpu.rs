//! CPU lists, thread pinning and the process's own CPU time.

use std::time::Duration;

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
    // SAFETY: cpu_set_t is plain data; CPU_SET stays in bounds because cpu < 1024 is checked
    // by parse_cpu_list and CPU_SETSIZE is 1024.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu % libc::CPU_SETSIZE as usize, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        return Err(Error::Io {
            what: format!("pin thread to CPU {cpu}"),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// The CPUs a process (0 = this one) may run on.
pub fn affinity_of(pid: i32) -> Result<Vec<usize>> {
    // SAFETY: sched_getaffinity writes at most size_of::<cpu_set_t>() bytes into `set`.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(Error::Io {
                what: format!("sched_getaffinity({pid})"),
                source: std::io::Error::last_os_error(),
            });
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect())
    }
}

/// User plus system CPU time this process has used so far (all threads).
pub fn self_cpu_time() -> Duration {
    // SAFETY: getrusage fills the zeroed struct; RUSAGE_SELF always succeeds.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
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
