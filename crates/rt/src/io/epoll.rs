//! The epoll engine: edge-triggered readiness, one registration per fd for its lifetime.

use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use super::{would_block, Token};
use crate::sys::{cvt, cvt_size};

const DOORBELL: u64 = u64::MAX;
/// A poller's wake-up fd ([`Epoll::add_wake_fd`]): its readiness only ends a sleep; the shard
/// loop runs the poller afterwards anyway.
const WAKE_FD: u64 = u64::MAX - 1;

struct Slot {
    fd: RawFd,
    generation: u32,
    live: bool,
    /// A short `recv` says nothing about what is left: the socket is not a stream socket (a
    /// datagram socket's `recv` returns one datagram of many), or an event has said the peer
    /// closed its side, the connection failed (RDHUP, HUP, ERR) or urgent data came (PRI).
    /// End of stream and an error last: their edge has come and gone, and a short read that
    /// takes the last bytes before the FIN leaves `recv` returning 0 with no edge to come. A
    /// read stops short at the urgent mark with bytes still queued behind it. So such a
    /// socket always asks the kernel.
    always_ask: bool,
    /// The last `recv` of a stream socket returned less than it asked for, and no read event
    /// has come since: the receive queue was empty then, and any byte (or FIN, or error) that
    /// arrived after it brings an edge. So the next `recv` waits for that edge instead of
    /// making a syscall that would only return EAGAIN. Without it a server makes two `recv`
    /// per request, the second always empty.
    drained: bool,
    reader: Option<Waker>,
    writer: Option<Waker>,
}

pub(crate) struct Epoll {
    epfd: OwnedFd,
    slots: Vec<Slot>,
    free: Vec<u32>,
    events: Vec<libc::epoll_event>,
    doorbell: RawFd,
}

fn data(t: Token) -> u64 {
    ((t.generation as u64) << 32) | t.slot as u64
}

impl Epoll {
    /// `napi_busy_poll_us` > 0: the instance busy-polls the NAPI of its sockets' queue for
    /// that long before it sleeps, and prefers busy polling over the queue's own
    /// interrupt/thread (EPIOCSPARAMS, Linux 6.9); as io_uring's NAPI registration does.
    pub(crate) fn new(napi_busy_poll_us: u32) -> io::Result<Epoll> {
        // SAFETY: epoll_create1 returns a new fd or -1.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        let ep = Epoll {
            // SAFETY: fd was just created and is owned here.
            epfd: unsafe { OwnedFd::from_raw_fd(fd) },
            slots: Vec::new(),
            free: Vec::new(),
            events: vec![libc::epoll_event { events: 0, u64: 0 }; 1024],
            doorbell: -1,
        };
        if napi_busy_poll_us > 0 {
            let params = libc::epoll_params {
                busy_poll_usecs: napi_busy_poll_us,
                busy_poll_budget: 64,
                prefer_busy_poll: 1,
                __pad: 0,
            };
            // SAFETY: valid epoll fd; the kernel reads one epoll_params from the pointer.
            let rc = unsafe { libc::ioctl(fd, libc::EPIOCSPARAMS, &params) };
            if rc != 0 {
                eprintln!(
                    "wirespeed-rt: epoll NAPI busy polling unavailable ({}); continuing without it",
                    io::Error::last_os_error()
                );
            }
        }
        Ok(ep)
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: data };
        // SAFETY: valid epoll fd and event struct.
        cvt(unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), op, fd, &mut ev) }).map(drop)
    }

    pub(crate) fn add_doorbell(&mut self, fd: RawFd) -> io::Result<()> {
        self.doorbell = fd;
        // Level-triggered: it is drained on every wake-up.
        self.ctl(libc::EPOLL_CTL_ADD, fd, libc::EPOLLIN as u32, DOORBELL)
    }

    /// Level-triggered: while the fd is readable a blocking poll returns at once, so a frame
    /// that arrives between the poller's last look and the sleep is never slept through.
    pub(crate) fn add_wake_fd(&mut self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, libc::EPOLLIN as u32, WAKE_FD)
    }

    pub(crate) fn register(&mut self, fd: OwnedFd) -> io::Result<Token> {
        let raw = fd.as_raw_fd();
        let slot = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    fd: -1,
                    generation: 0,
                    live: false,
                    always_ask: true,
                    drained: false,
                    reader: None,
                    writer: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let s = &mut self.slots[slot as usize];
        s.fd = raw;
        s.live = true;
        s.always_ask = !is_stream_socket(raw);
        s.drained = false;
        let token = Token {
            slot,
            generation: s.generation,
        };
        // PRI: urgent data, after which a read can stop short with bytes still queued.
        let events =
            (libc::EPOLLIN | libc::EPOLLPRI | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET)
                as u32;
        if let Err(e) = self.ctl(libc::EPOLL_CTL_ADD, raw, events, data(token)) {
            self.release(slot);
            return Err(e); // `fd` drops here and closes
        }
        let _ = fd.into_raw_fd(); // the slot owns it now
        Ok(token)
    }

    fn release(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        s.live = false;
        s.fd = -1;
        s.reader = None;
        s.writer = None;
        s.generation = s.generation.wrapping_add(1);
        self.free.push(slot);
    }

    pub(crate) fn deregister(&mut self, t: Token) {
        let Some(s) = self.slots.get(t.slot as usize) else {
            return;
        };
        if !s.live || s.generation != t.generation {
            return;
        }
        // close() removes the fd from the epoll set (no other descriptor shares the file).
        // SAFETY: the slot owns this fd.
        unsafe { libc::close(s.fd) };
        self.release(t.slot);
    }

    fn park(&mut self, t: Token, cx: &Context<'_>, write: bool) {
        if let Some(s) = self.slots.get_mut(t.slot as usize) {
            if s.generation == t.generation {
                let w = if write { &mut s.writer } else { &mut s.reader };
                if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *w = Some(cx.waker().clone());
                }
            }
        }
    }

    /// Tries `op`; on EAGAIN parks the task until the next edge.
    fn attempt<T>(
        &mut self,
        t: Token,
        cx: &Context<'_>,
        write: bool,
        op: impl FnOnce() -> io::Result<T>,
    ) -> Poll<io::Result<T>> {
        match op() {
            Err(e) if would_block(&e) => {
                self.park(t, cx, write);
                Poll::Pending
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            r => Poll::Ready(r),
        }
    }

    pub(crate) fn poll_accept(
        &mut self,
        t: Token,
        fd: RawFd,
        cx: &Context<'_>,
    ) -> Poll<io::Result<OwnedFd>> {
        self.attempt(t, cx, false, || {
            // SAFETY: accept4 with null address pointers; returns a new fd or -1.
            let nfd = cvt(unsafe {
                libc::accept4(
                    fd,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                )
            })?;
            // SAFETY: a new descriptor we own.
            Ok(unsafe { OwnedFd::from_raw_fd(nfd) })
        })
    }

    pub(crate) fn poll_recv(
        &mut self,
        t: Token,
        fd: RawFd,
        cx: &Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        if self.is_drained(t) {
            self.park(t, cx, false);
            return Poll::Pending;
        }
        let want = buf.len();
        // recv, not read: the socket layer's own entry point, no VFS detour (docs/ARCHITECTURE.md,
        // "The runtime (crates/rt)").
        // SAFETY: buf is valid for writes of buf.len() bytes.
        let r = self.attempt(t, cx, false, || {
            cvt_size(unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) })
        });
        // A short read emptied the queue; 0 (end of stream) is not short: it stays readable.
        if let Poll::Ready(Ok(n)) = r {
            if n > 0 && n < want {
                self.set_drained(t);
            }
        }
        r
    }

    fn is_drained(&self, t: Token) -> bool {
        self.slots
            .get(t.slot as usize)
            .is_some_and(|s| s.generation == t.generation && s.drained)
    }

    fn set_drained(&mut self, t: Token) {
        if let Some(s) = self.slots.get_mut(t.slot as usize) {
            if s.generation == t.generation && !s.always_ask {
                s.drained = true;
            }
        }
    }

    pub(crate) fn poll_send(
        &mut self,
        t: Token,
        fd: RawFd,
        cx: &Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.attempt(t, cx, true, || {
            if bufs.len() == 1 {
                // SAFETY: the slice is valid for reads of its length.
                return cvt_size(unsafe {
                    libc::send(
                        fd,
                        bufs[0].as_ptr().cast(),
                        bufs[0].len(),
                        libc::MSG_NOSIGNAL,
                    )
                });
            }
            // SAFETY: msghdr is plain data; IoSlice is ABI-compatible with iovec.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
            msg.msg_iovlen = bufs.len().min(libc::UIO_MAXIOV as usize) as _;
            // SAFETY: msg points at valid iovecs for the duration of the call.
            cvt_size(unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) })
        })
    }

    pub(crate) fn poll_connect(
        &mut self,
        t: Token,
        fd: RawFd,
        cx: &Context<'_>,
        addr: &SocketAddr,
        started: &mut bool,
    ) -> Poll<io::Result<()>> {
        if !*started {
            *started = true;
            let (ss, len) = super::sockaddr(addr);
            // SAFETY: ss holds a valid sockaddr of length len.
            let rc = unsafe { libc::connect(fd, &ss as *const _ as *const libc::sockaddr, len) };
            if rc == 0 {
                return Poll::Ready(Ok(()));
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINPROGRESS) {
                return Poll::Ready(Err(e));
            }
            self.park(t, cx, true);
            return Poll::Pending;
        }
        let mut err: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: reads an int-sized option into `err`.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                &mut err as *mut _ as *mut libc::c_void,
                &mut len,
            )
        };
        if rc < 0 {
            return Poll::Ready(Err(io::Error::last_os_error()));
        }
        match err {
            0 => {
                // Writable with no error can also mean "not yet" after a spurious wake.
                let mut peer: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
                let mut plen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
                // SAFETY: getpeername writes at most plen bytes into peer.
                let rc = unsafe {
                    libc::getpeername(fd, &mut peer as *mut _ as *mut libc::sockaddr, &mut plen)
                };
                if rc == 0 {
                    Poll::Ready(Ok(()))
                } else {
                    self.park(t, cx, true);
                    Poll::Pending
                }
            }
            e => Poll::Ready(Err(io::Error::from_raw_os_error(e))),
        }
    }

    pub(crate) fn poll(&mut self, timeout: Option<Duration>) -> io::Result<usize> {
        let ts = timeout.map(|d| libc::timespec {
            tv_sec: d.as_secs() as _,
            tv_nsec: d.subsec_nanos() as _,
        });
        let tsp = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // epoll_pwait2 takes a timespec, so a 100 µs wait is 100 µs and not a rounded-up
        // millisecond: the busy-poll knob of the showdown's row 4 (docs/INSTRUMENTS.md, "`wirespeed
        // showdown`"). With net.core.busy_poll (or
        // SO_BUSY_POLL on the sockets) and a non-zero wait, the kernel spins on the NAPI
        // context here instead of sleeping.
        // SAFETY: events buffer is valid for its length; tsp is null or a valid timespec.
        let n = unsafe {
            libc::syscall(
                libc::SYS_epoll_pwait2,
                self.epfd.as_raw_fd(),
                self.events.as_mut_ptr(),
                self.events.len() as libc::c_int,
                tsp,
                std::ptr::null::<libc::sigset_t>(),
                0usize,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(0)
            } else {
                Err(e)
            };
        }
        let n = n as usize;
        for i in 0..n {
            let ev = self.events[i];
            let (bits, key) = (ev.events, ev.u64);
            if key == DOORBELL {
                crate::sys::eventfd_drain(&BorrowedRaw(self.doorbell));
                continue;
            }
            if key == WAKE_FD {
                continue;
            }
            let slot = (key & 0xffff_ffff) as usize;
            let generation = (key >> 32) as u32;
            let Some(s) = self.slots.get_mut(slot) else {
                continue;
            };
            if s.generation != generation || !s.live {
                continue;
            }
            let err_or_hup = bits & (libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0;
            // A state that lasts past its one edge (see `Slot::always_ask`).
            let lasting = err_or_hup || bits & (libc::EPOLLRDHUP | libc::EPOLLPRI) as u32 != 0;
            s.always_ask |= lasting;
            if lasting || bits & libc::EPOLLIN as u32 != 0 {
                s.drained = false;
                if let Some(w) = s.reader.take() {
                    w.wake();
                }
            }
            if err_or_hup || bits & libc::EPOLLOUT as u32 != 0 {
                if let Some(w) = s.writer.take() {
                    w.wake();
                }
            }
        }
        // A full event buffer suggests more are waiting: grow so one call drains them.
        if n == self.events.len() && self.events.len() < 65536 {
            self.events.resize(
                self.events.len() * 2,
                libc::epoll_event { events: 0, u64: 0 },
            );
        }
        Ok(n)
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        for s in &self.slots {
            if s.live {
                // SAFETY: live slots own their fds.
                unsafe { libc::close(s.fd) };
            }
        }
    }
}

/// Whether `fd` is a `SOCK_STREAM` socket (once per registration, not per read).
fn is_stream_socket(fd: RawFd) -> bool {
    let mut ty: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: reads an int-sized option into `ty`; a non-socket fd fails with ENOTSOCK.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            &mut ty as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    rc == 0 && ty == libc::SOCK_STREAM
}

struct BorrowedRaw(RawFd);
impl AsRawFd for BorrowedRaw {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(ep: &Epoll) -> libc::epoll_params {
        let mut p = libc::epoll_params {
            busy_poll_usecs: 0,
            busy_poll_budget: 0,
            prefer_busy_poll: 0,
            __pad: 0,
        };
        // SAFETY: valid epoll fd; the kernel writes one epoll_params.
        let rc = unsafe { libc::ioctl(ep.epfd.as_raw_fd(), libc::EPIOCGPARAMS, &mut p) };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        p
    }

    /// A connected loopback pair: the far end as a std stream, the near end registered.
    fn registered_pair(ep: &mut Epoll) -> (std::net::TcpStream, Token, RawFd) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let far = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (near, _) = l.accept().unwrap();
        near.set_nonblocking(true).unwrap();
        let fd = near.as_raw_fd();
        let t = ep.register(OwnedFd::from(near)).unwrap();
        (far, t, fd)
    }

    fn recv_now(ep: &mut Epoll, t: Token, fd: RawFd, want: usize) -> Poll<io::Result<usize>> {
        let mut buf = vec![0u8; want];
        let cx = Context::from_waker(Waker::noop());
        ep.poll_recv(t, fd, &cx, &mut buf)
    }

    /// Waits until the engine has harvested the events of the bytes just sent.
    fn harvest(ep: &mut Epoll) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while ep.poll(Some(Duration::from_millis(10))).unwrap() == 0 {
            assert!(std::time::Instant::now() < deadline, "no event came");
        }
    }

    /// After a short read the next recv waits for the next edge instead of asking the kernel
    /// (it would say EAGAIN); the edge of new bytes, or of the peer's FIN, ends the wait, and a
    /// read that filled its buffer does not count as short.
    #[test]
    fn a_short_read_waits_for_the_next_edge_without_a_syscall() {
        use std::io::Write;
        let mut ep = Epoll::new(0).unwrap();
        let (mut far, t, fd) = registered_pair(&mut ep);
        far.write_all(&[1; 10]).unwrap();
        harvest(&mut ep);
        assert!(matches!(recv_now(&mut ep, t, fd, 100), Poll::Ready(Ok(10))));
        // Bytes arrive, but the engine has not seen their edge yet: no syscall is made, so
        // they wait (a recv would have returned them).
        far.write_all(&[2; 5]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(recv_now(&mut ep, t, fd, 100).is_pending());
        harvest(&mut ep);
        assert!(matches!(recv_now(&mut ep, t, fd, 100), Poll::Ready(Ok(5))));
        // A full buffer is not a short read: the rest is read at once.
        far.write_all(&[3; 100]).unwrap();
        harvest(&mut ep);
        assert!(matches!(recv_now(&mut ep, t, fd, 60), Poll::Ready(Ok(60))));
        assert!(matches!(recv_now(&mut ep, t, fd, 60), Poll::Ready(Ok(40))));
        // The peer's FIN after a short read brings its own edge: end of stream is seen.
        far.shutdown(std::net::Shutdown::Write).unwrap();
        harvest(&mut ep);
        assert!(matches!(recv_now(&mut ep, t, fd, 100), Poll::Ready(Ok(0))));
        assert!(matches!(recv_now(&mut ep, t, fd, 100), Poll::Ready(Ok(0))));
    }

    /// The peer sends its last bytes and its FIN, and the engine sees their one edge before
    /// the read: the short read that takes the bytes also passes the FIN, and no edge follows,
    /// so the next recv must ask the kernel (it returns 0) rather than wait. The same holds
    /// after a reset.
    #[test]
    fn after_the_peer_closed_a_short_read_does_not_wait_for_an_edge() {
        use std::io::Write;
        let mut ep = Epoll::new(0).unwrap();
        let (mut far, t, fd) = registered_pair(&mut ep);
        far.write_all(&[7; 10]).unwrap();
        far.shutdown(std::net::Shutdown::Write).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        harvest(&mut ep);
        assert!(matches!(recv_now(&mut ep, t, fd, 100), Poll::Ready(Ok(10))));
        assert!(matches!(recv_now(&mut ep, t, fd, 100), Poll::Ready(Ok(0))));

        // Bytes, then a reset (linger 0), both seen in one harvest: the bytes, then the error.
        let (mut far, t, fd) = registered_pair(&mut ep);
        socket2::SockRef::from(&far)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        far.write_all(&[8; 10]).unwrap();
        drop(far);
        std::thread::sleep(Duration::from_millis(20));
        harvest(&mut ep);
        assert!(matches!(recv_now(&mut ep, t, fd, 100), Poll::Ready(Ok(10))));
        assert!(matches!(recv_now(&mut ep, t, fd, 100), Poll::Ready(Err(_))));
    }

    /// A peer's urgent byte (MSG_OOB) makes a read stop short at its mark with bytes queued
    /// behind it: the engine saw PRI, so the next recv asks the kernel and gets them.
    #[test]
    fn after_urgent_data_a_short_read_does_not_wait_for_an_edge() {
        use std::io::Write;
        let mut ep = Epoll::new(0).unwrap();
        let (mut far, t, fd) = registered_pair(&mut ep);
        far.write_all(&[1; 5]).unwrap();
        // SAFETY: sends one byte from a valid buffer on a connected socket.
        let sent = unsafe { libc::send(far.as_raw_fd(), [b'!'].as_ptr().cast(), 1, libc::MSG_OOB) };
        assert_eq!(sent, 1, "{}", io::Error::last_os_error());
        far.write_all(&[2; 5]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        harvest(&mut ep);
        assert!(matches!(recv_now(&mut ep, t, fd, 100), Poll::Ready(Ok(5))));
        assert!(matches!(recv_now(&mut ep, t, fd, 100), Poll::Ready(Ok(5))));
    }

    /// A datagram socket's `recv` returns one datagram, short however many wait behind it:
    /// each is read at once, with no edge in between.
    #[test]
    fn a_datagram_socket_reads_every_queued_datagram_without_waiting() {
        let mut ep = Epoll::new(0).unwrap();
        let near = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let far = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        far.connect(near.local_addr().unwrap()).unwrap();
        near.set_nonblocking(true).unwrap();
        let fd = near.as_raw_fd();
        let t = ep.register(OwnedFd::from(near)).unwrap();
        for n in [10, 20, 30] {
            far.send(&vec![n as u8; n]).unwrap();
        }
        harvest(&mut ep);
        for n in [10, 20, 30] {
            assert!(matches!(recv_now(&mut ep, t, fd, 100), Poll::Ready(Ok(m)) if m == n));
        }
        assert!(recv_now(&mut ep, t, fd, 100).is_pending());
    }

    /// Busy polling asked for reaches the epoll instance, preferred over the queue's own
    /// interrupt or thread; without it the instance keeps the kernel's defaults.
    #[test]
    fn napi_busy_poll_sets_the_instance_params() {
        let p = params(&Epoll::new(50).unwrap());
        assert_eq!(
            (p.busy_poll_usecs, p.busy_poll_budget, p.prefer_busy_poll),
            (50, 64, 1)
        );
        let p = params(&Epoll::new(0).unwrap());
        assert_eq!(p.busy_poll_usecs, 0);
        assert_eq!(p.prefer_busy_poll, 0);
    }
}
