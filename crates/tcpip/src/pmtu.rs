//! ICMP errors about our own TCP segments that carry a path MTU: IPv4's "fragmentation
//! needed" (type 3 code 4) and ICMPv6's "packet too big". The quoted segment names the
//! connection; `tcp::pmtu` does the rest (docs/TCPIP.md, "Path MTU").

use crate::tcp::QuotedSegment;
use crate::Stack;
use wirespeed_wire::{ipv4, ipv6, IpAddress, Ipv4Addr, Ipv6Addr, SeqNumber};

/// Linux's `ip_rt_min_pmtu`: a smaller IPv4 MTU (0 from an old router included) is taken as
/// this.
const MIN_PMTU_V4: u32 = 552;
/// IPv6's minimum link MTU (RFC 8200 §5); a packet too big below it is ignored
/// (`tcp_v6_err`).
const MIN_MTU_V6: u32 = 1280;
const PROTO_TCP: u8 = 6;

impl Stack {
    /// "Fragmentation needed" quoting `quoted` (our datagram from its IP header on), next-hop
    /// MTU `mtu`.
    pub(crate) fn frag_needed_input(&mut self, mtu: u16, quoted: &[u8]) {
        let Some(q) = quoted_v4(quoted, self.cfg.ipv4) else {
            self.stats.icmp_unsupported += 1;
            return;
        };
        let mtu = u32::from(mtu).max(MIN_PMTU_V4);
        self.with_tcp(|tcp, cx| tcp.path_mtu_reduced(cx, &q, mtu));
    }

    /// "Packet too big" quoting `quoted` (our datagram from its IPv6 header on).
    pub(crate) fn packet_too_big_input(&mut self, mtu: u32, quoted: &[u8]) {
        if mtu < MIN_MTU_V6 {
            self.stats.icmp6_unsupported += 1;
            return;
        }
        let ours =
            |q: &QuotedSegment| matches!(q.local, IpAddress::V6(a) if self.own6(a).is_some());
        let Some(q) = quoted_v6(quoted).filter(ours) else {
            self.stats.icmp6_unsupported += 1;
            return;
        };
        self.with_tcp(|tcp, cx| tcp.path_mtu_reduced(cx, &q, mtu));
    }
}

/// The TCP segment an IPv4 error quotes, if it is one of ours (`us`) with its first 8 bytes.
fn quoted_v4(q: &[u8], us: Ipv4Addr) -> Option<QuotedSegment> {
    let hl = usize::from(*q.first()? & 0xf) * 4;
    if q[0] >> 4 != 4 || hl < ipv4::HEADER_LEN || *q.get(9)? != PROTO_TCP {
        return None;
    }
    let src = Ipv4Addr(q.get(12..16)?.try_into().ok()?);
    let dst = Ipv4Addr(q.get(16..20)?.try_into().ok()?);
    if src != us {
        return None;
    }
    segment(IpAddress::V4(src), IpAddress::V4(dst), q.get(hl..hl + 8)?)
}

/// The TCP segment an IPv6 error quotes (we send no extension headers, so TCP follows the
/// fixed header), with its first 8 bytes.
fn quoted_v6(q: &[u8]) -> Option<QuotedSegment> {
    if *q.first()? >> 4 != 6 || *q.get(6)? != PROTO_TCP {
        return None;
    }
    let src = Ipv6Addr(q.get(8..24)?.try_into().ok()?);
    let dst = Ipv6Addr(q.get(24..40)?.try_into().ok()?);
    let at = ipv6::HEADER_LEN;
    segment(IpAddress::V6(src), IpAddress::V6(dst), q.get(at..at + 8)?)
}

fn segment(local: IpAddress, remote: IpAddress, tcp: &[u8]) -> Option<QuotedSegment> {
    Some(QuotedSegment {
        local,
        remote,
        local_port: u16::from_be_bytes([tcp[0], tcp[1]]),
        remote_port: u16::from_be_bytes([tcp[2], tcp[3]]),
        seq: SeqNumber(u32::from_be_bytes(tcp[4..8].try_into().ok()?)),
    })
}
