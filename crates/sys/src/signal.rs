//! Signals without signal handlers: the signals a program wants are blocked and read from a
//! signalfd, so no code of ours ever runs in signal context.
//!
//! Block them on the main thread before starting any other thread: threads inherit the mask,
//! so a process-directed signal then stays pending until [`Signals`] reads it. Children inherit
//! it too, across exec: a program that expects to stop on SIGINT must be started with
//! [`CommandExt::unblock_signals`].

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::time::Duration;

/// The signals the project sends or waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT: Ctrl-C; our servers stop gracefully on it.
    Interrupt,
    /// SIGTERM: a polite request to stop.
    Terminate,
    /// SIGKILL: cannot be caught or blocked.
    Kill,
    /// SIGHUP.
    Hangup,
}

impl Signal {
    /// The signal's number.
    pub fn raw(self) -> libc::c_int {
        match self {
            Signal::Interrupt => libc::SIGINT,
            Signal::Terminate => libc::SIGTERM,
            Signal::Kill => libc::SIGKILL,
            Signal::Hangup => libc::SIGHUP,
        }
    }

    fn from_raw(n: libc::c_int) -> Option<Signal> {
        [
            Signal::Interrupt,
            Signal::Terminate,
            Signal::Kill,
            Signal::Hangup,
        ]
        .into_iter()
        .find(|s| s.raw() == n)
    }
}

/// Signals blocked on the calling thread (and the threads it starts from now on) until this
/// is dropped, which restores the thread's previous mask.
pub struct Blocked {
    set: libc::sigset_t,
    old_mask: libc::sigset_t,
}

impl Blocked {
    pub fn new(signals: &[Signal]) -> io::Result<Blocked> {
        // SAFETY: sigset_t is plain data; sigemptyset initialises it before use.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a live sigset_t; the signal numbers are valid.
        unsafe {
            libc::sigemptyset(&mut set);
            for s in signals {
                libc::sigaddset(&mut set, s.raw());
            }
        }
        // SAFETY: sigset_t is plain data; pthread_sigmask fills it with the old mask.
        let mut old_mask: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: both sets are live sigset_t values.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old_mask) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(Blocked { set, old_mask })
    }
}

impl Drop for Blocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `new`, a live sigset_t.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old_mask, std::ptr::null_mut()) };
    }
}

/// A set of signals blocked on the calling thread and readable from a signalfd. Dropping it
/// restores the thread's previous mask.
pub struct Signals {
    fd: OwnedFd,
    _blocked: Blocked,
}

impl std::fmt::Debug for Signals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signals").field("fd", &self.fd).finish()
    }
}

impl Signals {
    /// Blocks `signals` on the calling thread (and the threads it starts from now on) and
    /// opens a signalfd that reads them.
    pub fn block(signals: &[Signal]) -> io::Result<Signals> {
        let blocked = Blocked::new(signals)?;
        // SAFETY: `set` is a live, initialised sigset_t; -1 asks for a new descriptor.
        let fd =
            unsafe { libc::signalfd(-1, &blocked.set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error()); // `blocked` restores the mask
        }
        Ok(Signals {
            // SAFETY: `fd` is a new descriptor that nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            _blocked: blocked,
        })
    }

    /// SIGINT and SIGTERM: what a user or a supervisor sends to stop a program.
    pub fn termination() -> io::Result<Signals> {
        Signals::block(&[Signal::Interrupt, Signal::Terminate])
    }

    /// Waits for one of the signals, at most `timeout` (`None`: for ever); `None` when none
    /// arrived in time.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<Option<Signal>> {
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        loop {
            if let Some(s) = self.take()? {
                return Ok(Some(s));
            }
            let ms = match deadline {
                None => -1,
                Some(d) => {
                    let left = d.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return Ok(None);
                    }
                    // Round up so that a short wait still sleeps.
                    left.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int
                }
            };
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one live pollfd, and the count says one.
            if unsafe { libc::poll(&mut pfd, 1, ms) } < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }

    /// The next pending signal, without waiting.
    pub fn take(&self) -> io::Result<Option<Signal>> {
        // SAFETY: signalfd_siginfo is plain data, for which all zeroes is a valid value.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: reads at most `size` bytes into the live `info`, which is that large.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                &mut info as *mut libc::signalfd_siginfo as *mut libc::c_void,
                size,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
                _ => Err(e),
            };
        }
        if n as usize != size {
            return Ok(None);
        }
        Ok(Signal::from_raw(info.ssi_signo as libc::c_int))
    }
}

/// Starting children with no signal blocked, whatever the parent blocks.
pub trait CommandExt {
    /// The child unblocks every signal just before it execs, as a program started from a shell
    /// expects.
    fn unblock_signals(&mut self) -> &mut Command;
}

impl CommandExt for Command {
    fn unblock_signals(&mut self) -> &mut Command {
        let unblock = || {
            // SAFETY: sigset_t is plain data; sigemptyset initialises it before use.
            let mut none: libc::sigset_t = unsafe { std::mem::zeroed() };
            // SAFETY: `none` is a live sigset_t; sigprocmask only reads it.
            let rc = unsafe {
                libc::sigemptyset(&mut none);
                libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut())
            };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        };
        // SAFETY: the hook runs in the forked child before exec and only calls sigemptyset and
        // sigprocmask, both async-signal-safe; it allocates nothing and takes no locks.
        unsafe { std::os::unix::process::CommandExt::pre_exec(self, unblock) }
    }
}

impl AsFd for Signals {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocked_signal_is_read_not_delivered() {
        // On a fresh thread, so the test runner's other threads keep their masks; the signal is
        // sent to this thread only, where it is blocked.
        std::thread::spawn(|| {
            let signals = Signals::block(&[Signal::Hangup]).unwrap();
            assert_eq!(signals.take().unwrap(), None);
            assert_eq!(signals.wait(Some(Duration::from_millis(1))).unwrap(), None);
            // SAFETY: pthread_self names this live thread; SIGHUP is blocked on it.
            let rc = unsafe { libc::pthread_kill(libc::pthread_self(), libc::SIGHUP) };
            assert_eq!(rc, 0);
            assert_eq!(signals.wait(None).unwrap(), Some(Signal::Hangup));
            assert_eq!(signals.take().unwrap(), None);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn children_inherit_the_mask_unless_told_otherwise() {
        std::thread::spawn(|| {
            let _signals = Signals::termination().unwrap();
            let blocked = |status: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix("SigBlk:"))
                    .map(|m| m.trim().to_string())
                    .unwrap()
            };
            let mine = std::fs::read_to_string("/proc/thread-self/status").unwrap();
            assert_eq!(blocked(&mine), "0000000000004002", "SIGINT and SIGTERM");
            let child = |unblock: bool| {
                let mut cmd = Command::new("cat");
                cmd.arg("/proc/self/status");
                if unblock {
                    cmd.unblock_signals();
                }
                let out = cmd.output().unwrap();
                blocked(&String::from_utf8_lossy(&out.stdout))
            };
            assert_eq!(child(false), "0000000000004002");
            assert_eq!(child(true), "0000000000000000");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn signal_numbers_round_trip() {
        for s in [
            Signal::Interrupt,
            Signal::Terminate,
            Signal::Kill,
            Signal::Hangup,
        ] {
            assert_eq!(Signal::from_raw(s.raw()), Some(s));
        }
    }
}
