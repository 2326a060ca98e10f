//! Socket options and calls that socket2 does not offer: integer options by number
//! (SO_RCVBUFFORCE, NETLINK_ADD_MEMBERSHIP, SO_BUSY_POLL, SO_PREFER_BUSY_POLL,
//! SO_BUSY_POLL_BUDGET, ...), the reuseport group's classic-BPF program, binding a netlink
//! socket, getsockname/getpeername on any descriptor, and the load generator's io_uring that
//! owns the memory its socket operations use ([`SocketRing`]).

use std::io;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub use socket2::SockAddr;
use std::time::Duration;

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Sets an integer socket option.
pub fn set_int_option(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int and its size; the kernel copies it.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            &value as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// Reads an integer socket option.
pub fn int_option(fd: &impl AsRawFd, level: libc::c_int, name: libc::c_int) -> io::Result<i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into a live c_int.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            &mut v as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    })?;
    Ok(v)
}

/// The calling thread's network namespace cookie (SO_NETNS_COOKIE, Linux 5.14+): the number
/// `bpf_get_netns_cookie` gives a BPF program for a socket of that namespace.
pub fn netns_cookie() -> io::Result<u64> {
    const SO_NETNS_COOKIE: libc::c_int = 71;
    let sock = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::DGRAM, None)?;
    let mut v: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into a live u64.
    check(unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_NETNS_COOKIE,
            &mut v as *mut u64 as *mut libc::c_void,
            &mut len,
        )
    })?;
    Ok(v)
}

/// Binds a netlink socket to a port id the kernel assigns (nl_pid 0), joining no group: the
/// kernel skips multicast delivery to an unbound socket, and socket2 has no netlink address.
pub fn bind_netlink(fd: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: an all-zero sockaddr_nl is valid (pid 0, no groups).
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // SAFETY: sa is a live sockaddr_nl and the length is its size; the kernel copies it.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// SO_ATTACH_REUSEPORT_CBPF: the classic-BPF program that picks a listener of the socket's
/// SO_REUSEPORT group (socket2's `attach_filter` is SO_ATTACH_FILTER, a different hook).
pub fn attach_reuseport_cbpf(fd: &impl AsRawFd, prog: &[libc::sock_filter]) -> io::Result<()> {
    let len = u16::try_from(prog.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "CBPF program too long"))?;
    let fprog = libc::sock_fprog {
        len,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: fprog points at `prog`, which outlives the call; the kernel copies the program.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            &fprog as *const libc::sock_fprog as *const libc::c_void,
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// A descriptor number is not memory: a stale one fails with EBADF (or names another socket),
/// so the functions here take any `AsRawFd`, which the runtime's sockets are.
fn sockname(fd: &impl AsRawFd, peer: bool) -> io::Result<SocketAddr> {
    // SAFETY: the closure hands the kernel socket2's zeroed sockaddr_storage and its length;
    // getsockname/getpeername write at most that many bytes.
    let ((), addr) = unsafe {
        socket2::SockAddr::try_init(|storage, len| {
            let rc = if peer {
                libc::getpeername(fd.as_raw_fd(), storage.cast(), len)
            } else {
                libc::getsockname(fd.as_raw_fd(), storage.cast(), len)
            };
            check(rc).map(drop)
        })
    }?;
    addr.as_socket()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not an IP socket"))
}

/// The local address of a socket (getsockname).
pub fn local_addr(fd: &impl AsRawFd) -> io::Result<SocketAddr> {
    sockname(fd, false)
}

/// The peer address of a connected socket (getpeername).
pub fn peer_addr(fd: &impl AsRawFd) -> io::Result<SocketAddr> {
    sockname(fd, true)
}

/// Receives into `buf` (recv(2), no flags): the socket layer's own entry point, with no VFS
/// detour through read(2) (docs/ARCHITECTURE.md, "The runtime (crates/rt)").
#[inline]
pub fn recv(fd: &impl AsRawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of its length for the duration of the call.
    crate::cvt_size(unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) })
}

/// Sends `bufs` in one call, without SIGPIPE: send(2) for one buffer, sendmsg(2) for more (at
/// most UIO_MAXIOV of them; the count sent says how far it got).
#[inline]
pub fn send_vectored(fd: &impl AsRawFd, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    if let [one] = bufs {
        // SAFETY: the slice is valid for reads of its length.
        return crate::cvt_size(unsafe {
            libc::send(
                fd.as_raw_fd(),
                one.as_ptr().cast(),
                one.len(),
                libc::MSG_NOSIGNAL,
            )
        });
    }
    // SAFETY: msghdr is plain data, for which all zeroes is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // IoSlice is ABI-compatible with iovec; the kernel only reads through it.
    msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = bufs.len().min(libc::UIO_MAXIOV as usize) as _;
    // SAFETY: msg points at live iovecs for the duration of the call.
    crate::cvt_size(unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) })
}

/// Accepts one connection as a nonblocking, close-on-exec socket (accept4(2)); the peer's
/// address is not asked for.
pub fn accept_nonblocking(fd: &impl AsRawFd) -> io::Result<OwnedFd> {
    // SAFETY: null address pointers are allowed; the result is a new descriptor or -1.
    let nfd = check(unsafe {
        libc::accept4(
            fd.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    })?;
    // SAFETY: a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(nfd) })
}

/// Starts a connect(2). On a nonblocking socket EINPROGRESS comes back as the error: the
/// caller waits for writability, then reads [`take_error`].
pub fn connect(fd: &impl AsRawFd, addr: &SocketAddr) -> io::Result<()> {
    let sa = SockAddr::from(*addr);
    // SAFETY: `sa` holds a valid socket address of `sa.len()` bytes.
    check(unsafe { libc::connect(fd.as_raw_fd(), sa.as_ptr(), sa.len()) }).map(drop)
}

/// The socket's pending error (SO_ERROR), which reading clears.
pub fn take_error(fd: &impl AsRawFd) -> io::Result<Option<io::Error>> {
    let e = int_option(fd, libc::SOL_SOCKET, libc::SO_ERROR)?;
    Ok((e != 0).then(|| io::Error::from_raw_os_error(e)))
}

/// Whether `fd` is a `SOCK_STREAM` socket; false for anything else, a non-socket included.
pub fn is_stream_socket(fd: &impl AsRawFd) -> bool {
    int_option(fd, libc::SOL_SOCKET, libc::SO_TYPE).is_ok_and(|t| t == libc::SOCK_STREAM)
}

/// Shuts down one or both directions of a connection (shutdown(2)).
pub fn shutdown(fd: &impl AsRawFd, how: std::net::Shutdown) -> io::Result<()> {
    let how = match how {
        std::net::Shutdown::Read => libc::SHUT_RD,
        std::net::Shutdown::Write => libc::SHUT_WR,
        std::net::Shutdown::Both => libc::SHUT_RDWR,
    };
    // SAFETY: plain syscall on a descriptor number; a stale one fails with EBADF.
    check(unsafe { libc::shutdown(fd.as_raw_fd(), how) }).map(drop)
}

/// Every IP address the kernel holds on an interface of this network namespace
/// (getifaddrs): what "the kernel owns this address" means. Binding a socket is no test of
/// it: in a namespace that never had an IPv4 address, any IPv4 address binds.
pub fn interface_addresses() -> io::Result<Vec<std::net::IpAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list it allocated into `head`; freed below.
    check(unsafe { libc::getifaddrs(&mut head) })?;
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points at a sockaddr whose family says its real type.
            match unsafe { (*ifa.ifa_addr).sa_family } as libc::c_int {
                libc::AF_INET => {
                    // SAFETY: an AF_INET sockaddr is a sockaddr_in.
                    let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                    out.push(std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)).into());
                }
                libc::AF_INET6 => {
                    // SAFETY: an AF_INET6 sockaddr is a sockaddr_in6.
                    let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                    out.push(std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr).into());
                }
                _ => {}
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// Whether standard output is a terminal.
pub fn stdout_is_tty() -> bool {
    // SAFETY: isatty only inspects the descriptor number.
    unsafe { libc::isatty(1) == 1 }
}

/// What an operation of a [`SocketRing`] was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingOp {
    Connect,
    Send,
    Recv,
}

/// One completed operation of a [`SocketRing`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingCompletion {
    /// The slot (connection) the operation was queued for.
    pub slot: usize,
    pub op: RingOp,
    /// The caller's tag (24 bits), e.g. which generation of the slot's connection it was.
    pub tag: u32,
    /// The syscall's result: bytes moved, 0, or a negative errno.
    pub result: i32,
}

const TAG_MASK: u32 = 0xff_ffff;

fn ring_user_data(slot: usize, op: RingOp, tag: u32) -> u64 {
    let op = match op {
        RingOp::Connect => 1,
        RingOp::Send => 2,
        RingOp::Recv => 3,
    };
    ((slot as u64) << 32) | (u64::from(tag & TAG_MASK) << 8) | op
}

fn ring_completion(user_data: u64, result: i32) -> Option<RingCompletion> {
    let op = match user_data & 0xff {
        1 => RingOp::Connect,
        2 => RingOp::Send,
        3 => RingOp::Recv,
        _ => return None,
    };
    Some(RingCompletion {
        slot: (user_data >> 32) as usize,
        op,
        tag: ((user_data >> 8) as u32) & TAG_MASK,
        result,
    })
}

/// An io_uring for many client sockets of one peer that owns every byte its operations point
/// into, so that queuing one is safe: one receive buffer per slot (the kernel's while a
/// receive is in flight, readable through [`SocketRing::received`] after its completion), one
/// block of bytes to send from, and the peer's address. Dropping it waits (up to 2 s) for the
/// operations in flight, and leaks the buffers rather than free memory the kernel may still
/// write.
///
/// Sockets are the caller's; an operation names one by its descriptor, so a socket closed
/// with operations in flight only makes them fail.
pub struct SocketRing {
    ring: std::mem::ManuallyDrop<io_uring::IoUring>,
    inflight: u64,
    /// Per slot: the receive buffer, and whether a receive into it is in flight.
    recv: std::mem::ManuallyDrop<Vec<(Box<[u8]>, bool)>>,
    block: std::mem::ManuallyDrop<Box<[u8]>>,
    peer: std::mem::ManuallyDrop<Box<socket2::SockAddr>>,
}

impl SocketRing {
    /// A ring of `entries` SQEs (SINGLE_ISSUER + DEFER_TASKRUN where the kernel has them)
    /// with `slots` receive buffers of `recv_len` bytes; sends come from `block`, connects go
    /// to `peer`.
    pub fn new(
        entries: u32,
        slots: usize,
        recv_len: usize,
        block: Vec<u8>,
        peer: SocketAddr,
    ) -> io::Result<SocketRing> {
        let ring = io_uring::IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(entries)
            .or_else(|_| io_uring::IoUring::new(entries))?;
        Ok(SocketRing {
            ring: std::mem::ManuallyDrop::new(ring),
            inflight: 0,
            recv: std::mem::ManuallyDrop::new(
                (0..slots)
                    .map(|_| (vec![0u8; recv_len].into_boxed_slice(), false))
                    .collect(),
            ),
            block: std::mem::ManuallyDrop::new(block.into_boxed_slice()),
            peer: std::mem::ManuallyDrop::new(Box::new(socket2::SockAddr::from(peer))),
        })
    }

    fn push(&mut self, e: io_uring::squeue::Entry) -> io::Result<()> {
        loop {
            // SAFETY: every SQE queued by this type points into `recv`, `block` or `peer`,
            // which this ring owns and frees only after every operation completed (see Drop);
            // a receive buffer is not handed out while its receive is in flight.
            if unsafe { self.ring.submission().push(&e) }.is_ok() {
                self.inflight += 1;
                return Ok(());
            }
            self.ring.submit()?;
        }
    }

    /// Queues a connect of `fd` to the peer.
    pub fn connect(&mut self, fd: &impl AsRawFd, slot: usize, tag: u32) -> io::Result<()> {
        let e = io_uring::opcode::Connect::new(
            io_uring::types::Fd(fd.as_raw_fd()),
            self.peer.as_ptr(),
            self.peer.len(),
        )
        .build()
        .user_data(ring_user_data(slot, RingOp::Connect, tag));
        self.push(e)
    }

    /// Queues a send of `block[range]` on `fd` (MSG_NOSIGNAL).
    pub fn send(
        &mut self,
        fd: &impl AsRawFd,
        range: std::ops::Range<usize>,
        slot: usize,
        tag: u32,
    ) -> io::Result<()> {
        let bytes = self
            .block
            .get(range)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "send beyond the block"))?;
        let e = io_uring::opcode::Send::new(
            io_uring::types::Fd(fd.as_raw_fd()),
            bytes.as_ptr(),
            bytes.len() as u32,
        )
        .flags(libc::MSG_NOSIGNAL)
        .build()
        .user_data(ring_user_data(slot, RingOp::Send, tag));
        self.push(e)
    }

    /// Queues a receive of at most `max` bytes on `fd` into `slot`'s buffer; one at a time.
    pub fn recv(&mut self, fd: &impl AsRawFd, slot: usize, max: usize, tag: u32) -> io::Result<()> {
        let (buf, busy) = self
            .recv
            .get_mut(slot)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no such slot"))?;
        if *busy {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a receive is already in flight on this slot",
            ));
        }
        let len = max.min(buf.len()) as u32;
        let e =
            io_uring::opcode::Recv::new(io_uring::types::Fd(fd.as_raw_fd()), buf.as_mut_ptr(), len)
                .build()
                .user_data(ring_user_data(slot, RingOp::Recv, tag));
        *busy = true;
        if let Err(e) = self.push(e) {
            self.recv[slot].1 = false;
            return Err(e);
        }
        Ok(())
    }

    /// The first `n` bytes of `slot`'s receive buffer, once its receive has completed.
    pub fn received(&self, slot: usize, n: usize) -> Option<&[u8]> {
        match self.recv.get(slot) {
            Some((buf, false)) => buf.get(..n),
            _ => None,
        }
    }

    /// Submits what is queued and waits up to `wait` for at least one completion (EINTR,
    /// ETIME and EBUSY read as no completion), then takes every completion there is.
    pub fn submit_and_wait(&mut self, wait: Duration) -> io::Result<Vec<RingCompletion>> {
        let ts = io_uring::types::Timespec::new()
            .sec(wait.as_secs())
            .nsec(wait.subsec_nanos());
        let args = io_uring::types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)
                ) => {}
            Err(e) => return Err(e),
        }
        let done: Vec<(u64, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        self.inflight = self.inflight.saturating_sub(done.len() as u64);
        let mut out = Vec::with_capacity(done.len());
        for (ud, res) in done {
            if let Some(c) = ring_completion(ud, res) {
                if c.op == RingOp::Recv {
                    if let Some(r) = self.recv.get_mut(c.slot) {
                        r.1 = false;
                    }
                }
                out.push(c);
            }
        }
        Ok(out)
    }
}

impl Drop for SocketRing {
    fn drop(&mut self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while self.inflight > 0 && std::time::Instant::now() < deadline {
            if self.submit_and_wait(Duration::from_millis(10)).is_err() {
                break;
            }
        }
        if self.inflight > 0 {
            // The kernel may still write into these: leak them (and the ring) instead.
            return;
        }
        // SAFETY: nothing is in flight any more, and each field is dropped exactly once.
        unsafe {
            std::mem::ManuallyDrop::drop(&mut self.ring);
            std::mem::ManuallyDrop::drop(&mut self.recv);
            std::mem::ManuallyDrop::drop(&mut self.block);
            std::mem::ManuallyDrop::drop(&mut self.peer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_integer_option_reads_back() {
        let s = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        set_int_option(&s, libc::SOL_SOCKET, libc::SO_RCVLOWAT, 7).unwrap();
        assert_eq!(
            int_option(&s, libc::SOL_SOCKET, libc::SO_RCVLOWAT).unwrap(),
            7
        );
    }

    #[test]
    fn addresses_read_back() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        assert_eq!(peer_addr(&c).unwrap(), l.local_addr().unwrap());
        assert_eq!(local_addr(&l).unwrap(), l.local_addr().unwrap());
    }

    #[test]
    fn a_socket_ring_connects_sends_and_receives() {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = l.local_addr().unwrap();
        let mut ring = SocketRing::new(8, 1, 64, b"ping".to_vec(), peer).unwrap();
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        let mut done = Vec::new();
        let mut wait_for = |ring: &mut SocketRing, op: RingOp| loop {
            if let Some(c) = done.iter().position(|c: &RingCompletion| c.op == op) {
                return done.remove(c);
            }
            done.extend(ring.submit_and_wait(Duration::from_secs(5)).unwrap());
        };
        ring.connect(&s, 0, 7).unwrap();
        assert_eq!(wait_for(&mut ring, RingOp::Connect).result, 0);
        let (mut server, _) = l.accept().unwrap();
        ring.send(&s, 0..4, 0, 7).unwrap();
        assert_eq!(wait_for(&mut ring, RingOp::Send).result, 4);
        let mut got = [0u8; 4];
        server.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        ring.recv(&s, 0, 64, 7).unwrap();
        assert!(
            ring.received(0, 0).is_none(),
            "the buffer is the kernel's until done"
        );
        assert!(ring.recv(&s, 0, 64, 7).is_err(), "one receive at a time");
        server.write_all(b"pong").unwrap();
        let c = wait_for(&mut ring, RingOp::Recv);
        assert_eq!((c.slot, c.tag, c.result), (0, 7, 4));
        assert_eq!(ring.received(0, 4), Some(&b"pong"[..]));
        assert!(ring.send(&s, 2..9, 0, 7).is_err(), "beyond the block");
    }
}
