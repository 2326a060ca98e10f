//! One connection of the load, without I/O, and the one accounting type of every engine.
//!
//! [`Conn`] is a connection's protocol state: which request bytes go out next (a slice of one
//! pre-serialized block, so pipelined or partially written requests are never copied), the
//! buffer responses arrive in, the resumable parser, and the start time of every request in
//! flight. An engine only moves bytes: it writes [`Conn::to_write`] and reports
//! [`Conn::wrote`], reads into [`Conn::read_space`] and reports [`Conn::received`]. Every
//! count goes into a [`Tally`] (requests, bytes, errors by kind, the latency histogram), which
//! counts only while the measured phase runs.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::hist::LatencyHist;
use crate::spec::Errors;

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

/// Bytes of response a connection buffers (a response head must fit).
pub(crate) const RECV_BUF: usize = 64 * 1024;

/// What every connection of one engine instance sends: the request repeated `depth + 1`
/// times, so any `depth` requests starting at any offset are one contiguous slice.
pub(crate) struct Workload {
    block: Vec<u8>,
    req_len: usize,
    pub(crate) depth: usize,
    /// Open loop: each connection sends on a schedule instead of after each response.
    pub(crate) open_loop: bool,
}

impl Workload {
    /// The request, `depth + 1` times.
    pub(crate) fn block(&self) -> &[u8] {
        &self.block
    }

    pub(crate) fn new(request: &[u8], depth: usize, open_loop: bool) -> Workload {
        let mut block = Vec::with_capacity(request.len() * (depth + 1));
        for _ in 0..=depth {
            block.extend_from_slice(request);
        }
        Workload {
            block,
            req_len: request.len(),
            depth,
            open_loop,
        }
    }
}

/// Counts of one engine instance (a thread, or a bypass shard), kept only while measuring.
#[derive(Default)]
pub(crate) struct Tally {
    measuring: bool,
    pub(crate) hist: LatencyHist,
    pub(crate) requests: u64,
    /// Responses since the start, warm-up included (for the live line).
    pub(crate) completed_total: u64,
    pub(crate) bytes_read: u64,
    pub(crate) bytes_written: u64,
    pub(crate) errors: Errors,
}

impl Tally {
    /// The measured phase begins: forget the warm-up's counts.
    pub(crate) fn start_measuring(&mut self) {
        let completed_total = self.completed_total;
        *self = Tally {
            measuring: true,
            completed_total,
            ..Tally::default()
        };
    }

    /// The measured phase is over: nothing more counts.
    pub(crate) fn stop_measuring(&mut self) {
        self.measuring = false;
    }

    pub(crate) fn measuring(&self) -> bool {
        self.measuring
    }

    /// Counts an error of the kind `f` picks.
    pub(crate) fn error(&mut self, f: impl FnOnce(&mut Errors)) {
        if self.measuring {
            f(&mut self.errors);
        }
    }

    fn response(&mut self, outcome: Outcome, started: Instant, now: Instant) {
        self.completed_total += 1;
        if self.measuring {
            self.hist
                .record_ns(now.saturating_duration_since(started).as_nanos() as u64);
            self.requests += 1;
            if outcome == Outcome::Non2xx {
                self.errors.non2xx += 1;
            }
        }
    }

    /// Adds another instance's counts.
    pub(crate) fn merge(&mut self, o: &Tally) {
        self.hist.merge(&o.hist);
        self.requests += o.requests;
        self.completed_total += o.completed_total;
        self.bytes_read += o.bytes_read;
        self.bytes_written += o.bytes_written;
        self.errors.add(&o.errors);
    }
}

/// The response stream broke: count a parse error and reset the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Malformed;

/// One connection's protocol state. It outlives its sockets: an engine calls [`Conn::reset`]
/// when it closes one and keeps the state (and its buffer) for the next.
pub(crate) struct Conn<P> {
    parser: P,
    buf: Box<[u8]>,
    len: usize,
    /// Start times of the requests in flight, oldest first (intended times in the open loop).
    sent_at: VecDeque<Instant>,
    /// Request bytes queued and not yet written.
    unwritten: usize,
    /// When bytes last moved (for the stall timeout).
    pub(crate) last_progress: Instant,
    /// When to open the next socket after a close.
    pub(crate) reconnect_at: Instant,
    /// Open loop: when the next request is due, and the schedule's period.
    next_due: Instant,
    interval: Duration,
}

impl<P: ResponseParser> Conn<P> {
    /// `first_due` and `interval` are the open loop's schedule (unused in the closed loop).
    pub(crate) fn new(
        parser: P,
        w: &Workload,
        start: Instant,
        first_due: Instant,
        interval: Duration,
    ) -> Conn<P> {
        Conn {
            parser,
            buf: vec![0u8; RECV_BUF].into_boxed_slice(),
            len: 0,
            sent_at: VecDeque::with_capacity(w.depth),
            unwritten: 0,
            last_progress: start,
            reconnect_at: start,
            next_due: first_due,
            interval,
        }
    }

    /// Forgets the closed socket's exchange; the next socket may open at `reconnect_at`.
    pub(crate) fn reset(&mut self, reconnect_at: Instant) {
        self.len = 0;
        self.sent_at.clear();
        self.unwritten = 0;
        self.parser.reset();
        self.reconnect_at = reconnect_at;
    }

    /// The socket is connected (or a response arrived): queue what may be sent now. Closed
    /// loop: top up to `depth` requests in flight, started now. Open loop: every request due.
    /// Returns whether anything was queued.
    pub(crate) fn queue(&mut self, w: &Workload, now: Instant) -> bool {
        let before = self.sent_at.len();
        if w.open_loop {
            while self.sent_at.len() < w.depth && self.next_due <= now {
                self.sent_at.push_back(self.next_due);
                self.next_due += self.interval;
            }
        } else {
            while self.sent_at.len() < w.depth {
                self.sent_at.push_back(now);
            }
        }
        let queued = self.sent_at.len() - before;
        self.unwritten += queued * w.req_len;
        queued > 0
    }

    /// Open loop: when this connection next has a request due, if it has room for one.
    pub(crate) fn next_due(&self, w: &Workload) -> Option<Instant> {
        (w.open_loop && self.sent_at.len() < w.depth).then_some(self.next_due)
    }

    /// Where in [`Workload::block`] the bytes to write next are (empty when nothing is
    /// queued).
    pub(crate) fn write_range(&self, w: &Workload) -> std::ops::Range<usize> {
        if self.unwritten == 0 {
            return 0..0;
        }
        let phase = (w.req_len - self.unwritten % w.req_len) % w.req_len;
        let n = self.unwritten.min(w.block.len() - phase);
        phase..phase + n
    }

    /// The request bytes to write next (empty when nothing is queued).
    pub(crate) fn to_write<'w>(&self, w: &'w Workload) -> &'w [u8] {
        &w.block[self.write_range(w)]
    }

    /// `n` bytes of [`Conn::to_write`] went out.
    pub(crate) fn wrote(&mut self, n: usize, now: Instant, t: &mut Tally) {
        let n = n.min(self.unwritten);
        self.unwritten -= n;
        if t.measuring {
            t.bytes_written += n as u64;
        }
        self.last_progress = now;
    }

    /// The free part of the receive buffer.
    pub(crate) fn read_space(&mut self) -> &mut [u8] {
        &mut self.buf[self.len..]
    }

    /// `n` bytes arrived in [`Conn::read_space`]: consumes every complete response.
    pub(crate) fn received(
        &mut self,
        n: usize,
        now: Instant,
        t: &mut Tally,
    ) -> Result<(), Malformed> {
        self.len += n;
        if t.measuring {
            t.bytes_read += n as u64;
        }
        self.last_progress = now;
        let mut pos = 0;
        while pos < self.len {
            let p = self
                .parser
                .advance(&self.buf[pos..self.len])
                .map_err(|_| Malformed)?;
            pos += p.consumed;
            if let Some(outcome) = p.done {
                let started = self.sent_at.pop_front().ok_or(Malformed)?;
                t.response(outcome, started, now);
            } else if p.consumed == 0 {
                break;
            }
        }
        if pos > 0 {
            self.buf.copy_within(pos..self.len, 0);
            self.len -= pos;
        } else if self.len == self.buf.len() {
            // A response head larger than the whole buffer.
            return Err(Malformed);
        }
        Ok(())
    }

    /// The peer closed with nothing outstanding: the server ending keep-alive, not an error.
    pub(crate) fn idle(&self) -> bool {
        self.sent_at.is_empty() && self.len == 0
    }

    /// Whether a connection waiting for the peer (connecting, or with requests in flight) has
    /// made no progress for longer than `timeout`.
    pub(crate) fn stalled(&self, connecting: bool, now: Instant, timeout: Duration) -> bool {
        (connecting || !self.sent_at.is_empty())
            && now.saturating_duration_since(self.last_progress) > timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::HttpParser;

    const RESP: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";

    #[test]
    fn a_pipelined_exchange_counts_each_response_once() {
        let w = Workload::new(b"GET / HTTP/1.1\r\n\r\n", 2, false);
        let t0 = Instant::now();
        let mut c = Conn::new(HttpParser::default(), &w, t0, t0, Duration::ZERO);
        let mut t = Tally::default();
        t.start_measuring();
        assert!(c.queue(&w, t0));
        assert_eq!(c.to_write(&w).len(), 2 * 18);
        c.wrote(20, t0, &mut t);
        assert_eq!(c.to_write(&w).len(), 16, "the rest of the second request");
        c.wrote(16, t0, &mut t);
        assert!(c.to_write(&w).is_empty());
        let both = [RESP, RESP].concat();
        let (first, second) = both.split_at(50);
        c.read_space()[..first.len()].copy_from_slice(first);
        c.received(first.len(), t0, &mut t).unwrap();
        assert_eq!(t.requests, 1);
        c.read_space()[..second.len()].copy_from_slice(second);
        c.received(second.len(), t0, &mut t).unwrap();
        assert_eq!((t.requests, t.bytes_read, t.bytes_written), (2, 80, 36));
        assert!(c.idle());
        assert!(c.queue(&w, t0), "closed loop tops up again");
    }

    #[test]
    fn a_response_nobody_asked_for_is_malformed() {
        let w = Workload::new(b"x", 1, false);
        let t0 = Instant::now();
        let mut c = Conn::new(HttpParser::default(), &w, t0, t0, Duration::ZERO);
        let mut t = Tally::default();
        c.read_space()[..RESP.len()].copy_from_slice(RESP);
        assert_eq!(c.received(RESP.len(), t0, &mut t), Err(Malformed));
    }

    #[test]
    fn nothing_counts_outside_the_measured_phase() {
        let w = Workload::new(b"x", 1, false);
        let t0 = Instant::now();
        let mut c = Conn::new(HttpParser::default(), &w, t0, t0, Duration::ZERO);
        let mut t = Tally::default();
        c.queue(&w, t0);
        c.wrote(1, t0, &mut t);
        t.error(|e| e.read += 1);
        c.read_space()[..RESP.len()].copy_from_slice(RESP);
        c.received(RESP.len(), t0, &mut t).unwrap();
        assert_eq!((t.requests, t.completed_total, t.errors.total()), (0, 1, 0));
        assert_eq!((t.bytes_read, t.bytes_written), (0, 0));
    }
}
