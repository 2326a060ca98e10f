//! The figures a load run reports, as JSON and as a twrk-style text summary.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::hist::Percentiles;
use crate::spec::{Errors, LoadResult};

/// One load run's figures. Field names are the JSON keys the issue fixes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Summary {
    /// `closed` (wrk-like) or `open` (fixed rate, latency from the intended send time).
    #[serde(rename = "loop")]
    pub loop_kind: String,
    pub connections: usize,
    pub threads: usize,
    /// The client's I/O engine: io_uring or epoll.
    pub engine: String,
    pub rps: f64,
    pub requests: u64,
    pub duration_s: f64,
    pub latency_us: Percentiles,
    pub errors: Errors,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub read_bytes_per_s: f64,
    pub client_cpu_pct: f64,
    pub client_cpu_us_per_req: f64,
    /// Echo only: payload throughput in both directions counted once, in Gb/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gbps: Option<f64>,
}

impl Summary {
    pub fn from_result(r: &LoadResult) -> Summary {
        let secs = r.duration.as_secs_f64().max(1e-9);
        Summary {
            loop_kind: if r.open_loop { "open" } else { "closed" }.into(),
            connections: r.connections,
            threads: r.threads,
            engine: r.engine.name().into(),
            rps: r.rps(),
            requests: r.requests,
            duration_s: secs,
            latency_us: r.hist.percentiles(),
            errors: r.errors,
            bytes_read: r.bytes_read,
            bytes_written: r.bytes_written,
            read_bytes_per_s: r.bytes_read as f64 / secs,
            client_cpu_pct: r.client_cpu_pct(),
            client_cpu_us_per_req: r.client_cpu_us_per_req(),
            gbps: None,
        }
    }

    /// The text summary; `unit` is "req" or "msg".
    pub fn text(&self, title: &str, unit: &str) -> String {
        let mut s = String::new();
        let l = &self.latency_us;
        let _ = writeln!(s, "{title}");
        let _ = writeln!(
            s,
            "  {} connections, {} threads ({}), {} loop{}",
            self.connections,
            self.threads,
            self.engine,
            self.loop_kind,
            if self.loop_kind == "open" {
                " (latency from intended send time)"
            } else {
                ""
            }
        );
        let _ = writeln!(
            s,
            "  Latency      p50       p90       p99     p99.9    p99.99       max"
        );
        let _ = writeln!(
            s,
            "           {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}",
            fmt_us(l.p50),
            fmt_us(l.p90),
            fmt_us(l.p99),
            fmt_us(l.p999),
            fmt_us(l.p9999),
            fmt_us(l.max)
        );
        let _ = writeln!(
            s,
            "  {} {unit}s in {:.2}s, {} read",
            self.requests,
            self.duration_s,
            fmt_bytes(self.bytes_read as f64)
        );
        let _ = writeln!(s, "  {unit}s/sec: {:>12.0}", self.rps);
        let _ = writeln!(
            s,
            "  Transfer/sec: {:>10}",
            fmt_bytes(self.read_bytes_per_s)
        );
        if let Some(g) = self.gbps {
            let _ = writeln!(s, "  Gb/s:         {g:>10.3}");
        }
        let e = &self.errors;
        if e.total() > 0 {
            let _ = writeln!(
                s,
                "  Errors: connect {}, read {}, write {}, timeout {}, non-2xx {}, parse {}",
                e.connect, e.read, e.write, e.timeout, e.non2xx, e.parse
            );
        }
        let _ = writeln!(
            s,
            "  Client CPU: {:.1}% of one CPU, {:.2} us/{unit}",
            self.client_cpu_pct, self.client_cpu_us_per_req
        );
        s
    }
}

pub fn fmt_us(us: f64) -> String {
    if us >= 1_000_000.0 {
        format!("{:.2}s", us / 1e6)
    } else if us >= 1000.0 {
        format!("{:.2}ms", us / 1e3)
    } else {
        format!("{us:.0}us")
    }
}

pub fn fmt_bytes(b: f64) -> String {
    if b >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2}GB", b / (1024.0 * 1024.0 * 1024.0))
    } else if b >= 1024.0 * 1024.0 {
        format!("{:.2}MB", b / (1024.0 * 1024.0))
    } else if b >= 1024.0 {
        format!("{:.2}KB", b / 1024.0)
    } else {
        format!("{b:.0}B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_the_issue_keys() {
        let r = LoadResult {
            hist: crate::hist::LatencyHist::new(),
            requests: 10,
            bytes_read: 100,
            bytes_written: 50,
            duration: std::time::Duration::from_secs(2),
            errors: Errors::default(),
            client_cpu: std::time::Duration::from_millis(500),
            open_loop: false,
            threads: 1,
            connections: 2,
            engine: crate::Engine::Epoll,
        };
        let s = Summary::from_result(&r);
        let v: serde_json::Value = serde_json::to_value(&s).unwrap();
        for k in ["rps", "requests", "duration_s", "client_cpu_pct"] {
            assert!(v.get(k).is_some(), "{k}");
        }
        for k in ["p50", "p90", "p99", "p999", "p9999"] {
            assert!(v["latency_us"].get(k).is_some(), "{k}");
        }
        for k in ["connect", "read", "write", "timeout", "non2xx"] {
            assert!(v["errors"].get(k).is_some(), "{k}");
        }
        assert_eq!(v["rps"], 5.0);
        assert_eq!(v["client_cpu_pct"], 25.0);
        assert!(s.text("t", "req").contains("reqs/sec"));
        assert_eq!(fmt_us(1500.0), "1.50ms");
    }
}
