//! Threaded NAPI on the lab's veths: each queue's NAPI polls in a kthread that can be pinned to
//! a CPU, as a NIC queue's interrupt is pinned by its IRQ affinity.

use crate::netns::Netns;
use crate::sh;

/// A NAPI kthread (`napi/DEV-ID`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NapiThread {
    pub pid: u32,
    /// The device name as the kthread's name holds it (namespaces can repeat it).
    pub dev: String,
    pub id: u32,
}

/// The NAPI kthreads now running.
pub fn napi_threads() -> Vec<NapiThread> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            let (dev, id) = comm.trim().strip_prefix("napi/")?.rsplit_once('-')?;
            Some(NapiThread {
                pid,
                dev: dev.to_string(),
                id: id.parse().ok()?,
            })
        })
        .collect()
}

/// Pins the kthread `pid` to `cpu`.
pub fn pin(pid: u32, cpu: usize) -> crate::Result<()> {
    sh("taskset", &["-pc", &cpu.to_string(), &pid.to_string()]).map(|_| ())
}

/// Switches `dev` (in `ns`) to threaded NAPI and, with `cpus`, pins its threads (queue q to
/// `cpus[q % len]`: the threads appear in queue order, which their NAPI ids keep); without,
/// they stay on the kernel's default CPUs. The caller holds the lab lock, so the threads that
/// appear meanwhile are this device's. Returns a note of what was done, or why not, and the
/// threads' pids.
pub fn threaded(ns: &Netns, role: &str, dev: &str, cpus: Option<&[usize]>) -> (String, Vec<u32>) {
    let before: Vec<u32> = napi_threads().into_iter().map(|t| t.pid).collect();
    let path = format!("/sys/class/net/{dev}/threaded");
    if let Err(e) = ns.exec("sh", &["-c", &format!("echo 1 > {path}")]) {
        return (format!("{role}:{path}: not applied ({e})"), vec![]);
    }
    let mut mine: Vec<NapiThread> = napi_threads()
        .into_iter()
        .filter(|t| !before.contains(&t.pid) && t.dev == dev)
        .collect();
    mine.sort_by_key(|t| t.id);
    if mine.is_empty() {
        return (
            format!("{role}:{path}=1, but no NAPI thread appeared (is GRO on?)"),
            vec![],
        );
    }
    let placed: Vec<String> = mine
        .iter()
        .enumerate()
        .map(|(q, t)| match cpus {
            None => format!("napi {} (pid {}) on the default CPUs", t.id, t.pid),
            Some(cpus) => {
                let cpu = cpus[q % cpus.len()];
                match pin(t.pid, cpu) {
                    Ok(()) => format!("napi {} (pid {}) on CPU {cpu}", t.id, t.pid),
                    Err(e) => format!("napi {} (pid {}): not pinned ({e})", t.id, t.pid),
                }
            }
        })
        .collect();
    (
        format!("{role}:{path}=1: {}", placed.join(", ")),
        mine.iter().map(|t| t.pid).collect(),
    )
}
