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
    confine(pid, &[cpu])
}

/// Lets the kthread `pid` run on `cpus` only.
pub fn confine(pid: u32, cpus: &[usize]) -> crate::Result<()> {
    let list: Vec<String> = cpus.iter().map(usize::to_string).collect();
    sh("taskset", &["-pc", &list.join(","), &pid.to_string()]).map(|_| ())
}

/// Where a device's NAPI threads run.
#[derive(Clone, Copy, Debug)]
pub enum Placement<'a> {
    /// Where the kernel puts them.
    Default,
    /// Queue q's thread on `cpus[q % len]`, as IRQ affinity pins each queue's interrupt.
    OnePerQueue(&'a [usize]),
    /// Every thread anywhere among `cpus`: a host's interrupts stay on that host.
    Among(&'a [usize]),
}

/// Switches `dev` (in `ns`) to threaded NAPI and places its threads (the threads appear in
/// queue order, which their NAPI ids keep). The caller holds the lab lock, so the threads
/// that appear meanwhile are this device's. Returns a note of what was done, or why not, and
/// the threads' pids.
pub fn threaded(ns: &Netns, role: &str, dev: &str, placement: Placement) -> (String, Vec<u32>) {
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
        .map(|(q, t)| {
            let cpus: &[usize] = match placement {
                Placement::Default => {
                    return format!("napi {} (pid {}) on the default CPUs", t.id, t.pid)
                }
                Placement::OnePerQueue(cpus) => &[cpus[q % cpus.len()]],
                Placement::Among(cpus) => cpus,
            };
            match confine(t.pid, cpus) {
                Ok(()) => format!("napi {} (pid {}) on CPU {cpus:?}", t.id, t.pid),
                Err(e) => format!("napi {} (pid {}): not placed ({e})", t.id, t.pid),
            }
        })
        .collect();
    (
        format!("{role}:{path}=1: {}", placed.join(", ")),
        mine.iter().map(|t| t.pid).collect(),
    )
}
