//! Neighbour discovery (RFC 4861) for our one IPv6 address, with the answers of Linux's
//! `ndisc_recv_ns` and `ndisc_recv_na`: solicitations for our address answered (and their
//! sender learned), advertisements taken for neighbours we resolve or know, solicitations
//! sent to resolve a next hop, and duplicate address detection (RFC 4862 §5.4) before the
//! address is used.

use crate::ipv6::Ipv6Header;
use crate::{Instant, Stack};
use wirespeed_wire::icmpv6::Icmpv6Repr;
use wirespeed_wire::ndisc::NDP_HOP_LIMIT;
use wirespeed_wire::{IpAddress, Ipv6Addr, MacAddr};

/// Where duplicate address detection stands for our IPv6 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dad {
    /// The probe goes out at the next `transmit`.
    NotStarted,
    /// Probed; ours if nobody objects before this time.
    Tentative(Instant),
    /// Ours (or detection is off).
    Done,
    /// Another node has it: the stack stopped using IPv6.
    Failed,
}

impl Stack {
    /// Whether our IPv6 address may be used (DAD done or off).
    pub(crate) fn ipv6_usable(&self) -> bool {
        self.dad == Dad::Done
    }

    /// Starts and ends duplicate address detection as time passes (called by `transmit`).
    pub(crate) fn dad_poll(&mut self, now: Instant) {
        match self.dad {
            Dad::NotStarted => {
                self.send_dad_probe();
                self.dad = Dad::Tentative(now.add(self.cfg.arp_retry));
            }
            Dad::Tentative(until) if now >= until => {
                self.dad = Dad::Done;
                // Next hops asked for while we were tentative got no solicitation (it needs
                // our address as its source): ask now, not at the next retry.
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
            _ => {}
        }
    }

    /// When DAD next needs `transmit` (None: nothing pending).
    pub(crate) fn dad_deadline(&self) -> Option<Instant> {
        match self.dad {
            Dad::NotStarted => Some(self.now),
            Dad::Tentative(until) => Some(until),
            Dad::Done | Dad::Failed => None,
        }
    }

    /// A neighbour solicitation. For our address it is answered with a solicited
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
        if Some(target) != self.cfg.ipv6 {
            self.stats.ndp_other_target += 1;
            return;
        }
        if probe {
            if self.ipv6_usable() {
                self.send_neighbour_advertisement(Ipv6Addr::ALL_NODES, None, false);
            } else {
                // Another node probes the address we are probing: neither may have it.
                self.dad_failed();
            }
            return;
        }
        if !self.ipv6_usable() {
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
        self.send_neighbour_advertisement(ip.src, Some(mac), true);
    }

    /// A neighbour advertisement: resolves or refreshes `target` where we resolve it or
    /// already know it (Linux creates no entry from an unsolicited one); for our own
    /// address while tentative, DAD fails.
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
        if Some(target) == self.cfg.ipv6 {
            if self.ipv6_usable() {
                // Linux logs "advertised our address" and keeps it.
                self.stats.ndp_invalid += 1;
            } else {
                self.dad_failed();
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
        if self
            .neigh
            .insert(key, mac, now.add(self.cfg.arp_timeout), now)
        {
            self.neighbour_resolved(key, mac);
        } else {
            self.stats.arp_cache_full += 1;
        }
    }

    fn dad_failed(&mut self) {
        self.stats.ndp_dad_conflicts += 1;
        self.dad = Dad::Failed;
    }

    /// Asks the link for `target`'s MAC: to its solicited-node group, with our own.
    pub(crate) fn send_neighbour_solicitation(&mut self, target: Ipv6Addr) {
        if !self.ipv6_usable() {
            return;
        }
        let group = target.solicited_node();
        let ns = Icmpv6Repr::NeighborSolicit {
            target,
            source_lladdr: Some(self.cfg.mac),
        };
        let len = ns.buffer_len();
        let mac = group.multicast_mac();
        if self.queue_icmpv6(mac, group, NDP_HOP_LIMIT, 0, len, |b, s| {
            ns.emit(s, group, b).is_ok()
        }) {
            self.stats.ndp_solicitations_sent += 1;
        }
    }

    /// The DAD probe: from the unspecified address, no link-layer option.
    fn send_dad_probe(&mut self) {
        let Some(ours) = self.cfg.ipv6 else {
            return;
        };
        let group = ours.solicited_node();
        let ns = Icmpv6Repr::NeighborSolicit {
            target: ours,
            source_lladdr: None,
        };
        let (len, mac, any) = (
            ns.buffer_len(),
            group.multicast_mac(),
            Ipv6Addr::UNSPECIFIED,
        );
        if self.queue_icmpv6_from(any, mac, group, NDP_HOP_LIMIT, 0, len, |b, s| {
            ns.emit(s, group, b).is_ok()
        }) {
            self.stats.ndp_solicitations_sent += 1;
        }
    }

    /// Advertises our address to `dst` (at `mac`; None for all nodes), with the override
    /// flag and our link-layer address, as Linux's `ndisc_send_na` for its own address.
    fn send_neighbour_advertisement(
        &mut self,
        dst: Ipv6Addr,
        mac: Option<MacAddr>,
        solicited: bool,
    ) {
        let Some(ours) = self.cfg.ipv6 else {
            return;
        };
        let na = Icmpv6Repr::NeighborAdvert {
            router: false,
            solicited,
            override_: true,
            target: ours,
            target_lladdr: Some(self.cfg.mac),
        };
        let len = na.buffer_len();
        let mac = mac.unwrap_or(dst.multicast_mac());
        if self.queue_icmpv6(mac, dst, NDP_HOP_LIMIT, 0, len, |b, s| {
            na.emit(s, dst, b).is_ok()
        }) {
            self.stats.ndp_advertisements_sent += 1;
        }
    }
}
