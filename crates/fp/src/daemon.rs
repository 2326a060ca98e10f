//! `wirespeed fp run`: watch -> change -> reconcile -> apply. The watchers (`kernel::watch`)
//! yield the kernel's changes; the daemon applies them to the model, re-reads what an event
//! only points at (`kernel::reader`, `filter::ruleset`), asks `datapath::reconcile` what the
//! data path must do, and has the `DataPlane` (`datapath::apply`) do it. `status` keeps the
//! record. This file is the loop that wires them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::datapath::apply::{Applied, DataPlane};
use crate::datapath::reconcile::{self, Actions};
use crate::datapath::rule_counters::RuleSlots;
use crate::error::{io, Result};
use crate::filter::ruleset::{self, Ruleset};
use crate::kernel::family::{AF_INET, AF_INET6};
use crate::kernel::forward_hooks::ForwardHooks;
use crate::kernel::neigh::StaleNeighbours;
use crate::kernel::nftevent::{self, NftMsg};
use crate::kernel::reader::{self, BrNetfilter, KernelReader};
use crate::kernel::routes::Recount;
use crate::kernel::sysctl_hook::{Gate, Settle, SysctlHook};
use crate::kernel::taps::Taps;
use crate::kernel::watch::{Change, Watchers};
use crate::metrics::FpMetrics;
use crate::model::{BridgeHook, Event, Model, Settings};
use crate::status::{self, Status, StatusLog};

/// State with no change events (ipset members, x_tables presence): polled at this period.
pub const POLL_PERIOD: Duration = Duration::from_millis(100);
const STATUS_PERIOD: Duration = Duration::from_millis(500);
/// After rule events applied from their decoding, this long without events ends the burst
/// and the ruleset is read back to check them.
const CHECK_DELAY: Duration = Duration::from_millis(20);
/// Route counts that events may have left too high (routes::RouteLedger) are settled by a
/// dump at most this often: on a full table a dump costs tens of milliseconds per 65,000
/// routes, and a count too high only keeps a route cache off.
pub const ROUTE_RECOUNT_PERIOD: Duration = Duration::from_secs(5);

/// The name of the lab namespace (/run/netns/ws-*) the calling thread is in, if any.
pub fn lab_netns() -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let me = std::fs::metadata("/proc/thread-self/ns/net").ok()?;
    for e in std::fs::read_dir("/run/netns").ok()?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("ws-") {
            continue;
        }
        if let Ok(m) = std::fs::metadata(e.path()) {
            if m.ino() == me.ino() && m.dev() == me.dev() {
                return Some(name);
            }
        }
    }
    None
}

#[derive(Debug, Clone)]
pub struct Config {
    /// Serve only these interfaces (None: every eligible one).
    pub only: Option<Vec<String>>,
    pub status_path: PathBuf,
    pub bridge_hook: BridgeHook,
    /// The IPv4 route cache (fp_maps.h); off, every packet asks the kernel's FIB.
    pub route_cache: bool,
    /// Serve Prometheus metrics on this address (`--metrics`), from the daemon's own loop.
    pub metrics: Option<SocketAddr>,
    /// No SELinux secmark, NetLabel or labeled IPsec is in use (`--assume-no-selinux-labels`).
    pub assume_no_selinux_labels: bool,
    /// Benchmarks only, never exact: XDP programs are not bound to their device, so a VLAN tag
    /// a driver keeps in metadata goes unseen. The on-the-DUT benchmark tail-calls the port's
    /// program, which a bound one refuses.
    pub unbound_xdp: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            only: None,
            status_path: status::default_status_path(),
            bridge_hook: BridgeHook::Auto,
            route_cache: true,
            metrics: None,
            assume_no_selinux_labels: false,
            unbound_xdp: false,
        }
    }
}

/// What one batch of changes asks for besides the model updates already made: which kernel
/// state to read again, and what to tell the status.
#[derive(Default)]
struct Pending {
    /// Event kinds, for the response record.
    kinds: Vec<&'static str>,
    /// The plan may have changed.
    changed: bool,
    /// Events were lost: read everything again.
    resync: bool,
    /// Route or link state changed: cached FIB answers are stale.
    rtnl: bool,
    routes: bool,
    /// Addresses changed: the router's local-source set is read again.
    addrs4: bool,
    rules4: bool,
    rules6: bool,
    sysctls: bool,
    xfrm: bool,
    tc: bool,
    bridge: bool,
    /// FDB entries were written as their events came.
    fdb: bool,
    /// The filter's input changed (nftables, x_tables).
    filter: bool,
    nft_msgs: Vec<NftMsg>,
    /// New ipset members (polled).
    members: Option<String>,
    /// Hash-policy writes the hook counted, to acknowledge once the routers are set by the
    /// values read after them.
    gate_ack: Option<[Option<u32>; crate::kernel::sysctl_hook::CLASSES]>,
}

impl Pending {
    fn reads_anything(&self) -> bool {
        self.resync
            || self.routes
            || self.addrs4
            || self.rules4
            || self.rules6
            || self.sysctls
            || self.xfrm
            || self.tc
            || self.filter
            || self.bridge
    }
}

pub struct Daemon {
    cfg: Config,
    model: Model,
    kernel: KernelReader,
    ruleset: Ruleset,
    dataplane: DataPlane,
    log: StatusLog,
    br_netfilter: BrNetfilter,
    /// The model's FDB was replaced by a dump: diff it against the map.
    fdb_resynced: bool,
    metrics: FpMetrics,
    /// A route count may be too high: recount once ROUTE_RECOUNT_PERIOD has passed since
    /// `last_recount`.
    recount_due: bool,
    last_recount: Option<Instant>,
    /// The write hooks (None: they could not attach; then model.hash_policy_unwatched says
    /// why) and the daemon's side of their gate.
    hook: Option<SysctlHook>,
    gate: Gate,
    /// This namespace's cookie, by which the hook records ebtables-legacy writes.
    netns_cookie: Option<u64>,
    /// An ebtables-legacy table was written here: bridged frames are the kernel's from then
    /// on, as its tables stay until the namespace goes.
    ebtables_legacy: bool,
    /// Which slot of the shared rule counters counts each rule (`rule_counters`).
    rule_slots: RuleSlots,
    /// Next hops in the STALE state, which the kernel's packets must drive (`neigh`).
    stale: StaleNeighbours,
}

impl Daemon {
    pub fn new(cfg: Config) -> Result<Daemon> {
        let mut model = Model::new(Settings {
            only: cfg.only.clone(),
            bridge_hook: cfg.bridge_hook,
            no_route_cache: !cfg.route_cache,
            assume_no_selinux_labels: cfg.assume_no_selinux_labels,
            unbound_xdp: cfg.unbound_xdp,
        });
        let dataplane = DataPlane::new()?;
        let hook = match SysctlHook::attach(dataplane.sysctl_gate()) {
            Ok(h) => Some(h),
            Err(e) => {
                model.set_hash_policy_unwatched(Some(format!("no sysctl hook ({e})")));
                None
            }
        };
        Ok(Daemon {
            cfg,
            model,
            dataplane,
            kernel: KernelReader::open()?,
            ruleset: Ruleset::default(),
            log: StatusLog::default(),
            br_netfilter: BrNetfilter::default(),
            fdb_resynced: false,
            metrics: FpMetrics::default(),
            recount_due: false,
            last_recount: None,
            hook,
            gate: Gate::new(),
            netns_cookie: wirespeed_sys::socket::netns_cookie().ok(),
            ebtables_legacy: false,
            rule_slots: RuleSlots::default(),
            stale: StaleNeighbours::default(),
        })
    }

    /// Whether the kernel reports which devices take XDP-redirected frames (else every port
    /// is served at TC).
    pub fn knows_xdp_features(&self) -> bool {
        self.kernel.netdev_family().is_some()
    }

    /// Why the write hooks could not attach (None: they are attached).
    pub fn write_hooks_missing(&self) -> Option<&str> {
        self.model.hash_policy_unwatched()
    }

    /// Whether anything makes the kernel filter bridged frames.
    fn bridge_kernel(&self) -> Option<String> {
        // br_netfilter (often built in, on by default) hands bridged frames to the IP hooks.
        // With no table there, only its header validation acts, which the bridge module
        // mirrors (BrPortVal::ip_check); with tables, the kernel must filter.
        let r = &self.ruleset;
        let l3 = r.l3_tables || r.legacy.0 || r.legacy.1;
        let (hooks, assume) = (
            self.model.forward_hooks(),
            self.model.assume_no_selinux_labels(),
        );
        let hooked = hooks
            .hands_off(false, assume)
            .or(hooks.hands_off(true, assume));
        if self.ebtables_legacy {
            Some("an ebtables-legacy table was written in this namespace (it filters every bridged frame)".into())
        } else if let (true, Some(h)) = (self.br_netfilter.on, hooked) {
            Some(format!(
                "br_netfilter passes bridged frames through the IP hooks: {h}"
            ))
        } else if self.br_netfilter.on && l3 {
            Some("br_netfilter passes bridged frames through the IP tables".into())
        } else if self.br_netfilter.tagged {
            Some("br_netfilter filters VLAN or PPPoE tagged frames".into())
        } else if r.l2_tables {
            Some("nftables bridge or netdev tables".into())
        } else {
            None
        }
    }

    fn sync_bridge(&mut self) -> Result<()> {
        self.kernel.bridge(&mut self.model)?;
        self.fdb_resynced = true;
        Ok(())
    }

    /// Reads the ruleset; unreadable, nothing may be fast-pathed past the filter.
    fn sync_filter(&mut self) {
        if let Err(e) = self.ruleset.sync(self.model.filter_mut()) {
            ruleset::all_to_kernel(self.model.filter_mut(), &e);
        }
    }

    fn sync_all(&mut self) -> Result<()> {
        self.kernel.links(&mut self.model)?;
        self.kernel.xdp_features(&mut self.model)?;
        self.recount_routes()?;
        self.kernel.addrs_v4(&mut self.model)?;
        self.kernel.rules(&mut self.model, AF_INET)?;
        self.kernel.rules(&mut self.model, AF_INET6)?;
        self.kernel.xfrm(&mut self.model)?;
        self.kernel.tc(&mut self.model)?;
        let stale = self.kernel.stale_neighbours()?;
        self.stale.replace(stale, self.dataplane.neigh_maps())?;
        let tcx = self.tcx_others();
        self.model.replace_tcx_others(tcx);
        self.model.replace_taps(Taps::read());
        self.model.replace_forward_hooks(ForwardHooks::read());
        self.br_netfilter = reader::read_sysctls(&mut self.model);
        self.sync_bridge()?;
        self.ruleset.legacy = ruleset::legacy_tables();
        if let Err(e) = self.ruleset.sync(self.model.filter_mut()) {
            // Unknown filter state: nothing may be fast-pathed past it.
            ruleset::all_to_kernel(self.model.filter_mut(), &e);
            self.ruleset.l2_tables = true;
        }
        Ok(())
    }

    /// Makes the data path match the model. Returns what it did.
    fn reconcile(&mut self) -> Applied {
        let what = self.reconcile_once();
        // A driver refused native XDP to a device-bound program: plan again, which asks no
        // XDP of that port (once: the new plan cannot meet the refusal again).
        if self.dataplane.native_refused() != self.model.xdp_native_refused() {
            let refused = self.dataplane.native_refused().clone();
            self.model.replace_xdp_native_refused(refused);
            return self.reconcile_once();
        }
        what
    }

    fn reconcile_once(&mut self) -> Applied {
        let bridge_kernel = self.bridge_kernel();
        self.model.set_bridge_kernel(bridge_kernel);
        let shared = self.dataplane.shared();
        let log = &mut self.log;
        self.rule_slots.assign(self.model.filter(), |slot| {
            if let Err(e) = shared.zero_filter_hits(slot) {
                log.note_error(e.to_string());
            }
        });
        let fdb = std::mem::take(&mut self.fdb_resynced).then_some(self.model.fdb());
        let model = &self.model;
        let ifindex_of = |n: &str| {
            let mut links = model.links().values();
            links.find(|l| l.name == n).map(|l| l.index)
        };
        let actions = reconcile::reconcile(
            model.plan(),
            model.filter(),
            &self.rule_slots,
            fdb,
            &ifindex_of,
            self.dataplane.current(),
        );
        self.execute(actions)
    }

    fn execute(&mut self, actions: Actions) -> Applied {
        let log = &mut self.log;
        self.dataplane.execute(actions, &mut |e| log.note_error(e))
    }

    fn recount_routes(&mut self) -> Result<()> {
        self.last_recount = Some(Instant::now());
        self.log.route_dumps += 1;
        let counted = self.kernel.routes(&mut self.model);
        // A dump that failed left the counts as they were (never below the truth): try again
        // within the period.
        self.recount_due = counted.is_err();
        counted
    }

    fn invalidate_routes(&mut self) {
        for e in self.dataplane.invalidate_routes() {
            self.log.note_error(e);
        }
    }

    fn record(&mut self, events: String, action: Applied, since: Instant) {
        let read = std::mem::take(&mut self.ruleset.read_time);
        self.metrics.responded(since.elapsed());
        self.log.record(events, action.name(), since, read);
    }

    pub fn status(&self, running: bool) -> Status {
        let mut s = self.log.status(
            &self.dataplane,
            self.model.filter(),
            self.ruleset.rule_events,
            running,
        );
        s.stale_neighbours = self.stale.len();
        let shared = self.dataplane.shared();
        s.filter_counts = self.rule_slots.counts(|slot| shared.filter_hits(slot));
        s
    }

    fn write_status(&self, running: bool) {
        let _ = status::write_status_file(&self.cfg.status_path, &self.status(running));
    }

    /// Applies the watchers' changes to the model (FDB entries go to the map at once) and
    /// notes what must be read again.
    fn take_changes(&mut self, changes: Vec<Change>, p: &mut Pending) {
        for change in changes {
            match change {
                Change::Overrun => p.resync = true,
                Change::NftOverrun => {
                    p.filter = true;
                    p.nft_msgs.push(NftMsg::Other); // read the ruleset
                }
                Change::Nft(m) => {
                    p.filter = true;
                    p.nft_msgs.push(m);
                }
                Change::XdpFeatures(ev) => {
                    p.kinds.push(ev.kind());
                    // A port that stops taking XDP frames leaves the routers' tx sets: no
                    // cached answer may still send a frame there.
                    p.rtnl = true;
                    p.changed |= self.model.apply(&ev);
                }
                Change::Xfrm => {
                    p.kinds.push("xfrm");
                    p.xfrm = true;
                }
                Change::Rtnl(ev) => self.take_rtnl(ev, p),
            }
        }
        if p.filter {
            p.kinds.push("nftables");
        }
    }

    fn take_rtnl(&mut self, mut ev: Event, p: &mut Pending) {
        p.kinds.push(ev.kind());
        // A link event carries no offloads; a change of them (ethtool -K) comes as one.
        if let Event::LinkNew(l) = &mut ev {
            self.kernel.offloads(l);
            // Its peer's MTU may have changed too: native XDP is tried again (the model
            // forgets the refusal in `apply`).
            self.dataplane.retry_native(l.index);
        }
        // FDB entries (learning!) come and go all the time and never change what the FIB
        // answers for a port we redirect to.
        p.rtnl |= !matches!(ev, Event::Fdb { .. });
        let plan_may_change = self.model.apply(&ev);
        p.changed |= plan_may_change;
        match ev {
            Event::Addr => {
                p.addrs4 = true;
                // disable_ipv6 comes with no netconf event; setting or clearing it removes
                // or adds the interface's IPv6 addresses, whose events come.
                p.sysctls = true;
            }
            Event::Rules { family: AF_INET } => p.rules4 = true,
            Event::Rules { .. } => p.rules6 = true,
            Event::Netconf => p.sysctls = true,
            Event::Tc => p.tc = true,
            Event::LinkNew(ref l) => {
                p.sysctls = true;
                // Bridge state needs a dump only where a bridge is involved.
                p.bridge |= l.kind == "bridge"
                    || l.master.is_some()
                    || self.model.bridge_ports().contains_key(&l.index);
            }
            Event::Bridge => p.bridge = true,
            Event::Fdb { add, entry } => {
                p.fdb = true;
                let one = reconcile::fdb_event(add, entry.key, entry.port);
                self.execute(Actions {
                    list: vec![one],
                    applied: None,
                });
            }
            Event::Neigh(Some(n)) => {
                // Before the new route generation (p.rtnl): see `neigh`.
                if let Err(e) = self.stale.apply(n, self.dataplane.neigh_maps()) {
                    self.log.note_error(e.to_string());
                }
            }
            _ => {}
        }
        match self.model.take_route_recount() {
            Recount::Now => p.routes = true,
            Recount::Soon => self.recount_due = true,
            Recount::No => {}
        }
    }

    /// The state with no events: x_tables presence, ipset members, other owners' tcx
    /// programs, packet sockets and the multipath hash policies.
    fn poll(&mut self, p: &mut Pending) {
        if self.recount_due
            && !p.routes
            && self
                .last_recount
                .is_none_or(|t| t.elapsed() >= ROUTE_RECOUNT_PERIOD)
        {
            p.routes = true;
            // Not "route-...": waiting for a "route" response must not take this one.
            p.kinds.push("recount");
        }
        // tcx links come with no event.
        let tcx = self.tcx_others();
        if self.model.replace_tcx_others(tcx) {
            p.changed = true;
            p.kinds.push("tcx");
        }
        // Packet sockets come and go with no event (tcpdump started on a port).
        if self.model.replace_taps(Taps::read()) {
            p.changed = true;
            p.kinds.push("taps");
        }
        // Nor do IPVS services or a policy load.
        if self.model.replace_forward_hooks(ForwardHooks::read()) {
            p.changed = true;
            p.kinds.push("forward-hooks");
        }
        // Without the hook these are all the daemon sees of them (and module loads, which
        // write nothing: br_netfilter's switches appear set).
        if reader::read_unevented() != self.model.sysctls().unevented {
            p.sysctls = true;
            p.kinds.push("sysctl");
        }
        self.look_at_legacy_tables(p);
        if self.ruleset.uses_ipset && !p.filter {
            let text = ruleset::ipset_save();
            if text != self.ruleset.ipset_text {
                p.members = Some(text);
                p.kinds.push("ipset");
            }
        }
    }

    /// The legacy x_tables: iptables and ip6tables tables (their /proc names), an ebtables
    /// table written (the write hook's record; it cannot be read without being created).
    fn look_at_legacy_tables(&mut self, p: &mut Pending) {
        let legacy = ruleset::legacy_tables();
        if legacy != self.ruleset.legacy {
            self.ruleset.legacy = legacy;
            p.filter = true;
            p.kinds.push("x_tables");
        }
        let ebtables = match (&self.hook, self.netns_cookie) {
            (Some(h), Some(cookie)) => h.ebtables_written(cookie),
            _ => false,
        };
        if ebtables && !self.ebtables_legacy {
            self.ebtables_legacy = true;
            p.changed = true;
            p.kinds.push("ebtables");
        }
    }

    /// Other owners' tcx programs on every Ethernet link (those the fast path may serve).
    fn tcx_others(&self) -> std::collections::BTreeMap<u32, (u32, u32)> {
        let links = self.model.links().values();
        self.dataplane.tcx_others(
            links
                .filter(|l| l.mac.is_some() && !l.loopback)
                .map(|l| l.index),
        )
    }

    /// The sysctl gate: writes the hook saw, read back once they have landed.
    fn look_at_gate(&mut self, p: &mut Pending) {
        match self
            .gate
            .settle(self.dataplane.sysctl_gate(), Instant::now())
        {
            Ok(Settle::Read(ready)) => {
                p.sysctls = true;
                p.kinds.push("sysctl");
                // Or a legacy table replaced: read before the gate opens.
                self.look_at_legacy_tables(p);
                p.gate_ack = Some(ready);
                // An IPv6 device's mtu may have changed: no cached length may outlive it.
                self.invalidate_routes();
            }
            Ok(_) => {}
            Err(e) => self.log.note_error(e.to_string()),
        }
    }

    /// Reads again what the changes point at.
    fn reread(&mut self, p: &mut Pending) -> Result<()> {
        if p.resync {
            self.sync_all()?;
            p.changed = true;
        }
        if p.routes {
            self.recount_routes()?;
        }
        if p.addrs4 {
            self.kernel.addrs_v4(&mut self.model)?;
        }
        if p.rules4 {
            self.kernel.rules(&mut self.model, AF_INET)?;
        }
        if p.rules6 {
            self.kernel.rules(&mut self.model, AF_INET6)?;
        }
        if p.xfrm {
            self.kernel.xfrm(&mut self.model)?;
        }
        if p.tc {
            self.kernel.tc(&mut self.model)?;
        }
        if p.sysctls {
            self.br_netfilter = reader::read_sysctls(&mut self.model);
        }
        if p.bridge {
            // Port state and VLANs come only from a dump; the FDB rides along, as a port
            // leaving flushes its entries.
            self.sync_bridge()?;
        }
        if let Some(text) = p.members.take() {
            p.filter = true;
            if let Err(e) = self
                .ruleset
                .sync_ipset_members(text, self.model.filter_mut())
            {
                ruleset::all_to_kernel(self.model.filter_mut(), &e);
            }
        } else if p.filter {
            let decoded = match nftevent::rule_changes(&p.nft_msgs) {
                Some(evs) => self
                    .ruleset
                    .apply_rule_events(&evs, self.model.filter_mut()),
                None => false,
            };
            if !decoded {
                self.sync_filter();
            }
        }
        Ok(())
    }

    /// The Prometheus exposition: the status's numbers, read now, and the daemon's own.
    pub fn render_metrics(&self) -> String {
        self.metrics.render(&self.status(true))
    }

    /// Runs until `stop` is set. Dropping the ports closes their links, which detaches the
    /// programs: the kernel carries all traffic again.
    pub fn run(mut self, stop: &AtomicBool) -> Result<()> {
        let mut endpoint = match self.cfg.metrics {
            Some(addr) => Some(wirespeed_metrics::Endpoint::bind(addr).map_err(io(format!(
                "listen for --metrics on {addr} (is the address local and the port free?)"
            )))?),
            None => None,
        };
        // Subscribe first, then dump: a change between the two is seen as an event.
        let mut watchers = Watchers::open(self.kernel.netdev_family())?;
        self.sync_all()?;
        let t0 = Instant::now();
        let action = self.reconcile();
        self.record("startup".into(), action, t0);
        self.write_status(true);
        // systemd (Type=notify): the programs are attached and the status is written.
        if let Err(e) = wirespeed_sys::notify::ready("fast path attached") {
            self.log
                .note_error(format!("could not tell systemd we are ready: {e}"));
        }

        let mut last_poll = Instant::now();
        let mut last_status = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            // A scrape wakes the loop too; it is answered after this turn's events.
            let scrapers: Vec<_> = endpoint.iter().flat_map(|e| e.poll_fds()).collect();
            watchers.wait(
                if self.ruleset.check_pending {
                    CHECK_DELAY
                } else {
                    POLL_PERIOD
                },
                &scrapers,
            );
            drop(scrapers);
            let mut t_event = Instant::now();
            self.ruleset.read_time = Duration::ZERO;
            let mut p = Pending::default();
            self.take_changes(watchers.drain()?, &mut p);
            if p.rtnl {
                // First, before any slower work below: from here no cached FIB answer
                // outlives the change these events report.
                self.invalidate_routes();
            }
            self.look_at_gate(&mut p);
            // Polling spawns processes (ipset save): never in front of an event's response,
            // unless events keep coming for five periods.
            let idle = p.kinds.is_empty() && !p.resync;
            if (idle && last_poll.elapsed() >= POLL_PERIOD)
                || last_poll.elapsed() >= 5 * POLL_PERIOD
            {
                last_poll = Instant::now();
                self.poll(&mut p);
                if idle {
                    // a polled change: its response counts from its detection
                    t_event = Instant::now();
                }
            }
            if let Err(e) = self.reread(&mut p) {
                self.log.note_error(e.to_string());
            }
            p.changed |= p.reads_anything() || p.fdb;
            // Every event and polled change, before the batch's duplicates fold.
            self.metrics.events(&p.kinds);
            if !p.kinds.is_empty() {
                p.kinds.dedup();
                let mut action = if p.changed {
                    self.reconcile()
                } else {
                    Applied::None
                };
                if p.fdb && action == Applied::None {
                    action = Applied::Maps; // written as the events came
                }
                if p.resync {
                    // Events were lost: whatever they said, no cached answer survives.
                    self.invalidate_routes();
                }
                if (p.rtnl || p.resync) && action == Applied::None {
                    action = Applied::RouteCache;
                }
                if let Some(writes) = p.gate_ack {
                    // The routers are set by the policies read after these writes.
                    if let Err(e) = self.gate.ack(self.dataplane.sysctl_gate(), writes) {
                        self.log.note_error(e.to_string());
                    }
                }
                self.record(p.kinds.join(","), action, t_event);
                self.write_status(true);
                last_status = Instant::now();
            } else if self.ruleset.check_pending && !p.resync {
                // The burst is over: read back what the rule events were decoded into.
                let t = Instant::now();
                let log = &mut self.log;
                self.ruleset.check_rule_events(
                    self.model.filter_mut(),
                    || watchers.nft_pending(),
                    &mut |e| log.note_error(e),
                );
                let action = self.reconcile();
                if action != Applied::None {
                    self.record("ruleset-check".into(), action, t);
                }
                self.write_status(true);
                last_status = Instant::now();
            } else if last_status.elapsed() >= STATUS_PERIOD {
                self.write_status(true);
                last_status = Instant::now();
            }
            if let Some(e) = &mut endpoint {
                e.serve(&mut || self.render_metrics());
            }
        }
        let _ = wirespeed_sys::notify::stopping("detaching the fast path");
        let status = self.status(false);
        self.dataplane.detach_all();
        let _ = status::write_status_file(&self.cfg.status_path, &status);
        Ok(())
    }
}
