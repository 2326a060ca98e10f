//! Random bytes from the kernel (getrandom(2)).

use std::io;

/// Fills `buf` from the kernel's CSPRNG (blocks only until it is seeded at boot).
pub fn fill(buf: &mut [u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: the kernel writes at most `rest.len()` bytes into the live slice.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr() as *mut libc::c_void, rest.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        done += n as usize;
    }
    Ok(())
}

/// A random u64 from the kernel.
pub fn u64() -> io::Result<u64> {
    let mut b = [0u8; 8];
    fill(&mut b)?;
    Ok(u64::from_ne_bytes(b))
}

#[cfg(test)]
mod tests {
    #[test]
    fn two_draws_differ() {
        assert_ne!(super::u64().unwrap(), super::u64().unwrap());
    }
}
