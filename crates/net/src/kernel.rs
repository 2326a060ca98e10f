//! The kernel stack: sockets on the shard's epoll or io_uring engine.
//!
//! Perfect locality (docs/ARCHITECTURE.md, "A request on the kernel stack"): each shard owns one listener of one SO_REUSEPORT
//! group, and a classic-BPF program attached to the group returns, for every incoming SYN, the
//! index of the listener whose shard is pinned to the CPU that is processing the packet. The
//! listeners are opened in shard order, so index i is shard i's listener. A CPU without a shard
//! makes the program return an out-of-range index, which makes the kernel fall back to its
//! hash. With RSS/RPS steering flows to CPUs, a connection's packets, its softirq work and its
//! task then all stay on one CPU.

use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use socket2::{Domain, Protocol, SockAddr, Socket as RawSocket, Type};
use wirespeed_rt::io::Socket;
use wirespeed_sys::socket::attach_reuseport_cbpf;

/// How connections are spread over the shards' listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locality {
    /// SO_ATTACH_REUSEPORT_CBPF: the listener of the shard on the receiving CPU.
    Cbpf,
    /// The kernel's reuseport hash.
    None,
}

/// Socket options for a listener group and the connections it accepts.
#[derive(Debug, Clone)]
pub struct ListenOptions {
    pub backlog: i32,
    pub locality: Locality,
    pub nodelay: bool,
}

impl Default for ListenOptions {
    fn default() -> Self {
        ListenOptions {
            backlog: 4096,
            locality: Locality::Cbpf,
            nodelay: true,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("cannot create a socket: {0}")]
    Socket(io::Error),
    #[error("cannot set {option}: {err}")]
    Option {
        option: &'static str,
        err: io::Error,
    },
    #[error("cannot bind {addr}: {err}{hint}")]
    Bind {
        addr: SocketAddr,
        err: io::Error,
        hint: &'static str,
    },
    #[error("cannot listen on {addr}: {err}")]
    Listen { addr: SocketAddr, err: io::Error },
    #[error(
        "cannot attach the locality program (SO_ATTACH_REUSEPORT_CBPF): {0}; use --locality none"
    )]
    Cbpf(io::Error),
}

/// The classic-BPF reuseport program: "return the index of the shard on this CPU".
///
/// For CPUs `[0, 1, ..., n-1]` in order that is simply `A = cpu; return A`. For any other
/// list it is a chain of compares, one per shard; unmatched CPUs return 0xffffffff, an index
/// past the group's end, which the kernel answers with its hash.
pub fn locality_program(cpus: &[usize]) -> Vec<libc::sock_filter> {
    const SKF_AD_OFF: u32 = (-0x1000i32) as u32;
    const SKF_AD_CPU: u32 = 36;
    let ld_cpu = libc::sock_filter {
        code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
        jt: 0,
        jf: 0,
        k: SKF_AD_OFF + SKF_AD_CPU,
    };
    let ret_a = libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_A) as u16,
        jt: 0,
        jf: 0,
        k: 0,
    };
    let ret_k = |k: u32| libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_K) as u16,
        jt: 0,
        jf: 0,
        k,
    };
    if cpus.iter().enumerate().all(|(i, &c)| i == c) {
        return vec![ld_cpu, ret_a];
    }
    let mut prog = vec![ld_cpu];
    for (index, &cpu) in cpus.iter().enumerate() {
        // if A == cpu: fall through to `ret index`; else skip it.
        prog.push(libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: cpu as u32,
        });
        prog.push(ret_k(index as u32));
    }
    prog.push(ret_k(u32::MAX));
    prog
}

/// Opens one listener per shard on `addr`, in shard order, as one SO_REUSEPORT group.
/// `cpus[i]` is the CPU of shard i. Port 0 picks one free port for the whole group.
pub fn bind_group(
    addr: SocketAddr,
    cpus: &[usize],
    opts: &ListenOptions,
) -> Result<Vec<OwnedFd>, BindError> {
    let mut addr = addr;
    let mut out = Vec::with_capacity(cpus.len());
    for i in 0..cpus.len() {
        let domain = if addr.is_ipv4() {
            Domain::IPV4
        } else {
            Domain::IPV6
        };
        let s = RawSocket::new(
            domain,
            Type::STREAM.nonblocking().cloexec(),
            Some(Protocol::TCP),
        )
        .map_err(BindError::Socket)?;
        let opt = |option, source| BindError::Option {
            option,
            err: source,
        };
        s.set_reuse_address(true)
            .map_err(|e| opt("SO_REUSEADDR", e))?;
        s.set_reuse_port(true).map_err(|e| opt("SO_REUSEPORT", e))?;
        if opts.nodelay {
            s.set_nodelay(true).map_err(|e| opt("TCP_NODELAY", e))?;
        }
        s.bind(&SockAddr::from(addr)).map_err(|source| {
            let hint = match source.kind() {
                io::ErrorKind::AddrInUse => {
                    " (another process holds the port: pick another with --listen)"
                }
                io::ErrorKind::AddrNotAvailable => {
                    " (no interface has that address: check --listen)"
                }
                io::ErrorKind::PermissionDenied => " (ports below 1024 need root)",
                _ => "",
            };
            BindError::Bind {
                addr,
                err: source,
                hint,
            }
        })?;
        s.listen(opts.backlog)
            .map_err(|source| BindError::Listen { addr, err: source })?;
        if i == 0 {
            if let Some(bound) = s.local_addr().ok().and_then(|a| a.as_socket()) {
                addr = bound;
            }
            if opts.locality == Locality::Cbpf {
                attach_reuseport_cbpf(&s, &locality_program(cpus)).map_err(BindError::Cbpf)?;
            }
        }
        out.push(OwnedFd::from(s));
    }
    Ok(out)
}

/// A listener registered with the current shard.
pub struct Listener {
    sock: Socket,
    opts: ListenOptions,
}

impl Listener {
    /// Takes a listening fd from [`bind_group`] onto the current shard.
    pub fn new(fd: OwnedFd, opts: ListenOptions) -> io::Result<Listener> {
        Ok(Listener {
            sock: Socket::register(fd)?,
            opts,
        })
    }

    pub async fn accept(&self) -> io::Result<Stream> {
        let fd = self.sock.accept().await?;
        // Accepted sockets inherit TCP_NODELAY from the listener (the kernel clones the
        // listener's sock), so nothing is set here per connection. No SO_BUSY_POLL: on a
        // non-blocking socket it polls the queue on every read that finds nothing, once per
        // request in an event loop; the shard's engine busy-polls instead (docs/INSTRUMENTS.md).
        Stream::register(fd)
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        local_addr(&self.sock)
    }

    pub fn options(&self) -> &ListenOptions {
        &self.opts
    }
}

fn local_addr(fd: &impl AsRawFd) -> io::Result<SocketAddr> {
    wirespeed_sys::socket::local_addr(fd)
}

/// A connected kernel TCP socket.
pub struct Stream {
    sock: Socket,
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

/// Reads an integer socket option (for probes and tests).
pub fn int_option(fd: &impl AsRawFd, level: libc::c_int, name: libc::c_int) -> io::Result<i32> {
    wirespeed_sys::socket::int_option(fd, level, name)
}

impl Stream {
    fn register(fd: OwnedFd) -> io::Result<Stream> {
        Ok(Stream {
            sock: Socket::register(fd)?,
        })
    }

    pub async fn connect(addr: SocketAddr) -> io::Result<Stream> {
        let domain = if addr.is_ipv4() {
            Domain::IPV4
        } else {
            Domain::IPV6
        };
        let s = RawSocket::new(
            domain,
            Type::STREAM.nonblocking().cloexec(),
            Some(Protocol::TCP),
        )?;
        s.set_nodelay(true)?;
        let stream = Stream::register(s.into())?;
        stream.sock.connect(addr).await?;
        Ok(stream)
    }

    pub async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.sock.recv(buf).await
    }

    pub async fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.sock.send(buf).await
    }

    pub async fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.sock.send_all(buf).await
    }

    pub async fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.sock.send_vectored(bufs).await
    }

    pub fn shutdown(&self, how: std::net::Shutdown) -> io::Result<()> {
        self.sock.shutdown(how)
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        wirespeed_sys::socket::peer_addr(&self.sock)
    }

    pub fn incoming_cpu(&self) -> Option<usize> {
        int_option(&self.sock, libc::SOL_SOCKET, libc::SO_INCOMING_CPU)
            .ok()
            .and_then(|c| usize::try_from(c).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_cpu_list_is_two_instructions() {
        assert_eq!(locality_program(&[0, 1, 2]).len(), 2);
    }

    #[test]
    fn sparse_cpu_list_maps_each_cpu_to_its_index() {
        let p = locality_program(&[3, 1]);
        // ld, (jeq 3, ret 0), (jeq 1, ret 1), ret MAX
        assert_eq!(p.len(), 6);
        assert_eq!((p[1].k, p[2].k), (3, 0));
        assert_eq!((p[3].k, p[4].k), (1, 1));
        assert_eq!(p[5].k, u32::MAX);
    }
}
