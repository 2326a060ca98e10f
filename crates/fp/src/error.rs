//! Typed errors of the fast-path controller.

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what}: {source}")]
    Bpf {
        what: String,
        source: libbpf_rs::Error,
    },
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error("netlink: {0}")]
    Netlink(String),
    #[error("nftables ruleset: {0}")]
    Nft(String),
    #[error("{0}")]
    Invalid(String),
}

pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn bpf(what: impl Into<String>) -> impl FnOnce(libbpf_rs::Error) -> Error {
    let what = what.into();
    move |source| Error::Bpf { what, source }
}

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}
