//! Which network namespace the calling thread is in, to keep XDP attachments inside the lab.

use std::os::unix::fs::MetadataExt;

/// Prefix of the lab's namespaces (see the `wirespeed-lab` crate).
const LAB_PREFIX: &str = "ws-";

/// The name of the `ws-*` namespace (under /run/netns) that the calling thread is in, or a
/// sentence saying why it is not in one.
pub(crate) fn current_lab_namespace() -> Result<String, String> {
    let me = std::fs::metadata("/proc/thread-self/ns/net")
        .map_err(|e| format!("cannot read this thread's network namespace: {e}"))?;
    let entries = std::fs::read_dir("/run/netns").map_err(|e| {
        format!("no named network namespaces ({e}); create a lab with `wirespeed lab up`")
    })?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with(LAB_PREFIX) {
            continue;
        }
        if let Ok(m) = std::fs::metadata(entry.path()) {
            if m.dev() == me.dev() && m.ino() == me.ino() {
                return Ok(name);
            }
        }
    }
    Err(format!(
        "this thread is not inside a `{LAB_PREFIX}*` lab network namespace"
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_test_runner_is_not_in_a_lab_namespace() {
        assert!(super::current_lab_namespace().is_err());
    }
}
