//! wirespeed-fp-lab: the fast path's test tooling, kept out of `wirespeed-fp`'s API. Frame
//! builders (`pkt`), the differential harness (`harness`: the same frames through Linux alone
//! and through Linux plus the fast path), and the in-kernel traffic generator (`gen`). Its
//! tests/ hold fp's integration tests; its examples/ hold `fp_bench`.
#![deny(unsafe_code)]

pub mod gen;
pub mod harness;
pub mod pkt;

#[allow(clippy::all, missing_docs, unused, unsafe_code, unsafe_op_in_unsafe_fn)]
pub mod gen_bpf {
    include!(concat!(env!("OUT_DIR"), "/gen.skel.rs"));
}
