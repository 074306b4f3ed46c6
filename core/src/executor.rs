//! Server executors: a host that performs an action on its own server runs
//! a request with no browser tab at all ([`crate::ledger::Executor::Server`]).
//!
//! The host decides **per call** which executor runs it: its own code knows
//! which of its tools act in the user's page and which on the server, so it
//! calls [`crate::Engine::begin`] (the tab) for the former and
//! [`crate::Engine::begin_server`] for the latter. Everything else — replay,
//! scopes, approvals bound to the exact arguments, outcomes, results — is
//! the same ledger.
//!
//! A server process (or each instance of a fleet sharing a `PostgreSQL`
//! store) is an executor with a **number and a lease**, as a tab is a
//! connection with heartbeats:
//!
//! * [`crate::Engine::start_executor`] allocates a number never used before
//!   on the site (a counter record, so a number is never reused: a run
//!   dispatched to an old number can never be taken for a new instance's)
//!   and writes its [`ExecutorLease`];
//! * [`crate::Engine::renew_executor`] is the heartbeat, well within
//!   [`crate::Policy::executor_lease_timeout`] (30 s by default); it
//!   re-creates a lease that was swept or stopped;
//! * [`crate::Engine::stop_executor`] ends the lease now, and every run
//!   dispatched to it: they end with [`crate::ledger::Failure::ExecutorLost`]
//!   and `unknownTail`, since their actions may have run.
//!
//! A run is dispatched to the executor that began it. While that executor's
//! lease is live, a repeated call is `execution_pending`, whichever
//! instance receives it; once the lease lapses, the run is cut off (on the
//! next repeat, or by [`crate::Engine::end_lost_runs`], which a fleet runs
//! periodically). A parked or approved request resumes on the executor of
//! the call that resumes it. [`crate::Engine::sweep_executors`] deletes
//! leases lapsed for [`LEASE_KEPT_TIMEOUTS`] timeouts.
//!
//! A server run has no page: an action that drives page controls is refused
//! ([`crate::ledger::LedgerError::InvalidAction`]). "Always allow this kind"
//! lives per grant for server runs
//! ([`crate::approval::GrantAutoApproval`]), under the tab's rules.
//!
//! This module owns the executor numbers, the lease and its rules, and imports
//! nothing from [`crate::engine`]. The engine's operations on them
//! ([`Engine::start_executor`](crate::Engine::start_executor) and the rest,
//! listed in [`crate::engine`]) are in its child module `executor::ops`, which
//! builds on both: the engine builds on this module, never the other way.

mod ops;

use core::fmt;
use core::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{ErrorCode, WireError};
use crate::site::SiteId;
use crate::store::codec;
use crate::store::{Record, StoreError, Table};
use crate::time::Timestamp;

/// A lease lapsed for this many [`crate::Policy::executor_lease_timeout`]s
/// is deleted by [`crate::Engine::sweep_executors`].
pub const LEASE_KEPT_TIMEOUTS: u32 = 10;

/// The number of a server executor on its site: allocated by
/// [`crate::Engine::start_executor`], never reused there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ExecutorId(u32);

codec::fields!(ExecutorId(newtype));

impl ExecutorId {
    /// The executor numbered `n` (an administrator stopping a dead
    /// instance's executor names it by number).
    #[must_use]
    pub const fn new(n: u32) -> Self {
        Self(n)
    }

    /// Its number.
    #[must_use]
    pub const fn get(self) -> u32 {
        self.0
    }

    /// The number after the last one allocated on a site (`last`, `0` when
    /// none was): numbers start at 1 and are never reused.
    pub fn after(last: u32) -> Result<Self, ExecutorError> {
        last.checked_add(1)
            .map(Self)
            .ok_or(ExecutorError::Exhausted)
    }

    /// Whether this number was allocated on a site whose last allocated
    /// number is `last`.
    #[must_use]
    pub const fn allocated_by(self, last: u32) -> bool {
        self.0 != 0 && self.0 <= last
    }
}

impl fmt::Display for ExecutorId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(itoa::Buffer::new().format(self.0))
    }
}

/// The lease of one server executor: live while renewed within
/// [`crate::Policy::executor_lease_timeout`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutorLease {
    /// The site.
    pub site: SiteId,
    /// The executor.
    pub id: ExecutorId,
    /// The start or the last renewal.
    pub last_seen: Timestamp,
}

codec::fields!(ExecutorLease {
    site,
    id,
    last_seen
});

impl Record for ExecutorLease {
    const TABLE: Table = Table::Tabs;
    const VERSION: u8 = 1;
}

impl ExecutorLease {
    /// A lease starting now.
    #[must_use]
    pub fn new(site: SiteId, id: ExecutorId, now: Timestamp) -> Self {
        Self {
            site,
            id,
            last_seen: now,
        }
    }

    /// Renewed within `timeout` of `now`.
    #[must_use]
    pub fn is_live(&self, now: Timestamp, timeout: Duration) -> bool {
        now < self.last_seen.saturating_add(timeout)
    }

    /// A renewal at `now`; a clock that stepped back never shortens it.
    pub fn renew(&mut self, now: Timestamp) {
        self.last_seen = self.last_seen.max(now);
    }

    /// [`ExecutorLease::is_live`] read in place from the lease as stored
    /// (`bytes`, its version byte first), for the check every server
    /// `begin` makes: nothing is decoded but the time of its last renewal.
    /// A lease that does not read as one is not live.
    #[must_use]
    pub fn live_stored(bytes: &[u8], now: Timestamp, timeout: Duration) -> bool {
        let Some((&version, body)) = bytes.split_first() else {
            return false;
        };
        let mut r = codec::Reader::new(body, version);
        let last_seen = (|| {
            r.str()?;
            r.u32()?;
            r.u64()
        })();
        match last_seen {
            Ok(at) if version == Self::VERSION && r.is_empty() => {
                now < Timestamp::from_secs(at).saturating_add(timeout)
            }
            _ => false,
        }
    }

    /// Lapsed for [`LEASE_KEPT_TIMEOUTS`] timeouts: the sweep deletes it.
    #[must_use]
    pub fn is_stale(&self, now: Timestamp, timeout: Duration) -> bool {
        now >= self
            .last_seen
            .saturating_add(timeout.saturating_mul(LEASE_KEPT_TIMEOUTS))
    }
}

/// Why an executor operation was refused.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecutorError {
    /// No such site: `invalid_request`.
    UnknownSite,
    /// No executor with this number was ever started on the site:
    /// `INVALID_PARAMS`.
    Unknown,
    /// Every executor number of the site was used (`u32::MAX` starts):
    /// `server_error`.
    Exhausted,
    /// The store failed; nothing changed.
    Store(StoreError),
}

impl From<StoreError> for ExecutorError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl fmt::Display for ExecutorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::UnknownSite => "no such site",
            Self::Unknown => "no executor with this number was started on this site",
            Self::Exhausted => "every executor number of this site was used",
            Self::Store(_) => "temporary server error",
        })
    }
}

impl WireError for ExecutorError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::UnknownSite => ErrorCode::InvalidRequest,
            Self::Unknown => ErrorCode::InvalidParams,
            Self::Exhausted | Self::Store(_) => ErrorCode::ServerError,
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ExecutorError {}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(30);

    fn at(s: u64) -> Timestamp {
        Timestamp::from_secs(s)
    }

    fn lease() -> ExecutorLease {
        ExecutorLease::new(SiteId::parse("s").unwrap(), ExecutorId::new(3), at(100))
    }

    #[test]
    fn a_lease_is_live_until_its_timeout_and_renewal_extends_it() {
        let mut l = lease();
        assert!(l.is_live(at(100), T) && l.is_live(at(129), T));
        assert!(!l.is_live(at(130), T));
        l.renew(at(125));
        assert!(l.is_live(at(154), T) && !l.is_live(at(155), T));
        // A renewal from a clock that stepped back keeps the later one.
        l.renew(at(110));
        assert_eq!(l.last_seen, at(125));
        // A lapsed lease is renewed like any other (it was only late).
        l.renew(at(500));
        assert!(l.is_live(at(500), T));
    }

    #[test]
    fn a_lease_lapsed_for_ten_timeouts_is_stale() {
        let l = lease();
        assert!(!l.is_stale(at(130), T), "lapsed, not yet stale");
        assert!(!l.is_stale(at(399), T));
        assert!(l.is_stale(at(400), T));
        let forever = ExecutorLease::new(l.site.clone(), l.id, Timestamp::from_secs(u64::MAX));
        assert!(!forever.is_stale(Timestamp::from_secs(u64::MAX - 1), T));
    }

    #[test]
    fn numbers_start_at_one_and_are_never_reused() {
        assert_eq!(ExecutorId::after(0), Ok(ExecutorId::new(1)));
        assert_eq!(ExecutorId::after(41), Ok(ExecutorId::new(42)));
        assert_eq!(ExecutorId::after(u32::MAX), Err(ExecutorError::Exhausted));
        assert!(ExecutorId::new(3).allocated_by(3));
        assert!(!ExecutorId::new(4).allocated_by(3));
        assert!(!ExecutorId::new(0).allocated_by(3), "0 is never allocated");
        assert_eq!(alloc::format!("{}", ExecutorId::new(42)), "42");
        assert_eq!(ExecutorError::Exhausted.code().as_str(), "server_error");
        assert_eq!(ExecutorError::Unknown.code().as_str(), "INVALID_PARAMS");
    }

    /// The in-place reading answers what decoding would, and a lease that
    /// does not read is not live.
    #[test]
    fn a_stored_lease_reads_in_place_as_decoded() {
        for l in [
            lease(),
            ExecutorLease::new(
                SiteId::parse("a-much-longer-site-id").unwrap(),
                ExecutorId::new(u32::MAX),
                Timestamp::from_secs(u64::MAX),
            ),
        ] {
            let bytes = codec::encode(&l).unwrap();
            for now in [0, 99, 100, 129, 130, u64::MAX] {
                assert_eq!(
                    ExecutorLease::live_stored(&bytes, at(now), T),
                    l.is_live(at(now), T),
                    "{now}"
                );
            }
            for cut in 0..bytes.len() {
                assert!(!ExecutorLease::live_stored(&bytes[..cut], at(100), T));
            }
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(!ExecutorLease::live_stored(&longer, at(100), T));
            let mut other = bytes.clone();
            other[0] += 1;
            assert!(!ExecutorLease::live_stored(&other, at(100), T));
        }
    }

    /// The record's encoding and reading are postcard's over its derives.
    #[test]
    fn the_record_encoding_is_postcards() {
        let mut l = lease();
        codec::assert_postcard_agrees(&l);
        l.id = ExecutorId::new(u32::MAX);
        l.last_seen = Timestamp::from_secs(u64::MAX);
        codec::assert_postcard_agrees(&l);
    }
}
