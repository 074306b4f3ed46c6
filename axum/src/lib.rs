//! # portcullis-axum
//!
//! Agent access for an axum app. A signed-in user of your app connects an
//! external AI agent (an MCP client) to it; this crate is everything between
//! the two that is not your app:
//!
//! * [`Portcullis::routes`]: the OAuth 2.1 authorization server an MCP
//!   client discovers and uses by itself — RFC 8414 and RFC 9728 metadata,
//!   dynamic registration (RFC 7591, stateless) and client ID metadata
//!   documents, `/authorize` with PKCE and a consent screen (CSRF and
//!   `Origin` checked), `/token` with refresh rotation and reuse detection,
//!   `/revoke`, the key set and introspection for other services — the
//!   approvals page where a person approves an agent's write, and the
//!   connected-agents page where they see and disconnect their agents;
//! * [`Portcullis::protect`] (or [`Portcullis::layer`]): the bearer check in
//!   front of your MCP service (rmcp's `StreamableHttpService`, or any HTTP
//!   service), `401`/`403` challenges that tell a client how to sign in and
//!   step up, and the verified [`Agent`], which a handler takes as an
//!   argument (an extractor) or reads from the request's extensions;
//!   [`remote::RemoteResource`] is the same check in another process, with
//!   the site's published keys alone;
//! * [`Portcullis::run_in_tab`]: the execution ledger around a program of
//!   actions the user's connected tab performs, reached through your
//!   [`TabChannel`] ([`tab`]): the executor is chosen per call.
//! * [`Portcullis::run_once`]: the execution ledger around one action your
//!   server performs for an agent: it runs **at most once** per request id
//!   under retries, races, crashes and restarts, asks the person first when
//!   it writes (the approval bound to the exact arguments and used once),
//!   and answers a repeated call with the stored result;
//!   [`Portcullis::run_joining`] is the same for a client that cannot name
//!   a request id: its identical calls join the unfinished one, so a retry
//!   shows no second card and gets the result once it is approved.
//! * production layers for the routes around it: [`body_timeout`] (a
//!   request body that stalls fails, without a timer for a body that
//!   arrived whole) and [`strict_json`] (a JSON-RPC body that is not one
//!   well-formed JSON text, duplicate member names included, is refused
//!   with JSON-RPC's own error before your MCP service parses it).
//!
//! What you supply is a [`Host`]: who is signed in on a request, where a
//! signed-out user signs in, and, if you like, your own consent screen.
//!
//! ```toml
//! [dependencies]
//! portcullis-axum = { version = "0.1", features = ["rmcp"] }
//! ```
//!
//! | feature | what it adds |
//! |---|---|
//! | `redb` (default) | [`RedbStore`]: one process, a durable file; without it (`default-features = false`) no redb code is built, for a PostgreSQL host |
//! | `rmcp` | glue for rmcp servers: [`Agent`] as a tool argument, [`rmcp::Call`] (a run's answer as a `CallToolResult`, the request id from a call's `_meta`) |
//! | `postgres` | [`HostStore`] for the shared PostgreSQL store (several instances) |
//! | `memory` | [`HostStore`] for the in-memory store (tests, demos) |
//!
//! ```no_run
//! # use axum::http::request::Parts;
//! # use axum::response::Response;
//! # struct App;
//! # impl portcullis_axum::Host for App {
//! #     async fn signed_in(&self, _: &Parts) -> Option<portcullis_axum::SignedIn> { None }
//! #     fn sign_in(&self, _: &str) -> Response { portcullis_axum::see_other("/login") }
//! # }
//! # async fn run(mcp: axum::routing::MethodRouter) -> Result<(), Box<dyn std::error::Error>> {
//! use portcullis_axum::{Portcullis, Keyring};
//!
//! let store = portcullis_axum::RedbStore::open("agents.redb")?;
//! let keyring = portcullis_axum::keys::load_or_create(portcullis_axum::keys::default_path("notes")?)?;
//! let portcullis = Portcullis::builder(store, keyring)
//!     .public_url("https://notes.example")
//!     .site("notes", "Notes")
//!     .scope("notes:read", "read your notes")
//!     .scope("notes:write", "add notes (each one asks you first)")
//!     .build(App)
//!     .await?;
//! let app: axum::Router = axum::Router::new()
//!     .merge(portcullis.routes())
//!     .route_service(&portcullis.mcp_route(), portcullis.protect(mcp));
//! # let _ = app; Ok(()) }
//! ```
//!
//! ## The async rule
//!
//! Engine operations do store I/O. Every one this crate makes runs on
//! tokio's blocking pool (or, for the writes of a single-process store, in a
//! group commit there); see [`store`] for the details, and do the same in
//! your own calls to the [`Engine`].

mod agents;
mod approvals;
mod assertions;
pub mod body_timeout;
mod builder;
mod csrf;
mod documents;
pub mod forms;
mod guard;
mod host;
pub mod key_reload;
pub mod keys;
pub mod navigate;
mod oauth;
mod page_request;
pub mod pages;
pub mod remote;
mod respond;
#[cfg(feature = "rmcp")]
pub mod rmcp;
mod run;
pub mod store;
pub mod strict_json;
mod sweep;
pub mod tab;
mod user;

use std::sync::{Arc, RwLock};

use portcullis_core::Engine;
use portcullis_core::executor::ExecutorId;
use portcullis_core::scope::ScopeSet;
use portcullis_core::site::{Site, SiteId};

pub use builder::{BuildError, Builder};
pub use guard::{Agent, Gatekeeper, Identity, MissingAgent, Protect, ProtectLayer, ScopeRequired};
pub use host::Host;
pub use pages::ConsentPage;
pub use portcullis_core::Policy;
pub use portcullis_core::jwt::{Algorithm, Keyring};
pub use portcullis_core::ledger::{Action, BusinessError, Effect, RequestId};
pub use portcullis_core::redirect::SafePath;
/// The durable single-process store (a redb file), so a host depends on
/// this crate alone (feature `redb`, on by default).
#[cfg(feature = "redb")]
pub use portcullis_store_redb::RedbStore;
pub use respond::{
    core as core_response, html, internal as internal_error, see_other, store as store_error,
};
pub use run::{Act, Outcome, Pending, Ran, Refused, RequestEvents};
pub use store::HostStore;
pub use tab::{Program, ProgramError, TabChannel, TabFuture, TabJob, TabWaits};
pub use user::SignedIn;

use crate::csrf::Csrf;
use crate::documents::Documents;
use crate::host::DynHost;
use crate::store::Writer;

/// The agent access of one site of your app: cheap to clone (one `Arc`).
///
/// On PostgreSQL, drop the last handle on a blocking thread, or keep it
/// for the life of the process (as the reference server does): the
/// synchronous driver's connection pool must not be dropped on a tokio
/// worker, where it panics.
pub struct Portcullis<S: HostStore> {
    inner: Arc<Inner<S>>,
}

impl<S: HostStore> Clone for Portcullis<S> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<S: HostStore> std::fmt::Debug for Portcullis<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Portcullis")
            .field("site", &self.inner.site_id)
            .finish_non_exhaustive()
    }
}

/// What every route, the guard and `run_once` share.
pub(crate) struct Inner<S: HostStore> {
    /// The engine, replaced whole when the keys change
    /// ([`Portcullis::set_keyring`]): an operation holds the one it began
    /// with to its end.
    engine: RwLock<Arc<Engine<Arc<S>>>>,
    writer: Writer<S>,
    site_id: SiteId,
    /// What the routes and the guard need of the site, re-read by
    /// [`Portcullis::reload_site`].
    site: RwLock<Arc<SiteFacts>>,
    host: Box<dyn DynHost>,
    csrf: Csrf,
    documents: Documents,
    /// The site's scopes and what each lets an agent do.
    scopes: Vec<(String, String)>,
    /// The scopes every MCP request needs (the first challenge names them).
    endpoint_scopes: ScopeSet,
    /// The public origin, no trailing slash.
    origin: String,
    /// The path of the MCP endpoint, without the site key (`/mcp`).
    mcp_path: String,
    /// Where the authorization server's routes live (`""` or `/oauth`).
    oauth_path: String,
    /// The connected-agents page.
    agents_path: String,
    /// The path of the approvals page.
    approvals_path: String,
    /// This process as the server executor of `run_once`.
    executor: ExecutorId,
    /// Wakes `run_once` callers waiting on a request.
    events: run::Events,
    /// Which clients declared URL elicitation in their `initialize`.
    initialized: guard::Initialized,
    /// How long `run_once` waits for a person's decision before answering
    /// `approval_pending`.
    approval_wait: std::time::Duration,
    /// Ends the sweeps when the last handle goes.
    _stop: tokio::sync::watch::Sender<bool>,
}

impl<S: HostStore> Inner<S> {
    /// The engine as it is now.
    pub(crate) fn engine(&self) -> Arc<Engine<Arc<S>>> {
        Arc::clone(
            &self
                .engine
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// The site as the routes and the guard use it.
#[derive(Debug)]
pub(crate) struct SiteFacts {
    /// The stored site.
    pub(crate) site: Site,
    /// Its MCP URL (`resource_prefix + public_key`).
    pub(crate) resource: String,
    /// Where its RFC 9728 document is served (absolute URL; shared with
    /// every [`Agent`] checked against it).
    pub(crate) resource_metadata: Arc<str>,
    /// The site's RFC 8414 §3 metadata document, serialized once: it is a
    /// function of the stored site alone, and a new `SiteFacts` is built
    /// whenever the site is re-read, so a GET sends these bytes as they are.
    pub(crate) authorization_server_document: axum::body::Bytes,
    /// The site's RFC 9728 §3.2 document, likewise.
    pub(crate) protected_resource_document: axum::body::Bytes,
}

impl SiteFacts {
    pub(crate) fn of(site: Site) -> Self {
        use portcullis_core::metadata::{AuthorizationServerMetadata, ProtectedResourceMetadata};
        Self {
            resource: site.resource(),
            resource_metadata: portcullis_core::metadata::protected_resource_metadata_url(&site)
                .into(),
            authorization_server_document: AuthorizationServerMetadata::for_site(&site)
                .to_json()
                .into(),
            protected_resource_document: ProtectedResourceMetadata::for_site(&site)
                .to_json()
                .into(),
            site,
        }
    }
}

impl<S: HostStore> Portcullis<S> {
    /// A builder over `store`, signing tokens with `keyring` (see [`keys`]
    /// for a key file).
    pub fn builder(store: S, keyring: Keyring) -> Builder<S> {
        Builder::new(store, keyring)
    }

    /// The engine, for what this crate does not wrap (administration,
    /// listings). Its operations block: call them on the blocking pool.
    /// The keys may change ([`Portcullis::set_keyring`]): take it again for
    /// each operation rather than keeping it.
    #[must_use]
    pub fn engine(&self) -> Arc<Engine<Arc<S>>> {
        self.inner.engine()
    }

    /// Signs and verifies with `keyring` from now on: new tokens with its
    /// active keys, tokens already issued while their keys still verify.
    /// How a host applies a routine rotation ([`keys::rotate`]) without a
    /// restart; [`Builder::watch_key_file`] calls it when the file changes. Refused,
    /// changing nothing, when `keyring` has no active HS256 key or no key
    /// that signs the site's access tokens now.
    pub fn set_keyring(&self, keyring: Keyring) -> Result<(), BuildError> {
        let alg = self.facts().site.access_token_alg;
        builder::check_keyring(&keyring, alg, now())?;
        let engine = self.inner.engine();
        let next = Arc::new(Engine::new(
            Arc::clone(engine.store()),
            keyring,
            engine.policy().clone(),
        ));
        *self
            .inner
            .engine
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = next;
        tracing::info!("signing keys replaced");
        Ok(())
    }

    /// The site's id.
    #[must_use]
    pub fn site_id(&self) -> &SiteId {
        &self.inner.site_id
    }

    /// The MCP URL agents are given: `<public url><mcp path>/<site key>`.
    /// Rotating the site key moves it.
    #[must_use]
    pub fn mcp_url(&self) -> String {
        self.facts().resource.clone()
    }

    /// The route pattern to mount the protected MCP service at
    /// (`/mcp/{key}`): the guard answers 404 unless `{key}` is the site's
    /// current key.
    #[must_use]
    pub fn mcp_route(&self) -> String {
        format!("{}/{{key}}", self.inner.mcp_path)
    }

    /// The URL of the approvals page.
    #[must_use]
    pub fn approvals_url(&self) -> String {
        format!("{}{}", self.inner.origin, self.inner.approvals_path)
    }

    /// Reads the site again: call it when another process changed it (an
    /// admin command rotated its key or turned it off; on PostgreSQL, when
    /// its notification arrives). Blocking: call it on the blocking pool.
    pub fn reload_site(&self) -> Result<(), portcullis_core::engine::SiteOpError> {
        let site = self.inner.engine().site(&self.inner.site_id)?;
        let mut facts = self
            .inner
            .site
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if facts.site != site {
            *facts = Arc::new(SiteFacts::of(site));
        }
        Ok(())
    }

    /// Applies the write `op` to the store through this crate's writer,
    /// **on the calling thread** (call it from the blocking pool): with
    /// group commit on a single-process store, or in a transaction of its
    /// own retried after a conflict on a shared one (so `op` may run more
    /// than once: a `Fn`, every effect through the transaction). `op`
    /// applies engine `op_in` forms to the [`store::Txn`]; its answer
    /// comes back once it is durable. `Err` when the transaction could not
    /// be opened or committed: nothing of `op` was applied.
    pub fn commit<T, F>(&self, op: F) -> Result<T, portcullis_core::store::StoreError>
    where
        T: Send + 'static,
        F: for<'t, 'b, 'w> Fn(&mut store::Txn<'t, 'b, S::Write<'w>>) -> T + Send + Sync + 'static,
    {
        self.inner.writer.commit(self.inner.engine().store(), op)
    }

    /// [`Portcullis::commit`] for an operation that consumes what only the
    /// core may duplicate for a second attempt (an execution ticket), so it
    /// runs once: with group commit it gets the batch (`Some`) and applies
    /// an `op_in` form; on a shared store it gets `None` and calls the
    /// engine's own `op` form, which retries a conflict itself.
    pub fn commit_once<T, F>(&self, op: F) -> Result<T, portcullis_core::store::StoreError>
    where
        T: Send + 'static,
        F: for<'t, 'b, 'w> FnOnce(Option<&mut store::Txn<'t, 'b, S::Write<'w>>>) -> T
            + Send
            + 'static,
    {
        self.inner.writer.commit_once(op)
    }

    pub(crate) fn facts(&self) -> Arc<SiteFacts> {
        Arc::clone(
            &self
                .inner
                .site
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// Percent-encodes `s` for a query parameter value (a sign-in page's
/// `next`, for instance).
#[must_use]
pub fn url_encode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// The clock every engine operation is given, in whole seconds since the
/// Unix epoch: this crate reads it, the core never does. A host's own
/// calls to the [`Engine`] take `now` from here too.
#[must_use]
pub fn now() -> portcullis_core::Timestamp {
    portcullis_core::TimestampMs::from_millis(now_ms_u64()).timestamp()
}

pub(crate) fn now_ms() -> portcullis_core::TimestampMs {
    portcullis_core::TimestampMs::from_millis(now_ms_u64())
}

fn now_ms_u64() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
