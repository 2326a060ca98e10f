//! Congestion control: how far the congestion window opens on ACKs and how it closes on
//! loss. Loss *detection* (duplicate ACKs, SACK, RTO, probes) lives in `ack.rs`, `timers.rs`
//! and `output.rs`; they report each event here.
//!
//! This file holds what every algorithm shares: the events ([`CongestionControl`]), the
//! algorithms' names, slow start and fast recovery's window arithmetic. The algorithms, each
//! chosen per stack by [`crate::Config::congestion_control`] and named as Linux's
//! `net.ipv4.tcp_congestion_control` names them: `reno` (NewReno, RFC 5681 and RFC 6582,
//! `newreno.rs`) and `cubic` (RFC 9438, `cubic.rs`; Linux's default and ours). A connection
//! holds its algorithm by value in `controller::Congestion`, an enum of the implementations,
//! so every call is a `match` and a static call: no dynamic dispatch per segment, no
//! allocation. Fast recovery's window inflation and deflation (RFC 6582 3.2) belong to the
//! loss-recovery machinery, not to an algorithm: both use [`recovery`]'s rules and differ
//! only in how far they reduce and how they grow (docs/TCPIP.md, "Congestion control").

use crate::Instant;

/// The events a congestion controller reacts to. Sizes are bytes; `mss` is the sender's.
pub(crate) trait CongestionControl {
    /// Congestion window: most bytes in flight.
    fn cwnd(&self) -> u32;
    /// Slow-start threshold.
    fn ssthresh(&self) -> u32;
    /// The handshake completed: the initial window.
    fn on_established(&mut self, mss: u32);
    /// New data acknowledged outside recovery, at `now`, with the smoothed RTT `srtt_us`
    /// (0 before the first sample).
    fn on_ack(&mut self, acked: u32, mss: u32, now: Instant, srtt_us: u32);
    /// Three duplicate ACKs: fast retransmit, entering recovery with `flight` in flight.
    fn on_fast_retransmit(&mut self, flight: u32, mss: u32);
    /// A further duplicate ACK (or an ACK that found no hole to repair) during recovery.
    fn on_recovery_dupack(&mut self, mss: u32);
    /// An ACK inside recovery that covers `acked` bytes but not all that was outstanding.
    fn on_partial_ack(&mut self, acked: u32, mss: u32);
    /// The ACK that ends recovery.
    fn on_recovery_end(&mut self, mss: u32);
    /// The retransmission timer expired with `flight` in flight.
    fn on_rto(&mut self, flight: u32, mss: u32);
    /// The peer echoed a congestion mark (ECE) with `flight` in flight: at most once per
    /// window (the caller's rule).
    fn on_ecn_echo(&mut self, flight: u32, mss: u32);
}

/// Which algorithm a stack's connections use, by Linux's names for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CongestionAlgorithm {
    /// NewReno (RFC 5681, RFC 6582): Linux's `reno`.
    Reno,
    /// CUBIC (RFC 9438): Linux's `cubic`, its default since 2.6.19.
    #[default]
    Cubic,
}

impl CongestionAlgorithm {
    /// Every algorithm, in the order tools list them.
    pub const ALL: [CongestionAlgorithm; 2] =
        [CongestionAlgorithm::Reno, CongestionAlgorithm::Cubic];

    /// Linux's name (`net.ipv4.tcp_congestion_control`).
    pub const fn name(self) -> &'static str {
        match self {
            CongestionAlgorithm::Reno => "reno",
            CongestionAlgorithm::Cubic => "cubic",
        }
    }
}

impl core::fmt::Display for CongestionAlgorithm {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not one of [`CongestionAlgorithm::ALL`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownCongestionAlgorithm(pub String);

impl core::fmt::Display for UnknownCongestionAlgorithm {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "unknown congestion control {:?}: use reno or cubic (Linux's names)",
            self.0
        )
    }
}

impl std::error::Error for UnknownCongestionAlgorithm {}

impl core::str::FromStr for CongestionAlgorithm {
    type Err = UnknownCongestionAlgorithm;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CongestionAlgorithm::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| UnknownCongestionAlgorithm(s.to_string()))
    }
}

/// RFC 6928 initial window: 10 segments (capped to 14600 bytes' worth for large MSS).
pub(super) fn initial_cwnd(mss: u32) -> u32 {
    (10 * mss).min((4 * mss).max(14600))
}

/// Slow start (RFC 5681 3.1, with RFC 3465's L = 1 segment): the window grows by what an
/// ACK acknowledged, at most one segment.
#[inline]
pub(super) fn slow_start(cwnd: u32, acked: u32, mss: u32) -> u32 {
    cwnd.saturating_add(acked.min(mss))
}

/// Fast recovery's window arithmetic (RFC 6582 3.2), shared by every algorithm: only the
/// `ssthresh` each one chose differs.
pub(super) mod recovery {
    /// Step 2: the window on entering recovery, inflated by the three segments that left
    /// the network (the duplicate ACKs).
    pub(crate) fn enter(ssthresh: u32, mss: u32) -> u32 {
        ssthresh.saturating_add(3 * mss)
    }

    /// Step 4: each further duplicate ACK inflates by one segment.
    pub(crate) fn dupack(cwnd: u32, mss: u32) -> u32 {
        cwnd.saturating_add(mss)
    }

    /// Step 5: a partial ACK deflates by what it acknowledged and adds back one segment.
    pub(crate) fn partial_ack(cwnd: u32, acked: u32, mss: u32) -> u32 {
        cwnd.saturating_sub(acked).saturating_add(mss).max(mss)
    }

    /// Step 3, option 2: the full ACK sets the window to ssthresh, as Linux's
    /// tcp_end_cwnd_reduction does. Option 1 (the flight plus one segment, when less) left
    /// one or two segments after a recovery that sent little new data, and each lone segment
    /// then waited out the peer's delayed ACK (docs/TCPIP.md, "Loss recovery").
    pub(crate) fn exit(ssthresh: u32, mss: u32) -> u32 {
        ssthresh.max(mss)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithms_are_named_as_linux_names_them() {
        assert_eq!("reno".parse(), Ok(CongestionAlgorithm::Reno));
        assert_eq!("cubic".parse(), Ok(CongestionAlgorithm::Cubic));
        let err = "bbr".parse::<CongestionAlgorithm>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown congestion control \"bbr\": use reno or cubic (Linux's names)"
        );
        assert_eq!(CongestionAlgorithm::default(), CongestionAlgorithm::Cubic);
        for a in CongestionAlgorithm::ALL {
            assert_eq!(a.to_string().parse(), Ok(a));
        }
    }
}
