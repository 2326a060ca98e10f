//! Unit tests of the route classification and of the counts kept from events.

use std::collections::BTreeMap;

use wirespeed_testkit::rng::Rng;

use super::*;

fn route(family: u8, delete: bool, replace: bool, multipath: bool) -> RouteChange {
    RouteChange {
        family,
        delete,
        replace,
        source_specific: false,
        multipath,
        nhid: None,
        mtu: None,
        realm: false,
        custom_local: false,
    }
}

#[test]
fn events_count_up_at_once_and_down_to_zero_only_through_a_dump() {
    let mut l = RouteLedger {
        groups: Some(BTreeSet::new()),
        ..RouteLedger::default()
    };
    // The first multipath route turns the IPv4 cache off: the plan changes, no dump.
    assert!(l.route(&route(AF_INET, false, false, true)));
    assert_eq!(
        l.v4,
        RouteCounts {
            uncacheable: 1,
            multipath: 1,
            ..RouteCounts::default()
        }
    );
    assert_eq!(l.take_recount(), Recount::No);
    assert!(!l.route(&route(AF_INET, false, false, true)));
    assert!(
        !l.route(&route(AF_INET, false, false, false)),
        "a plain route"
    );
    assert_eq!(l.v4.uncacheable, 2);
    assert_eq!(l.v6, RouteCounts::default());
    // A deletion takes one off (it may have been counted twice: a dump settles that within
    // the period), but not the last: a dump confirms that one at once.
    assert!(!l.route(&route(AF_INET, true, false, true)));
    assert_eq!((l.v4.uncacheable, l.take_recount()), (1, Recount::Soon));
    assert!(!l.route(&route(AF_INET, true, false, true)));
    assert_eq!((l.v4.uncacheable, l.take_recount()), (1, Recount::Now));
    // A plain route replacing a route of the same key may have replaced a counted one.
    assert!(!l.route(&route(AF_INET, false, true, false)));
    assert_eq!(l.take_recount(), Recount::Soon);
    // ...which a plain deletion never did.
    l.route(&route(AF_INET, true, false, false));
    assert_eq!(l.take_recount(), Recount::No);
    // Nothing counted: a replace asks for nothing.
    l.set(
        Some(BTreeSet::new()),
        RouteCounts::default(),
        RouteCounts::default(),
    );
    l.route(&route(AF_INET6, false, true, false));
    assert_eq!(l.take_recount(), Recount::No);
    // Routes of other families (multicast tables) are not counted.
    assert!(!l.route(&route(128, false, false, true)));
}

#[test]
fn nexthop_events_keep_the_groups_and_deletions_ask_for_a_dump() {
    let mut l = RouteLedger {
        groups: Some(BTreeSet::new()),
        ..RouteLedger::default()
    };
    let nh = |id, group, delete| NexthopChange {
        delete,
        id: Some(id),
        group,
    };
    let through = |id| RouteChange {
        nhid: Some(id),
        ..route(AF_INET, false, false, false)
    };
    l.nexthop(&nh(1, false, false));
    l.nexthop(&nh(3, true, false));
    assert_eq!(l.take_recount(), Recount::No, "nothing counted yet");
    // FRR's routes through a single next hop leave the cache on, without a dump.
    assert!(!l.route(&through(1)));
    assert_eq!(l.v4, RouteCounts::default());
    assert!(l.route(&through(3)));
    assert_eq!(
        l.v4,
        RouteCounts {
            uncacheable: 1,
            multipath: 1,
            ..RouteCounts::default()
        }
    );
    // Deleting an object deletes its IPv4 routes without route events: a group's were
    // counted, and may have been the last.
    l.nexthop(&nh(1, false, true));
    assert_eq!(l.take_recount(), Recount::Soon);
    l.nexthop(&nh(3, true, true));
    assert_eq!(l.take_recount(), Recount::Now);
    assert_eq!(l.groups, Some(BTreeSet::new()));
    // An id reused by a single next hop is no group any more.
    l.nexthop(&nh(5, true, false));
    l.nexthop(&nh(5, false, true));
    l.nexthop(&nh(5, false, false));
    assert!(!l.route(&through(5)) && l.v4.uncacheable == 1);
    // Unreadable: dump the objects again.
    l.nexthop(&NexthopChange {
        delete: false,
        id: None,
        group: false,
    });
    assert_eq!(l.take_recount(), Recount::Now);
    // Groups not known: every object counts as one.
    l.set(None, RouteCounts::default(), RouteCounts::default());
    assert!(l.route(&through(1)));
    l.routes_may_be_flushed();
    assert_eq!(l.take_recount(), Recount::Soon);
    l.set(None, RouteCounts::default(), RouteCounts::default());
    l.routes_may_be_flushed();
    assert_eq!(l.take_recount(), Recount::No);
}

/// A model kernel: routes by key, each plain, multipath or through a nexthop object, and
/// the objects. It answers with the events the kernel sends, including none where the
/// kernel sends none (an object deleted takes its routes with it).
#[derive(Default)]
struct ModelKernel {
    /// key -> (multipath, nhid)
    routes: BTreeMap<u8, (bool, Option<u32>)>,
    /// id -> group
    objects: BTreeMap<u32, bool>,
}

impl ModelKernel {
    fn counts(&self) -> RouteCounts {
        let groups = self.groups();
        let n = self
            .routes
            .values()
            .filter(|(mp, nhid)| route_of(*mp, *nhid, false, false).hashed(Some(&groups)))
            .count();
        RouteCounts {
            uncacheable: n,
            multipath: n,
            ..RouteCounts::default()
        }
    }

    fn groups(&self) -> BTreeSet<u32> {
        self.objects
            .iter()
            .filter(|(_, g)| **g)
            .map(|(id, _)| *id)
            .collect()
    }
}

fn route_of(multipath: bool, nhid: Option<u32>, delete: bool, replace: bool) -> RouteChange {
    RouteChange {
        nhid,
        ..route(AF_INET, delete, replace, multipath)
    }
}

#[test]
fn counts_from_events_are_never_below_the_truth_and_settle_after_the_last_route() {
    for seed in 0..200u64 {
        let mut rng = Rng::new(seed);
        let mut k = ModelKernel::default();
        let mut l = RouteLedger {
            groups: Some(BTreeSet::new()),
            ..RouteLedger::default()
        };
        // Steps until the dump the ledger asked for.
        let mut due: Option<u64> = None;
        for step in 0..300 {
            let key = (rng.next_u64() % 8) as u8;
            let id = 1 + (rng.next_u64() % 4) as u32;
            let what = rng.next_u64() % 10;
            // The route this step may write: plain, multipath or through object `id`.
            let kind = rng.next_u64() % 3;
            let (mp, nhid) = match kind {
                0 => (false, None),
                1 => (true, None),
                _ => (false, k.objects.contains_key(&id).then_some(id)),
            };
            match what {
                0..=3 if !k.routes.contains_key(&key) => {
                    k.routes.insert(key, (mp, nhid));
                    l.route(&route_of(mp, nhid, false, false));
                }
                0..=3 => {
                    k.routes.insert(key, (mp, nhid));
                    l.route(&route_of(mp, nhid, false, true));
                }
                4 | 5 => {
                    if let Some((mp, nhid)) = k.routes.remove(&key) {
                        l.route(&route_of(mp, nhid, true, false));
                    }
                }
                6 if !k.objects.contains_key(&id) => {
                    let group = rng.next_u64().is_multiple_of(2);
                    k.objects.insert(id, group);
                    l.nexthop(&NexthopChange {
                        delete: false,
                        id: Some(id),
                        group,
                    });
                }
                6 => {
                    // No route events for the routes it takes along.
                    let group = k.objects.remove(&id).unwrap();
                    k.routes.retain(|_, (_, nhid)| *nhid != Some(id));
                    l.nexthop(&NexthopChange {
                        delete: true,
                        id: Some(id),
                        group,
                    });
                }
                // Reported again without a replace: an IPv6 next hop appended to a
                // multipath route, or an event queued while the start's dump ran.
                7 => {
                    if let Some(&(mp, nhid)) = k.routes.get(&key) {
                        l.route(&route_of(mp, nhid, false, false));
                    }
                }
                _ => l.routes_may_be_flushed(),
            }
            let truth = k.counts();
            for (kept, true_n) in [
                (l.v4.uncacheable, truth.uncacheable),
                (l.v4.multipath, truth.multipath),
            ] {
                assert!(
                    kept >= true_n,
                    "seed {seed} step {step}: counted {kept}, the kernel has {true_n}"
                );
            }
            // The watcher dumps when asked to now, and when asked to soon, some steps later
            // (it keeps the request until then).
            match l.take_recount() {
                Recount::Now => due = Some(0),
                Recount::Soon => due = due.or(Some(1 + rng.next_u64() % 5)),
                Recount::No => {}
            }
            match due {
                Some(0) => {
                    l.set(Some(k.groups()), truth, RouteCounts::default());
                    due = None;
                }
                Some(n) => due = Some(n - 1),
                // Nothing asked for: once the kernel has none, neither do the counts.
                None if truth.uncacheable == 0 => {
                    assert_eq!(
                        l.v4.uncacheable, 0,
                        "seed {seed} step {step}: stuck above 0"
                    );
                }
                None => {}
            }
            assert!(
                l.v4.uncacheable >= truth.uncacheable,
                "seed {seed} step {step}"
            );
            assert_eq!(l.groups, Some(k.groups()), "seed {seed} step {step}");
        }
    }
}

#[test]
fn the_smallest_route_mtu_never_runs_above_the_truth() {
    let mut l = RouteLedger {
        groups: Some(BTreeSet::new()),
        ..RouteLedger::default()
    };
    let with_mtu = |delete: bool, mtu: u32| RouteChange {
        mtu: Some(mtu),
        realm: false,
        custom_local: false,
        ..route(AF_INET, delete, false, false)
    };
    assert!(
        l.route(&with_mtu(false, 1400)),
        "the first MTU changes the plan"
    );
    assert!(l.route(&with_mtu(false, 1280)), "a smaller one too");
    assert!(!l.route(&with_mtu(false, 9000)));
    assert_eq!((l.v4.mtu_routes, l.v4.min_mtu), (3, 1280));
    // A deletion keeps the smallest (it may be the one deleted: the dump says).
    assert!(!l.route(&with_mtu(true, 1280)));
    assert_eq!((l.v4.min_mtu, l.take_recount()), (1280, Recount::Soon));
    l.route(&with_mtu(true, 1400));
    l.route(&with_mtu(true, 9000));
    assert_eq!((l.v4.mtu_routes, l.take_recount()), (1, Recount::Now));
    l.set(
        Some(BTreeSet::new()),
        RouteCounts::default(),
        RouteCounts::default(),
    );
    assert_eq!(l.v4.min_mtu, 0);
}

#[test]
fn realms_count_like_the_rest_and_a_users_local_route_sticks() {
    let mut l = RouteLedger::default();
    let realm = RouteChange {
        realm: true,
        ..route(AF_INET, false, false, false)
    };
    assert!(l.route(&realm), "the first realm changes the plan");
    assert_eq!(l.v4.realms, 1);
    assert!(!l.route(&RouteChange {
        delete: true,
        ..realm
    }));
    assert_eq!(
        l.take_recount(),
        Recount::Now,
        "the last one only through a dump"
    );
    let local = RouteChange {
        custom_local: true,
        ..route(AF_INET, false, false, false)
    };
    assert!(l.route(&local) && l.custom_local_v4);
    assert!(!l.route(&local), "already set");
    l.route(&RouteChange {
        delete: true,
        ..local
    });
    l.set(None, RouteCounts::default(), RouteCounts::default());
    assert!(l.custom_local_v4, "never cleared, as the kernel's flag");
    let mut fresh = RouteLedger::default();
    let dumped = RouteCounts {
        custom_local: 1,
        ..RouteCounts::default()
    };
    fresh.set(None, dumped, RouteCounts::default());
    assert!(fresh.custom_local_v4, "a dump finds one too");
}
