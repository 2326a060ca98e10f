//! wirespeed-sys: every system call of the project, behind safe functions (docs/ARCHITECTURE.md,
//! "Layout": no other crate calls `libc` functions).
//!
//! A leaf crate: it depends on nothing of ours, so every crate (and every test) can use it.
//! Each module wraps one kind of kernel interface; where socket2 or libbpf-rs already offers a
//! safe call, the other crates use that directly and nothing is wrapped here.

pub mod alloc;
pub mod bpf;
pub mod epoll;
pub mod ethtool;
pub mod eventfd;
pub mod iface;
pub mod mmap;
pub mod mount;
pub mod netns;
pub mod nftables;
pub mod notify;
pub mod packet;
pub mod process;
pub mod random;
pub mod signal;
pub mod socket;
pub mod tap;
pub mod xsk;

/// A syscall's `int` result: the OS error when negative.
pub fn cvt(rc: libc::c_int) -> std::io::Result<libc::c_int> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// A syscall's `ssize_t` result: the OS error when negative, else the byte count.
pub fn cvt_size(rc: libc::ssize_t) -> std::io::Result<usize> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}
