//! The server's one store choice: the redb file (one process) or a
//! PostgreSQL database (several instances, admin commands while they run).
//!
//! [`Db`] is an enum over the two stores, with enum transactions, so the
//! engine stays monomorphic (`Engine<Arc<Db>>`): every store call is one
//! `match` on a two-variant tag before the store's own code, nothing
//! boxed or dynamic. [`Location`] is what `--db` names: a URL starting with
//! `postgres://` or `postgresql://` is PostgreSQL, anything else a redb
//! file path. A location's `Debug` and [`Location::describe`] never show a
//! password.

use std::fmt;
use std::ops::Bound;
use std::path::{Path, PathBuf};

use portcullis_core::store::{
    Entry, ReadTransaction, Savepoint, Store, StoreError, Table, WriteTransaction,
};
use portcullis_store_postgres::{PostgresRead, PostgresStore, PostgresWrite};
use portcullis_store_redb::{RedbRead, RedbStore, RedbWrite};

/// Where the server's state lives, as `--db` names it.
#[derive(Clone)]
pub(crate) enum Location {
    /// A redb database file.
    Redb(PathBuf),
    /// A PostgreSQL connection string (it may carry a password: never shown).
    Postgres(String),
}

impl Location {
    /// Reads a `--db` value: a `postgres://` or `postgresql://` URL, or a
    /// file path.
    pub(crate) fn parse(value: &str) -> Result<Self, String> {
        if value.starts_with("postgres://") || value.starts_with("postgresql://") {
            // Checked when the store opens, not here: clap repeats a
            // refused value in its message, password included.
            Ok(Self::Postgres(value.to_owned()))
        } else if value.is_empty() {
            Err("an empty database path".to_owned())
        } else {
            Ok(Self::Redb(PathBuf::from(value)))
        }
    }

    /// The redb file, if it is one.
    pub(crate) fn redb_path(&self) -> Option<&Path> {
        match self {
            Self::Redb(p) => Some(p),
            Self::Postgres(_) => None,
        }
    }

    /// The connection string, if it is PostgreSQL.
    pub(crate) fn postgres_url(&self) -> Option<&str> {
        match self {
            Self::Redb(_) => None,
            Self::Postgres(url) => Some(url),
        }
    }

    /// A name for messages: the path, or the URL without its password and
    /// query (where a `password=` parameter could hide).
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::Redb(p) => p.display().to_string(),
            Self::Postgres(url) => url::Url::parse(url)
                .ok()
                .and_then(|mut u| {
                    u.set_password(None).ok()?;
                    u.set_query(None);
                    Some(u.to_string())
                })
                .unwrap_or_else(|| "postgres://(unparsable URL)".to_owned()),
        }
    }
}

impl fmt::Debug for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// The store the server runs on.
#[derive(Debug)]
pub(crate) enum Db {
    /// One process owns the file.
    Redb(RedbStore),
    /// Shared by every instance on the database.
    Postgres(PostgresStore),
}

impl Db {
    /// Whether several processes may share this store (PostgreSQL).
    pub(crate) fn shared(&self) -> bool {
        matches!(self, Self::Postgres(_))
    }
}

/// A redb file is this process's alone; PostgreSQL is shared.
impl portcullis_axum::HostStore for Db {
    fn is_local(&self) -> bool {
        !self.shared()
    }

    fn in_memory<T>(&self, f: impl FnOnce() -> T) -> Option<T> {
        match self {
            Self::Redb(_) => None,
            Self::Postgres(s) => s.in_memory(f),
        }
    }
}

/// A read transaction of [`Db`].
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "one transaction per request lives on its stack; boxing would allocate per transaction"
)]
pub(crate) enum DbRead<'a> {
    /// redb's.
    Redb(RedbRead),
    /// PostgreSQL's.
    Postgres(PostgresRead<'a>),
}

/// A write transaction of [`Db`].
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "one transaction per request lives on its stack; boxing would allocate per transaction"
)]
pub(crate) enum DbWrite<'a> {
    /// redb's.
    Redb(RedbWrite),
    /// PostgreSQL's.
    Postgres(PostgresWrite<'a>),
}

impl Store for Db {
    type Read<'a> = DbRead<'a>;
    type Write<'a> = DbWrite<'a>;

    fn begin_read(&self) -> Result<DbRead<'_>, StoreError> {
        Ok(match self {
            Self::Redb(s) => DbRead::Redb(s.begin_read()?),
            Self::Postgres(s) => DbRead::Postgres(s.begin_read()?),
        })
    }

    fn begin_write(&self) -> Result<DbWrite<'_>, StoreError> {
        Ok(match self {
            Self::Redb(s) => DbWrite::Redb(s.begin_write()?),
            Self::Postgres(s) => DbWrite::Postgres(s.begin_write()?),
        })
    }
}

/// The reads of both transaction enums: each call forwarded to the store
/// whose transaction it is.
macro_rules! forward_reads {
    ($($ty:ident),*) => {$(
        impl ReadTransaction for $ty<'_> {
            fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
                match self {
                    Self::Redb(t) => t.get(table, key),
                    Self::Postgres(t) => t.get(table, key),
                }
            }

            fn get_with<T>(
                &self,
                table: Table,
                key: &[u8],
                f: impl FnOnce(&[u8]) -> T,
            ) -> Result<Option<T>, StoreError> {
                match self {
                    Self::Redb(t) => t.get_with(table, key, f),
                    Self::Postgres(t) => t.get_with(table, key, f),
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
                    Self::Redb(t) => t.range(table, start, end, limit),
                    Self::Postgres(t) => t.range(table, start, end, limit),
                }
            }
        }
    )*};
}

forward_reads!(DbRead, DbWrite);

impl WriteTransaction for DbWrite<'_> {
    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        match self {
            Self::Redb(t) => t.put(table, key, value),
            Self::Postgres(t) => t.put(table, key, value),
        }
    }

    fn delete(&mut self, table: Table, key: &[u8]) -> Result<bool, StoreError> {
        match self {
            Self::Redb(t) => t.delete(table, key),
            Self::Postgres(t) => t.delete(table, key),
        }
    }

    fn savepoint(&mut self) -> Result<Savepoint, StoreError> {
        match self {
            Self::Redb(t) => t.savepoint(),
            Self::Postgres(t) => t.savepoint(),
        }
    }

    fn rollback_to(&mut self, savepoint: Savepoint) -> Result<(), StoreError> {
        match self {
            Self::Redb(t) => t.rollback_to(savepoint),
            Self::Postgres(t) => t.rollback_to(savepoint),
        }
    }

    fn commit(self) -> Result<(), StoreError> {
        match self {
            Self::Redb(t) => t.commit(),
            Self::Postgres(t) => t.commit(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_postgres_and_its_password_is_never_shown() {
        let l = Location::parse("postgres://u:s3cret-pw@127.0.0.1:5/db").unwrap();
        assert!(l.postgres_url().is_some() && l.redb_path().is_none());
        assert!(!format!("{l:?}").contains("s3cret-pw"), "{l:?}");
        assert!(!l.describe().contains("s3cret-pw"));
        let q = Location::parse("postgresql://u@127.0.0.1/db?password=s3cret-pw").unwrap();
        assert!(!q.describe().contains("s3cret-pw"), "{q:?}");
        assert!(q.describe().starts_with("postgresql://u@127.0.0.1/db"));
        let f = Location::parse("portcullis.redb").unwrap();
        assert_eq!(f.redb_path(), Some(Path::new("portcullis.redb")));
        assert!(Location::parse("").is_err());
    }
}
