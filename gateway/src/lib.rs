//! # portcullis-gateway
//!
//! The resource gateway for a Portcullis host: downstream MCP servers
//! ("sources") whose tools and resources the host's authorized MCP
//! endpoint exposes to its agents, under the core's URI mapping
//! ([`portcullis_core::gateway`]), every tool call through the execution
//! ledger of [`portcullis_axum`] (approvals, `requestId` idempotency).
//!
//! A host configures its sources ([`Config`], [`SourceSpec`]), starts the
//! [`Gateway`] once, and calls it from its MCP handler:
//!
//! | MCP method | the gateway's part |
//! |---|---|
//! | `tools/list` | [`Gateway::granted_tools`] of [`Gateway::reach`], after the host's own tools |
//! | `tools/call` | [`Gateway::find`], then [`Gateway::call`] (a retry's state: [`Gateway::unwrap_state`]) |
//! | `resources/list` | [`Gateway::resources`] |
//! | `resources/templates/list` | [`Gateway::templates`] |
//! | `resources/read` | [`Gateway::read`] |
//!
//! ```no_run
//! # async fn mount<S: portcullis_axum::HostStore>(
//! #     portcullis: portcullis_axum::Portcullis<S>,
//! #     principal: portcullis_core::engine::Principal,
//! # ) -> Result<(), Box<dyn std::error::Error>> {
//! use portcullis_gateway::{Config, Gateway, Round, SourceSpec, ToolCall};
//!
//! let config = Config {
//!     sources: vec![SourceSpec::parse("docs=http://127.0.0.1:3001/mcp")?],
//!     public_url: "https://notes.example".into(),
//!     ..Config::default()
//! };
//! // The host's own tool names: no source may take one.
//! let gateway = Gateway::start(&config, vec!["execute".into()]).await?;
//!
//! // tools/list: the host's tools, then the sources' the grant reaches.
//! let granted = gateway.reach(&portcullis, Some(&principal)).await?;
//! let tools = gateway.granted_tools(&granted);
//!
//! // tools/call of a downstream tool, under a fresh ledger request.
//! if let Some(tool) = gateway.find("search_docs") {
//!     let reply = gateway
//!         .call(&portcullis, ToolCall {
//!             principal,
//!             tool,
//!             request_id: portcullis_axum::RequestId::from_bytes(rand::random()),
//!             arguments: serde_json::Map::new(),
//!             round: Round::default(),
//!             wait: std::time::Duration::ZERO,
//!         })
//!         .await;
//!     let _ = reply.result;
//! }
//! # let _ = tools; Ok(()) }
//! ```
//!
//! ## How it runs
//!
//! The gateway owns the sources: one rmcp client connection each
//! (Streamable HTTP, or a child process over stdio), a supervisor task per
//! source that connects, lists its tools, resources and templates into the
//! gateway's cache, watches the connection and reconnects with backoff
//! (0.5 s doubling to 30 s), and the owners of tool names. A source that is down makes
//! only its own tools and resources unavailable: calls to them answer
//! `source_unavailable`; the other sources are unaffected.
//!
//! * **Tools** ([`Gateway::call`]): the downstream tools on the endpoint
//!   and their calls through the execution ledger (approvals, `requestId`
//!   idempotency). A call is a ledger request of one action whose kind is
//!   `<source>/<tool>` ([`source_of_kind`]) and whose effect comes from
//!   the tool's annotations ([`effect`]).
//! * **Resources** ([`Gateway::resources`], [`Gateway::templates`],
//!   [`Gateway::read`]): the listings from the cache, reads forwarded, URIs
//!   under the mapping.
//! * **Bounds** ([`Config`]): timeouts, the answer size cap (a stdio
//!   source's lines capped while read), the concurrency cap, the listing
//!   caps and how often lists are read.
//! * **Input** ([`Round`]): a source's own requests for input (multi
//!   round-trip requests), passed to the agent and back, the source's
//!   state sealed inside the gateway's ([`Gateway::unwrap_state`]).
//!
//! **Each source in its own revision.** A connection opens with
//! `server/discover` at 2026-07-28, the revision without a handshake
//! (its "Discovery" page: servers must implement it, and a client that
//! also speaks older revisions should probe with it first; its stdio page
//! has the fallback rules). A source that answers it speaks 2026-07-28: each
//! request then carries its own protocol version, client identity and
//! capabilities in `_meta`. A source that answers with any other error, or
//! not within rmcp's ten seconds, is an older one, and the same connection
//! falls back to `initialize` (2025-11-25); one that answers that it is
//! modern but not at this version is not asked to `initialize`. A source at
//! 2025-11-25 or earlier declares no client capabilities, as before: a
//! gateway with no stream to its agents cannot answer a server's mid-call
//! requests.
//!
//! **Liveness in the source's revision.** 2026-07-28 has no `ping`, so a
//! source at that revision is never pinged: a stdio source is alive while
//! its process runs (its exit ends the connection at once, its output
//! closing within five seconds), and an HTTP source is asked
//! `server/discover`, which the revision keeps, every five seconds (the
//! calls themselves also mark it down when they fail at the transport). A
//! source at an earlier revision is pinged every five seconds, as that
//! revision provides.
//!
//! **Listings are cached.** A source's lists are read when it connects,
//! when it says they changed (`notifications/tools/list_changed`,
//! `notifications/resources/*`; taken together within
//! two seconds; a source at 2026-07-28 says so only on the
//! `subscriptions/listen` stream the gateway keeps open to it) and
//! otherwise every minute; page by page, within the listing caps (1024
//! tools, 4096 resources, 1024 templates, 4 MiB of each, 256 pages). `tools/list` and
//! `resources/list` are answered from that cache, never by asking every
//! source again. An entry whose URI cannot be mapped (too long, a dot
//! segment, …) is left out of its own source's listing, with a log line.
//! A source that sends more than 256 notifications a second is
//! disconnected and reconnected
//! with backoff. The endpoint is stateless (no stream to push on), so
//! clients see changes on their next listing.
//!
//! **Tool names are never changed, and never move.** At start the gateway
//! waits for every source's first connection and listing (each within its
//! connect and call timeouts; one that fails is retried in the background,
//! each attempt given longer to connect, up to eight times
//! [`Config::connect_timeout`])
//! and refuses to start when two sources, or a source and a built-in tool,
//! share a name. From then on a name belongs to the first source that
//! offered it for the life of the process: a name that a later listing
//! (a source that connected late, or changed its list) claims for another
//! source is refused and logged, and a name its owner stops listing is not
//! handed to anyone else. A source owns at most 2048 names, and for five
//! minutes after the start the names others list for the first time wait
//! for the sources that have not listed yet.
#![forbid(unsafe_code)]

mod bounds;
mod config;
mod input;
mod kind;
mod reach;
mod resources;
mod stdio;
mod tools;

pub use config::{Config, ConfigError, SourceSpec, Target};
pub use input::{Round, Unwrap};
pub use kind::source_of_kind;
pub use tools::{Reply, ToolCall, digest, effect};

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use portcullis_axum::{HostStore, Portcullis};
use portcullis_core::engine::Principal;
use portcullis_core::gateway::{Gateway as UriMap, SourceId};
use portcullis_core::ledger::RequestId;
use portcullis_core::ledger::resume::CallDigest;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ClientRequest, DiscoverRequest, DiscoverRequestParams,
    Implementation, PaginatedRequestParams, PingRequest, ProtocolVersion, Resource,
    ResourceTemplate, ServerResult, SubscriptionFilter, Tool,
};
use rmcp::service::{NotificationContext, Peer, RunningService, ServiceError};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransport, StreamableHttpClientTransportConfig,
};
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt as _, RoleClient};
use tokio::sync::{Notify, Semaphore, watch};

use bounds::Bounds;

/// How often a connected source's liveness is checked (see the module
/// docs: a `ping`, a `server/discover`, or only its process).
const HEALTH_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// How a connection opens: `server/discover` at 2026-07-28 first, and
/// `initialize` at 2025-11-25 for a source that does not know it.
fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
    }
}

/// Whether the source behind `peer` speaks a revision without the
/// `initialize` handshake (2026-07-28 or later): its requests carry their
/// own `_meta`, and it may answer a multi round-trip request.
pub(crate) fn is_modern(peer: &Peer<RoleClient>) -> bool {
    peer.peer_info()
        .is_some_and(|info| !info.protocol_version.has_initialize())
}

/// The revision the source behind `peer` speaks, for log lines.
fn revision(peer: &Peer<RoleClient>) -> String {
    peer.peer_info()
        .map_or_else(|| "unknown".to_owned(), |i| i.protocol_version.to_string())
}

/// What a source last listed: mapped for the gateway, within the caps.
#[derive(Default)]
struct Listed {
    /// Its tools, descriptors mapped (every one it listed, its names'
    /// owners aside: see [`Names`]).
    pub(crate) tools: Vec<Tool>,
    /// Its resources, URIs mapped.
    pub(crate) resources: Vec<Resource>,
    /// Its resource templates, URI templates mapped.
    pub(crate) templates: Vec<ResourceTemplate>,
    /// Its resources' downstream URIs (for rewriting text bodies).
    pub(crate) uris: Vec<String>,
}

/// One source at run time: what [`Gateway::find`] names as a tool's
/// owner.
pub struct Source {
    /// Its configuration.
    spec: SourceSpec,
    /// Its place in the configuration (what [`Names`] records).
    index: usize,
    /// The live connection's peer, `None` while down.
    peer: watch::Sender<Option<Peer<RoleClient>>>,
    /// What it last listed (replaced whole by each listing).
    listed: Mutex<Arc<Listed>>,
    /// Wakes the supervisor: a call failed, or the source said its lists
    /// changed.
    poke: Notify,
    /// Set by a poke that asks for a reconnection (not just a re-list).
    broken: std::sync::atomic::AtomicBool,
    /// Notifications in the current second: its start and the count.
    noted: Mutex<(Instant, u32)>,
    /// Calls in flight.
    slots: Semaphore,
}

/// A source's connection could not be used.
#[derive(Debug)]
struct Unavailable(SourceId);

impl Unavailable {
    /// The message a client sees.
    fn message(&self) -> String {
        format!(
            "source {} is unavailable (the gateway is reconnecting to it): call again later",
            self.0
        )
    }
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Source")
            .field("id", &self.spec.id)
            .field("up", &self.is_up())
            .finish_non_exhaustive()
    }
}

impl Source {
    /// Its id (the name in gateway URIs, action kinds and messages).
    #[must_use]
    pub fn id(&self) -> &SourceId {
        &self.spec.id
    }

    fn new(spec: SourceSpec, index: usize, bounds: &Bounds) -> Self {
        Self {
            spec,
            index,
            peer: watch::Sender::new(None),
            listed: Mutex::new(Arc::default()),
            poke: Notify::new(),
            broken: std::sync::atomic::AtomicBool::new(false),
            noted: Mutex::new((Instant::now(), 0)),
            slots: Semaphore::new(bounds.max_concurrent),
        }
    }

    /// The live peer, or [`Unavailable`].
    fn peer(&self) -> Result<Peer<RoleClient>, Unavailable> {
        self.peer
            .borrow()
            .clone()
            .ok_or_else(|| Unavailable(self.spec.id.clone()))
    }

    /// Whether it is connected now.
    fn is_up(&self) -> bool {
        self.peer.borrow().is_some()
    }

    /// A call to the source failed at the transport: reconnect.
    fn failed(&self) {
        self.broken
            .store(true, std::sync::atomic::Ordering::Release);
        self.poke.notify_one();
    }

    /// What it last listed.
    fn listed(&self) -> Arc<Listed> {
        Arc::clone(&self.listed.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Counts a notification; past [`bounds::MAX_NOTIFICATIONS_PER_SEC`]
    /// in one second the source is flooding, and its connection is dropped
    /// (the supervisor reconnects with backoff). Whether it was within the
    /// bound.
    fn note(&self) -> bool {
        let mut noted = self.noted.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if now.duration_since(noted.0) >= std::time::Duration::from_secs(1) {
            *noted = (now, 0);
        }
        noted.1 = noted.1.saturating_add(1);
        if noted.1 == bounds::MAX_NOTIFICATIONS_PER_SEC + 1 {
            tracing::warn!(
                source = %self.spec.id,
                "gateway: the source floods notifications; reconnecting to it"
            );
            self.failed();
        }
        noted.1 <= bounds::MAX_NOTIFICATIONS_PER_SEC
    }

    /// The source said its lists changed: counted against the flood bound,
    /// and within it the supervisor reads them again (debounced).
    fn changed(&self) {
        if self.note() {
            self.poke.notify_one();
        }
    }

    /// Waits for a call slot (part of the call's time budget).
    async fn slot(&self, bounds: &Bounds) -> Result<tokio::sync::SemaphorePermit<'_>, Unavailable> {
        match bounds::within(bounds.call, self.slots.acquire()).await {
            Ok(Ok(p)) => Ok(p),
            _ => Err(Unavailable(self.spec.id.clone())),
        }
    }
}

/// Who owns a tool name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// One of the endpoint's own tools.
    BuiltIn,
    /// The source at this index.
    Source(usize),
}

/// The owners of tool names: fixed for the life of the process. Until the
/// gateway has started, listings only fill the sources' caches; at the
/// start the names of every source then connected are claimed in
/// configuration order, and a collision refuses the start. From then on each
/// listing claims its new names, and a name another owner has is refused
/// (and logged), never moved. Two bounds keep one source from taking what
/// is not its own:
///
/// * **A cap per source.** A source owns at most
///   [`bounds::MAX_TOOL_NAMES`] names over the life of the process (a name
///   stays its owner's when it stops listing it, so a source that keeps
///   listing new names would otherwise grow this table without end); its
///   new names past the cap are refused and logged. Each source's cap is
///   its own: no source can use up another's.
/// * **A reservation for sources that have not listed yet.** For
///   [`bounds::RESERVE_NAMES_FOR`] after the start, while a configured
///   source has not made its first listing (it was not ready at the start),
///   the names other sources add to their lists are held back (not
///   offered, logged), not claimed: a source that connects late is not
///   starved of its own names by one that listed them first in its
///   absence. A source's first listing (at the start or late) names its
///   own tools and is never held. Held names are claimed, in configuration
///   order and only where still free, once every source has listed or the
///   reservation ends; a source's held names are those of its latest
///   listing.
struct Names {
    inner: Mutex<NamesInner>,
    /// The sources' ids, by index (for messages).
    ids: Vec<SourceId>,
    /// How long after the start new names wait for the sources that have
    /// not listed yet.
    reserve_for: std::time::Duration,
}

struct NamesInner {
    owners: HashMap<String, Owner>,
    started: bool,
    /// Per source: how many names it owns.
    owned: Vec<usize>,
    /// Per source: whether one of its listings was seen.
    heard: Vec<bool>,
    /// Per source: the new names of its latest listing held back during
    /// the reservation (at most one listing's worth).
    held: Vec<Vec<String>>,
    /// When the reservation ends (set at the start).
    reserve_until: Instant,
}

impl Names {
    fn new(reserved: &[String], ids: Vec<SourceId>, reserve_for: std::time::Duration) -> Self {
        let n = ids.len();
        Self {
            inner: Mutex::new(NamesInner {
                owners: reserved
                    .iter()
                    .map(|n| (n.clone(), Owner::BuiltIn))
                    .collect(),
                started: false,
                owned: vec![0; n],
                heard: vec![false; n],
                held: vec![Vec::new(); n],
                reserve_until: Instant::now(),
            }),
            ids,
            reserve_for,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, NamesInner> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        self.settle(&mut inner);
        inner
    }

    fn describe(&self, owner: Owner) -> String {
        match owner {
            Owner::BuiltIn => "the built-in tools".to_owned(),
            Owner::Source(i) => format!("source {}", self.ids[i]),
        }
    }

    /// Whether names new after the start are held back now: the
    /// reservation has not ended and a source has not listed yet.
    fn reserving(inner: &NamesInner) -> bool {
        inner.started && inner.heard.contains(&false) && Instant::now() < inner.reserve_until
    }

    /// Once the reservation is over, claims the names held back, in
    /// configuration order.
    fn settle(&self, inner: &mut NamesInner) {
        if inner.held.iter().all(Vec::is_empty) || Self::reserving(inner) {
            return;
        }
        for index in 0..inner.held.len() {
            let held = std::mem::take(&mut inner.held[index]);
            let _ = self.claim(inner, index, held.iter().map(String::as_str), false, false);
        }
    }

    /// Notes a listing of source `index` and, once started, claims the
    /// names of its `tools`, logging each that is refused or held back.
    fn claim_later(&self, index: usize, tools: &[Tool]) {
        let mut inner = self.lock();
        let first = inner
            .heard
            .get_mut(index)
            .is_some_and(|heard| !std::mem::replace(heard, true));
        if inner.started {
            // A source's first listing names its own tools: never held.
            let holding = !first && Self::reserving(&inner);
            let names = tools.iter().map(|t| t.name.as_ref());
            let _ = self.claim(&mut inner, index, names, false, holding);
            self.settle(&mut inner);
        }
    }

    /// Claims `names` for source `index`: the first name another owner has
    /// is an error at the start (`strict`); later, each such name is
    /// refused and logged, and with `holding` (during the reservation) new
    /// names are held back instead of claimed. New names past the source's
    /// cap are refused.
    fn claim<'n>(
        &self,
        inner: &mut NamesInner,
        index: usize,
        names: impl Iterator<Item = &'n str>,
        strict: bool,
        holding: bool,
    ) -> Result<(), StartError> {
        let (mut held, mut over) = (Vec::new(), 0usize);
        for name in names {
            match inner.owners.get(name).copied() {
                Some(owner) if owner == Owner::Source(index) => {}
                Some(owner) => {
                    let (first, here) = (self.describe(owner), self.describe(Owner::Source(index)));
                    if strict {
                        return Err(StartError::NameClash(Box::new(NameClash {
                            tool: name.to_owned(),
                            first: match owner {
                                Owner::BuiltIn => None,
                                Owner::Source(i) => Some(self.ids[i].clone()),
                            },
                            second: self.ids[index].clone(),
                        })));
                    }
                    tracing::warn!(
                        tool = name,
                        owner = %first,
                        refused = %here,
                        "gateway: a tool name that another owner has is refused (names never move)"
                    );
                }
                None if holding => held.push(name.to_owned()),
                None if inner.owned[index] >= bounds::MAX_TOOL_NAMES => over += 1,
                None => {
                    inner.owners.insert(name.to_owned(), Owner::Source(index));
                    inner.owned[index] += 1;
                }
            }
        }
        if over > 0 {
            tracing::warn!(
                source = %self.ids[index],
                refused = over,
                cap = bounds::MAX_TOOL_NAMES,
                "gateway: the source has claimed as many tool names as it may; its new names \
                 are refused"
            );
        }
        if holding {
            if !held.is_empty() {
                let waiting: Vec<&str> = inner
                    .heard
                    .iter()
                    .zip(&self.ids)
                    .filter(|(heard, _)| !**heard)
                    .map(|(_, id)| id.as_str())
                    .collect();
                tracing::info!(
                    source = %self.ids[index],
                    held = held.len(),
                    waiting = waiting.join(","),
                    "gateway: new tool names are held back until the sources not yet listed have \
                     listed (or the reservation ends)"
                );
            }
            inner.held[index] = held;
        }
        Ok(())
    }

    /// The start: claims every source's names in configuration order;
    /// refuses a name two owners share. The reservation starts now.
    fn start(&self, sources: &[Arc<Source>]) -> Result<(), StartError> {
        let mut inner = self.lock();
        for source in sources {
            let listed = source.listed();
            let names = listed.tools.iter().map(|t| t.name.as_ref());
            self.claim(&mut inner, source.index, names, true, false)?;
        }
        inner.started = true;
        inner.reserve_until = Instant::now() + self.reserve_for;
        Ok(())
    }

    /// Whether source `index` owns `name`.
    fn owns(&self, index: usize, name: &str) -> bool {
        self.lock().owners.get(name) == Some(&Owner::Source(index))
    }

    /// The source index that owns `name`, if a source does.
    fn owner(&self, name: &str) -> Option<usize> {
        match self.lock().owners.get(name) {
            Some(Owner::Source(i)) => Some(*i),
            _ => None,
        }
    }
}

/// rmcp's client handler of one source: list changes wake its supervisor;
/// every notification counts against its flood bound ([`Source::note`]).
#[derive(Clone)]
struct Handler(Arc<Source>);

impl Handler {
    fn changed(&self) {
        self.0.changed();
    }
}

impl ClientHandler for Handler {
    /// The gateway's identity and, for every connection, no capabilities:
    /// listings cannot ask for input, and a source at an older revision
    /// could only send its requests mid-call, which have no way to an
    /// agent. A forwarded call to a source at 2026-07-28 declares the
    /// agent's own elicitation in its `_meta` ([`input::options`]).
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("portcullis-gateway", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed();
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed();
    }

    async fn on_resource_updated(
        &self,
        _params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.changed();
    }

    async fn on_progress(
        &self,
        _params: rmcp::model::ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.0.note();
    }

    #[expect(
        deprecated,
        reason = "a source may still send log messages, and they count"
    )]
    async fn on_logging_message(
        &self,
        _params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.0.note();
    }
}

type Running = RunningService<RoleClient, Handler>;

/// A live connection, and the child process of a stdio source.
type Connection = (Running, Option<tokio::process::Child>);

/// Connects to `source` once (no timeout here: the caller bounds it).
/// Why a source could not be connected and listed (logged, and retried
/// with backoff).
#[derive(Debug)]
enum Down {
    /// The HTTP client could not be built.
    HttpClient(reqwest::Error),
    /// The command could not be started (its program named).
    Spawn(String, std::io::Error),
    /// The child's pipes are missing.
    Pipes,
    /// The session could not be opened (`server/discover` or `initialize`).
    Open(Box<rmcp::service::ClientInitializeError>),
    /// Connecting took longer than its wait (in seconds).
    ConnectTimeout(u64),
    /// Listing the tools took longer than the call timeout.
    ListTimeout,
    /// Listing the tools failed.
    List(ServiceError),
}

impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::HttpClient(e) => write!(f, "building the HTTP client: {e}"),
            Self::Spawn(program, e) => write!(f, "starting {program:?}: {e}"),
            Self::Pipes => f.write_str("the child's pipes are missing"),
            Self::Open(e) => e.fmt(f),
            Self::ConnectTimeout(secs) => write!(f, "connecting timed out after {secs} s"),
            Self::ListTimeout => f.write_str("listing tools timed out"),
            Self::List(e) => write!(f, "listing tools: {e}"),
        }
    }
}

async fn connect(source: &Arc<Source>, bounds: &Bounds) -> Result<Connection, Down> {
    let handler = Handler(Arc::clone(source));
    match &source.spec.target {
        Target::Http(url) => {
            let http = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(bounds.connect)
                .build()
                .map_err(Down::HttpClient)?;
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .max_sse_event_size(bounds.max_response)
                // One more than the calls in flight: a 2026-07-28 source's
                // `subscriptions/listen` stream ([`listen`]) holds a request
                // open for the connection's life.
                .max_concurrent_requests(bounds.max_concurrent.saturating_add(1));
            config.max_json_response_size = bounds.max_response;
            config.max_error_response_size = config.max_error_response_size.min(64 * 1024);
            let transport = StreamableHttpClientTransport::with_client(http, config);
            let running = handler
                .serve_with_lifecycle(transport, lifecycle())
                .await
                .map_err(|e| Down::Open(Box::new(e)))?;
            Ok((running, None))
        }
        Target::Command { argv, env } => {
            let mut cmd = tokio::process::Command::new(&argv[0]);
            cmd.args(&argv[1..])
                .envs(env)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::inherit())
                .kill_on_drop(true);
            let mut child = cmd.spawn().map_err(|e| Down::Spawn(argv[0].clone(), e))?;
            let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
                return Err(Down::Pipes);
            };
            // The line cap is `CappedLines`'s (it fails the call a line too
            // long answered); rmcp's own, a little higher, never trips.
            let stdout = stdio::CappedLines::new(stdout, bounds.max_response);
            let transport = AsyncRwTransport::new_client(stdout, stdin)
                .with_max_line_length(bounds.max_response.saturating_add(64));
            let running = handler
                .serve_with_lifecycle(transport, lifecycle())
                .await
                .map_err(|e| Down::Open(Box::new(e)))?;
            // The child lives as long as the connection: the supervisor
            // drops it (killing it, `kill_on_drop`) when the connection ends.
            Ok((running, Some(child)))
        }
    }
}

/// The gateway: the URI mapping, the sources and the owners of tool names.
/// Started once ([`Gateway::start`]) and shared by the host's handlers
/// (behind an `Arc`).
pub struct Gateway {
    /// The core's mapping and rewriters.
    pub(crate) map: UriMap,
    /// The sources, in configuration order.
    pub(crate) sources: Vec<Arc<Source>>,
    /// The bounds of every call.
    pub(crate) bounds: Bounds,
    /// Who owns each tool name (the built-in tools' names included).
    names: Arc<Names>,
    /// Sources' states too large to travel in a wrapped `requestState`.
    pub(crate) stash: input::Stash,
    /// The host's origin ([`Config::public_url`]), parsed once at start.
    pub(crate) host_origin: url::Origin,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("sources", &self.sources)
            .field("bounds", &self.bounds)
            .finish_non_exhaustive()
    }
}

/// Why the gateway did not start. [`StartError::code`] is stable; the
/// message ([`std::fmt::Display`]) is for the operator.
#[derive(Debug)]
#[non_exhaustive]
pub enum StartError {
    /// The configuration was refused.
    Config(ConfigError),
    /// Two owners offer one tool name at the start: tool names are never
    /// changed, so one of them must go.
    NameClash(Box<NameClash>),
}

/// A tool name two owners offer at the start ([`StartError::NameClash`]).
#[derive(Debug)]
#[non_exhaustive]
pub struct NameClash {
    /// The tool name.
    pub tool: String,
    /// Its first owner: a source, or `None` for the host's own (reserved)
    /// tools.
    pub first: Option<SourceId>,
    /// The source that offers it too.
    pub second: SourceId,
}

impl StartError {
    /// A stable code for the refusal: the [`ConfigError::code`] of a
    /// configuration refused, `tool_name_clash` otherwise.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::Config(e) => e.code(),
            Self::NameClash(_) => "tool_name_clash",
        }
    }
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Config(e) => e.fmt(f),
            Self::NameClash(clash) => {
                let NameClash {
                    tool,
                    first,
                    second,
                } = &**clash;
                let first = match first {
                    Some(id) => format!("source {id}"),
                    None => "the built-in tools".to_owned(),
                };
                write!(
                    f,
                    "gateway: tool {tool:?} is offered by both {first} and source {second}; tool \
                     names are never changed, so remove one of the two sources"
                )
            }
        }
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Config(e) => Some(e),
            Self::NameClash(_) => None,
        }
    }
}

impl From<ConfigError> for StartError {
    fn from(e: ConfigError) -> Self {
        Self::Config(e)
    }
}

impl Gateway {
    /// A gateway without sources: nothing is listed or forwarded, and every
    /// caller reaches every app ([`Gateway::reach`]).
    #[must_use]
    pub fn none() -> Self {
        Self {
            map: UriMap::default(),
            sources: Vec::new(),
            bounds: Bounds::of(&Config::default()),
            names: Arc::new(Names::new(&[], Vec::new(), std::time::Duration::ZERO)),
            stash: input::Stash::default(),
            // No source, so no elicitation to compare with it.
            host_origin: url::Origin::new_opaque(),
        }
    }

    /// Whether any source is configured.
    #[must_use]
    pub fn is_active(&self) -> bool {
        !self.sources.is_empty()
    }

    /// The configured sources' ids, in configuration order.
    #[must_use]
    pub fn source_ids(&self) -> Vec<SourceId> {
        self.sources.iter().map(|s| s.spec.id.clone()).collect()
    }

    /// The core's URI mapping the gateway's resources live under.
    #[must_use]
    pub fn map(&self) -> &UriMap {
        &self.map
    }

    /// Opens, on an agent's retry, a `requestState` the gateway gave it
    /// when a source asked for input ([`Reply::input`]): `principal`'s
    /// call `call` ([`digest`] of the tool call). The ledger request the
    /// retry runs under and the source's own state (for [`Round::state`]).
    pub fn unwrap_state<S: HostStore>(
        &self,
        portcullis: &Portcullis<S>,
        principal: &Principal,
        call: &CallDigest,
        text: &str,
    ) -> Result<(RequestId, Option<String>), Unwrap> {
        input::unwrap(portcullis, &self.stash, principal, call, text)
    }

    /// Starts a supervisor per source (on the current Tokio runtime, for
    /// the life of the process) and waits (up to each source's connect and
    /// call timeouts) for their first connections and listings; a source
    /// not reachable then is retried in the background. Refuses tool-name
    /// collisions among the tools then known. `reserved` are the host's own
    /// tool names, which no source may take.
    pub async fn start(config: &Config, reserved: Vec<String>) -> Result<Self, StartError> {
        let specs = config.checked_sources()?;
        let host_origin = config.host_origin()?;
        let bounds = Bounds::of(config);
        // reqwest over rustls needs a process-wide provider (ring, as the
        // client documents' fetcher installs it).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let names = Arc::new(Names::new(
            &reserved,
            specs.iter().map(|s| s.id.clone()).collect(),
            bounds::RESERVE_NAMES_FOR,
        ));
        let sources: Vec<Arc<Source>> = specs
            .into_iter()
            .enumerate()
            .map(|(i, s)| Arc::new(Source::new(s, i, &bounds)))
            .collect();
        let mut firsts = Vec::new();
        for source in &sources {
            let (tx, rx) = tokio::sync::oneshot::channel();
            tokio::spawn(supervise(
                Arc::clone(source),
                bounds,
                Arc::clone(&names),
                tx,
            ));
            firsts.push((Arc::clone(source), rx));
        }
        for (source, rx) in firsts {
            match rx.await {
                Ok(Ok(())) => tracing::info!(source = %source.spec.id, "gateway: source connected"),
                Ok(Err(e)) => tracing::warn!(
                    source = %source.spec.id,
                    error = %e,
                    "gateway: source not reachable at start; its tools appear when it connects \
                     (a name another owner has by then is refused)"
                ),
                Err(_) => {
                    tracing::warn!(source = %source.spec.id, "gateway: source supervisor ended");
                }
            }
        }
        names.start(&sources)?;
        Ok(Self {
            map: UriMap::default(),
            sources,
            bounds,
            names,
            stash: input::Stash::default(),
            host_origin,
        })
    }
}

/// Pages through one listing of a source: `page` asks for the page after a
/// cursor, `take` keeps what it can of it and says when the caps are
/// reached. At most [`bounds::MAX_PAGES`] pages.
async fn pages<P, F>(
    mut page: impl FnMut(Option<PaginatedRequestParams>) -> F,
    mut take: impl FnMut(P) -> (bool, Option<String>),
) -> Result<(), ServiceError>
where
    F: Future<Output = Result<P, ServiceError>>,
{
    let mut cursor = None;
    for _ in 0..bounds::MAX_PAGES {
        let params = cursor.map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let (full, next) = take(page(params).await?);
        match next {
            Some(next) if !full => cursor = Some(next),
            _ => return Ok(()),
        }
    }
    Ok(())
}

/// What one listing may still take: entries and bytes (as JSON).
struct Budget {
    entries: usize,
    bytes: usize,
    /// Entries left out because the caps were reached.
    over: usize,
    /// Entries left out because their URI cannot be mapped, and why the
    /// first one could not.
    unmappable: usize,
    why: Option<String>,
}

impl Budget {
    fn new(entries: usize) -> Self {
        Self {
            entries,
            bytes: bounds::MAX_LIST_BYTES,
            over: 0,
            unmappable: 0,
            why: None,
        }
    }

    /// Whether `entry` fits; it is counted if so.
    fn admit<T: serde::Serialize>(&mut self, entry: &T) -> bool {
        let size = serde_json::to_vec(entry).map_or(usize::MAX, |v| v.len());
        if self.entries == 0 || size > self.bytes {
            self.over += 1;
            return false;
        }
        self.entries -= 1;
        self.bytes -= size;
        true
    }

    /// Whether the caps are reached.
    fn full(&self) -> bool {
        self.over > 0
    }

    fn unmappable(&mut self, why: impl std::fmt::Display) {
        self.unmappable += 1;
        self.why.get_or_insert_with(|| why.to_string());
    }

    /// One log line for what was left out of `what`.
    fn log(&self, source: &SourceId, what: &str) {
        if self.over > 0 {
            tracing::warn!(
                source = %source,
                list = what,
                "gateway: the source lists more than its cap; the rest is left out"
            );
        }
        if self.unmappable > 0 {
            tracing::warn!(
                source = %source,
                list = what,
                count = self.unmappable,
                first = self.why.as_deref().unwrap_or_default(),
                "gateway: entries whose URI cannot be mapped are left out of the source's listing"
            );
        }
    }
}

/// Reads a connected source's tools, resources and templates, each listing
/// within the call timeout and the caps of [`bounds`].
async fn read_lists(
    source: &Source,
    peer: &Peer<RoleClient>,
    bounds: &Bounds,
    map: &UriMap,
) -> Result<Listed, Down> {
    let id = &source.spec.id;
    let mut listed = Listed::default();

    let mut budget = Budget::new(bounds::MAX_TOOLS);
    let tools = pages(
        |p| peer.list_tools(p),
        |page: rmcp::model::ListToolsResult| {
            for tool in page.tools {
                match tools::offerable(map, id, &tool) {
                    Ok(t) if budget.admit(&t) => listed.tools.push(t),
                    Ok(_) => {}
                    Err(why) => budget.unmappable(why),
                }
            }
            (budget.full(), page.next_cursor)
        },
    );
    bounds::within(bounds.call, tools)
        .await
        .map_err(|_| Down::ListTimeout)?
        .map_err(Down::List)?;
    budget.log(id, "tools");

    // A source without resources (or whose listing fails) lists none.
    let mut budget = Budget::new(bounds::MAX_RESOURCES);
    let resources = pages(
        |p| peer.list_resources(p),
        |page: rmcp::model::ListResourcesResult| {
            for mut r in page.resources {
                match map.encode(id, &r.uri) {
                    Ok(gateway_uri) => {
                        let downstream = std::mem::replace(&mut r.uri, gateway_uri);
                        if budget.admit(&r) {
                            listed.uris.push(downstream);
                            listed.resources.push(r);
                        }
                    }
                    Err(e) => budget.unmappable(e),
                }
            }
            (budget.full(), page.next_cursor)
        },
    );
    if let Ok(Err(e)) = bounds::within(bounds.call, resources).await {
        tracing::debug!(source = %id, error = %e, "gateway: listing resources failed");
    }
    budget.log(id, "resources");

    let mut budget = Budget::new(bounds::MAX_TEMPLATES);
    let templates = pages(
        |p| peer.list_resource_templates(p),
        |page: rmcp::model::ListResourceTemplatesResult| {
            for mut t in page.resource_templates {
                match map.encode(id, &t.uri_template) {
                    Ok(gateway_uri) => {
                        t.uri_template = gateway_uri;
                        if budget.admit(&t) {
                            listed.templates.push(t);
                        }
                    }
                    Err(e) => budget.unmappable(e),
                }
            }
            (budget.full(), page.next_cursor)
        },
    );
    if let Ok(Err(e)) = bounds::within(bounds.call, templates).await {
        tracing::debug!(source = %id, error = %e, "gateway: listing templates failed");
    }
    budget.log(id, "resource templates");
    Ok(listed)
}

/// Re-reads a connected source's lists into the cache, and claims its new
/// tool names (once the gateway has started).
async fn relist(
    source: &Source,
    peer: &Peer<RoleClient>,
    bounds: &Bounds,
    map: &UriMap,
    names: &Names,
) -> Result<(), Down> {
    let listed = Arc::new(read_lists(source, peer, bounds, map).await?);
    *source.listed.lock().unwrap_or_else(PoisonError::into_inner) = Arc::clone(&listed);
    names.claim_later(source.index, &listed.tools);
    Ok(())
}

/// One source's supervisor: connect, list, watch, reconnect with backoff.
/// `first` hears how the first attempt went.
async fn supervise(
    source: Arc<Source>,
    bounds: Bounds,
    names: Arc<Names>,
    first: tokio::sync::oneshot::Sender<Result<(), Down>>,
) {
    let map = UriMap::default();
    let mut first = Some(first);
    let mut attempt: u32 = 0;
    loop {
        let wait = bounds.connect_wait(attempt);
        let connected = match bounds::within(wait, connect(&source, &bounds)).await {
            Ok(Ok((running, child))) => {
                let peer = running.peer().clone();
                match relist(&source, &peer, &bounds, &map, &names).await {
                    Ok(()) => Ok((running, child)),
                    Err(e) => {
                        let _ = running.cancel().await;
                        Err(e)
                    }
                }
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Down::ConnectTimeout(wait.as_secs())),
        };
        let (running, mut child) = match connected {
            Ok(c) => c,
            Err(e) => {
                if let Some(tx) = first.take() {
                    let _ = tx.send(Err(e));
                } else {
                    tracing::debug!(source = %source.spec.id, error = %e, attempt, "gateway: reconnect failed");
                }
                tokio::time::sleep(bounds::backoff(attempt)).await;
                attempt = attempt.saturating_add(1);
                continue;
            }
        };
        attempt = 0;
        source
            .broken
            .store(false, std::sync::atomic::Ordering::Release);
        source.peer.send_replace(Some(running.peer().clone()));
        let version = revision(running.peer());
        if let Some(tx) = first.take() {
            tracing::info!(source = %source.spec.id, version, "gateway: source speaks this revision");
            let _ = tx.send(Ok(()));
        } else {
            tracing::info!(source = %source.spec.id, version, "gateway: source (re)connected");
        }
        // A source at 2026-07-28 announces list changes only on a
        // `subscriptions/listen` stream: one lives as long as the connection.
        let listener = is_modern(running.peer())
            .then(|| tokio::spawn(listen(Arc::clone(&source), running.peer().clone())));
        watch_connection(&source, &running, &mut child, &bounds, &map, &names).await;
        if let Some(listener) = listener {
            listener.abort();
        }
        source.peer.send_replace(None);
        tracing::warn!(source = %source.spec.id, "gateway: source down; reconnecting");
        let _ = running.cancel().await;
        drop(child);
    }
}

/// The list changes a 2026-07-28 source is asked to announce on its
/// `subscriptions/listen` stream: those the gateway caches.
fn list_changes() -> SubscriptionFilter {
    SubscriptionFilter::builder()
        .tools_list_changed()
        .resources_list_changed()
        .build()
}

/// The `subscriptions/listen` stream of a source at 2026-07-28, for as long
/// as its connection lives (the supervisor aborts this with it). That
/// revision has no other way for a server to say its lists changed (MCP
/// 2026-07-28, "Subscriptions": the client opens the stream with a filter,
/// the server acknowledges the subset it honours and then sends only those
/// notifications on it). Each list change heard there wakes the supervisor
/// as an older source's notification does ([`Source::changed`]: counted
/// against the flood bound, debounced). A stream that ends is opened again
/// after a backoff pause ([`bounds::backoff`]), and since changes in
/// between went unheard, the lists are read again once it is back. A
/// source that does not offer the method, or acknowledges none of the
/// list changes, keeps the minute's relist only.
async fn listen(source: Arc<Source>, peer: Peer<RoleClient>) {
    let id = &source.spec.id;
    let mut attempt: u32 = 0;
    loop {
        match peer.listen(list_changes()).await {
            Ok(mut stream) => {
                let heard = stream.acknowledged();
                if heard.tools_list_changed != Some(true)
                    && heard.resources_list_changed != Some(true)
                {
                    tracing::info!(
                        source = %id,
                        "gateway: the source announces no list changes; its lists are read \
                         again every minute"
                    );
                    return;
                }
                if attempt > 0 {
                    source.changed();
                }
                attempt = 0;
                loop {
                    match stream.next().await {
                        Ok(Some(_)) => source.changed(),
                        Ok(None) => break,
                        Err(e) => {
                            tracing::debug!(source = %id, error = %e, "gateway: subscription stream failed");
                            break;
                        }
                    }
                }
                tracing::debug!(source = %id, end = ?stream.end(), "gateway: subscription stream ended");
            }
            Err(ServiceError::McpError(e))
                if e.code == rmcp::model::ErrorCode::METHOD_NOT_FOUND =>
            {
                tracing::info!(
                    source = %id,
                    "gateway: the source offers no subscriptions/listen; its lists are read again \
                     every minute"
                );
                return;
            }
            Err(e) => {
                tracing::debug!(source = %id, error = %e, attempt, "gateway: subscriptions/listen failed");
            }
        }
        tokio::time::sleep(bounds::backoff(attempt)).await;
        attempt = attempt.saturating_add(1);
    }
}

/// How a connection's liveness is checked, by the source's revision
/// (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Probe {
    /// A revision with `ping` (2025-11-25 and earlier).
    Ping,
    /// A 2026-07-28 source over HTTP: `server/discover`, which every
    /// server of that revision must answer.
    Discover,
    /// A 2026-07-28 source over stdio: its process and its output stream
    /// are watched instead; nothing is sent.
    Process,
}

impl Probe {
    fn of(peer: &Peer<RoleClient>, stdio: bool) -> Self {
        match (is_modern(peer), stdio) {
            (false, _) => Self::Ping,
            (true, false) => Self::Discover,
            (true, true) => Self::Process,
        }
    }

    /// Whether the source answered (within the call timeout).
    async fn healthy(self, peer: &Peer<RoleClient>, bounds: &Bounds) -> bool {
        let request = match self {
            Self::Process => return true,
            Self::Ping => ClientRequest::PingRequest(PingRequest::default()),
            // Sent as is, never answered from rmcp's cache of discovery
            // results: the point is to reach the source.
            Self::Discover => {
                ClientRequest::DiscoverRequest(DiscoverRequest::new(DiscoverRequestParams {}))
            }
        };
        match bounds::within(bounds.call, peer.send_request(request)).await {
            Ok(Ok(ServerResult::DiscoverResult(_))) => self == Self::Discover,
            Ok(Ok(_)) => self == Self::Ping,
            _ => false,
        }
    }
}

/// Waits for a stdio source's process to exit; never, for one over HTTP.
async fn exited(child: &mut Option<tokio::process::Child>) {
    match child {
        Some(c) => {
            let _ = c.wait().await;
        }
        None => std::future::pending().await,
    }
}

/// Returns when the connection is closed or unhealthy: a failed call's
/// poke, a closed transport, a stdio source's process that exited, or a
/// liveness probe without an answer ([`Probe`], every [`HEALTH_EVERY`]). A
/// poke for a list change re-reads the lists, at most once every
/// [`bounds::RELIST_EVERY`] (the pokes in between are taken together);
/// lists are also re-read every [`bounds::RELIST_AFTER`].
async fn watch_connection(
    source: &Source,
    running: &Running,
    child: &mut Option<tokio::process::Child>,
    bounds: &Bounds,
    map: &UriMap,
    names: &Names,
) {
    let peer = running.peer().clone();
    let probe = Probe::of(&peer, child.is_some());
    let broken = || {
        running.is_closed()
            || peer.is_transport_closed()
            || source.broken.load(std::sync::atomic::Ordering::Acquire)
    };
    let mut listed_at = tokio::time::Instant::now();
    loop {
        let poked = tokio::select! {
            () = source.poke.notified() => true,
            () = tokio::time::sleep(HEALTH_EVERY) => false,
            () = exited(child) => {
                tracing::warn!(source = %source.spec.id, "gateway: the source's process exited");
                return;
            }
        };
        if broken() {
            return;
        }
        let healthy = if poked || listed_at.elapsed() >= bounds::RELIST_AFTER {
            // The debounce: later pokes until then are part of this one; a
            // failed call's poke still ends the wait at once.
            let due = listed_at + bounds::RELIST_EVERY;
            while tokio::time::Instant::now() < due {
                tokio::select! {
                    () = source.poke.notified() => {}
                    () = tokio::time::sleep_until(due) => {}
                }
                if broken() {
                    return;
                }
            }
            listed_at = tokio::time::Instant::now();
            relist(source, &peer, bounds, map, names).await.is_ok()
        } else {
            probe.healthy(&peer, bounds).await
        };
        if !healthy {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(index: usize, id: &str, names: &[&'static str]) -> Arc<Source> {
        let spec = SourceSpec::parse(&format!("{id}=http://127.0.0.1:1/mcp")).unwrap();
        let source = Source::new(spec, index, &Bounds::of(&Config::default()));
        list(&source, names);
        Arc::new(source)
    }

    /// `source` now lists `names` (as a listing leaves it).
    fn list(source: &Source, names: &[&'static str]) {
        *source.listed.lock().unwrap() = Arc::new(Listed {
            tools: names
                .iter()
                .map(|n| Tool::new(*n, "", Arc::new(rmcp::model::JsonObject::new())))
                .collect(),
            ..Listed::default()
        });
    }

    /// A gateway over `sources` after its start (or the start's refusal),
    /// every source having listed by then.
    fn started(sources: Vec<Arc<Source>>) -> (Gateway, Result<(), StartError>) {
        started_without(sources, &[], bounds::RESERVE_NAMES_FOR)
    }

    /// A gateway over `sources` after its start, the sources at `absent`
    /// not having listed yet, with a reservation of `reserve_for`.
    fn started_without(
        sources: Vec<Arc<Source>>,
        absent: &[usize],
        reserve_for: std::time::Duration,
    ) -> (Gateway, Result<(), StartError>) {
        let names = Names::new(
            &["execute".into()],
            sources.iter().map(|s| s.spec.id.clone()).collect(),
            reserve_for,
        );
        for source in sources.iter().filter(|s| !absent.contains(&s.index)) {
            names.claim_later(source.index, &source.listed().tools);
        }
        let start = names.start(&sources);
        let gateway = Gateway {
            sources,
            names: Arc::new(names),
            ..Gateway::none()
        };
        (gateway, start)
    }

    fn offered(g: &Gateway) -> Vec<String> {
        g.granted_tools(&portcullis_core::granted_apps::AppSelection::All)
            .iter()
            .map(|t| t.name.to_string())
            .collect()
    }

    #[test]
    fn tool_names_collide_with_sources_and_built_ins() {
        let (ok, start) = started(vec![source(0, "a", &["x", "y"]), source(1, "b", &["z"])]);
        start.unwrap();
        assert_eq!(offered(&ok), ["x", "y", "z"]);
        assert_eq!(ok.find("z").unwrap().0.spec.id.as_str(), "b");
        assert!(ok.find("execute").is_none());

        let (twice, start) = started(vec![source(0, "a", &["x"]), source(1, "b", &["x"])]);
        let e = start.unwrap_err();
        assert_eq!(e.code(), "tool_name_clash");
        let e = e.to_string();
        assert!(
            e.contains("tool \"x\" is offered by both source a and source b"),
            "{e}"
        );
        assert_eq!(twice.find("x").unwrap().0.spec.id.as_str(), "a");

        let (builtin, start) = started(vec![source(0, "a", &["execute"])]);
        let e = start.unwrap_err().to_string();
        assert!(e.contains("both the built-in tools and source a"), "{e}");
        assert!(offered(&builtin).is_empty());
    }

    /// A name belongs to its first owner for the life of the process: a
    /// source that lists it later is refused, before and after the owner
    /// stops listing it, and a source that connected late gets only the
    /// names nobody has.
    #[test]
    fn a_name_never_moves() {
        let (a, b, late) = (
            source(0, "a", &["x", "y"]),
            source(1, "b", &[]),
            source(2, "late", &[]),
        );
        let (g, start) = started(vec![Arc::clone(&a), Arc::clone(&b), Arc::clone(&late)]);
        start.unwrap();
        // b lists x (a has it): refused.
        list(&b, &["x", "w"]);
        g.names.claim_later(1, &b.listed().tools);
        assert_eq!(offered(&g), ["x", "y", "w"]);
        assert_eq!(g.find("x").unwrap().0.spec.id.as_str(), "a");
        // a drops x: it is not handed to b.
        list(&a, &["y"]);
        g.names.claim_later(0, &a.listed().tools);
        g.names.claim_later(1, &b.listed().tools);
        assert_eq!(offered(&g), ["y", "w"]);
        assert!(g.find("x").is_none(), "nobody else gets x");
        // a lists x again: it is still a's.
        list(&a, &["x", "y"]);
        g.names.claim_later(0, &a.listed().tools);
        assert_eq!(g.find("x").unwrap().0.spec.id.as_str(), "a");
        // A late source: its free name is its own, the taken ones refused.
        list(&late, &["y", "v", "execute"]);
        g.names.claim_later(2, &late.listed().tools);
        assert_eq!(offered(&g), ["x", "y", "w", "v"]);
        assert_eq!(g.find("v").unwrap().0.spec.id.as_str(), "late");
        assert_eq!(g.find("y").unwrap().0.spec.id.as_str(), "a");
    }

    /// A source that keeps listing new names owns at most its cap of them
    /// (the table of names stays bounded); past it, its new names are
    /// refused, and the other sources' names are unaffected.
    #[test]
    fn a_source_that_keeps_listing_new_names_is_capped() {
        let (a, b) = (source(0, "a", &["x"]), source(1, "b", &["z"]));
        let (g, start) = started(vec![Arc::clone(&a), Arc::clone(&b)]);
        start.unwrap();
        for round in 0..4 * bounds::MAX_TOOL_NAMES / bounds::MAX_TOOLS {
            let tools: Vec<Tool> = (0..bounds::MAX_TOOLS)
                .map(|i| {
                    Tool::new(
                        format!("t{round}-{i}"),
                        "",
                        Arc::new(rmcp::model::JsonObject::new()),
                    )
                })
                .collect();
            g.names.claim_later(0, &tools);
        }
        let owned = g.names.lock().owners.len();
        // The built-in `execute`, b's `z`, and a's at most.
        assert!(owned <= bounds::MAX_TOOL_NAMES + 2, "{owned} names kept");
        assert_eq!(g.find("x").unwrap().0.spec.id.as_str(), "a");
        assert_eq!(
            g.names.owner("t0-0"),
            Some(0),
            "the first new names are a's"
        );
        let last = format!("t{}-0", 4 * bounds::MAX_TOOL_NAMES / bounds::MAX_TOOLS - 1);
        assert_eq!(g.names.owner(&last), None, "past the cap: refused");
        // b, whose cap is its own, still claims new names.
        list(&b, &["z", "w"]);
        g.names.claim_later(1, &b.listed().tools);
        assert_eq!(g.find("w").unwrap().0.spec.id.as_str(), "b");
    }

    /// A source not ready at the start keeps its names: what another
    /// source lists for the first time in its absence waits (during the
    /// reservation) and is claimed after it has listed, where still free.
    #[test]
    fn a_source_that_connects_late_is_not_starved_of_its_names() {
        let (a, late) = (source(0, "a", &["x"]), source(1, "late", &[]));
        let (g, start) = started_without(
            vec![Arc::clone(&a), Arc::clone(&late)],
            &[1],
            bounds::RESERVE_NAMES_FOR,
        );
        start.unwrap();
        // a lists late's tool name (and one of its own) before late is up.
        list(&a, &["x", "mail", "y"]);
        g.names.claim_later(0, &a.listed().tools);
        assert!(g.find("mail").is_none(), "held back, not a's");
        assert!(g.find("y").is_none(), "held back too");
        assert_eq!(g.find("x").unwrap().0.spec.id.as_str(), "a");
        // late connects and lists: its name is its own; a's other new name
        // is a's now, and the shared one was never a's.
        list(&late, &["mail"]);
        g.names.claim_later(1, &late.listed().tools);
        assert_eq!(g.find("mail").unwrap().0.spec.id.as_str(), "late");
        assert_eq!(g.find("y").unwrap().0.spec.id.as_str(), "a");
    }

    /// The reservation ends: a source that never comes does not hold the
    /// others' new names back for longer.
    #[test]
    fn names_held_for_a_source_that_never_lists_are_claimed_when_the_reservation_ends() {
        let (a, never) = (source(0, "a", &["x"]), source(1, "never", &[]));
        let (g, start) = started_without(
            vec![Arc::clone(&a), Arc::clone(&never)],
            &[1],
            std::time::Duration::from_millis(50),
        );
        start.unwrap();
        list(&a, &["x", "y"]);
        g.names.claim_later(0, &a.listed().tools);
        assert!(g.find("y").is_none(), "held back");
        std::thread::sleep(std::time::Duration::from_millis(60));
        assert_eq!(g.find("y").unwrap().0.spec.id.as_str(), "a");
    }

    /// A downstream at 2026-07-28 (rmcp's server, over Streamable HTTP)
    /// whose tools can change, and which announces changes on the
    /// `subscriptions/listen` streams its clients open.
    #[derive(Clone, Default)]
    struct Changing {
        tools: Arc<Mutex<Vec<Tool>>>,
        streams: Arc<Mutex<Vec<rmcp::service::SubscriptionSink>>>,
    }

    impl rmcp::ServerHandler for Changing {
        fn get_info(&self) -> rmcp::model::ServerConfig {
            rmcp::model::ServerConfig::new(
                rmcp::model::ServerCapabilities::builder()
                    .enable_tools()
                    .enable_tool_list_changed()
                    .build(),
            )
        }

        async fn list_tools(
            &self,
            _request: Option<PaginatedRequestParams>,
            _context: rmcp::service::RequestContext<rmcp::RoleServer>,
        ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
            Ok(rmcp::model::ListToolsResult::with_all_items(
                self.tools.lock().unwrap().clone(),
            ))
        }

        fn accepted_subscription_filter(
            &self,
            requested: &SubscriptionFilter,
        ) -> Option<SubscriptionFilter> {
            Some(requested.clone())
        }

        async fn listen(
            &self,
            context: rmcp::service::SubscriptionContext,
        ) -> Result<(), rmcp::ErrorData> {
            self.streams.lock().unwrap().push(context.sink().clone());
            context.cancelled().await;
            Ok(())
        }
    }

    impl Changing {
        /// Adds the tool `name` and says so on every open stream; how many
        /// streams heard it.
        async fn add(&self, name: &'static str) -> usize {
            self.tools.lock().unwrap().push(Tool::new(
                name,
                "",
                Arc::new(rmcp::model::JsonObject::new()),
            ));
            let streams = self.streams.lock().unwrap().clone();
            let mut heard = 0;
            for s in streams {
                heard += usize::from(s.notify_tool_list_changed().await.is_ok());
            }
            heard
        }
    }

    /// Serves `downstream` on a loopback port: its MCP URL.
    async fn serve(downstream: Changing) -> String {
        use rmcp::transport::streamable_http_server::{
            StreamableHttpServerConfig, StreamableHttpService, session::never::NeverSessionManager,
        };
        let service = StreamableHttpService::new(
            move || Ok(downstream.clone()),
            Arc::new(NeverSessionManager::default()),
            StreamableHttpServerConfig::default().with_legacy_session_mode(false),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let router = axum::Router::new().nest_service("/mcp", service);
        tokio::spawn(async move { axum::serve(listener, router).await });
        format!("http://127.0.0.1:{port}/mcp")
    }

    /// A source at 2026-07-28 has no way to send a list change but the
    /// `subscriptions/listen` stream: the gateway opens one, and a change
    /// it hears there is listed within seconds, not at the minute's relist.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_2026_source_s_list_change_arrives_on_its_subscription() {
        let downstream = Changing::default();
        downstream.add("first").await;
        let url = serve(downstream.clone()).await;
        let config = Config {
            sources: vec![SourceSpec::parse(&format!("d={url}")).unwrap()],
            public_url: "http://127.0.0.1:1".into(),
            ..Config::default()
        };
        let g = Gateway::start(&config, vec!["execute".into()])
            .await
            .unwrap();
        assert!(g.find("first").is_some(), "listed at the start");
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        while downstream.streams.lock().unwrap().is_empty() {
            assert!(
                Instant::now() < deadline,
                "the gateway opened no subscriptions/listen stream"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(downstream.add("later").await, 1, "one stream heard it");
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while g.find("later").is_none() {
            assert!(
                Instant::now() < deadline,
                "the change was not listed within 10 s"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}
