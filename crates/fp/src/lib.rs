//! wirespeed-fp: the transparent fast path. Kernel networking state in (netlink, nftables),
//! a specialized XDP program per interface out, the kernel as the slow path for the rest.
#![deny(unsafe_code)]

pub mod apply;
pub mod classify;
pub mod counters;
pub mod daemon;
pub mod error;
pub mod expr;
pub mod features;
pub mod filter;
pub mod genl;
pub mod kernel;
pub mod loader;
pub mod metrics;
pub mod model;
pub mod netlink;
pub mod nftevent;
pub mod reconcile;
pub mod routes;
pub mod rules;
pub mod ruleset;
pub mod status;
pub mod watch;
pub mod xt;

pub use error::{Error, Result};

#[allow(clippy::all, missing_docs, unused, unsafe_code, unsafe_op_in_unsafe_fn)]
pub mod bpf {
    include!(concat!(env!("OUT_DIR"), "/fp.skel.rs"));
    include!(concat!(env!("OUT_DIR"), "/fp_map_types.rs"));
}
