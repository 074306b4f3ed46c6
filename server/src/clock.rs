//! The one place the server reads the wall clock. The core never does: every
//! operation gets `now` from here as an argument.

use std::time::{SystemTime, UNIX_EPOCH};

use portcullis_core::Timestamp;

/// The current time, in whole seconds since the Unix epoch.
pub(crate) fn now() -> Timestamp {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Timestamp::from_secs(secs)
}

/// The current time in milliseconds (the ledger's rate limiter counts them).
pub(crate) fn now_ms() -> portcullis_core::time::TimestampMs {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    portcullis_core::time::TimestampMs::from_millis(ms)
}
