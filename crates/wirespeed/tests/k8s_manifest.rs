//! The Kubernetes DaemonSet passes the offline, strict schema check
//! (deploy/kubernetes/check-schema.py against the vendored apps/v1 DaemonSet schema), the check
//! fails on a misspelled field at any depth and on a key given twice, and the manifest asks for
//! the same capabilities as the systemd units.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn manifest() -> String {
    std::fs::read_to_string(repo().join("deploy/kubernetes/wirespeed-fp-daemonset.yaml")).unwrap()
}

/// Debian's interpreter, whose jsonschema and yaml modules `make deps` installs.
fn check_schema(path: &Path) -> Output {
    Command::new("/usr/bin/python3")
        .arg(repo().join("deploy/kubernetes/check-schema.py"))
        .arg(path)
        .output()
        .expect("run /usr/bin/python3 (make deps installs python3-jsonschema and python3-yaml)")
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_daemonset_passes_the_schema_check() {
    let out = check_schema(&repo().join("deploy/kubernetes/wirespeed-fp-daemonset.yaml"));
    assert!(out.status.success(), "{}", said(&out));
}

#[test]
fn the_schema_check_fails_on_misspelled_fields_and_repeated_keys() {
    let dir = std::env::temp_dir().join(format!("ws-k8s-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = manifest();
    // (what to replace, its misspelling, what the error must name): one at the pod spec, one
    // deep in a container's probe, one in the DaemonSet spec.
    let cases = [
        ("hostNetwork:", "hostNetwrok:", "hostNetwrok"),
        (
            "initialDelaySeconds:",
            "initialDelaySecond:",
            "initialDelaySecond",
        ),
        ("updateStrategy:", "updateStrategey:", "updateStrategey"),
    ];
    for (good, bad, named) in cases {
        assert_eq!(
            text.matches(good).count(),
            1,
            "{good} is not once in the manifest"
        );
        let path = dir.join("misspelled.yaml");
        std::fs::write(&path, text.replace(good, bad)).unwrap();
        let out = check_schema(&path);
        assert!(!out.status.success(), "{bad} passed the check");
        assert!(said(&out).contains(named), "{}", said(&out));
    }
    let path = dir.join("repeated.yaml");
    std::fs::write(
        &path,
        text.replace(
            "hostNetwork: true",
            "hostNetwork: true\n      hostNetwork: false",
        ),
    )
    .unwrap();
    let out = check_schema(&path);
    assert!(!out.status.success(), "a repeated key passed the check");
    assert!(
        said(&out).contains("duplicate key 'hostNetwork'"),
        "{}",
        said(&out)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The container's added capabilities are the units' bounding set, and it drops the rest.
#[test]
fn the_daemonset_asks_for_the_units_capabilities() {
    let text = manifest();
    let caps_line = |prefix: &str| -> String {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(prefix).map(str::to_string))
            .unwrap_or_else(|| panic!("no `{prefix}` line in the manifest"))
    };
    let list = |s: String| -> BTreeSet<String> {
        s.trim()
            .trim_matches(|c| c == '[' || c == ']')
            .split(',')
            .map(|c| c.trim().trim_matches('"').to_string())
            .collect()
    };
    assert_eq!(
        list(caps_line("drop:")),
        BTreeSet::from(["ALL".to_string()])
    );
    let added = list(caps_line("add:"));
    for unit in ["wirespeed-fp", "wirespeed-lb"] {
        let path = repo().join(format!("packaging/systemd/{unit}.service"));
        let unit_text = std::fs::read_to_string(path).unwrap();
        let bounding: BTreeSet<String> = unit_text
            .lines()
            .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
            .expect("the unit has a CapabilityBoundingSet")
            .split_whitespace()
            .map(|c| c.trim_start_matches("CAP_").to_string())
            .collect();
        assert_eq!(added, bounding, "{unit}");
    }
    assert!(!text.contains("privileged: true"));
}
