//! The showdown's results: one row per server configuration, rendered as a Markdown table
//! and an SVG chart. Running the rows is `runner.rs`; this module is pure and unit-tested.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use wirespeed_load::stats::{median, Ratio};

/// What a row's client sends, and so which chart draws it (`workload` in showdown.json).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Workload {
    /// GET /plaintext, `--connections` connections, one request in flight each.
    #[serde(rename = "http")]
    Http,
    /// The same on more shards (the scaling rows), charted apart from the one-shard ladder.
    #[serde(rename = "http-scaling")]
    HttpScaling,
    /// 512-byte messages, each sent when the previous one came back (Photon's ping-pong).
    #[serde(rename = "echo-pingpong")]
    EchoPingPong,
    /// 512-byte messages, many in flight on few connections (Photon's streaming).
    #[serde(rename = "echo-stream")]
    EchoStream,
    /// 64-byte TCP segments of 4,096 established connections through a full-NAT load
    /// balancer to 4 reals (lb_bench's rows): counted in packets/s, `pps`.
    #[serde(rename = "lb-fullnat-pps")]
    LbFullNatPps,
}

/// A workload as results name it, or none: absent in results from before rows named their
/// workload, and empty in those rewritten from such results.
fn workload_or_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Workload>, D::Error> {
    let name: Option<String> = Option::deserialize(d)?;
    match name.as_deref() {
        None | Some("") => Ok(None),
        Some(name) => {
            Workload::deserialize(serde::de::value::StrDeserializer::<D::Error>::new(name))
                .map(Some)
        }
    }
}

/// One round of one row.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RoundFigures {
    /// Requests (HTTP) or messages (echo) per second; 0 in the packet-rate rows.
    #[serde(default)]
    pub rps: f64,
    /// Packets per second, in the packet-rate rows (the load balancer's) only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pps: Option<f64>,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p9999_us: f64,
    pub cpu_us_per_req: Option<f64>,
    pub syscalls_per_req: Option<f64>,
    pub ctx_switches_per_s: f64,
    pub locality_pct: Option<f64>,
    pub client_cpu_pct: f64,
    /// The load generator's CPU time per request: on veth, work the server's configuration
    /// moves between CPUs shows up here.
    #[serde(default)]
    pub client_cpu_us_per_req: f64,
    pub server_cpu_pct: f64,
    pub errors: u64,
}

impl RoundFigures {
    /// What the row counts per second: packets in the packet-rate rows, else requests.
    pub fn rate(&self) -> f64 {
        self.pps.unwrap_or(self.rps)
    }
}

/// One configuration; the figures are medians over its rounds.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Row {
    pub row: usize,
    pub name: String,
    /// The server command line (inside the server namespace).
    pub server: String,
    /// Lab tuning profile.
    pub profile: String,
    /// Every setting the row's lab applied (the profile's sysfs and sysctl writes, ethtool
    /// features, the row's own offload changes), as the lab reported them; empty when none.
    #[serde(default)]
    pub profile_settings: Vec<String>,
    /// The MTU of the row's link (the lab's veths), where it was read; the table names it
    /// beside the configuration.
    #[serde(default)]
    pub mtu: Option<u32>,
    /// What the client sent (the charts draw each family on its own); None only in results
    /// from before rows named it, until `fill_from_ladder` names it.
    #[serde(default, deserialize_with = "workload_or_none")]
    pub workload: Option<Workload>,
    /// The seed's figure for this step over the seed's own base (the Seastar seed's for the
    /// HTTP ladder, Photon's for the echo rows; docs/INSTRUMENTS.md, "`wirespeed showdown`",
    /// and `seed`), where the seed has one.
    #[serde(default)]
    pub seed_ratio: Option<f64>,
    /// Which seed figures `seed_ratio` divides.
    #[serde(default)]
    pub seed_source: Option<String>,
    /// Set when the row could not run (e.g. nginx not installed); the figures are then empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    #[serde(default)]
    pub rps: f64,
    /// The packet-rate rows' median packets per second (their `rps` is 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pps: Option<f64>,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p9999_us: f64,
    pub cpu_us_per_req: Option<f64>,
    pub syscalls_per_req: Option<f64>,
    pub ctx_switches_per_s: f64,
    pub locality_pct: Option<f64>,
    pub client_cpu_pct: f64,
    #[serde(default)]
    pub client_cpu_us_per_req: f64,
    pub server_cpu_pct: f64,
    pub errors: u64,
    /// The rate (req/s, messages/s or packets/s) over the base row's, round by round.
    #[serde(alias = "rps_vs_row1")]
    pub rate_vs_base: Option<Ratio>,
    /// The row the ratios compare against (1-based): row 1 for the HTTP ladder; for a
    /// workload of its own (echo) the kernel row of that workload.
    #[serde(default = "first_row")]
    pub base_row: usize,
    /// CPU-µs per request against row 1, round by round (lower is better).
    pub cpu_per_req_vs_row1: Option<Ratio>,
    /// The client used ~all of its CPU while the server did not: the row measures the client.
    pub client_bound: bool,
    pub rounds: Vec<RoundFigures>,
}

impl Row {
    /// A row measured in packets per second on the DUT (the load balancer's rows,
    /// workload `lb-fullnat-pps`): no client, no requests, no latency.
    pub fn packet_rate(&self) -> bool {
        self.workload == Some(Workload::LbFullNatPps)
    }

    /// Fills the medians from `rounds`.
    pub fn summarize(&mut self) {
        let r = &self.rounds;
        let m = |f: &dyn Fn(&RoundFigures) -> f64| median(r.iter().map(f)).unwrap_or(0.0);
        let mo = |f: &dyn Fn(&RoundFigures) -> Option<f64>| median(r.iter().filter_map(f));
        self.rps = m(&|x| x.rps);
        self.pps = median(r.iter().filter_map(|x| x.pps));
        self.p50_us = m(&|x| x.p50_us);
        self.p99_us = m(&|x| x.p99_us);
        self.p9999_us = m(&|x| x.p9999_us);
        self.cpu_us_per_req = mo(&|x| x.cpu_us_per_req);
        self.syscalls_per_req = mo(&|x| x.syscalls_per_req);
        self.ctx_switches_per_s = m(&|x| x.ctx_switches_per_s);
        self.locality_pct = mo(&|x| x.locality_pct);
        self.client_cpu_pct = m(&|x| x.client_cpu_pct);
        self.client_cpu_us_per_req = m(&|x| x.client_cpu_us_per_req);
        self.server_cpu_pct = m(&|x| x.server_cpu_pct);
        self.errors = r.iter().map(|x| x.errors).sum();
        self.client_bound = self.client_cpu_pct >= 90.0 && self.server_cpu_pct < 90.0;
    }
}

fn first_row() -> usize {
    1
}

/// A whole showdown run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Showdown {
    pub command: String,
    pub date: String,
    pub uname_r: String,
    /// The kernel stack's congestion control in the lab's namespaces, which take the host's
    /// default when they are made (`net.ipv4.tcp_congestion_control`); our stack's is NewReno.
    #[serde(default)]
    pub tcp_congestion_control: String,
    pub nproc: usize,
    pub commit: String,
    pub client_cpus: String,
    pub server_cpus: String,
    pub connections: usize,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub rounds: usize,
    /// Closed loop (wrk-like): latency is per response, not corrected for omission.
    pub latency: String,
    pub rows: Vec<Row>,
}

impl Showdown {
    /// Ratios of every row against row 1, from the rounds they ran side by side.
    pub fn compute_ratios(&mut self) {
        if self.rows.is_empty() {
            return;
        }
        let all = self.rows.clone();
        for row in self.rows.iter_mut() {
            let base_row = row.base_row.max(1);
            let Some(base) = all.iter().find(|r| r.row == base_row).or(all.first()) else {
                continue;
            };
            let n = row.rounds.len().min(base.rounds.len());
            row.rate_vs_base = Ratio::of(
                (0..n)
                    .map(|i| row.rounds[i].rate() / base.rounds[i].rate())
                    .collect(),
            );
            row.cpu_per_req_vs_row1 = Ratio::of(
                (0..n)
                    .filter_map(|i| {
                        Some(row.rounds[i].cpu_us_per_req? / base.rounds[i].cpu_us_per_req?)
                    })
                    .collect(),
            );
        }
    }

    /// The results table (Markdown; also what the terminal shows).
    pub fn table(&self) -> String {
        let mut s = String::new();
        let opt =
            |v: Option<f64>, prec: usize| v.map_or("n/a".to_string(), |x| format!("{x:.prec$}"));
        let ratio = |r: Option<Ratio>| {
            r.map_or("n/a".to_string(), |r| {
                format!("{:.2}x ({:.2}-{:.2})", r.median, r.min, r.max)
            })
        };
        let seed = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:.2}x"));
        let _ = writeln!(
            s,
            "| # | configuration | req/s | vs base row | seed | p50 us | p99 us | p99.99 us | CPU-us/req | CPU vs base row | syscalls/req | ctx sw/s | locality % | client CPU-us/req | client CPU % | server CPU % | errors |"
        );
        let _ = writeln!(
            s,
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for r in &self.rows {
            if let Some(why) = &r.skipped {
                let _ = writeln!(
                    s,
                    "| {} | {} | skipped: {why} | | {} | | | | | | | | | | | | |",
                    r.row,
                    r.name,
                    seed(r.seed_ratio)
                );
                continue;
            }
            // The packet-rate rows (the load balancer's) have no client and no requests:
            // their latency, context switches and client columns were not measured.
            let measured = |v: f64, prec: usize| opt((!r.packet_rate()).then_some(v), prec);
            let _ = writeln!(
                s,
                "| {} | {}{}{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} | {} |",
                r.row,
                r.name,
                r.mtu.map_or(String::new(), |m| format!(", MTU {m}")),
                if r.client_bound { " (client-bound)" } else { "" },
                r.pps.map_or(format!("{:.0}", r.rps), |pps| format!("{pps:.0} pps")),
                ratio(r.rate_vs_base),
                seed(r.seed_ratio),
                measured(r.p50_us, 0),
                measured(r.p99_us, 0),
                measured(r.p9999_us, 0),
                opt(r.cpu_us_per_req, 2),
                ratio(r.cpu_per_req_vs_row1),
                opt(r.syscalls_per_req, 2),
                measured(r.ctx_switches_per_s, 0),
                opt(r.locality_pct, 1),
                measured(r.client_cpu_us_per_req, 2),
                measured(r.client_cpu_pct, 0),
                r.server_cpu_pct,
                r.errors
            );
        }
        s
    }

    /// The Markdown report: the table plus everything needed to reproduce it.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# wirespeed showdown: HTTP plaintext, {} connections\n",
            self.connections
        );
        let _ = writeln!(s, "Command: `{}`\n", self.command);
        let _ = writeln!(
            s,
            "Date {}; kernel {}, TCP congestion control {} (the kernel stack's; ours is NewReno); \
             {} CPUs; commit {}. Client on CPU {}, server on CPU {}; {} round(s) \
             alternating the rows; {:.1} s warm-up then {:.1} s measured per row and round. Figures \
             are medians over the rounds; `vs base row` is the median (min-max) of the per-round \
             req/s ratios against row 1, or against the row named in the configuration (echo rows: \
             req/s is messages/s). Latency: {}. CPU-us/req is the server's user+sys plus the softirq time on its \
             CPU not already inside it, per request, and `CPU vs base row` the median (min-max) of its \
             per-round ratios against the base row's (rounds run side by side, so a slow stretch of \
             the machine moves both); client CPU-us/req is the load generator's \
             (on veth, packet work a configuration moves off the server's CPU lands there). \
             `seed` is the seed's own figure for the same step over its own base, where it has one: \
             seed 000 (Linux kernel vs DPDK, HTTP) for rows against row 1, the Photon seed for the \
             echo rows; each row's `seed_source` in the JSON names the figures. `MTU` after a \
             configuration is its link's: the echo rows run both stacks at one MTU (`--mtu`, 9000 \
             by default), the HTTP rows at 1500.\n",
            self.date,
            self.uname_r,
            self.tcp_congestion_control,
            self.nproc,
            self.commit,
            self.client_cpus,
            self.server_cpus,
            self.rounds,
            self.warmup_s,
            self.duration_s,
            self.latency
        );
        s.push_str(&self.table());
        let bound: Vec<String> = self
            .rows
            .iter()
            .filter(|r| r.client_bound)
            .map(|r| r.row.to_string())
            .collect();
        if !bound.is_empty() {
            let _ = writeln!(
                s,
                "\nRows {} are client-bound (client CPU >= 90% while the server's is not): they measure the \
                 load generator, not the server; compare their CPU-us/req, not their req/s.",
                bound.join(", ")
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(rps: f64, cpu: f64) -> RoundFigures {
        RoundFigures {
            rps,
            cpu_us_per_req: Some(cpu),
            client_cpu_pct: 50.0,
            server_cpu_pct: 100.0,
            ..Default::default()
        }
    }

    #[test]
    fn medians_ratios_and_rendering() {
        assert_eq!(median([3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median([4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median([]), None);
        let mut s = Showdown {
            connections: 256,
            rounds: 3,
            ..Default::default()
        };
        for (i, k) in [(1, 1.0), (2, 2.0)] {
            let mut r = Row {
                row: i,
                name: format!("row{i}"),
                seed_ratio: (i == 1).then_some(1.0),
                mtu: (i == 2).then_some(9000),
                ..Default::default()
            };
            r.rounds = vec![
                round(100.0 * k, 10.0 / k),
                round(110.0 * k, 9.0 / k),
                round(90.0 * k, 11.0 / k),
            ];
            r.summarize();
            s.rows.push(r);
        }
        let mut lb = Row {
            row: 4,
            name: "lb".into(),
            workload: Some(Workload::LbFullNatPps),
            ..Default::default()
        };
        lb.rounds = vec![RoundFigures {
            pps: Some(3e6),
            ..round(0.0, 0.33)
        }];
        lb.summarize();
        s.rows.push(lb);
        s.rows.push(Row {
            row: 3,
            name: "nginx".into(),
            skipped: Some("not installed".into()),
            seed_ratio: Some(2.5),
            ..Default::default()
        });
        s.compute_ratios();
        assert_eq!(s.rows[0].rps, 100.0);
        assert_eq!(
            s.rows[1].rate_vs_base,
            Some(Ratio {
                median: 2.0,
                min: 2.0,
                max: 2.0
            })
        );
        assert_eq!(s.rows[1].cpu_per_req_vs_row1.unwrap().median, 0.5);
        let md = s.markdown();
        let row2 = md.lines().find(|l| l.starts_with("| 2 | row2")).unwrap();
        assert!(row2.contains("| 0.50x (0.50-0.50) |"), "{row2}");
        assert!(
            md.contains("| 2 | row2, MTU 9000 | 200 | 2.00x (2.00-2.00) | - |"),
            "{md}"
        );
        assert!(
            md.contains("| 1 | row1 | 100 | 1.00x (1.00-1.00) | 1.00x |"),
            "{md}"
        );
        assert!(md.contains("skipped: not installed | | 2.50x |"), "{md}");
        // A packet-rate row measured no latency: it says so rather than 0.
        assert!(md.contains("| 4 | lb | 3000000 pps | "), "{md}");
        let lb_line = md.lines().find(|l| l.starts_with("| 4 | lb |")).unwrap();
        assert!(
            lb_line.contains("| - | n/a | n/a | n/a | 0.33 | "),
            "{lb_line}"
        );
        // Every line of the table has the header's number of cells.
        let cells = |l: &str| l.matches('|').count();
        let table: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
        assert!(table.iter().all(|l| cells(l) == cells(table[0])), "{md}");
        let v = serde_json::to_value(&s).unwrap();
        for k in [
            "rps",
            "p50_us",
            "p99_us",
            "p9999_us",
            "cpu_us_per_req",
            "syscalls_per_req",
            "ctx_switches_per_s",
            "locality_pct",
            "seed_ratio",
            "profile_settings",
            "workload",
            "mtu",
        ] {
            assert!(v["rows"][0].get(k).is_some(), "{k}");
        }
    }
}
