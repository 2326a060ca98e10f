//! What `fp run --metrics` exports: the same numbers `fp status --json` shows (per-port
//! packets by reason, summed over CPUs from the programs' per-CPU maps at scrape time, and
//! across program swaps), plus what the status keeps only a window of: every response as a
//! histogram and every kernel event by kind. docs/METRICS.md lists the series.

use std::collections::BTreeMap;
use std::time::Duration;

use wirespeed_metrics::{Histogram, Kind, Writer};

use crate::datapath::stats::Reason;
use crate::status::Status;

/// Response-time buckets (seconds): from a map write (tens of µs) to a program swap with a
/// verifier run or a slow ruleset read (hundreds of ms).
pub const RESPONSE_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// What the daemon counts for the metrics alone (the rest comes from its [`Status`]).
pub struct FpMetrics {
    responses: Histogram,
    events: BTreeMap<&'static str, u64>,
}

impl Default for FpMetrics {
    fn default() -> FpMetrics {
        FpMetrics {
            responses: Histogram::new(RESPONSE_BUCKETS),
            events: BTreeMap::new(),
        }
    }
}

impl FpMetrics {
    /// Kernel events as the watchers decoded them, one entry per event.
    pub fn events(&mut self, kinds: &[&'static str]) {
        for k in kinds {
            *self.events.entry(k).or_default() += 1;
        }
    }

    /// One response: event in -> data path updated.
    pub fn responded(&mut self, took: Duration) {
        self.responses.observe(took.as_secs_f64());
    }

    /// The exposition of `status` (read now) and of what this has counted.
    pub fn render(&self, status: &Status) -> String {
        let mut w = Writer::new();
        render_ports(&mut w, status);
        render_filter_rules(&mut w, status);
        render_programs(&mut w, status);
        self.render_responses(&mut w);
        render_nft_rule_events(&mut w, status);
        w.family(
            "wirespeed_fp_route_dumps_total",
            Kind::Counter,
            "Dumps of every route made to count the multipath and source-specific ones (at start, where events could not say, on resync).",
        );
        w.sample(&[], status.route_dumps);
        w.family(
            "wirespeed_fp_errors",
            Kind::Gauge,
            "Errors the daemon keeps in its status (the last 32).",
        );
        w.sample(&[], status.errors.len() as u64);
        w.finish()
    }

    /// The daemon's own numbers: its response times and the events it received.
    fn render_responses(&self, w: &mut Writer) {
        w.family(
            "wirespeed_fp_response_seconds",
            Kind::Histogram,
            "Time from a kernel event (or a polled change) to the data path updated.",
        );
        w.histogram(&[], &self.responses);
        w.family(
            "wirespeed_fp_events_total",
            Kind::Counter,
            "Kernel events received, by kind (rtnetlink, netdev, nftables batches; polled changes).",
        );
        for (kind, n) in &self.events {
            w.sample(&[("kind", kind)], *n);
        }
    }
}

/// Per port: packets by reason and the IP MIB counts of what its routers forwarded.
fn render_ports(w: &mut Writer, status: &Status) {
    w.family(
        "wirespeed_fp_packets_total",
        Kind::Counter,
        "Packets the fast path saw on a port, by reason; path=\"fast\" it finished them \
         (forwarded, bridged, dropped by the filter), path=\"kernel\" it passed them to Linux.",
    );
    for p in &status.ports {
        for r in Reason::ALL {
            let path = if r.fast_pathed() { "fast" } else { "kernel" };
            let n = p.reasons.get(r.name()).copied().unwrap_or(0);
            w.sample(
                &[("port", &p.name), ("reason", r.name()), ("path", path)],
                n,
            );
        }
    }
    w.family(
        "wirespeed_fp_forwarded_mib_total",
        Kind::Counter,
        "What the kernel's IP MIBs would have counted of the packets a port's routers \
         forwarded (it never saw them): add to its own for what Linux alone counts. \
         counter=\"packets\" belongs in InReceives and OutTransmits, \"octets\" in \
         InOctets and OutOctets, the ECN codepoints in In{NoECT,ECT1,ECT0,CE}Pkts.",
    );
    for p in &status.ports {
        for (family, m) in [("ipv4", &p.mib_v4), ("ipv6", &p.mib_v6)] {
            for (counter, n) in [
                ("packets", m.packets),
                ("octets", m.octets),
                ("not_ect", m.no_ect),
                ("ect1", m.ect1),
                ("ect0", m.ect0),
                ("ce", m.ce),
            ] {
                w.sample(
                    &[("port", &p.name), ("family", family), ("counter", counter)],
                    n,
                );
            }
        }
    }
}

/// What the filter counted per forward-chain rule.
fn render_filter_rules(w: &mut Writer, status: &Status) {
    w.family(
        "wirespeed_fp_filter_rule_total",
        Kind::Counter,
        "What the filter counted for a forward-chain rule (its nftables handle) of the \
         packets it judged and the fast path finished, which the kernel's rule counters \
         miss: add them to its own.",
    );
    for c in &status.filter_counts {
        let r = &c.rule;
        let handle = r.handle.to_string();
        for (counter, n) in [("packets", c.packets), ("bytes", c.bytes)] {
            w.sample(
                &[
                    ("family", &r.family),
                    ("table", &r.table),
                    ("chain", &r.chain),
                    ("handle", &handle),
                    ("counter", counter),
                ],
                n,
            );
        }
    }
}

/// Per port: program swaps, and the hook it is served with.
fn render_programs(w: &mut Writer, status: &Status) {
    w.family(
        "wirespeed_fp_program_swaps_total",
        Kind::Counter,
        "Re-specialized programs swapped in on a port (bpf_link_update).",
    );
    for p in &status.ports {
        w.sample(&[("port", &p.name)], p.swaps);
    }
    w.family(
        "wirespeed_fp_port_info",
        Kind::Gauge,
        "1 for each port the fast path serves, with its hook.",
    );
    for p in &status.ports {
        w.sample(&[("port", &p.name), ("hook", &p.hook)], 1u64);
    }
}

/// nftables rule events: decoded, read back, not yet read back.
fn render_nft_rule_events(w: &mut Writer, status: &Status) {
    let rule = status.nft_rule_events;
    w.family(
        "wirespeed_fp_nft_rule_events_decoded_total",
        Kind::Counter,
        "nftables rule additions and deletions applied from the event alone, without reading the ruleset.",
    );
    w.sample(&[], rule.decoded);
    w.family(
        "wirespeed_fp_nft_ruleset_readbacks_total",
        Kind::Counter,
        "Reads of the ruleset after decoded rule events, by outcome: match, mismatch (the read wins), raced (new events came; inconclusive).",
    );
    w.sample(
        &[("outcome", "match")],
        rule.checks.saturating_sub(rule.mismatches),
    );
    w.sample(&[("outcome", "mismatch")], rule.mismatches);
    w.sample(&[("outcome", "raced")], rule.raced);
    w.family(
        "wirespeed_fp_nft_rule_events_unchecked",
        Kind::Gauge,
        "Decoded rule events not yet read back (the read follows 20 ms after the last event).",
    );
    w.sample(&[], rule.unchecked);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{PortStatus, RuleEventCounts};

    #[test]
    fn status_numbers_become_series() {
        let mut reasons = BTreeMap::new();
        reasons.insert(Reason::Forwarded.name().to_string(), 5);
        reasons.insert(Reason::ForwardedCached.name().to_string(), 7);
        let status = Status {
            ports: vec![PortStatus {
                name: "veth\"0".into(),
                hook: "xdp (native)".into(),
                fast_pathed: 12,
                reasons,
                swaps: 2,
                ..PortStatus::default()
            }],
            nft_rule_events: RuleEventCounts {
                decoded: 3,
                checks: 2,
                mismatches: 1,
                ..RuleEventCounts::default()
            },
            route_dumps: 4,
            ..Status::default()
        };
        let mut m = FpMetrics::default();
        m.events(&["route", "route", "link"]);
        m.responded(Duration::from_micros(300));
        let text = m.render(&status);
        let fast: u64 = text
            .lines()
            .filter(|l| {
                l.starts_with("wirespeed_fp_packets_total{port=\"veth\\\"0\"")
                    && l.contains("path=\"fast\"")
            })
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(fast, status.ports[0].fast_pathed);
        let per_port = text
            .lines()
            .filter(|l| l.starts_with("wirespeed_fp_packets_total{"))
            .count();
        assert_eq!(per_port, Reason::ALL.len());
        for line in [
            "wirespeed_fp_program_swaps_total{port=\"veth\\\"0\"} 2",
            "wirespeed_fp_events_total{kind=\"route\"} 2",
            "wirespeed_fp_response_seconds_bucket{le=\"0.00025\"} 0",
            "wirespeed_fp_response_seconds_bucket{le=\"0.0005\"} 1",
            "wirespeed_fp_response_seconds_count 1",
            "wirespeed_fp_nft_ruleset_readbacks_total{outcome=\"match\"} 1",
            "wirespeed_fp_nft_rule_events_decoded_total 3",
            "wirespeed_fp_route_dumps_total 4",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
    }
}
