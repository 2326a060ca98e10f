//! wirespeed-bpf-build: the one way a crate's `build.rs` turns its BPF C into a libbpf-rs
//! skeleton.
//!
//! Every program gets the project's shared BPF headers (`include/ws/`: bounds-checked parsing,
//! VLAN tags, checksums, protocol constants) on its include path as `"ws/..."`. A program
//! written against the kernel's BTF asks for [`Bpf::vmlinux`] (this machine's `vmlinux.h`,
//! generated into `OUT_DIR`, never committed); one written against the uapi headers asks for
//! [`Bpf::uapi`].
//!
//! ```no_run
//! // build.rs
//! wirespeed_bpf_build::Bpf::new()
//!     .vmlinux()
//!     .skeleton("bpf/probe.bpf.c", "probe.skel.rs");
//! ```
//!
//! Build scripts fail by panicking, so every failure here panics with what to install or fix.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use libbpf_cargo::SkeletonBuilder;

/// The shared headers: `#include "ws/parse.h"` and friends.
pub fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("include")
}

/// A BPF build for the calling build script: output into `OUT_DIR`, clang arguments gathered.
#[derive(Debug, Clone)]
pub struct Bpf {
    out_dir: PathBuf,
    clang_args: Vec<String>,
}

impl Default for Bpf {
    fn default() -> Self {
        Bpf::new()
    }
}

impl Bpf {
    /// Starts a build with the shared headers on the include path and `-Wall`.
    pub fn new() -> Bpf {
        let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
        let include = include_dir();
        println!("cargo:rerun-if-changed={}", include.display());
        Bpf {
            out_dir,
            clang_args: vec![format!("-I{}", include.display()), "-Wall".into()],
        }
    }

    /// Where the skeletons (and `vmlinux.h`) are written: the build script's `OUT_DIR`.
    pub fn out_dir(&self) -> &Path {
        &self.out_dir
    }

    /// Kernel types from this machine's BTF: dumps `vmlinux.h` into `OUT_DIR` with bpftool and
    /// puts it on the include path, for programs that `#include "vmlinux.h"`.
    pub fn vmlinux(mut self) -> Bpf {
        let dump = Command::new("bpftool")
            .args([
                "btf",
                "dump",
                "file",
                "/sys/kernel/btf/vmlinux",
                "format",
                "c",
            ])
            .output()
            .expect("run bpftool (needs bpftool: run `make deps`)");
        assert!(
            dump.status.success(),
            "bpftool btf dump failed: {}",
            String::from_utf8_lossy(&dump.stderr)
        );
        std::fs::write(self.out_dir.join("vmlinux.h"), &dump.stdout).expect("write vmlinux.h");
        self.clang_args
            .push(format!("-I{}", self.out_dir.display()));
        self
    }

    /// The uapi headers (`<linux/bpf.h>` and friends). They include `<asm/types.h>`, which
    /// Debian keeps under the host's multiarch directory, where `clang -target bpf` does not
    /// look by itself.
    pub fn uapi(mut self) -> Bpf {
        let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
        self.clang_args
            .push(format!("-I/usr/include/{arch}-linux-gnu"));
        self
    }

    /// One more clang argument (a `-D`, a `-W`).
    pub fn clang_arg(mut self, arg: impl Into<String>) -> Bpf {
        self.clang_args.push(arg.into());
        self
    }

    /// Compiles `source` (relative to the crate) and writes its skeleton to
    /// `OUT_DIR/skeleton`. Cargo reruns the build script when anything beside the source
    /// changes.
    pub fn skeleton(&self, source: &str, skeleton: &str) -> &Bpf {
        SkeletonBuilder::new()
            .source(source)
            .clang_args(&self.clang_args)
            .build_and_generate(self.out_dir.join(skeleton))
            .unwrap_or_else(|e| {
                panic!("compile {source}: {e:#} (needs clang and libbpf-dev: run `make deps`)")
            });
        let dir = Path::new(source).parent().unwrap_or(Path::new("."));
        println!("cargo:rerun-if-changed={}", dir.display());
        self
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_shared_headers_ship_with_the_crate() {
        for h in ["parse.h", "csum.h", "proto.h"] {
            assert!(super::include_dir().join("ws").join(h).is_file(), "{h}");
        }
    }
}
