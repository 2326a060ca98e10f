//! The socket calls of [`Stack`]: each forwards to TCP or UDP and then carries out what
//! they asked for (see `Stack::with_tcp`).

use crate::stack::Stack;
use crate::udp::emit_datagram;
use crate::{ConnId, Error, Instant, ListenerId, Result, TcpInfo, TcpState, UdpId};
use wirespeed_wire::{ip, udp, IpAddress, IpProtocol};

impl Stack {
    /// Opens a listener on `port` with room for `backlog` connections that are
    /// handshaking or waiting in the accept queue. Beyond that, SYN cookies (if enabled)
    /// keep accepting without state.
    pub fn tcp_listen(&mut self, port: u16, backlog: usize) -> Result<ListenerId> {
        self.tcp.listen(port, backlog)
    }

    /// Closes a listener; connections not yet accepted are reset.
    pub fn tcp_unlisten(&mut self, id: ListenerId) -> Result<()> {
        self.with_tcp(|tcp, cx| tcp.unlisten(cx, id))
    }

    /// Takes an established connection from the listener's accept queue.
    pub fn tcp_accept(&mut self, id: ListenerId) -> Result<ConnId> {
        self.with_tcp(|tcp, cx| tcp.accept(cx, id))
    }

    /// Opens a connection to `remote:remote_port` from the first free ephemeral port that
    /// `port_ok` accepts (e.g. one whose RSS hash lands on this shard's queue, see
    /// [`crate::toeplitz`]). Completion is signalled by a `Writable` event (or `Closed`).
    pub fn tcp_connect(
        &mut self,
        now: Instant,
        remote: impl Into<IpAddress>,
        remote_port: u16,
        port_ok: impl FnMut(u16) -> bool,
    ) -> Result<ConnId> {
        self.now = self.now.max(now);
        let remote = remote.into();
        self.with_tcp(|tcp, cx| tcp.connect(cx, remote, remote_port, port_ok))
    }

    /// Opens a connection from a given local port.
    pub fn tcp_connect_from(
        &mut self,
        now: Instant,
        remote: impl Into<IpAddress>,
        remote_port: u16,
        local_port: u16,
    ) -> Result<ConnId> {
        self.now = self.now.max(now);
        let remote = remote.into();
        self.with_tcp(|tcp, cx| tcp.connect_from(cx, remote, remote_port, local_port))
    }

    pub fn tcp_state(&self, c: ConnId) -> Result<TcpState> {
        self.tcp.state(c)
    }

    /// Why the connection failed, if it did.
    pub fn tcp_error(&self, c: ConnId) -> Result<Option<Error>> {
        self.tcp.error(c)
    }

    /// (remote address, remote port, local port).
    pub fn tcp_endpoints(&self, c: ConnId) -> Result<(IpAddress, u16, u16)> {
        self.tcp.endpoints(c)
    }

    /// Which of our addresses the connection is on: the one its SYN came to (the link-local
    /// one included), or the one chosen for the remote address when we opened it.
    pub fn tcp_local_addr(&self, c: ConnId) -> Result<IpAddress> {
        self.tcp.local_ip(c, &self.cfg)
    }

    /// A snapshot of the connection's sending and receiving state, as Linux's TCP_INFO.
    pub fn tcp_info(&self, c: ConnId) -> Result<TcpInfo> {
        self.tcp.info(c)
    }

    /// Bytes that `tcp_send` would accept now.
    pub fn tcp_send_capacity(&self, c: ConnId) -> Result<usize> {
        self.tcp.send_capacity(c)
    }

    /// Bytes ready for `tcp_recv`.
    pub fn tcp_recv_available(&self, c: ConnId) -> Result<usize> {
        self.tcp.recv_available(c)
    }

    /// Reads received bytes. `Ok(0)` means end of stream (the peer sent FIN and everything
    /// before it was read); `WouldBlock` means wait for `Readable`.
    pub fn tcp_recv(&mut self, c: ConnId, buf: &mut [u8]) -> Result<usize> {
        self.tcp.recv(c, buf)
    }

    /// Zero-copy read: the received bytes as (up to) two slices in order, without consuming
    /// them. Parse in place, then [`Stack::tcp_recv_consume`] what was used. Both empty with
    /// `Ok`: nothing buffered (check `tcp_recv` for end of stream or an error).
    pub fn tcp_recv_slices(&self, c: ConnId) -> Result<(&[u8], &[u8])> {
        self.tcp.recv_slices(c)
    }

    /// Consumes `n` bytes after [`Stack::tcp_recv_slices`] (clipped to what is buffered).
    pub fn tcp_recv_consume(&mut self, c: ConnId, n: usize) -> Result<()> {
        self.tcp.recv_consume(c, n)
    }

    /// Queues bytes for sending; returns how many were taken (`WouldBlock` when the send
    /// buffer is full: wait for `Writable`).
    pub fn tcp_send(&mut self, c: ConnId, data: &[u8]) -> Result<usize> {
        self.tcp.send(c, data)
    }

    /// Half-close: queue a FIN after the buffered data; the handle stays valid for reading.
    pub fn tcp_shutdown(&mut self, c: ConnId) -> Result<()> {
        self.with_tcp(|tcp, cx| tcp.shutdown(cx, c))
    }

    /// Graceful close: queues a FIN after the buffered data and releases the handle. The
    /// stack finishes the exchange (FIN_WAIT, TIME_WAIT) on its own.
    pub fn tcp_close(&mut self, c: ConnId) -> Result<()> {
        self.with_tcp(|tcp, cx| tcp.close(cx, c))
    }

    /// Abortive close: sends RST (when synchronized) and frees the connection now.
    pub fn tcp_abort(&mut self, c: ConnId) -> Result<()> {
        self.with_tcp(|tcp, cx| tcp.abort(cx, c))
    }

    /// Binds a UDP socket to `port` on the stack's address.
    pub fn udp_bind(&mut self, port: u16) -> Result<UdpId> {
        self.udp.bind(port, self.cfg.udp_recv_buffer)
    }

    /// Closes the socket; queued datagrams are discarded.
    pub fn udp_close(&mut self, id: UdpId) -> Result<()> {
        self.udp.close(id)
    }

    /// Takes the next datagram: copies up to `buf.len()` bytes (the rest of a longer datagram
    /// is discarded, as with recvfrom) and returns (bytes copied, source address, port).
    pub fn udp_recv_from(&mut self, id: UdpId, buf: &mut [u8]) -> Result<(usize, IpAddress, u16)> {
        self.udp.recv_from(id, buf)
    }

    /// Sends one datagram. It is queued (or parked for ARP) and leaves on the next
    /// `transmit`; `WouldBlock` when the queue is full.
    pub fn udp_send_to(
        &mut self,
        id: UdpId,
        dst: impl Into<IpAddress>,
        dst_port: u16,
        data: &[u8],
    ) -> Result<()> {
        let dst = dst.into();
        let src_port = self.udp.port(id)?;
        let src = match self.source_for(dst) {
            Some(src) if dst_port != 0 && !dst.is_unspecified() => src,
            _ => return Err(Error::InvalidInput),
        };
        if ip::header_len_for(dst) + udp::HEADER_LEN + data.len() > self.cfg.mtu {
            return Err(Error::MessageTooLong);
        }
        let ip = self.ip_repr(src, dst, IpProtocol::Udp, udp::HEADER_LEN + data.len());
        let e = self.eth_len;
        let ok = self.send_ip_frame(dst, |buf| {
            emit_datagram(buf, e, &ip, (src_port, dst_port), data)
        });
        if ok {
            Ok(())
        } else {
            Err(Error::WouldBlock)
        }
    }
}
