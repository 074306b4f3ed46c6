//! Opening what every command shares: the store, the key file and the
//! engine, and the demo site the server creates on first run.

use std::sync::Arc;

use portcullis_core::engine::SiteOpError;
use portcullis_core::site::{Site, SiteConfig, SiteError, SiteId};
use portcullis_core::store::StoreErrorKind;
use portcullis_core::{Engine, Policy};
use portcullis_store_postgres::PostgresConfig;
use portcullis_store_redb::RedbStore;

use crate::cli::DbArgs;
use crate::clock;
use crate::db::{Db, Location};
use crate::keys::{self, Keys, LoosePermissions};

/// The id of the demo site.
pub(crate) const SITE_ID: &str = "demo";
/// Where the MCP endpoint lives: the resource URL is
/// `<public-url>/mcp/<site public key>`.
pub(crate) const MCP_PREFIX: &str = "/mcp/";

/// The demo site's id.
pub(crate) fn site_id() -> SiteId {
    SiteId::parse(SITE_ID).unwrap_or_else(|_| unreachable!("a valid literal id"))
}

/// Opens the database `db` names, with a clear message when another
/// process (a running `portcullis serve`) holds a redb file: redb allows one
/// process at a time. PostgreSQL is shared: any number of servers and admin
/// commands at once.
pub(crate) fn open_store(db: &DbArgs) -> Result<Db, String> {
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
    let key_path = keys::key_path(db)?;
    let store = Arc::new(open_store(db)?);
    let keys = keys::load(&key_path, create, loose)?;
    let engine = Engine::new(store, keys.keyring.clone(), policy);
    Ok((engine, keys))
}

/// The demo site, created on first run. When the public URL changed since,
/// its issuer and resource prefix follow (tokens issued under the old URL
/// stop verifying, as they name the old issuer and audience).
pub(crate) fn ensure_demo_site(engine: &Engine<Arc<Db>>, public_url: &str) -> Result<Site, String> {
    // On PostgreSQL, instances starting together may race to create or
    // update the site: the loser reads what the winner wrote and tries again.
    let mut attempt = 0;
    loop {
        match ensure_once(engine, public_url) {
            Err(e) if engine.store().shared() && attempt < 3 => {
                attempt += 1;
                tracing::debug!(error = %e, "demo site raced another instance; again");
            }
            done => return done,
        }
    }
}

fn ensure_once(engine: &Engine<Arc<Db>>, public_url: &str) -> Result<Site, String> {
    let mut config = SiteConfig::new(
        site_id(),
        "Portcullis demo",
        public_url,
        &format!("{public_url}{MCP_PREFIX}"),
    );
    config.allowed_origins = vec![public_url.to_owned()];
    // Client-ID metadata documents are fetched by the server (see
    // `serve::documents`), and advertised in its discovery document.
    config.client_metadata_documents = true;
    match engine.site(&config.id) {
        Ok(site)
            if site.issuer == config.issuer
                && site.resource_prefix == config.resource_prefix
                && site.client_metadata_documents == config.client_metadata_documents =>
        {
            Ok(site)
        }
        Ok(site) => {
            tracing::info!(old = %site.issuer, new = %config.issuer, "public URL changed: updating the demo site");
            config.scopes = site.scopes;
            config.auto_approval_allowed = site.auto_approval_allowed;
            config.retry_after_secs = site.retry_after_secs;
            engine
                .update_site(config)
                .map_err(|e| format!("updating the demo site: {e}"))
        }
        Err(SiteOpError::Site(SiteError::NotFound)) => engine
            .create_site(config, &mut rand::rng(), clock::now())
            .map_err(|e| format!("creating the demo site: {e}")),
        Err(e) => Err(format!("reading the demo site: {e}")),
    }
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
