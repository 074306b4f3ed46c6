//! A resource server in another process: an MCP service protected by
//! the access tokens of a Portcullis site that runs elsewhere, checked
//! with the site's published key set alone (no secret, no store).
//!
//! ```no_run
//! # async fn demo(mcp: axum::routing::Router) -> Result<(), Box<dyn std::error::Error>> {
//! use portcullis_axum::remote::RemoteResource;
//!
//! // The site signs with EdDSA or ES256 (`Builder::access_token_algorithm`);
//! // its clients were told the resource is this URL.
//! let resource = RemoteResource::builder("https://notes.example", "https://mcp.notes.example/mcp/k9")
//!     .endpoint_scope("notes:read")
//!     .build()
//!     .await?;
//! let app: axum::Router = axum::Router::new()
//!     .route_service(resource.route(), resource.protect(mcp))
//!     .merge(resource.routes());
//! # let _ = app; Ok(()) }
//! ```
//!
//! [`RemoteBuilder::build`] reads the site's RFC 8414 document (its
//! `issuer` must be the one configured, RFC 8414 §3.3) and fetches the
//! key set at its `jwks_uri`; the set is fetched again as its
//! `Cache-Control` says ([`KEY_SET_MAX_AGE`] from a Portcullis site,
//! between [`MIN_REFRESH`] and [`MAX_REFRESH`] whatever it says), and at
//! once when a token names a key the set lacks, at most once per
//! [`REFETCH_INTERVAL`]: forged `kid`s cannot make this server fetch in a
//! loop. A failed fetch keeps the keys held and is tried again after
//! [`RETRY_AFTER_FAILURE`].
//!
//! Each request passes the checks of [`Portcullis::protect`](crate::Portcullis::protect):
//! a browser's `Origin` must be allowed (the resource's own by default);
//! the path must be the resource's (else `404`); no token in the query;
//! then the core's [`RemoteSite::verify`]: signature, `typ`, expiry,
//! audience (this resource), issuer (the site) and the endpoint scopes,
//! refused with the same RFC 6750 challenges, naming this resource's RFC
//! 9728 document, which [`RemoteResource::routes`] serves. The [`Agent`]
//! is [`Identity::Remote`].
//!
//! **What it cannot know.** A grant revoked, or the site switched off, a
//! moment ago: a token signed before keeps working here until it expires
//! (five minutes by default). Where that matters, shorten the site's
//! token lifetime ([`Policy::access_token_ttl`](crate::Policy)), ask the
//! site per request (RFC 7662 introspection), or, when both processes
//! share a PostgreSQL database, protect the service with a
//! [`Portcullis`](crate::Portcullis) on that database instead (its read
//! cache keeps the check in memory). Minted agent tokens are HS256 and
//! are refused here; server-side ledger actions (`run_once`) need the
//! site's store and are not offered.
//!
//! The URLs are the operator's configuration, not a client's: they are
//! fetched without the address guard of client documents, over https
//! (plain http only to a loopback issuer, for development), with short
//! timeouts, no redirects and bounded bodies.

use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use axum::routing::get;
use portcullis_core::bearer;
use portcullis_core::error::WireError as _;
use portcullis_core::http::HttpResponse;
use portcullis_core::jwk::{JwkSet, MAX_KEY_SET_LEN};
use portcullis_core::metadata::{self, ProtectedResourceMetadata};
use portcullis_core::resource_server::{Refusal, RemoteSite};
use portcullis_core::scope::ScopeSet;
use serde::Deserialize;

use crate::guard::{
    Admission, Agent, Gatekeeper, Identity, NoServices, Protect, ProtectLayer, Services, sealed,
};
pub use crate::keys::KEY_SET_MAX_AGE;
use crate::respond::{self, HeaderValues};

/// The shortest time a fetched key set is kept before it is fetched again.
pub const MIN_REFRESH: Duration = Duration::from_secs(30);
/// The longest, whatever the site's `Cache-Control` says.
pub const MAX_REFRESH: Duration = Duration::from_hours(1);
/// The shortest time between two fetches made because a token named a key
/// the set lacks.
pub const REFETCH_INTERVAL: Duration = Duration::from_secs(30);
/// How soon a failed scheduled fetch is tried again.
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(30);
/// Longest wait for the connection, and for a whole fetch.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const TOTAL_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest RFC 8414 document read.
const MAX_METADATA_LEN: usize = 64 * 1024;

/// Why a [`RemoteResource`] could not be set up.
#[derive(Debug)]
#[non_exhaustive]
pub enum RemoteError {
    /// A setting is wrong (the text says which).
    Config(String),
    /// A document could not be fetched.
    Fetch {
        /// Its URL.
        url: String,
        /// What failed.
        why: String,
    },
    /// The site's RFC 8414 document is not usable (the text says why).
    Metadata(String),
    /// The key set at the `jwks_uri` was refused.
    KeySet(portcullis_core::jwk::JwkError),
}

impl std::fmt::Display for RemoteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Config(why) => write!(f, "remote resource: {why}"),
            Self::Fetch { url, why } => write!(f, "fetching {url}: {why}"),
            Self::Metadata(why) => write!(f, "the authorization server metadata: {why}"),
            Self::KeySet(e) => write!(f, "the key set: {e}"),
        }
    }
}

impl std::error::Error for RemoteError {}

/// Sets a [`RemoteResource`] up: [`RemoteResource::builder`].
#[derive(Debug)]
#[must_use]
pub struct RemoteBuilder {
    issuer: String,
    resource: String,
    endpoint_scopes: Vec<String>,
    allowed_origins: Vec<String>,
    resource_name: Option<String>,
    leeway: Duration,
}

impl RemoteBuilder {
    /// A scope every request must carry (as
    /// [`Builder::endpoint_scope`](crate::Builder::endpoint_scope)).
    pub fn endpoint_scope(mut self, scope: impl Into<String>) -> Self {
        self.endpoint_scopes.push(scope.into());
        self
    }

    /// Another origin whose pages may call the service from a browser
    /// (the resource's own always may).
    pub fn allowed_origin(mut self, origin: impl Into<String>) -> Self {
        self.allowed_origins.push(origin.into());
        self
    }

    /// The name the RFC 9728 document gives (default: the resource URL's
    /// host).
    pub fn resource_name(mut self, name: impl Into<String>) -> Self {
        self.resource_name = Some(name.into());
        self
    }

    /// The clock skew allowed on `exp`, `nbf` and `iat` (default the
    /// site's default, [`Policy::jwt_leeway`](crate::Policy)).
    pub fn leeway(mut self, leeway: Duration) -> Self {
        self.leeway = leeway;
        self
    }

    /// Fetches the site's RFC 8414 document and its key set, and starts
    /// refreshing the set (see the [module docs](self)). Must be called
    /// inside a tokio runtime.
    pub async fn build(self) -> Result<RemoteResource, RemoteError> {
        let mut site = RemoteSite::new(&self.issuer, &self.resource, self.leeway)
            .map_err(|e| RemoteError::Config(e.to_string()))?;
        let resource_url = url::Url::parse(&self.resource)
            .map_err(|e| RemoteError::Config(format!("resource: {e}")))?;
        let endpoint_scopes =
            ScopeSet::from_tokens(self.endpoint_scopes.iter().map(String::as_str))
                .map_err(|e| RemoteError::Config(format!("endpoint scope: {e}")))?;
        let loopback = self.issuer.starts_with("http://");
        // reqwest is built without a default crypto provider: use ring's.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .https_only(!loopback)
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(TOTAL_TIMEOUT)
            .user_agent(concat!(
                "portcullis/",
                env!("CARGO_PKG_VERSION"),
                " (resource server)"
            ))
            .build()
            .map_err(|e| RemoteError::Config(format!("building the HTTP client: {e}")))?;
        let metadata_url = metadata::authorization_server_metadata_url_for(&self.issuer)
            .ok_or_else(|| RemoteError::Config("issuer is not a URL".into()))?;
        let (body, _) = fetch(&client, &metadata_url, MAX_METADATA_LEN).await?;
        let as_metadata: AsMetadata = serde_json::from_slice(&body)
            .map_err(|e| RemoteError::Metadata(format!("not a metadata document: {e}")))?;
        if as_metadata.issuer != self.issuer {
            // RFC 8414 §3.3: the document must name the issuer it was
            // fetched for, else it may be another server's.
            return Err(RemoteError::Metadata(format!(
                "its issuer is {:?}, not {:?}",
                as_metadata.issuer, self.issuer
            )));
        }
        let key_set_url = as_metadata.jwks_uri.ok_or_else(|| {
            RemoteError::Metadata("no jwks_uri: the site publishes no key set".into())
        })?;
        if !(key_set_url.starts_with("https://") || loopback && key_set_url.starts_with("http://"))
        {
            return Err(RemoteError::Metadata(format!(
                "the jwks_uri {key_set_url} is not https"
            )));
        }
        let (body, ttl) = fetch(&client, &key_set_url, MAX_KEY_SET_LEN).await?;
        site.set_keys(&JwkSet::parse(&body).map_err(RemoteError::KeySet)?);
        let name = self
            .resource_name
            .unwrap_or_else(|| resource_url.host_str().unwrap_or_default().to_owned());
        let document = ProtectedResourceMetadata {
            resource: self.resource.clone(),
            authorization_servers: [self.issuer.clone()],
            scopes_supported: as_metadata.scopes_supported,
            bearer_methods_supported: ["header"],
            resource_name: name,
        };
        let resource_metadata: Arc<str> = site.resource_metadata_url().into();
        let document_path = url::Url::parse(&resource_metadata)
            .map(|u| u.path().to_owned())
            .map_err(|e| RemoteError::Config(format!("resource: {e}")))?;
        let allowed_origins = std::iter::once(resource_url.origin().ascii_serialization())
            .chain(
                self.allowed_origins
                    .iter()
                    .map(|o| o.trim_end_matches('/').to_owned()),
            )
            .collect();
        let inner = Arc::new(RemoteInner {
            site: RwLock::new(Arc::new(site)),
            key_set_url,
            client,
            endpoint_scopes,
            document: document.to_json(),
            document_path,
            resource_metadata,
            no_services: Arc::new(NoServices),
            path: resource_url.path().to_owned(),
            allowed_origins,
            refetched: tokio::sync::Mutex::new(None),
        });
        refresh_keys(Arc::downgrade(&inner), ttl);
        tracing::info!(resource = %self.resource, issuer = %self.issuer, "remote resource ready");
        Ok(RemoteResource { inner })
    }
}

/// The members of the site's RFC 8414 document read here.
#[derive(Deserialize)]
struct AsMetadata {
    issuer: String,
    jwks_uri: Option<String>,
    #[serde(default)]
    scopes_supported: Vec<String>,
}

/// An MCP service's gatekeeper in a process other than the site's: see
/// the [module docs](self). Cheap to clone.
#[derive(Clone)]
pub struct RemoteResource {
    inner: Arc<RemoteInner>,
}

impl std::fmt::Debug for RemoteResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteResource")
            .field("site", &self.site())
            .finish_non_exhaustive()
    }
}

struct RemoteInner {
    /// The site and the keys last fetched: replaced whole on each fetch.
    site: RwLock<Arc<RemoteSite>>,
    key_set_url: String,
    client: reqwest::Client,
    endpoint_scopes: ScopeSet,
    /// The RFC 9728 document, and the path it is served at.
    document: String,
    document_path: String,
    /// Its absolute URL, shared with every agent.
    resource_metadata: Arc<str>,
    /// What every agent of this resource server is given in place of the
    /// site's services (none): one allocation, not one per request.
    no_services: Arc<dyn Services>,
    /// The resource URL's path: where the service is mounted.
    path: String,
    allowed_origins: Vec<String>,
    /// When a request last made the key set be fetched (an unknown `kid`);
    /// held across that fetch, so concurrent requests wait for one fetch.
    refetched: tokio::sync::Mutex<Option<Instant>>,
}

impl RemoteResource {
    /// A resource server for the site whose authorization server is
    /// `issuer` (exactly its RFC 8414 `issuer`), known to clients as
    /// `resource` (the URL its tokens name in `aud`: the site's MCP URL).
    pub fn builder(issuer: impl Into<String>, resource: impl Into<String>) -> RemoteBuilder {
        RemoteBuilder {
            issuer: issuer.into(),
            resource: resource.into(),
            endpoint_scopes: Vec::new(),
            allowed_origins: Vec::new(),
            resource_name: None,
            leeway: crate::Policy::default().jwt_leeway,
        }
    }

    /// The route to mount the protected service at: the resource URL's
    /// path.
    #[must_use]
    pub fn route(&self) -> &str {
        &self.inner.path
    }

    /// The resource's RFC 9728 document, at its path-suffixed URL (RFC
    /// 9728 §3.1), to merge into the router: the challenges name it, and a
    /// client finds the site's authorization server there.
    pub fn routes<T: Clone + Send + Sync + 'static>(&self) -> Router<T> {
        let document = self.inner.document.clone();
        Router::new().route(
            &self.inner.document_path,
            get(move || async move { respond::json(StatusCode::OK, document) }),
        )
    }

    /// `service` behind the checks of the [module docs](self); mount it at
    /// [`RemoteResource::route`]. Its requests carry the verified
    /// [`Agent`].
    pub fn protect<Svc>(&self, service: Svc) -> Protect<Self, Svc> {
        Protect::new(self.clone(), service)
    }

    /// [`RemoteResource::protect`] as a layer.
    #[must_use]
    pub fn layer(&self) -> ProtectLayer<Self> {
        ProtectLayer::new(self.clone())
    }

    /// The checks of [`RemoteResource::protect`] for a request's `parts`:
    /// the verified agent, or the refusal to answer with.
    pub async fn authenticate(&self, parts: &Parts) -> Result<Agent, Response> {
        self.admit(parts).await
    }

    /// The checks before the token's: the `Origin`, the path, no token in
    /// the query. The `Authorization` field's values.
    #[expect(
        clippy::result_large_err,
        reason = "the refusal is the response itself, sent at once; boxing it buys nothing"
    )]
    fn precheck(&self, parts: &Parts) -> Result<HeaderValues, Response> {
        let inner = &self.inner;
        if let Some(origin) = parts.headers.get(header::ORIGIN)
            && !inner
                .allowed_origins
                .iter()
                .any(|o| o.as_bytes().eq_ignore_ascii_case(origin.as_bytes()))
        {
            tracing::debug!("MCP request from a foreign origin refused");
            return Err((StatusCode::FORBIDDEN, "origin not allowed\n").into_response());
        }
        if parts.uri.path().trim_end_matches('/') != inner.path {
            return Err((StatusCode::NOT_FOUND, "no such MCP endpoint\n").into_response());
        }
        if let Err(e) = bearer::refuse_query_token(parts.uri.query()) {
            return Err(respond::core(HttpResponse::oauth_error(
                e.code(),
                &e.to_string(),
            )));
        }
        Ok(HeaderValues::of(&parts.headers, header::AUTHORIZATION))
    }

    /// The token's verdict as the agent to serve, or the refusal.
    #[expect(
        clippy::result_large_err,
        reason = "the refusal is the response itself, sent at once; boxing it buys nothing"
    )]
    fn admitted(
        &self,
        verdict: Result<portcullis_core::resource_server::RemoteGrant, Refusal>,
    ) -> Result<Agent, Response> {
        match verdict {
            Ok(grant) => Ok(Agent::new(
                Identity::Remote(grant),
                Arc::clone(&self.inner.resource_metadata),
                Arc::clone(&self.inner.no_services),
            )),
            Err(refusal) => {
                tracing::debug!(
                    status = refusal.challenge.status,
                    error = refusal.code().map_or("none", |c| c.as_str()),
                    "bearer refused"
                );
                Err(respond::core(refusal.challenge.to_response()))
            }
        }
    }

    /// The site as last fetched.
    fn site(&self) -> Arc<RemoteSite> {
        Arc::clone(
            &self
                .inner
                .site
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    fn verify(
        &self,
        authorization: &HeaderValues,
    ) -> Result<portcullis_core::resource_server::RemoteGrant, Refusal> {
        self.site().verify(
            authorization.field(),
            &self.inner.endpoint_scopes,
            crate::now(),
        )
    }

    /// Fetches the key set because a token named a key it lacks, unless
    /// that was done less than [`REFETCH_INTERVAL`] ago. Whether the keys
    /// may have changed (then the token is checked again).
    async fn refetch_for_unknown_key(&self) -> bool {
        let asked = Instant::now();
        let mut last = self.inner.refetched.lock().await;
        match *last {
            // Another request fetched while this one waited: check again
            // with what it found.
            Some(at) if at >= asked => return true,
            Some(at) if at.elapsed() < REFETCH_INTERVAL => return false,
            _ => {}
        }
        *last = Some(Instant::now());
        match self.inner.fetch_keys().await {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(error = %e, "refetching the key set for an unknown kid failed");
                false
            }
        }
    }
}

impl RemoteInner {
    /// Fetches the key set and, if it parses, checks with it from now on.
    /// How long the answer may be kept.
    async fn fetch_keys(&self) -> Result<Option<Duration>, RemoteError> {
        let (body, ttl) = fetch(&self.client, &self.key_set_url, MAX_KEY_SET_LEN).await?;
        let set = JwkSet::parse(&body).map_err(RemoteError::KeySet)?;
        let mut site = self
            .site
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut next = RemoteSite::clone(&site);
        next.set_keys(&set);
        *site = Arc::new(next);
        Ok(ttl)
    }
}

/// Fetches the key set again as its lifetime says, until the last handle
/// of the resource is gone.
fn refresh_keys(weak: Weak<RemoteInner>, first_ttl: Option<Duration>) {
    tokio::spawn(async move {
        let mut wait = refresh_after(first_ttl);
        loop {
            tokio::time::sleep(wait).await;
            let Some(inner) = weak.upgrade() else { return };
            wait = match inner.fetch_keys().await {
                Ok(ttl) => refresh_after(ttl),
                Err(e) => {
                    tracing::warn!(error = %e, "refreshing the key set failed; the keys held stay");
                    RETRY_AFTER_FAILURE
                }
            };
        }
    });
}

/// How long a key set with lifetime `ttl` is kept.
fn refresh_after(ttl: Option<Duration>) -> Duration {
    ttl.unwrap_or(KEY_SET_MAX_AGE)
        .clamp(MIN_REFRESH, MAX_REFRESH)
}

/// `GET url`: its body (at most `max` bytes) and how long it may be kept.
async fn fetch(
    client: &reqwest::Client,
    url: &str,
    max: usize,
) -> Result<(Vec<u8>, Option<Duration>), RemoteError> {
    let failed = |why: String| RemoteError::Fetch {
        url: url.to_owned(),
        why,
    };
    let mut response = client
        .get(url)
        .header(header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| failed(e.to_string()))?;
    if response.status() != StatusCode::OK {
        return Err(failed(format!("status {}", response.status())));
    }
    let ttl = crate::documents::cache_ttl(response.headers());
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| failed(e.to_string()))? {
        if body.len() + chunk.len() > max {
            return Err(failed(format!("larger than {max} bytes")));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, ttl))
}

impl sealed::Sealed for RemoteResource {
    /// The `Authorization` field, and the refusal of a token whose key is
    /// not in the key set yet.
    type Waiting = (HeaderValues, Refusal);

    fn admit_now(&self, parts: &Parts) -> Admission<Self::Waiting> {
        let authorization = match self.precheck(parts) {
            Ok(a) => a,
            Err(refusal) => return Admission::Decided(Err(refusal)),
        };
        match self.verify(&authorization) {
            Err(refusal) if refusal.unknown_key => Admission::Waits((authorization, refusal)),
            verdict => Admission::Decided(self.admitted(verdict)),
        }
    }

    /// A token naming a key not in the key set yet: the set is fetched
    /// again (at most once per [`REFETCH_INTERVAL`]) and the token checked
    /// with what came.
    async fn admit_after(
        &self,
        (authorization, refusal): Self::Waiting,
    ) -> Result<Agent, Response> {
        let verdict = if self.refetch_for_unknown_key().await {
            self.verify(&authorization)
        } else {
            Err(refusal)
        };
        self.admitted(verdict)
    }
}

impl Gatekeeper for RemoteResource {}
