//! The io_uring engine of the load generator (`Engine::Uring`).
//!
//! Same protocol as every engine ([`Conn`]), but every send, receive and connect is an SQE,
//! and one `io_uring_enter` per loop both submits everything queued since the last one and
//! reaps every completion. With DEFER_TASKRUN the kernel's completion work runs in that same
//! call, so per request the client makes a fraction of a syscall instead of two.
//!
//! Each connection has at most one connect, one send and one receive in flight. The memory
//! the kernel reads and writes (the request block, one receive buffer per connection, the
//! server address) belongs to `wirespeed_sys::socket::SocketRing`, which outlives every
//! operation; a response is copied from there into the connection's `Conn` (a few hundred
//! bytes, against the syscalls saved).

use std::net::Shutdown;
use std::time::Instant;

use socket2::{Domain, Socket, Type};
use wirespeed_sys::socket::{RingCompletion, RingOp, SocketRing};

use crate::conn::{Conn, ResponseParser, Tally, Workload, RECV_BUF};
use crate::worker::{sleep_until, Worker, RECONNECT_BACKOFF, TICK};
use crate::{cpu, Error, Result};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Closed,
    Connecting,
    Open,
}

struct Slot<P> {
    sock: Option<Socket>,
    state: State,
    /// Bytes of the send in flight (0: none).
    sending: usize,
    recv_armed: bool,
    /// Operations of this slot still in the kernel, from this or an earlier connection.
    ops: u32,
    /// Bumped on every reset, so completions of a previous connection are recognized.
    gen: u32,
    conn: Conn<P>,
}

fn ring_error(what: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        what: what.into(),
        source,
    }
}

impl<P: ResponseParser> Slot<P> {
    fn tag(&self) -> u32 {
        self.gen & 0xff_ffff
    }

    fn reset(&mut self, reconnect_at: Instant) {
        if let Some(s) = self.sock.take() {
            // shutdown makes the in-flight operations finish now; the kernel holds its own
            // reference to the file until they do, so closing it here is fine.
            let _ = s.shutdown(Shutdown::Both);
        }
        self.state = State::Closed;
        self.sending = 0;
        self.recv_armed = false;
        self.gen = self.gen.wrapping_add(1);
        self.conn.reset(reconnect_at);
    }

    fn connect(
        &mut self,
        ring: &mut SocketRing,
        domain: Domain,
        idx: usize,
        t: &mut Tally,
        now: Instant,
    ) -> Result<()> {
        // Blocking socket on purpose: io_uring returns EAGAIN for O_NONBLOCK files instead of
        // waiting for readiness itself.
        let Ok(sock) = Socket::new(domain, Type::STREAM.cloexec(), None) else {
            t.error(|e| e.connect += 1);
            self.conn.reconnect_at = now + RECONNECT_BACKOFF;
            return Ok(());
        };
        let _ = sock.set_nodelay(true);
        self.state = State::Connecting;
        self.conn.last_progress = now;
        self.ops += 1;
        ring.connect(&sock, idx, self.tag())
            .map_err(ring_error("io_uring submit"))?;
        self.sock = Some(sock);
        Ok(())
    }

    fn arm_recv(&mut self, ring: &mut SocketRing, idx: usize) -> Result<()> {
        let Some(sock) = self.sock.as_ref().filter(|_| self.state == State::Open) else {
            return Ok(());
        };
        if self.recv_armed {
            return Ok(());
        }
        let room = self.conn.read_space().len();
        ring.recv(sock, idx, room, self.gen & 0xff_ffff)
            .map_err(ring_error("io_uring submit"))?;
        self.recv_armed = true;
        self.ops += 1;
        Ok(())
    }

    fn kick_send(&mut self, ring: &mut SocketRing, work: &Workload, idx: usize) -> Result<()> {
        let Some(sock) = self.sock.as_ref().filter(|_| self.state == State::Open) else {
            return Ok(());
        };
        let range = self.conn.write_range(work);
        if self.sending > 0 || range.is_empty() {
            return Ok(());
        }
        self.sending = range.len();
        ring.send(sock, range, idx, self.gen & 0xff_ffff)
            .map_err(ring_error("io_uring submit"))?;
        self.ops += 1;
        Ok(())
    }

    fn on_completion(
        &mut self,
        ring: &mut SocketRing,
        work: &Workload,
        c: RingCompletion,
        t: &mut Tally,
        now: Instant,
    ) -> Result<()> {
        self.ops = self.ops.saturating_sub(1);
        if c.tag != self.tag() {
            return Ok(()); // a completion of a connection already reset
        }
        let idx = c.slot;
        match c.op {
            RingOp::Connect => {
                if c.result < 0 {
                    t.error(|e| e.connect += 1);
                    self.reset(now + RECONNECT_BACKOFF);
                    return Ok(());
                }
                self.state = State::Open;
                self.conn.last_progress = now;
                self.conn.queue(work, now);
                self.kick_send(ring, work, idx)?;
                self.arm_recv(ring, idx)?;
            }
            RingOp::Send => {
                let sent = self.sending;
                self.sending = 0;
                if c.result <= 0 {
                    t.error(|e| e.write += 1);
                    self.reset(now);
                    return Ok(());
                }
                self.conn.wrote((c.result as usize).min(sent), now, t);
                self.kick_send(ring, work, idx)?;
            }
            RingOp::Recv => {
                self.recv_armed = false;
                if c.result <= 0 {
                    if !(c.result == 0 && self.conn.idle()) {
                        t.error(|e| e.read += 1);
                    }
                    self.reset(now);
                    return Ok(());
                }
                let n = c.result as usize;
                let space = self.conn.read_space();
                match ring.received(idx, n) {
                    Some(data) if data.len() <= space.len() => space[..n].copy_from_slice(data),
                    _ => {
                        t.error(|e| e.read += 1);
                        self.reset(now);
                        return Ok(());
                    }
                }
                if self.conn.received(n, now, t).is_err() {
                    t.error(|e| e.parse += 1);
                    self.reset(now);
                    return Ok(());
                }
                self.conn.queue(work, now);
                self.kick_send(ring, work, idx)?;
                self.arm_recv(ring, idx)?;
            }
        }
        Ok(())
    }
}

pub(crate) fn run_worker<P: ResponseParser>(w: Worker, parser: P) -> Result<Tally> {
    if let Some(c) = w.cpu {
        cpu::pin_current_thread(c)?;
    }
    let work = w.workload();
    let entries = ((w.conn_ids.len() * 3 + 64).next_power_of_two()).clamp(64, 32768) as u32;
    let mut ring = SocketRing::new(
        entries,
        w.conn_ids.len(),
        RECV_BUF,
        work.block().to_vec(),
        w.addr,
    )
    .map_err(ring_error("io_uring setup"))?;
    let domain = Domain::for_address(w.addr);
    let mut slots: Vec<Slot<P>> = w
        .conns(&parser, &work)
        .into_iter()
        .map(|conn| Slot {
            sock: None,
            state: State::Closed,
            sending: 0,
            recv_armed: false,
            ops: 0,
            gen: 0,
            conn,
        })
        .collect();
    let mut t = Tally::default();
    sleep_until(w.start);
    let result = (|| -> Result<()> {
        let mut next_tick = Instant::now();
        loop {
            let now = Instant::now();
            if !w.running(now, &mut t) {
                return Ok(());
            }
            if now >= next_tick {
                for (i, s) in slots.iter_mut().enumerate() {
                    match s.state {
                        State::Closed if now >= s.conn.reconnect_at && s.ops == 0 => {
                            s.connect(&mut ring, domain, i, &mut t, now)?
                        }
                        State::Connecting | State::Open
                            if s.conn.stalled(s.state == State::Connecting, now, w.timeout) =>
                        {
                            t.error(|e| e.timeout += 1);
                            s.reset(now);
                        }
                        _ => {}
                    }
                }
                next_tick = now + TICK;
            }
            let mut wake = w.wake_by(next_tick, &t);
            if work.open_loop {
                for (i, s) in slots.iter_mut().enumerate() {
                    if s.state == State::Open {
                        s.conn.queue(&work, now);
                        s.kick_send(&mut ring, &work, i)?;
                        if let Some(due) = s.conn.next_due(&work) {
                            wake = wake.min(due);
                        }
                    }
                }
            }
            let done = ring
                .submit_and_wait(wake.saturating_duration_since(now))
                .map_err(ring_error("io_uring_enter"))?;
            let now = Instant::now();
            for c in done {
                if let Some(s) = slots.get_mut(c.slot) {
                    s.on_completion(&mut ring, &work, c, &mut t, now)?;
                }
            }
            w.publish(&t);
        }
    })();
    let now = Instant::now();
    for s in slots.iter_mut() {
        s.reset(now);
    }
    // Dropping the ring waits for the operations still in flight.
    drop(ring);
    result?;
    Ok(t)
}
