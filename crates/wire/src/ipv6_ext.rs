//! IPv6 extension headers (RFC 8200 §4) as Linux's receive path walks them: hop-by-hop
//! and destination options, routing and fragment headers, from the fixed header
//! ([`crate::ipv6`]) to the upper layer ([`walk_extension_headers`], [`walk_reassembled`]).

use crate::icmpv6::param_problem_code;
use crate::ipv4::IpProtocol;
use crate::ipv6::{field, HEADER_LEN};
use crate::ipv6_options::{check_options, OptionDrop, OptionsVerdict};
use crate::{get_u16, get_u32, put_u16, put_u32, Error, Result};

/// Next header values of the extension headers (RFC 8200 §4) a receiver walks or meets.
pub mod ext_header {
    pub const HOP_BY_HOP: u8 = 0;
    pub const ROUTING: u8 = 43;
    pub const FRAGMENT: u8 = 44;
    /// ESP: the walk hands it up as an upper layer (Linux needs its xfrm module).
    pub const ESP: u8 = 50;
    /// AH: likewise, though the first-fragment check skips it as Linux's
    /// `ipv6_skip_exthdr` does.
    pub const AUTH: u8 = 51;
    pub const NO_NEXT_HEADER: u8 = 59;
    pub const DESTINATION_OPTIONS: u8 = 60;
}

/// The most extension headers [`walk_extension_headers`] walks before it gives up
/// ([`ExtDiscard::TooManyHeaders`]). Linux has no bound (its walk is bounded by the
/// packet's length); RFC 8200 §4.1's order has at most six, a destination options header
/// appearing twice.
pub const MAX_EXT_HEADERS: usize = 8;
/// The fragment header's length.
pub const FRAGMENT_HEADER_LEN: usize = 8;

/// A fragment header (RFC 8200 §4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentHeader {
    /// The first header of the fragmentable part.
    pub next_header: IpProtocol,
    /// Where this fragment's data goes in the fragmentable part, in bytes (a multiple of 8).
    pub offset_bytes: usize,
    /// The M flag: more fragments follow.
    pub more: bool,
    pub ident: u32,
}

impl FragmentHeader {
    /// Reads the first 8 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<Self> {
        let b = b.get(..FRAGMENT_HEADER_LEN).ok_or(Error::Truncated)?;
        let off = get_u16(b, 2);
        Ok(FragmentHeader {
            next_header: b[0].into(),
            offset_bytes: (off & !7) as usize,
            more: off & 1 != 0,
            ident: get_u32(b, 4),
        })
    }
    /// Writes the header ([`Error::Malformed`] for an offset that is not a multiple of 8
    /// or past 65528).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        if !self.offset_bytes.is_multiple_of(8) || self.offset_bytes > 0xfff8 {
            return Err(Error::Malformed);
        }
        let b = buf.get_mut(..FRAGMENT_HEADER_LEN).ok_or(Error::Truncated)?;
        b[0] = self.next_header.into();
        b[1] = 0;
        put_u16(b, 2, self.offset_bytes as u16 | self.more as u16);
        put_u32(b, 4, self.ident);
        Ok(FRAGMENT_HEADER_LEN)
    }
    /// Offset 0 and no more fragments (RFC 6946): the whole packet, reassembled as it is.
    pub fn is_atomic(&self) -> bool {
        self.offset_bytes == 0 && !self.more
    }
}

/// Why [`walk_extension_headers`] discards a packet silently (for the stack to count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtDiscard {
    /// A header runs past the payload, or one of at least 8 bytes does not fit.
    Truncated,
    /// A malformed options area (Linux's `ip6_parse_tlv` "bad"): an option running past
    /// its header, more than 7 bytes of consecutive padding, a PadN whose bytes are not
    /// zero, more than [`crate::ipv6_options::MAX_EXT_OPTIONS`] options; or a known option of the wrong size or
    /// alignment: a router alert not 2 bytes long, a jumbo payload not 4 bytes long at
    /// 4n+2, an IOAM option not at 4n, a CALIPSO option too short for its categories.
    BadOption,
    /// An unrecognized option whose type's top bits are 01, or 11 in a packet to a
    /// multicast destination.
    UnknownOption,
    /// An option Linux takes only with configuration a host of ours does not have, and
    /// otherwise drops whatever it holds: CALIPSO (no DOI configured) in hop-by-hop
    /// options, a home address option (no Mobile IPv6 state) in destination options.
    RefusedOption,
    /// A routing header in a packet to a multicast destination (Linux's
    /// `ipv6_rthdr_rcv`; RFC 4291 §2.7: a multicast address may not appear in one).
    RoutingToMulticast,
    /// More than [`MAX_EXT_HEADERS`] extension headers.
    TooManyHeaders,
    /// A routing header of a type Linux processes only when configured to, and drops
    /// otherwise: RPL (3, `rpl_seg_enabled`) and segment routing (4, `seg6_enabled`).
    RoutingTypeOff,
}

impl From<OptionDrop> for ExtDiscard {
    fn from(d: OptionDrop) -> ExtDiscard {
        match d {
            OptionDrop::BadOption => ExtDiscard::BadOption,
            OptionDrop::UnknownOption => ExtDiscard::UnknownOption,
            OptionDrop::RefusedOption => ExtDiscard::RefusedOption,
        }
    }
}

impl ExtDiscard {
    pub fn as_str(&self) -> &'static str {
        match self {
            ExtDiscard::Truncated => "extension header truncated",
            ExtDiscard::BadOption => "malformed option",
            ExtDiscard::UnknownOption => "unknown option (discard)",
            ExtDiscard::RefusedOption => "option refused",
            ExtDiscard::RoutingToMulticast => "routing header to a multicast destination",
            ExtDiscard::TooManyHeaders => "too many extension headers",
            ExtDiscard::RoutingTypeOff => "RPL or segment routing header (off, as in Linux)",
        }
    }
}

impl core::fmt::Display for ExtDiscard {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What Linux's receive path makes of a packet's extension headers
/// ([`walk_extension_headers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtWalk {
    /// Deliver to `protocol`, whose header starts `offset` bytes into the payload.
    ///
    /// `next_header_at` is where the next header field that named `protocol` lies, counted
    /// from the start of the IPv6 header (Linux's `nhoff`): the pointer of the parameter
    /// problem, code 1, that answers a protocol the stack does not handle (Linux's
    /// `ip6_protocol_deliver_rcu` does, unless the destination is multicast).
    ///
    /// `fragment` is the fragment header met, if any:
    /// - a fragment that needs reassembly (offset or M flag set) ends the walk: `protocol`
    ///   is the fragment header's next header (the first header of the fragmentable part,
    ///   which may be an extension header), `offset` where this fragment's data starts
    ///   (the fragment header is the 8 bytes before it) and `next_header_at` the field
    ///   that named the fragment header, which the reassembled packet's chain resumes
    ///   from; walk that packet on with [`walk_reassembled`]. Its checks (that the first
    ///   fragment holds the whole header chain, that a fragment ends within 65535 bytes
    ///   and one with M set carries a multiple of 8 bytes) are done; the rest (overlaps,
    ///   an empty fragment, which Linux drops with its whole queue) are the reassembler's;
    /// - an atomic fragment (offset 0, M clear) needs none: the walk goes on past it,
    ///   as Linux's `ipv6_frag_rcv` does, and `protocol` and `offset` are the upper
    ///   layer's. It still counts as a fragment (an NDP message in one is dropped:
    ///   [`crate::ndisc::ndp_ip_rules_ok`]).
    Upper {
        protocol: IpProtocol,
        offset: usize,
        next_header_at: usize,
        fragment: Option<FragmentHeader>,
    },
    /// Next header 59: nothing follows; dropped silently.
    NoNextHeader,
    /// Dropped with an ICMPv6 parameter problem of `code` whose pointer is `pointer`,
    /// counted from the start of the IPv6 header. Whether it may be sent is the stack's
    /// rule (RFC 4443 §2.4 (e)): to a packet sent to a multicast destination, only code 2
    /// for an option whose type's top bits are 10 (Linux's `icmp6_send`, `opt_unrec`).
    ParamProblem { code: u8, pointer: usize },
    /// Dropped silently.
    Discard { reason: ExtDiscard },
}

/// Walks the extension headers of a received packet as Linux's receive path does:
/// `ipv6_parse_hopopts` (net/ipv6/exthdrs.c) for a hop-by-hop options header, which may
/// only come first (anywhere else it is an unrecognized next header, code 1, as
/// `ip6_protocol_deliver_rcu` finds no handler for it), then `ipv6_destopt_rcv`,
/// `ipv6_rthdr_rcv` and `ipv6_frag_rcv` (net/ipv6/reassembly.c) until a header that is
/// not one of these.
///
/// `first` is the fixed header's next header, `payload` the bytes its payload length covers
/// ([`Ipv6Packet::payload`](crate::ipv6::Ipv6Packet::payload); a jumbogram, payload length
/// 0, is then empty and its hop-by-hop header truncated: the stack takes none),
/// `dst_is_multicast` whether the destination address is.
///
/// Options (hop-by-hop and destination), as `ip6_parse_tlv` reads them: Pad1 and PadN
/// are skipped (at most 7 bytes of padding in a row, PadN bytes zero); at most
/// [`crate::ipv6_options::MAX_EXT_OPTIONS`] others. In hop-by-hop options a router alert (2 bytes) is
/// accepted and ignored (a host does not forward), a jumbo payload option is a parameter
/// problem (code 0; pointing at its value when that is below 65536, else at the option,
/// since the payload length is not zero), an IOAM option is ignored (IOAM is off by
/// default) and a CALIPSO option discarded. In destination options a home address
/// option is discarded. Any other option is unrecognized and its type's top bits decide
/// (see [`crate::ipv6_options::ext_option`]); the parameter problem, code 2, points at its type byte.
///
/// Routing headers: in a packet to a multicast destination, discarded; types 3 and 4 (RPL
/// and segment routing, off by default in Linux) discarded whatever segments left says;
/// other types with segments left 0, skipped (RFC 8200 §4.4); otherwise a parameter
/// problem, code 0, pointing at the type field, since this stack handles no routing type
/// (Linux answers so for type 0, deprecated by RFC 5095).
///
/// Fragment headers: see [`ExtWalk::Upper`]. A fragment header that does not fit is a
/// parameter problem (code 0) pointing at it, as is a second one after an atomic fragment
/// (Linux's `IP6SKB_FRAGMENTED`).
pub fn walk_extension_headers(
    first: IpProtocol,
    payload: &[u8],
    dst_is_multicast: bool,
) -> ExtWalk {
    let at_fixed = field::NEXT_HEADER;
    Walker {
        payload,
        dst_is_multicast,
    }
    .walk(first.into(), 0, at_fixed, false)
}

/// Walks on in a reassembled packet, as Linux resumes after `ip6_frag_reasm`: `payload` is
/// the reassembled payload (the headers before the fragment header, then the fragmentable
/// part, no fragment header), `protocol` and `offset` where the fragmentable part starts
/// and what it starts with, `next_header_at` the field that named the fragment header
/// (all three from the first fragment's [`ExtWalk::Upper`]). A hop-by-hop options header
/// is then an unrecognized next header and a fragment header a parameter problem (code 0)
/// pointing at it; otherwise as [`walk_extension_headers`].
pub fn walk_reassembled(
    protocol: IpProtocol,
    payload: &[u8],
    offset: usize,
    next_header_at: usize,
    dst_is_multicast: bool,
) -> ExtWalk {
    Walker {
        payload,
        dst_is_multicast,
    }
    .walk(protocol.into(), offset, next_header_at, true)
}

struct Walker<'a> {
    payload: &'a [u8],
    dst_is_multicast: bool,
}

impl Walker<'_> {
    /// Walks from the header of type `nh` at `at` (a payload offset), named by the field
    /// at `nh_at` (an IPv6 header offset); `fragmented`: a fragment header was met.
    fn walk(&self, mut nh: u8, mut at: usize, mut nh_at: usize, mut fragmented: bool) -> ExtWalk {
        let resumed = fragmented;
        let mut atomic = None;
        for count in 0..=MAX_EXT_HEADERS {
            let is_ext = matches!(
                nh,
                ext_header::HOP_BY_HOP
                    | ext_header::DESTINATION_OPTIONS
                    | ext_header::ROUTING
                    | ext_header::FRAGMENT
            );
            if is_ext && count == MAX_EXT_HEADERS {
                return discard(ExtDiscard::TooManyHeaders);
            }
            let len = match nh {
                ext_header::HOP_BY_HOP if count > 0 || resumed => {
                    return ExtWalk::ParamProblem {
                        code: param_problem_code::UNRECOGNIZED_NEXT_HEADER,
                        pointer: nh_at,
                    };
                }
                ext_header::HOP_BY_HOP | ext_header::DESTINATION_OPTIONS => {
                    let hdr = match self.header(at) {
                        Ok(h) => h,
                        Err(w) => return w,
                    };
                    let hop_by_hop = nh == ext_header::HOP_BY_HOP;
                    match check_options(hdr, HEADER_LEN + at, hop_by_hop, self.dst_is_multicast) {
                        OptionsVerdict::Pass => {}
                        OptionsVerdict::Drop(why) => return discard(why.into()),
                        OptionsVerdict::ParamProblem { code, pointer } => {
                            return ExtWalk::ParamProblem { code, pointer };
                        }
                    }
                    hdr.len()
                }
                ext_header::ROUTING => {
                    let hdr = match self.header(at) {
                        Ok(h) => h,
                        Err(w) => return w,
                    };
                    if self.dst_is_multicast {
                        return discard(ExtDiscard::RoutingToMulticast);
                    }
                    // RPL (3) and segment routing (4) are off by default in Linux
                    // (rpl_seg_enabled, seg6_enabled): dropped whatever segments left says.
                    if matches!(hdr[2], 3 | 4) {
                        return discard(ExtDiscard::RoutingTypeOff);
                    }
                    // Segments left (byte 3) not 0: no routing type is ours to process.
                    if hdr[3] != 0 {
                        return ExtWalk::ParamProblem {
                            code: param_problem_code::ERRONEOUS_HEADER_FIELD,
                            pointer: HEADER_LEN + at + 2,
                        };
                    }
                    hdr.len()
                }
                ext_header::FRAGMENT => {
                    let here = HEADER_LEN + at;
                    let frag = match self.payload.get(at..) {
                        Some(b) if !fragmented => FragmentHeader::parse(b).ok(),
                        _ => None,
                    };
                    let Some(frag) = frag else {
                        return ExtWalk::ParamProblem {
                            code: param_problem_code::ERRONEOUS_HEADER_FIELD,
                            pointer: here,
                        };
                    };
                    fragmented = true;
                    if !frag.is_atomic() {
                        return self.fragment(frag, at, nh_at);
                    }
                    atomic = Some(frag);
                    FRAGMENT_HEADER_LEN
                }
                ext_header::NO_NEXT_HEADER => return ExtWalk::NoNextHeader,
                _ => {
                    return ExtWalk::Upper {
                        protocol: nh.into(),
                        offset: at,
                        next_header_at: nh_at,
                        fragment: atomic,
                    };
                }
            };
            // Every extension header starts with its next header field.
            nh = self.payload[at];
            nh_at = HEADER_LEN + at;
            at += len;
        }
        discard(ExtDiscard::TooManyHeaders)
    }

    /// The hop-by-hop, destination options or routing header at `at`: at least 8 bytes
    /// and all its (second byte + 1) * 8 there.
    fn header(&self, at: usize) -> core::result::Result<&[u8], ExtWalk> {
        let rest = self.payload.get(at..).unwrap_or(&[]);
        if rest.len() < 8 {
            return Err(discard(ExtDiscard::Truncated));
        }
        let len = (rest[1] as usize + 1) * 8;
        rest.get(..len).ok_or(discard(ExtDiscard::Truncated))
    }

    /// A fragment that needs reassembly, its header at payload offset `at` and named by
    /// the field at `nh_at`: the checks `ipv6_frag_rcv` and `ip6_frag_queue` make before
    /// queueing it.
    fn fragment(&self, frag: FragmentHeader, at: usize, nh_at: usize) -> ExtWalk {
        let data = at + FRAGMENT_HEADER_LEN;
        // RFC 8200 §4.5: the first fragment must hold the headers through the upper
        // layer's; Linux checks for the first bytes of TCP, UDP and ICMPv6 (`ipv6frag_thdr_truncated`).
        if frag.offset_bytes == 0 && self.chain_incomplete(frag.next_header.into(), data) {
            return ExtWalk::ParamProblem {
                code: param_problem_code::INCOMPLETE_HEADER_CHAIN,
                pointer: 0,
            };
        }
        let data_len = self.payload.len() - data.min(self.payload.len());
        if frag.offset_bytes + data_len > u16::MAX as usize {
            return ExtWalk::ParamProblem {
                code: param_problem_code::ERRONEOUS_HEADER_FIELD,
                pointer: HEADER_LEN + at + 2,
            };
        }
        if frag.more && !data_len.is_multiple_of(8) {
            return ExtWalk::ParamProblem {
                code: param_problem_code::ERRONEOUS_HEADER_FIELD,
                pointer: field::PAYLOAD_LEN.start,
            };
        }
        ExtWalk::Upper {
            protocol: frag.next_header,
            offset: data,
            next_header_at: nh_at,
            fragment: Some(frag),
        }
    }

    /// Linux's `ipv6frag_thdr_truncated` from the header `nh` at `at`: skips extension
    /// headers by their lengths (`ipv6_skip_exthdr`: AH included, stopping at a fragment
    /// of non-zero offset or where a header's first two bytes are missing, which it does
    /// not call incomplete) and tells whether the upper layer's first bytes (20 for TCP,
    /// 8 for UDP and ICMPv6, 1 for others) lie past the end.
    fn chain_incomplete(&self, mut nh: u8, mut at: usize) -> bool {
        loop {
            let skip = match nh {
                ext_header::HOP_BY_HOP
                | ext_header::DESTINATION_OPTIONS
                | ext_header::ROUTING
                | ext_header::AUTH
                | ext_header::FRAGMENT => true,
                ext_header::NO_NEXT_HEADER => return false,
                _ => false,
            };
            if !skip {
                break;
            }
            let Some(h) = self.payload.get(at..at + 2) else {
                return false;
            };
            let len = match nh {
                ext_header::AUTH => (h[1] as usize + 2) * 4,
                ext_header::FRAGMENT => match self.payload.get(at + 2..at + 4) {
                    Some(off) if u16::from_be_bytes([off[0], off[1]]) & !7 == 0 => 8,
                    _ => return false,
                },
                _ => (h[1] as usize + 1) * 8,
            };
            nh = h[0];
            at += len;
        }
        let need = match nh {
            6 => 20,
            17 | 58 => 8,
            _ => 1,
        };
        at + need > self.payload.len()
    }
}

fn discard(reason: ExtDiscard) -> ExtWalk {
    ExtWalk::Discard { reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: u8 = 6;
    const UDP: u8 = 17;
    const DEST: u8 = ext_header::DESTINATION_OPTIONS;
    const HBH: u8 = ext_header::HOP_BY_HOP;
    const RT: u8 = ext_header::ROUTING;
    const FRAG: u8 = ext_header::FRAGMENT;

    fn walk(first: u8, payload: &[u8]) -> ExtWalk {
        walk_extension_headers(first.into(), payload, false)
    }
    fn walk_mc(first: u8, payload: &[u8]) -> ExtWalk {
        walk_extension_headers(first.into(), payload, true)
    }
    fn pp(code: u8, pointer: usize) -> ExtWalk {
        ExtWalk::ParamProblem { code, pointer }
    }
    fn upper(protocol: u8, offset: usize, next_header_at: usize) -> ExtWalk {
        ExtWalk::Upper {
            protocol: protocol.into(),
            offset,
            next_header_at,
            fragment: None,
        }
    }
    /// An 8-byte options header naming `next` and holding the 6 bytes `opts`.
    fn opts8(next: u8, opts: [u8; 6]) -> Vec<u8> {
        let mut h = vec![next, 0];
        h.extend_from_slice(&opts);
        h
    }
    /// A UDP header and 4 bytes of data (as the probes sent to Linux carried).
    const UDP_DGRAM: [u8; 12] = [4, 0xd2, 0, 9, 0, 12, 0, 0, b'h', b'i', b'y', b'a'];

    #[test]
    fn a_full_chain_to_tcp() {
        // Hop-by-hop (router alert, PadN) -> destination options (PadN) -> routing type 0,
        // segments left 0, one address -> TCP.
        let mut p = opts8(DEST, [5, 2, 0, 0, 1, 0]);
        p.extend(opts8(RT, [1, 4, 0, 0, 0, 0]));
        p.extend_from_slice(&[TCP, 2, 0, 0, 0, 0, 0, 0]);
        p.extend_from_slice(&[0x20; 16]);
        p.extend_from_slice(&[0; 20]);
        assert_eq!(walk(HBH, &p), upper(TCP, 40, 40 + 16));
        // The same without its TCP header: where it starts is still where it would.
        assert_eq!(walk(HBH, &p[..40]), upper(TCP, 40, 56));
        // No extension header at all: the fixed header's field names the protocol.
        assert_eq!(walk(TCP, &[0; 20]), upper(TCP, 0, 6));
        // An unknown protocol is an upper layer: the stack answers code 1 at the field
        // (Linux pointed at octet 6 for next header 253).
        assert_eq!(walk(253, &[0; 8]), upper(253, 0, 6));
    }

    #[test]
    fn a_routing_header_with_segments_left() {
        // Type 0, segments left 1, one address, to Linux: parameter problem, code 0, 42.
        let mut p = vec![UDP, 2, 0, 1, 0, 0, 0, 0];
        p.extend_from_slice(&[0xfd; 16]);
        p.extend_from_slice(&UDP_DGRAM);
        assert_eq!(walk(RT, &p), pp(0, 42));
        // RPL and segment routing: dropped, segments left or not.
        let off = ExtWalk::Discard {
            reason: ExtDiscard::RoutingTypeOff,
        };
        for t in [3, 4] {
            p[2] = t;
            p[3] = 1;
            assert_eq!(walk(RT, &p), off, "type {t}");
            p[3] = 0;
            assert_eq!(walk(RT, &p), off, "type {t}");
        }
        // Segments left 0: skipped, for the other types.
        p[2] = 2;
        assert_eq!(walk(RT, &p), upper(UDP, 24, 40));
        p[2] = 0;
        assert_eq!(walk(RT, &p), upper(UDP, 24, 40));
        // Never to a multicast destination.
        assert_eq!(
            walk_mc(RT, &p),
            ExtWalk::Discard {
                reason: ExtDiscard::RoutingToMulticast
            }
        );
    }

    #[test]
    fn hop_by_hop_only_first() {
        // Destination options, then hop-by-hop: Linux answered code 1, pointer 40.
        let mut p = opts8(HBH, [1, 4, 0, 0, 0, 0]);
        p.extend(opts8(UDP, [1, 4, 0, 0, 0, 0]));
        p.extend_from_slice(&UDP_DGRAM);
        assert_eq!(walk(DEST, &p), pp(1, 40));
        // After an atomic fragment too: its own next header field is the pointer.
        let mut p = vec![HBH, 0, 0, 0, 0, 0, 0, 1];
        p.extend(opts8(UDP, [1, 4, 0, 0, 0, 0]));
        assert_eq!(walk(FRAG, &p), pp(1, 40));
    }

    #[test]
    fn unknown_options_by_their_top_bits() {
        let with = |kind: u8| {
            let mut p = opts8(UDP, [kind, 4, 0, 0, 0, 0]);
            p.extend_from_slice(&UDP_DGRAM);
            p
        };
        let discard = ExtWalk::Discard {
            reason: ExtDiscard::UnknownOption,
        };
        // 00: skipped.
        assert_eq!(walk(DEST, &with(0x1e)), upper(UDP, 8, 40));
        assert_eq!(walk(HBH, &with(0x1e)), upper(UDP, 8, 40));
        // 01: discarded.
        assert_eq!(walk(DEST, &with(0x5e)), discard);
        // 10: parameter problem, code 2, at the option's type byte, multicast or not
        // (Linux answered 0x80 with pointer 42 to fd00:1::b and to ff02::1 alike).
        assert_eq!(walk(DEST, &with(0x80)), pp(2, 42));
        assert_eq!(walk_mc(DEST, &with(0x80)), pp(2, 42));
        assert_eq!(walk(HBH, &with(0x80)), pp(2, 42));
        // 11: the same, except to a multicast destination (Linux kept quiet to ff02::1).
        assert_eq!(walk(DEST, &with(0xc0)), pp(2, 42));
        assert_eq!(walk_mc(DEST, &with(0xc0)), discard);
        // The pointer of an option further in.
        let mut p = vec![UDP, 1, 1, 0, 0x1e, 0, 0x80, 0];
        p.extend_from_slice(&[1, 6, 0, 0, 0, 0, 0, 0]);
        assert_eq!(walk(DEST, &p), pp(2, 46));
    }

    #[test]
    fn padding_and_known_options() {
        let bad = ExtWalk::Discard {
            reason: ExtDiscard::BadOption,
        };
        // Six Pad1 fill an 8-byte header; fourteen in a 16-byte one are too many.
        assert_eq!(walk(DEST, &opts8(UDP, [0; 6])), upper(UDP, 8, 40));
        let mut p = vec![UDP, 1];
        p.extend_from_slice(&[0; 14]);
        assert_eq!(walk(DEST, &p), bad);
        // PadN of non-zero bytes; PadN running past the header.
        assert_eq!(walk(DEST, &opts8(UDP, [1, 4, 0, 0, 7, 0])), bad);
        assert_eq!(walk(DEST, &opts8(UDP, [1, 5, 0, 0, 0, 0])), bad);
        // A type byte alone at the end.
        assert_eq!(walk(DEST, &opts8(UDP, [1, 3, 0, 0, 0, 0x1e])), bad);
        // A router alert: 2 bytes of value or the packet is dropped.
        assert_eq!(
            walk(HBH, &opts8(UDP, [5, 2, 0, 0, 1, 0])),
            upper(UDP, 8, 40)
        );
        assert_eq!(walk(HBH, &opts8(UDP, [5, 3, 0, 0, 0, 0])), bad);
        // In destination options it is nothing special: type 5 is 00, skipped.
        assert_eq!(
            walk(DEST, &opts8(UDP, [5, 3, 0, 0, 0, 0])),
            upper(UDP, 8, 40)
        );
        // Nine options where eight are allowed.
        let mut p = vec![UDP, 2];
        for _ in 0..9 {
            p.extend_from_slice(&[0x1e, 0]);
        }
        p.extend_from_slice(&[1, 2, 0, 0]);
        assert_eq!(walk(DEST, &p), bad);
        p[2 + 16..2 + 18].copy_from_slice(&[0, 0]);
        assert_eq!(walk(DEST, &p), upper(UDP, 24, 40));
        // IOAM: at 4n or dropped, else ignored.
        assert_eq!(walk(HBH, &opts8(UDP, [0x31, 4, 0, 0, 0, 0])), bad);
        assert_eq!(
            walk(HBH, &opts8(UDP, [0, 0, 0x31, 2, 0, 0])),
            upper(UDP, 8, 40)
        );
        // CALIPSO and the home address option: refused.
        let refused = ExtWalk::Discard {
            reason: ExtDiscard::RefusedOption,
        };
        let mut p = vec![UDP, 1, 7, 8, 0, 0, 0, 1, 0, 0, 0, 0];
        p.extend_from_slice(&[1, 2, 0, 0]);
        assert_eq!(walk(HBH, &p), refused);
        p[8] = 1; // one category word: 12 bytes needed, 8 there
        assert_eq!(walk(HBH, &p), bad);
        let mut p = vec![UDP, 2, 1, 2, 0, 0, 0xc9, 16];
        p.extend_from_slice(&[0x20; 16]);
        assert_eq!(walk(DEST, &p), refused);
    }

    #[test]
    fn jumbo_payload_options() {
        // Linux answered a jumbo option of 65536 in a packet whose payload length is not
        // zero with code 0 pointing at the option (42).
        let mut p = opts8(UDP, [0xc2, 4, 0, 1, 0, 0]);
        p.extend_from_slice(&UDP_DGRAM);
        assert_eq!(walk(HBH, &p), pp(0, 42));
        // A jumbo length that fits 16 bits: the pointer is at the value.
        p[4..8].copy_from_slice(&1000u32.to_be_bytes());
        assert_eq!(walk(HBH, &p), pp(0, 44));
        // Wrong length or alignment: dropped.
        let bad = ExtWalk::Discard {
            reason: ExtDiscard::BadOption,
        };
        assert_eq!(walk(HBH, &opts8(UDP, [0, 0xc2, 3, 0, 1, 0])), bad);
        let mut p = vec![UDP, 1, 0, 0xc2, 4, 0, 1, 0, 0];
        p.extend_from_slice(&[1, 5, 0, 0, 0, 0, 0]);
        assert_eq!(walk(HBH, &p), bad);
    }

    #[test]
    fn no_next_header_and_truncation() {
        assert_eq!(walk(59, &[]), ExtWalk::NoNextHeader);
        assert_eq!(
            walk(DEST, &opts8(59, [1, 4, 0, 0, 0, 0])),
            ExtWalk::NoNextHeader
        );
        let truncated = ExtWalk::Discard {
            reason: ExtDiscard::Truncated,
        };
        assert_eq!(walk(HBH, &[]), truncated);
        assert_eq!(walk(DEST, &[UDP, 0, 1, 4, 0, 0, 0]), truncated);
        // A header claiming 16 bytes with 12 there.
        assert_eq!(
            walk(DEST, &[UDP, 1, 1, 4, 0, 0, 0, 0, 1, 2, 0, 0]),
            truncated
        );
        let mut p = vec![UDP, 2, 0, 0, 0, 0, 0, 0];
        p.extend_from_slice(&[0; 8]);
        assert_eq!(walk(RT, &p), truncated);
    }

    #[test]
    fn the_walk_is_bounded() {
        let mut p = Vec::new();
        for _ in 0..MAX_EXT_HEADERS - 1 {
            p.extend(opts8(DEST, [1, 4, 0, 0, 0, 0]));
        }
        p.extend(opts8(UDP, [1, 4, 0, 0, 0, 0]));
        let n = p.len();
        assert_eq!(walk(DEST, &p), upper(UDP, n, 40 + n - 8));
        let last = n - 8;
        p[last] = DEST;
        p.extend(opts8(UDP, [1, 4, 0, 0, 0, 0]));
        assert_eq!(
            walk(DEST, &p),
            ExtWalk::Discard {
                reason: ExtDiscard::TooManyHeaders
            }
        );
    }

    #[test]
    fn fragments() {
        // A first fragment: offset 0, M set, a whole UDP header and 8 bytes of data.
        let frag = FragmentHeader {
            next_header: IpProtocol::Udp,
            offset_bytes: 0,
            more: true,
            ident: 0xdeadbeef,
        };
        let mut p = vec![0u8; 8];
        frag.emit(&mut p).unwrap();
        assert_eq!(p, [UDP, 0, 0, 1, 0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(FragmentHeader::parse(&p).unwrap(), frag);
        p.extend_from_slice(&[0; 16]);
        let want = ExtWalk::Upper {
            protocol: IpProtocol::Udp,
            offset: 8,
            next_header_at: 6,
            fragment: Some(frag),
        };
        assert_eq!(walk(FRAG, &p), want);
        // Behind a destination options header: the field that named the fragment header.
        let mut q = opts8(FRAG, [1, 4, 0, 0, 0, 0]);
        q.extend_from_slice(&p);
        let want = ExtWalk::Upper {
            protocol: IpProtocol::Udp,
            offset: 16,
            next_header_at: 40,
            fragment: Some(frag),
        };
        assert_eq!(walk(DEST, &q), want);
        // A later fragment ends the walk even when what follows would be an extension
        // header: its data are reassembled first.
        let later = FragmentHeader {
            next_header: DEST.into(),
            offset_bytes: 1232,
            more: false,
            ident: 9,
        };
        let mut p = vec![0u8; 8];
        later.emit(&mut p).unwrap();
        p.extend_from_slice(&[0xaa; 13]);
        match walk(FRAG, &p) {
            ExtWalk::Upper {
                protocol,
                offset: 8,
                fragment: Some(f),
                ..
            } => assert_eq!((protocol, f), (DEST.into(), later)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn fragments_linux_refuses() {
        // A first fragment holding a destination options header but no UDP header:
        // Linux answered code 3, pointer 0.
        let mut p = vec![DEST, 0, 0, 1, 0xde, 0xad, 0xbe, 0xef];
        p.extend(opts8(UDP, [1, 4, 0, 0, 0, 0]));
        assert_eq!(walk(FRAG, &p), pp(3, 0));
        // M set and 12 bytes of data: code 0 at the payload length (4).
        let mut p = vec![UDP, 0, 0, 1, 0, 0, 0, 2];
        p.extend_from_slice(&UDP_DGRAM);
        assert_eq!(walk(FRAG, &p), pp(0, 4));
        // Ending past 65535: code 0 at the fragment offset field.
        let mut p = vec![UDP, 0, 0xff, 0xf8, 0, 0, 0, 3];
        p.extend_from_slice(&[0; 16]);
        assert_eq!(walk(FRAG, &p), pp(0, 42));
        // A fragment header cut short, or a second one after an atomic fragment: code 0
        // pointing at it.
        assert_eq!(walk(FRAG, &[UDP, 0, 0, 1]), pp(0, 40));
        let mut p = vec![FRAG, 0, 0, 0, 0, 0, 0, 1];
        p.extend_from_slice(&[UDP, 0, 0, 1, 0, 0, 0, 2]);
        p.extend_from_slice(&[0; 16]);
        assert_eq!(walk(FRAG, &p), pp(0, 48));
    }

    #[test]
    fn an_atomic_fragment_is_walked_through() {
        let atomic = FragmentHeader {
            next_header: DEST.into(),
            offset_bytes: 0,
            more: false,
            ident: 5,
        };
        assert!(atomic.is_atomic());
        let mut p = vec![0u8; 8];
        atomic.emit(&mut p).unwrap();
        p.extend(opts8(UDP, [1, 4, 0, 0, 0, 0]));
        p.extend_from_slice(&UDP_DGRAM);
        let want = ExtWalk::Upper {
            protocol: IpProtocol::Udp,
            offset: 16,
            next_header_at: 48,
            fragment: Some(atomic),
        };
        assert_eq!(walk(FRAG, &p), want);
    }

    #[test]
    fn a_reassembled_packet_walks_on() {
        // The unfragmentable part (destination options) and the reassembled data, which
        // start with another destination options header.
        let mut p = opts8(DEST, [1, 4, 0, 0, 0, 0]);
        p.extend(opts8(UDP, [1, 4, 0, 0, 0, 0]));
        p.extend_from_slice(&UDP_DGRAM);
        let r = walk_reassembled(DEST.into(), &p, 8, 40, false);
        assert_eq!(r, upper(UDP, 16, 48));
        // Hop-by-hop after reassembly: code 1 at the field that named it.
        p[8] = UDP;
        let r = walk_reassembled(HBH.into(), &p, 8, 40, false);
        assert_eq!(r, pp(1, 40));
        // A fragment header in a reassembled packet.
        let r = walk_reassembled(FRAG.into(), &p, 8, 40, false);
        assert_eq!(r, pp(0, 48));
    }

    #[test]
    fn fragment_header_fields() {
        assert_eq!(FragmentHeader::parse(&[0; 7]), Err(Error::Truncated));
        let f = FragmentHeader::parse(&[TCP, 0xff, 0x05, 0x39, 1, 2, 3, 4]).unwrap();
        assert_eq!(
            (f.offset_bytes, f.more, f.ident),
            (0x0538, true, 0x01020304)
        );
        let mut b = [0u8; 8];
        let odd = FragmentHeader {
            offset_bytes: 12,
            ..f
        };
        assert_eq!(odd.emit(&mut b), Err(Error::Malformed));
        assert_eq!(f.emit(&mut b[..7]), Err(Error::Truncated));
        f.emit(&mut b).unwrap();
        assert_eq!(b, [TCP, 0, 0x05, 0x39, 1, 2, 3, 4]);
    }
}
