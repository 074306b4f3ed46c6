//! The MCP clients people use, replayed over HTTP as they behave in public
//! (the rows of docs/clients.md): each test sends what its client sends —
//! its registration body or metadata document, its authorization and token
//! parameters, its redirect URI, its refresh pattern — as the cited issue
//! threads and client source show it, against the crate's routes with the
//! default settings, and ends in a call the bearer guard accepts.
//!
//! What a replay changes, and only where it must: a metadata document is
//! served from loopback (the development setting), so its URL is
//! `http://127.0.0.1:<port>/<the client's path>` rather than the client's
//! https host, and the `client_id` inside it follows; the patterns that
//! span minutes (a stale copy presented 7 min 45 s later) run under a
//! driven clock in the core's conformance suite (`tests/shared_refresh.rs`),
//! here only their seconds-long bursts.

#![allow(
    clippy::many_single_char_names,
    reason = "r is the replay, v the PKCE verifier, a..e the racing answers"
)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use axum::response::IntoResponse as _;
use portcullis_axum::HostStore;
use portcullis_store_memory::MemoryStore;
use reqwest::header;
use serde_json::{Value, json};

use crate::support::client::{Answer, form, http, query_param, s256, verifier};
use crate::support::{Effects, Options, TestApp, keyring};

#[path = "../../tests/client_keys.rs"]
mod client_keys;
use client_keys::ClientKey;

// ------------------------------------------------------------ the harness

/// Static files on loopback: client metadata documents and key sets, with
/// `Cache-Control: max-age=300`, each fetch counted.
struct Files {
    origin: String,
    bodies: Arc<Mutex<HashMap<String, String>>>,
    fetches: Arc<AtomicU32>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Files {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Files {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        let bodies: Arc<Mutex<HashMap<String, String>>> = Arc::default();
        let fetches = Arc::new(AtomicU32::new(0));
        let (b, f) = (Arc::clone(&bodies), Arc::clone(&fetches));
        let router = axum::Router::new().fallback(move |uri: axum::http::Uri| {
            let (b, f) = (Arc::clone(&b), Arc::clone(&f));
            async move {
                f.fetch_add(1, Ordering::SeqCst);
                match b.lock().unwrap().get(uri.path()) {
                    Some(body) => (
                        [
                            ("content-type", "application/json"),
                            ("cache-control", "max-age=300"),
                        ],
                        body.clone(),
                    )
                        .into_response(),
                    None => StatusCode::NOT_FOUND.into_response(),
                }
            }
        });
        let server = tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        Self {
            origin,
            bodies,
            fetches,
            server,
        }
    }

    /// The URL of `path` here.
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.origin)
    }

    /// Serves `body` at `path`.
    fn serve(&self, path: &str, body: &str) {
        self.bodies.lock().unwrap().insert(path.into(), body.into());
    }
}

/// A client's view of the app: discovered as MCP clients discover it
/// (RFC 9728 then RFC 8414), and the requests they send.
struct Replay<S: HostStore> {
    app: TestApp<S>,
    http: reqwest::Client,
    metadata: Value,
}

impl<S: HostStore> Replay<S> {
    async fn start(store: S) -> Self {
        let options = Options {
            dev_loopback_documents: true,
            ..Options::default()
        };
        let app = TestApp::start_with(store, keyring(), Effects::default(), &options).await;
        let http = http();
        let metadata = Answer::of(
            http.get(format!(
                "{}/.well-known/oauth-authorization-server",
                app.origin
            ))
            .send()
            .await
            .unwrap(),
        )
        .await
        .json();
        Self {
            app,
            http,
            metadata,
        }
    }

    fn endpoint(&self, name: &str) -> String {
        self.metadata[name].as_str().unwrap().to_owned()
    }

    fn resource(&self) -> String {
        self.app.mcp_url()
    }

    /// `POST /register` with `body`, exactly.
    async fn register(&self, body: &Value) -> Answer {
        Answer::of(
            self.http
                .post(self.endpoint("registration_endpoint"))
                .header(header::CONTENT_TYPE, "application/json")
                .body(body.to_string())
                .send()
                .await
                .unwrap(),
        )
        .await
    }

    /// A registration that must succeed: the answer's JSON.
    async fn registered(&self, body: &Value) -> Value {
        let answer = self.register(body).await;
        assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
        answer.json()
    }

    /// `GET /authorize?params` in `user`'s browser, the consent allowed:
    /// the `Location` the browser is sent to. The consent page is checked
    /// with `page`.
    async fn consent(&self, user: &str, params: &[(&str, &str)], page: impl Fn(&str)) -> String {
        let query = form(params);
        let authorize = self.endpoint("authorization_endpoint");
        let shown = Answer::of(
            self.http
                .get(format!("{authorize}?{query}"))
                .header(header::COOKIE, format!("user={user}"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(shown.status, StatusCode::OK, "{}", shown.body);
        page(&shown.body);
        let action = crate::support::client::attribute(&shown.body, "method=\"post\"", "action")
            .expect("the consent form");
        let csrf = crate::support::client::attribute(&shown.body, "name=\"csrf\"", "value")
            .expect("its csrf field");
        let allowed = Answer::of(
            self.http
                .post(format!("{}{action}", self.app.origin))
                .header(header::COOKIE, format!("user={user}"))
                .header("origin", &self.app.origin)
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(form(&[("csrf", &csrf), ("intent", "allow")]))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(allowed.status, StatusCode::FOUND, "{}", allowed.body);
        allowed.location().to_owned()
    }

    /// `POST /token` with `pairs`.
    async fn token(&self, pairs: &[(&str, &str)]) -> Answer {
        Answer::of(
            self.http
                .post(self.endpoint("token_endpoint"))
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(form(pairs))
                .send()
                .await
                .unwrap(),
        )
        .await
    }

    /// Tokens from a `/token` answer that must succeed.
    #[track_caller]
    fn tokens(answer: &Answer) -> (String, String) {
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        let json = answer.json();
        (
            json["access_token"].as_str().unwrap().to_owned(),
            json["refresh_token"].as_str().unwrap().to_owned(),
        )
    }

    /// A call of the protected endpoint with `access`: whether the guard
    /// let it through.
    async fn call_works(&self, access: &str) -> bool {
        let answer = self
            .http
            .post(self.resource())
            .bearer_auth(access)
            .header(header::CONTENT_TYPE, "application/json")
            .body(r#"{"tool":"whoami"}"#)
            .send()
            .await
            .unwrap();
        answer.status().as_u16() == 200
    }
}

/// The code of a redirect to `redirect`, with RFC 9207's `iss` checked.
fn code_at(location: &str, redirect: &str, origin: &str) -> String {
    assert!(
        location.starts_with(redirect),
        "sent to {location}, not {redirect}"
    );
    assert_eq!(query_param(location, "state").as_deref(), Some("st4te"));
    assert_eq!(query_param(location, "iss").as_deref(), Some(origin));
    query_param(location, "code").expect("a code")
}

/// Authorization parameters as a client sends them, `resource` when
/// `with_resource`.
fn authorize_params<'a>(
    client_id: &'a str,
    redirect: &'a str,
    challenge: &'a str,
    scope: Option<&'a str>,
    resource: Option<&'a str>,
) -> Vec<(&'a str, &'a str)> {
    let mut p = vec![
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", redirect),
        ("state", "st4te"),
        ("code_challenge", challenge),
        ("code_challenge_method", "S256"),
    ];
    if let Some(scope) = scope {
        p.push(("scope", scope));
    }
    if let Some(resource) = resource {
        p.push(("resource", resource));
    }
    p
}

/// The whole flow of a client that registered `client_id`: consent in
/// alice's browser with `scope` (none: the client sends none) and
/// `resource` when `with_resource`, the code delivered to `redirect`, the
/// exchange (with `resource` likewise). Its tokens.
async fn connects<S: HostStore>(
    r: &Replay<S>,
    client_id: &str,
    redirect: &str,
    scope: Option<&str>,
    with_resource: bool,
) -> (String, String) {
    let v = verifier();
    let challenge = s256(&v);
    let resource = r.resource();
    let resource = with_resource.then_some(resource.as_str());
    let params = authorize_params(client_id, redirect, &challenge, scope, resource);
    let location = r.consent("alice", &params, |_| {}).await;
    let code = code_at(&location, redirect, &r.app.origin);
    let mut exchange = vec![
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("redirect_uri", redirect),
        ("client_id", client_id),
        ("code_verifier", v.as_str()),
    ];
    exchange.extend(resource.map(|r| ("resource", r)));
    Replay::<S>::tokens(&r.token(&exchange).await)
}

// ----------------------------------------------------------------- Claude

/// Claude Code 2.1.251 sends no RFC 8707 `resource` on `/authorize` or
/// `/token` (anthropics/claude-code#90497). Its registration body carries
/// no `scope` (appstrate/appstrate#1267) and `application_type: native`
/// with `http://localhost:<port>/callback` (elmohq/elmo#684); the scope at
/// `/authorize` is the protected resource's. Three sessions then refresh
/// the one shared token within seconds (claude-code#85236): every one gets
/// the same token, and every call works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_without_resource_and_three_sessions_refreshing() {
    let r = Replay::start(MemoryStore::new()).await;
    let redirect = "http://localhost:3118/callback";
    let client = r
        .registered(&json!({
            "client_name": "Claude Code (notes)",
            "redirect_uris": [redirect],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            "application_type": "native",
        }))
        .await;
    let client_id = client["client_id"].as_str().unwrap();
    let v = verifier();
    let challenge = s256(&v);
    let params = authorize_params(client_id, redirect, &challenge, Some("notes:read"), None);
    let location = r.consent("alice", &params, |_| {}).await;
    let code = code_at(&location, redirect, &r.app.origin);
    let (access, refresh) = Replay::<MemoryStore>::tokens(
        &r.token(&[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("redirect_uri", redirect),
            ("client_id", client_id),
            ("code_verifier", &v),
        ])
        .await,
    );
    assert!(r.call_works(&access).await);
    let refresh_body = [
        ("grant_type", "refresh_token"),
        ("refresh_token", refresh.as_str()),
        ("client_id", client_id),
    ];
    let (a, b, c) = tokio::join!(
        r.token(&refresh_body),
        r.token(&refresh_body),
        r.token(&refresh_body)
    );
    let sessions: Vec<_> = [a, b, c]
        .iter()
        .map(Replay::<MemoryStore>::tokens)
        .collect();
    assert!(
        sessions.iter().all(|(_, rt)| *rt == sessions[0].1),
        "one successor for every session"
    );
    for (access, _) in &sessions {
        assert!(r.call_works(access).await);
    }
}

/// Claude Code's own metadata document (anthropics/claude-code#44388; its
/// contents as fetched 2026-07-29), used without `resource`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_metadata_document() {
    let r = Replay::start(MemoryStore::new()).await;
    let files = Files::start().await;
    let path = "/oauth/claude-code-client-metadata";
    let client_id = files.url(path);
    files.serve(
        path,
        &json!({
            "client_id": client_id,
            "client_name": "Claude Code",
            "client_uri": "https://claude.ai",
            "redirect_uris": ["http://localhost/callback", "http://127.0.0.1/callback"],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        })
        .to_string(),
    );
    let redirect = "http://localhost:49152/callback";
    let v = verifier();
    let challenge = s256(&v);
    let params = authorize_params(&client_id, redirect, &challenge, Some("notes:read"), None);
    let location = r.consent("alice", &params, |_| {}).await;
    let code = code_at(&location, redirect, &r.app.origin);
    let (access, _) = Replay::<MemoryStore>::tokens(
        &r.token(&[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("redirect_uri", redirect),
            ("client_id", &client_id),
            ("code_verifier", &v),
        ])
        .await,
    );
    assert!(r.call_works(&access).await);
}

/// The claude.ai connector (and Claude Desktop, one backend) registers with
/// `client_secret_post` (PostHog/posthog#48397, still so in
/// anthropics/claude-ai-mcp#1043, 2026-09-15), sends no `resource`
/// (BasedHardware/omi#12122) and refreshes from two egress addresses at
/// once (PrefectHQ/fastmcp#4264). It gets a derived secret, posts it, and
/// both refreshes get the one successor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_ai_connector_registers_client_secret_post() {
    let r = Replay::start(MemoryStore::new()).await;
    let redirect = "https://claude.ai/api/mcp/auth_callback";
    let client = r
        .registered(&json!({
            "redirect_uris": [redirect],
            "token_endpoint_auth_method": "client_secret_post",
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "client_name": "Claude",
        }))
        .await;
    assert_eq!(client["token_endpoint_auth_method"], "client_secret_post");
    let client_id = client["client_id"].as_str().unwrap();
    let secret = client["client_secret"].as_str().expect("a client secret");
    let v = verifier();
    let challenge = s256(&v);
    let params = authorize_params(client_id, redirect, &challenge, None, None);
    let location = r.consent("alice", &params, |_| {}).await;
    let code = code_at(&location, redirect, &r.app.origin);
    let exchange = [
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("redirect_uri", redirect),
        ("client_id", client_id),
        ("client_secret", secret),
        ("code_verifier", v.as_str()),
    ];
    // Without its secret, or with a wrong one, the code is refused unspent.
    let mut without = exchange.to_vec();
    without.retain(|(k, _)| *k != "client_secret");
    assert_eq!(r.token(&without).await.status, StatusCode::UNAUTHORIZED);
    let mut wrong = exchange.to_vec();
    wrong[4] = ("client_secret", "not-the-secret");
    assert_eq!(r.token(&wrong).await.status, StatusCode::UNAUTHORIZED);
    let (access, refresh) = Replay::<MemoryStore>::tokens(&r.token(&exchange).await);
    assert!(r.call_works(&access).await);
    let body = [
        ("grant_type", "refresh_token"),
        ("refresh_token", refresh.as_str()),
        ("client_id", client_id),
        ("client_secret", secret),
    ];
    let (a, b) = tokio::join!(r.token(&body), r.token(&body));
    let (a, b) = (
        Replay::<MemoryStore>::tokens(&a),
        Replay::<MemoryStore>::tokens(&b),
    );
    assert_eq!(a.1, b.1);
    assert!(r.call_works(&a.0).await && r.call_works(&b.0).await);
}

// ---------------------------------------------------------------- ChatGPT

/// ChatGPT's metadata document asks for `private_key_jwt` with RS256 and a
/// `jwks_uri`, per connector (Altinity/altinity-mcp#118) or at a stable
/// URL that also lists RP Metadata Choices
/// (django-oauth/django-oauth-toolkit#1857); it sends `resource` on both
/// requests (OpenAI's documentation). Both forms, through the code exchange
/// and a refresh with a fresh RS256 assertion each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chatgpt_documents_with_private_key_jwt() {
    let r = Replay::start(MemoryStore::new()).await;
    let files = Files::start().await;
    let key = ClientKey::rs256("cimd-20260428030119");
    files.serve("/oauth/jwks.json", &ClientKey::jwks(&[&key]));
    let jwks_uri = files.url("/oauth/jwks.json");
    let forms = [
        (
            "/oauth/kDmjx77UnKOM/client.json",
            "https://chatgpt.com/connector/oauth/kDmjx77UnKOM",
            json!({
                "client_uri": "https://chatgpt.com/",
                "token_endpoint_auth_method": "private_key_jwt",
            }),
        ),
        (
            "/oauth/client.json",
            "https://chatgpt.com/connector_platform_oauth_redirect",
            json!({
                "token_endpoint_auth_method": "private_key_jwt",
                "token_endpoint_auth_methods_supported": ["none", "private_key_jwt"],
                "logo_uri": "https://persistent.oaistatic.com/sonic/misc/openai-logo.png",
            }),
        ),
    ];
    let token_endpoint = r.endpoint("token_endpoint");
    for (path, redirect, extra) in forms {
        let client_id = files.url(path);
        let mut document = json!({
            "client_id": client_id,
            "redirect_uris": [redirect],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "client_name": "ChatGPT",
            "token_endpoint_auth_signing_alg": "RS256",
            "jwks_uri": jwks_uri,
        });
        for (k, v) in extra.as_object().unwrap() {
            document[k] = v.clone();
        }
        files.serve(path, &document.to_string());
        let v = verifier();
        let challenge = s256(&v);
        let resource = r.resource();
        let params = authorize_params(
            &client_id,
            redirect,
            &challenge,
            Some("notes:read"),
            Some(&resource),
        );
        let location = r.consent("alice", &params, |_| {}).await;
        let code = code_at(&location, redirect, &r.app.origin);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let jwt_bearer = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
        let exchange = [
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", redirect),
            ("code_verifier", v.as_str()),
            ("resource", resource.as_str()),
        ];
        // Without the assertion the code is refused, unspent.
        let mut bare = exchange.to_vec();
        bare.push(("client_id", &client_id));
        assert_eq!(r.token(&bare).await.status, StatusCode::UNAUTHORIZED);
        let assertion = key.assertion(&client_id, &token_endpoint, now);
        let mut signed = exchange.to_vec();
        signed.extend([
            ("client_assertion_type", jwt_bearer),
            ("client_assertion", &assertion),
        ]);
        let (access, refresh) = Replay::<MemoryStore>::tokens(&r.token(&signed).await);
        assert!(r.call_works(&access).await);
        let assertion = key.assertion(&client_id, &r.app.origin, now);
        let refresh_body = [
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh.as_str()),
            ("resource", resource.as_str()),
            ("client_assertion_type", jwt_bearer),
            ("client_assertion", assertion.as_str()),
        ];
        let (access, _) = Replay::<MemoryStore>::tokens(&r.token(&refresh_body).await);
        assert!(r.call_works(&access).await);
        // The same assertion again: its jti was accepted once.
        let replayed = r.token(&refresh_body).await;
        assert_eq!(
            replayed.status,
            StatusCode::UNAUTHORIZED,
            "{}",
            replayed.body
        );
    }
    // Documents and the key set were fetched once each and cached.
    assert_eq!(files.fetches.load(Ordering::SeqCst), 3);
}

// ----------------------------------------------------- Cursor and Cline

/// Cursor registers three redirect URIs in one request, its private-use
/// scheme among them (erp-mafia/accounted#2225; laravel/mcp#173), as a
/// public client. The browser is sent back to `cursor://…` with the code,
/// and the consent page says an installed app receives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursor_gets_its_code_at_its_own_scheme() {
    let r = Replay::start(MemoryStore::new()).await;
    let redirect = "cursor://anysphere.cursor-mcp/oauth/callback";
    let client = r
        .registered(&json!({
            "client_name": "Cursor",
            "redirect_uris": [
                redirect,
                "https://www.cursor.com/agents/mcp/oauth/callback",
                "http://localhost:8787/callback",
            ],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            "application_type": "web",
        }))
        .await;
    let client_id = client["client_id"].as_str().unwrap();
    assert_eq!(client["redirect_uris"][0], redirect);
    let v = verifier();
    let challenge = s256(&v);
    let resource = r.resource();
    let params = authorize_params(
        client_id,
        redirect,
        &challenge,
        Some("notes:read"),
        Some(&resource),
    );
    let location = r
        .consent("alice", &params, |page| {
            assert!(
                page.contains("the app registered on your computer for <code>cursor:</code> links"),
                "{page}"
            );
        })
        .await;
    let code = code_at(&location, redirect, &r.app.origin);
    let (access, _) = Replay::<MemoryStore>::tokens(
        &r.token(&[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("redirect_uri", redirect),
            ("client_id", client_id),
            ("code_verifier", &v),
            ("resource", &resource),
        ])
        .await,
    );
    assert!(r.call_works(&access).await);
}

/// Cline's registration until mid-2026: a `vscode://` callback of its
/// extension id (cline/cline@791d238, `apps/vscode/src/utils/mcpAuth.ts`);
/// since then `http://127.0.0.1:1456/mcp/oauth/callback`
/// (cline/cline@21cb8d2). Both register and both get their code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cline_both_callbacks() {
    let r = Replay::start(MemoryStore::new()).await;
    for redirect in [
        "vscode://saoudrizwan.claude-dev/mcp-auth/callback/9f86d081884c7d659a2feaa0c55ad015",
        "http://127.0.0.1:1456/mcp/oauth/callback",
    ] {
        let client = r
            .registered(&json!({
                "redirect_uris": [redirect],
                "token_endpoint_auth_method": "none",
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                "client_name": "Cline",
                "client_uri": "https://cline.bot",
                "software_id": "cline",
            }))
            .await;
        let client_id = client["client_id"].as_str().unwrap();
        let (access, _) = connects(&r, client_id, redirect, None, true).await;
        assert!(r.call_works(&access).await, "{redirect}");
    }
}

// ------------------------------------------------------------------ Codex

/// Codex registers through rmcp (client name "Codex", `application_type:
/// native`, no scope when it has none; modelcontextprotocol/rust-sdk
/// `crates/rmcp/src/transport/auth.rs`), with
/// `http://127.0.0.1:<port>/callback/<id>`, and sends `resource` on every
/// request. Five processes then present one refresh token within a second
/// (openai/codex#46028): all five get the one successor, and every call
/// works. (The straggler 7 min 45 s later is `tests/shared_refresh.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_five_processes_refreshing_at_once() {
    let r = Replay::start(MemoryStore::new()).await;
    let redirect = "http://127.0.0.1:37819/callback/Kq3xN2dVhA8z";
    let client = r
        .registered(&json!({
            "client_name": "Codex",
            "redirect_uris": [redirect],
            "grant_types": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_method": "none",
            "response_types": ["code"],
            "application_type": "native",
        }))
        .await;
    let client_id = client["client_id"].as_str().unwrap();
    let resource = r.resource();
    let (_, refresh) = connects(&r, client_id, redirect, Some("notes:read"), true).await;
    let body = [
        ("grant_type", "refresh_token"),
        ("refresh_token", refresh.as_str()),
        ("client_id", client_id),
        ("resource", resource.as_str()),
    ];
    let answers = futures_join5(&r, &body).await;
    let tokens: Vec<_> = answers.iter().map(Replay::<MemoryStore>::tokens).collect();
    assert!(tokens.iter().all(|(_, rt)| *rt == tokens[0].1));
    for (access, _) in &tokens {
        assert!(r.call_works(access).await);
    }
}

async fn futures_join5<S: HostStore>(r: &Replay<S>, body: &[(&str, &str)]) -> Vec<Answer> {
    let (a, b, c, d, e) = tokio::join!(
        r.token(body),
        r.token(body),
        r.token(body),
        r.token(body),
        r.token(body)
    );
    vec![a, b, c, d, e]
}

// ------------------------------------------- VS Code, Gemini CLI and more

/// VS Code's registration body (microsoft/vscode `src/vs/base/common/oauth.ts`
/// @0ec904b: four redirect URIs, `client_uri`, `application_type`, the
/// scopes of the protected resource) and its metadata document
/// (`https://vscode.dev/oauth/client-metadata.json`, which lists the
/// device-code grant: left out, the rest used).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vscode_both_forms() {
    let r = Replay::start(MemoryStore::new()).await;
    let files = Files::start().await;
    let path = "/oauth/client-metadata.json";
    let document_id = files.url(path);
    files.serve(
        path,
        &json!({
            "client_name": "Visual Studio Code",
            "logo_uri": "https://code.visualstudio.com/assets/branding/code-stable.png",
            "grant_types": ["authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:device_code"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            "application_type": "native",
            "client_id": document_id,
            "client_uri": "https://vscode.dev/product",
            "redirect_uris": ["http://127.0.0.1:33418/", "https://vscode.dev/redirect"],
        })
        .to_string(),
    );
    let registered = r
        .registered(&json!({
            "client_name": "Visual Studio Code",
            "client_uri": "https://code.visualstudio.com",
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "redirect_uris": [
                "https://insiders.vscode.dev/redirect",
                "https://vscode.dev/redirect",
                "http://127.0.0.1/",
                "http://127.0.0.1:33418/",
            ],
            "scope": "notes:read notes:write",
            "token_endpoint_auth_method": "none",
            "application_type": "native",
        }))
        .await;
    let dcr_id = registered["client_id"].as_str().unwrap().to_owned();
    for client_id in [dcr_id, document_id] {
        let redirect = "http://127.0.0.1:33418/";
        let resource = r.resource();
        let (access, refresh) = connects(&r, &client_id, redirect, Some("notes:read"), true).await;
        assert!(r.call_works(&access).await, "{client_id}");
        let (access, _) = Replay::<MemoryStore>::tokens(
            &r.token(&[
                ("grant_type", "refresh_token"),
                ("refresh_token", &refresh),
                ("client_id", &client_id),
                ("resource", &resource),
            ])
            .await,
        );
        assert!(r.call_works(&access).await, "{client_id}");
    }
}

/// Gemini CLI registers with `"scope": ""` when it has no scopes
/// (google-gemini/gemini-cli@5411f11, `packages/core/src/mcp/oauth-provider.ts`),
/// and so does MCP Inspector v2 (with `application_type: native`): an
/// empty scope is an absent one. Gemini CLI's callback is
/// `http://localhost:<port>/oauth/callback` and it sends `resource`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_and_inspector_register_an_empty_scope() {
    let r = Replay::start(MemoryStore::new()).await;
    for (name, redirect, application_type) in [
        (
            "Gemini CLI MCP Client",
            "http://localhost:43117/oauth/callback",
            None,
        ),
        (
            "MCP Inspector",
            "http://localhost:6274/oauth/callback",
            Some("native"),
        ),
    ] {
        let mut body = json!({
            "client_name": name,
            "redirect_uris": [redirect],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            "scope": "",
        });
        if let Some(t) = application_type {
            body["application_type"] = json!(t);
        }
        let client = r.registered(&body).await;
        assert!(client.get("scope").is_none(), "{client}");
        let client_id = client["client_id"].as_str().unwrap();
        let (access, _) = connects(&r, client_id, redirect, None, true).await;
        assert!(r.call_works(&access).await, "{name}");
    }
}

/// The clients that passed before this round, replayed as published, so
/// they keep passing: goose (rmcp's body, `client_name "goose"`,
/// `http://127.0.0.1:<port>/oauth_callback`; block/goose
/// `crates/goose/src/oauth/mod.rs`@06423fd), Zed (`client_name "Zed"`,
/// `http://127.0.0.1:<port>/callback`, `resource` on every request;
/// zed-industries/zed `crates/context_server/src/oauth.rs`@04afc35),
/// mcp-remote (geelen/mcp-remote `src/lib/node-oauth-client-provider.ts`
/// @d26e5a8: its `software_id` and a stable port) and MCP Inspector v1 (two
/// callbacks, `client_uri`; modelcontextprotocol/inspector
/// `client/src/lib/auth.ts`@cc416f0), each followed by a refresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goose_zed_mcp_remote_and_inspector() {
    let r = Replay::start(MemoryStore::new()).await;
    let clients = [
        (
            json!({
                "client_name": "goose",
                "redirect_uris": ["http://127.0.0.1:51234/oauth_callback"],
                "grant_types": ["authorization_code", "refresh_token"],
                "token_endpoint_auth_method": "none",
                "response_types": ["code"],
                "application_type": "native",
            }),
            "http://127.0.0.1:51234/oauth_callback",
            true,
        ),
        (
            json!({
                "client_name": "Zed",
                "redirect_uris": ["http://127.0.0.1:27523/callback"],
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                "token_endpoint_auth_method": "none",
            }),
            "http://127.0.0.1:27523/callback",
            true,
        ),
        (
            json!({
                "redirect_uris": ["http://localhost:20341/oauth/callback"],
                "token_endpoint_auth_method": "none",
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                "client_name": "MCP CLI Client",
                "client_uri": "https://github.com/modelcontextprotocol/mcp-cli",
                "software_id": "2e6dc280-f3c3-4e01-99a7-8181dbd1d23d",
                "software_version": "0.1.38",
                "scope": "notes:read",
            }),
            "http://localhost:20341/oauth/callback",
            true,
        ),
        (
            json!({
                "redirect_uris": [
                    "http://localhost:6274/oauth/callback",
                    "http://localhost:6274/oauth/callback/debug",
                ],
                "token_endpoint_auth_method": "none",
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                "client_name": "MCP Inspector",
                "client_uri": "https://github.com/modelcontextprotocol/inspector",
            }),
            "http://localhost:6274/oauth/callback",
            true,
        ),
    ];
    for (body, redirect, with_resource) in clients {
        let client = r.registered(&body).await;
        let client_id = client["client_id"].as_str().unwrap();
        let (access, refresh) =
            connects(&r, client_id, redirect, Some("notes:read"), with_resource).await;
        assert!(r.call_works(&access).await, "{body}");
        let resource = r.resource();
        let (access, _) = Replay::<MemoryStore>::tokens(
            &r.token(&[
                ("grant_type", "refresh_token"),
                ("refresh_token", &refresh),
                ("client_id", client_id),
                ("resource", &resource),
            ])
            .await,
        );
        assert!(r.call_works(&access).await, "{body}");
    }
}

/// What no client may do, whatever the leniency: a redirect URI a browser
/// runs or reads locally is refused, and the error names the URI's place
/// in the list; a registration with one such URI among good ones fails
/// whole, visibly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_schemes_are_refused_with_the_uri_named() {
    let r = Replay::start(MemoryStore::new()).await;
    for bad in [
        "javascript://x/%0aalert(document.cookie)",
        "data:text/html,<script>1</script>",
        "file:///etc/passwd",
    ] {
        let answer = r
            .register(&json!({
                "redirect_uris": ["cursor://anysphere.cursor-mcp/oauth/callback", bad],
                "token_endpoint_auth_method": "none",
            }))
            .await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{bad}");
        let json = answer.json();
        assert_eq!(json["error"], "invalid_redirect_uri", "{bad}: {json}");
        let description = json["error_description"].as_str().unwrap();
        assert!(description.starts_with("redirect_uris[1]"), "{description}");
    }
}
