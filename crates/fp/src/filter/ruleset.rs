//! The filter's input: the nftables ruleset (read through libnftables or `nft`, or edited by
//! decoded rule events), the iptables-nft `-m set` matches and their ipset members, and
//! whether x_tables (iptables-legacy) tables exist. Compiles them into the model's filter plan.

// `fp run` blocks SIGINT/SIGTERM (it reads them from a signalfd); the tools it runs must not
// inherit that mask.
use std::process::Command;
use wirespeed_sys::signal::CommandExt as _;

use std::time::{Duration, Instant};

use wirespeed_sys::nftables::Nftables;

use crate::error::{io, Error, Result};
use crate::filter::rules::{Object, Rule, Ruleset as Parsed, TableRef};
use crate::filter::{self, FamilyFilter, FilterPlan, IpsetInfo, XtByHandle};
use crate::kernel::nftevent::RuleEvent;
use crate::status::RuleEventCounts;

/// What the ruleset and the polled state say, and what they were compiled from.
pub struct Ruleset {
    /// In-process libnftables (None: spawn `nft`).
    nft: Option<Nftables>,
    /// x_tables tables (ip, ip6): they raise no event, so the daemon polls them.
    pub legacy: (bool, bool),
    /// iptables `-m set` matches exist: ipset has no change events, so it is polled.
    pub uses_ipset: bool,
    pub ipset_text: String,
    /// The ruleset last read (typed, then edited by rule events), with the ipset names and
    /// members it was compiled with.
    last: Option<(Parsed, IpsetInfo)>,
    /// Set matches of the iptables-nft rules seen so far, by rule handle.
    xt_known: XtByHandle,
    /// The ruleset has bridge or netdev family tables.
    pub l2_tables: bool,
    /// The ruleset has ip, ip6, inet or arp tables (what br_netfilter would run).
    pub l3_tables: bool,
    /// Decoded rule events were applied since the ruleset was last read.
    pub check_pending: bool,
    pub rule_events: RuleEventCounts,
    /// Time spent reading the ruleset since the caller last took it.
    pub read_time: Duration,
}

/// x_tables (iptables-legacy) tables in this thread's namespace.
pub fn legacy_tables() -> (bool, bool) {
    let has = |f: &str| {
        std::fs::read_to_string(format!("/proc/thread-self/net/{f}"))
            .map(|s| !s.trim().is_empty())
            .unwrap_or(false)
    };
    (has("ip_tables_names"), has("ip6_tables_names"))
}

pub fn ipset_save() -> String {
    Command::new("ipset")
        .arg("save")
        .unblock_signals()
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

fn nft_ruleset_spawned() -> Result<String> {
    let out = Command::new("nft")
        .args(["-j", "list", "ruleset"])
        .unblock_signals()
        .output()
        .map_err(io("run nft -j list ruleset"))?;
    if !out.status.success() {
        return Err(Error::Nft(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A filter that hands both families to the kernel, for `why`.
pub fn all_to_kernel(filter: &mut FilterPlan, why: &Error) {
    filter.v4 = FamilyFilter::Kernel(why.to_string());
    filter.v6 = FamilyFilter::Kernel(why.to_string());
}

impl Default for Ruleset {
    fn default() -> Ruleset {
        Ruleset {
            nft: Nftables::open(),
            legacy: (false, false),
            uses_ipset: false,
            ipset_text: String::new(),
            last: None,
            xt_known: XtByHandle::new(),
            l2_tables: false,
            l3_tables: false,
            check_pending: false,
            rule_events: RuleEventCounts::default(),
            read_time: Duration::ZERO,
        }
    }
}

impl Ruleset {
    fn read(&mut self) -> Result<String> {
        let started = Instant::now();
        let s = match &mut self.nft {
            Some(lib) => lib
                .run("list ruleset")
                .map_err(|e| Error::Nft(format!("libnftables: {e}"))),
            None => nft_ruleset_spawned(),
        };
        self.read_time += started.elapsed();
        let s = s?;
        // An empty ruleset prints nothing with some versions.
        Ok(if s.trim().is_empty() {
            r#"{"nftables": []}"#.to_string()
        } else {
            s
        })
    }

    /// Reads and compiles the ruleset. `self.legacy` is kept fresh by the poll (x_tables
    /// raise no event), so it is not read again on an nftables event's path.
    pub fn sync(&mut self, filter: &mut FilterPlan) -> Result<()> {
        let json = self.read()?;
        let ruleset: serde_json::Value = match serde_json::from_str(&json) {
            Ok(v) => v,
            Err(e) => {
                // Unknown table families: keep bridged traffic in the kernel too.
                (self.l2_tables, self.l3_tables) = (true, true);
                return Err(Error::Nft(format!("bad JSON: {e}")));
            }
        };
        let ruleset = match Parsed::from_json(&ruleset) {
            Ok(r) => r,
            Err(e) => {
                self.uses_ipset = false;
                (self.l2_tables, self.l3_tables) = (false, false);
                return Err(Error::Nft(e));
            }
        };
        self.compile(ruleset, filter);
        Ok(())
    }

    /// Compiles a typed ruleset (read, or edited by a rule event) into the filter plan.
    fn compile(&mut self, ruleset: Parsed, filter: &mut FilterPlan) {
        let xt = filter::xt_rules_of(&ruleset);
        self.uses_ipset = !xt.is_empty();
        (self.l2_tables, self.l3_tables) = table_families(&ruleset);
        let mut info = IpsetInfo::default();
        if self.uses_ipset {
            info.set_ipset_save(&self.ipset_text);
            // Known rules only (an ordinary rule added or deleted beside them): the set
            // names are remembered, and members are polled anyway.
            if self.ipset_text.is_empty() || !info.set_matches_from(&self.xt_known, &xt) {
                info = IpsetInfo::default();
                for (family, tool) in [("ip", "iptables-nft-save"), ("ip6", "ip6tables-nft-save")] {
                    if let Ok(out) = Command::new(tool).unblock_signals().output() {
                        info.add_ipt_save(family, &String::from_utf8_lossy(&out.stdout));
                    }
                }
                self.ipset_text = ipset_save();
                info.set_ipset_save(&self.ipset_text);
                self.xt_known = info.by_handle(&xt);
            }
        }
        *filter = FilterPlan::from_ruleset(&ruleset, self.legacy.0, self.legacy.1, &info);
        self.last = Some((ruleset, info));
    }

    /// Applies decoded rule events to the ruleset last read; false when one does not fit
    /// (then the caller reads the ruleset). The result is checked by a read once idle.
    pub fn apply_rule_events(&mut self, evs: &[&RuleEvent], filter: &mut FilterPlan) -> bool {
        // Taken out: a half-applied copy is never kept (the caller's read replaces it).
        let Some((mut ruleset, _)) = self.last.take() else {
            return false;
        };
        if !evs.iter().all(|ev| apply_event(&mut ruleset, ev)) {
            return false;
        }
        self.compile(ruleset, filter);
        self.rule_events.decoded += evs.len() as u64;
        self.rule_events.unchecked += evs.len() as u64;
        self.check_pending = true;
        true
    }

    /// Reads the ruleset back after decoded rule events and compares the plans.
    /// `events_arrived`: whether nftables events came in meanwhile; then the read may be
    /// newer than the events applied so far, and a difference proves nothing (the pending
    /// events do not fit the read and cause a full read of their own).
    pub fn check_rule_events(
        &mut self,
        filter: &mut FilterPlan,
        events_arrived: impl Fn() -> bool,
        error: &mut dyn FnMut(String),
    ) {
        self.check_pending = false;
        self.rule_events.unchecked = 0;
        let decoded = filter.clone();
        match self.sync(filter) {
            Ok(()) if *filter == decoded => self.rule_events.checks += 1,
            Ok(()) if events_arrived() => self.rule_events.raced += 1,
            Ok(()) => {
                self.rule_events.checks += 1;
                self.rule_events.mismatches += 1;
                let read = &*filter;
                let first = |a: &[filter::Rule], b: &[filter::Rule]| {
                    a.iter()
                        .zip(b)
                        .position(|(x, y)| x != y)
                        .unwrap_or(a.len().min(b.len()))
                };
                error(format!(
                    "an nftables rule event decoded otherwise than the ruleset read back \
                     (ipv4 rules {} decoded, {} read, first difference at {}; ipv6 {} / {}): \
                     corrected from the read",
                    decoded.rules_v4.len(),
                    read.rules_v4.len(),
                    first(&decoded.rules_v4, &read.rules_v4),
                    decoded.rules_v6.len(),
                    read.rules_v6.len()
                ));
            }
            Err(e) => all_to_kernel(filter, &e),
        }
    }

    /// Only ipset members changed: recompile from the ruleset already read.
    pub fn sync_ipset_members(&mut self, text: String, filter: &mut FilterPlan) -> Result<()> {
        let Some((ruleset, mut info)) = self.last.take() else {
            return self.sync(filter);
        };
        info.set_ipset_save(&text);
        self.ipset_text = text;
        *filter = FilterPlan::from_ruleset(&ruleset, self.legacy.0, self.legacy.1, &info);
        self.last = Some((ruleset, info));
        Ok(())
    }
}

/// Which table families a ruleset has: (bridge or netdev, which see frames before or inside
/// the bridge; ip, ip6, inet or arp, which br_netfilter runs bridged frames through).
fn table_families(ruleset: &Parsed) -> (bool, bool) {
    let has = |set: &[&str]| {
        ruleset
            .tables
            .iter()
            .any(|t| set.contains(&t.family.as_str()))
    };
    (
        has(&["bridge", "netdev"]),
        has(&["ip", "ip6", "inet", "arp"]),
    )
}

fn in_table(at: &TableRef, ev: &RuleEvent) -> bool {
    at.family == ev.family && at.table == ev.table
}

fn is_rule_of_chain(o: &Object, ev: &RuleEvent) -> bool {
    matches!(o, Object::Rule(r) if in_table(&r.at, ev) && r.chain == ev.chain)
}

fn handle_of(o: &Object) -> Option<u64> {
    match o {
        Object::Rule(r) => r.handle,
        _ => None,
    }
}

/// Applies `ev` to a typed ruleset; false (and the ruleset untouched) when it does not fit
/// what the ruleset holds: an unknown chain, a handle missing or present twice.
pub fn apply_event(ruleset: &mut Parsed, ev: &RuleEvent) -> bool {
    let Ok(expr) = &ev.expr else {
        return false;
    };
    let items = &mut ruleset.objects;
    if !items
        .iter()
        .any(|o| matches!(o, Object::Chain(c) if in_table(&c.at, ev) && c.name == ev.chain))
    {
        return false;
    }
    let at = |h: u64| {
        items
            .iter()
            .position(|i| is_rule_of_chain(i, ev) && handle_of(i) == Some(h))
    };
    let existing = at(ev.handle);
    if !ev.add {
        return match existing {
            Some(i) => {
                items.remove(i);
                true
            }
            None => false,
        };
    }
    if existing.is_some() {
        return false;
    }
    let index = match ev.after {
        Some(h) => match at(h) {
            Some(i) => i + 1,
            None => return false,
        },
        None => {
            let mut of_chain = items
                .iter()
                .enumerate()
                .filter(|(_, i)| is_rule_of_chain(i, ev))
                .map(|(n, _)| n);
            let (first, last) = (of_chain.next(), of_chain.next_back());
            match (ev.append, first, last) {
                (_, None, _) => items.len(),
                (false, Some(f), _) => f,
                (true, Some(f), l) => l.unwrap_or(f) + 1,
            }
        }
    };
    let rule = Object::Rule(Rule {
        at: TableRef {
            family: ev.family.to_string(),
            table: ev.table.clone(),
        },
        chain: ev.chain.clone(),
        handle: Some(ev.handle),
        expr: expr.clone(),
    });
    items.insert(index, rule);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ruleset() -> Parsed {
        let v: serde_json::Value = serde_json::from_str(
            r#"{"nftables": [{"table": {"family": "ip", "name": "filter", "handle": 1}},
            {"chain": {"family": "ip", "table": "filter", "name": "FORWARD", "handle": 1}},
            {"rule": {"family": "ip", "table": "filter", "chain": "FORWARD", "handle": 2, "expr": []}},
            {"rule": {"family": "ip", "table": "filter", "chain": "FORWARD", "handle": 3, "expr": []}}]}"#,
        )
        .unwrap();
        Parsed::from_json(&v).unwrap()
    }

    fn handles(v: &Parsed) -> Vec<u64> {
        v.objects.iter().filter_map(handle_of).collect()
    }

    fn event(add: bool, handle: u64, after: Option<u64>, append: bool) -> RuleEvent {
        RuleEvent {
            add,
            family: "ip",
            table: "filter".into(),
            chain: "FORWARD".into(),
            handle,
            after,
            append,
            expr: Ok(vec![]),
        }
    }

    #[test]
    fn rule_events_land_where_the_kernel_put_them() {
        let mut v = ruleset();
        assert!(apply_event(&mut v, &event(true, 4, None, true)));
        assert_eq!(handles(&v), [2, 3, 4]);
        assert!(apply_event(&mut v, &event(true, 5, None, false)));
        assert_eq!(handles(&v), [5, 2, 3, 4]);
        assert!(apply_event(&mut v, &event(true, 6, Some(2), false)));
        assert_eq!(handles(&v), [5, 2, 6, 3, 4]);
        assert!(apply_event(&mut v, &event(false, 3, None, false)));
        assert_eq!(handles(&v), [5, 2, 6, 4]);
        // What does not fit is refused and changes nothing.
        let before = v.clone();
        assert!(!apply_event(&mut v, &event(false, 3, None, false)));
        assert!(!apply_event(&mut v, &event(true, 4, None, true)));
        assert!(!apply_event(&mut v, &event(true, 9, Some(42), true)));
        let mut other = event(true, 9, None, true);
        other.chain = "INPUT".into();
        assert!(!apply_event(&mut v, &other));
        assert_eq!(v, before);
    }
}
