//! CUBIC congestion control (RFC 9438), Linux's default and the stack's.
//!
//! What is here, by RFC 9438 section:
//!
//! - 4.2 the window function `W_cubic(t) = C·(t − K)³ + W_max` with `C = 0.4` and
//!   `K = ∛((W_max − cwnd_epoch)/C)`. `t` is wall-clock time since the start of the current
//!   congestion-avoidance stage (`t_epoch`), taken from the `now` the stack's caller passes
//!   to every input (the stack reads no clock). The epoch starts at the first ACK in
//!   congestion avoidance after a congestion event (or after slow start ends), as Linux's
//!   `bictcp_update` starts it, so recovery's duration does not count. Each ACK moves cwnd
//!   by `(target − cwnd)/cwnd` segments per segment acknowledged, towards
//!   `target = W_cubic(t + RTT)` clamped to `[cwnd, 1.5·cwnd]`, RTT being the smoothed RTT.
//! - 4.3 the Reno-friendly region: `W_est` grows by `α·acked/cwnd` with
//!   `α = 3(1 − β)/(1 + β)`, and by 1 once it reaches the window before the last reduction
//!   (`cwnd_prior`); while `W_cubic(t) < W_est` the window follows `W_est`. On short paths
//!   (the lab's tens of microseconds) this is the region a connection lives in.
//! - 4.4 and 4.5 the concave and convex regions: the same function either side of K.
//! - 4.6 multiplicative decrease with `β = 0.7`: `ssthresh = flight·β` (at least two
//!   segments), as the RFC writes it with the flight size; `W_max` and `cwnd_prior` take
//!   cwnd.
//! - 4.7 fast convergence: a loss below the last `W_max` lowers `W_max` to `cwnd·(1 + β)/2`.
//! - 4.8 a timeout: cwnd restarts at one segment (RFC 5681), ssthresh as in 4.6, and the next
//!   stage's curve starts with `K = 0` and `W_max` = the window where that stage begins.
//! - 4.10 slow start is RFC 5681's (no HyStart++).
//!
//! Not here: 4.9's undo of a spurious reduction (the stack does not detect spurious
//! retransmissions), and the RFC's advice not to grow cwnd while the sender is application-
//! limited (NewReno here grows the same way). Fast recovery's inflation and deflation are
//! RFC 6582's, shared with NewReno (`congestion::recovery`).
//!
//! The arithmetic is floating point in segments, the RFC's units, so each line reads as its
//! formula: one cube per ACK and one cube root per stage. Linux uses fixed point only
//! because its kernel avoids the FPU. Time is the caller's clock in milliseconds.

use super::congestion::{initial_cwnd, recovery, slow_start, CongestionControl};
use crate::Instant;

/// RFC 9438 4.1: the scaling constant C, segments per second³.
const C: f64 = 0.4;
/// RFC 9438 4.1: the multiplicative decrease factor β_cubic.
const BETA: f64 = 0.7;
/// RFC 9438 4.3: α_cubic, Reno-friendly growth per RTT while below `cwnd_prior`.
const ALPHA: f64 = 3.0 * (1.0 - BETA) / (1.0 + BETA);

/// RFC 9438 4.2 Figure 1: the window (segments) `t` seconds into the stage.
pub(super) fn w_cubic(t: f64, k: f64, w_max: f64) -> f64 {
    C * (t - k).powi(3) + w_max
}

/// RFC 9438 4.2 Figure 2: seconds until the curve returns to `w_max` from `cwnd_epoch`.
pub(super) fn k_seconds(w_max: f64, cwnd_epoch: f64) -> f64 {
    ((w_max - cwnd_epoch) / C).cbrt()
}

/// `Cubic::origin_ms` while no congestion-avoidance stage has begun.
const NO_EPOCH: u32 = u32::MAX;

/// One connection's CUBIC state: 28 bytes, so that a `Tcb` stays within six cache lines
/// (`tests::frames::connection_state_stays_compact`). Windows are segments in `f32` (seven
/// digits: a tenth of a byte at 10⁵ segments); cwnd and ssthresh stay bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cubic {
    cwnd: u32,
    ssthresh: u32,
    /// W_max, segments: the window at the last congestion event (after fast convergence);
    /// 0 after a timeout (4.8).
    w_max: f32,
    /// cwnd_prior, segments: the window just before the last reduction.
    cwnd_prior: f32,
    /// `t_epoch + K`, when the curve of the current stage reaches W_max, in milliseconds of
    /// the caller's clock, wrapping: `t − K` is then one subtraction (a stage may last 24
    /// days). `NO_EPOCH` until the stage's first ACK.
    origin_ms: u32,
    /// W_est, segments: the Reno-friendly estimate for the current stage.
    w_est: f32,
    /// Growth (bytes) not yet whole, carried to the next ACK: at large windows an ACK's share
    /// of a segment's growth is under a byte.
    carry: f32,
}

/// The caller's clock in wrapping milliseconds.
fn ms_of(now: Instant) -> u32 {
    now.millis() as u32
}

impl Cubic {
    pub(crate) const fn new() -> Cubic {
        Cubic {
            cwnd: 0,
            ssthresh: u32::MAX,
            w_max: 0.0,
            cwnd_prior: 0.0,
            origin_ms: NO_EPOCH,
            w_est: 0.0,
            carry: 0.0,
        }
    }

    /// 4.2: a new stage begins at `now` with the window `cwnd` (segments).
    fn start_epoch(&mut self, now: Instant, cwnd: f64) {
        let k = if f64::from(self.w_max) > cwnd {
            k_seconds(f64::from(self.w_max), cwnd)
        } else {
            // No reduction to climb back from (the first stage, or after a timeout, 4.8):
            // the curve starts here, convex.
            self.w_max = cwnd as f32;
            0.0
        };
        let origin = ms_of(now).wrapping_add((k * 1e3).round() as u32);
        self.origin_ms = origin.min(NO_EPOCH - 1);
        self.w_est = cwnd as f32;
        self.carry = 0.0;
    }

    /// `t − K` in seconds: negative before the curve reaches W_max (concave), positive after.
    fn since_origin(&self, now: Instant) -> f64 {
        f64::from(ms_of(now).wrapping_sub(self.origin_ms) as i32) / 1e3
    }

    /// 4.2 and 4.3: the window (segments) after `segs_acked` more, with `t − K` =
    /// `since_origin` seconds and the smoothed RTT `rtt` seconds.
    fn next_window(&mut self, cwnd: f64, segs_acked: f64, since_origin: f64, rtt: f64) -> f64 {
        // W_cubic(t) = C·(t − K)³ + W_max, written with t − K at hand (K = 0 below).
        let (t, k, w_max) = (since_origin, 0.0, f64::from(self.w_max));
        let alpha = if self.w_est >= self.cwnd_prior {
            1.0
        } else {
            ALPHA
        };
        let w_est = f64::from(self.w_est) + alpha * segs_acked / cwnd;
        self.w_est = w_est as f32;
        if w_cubic(t, k, w_max) < w_est {
            // Reno-friendly region: never below where the window already is.
            return w_est.max(cwnd);
        }
        let target = w_cubic(t + rtt, k, w_max).clamp(cwnd, 1.5 * cwnd);
        cwnd + (target - cwnd) * segs_acked / cwnd
    }

    fn congestion_avoidance(&mut self, acked: u32, mss: u32, now: Instant, srtt_us: u32) {
        let mss_f = f64::from(mss);
        let cwnd = f64::from(self.cwnd) / mss_f;
        if self.origin_ms == NO_EPOCH {
            self.start_epoch(now, cwnd);
        }
        let rtt = f64::from(srtt_us) / 1e6;
        let since_origin = self.since_origin(now);
        let next = self.next_window(cwnd, f64::from(acked) / mss_f, since_origin, rtt);
        let grow = (next - cwnd) * mss_f + f64::from(self.carry);
        let whole = grow.floor();
        self.carry = (grow - whole) as f32;
        self.cwnd = self.cwnd.saturating_add(whole as u32);
    }

    /// 4.6 and 4.7: a congestion event with `flight` bytes outstanding.
    fn reduce(&mut self, flight: u32, mss: u32) {
        let cwnd = self.cwnd as f32 / mss as f32;
        self.w_max = if cwnd < self.w_max {
            cwnd * (1.0 + BETA as f32) / 2.0
        } else {
            cwnd
        };
        self.cwnd_prior = cwnd;
        self.ssthresh = ((f64::from(flight) * BETA) as u32).max(2 * mss);
        self.origin_ms = NO_EPOCH;
    }
}

impl CongestionControl for Cubic {
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
    fn on_ack(&mut self, acked: u32, mss: u32, now: Instant, srtt_us: u32) {
        if self.cwnd < self.ssthresh {
            self.cwnd = slow_start(self.cwnd, acked, mss);
        } else {
            self.congestion_avoidance(acked, mss, now, srtt_us);
        }
    }

    fn on_fast_retransmit(&mut self, flight: u32, mss: u32) {
        self.reduce(flight, mss);
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
        // 4.8: Reno's one segment, ssthresh by β, and the next curve starts with K = 0.
        self.reduce(flight, mss);
        self.w_max = 0.0;
        self.cwnd = mss;
    }

    fn on_ecn_echo(&mut self, flight: u32, mss: u32) {
        // 4.6: an ECN echo is a congestion event without a retransmission.
        self.reduce(flight, mss);
        self.cwnd = self.ssthresh;
    }
}

#[cfg(test)]
mod tests {
    //! Expected values are RFC 9438's formulas worked by hand for W_max = 100 segments and
    //! β = 0.7 (cwnd_epoch = 70): K = ∛(30/0.4) = ∛75 = 4.2172 s; W_cubic(2.0) = 95.640,
    //! W_cubic(6.2) = 100 + 0.4·1.9828³ = 103.118; α = 0.9/1.7 = 0.52941.
    use super::*;

    const MSS: u32 = 1000;
    const SEG: f64 = MSS as f64;

    /// A connection that ran at 100 segments and lost one: recovery is over, cwnd 70.
    fn after_loss_at_100() -> Cubic {
        let mut c = Cubic::new();
        c.on_established(MSS);
        c.cwnd = 100 * MSS;
        c.ssthresh = 50 * MSS;
        c.on_fast_retransmit(100 * MSS, MSS);
        assert_eq!(c.ssthresh(), 70 * MSS, "4.6: flight × 0.7");
        assert_eq!(c.cwnd(), 73 * MSS, "RFC 6582 inflation by three segments");
        c.on_recovery_end(MSS);
        assert_eq!(c.cwnd(), 70 * MSS);
        c
    }

    /// `rounds` round trips of `rtt_us` from `start`: each acknowledges one window, one
    /// segment per ACK. Returns the time of the last round.
    fn ack_rounds(c: &mut Cubic, start: Instant, rtt_us: u64, rounds: u64) -> Instant {
        let mut now = start;
        for r in 0..rounds {
            now = start.add_micros(r * rtt_us);
            for _ in 0..c.cwnd() / MSS {
                c.on_ack(MSS, MSS, now, rtt_us as u32);
            }
        }
        now
    }

    fn segments(c: &Cubic) -> f64 {
        f64::from(c.cwnd()) / SEG
    }

    #[test]
    fn the_window_function_matches_rfc_9438_worked_by_hand() {
        let k = k_seconds(100.0, 70.0);
        assert!((k - 4.2172).abs() < 1e-4, "K = {k}");
        for (t, want) in [
            (0.0, 70.0),
            (1.0, 86.681),
            (2.0, 95.640),
            (k, 100.0),
            (6.0, 102.267),
        ] {
            let got = w_cubic(t, k, 100.0);
            assert!(
                (got - want).abs() < 1e-3,
                "W_cubic({t}) = {got}, want {want}"
            );
        }
        assert!((ALPHA - 0.52941).abs() < 1e-5);
    }

    #[test]
    fn the_stage_after_a_loss_starts_at_its_first_ack_with_k_from_w_max() {
        let mut c = after_loss_at_100();
        assert_eq!(c.origin_ms, NO_EPOCH, "recovery's duration does not count");
        let t0 = Instant::from_millis(5_000);
        c.on_ack(MSS, MSS, t0, 100_000);
        assert_eq!(c.w_max, 100.0);
        assert_eq!(c.origin_ms, 5_000 + 4_217, "t_epoch + K, K = 4.2172 s");
    }

    #[test]
    fn with_a_long_rtt_the_window_follows_the_cubic_curve_both_sides_of_k() {
        let mut c = after_loss_at_100();
        let t0 = Instant::from_millis(5_000);
        // 200 ms RTT: the round at t = 1.8 s aims at W_cubic(2.0) = 95.640 (concave).
        ack_rounds(&mut c, t0, 200_000, 10);
        assert!((segments(&c) - 95.640).abs() < 1.0, "cwnd {}", segments(&c));
        assert!(c.w_est < 76.0, "the Reno estimate stays below: {}", c.w_est);
        // Past K the curve turns convex: the round at t = 6.0 s aims at W_cubic(6.2) =
        // 100 + 0.4 × 1.9828³ = 103.118, while W_est = 70 + 31α = 86.4 stays below.
        let mut c = after_loss_at_100();
        ack_rounds(&mut c, t0, 200_000, 31);
        assert!(
            (segments(&c) - 103.118).abs() < 1.0,
            "cwnd {}",
            segments(&c)
        );
    }

    #[test]
    fn with_a_short_rtt_the_reno_friendly_region_governs() {
        let mut c = after_loss_at_100();
        let t0 = Instant::from_millis(5_000);
        // 1 ms RTT: 20 rounds are 20 ms, where W_cubic is still 70.0; W_est has grown
        // α per round: 70 + 20 × 0.52941 = 80.59.
        ack_rounds(&mut c, t0, 1_000, 20);
        assert!((segments(&c) - 80.59).abs() < 1.0, "cwnd {}", segments(&c));
        // W_est reaches cwnd_prior (100) after 30/α = 56.7 rounds; then one segment per
        // round: 100 + (80 − 56.7) = 123.3 after 80.
        let mut c = after_loss_at_100();
        ack_rounds(&mut c, t0, 1_000, 80);
        assert!((segments(&c) - 123.3).abs() < 2.0, "cwnd {}", segments(&c));
    }

    #[test]
    fn fast_convergence_lowers_w_max_when_a_loss_comes_below_the_last_one() {
        let mut c = after_loss_at_100();
        c.cwnd = 80 * MSS;
        c.on_fast_retransmit(80 * MSS, MSS);
        // W_max = 80 × (1 + 0.7)/2 = 68; ssthresh = 80 × 0.7 = 56.
        assert!((c.w_max - 68.0).abs() < 1e-4, "W_max {}", c.w_max);
        assert_eq!(c.ssthresh(), 56 * MSS);
        c.on_recovery_end(MSS);
        c.on_ack(MSS, MSS, Instant::from_millis(9_000), 100_000);
        // K = ∛((68 − 56)/0.4) = ∛30 = 3.1072.
        assert_eq!(c.origin_ms, 9_000 + 3_107);
        // A loss above the last W_max takes the window as it is.
        c.cwnd = 90 * MSS;
        c.on_fast_retransmit(90 * MSS, MSS);
        assert_eq!(c.w_max, 90.0);
    }

    #[test]
    fn after_a_timeout_the_window_restarts_at_one_segment_and_the_curve_at_k_zero() {
        let mut c = after_loss_at_100();
        c.cwnd = 100 * MSS;
        c.on_rto(100 * MSS, MSS);
        assert_eq!((c.cwnd(), c.ssthresh()), (MSS, 70 * MSS));
        let t = Instant::from_millis(9_000);
        for _ in 0..69 {
            c.on_ack(MSS, MSS, t, 100_000);
        }
        assert_eq!(c.cwnd(), 70 * MSS, "slow start up to ssthresh");
        assert_eq!(c.origin_ms, NO_EPOCH);
        c.on_ack(MSS, MSS, t, 100_000);
        assert_eq!(
            (c.origin_ms, c.w_max),
            (9_000, 70.0),
            "4.8: K = 0, W_max = cwnd_epoch"
        );
    }

    #[test]
    fn an_ecn_echo_reduces_by_beta_without_inflation() {
        let mut c = Cubic::new();
        c.on_established(MSS);
        c.cwnd = 40 * MSS;
        c.on_ecn_echo(40 * MSS, MSS);
        assert_eq!((c.cwnd(), c.ssthresh()), (28 * MSS, 28 * MSS));
    }
}
