//! [`Portcullis::protect`]: the bearer check in front of an MCP service,
//! and [`Agent`], the verified caller a tool reads from the request.
//!
//! In order, before the service sees a request:
//!
//! 1. a browser's `Origin`, when sent, must be one of the site's allowed
//!    origins (the MCP transport rules ask servers to validate it, against
//!    DNS rebinding; MCP 2025-11-25, "Transports", security warning);
//! 2. the path's last segment must be the site's current key (else `404`:
//!    a rotated key moves the MCP URL);
//! 3. a token in the query is refused (RFC 6750 §2.3 is not offered:
//!    URLs end up in logs);
//! 4. the core's bearer check decides (an access token of a live grant,
//!    or a minted agent token), with the [endpoint
//!    scopes](crate::Builder::endpoint_scope): a refusal is the core's
//!    challenge (`401`/`403` with `WWW-Authenticate: Bearer
//!    resource_metadata=…`, RFC 9728 §5.1) or `503` with `Retry-After`
//!    while the site is switched off.
//!
//! The verified [`Agent`] goes into the request's extensions. A client at
//! a revision with an `initialize` handshake declares its capabilities only
//! there, and on a stateless endpoint no later request carries them: the
//! guard notes, per user and client, whether the last `initialize` it let
//! through declared URL elicitation ([`Agent::declared_url_elicitation`],
//! in this process's memory), which is what a pending call answered as
//! -32042 needs (MCP 2025-11-25, "Elicitation"). A tool that
//! finds the token lacks a scope ([`Agent::require`], or `run_once`) marks
//! the agent, and the guard turns the service's response into `403
//! insufficient_scope` naming the scopes to ask for (RFC 6750 §3.1), which
//! is how the MCP authorization spec has a client step up.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, Request, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use portcullis_core::Engine;
use portcullis_core::bearer::{self, Challenge};
use portcullis_core::engine::{AgentPrincipal, BearerRejection, Principal};
use portcullis_core::error::{ErrorCode, WireError as _};
use portcullis_core::http::HttpResponse;
use portcullis_core::ledger::RequestId;
use portcullis_core::ledger::resume::{CallDigest, ResumeState, StateError};
use portcullis_core::scope::ScopeSet;

use crate::Portcullis;
use crate::respond::{self, HeaderValues};
use crate::store::HostStore;
use portcullis_core::resource_server::RemoteGrant;

/// Who an MCP request acts for.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Identity {
    /// An OAuth access token of a grant: the user's consent to one client.
    Grant(Principal),
    /// A minted agent token (for clients that cannot do OAuth). It has no
    /// grant, so it cannot run ledger actions.
    Minted(AgentPrincipal),
    /// An access token checked by a resource server in another process
    /// with the site's published keys alone ([`crate::remote`]): what its
    /// claims say. The grant was live when the token was signed; whether
    /// it still is, only the site knows. No ledger actions here either.
    Remote(RemoteGrant),
}

/// The verified caller of an MCP request, in the request's extensions
/// (`parts.extensions.get::<Agent>()`; with the `rmcp` feature, a tool
/// takes it as an argument). Cheap to clone; clones share the scope
/// challenge.
#[derive(Clone, Debug)]
pub struct Agent {
    inner: Arc<AgentInner>,
}

struct AgentInner {
    identity: Identity,
    /// What a tool's call needs of the site beyond the identity (sealing a
    /// multi round-trip request's state): the [`Portcullis`] that checked
    /// the request, type-erased so `Agent` has no store parameter.
    services: Arc<dyn Services>,
    /// The RFC 9728 document of the resource the request was checked
    /// for, which every challenge names.
    resource_metadata: Arc<str>,
    /// A challenge raised by a tool, for the guard to answer with.
    challenge: Mutex<Option<Challenge>>,
}

impl std::fmt::Debug for AgentInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

/// The site's operations a tool call may need, whatever the store.
pub(crate) trait Services: Send + Sync + 'static {
    /// [`portcullis_core::Engine::seal_request_state`].
    fn seal_state(
        &self,
        principal: &Principal,
        call: &CallDigest,
        request: RequestId,
        prompted: bool,
    ) -> Option<String>;
    /// [`portcullis_core::Engine::open_request_state`].
    fn open_state(
        &self,
        principal: &Principal,
        call: &CallDigest,
        text: &str,
    ) -> Result<ResumeState, StateError>;
    /// Whether `principal`'s client declared URL elicitation in its last
    /// `initialize` here ([`Initialized`]).
    fn declared_url_elicitation(&self, principal: &Principal) -> bool;
    /// Notes whether `principal`'s client, in an `initialize` let through
    /// now, declared URL elicitation.
    fn note_initialize(&self, principal: &Principal, url: bool);
}

/// The services of an agent that has no [`Principal`] (a remote one):
/// never asked, since every caller needs a principal first.
pub(crate) struct NoServices;

impl Services for NoServices {
    fn seal_state(&self, _: &Principal, _: &CallDigest, _: RequestId, _: bool) -> Option<String> {
        None
    }
    fn open_state(
        &self,
        _: &Principal,
        _: &CallDigest,
        _: &str,
    ) -> Result<ResumeState, StateError> {
        Err(StateError::Refused)
    }
    fn declared_url_elicitation(&self, _: &Principal) -> bool {
        false
    }
    fn note_initialize(&self, _: &Principal, _: bool) {}
}

/// On the shared state itself, so an agent holds it as one more count of
/// the `Arc` every handle shares (no allocation per request).
impl<S: HostStore> Services for crate::Inner<S> {
    fn declared_url_elicitation(&self, principal: &Principal) -> bool {
        self.initialized.declared_url(principal)
    }

    fn note_initialize(&self, principal: &Principal, url: bool) {
        self.initialized.note(principal, url);
    }

    fn seal_state(
        &self,
        principal: &Principal,
        call: &CallDigest,
        request: RequestId,
        prompted: bool,
    ) -> Option<String> {
        self.engine()
            .seal_request_state(principal, call, request, prompted, crate::now())
    }

    fn open_state(
        &self,
        principal: &Principal,
        call: &CallDigest,
        text: &str,
    ) -> Result<ResumeState, StateError> {
        self.engine()
            .open_request_state(principal, call, text, crate::now())
    }
}

/// A tool needed a scope the token lacks: the response becomes `403
/// insufficient_scope` and the client steps up (asks the user for it) and
/// calls again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopeRequired {
    /// The scopes to ask for: those needed and those held.
    pub ask: ScopeSet,
}

impl std::fmt::Display for ScopeRequired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "this call needs a scope the token lacks; ask the user for: {}",
            self.ask.as_param()
        )
    }
}

impl std::error::Error for ScopeRequired {}

impl Agent {
    pub(crate) fn new(
        identity: Identity,
        resource_metadata: Arc<str>,
        services: Arc<dyn Services>,
    ) -> Self {
        Self {
            inner: Arc::new(AgentInner {
                identity,
                services,
                resource_metadata,
                challenge: Mutex::new(None),
            }),
        }
    }

    /// The agent of a request `protect` let through, from its parts.
    #[must_use]
    pub fn of(parts: &Parts) -> Option<&Self> {
        parts.extensions.get()
    }

    /// Who it acts for.
    #[must_use]
    pub fn identity(&self) -> &Identity {
        &self.inner.identity
    }

    /// The grant's principal, for an OAuth access token.
    #[must_use]
    pub fn principal(&self) -> Option<&Principal> {
        match &self.inner.identity {
            Identity::Grant(p) => Some(p),
            Identity::Minted(_) | Identity::Remote(_) => None,
        }
    }

    /// The user it acts for (the grant's subject, your [`crate::SignedIn::subject`]).
    #[must_use]
    pub fn subject(&self) -> &str {
        match &self.inner.identity {
            Identity::Grant(p) => &p.subject,
            Identity::Minted(m) => &m.subject,
            Identity::Remote(r) => &r.subject,
        }
    }

    /// The scopes its token carries.
    #[must_use]
    pub fn scopes(&self) -> &ScopeSet {
        match &self.inner.identity {
            Identity::Grant(p) => &p.scopes,
            Identity::Minted(m) => &m.scopes,
            Identity::Remote(r) => &r.scopes,
        }
    }

    /// Checks the token carries `scope`; when it does not, the response to
    /// this request becomes `403 insufficient_scope` asking for it (and the
    /// scopes held), whatever the tool then answers.
    pub fn require(&self, scope: &str) -> Result<(), ScopeRequired> {
        if self.scopes().contains(scope) {
            return Ok(());
        }
        let mut needed = ScopeSet::new();
        if needed.insert(scope).is_err() {
            // Not a scope token at all: nothing can grant it.
            return Err(ScopeRequired {
                ask: self.scopes().clone(),
            });
        }
        let ask = needed.union(self.scopes());
        self.raise(Challenge::insufficient_scope(
            &self.inner.resource_metadata,
            &ask,
        ));
        Err(ScopeRequired { ask })
    }

    /// Has the guard answer this request with `challenge` (the core's
    /// `403 insufficient_scope` from a ledger call the host made itself):
    /// the client steps up and calls again.
    pub fn raise(&self, challenge: Challenge) {
        *self
            .inner
            .challenge
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(challenge);
    }

    /// A sealed `requestState` naming `request` for this agent's call
    /// `call` ([`portcullis_core::Engine::seal_request_state`]); `None`
    /// for a minted agent token (it has no grant) or without an active key.
    #[must_use]
    pub fn seal_request_state(
        &self,
        call: &CallDigest,
        request: RequestId,
        prompted: bool,
    ) -> Option<String> {
        let principal = self.principal()?;
        self.inner
            .services
            .seal_state(principal, call, request, prompted)
    }

    /// Opens a `requestState` this agent sent back with its call `call`
    /// ([`portcullis_core::Engine::open_request_state`]): refused for
    /// another user, client or call, a forged or expired state, and for a
    /// minted agent token.
    pub fn open_request_state(
        &self,
        call: &CallDigest,
        text: &str,
    ) -> Result<ResumeState, StateError> {
        let principal = self.principal().ok_or(StateError::Refused)?;
        self.inner.services.open_state(principal, call, text)
    }

    /// Whether this grant's client (the same user and client) declared URL
    /// elicitation in the last `initialize` this process let through: how a
    /// stateless endpoint knows the capabilities of a client at a revision
    /// with the handshake, whose later requests do not repeat them. `false`
    /// for a minted agent token, and when the `initialize` reached another
    /// instance.
    #[must_use]
    pub fn declared_url_elicitation(&self) -> bool {
        self.principal()
            .is_some_and(|p| self.inner.services.declared_url_elicitation(p))
    }

    fn take_challenge(&self) -> Option<Challenge> {
        self.inner
            .challenge
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

/// What lets a request through to a protected service: the site itself
/// ([`Portcullis`]), or a resource server in another process that checks
/// the site's tokens with its published keys
/// ([`RemoteResource`](crate::remote::RemoteResource)). Sealed: this crate
/// makes both.
pub trait Gatekeeper: sealed::Sealed + Clone + Send + Sync + 'static {
    /// The checks before the service sees a request with these `parts`:
    /// the verified agent, or the refusal to answer with.
    fn admit(&self, parts: &Parts) -> impl Future<Output = Result<Agent, Response>> + Send {
        let start = self.admit_now(parts);
        async move {
            match start {
                Admission::Decided(verdict) => verdict,
                Admission::Waits(waiting) => self.admit_after(waiting).await,
            }
        }
    }
}

/// A gatekeeper's checks in two halves, so that a request whose checks
/// must wait does not run the first half twice.
pub(crate) mod sealed {
    use std::future::Future;

    use axum::http::request::Parts;
    use axum::response::Response;

    use super::Agent;

    /// Where [`Sealed::admit_now`] left a request.
    pub enum Admission<W> {
        /// Decided without waiting: the verified agent, or the refusal to
        /// answer with.
        Decided(Result<Agent, Response>),
        /// What could be checked without waiting passed; the rest waits
        /// ([`Sealed::admit_after`]) with what the first half found.
        Waits(W),
    }

    /// Only this crate's gatekeepers; the halves of
    /// [`Gatekeeper::admit`](super::Gatekeeper::admit).
    pub trait Sealed {
        /// What the checks that wait start from.
        type Waiting: Send + 'static;

        /// Every check that needs no wait (a local store, a shared store's
        /// read cache, keys already fetched).
        fn admit_now(&self, parts: &Parts) -> Admission<Self::Waiting>;

        /// The checks that wait (the store on the blocking pool, a key set
        /// fetched again), from where [`Sealed::admit_now`] stopped.
        fn admit_after(
            &self,
            waiting: Self::Waiting,
        ) -> impl Future<Output = Result<Agent, Response>> + Send;
    }
}

pub(crate) use sealed::Admission;

impl<S: HostStore> sealed::Sealed for Portcullis<S> {
    type Waiting = (HeaderValues, Arc<str>);

    fn admit_now(&self, parts: &Parts) -> Admission<Self::Waiting> {
        let (authorization, resource_metadata) = match self.precheck(parts) {
            Ok(checked) => checked,
            Err(refusal) => return Admission::Decided(Err(refusal)),
        };
        match self.verdict_now(&authorization) {
            Some(verdict) => Admission::Decided(self.admitted(verdict, resource_metadata)),
            None => Admission::Waits((authorization, resource_metadata)),
        }
    }

    async fn admit_after(
        &self,
        (authorization, resource_metadata): Self::Waiting,
    ) -> Result<Agent, Response> {
        let verdict = self
            .blocking(move |p| p.check(&p.inner.engine(), authorization.field()))
            .await?;
        self.admitted(verdict, resource_metadata)
    }
}

impl<S: HostStore> Gatekeeper for Portcullis<S> {}

/// A service behind a gatekeeper's checks: [`Portcullis::protect`],
/// [`RemoteResource::protect`](crate::remote::RemoteResource::protect).
pub struct Protect<G, Svc> {
    gate: G,
    inner: Svc,
}

impl<G: Clone, Svc: Clone> Clone for Protect<G, Svc> {
    fn clone(&self) -> Self {
        Self {
            gate: self.gate.clone(),
            inner: self.inner.clone(),
        }
    }
}

impl<G, Svc> std::fmt::Debug for Protect<G, Svc> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Protect")
    }
}

impl<G, Svc> Protect<G, Svc> {
    pub(crate) fn new(gate: G, inner: Svc) -> Self {
        Self { gate, inner }
    }
}

/// The gatekeeper's checks as a [`tower::Layer`]: what
/// [`Portcullis::layer`] and
/// [`RemoteResource::layer`](crate::remote::RemoteResource::layer) give, for
/// `Router::route_layer`, `MethodRouter::layer` or a `ServiceBuilder`.
/// Each service it wraps is a [`Protect`].
#[derive(Clone)]
pub struct ProtectLayer<G> {
    gate: G,
}

impl<G> std::fmt::Debug for ProtectLayer<G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProtectLayer")
    }
}

impl<G> ProtectLayer<G> {
    pub(crate) fn new(gate: G) -> Self {
        Self { gate }
    }
}

impl<G: Clone, Svc> tower::Layer<Svc> for ProtectLayer<G> {
    type Service = Protect<G, Svc>;

    fn layer(&self, inner: Svc) -> Self::Service {
        Protect::new(self.gate.clone(), inner)
    }
}

/// A handler asked for an [`Agent`] on a request no gatekeeper let
/// through: the route is not behind [`Portcullis::protect`] (or its
/// layer). A wiring mistake of the host, answered `500` so it is found at
/// once, never a request served without its checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MissingAgent;

impl std::fmt::Display for MissingAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no verified agent: this route is not behind Portcullis::protect")
    }
}

impl std::error::Error for MissingAgent {}

impl axum::response::IntoResponse for MissingAgent {
    fn into_response(self) -> Response {
        tracing::error!("{self}");
        respond::internal("a protected route is not behind the bearer check")
    }
}

/// An axum handler takes the verified caller as an argument:
/// `async fn tool(agent: Agent, …)`. Refused with [`MissingAgent`] when the
/// route is not behind the bearer check.
impl<T: Send + Sync> axum::extract::FromRequestParts<T> for Agent {
    type Rejection = MissingAgent;

    async fn from_request_parts(parts: &mut Parts, _: &T) -> Result<Self, Self::Rejection> {
        Agent::of(parts).cloned().ok_or(MissingAgent)
    }
}

/// `request` through `gate`'s checks: `serve` answers it with the verified
/// [`Agent`] in its extensions, and the answer passes through [`finish`];
/// a refused request is answered here (after reading and dropping a small
/// body, so the client's keep-alive connection stays usable for its next
/// request).
pub(crate) async fn guarded<G, F, Fut>(gate: &G, request: Request<Body>, serve: F) -> Response
where
    G: Gatekeeper,
    F: FnOnce(Request<Body>) -> Fut,
    Fut: Future<Output = Response>,
{
    let (parts, body) = request.into_parts();
    match gate.admit(&parts).await {
        Ok(agent) => serve_admitted(agent, parts, body, serve).await,
        Err(refusal) => {
            drain(body).await;
            refusal
        }
    }
}

/// An admitted request through `serve`, the verified `agent` in its
/// extensions, and the answer through [`finish`].
async fn serve_admitted<F, Fut>(agent: Agent, mut parts: Parts, body: Body, serve: F) -> Response
where
    F: FnOnce(Request<Body>) -> Fut,
    Fut: Future<Output = Response>,
{
    let body = if reads_initialize(&parts, &agent) {
        match note_initialize(&agent, body).await {
            Ok(body) => body,
            Err(refusal) => return refusal,
        }
    } else {
        body
    };
    parts.extensions.insert(agent.clone());
    let response = serve(Request::from_parts(parts, body)).await;
    finish(&agent, response)
}

/// Whether the body is read to note what an `initialize` declares
/// ([`Initialized`]): only a small `POST` without `MCP-Protocol-Version`
/// (the header every request after the handshake carries), from an agent
/// with a grant.
fn reads_initialize(parts: &Parts, agent: &Agent) -> bool {
    agent.principal().is_some()
        && parts.method == Method::POST
        && !parts.headers.contains_key("mcp-protocol-version")
        && parts
            .headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
            .is_some_and(|n| n <= INITIALIZE_LIMIT)
}

/// Notes what an `initialize` declares and hands the body on unchanged
/// (see [`reads_initialize`]).
async fn note_initialize(agent: &Agent, body: Body) -> Result<Body, Response> {
    let Ok(bytes) = axum::body::to_bytes(body, INITIALIZE_LIMIT).await else {
        return Err((
            StatusCode::BAD_REQUEST,
            "the request body could not be read\n",
        )
            .into_response());
    };
    if let (Some(principal), Some(url)) = (agent.principal(), initialize_declares_url(&bytes)) {
        agent.inner.services.note_initialize(principal, url);
    }
    Ok(Body::from(bytes))
}

/// The response to an authenticated request, as the client gets it: `403
/// insufficient_scope` with its challenge if a tool found a scope
/// missing, else `response` unchanged.
pub(crate) fn finish(agent: &Agent, mut response: Response) -> Response {
    if let Some(c) = agent.take_challenge() {
        if let Ok(v) = HeaderValue::try_from(c.www_authenticate) {
            *response.status_mut() =
                StatusCode::from_u16(c.status).unwrap_or(StatusCode::FORBIDDEN);
            response.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        tracing::debug!(
            status = response.status().as_u16(),
            "scope missing: step-up challenge"
        );
    }
    response
}

impl<S: HostStore> Portcullis<S> {
    /// `service` (rmcp's `StreamableHttpService`, or any HTTP service)
    /// behind the bearer check ([`Portcullis::authenticate`]); mount it at
    /// [`Portcullis::mcp_route`]. Its requests carry the verified [`Agent`].
    pub fn protect<Svc>(&self, service: Svc) -> Protect<Self, Svc> {
        Protect::new(self.clone(), service)
    }

    /// [`Portcullis::protect`] as a layer:
    /// `Router::new().route(&p.mcp_route(), post(mcp)).route_layer(p.layer())`.
    /// For a service that is already a tower `Service` (rmcp's
    /// `StreamableHttpService`), `route_service(&p.mcp_route(), p.protect(mcp))`
    /// costs less: axum clones a route's boxed service on every request, and
    /// a route layer puts the service in a route of its own inside the
    /// guard's (in the example's bench, six boxed services cloned per call
    /// instead of one: about 1 600 instructions, docs/figures.md).
    #[must_use]
    pub fn layer(&self) -> ProtectLayer<Self> {
        ProtectLayer::new(self.clone())
    }

    /// The checks of [`Portcullis::protect`] for a request's `parts`, in
    /// order: a browser's `Origin`, when sent, is one of the site's allowed
    /// origins (the MCP transport rules ask servers to validate it); the
    /// path's last segment is the site's current key (else `404`); no token
    /// in the query (RFC 6750 §2.3 is not offered); the core's bearer check
    /// with the endpoint scopes (`401`/`403` with the core's challenge, `503`
    /// with `Retry-After` while the site is off). The verified agent, or the
    /// refusal to answer with. For a host that serves MCP its own way: once
    /// the service answered, pass the response through
    /// [`Portcullis::finish`] (or use [`Portcullis::guarded`]).
    pub async fn authenticate(&self, parts: &Parts) -> Result<Agent, Response> {
        self.admit(parts).await
    }

    /// The checks before the token's: the `Origin`, the path's key, no token
    /// in the query. The `Authorization` field's values (every one: the core
    /// refuses a repeated field, 400 `invalid_request`) and the URL of the
    /// resource's metadata, for the agent's challenges.
    #[expect(
        clippy::result_large_err,
        reason = "the refusal is the response itself, sent at once; boxing it buys nothing"
    )]
    fn precheck(&self, parts: &Parts) -> Result<(HeaderValues, Arc<str>), Response> {
        let facts = self.facts();
        if let Some(origin) = parts.headers.get(header::ORIGIN)
            && !facts
                .site
                .allowed_origins
                .iter()
                .any(|o| o.as_bytes().eq_ignore_ascii_case(origin.as_bytes()))
        {
            tracing::debug!("MCP request from a foreign origin refused");
            return Err((StatusCode::FORBIDDEN, "origin not allowed\n").into_response());
        }
        let key = parts.uri.path().trim_end_matches('/').rsplit('/').next();
        if key != Some(facts.site.public_key.as_str()) {
            return Err((StatusCode::NOT_FOUND, "no such MCP endpoint\n").into_response());
        }
        if let Err(e) = bearer::refuse_query_token(parts.uri.query()) {
            return Err(respond::core(HttpResponse::oauth_error(
                e.code(),
                &e.to_string(),
            )));
        }
        Ok((
            HeaderValues::of(&parts.headers, header::AUTHORIZATION),
            Arc::clone(&facts.resource_metadata),
        ))
    }

    /// The bearer check where it need not wait: on the runtime for a local
    /// store (a read transaction of an in-process file), from memory for a
    /// shared store with a read cache. `None` for a miss, a store error of
    /// the cache or no cache: then it runs on the blocking pool.
    fn verdict_now(
        &self,
        authorization: &HeaderValues,
    ) -> Option<Result<Identity, BearerRejection>> {
        let engine = self.inner.engine();
        let store = engine.store();
        if store.is_local() {
            return Some(self.check(&engine, authorization.field()));
        }
        store
            .in_memory(|| self.check(&engine, authorization.field()))
            .filter(|v| !matches!(v, Err(BearerRejection::Store(_))))
    }

    /// The bearer check's verdict as the agent to serve, or the refusal.
    #[expect(
        clippy::result_large_err,
        reason = "the refusal is the response itself, sent at once; boxing it buys nothing"
    )]
    fn admitted(
        &self,
        verdict: Result<Identity, BearerRejection>,
        resource_metadata: Arc<str>,
    ) -> Result<Agent, Response> {
        match verdict {
            Ok(identity) => {
                let services: Arc<dyn Services> = self.inner.clone();
                Ok(Agent::new(identity, resource_metadata, services))
            }
            Err(rejection) => Err(refused(&rejection)),
        }
    }

    /// `request` through the checks of [`Portcullis::protect`]: `serve`
    /// answers it with the verified [`Agent`] in its extensions, and the
    /// answer passes through [`Portcullis::finish`]; a refused request is
    /// answered here (after reading and dropping a small body, so the
    /// client's keep-alive connection stays usable for its next request).
    pub async fn guarded<F, Fut>(&self, request: Request<Body>, serve: F) -> Response
    where
        F: FnOnce(Request<Body>) -> Fut,
        Fut: Future<Output = Response>,
    {
        guarded(self, request, serve).await
    }

    /// The response to an authenticated request, as the client gets it:
    /// `403 insufficient_scope` with its challenge if a tool found a scope
    /// missing, else `response` unchanged.
    #[must_use]
    pub fn finish(agent: &Agent, response: Response) -> Response {
        finish(agent, response)
    }

    /// The bearer check: one read transaction for an access token, a second
    /// only for what may be a minted agent token.
    fn check(
        &self,
        engine: &Engine<Arc<S>>,
        authorization: portcullis_core::header::HeaderField<'_>,
    ) -> Result<Identity, BearerRejection> {
        let (site, required) = (&self.inner.site_id, &self.inner.endpoint_scopes);
        let now = crate::now();
        let first = match engine.verify_bearer(site, authorization, required, now) {
            Ok(p) => return Ok(Identity::Grant(p)),
            Err(r) => r,
        };
        if let BearerRejection::Challenge(c) = &first
            && c.error == Some(ErrorCode::InvalidToken)
        {
            match engine.verify_agent_token(site, authorization, required, now) {
                Ok(m) => return Ok(Identity::Minted(m)),
                Err(BearerRejection::Challenge(c2))
                    if c2.error == Some(ErrorCode::InsufficientScope) =>
                {
                    return Err(BearerRejection::Challenge(c2));
                }
                Err(_) => {}
            }
        }
        Err(first)
    }
}

/// Largest body read to see whether it is an `initialize`.
const INITIALIZE_LIMIT: usize = 64 * 1024;

/// For an `initialize` request, whether its capabilities declare URL
/// elicitation; `None` for any other body.
fn initialize_declares_url(body: &[u8]) -> Option<bool> {
    if !body.windows(10).any(|w| w == b"initialize") {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    if v.get("method")?.as_str()? != "initialize" {
        return None;
    }
    Some(v["params"]["capabilities"]["elicitation"]["url"].is_object())
}

/// Per user and client of the site, whether the client's last `initialize`
/// let through here declared URL elicitation (see the [module docs](self)).
/// Only those that did are kept: per user at most
/// [`Initialized::PER_USER`] clients (a user's oldest is forgotten first),
/// and at most [`Initialized::USERS`] users (then one other user's entry
/// is forgotten, never the whole record). One user, however many clients
/// they register, can push out only their own entries; a client forgotten
/// is answered the ledger's JSON, as any client that declared nothing.
#[derive(Debug, Default)]
pub(crate) struct Initialized(Mutex<HashMap<String, Vec<String>>>);

impl Initialized {
    /// Most users remembered.
    const USERS: usize = 65_536;
    /// Most clients remembered per user.
    const PER_USER: usize = 16;

    fn note(&self, principal: &Principal, url: bool) {
        let mut users = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let client = principal.client_id.as_str();
        if !url {
            if let Some(clients) = users.get_mut(&principal.subject) {
                clients.retain(|c| c != client);
                if clients.is_empty() {
                    users.remove(&principal.subject);
                }
            }
            return;
        }
        if !users.contains_key(&principal.subject) && users.len() >= Self::USERS {
            let other = users.keys().next().cloned();
            if let Some(other) = other {
                users.remove(&other);
            }
        }
        let clients = users.entry(principal.subject.clone()).or_default();
        clients.retain(|c| c != client);
        if clients.len() >= Self::PER_USER {
            clients.remove(0);
        }
        clients.push(client.to_owned());
    }

    fn declared_url(&self, principal: &Principal) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&principal.subject)
            .is_some_and(|clients| clients.contains(&principal.client_id))
    }
}

/// Longest body of a refused request read (and dropped) before answering:
/// an MCP request is small, and a client that sent one keeps its
/// connection; a larger body is not read for an unauthenticated caller, and
/// its connection closes after the answer.
const DRAIN_LIMIT: usize = 64 * 1024;
/// Longest wait for that body.
const DRAIN_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Reads and drops what is left of a refused request's body, within
/// [`DRAIN_LIMIT`] and [`DRAIN_WAIT`]: hyper keeps a connection alive only
/// when the request before was read whole, and clients reuse it at once
/// for their next request (the one with a token).
async fn drain(body: Body) {
    use http_body_util::BodyExt as _;
    let limited = http_body_util::Limited::new(body, DRAIN_LIMIT);
    let _ = tokio::time::timeout(DRAIN_WAIT, limited.collect()).await;
}

/// A refused bearer check as its answer, logged with the status that
/// goes out (a store that cannot be reached is `503`, not the `500` of
/// the rejection's wire code; an unknown site is `404`).
fn refused(rejection: &BearerRejection) -> Response {
    let error = match &rejection {
        BearerRejection::Challenge(c) => c.error.map_or("none", ErrorCode::as_str),
        other => other.code().as_str(),
    };
    let response = match rejection {
        BearerRejection::Challenge(_) | BearerRejection::Unavailable { .. } => {
            respond::core(rejection.to_response())
        }
        BearerRejection::UnknownSite => (StatusCode::NOT_FOUND, "no such site\n").into_response(),
        BearerRejection::Store(e) => respond::store(e),
        other => respond::internal(&other.to_string()),
    };
    let status = response.status().as_u16();
    if response.status().is_server_error() {
        tracing::warn!(status, error, cause = %rejection, "bearer refused");
    } else {
        tracing::debug!(status, error, "bearer refused");
    }
    response
}

impl<G, Svc, B> tower::Service<Request<Body>> for Protect<G, Svc>
where
    G: Gatekeeper,
    Svc: tower::Service<Request<Body>, Response = axum::http::Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    Svc::Future: Send + 'static,
    B: http_body::Body<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let (mut parts, body) = request.into_parts();
        match self.gate.admit_now(&parts) {
            // Decided without waiting (a local store, a warm cache): the
            // service that was driven ready takes the request now, and
            // neither it nor the gatekeeper is cloned.
            Admission::Decided(Ok(agent)) if !reads_initialize(&parts, &agent) => {
                parts.extensions.insert(agent.clone());
                let answer = self.inner.call(Request::from_parts(parts, body));
                Box::pin(async move { Ok(finish(&agent, answered(answer.await))) })
            }
            Admission::Decided(Err(refusal)) => Box::pin(async move {
                drain(body).await;
                Ok(refusal)
            }),
            admission => {
                // The clone that was driven ready serves this request once
                // the checks are done; the fresh clone stays behind for the
                // next (the usual tower pattern).
                let fresh = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, fresh);
                let gate = self.gate.clone();
                Box::pin(async move {
                    // The checks that wait go on from where `admit_now`
                    // stopped: nothing before them runs twice.
                    let verdict = match admission {
                        Admission::Decided(verdict) => verdict,
                        Admission::Waits(waiting) => gate.admit_after(waiting).await,
                    };
                    Ok(match verdict {
                        Ok(agent) => {
                            let serve =
                                |request| async move { answered(inner.call(request).await) };
                            serve_admitted(agent, parts, body, serve).await
                        }
                        Err(refusal) => {
                            drain(body).await;
                            refusal
                        }
                    })
                })
            }
        }
    }
}

/// The protected service's answer, its body boxed as axum's.
fn answered<B>(answer: Result<axum::http::Response<B>, Infallible>) -> Response
where
    B: http_body::Body<Data = axum::body::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    match answer {
        Ok(response) => response.map(Body::new),
        Err(never) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex, PoisonError};

    use axum::http::StatusCode;
    use portcullis_core::Timestamp;
    use portcullis_core::engine::{BearerRejection, Principal};
    use portcullis_core::grant::GrantId;
    use portcullis_core::scope::ScopeSet;
    use portcullis_core::site::SiteId;
    use portcullis_core::store::{StoreError, StoreErrorKind};

    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::body::Body;
    use axum::http::Request;
    use axum::http::request::Parts;
    use axum::response::{IntoResponse as _, Response};

    use super::sealed::{Admission, Sealed};
    use super::{Agent, Gatekeeper, Initialized, Protect, initialize_declares_url, refused};

    fn principal(subject: &str, client: &str) -> Principal {
        Principal {
            site: SiteId::parse("s").unwrap(),
            grant: GrantId::from_bytes([0; 16]),
            subject: subject.into(),
            client_id: client.into(),
            client_name: None,
            scopes: ScopeSet::new(),
            token_id: String::new(),
            expires: Timestamp::EPOCH,
        }
    }

    /// One user registering client after client (registration is
    /// stateless, so ids cost nothing) forgets only their own oldest
    /// entries: another user's declaration stays.
    #[test]
    fn one_user_cannot_push_out_another_users_declaration() {
        let memory = Initialized::default();
        let alice = principal("alice", "alices-client");
        memory.note(&alice, true);
        for i in 0..70_000 {
            memory.note(&principal("mallory", &format!("client-{i}")), true);
        }
        assert!(memory.declared_url(&alice));
        assert!(memory.declared_url(&principal("mallory", "client-69999")));
        assert!(!memory.declared_url(&principal("mallory", "client-0")));
        memory.note(&alice, false);
        assert!(!memory.declared_url(&alice));
    }

    /// What the `tracing` macros wrote while `f` ran, and `f`'s answer.
    fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
        #[derive(Clone, Default)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let out = tracing::subscriber::with_default(subscriber, f);
        let text = buffer.0.lock().unwrap_or_else(PoisonError::into_inner);
        (out, String::from_utf8_lossy(&text).into_owned())
    }

    #[test]
    fn a_refused_bearer_check_logs_the_status_it_sends() {
        let down = StoreError::new(StoreErrorKind::Unavailable, "begin", "connection refused");
        for (rejection, sent) in [
            (
                BearerRejection::Store(down),
                StatusCode::SERVICE_UNAVAILABLE,
            ),
            (BearerRejection::UnknownSite, StatusCode::NOT_FOUND),
            (
                BearerRejection::Store(StoreError::new(StoreErrorKind::Corrupt, "get", "bad")),
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
        ] {
            let (response, log) = logged(|| refused(&rejection));
            assert_eq!(response.status(), sent, "{rejection:?}");
            let bearer = log
                .lines()
                .find(|l| l.contains("bearer refused"))
                .unwrap_or_else(|| panic!("not logged: {log}"));
            assert!(
                bearer.contains(&format!("status={}", sent.as_u16())),
                "{rejection:?}: {bearer}"
            );
        }
    }

    #[test]
    fn an_initialize_says_whether_it_declares_url_elicitation() {
        let with = br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{"url":{}}},"clientInfo":{"name":"c","version":"1"}}}"#;
        let form_only = br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"c","version":"1"}}}"#;
        let call = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"initialize","arguments":{}}}"#;
        assert_eq!(initialize_declares_url(with), Some(true));
        assert_eq!(initialize_declares_url(form_only), Some(false));
        assert_eq!(initialize_declares_url(call), None);
        assert_eq!(initialize_declares_url(b"not json initialize"), None);
    }

    /// A gatekeeper whose check always waits, counting each half.
    #[derive(Clone, Default)]
    struct AlwaysWaits {
        now: Arc<AtomicUsize>,
        after: Arc<AtomicUsize>,
    }

    impl Sealed for AlwaysWaits {
        type Waiting = ();

        fn admit_now(&self, _: &Parts) -> Admission<()> {
            self.now.fetch_add(1, Ordering::SeqCst);
            Admission::Waits(())
        }

        async fn admit_after(&self, (): ()) -> Result<Agent, Response> {
            self.after.fetch_add(1, Ordering::SeqCst);
            Err(StatusCode::UNAUTHORIZED.into_response())
        }
    }

    impl Gatekeeper for AlwaysWaits {}

    /// A request whose check must wait (a PostgreSQL cache miss, a key set
    /// to fetch again) goes on from where the checks that need no wait
    /// stopped: they run once, through the service and through `admit`.
    #[tokio::test]
    async fn a_check_that_waits_runs_the_first_half_once() {
        let gate = AlwaysWaits::default();
        let mut protected = Protect::new(gate.clone(), axum::Router::new());
        let response = tower::Service::call(&mut protected, Request::new(Body::empty()))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert!(gate.admit(&Request::new(()).into_parts().0).await.is_err());
        assert_eq!(gate.now.load(Ordering::SeqCst), 2);
        assert_eq!(gate.after.load(Ordering::SeqCst), 2);
    }
}
