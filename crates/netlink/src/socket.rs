//! A netlink socket: non-blocking, bound, with a large receive buffer; requests wait for
//! their answers at most 5 s.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use crate::{
    messages, Error, Result, NLMSG_DONE, NLMSG_ERROR, NLMSG_HDRLEN, NLM_F_ACK, NLM_F_DUMP,
    NLM_F_REQUEST,
};

/// A netlink socket.
pub struct Socket {
    sock: socket2::Socket,
    seq: u32,
}

impl Socket {
    pub fn open(protocol: i32) -> Result<Socket> {
        let io_err = |what: &str| {
            let what = what.to_string();
            move |err| Error::Io { what, err }
        };
        let sock = socket2::Socket::new(
            socket2::Domain::from(libc::AF_NETLINK),
            socket2::Type::RAW.nonblocking().cloexec(),
            Some(socket2::Protocol::from(protocol)),
        )
        .map_err(io_err("netlink socket"))?;
        // Bound (port id assigned by the kernel): multicast events skip an unbound socket,
        // whose port id 0 is the kernel's own.
        wirespeed_sys::socket::bind_netlink(&sock).map_err(io_err("bind netlink"))?;
        // Bursts of events (50 routes at once) must not overflow the queue; failure only
        // means a smaller buffer.
        let _ = wirespeed_sys::socket::set_int_option(
            &sock,
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            4 << 20,
        );
        Ok(Socket { sock, seq: 1 })
    }

    pub fn join(&self, group: u32) -> Result<()> {
        wirespeed_sys::socket::set_int_option(
            &self.sock,
            libc::SOL_NETLINK,
            libc::NETLINK_ADD_MEMBERSHIP,
            group as libc::c_int,
        )
        .map_err(|err| Error::Io {
            what: format!("join netlink group {group}"),
            err,
        })
    }

    pub fn raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// Reads one datagram without blocking; Ok(None) when nothing is queued. An overrun
    /// (ENOBUFS) is reported as Ok(Some(empty)) so the caller resyncs.
    pub fn recv(&self, buf: &mut [u8]) -> Result<Option<usize>> {
        use std::io::Read;
        match (&self.sock).read(buf) {
            Ok(n) => Ok(Some(n)),
            Err(e) => match e.raw_os_error() {
                Some(libc::EAGAIN) => Ok(None),
                Some(libc::ENOBUFS) => Ok(Some(0)),
                Some(libc::EINTR) => Ok(None),
                _ => Err(Error::Io {
                    what: "netlink recv".into(),
                    err: e,
                }),
            },
        }
    }

    /// Sends a dump request (`ty` with the family header `hdr`, and any attributes after it)
    /// and returns each reply message's (type, payload) until NLMSG_DONE.
    pub fn dump(&mut self, ty: u16, hdr: &[u8]) -> Result<Vec<(u16, Vec<u8>)>> {
        self.exchange(ty, NLM_F_REQUEST | NLM_F_DUMP, hdr)
    }

    /// Sends one request that is not a dump (a get), asking for an acknowledgement, and
    /// returns its reply messages.
    pub fn get(&mut self, ty: u16, hdr: &[u8]) -> Result<Vec<(u16, Vec<u8>)>> {
        self.exchange(ty, NLM_F_REQUEST | NLM_F_ACK, hdr)
    }

    /// One request and its replies, up to NLMSG_DONE or the acknowledgement.
    fn exchange(&mut self, ty: u16, flags: u16, hdr: &[u8]) -> Result<Vec<(u16, Vec<u8>)>> {
        self.seq = self.seq.wrapping_add(1);
        let len = NLMSG_HDRLEN + hdr.len();
        let mut req = Vec::with_capacity(len);
        req.extend_from_slice(&(len as u32).to_ne_bytes());
        req.extend_from_slice(&ty.to_ne_bytes());
        req.extend_from_slice(&flags.to_ne_bytes());
        req.extend_from_slice(&self.seq.to_ne_bytes());
        req.extend_from_slice(&0u32.to_ne_bytes());
        req.extend_from_slice(hdr);
        self.sock.send(&req).map_err(|err| Error::Io {
            what: "netlink send".into(),
            err,
        })?;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let n = match self.recv(&mut buf)? {
                Some(n) => n,
                None => {
                    if std::time::Instant::now() > deadline {
                        return Err(Error::Netlink("dump timed out".into()));
                    }
                    wirespeed_sys::bpf::poll_readable(
                        &[Some(self.as_fd())],
                        std::time::Duration::from_millis(100),
                    );
                    continue;
                }
            };
            for m in messages(&buf[..n]) {
                match m.ty {
                    NLMSG_DONE => return Ok(out),
                    NLMSG_ERROR => {
                        return match crate::u32_of(m.payload).map(|e| e as i32) {
                            Some(0) => Ok(out),
                            errno => Err(Error::Refused {
                                request: ty,
                                err: match errno {
                                    Some(e) => std::io::Error::from_raw_os_error(-e),
                                    None => std::io::Error::other("truncated error message"),
                                },
                            }),
                        };
                    }
                    _ => out.push((m.ty, m.payload.to_vec())),
                }
            }
        }
    }
}
