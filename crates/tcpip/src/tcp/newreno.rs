//! NewReno (RFC 5681, RFC 6582): Linux's `reno`. Slow start, one segment per window of ACKs
//! in congestion avoidance, half the flight on a loss.

use super::congestion::{initial_cwnd, recovery, slow_start, CongestionControl};
use crate::Instant;

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

/// RFC 5681 3.1 eq. 4: half of what was in flight, at least two segments.
fn half_flight(flight: u32, mss: u32) -> u32 {
    (flight / 2).max(2 * mss)
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
    fn on_ack(&mut self, acked: u32, mss: u32, _now: Instant, _srtt_us: u32) {
        if self.cwnd < self.ssthresh {
            self.cwnd = slow_start(self.cwnd, acked, mss);
        } else {
            // RFC 5681 3.1 eq. 3: about one segment per window of ACKs.
            let step = (mss as u64 * mss as u64) / self.cwnd.max(1) as u64;
            self.cwnd = self.cwnd.saturating_add(step.max(1) as u32);
        }
    }

    fn on_fast_retransmit(&mut self, flight: u32, mss: u32) {
        self.ssthresh = half_flight(flight, mss);
        self.cwnd = recovery::enter(self.ssthresh, mss);
    }

    fn on_recovery_dupack(&mut self, mss: u32) {
        self.cwnd = recovery::dupack(self.cwnd, mss);
    }

    fn on_partial_ack(&mut self, acked: u32, mss: u32) {
        self.cwnd = recovery::partial_ack(self.cwnd, acked, mss);
    }

    fn on_recovery_end(&mut self, mss: u32) {
        self.cwnd = recovery::exit(self.ssthresh, mss);
    }

    fn on_rto(&mut self, flight: u32, mss: u32) {
        // The window restarts at one segment.
        self.ssthresh = half_flight(flight, mss);
        self.cwnd = mss;
    }

    fn on_ecn_echo(&mut self, flight: u32, mss: u32) {
        // RFC 3168 6.1.2: as for a loss, without the retransmission or window inflation.
        self.ssthresh = half_flight(flight, mss);
        self.cwnd = self.ssthresh;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newreno_halves_on_loss_and_grows_a_segment_per_window() {
        let mss = 1000;
        let mut r = NewReno::new();
        r.on_established(mss);
        assert_eq!(r.cwnd(), 10_000);
        r.on_fast_retransmit(100_000, mss);
        assert_eq!((r.ssthresh(), r.cwnd()), (50_000, 53_000));
        r.on_recovery_end(mss);
        assert_eq!(r.cwnd(), 50_000);
        // One window of one-segment ACKs: about one segment more.
        for _ in 0..50 {
            r.on_ack(mss, mss, Instant::ZERO, 0);
        }
        assert!((50_900..=51_000).contains(&r.cwnd()), "{}", r.cwnd());
        r.on_rto(40_000, mss);
        assert_eq!((r.ssthresh(), r.cwnd()), (20_000, 1000));
    }
}
