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
