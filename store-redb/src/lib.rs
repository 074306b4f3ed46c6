//! A durable [`Store`] for Portcullis on [redb](https://docs.rs/redb): one
//! redb table per core [`Table`], `&[u8]` keys and values, redb's own
//! serialisable write transactions.
//!
//! redb gives the contract natively: a write transaction is all-or-nothing
//! and rolled back when dropped, writers are serialised, a read transaction
//! is a snapshot. The host chooses [`Durability`]: `Immediate` (the default)
//! fsyncs every commit, so an acknowledged operation survives a crash;
//! `None` trades that for speed and is only for tests or caches.
//!
//! Read transactions share one snapshot, that of the store's last commit,
//! with the tables they opened kept open, until the store commits again:
//! the store is its database's only writer and every commit retires the
//! shared snapshot before it returns, so a read begun after a commit
//! returned sees it, as with a snapshot of its own (the `snapshot`
//! module's docs give the rules and why).
#![forbid(unsafe_code)]

mod snapshot;

use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use portcullis_core::store::{
    Entry, ReadTransaction, Savepoint, Store, StoreError, StoreErrorKind, Table, WriteTransaction,
};
/// Group commit (moved to the core, store-agnostic): re-exported where it
/// was first.
pub use portcullis_store_group as group;
pub use portcullis_store_group::{BatchWrite, GroupCommitter};
pub use redb::Durability;
use redb::{ReadableTable, TableDefinition};

use snapshot::{Snapshot, Snapshots};

type Def = TableDefinition<'static, &'static [u8], &'static [u8]>;

const META: Def = TableDefinition::new("meta");
const SITES: Def = TableDefinition::new("sites");
const CLIENTS: Def = TableDefinition::new("clients");
const CODES: Def = TableDefinition::new("codes");
const GRANTS: Def = TableDefinition::new("grants");
const GRANT_INDEX: Def = TableDefinition::new("grant_index");
const EXPIRY: Def = TableDefinition::new("expiry");
const AGENT_TOKENS: Def = TableDefinition::new("agent_tokens");
const REQUESTS: Def = TableDefinition::new("requests");
const OUTCOMES: Def = TableDefinition::new("outcomes");
const APPROVALS: Def = TableDefinition::new("approvals");
const TABS: Def = TableDefinition::new("tabs");
const GRANT_APPS: Def = TableDefinition::new("grant_apps");
const CLIENT_ASSERTIONS: Def = TableDefinition::new("client_assertions");
const WAITING_CALLS: Def = TableDefinition::new("waiting_calls");
const ACTIVITY: Def = TableDefinition::new("activity");
const APP_VIEWS: Def = TableDefinition::new("app_views");

/// The redb table of a core table. The names match [`Table::name`].
const fn definition(table: Table) -> Def {
    match table {
        Table::Meta => META,
        Table::Sites => SITES,
        Table::Clients => CLIENTS,
        Table::Codes => CODES,
        Table::Grants => GRANTS,
        Table::GrantIndex => GRANT_INDEX,
        Table::Expiry => EXPIRY,
        Table::AgentTokens => AGENT_TOKENS,
        Table::Requests => REQUESTS,
        Table::Outcomes => OUTCOMES,
        Table::Approvals => APPROVALS,
        Table::Tabs => TABS,
        Table::GrantApps => GRANT_APPS,
        Table::ClientAssertions => CLIENT_ASSERTIONS,
        Table::WaitingCalls => WAITING_CALLS,
        Table::Activity => ACTIVITY,
        Table::AppViews => APP_VIEWS,
        _ => unreachable_table(),
    }
}

#[cold]
const fn unreachable_table() -> Def {
    // `Table` is non_exhaustive for users; this crate is updated with the core.
    panic!("portcullis-store-redb is older than portcullis-core: unknown table")
}

/// The redb store.
#[derive(Debug)]
pub struct RedbStore {
    db: redb::Database,
    durability: Durability,
    /// The snapshot read transactions share, retired by every commit.
    snapshots: Arc<Snapshots>,
}

impl RedbStore {
    /// Opens the database at `path`, creating it (and every table) if needed.
    /// Commits are fsynced ([`Durability::Immediate`]).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let db = redb::Database::create(path).map_err(|e| error(e, "open database"))?;
        let store = Self {
            db,
            durability: Durability::Immediate,
            snapshots: Arc::default(),
        };
        store.create_tables()?;
        Ok(store)
    }

    /// Sets the durability of every later commit.
    #[must_use]
    pub fn with_durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// The underlying database, for backups and compaction. Write through
    /// the store, not through this: the store's reads share the snapshot
    /// of its own last commit, so a write committed here directly is not
    /// seen by them until the store commits again.
    #[must_use]
    pub fn database(&self) -> &redb::Database {
        &self.db
    }

    fn create_tables(&self) -> Result<(), StoreError> {
        let txn = self.db.begin_write().map_err(|e| error(e, "begin write"))?;
        for table in Table::ALL {
            txn.open_table(definition(table))
                .map_err(|e| error(e, "create table"))?;
        }
        txn.commit().map_err(|e| error(e, "commit"))
    }
}

impl Store for RedbStore {
    type Read<'a> = RedbRead;
    type Write<'a> = RedbWrite;

    fn begin_read(&self) -> Result<RedbRead, StoreError> {
        Ok(RedbRead {
            snapshot: self.snapshots.take(&self.db)?,
        })
    }

    fn begin_write(&self) -> Result<RedbWrite, StoreError> {
        let mut txn = self.db.begin_write().map_err(|e| error(e, "begin write"))?;
        txn.set_durability(self.durability)
            .map_err(|e| error(e, "set durability"))?;
        Ok(RedbWrite {
            txn,
            undo: Vec::new(),
            snapshots: Arc::clone(&self.snapshots),
        })
    }
}

/// A read transaction: the redb snapshot of the store's last commit,
/// shared with the other read transactions begun since.
pub struct RedbRead {
    snapshot: Arc<Snapshot>,
}

impl std::fmt::Debug for RedbRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RedbRead")
    }
}

impl ReadTransaction for RedbRead {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.get_with(table, key, <[u8]>::to_vec)
    }

    fn get_with<T>(
        &self,
        table: Table,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> T,
    ) -> Result<Option<T>, StoreError> {
        let Some(t) = self.snapshot.table(table)? else {
            return Ok(None);
        };
        let value = t.get(key).map_err(|e| error(e, "get"))?;
        Ok(value.map(|v| f(v.value())))
    }

    fn range(
        &self,
        table: Table,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        let Some(t) = self.snapshot.table(table)? else {
            return Ok(Vec::new());
        };
        collect(t, start, end, limit)
    }
}

/// A write transaction: redb's, rolled back by redb when dropped.
///
/// Savepoints are marks in an undo log this adapter keeps (the value each
/// write replaced, which redb hands back for free): redb's own savepoints
/// are persistent snapshots, far heavier than the per-operation marks the
/// engine takes.
pub struct RedbWrite {
    txn: redb::WriteTransaction,
    /// `(table, key, value before the write)`, oldest first.
    undo: Vec<(Table, Vec<u8>, Option<Vec<u8>>)>,
    /// The store's shared snapshot, retired when this commits.
    snapshots: Arc<Snapshots>,
}

impl std::fmt::Debug for RedbWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RedbWrite")
    }
}

impl ReadTransaction for RedbWrite {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let t = self
            .txn
            .open_table(definition(table))
            .map_err(|e| error(e, "open table"))?;
        let value = t.get(key).map_err(|e| error(e, "get"))?;
        Ok(value.map(|v| v.value().to_vec()))
    }

    /// Lends a copy: redb opens a table once per write transaction, so
    /// the value is copied out and the table closed before `f` runs, which
    /// keeps reads made from inside `f` possible.
    fn get_with<T>(
        &self,
        table: Table,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> T,
    ) -> Result<Option<T>, StoreError> {
        Ok(self.get(table, key)?.map(|v| f(&v)))
    }

    fn range(
        &self,
        table: Table,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        let t = self
            .txn
            .open_table(definition(table))
            .map_err(|e| error(e, "open table"))?;
        collect(&t, start, end, limit)
    }
}

impl WriteTransaction for RedbWrite {
    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        let mut t = self
            .txn
            .open_table(definition(table))
            .map_err(|e| error(e, "open table"))?;
        let before = t
            .insert(key, value)
            .map_err(|e| error(e, "insert"))?
            .map(|v| v.value().to_vec());
        drop(t);
        self.undo.push((table, key.to_vec(), before));
        Ok(())
    }

    fn delete(&mut self, table: Table, key: &[u8]) -> Result<bool, StoreError> {
        let mut t = self
            .txn
            .open_table(definition(table))
            .map_err(|e| error(e, "open table"))?;
        let removed = t
            .remove(key)
            .map_err(|e| error(e, "remove"))?
            .map(|v| v.value().to_vec());
        drop(t);
        let existed = removed.is_some();
        if existed {
            self.undo.push((table, key.to_vec(), removed));
        }
        Ok(existed)
    }

    fn savepoint(&mut self) -> Result<Savepoint, StoreError> {
        Ok(Savepoint::new(self.undo.len()))
    }

    fn rollback_to(&mut self, savepoint: Savepoint) -> Result<(), StoreError> {
        while self.undo.len() > savepoint.mark() {
            let Some((table, key, before)) = self.undo.pop() else {
                break;
            };
            let mut t = self
                .txn
                .open_table(definition(table))
                .map_err(|e| error(e, "open table"))?;
            match before {
                Some(value) => {
                    t.insert(key.as_slice(), value.as_slice())
                        .map_err(|e| error(e, "rollback"))?;
                }
                None => {
                    t.remove(key.as_slice()).map_err(|e| error(e, "rollback"))?;
                }
            }
        }
        Ok(())
    }

    /// Commits, then retires the shared snapshot before returning, whether
    /// or not the commit succeeded (a failed one may have landed): a read
    /// begun after this returns sees the commit.
    fn commit(self) -> Result<(), StoreError> {
        let committed = self.txn.commit();
        self.snapshots.retire();
        committed.map_err(|e| error(e, "commit"))
    }
}

fn collect(
    table: &impl ReadableTable<&'static [u8], &'static [u8]>,
    start: Bound<&[u8]>,
    end: Bound<&[u8]>,
    limit: usize,
) -> Result<Vec<Entry>, StoreError> {
    if let (Bound::Included(s) | Bound::Excluded(s), Bound::Included(e) | Bound::Excluded(e)) =
        (start, end)
        && s > e
    {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    if limit == 0 {
        return Ok(out);
    }
    for item in table
        .range::<&[u8]>((start, end))
        .map_err(|e| error(e, "range"))?
    {
        let (k, v) = item.map_err(|e| error(e, "range"))?;
        out.push((k.value().to_vec(), v.value().to_vec()));
        if out.len() == limit {
            break;
        }
    }
    Ok(out)
}

/// Maps a redb error into the store error, keeping what we were doing.
fn error(e: impl Into<redb::Error>, context: &'static str) -> StoreError {
    let e: redb::Error = e.into();
    let kind = match &e {
        redb::Error::Io(_) => StoreErrorKind::Io,
        redb::Error::Corrupted(_) | redb::Error::UpgradeRequired(_) => StoreErrorKind::Corrupt,
        redb::Error::DatabaseAlreadyOpen => StoreErrorKind::Unavailable,
        _ => StoreErrorKind::Other,
    };
    StoreError::new(kind, context, e)
}
