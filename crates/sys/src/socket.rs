//! Socket options and calls that socket2 does not offer: integer options by number
//! (SO_BUSY_POLL, SO_PREFER_BUSY_POLL, SO_BUSY_POLL_BUDGET, ...), the reuseport group's
//! classic-BPF program, and the few epoll calls of the load generator's epoll engine.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
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

/// Whether standard output is a terminal.
pub fn stdout_is_tty() -> bool {
    // SAFETY: isatty only inspects the descriptor number.
    unsafe { libc::isatty(1) == 1 }
}

/// An epoll instance (for the load generator's epoll engine; the runtime has its own).
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

    pub fn modify(&self, fd: &impl AsRawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, token)
    }

    /// epoll_pwait2 with a timeout of `wait` (nanosecond resolution); returns how many
    /// entries of `events` it filled. EINTR reads as 0 events.
    pub fn wait(&self, events: &mut [EpollEvent], wait: Duration) -> io::Result<usize> {
        let ts = libc::timespec {
            tv_sec: wait.as_secs() as libc::time_t,
            tv_nsec: wait.subsec_nanos() as libc::c_long,
        };
        let max = events.len().min(i32::MAX as usize) as libc::c_int;
        // SAFETY: `events` is a live buffer of `max` entries; a null sigmask is allowed.
        let n = unsafe {
            libc::epoll_pwait2(
                self.fd.as_raw_fd(),
                events.as_mut_ptr(),
                max,
                &ts,
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
    fn an_epoll_wait_times_out_empty() {
        let ep = Epoll::new().unwrap();
        let mut ev = [epoll_event(); 4];
        assert_eq!(ep.wait(&mut ev, Duration::from_millis(1)).unwrap(), 0);
    }
}
