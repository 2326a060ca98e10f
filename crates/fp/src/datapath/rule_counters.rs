//! The filter's share of the ruleset's counters. A rule's `counter` (iptables-nft puts one on
//! every rule) counts what the kernel judged; a packet the fast path judges and finishes never
//! reaches it. The programs count those per rule instead (bpf/fp_filter.h, `f_hits`, one map
//! every port's program shares), in a slot the daemon gives each nftables rule for as long as
//! it exists, whatever its position: a rule added above it moves its bit, not its slot. `fp
//! status` shows the sums by rule handle; the kernel's counter plus ours is what Linux alone
//! counts (docs/FASTPATH.md, "Counters").

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::consts::FILTER_HIT_SLOTS;
use crate::filter::{FilterPlan, RuleId};

/// What the fast path counted for one rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleCount {
    pub rule: RuleId,
    pub packets: u64,
    pub bytes: u64,
}

/// The slots given out, by rule.
#[derive(Debug, Default)]
pub struct RuleSlots {
    by_rule: BTreeMap<RuleId, u32>,
    /// Rules that found no free slot (only with rules churning faster than they go): their
    /// packets are the kernel's, which counts them.
    without: BTreeSet<RuleId>,
}

impl RuleSlots {
    /// Gives every rule of `plan` its slot: the one it had, else a free one. The slots of
    /// rules gone are handed to `zero` before any rule gets them again.
    pub fn assign(&mut self, plan: &FilterPlan, mut zero: impl FnMut(u32)) {
        let present: BTreeSet<&RuleId> = plan
            .rules_v4
            .iter()
            .chain(&plan.rules_v6)
            .filter_map(|r| r.id.as_ref())
            .collect();
        self.by_rule.retain(|id, slot| {
            let keep = present.contains(id);
            if !keep {
                zero(*slot);
            }
            keep
        });
        self.without.clear();
        let mut used: BTreeSet<u32> = self.by_rule.values().copied().collect();
        for id in present {
            if self.by_rule.contains_key(id) {
                continue;
            }
            match (0..FILTER_HIT_SLOTS as u32).find(|s| !used.contains(s)) {
                Some(slot) => {
                    used.insert(slot);
                    self.by_rule.insert(id.clone(), slot);
                }
                None => {
                    self.without.insert(id.clone());
                }
            }
        }
    }

    /// The slot that counts rule `id`, if it has one.
    pub fn slot(&self, id: &RuleId) -> Option<u32> {
        self.by_rule.get(id).copied()
    }

    /// Rule `id` found no slot: the fast path must not finish its packets.
    pub fn without_slot(&self, id: &RuleId) -> bool {
        self.without.contains(id)
    }

    /// Each rule's count, from `read` (slot -> packets and bytes, summed over CPUs).
    pub fn counts(&self, read: impl Fn(u32) -> (u64, u64)) -> Vec<RuleCount> {
        self.by_rule
            .iter()
            .map(|(id, slot)| {
                let (packets, bytes) = read(*slot);
                RuleCount {
                    rule: id.clone(),
                    packets,
                    bytes,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::{Action, Rule};

    fn id(handle: u64) -> RuleId {
        RuleId {
            family: "inet".into(),
            table: "fw".into(),
            chain: "fwd".into(),
            handle,
        }
    }

    fn plan(handles: &[u64]) -> FilterPlan {
        let rules: Vec<Rule> = handles
            .iter()
            .map(|h| Rule {
                id: Some(id(*h)),
                action: Action::Drop,
                ..Rule::default()
            })
            .collect();
        FilterPlan {
            rules_v4: rules.clone(),
            rules_v6: rules,
            ..FilterPlan::default()
        }
    }

    #[test]
    fn a_rule_keeps_its_slot_across_changes_and_one_gone_frees_it() {
        let mut slots = RuleSlots::default();
        let mut zeroed = Vec::new();
        slots.assign(&plan(&[3, 5]), |s| zeroed.push(s));
        let (s3, s5) = (slots.slot(&id(3)).unwrap(), slots.slot(&id(5)).unwrap());
        assert_ne!(s3, s5);
        assert!(zeroed.is_empty());
        // A rule inserted above: positions move, slots do not.
        slots.assign(&plan(&[7, 3, 5]), |s| zeroed.push(s));
        assert_eq!(
            (slots.slot(&id(3)), slots.slot(&id(5))),
            (Some(s3), Some(s5))
        );
        assert!(zeroed.is_empty());
        // 3 deleted: its slot is zeroed and goes to the next new rule.
        slots.assign(&plan(&[7, 5, 9]), |s| zeroed.push(s));
        assert_eq!(zeroed, [s3]);
        assert_eq!(slots.slot(&id(9)), Some(s3));
        assert_eq!(slots.slot(&id(3)), None);
        // An inet rule is one rule, in both families' lists: three counts.
        assert_eq!(slots.counts(|s| (u64::from(s), 0)).len(), 3);
    }

    #[test]
    fn a_rule_without_a_slot_is_known() {
        let mut slots = RuleSlots::default();
        let handles: Vec<u64> = (0..FILTER_HIT_SLOTS as u64 + 1).collect();
        slots.assign(&plan(&handles), |_| {});
        let without: Vec<u64> = handles
            .iter()
            .copied()
            .filter(|h| slots.without_slot(&id(*h)))
            .collect();
        assert_eq!(without.len(), 1);
        assert_eq!(slots.slot(&id(without[0])), None);
    }
}
