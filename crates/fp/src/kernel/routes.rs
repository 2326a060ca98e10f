//! The routes the route cache cannot stand for, counted from route and nexthop events.
//!
//! A family's route cache is on only while it has no multipath, nexthop-group or (IPv6)
//! source-specific route. Counting them takes a dump of every route, which on a router with
//! a full table (FRR installs every route through a nexthop object) is tens of milliseconds
//! per 65,000 routes. So the counts are kept from the events themselves, under one
//! invariant: a count is never below the truth, and it reaches zero only through a dump.
//! - A route event that adds or replaces an uncacheable route adds one at once, without
//!   a dump: the cache goes off with the event.
//! - A deleted uncacheable route takes one off, except the last: a dump confirms that one
//!   before the cache comes back on.
//! - A count can run above the truth: a route counted twice (its event queued while the
//!   start's dump ran, or an IPv6 next hop appended to a multipath route, which the kernel
//!   reports as the whole route again), or one gone without saying so (replaced, its nexthop
//!   object deleted, which deletes its IPv4 routes with no route event, or flushed with a
//!   link or address). That only keeps the cache off; each such event, and each deletion
//!   that leaves a count above zero, asks for a dump within the daemon's recount period
//!   (`daemon::ROUTE_RECOUNT_PERIOD`), so the cache comes back on within it once the last
//!   such route is gone.
//!
//! The same counts, under the same invariant, keep the IPv4 routes with an MTU of their own
//! (`ip route add ... mtu N`), which the kernel's forwarding honours and the FIB helper does
//! not; their smallest MTU never runs above the truth until a dump.

use std::collections::BTreeSet;

use crate::kernel::family::{AF_INET, AF_INET6};

/// What a route message (event or dump) says about its route (`netlink::parse_route`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteChange {
    pub family: u8,
    /// RTM_DELROUTE.
    pub delete: bool,
    /// NLM_F_REPLACE: the route took the place of another, whose kind the event does not say.
    pub replace: bool,
    /// A source prefix (`from`): the answer depends on the source.
    pub source_specific: bool,
    /// RTA_MULTIPATH.
    pub multipath: bool,
    /// RTA_NH_ID: through a nexthop object, a group or a single next hop.
    pub nhid: Option<u32>,
    /// The route's own MTU (RTA_METRICS RTAX_MTU), unless locked: IPv4 forwarding honours it
    /// (`ip_dst_mtu_maybe_forward`), `bpf_fib_lookup` checks only a locked one.
    pub mtu: Option<u32>,
    /// A realm (RTA_FLOW, on the route or one of its next hops): the kernel accounts each
    /// packet to it (/proc/net/rt_acct, tc's route classifier) and checks every source in full
    /// while any exists (`fib_num_tclassid_users`).
    pub realm: bool,
    /// An IPv4 local route added by a user (`ip route add local ...`, any protocol but the
    /// kernel's): from then on the kernel checks every source in full
    /// (`fib_has_custom_local_routes`, which is never cleared).
    pub custom_local: bool,
}

impl RouteChange {
    /// Whether the FIB may pick among several next hops by the flow's hash: multipath, or a
    /// nexthop object that is a group. `groups` holds the ids of the group objects; None
    /// counts every object as a possible group.
    ///
    /// A group's members change without a route event, so a group counts even with one
    /// member; an object never turns from a single next hop into a group or back (the
    /// kernel refuses that replace), so a route through a single-hop object never is.
    pub fn hashed(&self, groups: Option<&BTreeSet<u32>>) -> bool {
        self.multipath
            || self
                .nhid
                .is_some_and(|id| groups.is_none_or(|g| g.contains(&id)))
    }

    /// Whether the FIB's answer depends on more than the destination: [`Self::hashed`], or
    /// a source prefix. A route through a single-hop nexthop object is cacheable: the object
    /// changes with a nexthop event, and every event drops the cached answers.
    pub fn uncacheable(&self, groups: Option<&BTreeSet<u32>>) -> bool {
        self.source_specific || self.hashed(groups)
    }
}

/// A nexthop object added, replaced or deleted (`netlink::parse_nexthop`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NexthopChange {
    pub delete: bool,
    /// None: the message carried no readable id.
    pub id: Option<u32>,
    pub group: bool,
}

/// One family's routes that the fast path treats apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteCounts {
    /// [`RouteChange::uncacheable`]: the route cache cannot stand for them.
    pub uncacheable: usize,
    /// [`RouteChange::hashed`]: the FIB picks their next hop by the packet's hash.
    pub multipath: usize,
    /// Routes with an unlocked MTU of their own, and the smallest of those MTUs (0: none).
    pub mtu_routes: usize,
    pub min_mtu: u32,
    /// [`RouteChange::realm`].
    pub realms: usize,
    /// [`RouteChange::custom_local`], as a dump finds them.
    pub custom_local: usize,
}

impl RouteCounts {
    /// What the plan depends on.
    fn shape(&self) -> (bool, bool, u32, bool) {
        (
            self.uncacheable == 0,
            self.multipath == 0,
            self.min_mtu,
            self.realms == 0,
        )
    }

    /// Counts one route of a dump.
    pub fn add(&mut self, c: &RouteChange, groups: Option<&BTreeSet<u32>>) {
        self.count(c.uncacheable(groups), c.hashed(groups), c.mtu, c.realm);
        self.custom_local += c.custom_local as usize;
    }

    fn count(&mut self, uncacheable: bool, hashed: bool, mtu: Option<u32>, realm: bool) {
        self.uncacheable += uncacheable as usize;
        self.multipath += hashed as usize;
        self.realms += realm as usize;
        if let Some(m) = mtu {
            self.mtu_routes += 1;
            self.min_mtu = if self.min_mtu == 0 {
                m
            } else {
                self.min_mtu.min(m)
            };
        }
    }
}

/// What the counts need after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Recount {
    #[default]
    No,
    /// A count may be too high: a dump within the recount period settles it.
    Soon,
    /// A count reached zero (or would go below): a dump confirms it before the cache is on.
    Now,
}

/// Both families' counts and the nexthop groups they are counted against.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteLedger {
    pub v4: RouteCounts,
    pub v6: RouteCounts,
    /// The ids of the nexthop objects that are groups, from the last dump and the nexthop
    /// events since. None: not known (the dump failed, or none was made yet), so every
    /// object counts as a group.
    pub groups: Option<BTreeSet<u32>>,
    /// What the events since the last dump ask for; [`RouteLedger::take_recount`] clears it.
    pub recount: Recount,
    /// A user's IPv4 local route was seen, by an event or a dump (sticky, as the kernel's
    /// `fib_has_custom_local_routes`): every IPv4 source is checked as the kernel does.
    pub custom_local_v4: bool,
}

impl RouteLedger {
    pub fn family(&self, family: u8) -> Option<&RouteCounts> {
        match family {
            AF_INET => Some(&self.v4),
            AF_INET6 => Some(&self.v6),
            _ => None,
        }
    }

    fn family_mut(&mut self, family: u8) -> Option<&mut RouteCounts> {
        match family {
            AF_INET => Some(&mut self.v4),
            AF_INET6 => Some(&mut self.v6),
            _ => None,
        }
    }

    fn ask(&mut self, r: Recount) {
        self.recount = self.recount.max(r);
    }

    fn any_counted(&self) -> bool {
        self.v4 != RouteCounts::default() || self.v6 != RouteCounts::default()
    }

    /// Applies one route event; returns true when a count went from zero to more (the
    /// plan changes: a cache goes off).
    pub fn route(&mut self, c: &RouteChange) -> bool {
        let groups = self.groups.as_ref();
        let (uncacheable, hashed) = (c.uncacheable(groups), c.hashed(groups));
        let custom_local =
            c.custom_local && c.family == AF_INET && !c.delete && !self.custom_local_v4;
        let Some(n) = self.family_mut(c.family) else {
            return false;
        };
        let before = n.shape();
        let mut recount = Recount::No;
        if c.delete {
            // A deleted MTU leaves the smallest as it was (never above the truth): the dump
            // that a deletion asks for settles it.
            for (count, is) in [
                (&mut n.uncacheable, uncacheable),
                (&mut n.multipath, hashed),
                (&mut n.mtu_routes, c.mtu.is_some()),
                (&mut n.realms, c.realm),
            ] {
                if is {
                    if *count <= 1 {
                        recount = Recount::Now;
                    } else {
                        // It may have been counted twice: settle it within the period.
                        *count -= 1;
                        recount = recount.max(Recount::Soon);
                    }
                }
            }
        } else {
            // A replaced route may have been one of them: never taken off without a dump.
            if c.replace && *n != RouteCounts::default() {
                recount = Recount::Soon;
            }
            n.count(uncacheable, hashed, c.mtu, c.realm);
        }
        let after = n.shape();
        self.ask(recount);
        self.custom_local_v4 |= custom_local;
        before != after || custom_local
    }

    /// Applies one nexthop event. Counts never change here (a route through a new object
    /// comes with its own route event), but deleting an object deletes its IPv4 routes with
    /// no route event.
    pub fn nexthop(&mut self, c: &NexthopChange) {
        let Some(id) = c.id else {
            // Which object changed is unknown: dump the objects again.
            self.ask(Recount::Now);
            return;
        };
        let was_group = self.groups.as_ref().is_none_or(|g| g.contains(&id));
        if let Some(g) = self.groups.as_mut() {
            if c.group && !c.delete {
                g.insert(id);
            } else {
                g.remove(&id);
            }
        }
        if c.delete && self.any_counted() {
            // A group's routes were all counted: they may have been the last.
            self.ask(if was_group {
                Recount::Now
            } else {
                Recount::Soon
            });
        }
    }

    /// A link or address change, which may flush IPv4 routes without route events.
    pub fn routes_may_be_flushed(&mut self) {
        if self.any_counted() {
            self.ask(Recount::Soon);
        }
    }

    /// The counts of a dump, and the groups they were counted against.
    pub fn set(&mut self, groups: Option<BTreeSet<u32>>, v4: RouteCounts, v6: RouteCounts) {
        self.groups = groups;
        self.custom_local_v4 |= v4.custom_local > 0;
        self.v4 = v4;
        self.v6 = v6;
        self.recount = Recount::No;
    }

    pub fn take_recount(&mut self) -> Recount {
        std::mem::take(&mut self.recount)
    }
}

#[cfg(test)]
mod tests;
