//! The socket API that servers are written against: [`TcpListener`] and [`TcpStream`].
//!
//! The same async code runs on every stack; the stack is picked when the listener is built.
//! Today that is the kernel stack ([`kernel`]): one SO_REUSEPORT listener per shard, with a
//! classic-BPF program that steers each connection to the shard on the CPU that received it.

pub mod kernel;

use std::io::{self, IoSlice};
use std::net::SocketAddr;

/// Which TCP/IP stack carries the sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackKind {
    Kernel,
}

/// A listening socket owned by one shard.
pub struct TcpListener {
    inner: kernel::Listener,
}

/// A connected stream owned by one shard.
pub struct TcpStream {
    inner: kernel::Stream,
}

impl TcpListener {
    pub fn from_kernel(inner: kernel::Listener) -> Self {
        TcpListener { inner }
    }

    pub async fn accept(&self) -> io::Result<TcpStream> {
        Ok(TcpStream {
            inner: self.inner.accept().await?,
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

impl TcpStream {
    /// Connects on the kernel stack.
    pub async fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
        Ok(TcpStream {
            inner: kernel::Stream::connect(addr).await?,
        })
    }

    /// Reads some bytes; 0 means the peer closed its side.
    pub async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf).await
    }

    pub async fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf).await
    }

    pub async fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.inner.write_all(buf).await
    }

    /// Writes several buffers with one call where the stack allows it.
    pub async fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.inner.write_vectored(bufs).await
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }

    /// Closes the sending side (FIN) while still reading.
    pub fn shutdown_write(&self) -> io::Result<()> {
        self.inner.shutdown(std::net::Shutdown::Write)
    }

    /// The CPU whose softirq last received a packet for this connection (SO_INCOMING_CPU on
    /// the kernel stack); `None` where the stack cannot tell.
    pub fn incoming_cpu(&self) -> Option<usize> {
        self.inner.incoming_cpu()
    }

    /// The kernel socket, for options this API does not cover.
    pub fn as_kernel(&self) -> Option<&kernel::Stream> {
        Some(&self.inner)
    }
}
