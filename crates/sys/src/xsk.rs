//! AF_XDP socket calls: the socket, its UMEM and ring options, bind, the kernel's counters,
//! and the zero-length calls that wake the kernel (docs/NIC.md). The rings themselves are
//! shared memory the NIC driver reads and writes; they are mapped with [`crate::mmap`].

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use crate::cvt as check;

/// setsockopt with a plain-data value: the kernel copies `size_of::<T>()` bytes from it.
fn set<T: Copy>(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` is a live T and its size is passed with it.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// A new AF_XDP socket (needs CAP_NET_RAW and a kernel with AF_XDP).
pub fn socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the result is a new descriptor or -1.
    let fd = check(unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Registers the UMEM (XDP_UMEM_REG). The caller spells out every field of `reg`: kernels
/// before 6.8 read its first 28 bytes, later ones all 32.
pub fn register_umem(fd: &impl AsRawFd, reg: &libc::xdp_umem_reg) -> io::Result<()> {
    set(fd, libc::SOL_XDP, libc::XDP_UMEM_REG, reg)
}

/// Sizes one ring: `ring` is XDP_UMEM_FILL_RING, XDP_UMEM_COMPLETION_RING, XDP_RX_RING or
/// XDP_TX_RING.
pub fn set_ring_size(fd: &impl AsRawFd, ring: libc::c_int, entries: u32) -> io::Result<()> {
    set(fd, libc::SOL_XDP, ring, &entries)
}

/// Where each ring's producer, consumer, flags and descriptors lie in its mapping.
pub fn mmap_offsets(fd: &impl AsRawFd) -> io::Result<libc::xdp_mmap_offsets> {
    // SAFETY: xdp_mmap_offsets is plain integers, for which all zeroes is a valid value.
    let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
    get(fd, libc::XDP_MMAP_OFFSETS, &mut off)?;
    Ok(off)
}

/// The socket's drop counters (XDP_STATISTICS).
pub fn statistics(fd: &impl AsRawFd) -> io::Result<libc::xdp_statistics> {
    // SAFETY: xdp_statistics is plain integers, for which all zeroes is a valid value.
    let mut st: libc::xdp_statistics = unsafe { std::mem::zeroed() };
    get(fd, libc::XDP_STATISTICS, &mut st)?;
    Ok(st)
}

/// The bound socket's XDP_OPTIONS flags (XDP_OPTIONS_ZEROCOPY: the driver took zero-copy).
pub fn options(fd: &impl AsRawFd) -> io::Result<u32> {
    let mut o = libc::xdp_options { flags: 0 };
    get(fd, libc::XDP_OPTIONS, &mut o)?;
    Ok(o.flags)
}

/// getsockopt at SOL_XDP into one of the integer-only structs above, whose every bit pattern is
/// a valid value.
fn get<T: Copy>(fd: &impl AsRawFd, name: libc::c_int, value: &mut T) -> io::Result<()> {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is a live T and `len` its size; the kernel writes at most `len` bytes.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            name,
            (value as *mut T).cast(),
            &mut len,
        )
    })
    .map(drop)
}

/// Binds the socket to queue `queue` of interface `ifindex` with `flags` (XDP_COPY,
/// XDP_ZEROCOPY, XDP_USE_NEED_WAKEUP, XDP_USE_SG).
pub fn bind(fd: &impl AsRawFd, ifindex: u32, queue: u32, flags: u16) -> io::Result<()> {
    let sa = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: flags,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue,
        sxdp_shared_umem_fd: 0,
    };
    // SAFETY: `sa` is a live sockaddr_xdp and its size is passed with it.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_xdp).cast(),
            std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// The zero-length recvfrom that asks the kernel to fill the rx ring (need-wakeup mode).
pub fn kick_rx(fd: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: a zero-length call with null buffers; it only wakes the kernel.
    let rc = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            std::ptr::null_mut(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    crate::cvt_size(rc).map(drop)
}

/// The zero-length sendto that asks the kernel to send what the tx ring holds.
pub fn kick_tx(fd: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: a zero-length call with null buffers; it only wakes the kernel.
    let rc = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0,
        )
    };
    crate::cvt_size(rc).map(drop)
}

/// Sleeps until the socket is readable or `timeout` passes (poll(2), millisecond resolution);
/// true when it is readable. EINTR reads as false.
pub fn wait_readable(fd: &impl AsRawFd, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one live pollfd, and the count says one.
    match check(unsafe { libc::poll(&mut pfd, 1, ms) }) {
        Ok(n) => Ok(n > 0 && pfd.revents & libc::POLLIN != 0),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn abi_layouts_match_the_kernel_headers() {
        assert_eq!(std::mem::size_of::<libc::sockaddr_xdp>(), 16);
        assert_eq!(std::mem::size_of::<libc::xdp_umem_reg>(), 32, "no padding");
        assert_eq!(std::mem::size_of::<libc::xdp_mmap_offsets>(), 128);
        assert_eq!(std::mem::size_of::<libc::xdp_statistics>(), 48);
    }
}
