//! `setsockopt` / `getsockopt` on the AF_XDP socket, for plain-data option values.

use std::os::fd::RawFd;

pub(super) fn setsockopt<T>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> std::io::Result<()> {
    // SAFETY: value is a live T and its size is passed with it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            value as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

pub(super) fn getsockopt<T: Copy>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    mut value: T,
) -> std::io::Result<T> {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: value is a live T and len its size; the kernel writes at most len bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            &mut value as *mut T as *mut libc::c_void,
            &mut len,
        )
    };
    if rc == 0 {
        Ok(value)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn abi_layouts_match_the_kernel_headers() {
        assert_eq!(std::mem::size_of::<libc::sockaddr_xdp>(), 16);
        assert_eq!(std::mem::size_of::<libc::xdp_umem_reg>(), 32, "no padding");
        assert_eq!(std::mem::size_of::<libc::xdp_mmap_offsets>(), 128);
        assert_eq!(std::mem::size_of::<libc::xdp_desc>(), 16);
        assert_eq!(std::mem::size_of::<super::super::KernelStats>(), 48);
    }
}
