//! Reconcile: what the data path must do to match the model, as a list of actions. Pure: it
//! reads the wanted plan and what is in place, and touches nothing (the loader's `apply`
//! executes the actions), so every decision here is unit-tested without privileges.

use std::collections::BTreeMap;

use crate::datapath::rule_counters::RuleSlots;
use crate::filter::classify::Tables;
use crate::filter::FilterPlan;
use crate::model::features::Features;
use crate::model::plan::{Plan, PortPlan};
use crate::model::{BrPortVal, FdbKey};

/// One step of making the data path match the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    SetFdb {
        key: FdbKey,
        port: u32,
    },
    DelFdb {
        key: FdbKey,
    },
    SetBridgeVlan {
        ifindex: u32,
        vid: u16,
        flags: u16,
    },
    SetBridgePort {
        ifindex: u32,
        port: BrPortVal,
    },
    DelBridgePort {
        ifindex: u32,
    },
    DelBridgeVlan {
        ifindex: u32,
        vid: u16,
    },
    /// The port leaves the fast path, or changes hook: a program cannot move between XDP and
    /// TC through its link, so it is detached here and attached afresh.
    Detach {
        ifindex: u32,
    },
    /// The running program serves the plan: write its run-time switches, egress ports and
    /// filter tables (these only where they differ from what the program holds).
    Update {
        port: PortPlan,
        tables: Option<Tables>,
    },
    /// Another program must run: a spare that serves the plan, or one loaded for it, is
    /// filled and swapped in through the port's link.
    Swap {
        port: PortPlan,
        tables: Option<Tables>,
    },
    /// A port new to the fast path: load, fill, attach.
    Attach {
        port: PortPlan,
        tables: Option<Tables>,
    },
}

/// What is in place: the plan and filter last applied, the FDB in the map, and the features
/// of the program each port runs.
#[derive(Debug, Clone, Copy)]
pub struct Current<'a> {
    pub plan: &'a Plan,
    pub filter: &'a FilterPlan,
    pub fdb: &'a BTreeMap<FdbKey, u32>,
    pub ports: &'a BTreeMap<u32, Features>,
}

/// The actions, and the plan they make current.
#[derive(Debug, Default)]
pub struct Actions {
    pub list: Vec<Action>,
    /// Some when the ports were gone through (the plan or the filter changed): once the
    /// actions ran, this is what is applied.
    pub applied: Option<(Plan, FilterPlan)>,
}

/// The actions that make `current` match `plan` and `filter`. `fdb` is the model's FDB when
/// it was just read from a dump (single FDB events are written as they come, see
/// `fdb_event`). `ifindex_of` resolves the interface names that filter rules match on.
pub fn reconcile(
    plan: Plan,
    filter: &FilterPlan,
    slots: &RuleSlots,
    fdb: Option<&BTreeMap<FdbKey, u32>>,
    ifindex_of: &dyn Fn(&str) -> Option<u32>,
    current: Current<'_>,
) -> Actions {
    let mut list = fdb.map(|f| fdb_diff(f, current.fdb)).unwrap_or_default();
    if plan == *current.plan
        && *filter == *current.filter
        && current.ports.keys().eq(plan.ports.keys())
    {
        return Actions {
            list,
            applied: None,
        };
    }
    bridge_tables(&plan, current.plan, &mut list);
    // A program bound to its device (vlan_meta) is never swapped in over an attachment that
    // may be generic, or out for one that is not: a new attachment, as for another hook.
    let same_hook = |a: &Features, b: &Features| a.tc == b.tc && a.vlan_meta == b.vlan_meta;
    for (idx, features) in current.ports {
        let same_hook =
            matches!(plan.ports.get(idx), Some(pp) if same_hook(&pp.features, features));
        if !same_hook {
            list.push(Action::Detach { ifindex: *idx });
        }
    }
    // Without input-interface matches every port's tables are the same: compile once.
    let shared = (!filter.uses_iif()).then(std::cell::OnceCell::<Tables>::new);
    for (idx, pp) in &plan.ports {
        let f = pp.features;
        let tables = (f.filter_v4 || f.filter_v6).then(|| {
            let compile = || filter.tables_counted(&pp.name, ifindex_of, slots);
            match &shared {
                Some(cell) => cell.get_or_init(compile).clone(),
                None => compile(),
            }
        });
        let port = pp.clone();
        list.push(match current.ports.get(idx) {
            Some(running) if same_hook(running, &f) && running.serves(&f) => {
                Action::Update { port, tables }
            }
            Some(running) if same_hook(running, &f) => Action::Swap { port, tables },
            _ => Action::Attach { port, tables },
        });
    }
    Actions {
        list,
        applied: Some((plan, filter.clone())),
    }
}

/// One FDB event: one map write.
pub fn fdb_event(add: bool, key: FdbKey, port: u32) -> Action {
    if add {
        Action::SetFdb { key, port }
    } else {
        Action::DelFdb { key }
    }
}

/// After a dump: the differences between the dumped FDB and the map.
fn fdb_diff(want: &BTreeMap<FdbKey, u32>, have: &BTreeMap<FdbKey, u32>) -> Vec<Action> {
    let mut list = Vec::new();
    for (k, port) in want {
        if have.get(k) != Some(port) {
            list.push(Action::SetFdb {
                key: *k,
                port: *port,
            });
        }
    }
    for k in have.keys() {
        if !want.contains_key(k) {
            list.push(Action::DelFdb { key: *k });
        }
    }
    list
}

/// The bridge port and VLAN tables: additions first, so that a frame never meets a port whose
/// VLANs are not there yet; a missing entry only means "pass".
fn bridge_tables(plan: &Plan, applied: &Plan, list: &mut Vec<Action>) {
    for ((idx, vid), flags) in &plan.bridge_vlans {
        if applied.bridge_vlans.get(&(*idx, *vid)) != Some(flags) {
            list.push(Action::SetBridgeVlan {
                ifindex: *idx,
                vid: *vid,
                flags: *flags,
            });
        }
    }
    for (idx, p) in &plan.bridge_ports {
        if applied.bridge_ports.get(idx) != Some(p) {
            list.push(Action::SetBridgePort {
                ifindex: *idx,
                port: *p,
            });
        }
    }
    for idx in applied.bridge_ports.keys() {
        if !plan.bridge_ports.contains_key(idx) {
            list.push(Action::DelBridgePort { ifindex: *idx });
        }
    }
    for (idx, vid) in applied.bridge_vlans.keys() {
        if !plan.bridge_vlans.contains_key(&(*idx, *vid)) {
            list.push(Action::DelBridgeVlan {
                ifindex: *idx,
                vid: *vid,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(ifindex: u32, tc: bool) -> PortPlan {
        PortPlan {
            ifindex,
            name: format!("p{ifindex}"),
            features: Features {
                router_v4: true,
                tc,
                ..Features::default()
            },
            off_v4: false,
            off_v6: false,
            route_cache: crate::model::features::RouteCache::both(true),
            rp_filter_v4: false,
            policy_rules: crate::model::features::PolicyRules::default(),
            reassembly: crate::model::features::Reassembly::default(),
            multipath: crate::model::features::Multipath::default(),
            route_mtu_v4: 0,
            proxy_ndp: false,
            source_check_v4: false,
            keep_priority: false,
            local_v4: Vec::new(),
            tx_ports: vec![2, 3],
            notes: Vec::new(),
        }
    }

    fn plan_of(ports: &[PortPlan]) -> Plan {
        Plan {
            ports: ports.iter().map(|p| (p.ifindex, p.clone())).collect(),
            ..Plan::default()
        }
    }

    fn no_names(_: &str) -> Option<u32> {
        None
    }

    struct Fixture {
        plan: Plan,
        filter: FilterPlan,
        fdb: BTreeMap<FdbKey, u32>,
        ports: BTreeMap<u32, Features>,
    }

    impl Fixture {
        fn running(ports: &[PortPlan]) -> Fixture {
            Fixture {
                plan: plan_of(ports),
                filter: FilterPlan::default(),
                fdb: BTreeMap::new(),
                ports: ports.iter().map(|p| (p.ifindex, p.features)).collect(),
            }
        }
        fn current(&self) -> Current<'_> {
            Current {
                plan: &self.plan,
                filter: &self.filter,
                fdb: &self.fdb,
                ports: &self.ports,
            }
        }
    }

    #[test]
    fn nothing_changed_nothing_to_do() {
        let fx = Fixture::running(&[router(2, false), router(3, false)]);
        let a = reconcile(
            fx.plan.clone(),
            &fx.filter,
            &RuleSlots::default(),
            None,
            &no_names,
            fx.current(),
        );
        assert!(a.list.is_empty());
        assert!(a.applied.is_none());
    }

    #[test]
    fn new_port_is_attached_and_known_ones_updated() {
        let fx = Fixture::running(&[router(2, false)]);
        let want = plan_of(&[router(2, false), router(3, false)]);
        let a = reconcile(
            want.clone(),
            &fx.filter,
            &RuleSlots::default(),
            None,
            &no_names,
            fx.current(),
        );
        assert_eq!(
            a.list,
            vec![
                Action::Update {
                    port: router(2, false),
                    tables: None
                },
                Action::Attach {
                    port: router(3, false),
                    tables: None
                },
            ]
        );
        assert_eq!(a.applied.map(|(p, _)| p), Some(want));
    }

    #[test]
    fn hook_change_detaches_then_attaches() {
        let fx = Fixture::running(&[router(2, false)]);
        let a = reconcile(
            plan_of(&[router(2, true)]),
            &fx.filter,
            &RuleSlots::default(),
            None,
            &no_names,
            fx.current(),
        );
        assert_eq!(
            a.list,
            vec![
                Action::Detach { ifindex: 2 },
                Action::Attach {
                    port: router(2, true),
                    tables: None
                },
            ]
        );
    }

    #[test]
    fn gone_port_is_detached() {
        let fx = Fixture::running(&[router(2, false), router(3, false)]);
        let a = reconcile(
            plan_of(&[router(2, false)]),
            &fx.filter,
            &RuleSlots::default(),
            None,
            &no_names,
            fx.current(),
        );
        assert_eq!(a.list[0], Action::Detach { ifindex: 3 });
        assert_eq!(a.list.len(), 2);
    }

    #[test]
    fn new_module_swaps_the_program() {
        let fx = Fixture::running(&[router(2, false)]);
        let mut p = router(2, false);
        p.features.router_v6 = true;
        let a = reconcile(
            plan_of(&[p.clone()]),
            &fx.filter,
            &RuleSlots::default(),
            None,
            &no_names,
            fx.current(),
        );
        assert_eq!(
            a.list,
            vec![Action::Swap {
                port: p,
                tables: None
            }]
        );
    }

    #[test]
    fn filter_tables_come_with_the_port() {
        let fx = Fixture::running(&[router(2, false)]);
        let mut p = router(2, false);
        p.features.filter_v4 = true;
        let a = reconcile(
            plan_of(&[p.clone()]),
            &fx.filter,
            &RuleSlots::default(),
            None,
            &no_names,
            fx.current(),
        );
        let [Action::Swap {
            tables: Some(t), ..
        }] = &a.list[..]
        else {
            panic!("expected one swap with tables: {:?}", a.list);
        };
        assert_eq!(t, &fx.filter.tables("p2", &no_names));
    }

    #[test]
    fn fdb_after_a_dump_is_diffed() {
        let key = |b: u8| FdbKey {
            bridge: 10,
            vid: 0,
            mac: [2, 0, 0, 0, 0, b],
        };
        let mut fx = Fixture::running(&[]);
        fx.fdb = [(key(1), 2), (key(2), 3)].into_iter().collect();
        let want: BTreeMap<FdbKey, u32> = [(key(1), 2), (key(2), 4), (key(3), 5)]
            .into_iter()
            .collect();
        let a = reconcile(
            fx.plan.clone(),
            &fx.filter,
            &RuleSlots::default(),
            Some(&want),
            &no_names,
            fx.current(),
        );
        assert_eq!(
            a.list,
            vec![
                Action::SetFdb {
                    key: key(2),
                    port: 4
                },
                Action::SetFdb {
                    key: key(3),
                    port: 5
                },
            ]
        );
        assert!(a.applied.is_none());
        fx.fdb.insert(key(9), 1);
        let a = reconcile(
            fx.plan.clone(),
            &fx.filter,
            &RuleSlots::default(),
            Some(&want),
            &no_names,
            fx.current(),
        );
        assert_eq!(a.list.last(), Some(&Action::DelFdb { key: key(9) }));
    }

    #[test]
    fn bridge_tables_add_before_delete() {
        let mut fx = Fixture::running(&[]);
        fx.plan.bridge_vlans.insert((5, 1), 0);
        let mut want = Plan::default();
        want.bridge_vlans.insert((6, 1), 0);
        let a = reconcile(
            want,
            &fx.filter,
            &RuleSlots::default(),
            None,
            &no_names,
            fx.current(),
        );
        assert_eq!(
            a.list,
            vec![
                Action::SetBridgeVlan {
                    ifindex: 6,
                    vid: 1,
                    flags: 0
                },
                Action::DelBridgeVlan { ifindex: 5, vid: 1 },
            ]
        );
    }
}
