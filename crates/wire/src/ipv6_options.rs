//! The options of IPv6 hop-by-hop and destination options headers (RFC 8200 §4.2) as
//! Linux's `ip6_parse_tlv` judges them: padding, the options a host knows, and the rest by
//! the action bits of their type. The walk of the headers themselves is `ipv6_ext`'s.

use crate::get_u32;
use crate::icmpv6::param_problem_code;

/// Option types of the hop-by-hop and destination options headers. The top two bits of
/// a type say what a node that does not know it does (RFC 8200 §4.2): 00 skip it, 01
/// discard the packet, 10 discard it and send a parameter problem (code 2), 11 the same
/// unless the destination is multicast.
pub mod ext_option {
    pub const PAD1: u8 = 0;
    pub const PADN: u8 = 1;
    /// RFC 2711 (2 bytes of value; MLD messages carry one with value 0).
    pub const ROUTER_ALERT: u8 = 5;
    /// RFC 5570.
    pub const CALIPSO: u8 = 7;
    /// RFC 9486 (in-situ OAM).
    pub const IOAM: u8 = 0x31;
    /// RFC 2675.
    pub const JUMBO: u8 = 0xc2;
    /// RFC 6275 (Mobile IPv6), in destination options.
    pub const HOME_ADDRESS: u8 = 0xc9;
}

/// The most options other than padding one hop-by-hop or destination options header may
/// hold: Linux's defaults for `max_hbh_opts_number` and `max_dst_opts_number` (one more
/// and the packet is discarded).
pub const MAX_EXT_OPTIONS: usize = 8;
/// Why a header's options drop the packet without an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionDrop {
    /// A malformed options area: an option running past its header, more than 7 bytes of
    /// consecutive padding, a PadN whose bytes are not zero, more than [`MAX_EXT_OPTIONS`]
    /// options; or a known option of the wrong size or alignment.
    BadOption,
    /// An unrecognized option whose type's top bits are 01, or 11 to a multicast
    /// destination.
    UnknownOption,
    /// An option Linux takes only with configuration a host of ours does not have: CALIPSO
    /// in hop-by-hop options, a home address in destination options.
    RefusedOption,
}

/// What a header's options come to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionsVerdict {
    Pass,
    Drop(OptionDrop),
    /// Dropped with an ICMPv6 parameter problem of `code` pointing at `pointer` (from the
    /// start of the IPv6 header).
    ParamProblem {
        code: u8,
        pointer: usize,
    },
}

/// Judges the options of `hdr`, a hop-by-hop (`hop_by_hop`) or destination options header
/// that starts `at` bytes from the start of the IPv6 header, as Linux's `ip6_parse_tlv`.
pub fn check_options(
    hdr: &[u8],
    at: usize,
    hop_by_hop: bool,
    dst_is_multicast: bool,
) -> OptionsVerdict {
    let bad = || OptionsVerdict::Drop(OptionDrop::BadOption);
    let (mut i, mut padding, mut count) = (2, 0, 0);
    while i < hdr.len() {
        let kind = hdr[i];
        if kind == ext_option::PAD1 {
            padding += 1;
            if padding > 7 {
                return bad();
            }
            i += 1;
            continue;
        }
        let Some(&len) = hdr.get(i + 1) else {
            return bad();
        };
        let (len, end) = (len as usize, i + 2 + len as usize);
        let Some(value) = hdr.get(i + 2..end) else {
            return bad();
        };
        // The option's type byte, from the start of the IPv6 header.
        let ptr = at + i;
        if kind == ext_option::PADN {
            padding += len + 2;
            if padding > 7 || value.iter().any(|&v| v != 0) {
                return bad();
            }
            i = end;
            continue;
        }
        count += 1;
        if count > MAX_EXT_OPTIONS {
            return bad();
        }
        padding = 0;
        match (hop_by_hop, kind) {
            (true, ext_option::ROUTER_ALERT) if len != 2 => return bad(),
            (true, ext_option::ROUTER_ALERT) => {}
            (true, ext_option::JUMBO) => {
                if len != 4 || ptr % 4 != 2 {
                    return bad();
                }
                let jumbo_len = get_u32(value, 0);
                // The payload is not empty (we are reading it): its length is not 0,
                // which a jumbogram's must be.
                let pointer = if jumbo_len <= u16::MAX as u32 {
                    ptr + 2
                } else {
                    ptr
                };
                return OptionsVerdict::ParamProblem {
                    code: param_problem_code::ERRONEOUS_HEADER_FIELD,
                    pointer,
                };
            }
            (true, ext_option::IOAM) if !ptr.is_multiple_of(4) => return bad(),
            (true, ext_option::IOAM) => {}
            (true, ext_option::CALIPSO) => {
                // Linux's ipv6_hop_calipso, then calipso_validate, which finds no DOI.
                if len < 8 || value[4] as usize * 4 + 8 > len {
                    return bad();
                }
                return OptionsVerdict::Drop(OptionDrop::RefusedOption);
            }
            (false, ext_option::HOME_ADDRESS) => {
                return OptionsVerdict::Drop(OptionDrop::RefusedOption)
            }
            _ => match kind >> 6 {
                0 => {}
                1 => return OptionsVerdict::Drop(OptionDrop::UnknownOption),
                3 if dst_is_multicast => return OptionsVerdict::Drop(OptionDrop::UnknownOption),
                _ => {
                    return OptionsVerdict::ParamProblem {
                        code: param_problem_code::UNRECOGNIZED_OPTION,
                        pointer: ptr,
                    };
                }
            },
        }
        i = end;
    }
    OptionsVerdict::Pass
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header's 8 bytes: next header 6, length 0, then `opts`.
    fn hdr(opts: [u8; 6]) -> [u8; 8] {
        let mut h = [6, 0, 0, 0, 0, 0, 0, 0];
        h[2..].copy_from_slice(&opts);
        h
    }

    #[test]
    fn options_by_their_action_bits_and_where_the_pointer_points() {
        let check = |opts, mc| check_options(&hdr(opts), 40, false, mc);
        assert_eq!(
            check([1, 4, 0, 0, 0, 0], false),
            OptionsVerdict::Pass,
            "PadN"
        );
        assert_eq!(
            check([0x1e, 4, 0, 0, 0, 0], false),
            OptionsVerdict::Pass,
            "00: skip"
        );
        let dropped = OptionsVerdict::Drop(OptionDrop::UnknownOption);
        assert_eq!(check([0x5e, 4, 0, 0, 0, 0], false), dropped, "01: discard");
        let problem = OptionsVerdict::ParamProblem {
            code: param_problem_code::UNRECOGNIZED_OPTION,
            pointer: 42,
        };
        assert_eq!(
            check([0x9e, 4, 0, 0, 0, 0], true),
            problem,
            "10: even to a group"
        );
        assert_eq!(check([0xde, 4, 0, 0, 0, 0], false), problem, "11 to us");
        assert_eq!(check([0xde, 4, 0, 0, 0, 0], true), dropped, "11 to a group");
        let bad = OptionsVerdict::Drop(OptionDrop::BadOption);
        assert_eq!(
            check([1, 4, 0, 0, 1, 0], false),
            bad,
            "PadN with a non-zero byte"
        );
        assert_eq!(check([0x1e, 9, 0, 0, 0, 0], false), bad, "past the header");
    }
}
