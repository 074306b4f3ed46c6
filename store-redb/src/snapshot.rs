//! The read snapshot every read transaction shares: one redb read
//! transaction, begun by the first read after a commit, with the tables
//! opened in it kept open, until this store's next commit retires it.
//!
//! A redb read transaction is cheap to begin, but opening a table in it
//! looks the table up by name and checks its key and value types,
//! allocating their names: about 3 500 instructions a table, and a bearer
//! check reads two tables (docs/figures.md, "The example's tool router
//! built once"). This store is its database's only writer (redb locks the
//! file for one process, and every write goes through [`crate::RedbWrite`]),
//! so the snapshot of the last commit stays the latest until the store
//! commits again, and every read transaction begun meanwhile can share it.
//!
//! # Freshness
//!
//! * **A commit retires the snapshot before it returns.** Every commit,
//!   failed ones included, bumps the generation once redb is done with it;
//!   a snapshot is handed out only while its generation is the current
//!   one. A read transaction begun after a commit returned never sees the
//!   state before it.
//! * **No stale install.** A reader loads the generation *before* redb
//!   takes its snapshot, and installs the snapshot for others only if no
//!   commit bumped the generation meanwhile. A snapshot that may predate a
//!   commit is never shared past it (its reader still uses it: it began
//!   before that commit returned).
//! * **A read transaction keeps its snapshot** for its whole life, however
//!   many commits follow, as redb's own read transaction does.
//!
//! The cost: the shared snapshot holds redb's pages of that commit until
//! the next commit retires it and its last reader ends, as any read
//! transaction open that long would.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use portcullis_core::store::{StoreError, Table};
use redb::{ReadableDatabase, TableError};

use crate::{definition, error};

/// A table as a snapshot holds it open.
pub(crate) type ReadTable = redb::ReadOnlyTable<&'static [u8], &'static [u8]>;

/// One redb snapshot and the tables opened in it so far.
pub(crate) struct Snapshot {
    /// The commit generation it was begun in.
    generation: u64,
    txn: redb::ReadTransaction,
    /// By [`Table::index`]: opened at the first read of the table; `None`
    /// for a table this snapshot does not have.
    tables: [OnceLock<Option<ReadTable>>; Table::ALL.len()],
}

impl Snapshot {
    /// `table` in this snapshot, opened at its first read; `None` when the
    /// snapshot has no such table.
    pub(crate) fn table(&self, table: Table) -> Result<Option<&ReadTable>, StoreError> {
        let slot = &self.tables[table.index()];
        if let Some(opened) = slot.get() {
            return Ok(opened.as_ref());
        }
        let opened = match self.txn.open_table(definition(table)) {
            Ok(t) => Some(t),
            Err(TableError::TableDoesNotExist(_)) => None,
            Err(e) => return Err(error(e, "open table")),
        };
        // Two readers may open it at once: the first one kept is used.
        Ok(slot.get_or_init(|| opened).as_ref())
    }
}

/// The shared snapshot and the commit generation (see the [module
/// docs](self)).
#[derive(Default)]
pub(crate) struct Snapshots {
    generation: AtomicU64,
    current: RwLock<Option<Arc<Snapshot>>>,
}

impl std::fmt::Debug for Snapshots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshots")
            .field("generation", &self.generation.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Snapshots {
    /// The snapshot of the last commit: the shared one, or a new one begun
    /// now (and shared, unless a commit came meanwhile).
    pub(crate) fn take(&self, db: &redb::Database) -> Result<Arc<Snapshot>, StoreError> {
        let generation = self.generation.load(Ordering::SeqCst);
        if let Some(shared) = self
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .filter(|s| s.generation == generation)
        {
            return Ok(Arc::clone(shared));
        }
        let fresh = Arc::new(Snapshot {
            generation,
            txn: db.begin_read().map_err(|e| error(e, "begin read"))?,
            tables: Default::default(),
        });
        self.install(&fresh);
        Ok(fresh)
    }

    /// Shares `fresh` with later readers if no commit came since its
    /// generation was loaded.
    fn install(&self, fresh: &Arc<Snapshot>) {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if self.generation.load(Ordering::SeqCst) == fresh.generation {
            *current = Some(Arc::clone(fresh));
        }
    }

    /// A commit ended (committed or not: a failed commit's outcome is
    /// unknown): no snapshot from before it is handed out again.
    pub(crate) fn retire(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use portcullis_core::store::{ReadTransaction as _, Store as _, WriteTransaction as _};

    use super::*;
    use crate::{Durability, RedbRead, RedbStore};

    fn store() -> (tempfile::TempDir, RedbStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(dir.path().join("db.redb"))
            .unwrap()
            .with_durability(Durability::None);
        (dir, store)
    }

    fn put(store: &RedbStore, value: &[u8]) {
        let mut w = store.begin_write().unwrap();
        w.put(Table::Grants, b"k", value).unwrap();
        w.commit().unwrap();
    }

    /// The value of the one key these tests write, as `r` sees it.
    fn value(r: &RedbRead) -> Option<Vec<u8>> {
        r.get(Table::Grants, b"k").unwrap()
    }

    #[test]
    fn readers_share_one_snapshot_until_a_commit_and_keep_theirs_after() {
        let (_dir, store) = store();
        put(&store, b"1");
        let (a, b) = (store.begin_read().unwrap(), store.begin_read().unwrap());
        assert!(Arc::ptr_eq(&a.snapshot, &b.snapshot));
        put(&store, b"2");
        let c = store.begin_read().unwrap();
        assert!(!Arc::ptr_eq(&a.snapshot, &c.snapshot));
        assert_eq!(value(&a).as_deref(), Some(&b"1"[..]));
        assert_eq!(value(&c).as_deref(), Some(&b"2"[..]));
    }

    #[test]
    fn a_dropped_write_leaves_the_snapshot_shared() {
        let (_dir, store) = store();
        put(&store, b"1");
        let a = store.begin_read().unwrap();
        let mut w = store.begin_write().unwrap();
        w.put(Table::Grants, b"k", b"2").unwrap();
        drop(w);
        let b = store.begin_read().unwrap();
        assert!(Arc::ptr_eq(&a.snapshot, &b.snapshot));
        assert_eq!(value(&b).as_deref(), Some(&b"1"[..]));
    }

    #[test]
    fn a_snapshot_begun_before_a_commit_is_not_shared_after_it() {
        let (_dir, store) = store();
        put(&store, b"1");
        // A reader loads the generation and redb takes its snapshot...
        let generation = store.snapshots.generation.load(Ordering::SeqCst);
        let early = Arc::new(Snapshot {
            generation,
            txn: store.db.begin_read().unwrap(),
            tables: Default::default(),
        });
        // ...a commit returns before the reader installs it.
        put(&store, b"2");
        store.snapshots.install(&early);
        let later = store.begin_read().unwrap();
        assert!(!Arc::ptr_eq(&early, &later.snapshot));
        assert_eq!(value(&later).as_deref(), Some(&b"2"[..]));
    }

    /// Racing readers and a writer: a read transaction begun after a
    /// commit returned always sees that commit or a later one.
    #[test]
    fn a_read_begun_after_a_commit_returned_sees_it_under_races() {
        let (_dir, store) = store();
        put(&store, &0u64.to_be_bytes());
        let store = Arc::new(store);
        let returned = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (store, returned, done) =
                    (Arc::clone(&store), Arc::clone(&returned), Arc::clone(&done));
                std::thread::spawn(move || {
                    let mut reads = 0u64;
                    while !done.load(Ordering::SeqCst) {
                        let floor = returned.load(Ordering::SeqCst);
                        let r = store.begin_read().unwrap();
                        let seen = value(&r).unwrap();
                        let seen = u64::from_be_bytes(seen.try_into().unwrap());
                        assert!(seen >= floor, "read {seen} after commit {floor} returned");
                        reads += 1;
                    }
                    reads
                })
            })
            .collect();
        for n in 1..=2_000u64 {
            put(&store, &n.to_be_bytes());
            returned.store(n, Ordering::SeqCst);
        }
        done.store(true, Ordering::SeqCst);
        let reads: u64 = readers.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(reads > 0);
    }
}
