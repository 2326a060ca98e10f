//! The one table of differences between our stack and Linux that a run does not fail on.
//!
//! Two kinds of row:
//! - `Accepted`: the difference is deliberate and harmless to a peer; the reason says why.
//! - `StackGap`: our stack (or the bifurcation in front of it) is wrong and is to be fixed
//!   (docs/TCPIP.md, "Conformance against Linux"); the row makes the run show it without failing, and is deleted with the fix.
//!
//! A row matches one precise pattern, never a whole class, so a new kind of difference in the
//! same class still fails the run. It either explains a whole case (`Match::Case`: the
//! pattern must hold for everything both sides sent) or one part of one (`Match::Part`: it
//! removes or aligns the replies it explains, on copies; a case is explained when the parts
//! leave no difference, or leave one that a `Case` row explains). docs/TCPIP.md
//! ("Conformance against Linux") lists the same rows with the same reasons.

mod rows;

use crate::cases::Case;
use crate::compare::{self, Outcome, Verdict};

pub use rows::TABLE;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Accepted,
    StackGap,
}

pub const GAP: &str = "known stack gap";

/// What a `Case` row's pattern sees (after the `Part` rows' edits).
pub struct Seen<'a> {
    pub case: &'a Case,
    pub ours: &'a Outcome,
    pub linux: &'a Outcome,
    /// The differences that remain (`compare::differences`).
    pub diffs: &'a [String],
}

pub enum Match {
    /// Explains the whole case when the pattern holds.
    Case(fn(&Seen) -> bool),
    /// Explains part of a case: edits the copies of (ours, linux) to remove what it explains;
    /// true when it did.
    Part(fn(&Case, &mut Outcome, &mut Outcome) -> bool),
}

pub struct Known {
    pub id: &'static str,
    pub kind: Kind,
    pub reason: &'static str,
    pub matches: Match,
}

/// The verdict of a case, and the differences no row explains (empty unless Unexplained).
pub fn verdict(
    case: &Case,
    ours: &Outcome,
    linux: &Outcome,
    diffs: &[String],
) -> (Verdict, Vec<String>) {
    if diffs.is_empty() {
        return (Verdict::Same, Vec::new());
    }
    let (mut a, mut b) = (ours.clone(), linux.clone());
    let mut used: Vec<&'static Known> = Vec::new();
    for k in TABLE {
        if let Match::Part(edit) = k.matches {
            if edit(case, &mut a, &mut b) {
                used.push(k);
            }
        }
    }
    let rest = compare::differences(&a, &b);
    if !rest.is_empty() {
        let seen = Seen {
            case,
            ours: &a,
            linux: &b,
            diffs: &rest,
        };
        match TABLE
            .iter()
            .find(|k| matches!(k.matches, Match::Case(p) if p(&seen)))
        {
            Some(k) => used.push(k),
            None => return (Verdict::Unexplained, rest),
        }
    }
    let ids = used.iter().map(|k| k.id).collect();
    if used.iter().any(|k| k.kind == Kind::StackGap) {
        (Verdict::KnownGap(ids), Vec::new())
    } else {
        (Verdict::Accepted(ids), Vec::new())
    }
}

// Helpers for the rows.

/// For each of our replies that has no identical twin in Linux's, where its partner there
/// (`compare::partner`) differs in `field` and `ok(ours, linux)` holds for the two values:
/// takes Linux's value. True when one did.
pub(crate) fn align_field(
    a: &mut Outcome,
    b: &Outcome,
    field: &str,
    ok: fn(&str, &str) -> bool,
) -> bool {
    let mut changed = false;
    for x in &mut a.replies {
        if b.replies.contains(x) {
            continue;
        }
        let (Some(xv), Some(y)) = (x.get(field), compare::partner(x, &b.replies)) else {
            continue;
        };
        match y.get(field) {
            Some(yv) if yv != xv && ok(xv, yv) => {
                let v = yv.to_string();
                x.set(field, v);
                changed = true;
            }
            _ => {}
        }
    }
    changed
}

#[cfg(test)]
mod tests;
