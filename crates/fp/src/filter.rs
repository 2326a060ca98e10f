#![allow(clippy::type_complexity)]
//! The filter compiler: the nftables ruleset (as `nft -j list ruleset` prints it; iptables-nft
//! rules live there too) -> the supported subset of the forward chain -> per-field rule
//! bitmaps for the BPF classifier (bpf/fp_filter.h).
//!
//! A rule the fast path cannot evaluate exactly is kept with only the matches it understands
//! (a superset of the packets it matches) and the verdict "kernel": packets that may reach it
//! go to the slow path, so nothing is ever decided differently from Linux.

pub mod classify;
pub mod expr;
pub mod rules;
pub mod ruleset;
pub mod xt;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::filter::expr::{Datum, Expr, Key, Op, Rhs, Verdict, Xt};
use crate::filter::rules::{Object, Ruleset};

pub use crate::filter::xt::{xt_rules, xt_rules_of, IpsetInfo, XtByHandle, XtRule};

pub const MAX_RULES: usize = crate::consts::FILTER_MAX_RULES;
pub type Bits = [u64; crate::consts::FILTER_WORDS];

/// Rule index -> its prefixes on one field (None: any).

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Accept = 0,
    Drop = 1,
    Kernel = 2,
}

/// Where a rule lives in the ruleset, as `nft -a list ruleset` shows it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RuleId {
    pub family: String,
    pub table: String,
    pub chain: String,
    pub handle: u64,
}

/// A rule not counted by the fast path (fp_filter.h FILTER_HIT_NONE).
pub const NO_SLOT: u32 = crate::consts::FILTER_HIT_NONE as u32;

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
    /// The nftables rule it came from (None: a rule built by hand, in tests).
    pub id: Option<RuleId>,
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
            id: None,
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
    /// Why conntrack may be on for each family ([`reassembly`]): it then tracks every
    /// forwarded packet and reassembles its fragments before the kernel routes them, so the
    /// family is the kernel's; None: no rule of the ruleset needs it.
    pub reassembly_v4: Option<String>,
    pub reassembly_v6: Option<String>,
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

    /// As `from_nft_json_with`, from the ruleset already parsed.
    pub fn from_nft_value(
        v: &Value,
        legacy_v4: bool,
        legacy_v6: bool,
        ipsets: &IpsetInfo,
    ) -> Result<FilterPlan> {
        let ruleset = Ruleset::from_json(v).map_err(Error::Nft)?;
        Ok(Self::from_ruleset(&ruleset, legacy_v4, legacy_v6, ipsets))
    }

    /// From the typed ruleset (the daemon keeps one, read or edited by rule events, and
    /// compiles it again when ipset members change).
    pub fn from_ruleset(
        ruleset: &Ruleset,
        legacy_v4: bool,
        legacy_v6: bool,
        ipsets: &IpsetInfo,
    ) -> FilterPlan {
        let items = &ruleset.objects;
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
        plan.reassembly_v4 = reassembly(items, "ip");
        plan.reassembly_v6 = reassembly(items, "ip6");
        plan
    }
}

/// Why conntrack may be on for family `fam` ("ip" or "ip6") in this namespace: the first rule
/// of that family or of "inet", in any chain (input and output too), that matches on a
/// conntrack key (`ct state`, ...), uses an iptables-nft match or target other than
/// `-m set`, or holds an expression we do not read. Conntrack's first user in a namespace
/// registers its defrag hook, which reassembles every fragment of the family before routing
/// (forwarded ones too): the kernel then holds a fragment until its datagram is whole, and
/// drops one whose datagram never completes.
fn reassembly(objects: &[Object], fam: &str) -> Option<String> {
    objects.iter().find_map(|o| match o {
        Object::Rule(r) if r.at.family == fam || r.at.family == "inet" => r
            .expr
            .iter()
            .find_map(|e| match e {
                Expr::Match {
                    key: Key::Other(what),
                    ..
                } => Some(format!("a match on {what}")),
                Expr::Xt(Xt::Other) => Some("an iptables-nft match or target".to_string()),
                Expr::Unsupported(why) => Some(why.clone()),
                _ => None,
            })
            .map(|what| {
                format!(
                    "{} table {} chain {}: {what}",
                    r.at.family, r.at.table, r.chain
                )
            }),
        Object::Unreadable(why) => Some(format!("ruleset: {why}")),
        _ => None,
    })
}

/// `fam` is "ip" or "ip6"; tables of that family and of "inet" apply.
fn family_plan(objects: &[Object], fam: &str, ipsets: &IpsetInfo) -> (FamilyFilter, Vec<Rule>) {
    let applies = |f: &str| f == fam || f == "inet";
    let mut forward: Vec<&rules::Chain> = Vec::new();
    for o in objects {
        let c = match o {
            Object::Chain(c) => c,
            // Which family it belongs to is unknown: none can be fast-pathed past it.
            Object::Unreadable(why) => {
                return (FamilyFilter::Kernel(format!("ruleset: {why}")), vec![]);
            }
            _ => continue,
        };
        let Some(base) = &c.base else {
            continue;
        };
        let family = c.at.family.as_str();
        if family == "netdev" || family == "bridge" {
            return (
                FamilyFilter::Kernel(format!("{family} {} chain {}", base.hook, c.name)),
                vec![],
            );
        }
        if !applies(family) {
            continue;
        }
        match base.hook.as_str() {
            "input" | "output" => {}
            "forward" if base.kind == "filter" => forward.push(c),
            hook => {
                return (
                    FamilyFilter::Kernel(format!(
                        "{family} chain {} at {hook} ({})",
                        c.name, base.kind
                    )),
                    vec![],
                )
            }
        }
    }
    let policy_drop_of = |c: &rules::Chain| {
        c.base
            .as_ref()
            .is_some_and(|b| b.policy == rules::Policy::Drop)
    };
    let chain_rules = |c: &rules::Chain| {
        let (at, name) = (c.at.clone(), c.name.clone());
        objects.iter().filter_map(move |o| match o {
            Object::Rule(r) if r.at == at && r.chain == name => Some(r),
            _ => None,
        })
    };
    // An empty accepting chain changes nothing (iptables-nft leaves one after `-F`).
    forward.retain(|c| policy_drop_of(c) || chain_rules(c).next().is_some());
    if forward.len() > 1 {
        return (
            FamilyFilter::Kernel("more than one forward chain".into()),
            vec![],
        );
    }
    let Some(chain) = forward.first() else {
        return (FamilyFilter::Open, vec![]);
    };
    let (cf, ct, cn) = (
        chain.at.family.as_str(),
        chain.at.table.as_str(),
        chain.name.as_str(),
    );
    let policy_drop = policy_drop_of(chain);
    let sets: BTreeMap<&str, &[Datum]> = objects
        .iter()
        .filter_map(|o| match o {
            Object::Set(st) if st.at == chain.at => Some((st.name.as_str(), st.elems.as_slice())),
            _ => None,
        })
        .collect();
    let mut rules = Vec::new();
    let id = |handle| RuleId {
        family: cf.to_string(),
        table: ct.to_string(),
        chain: cn.to_string(),
        handle,
    };
    for (position, r) in chain_rules(chain).enumerate() {
        let xt_set = ipsets.resolve(cf, ct, cn, position);
        if let Some(mut rule) = parse_rule(&r.expr, &sets, xt_set) {
            rule.id = r.handle.map(id);
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
    exprs: &[Expr],
    sets: &BTreeMap<&str, &[Datum]>,
    xt_set: Option<(&str, &[String], bool)>,
) -> Option<Rule> {
    let mut rule = Rule::default();
    let mut verdict = None;
    for e in exprs {
        match e {
            Expr::Match { key, op, right } => {
                if let Err(why) = parse_match(key, op, right, sets, &mut rule) {
                    kernel(&mut rule, why);
                }
            }
            Expr::Counter => {}
            Expr::Xt(Xt::SetMatch) => {
                if let Err(why) = xt_set_match(xt_set, &mut rule) {
                    kernel(&mut rule, why);
                }
            }
            Expr::Xt(Xt::Other) => {
                kernel(&mut rule, "statement `xt`".into());
                verdict.get_or_insert(Action::Kernel);
            }
            Expr::Verdict(Verdict::Accept) => verdict = Some(Action::Accept),
            Expr::Verdict(Verdict::Drop) => verdict = Some(Action::Drop),
            Expr::Verdict(other) => {
                kernel(&mut rule, format!("statement `{}`", other.name()));
                verdict.get_or_insert(Action::Kernel);
            }
            Expr::Unsupported(why) => {
                kernel(&mut rule, why.clone());
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
    let vals: Vec<Datum> = members.iter().map(|m| prefix_value(m)).collect();
    let refs: Vec<&Datum> = vals.iter().collect();
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

/// "a.b.c.d/len" -> a prefix (an unreadable length is out of range); a bare address stays a
/// string.
fn prefix_value(m: &str) -> Datum {
    match m.split_once('/') {
        Some((addr, len)) => Datum::Prefix {
            addr: Some(addr.to_string()),
            len: Some(len.parse::<u64>().unwrap_or(999)),
        },
        None => Datum::Str(m.to_string()),
    }
}

/// The right-hand side of a match as a list of values: a literal, an anonymous set or @named.
fn values<'a>(
    right: &'a Rhs,
    sets: &BTreeMap<&str, &'a [Datum]>,
) -> std::result::Result<Vec<&'a Datum>, String> {
    Ok(match right {
        Rhs::Named(name) => sets
            .get(name.as_str())
            .ok_or_else(|| format!("unknown set @{name}"))?
            .iter()
            .collect(),
        Rhs::Set(elems) => elems.iter().collect(),
        Rhs::Value(v) => vec![v],
    })
}

/// A range's two bounds as strings.
fn str_bounds(r: &[Datum]) -> (&str, &str) {
    let at = |i: usize| match r.get(i) {
        Some(Datum::Str(s)) => s.as_str(),
        _ => "",
    };
    (at(0), at(1))
}

/// A prefix's address and length (at most `max`).
fn prefix_parts<A: std::str::FromStr>(
    v: &Datum,
    addr: &Option<String>,
    len: &Option<u64>,
    max: u64,
) -> std::result::Result<(A, u8), String> {
    let ip: A = addr
        .as_deref()
        .unwrap_or("")
        .parse()
        .map_err(|_| format!("bad prefix {v}"))?;
    let len = len.filter(|l| *l <= max).ok_or("bad prefix length")? as u8;
    Ok((ip, len))
}

fn parse_v4(v: &Datum) -> std::result::Result<Vec<(u32, u8)>, String> {
    match v {
        Datum::Str(a) => {
            let ip: Ipv4Addr = a.parse().map_err(|_| format!("not an IPv4 address: {a}"))?;
            Ok(vec![(u32::from(ip), 32)])
        }
        Datum::Prefix { addr, len } => {
            let (ip, len) = prefix_parts::<Ipv4Addr>(v, addr, len, 32)?;
            Ok(vec![(mask4(u32::from(ip), len), len)])
        }
        Datum::Range(r) => {
            let (lo, hi) = str_bounds(r);
            let lo: Ipv4Addr = lo.parse().map_err(|_| "bad range")?;
            let hi: Ipv4Addr = hi.parse().map_err(|_| "bad range")?;
            range_to_prefixes(u32::from(lo) as u128, u32::from(hi) as u128, 32)
                .map(|v| v.into_iter().map(|(a, l)| (a as u32, l)).collect())
        }
        _ => Err(format!("unsupported IPv4 value {v}")),
    }
}

fn parse_v6(v: &Datum) -> std::result::Result<Vec<(u128, u8)>, String> {
    match v {
        Datum::Str(a) => {
            let ip: Ipv6Addr = a.parse().map_err(|_| format!("not an IPv6 address: {a}"))?;
            Ok(vec![(u128::from(ip), 128)])
        }
        Datum::Prefix { addr, len } => {
            let (ip, len) = prefix_parts::<Ipv6Addr>(v, addr, len, 128)?;
            Ok(vec![(mask6(u128::from(ip), len), len)])
        }
        Datum::Range(r) => {
            let (lo, hi) = str_bounds(r);
            let lo: Ipv6Addr = lo.parse().map_err(|_| "bad range")?;
            let hi: Ipv6Addr = hi.parse().map_err(|_| "bad range")?;
            range_to_prefixes(u128::from(lo), u128::from(hi), 128)
        }
        _ => Err(format!("unsupported IPv6 value {v}")),
    }
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

fn proto_num(v: &Datum) -> std::result::Result<u8, String> {
    match v {
        Datum::Num(n) => u8::try_from(*n).map_err(|_| "bad protocol".into()),
        Datum::Str(s) => match s.as_str() {
            "tcp" => Ok(6),
            "udp" => Ok(17),
            "icmp" => Ok(1),
            "ipv6-icmp" | "icmpv6" => Ok(58),
            "sctp" => Ok(132),
            _ => Err(format!("unsupported protocol {v}")),
        },
        _ => Err(format!("unsupported protocol {v}")),
    }
}

fn ports(v: &Datum) -> std::result::Result<Vec<u16>, String> {
    match v {
        Datum::Num(n) => Ok(vec![u16::try_from(*n).map_err(|_| "bad port")?]),
        Datum::Range(r) => {
            let num = |i: usize| match r.get(i) {
                Some(Datum::Num(n)) => Some(*n),
                _ => None,
            };
            let lo = num(0).ok_or("bad port range")?;
            let hi = num(1).ok_or("bad port range")?;
            if hi < lo || hi > 65535 || hi - lo > 256 {
                return Err("port range too wide for the fast path".into());
            }
            Ok((lo as u16..=hi as u16).collect())
        }
        _ => Err(format!("unsupported port value {v}")),
    }
}

fn collect<T>(
    vals: &[&Datum],
    f: impl Fn(&Datum) -> std::result::Result<Vec<T>, String>,
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
    key: &Key,
    op: &Op,
    right: &Rhs,
    sets: &BTreeMap<&str, &[Datum]>,
    rule: &mut Rule,
) -> std::result::Result<(), String> {
    // An address-family header match holds only for its family whatever the operator: nft
    // gives it an nfproto dependency (listed or not), so `ip saddr != X` never sees IPv6.
    if let Key::Payload { protocol, .. } = key {
        match protocol.as_str() {
            "ip" => rule.v6 = false,
            "ip6" => rule.v4 = false,
            _ => {}
        }
    }
    match op {
        Op::Eq | Op::In => {}
        Op::Neq => return Err("operator `!=`".into()),
        Op::Other(op) => return Err(format!("operator `{op}`")),
    }
    let vals = values(right, sets)?;
    match key {
        Key::Payload { protocol, field } => match (protocol.as_str(), field.as_str()) {
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
            (proto @ ("tcp" | "udp"), field @ ("sport" | "dport")) => {
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
            (proto, field) => Err(format!("payload match {proto} {field}")),
        },
        Key::Meta(k) => match k.as_str() {
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
        },
        Key::Other(what) => Err(format!("match on {what}")),
    }
}

fn name(v: &Datum) -> std::result::Result<Vec<String>, String> {
    match v {
        Datum::Str(n) if !n.contains('*') => Ok(vec![n.clone()]),
        _ => Err(format!("unsupported name match {v}")),
    }
}

#[cfg(test)]
mod tests;
