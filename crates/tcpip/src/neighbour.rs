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
/// The least time between two checks of a known neighbour that a connection suspects
/// (`NeighbourCache::may_recheck`): one broadcast a second per neighbour, however many
/// connections go through it.
const RECHECK_GAP: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Debug, Clone, Copy)]
struct Entry {
    mac: MacAddr,
    expires: Instant,
    /// When this entry may next be checked again (`may_recheck`).
    recheck_after: Instant,
}

/// What [`NeighbourCache::insert`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Learned {
    /// A new entry, or the MAC the entry had.
    Entered,
    /// The entry had another MAC: the neighbour moved (a new router behind the address,
    /// announced by gratuitous ARP, or found when a connection's suspicion sent a check).
    Moved,
    /// Not entered: the cache is full of live entries.
    CacheFull,
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

    /// Inserts or refreshes.
    pub(crate) fn insert(
        &mut self,
        ip: IpAddress,
        mac: MacAddr,
        expires: Instant,
        now: Instant,
    ) -> Learned {
        let key = ip;
        if !self.entries.contains_key(&key) && self.entries.len() >= CACHE_CAPACITY {
            self.entries.retain(|_, e| e.expires > now);
            if self.entries.len() >= CACHE_CAPACITY {
                return Learned::CacheFull;
            }
        }
        let entry = Entry {
            mac,
            expires,
            recheck_after: now.add(RECHECK_GAP),
        };
        let was = self.entries.insert(key, entry).map(|e| e.mac);
        self.resolving.remove(&key);
        match was {
            Some(old) if old != mac => Learned::Moved,
            _ => Learned::Entered,
        }
    }

    /// Whether a known neighbour that a connection suspects (its retransmissions go
    /// unanswered) is due a check: at most once per [`RECHECK_GAP`], and not within it of
    /// the entry's last confirmation.
    pub(crate) fn may_recheck(&mut self, ip: IpAddress, now: Instant) -> bool {
        match self.entries.get_mut(&ip) {
            Some(e) if e.recheck_after <= now => {
                e.recheck_after = now.add(RECHECK_GAP);
                true
            }
            _ => false,
        }
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
