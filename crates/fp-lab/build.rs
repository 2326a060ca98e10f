//! Compiles the traffic generator's BPF C (bpf/gen.bpf.c, against this kernel's vmlinux.h,
//! generated into OUT_DIR) with the project's shared BPF headers and generates its libbpf-rs
//! skeleton.

fn main() {
    wirespeed_bpf_build::Bpf::new()
        .vmlinux()
        .skeleton("bpf/gen.bpf.c", "gen.skel.rs");
}
