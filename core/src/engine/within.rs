//! Which transaction an operation runs in: [`Own`] or the caller's.

use alloc::vec::Vec;
use core::cell::Cell;
use core::ops::Bound;

use super::{Engine, MAX_ATTEMPTS};
use crate::store::{
    Entry, ReadTransaction, Savepoint, Store, StoreError, StoreErrorKind, Table, WriteTransaction,
};

/// The engine opens, and commits, the transaction an operation runs in:
/// the first argument of every operation that may take the caller's
/// transaction instead (`engine.revoke_grant(Own, &id, now)`).
///
/// A write operation runs in one write transaction of its own; when the
/// store reports a [`Conflict`](crate::store::StoreErrorKind::Conflict) it
/// runs again on a fresh one, up to [`MAX_ATTEMPTS`](super::MAX_ATTEMPTS)
/// times in all, and it commits what it wrote unless the store failed (a
/// transaction that wrote nothing is dropped, not committed). A read
/// operation runs in one read transaction of its own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Own;

/// Where a write operation of [`Engine<S>`] runs: [`Own`], a transaction
/// the engine opens, retries and commits, or `&mut txn`, a
/// [`WriteTransaction`] the caller owns and commits (group commit: see
/// [operations in a shared
/// transaction](crate::store#operations-in-a-shared-transaction)).
///
/// In the caller's transaction the operation runs under a savepoint: if
/// the store fails under it, the engine rolls back to the savepoint, so
/// the failed operation leaves nothing in `txn`, and answers with the
/// store's error. A decided answer (success or refusal) keeps what the
/// operation wrote. If the rollback itself fails, that failure is the
/// answer and `txn` is lost: drop it, do not commit it. The engine never
/// retries in a transaction it does not own.
///
/// A `txn: &mut W` you hold is passed as it is (`engine.op(txn, …)`), or
/// as `&mut *txn` when you use it again after the call: a generic argument
/// is moved, not reborrowed.
///
/// Sealed: [`Own`] and `&mut W` are the only two forms.
pub trait Within<S: Store>: sealed::RunWrite<S> {}

impl<S: Store> Within<S> for Own {}

impl<S: Store, W: WriteTransaction> Within<S> for &mut W {}

/// Where a read operation of [`Engine<S>`] runs: [`Own`], a read
/// transaction the engine opens, or `&txn`, any [`ReadTransaction`] the
/// caller holds (a write transaction too: the operation only reads, so
/// `txn` is left as it was).
///
/// Sealed: [`Own`] and `&R` are the only two forms.
pub trait WithinRead<S: Store>: sealed::RunRead<S> {}

impl<S: Store> WithinRead<S> for Own {}

impl<S: Store, R: ReadTransaction> WithinRead<S> for &R {}

impl<S: Store> Engine<S> {
    /// Runs `f` in one write transaction and commits what it wrote — also
    /// when `f` answers with an error, since a decided rejection may have
    /// recorded something (a revocation) — unless the store itself failed,
    /// in which case the transaction is discarded whole and the store's
    /// error is the answer.
    ///
    /// When the store reports a [`StoreErrorKind::Conflict`] (an optimistic
    /// store lost a race, at any read, write or the commit), the
    /// transaction is discarded and `f` runs again on a fresh one, up to
    /// [`MAX_ATTEMPTS`] times in all. `f` must therefore be re-runnable: it
    /// takes its inputs by reference or clones them per attempt, and every
    /// effect it has goes through the transaction, so a discarded attempt
    /// leaves nothing behind (random draws are spent, which is harmless).
    pub(crate) fn run_write<'s, T, E: From<StoreError>>(
        &'s self,
        mut f: impl FnMut(&mut Txn<'_, S::Write<'s>>) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut out = None;
        match self.attempt_writes(&mut |txn| out = Some(f(txn))) {
            Some(failure) => Err(failure.into()),
            None => out.expect("an attempt that did not fail ran the operation"),
        }
    }

    /// The attempts of [`Engine::run_write`], compiled once per store
    /// rather than once per operation: `f` keeps its own answer, and this
    /// answers with the store's failure of the last attempt, if it failed
    /// (then `f` may not have run).
    fn attempt_writes<'s>(
        &'s self,
        f: &mut dyn FnMut(&mut Txn<'_, S::Write<'s>>),
    ) -> Option<StoreError> {
        let mut attempt = 1;
        loop {
            let mut write = match self.store.begin_write() {
                Ok(w) => w,
                Err(e) if e.kind() == StoreErrorKind::Conflict && attempt < MAX_ATTEMPTS => {
                    attempt += 1;
                    continue;
                }
                Err(e) => return Some(e),
            };
            let (failure, dirty) = {
                let mut txn = Txn::new(&mut write);
                f(&mut txn);
                (txn.failure.take(), txn.dirty)
            };
            if let Some(e) = failure {
                // The store failed under `f`: its error is the answer (the
                // operation answered with it too), and nothing commits.
                if e.kind() == StoreErrorKind::Conflict && attempt < MAX_ATTEMPTS {
                    attempt += 1;
                    continue;
                }
                return Some(e);
            }
            if dirty {
                match write.commit() {
                    Ok(()) => {}
                    Err(e) if e.kind() == StoreErrorKind::Conflict && attempt < MAX_ATTEMPTS => {
                        attempt += 1;
                        continue;
                    }
                    Err(e) => return Some(e),
                }
            }
            return None;
        }
    }

    /// Applies one operation body to `txn`, a transaction someone else
    /// owns, atomically: a savepoint first, and if the store fails under
    /// `f` a rollback to it, so the failed operation leaves nothing in
    /// `txn`; the answer is then the store's error, even where `f` went on
    /// or swallowed it. A decided answer (success or refusal) keeps what
    /// `f` wrote. If the rollback itself fails, that failure is the answer
    /// and `txn` is lost: its owner must drop it, not commit it.
    pub(crate) fn within<W: WriteTransaction, T, E: From<StoreError>>(
        txn: &mut W,
        f: impl FnOnce(&mut Txn<'_, W>) -> Result<T, E>,
    ) -> Result<T, E> {
        let mark = txn.savepoint()?;
        let (out, failure) = {
            let mut t = Txn::new(txn);
            let out = f(&mut t);
            (out, t.failure.take())
        };
        match failure {
            None => out,
            Some(e) => {
                txn.rollback_to(mark)?;
                Err(e.into())
            }
        }
    }

    /// Runs `f` in one read transaction.
    pub(crate) fn read<'s, T, E: From<StoreError>>(
        &'s self,
        f: impl FnOnce(&S::Read<'s>) -> Result<T, E>,
    ) -> Result<T, E> {
        let txn = self.store.begin_read()?;
        f(&txn)
    }
}

/// A write transaction as one operation body sees it, whoever owns it:
/// [`Engine::run_write`] wraps the transaction it opened ([`Own`]),
/// [`Engine::within`] the caller's (`&mut W`). The two never nest: an
/// operation hands its body the `Txn` of whichever form it was called in,
/// never a `Txn` around a `Txn`, and [`Own`] takes no savepoint it would
/// never roll back to (a failed `run_write` attempt is discarded whole).
///
/// A short body is written inline, in the closure the operation hands to
/// its form, and is compiled once per form a program uses. A long one (the
/// `begin` forms, the ticket operations, the endpoints, the sweeps) lives
/// in a private `op_body` generic over the transaction alone, not over the
/// form: over a store whose own write transaction is what callers pass,
/// both forms then share one compiled copy (`Txn<'_, S::Write>`). Public only to be named
/// by the sealed traits; no other crate can reach it. It remembers the
/// first failure the store reported through it, so the operation's answer is that failure
/// even where the body went on or swallowed it, and whether anything was
/// written, so a transaction that wrote nothing is not committed.
pub struct Txn<'a, W> {
    inner: &'a mut W,
    dirty: bool,
    failure: Cell<Option<StoreError>>,
}

impl<'a, W> Txn<'a, W> {
    fn new(inner: &'a mut W) -> Self {
        Self {
            inner,
            dirty: false,
            failure: Cell::new(None),
        }
    }

    /// Keeps the first failure.
    fn note<T>(&self, r: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(e) = &r {
            let first = self.failure.take().unwrap_or_else(|| e.clone());
            self.failure.set(Some(first));
        }
        r
    }
}

impl<W: WriteTransaction> ReadTransaction for Txn<'_, W> {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.note(self.inner.get(table, key))
    }

    fn get_with<T>(
        &self,
        table: Table,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> T,
    ) -> Result<Option<T>, StoreError> {
        self.note(self.inner.get_with(table, key, f))
    }

    fn range(
        &self,
        table: Table,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        self.note(self.inner.range(table, start, end, limit))
    }
}

impl<W: WriteTransaction> WriteTransaction for Txn<'_, W> {
    fn savepoint(&mut self) -> Result<Savepoint, StoreError> {
        let r = self.inner.savepoint();
        self.note(r)
    }

    fn rollback_to(&mut self, savepoint: Savepoint) -> Result<(), StoreError> {
        let r = self.inner.rollback_to(savepoint);
        self.note(r)
    }

    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.dirty = true;
        let r = self.inner.put(table, key, value);
        self.note(r)
    }

    fn delete(&mut self, table: Table, key: &[u8]) -> Result<bool, StoreError> {
        self.dirty = true;
        let r = self.inner.delete(table, key);
        self.note(r)
    }

    /// Refused: an operation never commits the transaction it runs in; the
    /// transaction's owner does.
    fn commit(self) -> Result<(), StoreError> {
        Err(StoreError::described(
            StoreErrorKind::Other,
            "commit",
            "an operation cannot commit the transaction it runs in; its owner does".into(),
        ))
    }
}

/// The running itself, out of reach of other crates so that they can
/// neither name nor add a form.
pub(super) mod sealed {
    use super::{Engine, Own, ReadTransaction, Store, StoreError, Txn, WriteTransaction};

    /// Runs a write operation's body in the transaction the form names.
    pub trait RunWrite<S: Store> {
        /// The write transaction the body runs on.
        type Write<'s>: WriteTransaction
        where
            S: 's;

        /// Runs `f` ([`Engine::run_write`] for [`Own`], [`Engine::within`]
        /// for the caller's transaction). `f` is re-runnable: [`Own`]
        /// runs it again on a conflict.
        fn run<'s, T, E: From<StoreError>>(
            self,
            engine: &'s Engine<S>,
            f: impl FnMut(&mut Txn<'_, Self::Write<'s>>) -> Result<T, E>,
        ) -> Result<T, E>
        where
            S: 's;
    }

    impl<S: Store> RunWrite<S> for Own {
        type Write<'s>
            = S::Write<'s>
        where
            S: 's;

        fn run<'s, T, E: From<StoreError>>(
            self,
            engine: &'s Engine<S>,
            f: impl FnMut(&mut Txn<'_, S::Write<'s>>) -> Result<T, E>,
        ) -> Result<T, E>
        where
            S: 's,
        {
            engine.run_write(f)
        }
    }

    impl<S: Store, W: WriteTransaction> RunWrite<S> for &mut W {
        type Write<'s>
            = W
        where
            S: 's;

        fn run<'s, T, E: From<StoreError>>(
            self,
            _engine: &'s Engine<S>,
            f: impl FnMut(&mut Txn<'_, W>) -> Result<T, E>,
        ) -> Result<T, E>
        where
            S: 's,
        {
            Engine::<S>::within(self, f)
        }
    }

    /// Runs a read operation's body in the transaction the form names.
    pub trait RunRead<S: Store> {
        /// The read transaction the body runs on.
        type Read<'s>: ReadTransaction
        where
            S: 's;

        /// Runs `f` on the transaction.
        fn read<'s, T, E: From<StoreError>>(
            self,
            engine: &'s Engine<S>,
            f: impl FnOnce(&Self::Read<'s>) -> Result<T, E>,
        ) -> Result<T, E>
        where
            S: 's;
    }

    impl<S: Store> RunRead<S> for Own {
        type Read<'s>
            = S::Read<'s>
        where
            S: 's;

        fn read<'s, T, E: From<StoreError>>(
            self,
            engine: &'s Engine<S>,
            f: impl FnOnce(&S::Read<'s>) -> Result<T, E>,
        ) -> Result<T, E>
        where
            S: 's,
        {
            engine.read(f)
        }
    }

    impl<S: Store, R: ReadTransaction> RunRead<S> for &R {
        type Read<'s>
            = R
        where
            S: 's;

        fn read<'s, T, E: From<StoreError>>(
            self,
            _engine: &'s Engine<S>,
            f: impl FnOnce(&R) -> Result<T, E>,
        ) -> Result<T, E>
        where
            S: 's,
        {
            f(self)
        }
    }
}
