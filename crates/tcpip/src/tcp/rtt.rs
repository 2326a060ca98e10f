//! Round-trip time estimation (RFC 6298) and the timeouts derived from it.

use super::Tcb;
use crate::Instant;
use wirespeed_wire::SeqNumber;

/// The probe timeout's allowance with several segments in flight (Linux's TCP_TIMEOUT_MIN).
const PTO_SLACK_US: u64 = 2_000;
/// The probe timeout before any RTT sample (Linux's TCP_TIMEOUT_INIT).
const PTO_NO_RTT_US: u64 = 1_000_000;

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

    /// The tail loss probe's timeout at `now`, as Linux's tcp_schedule_loss_probe (RFC 8985
    /// 7.2): two smoothed RTTs, plus the peer's delayed ACK (up to the minimum RTO) when one
    /// segment is all that is unacknowledged, else 2 ms; 1 s before any RTT sample. Never
    /// past the RTO, so the probe takes the RTO's place rather than following it.
    pub(crate) fn pto_us(&self, now: Instant, min_rto_us: u64) -> u64 {
        let pto = if self.srtt == 0 {
            PTO_NO_RTT_US
        } else if self.one_segment_out() {
            2 * self.srtt as u64 + min_rto_us
        } else {
            2 * self.srtt as u64 + PTO_SLACK_US
        };
        match self.rto_at.micros().checked_sub(now.micros()) {
            Some(left) if left > 0 => pto.min(left),
            _ => pto,
        }
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
