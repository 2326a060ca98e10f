//! The BPF side of the fast path: the `bpf(2)` commands libbpf-rs has no safe call for, and a
//! `poll(2)` over the few netlink sockets the fast-path daemon watches.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

/// Waits until one of `fds` is readable or `timeout` passes; returns which are readable.
/// `None` entries are skipped (and reported not readable). An interrupted wait returns
/// nothing readable.
pub fn poll_readable(fds: &[Option<BorrowedFd<'_>>], timeout: Duration) -> Vec<bool> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            // poll(2) skips a negative fd.
            fd: fd.map_or(-1, |fd| fd.as_raw_fd()),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: pfds is a valid array of pfds.len() pollfds for the duration of the call; the
    // fds are borrowed, so they stay open until poll returns.
    let rc = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    if rc <= 0 {
        return vec![false; fds.len()];
    }
    pfds.iter().map(|p| p.revents & libc::POLLIN != 0).collect()
}

/// Whether `fd` has input waiting, without blocking.
pub fn readable(fd: BorrowedFd<'_>) -> bool {
    poll_readable(&[Some(fd)], Duration::ZERO)[0]
}
