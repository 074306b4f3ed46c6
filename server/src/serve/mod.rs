//! `portcullis serve`: the axum adapter. Every route hands the raw request
//! parts (query, body, `Authorization`) to the core and copies the core's
//! answer; the only things decided here are transport matters (which page
//! template, body limits, cookies, CSRF).
//!
//! Routes:
//!
//! | route | what |
//! |---|---|
//! | `GET /.well-known/oauth-authorization-server` | RFC 8414 (the issuer has no path, so this is also the path-suffixed form) |
//! | `GET /.well-known/oauth-protected-resource/mcp/{key}` | RFC 9728, at the resource's own path-suffixed URL only |
//! | `POST /register` | RFC 7591 (stateless) |
//! | `GET, POST /authorize` | sign-in, consent, decision |
//! | `POST /token`, `POST /revoke` | RFC 6749, RFC 7009 |
//! | `ANY /mcp/{key}` | the MCP server: rmcp's Streamable HTTP transport behind the bearer check and the strict JSON check ([`mcp`]) |
//! | `GET, POST /_agent-native/open` | the open route; its `navigate` command goes to the browser session's tab ([`navigate`]) |
//! | `GET, POST /agents` | sign-in/out, the user's connections, revoke; the connected tab |
//! | `GET /agents/app.js` | the connected tab's script |
//! | `/agents/tab/*` | the tab channel ([`tab`]) |
//! | `GET, POST /agents/granted`, `POST /agents/grants/apps` | the apps each grant reaches: the form per grant, and the same as JSON ([`granted`]) |
//! | `GET /agents/apps.js`, `POST /agents/apps/*` | the MCP Apps host: App Views in the Agents page ([`apps`]) |
//! | `GET, POST /app/notes` | the demo notes app's own API ([`notes`]) |
//!
//! The MCP URL is `<public-url>/mcp/<site public key>`: the resource URL of
//! the core (`resource_prefix + public_key`). Rotating the site key
//! (`portcullis site rotate-key`) moves it; the old URL answers 404.
//! There is no alias: RFC 9728 §3.3 has a client refuse metadata whose
//! `resource` differs from the URL it used, so a bare `/mcp` (a redirect or a
//! second name) and a root `/.well-known/oauth-protected-resource` (whose
//! resource would be the origin) would each fail that check. The banner and
//! the Agents page print the one URL.

mod answer;
mod apps;
mod browser;
mod granted;
mod host;
mod jobs;
mod listen;
mod mcp;
mod navigate;
mod notes;
mod relay;
mod respond;
mod run;
mod skills;
mod sources;
mod tab;
mod trace;
mod work;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use axum::routing::{get, post};
use portcullis_axum::Portcullis;
use portcullis_core::jwt::SigningKey;
use portcullis_core::ledger::RequestId;
use portcullis_core::link::OpenRoute;
use portcullis_core::scope::{SKILLS_READ, SKILLS_WRITE};
use portcullis_core::site::SiteId;
use portcullis_core::store::StoreError;
use portcullis_core::{Engine, Policy};
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::timeout::TimeoutLayer;

use crate::cli::{ConnLimits, ServeArgs};
use crate::db::{Db, DbWrite, Location};
use crate::keys::LoosePermissions;
use crate::notify::{self, Event, Fanout};
use crate::session::Sessions;
use crate::session_file::SessionFile;
use crate::{clock, setup};

/// The transaction a write handler's operation is applied to: one
/// operation of a redb group commit, or a PostgreSQL transaction of its own
/// (see [`portcullis_axum::store`]).
pub(crate) type AppWrite<'t, 'b, 'w> = portcullis_axum::store::Txn<'t, 'b, DbWrite<'w>>;

/// Largest request body accepted anywhere (the token endpoint's limit,
/// [`portcullis_core::token::MAX_BODY_LEN`]; registration documents are
/// smaller).
const BODY_LIMIT: usize = portcullis_core::token::MAX_BODY_LEN;

/// What every handler shares: one field per job.
pub(crate) struct App {
    /// The agent access: the OAuth routes, the MCP guard, the runs of the
    /// execution ledger and the store's writer (on redb concurrent
    /// requests' operations share one durable commit; on PostgreSQL each
    /// has its own retried transaction).
    portcullis: Portcullis<Db>,
    /// The signed-in browser: its sessions and the public origin.
    browser: Browser,
    /// The connected tab's channel and the other instances.
    channel: Channel,
    /// The downstream MCP servers exposed on the MCP endpoint (none
    /// without `--source`).
    gateway: Arc<portcullis_gateway::Gateway>,
    /// The MCP Apps host: App Views and the sandbox's origin ([`apps`]).
    apps: apps::Apps,
    /// The demo notes app's data.
    notes: notes::Notes,
}

/// The signed-in browser: who a request's session cookie names, and the
/// public origin its pages and cookies live on.
pub(crate) struct Browser {
    /// The public origin, no trailing slash.
    public_url: String,
    /// Cookies are `Secure` (and `__Host-`) when the public URL is https.
    secure: bool,
    /// Signs the session cookies.
    session_key: SigningKey,
    /// The session epoch and the signed-out sessions (shared with the
    /// crate's [`host::DemoHost`], which reads the session on its pages).
    sessions: Arc<Sessions>,
    /// How long a session cookie lasts.
    session_ttl: Duration,
    /// On redb, the file beside it that keeps the session epoch and the
    /// sign-outs across restarts ([`crate::session_file`]); `None` on
    /// PostgreSQL, whose tables keep them ([`jobs`]).
    session_file: Option<SessionFile>,
    /// The open route's parser.
    open_route: OpenRoute,
}

/// The connected tab's channel: its mailboxes and long-polls, the jobs
/// and `navigate` commands queued for it, and what this instance tells
/// the others of a shared database.
pub(crate) struct Channel {
    /// The tabs' mailboxes and the reports awaited from them.
    relay: relay::Relay<tab::Snapshot>,
    /// On PostgreSQL, the tab's jobs and reports as rows, so a run on
    /// one instance reaches a tab polling on another ([`jobs`]); `None` on
    /// redb, where the relay's in-process queue is the whole path. Never
    /// dropped (the synchronous driver must not drop a connection on a
    /// runtime worker).
    jobs: Option<&'static jobs::JobTable>,
    /// The open route's `navigate` commands, per browser session.
    navigates: navigate::NavigateQueue,
    /// Tells the other instances on a shared database what changed
    /// ([`notify`]); does nothing on redb.
    fanout: Fanout,
    /// Becomes `true` when the server shuts down: long-polls end at once
    /// instead of holding the graceful shutdown for their 25 s.
    stopping: tokio::sync::watch::Receiver<bool>,
}

impl Channel {
    /// An empty channel over `jobs` (PostgreSQL) or the relay alone (redb),
    /// announcing through `fanout`, ending its long-polls when `stopping`.
    fn new(
        jobs: Option<&'static jobs::JobTable>,
        fanout: Fanout,
        stopping: tokio::sync::watch::Receiver<bool>,
    ) -> Self {
        Self {
            relay: relay::Relay::default(),
            jobs,
            navigates: navigate::NavigateQueue::default(),
            fanout,
            stopping,
        }
    }
}

type Shared = Arc<App>;

impl App {
    /// The apps (gateway sources) `principal`'s grant reaches
    /// ([`granted`]; `None`: an agent token, which reaches every app).
    async fn reach(
        &self,
        principal: Option<&portcullis_core::engine::Principal>,
    ) -> Result<portcullis_core::granted_apps::AppSelection, rmcp::ErrorData> {
        self.gateway.reach(&self.portcullis, principal).await
    }

    /// A downstream tool's call through the gateway; a call that now waits
    /// on an approval wakes its person's Agents page.
    async fn call_gateway(&self, call: portcullis_gateway::ToolCall) -> portcullis_gateway::Reply {
        let subject = call.principal.subject.clone();
        let reply = self.gateway.call(&self.portcullis, call).await;
        if reply.approval_asked {
            self.bump(&subject);
        }
        reply
    }

    /// The engine (its operations block: call them on the blocking pool).
    fn engine(&self) -> Arc<Engine<Arc<Db>>> {
        self.portcullis.engine()
    }

    /// The site.
    fn site(&self) -> &SiteId {
        self.portcullis.site_id()
    }

    /// Runs `f` on the blocking pool: engine operations do store I/O
    /// (an fsync per committed write).
    async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Self) -> T + Send + 'static,
    ) -> Result<T, Response> {
        let app = Arc::clone(self);
        tokio::task::spawn_blocking(move || f(&app))
            .await
            .map_err(|_| respond::internal("a blocking task failed"))
    }

    /// Runs the write `f` on the blocking pool through the crate's writer
    /// ([`Portcullis::commit`]): on redb `f` applies engine operations
    /// (`Engine::*_in`) to a transaction shared with other requests' writes;
    /// on PostgreSQL to one of its own, run again after a conflict (so `f`
    /// is `Fn`). Its answer comes back only once that transaction is
    /// durable. A failed commit answers with the store's error (nothing of
    /// `f` was applied).
    async fn write<T, E, F>(self: &Arc<Self>, f: F) -> Result<Result<T, E>, Response>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
        F: for<'t, 'b, 'w> Fn(&Self, &mut AppWrite<'t, 'b, 'w>) -> Result<T, E>
            + Send
            + Sync
            + 'static,
    {
        let app = Arc::clone(self);
        tokio::task::spawn_blocking(move || app.commit(f).unwrap_or_else(|e| Err(E::from(e))))
            .await
            .map_err(|_| respond::internal("a blocking task failed"))
    }

    /// [`App::write`] for an `f` whose answer has no store error of its
    /// own: a failed commit answers as [`respond::store`] says.
    async fn write_any<T, F>(self: &Arc<Self>, f: F) -> Result<T, Response>
    where
        T: Send + 'static,
        F: for<'t, 'b, 'w> Fn(&Self, &mut AppWrite<'t, 'b, 'w>) -> T + Send + Sync + 'static,
    {
        let app = Arc::clone(self);
        tokio::task::spawn_blocking(move || app.commit(f))
            .await
            .map_err(|_| respond::internal("a blocking task failed"))?
            .map_err(|e| respond::store(&e))
    }

    /// Applies `f` through the writer, on this (blocking) thread.
    fn commit<T, F>(self: &Arc<Self>, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'t, 'b, 'w> Fn(&Self, &mut AppWrite<'t, 'b, 'w>) -> T + Send + Sync + 'static,
    {
        let app = Arc::clone(self);
        self.portcullis.commit(move |txn| f(&app, txn))
    }

    /// Where the person approves request `id`: the Agents page (the
    /// connected tab shows its approval). No credential in it: the page
    /// needs the user's own session.
    pub(crate) fn approval_url(&self, id: RequestId) -> String {
        format!("{}/agents#approval-{id}", self.browser.public_url)
    }

    /// Something `subject`'s connected tab shows changed: wakes their
    /// long-polls here and on every other instance.
    fn bump(&self, subject: &str) {
        self.channel.relay.bump(subject);
        self.channel
            .fanout
            .announce(Event::Bump(subject.to_owned()));
    }

    /// A grant ended here: revoked by its user (`subject`), or a token
    /// revoked by its client at the revocation endpoint (RFC 7009 §2: the
    /// revocation of a refresh token ends its grant; the subject is not
    /// known there, `None`). What waits on that grant hears it now, not at
    /// the end of its wait: every wait for a decision looks again (an App's
    /// call waiting on an approval of the grant is refused at once, its
    /// request being refused), and the tabs read their approvals again (an
    /// ended grant's approval card goes, its Views say they were revoked),
    /// `subject`'s or, when it is not known, every user's.
    fn grant_ended(&self, subject: Option<&str>) {
        self.portcullis.announce_all();
        match subject {
            Some(s) => self.bump(s),
            None => self.channel.relay.bump_all(),
        }
    }

    /// Re-reads the site after another instance or the admin CLI changed
    /// it (or the notify listener reconnected and may have missed that):
    /// a rotated key moves the MCP URL, an off switch answers 503.
    /// Blocking.
    fn site_changed(&self) {
        // The change's own row notification may not have reached the
        // store's cache yet (another connection): read the site afresh.
        if let Db::Postgres(store) = &**self.engine().store() {
            store.clear_cache();
        }
        let before = self.portcullis.mcp_url();
        match self.portcullis.reload_site() {
            Ok(()) if self.portcullis.mcp_url() != before => {
                tracing::info!("the site key changed: the MCP URL moved");
            }
            Ok(()) => {}
            Err(e) => tracing::warn!(error = %e, "re-reading the site failed"),
        }
    }

    /// Hands the report on `job` to this instance's run awaiting it,
    /// if there is one and the report is in the job table. Blocking.
    fn collect_report(&self, job: &str) {
        let Some(jobs) = self.channel.jobs else {
            return;
        };
        if !self.channel.relay.awaits(job) {
            return;
        }
        match jobs.collect(job) {
            Ok(Some(report)) => {
                self.channel.relay.deliver(job, report);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "collecting a tab report failed"),
        }
    }

    /// An event another instance announced.
    fn on_event(&self, event: Option<Event>) {
        match event {
            Some(Event::Bump(subject)) => {
                self.channel.relay.bump(&subject);
                // A bump may be a decision taken there on a request that
                // waits here (an App's call, a client's retry): every
                // waiter looks again at once, not at its next look.
                self.portcullis.announce_all();
            }
            Some(Event::Report(job)) => self.collect_report(&job),
            Some(Event::SignOut(sid, expires)) => {
                if !self.browser.sessions.remember(&sid, expires, clock::now()) {
                    // This copy is full: the database's says otherwise,
                    // or a new epoch is on its way; read it again.
                    self.reload_sessions();
                }
            }
            Some(Event::Epoch) => self.reload_sessions(),
            Some(Event::Site) => self.site_changed(),
            None => {
                // The listener (re)connected: whatever was announced while
                // it was down is in the database. Every long-poll answers
                // with a fresh snapshot, sessions and the site are re-read.
                self.channel.relay.bump_all();
                self.reload_sessions();
                self.site_changed();
            }
        }
    }

    /// Re-reads the browser sessions' epoch and signed-out set from a
    /// shared database. Blocking.
    fn reload_sessions(&self) {
        let Some(table) = self.channel.jobs else {
            return;
        };
        let now = clock::now().as_secs();
        match table
            .session_epoch()
            .and_then(|e| Ok((e, table.signed_out(now)?)))
        {
            Ok((epoch, out)) => self.browser.sessions.reset(epoch, out),
            Err(e) => tracing::warn!(error = %e, "re-reading the browser sessions failed"),
        }
    }
}

/// The policy of `args`: the core's defaults with the overrides applied.
fn policy(args: &ServeArgs) -> Policy {
    let mut p = Policy::default();
    if let Some(s) = args.access_token_ttl_secs {
        p.access_token_ttl = Duration::from_secs(s);
    }
    if let Some(s) = args.code_ttl_secs {
        p.authorization_code_ttl = Duration::from_secs(s);
    }
    if let Some(s) = args.grant_idle_ttl_secs {
        p.grant_idle_ttl = Duration::from_secs(s);
    }
    if let Some(s) = args.refresh_reuse_grace_secs {
        p.refresh_reuse_grace = Duration::from_secs(s);
    }
    if let Some(s) = args.jwt_leeway_secs {
        p.jwt_leeway = Duration::from_secs(s);
    }
    if let Some(ms) = args.execute_rate_interval_ms {
        p.execute_rate.interval_ms = ms;
    }
    if let Some(burst) = args.execute_rate_burst {
        p.execute_rate.burst = burst;
    }
    p.loopback_client_documents = args.dev_loopback_client_documents;
    // An instance that dies holding runs (their tickets are in its memory)
    // is taken for dead this long after its last renewal, and the others
    // end its runs (`unknownTail`).
    p.executor_lease_timeout = EXECUTOR_LEASE;
    p
}

/// How long an instance's executor lease lasts unrenewed
/// (`portcullis-axum` renews it every third of that).
const EXECUTOR_LEASE: Duration = Duration::from_secs(20);

/// The public origin: `--public-url` or `http://<bound address>`; it must be
/// an origin (no path, query or trailing slash) so the issuer's well-known
/// documents live at the root.
fn public_url(args: &ServeArgs, bound: SocketAddr) -> Result<String, String> {
    let url = args
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{bound}"));
    let url = url.trim_end_matches('/').to_owned();
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or("--public-url must start with http:// or https://")?;
    if rest.is_empty() || rest.contains(['/', '?', '#', '@']) {
        return Err("--public-url must be an origin (scheme, host and port only)".into());
    }
    Ok(url)
}

/// The `Host` values the MCP endpoint accepts (DNS-rebinding guard): the
/// public URL's authority and the bound address.
fn mcp_hosts(public: &str, bound: SocketAddr) -> Vec<String> {
    let authority = public
        .split_once("://")
        .map_or(public, |(_, rest)| rest)
        .to_owned();
    vec![authority, bound.to_string()]
}

/// `Strict-Transport-Security` with an https public URL: one year
/// (RFC 6797 §6.1.1 `max-age`, in seconds), this host only (the server does
/// not know what else its parent domain serves).
const HSTS: &str = "max-age=31536000";

/// The last segment of the crate's revocation endpoint (RFC 7009), under
/// its OAuth path (the root, or `Builder::oauth_path`).
const REVOCATION_SEGMENT: &str = "/revoke";

/// Around the crate's OAuth routes: a revocation the endpoint accepted may
/// have ended a grant, so what waits on grants hears it
/// ([`App::grant_ended`]). An accepted revocation of an unknown token
/// (RFC 7009 §2.2 answers it `200` too) only costs a look again.
async fn revocations(
    axum::extract::State(app): axum::extract::State<Shared>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let revoking = request.method() == axum::http::Method::POST
        && request.uri().path().ends_with(REVOCATION_SEGMENT);
    let response = next.run(request).await;
    if revoking && response.status().is_success() {
        app.grant_ended(None);
    }
    response
}

/// The router, with the layers every response passes (outermost last):
///
/// * the request timeout (tower-http `TimeoutLayer`, `408`) and the
///   body's idle timeout ([`portcullis_axum::body_timeout`]: a body that sends nothing for
///   `--body-timeout-secs` fails);
/// * request logging ([`trace`]);
/// * the response headers every answer carries: `X-Content-Type-Options:
///   nosniff`, `Cache-Control: no-store` unless the handler chose its own
///   (HTML pages send `no-store` themselves, the tab's script `no-cache`),
///   and `Strict-Transport-Security` when the public URL is https.
fn router(app: Shared, mcp_hosts: Vec<String>, limits: ConnLimits) -> Router {
    let secure = app.browser.secure;
    // The MCP body's limit is applied where the body is read
    // (`portcullis_axum::strict_json::strict`), not by a layer that every request would clone.
    let mcp = Router::new().route_service(
        "/mcp/{key}",
        app.portcullis.protect(mcp::endpoint(&app, mcp_hosts)),
    );
    let oauth = app
        .portcullis
        .routes()
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&app),
            revocations,
        ));
    let router = Router::new()
        .route("/sign-in", post(browser::sign_in_form))
        .route(
            portcullis_core::link::LinkConfig::DEFAULT_OPEN_PATH,
            get(browser::open).post(browser::open_sign_in),
        )
        .route("/agents", get(browser::agents).post(browser::agents_post))
        .route("/agents/app.js", get(browser::script))
        .route("/agents/tab/connect", post(tab::connect))
        .route("/agents/tab/heartbeat", post(tab::heartbeat))
        .route("/agents/tab/disconnect", post(tab::disconnect))
        .route("/agents/tab/work", get(tab::work))
        .route("/agents/tab/report", post(tab::report))
        .route("/agents/tab/decide", post(tab::decide))
        .route("/agents/tab/ack", post(tab::ack))
        .route(
            "/agents/granted",
            get(granted::page).post(granted::page_post),
        )
        .route("/agents/grants/apps", post(granted::json_post))
        .route("/app/notes", get(notes::list).post(notes::create))
        .merge(apps::routes())
        .route("/", get(browser::home))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(app)
        .merge(oauth)
        .merge(mcp)
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            Duration::from_secs(limits.request_timeout_secs),
        ))
        .layer(portcullis_axum::body_timeout::BodyIdleTimeoutLayer::new(
            Duration::from_secs(limits.body_timeout_secs),
        ))
        .layer(axum::middleware::from_fn(trace::requests))
        .layer(SetResponseHeaderLayer::if_not_present(
            header::CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ));
    if secure {
        router.layer(SetResponseHeaderLayer::overriding(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static(HSTS),
        ))
    } else {
        router
    }
}

/// Runs the server until SIGINT or SIGTERM, then finishes in-flight
/// requests and returns.
pub(crate) async fn run(args: ServeArgs) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .map_err(|e| format!("binding {}: {e}", args.addr))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    let public = public_url(&args, bound)?;
    let policy = policy(&args);
    let db = args.db.clone();
    let loose = if args.allow_insecure_key_file {
        LoosePermissions::Warn
    } else {
        LoosePermissions::Refuse
    };
    let dev_documents = args.dev_loopback_client_documents;
    let read_cache =
        (args.db_read_cache_ms > 0).then(|| Duration::from_millis(args.db_read_cache_ms));
    let key_path = crate::keys::key_path(&args.db)?;
    let (store, keys) =
        tokio::task::spawn_blocking(move || setup::open(&db, true, loose, read_cache))
            .await
            .map_err(|e| e.to_string())??;
    let (public_for_site, session_key) = (public.clone(), keys.session.clone());
    let fanout = Fanout::start(&args.db);
    let Kept {
        jobs,
        session_file,
        sessions,
    } = kept_state(&args, &fanout).await?;
    let sessions = Arc::new(sessions);
    let (host, consent_sources) = host::DemoHost::new(&session_key, &sessions, &public);
    let portcullis = Portcullis::builder(store, keys.keyring)
        .public_url(&public_for_site)
        .site(setup::SITE_ID, setup::SITE_NAME)
        .scope(SKILLS_READ, "search and read skills")
        .scope(
            SKILLS_WRITE,
            "run skills that change data (each write still asks you)",
        )
        .endpoint_scope(SKILLS_READ)
        .access_token_algorithm(args.access_token_alg.algorithm())
        .watch_key_file(key_path, loose)
        .policy(policy)
        .dev_loopback_client_documents(dev_documents)
        .build(host)
        .await
        .map_err(|e| e.to_string())?;
    // The synchronous PostgreSQL driver runs a small runtime of its own per
    // connection and panics when one is made, used or dropped on a Tokio
    // worker: the store is kept for the life of the process, from here on,
    // so that its pool is never dropped on a worker (whichever task held
    // the last `App`, or this function returning an error below, whose
    // message the panic would hide).
    let _ = KEEP_STORE.set(Arc::clone(portcullis.engine().store()));
    let reader = portcullis.clone();
    let site = tokio::task::spawn_blocking(move || reader.engine().site(reader.site_id()))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let gateway = sources::start(&args.gateway, &public, mcp::builtin_names()).await?;
    let _ = consent_sources.set(gateway.source_ids());
    let app = Arc::new(App {
        portcullis,
        browser: Browser {
            secure: public.starts_with("https://"),
            public_url: public.clone(),
            session_key,
            sessions,
            session_ttl: Duration::from_secs(args.session_ttl_secs),
            session_file,
            open_route: OpenRoute::new(),
        },
        channel: Channel::new(jobs, fanout, stop_rx.clone()),
        notes: notes::Notes::default(),
        gateway: Arc::new(gateway),
        apps: apps::Apps::start(&args, &public, stop_rx).await?,
    });
    // The listener connects on the blocking pool, for the same reason.
    listen_for_events(&app, &args).await?;
    banner(&public, &site.resource(), site.enabled, bound);
    if !app.browser.secure {
        tracing::warn!(
            "plain http: for development only (the session cookie reaches every port of this \
             host, the sign-in accepts any name); production needs an https --public-url and \
             the host's real sign-in"
        );
    }
    tokio::spawn(sweep_forever(Arc::clone(&app)));
    tracing::info!(addr = %bound, "listening");
    let router = router(app, mcp_hosts(&public, bound), args.limits);
    listen::serve(listener, router, args.limits, async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    })
    .await;
    tracing::info!("stopped");
    Ok(())
}

/// Starts listening for what other instances announce ([`notify`]; nothing
/// on redb), then re-reads the site: changes committed before the listener
/// started are in the store.
async fn listen_for_events(app: &Shared, args: &ServeArgs) -> Result<(), String> {
    let listener_app = Arc::downgrade(app);
    let db_args = args.db.clone();
    let for_listener = Arc::clone(app);
    tokio::task::spawn_blocking(move || {
        notify::listen(&db_args, &for_listener.channel.fanout, move |event| {
            if let Some(app) = listener_app.upgrade() {
                app.on_event(event);
            }
        })?;
        for_listener.site_changed();
        Ok::<_, String>(())
    })
    .await
    .map_err(|e| e.to_string())?
}

/// What the server keeps of its own beside the store, and the browser
/// sessions read from it ([`kept_state`]).
struct Kept {
    /// On PostgreSQL, the server's tables ([`jobs`]).
    jobs: Option<&'static jobs::JobTable>,
    /// On redb, the session file ([`crate::session_file`]).
    session_file: Option<SessionFile>,
    /// The session epoch and the signed-out sessions, as kept there.
    sessions: Sessions,
}

/// Opens what the server keeps beside the store: on a shared database the
/// job table (and the other server-side tables, [`jobs`]) and the browser
/// sessions read from it; on redb the session file beside the database
/// file and the sessions it keeps (or a new epoch, written there at once).
/// Called once the store is open: on redb this process then holds the
/// database, and so is the only writer of its session file.
async fn kept_state(args: &ServeArgs, fanout: &Fanout) -> Result<Kept, String> {
    match &args.db.db {
        Location::Postgres(url) => {
            let (url, schema) = (url.to_owned(), fanout.schema().to_owned());
            let (table, sessions) = tokio::task::spawn_blocking(move || {
                let table = jobs::JobTable::open(&url, &schema, navigate::BOUNDS)?;
                let sessions = shared_sessions(&table)?;
                Ok::<_, String>((table, sessions))
            })
            .await
            .map_err(|e| e.to_string())??;
            Ok(Kept {
                jobs: Some(&*Box::leak(Box::new(table))),
                session_file: None,
                sessions,
            })
        }
        Location::Redb(db) => {
            let file = SessionFile::beside(db);
            let (file, sessions) = tokio::task::spawn_blocking(move || {
                let sessions = file.restore(clock::now())?;
                tracing::debug!(file = %file.path().display(), "browser sessions restored");
                Ok::<_, String>((file, sessions))
            })
            .await
            .map_err(|e| e.to_string())??;
            Ok(Kept {
                jobs: None,
                session_file: Some(file),
                sessions,
            })
        }
    }
}

/// The browser sessions' shared epoch and signed-out set as the database
/// has them now.
fn shared_sessions(table: &jobs::JobTable) -> Result<Sessions, String> {
    let epoch = table.session_epoch()?;
    let out = table.signed_out(clock::now().as_secs())?;
    Ok(Sessions::restored(epoch, out))
}

/// The store of the running server, never dropped (see [`run`]).
static KEEP_STORE: std::sync::OnceLock<Arc<Db>> = std::sync::OnceLock::new();

/// How often the server's own state is swept.
const SWEEP_EVERY: Duration = Duration::from_mins(1);

/// Sweeps what is the server's own, until it stops: signed-out sessions
/// past their cookie's expiry, idle tab mailboxes and, on a shared
/// database, stale tab jobs. (Expired codes, grants and ledger results,
/// and the runs of instances whose lease lapsed, are `portcullis-axum`'s
/// sweep.)
async fn sweep_forever(app: Shared) {
    let mut stopping = app.channel.stopping.clone();
    loop {
        tokio::select! {
            () = tokio::time::sleep(SWEEP_EVERY) => {}
            _ = stopping.changed() => return,
        }
        let revoked = app.browser.sessions.sweep(clock::now());
        let mailboxes = app.channel.relay.sweep_idle(std::time::Instant::now());
        if let Some(jobs) = app.channel.jobs {
            match app.blocking(move |_| jobs.sweep()).await {
                Ok(Ok(n)) if n > 0 => tracing::info!(n, "stale tab jobs deleted"),
                Ok(Err(e)) => tracing::warn!(error = %e, "sweeping tab jobs failed"),
                _ => {}
            }
        }
        tracing::debug!(revoked, mailboxes, "in-memory state swept");
    }
}

fn banner(public: &str, mcp: &str, enabled: bool, bound: SocketAddr) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "Portcullis demo server on {bound}\n  MCP URL:     {mcp}\n  Agents page: {public}/agents\n  \
         Sign in:     open the Agents page and enter any user name (development sign-in)\n  \
         External agents: {}",
        if enabled {
            "enabled"
        } else {
            "DISABLED (portcullis site enable)"
        }
    );
    let _ = out.flush();
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down: finishing in-flight requests");
}
