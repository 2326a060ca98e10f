//! IPv6 input: the fixed header's checks in Linux's order (`ipv6_rcv`), the extension
//! header walk (`wire::ipv6_ext::walk_extension_headers`, as `ip6_protocol_deliver_rcu` walks
//! them), then TCP, UDP and ICMPv6 (`icmpv6.rs`; neighbour discovery in `ndp.rs`).
//!
//! The stack owns two IPv6 addresses (`addr6.rs`: `Config::ipv6` and the link-local one)
//! and takes datagrams to them, to their solicited-node groups and to all-nodes. Fragments
//! are reassembled (`ipv6_frag.rs`) and the datagram walks on from its fragmentable part
//! (`ipv6_walked`), as Linux's `ipv6_frag_rcv` hands it back to `ip6_protocol_deliver_rcu`.

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

impl Ipv6Header {
    pub(crate) fn of(pkt: &Ipv6Packet<&[u8]>) -> Ipv6Header {
        Ipv6Header {
            src: pkt.src(),
            dst: pkt.dst(),
            hop_limit: pkt.hop_limit(),
            traffic_class: pkt.traffic_class(),
        }
    }
}

/// A datagram past the fixed header's checks, and how it came.
pub(crate) struct Inbound<'a> {
    pub(crate) src_mac: MacAddr,
    /// The frame was sent to our MAC alone (Linux `PACKET_HOST`).
    pub(crate) to_host: bool,
    pub(crate) ip: Ipv6Header,
    /// The datagram, IPv6 header first, as it came or as reassembled: what an ICMPv6 error
    /// quotes.
    pub(crate) dgram: &'a [u8],
    /// Reassembled from fragments (Linux `IP6SKB_FRAGMENTED`, as an atomic fragment is).
    pub(crate) reassembled: bool,
    /// The address that would answer is tentative or failed: only neighbour discovery is
    /// taken.
    pub(crate) tentative: bool,
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
        // An IPv4-mapped source passes here, as in Linux's ipv6_rcv; TCP refuses it below.
        if src.is_multicast()
            || src.is_loopback()
            || dst.is_loopback()
            || dst.is_v4_mapped()
            || self.own6(src).is_some()
            || src_mac.is_multicast()
        {
            self.stats.ip6_bad_source += 1;
            return;
        }
        let ll = self.addrs6.link_local;
        let group = dst == Ipv6Addr::ALL_NODES
            || dst == ours.solicited_node()
            || ll.is_some_and(|a| dst == a.solicited_node());
        if self.own6(dst).is_none() && !group {
            self.stats.ip6_not_for_us += 1;
            return;
        }
        // An address that is tentative (duplicate address detection under way) or failed
        // takes nothing but neighbour discovery, as Linux's is not a local address.
        let ip = Ipv6Header::of(&pkt);
        let tentative = !self
            .answer_source6(&ip)
            .is_some_and(|a| self.usable_addr6(a));
        if tentative && pkt.next_header() != IpProtocol::Icmpv6 {
            self.stats.ip6_tentative += 1;
            return;
        }
        let inbound = Inbound {
            src_mac,
            to_host,
            ip,
            // The datagram as it came, for an ICMPv6 error to quote.
            dgram: &data[..wirespeed_wire::ipv6::HEADER_LEN + pkt.payload_len()],
            reassembled: false,
            tentative,
        };
        match walk_extension_headers(pkt.next_header(), pkt.payload(), dst.is_multicast()) {
            // An atomic fragment (offset 0, no more) is a whole datagram (RFC 6946) and the
            // walk went on past it; any other is reassembled first (`ipv6_frag.rs`).
            ExtWalk::Upper {
                fragment: Some(f),
                offset,
                next_header_at,
                ..
            } if !f.is_atomic() => self.ipv6_fragment(&inbound, f, offset, next_header_at),
            walk => self.ipv6_walked(&inbound, walk),
        }
    }

    /// The rest of IPv6 input once the extension headers are walked, for a datagram as it
    /// came or as reassembled (Linux's `ip6_protocol_deliver_rcu` past its header loop).
    pub(crate) fn ipv6_walked(&mut self, inb: &Inbound, walk: ExtWalk) {
        let (protocol, offset, next_header_at, fragment) = match walk {
            ExtWalk::Upper {
                protocol,
                offset,
                next_header_at,
                fragment,
            } => (protocol, offset, next_header_at, fragment),
            ExtWalk::NoNextHeader => {
                self.stats.ip6_no_next_header += 1;
                return;
            }
            ExtWalk::ParamProblem { code, pointer } => {
                self.stats.ip6_param_problems += 1;
                // Linux's icmp6_send answers a frame sent to a link-layer group only about
                // an option whose type asks for it (RFC 4443 §2.4 (e.3)).
                if inb.to_host || code == param_problem_code::UNRECOGNIZED_OPTION {
                    let (mac, dgram) = (inb.src_mac, inb.dgram);
                    self.send_param_problem(mac, &inb.ip, dgram, code, pointer as u32);
                }
                return;
            }
            ExtWalk::Discard { .. } => {
                self.stats.ip6_bad_ext_headers += 1;
                return;
            }
        };
        let upper = &inb.dgram[wirespeed_wire::ipv6::HEADER_LEN + offset..];
        let fragmented = inb.reassembled || fragment.is_some();
        if fragmented
            && protocol == IpProtocol::Icmpv6
            && upper.first().is_some_and(|&t| ndisc::is_ndp(t))
        {
            // Neighbour discovery never comes in fragments (Linux's suppress_frag_ndisc),
            // not even atomic ones.
            self.stats.ndp_invalid += 1;
            return;
        }
        self.ipv6_upper(inb, protocol, upper, next_header_at);
    }

    /// TCP, UDP or ICMPv6 input of `upper`, what `protocol` names (at `next_header_at`).
    fn ipv6_upper(
        &mut self,
        inb: &Inbound,
        protocol: IpProtocol,
        upper: &[u8],
        next_header_at: usize,
    ) {
        let (src_mac, ip, dgram) = (inb.src_mac, &inb.ip, inb.dgram);
        let unicast = self.own6(ip.dst).is_some();
        let to_host = inb.to_host;
        // Linux answers only along a route back, and opens no connection without one.
        let answerable = self.next_hop(ip.src.into()).is_some();
        let hdr = IpHeader {
            src: ip.src.into(),
            dst: ip.dst.into(),
            ecn: ip.traffic_class & 3,
        };
        match protocol {
            IpProtocol::Tcp if !to_host || !unicast => self.stats.tcp_not_host_mac += 1,
            // Linux's tcp_v6_conn_request takes no connection from an IPv4-mapped source (and
            // our demux keys an IPv4 peer by that very address).
            IpProtocol::Tcp if ip.src.is_v4_mapped() => self.stats.ip6_bad_source += 1,
            IpProtocol::Tcp if !answerable => self.stats.ip_no_route_back += 1,
            IpProtocol::Tcp => self.with_tcp(|tcp, cx| tcp.input(cx, src_mac, &hdr, upper)),
            IpProtocol::Udp => match self.udp.input(&self.cfg, &mut self.stats, &hdr, upper) {
                UdpInput::Event(ev) => self.events.push_back(ev),
                UdpInput::NoSocket if to_host && unicast && answerable => {
                    let code = unreachable_code::PORT_UNREACHABLE;
                    self.send_unreachable_v6(src_mac, ip, dgram, code);
                }
                UdpInput::NoSocket | UdpInput::Taken => {}
            },
            IpProtocol::Icmpv6 => self.icmpv6_input(src_mac, ip, upper, inb.tentative),
            _ => {
                // No handler: Linux's ip6_protocol_deliver_rcu answers "unrecognized next
                // header", pointing at the field that named it.
                self.stats.ip6_param_problems += 1;
                if to_host {
                    let code = param_problem_code::UNRECOGNIZED_NEXT_HEADER;
                    self.send_param_problem(src_mac, ip, dgram, code, next_header_at as u32);
                }
            }
        }
    }
}
