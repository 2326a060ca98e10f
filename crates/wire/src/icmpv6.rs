//! ICMPv6 (RFC 4443) and the neighbour discovery messages a host needs (RFC 4861 §4.3,
//! §4.4), validated as Linux's receive path validates them (`icmpv6_rcv` in
//! net/ipv6/icmp.c, `ndisc_rcv`, `ndisc_recv_ns` and `ndisc_recv_na` in net/ipv6/ndisc.c).
//!
//! [`Icmpv6Repr::parse`] verifies the checksum and every rule of RFC 4861 §7.1 that needs
//! no more of the IP header than its addresses (it takes them for the pseudo-header), the
//! latter and the options by calling into [`ndisc`], neighbour discovery's own format and
//! rules; the rest (hop limit 255, not fragmented) is [`ndisc::ndp_ip_rules_ok`], for the
//! caller. Errors to send are built with [`Icmpv6Error`].

use crate::checksum;
use crate::ethernet::MacAddr;
use crate::ipv6::Ipv6Addr;
use crate::ndisc::{self, na_flags, nd_option};
use crate::{get_u16, get_u32, put_u16, put_u32, Error, Result};

/// Type, code, checksum and the type-specific word (identifier and sequence number, MTU,
/// pointer, flags): what every message this crate parses starts with (Linux pulls these
/// 8 bytes, `struct icmp6hdr`, before it looks at the type).
pub const HEADER_LEN: usize = 8;
/// The shortest message of all: type, code and checksum.
pub const MIN_LEN: usize = 4;
/// A neighbour solicitation or advertisement without options: header and target address.
pub const ND_HEADER_LEN: usize = 24;
/// The IPv6 next header value of ICMPv6 (the pseudo-header's).
pub const PROTOCOL: u8 = 58;
/// The IPv6 minimum link MTU (RFC 8200 §5).
pub const MIN_MTU: usize = 1280;
/// The most of an invoking packet an error quotes: "as much as possible without the
/// error message exceeding the minimum IPv6 MTU" (RFC 4443 §2.4 (c)), i.e. the minimum MTU
/// less the IPv6 and ICMPv6 headers, as Linux's `icmp6_send` computes it.
pub const MAX_QUOTE: usize = MIN_MTU - crate::ipv6::HEADER_LEN - HEADER_LEN;

/// Message types (RFC 4443 §2.1, RFC 4861 §4).
pub mod msg_type {
    pub const DST_UNREACHABLE: u8 = 1;
    pub const PACKET_TOO_BIG: u8 = 2;
    pub const TIME_EXCEEDED: u8 = 3;
    pub const PARAM_PROBLEM: u8 = 4;
    pub const ECHO_REQUEST: u8 = 128;
    pub const ECHO_REPLY: u8 = 129;
    pub use crate::ndisc::msg_type::*;
}

/// Destination unreachable codes (RFC 4443 §3.1).
pub mod unreachable_code {
    pub const NO_ROUTE: u8 = 0;
    pub const ADMIN_PROHIBITED: u8 = 1;
    pub const BEYOND_SCOPE: u8 = 2;
    pub const ADDRESS_UNREACHABLE: u8 = 3;
    pub const PORT_UNREACHABLE: u8 = 4;
    pub const FAILED_POLICY: u8 = 5;
    pub const REJECT_ROUTE: u8 = 6;
}

/// Time exceeded codes (RFC 4443 §3.3).
pub mod time_exceeded_code {
    pub const HOP_LIMIT: u8 = 0;
    pub const REASSEMBLY: u8 = 1;
}

/// Parameter problem codes (RFC 4443 §3.4, RFC 7112 for code 3).
pub mod param_problem_code {
    pub const ERRONEOUS_HEADER_FIELD: u8 = 0;
    pub const UNRECOGNIZED_NEXT_HEADER: u8 = 1;
    pub const UNRECOGNIZED_OPTION: u8 = 2;
    /// The first fragment does not hold the whole header chain (pointer 0).
    pub const INCOMPLETE_HEADER_CHAIN: u8 = 3;
}

/// Byte ranges of the fields; those after `CHECKSUM` are readings of the type-specific
/// word and of what follows it.
pub mod field {
    use core::ops::Range;
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Range<usize> = 2..4;
    /// The second word: MTU (packet too big), pointer (parameter problem), unused (other
    /// errors), identifier and sequence number (echo), flags and reserved (NA).
    pub const WORD: Range<usize> = 4..8;
    pub const ECHO_IDENT: Range<usize> = 4..6;
    pub const ECHO_SEQ_NO: Range<usize> = 6..8;
    pub const NA_FLAGS: usize = 4;
    pub const ND_TARGET: Range<usize> = 8..24;
    /// Start of a solicitation's or advertisement's options.
    pub const ND_OPTIONS: usize = 24;
}

/// True for error messages (types below 128): no error is ever sent about one
/// (RFC 4443 §2.4 (e.1)), and one of an unknown type is still passed to the upper layer
/// (§2.4 (b)).
pub fn is_error(msg_type: u8) -> bool {
    msg_type < 128
}

/// The start of `invoking` that an error about it quotes (at most [`MAX_QUOTE`] bytes).
pub fn quote(invoking: &[u8]) -> &[u8] {
    &invoking[..invoking.len().min(MAX_QUOTE)]
}

/// The minimum length of a message of type `t`: 8 where the type-specific word is read,
/// 24 for a solicitation or advertisement, 4 for a type this crate does not parse.
fn min_len(t: u8) -> usize {
    match t {
        msg_type::DST_UNREACHABLE..=msg_type::PARAM_PROBLEM => HEADER_LEN,
        msg_type::ECHO_REQUEST | msg_type::ECHO_REPLY => HEADER_LEN,
        msg_type::NEIGHBOR_SOLICIT | msg_type::NEIGHBOR_ADVERT => ND_HEADER_LEN,
        _ => MIN_LEN,
    }
}

/// The checksum over the IPv6 pseudo-header (RFC 8200 §8.1: upper-layer length, next
/// header 58) and `msg` as it is in the buffer: zero when a received message verifies.
/// The length enters the sum as the 32-bit field it is, so no length is cut short.
fn icmp_checksum(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> u16 {
    let acc = checksum::pseudo_header(src, dst, PROTOCOL, 0) + msg.len() as u64;
    !checksum::fold(checksum::accumulate(acc, msg))
}

fn addr_at(b: &[u8], at: usize) -> Ipv6Addr {
    let mut a = [0; 16];
    if let Some(s) = b.get(at..at + 16) {
        a.copy_from_slice(s);
    }
    Ipv6Addr(a)
}

/// A view over an ICMPv6 message. `new_checked` guarantees [`MIN_LEN`] bytes, 8 for the
/// echo and error types and 24 for a solicitation or advertisement; the accessors of
/// other types' fields read zero where the message is too short for them.
#[derive(Debug, Clone)]
pub struct Icmpv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < MIN_LEN || b.len() < min_len(b[field::TYPE]) {
            return Err(Error::Truncated);
        }
        Ok(Icmpv6Packet { buffer })
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    pub fn msg_type(&self) -> u8 {
        self.b()[field::TYPE]
    }
    pub fn code(&self) -> u8 {
        self.b()[field::CODE]
    }
    pub fn checksum(&self) -> u16 {
        get_u16(self.b(), field::CHECKSUM.start)
    }
    /// Verifies the checksum over the pseudo-header of `src` and `dst` and the whole buffer
    /// (pass the message alone: the IPv6 payload from the ICMPv6 header on).
    pub fn verify_checksum(&self, src: Ipv6Addr, dst: Ipv6Addr) -> bool {
        icmp_checksum(src, dst, self.b()) == 0
    }
    /// The second word (see [`field::WORD`]).
    pub fn word(&self) -> u32 {
        get_u32(self.b(), field::WORD.start)
    }
    /// Identifier (echo messages).
    pub fn echo_ident(&self) -> u16 {
        get_u16(self.b(), field::ECHO_IDENT.start)
    }
    /// Sequence number (echo messages).
    pub fn echo_seq_no(&self) -> u16 {
        get_u16(self.b(), field::ECHO_SEQ_NO.start)
    }
    /// The MTU of a packet too big.
    pub fn mtu(&self) -> u32 {
        self.word()
    }
    /// The pointer of a parameter problem (from the start of the quoted IPv6 header).
    pub fn pointer(&self) -> u32 {
        self.word()
    }
    /// A neighbour advertisement's flags ([`na_flags`]).
    pub fn na_flags(&self) -> u8 {
        self.b().get(field::NA_FLAGS).copied().unwrap_or(0)
    }
    /// The target address of a solicitation or advertisement.
    pub fn nd_target(&self) -> Ipv6Addr {
        addr_at(self.b(), field::ND_TARGET.start)
    }
    /// The options of a solicitation or advertisement.
    pub fn nd_options(&self) -> &[u8] {
        self.b().get(field::ND_OPTIONS..).unwrap_or(&[])
    }
    /// What follows the 8-byte header: an echo's data, an error's quoted packet.
    pub fn data(&self) -> &[u8] {
        self.b().get(HEADER_LEN..).unwrap_or(&[])
    }
    /// What follows type, code and checksum.
    pub fn body(&self) -> &[u8] {
        &self.b()[MIN_LEN..]
    }
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

/// A parsed ICMPv6 message; the slices borrow the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Icmpv6Repr<'a> {
    /// Type 1; `quoted`: the invoking packet, IPv6 header first (at least its 40 bytes).
    DstUnreachable { code: u8, quoted: &'a [u8] },
    /// Type 2 (its code, 0 by RFC 4443, is ignored as Linux ignores it, and emitted 0).
    PacketTooBig { mtu: u32, quoted: &'a [u8] },
    /// Type 3.
    TimeExceeded { code: u8, quoted: &'a [u8] },
    /// Type 4; `pointer` counts from the start of the quoted IPv6 header.
    ParamProblem {
        code: u8,
        pointer: u32,
        quoted: &'a [u8],
    },
    /// Type 128. `code` is 0 by RFC 4443; another is taken, and Linux's
    /// `icmpv6_echo_reply` copies it into the reply, as IPv4's echo does.
    EchoRequest {
        code: u8,
        ident: u16,
        seq_no: u16,
        data: &'a [u8],
    },
    /// Type 129.
    EchoReply {
        code: u8,
        ident: u16,
        seq_no: u16,
        data: &'a [u8],
    },
    /// Type 135, validated (see [`Icmpv6Repr::parse`]).
    NeighborSolicit {
        target: Ipv6Addr,
        source_lladdr: Option<MacAddr>,
    },
    /// Type 136, validated (see [`Icmpv6Repr::parse`]).
    NeighborAdvert {
        router: bool,
        solicited: bool,
        override_: bool,
        target: Ipv6Addr,
        target_lladdr: Option<MacAddr>,
    },
    /// Any other type, checksum verified and at least 8 bytes long but otherwise not
    /// looked into: router solicitations and advertisements, redirects, multicast listener
    /// messages, and unknown types. `body` is all that follows type, code and checksum.
    /// An informational one (type 128 or above) is ignored by Linux; an error of unknown
    /// type (below 128) goes to the upper layer the quoted packet names (RFC 4443 §2.4
    /// (b)), and its quoted packet is `body[4..]`.
    Other {
        msg_type: u8,
        code: u8,
        body: &'a [u8],
    },
}

impl<'a> Icmpv6Repr<'a> {
    /// Parses a message received from `src` to `dst` (the IPv6 header's addresses).
    ///
    /// In Linux's order: [`Error::Checksum`] unless the checksum verifies;
    /// [`Error::Truncated`] for a message shorter than 8 bytes (Linux pulls the 8-byte
    /// header whatever the type), and for an error that quotes less than a fixed IPv6
    /// header (`icmpv6_notify` drops it). A solicitation or advertisement is
    /// [`Error::Malformed`] when it breaks a rule of RFC 4861 §7.1 that needs no more of
    /// the IP header than its addresses ([`ndisc`]'s `solicit_rules` and `advert_rules`:
    /// code 0, a target that is not multicast, well-formed options and an Ethernet
    /// link-layer option, the solicited flag clear to a multicast destination, a DAD probe
    /// only to a solicited-node group and without a link-layer option). Hop limit and
    /// fragmentation are [`ndisc::ndp_ip_rules_ok`]'s.
    /// Types not listed above are [`Icmpv6Repr::Other`].
    pub fn parse(p: &Icmpv6Packet<&'a [u8]>, src: Ipv6Addr, dst: Ipv6Addr) -> Result<Self> {
        if !p.verify_checksum(src, dst) {
            return Err(Error::Checksum);
        }
        let b: &'a [u8] = p.buffer;
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let (ty, code, word) = (p.msg_type(), p.code(), p.word());
        let rest: &'a [u8] = &b[HEADER_LEN..];
        if (msg_type::DST_UNREACHABLE..=msg_type::PARAM_PROBLEM).contains(&ty)
            && rest.len() < crate::ipv6::HEADER_LEN
        {
            return Err(Error::Truncated);
        }
        match ty {
            msg_type::DST_UNREACHABLE => Ok(Icmpv6Repr::DstUnreachable { code, quoted: rest }),
            msg_type::PACKET_TOO_BIG => Ok(Icmpv6Repr::PacketTooBig {
                mtu: word,
                quoted: rest,
            }),
            msg_type::TIME_EXCEEDED => Ok(Icmpv6Repr::TimeExceeded { code, quoted: rest }),
            msg_type::PARAM_PROBLEM => Ok(Icmpv6Repr::ParamProblem {
                code,
                pointer: word,
                quoted: rest,
            }),
            msg_type::ECHO_REQUEST => Ok(Icmpv6Repr::EchoRequest {
                code,
                ident: p.echo_ident(),
                seq_no: p.echo_seq_no(),
                data: rest,
            }),
            msg_type::ECHO_REPLY => Ok(Icmpv6Repr::EchoReply {
                code,
                ident: p.echo_ident(),
                seq_no: p.echo_seq_no(),
                data: rest,
            }),
            msg_type::NEIGHBOR_SOLICIT => {
                let target = p.nd_target();
                let source_lladdr = ndisc::solicit_rules(code, target, p.nd_options(), src, dst)?;
                Ok(Icmpv6Repr::NeighborSolicit {
                    target,
                    source_lladdr,
                })
            }
            msg_type::NEIGHBOR_ADVERT => {
                let (target, flags, options) = (p.nd_target(), p.na_flags(), p.nd_options());
                let target_lladdr = ndisc::advert_rules(code, target, flags, options, dst)?;
                Ok(Icmpv6Repr::NeighborAdvert {
                    router: flags & na_flags::ROUTER != 0,
                    solicited: flags & na_flags::SOLICITED != 0,
                    override_: flags & na_flags::OVERRIDE != 0,
                    target,
                    target_lladdr,
                })
            }
            _ => Ok(Icmpv6Repr::Other {
                msg_type: ty,
                code,
                body: &b[MIN_LEN..],
            }),
        }
    }

    /// The message's type.
    pub fn msg_type(&self) -> u8 {
        match self {
            Icmpv6Repr::DstUnreachable { .. } => msg_type::DST_UNREACHABLE,
            Icmpv6Repr::PacketTooBig { .. } => msg_type::PACKET_TOO_BIG,
            Icmpv6Repr::TimeExceeded { .. } => msg_type::TIME_EXCEEDED,
            Icmpv6Repr::ParamProblem { .. } => msg_type::PARAM_PROBLEM,
            Icmpv6Repr::EchoRequest { .. } => msg_type::ECHO_REQUEST,
            Icmpv6Repr::EchoReply { .. } => msg_type::ECHO_REPLY,
            Icmpv6Repr::NeighborSolicit { .. } => msg_type::NEIGHBOR_SOLICIT,
            Icmpv6Repr::NeighborAdvert { .. } => msg_type::NEIGHBOR_ADVERT,
            Icmpv6Repr::Other { msg_type, .. } => *msg_type,
        }
    }

    /// The error message this is, for the error types.
    fn as_error(&self) -> Option<Icmpv6Error<'a>> {
        let (msg_type, code, word, quoted) = match *self {
            Icmpv6Repr::DstUnreachable { code, quoted } => (1, code, 0, quoted),
            Icmpv6Repr::PacketTooBig { mtu, quoted } => (2, 0, mtu, quoted),
            Icmpv6Repr::TimeExceeded { code, quoted } => (3, code, 0, quoted),
            Icmpv6Repr::ParamProblem {
                code,
                pointer,
                quoted,
            } => (4, code, pointer, quoted),
            _ => return None,
        };
        Some(Icmpv6Error {
            msg_type,
            code,
            word,
            quoted,
        })
    }

    pub fn buffer_len(&self) -> usize {
        let lladdr = |o: &Option<MacAddr>| if o.is_some() { 8 } else { 0 };
        match self {
            Icmpv6Repr::EchoRequest { data, .. } | Icmpv6Repr::EchoReply { data, .. } => {
                HEADER_LEN + data.len()
            }
            Icmpv6Repr::NeighborSolicit { source_lladdr, .. } => {
                ND_HEADER_LEN + lladdr(source_lladdr)
            }
            Icmpv6Repr::NeighborAdvert { target_lladdr, .. } => {
                ND_HEADER_LEN + lladdr(target_lladdr)
            }
            Icmpv6Repr::Other { body, .. } => MIN_LEN + body.len(),
            _ => self.as_error().map_or(0, |e| e.buffer_len()),
        }
    }

    /// Writes the message, from `src` to `dst`, with its checksum; reserved fields are
    /// zero, and a solicitation or advertisement carries its link-layer option when it has
    /// one. Nothing is checked against the rules [`Icmpv6Repr::parse`] enforces.
    /// [`Error::Truncated`] when `buf` is too short, [`Error::Malformed`] for a message
    /// longer than an IPv6 payload can be (65535 bytes).
    pub fn emit(&self, src: Ipv6Addr, dst: Ipv6Addr, buf: &mut [u8]) -> Result<usize> {
        if let Some(e) = self.as_error() {
            return e.emit(src, dst, buf);
        }
        let len = self.buffer_len();
        if len > u16::MAX as usize {
            return Err(Error::Malformed);
        }
        let b = buf.get_mut(..len).ok_or(Error::Truncated)?;
        b[..HEADER_LEN.min(len)].fill(0);
        b[field::TYPE] = self.msg_type();
        match *self {
            Icmpv6Repr::EchoRequest {
                code,
                ident,
                seq_no,
                data,
            }
            | Icmpv6Repr::EchoReply {
                code,
                ident,
                seq_no,
                data,
            } => {
                b[field::CODE] = code;
                put_u16(b, field::ECHO_IDENT.start, ident);
                put_u16(b, field::ECHO_SEQ_NO.start, seq_no);
                b[HEADER_LEN..].copy_from_slice(data);
            }
            Icmpv6Repr::NeighborSolicit {
                target,
                source_lladdr,
            } => {
                b[field::ND_TARGET].copy_from_slice(&target.0);
                let options = &mut b[field::ND_OPTIONS..];
                ndisc::write_lladdr(options, nd_option::SOURCE_LLADDR, source_lladdr);
            }
            Icmpv6Repr::NeighborAdvert {
                router,
                solicited,
                override_,
                target,
                target_lladdr,
            } => {
                let flag = |on: bool, f: u8| if on { f } else { 0 };
                b[field::NA_FLAGS] = flag(router, na_flags::ROUTER)
                    | flag(solicited, na_flags::SOLICITED)
                    | flag(override_, na_flags::OVERRIDE);
                b[field::ND_TARGET].copy_from_slice(&target.0);
                let options = &mut b[field::ND_OPTIONS..];
                ndisc::write_lladdr(options, nd_option::TARGET_LLADDR, target_lladdr);
            }
            Icmpv6Repr::Other { code, body, .. } => {
                b[field::CODE] = code;
                b[MIN_LEN..].copy_from_slice(body);
            }
            _ => {}
        }
        let c = icmp_checksum(src, dst, b);
        put_u16(b, field::CHECKSUM.start, c);
        Ok(len)
    }
}

/// An ICMPv6 error message: `word` is the type-specific second word (a packet too big's
/// MTU, a parameter problem's pointer from the start of the quoted IPv6 header, zero for
/// the others), `quoted` the start of the packet it is about, IPv6 header first; cut it
/// with [`quote`] to the [`MAX_QUOTE`] bytes RFC 4443 §2.4 (c) allows.
///
/// Whether to send one at all is the caller's rule (RFC 4443 §2.4 (e), Linux's
/// `icmp6_send`): never about an ICMPv6 error, nor to a source that is unspecified or
/// multicast, and about a packet sent to a multicast destination only a packet too big or
/// a parameter problem, code 2, about an option whose type's top bits are 10.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Icmpv6Error<'a> {
    pub msg_type: u8,
    pub code: u8,
    pub word: u32,
    pub quoted: &'a [u8],
}

impl Icmpv6Error<'_> {
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.quoted.len()
    }

    /// Writes the message, from `src` to `dst`, with its checksum ([`Error::Malformed`]
    /// for one longer than 65535 bytes, [`Error::Truncated`] when `buf` is too short).
    pub fn emit(&self, src: Ipv6Addr, dst: Ipv6Addr, buf: &mut [u8]) -> Result<usize> {
        let len = self.buffer_len();
        if len > u16::MAX as usize {
            return Err(Error::Malformed);
        }
        let b = buf.get_mut(..len).ok_or(Error::Truncated)?;
        b[field::TYPE] = self.msg_type;
        b[field::CODE] = self.code;
        put_u16(b, field::CHECKSUM.start, 0);
        put_u32(b, field::WORD.start, self.word);
        b[HEADER_LEN..].copy_from_slice(self.quoted);
        let c = icmp_checksum(src, dst, b);
        put_u16(b, field::CHECKSUM.start, c);
        Ok(len)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ndisc::tests::LINUX_NS;

    pub(crate) fn addr(s: &str) -> Ipv6Addr {
        s.parse::<std::net::Ipv6Addr>().unwrap().into()
    }

    pub(crate) fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 1071's sum written out plainly, pseudo-header included, with no code of this
    /// crate: what a checksum field must hold.
    pub(crate) fn rfc1071(src: Ipv6Addr, dst: Ipv6Addr, msg: &[u8]) -> u16 {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&src.0);
        bytes.extend_from_slice(&dst.0);
        bytes.extend_from_slice(&(msg.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&[0, 0, 0, 58]);
        bytes.extend_from_slice(msg);
        bytes[40 + 2] = 0; // the checksum field itself counts as zero
        bytes[40 + 3] = 0;
        if bytes.len() % 2 == 1 {
            bytes.push(0);
        }
        let mut sum: u32 = 0;
        for w in bytes.chunks(2) {
            sum += u16::from_be_bytes([w[0], w[1]]) as u32;
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    fn roundtrip(r: Icmpv6Repr, src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
        let mut b = vec![0u8; r.buffer_len()];
        assert_eq!(r.emit(src, dst, &mut b).unwrap(), b.len());
        assert_eq!(get_u16(&b, 2), rfc1071(src, dst, &b));
        let p = Icmpv6Packet::new_checked(&b[..]).unwrap();
        assert!(p.verify_checksum(src, dst));
        assert_eq!(Icmpv6Repr::parse(&p, src, dst).unwrap(), r);
        assert!(r.emit(src, dst, &mut vec![0u8; b.len() - 1]).is_err());
        b
    }

    pub(crate) const A: &str = "fd00:1::a";
    pub(crate) const B: &str = "fd00:1::b";

    #[test]
    fn echo_linux_sent_and_roundtrips() {
        // `ping -6 -s 4 -p 41424344` and the Linux peer's reply.
        let (a, b) = (addr(A), addr(B));
        let req = hex("8000 f621 0af7 0001 4142 4344");
        let p = Icmpv6Packet::new_checked(&req[..]).unwrap();
        let r = Icmpv6Repr::parse(&p, a, b).unwrap();
        assert_eq!(
            r,
            Icmpv6Repr::EchoRequest {
                code: 0,
                ident: 0x0af7,
                seq_no: 1,
                data: b"ABCD"
            }
        );
        let reply = Icmpv6Repr::EchoReply {
            code: 0,
            ident: 0x0af7,
            seq_no: 1,
            data: b"ABCD",
        };
        let out = roundtrip(reply, b, a);
        assert_eq!(out, hex("8100 f521 0af7 0001 4142 4344"));
        roundtrip(r, a, b);
        roundtrip(
            Icmpv6Repr::EchoRequest {
                code: 0,
                ident: 7,
                seq_no: 9,
                data: b"odd",
            },
            a,
            b,
        );
    }

    #[test]
    fn every_variant_roundtrips() {
        let (a, b) = (addr(A), addr(B));
        let quoted = hex("6000 0000 0008 fd40 fd00 0001 0000 0000 0000 0000 0000 000a
             fd00 0001 0000 0000 0000 0000 0000 000b 0000 0000 0000 0000");
        let mac = MacAddr([2, 0, 0, 0, 0, 0x0a]);
        let all = [
            Icmpv6Repr::DstUnreachable {
                code: unreachable_code::PORT_UNREACHABLE,
                quoted: &quoted,
            },
            Icmpv6Repr::PacketTooBig {
                mtu: 1280,
                quoted: &quoted,
            },
            Icmpv6Repr::TimeExceeded {
                code: time_exceeded_code::REASSEMBLY,
                quoted: &quoted,
            },
            Icmpv6Repr::ParamProblem {
                code: param_problem_code::UNRECOGNIZED_NEXT_HEADER,
                pointer: 6,
                quoted: &quoted,
            },
            Icmpv6Repr::EchoRequest {
                code: 0,
                ident: 1,
                seq_no: 2,
                data: &[],
            },
            Icmpv6Repr::EchoReply {
                code: 0,
                ident: 3,
                seq_no: 4,
                data: b"x",
            },
            Icmpv6Repr::NeighborSolicit {
                target: b,
                source_lladdr: None,
            },
            Icmpv6Repr::NeighborSolicit {
                target: b,
                source_lladdr: Some(mac),
            },
            Icmpv6Repr::NeighborAdvert {
                router: true,
                solicited: false,
                override_: false,
                target: a,
                target_lladdr: None,
            },
            Icmpv6Repr::NeighborAdvert {
                router: false,
                solicited: true,
                override_: true,
                target: a,
                target_lladdr: Some(mac),
            },
            // A router solicitation: passed up as it is.
            Icmpv6Repr::Other {
                msg_type: msg_type::ROUTER_SOLICIT,
                code: 0,
                body: &[0, 0, 0, 0, 1, 1, 2, 0, 0, 0, 0, 0x0a],
            },
            // An error of a type unknown to RFC 4443.
            Icmpv6Repr::Other {
                msg_type: 100,
                code: 3,
                body: &[0; 44],
            },
        ];
        for r in all {
            let bytes = roundtrip(r, a, b);
            assert_eq!(bytes[0], r.msg_type());
        }
    }

    #[test]
    fn errors_linux_sent() {
        // Linux's answer to a destination options header holding an unknown option whose
        // type is 0x80: parameter problem, code 2, pointer 42 (the option's type byte).
        let msg = hex(
            "0402 f318 0000 002a 6000 0000 0014 3c40 fd00 0001 0000 0000 0000 0000 0000 000a
             fd00 0001 0000 0000 0000 0000 0000 000b 1100 8004 0000 0000 04d2 0009 000c 0000
             6869 7961",
        );
        let (a, b) = (addr(A), addr(B));
        let p = Icmpv6Packet::new_checked(&msg[..]).unwrap();
        match Icmpv6Repr::parse(&p, b, a).unwrap() {
            Icmpv6Repr::ParamProblem {
                code: 2,
                pointer: 42,
                quoted,
            } => assert_eq!(quoted, &msg[8..]),
            other => panic!("{other:?}"),
        }
        // We build the same message.
        let e = Icmpv6Error {
            msg_type: msg_type::PARAM_PROBLEM,
            code: param_problem_code::UNRECOGNIZED_OPTION,
            word: 42,
            quoted: &msg[8..],
        };
        let mut out = vec![0u8; e.buffer_len()];
        assert_eq!(e.emit(b, a, &mut out).unwrap(), msg.len());
        assert_eq!(out, msg);
        assert_eq!(e.emit(b, a, &mut [0u8; 10]), Err(Error::Truncated));
    }

    #[test]
    fn an_error_quotes_at_most_the_minimum_mtu() {
        let big = vec![0x60u8; 2000];
        let q = quote(&big);
        assert_eq!(q.len(), 1232);
        assert_eq!(quote(&big[..100]).len(), 100);
        let e = Icmpv6Error {
            msg_type: msg_type::DST_UNREACHABLE,
            code: unreachable_code::ADDRESS_UNREACHABLE,
            word: 0,
            quoted: q,
        };
        assert_eq!(e.buffer_len() + crate::ipv6::HEADER_LEN, MIN_MTU);
        let (a, b) = (addr(A), addr(B));
        let mut out = vec![0u8; e.buffer_len()];
        e.emit(a, b, &mut out).unwrap();
        assert_eq!(get_u16(&out, 2), rfc1071(a, b, &out));
        assert!(is_error(out[0]) && !is_error(msg_type::ECHO_REPLY));
    }

    #[test]
    fn a_bad_checksum_is_refused() {
        let (a, b) = (addr(A), addr(B));
        let mut m = hex(LINUX_NS);
        let group = addr("ff02::1:ff00:b");
        m[20] ^= 1;
        let p = Icmpv6Packet::new_checked(&m[..]).unwrap();
        assert_eq!(Icmpv6Repr::parse(&p, a, group), Err(Error::Checksum));
        m[20] ^= 1;
        // The pseudo-header counts: other addresses, other sum.
        let p = Icmpv6Packet::new_checked(&m[..]).unwrap();
        assert_eq!(Icmpv6Repr::parse(&p, b, group), Err(Error::Checksum));
        assert!(Icmpv6Repr::parse(&p, a, group).is_ok());
    }

    /// Rewrites the checksum of `m` (sent from `src` to `dst`) and parses it.
    pub(crate) fn reparse(m: &mut [u8], src: Ipv6Addr, dst: Ipv6Addr) -> Result<Icmpv6Repr<'_>> {
        let c = rfc1071(src, dst, m);
        put_u16(m, 2, c);
        let p = Icmpv6Packet::new_checked(&*m)?;
        Icmpv6Repr::parse(&p, src, dst)
    }

    #[test]
    fn truncated_messages() {
        let (a, b) = (addr(A), addr(B));
        assert_eq!(
            Icmpv6Packet::new_checked(&[128u8, 0, 0][..]).unwrap_err(),
            Error::Truncated
        );
        // Echo: 8 bytes; NS/NA: 24; errors: 8.
        let ns = hex(LINUX_NS);
        for t in [128u8, 129, 1, 2, 3, 4] {
            let m = [t, 0, 0, 0, 0, 0, 0];
            assert_eq!(
                Icmpv6Packet::new_checked(&m[..]).unwrap_err(),
                Error::Truncated
            );
        }
        for t in [135u8, 136] {
            let mut m = ns[..23].to_vec();
            m[0] = t;
            assert_eq!(
                Icmpv6Packet::new_checked(&m[..]).unwrap_err(),
                Error::Truncated
            );
        }
        // A 4-byte message of another type is a view, but not a message Linux takes.
        let mut m = [200u8, 0, 0, 0];
        let p = Icmpv6Packet::new_checked(&m[..]).unwrap();
        assert_eq!(
            (p.word(), p.nd_target(), p.data()),
            (0, Ipv6Addr::UNSPECIFIED, &[][..])
        );
        assert_eq!(reparse(&mut m, a, b), Err(Error::Truncated));
        // An error must quote at least a fixed IPv6 header.
        let mut m = [1u8, 4, 0, 0, 0, 0, 0, 0, 0x60, 0, 0, 0];
        assert_eq!(reparse(&mut m, a, b), Err(Error::Truncated));
        let mut m = vec![2u8, 0, 0, 0, 0, 0, 5, 0];
        m.extend_from_slice(&[0x60; 40]);
        assert!(matches!(
            reparse(&mut m, a, b),
            Ok(Icmpv6Repr::PacketTooBig { mtu: 1280, .. })
        ));
    }
}
