//! The epoll engine: edge-triggered readiness, one registration per fd for its lifetime.

use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::os::fd::{OwnedFd, RawFd};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use super::{would_block, Token};
use wirespeed_sys::epoll::{epoll_event, EpollEvent};
use wirespeed_sys::{eventfd, socket};

const DOORBELL: u64 = u64::MAX;
/// A poller's wake-up fd ([`Epoll::add_wake_fd`]): its readiness only ends a sleep; the shard
/// loop runs the poller afterwards anyway.
const WAKE_FD: u64 = u64::MAX - 1;

struct Slot {
    /// Closing it (dropping) also removes it from the epoll set: no other descriptor shares
    /// the file.
    fd: Option<OwnedFd>,
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
    ep: wirespeed_sys::epoll::Epoll,
    slots: Vec<Slot>,
    free: Vec<u32>,
    events: Vec<EpollEvent>,
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
        let ep = Epoll {
            ep: wirespeed_sys::epoll::Epoll::new()?,
            slots: Vec::new(),
            free: Vec::new(),
            events: vec![epoll_event(); 1024],
            doorbell: -1,
        };
        if napi_busy_poll_us > 0 {
            if let Err(e) = ep.ep.set_busy_poll(napi_busy_poll_us, 64) {
                eprintln!(
                    "wirespeed-rt: epoll NAPI busy polling unavailable ({e}); continuing without it"
                );
            }
        }
        Ok(ep)
    }

    pub(crate) fn add_doorbell(&mut self, fd: RawFd) -> io::Result<()> {
        self.doorbell = fd;
        // Level-triggered: it is drained on every wake-up.
        self.ep.add(&fd, libc::EPOLLIN as u32, DOORBELL)
    }

    /// Level-triggered: while the fd is readable a blocking poll returns at once, so a frame
    /// that arrives between the poller's last look and the sleep is never slept through.
    pub(crate) fn add_wake_fd(&mut self, fd: RawFd) -> io::Result<()> {
        self.ep.add(&fd, libc::EPOLLIN as u32, WAKE_FD)
    }

    pub(crate) fn register(&mut self, fd: OwnedFd) -> io::Result<Token> {
        let slot = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    fd: None,
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
        s.live = true;
        s.always_ask = !socket::is_stream_socket(&fd);
        s.drained = false;
        let token = Token {
            slot,
            generation: s.generation,
        };
        // PRI: urgent data, after which a read can stop short with bytes still queued.
        let events =
            (libc::EPOLLIN | libc::EPOLLPRI | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET)
                as u32;
        if let Err(e) = self.ep.add(&fd, events, data(token)) {
            self.release(slot);
            return Err(e); // `fd` drops here and closes
        }
        self.slots[slot as usize].fd = Some(fd);
        Ok(token)
    }

    fn release(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        s.live = false;
        s.fd = None; // closes it
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
        self.attempt(t, cx, false, || socket::accept_nonblocking(&fd))
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
        let r = self.attempt(t, cx, false, || socket::recv(&fd, buf));
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
        self.attempt(t, cx, true, || socket::send_vectored(&fd, bufs))
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
            match socket::connect(&fd, addr) {
                Ok(()) => return Poll::Ready(Ok(())),
                Err(e) if e.raw_os_error() != Some(libc::EINPROGRESS) => {
                    return Poll::Ready(Err(e))
                }
                Err(_) => {}
            }
            self.park(t, cx, true);
            return Poll::Pending;
        }
        match socket::take_error(&fd) {
            Err(e) | Ok(Some(e)) => Poll::Ready(Err(e)),
            // Writable with no error can also mean "not yet" after a spurious wake.
            Ok(None) if socket::peer_addr(&fd).is_ok() => Poll::Ready(Ok(())),
            Ok(None) => {
                self.park(t, cx, true);
                Poll::Pending
            }
        }
    }

    pub(crate) fn poll(&mut self, timeout: Option<Duration>) -> io::Result<usize> {
        // The wait is a timespec, so a 100 µs wait is 100 µs: the busy-poll knob of the
        // showdown's row 4 (docs/INSTRUMENTS.md, "`wirespeed showdown`"). With
        // net.core.busy_poll (or SO_BUSY_POLL on the sockets) and a non-zero wait, the kernel
        // spins on the NAPI context here instead of sleeping.
        let n = self.ep.wait(&mut self.events, timeout)?;
        for i in 0..n {
            let ev = self.events[i];
            let (bits, key) = (ev.events, ev.u64);
            if key == DOORBELL {
                eventfd::drain(&self.doorbell);
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
            self.events.resize(self.events.len() * 2, epoll_event());
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

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
        let sent = socket2::SockRef::from(&far).send_out_of_band(b"!").unwrap();
        assert_eq!(sent, 1);
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
        let p = Epoll::new(50).unwrap().ep.busy_poll().unwrap();
        assert_eq!(p, (50, 64, true));
        let (usecs, _, prefer) = Epoll::new(0).unwrap().ep.busy_poll().unwrap();
        assert_eq!((usecs, prefer), (0, false));
    }
}
