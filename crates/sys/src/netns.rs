//! Named network namespaces (`ip netns`, under /run/netns): entering one on a thread, running a
//! closure or a child process inside one, and the lab guard that tells which `ws-*`
//! namespace the calling thread is in.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::thread::JoinHandle;

/// Where `ip netns add` puts its namespaces.
pub const NETNS_DIR: &str = "/run/netns";

/// Prefix of every namespace the lab creates (see the `wirespeed-lab` crate).
pub const LAB_PREFIX: &str = "ws-";

fn open(name: &str) -> io::Result<File> {
    let path = format!("{NETNS_DIR}/{name}");
    File::open(&path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("network namespace {name}: open {path}: {e} (does it exist? `ip netns list`)"),
        )
    })
}

fn setns(file: &File) -> io::Result<()> {
    // SAFETY: setns takes no pointers; `file` keeps the namespace descriptor open.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Moves the calling thread into network namespace `name` for the rest of its life. Sockets
/// it opens from now on live there; the process's other threads are not affected.
pub fn enter(name: &str) -> io::Result<()> {
    let file = open(name)?;
    setns(&file).map_err(|e| io::Error::new(e.kind(), format!("setns into {name}: {e}")))
}

/// Starts `f` on a new thread inside namespace `name`; threads it starts inherit the
/// namespace. The handle yields the setns error, if any, before `f` ran.
pub fn spawn_in<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<JoinHandle<io::Result<T>>> {
    let file = open(name)?;
    let name = name.to_string();
    std::thread::Builder::new()
        .name(format!("netns {name}"))
        .spawn(move || {
            setns(&file)
                .map_err(|e| io::Error::new(e.kind(), format!("setns into {name}: {e}")))?;
            Ok(f())
        })
}

/// Runs `f` on a new thread inside namespace `name` and waits for it; the calling thread's
/// namespace is untouched. A panic in `f` is resumed here.
pub fn in_netns<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<T> {
    match spawn_in(name, f)?.join() {
        Ok(r) => r,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Runs a child process inside a named network namespace, like `ip netns exec` but without
/// the extra process (so the child's pid is the program's).
pub trait CommandExt {
    /// The child enters namespace `name` just before it execs.
    fn netns(&mut self, name: &str) -> io::Result<&mut Command>;
}

impl CommandExt for Command {
    fn netns(&mut self, name: &str) -> io::Result<&mut Command> {
        let file = open(name)?;
        let run = move || setns(&file);
        // SAFETY: the hook runs in the forked child before exec and only calls setns(2), which
        // is async-signal-safe; it allocates nothing and takes no locks.
        Ok(unsafe { std::os::unix::process::CommandExt::pre_exec(self, run) })
    }
}

/// The name of the `ws-*` namespace (under /run/netns) that the calling thread is in, or a
/// sentence saying why it is not in one. The guard for anything that must only touch lab
/// interfaces (XDP attachment, nftables rules).
pub fn current_lab_namespace() -> Result<String, String> {
    let me = std::fs::metadata("/proc/thread-self/ns/net")
        .map_err(|e| format!("cannot read this thread's network namespace: {e}"))?;
    let entries = std::fs::read_dir(NETNS_DIR).map_err(|e| {
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
    use super::*;

    #[test]
    fn the_test_runner_is_not_in_a_lab_namespace() {
        assert!(current_lab_namespace().is_err());
    }

    #[test]
    fn a_missing_namespace_is_named_in_the_error() {
        let e = in_netns("ws-no-such-ns", || ()).unwrap_err();
        assert!(e.to_string().contains("ws-no-such-ns"), "{e}");
        let e = Command::new("true").netns("ws-no-such-ns").unwrap_err();
        assert!(e.to_string().contains("ws-no-such-ns"), "{e}");
    }

    /// Creates a scratch lab namespace with `ip netns`, removed on drop.
    struct Scratch(String);
    impl Scratch {
        fn new(tag: &str) -> Scratch {
            assert!(
                crate::process::is_root(),
                "this test needs root (network namespaces): run it as root, e.g. `sudo make test`"
            );
            let name = format!("ws-sys{tag}{}", std::process::id() % 100_000);
            let _ = Command::new("ip").args(["netns", "del", &name]).status();
            let ok = Command::new("ip")
                .args(["netns", "add", &name])
                .status()
                .unwrap();
            assert!(ok.success(), "ip netns add {name}");
            Scratch(name)
        }
    }
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }

    #[test]
    fn closures_and_children_run_inside_the_namespace() {
        let ns = Scratch::new("a");
        let name = ns.0.clone();
        assert_eq!(
            in_netns(&ns.0, current_lab_namespace).unwrap(),
            Ok(name.clone())
        );
        // The calling thread stays where it was.
        assert!(current_lab_namespace().is_err());
        // A fresh namespace has only a loopback interface.
        let out = Command::new("ip")
            .args(["-o", "link", "show"])
            .netns(&ns.0)
            .unwrap()
            .output()
            .unwrap();
        assert!(out.status.success());
        let links = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(links.lines().count(), 1, "{links}");
        assert!(links.contains(": lo:"), "{links}");
        let links = in_netns(&ns.0, || {
            std::fs::read_to_string("/proc/thread-self/net/dev")
                .unwrap()
                .lines()
                .count()
        })
        .unwrap();
        assert_eq!(links, 3, "two header lines and lo");
    }
}
