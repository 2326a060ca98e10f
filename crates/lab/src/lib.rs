//! Lab building blocks: named network namespaces and veth pairs that exist only inside them.
//!
//! Everything created here is removed on `Drop`, so a test that panics still cleans up. Names
//! carry the `ws-` prefix so that `wirespeed lab down --all` can find leftovers after a crash.
//! Addresses must come from 198.18.0.0/15 or fd00::/8; nothing here touches the host's own
//! interfaces.

#![deny(unsafe_code)]

pub mod daemon;
pub mod impair;
pub mod lb_cluster;
pub mod napi;
pub mod netns;
pub mod plan;
pub mod state;
pub mod topo;

pub use netns::{Netns, Veth};
pub use topo::{Lab, LabSpec, Node, Profile, RxModel, Topology};

/// Prefix of every namespace and link the lab creates.
pub const NAME_PREFIX: &str = "ws-";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("`{cmd}` failed: {stderr}")]
    Command { cmd: String, stderr: String },
    #[error("could not run `{cmd}`: {err} (is iproute2 installed? run `make deps`)")]
    Spawn { cmd: String, err: std::io::Error },
    #[error("{0}")]
    Invalid(String),
    #[error("{what}: {err}")]
    Io { what: String, err: std::io::Error },
}

pub type Result<T> = std::result::Result<T, Error>;

/// Runs a program to completion and returns its stdout, or an error that carries its stderr.
pub fn sh(program: &str, args: &[&str]) -> Result<String> {
    let cmd = format!("{program} {}", args.join(" "));
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .map_err(|source| Error::Spawn {
            cmd: cmd.clone(),
            err: source,
        })?;
    if !out.status.success() {
        return Err(Error::Command {
            cmd,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// True when the process runs as root. Privileged tests call [`require_root`] instead of
/// skipping: in CI they must run.
pub fn is_root() -> bool {
    wirespeed_sys::process::is_root()
}

/// Panics with an actionable message unless running as root.
pub fn require_root() {
    assert!(
        is_root(),
        "this test needs root (network namespaces): run it as root, e.g. `sudo make test`"
    );
}
