//! Memory mappings that the kernel shares with us: an anonymous region handed to the kernel
//! (io_uring's provided-buffer ring, AF_XDP's UMEM), or a socket's rings mapped at an offset.
//! What lives inside is the caller's business; this module only maps and unmaps.

use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;

/// One mapping, unmapped on drop. Page-aligned, as the kernel requires of both users.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a mapping is plain memory; who reads and writes it, and when, is up to its owner.
unsafe impl Send for Mapping {}

impl Mapping {
    /// A private anonymous read-write mapping of `len` bytes, zero-filled. `populate` faults
    /// the pages in now, so the first packets do not take the page faults.
    pub fn anonymous(len: usize, populate: bool) -> io::Result<Mapping> {
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        Self::map(
            len,
            flags | if populate { libc::MAP_POPULATE } else { 0 },
            -1,
            0,
        )
    }

    /// A shared read-write mapping of `len` bytes of `fd` at `offset` (an AF_XDP socket's
    /// ring, whose offset names which ring). `populate` faults the pages in now.
    pub fn shared(
        fd: &impl AsRawFd,
        len: usize,
        offset: u64,
        populate: bool,
    ) -> io::Result<Mapping> {
        let flags = libc::MAP_SHARED | if populate { libc::MAP_POPULATE } else { 0 };
        Self::map(len, flags, fd.as_raw_fd(), offset as libc::off_t)
    }

    fn map(
        len: usize,
        flags: libc::c_int,
        fd: libc::c_int,
        offset: libc::off_t,
    ) -> io::Result<Mapping> {
        // SAFETY: asks for a new mapping at an address of the kernel's choosing; nothing
        // existing is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Mapping { ptr, len })
    }

    /// The first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the region mapped in `map`, which nothing uses after its owner.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_anonymous_mapping_is_zeroed_and_page_aligned() {
        let m = Mapping::anonymous(8192, false).unwrap();
        assert_eq!(m.as_ptr() as usize % 4096, 0);
        // SAFETY: 8192 bytes were just mapped read-write.
        let bytes = unsafe { std::slice::from_raw_parts(m.as_ptr(), m.len()) };
        assert!(bytes.iter().all(|&b| b == 0));
    }
}
