//! The server-executor operations of [`Engine`]: start, renew and stop a
//! lease, sweep lapsed leases, end the runs of lost executors.
//!
//! The lease and its pure rules live in the parent module,
//! [`crate::executor`].

use core::ops::Bound;

use super::{ExecutorError, ExecutorId, ExecutorLease};
use crate::engine::ledger::{AbandonCursor, Abandoned, lease_live, store_request};
use crate::engine::{Engine, SiteOpError, Txn, Within, load_site};
use crate::grant::Grant;
use crate::ledger::{ExecutionRequest, Executor, Failure, Lineage, RequestState};
use crate::site::SiteId;
use crate::store::codec;
use crate::store::keys;
use crate::store::{ReadTransaction, Store, StoreError, Table, WriteTransaction, prefix_end};
use crate::time::Timestamp;

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
