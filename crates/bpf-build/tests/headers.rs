//! The shared headers compile the same under both ways our programs get kernel types: the
//! uapi headers (nic) and this kernel's vmlinux.h (fp, bench). Needs clang and bpftool, as the
//! build does.

use std::path::Path;
use std::process::Command;

fn clang(source: &str, extra_include: &Path) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/headers");
    let out = std::env::temp_dir().join(format!("ws-bpf-headers-{}.o", std::process::id()));
    let status = Command::new("clang")
        .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror", "-c"])
        .arg(format!(
            "-I{}",
            wirespeed_bpf_build::include_dir().display()
        ))
        .arg(format!("-I{}", extra_include.display()))
        .arg(dir.join(source))
        .arg("-o")
        .arg(&out)
        .status()
        .expect("run clang (needs clang: run `make deps`)");
    let _ = std::fs::remove_file(&out);
    assert!(status.success(), "clang {source}");
}

#[test]
fn with_the_uapi_headers() {
    let arch = std::env::consts::ARCH;
    clang(
        "uapi.bpf.c",
        Path::new(&format!("/usr/include/{arch}-linux-gnu")),
    );
}

#[test]
fn with_vmlinux_h() {
    let dir = std::env::temp_dir().join(format!("ws-bpf-vmlinux-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
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
    assert!(dump.status.success(), "bpftool btf dump");
    std::fs::write(dir.join("vmlinux.h"), &dump.stdout).unwrap();
    clang("vmlinux.bpf.c", &dir);
    let _ = std::fs::remove_dir_all(&dir);
}
