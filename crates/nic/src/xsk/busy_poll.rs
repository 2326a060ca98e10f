//! Busy polling an AF_XDP socket's queue (`SO_BUSY_POLL`, `SO_PREFER_BUSY_POLL`,
//! `SO_BUSY_POLL_BUDGET`): the socket's wakeup syscalls then run the queue's NAPI in the
//! caller's thread, instead of its interrupt or NAPI thread.
//!
//! The kernel finds that NAPI by the socket's NAPI ID, and does nothing without one. Since
//! Linux 6.13 (`napi_config` assigns the ID only when the NAPI is enabled, and the fix,
//! "xsk: Bring back busy polling support", sets it at bind) a socket gets one at bind, and only
//! in zero-copy mode, from the driver's link of the queue to its NAPI. A copy-mode socket never
//! gets one: on those kernels busy polling it cannot work, and each wakeup syscall made for it
//! would be wasted. Before 6.13 the ID came with the first received frame, in either mode.
//! `busy_poll_impossible` says which case a socket is in, after bind; the socket then makes no
//! wakeup calls for busy polling, and `serve` says why on its listening line.

use std::os::fd::RawFd;

use super::config::BusyPoll;
use super::XskSocket;
use crate::{Error, Result};
use wirespeed_sys::socket::{int_option, set_int_option};

/// Sets the busy-poll options; returns the names of those the kernel refused (an error instead
/// when `bp.required`).
pub(super) fn set_options(fd: RawFd, bp: &BusyPoll) -> Result<Vec<&'static str>> {
    let mut missing = Vec::new();
    let opts: [(&'static str, libc::c_int, libc::c_int); 3] = [
        ("SO_PREFER_BUSY_POLL", libc::SO_PREFER_BUSY_POLL, 1),
        ("SO_BUSY_POLL", libc::SO_BUSY_POLL, bp.usecs as libc::c_int),
        (
            "SO_BUSY_POLL_BUDGET",
            libc::SO_BUSY_POLL_BUDGET,
            libc::c_int::from(bp.budget),
        ),
    ];
    for (name, opt, value) in opts {
        if let Err(source) = set_int_option(&fd, libc::SOL_SOCKET, opt, value) {
            if bp.required {
                return Err(Error::Os {
                    what: format!("set {name}"),
                    err: source,
                });
            }
            missing.push(name);
        }
    }
    Ok(missing)
}

/// The socket's NAPI ID (`SO_INCOMING_NAPI_ID`), 0 when it has none.
pub(super) fn napi_id(fd: RawFd) -> u32 {
    int_option(&fd, libc::SOL_SOCKET, libc::SO_INCOMING_NAPI_ID).map_or(0, |id| id as u32)
}

/// Why busy polling a socket just bound (`zero_copy`, with NAPI ID `napi_id`) on kernel
/// `release` cannot work; None when it can, or may once frames arrive (before 6.13).
pub(super) fn impossible(release: &str, zero_copy: bool, napi_id: u32) -> Option<String> {
    if napi_id != 0 || !super::offload::release_at_least(release, (6, 13)) {
        return None;
    }
    Some(if zero_copy {
        "the driver links this queue to no NAPI, so the socket has no NAPI ID".to_string()
    } else {
        "copy mode: Linux 6.13 and later give a copy-mode AF_XDP socket no NAPI ID to poll"
            .to_string()
    })
}

impl XskSocket {
    /// Why the busy polling asked for cannot work on this socket (module docs); None when it
    /// was not asked for or can work.
    pub fn busy_poll_impossible(&self) -> Option<&str> {
        self.busy_poll_impossible.as_deref()
    }

    /// The NAPI ID of the socket's queue, looked up when the socket itself cannot busy-poll
    /// it: an io_uring can still poll that NAPI by ID (`wirespeed_rt::busy_poll_napi`).
    pub fn queue_napi_id(&self) -> Option<u32> {
        self.queue_napi
    }

    /// The NAPI ID the kernel holds for this socket (`SO_INCOMING_NAPI_ID`); 0: none, so
    /// nothing to busy-poll.
    pub fn napi_id(&self) -> u32 {
        napi_id(std::os::fd::AsRawFd::as_raw_fd(&self.fd))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_polling_is_impossible_only_without_a_napi_id_from_6_13() {
        assert!(impossible("6.18.44-fc", false, 0).is_some());
        assert!(impossible("6.13.0", true, 0).is_some());
        assert_eq!(impossible("6.18.44-fc", true, 8193), None);
        // Before 6.13 the ID comes with the first frame.
        assert_eq!(impossible("6.12.9", false, 0), None);
        assert_eq!(impossible("6.1.0-28-amd64", true, 0), None);
    }
}
