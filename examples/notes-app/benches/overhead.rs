//! The cost of `protect` on an MCP call (issue 29 item 6): the example's
//! `tools/call` of its read tool `list_notes`, through Portcullis and
//! without it, as **server CPU per call**, both measured in the same run.
//!
//! `cargo bench -p notes-app --bench overhead`
//!
//! * **protected** is the notes-app binary itself (`CARGO_BIN_EXE_notes-app`,
//!   built with the bench profile), on a fresh redb database: its router,
//!   `portcullis.protect(mcp)`, the tool that takes the verified `Agent` and
//!   calls `agent.require("notes:read")`;
//! * **bare** is this binary re-executed as the same rmcp server without
//!   Portcullis: the app's own code (`src/app.rs`), the same transport
//!   (`src/transport.rs`: stateless, JSON answers), the same two tools with
//!   the same bodies, for a fixed user, the same runtime and log setup,
//!   mounted at the same path.
//!
//! The access token is obtained through the real OAuth flow, over HTTP,
//! against the protected child: RFC 8414 metadata, dynamic registration,
//! the app's own sign-in, `/authorize` with its consent form (CSRF),
//! `/token` with PKCE. So the bearer check measured is the real one (JWT
//! verify, the site and the grant read from redb).
//!
//! Before measuring, both servers must give byte-identical answers to the
//! measured call and list the same tools (names, schemas, annotations),
//! the protected one must refuse the call without the token (`401`) and
//! the bare one must answer it. Both build their tool router once, as
//! `src/main.rs` does: rmcp's `#[tool_handler]` would otherwise build it
//! and check every tool's name on every call (about 57 000 instructions
//! of a call's 190 000), a cost both sides would share that would make
//! `protect`'s share look smaller.
//!
//! One request, built once: both servers get the same bytes (the bare one
//! ignores the `Authorization` header). Each server has its own `CONNS`
//! keep-alive HTTP/1.1 connections, each driven by a client thread that
//! writes the request and reads the whole answer, checking its status and
//! body. Rounds of `SECS` seconds per server, alternating which goes first,
//! after a warm-up round that is not counted; each server's CPU is read
//! from `/proc/<pid>/stat` (utime + stime) around its own load. Printed:
//! calls/s and server CPU µs per call of each, the ratio protected/bare of
//! each round (sorted) and its median, and the overall ratio.
//!
//! Settings (environment): `OVERHEAD_ROUNDS` (11), `OVERHEAD_SECS` (1),
//! `OVERHEAD_CONNS` (8), `OVERHEAD_LOG` (`warn`: both servers' `RUST_LOG`;
//! at the example's default `info`, rmcp logs three lines per call in both,
//! a common cost that makes the ratio look smaller), and
//! `OVERHEAD_WRAP_PROTECTED` / `OVERHEAD_WRAP_BARE`, a command to run that
//! child under (`valgrind --tool=callgrind …`, for a profile; with
//! `OVERHEAD_CALLGRIND=1` the bench zeroes the counters of both children
//! before the measured rounds and dumps them after, so each dump holds the
//! measured calls only, which the bench prints). Without
//! `--bench` (`cargo test --benches`) it runs one short round, as a check.
#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    reason = "a benchmark prints its figures and fails loudly where it unwraps"
)]

#[path = "../src/app.rs"]
mod app;
#[path = "../src/transport.rs"]
mod transport;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use app::{App, NewNote};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResponse, CallToolResult, ServerCapabilities, ServerConfig};
use rmcp::{ErrorData, ServerHandler, tool, tool_handler, tool_router};
use serde_json::{Value, json};

/// Set in the environment of the re-executed bench: serve the bare twin.
const BARE: &str = "OVERHEAD_SERVE_BARE";
/// The user the bare twin serves, and who signs in for the token.
const USER: &str = "alice";
/// The OAuth client's redirect URI (nothing listens there: the code is
/// read from the consent's redirect).
const REDIRECT: &str = "http://127.0.0.1:7778/callback";
/// A PKCE pair (RFC 7636): the challenge is the verifier's SHA-256,
/// base64url without padding (`printf %s <verifier> | openssl dgst -sha256
/// -binary | base64 | tr '+/' '-_' | tr -d =`).
const VERIFIER: &str = "dBjftJeZ4CVP-mJ0kZSYa2Rf0lxRvNRs5GXmPIAl8jg";
const CHALLENGE: &str = "Q7PgFIThLKDUaSYAGoJ1RVOp1bbp5LFLfgF5lzpgq_Q";
/// The measured call, and the answer both servers must give it.
const CALL: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_notes","arguments":{}}}"#;
const LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#;

/// The example's MCP server (`src/main.rs`'s `NotesMcp`) as it would be
/// without Portcullis: the same tools and bodies, for one fixed user.
#[derive(Clone)]
struct BareNotes {
    app: App,
}

#[tool_router]
impl BareNotes {
    #[tool(description = "List your notes.", annotations(read_only_hint = true))]
    async fn list_notes(&self) -> Result<CallToolResult, ErrorData> {
        let notes = self.app.notes(USER);
        Ok(CallToolResult::structured(json!({ "notes": notes })))
    }

    #[tool(
        description = "Add a note. The user approves each one: the call waits for the \
        approval (on approval_pending, call again with the same requestId)."
    )]
    async fn add_note(
        &self,
        Parameters(note): Parameters<NewNote>,
    ) -> Result<CallToolResponse, ErrorData> {
        let note = self.app.add_note(USER, note);
        Ok(CallToolResult::structured(json!(note)).into())
    }
}

/// The tools' router, built once: rmcp's `#[tool_handler]` otherwise
/// builds it, and checks every tool's name, on every request.
static TOOLS: LazyLock<ToolRouter<BareNotes>> = LazyLock::new(BareNotes::tool_router);

#[tool_handler(router = TOOLS)]
impl ServerHandler for BareNotes {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

/// The bare child: `src/main.rs`'s `main` without Portcullis.
#[tokio::main]
async fn serve_bare() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(app::setting("RUST_LOG", "info"))
        .init();
    let (listener, public_url) = app::listen().await?;
    let app = App::default();
    let mcp = transport::streamable(BareNotes { app: app.clone() });
    let router = app.router().route_service("/mcp/{key}", mcp);
    app::serve(listener, router, &format!("{public_url}/mcp/bare")).await?;
    Ok(())
}

fn main() {
    if std::env::var_os(BARE).is_some() {
        if let Err(e) = serve_bare() {
            eprintln!("bare server: {e}");
            std::process::exit(1);
        }
        return;
    }
    let bench = std::env::args().any(|a| a == "--bench");
    let (rounds, secs) = if bench {
        (
            app::setting("OVERHEAD_ROUNDS", "11").parse().unwrap(),
            app::setting("OVERHEAD_SECS", "1").parse().unwrap(),
        )
    } else {
        (1, 0.2)
    };
    let conns: usize = app::setting("OVERHEAD_CONNS", "8").parse().unwrap();
    let log = app::setting("OVERHEAD_LOG", "warn");
    measure(rounds, secs, conns, &log, bench);
}

/// A child server, killed when dropped.
struct Server {
    child: Child,
    /// `host:port`.
    addr: String,
    /// Its MCP URL, as it printed it.
    mcp_url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts `program` (under the command in `wrap`, if set) on a free
    /// loopback port and a fresh database; reads the two lines
    /// `app::serve` prints.
    fn start(program: &str, wrap: &str, envs: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut words = wrap.split_whitespace();
        let mut command = match words.next() {
            Some(first) => {
                let mut c = Command::new(first);
                c.args(words).arg(program);
                c
            }
            None => Command::new(program),
        };
        let mut child = command
            .env("NOTES_ADDR", "127.0.0.1:0")
            .env("NOTES_DB", dir.path().join("notes.redb"))
            .env("NOTES_KEYS", dir.path().join("notes.keys"))
            .envs(envs.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        let addr = first.trim_start_matches("Notes on ").to_owned();
        let mcp_url = lines.next().unwrap().unwrap();
        let mcp_url = mcp_url.trim().trim_start_matches("MCP URL: ").to_owned();
        Self {
            child,
            addr,
            mcp_url,
            _dir: dir,
        }
    }

    /// Its user and system CPU time so far, in clock ticks
    /// (`/proc/<pid>/stat` fields 14 and 15).
    fn cpu_ticks(&self) -> [u64; 2] {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        // The command name is in parentheses and may hold spaces: count after it.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = rest.split(' ').collect();
        // `rest` starts at field 3 (the state).
        [fields[11].parse().unwrap(), fields[12].parse().unwrap()]
    }
}

/// An HTTP answer: status, header block, body.
struct Answer {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!("{e}: {} {}", self.head, String::from_utf8_lossy(&self.body))
        })
    }
}

/// A keep-alive HTTP/1.1 connection.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn open(addr: &str) -> Self {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_nodelay(true).unwrap();
        Self {
            stream,
            buf: Vec::with_capacity(16 * 1024),
        }
    }

    /// Writes `request` and reads its whole answer (a `Content-Length`
    /// body): the status and where the head ends. The answer is in `buf`.
    fn exchange(&mut self, request: &[u8]) -> (u16, usize) {
        self.stream.write_all(request).unwrap();
        self.buf.clear();
        let mut chunk = [0u8; 8192];
        let head_end = loop {
            let n = self.stream.read(&mut chunk).unwrap();
            assert!(n > 0, "the server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        let head = std::str::from_utf8(&self.buf[..head_end]).unwrap();
        let status = head[9..12].parse().unwrap();
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().unwrap())
            })
            .unwrap_or_else(|| panic!("no Content-Length: {head}"));
        while self.buf.len() < head_end + length {
            let n = self.stream.read(&mut chunk).unwrap();
            assert!(n > 0, "the server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
        assert_eq!(self.buf.len(), head_end + length, "one answer per request");
        (status, head_end)
    }

    fn answer(&mut self, request: &[u8]) -> Answer {
        let (status, head_end) = self.exchange(request);
        Answer {
            status,
            head: String::from_utf8_lossy(&self.buf[..head_end]).into_owned(),
            body: self.buf[head_end..].to_vec(),
        }
    }
}

/// One request on a fresh connection (the OAuth flow's steps).
fn http(addr: &str, method: &str, target: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let headers = headers
        .iter()
        .fold(String::new(), |mut all, (name, value)| {
            for part in [name, ": ", value, "\r\n"] {
                all.push_str(part);
            }
            all
        });
    let request = format!(
        "{method} {target} HTTP/1.1\r\nHost: {addr}\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    Conn::open(addr).answer(request.as_bytes())
}

fn enc(s: &str) -> String {
    portcullis_axum::url_encode(s)
}

const FORM: (&str, &str) = ("Content-Type", "application/x-www-form-urlencoded");

/// The OAuth flow against the protected server, as a client and its user
/// meet it; the endpoints from its RFC 8414 metadata.
struct Flow<'s> {
    server: &'s Server,
    metadata: Value,
}

impl Flow<'_> {
    /// The path of the endpoint the metadata names under `key`.
    fn path(&self, key: &str) -> String {
        let origin = format!("http://{}", self.server.addr);
        self.metadata[key]
            .as_str()
            .unwrap()
            .strip_prefix(&origin)
            .unwrap()
            .to_owned()
    }

    fn post(&self, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
        http(&self.server.addr, "POST", path, headers, body)
    }

    /// Dynamic registration (RFC 7591): the client id.
    fn register(&self) -> String {
        let registration = json!({
            "client_name": "overhead bench",
            "redirect_uris": [REDIRECT],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        })
        .to_string();
        let r = self.post(
            &self.path("registration_endpoint"),
            &[("Content-Type", "application/json")],
            &registration,
        );
        assert!(r.status == 201 || r.status == 200, "{}", r.head);
        r.json()["client_id"].as_str().unwrap().to_owned()
    }

    /// The app's own sign-in: its session cookie.
    fn sign_in(&self) -> String {
        let r = self.post("/login", &[FORM], &format!("username={USER}&next=%2F"));
        assert_eq!(r.status, 303, "{}", r.head);
        let cookie = r.header("set-cookie").unwrap();
        cookie.split(';').next().unwrap().to_owned()
    }

    /// The consent page, then its form posted with its CSRF token: the
    /// authorization code from the redirect.
    fn consent(&self, client_id: &str, cookie: &str) -> String {
        let authorize = format!(
            "{}?response_type=code&client_id={}&redirect_uri={}&scope=notes%3Aread&state=bench\
             &code_challenge={CHALLENGE}&code_challenge_method=S256&resource={}",
            self.path("authorization_endpoint"),
            enc(client_id),
            enc(REDIRECT),
            enc(&self.server.mcp_url)
        );
        let page = http(
            &self.server.addr,
            "GET",
            &authorize,
            &[("Cookie", cookie)],
            "",
        );
        assert_eq!(page.status, 200, "{}", page.head);
        let page = String::from_utf8(page.body).unwrap();
        let csrf = page
            .split_once(r#"name="csrf" value=""#)
            .unwrap()
            .1
            .split_once('"')
            .unwrap()
            .0;
        let r = self.post(
            &authorize,
            &[("Cookie", cookie), FORM],
            &format!("intent=allow&csrf={}", enc(csrf)),
        );
        assert_eq!(r.status, 302, "{}", r.head);
        let location = r.header("location").unwrap();
        assert!(location.starts_with(REDIRECT), "{location}");
        let code = location
            .split_once('?')
            .unwrap()
            .1
            .split('&')
            .find_map(|p| p.strip_prefix("code="))
            .unwrap();
        assert!(!code.contains('%'), "{code}");
        code.to_owned()
    }

    /// The code exchange with the PKCE verifier: the access token.
    fn exchange(&self, client_id: &str, code: &str) -> String {
        let r = self.post(
            &self.path("token_endpoint"),
            &[FORM],
            &format!(
                "grant_type=authorization_code&code={code}&redirect_uri={}&client_id={}\
                 &code_verifier={VERIFIER}&resource={}",
                enc(REDIRECT),
                enc(client_id),
                enc(&self.server.mcp_url)
            ),
        );
        assert_eq!(r.status, 200, "{}", r.head);
        let tokens = r.json();
        assert_eq!(tokens["scope"], "notes:read", "{tokens}");
        tokens["access_token"].as_str().unwrap().to_owned()
    }
}

/// An access token for `notes:read`, through the protected server's OAuth
/// flow.
fn oauth_token(server: &Server) -> String {
    let metadata = http(
        &server.addr,
        "GET",
        "/.well-known/oauth-authorization-server",
        &[],
        "",
    )
    .json();
    let flow = Flow { server, metadata };
    let client_id = flow.register();
    let cookie = flow.sign_in();
    let code = flow.consent(&client_id, &cookie);
    flow.exchange(&client_id, &code)
}

/// An MCP POST as a client sends it after `initialize`.
fn mcp_request(host: &str, path: &str, token: Option<&str>, body: &str) -> Vec<u8> {
    let authorization = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\n{authorization}\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         MCP-Protocol-Version: 2025-11-25\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The tools of a `tools/list` answer without their descriptions: static
/// text, which costs the same whatever it says.
fn tool_shapes(answer: &Answer) -> Value {
    let mut tools = answer.json()["result"]["tools"].take();
    for tool in tools.as_array_mut().unwrap() {
        tool.as_object_mut().unwrap().remove("description");
    }
    assert_eq!(tools.as_array().unwrap().len(), 2, "{tools}");
    tools
}

/// `request` on every connection, as fast as the server answers, for
/// `secs`: the calls answered (each checked: `200` and `expect`).
fn load(conns: &mut [Conn], request: &[u8], expect: &[u8], secs: f64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    std::thread::scope(|s| {
        let threads: Vec<_> = conns
            .iter_mut()
            .map(|c| {
                s.spawn(move || {
                    let mut n = 0u64;
                    while Instant::now() < deadline {
                        let (status, head_end) = c.exchange(request);
                        assert!(
                            status == 200 && &c.buf[head_end..] == expect,
                            "{}",
                            String::from_utf8_lossy(&c.buf)
                        );
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).sum()
    })
}

/// What one server did over the measured rounds.
#[derive(Default)]
struct Tally {
    calls: u64,
    /// User and system CPU, clock ticks.
    ticks: [u64; 2],
    secs: f64,
}

impl Tally {
    /// One timed load of `server`: calls, server CPU ticks, seconds.
    fn run(server: &Server, conns: &mut [Conn], request: &[u8], expect: &[u8], secs: f64) -> Self {
        let (cpu, started) = (server.cpu_ticks(), Instant::now());
        let calls = load(conns, request, expect, secs);
        Self {
            calls,
            ticks: {
                let [user, sys] = server.cpu_ticks();
                [user - cpu[0], sys - cpu[1]]
            },
            secs: started.elapsed().as_secs_f64(),
        }
    }

    fn add(&mut self, other: &Self) {
        self.calls += other.calls;
        self.ticks[0] += other.ticks[0];
        self.ticks[1] += other.ticks[1];
        self.secs += other.secs;
    }

    #[allow(clippy::cast_precision_loss, reason = "rates for display")]
    fn rate(&self) -> f64 {
        self.calls as f64 / self.secs
    }

    #[allow(clippy::cast_precision_loss, reason = "seconds for display")]
    fn cpu_secs(&self) -> f64 {
        (self.ticks[0] + self.ticks[1]) as f64 / 100.0
    }

    /// Server CPU µs per call (clock ticks are `USER_HZ`, 100 per second).
    fn micros(&self) -> f64 {
        self.user_micros() + self.sys_micros()
    }

    #[allow(clippy::cast_precision_loss, reason = "rates for display")]
    fn user_micros(&self) -> f64 {
        self.ticks[0] as f64 * 10_000.0 / self.calls as f64
    }

    #[allow(clippy::cast_precision_loss, reason = "rates for display")]
    fn sys_micros(&self) -> f64 {
        self.ticks[1] as f64 * 10_000.0 / self.calls as f64
    }
}

/// The two servers, the measured request and the answer both give it.
struct Setup {
    protected: Server,
    bare: Server,
    call: Vec<u8>,
    expect: Vec<u8>,
}

/// Starts both servers, takes a token through the OAuth flow, builds the
/// request and checks both servers answer it alike and only the protected
/// one asks for the token.
fn setup(log: &str) -> Setup {
    let wrap = |name| app::setting(name, "");
    let protected = Server::start(
        env!("CARGO_BIN_EXE_notes-app"),
        &wrap("OVERHEAD_WRAP_PROTECTED"),
        &[("RUST_LOG", log), ("NOTES_TOKEN_TTL_SECS", "86400")],
    );
    let bare = Server::start(
        std::env::current_exe().unwrap().to_str().unwrap(),
        &wrap("OVERHEAD_WRAP_BARE"),
        &[("RUST_LOG", log), (BARE, "1")],
    );
    let token = oauth_token(&protected);
    let path = protected
        .mcp_url
        .strip_prefix(&format!("http://{}", protected.addr))
        .unwrap();
    // The same bytes to both: the bare server ignores the token.
    let call = mcp_request(&protected.addr, path, Some(&token), CALL);
    let list = mcp_request(&protected.addr, path, Some(&token), LIST);
    let anonymous = mcp_request(&protected.addr, path, None, CALL);

    let (mut p, mut b) = (Conn::open(&protected.addr), Conn::open(&bare.addr));
    let (pa, ba) = (p.answer(&call), b.answer(&call));
    assert_eq!(
        (pa.status, ba.status),
        (200, 200),
        "{}\n{}",
        pa.head,
        ba.head
    );
    assert_eq!(
        pa.json()["result"]["structuredContent"],
        json!({ "notes": [] })
    );
    assert_eq!(pa.body, ba.body, "the two servers answer the call alike");
    let (pl, bl) = (p.answer(&list), b.answer(&list));
    assert_eq!(pl.status, 200, "{}", pl.head);
    assert_eq!(
        tool_shapes(&pl),
        tool_shapes(&bl),
        "the two servers serve the same tools (benches/overhead.rs's BareNotes \
         must follow src/main.rs's NotesMcp)"
    );
    assert_eq!(
        p.answer(&anonymous).status,
        401,
        "protected asks for a token"
    );
    assert_eq!(b.answer(&anonymous).status, 200, "bare does not");
    Setup {
        protected,
        bare,
        call,
        expect: pa.body,
    }
}

fn measure(rounds: usize, secs: f64, conns: usize, log: &str, bench: bool) {
    let Setup {
        protected,
        bare,
        call,
        expect,
    } = setup(log);
    let open = |addr: &str| (0..conns).map(|_| Conn::open(addr)).collect::<Vec<_>>();
    let (mut pc, mut bc) = (open(&protected.addr), open(&bare.addr));
    let mut run = |protect: bool| {
        if protect {
            Tally::run(&protected, &mut pc, &call, &expect, secs)
        } else {
            Tally::run(&bare, &mut bc, &call, &expect, secs)
        }
    };
    if bench {
        // Warm-up, not counted.
        run(true);
        run(false);
    }
    let profile = !app::setting("OVERHEAD_CALLGRIND", "").is_empty();
    if profile {
        callgrind_control(&[&protected, &bare], "-z");
    }
    let load_before = loadavg();
    let (mut pt, mut bt) = (Tally::default(), Tally::default());
    let mut ratios = Vec::with_capacity(rounds);
    for round in 0..rounds {
        // Alternate which goes first.
        let (p, b) = if round % 2 == 0 {
            let p = run(true);
            (p, run(false))
        } else {
            let b = run(false);
            (run(true), b)
        };
        ratios.push(p.micros() / b.micros());
        pt.add(&p);
        bt.add(&b);
    }
    if profile {
        callgrind_control(&[&protected, &bare], "-d");
    }
    println!(
        "tools/call list_notes, {conns} keep-alive connections per server, {rounds} rounds of \
         {secs} s per server (alternating), RUST_LOG={log}; load average {load_before} before, \
         {} after",
        loadavg()
    );
    report(&pt, &bt, ratios);
}

/// Prints each server's figures and the ratios.
fn report(pt: &Tally, bt: &Tally, mut ratios: Vec<f64>) {
    for (name, t) in [("protected", pt), ("bare", bt)] {
        println!(
            "{name:>9}: {:>6.0} calls/s, server CPU {:>5.1} µs per call (user {:.1} + system \
             {:.1}; {} calls, {:.2} s CPU)",
            t.rate(),
            t.micros(),
            t.user_micros(),
            t.sys_micros(),
            t.calls,
            t.cpu_secs()
        );
    }
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    let sorted: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
    println!(
        "protected/bare server CPU per call, rounds (sorted): {}",
        sorted.join(" ")
    );
    println!(
        "median {median:.2}× (target ≤ 1.30×: {}); overall {:.2}×; +{:.1} µs per call; \
         throughput bare/protected {:.2}×",
        if median <= 1.3 { "met" } else { "NOT met" },
        pt.micros() / bt.micros(),
        pt.micros() - bt.micros(),
        bt.rate() / pt.rate()
    );
}

/// Zeroes (`-z`) or dumps (`-d`) the callgrind counters of children run
/// under `valgrind --tool=callgrind`, so a profile holds the measured
/// rounds only.
fn callgrind_control(servers: &[&Server], what: &str) {
    for server in servers {
        let status = Command::new("callgrind_control")
            .arg(what)
            .arg(server.child.id().to_string())
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "callgrind_control {what}");
    }
}

/// The 1-minute load average (`/proc/loadavg`): the machine is shared.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_default()
}
