//! What the daemon tells `fp status`: the per-port counters (summed across program swaps), the
//! responses (event in -> data path updated), the errors, and the status file they are written
//! to. The daemon reports here; nothing here touches the kernel besides the file.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::datapath::apply::DataPlane;
use crate::datapath::attach::Hook;
use crate::datapath::stats::{Counters, Mib};
use crate::error::{io, Error, Result};
use crate::filter::{FamilyFilter, FilterPlan};
use crate::model::features::Features;

pub const STATUS_DIR: &str = "/run/wirespeed/fp";
const RESPONSES_KEPT: usize = 4096;
const ERRORS_KEPT: usize = 32;

/// The status file of the daemon serving the calling thread's network namespace: one per
/// namespace, so daemons in different lab namespaces do not collide.
pub fn default_status_path() -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata("/proc/thread-self/ns/net") {
        Ok(m) => PathBuf::from(format!("{STATUS_DIR}/net-{}.json", m.ino())),
        Err(_) => PathBuf::from(format!("{STATUS_DIR}/status.json")),
    }
}

/// One response: kernel event received -> data path updated.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Response {
    pub events: String,
    /// none (nothing the data path holds changed), route cache (a new route-cache
    /// generation only), maps, swap, attach, detach
    pub action: String,
    pub micros: f64,
    /// Of `micros`, the time spent reading the nftables ruleset (libnftables, or `nft`);
    /// 0 when the change did not need it.
    #[serde(default)]
    pub ruleset_read_micros: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct PortStatus {
    pub ifindex: u32,
    pub name: String,
    pub hook: String,
    pub modules: Vec<String>,
    pub notes: Vec<String>,
    pub maps: BTreeMap<String, usize>,
    pub fast_pathed: u64,
    pub passed: u64,
    pub reasons: BTreeMap<String, u64>,
    pub swaps: u64,
    /// What the kernel's IP MIBs would have counted of the packets this port's routers
    /// forwarded, which it never saw: add to its own (`nstat`) for what Linux alone counts.
    #[serde(default)]
    pub mib_v4: ForwardedMib,
    #[serde(default)]
    pub mib_v6: ForwardedMib,
}

/// One family's share of the IP MIBs for forwarded packets (docs/FASTPATH.md, "Counters"):
/// `packets` belongs in InReceives and OutTransmits, `octets` in InOctets and OutOctets, the
/// rest in In{NoECT,ECT1,ECT0,CE}Pkts.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, Default, PartialEq, Eq)]
pub struct ForwardedMib {
    pub packets: u64,
    pub octets: u64,
    pub no_ect: u64,
    pub ect1: u64,
    pub ect0: u64,
    pub ce: u64,
}

impl ForwardedMib {
    fn of(c: &Counters, v6: bool) -> ForwardedMib {
        ForwardedMib {
            packets: c.mib(v6, Mib::Packets),
            octets: c.mib(v6, Mib::Octets),
            no_ect: c.mib(v6, Mib::NoEct),
            ect1: c.mib(v6, Mib::Ect1),
            ect0: c.mib(v6, Mib::Ect0),
            ce: c.mib(v6, Mib::Ce),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Status {
    pub pid: u32,
    pub running: bool,
    pub updated_unix_ms: u64,
    pub ports: Vec<PortStatus>,
    pub filter_v4: String,
    pub filter_v6: String,
    pub errors: Vec<String>,
    pub response_count: usize,
    pub response_median_us: f64,
    pub response_p99_us: f64,
    pub responses: Vec<Response>,
    #[serde(default)]
    pub nft_rule_events: RuleEventCounts,
    /// Dumps of every route made to count those the route cache cannot stand for: at start,
    /// where events could not say (routes::RouteLedger), and on resync.
    #[serde(default)]
    pub route_dumps: u64,
    /// Next hops whose neighbour entry is STALE: a packet to one goes to the kernel, which
    /// drives the entry (`pass_neigh_stale`; docs/FASTPATH.md, "Neighbours").
    #[serde(default)]
    pub stale_neighbours: usize,
    /// What the filter counted for each forward-chain rule and policy, which the kernel's
    /// rule counters miss: add them (docs/FASTPATH.md, "Counters").
    #[serde(default)]
    pub filter_counts: Vec<crate::datapath::rule_counters::RuleCount>,
}

/// What `wirespeed fp status` prints: the daemon, the filters, the responses, then one block
/// per port (counters, why packets passed, the MIB shares, notes), the filter counters, the
/// errors and the last change. `running` is taken as it stands: a reader that knows better
/// (the pid is gone) sets it first.
impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self;
        writeln!(
            f,
            "daemon pid {} {}",
            s.pid,
            if s.running {
                "running"
            } else {
                "NOT running (kernel carries all traffic)"
            }
        )?;
        writeln!(f, "filter ipv4: {}", s.filter_v4)?;
        writeln!(f, "filter ipv6: {}", s.filter_v6)?;
        writeln!(
            f,
            "response (event -> data path): {} events, median {:.1} us, p99 {:.1} us",
            s.response_count, s.response_median_us, s.response_p99_us
        )?;
        let e = &s.nft_rule_events;
        writeln!(
            f,
            "nftables rule events applied without a ruleset read: {}, read back {} times, \
     {} differed",
            e.decoded, e.checks, e.mismatches
        )?;
        writeln!(
            f,
            "route table dumps (to count multipath and source-specific routes): {}",
            s.route_dumps
        )?;
        writeln!(
            f,
            "STALE next hops (their packets go to the kernel, which probes them): {}",
            s.stale_neighbours
        )?;
        writeln!(
            f,
            "{:<10} {:<14} {:<36} {:>12} {:>12}  maps",
            "iface", "hook", "modules", "fast-pathed", "passed"
        )?;
        for p in &s.ports {
            let maps: Vec<String> = p.maps.iter().map(|(k, v)| format!("{k}={v}")).collect();
            writeln!(
                f,
                "{:<10} {:<14} {:<36} {:>12} {:>12}  {}",
                p.name,
                p.hook,
                p.modules.join("+"),
                p.fast_pathed,
                p.passed,
                maps.join(" ")
            )?;
            let why: Vec<String> = p.reasons.iter().map(|(k, v)| format!("{k}={v}")).collect();
            if !why.is_empty() {
                writeln!(f, "{:<10} why: {}", "", why.join(" "))?;
            }
            for (family, m) in [("IPv4", &p.mib_v4), ("IPv6", &p.mib_v6)] {
                if m.packets > 0 {
                    writeln!(
    f,
                "{:<10} {family} MIBs (add to nstat's): {} packets, {} octets, ECN not-ECT/ECT1/ECT0/CE {}/{}/{}/{}",
                "", m.packets, m.octets, m.no_ect, m.ect1, m.ect0, m.ce
            )?;
                }
            }
            for n in &p.notes {
                writeln!(f, "{:<10} note: {n}", "")?;
            }
        }
        for c in s.filter_counts.iter().filter(|c| c.packets > 0) {
            let r = &c.rule;
            writeln!(
                f,
                "filter counter (add to the kernel's): {} {} {} handle {}: {} packets, {} bytes",
                r.family, r.table, r.chain, r.handle, c.packets, c.bytes
            )?;
        }
        for e in &s.errors {
            writeln!(f, "error: {e}")?;
        }
        if let Some(r) = s.responses.first() {
            let read = if r.ruleset_read_micros > 0.0 {
                format!(
                    " ({:.1} us of it reading the nftables ruleset)",
                    r.ruleset_read_micros
                )
            } else {
                String::new()
            };
            writeln!(
                f,
                "last change: {} -> {} in {:.1} us{read}",
                r.events, r.action, r.micros
            )?;
        }

        Ok(())
    }
}

/// nftables rule events applied without reading the ruleset, and how the read-back compared.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, Default, PartialEq, Eq)]
pub struct RuleEventCounts {
    /// Rule additions and deletions applied from the event alone.
    pub decoded: u64,
    /// Reads of the ruleset after such events, once the burst was over.
    pub checks: u64,
    /// Reads that compiled to another filter than the events had (then the read wins).
    pub mismatches: u64,
    /// Events applied since the last read (it follows 20 ms after the last event).
    pub unchecked: u64,
    /// Reads that differed while new events were already arriving: inconclusive, not
    /// counted as checks (the new events then cause a full read).
    #[serde(default)]
    pub raced: u64,
}

/// The daemon's record of what it did: responses, errors, rule-event checks.
#[derive(Default)]
pub struct StatusLog {
    responses: VecDeque<Response>,
    errors: Vec<String>,
    pub route_dumps: u64,
}

impl StatusLog {
    pub fn note_error(&mut self, e: String) {
        if self.errors.len() >= ERRORS_KEPT {
            self.errors.remove(0);
        }
        self.errors.push(e);
    }

    /// One response: `events` arrived at `since`; of the time since, `read` went to reading
    /// the ruleset.
    pub fn record(&mut self, events: String, action: &str, since: Instant, read: Duration) {
        if self.responses.len() >= RESPONSES_KEPT {
            self.responses.pop_front();
        }
        self.responses.push_back(Response {
            events,
            action: action.into(),
            micros: since.elapsed().as_secs_f64() * 1e6,
            ruleset_read_micros: read.as_secs_f64() * 1e6,
        });
    }

    /// The status of `dataplane` as `filter` compiled it.
    pub fn status(
        &self,
        dataplane: &DataPlane,
        filter: &FilterPlan,
        rule_events: RuleEventCounts,
        running: bool,
    ) -> Status {
        let mut us: Vec<f64> = self.responses.iter().map(|r| r.micros).collect();
        us.sort_by(|a, b| a.total_cmp(b));
        Status {
            pid: std::process::id(),
            running,
            updated_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            ports: port_statuses(dataplane),
            filter_v4: filter_text(&filter.v4),
            filter_v6: filter_text(&filter.v6),
            errors: self.errors.clone(),
            response_count: us.len(),
            response_median_us: percentile(&us, 0.5),
            response_p99_us: percentile(&us, 0.99),
            responses: self.responses.iter().rev().take(50).cloned().collect(),
            nft_rule_events: rule_events,
            route_dumps: self.route_dumps,
            stale_neighbours: 0,
            filter_counts: Vec::new(),
        }
    }
}

fn port_statuses(dp: &DataPlane) -> Vec<PortStatus> {
    let plan = dp.applied_plan();
    let mut ports = Vec::new();
    for (idx, p) in dp.ports() {
        let c = p.counters();
        let mut maps = BTreeMap::new();
        maps.insert("tx_ports".to_string(), p.prog.tx_port_count());
        if let Some(t) = &p.tables {
            maps.insert("filter_rules".into(), t.actions.len());
            maps.insert(
                "filter_lpm_entries".into(),
                t.src4.len() + t.dst4.len() + t.src6.len() + t.dst6.len(),
            );
            maps.insert("filter_port_entries".into(), t.sport.len() + t.dport.len());
        }
        // What the port runs: the plan's features (a program may have more compiled in,
        // switched off at run time).
        let pp = plan.ports.get(idx);
        let features: Features = pp.map(|pp| pp.features).unwrap_or(p.prog.features);
        if pp.is_some_and(|pp| pp.route_cache.v4) && features.router_v4 {
            maps.insert("route_cache_v4_slots".into(), p.prog.route_cache_slots());
        }
        if pp.is_some_and(|pp| pp.route_cache.v6) && features.router_v6 {
            maps.insert("route_cache_v6_slots".into(), p.prog.route_cache_slots());
        }
        if features.bridge {
            let (ports, vlans, fdb) = dp.bridge_maps().counts();
            maps.insert("bridge_ports".into(), ports);
            maps.insert("bridge_vlans".into(), vlans);
            maps.insert("bridge_fdb".into(), fdb);
        }
        let off = |m: &str| match m {
            "router4" | "filter4" => pp.is_some_and(|pp| pp.off_v4),
            _ => pp.is_some_and(|pp| pp.off_v6),
        };
        ports.push(PortStatus {
            ifindex: *idx,
            name: p.name.clone(),
            hook: match p.att.hook {
                Hook::XdpNative => "xdp (native)".into(),
                Hook::XdpGeneric => "xdp (generic)".into(),
                Hook::Tc => "tc (ingress)".into(),
            },
            modules: features
                .modules()
                .into_iter()
                .map(|m| {
                    if off(m) {
                        format!("{m} (kernel)")
                    } else {
                        m.to_string()
                    }
                })
                .collect(),
            notes: pp
                .map(|pp| pp.notes.clone())
                .unwrap_or_default()
                .into_iter()
                .chain(tc_stage_note(&p.att))
                .collect(),
            maps,
            fast_pathed: c.fast_pathed(),
            passed: c.passed(),
            reasons: c
                .nonzero()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            swaps: p.swaps,
            mib_v4: ForwardedMib::of(&c, false),
            mib_v6: ForwardedMib::of(&c, true),
        });
    }
    ports
}

/// What becomes of the partial-checksum frames of a port at XDP: its TC stage, or the kernel.
fn tc_stage_note(att: &crate::datapath::attach::Attachment) -> Option<String> {
    if att.has_tc_stage() {
        Some("partial checksums (a local sender's offload) forwarded at TC behind XDP".into())
    } else {
        att.tc_stage_error
            .as_ref()
            .map(|e| format!("partial checksums -> kernel: no TC stage ({e})"))
    }
}

fn filter_text(f: &FamilyFilter) -> String {
    match f {
        FamilyFilter::Open => "open (no forward chain)".into(),
        FamilyFilter::Compiled { policy_drop, rules } => {
            format!(
                "compiled: {rules} rules, policy {}",
                if *policy_drop { "drop" } else { "accept" }
            )
        }
        FamilyFilter::Kernel(why) => format!("kernel: {why}"),
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub fn write_status_file(path: &Path, status: &Status) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io(format!("create {}", dir.display())))?;
    }
    let tmp = path.with_extension("json.tmp");
    let json = serde_json::to_vec_pretty(status).map_err(|e| Error::Invalid(e.to_string()))?;
    std::fs::write(&tmp, json).map_err(io(format!("write {}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(io(format!("rename to {}", path.display())))
}

pub fn read_status_file(path: &Path) -> Result<Status> {
    let s = std::fs::read_to_string(path).map_err(io(format!("read {}", path.display())))?;
    serde_json::from_str(&s).map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_display_says_whether_the_daemon_runs_and_lists_each_port() {
        let mut s = Status {
            pid: 42,
            running: true,
            ports: vec![PortStatus {
                name: "eth0".into(),
                hook: "xdp".into(),
                modules: vec!["router".into()],
                fast_pathed: 5,
                reasons: BTreeMap::from([("pass_local".to_string(), 2)]),
                ..PortStatus::default()
            }],
            errors: vec!["one".into()],
            ..Status::default()
        };
        let text = s.to_string();
        assert!(text.starts_with("daemon pid 42 running\n"), "{text}");
        assert!(text.contains("\neth0 "), "{text}");
        assert!(text.contains("why: pass_local=2\n"), "{text}");
        assert!(text.ends_with("error: one\n"), "{text}");
        s.running = false;
        assert!(s.to_string().contains("NOT running"));
    }

    #[test]
    fn percentile_of_sorted() {
        assert_eq!(percentile(&[], 0.5), 0.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0], 0.5), 2.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0], 0.99), 3.0);
    }
}
