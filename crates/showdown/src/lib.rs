//! wirespeed-showdown: the seed experiments reproduced on this machine, their results and charts.
//!
//! A `pair` lab per row and round (client namespace <-> server namespace over a veth), the
//! server pinned to CPU 1, the load generator (crates/load) pinned to CPU 0 with 256
//! connections, rows alternating round by round, probes on the server over exactly the
//! measured interval. Results: the table on stdout, results/showdown.{json,md}, and the charts
//! (results/showdown.svg, showdown-echo.svg, showdown-lb.svg, each with its PNG).
//!
//! - [`plan`]: what a showdown is asked to do; [`run`] does it (`runner`);
//! - `rows`: the ladder of rows, each a server, a profile, a workload and its base row;
//!   adding a row means a `Server` variant that knows how to start that server in the server
//!   namespace (`server`) and a `RowSpec` in `ladder`;
//! - `lab_round`, `client`, `server`: one round of one row in the lab, its load and its
//!   server; `lb_rows`: the L4 load balancer's rows 12 and 13, measured by lb_bench's code;
//! - `remote`: `--role server|client`, the same rows between two hosts;
//! - [`results`]: one row per server configuration, its rounds' medians, the Markdown table;
//! - [`chart`]: one SVG chart per family of rows;
//! - [`seed`]: the seeds' own figures, which the results print beside ours.
//!
//! Rows 14-19 scale rows 4 and 7 to 2, 4 and 8 shards, one CPU and one veth queue per shard
//! and as many load generator threads on CPUs of their own; a machine with fewer than twice
//! as many CPUs skips them, saying so.

#![deny(unsafe_code)]

pub mod chart;
mod client;
mod interrupt;
mod lab_round;
mod lb_rows;
pub mod plan;
mod remote;
pub mod results;
mod rows;
mod runner;
pub mod seed;
mod server;

pub use plan::{parse_echo_mtu, Mode, Plan, RoundPlan};
pub use rows::{MODERATION_DEFER_HARD_IRQS, MODERATION_GRO_FLUSH_TIMEOUT_NS};
pub use runner::run;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Invalid(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

pub type Result<T> = std::result::Result<T, Error>;
