//! Opening what every command shares: the store, the key file and the
//! engine, and the demo site the server creates on first run.

use std::sync::Arc;
use std::time::Duration;

use portcullis_core::engine::SiteOpError;
use portcullis_core::site::{Site, SiteError, SiteId};
use portcullis_core::store::StoreErrorKind;
use portcullis_core::{Engine, Policy};
use portcullis_store_postgres::PostgresConfig;
use portcullis_store_redb::RedbStore;

use crate::cli::DbArgs;
use crate::db::{Db, Location};
use crate::keys::{self, Keys, LoosePermissions};

/// The id of the demo site.
pub(crate) const SITE_ID: &str = "demo";
/// The name its consent screen shows.
pub(crate) const SITE_NAME: &str = "Portcullis demo";

/// The demo site's id.
pub(crate) fn site_id() -> SiteId {
    SiteId::parse(SITE_ID).unwrap_or_else(|_| unreachable!("a valid literal id"))
}

/// Opens the database `db` names, with a clear message when another
/// process (a running `portcullis serve`) holds a redb file: redb allows one
/// process at a time. PostgreSQL is shared: any number of servers and admin
/// commands at once; `read_cache` turns its read cache on
/// ([`PostgresConfig::read_cache`], for `serve`).
pub(crate) fn open_store(db: &DbArgs, read_cache: Option<Duration>) -> Result<Db, String> {
    match &db.db {
        Location::Redb(path) => RedbStore::open(path).map(Db::Redb).map_err(|e| {
            if e.kind() == StoreErrorKind::Unavailable {
                format!(
                    "{} is in use by another process (is `portcullis serve` running?): \
                     redb allows one process at a time; stop the server first (or run on \
                     PostgreSQL, which allows admin commands while servers run)",
                    path.display()
                )
            } else {
                format!("{}: {e}", path.display())
            }
        }),
        Location::Postgres(url) => {
            let describe = || db.db.describe();
            let mut config =
                PostgresConfig::parse(url).map_err(|e| format!("{}: {e}", describe()))?;
            if let Some(schema) = &db.db_schema {
                config = config
                    .schema(schema)
                    .map_err(|e| format!("--db-schema: {e}"))?;
            }
            if let Some(ttl) = read_cache {
                config = config.read_cache(ttl);
            }
            // The store's errors name user, host, port and database only.
            config
                .open()
                .map(Db::Postgres)
                .map_err(|e| format!("{}: {e}", describe()))
        }
    }
}

/// The engine over the database `db` names with its key file. `create`
/// makes a missing key file (only `serve` does, on first run); `loose` says
/// what a key file others can read or write gets.
pub(crate) fn engine(
    db: &DbArgs,
    policy: Policy,
    create: bool,
    loose: LoosePermissions,
) -> Result<(Engine<Arc<Db>>, Keys), String> {
    let (store, keys) = open(db, create, loose, None)?;
    let engine = Engine::new(Arc::new(store), keys.keyring.clone(), policy);
    Ok((engine, keys))
}

/// The database `db` names and its key file (see [`engine`]).
pub(crate) fn open(
    db: &DbArgs,
    create: bool,
    loose: LoosePermissions,
    read_cache: Option<Duration>,
) -> Result<(Db, Keys), String> {
    let key_path = keys::key_path(db)?;
    let store = open_store(db, read_cache)?;
    let keys = keys::load(&key_path, create, loose).map_err(|e| e.to_string())?;
    Ok((store, keys))
}

/// The demo site as stored (admin commands).
pub(crate) fn demo_site(engine: &Engine<Arc<Db>>) -> Result<Site, String> {
    engine.site(&site_id()).map_err(|e| match e {
        SiteOpError::Site(SiteError::NotFound) => {
            "no demo site yet: run `portcullis serve` once to create it".to_owned()
        }
        e => format!("reading the demo site: {e}"),
    })
}
