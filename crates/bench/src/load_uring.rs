//! The io_uring worker of the load engine (`Engine::Uring`).
//!
//! Same model as the epoll worker (see `load.rs`), but every send, receive and connect is an
//! SQE, and one `io_uring_enter` per loop both submits everything queued since the last one
//! and reaps every completion. With DEFER_TASKRUN the kernel's completion work runs in that
//! same call, so per request the client makes a fraction of a syscall instead of two.
//!
//! Each connection has at most one connect, one send and one receive in flight. Its buffers
//! live in the worker's connection vector, which never reallocates, and the worker does not
//! return (and so free them) before every operation it submitted has completed.

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types, IoUring};

use crate::hist::LatencyHist;
use crate::load::{sleep_until, sockaddr, Errors, Outcome, ResponseParser, Worker, WorkerResult};
use crate::{cpu, Error, Result};

const RECV_BUF: usize = 64 * 1024;
const TICK: Duration = Duration::from_millis(10);
const RECONNECT_BACKOFF: Duration = Duration::from_millis(10);

const OP_CONNECT: u64 = 1;
const OP_SEND: u64 = 2;
const OP_RECV: u64 = 3;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Closed,
    Connecting,
    Open,
}

struct Conn<P> {
    fd: RawFd,
    state: State,
    buf: Box<[u8]>,
    len: usize,
    parser: P,
    sent_at: VecDeque<Instant>,
    /// Request bytes queued and not yet handed to a send.
    wpending: usize,
    /// Bytes of the send in flight (0: none).
    sending: usize,
    recv_armed: bool,
    /// Operations of this slot still in the kernel, from this or an earlier connection.
    ops: u32,
    /// Bumped on every reset, so completions of a previous connection are recognized.
    gen: u64,
    last_progress: Instant,
    reconnect_at: Instant,
    next_due: Instant,
    interval: Duration,
    addr: (libc::sockaddr_storage, libc::socklen_t),
}

fn user_data(idx: usize, gen: u64, op: u64) -> u64 {
    ((idx as u64) << 32) | ((gen & 0xff_ffff) << 8) | op
}

struct Ring {
    ring: IoUring,
    inflight: u64,
}

impl Ring {
    /// Queues one SQE, submitting first when the queue is full.
    fn push(&mut self, e: squeue::Entry) -> Result<()> {
        loop {
            // SAFETY: every buffer an SQE points to lives in the worker's connections or its
            // request block, which outlive all in-flight operations (see module docs).
            let pushed = unsafe { self.ring.submission().push(&e) }.is_ok();
            if pushed {
                self.inflight += 1;
                return Ok(());
            }
            self.ring.submit().map_err(|source| Error::Io {
                what: "io_uring submit".into(),
                source,
            })?;
        }
    }
}

struct Stats {
    measuring: bool,
    hist: LatencyHist,
    requests: u64,
    completed_total: u64,
    bytes_read: u64,
    bytes_written: u64,
    errors: Errors,
}

impl Stats {
    fn err(&mut self, f: impl FnOnce(&mut Errors)) {
        if self.measuring {
            f(&mut self.errors);
        }
    }
}

struct Ctx<'a> {
    block: &'a [u8],
    req_len: usize,
    depth: usize,
    open_loop: bool,
}

fn reset<P: ResponseParser>(c: &mut Conn<P>, now: Instant, backoff: Duration) {
    if c.fd >= 0 {
        // SAFETY: our own socket. shutdown makes the in-flight operations finish now; the
        // kernel holds its own reference to the file until they do, so closing is safe.
        unsafe {
            libc::shutdown(c.fd, libc::SHUT_RDWR);
            libc::close(c.fd);
        }
    }
    c.fd = -1;
    c.state = State::Closed;
    c.len = 0;
    c.sent_at.clear();
    c.wpending = 0;
    c.sending = 0;
    c.recv_armed = false;
    c.gen += 1;
    c.parser.reset();
    c.reconnect_at = now + backoff;
}

fn connect<P: ResponseParser>(
    ring: &mut Ring,
    c: &mut Conn<P>,
    idx: usize,
    st: &mut Stats,
    now: Instant,
) -> Result<()> {
    let family = c.addr.0.ss_family as libc::c_int;
    // Blocking socket on purpose: io_uring returns EAGAIN for O_NONBLOCK files instead of
    // waiting for readiness itself.
    // SAFETY: plain socket creation.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        st.err(|e| e.connect += 1);
        c.reconnect_at = now + RECONNECT_BACKOFF;
        return Ok(());
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
        )
    };
    c.fd = fd;
    c.state = State::Connecting;
    c.last_progress = now;
    let e = opcode::Connect::new(
        types::Fd(fd),
        &c.addr.0 as *const _ as *const libc::sockaddr,
        c.addr.1,
    )
    .build()
    .user_data(user_data(idx, c.gen, OP_CONNECT));
    c.ops += 1;
    ring.push(e)
}

fn arm_recv<P: ResponseParser>(ring: &mut Ring, c: &mut Conn<P>, idx: usize) -> Result<()> {
    if c.recv_armed || c.state != State::Open {
        return Ok(());
    }
    let room = c.buf.len() - c.len;
    let ptr = c.buf[c.len..].as_mut_ptr();
    let e = opcode::Recv::new(types::Fd(c.fd), ptr, room as u32)
        .build()
        .user_data(user_data(idx, c.gen, OP_RECV));
    c.recv_armed = true;
    c.ops += 1;
    ring.push(e)
}

fn kick_send<P: ResponseParser>(
    ring: &mut Ring,
    ctx: &Ctx,
    c: &mut Conn<P>,
    idx: usize,
) -> Result<()> {
    if c.sending > 0 || c.wpending == 0 || c.state != State::Open {
        return Ok(());
    }
    let phase = (ctx.req_len - c.wpending % ctx.req_len) % ctx.req_len;
    let n = c.wpending.min(ctx.block.len() - phase);
    let bytes = &ctx.block[phase..phase + n];
    let e = opcode::Send::new(types::Fd(c.fd), bytes.as_ptr(), n as u32)
        .flags(libc::MSG_NOSIGNAL)
        .build()
        .user_data(user_data(idx, c.gen, OP_SEND));
    c.sending = n;
    c.ops += 1;
    ring.push(e)
}

fn queue_requests<P: ResponseParser>(ctx: &Ctx, c: &mut Conn<P>, now: Instant) {
    if ctx.open_loop {
        while c.sent_at.len() < ctx.depth && c.next_due <= now {
            c.sent_at.push_back(c.next_due);
            c.next_due += c.interval;
            c.wpending += ctx.req_len;
        }
    } else {
        while c.sent_at.len() < ctx.depth {
            c.sent_at.push_back(now);
            c.wpending += ctx.req_len;
        }
    }
}

/// Consumes complete responses; false when the stream is malformed.
fn parse<P: ResponseParser>(c: &mut Conn<P>, st: &mut Stats, now: Instant) -> bool {
    let mut pos = 0;
    while pos < c.len {
        match c.parser.advance(&c.buf[pos..c.len]) {
            Ok(p) => {
                pos += p.consumed;
                if let Some(outcome) = p.done {
                    let Some(t0) = c.sent_at.pop_front() else {
                        return false;
                    };
                    st.completed_total += 1;
                    if st.measuring {
                        st.hist
                            .record_ns(now.saturating_duration_since(t0).as_nanos() as u64);
                        st.requests += 1;
                        if outcome == Outcome::Non2xx {
                            st.errors.non2xx += 1;
                        }
                    }
                } else if p.consumed == 0 {
                    break;
                }
            }
            Err(_) => return false,
        }
    }
    if pos > 0 {
        c.buf.copy_within(pos..c.len, 0);
        c.len -= pos;
    }
    c.len < c.buf.len()
}

fn on_cqe<P: ResponseParser>(
    ring: &mut Ring,
    ctx: &Ctx,
    c: &mut Conn<P>,
    idx: usize,
    (ud, res): (u64, i32),
    st: &mut Stats,
    now: Instant,
) -> Result<()> {
    c.ops = c.ops.saturating_sub(1);
    let op = ud & 0xff;
    if (ud >> 8) & 0xff_ffff != c.gen & 0xff_ffff {
        return Ok(()); // a completion of a connection already reset
    }
    match op {
        OP_CONNECT => {
            if res < 0 {
                st.err(|e| e.connect += 1);
                reset(c, now, RECONNECT_BACKOFF);
                return Ok(());
            }
            c.state = State::Open;
            c.last_progress = now;
            queue_requests(ctx, c, now);
            kick_send(ring, ctx, c, idx)?;
            arm_recv(ring, c, idx)?;
        }
        OP_SEND => {
            let sent = c.sending;
            c.sending = 0;
            if res <= 0 {
                st.err(|e| e.write += 1);
                reset(c, now, Duration::ZERO);
                return Ok(());
            }
            let n = (res as usize).min(sent);
            c.wpending -= n;
            if st.measuring {
                st.bytes_written += n as u64;
            }
            c.last_progress = now;
            kick_send(ring, ctx, c, idx)?;
        }
        OP_RECV => {
            c.recv_armed = false;
            if res <= 0 {
                let clean = res == 0 && c.sent_at.is_empty() && c.len == 0;
                if !clean {
                    st.err(|e| e.read += 1);
                }
                reset(c, now, Duration::ZERO);
                return Ok(());
            }
            c.len += res as usize;
            if st.measuring {
                st.bytes_read += res as u64;
            }
            c.last_progress = now;
            if !parse(c, st, now) {
                st.err(|e| e.parse += 1);
                reset(c, now, Duration::ZERO);
                return Ok(());
            }
            queue_requests(ctx, c, now);
            kick_send(ring, ctx, c, idx)?;
            arm_recv(ring, c, idx)?;
        }
        _ => {}
    }
    Ok(())
}

pub(crate) fn run_worker<P: ResponseParser>(w: Worker, parser: P) -> Result<WorkerResult> {
    if let Some(c) = w.cpu {
        cpu::pin_current_thread(c)?;
    }
    let entries = ((w.conn_ids.len() * 3 + 64).next_power_of_two()).clamp(64, 32768) as u32;
    let ring = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(entries)
        .or_else(|_| IoUring::new(entries))
        .map_err(|source| Error::Io {
            what: "io_uring setup".into(),
            source,
        })?;
    let mut ring = Ring { ring, inflight: 0 };
    let mut block = Vec::with_capacity(w.request.len() * (w.depth + 1));
    for _ in 0..=w.depth {
        block.extend_from_slice(&w.request);
    }
    let ctx = Ctx {
        block: &block,
        req_len: w.request.len(),
        depth: w.depth,
        open_loop: w.rate.is_some(),
    };
    let interval = w.rate.map_or(Duration::ZERO, |r| {
        Duration::from_secs_f64(w.total_conns as f64 / r)
    });
    let addr = sockaddr(&w.addr);
    let mut conns: Vec<Conn<P>> = w
        .conn_ids
        .iter()
        .map(|&id| Conn {
            fd: -1,
            state: State::Closed,
            buf: vec![0u8; RECV_BUF].into_boxed_slice(),
            len: 0,
            parser: parser.clone(),
            sent_at: VecDeque::with_capacity(w.depth),
            wpending: 0,
            sending: 0,
            recv_armed: false,
            ops: 0,
            gen: 0,
            last_progress: w.start,
            reconnect_at: w.start,
            next_due: w.start
                + w.rate
                    .map_or(Duration::ZERO, |r| Duration::from_secs_f64(id as f64 / r)),
            interval,
            addr,
        })
        .collect();
    let mut st = Stats {
        measuring: false,
        hist: LatencyHist::new(),
        requests: 0,
        completed_total: 0,
        bytes_read: 0,
        bytes_written: 0,
        errors: Errors::default(),
    };
    sleep_until(w.start);
    let result = (|| -> Result<()> {
        let mut next_tick = Instant::now();
        loop {
            let now = Instant::now();
            if !st.measuring && now >= w.measure_at {
                st.measuring = true;
                st.hist.reset();
                st.requests = 0;
                st.bytes_read = 0;
                st.bytes_written = 0;
                st.errors = Errors::default();
            }
            if now >= w.end_at || w.abort.load(Ordering::Relaxed) {
                return Ok(());
            }
            if now >= next_tick {
                for (i, c) in conns.iter_mut().enumerate() {
                    match c.state {
                        State::Closed if now >= c.reconnect_at && c.ops == 0 => {
                            connect(&mut ring, c, i, &mut st, now)?
                        }
                        State::Connecting | State::Open
                            if (c.state == State::Connecting || !c.sent_at.is_empty())
                                && now.duration_since(c.last_progress) > w.timeout =>
                        {
                            st.err(|e| e.timeout += 1);
                            reset(c, now, Duration::ZERO);
                        }
                        _ => {}
                    }
                }
                next_tick = now + TICK;
            }
            let mut wake = next_tick.min(w.end_at);
            if !st.measuring {
                wake = wake.min(w.measure_at);
            }
            if ctx.open_loop {
                for (i, c) in conns.iter_mut().enumerate() {
                    if c.state == State::Open {
                        queue_requests(&ctx, c, now);
                        kick_send(&mut ring, &ctx, c, i)?;
                        if c.sent_at.len() < ctx.depth {
                            wake = wake.min(c.next_due);
                        }
                    }
                }
            }
            let wait = wake.saturating_duration_since(now);
            let ts = types::Timespec::new()
                .sec(wait.as_secs())
                .nsec(wait.subsec_nanos());
            let args = types::SubmitArgs::new().timespec(&ts);
            match ring.ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)
                    ) => {}
                Err(source) => {
                    return Err(Error::Io {
                        what: "io_uring_enter".into(),
                        source,
                    })
                }
            }
            let now = Instant::now();
            let mut cq: Vec<(u64, i32)> = Vec::new();
            {
                let comp = ring.ring.completion();
                cq.reserve(comp.len());
                for cqe in comp {
                    cq.push((cqe.user_data(), cqe.result()));
                }
            }
            ring.inflight -= cq.len() as u64;
            for (ud, res) in cq {
                let idx = (ud >> 32) as usize;
                if let Some(c) = conns.get_mut(idx) {
                    on_cqe(&mut ring, &ctx, c, idx, (ud, res), &mut st, now)?;
                }
            }
            w.counters[w.index]
                .0
                .store(st.completed_total, Ordering::Relaxed);
        }
    })();
    // Every operation must complete before the buffers it points into are freed.
    let now = Instant::now();
    for c in conns.iter_mut() {
        reset(c, now, Duration::ZERO);
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while ring.inflight > 0 && Instant::now() < deadline {
        let ts = types::Timespec::new().nsec(10_000_000);
        let _ = ring
            .ring
            .submitter()
            .submit_with_args(1, &types::SubmitArgs::new().timespec(&ts));
        let n = ring.ring.completion().count() as u64;
        ring.inflight = ring.inflight.saturating_sub(n);
    }
    if ring.inflight > 0 {
        // The kernel still owns some buffers: leak them rather than free memory it may write.
        std::mem::forget(conns);
        std::mem::forget(block);
        std::mem::forget(ring);
    }
    result?;
    Ok(WorkerResult {
        hist: st.hist,
        requests: st.requests,
        bytes_read: st.bytes_read,
        bytes_written: st.bytes_written,
        errors: st.errors,
    })
}
