//! TCP headers (RFC 9293) and the options the stack negotiates: MSS, window scale (RFC 7323),
//! SACK-permitted and SACK blocks (RFC 2018), timestamps (RFC 7323).

use crate::checksum;
use crate::ip::{addr, IpAddress};
use crate::{get_u16, get_u32, put_u16, put_u32, Error, Result};

pub const HEADER_LEN: usize = 20;
/// Largest header (data offset 15).
pub const MAX_HEADER_LEN: usize = 60;

/// Byte ranges of the fixed header's fields (options follow, up to the data offset).
pub mod field {
    use core::ops::Range;
    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const SEQ_NUM: Range<usize> = 4..8;
    pub const ACK_NUM: Range<usize> = 8..12;
    /// Data offset: header length in 32-bit words, in the high nibble.
    pub const DATA_OFFSET: usize = 12;
    /// The flag bits ([`super::flags`]).
    pub const FLAGS: usize = 13;
    pub const WINDOW: Range<usize> = 14..16;
    pub const CHECKSUM: Range<usize> = 16..18;
    pub const URGENT: Range<usize> = 18..20;
}

/// A TCP sequence number: arithmetic and comparison are modulo 2^32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SeqNumber(pub u32);

#[allow(clippy::should_implement_trait)] // `add(usize)` is wrapping arithmetic, not `Add<Self>`
impl SeqNumber {
    #[inline]
    pub fn add(self, n: usize) -> SeqNumber {
        SeqNumber(self.0.wrapping_add(n as u32))
    }
    #[inline]
    pub fn sub(self, n: usize) -> SeqNumber {
        SeqNumber(self.0.wrapping_sub(n as u32))
    }
    /// `self - other` as a signed distance.
    #[inline]
    pub fn diff(self, other: SeqNumber) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }
    #[inline]
    pub fn lt(self, o: SeqNumber) -> bool {
        self.diff(o) < 0
    }
    #[inline]
    pub fn le(self, o: SeqNumber) -> bool {
        self.diff(o) <= 0
    }
    #[inline]
    pub fn gt(self, o: SeqNumber) -> bool {
        self.diff(o) > 0
    }
    #[inline]
    pub fn ge(self, o: SeqNumber) -> bool {
        self.diff(o) >= 0
    }
    pub fn max(self, o: SeqNumber) -> SeqNumber {
        if self.ge(o) {
            self
        } else {
            o
        }
    }
    pub fn min(self, o: SeqNumber) -> SeqNumber {
        if self.le(o) {
            self
        } else {
            o
        }
    }
}

/// Flag bits.
pub mod flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
    pub const URG: u8 = 0x20;
    /// ECN-Echo and Congestion Window Reduced (RFC 3168).
    pub const ECE: u8 = 0x40;
    pub const CWR: u8 = 0x80;
}

/// The connection-control part of a segment (at most one of SYN, FIN, RST is meaningful).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpControl {
    None,
    Syn,
    Fin,
    Rst,
}

/// A view over a TCP segment. `new_checked` guarantees that the header including options
/// fits; the payload is everything after it (the caller cuts the buffer at the IP length).
#[derive(Debug, Clone)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let off = ((b[field::DATA_OFFSET] >> 4) as usize) * 4;
        if off < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if b.len() < off {
            return Err(Error::Truncated);
        }
        Ok(TcpPacket { buffer })
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    pub fn src_port(&self) -> u16 {
        get_u16(self.b(), field::SRC_PORT.start)
    }
    pub fn dst_port(&self) -> u16 {
        get_u16(self.b(), field::DST_PORT.start)
    }
    pub fn seq_number(&self) -> SeqNumber {
        SeqNumber(get_u32(self.b(), field::SEQ_NUM.start))
    }
    pub fn ack_number(&self) -> SeqNumber {
        SeqNumber(get_u32(self.b(), field::ACK_NUM.start))
    }
    pub fn header_len(&self) -> usize {
        ((self.b()[field::DATA_OFFSET] >> 4) as usize) * 4
    }
    pub fn flags(&self) -> u8 {
        self.b()[field::FLAGS]
    }
    pub fn fin(&self) -> bool {
        self.flags() & flags::FIN != 0
    }
    pub fn syn(&self) -> bool {
        self.flags() & flags::SYN != 0
    }
    pub fn rst(&self) -> bool {
        self.flags() & flags::RST != 0
    }
    pub fn psh(&self) -> bool {
        self.flags() & flags::PSH != 0
    }
    pub fn ack(&self) -> bool {
        self.flags() & flags::ACK != 0
    }
    pub fn window_len(&self) -> u16 {
        get_u16(self.b(), field::WINDOW.start)
    }
    pub fn checksum(&self) -> u16 {
        get_u16(self.b(), field::CHECKSUM.start)
    }
    pub fn urgent_at(&self) -> u16 {
        get_u16(self.b(), field::URGENT.start)
    }
    pub fn options(&self) -> &[u8] {
        &self.b()[HEADER_LEN..self.header_len()]
    }
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..]
    }
    pub fn verify_checksum(
        &self,
        src: impl Into<IpAddress> + Copy,
        dst: impl Into<IpAddress> + Copy,
    ) -> bool {
        checksum::transport(addr(src), addr(dst), 6, self.b()) == 0
    }
    /// Whether the checksum is complete, partial (left to offload) or bad.
    pub fn checksum_state(
        &self,
        src: impl Into<IpAddress> + Copy,
        dst: impl Into<IpAddress> + Copy,
    ) -> checksum::TransportChecksum {
        checksum::classify(addr(src), addr(dst), 6, self.b(), field::CHECKSUM.start)
    }
    /// As [`TcpPacket::checksum_state`], taking a partial checksum without summing the segment
    /// (`checksum::classify_trusting_partial`): for a receiver that accepts partials.
    pub fn checksum_state_trusting_partial(
        &self,
        src: impl Into<IpAddress> + Copy,
        dst: impl Into<IpAddress> + Copy,
    ) -> checksum::TransportChecksum {
        checksum::classify_trusting_partial(
            addr(src),
            addr(dst),
            6,
            self.b(),
            field::CHECKSUM.start,
        )
    }
    /// Sequence space the segment occupies: payload plus one each for SYN and FIN.
    pub fn segment_len(&self) -> usize {
        self.payload().len() + self.syn() as usize + self.fin() as usize
    }
}

/// Parsed TCP options. Unknown options are skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpOptions {
    pub mss: Option<u16>,
    pub window_scale: Option<u8>,
    pub sack_permitted: bool,
    /// Up to four SACK blocks (left, right); `sack_count` of them are valid.
    pub sack_blocks: [(u32, u32); 4],
    pub sack_count: u8,
    /// (TSval, TSecr).
    pub timestamps: Option<(u32, u32)>,
    /// A TCP-MD5 signature (RFC 2385: kind 19, length 18) is present. Never emitted.
    pub md5_signature: bool,
    /// The walk ended at a malformed option (a length below 2 or past the end); the options
    /// before it stand. Never emitted.
    pub malformed: bool,
    /// Linux's walk for signatures (`tcp_do_parse_auth_options`, while 18 bytes or more
    /// remain) met a bad length, an MD5 option not 18 long, or a second MD5 option: a
    /// socket drops such a segment. Never emitted.
    pub auth_malformed: bool,
}

impl TcpOptions {
    /// Parses the options area as Linux's `tcp_parse_options` does: a malformed option ends
    /// the walk and what came before it stands (Linux answers such a SYN); an option with an
    /// unexpected length is ignored.
    pub fn parse(mut opts: &[u8]) -> Self {
        let mut o = TcpOptions {
            auth_malformed: auth_options_malformed(opts),
            ..TcpOptions::default()
        };
        while let Some(&kind) = opts.first() {
            match kind {
                0 => break,
                1 => {
                    opts = &opts[1..];
                    continue;
                }
                _ => {}
            }
            let len = opts.get(1).map_or(0, |&l| l as usize);
            if len < 2 || len > opts.len() {
                o.malformed = true;
                break;
            }
            o.take(kind, &opts[2..len]);
            opts = &opts[len..];
        }
        o
    }

    /// Takes one well-formed option (`body`: after kind and length).
    fn take(&mut self, kind: u8, body: &[u8]) {
        match (kind, body.len()) {
            (2, 2) => self.mss = Some(get_u16(body, 0)),
            (3, 1) => self.window_scale = Some(body[0].min(14)),
            (4, 0) => self.sack_permitted = true,
            (5, n) if n > 0 && n % 8 == 0 => {
                for blk in body.chunks_exact(8) {
                    // A second SACK option must not overflow the fixed array.
                    if let Some(slot) = self.sack_blocks.get_mut(self.sack_count as usize) {
                        *slot = (get_u32(blk, 0), get_u32(blk, 4));
                        self.sack_count += 1;
                    }
                }
            }
            (8, 8) => self.timestamps = Some((get_u32(body, 0), get_u32(body, 4))),
            (19, 16) => self.md5_signature = true,
            _ => {}
        }
    }

    /// Bytes `emit` writes (padded to a multiple of 4).
    pub fn len(&self) -> usize {
        let mut n = 0;
        if self.mss.is_some() {
            n += 4;
        }
        if self.window_scale.is_some() {
            n += 4; // NOP + 3
        }
        if self.timestamps.is_some() {
            n += if self.sack_permitted { 10 } else { 12 }; // SACK-permitted rides in the pad
        }
        if self.sack_permitted {
            n += if self.timestamps.is_some() { 2 } else { 4 };
        }
        let sacks = self
            .sack_count
            .min(if self.timestamps.is_some() { 3 } else { 4 }) as usize;
        if sacks > 0 {
            n += 4 + 8 * sacks; // NOP NOP kind len
        }
        n
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes options in the order Linux uses (aligned with NOPs); returns bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let need = self.len();
        let b = buf.get_mut(..need).ok_or(Error::Truncated)?;
        let mut i = 0;
        if let Some(mss) = self.mss {
            b[i] = 2;
            b[i + 1] = 4;
            put_u16(b, i + 2, mss);
            i += 4;
        }
        match (self.sack_permitted, self.timestamps) {
            (true, Some((val, ecr))) => {
                b[i..i + 2].copy_from_slice(&[4, 2]);
                b[i + 2] = 8;
                b[i + 3] = 10;
                put_u32(b, i + 4, val);
                put_u32(b, i + 8, ecr);
                i += 12;
            }
            (false, Some((val, ecr))) => {
                b[i..i + 4].copy_from_slice(&[1, 1, 8, 10]);
                put_u32(b, i + 4, val);
                put_u32(b, i + 8, ecr);
                i += 12;
            }
            (true, None) => {
                b[i..i + 4].copy_from_slice(&[1, 1, 4, 2]);
                i += 4;
            }
            (false, None) => {}
        }
        if let Some(ws) = self.window_scale {
            b[i..i + 4].copy_from_slice(&[1, 3, 3, ws]);
            i += 4;
        }
        let sacks = self
            .sack_count
            .min(if self.timestamps.is_some() { 3 } else { 4 }) as usize;
        if sacks > 0 {
            b[i..i + 4].copy_from_slice(&[1, 1, 5, (2 + 8 * sacks) as u8]);
            i += 4;
            for &(l, r) in &self.sack_blocks[..sacks] {
                put_u32(b, i, l);
                put_u32(b, i + 4, r);
                i += 8;
            }
        }
        Ok(i)
    }
}

/// Linux's `tcp_do_parse_auth_options` without TCP-AO: it looks only while an MD5 option
/// (18 bytes) still fits, and refuses what it cannot walk there.
fn auth_options_malformed(mut opts: &[u8]) -> bool {
    const MD5_LEN: usize = 18;
    let mut md5 = false;
    while opts.len() >= MD5_LEN {
        match opts[0] {
            0 => return false,
            1 => {
                opts = &opts[1..];
                continue;
            }
            _ => {}
        }
        let len = opts[1] as usize;
        if len < 2 || len > opts.len() {
            return true;
        }
        if opts[0] == 19 && (len != MD5_LEN || std::mem::replace(&mut md5, true)) {
            return true;
        }
        opts = &opts[len..];
    }
    false
}

/// A parsed TCP header (payload not included: take it from the packet view).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpRepr {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: SeqNumber,
    pub ack: Option<SeqNumber>,
    pub flags: u8,
    pub window: u16,
    pub options: TcpOptions,
}

impl TcpRepr {
    /// Parses the header and options, verifying the checksum over `src`/`dst`.
    pub fn parse<T: AsRef<[u8]>>(
        p: &TcpPacket<T>,
        src: impl Into<IpAddress> + Copy,
        dst: impl Into<IpAddress> + Copy,
    ) -> Result<Self> {
        if !p.verify_checksum(src, dst) {
            return Err(Error::Checksum);
        }
        Ok(Self::parse_unverified(p))
    }

    /// Parses the header and options without looking at the checksum: for a caller that
    /// judged it already ([`TcpPacket::checksum_state`]). Any flag combination and port
    /// parses: what to do with one is the receiver's rule (Linux answers SYN+FIN to a closed
    /// port with a RST).
    pub fn parse_unverified<T: AsRef<[u8]>>(p: &TcpPacket<T>) -> Self {
        TcpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            seq: p.seq_number(),
            ack: p.ack().then(|| p.ack_number()),
            flags: p.flags(),
            window: p.window_len(),
            options: TcpOptions::parse(p.options()),
        }
    }

    pub fn control(&self) -> TcpControl {
        if self.flags & flags::RST != 0 {
            TcpControl::Rst
        } else if self.flags & flags::SYN != 0 {
            TcpControl::Syn
        } else if self.flags & flags::FIN != 0 {
            TcpControl::Fin
        } else {
            TcpControl::None
        }
    }

    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.options.len()
    }

    /// Writes the header and options; the checksum field is left zero (see [`fill_checksum`]).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let hl = self.header_len();
        if hl > MAX_HEADER_LEN {
            return Err(Error::Malformed);
        }
        let b = buf.get_mut(..hl).ok_or(Error::Truncated)?;
        put_u16(b, field::SRC_PORT.start, self.src_port);
        put_u16(b, field::DST_PORT.start, self.dst_port);
        put_u32(b, field::SEQ_NUM.start, self.seq.0);
        put_u32(b, field::ACK_NUM.start, self.ack.map_or(0, |a| a.0));
        b[field::DATA_OFFSET] = ((hl / 4) as u8) << 4;
        b[field::FLAGS] = self.flags | if self.ack.is_some() { flags::ACK } else { 0 };
        put_u16(b, field::WINDOW.start, self.window);
        put_u16(b, field::CHECKSUM.start, 0);
        put_u16(b, field::URGENT.start, 0);
        self.options.emit(&mut b[HEADER_LEN..])?;
        Ok(hl)
    }
}

/// Computes and stores the checksum of a complete segment (header + payload).
pub fn fill_checksum(
    segment: &mut [u8],
    src: impl Into<IpAddress> + Copy,
    dst: impl Into<IpAddress> + Copy,
) {
    if segment.len() < HEADER_LEN {
        return;
    }
    put_u16(segment, field::CHECKSUM.start, 0);
    let c = checksum::transport(addr(src), addr(dst), 6, segment);
    put_u16(segment, field::CHECKSUM.start, c);
}

/// Stores the partial checksum of a segment whose device completes it (TX checksum offload):
/// the pseudo-header sum over its length, which the device folds the segment's bytes into
/// ([`checksum::partial`], what Linux leaves in a `CHECKSUM_PARTIAL` skb). No byte of the
/// payload is read.
pub fn fill_partial_checksum(
    segment: &mut [u8],
    src: impl Into<IpAddress> + Copy,
    dst: impl Into<IpAddress> + Copy,
) {
    if segment.len() < HEADER_LEN {
        return;
    }
    let c = checksum::partial(addr(src), addr(dst), 6, segment.len() as u16);
    put_u16(segment, field::CHECKSUM.start, c);
}

/// Where a device completes the TCP checksum of an Ethernet `frame`: (offset of the TCP header
/// in the frame, offset of the checksum field in that header), as AF_XDP TX metadata and skb
/// `csum_start`/`csum_offset` take them. Some only for TCP (behind at most one 802.1Q tag)
/// right after an IPv4 header that is not a fragment or an IPv6 header without extension
/// headers, whose header fits the frame; None for every other frame.
pub fn checksum_offload_at(frame: &[u8]) -> Option<(u16, u16)> {
    use crate::ethernet::field as eth;
    use crate::ipv4::field as ip;
    let be16 = |at: usize| {
        frame
            .get(at..at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    let (l3, ethertype) = match be16(eth::ETHERTYPE.start)? {
        0x8100 => (eth::VLAN_ETHERTYPE.end, be16(eth::VLAN_ETHERTYPE.start)?),
        t => (eth::ETHERTYPE.end, t),
    };
    let start = match ethertype {
        0x0800 => {
            let ver_ihl = *frame.get(l3 + ip::VER_IHL)?;
            let ihl = usize::from(ver_ihl & 0x0f) * 4;
            let fragment = be16(l3 + ip::FLAGS_FRAG.start)? & 0x3fff != 0;
            if ver_ihl >> 4 != 4 || ihl < 20 || *frame.get(l3 + ip::PROTOCOL)? != 6 || fragment {
                return None;
            }
            l3 + ihl
        }
        0x86dd => {
            let v6 = crate::ipv6::field::NEXT_HEADER;
            if *frame.get(l3)? >> 4 != 6 || *frame.get(l3 + v6)? != 6 {
                return None;
            }
            l3 + crate::ipv6::HEADER_LEN
        }
        _ => return None,
    };
    if frame.len() < start + HEADER_LEN {
        return None;
    }
    Some((start as u16, field::CHECKSUM.start as u16))
}

/// Completes in software the checksum a device would: folds the bytes of `frame` from
/// `start` (the field holding the partial sum included) and stores the complement at
/// `start + offset` (Linux's `skb_checksum_help`). For drivers without the offload in
/// hardware and for tests.
pub fn complete_checksum(frame: &mut [u8], start: u16, offset: u16) {
    let (start, at) = (usize::from(start), usize::from(start) + usize::from(offset));
    if at + 2 > frame.len() {
        return;
    }
    let c = !checksum::fold(checksum::accumulate(0, &frame[start..]));
    put_u16(frame, at, c);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Ipv4Addr;

    const S: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
    const D: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

    fn syn() -> TcpRepr {
        TcpRepr {
            src_port: 40000,
            dst_port: 80,
            seq: SeqNumber(0xdead_beef),
            ack: None,
            flags: flags::SYN,
            window: 65535,
            options: TcpOptions {
                mss: Some(1460),
                window_scale: Some(7),
                sack_permitted: true,
                timestamps: Some((1, 0)),
                ..Default::default()
            },
        }
    }

    #[test]
    fn roundtrip_with_all_options() {
        let mut b = [0u8; 64];
        let hl = syn().emit(&mut b).unwrap();
        assert_eq!(hl, 40); // what Linux sends for a SYN
        b[hl..hl + 3].copy_from_slice(b"abc");
        fill_checksum(&mut b[..hl + 3], S, D);
        let p = TcpPacket::new_checked(&b[..hl + 3]).unwrap();
        assert_eq!(TcpRepr::parse(&p, S, D).unwrap(), syn());
        assert_eq!(p.payload(), b"abc");
        assert_eq!(p.segment_len(), 4);
        assert_eq!(
            TcpRepr::parse(&p, D, S).map(|_| ()),
            Ok(()),
            "checksum is symmetric in src/dst"
        );
        assert_eq!(
            TcpRepr::parse(&p, D, Ipv4Addr::new(1, 2, 3, 4)).unwrap_err(),
            Error::Checksum
        );
    }

    #[test]
    fn sack_blocks() {
        for ts in [None, Some((5, 6))] {
            let mut o = TcpOptions {
                timestamps: ts,
                ..Default::default()
            };
            o.sack_blocks = [(1, 2), (3, 4), (5, 6), (7, 8)];
            o.sack_count = 4;
            let mut b = [0u8; 40];
            let n = o.emit(&mut b).unwrap();
            assert_eq!(n, o.len());
            assert_eq!(n % 4, 0);
            let p = TcpOptions::parse(&b[..n]);
            let want = if ts.is_some() { 3 } else { 4 };
            assert_eq!(p.sack_count, want);
            assert_eq!(
                &p.sack_blocks[..want as usize],
                &o.sack_blocks[..want as usize]
            );
            assert_eq!(p.timestamps, ts);
        }
    }

    #[test]
    fn malformed_options_end_the_walk_and_keep_what_came_before() {
        let malformed = TcpOptions {
            malformed: true,
            ..Default::default()
        };
        // Length 1, length past the end, a lone kind byte: nothing before them.
        assert_eq!(TcpOptions::parse(&[2, 1]), malformed);
        assert_eq!(TcpOptions::parse(&[2, 9, 0, 0]), malformed);
        assert_eq!(TcpOptions::parse(&[8]), malformed);
        // MSS, then an unknown option of length 255 and a window scale cut short: the MSS
        // stands (Linux answers such a SYN with its MSS taken).
        let mss = TcpOptions {
            mss: Some(1400),
            malformed: true,
            ..Default::default()
        };
        assert_eq!(TcpOptions::parse(&[2, 4, 5, 120, 99, 255, 0, 0]), mss);
        assert_eq!(TcpOptions::parse(&[2, 4, 5, 120, 1, 3, 3]), mss);
        assert!(!TcpOptions::parse(&[2, 4, 5, 120, 0, 0]).malformed);
        // EOL ends the walk; a well-formed option of the wrong length is ignored.
        assert_eq!(TcpOptions::parse(&[1, 1, 0, 99]), TcpOptions::default());
        assert_eq!(TcpOptions::parse(&[2, 3, 0]), TcpOptions::default());
        let mut md5 = vec![1u8, 1, 19, 18];
        md5.extend_from_slice(&[0; 16]);
        assert!(TcpOptions::parse(&md5).md5_signature);
        assert!(!TcpOptions::parse(&[19, 4, 0, 0]).md5_signature);
        // Linux's signature walk looks only while 18 bytes remain: a bad length there (or an
        // MD5 option of another length) is refused; a short area is not walked.
        let mut long = vec![99u8, 255];
        long.extend_from_slice(&[1; 18]);
        assert!(TcpOptions::parse(&long).auth_malformed);
        assert!(!TcpOptions::parse(&[99, 255, 1, 1]).auth_malformed);
        let mut md5_short = vec![19u8, 4, 0, 0];
        md5_short.extend_from_slice(&[1; 16]);
        assert!(TcpOptions::parse(&md5_short).auth_malformed);
        assert!(!TcpOptions::parse(&md5).auth_malformed);
        let mut two_sacks = vec![5u8, 34];
        two_sacks.extend_from_slice(&[0; 32]);
        two_sacks.extend_from_slice(&[5, 34]);
        two_sacks.extend_from_slice(&[0; 32]);
        assert_eq!(TcpOptions::parse(&two_sacks).sack_count, 4);
    }

    #[test]
    fn malformed_headers() {
        let mut b = [0u8; 20];
        b[12] = 0x40;
        assert_eq!(
            TcpPacket::new_checked(&b[..]).unwrap_err(),
            Error::Malformed
        );
        b[12] = 0x60;
        assert_eq!(
            TcpPacket::new_checked(&b[..]).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn seq_wraps() {
        let a = SeqNumber(u32::MAX - 10);
        let b = a.add(20);
        assert!(a.lt(b) && b.gt(a));
        assert_eq!(b.diff(a), 20);
        assert_eq!(b.sub(20), a);
        assert_eq!(a.max(b), b);
    }

    /// An Ethernet + IPv4 + TCP frame (header only, then `payload`), optionally 802.1Q-tagged.
    fn tcp_frame(vlan: bool, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let total = (20 + HEADER_LEN + payload.len()) as u16;
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[6] = 0x40; // DF: not a fragment
        ip[9] = 6;
        ip[12..16].copy_from_slice(&S.0);
        ip[16..20].copy_from_slice(&D.0);
        f.extend_from_slice(&ip);
        let mut th = [0u8; HEADER_LEN];
        th[12] = 0x50;
        th[13] = flags::ACK | flags::PSH;
        f.extend_from_slice(&th);
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn a_partial_checksum_completed_as_a_device_would_equals_the_full_one() {
        // Odd and even payload lengths: the device sums an odd tail as a padded word.
        for len in [0usize, 1, 511, 512, 8948] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            for vlan in [false, true] {
                let mut full = tcp_frame(vlan, &payload);
                let l4 = if vlan { 38 } else { 34 };
                fill_checksum(&mut full[l4..], S, D);
                let mut partial = tcp_frame(vlan, &payload);
                fill_partial_checksum(&mut partial[l4..], S, D);
                assert_ne!(
                    partial, full,
                    "len {len}: the partial sum is not the checksum"
                );
                let (start, offset) = checksum_offload_at(&partial).expect("an IPv4 TCP frame");
                assert_eq!((usize::from(start), offset), (l4, 16));
                complete_checksum(&mut partial, start, offset);
                assert_eq!(partial, full, "len {len} vlan {vlan}");
                let seg = TcpPacket::new_checked(&full[l4..]).unwrap();
                assert!(seg.verify_checksum(S, D));
            }
        }
    }

    #[test]
    fn only_unfragmented_ipv4_tcp_frames_are_offloaded() {
        let tcp = tcp_frame(false, b"x");
        assert_eq!(checksum_offload_at(&tcp), Some((34, 16)));
        let altered = |at: usize, bytes: &[u8]| {
            let mut f = tcp.clone();
            f[at..at + bytes.len()].copy_from_slice(bytes);
            checksum_offload_at(&f)
        };
        assert_eq!(altered(23, &[17]), None, "UDP");
        assert_eq!(altered(20, &[0x20]), None, "more fragments");
        assert_eq!(altered(21, &[0x01]), None, "a later fragment");
        assert_eq!(altered(12, &[0x08, 0x06]), None, "ARP");
        assert_eq!(altered(14, &[0x65]), None, "IP version 6");
        assert_eq!(altered(14, &[0x44]), None, "IHL below 5");
        let mut options = tcp.clone();
        options[14] = 0x46;
        options.splice(34..34, [1u8, 1, 1, 0]);
        assert_eq!(checksum_offload_at(&options), Some((38, 16)));
        // Truncated anywhere: never a location past the end.
        for cut in 0..54 {
            assert_eq!(checksum_offload_at(&tcp[..cut]), None, "cut at {cut}");
        }
        let mut vlan_arp = tcp_frame(true, b"");
        vlan_arp[16..18].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(checksum_offload_at(&vlan_arp), None);
    }

    #[test]
    fn ipv6_tcp_without_extension_headers_is_offloaded() {
        // Ethernet, a fixed IPv6 header (next header TCP), a 20-byte TCP header.
        let mut f = vec![0u8; 14 + 40 + 20];
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        f[14] = 0x60;
        f[14 + 6] = 6;
        assert_eq!(checksum_offload_at(&f), Some((54, 16)));
        f[14 + 6] = 0; // hop-by-hop first: not where the device would look
        assert_eq!(checksum_offload_at(&f), None);
        f[14 + 6] = 6;
        assert_eq!(checksum_offload_at(&f[..70]), None, "truncated TCP header");
        f[14] = 0x40;
        assert_eq!(
            checksum_offload_at(&f),
            None,
            "version 4 under the IPv6 ethertype"
        );
    }
}
