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

    /// This instant as a UTC calendar date and time of day: what a page or
    /// an RFC 3339 field shows.
    #[must_use]
    #[allow(
        clippy::cast_possible_truncation,
        reason = "hours, minutes and seconds of a day are below 256"
    )]
    pub fn utc(self) -> UtcTime {
        let days = self.0 / 86_400;
        let of_day = self.0 % 86_400;
        let (year, month, day) = civil_from_days(days);
        UtcTime {
            year,
            month,
            day,
            hour: (of_day / 3600) as u8,
            minute: (of_day % 3600 / 60) as u8,
            second: (of_day % 60) as u8,
        }
    }
}

/// A [`Timestamp`] on the proleptic Gregorian calendar, UTC. `Display`
/// writes RFC 3339 §5.6 (`2026-12-06T07:30:00Z`); [`UtcTime::date`] the
/// date alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct UtcTime {
    /// The year.
    pub year: u64,
    /// 1 to 12.
    pub month: u8,
    /// 1 to 31.
    pub day: u8,
    /// 0 to 23.
    pub hour: u8,
    /// 0 to 59.
    pub minute: u8,
    /// 0 to 59.
    pub second: u8,
}

impl UtcTime {
    /// `YYYY-MM-DD`.
    #[must_use]
    pub fn date(&self) -> impl fmt::Display + '_ {
        struct Date<'a>(&'a UtcTime);
        impl fmt::Display for Date<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(
                    f,
                    "{:04}-{:02}-{:02}",
                    self.0.year, self.0.month, self.0.day
                )
            }
        }
        Date(self)
    }
}

impl fmt::Display for UtcTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}T{:02}:{:02}:{:02}Z",
            self.date(),
            self.hour,
            self.minute,
            self.second
        )
    }
}

impl Timestamp {
    /// Reads an RFC 3339 §5.6 time in UTC, `2026-12-06T07:30:00Z`, or a
    /// date alone, `2026-12-06` (its midnight UTC); `None` for anything
    /// else (another offset, fractions, a date before 1970, a field out of
    /// range).
    #[must_use]
    pub fn parse_utc(text: &str) -> Option<Self> {
        let b = text.as_bytes();
        let digits = |r: core::ops::Range<usize>| -> Option<u64> {
            let part = b.get(r)?;
            if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
                return None;
            }
            Some(part.iter().fold(0, |n, d| n * 10 + u64::from(d - b'0')))
        };
        if b.get(4) != Some(&b'-') || b.get(7) != Some(&b'-') {
            return None;
        }
        let (year, month, day) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
        let (hour, minute, second) = match b.len() {
            10 => (0, 0, 0),
            20 if b[10] == b'T' && b[13] == b':' && b[16] == b':' && b[19] == b'Z' => {
                (digits(11..13)?, digits(14..16)?, digits(17..19)?)
            }
            _ => return None,
        };
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
        let month_days = [
            31,
            if leap { 29 } else { 28 },
            31,
            30,
            31,
            30,
            31,
            31,
            30,
            31,
            30,
            31,
        ];
        let valid = year >= 1970
            && (1..=12).contains(&month)
            && (1..=month_days[usize::try_from(month - 1).ok()?]).contains(&day)
            && hour < 24
            && minute < 60
            && second < 60;
        if !valid {
            return None;
        }
        let days = days_from_civil(year, month, day);
        Some(Self(days * 86_400 + hour * 3600 + minute * 60 + second))
    }
}

/// Days from 1970-01-01 to the civil date (H. Hinnant's
/// `days_from_civil`, for dates from 1970 on).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date `days` after 1970-01-01 (H. Hinnant's `civil_from_days`,
/// on unsigned days: no date before the epoch is ever shown).
#[allow(
    clippy::cast_possible_truncation,
    reason = "month and day are below 32 by construction"
)]
fn civil_from_days(days: u64) -> (u64, u8, u8) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    (yoe + era * 400 + u64::from(month <= 2), month, day)
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
    use alloc::string::ToString as _;

    #[test]
    fn only_plain_utc_times_are_read() {
        for bad in [
            "",
            "2026-12-06T07:30:00+01:00",
            "2026-12-06T07:30:00.5Z",
            "2026-12-06 07:30:00Z",
            "2026-02-29",
            "2026-13-01",
            "2026-12-06T24:00:00Z",
            "1969-12-31",
            "+026-12-06",
            "2026-1-6",
        ] {
            assert_eq!(Timestamp::parse_utc(bad), None, "{bad}");
        }
        assert!(Timestamp::parse_utc("2024-02-29").is_some());
    }

    #[test]
    fn utc_times_are_rfc_3339() {
        for (secs, text) in [
            (0, "1970-01-01T00:00:00Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (1_798_529_523, "2026-12-29T07:32:03Z"),
            (253_402_300_799, "9999-12-31T23:59:59Z"),
        ] {
            let utc = Timestamp::from_secs(secs).utc();
            assert_eq!(utc.to_string(), text);
            assert_eq!(utc.date().to_string(), text[..10]);
            assert_eq!(Timestamp::parse_utc(text), Some(Timestamp::from_secs(secs)));
            assert_eq!(
                Timestamp::parse_utc(&text[..10]),
                Some(Timestamp::from_secs(secs - secs % 86_400))
            );
        }
    }

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
