//! ICMPv4 (RFC 792): echo and timestamp requests and replies parsed and built; errors
//! (unreachable, time exceeded, parameter problem) built; other types recognised by number
//! only.

use crate::checksum;
use crate::{get_u16, put_u16, Error, Result};

pub const HEADER_LEN: usize = 8;

/// Byte ranges of the header's fields (the last two are the echo messages' reading of the
/// type-specific word).
pub mod field {
    use core::ops::Range;
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Range<usize> = 2..4;
    pub const ECHO_IDENT: Range<usize> = 4..6;
    pub const ECHO_SEQ_NO: Range<usize> = 6..8;
}

/// A view over an ICMPv4 message.
#[derive(Debug, Clone)]
pub struct Icmpv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Icmpv4Packet { buffer })
    }
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }
    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::CHECKSUM.start)
    }
    /// Identifier (echo messages).
    pub fn echo_ident(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::ECHO_IDENT.start)
    }
    /// Sequence number (echo messages).
    pub fn echo_seq_no(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::ECHO_SEQ_NO.start)
    }
    pub fn verify_checksum(&self) -> bool {
        checksum::checksum(self.buffer.as_ref()) == 0
    }
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
}

/// A parsed echo message (type 8 request or 0 reply); `data` borrows the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Icmpv4Repr<'a> {
    /// `code` is 0 by RFC 792; another is taken, and its reply keeps it, as Linux does.
    EchoRequest {
        code: u8,
        ident: u16,
        seq_no: u16,
        data: &'a [u8],
    },
    EchoReply {
        code: u8,
        ident: u16,
        seq_no: u16,
        data: &'a [u8],
    },
    /// Type 13: only the originate timestamp is read (Linux's `icmp_timestamp` needs those
    /// 4 bytes and ignores the rest, the code included).
    TimestampRequest {
        ident: u16,
        seq_no: u16,
        originate: u32,
    },
    /// Type 14, code 0; times in milliseconds since midnight UTC.
    TimestampReply {
        ident: u16,
        seq_no: u16,
        originate: u32,
        receive: u32,
        transmit: u32,
    },
}

/// The length of a timestamp message: the header and three timestamps.
pub const TIMESTAMP_LEN: usize = HEADER_LEN + 12;

impl<'a> Icmpv4Repr<'a> {
    /// Parses echo messages (checksum verified); other types are `Unsupported`.
    pub fn parse(p: &Icmpv4Packet<&'a [u8]>) -> Result<Self> {
        if !p.verify_checksum() {
            return Err(Error::Checksum);
        }
        let b: &'a [u8] = p.buffer;
        let data = &b[HEADER_LEN..];
        let (code, ident, seq_no) = (p.code(), p.echo_ident(), p.echo_seq_no());
        match p.msg_type() {
            8 => Ok(Icmpv4Repr::EchoRequest {
                code,
                ident,
                seq_no,
                data,
            }),
            0 => Ok(Icmpv4Repr::EchoReply {
                code,
                ident,
                seq_no,
                data,
            }),
            13 | 14 if data.len() < 4 => Err(Error::Truncated),
            13 => Ok(Icmpv4Repr::TimestampRequest {
                ident,
                seq_no,
                originate: be32(data, 0),
            }),
            14 if data.len() < 12 => Err(Error::Truncated),
            14 => Ok(Icmpv4Repr::TimestampReply {
                ident,
                seq_no,
                originate: be32(data, 0),
                receive: be32(data, 4),
                transmit: be32(data, 8),
            }),
            _ => Err(Error::Unsupported),
        }
    }

    pub fn buffer_len(&self) -> usize {
        match self {
            Icmpv4Repr::EchoRequest { data, .. } | Icmpv4Repr::EchoReply { data, .. } => {
                HEADER_LEN + data.len()
            }
            Icmpv4Repr::TimestampRequest { .. } | Icmpv4Repr::TimestampReply { .. } => {
                TIMESTAMP_LEN
            }
        }
    }

    /// Writes the message with its checksum.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let mut times = [0u8; 12];
        let (ty, code, ident, seq_no, data) = match *self {
            Icmpv4Repr::EchoRequest {
                code,
                ident,
                seq_no,
                data,
            } => (8, code, ident, seq_no, data),
            Icmpv4Repr::EchoReply {
                code,
                ident,
                seq_no,
                data,
            } => (0, code, ident, seq_no, data),
            Icmpv4Repr::TimestampRequest {
                ident,
                seq_no,
                originate,
            } => {
                times[..4].copy_from_slice(&originate.to_be_bytes());
                (13, 0, ident, seq_no, &times[..])
            }
            Icmpv4Repr::TimestampReply {
                ident,
                seq_no,
                originate,
                receive,
                transmit,
            } => {
                for (i, t) in [originate, receive, transmit].into_iter().enumerate() {
                    times[i * 4..i * 4 + 4].copy_from_slice(&t.to_be_bytes());
                }
                (14, 0, ident, seq_no, &times[..])
            }
        };
        let len = HEADER_LEN + data.len();
        let b = buf.get_mut(..len).ok_or(Error::Truncated)?;
        b[field::TYPE] = ty;
        b[field::CODE] = code;
        put_u16(b, field::CHECKSUM.start, 0);
        put_u16(b, field::ECHO_IDENT.start, ident);
        put_u16(b, field::ECHO_SEQ_NO.start, seq_no);
        b[HEADER_LEN..].copy_from_slice(data);
        let c = checksum::checksum(b);
        put_u16(b, field::CHECKSUM.start, c);
        Ok(len)
    }
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// ICMP error types (RFC 792).
pub mod error_type {
    pub const DEST_UNREACHABLE: u8 = 3;
    pub const SOURCE_QUENCH: u8 = 4;
    pub const REDIRECT: u8 = 5;
    pub const TIME_EXCEEDED: u8 = 11;
    pub const PARAMETER_PROBLEM: u8 = 12;
}

/// An ICMP error message: `word` is the type-specific second word (a parameter problem's
/// pointer in its top byte, a fragmentation-needed's MTU in its low half), `quoted` the start
/// of the datagram it is about, IP header first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Icmpv4Error<'a> {
    pub msg_type: u8,
    pub code: u8,
    pub word: u32,
    pub quoted: &'a [u8],
}

impl Icmpv4Error<'_> {
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.quoted.len()
    }

    /// Writes the message with its checksum.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let len = self.buffer_len();
        let b = buf.get_mut(..len).ok_or(Error::Truncated)?;
        b[field::TYPE] = self.msg_type;
        b[field::CODE] = self.code;
        put_u16(b, field::CHECKSUM.start, 0);
        b[4..8].copy_from_slice(&self.word.to_be_bytes());
        b[HEADER_LEN..].copy_from_slice(self.quoted);
        let c = checksum::checksum(b);
        put_u16(b, field::CHECKSUM.start, c);
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let r = Icmpv4Repr::EchoRequest {
            code: 0,
            ident: 7,
            seq_no: 9,
            data: b"ping!",
        };
        let mut b = [0u8; 13];
        r.emit(&mut b).unwrap();
        let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Icmpv4Repr::parse(&p).unwrap(), r);
        b[9] ^= 0xff;
        let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Icmpv4Repr::parse(&p).unwrap_err(), Error::Checksum);
        assert!(Icmpv4Packet::new_checked(&b[..7]).is_err());
    }

    #[test]
    fn timestamp_messages() {
        let r = Icmpv4Repr::TimestampReply {
            ident: 1,
            seq_no: 2,
            originate: 3,
            receive: 4,
            transmit: 5,
        };
        let mut b = [0u8; TIMESTAMP_LEN];
        assert_eq!(r.emit(&mut b), Ok(TIMESTAMP_LEN));
        let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Icmpv4Repr::parse(&p).unwrap(), r);
        // A request needs its originate timestamp only.
        let mut q = [13, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 9];
        let c = checksum::checksum(&q);
        put_u16(&mut q, 2, c);
        let p = Icmpv4Packet::new_checked(&q[..]).unwrap();
        let want = Icmpv4Repr::TimestampRequest {
            ident: 1,
            seq_no: 2,
            originate: 9,
        };
        assert_eq!(Icmpv4Repr::parse(&p), Ok(want));
        let mut short = [13, 0, 0, 0, 0, 1, 0, 2, 0, 0, 9];
        let c = checksum::checksum(&short);
        put_u16(&mut short, 2, c);
        let p = Icmpv4Packet::new_checked(&short[..]).unwrap();
        assert_eq!(Icmpv4Repr::parse(&p), Err(Error::Truncated));
    }

    #[test]
    fn an_error_quotes_the_datagram_and_sums_to_zero() {
        let quoted = [0x45u8, 0, 0, 28, 1, 2, 3, 4];
        let e = Icmpv4Error {
            msg_type: error_type::PARAMETER_PROBLEM,
            code: 0,
            word: 22 << 24,
            quoted: &quoted,
        };
        let mut b = [0u8; 16];
        assert_eq!(e.emit(&mut b).unwrap(), 16);
        assert_eq!(&b[..2], &[12, 0]);
        assert_eq!(&b[4..8], &[22, 0, 0, 0]);
        assert_eq!(&b[8..], &quoted);
        assert!(Icmpv4Packet::new_checked(&b[..]).unwrap().verify_checksum());
        assert_eq!(e.emit(&mut [0u8; 15]).unwrap_err(), Error::Truncated);
    }
}
