//! Shards: one pinned thread per CPU, each with its own executor, timers and I/O engine.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::io::{self, EngineKind, Reactor};
use crate::smp::{self, Mesh};
use crate::{executor, signal, sys, time};

/// Configures a [`Runtime`].
#[derive(Debug, Clone)]
pub struct RuntimeBuilder {
    cpus: Option<Vec<usize>>,
    engine: EngineKind,
    poll_us: u32,
    napi_busy_poll_us: u32,
    idle_sleep_us: u32,
    task_quota: usize,
    handle_signals: bool,
    pin: bool,
}

pub struct Runtime {
    cfg: RuntimeBuilder,
    cpus: Vec<usize>,
    engine: EngineKind,
    mesh: Arc<Mesh>,
}

/// Stops a running runtime from any thread.
#[derive(Clone)]
pub struct ShutdownHandle(Arc<Mesh>);

impl ShutdownHandle {
    pub fn shutdown(&self) {
        self.0.request_shutdown();
    }
}

impl Runtime {
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder {
            cpus: None,
            engine: EngineKind::Epoll,
            poll_us: 0,
            napi_busy_poll_us: 0,
            idle_sleep_us: 0,
            task_quota: 256,
            handle_signals: false,
            pin: true,
        }
    }

    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    /// The engine the shards will use (io_uring may have fallen back to epoll).
    pub fn engine(&self) -> EngineKind {
        self.engine
    }

    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle(self.mesh.clone())
    }

    /// Starts one shard per CPU, runs `make()` as each shard's main task, and returns the
    /// outputs in shard order once every main task has finished.
    pub fn run<F, Fut>(self, make: F) -> Result<Vec<Fut::Output>, Error>
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future + 'static,
        Fut::Output: Send + 'static,
    {
        let make = Arc::new(make);
        let guard = if self.cfg.handle_signals {
            Some(signal::Watcher::install()?)
        } else {
            None
        };
        let n = self.cpus.len();
        let mut threads = Vec::with_capacity(n);
        for (id, &cpu) in self.cpus.iter().enumerate() {
            let make = make.clone();
            let mesh = self.mesh.clone();
            let cfg = ShardConfig {
                id,
                cpu,
                n,
                engine: self.engine,
                poll_us: self.cfg.poll_us,
                napi_busy_poll_us: self.cfg.napi_busy_poll_us,
                idle_sleep_us: self.cfg.idle_sleep_us,
                task_quota: self.cfg.task_quota,
                pin: self.cfg.pin,
            };
            let t = std::thread::Builder::new()
                .name(format!("shard-{id}"))
                .spawn(move || shard_main(cfg, mesh, move || make()))
                .map_err(|source| Error::Io {
                    what: "spawn shard thread",
                    err: source,
                })?;
            threads.push(t);
        }
        if let Some(w) = &guard {
            w.wait_until(&self.mesh, || threads.iter().all(|t| t.is_finished()));
        }
        let mut out = Vec::with_capacity(n);
        let mut first_err = None;
        for (id, t) in threads.into_iter().enumerate() {
            match t.join() {
                Ok(Ok(v)) => out.push(v),
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert(Error::ShardPanicked(id));
                }
            }
        }
        drop(guard);
        match first_err {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }
}

impl RuntimeBuilder {
    /// One shard per listed CPU, in this order (shard i runs on `cpus[i]`). Default: every CPU
    /// in the process's affinity mask.
    pub fn cpus(mut self, cpus: Vec<usize>) -> Self {
        self.cpus = Some(cpus);
        self
    }
    pub fn engine(mut self, engine: EngineKind) -> Self {
        self.engine = engine;
        self
    }
    /// How long an idle shard waits in the kernel per turn, in microseconds. 0 blocks until an
    /// event or a timer. A small value (the seed's 100 µs) keeps the shard spinning through
    /// epoll_pwait2, which lets net.core.busy_poll work and avoids sleep/wake costs.
    pub fn poll_us(mut self, us: u32) -> Self {
        self.poll_us = us;
        self
    }
    /// NAPI busy polling for this many microseconds, preferred over the queue's interrupt or
    /// thread: on the shard's epoll instance (EPIOCSPARAMS) or io_uring ring (NAPI
    /// registration). 0 turns it off.
    pub fn napi_busy_poll_us(mut self, us: u32) -> Self {
        self.napi_busy_poll_us = us;
        self
    }
    /// A shard whose pollers all have a wake-up fd ([`add_poller_with_wakeup`]) and have found
    /// nothing for this many microseconds sleeps in the kernel until one of those fds is
    /// readable, a timer is due or a poller's own deadline comes, instead of spinning. 0 (the
    /// default) spins for ever, as a DPDK application does.
    pub fn idle_sleep_us(mut self, us: u32) -> Self {
        self.idle_sleep_us = us;
        self
    }
    /// How many tasks run between two polls of the I/O engine.
    pub fn task_quota(mut self, n: usize) -> Self {
        self.task_quota = n.max(1);
        self
    }
    /// Stop gracefully on SIGINT/SIGTERM (a second signal exits at once).
    pub fn handle_signals(mut self, yes: bool) -> Self {
        self.handle_signals = yes;
        self
    }
    /// Pin each shard to its CPU (default). Turning it off is for experiments only.
    pub fn pin(mut self, yes: bool) -> Self {
        self.pin = yes;
        self
    }

    /// Validates the configuration and resolves the engine. io_uring falls back to epoll, with
    /// one line on stderr, when the kernel lacks what the engine needs.
    pub fn build(self) -> Result<Runtime, Error> {
        let allowed = sys::allowed_cpus().map_err(|source| Error::Io {
            what: "sched_getaffinity",
            err: source,
        })?;
        let cpus = match &self.cpus {
            Some(c) => c.clone(),
            None => allowed.clone(),
        };
        if cpus.is_empty() {
            return Err(Error::NoCpus);
        }
        if self.pin {
            if let Some(&cpu) = cpus.iter().find(|c| !allowed.contains(c)) {
                return Err(Error::CpuNotAllowed { cpu, allowed });
            }
        }
        let engine = match self.engine {
            EngineKind::Uring => {
                match io::uring::probe() {
                    Ok(()) => EngineKind::Uring,
                    Err(why) => {
                        eprintln!("wirespeed-rt: io_uring engine unavailable ({why}); falling back to epoll");
                        EngineKind::Epoll
                    }
                }
            }
            EngineKind::Epoll => EngineKind::Epoll,
        };
        let mesh = Arc::new(Mesh::new(cpus.len()).map_err(|source| Error::Io {
            what: "eventfd",
            err: source,
        })?);
        Ok(Runtime {
            cfg: self,
            cpus,
            engine,
            mesh,
        })
    }

    /// Shorthand for `build()?.run(make)`.
    pub fn run<F, Fut>(self, make: F) -> Result<Vec<Fut::Output>, Error>
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future + 'static,
        Fut::Output: Send + 'static,
    {
        self.build()?.run(make)
    }
}

struct ShardConfig {
    id: usize,
    cpu: usize,
    n: usize,
    engine: EngineKind,
    poll_us: u32,
    napi_busy_poll_us: u32,
    idle_sleep_us: u32,
    task_quota: usize,
    pin: bool,
}

pub(crate) struct ShardCtx {
    pub(crate) id: usize,
    pub(crate) cpu: usize,
    pub(crate) n: usize,
    pub(crate) engine: EngineKind,
    pub(crate) poll_us: u32,
    idle_sleep_us: u32,
    shutdown_seen: Cell<bool>,
    shutdown_waiters: RefCell<Vec<Waker>>,
    pollers: RefCell<Vec<Poller>>,
}

/// What a poller found on one turn of the shard loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Polled {
    /// It moved something.
    Worked,
    /// Nothing to do. It must run again by `until` (its protocol timers), or when its wake-up
    /// fd is readable; `None`: only then.
    Idle { until: Option<Instant> },
}

struct Poller {
    run: Box<dyn FnMut() -> Polled>,
    /// Whether the shard may sleep on this poller's wake-up fd.
    can_sleep: bool,
}

/// One turn over a shard's pollers.
#[derive(Clone, Copy, Debug, Default)]
struct PollersTurn {
    any: bool,
    worked: bool,
    /// Every poller has a wake-up fd.
    can_sleep: bool,
    /// The earliest deadline an idle poller gave.
    until: Option<Instant>,
}

thread_local! {
    /// Created, used and dropped on its shard's thread only.
    static CTX: RefCell<Option<Rc<ShardCtx>>> = const { RefCell::new(None) };
}

pub(crate) fn with_ctx<R>(f: impl FnOnce(&ShardCtx) -> R) -> R {
    CTX.with(|c| {
        let c = c.borrow();
        let ctx = c
            .as_ref()
            .expect("called outside a wirespeed shard (start one with Runtime::builder().run)");
        f(ctx)
    })
}

/// This shard's index, 0-based.
pub fn shard_id() -> usize {
    with_ctx(|c| c.id)
}
/// How many shards the runtime has.
pub fn shard_count() -> usize {
    with_ctx(|c| c.n)
}
/// The CPU this shard is pinned to.
pub fn cpu() -> usize {
    with_ctx(|c| c.cpu)
}
pub fn engine_kind() -> EngineKind {
    with_ctx(|c| c.engine)
}
pub fn poll_us() -> u32 {
    with_ctx(|c| c.poll_us)
}

/// [`RuntimeBuilder::idle_sleep_us`] of this shard: 0 when its pollers spin for ever, so a
/// poller need not register a wake-up fd or work out its deadlines.
pub fn idle_sleep_us() -> u32 {
    with_ctx(|c| c.idle_sleep_us)
}

pub fn shutdown_requested() -> bool {
    with_ctx(|c| c.shutdown_seen.get())
}

/// Completes when the runtime is asked to stop (signal or [`ShutdownHandle`]).
pub async fn shutdown_signal() {
    std::future::poll_fn(|cx| {
        with_ctx(|c| {
            if c.shutdown_seen.get() {
                Poll::Ready(())
            } else {
                c.shutdown_waiters.borrow_mut().push(cx.waker().clone());
                Poll::Pending
            }
        })
    })
    .await
}

/// Registers a function the shard loop calls every turn; it returns whether it did work. A
/// shard with such a poller never blocks in the kernel (this is how a userspace stack
/// busy-polls its NIC queue).
pub fn add_poller(mut f: impl FnMut() -> bool + 'static) {
    let run = Box::new(move || {
        if f() {
            Polled::Worked
        } else {
            Polled::Idle { until: None }
        }
    });
    with_ctx(|c| {
        c.pollers.borrow_mut().push(Poller {
            run,
            can_sleep: false,
        })
    });
}

/// Like [`add_poller`], with fds of which one is readable when the poller has work (AF_XDP
/// sockets with frames on their rx rings). With [`RuntimeBuilder::idle_sleep_us`] set, the
/// shard sleeps on them once every poller has been idle that long; otherwise it spins as before.
pub fn add_poller_with_wakeup(
    fds: &[std::os::fd::RawFd],
    f: impl FnMut() -> Polled + 'static,
) -> std::io::Result<()> {
    for &fd in fds {
        io::with(|r| r.add_wake_fd(fd))?;
    }
    with_ctx(|c| {
        c.pollers.borrow_mut().push(Poller {
            run: Box::new(f),
            can_sleep: true,
        })
    });
    Ok(())
}

/// Makes this shard busy-poll NAPI `id` for the runtime's NAPI busy-poll time whenever it
/// waits in its I/O engine (io_uring only; an error says why not). For a sleeping poller whose
/// fd names no NAPI: the copy-mode AF_XDP socket's queue.
pub fn busy_poll_napi(id: u32) -> std::io::Result<()> {
    io::with(|r| r.busy_poll_napi(id))
}

/// The earlier of two optional deadlines (None: no deadline).
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Runs the pollers once each.
fn run_pollers() -> PollersTurn {
    // Pollers are taken out while they run so that they may spawn or register more.
    let mut list = with_ctx(|c| std::mem::take(&mut *c.pollers.borrow_mut()));
    if list.is_empty() {
        return PollersTurn::default();
    }
    let mut turn = PollersTurn {
        any: true,
        can_sleep: true,
        ..PollersTurn::default()
    };
    for p in list.iter_mut() {
        turn.can_sleep &= p.can_sleep;
        match (p.run)() {
            Polled::Worked => turn.worked = true,
            Polled::Idle { until } => turn.until = earliest(turn.until, until),
        }
    }
    with_ctx(|c| {
        let mut cur = c.pollers.borrow_mut();
        list.append(&mut cur);
        *cur = list;
    });
    turn
}

fn shard_main<Fut: Future + 'static>(
    cfg: ShardConfig,
    mesh: Arc<Mesh>,
    make: impl FnOnce() -> Fut,
) -> Result<Fut::Output, Error> {
    let start_err = |source| Error::ShardStart {
        shard: cfg.id,
        cpu: cfg.cpu,
        err: source,
    };
    if cfg.pin {
        sys::pin_to_cpu(cfg.cpu).map_err(start_err)?;
    }
    let mut reactor = Reactor::new(cfg.engine, cfg.napi_busy_poll_us).map_err(start_err)?;
    reactor
        .add_doorbell(&mesh.doorbells[cfg.id])
        .map_err(start_err)?;
    io::install(reactor);
    let ctx = ShardCtx {
        id: cfg.id,
        cpu: cfg.cpu,
        n: cfg.n,
        engine: cfg.engine,
        poll_us: cfg.poll_us,
        idle_sleep_us: cfg.idle_sleep_us,
        shutdown_seen: Cell::new(false),
        shutdown_waiters: RefCell::new(Vec::new()),
        pollers: RefCell::new(Vec::new()),
    };
    CTX.with(|c| *c.borrow_mut() = Some(Rc::new(ctx)));
    time::set_now(Instant::now());
    smp::join(mesh.clone(), cfg.id);

    let output: Rc<RefCell<Option<Fut::Output>>> = Rc::new(RefCell::new(None));
    let slot = output.clone();
    let main = make();
    let _main = executor::spawn(async move {
        let v = main.await;
        *slot.borrow_mut() = Some(v);
    });

    let result = shard_loop(&cfg, &mesh, &output);

    // Tear down in dependency order: tasks (which own sockets and timers) first, then the
    // reactor that those sockets are registered with.
    executor::clear();
    drop(_main);
    smp::clear_local();
    time::clear();
    io::uninstall();
    CTX.with(|c| *c.borrow_mut() = None);
    result?;
    let v = output.borrow_mut().take().expect("main task finished");
    Ok(v)
}

/// How often a spinning shard (one with pollers) looks at its kernel I/O engine.
const ENGINE_POLL_EVERY: Duration = Duration::from_micros(50);

fn shard_loop<T>(
    cfg: &ShardConfig,
    mesh: &Mesh,
    output: &Rc<RefCell<Option<T>>>,
) -> Result<(), Error> {
    let poll_cap = (cfg.poll_us > 0).then(|| Duration::from_micros(cfg.poll_us as u64));
    let idle_sleep =
        (cfg.idle_sleep_us > 0).then(|| Duration::from_micros(cfg.idle_sleep_us as u64));
    let mut last_engine_poll = Instant::now();
    let mut last_work = Instant::now();
    loop {
        let now = Instant::now();
        time::set_now(now);
        time::fire_due(now);
        let ran = executor::run_ready(cfg.task_quota);
        smp::poll_mesh(mesh, cfg.id);
        let pollers = run_pollers();
        if ran > 0 || pollers.worked {
            last_work = now;
        }
        // Pollers that can be woken by their fds and have been idle long enough let the shard
        // sleep like one without pollers, but no later than the earliest deadline they gave.
        let pollers_sleep = pollers.can_sleep
            && !pollers.worked
            && idle_sleep.is_some_and(|d| now.saturating_duration_since(last_work) >= d);
        let has_pollers = pollers.any && !pollers_sleep;
        if output.borrow().is_some() {
            return Ok(());
        }
        if mesh.shutdown.load(std::sync::atomic::Ordering::Relaxed)
            && !with_ctx(|c| c.shutdown_seen.get())
        {
            let waiters = with_ctx(|c| {
                c.shutdown_seen.set(true);
                std::mem::take(&mut *c.shutdown_waiters.borrow_mut())
            });
            waiters.into_iter().for_each(Waker::wake);
            continue;
        }

        let busy = has_pollers || executor::has_ready() || smp::has_backlog();
        let wait = if busy {
            Some(Duration::ZERO)
        } else {
            let next = earliest(time::next_deadline(), pollers.until);
            let until_timer = next.map(|d| d.saturating_duration_since(Instant::now()));
            match (until_timer, poll_cap) {
                (Some(t), Some(p)) => Some(t.min(p)),
                (Some(t), None) => Some(t),
                (None, p) => p,
            }
        };
        // A shard that busy-polls a NIC queue spins here; a zero-timeout engine poll on every
        // turn would cost a syscall per turn for the few kernel sockets and the doorbell, so
        // those are looked at every ENGINE_POLL_EVERY instead.
        if has_pollers && wait == Some(Duration::ZERO) {
            if now.saturating_duration_since(last_engine_poll) < ENGINE_POLL_EVERY {
                continue;
            }
            last_engine_poll = now;
        }
        let blocking = wait != Some(Duration::ZERO);
        let wait = if blocking && !mesh.prepare_sleep(cfg.id) {
            Some(Duration::ZERO)
        } else {
            wait
        };
        let r = io::with(|r| r.poll(wait));
        if blocking {
            mesh.woke(cfg.id);
        }
        if let Err(source) = r {
            return Err(Error::ShardStart {
                shard: cfg.id,
                cpu: cfg.cpu,
                err: source,
            });
        }
    }
}
