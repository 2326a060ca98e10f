//! ICMP: echo and timestamp replies (with the request's record-route and timestamp options
//! echoed, as Linux's `icmp_reply` does), and the errors the receive path sends (parameter
//! problem for a malformed IP option, port and protocol unreachable), under Linux's two
//! limits for them: the host's budget, and each destination's.

use std::collections::HashMap;

use crate::util::FlowHashBuilder;
use crate::{wall_clock_ms, Instant, Stack};
use wirespeed_wire::icmpv4::error_type;
use wirespeed_wire::ip_options_echo::{self, EchoRefused, EchoedOptions};
use wirespeed_wire::{
    ipv4, EtherType, Icmpv4Error, Icmpv4Packet, Icmpv4Repr, IpProtocol, Ipv4Addr, Ipv4Repr, MacAddr,
};

/// Destination unreachable codes the stack sends (RFC 792).
pub(crate) mod unreachable {
    pub const PROTOCOL: u8 = 2;
    pub const PORT: u8 = 3;
}

/// Destination unreachable, fragmentation needed and DF set (RFC 792, RFC 1191).
const FRAG_NEEDED: u8 = 4;

/// Linux's `icmp_msgs_per_sec` and `icmp_msgs_burst`: ICMP errors the host sends, at most.
const ERRORS_PER_SEC: u64 = 1000;
const ERRORS_BURST: u64 = 50;
/// ICMP errors go with precedence "internetwork control" (Linux `icmp_send`:
/// IPTOS_PREC_INTERNETCONTROL).
const ERROR_TOS: u8 = 0xc0;
/// An error quotes the offending datagram up to a 576-byte message (RFC 1812 4.3.2.3; Linux
/// `icmp_send`).
const MAX_ERROR_MESSAGE: usize = 576;

/// The token bucket of ICMP errors (Linux's `icmp_global_allow`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ErrorBudget {
    credit: u64,
    stamp: Instant,
}

impl Default for ErrorBudget {
    fn default() -> Self {
        ErrorBudget {
            credit: ERRORS_BURST,
            stamp: Instant::ZERO,
        }
    }
}

impl ErrorBudget {
    /// Whether an error may be sent now (credit earned since the last call is added first).
    /// The credit is taken by [`ErrorBudget::consume`] once the destination's limit allows
    /// it too, as Linux 6.18's `icmp_global_allow` and `icmp_global_consume` do.
    pub(crate) fn has_credit(&mut self, now: Instant) -> bool {
        let earned = now.micros().saturating_sub(self.stamp.micros()) * ERRORS_PER_SEC / 1_000_000;
        if earned > 0 {
            self.credit = (self.credit + earned).min(ERRORS_BURST);
            self.stamp = now;
        }
        self.credit > 0
    }

    pub(crate) fn consume(&mut self) {
        self.credit = self.credit.saturating_sub(1);
    }

    /// Takes one error's credit if there is one.
    #[cfg(test)]
    fn allow(&mut self, now: Instant) -> bool {
        let ok = self.has_credit(now);
        if ok {
            self.consume();
        }
        ok
    }
}

/// How many errors' worth of time a destination's bucket holds: Linux's `XRLIM_BURST_FACTOR`.
const PEER_BURST: u64 = 6;
/// Destinations whose buckets are kept. One left alone for [`PEER_BURST`] intervals has a
/// full bucket, as a new one does, so only those that got errors in the last few seconds
/// need an entry; past this many, a new one goes unlimited (but for the host's budget), as
/// in Linux when no `inet_peer` can be had.
const PEERS_KEPT: usize = 4096;
/// The least time between two sweeps of a full table.
const PEER_SWEEP_GAP_US: u64 = 100_000;

/// Each destination's limit of ICMP errors (Linux's `inet_peer_xrlim_allow`): an error costs
/// `interval` of the destination's tokens, which grow with time up to [`PEER_BURST`] errors'
/// worth; a new destination starts full. So six at once, then one per interval.
pub(crate) struct PeerLimits {
    peers: HashMap<crate::IpAddress, Peer, FlowHashBuilder>,
    next_sweep: Instant,
}

#[derive(Debug, Clone, Copy)]
struct Peer {
    tokens_us: u64,
    last: Instant,
}

impl PeerLimits {
    pub(crate) fn new(seed: u64) -> PeerLimits {
        PeerLimits {
            peers: HashMap::with_hasher(FlowHashBuilder { seed }),
            next_sweep: Instant::ZERO,
        }
    }

    /// Takes an error to `dst` from its bucket if it holds `interval_us` of tokens.
    pub(crate) fn allow(&mut self, dst: crate::IpAddress, interval_us: u64, now: Instant) -> bool {
        let full = PEER_BURST * interval_us;
        if self.peers.len() >= PEERS_KEPT && !self.peers.contains_key(&dst) {
            if now >= self.next_sweep {
                self.next_sweep = now.add_micros(PEER_SWEEP_GAP_US);
                self.peers
                    .retain(|_, p| now.micros().saturating_sub(p.last.micros()) < full);
            }
            if self.peers.len() >= PEERS_KEPT {
                return true;
            }
        }
        let p = self.peers.entry(dst).or_insert(Peer {
            tokens_us: full,
            last: now,
        });
        let tokens = (p.tokens_us + now.micros().saturating_sub(p.last.micros())).min(full);
        p.last = now;
        let ok = tokens >= interval_us;
        p.tokens_us = if ok { tokens - interval_us } else { tokens };
        ok
    }
}

/// Linux's `icmp_ratelimit` (1000 ms): an IPv4 destination's interval between errors.
pub(crate) const PEER_INTERVAL_US: u64 = 1_000_000;

impl Stack {
    /// Whether an ICMP error to `dst` may go: the host's budget has credit and `dst`'s
    /// bucket holds `interval_us` (taken from both then), as Linux's `icmp_send` and
    /// `icmp6_send` ask. Counted by which limit refused it.
    pub(crate) fn icmp_error_allowed(&mut self, dst: crate::IpAddress, interval_us: u64) -> bool {
        let now = self.now;
        if !self.icmp_budget.has_credit(now) {
            self.stats.icmp_rate_limited += 1;
            return false;
        }
        if !self.icmp_peer_limits.allow(dst, interval_us, now) {
            self.stats.icmp_rate_limited_host += 1;
            return false;
        }
        self.icmp_budget.consume();
        true
    }
}

impl Stack {
    /// ICMP input; `opts` are the options an answer carries (the request's, echoed).
    pub(crate) fn icmp_input(
        &mut self,
        src_mac: MacAddr,
        ip: &Ipv4Repr,
        opts: Result<EchoedOptions, EchoRefused>,
        data: &[u8],
    ) {
        let pkt = match Icmpv4Packet::new_checked(data) {
            Ok(p) => p,
            Err(_) => {
                self.stats.icmp_malformed += 1;
                return;
            }
        };
        if (pkt.msg_type(), pkt.code()) == (error_type::DEST_UNREACHABLE, FRAG_NEEDED) {
            if !pkt.verify_checksum() {
                self.stats.icmp_bad_checksum += 1;
                return;
            }
            let mtu = u16::from_be_bytes([data[6], data[7]]);
            return self.frag_needed_input(mtu, pkt.data());
        }
        let reply = match Icmpv4Repr::parse(&pkt) {
            Ok(Icmpv4Repr::EchoRequest {
                code,
                ident,
                seq_no,
                data,
            }) => Icmpv4Repr::EchoReply {
                code,
                ident,
                seq_no,
                data,
            },
            Ok(Icmpv4Repr::TimestampRequest {
                ident,
                seq_no,
                originate,
            }) => {
                let now = wall_clock_ms();
                Icmpv4Repr::TimestampReply {
                    ident,
                    seq_no,
                    originate,
                    receive: now,
                    transmit: now,
                }
            }
            Ok(Icmpv4Repr::EchoReply { .. } | Icmpv4Repr::TimestampReply { .. }) => {
                self.stats.icmp_unsupported += 1;
                return;
            }
            Err(wirespeed_wire::Error::Checksum) => {
                self.stats.icmp_bad_checksum += 1;
                return;
            }
            Err(wirespeed_wire::Error::Truncated) => {
                self.stats.icmp_malformed += 1;
                return;
            }
            Err(_) => {
                self.stats.icmp_unsupported += 1;
                return;
            }
        };
        let Ok(opts) = opts else {
            self.stats.ip_options_unechoable += 1;
            return;
        };
        // Linux's reply keeps the request's TOS byte, ECN bits included.
        let tos = ip.dscp_ecn;
        let ok = self.queue_icmp(src_mac, ip.src, tos, &opts, reply.buffer_len(), |b| {
            reply.emit(b).is_ok()
        });
        if ok {
            match reply {
                Icmpv4Repr::TimestampReply { .. } => self.stats.icmp_timestamp_replies += 1,
                _ => self.stats.icmp_echo_replies += 1,
            }
        }
    }

    /// The options of an answer to a datagram whose options area is `opts`: its record
    /// route and timestamp, echoed with our entries (docs/TCPIP.md, "IP options").
    pub(crate) fn echo_options(&self, opts: &[u8]) -> Result<EchoedOptions, EchoRefused> {
        if opts.is_empty() {
            return Ok(EchoedOptions::NONE);
        }
        let host = ip_options_echo::Host {
            addr: self.cfg.ipv4,
            broadcast: self.subnet_broadcast(),
        };
        EchoedOptions::of(opts, host, wall_clock_ms())
    }

    /// Answers the datagram `dgram` (IP header first, as received) from `src_mac` with an
    /// ICMP error. As Linux's `icmp_send`: never about an ICMP error or a later fragment,
    /// and within the global budget.
    pub(crate) fn send_icmp_error(
        &mut self,
        src_mac: MacAddr,
        ip: &Ipv4Repr,
        dgram: &[u8],
        msg_type: u8,
        code: u8,
        word: u32,
    ) {
        if about_an_error_or_later_fragment(ip, dgram) {
            return;
        }
        if !self.icmp_error_allowed(ip.src.into(), PEER_INTERVAL_US) {
            return;
        }
        // `icmp_send` echoes the datagram's options too, except those it could not parse.
        let hl = ipv4::Ipv4Packet::new_checked(dgram).map_or(ipv4::HEADER_LEN, |p| p.header_len());
        let opts = if msg_type == error_type::PARAMETER_PROBLEM {
            Ok(EchoedOptions::NONE)
        } else {
            self.echo_options(&dgram[ipv4::HEADER_LEN..hl])
        };
        let Ok(opts) = opts else {
            self.stats.ip_options_unechoable += 1;
            return;
        };
        let room =
            MAX_ERROR_MESSAGE - ipv4::HEADER_LEN - opts.len() - wirespeed_wire::icmpv4::HEADER_LEN;
        let err = Icmpv4Error {
            msg_type,
            code,
            word,
            quoted: &dgram[..dgram.len().min(room)],
        };
        let tos = ERROR_TOS;
        if self.queue_icmp(src_mac, ip.src, tos, &opts, err.buffer_len(), |b| {
            err.emit(b).is_ok()
        }) {
            self.stats.icmp_errors_sent += 1;
        }
    }

    /// Destination unreachable (`code`: `unreachable::PORT`, `PROTOCOL`) about `dgram`.
    pub(crate) fn send_unreachable(
        &mut self,
        src_mac: MacAddr,
        ip: &Ipv4Repr,
        dgram: &[u8],
        code: u8,
    ) {
        self.send_icmp_error(src_mac, ip, dgram, error_type::DEST_UNREACHABLE, code, 0);
    }

    /// Queues an ICMP message of `len` bytes (written by `emit`) to `dst` at `mac`, with DS
    /// field `tos`, IP options `opts` and without DF, as Linux's ICMP socket sends it (no
    /// PMTU discovery).
    fn queue_icmp(
        &mut self,
        mac: MacAddr,
        dst: Ipv4Addr,
        tos: u8,
        opts: &EchoedOptions,
        len: usize,
        emit: impl FnOnce(&mut [u8]) -> bool,
    ) -> bool {
        self.ip_ident = self.ip_ident.wrapping_add(1);
        let ip_out = Ipv4Repr {
            src: self.cfg.ipv4,
            dst,
            protocol: IpProtocol::Icmp,
            payload_len: len,
            ttl: 64,
            ident: self.ip_ident,
            dont_frag: false,
            dscp_ecn: tos,
        };
        let eth = self.eth_repr(mac, EtherType::Ipv4);
        let mut o = [0u8; ip_options_echo::MAX_LEN];
        if !opts.is_empty() {
            opts.write(&mut o, self.cfg.ipv4, wall_clock_ms());
        }
        let o = &o[..opts.len()];
        let ok = self.ctrl.push_with(dst.into(), |buf| {
            let e = eth.header_len();
            let hl = ipv4::HEADER_LEN + o.len();
            let need = e + hl + len;
            if buf.len() < need {
                return 0;
            }
            let _ = eth.emit(buf);
            let _ = ip_out.emit_with_options(&mut buf[e..], o);
            if !emit(&mut buf[e + hl..need]) {
                return 0;
            }
            need
        });
        if !ok {
            self.stats.ctrl_queue_full += 1;
        }
        ok
    }
}

/// Whether `dgram` is itself an ICMP error, or a fragment other than the first (RFC 1122
/// 3.2.2: no error about either).
fn about_an_error_or_later_fragment(ip: &Ipv4Repr, dgram: &[u8]) -> bool {
    let Ok(pkt) = ipv4::Ipv4Packet::new_checked(dgram) else {
        return true;
    };
    if pkt.frag_offset() != 0 {
        return true;
    }
    ip.protocol == IpProtocol::Icmp
        && pkt.payload().first().is_some_and(|&t| {
            matches!(
                t,
                error_type::DEST_UNREACHABLE
                    | error_type::SOURCE_QUENCH
                    | error_type::REDIRECT
                    | error_type::TIME_EXCEEDED
                    | error_type::PARAMETER_PROBLEM
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_allows_a_burst_then_the_rate() {
        let mut b = ErrorBudget::default();
        let t0 = Instant::from_millis(1000);
        assert_eq!((0..60).filter(|_| b.allow(t0)).count(), 50);
        // 10 ms later: 10 more credits at 1000 per second.
        let t1 = Instant::from_millis(1010);
        assert_eq!((0..60).filter(|_| b.allow(t1)).count(), 10);
    }

    #[test]
    fn a_full_table_of_destinations_forgets_the_idle_and_lets_new_ones_through() {
        let mut p = PeerLimits::new(1);
        let t0 = Instant::from_millis(1000);
        let dst = |i: usize| crate::IpAddress::V4(Ipv4Addr::from_u32(0xc612_0000 + i as u32));
        for i in 0..PEERS_KEPT {
            assert!(p.allow(dst(i), PEER_INTERVAL_US, t0));
        }
        // Full of destinations that just had an error: a new one is not limited (Linux with
        // no inet_peer to be had), and gets no entry.
        let new = dst(PEERS_KEPT);
        assert!((0..10).all(|_| p.allow(new, PEER_INTERVAL_US, t0)));
        assert_eq!(p.peers.len(), PEERS_KEPT);
        // Six intervals on, every bucket is full again: the sweep forgets them all.
        let t1 = t0.add_micros(PEER_BURST * PEER_INTERVAL_US);
        assert_eq!(
            (0..10)
                .filter(|_| p.allow(new, PEER_INTERVAL_US, t1))
                .count(),
            6
        );
        assert_eq!(p.peers.len(), 1);
    }
}
