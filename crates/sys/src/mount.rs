//! Reaching a file system that our mount namespace does not show: the cgroup2 hierarchy under
//! `ip netns exec`, which gives its command a mount namespace of its own with /sys mounted
//! anew. Mounted for a moment on a directory of our own, opened, and detached again: the open
//! directory keeps what it names.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

/// Opens the root of the cgroup2 hierarchy by mounting it at `dir` (created, and removed
/// again after the mount is detached).
pub fn open_cgroup2_root(dir: &Path) -> io::Result<File> {
    std::fs::create_dir_all(dir)?;
    let target = cstr(dir)?;
    let fstype = CString::new("cgroup2").expect("no NUL");
    // SAFETY: every pointer is a NUL-terminated string that outlives the call; no data.
    let rc = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        let _ = std::fs::remove_dir(dir);
        return Err(e);
    }
    let opened = File::open(dir);
    // SAFETY: a NUL-terminated path that outlives the call.
    unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    let _ = std::fs::remove_dir(dir);
    opened
}
