//! The Prometheus text exposition format, version 0.0.4: one `# HELP` and one `# TYPE` line per
//! metric family, then its samples, every sample of a family together. Label values escape
//! `\`, `"` and newline; HELP text escapes `\` and newline.

use std::fmt::Write;

/// The `Content-Type` of the format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A metric family's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// A sample's value: counts stay exact integers, measurements are floats.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    Int(u64),
    Float(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Value {
        Value::Int(v)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Float(v)
    }
}

fn write_float(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        let _ = write!(out, "{v}");
    }
}

/// Appends `v` escaped as a label value.
fn escape_label(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Appends `v` escaped as HELP text.
fn escape_help(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Cumulative-bucket histogram over fixed upper bounds, as Prometheus reads one. Kept by its
/// owner and written out at scrape time; [`merge`](Histogram::merge) sums histograms of the
/// same bounds (per CPU or per shard).
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Observations per bucket (not cumulative); the last one is above every bound.
    counts: Vec<u64>,
    sum: f64,
}

impl Histogram {
    /// `bounds` ascending; the `+Inf` bucket is implied.
    pub fn new(bounds: &'static [f64]) -> Histogram {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]));
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
        }
    }

    pub fn observe(&mut self, v: f64) {
        let i = self.bounds.partition_point(|b| *b < v);
        self.counts[i] += 1;
        self.sum += v;
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// Adds `o`'s observations. Histograms with other bounds cannot be summed; `o` must have
    /// the same.
    pub fn merge(&mut self, o: &Histogram) {
        assert_eq!(self.bounds, o.bounds, "histograms of different buckets");
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.sum += o.sum;
    }
}

/// Writes one exposition. Call [`family`](Writer::family) before each family's samples.
#[derive(Default)]
pub struct Writer {
    out: String,
    family: String,
}

impl Writer {
    pub fn new() -> Writer {
        Writer::default()
    }

    /// Starts the family `name`: its HELP and TYPE lines.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        debug_assert!(valid_name(name), "bad metric name {name}");
        let _ = write!(self.out, "# HELP {name} ");
        escape_help(&mut self.out, help);
        let _ = writeln!(self.out, "\n# TYPE {name} {}", kind.name());
        self.family.clear();
        self.family.push_str(name);
    }

    fn series(&mut self, suffix: &str, labels: &[(&str, &str)], extra: Option<(&str, &str)>) {
        self.out.push_str(&self.family);
        self.out.push_str(suffix);
        if !labels.is_empty() || extra.is_some() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().chain(extra.iter()).enumerate() {
                debug_assert!(valid_label(k), "bad label name {k}");
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(k);
                self.out.push_str("=\"");
                escape_label(&mut self.out, v);
                self.out.push('"');
            }
            self.out.push('}');
        }
        self.out.push(' ');
    }

    /// One sample of the current family (a counter or a gauge).
    pub fn sample(&mut self, labels: &[(&str, &str)], value: impl Into<Value>) {
        self.series("", labels, None);
        self.value(value.into());
    }

    fn value(&mut self, v: Value) {
        match v {
            Value::Int(n) => {
                let _ = write!(self.out, "{n}");
            }
            Value::Float(f) => write_float(&mut self.out, f),
        }
        self.out.push('\n');
    }

    /// The current family's histogram for `labels`: cumulative `_bucket` lines ending in
    /// `le="+Inf"`, then `_sum` and `_count`.
    pub fn histogram(&mut self, labels: &[(&str, &str)], h: &Histogram) {
        let mut cumulative = 0;
        let mut le = String::new();
        for (i, n) in h.counts.iter().enumerate() {
            cumulative += n;
            le.clear();
            write_float(&mut le, h.bounds.get(i).copied().unwrap_or(f64::INFINITY));
            self.series("_bucket", labels, Some(("le", &le)));
            self.value(Value::Int(cumulative));
        }
        self.series("_sum", labels, None);
        self.value(Value::Float(h.sum));
        self.series("_count", labels, None);
        self.value(Value::Int(cumulative));
    }

    pub fn finish(self) -> String {
        self.out
    }
}

fn valid_name(n: &str) -> bool {
    let mut chars = n.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn valid_label(n: &str) -> bool {
    valid_name(n) && !n.contains(':') && !n.starts_with("__")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn family_and_samples() {
        let mut w = Writer::new();
        w.family("x_packets_total", Kind::Counter, "Packets.");
        w.sample(&[("port", "eth0"), ("reason", "forwarded")], 7u64);
        w.sample(&[], 0u64);
        w.family("x_up", Kind::Gauge, "Up.");
        w.sample(&[("real", "198.18.0.1:80")], 1u64);
        assert_eq!(
            w.finish(),
            "# HELP x_packets_total Packets.\n# TYPE x_packets_total counter\n\
             x_packets_total{port=\"eth0\",reason=\"forwarded\"} 7\nx_packets_total 0\n\
             # HELP x_up Up.\n# TYPE x_up gauge\nx_up{real=\"198.18.0.1:80\"} 1\n"
        );
    }

    #[test]
    fn labels_and_help_are_escaped() {
        let mut w = Writer::new();
        w.family("x", Kind::Gauge, "a \\ b\nc \"q\"");
        w.sample(&[("l", "back\\slash \"quoted\"\nnext")], 1u64);
        assert_eq!(
            w.finish(),
            "# HELP x a \\\\ b\\nc \"q\"\n# TYPE x gauge\n\
             x{l=\"back\\\\slash \\\"quoted\\\"\\nnext\"} 1\n"
        );
    }

    #[test]
    fn floats_and_infinities() {
        let mut w = Writer::new();
        w.family("x_seconds", Kind::Gauge, "t");
        w.sample(&[], 0.25);
        w.sample(&[], f64::INFINITY);
        w.sample(&[], f64::NEG_INFINITY);
        w.sample(&[], f64::NAN);
        let text = w.finish();
        let values: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.rsplit(' ').next().unwrap())
            .collect();
        assert_eq!(values, ["0.25", "+Inf", "-Inf", "NaN"]);
    }

    const BOUNDS: &[f64] = &[0.001, 0.01, 0.1];

    #[test]
    fn histogram_lines_are_cumulative() {
        let mut h = Histogram::new(BOUNDS);
        for v in [0.0005, 0.001, 0.005, 0.05, 3.0] {
            h.observe(v);
        }
        let mut w = Writer::new();
        w.family("r_seconds", Kind::Histogram, "Responses.");
        w.histogram(&[("port", "a")], &h);
        assert_eq!(
            w.finish(),
            "# HELP r_seconds Responses.\n# TYPE r_seconds histogram\n\
             r_seconds_bucket{port=\"a\",le=\"0.001\"} 2\n\
             r_seconds_bucket{port=\"a\",le=\"0.01\"} 3\n\
             r_seconds_bucket{port=\"a\",le=\"0.1\"} 4\n\
             r_seconds_bucket{port=\"a\",le=\"+Inf\"} 5\n\
             r_seconds_sum{port=\"a\"} 3.0565\n\
             r_seconds_count{port=\"a\"} 5\n"
        );
    }

    #[test]
    fn histograms_merge_across_cpus() {
        let mut a = Histogram::new(BOUNDS);
        let mut b = Histogram::new(BOUNDS);
        a.observe(0.002);
        b.observe(0.002);
        b.observe(1.0);
        a.merge(&b);
        assert_eq!(a.count(), 3);
        assert_eq!(a.sum(), 1.004);
        let mut w = Writer::new();
        w.family("h", Kind::Histogram, "h");
        w.histogram(&[], &a);
        assert!(w
            .finish()
            .contains("h_bucket{le=\"0.01\"} 2\nh_bucket{le=\"0.1\"} 2\n"));
    }

    #[test]
    fn names_are_checked() {
        assert!(valid_name("wirespeed_fp_packets_total"));
        assert!(!valid_name("9lives"));
        assert!(!valid_name("a-b"));
        assert!(valid_label("port"));
        assert!(!valid_label("__name__"));
    }
}
