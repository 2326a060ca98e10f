//! Round-trip time estimation (RFC 6298) and the timeouts derived from it.

use super::Tcb;
use wirespeed_wire::SeqNumber;

impl Tcb {
    pub(crate) fn update_rtt(&mut self, sample_us: u32, min_rto: u32, max_rto: u32) {
        let r = sample_us.max(1);
        if self.srtt == 0 {
            self.srtt = r;
            self.rttvar = r / 2;
        } else {
            let delta = self.srtt.abs_diff(r);
            self.rttvar = (3 * (self.rttvar as u64) / 4 + delta as u64 / 4) as u32;
            self.srtt = (7 * (self.srtt as u64) / 8 + r as u64 / 8) as u32;
        }
        let rto = self.srtt as u64 + (4 * self.rttvar as u64).max(1000);
        self.rto = rto.clamp(min_rto as u64, max_rto as u64) as u32;
    }

    /// The probe timeout: two smoothed RTTs, at least 10 ms as in Linux, so that a peer's
    /// delayed ACK (up to 40 ms on Linux, 5 ms here) rarely looks like a loss; never past
    /// the RTO.
    pub(crate) fn pto_us(&self) -> u64 {
        (2 * self.srtt as u64).max(10_000).min(self.rto as u64)
    }
}

/// Karn's rule (RFC 6298 3), widened: an ACK for a retransmitted segment cannot tell which
/// copy it answers, and the cumulative ACK past the timed segment waits for any earlier hole
/// to be repaired, so retransmitting the timed segment or anything before it cancels the
/// measurement. Without this a sample spans the whole loss recovery; a larger RTT then slows
/// the next recovery, whose sample is larger still (a smoothed RTT of 1.5 s was seen on a
/// sub-millisecond lab link under 1% loss).
pub(super) fn karn(t: &mut Tcb, seq: SeqNumber) {
    if t.rtt_active && seq.le(t.rtt_seq) {
        t.rtt_active = false;
    }
}
