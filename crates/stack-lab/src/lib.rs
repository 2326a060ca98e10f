//! wirespeed-stack-lab: the differential conformance harness of the bypass TCP/IP stack.
//! Crafted frames go to our stack (`wirespeed serve http --stack xdp`) in one lab
//! twin and to Linux in an identical other twin; the replies are normalized and compared
//! field by field (docs/TCPIP.md, "Conformance against Linux").
//!
//! - `craft`: the test kit's raw frame builder (malformed frames included, TCP flags written
//!   as tcpdump writes them) and the twins' addresses;
//! - `cases`: cases generated from a seed, a module per class; `cases::flow` drives a
//!   connection into a state (the harness does the handshake itself) before its edge segment;
//! - `twin`, `responder`: the two labs, and twin B's application on Linux's own TCP;
//! - `side`: one twin's injection, ARP and neighbour solicitation answering and capture
//!   (AF_PACKET on the peer end);
//! - `normalize`, `compare`: replies as named fields, and their differences;
//! - `known`: the one table of accepted differences and known stack gaps;
//! - `run`, `report`: a whole run, its verdict lines, summary and JSON;
//! - `serve`: a `wirespeed serve` process in a lab namespace;
//! - `flood`: the SYN flood, our stack and Linux's side by side (the `syn_flood` example).
//!
//! The command line is the `conformance` example; `crates/wirespeed/tests/conformance.rs`
//! runs it in `make test`.
#![deny(unsafe_code)]

pub mod cases;
pub mod compare;
pub mod craft;
pub mod flood;
pub mod known;
pub mod normalize;
pub mod report;
pub mod responder;
pub mod run;
pub mod serve;
pub mod side;
pub mod twin;

pub use report::Report;
pub use run::{run, Options};

/// Why a run could not be made (as opposed to a run that found differences).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The twins could not be built or started.
    #[error("setting up the twins: {0}")]
    Setup(String),
    /// A twin did not answer the plain SYN and echo that every case relies on.
    #[error("preflight: {0}")]
    Preflight(String),
    #[error("{0}")]
    Io(String),
}
