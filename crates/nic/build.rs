use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let src = "bpf/bifurcate.bpf.c";
    SkeletonBuilder::new()
        .source(src)
        .clang_args([
            "-I/usr/include/x86_64-linux-gnu",
            "-Wall",
            "-Wno-unused-function",
        ])
        .build_and_generate(out.join("bifurcate.skel.rs"))
        .expect("compile bpf/bifurcate.bpf.c (needs clang and libbpf-dev: run `make deps`)");
    println!("cargo:rerun-if-changed=bpf");
}
