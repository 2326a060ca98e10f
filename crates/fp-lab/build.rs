//! Compiles the traffic generator's BPF C (bpf/gen.bpf.c) and generates its libbpf-rs
//! skeleton. vmlinux.h comes from the build machine's kernel BTF and goes into OUT_DIR.

use std::env;
use std::path::PathBuf;
use std::process::Command;

use libbpf_cargo::SkeletonBuilder;

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let vmlinux = out.join("vmlinux.h");
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
        .expect("bpftool must be installed (scripts/install-deps.sh)");
    assert!(
        dump.status.success(),
        "bpftool btf dump failed: {}",
        String::from_utf8_lossy(&dump.stderr)
    );
    std::fs::write(&vmlinux, &dump.stdout).expect("write vmlinux.h");
    SkeletonBuilder::new()
        .source("bpf/gen.bpf.c")
        .clang_args([
            format!("-I{}", out.display()),
            "-Wall".to_string(),
            "-O2".to_string(),
        ])
        .build_and_generate(out.join("gen.skel.rs"))
        .unwrap_or_else(|e| panic!("compile bpf/gen.bpf.c: {e}"));
    println!("cargo:rerun-if-changed=bpf");
}
