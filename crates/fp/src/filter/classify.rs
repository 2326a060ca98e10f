#![allow(clippy::type_complexity)]
//! The filter's classifier: the compiled rules of a `FilterPlan` as the per-interface tables
//! of bpf/fp_filter.h (one bit per rule in every table, the first rule whose bits survive all
//! fields wins), and `classify`, the same lookup in Rust for tests and fixtures.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use crate::datapath::rule_counters::RuleSlots;
use crate::filter::{mask4, mask6, Action, Bits, FilterPlan, Rule, MAX_RULES, NO_SLOT};

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
    /// Per rule: its verdict (filter_verdict) and the slot that counts it (`Rule::slot`).
    pub actions: Vec<(u32, u32)>,
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

pub use crate::consts::{FIELD_DPORT, FIELD_DST, FIELD_OIF, FIELD_PROTO, FIELD_SPORT, FIELD_SRC};

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
    /// oifname matches to interface indexes. Nothing is counted (fixtures, benchmarks): see
    /// `tables_counted`.
    pub fn tables(&self, iif: &str, ifindex_of: &dyn Fn(&str) -> Option<u32>) -> Tables {
        self.tables_counted(iif, ifindex_of, &RuleSlots::default())
    }

    /// `tables`, with each rule counted in its slot of `slots` (rule_counters): a rule that
    /// found none is the kernel's, which counts it.
    pub fn tables_counted(
        &self,
        iif: &str,
        ifindex_of: &dyn Fn(&str) -> Option<u32>,
        slots: &RuleSlots,
    ) -> Tables {
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
        let mut d = [[0u64; 4]; 8];
        address_tables(rules, &live, &mut d, &mut t);
        proto_table_and_actions(rules, slots, &mut d, &mut t);
        t.sport = port_table(rules, &|r| r.sport.as_ref(), &mut d[SPORT]);
        t.dport = port_table(rules, &|r| r.dport.as_ref(), &mut d[DPORT]);
        t.oif = oif_table(rules, ifindex_of, &mut d[OIF]);
        for (i, (v4, r)) in rules.iter().enumerate() {
            if live(r) {
                set_bit(&mut d[if *v4 { BASE4 } else { BASE6 }], i);
            }
        }
        t.defaults = d;
        t
    }
}

// Slots of `Tables::defaults` (bpf/fp_filter.h, enum filter_field).
const PROTO: usize = 0;
const SPORT: usize = 1;
const DPORT: usize = 2;
const OIF: usize = 3;
const BASE4: usize = 4;
const BASE6: usize = 5;
const SRC: usize = 6;
const DST: usize = 7;

/// The four address LPM tables, and the address fields' wildcards in `d`.
fn address_tables(
    rules: &[(bool, &Rule)],
    live: &dyn Fn(&Rule) -> bool,
    d: &mut [Bits; 8],
    t: &mut Tables,
) {
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
}

/// The protocol table (its wildcard in `d`) and each rule's action and counter slot: a rule
/// that found no slot is the kernel's, which counts it.
fn proto_table_and_actions(
    rules: &[(bool, &Rule)],
    slots: &RuleSlots,
    d: &mut [Bits; 8],
    t: &mut Tables,
) {
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
        let id = r.id.as_ref();
        let slot = id.and_then(|id| slots.slot(id)).unwrap_or(NO_SLOT);
        let action = if id.is_some_and(|id| slots.without_slot(id)) {
            Action::Kernel
        } else {
            r.action
        };
        t.actions.push((action as u32, slot));
    }
}

/// One port field's table, (protocol, port) -> rules; the rules that match any port go in
/// `wild`.
fn port_table(
    rules: &[(bool, &Rule)],
    pick: &dyn Fn(&Rule) -> Option<&Vec<(u8, u16)>>,
    wild: &mut Bits,
) -> Vec<((u8, u16), Bits)> {
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
}

/// The output interface table, ifindex -> rules (`ifindex_of` resolves the names); the rules
/// that match any interface go in `wild`.
fn oif_table(
    rules: &[(bool, &Rule)],
    ifindex_of: &dyn Fn(&str) -> Option<u32>,
    wild: &mut Bits,
) -> Vec<(u32, Bits)> {
    let mut by_oif: BTreeMap<u32, Bits> = BTreeMap::new();
    for (i, (_, r)) in rules.iter().enumerate() {
        match &r.oif {
            Some(names) => {
                for idx in names.iter().filter_map(|n| ifindex_of(n)) {
                    set_bit(by_oif.entry(idx).or_default(), i);
                }
            }
            None => set_bit(wild, i),
        }
    }
    by_oif.into_iter().collect()
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
            return match t.actions.get(rule).map(|a| a.0) {
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
