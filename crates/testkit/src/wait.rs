//! Polling a condition with a time limit, for tests that wait on a daemon, a kernel or a lab.

use std::time::{Duration, Instant};

/// Polls `f` every 50 ms until it returns Some, at most `limit`; None after that.
pub fn wait_for<T>(limit: Duration, f: impl FnMut() -> Option<T>) -> Option<T> {
    wait_for_every(limit, Duration::from_millis(50), f)
}

/// [`wait_for`], asking every `period`.
pub fn wait_for_every<T>(
    limit: Duration,
    period: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(period);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_that_holds_returns_its_value_and_one_that_never_does_times_out() {
        let mut n = 0;
        let got = wait_for_every(Duration::from_secs(5), Duration::ZERO, || {
            n += 1;
            (n == 3).then_some(n)
        });
        assert_eq!(got, Some(3));
        assert_eq!(wait_for(Duration::from_millis(60), || None::<()>), None);
    }
}
