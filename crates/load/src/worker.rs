//! One thread's share of a kernel-stack load run, as the epoll and io_uring engines get it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::conn::{Conn, ResponseParser, Tally, Workload};

/// How often an engine looks for stalled connections and reconnects closed ones.
pub(crate) const TICK: Duration = Duration::from_millis(10);
/// How long a connection that failed to open waits before the next attempt.
pub(crate) const RECONNECT_BACKOFF: Duration = Duration::from_millis(10);

/// A counter on its own cache line, written by one thread and read by the live line.
#[repr(align(64))]
pub(crate) struct PaddedCounter(pub(crate) AtomicU64);

pub(crate) struct Worker {
    pub(crate) addr: SocketAddr,
    /// The connections of this thread, by their index in the whole run.
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

impl Worker {
    pub(crate) fn workload(&self) -> Workload {
        Workload::new(&self.request, self.depth, self.rate.is_some())
    }

    /// One [`Conn`] per connection of this thread; in the open loop their schedules are
    /// spread evenly over one interval.
    pub(crate) fn conns<P: ResponseParser>(&self, parser: &P, w: &Workload) -> Vec<Conn<P>> {
        let interval = self.rate.map_or(Duration::ZERO, |r| {
            Duration::from_secs_f64(self.total_conns as f64 / r)
        });
        self.conn_ids
            .iter()
            .map(|&id| {
                let first_due = self.start
                    + self
                        .rate
                        .map_or(Duration::ZERO, |r| Duration::from_secs_f64(id as f64 / r));
                Conn::new(parser.clone(), w, self.start, first_due, interval)
            })
            .collect()
    }

    /// Moves `t` into the measured phase when it begins; false once the run is over (or
    /// another thread failed).
    pub(crate) fn running(&self, now: Instant, t: &mut Tally) -> bool {
        if !t.measuring() && now >= self.measure_at && now < self.end_at {
            t.start_measuring();
        }
        now < self.end_at && !self.abort.load(Ordering::Relaxed)
    }

    /// The earliest moment the loop must look again, given its next tick.
    pub(crate) fn wake_by(&self, next_tick: Instant, t: &Tally) -> Instant {
        let wake = next_tick.min(self.end_at);
        if t.measuring() {
            wake
        } else {
            wake.min(self.measure_at)
        }
    }

    /// Publishes the responses so far for the live line.
    pub(crate) fn publish(&self, t: &Tally) {
        self.counters[self.index]
            .0
            .store(t.completed_total, Ordering::Relaxed);
    }
}

/// Sleeps the thread until `t` (at once if it has passed).
pub(crate) fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}
