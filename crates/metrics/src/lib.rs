//! wirespeed-metrics: what `--metrics ADDR:PORT` serves, shared by `fp run`, `lb run` and
//! `serve`. A leaf crate (std and httparse only), so every daemon's crate may use it.
//!
//! - [`text`]: the Prometheus text format 0.0.4: HELP and TYPE lines, label escaping,
//!   histograms with `_bucket{le=..}`, `_sum` and `_count`.
//! - [`counter`]: a counter written by one thread (a shard) with plain relaxed stores and read
//!   by another at scrape time, and the sum of several.
//! - [`request`]: the minimal HTTP/1.1 request reader and the responses (`GET`/`HEAD
//!   /metrics`, 404 for other paths).
//! - [`endpoint`]: a non-blocking listener that a daemon's own loop polls (fp, lb): no thread.
#![forbid(unsafe_code)]

pub mod counter;
pub mod endpoint;
pub mod request;
pub mod text;

pub use counter::Counter;
pub use endpoint::Endpoint;
pub use text::{Histogram, Kind, Writer};
