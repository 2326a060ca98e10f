//! The epoll engine of the load generator (`Engine::Epoll`).
//!
//! One edge-level epoll loop per thread over non-blocking sockets: per request the steady
//! state costs one `recv` and one `send`, plus a share of one `epoll_pwait2`. The protocol
//! (what to send, what a response is, what counts) is [`Conn`]'s; this file only moves bytes.

use std::io::{self, Read};
use std::time::{Duration, Instant};

use socket2::{Domain, SockAddr, Socket, Type};
use wirespeed_sys::epoll::{epoll_event, Epoll};

use crate::conn::{Conn, ResponseParser, Tally, Workload};
use crate::spec::Errors;
use crate::worker::{sleep_until, Worker, RECONNECT_BACKOFF, TICK};
use crate::{cpu, Error, Result};

const IN: u32 = libc::EPOLLIN as u32;
const OUT: u32 = libc::EPOLLOUT as u32;
const ERR: u32 = libc::EPOLLERR as u32;
const HUP: u32 = libc::EPOLLHUP as u32;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Closed,
    Connecting,
    Open,
}

struct Slot<P> {
    sock: Option<Socket>,
    state: State,
    /// Registered for EPOLLOUT (a send met a full buffer).
    want_out: bool,
    conn: Conn<P>,
}

/// What a slot's handlers share.
struct Ctx<'a> {
    ep: &'a Epoll,
    work: &'a Workload,
    addr: &'a SockAddr,
    t: &'a mut Tally,
}

pub(crate) fn run_worker<P: ResponseParser>(w: Worker, parser: P) -> Result<Tally> {
    if let Some(c) = w.cpu {
        cpu::pin_current_thread(c)?;
    }
    let ep = Epoll::new().map_err(|source| Error::Io {
        what: "epoll_create1".into(),
        source,
    })?;
    let work = w.workload();
    let addr = SockAddr::from(w.addr);
    let mut slots: Vec<Slot<P>> = w
        .conns(&parser, &work)
        .into_iter()
        .map(|conn| Slot {
            sock: None,
            state: State::Closed,
            want_out: false,
            conn,
        })
        .collect();
    let mut t = Tally::default();
    sleep_until(w.start);
    let mut events = vec![epoll_event(); 256];
    let mut next_tick = Instant::now();
    loop {
        let now = Instant::now();
        if !w.running(now, &mut t) {
            break;
        }
        let mut cx = Ctx {
            ep: &ep,
            work: &work,
            addr: &addr,
            t: &mut t,
        };
        if now >= next_tick {
            for (i, s) in slots.iter_mut().enumerate() {
                s.housekeep(&mut cx, i, now, w.timeout);
            }
            next_tick = now + TICK;
        }
        let mut wake = w.wake_by(next_tick, cx.t);
        if work.open_loop {
            for (i, s) in slots.iter_mut().enumerate() {
                if s.state == State::Open {
                    if s.conn.queue(&work, now) {
                        s.flush(&mut cx, i, now);
                    }
                    if let Some(due) = s.conn.next_due(&work) {
                        wake = wake.min(due);
                    }
                }
            }
        }
        let n = ep
            .wait(&mut events, Some(wake.saturating_duration_since(now)))
            .map_err(|source| Error::Io {
                what: "epoll_pwait2".into(),
                source,
            })?;
        let now = Instant::now();
        for ev in &events[..n] {
            let (idx, flags) = (ev.u64 as usize, ev.events);
            if let Some(s) = slots.get_mut(idx) {
                s.on_event(&mut cx, idx, flags, now);
            }
        }
        w.publish(&t);
    }
    let now = Instant::now();
    for s in slots.iter_mut() {
        s.close(now);
    }
    Ok(t)
}

impl<P: ResponseParser> Slot<P> {
    /// Closes the socket (which also takes it out of epoll) and forgets its exchange.
    fn close(&mut self, reconnect_at: Instant) {
        self.sock = None;
        self.state = State::Closed;
        self.want_out = false;
        self.conn.reset(reconnect_at);
    }

    fn fail(&mut self, t: &mut Tally, reconnect_at: Instant, kind: impl FnOnce(&mut Errors)) {
        t.error(kind);
        self.close(reconnect_at);
    }

    fn connect(&mut self, cx: &mut Ctx, idx: usize, now: Instant) {
        let sock = match Socket::new(
            Domain::for_address(cx.addr.as_socket().expect("an IP address")),
            Type::STREAM.nonblocking().cloexec(),
            None,
        ) {
            Ok(s) => s,
            Err(_) => {
                cx.t.error(|e| e.connect += 1);
                self.conn.reconnect_at = now + RECONNECT_BACKOFF;
                return;
            }
        };
        let _ = sock.set_nodelay(true);
        let started = match sock.connect(cx.addr) {
            Ok(()) => true,
            Err(e) => e.raw_os_error() == Some(libc::EINPROGRESS),
        };
        self.conn.last_progress = now;
        // A connect that completed at once is finished on the first EPOLLOUT, like the rest.
        let registered = started && cx.ep.add(&sock, IN | OUT, idx as u64).is_ok();
        self.sock = Some(sock);
        self.state = State::Connecting;
        if !registered {
            self.fail(cx.t, now + RECONNECT_BACKOFF, |e| e.connect += 1);
        }
    }

    fn housekeep(&mut self, cx: &mut Ctx, idx: usize, now: Instant, timeout: Duration) {
        match self.state {
            State::Closed => {
                if now >= self.conn.reconnect_at {
                    self.connect(cx, idx, now);
                }
            }
            State::Connecting | State::Open => {
                if self
                    .conn
                    .stalled(self.state == State::Connecting, now, timeout)
                {
                    self.fail(cx.t, now, |e| e.timeout += 1);
                }
            }
        }
    }

    fn on_event(&mut self, cx: &mut Ctx, idx: usize, flags: u32, now: Instant) {
        match self.state {
            State::Closed => {}
            State::Connecting => {
                if flags & (OUT | ERR | HUP) == 0 {
                    return;
                }
                let sock = self.sock.as_ref().expect("a connecting slot has a socket");
                let connected = flags & ERR == 0 && matches!(sock.take_error(), Ok(None));
                if !connected || cx.ep.modify(sock, IN, idx as u64).is_err() {
                    self.fail(cx.t, now + RECONNECT_BACKOFF, |e| e.connect += 1);
                    return;
                }
                self.state = State::Open;
                self.conn.last_progress = now;
                self.conn.queue(cx.work, now);
                self.flush(cx, idx, now);
            }
            State::Open => {
                if flags & (IN | ERR | HUP) != 0 {
                    self.on_readable(cx, idx, now);
                }
                if self.state == State::Open && flags & OUT != 0 {
                    self.flush(cx, idx, now);
                }
            }
        }
    }

    fn on_readable(&mut self, cx: &mut Ctx, idx: usize, now: Instant) {
        let Some(sock) = self.sock.as_ref() else {
            return;
        };
        loop {
            let space = self.conn.read_space();
            let room = space.len();
            match (&*sock).read(space) {
                Ok(0) => {
                    if self.conn.idle() {
                        self.close(now);
                    } else {
                        self.fail(cx.t, now, |e| e.read += 1);
                    }
                    return;
                }
                Ok(n) => {
                    if self.conn.received(n, now, cx.t).is_err() {
                        self.fail(cx.t, now, |e| e.parse += 1);
                        return;
                    }
                    if n < room {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.fail(cx.t, now, |e| e.read += 1);
                    return;
                }
            }
        }
        if self.conn.queue(cx.work, now) {
            self.flush(cx, idx, now);
        }
    }

    fn flush(&mut self, cx: &mut Ctx, idx: usize, now: Instant) {
        let Some(sock) = self.sock.as_ref() else {
            return;
        };
        loop {
            let bytes = self.conn.to_write(cx.work);
            if bytes.is_empty() {
                break;
            }
            match sock.send_with_flags(bytes, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) {
                Ok(n) if n > 0 => self.conn.wrote(n, now, cx.t),
                Ok(_) => return self.want_writable(cx, idx, now),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return self.want_writable(cx, idx, now)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return self.fail(cx.t, now, |e| e.write += 1),
            }
        }
        if self.want_out {
            self.want_out = false;
            let ok = self
                .sock
                .as_ref()
                .is_some_and(|s| cx.ep.modify(s, IN, idx as u64).is_ok());
            if !ok {
                self.fail(cx.t, now, |e| e.write += 1);
            }
        }
    }

    /// The send buffer is full: wait for EPOLLOUT.
    fn want_writable(&mut self, cx: &mut Ctx, idx: usize, now: Instant) {
        if self.want_out {
            return;
        }
        self.want_out = true;
        let ok = self
            .sock
            .as_ref()
            .is_some_and(|s| cx.ep.modify(s, IN | OUT, idx as u64).is_ok());
        if !ok {
            self.fail(cx.t, now, |e| e.write += 1);
        }
    }
}
