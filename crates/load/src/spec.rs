//! What a load run is asked to do ([`LoadSpec`]) and what it measured ([`LoadResult`]).

use std::net::SocketAddr;
use std::sync::atomic::AtomicU8;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::hist::LatencyHist;

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
