//! An in-memory [`Store`] for Portcullis: tests, single-process servers,
//! firmware, and the reference against which the durable stores are judged.
//!
//! With `std`, a table the engine reads by key only (sites, clients,
//! codes, grants, approvals, meta) is a hash map, one probe whatever its
//! size, hashed by SipHash-1-3 under a 128-bit key drawn from `std`'s
//! random source when the store is made, so callers who choose keys (a
//! request id, a subject) cannot make them collide; a range over it still
//! answers in key order, by sorting the keys inside (a full pass, for tests
//! and tools). Every table the engine range-scans, and every table without
//! `std`, is a `BTreeMap` (ordered keys, as the contract asks). Short keys
//! sit inline in either map ([`Key`]). All tables sit behind one
//! reader-writer lock; a read lends the stored value to the caller
//! (`get_with`) without copying it:
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
//! ## Two locks, one store
//!
//! | type | lock | feature | for |
//! |---|---|---|---|
//! | [`MemoryStore`] | `std::sync::RwLock` | `std` (default) | hosts with threads |
//! | `SpinMemoryStore` | `spin::RwLock` | `spin` | `no_std` firmware |
//!
//! Both are [`MemoryStoreWith`] over a different [`TableLock`]; the tables,
//! the undo log and so the behaviour are the same code. Because a write
//! transaction restores the state while unwinding, a lock poisoned by a
//! panic still guards consistent data and is used as is (a spin lock does
//! not poison at all).
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

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::fmt;
use core::hash::{Hash, Hasher};
use core::ops::{Bound, Deref, DerefMut};

#[cfg(feature = "std")]
use hashbrown::{HashMap, hash_map::EntryRef};
use portcullis_core::store::{
    Entry, ReadTransaction, Savepoint, Store, StoreError, Table, WriteTransaction,
};
#[cfg(feature = "std")]
use siphasher::sip::SipHasher13;

/// Every table of a store. Opaque: reached through a [`MemoryStoreWith`].
pub struct Tables {
    maps: [TableMap; Table::ALL.len()],
}

impl Tables {
    /// Empty tables; with `std`, the hashed ones under a fresh random key.
    fn new() -> Self {
        #[cfg(feature = "std")]
        let seed = Seed::from_std();
        Self {
            maps: Table::ALL.map(|table| {
                #[cfg(feature = "std")]
                if !ordered(table) {
                    return TableMap::Hashed(HashMap::with_hasher(seed));
                }
                let _ = table; // read only with `std`
                TableMap::Ordered(BTreeMap::new())
            }),
        }
    }

    fn records(&self) -> usize {
        self.maps.iter().map(TableMap::len).sum()
    }

    fn of(&self, table: Table) -> &TableMap {
        &self.maps[table.index()]
    }

    fn of_mut(&mut self, table: Table) -> &mut TableMap {
        &mut self.maps[table.index()]
    }
}

/// Whether the engine range-scans `table`, so the store keeps it ordered.
///
/// The engine scans a user's and a site's grants (`GrantIndex`), the sweep's
/// due entries (`Expiry`), a grant's requests and their outcomes
/// (`Requests`, `Outcomes`), a user's agent tokens (`AgentTokens`) and a
/// browser session's tabs (`Tabs`); everything else it reads by key only.
/// A table the core adds later is kept ordered until it is listed here.
#[cfg(feature = "std")]
const fn ordered(table: Table) -> bool {
    !matches!(
        table,
        Table::Meta
            | Table::Sites
            | Table::Clients
            | Table::Codes
            | Table::Grants
            | Table::Approvals
    )
}

/// The secret key of a store's hashed tables: SipHash-1-3 (the hash of
/// `std`'s `HashMap`) under 128 random bits drawn when the store is made.
/// Keys are partly chosen by callers (a request id, a subject), and a
/// caller who cannot predict the hash cannot make their keys collide and
/// turn lookups into scans of one long chain.
#[cfg(feature = "std")]
#[derive(Clone, Copy)]
struct Seed {
    k0: u64,
    k1: u64,
}

#[cfg(feature = "std")]
impl Seed {
    /// 128 bits from `std`'s own per-process random `SipHash` keys (drawn
    /// from the operating system), through that keyed hash.
    fn from_std() -> Self {
        use core::hash::BuildHasher;
        let state = std::hash::RandomState::new();
        Self {
            k0: state.hash_one(0u8),
            k1: state.hash_one(1u8),
        }
    }
}

#[cfg(feature = "std")]
impl core::hash::BuildHasher for Seed {
    type Hasher = SipHasher13;

    fn build_hasher(&self) -> SipHasher13 {
        SipHasher13::new_with_keys(self.k0, self.k1)
    }
}

/// One table: with `std`, a hash map for a table read by key only (one
/// probe, about one cache miss, however many records); a B-tree for a
/// table the engine range-scans, and for every table without `std`.
enum TableMap {
    /// Point reads only; a range over it sorts the keys that fall inside.
    #[cfg(feature = "std")]
    Hashed(HashMap<Key, Vec<u8>, Seed>),
    /// Ordered keys.
    Ordered(BTreeMap<Key, Vec<u8>>),
}

impl TableMap {
    fn len(&self) -> usize {
        match self {
            #[cfg(feature = "std")]
            Self::Hashed(map) => map.len(),
            Self::Ordered(map) => map.len(),
        }
    }

    fn get(&self, key: &[u8]) -> Option<&Vec<u8>> {
        match self {
            #[cfg(feature = "std")]
            Self::Hashed(map) => map.get(key),
            Self::Ordered(map) => map.get(key),
        }
    }

    /// Stores `value` under `key`; answers the value it replaced.
    fn insert(&mut self, key: &[u8], value: Vec<u8>) -> Option<Vec<u8>> {
        match self {
            // An update (a rotated grant) keeps the map's key and swaps
            // the value; only an insert copies the key into the map.
            #[cfg(feature = "std")]
            Self::Hashed(map) => match map.entry_ref(key) {
                EntryRef::Occupied(mut stored) => Some(stored.insert(value)),
                EntryRef::Vacant(slot) => {
                    slot.insert_with_key(Key::new(key), value);
                    None
                }
            },
            // An inline key costs no allocation; the map keeps its own
            // copy of a key it already holds.
            Self::Ordered(map) => map.insert(Key::new(key), value),
        }
    }

    fn remove(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        match self {
            #[cfg(feature = "std")]
            Self::Hashed(map) => map.remove(key),
            Self::Ordered(map) => map.remove(key),
        }
    }

    fn range(&self, start: Bound<&[u8]>, end: Bound<&[u8]>, limit: usize) -> Vec<Entry> {
        match self {
            Self::Ordered(map) => range_of(map, start, end, limit),
            #[cfg(feature = "std")]
            Self::Hashed(map) => {
                // A cold path (the engine never scans these tables): order
                // the keys inside through the map type ordered tables use.
                let mut inside = BTreeMap::new();
                for (k, v) in map {
                    if core::ops::RangeBounds::contains(&(start, end), &k.as_bytes()) {
                        inside.insert(k.clone(), v.clone());
                    }
                }
                range_of(&inside, Bound::Unbounded, Bound::Unbounded, limit)
            }
        }
    }
}

/// The longest key held inside the map's own nodes.
const INLINE: usize = 38;

/// A key as a table holds it: up to 38 bytes inline, in the B-tree node
/// itself, longer ones on the heap. Every key the core writes fits inline
/// except the longer index keys (a grant or code id is 16 bytes, an expiry
/// entry 26), so a lookup compares the keys of a node without following a
/// pointer per comparison (over a million grants each pointer is a likely
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
    pub trait Sealed {}
}

/// The lock a [`MemoryStoreWith`] keeps its tables behind. Sealed: the
/// crate's two locks are [`StdRwLock`] and `SpinRwLock`.
pub trait TableLock: sealed::Sealed {
    /// The store's name in `Debug` output.
    const NAME: &'static str;
    /// A held read lock.
    type Read<'a>: Deref<Target = Tables>
    where
        Self: 'a;
    /// A held write lock.
    type Write<'a>: DerefMut<Target = Tables>
    where
        Self: 'a;
    /// A lock over `tables`.
    #[doc(hidden)]
    fn new(tables: Tables) -> Self;
    /// Waits for the read lock.
    fn read(&self) -> Self::Read<'_>;
    /// Waits for the write lock.
    fn write(&self) -> Self::Write<'_>;
}

/// `std::sync::RwLock`: the lock of [`MemoryStore`].
#[cfg(feature = "std")]
pub struct StdRwLock(std::sync::RwLock<Tables>);

#[cfg(feature = "std")]
impl sealed::Sealed for StdRwLock {}

#[cfg(feature = "std")]
impl TableLock for StdRwLock {
    const NAME: &'static str = "MemoryStore";
    type Read<'a> = std::sync::RwLockReadGuard<'a, Tables>;
    type Write<'a> = std::sync::RwLockWriteGuard<'a, Tables>;

    fn new(tables: Tables) -> Self {
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
/// nor an operating system.
#[cfg(feature = "spin")]
pub struct SpinRwLock(spin::RwLock<Tables>);

#[cfg(feature = "spin")]
impl sealed::Sealed for SpinRwLock {}

#[cfg(feature = "spin")]
impl TableLock for SpinRwLock {
    const NAME: &'static str = "SpinMemoryStore";
    type Read<'a> = spin::RwLockReadGuard<'a, Tables>;
    type Write<'a> = spin::RwLockWriteGuard<'a, Tables>;

    fn new(tables: Tables) -> Self {
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
    /// An empty store. With `std`, its hashed tables are keyed by 128 bits
    /// from `std`'s random source (the operating system's, through
    /// `std::hash::RandomState`).
    #[must_use]
    pub fn new() -> Self {
        Self {
            tables: L::new(Tables::new()),
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

fn range_of(
    map: &BTreeMap<Key, Vec<u8>>,
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
        .map(|(k, v)| (k.as_bytes().to_vec(), v.clone()))
        .collect()
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

impl<L: TableLock> ReadTransaction for MemoryRead<'_, L> {
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

/// The undo log of a write: `(table, key, value before the write)`.
type Undo = (Table, Key, Option<Vec<u8>>);

/// A write transaction: the write lock and an undo log.
pub struct MemoryWrite<'a, L: TableLock + 'a> {
    tables: L::Write<'a>,
    /// Oldest first.
    undo: Vec<Undo>,
}

impl<L: TableLock> ReadTransaction for MemoryWrite<'_, L> {
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

    /// A range's two bounds.
    type RangeOf<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

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
        let mut map = BTreeMap::new();
        for k in &keys {
            map.insert(k.clone(), Vec::new());
        }
        let got: Vec<Vec<u8>> = range_of(
            &map,
            Bound::Included(&[7u8][..]),
            Bound::Excluded(&[8u8][..]),
            10,
        )
        .into_iter()
        .map(|(k, _)| k)
        .collect();
        assert_eq!(got, samples[2..5].to_vec());
    }

    /// A hashed table answers every range as the ordered one does: the
    /// same entries, in key order, cut at the limit.
    #[cfg(feature = "std")]
    #[test]
    fn hashed_ranges_agree_with_ordered_ones() {
        let mut tables = Tables::new();
        assert!(matches!(tables.of(Table::Grants), TableMap::Hashed(_)));
        assert!(matches!(tables.of(Table::GrantIndex), TableMap::Ordered(_)));
        let mut ordered = core::mem::replace(
            tables.of_mut(Table::GrantIndex),
            TableMap::Ordered(BTreeMap::new()),
        );
        let hashed = tables.of_mut(Table::Grants);
        for i in 0u16..300 {
            let n = i * 7 % 300;
            let key = n.to_be_bytes();
            let mut key = key.to_vec();
            if i % 3 == 0 {
                key.extend_from_slice(&[9; INLINE]);
            }
            let value = n.to_le_bytes().to_vec();
            assert_eq!(hashed.insert(&key, value.clone()), None);
            assert_eq!(ordered.insert(&key, value), None);
        }
        let at = |n: u16| n.to_be_bytes();
        let (a, b) = (at(40), at(200));
        let bounds: [RangeOf<'_>; 7] = [
            (Bound::Unbounded, Bound::Unbounded),
            (Bound::Included(&a), Bound::Excluded(&b)),
            (Bound::Excluded(&a), Bound::Included(&b)),
            (Bound::Included(&b), Bound::Excluded(&a)),
            (Bound::Excluded(&a), Bound::Excluded(&a)),
            (Bound::Included(&a), Bound::Included(&a)),
            (Bound::Unbounded, Bound::Excluded(&a)),
        ];
        for (start, end) in bounds {
            for limit in [0, 1, 5, 100, usize::MAX] {
                let want = ordered.range(start, end, limit);
                assert_eq!(
                    hashed.range(start, end, limit),
                    want,
                    "{start:?} {end:?} {limit}"
                );
            }
        }
        assert_eq!(hashed.remove(&at(40)), Some(40u16.to_le_bytes().to_vec()));
        assert_eq!(hashed.get(&at(40)), None);
        assert_eq!(
            hashed.insert(&at(41), Vec::new()),
            Some(41u16.to_le_bytes().to_vec())
        );
        assert_eq!(hashed.get(&at(41)), Some(&Vec::new()));
        assert_eq!(hashed.len(), 299);
    }

    /// Every store draws its own hash key, and a key hashes as its bytes
    /// do (so a map of keys is searched by bytes), inline or not.
    #[cfg(feature = "std")]
    #[test]
    fn each_store_keys_its_hash() {
        use core::hash::BuildHasher;
        let (a, b) = (Seed::from_std(), Seed::from_std());
        assert_ne!((a.k0, a.k1), (b.k0, b.k1));
        assert_ne!(a.k0, a.k1);
        assert_ne!(
            a.hash_one(b"grant".as_slice()),
            b.hash_one(b"grant".as_slice())
        );
        let key = Key::new(b"grant");
        assert_eq!(a.hash_one(&key), a.hash_one(b"grant".as_slice()));
        let long = [3u8; INLINE + 4];
        assert_eq!(a.hash_one(Key::new(&long)), a.hash_one(long.as_slice()));
    }
}
