//! Compiles bpf/probe.bpf.c into a libbpf-rs skeleton, with vmlinux.h from this kernel's BTF,
//! and turns the system's syscall header into a number -> name table.

use std::path::PathBuf;
use std::process::Command;

use libbpf_cargo::SkeletonBuilder;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());

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
        .expect("run bpftool (needs bpftool: run `make deps`)");
    assert!(
        dump.status.success(),
        "bpftool btf dump failed: {}",
        String::from_utf8_lossy(&dump.stderr)
    );
    std::fs::write(&vmlinux, &dump.stdout).expect("write vmlinux.h");

    let bpf_arch = match arch.as_str() {
        "x86_64" => "x86",
        "aarch64" => "arm64",
        other => other,
    };
    let include = format!("-I{}", out.display());
    let target_arch = format!("-D__TARGET_ARCH_{bpf_arch}");
    SkeletonBuilder::new()
        .source("bpf/probe.bpf.c")
        .clang_args([
            include.as_str(),
            target_arch.as_str(),
            "-Wall",
            "-Wno-unused-function",
        ])
        .build_and_generate(out.join("probe.skel.rs"))
        .expect("compile bpf/probe.bpf.c (needs clang and libbpf-dev: run `make deps`)");

    // Syscall names: parsed from the uapi header so the table matches this architecture.
    let header = format!("/usr/include/{arch}-linux-gnu/asm/unistd_64.h");
    let text = std::fs::read_to_string(&header).unwrap_or_default();
    let mut names = vec![String::new(); 512];
    for line in text.lines() {
        let mut it = line.split_whitespace();
        if let (Some("#define"), Some(name), Some(num)) = (it.next(), it.next(), it.next()) {
            if let (Some(n), Ok(num)) = (name.strip_prefix("__NR_"), num.parse::<usize>()) {
                if num < names.len() {
                    names[num] = n.to_string();
                }
            }
        }
    }
    let table: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    std::fs::write(
        out.join("syscall_names.rs"),
        format!(
            "pub const SYSCALL_NAMES: [&str; 512] = [{}];\n",
            table.join(",")
        ),
    )
    .expect("write syscall_names.rs");
    println!("cargo:rerun-if-changed=bpf");
    println!("cargo:rerun-if-changed={header}");
}
