//! Congestion control: how far the congestion window opens on ACKs and how it closes on
//! loss. Loss *detection* (duplicate ACKs, SACK, RTO, probes) lives in `ack.rs`, `timers.rs`
//! and `output.rs`; they report each event here.
//!
//! A connection holds its algorithm by value (`Tcb::cc`), so every call is static: no
//! dynamic dispatch per segment. NewReno (RFC 5681, RFC 6582) is the only one today; a
//! second (CUBIC) would make `Tcb::cc` an enum of the implementations.

/// The events a congestion controller reacts to. Sizes are bytes; `mss` is the sender's.
pub(crate) trait CongestionControl {
    /// Congestion window: most bytes in flight.
    fn cwnd(&self) -> u32;
    /// Slow-start threshold.
    fn ssthresh(&self) -> u32;
    /// The handshake completed: the initial window.
    fn on_established(&mut self, mss: u32);
    /// New data acknowledged outside recovery.
    fn on_ack(&mut self, acked: u32, mss: u32);
    /// Three duplicate ACKs: fast retransmit, entering recovery with `flight` in flight.
    fn on_fast_retransmit(&mut self, flight: u32, mss: u32);
    /// A further duplicate ACK (or an ACK that found no hole to repair) during recovery.
    fn on_recovery_dupack(&mut self, mss: u32);
    /// An ACK inside recovery that covers `acked` bytes but not all that was outstanding.
    fn on_partial_ack(&mut self, acked: u32, mss: u32);
    /// The ACK that ends recovery, with `flight` still in flight.
    fn on_recovery_end(&mut self, flight: u32, mss: u32);
    /// The retransmission timer expired with `flight` in flight.
    fn on_rto(&mut self, flight: u32, mss: u32);
    /// The peer echoed a congestion mark (ECE) with `flight` in flight: at most once per
    /// window (the caller's rule).
    fn on_ecn_echo(&mut self, flight: u32, mss: u32);
}

/// NewReno: slow start, congestion avoidance, and fast recovery with window inflation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewReno {
    cwnd: u32,
    ssthresh: u32,
}

impl NewReno {
    pub(crate) const fn new() -> NewReno {
        NewReno {
            cwnd: 0,
            ssthresh: u32::MAX,
        }
    }
}

/// RFC 6928 initial window: 10 segments (capped to 14600 bytes' worth for large MSS).
fn initial_cwnd(mss: u32) -> u32 {
    (10 * mss).min((4 * mss).max(14600))
}

impl CongestionControl for NewReno {
    #[inline]
    fn cwnd(&self) -> u32 {
        self.cwnd
    }

    #[inline]
    fn ssthresh(&self) -> u32 {
        self.ssthresh
    }

    fn on_established(&mut self, mss: u32) {
        self.cwnd = initial_cwnd(mss);
    }

    #[inline]
    fn on_ack(&mut self, acked: u32, mss: u32) {
        if self.cwnd < self.ssthresh {
            self.cwnd = self.cwnd.saturating_add(acked.min(mss));
        } else {
            self.cwnd =
                self.cwnd.saturating_add(
                    ((mss as u64 * mss as u64) / self.cwnd.max(1) as u64).max(1) as u32,
                );
        }
    }

    fn on_fast_retransmit(&mut self, flight: u32, mss: u32) {
        // RFC 6582 3.2 step 2.
        self.ssthresh = (flight / 2).max(2 * mss);
        self.cwnd = self.ssthresh + 3 * mss;
    }

    fn on_recovery_dupack(&mut self, mss: u32) {
        self.cwnd = self.cwnd.saturating_add(mss);
    }

    fn on_partial_ack(&mut self, acked: u32, mss: u32) {
        // Deflate by what was acknowledged, add back one segment (RFC 6582 3.2 step 5).
        self.cwnd = self.cwnd.saturating_sub(acked).saturating_add(mss).max(mss);
    }

    fn on_recovery_end(&mut self, flight: u32, mss: u32) {
        // RFC 6582 3.2 step 3, option 2.
        self.cwnd = self.ssthresh.min(flight + mss).max(mss);
    }

    fn on_rto(&mut self, flight: u32, mss: u32) {
        // RFC 5681 3.1 eq. 4; the window restarts at one segment.
        self.ssthresh = (flight / 2).max(2 * mss);
        self.cwnd = mss;
    }

    fn on_ecn_echo(&mut self, flight: u32, mss: u32) {
        // RFC 3168 6.1.2: as for a loss, without the retransmission or window inflation.
        self.ssthresh = (flight / 2).max(2 * mss);
        self.cwnd = self.ssthresh;
    }
}
