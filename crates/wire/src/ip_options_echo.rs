//! The IPv4 options of an answer, as Linux makes them: the receive path records the host in a
//! record-route or timestamp option (`__ip_options_compile` with the datagram), the answer
//! copies both options, in that order, with room claimed for one more entry
//! (`__ip_options_echo`), and every datagram sent with them fills that entry in
//! (`ip_options_build`). Linux answers this way with its SYN-ACK and the connection that
//! follows (the socket keeps the options), its RSTs and ACKs outside a connection, and its
//! echo and timestamp replies. RFC 1122 3.2.2.6 asks it of echo replies.
//!
//! Other options are not echoed; source routes and CIPSO never get here (the receive path
//! drops them first, `ip_options::check`), so this module sees only well-formed options.

use crate::ip_options::kind;
use crate::ipv4::Ipv4Addr;

/// Timestamp flags (RFC 791): timestamps only, address and timestamp, prespecified addresses.
const TS_ONLY: u8 = 0;
const TS_AND_ADDR: u8 = 1;
const TS_PRESPEC: u8 = 3;
/// The options area of an IPv4 header, at most.
pub const MAX_LEN: usize = 40;

/// The host answering: whether an address is one of its own or not a unicast address
/// elsewhere decides whether a prespecified timestamp entry is its to fill (Linux asks
/// `inet_addr_type` for anything but `RTN_UNICAST`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Host {
    pub addr: Ipv4Addr,
    /// The subnet's broadcast address, when the subnet has one.
    pub broadcast: Option<Ipv4Addr>,
}

impl Host {
    /// Linux's `inet_addr_type(addr) != RTN_UNICAST`: local, loopback, zero network,
    /// broadcast or multicast.
    fn takes_prespecified(&self, a: Ipv4Addr) -> bool {
        a == self.addr
            || Some(a) == self.broadcast
            || a.0[0] == 0
            || a.0[0] == 127
            || a == Ipv4Addr::BROADCAST
            || a.is_multicast()
    }
}

/// The options to put in answers: the bytes (a multiple of 4) and where each transmit writes
/// the host's address and the time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EchoedOptions {
    bytes: [u8; MAX_LEN],
    len: u8,
    addr_slots: [Option<u8>; 2],
    time_slot: Option<u8>,
}

impl Default for EchoedOptions {
    fn default() -> Self {
        EchoedOptions::NONE
    }
}

/// Why no answer may carry the options: an entry would not fit where its pointer says
/// (`__ip_options_echo` returns -EINVAL). Linux then sends no echo reply, timestamp reply,
/// RST or ACK, and a SYN-ACK without options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EchoRefused;

impl EchoedOptions {
    /// Nothing to echo.
    pub const NONE: EchoedOptions = EchoedOptions {
        bytes: [0; MAX_LEN],
        len: 0,
        addr_slots: [None; 2],
        time_slot: None,
    };

    /// The options of an answer to a datagram whose options area is `opts` (already
    /// accepted by `ip_options::check`), received by `host` at `ms` (milliseconds since
    /// midnight UTC, RFC 791's timestamp).
    pub fn of(opts: &[u8], host: Host, ms: u32) -> Result<EchoedOptions, EchoRefused> {
        let (mut rr, mut ts) = (None, None);
        let mut at = 0;
        while at + 1 < opts.len() {
            match opts[at] {
                kind::END => break,
                kind::NOP => at += 1,
                k => {
                    let len = (opts[at + 1] as usize).clamp(2, opts.len() - at);
                    let o = &opts[at..at + len];
                    match k {
                        kind::RECORD_ROUTE if rr.is_none() => rr = Some(o),
                        kind::TIMESTAMP if ts.is_none() => ts = Some(o),
                        _ => {}
                    }
                    at += len;
                }
            }
        }
        let mut out = EchoedOptions::NONE;
        if let Some(o) = rr {
            out.push_record_route(o, host)?;
        }
        if let Some(o) = ts {
            out.push_timestamp(o, host, ms)?;
        }
        // Padded to a whole word with END (kind 0), as `__ip_options_echo` pads.
        out.len = (out.len + 3) & !3;
        Ok(out)
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes the options into `buf` (at least `len()` bytes) with `addr`, our source
    /// address, and `ms`, the time now, in the entries each transmit fills.
    pub fn write(&self, buf: &mut [u8], addr: Ipv4Addr, ms: u32) {
        let n = self.len();
        let Some(b) = buf.get_mut(..n) else { return };
        b.copy_from_slice(&self.bytes[..n]);
        for at in self.addr_slots.iter().flatten() {
            put(b, *at as usize, addr.0);
        }
        if let Some(at) = self.time_slot {
            put(b, at as usize, ms.to_be_bytes());
        }
    }

    /// Copies option `o` into the answer; returns its offset there.
    fn copy(&mut self, o: &[u8]) -> usize {
        let at = self.len as usize;
        self.bytes[at..at + o.len()].copy_from_slice(o);
        self.len += o.len() as u8;
        at
    }

    /// Record route: the receiver's entry, then one claimed for the answer if there is room.
    fn push_record_route(&mut self, o: &[u8], host: Host) -> Result<(), EchoRefused> {
        let at = self.copy(o);
        let len = o.len();
        let d = &mut self.bytes[at..at + len];
        let ptr = d[2] as usize;
        if ptr > len {
            return Ok(());
        }
        put(d, ptr - 1, host.addr.0);
        let ptr = ptr + 4;
        d[2] = ptr as u8;
        if ptr <= len {
            if ptr + 3 > len {
                return Err(EchoRefused);
            }
            d[2] = (ptr + 4) as u8;
            self.addr_slots[0] = Some((at + ptr - 1) as u8);
        }
        Ok(())
    }

    /// Timestamp: the receiver's entry (by the option's flag), then one claimed for the
    /// answer if there is room; a full option counts one more overflow.
    fn push_timestamp(&mut self, o: &[u8], host: Host, ms: u32) -> Result<(), EchoRefused> {
        let at = self.copy(o);
        let len = o.len();
        let d = &mut self.bytes[at..at + len];
        let flag = d[3] & 0xf;
        let ptr = d[2] as usize;
        if ptr > len {
            if flag != TS_PRESPEC {
                // `check` refused an overflow count already at 15.
                d[3] = (d[3] & 0xf) | ((d[3] >> 4) + 1) << 4;
            }
            return Ok(());
        }
        let (need_addr, need_time, ptr) = match flag {
            TS_ONLY => {
                put(d, ptr - 1, ms.to_be_bytes());
                (false, true, ptr + 4)
            }
            TS_AND_ADDR => {
                put(d, ptr - 1, host.addr.0);
                put(d, ptr + 3, ms.to_be_bytes());
                (true, true, ptr + 8)
            }
            TS_PRESPEC if host.takes_prespecified(addr_at(d, ptr - 1)) => {
                put(d, ptr + 3, ms.to_be_bytes());
                (false, true, ptr + 8)
            }
            _ => (false, false, ptr),
        };
        d[2] = ptr as u8;
        if ptr > len {
            return Ok(());
        }
        let mut next = ptr;
        if need_addr {
            if next + 3 > len {
                return Err(EchoRefused);
            }
            self.addr_slots[1] = Some((at + next - 1) as u8);
            next += 4;
        }
        if need_time {
            if next + 3 > len {
                return Err(EchoRefused);
            }
            if flag != TS_PRESPEC {
                self.time_slot = Some((at + next - 1) as u8);
                next += 4;
            } else if next + 7 <= len && host.takes_prespecified(addr_at(d, next - 1)) {
                self.time_slot = Some((at + next + 3) as u8);
                next += 8;
            }
        }
        d[2] = next as u8;
        Ok(())
    }
}

fn put(b: &mut [u8], at: usize, v: [u8; 4]) {
    if let Some(s) = b.get_mut(at..at + 4) {
        s.copy_from_slice(&v);
    }
}

fn addr_at(b: &[u8], at: usize) -> Ipv4Addr {
    let mut a = [0; 4];
    if let Some(s) = b.get(at..at + 4) {
        a.copy_from_slice(s);
    }
    Ipv4Addr(a)
}

/// Milliseconds since midnight UTC at `unix_ms` milliseconds since the epoch (RFC 791's
/// timestamp, Linux's `inet_current_timestamp`).
pub fn ms_since_midnight(unix_ms: u64) -> u32 {
    (unix_ms % 86_400_000) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Ipv4Addr = Ipv4Addr([198, 18, 0, 2]);
    const HOST: Host = Host {
        addr: US,
        broadcast: Some(Ipv4Addr([198, 18, 0, 255])),
    };
    const T: u32 = 0x0102_0304;

    fn echo(opts: &[u8]) -> Result<Vec<u8>, EchoRefused> {
        let e = EchoedOptions::of(opts, HOST, T)?;
        let mut b = vec![0xee; e.len()];
        e.write(&mut b, US, 0x0a0b_0c0d);
        Ok(b)
    }

    #[test]
    fn record_route_gets_our_address_twice() {
        // Room for three: the receiver's entry, then the answer's.
        let rr = [7, 15, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let e = echo(&rr).unwrap();
        assert_eq!(e, [7, 15, 12, 198, 18, 0, 2, 198, 18, 0, 2, 0, 0, 0, 0, 0]);
        // Room for the receiver's entry only: copied as it stands then.
        assert_eq!(
            echo(&[7, 7, 4, 0, 0, 0, 0, 0]).unwrap(),
            [7, 7, 8, 198, 18, 0, 2, 0]
        );
        // Already full: copied unchanged.
        assert_eq!(
            echo(&[7, 7, 8, 9, 9, 9, 9, 0]).unwrap(),
            [7, 7, 8, 9, 9, 9, 9, 0]
        );
        // Room for a part of a second entry only: Linux refuses to answer.
        assert_eq!(
            echo(&[7, 9, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
            Err(EchoRefused)
        );
    }

    #[test]
    fn timestamps_are_filled_by_flag() {
        // Timestamps only, room for two: the receive time, then the send time.
        let ts = [68, 12, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            echo(&ts).unwrap(),
            [68, 12, 13, 0, 1, 2, 3, 4, 0x0a, 0x0b, 0x0c, 0x0d]
        );
        // Address and timestamp, room for one pair: only the receiver's.
        let ta = [68, 12, 5, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            echo(&ta).unwrap(),
            [68, 12, 13, 1, 198, 18, 0, 2, 1, 2, 3, 4]
        );
        // Full: the overflow count goes up by one.
        assert_eq!(
            echo(&[68, 8, 9, 0x20, 5, 5, 5, 5]).unwrap(),
            [68, 8, 9, 0x30, 5, 5, 5, 5]
        );
        // Prespecified: our address gets the time, another unicast address does not.
        let pre = [
            68, 20, 5, 3, 198, 18, 0, 2, 0, 0, 0, 0, 10, 0, 0, 1, 0, 0, 0, 0,
        ];
        let e = echo(&pre).unwrap();
        assert_eq!(
            &e[..20],
            &[68, 20, 13, 3, 198, 18, 0, 2, 1, 2, 3, 4, 10, 0, 0, 1, 0, 0, 0, 0]
        );
        let other = [68, 12, 5, 3, 10, 0, 0, 1, 0, 0, 0, 0];
        assert_eq!(echo(&other).unwrap(), other);
    }

    #[test]
    fn both_options_in_order_and_padded() {
        // Timestamp first on the wire, a NOP between: the answer has record route first.
        let opts = [68, 8, 5, 0, 0, 0, 0, 0, 1, 7, 7, 4, 0, 0, 0, 0, 0, 0, 0, 0];
        let e = echo(&opts).unwrap();
        assert_eq!(e.len(), 16);
        assert_eq!(&e[..7], &[7, 7, 8, 198, 18, 0, 2]);
        assert_eq!(&e[7..15], &[68, 8, 9, 0, 1, 2, 3, 4]);
        assert_eq!(e[15], 0);
        // Router alert and unknown options are not echoed.
        assert!(EchoedOptions::of(&[148, 4, 0, 0], HOST, T)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn milliseconds_since_midnight() {
        assert_eq!(ms_since_midnight(86_400_000 * 3 + 1234), 1234);
    }
}
