//! Named network namespaces and veth pairs, removed on drop.

use crate::{sh, Error, Result, NAME_PREFIX};

/// A named network namespace (`ip netns add`), deleted on drop.
#[derive(Debug)]
pub struct Netns {
    name: String,
    keep: bool,
}

impl Netns {
    /// Creates `name` (which must start with `ws-`) and brings its loopback up.
    /// A stale namespace of the same name, left by a crash, is replaced.
    pub fn create(name: &str) -> Result<Netns> {
        if !name.starts_with(NAME_PREFIX) {
            return Err(Error::Invalid(format!(
                "lab namespace `{name}` must start with `{NAME_PREFIX}`"
            )));
        }
        if name.len() > 15 {
            return Err(Error::Invalid(format!(
                "lab namespace `{name}` is longer than 15 characters"
            )));
        }
        let _ = sh("ip", &["netns", "del", name]);
        sh("ip", &["netns", "add", name])?;
        let ns = Netns {
            name: name.to_string(),
            keep: false,
        };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Adopts an existing namespace without creating it; it is still deleted on drop.
    pub fn adopt(name: &str) -> Netns {
        Netns {
            name: name.to_string(),
            keep: false,
        }
    }

    /// Leaves the namespace in place when this handle drops (for `lab up`).
    pub fn keep(mut self) -> String {
        self.keep = true;
        self.name.clone()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ip -n NAME args...`
    pub fn ip(&self, args: &[&str]) -> Result<String> {
        let mut full = vec!["-n", self.name.as_str()];
        full.extend_from_slice(args);
        sh("ip", &full)
    }

    /// Runs a program inside the namespace and waits for it.
    pub fn exec(&self, program: &str, args: &[&str]) -> Result<String> {
        let mut full = vec!["netns", "exec", self.name.as_str(), program];
        full.extend_from_slice(args);
        sh("ip", &full)
    }

    /// A `Command` that runs `program` inside the namespace (for long-running children).
    pub fn command(&self, program: &str) -> std::process::Command {
        let mut c = std::process::Command::new("ip");
        c.args(["netns", "exec", self.name.as_str(), program]);
        c
    }

    /// Sets a sysctl inside this namespace (net.* keys are per namespace).
    pub fn sysctl(&self, key: &str, value: &str) -> Result<String> {
        self.exec("sysctl", &["-qw", &format!("{key}={value}")])
    }

    /// Runs `f` on a new thread that has entered this namespace, so sockets it opens live
    /// there. The calling thread's namespace is untouched.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
        wirespeed_sys::netns::in_netns(&self.name, f).map_err(|source| Error::Io {
            what: "setns".into(),
            err: source,
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if !self.keep {
            // A process left inside (a lab's routing daemons, a crashed test's server) would
            // keep the namespace and its links alive after `ip netns del`.
            kill_processes_in(&self.name);
            let _ = sh("ip", &["netns", "del", &self.name]);
        }
    }
}

/// Stops every process whose network namespace is `name` (`ip netns pids`): SIGTERM, so that
/// daemons clean up after themselves (FRR's files under /var/tmp/frr), then SIGKILL for what
/// still runs after a second.
pub fn kill_processes_in(name: &str) {
    use wirespeed_sys::process::kill;
    use wirespeed_sys::signal::Signal;
    let pids: Vec<u32> = sh("ip", &["netns", "pids", name])
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    for &pid in &pids {
        let _ = kill(pid, Signal::Terminate);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while pids.iter().any(|&p| running(p)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for pid in pids.into_iter().filter(|&p| running(p)) {
        let _ = kill(pid, Signal::Kill);
    }
}

/// Whether `pid` runs: it exists and is not a zombie waiting for its parent.
pub fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()
                .map(|r| !r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// One end of a veth pair, as placed in a namespace.
#[derive(Debug, Clone)]
pub struct VethEnd {
    pub ns: String,
    pub ifname: String,
}

/// A veth pair whose two ends live in lab namespaces. Deleting one end deletes both, and
/// deleting a namespace deletes the ends inside it, so drop order does not matter.
#[derive(Debug)]
pub struct Veth {
    pub a: VethEnd,
    pub b: VethEnd,
}

impl Veth {
    /// Creates `a_if` in `a` and `b_if` in `b`, each with `queues` rx and tx queues, and sets
    /// both up. The pair is created in the first namespace so it never appears on the host.
    pub fn create(a: &Netns, a_if: &str, b: &Netns, b_if: &str, queues: u32) -> Result<Veth> {
        let q = queues.max(1).to_string();
        a.ip(&[
            "link",
            "add",
            a_if,
            "numrxqueues",
            &q,
            "numtxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            b_if,
            "netns",
            b.name(),
            "numrxqueues",
            &q,
            "numtxqueues",
            &q,
        ])?;
        a.ip(&["link", "set", a_if, "up"])?;
        b.ip(&["link", "set", b_if, "up"])?;
        Ok(Veth {
            a: VethEnd {
                ns: a.name().to_string(),
                ifname: a_if.to_string(),
            },
            b: VethEnd {
                ns: b.name().to_string(),
                ifname: b_if.to_string(),
            },
        })
    }
}

/// Adds `addr` (CIDR) to `ifname` inside `ns`.
pub fn add_addr(ns: &Netns, ifname: &str, addr: &str) -> Result<()> {
    let v6 = addr.contains(':');
    let mut args = vec![];
    if v6 {
        args.push("-6");
    }
    args.extend_from_slice(&["addr", "add", addr, "dev", ifname]);
    if v6 {
        args.push("nodad");
    }
    ns.ip(&args).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pair_pings_and_cleans_up() {
        crate::require_root();
        let name_a = format!("ws-t{}a", std::process::id() % 100000);
        let name_b = format!("ws-t{}b", std::process::id() % 100000);
        {
            let a = Netns::create(&name_a).unwrap();
            let b = Netns::create(&name_b).unwrap();
            let _v = Veth::create(&a, "v0", &b, "v1", 2).unwrap();
            add_addr(&a, "v0", "198.18.0.1/30").unwrap();
            add_addr(&b, "v1", "198.18.0.2/30").unwrap();
            a.exec("ping", &["-c1", "-W2", "198.18.0.2"]).unwrap();
        }
        let list = sh("ip", &["netns", "list"]).unwrap();
        assert!(
            !list.contains(&name_a) && !list.contains(&name_b),
            "namespaces left behind: {list}"
        );
    }

    #[test]
    fn rejects_names_outside_the_lab_prefix() {
        assert!(Netns::create("host0").is_err());
    }
}
