//! wirespeed-fp: the transparent fast path. Kernel networking state in (netlink, nftables),
//! a specialized XDP program per interface out, the kernel as the slow path for the rest.

pub mod apply;
pub mod counters;
pub mod daemon;
pub mod error;
pub mod features;
pub mod filter;
pub mod gen;
pub mod genl;
pub mod harness;
pub mod kernel;
pub mod loader;
pub mod model;
pub mod netlink;
pub mod nftevent;
pub mod nftlib;
pub mod pkt;
pub mod reconcile;
pub mod ruleset;
pub mod status;
pub mod watch;

pub use error::{Error, Result};

#[allow(clippy::all, missing_docs, unused, unsafe_op_in_unsafe_fn)]
pub mod bpf {
    include!(concat!(env!("OUT_DIR"), "/fp.skel.rs"));
}

#[allow(clippy::all, missing_docs, unused, unsafe_op_in_unsafe_fn)]
pub mod gen_bpf {
    include!(concat!(env!("OUT_DIR"), "/gen.skel.rs"));
}
