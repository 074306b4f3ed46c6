//! An in-memory [`Store`] for Portcullis: tests, single-process servers and
//! the reference against which the durable stores are judged.
//!
//! Every table is a `BTreeMap` (ordered keys, as the contract asks), and all
//! of them sit behind one `RwLock`:
//!
//! * a read transaction holds the read lock, so it sees one committed state;
//! * a write transaction holds the write lock for its whole life, which
//!   serialises writers, and applies writes in place while keeping an **undo
//!   log**; `commit` discards the log, and dropping the transaction without
//!   committing (an early return, a panic) replays it backwards, so nothing
//!   it did remains. A savepoint is a mark in that log, and rolling back
//!   to it replays the log down to the mark.
//!
//! Because a write transaction restores the state while unwinding, a lock
//! poisoned by a panic still guards consistent data and is used as is.
//!
//! Holding a read transaction while opening a write transaction on the same
//! thread would wait forever (the [`Store`] contract forbids it; the engine
//! never does it).
//!
//! This crate needs `std` for its lock. A `no_std` host would need a spin or
//! critical-section lock instead; that is a few lines on top of this design,
//! left out until an embedded user asks, since redb (the embedded store)
//! needs `std` as well.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use portcullis_core::store::{
    Entry, ReadTransaction, Savepoint, Store, StoreError, Table, WriteTransaction,
};

type Tables = [BTreeMap<Vec<u8>, Vec<u8>>; Table::ALL.len()];

/// The in-memory store. Cheap to create; share it by reference or `Arc`.
/// Its `Debug` shows sizes, never records.
#[derive(Default)]
pub struct MemoryStore {
    tables: RwLock<Tables>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tables = self.tables.read().unwrap_or_else(PoisonError::into_inner);
        let records: usize = tables.iter().map(BTreeMap::len).sum();
        f.debug_struct("MemoryStore")
            .field("records", &records)
            .finish()
    }
}

impl MemoryStore {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }
}

impl Store for MemoryStore {
    type Read<'a> = MemoryRead<'a>;
    type Write<'a> = MemoryWrite<'a>;

    fn begin_read(&self) -> Result<MemoryRead<'_>, StoreError> {
        Ok(MemoryRead {
            tables: self.tables.read().unwrap_or_else(PoisonError::into_inner),
        })
    }

    fn begin_write(&self) -> Result<MemoryWrite<'_>, StoreError> {
        Ok(MemoryWrite {
            tables: self.tables.write().unwrap_or_else(PoisonError::into_inner),
            undo: Vec::new(),
        })
    }
}

fn range_of(
    map: &BTreeMap<Vec<u8>, Vec<u8>>,
    start: Bound<&[u8]>,
    end: Bound<&[u8]>,
    limit: usize,
) -> Vec<Entry> {
    if let (Bound::Included(s) | Bound::Excluded(s), Bound::Included(e) | Bound::Excluded(e)) =
        (start, end)
        && (s > e || (s == e && !matches!((start, end), (Bound::Included(_), Bound::Included(_)))))
    {
        // BTreeMap::range panics on an inverted or empty-exclusive range.
        return Vec::new();
    }
    map.range::<[u8], _>((start, end))
        .take(limit)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A read transaction: the read lock, held until dropped.
pub struct MemoryRead<'a> {
    tables: RwLockReadGuard<'a, Tables>,
}

impl std::fmt::Debug for MemoryRead<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoryRead")
    }
}

impl std::fmt::Debug for MemoryWrite<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryWrite")
            .field("undo_entries", &self.undo.len())
            .finish()
    }
}

impl ReadTransaction for MemoryRead<'_> {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.tables[table.index()].get(key).cloned())
    }

    fn range(
        &self,
        table: Table,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        Ok(range_of(&self.tables[table.index()], start, end, limit))
    }
}

/// A write transaction: the write lock and an undo log.
pub struct MemoryWrite<'a> {
    tables: RwLockWriteGuard<'a, Tables>,
    /// `(table, key, value before the write)`, oldest first.
    undo: Vec<(Table, Vec<u8>, Option<Vec<u8>>)>,
}

impl ReadTransaction for MemoryWrite<'_> {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.tables[table.index()].get(key).cloned())
    }

    fn range(
        &self,
        table: Table,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        Ok(range_of(&self.tables[table.index()], start, end, limit))
    }
}

impl WriteTransaction for MemoryWrite<'_> {
    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        let before = self.tables[table.index()].insert(key.to_vec(), value.to_vec());
        self.undo.push((table, key.to_vec(), before));
        Ok(())
    }

    fn delete(&mut self, table: Table, key: &[u8]) -> Result<bool, StoreError> {
        let before = self.tables[table.index()].remove(key);
        let existed = before.is_some();
        if existed {
            self.undo.push((table, key.to_vec(), before));
        }
        Ok(existed)
    }

    fn savepoint(&mut self) -> Result<Savepoint, StoreError> {
        Ok(Savepoint::new(self.undo.len()))
    }

    fn rollback_to(&mut self, savepoint: Savepoint) -> Result<(), StoreError> {
        self.undo_to(savepoint.mark());
        Ok(())
    }

    fn commit(mut self) -> Result<(), StoreError> {
        self.undo.clear();
        Ok(())
    }
}

impl MemoryWrite<'_> {
    /// Replays the undo log backwards until `mark` entries are left.
    fn undo_to(&mut self, mark: usize) {
        while self.undo.len() > mark {
            let Some((table, key, before)) = self.undo.pop() else {
                break;
            };
            let map = &mut self.tables[table.index()];
            match before {
                Some(value) => map.insert(key, value),
                None => map.remove(&key),
            };
        }
    }
}

impl Drop for MemoryWrite<'_> {
    fn drop(&mut self) {
        self.undo_to(0);
    }
}
