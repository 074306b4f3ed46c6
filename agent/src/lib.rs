//! `portcullis agent`: an external MCP agent of a Portcullis server, the
//! other half of the protocol, built on the core's sans-IO
//! [`ClientLoop`](portcullis_core::agent_loop::ClientLoop).
//!
//! The crate is the agent without the server: it depends on the policy
//! core, rmcp's client side, reqwest and tokio, never on the HTTP server or
//! a store. The `portcullis` binary embeds it as its `agent` subcommand
//! ([`AgentArgs`], then [`run_blocking`]); another binary can do the same.
//!
//! Its public API is what that takes: [`AgentArgs`] (with [`AgentAction`]
//! and [`Revision`]), [`run()`] or [`run_blocking`], and [`AgentError`].
//! Progress and the result go to stdout, one line each; the log (one line
//! per MCP call, target `portcullis::agent`) goes through `tracing`, to
//! whatever subscriber the binary installs.
//!
//! The crate owns the agent's I/O; every protocol decision is the core's:
//!
//! * **Arguments** (`args`): the clap arguments of `portcullis agent`.
//! * **Authentication** (`Auth` here, rmcp's `auth` module): discovery of
//!   the protected-resource metadata (RFC 9728) and of the authorization
//!   server's metadata (RFC 8414), dynamic client registration (RFC 7591)
//!   once per token file, an authorization-code request with PKCE S256
//!   (RFC 7636) and the MCP `resource` (RFC 8707), and the user's consent in
//!   a browser: the URL is printed (and opened with `--open`), and the
//!   redirect comes back to a loopback listener (`consent`) that checks
//!   `state`. Tokens and the registration live in a `0600` file (`store`);
//!   an expired access token is refreshed before a call.
//! * **MCP calls** (`mcp`): rmcp's Streamable HTTP client transport, one
//!   POST per JSON-RPC request, with one log line per call (request id,
//!   protocol version, capability, outcome, duration; never a token or the
//!   surface's description). The agent speaks 2026-07-28 when the server
//!   does (declaring URL elicitation and tasks), else 2025-11-25 (URL
//!   elicitation), or an older revision when told (`--protocol-version`).
//! * **The loop** (`run`): `portcullis agent run '<code>'` asks the core's
//!   loop for each step and does it: authenticate, describe, invoke
//!   `execute` with a fresh request id, print (and with `--open` open) the
//!   approval page once, resume the same request while it is pending (the
//!   same id, a multi round-trip retry with the server's state, or
//!   `tasks/get` of its task; honouring `retryAfterMs` and
//!   `pollIntervalMs`), re-authenticate on a refused session, and stop for
//!   a human on `PERMISSION_DENIED`; progress goes to stdout, then the
//!   result. The person approves on the page: the agent never does.

#![forbid(unsafe_code)]

mod args;
mod consent;
mod mcp;
mod run;
mod store;

use std::fmt;
use std::io::Write as _;
use std::time::Duration;

use portcullis_core::scope::ScopeSet;
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationRequest, AuthorizationSession,
};
use serde_json::Value;

pub use args::{AgentAction, AgentArgs, Revision};
use consent::Loopback;
use mcp::{Mcp, Reply};
use store::TokenFile;

/// The client name registered with the authorization server (shown on the
/// consent screen and with every approval).
pub(crate) const CLIENT_NAME: &str = "Portcullis agent";

/// A secret string (an access token, an authorization code): `Debug` never
/// shows it, and reading it is spelled [`Secret::expose`].
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub(crate) fn new(value: String) -> Self {
        Self(value)
    }

    /// The secret itself, for the one place that sends it.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// Why the agent stopped. Its `Display` names no token, code or user data.
#[non_exhaustive]
#[derive(Debug)]
pub enum AgentError {
    /// The tokio runtime of [`run_blocking`] could not be started.
    Runtime(String),
    /// The token file could not be read or written, or is too open.
    TokenFile(String),
    /// The browser consent failed (no answer in time, denied, no port).
    Consent(String),
    /// Discovery, registration, token exchange or refresh failed.
    Auth(String),
    /// The MCP call could not be made or its answer read.
    Transport(String),
    /// The server refused a call the agent cannot retry.
    Server(String),
    /// The arguments cannot be used.
    Usage(String),
    /// The request ended without a result; the report was printed.
    Stopped(&'static str),
}

impl AgentError {
    /// A stable code for scripts and logs (`token_file`, `consent`, `auth`,
    /// `transport`, `server`, `usage`, `stopped`, `runtime`).
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::Runtime(_) => "runtime",
            Self::TokenFile(_) => "token_file",
            Self::Consent(_) => "consent",
            Self::Auth(_) => "auth",
            Self::Transport(_) => "transport",
            Self::Server(_) => "server",
            Self::Usage(_) => "usage",
            Self::Stopped(_) => "stopped",
        }
    }
}

impl fmt::Display for AgentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Runtime(m) => write!(f, "starting the runtime: {m}"),
            Self::TokenFile(m) => write!(f, "token file: {m}"),
            Self::Consent(m) => write!(f, "consent: {m}"),
            Self::Auth(m) => write!(f, "authorization: {m}"),
            Self::Transport(m) => write!(f, "MCP transport: {m}"),
            Self::Server(m) => write!(f, "the server refused: {m}"),
            Self::Usage(m) => f.write_str(m),
            Self::Stopped(code) => write!(f, "the request did not return a result ({code})"),
        }
    }
}

impl std::error::Error for AgentError {}

/// rmcp's errors carry no token (they name endpoints, statuses and OAuth
/// error codes).
fn auth_error(e: &AuthError) -> AgentError {
    AgentError::Auth(e.to_string())
}

/// One progress line on stdout (a closed stdout is not an error).
pub(crate) fn say(line: fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Runs `portcullis agent` on a current-thread tokio runtime of its own:
/// [`run()`], blocking until it ends.
pub fn run_blocking(args: AgentArgs) -> Result<(), AgentError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| AgentError::Runtime(e.to_string()))?
        .block_on(run(args))
}

/// Runs `portcullis agent` with `args` on the caller's tokio runtime (its
/// I/O and time drivers enabled): signs in if needed, then describes,
/// searches or runs as [`AgentArgs::action`] says, printing progress and
/// the result to stdout. A run that ends without a result (refused,
/// failed, interrupted) is [`AgentError::Stopped`], after its report was
/// printed.
///
/// Installs ring's rustls provider as the process default if none is (the
/// HTTP client is built without one).
pub async fn run(args: AgentArgs) -> Result<(), AgentError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let url = url::Url::parse(&args.url).map_err(|e| AgentError::Usage(format!("--url: {e}")))?;
    if !matches!(url.scheme(), "https" | "http") || url.host_str().is_none() {
        return Err(AgentError::Usage("--url must be an http(s) URL".into()));
    }
    let scope: Vec<String> = args.scope.split_whitespace().map(str::to_owned).collect();
    ScopeSet::parse(&args.scope)
        .map_err(|_| AgentError::Usage("--scope is not a list of scope tokens".into()))?;
    let path = match args.token_file {
        Some(p) => p,
        None => store::default_path()?,
    };
    let file = TokenFile::open(&path, url.as_str())?;
    let auth = Auth::new(
        url.as_str(),
        file,
        scope,
        args.open,
        Duration::from_secs(args.consent_timeout_secs),
    )
    .await?;
    let mut agent = Agent {
        mcp: Mcp::new(url.as_str(), args.protocol_version, !args.no_tasks)?,
        auth,
        open: args.open,
    };
    match args.action {
        AgentAction::Search { query } => agent.search(&query).await,
        AgentAction::Describe { name } => agent.describe(name.as_deref()).await,
        AgentAction::Run {
            code,
            max_wait_secs,
        } => agent.run(code, max_wait_secs).await,
    }
}

/// The agent's OAuth side: rmcp's authorization manager over the token file.
pub(crate) struct Auth {
    /// `None` only while a consent holds it.
    manager: Option<AuthorizationManager>,
    file: TokenFile,
    scope: Vec<String>,
    open: bool,
    consent_timeout: Duration,
}

impl Auth {
    /// Discovers the server's metadata and loads the token file.
    async fn new(
        url: &str,
        file: TokenFile,
        scope: Vec<String>,
        open: bool,
        consent_timeout: Duration,
    ) -> Result<Self, AgentError> {
        // A loopback MCP URL lets its metadata name loopback hosts too.
        let mut manager = AuthorizationManager::new(url)
            .await
            .map_err(|e| auth_error(&e))?;
        manager.set_credential_store(file.clone());
        let resolution = manager
            .resolve_metadata()
            .await
            .map_err(|e| auth_error(&e))?;
        manager.set_metadata(resolution.metadata);
        if file.has_tokens() {
            manager
                .initialize_from_store()
                .await
                .map_err(|e| auth_error(&e))?;
        }
        Ok(Self {
            manager: Some(manager),
            file,
            scope,
            open,
            consent_timeout,
        })
    }

    fn manager(&self) -> Result<&AuthorizationManager, AgentError> {
        self.manager
            .as_ref()
            .ok_or_else(|| AgentError::Auth("no authorization manager".into()))
    }

    /// A usable access token (refreshed first when it has expired), or
    /// `None` when only a new consent can give one.
    async fn token(&self) -> Result<Option<Secret>, AgentError> {
        if !self.file.has_tokens() {
            return Ok(None);
        }
        match self.manager()?.get_access_token().await {
            Ok(t) => Ok(Some(Secret::new(t))),
            Err(AuthError::AuthorizationRequired | AuthError::TokenRefreshRejected(_)) => Ok(None),
            Err(e) => Err(auth_error(&e)),
        }
    }

    /// Refreshes the access token (RFC 6749 §6); `false` when the grant is
    /// gone (the refresh token was refused).
    async fn refresh(&self) -> Result<bool, AgentError> {
        if !self.file.has_tokens() {
            return Ok(false);
        }
        match self.manager()?.refresh_token().await {
            Ok(_) => Ok(true),
            Err(AuthError::AuthorizationRequired | AuthError::TokenRefreshRejected(_)) => Ok(false),
            Err(e) => Err(auth_error(&e)),
        }
    }

    /// The scopes the session holds (as granted, else as asked for).
    fn scopes(&self) -> ScopeSet {
        let granted = self.file.granted_scopes();
        let words = if granted.is_empty() {
            &self.scope
        } else {
            &granted
        };
        ScopeSet::parse(&words.join(" ")).unwrap_or_default()
    }

    /// The browser consent: registers the client if the file has none,
    /// prints the authorization URL, waits for the loopback redirect with
    /// the same `state`, and exchanges the code (PKCE) for tokens.
    async fn consent(&mut self, extra: Option<&ScopeSet>) -> Result<(), AgentError> {
        let mut scope = self.scope.clone();
        if let Some(extra) = extra {
            for s in extra.to_string().split_whitespace() {
                if !scope.iter().any(|x| x == s) {
                    scope.push(s.to_owned());
                }
            }
        }
        let loopback = Loopback::bind().await?;
        let mut request = AuthorizationRequest::new(loopback.redirect_uri())
            .with_client_name(CLIENT_NAME)
            .with_scopes(scope.iter().map(String::as_str));
        if let Some(id) = self.file.client_id() {
            request = request.with_preregistered_client(id);
        }
        let manager = self
            .manager
            .take()
            .ok_or_else(|| AgentError::Auth("no authorization manager".into()))?;
        let session = match AuthorizationSession::new(manager, request).await {
            Ok(s) => s,
            Err((manager, e)) => {
                self.manager = Some(manager);
                return Err(auth_error(&e));
            }
        };
        let result = self.finish_consent(&session, &loopback).await;
        self.manager = Some(session.auth_manager);
        result
    }

    async fn finish_consent(
        &self,
        session: &AuthorizationSession,
        loopback: &Loopback,
    ) -> Result<(), AgentError> {
        let auth_url = session.get_authorization_url();
        let parsed = url::Url::parse(auth_url).map_err(|e| AgentError::Auth(e.to_string()))?;
        let param = |name: &str| {
            parsed
                .query_pairs()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.into_owned())
        };
        let state = param("state")
            .ok_or_else(|| AgentError::Auth("the authorization URL has no state".into()))?;
        if let Some(client_id) = param("client_id")
            && self.file.client_id().as_deref() != Some(client_id.as_str())
        {
            self.file.set_client_id(&client_id)?;
        }
        say(format_args!(
            "To allow this agent, open this URL in your browser and sign in:\n  {auth_url}"
        ));
        if self.open {
            open_browser(auth_url);
        }
        let granted = loopback.wait(&state, self.consent_timeout).await?;
        session
            .handle_callback_with_issuer(granted.code.expose(), &state, granted.issuer.as_deref())
            .await
            .map_err(|e| auth_error(&e))?;
        say(format_args!("Signed in."));
        Ok(())
    }
}

/// Opens `url` with `xdg-open`, ignoring failure (the URL is printed).
pub(crate) fn open_browser(url: &str) {
    match std::process::Command::new("xdg-open")
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "could not open a browser; open the URL yourself"),
    }
}

/// What a call asks of the server, for [`Agent::call`].
enum Call<'a> {
    /// `server/discover` (2026-07-28) or `initialize`.
    Connect,
    Tool {
        name: &'a str,
        arguments: Value,
    },
}

/// The agent: its MCP client and its session.
pub(crate) struct Agent {
    mcp: Mcp,
    auth: Auth,
    /// Open approval pages in the browser too.
    open: bool,
}

/// The tool's answer: its structured content, or the JSON of its text.
fn structured(result: &Value) -> Option<Value> {
    if let Some(v) = result.get("structuredContent") {
        return Some(v.clone());
    }
    let text = result.pointer("/content/0/text")?.as_str()?;
    serde_json::from_str(text).ok()
}

impl Agent {
    /// One call outside the client loop (initialize, search, describe),
    /// signing in first if needed and once more if the server refuses the
    /// session (a refresh first, then a new consent). Returns the result and
    /// whether the session was replaced.
    async fn call(&mut self, call: Call<'_>) -> Result<(Value, bool), AgentError> {
        let mut reauthenticated = false;
        let mut refusals = 0;
        loop {
            let Some(token) = self.auth.token().await? else {
                if reauthenticated {
                    return Err(AgentError::Auth("no access token after signing in".into()));
                }
                self.auth.consent(None).await?;
                reauthenticated = true;
                continue;
            };
            let reply = match &call {
                Call::Connect => self.mcp.connect(&token).await?,
                Call::Tool { name, arguments } => {
                    self.mcp
                        .call_tool(&token, name, arguments.clone(), name, None, None)
                        .await?
                }
            };
            match reply {
                Reply::Result(r) => return Ok((r, reauthenticated)),
                Reply::Transport(portcullis_core::agent_loop::Answer::Unauthorized)
                    if refusals < 2 =>
                {
                    refusals += 1;
                    if refusals == 1 && self.auth.refresh().await? {
                        say(format_args!(
                            "The server refused the access token; refreshed it."
                        ));
                    } else {
                        say(format_args!(
                            "The server refused the session; signing in again."
                        ));
                        self.auth.consent(None).await?;
                        reauthenticated = true;
                    }
                }
                Reply::Transport(a) => {
                    return Err(AgentError::Server(mcp::outcome(&Ok(Reply::Transport(a)))));
                }
                Reply::RpcError { code, message, .. } => {
                    return Err(AgentError::Server(format!(
                        "JSON-RPC error {code}: {message}"
                    )));
                }
            }
        }
    }

    /// Learns the server's revision once (discovery or `initialize`).
    async fn initialized(&mut self) -> Result<bool, AgentError> {
        if self.mcp.protocol() != "-" {
            return Ok(false);
        }
        let (_, reauthenticated) = self.call(Call::Connect).await?;
        Ok(reauthenticated)
    }

    /// `search_skills`: the skills matching `query`.
    async fn skills(&mut self, query: &str) -> Result<(Vec<Value>, bool), AgentError> {
        let mut reauthenticated = self.initialized().await?;
        let (r, again) = self
            .call(Call::Tool {
                name: "search_skills",
                arguments: serde_json::json!({"query": query}),
            })
            .await?;
        reauthenticated |= again;
        let body = structured(&r).unwrap_or_default();
        let skills = body
            .get("skills")
            .and_then(Value::as_array)
            .cloned()
            .ok_or_else(|| AgentError::Server("search_skills returned no skill list".into()))?;
        Ok((skills, reauthenticated))
    }

    /// `describe_skill` of `name`.
    async fn describe_one(&mut self, name: &str) -> Result<(Value, bool), AgentError> {
        let (r, reauthenticated) = self
            .call(Call::Tool {
                name: "describe_skill",
                arguments: serde_json::json!({"name": name}),
            })
            .await?;
        let body = structured(&r).unwrap_or_default();
        match body.get("skill") {
            Some(s) => Ok((s.clone(), reauthenticated)),
            None => Err(AgentError::Server(format!(
                "describe_skill {name}: {}",
                body.pointer("/error/code")
                    .and_then(Value::as_str)
                    .unwrap_or("no skill")
            ))),
        }
    }

    /// `portcullis agent search`.
    async fn search(&mut self, query: &str) -> Result<(), AgentError> {
        let (skills, _) = self.skills(query).await?;
        for s in &skills {
            let field = |k: &str| s.get(k).and_then(Value::as_str).unwrap_or("-").to_owned();
            say(format_args!(
                "{}\t{}\t{}",
                field("name"),
                field("effect"),
                field("description")
            ));
        }
        say(format_args!("{} skill(s)", skills.len()));
        Ok(())
    }

    /// `portcullis agent describe`.
    async fn describe(&mut self, name: Option<&str>) -> Result<(), AgentError> {
        let names: Vec<String> = match name {
            Some(n) => {
                self.initialized().await?;
                vec![n.to_owned()]
            }
            None => self
                .skills("")
                .await?
                .0
                .iter()
                .filter_map(|s| s.get("name").and_then(Value::as_str).map(str::to_owned))
                .collect(),
        };
        for n in &names {
            let (skill, _) = self.describe_one(n).await?;
            let pretty = serde_json::to_string_pretty(&skill).unwrap_or_default();
            say(format_args!("{pretty}"));
        }
        Ok(())
    }
}
