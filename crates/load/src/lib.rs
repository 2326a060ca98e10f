//! wirespeed-load: the HTTP and echo load generators, with their HDR statistics and reports.
//!
//! One protocol, three engines. Every connection's protocol state (which request bytes go
//! next, the response parser, the start time of each request in flight) is one sans-I/O
//! [`conn::Conn`], and every count goes into one [`conn::Tally`]; the engines differ only in
//! how they move bytes:
//! - `epoll` ([`Engine::Epoll`]): one thread per CPU, each with its own epoll loop over
//!   non-blocking kernel sockets;
//! - `uring` ([`Engine::Uring`]): the same threads with one io_uring each, every send,
//!   receive and connect an SQE;
//! - [`bypass`]: our own TCP/IP stack (`wirespeed_net::Stack::bypass`), connections as async
//!   tasks on the runtime's shards.
//!
//! No engine has unsafe code: the io_uring engine's ring, which must own the memory its
//! operations point into, is `wirespeed_sys::socket::SocketRing`.
//!
//! On the kernel engines nothing is shared between threads while measuring except one relaxed
//! counter store per wakeup (for the live line). Requests are pre-serialized once.
//!
//! Closed loop (default): each connection keeps `depth` requests in flight and latency runs
//! from the moment a request is queued. Open loop (`rate`, kernel engines): each connection
//! sends on a fixed schedule and latency runs from the *intended* send time, so a server stall
//! is charged to every request that should have been sent during it (coordinated omission
//! corrected, as wrk2 does).

//!
//! - [`http`] and [`echo`]: the two protocols' requests and response parsers;
//! - [`hist`]: HDR latency histograms and percentiles;
//! - [`report`]: the summary each run prints and writes as JSON;
//! - [`stats`]: medians and min/median/max ratios over rounds;
//! - [`cpu`]: CPU lists, pinning and jiffies.

#![deny(unsafe_code)]

pub mod bypass;
mod conn;
pub mod cpu;
pub mod echo;
mod epoll;
pub mod hist;
pub mod http;
pub mod report;
mod run;
mod spec;
pub mod stats;
mod uring;
mod worker;

pub use conn::{Outcome, ParseError, Progress, ResponseParser};
pub use run::run;
pub use spec::{Engine, Errors, LoadResult, LoadSpec, PHASE_DONE, PHASE_MEASURING, PHASE_WARMUP};

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
