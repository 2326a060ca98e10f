//! AF_PACKET: a raw socket bound to one interface, seeing every frame it sends and receives.
//!
//! The lab's impairment link forwards frames between two interfaces with it, and the fast
//! path's test harness injects and captures frames with it. A VLAN tag that the kernel moved
//! out of the frame into metadata is reported beside the frame ([`Received::vlan`]), so a
//! caller that compares bytes can put it back.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

use crate::cvt;

/// Which way a received frame went, from the socket's interface's point of view
/// (`sll_pkttype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketType {
    /// Addressed to this host.
    Host,
    Broadcast,
    Multicast,
    /// Addressed to another host (seen because the interface is promiscuous or a bridge port).
    OtherHost,
    /// Sent by this host on the interface: our own transmissions, looped back to the socket.
    Outgoing,
    /// A kernel value this enum does not name.
    Other(u8),
}

impl PacketType {
    fn from_raw(t: u8) -> PacketType {
        // libc declares the PACKET_* types as c_int in some versions and u8 in others.
        #[allow(clippy::unnecessary_cast)]
        match t {
            t if t == libc::PACKET_HOST as u8 => PacketType::Host,
            t if t == libc::PACKET_BROADCAST as u8 => PacketType::Broadcast,
            t if t == libc::PACKET_MULTICAST as u8 => PacketType::Multicast,
            t if t == libc::PACKET_OTHERHOST as u8 => PacketType::OtherHost,
            t if t == libc::PACKET_OUTGOING as u8 => PacketType::Outgoing,
            t => PacketType::Other(t),
        }
    }

    /// True for frames the host itself sent.
    pub fn is_outgoing(self) -> bool {
        self == PacketType::Outgoing
    }
}

/// A VLAN tag the kernel stripped from a received frame (hardware or veth offload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanTag {
    /// 0x8100 or 0x88a8 (0x8100 when the kernel did not say).
    pub tpid: u16,
    pub tci: u16,
}

/// One received frame: its length in the caller's buffer, direction and offloaded VLAN tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    pub len: usize,
    pub kind: PacketType,
    pub vlan: Option<VlanTag>,
}

/// A raw `AF_PACKET` socket bound to one interface of the calling thread's network
/// namespace, for all protocols (`ETH_P_ALL`).
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
}

/// The index of interface `ifname` in the calling thread's namespace.
pub fn if_index(ifname: &str) -> io::Result<u32> {
    let name = std::ffi::CString::new(ifname).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name `{ifname}` contains a NUL byte"),
        )
    })?;
    // SAFETY: `name` is a valid NUL-terminated string that outlives the call.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("interface {ifname}: {e}")));
    }
    Ok(index)
}

impl PacketSocket {
    /// Opens a blocking packet socket bound to `ifname`, with PACKET_AUXDATA on so that
    /// offloaded VLAN tags are reported.
    pub fn bind(ifname: &str) -> io::Result<PacketSocket> {
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: socket(2) takes no pointers; the result is checked before use.
        let fd = cvt(unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                proto as libc::c_int,
            )
        })?;
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let index = if_index(ifname)?;
        // SAFETY: sockaddr_ll is plain data, for which all zeroes is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = index as i32;
        // SAFETY: `sll` is a live sockaddr_ll and the length passed is its size.
        cvt(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })
        .map_err(|e| io::Error::new(e.kind(), format!("bind AF_PACKET to {ifname}: {e}")))?;
        let sock = PacketSocket { fd };
        sock.set_int_option(libc::SOL_PACKET, libc::PACKET_AUXDATA, 1)?;
        Ok(sock)
    }

    fn set_int_option(&self, level: libc::c_int, name: libc::c_int, value: i32) -> io::Result<()> {
        // SAFETY: passes a live i32 and its size; the kernel copies it.
        cvt(unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                level,
                name,
                &value as *const i32 as *const libc::c_void,
                std::mem::size_of::<i32>() as libc::socklen_t,
            )
        })
        .map(drop)
    }

    /// Sets both socket buffers to `bytes`, above the `net.core.*mem_max` limits
    /// (SO_RCVBUFFORCE/SO_SNDBUFFORCE, which need CAP_NET_ADMIN).
    pub fn force_buffer_sizes(&self, bytes: usize) -> io::Result<()> {
        let v = bytes.min(i32::MAX as usize) as i32;
        self.set_int_option(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, v)?;
        self.set_int_option(libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, v)
    }

    /// Sends one whole frame (Ethernet header included) out of the bound interface. Blocks
    /// while the send buffer is full; `ENOBUFS` (the device queue is full) is returned as is.
    pub fn send(&self, frame: &[u8]) -> io::Result<usize> {
        // SAFETY: `frame` is valid for reads of its length for the duration of the call.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// Receives one frame into `buf`, waiting at most `timeout` (zero: do not wait). `None`
    /// when nothing arrived in time. A frame longer than `buf` is truncated to it.
    pub fn recv(&self, buf: &mut [u8], timeout: Duration) -> io::Result<Option<Received>> {
        if !self.readable(timeout)? {
            return Ok(None);
        }
        // SAFETY: sockaddr_ll is plain data, for which all zeroes is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // Room for one tpacket_auxdata control message, u64-aligned.
        let mut control = [0u64; 16];
        // SAFETY: msghdr is plain data, for which all zeroes is a valid value.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&mut sll as *mut libc::sockaddr_ll).cast();
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: every pointer in `msg` refers to a live buffer of the length stated beside
        // it, and they all outlive the call.
        let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted {
                return Ok(None);
            }
            return Err(e);
        }
        Ok(Some(Received {
            len: n as usize,
            kind: PacketType::from_raw(sll.sll_pkttype),
            vlan: vlan_of(&msg),
        }))
    }

    fn readable(&self, timeout: Duration) -> io::Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
        // SAFETY: one live pollfd, and the count says one.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(e);
        }
        Ok(n > 0)
    }
}

impl AsFd for PacketSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;

/// The offloaded VLAN tag of a received frame, from its PACKET_AUXDATA control message.
fn vlan_of(msg: &libc::msghdr) -> Option<VlanTag> {
    // SAFETY: `msg` was filled by recvmsg, so its control buffer and length are consistent;
    // the CMSG macros stay inside it, and the payload is read unaligned by value.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_PACKET && (*c).cmsg_type == libc::PACKET_AUXDATA {
                let aux: libc::tpacket_auxdata =
                    std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                if aux.tp_status & TP_STATUS_VLAN_VALID != 0 || aux.tp_vlan_tci != 0 {
                    let tpid = if aux.tp_status & TP_STATUS_VLAN_TPID_VALID != 0 {
                        aux.tp_vlan_tpid
                    } else {
                        0x8100
                    };
                    return Some(VlanTag {
                        tpid,
                        tci: aux.tp_vlan_tci,
                    });
                }
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_interfaces_are_named_in_the_error() {
        let e = if_index("ws-no-such-if").unwrap_err();
        assert!(e.to_string().contains("ws-no-such-if"), "{e}");
    }

    #[test]
    fn a_frame_sent_on_loopback_comes_back_as_outgoing_and_host() {
        assert!(
            crate::process::is_root(),
            "this test needs root (AF_PACKET): run it as root, e.g. `sudo make test`"
        );
        // A socket does not see its own transmissions, so one sends and another watches.
        let tx = PacketSocket::bind("lo").unwrap();
        let sock = PacketSocket::bind("lo").unwrap();
        sock.force_buffer_sizes(1 << 20).unwrap();
        // An Ethernet frame with a local-experimental EtherType, so nothing answers it.
        let mut frame = vec![0u8; 60];
        frame[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
        frame[14..18].copy_from_slice(b"wsys");
        assert_eq!(tx.send(&frame).unwrap(), frame.len());
        let mut kinds = Vec::new();
        let mut buf = [0u8; 2048];
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while kinds.len() < 2 && std::time::Instant::now() < deadline {
            if let Some(r) = sock.recv(&mut buf, Duration::from_millis(100)).unwrap() {
                if buf[..r.len] == frame[..] {
                    kinds.push(r.kind);
                }
            }
        }
        assert!(kinds.contains(&PacketType::Outgoing), "{kinds:?}");
        assert!(kinds.iter().any(|k| !k.is_outgoing()), "{kinds:?}");
    }
}
