//! The sysctl hook: sees the sysctls change that the kernel reports with no event, and that
//! the fast path depends on: the multipath hash policies, `ip_forward_update_priority` and
//! `ip_forward_use_pmtu`, each IPv6 device's `mtu`, and br_netfilter's `bridge-nf-*`.
//!
//! `bpf_fib_lookup` hashes a multipath route's flows by what the program gives it, which is
//! the kernel's own hash only under `fib_multipath_hash_policy` 0; under any other policy the
//! family is the kernel's (`plan`). Polling the value left a window of up to a poll period in
//! which flows were hashed on the old policy; so for the others. The hook
//! (bpf/fp_sysctl.bpf.c), a cgroup/sysctl program on the cgroup2 root, runs inside every write
//! to /proc/sys before the kernel applies it and closes that class of the gate
//! (bpf/fp_sysctl_gate.h); the data path then leaves what depends on it to the kernel until
//! the daemon has read the values back and acknowledged the write (`Gate::settle`).
//! docs/FASTPATH.md, "Sysctls without events".

use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle};

use crate::bpf::types::sysctl_gate;
use crate::bpf_sysctl::FpSysctlSkelBuilder;
use crate::error::{bpf, io, Result};
use wirespeed_sys::bpf::{bytes_of, from_bytes};

/// The attached hooks: dropping them detaches the programs.
pub struct SysctlHook {
    _sysctl: libbpf_rs::Link,
    _setsockopt: libbpf_rs::Link,
    /// The namespaces in which an ebtables-legacy table was written (fp_sysctl.bpf.c).
    ebtables_written: MapHandle,
}

/// The mount point of the cgroup2 hierarchy, from /proc/self/mountinfo (the fields after " - "
/// start with the file system type; the fifth field before it is the mount point).
pub fn cgroup2_mount(mountinfo: &str) -> Option<String> {
    mountinfo.lines().find_map(|l| {
        let (before, after) = l.split_once(" - ")?;
        (after.split(' ').next()? == "cgroup2")
            .then(|| before.split(' ').nth(4).map(String::from))?
    })
}

/// The cgroup2 root to attach to: where our mount namespace shows it, or else mounted for a
/// moment (`ip netns exec` runs its command in a mount namespace of its own, with /sys
/// mounted anew, where the hierarchy is not).
fn cgroup2_root() -> Result<(std::fs::File, String)> {
    let mountinfo =
        std::fs::read_to_string("/proc/self/mountinfo").map_err(io("read /proc/self/mountinfo"))?;
    if let Some(m) = cgroup2_mount(&mountinfo) {
        return Ok((std::fs::File::open(&m).map_err(io(format!("open {m}")))?, m));
    }
    let dir = std::path::PathBuf::from(format!("/run/wirespeed/cgroup2-{}", std::process::id()));
    let f = wirespeed_sys::mount::open_cgroup2_root(&dir)
        .map_err(io("mount the cgroup2 hierarchy (none is mounted here)"))?;
    Ok((f, "the cgroup2 root".into()))
}

impl SysctlHook {
    /// Loads the hook with `gate` as its map and attaches it to the cgroup2 root, where it
    /// runs for every process. Fails where no cgroup2 hierarchy is mounted or the kernel
    /// refuses cgroup programs: the caller then leaves multipath routes to the kernel.
    pub fn attach(gate: &MapHandle) -> Result<SysctlHook> {
        let (cgroup, root) = cgroup2_root()?;
        let mut storage = MaybeUninit::uninit();
        let mut open = FpSysctlSkelBuilder::default()
            .open(&mut storage)
            .map_err(bpf("open the sysctl hook"))?;
        open.maps
            .sysctl_gate
            .reuse_fd(std::os::fd::AsFd::as_fd(gate))
            .map_err(bpf("reuse sysctl_gate"))?;
        let skel = open
            .load()
            .map_err(bpf("load the sysctl hook (verifier)"))?;
        let attach = |p: &libbpf_rs::ProgramMut<'_>, what: &str| {
            p.attach_cgroup(cgroup.as_raw_fd())
                .map_err(bpf(format!("attach the {what} hook to {root}")))
        };
        Ok(SysctlHook {
            _sysctl: attach(&skel.progs.fp_sysctl, "sysctl")?,
            _setsockopt: attach(&skel.progs.fp_setsockopt, "setsockopt")?,
            ebtables_written: MapHandle::try_from(&skel.maps.ebtables_written)
                .map_err(bpf("dup ebtables_written"))?,
        })
    }

    /// Whether an ebtables-legacy table was written in the network namespace `cookie`
    /// (`wirespeed_sys::socket::netns_cookie`) since the hook was attached.
    pub fn ebtables_written(&self, cookie: u64) -> bool {
        matches!(
            self.ebtables_written
                .lookup(&cookie.to_ne_bytes(), MapFlags::ANY),
            Ok(Some(_))
        )
    }
}

/// The daemon's side of the gate: which writes it has acknowledged, and since when it has
/// seen the ones it has not.
pub struct Gate {
    /// Per class, the write count first seen unacknowledged and when.
    seen: [Option<(u32, Instant)>; CLASSES],
}

/// The gate's classes (bpf/fp_sysctl_gate.h GATE_CLASS_*).
pub const CLASSES: usize = crate::consts::GATE_CLASSES;

/// What `Gate::settle` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle {
    /// Every write is acknowledged.
    Open,
    /// Writes the daemon has seen for less than the settling time: the write itself may not
    /// have landed yet (the hook runs before it).
    Waiting,
    /// Per class, the write count seen long enough to have landed: read the values, set the
    /// data path by them, then `ack` these.
    Read([Option<u32>; CLASSES]),
}

/// The gate's entries (bpf/fp_sysctl_gate.h): the hook's count, the daemon's.
const GATE_WRITES: u32 = 0;
const GATE_ACKED: u32 = 1;

fn read(map: &MapHandle, key: u32) -> Result<[u32; CLASSES]> {
    let v = map
        .lookup(&key.to_ne_bytes(), MapFlags::ANY)
        .map_err(bpf("read sysctl_gate"))?
        .unwrap_or_default();
    Ok(from_bytes::<sysctl_gate>(&v).unwrap_or_default().count)
}

impl Gate {
    /// A write is read back no sooner than this after the daemon first saw its count: the
    /// kernel applies it right after the hook, in the same system call.
    pub const SETTLE: Duration = Duration::from_millis(100);

    pub fn new() -> Gate {
        Gate {
            seen: [None; CLASSES],
        }
    }

    /// Looks at the gate: what the daemon must do now.
    pub fn settle(&mut self, map: &MapHandle, now: Instant) -> Result<Settle> {
        let writes = read(map, GATE_WRITES)?;
        let acked = read(map, GATE_ACKED)?;
        let mut ready = [None; CLASSES];
        let mut waiting = false;
        for f in 0..CLASSES {
            if writes[f] == acked[f] {
                self.seen[f] = None;
                continue;
            }
            match self.seen[f] {
                Some((w, t)) if w == writes[f] => {
                    if now.duration_since(t) >= Self::SETTLE {
                        ready[f] = Some(w);
                    } else {
                        waiting = true;
                    }
                }
                // New writes since the last look: their settling time starts now.
                _ => {
                    self.seen[f] = Some((writes[f], now));
                    waiting = true;
                }
            }
        }
        Ok(if ready.iter().any(Option::is_some) {
            Settle::Read(ready)
        } else if waiting {
            Settle::Waiting
        } else {
            Settle::Open
        })
    }

    /// Acknowledges the write counts in `ready` (from `settle`), once the routers are set by
    /// the values read after them: the gate opens unless more writes came since.
    pub fn ack(&mut self, map: &MapHandle, ready: [Option<u32>; CLASSES]) -> Result<()> {
        // Only the daemon writes this entry.
        let mut acked = read(map, GATE_ACKED)?;
        for f in 0..CLASSES {
            if let Some(w) = ready[f] {
                acked[f] = w;
                self.seen[f] = None;
            }
        }
        let v = sysctl_gate { count: acked };
        map.update(&GATE_ACKED.to_ne_bytes(), bytes_of(&v), MapFlags::ANY)
            .map_err(bpf("write sysctl_gate"))
    }
}

impl Default for Gate {
    fn default() -> Gate {
        Gate::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup2_mount_is_found_beside_v1_hierarchies() {
        let hybrid = "25 1 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n\
                      26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid shared:9 - cgroup2 cgroup2 rw\n\
                      27 25 0:24 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";
        assert_eq!(
            cgroup2_mount(hybrid).as_deref(),
            Some("/sys/fs/cgroup/unified")
        );
        let v2 = "30 1 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(cgroup2_mount(v2).as_deref(), Some("/sys/fs/cgroup"));
        assert_eq!(
            cgroup2_mount("27 25 0:24 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw\n"),
            None
        );
    }
}
