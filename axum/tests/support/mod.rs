//! The test app and its clients.
//!
//! [`TestApp`] is a real server on a loopback port: the crate's routes, and
//! behind [`Portcullis::protect`] a small "MCP service" (an axum handler, not
//! rmcp: `protect` wraps any HTTP service) whose tools read the [`Agent`]
//! from the request and run their writes through [`Portcullis::run_once`].
//! Its [`Host`] trusts a cookie `user=<name>` (tests only) and sends a
//! signed-out user to `/login?next=…`.
//!
//! [`OAuthClient`] is an MCP client's side of the authorization flow, over
//! HTTP: discovery from the `401` challenge, the RFC 9728 and RFC 8414
//! documents, registration, `/authorize` with PKCE S256 through sign-in and
//! consent, `/token` and `/revoke`. [`Person`] is a signed-in user's browser
//! on the approvals page.

pub(crate) mod child;
pub(crate) mod client;
pub(crate) mod stores;

use portcullis_core::Own;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse as _, Response};
use portcullis_axum::{
    Action, Agent, BusinessError, Host, HostStore, Outcome, Portcullis, RequestId, SignedIn,
    see_other, url_encode,
};
use serde_json::{Value, json};

pub(crate) use client::{OAuthClient, Person, Tokens};

/// The scope every MCP request needs (the endpoint scope).
pub(crate) const READ: &str = "notes:read";
/// The scope of the writes.
pub(crate) const WRITE: &str = "notes:write";
/// Both.
pub(crate) const READ_WRITE: &str = "notes:read notes:write";

/// The host of the tests: a cookie `user=<name>` (and, optionally,
/// `session=<id>`) is who is signed in.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CookieHost;

/// The value of cookie `name` in a request's `Cookie` header.
pub(crate) fn cookie<'a>(parts: &'a Parts, name: &str) -> Option<&'a str> {
    parts
        .headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

impl Host for CookieHost {
    async fn signed_in(&self, parts: &Parts) -> Option<SignedIn> {
        let user = cookie(parts, "user").filter(|u| !u.is_empty())?;
        let signed_in = SignedIn::new(user);
        Some(match cookie(parts, "session") {
            Some(session) => signed_in.in_session(session),
            None => signed_in,
        })
    }

    fn sign_in(&self, return_to: &str) -> Response {
        see_other(&format!("/login?next={}", url_encode(return_to)))
    }
}

/// What the tools' actions did: every run of an action, counted and
/// logged (and, for the crash test, appended to a file and fsynced before
/// the action returns or hangs).
#[derive(Clone, Default)]
pub(crate) struct Effects {
    inner: Arc<EffectsInner>,
}

#[derive(Default)]
struct EffectsInner {
    runs: AtomicU32,
    log: Mutex<Vec<(String, String)>>,
    file: Option<PathBuf>,
}

impl Effects {
    /// Effects also appended to `file`, one line `<request id> <text>` each.
    pub(crate) fn to_file(file: PathBuf) -> Self {
        Self {
            inner: Arc::new(EffectsInner {
                file: Some(file),
                ..EffectsInner::default()
            }),
        }
    }

    /// How many times an action ran.
    pub(crate) fn runs(&self) -> u32 {
        self.inner.runs.load(Ordering::SeqCst)
    }

    /// How many times an action ran for request `id`.
    pub(crate) fn runs_of(&self, id: RequestId) -> usize {
        let id = id.to_string();
        self.log().iter().filter(|(r, _)| *r == id).count()
    }

    /// Every run: (request id, text).
    pub(crate) fn log(&self) -> Vec<(String, String)> {
        self.inner
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records one run; its number (from 1).
    fn record(&self, id: RequestId, text: &str) -> u32 {
        if let Some(path) = &self.inner.file {
            use std::io::Write as _;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .expect("open the effects file");
            writeln!(f, "{id} {text}").expect("append an effect");
            f.sync_all().expect("fsync the effects file");
        }
        self.inner
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((id.to_string(), text.to_owned()));
        self.inner.runs.fetch_add(1, Ordering::SeqCst) + 1
    }
}

/// How a [`TestApp`] is set up.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    /// How long `run_once` waits for a decision.
    pub(crate) approval_wait: Duration,
    /// Whether "always allow" is offered.
    pub(crate) auto_approval: bool,
    /// Where to listen (`127.0.0.1:0`: a free port).
    pub(crate) bind: String,
    /// Every lifetime and limit.
    pub(crate) policy: portcullis_axum::Policy,
    /// Other origins whose pages may post the forms and call the endpoint.
    pub(crate) allowed_origins: Vec<String>,
    /// Client ID metadata documents also over http from loopback.
    pub(crate) dev_loopback_documents: bool,
    /// The declared scopes and what each lets an agent do.
    pub(crate) scopes: Vec<(&'static str, &'static str)>,
    /// How access tokens are signed.
    pub(crate) access_token_alg: portcullis_core::jwt::Algorithm,
    /// Where the MCP service is, when another process serves it.
    pub(crate) mcp_origin: Option<String>,
    /// The key file to reload when it changes.
    pub(crate) key_file: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            approval_wait: Duration::from_secs(10),
            auto_approval: true,
            bind: "127.0.0.1:0".into(),
            policy: portcullis_axum::Policy::default(),
            allowed_origins: Vec::new(),
            dev_loopback_documents: false,
            scopes: vec![
                (READ, "read your notes"),
                (WRITE, "add notes (you approve each one)"),
            ],
            access_token_alg: portcullis_core::jwt::Algorithm::Hs256,
            mcp_origin: None,
            key_file: None,
        }
    }
}

/// The test app, served on a loopback port until dropped.
pub(crate) struct TestApp<S: HostStore> {
    pub(crate) portcullis: Portcullis<S>,
    /// `http://127.0.0.1:<port>`.
    pub(crate) origin: String,
    pub(crate) effects: Effects,
    server: Option<tokio::task::JoinHandle<()>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl<S: HostStore> Drop for TestApp<S> {
    fn drop(&mut self) {
        if let Some(server) = &self.server {
            server.abort();
        }
    }
}

/// The tools' state.
struct Tools<S: HostStore> {
    portcullis: Portcullis<S>,
    effects: Effects,
}

impl<S: HostStore> Clone for Tools<S> {
    fn clone(&self) -> Self {
        Self {
            portcullis: self.portcullis.clone(),
            effects: self.effects.clone(),
        }
    }
}

/// A keyring with one fresh random key.
pub(crate) fn keyring() -> portcullis_axum::Keyring {
    let mut key = [0u8; 32];
    rand::Rng::fill_bytes(&mut rand::rng(), &mut key);
    let mut keyring = portcullis_axum::Keyring::new();
    keyring
        .insert(
            "test",
            portcullis_core::jwt::SigningKey::from_bytes(&key).expect("a 32-byte key"),
        )
        .expect("insert the key");
    keyring.set_active("test").expect("activate the key");
    keyring
}

impl<S: HostStore> TestApp<S> {
    /// The app over `store` with default options.
    pub(crate) async fn start(store: S) -> Self {
        Self::start_with(store, keyring(), Effects::default(), &Options::default()).await
    }

    /// The app over `store`, signing with `keyring`, recording into
    /// `effects`.
    pub(crate) async fn start_with(
        store: S,
        keyring: portcullis_axum::Keyring,
        effects: Effects,
        options: &Options,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind(&options.bind)
            .await
            .expect("bind a loopback port");
        let origin = format!("http://{}", listener.local_addr().expect("local address"));
        let mut builder = Portcullis::builder(store, keyring);
        for origin in &options.allowed_origins {
            builder = builder.allowed_origin(origin);
        }
        for (scope, description) in &options.scopes {
            builder = builder.scope(*scope, *description);
        }
        if let Some(mcp_origin) = &options.mcp_origin {
            builder = builder.mcp_origin(mcp_origin);
        }
        if let Some(key_file) = &options.key_file {
            builder =
                builder.watch_key_file(key_file, portcullis_axum::keys::LoosePermissions::Refuse);
        }
        let portcullis = builder
            .public_url(&origin)
            .site("notes", "Notes")
            .endpoint_scope(READ)
            .approval_wait(options.approval_wait)
            .auto_approval(options.auto_approval)
            .policy(options.policy.clone())
            .dev_loopback_client_documents(options.dev_loopback_documents)
            .access_token_algorithm(options.access_token_alg)
            .build(CookieHost)
            .await
            .expect("build portcullis");
        let tools = Tools {
            portcullis: portcullis.clone(),
            effects: effects.clone(),
        };
        let mcp = axum::routing::any(tool::<S>).with_state(tools);
        let router = Router::new()
            .merge(portcullis.routes())
            .route_service(&portcullis.mcp_route(), portcullis.protect(mcp))
            .route(
                "/login",
                axum::routing::get(|| async { "the host's sign-in page\n" }),
            );
        let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
                .expect("serve");
        });
        Self {
            portcullis,
            origin,
            effects,
            server: Some(server),
            shutdown: Some(shutdown),
        }
    }

    /// A graceful stop: no new connections, the open ones finished.
    pub(crate) async fn stop(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(server) = self.server.take() {
            server.await.expect("the server stopped");
        }
    }

    /// The MCP URL agents are given.
    pub(crate) fn mcp_url(&self) -> String {
        self.portcullis.mcp_url()
    }

    /// A client that has discovered the app and registered.
    pub(crate) async fn client(&self) -> OAuthClient {
        OAuthClient::discover(&self.origin, &self.mcp_url()).await
    }

    /// `user`'s browser.
    pub(crate) fn person(&self, user: &str) -> Person {
        Person::new(&self.origin, user)
    }

    /// A client connected for `user` with `scope`: the client and its
    /// tokens.
    pub(crate) async fn connect(&self, user: &str, scope: &str) -> (OAuthClient, Tokens) {
        let client = self.client().await;
        let tokens = client.connect(user, scope).await;
        (client, tokens)
    }

    /// Switches the site on or off, as an admin command in another process
    /// would, and has the app read it again.
    pub(crate) async fn set_site_enabled(&self, enabled: bool) {
        let p = self.portcullis.clone();
        tokio::task::spawn_blocking(move || {
            p.engine()
                .set_site_enabled(Own, p.site_id(), enabled)
                .expect("switch the site");
            p.reload_site().expect("reload the site");
        })
        .await
        .expect("blocking task");
    }
}

/// The arguments of the `add` tool.
#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AddArgs {
    /// The note.
    pub(crate) text: String,
    /// The action sleeps this long before its effect.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) delay_ms: u64,
    /// After its effect, the action never returns.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) hang: bool,
    /// The action ends with this business error (after its effect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fail: Option<String>,
    /// The action panics (after its effect).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) panic: bool,
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl AddArgs {
    /// A note saying `text`.
    pub(crate) fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            ..Self::default()
        }
    }

    /// The exact argument bytes the tool binds its action to.
    pub(crate) fn bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("arguments as JSON")
    }
}

/// The body of a tool call: `{"tool", "requestId", "arguments"}`.
pub(crate) fn call_body(tool: &str, id: RequestId, arguments: &AddArgs) -> Value {
    json!({"tool": tool, "requestId": id.to_string(), "arguments": arguments})
}

/// The body of a tool call that names no request id, as most clients'
/// models make it: `{"tool", "arguments"}`.
pub(crate) fn unnamed_call_body(tool: &str, arguments: &AddArgs) -> Value {
    json!({"tool": tool, "arguments": arguments})
}

/// The request id the effects of a call that named none are logged under
/// (its action cannot know which request it runs for).
pub(crate) const UNNAMED: RequestId = RequestId::from_bytes([0; 16]);

/// A tool call on a task of its own (it may wait for a person).
pub(crate) fn spawn_call(
    client: &OAuthClient,
    access: &str,
    body: Value,
) -> tokio::task::JoinHandle<client::Answer> {
    let (client, access) = (client.clone(), access.to_owned());
    tokio::spawn(async move { client.call(&access, &body).await })
}

/// A fresh request id.
pub(crate) fn request_id() -> RequestId {
    RequestId::random(&mut rand::rng())
}

/// The MCP service: one POST per tool call.
///
/// * `whoami`: the agent's subject and scopes (no scope needed beyond the
///   endpoint's);
/// * `declared`: whether the agent's last `initialize` declared URL
///   elicitation, and the call as the service received it;
/// * `export`: `Agent::require("notes:write")`, then answers anyway (the
///   guard must turn it into a 403);
/// * `add`, `delete`: writes (kinds `add_note`, `delete_note`) under
///   `run_once`;
/// * `lookup`: a read action (kind `lookup`, scope `notes:read`) under
///   `run_once`.
///
/// * `tab`: a program of `arguments.steps` (each `{"text", "write"}`) run in
///   the caller's connected tab under `run_in_tab`, through [`TestTab`]
///   (which performs a step by recording its text, or with `lose` goes
///   away instead); with `connect`, the caller's grant's tab connects
///   first (visible unless `hidden`), as a page would.
///
/// A call of `add`, `delete` or `lookup` without `requestId` runs under
/// `run_joining` instead (its effects logged under [`UNNAMED`]). Every
/// answer carries `_outcome` (the typed outcome) and `_requestId`
/// ([`portcullis_axum::Ran::request_id`]) beside the agent's JSON.
async fn tool<S: HostStore>(State(t): State<Tools<S>>, parts: Parts, body: Bytes) -> Response {
    let Some(agent) = Agent::of(&parts).cloned() else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "no agent in extensions").into_response();
    };
    let Ok(call) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "not JSON").into_response();
    };
    match call["tool"].as_str() {
        Some("whoami") => Json(json!({
            "subject": agent.subject(),
            "scopes": agent.scopes().as_param(),
            "grant": agent.principal().is_some(),
        }))
        .into_response(),
        Some("declared") => Json(json!({
            "url_elicitation": agent.declared_url_elicitation(),
            "call": call,
        }))
        .into_response(),
        Some("export") => match agent.require(WRITE) {
            Ok(()) => Json(json!({"exported": true})).into_response(),
            Err(e) => Json(json!({"error": e.to_string()})).into_response(),
        },
        Some(name @ ("add" | "delete" | "lookup")) => {
            let id = match &call["requestId"] {
                Value::Null => None,
                named => match named.as_str().and_then(|s| RequestId::parse(s).ok()) {
                    Some(id) => Some(id),
                    None => return (StatusCode::BAD_REQUEST, "requestId").into_response(),
                },
            };
            let Ok(args) = serde_json::from_value::<AddArgs>(call["arguments"].clone()) else {
                return (StatusCode::BAD_REQUEST, "arguments").into_response();
            };
            let bytes = args.bytes();
            let action = match name {
                "add" => Action::write("add_note", WRITE, &bytes),
                "delete" => Action::write("delete_note", WRITE, &bytes),
                _ => Action::read("lookup", READ, &bytes),
            }
            .expect("a valid action");
            let effects = t.effects.clone();
            let ran = match id {
                Some(id) => {
                    t.portcullis
                        .run_once(&agent, id, action, move || perform(effects, id, args))
                        .await
                }
                None => {
                    t.portcullis
                        .run_joining(&agent, action, move || perform(effects, UNNAMED, args))
                        .await
                }
            };
            let mut answer = ran.answer().clone();
            answer["_requestId"] = json!(ran.request_id().to_string());
            // The typed outcome, as the tool saw it, next to the agent's JSON.
            answer["_outcome"] = json!(match ran.outcome() {
                Outcome::Done(_) => "done",
                Outcome::Failed(_) => "failed",
                Outcome::Pending(_) => "pending",
                Outcome::Refused(_) => "refused",
                _ => "other",
            });
            Json(answer).into_response()
        }
        Some("tab") => tab_program(&t, &agent, &call).await,
        _ => (StatusCode::BAD_REQUEST, "no such tool").into_response(),
    }
}

/// The page of the `tab` tool: performs a step by recording its text in
/// the effects (its report is `{"note": text}`), or, when `lose` is set,
/// goes away without a report.
pub(crate) struct TestTab {
    effects: Effects,
    /// With `lose`: reloads the page (its connection ends) before the job
    /// would be performed.
    lose: Option<Arc<dyn Fn() + Send + Sync>>,
    origin: String,
    /// Every job it was handed.
    pub(crate) jobs: Mutex<Vec<portcullis_axum::TabJob>>,
}

impl portcullis_axum::TabChannel for TestTab {
    fn perform(&self, job: portcullis_axum::TabJob) -> portcullis_axum::TabFuture {
        self.jobs.lock().expect("jobs").push(job.clone());
        if let Some(reload) = &self.lose {
            let reload = Arc::clone(reload);
            return Box::pin(async move {
                tokio::task::spawn_blocking(move || reload())
                    .await
                    .expect("the page reloads");
                None
            });
        }
        let effects = self.effects.clone();
        Box::pin(async move {
            let args: Value = serde_json::from_slice(job.action.arguments()?).ok()?;
            let text = args["text"].as_str()?.to_owned();
            effects.record(job.request_id, &text);
            Some(portcullis_core::ledger::Report::ok(
                json!({"note": text}).to_string(),
            ))
        })
    }

    fn approval_url(&self, id: RequestId) -> String {
        format!("{}/tab#r-{id}", self.origin)
    }
}

/// The `tab` tool (see [`tool`]).
async fn tab_program<S: HostStore>(t: &Tools<S>, agent: &Agent, call: &Value) -> Response {
    let args = &call["arguments"];
    let Some(id) = call["requestId"]
        .as_str()
        .and_then(|s| RequestId::parse(s).ok())
    else {
        return (StatusCode::BAD_REQUEST, "requestId").into_response();
    };
    let Some(grant) = agent.principal().map(|p| p.grant) else {
        return (StatusCode::BAD_REQUEST, "no grant").into_response();
    };
    // The page as `page`, connecting (or reloading) as the tab.
    let connect = {
        let (p, subject, visible) = (
            t.portcullis.clone(),
            agent.subject().to_owned(),
            args["hidden"] != true,
        );
        move |page: &str| {
            let hello = portcullis_core::tab::TabHello {
                browser_session: "session-1".into(),
                tab_id: "tab-1".into(),
                page_instance: page.into(),
                visible,
            };
            let now = portcullis_core::Timestamp::from_secs(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .expect("after 1970")
                    .as_secs(),
            );
            p.engine()
                .connect_tab(Own, p.site_id(), &subject, &grant, &hello, now)
                .expect("the page connects");
        }
    };
    if args["connect"] == true {
        let connect = connect.clone();
        tokio::task::spawn_blocking(move || connect("page-1"))
            .await
            .expect("connect the tab");
    }
    let steps: Option<Vec<Action>> = args["steps"].as_array().map(|steps| {
        steps
            .iter()
            .map(|s| {
                let bytes = serde_json::to_vec(&json!({"text": s["text"]})).expect("JSON");
                let action = if s["write"] == true {
                    Action::write("add_note", WRITE, &bytes)
                } else {
                    Action::read("lookup", READ, &bytes)
                }
                .expect("a valid action");
                if s["drives_page"] == true {
                    action.driving_page()
                } else {
                    action
                }
            })
            .collect()
    });
    let Some(steps) = steps else {
        return (StatusCode::BAD_REQUEST, "steps").into_response();
    };
    let code = json!({"steps": args["steps"]}).to_string();
    let params = portcullis_core::ledger::ExecuteParams::new(&id.to_string(), code, None)
        .expect("valid params");
    let program = portcullis_axum::Program::new(params, steps).expect("a program");
    let tab = Arc::new(TestTab {
        effects: t.effects.clone(),
        lose: (args["lose"] == true)
            .then(|| Arc::new(move || connect("page-2")) as Arc<dyn Fn() + Send + Sync>),
        origin: "http://tab.test".into(),
        jobs: Mutex::default(),
    });
    let waits = portcullis_axum::TabWaits {
        approval: Duration::ZERO,
        running: Duration::from_secs(10),
    };
    let ran = t.portcullis.run_in_tab(agent, program, tab, waits).await;
    let mut answer = ran.answer().clone();
    answer["_outcome"] = json!(match ran.outcome() {
        Outcome::Done(_) => "done",
        Outcome::Failed(_) => "failed",
        Outcome::Pending(_) => "pending",
        Outcome::Refused(_) => "refused",
        _ => "other",
    });
    Json(answer).into_response()
}

/// The action of `add`, `delete` and `lookup`.
async fn perform(effects: Effects, id: RequestId, args: AddArgs) -> Result<Value, BusinessError> {
    if args.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(args.delay_ms)).await;
    }
    let run = effects.record(id, &args.text);
    if args.hang {
        std::future::pending::<()>().await;
    }
    assert!(!args.panic, "the action panicked (as the test asked)");
    match args.fail {
        Some(code) => Err(BusinessError::new(code, "the note could not be kept")),
        None => Ok(json!({"note": args.text, "run": run})),
    }
}

/// Asserts `answer` is a finished request's result `{"ok": true, "status":
/// "done", "result": …}` and returns the result.
#[track_caller]
pub(crate) fn done(answer: &Value) -> &Value {
    assert_eq!(answer["ok"], true, "{answer}");
    assert_eq!(answer["status"], "done", "{answer}");
    &answer["result"]
}

/// The error code of a refused answer `{"ok": false, "error": {"code"}}`.
#[track_caller]
pub(crate) fn error_code(answer: &Value) -> &str {
    assert_eq!(answer["ok"], false, "{answer}");
    answer["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("no error code in {answer}"))
}

/// Runs a scenario `async fn name<S: HostStore>(store: S)` on every store,
/// as one test each: memory, redb (a file in a temporary directory) and,
/// when `PORTCULLIS_TEST_POSTGRES_URL` is set, PostgreSQL.
#[macro_export]
macro_rules! on_every_store {
    ($($scenario:ident),+ $(,)?) => {
        $(
            mod $scenario {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn memory() {
                    super::$scenario(portcullis_store_memory::MemoryStore::new()).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn redb() {
                    let db = $crate::support::stores::TempRedb::new();
                    super::$scenario(db.store()).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    if let Some(db) = $crate::support::stores::TempPostgres::new().await {
                        super::$scenario(db.store()).await;
                        db.drop_schema().await;
                    }
                }
            }
        )+
    };
}

/// The wall clock as the core reads it.
pub(crate) fn now() -> portcullis_core::Timestamp {
    portcullis_core::Timestamp::from_secs(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs(),
    )
}
