//! Which addresses this node may announce to its routers now (docs/LB.md, "Several nodes:
//! announcing over BGP"). A pure state machine: fed the node's state and the time, it answers
//! the set to announce, so every condition and the hold-down are tested without a clock.
//!
//! A VIP is announceable while all of these hold, and has held for the hold-down: the data
//! path is attached on every interface, the last plan was applied, the node is not draining,
//! a service on the VIP has a live real (weight > 0, not down), and every health check on the
//! VIP has given its first verdict. It is withdrawn at once when one fails, except the last:
//! once announced, a VIP stays while it has a live real, so a real added to every node at once
//! does not withdraw the VIP from all of them until its check has judged. A full-NAT local
//! address is announced while the data path is attached and applied, draining or not: replies
//! of the connections a drain lets finish come back to it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::model::{Health, Mode, Service};

/// Unless `--announce-hold-down` says otherwise: long enough that a real flapping on its
/// health checks does not flap the route, short enough that a new node takes traffic soon.
pub const DEFAULT_HOLD_DOWN: Duration = Duration::from_secs(3);

/// What the node is, as far as announcing goes.
#[derive(Clone, Debug, Default)]
pub struct NodeState<'a> {
    /// The data path's program is attached on every `--iface`.
    pub attached: bool,
    /// The last plan built was written to the data path without error.
    pub plan_applied: bool,
    /// `lb drain`, or SIGTERM's wait before detaching.
    pub draining: bool,
    pub services: &'a [Service],
}

/// A real that can take new connections: weighted, not down, and reachable by its mode (a
/// full-NAT real needs a local address of its family).
fn is_live(s: &Service, r: &crate::model::Real) -> bool {
    r.effective_weight() > 0
        && (s.check.is_none() || r.health == Health::Up)
        && (r.mode != Mode::FullNat || s.laddrs.iter().any(|a| a.is_ipv4() == r.addr.is_ipv4()))
}

/// The addresses this node could start announcing this instant, before the hold-down.
pub fn servable(state: &NodeState) -> BTreeSet<IpAddr> {
    servable_when(state, true)
}

/// The addresses this node may go on announcing: as [`servable`], but a real its check has
/// not judged yet does not hold a VIP back.
pub fn keepable(state: &NodeState) -> BTreeSet<IpAddr> {
    servable_when(state, false)
}

fn servable_when(state: &NodeState, all_judged: bool) -> BTreeSet<IpAddr> {
    let mut out = BTreeSet::new();
    if !state.attached || !state.plan_applied {
        return out;
    }
    for s in state.services {
        out.extend(s.laddrs.iter().copied());
    }
    if state.draining {
        return out;
    }
    let mut vips: BTreeMap<IpAddr, bool> = BTreeMap::new();
    for s in state.services {
        let live = s.reals.iter().any(|r| is_live(s, r));
        *vips.entry(s.key.vip.ip()).or_default() |= live;
    }
    // A check still waiting for its first verdict on any real keeps the whole VIP back: the
    // node does not yet know what it would serve there.
    for s in state
        .services
        .iter()
        .filter(|s| all_judged && s.check.is_some())
    {
        if s.reals.iter().any(|r| r.health == Health::Unchecked) {
            vips.insert(s.key.vip.ip(), false);
        }
    }
    out.extend(vips.into_iter().filter(|(_, ok)| *ok).map(|(a, _)| a));
    out
}

/// Servable addresses become announced after the hold-down; unservable ones are withdrawn at
/// once. An address that flaps faster than the hold-down is never announced, so the updates
/// a flapping real causes are bounded by one announcement per hold-down.
#[derive(Clone, Debug)]
pub struct Announcer {
    hold_down: Duration,
    /// Servable addresses, each since when it has been servable without a break.
    since: BTreeMap<IpAddr, Instant>,
    announced: BTreeSet<IpAddr>,
}

impl Announcer {
    pub fn new(hold_down: Duration) -> Announcer {
        Announcer {
            hold_down,
            since: BTreeMap::new(),
            announced: BTreeSet::new(),
        }
    }

    /// Takes the node's state at `now`; true when the announced set changed.
    pub fn update(&mut self, now: Instant, state: &NodeState) -> bool {
        let keepable = keepable(state);
        self.since.retain(|a, _| keepable.contains(a));
        for a in &servable(state) {
            self.since.entry(*a).or_insert(now);
        }
        let next: BTreeSet<IpAddr> = self
            .since
            .iter()
            .filter(|(_, t)| now.saturating_duration_since(**t) >= self.hold_down)
            .map(|(a, _)| *a)
            .collect();
        let changed = next != self.announced;
        self.announced = next;
        changed
    }

    /// What to announce now.
    pub fn announced(&self) -> &BTreeSet<IpAddr> {
        &self.announced
    }

    /// When an address now waiting out its hold-down is due, so a caller can wake then.
    pub fn next_due(&self) -> Option<Instant> {
        self.since
            .iter()
            .filter(|(a, _)| !self.announced.contains(a))
            .map(|(_, t)| *t + self.hold_down)
            .min()
    }
}

/// The host route of an address, as routers and ExaBGP write it: /32 or /128.
pub fn host_prefix(a: IpAddr) -> String {
    match a {
        IpAddr::V4(a) => format!("{a}/32"),
        IpAddr::V6(a) => format!("{a}/128"),
    }
}

#[cfg(test)]
#[path = "announce_tests.rs"]
mod tests;
