//! What ships beside the binary: the systemd units pass `systemd-analyze verify` with this
//! build's binary in their ExecStart, and the Debian package that scripts/deb.sh builds from
//! it holds the binary, the units, the /etc/default conffiles, the man pages and the
//! completion, and depends on the packages of every library the binary links directly.
//!
//! No root needed: verify reads unit files, and dpkg-deb packs as root:root without it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const UNITS: [&str; 2] = ["wirespeed-fp", "wirespeed-lb"];
const BIN: &str = env!("CARGO_BIN_EXE_wirespeed");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ws-packaging-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("run {cmd:?}: {e} (make deps installs it)"));
    out
}

fn stdout_of(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `systemd-analyze verify` on `unit`, with its ExecStart pointed at this build's binary
/// (verify checks that the program exists) and man pages not looked up (they are installed
/// with the package). Returns whether it passed and what it said.
fn verify_unit(dir: &Path, name: &str, text: &str) -> (bool, String) {
    let text = text.replace("/usr/bin/wirespeed", BIN);
    let path = dir.join(format!("{name}.service"));
    std::fs::write(&path, text).unwrap();
    let out = run(Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

fn unit_text(name: &str) -> String {
    std::fs::read_to_string(repo().join(format!("packaging/systemd/{name}.service"))).unwrap()
}

#[test]
fn units_pass_systemd_analyze_verify() {
    let dir = scratch("units");
    for name in UNITS {
        let text = unit_text(name);
        assert!(text.contains("\nType=notify\n"), "{name}: not Type=notify");
        assert!(
            text.contains("ExecStart=/usr/bin/wirespeed "),
            "{name}: ExecStart moved"
        );
        let (ok, said) = verify_unit(&dir, name, &text);
        // Warnings (an unknown key, a bad value) do not fail verify: nothing may be said.
        assert!(ok && said.trim().is_empty(), "{name}: {said}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn verify_catches_a_misspelled_key_and_a_missing_program() {
    let dir = scratch("badunits");
    let text = unit_text("wirespeed-fp");
    let misspelled = text.replace("ProtectSystem=strict", "ProtectSystm=strict");
    let (_, said) = verify_unit(&dir, "wirespeed-fp", &misspelled);
    assert!(said.contains("ProtectSystm"), "verify said: {said}");
    let missing = text.replace("/usr/bin/wirespeed", "/nonexistent/wirespeed");
    let path = dir.join("wirespeed-fp.service");
    std::fs::write(&path, missing).unwrap();
    let out = run(Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path));
    assert!(
        !out.status.success(),
        "verify passed a unit whose program is missing"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The Debian packages that hold the shared libraries `bin` needs itself (its ELF NEEDED
/// entries, where `ldd` finds them); the libraries those pull in are their packages' business.
fn library_packages(bin: &str) -> BTreeSet<String> {
    let dynamic = stdout_of(Command::new("readelf").args(["-d", bin]));
    let needed: Vec<&str> = dynamic
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1)?.split(']').next())
        .collect();
    assert!(
        !needed.is_empty(),
        "{bin} needs no shared library?\n{dynamic}"
    );
    let ldd = stdout_of(Command::new("ldd").arg(bin));
    let mut pkgs = BTreeSet::new();
    for lib in needed {
        // The loader itself has no `=>` line; libc6 holds it.
        if lib.starts_with("ld-linux") {
            continue;
        }
        let path = ldd
            .lines()
            .find_map(|l| {
                let (name, rest) = l.split_once("=>")?;
                (name.trim() == lib).then(|| rest.split_whitespace().next().map(str::to_string))?
            })
            .unwrap_or_else(|| panic!("ldd does not find {lib}:\n{ldd}"));
        // Merged /usr: dpkg may know the file under either name.
        let found = [path.clone(), format!("/usr{path}")].iter().find_map(|p| {
            let out = run(Command::new("dpkg").args(["-S", p]));
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let pkg = text.split(':').next()?.trim().to_string();
            (out.status.success() && !pkg.is_empty()).then_some(pkg)
        });
        pkgs.insert(found.unwrap_or_else(|| panic!("no package holds {path}")));
    }
    pkgs
}

#[test]
fn the_debian_package_holds_what_it_should() {
    let out = scratch("deb");
    let deb = stdout_of(
        Command::new("bash")
            .arg(repo().join("scripts/deb.sh"))
            .arg(BIN)
            .arg(&out),
    );
    let deb = deb.trim();
    assert!(deb.ends_with(".deb") && Path::new(deb).exists(), "{deb}");

    let listing = stdout_of(Command::new("dpkg-deb").args(["-c", deb]));
    let files: BTreeSet<&str> = listing
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .collect();
    let mut want = vec![
        "./usr/bin/wirespeed".to_string(),
        "./usr/share/bash-completion/completions/wirespeed".into(),
        "./usr/share/doc/wirespeed/copyright".into(),
        "./usr/share/doc/wirespeed/changelog.gz".into(),
        "./usr/share/man/man1/wirespeed.1.gz".into(),
    ];
    for unit in UNITS {
        want.push(format!("./lib/systemd/system/{unit}.service"));
        want.push(format!("./etc/default/{unit}"));
        let sub = unit.trim_start_matches("wirespeed-");
        want.push(format!("./usr/share/man/man1/wirespeed-{sub}-run.1.gz"));
    }
    for f in &want {
        assert!(
            files.contains(f.as_str()),
            "{f} is not in the package:\n{listing}"
        );
    }
    // The hidden generators are no page of their own.
    assert!(
        !files.iter().any(|f| f.contains("wirespeed-man.1")),
        "{listing}"
    );

    let conffiles = stdout_of(Command::new("dpkg-deb").args(["-I", deb, "conffiles"]));
    let conffiles: BTreeSet<&str> = conffiles.lines().collect();
    assert_eq!(
        conffiles,
        BTreeSet::from(["/etc/default/wirespeed-fp", "/etc/default/wirespeed-lb"])
    );

    let depends = stdout_of(Command::new("dpkg-deb").args(["-f", deb, "Depends"]));
    let depended: BTreeSet<String> = depends
        .split(',')
        .filter_map(|d| d.split_whitespace().next())
        .map(str::to_string)
        .collect();
    let recommends = stdout_of(Command::new("dpkg-deb").args(["-f", deb, "Recommends"]));
    for tool in ["nftables", "ipset", "iptables"] {
        assert!(recommends.contains(tool), "Recommends: {recommends}");
    }
    let linked = library_packages(BIN);
    assert!(
        linked.is_subset(&depended),
        "the binary links {linked:?}; the package depends on {depends}"
    );

    // What went in is what the repository holds and what the binary generates.
    let stage = out.join("stage");
    for unit in UNITS {
        let shipped =
            std::fs::read_to_string(stage.join(format!("lib/systemd/system/{unit}.service")))
                .unwrap();
        assert_eq!(shipped, unit_text(unit));
    }
    let page =
        stdout_of(Command::new("zcat").arg(stage.join("usr/share/man/man1/wirespeed-fp-run.1.gz")));
    assert!(
        page.contains("allow\\-host"),
        "fp run's page lacks --allow-host"
    );
    let completion = stage.join("usr/share/bash-completion/completions/wirespeed");
    stdout_of(Command::new("bash").arg("-n").arg(&completion));
    for script in ["postinst", "prerm", "postrm"] {
        stdout_of(
            Command::new("sh")
                .arg("-n")
                .arg(stage.join("DEBIAN").join(script)),
        );
    }
    std::fs::remove_dir_all(&out).unwrap();
}
