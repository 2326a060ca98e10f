//! libnftables, loaded at run time with dlopen: the fast path reads the nftables ruleset
//! in-process (the same JSON as `nft -j list ruleset`) instead of spawning `nft` for every
//! change. Where the library is missing, `Nftables::open` says so and the caller falls back to
//! the `nft` command.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};

/// enum nft_ctx_output_flags: NFT_CTX_OUTPUT_JSON
const OUTPUT_JSON: c_uint = 1 << 4;

type CtxNew = unsafe extern "C" fn(c_uint) -> *mut c_void;
type CtxFree = unsafe extern "C" fn(*mut c_void);
type SetFlags = unsafe extern "C" fn(*mut c_void, c_uint);
type Buffer = unsafe extern "C" fn(*mut c_void) -> c_int;
type GetBuffer = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type RunCmd = unsafe extern "C" fn(*mut c_void, *const c_char) -> c_int;

/// A libnftables context. The netlink socket it opens lives in the network namespace of the
/// thread that first runs a command, so create and use it on the daemon's thread.
pub struct Nftables {
    lib: *mut c_void,
    ctx: *mut c_void,
    ctx_free: CtxFree,
    run: RunCmd,
    output: GetBuffer,
    error: GetBuffer,
}

unsafe fn sym<T: Copy>(lib: *mut c_void, name: &str) -> Option<T> {
    let c = CString::new(name).ok()?;
    // SAFETY: lib is a live dlopen handle; the caller names a function of type T.
    let p = unsafe { libc::dlsym(lib, c.as_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: a function pointer and a data pointer have the same size on Linux.
    Some(unsafe { std::mem::transmute_copy(&p) })
}

impl Nftables {
    /// Loads libnftables.so.1 and sets up a context with JSON output captured in a buffer.
    pub fn open() -> Option<Nftables> {
        let name = CString::new("libnftables.so.1").ok()?;
        // SAFETY: dlopen of a system library by soname.
        let lib = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if lib.is_null() {
            return None;
        }
        // SAFETY: the symbols are libnftables' documented API (libnftables(3)).
        unsafe {
            let (Some(new), Some(free), Some(flags), Some(buf_out), Some(buf_err)) = (
                sym::<CtxNew>(lib, "nft_ctx_new"),
                sym::<CtxFree>(lib, "nft_ctx_free"),
                sym::<SetFlags>(lib, "nft_ctx_output_set_flags"),
                sym::<Buffer>(lib, "nft_ctx_buffer_output"),
                sym::<Buffer>(lib, "nft_ctx_buffer_error"),
            ) else {
                libc::dlclose(lib);
                return None;
            };
            let (Some(run), Some(output), Some(error)) = (
                sym::<RunCmd>(lib, "nft_run_cmd_from_buffer"),
                sym::<GetBuffer>(lib, "nft_ctx_get_output_buffer"),
                sym::<GetBuffer>(lib, "nft_ctx_get_error_buffer"),
            ) else {
                libc::dlclose(lib);
                return None;
            };
            let ctx = new(0);
            if ctx.is_null() {
                libc::dlclose(lib);
                return None;
            }
            flags(ctx, OUTPUT_JSON);
            if buf_out(ctx) != 0 || buf_err(ctx) != 0 {
                free(ctx);
                libc::dlclose(lib);
                return None;
            }
            Some(Nftables {
                lib,
                ctx,
                ctx_free: free,
                run,
                output,
                error,
            })
        }
    }

    /// Runs one nft command (e.g. `list ruleset`); returns its output (JSON), or the error
    /// text libnftables gave.
    pub fn run(&mut self, command: &str) -> Result<String, String> {
        let cmd = CString::new(command).map_err(|_| "a NUL in the nft command".to_string())?;
        // SAFETY: ctx is live; the buffers returned stay valid until the next command, and
        // are copied out before it.
        unsafe {
            let rc = (self.run)(self.ctx, cmd.as_ptr());
            let take = |p: *const c_char| {
                if p.is_null() {
                    String::new()
                } else {
                    CStr::from_ptr(p).to_string_lossy().into_owned()
                }
            };
            let out = take((self.output)(self.ctx));
            let err = take((self.error)(self.ctx));
            if rc != 0 {
                return Err(err.trim().to_string());
            }
            Ok(out)
        }
    }
}

impl Drop for Nftables {
    fn drop(&mut self) {
        // SAFETY: ctx and lib were created by open() and are freed once.
        unsafe {
            (self.ctx_free)(self.ctx);
            libc::dlclose(self.lib);
        }
    }
}
