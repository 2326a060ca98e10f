//! HTTP/1.1 for wirespeed.
//!
//! - [`codec`]: request parsing and response writing over byte buffers. Pure code: no I/O, no
//!   allocation per request, no panic on any input.
//! - [`date`]: the `Date` header, formatted once a second per shard rather than per response.
//! - [`server`]: the connection loop used by `wirespeed serve http`, written against the
//!   stack-independent socket API.
//! - [`shard`]: what one shard of `wirespeed serve` runs (accept loop, HTTP or echo per
//!   connection, its summary).
//! - [`metrics`]: every shard's counters, and `--metrics`: `/metrics` served by a task on
//!   shard 0 that reads them.

#![forbid(unsafe_code)]

pub mod codec;
pub mod date;
pub mod metrics;
pub mod server;
pub mod shard;
