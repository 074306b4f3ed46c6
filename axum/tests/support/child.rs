//! The test app as a real server process, for the SIGKILL test: this test
//! binary run again with the exact name of an ignored test that serves, the
//! directory of its files in [`CHILD_DIR`].
//!
//! The directory holds `port` (written by the parent: the port to serve on,
//! the same at every start, since the issuer and the MCP URL name it),
//! `db.redb`, `keys.json` (reloaded when it changes), `effects.log` (one
//! fsynced line per effect), optionally `alg` (how access tokens are
//! signed: `EdDSA`, `ES256`) and `mcp_origin` (where another process
//! serves the MCP URL),
//! `ready` (written by the child once it serves: its MCP URL) and
//! `child.log` (the child's stderr).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use portcullis_store_redb::RedbStore;

use super::{Effects, Options, TestApp};

/// The variable that makes the child test serve.
pub(crate) const CHILD_DIR: &str = "PORTCULLIS_AXUM_CRASH_CHILD_DIR";

/// The full name of the child test (`crash::serve_as_crash_child`).
pub(crate) const CHILD_TEST: &str = "crash::serve_as_crash_child";

/// How long a child serves at most, should its parent die without
/// killing it.
const CHILD_LIFETIME: Duration = Duration::from_mins(2);

/// The child's side: serves the app over the directory's files until it is
/// killed (or the directory is removed, or [`CHILD_LIFETIME`] passes). The
/// store is the redb file, or the PostgreSQL schema named in the file
/// `store` (`postgres <schema>`, on the cluster of
/// `PORTCULLIS_TEST_POSTGRES_URL`), served as one instance of a fleet with
/// a 3 s executor lease.
pub(crate) fn serve(dir: &Path) {
    // The parent calls again after every restart: no rate limit in its way.
    let mut policy = portcullis_axum::Policy::default();
    policy.execute_rate = portcullis_core::policy::RateLimit::new(1, 10_000);
    let store = std::fs::read_to_string(dir.join("store")).unwrap_or_default();
    if let Some(schema) = store.strip_prefix("postgres ") {
        let url = std::env::var(super::stores::POSTGRES_URL).expect("the PostgreSQL URL");
        // Opened (and never dropped) off the runtime: the driver runs one
        // of its own.
        let store = portcullis_store_postgres::PostgresConfig::parse(&url)
            .and_then(|c| c.schema(schema.trim()))
            .and_then(|c| c.pool_size(4).open())
            .expect("open PostgreSQL");
        policy.executor_lease_timeout = Duration::from_secs(3);
        run(dir, store, policy, Duration::from_secs(1));
    } else {
        let store = RedbStore::open(dir.join("db.redb")).expect("open redb");
        run(dir, store, policy, Duration::from_secs(5));
    }
}

fn run<S: portcullis_axum::HostStore>(
    dir: &Path,
    store: S,
    policy: portcullis_axum::Policy,
    approval_wait: Duration,
) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let port: u16 = std::fs::read_to_string(dir.join("port"))
            .expect("the port file")
            .trim()
            .parse()
            .expect("a port");
        let key_file = dir.join("keys.json");
        let keyring = portcullis_axum::keys::load_or_create(&key_file).expect("the key file");
        // A resource server in the parent: tokens signed with the file
        // `alg` names, for the MCP origin the file `mcp_origin` names.
        let setting = |name: &str| {
            std::fs::read_to_string(dir.join(name))
                .ok()
                .map(|s| s.trim().to_owned())
        };
        let access_token_alg = setting("alg")
            .map_or(portcullis_core::jwt::Algorithm::Hs256, |alg| {
                portcullis_core::jwt::Algorithm::from_name(&alg).expect("an algorithm")
            });
        let options = Options {
            approval_wait,
            bind: format!("127.0.0.1:{port}"),
            policy,
            access_token_alg,
            mcp_origin: setting("mcp_origin"),
            key_file: Some(key_file),
            ..Options::default()
        };
        let app = TestApp::start_with(
            store,
            keyring,
            Effects::to_file(dir.join("effects.log")),
            &options,
        )
        .await;
        let tmp = dir.join("ready.tmp");
        std::fs::write(&tmp, app.mcp_url()).expect("write ready");
        std::fs::rename(&tmp, dir.join("ready")).expect("publish ready");
        let started = Instant::now();
        while dir.exists() && started.elapsed() < CHILD_LIFETIME {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    // Orphaned: leave without dropping anything on the runtime.
    std::process::exit(0);
}

/// A free loopback port (bound, read and released).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A child server process; killed (SIGKILL) when dropped.
pub(crate) struct ChildServer {
    child: Child,
    /// The MCP URL it serves.
    pub(crate) mcp_url: String,
}

impl ChildServer {
    /// Starts the child on `dir` and waits until it serves.
    pub(crate) fn start(dir: &Path) -> Self {
        let ready = dir.join("ready");
        let _ = std::fs::remove_file(&ready);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("child.log"))
            .expect("the child's log");
        let child = Command::new(std::env::current_exe().expect("this test binary"))
            .args([CHILD_TEST, "--exact", "--ignored", "--test-threads=1"])
            .env(CHILD_DIR, dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the child server");
        let mut server = Self {
            child,
            mcp_url: String::new(),
        };
        let started = Instant::now();
        loop {
            if let Ok(url) = std::fs::read_to_string(&ready) {
                server.mcp_url = url;
                return server;
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!(
                    "the child server exited ({status}): {}",
                    std::fs::read_to_string(dir.join("child.log")).unwrap_or_default()
                );
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the child server did not start"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGKILL, and reaped.
    pub(crate) fn kill(mut self) {
        self.kill_now();
    }

    fn kill_now(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        self.kill_now();
    }
}

/// The effects file's lines, per request id: how many each has.
pub(crate) fn effect_lines(dir: &Path) -> std::collections::HashMap<String, usize> {
    let mut counts = std::collections::HashMap::new();
    let text = std::fs::read_to_string(effects_file(dir)).unwrap_or_default();
    for line in text.lines() {
        let id = line.split_once(' ').map_or(line, |(id, _)| id);
        *counts.entry(id.to_owned()).or_insert(0) += 1;
    }
    counts
}

/// The effects file of `dir`.
pub(crate) fn effects_file(dir: &Path) -> PathBuf {
    dir.join("effects.log")
}
