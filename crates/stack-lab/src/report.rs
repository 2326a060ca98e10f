//! Verdict lines, the summary, and the JSON record of a run.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::cases::{Case, Class, Script};
use crate::compare::{Outcome, Verdict};
use crate::known::{self, Kind};

/// One case: what both sides sent, the differences, the verdict.
#[derive(Debug, Clone)]
pub struct CaseResult {
    pub case: Case,
    pub ours: Outcome,
    pub linux: Outcome,
    /// Every difference found.
    pub diffs: Vec<String>,
    /// What no row of the table explains (after the rows that explain parts).
    pub unexplained: Vec<String>,
    pub verdict: Verdict,
}

impl CaseResult {
    fn verdict_text(&self) -> String {
        match self.verdict.rows() {
            [] => self.verdict.word().to_string(),
            ids => format!("{} {}", self.verdict.word(), ids.join("+")),
        }
    }

    /// `[  12/300] tcp-state    same   Data in LastAck ...`, and for an unexplained
    /// difference the differences below it.
    pub fn progress_line(&self, total: usize) -> String {
        let mut s = format!(
            "[{:>4}/{total}] {:<11} {:<34} {}",
            self.case.index + 1,
            self.case.class.name(),
            self.verdict_text(),
            self.case.what
        );
        if self.verdict == Verdict::Unexplained {
            for d in &self.unexplained {
                s.push_str(&format!("\n        {d}"));
            }
        }
        s
    }

    fn json(&self) -> Value {
        let flow = match &self.case.script {
            Script::Flow(f) => serde_json::to_value(f).unwrap_or(Value::Null),
            Script::Frames(_) => Value::Null,
        };
        json!({
            "index": self.case.index,
            "class": self.case.class.name(),
            "what": self.case.what,
            "flow": flow,
            "peer": match self.case.peer6 {
                Some(a) => std::net::Ipv6Addr::from(a).to_string(),
                None => std::net::Ipv4Addr::from(self.case.peer_ip).to_string(),
            },
            "sport": self.case.sport,
            "verdict": self.verdict.word(),
            "rows": self.verdict.rows(),
            "diffs": self.diffs,
            "unexplained": self.unexplained,
            "ours": outcome_json(&self.ours),
            "linux": outcome_json(&self.linux),
        })
    }
}

fn outcome_json(o: &Outcome) -> Value {
    json!({
        "replies": o.replies.iter().map(|r| r.line()).collect::<Vec<_>>(),
        "raw": o.raw,
        "setup": o.setup.iter().map(|r| r.line()).collect::<Vec<_>>(),
        "setup_error": o.setup_error,
        "resolutions": o.resolutions,
        "sent": o.sent,
    })
}

/// A whole run.
#[derive(Debug)]
pub struct Report {
    pub seed: u64,
    pub window: Duration,
    pub results: Vec<CaseResult>,
    pub planned: usize,
    /// Every planned case ran (false: the time bound cut the run short).
    pub complete: bool,
    /// Frames that belonged to no case, per side (ours, linux).
    pub strays: (usize, usize),
    /// The first stray frames of each side (ours, linux), normalized.
    pub stray_sample: (Vec<String>, Vec<String>),
    pub linux_settings: Vec<(String, String)>,
    pub serve_log: String,
    pub elapsed: Duration,
}

#[derive(Default)]
struct Tally {
    cases: usize,
    same: usize,
    accepted: usize,
    gap: usize,
    unexplained: usize,
}

impl Report {
    /// Cases whose differences no row of the table explains: the run fails on these.
    pub fn unexplained(&self) -> Vec<&CaseResult> {
        self.results
            .iter()
            .filter(|r| r.verdict == Verdict::Unexplained)
            .collect()
    }

    fn by_class(&self) -> BTreeMap<Class, Tally> {
        let mut m: BTreeMap<Class, Tally> = BTreeMap::new();
        for r in &self.results {
            let t = m.entry(r.case.class).or_default();
            t.cases += 1;
            match r.verdict {
                Verdict::Same => t.same += 1,
                Verdict::Accepted(_) => t.accepted += 1,
                Verdict::KnownGap(_) => t.gap += 1,
                Verdict::Unexplained => t.unexplained += 1,
            }
        }
        m
    }

    /// Row id -> (cases it explained, the first of them).
    fn by_row(&self) -> BTreeMap<&'static str, (usize, usize)> {
        let mut m = BTreeMap::new();
        for r in &self.results {
            for id in r.verdict.rows() {
                let e = m.entry(*id).or_insert((0, r.case.index));
                e.0 += 1;
            }
        }
        m
    }

    /// The human summary (stderr).
    pub fn summary(&self) -> String {
        let mut s = format!(
            "conformance: seed {} ({} of {} cases in {:.1} s{}), window {} ms\n",
            self.seed,
            self.results.len(),
            self.planned,
            self.elapsed.as_secs_f64(),
            if self.complete {
                ""
            } else {
                ", cut short by --max-seconds"
            },
            self.window.as_millis()
        );
        s.push_str("  class        cases  same  accepted  known-gap  DIFFERS\n");
        for (c, t) in self.by_class() {
            s.push_str(&format!(
                "  {:<12} {:>5} {:>5} {:>9} {:>10} {:>8}\n",
                c.name(),
                t.cases,
                t.same,
                t.accepted,
                t.gap,
                t.unexplained
            ));
        }
        for (id, (n, first)) in self.by_row() {
            let row = known::TABLE.iter().find(|k| k.id == id);
            let kind = match row.map(|k| k.kind) {
                Some(Kind::Accepted) => "accepted",
                _ => known::GAP,
            };
            s.push_str(&format!(
                "  {id}: {n} case(s), e.g. #{}; {kind}\n",
                first + 1
            ));
        }
        s.push_str(&format!(
            "  frames outside any case: ours {}, linux {}\n",
            self.strays.0, self.strays.1
        ));
        let bad = self.unexplained();
        if bad.is_empty() {
            s.push_str("conformance: no unexplained difference\n");
        } else {
            let ids: Vec<String> = bad
                .iter()
                .map(|r| format!("#{}", r.case.index + 1))
                .collect();
            s.push_str(&format!(
                "conformance: {} unexplained difference(s): {} (repeat with --seed {})\n",
                bad.len(),
                ids.join(" "),
                self.seed
            ));
        }
        s
    }

    /// The whole record.
    pub fn json(&self) -> Value {
        let classes: BTreeMap<&str, Value> = self
            .by_class()
            .into_iter()
            .map(|(c, t)| {
                (c.name(), json!({"cases": t.cases, "same": t.same, "accepted": t.accepted, "known_gap": t.gap, "unexplained": t.unexplained}))
            })
            .collect();
        let rows: Vec<Value> = known::TABLE
            .iter()
            .map(|k| {
                let (n, first) = self.by_row().get(k.id).copied().unwrap_or((0, 0));
                json!({"id": k.id, "kind": if k.kind == Kind::Accepted { "accepted" } else { known::GAP }, "reason": k.reason, "cases": n, "example": (n > 0).then_some(first)})
            })
            .collect();
        json!({
            "seed": self.seed,
            "window_ms": self.window.as_millis() as u64,
            "planned": self.planned,
            "complete": self.complete,
            "elapsed_s": self.elapsed.as_secs_f64(),
            "unexplained": self.unexplained().len(),
            "classes": classes,
            "rows": rows,
            "strays": {"ours": self.strays.0, "linux": self.strays.1, "ours_sample": self.stray_sample.0, "linux_sample": self.stray_sample.1},
            "linux_settings": self.linux_settings.iter().cloned().collect::<BTreeMap<_, _>>(),
            "serve_log": self.serve_log,
            "cases": self.results.iter().map(|r| r.json()).collect::<Vec<_>>(),
        })
    }
}
