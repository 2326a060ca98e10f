//! wirespeed-fp-lab: the fast path's test tooling, kept out of `wirespeed-fp`'s API: the
//! `line` lab with a daemon in it, and the differential harness (`harness`: the same frames
//! through Linux alone and through Linux plus the fast path), its frames from
//! `wirespeed-testkit`. Its tests/ hold fp's integration tests; its examples/ hold
//! `fp_bench`, which measures with the in-kernel traffic generator of
//! `wirespeed_xdpgen`.
#![deny(unsafe_code)]

pub mod harness;
pub mod line;
