//! The neighbour cache (ARP's and NDP's, one table keyed by address) with expiry, and the
//! bookkeeping for addresses being resolved.

use crate::util::FlowHashBuilder;
use crate::Instant;
use std::collections::HashMap;
use wirespeed_wire::{IpAddress, MacAddr};

/// Most cache entries; a LAN server talks to its gateway and a few neighbours.
pub(crate) const CACHE_CAPACITY: usize = 1024;
/// Most addresses being resolved at once.
pub(crate) const RESOLVING_CAPACITY: usize = 64;
/// Requests sent for one address before giving up.
pub(crate) const MAX_TRIES: u8 = 3;

#[derive(Debug, Clone, Copy)]
struct Entry {
    mac: MacAddr,
    expires: Instant,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Resolving {
    pub(crate) next_try: Instant,
    pub(crate) tries: u8,
}

pub(crate) struct NeighbourCache {
    entries: HashMap<IpAddress, Entry, FlowHashBuilder>,
    pub(crate) resolving: HashMap<IpAddress, Resolving, FlowHashBuilder>,
}

impl NeighbourCache {
    pub(crate) fn new(seed: u64) -> Self {
        let h = FlowHashBuilder { seed };
        NeighbourCache {
            entries: HashMap::with_capacity_and_hasher(CACHE_CAPACITY, h),
            resolving: HashMap::with_capacity_and_hasher(RESOLVING_CAPACITY, h),
        }
    }

    pub(crate) fn lookup(&self, ip: IpAddress, now: Instant) -> Option<MacAddr> {
        self.entries
            .get(&ip)
            .filter(|e| e.expires > now)
            .map(|e| e.mac)
    }

    pub(crate) fn contains(&self, ip: IpAddress) -> bool {
        self.entries.contains_key(&ip)
    }

    /// Inserts or refreshes; returns false when the cache is full of live entries.
    pub(crate) fn insert(
        &mut self,
        ip: IpAddress,
        mac: MacAddr,
        expires: Instant,
        now: Instant,
    ) -> bool {
        let key = ip;
        if !self.entries.contains_key(&key) && self.entries.len() >= CACHE_CAPACITY {
            self.entries.retain(|_, e| e.expires > now);
            if self.entries.len() >= CACHE_CAPACITY {
                return false;
            }
        }
        self.entries.insert(key, Entry { mac, expires });
        self.resolving.remove(&key);
        true
    }

    /// Starts resolving `ip` unless already under way; returns true when a request should
    /// be sent now.
    pub(crate) fn start_resolving(
        &mut self,
        ip: IpAddress,
        now: Instant,
        retry: std::time::Duration,
    ) -> bool {
        let key = ip;
        if self.resolving.contains_key(&key) {
            return false;
        }
        if self.resolving.len() >= RESOLVING_CAPACITY {
            return false;
        }
        self.resolving.insert(
            key,
            Resolving {
                next_try: now.add(retry),
                tries: 1,
            },
        );
        true
    }

    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.resolving.values().map(|r| r.next_try).min()
    }
}
