//! Neighbour discovery (RFC 4861) for our IPv6 addresses (`addr6.rs`: the configured one
//! and the link-local one), with the answers of Linux's `ndisc_recv_ns` and `ndisc_recv_na`:
//! solicitations for our addresses answered (and their sender learned), advertisements taken
//! for neighbours we resolve or know, solicitations sent to resolve a next hop, and duplicate
//! address detection (RFC 4862 §5.4) of each address before it is used.

use crate::addr6::{Dad, Own};
use crate::ipv6::Ipv6Header;
use crate::{Instant, Stack};
use wirespeed_wire::icmpv6::Icmpv6Repr;
use wirespeed_wire::ndisc::NDP_HOP_LIMIT;
use wirespeed_wire::{IpAddress, Ipv6Addr, MacAddr};

const BOTH: [Own; 2] = [Own::Configured, Own::LinkLocal];

impl Stack {
    /// Starts and ends duplicate address detection of both addresses as time passes (called
    /// by `transmit`). Linux probes both at once, each on its own timer.
    pub(crate) fn dad_poll(&mut self, now: Instant) {
        let mut done = false;
        for o in BOTH {
            match self.dad_of(o) {
                Dad::NotStarted => {
                    self.send_dad_probe(o);
                    self.addrs6.dad[o as usize] = Dad::Tentative(now.add(self.cfg.arp_retry));
                }
                Dad::Tentative(until) if now >= until => {
                    self.addrs6.dad[o as usize] = Dad::Done;
                    done = true;
                }
                _ => {}
            }
        }
        if done {
            // Next hops asked for while we were tentative got no solicitation (it needs
            // a usable source): ask now, not at the next retry.
            let waiting: Vec<Ipv6Addr> = (self.neigh.resolving.keys())
                .filter_map(|k| match k {
                    IpAddress::V6(a) => Some(*a),
                    IpAddress::V4(_) => None,
                })
                .collect();
            for a in waiting {
                self.send_neighbour_solicitation(a);
            }
        }
    }

    /// When DAD next needs `transmit` (None: nothing pending).
    pub(crate) fn dad_deadline(&self) -> Option<Instant> {
        BOTH.iter()
            .filter_map(|&o| match self.dad_of(o) {
                Dad::NotStarted => Some(self.now),
                Dad::Tentative(until) => Some(until),
                Dad::Done | Dad::Failed => None,
            })
            .min()
    }

    /// A neighbour solicitation. For one of our addresses it is answered with a solicited
    /// advertisement to its sender (learned from its link-layer option), or, from the
    /// unspecified address (someone's DAD probe), with an unsolicited one to all nodes.
    pub(crate) fn ndp_solicitation_input(
        &mut self,
        src_mac: MacAddr,
        ip: &Ipv6Header,
        target: Ipv6Addr,
        source_lladdr: Option<MacAddr>,
    ) {
        let probe = ip.src.is_unspecified();
        if ip.hop_limit != NDP_HOP_LIMIT
            || (probe && (ip.dst != target.solicited_node() || source_lladdr.is_some()))
        {
            self.stats.ndp_invalid += 1;
            return;
        }
        let Some(own) = self.own6(target) else {
            self.stats.ndp_other_target += 1;
            return;
        };
        if probe {
            if self.usable6(own) {
                self.send_neighbour_advertisement(target, Ipv6Addr::ALL_NODES, None, false);
            } else {
                // Another node probes the address we are probing: neither may have it.
                self.dad_conflict(own);
            }
            return;
        }
        if !self.usable6(own) {
            self.stats.ip6_tentative += 1;
            return;
        }
        // A multicast solicitation must name its sender's MAC (RFC 4861 §4.3); without it
        // Linux answers only a solicitor it knows (ndisc_recv_ns looks, never creates).
        let known = self.neigh.lookup(IpAddress::V6(ip.src), self.now);
        if ip.dst.is_multicast() && source_lladdr.is_none() && known.is_none() {
            self.stats.ndp_invalid += 1;
            return;
        }
        let mac = source_lladdr.or(known).unwrap_or(src_mac);
        if let Some(m) = source_lladdr {
            self.learn_neighbour(ip.src, m, true);
        }
        self.send_neighbour_advertisement(target, ip.src, Some(mac), true);
    }

    /// A neighbour advertisement: resolves or refreshes `target` where we resolve it or
    /// already know it (Linux creates no entry from an unsolicited one); for one of our
    /// addresses while tentative, its DAD fails.
    pub(crate) fn ndp_advertisement_input(
        &mut self,
        ip: &Ipv6Header,
        solicited: bool,
        target: Ipv6Addr,
        target_lladdr: Option<MacAddr>,
    ) {
        if ip.hop_limit != NDP_HOP_LIMIT || (ip.dst.is_multicast() && solicited) {
            self.stats.ndp_invalid += 1;
            return;
        }
        if let Some(own) = self.own6(target) {
            if self.usable6(own) {
                // Linux logs "advertised our address" and keeps it.
                self.stats.ndp_invalid += 1;
            } else {
                self.dad_conflict(own);
            }
            return;
        }
        match target_lladdr {
            Some(mac) => self.learn_neighbour(target, mac, false),
            None => self.stats.ndp_other_target += 1,
        }
    }

    /// Enters `ip` at `mac`: always when `create` (it solicited us), else only an entry
    /// that exists or is being resolved.
    fn learn_neighbour(&mut self, ip: Ipv6Addr, mac: MacAddr, create: bool) {
        let key = IpAddress::V6(ip);
        if !create && !self.neigh.contains(key) && !self.neigh.resolving.contains_key(&key) {
            self.stats.ndp_other_target += 1;
            return;
        }
        let now = self.now;
        let learned = self
            .neigh
            .insert(key, mac, now.add(self.cfg.arp_timeout), now);
        self.neighbour_learned(key, mac, learned);
    }

    /// Another node claims `own` while we probe it: it is never ours (Linux's
    /// `addrconf_dad_failure` marks it `dadfailed`; with `accept_dad` 1, its default, the
    /// other address is kept, even when the link-local one failed). Once failed, nothing
    /// more happens, as `addrconf_dad_end` stops a second failure.
    fn dad_conflict(&mut self, own: Own) {
        if self.dad_of(own) == Dad::Failed {
            self.stats.ip6_tentative += 1;
            return;
        }
        self.stats.ndp_dad_conflicts += 1;
        self.addrs6.dad[own as usize] = Dad::Failed;
    }

    /// Asks the link for `target`'s MAC: to its solicited-node group, with our own, from
    /// the address we would send to `target` from (none while it is not usable).
    pub(crate) fn send_neighbour_solicitation(&mut self, target: Ipv6Addr) {
        let Some(src) = self.source6(target).filter(|&a| self.usable_addr6(a)) else {
            return;
        };
        let group = target.solicited_node();
        let ns = Icmpv6Repr::NeighborSolicit {
            target,
            source_lladdr: Some(self.cfg.mac),
        };
        let len = ns.buffer_len();
        let mac = group.multicast_mac();
        if self.queue_icmpv6(src, mac, group, NDP_HOP_LIMIT, 0, len, |b, s| {
            ns.emit(s, group, b).is_ok()
        }) {
            self.stats.ndp_solicitations_sent += 1;
        }
    }

    /// The DAD probe for `own`: from the unspecified address, no link-layer option.
    fn send_dad_probe(&mut self, own: Own) {
        let Some(target) = self.addr6(own) else {
            return;
        };
        let group = target.solicited_node();
        let ns = Icmpv6Repr::NeighborSolicit {
            target,
            source_lladdr: None,
        };
        let (len, mac, any) = (
            ns.buffer_len(),
            group.multicast_mac(),
            Ipv6Addr::UNSPECIFIED,
        );
        if self.queue_icmpv6(any, mac, group, NDP_HOP_LIMIT, 0, len, |b, s| {
            ns.emit(s, group, b).is_ok()
        }) {
            self.stats.ndp_solicitations_sent += 1;
        }
    }

    /// Advertises `ours` to `dst` (at `mac`; None for all nodes), from `ours`, with the
    /// override flag and our link-layer address, as Linux's `ndisc_send_na` for its own
    /// address.
    fn send_neighbour_advertisement(
        &mut self,
        ours: Ipv6Addr,
        dst: Ipv6Addr,
        mac: Option<MacAddr>,
        solicited: bool,
    ) {
        let na = Icmpv6Repr::NeighborAdvert {
            router: false,
            solicited,
            override_: true,
            target: ours,
            target_lladdr: Some(self.cfg.mac),
        };
        let len = na.buffer_len();
        let mac = mac.unwrap_or(dst.multicast_mac());
        if self.queue_icmpv6(ours, mac, dst, NDP_HOP_LIMIT, 0, len, |b, s| {
            na.emit(s, dst, b).is_ok()
        }) {
            self.stats.ndp_advertisements_sent += 1;
        }
    }
}
