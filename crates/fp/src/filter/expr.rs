//! A rule's expressions as a typed tree, the one place that reads them out of libnftables
//! JSON. The filter compiles rules from this tree only. What the tree cannot name is kept
//! as `Expr::Unsupported`, which sends the rule (and so the traffic it could touch) to the
//! kernel.

use std::fmt;

use serde_json::Value;

/// A rule's verdict statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Accept,
    Drop,
    Jump(String),
    Goto(String),
    Return,
    Continue,
}

impl Verdict {
    /// The statement's name as nft spells it.
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Accept => "accept",
            Verdict::Drop => "drop",
            Verdict::Jump(_) => "jump",
            Verdict::Goto(_) => "goto",
            Verdict::Return => "return",
            Verdict::Continue => "continue",
        }
    }
}

/// A match's operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Eq,
    Neq,
    In,
    /// Any other (`<`, `>=`, ...), as written; "" when absent.
    Other(String),
}

/// What a match looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    /// A header field, e.g. ("ip", "saddr") or ("tcp", "dport").
    Payload { protocol: String, field: String },
    /// A meta key, e.g. "l4proto", "iifname".
    Meta(String),
    /// Anything else (ct, raw payload, ...), described.
    Other(String),
}

/// A value on the right-hand side of a match or in a set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Datum {
    Str(String),
    Num(u64),
    Prefix {
        addr: Option<String>,
        len: Option<u64>,
    },
    /// The bounds as listed (normally two).
    Range(Vec<Datum>),
    /// Any other shape, described.
    Other(String),
}

impl fmt::Display for Datum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Datum::Str(s) => write!(f, "\"{s}\""),
            Datum::Num(n) => write!(f, "{n}"),
            Datum::Prefix { addr, len } => write!(
                f,
                "{}/{}",
                addr.as_deref().unwrap_or("?"),
                len.map_or("?".to_string(), |l| l.to_string())
            ),
            Datum::Range(r) => {
                let parts: Vec<String> = r.iter().map(Datum::to_string).collect();
                write!(f, "{}", parts.join("-"))
            }
            Datum::Other(s) => write!(f, "{s}"),
        }
    }
}

/// The right-hand side of a match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rhs {
    Value(Datum),
    /// An anonymous set: `{ 22, 23 }`.
    Set(Vec<Datum>),
    /// A named set: `@name`.
    Named(String),
}

/// An xt expression: nft lists them without their arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Xt {
    /// `-m set`: its set comes from `iptables-nft-save`, its members from `ipset save`.
    SetMatch,
    /// Any other match or target: the rule goes to the kernel.
    Other,
}

/// One expression of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    Match {
        key: Key,
        op: Op,
        right: Rhs,
    },
    Counter,
    /// An iptables-nft compatibility (xt) expression.
    Xt(Xt),
    Verdict(Verdict),
    /// Not understood: why. The rule goes to the kernel.
    Unsupported(String),
}

/// A value, from JSON. Set elements may be wrapped: {"elem": {"val": X, "counter": ...}}.
pub fn datum(v: &Value) -> Datum {
    let v = v.get("elem").and_then(|e| e.get("val")).unwrap_or(v);
    match v {
        Value::String(s) => Datum::Str(s.clone()),
        _ if v.as_u64().is_some() => Datum::Num(v.as_u64().unwrap_or(0)),
        _ => {
            if let Some(p) = v.get("prefix") {
                Datum::Prefix {
                    addr: p.get("addr").and_then(Value::as_str).map(str::to_string),
                    len: p.get("len").and_then(Value::as_u64),
                }
            } else if let Some(Value::Array(r)) = v.get("range") {
                Datum::Range(r.iter().map(bound).collect())
            } else {
                Datum::Other(v.to_string())
            }
        }
    }
}

/// A range bound: a plain string or number (no element wrapping).
fn bound(v: &Value) -> Datum {
    match v {
        Value::String(s) => Datum::Str(s.clone()),
        _ => v
            .as_u64()
            .map_or_else(|| Datum::Other(v.to_string()), Datum::Num),
    }
}

/// The elements of a set object as listed.
pub fn set_elems(set: &Value) -> Vec<Datum> {
    match set.get("elem") {
        Some(Value::Array(a)) => a.iter().map(datum).collect(),
        Some(v) => vec![datum(v)],
        None => vec![],
    }
}

fn key(left: &Value) -> Key {
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    if let Some(p) = left.get("payload") {
        match (text(p, "protocol"), text(p, "field")) {
            (Some(protocol), Some(field)) => Key::Payload { protocol, field },
            _ => Key::Other(left.to_string()),
        }
    } else if let Some(m) = left.get("meta") {
        match text(m, "key") {
            Some(k) => Key::Meta(k),
            None => Key::Other(left.to_string()),
        }
    } else {
        Key::Other(left.to_string())
    }
}

fn rhs(right: &Value) -> Rhs {
    if let Some(name) = right.as_str().and_then(|x| x.strip_prefix('@')) {
        return Rhs::Named(name.to_string());
    }
    if let Some(set) = right.get("set") {
        return Rhs::Set(match set {
            Value::Array(a) => a.iter().map(datum).collect(),
            v => vec![datum(v)],
        });
    }
    Rhs::Value(datum(right))
}

fn match_expr(m: &Value) -> Expr {
    let Some(left) = m.get("left") else {
        return Expr::Unsupported("match without left side".into());
    };
    let Some(right) = m.get("right") else {
        return Expr::Unsupported("match without right side".into());
    };
    let op = match m.get("op").and_then(Value::as_str) {
        Some("==") => Op::Eq,
        Some("!=") => Op::Neq,
        Some("in") => Op::In,
        other => Op::Other(other.unwrap_or("").to_string()),
    };
    Expr::Match {
        key: key(left),
        op,
        right: rhs(right),
    }
}

fn target(body: &Value) -> Option<String> {
    body.get("target")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// One expression, from its `nft -j` object (`{"match": {...}}`, `{"accept": null}`, ...).
pub fn from_json(e: &Value) -> Expr {
    let Some((k, body)) = e.as_object().and_then(|o| o.iter().next()) else {
        return Expr::Unsupported("unreadable expression".into());
    };
    let statement = || Expr::Unsupported(format!("statement `{k}`"));
    match k.as_str() {
        "match" => match_expr(body),
        "counter" => Expr::Counter,
        "xt" => {
            let text = |key: &str| body.get(key).and_then(Value::as_str);
            if text("type") == Some("match") && text("name") == Some("set") {
                Expr::Xt(Xt::SetMatch)
            } else {
                Expr::Xt(Xt::Other)
            }
        }
        "accept" => Expr::Verdict(Verdict::Accept),
        "drop" => Expr::Verdict(Verdict::Drop),
        "return" => Expr::Verdict(Verdict::Return),
        "continue" => Expr::Verdict(Verdict::Continue),
        "jump" => target(body).map_or_else(statement, |t| Expr::Verdict(Verdict::Jump(t))),
        "goto" => target(body).map_or_else(statement, |t| Expr::Verdict(Verdict::Goto(t))),
        _ => statement(),
    }
}

/// A rule's expression list.
pub fn list_from_json(exprs: &[Value]) -> Vec<Expr> {
    exprs.iter().map(from_json).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_matches_verdicts_and_values() {
        let e = list_from_json(
            json!([
                {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}},
                           "right": {"set": [22, {"range": [80, 81]}]}}},
                {"match": {"op": "in", "left": {"meta": {"key": "iifname"}}, "right": "@ifs"}},
                {"match": {"op": "!=", "left": {"payload": {"protocol": "ip", "field": "saddr"}},
                           "right": {"prefix": {"addr": "198.18.0.0", "len": 15}}}},
                {"counter": {"packets": 0, "bytes": 0}},
                {"jump": {"target": "mine"}},
                {"drop": null}
            ])
            .as_array()
            .unwrap(),
        );
        assert_eq!(
            e,
            vec![
                Expr::Match {
                    key: Key::Payload {
                        protocol: "tcp".into(),
                        field: "dport".into()
                    },
                    op: Op::Eq,
                    right: Rhs::Set(vec![
                        Datum::Num(22),
                        Datum::Range(vec![Datum::Num(80), Datum::Num(81)])
                    ]),
                },
                Expr::Match {
                    key: Key::Meta("iifname".into()),
                    op: Op::In,
                    right: Rhs::Named("ifs".into()),
                },
                Expr::Match {
                    key: Key::Payload {
                        protocol: "ip".into(),
                        field: "saddr".into()
                    },
                    op: Op::Neq,
                    right: Rhs::Value(Datum::Prefix {
                        addr: Some("198.18.0.0".into()),
                        len: Some(15)
                    }),
                },
                Expr::Counter,
                Expr::Verdict(Verdict::Jump("mine".into())),
                Expr::Verdict(Verdict::Drop),
            ]
        );
    }

    #[test]
    fn an_unknown_expression_is_unsupported() {
        let e = list_from_json(
            json!([{"snat": {"addr": "198.18.0.1"}}, 5, {"xt": {"type": "target", "name": "LOG"}}])
                .as_array()
                .unwrap(),
        );
        assert_eq!(
            e,
            vec![
                Expr::Unsupported("statement `snat`".into()),
                Expr::Unsupported("unreadable expression".into()),
                Expr::Xt(Xt::Other),
            ]
        );
    }

    #[test]
    fn wrapped_set_elements_unwrap() {
        let set = json!({"elem": [{"elem": {"val": "198.18.0.1", "counter": {}}}, "198.18.0.2"]});
        assert_eq!(
            set_elems(&set),
            vec![
                Datum::Str("198.18.0.1".into()),
                Datum::Str("198.18.0.2".into())
            ]
        );
    }
}
