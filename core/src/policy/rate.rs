//! Per-grant rate limiting with GCRA (the generic cell rate algorithm of
//! ITU-T I.371, as popularised by `redis-cell` and `governor`).
//!
//! The state is one number per grant, the *theoretical arrival time* (TAT)
//! in milliseconds. A call at `now` is allowed when
//! `max(TAT, now) - now <= interval × (burst − 1)`, and then moves the TAT
//! on by one `interval`; a refused call changes nothing and learns exactly
//! how long to wait. The clock is the caller's [`TimestampMs`]: whole
//! seconds are too coarse for a useful `retryAfterMs`.
//!
//! [`TimestampMs`]: crate::time::TimestampMs

use serde::{Deserialize, Serialize};

/// A rate: one call per `interval_ms` on average, up to `burst` at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateLimit {
    /// Milliseconds between calls at the sustained rate; 0 disables the limit.
    pub interval_ms: u64,
    /// Calls allowed back to back from rest (at least 1).
    pub burst: u32,
}

impl RateLimit {
    /// One call per `interval_ms`, bursts of `burst`.
    #[must_use]
    pub const fn new(interval_ms: u64, burst: u32) -> Self {
        Self { interval_ms, burst }
    }

    /// Judges a call at `now_ms` against the stored `tat` (`None` at rest).
    /// `Ok(new_tat)` allows it (store `new_tat`); `Err(ms)` refuses it, to be
    /// retried in exactly `ms` milliseconds.
    pub fn check(&self, tat: Option<u64>, now_ms: u64) -> Result<u64, u64> {
        if self.interval_ms == 0 {
            return Ok(now_ms);
        }
        let tolerance = self
            .interval_ms
            .saturating_mul(u64::from(self.burst.max(1) - 1));
        let tat = tat.unwrap_or(now_ms).max(now_ms);
        let ahead = tat - now_ms;
        if ahead > tolerance {
            Err(ahead - tolerance)
        } else {
            Ok(tat.saturating_add(self.interval_ms))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_then_the_sustained_rate_with_exact_waits() {
        let r = RateLimit::new(100, 3);
        let mut tat = None;
        for _ in 0..3 {
            tat = Some(r.check(tat, 1_000).unwrap());
        }
        assert_eq!(r.check(tat, 1_000), Err(100));
        assert_eq!(r.check(tat, 1_099), Err(1));
        let t = r.check(tat, 1_100).unwrap();
        assert_eq!(r.check(Some(t), 1_100), Err(100));
        // At rest again after burst × interval.
        assert!(r.check(Some(t), 1_400).is_ok());
    }

    #[test]
    fn burst_of_one_and_disabled() {
        let r = RateLimit::new(250, 1);
        let t = r.check(None, 0).unwrap();
        assert_eq!(r.check(Some(t), 10), Err(240));
        assert_eq!(RateLimit::new(0, 0).check(Some(u64::MAX), 5), Ok(5));
        let zero_burst = RateLimit::new(10, 0);
        assert!(zero_burst.check(None, 0).is_ok());
    }
}
