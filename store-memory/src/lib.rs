//! An in-memory [`Store`] for Portcullis: tests, single-process servers,
//! firmware, and the reference against which the durable stores are judged.
//!
//! All tables sit behind one reader-writer lock; a read lends the stored
//! value to the caller (`get_with`) without copying it:
//!
//! * a read transaction holds the read lock, so it sees one committed state;
//! * a write transaction holds the write lock for its whole life, which
//!   serialises writers, and applies writes in place while keeping an **undo
//!   log**; `commit` discards the log, and dropping the transaction without
//!   committing (an early return, a panic) replays it backwards, so nothing
//!   it did remains. A savepoint is a mark in that log, and rolling back
//!   to it replays the log down to the mark.
//!
//! Holding a read transaction while opening a write transaction on the same
//! thread would wait forever (the [`Store`] contract forbids it; the engine
//! never does it).
//!
//! ## Two stores, one transaction code
//!
//! | type | lock | tables | feature | for |
//! |---|---|---|---|---|
//! | [`MemoryStore`] | `std::sync::RwLock` | hash maps and B-trees | `std` (default) | hosts with threads |
//! | `SpinMemoryStore` | `spin::RwLock` | sorted vectors | `spin` | `no_std` firmware |
//!
//! Both are [`MemoryStoreWith`] over a different [`TableLock`]; the undo
//! log and the transactions are the same code over either kind of table.
//!
//! [`MemoryStore`] keys each table the engine reads by key only (sites,
//! clients, codes, grants, approvals, meta) as a hash map, one probe
//! whatever its size, hashed by SipHash-1-3 under a 128-bit key drawn from
//! `std`'s random source when the store is made, so callers who choose keys
//! (a request id, a subject) cannot make them collide; a range over it
//! still answers in key order, by sorting the keys inside (a full pass, for
//! tests and tools). Every table the engine range-scans is a `BTreeMap`
//! (ordered keys, as the contract asks).
//!
//! `SpinMemoryStore` keeps every table as one vector of entries sorted by
//! key: a lookup or a range start is a binary search, and an insert or a
//! removal moves the entries after it. That is a few hundred bytes of code
//! where a B-tree costs several KiB of flash (embedded/README.md), and it
//! is quick for the hundreds or few thousands of records a device holds; a
//! write is linear in its table's size, so hosts with large tables use
//! [`MemoryStore`]. Short keys sit inline in either kind of table ([`Key`]).
//!
//! Because a write transaction restores the state while unwinding, a lock
//! poisoned by a panic still guards consistent data and is used as is (a
//! spin lock does not poison at all).
//!
//! A spin lock waits by spinning. On a single-core microcontroller, use a
//! `SpinMemoryStore` from one execution context (the main loop or one RTOS
//! task): an interrupt handler that opened a transaction while the code it
//! interrupted held one would spin forever.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

use alloc::vec::Vec;
use core::fmt;
use core::hash::{Hash, Hasher};
use core::ops::{Bound, Deref, DerefMut};

use portcullis_core::store::{
    Entry, ReadTransaction, Savepoint, Store, StoreError, Table, WriteTransaction,
};

#[cfg(feature = "std")]
mod host;
#[cfg(feature = "spin")]
mod sorted;

#[cfg(feature = "std")]
use host::HostMap;

use sealed::TableMap;

/// Every table of a store, each an `M`. Opaque: reached through a
/// [`MemoryStoreWith`].
pub struct Tables<M> {
    maps: [M; Table::ALL.len()],
}

impl<M: TableMap> Tables<M> {
    fn records(&self) -> usize {
        self.maps.iter().map(TableMap::len).sum()
    }

    fn of(&self, table: Table) -> &M {
        &self.maps[table.index()]
    }

    fn of_mut(&mut self, table: Table) -> &mut M {
        &mut self.maps[table.index()]
    }
}

/// The longest key held inside the table's own storage.
const INLINE: usize = 38;

/// A key as a table holds it: up to 38 bytes inline, in the B-tree node or
/// vector slot itself, longer ones on the heap. Every key the core writes
/// fits inline except the longer index keys (a grant or code id is 16
/// bytes, an expiry entry 26), so a lookup compares keys without following
/// a pointer per comparison (over a million grants each pointer is a likely
/// cache miss), and an undo-log entry costs no allocation. Keys order as
/// their bytes, whichever form they take.
#[derive(Clone)]
pub struct Key(KeyRepr);

#[derive(Clone)]
enum KeyRepr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(alloc::boxed::Box<[u8]>),
}

impl Key {
    /// A key holding `bytes`.
    #[must_use]
    pub fn new(bytes: &[u8]) -> Self {
        if bytes.len() <= INLINE {
            let mut inline = [0; INLINE];
            inline[..bytes.len()].copy_from_slice(bytes);
            Self(KeyRepr::Inline {
                len: bytes.len() as u8,
                bytes: inline,
            })
        } else {
            Self(KeyRepr::Heap(bytes.into()))
        }
    }

    /// The key's bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            KeyRepr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            KeyRepr::Heap(bytes) => bytes,
        }
    }
}

impl core::borrow::Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// Hashes as its bytes do, so a map of keys is searched by `&[u8]`.
impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl fmt::Debug for Key {
    /// The length only: keys can name users.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({} bytes)", self.as_bytes().len())
    }
}

mod sealed {
    use alloc::vec::Vec;
    use core::ops::Bound;

    use portcullis_core::store::{Entry, Table};

    pub trait Sealed {}

    /// One table: the few map operations the transactions are made of.
    pub trait TableMap: Sized {
        /// One empty map per table.
        fn empty() -> [Self; Table::ALL.len()];
        /// The number of records.
        fn len(&self) -> usize;
        /// The value under `key`.
        fn get(&self, key: &[u8]) -> Option<&Vec<u8>>;
        /// Stores `value` under `key`; answers the value it replaced.
        fn insert(&mut self, key: &[u8], value: Vec<u8>) -> Option<Vec<u8>>;
        /// Removes `key`; answers the value it held.
        fn remove(&mut self, key: &[u8]) -> Option<Vec<u8>>;
        /// Up to `limit` entries between the bounds, in key order (none
        /// for an inverted or empty range).
        fn range(&self, start: Bound<&[u8]>, end: Bound<&[u8]>, limit: usize) -> Vec<Entry>;
    }
}

/// The lock a [`MemoryStoreWith`] keeps its tables behind. Sealed: the
/// crate's two locks are [`StdRwLock`] and `SpinRwLock`.
pub trait TableLock: sealed::Sealed {
    /// The store's name in `Debug` output.
    const NAME: &'static str;
    /// The kind of table the store keeps (see the [crate docs](crate)).
    #[doc(hidden)]
    type Map: TableMap;
    /// A held read lock.
    type Read<'a>: Deref<Target = Tables<Self::Map>>
    where
        Self: 'a;
    /// A held write lock.
    type Write<'a>: DerefMut<Target = Tables<Self::Map>>
    where
        Self: 'a;
    /// A lock over `tables`.
    #[doc(hidden)]
    fn new(tables: Tables<Self::Map>) -> Self;
    /// Waits for the read lock.
    fn read(&self) -> Self::Read<'_>;
    /// Waits for the write lock.
    fn write(&self) -> Self::Write<'_>;
}

/// `std::sync::RwLock`: the lock of [`MemoryStore`].
#[cfg(feature = "std")]
pub struct StdRwLock(std::sync::RwLock<Tables<HostMap>>);

#[cfg(feature = "std")]
impl sealed::Sealed for StdRwLock {}

#[cfg(feature = "std")]
impl TableLock for StdRwLock {
    const NAME: &'static str = "MemoryStore";
    type Map = HostMap;
    type Read<'a> = std::sync::RwLockReadGuard<'a, Tables<HostMap>>;
    type Write<'a> = std::sync::RwLockWriteGuard<'a, Tables<HostMap>>;

    fn new(tables: Tables<HostMap>) -> Self {
        Self(std::sync::RwLock::new(tables))
    }

    fn read(&self) -> Self::Read<'_> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> Self::Write<'_> {
        self.0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `spin::RwLock`: the lock of `SpinMemoryStore`, needing neither `std`
/// nor an operating system; its tables are sorted vectors.
#[cfg(feature = "spin")]
pub struct SpinRwLock(spin::RwLock<Tables<sorted::SortedMap>>);

#[cfg(feature = "spin")]
impl sealed::Sealed for SpinRwLock {}

#[cfg(feature = "spin")]
impl TableLock for SpinRwLock {
    const NAME: &'static str = "SpinMemoryStore";
    type Map = sorted::SortedMap;
    type Read<'a> = spin::RwLockReadGuard<'a, Tables<sorted::SortedMap>>;
    type Write<'a> = spin::RwLockWriteGuard<'a, Tables<sorted::SortedMap>>;

    fn new(tables: Tables<sorted::SortedMap>) -> Self {
        Self(spin::RwLock::new(tables))
    }

    fn read(&self) -> Self::Read<'_> {
        self.0.read()
    }

    fn write(&self) -> Self::Write<'_> {
        self.0.write()
    }
}

/// The in-memory store on `std::sync::RwLock`. Cheap to create; share it by
/// reference or `Arc`. Its `Debug` shows sizes, never records.
#[cfg(feature = "std")]
pub type MemoryStore = MemoryStoreWith<StdRwLock>;

/// The in-memory store on a spin lock, for `no_std` targets (see the
/// [crate docs](crate) on where a spin lock may be used).
#[cfg(feature = "spin")]
pub type SpinMemoryStore = MemoryStoreWith<SpinRwLock>;

/// The in-memory store over the lock `L`: use [`MemoryStore`] or
/// `SpinMemoryStore`.
pub struct MemoryStoreWith<L> {
    tables: L,
}

impl<L: TableLock> fmt::Debug for MemoryStoreWith<L> {
    /// The number of records, never a record or the hash key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let records = self.tables.read().records();
        f.debug_struct(L::NAME).field("records", &records).finish()
    }
}

impl<L: TableLock> MemoryStoreWith<L> {
    /// An empty store. A [`MemoryStore`]'s hashed tables are keyed by 128
    /// bits from `std`'s random source (the operating system's, through
    /// `std::hash::RandomState`).
    #[must_use]
    pub fn new() -> Self {
        Self {
            tables: L::new(Tables {
                maps: L::Map::empty(),
            }),
        }
    }
}

impl<L: TableLock> Default for MemoryStoreWith<L> {
    fn default() -> Self {
        Self::new()
    }
}

impl<L: TableLock> Store for MemoryStoreWith<L> {
    type Read<'a>
        = MemoryRead<'a, L>
    where
        L: 'a;
    type Write<'a>
        = MemoryWrite<'a, L>
    where
        L: 'a;

    fn begin_read(&self) -> Result<MemoryRead<'_, L>, StoreError> {
        Ok(MemoryRead {
            tables: self.tables.read(),
        })
    }

    fn begin_write(&self) -> Result<MemoryWrite<'_, L>, StoreError> {
        Ok(MemoryWrite {
            tables: self.tables.write(),
            undo: Vec::new(),
        })
    }
}

/// A read transaction: the read lock, held until dropped.
pub struct MemoryRead<'a, L: TableLock + 'a> {
    tables: L::Read<'a>,
}

impl<L: TableLock> fmt::Debug for MemoryRead<'_, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MemoryRead")
    }
}

impl<L: TableLock> fmt::Debug for MemoryWrite<'_, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryWrite")
            .field("undo_entries", &self.undo.len())
            .finish()
    }
}

/// Reads of a transaction that holds the tables (`self.tables`, read or
/// write locked): the same for both kinds of transaction.
macro_rules! reads_from_tables {
    ($transaction:ident) => {
        impl<L: TableLock> ReadTransaction for $transaction<'_, L> {
            fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
                Ok(self.tables.of(table).get(key).cloned())
            }

            fn get_with<T>(
                &self,
                table: Table,
                key: &[u8],
                f: impl FnOnce(&[u8]) -> T,
            ) -> Result<Option<T>, StoreError> {
                Ok(self.tables.of(table).get(key).map(|v| f(v)))
            }

            fn range(
                &self,
                table: Table,
                start: Bound<&[u8]>,
                end: Bound<&[u8]>,
                limit: usize,
            ) -> Result<Vec<Entry>, StoreError> {
                Ok(self.tables.of(table).range(start, end, limit))
            }
        }
    };
}

reads_from_tables!(MemoryRead);

/// The undo log of a write: `(table, key, value before the write)`.
type Undo = (Table, Key, Option<Vec<u8>>);

/// A write transaction: the write lock and an undo log.
pub struct MemoryWrite<'a, L: TableLock + 'a> {
    tables: L::Write<'a>,
    /// Oldest first.
    undo: Vec<Undo>,
}

reads_from_tables!(MemoryWrite);

impl<L: TableLock> WriteTransaction for MemoryWrite<'_, L> {
    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        let before = self.tables.of_mut(table).insert(key, value.to_vec());
        self.undo.push((table, Key::new(key), before));
        Ok(())
    }

    fn delete(&mut self, table: Table, key: &[u8]) -> Result<bool, StoreError> {
        let before = self.tables.of_mut(table).remove(key);
        let existed = before.is_some();
        if existed {
            self.undo.push((table, Key::new(key), before));
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

impl<L: TableLock> MemoryWrite<'_, L> {
    /// Replays the undo log backwards until `mark` entries are left.
    fn undo_to(&mut self, mark: usize) {
        while self.undo.len() > mark {
            let Some((table, key, before)) = self.undo.pop() else {
                break;
            };
            let map = self.tables.of_mut(table);
            match before {
                Some(value) => map.insert(key.as_bytes(), value),
                None => map.remove(key.as_bytes()),
            };
        }
    }
}

impl<L: TableLock> Drop for MemoryWrite<'_, L> {
    fn drop(&mut self) {
        self.undo_to(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inline and heap keys order as their bytes, across the boundary.
    #[test]
    fn keys_order_as_bytes_inline_or_not() {
        let long = [7u8; INLINE + 1];
        let mut samples: Vec<Vec<u8>> = alloc::vec![
            Vec::new(),
            alloc::vec![0],
            alloc::vec![7; INLINE],
            long.to_vec(),
            alloc::vec![7; INLINE + 5],
            alloc::vec![8],
            alloc::vec![0xff; INLINE],
            alloc::vec![0xff; INLINE + 1],
        ];
        samples.sort();
        let keys: Vec<Key> = samples.iter().map(|s| Key::new(s)).collect();
        for (i, a) in keys.iter().enumerate() {
            assert_eq!(a.as_bytes(), samples[i].as_slice());
            for (j, b) in keys.iter().enumerate() {
                assert_eq!(a.cmp(b), samples[i].cmp(&samples[j]), "{i} {j}");
            }
        }
    }
}
