//! The BPF side of the fast path: the `bpf(2)` commands libbpf-rs has no safe call for, and a
//! `poll(2)` over the few netlink sockets the fast-path daemon watches, and loading an XDP
//! program from raw instructions.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr;

use libbpf_rs::libbpf_sys;
use std::time::Duration;

/// Waits until one of `fds` is readable or `timeout` passes; returns which are readable.
/// `None` entries are skipped (and reported not readable). An interrupted wait returns
/// nothing readable.
pub fn poll_readable(fds: &[Option<BorrowedFd<'_>>], timeout: Duration) -> Vec<bool> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            // poll(2) skips a negative fd.
            fd: fd.map_or(-1, |fd| fd.as_raw_fd()),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: pfds is a valid array of pfds.len() pollfds for the duration of the call; the
    // fds are borrowed, so they stay open until poll returns.
    let rc = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    if rc <= 0 {
        return vec![false; fds.len()];
    }
    pfds.iter().map(|p| p.revents & libc::POLLIN != 0).collect()
}

/// Whether `fd` has input waiting, without blocking.
pub fn readable(fd: BorrowedFd<'_>) -> bool {
    poll_readable(&[Some(fd)], Duration::ZERO)[0]
}

/// One `BPF_PROG_RUN` of the XDP program `prog` with live frames
/// (`BPF_F_TEST_XDP_LIVE_FRAMES`): `frame` goes `repeat` times through the program, in batches
/// of `batch_size`, and what it returns (XDP_TX, XDP_REDIRECT) really happens. `ctx` is the
/// `struct xdp_md` to start from (ingress ifindex, ...). A signal cuts the run short:
/// `ErrorKind::Interrupted`, with how far it got unknown.
pub fn test_run_live(
    prog: BorrowedFd<'_>,
    frame: &[u8],
    ctx: &[u8],
    repeat: u32,
    batch_size: u32,
) -> io::Result<()> {
    const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;
    let mut opts = libbpf_sys::bpf_test_run_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _,
        data_in: frame.as_ptr().cast(),
        data_size_in: frame.len() as u32,
        // Empty: no context at all. A non-null pointer, even with size 0, makes the kernel
        // build a zeroed one, which an XDP run refuses (its data_end is not the frame's end).
        ctx_in: if ctx.is_empty() {
            std::ptr::null()
        } else {
            ctx.as_ptr().cast()
        },
        ctx_size_in: ctx.len() as u32,
        repeat: repeat as i32,
        flags: BPF_F_TEST_XDP_LIVE_FRAMES,
        batch_size,
        ..Default::default()
    };
    // SAFETY: opts is a valid bpf_test_run_opts whose input pointers borrow `frame` and `ctx`
    // for the duration of the call and whose output pointers are null (nothing is written
    // back); `prog` is a borrowed, open program fd.
    let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(prog.as_raw_fd(), &mut opts) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(-rc));
    }
    Ok(())
}

/// One `BPF_PROG_TEST_RUN` of `prog` on `frame` with the context `ctx`: returns the program's
/// return value and how many bytes of `out` hold the frame as the program left it.
pub fn test_run(
    prog: BorrowedFd<'_>,
    frame: &[u8],
    ctx: &[u8],
    out: &mut [u8],
) -> io::Result<(u32, usize)> {
    test_run_ctx(prog, frame, ctx, out, &mut [])
}

/// As [`test_run`], with the context as the program left it written into `ctx_out` (an skb's
/// priority, mark, ...).
pub fn test_run_ctx(
    prog: BorrowedFd<'_>,
    frame: &[u8],
    ctx: &[u8],
    out: &mut [u8],
    ctx_out: &mut [u8],
) -> io::Result<(u32, usize)> {
    let r = test_run_once(prog, frame, ctx, out, ctx_out)?;
    Ok((r.verdict, r.len))
}

/// What one `BPF_PROG_TEST_RUN` returned.
#[derive(Clone, Copy, Debug)]
pub struct TestRun {
    /// The program's return value.
    pub verdict: u32,
    /// Bytes of `out` that hold the frame as the program left it.
    pub len: usize,
    /// The kernel's clock around the program's run alone (the frame's setup and copies
    /// excluded), in nanoseconds: what a per-packet cost benchmark sums.
    pub duration_ns: u32,
}

/// One `BPF_PROG_TEST_RUN` of `prog` on `frame`, with everything the kernel reports.
pub fn test_run_once(
    prog: BorrowedFd<'_>,
    frame: &[u8],
    ctx: &[u8],
    out: &mut [u8],
    ctx_out: &mut [u8],
) -> io::Result<TestRun> {
    let mut opts = libbpf_sys::bpf_test_run_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_test_run_opts>() as _,
        data_in: frame.as_ptr().cast(),
        data_size_in: frame.len() as u32,
        data_out: out.as_mut_ptr().cast(),
        data_size_out: out.len() as u32,
        // Empty: no context at all. A non-null pointer, even with size 0, makes the kernel
        // build a zeroed one, which an XDP run refuses (its data_end is not the frame's end).
        ctx_in: if ctx.is_empty() {
            std::ptr::null()
        } else {
            ctx.as_ptr().cast()
        },
        ctx_size_in: ctx.len() as u32,
        // Empty: nothing is written back.
        ctx_out: if ctx_out.is_empty() {
            std::ptr::null_mut()
        } else {
            ctx_out.as_mut_ptr().cast()
        },
        ctx_size_out: ctx_out.len() as u32,
        // One run: a program that rewrites its frame would see its own output on a second.
        repeat: 1,
        ..Default::default()
    };
    // SAFETY: opts points to `frame` and `ctx` (read) and `out` and `ctx_out` (written, at
    // most their stated lengths), all borrowed across the call; `prog` is an open program fd.
    let rc = unsafe { libbpf_sys::bpf_prog_test_run_opts(prog.as_raw_fd(), &mut opts) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(-rc));
    }
    Ok(TestRun {
        verdict: opts.retval,
        len: (opts.data_size_out as usize).min(out.len()),
        duration_ns: opts.duration,
    })
}

/// `BPF_LINK_CREATE`: attaches `prog` to `ifindex` at `attach_type` (BPF_XDP,
/// BPF_TCX_INGRESS, ...) with `flags`; the returned link detaches the program when closed.
pub fn link_create(
    prog: BorrowedFd<'_>,
    ifindex: u32,
    attach_type: libbpf_sys::bpf_attach_type,
    flags: u32,
) -> io::Result<OwnedFd> {
    let opts = libbpf_sys::bpf_link_create_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_link_create_opts>() as _,
        flags,
        ..Default::default()
    };
    // SAFETY: plain syscall wrapper; `prog` is an open program fd and opts lives across the call.
    let fd = unsafe {
        libbpf_sys::bpf_link_create(prog.as_raw_fd(), ifindex as i32, attach_type, &opts)
    };
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(-fd));
    }
    // SAFETY: bpf_link_create returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `BPF_LINK_UPDATE`: makes `link` run `prog` instead, atomically.
pub fn link_update(link: BorrowedFd<'_>, prog: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: both fds are open; a null opts means "no expected old program".
    let rc =
        unsafe { libbpf_sys::bpf_link_update(link.as_raw_fd(), prog.as_raw_fd(), ptr::null()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(-rc));
    }
    Ok(())
}

/// `BPF_PROG_QUERY`: how many programs are attached to `ifindex` at `attach_type`.
pub fn prog_count(ifindex: u32, attach_type: libbpf_sys::bpf_attach_type) -> io::Result<u32> {
    let mut q = libbpf_sys::bpf_prog_query_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_prog_query_opts>() as _,
        ..Default::default()
    };
    // SAFETY: q is valid for writes and asks for no id arrays: the kernel fills the count.
    let rc = unsafe { libbpf_sys::bpf_prog_query_opts(ifindex as i32, attach_type, &mut q) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(-rc));
    }
    // SAFETY: both members of the union are the same u32 count.
    Ok(unsafe { q.__bindgen_anon_1.count })
}

/// What `bpf_xdp_query` says of `ifindex`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XdpAttached {
    /// The program attached in any mode (0: none).
    pub prog_id: u32,
    /// The native-mode program (0: none).
    pub drv_prog_id: u32,
    /// enum xdp_attach_mode: 1 native, 2 generic, 3 offloaded, 4 several.
    pub attach_mode: u8,
}

/// The XDP programs attached to `ifindex`.
pub fn xdp_query(ifindex: u32) -> io::Result<XdpAttached> {
    let mut q = libbpf_sys::bpf_xdp_query_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_xdp_query_opts>() as _,
        ..Default::default()
    };
    // SAFETY: q is valid for writes.
    let rc = unsafe { libbpf_sys::bpf_xdp_query(ifindex as i32, 0, &mut q) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(-rc));
    }
    Ok(XdpAttached {
        prog_id: q.prog_id,
        drv_prog_id: q.drv_prog_id,
        attach_mode: q.attach_mode,
    })
}

/// The kernel's id of the program `prog` (BPF_OBJ_GET_INFO_BY_FD), as `xdp_query` reports
/// attached programs.
pub fn prog_id(prog: BorrowedFd<'_>) -> io::Result<u32> {
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of_val(&info) as u32;
    // SAFETY: info is valid for writes of len bytes and asks for no arrays.
    let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(prog.as_raw_fd(), &mut info, &mut len) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(-rc));
    }
    Ok(info.id)
}

/// The name of the program `prog` (BPF_OBJ_GET_INFO_BY_FD), without the trailing NULs.
pub fn prog_name(prog: BorrowedFd<'_>) -> io::Result<Vec<u8>> {
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of_val(&info) as u32;
    // SAFETY: info is valid for writes of len bytes and asks for no arrays.
    let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(prog.as_raw_fd(), &mut info, &mut len) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(-rc));
    }
    Ok(info
        .name
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect())
}

/// Detaches the non-link XDP program attached to `ifindex` in the mode of `flags`.
pub fn xdp_detach(ifindex: u32, flags: u32) -> io::Result<()> {
    // SAFETY: plain syscall wrapper; a null opts is allowed.
    let rc = unsafe { libbpf_sys::bpf_xdp_detach(ifindex as i32, flags, ptr::null()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(-rc));
    }
    Ok(())
}

/// A BPF map key or value type whose bytes are exactly what the map holds.
///
/// # Safety
/// Only for `#[repr(C)]` types with no implicit padding, no pointers and no invalid bit
/// patterns: the C structs libbpf-cargo generates from a program's BTF, which spell their
/// padding out as fields.
pub unsafe trait MapBytes: Copy + 'static {}

/// The bytes of a map key or value, as the kernel reads them.
pub fn bytes_of<T: MapBytes>(v: &T) -> &[u8] {
    // SAFETY: T: MapBytes is plain data without padding, so all size_of::<T>() bytes behind
    // the reference are initialized; the slice borrows `v`.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

/// A map key or value read back from the bytes the kernel wrote (None when `b` is shorter).
pub fn from_bytes<T: MapBytes>(b: &[u8]) -> Option<T> {
    if b.len() < std::mem::size_of::<T>() {
        return None;
    }
    // SAFETY: T: MapBytes has no invalid bit patterns, and `b` holds at least size_of::<T>()
    // initialized bytes; the read makes no alignment assumption.
    Some(unsafe { ptr::read_unaligned(b.as_ptr().cast::<T>()) })
}

/// The clock `bpf_ktime_get_ns` reads (CLOCK_MONOTONIC), in nanoseconds: for comparing the
/// times a program stores in its maps with now.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec that the call writes; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Walks every entry of the hash map `map` with `BPF_MAP_LOOKUP_BATCH`, `batch` entries a
/// call, handing each key and value (`key_size`, `value_size` bytes) to `visit`: a few
/// system calls for a whole map instead of two per entry. Entries inserted or deleted
/// meanwhile may or may not be seen, as with any walk of a live map. Returns how many
/// entries were visited.
pub fn map_walk_batch(
    map: BorrowedFd<'_>,
    key_size: usize,
    value_size: usize,
    batch: u32,
    mut visit: impl FnMut(&[u8], &[u8]),
) -> io::Result<usize> {
    let mut room = batch.max(1);
    let mut keys = vec![0u8; key_size * room as usize];
    let mut values = vec![0u8; value_size * room as usize];
    // The position token: a bucket index for hash maps; key-sized is always enough.
    let mut token_in = vec![0u8; key_size.max(8)];
    let mut token_out = vec![0u8; key_size.max(8)];
    let mut first = true;
    let mut visited = 0;
    loop {
        let mut count = room;
        let opts = libbpf_sys::bpf_map_batch_opts {
            sz: std::mem::size_of::<libbpf_sys::bpf_map_batch_opts>() as _,
            ..Default::default()
        };
        // SAFETY: keys and values hold `room` entries each and count says so; both tokens
        // are key-sized buffers; everything outlives the call, and `map` is an open map fd.
        let rc = unsafe {
            libbpf_sys::bpf_map_lookup_batch(
                map.as_raw_fd(),
                if first {
                    ptr::null_mut()
                } else {
                    token_in.as_mut_ptr().cast()
                },
                token_out.as_mut_ptr().cast(),
                keys.as_mut_ptr().cast(),
                values.as_mut_ptr().cast(),
                &mut count,
                &opts,
            )
        };
        let err = if rc < 0 { -rc } else { 0 };
        if err == libc::ENOSPC && count == 0 {
            // One bucket holds more entries than a batch: a larger batch, same position.
            room *= 2;
            keys.resize(key_size * room as usize, 0);
            values.resize(value_size * room as usize, 0);
            continue;
        }
        if err != 0 && err != libc::ENOENT {
            return Err(io::Error::from_raw_os_error(err));
        }
        for i in 0..count.min(room) as usize {
            visit(
                &keys[i * key_size..(i + 1) * key_size],
                &values[i * value_size..(i + 1) * value_size],
            );
        }
        visited += count as usize;
        if err == libc::ENOENT {
            return Ok(visited);
        }
        token_in.copy_from_slice(&token_out);
        first = false;
    }
}

/// Loads an XDP program from raw instructions (one `u64` each: code, registers, offset and
/// immediate, little-endian) under `name`, GPL-licensed, with `prog_flags`
/// (`BPF_F_XDP_HAS_FRAGS`, ...): for the few-instruction programs that need no object file.
pub fn load_xdp_insns(name: &CStr, insns: &[u64], prog_flags: u32) -> io::Result<OwnedFd> {
    load_insns(libbpf_sys::BPF_PROG_TYPE_XDP, name, insns, prog_flags)
}

/// `load_xdp_insns` for a program of any type (`BPF_PROG_TYPE_SCHED_CLS`, ...).
pub fn load_insns(
    prog_type: libbpf_sys::bpf_prog_type,
    name: &CStr,
    insns: &[u64],
    prog_flags: u32,
) -> io::Result<OwnedFd> {
    let mut opts = libbpf_sys::bpf_prog_load_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_prog_load_opts>() as _,
        prog_flags,
        ..Default::default()
    };
    // SAFETY: the instructions, the names and the options outlive the call; libbpf copies
    // them into the kernel and keeps no pointer.
    let fd = unsafe {
        libbpf_sys::bpf_prog_load(
            prog_type,
            name.as_ptr(),
            c"GPL".as_ptr(),
            insns.as_ptr().cast(),
            insns.len() as _,
            &mut opts,
        )
    };
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(-fd));
    }
    // SAFETY: `fd` is a new program descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
