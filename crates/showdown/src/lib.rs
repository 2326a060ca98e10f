//! wirespeed-showdown: the seed experiments reproduced on this machine, their results and charts.
//!
//! - [`results`]: one row per server configuration, its rounds' medians, the Markdown table;
//! - [`chart`]: one SVG chart per family of rows;
//! - [`seed`]: the seeds' own figures, which the results print beside ours.

#![deny(unsafe_code)]

pub mod chart;
pub mod results;
pub mod seed;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Invalid(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

pub type Result<T> = std::result::Result<T, Error>;
