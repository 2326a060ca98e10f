//! Typed errors of the load balancer.

use std::io;

#[derive(Debug, thiserror::Error)]
// The cause is part of the message, not a `source`, so a printed chain says it once.
pub enum Error {
    #[error("{what}: {err}")]
    Io { what: String, err: io::Error },
    /// A command or configuration the user gave that cannot be carried out; the message says
    /// what to do.
    #[error("{0}")]
    Invalid(String),
    /// The data path (BPF load, attach, map access).
    #[error("{0}")]
    DataPath(String),
}

pub type Result<T> = std::result::Result<T, Error>;

pub fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let what = what.into();
    move |err| Error::Io { what, err }
}
