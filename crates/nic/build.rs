//! Compiles bpf/bifurcate.bpf.c (written against the uapi headers) into a libbpf-rs skeleton,
//! and with the `dpdk` feature the DPDK shim.

fn main() {
    wirespeed_bpf_build::Bpf::new()
        .uapi()
        .clang_arg("-Wno-unused-function")
        .skeleton("bpf/bifurcate.bpf.c", "bifurcate.skel.rs")
        .defines(
            "bpf/maps.h",
            "",
            &[("MAX_QUEUES", "u32"), ("MAX_SERVED_PORTS", "usize")],
            "bifurcate_consts.rs",
        );

    #[cfg(feature = "dpdk")]
    build_dpdk_shim();
}

/// Compiles dpdk/shim.c against the distribution's DPDK (flags from `pkg-config libdpdk`).
#[cfg(feature = "dpdk")]
fn build_dpdk_shim() {
    let pkg = |arg: &str| -> Vec<String> {
        let out = std::process::Command::new("pkg-config")
            .args([arg, "libdpdk"])
            .output()
            .expect("run pkg-config (install pkg-config and libdpdk-dev: `make deps`)");
        assert!(
            out.status.success(),
            "pkg-config {arg} libdpdk failed: install libdpdk-dev (`make deps`)"
        );
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let mut build = cc::Build::new();
    build.file("dpdk/shim.c").warnings(true);
    for flag in pkg("--cflags") {
        build.flag(&flag);
    }
    build.compile("ws_dpdk_shim");
    for flag in pkg("--libs") {
        if let Some(lib) = flag.strip_prefix("-l") {
            println!("cargo:rustc-link-lib=dylib={lib}");
        } else if let Some(dir) = flag.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
        }
    }
    println!("cargo:rerun-if-changed=dpdk");
}
