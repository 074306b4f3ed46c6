//! How this crate reaches the store without stalling the async runtime.
//!
//! **The rule a host must keep too:** an engine operation does store I/O
//! (a redb commit is an fsync; a PostgreSQL statement is a network round
//! trip), so nothing that can *wait on someone else* runs on a runtime
//! worker. Reads of a [local](HostStore::is_local) store run where they
//! are asked (a read transaction of an in-process file costs a few
//! microseconds, less than the hand-off to the blocking pool and back), and
//! so does a local write when no other write is in flight: it takes the
//! store's writer at once, commits, and holds the request's thread for one
//! commit ([`GroupCommitter::alone`]), or for as long as a write the host
//! made outside this crate's writer (its own `engine.op(…)` on the
//! blocking pool) still holds redb's single writer. A write that would wait for a batch,
//! any operation on a shared store, and the bearer check of a shared store
//! that cannot answer from memory ([`HostStore::in_memory`]: PostgreSQL
//! with its read cache) go to tokio's blocking pool. A host that calls the
//! [`Engine`](portcullis_core::Engine) itself should do the same, or
//! simply `tokio::task::spawn_blocking(move || engine.op(…))`.
//!
//! Writes go through a writer chosen by the store:
//!
//! * **local** (memory, redb): a [`GroupCommitter`] gathers the operations
//!   of concurrent requests into one durable commit and answers each only
//!   once that commit returned;
//! * **shared** (PostgreSQL): one transaction per operation on its own
//!   pooled connection (PostgreSQL already shares a WAL flush among
//!   concurrent commits); a serialization failure runs the operation again
//!   on a fresh transaction, as the engine's own `op(…)` forms do, but not
//!   only [`MAX_ATTEMPTS`] times in
//!   a few milliseconds: past those, again after a jittered pause that
//!   doubles up to [`MAX_PAUSE`], for as long as [`CONFLICT_BUDGET`]
//!   allows. Each conflict means another writer of the same rows
//!   committed, so racers (a refresh token sent by several processes at
//!   once) each get their turn and end with the answer the core gives the
//!   race (one rotation, the others `invalid_grant` or the retry window's
//!   successor), not with a server error. A conflict still left after the
//!   budget is the operation's answer; adapters answer it `503` with
//!   `Retry-After`, as a store that cannot be reached. An operation is
//!   therefore re-runnable: a `Fn`, every effect through the transaction.
//!   A commit refused because a call of the operation found the store
//!   unreachable (after a failed statement PostgreSQL refuses all but a
//!   rollback) fails as that call did, [`StoreErrorKind::Unavailable`]:
//!   `503`, whichever step met the outage.

use std::cell::{Cell, RefCell};
use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

use portcullis_core::engine::MAX_ATTEMPTS;
use portcullis_core::store::{
    Entry, ReadTransaction, Savepoint, Store, StoreError, StoreErrorKind, Table, WriteTransaction,
};
use portcullis_store_group::{BatchWrite, GroupCommitter};

/// A store this crate can serve from: any [`Store`] that can be shared
/// between threads, and says whether it lives in this process alone.
pub trait HostStore: Store + Send + Sync + 'static {
    /// Whether this process is the store's only user (an in-memory store,
    /// a redb file, which redb locks to one process). A local store gets
    /// group commit, reads on the runtime (they never wait on another
    /// process) and, at start, the end of every run a previous process left
    /// running. A shared store (PostgreSQL) gets none of these.
    fn is_local(&self) -> bool;

    /// Runs `f` with every read it makes through this store answered from
    /// memory or failed at once (never waiting on I/O), so that a
    /// read-only check may run on the runtime; `None` (without running
    /// `f`) when the store cannot promise that. The bearer check of a
    /// shared store tries this first and goes to the blocking pool when it
    /// is `None` or `f` met a store error. The default is `None`.
    fn in_memory<T>(&self, f: impl FnOnce() -> T) -> Option<T> {
        let _ = f;
        None
    }
}

#[cfg(feature = "redb")]
impl HostStore for portcullis_store_redb::RedbStore {
    fn is_local(&self) -> bool {
        true
    }
}

#[cfg(feature = "memory")]
impl HostStore for portcullis_store_memory::MemoryStore {
    fn is_local(&self) -> bool {
        true
    }
}

#[cfg(feature = "postgres")]
impl HostStore for portcullis_store_postgres::PostgresStore {
    fn is_local(&self) -> bool {
        false
    }

    fn in_memory<T>(&self, f: impl FnOnce() -> T) -> Option<T> {
        portcullis_store_postgres::PostgresStore::in_memory(self, f)
    }
}

impl<T: HostStore> HostStore for Arc<T> {
    fn is_local(&self) -> bool {
        (**self).is_local()
    }

    fn in_memory<R>(&self, f: impl FnOnce() -> R) -> Option<R> {
        (**self).in_memory(f)
    }
}

/// Where writes go (see the [module docs](self)).
pub(crate) enum Writer<S: HostStore> {
    /// A local store: batched.
    Group(GroupCommitter<S>),
    /// A shared store: one retried transaction per operation.
    Direct,
}

impl<S: HostStore> Writer<S> {
    /// The writer `store` calls for.
    pub(crate) fn for_store(store: &Arc<S>) -> Self {
        if store.is_local() {
            Self::Group(GroupCommitter::new(Arc::clone(store)))
        } else {
            Self::Direct
        }
    }

    /// Applies `op` on this (blocking) thread: to a shared batch, or to a
    /// transaction of its own run again after a conflict. `Err` only when
    /// the transaction could not be opened or committed (nothing of `op`
    /// was applied).
    pub(crate) fn commit<T, F>(&self, store: &S, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'t, 'b, 'w> Fn(&mut Txn<'t, 'b, S::Write<'w>>) -> T + Send + Sync + 'static,
    {
        match self {
            Self::Group(committer) => committer.run(move |txn| op(&mut Txn(Via::Batch(txn)))),
            Self::Direct => run_direct(store, op),
        }
    }

    /// Applies `op` on this thread in a commit of its own when no other
    /// write is in flight on a local store ([`GroupCommitter::alone`]):
    /// `None` when callers are queued or a batch is being committed, or on
    /// a shared store, and then the caller hands `op` to
    /// [`Writer::commit`] on the blocking pool. What an async request saves
    /// this way is the hand-off to a blocking thread and back (two
    /// context switches and a wake-up of another thread) when nothing needs
    /// batching; the request's thread is held for one commit.
    pub(crate) fn commit_alone<T, F>(&self, op: &F) -> Option<Result<T, StoreError>>
    where
        F: for<'t, 'b, 'w> Fn(&mut Txn<'t, 'b, S::Write<'w>>) -> T,
    {
        let Self::Group(committer) = self else {
            return None;
        };
        let alone = committer.alone()?;
        Some(alone.run(|txn| op(&mut Txn(Via::Batch(txn)))))
    }

    /// [`Writer::commit_once`] on this thread when no other write is in
    /// flight on a local store (as [`Writer::commit_alone`]); `op` given
    /// back untouched otherwise, for [`Writer::commit_once`] on the
    /// blocking pool.
    pub(crate) fn commit_once_alone<T, F>(&self, op: F) -> Result<Result<T, StoreError>, F>
    where
        F: for<'t, 'b, 'w> FnOnce(Option<&mut Txn<'t, 'b, S::Write<'w>>>) -> T,
    {
        let Self::Group(committer) = self else {
            return Err(op);
        };
        let Some(alone) = committer.alone() else {
            return Err(op);
        };
        Ok(alone.run(|txn| op(Some(&mut Txn(Via::Batch(txn))))))
    }

    /// Applies `op`, which consumes what only the core may duplicate for a
    /// second attempt (an [`ExecutionTicket`](portcullis_core::ledger::ExecutionTicket)):
    /// with group commit it gets the shared batch (`Some`) and applies an
    /// engine `op_in` form; on a shared store it gets `None` and calls the
    /// engine's own `op` form, which retries a conflict itself.
    pub(crate) fn commit_once<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'t, 'b, 'w> FnOnce(Option<&mut Txn<'t, 'b, S::Write<'w>>>) -> T + Send + 'static,
    {
        match self {
            Self::Group(committer) => committer.run(move |txn| op(Some(&mut Txn(Via::Batch(txn))))),
            Self::Direct => Ok(op(None)),
        }
    }
}

/// The write transaction an operation is applied to through
/// [`Portcullis::commit`](crate::Portcullis::commit): one operation of a
/// group commit, or a transaction of its own. Pass it to the engine's
/// `op_in` forms; it cannot be committed by the operation.
pub struct Txn<'t, 'b, W>(Via<'t, 'b, W>);

enum Via<'t, 'b, W> {
    /// One operation of a batch.
    Batch(&'t mut BatchWrite<'b, W>),
    /// A transaction of this operation alone.
    Direct(Direct<'t, W>),
}

impl<W> std::fmt::Debug for Txn<'_, '_, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Via::Batch(_) => "Txn(batch)",
            Via::Direct(_) => "Txn(direct)",
        })
    }
}

/// A transaction of one operation, with what the retry loop needs to know:
/// whether the store reported a conflict, whether it reported the store
/// unreachable, and whether anything was written.
struct Direct<'t, W> {
    txn: &'t mut W,
    conflict: Cell<bool>,
    /// The first [`StoreErrorKind::Unavailable`] a call met.
    unavailable: RefCell<Option<StoreError>>,
    wrote: bool,
}

impl<W> Direct<'_, W> {
    fn saw<T>(&self, r: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(e) = &r {
            match e.kind() {
                StoreErrorKind::Conflict => self.conflict.set(true),
                StoreErrorKind::Unavailable => {
                    self.unavailable
                        .borrow_mut()
                        .get_or_insert_with(|| e.clone());
                }
                _ => {}
            }
        }
        r
    }
}

impl<W: WriteTransaction> ReadTransaction for Txn<'_, '_, W> {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        match self {
            Txn(Via::Batch(t)) => t.get(table, key),
            Txn(Via::Direct(d)) => d.saw(d.txn.get(table, key)),
        }
    }

    fn get_with<T>(
        &self,
        table: Table,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> T,
    ) -> Result<Option<T>, StoreError> {
        match self {
            Txn(Via::Batch(t)) => t.get_with(table, key, f),
            Txn(Via::Direct(d)) => d.saw(d.txn.get_with(table, key, f)),
        }
    }

    fn range(
        &self,
        table: Table,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        match self {
            Txn(Via::Batch(t)) => t.range(table, start, end, limit),
            Txn(Via::Direct(d)) => d.saw(d.txn.range(table, start, end, limit)),
        }
    }
}

impl<W: WriteTransaction> WriteTransaction for Txn<'_, '_, W> {
    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        match self {
            Txn(Via::Batch(t)) => t.put(table, key, value),
            Txn(Via::Direct(d)) => {
                d.wrote = true;
                let r = d.txn.put(table, key, value);
                d.saw(r)
            }
        }
    }

    fn delete(&mut self, table: Table, key: &[u8]) -> Result<bool, StoreError> {
        match self {
            Txn(Via::Batch(t)) => t.delete(table, key),
            Txn(Via::Direct(d)) => {
                d.wrote = true;
                let r = d.txn.delete(table, key);
                d.saw(r)
            }
        }
    }

    fn savepoint(&mut self) -> Result<Savepoint, StoreError> {
        match self {
            Txn(Via::Batch(t)) => t.savepoint(),
            Txn(Via::Direct(d)) => {
                let r = d.txn.savepoint();
                d.saw(r)
            }
        }
    }

    fn rollback_to(&mut self, savepoint: Savepoint) -> Result<(), StoreError> {
        match self {
            Txn(Via::Batch(t)) => t.rollback_to(savepoint),
            Txn(Via::Direct(d)) => {
                let r = d.txn.rollback_to(savepoint);
                d.saw(r)
            }
        }
    }

    /// Refused: the writer commits.
    fn commit(self) -> Result<(), StoreError> {
        Err(StoreError::new(
            StoreErrorKind::Other,
            "commit",
            "a request's operation cannot commit; the writer does",
        ))
    }
}

/// How long the shared writer keeps re-running an operation that meets
/// conflicts (see the [module docs](self)).
pub const CONFLICT_BUDGET: Duration = Duration::from_secs(3);

/// The longest pause between two attempts past the first
/// [`MAX_ATTEMPTS`].
pub const MAX_PAUSE: Duration = Duration::from_millis(50);

/// When an operation that met a conflict may run again.
struct Attempts {
    started: Instant,
    attempt: u32,
}

impl Attempts {
    fn new() -> Self {
        Self {
            started: Instant::now(),
            attempt: 1,
        }
    }

    /// Whether to run again after a conflict: the first [`MAX_ATTEMPTS`]
    /// at once (the store may pause in `begin_write`), then after a
    /// jittered pause doubling up to [`MAX_PAUSE`], within
    /// [`CONFLICT_BUDGET`].
    fn again(&mut self) -> bool {
        if self.attempt >= MAX_ATTEMPTS {
            let left = CONFLICT_BUDGET.saturating_sub(self.started.elapsed());
            if left.is_zero() {
                return false;
            }
            let doubled = 1u64 << (self.attempt - MAX_ATTEMPTS).min(6);
            let cap = Duration::from_millis(doubled).min(MAX_PAUSE).min(left);
            let nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
            let pause = rand::random_range(0..=nanos);
            std::thread::sleep(Duration::from_nanos(pause));
        }
        self.attempt = self.attempt.saturating_add(1);
        true
    }
}

/// Runs `op` on its own transaction of `store`, commits what it wrote, and
/// runs it again on a fresh one when the store reported a conflict (within
/// [`CONFLICT_BUDGET`], see [`Attempts::again`]). `Err` only when the
/// transaction could not be opened or committed; a conflict left after the
/// last attempt is `op`'s own answer (the store error it carries).
fn run_direct<S: Store, T>(
    store: &S,
    op: impl for<'t, 'b, 'w> Fn(&mut Txn<'t, 'b, S::Write<'w>>) -> T,
) -> Result<T, StoreError> {
    let mut attempts = Attempts::new();
    loop {
        let mut txn = match store.begin_write() {
            Ok(t) => t,
            Err(e) if e.kind() == StoreErrorKind::Conflict && attempts.again() => continue,
            Err(e) => return Err(e),
        };
        let (out, conflict, unavailable, wrote) = {
            let mut view = Txn(Via::Direct(Direct {
                txn: &mut txn,
                conflict: Cell::new(false),
                unavailable: RefCell::new(None),
                wrote: false,
            }));
            let out = op(&mut view);
            let Txn(Via::Direct(d)) = view else {
                unreachable!("built as Direct above")
            };
            (out, d.conflict.get(), d.unavailable.into_inner(), d.wrote)
        };
        if conflict {
            if attempts.again() {
                continue;
            }
            return Ok(out);
        }
        if wrote {
            match txn.commit() {
                Ok(()) => {}
                Err(e) if e.kind() == StoreErrorKind::Conflict && attempts.again() => continue,
                // A commit refused because an earlier call found the store
                // unreachable (a statement that lost its connection aborts
                // a PostgreSQL transaction) answers as that call did:
                // transient, whatever kind the store gave the refusal.
                Err(e) => return Err(transient(e, unavailable)),
            }
        }
        return Ok(out);
    }
}

/// A failed commit's answer: `e`, or the earlier `unavailable` failure
/// that `e` follows from when `e` itself is not transient.
fn transient(e: StoreError, unavailable: Option<StoreError>) -> StoreError {
    match unavailable {
        Some(first)
            if !matches!(
                e.kind(),
                StoreErrorKind::Unavailable | StoreErrorKind::Conflict
            ) =>
        {
            first
        }
        _ => e,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use portcullis_core::store::{ReadTransaction as _, WriteTransaction as _};
    use portcullis_store_memory::MemoryStore;

    use super::*;

    /// A memory store whose next `conflicts` commits fail with a conflict
    /// (applying nothing), as a serializable store's do while other
    /// writers of the same rows keep committing first.
    struct Contended {
        inner: MemoryStore,
        conflicts: AtomicU32,
    }

    struct ContendedWrite<'a> {
        inner: <MemoryStore as Store>::Write<'a>,
        conflicts: &'a AtomicU32,
        /// A put failed as if the connection was lost; as PostgreSQL
        /// does, the transaction then refuses to commit.
        aborted: bool,
    }

    /// The key whose put fails as a statement whose connection was lost
    /// in the middle of a transaction (a database restart).
    const LOST: &[u8] = b"lost";

    impl Store for Contended {
        type Read<'a> = <MemoryStore as Store>::Read<'a>;
        type Write<'a> = ContendedWrite<'a>;

        fn begin_read(&self) -> Result<Self::Read<'_>, StoreError> {
            self.inner.begin_read()
        }

        fn begin_write(&self) -> Result<ContendedWrite<'_>, StoreError> {
            Ok(ContendedWrite {
                inner: self.inner.begin_write()?,
                conflicts: &self.conflicts,
                aborted: false,
            })
        }
    }

    impl ReadTransaction for ContendedWrite<'_> {
        fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
            self.inner.get(table, key)
        }

        fn get_with<T>(
            &self,
            table: Table,
            key: &[u8],
            f: impl FnOnce(&[u8]) -> T,
        ) -> Result<Option<T>, StoreError> {
            self.inner.get_with(table, key, f)
        }

        fn range(
            &self,
            table: Table,
            start: Bound<&[u8]>,
            end: Bound<&[u8]>,
            limit: usize,
        ) -> Result<Vec<Entry>, StoreError> {
            self.inner.range(table, start, end, limit)
        }
    }

    impl WriteTransaction for ContendedWrite<'_> {
        fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
            if key == LOST {
                self.aborted = true;
                return Err(StoreError::new(
                    StoreErrorKind::Unavailable,
                    "put",
                    "connection closed",
                ));
            }
            self.inner.put(table, key, value)
        }

        fn delete(&mut self, table: Table, key: &[u8]) -> Result<bool, StoreError> {
            self.inner.delete(table, key)
        }

        fn savepoint(&mut self) -> Result<Savepoint, StoreError> {
            self.inner.savepoint()
        }

        fn rollback_to(&mut self, savepoint: Savepoint) -> Result<(), StoreError> {
            self.inner.rollback_to(savepoint)
        }

        fn commit(self) -> Result<(), StoreError> {
            if self.aborted {
                return Err(StoreError::new(
                    StoreErrorKind::Other,
                    "commit",
                    "a statement of this transaction failed",
                ));
            }
            let left = self.conflicts.load(Ordering::SeqCst);
            if left > 0 {
                self.conflicts.store(left - 1, Ordering::SeqCst);
                return Err(StoreError::new(
                    StoreErrorKind::Conflict,
                    "commit",
                    "injected",
                ));
            }
            self.inner.commit()
        }
    }

    fn contended(conflicts: u32) -> Contended {
        Contended {
            inner: MemoryStore::new(),
            conflicts: AtomicU32::new(conflicts),
        }
    }

    #[test]
    fn more_conflicts_in_a_row_than_max_attempts_still_commit_within_the_budget() {
        let store = contended(3 * MAX_ATTEMPTS);
        let started = Instant::now();
        let out = run_direct(&store, |txn| txn.put(Table::Grants, b"k", b"v"));
        assert_eq!(out, Ok(Ok(())), "committed after {:?}", started.elapsed());
        assert_eq!(store.conflicts.load(Ordering::SeqCst), 0);
        let read = store.begin_read().unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(read.get(Table::Grants, b"k"), Ok(Some(_))));
    }

    #[test]
    fn conflicts_past_the_budget_are_the_answer_and_apply_nothing() {
        let store = contended(u32::MAX);
        let started = Instant::now();
        let out = run_direct(&store, |txn| txn.put(Table::Grants, b"k", b"v"));
        let took = started.elapsed();
        assert!(
            matches!(&out, Err(e) if e.kind() == StoreErrorKind::Conflict),
            "{out:?}"
        );
        assert!(took >= CONFLICT_BUDGET, "{took:?}");
        assert!(took < CONFLICT_BUDGET + Duration::from_secs(1), "{took:?}");
        let read = store.begin_read().unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(read.get(Table::Grants, b"k"), Ok(None)));
    }

    #[test]
    fn a_commit_refused_after_a_lost_connection_answers_503() {
        let store = contended(0);
        let out = run_direct(&store, |txn| {
            txn.put(Table::Grants, b"k", b"v")?;
            txn.put(Table::Grants, LOST, b"v")
        });
        let e = match out {
            Err(e) => e,
            Ok(r) => panic!("committed: {r:?}"),
        };
        assert_eq!(e.kind(), StoreErrorKind::Unavailable, "{e}");
        let answer = crate::respond::store(&e);
        assert_eq!(answer.status(), axum::http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            answer
                .headers()
                .contains_key(axum::http::header::RETRY_AFTER)
        );
        let read = store.begin_read().unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(read.get(Table::Grants, b"k"), Ok(None)));
    }
}
