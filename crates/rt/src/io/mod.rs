//! Kernel I/O engines and the socket handle that tasks await on.
//!
//! A [`Socket`] owns a nonblocking fd registered with the current shard's engine:
//! - **epoll**: edge-triggered readiness; operations are `recv`/`send`/`writev` syscalls
//!   retried when the edge arrives, and `epoll_pwait2` carries a microsecond timeout so a
//!   short wait can busy-poll.
//! - **io_uring**: completions; one multishot accept per listener, one multishot recv per
//!   connection over a provided-buffer ring, and `send` from a per-socket buffer that the
//!   engine owns until the kernel is done with it (so dropping a future never leaves the kernel
//!   writing into freed memory).

use std::cell::RefCell;
use std::future::poll_fn;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

pub(crate) mod epoll;
pub(crate) mod uring;

/// Which kernel I/O engine a shard drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    Epoll,
    Uring,
}

impl std::fmt::Display for EngineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            EngineKind::Epoll => "epoll",
            EngineKind::Uring => "io_uring",
        })
    }
}

// One per thread for the thread's life: its size does not matter, and a Box would put an
// indirection on every poll.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Reactor {
    Epoll(epoll::Epoll),
    Uring(uring::Uring),
}

thread_local! {
    static REACTOR: RefCell<Option<Reactor>> = const { RefCell::new(None) };
}

impl Reactor {
    pub(crate) fn new(kind: EngineKind, napi_busy_poll_us: u32) -> io::Result<Reactor> {
        Ok(match kind {
            EngineKind::Epoll => Reactor::Epoll(epoll::Epoll::new(napi_busy_poll_us)?),
            EngineKind::Uring => Reactor::Uring(uring::Uring::new(napi_busy_poll_us)?),
        })
    }

    pub(crate) fn add_doorbell(&mut self, fd: &OwnedFd) -> io::Result<()> {
        match self {
            Reactor::Epoll(e) => e.add_doorbell(fd.as_raw_fd()),
            Reactor::Uring(u) => u.add_doorbell(fd.as_raw_fd()),
        }
    }

    /// An fd whose readability ends a blocking [`Reactor::poll`] and does nothing else (a
    /// sleeping poller's queue).
    pub(crate) fn add_wake_fd(&mut self, fd: RawFd) -> io::Result<()> {
        match self {
            Reactor::Epoll(e) => e.add_wake_fd(fd),
            Reactor::Uring(u) => u.add_wake_fd(fd),
        }
    }

    /// Busy-polls NAPI `id` while waiting (io_uring only: epoll polls only the NAPIs of the
    /// sockets it watches).
    pub(crate) fn busy_poll_napi(&mut self, id: u32) -> io::Result<()> {
        match self {
            Reactor::Epoll(_) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "epoll busy-polls only the NAPIs of its own sockets; --engine uring polls one by ID",
            )),
            Reactor::Uring(u) => u.busy_poll_napi(id),
        }
    }

    /// Waits up to `timeout` (None: until an event) and wakes the tasks whose I/O progressed.
    pub(crate) fn poll(&mut self, timeout: Option<Duration>) -> io::Result<usize> {
        match self {
            Reactor::Epoll(e) => e.poll(timeout),
            Reactor::Uring(u) => u.poll(timeout),
        }
    }
}

pub(crate) fn install(r: Reactor) {
    REACTOR.with(|c| *c.borrow_mut() = Some(r));
}

pub(crate) fn uninstall() {
    let r = REACTOR.with(|c| c.borrow_mut().take());
    drop(r);
}

pub(crate) fn with<R>(f: impl FnOnce(&mut Reactor) -> R) -> R {
    REACTOR.with(|c| {
        f(c.borrow_mut()
            .as_mut()
            .expect("no I/O engine on this thread: run inside a wirespeed shard"))
    })
}

/// Slot index and generation of a registered fd; the generation makes a stale handle harmless.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Token {
    pub(crate) slot: u32,
    pub(crate) generation: u32,
}

/// A nonblocking socket registered with this shard's engine. Not `Send`: it lives and dies on
/// its shard. Dropping it closes the fd (after in-flight io_uring operations are cancelled).
pub struct Socket {
    token: Token,
    fd: RawFd,
    uring: bool,
}

impl Socket {
    /// Registers `fd` (which must be nonblocking) with the current shard's engine.
    pub fn register(fd: OwnedFd) -> io::Result<Socket> {
        let raw = fd.as_raw_fd();
        let (token, uring) = with(|r| match r {
            Reactor::Epoll(e) => e.register(fd).map(|t| (t, false)),
            Reactor::Uring(u) => Ok((u.register(fd), true)),
        })?;
        Ok(Socket {
            token,
            fd: raw,
            uring,
        })
    }

    /// Accepts one connection; the new fd is nonblocking and close-on-exec.
    pub async fn accept(&self) -> io::Result<OwnedFd> {
        poll_fn(|cx| {
            with(|r| match r {
                Reactor::Epoll(e) => e.poll_accept(self.token, self.fd, cx),
                Reactor::Uring(u) => u.poll_accept(self.token, cx),
            })
        })
        .await
    }

    /// Receives into `buf`; 0 means the peer closed its side.
    pub async fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        poll_fn(|cx| {
            with(|r| match r {
                Reactor::Epoll(e) => e.poll_recv(self.token, self.fd, cx, buf),
                Reactor::Uring(u) => u.poll_recv(self.token, cx, buf),
            })
        })
        .await
    }

    /// Sends some of `buf`; returns how much the kernel took.
    pub async fn send(&self, buf: &[u8]) -> io::Result<usize> {
        self.send_vectored(&[IoSlice::new(buf)]).await
    }

    /// Gathers `bufs` into one send (epoll: `sendmsg` with an iovec; io_uring: one copy into
    /// the socket's send buffer and one SQE).
    pub async fn send_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let mut ticket = None;
        poll_fn(|cx| {
            with(|r| match r {
                Reactor::Epoll(e) => e.poll_send(self.token, self.fd, cx, bufs),
                Reactor::Uring(u) => u.poll_send(self.token, cx, bufs, &mut ticket),
            })
        })
        .await
    }

    /// Sends all of `buf`.
    pub async fn send_all(&self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            let n = self.send(buf).await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            buf = &buf[n..];
        }
        Ok(())
    }

    /// Connects a nonblocking socket.
    pub async fn connect(&self, addr: SocketAddr) -> io::Result<()> {
        let mut started = false;
        poll_fn(|cx| {
            with(|r| match r {
                Reactor::Epoll(e) => e.poll_connect(self.token, self.fd, cx, &addr, &mut started),
                Reactor::Uring(u) => u.poll_connect(self.token, cx, &addr, &mut started),
            })
        })
        .await
    }

    /// Shuts down one or both directions (a plain syscall on either engine).
    pub fn shutdown(&self, how: std::net::Shutdown) -> io::Result<()> {
        wirespeed_sys::socket::shutdown(&self.fd, how)
    }

    pub fn is_uring(&self) -> bool {
        self.uring
    }
}

impl AsRawFd for Socket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        let token = self.token;
        // try_with: the reactor may already be gone during thread teardown; the fd then
        // closes with the reactor's slot table.
        let _ = REACTOR.try_with(|c| {
            if let Some(r) = c.borrow_mut().as_mut() {
                match r {
                    Reactor::Epoll(e) => e.deregister(token),
                    Reactor::Uring(u) => u.deregister(token),
                }
            }
        });
    }
}

pub(crate) fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}
