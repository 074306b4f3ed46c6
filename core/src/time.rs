//! Time as a value: [`Timestamp`], whole seconds since the Unix epoch.
//!
//! The core never reads a clock; every operation that needs the time takes a
//! `now: Timestamp` argument. Arithmetic saturates, so a hostile lifetime or a
//! far-future clock can never wrap around into the past.

use core::fmt;
use core::time::Duration;

use serde::{Deserialize, Serialize};

/// Whole seconds since 1970-01-01T00:00:00Z (the JWT `NumericDate` of
/// RFC 7519 §2, restricted to non-negative values).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(u64);

crate::store::codec::fields!(Timestamp(newtype));

impl Timestamp {
    /// The Unix epoch.
    pub const EPOCH: Self = Self(0);
    /// The latest representable instant; [`Timestamp::saturating_add`] stops here.
    pub const MAX: Self = Self(u64::MAX);

    /// A timestamp `secs` seconds after the epoch.
    #[must_use]
    pub const fn from_secs(secs: u64) -> Self {
        Self(secs)
    }

    /// Seconds since the epoch.
    #[must_use]
    pub const fn as_secs(self) -> u64 {
        self.0
    }

    /// Seconds since the epoch as a JWT `NumericDate` (saturating at `i64::MAX`).
    #[must_use]
    pub fn as_jwt_secs(self) -> i64 {
        i64::try_from(self.0).unwrap_or(i64::MAX)
    }

    /// `self + d`, whole seconds only, saturating at [`Timestamp::MAX`].
    #[must_use]
    pub const fn saturating_add(self, d: Duration) -> Self {
        Self(self.0.saturating_add(d.as_secs()))
    }

    /// `self - d`, whole seconds only, saturating at the epoch.
    #[must_use]
    pub const fn saturating_sub(self, d: Duration) -> Self {
        Self(self.0.saturating_sub(d.as_secs()))
    }

    /// The time from `earlier` to `self`, or zero if `earlier` is later.
    #[must_use]
    pub const fn saturating_since(self, earlier: Self) -> Duration {
        Duration::from_secs(self.0.saturating_sub(earlier.0))
    }
}

/// Milliseconds since the Unix epoch: the clock input of the few decisions
/// that need sub-second precision (the rate limiter's `retryAfterMs`).
///
/// Operations that take it derive their [`Timestamp`] from it
/// ([`TimestampMs::timestamp`], rounding down), so one call never sees two
/// different clocks.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct TimestampMs(u64);

impl TimestampMs {
    /// A timestamp `ms` milliseconds after the epoch.
    #[must_use]
    pub const fn from_millis(ms: u64) -> Self {
        Self(ms)
    }

    /// Milliseconds since the epoch.
    #[must_use]
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// The whole second this instant falls in.
    #[must_use]
    pub const fn timestamp(self) -> Timestamp {
        Timestamp(self.0 / 1_000)
    }
}

impl From<Timestamp> for TimestampMs {
    fn from(t: Timestamp) -> Self {
        Self(t.0.saturating_mul(1_000))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}s", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_wrapping() {
        assert_eq!(
            Timestamp::MAX.saturating_add(Duration::from_secs(1)),
            Timestamp::MAX
        );
        assert_eq!(
            Timestamp::EPOCH.saturating_sub(Duration::from_secs(1)),
            Timestamp::EPOCH
        );
        assert_eq!(
            Timestamp::from_secs(5).saturating_since(Timestamp::from_secs(9)),
            Duration::ZERO
        );
        assert_eq!(Timestamp::MAX.as_jwt_secs(), i64::MAX);
    }

    #[test]
    fn milliseconds_round_down_to_their_second() {
        let t = TimestampMs::from_millis(10_999);
        assert_eq!(t.timestamp(), Timestamp::from_secs(10));
        assert_eq!(
            TimestampMs::from(Timestamp::from_secs(3)).as_millis(),
            3_000
        );
        assert_eq!(TimestampMs::from(Timestamp::MAX).as_millis(), u64::MAX);
    }

    #[test]
    fn sub_second_parts_are_ignored() {
        let t = Timestamp::from_secs(10).saturating_add(Duration::from_millis(1999));
        assert_eq!(t, Timestamp::from_secs(11));
    }
}
