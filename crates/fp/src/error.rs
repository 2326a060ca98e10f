//! Typed errors of the fast-path controller.

use std::io;

#[derive(Debug, thiserror::Error)]
// The cause is part of the message, not a `source`, so a printed chain says it once.
pub enum Error {
    #[error("{what}: {err}")]
    Bpf { what: String, err: libbpf_rs::Error },
    #[error("{what}: {err}")]
    Io { what: String, err: io::Error },
    #[error("netlink: {0}")]
    Netlink(String),
    #[error("nftables ruleset: {0}")]
    Nft(String),
    #[error("{0}")]
    Invalid(String),
    /// A program bound to its device (it asks the driver for VLAN tags) attaches natively or
    /// not at all; the driver refused (a veth whose peer's MTU is past what a program without
    /// multi-buffer support takes).
    #[error("attach XDP natively to ifindex {ifindex} (a device-bound program has no generic mode): {err}")]
    NativeXdpRefused { ifindex: u32, err: io::Error },
}

pub type Result<T> = std::result::Result<T, Error>;

impl From<wirespeed_netlink::Error> for Error {
    fn from(e: wirespeed_netlink::Error) -> Error {
        match e {
            wirespeed_netlink::Error::Io { what, err } => Error::Io { what, err },
            wirespeed_netlink::Error::Refused { request, err } => {
                Error::Netlink(format!("request {request} failed: {err}"))
            }
            wirespeed_netlink::Error::Netlink(what) => Error::Netlink(what),
        }
    }
}

pub(crate) fn bpf(what: impl Into<String>) -> impl FnOnce(libbpf_rs::Error) -> Error {
    let what = what.into();
    move |err| Error::Bpf { what, err }
}

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let what = what.into();
    move |err| Error::Io { what, err }
}
