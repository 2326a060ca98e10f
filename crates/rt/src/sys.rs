//! The runtime's CPU placement: pinning, the allowed CPUs and CPU lists, over
//! `wirespeed-sys`'s affinity calls.

use std::io;

/// Pins the calling thread to one CPU.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    wirespeed_sys::process::set_affinity(&[cpu])
}

/// The CPUs this process may run on (its affinity mask), in ascending order.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    wirespeed_sys::process::affinity(0)
}

/// The CPU the calling thread is running on now.
pub fn current_cpu() -> usize {
    wirespeed_sys::process::current_cpu()
}

/// Parses a CPU list such as `0-3,6,8-9`.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let parse = |x: &str| {
            x.trim()
                .parse::<usize>()
                .map_err(|_| format!("bad CPU number `{x}` in `{s}`"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (parse(a)?, parse(b)?);
                if a > b {
                    return Err(format!("bad CPU range `{part}`: start is after end"));
                }
                out.extend(a..=b);
            }
            None => out.push(parse(part)?),
        }
    }
    if out.is_empty() {
        return Err("empty CPU list".into());
    }
    let mut seen = out.clone();
    seen.sort_unstable();
    seen.dedup();
    if seen.len() != out.len() {
        return Err(format!("CPU list `{s}` names a CPU twice"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-2,5").unwrap(), vec![0, 1, 2, 5]);
        assert_eq!(parse_cpu_list("1").unwrap(), vec![1]);
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("1,1").is_err());
        assert!(parse_cpu_list("x").is_err());
        assert!(parse_cpu_list("").is_err());
    }
}
