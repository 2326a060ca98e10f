//! The socket API that servers and clients are written against: [`TcpListener`] and
//! [`TcpStream`], obtained from a shard's [`ShardStack`].
//!
//! The same async code runs on every stack; the application picks one when it builds the
//! [`Stack`] and never sees how it was brought up:
//! - [`kernel`]: Linux TCP through the shard's epoll or io_uring engine; one SO_REUSEPORT
//!   listener per shard, with a classic-BPF program that steers each connection to the shard
//!   on the CPU that received it;
//! - [`bypass`]: our own TCP/IP stack over a driver queue per shard (kernel bypass): the module
//!   takes the device over (AF_XDP, or DPDK with the cargo feature `dpdk`) and hands each shard
//!   its queue; [`bypass::socket`] is the stack's socket layer.

#![deny(unsafe_code)]

pub mod bypass;
pub mod kernel;
mod stack;

use std::io::{self, IoSlice};
use std::net::SocketAddr;

use bypass::socket::{BypassListener, BypassStream};
pub use stack::{KernelConfig, ShardStack, Shards, Stack, StackError};

/// A listening socket owned by one shard.
pub struct TcpListener(Listener);

enum Listener {
    Kernel(kernel::Listener),
    Bypass(BypassListener),
}

/// A connected stream owned by one shard.
pub struct TcpStream(Stream);

enum Stream {
    Kernel(kernel::Stream),
    Bypass(BypassStream),
}

impl From<kernel::Listener> for TcpListener {
    fn from(l: kernel::Listener) -> Self {
        TcpListener(Listener::Kernel(l))
    }
}

impl From<BypassListener> for TcpListener {
    fn from(l: BypassListener) -> Self {
        TcpListener(Listener::Bypass(l))
    }
}

impl From<kernel::Stream> for TcpStream {
    fn from(s: kernel::Stream) -> Self {
        TcpStream(Stream::Kernel(s))
    }
}

impl From<BypassStream> for TcpStream {
    fn from(s: BypassStream) -> Self {
        TcpStream(Stream::Bypass(s))
    }
}

impl TcpListener {
    pub async fn accept(&self) -> io::Result<TcpStream> {
        Ok(TcpStream(match &self.0 {
            Listener::Kernel(l) => Stream::Kernel(l.accept().await?),
            Listener::Bypass(l) => Stream::Bypass(l.accept().await?),
        }))
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match &self.0 {
            Listener::Kernel(l) => l.local_addr(),
            Listener::Bypass(l) => Ok(l.local_addr()),
        }
    }
}

impl TcpStream {
    /// Reads some bytes; 0 means the peer closed its side.
    pub async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.0 {
            Stream::Kernel(s) => s.read(buf).await,
            Stream::Bypass(s) => s.read(buf).await,
        }
    }

    pub async fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.0 {
            Stream::Kernel(s) => s.write(buf).await,
            Stream::Bypass(s) => s.write(buf).await,
        }
    }

    pub async fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match &mut self.0 {
            Stream::Kernel(s) => s.write_all(buf).await,
            Stream::Bypass(s) => s.write_all(buf).await,
        }
    }

    /// Writes the buffers in order with one call; returns how many bytes went (all, or as
    /// many as the send buffer took).
    pub async fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match &mut self.0 {
            Stream::Kernel(s) => s.write_vectored(bufs).await,
            Stream::Bypass(s) => s.write_vectored(bufs).await,
        }
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        match &self.0 {
            Stream::Kernel(s) => s.peer_addr(),
            Stream::Bypass(s) => s.peer_addr(),
        }
    }

    /// Closes the sending side (FIN) while still reading.
    pub fn shutdown_write(&self) -> io::Result<()> {
        match &self.0 {
            Stream::Kernel(s) => s.shutdown(std::net::Shutdown::Write),
            Stream::Bypass(s) => s.shutdown_write(),
        }
    }

    /// The CPU whose softirq last received a packet for this connection (SO_INCOMING_CPU on
    /// the kernel stack). On the bypass stack every packet of a connection is handled by the
    /// shard that owns its queue, which is the shard's own CPU.
    pub fn incoming_cpu(&self) -> Option<usize> {
        match &self.0 {
            Stream::Kernel(s) => s.incoming_cpu(),
            Stream::Bypass(_) => Some(wirespeed_rt::cpu()),
        }
    }

    /// The kernel socket, for options this API does not cover.
    pub fn as_kernel(&self) -> Option<&kernel::Stream> {
        match &self.0 {
            Stream::Kernel(s) => Some(s),
            Stream::Bypass(_) => None,
        }
    }

    /// The bypass stack's congestion, window and timer state (None on the kernel stack).
    pub fn bypass_info(&self) -> Option<io::Result<wirespeed_tcpip::TcpInfo>> {
        match &self.0 {
            Stream::Kernel(_) => None,
            Stream::Bypass(s) => Some(s.info()),
        }
    }
}
