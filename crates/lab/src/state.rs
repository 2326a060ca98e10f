//! Host-wide settings the lab changed, recorded before the change so that `lab down`, the
//! drop of a [`crate::Lab`], or `lab down --all` after a crash can put them back.
//!
//! One file, `host.json`, holds the original value of every host-wide setting a lab (or the
//! two-host showdown's server, on a real interface) changed and who uses it: sysctls, other
//! files under /proc and /sys, and interfaces' ethtool features. A value is restored when its
//! last user goes. One file per lab,
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
    /// Any other file under /proc or /sys (its path) -> original value and users.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, HostSysctl>,
    /// `IFACE FEATURE` (ethtool's short name: gro, tso) -> original state and users.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub features: BTreeMap<String, HostSysctl>,
}

/// Which kind of host setting a key of [`HostState`] names, and so how it is read and written.
#[derive(Clone, Copy, Debug)]
enum Setting {
    Sysctl,
    File,
    Feature,
}

impl Setting {
    const ALL: [Setting; 3] = [Setting::Sysctl, Setting::File, Setting::Feature];

    fn recorded(self, h: &mut HostState) -> &mut BTreeMap<String, HostSysctl> {
        match self {
            Setting::Sysctl => &mut h.sysctls,
            Setting::File => &mut h.files,
            Setting::Feature => &mut h.features,
        }
    }

    fn read(self, key: &str) -> Result<String> {
        match self {
            Setting::Sysctl => read_sysctl(key),
            Setting::File => fs::read_to_string(key)
                .map(|s| s.trim().to_string())
                .map_err(io(format!("read {key}"))),
            Setting::Feature => {
                let (iface, feature) = key.split_once(' ').unwrap_or((key, ""));
                let long = match feature {
                    "gro" => "generic-receive-offload",
                    "tso" => "tcp-segmentation-offload",
                    other => other,
                };
                let text = crate::sh("ethtool", &["-k", iface])?;
                text.lines()
                    .find_map(|l| l.trim().strip_prefix(&format!("{long}: ")))
                    .and_then(|v| v.split_whitespace().next())
                    .map(str::to_string)
                    .ok_or_else(|| Error::Invalid(format!("ethtool -k {iface}: no {long}")))
            }
        }
    }

    fn write(self, key: &str, value: &str) -> Result<()> {
        match self {
            Setting::Sysctl => write_sysctl(key, value),
            Setting::File => fs::write(key, value).map_err(io(format!("write {key}"))),
            Setting::Feature => {
                let (iface, feature) = key.split_once(' ').unwrap_or((key, ""));
                crate::sh("ethtool", &["-K", iface, feature, value]).map(drop)
            }
        }
    }
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
    if h.sysctls.is_empty() && h.files.is_empty() && h.features.is_empty() {
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
pub fn set_host_sysctl(l: &StateLock, lab: &str, key: &str, value: &str) -> Result<String> {
    set_host(l, lab, Setting::Sysctl, key, value)
}

/// Sets a file under /proc or /sys (an interface's sysfs, an IRQ's affinity) for `owner`,
/// recording the original value first. Returns the value it had.
pub fn set_host_file(l: &StateLock, owner: &str, path: &Path, value: &str) -> Result<String> {
    set_host(l, owner, Setting::File, &path.to_string_lossy(), value)
}

/// Sets `iface`'s ethtool feature (its short name: gro, tso) to `value` (on, off) for `owner`,
/// recording the original state first. Returns the state it had.
pub fn set_host_feature(
    l: &StateLock,
    owner: &str,
    iface: &str,
    feature: &str,
    value: &str,
) -> Result<String> {
    set_host(
        l,
        owner,
        Setting::Feature,
        &format!("{iface} {feature}"),
        value,
    )
}

/// Records `key`'s original value (once, whoever changes it first) and `owner` as a user,
/// then writes `value`. Returns the value before this write. A write the kernel refuses
/// leaves nothing recorded for it.
fn set_host(l: &StateLock, owner: &str, kind: Setting, key: &str, value: &str) -> Result<String> {
    let mut h = load_host(l)?;
    let current = kind.read(key)?;
    let entry = kind
        .recorded(&mut h)
        .entry(key.to_string())
        .or_insert(HostSysctl {
            original: current.clone(),
            users: vec![],
        });
    let new_user = !entry.users.iter().any(|u| u == owner);
    if new_user {
        entry.users.push(owner.to_string());
    }
    // Recorded before it is changed: a crash between the two lines leaves a restorable state.
    save_host(l, &h)?;
    if let Err(e) = kind.write(key, value) {
        if new_user {
            let recorded = kind.recorded(&mut h);
            if let Some(entry) = recorded.get_mut(key) {
                entry.users.retain(|u| u != owner);
                if entry.users.is_empty() {
                    recorded.remove(key);
                }
            }
            save_host(l, &h)?;
        }
        return Err(e);
    }
    Ok(current)
}

/// Drops `lab` from every host-wide setting and restores those it was the last user of.
pub fn release_host(l: &StateLock, lab: &str) -> Result<Vec<String>> {
    let mut h = load_host(l)?;
    let mut restored = vec![];
    let mut first_err = None;
    for kind in Setting::ALL {
        kind.recorded(&mut h).retain(|key, e| {
            e.users.retain(|u| u != lab);
            if !e.users.is_empty() {
                return true;
            }
            match kind.write(key, &e.original) {
                Ok(()) => restored.push(format!("{key}={}", e.original)),
                Err(err) => {
                    first_err.get_or_insert(err);
                }
            }
            false
        });
    }
    save_host(l, &h)?;
    match first_err {
        Some(e) => Err(e),
        None => Ok(restored),
    }
}

/// Restores every recorded host-wide value, whoever changed it.
pub fn restore_all_host(l: &StateLock) -> Result<Vec<String>> {
    let mut h = load_host(l)?;
    let mut restored = vec![];
    for kind in Setting::ALL {
        for (key, e) in kind.recorded(&mut h).iter() {
            kind.write(key, &e.original)?;
            restored.push(format!("{key}={}", e.original));
        }
    }
    save_host(l, &HostState::default())?;
    Ok(restored)
}
