//! IP reassembly: the queues of both families (`Reassembly`), and IPv4's with Linux's rules
//! and bounds: net/ipv4/ip_fragment.c (`ip_defrag`, `ip_frag_queue`, `ip_frag_too_far`,
//! `ip_frag_reinit`, `ip_frag_reasm`, `ip_expire`), Linux 6.x. The queue machinery both
//! families share is `frag_queues.rs`; IPv6's family is `ipv6_frag.rs`.
//!
//! One IPv4 queue per (source, protocol, ident): the destination is always ours, since
//! fragments for anyone else are dropped before they get here. The datagram a queue
//! completes goes through `Stack::ipv4_input` as if it had never been fragmented. Bounds:
//! `Config::ipfrag_*`.

use crate::frag_queues::{Datagram, Family, FragCount, Fragment, Queues, Timeout};
use crate::ipv6_frag::V6;
use crate::{Config, Instant, Stack, Stats};
use wirespeed_wire::icmpv4::error_type;
use wirespeed_wire::{checksum, ipv4, Ipv4Packet, Ipv4Repr, MacAddr};

/// ICMP time exceeded code "fragment reassembly time exceeded" (RFC 792; Linux
/// `ICMP_EXC_FRAGTIME`).
const FRAG_TIME: u8 = 1;

/// IPv4 as the reassembly queues see it.
pub(crate) struct V4;

impl V4 {
    /// The queues' view of an IPv4 fragment; its key is Linux `ip_find`'s (source,
    /// protocol, ident).
    pub(crate) fn fragment<'a>(pkt: &'a Ipv4Packet<&[u8]>) -> Fragment<'a, u64> {
        let proto = u8::from(pkt.protocol()) as u64;
        Fragment {
            key: (pkt.src().to_u32() as u64) << 32 | (pkt.ident() as u64) << 8 | proto,
            head: pkt.header(),
            data: pkt.payload(),
            offset: pkt.frag_offset() as u32,
            more: pkt.more_frags(),
            ecn: pkt.dscp_ecn() & 3,
            next_header_at: 0,
        }
    }
}

impl Family for V4 {
    type Key = u64;

    fn source(key: &u64) -> Option<u32> {
        Some((key >> 32) as u32)
    }

    /// The first fragment's header (options included) made the datagram's, as Linux's
    /// `ip_frag_reasm` makes it: its whole length, no fragment bits, CE if a fragment had
    /// it (RFC 3168), a new checksum; none over 65535 bytes.
    fn write_header(out: &mut Vec<u8>, head: &[u8], _: usize, len: usize, ce: bool) -> bool {
        let total = head.len() + len;
        if total > u16::MAX as usize {
            return false;
        }
        out.extend_from_slice(head);
        let h = &mut out[..];
        h[ipv4::field::TOTAL_LEN].copy_from_slice(&(total as u16).to_be_bytes());
        // Linux keeps DF when the largest fragment had it; only a forwarder would care.
        h[ipv4::field::FLAGS_FRAG].fill(0);
        if ce {
            h[ipv4::field::DSCP_ECN] |= 3;
        }
        h[ipv4::field::CHECKSUM].fill(0);
        let c = checksum::checksum(h);
        h[ipv4::field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
        true
    }

    fn count(stats: &mut Stats, what: FragCount) {
        *match what {
            FragCount::Off => &mut stats.ip_fragments_dropped,
            FragCount::Reassembled => &mut stats.ip_frag_reassembled,
            FragCount::Duplicate => &mut stats.ip_frag_duplicate,
            FragCount::Overlap => &mut stats.ip_frag_overlap_dropped,
            FragCount::Malformed => &mut stats.ip_frag_malformed,
            FragCount::MemExceeded => &mut stats.ip_frag_mem_exceeded,
            FragCount::TooFar => &mut stats.ip_frag_too_far,
            FragCount::Timeout => &mut stats.ip_frag_timeout,
        } += 1;
    }
}

/// The reassembly queues of one stack: each family's own, with its own bounds, as Linux
/// keeps `net->ipv4.fqdir` and `net->ipv6.fqdir`.
pub(crate) struct Reassembly {
    pub(crate) v4: Queues<V4>,
    pub(crate) v6: Queues<V6>,
}

impl Reassembly {
    /// Allocates nothing until the first fragment.
    pub(crate) fn new(cfg: &Config) -> Reassembly {
        Reassembly {
            v4: Queues::new(
                cfg.ipfrag_high_thresh,
                cfg.ipfrag_time,
                cfg.ipfrag_max_dist,
                cfg.secret ^ 0x0f4a_9e11,
            ),
            // Linux has no `ipfrag_max_dist` for IPv6.
            v6: Queues::new(
                cfg.ip6frag_high_thresh,
                cfg.ip6frag_time,
                0,
                cfg.secret ^ 0x6f4a_9e16,
            ),
        }
    }

    /// The earliest queue deadline of either family.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let (a, b) = (self.v4.next_deadline(), self.v6.next_deadline());
        a.into_iter().chain(b).min()
    }
}

impl Stack {
    /// A fragment for us, checked like any datagram: queued, and the datagram it completes
    /// goes through `ipv4_input` as if never fragmented (Linux `ip_local_deliver`). It
    /// carries the first fragment's link-layer facts, as Linux's reassembled skb does.
    pub(crate) fn ipv4_fragment(
        &mut self,
        src_mac: MacAddr,
        to_host: bool,
        pkt: &Ipv4Packet<&[u8]>,
    ) {
        let now = self.now;
        self.expire_fragments(now);
        let (frag, from) = (V4::fragment(pkt), (src_mac, to_host));
        if let Some(d) = self.frag.v4.input(now, &frag, from, &mut self.stats) {
            self.ipv4_input(d.src_mac, d.to_host, d.bytes());
            self.frag.v4.recycle(d);
        }
    }

    /// Ends the reassembly queues of both families whose time is up, answering with ICMP
    /// or ICMPv6 time exceeded where Linux does.
    pub(crate) fn expire_fragments(&mut self, now: Instant) {
        while let Some(t) = self.frag.v4.expire(now, &mut self.stats) {
            if let Timeout::Answer(first) = t {
                self.answer_timeout(&first);
                self.frag.v4.recycle(first);
            }
        }
        while let Some(t) = self.frag.v6.expire(now, &mut self.stats) {
            if let Timeout::Answer(first) = t {
                self.answer_timeout_v6(&first);
                self.frag.v6.recycle(first);
            }
        }
    }

    /// ICMP "fragment reassembly time exceeded" about the offset-0 fragment; Linux sends
    /// none without a route back (`icmp_route_lookup`).
    fn answer_timeout(&mut self, first: &Datagram) {
        let Ok(pkt) = Ipv4Packet::new_checked(first.bytes()) else {
            return;
        };
        let Ok(ip) = Ipv4Repr::parse_fragment(&pkt) else {
            return;
        };
        if self.next_hop(ip.src.into()).is_some() {
            let ty = error_type::TIME_EXCEEDED;
            self.send_icmp_error(first.src_mac, &ip, first.bytes(), ty, FRAG_TIME, 0);
        }
    }
}
