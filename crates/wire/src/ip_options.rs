//! IPv4 options (RFC 791) judged as Linux's receive path judges them: the walk of
//! `__ip_options_compile` (net/ipv4/ip_options.c), then `ip_rcv_options`, which drops a
//! source-routed datagram unless `accept_source_route` is on for "all" and the device (off
//! for "all" by default). A malformed option is answered with ICMP parameter problem, its
//! pointer at the offending byte (offsets from the start of the IP header).
//!
//! Only the checks matter here: the stack never forwards, so Linux's rewrites of record route
//! and timestamp options (for the copy it forwards or echoes) have no counterpart.

/// Option kinds (RFC 791, RFC 1108, RFC 2113).
pub mod kind {
    pub const END: u8 = 0;
    pub const NOP: u8 = 1;
    pub const SECURITY: u8 = 130;
    pub const LSRR: u8 = 131;
    pub const TIMESTAMP: u8 = 68;
    pub const CIPSO: u8 = 134;
    pub const RECORD_ROUTE: u8 = 7;
    pub const STREAM_ID: u8 = 136;
    pub const SSRR: u8 = 137;
    pub const ROUTER_ALERT: u8 = 148;
}

/// Timestamp option flags (RFC 791): the low nibble of its fourth byte (0: timestamps only;
/// other values are taken as they come, as Linux takes them from the wire).
const TS_AND_ADDR: u8 = 1;
const TS_PRESPEC: u8 = 3;

/// What the receive path does with a datagram's options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Well-formed and not source-routed: deliver.
    Accept,
    /// Loose or strict source routing: dropped silently (`accept_source_route` off).
    SourceRouted,
    /// Malformed: dropped with an ICMP parameter problem whose pointer is this offset from
    /// the start of the IP header.
    ParameterProblem(u8),
}

/// Judges the options area `opts` (the bytes after the 20-byte fixed header).
pub fn check(opts: &[u8]) -> Verdict {
    let mut seen = Seen::default();
    let mut at = 0;
    while at < opts.len() {
        match opts[at] {
            kind::END => break,
            kind::NOP => {
                at += 1;
                continue;
            }
            _ => {}
        }
        let left = opts.len() - at;
        // A lone kind byte, a length below 2 or one past the area (Linux checks `l < 2`).
        let len = if left < 2 { 0 } else { opts[at + 1] as usize };
        if len < 2 || len > left {
            return problem(at, 0);
        }
        if let Err(off) = seen.option(&opts[at..at + len]) {
            return problem(at, off);
        }
        at += len;
    }
    if seen.source_route {
        Verdict::SourceRouted
    } else {
        Verdict::Accept
    }
}

/// The pointer of a parameter problem at byte `off` of the option at `at`.
fn problem(at: usize, off: usize) -> Verdict {
    Verdict::ParameterProblem((crate::ipv4::HEADER_LEN + at + off) as u8)
}

/// The options met so far: each may appear once.
#[derive(Default)]
struct Seen {
    source_route: bool,
    record_route: bool,
    timestamp: bool,
    cipso: bool,
}

impl Seen {
    /// Checks one option (`o`: kind, length, body); Err: the offending byte's offset in it.
    fn option(&mut self, o: &[u8]) -> Result<(), usize> {
        match o[0] {
            kind::LSRR | kind::SSRR => {
                pointer_at_least(o, 4)?;
                // RFC 1812 5.2.4.1: one source route per datagram.
                once(&mut self.source_route)
            }
            kind::RECORD_ROUTE => {
                once(&mut self.record_route)?;
                pointer_at_least(o, 4)?;
                route_slot(o, 3)
            }
            kind::TIMESTAMP => {
                once(&mut self.timestamp)?;
                timestamp(o)
            }
            kind::ROUTER_ALERT if o.len() < 4 => Err(1),
            // No CIPSO domain of interpretation is configured: Linux's cipso_v4_validate
            // refuses every one (at the DOI field, or at the length when it is short).
            kind::CIPSO => {
                once(&mut self.cipso)?;
                Err(if o.len() < 8 { 1 } else { 2 })
            }
            _ => Ok(()),
        }
    }
}

fn once(seen: &mut bool) -> Result<(), usize> {
    if std::mem::replace(seen, true) {
        return Err(0);
    }
    Ok(())
}

/// The option's pointer (its third byte) must exist and be at least `min`.
fn pointer_at_least(o: &[u8], min: u8) -> Result<(), usize> {
    match o.get(2) {
        None => Err(1),
        Some(&p) if p < min => Err(2),
        Some(_) => Ok(()),
    }
}

/// Where the pointer is inside the option, the slot it points at (`need` more bytes after
/// it) must fit.
fn route_slot(o: &[u8], need: usize) -> Result<(), usize> {
    let ptr = o[2] as usize;
    if ptr <= o.len() && ptr + need > o.len() {
        return Err(2);
    }
    Ok(())
}

fn timestamp(o: &[u8]) -> Result<(), usize> {
    if o.len() < 4 {
        return Err(1);
    }
    if o[2] < 5 {
        return Err(2);
    }
    let ptr = o[2] as usize;
    if ptr <= o.len() {
        route_slot(o, 3)?;
        if matches!(o[3] & 0xf, TS_AND_ADDR | TS_PRESPEC) {
            route_slot(o, 7)?;
        }
        return Ok(());
    }
    // Full: the overflow count (high nibble) must not be at its maximum already.
    if o[3] >> 4 == 15 && o[3] & 0xf != TS_PRESPEC {
        return Err(3);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_formed_options_are_accepted() {
        assert_eq!(check(&[]), Verdict::Accept);
        assert_eq!(check(&[1, 1, 1, 0]), Verdict::Accept);
        // Record route with room for one address, pointer at it.
        assert_eq!(check(&[7, 7, 4, 0, 0, 0, 0, 0]), Verdict::Accept);
        // Full record route (pointer past the end) is fine too.
        assert_eq!(check(&[7, 7, 8, 0, 0, 0, 0, 0]), Verdict::Accept);
        // Timestamp, timestamps only, room for one.
        assert_eq!(check(&[68, 8, 5, 0, 0, 0, 0, 0]), Verdict::Accept);
        assert_eq!(check(&[148, 4, 0, 0]), Verdict::Accept);
        // An unknown option is skipped; END stops the walk whatever follows.
        assert_eq!(check(&[30, 2, 0, 99]), Verdict::Accept);
    }

    #[test]
    fn source_routes_are_dropped() {
        assert_eq!(check(&[131, 7, 4, 1, 2, 3, 4, 0]), Verdict::SourceRouted);
        assert_eq!(check(&[1, 137, 7, 4, 1, 2, 3, 4]), Verdict::SourceRouted);
        // Two source routes are malformed (pointer at the second).
        let two = [131, 7, 4, 1, 2, 3, 4, 131, 7, 4, 1, 2, 3, 4, 0, 0];
        assert_eq!(check(&two), Verdict::ParameterProblem(27));
    }

    #[test]
    fn malformed_lengths_point_at_the_option() {
        // Length 0, length 1, length past the area, a lone kind byte at the end.
        assert_eq!(check(&[7, 0, 0, 0]), Verdict::ParameterProblem(20));
        assert_eq!(check(&[1, 7, 1, 0]), Verdict::ParameterProblem(21));
        assert_eq!(check(&[7, 40, 4, 0]), Verdict::ParameterProblem(20));
        assert_eq!(check(&[1, 1, 1, 7]), Verdict::ParameterProblem(23));
    }

    #[test]
    fn bad_pointers_point_at_the_pointer() {
        assert_eq!(
            check(&[7, 7, 3, 0, 0, 0, 0, 0]),
            Verdict::ParameterProblem(22)
        );
        assert_eq!(check(&[7, 2, 1, 0]), Verdict::ParameterProblem(21));
        // Pointer inside, but its slot runs past the option.
        assert_eq!(
            check(&[7, 7, 6, 0, 0, 0, 0, 0]),
            Verdict::ParameterProblem(22)
        );
        assert_eq!(
            check(&[68, 8, 4, 0, 0, 0, 0, 0]),
            Verdict::ParameterProblem(22)
        );
        assert_eq!(
            check(&[68, 8, 5, 1, 0, 0, 0, 0]),
            Verdict::ParameterProblem(22)
        );
        // A full timestamp option whose overflow count is at 15.
        assert_eq!(
            check(&[68, 8, 9, 0xf0, 0, 0, 0, 0]),
            Verdict::ParameterProblem(23)
        );
        assert_eq!(check(&[148, 3, 0, 0]), Verdict::ParameterProblem(21));
        assert_eq!(
            check(&[134, 8, 0, 0, 0, 1, 0, 0]),
            Verdict::ParameterProblem(22)
        );
        let twice = [7, 3, 4, 7, 3, 4, 0, 0];
        assert_eq!(check(&twice), Verdict::ParameterProblem(23));
    }
}
