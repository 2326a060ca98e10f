//! wirespeed-lb: an L4 load balancer. Services and real servers as ipvsadm names them
//! ([`model`]), scheduled by Maglev, rr or wrr ([`maglev`], [`sched`]) into lookup tables over
//! stable real-server slots ([`plan`]) that an XDP program reads on the packet path. The
//! control plane never takes a lock the packet path waits on: it writes whole table entries
//! and the program reads them.
#![deny(unsafe_code)]

pub mod error;
pub mod maglev;
pub mod model;
pub mod plan;
pub mod sched;

pub use error::{Error, Result};
