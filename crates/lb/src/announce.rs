//! Which addresses this node may announce to its routers now (docs/LB.md, "Several nodes:
//! announcing over BGP"). A pure state machine: fed the node's state and the time, it answers
//! the set to announce, so every condition and the hold-down are tested without a clock.
//!
//! A VIP is announceable while all of these hold, and has held for the hold-down: the data
//! path is attached on every interface and every one is up, the last plan was applied, the
//! node is not draining,
//! a service on the VIP has a live real (weight > 0, not down), and every health check on the
//! VIP has given its first verdict. It is withdrawn at once when one fails, except the last:
//! once announced, a VIP stays while it has a live real, so a real added to every node at once
//! does not withdraw the VIP from all of them until its check has judged. A full-NAT local
//! address is announced while the data path is attached, up and applied, draining or not: replies
//! of the connections a drain lets finish come back to it.
//!
//! [`follow`] is `lb announce`'s loop, the same for every speaker: it watches the daemon's set
//! and hands it to a [`Speaker`] (ExaBGP's text API in `exabgp.rs`, FRR's vtysh in `frr.rs`),
//! which turns it into routes with the [`changes`] from what is announced now.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use crate::control::{self, Reply, Request};
use crate::model::{Health, Mode, Service};
use crate::{Error, Result};

/// Unless `--announce-hold-down` says otherwise: long enough that a real flapping on its
/// health checks does not flap the route, short enough that a new node takes traffic soon.
pub const DEFAULT_HOLD_DOWN: Duration = Duration::from_secs(3);

/// What the node is, as far as announcing goes.
#[derive(Clone, Debug, Default)]
pub struct NodeState<'a> {
    /// The data path's program is attached on every `--iface`.
    pub attached: bool,
    /// Every `--iface` is up with its carrier: a node that lost its link to the reals (a
    /// two-arm node's second port) can serve nothing, though its BGP session stays up.
    pub links_up: bool,
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
    if !state.attached || !state.links_up || !state.plan_applied {
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

/// One step from the routes a speaker announces towards the wanted ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Withdraw(IpAddr),
    Announce(IpAddr),
}

/// The steps that turn `have` into `want`: withdrawals first, so a node losing an address stops
/// attracting its traffic before anything else; each in address order, IPv4 before IPv6.
pub fn changes(have: &BTreeSet<IpAddr>, want: &BTreeSet<IpAddr>) -> Vec<Change> {
    let mut out: Vec<Change> = have
        .difference(want)
        .map(|a| Change::Withdraw(*a))
        .collect();
    out.extend(want.difference(have).map(|a| Change::Announce(*a)));
    out
}

/// Why a speaker could not make its routes the wanted ones.
#[derive(Debug)]
pub enum Failure {
    /// The speaker is gone for good (ExaBGP closed our stdout): [`follow`] returns this.
    Gone(Error),
    /// This attempt failed; the line says what to do. [`follow`] logs it (once while it
    /// repeats) and tries again after its retry interval.
    Retry(String),
}

/// What `lb announce` drives: it makes the routes announced for this node what it is given.
pub trait Speaker {
    /// Makes the announced addresses exactly `wanted`; returns lines for the log (what was
    /// done), if the speaker has any to tell.
    fn apply(&mut self, wanted: &BTreeSet<IpAddr>) -> std::result::Result<Vec<String>, Failure>;

    /// How often to apply the set again while nothing changes, for a speaker whose routes can
    /// be lost behind our back (FRR's bgpd restarted without them).
    fn resync(&self) -> Option<Duration> {
        None
    }
}

enum Event {
    Set(BTreeSet<IpAddr>),
    Log(String),
}

/// Follows the daemon on `socket` for ever, making `speaker` announce the daemon's set: the
/// set at each change, nothing while the daemon is gone (its socket closed, or no daemon to
/// connect to), and the set again on reconnecting. `retry`: the wait between connection
/// attempts, and between attempts of a failed apply. Returns only when the speaker is gone.
pub fn follow(
    socket: &Path,
    speaker: &mut dyn Speaker,
    retry: Duration,
    log: &mut dyn FnMut(&str),
) -> Result<()> {
    let (tx, rx) = mpsc::channel();
    let watched = socket.to_path_buf();
    let done = Done(Arc::new(AtomicBool::new(false)));
    let stop = done.0.clone();
    // The daemon's stream blocks on reading; a thread of its own lets a failed apply be
    // retried, and a resync come, while no update arrives.
    std::thread::Builder::new()
        .name("lb announce watch".into())
        .spawn(move || watch(&watched, retry, &tx, &stop))
        .map_err(crate::error::io("start the thread that watches the daemon"))?;
    let mut wanted = BTreeSet::new();
    // Nothing is applied before the first word from the watcher: the set on connecting, or
    // nothing when there is no daemon, so a restarted `lb announce` does not withdraw first.
    let mut due: Option<Instant> = None;
    let mut failing: Option<String> = None;
    loop {
        let event = match due {
            Some(t) => rx.recv_timeout(t.saturating_duration_since(Instant::now())),
            None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        };
        match event {
            Ok(Event::Set(set)) => {
                wanted = set;
                due = Some(Instant::now());
            }
            Ok(Event::Log(m)) => log(&m),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(Error::Invalid(
                    "the thread that watches the daemon stopped; restart lb announce".into(),
                ))
            }
        }
        if due.is_some_and(|t| t <= Instant::now()) {
            match speaker.apply(&wanted) {
                Ok(done) => {
                    if failing.take().is_some() {
                        log("the speaker took the routes now");
                    }
                    done.iter().for_each(|l| log(l));
                    due = speaker.resync().map(|d| Instant::now() + d);
                }
                Err(Failure::Gone(e)) => return Err(e),
                Err(Failure::Retry(m)) => {
                    if failing.as_ref() != Some(&m) {
                        log(&format!("{m}; retrying every {retry:?}"));
                        failing = Some(m);
                    }
                    due = Some(Instant::now() + retry);
                }
            }
        }
    }
}

/// Tells the watcher that `follow` has returned, so it stops reconnecting to no one.
struct Done(Arc<AtomicBool>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The watching connection, reconnected for ever; returns when `follow` has gone.
fn watch(
    socket: &Path,
    retry: Duration,
    tx: &mpsc::Sender<Event>,
    done: &AtomicBool,
) -> Option<()> {
    let log = |m: String| tx.send(Event::Log(m)).ok();
    let mut was_down = false;
    while !done.load(Ordering::Relaxed) {
        match control::subscribe(socket, &Request::WatchAnnounceable) {
            Ok(replies) => {
                log(format!("following the daemon on {}", socket.display()))?;
                was_down = false;
                for reply in replies {
                    match reply {
                        Ok(Reply::Announceable(set)) => {
                            tx.send(Event::Set(set.into_iter().collect())).ok()?
                        }
                        Ok(Reply::Error(e)) => {
                            log(e)?;
                            break;
                        }
                        Ok(other) => {
                            log(format!("the daemon sent {other:?} where announceable addresses were due; are the client and daemon the same wirespeed version?"))?;
                            break;
                        }
                        Err(e) => {
                            log(e.to_string())?;
                            break;
                        }
                    }
                }
                log(
                    "the daemon closed the connection: withdrawing everything, reconnecting".into(),
                )?;
                tx.send(Event::Set(BTreeSet::new())).ok()?;
            }
            Err(e) => {
                if !was_down {
                    log(format!(
                        "{e}; withdrawing everything, retrying every {retry:?}"
                    ))?;
                    tx.send(Event::Set(BTreeSet::new())).ok()?;
                    was_down = true;
                }
            }
        }
        std::thread::sleep(retry);
    }
    None
}

#[cfg(test)]
mod tests;
