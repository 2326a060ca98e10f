//! epoll(7): an instance, its interest list, its busy-poll parameters and the wait, for the
//! runtime's epoll engine and the load generator's.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

use crate::cvt as check;

/// An epoll instance.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
}

/// One readiness event: the token given at registration and the `EPOLL*` flags.
pub type EpollEvent = libc::epoll_event;

/// An empty event slot for [`Epoll::wait`]'s buffer.
pub fn epoll_event() -> EpollEvent {
    libc::epoll_event { events: 0, u64: 0 }
}

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscall; on success the new descriptor is ours alone.
        let fd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` is a fresh descriptor nothing else owns.
        Ok(Epoll {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn ctl(&self, op: libc::c_int, fd: &impl AsRawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: both descriptors are live; `ev` outlives the call.
        check(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd.as_raw_fd(), &mut ev) })
            .map(drop)
    }

    pub fn add(&self, fd: &impl AsRawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)
    }

    /// Busy polls the NAPI context of its sockets' queue for `usecs` before sleeping, and
    /// prefers busy polling over the queue's interrupt (EPIOCSPARAMS, Linux 6.9).
    pub fn set_busy_poll(&self, usecs: u32, budget: u16) -> io::Result<()> {
        let params = libc::epoll_params {
            busy_poll_usecs: usecs,
            busy_poll_budget: budget,
            prefer_busy_poll: 1,
            __pad: 0,
        };
        // SAFETY: a live epoll fd; the kernel reads one epoll_params from the pointer.
        check(unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::EPIOCSPARAMS, &params) }).map(drop)
    }

    /// The busy-poll parameters in force (EPIOCGPARAMS): microseconds, budget, prefer.
    pub fn busy_poll(&self) -> io::Result<(u32, u16, bool)> {
        let mut p = libc::epoll_params {
            busy_poll_usecs: 0,
            busy_poll_budget: 0,
            prefer_busy_poll: 0,
            __pad: 0,
        };
        // SAFETY: a live epoll fd; the kernel writes one epoll_params.
        check(unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::EPIOCGPARAMS, &mut p) })?;
        Ok((
            p.busy_poll_usecs,
            p.busy_poll_budget,
            p.prefer_busy_poll != 0,
        ))
    }

    pub fn modify(&self, fd: &impl AsRawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, token)
    }

    /// epoll_pwait2 with a timeout of `wait` (nanosecond resolution; `None` waits for an
    /// event), so a 100 µs wait is 100 µs and not a rounded-up millisecond; returns how many
    /// entries of `events` it filled. EINTR reads as 0 events.
    pub fn wait(&self, events: &mut [EpollEvent], wait: Option<Duration>) -> io::Result<usize> {
        let ts = wait.map(|w| libc::timespec {
            tv_sec: w.as_secs() as libc::time_t,
            tv_nsec: w.subsec_nanos() as libc::c_long,
        });
        let tsp = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        let max = events.len().min(i32::MAX as usize) as libc::c_int;
        // SAFETY: `events` is a live buffer of `max` entries; `tsp` is null or a live timespec;
        // a null sigmask is allowed.
        let n = unsafe {
            libc::epoll_pwait2(
                self.fd.as_raw_fd(),
                events.as_mut_ptr(),
                max,
                tsp,
                std::ptr::null(),
            )
        };
        match check(n) {
            Ok(n) => Ok(n as usize),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            Err(e) => Err(e),
        }
    }
}

impl AsFd for Epoll {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_epoll_wait_times_out_empty() {
        let ep = Epoll::new().unwrap();
        let mut ev = [epoll_event(); 4];
        assert_eq!(ep.wait(&mut ev, Some(Duration::from_millis(1))).unwrap(), 0);
    }
}
