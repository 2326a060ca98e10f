//! ICMPv6 (RFC 4443): echo replies, the errors input sends (port unreachable, parameter
//! problem), and neighbour discovery handed to `ndp.rs`. Errors draw on the one ICMP budget
//! IPv4 uses, as Linux's `icmp_global_allow` is shared by both families.

use crate::ipv6::Ipv6Header;
use crate::Stack;
use wirespeed_wire::icmpv6::{self, Icmpv6Error, Icmpv6Packet, Icmpv6Repr};
use wirespeed_wire::ipv6_ext::{walk_extension_headers, ExtWalk};
use wirespeed_wire::{EtherType, IpProtocol, Ipv6Addr, Ipv6Repr, MacAddr};

use icmpv6::param_problem_code;

impl Stack {
    /// One ICMPv6 message; `tentative`: the address it came to is not ours yet, or not ours
    /// at all (DAD failed): only neighbour discovery is taken.
    pub(crate) fn icmpv6_input(
        &mut self,
        src_mac: MacAddr,
        ip: &Ipv6Header,
        data: &[u8],
        tentative: bool,
    ) {
        let pkt = match Icmpv6Packet::new_checked(data) {
            Ok(p) => p,
            Err(_) => {
                self.stats.icmp6_malformed += 1;
                return;
            }
        };
        let repr = match Icmpv6Repr::parse(&pkt, ip.src, ip.dst) {
            Ok(r) => r,
            Err(wirespeed_wire::Error::Checksum) => {
                self.stats.icmp6_bad_checksum += 1;
                return;
            }
            Err(wirespeed_wire::Error::Unsupported) => {
                self.stats.icmp6_unsupported += 1;
                return;
            }
            Err(_) => {
                self.stats.icmp6_malformed += 1;
                return;
            }
        };
        match repr {
            Icmpv6Repr::NeighborSolicit {
                target,
                source_lladdr,
            } => self.ndp_solicitation_input(src_mac, ip, target, source_lladdr),
            Icmpv6Repr::NeighborAdvert {
                solicited,
                target,
                target_lladdr,
                ..
            } => self.ndp_advertisement_input(ip, solicited, target, target_lladdr),
            _ if tentative => self.stats.ip6_tentative += 1,
            Icmpv6Repr::PacketTooBig { mtu, quoted } => self.packet_too_big_input(mtu, quoted),
            Icmpv6Repr::EchoRequest {
                code,
                ident,
                seq_no,
                data,
            } => {
                if self.next_hop(ip.src.into()).is_none() {
                    self.stats.ip_no_route_back += 1;
                    return;
                }
                // From the address the request came to; to a group, from the one chosen
                // for its sender (Linux's icmpv6_echo_reply).
                let Some(src) = self.answer_source6(ip) else {
                    return;
                };
                // The request's code goes back, as Linux's icmpv6_echo_reply copies it.
                let reply = Icmpv6Repr::EchoReply {
                    code,
                    ident,
                    seq_no,
                    data,
                };
                // Linux's reply keeps the request's traffic class (icmpv6_echo_reply).
                let len = reply.buffer_len();
                let tc = ip.traffic_class;
                let ok = self.queue_icmpv6(src, src_mac, ip.src, 64, tc, len, |b, s| {
                    reply.emit(s, ip.src, b).is_ok()
                });
                if ok {
                    self.stats.icmp6_echo_replies += 1;
                }
            }
            _ => self.stats.icmp6_unsupported += 1,
        }
    }

    /// Parameter problem about `dgram` (`pointer`: from the start of its IPv6 header).
    pub(crate) fn send_param_problem(
        &mut self,
        src_mac: MacAddr,
        ip: &Ipv6Header,
        dgram: &[u8],
        code: u8,
        pointer: u32,
    ) {
        let ty = icmpv6::msg_type::PARAM_PROBLEM;
        self.send_icmpv6_error(src_mac, ip, dgram, ty, code, pointer);
    }

    /// Destination unreachable (`code`: `icmpv6::unreachable_code`) about `dgram`.
    pub(crate) fn send_unreachable_v6(
        &mut self,
        src_mac: MacAddr,
        ip: &Ipv6Header,
        dgram: &[u8],
        code: u8,
    ) {
        let ty = icmpv6::msg_type::DST_UNREACHABLE;
        self.send_icmpv6_error(src_mac, ip, dgram, ty, code, 0);
    }

    /// Linux's interval between ICMPv6 errors to `dst` (`icmpv6_xrlim_allow`): `icmpv6_time`
    /// (1 s) halved for every 32 bits the route to `dst` is shorter than a /128, "more
    /// bandwidth to wider prefixes": 250 ms on a /64 link, 62.5 ms through the default route.
    fn icmpv6_peer_interval_us(&self, dst: Ipv6Addr) -> u64 {
        let on_link = self
            .cfg
            .ipv6
            .is_some_and(|ours| dst.same_prefix(ours, self.cfg.ipv6_prefix_len));
        let prefix_len = if dst.is_link_local() {
            64
        } else if on_link {
            self.cfg.ipv6_prefix_len.min(128)
        } else {
            0
        };
        crate::icmp::PEER_INTERVAL_US >> ((128 - u32::from(prefix_len)) >> 5)
    }

    /// An ICMPv6 error about `dgram` (IPv6 header first, as received), with RFC 4443
    /// §2.4 (e)'s limits as Linux's `icmp6_send` applies them: never about an ICMPv6 error,
    /// never to a group destination except an unrecognized option's parameter problem, and
    /// within the shared budget.
    pub(crate) fn send_icmpv6_error(
        &mut self,
        src_mac: MacAddr,
        ip: &Ipv6Header,
        dgram: &[u8],
        msg_type: u8,
        code: u8,
        word: u32,
    ) {
        let option_problem = msg_type == icmpv6::msg_type::PARAM_PROBLEM
            && code == param_problem_code::UNRECOGNIZED_OPTION;
        if (ip.dst.is_multicast() && !option_problem) || about_an_icmpv6_error(dgram) {
            return;
        }
        if self.next_hop(ip.src.into()).is_none() {
            return;
        }
        let Some(src) = self.answer_source6(ip) else {
            return;
        };
        if !self.icmp_error_allowed(ip.src.into(), self.icmpv6_peer_interval_us(ip.src)) {
            return;
        }
        // As much of the datagram as fits the minimum MTU (RFC 4443 §2.4 (c)).
        let err = Icmpv6Error {
            msg_type,
            code,
            word,
            quoted: icmpv6::quote(dgram),
        };
        let len = err.buffer_len();
        if self.queue_icmpv6(src, src_mac, ip.src, 64, 0, len, |b, s| {
            err.emit(s, ip.src, b).is_ok()
        }) {
            self.stats.icmp_errors_sent += 1;
        }
    }

    /// Queues an ICMPv6 message of `len` bytes, written by `emit(buf, src)`, from `src` (one
    /// of our addresses, or the unspecified one for a DAD probe) to `dst` at `mac` with
    /// `hop_limit` and traffic class `tclass`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn queue_icmpv6(
        &mut self,
        src: Ipv6Addr,
        mac: MacAddr,
        dst: Ipv6Addr,
        hop_limit: u8,
        tclass: u8,
        len: usize,
        emit: impl FnOnce(&mut [u8], Ipv6Addr) -> bool,
    ) -> bool {
        let ip = Ipv6Repr {
            src,
            dst,
            next_header: IpProtocol::Icmpv6,
            payload_len: len,
            hop_limit,
            traffic_class: tclass,
        };
        let eth = self.eth_repr(mac, EtherType::Ipv6);
        let ok = self.ctrl.push_with(dst.into(), |buf| {
            let e = eth.header_len();
            let l4 = e + wirespeed_wire::ipv6::HEADER_LEN;
            if buf.len() < l4 + len {
                return 0;
            }
            let _ = eth.emit(buf);
            let _ = ip.emit(&mut buf[e..]);
            if !emit(&mut buf[l4..l4 + len], src) {
                return 0;
            }
            l4 + len
        });
        if !ok {
            self.stats.ctrl_queue_full += 1;
        }
        ok
    }
}

/// Whether `dgram` carries an ICMPv6 error (types below 128) after its extension headers, as
/// Linux's `is_ineligible` finds it: no error is sent about one (RFC 4443 §2.4 (e.1)).
fn about_an_icmpv6_error(dgram: &[u8]) -> bool {
    let Ok(pkt) = wirespeed_wire::Ipv6Packet::new_checked(dgram) else {
        return true;
    };
    let payload = pkt.payload();
    match walk_extension_headers(pkt.next_header(), payload, pkt.dst().is_multicast()) {
        ExtWalk::Upper {
            protocol: IpProtocol::Icmpv6,
            offset,
            ..
        } => payload.get(offset).is_none_or(|&t| icmpv6::is_error(t)),
        _ => false,
    }
}
