//! Compiles bpf/probe.bpf.c into a libbpf-rs skeleton, with vmlinux.h from this kernel's BTF,
//! and turns the system's syscall header into a number -> name table.

fn main() {
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());

    let bpf_arch = match arch.as_str() {
        "x86_64" => "x86",
        "aarch64" => "arm64",
        other => other,
    };
    let bpf = wirespeed_bpf_build::Bpf::new()
        .vmlinux()
        .clang_arg(format!("-D__TARGET_ARCH_{bpf_arch}"))
        .clang_arg("-Wno-unused-function");
    bpf.skeleton("bpf/probe.bpf.c", "probe.skel.rs");
    bpf.defines(
        "bpf/probe_maps.h",
        "",
        &[("MAX_SYSCALLS", "usize")],
        "probe_consts.rs",
    );
    let out = bpf.out_dir();

    // Syscall names: parsed from the uapi header so the table matches this architecture.
    let header = format!("/usr/include/{arch}-linux-gnu/asm/unistd_64.h");
    let text = std::fs::read_to_string(&header).unwrap_or_default();
    // As many as the probe's syscall map holds (MAX_SYSCALLS in bpf/probe_maps.h).
    let max_syscalls: usize = std::fs::read_to_string("bpf/probe_maps.h")
        .expect("read bpf/probe_maps.h")
        .lines()
        .find_map(|l| l.strip_prefix("#define MAX_SYSCALLS "))
        .and_then(|v| v.trim().parse().ok())
        .expect("bpf/probe_maps.h defines MAX_SYSCALLS as a number");
    let mut names = vec![String::new(); max_syscalls];
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
            "pub const SYSCALL_NAMES: [&str; {max_syscalls}] = [{}];\n",
            table.join(",")
        ),
    )
    .expect("write syscall_names.rs");
    println!("cargo:rerun-if-changed={header}");
}
