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

use core::fmt;
use core::ops::Bound;
use core::time::Duration;

use serde::{Deserialize, Serialize};

use crate::engine::ledger::{AbandonCursor, Abandoned, lease_live, store_request};
use crate::engine::{Engine, SiteOpError, Txn, Within, keys, load_site};
use crate::error::{ErrorCode, WireError};
use crate::grant::Grant;
use crate::ledger::{ExecutionRequest, Executor, Failure, Lineage, RequestState};
use crate::site::SiteId;
use crate::store::codec;
use crate::store::{
    ReadTransaction, Record, Store, StoreError, Table, WriteTransaction, prefix_end,
};
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

/// The last executor number allocated on `site` (`0`: none).
fn last_allocated<R: ReadTransaction>(txn: &R, site: &SiteId) -> Result<u32, StoreError> {
    Ok(txn
        .get(Table::Tabs, &keys::executor_counter(site))?
        .and_then(|b| <[u8; 4]>::try_from(b.as_slice()).ok())
        .map_or(0, u32::from_be_bytes))
}

/// Ends the running request indexed by `entry` (a [`keys::server_run`]
/// key whose value is the request's lineage: a server run, or a tab run
/// the executor drives) with [`Failure::ExecutorLost`] if it still runs on
/// (or is driven by) `executor` of `site`
/// (`None`: any site); a stale entry is deleted. Returns whether it ended
/// a run.
fn end_server_run<W: WriteTransaction>(
    txn: &mut Txn<'_, W>,
    entry: &[u8],
    lineage: &[u8],
    site: Option<&SiteId>,
    now: Timestamp,
) -> Result<bool, StoreError> {
    let (Some((executor, grant, id)), Ok(lineage)) = (
        keys::split_server_run(entry),
        <[u8; 32]>::try_from(lineage).map(Lineage),
    ) else {
        return Ok(false);
    };
    let rec: Option<ExecutionRequest> = txn.load(&keys::request(&lineage, &id))?;
    let Some(mut rec) = rec.filter(|r| {
        let held = match r.executor() {
            Executor::Server => r.connection() == executor,
            Executor::Tab => r.driver() == Some(executor),
        };
        r.grant() == grant && held && *r.state() == RequestState::Running
    }) else {
        txn.delete(Table::Requests, entry)?;
        return Ok(false);
    };
    if let Some(site) = site {
        // Numbers are per site: another site's executor of this number.
        let owner: Option<Grant> = txn.load(grant.as_bytes())?;
        if owner.is_none_or(|g| g.site != *site) {
            return Ok(false);
        }
    }
    rec.cancel(Failure::ExecutorLost, now);
    store_request(txn, &lineage, &rec, now)?;
    Ok(true)
}

/// The server-executor operations: start, renew and stop an executor's
/// lease, sweep lapsed leases and end the runs of executors whose lease
/// lapsed, each in one store transaction of its own or inside the caller's.
impl<S: Store> Engine<S> {
    /// Starts a server executor on `site`: allocates a number never used
    /// there before and writes its lease, live from `now`. The host keeps
    /// the number for as long as the process (or fleet instance) runs,
    /// renews it ([`Engine::renew_executor`]) well within
    /// [`crate::Policy::executor_lease_timeout`], and passes it to
    /// [`Engine::begin_server`].
    pub fn start_executor<X: Within<S>>(
        &self,
        tx: X,
        site: &SiteId,
        now: Timestamp,
    ) -> Result<ExecutorId, ExecutorError> {
        tx.run(self, |txn| {
            let site = load_site(&*txn, site).map_err(|e| match e {
                SiteOpError::Store(e) => ExecutorError::Store(e),
                SiteOpError::Site(_) => ExecutorError::UnknownSite,
            })?;
            let id = ExecutorId::after(last_allocated(&*txn, &site.id)?)?;
            txn.put(
                Table::Tabs,
                &keys::executor_counter(&site.id),
                &id.get().to_be_bytes(),
            )?;
            let lease = ExecutorLease::new(site.id.clone(), id, now);
            txn.save(&keys::executor_lease(&site.id, id.get()), &lease)?;
            Ok(id)
        })
    }

    /// The heartbeat of executor `id` on `site`: its lease is live again
    /// from `now`. A lease that lapsed, was swept or was stopped is
    /// re-created (the instance was only late: the runs cut off meanwhile
    /// stay ended). A number never allocated on the site is
    /// [`ExecutorError::Unknown`].
    pub fn renew_executor<X: Within<S>>(
        &self,
        tx: X,
        site: &SiteId,
        id: ExecutorId,
        now: Timestamp,
    ) -> Result<(), ExecutorError> {
        tx.run(self, |txn| {
            let key = keys::executor_lease(site, id.get());
            let lease = match txn.load::<ExecutorLease>(&key)? {
                Some(mut lease) => {
                    lease.renew(now);
                    lease
                }
                None if id.allocated_by(last_allocated(&*txn, site)?) => {
                    ExecutorLease::new(site.clone(), id, now)
                }
                None => return Err(ExecutorError::Unknown),
            };
            txn.save(&key, &lease)?;
            Ok(())
        })
    }

    /// Stops executor `id` on `site` (its instance shuts down, or an
    /// administrator retires a dead one): its lease ends now, and every
    /// server request still running on it ends with
    /// [`Failure::ExecutorLost`] and `unknownTail` (its actions may have
    /// run). Returns how many runs it ended. Stopping a stopped executor
    /// ends nothing more; a number never allocated on the site is
    /// [`ExecutorError::Unknown`].
    pub fn stop_executor<X: Within<S>>(
        &self,
        tx: X,
        site: &SiteId,
        id: ExecutorId,
        now: Timestamp,
    ) -> Result<usize, ExecutorError> {
        tx.run(self, |txn| {
            if !id.allocated_by(last_allocated(&*txn, site)?) {
                return Err(ExecutorError::Unknown);
            }
            txn.delete(Table::Tabs, &keys::executor_lease(site, id.get()))?;
            let runs = crate::engine::ledger::scan(
                &*txn,
                Table::Requests,
                &keys::server_runs(id.get()),
                usize::MAX,
            )?;
            let mut ended = 0;
            for (entry, lineage) in runs {
                if end_server_run(txn, &entry, &lineage, Some(site), now)? {
                    ended += 1;
                }
            }
            Ok(ended)
        })
    }

    /// The lease of executor `id` on `site`, if it has one now (for
    /// administration and tests).
    pub fn executor_lease(
        &self,
        site: &SiteId,
        id: ExecutorId,
    ) -> Result<Option<ExecutorLease>, StoreError> {
        self.read(|txn| txn.load(&keys::executor_lease(site, id.get())))
    }

    /// Deletes the leases lapsed for
    /// [`crate::executor::LEASE_KEPT_TIMEOUTS`] lease timeouts, on every
    /// site, looking at up to `budget` leases (lowest numbers first, the
    /// oldest). Returns how many it deleted; call again while it returns
    /// `budget`. Allocated numbers stay allocated: a swept executor that
    /// renews gets its lease back, and its number is never given to
    /// another.
    pub fn sweep_executors<X: Within<S>>(
        &self,
        tx: X,
        now: Timestamp,
        budget: usize,
    ) -> Result<usize, StoreError> {
        tx.run(self, |txn| {
            let leases =
                crate::engine::ledger::scan(&*txn, Table::Tabs, keys::ALL_EXECUTOR_LEASES, budget)?;
            let mut deleted = 0;
            for (key, bytes) in leases {
                let stale = codec::decode::<ExecutorLease>(&bytes)
                    .is_ok_and(|l| l.is_stale(now, self.policy().executor_lease_timeout));
                if stale {
                    txn.delete(Table::Tabs, &key)?;
                    deleted += 1;
                }
            }
            Ok(deleted)
        })
    }

    /// Ends the server runs whose executor is gone: every request still
    /// `Running` on the server whose executor's lease is not live (lapsed,
    /// swept or stopped) ends with [`Failure::ExecutorLost`] and
    /// `unknownTail`, since its actions may have run. Tab runs, and server
    /// runs whose executor holds a live lease, are left alone, so every
    /// instance of a fleet may call it at any time (periodically, and at
    /// start-up in place of [`Engine::abandon_running`]).
    ///
    /// Looks at up to `budget` running server requests per call, all or
    /// nothing in one transaction, from `from` (the cursor the previous
    /// call returned, `None` at first; a cursor of another operation
    /// starts over); call again with [`Abandoned::next`] until it is
    /// `None`.
    pub fn end_lost_runs<X: Within<S>>(
        &self,
        tx: X,
        from: Option<&AbandonCursor>,
        now: Timestamp,
        budget: usize,
    ) -> Result<Abandoned, StoreError> {
        tx.run(self, |txn| self.end_lost_runs_body(txn, from, now, budget))
    }

    /// The body of [`Engine::end_lost_runs`] in either form, generic over the
    /// transaction alone: both forms share one copy per store.
    fn end_lost_runs_body<W: WriteTransaction>(
        &self,
        txn: &mut Txn<'_, W>,
        from: Option<&AbandonCursor>,
        now: Timestamp,
        budget: usize,
    ) -> Result<Abandoned, StoreError> {
        let budget = budget.max(1);
        let all = keys::ALL_SERVER_RUNS;
        let start = from
            .filter(|c| c.0.starts_with(all))
            .map_or(Bound::Included(all), |c| Bound::Excluded(c.0.as_slice()));
        let end = prefix_end(all);
        let end = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let entries = txn.range(Table::Requests, start, end, budget)?;
        let next = (entries.len() == budget)
            .then(|| entries.last().map(|(k, _)| AbandonCursor(k.clone())))
            .flatten();
        let timeout = self.policy().executor_lease_timeout;
        // The lease last looked at: runs of one executor sit together.
        let mut checked: Option<(SiteId, u32, bool)> = None;
        let mut ended = 0;
        for (entry, lineage) in entries {
            let Some((executor, grant, _)) = keys::split_server_run(&entry) else {
                continue;
            };
            let Some(g) = txn.load::<Grant>(grant.as_bytes())? else {
                // Its grant was swept: the ledger sweep deletes the request
                // and this entry with it.
                continue;
            };
            let live = match &checked {
                Some((site, n, live)) if *site == g.site && *n == executor => *live,
                _ => {
                    let live = lease_live(&*txn, &g.site, executor, now, timeout)?;
                    checked = Some((g.site.clone(), executor, live));
                    live
                }
            };
            if !live && end_server_run(txn, &entry, &lineage, None, now)? {
                ended += 1;
            }
        }
        Ok(Abandoned { ended, next })
    }
}

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
