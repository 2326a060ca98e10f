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
}
