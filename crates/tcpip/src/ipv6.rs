//! IPv6 input: the fixed header's checks in Linux's order (`ipv6_rcv`), the extension
//! header walk (`wire::ipv6_ext::walk_extension_headers`, as `ip6_protocol_deliver_rcu` walks
//! them), then TCP, UDP and ICMPv6 (`icmpv6.rs`; neighbour discovery in `ndp.rs`).
//!
//! The stack owns one IPv6 address (`Config::ipv6`) and takes datagrams to it, to its
//! solicited-node group and to all-nodes. It does not reassemble IPv6 fragments yet: they
//! are counted and dropped (docs/TCPIP.md, "IPv6").

use crate::udp::UdpInput;
use crate::{IpHeader, Stack};
use wirespeed_wire::icmpv6::{param_problem_code, unreachable_code};
use wirespeed_wire::ipv6_ext::{walk_extension_headers, ExtWalk};
use wirespeed_wire::ndisc;
use wirespeed_wire::{IpProtocol, Ipv6Addr, Ipv6Packet, MacAddr};

/// What ICMPv6 and NDP input need from the fixed header.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ipv6Header {
    pub(crate) src: Ipv6Addr,
    pub(crate) dst: Ipv6Addr,
    pub(crate) hop_limit: u8,
    pub(crate) traffic_class: u8,
}

impl Stack {
    /// One IPv6 datagram (`to_host`: the frame was sent to our MAC alone).
    pub(crate) fn ipv6_input(&mut self, src_mac: MacAddr, to_host: bool, data: &[u8]) {
        let Some(ours) = self.cfg.ipv6 else {
            self.stats.ipv6_unsupported += 1;
            return;
        };
        let pkt = match Ipv6Packet::new_checked(data) {
            Ok(p) => p,
            Err(wirespeed_wire::Error::Truncated) => {
                self.stats.ip6_truncated += 1;
                return;
            }
            Err(_) => {
                self.stats.ip6_malformed += 1;
                return;
            }
        };
        let (src, dst) = (pkt.src(), pkt.dst());
        if src.is_multicast()
            || src.is_loopback()
            || src.is_v4_mapped()
            || dst.is_loopback()
            || dst.is_v4_mapped()
            || src == ours
            || src_mac.is_multicast()
        {
            self.stats.ip6_bad_source += 1;
            return;
        }
        let unicast = dst == ours;
        if !unicast && dst != ours.solicited_node() && dst != Ipv6Addr::ALL_NODES {
            self.stats.ip6_not_for_us += 1;
            return;
        }
        // A tentative address (duplicate address detection under way) takes nothing but
        // neighbour discovery, as Linux's does not (it is not yet a local address).
        let tentative = !self.ipv6_usable();
        if tentative && pkt.next_header() != IpProtocol::Icmpv6 {
            self.stats.ip6_tentative += 1;
            return;
        }
        let ip = Ipv6Header {
            src,
            dst,
            hop_limit: pkt.hop_limit(),
            traffic_class: pkt.traffic_class(),
        };
        // The datagram as it came, for an ICMPv6 error to quote.
        let dgram = &data[..wirespeed_wire::ipv6::HEADER_LEN + pkt.payload_len()];
        let payload = pkt.payload();
        let (protocol, offset, next_header_at) =
            match walk_extension_headers(pkt.next_header(), payload, dst.is_multicast()) {
                ExtWalk::Upper {
                    fragment: Some(_),
                    protocol: IpProtocol::Icmpv6,
                    offset,
                    ..
                } if payload.get(offset).is_some_and(|&t| ndisc::is_ndp(t)) => {
                    // Neighbour discovery never comes in fragments (Linux's
                    // suppress_frag_ndisc), not even atomic ones.
                    self.stats.ndp_invalid += 1;
                    return;
                }
                // An atomic fragment (offset 0, no more) is a whole datagram (RFC 6946).
                ExtWalk::Upper {
                    fragment: Some(f), ..
                } if !f.is_atomic() => {
                    self.stats.ip6_fragments_dropped += 1;
                    return;
                }
                ExtWalk::Upper {
                    protocol,
                    offset,
                    next_header_at,
                    ..
                } => (protocol, offset, next_header_at),
                ExtWalk::NoNextHeader => {
                    self.stats.ip6_no_next_header += 1;
                    return;
                }
                ExtWalk::ParamProblem { code, pointer } => {
                    self.stats.ip6_param_problems += 1;
                    self.send_param_problem(src_mac, &ip, dgram, code, pointer as u32);
                    return;
                }
                ExtWalk::Discard { .. } => {
                    self.stats.ip6_bad_ext_headers += 1;
                    return;
                }
            };
        let upper = &payload[offset..];
        // Linux answers only along a route back, and opens no connection without one.
        let answerable = self.next_hop(src.into()).is_some();
        let hdr = IpHeader {
            src: src.into(),
            dst: dst.into(),
            ecn: ip.traffic_class & 3,
        };
        match protocol {
            IpProtocol::Tcp if !to_host || !unicast => self.stats.tcp_not_host_mac += 1,
            IpProtocol::Tcp if !answerable => self.stats.ip_no_route_back += 1,
            IpProtocol::Tcp => self.with_tcp(|tcp, cx| tcp.input(cx, src_mac, &hdr, upper)),
            IpProtocol::Udp => match self.udp.input(&self.cfg, &mut self.stats, &hdr, upper) {
                UdpInput::Event(ev) => self.events.push_back(ev),
                UdpInput::NoSocket if to_host && unicast && answerable => {
                    self.send_unreachable_v6(
                        src_mac,
                        &ip,
                        dgram,
                        unreachable_code::PORT_UNREACHABLE,
                    );
                }
                UdpInput::NoSocket | UdpInput::Taken => {}
            },
            IpProtocol::Icmpv6 => self.icmpv6_input(src_mac, &ip, upper, tentative),
            _ => {
                // No handler: Linux's ip6_protocol_deliver_rcu answers "unrecognized next
                // header", pointing at the field that named it.
                self.stats.ip6_param_problems += 1;
                let code = param_problem_code::UNRECOGNIZED_NEXT_HEADER;
                self.send_param_problem(src_mac, &ip, dgram, code, next_header_at as u32);
            }
        }
    }
}
