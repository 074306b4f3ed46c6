//! The storage contract: what a store must guarantee, and what breaking it
//! would cost.
//!
//! A store is an ordered byte key-value store with named tables ([`Table`],
//! owned by the core) and serializable transactions. The core owns the key
//! layout (the crate-private `store::keys`) and the record encoding
//! ([`codec`]), so every store holds identical bytes and makes no policy
//! decision; a store is a thin adapter that the same conformance suite
//! (`tests/store_contract.rs`) runs against.
//!
//! # The contract
//!
//! * **Atomic commit.** [`WriteTransaction::commit`] makes every write of the
//!   transaction visible and durable at once, or none of them. *Breaking it*
//!   lets a crash leave a refresh token both rotated and valid, or an agent
//!   call recorded as run without its result: the replay protection the core
//!   promises rests on this.
//! * **Rollback on drop.** A write transaction dropped without `commit`
//!   changes nothing. *Breaking it* turns every early return in the engine
//!   (a rejected request, a panic) into a half-applied operation.
//! * **Serialised writers, or conflicts.** Either at most one write
//!   transaction is open at a time ([`Store::begin_write`] waits for the
//!   previous one), or writers run concurrently and a transaction that
//!   could not be ordered after every transaction committed before it fails
//!   — at any call or at `commit` — with [`StoreErrorKind::Conflict`],
//!   applying nothing (as `SERIALIZABLE` transactions in Postgres do). The engine
//!   re-runs an operation that met a conflict on a fresh transaction, up to
//!   [`MAX_ATTEMPTS`](crate::engine::MAX_ATTEMPTS) times, so both kinds of
//!   store give the same answers. *Breaking it* loses updates: two racing
//!   refreshes of one token would both rotate it, and the reuse detection
//!   that revokes a stolen token would never fire. Reporting an ordinary
//!   failure as a conflict is harmless (one more attempt); reporting a
//!   conflict as anything else turns a lost race into a server error.
//! * **Savepoints.** [`WriteTransaction::rollback_to`] undoes exactly the
//!   writes made since its [`WriteTransaction::savepoint`], and nothing
//!   before it. *Breaking it* lets one caller's failed operation leave half
//!   of itself in a transaction shared with other callers (a grant's record
//!   without its index entries), committed with their answers.
//! * **Read your writes.** Reads through a write transaction see its own
//!   uncommitted writes. *Breaking it* makes a multi-record operation read
//!   stale state it has just replaced.
//! * **Consistent reads.** A read transaction sees one committed state for its
//!   whole life. *Breaking it* can show a listing half of one commit.
//! * **Ordered keys.** [`ReadTransaction::range`] returns keys in ascending
//!   byte order. *Breaking it* breaks paging cursors and the budgeted sweep.
//!
//! A failed `commit` may still have become durable (redb documents the same
//! of its own commit). The engine is written so that an operation retried
//! after such a failure is judged afresh against whatever state is durable,
//! never assumed to have been lost.
//!
//! # Operations in a shared transaction
//!
//! A durable commit costs an fsync. Every engine operation that writes
//! takes, as its first argument, where it runs
//! ([`Within`](crate::engine::Within)): [`Own`](crate::engine::Own), a
//! transaction of its own, or `&mut txn`, a [`WriteTransaction`] the caller
//! owns (`engine.token(&mut txn, …)`), so a host may apply many callers'
//! operations to one transaction and answer each caller only after the
//! shared commit is durable (group commit). Two rules make that safe:
//!
//! * **Decide before writing.** An operation's answer is decided from what
//!   it read; a rejection writes nothing unless the rejection itself must
//!   be recorded (reuse of a refresh token revokes its grant), and then its
//!   writes are part of the answer and stay.
//! * **A failed operation leaves nothing.** The engine takes a savepoint
//!   before each operation; if the store fails under it (any `get`, `put`,
//!   `delete` or `range` answering an error), it rolls back to that
//!   savepoint and answers with the store's error, so the operations before
//!   and after it in the transaction commit as if it had never run. If the
//!   rollback itself fails, the transaction is lost and must be dropped.
//!
//! Whoever commits the shared transaction answers its callers only after
//! the commit returns; a failed commit fails every operation in it, and each
//! caller may retry (judged afresh, as above).

pub mod codec;
pub(crate) mod keys;
mod table;

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::ops::Bound;

pub use codec::{CodecError, Record, Viewed};
pub use table::Table;

use crate::describe::Describe as _;
use crate::error::{ErrorCode, WireError};

/// One entry returned by a range scan.
pub type Entry = (Vec<u8>, Vec<u8>);

/// A key-value store with the guarantees listed in the [module docs](self).
pub trait Store {
    /// A read transaction: a consistent snapshot.
    type Read<'a>: ReadTransaction
    where
        Self: 'a;
    /// A write transaction: serialised, all-or-nothing.
    type Write<'a>: WriteTransaction
    where
        Self: 'a;

    /// Opens a read transaction.
    ///
    /// A thread must not open a write transaction while it holds a read
    /// transaction of the same store: some stores (the memory store) would
    /// wait for it forever.
    fn begin_read(&self) -> Result<Self::Read<'_>, StoreError>;

    /// Opens a write transaction, waiting until no other is open.
    fn begin_write(&self) -> Result<Self::Write<'_>, StoreError>;
}

/// A shared reference or an `Arc` to a store is the same store.
macro_rules! forward_store {
    ($($pointer:ty),+) => {$(
        impl<T: Store + ?Sized> Store for $pointer {
            type Read<'a>
                = T::Read<'a>
            where
                Self: 'a;
            type Write<'a>
                = T::Write<'a>
            where
                Self: 'a;

            fn begin_read(&self) -> Result<Self::Read<'_>, StoreError> {
                (**self).begin_read()
            }

            fn begin_write(&self) -> Result<Self::Write<'_>, StoreError> {
                (**self).begin_write()
            }
        }
    )+};
}

forward_store!(&T, alloc::sync::Arc<T>);

/// Reads inside a transaction.
pub trait ReadTransaction {
    /// The value stored under `key`.
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;

    /// Hands `f` the value stored under `key`, borrowed from the store
    /// where the store can lend it (a map entry, a page of a memory-mapped
    /// file), and answers with what `f` returned; `None` (and `f` never
    /// called) when `key` is absent. The engine's lookups decode records in
    /// place through this, so a store should lend rather than copy. Same
    /// snapshot and failures as [`ReadTransaction::get`]. `f` may read
    /// through the same transaction (the bearer check reads a grant while
    /// it holds a borrowed view of its site): a store whose handle cannot
    /// be shared that way lends a copy instead.
    fn get_with<T>(
        &self,
        table: Table,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> T,
    ) -> Result<Option<T>, StoreError>
    where
        Self: Sized;

    /// Up to `limit` entries with keys within `(start, end)`, in ascending key
    /// order.
    fn range(
        &self,
        table: Table,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Entry>, StoreError>;

    /// Decodes the record stored under `key`, in place (through
    /// [`ReadTransaction::get_with`]): the stored bytes are not copied
    /// first.
    fn load<R: Record>(&self, key: &[u8]) -> Result<Option<R>, StoreError>
    where
        Self: Sized,
    {
        self.get_with(R::TABLE, key, codec::decode::<R>)?
            .transpose()
            .map_err(|e| StoreError::corrupt(R::TABLE, e))
    }

    /// Hands `f` a borrowed view of the record stored under `key`
    /// ([`Viewed::View`]: its strings point into the stored bytes), so a
    /// check that needs a few fields of a record allocates nothing for it.
    fn view<R: Viewed, T>(
        &self,
        key: &[u8],
        f: impl FnOnce(R::View<'_>) -> T,
    ) -> Result<Option<T>, StoreError>
    where
        Self: Sized,
    {
        self.get_with(R::TABLE, key, |bytes| codec::decode_view::<R>(bytes).map(f))?
            .transpose()
            .map_err(|e| StoreError::corrupt(R::TABLE, e))
    }
}

/// Writes inside a transaction. Nothing is visible to others until
/// [`WriteTransaction::commit`]; dropping the transaction discards it.
pub trait WriteTransaction: ReadTransaction {
    /// Stores `value` under `key`, replacing any previous value.
    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), StoreError>;

    /// Removes `key`; returns whether it was present.
    fn delete(&mut self, table: Table, key: &[u8]) -> Result<bool, StoreError>;

    /// Marks the transaction's current state, to roll back to with
    /// [`WriteTransaction::rollback_to`]. The engine takes one before every
    /// operation it applies, so a cheap mark (the length of an undo log) is
    /// what a store should give.
    fn savepoint(&mut self) -> Result<Savepoint, StoreError>;

    /// Undoes every write made since `savepoint` was taken, leaving the
    /// transaction open with the writes before it. Savepoints taken after
    /// `savepoint` are void; `savepoint` itself stays usable. If this fails
    /// the transaction must not be committed.
    fn rollback_to(&mut self, savepoint: Savepoint) -> Result<(), StoreError>;

    /// Makes every write of this transaction durable and visible, atomically.
    fn commit(self) -> Result<(), StoreError>;

    /// Encodes and stores a record.
    fn save<R: Record>(&mut self, key: &[u8], record: &R) -> Result<(), StoreError>
    where
        Self: Sized,
    {
        let bytes = codec::encode(record).map_err(|e| StoreError::corrupt(R::TABLE, e))?;
        self.put(R::TABLE, key, &bytes)
    }
}

/// A mark in a write transaction (see [`WriteTransaction::savepoint`]):
/// a number only the store that gave it interprets, such as the length of
/// its undo log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Savepoint(usize);

impl Savepoint {
    /// A savepoint at `mark`, for a store's own use.
    #[must_use]
    pub const fn new(mark: usize) -> Self {
        Self(mark)
    }

    /// The mark the store gave.
    #[must_use]
    pub const fn mark(self) -> usize {
        self.0
    }
}

/// The smallest key greater than every key starting with `prefix`, or
/// `None` when no such key exists (an all-`0xff` prefix).
#[must_use]
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// What kind of failure a store reported.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreErrorKind {
    /// The storage medium failed (I/O, out of space).
    Io,
    /// Stored bytes could not be decoded, or the database is damaged.
    Corrupt,
    /// The store is already open elsewhere or otherwise unavailable.
    Unavailable,
    /// The transaction lost a race with another writer and was not
    /// applied (an optimistic store: a `SERIALIZABLE` Postgres transaction, a
    /// compare-and-swap on a replicated store). Retrying the whole
    /// operation on a fresh transaction is safe; the engine does so itself,
    /// up to [`crate::engine::MAX_ATTEMPTS`] times.
    Conflict,
    /// Any other backend failure.
    Other,
}

/// A failure of the storage backend. It never carries record contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreError {
    kind: StoreErrorKind,
    context: &'static str,
    detail: String,
}

impl StoreError {
    /// A backend failure during `context` (e.g. `"commit"`), with the
    /// backend's own description.
    #[must_use]
    pub fn new(kind: StoreErrorKind, context: &'static str, detail: impl fmt::Display) -> Self {
        Self {
            kind,
            context,
            detail: alloc::format!("{detail}"),
        }
    }

    /// [`StoreError::new`] for the core's own failures, whose detail is
    /// already text: it does not go through `core::fmt` (`crate::describe`).
    pub(crate) fn described(kind: StoreErrorKind, context: &'static str, detail: String) -> Self {
        Self {
            kind,
            context,
            detail,
        }
    }

    /// A record of `table` that could not be encoded or decoded.
    pub(crate) fn corrupt(table: Table, e: CodecError) -> Self {
        Self::described(StoreErrorKind::Corrupt, table.name(), e.description())
    }

    /// The kind of failure.
    #[must_use]
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// What the store was doing.
    #[must_use]
    pub fn context(&self) -> &'static str {
        self.context
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "store failure ({:?}) during {}: {}",
            self.kind, self.context, self.detail
        )
    }
}

impl WireError for StoreError {
    fn code(&self) -> ErrorCode {
        ErrorCode::ServerError
    }
}

#[cfg(feature = "std")]
impl std::error::Error for StoreError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_bounds_every_extension() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[1, 0xff]), Some(alloc::vec![2]));
        assert_eq!(prefix_end(&[0xff, 0xff]), None);
        assert_eq!(prefix_end(b""), None);
    }
}
