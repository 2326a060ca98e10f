//! Comparing what the two DUTs sent for one case.
//!
//! Replies are compared as a multiset (arrival order between replies is not compared; a
//! reply's own fields are). Equal replies pair off first; the rest pair by the most fields
//! in common, and each differing field is named: `tcp.flags: ours SA, linux R`.

use crate::normalize::Reply;

/// One side's result for a case.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Normalized replies in the edge window (stateless cases: the whole window).
    pub replies: Vec<Reply>,
    /// The replies' bytes, hex, for the JSON record.
    pub raw: Vec<String>,
    /// Replies while the harness drove the connection into its state (not compared).
    pub setup: Vec<Reply>,
    /// Which setup step got no answer, if one did.
    pub setup_error: Option<String>,
    /// ARP requests from the DUT for crafted addresses that the harness answered.
    pub resolutions: usize,
    /// What the harness sent (stateful cases: per side, since it depends on the DUT).
    pub sent: Vec<String>,
}

/// The differences between ours (`a`) and Linux's (`b`); empty when they agree.
pub fn differences(a: &Outcome, b: &Outcome) -> Vec<String> {
    let mut out = Vec::new();
    if a.setup_error != b.setup_error {
        out.push(format!(
            "setup: ours {}, linux {}",
            a.setup_error.as_deref().unwrap_or("ok"),
            b.setup_error.as_deref().unwrap_or("ok")
        ));
        return out;
    }
    if a.replies.len() != b.replies.len() {
        out.push(format!(
            "count: ours {}, linux {}",
            a.replies.len(),
            b.replies.len()
        ));
    }
    let (rest_a, rest_b) = unmatched(&a.replies, &b.replies);
    let mut used = vec![false; rest_b.len()];
    for x in &rest_a {
        let best = (0..rest_b.len())
            .filter(|&j| !used[j] && same_kind(x, rest_b[j]))
            .max_by_key(|&j| common_fields(x, rest_b[j]));
        match best {
            Some(j) => {
                used[j] = true;
                out.extend(field_diffs(x, rest_b[j]));
            }
            None => out.push(format!("only ours: {}", x.line())),
        }
    }
    for (j, y) in rest_b.iter().enumerate() {
        if !used[j] {
            out.push(format!("only linux: {}", y.line()));
        }
    }
    out
}

/// The replies of each side that have no identical partner on the other.
fn unmatched<'a>(a: &'a [Reply], b: &'a [Reply]) -> (Vec<&'a Reply>, Vec<&'a Reply>) {
    let mut taken = vec![false; b.len()];
    let mut rest_a = Vec::new();
    for x in a {
        match (0..b.len()).find(|&j| !taken[j] && b[j] == *x) {
            Some(j) => taken[j] = true,
            None => rest_a.push(x),
        }
    }
    let rest_b = b
        .iter()
        .zip(&taken)
        .filter(|(_, t)| !**t)
        .map(|(y, _)| y)
        .collect();
    (rest_a, rest_b)
}

/// The reply of `ys` that `x` is best compared with: the same kind, the most fields in
/// common.
pub fn partner<'a>(x: &Reply, ys: &'a [Reply]) -> Option<&'a Reply> {
    ys.iter()
        .filter(|y| same_kind(x, y))
        .max_by_key(|y| common_fields(x, y))
}

/// Replies worth comparing field by field: the same Ethernet type and IP protocol.
fn same_kind(x: &Reply, y: &Reply) -> bool {
    x.get("eth.type") == y.get("eth.type") && x.get("ip.proto") == y.get("ip.proto")
}

fn common_fields(x: &Reply, y: &Reply) -> usize {
    x.fields.iter().filter(|f| y.fields.contains(f)).count()
}

fn field_diffs(x: &Reply, y: &Reply) -> Vec<String> {
    let mut keys: Vec<&str> = x.fields.iter().map(|(k, _)| *k).collect();
    for (k, _) in &y.fields {
        if !keys.contains(k) {
            keys.push(k);
        }
    }
    keys.into_iter()
        .filter(|k| x.get(k) != y.get(k))
        .map(|k| {
            format!(
                "{k}: ours {}, linux {}",
                x.get(k).unwrap_or("-"),
                y.get(k).unwrap_or("-")
            )
        })
        .collect()
}

/// A case's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Same,
    /// Differences the table accepts (the rows that explain them).
    Accepted(Vec<&'static str>),
    /// Differences the table explains, at least one as a known stack gap.
    KnownGap(Vec<&'static str>),
    Unexplained,
}

impl Verdict {
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Same => "same",
            Verdict::Accepted(_) => "accepted",
            Verdict::KnownGap(_) => "known-gap",
            Verdict::Unexplained => "DIFFERS",
        }
    }

    /// The rows that explain the case (none for Same and Unexplained).
    pub fn rows(&self) -> &[&'static str] {
        match self {
            Verdict::Accepted(ids) | Verdict::KnownGap(ids) => ids,
            _ => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(pairs: &[(&'static str, &str)]) -> Reply {
        Reply {
            fields: pairs.iter().map(|(k, v)| (*k, v.to_string())).collect(),
        }
    }

    fn outcome(r: Vec<Reply>) -> Outcome {
        Outcome {
            replies: r,
            ..Outcome::default()
        }
    }

    #[test]
    fn order_does_not_matter_but_fields_do() {
        let x = reply(&[
            ("eth.type", "ipv4"),
            ("ip.proto", "tcp"),
            ("tcp.flags", "A"),
        ]);
        let y = reply(&[
            ("eth.type", "ipv4"),
            ("ip.proto", "tcp"),
            ("tcp.flags", "FA"),
        ]);
        let z = reply(&[
            ("eth.type", "ipv4"),
            ("ip.proto", "tcp"),
            ("tcp.flags", "R"),
        ]);
        assert!(differences(
            &outcome(vec![x.clone(), y.clone()]),
            &outcome(vec![y.clone(), x.clone()])
        )
        .is_empty());
        let d = differences(&outcome(vec![x.clone()]), &outcome(vec![z.clone()]));
        assert_eq!(d, vec!["tcp.flags: ours A, linux R".to_string()]);
        let d = differences(&outcome(vec![]), &outcome(vec![z]));
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d[1].starts_with("only linux"));
    }

    #[test]
    fn a_setup_that_failed_on_one_side_is_the_difference() {
        let a = Outcome {
            setup_error: Some("no SYN-ACK".into()),
            ..Outcome::default()
        };
        let d = differences(&a, &Outcome::default());
        assert_eq!(d, vec!["setup: ours no SYN-ACK, linux ok".to_string()]);
    }
}
