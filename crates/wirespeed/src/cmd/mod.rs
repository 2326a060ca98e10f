pub mod bench;
pub mod bypass_client;
pub mod fp;
pub mod lab;
pub mod probe;
pub mod serve;
pub mod showdown;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use wirespeed_net::user::DropCause;

/// Says on stderr why the bypass stack drops traffic, one line per cause for the whole process
/// however many shards see it (`who`: "serve", "bench").
pub fn tell_drop_cause_once(who: &str, cause: DropCause, iface: &str) {
    static TOLD: AtomicU32 = AtomicU32::new(0);
    if TOLD.fetch_or(cause.bit(), Ordering::Relaxed) & cause.bit() == 0 {
        eprintln!("wirespeed {who}: {}", cause.explain(iface));
    }
}

/// Parses `500ms`, `5s`, `2m`, `1h`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (try 500ms, 5s, 2m)"))?;
    let secs = match unit {
        "" | "s" => v,
        "ms" => v / 1e3,
        "us" | "µs" => v / 1e6,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        _ => {
            return Err(format!(
                "unknown unit `{unit}` in `{s}` (use us, ms, s, m or h)"
            ))
        }
    };
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(format!("`{s}` is out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}
