//! [`GroupCommitter`]: many callers' operations in one durable commit.
//! Store-agnostic: redb's `RedbStore` is what it was built for, and the
//! memory store and the fault-injection stores use it too. A crate of its
//! own because it blocks threads and reads a clock, which the core never
//! does, and so that a host builds it without redb.
//!
//! A durable commit costs an fsync, and redb serialises writers, so
//! callers that each commit wait in line for every fsync before theirs.
//! The committer gathers the operations of concurrent callers into one
//! write transaction and commits it once:
//!
//! * **Leader and followers.** A caller queues its operation; if no batch
//!   is being built, it becomes the leader: it opens the transaction,
//!   applies the queued operations in arrival order, commits, and wakes the
//!   callers of the batch. Whoever arrives meanwhile queues for the next
//!   batch, whose leader is one of them. No thread of its own.
//! * **Bounded, adaptive batches.** A batch holds at most `max_batch`
//!   operations. A leader alone (the previous batch had one operation)
//!   commits at once; under load it waits up to `max_wait` for as many
//!   callers as the previous batch had, so the batch size follows the load.
//! * **Answers after durability.** Each caller gets its operation's answer
//!   only after the commit returned; a failed commit (or a failure to open
//!   the transaction) fails every operation of the batch with the store's
//!   error and applies none of them, and each caller may retry.
//! * **No fsync for nothing.** A batch in which no operation wrote (reads,
//!   refusals) is dropped instead of committed.
//! * **Isolation of operations.** Each operation runs under a savepoint: an
//!   operation that panics is rolled back (its caller's thread gets the
//!   panic), and one whose own rollback failed poisons the batch, which
//!   then fails whole. Engine operations (`Engine::*_in`) roll themselves
//!   back when the store fails under them.
//!
//! The order of operations in a batch is the order of arrival, and each
//! sees the writes of the ones before it: two refreshes of one token in a
//! batch rotate it once, and the second is judged as a reuse (or by the
//! retry window), exactly as with one commit each.

use std::collections::VecDeque;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use portcullis_core::store::{
    Entry, ReadTransaction, Savepoint, Store, StoreError, StoreErrorKind, Table, WriteTransaction,
};

/// One queued operation, type-erased: it writes its answer into its
/// caller's slot.
type Job<S> = Box<dyn for<'w> FnOnce(&mut BatchWrite<'_, <S as Store>::Write<'w>>) + Send>;

/// How a caller's operation ended, as the leader tells it.
enum Settled {
    /// Committed; the answer is in the caller's slot.
    Done,
    /// The operation panicked (and was rolled back); the payload is resumed
    /// on the caller's thread.
    Panicked(Box<dyn std::any::Any + Send>),
    /// The batch failed; nothing of it was applied.
    Failed(StoreError),
}

/// A caller's place in the queue.
struct Ticket {
    settled: Mutex<Option<Settled>>,
}

struct Queued<S: Store> {
    job: Job<S>,
    ticket: Arc<Ticket>,
}

struct Queue<S: Store> {
    waiting: VecDeque<Queued<S>>,
    /// A leader is building or committing a batch.
    leading: bool,
    /// How many operations the last batch had.
    last_batch: usize,
}

/// Gathers concurrent callers' operations into one durable commit of `S`
/// (any store: redb's is what it is for; the fault-injection tests use
/// others); see the [module docs](self).
pub struct GroupCommitter<S: Store> {
    store: Arc<S>,
    queue: Mutex<Queue<S>>,
    /// A batch settled, or the leader stepped down.
    settled: Condvar,
    /// An operation arrived (the leader may be waiting for more).
    arrived: Condvar,
    max_batch: usize,
    max_wait: Duration,
    /// Batches that reached `commit` (successfully or not).
    commits: AtomicU64,
    /// Operations applied in those batches.
    operations: AtomicU64,
}

impl<S: Store> std::fmt::Debug for GroupCommitter<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommitter")
            .field("max_batch", &self.max_batch)
            .field("max_wait", &self.max_wait)
            .finish_non_exhaustive()
    }
}

/// The default bound on a batch's operations.
pub const DEFAULT_MAX_BATCH: usize = 128;
/// The default longest wait of a leader for more callers.
pub const DEFAULT_MAX_WAIT: Duration = Duration::from_micros(200);

impl<S> GroupCommitter<S>
where
    S: Store + Send + Sync + 'static,
{
    /// A committer over `store`, with [`DEFAULT_MAX_BATCH`] and
    /// [`DEFAULT_MAX_WAIT`]. Its commits have the store's durability
    /// (`Immediate` unless the host chose otherwise).
    #[must_use]
    pub fn new(store: Arc<S>) -> Self {
        Self::with_limits(store, DEFAULT_MAX_BATCH, DEFAULT_MAX_WAIT)
    }

    /// A committer with its own bounds: at most `max_batch` operations per
    /// commit (at least one), and a leader waits at most `max_wait` for
    /// more callers.
    #[must_use]
    pub fn with_limits(store: Arc<S>, max_batch: usize, max_wait: Duration) -> Self {
        Self {
            store,
            queue: Mutex::new(Queue {
                waiting: VecDeque::new(),
                leading: false,
                last_batch: 0,
            }),
            settled: Condvar::new(),
            arrived: Condvar::new(),
            max_batch: max_batch.max(1),
            max_wait,
            commits: AtomicU64::new(0),
            operations: AtomicU64::new(0),
        }
    }

    /// The store the committer writes to (for reads).
    #[must_use]
    pub fn store(&self) -> &Arc<S> {
        &self.store
    }

    /// How many operations are queued for the next batch right now.
    #[must_use]
    pub fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }

    /// How many batches were committed (or failed to commit) so far; a
    /// batch that wrote nothing is dropped, not committed, and not counted.
    #[must_use]
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// How many operations those batches held.
    #[must_use]
    pub fn operations(&self) -> u64 {
        self.operations.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, Queue<S>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies `op` to a write transaction shared with other callers and
    /// returns its answer once that transaction is durable; `Err` when the
    /// batch failed to open or commit, in which case nothing of `op` (or of
    /// any operation of its batch) was applied.
    ///
    /// `op` must make every change through the transaction it is given and
    /// must not answer anyone itself: its answer is only true once the
    /// commit is. It runs on whichever caller's thread leads the batch, and
    /// must not call `run` or open a write transaction of the store itself:
    /// the batch holds the store's only writer, so either would wait
    /// forever.
    pub fn run<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'w> FnOnce(&mut BatchWrite<'_, S::Write<'w>>) -> T + Send + 'static,
    {
        let answer: Arc<Mutex<Option<T>>> = Arc::new(Mutex::new(None));
        let slot = Arc::clone(&answer);
        let ticket = Arc::new(Ticket {
            settled: Mutex::new(None),
        });
        let job: Job<S> = Box::new(move |txn| {
            let out = op(txn);
            *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(out);
        });
        let mut queue = self.lock();
        queue.waiting.push_back(Queued {
            job,
            ticket: Arc::clone(&ticket),
        });
        self.arrived.notify_one();
        loop {
            if let Some(settled) = take(&ticket) {
                drop(queue);
                return match settled {
                    Settled::Done => Ok(answer
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .take()
                        .ok_or_else(|| {
                            StoreError::new(StoreErrorKind::Other, "group commit", "no answer")
                        })?),
                    Settled::Panicked(payload) => panic::resume_unwind(payload),
                    Settled::Failed(e) => Err(e),
                };
            }
            if queue.leading || queue.waiting.is_empty() {
                queue = self
                    .settled
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            queue.leading = true;
            queue = self.lead(queue);
            queue.leading = false;
            self.settled.notify_all();
        }
    }

    /// Leadership of a batch of one, taken at once when the committer is
    /// idle: no batch is being built or committed and nobody is queued.
    /// `None` otherwise, and then the caller queues with
    /// [`GroupCommitter::run`] where it may wait (a blocking thread).
    ///
    /// For an async host: it never waits for another caller, so the
    /// request's own thread can apply its operation and commit when no
    /// other write is in flight, and hand off to a blocking thread only
    /// when callers actually queue. The thread is held for one commit of
    /// one operation; callers that arrive meanwhile queue for the next
    /// batch as usual, one of them leading it once [`Alone`] is used or
    /// dropped.
    #[must_use]
    pub fn alone(&self) -> Option<Alone<'_, S>> {
        let mut queue = self.lock();
        if queue.leading || !queue.waiting.is_empty() {
            return None;
        }
        queue.leading = true;
        Some(Alone { committer: self })
    }

    /// Builds, applies and commits one batch; called with the lock held and
    /// returns with it held.
    fn lead<'q>(&'q self, mut queue: MutexGuard<'q, Queue<S>>) -> MutexGuard<'q, Queue<S>> {
        let target = queue.last_batch.clamp(1, self.max_batch);
        if target > 1 && queue.waiting.len() < target {
            let deadline = Instant::now() + self.max_wait;
            while queue.waiting.len() < target {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                queue = self
                    .arrived
                    .wait_timeout(queue, left)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        }
        let take = queue.waiting.len().min(self.max_batch);
        let batch: Vec<Queued<S>> = queue.waiting.drain(..take).collect();
        queue.last_batch = batch.len();
        drop(queue);
        let outcome = self.apply(batch);
        let queue = self.lock();
        for (ticket, settled) in outcome {
            *ticket
                .settled
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(settled);
        }
        queue
    }

    /// Applies `batch` in one transaction and commits it; how each
    /// operation settled.
    fn apply(&self, batch: Vec<Queued<S>>) -> Vec<(Arc<Ticket>, Settled)> {
        let mut txn = match self.store.begin_write() {
            Ok(txn) => txn,
            Err(e) => return fail_all(batch.into_iter().map(|q| q.ticket), &e),
        };
        let mut settled = Vec::with_capacity(batch.len());
        let mut poisoned: Option<StoreError> = None;
        let mut wrote = false;
        for Queued { job, ticket } in batch {
            if poisoned.is_some() {
                settled.push((ticket, None));
                continue;
            }
            let mark = match txn.savepoint() {
                Ok(mark) => mark,
                Err(e) => {
                    poisoned = Some(e);
                    settled.push((ticket, None));
                    continue;
                }
            };
            let mut view = BatchWrite {
                txn: &mut txn,
                lost: None,
                wrote: false,
            };
            let ran = panic::catch_unwind(AssertUnwindSafe(|| job(&mut view)));
            wrote |= view.wrote;
            if let Some(e) = view.lost.take() {
                poisoned = Some(e);
            }
            match ran {
                Ok(()) => settled.push((ticket, Some(Settled::Done))),
                Err(payload) => {
                    if let Err(e) = txn.rollback_to(mark) {
                        poisoned = Some(e);
                    }
                    settled.push((ticket, Some(Settled::Panicked(payload))));
                }
            }
        }
        let failure = if let Some(e) = poisoned {
            Some(e)
        } else if !wrote {
            // Nothing to make durable (every operation was a read or a
            // refusal): no fsync.
            None
        } else {
            self.commits.fetch_add(1, Ordering::Relaxed);
            self.operations
                .fetch_add(settled.len() as u64, Ordering::Relaxed);
            txn.commit().err()
        };
        settled
            .into_iter()
            .map(|(ticket, s)| {
                let s = match (s, &failure) {
                    (Some(Settled::Panicked(p)), _) => Settled::Panicked(p),
                    (_, Some(e)) => Settled::Failed(e.clone()),
                    (Some(s), None) => s,
                    (None, None) => Settled::Failed(StoreError::new(
                        StoreErrorKind::Other,
                        "group commit",
                        "operation skipped",
                    )),
                };
                (ticket, s)
            })
            .collect()
    }
}

/// Leadership of a batch of one operation ([`GroupCommitter::alone`]):
/// [`Alone::run`] applies the operation in a transaction of its own and
/// commits it on this thread. Dropping it unused steps down, and a queued
/// caller leads the next batch.
#[must_use = "holding leadership unused keeps every other writer waiting"]
pub struct Alone<'c, S>
where
    S: Store + Send + Sync + 'static,
{
    committer: &'c GroupCommitter<S>,
}

impl<S> std::fmt::Debug for Alone<'_, S>
where
    S: Store + Send + Sync + 'static,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Alone")
    }
}

impl<S> Alone<'_, S>
where
    S: Store + Send + Sync + 'static,
{
    /// Applies `op` to a write transaction of its own and commits it (no
    /// commit when `op` wrote nothing), with the same contract as
    /// [`GroupCommitter::run`]: `op` makes every change through the
    /// transaction, and `Err` means nothing of it was applied. A panic in
    /// `op` drops the transaction uncommitted and reaches the caller.
    pub fn run<T, F>(self, op: F) -> Result<T, StoreError>
    where
        F: for<'w> FnOnce(&mut BatchWrite<'_, S::Write<'w>>) -> T,
    {
        let committer = self.committer;
        let mut txn = committer.store.begin_write()?;
        let mut view = BatchWrite {
            txn: &mut txn,
            lost: None,
            wrote: false,
        };
        let answer = op(&mut view);
        let (lost, wrote) = (view.lost.take(), view.wrote);
        if let Some(e) = lost {
            return Err(e);
        }
        if wrote {
            committer.commits.fetch_add(1, Ordering::Relaxed);
            committer.operations.fetch_add(1, Ordering::Relaxed);
            txn.commit()?;
        }
        Ok(answer)
    }
}

impl<S> Drop for Alone<'_, S>
where
    S: Store + Send + Sync + 'static,
{
    fn drop(&mut self) {
        let mut queue = self.committer.lock();
        queue.leading = false;
        queue.last_batch = 1;
        drop(queue);
        self.committer.settled.notify_all();
    }
}

fn take(ticket: &Ticket) -> Option<Settled> {
    ticket
        .settled
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
}

fn fail_all(
    tickets: impl Iterator<Item = Arc<Ticket>>,
    e: &StoreError,
) -> Vec<(Arc<Ticket>, Settled)> {
    tickets.map(|t| (t, Settled::Failed(e.clone()))).collect()
}

/// The shared write transaction as one operation of a batch sees it. It
/// cannot be committed by the operation: the committer commits the batch.
pub struct BatchWrite<'a, W> {
    txn: &'a mut W,
    /// A rollback failed: the batch is lost.
    lost: Option<StoreError>,
    /// The operation wrote (the batch needs a commit).
    wrote: bool,
}

impl<W> std::fmt::Debug for BatchWrite<'_, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BatchWrite")
    }
}

impl<W: WriteTransaction> ReadTransaction for BatchWrite<'_, W> {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.txn.get(table, key)
    }

    fn get_with<T>(
        &self,
        table: Table,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> T,
    ) -> Result<Option<T>, StoreError> {
        self.txn.get_with(table, key, f)
    }

    fn range(
        &self,
        table: Table,
        start: std::ops::Bound<&[u8]>,
        end: std::ops::Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        self.txn.range(table, start, end, limit)
    }
}

impl<W: WriteTransaction> WriteTransaction for BatchWrite<'_, W> {
    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.wrote = true;
        self.txn.put(table, key, value)
    }

    fn delete(&mut self, table: Table, key: &[u8]) -> Result<bool, StoreError> {
        self.wrote = true;
        self.txn.delete(table, key)
    }

    fn savepoint(&mut self) -> Result<Savepoint, StoreError> {
        self.txn.savepoint()
    }

    fn rollback_to(&mut self, savepoint: Savepoint) -> Result<(), StoreError> {
        let r = self.txn.rollback_to(savepoint);
        if let Err(e) = &r {
            self.lost = Some(e.clone());
        }
        r
    }

    /// Refused: the committer commits the whole batch.
    fn commit(self) -> Result<(), StoreError> {
        Err(StoreError::new(
            StoreErrorKind::Other,
            "commit",
            "an operation of a group commit cannot commit; its committer does",
        ))
    }
}
