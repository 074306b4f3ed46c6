//! [`Builder`]: the site, its scopes and the host's hooks, put together
//! once at start.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use portcullis_core::engine::SiteOpError;
use portcullis_core::jwt::Algorithm;
use portcullis_core::scope::ScopeSet;
use portcullis_core::site::{Site, SiteConfig, SiteError, SiteId};
use portcullis_core::{Engine, Own, Policy};

use crate::csrf::Csrf;
use crate::documents::Documents;
use crate::host::Host;
use crate::key_reload::{self, KeyFile};
use crate::keys::LoosePermissions;
use crate::store::{HostStore, Writer};
use crate::{Inner, Keyring, Portcullis, SiteFacts, run, sweep};

/// Why [`Builder::build`] failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum BuildError {
    /// No [`Builder::public_url`] was given.
    NoPublicUrl,
    /// A URL that must be an origin (`https://host[:port]`, or `http://`
    /// for loopback development) is not: [`Builder::public_url`] or
    /// [`Builder::mcp_origin`] (named).
    NotAnOrigin(&'static str),
    /// A route path is not a path like `/mcp` (letters, digits, `- _ .`
    /// and `/`, no trailing `/`): the setting named.
    NotARoutePath(&'static str),
    /// Two of this crate's routes would be served at one path (the paths
    /// settings chose: [`Builder::mcp_path`], [`Builder::approvals_path`],
    /// [`Builder::oauth_path`]).
    RouteClash(String),
    /// The site id is not 1–64 of `A-Z a-z 0-9 - _`.
    SiteId(SiteError),
    /// A declared scope is not a scope token (RFC 6749 §3.3).
    Scope(String),
    /// No scope was declared ([`Builder::scope`]).
    NoScopes,
    /// An endpoint scope is not one of the declared scopes.
    EndpointScope(String),
    /// The client-document fetcher could not be built (its TLS setup).
    Fetcher(String),
    /// The site could not be created or read.
    Site(SiteOpError),
    /// This process could not start as a server executor.
    Executor(portcullis_core::executor::ExecutorError),
    /// A blocking task failed.
    Join,
    /// The keyring has no active key of this algorithm now: HS256 (every
    /// site needs one, for its MACs) or the site's access-token algorithm.
    NoActiveKey(Algorithm),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoPublicUrl => f.write_str("public_url is required"),
            Self::NotAnOrigin(what) => write!(
                f,
                "{what} must be an origin: https:// (or http:// for loopback development), \
                 host and port only"
            ),
            Self::NotARoutePath(what) => write!(
                f,
                "{what} must be a path like /mcp (letters, digits, - _ . and /)"
            ),
            Self::RouteClash(path) => write!(f, "two routes would be served at {path}"),
            Self::SiteId(e) => write!(f, "site id: {e}"),
            Self::Scope(scope) => write!(f, "scope {scope:?} is not a scope token"),
            Self::NoScopes => f.write_str("declare at least one scope (Builder::scope)"),
            Self::EndpointScope(scope) => {
                write!(f, "endpoint scope {scope:?} is not a declared scope")
            }
            Self::Fetcher(why) => write!(f, "the client-document fetcher: {why}"),
            Self::Site(e) => write!(f, "the site: {e}"),
            Self::Executor(e) => write!(f, "the server executor: {e}"),
            Self::Join => f.write_str("a blocking task failed"),
            Self::NoActiveKey(alg) => write!(f, "the keyring has no active {alg} key"),
        }
    }
}

impl std::error::Error for BuildError {}

/// Checks that `keyring` can serve a site whose access tokens are signed
/// with `alg` at `now`: an active HS256 key (codes, refresh tokens and the
/// other MACs), and an active key of `alg`.
pub(crate) fn check_keyring(
    keyring: &Keyring,
    alg: Algorithm,
    now: portcullis_core::Timestamp,
) -> Result<(), BuildError> {
    if keyring.active_key().is_none() {
        return Err(BuildError::NoActiveKey(Algorithm::Hs256));
    }
    if keyring.active_kid_for(alg, now).is_none() {
        return Err(BuildError::NoActiveKey(alg));
    }
    Ok(())
}

/// Puts a [`Portcullis`] together: [`Portcullis::builder`].
#[must_use]
pub struct Builder<S: HostStore> {
    store: Arc<S>,
    keyring: Keyring,
    policy: Policy,
    public_url: Option<String>,
    mcp_origin: Option<String>,
    oauth_path: Option<String>,
    agents_path: String,
    site_id: String,
    site_name: String,
    mcp_path: String,
    approvals_path: String,
    scopes: Vec<(String, String)>,
    endpoint_scopes: Vec<String>,
    allowed_origins: Vec<String>,
    auto_approval: bool,
    client_documents: bool,
    dev_loopback_documents: bool,
    access_token_alg: Algorithm,
    approval_wait: Duration,
    key_file: Option<KeyFile>,
}

impl<S: HostStore> fmt::Debug for Builder<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("site_id", &self.site_id)
            .field("public_url", &self.public_url)
            .finish_non_exhaustive()
    }
}

impl<S: HostStore> Builder<S> {
    pub(crate) fn new(store: S, keyring: Keyring) -> Self {
        Self {
            store: Arc::new(store),
            keyring,
            policy: Policy::default(),
            public_url: None,
            mcp_origin: None,
            oauth_path: None,
            agents_path: "/connected-agents".into(),
            site_id: "default".into(),
            site_name: "this app".into(),
            mcp_path: "/mcp".into(),
            approvals_path: "/agent-approvals".into(),
            scopes: Vec::new(),
            endpoint_scopes: Vec::new(),
            allowed_origins: Vec::new(),
            auto_approval: true,
            client_documents: true,
            dev_loopback_documents: false,
            access_token_alg: Algorithm::Hs256,
            approval_wait: Duration::from_secs(20),
            key_file: None,
        }
    }

    /// The app's public origin (`https://notes.example`; `http://` only for
    /// loopback development): the issuer of its tokens, and where the
    /// routes are served. Required.
    pub fn public_url(mut self, url: impl Into<String>) -> Self {
        self.public_url = Some(url.into());
        self
    }

    /// The origin the MCP service is served at when it is not the app's
    /// own: a resource server in another process, which checks the site's
    /// tokens with its published key set
    /// ([`RemoteResource`](crate::remote::RemoteResource); sign with
    /// [`Builder::access_token_algorithm`] EdDSA or ES256). The MCP URL,
    /// which tokens name as their audience, becomes `<mcp origin><mcp
    /// path>/<site key>`. Default: the public URL.
    pub fn mcp_origin(mut self, origin: impl Into<String>) -> Self {
        self.mcp_origin = Some(origin.into());
        self
    }

    /// Where the connected-agents page is served (default
    /// `/connected-agents`): a signed-in user's agents, what each may do,
    /// and Disconnect (served by [`Portcullis::routes`]).
    pub fn agents_path(mut self, path: impl Into<String>) -> Self {
        self.agents_path = path.into();
        self
    }

    /// Where the authorization server's routes live under the public URL
    /// (default: its root). With `/oauth` the issuer is
    /// `https://notes.example/oauth`; the endpoints are `/oauth/authorize`,
    /// `/oauth/token`, `/oauth/register`, `/oauth/revoke`, the key set
    /// `/oauth/.well-known/jwks.json`, and the RFC 8414 document
    /// `/.well-known/oauth-authorization-server/oauth` (RFC 8414 §3.1
    /// inserts the well-known part before the issuer's path). For an app
    /// that serves its own `/register` or `/token`. Changing it changes the
    /// issuer: tokens already issued stop verifying (their `iss` differs),
    /// and agents sign in again.
    pub fn oauth_path(mut self, path: impl Into<String>) -> Self {
        self.oauth_path = Some(path.into());
        self
    }

    /// The site's id (1–64 of `A-Z a-z 0-9 - _`, stable: it keys every
    /// record) and the name the consent screen shows.
    pub fn site(mut self, id: impl Into<String>, name: impl Into<String>) -> Self {
        self.site_id = id.into();
        self.site_name = name.into();
        self
    }

    /// Declares a scope an agent may be granted, and what it lets the agent
    /// do (shown on the consent screen). Declare every scope your tools and
    /// actions require; an undeclared one can never be granted.
    pub fn scope(mut self, scope: impl Into<String>, description: impl Into<String>) -> Self {
        self.scopes.push((scope.into(), description.into()));
        self
    }

    /// A scope every MCP request needs, checked by [`Portcullis::protect`]
    /// before your service sees the request; the first `401` challenge
    /// names these, so a client asks for them at its first consent. By
    /// default none: any valid token passes, and your tools demand their
    /// scopes ([`crate::Agent::require`], [`Portcullis::run_once`]).
    pub fn endpoint_scope(mut self, scope: impl Into<String>) -> Self {
        self.endpoint_scopes.push(scope.into());
        self
    }

    /// Where the MCP endpoint lives (default `/mcp`): the MCP URL is
    /// `<public url><path>/<site key>`.
    pub fn mcp_path(mut self, path: impl Into<String>) -> Self {
        self.mcp_path = path.into();
        self
    }

    /// Where the approvals page lives (default `/agent-approvals`).
    pub fn approvals_path(mut self, path: impl Into<String>) -> Self {
        self.approvals_path = path.into();
        self
    }

    /// Another origin whose pages may post the forms and call the MCP
    /// endpoint from a browser (the public URL's origin always may).
    pub fn allowed_origin(mut self, origin: impl Into<String>) -> Self {
        self.allowed_origins.push(origin.into());
        self
    }

    /// Whether a person may answer an approval with "always allow this
    /// kind" for one agent (default yes; identical writes still ask).
    pub fn auto_approval(mut self, allowed: bool) -> Self {
        self.auto_approval = allowed;
        self
    }

    /// Whether clients may identify themselves by a client ID metadata
    /// document URL (default yes; fetched under the rules of the crate's
    /// fetcher: https, no private addresses, no redirects, 5 KB).
    pub fn client_metadata_documents(mut self, allowed: bool) -> Self {
        self.client_documents = allowed;
        self
    }

    /// DEVELOPMENT ONLY: also fetch client ID metadata documents over plain
    /// http from loopback, and over https from names that resolve to
    /// loopback.
    pub fn dev_loopback_client_documents(mut self, allowed: bool) -> Self {
        self.dev_loopback_documents = allowed;
        self.policy.loopback_client_documents = allowed;
        self
    }

    /// Every lifetime and limit (default [`Policy::default`]).
    pub fn policy(mut self, policy: Policy) -> Self {
        let loopback = self.dev_loopback_documents;
        self.policy = policy;
        self.policy.loopback_client_documents |= loopback;
        self
    }

    /// How the site's access tokens are signed (default
    /// [`Algorithm::Hs256`]: only this process, holding the secret, checks
    /// them). [`Algorithm::EdDsa`] or [`Algorithm::Es256`] lets resource
    /// servers in other processes check them with the published key set
    /// (`jwks_uri`, [`crate::remote`]); the keyring needs an active key of
    /// that algorithm (a new [key file](crate::keys) has one of each).
    pub fn access_token_algorithm(mut self, alg: Algorithm) -> Self {
        self.access_token_alg = alg;
        self
    }

    /// Reloads the keys from the key file at `path` when it changes
    /// (looked at every [`key_reload::POLL_EVERY`](crate::key_reload::POLL_EVERY)): a routine rotation
    /// ([`keys::rotate`](crate::keys::rotate), `portcullis keys rotate`)
    /// reaches the running server without a restart. Give it the file the
    /// builder's keyring was loaded from; `loose` is applied on every
    /// reload as on the first load. A file that does not load, or lacks a
    /// key the site signs with, is logged and the keys in use stay.
    pub fn watch_key_file(mut self, path: impl Into<PathBuf>, loose: LoosePermissions) -> Self {
        self.key_file = Some(KeyFile {
            path: path.into(),
            loose,
        });
        self
    }

    /// How long [`Portcullis::run_once`] waits for a person's decision
    /// before it answers `approval_pending` (default 20 s; the agent calls
    /// again with the same request id).
    pub fn approval_wait(mut self, wait: Duration) -> Self {
        self.approval_wait = wait;
        self
    }

    /// Creates the site on first run (or brings its settings up to date),
    /// registers this process as a server executor, ends the runs a
    /// previous process left behind on a single-process store, and starts
    /// the periodic sweeps (expired codes, grants, results; lost runs). Must
    /// be called inside a tokio runtime.
    pub async fn build(self, host: impl Host) -> Result<Portcullis<S>, BuildError> {
        let origin = origin_of(self.public_url.as_deref().ok_or(BuildError::NoPublicUrl)?)
            .ok_or(BuildError::NotAnOrigin("public_url"))?;
        let mcp_path = route_path(&self.mcp_path).ok_or(BuildError::NotARoutePath("mcp_path"))?;
        let approvals_path =
            route_path(&self.approvals_path).ok_or(BuildError::NotARoutePath("approvals_path"))?;
        let agents_path =
            route_path(&self.agents_path).ok_or(BuildError::NotARoutePath("agents_path"))?;
        let oauth_path = match self.oauth_path.as_deref() {
            None | Some("" | "/") => String::new(),
            Some(path) => route_path(path).ok_or(BuildError::NotARoutePath("oauth_path"))?,
        };
        check_clashes(&mcp_path, &[&approvals_path, &agents_path], &oauth_path)?;
        let site_id = SiteId::parse(&self.site_id).map_err(BuildError::SiteId)?;
        let mut scopes = ScopeSet::new();
        for (scope, _) in &self.scopes {
            scopes
                .insert(scope)
                .map_err(|_| BuildError::Scope(scope.clone()))?;
        }
        if scopes.is_empty() {
            return Err(BuildError::NoScopes);
        }
        let mut endpoint_scopes = ScopeSet::new();
        for scope in &self.endpoint_scopes {
            if !scopes.contains(scope) || endpoint_scopes.insert(scope).is_err() {
                return Err(BuildError::EndpointScope(scope.clone()));
            }
        }
        let mcp_origin = match &self.mcp_origin {
            Some(url) => origin_of(url).ok_or(BuildError::NotAnOrigin("mcp_origin"))?,
            None => origin.clone(),
        };
        let mut config = SiteConfig::new(
            site_id.clone(),
            &self.site_name,
            &format!("{origin}{oauth_path}"),
            &format!("{mcp_origin}{mcp_path}/"),
        );
        config.scopes = scopes;
        config.allowed_origins = std::iter::once(origin.clone())
            .chain(self.allowed_origins.iter().cloned())
            .collect();
        config.auto_approval_allowed = self.auto_approval;
        config.client_metadata_documents = self.client_documents;
        config.access_token_alg = self.access_token_alg;
        check_keyring(&self.keyring, self.access_token_alg, crate::now())?;
        let csrf_key = self
            .keyring
            .active_key()
            .map(|(_, key)| Csrf::derived_from(key))
            .ok_or(BuildError::NoActiveKey(Algorithm::Hs256))?;
        let documents = Documents::new(self.dev_loopback_documents).map_err(BuildError::Fetcher)?;
        let engine = Engine::new(Arc::clone(&self.store), self.keyring, self.policy);
        let (engine, site, executor) = tokio::task::spawn_blocking(move || {
            let site = ensure_site(&engine, &config)?;
            let now = crate::now();
            if engine.store().is_local() {
                sweep::end_runs_left_running(&engine).map_err(|e| BuildError::Site(e.into()))?;
            }
            let executor = engine
                .start_executor(Own, &site.id, now)
                .map_err(BuildError::Executor)?;
            Ok::<_, BuildError>((engine, site, executor))
        })
        .await
        .map_err(|_| BuildError::Join)??;
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let portcullis = Portcullis {
            inner: Arc::new(Inner {
                writer: Writer::for_store(engine.store()),
                engine: RwLock::new(Arc::new(engine)),
                site_id,
                site: RwLock::new(Arc::new(SiteFacts::of(site))),
                host: Box::new(host),
                csrf: csrf_key,
                documents,
                scopes: self.scopes,
                endpoint_scopes,
                origin,
                mcp_path,
                oauth_path,
                agents_path,
                approvals_path,
                executor,
                events: run::Events::default(),
                initialized: crate::guard::Initialized::default(),
                approval_wait: self.approval_wait,
                _stop: stop,
            }),
        };
        if let Some(file) = self.key_file {
            key_reload::start(&portcullis, file, stopped.clone());
        }
        sweep::start(&portcullis, stopped);
        Ok(portcullis)
    }
}

/// The origin of `url`: scheme, host and port, no path, no trailing slash.
fn origin_of(url: &str) -> Option<String> {
    let url = url.trim_end_matches('/');
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    (!rest.is_empty() && !rest.contains(['/', '?', '#', '@'])).then(|| url.to_owned())
}

/// A route path: starts with `/`, no trailing `/`, no query, no `{`.
fn route_path(path: &str) -> Option<String> {
    let ok = path.starts_with('/')
        && path.len() > 1
        && !path.ends_with('/')
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/-_.".contains(&b));
    ok.then(|| path.to_owned())
}

/// Refuses settings under which two of this crate's routes would be
/// served at one path (axum would panic when the router is put together):
/// the authorization server's routes under `oauth_path`, the approvals
/// and connected-agents pages (`pages`, in that order) and their JSON
/// routes, and the MCP route and its RFC 9728 document.
fn check_clashes(mcp_path: &str, pages: &[&str], oauth_path: &str) -> Result<(), BuildError> {
    let mut paths: Vec<String> = crate::oauth::AS_ROUTES
        .iter()
        .map(|route| format!("{oauth_path}{route}"))
        .collect();
    paths.push(format!(
        "/.well-known/oauth-authorization-server{oauth_path}"
    ));
    paths.push(format!(
        "/.well-known/oauth-protected-resource{mcp_path}/{{key}}"
    ));
    let [approvals_path, agents_path] = pages else {
        unreachable!("the approvals page and the agents page")
    };
    for suffix in ["", "/pending", "/decide"] {
        paths.push(format!("{approvals_path}{suffix}"));
    }
    for suffix in ["", "/list", "/disconnect", "/activity"] {
        paths.push(format!("{agents_path}{suffix}"));
    }
    let mcp_route = format!("{mcp_path}/{{key}}");
    for (i, path) in paths.iter().enumerate() {
        // The MCP route's `{key}` matches any one segment under mcp_path.
        let under_mcp = path
            .strip_prefix(mcp_path)
            .and_then(|rest| rest.strip_prefix('/'))
            .is_some_and(|rest| !rest.is_empty() && !rest.contains('/'));
        if under_mcp || paths[..i].contains(path) {
            return Err(BuildError::RouteClash(if under_mcp {
                mcp_route
            } else {
                path.clone()
            }));
        }
    }
    Ok(())
}

/// The site as configured: created on first run; when its settings
/// changed since, updated (its key, epoch and grants stay). Instances of a
/// fleet starting together may race: the loser reads what the winner wrote
/// and tries again.
fn ensure_site<S: HostStore>(
    engine: &Engine<Arc<S>>,
    config: &SiteConfig,
) -> Result<Site, BuildError> {
    let mut attempt = 0;
    loop {
        let answer = match engine.site(&config.id) {
            Ok(site) if same_settings(&site, config) => Ok(site),
            Ok(site) => {
                let mut config = config.clone();
                config.retry_after_secs = site.retry_after_secs;
                config.reconnect_url.clone_from(&site.reconnect_url);
                tracing::info!(site = %site.id, "site settings changed: updating the site");
                engine.update_site(Own, config)
            }
            Err(SiteOpError::Site(SiteError::NotFound)) => {
                engine.create_site(Own, config.clone(), &mut rand::rng(), crate::now())
            }
            Err(e) => Err(e),
        };
        match answer {
            Err(e) if !engine.store().is_local() && attempt < 3 => {
                attempt += 1;
                tracing::debug!(error = %e, "the site raced another instance; again");
            }
            done => return done.map_err(BuildError::Site),
        }
    }
}

fn same_settings(site: &Site, config: &SiteConfig) -> bool {
    site.name == config.name
        && site.issuer == config.issuer
        && site.resource_prefix == config.resource_prefix
        && site.scopes == config.scopes
        && site.allowed_origins == config.allowed_origins
        && site.auto_approval_allowed == config.auto_approval_allowed
        && site.client_metadata_documents == config.client_metadata_documents
        && site.access_token_alg == config.access_token_alg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_public_url_is_an_origin() {
        assert_eq!(
            origin_of("https://a.example/").unwrap(),
            "https://a.example"
        );
        for bad in [
            "a.example",
            "https://a.example/x",
            "https://u@a.example",
            "https://",
        ] {
            assert!(origin_of(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn route_paths_are_plain() {
        assert_eq!(route_path("/mcp").unwrap(), "/mcp");
        for bad in ["mcp", "/", "/mcp/", "/{x}", "/a?b"] {
            assert!(route_path(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn two_routes_at_one_path_are_refused() {
        assert!(check_clashes("/mcp", &["/agent-approvals", "/connected-agents"], "").is_ok());
        assert!(
            check_clashes("/mcp", &["/agent-approvals", "/connected-agents"], "/oauth").is_ok()
        );
        let clash = |mcp, approvals, oauth| match check_clashes(
            mcp,
            &[approvals, "/connected-agents"],
            oauth,
        ) {
            Err(BuildError::RouteClash(path)) => path,
            other => panic!("{other:?}"),
        };
        assert_eq!(clash("/mcp", "/token", ""), "/token");
        assert_eq!(
            clash("/mcp", "/oauth/authorize", "/oauth"),
            "/oauth/authorize"
        );
        // The approvals page one segment under the MCP path: {key} takes it.
        assert_eq!(clash("/mcp", "/mcp/approvals", ""), "/mcp/{key}");
        assert_eq!(
            clash("/oauth", "/agent-approvals", "/oauth"),
            "/oauth/{key}"
        );
    }
}
