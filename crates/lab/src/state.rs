//! Host-wide settings the lab changed, recorded before the change so that `lab down`, the
//! drop of a [`crate::Lab`], or `lab down --all` after a crash can put them back.
//!
//! One file, `host.json`, holds the original value of every host-wide sysctl a lab changed and
//! which labs use it; a value is restored when its last user goes. One file per lab,
//! `<name>.json`, lists what that lab made. Both live in [`STATE_DIR`]. A `flock` on `.lock`
//! serializes concurrent lab commands.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

pub const STATE_DIR: &str = "/run/wirespeed/lab";

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct HostState {
    /// sysctl key (dotted) -> original value and the labs that changed it.
    pub sysctls: BTreeMap<String, HostSysctl>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct HostSysctl {
    pub original: String,
    pub users: Vec<String>,
}

/// One interface of a lab's node, as the lab's record keeps it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Iface {
    pub name: String,
    /// CIDR, e.g. 198.18.0.2/24
    pub v4: String,
    pub v6: String,
    /// Role at the other end.
    pub peer: String,
}

/// One namespace of a lab: its role, interfaces and CPUs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Node {
    pub role: String,
    pub ns: String,
    pub ifaces: Vec<Iface>,
    pub cpus: Vec<usize>,
}

impl Node {
    /// The node's first IPv4 address.
    pub fn addr4(&self) -> Option<Ipv4Addr> {
        self.ifaces.first()?.v4.split('/').next()?.parse().ok()
    }
}

/// What one lab created (namespaces are deleted on down).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LabRecord {
    pub name: String,
    pub topology: String,
    pub profile: String,
    pub namespaces: Vec<String>,
    /// role -> namespace, addresses
    pub nodes: Vec<Node>,
    /// Long-running processes the lab started in its namespaces (`lb-cluster`'s routing and
    /// load-balancer daemons); `lab down` kills everything in the namespaces anyway.
    #[serde(default)]
    pub daemons: Vec<crate::daemon::Daemon>,
    /// Where those daemons keep their configs, sockets and logs.
    #[serde(default)]
    pub run_dir: Option<std::path::PathBuf>,
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, err: source }
}

pub fn state_dir() -> PathBuf {
    PathBuf::from(STATE_DIR)
}

/// An exclusive lock over the state directory, released on drop.
pub struct StateLock {
    _file: File,
}

pub fn lock() -> Result<StateLock> {
    let dir = state_dir();
    fs::create_dir_all(&dir).map_err(io(format!("create {}", dir.display())))?;
    let path = dir.join(".lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io(format!("open {}", path.display())))?;
    wirespeed_sys::process::lock_exclusive(&file).map_err(|source| Error::Io {
        what: "flock lab state".into(),
        err: source,
    })?;
    Ok(StateLock { _file: file })
}

fn write_atomic(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, text).map_err(io(format!("write {}", tmp.display())))?;
    fs::rename(&tmp, path).map_err(io(format!("rename {}", path.display())))
}

pub fn load_host(_l: &StateLock) -> Result<HostState> {
    let path = state_dir().join("host.json");
    match fs::read_to_string(&path) {
        Ok(t) => {
            serde_json::from_str(&t).map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(HostState::default()),
        Err(e) => Err(Error::Io {
            what: format!("read {}", path.display()),
            err: e,
        }),
    }
}

pub fn save_host(_l: &StateLock, h: &HostState) -> Result<()> {
    let path = state_dir().join("host.json");
    if h.sysctls.is_empty() {
        let _ = fs::remove_file(&path);
        return Ok(());
    }
    write_atomic(&path, &serde_json::to_string_pretty(h).unwrap_or_default())
}

pub fn save_lab(_l: &StateLock, r: &LabRecord) -> Result<()> {
    write_atomic(
        &state_dir().join(format!("{}.json", r.name)),
        &serde_json::to_string_pretty(r).unwrap_or_default(),
    )
}

pub fn load_lab(name: &str) -> Result<Option<LabRecord>> {
    let path = state_dir().join(format!("{name}.json"));
    match fs::read_to_string(&path) {
        Ok(t) => Ok(serde_json::from_str(&t).ok()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::Io {
            what: format!("read {}", path.display()),
            err: e,
        }),
    }
}

pub fn remove_lab(_l: &StateLock, name: &str) {
    let _ = fs::remove_file(state_dir().join(format!("{name}.json")));
}

/// Names of the labs that have a state file.
pub fn lab_names() -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(state_dir())
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            let stem = n.strip_suffix(".json")?;
            (stem != "host").then(|| stem.to_string())
        })
        .collect();
    v.sort();
    v
}

fn proc_path(key: &str) -> PathBuf {
    PathBuf::from("/proc/sys").join(key.replace('.', "/"))
}

/// Reads a sysctl of the caller's network namespace (the host's, for the lab commands).
pub fn read_sysctl(key: &str) -> Result<String> {
    let p = proc_path(key);
    fs::read_to_string(&p)
        .map(|s| s.trim().to_string())
        .map_err(io(format!("read {}", p.display())))
}

fn write_sysctl(key: &str, value: &str) -> Result<()> {
    let p = proc_path(key);
    fs::write(&p, value).map_err(io(format!("write {}", p.display())))
}

/// Sets a host-wide sysctl for `lab`, recording the original value first.
pub fn set_host_sysctl(l: &StateLock, lab: &str, key: &str, value: &str) -> Result<()> {
    let mut h = load_host(l)?;
    let entry = match h.sysctls.get_mut(key) {
        Some(e) => e,
        None => {
            let original = read_sysctl(key)?;
            h.sysctls.entry(key.to_string()).or_insert(HostSysctl {
                original,
                users: vec![],
            })
        }
    };
    if !entry.users.iter().any(|u| u == lab) {
        entry.users.push(lab.to_string());
    }
    // Recorded before it is changed: a crash between the two lines leaves a restorable state.
    save_host(l, &h)?;
    write_sysctl(key, value)
}

/// Drops `lab` from every host-wide setting and restores those it was the last user of.
pub fn release_host(l: &StateLock, lab: &str) -> Result<Vec<String>> {
    let mut h = load_host(l)?;
    let mut restored = vec![];
    let mut first_err = None;
    h.sysctls.retain(|key, e| {
        e.users.retain(|u| u != lab);
        if e.users.is_empty() {
            match write_sysctl(key, &e.original) {
                Ok(()) => restored.push(format!("{key}={}", e.original)),
                Err(err) => {
                    first_err.get_or_insert(err);
                }
            }
            false
        } else {
            true
        }
    });
    save_host(l, &h)?;
    match first_err {
        Some(e) => Err(e),
        None => Ok(restored),
    }
}

/// Restores every recorded host-wide value, whoever changed it.
pub fn restore_all_host(l: &StateLock) -> Result<Vec<String>> {
    let h = load_host(l)?;
    let mut restored = vec![];
    for (key, e) in &h.sysctls {
        write_sysctl(key, &e.original)?;
        restored.push(format!("{key}={}", e.original));
    }
    save_host(l, &HostState::default())?;
    Ok(restored)
}
