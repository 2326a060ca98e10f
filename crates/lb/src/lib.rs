//! wirespeed-lb: an L4 load balancer. Services and real servers as ipvsadm names them
//! ([`model`]), scheduled by Maglev, rr or wrr into lookup tables that an XDP program reads
//! on the packet path. The control plane never takes a lock the packet path waits on: it
//! writes whole tables and the program reads them.
#![deny(unsafe_code)]

pub mod datapath;
pub mod error;
pub mod model;

pub use error::{Error, Result};

#[allow(clippy::all, missing_docs, unused, unsafe_code, unsafe_op_in_unsafe_fn)]
pub mod bpf {
    include!(concat!(env!("OUT_DIR"), "/lb.skel.rs"));
    include!(concat!(env!("OUT_DIR"), "/lb_map_types.rs"));
}
