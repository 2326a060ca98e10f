//! The daemon: it owns the table, turns every change into a new [`Plan`] built over the
//! previous one (so a real keeps its slot and its established connections), applies it
//! through the [`DataPlane`], runs the health checks, keeps the reals' neighbours resolved,
//! answers the control socket, and tells `lb announce` which addresses it may announce
//! ([`crate::announce`]).

use std::collections::HashMap;

use crate::announce::{Announcer, NodeState};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::control::{self, Answer, Reply, Request, Server};
use crate::health::{Checker, HealthEvent, Target};
use crate::ipvsadm::Command;
use crate::listing::{ListView, Rates, RealView, ServiceView};
use crate::model::{
    ConnCounts, Counters, DataPlane, Mode, Plan, PlannedService, ServiceKey, Stats,
};
use crate::plan;
use crate::table::Table;
use crate::{Error, Result};

/// A counter's owner: a service, or one of its reals.
type CounterId = (ServiceKey, Option<SocketAddr>);

pub struct Daemon<D: DataPlane> {
    table: Table,
    ring_size: u32,
    dp: D,
    plan: Plan,
    /// The last counter sample and when it was taken; `--rate` is the difference to the one
    /// before.
    sample: Option<(Instant, HashMap<CounterId, Counters>)>,
    rates: HashMap<CounterId, Rates>,
    ifaces: Vec<String>,
    /// False from a failed apply (the data path may hold part of a plan) to the next success.
    plan_applied: bool,
    /// `lb drain`: every VIP withdrawn, forwarding unchanged.
    draining: bool,
    announcer: Announcer,
    /// An `lb announce` has watched since the daemon started: this node announces its VIPs,
    /// alongside other nodes, so a change that leaves a service's connections unable to move
    /// between nodes is warned about (docs/LB.md, "Modes in a cluster").
    announcing: bool,
    /// ExaBGP's BGP sessions as `lb announce` last reported them, and when (docs/LB.md,
    /// "Doctor").
    sessions: Option<(Instant, Vec<crate::session::Session>)>,
    /// The interfaces found down at the last announce update, to log each change once.
    links_down: Vec<String>,
}

impl<D: DataPlane> Daemon<D> {
    /// Applies the empty plan, so the data path starts from a known state.
    pub fn new(mut dp: D, ring_size: u32) -> Result<Daemon<D>> {
        let plan = plan::build(&[], ring_size, None)?;
        dp.apply(&plan)?;
        Ok(Daemon {
            table: Table::default(),
            ring_size,
            dp,
            plan,
            sample: None,
            rates: HashMap::new(),
            ifaces: Vec::new(),
            plan_applied: true,
            draining: false,
            announcer: Announcer::new(crate::announce::DEFAULT_HOLD_DOWN),
            announcing: false,
            sessions: None,
            links_down: Vec::new(),
        })
    }

    /// How long an address must stay servable before it is announced (`--announce-hold-down`).
    pub fn set_announce_hold_down(&mut self, hold_down: Duration) {
        self.announcer = Announcer::new(hold_down);
    }

    /// Feeds the node's state at `now` to the announcer (`stopping`: SIGTERM's drain); true
    /// when the announceable set changed.
    pub fn update_announceable(&mut self, now: Instant, stopping: bool) -> bool {
        let down = self.dp.links_down();
        if down != self.links_down {
            if down.is_empty() {
                eprintln!(
                    "wirespeed lb: every interface is up: announcing again after the hold-down"
                );
            } else {
                eprintln!(
                    "wirespeed lb: {} down: every address withdrawn until it is up (ip link show)",
                    down.join(", ")
                );
            }
            self.links_down = down;
        }
        let state = NodeState {
            attached: self.dp.attached_everywhere(),
            links_up: self.links_down.is_empty(),
            plan_applied: self.plan_applied,
            draining: self.draining || stopping,
            services: &self.table.services,
        };
        self.announcer.update(now, &state)
    }

    /// The addresses `lb announce` should announce now.
    pub fn announceable(&self) -> Vec<IpAddr> {
        self.announcer.announced().iter().copied().collect()
    }

    /// The interfaces the data path runs on, for `-L --json` and `doctor`.
    pub fn set_ifaces(&mut self, ifaces: Vec<String>) {
        self.ifaces = ifaces;
    }

    pub fn table(&self) -> &Table {
        &self.table
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    pub fn data_plane(&self) -> &D {
        &self.dp
    }

    /// Makes `table` the configuration: plans it over the current plan and applies it. On
    /// any failure nothing changes.
    fn commit(&mut self, table: Table) -> Result<()> {
        let plan = plan::build(&plannable(&table), self.ring_size, Some(&self.plan))?;
        // After a failed apply the same plan is written again: the maps may hold part of it.
        if plan != self.plan || !self.plan_applied {
            if let Err(e) = self.dp.apply(&plan) {
                self.plan_applied = false;
                return Err(e);
            }
            self.plan_applied = true;
        }
        self.plan = plan;
        self.table = table;
        Ok(())
    }

    fn change(table: &mut Table, cmd: &Command) -> Result<Vec<String>> {
        Ok(match cmd {
            Command::AddService(s) => {
                table.add_service(s)?;
                Vec::new()
            }
            Command::EditService(s) => {
                table.edit_service(s)?;
                Vec::new()
            }
            Command::DelService(k) => {
                table.del_service(k)?;
                Vec::new()
            }
            Command::AddReal { service, real } => table.add_real(service, real)?,
            Command::EditReal { service, real } => table.edit_real(service, real)?,
            Command::DelReal { service, addr } => {
                table.del_real(service, *addr)?;
                Vec::new()
            }
            Command::AddLaddr { service, addr } => {
                table.add_laddr(service, *addr)?;
                Vec::new()
            }
            Command::DelLaddr { service, addr } => {
                table.del_laddr(service, *addr)?;
                table.warnings()
            }
            Command::Clear => {
                table.clear();
                Vec::new()
            }
            Command::List(_) | Command::Zero(_) => {
                return Err(Error::Invalid(
                    "-L and -Z change nothing and cannot be part of a restore".into(),
                ))
            }
        })
    }

    /// Carries out one request.
    pub fn handle(&mut self, req: Request) -> Reply {
        let result = match req {
            Request::View => self.view().map(Reply::List),
            Request::Command(Command::List(opts)) => self
                .view()
                .map(|v| Reply::List(v.only(opts.service.as_ref()))),
            Request::Command(Command::Zero(service)) => self.zero(service),
            Request::Drain(on) => {
                self.draining = on;
                Ok(Reply::Done {
                    warnings: Vec::new(),
                })
            }
            Request::Sessions(sessions) => {
                self.sessions = Some((Instant::now(), sessions));
                Ok(Reply::Done {
                    warnings: Vec::new(),
                })
            }
            Request::WatchAnnounceable => {
                self.announcing = true;
                Ok(Reply::Announceable(self.announceable()))
            }
            Request::Command(cmd) => {
                let mut table = self.table.clone();
                Self::change(&mut table, &cmd).and_then(|mut warnings| {
                    self.commit(table)?;
                    warnings.extend(self.cluster_warnings(std::slice::from_ref(&cmd)));
                    Ok(Reply::Done { warnings })
                })
            }
            Request::Batch(cmds) => {
                let mut table = self.table.clone();
                let applied = cmds.iter().try_for_each(|(line, cmd)| {
                    Self::change(&mut table, cmd)
                        .map(|_| ())
                        .map_err(|e| Error::Invalid(format!("line {line}: {e}")))
                });
                applied.and_then(|()| {
                    let mut warnings = table.warnings();
                    self.commit(table)?;
                    let cmds: Vec<Command> = cmds.into_iter().map(|(_, c)| c).collect();
                    warnings.extend(self.cluster_warnings(&cmds));
                    Ok(Reply::Done { warnings })
                })
            }
        };
        result.unwrap_or_else(|e| Reply::Error(e.to_string()))
    }

    /// On a node that announces, one line for each service that `cmds` added or changed (or
    /// gave a real) whose connections do not survive ECMP moving them to another node.
    fn cluster_warnings(&self, cmds: &[Command]) -> Vec<String> {
        if !self.announcing {
            return Vec::new();
        }
        let mut keys: Vec<ServiceKey> = Vec::new();
        for c in cmds {
            let key = match c {
                Command::AddService(s) | Command::EditService(s) => s.key,
                Command::AddReal { service, .. } | Command::EditReal { service, .. } => *service,
                _ => continue,
            };
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        keys.iter()
            .filter_map(|k| self.table.find(k))
            .filter_map(|s| crate::cluster::service_after_move(s).problem)
            .map(|p| p.to_string())
            .collect()
    }

    fn zero(&mut self, service: Option<ServiceKey>) -> Result<Reply> {
        if let Some(k) = service {
            if self.table.find(&k).is_none() {
                return Err(Error::Invalid(format!(
                    "No such service: {k}; list them with wirespeed lb -L -n"
                )));
            }
            // The data path zeroes all its counters at once; zeroing one service alone would
            // need a per-service reset it does not have.
            return Err(Error::Invalid(
                "-Z zeroes every service's counters here; run it without -t/-u".into(),
            ));
        }
        self.dp.zero()?;
        self.sample = None;
        self.rates.clear();
        Ok(Reply::Done {
            warnings: Vec::new(),
        })
    }

    /// A real's health changed: re-plan and apply at once. True when the plan changed.
    pub fn set_health(&mut self, ev: &HealthEvent) -> Result<bool> {
        let mut table = self.table.clone();
        if !table.set_health(&ev.service, ev.real, ev.health) {
            return Ok(false);
        }
        let before = self.plan.clone();
        self.commit(table)?;
        Ok(before != self.plan)
    }

    /// What the health checker should check now.
    pub fn check_targets(&self) -> Vec<Target> {
        self.table
            .services
            .iter()
            .filter_map(|s| s.check.as_ref().map(|c| (s, c)))
            .flat_map(|(s, c)| {
                s.reals.iter().map(move |r| Target {
                    service: s.key,
                    real: r.addr,
                    check: c.clone(),
                })
            })
            .collect()
    }

    /// The reals whose neighbour entry the daemon keeps fresh itself: those of services
    /// without a health check (a check's own connections already do it).
    pub fn neighbour_targets(&self) -> Vec<IpAddr> {
        let mut out: Vec<IpAddr> = self
            .table
            .services
            .iter()
            .filter(|s| s.check.is_none())
            .flat_map(|s| s.reals.iter().map(|r| r.addr.ip()))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Counters by owner, from the data path's counters under the current plan.
    fn counters(&self) -> Result<HashMap<CounterId, Counters>> {
        let stats: Stats = self.dp.stats()?;
        let mut out = HashMap::new();
        for (i, s) in self.plan.services.iter().enumerate() {
            out.insert(
                (s.key, None),
                stats.services.get(i).copied().unwrap_or_default(),
            );
        }
        for (slot, r) in self.plan.reals.iter().enumerate() {
            let Some(r) = r else { continue };
            if let Some(s) = self.plan.services.get(r.service as usize) {
                out.insert(
                    (s.key, Some(r.addr)),
                    stats.reals.get(slot).copied().unwrap_or_default(),
                );
            }
        }
        Ok(out)
    }

    /// Takes a counter sample; `--rate` shows the difference between the last two.
    pub fn sample_rates(&mut self, now: Instant) -> Result<()> {
        let cur = self.counters()?;
        if let Some((then, prev)) = &self.sample {
            let secs = now.duration_since(*then).as_secs_f64();
            if secs > 0.0 {
                self.rates = cur
                    .iter()
                    .map(|(id, c)| {
                        let p = prev.get(id).copied().unwrap_or_default();
                        let per_sec = |a: u64, b: u64| (a.saturating_sub(b) as f64 / secs) as u64;
                        let rate = Rates {
                            cps: per_sec(c.conns, p.conns),
                            in_pps: per_sec(c.in_pkts, p.in_pkts),
                            out_pps: per_sec(c.out_pkts, p.out_pkts),
                            in_bps: per_sec(c.in_bytes, p.in_bytes),
                            out_bps: per_sec(c.out_bytes, p.out_bytes),
                        };
                        (*id, rate)
                    })
                    .collect();
            }
        }
        self.sample = Some((now, cur));
        Ok(())
    }

    /// The Prometheus exposition: what `-L --stats` shows, read now, and the reasons.
    pub fn render_metrics(&self) -> String {
        let view = self.view().map_err(|e| e.to_string());
        let stats = self.dp.stats().map_err(|e| e.to_string());
        crate::metrics::render(
            view.as_ref().map_err(Clone::clone),
            stats
                .as_ref()
                .map(|s| s.reasons.as_slice())
                .map_err(Clone::clone),
        )
    }

    /// ActiveConn and InActConn by real, counted now from the data path's entries.
    fn conn_counts(&self) -> Result<HashMap<CounterId, ConnCounts>> {
        let by_slot = self.dp.conn_counts()?;
        let mut out = HashMap::new();
        for (slot, r) in self.plan.reals.iter().enumerate() {
            let Some(r) = r else { continue };
            if let (Some(s), Some(c)) = (
                self.plan.services.get(r.service as usize),
                by_slot.get(slot),
            ) {
                out.insert((s.key, Some(r.addr)), *c);
            }
        }
        Ok(out)
    }

    /// The configuration with counters, rates and health, as `-L` shows it.
    pub fn view(&self) -> Result<ListView> {
        let counters = self.counters()?;
        let conns = self.conn_counts()?;
        let conn = |id: &CounterId| conns.get(id).copied().unwrap_or_default();
        let get = |id: &CounterId| counters.get(id).copied().unwrap_or_default();
        let rate = |id: &CounterId| self.rates.get(id).copied().unwrap_or_default();
        let planned: HashMap<ServiceKey, &PlannedService> =
            self.plan.services.iter().map(|p| (p.key, p)).collect();
        Ok(ListView {
            ring_size: self.ring_size,
            services: self
                .table
                .services
                .iter()
                .map(|s| ServiceView {
                    key: s.key,
                    scheduler: s.scheduler,
                    ring_size: planned.get(&s.key).map_or(0, |p| p.lookup.len() as u32),
                    table_digest: planned
                        .get(&s.key)
                        .map(|p| plan::table_digest(&self.plan, p))
                        .unwrap_or_default(),
                    laddrs: s.laddrs.clone(),
                    toa: s.toa,
                    check: s.check.clone(),
                    stats: get(&(s.key, None)),
                    rate: rate(&(s.key, None)),
                    reals: s
                        .reals
                        .iter()
                        .map(|r| RealView {
                            addr: r.addr,
                            mode: r.mode,
                            tunnel: (r.mode == Mode::Tunnel).then_some(r.tunnel),
                            weight: r.weight,
                            health: r.health,
                            active_conns: conn(&(s.key, Some(r.addr))).active,
                            inact_conns: conn(&(s.key, Some(r.addr))).inactive,
                            stats: get(&(s.key, Some(r.addr))),
                            rate: rate(&(s.key, Some(r.addr))),
                        })
                        .collect(),
                })
                .collect(),
            warnings: self.table.warnings(),
            ifaces: self.ifaces.clone(),
            announcing: self.announcing,
            bgp: self
                .sessions
                .as_ref()
                .map(|(at, sessions)| crate::session::Reported {
                    ago_s: at.elapsed().as_secs(),
                    sessions: sessions.clone(),
                }),
        })
    }
}

/// The services as the data path may carry them: a full-NAT real without a local address of
/// its family cannot get traffic (there is no source to translate to), so it stays out of the
/// plan, listed with a warning, until `--add-laddr` gives it one.
fn plannable(table: &Table) -> Vec<crate::model::Service> {
    let mut services = table.services.clone();
    for s in &mut services {
        let laddrs = s.laddrs.clone();
        s.reals.retain(|r| {
            r.mode != crate::model::Mode::FullNat
                || laddrs.iter().any(|a| a.is_ipv4() == r.addr.is_ipv4())
        });
    }
    services
}

/// Sends one empty UDP datagram to the discard port of each address, so the kernel resolves
/// (or refreshes) the neighbour entry of its next hop, which the XDP program's FIB lookup
/// needs. Errors are ignored: `doctor` reports a missing neighbour.
pub fn refresh_neighbours(addrs: &[IpAddr]) {
    let v4 = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok();
    let v6 = UdpSocket::bind((Ipv6Addr::UNSPECIFIED, 0)).ok();
    for a in addrs {
        let sock = if a.is_ipv4() { &v4 } else { &v6 };
        if let Some(s) = sock {
            let _ = s.send_to(&[], SocketAddr::new(*a, 9));
        }
    }
}

pub struct RunConfig {
    pub socket: PathBuf,
    /// How often the neighbours of unchecked reals are refreshed.
    pub neighbour_refresh: Duration,
    /// How often counters are sampled for `--rate` (ipvsadm's estimator uses 2 s).
    pub rate_interval: Duration,
    /// Serve Prometheus metrics on this address (`--metrics`), from the daemon's own loop.
    pub metrics: Option<SocketAddr>,
    /// After SIGTERM (`stop`): how long the daemon goes on forwarding with every VIP
    /// withdrawn, so routers move new flows away before the data path detaches (`--drain`).
    pub drain: Duration,
}

impl RunConfig {
    pub fn new(socket: PathBuf) -> RunConfig {
        RunConfig {
            socket,
            neighbour_refresh: Duration::from_secs(5),
            rate_interval: Duration::from_secs(2),
            metrics: None,
            drain: Duration::ZERO,
        }
    }
}

type Job = (Request, mpsc::Sender<Reply>);

/// What wakes the daemon's loop: a control request, or a real's health verdict (applied the
/// moment it is reached, not at the loop's next tick).
enum Input {
    Job(Job),
    Health(HealthEvent),
}

/// Serves the control socket and runs the checks until `stop` is set; then stops the
/// threads and removes the socket. The caller drops the data plane (which detaches it).
pub fn run<D: DataPlane>(daemon: &mut Daemon<D>, cfg: &RunConfig, stop: &AtomicBool) -> Result<()> {
    let mut endpoint = match cfg.metrics {
        Some(addr) => Some(
            wirespeed_metrics::Endpoint::bind(addr).map_err(crate::error::io(format!(
                "listen for --metrics on {addr} (is the address local and the port free?)"
            )))?,
        ),
        None => None,
    };
    let server = Server::bind(&cfg.socket)?;
    let (jobs_tx, jobs) = mpsc::channel::<Input>();
    let health_tx = jobs_tx.clone();
    let checker = Checker::start(move |ev| health_tx.send(Input::Health(ev)).is_ok())
        .map_err(crate::error::io("start the health checker"))?;
    checker.set_targets(daemon.check_targets());
    // systemd (Type=notify): the program is attached (by the caller) and the socket listens.
    if let Err(e) = wirespeed_sys::notify::ready("load balancer attached") {
        eprintln!("wirespeed lb: could not tell systemd we are ready: {e}");
    }
    let acceptor_stop = AtomicBool::new(false);
    let result = std::thread::scope(|scope| -> Result<()> {
        let server = &server;
        let acceptor_stop = &acceptor_stop;
        std::thread::Builder::new()
            .name("lb control".into())
            .spawn_scoped(scope, move || {
                while !acceptor_stop.load(Ordering::Relaxed) {
                    match server.accept() {
                        // One thread per client, so a client that connects and dawdles does
                        // not hold up the others; the main thread still does one change at a
                        // time.
                        Some(client) => {
                            let jobs_tx = jobs_tx.clone();
                            let _ = std::thread::Builder::new()
                                .name("lb client".into())
                                .spawn_scoped(scope, move || {
                                    control::serve_watching_client(client, |req| {
                                        let watch = req == Request::WatchAnnounceable;
                                        let (tx, rx) = mpsc::channel();
                                        let stopping =
                                            || Reply::Error("the daemon is stopping".into());
                                        if jobs_tx.send(Input::Job((req, tx))).is_err() {
                                            return Answer::Once(stopping());
                                        }
                                        if watch {
                                            return Answer::Stream(rx);
                                        }
                                        Answer::Once(rx.recv().unwrap_or_else(|_| stopping()))
                                    })
                                });
                        }
                        None => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            })
            .map_err(crate::error::io("start the control thread"))?;
        let outcome = serve_loop(daemon, cfg, stop, &jobs, &checker, &mut endpoint);
        acceptor_stop.store(true, Ordering::Relaxed);
        // Unblock the clients being served: their requests are answered "stopping".
        drop(jobs);
        outcome
    });
    let _ = wirespeed_sys::notify::stopping("detaching the load balancer");
    drop(checker);
    drop(server);
    result
}

fn serve_loop<D: DataPlane>(
    daemon: &mut Daemon<D>,
    cfg: &RunConfig,
    stop: &AtomicBool,
    inputs: &mpsc::Receiver<Input>,
    checker: &Checker,
    endpoint: &mut Option<wirespeed_metrics::Endpoint>,
) -> Result<()> {
    let mut next_refresh = Instant::now();
    let mut next_sample = Instant::now();
    // `lb announce` connections, each sent the announceable set at every change.
    let mut watchers: Vec<mpsc::Sender<Reply>> = Vec::new();
    // Set at SIGTERM: the end of the drain, after which the data path detaches.
    let mut detach_at: Option<Instant> = None;
    loop {
        if detach_at.is_none() && stop.load(Ordering::Relaxed) {
            detach_at = Some(Instant::now() + cfg.drain);
            if !cfg.drain.is_zero() {
                eprintln!(
                    "wirespeed lb: stopping: every VIP withdrawn; forwarding for {} s more, then detaching",
                    cfg.drain.as_secs_f64()
                );
            }
        }
        if detach_at.is_some_and(|t| Instant::now() >= t) {
            break;
        }
        let mut changed = false;
        match inputs.recv_timeout(Duration::from_millis(50)) {
            Ok(Input::Job((Request::WatchAnnounceable, reply_to))) => {
                let first = daemon.handle(Request::WatchAnnounceable);
                if reply_to.send(first).is_ok() {
                    watchers.push(reply_to);
                }
            }
            Ok(Input::Job((req, reply_to))) => {
                let before = daemon.table().clone();
                let reply = daemon.handle(req);
                changed = before != *daemon.table();
                let _ = reply_to.send(reply);
            }
            Ok(Input::Health(ev)) => match daemon.set_health(&ev) {
                Ok(_) => eprintln!(
                    "wirespeed lb: {} real {} is {:?}",
                    ev.service, ev.real, ev.health
                ),
                Err(e) => eprintln!(
                    "wirespeed lb: could not apply the health of {}: {e}",
                    ev.real
                ),
            },
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                return Err(Error::Invalid("the control thread stopped".into()))
            }
        }
        let now = Instant::now();
        if changed {
            checker.set_targets(daemon.check_targets());
        }
        if daemon.update_announceable(now, detach_at.is_some()) {
            let set = daemon.announceable();
            watchers.retain(|w| w.send(Reply::Announceable(set.clone())).is_ok());
        }
        if changed || now >= next_refresh {
            refresh_neighbours(&daemon.neighbour_targets());
            next_refresh = now + cfg.neighbour_refresh;
        }
        if now >= next_sample {
            if let Err(e) = daemon.sample_rates(now) {
                eprintln!("wirespeed lb: could not read the counters: {e}");
            }
            next_sample = now + cfg.rate_interval;
        }
        // A scrape waits at most one turn (the 50 ms above) for its answer.
        if let Some(e) = endpoint.as_mut() {
            e.serve(&mut || daemon.render_metrics());
        }
    }
    // The local addresses go too: nothing will answer on them once detached.
    for w in &watchers {
        let _ = w.send(Reply::Announceable(Vec::new()));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
