//! Neighbour discovery's own format and rules (RFC 4861): the options that follow a
//! solicitation's or advertisement's target (§4.6), an advertisement's flags, and the
//! validity rules of §7.1, as Linux's `ndisc_rcv`, `ndisc_recv_ns`, `ndisc_recv_na` and
//! `ndisc_parse_options` (net/ipv6/ndisc.c) apply them. The messages themselves are
//! ICMPv6's ([`Icmpv6Repr::NeighborSolicit`](crate::Icmpv6Repr::NeighborSolicit) and
//! `NeighborAdvert`), whose parse and emit call in here.

use crate::ethernet::MacAddr;
use crate::ipv6::Ipv6Addr;
use crate::{Error, Result};

/// The hop limit neighbour discovery is sent with, and must arrive with.
pub const NDP_HOP_LIMIT: u8 = 255;

/// Neighbour discovery's ICMPv6 message types (RFC 4861 §4), which
/// [`icmpv6::msg_type`](crate::icmpv6::msg_type) lists beside ICMPv6's own.
pub mod msg_type {
    pub const ROUTER_SOLICIT: u8 = 133;
    pub const ROUTER_ADVERT: u8 = 134;
    pub const NEIGHBOR_SOLICIT: u8 = 135;
    pub const NEIGHBOR_ADVERT: u8 = 136;
    pub const REDIRECT: u8 = 137;
}

/// Neighbour discovery option types (RFC 4861 §4.6, RFC 3971 §5.3.2 for the nonce).
pub mod nd_option {
    pub const SOURCE_LLADDR: u8 = 1;
    pub const TARGET_LLADDR: u8 = 2;
    pub const PREFIX_INFO: u8 = 3;
    pub const REDIRECTED_HEADER: u8 = 4;
    pub const MTU: u8 = 5;
    /// Linux's DAD probes carry one (enhanced DAD, RFC 7527).
    pub const NONCE: u8 = 14;
}

/// The flags of a neighbour advertisement (the top bits of its fifth byte).
pub mod na_flags {
    pub const ROUTER: u8 = 0x80;
    pub const SOLICITED: u8 = 0x40;
    pub const OVERRIDE: u8 = 0x20;
}

/// True for the neighbour discovery types (133 to 137), which [`ndp_ip_rules_ok`] governs.
pub fn is_ndp(msg_type: u8) -> bool {
    (msg_type::ROUTER_SOLICIT..=msg_type::REDIRECT).contains(&msg_type)
}

/// The rules of RFC 4861 §7.1.1 and §7.1.2 that need the IP header beyond its addresses,
/// checked by Linux's `ndisc_rcv` before anything else: a neighbour discovery message
/// (types 133 to 137) must arrive with hop limit 255 (so it cannot come from off the link),
/// and not in fragments (`suppress_frag_ndisc`, on by default, RFC 6980 §5; an atomic
/// fragment counts as one). True for every other type.
///
/// The rest of §7.1 is [`Icmpv6Repr::parse`](crate::Icmpv6Repr::parse)'s: the length,
/// and the rules of `solicit_rules` and `advert_rules` (code 0, a target that is not
/// multicast, well-formed options, the solicited flag clear in an advertisement to a
/// multicast destination, and a probe from the unspecified address sent to a
/// solicited-node group without a source link-layer option).
pub fn ndp_ip_rules_ok(msg_type: u8, hop_limit: u8, fragmented: bool) -> bool {
    !is_ndp(msg_type) || (hop_limit == NDP_HOP_LIMIT && !fragmented)
}

/// One neighbour discovery option: its type and all of its bytes (type and length
/// included, a multiple of 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NdOption<'a> {
    pub kind: u8,
    pub bytes: &'a [u8],
}

impl NdOption<'_> {
    /// The link-layer address of a source or target link-layer option, which on Ethernet
    /// is one unit long (8 bytes: type, length, MAC); None for another length, an option
    /// Linux's `ndisc_opt_addr_data` refuses.
    pub fn mac(&self) -> Option<MacAddr> {
        match self.bytes {
            [_, 1, m @ ..] if m.len() == 6 => Some(MacAddr([m[0], m[1], m[2], m[3], m[4], m[5]])),
            _ => None,
        }
    }
}

/// The options of a neighbour discovery message, in order: (type, length in 8-byte units,
/// ...). An option of length zero, or one that runs past the end (or a single byte left
/// over), is [`Error::Malformed`], after which the iterator ends: such a message is
/// invalid as a whole (RFC 4861 §7.1, Linux's `ndisc_parse_options`).
#[derive(Debug, Clone)]
pub struct NdOptions<'a> {
    rest: &'a [u8],
}

impl<'a> NdOptions<'a> {
    pub fn new(options: &'a [u8]) -> Self {
        NdOptions { rest: options }
    }
}

impl<'a> Iterator for NdOptions<'a> {
    type Item = Result<NdOption<'a>>;
    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.rest;
        let (&kind, &units) = match rest {
            [] => return None,
            [k, l, ..] => (k, l),
            [_] => {
                self.rest = &[];
                return Some(Err(Error::Malformed));
            }
        };
        let len = units as usize * 8;
        if len == 0 || len > rest.len() {
            self.rest = &[];
            return Some(Err(Error::Malformed));
        }
        self.rest = &rest[len..];
        Some(Ok(NdOption {
            kind,
            bytes: &rest[..len],
        }))
    }
}

/// Walks all of `options` (the bytes after a solicitation's or advertisement's target;
/// any malformed one invalidates the message) and returns the link-layer address of the
/// first option of type `wanted`, as Linux keeps the first of duplicates; that option must
/// have Ethernet's length, or the message is dropped.
fn lladdr_option(options: &[u8], wanted: u8) -> Result<Option<MacAddr>> {
    let mut first = None;
    for opt in NdOptions::new(options) {
        let opt = opt?;
        if opt.kind == wanted && first.is_none() {
            first = Some(opt);
        }
    }
    match first {
        None => Ok(None),
        Some(o) => o.mac().map(Some).ok_or(Error::Malformed),
    }
}

/// The rules of RFC 4861 §7.1.1 that a solicitation from `src` to `dst` must keep beyond
/// its checksum, length, hop limit and fragmentation, as Linux's `ndisc_recv_ns` checks
/// them: code 0, a target that is not multicast, well-formed options (see [`NdOptions`])
/// whose first source link-layer option, if any, is one 8-byte unit (its address is
/// returned); and for a probe from the unspecified address (DAD), a solicited-node group
/// as destination and no source link-layer option. [`Error::Malformed`] otherwise.
pub(crate) fn solicit_rules(
    code: u8,
    target: Ipv6Addr,
    options: &[u8],
    src: Ipv6Addr,
    dst: Ipv6Addr,
) -> Result<Option<MacAddr>> {
    let dad = src.is_unspecified();
    if code != 0 || target.is_multicast() || (dad && !dst.is_solicited_node()) {
        return Err(Error::Malformed);
    }
    let source_lladdr = lladdr_option(options, nd_option::SOURCE_LLADDR)?;
    if dad && source_lladdr.is_some() {
        return Err(Error::Malformed);
    }
    Ok(source_lladdr)
}

/// The same for an advertisement to `dst` with `flags` ([`na_flags`]; RFC 4861 §7.1.2,
/// Linux's `ndisc_recv_na`): code 0, a target that is not multicast, the solicited flag
/// clear when `dst` is multicast, well-formed options whose first target link-layer
/// option, if any, is one unit (its address is returned).
pub(crate) fn advert_rules(
    code: u8,
    target: Ipv6Addr,
    flags: u8,
    options: &[u8],
    dst: Ipv6Addr,
) -> Result<Option<MacAddr>> {
    let solicited = flags & na_flags::SOLICITED != 0;
    if code != 0 || target.is_multicast() || (dst.is_multicast() && solicited) {
        return Err(Error::Malformed);
    }
    lladdr_option(options, nd_option::TARGET_LLADDR)
}

/// Writes `mac`, if there is one, as a link-layer address option of type `kind` at the
/// start of `options` (the bytes after a solicitation's or advertisement's target).
pub(crate) fn write_lladdr(options: &mut [u8], kind: u8, mac: Option<MacAddr>) {
    if let (Some(m), Some(o)) = (mac, options.get_mut(..8)) {
        o[0] = kind;
        o[1] = 1;
        o[2..].copy_from_slice(&m.0);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::icmpv6::msg_type;
    use crate::icmpv6::tests::{addr, hex, reparse, rfc1071, A, B};
    use crate::icmpv6::{Icmpv6Packet, Icmpv6Repr};

    /// A neighbour solicitation a Linux 6.18 host sent to resolve fd00:1::b (captured on a
    /// veth with tcpdump): source link-layer option 02:00:00:00:00:0a, checksum 0x7d71.
    pub(crate) const LINUX_NS: &str = "8700 7d71 0000 0000 fd00 0001 0000 0000 0000 0000 0000 000b
                                       0101 0200 0000 000a";
    /// Its answer from the Linux peer: solicited and override, target link-layer option.
    pub(crate) const LINUX_NA: &str = "8800 1c73 6000 0000 fd00 0001 0000 0000 0000 0000 0000 000b
                                       0201 0200 0000 000b";
    /// Linux's DAD probe for fd00:1::b: from ::, no link-layer option, a nonce (type 14).
    pub(crate) const LINUX_DAD: &str = "8700 e526 0000 0000 fd00 0001 0000 0000 0000 0000 0000 000b
                                        0e01 e578 cc65 d881";

    #[test]
    fn a_solicitation_linux_sent() {
        let b = hex(LINUX_NS);
        let (src, dst) = (addr(A), addr(B).solicited_node());
        assert_eq!(dst, addr("ff02::1:ff00:b"));
        assert_eq!(rfc1071(src, dst, &b), 0x7d71);
        let p = Icmpv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.checksum(), 0x7d71);
        let r = Icmpv6Repr::parse(&p, src, dst).unwrap();
        let mac = MacAddr([2, 0, 0, 0, 0, 0x0a]);
        let want = Icmpv6Repr::NeighborSolicit {
            target: addr(B),
            source_lladdr: Some(mac),
        };
        assert_eq!(r, want);
        // We write the same bytes.
        let mut out = [0u8; 32];
        assert_eq!(want.emit(src, dst, &mut out).unwrap(), 32);
        assert_eq!(&out[..], &b[..]);
        // Sent with hop limit 255, whole: the IP-level rules hold.
        assert!(ndp_ip_rules_ok(p.msg_type(), 255, false));
        assert!(!ndp_ip_rules_ok(p.msg_type(), 254, false));
        assert!(!ndp_ip_rules_ok(p.msg_type(), 255, true));
        assert!(ndp_ip_rules_ok(msg_type::ECHO_REQUEST, 1, true));
    }

    #[test]
    fn an_advertisement_and_a_dad_probe_linux_sent() {
        let b = hex(LINUX_NA);
        let (src, dst) = (addr(B), addr(A));
        assert_eq!(rfc1071(src, dst, &b), 0x1c73);
        let p = Icmpv6Packet::new_checked(&b[..]).unwrap();
        let want = Icmpv6Repr::NeighborAdvert {
            router: false,
            solicited: true,
            override_: true,
            target: addr(B),
            target_lladdr: Some(MacAddr([2, 0, 0, 0, 0, 0x0b])),
        };
        assert_eq!(Icmpv6Repr::parse(&p, src, dst).unwrap(), want);
        let mut out = [0u8; 32];
        want.emit(src, dst, &mut out).unwrap();
        assert_eq!(&out[..], &b[..]);
        // The same advertisement to all nodes may not claim to be solicited.
        let all = Ipv6Addr::ALL_NODES;
        want.emit(src, all, &mut out).unwrap();
        let p = Icmpv6Packet::new_checked(&out[..]).unwrap();
        assert_eq!(Icmpv6Repr::parse(&p, src, all), Err(Error::Malformed));

        // DAD: the nonce option is skipped; the probe is valid only to a solicited-node
        // group and without a source link-layer option.
        let b = hex(LINUX_DAD);
        let (any, group) = (Ipv6Addr::UNSPECIFIED, addr("ff02::1:ff00:b"));
        assert_eq!(rfc1071(any, group, &b), 0xe526);
        let p = Icmpv6Packet::new_checked(&b[..]).unwrap();
        let r = Icmpv6Repr::parse(&p, any, group).unwrap();
        assert_eq!(
            r,
            Icmpv6Repr::NeighborSolicit {
                target: addr(B),
                source_lladdr: None
            }
        );
        let opts: Vec<_> = NdOptions::new(p.nd_options()).collect();
        assert_eq!(opts.len(), 1);
        assert_eq!(opts[0].unwrap().kind, nd_option::NONCE);
        let mut wrong_dst = [0u8; 24];
        r.emit(any, Ipv6Addr::ALL_NODES, &mut wrong_dst).unwrap();
        let p = Icmpv6Packet::new_checked(&wrong_dst[..]).unwrap();
        let all = Ipv6Addr::ALL_NODES;
        assert_eq!(Icmpv6Repr::parse(&p, any, all), Err(Error::Malformed));
        let with_ll = Icmpv6Repr::NeighborSolicit {
            target: addr(B),
            source_lladdr: Some(MacAddr([2, 0, 0, 0, 0, 1])),
        };
        let mut b = [0u8; 32];
        with_ll.emit(any, group, &mut b).unwrap();
        let p = Icmpv6Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Icmpv6Repr::parse(&p, any, group), Err(Error::Malformed));
    }

    #[test]
    fn malformed_options_invalidate_the_message() {
        let (a, group) = (addr(A), addr("ff02::1:ff00:b"));
        // A zero-length option (here after a good one): the whole message is invalid.
        let mut m = hex(LINUX_NS);
        m.extend_from_slice(&[0x0e, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(reparse(&mut m, a, group), Err(Error::Malformed));
        // An option that runs past the end.
        let mut m = hex(LINUX_NS);
        m[25] = 2;
        assert_eq!(reparse(&mut m, a, group), Err(Error::Malformed));
        // A lone byte after the last option.
        let mut m = hex(LINUX_NS);
        m.push(1);
        assert_eq!(reparse(&mut m, a, group), Err(Error::Malformed));
        // A source link-layer option two units long: not an Ethernet address.
        let mut m = hex(LINUX_NS);
        m[25] = 2;
        m.extend_from_slice(&[0; 8]);
        assert_eq!(reparse(&mut m, a, group), Err(Error::Malformed));
        // An unknown option is skipped; a target link-layer option in a solicitation too;
        // of two source options the first counts.
        let mut m = hex(LINUX_NS);
        m.extend_from_slice(&[200, 1, 9, 9, 9, 9, 9, 9]);
        m.extend_from_slice(&[2, 1, 1, 1, 1, 1, 1, 1]);
        m.extend_from_slice(&[1, 1, 5, 5, 5, 5, 5, 5]);
        match reparse(&mut m, a, group).unwrap() {
            Icmpv6Repr::NeighborSolicit { source_lladdr, .. } => {
                assert_eq!(source_lladdr, Some(MacAddr([2, 0, 0, 0, 0, 0x0a])))
            }
            other => panic!("{other:?}"),
        }
        // Code not 0, a multicast target.
        let mut m = hex(LINUX_NS);
        m[1] = 1;
        assert_eq!(reparse(&mut m, a, group), Err(Error::Malformed));
        let mut m = hex(LINUX_NA);
        m[8] = 0xff;
        assert_eq!(reparse(&mut m, addr(B), a), Err(Error::Malformed));
    }

    #[test]
    fn the_neighbour_discovery_types() {
        let ndp: Vec<u8> = (0..=255).filter(|&t| is_ndp(t)).collect();
        assert_eq!(ndp, [133, 134, 135, 136, 137]);
        assert_eq!(NDP_HOP_LIMIT, 255);
    }

    #[test]
    fn options_written_and_iterated() {
        let mac = MacAddr([2, 0, 0, 0, 0, 0x0a]);
        let mut b = [0u8; 8];
        write_lladdr(&mut b, nd_option::SOURCE_LLADDR, Some(mac));
        assert_eq!(b, [1, 1, 2, 0, 0, 0, 0, 0x0a]);
        assert_eq!(lladdr_option(&b, nd_option::SOURCE_LLADDR), Ok(Some(mac)));
        assert_eq!(lladdr_option(&b, nd_option::TARGET_LLADDR), Ok(None));
        // Nothing written without an address, or without room for it.
        let mut b = [0u8; 8];
        write_lladdr(&mut b, nd_option::TARGET_LLADDR, None);
        write_lladdr(&mut b[..7], nd_option::TARGET_LLADDR, Some(mac));
        assert_eq!(b, [0; 8]);
        // The iterator reports a malformed option once, then ends.
        let m = [1, 1, 2, 0, 0, 0, 0, 0x0a, 0x0e, 0, 0, 0, 0, 0, 0, 0];
        let opts: Vec<_> = NdOptions::new(&m).collect();
        assert_eq!(opts.len(), 2);
        assert!(opts[0].is_ok() && opts[1] == Err(Error::Malformed));
    }
}
