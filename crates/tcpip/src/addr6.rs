//! Our IPv6 addresses: the configured one (`Config::ipv6`) and the link-local one every
//! interface has (RFC 4291 §2.1: fe80::/64 and the modified EUI-64 of our MAC, as Linux's
//! addrconf makes it), each with its own duplicate address detection (`ndp.rs`), and the
//! source of what we send: the address a datagram came to for an answer, else RFC 6724's
//! rule 2 (scope): the link-local address to a link-local destination.

use crate::ipv6::Ipv6Header;
use crate::{Config, Instant, Stack};
use wirespeed_wire::{IpAddress, Ipv6Addr};

/// Where duplicate address detection stands for one of our IPv6 addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dad {
    /// The probe goes out at the next `transmit`.
    NotStarted,
    /// Probed; ours if nobody objects before this time.
    Tentative(Instant),
    /// Ours (or detection is off).
    Done,
    /// Another node has it: never used (Linux's `dadfailed`).
    Failed,
}

/// One of our IPv6 addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Own {
    /// `Config::ipv6`.
    Configured = 0,
    /// fe80::/64 and the modified EUI-64 of `Config::mac`.
    LinkLocal = 1,
}

/// Our IPv6 addresses and where duplicate address detection stands for each.
pub(crate) struct Addrs6 {
    pub(crate) link_local: Option<Ipv6Addr>,
    pub(crate) dad: [Dad; 2],
}

impl Addrs6 {
    pub(crate) fn new(cfg: &Config) -> Addrs6 {
        let dad = match cfg.ipv6 {
            Some(_) if cfg.ipv6_dad => Dad::NotStarted,
            _ => Dad::Done,
        };
        Addrs6 {
            link_local: cfg.ipv6_link_local(),
            dad: [dad; 2],
        }
    }
}

/// The source of a datagram to `remote` that answers none (RFC 6724 rule 2): our link-local
/// address (`link_local`, while usable) to a link-local destination, else the configured one.
/// Linux's `ipv6_dev_get_saddr` passes over a tentative or failed address the same way.
pub(crate) fn select_source(
    cfg: &Config,
    link_local: Option<Ipv6Addr>,
    remote: IpAddress,
) -> Option<IpAddress> {
    match remote {
        IpAddress::V4(_) => Some(IpAddress::V4(cfg.ipv4)),
        IpAddress::V6(r) => match link_local {
            Some(ll) if r.is_link_local() => Some(IpAddress::V6(ll)),
            _ => cfg.ipv6.map(IpAddress::V6),
        },
    }
}

impl Stack {
    /// Which of our addresses `a` is, whatever its DAD state.
    pub(crate) fn own6(&self, a: Ipv6Addr) -> Option<Own> {
        if Some(a) == self.cfg.ipv6 {
            Some(Own::Configured)
        } else if Some(a) == self.addrs6.link_local {
            Some(Own::LinkLocal)
        } else {
            None
        }
    }

    pub(crate) fn addr6(&self, o: Own) -> Option<Ipv6Addr> {
        match o {
            Own::Configured => self.cfg.ipv6,
            Own::LinkLocal => self.addrs6.link_local,
        }
    }

    pub(crate) fn dad_of(&self, o: Own) -> Dad {
        self.addrs6.dad[o as usize]
    }

    /// Whether `o` may be used (DAD done or off).
    pub(crate) fn usable6(&self, o: Own) -> bool {
        self.dad_of(o) == Dad::Done
    }

    /// Whether `a` is one of our addresses and usable.
    pub(crate) fn usable_addr6(&self, a: Ipv6Addr) -> bool {
        self.own6(a).is_some_and(|o| self.usable6(o))
    }

    /// Whether the configured IPv6 address may be used.
    #[cfg(test)]
    pub(crate) fn ipv6_usable(&self) -> bool {
        self.usable6(Own::Configured)
    }

    /// Whether the link-local address may be used.
    #[cfg(test)]
    pub(crate) fn link_local_usable(&self) -> bool {
        self.usable6(Own::LinkLocal)
    }

    /// Our link-local address while it is usable.
    pub(crate) fn usable_link_local(&self) -> Option<Ipv6Addr> {
        self.addrs6
            .link_local
            .filter(|_| self.usable6(Own::LinkLocal))
    }

    /// The source of a datagram to `remote` that answers none ([`select_source`]).
    pub(crate) fn source_for(&self, remote: IpAddress) -> Option<IpAddress> {
        select_source(&self.cfg, self.usable_link_local(), remote)
    }

    /// The source of an IPv6 datagram to `remote` that answers none.
    pub(crate) fn source6(&self, remote: Ipv6Addr) -> Option<Ipv6Addr> {
        match self.source_for(IpAddress::V6(remote))? {
            IpAddress::V6(a) => Some(a),
            IpAddress::V4(_) => None,
        }
    }

    /// The source of an answer to the datagram `ip`: the address it was sent to when that is
    /// ours (Linux's `icmpv6_echo_reply`, `icmp6_send`, TCP's sockets), else the one chosen
    /// for its sender (a datagram to a group).
    pub(crate) fn answer_source6(&self, ip: &Ipv6Header) -> Option<Ipv6Addr> {
        match self.own6(ip.dst) {
            Some(_) => Some(ip.dst),
            None => self.source6(ip.src),
        }
    }
}
