use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    // The uapi headers include <asm/types.h>, which Debian keeps under the host's multiarch
    // directory; `clang -target bpf` does not look there by itself.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    let multiarch = format!("-I/usr/include/{arch}-linux-gnu");
    SkeletonBuilder::new()
        .source("bpf/bifurcate.bpf.c")
        .clang_args([multiarch.as_str(), "-Wall", "-Wno-unused-function"])
        .build_and_generate(out.join("bifurcate.skel.rs"))
        .expect("compile bpf/bifurcate.bpf.c (needs clang and libbpf-dev: run `make deps`)");
    println!("cargo:rerun-if-changed=bpf");

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
