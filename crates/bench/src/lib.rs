//! wirespeed-bench: the instrument panel's measuring side.
//!
//! - [`load`]: the load engine (closed and open loop; epoll, io_uring and bypass-stack
//!   engines) shared by [`http`] and [`echo`];
//! - [`hist`]: HDR latency histograms and percentiles;
//! - [`report`]: the summary each run prints and writes as JSON;
//! - [`probe`]: CPU, syscall, context-switch and packet-locality probes on a server PID;
//! - [`xdpgen`]: the in-kernel packet generator (BPF_PROG_RUN live frames) and counting sink;
//! - [`lb`]: lb_bench's measurement of an L4 load balancer against nftables on the `lb` lab.

#![deny(unsafe_code)]

pub mod cpu;
pub mod echo;
pub mod hist;
pub mod http;
pub mod lb;
pub mod load;
pub mod probe;
pub mod report;
pub mod showdown;
pub mod showdown_chart;
pub mod showdown_seed;
pub mod xdpgen;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Invalid(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

/// Parses `5s`, `500ms`, `250us` (or `µs`), `2m`, `1h` or a bare number of seconds (`1.5`):
/// the one duration syntax of every command line flag.
pub fn parse_duration(s: &str) -> Result<std::time::Duration> {
    let s = s.trim();
    let bad = || Error::Invalid(format!("bad duration `{s}` (want e.g. 5s, 500ms)"));
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix("us").or_else(|| s.strip_suffix("µs")) {
        (n, 1e-6)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    if !(v >= 0.0 && v.is_finite() && v * scale <= 1e9) {
        return Err(bad());
    }
    Ok(std::time::Duration::from_secs_f64(v * scale))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn durations() {
        assert_eq!(super::parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(
            super::parse_duration("500ms").unwrap(),
            Duration::from_millis(500)
        );
        assert_eq!(super::parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(
            super::parse_duration("1m").unwrap(),
            Duration::from_secs(60)
        );
        assert_eq!(
            super::parse_duration("1h").unwrap(),
            Duration::from_secs(3600)
        );
        assert_eq!(
            super::parse_duration("250µs").unwrap(),
            Duration::from_micros(250)
        );
        assert!(super::parse_duration("-1s").is_err());
        assert!(super::parse_duration("fast").is_err());
    }
}
