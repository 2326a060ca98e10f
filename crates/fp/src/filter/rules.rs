//! The nftables ruleset as typed objects: tables, chains, rules and sets, read from
//! libnftables JSON (`nft -j list ruleset`) and then edited in place by decoded rule events
//! (`ruleset::apply_event`). A field the filter needs that is missing or of another shape is not read as ""
//! but kept as `Unreadable`, which the filter turns into "this family goes to the kernel".
//! Rule expressions and set elements are read into the typed tree of `expr`.

use serde_json::Value;

use crate::filter::expr::{self, Datum, Expr};

/// Where an object sits: (family, table).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct TableRef {
    pub family: String,
    pub table: String,
}

/// A chain's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Accept,
    Drop,
}

/// What a base chain hooks, as the filter sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseChain {
    pub hook: String,
    /// The chain type: filter, nat, route.
    pub kind: String,
    pub policy: Policy,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub at: TableRef,
    pub name: String,
    /// None: a regular chain (reached only by jumps).
    pub base: Option<BaseChain>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    pub at: TableRef,
    pub chain: String,
    /// The kernel's handle (None: not listed).
    pub handle: Option<u64>,
    /// The expressions (an absent list is an empty rule).
    pub expr: Vec<Expr>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Set {
    pub at: TableRef,
    pub name: String,
    /// The elements as listed.
    pub elems: Vec<Datum>,
}

/// One object of the ruleset the filter reads.
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    Chain(Chain),
    Rule(Rule),
    Set(Set),
    /// A chain, rule or set whose fields do not read as expected: why.
    Unreadable(String),
}

fn text(v: &Value, key: &str, what: &str) -> Result<String, String> {
    v.get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| format!("{what} without a `{key}` string"))
}

fn table_ref(v: &Value, what: &str) -> Result<TableRef, String> {
    Ok(TableRef {
        family: text(v, "family", what)?,
        table: text(v, "table", what)?,
    })
}

fn chain(c: &Value) -> Result<Chain, String> {
    let at = table_ref(c, "chain")?;
    let name = text(c, "name", "chain")?;
    // A base chain has a hook; its type and policy must then read too.
    let base = match c.get("hook") {
        None => None,
        Some(h) => {
            let hook = h
                .as_str()
                .ok_or_else(|| format!("chain {name}: `hook` is not a string"))?
                .to_string();
            let kind = text(c, "type", &format!("base chain {name}"))?;
            let policy = match c.get("policy").and_then(Value::as_str) {
                // nft omits the policy of chains that cannot have one; accept is the kernel's
                // default.
                None | Some("accept") => Policy::Accept,
                Some("drop") => Policy::Drop,
                Some(other) => return Err(format!("chain {name}: policy `{other}`")),
            };
            Some(BaseChain { hook, kind, policy })
        }
    };
    Ok(Chain { at, name, base })
}

fn rule(r: &Value) -> Result<Rule, String> {
    Ok(Rule {
        at: table_ref(r, "rule")?,
        chain: text(r, "chain", "rule")?,
        handle: r.get("handle").and_then(Value::as_u64),
        expr: match r.get("expr") {
            None => vec![],
            Some(e) => e
                .as_array()
                .map(|list| expr::list_from_json(list))
                .ok_or_else(|| "rule whose `expr` is not a list".to_string())?,
        },
    })
}

fn set(st: &Value) -> Result<Set, String> {
    Ok(Set {
        at: table_ref(st, "set")?,
        name: text(st, "name", "set")?,
        elems: expr::set_elems(st),
    })
}

/// A table as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub family: String,
    pub name: String,
    /// Table handles never repeat in a namespace (None: not listed).
    pub handle: Option<u64>,
}

/// A whole ruleset, typed: what `nft -j list ruleset` printed, then edited by decoded rule
/// events (`ruleset::apply_event`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Ruleset {
    pub tables: Vec<Table>,
    /// Chains, rules and sets, in listed order.
    pub objects: Vec<Object>,
}

impl Ruleset {
    /// From a parsed `nft -j list ruleset`; Err when it has no `nftables` array.
    pub fn from_json(v: &Value) -> Result<Ruleset, String> {
        let items = v
            .get("nftables")
            .and_then(Value::as_array)
            .ok_or("no `nftables` array")?;
        let mut objects = objects(items);
        let mut tables = Vec::new();
        for t in items.iter().filter_map(|i| i.get("table")) {
            match (text(t, "family", "table"), text(t, "name", "table")) {
                (Ok(family), Ok(name)) => tables.push(Table {
                    family,
                    name,
                    handle: t.get("handle").and_then(Value::as_u64),
                }),
                (Err(why), _) | (_, Err(why)) => objects.push(Object::Unreadable(why)),
            }
        }
        Ok(Ruleset { tables, objects })
    }
}

/// The chains, rules and sets of a ruleset's `nftables` array, in order. Other objects
/// (tables, maps, elements, the metainfo) are skipped.
pub fn objects(items: &[Value]) -> Vec<Object> {
    fn typed(r: Result<Object, String>) -> Object {
        r.unwrap_or_else(Object::Unreadable)
    }
    items
        .iter()
        .filter_map(|item| {
            if let Some(c) = item.get("chain") {
                Some(typed(chain(c).map(Object::Chain)))
            } else if let Some(r) = item.get("rule") {
                Some(typed(rule(r).map(Object::Rule)))
            } else {
                item.get("set").map(|st| typed(set(st).map(Object::Set)))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn base_and_regular_chains_rules_and_sets() {
        let items = json!([
            {"metainfo": {"version": "1.0.9"}},
            {"table": {"family": "ip", "name": "filter", "handle": 1}},
            {"chain": {"family": "ip", "table": "filter", "name": "FORWARD", "handle": 1,
                       "type": "filter", "hook": "forward", "prio": 0, "policy": "drop"}},
            {"chain": {"family": "ip", "table": "filter", "name": "mine", "handle": 2}},
            {"set": {"family": "ip", "table": "filter", "name": "s", "type": "ipv4_addr"}},
            {"rule": {"family": "ip", "table": "filter", "chain": "FORWARD", "handle": 3,
                      "expr": [{"accept": null}]}}
        ]);
        let o = objects(items.as_array().unwrap());
        let at = TableRef {
            family: "ip".into(),
            table: "filter".into(),
        };
        assert_eq!(
            o[0],
            Object::Chain(Chain {
                at: at.clone(),
                name: "FORWARD".into(),
                base: Some(BaseChain {
                    hook: "forward".into(),
                    kind: "filter".into(),
                    policy: Policy::Drop
                })
            })
        );
        assert!(matches!(&o[1], Object::Chain(Chain { base: None, .. })));
        assert!(matches!(&o[2], Object::Set(s) if s.name == "s"));
        assert!(matches!(&o[3], Object::Rule(r) if r.chain == "FORWARD" && r.expr.len() == 1));
        assert_eq!(o.len(), 4);
    }

    #[test]
    fn a_missing_or_odd_field_is_unreadable_not_empty() {
        let items = json!([
            {"chain": {"family": "ip", "name": "FORWARD", "type": "filter", "hook": "forward"}},
            {"chain": {"family": "ip", "table": "t", "name": "c", "hook": "forward"}},
            {"chain": {"family": "ip", "table": "t", "name": "c", "type": "filter",
                       "hook": "forward", "policy": "queue"}},
            {"rule": {"family": "ip", "table": "t", "expr": []}},
            {"rule": {"family": "ip", "table": "t", "chain": "c", "expr": {"accept": null}}}
        ]);
        let o = objects(items.as_array().unwrap());
        assert_eq!(o.len(), 5);
        for x in &o {
            assert!(matches!(x, Object::Unreadable(_)), "{x:?}");
        }
    }
}
