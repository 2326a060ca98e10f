//! IPv6 reassembly with Linux's rules and bounds: net/ipv6/reassembly.c (`ipv6_frag_rcv`,
//! `fq_find`, `ip6_frag_queue`, `ip6_frag_reasm`, `ip6_frag_expire`) and
//! include/net/ipv6_frag.h (`ip6frag_expire_frag_queue`), Linux 6.x, on the queues both
//! families share (`frag_queues.rs`).
//!
//! The extension header walk (`wire::ipv6_ext`) stops at a fragment that needs reassembly
//! and has made the per-fragment checks Linux makes before queueing (the first fragment
//! holds the header chain, the fragment ends within 65535 bytes, one with M set carries a
//! multiple of 8 bytes). One queue per (source, destination, ident), Linux's
//! `frag_v6_compare_key` (the destination may be ours or a group); the first fragment's
//! unfragmentable part (fixed header and the extension headers before the fragment header)
//! becomes the datagram's header, and the datagram walks on from its fragmentable part
//! (`walk_reassembled`). Bounds: `Config::ip6frag_*`.

use crate::frag_queues::{Datagram, Family, FragCount, Fragment};
use crate::ipv6::{Inbound, Ipv6Header};
use crate::{Stack, Stats};
use std::hash::{Hash, Hasher};
use wirespeed_wire::icmpv6::{msg_type, time_exceeded_code};
use wirespeed_wire::ipv6::{field, HEADER_LEN};
use wirespeed_wire::ipv6_ext::{walk_reassembled, FragmentHeader, FRAGMENT_HEADER_LEN};
use wirespeed_wire::{Ipv6Addr, Ipv6Packet};

/// IPv6 as the reassembly queues see it.
pub(crate) struct V6;

/// Linux's `frag_v6_compare_key` on a host with one interface: source, destination, ident.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct V6Key {
    pub(crate) src: Ipv6Addr,
    pub(crate) dst: Ipv6Addr,
    pub(crate) ident: u32,
}

impl Hash for V6Key {
    /// In words, as the index's hasher takes them best.
    fn hash<H: Hasher>(&self, h: &mut H) {
        for a in [self.src.0, self.dst.0] {
            let (hi, lo) = a.split_at(8);
            h.write_u64(u64::from_ne_bytes(hi.try_into().unwrap_or_default()));
            h.write_u64(u64::from_ne_bytes(lo.try_into().unwrap_or_default()));
        }
        h.write_u32(self.ident);
    }
}

impl Family for V6 {
    type Key = V6Key;

    fn source(_: &V6Key) -> Option<u32> {
        None
    }

    /// Linux's `ip6_frag_reasm`: the first fragment's head without its fragment header,
    /// the field that named that header now naming what followed it, the payload length
    /// of the whole, CE if a fragment had it; none whose payload is over 65535 bytes.
    fn write_header(out: &mut Vec<u8>, head: &[u8], nh_at: usize, len: usize, ce: bool) -> bool {
        let Some(unfrag) = head.len().checked_sub(FRAGMENT_HEADER_LEN) else {
            return false;
        };
        let payload_len = unfrag.saturating_sub(HEADER_LEN) + len;
        if payload_len > u16::MAX as usize || nh_at >= unfrag || unfrag < HEADER_LEN {
            return false;
        }
        out.extend_from_slice(&head[..unfrag]);
        out[nh_at] = head[unfrag];
        out[field::PAYLOAD_LEN].copy_from_slice(&(payload_len as u16).to_be_bytes());
        if ce {
            // The ECN bits of the traffic class (RFC 3168), as `ipv6_change_dsfield`.
            out[1] |= 0x30;
        }
        true
    }

    fn count(stats: &mut Stats, what: FragCount) {
        *match what {
            FragCount::Off => &mut stats.ip6_fragments_dropped,
            FragCount::Reassembled => &mut stats.ip6_frag_reassembled,
            FragCount::Duplicate => &mut stats.ip6_frag_duplicate,
            FragCount::Overlap => &mut stats.ip6_frag_overlap_dropped,
            FragCount::Malformed => &mut stats.ip6_frag_malformed,
            FragCount::MemExceeded => &mut stats.ip6_frag_mem_exceeded,
            // No `ipfrag_max_dist` for IPv6: never restarted.
            FragCount::TooFar => return,
            FragCount::Timeout => &mut stats.ip6_frag_timeout,
        } += 1;
    }
}

impl Stack {
    /// A fragment for us that the extension header walk stopped at: its fragment header
    /// `frag`, its data `offset` bytes into the payload, `next_header_at` the field that
    /// named the fragment header. Queued; the datagram it completes walks on and goes
    /// through the rest of input as one never fragmented (`ipv6_frag_rcv` returning 1).
    pub(crate) fn ipv6_fragment(
        &mut self,
        inb: &Inbound,
        frag: FragmentHeader,
        offset: usize,
        next_header_at: usize,
    ) {
        let now = self.now;
        self.expire_fragments(now);
        let (ip, at) = (&inb.ip, HEADER_LEN + offset);
        let f = Fragment {
            key: V6Key {
                src: ip.src,
                dst: ip.dst,
                ident: frag.ident,
            },
            head: &inb.dgram[..at],
            data: &inb.dgram[at..],
            offset: frag.offset_bytes as u32,
            more: frag.more,
            ecn: ip.traffic_class & 3,
            next_header_at: next_header_at as u16,
        };
        let from = (inb.src_mac, inb.to_host);
        if let Some(d) = self.frag.v6.input(now, &f, from, &mut self.stats) {
            self.ipv6_reassembled(&d);
            self.frag.v6.recycle(d);
        }
    }

    /// A reassembled datagram: its headers walked on from the fragmentable part, then the
    /// rest of input. Only what its first fragment's frame was: a tentative address (DAD
    /// failed meanwhile) takes none, since neighbour discovery never comes in fragments.
    fn ipv6_reassembled(&mut self, d: &Datagram) {
        let Ok(pkt) = Ipv6Packet::new_checked(d.bytes()) else {
            return;
        };
        let ip = Ipv6Header::of(&pkt);
        if !self
            .answer_source6(&ip)
            .is_some_and(|a| self.usable_addr6(a))
        {
            self.stats.ip6_tentative += 1;
            return;
        }
        let inb = Inbound {
            src_mac: d.src_mac,
            to_host: d.to_host,
            ip,
            dgram: d.bytes(),
            reassembled: true,
            tentative: false,
        };
        let (offset, nh_at) = (d.head_len.saturating_sub(HEADER_LEN), d.next_header_at);
        let Some(&first) = d.bytes().get(nh_at) else {
            return;
        };
        let multicast = inb.ip.dst.is_multicast();
        let walk = walk_reassembled(first.into(), pkt.payload(), offset, nh_at, multicast);
        self.ipv6_walked(&inb, walk);
    }

    /// ICMPv6 "fragment reassembly time exceeded" about the offset-0 fragment, as Linux's
    /// `ip6frag_expire_frag_queue` sends it through `icmpv6_send` (none to a group
    /// destination, none without a route back, within the shared budget).
    pub(crate) fn answer_timeout_v6(&mut self, first: &Datagram) {
        let Ok(pkt) = Ipv6Packet::new_checked(first.bytes()) else {
            return;
        };
        let ip = Ipv6Header::of(&pkt);
        let (ty, code) = (msg_type::TIME_EXCEEDED, time_exceeded_code::REASSEMBLY);
        self.send_icmpv6_error(first.src_mac, &ip, first.bytes(), ty, code, 0);
    }
}
