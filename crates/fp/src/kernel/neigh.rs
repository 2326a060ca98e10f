//! Next hops the kernel must drive: neighbour entries in the STALE state. The kernel's first
//! forwarded packet to a STALE neighbour moves it to DELAY, then to a probe that confirms the
//! address or fails it (`neigh_event_send`); the FIB helper uses any valid entry as it stands.
//! The helper cannot read an entry's state, so the daemon keeps the STALE set from the
//! neighbour events (RTNLGRP_NEIGH) in a map every port's program shares (bpf/fp_neigh.h), and
//! a packet to such a next hop is the kernel's (docs/FASTPATH.md, "Neighbours").

use std::collections::BTreeSet;

use libbpf_rs::{MapCore, MapFlags, MapHandle};

use crate::bpf::types;
use crate::error::{bpf, Result};
use wirespeed_sys::bpf::bytes_of;

/// A next hop as the FIB helper names it: egress ifindex, family, address (IPv4 in the first
/// four bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NeighKey {
    pub ifindex: u32,
    pub family: u8,
    pub addr: [u8; 16],
}

/// One neighbour event: the entry, and whether it is STALE now (false: any other state, or
/// deleted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighState {
    pub key: NeighKey,
    pub stale: bool,
}

/// The STALE next hops the daemon holds, as written into the shared map.
#[derive(Debug, Default)]
pub struct StaleNeighbours {
    keys: BTreeSet<NeighKey>,
    /// The map could not take them all: then it holds none, and the programs count every next
    /// hop as STALE until the set fits again.
    overflow: bool,
}

impl StaleNeighbours {
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// One event. The entry goes into the map before its count says there is one, and both
    /// before the route cache's new generation (the caller's): no cached answer outlives a
    /// neighbour going STALE.
    pub fn apply(&mut self, n: NeighState, maps: &NeighMaps) -> Result<()> {
        let changed = if n.stale {
            self.keys.insert(n.key)
        } else {
            self.keys.remove(&n.key)
        };
        if !changed {
            return Ok(());
        }
        if self.overflow {
            return self.write_all(maps);
        }
        let wrote = if n.stale {
            maps.set_stale(&n.key)
        } else {
            maps.del_stale(&n.key);
            Ok(())
        };
        match wrote {
            Ok(()) => maps.set_count(self.keys.len(), false),
            // The map is full: every next hop counts as STALE until the set fits again.
            Err(_) => self.write_all(maps),
        }
    }

    /// The set as a dump found it, replacing what the map held.
    pub fn replace(&mut self, keys: BTreeSet<NeighKey>, maps: &NeighMaps) -> Result<()> {
        self.keys = keys;
        self.write_all(maps)
    }

    fn write_all(&mut self, maps: &NeighMaps) -> Result<()> {
        // Everything counts as STALE while the map is rewritten.
        maps.set_count(self.keys.len(), true)?;
        maps.clear_stale();
        self.overflow = false;
        for k in &self.keys {
            if maps.set_stale(k).is_err() {
                self.overflow = true;
                maps.clear_stale();
                return maps.set_count(1, true);
            }
        }
        maps.set_count(self.keys.len(), false)
    }
}

/// The STALE next hops (bpf/fp_neigh.h) and their count, written by `neigh::StaleNeighbours`.
pub struct NeighMaps {
    pub stale: MapHandle,
    pub count: MapHandle,
}

fn neigh_key(k: &NeighKey) -> types::neigh_key {
    types::neigh_key {
        ifindex: k.ifindex,
        family: k.family as u32,
        addr: k.addr,
    }
}

impl NeighMaps {
    /// Adds a next hop, never handed to the kernel yet (an entry already there keeps its time).
    pub fn set_stale(&self, k: &NeighKey) -> Result<()> {
        self.stale
            .update(
                bytes_of(&neigh_key(k)),
                &0u64.to_ne_bytes(),
                MapFlags::NO_EXIST,
            )
            .or_else(|e| match e.kind() {
                libbpf_rs::ErrorKind::AlreadyExists => Ok(()),
                _ => Err(e),
            })
            .map_err(bpf("update neigh_stale"))
    }

    pub fn del_stale(&self, k: &NeighKey) {
        let _ = self.stale.delete(bytes_of(&neigh_key(k)));
    }

    pub fn clear_stale(&self) {
        let keys: Vec<Vec<u8>> = self.stale.keys().collect();
        for k in keys {
            let _ = self.stale.delete(&k);
        }
    }

    /// How many next hops the set holds, and whether every next hop counts as STALE.
    pub fn set_count(&self, n: usize, all: bool) -> Result<()> {
        use crate::consts::{NEIGH_STALE_ALL, NEIGH_STALE_COUNT};
        let n = n.min(u32::MAX as usize) as u32;
        let set = |k: u32, v: u32| {
            self.count
                .update(&k.to_ne_bytes(), &v.to_ne_bytes(), MapFlags::ANY)
                .map_err(bpf("update neigh_stale_n"))
        };
        set(NEIGH_STALE_ALL, all as u32)?;
        set(NEIGH_STALE_COUNT, n.max(all as u32))
    }

    pub fn share(&self) -> Result<NeighMaps> {
        let dup = |m: &MapHandle, n: &str| MapHandle::try_from(m).map_err(bpf(format!("dup {n}")));
        Ok(NeighMaps {
            stale: dup(&self.stale, "neigh_stale")?,
            count: dup(&self.count, "neigh_stale_n")?,
        })
    }
}
