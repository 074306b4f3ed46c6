//! The resource gateway as a running system: downstream MCP servers
//! ("sources") whose tools and resources the authorized MCP endpoint
//! exposes, under the core's URI mapping ([`portcullis_core::gateway`]).
//!
//! This module owns the sources: their configuration (`--source`,
//! `--sources FILE`), one rmcp client connection each (Streamable HTTP, or
//! a child process over stdio), and a supervisor task per source that
//! connects, lists its tools and resources, watches the connection and
//! reconnects with backoff ([`bounds::backoff`]). A source that is down
//! makes only its own tools and resources unavailable: calls to them answer
//! `source_unavailable`; the other sources are unaffected.
//!
//! * [`tools`]: the downstream tools on the endpoint and their calls through
//!   the execution ledger (approvals, `requestId` idempotency).
//! * [`resources`]: `resources/list`, `resources/templates/list` and
//!   `resources/read` forwarded under the mapping.
//! * [`bounds`]: timeouts, the answer size cap and the concurrency cap.
//!
//! Tool names are never changed. At start the gateway waits for every
//! source's first connection and listing (each within its connect and call
//! timeouts; one that fails is retried in the background) and refuses to
//! start when two sources, or a source and a built-in tool, share a name.
//! A source that first connects later, or whose tool list changes, cannot
//! take a name that is already used: its colliding tool is left out (and
//! logged), so the owner of a name never changes while the server runs.
//!
//! `notifications/resources/*` and `notifications/tools/list_changed` from
//! a source make the gateway re-read that source's lists. The endpoint is
//! stateless (no stream to push on), so clients see the change on their next
//! listing.

pub(crate) mod bounds;
pub(crate) mod resources;
pub(crate) mod tools;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use portcullis_core::gateway::{Gateway as UriMap, SourceId};
use rmcp::model::{ClientRequest, PingRequest, Tool};
use rmcp::service::{NotificationContext, Peer, RunningService};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransport, StreamableHttpClientTransportConfig,
};
use rmcp::{ClientHandler, RoleClient, ServiceExt as _};
use serde::Deserialize;
use tokio::sync::{Notify, Semaphore, watch};

use crate::cli::GatewayArgs;
use bounds::Bounds;

/// The most resource URIs kept per source for rewriting text bodies.
const MAX_KNOWN_URIS: usize = 4096;

/// How often a connected source is pinged.
const HEALTH_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Where a source is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// A Streamable HTTP endpoint.
    Http(String),
    /// A local command speaking MCP over stdio.
    Command {
        /// Program and arguments.
        argv: Vec<String>,
        /// Extra environment variables.
        env: BTreeMap<String, String>,
    },
}

/// One configured source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SourceSpec {
    /// Its id (the name in gateway URIs and messages).
    pub(crate) id: SourceId,
    /// Where it is.
    pub(crate) target: Target,
}

/// One entry of a `--sources` file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    url: Option<String>,
    command: Option<Vec<String>>,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

fn source_id(name: &str) -> Result<SourceId, String> {
    SourceId::new(name).map_err(|e| format!("source name {name:?}: {e}"))
}

fn http_target(name: &str, url: &str) -> Result<Target, String> {
    let parsed = url::Url::parse(url).map_err(|e| format!("source {name}: {url:?}: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("source {name}: the URL must be http or https"));
    }
    Ok(Target::Http(url.to_owned()))
}

/// Parses one `--source NAME=URL` or `NAME=cmd:PROGRAM ARGS…`.
pub(crate) fn parse_source(text: &str) -> Result<SourceSpec, String> {
    let (name, rest) = text
        .split_once('=')
        .ok_or_else(|| format!("--source {text:?}: expected NAME=URL or NAME=cmd:COMMAND"))?;
    let id = source_id(name)?;
    let target = match rest.strip_prefix("cmd:") {
        Some(cmd) => {
            let argv: Vec<String> = cmd.split_whitespace().map(str::to_owned).collect();
            if argv.is_empty() {
                return Err(format!("source {name}: empty command"));
            }
            Target::Command {
                argv,
                env: BTreeMap::new(),
            }
        }
        None => http_target(name, rest)?,
    };
    Ok(SourceSpec { id, target })
}

/// Parses a `--sources` JSON file's text.
pub(crate) fn parse_sources_file(text: &str) -> Result<Vec<SourceSpec>, String> {
    let entries: BTreeMap<String, FileEntry> =
        serde_json::from_str(text).map_err(|e| format!("sources file: {e}"))?;
    entries
        .into_iter()
        .map(|(name, e)| {
            let id = source_id(&name)?;
            let target = match (e.url, e.command) {
                (Some(url), None) if e.env.is_empty() => http_target(&name, &url)?,
                (None, Some(argv)) if !argv.is_empty() => Target::Command { argv, env: e.env },
                _ => {
                    return Err(format!(
                        "source {name}: give either \"url\" or a non-empty \"command\" (with an optional \"env\")"
                    ));
                }
            };
            Ok(SourceSpec { id, target })
        })
        .collect()
}

/// Every source the flags name, in order (flags first, then the file's in
/// name order); a name used twice is refused.
pub(crate) fn specs(args: &GatewayArgs) -> Result<Vec<SourceSpec>, String> {
    let mut out: Vec<SourceSpec> = args
        .sources
        .iter()
        .map(|s| parse_source(s))
        .collect::<Result<_, _>>()?;
    if let Some(path) = &args.sources_file {
        out.extend(parse_sources_file(&read_file(path)?)?);
    }
    let mut seen = std::collections::BTreeSet::new();
    for s in &out {
        if !seen.insert(s.id.as_str()) {
            return Err(format!("source {} is configured twice", s.id));
        }
    }
    Ok(out)
}

fn read_file(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))
}

/// What a source last listed (already rewritten for the gateway).
#[derive(Default)]
struct Listed {
    /// Its tools, descriptors rewritten.
    tools: Vec<Tool>,
    /// Its resources' downstream URIs (for rewriting text bodies).
    uris: Vec<String>,
}

/// One source at run time.
pub(crate) struct Source {
    /// Its configuration.
    pub(crate) spec: SourceSpec,
    /// The live connection's peer, `None` while down.
    peer: watch::Sender<Option<Peer<RoleClient>>>,
    listed: Mutex<Listed>,
    /// Wakes the supervisor: a call failed, or the source said its lists
    /// changed.
    poke: Notify,
    /// Set by a poke that asks for a reconnection (not just a re-list).
    broken: std::sync::atomic::AtomicBool,
    /// Calls in flight.
    slots: Semaphore,
}

/// A source's connection could not be used.
#[derive(Debug)]
pub(crate) struct Unavailable(pub(crate) SourceId);

impl Unavailable {
    /// The message a client sees.
    pub(crate) fn message(&self) -> String {
        format!(
            "source {} is unavailable (the gateway is reconnecting to it): call again later",
            self.0
        )
    }
}

impl Source {
    fn new(spec: SourceSpec, bounds: &Bounds) -> Self {
        Self {
            spec,
            peer: watch::Sender::new(None),
            listed: Mutex::new(Listed::default()),
            poke: Notify::new(),
            broken: std::sync::atomic::AtomicBool::new(false),
            slots: Semaphore::new(bounds.max_concurrent),
        }
    }

    /// The live peer, or [`Unavailable`].
    pub(crate) fn peer(&self) -> Result<Peer<RoleClient>, Unavailable> {
        self.peer
            .borrow()
            .clone()
            .ok_or_else(|| Unavailable(self.spec.id.clone()))
    }

    /// A call to the source failed at the transport: reconnect.
    pub(crate) fn failed(&self) {
        self.broken
            .store(true, std::sync::atomic::Ordering::Release);
        self.poke.notify_one();
    }

    /// The source's known resource URIs.
    pub(crate) fn uris(&self) -> Vec<String> {
        self.listed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .uris
            .clone()
    }

    /// Adds URIs a listing returned to the known ones.
    pub(crate) fn learn(&self, uris: impl IntoIterator<Item = String>) {
        let mut listed = self.listed.lock().unwrap_or_else(PoisonError::into_inner);
        for u in uris {
            if listed.uris.len() >= MAX_KNOWN_URIS {
                break;
            }
            if !listed.uris.contains(&u) {
                listed.uris.push(u);
            }
        }
    }

    /// Waits for a call slot (part of the call's time budget).
    pub(crate) async fn slot(
        &self,
        bounds: &Bounds,
    ) -> Result<tokio::sync::SemaphorePermit<'_>, Unavailable> {
        match bounds::within(bounds.call, self.slots.acquire()).await {
            Ok(Ok(p)) => Ok(p),
            _ => Err(Unavailable(self.spec.id.clone())),
        }
    }
}

/// rmcp's client handler of one source: list changes wake its supervisor.
#[derive(Clone)]
struct Handler(Arc<Source>);

impl ClientHandler for Handler {
    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.0.poke.notify_one();
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.0.poke.notify_one();
    }

    async fn on_resource_updated(
        &self,
        _params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.0.poke.notify_one();
    }
}

type Running = RunningService<RoleClient, Handler>;

/// A live connection, and the child process of a stdio source.
type Connection = (Running, Option<tokio::process::Child>);

/// Connects to `source` once (no timeout here: the caller bounds it).
async fn connect(source: &Arc<Source>, bounds: &Bounds) -> Result<Connection, String> {
    let handler = Handler(Arc::clone(source));
    match &source.spec.target {
        Target::Http(url) => {
            let http = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(bounds.connect)
                .build()
                .map_err(|e| format!("building the HTTP client: {e}"))?;
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .max_sse_event_size(bounds.max_response)
                .max_concurrent_requests(bounds.max_concurrent);
            config.max_json_response_size = bounds.max_response;
            config.max_error_response_size = config.max_error_response_size.min(64 * 1024);
            let transport = StreamableHttpClientTransport::with_client(http, config);
            let running = handler.serve(transport).await.map_err(|e| e.to_string())?;
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
            let mut child = cmd
                .spawn()
                .map_err(|e| format!("starting {:?}: {e}", argv[0]))?;
            let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
                return Err("the child's pipes are missing".into());
            };
            let transport = AsyncRwTransport::new_client(stdout, stdin)
                .with_max_line_length(bounds.max_response);
            let running = handler.serve(transport).await.map_err(|e| e.to_string())?;
            // The child lives as long as the connection: the supervisor
            // drops it (killing it, `kill_on_drop`) when the connection ends.
            Ok((running, Some(child)))
        }
    }
}

/// The gateway: the URI mapping and the sources.
pub(crate) struct Gateway {
    /// The core's mapping and rewriters.
    pub(crate) map: UriMap,
    /// The sources, in configuration order.
    pub(crate) sources: Vec<Arc<Source>>,
    /// The bounds of every call.
    pub(crate) bounds: Bounds,
    /// Names no source may take (the endpoint's own tools).
    reserved: Vec<String>,
}

impl Gateway {
    /// A gateway without sources (nothing is forwarded).
    pub(crate) fn none() -> Self {
        Self {
            map: UriMap::default(),
            sources: Vec::new(),
            bounds: Bounds::of(&GatewayArgs::default()),
            reserved: Vec::new(),
        }
    }

    /// Whether any source is configured.
    pub(crate) fn is_active(&self) -> bool {
        !self.sources.is_empty()
    }

    /// Starts a supervisor per source and waits (up to the connect timeout)
    /// for their first connections; refuses tool-name collisions among the
    /// tools then known. `reserved` are the built-in tools' names.
    pub(crate) async fn start(args: &GatewayArgs, reserved: Vec<String>) -> Result<Self, String> {
        let specs = specs(args)?;
        let bounds = Bounds::of(args);
        // reqwest over rustls needs a process-wide provider (ring, as the
        // client documents' fetcher installs it).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let sources: Vec<Arc<Source>> = specs
            .into_iter()
            .map(|s| Arc::new(Source::new(s, &bounds)))
            .collect();
        let mut firsts = Vec::new();
        for source in &sources {
            let (tx, rx) = tokio::sync::oneshot::channel();
            tokio::spawn(supervise(Arc::clone(source), bounds, tx));
            firsts.push((Arc::clone(source), rx));
        }
        for (source, rx) in firsts {
            match rx.await {
                Ok(Ok(())) => tracing::info!(source = %source.spec.id, "gateway: source connected"),
                Ok(Err(e)) => tracing::warn!(
                    source = %source.spec.id,
                    error = %e,
                    "gateway: source not reachable at start; its tools appear when it connects"
                ),
                Err(_) => {
                    tracing::warn!(source = %source.spec.id, "gateway: source supervisor ended");
                }
            }
        }
        let gateway = Self {
            map: UriMap::default(),
            sources,
            bounds,
            reserved,
        };
        gateway.check_names()?;
        Ok(gateway)
    }

    /// Refuses a tool name two sources (or a source and a built-in) share.
    fn check_names(&self) -> Result<(), String> {
        let mut owner: HashMap<String, String> = self
            .reserved
            .iter()
            .map(|n| (n.clone(), "the built-in tools".to_owned()))
            .collect();
        for source in &self.sources {
            let listed = source.listed.lock().unwrap_or_else(PoisonError::into_inner);
            for tool in &listed.tools {
                let here = format!("source {}", source.spec.id);
                if let Some(first) = owner.insert(tool.name.to_string(), here.clone()) {
                    return Err(format!(
                        "gateway: tool {:?} is offered by both {first} and {here}; tool names are \
                         never changed, so remove one of the two sources",
                        tool.name
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Re-reads a connected source's tools and resources.
async fn relist(
    source: &Source,
    peer: &Peer<RoleClient>,
    bounds: &Bounds,
    map: &UriMap,
) -> Result<(), String> {
    let tools = bounds::within(bounds.call, peer.list_all_tools())
        .await
        .map_err(|_| "listing tools timed out".to_owned())?
        .map_err(|e| format!("listing tools: {e}"))?;
    let tools = tools
        .iter()
        .filter_map(|t| tools::rewrite_descriptor(map, &source.spec.id, t))
        .collect();
    let mut uris = match bounds::within(bounds.call, resources::all_uris(peer)).await {
        Ok(Ok(u)) => u,
        _ => Vec::new(),
    };
    uris.truncate(MAX_KNOWN_URIS);
    let mut listed = source.listed.lock().unwrap_or_else(PoisonError::into_inner);
    listed.tools = tools;
    listed.uris = uris;
    Ok(())
}

/// One source's supervisor: connect, list, watch, reconnect with backoff.
/// `first` hears how the first attempt went.
async fn supervise(
    source: Arc<Source>,
    bounds: Bounds,
    first: tokio::sync::oneshot::Sender<Result<(), String>>,
) {
    let map = UriMap::default();
    let mut first = Some(first);
    let mut attempt: u32 = 0;
    loop {
        let connected = match bounds::within(bounds.connect, connect(&source, &bounds)).await {
            Ok(Ok((running, child))) => {
                let peer = running.peer().clone();
                match relist(&source, &peer, &bounds, &map).await {
                    Ok(()) => Ok((running, child)),
                    Err(e) => {
                        let _ = running.cancel().await;
                        Err(e)
                    }
                }
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err("connecting timed out".to_owned()),
        };
        let (running, child) = match connected {
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
        if let Some(tx) = first.take() {
            let _ = tx.send(Ok(()));
        } else {
            tracing::info!(source = %source.spec.id, "gateway: source reconnected");
        }
        watch_connection(&source, &running, &bounds, &map).await;
        source.peer.send_replace(None);
        tracing::warn!(source = %source.spec.id, "gateway: source down; reconnecting");
        let _ = running.cancel().await;
        drop(child);
    }
}

/// Returns when the connection is closed or unhealthy: a failed call's poke,
/// a closed transport, or a ping without an answer (every
/// [`HEALTH_EVERY`]). A poke for a list change re-reads the lists.
async fn watch_connection(source: &Source, running: &Running, bounds: &Bounds, map: &UriMap) {
    let peer = running.peer().clone();
    loop {
        let poked = tokio::select! {
            () = source.poke.notified() => true,
            () = tokio::time::sleep(HEALTH_EVERY) => false,
        };
        if running.is_closed() || source.broken.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let healthy = if poked {
            relist(source, &peer, bounds, map).await.is_ok()
        } else {
            let ping = peer.send_request(ClientRequest::PingRequest(PingRequest::default()));
            matches!(bounds::within(bounds.call, ping).await, Ok(Ok(_)))
        };
        if !healthy {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sources() {
        let s = parse_source("docs=http://127.0.0.1:3001/mcp").unwrap();
        assert_eq!(s.id.as_str(), "docs");
        assert_eq!(s.target, Target::Http("http://127.0.0.1:3001/mcp".into()));
        let s = parse_source("fs=cmd:npx -y server-fs /tmp").unwrap();
        assert!(
            matches!(&s.target, Target::Command { argv, .. } if argv == &["npx", "-y", "server-fs", "/tmp"])
        );
        for bad in [
            "docs",
            "Docs=http://x",
            "d=ftp://x",
            "d=cmd:  ",
            "=http://x",
        ] {
            assert!(parse_source(bad).is_err(), "{bad}");
        }
        let file = r#"{"a": {"url": "https://a.example/mcp"}, "b": {"command": ["node", "s.mjs"], "env": {"K": "V"}}}"#;
        let specs = parse_sources_file(file).unwrap();
        assert_eq!(specs.len(), 2);
        assert!(matches!(&specs[1].target, Target::Command { env, .. } if env["K"] == "V"));
        assert!(parse_sources_file(r#"{"a": {"url": "http://x", "command": ["y"]}}"#).is_err());
        assert!(parse_sources_file(r#"{"a": {"uri": "http://x"}}"#).is_err());
    }

    fn with_tools(id: &str, names: &[&'static str]) -> Arc<Source> {
        let spec = parse_source(&format!("{id}=http://127.0.0.1:1/mcp")).unwrap();
        let source = Source::new(spec, &Bounds::of(&GatewayArgs::default()));
        source.listed.lock().unwrap().tools = names
            .iter()
            .map(|n| Tool::new(*n, "", Arc::new(rmcp::model::JsonObject::new())))
            .collect();
        Arc::new(source)
    }

    fn gateway(sources: Vec<Arc<Source>>) -> Gateway {
        Gateway {
            sources,
            reserved: vec!["execute".into()],
            ..Gateway::none()
        }
    }

    #[test]
    fn tool_names_collide_with_sources_and_built_ins() {
        let ok = gateway(vec![with_tools("a", &["x", "y"]), with_tools("b", &["z"])]);
        ok.check_names().unwrap();
        let names: Vec<String> = ok.tools().iter().map(|t| t.name.to_string()).collect();
        assert_eq!(names, ["x", "y", "z"]);
        assert_eq!(ok.find("z").unwrap().0.spec.id.as_str(), "b");
        assert!(ok.find("execute").is_none());

        let twice = gateway(vec![with_tools("a", &["x"]), with_tools("b", &["x"])]);
        let e = twice.check_names().unwrap_err();
        assert!(
            e.contains("tool \"x\" is offered by both source a and source b"),
            "{e}"
        );
        // Past the start (a later re-listing), the first owner keeps it.
        assert_eq!(twice.find("x").unwrap().0.spec.id.as_str(), "a");
        assert_eq!(twice.tools().len(), 1);

        let builtin = gateway(vec![with_tools("a", &["execute"])]);
        let e = builtin.check_names().unwrap_err();
        assert!(e.contains("both the built-in tools and source a"), "{e}");
        assert!(builtin.tools().is_empty());
    }

    #[test]
    fn a_name_twice_is_refused() {
        let args = GatewayArgs {
            sources: vec!["a=http://x/mcp".into(), "a=cmd:y".into()],
            ..GatewayArgs::default()
        };
        assert!(specs(&args).unwrap_err().contains("twice"));
    }
}
