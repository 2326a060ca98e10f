//! wirespeed-lb: an L4 load balancer. Services and real servers as ipvsadm names them
//! ([`model`]), scheduled by Maglev, rr or wrr ([`maglev`], [`sched`]) into lookup tables over
//! stable real-server slots ([`plan`]) that an XDP program reads on the packet path. The
//! control plane never takes a lock the packet path waits on: it writes whole table entries
//! and the program reads them.
#![deny(unsafe_code)]

pub mod control;
pub mod daemon;
pub mod datapath;
pub mod decap;
pub mod doctor;
pub mod error;
pub mod health;
pub mod ipvsadm;
pub mod listing;
pub mod maglev;
pub mod metrics;
pub mod model;
pub mod plan;
pub mod sched;
pub mod table;

pub use error::{Error, Result};

#[allow(clippy::all, missing_docs, unused, unsafe_code, unsafe_op_in_unsafe_fn)]
pub mod bpf {
    include!(concat!(env!("OUT_DIR"), "/lb.skel.rs"));
    include!(concat!(env!("OUT_DIR"), "/lb_map_types.rs"));
}
