//! SIGINT/SIGTERM handling without a signal handler.
//!
//! The thread that starts the runtime blocks the two signals (the shards inherit the mask) and
//! reads them from a signalfd, so no code runs in signal context. The first signal asks every
//! shard to stop; a second one exits at once.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::shard::Error;
use crate::smp::Mesh;
use crate::sys::cvt;

pub(crate) struct Watcher {
    fd: OwnedFd,
    old_mask: libc::sigset_t,
}

impl Watcher {
    pub(crate) fn install() -> Result<Watcher, Error> {
        // SAFETY: sigset operations on local, initialised sets; signalfd returns a new fd.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigaddset(&mut set, libc::SIGTERM);
            let mut old_mask: libc::sigset_t = std::mem::zeroed();
            let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old_mask);
            if rc != 0 {
                return Err(Error::Io {
                    what: "pthread_sigmask",
                    source: std::io::Error::from_raw_os_error(rc),
                });
            }
            let fd = cvt(libc::signalfd(
                -1,
                &set,
                libc::SFD_CLOEXEC | libc::SFD_NONBLOCK,
            ))
            .map_err(|source| Error::Io {
                what: "signalfd",
                source,
            })?;
            Ok(Watcher {
                fd: OwnedFd::from_raw_fd(fd),
                old_mask,
            })
        }
    }

    /// Waits for signals until `done()` holds, polling it every 50 ms.
    pub(crate) fn wait_until(&self, mesh: &Mesh, done: impl Fn() -> bool) {
        let mut signals = 0;
        while !done() {
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut pfd, 1, 50) };
            if n <= 0 {
                continue;
            }
            // SAFETY: reads whole signalfd_siginfo records into a correctly sized buffer.
            let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
            let sz = std::mem::size_of::<libc::signalfd_siginfo>();
            while unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    &mut info as *mut _ as *mut libc::c_void,
                    sz,
                )
            } == sz as isize
            {
                signals += 1;
                if signals == 1 {
                    mesh.request_shutdown();
                } else {
                    eprintln!("second signal: exiting now");
                    std::process::exit(130);
                }
            }
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved at install time.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old_mask, std::ptr::null_mut()) };
    }
}
