//! eventfd(2) as a doorbell between threads: one side rings, the other drains when it wakes.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A new nonblocking, close-on-exec eventfd with its counter at zero.
pub fn create() -> io::Result<OwnedFd> {
    // SAFETY: eventfd returns a new descriptor or -1.
    let fd = crate::cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    // SAFETY: a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds one to the counter. EAGAIN (the counter saturated) is harmless: the reader is already
/// due to wake, so the result is not reported.
pub fn ring(fd: &impl AsRawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64.
    unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

/// Reads the counter back to zero (nonblocking: nothing to read is not an error).
pub fn drain(fd: &impl AsRawFd) {
    let mut v: u64 = 0;
    // SAFETY: reads at most 8 bytes into a live u64.
    unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rung_doorbell_reads_once() {
        let fd = create().unwrap();
        ring(&fd);
        ring(&fd);
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        assert_eq!(unsafe { libc::poll(&mut pfd, 1, 0) }, 1);
        drain(&fd);
        // SAFETY: as above.
        assert_eq!(unsafe { libc::poll(&mut pfd, 1, 0) }, 0, "drained");
    }
}
