//! The controller a connection holds (`Tcb::cc`): an enum of the implementations, chosen by
//! [`crate::Config::congestion_control`]. Each trait call is a `match` and a static call, so
//! a second algorithm cost no dynamic dispatch per segment.

use super::congestion::{CongestionAlgorithm, CongestionControl};
use super::cubic::Cubic;
use super::newreno::NewReno;
use crate::Instant;

/// A connection's congestion controller: one of the implementations, held by value.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Congestion {
    Reno(NewReno),
    Cubic(Cubic),
}

impl Congestion {
    pub(crate) fn new(algorithm: CongestionAlgorithm) -> Congestion {
        match algorithm {
            CongestionAlgorithm::Reno => Congestion::Reno(NewReno::new()),
            CongestionAlgorithm::Cubic => Congestion::Cubic(Cubic::new()),
        }
    }

    pub(crate) fn algorithm(&self) -> CongestionAlgorithm {
        match self {
            Congestion::Reno(_) => CongestionAlgorithm::Reno,
            Congestion::Cubic(_) => CongestionAlgorithm::Cubic,
        }
    }
}

/// Forwards a trait call to the implementation the enum holds.
macro_rules! dispatch {
    ($self:ident, $cc:ident => $call:expr) => {
        match $self {
            Congestion::Reno($cc) => $call,
            Congestion::Cubic($cc) => $call,
        }
    };
}

impl CongestionControl for Congestion {
    #[inline]
    fn cwnd(&self) -> u32 {
        dispatch!(self, c => c.cwnd())
    }
    #[inline]
    fn ssthresh(&self) -> u32 {
        dispatch!(self, c => c.ssthresh())
    }
    fn on_established(&mut self, mss: u32) {
        dispatch!(self, c => c.on_established(mss))
    }
    #[inline]
    fn on_ack(&mut self, acked: u32, mss: u32, now: Instant, srtt_us: u32) {
        dispatch!(self, c => c.on_ack(acked, mss, now, srtt_us))
    }
    fn on_fast_retransmit(&mut self, flight: u32, mss: u32) {
        dispatch!(self, c => c.on_fast_retransmit(flight, mss))
    }
    fn on_recovery_dupack(&mut self, mss: u32) {
        dispatch!(self, c => c.on_recovery_dupack(mss))
    }
    fn on_partial_ack(&mut self, acked: u32, mss: u32) {
        dispatch!(self, c => c.on_partial_ack(acked, mss))
    }
    fn on_recovery_end(&mut self, mss: u32) {
        dispatch!(self, c => c.on_recovery_end(mss))
    }
    fn on_rto(&mut self, flight: u32, mss: u32) {
        dispatch!(self, c => c.on_rto(flight, mss))
    }
    fn on_ecn_echo(&mut self, flight: u32, mss: u32) {
        dispatch!(self, c => c.on_ecn_echo(flight, mss))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_algorithm_builds_its_own_controller() {
        for a in CongestionAlgorithm::ALL {
            assert_eq!(Congestion::new(a).algorithm(), a);
        }
    }
}
