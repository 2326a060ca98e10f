//! The runtime's one error type: starting shards, and the system calls around them.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no CPUs selected")]
    NoCpus,
    #[error("CPU {cpu} is not available to this process (allowed: {allowed:?}); pick CPUs from that list")]
    CpuNotAllowed { cpu: usize, allowed: Vec<usize> },
    #[error("shard {shard} on CPU {cpu} could not start: {err}")]
    ShardStart {
        shard: usize,
        cpu: usize,
        err: std::io::Error,
    },
    #[error("shard {0} panicked")]
    ShardPanicked(usize),
    #[error("{what}: {err}")]
    Io {
        what: &'static str,
        err: std::io::Error,
    },
}
