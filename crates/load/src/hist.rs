//! Latency statistics: an HDR histogram in nanoseconds and the percentiles the reports quote.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Highest latency a histogram can hold (60 s); longer samples are clamped to it.
pub const MAX_LATENCY_NS: u64 = 60_000_000_000;

/// A latency histogram with 3 significant digits from 1 ns to [`MAX_LATENCY_NS`].
#[derive(Clone, Debug)]
pub struct LatencyHist {
    inner: Histogram<u64>,
}

impl Default for LatencyHist {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHist {
    pub fn new() -> LatencyHist {
        // The bounds are constants that hdrhistogram accepts (low >= 1, high >= 2 * low,
        // sigfig <= 5), so construction cannot fail.
        let inner = Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3)
            .expect("constant histogram bounds are valid");
        LatencyHist { inner }
    }

    /// Records one sample; the histogram allocates nothing here.
    #[inline]
    pub fn record_ns(&mut self, ns: u64) {
        self.inner.saturating_record(ns.clamp(1, MAX_LATENCY_NS));
    }

    pub fn len(&self) -> u64 {
        self.inner.len()
    }

    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    pub fn reset(&mut self) {
        self.inner.reset();
    }

    /// Adds every sample of `other` (the per-thread histograms are merged at the end).
    pub fn merge(&mut self, other: &LatencyHist) {
        // Both histograms have identical bounds, so adding cannot go out of range.
        let _ = self.inner.add(&other.inner);
    }

    /// The value at `q` (0..=1) in nanoseconds; 0 when empty.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.inner.is_empty() {
            return 0;
        }
        self.inner.value_at_quantile(q)
    }

    pub fn mean_ns(&self) -> f64 {
        self.inner.mean()
    }

    pub fn max_ns(&self) -> u64 {
        self.inner.max()
    }

    pub fn percentiles(&self) -> Percentiles {
        let us = |q: f64| self.quantile_ns(q) as f64 / 1000.0;
        Percentiles {
            p50: us(0.50),
            p90: us(0.90),
            p99: us(0.99),
            p999: us(0.999),
            p9999: us(0.9999),
            max: self.max_ns() as f64 / 1000.0,
            mean: self.mean_ns() / 1000.0,
        }
    }
}

/// Latency percentiles in microseconds, keyed as in the JSON reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub p9999: f64,
    pub max: f64,
    pub mean: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs().max(1e-9)
    }

    #[test]
    fn uniform_distribution_percentiles() {
        // 1..=100_000 µs, each once: the q-quantile is q * 100_000 µs.
        let mut h = LatencyHist::new();
        for us in 1..=100_000u64 {
            h.record_ns(us * 1000);
        }
        let p = h.percentiles();
        assert!(close(p.p50, 50_000.0, 0.002), "{p:?}");
        assert!(close(p.p90, 90_000.0, 0.002), "{p:?}");
        assert!(close(p.p99, 99_000.0, 0.002), "{p:?}");
        assert!(close(p.p999, 99_900.0, 0.002), "{p:?}");
        assert!(close(p.p9999, 99_990.0, 0.002), "{p:?}");
        assert!(close(p.mean, 50_000.5, 0.002), "{p:?}");
    }

    #[test]
    fn bimodal_distribution_tail() {
        // 99% at 100 µs and 1% at 10 ms: p99 still sits in the fast mode, p99.9 in the slow one.
        let mut h = LatencyHist::new();
        for i in 0..100_000u64 {
            h.record_ns(if i % 100 == 0 { 10_000_000 } else { 100_000 });
        }
        let p = h.percentiles();
        assert!(close(p.p50, 100.0, 0.001), "{p:?}");
        assert!(close(p.p99, 100.0, 0.001), "{p:?}");
        assert!(close(p.p999, 10_000.0, 0.001), "{p:?}");
        assert!(close(p.max, 10_000.0, 0.001), "{p:?}");
    }

    #[test]
    fn exponential_distribution_quantiles() {
        // Deterministic inverse-CDF samples of Exp(mean = 1 ms): quantile q is -ln(1-q) ms.
        let mut h = LatencyHist::new();
        let n = 200_000u64;
        for i in 0..n {
            let u = (i as f64 + 0.5) / n as f64;
            h.record_ns((-(1.0 - u).ln() * 1e6) as u64);
        }
        for q in [0.5, 0.9, 0.99, 0.999] {
            let want_us = -(1.0f64 - q).ln() * 1000.0;
            let got_us = h.quantile_ns(q) as f64 / 1000.0;
            assert!(
                close(got_us, want_us, 0.01),
                "q={q} got {got_us} want {want_us}"
            );
        }
    }

    #[test]
    fn merge_adds_counts_and_clamps_outliers() {
        let mut a = LatencyHist::new();
        let mut b = LatencyHist::new();
        a.record_ns(0);
        b.record_ns(u64::MAX);
        a.merge(&b);
        assert_eq!(a.len(), 2);
        assert!(a.max_ns() >= MAX_LATENCY_NS / 2);
        assert_eq!(LatencyHist::new().percentiles(), Percentiles::default());
    }
}
