//! A tap device held open as a VM's virtio-net backend holds it (QEMU, Firecracker): every
//! frame read or written carries a virtio-net header saying whether its L4 checksum is still
//! partial and whether it is a GSO super-frame.
//!
//! The fast path's tests stand a VM in with it, so that what a guest's offloads put on a
//! bridge (partial checksums, 64 KiB TCP segments) reaches the bridge as it would from a VM.

use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::Duration;

/// The virtio-net header in front of every frame (`struct virtio_net_hdr`, the 10-byte form a
/// tap uses unless told otherwise; little-endian on every host this project runs on).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VnetHeader {
    /// `VIRTIO_NET_HDR_F_*`: [`VnetHeader::NEEDS_CSUM`], [`VnetHeader::DATA_VALID`].
    pub flags: u8,
    /// `VIRTIO_NET_HDR_GSO_*`: none (0), [`VnetHeader::GSO_TCPV4`], [`VnetHeader::GSO_TCPV6`].
    pub gso_type: u8,
    /// The length of the headers in front of a GSO frame's payload.
    pub hdr_len: u16,
    /// The payload bytes per segment of a GSO frame.
    pub gso_size: u16,
    /// Where the partial checksum's coverage starts, from the start of the frame.
    pub csum_start: u16,
    /// Where the checksum field is, from `csum_start`.
    pub csum_offset: u16,
}

impl VnetHeader {
    pub const LEN: usize = 10;
    /// The L4 checksum holds only the pseudo-header sum; the device is to finish it.
    pub const NEEDS_CSUM: u8 = 1;
    /// The checksum was checked already.
    pub const DATA_VALID: u8 = 2;
    pub const GSO_TCPV4: u8 = 1;
    pub const GSO_TCPV6: u8 = 4;

    pub fn to_bytes(self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
        b
    }

    pub fn from_bytes(b: &[u8; Self::LEN]) -> VnetHeader {
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        VnetHeader {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u16_at(2),
            gso_size: u16_at(4),
            csum_start: u16_at(6),
            csum_offset: u16_at(8),
        }
    }
}

/// What the guest accepts from the tap (`TUNSETOFFLOAD`): without `csum` the kernel finishes
/// every checksum before handing a frame over, without `tso` it segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestOffloads {
    pub csum: bool,
    pub tso: bool,
}

/// An open tap device; the device goes away when this is dropped (it is not persistent).
pub struct Tap {
    file: File,
    name: String,
}

/// `struct ifreq` as TUNSETIFF reads it: the name, then the flags.
#[repr(C)]
struct IfReqFlags {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

impl Tap {
    /// Creates tap `name` in the calling thread's network namespace with a virtio-net header
    /// on every frame, taking `offloads` from the kernel. The device starts down and without a
    /// master; the caller configures it with `ip`.
    pub fn create(name: &str, offloads: GuestOffloads) -> io::Result<Tap> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("tap name `{name}`: 1 to 15 bytes"),
            ));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/net/tun")
            .map_err(|e| io::Error::new(e.kind(), format!("/dev/net/tun: {e}")))?;
        let mut req = IfReqFlags {
            name: [0; libc::IFNAMSIZ],
            flags: (libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_VNET_HDR) as libc::c_short,
            _pad: [0; 22],
        };
        req.name[..name.len()].copy_from_slice(name.as_bytes());
        // SAFETY: TUNSETIFF reads and writes one `struct ifreq`, which `req` is laid out as
        // (name, then the flags union member) and outlives the call.
        if unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &mut req) } < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("TUNSETIFF {name}: {e}")));
        }
        let mut bits: libc::c_uint = 0;
        if offloads.csum {
            bits |= libc::TUN_F_CSUM;
            if offloads.tso {
                bits |= libc::TUN_F_TSO4 | libc::TUN_F_TSO6;
            }
        }
        // SAFETY: TUNSETOFFLOAD takes its argument by value.
        if unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETOFFLOAD, bits as libc::c_ulong) } < 0
        {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("TUNSETOFFLOAD {name}: {e}"),
            ));
        }
        // As QEMU holds it: an unbounded send buffer and a non-blocking descriptor. The kernel
        // runs a tap's XDP program on the frame itself (native) only for such a writer, and on
        // an skb (generic XDP) for any other, so this is what decides which path a guest's
        // frames take.
        let unbounded: libc::c_int = libc::c_int::MAX;
        // SAFETY: TUNSETSNDBUF reads one int through the pointer, which outlives the call.
        if unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETSNDBUF, &unbounded) } < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("TUNSETSNDBUF {name}: {e}"),
            ));
        }
        // SAFETY: F_GETFL/F_SETFL on a descriptor this function owns.
        let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
        // SAFETY: as above.
        if flags < 0
            || unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0
        {
            return Err(io::Error::last_os_error());
        }
        Ok(Tap {
            file,
            name: name.to_string(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Hands one frame to the kernel as the guest's transmission (one `writev`: the header,
    /// then the frame).
    pub fn send(&self, header: VnetHeader, frame: &[u8]) -> io::Result<()> {
        let head = header.to_bytes();
        let n = (&self.file).write_vectored(&[IoSlice::new(&head), IoSlice::new(frame)])?;
        if n != head.len() + frame.len() {
            return Err(io::Error::other(format!(
                "{}: wrote {n} of {} bytes",
                self.name,
                head.len() + frame.len()
            )));
        }
        Ok(())
    }

    /// The next frame the kernel sent to the guest, into `buf` (one `readv`: the header, then
    /// the frame), waiting at most `timeout`: its header and length, or `None` when nothing
    /// came in time. A frame longer than `buf` is cut short.
    pub fn recv_into(
        &self,
        buf: &mut [u8],
        timeout: Duration,
    ) -> io::Result<Option<(VnetHeader, usize)>> {
        if !crate::bpf::poll_readable(&[Some(self.file.as_fd())], timeout)[0] {
            return Ok(None);
        }
        let mut head = [0u8; VnetHeader::LEN];
        let n = match (&self.file)
            .read_vectored(&mut [IoSliceMut::new(&mut head), IoSliceMut::new(buf)])
        {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) => return Err(e),
        };
        if n < VnetHeader::LEN {
            return Err(io::Error::other(format!("{}: a {n}-byte read", self.name)));
        }
        Ok(Some((VnetHeader::from_bytes(&head), n - VnetHeader::LEN)))
    }

    /// As [`Tap::recv_into`], into a new buffer as long as the frame.
    pub fn recv(&self, timeout: Duration) -> io::Result<Option<(VnetHeader, Vec<u8>)>> {
        let mut buf = vec![0u8; 65_536];
        Ok(self.recv_into(&mut buf, timeout)?.map(|(h, n)| {
            buf.truncate(n);
            (h, buf)
        }))
    }
}

impl AsFd for Tap {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}
