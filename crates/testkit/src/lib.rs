//! wirespeed-testkit: the one test kit (frame builders, independent checksum verifier, shared fixtures) that every test uses.
#![forbid(unsafe_code)]

pub mod craft;
pub mod csum;
pub mod frame;
pub mod lb_lab;
pub mod netns;
pub mod parse;
pub mod rng;
pub mod wait;
