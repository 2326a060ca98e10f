//! The socket API that servers are written against: [`TcpListener`] and [`TcpStream`].
//!
//! The same async code runs on every stack; the stack is picked when the listener is built:
//! - [`kernel`]: Linux TCP through the shard's epoll or io_uring engine; one SO_REUSEPORT
//!   listener per shard, with a classic-BPF program that steers each connection to the shard
//!   on the CPU that received it;
//! - [`user`]: our own TCP/IP stack over a driver queue per shard (kernel bypass);
//!   [`bypass`] takes the device over (AF_XDP, or DPDK with the cargo feature `dpdk`) and
//!   hands each shard its queue.

pub mod bypass;
pub mod kernel;
pub mod user;

use std::io::{self, IoSlice};
use std::net::SocketAddr;

/// Which TCP/IP stack carries the sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackKind {
    Kernel,
    /// Our stack over AF_XDP.
    Xdp,
}

/// A listening socket owned by one shard.
pub enum TcpListener {
    Kernel(kernel::Listener),
    User(user::UserListener),
}

/// A connected stream owned by one shard.
pub enum TcpStream {
    Kernel(kernel::Stream),
    User(user::UserStream),
}

impl TcpListener {
    pub fn from_kernel(inner: kernel::Listener) -> Self {
        TcpListener::Kernel(inner)
    }

    pub async fn accept(&self) -> io::Result<TcpStream> {
        Ok(match self {
            TcpListener::Kernel(l) => TcpStream::Kernel(l.accept().await?),
            TcpListener::User(l) => TcpStream::User(l.accept().await?),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            TcpListener::Kernel(l) => l.local_addr(),
            TcpListener::User(l) => Ok(l.local_addr()),
        }
    }
}

impl TcpStream {
    /// Connects on the kernel stack.
    pub async fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
        Ok(TcpStream::Kernel(kernel::Stream::connect(addr).await?))
    }

    /// Reads some bytes; 0 means the peer closed its side.
    pub async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            TcpStream::Kernel(s) => s.read(buf).await,
            TcpStream::User(s) => s.read(buf).await,
        }
    }

    pub async fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            TcpStream::Kernel(s) => s.write(buf).await,
            TcpStream::User(s) => s.write(buf).await,
        }
    }

    pub async fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            TcpStream::Kernel(s) => s.write_all(buf).await,
            TcpStream::User(s) => s.write_all(buf).await,
        }
    }

    /// Writes several buffers with one call where the stack allows it.
    pub async fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            TcpStream::Kernel(s) => s.write_vectored(bufs).await,
            TcpStream::User(s) => match bufs.iter().find(|b| !b.is_empty()) {
                Some(b) => s.write(b).await,
                None => Ok(0),
            },
        }
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        match self {
            TcpStream::Kernel(s) => s.peer_addr(),
            TcpStream::User(s) => s.peer_addr(),
        }
    }

    /// Closes the sending side (FIN) while still reading.
    pub fn shutdown_write(&self) -> io::Result<()> {
        match self {
            TcpStream::Kernel(s) => s.shutdown(std::net::Shutdown::Write),
            TcpStream::User(s) => s.shutdown_write(),
        }
    }

    /// The CPU whose softirq last received a packet for this connection (SO_INCOMING_CPU on
    /// the kernel stack). On the bypass stack every packet of a connection is handled by the
    /// shard that owns its queue, which is the shard's own CPU.
    pub fn incoming_cpu(&self) -> Option<usize> {
        match self {
            TcpStream::Kernel(s) => s.incoming_cpu(),
            TcpStream::User(_) => Some(wirespeed_rt::cpu()),
        }
    }

    /// The kernel socket, for options this API does not cover.
    pub fn as_kernel(&self) -> Option<&kernel::Stream> {
        match self {
            TcpStream::Kernel(s) => Some(s),
            TcpStream::User(_) => None,
        }
    }
}
