//! `wirespeed fp run`: watch the kernel (netlink events, nftables events, polled files), keep
//! the model, and make each interface's attached program match the plan. I/O lives here; the
//! decisions live in `model` and `filter`.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::counters::Counters;
use crate::error::{io, Error, Result};
use crate::features::Features;
use crate::filter::{self, FamilyFilter, FilterPlan, IpsetInfo, Tables, XtByHandle};
use crate::loader::{self, Attachment, BridgeMaps, Hook, Program};
use crate::model::{BridgeHook, Event, FdbKey, Model, Plan};
use crate::netlink::{
    self, NetdevFamily, Socket, NETLINK_GENERIC, NETLINK_NETFILTER, NETLINK_ROUTE,
};
use crate::nftevent::{self, NftMsg, RuleEvent};
use crate::nftlib::NftLib;

pub const STATUS_DIR: &str = "/run/wirespeed/fp";

/// The status file of the daemon serving the calling thread's network namespace: one per
/// namespace, so daemons in different lab namespaces do not collide.
pub fn default_status_path() -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata("/proc/thread-self/ns/net") {
        Ok(m) => PathBuf::from(format!("{STATUS_DIR}/net-{}.json", m.ino())),
        Err(_) => PathBuf::from(format!("{STATUS_DIR}/status.json")),
    }
}

/// State with no change events (ipset members, x_tables presence): polled at this period.
pub const POLL_PERIOD: Duration = Duration::from_millis(100);
const STATUS_PERIOD: Duration = Duration::from_millis(500);
/// After rule events applied from their decoding, this long without events ends the burst
/// and the ruleset is read back to check them.
const CHECK_DELAY: Duration = Duration::from_millis(20);
const RESPONSES_KEPT: usize = 4096;

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
}

impl Default for Config {
    fn default() -> Config {
        Config {
            only: None,
            status_path: default_status_path(),
            bridge_hook: BridgeHook::Auto,
            route_cache: true,
        }
    }
}

struct Port {
    name: String,
    prog: Program,
    att: Attachment,
    tables: Option<Tables>,
    /// Counts of the programs this one replaced.
    base: Counters,
    /// The current program's counts when it was swapped in (a reused program has history).
    start: Counters,
    /// Programs swapped out, kept loaded with their filter tables: swapping back (a rule
    /// deleted again, a link flapping) is then a link update, not a verifier run.
    spare: Vec<(Program, Option<Tables>)>,
    swaps: u64,
}

const SPARE_PROGRAMS: usize = 4;

impl Port {
    fn counters(&self) -> Counters {
        let mut c = self.prog.counters().unwrap_or_default();
        for ((n, b), s) in c.0.iter_mut().zip(self.base.0).zip(self.start.0) {
            *n = n.saturating_sub(s) + b;
        }
        c
    }
}

/// One response: kernel event received -> data path updated.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Response {
    pub events: String,
    /// none (nothing the data path holds changed), route cache (a new route-cache
    /// generation only), maps, swap, attach, detach
    pub action: String,
    pub micros: f64,
    /// Of `micros`, the time spent reading the nftables ruleset (libnftables, or `nft`);
    /// 0 when the change did not need it.
    #[serde(default)]
    pub ruleset_read_micros: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct PortStatus {
    pub ifindex: u32,
    pub name: String,
    pub hook: String,
    pub modules: Vec<String>,
    pub notes: Vec<String>,
    pub maps: BTreeMap<String, usize>,
    pub fast_pathed: u64,
    pub passed: u64,
    pub reasons: BTreeMap<String, u64>,
    pub swaps: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Status {
    pub pid: u32,
    pub running: bool,
    pub updated_unix_ms: u64,
    pub ports: Vec<PortStatus>,
    pub filter_v4: String,
    pub filter_v6: String,
    pub errors: Vec<String>,
    pub response_count: usize,
    pub response_median_us: f64,
    pub response_p99_us: f64,
    pub responses: Vec<Response>,
    #[serde(default)]
    pub nft_rule_events: RuleEventCounts,
}

pub struct Daemon {
    cfg: Config,
    model: Model,
    ports: BTreeMap<u32, Port>,
    responses: VecDeque<Response>,
    /// Time spent reading the ruleset since the last recorded response.
    ruleset_read: Duration,
    errors: Vec<String>,
    dump: Socket,
    /// The netdev generic-netlink family and a socket to dump it (None: the kernel has no
    /// such family, so no device's XDP features are known).
    netdev: Option<(Socket, NetdevFamily)>,
    legacy: (bool, bool),
    applied: Plan,
    applied_filter: FilterPlan,
    /// iptables `-m set` matches exist: ipset has no change events, so it is polled.
    uses_ipset: bool,
    ipset_text: String,
    /// The last `nft -j list ruleset` and what its `-m set` matches resolved to.
    /// The ruleset last read, parsed, with the ipset names and members it was compiled with.
    last_ruleset: Option<(serde_json::Value, IpsetInfo)>,
    /// In-process libnftables (None: spawn `nft`).
    nft: Option<NftLib>,
    /// Set matches of the iptables-nft rules seen so far, by rule handle.
    xt_known: XtByHandle,
    /// The bridge module's tables, shared by every port's program.
    bridge_maps: BridgeMaps,
    applied_fdb: BTreeMap<FdbKey, u32>,
    /// The model's FDB was replaced by a dump: diff it against the map.
    fdb_resynced: bool,
    /// br_netfilter makes iptables see bridged frames.
    br_netfilter: bool,
    /// ... tagged ones too.
    br_nf_tagged: bool,
    /// The ruleset has bridge or netdev family tables.
    l2_tables: bool,
    /// The ruleset has ip, ip6, inet or arp tables (what br_netfilter would run).
    l3_tables: bool,
    rule_events: RuleEventCounts,
    /// Decoded rule events were applied since the ruleset was last read.
    check_pending: bool,
}

/// nftables rule events applied without reading the ruleset, and how the read-back compared.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, Default, PartialEq, Eq)]
pub struct RuleEventCounts {
    /// Rule additions and deletions applied from the event alone.
    pub decoded: u64,
    /// Reads of the ruleset after such events, once the burst was over.
    pub checks: u64,
    /// Reads that compiled to another filter than the events had (then the read wins).
    pub mismatches: u64,
    /// Events applied since the last read (it follows 20 ms after the last event).
    pub unchecked: u64,
    /// Reads that differed while new events were already arriving: inconclusive, not
    /// counted as checks (the new events then cause a full read).
    #[serde(default)]
    pub raced: u64,
}

fn read_sysctl(path: &str) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// x_tables (iptables-legacy) tables in this thread's namespace.
fn legacy_tables() -> (bool, bool) {
    let has = |f: &str| {
        std::fs::read_to_string(format!("/proc/thread-self/net/{f}"))
            .map(|s| !s.trim().is_empty())
            .unwrap_or(false)
    };
    (has("ip_tables_names"), has("ip6_tables_names"))
}

fn nft_ruleset_spawned() -> Result<String> {
    let out = Command::new("nft")
        .args(["-j", "list", "ruleset"])
        .output()
        .map_err(io("run nft -j list ruleset"))?;
    if !out.status.success() {
        return Err(Error::Nft(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    let s = String::from_utf8_lossy(&out.stdout).into_owned();
    // An empty ruleset prints nothing with some nft versions.
    Ok(if s.trim().is_empty() {
        r#"{"nftables": []}"#.to_string()
    } else {
        s
    })
}

fn ipset_save() -> String {
    Command::new("ipset")
        .arg("save")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

fn filter_text(f: &FamilyFilter) -> String {
    match f {
        FamilyFilter::Open => "open (no forward chain)".into(),
        FamilyFilter::Compiled { policy_drop, rules } => {
            format!(
                "compiled: {rules} rules, policy {}",
                if *policy_drop { "drop" } else { "accept" }
            )
        }
        FamilyFilter::Kernel(why) => format!("kernel: {why}"),
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

impl Daemon {
    pub fn new(cfg: Config) -> Result<Daemon> {
        let model = Model {
            only: cfg.only.clone(),
            ..Model::default()
        };
        // One program's bridge maps become everyone's (loading the program verifies it too).
        let bridge_maps = Program::load(&Features::default())?.maps.bridge.share()?;
        let model = Model {
            bridge_hook: cfg.bridge_hook,
            no_route_cache: !cfg.route_cache,
            ..model
        };
        Ok(Daemon {
            cfg,
            model,
            bridge_maps,
            nft: NftLib::open(),
            xt_known: XtByHandle::new(),
            applied_fdb: BTreeMap::new(),
            fdb_resynced: false,
            br_netfilter: false,
            br_nf_tagged: false,
            l2_tables: false,
            l3_tables: false,
            rule_events: RuleEventCounts::default(),
            check_pending: false,
            ports: BTreeMap::new(),
            responses: VecDeque::new(),
            ruleset_read: Duration::ZERO,
            errors: Vec::new(),
            dump: Socket::open(NETLINK_ROUTE)?,
            netdev: Self::open_netdev(),
            legacy: (false, false),
            applied: Plan::default(),
            applied_filter: FilterPlan::default(),
            uses_ipset: false,
            ipset_text: String::new(),
            last_ruleset: None,
        })
    }

    /// Whether the kernel reports which devices take XDP-redirected frames (else every port
    /// is served at TC).
    pub fn knows_xdp_features(&self) -> bool {
        self.netdev.is_some()
    }

    fn open_netdev() -> Option<(Socket, NetdevFamily)> {
        let mut s = Socket::open(NETLINK_GENERIC).ok()?;
        let family = netlink::netdev_family(&mut s).ok()?;
        Some((s, family))
    }

    /// Reads every device's XDP features: which ports take XDP-redirected frames.
    fn sync_xdp_features(&mut self) -> Result<()> {
        let Some((s, family)) = &mut self.netdev else {
            self.model.xdp_features = None;
            return Ok(());
        };
        let mut known = BTreeMap::new();
        for ev in netlink::dump_xdp_features(s, family)? {
            if let Event::XdpFeatures {
                ifindex,
                features: Some(f),
            } = ev
            {
                known.insert(ifindex, f);
            }
        }
        self.model.xdp_features = Some(known);
        Ok(())
    }

    fn sync_links(&mut self) -> Result<()> {
        let links = netlink::dump_links(&mut self.dump)?;
        self.model.links = links.into_iter().map(|l| (l.index, l)).collect();
        Ok(())
    }

    fn sync_bridge(&mut self) -> Result<()> {
        let ports = netlink::dump_bridge_ports(&mut self.dump)?;
        self.model.bridge_ports = ports.into_iter().map(|p| (p.index, p)).collect();
        let fdb = netlink::dump_fdb(&mut self.dump)?;
        self.model.fdb = fdb.into_iter().map(|e| (e.key, e.port)).collect();
        self.fdb_resynced = true;
        Ok(())
    }

    /// One FDB event: one map write (the model has it already).
    fn apply_fdb(&mut self, add: bool, e: &crate::model::FdbEntry) {
        if add {
            if let Err(err) = self.bridge_maps.set_fdb(&e.key, e.port) {
                self.note_error(err.to_string());
            }
            self.applied_fdb.insert(e.key, e.port);
        } else {
            self.bridge_maps.del_fdb(&e.key);
            self.applied_fdb.remove(&e.key);
        }
    }

    /// Whether anything makes the kernel filter bridged frames.
    fn update_bridge_kernel(&mut self) {
        // br_netfilter (often built in, on by default) hands bridged frames to the IP hooks.
        // With no table there, only its header validation acts, which the bridge module
        // mirrors (BrPortVal::ip_check); with tables, the kernel must filter.
        let l3 = self.l3_tables || self.legacy.0 || self.legacy.1;
        self.model.bridge_kernel = if self.br_netfilter && l3 {
            Some("br_netfilter passes bridged frames through the IP tables".into())
        } else if self.br_nf_tagged {
            Some("br_netfilter filters VLAN or PPPoE tagged frames".into())
        } else if self.l2_tables {
            Some("nftables bridge or netdev tables".into())
        } else {
            None
        };
    }

    fn sync_routes_v4(&mut self) -> Result<()> {
        self.model.uncacheable_v4_routes = netlink::count_uncacheable_v4_routes(&mut self.dump)?;
        Ok(())
    }

    fn sync_rules(&mut self, family: u8) -> Result<()> {
        let rules = netlink::dump_rules(&mut self.dump, family)?;
        self.model.set_rules(family, &rules);
        Ok(())
    }

    fn sync_sysctls(&mut self) {
        let s = &mut self.model.sysctls;
        s.v4_forwarding.clear();
        s.rp_filter.clear();
        let all_rp = read_sysctl("/proc/sys/net/ipv4/conf/all/rp_filter").unwrap_or(0);
        for l in self.model.links.values() {
            let base = format!("/proc/sys/net/ipv4/conf/{}", l.name);
            s.v4_forwarding.insert(
                l.name.clone(),
                read_sysctl(&format!("{base}/forwarding")) == Some(1),
            );
            let rp = read_sysctl(&format!("{base}/rp_filter"))
                .unwrap_or(0)
                .max(all_rp);
            s.rp_filter.insert(l.name.clone(), rp);
        }
        s.v6_forwarding = read_sysctl("/proc/sys/net/ipv6/conf/all/forwarding") == Some(1);
        let brnf = |name: &str| read_sysctl(&format!("/proc/sys/net/bridge/{name}")) == Some(1);
        self.model.br_nf_v4 = brnf("bridge-nf-call-iptables");
        self.model.br_nf_v6 = brnf("bridge-nf-call-ip6tables");
        self.br_netfilter =
            self.model.br_nf_v4 || self.model.br_nf_v6 || brnf("bridge-nf-call-arptables");
        // Tagged frames through the IP hooks: more than the header checks we mirror.
        self.br_nf_tagged =
            brnf("bridge-nf-filter-vlan-tagged") || brnf("bridge-nf-filter-pppoe-tagged");
        self.update_bridge_kernel();
    }

    fn nft_ruleset(&mut self) -> Result<String> {
        let started = Instant::now();
        let s = match &mut self.nft {
            Some(lib) => lib.list_ruleset(),
            None => nft_ruleset_spawned(),
        };
        self.ruleset_read += started.elapsed();
        let s = s?;
        // An empty ruleset prints nothing with some versions.
        Ok(if s.trim().is_empty() {
            r#"{"nftables": []}"#.to_string()
        } else {
            s
        })
    }

    /// Reads and compiles the ruleset. `self.legacy` is kept fresh by the poll (x_tables
    /// raise no event), so it is not read again on an nftables event's path.
    fn sync_filter(&mut self) -> Result<()> {
        let json = self.nft_ruleset()?;
        let ruleset: serde_json::Value = match serde_json::from_str(&json) {
            Ok(v) => v,
            Err(e) => {
                // Unknown table families: keep bridged traffic in the kernel too.
                (self.l2_tables, self.l3_tables) = (true, true);
                self.update_bridge_kernel();
                return Err(Error::Nft(format!("bad JSON: {e}")));
            }
        };
        self.compile_ruleset(ruleset)
    }

    /// Compiles a parsed ruleset (read, or edited by a rule event) into the filter plan.
    fn compile_ruleset(&mut self, ruleset: serde_json::Value) -> Result<()> {
        let xt = filter::xt_rules_of(&ruleset);
        self.uses_ipset = !xt.is_empty();
        (self.l2_tables, self.l3_tables) = table_families(&ruleset);
        self.update_bridge_kernel();
        let mut info = IpsetInfo::default();
        if self.uses_ipset {
            info.set_ipset_save(&self.ipset_text);
            // Known rules only (an ordinary rule added or deleted beside them): the set
            // names are remembered, and members are polled anyway.
            if self.ipset_text.is_empty() || !info.set_matches_from(&self.xt_known, &xt) {
                info = IpsetInfo::default();
                for (family, tool) in [("ip", "iptables-nft-save"), ("ip6", "ip6tables-nft-save")] {
                    if let Ok(out) = Command::new(tool).output() {
                        info.add_ipt_save(family, &String::from_utf8_lossy(&out.stdout));
                    }
                }
                self.ipset_text = ipset_save();
                info.set_ipset_save(&self.ipset_text);
                self.xt_known = info.by_handle(&xt);
            }
        }
        self.model.filter =
            FilterPlan::from_nft_value(&ruleset, self.legacy.0, self.legacy.1, &info)?;
        self.last_ruleset = Some((ruleset, info));
        Ok(())
    }

    /// Applies decoded rule events to the ruleset last read; false when one does not fit
    /// (then the caller reads the ruleset). The result is checked by a read once idle.
    fn apply_rule_events(&mut self, evs: &[&RuleEvent]) -> bool {
        // Taken out: a half-applied copy is never kept (the caller's read replaces it).
        let Some((mut ruleset, _)) = self.last_ruleset.take() else {
            return false;
        };
        if !evs.iter().all(|ev| nftevent::apply(&mut ruleset, ev)) {
            return false;
        }
        if let Err(e) = self.compile_ruleset(ruleset) {
            self.note_error(e.to_string());
            return false;
        }
        self.rule_events.decoded += evs.len() as u64;
        self.rule_events.unchecked += evs.len() as u64;
        self.check_pending = true;
        true
    }

    /// Reads the ruleset back after decoded rule events and compares the plans.
    /// `events_arrived`: whether nftables events came in meanwhile; then the read may be
    /// newer than the events applied so far, and a difference proves nothing (the pending
    /// events do not fit the read and cause a full read of their own).
    fn check_rule_events(&mut self, events_arrived: impl Fn() -> bool) {
        self.check_pending = false;
        self.rule_events.unchecked = 0;
        let decoded = self.model.filter.clone();
        match self.sync_filter() {
            Ok(()) if self.model.filter == decoded => self.rule_events.checks += 1,
            Ok(()) if events_arrived() => self.rule_events.raced += 1,
            Ok(()) => {
                self.rule_events.checks += 1;
                self.rule_events.mismatches += 1;
                let read = &self.model.filter;
                let first = |a: &[filter::Rule], b: &[filter::Rule]| {
                    a.iter()
                        .zip(b)
                        .position(|(x, y)| x != y)
                        .unwrap_or(a.len().min(b.len()))
                };
                self.note_error(format!(
                    "an nftables rule event decoded otherwise than the ruleset read back \
                     (ipv4 rules {} decoded, {} read, first difference at {}; ipv6 {} / {}): \
                     corrected from the read",
                    decoded.rules_v4.len(),
                    read.rules_v4.len(),
                    first(&decoded.rules_v4, &read.rules_v4),
                    decoded.rules_v6.len(),
                    read.rules_v6.len()
                ));
            }
            Err(e) => {
                self.model.filter.v4 = FamilyFilter::Kernel(e.to_string());
                self.model.filter.v6 = FamilyFilter::Kernel(e.to_string());
            }
        }
    }

    /// Only ipset members changed: recompile from the ruleset already read.
    fn sync_ipset_members(&mut self, text: String) -> Result<()> {
        let Some((json, mut info)) = self.last_ruleset.take() else {
            return self.sync_filter();
        };
        info.set_ipset_save(&text);
        self.ipset_text = text;
        let plan = FilterPlan::from_nft_value(&json, self.legacy.0, self.legacy.1, &info);
        self.last_ruleset = Some((json, info));
        self.model.filter = plan?;
        Ok(())
    }

    fn sync_all(&mut self) -> Result<()> {
        self.sync_links()?;
        self.sync_xdp_features()?;
        self.sync_routes_v4()?;
        self.sync_rules(2)?;
        self.sync_rules(10)?;
        self.sync_sysctls();
        self.sync_bridge()?;
        self.legacy = legacy_tables();
        if let Err(e) = self.sync_filter() {
            // Unknown filter state: nothing may be fast-pathed past it.
            self.model.filter.v4 = FamilyFilter::Kernel(e.to_string());
            self.model.filter.v6 = FamilyFilter::Kernel(e.to_string());
            self.l2_tables = true;
            self.update_bridge_kernel();
        }
        Ok(())
    }

    fn ifindex_of(&self, name: &str) -> Option<u32> {
        self.model
            .links
            .values()
            .find(|l| l.name == name)
            .map(|l| l.index)
    }

    /// After a dump: writes the differences between the dumped FDB and the map; true when
    /// there were any. (Single FDB events are written as they come, by apply_fdb.)
    fn write_fdb(&mut self) -> bool {
        if !std::mem::take(&mut self.fdb_resynced) {
            return false;
        }
        let mut errs = Vec::new();
        let mut changed = false;
        for (k, port) in &self.model.fdb {
            if self.applied_fdb.get(k) != Some(port) {
                changed = true;
                if let Err(e) = self.bridge_maps.set_fdb(k, *port) {
                    errs.push(e.to_string());
                }
            }
        }
        for k in self.applied_fdb.keys() {
            if !self.model.fdb.contains_key(k) {
                changed = true;
                self.bridge_maps.del_fdb(k);
            }
        }
        self.applied_fdb = self.model.fdb.clone();
        for e in errs {
            self.note_error(e);
        }
        changed
    }

    /// Writes the bridge port and VLAN tables of `plan`: additions first, so that a frame
    /// never meets a port whose VLANs are not there yet; a missing entry only means "pass".
    fn write_bridge_tables(&mut self, plan: &Plan) {
        let mut errs = Vec::new();
        let b = &self.bridge_maps;
        for ((idx, vid), flags) in &plan.bridge_vlans {
            if self.applied.bridge_vlans.get(&(*idx, *vid)) != Some(flags) {
                if let Err(e) = b.set_vlan(*idx, *vid, *flags) {
                    errs.push(e.to_string());
                }
            }
        }
        for (idx, p) in &plan.bridge_ports {
            if self.applied.bridge_ports.get(idx) != Some(p) {
                if let Err(e) = b.set_port(*idx, p) {
                    errs.push(e.to_string());
                }
            }
        }
        for idx in self.applied.bridge_ports.keys() {
            if !plan.bridge_ports.contains_key(idx) {
                b.del_port(*idx);
            }
        }
        for (idx, vid) in self.applied.bridge_vlans.keys() {
            if !plan.bridge_vlans.contains_key(&(*idx, *vid)) {
                b.del_vlan(*idx, *vid);
            }
        }
        for e in errs {
            self.note_error(e);
        }
    }

    /// Starts a new route-cache generation in every attached program.
    fn invalidate_routes(&mut self) {
        let errs: Vec<String> = self
            .ports
            .values()
            .filter_map(|p| p.prog.invalidate_routes().err())
            .map(|e| format!("route cache: {e}"))
            .collect();
        for e in errs {
            self.note_error(e);
        }
    }

    /// Makes the attached programs match the plan. Returns what it did.
    fn reconcile(&mut self) -> &'static str {
        let plan = self.model.plan();
        let fdb_changed = self.write_fdb();
        if plan == self.applied
            && self.model.filter == self.applied_filter
            && self.ports.keys().eq(plan.ports.keys())
        {
            return if fdb_changed { "maps" } else { "none" };
        }
        let mut action = "maps";
        self.write_bridge_tables(&plan);
        let before = self.ports.len();
        // A program cannot move between XDP and TC through its link: a port changing hooks
        // is detached here and attached afresh below.
        self.ports.retain(|idx, port| {
            plan.ports
                .get(idx)
                .is_some_and(|pp| pp.features.tc == port.prog.features.tc)
        });
        if self.ports.len() != before {
            action = "detach";
        }
        // Without input-interface matches every port's tables are the same: compile once.
        let shared =
            (!self.model.filter.uses_iif()).then(std::cell::OnceCell::<filter::Tables>::new);
        for (idx, pp) in &plan.ports {
            let f = pp.features;
            let tables = (f.filter_v4 || f.filter_v6).then(|| {
                let compile = || self.model.filter.tables(&pp.name, &|n| self.ifindex_of(n));
                match &shared {
                    Some(cell) => cell.get_or_init(compile).clone(),
                    None => compile(),
                }
            });
            let res: Result<()> = (|| {
                match self.ports.get_mut(idx) {
                    Some(port) if port.prog.features.serves(&f) => {
                        port.prog
                            .set_ctl(pp.off_v4, pp.off_v6, &f, pp.route_cache_v4)?;
                        port.prog.set_tx_ports(&pp.tx_ports)?;
                        if port.tables != tables {
                            if let Some(t) = &tables {
                                port.prog.write_filter_over(port.tables.as_ref(), t)?;
                            }
                            port.tables = tables;
                        }
                    }
                    Some(port) => {
                        let hit = port.spare.iter().position(|(p, _)| p.features.serves(&f));
                        let (prog, old_tables) = match hit {
                            Some(i) => port.spare.swap_remove(i),
                            None => (
                                Program::load_shared(&f.to_load(), Some(&self.bridge_maps))?,
                                None,
                            ),
                        };
                        prog.set_ctl(pp.off_v4, pp.off_v6, &f, pp.route_cache_v4)?;
                        prog.set_tx_ports(&pp.tx_ports)?;
                        if let Some(t) = &tables {
                            if old_tables.as_ref() != Some(t) {
                                prog.write_filter_over(old_tables.as_ref(), t)?;
                            }
                        }
                        port.att.replace(&prog)?;
                        port.base = port.counters();
                        port.start = prog.counters().unwrap_or_default();
                        let old = std::mem::replace(&mut port.prog, prog);
                        let old_tables = std::mem::replace(&mut port.tables, tables);
                        port.spare.push((old, old_tables));
                        if port.spare.len() > SPARE_PROGRAMS {
                            port.spare.remove(0);
                        }
                        port.swaps += 1;
                        action = "swap";
                    }
                    None => {
                        if !f.tc {
                            loader::remove_stale_xdp(*idx);
                        }
                        let prog = Program::load_shared(&f.to_load(), Some(&self.bridge_maps))?;
                        prog.set_ctl(pp.off_v4, pp.off_v6, &f, pp.route_cache_v4)?;
                        prog.set_tx_ports(&pp.tx_ports)?;
                        if let Some(t) = &tables {
                            prog.write_filter(t)?;
                        }
                        let att = if f.tc {
                            Attachment::tc(&prog, *idx)?
                        } else {
                            Attachment::xdp(&prog, *idx)?
                        };
                        self.ports.insert(
                            *idx,
                            Port {
                                name: pp.name.clone(),
                                prog,
                                att,
                                tables,
                                base: Counters::default(),
                                start: Counters::default(),
                                spare: Vec::new(),
                                swaps: 0,
                            },
                        );
                        action = "attach";
                    }
                }
                Ok(())
            })();
            if let Err(e) = res {
                self.note_error(format!("{}: {e}", pp.name));
            }
        }
        self.applied = plan;
        self.applied_filter = self.model.filter.clone();
        action
    }

    fn note_error(&mut self, e: String) {
        if self.errors.len() >= 32 {
            self.errors.remove(0);
        }
        self.errors.push(e);
    }

    fn record(&mut self, events: String, action: &str, since: Instant) {
        if self.responses.len() >= RESPONSES_KEPT {
            self.responses.pop_front();
        }
        let read = std::mem::take(&mut self.ruleset_read);
        self.responses.push_back(Response {
            events,
            action: action.into(),
            micros: since.elapsed().as_secs_f64() * 1e6,
            ruleset_read_micros: read.as_secs_f64() * 1e6,
        });
    }

    pub fn status(&self, running: bool) -> Status {
        let plan = &self.applied;
        let mut ports = Vec::new();
        for (idx, p) in &self.ports {
            let c = p.counters();
            let mut maps = BTreeMap::new();
            maps.insert("tx_ports".to_string(), p.prog.tx_port_count());
            if let Some(t) = &p.tables {
                maps.insert("filter_rules".into(), t.actions.len());
                maps.insert(
                    "filter_lpm_entries".into(),
                    t.src4.len() + t.dst4.len() + t.src6.len() + t.dst6.len(),
                );
                maps.insert("filter_port_entries".into(), t.sport.len() + t.dport.len());
            }
            // What the port runs: the plan's features (a program may have more compiled in,
            // switched off at run time).
            let features: Features = plan
                .ports
                .get(idx)
                .map(|pp| pp.features)
                .unwrap_or(p.prog.features);
            if plan.ports.get(idx).is_some_and(|pp| pp.route_cache_v4) && features.router_v4 {
                maps.insert("route_cache_v4_slots".into(), p.prog.route_cache_slots());
            }
            if features.bridge {
                let (ports, vlans, fdb) = self.bridge_maps.counts();
                maps.insert("bridge_ports".into(), ports);
                maps.insert("bridge_vlans".into(), vlans);
                maps.insert("bridge_fdb".into(), fdb);
            }
            ports.push(PortStatus {
                ifindex: *idx,
                name: p.name.clone(),
                hook: match p.att.hook {
                    Hook::XdpNative => "xdp (native)".into(),
                    Hook::XdpGeneric => "xdp (generic)".into(),
                    Hook::Tc => "tc (ingress)".into(),
                },
                modules: {
                    let pp = plan.ports.get(idx);
                    let off = |m: &str| match m {
                        "router4" | "filter4" => pp.is_some_and(|pp| pp.off_v4),
                        _ => pp.is_some_and(|pp| pp.off_v6),
                    };
                    features
                        .modules()
                        .into_iter()
                        .map(|m| {
                            if off(m) {
                                format!("{m} (kernel)")
                            } else {
                                m.to_string()
                            }
                        })
                        .collect()
                },
                notes: plan
                    .ports
                    .get(idx)
                    .map(|pp| pp.notes.clone())
                    .unwrap_or_default(),
                maps,
                fast_pathed: c.fast_pathed(),
                passed: c.passed(),
                reasons: c
                    .nonzero()
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
                swaps: p.swaps,
            });
        }
        let mut us: Vec<f64> = self.responses.iter().map(|r| r.micros).collect();
        us.sort_by(|a, b| a.total_cmp(b));
        Status {
            pid: std::process::id(),
            running,
            updated_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            ports,
            filter_v4: filter_text(&self.model.filter.v4),
            filter_v6: filter_text(&self.model.filter.v6),
            errors: self.errors.clone(),
            response_count: us.len(),
            response_median_us: percentile(&us, 0.5),
            response_p99_us: percentile(&us, 0.99),
            responses: self.responses.iter().rev().take(50).cloned().collect(),
            nft_rule_events: self.rule_events,
        }
    }

    fn write_status(&self, running: bool) {
        let _ = write_status_file(&self.cfg.status_path, &self.status(running));
    }

    /// Runs until `stop` is set. Dropping the ports closes their links, which detaches the
    /// programs: the kernel carries all traffic again.
    pub fn run(mut self, stop: &AtomicBool) -> Result<()> {
        let events = Socket::open(NETLINK_ROUTE)?;
        for g in netlink::ROUTE_GROUPS {
            events.join(g)?;
        }
        let nft = Socket::open(NETLINK_NETFILTER)?;
        nft.join(netlink::NFT_GROUP)?;
        // XDP features change without an rtnetlink event (a veth peer's GRO or XDP program).
        let netdev_family = self.netdev.as_ref().map(|(_, f)| *f);
        let netdev_events = match netdev_family {
            Some(f) => {
                let s = Socket::open(NETLINK_GENERIC)?;
                s.join(f.mgmt_group)?;
                Some((s, f))
            }
            None => None,
        };
        // Subscribe first, then dump: a change between the two is seen as an event.
        self.sync_all()?;
        let t0 = Instant::now();
        let action = self.reconcile();
        self.record("startup".into(), action, t0);
        self.write_status(true);

        let mut buf = vec![0u8; 256 * 1024];
        let mut last_poll = Instant::now();
        let mut last_status = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            let mut pfds = [
                libc::pollfd {
                    fd: events.raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: nft.raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    // poll(2) skips a negative fd.
                    fd: netdev_events.as_ref().map_or(-1, |(s, _)| s.raw_fd()),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let wait = if self.check_pending {
                CHECK_DELAY
            } else {
                POLL_PERIOD
            };
            // SAFETY: three valid pollfds.
            unsafe { libc::poll(pfds.as_mut_ptr(), 3, wait.as_millis() as i32) };
            let t_event = Instant::now();
            self.ruleset_read = Duration::ZERO;
            let mut kinds: Vec<&'static str> = Vec::new();
            let mut changed = false;
            let mut resync = false;
            let (mut rules4, mut rules6, mut sysctls, mut filter) = (false, false, false, false);
            let mut bridge = false;
            let mut fdb = false;
            let mut routes4 = false;
            let mut rtnl = false;
            while let Some(n) = events.recv(&mut buf)? {
                if n == 0 {
                    resync = true; // overrun: events were lost
                    continue;
                }
                for m in netlink::messages(&buf[..n]) {
                    let Some(ev) = netlink::parse_event(&m) else {
                        continue;
                    };
                    kinds.push(ev.kind());
                    // FDB entries (learning!) come and go all the time and never
                    // change what the FIB answers for a port we redirect to.
                    rtnl |= !matches!(ev, Event::Fdb { .. });
                    let plan_may_change = self.model.apply(&ev);
                    changed |= plan_may_change;
                    match ev {
                        Event::Route { .. } if plan_may_change => routes4 = true,
                        Event::Rules { family: 2 } => rules4 = true,
                        Event::Rules { .. } => rules6 = true,
                        Event::Netconf => sysctls = true,
                        Event::LinkNew(ref l) => {
                            sysctls = true;
                            // Bridge state needs a dump only where a bridge is involved.
                            bridge |= l.kind == "bridge"
                                || l.master.is_some()
                                || self.model.bridge_ports.contains_key(&l.index);
                        }
                        Event::Bridge => bridge = true,
                        Event::Fdb { add, ref entry } => {
                            fdb = true;
                            self.apply_fdb(add, entry);
                        }
                        _ => {}
                    }
                }
            }
            if let Some((s, family)) = &netdev_events {
                while let Some(n) = s.recv(&mut buf)? {
                    if n == 0 {
                        resync = true;
                        continue;
                    }
                    for m in netlink::messages(&buf[..n]) {
                        let Some(ev) = netlink::parse_netdev_msg(family.id, m.ty, m.payload) else {
                            continue;
                        };
                        kinds.push(ev.kind());
                        // A port that stops taking XDP frames leaves the routers' tx sets:
                        // no cached answer may still send a frame there.
                        rtnl = true;
                        changed |= self.model.apply(&ev);
                    }
                }
            }
            if rtnl {
                // First, before any slower work below: from here no cached FIB answer
                // outlives the change these events report.
                self.invalidate_routes();
            }
            let mut nft_msgs = Vec::new();
            while let Some(n) = nft.recv(&mut buf)? {
                filter = true;
                if n == 0 {
                    nft_msgs.push(NftMsg::Other); // overrun: read the ruleset
                }
                nft_msgs.extend(netlink::messages(&buf[..n]).iter().map(nftevent::decode));
            }
            if filter {
                kinds.push("nftables");
            }
            let rule_events = nftevent::rule_changes(&nft_msgs);
            // Polling spawns processes (ipset save): never in front of an event's response,
            // unless events keep coming for five periods.
            let mut t_event = t_event;
            let mut members = None;
            let idle = kinds.is_empty() && !resync;
            if (idle && last_poll.elapsed() >= POLL_PERIOD)
                || last_poll.elapsed() >= 5 * POLL_PERIOD
            {
                last_poll = Instant::now();
                let legacy = legacy_tables();
                if legacy != self.legacy {
                    self.legacy = legacy;
                    filter = true;
                    kinds.push("x_tables");
                }
                if self.uses_ipset && !filter {
                    let text = ipset_save();
                    if text != self.ipset_text {
                        members = Some(text);
                        kinds.push("ipset");
                    }
                }
                if idle {
                    // a polled change: its response counts from its detection
                    t_event = Instant::now();
                }
            }
            let res: Result<()> = (|| {
                if resync {
                    self.sync_all()?;
                    changed = true;
                }
                if routes4 {
                    self.sync_routes_v4()?;
                }
                if rules4 {
                    self.sync_rules(2)?;
                }
                if rules6 {
                    self.sync_rules(10)?;
                }
                if sysctls {
                    self.sync_sysctls();
                }
                if bridge {
                    // Port state and VLANs come only from a dump; the FDB rides along, as
                    // a port leaving flushes its entries.
                    self.sync_bridge()?;
                }
                if let Some(text) = members.take() {
                    filter = true;
                    if let Err(e) = self.sync_ipset_members(text) {
                        self.model.filter.v4 = FamilyFilter::Kernel(e.to_string());
                        self.model.filter.v6 = FamilyFilter::Kernel(e.to_string());
                    }
                } else if filter && !rule_events.is_some_and(|evs| self.apply_rule_events(&evs)) {
                    if let Err(e) = self.sync_filter() {
                        self.model.filter.v4 = FamilyFilter::Kernel(e.to_string());
                        self.model.filter.v6 = FamilyFilter::Kernel(e.to_string());
                    }
                }
                Ok(())
            })();
            if let Err(e) = res {
                self.note_error(e.to_string());
            }
            changed |= resync || rules4 || rules6 || sysctls || filter || bridge || fdb;
            if !kinds.is_empty() {
                kinds.dedup();
                let mut action = if changed { self.reconcile() } else { "none" };
                if fdb && action == "none" {
                    action = "maps"; // written as the events came
                }
                if resync {
                    // Events were lost: whatever they said, no cached answer survives.
                    self.invalidate_routes();
                }
                if (rtnl || resync) && action == "none" {
                    action = "route cache";
                }
                self.record(kinds.join(","), action, t_event);
                self.write_status(true);
                last_status = Instant::now();
            } else if self.check_pending && !resync {
                // The burst is over: read back what the rule events were decoded into.
                let t = Instant::now();
                let nft_fd = nft.raw_fd();
                self.check_rule_events(|| readable(nft_fd));
                let action = self.reconcile();
                if action != "none" {
                    self.record("ruleset-check".into(), action, t);
                }
                self.write_status(true);
                last_status = Instant::now();
            } else if last_status.elapsed() >= STATUS_PERIOD {
                self.write_status(true);
                last_status = Instant::now();
            }
        }
        let status = self.status(false);
        self.ports.clear();
        let _ = write_status_file(&self.cfg.status_path, &status);
        Ok(())
    }
}

/// Whether `fd` has input waiting, without blocking.
fn readable(fd: std::os::fd::RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, zero timeout.
    unsafe { libc::poll(&mut p, 1, 0) > 0 }
}

/// Which table families a `nft -j list ruleset` output has: (bridge or netdev, which see
/// frames before or inside the bridge; ip, ip6, inet or arp, which br_netfilter runs bridged
/// frames through). Unreadable output counts as both.
fn table_families(v: &serde_json::Value) -> (bool, bool) {
    let families: Vec<String> = v
        .get("nftables")
        .and_then(|a| a.as_array())
        .map(|items| {
            items
                .iter()
                .filter_map(|it| it.get("table")?.get("family")?.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let has = |set: &[&str]| families.iter().any(|f| set.contains(&f.as_str()));
    (
        has(&["bridge", "netdev"]),
        has(&["ip", "ip6", "inet", "arp"]),
    )
}

pub fn write_status_file(path: &Path, status: &Status) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io(format!("create {}", dir.display())))?;
    }
    let tmp = path.with_extension("json.tmp");
    let json = serde_json::to_vec_pretty(status).map_err(|e| Error::Invalid(e.to_string()))?;
    std::fs::write(&tmp, json).map_err(io(format!("write {}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(io(format!("rename to {}", path.display())))
}

pub fn read_status_file(path: &Path) -> Result<Status> {
    let s = std::fs::read_to_string(path).map_err(io(format!("read {}", path.display())))?;
    serde_json::from_str(&s).map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))
}
