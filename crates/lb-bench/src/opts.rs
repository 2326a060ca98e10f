//! What an lb_bench run is asked to do: its lab, its timing and rounds, the rows it runs, and
//! the CPUs it uses; read by the lab, the redis rows and the runner alike.

use std::time::Duration;

use wirespeed_xdpgen::Gen;

/// What to run.
#[derive(Clone, Debug)]
pub struct Opts {
    /// Lab name (namespaces ws-NAME-*).
    pub lab: String,
    pub warmup: Duration,
    pub duration: Duration,
    pub rounds: usize,
    /// Only the rows whose name contains this (`new connections`, `2 CPUs`, `redis`,
    /// `baseline` name the extra parts); none: everything.
    pub only: Option<String>,
    /// The CPU that runs the generator, the path and the sinks.
    pub dut_cpu: usize,
    /// The other CPU (2-CPU scaling; the redis client).
    pub other_cpu: usize,
    /// Distinct 5-tuples cycled through.
    pub flows: usize,
    /// redis-benchmark requests per run (`-n`).
    pub redis_requests: usize,
    /// Full-NAT carries the client address as TOA (the product's default).
    pub toa: bool,
}

impl Opts {
    pub fn new(lab: &str, warmup: Duration, duration: Duration, rounds: usize) -> Opts {
        Opts {
            lab: lab.into(),
            warmup,
            duration,
            rounds: rounds.max(1),
            only: None,
            dut_cpu: 1,
            other_cpu: 0,
            flows: Gen::MAX_FRAMES,
            redis_requests: 200_000,
            toa: true,
        }
    }

    pub(super) fn wanted(&self, name: &str) -> bool {
        self.only.as_deref().is_none_or(|o| name.contains(o))
    }
}
