//! Opening what every command shares: the store, the key file and the
//! engine, and the demo site the server creates on first run.

use std::path::Path;
use std::sync::Arc;

use portcullis_core::engine::SiteOpError;
use portcullis_core::site::{Site, SiteConfig, SiteError, SiteId};
use portcullis_core::store::StoreErrorKind;
use portcullis_core::{Engine, Policy};
use portcullis_store_redb::RedbStore;

use crate::clock;
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

/// Opens the database at `db`, with a clear message when another process
/// (a running `portcullis serve`) holds it: redb allows one process at a time.
pub(crate) fn open_store(db: &Path) -> Result<RedbStore, String> {
    RedbStore::open(db).map_err(|e| {
        if e.kind() == StoreErrorKind::Unavailable {
            format!(
                "{} is in use by another process (is `portcullis serve` running?): \
                 redb allows one process at a time; stop the server first",
                db.display()
            )
        } else {
            format!("{}: {e}", db.display())
        }
    })
}

/// The engine over the database at `db` with its key file. `create` makes
/// a missing key file (only `serve` does, on first run); `loose` says what
/// a key file others can read or write gets.
pub(crate) fn engine(
    db: &Path,
    policy: Policy,
    create: bool,
    loose: LoosePermissions,
) -> Result<(Engine<Arc<RedbStore>>, Keys), String> {
    let store = Arc::new(open_store(db)?);
    let keys = keys::load(db, create, loose)?;
    let engine = Engine::new(store, keys.keyring.clone(), policy);
    Ok((engine, keys))
}

/// The demo site, created on first run. When the public URL changed since,
/// its issuer and resource prefix follow (tokens issued under the old URL
/// stop verifying, as they name the old issuer and audience).
pub(crate) fn ensure_demo_site(
    engine: &Engine<Arc<RedbStore>>,
    public_url: &str,
) -> Result<Site, String> {
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
pub(crate) fn demo_site(engine: &Engine<Arc<RedbStore>>) -> Result<Site, String> {
    engine.site(&site_id()).map_err(|e| match e {
        SiteOpError::Site(SiteError::NotFound) => {
            "no demo site yet: run `portcullis serve` once to create it".to_owned()
        }
        e => format!("reading the demo site: {e}"),
    })
}
