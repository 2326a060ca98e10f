//! iptables-nft rules with `xt` (compatibility) matches, which nft lists without their
//! arguments: where they sit, and the `-m set` matches they stand for, read from
//! `iptables-nft-save` (the set names) and `ipset save` (the members).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::filter::expr::Expr;
use crate::filter::rules::{Object, Ruleset};

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
    match serde_json::from_str::<Value>(json).map(|v| Ruleset::from_json(&v)) {
        Ok(Ok(ruleset)) => xt_rules_of(&ruleset),
        _ => vec![],
    }
}

/// As `xt_rules`, from the typed ruleset.
pub fn xt_rules_of(ruleset: &Ruleset) -> Vec<XtRule> {
    let mut positions: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    let mut out = Vec::new();
    let table_handles: BTreeMap<(&str, &str), u64> = ruleset
        .tables
        .iter()
        .map(|t| ((t.family.as_str(), t.name.as_str()), t.handle.unwrap_or(0)))
        .collect();
    for r in ruleset.objects.iter().filter_map(|o| match o {
        Object::Rule(r) => Some(r),
        _ => None,
    }) {
        let key = (r.at.family.clone(), r.at.table.clone(), r.chain.clone());
        let pos = positions.entry(key.clone()).or_insert(0);
        if r.expr.iter().any(|e| matches!(e, Expr::Xt(_))) {
            out.push(XtRule {
                position: *pos,
                handle: r.handle.unwrap_or(0),
                table_handle: table_handles
                    .get(&(key.0.as_str(), key.1.as_str()))
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

    pub(crate) fn resolve(
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

#[cfg(test)]
mod tests {
    use super::*;

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
