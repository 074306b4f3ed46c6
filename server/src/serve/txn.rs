//! How a request's write reaches the store: [`Writer`] and the transaction
//! view [`AppWrite`] every write handler is given.
//!
//! * **redb**: through the [`GroupCommitter`]: concurrent requests share one
//!   durable commit (redb serialises writers behind one fsync each).
//! * **PostgreSQL**: one transaction per request on its own pooled
//!   connection. PostgreSQL already shares a WAL flush among concurrent
//!   commits, and the store crate measured batching at best within the noise
//!   there (see `portcullis_store_postgres`), while a batch would make one
//!   instance's writers wait in line. A serialization failure or deadlock
//!   (the store's `Conflict`, at any statement or at the commit) discards
//!   the transaction and runs the handler's operation again on a fresh one,
//!   up to [`MAX_ATTEMPTS`] times, as the engine's own `op(…)` forms do; so
//!   a handler's operation must be re-runnable (`Fn`, every effect through
//!   the transaction).

use std::cell::Cell;
use std::ops::Bound;

use portcullis_core::engine::MAX_ATTEMPTS;
use portcullis_core::store::{
    Entry, ReadTransaction, Savepoint, Store as _, StoreError, StoreErrorKind, Table,
    WriteTransaction,
};
use portcullis_store_redb::{BatchWrite, GroupCommitter};

use crate::db::{Db, DbWrite};

/// Where writes go.
#[derive(Debug)]
pub(crate) enum Writer {
    /// redb: batched.
    Group(GroupCommitter<Db>),
    /// PostgreSQL: one retried transaction per operation.
    Direct,
}

/// The transaction a write handler's operation is applied to.
pub(crate) enum AppWrite<'t, 'b, 'w> {
    /// One operation of a redb batch.
    Batch(&'t mut BatchWrite<'b, DbWrite<'w>>),
    /// A transaction of this operation alone.
    Direct(Direct<'t, 'w>),
}

/// A transaction of one operation, with what the retry loop needs to know:
/// whether the store reported a conflict, and whether anything was written.
pub(crate) struct Direct<'t, 'w> {
    txn: &'t mut DbWrite<'w>,
    conflict: Cell<bool>,
    wrote: bool,
}

impl Direct<'_, '_> {
    fn saw<T>(&self, r: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(e) = &r
            && e.kind() == StoreErrorKind::Conflict
        {
            self.conflict.set(true);
        }
        r
    }
}

impl ReadTransaction for AppWrite<'_, '_, '_> {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        match self {
            Self::Batch(t) => t.get(table, key),
            Self::Direct(d) => d.saw(d.txn.get(table, key)),
        }
    }

    fn get_with<T>(
        &self,
        table: Table,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> T,
    ) -> Result<Option<T>, StoreError> {
        match self {
            Self::Batch(t) => t.get_with(table, key, f),
            Self::Direct(d) => d.saw(d.txn.get_with(table, key, f)),
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
            Self::Batch(t) => t.range(table, start, end, limit),
            Self::Direct(d) => d.saw(d.txn.range(table, start, end, limit)),
        }
    }
}

impl WriteTransaction for AppWrite<'_, '_, '_> {
    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        match self {
            Self::Batch(t) => t.put(table, key, value),
            Self::Direct(d) => {
                d.wrote = true;
                let r = d.txn.put(table, key, value);
                d.saw(r)
            }
        }
    }

    fn delete(&mut self, table: Table, key: &[u8]) -> Result<bool, StoreError> {
        match self {
            Self::Batch(t) => t.delete(table, key),
            Self::Direct(d) => {
                d.wrote = true;
                let r = d.txn.delete(table, key);
                d.saw(r)
            }
        }
    }

    fn savepoint(&mut self) -> Result<Savepoint, StoreError> {
        match self {
            Self::Batch(t) => t.savepoint(),
            Self::Direct(d) => {
                let r = d.txn.savepoint();
                d.saw(r)
            }
        }
    }

    fn rollback_to(&mut self, savepoint: Savepoint) -> Result<(), StoreError> {
        match self {
            Self::Batch(t) => t.rollback_to(savepoint),
            Self::Direct(d) => {
                let r = d.txn.rollback_to(savepoint);
                d.saw(r)
            }
        }
    }

    /// Refused: the [`Writer`] commits.
    fn commit(self) -> Result<(), StoreError> {
        Err(StoreError::new(
            StoreErrorKind::Other,
            "commit",
            "a request's operation cannot commit; the server's writer does",
        ))
    }
}

/// Runs `op` on its own transaction of `db`, commits what it wrote, and runs
/// it again on a fresh one when the store reported a conflict (see the
/// [module docs](self)). `Err` only when the transaction could not be opened
/// or committed; a conflict left after the last attempt is `op`'s own
/// answer (the store error it carries).
pub(crate) fn run_direct<T>(
    db: &Db,
    op: impl for<'t, 'b, 'w> Fn(&mut AppWrite<'t, 'b, 'w>) -> T,
) -> Result<T, StoreError> {
    let mut attempt = 1;
    loop {
        let mut txn = match db.begin_write() {
            Ok(t) => t,
            Err(e) if e.kind() == StoreErrorKind::Conflict && attempt < MAX_ATTEMPTS => {
                attempt += 1;
                continue;
            }
            Err(e) => return Err(e),
        };
        let (out, conflict, wrote) = {
            let mut view = AppWrite::Direct(Direct {
                txn: &mut txn,
                conflict: Cell::new(false),
                wrote: false,
            });
            let out = op(&mut view);
            let AppWrite::Direct(d) = view else {
                unreachable!("built as Direct above")
            };
            (out, d.conflict.get(), d.wrote)
        };
        if conflict {
            if attempt < MAX_ATTEMPTS {
                attempt += 1;
                continue;
            }
            // Dropped: rolled back; the answer carries the conflict.
            return Ok(out);
        }
        if wrote {
            match txn.commit() {
                Ok(()) => {}
                Err(e) if e.kind() == StoreErrorKind::Conflict && attempt < MAX_ATTEMPTS => {
                    attempt += 1;
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
        return Ok(out);
    }
}
