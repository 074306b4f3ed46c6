//! [`FailingStore`]: a store wrapper that fails the N-th `get`, `put`,
//! `delete`, `range` or `commit`, for the fault-injection suite, and
//! [`under_faults`], which runs one operation once per possible failure
//! point and checks that each failure left nothing of it behind.
#![allow(
    dead_code,
    reason = "the fault-injection suite grows over several commits"
)]

use std::fmt::Debug;
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard, PoisonError};

use portcullis::store::{
    Entry, ReadTransaction, Savepoint, Store, StoreError, StoreErrorKind, Table, WriteTransaction,
};

/// A store call the wrapper can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Call {
    Get,
    Range,
    Put,
    Delete,
    Commit,
}

/// What to fail.
#[derive(Debug, Default)]
struct Plan {
    /// Counted calls left before the failure; `0` is disarmed.
    countdown: usize,
    /// Only calls of this kind count (all when `None`).
    only: Option<Call>,
    /// Fail every counted call from the countdown on, not just one.
    repeat: bool,
    kind: Option<StoreErrorKind>,
    /// How many failures fired since the plan was set.
    fired: usize,
    /// Counted calls since the plan was set.
    calls: usize,
    /// A failed commit lands (becomes durable) when a coin drawn from this
    /// state says so; `None`: a failed commit never lands.
    landing: Option<u64>,
    /// Whether the last failed commit landed.
    landed: bool,
}

impl Plan {
    /// Counts `call`; the error to answer it with, if it is the one to fail.
    fn tick(&mut self, call: Call) -> Option<StoreError> {
        if self.only.is_some_and(|c| c != call) {
            return None;
        }
        self.calls += 1;
        if self.countdown == 0 {
            return None;
        }
        self.countdown -= 1;
        if self.countdown > 0 {
            return None;
        }
        if self.repeat {
            self.countdown = 1;
        }
        self.fired += 1;
        let kind = self.kind.unwrap_or(StoreErrorKind::Io);
        Some(StoreError::new(kind, "injected", format_args!("{call:?}")))
    }

    /// A coin for a failed commit: did it land?
    fn coin(&mut self) -> bool {
        let Some(state) = self.landing.as_mut() else {
            return false;
        };
        // xorshift64: enough to spread landings over a run.
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state & 1 == 1
    }
}

/// Wraps a store and fails the calls its plan names.
pub(crate) struct FailingStore<S> {
    inner: S,
    plan: Mutex<Plan>,
}

impl<S: Store> FailingStore<S> {
    pub(crate) fn new(inner: S) -> Self {
        Self {
            inner,
            plan: Mutex::new(Plan::default()),
        }
    }

    /// The wrapped store, to read without counting.
    pub(crate) fn inner(&self) -> &S {
        &self.inner
    }

    fn plan(&self) -> MutexGuard<'_, Plan> {
        self.plan.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The `n`-th call from now (1-based) fails with an I/O error.
    pub(crate) fn fail_nth(&self, n: usize) {
        self.set(n, None, false, StoreErrorKind::Io);
    }

    /// The `n`-th call of kind `only` (every kind when `None`) fails with
    /// `kind`, and with `repeat` every one after it too.
    pub(crate) fn set(&self, n: usize, only: Option<Call>, repeat: bool, kind: StoreErrorKind) {
        let mut plan = self.plan();
        let landing = plan.landing;
        *plan = Plan {
            countdown: n,
            only,
            repeat,
            kind: Some(kind),
            landing,
            ..Plan::default()
        };
    }

    /// From now on, a failed commit lands (is applied, then reported as
    /// failed) when a coin seeded with `seed` says so.
    pub(crate) fn landing(&self, seed: u64) {
        self.plan().landing = Some(seed | 1);
    }

    /// Stops failing.
    pub(crate) fn disarm(&self) {
        self.plan().countdown = 0;
    }

    /// How many failures fired since the plan was set.
    pub(crate) fn fired(&self) -> usize {
        self.plan().fired
    }

    /// Counted calls since the plan was set.
    pub(crate) fn calls(&self) -> usize {
        self.plan().calls
    }

    /// Whether the last failed commit landed.
    pub(crate) fn landed(&self) -> bool {
        self.plan().landed
    }
}

impl<S: Store> Store for FailingStore<S> {
    type Read<'a>
        = Failing<'a, S::Read<'a>>
    where
        Self: 'a;
    type Write<'a>
        = Failing<'a, S::Write<'a>>
    where
        Self: 'a;

    fn begin_read(&self) -> Result<Self::Read<'_>, StoreError> {
        Ok(Failing {
            inner: self.inner.begin_read()?,
            plan: &self.plan,
        })
    }

    fn begin_write(&self) -> Result<Self::Write<'_>, StoreError> {
        Ok(Failing {
            inner: self.inner.begin_write()?,
            plan: &self.plan,
        })
    }
}

/// A transaction of a [`FailingStore`].
pub(crate) struct Failing<'a, T> {
    inner: T,
    plan: &'a Mutex<Plan>,
}

impl<T> Failing<'_, T> {
    fn tick(&self, call: Call) -> Result<(), StoreError> {
        let mut plan = self.plan.lock().unwrap_or_else(PoisonError::into_inner);
        plan.tick(call).map_or(Ok(()), Err)
    }
}

impl<T: ReadTransaction> ReadTransaction for Failing<'_, T> {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.tick(Call::Get)?;
        self.inner.get(table, key)
    }

    /// Counted and failed as a `get`: the same read, lent.
    fn get_with<V>(
        &self,
        table: Table,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> V,
    ) -> Result<Option<V>, StoreError> {
        self.tick(Call::Get)?;
        self.inner.get_with(table, key, f)
    }

    fn range(
        &self,
        table: Table,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        self.tick(Call::Range)?;
        self.inner.range(table, start, end, limit)
    }
}

impl<T: WriteTransaction> WriteTransaction for Failing<'_, T> {
    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.tick(Call::Put)?;
        self.inner.put(table, key, value)
    }

    fn delete(&mut self, table: Table, key: &[u8]) -> Result<bool, StoreError> {
        self.tick(Call::Delete)?;
        self.inner.delete(table, key)
    }

    fn savepoint(&mut self) -> Result<Savepoint, StoreError> {
        self.inner.savepoint()
    }

    fn rollback_to(&mut self, savepoint: Savepoint) -> Result<(), StoreError> {
        self.inner.rollback_to(savepoint)
    }

    fn commit(self) -> Result<(), StoreError> {
        let plan = self.plan;
        let failure = self.tick(Call::Commit);
        let Err(e) = failure else {
            return self.inner.commit();
        };
        let mut plan = plan.lock().unwrap_or_else(PoisonError::into_inner);
        let lands = plan.coin();
        plan.landed = lands;
        drop(plan);
        if lands {
            // The commit became durable, but its caller hears it failed.
            self.inner.commit()?;
        }
        Err(e)
    }
}

/// Every record of every table, in order: what "the store's state" means
/// when a test compares two states.
pub(crate) fn dump<S: Store>(store: &S) -> Vec<Vec<Entry>> {
    let r = store.begin_read().unwrap();
    Table::ALL
        .iter()
        .map(|&t| {
            r.range(t, Bound::Unbounded, Bound::Unbounded, usize::MAX)
                .unwrap()
        })
        .collect()
}

/// Runs `op` with its `n`-th store call failing, for `n = 1, 2, …` until a
/// run reaches no failure; every failed run must answer with an error and
/// leave the store exactly as it was before. Returns the clean run's answer
/// and how many failure points the operation had.
pub(crate) fn under_faults<S: Store, T: Debug, E: Debug>(
    store: &FailingStore<S>,
    mut op: impl FnMut() -> Result<T, E>,
) -> (Result<T, E>, usize) {
    let before = dump(store.inner());
    for n in 1.. {
        store.fail_nth(n);
        let out = op();
        let fired = store.fired();
        store.disarm();
        if fired == 0 {
            return (out, n - 1);
        }
        assert!(
            out.is_err(),
            "store call {n} failed but the operation answered {out:?}"
        );
        assert!(
            dump(store.inner()) == before,
            "a failure at store call {n} left a trace in the store ({out:?})"
        );
    }
    unreachable!("1.. does not end")
}
