//! Several `portcullis serve` processes on one PostgreSQL database, as a
//! load balancer would put them: the races between them and the admin CLI
//! while they serve.
//!
//! Needs `PORTCULLIS_TEST_POSTGRES_URL` (`.ci/run` sets it; locally:
//! `export PORTCULLIS_TEST_POSTGRES_URL="$(store-postgres/test-cluster.sh
//! start)"`); without it every test here says so and passes. Each test runs
//! in a schema of its own, dropped at the end.
#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failed unwrap is a failed test"
)]

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[path = "../../store-postgres/tests/proxy/mod.rs"]
mod proxy;

use portcullis_core::form::{Form, encode_pairs};
use portcullis_core::pkce::{CodeChallenge, CodeVerifier};
use reqwest::StatusCode;
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_portcullis");
const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const REDIRECT: &str = "http://127.0.0.1:4711/callback";

/// The database URL, or `None` with a message saying the test is skipped.
fn database(test: &str) -> Option<String> {
    let url = std::env::var("PORTCULLIS_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty());
    if url.is_none() {
        eprintln!(
            "{test}: skipped, PORTCULLIS_TEST_POSTGRES_URL is unset (store-postgres/test-cluster.sh start prints one)"
        );
    }
    url
}

fn free_port() -> u16 {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let base = 26_000 + (std::process::id() as usize % 4_000);
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed) % 4_000;
        let port = u16::try_from(base + n).expect("below 32 000");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// A schema of one test's own, dropped when the test ends.
struct Schema {
    url: String,
    name: String,
}

impl Schema {
    fn new(url: &str, test: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        Self {
            url: url.to_owned(),
            name: format!(
                "e2e_{test}_{}_{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        // The synchronous driver must not run on a Tokio worker.
        let _ = std::thread::spawn(move || {
            if let Ok(mut c) = postgres::Client::connect(&url, postgres::NoTls) {
                let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"));
            }
        })
        .join();
    }
}

/// Two servers on one schema with one key file; both name the first one's
/// origin as their public URL, as instances behind one balancer would.
struct Pair {
    dir: tempfile::TempDir,
    schema: Schema,
    ports: Vec<u16>,
    children: Vec<Child>,
    http: reqwest::Client,
    /// A redb file instead of the schema (one instance: redb is one
    /// process's), for measurements side by side.
    redb: bool,
}

impl Pair {
    async fn start(url: &str, test: &str, extra: &[&str]) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let ports = vec![free_port(), free_port()];
        let mut pair = Self {
            schema: Schema::new(url, test),
            dir,
            ports,
            children: Vec::new(),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .build()
                .unwrap(),
            redb: url.is_empty(),
        };
        let n = if pair.redb { 1 } else { 2 };
        for i in 0..n {
            // One after the other: the first creates the key file and site.
            pair.spawn(i, extra).await;
        }
        pair
    }

    /// Starts instance `i` on `self.ports[i]` and waits until it answers.
    async fn spawn(&mut self, i: usize, extra: &[&str]) {
        let log =
            |n: &str| std::fs::File::create(self.dir.path().join(format!("{n}{i}.log"))).unwrap();
        let child = Command::new(BIN)
            .arg("serve")
            .args(self.db_args())
            .arg("--addr")
            .arg(format!("127.0.0.1:{}", self.ports[i]))
            .arg("--public-url")
            .arg(format!("http://127.0.0.1:{}", self.ports[0]))
            .args(extra)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log("stdout"))
            .stderr(log("stderr"))
            .spawn()
            .unwrap();
        self.children.push(child);
        self.wait_up(i).await;
    }

    fn db_args(&self) -> Vec<String> {
        if self.redb {
            return vec![
                "--db".into(),
                self.dir
                    .path()
                    .join("portcullis.redb")
                    .display()
                    .to_string(),
            ];
        }
        vec![
            "--db".into(),
            self.schema.url.clone(),
            "--db-schema".into(),
            self.schema.name.clone(),
            "--key-file".into(),
            key_file(self.dir.path()),
        ]
    }

    async fn wait_up(&self, i: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self
            .http
            .get(self.url(i, "/.well-known/oauth-authorization-server"))
            .send()
            .await
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "server {i} did not start\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The MCP URL (the site's resource) as instance 0's banner names it:
    /// as at start (a rotated key moves it: [`Pair::mcp_url`] asks the
    /// database).
    fn resource(&self) -> String {
        let out = std::fs::read_to_string(self.dir.path().join("stdout0.log")).unwrap();
        out.lines()
            .find_map(|l| l.trim().strip_prefix("MCP URL:"))
            .expect("the banner names the MCP URL")
            .trim()
            .to_owned()
    }

    fn url(&self, i: usize, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.ports[i])
    }

    fn logs(&self) -> String {
        let mut all = String::new();
        for n in [
            "stdout0", "stderr0", "stdout1", "stderr1", "stdout2", "stderr2",
        ] {
            all += &std::fs::read_to_string(self.dir.path().join(format!("{n}.log")))
                .unwrap_or_default();
        }
        all
    }

    /// An admin command on the shared database, while both serve.
    fn cli(&self, args: &[&str]) -> Vec<Value> {
        let out: Output = Command::new(BIN)
            .args(args)
            .args(self.db_args())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The MCP URL on instance `i`: the site's resource, path taken onto
    /// that instance's address.
    fn mcp_url(&self, i: usize) -> String {
        let site = &self.cli(&["site", "show"])[0];
        let resource = site["resource"].as_str().unwrap();
        let path = &resource[resource.find("/mcp/").unwrap()..];
        self.url(i, path)
    }

    async fn post_form(
        &self,
        i: usize,
        path: &str,
        cookie: Option<&str>,
        pairs: &[(&str, &str)],
    ) -> reqwest::Response {
        let mut req = self
            .http
            .post(self.url(i, path))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(encode_pairs(pairs.iter().copied()));
        if let Some(c) = cookie {
            req = req.header("cookie", c);
        }
        req.send().await.unwrap()
    }

    /// Registration, sign-in, consent and code exchange on instance 0:
    /// the client id and the token response.
    async fn login(&self, user: &str) -> (String, Value) {
        let (client_id, tokens, _) = self.login_with(user, "skills:read").await;
        (client_id, tokens)
    }

    /// [`Pair::login`] for `scope`; also the session cookie (signed in on
    /// instance 0, valid on both).
    async fn login_with(&self, user: &str, scope: &str) -> (String, Value, String) {
        let r = self
            .http
            .post(self.url(0, "/register"))
            .header("content-type", "application/json")
            .body(r#"{"redirect_uris":["http://127.0.0.1/callback"],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"],"client_name":"Test Agent"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
        let client_id = r.json::<Value>().await.unwrap()["client_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let challenge =
            CodeChallenge::from_verifier(CodeVerifier::parse(VERIFIER).unwrap()).to_base64url();
        let resource = self.resource();
        let query = encode_pairs([
            ("response_type", "code"),
            ("client_id", client_id.as_str()),
            ("redirect_uri", REDIRECT),
            ("state", "s"),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
            ("resource", resource.as_str()),
            ("scope", scope),
        ]);
        let path = format!("/authorize?{query}");
        let sign_in = format!("/sign-in?{}", encode_pairs([("next", path.as_str())]));
        let r = self
            .post_form(
                0,
                &sign_in,
                None,
                &[("intent", "signin"), ("username", user)],
            )
            .await;
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        let cookie = r.headers()["set-cookie"].to_str().unwrap();
        let cookie = cookie.split(';').next().unwrap().to_owned();
        let html = self
            .http
            .get(self.url(0, &path))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let at = html.find("name=\"csrf\" value=\"").expect("a csrf field") + 19;
        let csrf = html[at..].split('"').next().unwrap().to_owned();
        let r = self
            .post_form(
                0,
                &path,
                Some(&cookie),
                &[("intent", "allow"), ("csrf", &csrf)],
            )
            .await;
        assert_eq!(r.status(), StatusCode::FOUND);
        let location = r.headers()["location"].to_str().unwrap().to_owned();
        let (_, q) = location.split_once('?').unwrap();
        let code = Form::parse(q, 64 * 1024)
            .unwrap()
            .get("code")
            .unwrap()
            .to_owned();
        let r = self
            .post_form(
                usize::from(!self.redb),
                "/token",
                None,
                &[
                    ("grant_type", "authorization_code"),
                    ("code", &code),
                    ("redirect_uri", REDIRECT),
                    ("client_id", &client_id),
                    ("code_verifier", VERIFIER),
                ],
            )
            .await;
        assert_eq!(r.status(), StatusCode::OK, "the code from A redeems at B");
        (client_id, r.json().await.unwrap(), cookie)
    }

    /// `tools/call` at `mcp_url`: the structured result.
    async fn tool(&self, mcp_url: &str, bearer: &str, name: &str, arguments: Value) -> Value {
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": name, "arguments": arguments}});
        let r = self
            .http
            .post(mcp_url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .header("authorization", format!("Bearer {bearer}"))
            .body(call.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        r.json::<Value>().await.unwrap()["result"]["structuredContent"].clone()
    }

    async fn refresh(&self, i: usize, client_id: &str, token: &str) -> (StatusCode, Value) {
        let r = self
            .post_form(
                i,
                "/token",
                None,
                &[
                    ("grant_type", "refresh_token"),
                    ("refresh_token", token),
                    ("client_id", client_id),
                ],
            )
            .await;
        (r.status(), r.json().await.unwrap_or(Value::Null))
    }

    /// An MCP `initialize` at `mcp_url` with `bearer`.
    async fn mcp(&self, mcp_url: &str, bearer: &str) -> StatusCode {
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "e2e", "version": "1"}}});
        self.http
            .post(mcp_url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .header("authorization", format!("Bearer {bearer}"))
            .body(init.to_string())
            .send()
            .await
            .unwrap()
            .status()
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn key_file(dir: &Path) -> String {
    dir.join("portcullis.keys").display().to_string()
}

/// Repetitions of the refresh race.
const RACES: usize = 1_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_refresh_token_raced_across_two_instances_rotates_once() {
    let Some(url) = database("refresh race") else {
        return;
    };
    // With the default reuse grace, the loser of each race is answered
    // with the very successor the winner got (the client's own process, see
    // docs/clients.md), and the grant lives on, so one grant serves every
    // repetition; two rotations would show as two successors.
    let pair = Pair::start(&url, "refresh", &[]).await;
    let (client_id, tokens) = pair.login("alice").await;
    let mut current = tokens["refresh_token"].as_str().unwrap().to_owned();
    let started = Instant::now();
    for round in 0..RACES {
        let (a, b) = tokio::join!(
            pair.refresh(0, &client_id, &current),
            pair.refresh(1, &client_id, &current)
        );
        assert_eq!(a.0, StatusCode::OK, "round {round}, A: {}", a.1);
        assert_eq!(b.0, StatusCode::OK, "round {round}, B: {}", b.1);
        let (next_a, next_b) = (a.1["refresh_token"].as_str(), b.1["refresh_token"].as_str());
        assert_eq!(next_a, next_b, "round {round}: exactly one rotation");
        assert_ne!(next_a, Some(current.as_str()));
        current = next_a.unwrap().to_owned();
    }
    eprintln!(
        "{RACES} refresh races across two instances in {:?}",
        started.elapsed()
    );
    let grants = pair.cli(&["grants", "list"]);
    assert_eq!(grants.len(), 1);
    assert_eq!(grants[0]["status"], "live");
    let password = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
        .and_then(|(credentials, _)| credentials.split_once(':'))
        .map(|(_, p)| p.to_owned());
    if let Some(p) = password.filter(|p| p.len() >= 8) {
        assert!(!pair.logs().contains(&p), "the password is never logged");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_strict_rotation_a_raced_refresh_rotates_once_and_revokes() {
    let Some(url) = database("refresh reuse race") else {
        return;
    };
    let pair = Pair::start(&url, "reuse", &["--refresh-reuse-grace-secs", "0"]).await;
    for round in 0..20 {
        let (client_id, tokens) = pair.login(&format!("user{round}")).await;
        let token = tokens["refresh_token"].as_str().unwrap();
        let (a, b) = tokio::join!(
            pair.refresh(0, &client_id, token),
            pair.refresh(1, &client_id, token)
        );
        // Either the second came after the first committed (a reuse: it
        // is refused and revokes the grant), or the two ran serialised the
        // other way round; never two successes.
        let ok = [a.0, b.0].iter().filter(|s| **s == StatusCode::OK).count();
        assert!(ok <= 1, "round {round}: two rotations: {} / {}", a.1, b.1);
        for (s, v) in [&a, &b] {
            assert!(
                *s == StatusCode::OK
                    || (*s == StatusCode::BAD_REQUEST && v["error"] == "invalid_grant"),
                "round {round}: {s} {v}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_off_switch_and_key_rotation_from_the_cli_reach_both_instances_at_once() {
    let Some(url) = database("site changes") else {
        return;
    };
    let pair = Pair::start(&url, "site", &[]).await;
    let (client_id, tokens) = pair.login("alice").await;
    let access = tokens["access_token"].as_str().unwrap();
    let refresh = tokens["refresh_token"].as_str().unwrap();
    let (a, b) = (pair.mcp_url(0), pair.mcp_url(1));
    assert_eq!(pair.mcp(&a, access).await, StatusCode::OK);
    assert_eq!(pair.mcp(&b, access).await, StatusCode::OK);

    // The CLI works while both serve (no exclusive lock), and the next
    // request on either instance sees the change: no restart.
    // The NOTIFY that drops each instance's cached site row is
    // asynchronous: within its delay, and never past the cache's 1 s.
    assert_eq!(pair.cli(&["site", "disable"])[0]["enabled"], false);
    for (i, u) in [(0, &a), (1, &b)] {
        let took = until_status(&pair, u, access, StatusCode::SERVICE_UNAVAILABLE).await;
        eprintln!("instance {i} switched off after {took:?}");
        assert_eq!(
            pair.refresh(i, &client_id, refresh).await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
    assert_eq!(pair.cli(&["site", "enable"])[0]["enabled"], true);
    for u in [&a, &b] {
        until_status(&pair, u, access, StatusCode::OK).await;
    }

    // Rotation: a new MCP URL on both; the old one answers 404 on both
    // (their cached key is replaced on the CLI's NOTIFY), and the grants
    // are gone.
    let rotated = pair.cli(&["site", "rotate-key"]);
    let (new_a, new_b) = (pair.mcp_url(0), pair.mcp_url(1));
    assert_ne!(new_a, a);
    assert_eq!(
        rotated[0]["resource"].as_str().unwrap(),
        format!(
            "http://127.0.0.1:{}{}",
            pair.ports[0],
            &new_a[new_a.find("/mcp/").unwrap()..]
        )
    );
    // The NOTIFY is asynchronous: allow it a moment, far below any poll.
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let old = [pair.mcp(&a, access).await, pair.mcp(&b, access).await];
        if old == [StatusCode::NOT_FOUND; 2] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the old URL still served: {old:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for (i, u) in [(0, &new_a), (1, &new_b)] {
        assert_eq!(
            pair.mcp(u, access).await,
            StatusCode::UNAUTHORIZED,
            "instance {i}: grants revoked"
        );
    }
}

/// How long until an MCP request at `mcp_url` with `bearer` answers
/// `status`: at most the read cache's bound (1 s) and a margin.
async fn until_status(pair: &Pair, mcp_url: &str, bearer: &str, status: StatusCode) -> Duration {
    let began = Instant::now();
    loop {
        let now = pair.mcp(mcp_url, bearer).await;
        if now == status {
            return began.elapsed();
        }
        assert!(
            began.elapsed() < Duration::from_millis(1_500),
            "still {now}, not {status}, after {:?}",
            began.elapsed()
        );
    }
}

/// The connected tab of a browser signed in on instance 0.
#[derive(Clone)]
struct Tab {
    http: reqwest::Client,
    base: String,
    cookie: String,
    csrf: String,
}

impl Tab {
    /// The tab's current version, and a long-poll left waiting from it
    /// (given 300 ms to park) that yields its answer and how long it waited.
    async fn park(&self) -> (u64, tokio::task::JoinHandle<(Value, Duration)>) {
        let version = self.poll(0).await["version"].as_u64().unwrap();
        let tab = self.clone();
        let parked = tokio::spawn(async move {
            let began = Instant::now();
            (tab.poll(version).await, began.elapsed())
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        (version, parked)
    }

    async fn open(pair: &Pair, cookie: &str) -> Self {
        let html = pair
            .http
            .get(pair.url(0, "/agents"))
            .header("cookie", cookie)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let at = html.find("name=\"csrf\" value=\"").expect("a csrf field") + 19;
        let tab = Self {
            http: pair.http.clone(),
            base: pair.url(0, ""),
            cookie: cookie.to_owned(),
            csrf: html[at..].split('"').next().unwrap().to_owned(),
        };
        let hello =
            json!({"tabId": "tab-1", "pageInstance": "page-1", "visible": true, "takeOver": false});
        let (status, v) = tab.post("/agents/tab/connect", &hello).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        tab
    }

    async fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .header("cookie", &self.cookie)
            .header("x-csrf-token", &self.csrf)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn poll(&self, since: u64) -> Value {
        let r = self
            .http
            .get(format!(
                "{}/agents/tab/work?tabId=tab-1&pageInstance=page-1&since={since}",
                self.base
            ))
            .header("cookie", &self.cookie)
            .header("x-csrf-token", &self.csrf)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        r.json().await.unwrap()
    }
}

const REQUEST: &str = "0190b2a4-7c3e-7def-8abc-000000000001";

/// Two instances, and alice signed in on A with a grant of `scope`: her
/// access token, her session cookie and her connected tab on A.
async fn alice_with_a_tab(url: &str, test: &str, scope: &str) -> (Pair, String, String, Tab) {
    let pair = Pair::start(url, test, &[]).await;
    let (_, tokens, cookie) = pair.login_with("alice", scope).await;
    let access = tokens["access_token"].as_str().unwrap().to_owned();
    let tab = Tab::open(&pair, &cookie).await;
    (pair, access, cookie, tab)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_asked_through_b_wakes_the_tab_on_a_and_one_request_id_is_admitted_once() {
    let Some(url) = database("cross-instance wake-up") else {
        return;
    };
    let (pair, access, _cookie, tab) =
        alice_with_a_tab(&url, "wake", "skills:read skills:write").await;
    // A long-poll waits on A; the call goes to B.
    let (_, parked) = tab.park().await;
    let code = json!([{"skill": "create_note", "args": {"title": "Groceries", "body": "milk"}}])
        .to_string();
    let call = json!({"requestId": REQUEST, "code": code});
    let (a_url, b_url) = (pair.mcp_url(0), pair.mcp_url(1));
    let v = pair.tool(&b_url, &access, "execute", call.clone()).await;
    assert_eq!(v["status"], "approval_pending", "{v}");
    let (woken, waited) = parked.await.unwrap();
    assert!(
        waited < Duration::from_secs(5),
        "B's NOTIFY woke the poll on A ({waited:?}; a poll waits 25 s otherwise)"
    );
    let approvals = woken["approvals"].as_array().unwrap();
    assert_eq!(approvals.len(), 1, "{woken}");
    assert_eq!(approvals[0]["requestId"], REQUEST);

    // The same requestId raced on both: one request, one approval.
    let (x, y) = tokio::join!(
        pair.tool(&a_url, &access, "execute", call.clone()),
        pair.tool(&b_url, &access, "execute", call.clone())
    );
    assert_eq!(x["status"], "approval_pending", "{x}");
    assert_eq!(y["status"], "approval_pending", "{y}");
    assert_eq!(x["approval"], y["approval"]);
    let now = tab.poll(0).await;
    assert_eq!(now["approvals"].as_array().unwrap().len(), 1, "{now}");
}

/// The connected tab on A performing every job it is handed: it creates
/// the note through A's own notes API, reports through A, and keeps the
/// request id of each job it ran.
fn perform_on_a(
    tab: Tab,
) -> (
    tokio::task::JoinHandle<()>,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    let ran = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = std::sync::Arc::clone(&ran);
    let task = tokio::spawn(async move {
        let mut since = 0;
        loop {
            let work = tab.poll(since).await;
            since = work["version"].as_u64().unwrap_or(since);
            for job in work["jobs"].as_array().cloned().unwrap_or_default() {
                seen.lock()
                    .unwrap()
                    .push(job["requestId"].as_str().unwrap().to_owned());
                let (status, note) = tab.post("/app/notes", &job["args"]).await;
                assert_eq!(status, StatusCode::CREATED, "{note}");
                let report = json!({"job": job["job"], "ok": true, "summary": note.to_string()});
                let (status, v) = tab.post("/agents/tab/report", &report).await;
                assert_eq!(status, StatusCode::OK, "{v}");
            }
        }
    });
    (task, ran)
}

/// Approves, through the tab on A, the one pending approval of `request`
/// (once A's tab shows it: another instance's `NOTIFY` takes a moment).
async fn approve_once(tab: &Tab, request: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let a = loop {
        let work = tab.poll(0).await;
        let found = work["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["requestId"] == request)
            .cloned();
        match found {
            Some(a) => break a,
            None if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            None => panic!("no approval of {request}: {work}"),
        }
    };
    let decide = json!({"grant": a["grant"], "requestId": request, "seq": a["seq"],
                        "fingerprint": a["fingerprint"], "decision": "once"});
    let (status, v) = tab.post("/agents/tab/decide", &decide).await;
    assert_eq!(status, StatusCode::OK, "{v}");
}

/// Calls `execute` at `mcp_url` until it is no longer `execution_pending`
/// (at most 40 s).
async fn until_done(pair: &Pair, mcp_url: &str, access: &str, call: &Value) -> Value {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let v = pair.tool(mcp_url, access, "execute", call.clone()).await;
        if v["status"] != "execution_pending" || Instant::now() > deadline {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_driven_on_b_is_performed_once_by_the_tab_on_a_and_b_answers_with_its_result() {
    let Some(url) = database("runs across instances") else {
        return;
    };
    let (pair, access, cookie, tab) =
        alice_with_a_tab(&url, "runs", "skills:read skills:write").await;
    let (a_url, b_url) = (pair.mcp_url(0), pair.mcp_url(1));
    let note = |title: &str| {
        json!([{"skill": "create_note", "args": {"title": title, "body": "milk"}}]).to_string()
    };

    // Executed on B, performed by the tab polling on A, answered by B.
    let call = json!({"requestId": REQUEST, "code": note("Groceries")});
    let v = pair.tool(&b_url, &access, "execute", call.clone()).await;
    assert_eq!(v["status"], "approval_pending", "{v}");
    approve_once(&tab, REQUEST).await;
    let (performer, ran) = perform_on_a(tab.clone());
    let began = Instant::now();
    let v = pair.tool(&b_url, &access, "execute", call.clone()).await;
    assert_eq!(v["status"], "done", "B answers with the run's result: {v}");
    assert_eq!(v["result"][0]["result"]["title"], "Groceries", "{v}");
    assert!(
        began.elapsed() < Duration::from_millis(1500),
        "the report through A woke B's driver at once, not its 2 s check ({:?})",
        began.elapsed()
    );

    // One requestId raced across A and B: the action runs once, and both
    // end with the same stored result.
    let raced = "0190b2a4-7c3e-7def-8abc-000000000002";
    let call = json!({"requestId": raced, "code": note("Raced")});
    let (x, y) = tokio::join!(
        pair.tool(&a_url, &access, "execute", call.clone()),
        pair.tool(&b_url, &access, "execute", call.clone())
    );
    // One admits the run and asks for approval; the other finds it asked
    // or still being asked (`execution_pending`).
    let statuses = [&x["status"], &y["status"]];
    assert!(statuses.contains(&&json!("approval_pending")), "{x} {y}");
    assert!(
        statuses
            .iter()
            .all(|s| **s == "approval_pending" || **s == "execution_pending"),
        "{x} {y}"
    );
    approve_once(&tab, raced).await;
    let (x, y) = tokio::join!(
        until_done(&pair, &a_url, &access, &call),
        until_done(&pair, &b_url, &access, &call)
    );
    assert_eq!(x["status"], "done", "{x}");
    assert_eq!(x["result"], y["result"], "one run, one result: {x} {y}");
    performer.abort();

    let ran = ran.lock().unwrap().clone();
    assert_eq!(
        ran,
        [REQUEST, raced],
        "each action was handed to the tab once"
    );
    let (status, notes) = {
        let r = pair
            .http
            .get(pair.url(0, "/app/notes"))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        (r.status(), r.json::<Value>().await.unwrap())
    };
    assert_eq!(status, StatusCode::OK);
    let titles: Vec<&str> = notes["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["title"].as_str().unwrap())
        .collect();
    assert_eq!(
        titles,
        ["Groceries", "Raced"],
        "each note created once: {notes}"
    );
}

/// Whether `cookie` is a signed-in session at instance `i` (its Agents page
/// has a form with a CSRF token rather than the sign-in form).
async fn signed_in_at(pair: &Pair, i: usize, cookie: &str) -> bool {
    let html = pair
        .http
        .get(pair.url(i, "/agents"))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    html.contains("name=\"csrf\"") && !html.contains("Development sign-in")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_session_and_its_links_and_sign_out_reach_every_instance() {
    let Some(url) = database("browser sessions across instances") else {
        return;
    };
    let pair = Pair::start(&url, "sessions", &[]).await;
    let (_, _, cookie) = pair.login_with("alice", "skills:read").await;
    let tab = Tab::open(&pair, &cookie).await;
    assert!(signed_in_at(&pair, 0, &cookie).await);
    assert!(
        signed_in_at(&pair, 1, &cookie).await,
        "a session signed in on A is valid on B (one epoch in the database)"
    );

    // A link opened through B reaches the browser session's tab on A, once.
    let r = pair
        .http
        .get(pair.url(1, "/_agent-native/open?app=mail&view=inbox&f_label=work"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FOUND);
    let work = tab.poll(0).await;
    let messages = work["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1, "{work}\n{}", pair.logs());
    assert_eq!(messages[0]["navigate"]["view"], "inbox", "{work}");
    let (status, v) = tab
        .post("/agents/tab/ack", &json!({"id": messages[0]["id"]}))
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let (status, _) = tab
        .post("/agents/tab/ack", &json!({"id": messages[0]["id"]}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "acknowledged once");

    // Signed out through B: refused on both.
    let r = pair
        .http
        .post(pair.url(1, "/agents"))
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(encode_pairs([
            ("intent", "signout"),
            ("csrf", tab.csrf.as_str()),
        ]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(!signed_in_at(&pair, 1, &cookie).await);
    let deadline = Instant::now() + Duration::from_secs(3);
    while signed_in_at(&pair, 0, &cookie).await {
        assert!(
            Instant::now() < deadline,
            "a sign-out through B ends the session on A"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_instance_s_runs_end_at_the_next_start_and_a_live_one_s_go_on() {
    let Some(url) = database("lost runs across instances") else {
        return;
    };
    let (mut pair, access, _cookie, tab) = alice_with_a_tab(&url, "lost", "skills:read").await;
    let (a_url, b_url) = (pair.mcp_url(0), pair.mcp_url(1));
    let list = json!([{"skill": "list_notes", "args": {}}]).to_string();
    let on_b = "0190b2a4-7c3e-7def-8abc-0000000000b1";
    let on_a = "0190b2a4-7c3e-7def-8abc-0000000000a1";
    let call = |id: &str| json!({"requestId": id, "code": list});
    // One run driven by B, one by A; the tab takes both jobs and reports
    // neither yet.
    for (mcp, id) in [(&b_url, on_b), (&a_url, on_a)] {
        let http = pair.http.clone();
        let (mcp, access, call) = (mcp.clone(), access.clone(), call(id));
        tokio::spawn(async move {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                              "params": {"name": "execute", "arguments": call}});
            let _ = http
                .post(mcp)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2025-06-18")
                .header("authorization", format!("Bearer {access}"))
                .body(body.to_string())
                .send()
                .await;
        });
    }
    let mut jobs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while jobs.len() < 2 {
        assert!(
            Instant::now() < deadline,
            "both jobs reach the tab: {jobs:?}"
        );
        let work = tab.poll(0).await;
        jobs.extend(work["jobs"].as_array().cloned().unwrap_or_default());
    }

    // B dies holding its run's ticket. Once its lease lapses, the next
    // instance to start ends that run, and only that one.
    pair.children[1].kill().unwrap();
    let beat = json!({"tabId": "tab-1", "pageInstance": "page-1", "visible": true});
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let (status, v) = tab.post("/agents/tab/heartbeat", &beat).await;
        assert_eq!(status, StatusCode::OK, "{v}");
    }
    pair.ports.push(free_port());
    pair.spawn(2, &[]).await;
    let c_url = pair.mcp_url(2);
    let v = pair.tool(&c_url, &access, "execute", call(on_b)).await;
    assert_eq!(v["status"], "done", "B's lost run ended: {v}");
    assert_eq!(v["error"]["code"], "ACTION_UNAVAILABLE", "cut off: {v}");
    assert_eq!(v["unknownTail"], true, "{v}");
    assert_eq!(
        v["error"]["message"],
        "the server instance that ran the call stopped or lost its lease while the call ran",
        "the message names what happened (the tab never changed): {v}"
    );
    let v = pair.tool(&c_url, &access, "execute", call(on_a)).await;
    assert_eq!(
        v["status"],
        "execution_pending",
        "A's run goes on: {v}\n{}",
        pair.logs()
    );
    // A's run completes with the tab's report.
    let job = jobs.iter().find(|j| j["requestId"] == on_a).unwrap();
    let report = json!({"job": job["job"], "ok": true, "summary": "{\"notes\":[]}"});
    let (status, v) = tab.post("/agents/tab/report", &report).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let v = until_done(&pair, &a_url, &access, &call(on_a)).await;
    assert_eq!(v["status"], "done", "{v}");
    assert_eq!(v["result"][0]["result"]["notes"], json!([]), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_can_come_from_a_file_and_not_the_command_line() {
    let Some(url) = database("--db-password-file") else {
        return;
    };
    let pair = Pair::start(&url, "pwfile", &[]).await;
    let mut bare = url::Url::parse(&pair.schema.url).unwrap();
    let password = bare
        .password()
        .expect("the test cluster's URL has one")
        .to_owned();
    bare.set_password(None).unwrap();
    let file = pair.dir.path().join("db.password");
    std::fs::write(&file, format!("{password}\n")).unwrap();
    let show = |extra: &[&str]| {
        Command::new(BIN)
            .args([
                "site",
                "show",
                "--db",
                bare.as_str(),
                "--db-schema",
                &pair.schema.name,
            ])
            .args(["--key-file", &key_file(pair.dir.path())])
            .args(extra)
            .output()
            .unwrap()
    };
    let without = show(&[]);
    assert!(!without.status.success(), "no password, no connection");
    let with = show(&["--db-password-file", file.to_str().unwrap()]);
    assert!(
        with.status.success(),
        "{}",
        String::from_utf8_lossy(&with.stderr)
    );
    let out = String::from_utf8_lossy(&with.stdout) + String::from_utf8_lossy(&with.stderr);
    assert!(!out.contains(&password), "never printed");
    let missing = show(&["--db-password-file", "/nonexistent/pw"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/pw"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_that_reconnects_answers_every_waiting_poll_at_once() {
    let Some(url) = database("listener reconnect") else {
        return;
    };
    // This pair's connections carry a name of their own, so that only its
    // listeners are cut (other tests share the cluster).
    let name = format!("relisten_{}", std::process::id());
    let url = format!("{url}?application_name={name}");
    let (pair, _access, _cookie, tab) = alice_with_a_tab(&url, "relisten", "skills:read").await;
    let (version, parked) = tab.park().await;
    // Cut every LISTEN connection (both instances'): a NOTIFY sent now
    // would be missed, so a reconnected listener bumps every mailbox.
    let cut = std::thread::spawn(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE query LIKE 'LISTEN %' AND application_name = $1 AND pid <> pg_backend_pid()",
            &[&name],
        )
        .unwrap()
        .len()
    })
    .join()
    .unwrap();
    assert!(cut >= 2, "both listeners found: {cut}");
    let (woken, waited) = parked.await.unwrap();
    assert!(
        woken["version"].as_u64().unwrap() > version,
        "a new version: {woken}"
    );
    assert!(
        waited < Duration::from_secs(10),
        "the reconnected listener woke the poll ({waited:?}; a poll waits 25 s otherwise)\n{}",
        pair.logs()
    );
}

/// A PostgreSQL cluster of one test's own (`store-postgres/test-cluster.sh`
/// in a temporary directory, on a free port), for a test that restarts or
/// stops it: the shared cluster serves every other test at once.
struct Cluster {
    dir: tempfile::TempDir,
    port: u16,
    url: String,
}

impl Cluster {
    fn start() -> Self {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        // The script runs the server as an unprivileged user when root.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut cluster = Self {
            dir,
            port: free_port(),
            url: String::new(),
        };
        let out = cluster.script("start");
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .clone_into(&mut cluster.url);
        cluster
    }

    fn script(&self, command: &str) -> Output {
        let out = Command::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../store-postgres/test-cluster.sh"
        ))
        .arg(command)
        .env("PORTCULLIS_PG_DIR", self.dir.path().join("pg"))
        .env("PORTCULLIS_PG_PORT", self.port.to_string())
        .stdin(Stdio::null())
        .output()
        .unwrap();
        assert!(
            out.status.success(),
            "test-cluster.sh {command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../store-postgres/test-cluster.sh"
        ))
        .arg("stop")
        .env("PORTCULLIS_PG_DIR", self.dir.path().join("pg"))
        .env("PORTCULLIS_PG_PORT", self.port.to_string())
        .output();
    }
}

/// One user's traffic under load: a refresh chain, MCP requests with its
/// access token, and its Agents page.
struct Load {
    client_id: String,
    refresh: String,
    access: String,
    cookie: String,
}

/// What the load saw: per route, each answer's status, and whether the
/// database had come back (the restart returned) before it was sent.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(&'static str, u16, bool)>>>;

impl Load {
    /// Sends one round of the user's requests through instance `i`; a
    /// refresh answered 200 moves the chain on, a 503 keeps its token (the
    /// client retries it); anything else is recorded and ends the chain.
    async fn round(&mut self, pair: &Pair, mcp: &str, i: usize, back: bool, seen: &Seen) {
        let (status, body) = pair.refresh(i, &self.client_id, &self.refresh).await;
        if status == StatusCode::OK {
            body["refresh_token"]
                .as_str()
                .unwrap()
                .clone_into(&mut self.refresh);
            body["access_token"]
                .as_str()
                .unwrap()
                .clone_into(&mut self.access);
        }
        seen.lock().unwrap().push(("/token", status.as_u16(), back));
        let status = pair.mcp(mcp, &self.access).await;
        seen.lock().unwrap().push(("mcp", status.as_u16(), back));
        let status = pair
            .http
            .get(pair.url(i, "/agents"))
            .header("cookie", &self.cookie)
            .send()
            .await
            .map_or(0, |r| r.status().as_u16());
        seen.lock().unwrap().push(("/agents", status, back));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restart_under_load_answers_no_500_and_a_database_down_answers_503() {
    if database("database restart").is_none() {
        return;
    }
    let cluster = Cluster::start();
    let pair = Pair::start(&cluster.url, "restart", &[]).await;
    let mut users = Vec::new();
    for u in 0..3 {
        let (client_id, tokens, cookie) = pair.login_with(&format!("user{u}"), "skills:read").await;
        users.push(Load {
            client_id,
            refresh: tokens["refresh_token"].as_str().unwrap().to_owned(),
            access: tokens["access_token"].as_str().unwrap().to_owned(),
            cookie,
        });
    }
    let mcp = [pair.mcp_url(0), pair.mcp_url(1)];
    let pair = std::sync::Arc::new(pair);
    let seen: Seen = std::sync::Arc::default();
    let back = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for mut user in users {
        let (pair, mcp, seen, back, stop) = (
            std::sync::Arc::clone(&pair),
            mcp.clone(),
            std::sync::Arc::clone(&seen),
            std::sync::Arc::clone(&back),
            std::sync::Arc::clone(&stop),
        );
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                let i = n % 2;
                n += 1;
                user.round(&pair, &mcp[i], i, back.load(Ordering::SeqCst), &seen)
                    .await;
            }
            user
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    // `pg_ctl restart -m fast`: every connection of both instances ends,
    // in the middle of whatever it was doing.
    let restarting = std::thread::scope(|s| s.spawn(|| cluster.script("restart")).join());
    assert!(restarting.is_ok());
    back.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::SeqCst);
    let mut users = Vec::new();
    for t in tasks {
        users.push(t.await.unwrap());
    }
    let seen = seen.lock().unwrap().clone();
    let after: Vec<_> = seen.iter().filter(|(_, _, back)| *back).collect();
    let errors: Vec<_> = seen
        .iter()
        .filter(|(_, s, _)| *s >= 500 || *s == 0)
        .collect();
    eprintln!(
        "{} answers, {} after the restart returned; 5xx: {errors:?}",
        seen.len(),
        after.len()
    );
    assert!(after.len() >= 30, "the load went on after the restart");
    assert!(
        !seen.iter().any(|(_, s, _)| *s == 500),
        "no 500, during the restart or after: {errors:?}\n{}",
        pair.logs()
    );
    assert!(
        after.iter().all(|(_, s, _)| *s == 200),
        "once the database is back, every answer is 200: {errors:?}"
    );
    let grants = pair.cli(&["grants", "list"]);
    assert_eq!(grants.len(), 3);
    assert!(
        grants.iter().all(|g| g["status"] == "live"),
        "no grant revoked by a retried refresh: {grants:?}"
    );

    down_answers_503_then_back(&pair, &cluster, &users[0], &mcp[1]).await;
}

/// The database down: 503 with Retry-After on the OAuth routes, the MCP
/// guard and the server's own pages; then up, and `user`'s refresh token
/// (refused while down) rotates.
async fn down_answers_503_then_back(pair: &Pair, cluster: &Cluster, user: &Load, mcp: &str) {
    cluster.script("down");
    let form = [
        ("grant_type", "refresh_token"),
        ("refresh_token", user.refresh.as_str()),
        ("client_id", user.client_id.as_str()),
    ];
    let refresh = pair.post_form(0, "/token", None, &form);
    let guard = pair
        .http
        .post(mcp)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", format!("Bearer {}", user.access))
        .body("{}")
        .send();
    let page = pair
        .http
        .get(pair.url(1, "/agents"))
        .header("cookie", &user.cookie)
        .send();
    let (refresh, guard, page) = tokio::join!(refresh, guard, page);
    for (route, r) in [
        ("/token", refresh),
        ("mcp", guard.unwrap()),
        ("/agents", page.unwrap()),
    ] {
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE, "{route}");
        assert!(r.headers().contains_key("retry-after"), "{route}");
    }
    assert!(
        pair.logs().contains("WARN"),
        "each 503's cause is logged at WARN"
    );
    cluster.script("up");
    let (status, body) = pair.refresh(1, &user.client_id, &user.refresh).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the token refused while down still works: {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_whose_commit_answer_was_lost_answers_200_exactly_when_it_committed() {
    let Some(url) = database("lost commit answers") else {
        return;
    };
    // Both instances reach the database through a proxy that can cut a
    // connection at a COMMIT.
    let proxy = proxy::Proxy::start(&url);
    let pair = Pair::start(&proxy.url(&url), "lostcommit", &[]).await;
    let (client_id, tokens) = pair.login("alice").await;
    let token = tokens["refresh_token"].as_str().unwrap().to_owned();

    // The rotation's COMMIT reaches the server; its answer never comes
    // back. The instance looks the transaction up: it committed, so the
    // client gets the successor, and the successor works.
    proxy.at_next_commit(proxy::AtCommit::CutAfter);
    let (status, body) = pair.refresh(0, &client_id, &token).await;
    assert_eq!(proxy.cuts(), 1, "the rotation's commit was cut");
    assert_eq!(
        status,
        StatusCode::OK,
        "it committed: {body}\n{}",
        pair.logs()
    );
    let token = body["refresh_token"].as_str().unwrap().to_owned();
    let (status, body) = pair.refresh(1, &client_id, &token).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the delivered successor is the live one: {body}"
    );
    let token = body["refresh_token"].as_str().unwrap().to_owned();

    // The connection fails before the COMMIT reaches the server: nothing
    // rotated, the client is told to come back (503, Retry-After), and its
    // retry of the same token (strict mode: reuse would revoke) rotates.
    proxy.at_next_commit(proxy::AtCommit::CutBefore);
    let r = pair
        .post_form(
            1,
            "/token",
            None,
            &[
                ("grant_type", "refresh_token"),
                ("refresh_token", &token),
                ("client_id", &client_id),
            ],
        )
        .await;
    assert_eq!(proxy.cuts(), 2, "the rotation's commit was cut");
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.headers().contains_key("retry-after"));
    let (status, body) = pair.refresh(0, &client_id, &token).await;
    assert_eq!(status, StatusCode::OK, "the retry rotates: {body}");
    let grants = pair.cli(&["grants", "list"]);
    assert_eq!(grants.len(), 1);
    assert_eq!(grants[0]["status"], "live", "nothing revoked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_run_re_asked_as_its_owner_s_lease_lapses_ends_and_is_never_left_pending() {
    let Some(url) = database("lost run re-asked") else {
        return;
    };
    let (pair, access, _cookie, tab) = alice_with_a_tab(&url, "reask", "skills:read").await;
    let (a_url, b_url) = (pair.mcp_url(0), pair.mcp_url(1));
    let call = json!({"requestId": "0190b2a4-7c3e-7def-8abc-0000000000c1",
                      "code": json!([{"skill": "list_notes", "args": {}}]).to_string()});
    // B drives the run; the tab (on A) takes its job and reports nothing.
    let (http, mcp, bearer, body) = (
        pair.http.clone(),
        b_url.clone(),
        access.clone(),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "execute", "arguments": call.clone()}}),
    );
    tokio::spawn(async move {
        let _ = http
            .post(mcp)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .header("authorization", format!("Bearer {bearer}"))
            .body(body.to_string())
            .send()
            .await;
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while tab.poll(0).await["jobs"]
        .as_array()
        .is_none_or(Vec::is_empty)
    {
        assert!(Instant::now() < deadline, "the job reaches the tab");
    }

    // B dies holding the run's claim; A is live, its tab too, and its
    // sweep (every minute) has not run. As soon as B's lease has lapsed
    // (20 s), the run is re-asked on A: A finds the lapsed claim and ends
    // the run it held, rather than taking the claim, finding no driver and
    // answering `execution_pending` for a run that no one will ever end.
    let mut pair = pair;
    pair.children[1].kill().unwrap();
    let _ = pair.children[1].wait();
    let beat = json!({"tabId": "tab-1", "pageInstance": "page-1", "visible": true});
    let lapsed = Instant::now() + Duration::from_secs(21);
    while Instant::now() < lapsed {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (status, v) = tab.post("/agents/tab/heartbeat", &beat).await;
        assert_eq!(status, StatusCode::OK, "{v}");
    }
    for ask in 0..2 {
        let v = pair.tool(&a_url, &access, "execute", call.clone()).await;
        assert_eq!(v["status"], "done", "ask {ask}: the lost run ended: {v}");
        assert_eq!(v["error"]["code"], "ACTION_UNAVAILABLE", "{v}");
        assert_eq!(v["unknownTail"], true, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("server instance")),
            "{v}"
        );
    }
}

/// Refreshes of one token sent at once, this many per race.
const RACERS: usize = 32;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_token_raced_many_ways_never_answers_a_server_error() {
    let Some(url) = database("many-way refresh race") else {
        return;
    };
    // With the reuse grace every racer is answered with the one
    // successor; with strict rotation one rotates and the others are reuse
    // (`invalid_grant`, and the grant is revoked). Either way never a 5xx:
    // a racer that lost to another's commit runs again, with a pause, for
    // as long as the writer's conflict budget allows.
    for (name, extra) in [
        ("grace", &[][..]),
        ("strict", &["--refresh-reuse-grace-secs", "0"][..]),
    ] {
        let pair = std::sync::Arc::new(Pair::start(&url, &format!("race{name}"), extra).await);
        let (client_id, tokens) = pair.login("alice").await;
        let mut token = tokens["refresh_token"].as_str().unwrap().to_owned();
        let rounds = if extra.is_empty() { 40 } else { 1 };
        for round in 0..rounds {
            let mut racing = tokio::task::JoinSet::new();
            for i in 0..RACERS {
                let (pair, client_id, token) = (
                    std::sync::Arc::clone(&pair),
                    client_id.clone(),
                    token.clone(),
                );
                racing.spawn(async move { pair.refresh(i % 2, &client_id, &token).await });
            }
            let answers = racing.join_all().await;
            let mut successors = std::collections::HashSet::new();
            for (status, body) in &answers {
                assert!(
                    *status == StatusCode::OK
                        || (*status == StatusCode::BAD_REQUEST && body["error"] == "invalid_grant"),
                    "{name} round {round}: {status} {body}"
                );
                if *status == StatusCode::OK {
                    successors.insert(body["refresh_token"].as_str().unwrap().to_owned());
                }
            }
            assert_eq!(successors.len(), 1, "{name} round {round}: one rotation");
            token = successors.into_iter().next().unwrap();
        }
    }
}

#[test]
fn a_database_beyond_loopback_without_sslmode_refuses_to_start() {
    // No database is reached: the URL is refused as it is read, so this
    // runs without PORTCULLIS_TEST_POSTGRES_URL too.
    let dir = tempfile::tempdir().unwrap();
    let run = |db: &str| {
        let mut child = Command::new(BIN)
            .args(["serve", "--db", db, "--key-file", &key_file(dir.path())])
            .args(["--addr", &format!("127.0.0.1:{}", free_port())])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("serve --db {db} kept running");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        child.wait_with_output().unwrap()
    };
    let out = run("postgres://portcullis:s3cret-pw@db.example.invalid:5432/app");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("sslmode=verify-full"), "{stderr}");
    assert!(stderr.contains("sslmode=disable"), "{stderr}");
    assert!(!stderr.contains("s3cret-pw"), "{stderr}");
    // Plaintext written down is accepted as asked (and then fails to
    // connect: the host does not exist), not refused for its sslmode.
    let out = run("postgres://portcullis:s3cret-pw@db.example.invalid:5432/app?sslmode=disable");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(!stderr.contains("sslmode=verify-full"), "{stderr}");
    assert!(!stderr.contains("s3cret-pw"), "{stderr}");
}

/// An authorized MCP `ping` at `mcp_url`: its status.
async fn ping(http: &reqwest::Client, mcp_url: &str, bearer: &str) -> StatusCode {
    http.post(mcp_url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .header("authorization", format!("Bearer {bearer}"))
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .await
        .map_or(StatusCode::BAD_GATEWAY, |r| r.status())
}

/// Revokes each of `grants` (client id, refresh token, access token)
/// through instance 0 and measures how long instance 1 still takes the
/// access token: from the revocation's answer to the first refusal, each.
async fn revocation_delays(pair: &Pair, grants: &[(String, String, String)]) -> Vec<Duration> {
    let b = pair.mcp_url(1);
    let mut delays = Vec::with_capacity(grants.len());
    for (client_id, refresh, access) in grants {
        assert_eq!(
            ping(&pair.http, &b, access).await,
            StatusCode::OK,
            "live on B first"
        );
        let r = pair
            .post_form(
                0,
                "/revoke",
                None,
                &[
                    ("token", refresh.as_str()),
                    ("client_id", client_id.as_str()),
                ],
            )
            .await;
        assert_eq!(r.status(), StatusCode::OK);
        let revoked = Instant::now();
        loop {
            let status = ping(&pair.http, &b, access).await;
            if status == StatusCode::UNAUTHORIZED {
                break;
            }
            assert_eq!(status, StatusCode::OK);
            assert!(
                revoked.elapsed() < Duration::from_secs(5),
                "still accepted on B after {:?}",
                revoked.elapsed()
            );
        }
        delays.push(revoked.elapsed());
    }
    delays.sort();
    delays
}

/// `n` grants of their own (client id, refresh token, access token).
async fn grants(pair: &Pair, n: usize) -> Vec<(String, String, String)> {
    let mut out = Vec::with_capacity(n);
    for u in 0..n {
        let (client_id, tokens) = pair.login(&format!("user{u}")).await;
        out.push((
            client_id,
            tokens["refresh_token"].as_str().unwrap().to_owned(),
            tokens["access_token"].as_str().unwrap().to_owned(),
        ));
    }
    out
}

/// p50, p99 and max of sorted `delays`, for display.
fn percentiles(delays: &[Duration]) -> String {
    let at = |q: usize| delays[(delays.len() * q / 100).min(delays.len() - 1)];
    format!(
        "n {}, p50 {:?}, p99 {:?}, max {:?}",
        delays.len(),
        at(50),
        at(99),
        delays[delays.len() - 1]
    )
}

/// Cuts the read cache's `LISTEN` connection of every instance whose
/// connections carry `application_name = name`; how many were cut.
fn cut_cache_listeners(url: &str, name: &str) -> usize {
    let (url, name) = (url.to_owned(), name.to_owned());
    std::thread::spawn(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE query = 'LISTEN portcullis_rows' AND application_name = $1",
            &[&name],
        )
        .unwrap()
        .len()
    })
    .join()
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_revoked_on_one_instance_is_refused_on_the_other_within_the_cache_bound() {
    let Some(url) = database("revocation across instances") else {
        return;
    };
    // The bearer check on B reads the grant from memory; a revocation on A
    // drops it there through the trigger's NOTIFY. Never later than the
    // cache's bound (1 s), also with B's listener cut (then B reads the
    // database until it listens again).
    let name = format!("revoke_{}", std::process::id());
    let url = format!("{url}?application_name={name}");
    let pair = Pair::start(&url, "revoke", &[]).await;
    let all = grants(&pair, 60).await;
    let (listening, cut) = all.split_at(40);
    let delays = revocation_delays(&pair, listening).await;
    eprintln!("listening: {}", percentiles(&delays));
    assert!(
        delays[delays.len() - 1] < Duration::from_secs(1),
        "{delays:?}"
    );

    assert_eq!(
        cut_cache_listeners(&url, &name),
        2,
        "both instances' listeners"
    );
    let delays = revocation_delays(&pair, cut).await;
    eprintln!("listener cut: {}", percentiles(&delays));
    assert!(
        delays[delays.len() - 1] < Duration::from_secs(1),
        "{delays:?}"
    );
}

/// The figures of docs/figures.md ("Bearer checks across instances"):
/// authorized `ping` throughput on PostgreSQL with the read cache, without
/// it, and on redb, in one run; then how long a revoked grant is still
/// accepted on the other instance, over 1 000 revocations, listening and
/// with the listener cut. Run it with
/// `cargo test --release -p portcullis-server --test instances -- --ignored --nocapture figures`
/// (with `PORTCULLIS_TEST_POSTGRES_URL` set).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "a measurement, not a check: run by hand"]
async fn figures_bearer_checks_and_revocation_visibility() {
    const CLIENTS: usize = 16;
    const ROUNDS: usize = 5;
    let Some(url) = database("figures") else {
        return;
    };
    let name = format!("figures_{}", std::process::id());
    let url = format!("{url}?application_name={name}");
    let cached = Pair::start(&url, "figcached", &[]).await;
    let uncached = Pair::start(&url, "figuncached", &["--db-read-cache-ms", "0"]).await;
    let redb = Pair::start("", "figredb", &[]).await;
    let mut targets = Vec::new();
    for (label, pair, i) in [
        ("PostgreSQL, cache", &cached, 1),
        ("PostgreSQL, no cache", &uncached, 1),
        ("redb", &redb, 0),
    ] {
        let (_, tokens) = pair.login("alice").await;
        let access = tokens["access_token"].as_str().unwrap().to_owned();
        let resource = pair.resource();
        let mcp = pair.url(i, &resource[resource.find("/mcp/").unwrap()..]);
        assert_eq!(
            ping(&pair.http, &mcp, &access).await,
            StatusCode::OK,
            "{label}"
        );
        targets.push((label, mcp, access, 0u64));
    }
    for _ in 0..ROUNDS {
        for t in &mut targets {
            let deadline = Instant::now() + Duration::from_secs(1);
            let mut tasks = Vec::new();
            for _ in 0..CLIENTS {
                let (http, mcp, access) = (cached.http.clone(), t.1.clone(), t.2.clone());
                tasks.push(tokio::spawn(async move {
                    let mut n = 0u64;
                    while Instant::now() < deadline {
                        assert_eq!(ping(&http, &mcp, &access).await, StatusCode::OK);
                        n += 1;
                    }
                    n
                }));
            }
            for task in tasks {
                t.3 += task.await.unwrap();
            }
        }
    }
    #[allow(clippy::cast_precision_loss, reason = "rates for display")]
    let rate = |n: u64| n as f64 / ROUNDS as f64;
    let redb_rate = rate(targets[2].3);
    for (label, _, _, n) in &targets {
        println!(
            "authorized ping, {label}: {:.0} req/s ({:.2}× redb)",
            rate(*n),
            rate(*n) / redb_rate
        );
    }
    drop((uncached, redb));

    let all = grants(&cached, 1_100).await;
    let (listening, cut) = all.split_at(1_000);
    let delays = revocation_delays(&cached, listening).await;
    println!(
        "revoked on A, refused on B (listening): {}",
        percentiles(&delays)
    );
    assert_eq!(cut_cache_listeners(&url, &name), 2);
    let delays = revocation_delays(&cached, cut).await;
    println!(
        "revoked on A, refused on B (listener cut): {}",
        percentiles(&delays)
    );
}
