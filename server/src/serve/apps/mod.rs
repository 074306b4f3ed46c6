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
//!   the store ([`StoredView`], table `app_views`): a reload, a restart and
//!   every instance of a PostgreSQL fleet see the same View, its activation
//!   and its operations waiting for approval. At most
//!   [`MAX_VIEWS_PER_USER`] per user (a full user's oldest View with
//!   nothing in flight makes room; when every one is busy no View is
//!   recorded and the tool result stands alone); one unused for
//!   [`VIEW_IDLE`] is dropped. Each change is stored over the revision it
//!   read ([`App::with_view`]). The tab's long-poll lists the user's Views
//!   ([`super::tab`]), with the App requests a reload left without their
//!   answer: the page resumes one waiting for approval with its own
//!   message, and offers **Check result** for one already dispatched
//!   (`POST /agents/apps/check`, [`check`]: its receipt, never a re-run).
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
//!   ([`portcullis_gateway::Gateway::call`]): the execution ledger under a
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
//! * **`ui/message`** becomes a proposal the user sends once or declines;
//!   "Send once" puts it in the View's outbox for the agent that opened the
//!   View, and **`ui/update-model-context`** becomes the View's context
//!   offer, which the user may select and send (`POST
//!   /agents/apps/context`, [`send_context`]). The agent's next complete
//!   tool result carries what waits for it, once ([`deliver`], which says
//!   why a tool result).
//! * Closing a View (`POST /agents/apps/close`) ends its controls and its
//!   open proposals; calls already dispatched may still finish.
//!
//! Not supported: App-provided tools, display modes other than `inline`,
//! image content.

pub(crate) mod request;
pub(crate) mod sandbox;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse as _, Response};
use axum::routing::post;
use portcullis_core::approval::ApprovalDecision;
use portcullis_core::apps::{
    AppViewError, Authority, Fingerprint, GrantedSources, LineageKey, OpId, ProposalId, RpcId,
    SourceCall, StoredView, View, ViewId, ViewOrigin, Withdrawn,
};
use portcullis_core::engine::Principal;
use portcullis_core::gateway::SourceId;
use portcullis_core::grant::{GrantId, GrantStatus};
use portcullis_core::ledger::RequestId;
use rmcp::model::{CallToolResult, JsonObject, ReadResourceRequestParams, Tool};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::tab::{error, post_body};
use super::{App, Shared};
use crate::clock;
use crate::serve::respond::Handled;

/// Views one user may have at once.
pub(crate) const MAX_VIEWS_PER_USER: usize = 16;
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
        .route("/agents/apps/context", post(send_context))
        .route("/agents/apps/check", post(check))
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
    /// The App's message as it came (JSON text): after a reload the page
    /// resumes an operation that waits for approval with it.
    pub(crate) text: String,
    /// The gateway was asked once already.
    pub(crate) asked: bool,
    /// What it calls.
    pub(crate) target: SourceCall,
}

/// The host's own data about a View, kept as JSON text in the core's
/// [`StoredView::host`].
#[derive(Serialize, Deserialize)]
struct HostData {
    client: Value,
    tool: Tool,
    arguments: JsonObject,
    result: Value,
    /// The agent's call that left it.
    origin: String,
    calls: Vec<StoredCall>,
    /// `(proposal, the App's request id)`.
    proposals: Vec<(u64, Value)>,
}

#[derive(Serialize, Deserialize)]
struct StoredCall {
    id: Value,
    op: u64,
    request: String,
    text: String,
    asked: bool,
    /// `tool` and its `arguments` (JSON text), or a resource's `uri`.
    tool: Option<String>,
    arguments: Option<String>,
    uri: Option<String>,
}

fn rpc_id(v: &Value) -> Option<RpcId> {
    match v {
        Value::Number(n) => n.as_i64().map(RpcId::Number),
        Value::String(s) => Some(RpcId::String(s.clone())),
        _ => None,
    }
}

/// One View, as read from the store for one change.
pub(crate) struct Entry {
    pub(crate) client: Value,
    pub(crate) tool: Tool,
    pub(crate) arguments: JsonObject,
    pub(crate) result: Value,
    /// The agent's call that left it.
    origin: RequestId,
    /// Its state (the core's rules) and its outbox for the agent.
    pub(crate) stored: StoredView,
    /// Its requests in flight, by the App's JSON-RPC id (at most
    /// [`portcullis_core::apps::MAX_IN_FLIGHT`]: each holds an operation).
    pub(crate) calls: HashMap<RpcId, Call>,
    /// The App's request each pending proposal answers.
    pub(crate) proposals: HashMap<ProposalId, RpcId>,
}

impl Entry {
    fn read(stored: StoredView) -> Option<Self> {
        let host: HostData = serde_json::from_str(&stored.host).ok()?;
        let source = stored.view.source().clone();
        let calls = host
            .calls
            .into_iter()
            .filter_map(|c| {
                let target = match (c.tool, c.arguments, c.uri) {
                    (Some(name), Some(arguments), _) => SourceCall::Tool {
                        source: source.clone(),
                        name,
                        arguments,
                    },
                    (_, _, Some(uri)) => SourceCall::Resource {
                        source: source.clone(),
                        uri,
                    },
                    _ => return None,
                };
                Some((
                    rpc_id(&c.id)?,
                    Call {
                        op: OpId(c.op),
                        request: RequestId::parse(&c.request).ok()?,
                        message: Fingerprint::of(c.text.as_bytes()),
                        text: c.text,
                        asked: c.asked,
                        target,
                    },
                ))
            })
            .collect();
        let proposals = host
            .proposals
            .iter()
            .filter_map(|(p, id)| Some((ProposalId(*p), rpc_id(id)?)))
            .collect();
        Some(Self {
            client: host.client,
            tool: host.tool,
            arguments: host.arguments,
            result: host.result,
            origin: RequestId::parse(&host.origin).ok()?,
            stored,
            calls,
            proposals,
        })
    }

    /// The host data as the store keeps it: in a fixed order (calls by
    /// operation, proposals by number), so an unchanged View writes the
    /// same bytes and is not stored again.
    fn host(&self) -> String {
        let mut calls: Vec<StoredCall> = self
            .calls
            .iter()
            .map(|(id, c)| {
                let (tool, arguments, uri) = match &c.target {
                    SourceCall::Tool {
                        name, arguments, ..
                    } => (Some(name.clone()), Some(arguments.clone()), None),
                    SourceCall::Resource { uri, .. } => (None, None, Some(uri.clone())),
                };
                StoredCall {
                    id: id.to_json(),
                    op: c.op.0,
                    request: c.request.to_string(),
                    text: c.text.clone(),
                    asked: c.asked,
                    tool,
                    arguments,
                    uri,
                }
            })
            .collect();
        calls.sort_by_key(|c| c.op);
        let mut proposals: Vec<(u64, Value)> = self
            .proposals
            .iter()
            .map(|(p, id)| (p.0, id.to_json()))
            .collect();
        proposals.sort_by_key(|(p, _)| *p);
        let host = HostData {
            client: self.client.clone(),
            tool: self.tool.clone(),
            arguments: self.arguments.clone(),
            result: self.result.clone(),
            origin: self.origin.to_string(),
            calls,
            proposals,
        };
        serde_json::to_string(&host).unwrap_or_default()
    }

    /// The core's View.
    pub(crate) fn view(&self) -> &View {
        &self.stored.view
    }

    /// The core's View, to change.
    pub(crate) fn view_mut(&mut self) -> &mut View {
        &mut self.stored.view
    }

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
        let view = self.view();
        let context = view.context().map(|(version, value)| {
            json!({
                "version": version,
                "text": value.as_text(),
                "structured": value.structured(),
                "size": value.size(),
            })
        });
        // The App's requests still in flight: after a reload the page
        // resumes those that wait for an approval and offers "Check
        // result" for those that were dispatched.
        let mut calls: Vec<Value> = self
            .calls
            .iter()
            .map(|(id, c)| {
                let awaiting = view.pending_approval(c.op).is_some();
                let what = match &c.target {
                    SourceCall::Tool { name, .. } => name.clone(),
                    SourceCall::Resource { uri, .. } => format!("resources/read {uri}"),
                };
                json!({
                    "id": id.to_json(),
                    "op": c.op.0,
                    // A tool call's ledger request: "Check result" names it
                    // if the operation has left the View by then.
                    "request": matches!(c.target, SourceCall::Tool { .. })
                        .then(|| c.request.to_string()),
                    "what": what,
                    "awaiting": awaiting,
                    "message": awaiting.then(|| c.text.clone()),
                })
            })
            .collect();
        calls.sort_by_key(|c| c["op"].as_u64());
        json!({
            "id": view.id().as_str(),
            "grant": view.origin().grant.to_string(),
            "client": self.client,
            "source": view.source().as_str(),
            "tool": self.tool.name,
            "resourceUri": view.origin().resource_uri,
            "active": view.is_active(),
            "live": live,
            "context": context,
            "calls": calls,
            "outbox": self.stored.outbox().len(),
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
        };
        tokio::spawn(sandbox.serve(args.limits, async move {
            let _ = stopping.wait_for(|stopping| *stopping).await;
        }));
        Ok(apps)
    }

    /// Whether the host is on (a sandbox is served).
    pub(crate) fn is_on(&self) -> bool {
        self.link_policy.is_some()
    }
}

/// Runs `f`, which does store I/O, from an async handler: on a thread of
/// its own outside the runtime (the synchronous PostgreSQL driver refuses
/// to run on a runtime's thread), and on the multi-threaded runtime through
/// [`tokio::task::block_in_place`] meanwhile, which hands this worker's
/// other tasks to another thread first (so the runtime is never blocked).
/// Outside a runtime (a blocking thread, a unit test) it runs as it is.
pub(crate) fn store_io<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return f();
    };
    let apart = || {
        std::thread::scope(|s| {
            s.spawn(f)
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    };
    if runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
        tokio::task::block_in_place(apart)
    } else {
        apart()
    }
}

/// The id of the View an agent's call (`origin`, of `grant`) leaves: the
/// same call leaves the same id, so a repeat of it finds the View stored
/// already and leaves no second one. It is bound to its user by the key
/// it is stored under, never trusted alone.
fn view_id_of(grant: &GrantId, origin: &RequestId) -> Option<ViewId> {
    use base64::Engine as _;
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    h.update(b"portcullis/apps/view-id/v1");
    h.update(grant.as_bytes());
    h.update(origin.as_bytes());
    let digest = h.finalize();
    let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&digest[..16]);
    ViewId::new(&id).ok()
}

/// How many times a View change is re-applied after another writer stored
/// the View first.
const MAX_VIEW_ATTEMPTS: usize = 8;

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
    pub(crate) fn record_view(
        self: &Arc<Self>,
        c: Candidate,
        result: &CallToolResult,
        origin: RequestId,
    ) {
        if result.is_error == Some(true) || !self.apps.is_on() {
            return;
        }
        let subject = c.principal.subject.clone();
        if store_io(|| self.store_view(c, result, origin)) {
            tracing::debug!("MCP Apps: View recorded");
            self.bump(&subject);
        }
    }

    /// Stores the View `c` leaves; whether one was stored (see the module
    /// docs for the bounds). Blocking.
    fn store_view(
        self: &Arc<Self>,
        c: Candidate,
        result: &CallToolResult,
        origin: RequestId,
    ) -> bool {
        let Ok(mut result) = serde_json::to_value(result) else {
            return false;
        };
        if let Some(meta) = result.get_mut("_meta").and_then(Value::as_object_mut) {
            meta.remove(portcullis_axum::rmcp::REQUEST_ID_META);
        }
        let p = &c.principal;
        let Some(view_id) = view_id_of(&p.grant, &origin) else {
            return false;
        };
        let view = View::open(
            ViewOrigin {
                id: view_id,
                lineage: LineageKey::of(self.site().as_str(), &p.subject, &p.client_id),
                grant: p.grant,
                source: c.source,
                tool: c.tool.name.to_string(),
                resource_uri: c.resource,
            },
            self.gateway.map(),
        );
        let view = match view {
            Ok(v) => v,
            Err(e) => {
                tracing::debug!(error = %e, "MCP Apps: the tool's App cannot be a View");
                return false;
            }
        };
        let now = clock::now();
        let mine = match self.engine().app_views(self.site(), &p.subject) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "MCP Apps: the user's Views not read; no View recorded");
                return false;
            }
        };
        if mine.iter().any(|v| v.view.id() == view.id()) {
            // A repeat of the same call leaves no second View.
            return false;
        }
        // Idle or closed-and-settled Views go; a full user's oldest View
        // with nothing in flight makes room.
        let idle = |v: &StoredView| {
            now.saturating_since(v.last_used) >= VIEW_IDLE
                || (v.view.is_closed() && v.view.in_flight() == 0)
        };
        let mut drop: Vec<ViewId> = mine
            .iter()
            .filter(|v| idle(v))
            .map(|v| v.view.id().clone())
            .collect();
        let kept = mine.len() - drop.len();
        if kept >= MAX_VIEWS_PER_USER {
            let oldest = mine
                .iter()
                .filter(|v| !idle(v) && v.view.in_flight() == 0)
                .min_by_key(|v| v.last_used)
                .map(|v| v.view.id().clone());
            let Some(oldest) = oldest else {
                tracing::warn!("MCP Apps: every View of the user is busy; no View recorded");
                return false;
            };
            drop.push(oldest);
        }
        let entry_host = HostData {
            client: json!({"id": p.client_id, "name": p.client_name}),
            tool: c.tool,
            arguments: c.arguments,
            result,
            origin: origin.to_string(),
            calls: Vec::new(),
            proposals: Vec::new(),
        };
        let stored = StoredView::new(
            self.site().clone(),
            p.subject.clone(),
            view,
            serde_json::to_string(&entry_host).unwrap_or_default(),
            now,
        );
        let created = self.commit(move |app, txn| {
            for id in &drop {
                app.engine()
                    .delete_app_view(&mut *txn, app.site(), &stored.subject, id)?;
            }
            app.engine()
                .create_app_view(txn, &stored, MAX_VIEWS_PER_USER)
        });
        match created {
            Ok(Ok(())) => true,
            Ok(Err(AppViewError::Exists)) => false,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "MCP Apps: no View recorded");
                false
            }
            Err(e) => {
                tracing::warn!(error = %e, "MCP Apps: no View recorded");
                false
            }
        }
    }

    /// The View whose App request runs under ledger request `id`, among
    /// `views` (the approval card says the App asks, not the agent).
    pub(crate) fn view_of_request(views: &[Entry], id: &RequestId) -> Option<String> {
        views
            .iter()
            .find(|v| v.calls.values().any(|c| c.request == *id))
            .map(|v| v.view().id().as_str().to_owned())
    }

    /// The user's stored Views (blocking), read for the tab's snapshot.
    pub(crate) fn user_views(&self, subject: &str) -> Result<Vec<Entry>, String> {
        if !self.apps.is_on() {
            return Ok(Vec::new());
        }
        let views = self
            .engine()
            .app_views(self.site(), subject)
            .map_err(|e| e.to_string())?;
        Ok(views.into_iter().filter_map(Entry::read).collect())
    }

    /// The user's open Views as the tab's snapshot lists them; `live` says
    /// whether a grant is live now.
    pub(crate) fn listed(views: &[Entry], live: impl Fn(&GrantId) -> bool) -> Vec<Value> {
        let mut out: Vec<(&Entry, Value)> = views
            .iter()
            .filter(|v| !v.view().is_closed())
            .map(|v| (v, v.listed(live(&v.view().origin().grant))))
            .collect();
        out.sort_by_key(|(v, _)| v.stored.last_used);
        out.into_iter().map(|(_, j)| j).collect()
    }

    /// The ids of the user's open Views of `grant` (blocking).
    fn views_of(&self, subject: &str, grant: &GrantId) -> Vec<String> {
        self.user_views(subject)
            .unwrap_or_default()
            .iter()
            .filter(|v| v.view().origin().grant == *grant && !v.view().is_closed())
            .map(|v| v.view().id().as_str().to_owned())
            .collect()
    }

    /// Runs `f` on the user's View `id` (refused when it is not theirs) and
    /// stores what it changed, over the revision it read: when another
    /// writer (another request, another instance) stored the View first,
    /// the View is read again and `f` runs again on it. Store I/O, through
    /// [`store_io`].
    pub(crate) fn with_view<T: Send>(
        self: &Arc<Self>,
        subject: &str,
        id: &str,
        mut f: impl FnMut(&mut Entry) -> T + Send,
    ) -> Result<T, Refusal> {
        let view_id = ViewId::new(id).map_err(|_| Refusal::NoView)?;
        store_io(|| {
            for _ in 0..MAX_VIEW_ATTEMPTS {
                let stored = self
                    .engine()
                    .app_view(self.site(), subject, &view_id)
                    .map_err(|e| Refusal::Store(e.to_string()))?
                    .ok_or(Refusal::NoView)?;
                let before = stored.clone();
                let mut entry = Entry::read(stored).ok_or(Refusal::NoView)?;
                let out = f(&mut entry);
                entry.stored.host = entry.host();
                if entry.stored == before {
                    return Ok(out);
                }
                entry.stored.last_used = clock::now();
                let changed = entry.stored;
                let saved = self.commit(move |app, txn| {
                    let mut copy = changed.clone();
                    app.engine().save_app_view(txn, &mut copy)
                });
                match saved {
                    Ok(Ok(())) => return Ok(out),
                    Ok(Err(AppViewError::Stale)) => {}
                    Ok(Err(AppViewError::NotFound)) => return Err(Refusal::NoView),
                    Ok(Err(e)) => return Err(Refusal::Store(e.to_string())),
                    Err(e) => return Err(Refusal::Store(e.to_string())),
                }
            }
            Err(Refusal::Store(
                "the App View kept changing under this request".into(),
            ))
        })
    }
}

impl App {
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

/// What waits for the agent `principal` (context its user sent, messages
/// its user confirmed, from the Views its calls opened) added to its tool
/// call's `answer`, and taken from the store in the same step, so each item
/// reaches it once ([`portcullis_core::apps::StoredView`]).
///
/// **Why a tool result.** The MCP Apps extension has the host put an App's
/// context and messages into the conversation ("ui/update-model-context":
/// kept and sent with the next turn; "ui/message": a message of the
/// conversation). Here the conversation is an external agent, and the one
/// thing every MCP client hands to its model is a tool result (MCP
/// 2026-07-28, "Tools", "Tool Result"); a resource update reaches only
/// clients that opened a `subscriptions/listen` stream ("Subscriptions"),
/// and reaches the client, not its model. So the items ride on the agent's
/// next complete tool result on this server: a text block per item with
/// the audience `assistant` ("Resources", "Annotations"), whose header
/// names the App's source, tool and View and says the text is the App's
/// data, never the host's instructions; and, for programs, the same items
/// as JSON under `_meta["io.portcullis/appDeliveries"]`. An answer that is
/// not complete (an input request, a task) or a protocol error carries
/// nothing: the items wait for the next one. Delivery is at most once: an
/// answer lost on the way after it was sent is not sent again.
pub(crate) async fn deliver(
    app: &Shared,
    principal: Option<&Principal>,
    answer: Result<rmcp::model::CallToolResponse, rmcp::ErrorData>,
) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
    let (Some(p), Ok(rmcp::model::CallToolResponse::Complete(result))) = (principal, &answer)
    else {
        return answer;
    };
    if !app.apps.is_on() {
        return answer;
    }
    let (subject, lineage) = (
        p.subject.clone(),
        LineageKey::of(app.site().as_str(), &p.subject, &p.client_id),
    );
    let who = subject.clone();
    let waiting = app
        .blocking(move |app| app.engine().has_deliveries(app.site(), &who, &lineage))
        .await;
    if !matches!(waiting, Ok(Ok(true))) {
        return answer;
    }
    let taken = app
        .write(move |app, txn| {
            app.engine()
                .take_deliveries(txn, app.site(), &subject, &lineage)
        })
        .await;
    let items = match taken {
        Ok(Ok(items)) if !items.is_empty() => items,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "MCP Apps: the agent's deliveries not taken");
            return answer;
        }
        _ => return answer,
    };
    let Ok(mut body) = serde_json::to_value(result) else {
        return answer;
    };
    let Some(out) = body.as_object_mut() else {
        return answer;
    };
    let blocks: Vec<Value> = items
        .iter()
        .map(|d| json!({"type": "text", "text": d.to_text(), "annotations": {"audience": ["assistant"]}}))
        .collect();
    if let Some(Value::Array(content)) = out.get_mut("content") {
        content.extend(blocks);
    } else {
        out.insert("content".into(), Value::Array(blocks));
    }
    let meta = out
        .entry("_meta")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    if let Some(meta) = meta.as_object_mut() {
        meta.insert(
            "io.portcullis/appDeliveries".into(),
            Value::Array(
                items
                    .iter()
                    .map(portcullis_core::apps::Delivered::to_json)
                    .collect(),
            ),
        );
    }
    tracing::debug!(items = items.len(), "MCP Apps: delivered to the agent");
    match serde_json::from_value::<CallToolResult>(body) {
        Ok(r) => Ok(r.into()),
        Err(e) => {
            tracing::warn!(error = %e, "MCP Apps: deliveries could not be added to the result");
            answer
        }
    }
}

/// `POST /agents/apps/context {selections: [{view, version}]}`: the user
/// sends the context they inspected and selected to the agents that
/// opened those Views ([`portcullis_core::Engine::send_context`]):
/// exactly the selected versions, at most 8 Views, each value at most 64
/// KiB, all or nothing. A replaced, discarded or missing selection is
/// refused with its stable reason and sends nothing.
pub(crate) async fn send_context(
    State(app): State<Shared>,
    headers: HeaderMap,
    raw: Bytes,
) -> Handled {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Picked {
        view: String,
        version: u64,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Send {
        selections: Vec<Picked>,
    }
    let (session, body): (_, Send) = post_body(&app, &headers, &raw)?;
    if body.selections.is_empty()
        || body.selections.len() > portcullis_core::apps::MAX_SUBMISSION_VIEWS
    {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "INVALID_PARAMS",
            "select 1 to 8 Views' context",
        ));
    }
    let mut selections = Vec::with_capacity(body.selections.len());
    for p in body.selections {
        let Ok(view) = ViewId::new(&p.view) else {
            return Err(Refusal::NoView.response());
        };
        selections.push(portcullis_core::apps::Selection {
            view,
            version: p.version,
        });
    }
    let subject = session.subject.clone();
    let sent = app
        .write(move |app, txn| {
            app.engine()
                .send_context(txn, app.site(), &subject, &selections)
        })
        .await;
    Ok(match sent? {
        Ok(n) => {
            app.bump(&session.subject);
            tracing::debug!(values = n, "MCP Apps: context sent to the agent");
            Json(json!({"ok": true, "sent": n})).into_response()
        }
        Err(AppViewError::Store(e)) => super::respond::store(&e),
        Err(e) => {
            // A typed refusal with its stable reason (`context_replaced`,
            // `context_discarded`, `context_missing`, …); nothing was sent.
            use portcullis_core::WireError as _;
            (
                StatusCode::CONFLICT,
                Json(json!({"ok": false, "error": {
                    "code": e.code().as_str(),
                    "reason": e.reason(),
                    "message": e.to_string(),
                }})),
            )
                .into_response()
        }
    })
}

/// `POST /agents/apps/check {view, id}`: "Check result" for an App
/// operation whose answer the page lost (the page reloaded, the connection
/// was cut off): its receipt, the execution ledger's record of its request
/// ([`portcullis_core::Engine::request_status`],
/// [`portcullis_core::apps::Receipt::from_answer`]), reconciled by
/// [`portcullis_core::apps::reconcile`]. It never runs the operation
/// again. A final answer (completed, failed, unknown) ends the operation in
/// the View; "still pending" leaves it to be checked again.
pub(crate) async fn check(State(app): State<Shared>, headers: HeaderMap, raw: Bytes) -> Handled {
    use portcullis_core::apps::{Receipt, Reconciled, UnknownWhy, reconcile};
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Check {
        view: String,
        id: Value,
        /// The operation's ledger request, as the View listed it: read when
        /// the operation has left the View meanwhile (it finished while the
        /// page was away). Only ever read under the View's own grant.
        #[serde(default)]
        request: Option<String>,
    }
    let (session, c): (_, Check) = post_body(&app, &headers, &raw)?;
    let Some(rpc) = rpc_id(&c.id) else {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "INVALID_PARAMS",
            "bad request id",
        ));
    };
    let (subject, view) = (session.subject.as_str(), c.view.as_str());
    let found = app.with_view(subject, view, |v| {
        v.calls.get(&rpc).map(|c| {
            (
                c.request,
                c.op,
                matches!(c.target, SourceCall::Resource { .. }),
            )
        })
    });
    let (request, op, read) = match found {
        Ok(Some((request, op, read))) => (request, Some(op), read),
        // It finished while the page was away and left the View: its
        // receipt is still in the ledger, under the grant the View reads it
        // with (a request of another grant is not found there).
        Ok(None) => match c.request.as_deref().and_then(|r| RequestId::parse(r).ok()) {
            Some(request) => (request, None, false),
            None => {
                return Err(error(
                    StatusCode::NOT_FOUND,
                    "ACTION_NOT_FOUND",
                    "no such App operation in flight",
                ));
            }
        },
        Err(e) => return Err(e.response()),
    };
    // The receipt is read under the View's grant as it is now: a revoked
    // grant reads no stored result.
    let principal = match view_now(&app, subject, view).await {
        Ok((p, _)) => p,
        Err(e) => return Err(e.response()),
    };
    let answer = app
        .blocking(move |app| {
            app.engine()
                .request_status(&principal, &request, clock::now())
        })
        .await;
    let answer = answer?;
    let reconciled = if read {
        // A read never reaches the ledger: it has no receipt, and it had no
        // effect to reconcile.
        Reconciled::Unknown(UnknownWhy::NoReceipt)
    } else {
        let Some(receipt) = Receipt::from_answer(&answer) else {
            // Not a receipt (the grant is not live, the store failed): that
            // error is the answer; no outcome is guessed from it.
            return Err(match answer {
                Err(portcullis_core::ledger::OutcomesError::Store(e)) => super::respond::store(&e),
                Err(e) => {
                    use portcullis_core::WireError as _;
                    error(
                        StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::FORBIDDEN),
                        e.code().as_str(),
                        &e.to_string(),
                    )
                }
                Ok(_) => super::respond::internal("a receipt was not read"),
            });
        };
        reconcile(receipt)
    };
    let (outcome, detail) = receipt_shown(&reconciled);
    if let Some(op) = op.filter(|_| outcome != "pending") {
        // Settled: the operation leaves the View (never run again).
        let _ = app.with_view(subject, view, |v| {
            if v.calls.get(&rpc).is_some_and(|c| c.op == op) {
                if v.view_mut().finish(op).is_err() {
                    let _ = v.view_mut().decline(op);
                }
                v.calls.remove(&rpc);
            }
        });
        app.bump(subject);
    }
    Ok(Json(json!({"ok": true, "outcome": outcome, "detail": detail})).into_response())
}

/// What the page shows of a reconciled receipt: `completed` (the result),
/// `failed` (the recorded failure), `pending`, or `unknown` (and why).
fn receipt_shown(reconciled: &portcullis_core::apps::Reconciled) -> (&'static str, Value) {
    use portcullis_core::apps::{FailedHow, Reconciled, UnknownWhy};
    match reconciled {
        Reconciled::Completed(text) => (
            "completed",
            serde_json::from_str::<Value>(text).unwrap_or_else(|_| Value::String(text.clone())),
        ),
        Reconciled::Failed(FailedHow::Business(e)) => {
            ("failed", json!({"code": e.code, "message": e.message}))
        }
        Reconciled::Failed(FailedHow::Protocol(f)) => {
            ("failed", json!({"code": f.code().as_str()}))
        }
        Reconciled::StillPending => ("pending", Value::Null),
        Reconciled::Unknown(why) => (
            "unknown",
            json!(match why {
                UnknownWhy::NoReceipt => "no_receipt",
                UnknownWhy::Expired => "expired",
                UnknownWhy::CutOff => "cut_off",
                _ => "unknown",
            }),
        ),
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
    let grant = app.with_view(subject, id, |v| v.view().origin().grant)?;
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
    if owner.id() != source {
        return None;
    }
    let (s, downstream) = app.gateway.map().decode(&ui_resource(&tool)?).ok()?;
    (&s == source).then_some(downstream)
}

/// `POST /agents/apps/activate {view}`: "Activate interactions", against
/// the View's grant as it is now and its tool's current App.
pub(crate) async fn activate(State(app): State<Shared>, headers: HeaderMap, raw: Bytes) -> Handled {
    let (session, r): (_, ViewRef) = post_body(&app, &headers, &raw)?;
    let authority = match view_now(&app, &session.subject, &r.view).await {
        Ok((_, a)) => a,
        Err(Refusal::GrantEnded) => {
            let _ = app.with_view(&session.subject, &r.view, |v| v.view_mut().deactivate());
            return Err(Refusal::GrantEnded.response());
        }
        Err(e) => return Err(e.response()),
    };
    let done = app.with_view(&session.subject, &r.view, |v| {
        let current = current_app_uri(&app, v.view().source(), &v.tool.name);
        let activated = v.view_mut().activate(&authority, current.as_deref());
        // Approvals asked under an earlier activation do not carry over.
        activated.map(|withdrawn| (v.drop_withdrawn(&withdrawn), v.view().origin().grant))
    });
    Ok(match done {
        Ok(Ok((waiting, grant))) => {
            if !waiting.is_empty() {
                deny_waiting(&app, &session.subject, grant, &waiting).await;
            }
            tracing::debug!("MCP Apps: View activated");
            Json(json!({"ok": true})).into_response()
        }
        Ok(Err(e)) => error(StatusCode::FORBIDDEN, "PERMISSION_DENIED", &e.to_string()),
        Err(e) => e.response(),
    })
}

/// `POST /agents/apps/close {view}`: its controls, open proposals and
/// pending confirmations end (calls already dispatched may still finish).
/// An App write that was waiting for the user's approval is denied in the
/// ledger ([`deny_waiting`]), so its card leaves the approvals list and the
/// action never runs: nobody is left to approve it for.
pub(crate) async fn close(State(app): State<Shared>, headers: HeaderMap, raw: Bytes) -> Handled {
    let (session, r): (_, ViewRef) = post_body(&app, &headers, &raw)?;
    let closed = app.with_view(&session.subject, &r.view, |v| {
        let withdrawn = v.view_mut().close();
        for p in &withdrawn.proposals {
            v.proposals.remove(p);
        }
        let waiting = v.drop_withdrawn(&withdrawn);
        (withdrawn.running, v.view().origin().grant, waiting)
    });
    Ok(match closed {
        Ok((running, grant, waiting)) => {
            if !waiting.is_empty() {
                deny_waiting(&app, &session.subject, grant, &waiting).await;
            }
            app.bump(&session.subject);
            tracing::debug!(running, denied = waiting.len(), "MCP Apps: View closed");
            Json(json!({"ok": true, "running": running})).into_response()
        }
        Err(e) => e.response(),
    })
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
    let who = subject.to_owned();
    let ids = app
        .blocking(move |app| app.views_of(&who, &grant))
        .await
        .unwrap_or_default();
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
        let _ = app.with_view(subject, &id, |v| {
            if let Err(withdrawn) = v.view_mut().check(&authority) {
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
                app.engine().decide_approval(
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
pub(crate) async fn resource(State(app): State<Shared>, headers: HeaderMap, raw: Bytes) -> Handled {
    let (session, r): (_, ViewRef) = post_body(&app, &headers, &raw)?;
    let (principal, authority) = match view_now(&app, &session.subject, &r.view).await {
        Ok(v) => v,
        Err(e) => return Err(e.response()),
    };
    let Ok((uri, source)) = app.with_view(&session.subject, &r.view, |v| {
        (
            v.view().origin().resource_uri.clone(),
            v.view().source().clone(),
        )
    }) else {
        return Err(Refusal::NoView.response());
    };
    if !authority.sources.includes(&source) {
        return Err(error(
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            "this connection was not given the App's source",
        ));
    }
    let read = app
        .gateway
        .read(
            &app.portcullis,
            Some(&principal),
            &ReadResourceRequestParams::new(uri),
            portcullis_gateway::Round::default(),
        )
        .await;
    let result = match read {
        Ok(rmcp::model::ReadResourceResponse::Complete(r)) => {
            serde_json::to_value(r).unwrap_or(Value::Null)
        }
        Ok(_) => {
            return Err(error(
                StatusCode::BAD_GATEWAY,
                "ACTION_UNAVAILABLE",
                "the source asks for input before it gives the App",
            ));
        }
        Err(e) => {
            tracing::warn!(error = %e.message, "MCP Apps: reading the App failed");
            return Err(error(
                StatusCode::BAD_GATEWAY,
                "SOURCE_UNAVAILABLE",
                &e.message,
            ));
        }
    };
    let Some((html, (connect, resource))) =
        app_html(&result, &[&app.browser.public_url, &app.apps.sandbox])
    else {
        tracing::warn!("MCP Apps: the App's resource holds no text/html;profile=mcp-app");
        return Err(error(
            StatusCode::BAD_GATEWAY,
            "EXPECTATION_FAILED",
            "the resource holds no text/html;profile=mcp-app content",
        ));
    };
    tracing::debug!(
        connect = connect.len(),
        resource = resource.len(),
        "MCP Apps: App read; its CSP origins kept"
    );
    Ok(Json(json!({
        "ok": true,
        "html": html,
        "csp": {"connectDomains": connect, "resourceDomains": resource},
    }))
    .into_response())
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
        let mut t = Tool::new("show", "", Arc::new(JsonObject::new()));
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

    /// "Check result" shows what the receipt says, and has no "run again".
    #[test]
    fn a_receipt_is_shown_as_it_is_reconciled() {
        use portcullis_core::apps::{Reconciled, UnknownWhy};
        assert_eq!(
            receipt_shown(&Reconciled::Completed(r#"{"count":4}"#.into())),
            ("completed", json!({"count": 4}))
        );
        assert_eq!(
            receipt_shown(&Reconciled::StillPending),
            ("pending", Value::Null)
        );
        assert_eq!(
            receipt_shown(&Reconciled::Unknown(UnknownWhy::CutOff)),
            ("unknown", json!("cut_off"))
        );
        assert_eq!(
            receipt_shown(&Reconciled::Unknown(UnknownWhy::NoReceipt)),
            ("unknown", json!("no_receipt"))
        );
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
    use portcullis_core::gateway::Gateway;

    fn stored(calls: Vec<StoredCall>) -> StoredView {
        let gateway = Gateway::default();
        let source = SourceId::new("counter").unwrap();
        let grant = GrantId::from_bytes([1; 16]);
        let origin = RequestId::from_bytes([7; 16]);
        let view = View::open(
            ViewOrigin {
                id: view_id_of(&grant, &origin).unwrap(),
                lineage: LineageKey::of("site", "ann", "client"),
                grant,
                source: source.clone(),
                tool: "show".into(),
                resource_uri: gateway.encode(&source, "ui://counter/app.html").unwrap(),
            },
            &gateway,
        )
        .unwrap();
        let mut tool = Tool::new("show", "", Arc::new(JsonObject::new()));
        tool.meta = serde_json::from_value(
            json!({"ui": {"resourceUri": "ui://portcullis/counter/counter/app.html"}}),
        )
        .unwrap();
        let host = HostData {
            client: json!({"id": "client", "name": "Agent"}),
            tool,
            arguments: JsonObject::new(),
            result: json!({"content": []}),
            origin: origin.to_string(),
            calls,
            proposals: vec![(3, json!("r3"))],
        };
        StoredView::new(
            portcullis_core::site::SiteId::parse("site").unwrap(),
            "ann".into(),
            view,
            serde_json::to_string(&host).unwrap(),
            portcullis_core::time::Timestamp::from_secs(1),
        )
    }

    /// What the host keeps of a View (its calls in flight, their messages,
    /// its proposals) reads back as written: a reload or another instance
    /// resumes the same operation under the same ledger request.
    #[test]
    fn the_host_data_of_a_view_reads_back_as_written() {
        let request = RequestId::from_bytes([9; 16]);
        let calls = vec![
            StoredCall {
                id: json!(4),
                op: 0,
                request: request.to_string(),
                text: r#"{"jsonrpc":"2.0","id":4,"method":"tools/call"}"#.into(),
                asked: true,
                tool: Some("increment".into()),
                arguments: Some(r#"{"by":2}"#.into()),
                uri: None,
            },
            StoredCall {
                id: json!("read-1"),
                op: 1,
                request: RequestId::from_bytes([8; 16]).to_string(),
                text: "{}".into(),
                asked: false,
                tool: None,
                arguments: None,
                uri: Some("ui://counter/data".into()),
            },
        ];
        let entry = Entry::read(stored(calls)).unwrap();
        let call = &entry.calls[&RpcId::Number(4)];
        assert_eq!(call.request, request);
        assert!(call.asked);
        assert_eq!(call.message, Fingerprint::of(call.text.as_bytes()));
        assert!(
            matches!(&call.target, SourceCall::Tool { name, arguments, .. }
            if name == "increment" && arguments == r#"{"by":2}"#)
        );
        assert!(
            matches!(&entry.calls[&RpcId::String("read-1".into())].target,
            SourceCall::Resource { uri, .. } if uri == "ui://counter/data")
        );
        assert_eq!(entry.proposals[&ProposalId(3)], RpcId::String("r3".into()));
        let mut copy = entry.stored.clone();
        copy.host = entry.host();
        let again = Entry::read(copy).unwrap();
        assert_eq!(again.host(), entry.host());
        assert_eq!(again.calls.len(), 2);
        // A host record that is not what this host wrote reads as no View.
        let mut bad = stored(Vec::new());
        bad.host = "{".into();
        assert!(Entry::read(bad).is_none());
    }

    /// The same agent call leaves the same View id (so a repeat leaves no
    /// second View); another call or grant, another id.
    #[test]
    fn a_view_id_is_its_call_s() {
        let (g1, g2) = (GrantId::from_bytes([1; 16]), GrantId::from_bytes([2; 16]));
        let (r1, r2) = (
            RequestId::from_bytes([1; 16]),
            RequestId::from_bytes([2; 16]),
        );
        assert_eq!(view_id_of(&g1, &r1), view_id_of(&g1, &r1));
        assert_ne!(view_id_of(&g1, &r1), view_id_of(&g1, &r2));
        assert_ne!(view_id_of(&g1, &r1), view_id_of(&g2, &r1));
        assert_eq!(view_id_of(&g1, &r1).unwrap().as_str().len(), 22);
    }
}
