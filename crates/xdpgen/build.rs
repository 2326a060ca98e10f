//! Compiles bpf/xdpgen.bpf.c (the traffic generator and sink) into a libbpf-rs skeleton, with
//! vmlinux.h from this kernel's BTF, and its `GEN_`/`SINK_` constants for the Rust side.

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
    bpf.skeleton("bpf/xdpgen.bpf.c", "xdpgen.skel.rs");
    bpf.defines(
        "bpf/xdpgen.bpf.c",
        "",
        &[("GEN_", "usize"), ("SINK_", "usize")],
        "xdpgen_consts.rs",
    );
}
