//! The load engine shared by the HTTP and echo generators.
//!
//! One thread per CPU, each with its own epoll loop and its own connections: nothing is
//! shared between threads while measuring except one relaxed counter store per wakeup (for
//! the live line). Requests are pre-serialized once; a connection sends a slice of a block
//! holding the request `depth + 1` times, so pipelined or partially written requests never
//! need copying. Responses are parsed in place in a fixed per-connection buffer. Per request
//! the steady state costs one `recv` and one `send`, plus a share of one `epoll_pwait2`.
//!
//! Closed loop (default): each connection keeps `depth` requests in flight and latency runs
//! from the moment a request is queued. Open loop (`rate`): each connection sends on a fixed
//! schedule and latency runs from the *intended* send time, so a server stall is charged to
//! every request that should have been sent during it (coordinated omission corrected, as
//! wrk2 does).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::cpu;
use crate::hist::LatencyHist;
use crate::{Error, Result};

/// How one response ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// A complete response whose status was not 2xx.
    Non2xx,
}

/// What a parser did with the bytes it was shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Bytes the parser is done with (they may be dropped from the buffer).
    pub consumed: usize,
    /// Set when those bytes completed one response.
    pub done: Option<Outcome>,
}

/// The response stream is not what the protocol expects; the connection is reset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed response: {0}")]
pub struct ParseError(pub &'static str);

/// A minimal, resumable response parser. One instance per connection.
pub trait ResponseParser: Clone + Send + 'static {
    /// Looks at buffered bytes. Returns `consumed == 0 && done == None` when it needs more.
    fn advance(&mut self, buf: &[u8]) -> std::result::Result<Progress, ParseError>;
    /// Forgets a half-parsed response (the connection was reset).
    fn reset(&mut self);
}

/// What to run.
#[derive(Clone, Debug)]
pub struct LoadSpec {
    pub addr: SocketAddr,
    pub connections: usize,
    /// Worker threads; 0 means one per CPU in `cpus` (or 1).
    pub threads: usize,
    /// Pin worker i to `cpus[i % len]`.
    pub cpus: Option<Vec<usize>>,
    pub warmup: Duration,
    pub duration: Duration,
    /// Requests in flight per connection (pipelining depth).
    pub depth: usize,
    /// Open loop: total requests per second across all connections.
    pub rate: Option<f64>,
    /// A connection with requests outstanding and no progress for this long is reset.
    pub timeout: Duration,
    /// The serialized request (or message).
    pub request: Vec<u8>,
    /// Print a live line each second (only when stdout is a tty).
    pub live: bool,
    /// Set to [`PHASE_MEASURING`] when the measured interval starts and [`PHASE_DONE`] when it
    /// ends, so a probe elsewhere can cover exactly that interval.
    pub phase: Option<Arc<AtomicU8>>,
    /// How the client's threads do their I/O.
    pub engine: Engine,
}

/// The client's I/O engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Engine {
    /// One epoll loop per thread, recv/send: two syscalls per request.
    Epoll,
    /// One io_uring per thread: sends and receives batched into one enter per loop.
    /// Falls back to epoll where io_uring is unavailable.
    #[default]
    Uring,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Epoll => "epoll",
            Engine::Uring => "io_uring",
        }
    }
}

pub const PHASE_WARMUP: u8 = 0;
pub const PHASE_MEASURING: u8 = 1;
pub const PHASE_DONE: u8 = 2;

/// Errors by kind, counted during the measured interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Errors {
    pub connect: u64,
    pub read: u64,
    pub write: u64,
    pub timeout: u64,
    pub non2xx: u64,
    pub parse: u64,
}

impl Errors {
    pub fn add(&mut self, o: &Errors) {
        self.connect += o.connect;
        self.read += o.read;
        self.write += o.write;
        self.timeout += o.timeout;
        self.non2xx += o.non2xx;
        self.parse += o.parse;
    }

    pub fn total(&self) -> u64 {
        self.connect + self.read + self.write + self.timeout + self.non2xx + self.parse
    }
}

/// What a run measured (after warm-up).
#[derive(Clone, Debug)]
pub struct LoadResult {
    pub hist: LatencyHist,
    pub requests: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub duration: Duration,
    pub errors: Errors,
    /// User+sys CPU time of this process during the measured interval.
    pub client_cpu: Duration,
    pub open_loop: bool,
    pub threads: usize,
    pub connections: usize,
    /// The engine that actually ran (io_uring falls back to epoll).
    pub engine: Engine,
}

impl LoadResult {
    pub fn rps(&self) -> f64 {
        self.requests as f64 / self.duration.as_secs_f64().max(1e-9)
    }

    /// Client CPU use in percent of one CPU.
    pub fn client_cpu_pct(&self) -> f64 {
        100.0 * self.client_cpu.as_secs_f64() / self.duration.as_secs_f64().max(1e-9)
    }

    /// Client CPU time per completed request, in microseconds.
    pub fn client_cpu_us_per_req(&self) -> f64 {
        self.client_cpu.as_secs_f64() * 1e6 / (self.requests.max(1) as f64)
    }
}

#[repr(align(64))]
pub(crate) struct PaddedCounter(pub(crate) AtomicU64);

/// Runs the load described by `spec`, parsing responses with clones of `parser`.
pub fn run<P: ResponseParser>(spec: &LoadSpec, parser: P) -> Result<LoadResult> {
    if spec.connections == 0 {
        return Err(Error::Invalid("need at least one connection".into()));
    }
    if spec.request.is_empty() {
        return Err(Error::Invalid("empty request".into()));
    }
    if let Some(r) = spec.rate {
        if !(r > 0.0 && r.is_finite()) {
            return Err(Error::Invalid(format!("bad rate {r}")));
        }
    }
    let mut threads = if spec.threads > 0 {
        spec.threads
    } else {
        spec.cpus.as_ref().map_or(1, |c| c.len())
    };
    threads = threads.clamp(1, spec.connections);
    let depth = spec.depth.clamp(1, 1024);
    let engine = match spec.engine {
        Engine::Uring if io_uring::IoUring::new(8).is_err() => Engine::Epoll,
        e => e,
    };

    let start = Instant::now() + Duration::from_millis(20);
    let measure_at = start + spec.warmup;
    let end_at = measure_at + spec.duration;
    let counters: Arc<Vec<PaddedCounter>> = Arc::new(
        (0..threads)
            .map(|_| PaddedCounter(AtomicU64::new(0)))
            .collect(),
    );
    let abort = Arc::new(AtomicBool::new(false));

    let mut handles = Vec::with_capacity(threads);
    for t in 0..threads {
        let conn_ids: Vec<usize> = (t..spec.connections).step_by(threads).collect();
        let w = Worker {
            addr: spec.addr,
            conn_ids,
            total_conns: spec.connections,
            cpu: spec.cpus.as_ref().map(|c| c[t % c.len()]),
            depth,
            rate: spec.rate,
            timeout: spec.timeout,
            request: spec.request.clone(),
            start,
            measure_at,
            end_at,
            counters: counters.clone(),
            index: t,
            abort: abort.clone(),
        };
        let p = parser.clone();
        let h = std::thread::Builder::new()
            .name(format!("ws-load-{t}"))
            .spawn(move || match engine {
                Engine::Epoll => w.run(p),
                Engine::Uring => crate::load_uring::run_worker(w, p),
            })
            .map_err(|source| Error::Io {
                what: "spawn load thread".into(),
                source,
            })?;
        handles.push(h);
    }

    // The main thread only samples CPU time at the interval edges and prints the live line.
    let tty = spec.live && is_stdout_tty();
    sleep_until(measure_at);
    if let Some(p) = &spec.phase {
        p.store(PHASE_MEASURING, Ordering::SeqCst);
    }
    let cpu0 = cpu::self_cpu_time();
    let t0 = Instant::now();
    let mut last = (t0, sum(&counters));
    while Instant::now() < end_at {
        let next = (Instant::now() + Duration::from_secs(1)).min(end_at);
        sleep_until(next);
        if tty {
            let now = (Instant::now(), sum(&counters));
            let rate =
                (now.1.saturating_sub(last.1)) as f64 / (now.0 - last.0).as_secs_f64().max(1e-9);
            println!(
                "  {:>5.1}s  {:>12.0} req/s",
                (now.0 - t0).as_secs_f64(),
                rate
            );
            last = now;
        }
    }
    let cpu1 = cpu::self_cpu_time();
    let measured = Instant::now() - t0;
    if let Some(p) = &spec.phase {
        p.store(PHASE_DONE, Ordering::SeqCst);
    }

    let mut result = LoadResult {
        hist: LatencyHist::new(),
        requests: 0,
        bytes_read: 0,
        bytes_written: 0,
        duration: measured,
        errors: Errors::default(),
        client_cpu: cpu1.saturating_sub(cpu0),
        open_loop: spec.rate.is_some(),
        threads,
        connections: spec.connections,
        engine,
    };
    let mut first_err = None;
    for h in handles {
        match h.join() {
            Ok(Ok(r)) => {
                result.hist.merge(&r.hist);
                result.requests += r.requests;
                result.bytes_read += r.bytes_read;
                result.bytes_written += r.bytes_written;
                result.errors.add(&r.errors);
            }
            Ok(Err(e)) => {
                abort.store(true, Ordering::Relaxed);
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert(Error::Invalid("a load thread panicked".into()));
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(result),
    }
}

fn sum(c: &[PaddedCounter]) -> u64 {
    c.iter().map(|c| c.0.load(Ordering::Relaxed)).sum()
}

pub(crate) fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

pub fn is_stdout_tty() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(1) == 1 }
}

pub(crate) struct Worker {
    pub(crate) addr: SocketAddr,
    pub(crate) conn_ids: Vec<usize>,
    pub(crate) total_conns: usize,
    pub(crate) cpu: Option<usize>,
    pub(crate) depth: usize,
    pub(crate) rate: Option<f64>,
    pub(crate) timeout: Duration,
    pub(crate) request: Vec<u8>,
    pub(crate) start: Instant,
    pub(crate) measure_at: Instant,
    pub(crate) end_at: Instant,
    pub(crate) counters: Arc<Vec<PaddedCounter>>,
    pub(crate) index: usize,
    pub(crate) abort: Arc<AtomicBool>,
}

pub(crate) struct WorkerResult {
    pub(crate) hist: LatencyHist,
    pub(crate) requests: u64,
    pub(crate) bytes_read: u64,
    pub(crate) bytes_written: u64,
    pub(crate) errors: Errors,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Closed,
    Connecting,
    Open,
}

const RECV_BUF: usize = 64 * 1024;
const RECONNECT_BACKOFF: Duration = Duration::from_millis(10);
const TICK: Duration = Duration::from_millis(10);

struct Conn<P> {
    fd: RawFd,
    state: State,
    buf: Box<[u8]>,
    len: usize,
    parser: P,
    /// Start times of the requests in flight, oldest first (intended times in the open loop).
    sent_at: VecDeque<Instant>,
    /// Request bytes queued but not yet accepted by the kernel.
    wpending: usize,
    want_out: bool,
    last_progress: Instant,
    reconnect_at: Instant,
    /// Open loop: when the next request is due.
    next_due: Instant,
    interval: Duration,
}

struct Loop {
    epfd: RawFd,
    measuring: bool,
    hist: LatencyHist,
    requests: u64,
    completed_total: u64,
    bytes_read: u64,
    bytes_written: u64,
    errors: Errors,
    block: Vec<u8>,
    req_len: usize,
    depth: usize,
    open_loop: bool,
}

impl Worker {
    fn run<P: ResponseParser>(self, parser: P) -> Result<WorkerResult> {
        if let Some(c) = self.cpu {
            cpu::pin_current_thread(c)?;
        }
        // SAFETY: plain syscall; the fd is closed in EpollFd's drop.
        let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epfd < 0 {
            return Err(Error::Io {
                what: "epoll_create1".into(),
                source: std::io::Error::last_os_error(),
            });
        }
        let _guard = FdGuard(epfd);
        let mut block = Vec::with_capacity(self.request.len() * (self.depth + 1));
        for _ in 0..=self.depth {
            block.extend_from_slice(&self.request);
        }
        let mut lp = Loop {
            epfd,
            measuring: false,
            hist: LatencyHist::new(),
            requests: 0,
            completed_total: 0,
            bytes_read: 0,
            bytes_written: 0,
            errors: Errors::default(),
            block,
            req_len: self.request.len(),
            depth: self.depth,
            open_loop: self.rate.is_some(),
        };
        let interval = match self.rate {
            Some(r) => Duration::from_secs_f64(self.total_conns as f64 / r),
            None => Duration::ZERO,
        };
        let mut conns: Vec<Conn<P>> = self
            .conn_ids
            .iter()
            .map(|&id| Conn {
                fd: -1,
                state: State::Closed,
                buf: vec![0u8; RECV_BUF].into_boxed_slice(),
                len: 0,
                parser: parser.clone(),
                sent_at: VecDeque::with_capacity(self.depth),
                wpending: 0,
                want_out: false,
                last_progress: self.start,
                reconnect_at: self.start,
                // Spread the connections' schedules evenly over one interval.
                next_due: self.start
                    + match self.rate {
                        Some(r) => Duration::from_secs_f64(id as f64 / r),
                        None => Duration::ZERO,
                    },
                interval,
            })
            .collect();

        sleep_until(self.start);
        let mut events: Vec<libc::epoll_event> = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
        let mut next_tick = Instant::now();
        loop {
            let mut now = Instant::now();
            if !lp.measuring && now >= self.measure_at {
                lp.measuring = true;
                lp.hist.reset();
                lp.requests = 0;
                lp.bytes_read = 0;
                lp.bytes_written = 0;
                lp.errors = Errors::default();
            }
            if now >= self.end_at || self.abort.load(Ordering::Relaxed) {
                break;
            }
            if now >= next_tick {
                for (i, c) in conns.iter_mut().enumerate() {
                    lp.housekeep(c, i, &self.addr, now, self.timeout);
                }
                next_tick = now + TICK;
            }
            let mut wake = next_tick.min(self.end_at);
            if !lp.measuring {
                wake = wake.min(self.measure_at);
            }
            if lp.open_loop {
                for (i, c) in conns.iter_mut().enumerate() {
                    lp.issue_due(c, i, now);
                    if c.state == State::Open && c.sent_at.len() < lp.depth {
                        wake = wake.min(c.next_due);
                    }
                }
            }
            let wait = wake.saturating_duration_since(now);
            let ts = libc::timespec {
                tv_sec: wait.as_secs() as libc::time_t,
                tv_nsec: wait.subsec_nanos() as libc::c_long,
            };
            // SAFETY: `events` is a valid buffer of the given length; a null sigmask is allowed.
            let n = unsafe {
                libc::epoll_pwait2(
                    epfd,
                    events.as_mut_ptr(),
                    events.len() as i32,
                    &ts,
                    std::ptr::null(),
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(Error::Io {
                    what: "epoll_pwait2".into(),
                    source: e,
                });
            }
            now = Instant::now();
            for ev in &events[..n as usize] {
                let idx = ev.u64 as usize;
                let flags = ev.events;
                if let Some(c) = conns.get_mut(idx) {
                    lp.on_event(c, idx, flags, now);
                }
            }
            self.counters[self.index]
                .0
                .store(lp.completed_total, Ordering::Relaxed);
        }
        for c in conns.iter_mut() {
            close_conn(c);
        }
        Ok(WorkerResult {
            hist: lp.hist,
            requests: lp.requests,
            bytes_read: lp.bytes_read,
            bytes_written: lp.bytes_written,
            errors: lp.errors,
        })
    }
}

struct FdGuard(RawFd);

impl Drop for FdGuard {
    fn drop(&mut self) {
        // SAFETY: we own this descriptor.
        unsafe { libc::close(self.0) };
    }
}

fn close_conn<P: ResponseParser>(c: &mut Conn<P>) {
    if c.fd >= 0 {
        // SAFETY: the connection owns its fd; closing also removes it from epoll.
        unsafe { libc::close(c.fd) };
    }
    c.fd = -1;
    c.state = State::Closed;
    c.len = 0;
    c.sent_at.clear();
    c.wpending = 0;
    c.want_out = false;
    c.parser.reset();
}

pub(crate) fn sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data and large enough for either family.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_in6 fits in sockaddr_storage.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

impl Loop {
    fn count_err(&mut self, f: impl FnOnce(&mut Errors)) {
        if self.measuring {
            f(&mut self.errors);
        }
    }

    fn ctl(&self, op: i32, fd: RawFd, events: u32, idx: usize) -> bool {
        let mut ev = libc::epoll_event {
            events,
            u64: idx as u64,
        };
        // SAFETY: valid epoll fd and socket fd; ev lives across the call.
        unsafe { libc::epoll_ctl(self.epfd, op, fd, &mut ev) == 0 }
    }

    fn connect<P: ResponseParser>(
        &mut self,
        c: &mut Conn<P>,
        idx: usize,
        addr: &SocketAddr,
        now: Instant,
    ) {
        let family = if addr.is_ipv4() {
            libc::AF_INET
        } else {
            libc::AF_INET6
        };
        // SAFETY: plain socket creation.
        let fd = unsafe {
            libc::socket(
                family,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if fd < 0 {
            self.count_err(|e| e.connect += 1);
            c.reconnect_at = now + RECONNECT_BACKOFF;
            return;
        }
        let one: libc::c_int = 1;
        // SAFETY: setsockopt with a valid int option.
        unsafe {
            libc::setsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                &one as *const _ as *const libc::c_void,
                4,
            );
        }
        let (ss, len) = sockaddr(addr);
        // SAFETY: ss holds a valid sockaddr of `len` bytes.
        let rc = unsafe { libc::connect(fd, &ss as *const _ as *const libc::sockaddr, len) };
        c.fd = fd;
        c.last_progress = now;
        if rc == 0 {
            c.state = State::Connecting; // completes on the first EPOLLOUT like the async case
        } else if errno() == libc::EINPROGRESS {
            c.state = State::Connecting;
        } else {
            self.count_err(|e| e.connect += 1);
            close_conn(c);
            c.reconnect_at = now + RECONNECT_BACKOFF;
            return;
        }
        if !self.ctl(
            libc::EPOLL_CTL_ADD,
            fd,
            (libc::EPOLLIN | libc::EPOLLOUT) as u32,
            idx,
        ) {
            self.count_err(|e| e.connect += 1);
            close_conn(c);
            c.reconnect_at = now + RECONNECT_BACKOFF;
        }
    }

    fn housekeep<P: ResponseParser>(
        &mut self,
        c: &mut Conn<P>,
        idx: usize,
        addr: &SocketAddr,
        now: Instant,
        timeout: Duration,
    ) {
        match c.state {
            State::Closed => {
                if now >= c.reconnect_at {
                    self.connect(c, idx, addr, now);
                }
            }
            State::Connecting | State::Open => {
                let waiting = c.state == State::Connecting || !c.sent_at.is_empty();
                if waiting && now.duration_since(c.last_progress) > timeout {
                    self.count_err(|e| e.timeout += 1);
                    close_conn(c);
                    c.reconnect_at = now;
                }
            }
        }
    }

    fn issue_due<P: ResponseParser>(&mut self, c: &mut Conn<P>, idx: usize, now: Instant) {
        if c.state != State::Open {
            return;
        }
        let mut queued = 0;
        while c.sent_at.len() < self.depth && c.next_due <= now {
            c.sent_at.push_back(c.next_due);
            c.next_due += c.interval;
            queued += 1;
        }
        if queued > 0 {
            c.wpending += queued * self.req_len;
            self.flush(c, idx, now);
        }
    }

    fn on_event<P: ResponseParser>(
        &mut self,
        c: &mut Conn<P>,
        idx: usize,
        flags: u32,
        now: Instant,
    ) {
        match c.state {
            State::Closed => {}
            State::Connecting => {
                if flags & (libc::EPOLLOUT | libc::EPOLLERR | libc::EPOLLHUP) as u32 == 0 {
                    return;
                }
                let mut err: libc::c_int = 0;
                let mut len = 4 as libc::socklen_t;
                // SAFETY: SO_ERROR writes one int.
                unsafe {
                    libc::getsockopt(
                        c.fd,
                        libc::SOL_SOCKET,
                        libc::SO_ERROR,
                        &mut err as *mut _ as *mut libc::c_void,
                        &mut len,
                    )
                };
                if err != 0 || flags & libc::EPOLLERR as u32 != 0 {
                    self.count_err(|e| e.connect += 1);
                    close_conn(c);
                    c.reconnect_at = now + RECONNECT_BACKOFF;
                    return;
                }
                c.state = State::Open;
                c.last_progress = now;
                if !self.ctl(libc::EPOLL_CTL_MOD, c.fd, libc::EPOLLIN as u32, idx) {
                    self.count_err(|e| e.connect += 1);
                    close_conn(c);
                    c.reconnect_at = now + RECONNECT_BACKOFF;
                    return;
                }
                if self.open_loop {
                    self.issue_due(c, idx, now);
                } else {
                    self.queue_closed(c, now);
                    self.flush(c, idx, now);
                }
            }
            State::Open => {
                if flags & (libc::EPOLLIN | libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0 {
                    self.on_readable(c, idx, now);
                }
                if c.state == State::Open && flags & libc::EPOLLOUT as u32 != 0 {
                    self.flush(c, idx, now);
                }
            }
        }
    }

    /// Closed loop: top the connection up to `depth` requests in flight, started now.
    fn queue_closed<P: ResponseParser>(&mut self, c: &mut Conn<P>, now: Instant) {
        let n = self.depth - c.sent_at.len();
        for _ in 0..n {
            c.sent_at.push_back(now);
        }
        c.wpending += n * self.req_len;
    }

    fn fail<P: ResponseParser>(
        &mut self,
        c: &mut Conn<P>,
        now: Instant,
        f: impl FnOnce(&mut Errors),
    ) {
        self.count_err(f);
        close_conn(c);
        c.reconnect_at = now;
    }

    fn on_readable<P: ResponseParser>(&mut self, c: &mut Conn<P>, idx: usize, now: Instant) {
        loop {
            let room = c.buf.len() - c.len;
            // SAFETY: the pointer and length describe the free tail of the connection's buffer.
            let n = unsafe {
                libc::recv(
                    c.fd,
                    c.buf[c.len..].as_mut_ptr() as *mut libc::c_void,
                    room,
                    0,
                )
            };
            if n > 0 {
                let n = n as usize;
                c.len += n;
                if self.measuring {
                    self.bytes_read += n as u64;
                }
                c.last_progress = now;
                if !self.parse(c, now) {
                    return;
                }
                if n < room {
                    break;
                }
                continue;
            }
            if n == 0 {
                // A close with nothing outstanding is the server ending keep-alive, not an error.
                let clean = c.sent_at.is_empty() && c.len == 0;
                if clean {
                    close_conn(c);
                    c.reconnect_at = now;
                } else {
                    self.fail(c, now, |e| e.read += 1);
                }
                return;
            }
            match errno() {
                libc::EAGAIN => break,
                libc::EINTR => continue,
                _ => {
                    self.fail(c, now, |e| e.read += 1);
                    return;
                }
            }
        }
        if self.open_loop {
            self.issue_due(c, idx, now);
        } else if c.sent_at.len() < self.depth {
            self.queue_closed(c, now);
            self.flush(c, idx, now);
        }
    }

    /// Consumes complete responses from the buffer. Returns false if the connection was reset.
    fn parse<P: ResponseParser>(&mut self, c: &mut Conn<P>, now: Instant) -> bool {
        let mut pos = 0;
        while pos < c.len {
            match c.parser.advance(&c.buf[pos..c.len]) {
                Ok(p) => {
                    pos += p.consumed;
                    if let Some(outcome) = p.done {
                        let Some(t0) = c.sent_at.pop_front() else {
                            self.fail(c, now, |e| e.parse += 1);
                            return false;
                        };
                        self.completed_total += 1;
                        if self.measuring {
                            self.hist
                                .record_ns(now.saturating_duration_since(t0).as_nanos() as u64);
                            self.requests += 1;
                            if outcome == Outcome::Non2xx {
                                self.errors.non2xx += 1;
                            }
                        }
                    } else if p.consumed == 0 {
                        break;
                    }
                }
                Err(_) => {
                    self.fail(c, now, |e| e.parse += 1);
                    return false;
                }
            }
        }
        if pos > 0 {
            c.buf.copy_within(pos..c.len, 0);
            c.len -= pos;
        } else if c.len == c.buf.len() {
            // A response head larger than the whole buffer.
            self.fail(c, now, |e| e.parse += 1);
            return false;
        }
        true
    }

    fn flush<P: ResponseParser>(&mut self, c: &mut Conn<P>, idx: usize, now: Instant) {
        while c.wpending > 0 {
            let phase = (self.req_len - c.wpending % self.req_len) % self.req_len;
            let n = c.wpending.min(self.block.len() - phase);
            let bytes = &self.block[phase..phase + n];
            // SAFETY: `bytes` is a valid slice; MSG_NOSIGNAL turns EPIPE into an error code.
            let r = unsafe {
                libc::send(
                    c.fd,
                    bytes.as_ptr() as *const libc::c_void,
                    bytes.len(),
                    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                )
            };
            if r > 0 {
                c.wpending -= r as usize;
                if self.measuring {
                    self.bytes_written += r as u64;
                }
                c.last_progress = now;
                continue;
            }
            match errno() {
                libc::EAGAIN => {
                    if !c.want_out {
                        c.want_out = true;
                        if !self.ctl(
                            libc::EPOLL_CTL_MOD,
                            c.fd,
                            (libc::EPOLLIN | libc::EPOLLOUT) as u32,
                            idx,
                        ) {
                            self.fail(c, now, |e| e.write += 1);
                        }
                    }
                    return;
                }
                libc::EINTR => continue,
                _ => {
                    self.fail(c, now, |e| e.write += 1);
                    return;
                }
            }
        }
        if c.want_out {
            c.want_out = false;
            if !self.ctl(libc::EPOLL_CTL_MOD, c.fd, libc::EPOLLIN as u32, idx) {
                self.fail(c, now, |e| e.write += 1);
            }
        }
    }
}
