#![allow(clippy::type_complexity)]
//! The filter compiler: the nftables ruleset (as `nft -j list ruleset` prints it; iptables-nft
//! rules live there too) -> the supported subset of the forward chain -> per-field rule
//! bitmaps for the BPF classifier (bpf/fp_filter.h).
//!
//! A rule the fast path cannot evaluate exactly is kept with only the matches it understands
//! (a superset of the packets it matches) and the verdict "kernel": packets that may reach it
//! go to the slow path, so nothing is ever decided differently from Linux.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::{Ipv4Addr, Ipv6Addr};

use serde_json::Value;

use crate::error::{Error, Result};

pub const MAX_RULES: usize = 256;
pub type Bits = [u64; 4];

/// Rule index -> its prefixes on one field (None: any).

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Accept = 0,
    Drop = 1,
    Kernel = 2,
}

/// One rule of the forward chain, reduced to what the classifier can match. None: any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub src4: Option<Vec<(u32, u8)>>,
    pub dst4: Option<Vec<(u32, u8)>>,
    pub src6: Option<Vec<(u128, u8)>>,
    pub dst6: Option<Vec<(u128, u8)>>,
    pub proto: Option<Vec<u8>>,
    pub sport: Option<Vec<(u8, u16)>>,
    pub dport: Option<Vec<(u8, u16)>>,
    pub iif: Option<Vec<String>>,
    pub oif: Option<Vec<String>>,
    pub v4: bool,
    pub v6: bool,
    pub action: Action,
    /// Why the action is Kernel, for status.
    pub unsupported: Option<String>,
}

impl Default for Rule {
    fn default() -> Rule {
        Rule {
            src4: None,
            dst4: None,
            src6: None,
            dst6: None,
            proto: None,
            sport: None,
            dport: None,
            iif: None,
            oif: None,
            v4: true,
            v6: true,
            action: Action::Accept,
            unsupported: None,
        }
    }
}

/// Per address family: no filtering, a compiled chain, or everything to the kernel.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum FamilyFilter {
    #[default]
    Open,
    Compiled {
        policy_drop: bool,
        rules: usize,
    },
    Kernel(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FilterPlan {
    pub v4: FamilyFilter,
    pub v6: FamilyFilter,
    /// The forward chain rules of each family (an inet chain appears in both).
    pub rules_v4: Vec<Rule>,
    pub rules_v6: Vec<Rule>,
}

impl FilterPlan {
    /// From `nft -j list ruleset` output. `legacy_v4`/`legacy_v6`: x_tables (iptables-legacy)
    /// tables exist in this namespace; we cannot watch those, so the family goes to the kernel.
    pub fn from_nft_json(json: &str, legacy_v4: bool, legacy_v6: bool) -> Result<FilterPlan> {
        Self::from_nft_json_with(json, legacy_v4, legacy_v6, &IpsetInfo::default())
    }

    /// As `from_nft_json`, resolving iptables-nft `-m set` matches through `ipsets`.
    pub fn from_nft_json_with(
        json: &str,
        legacy_v4: bool,
        legacy_v6: bool,
        ipsets: &IpsetInfo,
    ) -> Result<FilterPlan> {
        let v: Value =
            serde_json::from_str(json).map_err(|e| Error::Nft(format!("bad JSON: {e}")))?;
        Self::from_nft_value(&v, legacy_v4, legacy_v6, ipsets)
    }

    /// As `from_nft_json_with`, from the ruleset already parsed (the daemon parses it once
    /// per change and reads it three ways).
    pub fn from_nft_value(
        v: &Value,
        legacy_v4: bool,
        legacy_v6: bool,
        ipsets: &IpsetInfo,
    ) -> Result<FilterPlan> {
        let items = v
            .get("nftables")
            .and_then(Value::as_array)
            .ok_or_else(|| Error::Nft("no `nftables` array".into()))?;
        let mut plan = FilterPlan::default();
        let (v4, r4) = family_plan(items, "ip", ipsets);
        let (v6, r6) = family_plan(items, "ip6", ipsets);
        plan.v4 = if legacy_v4 {
            FamilyFilter::Kernel("iptables-legacy tables present".into())
        } else {
            v4
        };
        plan.v6 = if legacy_v6 {
            FamilyFilter::Kernel("ip6tables-legacy tables present".into())
        } else {
            v6
        };
        plan.rules_v4 = r4;
        plan.rules_v6 = r6;
        Ok(plan)
    }
}

fn obj<'a>(item: &'a Value, kind: &str) -> Option<&'a Value> {
    item.get(kind)
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// `fam` is "ip" or "ip6"; tables of that family and of "inet" apply.
fn family_plan(items: &[Value], fam: &str, ipsets: &IpsetInfo) -> (FamilyFilter, Vec<Rule>) {
    let applies = |f: &str| f == fam || f == "inet";
    let mut forward = Vec::new();
    for c in items.iter().filter_map(|i| obj(i, "chain")) {
        let Some(hook) = c.get("hook").and_then(Value::as_str) else {
            continue;
        };
        let family = s(c, "family");
        if family == "netdev" || family == "bridge" {
            return (
                FamilyFilter::Kernel(format!("{family} {hook} chain {}", s(c, "name"))),
                vec![],
            );
        }
        if !applies(family) {
            continue;
        }
        match hook {
            "input" | "output" => {}
            "forward" if s(c, "type") == "filter" => forward.push(c),
            _ => {
                return (
                    FamilyFilter::Kernel(format!(
                        "{family} chain {} at {hook} ({})",
                        s(c, "name"),
                        s(c, "type")
                    )),
                    vec![],
                )
            }
        }
    }
    // An empty accepting chain changes nothing (iptables-nft leaves one after `-F`).
    forward.retain(|c| {
        s(c, "policy") == "drop"
            || items.iter().filter_map(|i| obj(i, "rule")).any(|r| {
                s(r, "family") == s(c, "family")
                    && s(r, "table") == s(c, "table")
                    && s(r, "chain") == s(c, "name")
            })
    });
    if forward.len() > 1 {
        return (
            FamilyFilter::Kernel("more than one forward chain".into()),
            vec![],
        );
    }
    let Some(chain) = forward.first() else {
        return (FamilyFilter::Open, vec![]);
    };
    let (cf, ct, cn) = (s(chain, "family"), s(chain, "table"), s(chain, "name"));
    let policy_drop = s(chain, "policy") == "drop";
    let sets: BTreeMap<&str, &Value> = items
        .iter()
        .filter_map(|i| obj(i, "set"))
        .filter(|st| s(st, "family") == cf && s(st, "table") == ct)
        .map(|st| (s(st, "name"), st))
        .collect();
    let mut rules = Vec::new();
    let mut position = 0;
    for r in items.iter().filter_map(|i| obj(i, "rule")) {
        if s(r, "family") != cf || s(r, "table") != ct || s(r, "chain") != cn {
            continue;
        }
        let xt_set = ipsets.resolve(cf, ct, cn, position);
        position += 1;
        let exprs = r
            .get("expr")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        if let Some(rule) = parse_rule(exprs, &sets, xt_set) {
            if (fam == "ip" && rule.v4) || (fam == "ip6" && rule.v6) {
                rules.push(rule);
            }
        }
    }
    if rules.is_empty() && !policy_drop {
        return (FamilyFilter::Open, vec![]);
    }
    if rules.len() > MAX_RULES {
        return (
            FamilyFilter::Kernel(format!(
                "{} rules (fast path holds {MAX_RULES})",
                rules.len()
            )),
            vec![],
        );
    }
    (
        FamilyFilter::Compiled {
            policy_drop,
            rules: rules.len(),
        },
        rules,
    )
}

fn kernel(rule: &mut Rule, why: String) {
    rule.action = Action::Kernel;
    if rule.unsupported.is_none() {
        rule.unsupported = Some(why);
    }
}

/// One nft rule -> Rule; None for a rule that can never change a verdict (e.g. a bare counter).
fn parse_rule(
    exprs: &[Value],
    sets: &BTreeMap<&str, &Value>,
    xt_set: Option<(&str, &[String], bool)>,
) -> Option<Rule> {
    let mut rule = Rule::default();
    let mut verdict = None;
    for e in exprs {
        let Some((k, body)) = e.as_object().and_then(|o| o.iter().next()) else {
            kernel(&mut rule, "unreadable expression".into());
            continue;
        };
        match k.as_str() {
            "match" => {
                if let Err(why) = parse_match(body, sets, &mut rule) {
                    kernel(&mut rule, why);
                }
            }
            "counter" => {}
            "xt" if s(body, "type") == "match" && s(body, "name") == "set" => {
                if let Err(why) = xt_set_match(xt_set, &mut rule) {
                    kernel(&mut rule, why);
                }
            }
            "accept" => verdict = Some(Action::Accept),
            "drop" => verdict = Some(Action::Drop),
            other => {
                kernel(&mut rule, format!("statement `{other}`"));
                verdict.get_or_insert(Action::Kernel);
            }
        }
    }
    match verdict {
        None if rule.action != Action::Kernel => None,
        Some(v) if rule.action != Action::Kernel => {
            rule.action = v;
            Some(rule)
        }
        _ => Some(rule),
    }
}

/// iptables `-m set --match-set NAME src|dst`, resolved: (family, members, is_src).
fn xt_set_match(
    xt_set: Option<(&str, &[String], bool)>,
    rule: &mut Rule,
) -> std::result::Result<(), String> {
    let (family, members, is_src) = xt_set.ok_or("iptables match `set` not resolved")?;
    let vals: Vec<Value> = members.iter().map(|m| prefix_value(m)).collect();
    let refs: Vec<&Value> = vals.iter().collect();
    if family == "ip" {
        rule.v6 = false;
        let list = collect(&refs, parse_v4)?;
        set_once(
            if is_src {
                &mut rule.src4
            } else {
                &mut rule.dst4
            },
            list,
        )
    } else {
        rule.v4 = false;
        let list = collect(&refs, parse_v6)?;
        set_once(
            if is_src {
                &mut rule.src6
            } else {
                &mut rule.dst6
            },
            list,
        )
    }
}

/// "a.b.c.d/len" -> the JSON shape nft uses for a prefix; a bare address stays a string.
fn prefix_value(m: &str) -> Value {
    match m.split_once('/') {
        Some((addr, len)) => {
            serde_json::json!({"prefix": {"addr": addr, "len": len.parse::<u64>().unwrap_or(999)}})
        }
        None => Value::String(m.to_string()),
    }
}

/// What iptables-nft `-m set` matches refer to: nft shows them as opaque `xt` matches, so
/// the names come from `iptables-nft-save` and the members from `ipset save`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IpsetInfo {
    /// (nft family, table, chain, rule position in the chain) -> (set name, is_src)
    pub matches: BTreeMap<(String, String, String, usize), (String, bool)>,
    /// set name -> members (hash:ip and hash:net sets only)
    pub members: BTreeMap<String, Vec<String>>,
}

/// Where an iptables-nft rule with an xt (compatibility) expression sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XtRule {
    pub family: String,
    pub table: String,
    pub chain: String,
    /// Position among the chain's rules, as `iptables-nft-save` lists them.
    pub position: usize,
    /// The kernel's rule handle, with its table's: rule handles restart in a re-created
    /// table, table handles never repeat in a namespace.
    pub handle: u64,
    pub table_handle: u64,
}

/// The rules of a `nft -j list ruleset` output that carry an xt expression. Their set
/// names are not in the JSON (only in `iptables-nft-save`), so the daemon remembers them by
/// handle and asks the tool again only for a rule it has not seen.
pub fn xt_rules(json: &str) -> Vec<XtRule> {
    match serde_json::from_str::<Value>(json) {
        Ok(v) => xt_rules_of(&v),
        Err(_) => vec![],
    }
}

/// As `xt_rules`, from the parsed ruleset.
pub fn xt_rules_of(v: &Value) -> Vec<XtRule> {
    let mut positions: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    let mut out = Vec::new();
    let items = v.get("nftables").and_then(Value::as_array);
    let table_handles: BTreeMap<(String, String), u64> = items
        .into_iter()
        .flatten()
        .filter_map(|i| i.get("table"))
        .map(|t| {
            let f = |k: &str| t.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            (
                (f("family"), f("name")),
                t.get("handle").and_then(Value::as_u64).unwrap_or(0),
            )
        })
        .collect();
    for r in items.into_iter().flatten().filter_map(|i| i.get("rule")) {
        let field = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let key = (field("family"), field("table"), field("chain"));
        let pos = positions.entry(key.clone()).or_insert(0);
        let has_xt = r
            .get("expr")
            .and_then(Value::as_array)
            .is_some_and(|e| e.iter().any(|x| x.get("xt").is_some()));
        if has_xt {
            out.push(XtRule {
                position: *pos,
                handle: r.get("handle").and_then(Value::as_u64).unwrap_or(0),
                table_handle: table_handles
                    .get(&(key.0.clone(), key.1.clone()))
                    .copied()
                    .unwrap_or(0),
                family: key.0,
                table: key.1,
                chain: key.2,
            });
        }
        *pos += 1;
    }
    out
}

/// (family, table, chain, table handle, rule handle) -> the set match of that xt rule, if
/// it is one.
pub type XtByHandle = BTreeMap<(String, String, String, u64, u64), Option<(String, bool)>>;

impl IpsetInfo {
    /// The set matches of `rules` (from the JSON this info was resolved against), by handle.
    pub fn by_handle(&self, rules: &[XtRule]) -> XtByHandle {
        rules
            .iter()
            .map(|r| {
                let m = self
                    .matches
                    .get(&(
                        r.family.clone(),
                        r.table.clone(),
                        r.chain.clone(),
                        r.position,
                    ))
                    .cloned();
                (
                    (
                        r.family.clone(),
                        r.table.clone(),
                        r.chain.clone(),
                        r.table_handle,
                        r.handle,
                    ),
                    m,
                )
            })
            .collect()
    }

    /// Rebuilds the position-keyed matches for `rules` from `known`; false (and nothing
    /// changed) when a rule is not in `known`.
    pub fn set_matches_from(&mut self, known: &XtByHandle, rules: &[XtRule]) -> bool {
        let mut matches = BTreeMap::new();
        for r in rules {
            let key = (
                r.family.clone(),
                r.table.clone(),
                r.chain.clone(),
                r.table_handle,
                r.handle,
            );
            match known.get(&key) {
                None => return false,
                Some(None) => {}
                Some(Some(m)) => {
                    matches.insert(
                        (
                            r.family.clone(),
                            r.table.clone(),
                            r.chain.clone(),
                            r.position,
                        ),
                        m.clone(),
                    );
                }
            }
        }
        self.matches = matches;
        true
    }

    fn resolve(
        &self,
        family: &str,
        table: &str,
        chain: &str,
        pos: usize,
    ) -> Option<(&str, &[String], bool)> {
        let (name, is_src) = self.matches.get(&(
            family.to_string(),
            table.to_string(),
            chain.to_string(),
            pos,
        ))?;
        let members = self.members.get(name)?;
        let fam = if family == "ip6" { "ip6" } else { "ip" };
        Some((fam, members.as_slice(), *is_src))
    }

    /// Reads `iptables-nft-save` output for nft family `family` ("ip" or "ip6"): the rules
    /// with exactly one `--match-set NAME src|dst` (not negated).
    pub fn add_ipt_save(&mut self, family: &str, text: &str) {
        let mut table = String::new();
        let mut positions: BTreeMap<String, usize> = BTreeMap::new();
        for line in text.lines() {
            if let Some(t) = line.strip_prefix('*') {
                table = t.trim().to_string();
                positions.clear();
                continue;
            }
            let Some(rest) = line.strip_prefix("-A ") else {
                continue;
            };
            let words: Vec<&str> = rest.split_whitespace().collect();
            let Some(chain) = words.first() else { continue };
            let pos = positions.entry(chain.to_string()).or_insert(0);
            let sets: Vec<usize> = words
                .iter()
                .enumerate()
                .filter(|(_, w)| **w == "--match-set")
                .map(|(i, _)| i)
                .collect();
            if let [i] = sets[..] {
                let negated = i > 0 && words[i - 1] == "!";
                if let (Some(name), Some(dir), false) =
                    (words.get(i + 1), words.get(i + 2), negated)
                {
                    if *dir == "src" || *dir == "dst" {
                        self.matches.insert(
                            (family.to_string(), table.clone(), chain.to_string(), *pos),
                            (name.to_string(), *dir == "src"),
                        );
                    }
                }
            }
            *pos += 1;
        }
    }

    /// Reads `ipset save` output.
    pub fn set_ipset_save(&mut self, text: &str) {
        self.members.clear();
        let mut kinds: BTreeMap<&str, &str> = BTreeMap::new();
        for line in text.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            match w.as_slice() {
                ["create", name, kind, ..] => {
                    kinds.insert(name, kind);
                    if matches!(*kind, "hash:ip" | "hash:net") {
                        self.members.insert(name.to_string(), Vec::new());
                    }
                }
                ["add", name, entry, ..] => {
                    if let Some(m) = self.members.get_mut(*name) {
                        m.push(entry.to_string());
                    }
                }
                _ => {}
            }
        }
    }
}

/// The right-hand side of a match as a list of values: a literal, an anonymous set or @named.
fn values<'a>(
    right: &'a Value,
    sets: &BTreeMap<&str, &'a Value>,
) -> std::result::Result<Vec<&'a Value>, String> {
    if let Some(name) = right.as_str().and_then(|x| x.strip_prefix('@')) {
        let set = sets
            .get(name)
            .ok_or_else(|| format!("unknown set @{name}"))?;
        return Ok(match set.get("elem") {
            Some(Value::Array(a)) => a.iter().collect(),
            Some(v) => vec![v],
            None => vec![],
        });
    }
    if let Some(set) = right.get("set") {
        return Ok(match set {
            Value::Array(a) => a.iter().collect(),
            v => vec![v],
        });
    }
    Ok(vec![right])
}

/// Set elements may be wrapped: {"elem": {"val": X, "counter": ...}}.
fn unwrap_elem(v: &Value) -> &Value {
    v.get("elem").and_then(|e| e.get("val")).unwrap_or(v)
}

fn parse_v4(v: &Value) -> std::result::Result<Vec<(u32, u8)>, String> {
    let v = unwrap_elem(v);
    if let Some(a) = v.as_str() {
        let ip: Ipv4Addr = a.parse().map_err(|_| format!("not an IPv4 address: {a}"))?;
        return Ok(vec![(u32::from(ip), 32)]);
    }
    if let Some(p) = v.get("prefix") {
        let ip: Ipv4Addr = s(p, "addr")
            .parse()
            .map_err(|_| format!("bad prefix {p}"))?;
        let len = p
            .get("len")
            .and_then(Value::as_u64)
            .filter(|l| *l <= 32)
            .ok_or("bad prefix length")? as u8;
        return Ok(vec![(mask4(u32::from(ip), len), len)]);
    }
    if let Some(Value::Array(r)) = v.get("range") {
        let lo: Ipv4Addr = r
            .first()
            .and_then(Value::as_str)
            .unwrap_or("")
            .parse()
            .map_err(|_| "bad range")?;
        let hi: Ipv4Addr = r
            .get(1)
            .and_then(Value::as_str)
            .unwrap_or("")
            .parse()
            .map_err(|_| "bad range")?;
        return range_to_prefixes(u32::from(lo) as u128, u32::from(hi) as u128, 32)
            .map(|v| v.into_iter().map(|(a, l)| (a as u32, l)).collect());
    }
    Err(format!("unsupported IPv4 value {v}"))
}

fn parse_v6(v: &Value) -> std::result::Result<Vec<(u128, u8)>, String> {
    let v = unwrap_elem(v);
    if let Some(a) = v.as_str() {
        let ip: Ipv6Addr = a.parse().map_err(|_| format!("not an IPv6 address: {a}"))?;
        return Ok(vec![(u128::from(ip), 128)]);
    }
    if let Some(p) = v.get("prefix") {
        let ip: Ipv6Addr = s(p, "addr")
            .parse()
            .map_err(|_| format!("bad prefix {p}"))?;
        let len = p
            .get("len")
            .and_then(Value::as_u64)
            .filter(|l| *l <= 128)
            .ok_or("bad prefix length")? as u8;
        return Ok(vec![(mask6(u128::from(ip), len), len)]);
    }
    if let Some(Value::Array(r)) = v.get("range") {
        let lo: Ipv6Addr = r
            .first()
            .and_then(Value::as_str)
            .unwrap_or("")
            .parse()
            .map_err(|_| "bad range")?;
        let hi: Ipv6Addr = r
            .get(1)
            .and_then(Value::as_str)
            .unwrap_or("")
            .parse()
            .map_err(|_| "bad range")?;
        return range_to_prefixes(u128::from(lo), u128::from(hi), 128);
    }
    Err(format!("unsupported IPv6 value {v}"))
}

/// Splits [lo, hi] into at most 64 aligned prefixes (more: not worth it, kernel decides).
fn range_to_prefixes(
    mut lo: u128,
    hi: u128,
    bits: u8,
) -> std::result::Result<Vec<(u128, u8)>, String> {
    let mut out = Vec::new();
    while lo <= hi {
        let mut len = bits;
        while len > 0 {
            let size = 1u128 << (bits - len + 1).min(127);
            if !lo.is_multiple_of(size) || lo.checked_add(size - 1).is_none_or(|end| end > hi) {
                break;
            }
            len -= 1;
        }
        out.push((lo, len));
        if out.len() > 64 {
            return Err("address range too fragmented".into());
        }
        let size = 1u128.checked_shl((bits - len) as u32).unwrap_or(0);
        match lo.checked_add(size) {
            Some(n) if size != 0 => lo = n,
            _ => break,
        }
    }
    Ok(out)
}

pub fn mask4(a: u32, len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        a & (u32::MAX << (32 - len as u32))
    }
}

pub fn mask6(a: u128, len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        a & (u128::MAX << (128 - len as u32))
    }
}

fn proto_num(v: &Value) -> std::result::Result<u8, String> {
    let v = unwrap_elem(v);
    if let Some(n) = v.as_u64() {
        return u8::try_from(n).map_err(|_| "bad protocol".into());
    }
    match v.as_str() {
        Some("tcp") => Ok(6),
        Some("udp") => Ok(17),
        Some("icmp") => Ok(1),
        Some("ipv6-icmp") | Some("icmpv6") => Ok(58),
        Some("sctp") => Ok(132),
        _ => Err(format!("unsupported protocol {v}")),
    }
}

fn ports(v: &Value) -> std::result::Result<Vec<u16>, String> {
    let v = unwrap_elem(v);
    if let Some(n) = v.as_u64() {
        return Ok(vec![u16::try_from(n).map_err(|_| "bad port")?]);
    }
    if let Some(Value::Array(r)) = v.get("range") {
        let lo = r.first().and_then(Value::as_u64).ok_or("bad port range")?;
        let hi = r.get(1).and_then(Value::as_u64).ok_or("bad port range")?;
        if hi < lo || hi > 65535 || hi - lo > 256 {
            return Err("port range too wide for the fast path".into());
        }
        return Ok((lo as u16..=hi as u16).collect());
    }
    Err(format!("unsupported port value {v}"))
}

fn collect<T>(
    vals: &[&Value],
    f: impl Fn(&Value) -> std::result::Result<Vec<T>, String>,
) -> std::result::Result<Vec<T>, String> {
    let mut out = Vec::new();
    for v in vals {
        out.extend(f(v)?);
    }
    Ok(out)
}

/// Sets a field once; a second constraint on the same field is an intersection we do not
/// compute: keep the first (a superset) and let the kernel decide.
fn set_once<T>(slot: &mut Option<T>, v: T) -> std::result::Result<(), String> {
    if slot.is_some() {
        return Err("two matches on one field".into());
    }
    *slot = Some(v);
    Ok(())
}

fn parse_match(
    m: &Value,
    sets: &BTreeMap<&str, &Value>,
    rule: &mut Rule,
) -> std::result::Result<(), String> {
    let op = s(m, "op");
    let left = m.get("left").ok_or("match without left side")?;
    // An address-family header match holds only for its family whatever the operator: nft
    // gives it an nfproto dependency (listed or not), so `ip saddr != X` never sees IPv6.
    match left.get("payload").map(|p| s(p, "protocol")) {
        Some("ip") => rule.v6 = false,
        Some("ip6") => rule.v4 = false,
        _ => {}
    }
    if op != "==" && op != "in" {
        return Err(format!("operator `{op}`"));
    }
    let right = m.get("right").ok_or("match without right side")?;
    let vals = values(right, sets)?;
    if let Some(p) = left.get("payload") {
        let (proto, field) = (s(p, "protocol"), s(p, "field"));
        match (proto, field) {
            ("ip", "saddr") => {
                rule.v6 = false;
                set_once(&mut rule.src4, collect(&vals, parse_v4)?)
            }
            ("ip", "daddr") => {
                rule.v6 = false;
                set_once(&mut rule.dst4, collect(&vals, parse_v4)?)
            }
            ("ip", "protocol") => {
                rule.v6 = false;
                set_once(
                    &mut rule.proto,
                    collect(&vals, |v| proto_num(v).map(|p| vec![p]))?,
                )
            }
            ("ip6", "saddr") => {
                rule.v4 = false;
                set_once(&mut rule.src6, collect(&vals, parse_v6)?)
            }
            ("ip6", "daddr") => {
                rule.v4 = false;
                set_once(&mut rule.dst6, collect(&vals, parse_v6)?)
            }
            ("tcp" | "udp", "sport" | "dport") => {
                let pn = if proto == "tcp" { 6 } else { 17 };
                let list: Vec<(u8, u16)> = collect(&vals, ports)?
                    .into_iter()
                    .map(|p| (pn, p))
                    .collect();
                match &rule.proto {
                    Some(ps) if !ps.contains(&pn) => return Err("contradictory protocol".into()),
                    Some(_) => {}
                    None => rule.proto = Some(vec![pn]),
                }
                if field == "sport" {
                    set_once(&mut rule.sport, list)
                } else {
                    set_once(&mut rule.dport, list)
                }
            }
            _ => Err(format!("payload match {proto} {field}")),
        }
    } else if let Some(meta) = left.get("meta") {
        match s(meta, "key") {
            "l4proto" => {
                let list = collect(&vals, |v| proto_num(v).map(|p| vec![p]))?;
                match &mut rule.proto {
                    // `tcp dport` came first and already implies the protocol
                    Some(ps) => {
                        ps.retain(|p| list.contains(p));
                        Ok(())
                    }
                    None => set_once(&mut rule.proto, list),
                }
            }
            "iifname" => set_once(&mut rule.iif, collect(&vals, name)?),
            "oifname" => set_once(&mut rule.oif, collect(&vals, name)?),
            "nfproto" => {
                let fams = collect(&vals, name)?;
                rule.v4 &= fams.iter().any(|f| f == "ipv4");
                rule.v6 &= fams.iter().any(|f| f == "ipv6");
                Ok(())
            }
            k => Err(format!("meta {k}")),
        }
    } else {
        Err(format!("match on {left}"))
    }
}

fn name(v: &Value) -> std::result::Result<Vec<String>, String> {
    let v = unwrap_elem(v);
    match v.as_str() {
        Some(n) if !n.contains('*') => Ok(vec![n.to_string()]),
        _ => Err(format!("unsupported name match {v}")),
    }
}

/// The classifier tables for one ingress interface: every map of bpf/fp_filter.h.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tables {
    pub src4: Vec<((u32, u8), Bits)>,
    pub dst4: Vec<((u32, u8), Bits)>,
    pub src6: Vec<((u128, u8), Bits)>,
    pub dst6: Vec<((u128, u8), Bits)>,
    /// index family*256 + protocol -> rules (all 512 entries)
    pub proto: Vec<Bits>,
    pub sport: Vec<((u8, u16), Bits)>,
    pub dport: Vec<((u8, u16), Bits)>,
    pub oif: Vec<(u32, Bits)>,
    /// Wildcards (the rules with no constraint on the field) of proto, sport, dport, oif;
    /// then the live IPv4 rules, the live IPv6 rules; then the wildcards of src and dst.
    /// Field entries above hold only the rules constraining their field.
    pub defaults: [Bits; 8],
    pub actions: Vec<u32>,
}

fn set_bit(b: &mut Bits, i: usize) {
    b[i / 64] |= 1 << (i % 64);
}

/// Rule bits by prefix: a prefix's entry holds every rule constraining the address with a
/// prefix containing it, so the longest match the LPM trie returns carries all the
/// constraining rules that match the address. The /0 entry is always there (a lookup never
/// misses). Unconstrained rules are the field's wildcard, not in any entry.
fn lpm_entries<A: Copy + Ord + std::hash::Hash>(
    rules: &[(usize, &Vec<(A, u8)>)],
    mask: impl Fn(A, u8) -> A,
    zero: A,
) -> Vec<((A, u8), Bits)> {
    let mut prefixes: BTreeSet<(A, u8)> = BTreeSet::new();
    prefixes.insert((zero, 0));
    // Per rule: its prefixes, and the few distinct lengths among them (an ipset of hosts has
    // one), so containment is tested per length the rule uses, not for all 33 or 129.
    let mut per_rule: Vec<(usize, HashSet<(A, u8)>, BTreeSet<u8>)> = Vec::new();
    for (i, ps) in rules {
        prefixes.extend(ps.iter().copied());
        let lens = ps.iter().map(|p| p.1).collect();
        per_rule.push((*i, ps.iter().copied().collect(), lens));
    }
    prefixes
        .into_iter()
        .map(|(a, len)| {
            let mut bits = [0u64; 4];
            for (i, set, lens) in &per_rule {
                if lens.range(..=len).any(|&l| set.contains(&(mask(a, l), l))) {
                    set_bit(&mut bits, *i);
                }
            }
            ((a, len), bits)
        })
        .collect()
}

pub const FIELD_SRC: u8 = 1 << 0;
pub const FIELD_DST: u8 = 1 << 1;
pub const FIELD_PROTO: u8 = 1 << 2;
pub const FIELD_SPORT: u8 = 1 << 3;
pub const FIELD_DPORT: u8 = 1 << 4;
pub const FIELD_OIF: u8 = 1 << 5;

impl FilterPlan {
    /// Whether some rule matches on the input interface: only then do two ports' tables
    /// differ.
    pub fn uses_iif(&self) -> bool {
        self.rules_v4
            .iter()
            .chain(&self.rules_v6)
            .any(|r| r.iif.is_some())
    }

    /// The fields some rule constrains (FIELD_*): the program looks up only these.
    pub fn fields(&self) -> u8 {
        let mut f = 0;
        for r in self.rules_v4.iter().chain(&self.rules_v6) {
            if r.src4.is_some() || r.src6.is_some() {
                f |= FIELD_SRC;
            }
            if r.dst4.is_some() || r.dst6.is_some() {
                f |= FIELD_DST;
            }
            if r.proto.is_some() {
                f |= FIELD_PROTO;
            }
            if r.sport.is_some() {
                f |= FIELD_SPORT;
            }
            if r.dport.is_some() {
                f |= FIELD_DPORT;
            }
            if r.oif.is_some() {
                f |= FIELD_OIF;
            }
        }
        f
    }

    /// Compiles both families' chains for traffic entering `iif`. `ifindex_of` resolves
    /// oifname matches to interface indexes.
    pub fn tables(&self, iif: &str, ifindex_of: &dyn Fn(&str) -> Option<u32>) -> Tables {
        let mut t = Tables {
            proto: vec![[0; 4]; 512],
            ..Tables::default()
        };
        // One numbering for both families: v4 rules first, then v6 rules. Each family's LPM
        // maps hold only its own rules, so the AND never mixes them.
        let rules: Vec<(bool, &Rule)> = self
            .rules_v4
            .iter()
            .map(|r| (true, r))
            .chain(self.rules_v6.iter().map(|r| (false, r)))
            .collect();
        let rules = &rules[..rules.len().min(MAX_RULES)];
        let live = |r: &Rule| r.iif.as_ref().is_none_or(|l| l.iter().any(|n| n == iif));
        // Slots of `defaults` (bpf/fp_filter.h, enum filter_field).
        const PROTO: usize = 0;
        const SPORT: usize = 1;
        const DPORT: usize = 2;
        const OIF: usize = 3;
        const BASE4: usize = 4;
        const BASE6: usize = 5;
        const SRC: usize = 6;
        const DST: usize = 7;
        let mut d = [[0u64; 4]; 8];
        // The constraining rules of one family's address field, and that field's wildcard.
        // Rules not live on `iif` stay out of the entries (the base bitmaps drop them anyway).
        let mut constrained = |v4: bool, pick: &dyn Fn(&Rule) -> bool, wild: usize| -> Vec<usize> {
            let mut out = Vec::new();
            for (i, (is_v4, r)) in rules.iter().enumerate() {
                if *is_v4 != v4 || !live(r) {
                    continue;
                }
                if pick(r) {
                    out.push(i);
                } else {
                    set_bit(&mut d[wild], i);
                }
            }
            out
        };
        let src4 = constrained(true, &|r| r.src4.is_some(), SRC);
        let dst4 = constrained(true, &|r| r.dst4.is_some(), DST);
        let src6 = constrained(false, &|r| r.src6.is_some(), SRC);
        let dst6 = constrained(false, &|r| r.dst6.is_some(), DST);
        let pick4 = |ix: &[usize], f: fn(&Rule) -> &Option<Vec<(u32, u8)>>| {
            ix.iter()
                .filter_map(|&i| f(rules[i].1).as_ref().map(|p| (i, p)))
                .collect::<Vec<_>>()
        };
        let pick6 = |ix: &[usize], f: fn(&Rule) -> &Option<Vec<(u128, u8)>>| {
            ix.iter()
                .filter_map(|&i| f(rules[i].1).as_ref().map(|p| (i, p)))
                .collect::<Vec<_>>()
        };
        t.src4 = lpm_entries(&pick4(&src4, |r| &r.src4), mask4, 0);
        t.dst4 = lpm_entries(&pick4(&dst4, |r| &r.dst4), mask4, 0);
        t.src6 = lpm_entries(&pick6(&src6, |r| &r.src6), mask6, 0);
        t.dst6 = lpm_entries(&pick6(&dst6, |r| &r.dst6), mask6, 0);

        for (i, (_, r)) in rules.iter().enumerate() {
            match &r.proto {
                Some(ps) => {
                    for &p in ps {
                        for fam in 0..2 {
                            set_bit(&mut t.proto[fam * 256 + p as usize], i);
                        }
                    }
                }
                None => set_bit(&mut d[PROTO], i),
            }
            t.actions.push(r.action as u32);
        }
        let ports = |pick: &dyn Fn(&Rule) -> Option<&Vec<(u8, u16)>>, wild: &mut Bits| {
            let mut by_key: BTreeMap<(u8, u16), Bits> = BTreeMap::new();
            for (i, (_, r)) in rules.iter().enumerate() {
                match pick(r) {
                    Some(keys) => {
                        for k in keys {
                            set_bit(by_key.entry(*k).or_default(), i);
                        }
                    }
                    None => set_bit(wild, i),
                }
            }
            by_key.into_iter().collect()
        };
        t.sport = ports(&|r| r.sport.as_ref(), &mut d[SPORT]);
        t.dport = ports(&|r| r.dport.as_ref(), &mut d[DPORT]);
        let mut by_oif: BTreeMap<u32, Bits> = BTreeMap::new();
        for (i, (_, r)) in rules.iter().enumerate() {
            match &r.oif {
                Some(names) => {
                    for idx in names.iter().filter_map(|n| ifindex_of(n)) {
                        set_bit(by_oif.entry(idx).or_default(), i);
                    }
                }
                None => set_bit(&mut d[OIF], i),
            }
        }
        t.oif = by_oif.into_iter().collect();
        for (i, (v4, r)) in rules.iter().enumerate() {
            if live(r) {
                set_bit(&mut d[if *v4 { BASE4 } else { BASE6 }], i);
            }
        }
        t.defaults = d;
        t
    }
}

/// Evaluates tables the way the BPF classifier does (for tests and the harness's oracle).
#[allow(clippy::too_many_arguments)]
pub fn classify(
    t: &Tables,
    v6: bool,
    src: u128,
    dst: u128,
    proto: u8,
    sport: u16,
    dport: u16,
    oif: u32,
    policy_drop: bool,
) -> Action {
    let lpm4 = |m: &[((u32, u8), Bits)], a: u32| {
        m.iter()
            .filter(|((p, l), _)| mask4(a, *l) == *p)
            .max_by_key(|((_, l), _)| *l)
            .map(|(_, b)| *b)
    };
    let lpm6 = |m: &[((u128, u8), Bits)], a: u128| {
        m.iter()
            .filter(|((p, l), _)| mask6(a, *l) == *p)
            .max_by_key(|((_, l), _)| *l)
            .map(|(_, b)| *b)
    };
    let (s, d) = if v6 {
        (lpm6(&t.src6, src), lpm6(&t.dst6, dst))
    } else {
        (lpm4(&t.src4, src as u32), lpm4(&t.dst4, dst as u32))
    };
    let (Some(s), Some(d)) = (s, d) else {
        return Action::Kernel;
    };
    let (sp, dp) = if proto == 6 || proto == 17 {
        (sport, dport)
    } else {
        (0, 0)
    };
    let port = |m: &[((u8, u16), Bits)], k: (u8, u16)| {
        m.iter().find(|(x, _)| *x == k).map_or([0; 4], |(_, b)| *b)
    };
    let p = t.proto[(v6 as usize) * 256 + proto as usize];
    let spb = port(&t.sport, (proto, sp));
    let dpb = port(&t.dport, (proto, dp));
    let ob = t
        .oif
        .iter()
        .find(|(i, _)| *i == oif)
        .map_or([0; 4], |(_, b)| *b);
    let base = t.defaults[if v6 { 5 } else { 4 }];
    // Each field: the constraining rules its value selects, or the rules it leaves free.
    let wild = &t.defaults;
    for w in 0..4 {
        let x = base[w]
            & (s[w] | wild[6][w])
            & (d[w] | wild[7][w])
            & (p[w] | wild[0][w])
            & (spb[w] | wild[1][w])
            & (dpb[w] | wild[2][w])
            & (ob[w] | wild[3][w]);
        if x != 0 {
            let rule = w * 64 + x.trailing_zeros() as usize;
            return match t.actions.get(rule) {
                Some(0) => Action::Accept,
                Some(1) => Action::Drop,
                _ => Action::Kernel,
            };
        }
    }
    if policy_drop {
        Action::Drop
    } else {
        Action::Accept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULESET: &str = r#"{"nftables": [
      {"metainfo": {"version": "1.0.6", "json_schema_version": 1}},
      {"table": {"family": "inet", "name": "gw", "handle": 1}},
      {"chain": {"family": "inet", "table": "gw", "name": "fwd", "handle": 1, "type": "filter", "hook": "forward", "prio": 0, "policy": "accept"}},
      {"chain": {"family": "inet", "table": "gw", "name": "in", "handle": 2, "type": "filter", "hook": "input", "prio": 0, "policy": "accept"}},
      {"set": {"family": "inet", "name": "bad", "table": "gw", "type": "ipv4_addr", "handle": 3, "flags": ["interval"],
               "elem": [{"prefix": {"addr": "198.19.5.0", "len": 24}}, "198.19.9.9", {"range": ["198.19.10.0", "198.19.10.3"]}]}},
      {"rule": {"family": "inet", "table": "gw", "chain": "fwd", "handle": 4, "expr": [
         {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": "198.18.0.66"}}, {"counter": {"packets": 0, "bytes": 0}}, {"drop": null}]}},
      {"rule": {"family": "inet", "table": "gw", "chain": "fwd", "handle": 5, "expr": [
         {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": "@bad"}}, {"drop": null}]}},
      {"rule": {"family": "inet", "table": "gw", "chain": "fwd", "handle": 6, "expr": [
         {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": {"set": [22, 23]}}}, {"drop": null}]}},
      {"rule": {"family": "inet", "table": "gw", "chain": "fwd", "handle": 7, "expr": [
         {"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": ["established"]}}, {"accept": null}]}},
      {"rule": {"family": "inet", "table": "gw", "chain": "fwd", "handle": 8, "expr": [
         {"match": {"op": "==", "left": {"payload": {"protocol": "ip6", "field": "saddr"}}, "right": {"prefix": {"addr": "fd00:66::", "len": 32}}}}, {"drop": null}]}},
      {"rule": {"family": "inet", "table": "gw", "chain": "fwd", "handle": 9, "expr": [
         {"match": {"op": "==", "left": {"meta": {"key": "oifname"}}, "right": "d9"}},
         {"match": {"op": "==", "left": {"payload": {"protocol": "udp", "field": "dport"}}, "right": 53}}, {"accept": null}]}}
    ]}"#;

    fn v4(s: &str) -> u128 {
        u32::from(s.parse::<Ipv4Addr>().unwrap()) as u128
    }

    #[test]
    fn parses_the_supported_subset_and_marks_the_rest_for_the_kernel() {
        let p = FilterPlan::from_nft_json(RULESET, false, false).unwrap();
        assert_eq!(
            p.v4,
            FamilyFilter::Compiled {
                policy_drop: false,
                rules: 5
            }
        );
        assert_eq!(
            p.v6,
            FamilyFilter::Compiled {
                policy_drop: false,
                rules: 4
            }
        );
        assert_eq!(p.rules_v4[1].dst4.as_ref().unwrap().len(), 3); // /24, /32, range -> /30
        assert_eq!(p.rules_v4[3].action, Action::Kernel);
        assert_eq!(p.rules_v4[2].dport, Some(vec![(6, 22), (6, 23)]));
    }

    #[test]
    fn a_negated_address_match_still_names_its_family() {
        let json = r#"{"nftables": [
          {"chain": {"family": "inet", "table": "t", "name": "fw", "hook": "forward", "type": "filter", "policy": "accept"}},
          {"rule": {"family": "inet", "table": "t", "chain": "fw", "expr": [
            {"match": {"op": "!=", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": "198.18.0.1"}},
            {"drop": null}]}}]}"#;
        let plan = FilterPlan::from_nft_json(json, false, false).unwrap();
        assert_eq!(plan.rules_v4.len(), 1);
        assert_eq!(plan.rules_v4[0].action, Action::Kernel);
        // IPv6 packets never match an `ip saddr` rule: no reason to send them to the kernel.
        assert!(plan.rules_v6.is_empty(), "{:?}", plan.rules_v6);
    }

    #[test]
    fn classifies_in_chain_order() {
        let p = FilterPlan::from_nft_json(RULESET, false, false).unwrap();
        let t = p.tables("d0", &|n| (n == "d9").then_some(9));
        let c = |src: &str, dst: &str, proto, dport, oif| {
            classify(&t, false, v4(src), v4(dst), proto, 1000, dport, oif, false)
        };
        assert_eq!(c("198.18.0.66", "198.19.1.1", 17, 80, 3), Action::Drop);
        assert_eq!(c("198.18.0.1", "198.19.5.77", 17, 80, 3), Action::Drop);
        assert_eq!(c("198.18.0.1", "198.19.9.9", 17, 80, 3), Action::Drop);
        assert_eq!(c("198.18.0.1", "198.19.10.3", 17, 80, 3), Action::Drop);
        assert_eq!(c("198.18.0.1", "198.19.10.4", 6, 22, 3), Action::Drop);
        // reaches the ct rule: conntrack is the kernel's
        assert_eq!(c("198.18.0.1", "198.19.10.4", 6, 80, 3), Action::Kernel);
        let c6 = |src: &str, proto, dport, oif| {
            classify(
                &t,
                true,
                u128::from(src.parse::<Ipv6Addr>().unwrap()),
                1,
                proto,
                1,
                dport,
                oif,
                false,
            )
        };
        assert_eq!(
            c6("fd00:66::1", 17, 53, 9),
            Action::Kernel,
            "ct rule comes before"
        );
        assert_eq!(c6("fd00:66::1", 6, 22, 9), Action::Drop);
    }

    #[test]
    fn other_hooks_and_legacy_tables_send_the_family_to_the_kernel() {
        let nat = r#"{"nftables": [{"chain": {"family": "ip", "table": "nat", "name": "post", "type": "nat", "hook": "postrouting", "prio": 100, "policy": "accept"}}]}"#;
        let p = FilterPlan::from_nft_json(nat, false, true).unwrap();
        assert!(matches!(p.v4, FamilyFilter::Kernel(_)));
        assert!(matches!(p.v6, FamilyFilter::Kernel(_)));
        let empty = r#"{"nftables": [{"metainfo": {}}]}"#;
        let p = FilterPlan::from_nft_json(empty, false, false).unwrap();
        assert_eq!((p.v4, p.v6), (FamilyFilter::Open, FamilyFilter::Open));
        assert!(FilterPlan::from_nft_json("not json", false, false).is_err());
    }

    #[test]
    fn hundred_rules_compile_and_the_first_match_wins() {
        let mut items = vec![r#"{"chain": {"family": "ip", "table": "f", "name": "FORWARD", "type": "filter", "hook": "forward", "prio": 0, "policy": "accept"}}"#.to_string()];
        for i in 0..100 {
            items.push(format!(r#"{{"rule": {{"family": "ip", "table": "f", "chain": "FORWARD", "expr": [{{"match": {{"op": "==", "left": {{"payload": {{"protocol": "ip", "field": "daddr"}}}}, "right": "198.19.{}.{}"}}}}, {{"counter": null}}, {{"drop": null}}]}}}}"#, i / 250, i % 250 + 1));
        }
        let json = format!(r#"{{"nftables": [{}]}}"#, items.join(","));
        let p = FilterPlan::from_nft_json(&json, false, false).unwrap();
        assert_eq!(
            p.v4,
            FamilyFilter::Compiled {
                policy_drop: false,
                rules: 100
            }
        );
        let t = p.tables("d0", &|_| None);
        assert_eq!(
            classify(
                &t,
                false,
                v4("198.18.0.1"),
                v4("198.19.0.77"),
                17,
                1,
                2,
                3,
                false
            ),
            Action::Drop
        );
        assert_eq!(
            classify(
                &t,
                false,
                v4("198.18.0.1"),
                v4("198.19.0.101"),
                17,
                1,
                2,
                3,
                false
            ),
            Action::Accept
        );
        // only destinations are matched: the program skips every other lookup
        assert_eq!(p.fields(), FIELD_DST);
    }

    #[test]
    fn a_rule_added_on_one_field_touches_that_field_and_the_wildcards_only() {
        let chain = r#"{"chain": {"family": "ip", "table": "f", "name": "FORWARD", "type": "filter", "hook": "forward", "prio": 0, "policy": "accept"}}"#;
        let rule = |field: &str, addr: &str| {
            format!(
                r#"{{"rule": {{"family": "ip", "table": "f", "chain": "FORWARD", "expr": [{{"match": {{"op": "==", "left": {{"payload": {{"protocol": "ip", "field": "{field}"}}}}, "right": "{addr}"}}}}, {{"drop": null}}]}}}}"#
            )
        };
        let mut items = vec![chain.to_string()];
        items.extend((0..100).map(|i| rule("saddr", &format!("198.18.1.{i}"))));
        items.push(r#"{"rule": {"family": "ip", "table": "f", "chain": "FORWARD", "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 22}}, {"drop": null}]}}"#.to_string());
        let before = format!(r#"{{"nftables": [{}]}}"#, items.join(","));
        items.push(rule("daddr", "198.19.44.1"));
        let after = format!(r#"{{"nftables": [{}]}}"#, items.join(","));
        let compile = |json: &str| {
            FilterPlan::from_nft_json(json, false, false)
                .unwrap()
                .tables("d0", &|_| None)
        };
        let (a, b) = (compile(&before), compile(&after));
        // The 100 source entries, the 512 protocol slots and the port entries stay as they
        // are: only the destination trie gains the new prefix, the wildcards of the other
        // fields gain the rule, and its verdict is appended.
        assert_eq!(a.src4, b.src4);
        assert_eq!(a.proto, b.proto);
        assert_eq!(a.dport, b.dport);
        assert_eq!(b.dst4.len(), a.dst4.len() + 1);
        assert_eq!(b.actions.len(), a.actions.len() + 1);
        // Same verdicts as the chain: the new rule drops its destination, the old ones hold.
        let go = |t: &Tables, src: &str, dst: &str, dport: u16| {
            classify(t, false, v4(src), v4(dst), 6, 1000, dport, 3, false)
        };
        for t in [&a, &b] {
            assert_eq!(go(t, "198.18.1.7", "198.19.0.1", 80), Action::Drop);
            assert_eq!(go(t, "198.18.2.7", "198.19.0.1", 22), Action::Drop);
            assert_eq!(go(t, "198.18.2.7", "198.19.0.1", 80), Action::Accept);
        }
        assert_eq!(go(&a, "198.18.2.7", "198.19.44.1", 80), Action::Accept);
        assert_eq!(go(&b, "198.18.2.7", "198.19.44.1", 80), Action::Drop);
    }

    #[test]
    fn iptables_set_matches_resolve_through_ipset() {
        let json = r#"{"nftables": [
          {"chain": {"family": "ip", "table": "filter", "name": "FORWARD", "type": "filter", "hook": "forward", "prio": 0, "policy": "accept"}},
          {"rule": {"family": "ip", "table": "filter", "chain": "FORWARD", "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": "198.19.0.1"}}, {"counter": null}, {"drop": null}]}},
          {"rule": {"family": "ip", "table": "filter", "chain": "FORWARD", "expr": [{"xt": {"type": "match", "name": "set"}}, {"counter": null}, {"drop": null}]}}
        ]}"#;
        let save = "*filter\n:FORWARD ACCEPT [0:0]\n-A FORWARD -d 198.19.0.1/32 -j DROP\n-A FORWARD -m set --match-set blk dst -j DROP\nCOMMIT\n";
        let mut info = IpsetInfo::default();
        info.add_ipt_save("ip", save);
        // unresolved members: the rule goes to the kernel
        let p = FilterPlan::from_nft_json_with(json, false, false, &info).unwrap();
        assert_eq!(p.rules_v4[1].action, Action::Kernel);
        info.set_ipset_save("create blk hash:net family inet hashsize 1024 maxelem 65536\nadd blk 198.19.5.0/24\nadd blk 198.19.9.9\n");
        let p = FilterPlan::from_nft_json_with(json, false, false, &info).unwrap();
        assert_eq!(p.rules_v4[1].action, Action::Drop);
        assert_eq!(
            p.rules_v4[1].dst4,
            Some(vec![
                (u32::from(Ipv4Addr::new(198, 19, 5, 0)), 24),
                (u32::from(Ipv4Addr::new(198, 19, 9, 9)), 32)
            ])
        );
    }

    #[test]
    fn ranges_split_into_aligned_prefixes() {
        assert_eq!(range_to_prefixes(8, 11, 32).unwrap(), vec![(8, 30)]);
        assert_eq!(range_to_prefixes(7, 8, 32).unwrap(), vec![(7, 32), (8, 32)]);
        assert_eq!(
            range_to_prefixes(0, u32::MAX as u128, 32).unwrap(),
            vec![(0, 0)]
        );
    }

    #[test]
    fn xt_set_matches_follow_their_rules_by_handle() {
        let ruleset = |rules: &[(u64, bool)], table_handle: u64| {
            let mut items = vec![format!(
                r#"{{"table": {{"family": "ip", "name": "filter", "handle": {table_handle}}}}}"#
            )];
            for (h, xt) in rules {
                let expr = if *xt {
                    r#"[{"xt": {"type": "match", "name": "set"}}, {"drop": null}]"#
                } else {
                    r#"[{"drop": null}]"#
                };
                items.push(format!(
                    r#"{{"rule": {{"family": "ip", "table": "filter", "chain": "FORWARD", "handle": {h}, "expr": {expr}}}}}"#
                ));
            }
            format!(r#"{{"nftables": [{}]}}"#, items.join(","))
        };
        let j1 = ruleset(&[(4, false), (5, true), (6, true)], 1);
        let xt1 = xt_rules(&j1);
        assert_eq!(
            xt1.iter()
                .map(|r| (r.position, r.handle))
                .collect::<Vec<_>>(),
            vec![(1, 5), (2, 6)]
        );
        let mut info = IpsetInfo::default();
        info.add_ipt_save(
            "ip",
            "*filter\n-A FORWARD -d 1.2.3.4/32 -j DROP\n-A FORWARD -m set --match-set blk src -j DROP\n-A FORWARD -m comment --comment x -j DROP\nCOMMIT\n",
        );
        let known = info.by_handle(&xt1);
        // The first rule deleted: the set match moves up a position, by handle.
        let j2 = ruleset(&[(5, true), (6, true)], 1);
        let mut info2 = IpsetInfo::default();
        assert!(info2.set_matches_from(&known, &xt_rules(&j2)));
        let key = |pos| {
            (
                "ip".to_string(),
                "filter".to_string(),
                "FORWARD".to_string(),
                pos,
            )
        };
        assert_eq!(info2.matches.get(&key(0)), Some(&("blk".to_string(), true)));
        assert_eq!(info2.matches.len(), 1);
        // A new xt rule, or the same handles in a re-created table: ask the tool again.
        assert!(!info2.set_matches_from(&known, &xt_rules(&ruleset(&[(5, true), (7, true)], 1))));
        assert!(!info2.set_matches_from(&known, &xt_rules(&ruleset(&[(5, true), (6, true)], 9))));
    }
}
