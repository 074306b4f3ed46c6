//! The MCP Apps host: App Views from gateway tools, in the Agents page.
//!
//! MCP Apps (the extension of SEP-1865, 2026-01-26) lets a tool's descriptor
//! name a `ui://` HTML resource (`_meta.ui.resourceUri`, "Resource
//! Discovery"); a host that supports it renders that resource beside the
//! tool's result, and the App talks to the host in JSON-RPC over
//! `postMessage` ("Communication Protocol"). Here the host is the Agents
//! page (the connected tab) and this server:
//!
//! * **A View is recorded** when an agent's gateway tool call completes and
//!   the tool's (mapped) descriptor names a gateway `ui://` resource: the
//!   grant, the source, the tool, its arguments and its result, kept in
//!   memory, at most [`MAX_VIEWS_PER_USER`] per user and [`MAX_VIEWS`] in
//!   all (a full user's oldest View with nothing in flight is closed to make
//!   room; when every one is busy, or the server is full, no View is
//!   recorded and the tool result stands alone), and one that has not been
//!   used for [`VIEW_IDLE`] is dropped. The tab's long-poll lists the
//!   user's Views ([`super::tab`]).
//! * **The page renders it** in a frame of the sandbox proxy on the
//!   sandbox's own origin ([`sandbox`]), which runs the App's HTML in an
//!   opaque-origin frame under the CSP its resource declares; the page reads
//!   that HTML through the gateway's `resources/read` under the View's grant
//!   as it is now (`POST /agents/apps/resource`).
//! * **Every App message goes to the server** (`POST /agents/apps/request
//!   {view, message}`, with the tab channel's same-origin, session and CSRF
//!   checks): it is parsed by the core ([`portcullis_core::apps`]) and
//!   judged by the View's state there; the page only carries the answer
//!   back. Nothing but the handshake is served before the user chose
//!   "Activate interactions" (`POST /agents/apps/activate`).
//! * **`tools/call`** runs through the gateway's own call path
//!   ([`super::gateway::tools::call`]): the execution ledger under a
//!   request id of its own, a write waiting for the user's approval in the
//!   Agents page's approvals list (outside the frame: the source, the tool
//!   and the exact arguments), run once; under the View's grant **as it is
//!   now** (a revoked grant refuses the next call), for a tool of the View's
//!   own source whose visibility includes `app` ("Visibility"). The App's
//!   request waits for the decision a bounded time, then the page asks
//!   again with the same message, which lands on the same ledger request.
//! * **`resources/read`** goes through the gateway's read for a resource of
//!   the View's own source only.
//! * **`ui/open-link`** is checked (absolute `http`/`https`, normalised, no
//!   credentials, neither this server's origin nor the sandbox's) and
//!   becomes a proposal the page shows with the normalised URL; it is opened
//!   only by the user's separate click, in a new tab without an opener.
//! * **`ui/message`** becomes a proposal the user sends once or declines.
//!   This server has no conversation to add it to: "Send once" records it
//!   as sent and the page shows it, which is all that happens; the App is
//!   told it was accepted.
//! * Closing a View (`POST /agents/apps/close`) ends its controls and its
//!   open proposals; calls already dispatched may still finish.
//!
//! Not supported (the host document's "initial Host" minus the
//! conversation): App-provided tools, display modes other than `inline`,
//! context attached to a composer (an offered context is acknowledged and
//! kept only as the View's latest), image content.

pub(crate) mod request;
pub(crate) mod sandbox;

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse as _, Response};
use axum::routing::post;
use portcullis_core::approval::ApprovalDecision;
use portcullis_core::apps::{
    Authority, Fingerprint, GrantedSources, LineageKey, OpId, ProposalId, RpcId, View, ViewId,
    ViewOrigin, Withdrawn,
};
use portcullis_core::engine::Principal;
use portcullis_core::gateway::SourceId;
use portcullis_core::grant::{GrantId, GrantStatus};
use portcullis_core::ledger::RequestId;
use rmcp::model::{CallToolResult, JsonObject, ReadResourceRequestParams, Tool};
use serde::Deserialize;
use serde_json::{Value, json};

use super::tab::{error, post_body};
use super::{App, Shared};
use crate::clock;

/// Views one user may have at once.
pub(crate) const MAX_VIEWS_PER_USER: usize = 16;
/// Views the server keeps in all.
pub(crate) const MAX_VIEWS: usize = 1024;
/// A View not used for this long is dropped.
pub(crate) const VIEW_IDLE: Duration = Duration::from_hours(24);
/// The MIME type of an App's HTML ("UI Resource Format").
pub(crate) const APP_MIME: &str = "text/html;profile=mcp-app";
/// The largest body of an App route: a message of
/// [`portcullis_core::apps::MAX_REQUEST_BYTES`] as a JSON string, every
/// byte escaped at worst.
pub(crate) const BODY_LIMIT: usize = portcullis_core::apps::MAX_REQUEST_BYTES * 6 + 4096;

/// The routes of the App host (under the Agents page's origin).
pub(crate) fn routes() -> axum::Router<Shared> {
    axum::Router::new()
        .route("/agents/apps.js", axum::routing::get(script))
        .route("/agents/apps/resource", post(resource))
        .route("/agents/apps/activate", post(activate))
        .route("/agents/apps/request", post(request::request))
        .route("/agents/apps/proposal", post(request::proposal))
        .route("/agents/apps/close", post(close))
        .layer(axum::extract::DefaultBodyLimit::max(BODY_LIMIT))
}

/// The page's App host script (`GET /agents/apps.js`).
const SCRIPT: &str = include_str!("../apps.js");

async fn script() -> Response {
    let mut r = SCRIPT.into_response();
    let h = r.headers_mut();
    h.insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("text/javascript; charset=utf-8"),
    );
    h.insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-cache"),
    );
    r
}

/// The Agents page's answer with the sandbox's origin added to its CSP as
/// the one origin it may frame (`frame-src`): the page frames only the
/// sandbox proxy.
pub(crate) fn frames_sandbox(mut page: Response, sandbox: &str) -> Response {
    if sandbox.is_empty() {
        return page;
    }
    let h = page.headers_mut();
    let csp = h
        .get(axum::http::header::CONTENT_SECURITY_POLICY)
        .and_then(|v| v.to_str().ok())
        .map(|v| format!("{v}; frame-src {sandbox}"));
    if let Some(Ok(v)) = csp.map(axum::http::HeaderValue::try_from) {
        h.insert(axum::http::header::CONTENT_SECURITY_POLICY, v);
    } else {
        tracing::warn!("MCP Apps: the Agents page's CSP could not name the sandbox");
    }
    page
}

/// The gateway `ui://` URI a tool's descriptor names for its App, if any
/// (`_meta.ui.resourceUri`, or the deprecated `_meta["ui/resourceUri"]`).
pub(crate) fn ui_resource(tool: &Tool) -> Option<String> {
    let meta = tool.meta.as_ref()?;
    let uri = meta
        .get("ui")
        .and_then(|ui| ui.get("resourceUri"))
        .or_else(|| meta.get("ui/resourceUri"))
        .and_then(Value::as_str)?;
    uri.starts_with("ui://").then(|| uri.to_owned())
}

/// Whether an App may call `tool`: its `_meta.ui.visibility` includes
/// `app`, as it does when absent (SEP-1865, "Visibility").
pub(crate) fn app_visible(tool: &Tool) -> bool {
    let visibility = tool
        .meta
        .as_ref()
        .and_then(|m| m.get("ui"))
        .and_then(|ui| ui.get("visibility"));
    match visibility {
        None | Some(Value::Null) => true,
        Some(Value::Array(v)) => v.iter().any(|x| x.as_str() == Some("app")),
        Some(_) => false,
    }
}

/// The exact origins among `declared` (the core's
/// [`portcullis_core::apps::exact_origins`]: normalised, anything else
/// dropped), at most [`sandbox::MAX_ORIGINS`], without `own` (this
/// server's and the sandbox's origins: an App reaches neither).
pub(crate) fn exact_origins<'a>(
    declared: impl IntoIterator<Item = &'a str>,
    own: &[&str],
) -> Vec<String> {
    let mut kept = portcullis_core::apps::exact_origins(declared, sandbox::MAX_ORIGINS);
    kept.retain(|o| !own.contains(&o.as_str()));
    kept
}

/// What an agent's call leaves for a View, taken before the call (the
/// call consumes its parts); `None` when the tool names no App.
pub(crate) struct Candidate {
    principal: Principal,
    source: SourceId,
    tool: Tool,
    resource: String,
    arguments: JsonObject,
}

impl Candidate {
    /// The View an agent's call of `tool` (of `source`) would leave.
    pub(crate) fn of(
        principal: &Principal,
        source: &SourceId,
        tool: &Tool,
        arguments: &JsonObject,
    ) -> Option<Self> {
        Some(Self {
            resource: ui_resource(tool)?,
            principal: principal.clone(),
            source: source.clone(),
            tool: tool.clone(),
            arguments: arguments.clone(),
        })
    }
}

/// An App request in flight: its operation in the View and its ledger
/// request (a repeat of the same message lands on the same one).
pub(crate) struct Call {
    pub(crate) op: OpId,
    pub(crate) request: RequestId,
    pub(crate) message: Fingerprint,
    /// The gateway was asked once already.
    pub(crate) asked: bool,
    /// What it calls.
    pub(crate) target: portcullis_core::apps::SourceCall,
}

/// One View, as recorded.
pub(crate) struct Entry {
    pub(crate) subject: String,
    pub(crate) client: Value,
    pub(crate) tool: Tool,
    pub(crate) arguments: JsonObject,
    pub(crate) result: Value,
    /// The agent's call that left it (a repeat of it leaves no second View).
    origin: RequestId,
    last_used: Instant,
    /// Its state: activation, operations, proposals (the core's rules).
    pub(crate) view: View,
    /// Its requests in flight, by the App's JSON-RPC id (at most
    /// [`portcullis_core::apps::MAX_IN_FLIGHT`]: each holds an operation).
    pub(crate) calls: HashMap<RpcId, Call>,
    /// The App's request each pending proposal answers.
    pub(crate) proposals: HashMap<ProposalId, RpcId>,
}

impl Entry {
    /// Forgets the App calls of the operations the core withdrew (their
    /// View's activation ended or the View closed), and answers their
    /// ledger requests, for [`deny_waiting`].
    pub(crate) fn drop_withdrawn(&mut self, withdrawn: &Withdrawn) -> Vec<RequestId> {
        let mut requests = Vec::new();
        self.calls.retain(|_, c| {
            let gone = withdrawn.approvals.contains(&c.op);
            if gone {
                requests.push(c.request);
            }
            !gone
        });
        requests
    }

    fn listed(&self, live: bool) -> Value {
        json!({
            "id": self.view.id().as_str(),
            "grant": self.view.origin().grant.to_string(),
            "client": self.client,
            "source": self.view.source().as_str(),
            "tool": self.tool.name,
            "resourceUri": self.view.origin().resource_uri,
            "active": self.view.is_active(),
            "live": live,
        })
    }
}

/// The host's Views and the sandbox's origin.
pub(crate) struct Apps {
    /// The sandbox's public origin (what the page frames, what a link may
    /// not point at); empty when the host is off (no sources, or no safe
    /// sandbox configuration given): then no View is recorded.
    pub(crate) sandbox: String,
    /// What an App's link may not point at: this server's origin and the
    /// sandbox's (`None` when the host is off).
    pub(crate) link_policy: Option<portcullis_core::link::ExternalLinkPolicy>,
    views: Mutex<HashMap<String, Entry>>,
}

impl Apps {
    /// Binds and starts the sandbox of the server at `host` (its public
    /// origin), serving until `stopping` turns `true`; the host of its Views.
    /// An unsafe sandbox configuration is refused ([`sandbox::bind`]).
    ///
    /// The host is off (no listener, no View) without `--source`s, and when
    /// neither sandbox flag was given and the defaults are not safe for this
    /// server (a public URL off loopback needs `--sandbox-public-url`): the
    /// server runs without Apps and logs why. Flags that were given and are
    /// unsafe refuse the start.
    pub(crate) async fn start(
        args: &crate::cli::ServeArgs,
        host: &str,
        mut stopping: tokio::sync::watch::Receiver<bool>,
    ) -> Result<Self, String> {
        let off = || Self {
            sandbox: String::new(),
            link_policy: None,
            views: Mutex::new(HashMap::new()),
        };
        if args.gateway.sources.is_empty() && args.gateway.sources_file.is_none() {
            return Ok(off());
        }
        let explicit = args.apps.sandbox_addr.is_some() || args.apps.sandbox_public_url.is_some();
        let sandbox = match sandbox::bind(&args.apps, host).await {
            Ok(s) => s,
            Err(e) if !explicit => {
                tracing::warn!(
                    error = %e,
                    "MCP Apps are off: give --sandbox-public-url (and --sandbox-addr) to show \
                     sources' Apps"
                );
                return Ok(off());
            }
            Err(e) => return Err(e),
        };
        let apps = Self {
            sandbox: sandbox.origin.clone(),
            link_policy: Some(sandbox.link_policy.clone()),
            views: Mutex::new(HashMap::new()),
        };
        tokio::spawn(sandbox.serve(args.limits, async move {
            let _ = stopping.wait_for(|stopping| *stopping).await;
        }));
        Ok(apps)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.views.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records the View `c` leaves with `result` (a completed call of
    /// request `origin`); whether one was recorded (see the module docs
    /// for the bounds).
    fn record(
        &self,
        site: &str,
        map: &portcullis_core::gateway::Gateway,
        c: Candidate,
        result: &CallToolResult,
        origin: RequestId,
    ) -> bool {
        let Ok(mut result) = serde_json::to_value(result) else {
            return false;
        };
        if let Some(meta) = result.get_mut("_meta").and_then(Value::as_object_mut) {
            meta.remove(super::gateway::tools::REQUEST_ID_META);
        }
        let id = portcullis_core::rand::base64url::<16, _>(&mut rand::rng());
        let Ok(view_id) = ViewId::new(&id) else {
            return false;
        };
        let p = &c.principal;
        let view = View::open(
            ViewOrigin {
                id: view_id,
                lineage: LineageKey::of(site, &p.subject, &p.client_id),
                grant: p.grant,
                source: c.source,
                tool: c.tool.name.to_string(),
                resource_uri: c.resource,
            },
            map,
        );
        let view = match view {
            Ok(v) => v,
            Err(e) => {
                tracing::debug!(error = %e, "MCP Apps: the tool's App cannot be a View");
                return false;
            }
        };
        let now = Instant::now();
        let mut views = self.lock();
        views.retain(|_, v| {
            now.duration_since(v.last_used) < VIEW_IDLE
                && !(v.view.is_closed() && v.view.in_flight() == 0)
        });
        if views
            .values()
            .any(|v| v.view.origin().grant == p.grant && v.origin == origin)
        {
            return false;
        }
        let mine: Vec<(&String, &Entry)> = views
            .iter()
            .filter(|(_, v)| v.subject == p.subject)
            .collect();
        if mine.len() >= MAX_VIEWS_PER_USER {
            let idle = mine
                .iter()
                .filter(|(_, v)| v.view.in_flight() == 0)
                .min_by_key(|(_, v)| v.last_used)
                .map(|(k, _)| (*k).clone());
            let Some(k) = idle else {
                tracing::warn!("MCP Apps: every View of the user is busy; no View recorded");
                return false;
            };
            views.remove(&k);
        } else if views.len() >= MAX_VIEWS {
            tracing::warn!("MCP Apps: the server holds its most Views; no View recorded");
            return false;
        }
        views.insert(
            id,
            Entry {
                subject: p.subject.clone(),
                client: json!({"id": p.client_id, "name": p.client_name}),
                tool: c.tool,
                arguments: c.arguments,
                result,
                origin,
                last_used: now,
                view,
                calls: HashMap::new(),
                proposals: HashMap::new(),
            },
        );
        true
    }

    /// Whether the host is on (a sandbox is served).
    pub(crate) fn is_on(&self) -> bool {
        self.link_policy.is_some()
    }

    /// The View whose App request runs under ledger request `id`, if any
    /// (the approval card says the App asks, not the agent).
    pub(crate) fn view_of_request(&self, id: &RequestId) -> Option<String> {
        let views = self.lock();
        views
            .values()
            .find(|v| v.calls.values().any(|c| c.request == *id))
            .map(|v| v.view.id().as_str().to_owned())
    }

    /// The user's open Views as the tab's snapshot lists them; `live` says
    /// whether a grant is live now.
    pub(crate) fn listed(&self, subject: &str, live: impl Fn(&GrantId) -> bool) -> Vec<Value> {
        let views = self.lock();
        let mut out: Vec<(&Entry, Value)> = views
            .values()
            .filter(|v| v.subject == subject && !v.view.is_closed())
            .map(|v| (v, v.listed(live(&v.view.origin().grant))))
            .collect();
        out.sort_by_key(|(v, _)| v.last_used);
        out.into_iter().map(|(_, j)| j).collect()
    }

    /// The ids of the user's open Views of `grant`.
    fn views_of(&self, subject: &str, grant: &GrantId) -> Vec<String> {
        self.lock()
            .values()
            .filter(|v| {
                v.subject == subject && v.view.origin().grant == *grant && !v.view.is_closed()
            })
            .map(|v| v.view.id().as_str().to_owned())
            .collect()
    }

    /// Runs `f` on the user's View `id` (refused when it is not theirs).
    pub(crate) fn with<T>(
        &self,
        subject: &str,
        id: &str,
        f: impl FnOnce(&mut Entry) -> T,
    ) -> Result<T, Refusal> {
        let mut views = self.lock();
        let v = views
            .get_mut(id)
            .filter(|v| v.subject == subject)
            .ok_or(Refusal::NoView)?;
        v.last_used = Instant::now();
        Ok(f(v))
    }
}

/// Why an App route refused.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// No such View of this user.
    NoView,
    /// The View's grant is no longer live (revoked, expired, site off).
    GrantEnded,
    /// The store could not be read: the cause, logged, never shown.
    Store(String),
}

impl Refusal {
    pub(crate) fn response(&self) -> Response {
        match self {
            Self::NoView => error(
                StatusCode::NOT_FOUND,
                "ACTION_NOT_FOUND",
                "no such App View",
            ),
            Self::GrantEnded => error(
                StatusCode::FORBIDDEN,
                "SESSION_REVOKED",
                "the connection this App View was shown for is no longer live",
            ),
            Self::Store(cause) => super::respond::database(cause),
        }
    }

    /// The message an App is told.
    pub(crate) fn message(&self) -> &'static str {
        match self {
            Self::NoView => "no such App View",
            Self::GrantEnded => "the connection this App was shown for is no longer live",
            Self::Store(_) => "temporarily unavailable",
        }
    }
}

/// The credential a gateway source is reached with: the gateway holds none
/// per user, so it is one constant (a source's own credential, were there
/// one, would go here).
const NO_CREDENTIAL: &[u8] = b"portcullis-gateway: no per-user source credential";

impl App {
    /// Records the View an agent's completed gateway call leaves (see the
    /// module docs), and wakes the user's tab.
    pub(crate) fn record_view(&self, c: Candidate, result: &CallToolResult, origin: RequestId) {
        if result.is_error == Some(true) || !self.apps.is_on() {
            return;
        }
        let subject = c.principal.subject.clone();
        if self
            .apps
            .record(self.site().as_str(), &self.gateway.map, c, result, origin)
        {
            tracing::debug!("MCP Apps: View recorded");
            self.bump(&subject);
        }
    }

    /// The View's grant as it is now, as a principal (live, the user's
    /// own, its current scopes) and as the authority the View acts under.
    /// Blocking.
    pub(crate) fn authority_now(
        &self,
        subject: &str,
        grant: &GrantId,
    ) -> Result<(Principal, Authority), Refusal> {
        let now = clock::now();
        let store = |e: &dyn std::fmt::Display| Refusal::Store(e.to_string());
        let site = self.engine().site(self.site()).map_err(|e| store(&e))?;
        let g = self
            .engine()
            .grant(grant)
            .map_err(|e| store(&e))?
            .filter(|g| g.subject == subject)
            .ok_or(Refusal::GrantEnded)?;
        if !site.enabled || g.status(&site, now, self.engine().policy()) != GrantStatus::Live {
            return Err(Refusal::GrantEnded);
        }
        let selection = self
            .engine()
            .granted_apps(self.site(), subject, grant, now)
            .map_err(|e| store(&e))?
            .ok_or(Refusal::GrantEnded)?;
        let sources = match selection.ids() {
            None => GrantedSources::All,
            Some(ids) => GrantedSources::Only(
                ids.into_iter()
                    .filter_map(|i| SourceId::new(i).ok())
                    .collect(),
            ),
        };
        let authority = Authority {
            lineage: LineageKey::of(self.site().as_str(), subject, &g.client_id),
            grant: g.id,
            credential: Fingerprint::of(NO_CREDENTIAL),
            policy: Fingerprint::of(format!("site epoch {}", site.epoch).as_bytes()),
            scopes: g.scopes.clone(),
            sources,
        };
        let principal = Principal {
            site: self.site().clone(),
            grant: g.id,
            subject: g.subject,
            client_id: g.client_id,
            client_name: g.client_name,
            scopes: g.scopes,
            token_id: String::new(),
            expires: now.saturating_add(Duration::from_mins(1)),
        };
        Ok((principal, authority))
    }
}

/// The `{view}` of most App routes.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ViewRef {
    view: String,
}

/// The user's View `id`'s grant as it is now (on the blocking pool).
pub(crate) async fn view_now(
    app: &Shared,
    subject: &str,
    id: &str,
) -> Result<(Principal, Authority), Refusal> {
    let grant = app.apps.with(subject, id, |v| v.view.origin().grant)?;
    let who = subject.to_owned();
    match app
        .blocking(move |app| app.authority_now(&who, &grant))
        .await
    {
        Ok(r) => r,
        Err(_) => Err(Refusal::Store("a blocking task failed".into())),
    }
}

/// The App's downstream `ui://` URI the View's tool names **now** (`None`
/// when the tool is gone, moved to another source, or names no App).
fn current_app_uri(app: &App, source: &SourceId, tool: &str) -> Option<String> {
    let (owner, tool) = app.gateway.find(tool)?;
    if &owner.spec.id != source {
        return None;
    }
    let (s, downstream) = app.gateway.map.decode(&ui_resource(&tool)?).ok()?;
    (&s == source).then_some(downstream)
}

/// `POST /agents/apps/activate {view}`: "Activate interactions", against
/// the View's grant as it is now and its tool's current App.
pub(crate) async fn activate(
    State(app): State<Shared>,
    headers: HeaderMap,
    raw: Bytes,
) -> Response {
    let (session, r): (_, ViewRef) = match post_body(&app, &headers, &raw) {
        Ok(checked) => checked,
        Err(r) => return r,
    };
    let authority = match view_now(&app, &session.subject, &r.view).await {
        Ok((_, a)) => a,
        Err(Refusal::GrantEnded) => {
            let _ = app
                .apps
                .with(&session.subject, &r.view, |v| v.view.deactivate());
            return Refusal::GrantEnded.response();
        }
        Err(e) => return e.response(),
    };
    let done = app.apps.with(&session.subject, &r.view, |v| {
        let current = current_app_uri(&app, v.view.source(), &v.tool.name);
        let activated = v.view.activate(&authority, current.as_deref());
        // Approvals asked under an earlier activation do not carry over.
        activated.map(|withdrawn| (v.drop_withdrawn(&withdrawn), v.view.origin().grant))
    });
    match done {
        Ok(Ok((waiting, grant))) => {
            if !waiting.is_empty() {
                deny_waiting(&app, &session.subject, grant, &waiting).await;
            }
            tracing::debug!("MCP Apps: View activated");
            Json(json!({"ok": true})).into_response()
        }
        Ok(Err(e)) => error(StatusCode::FORBIDDEN, "PERMISSION_DENIED", &e.to_string()),
        Err(e) => e.response(),
    }
}

/// `POST /agents/apps/close {view}`: its controls, open proposals and
/// pending confirmations end (calls already dispatched may still finish).
/// An App write that was waiting for the user's approval is denied in the
/// ledger ([`deny_waiting`]), so its card leaves the approvals list and the
/// action never runs: nobody is left to approve it for.
pub(crate) async fn close(State(app): State<Shared>, headers: HeaderMap, raw: Bytes) -> Response {
    let (session, r): (_, ViewRef) = match post_body(&app, &headers, &raw) {
        Ok(checked) => checked,
        Err(r) => return r,
    };
    let closed = app.apps.with(&session.subject, &r.view, |v| {
        let withdrawn = v.view.close();
        for p in &withdrawn.proposals {
            v.proposals.remove(p);
        }
        let waiting = v.drop_withdrawn(&withdrawn);
        (withdrawn.running, v.view.origin().grant, waiting)
    });
    match closed {
        Ok((running, grant, waiting)) => {
            if !waiting.is_empty() {
                deny_waiting(&app, &session.subject, grant, &waiting).await;
            }
            app.bump(&session.subject);
            tracing::debug!(running, denied = waiting.len(), "MCP Apps: View closed");
            Json(json!({"ok": true, "running": running})).into_response()
        }
        Err(e) => e.response(),
    }
}

/// Looks again at the user's Views of `grant` once its authority changed
/// (its apps were set): a View whose activation no longer holds under the
/// grant as it is now ends it ([`View::check`]) and the approvals it was
/// waiting for are denied at once, not when the user next clicks, so no
/// approval asked under the old authority is left to be given under the
/// new one. A grant that can no longer be read is left to the next
/// operation, which refuses it.
pub(crate) async fn revisit_grant(app: &Shared, subject: &str, grant: GrantId) {
    if !app.apps.is_on() {
        return;
    }
    let ids = app.apps.views_of(subject, &grant);
    if ids.is_empty() {
        return;
    }
    let who = subject.to_owned();
    let Ok(Ok((_, authority))) = app
        .blocking(move |app| app.authority_now(&who, &grant))
        .await
    else {
        return;
    };
    let mut waiting = Vec::new();
    for id in ids {
        let _ = app.apps.with(subject, &id, |v| {
            if let Err(withdrawn) = v.view.check(&authority) {
                waiting.extend(v.drop_withdrawn(&withdrawn));
            }
        });
    }
    if !waiting.is_empty() {
        deny_waiting(app, subject, grant, &waiting).await;
    }
    app.bump(subject);
}

/// Denies, as the user would, the ledger approvals still pending for
/// `requests` of `grant`: App operations whose View no longer waits for
/// them (it closed, or its activation ended because the authority it was
/// given changed: an approval asked under one authority is never used
/// under another). A decision the user made meanwhile stands: the approval is then
/// no longer pending and is left alone. Failures are logged, not answered:
/// the View is closed either way, and an approval left behind runs nothing
/// unless the App asks again, which a closed View cannot.
pub(crate) async fn deny_waiting(
    app: &Shared,
    subject: &str,
    grant: GrantId,
    requests: &[RequestId],
) {
    let who = subject.to_owned();
    let prompts = app
        .blocking(move |app| app.engine().pending_approvals(app.site(), &who, &grant))
        .await;
    let prompts = match prompts {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "MCP Apps: a closed View's approvals not read");
            return;
        }
        Err(_) => return,
    };
    for prompt in prompts
        .into_iter()
        .filter(|p| requests.contains(&p.request_id))
    {
        let (who, approval) = (subject.to_owned(), prompt.reference());
        let denied = app
            .write(move |app, txn| {
                app.engine().decide_approval_in(
                    txn,
                    app.site(),
                    &who,
                    &approval,
                    ApprovalDecision::Deny,
                    clock::now(),
                )
            })
            .await;
        match denied {
            Ok(Ok(())) => {
                app.portcullis.announce(grant, prompt.request_id);
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "MCP Apps: a closed View's approval not denied");
            }
            Err(_) => {}
        }
    }
}

/// `POST /agents/apps/resource {view}`: the App's HTML and its declared
/// CSP origins (exact origins only), read through the gateway under the
/// View's grant as it is now.
pub(crate) async fn resource(
    State(app): State<Shared>,
    headers: HeaderMap,
    raw: Bytes,
) -> Response {
    let (session, r): (_, ViewRef) = match post_body(&app, &headers, &raw) {
        Ok(checked) => checked,
        Err(r) => return r,
    };
    let (principal, authority) = match view_now(&app, &session.subject, &r.view).await {
        Ok(v) => v,
        Err(e) => return e.response(),
    };
    let Ok((uri, source)) = app.apps.with(&session.subject, &r.view, |v| {
        (
            v.view.origin().resource_uri.clone(),
            v.view.source().clone(),
        )
    }) else {
        return Refusal::NoView.response();
    };
    if !authority.sources.includes(&source) {
        return error(
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            "this connection was not given the App's source",
        );
    }
    let read = super::gateway::resources::read(
        &app,
        Some(&principal),
        &ReadResourceRequestParams::new(uri),
        super::gateway::input::Round::default(),
    )
    .await;
    let result = match read {
        Ok(rmcp::model::ReadResourceResponse::Complete(r)) => {
            serde_json::to_value(r).unwrap_or(Value::Null)
        }
        Ok(_) => {
            return error(
                StatusCode::BAD_GATEWAY,
                "ACTION_UNAVAILABLE",
                "the source asks for input before it gives the App",
            );
        }
        Err(e) => {
            tracing::warn!(error = %e.message, "MCP Apps: reading the App failed");
            return error(StatusCode::BAD_GATEWAY, "SOURCE_UNAVAILABLE", &e.message);
        }
    };
    let Some((html, (connect, resource))) =
        app_html(&result, &[&app.browser.public_url, &app.apps.sandbox])
    else {
        tracing::warn!("MCP Apps: the App's resource holds no text/html;profile=mcp-app");
        return error(
            StatusCode::BAD_GATEWAY,
            "EXPECTATION_FAILED",
            "the resource holds no text/html;profile=mcp-app content",
        );
    };
    tracing::debug!(
        connect = connect.len(),
        resource = resource.len(),
        "MCP Apps: App read; its CSP origins kept"
    );
    Json(json!({
        "ok": true,
        "html": html,
        "csp": {"connectDomains": connect, "resourceDomains": resource},
    }))
    .into_response()
}

/// An App's HTML and its kept CSP origins (`connectDomains`,
/// `resourceDomains`).
type AppDocument = (String, (Vec<String>, Vec<String>));

/// The App's HTML in a read result, and its declared exact origins
/// without `own`.
fn app_html(result: &Value, own: &[&str]) -> Option<AppDocument> {
    let content = result
        .get("contents")?
        .as_array()?
        .iter()
        .find(|c| c.get("mimeType").and_then(Value::as_str) == Some(APP_MIME))?;
    let html = match (content.get("text"), content.get("blob")) {
        (Some(Value::String(t)), _) => t.clone(),
        (_, Some(Value::String(b))) => {
            use base64::Engine as _;
            let bytes = base64::engine::general_purpose::STANDARD.decode(b).ok()?;
            String::from_utf8(bytes).ok()?
        }
        _ => return None,
    };
    let csp = content.pointer("/_meta/ui/csp");
    let list = |name: &str| {
        let declared: Vec<&str> = csp
            .and_then(|c| c.get(name))
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        exact_origins(declared, own)
    };
    Some((html, (list("connectDomains"), list("resourceDomains"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(meta: Value) -> Tool {
        let mut t = Tool::new("show", "", std::sync::Arc::new(JsonObject::new()));
        t.meta = serde_json::from_value(meta).unwrap();
        t
    }

    #[test]
    fn a_tool_names_its_app_and_who_may_call_it() {
        let gw = "ui://portcullis/counter/counter/app.html";
        assert_eq!(
            ui_resource(&tool(json!({"ui": {"resourceUri": gw}}))).as_deref(),
            Some(gw)
        );
        assert_eq!(
            ui_resource(&tool(json!({"ui/resourceUri": gw}))).as_deref(),
            Some(gw)
        );
        assert_eq!(
            ui_resource(&tool(json!({"ui": {"resourceUri": "https://x"}}))),
            None
        );
        assert!(app_visible(&tool(json!({"ui": {"resourceUri": gw}}))));
        assert!(app_visible(&tool(json!({"ui": {"visibility": ["app"]}}))));
        assert!(!app_visible(&tool(
            json!({"ui": {"visibility": ["model"]}})
        )));
        assert!(!app_visible(&tool(json!({"ui": {"visibility": "app"}}))));
    }

    #[test]
    fn the_app_document_keeps_only_exact_foreign_origins() {
        let read = json!({"contents": [
            {"uri": "ui://x", "mimeType": "text/plain", "text": "not this"},
            {"uri": "ui://y", "mimeType": APP_MIME, "text": "<p>app</p>", "_meta": {"ui": {"csp": {
                "connectDomains": ["https://api.example.com", "https://*.example.net",
                    "http://127.0.0.1:8787", "https://api.example.com/"],
                "resourceDomains": ["https://cdn.example.com/lib/", "javascript:alert(1)"],
            }}}},
        ]});
        let (html, (connect, resource)) = app_html(&read, &["http://127.0.0.1:8787"]).unwrap();
        assert_eq!(html, "<p>app</p>");
        assert_eq!(connect, ["https://api.example.com"]);
        assert!(resource.is_empty());
        let blob =
            json!({"contents": [{"uri": "ui://y", "mimeType": APP_MIME, "blob": "PGI+PC9iPg=="}]});
        assert_eq!(app_html(&blob, &[]).unwrap().0, "<b></b>");
        assert!(app_html(&json!({"contents": []}), &[]).is_none());
    }
}

#[cfg(test)]
mod registry {
    use super::*;
    use portcullis_core::scope::ScopeSet;

    fn principal(subject: &str, grant: u8) -> Principal {
        Principal {
            site: portcullis_core::site::SiteId::parse("site").unwrap(),
            grant: GrantId::from_bytes([grant; 16]),
            subject: subject.into(),
            client_id: "client".into(),
            client_name: Some("Agent".into()),
            scopes: ScopeSet::parse("skills:read").unwrap(),
            token_id: String::new(),
            expires: portcullis_core::time::Timestamp::from_secs(0),
        }
    }

    fn candidate(subject: &str, grant: u8) -> Candidate {
        let mut tool = Tool::new("show", "", std::sync::Arc::new(JsonObject::new()));
        tool.meta = serde_json::from_value(
            json!({"ui": {"resourceUri": "ui://portcullis/counter/counter/app.html"}}),
        )
        .unwrap();
        let source = SourceId::new("counter").unwrap();
        Candidate::of(
            &principal(subject, grant),
            &source,
            &tool,
            &JsonObject::new(),
        )
        .unwrap()
    }

    fn apps() -> Apps {
        Apps {
            sandbox: "http://127.0.0.1:2".into(),
            link_policy: None,
            views: Mutex::new(HashMap::new()),
        }
    }

    #[test]
    fn views_are_bounded_per_user_and_recorded_once_per_call() {
        let (apps, map) = (apps(), portcullis_core::gateway::Gateway::default());
        let ok = CallToolResult::success(Vec::new());
        let id = |n: u8| RequestId::from_bytes([n; 16]);
        assert!(apps.record("site", &map, candidate("ann", 1), &ok, id(1)));
        assert!(
            !apps.record("site", &map, candidate("ann", 1), &ok, id(1)),
            "a repeat of the same call leaves no second View"
        );
        for n in 2..=u8::try_from(MAX_VIEWS_PER_USER + 4).unwrap() {
            assert!(apps.record("site", &map, candidate("ann", 1), &ok, id(n)));
        }
        assert_eq!(apps.listed("ann", |_| true).len(), MAX_VIEWS_PER_USER);
        assert!(apps.listed("bob", |_| true).is_empty());
        assert!(apps.record("site", &map, candidate("bob", 2), &ok, id(1)));
        let bob = apps.listed("bob", |_| false);
        assert_eq!(bob.len(), 1);
        assert_eq!(bob[0]["live"], false);
        assert_eq!(bob[0]["active"], false);
        assert_eq!(
            bob[0]["resourceUri"],
            "ui://portcullis/counter/counter/app.html"
        );
        let view = bob[0]["id"].as_str().unwrap().to_owned();
        assert!(matches!(
            apps.with("ann", &view, |_| ()),
            Err(Refusal::NoView)
        ));
        assert!(apps.with("bob", &view, |_| ()).is_ok());
    }
}
