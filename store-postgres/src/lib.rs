//! A shared [`Store`] for Portcullis on PostgreSQL: several server instances
//! on one database.
//!
//! # Layout
//!
//! One table per core [`Table`] (same names), each `key bytea PRIMARY KEY,
//! value bytea NOT NULL`, inside one schema (`portcullis` unless the host
//! picks another). `bytea` compares byte by byte with no collation, and a
//! shorter key sorts before its extensions, so the B-tree index gives
//! [`ReadTransaction::range`] exactly the ascending byte order the contract
//! asks for. A `schema_version` table holds one row; [`PostgresStore::open`]
//! creates or migrates the tables under an advisory lock, so instances that
//! start together do not race, and refuses a database whose schema is newer
//! than this build.
//!
//! # Transactions
//!
//! * **Writes run at `SERIALIZABLE`.** PostgreSQL's serializable snapshot
//!   isolation lets writers run concurrently and aborts one that could not
//!   be ordered after the others with SQLSTATE `40001`
//!   (`serialization_failure`); a deadlock is `40P01`. Both surface as
//!   [`StoreErrorKind::Conflict`] at whichever call met them, and the engine
//!   re-runs the whole operation on a fresh transaction: the "serialised
//!   writers, or conflicts" rule of the contract. A conflict applies
//!   nothing (PostgreSQL rolls the whole transaction back). The engine
//!   re-runs at once (the core reads no clock), so the next
//!   [`Store::begin_write`] on a thread that just met a conflict sleeps a
//!   short jittered, doubling pause first.
//! * **Reads run at `REPEATABLE READ READ ONLY`**: one snapshot of committed
//!   state for the transaction's life (with the read cache on, the rows it
//!   serves from memory are each as fresh as the cache's rules make them,
//!   and the transaction begins on the database only at its first read the
//!   cache cannot answer; see "Read cache" below). An operation that decided from
//!   reads alone (a refusal) drops its write transaction without
//!   committing; PostgreSQL only certifies the reads of a committed
//!   serializable transaction, so such an answer is as of a snapshot, as
//!   on every other store, and changes nothing.
//! * **Savepoints are SQL `SAVEPOINT`s** (`s<n>`), and
//!   [`WriteTransaction::rollback_to`] is `ROLLBACK TO SAVEPOINT`, which
//!   keeps the savepoint itself and voids later ones, as the contract says.
//!   Each is a PostgreSQL subtransaction; past 64 in one transaction
//!   (a large group-commit batch) PostgreSQL's visibility checks slow down,
//!   so batches on this store should stay small.
//!   After any failed statement PostgreSQL refuses everything but a
//!   rollback; the adapter remembers that and refuses to `commit` such a
//!   transaction (a bare `COMMIT` would quietly roll it back and answer
//!   success), answering with the kind of the failure that aborted it: a
//!   connection lost mid-transaction is still `Unavailable` at `commit`.
//! * **Dropping a transaction rolls it back** on its connection before the
//!   connection goes back to the pool; a connection whose rollback (or any
//!   call) failed at the transport level is discarded, never reused.
//! * **A connection that died idle is never used.** After a restart of the
//!   database every pooled connection is dead; `BEGIN` finds that out (a
//!   closed connection, a transport error or the server's `FATAL` of class
//!   `57`/`08`), and the transaction begins on another, a fresh one at the
//!   latest. Nothing was sent inside the transaction, so this is safe to
//!   repeat. A database that cannot be reached (no connection within the
//!   connect timeout) and a connection lost in the middle of a transaction
//!   are [`StoreErrorKind::Unavailable`]: an adapter answers `503` with
//!   `Retry-After`, and nothing was applied.
//! * **A commit whose answer was lost is settled before `commit` returns.**
//!   Before `COMMIT` the store reads the transaction's id
//!   (`pg_current_xact_id()`, one round trip); if the connection then fails
//!   under the `COMMIT` (or the server ends it as it shuts down), the
//!   transaction may or may not have committed, so the store asks
//!   `pg_xact_status` on a fresh connection, again while the answer is `in
//!   progress` or the database cannot be reached, for at most
//!   [`RESOLVE_WITHIN`]. Committed: `commit` is `Ok`, so a token response is
//!   sent exactly when its rotation is durable. Rolled back: `Unavailable`,
//!   nothing applied, a retry is judged afresh. Still unknown after
//!   [`RESOLVE_WITHIN`] (the database stayed away): `Unavailable` with the
//!   context `commit outcome unknown`, which an adapter answers with `503`
//!   (see `docs/postgres.md` for what that means for a refresh).
//!
//! # Driver and pool
//!
//! The engine's operations are synchronous re-runnable closures over a
//! transaction, so this store uses the synchronous [`postgres`] driver (the
//! maintained `rust-postgres` project; it drives `tokio-postgres` on a
//! small runtime of its own per connection) and the blocking [`r2d2`]
//! pool. An async driver would need the engine's calls made async or every
//! call wrapped in `block_on`, for no gain at one statement per round
//! trip. The pool's manager is this crate's own (a few lines, instead of
//! `r2d2_postgres`) so that it can also cache each connection's prepared
//! statements and discard a connection left in an unknown state.
//!
//! # Connection string and TLS
//!
//! The host passes the connection string (`postgres://user:password@host/db`
//! or `key=value` form); it is parsed once and its password is never shown:
//! this crate's `Debug` output and errors name only user, hosts, ports and
//! database. TLS follows the URL's `sslmode` (`disable`, `require`,
//! `verify-full`) and `sslrootcert`, with rustls: see [`TlsMode`] and the
//! table in the `tls` module. Without `sslmode` (or with `allow` or
//! `prefer`) connections are plain TCP, and that is allowed for a loopback
//! host or a Unix socket only: for any other host [`PostgresConfig::parse`]
//! refuses the string, so plaintext over a network is a choice written
//! down (`sslmode=disable`), never a default or a mode that reads as TLS.
//!
//! # Read cache
//!
//! A bearer check reads two rows, the site and the grant; on PostgreSQL
//! that is a pooled connection, `BEGIN`, two statements and `ROLLBACK` for
//! every MCP request. [`PostgresConfig::read_cache`] keeps those rows (the
//! `sites` and `grants` tables only, single-row reads in read transactions
//! only) in memory: a trigger on both tables (schema version 2) announces
//! every changed row with `NOTIFY portcullis_rows`, whoever wrote it, and a
//! listener of the store's own drops it; nothing is served while that
//! listener is not connected, and nothing older than the TTL
//! ([`DEFAULT_CACHE_TTL`]) ever. The rules and the race they close are in
//! the `cache` module; [`PostgresStore::cache_stats`] counts hits.
//!
//! # Group commit
//!
//! The redb crate's `GroupCommitter` works over any store, this one
//! included, but it does not pay here, so nothing in this crate batches:
//! PostgreSQL already shares one WAL flush among every backend whose commit
//! is waiting (its own group commit), so concurrent callers on their own
//! connections do not queue behind each other's fsyncs as they do on redb.
//! A batch saves only the `BEGIN`/`COMMIT` round trips, pays a `SAVEPOINT`
//! round trip per operation, and funnels every caller through one
//! connection. Measured with `benches/group_commit.rs` (refresh rotations
//! per second, durable commits, loopback, 2 shared cores under load, so
//! wide intervals): one commit each 125 / 631 / 413 at 1 / 8 / 64 callers,
//! group commit 298 / 529 / 646, against redb's 218 / 248 / 294 and
//! 235 / 2 816 / 15 978 in the same run. Batching wins tenfold on redb
//! and at best within the noise here; a host that wants it anyway can wrap
//! this store in the committer, keeping batches small (subtransactions).
#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::fmt::{self, Write as _};
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use portcullis_core::store::{
    Entry, ReadTransaction, Savepoint, Store, StoreError, StoreErrorKind, Table, WriteTransaction,
};
use postgres::error::SqlState;
use postgres::types::ToSql;
use postgres::{Client, NoTls, Statement};
use tokio_postgres_rustls::MakeRustlsConnect;

mod cache;
mod tls;
pub use cache::CacheStats;
use r2d2::PooledConnection;
pub use tls::TlsMode;

/// The schema version this build writes and reads (2: the cached tables
/// announce their changed rows, see [`PostgresConfig::read_cache`]; 3: the
/// `grant_apps` table, the apps each grant reaches; 4: the
/// `client_assertions` table, the `jti`s of accepted client assertions, and
/// the `waiting_calls` table, the unfinished request an identical call that
/// names no request id joins; 5: the `activity` table, the activity record;
/// 6: the `app_views` table, MCP App Views and what they hold for the
/// agent).
pub const SCHEMA_VERSION: i32 = 6;

/// The schema used when the host names none.
pub const DEFAULT_SCHEMA: &str = "portcullis";

/// The default most connections a store keeps open.
pub const DEFAULT_POOL_SIZE: u32 = 16;

/// How long a caller waits for a free pooled connection (and a new
/// connection for its handshake) before the store answers
/// [`StoreErrorKind::Unavailable`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest a cached row is served when the read cache is on
/// ([`PostgresConfig::read_cache`]): the bound on how long a change is
/// missed if its notification is lost without the listener noticing.
pub const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(1);

/// How a store is opened: connection string, schema, pool size.
///
/// Its `Debug` shows where it connects, never the password.
#[derive(Clone)]
pub struct PostgresConfig {
    config: postgres::Config,
    tls: TlsMode,
    ca_file: Option<String>,
    schema: String,
    pool_size: u32,
    connect_timeout: Duration,
    read_cache: Option<Duration>,
}

impl PostgresConfig {
    /// Parses a connection string (URL or `key=value` form). The error
    /// never repeats the string.
    ///
    /// In the URL form, `sslmode` chooses TLS ([`TlsMode::from_sslmode`])
    /// and `sslrootcert` names a PEM file of the roots `verify-full`
    /// trusts (Mozilla's roots without it); in the `key=value` form the
    /// driver reads `sslmode` (`disable`, `prefer`, `require`). A string
    /// that names a host beyond loopback (neither `localhost`,
    /// `127.0.0.0/8`, `::1` nor a Unix socket) must name, as a parameter of
    /// its own, an `sslmode` that encrypts (`require`, `verify-ca`,
    /// `verify-full`) or `disable`, plaintext written down as a choice:
    /// without one, or with `allow` or `prefer` (plaintext here: this crate
    /// makes no opportunistic TLS), it is refused ([`StoreErrorKind::Other`],
    /// context `connection string`), since the password and every token
    /// would cross the network in plaintext.
    pub fn parse(connection_string: &str) -> Result<Self, StoreError> {
        let invalid = |detail: &str| {
            StoreError::new(
                StoreErrorKind::Unavailable,
                "parse connection string",
                detail.to_owned(),
            )
        };
        let (rest, sslmode, ca_file) = tls::split_url(connection_string);
        let mut config: postgres::Config = rest
            .parse()
            .map_err(|_| invalid("not a valid PostgreSQL connection string"))?;
        // The mode as written: the URL's `sslmode` parameter, or in the
        // key=value form the driver's own reading of its `sslmode` key
        // (`prefer`, plaintext here, when none is written).
        let written = sslmode.or_else(|| match config.get_ssl_mode() {
            postgres::config::SslMode::Disable => Some("disable".to_owned()),
            postgres::config::SslMode::Require => Some("require".to_owned()),
            _ => None,
        });
        let tls = match written.as_deref() {
            None => TlsMode::Disable,
            Some(m) => TlsMode::from_sslmode(m).ok_or_else(|| {
                invalid("sslmode must be disable, allow, prefer, require, verify-ca or verify-full")
            })?,
        };
        // Encrypted, or plaintext chosen in so many words.
        let chosen = tls != TlsMode::Disable || written.as_deref() == Some("disable");
        if !chosen && let Some(host) = remote_host(&config) {
            let named = match written.as_deref() {
                Some(m) => {
                    format!("names sslmode={m}, which is plaintext here (no opportunistic TLS)")
                }
                None => "names no sslmode".to_owned(),
            };
            return Err(StoreError::new(
                StoreErrorKind::Other,
                "connection string",
                format!(
                    "{host} is not a loopback address and the connection string {named}: \
                     use sslmode=verify-full (TLS, the server's certificate and name \
                     checked), or sslmode=disable to send everything, password included, in \
                     plaintext"
                ),
            ));
        }
        if tls != TlsMode::Disable {
            config.ssl_mode(postgres::config::SslMode::Require);
        }
        Ok(Self {
            config,
            tls,
            ca_file,
            schema: DEFAULT_SCHEMA.to_owned(),
            pool_size: DEFAULT_POOL_SIZE,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            read_cache: None,
        })
    }

    /// Keeps the tables in `schema` (created if missing): lowercase ASCII
    /// letters, digits and `_`, starting with a letter or `_`, at most 63
    /// bytes, so it needs no quoting rules of its own.
    pub fn schema(mut self, schema: &str) -> Result<Self, StoreError> {
        let valid = !schema.is_empty()
            && schema.len() <= 63
            && schema
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            && !schema.as_bytes()[0].is_ascii_digit();
        if !valid {
            return Err(StoreError::new(
                StoreErrorKind::Other,
                "schema name",
                "use lowercase ASCII letters, digits and _ (at most 63)",
            ));
        }
        schema.clone_into(&mut self.schema);
        Ok(self)
    }

    /// Keeps at most `size` connections open (at least one). Each
    /// concurrent transaction holds one.
    #[must_use]
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// Waits at most `timeout` for a connection (default
    /// [`DEFAULT_CONNECT_TIMEOUT`]).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Keeps the rows a bearer check reads (sites and grants) in memory,
    /// each for at most `ttl`, dropped as soon as any writer changes them
    /// (a trigger announces each change with `NOTIFY`; a listener on a
    /// connection of its own drops the row), and not used at all while that
    /// listener is not connected. Off by default. See [`DEFAULT_CACHE_TTL`]
    /// and the `cache` module's docs for the rules: a revocation committed
    /// anywhere is refused here within a notification's delay, and never
    /// later than `ttl`.
    #[must_use]
    pub fn read_cache(mut self, ttl: Duration) -> Self {
        self.read_cache = Some(ttl);
        self
    }

    /// `user@host:port/database`, without the password.
    fn target(&self) -> String {
        use postgres::config::Host;
        let hosts: Vec<String> = self
            .config
            .get_hosts()
            .iter()
            .map(|h| match h {
                Host::Tcp(name) => name.clone(),
                Host::Unix(path) => path.display().to_string(),
            })
            .collect();
        let ports: Vec<String> = self.config.get_ports().iter().map(u16::to_string).collect();
        format!(
            "{}@{}:{}/{}",
            self.config.get_user().unwrap_or("?"),
            hosts.join(","),
            if ports.is_empty() {
                "5432".to_owned()
            } else {
                ports.join(",")
            },
            self.config.get_dbname().unwrap_or("?"),
        )
    }

    /// How connections are protected.
    #[must_use]
    pub fn tls_mode(&self) -> TlsMode {
        self.tls
    }

    fn connector(&self) -> Result<Option<MakeRustlsConnect>, StoreError> {
        tls::connector(self.tls, self.ca_file.as_deref())
            .map_err(|e| StoreError::new(StoreErrorKind::Unavailable, "tls", e))
    }

    /// One connection of its own, outside any pool, with the same TLS (a
    /// host's `LISTEN` connection, say). Make and drop it off any async
    /// runtime's worker threads: the driver runs a runtime of its own.
    pub fn connect(&self) -> Result<Client, StoreError> {
        let target = self.target();
        let made = match self.connector()? {
            Some(tls) => self.config.connect(tls),
            None => self.config.connect(NoTls),
        };
        made.map_err(|e| {
            StoreError::new(
                StoreErrorKind::Unavailable,
                "connect",
                describe(&e, &target),
            )
        })
    }

    /// Opens the store (see [`PostgresStore::open`]).
    pub fn open(self) -> Result<PostgresStore, StoreError> {
        PostgresStore::with_config(self)
    }
}

impl fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("target", &self.target())
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .finish_non_exhaustive()
    }
}

/// The PostgreSQL store: a pool of connections to one schema.
pub struct PostgresStore {
    pool: r2d2::Pool<Manager>,
    /// Makes connections outside the pool (to settle a commit whose answer
    /// was lost: the pool may still hold dead ones).
    fresh: Box<Manager>,
    /// The read cache, when on.
    cache: Option<Arc<cache::Cache>>,
    sql: Sql,
    target: String,
    schema: String,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("target", &self.target)
            .field("schema", &self.schema)
            .field("pool_size", &self.pool.max_size())
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects with `connection_string`, in the [`DEFAULT_SCHEMA`] with a
    /// pool of [`DEFAULT_POOL_SIZE`], creating or migrating the tables.
    pub fn open(connection_string: &str) -> Result<Self, StoreError> {
        PostgresConfig::parse(connection_string)?.open()
    }

    fn with_config(mut config: PostgresConfig) -> Result<Self, StoreError> {
        if config.config.get_connect_timeout().is_none() {
            config.config.connect_timeout(config.connect_timeout);
        }
        if config.config.get_application_name().is_none() {
            config.config.application_name("portcullis");
        }
        let target = config.target();
        let sql = Sql::new(&config.schema);
        let manager = Manager {
            tls: config.connector()?,
            config: config.config,
        };
        // One connection up front, so a wrong address or password fails
        // now with PostgreSQL's reason rather than a pool timeout later.
        r2d2::ManageConnection::connect(&manager).map_err(|e| {
            let kind = if e.as_db_error().is_some() {
                error(&e, "connect").kind()
            } else {
                StoreErrorKind::Unavailable
            };
            StoreError::new(kind, "connect", describe(&e, &target))
        })?;
        let fresh = Box::new(manager.clone());
        let pool = r2d2::Pool::builder()
            .max_size(config.pool_size)
            .min_idle(Some(1))
            .connection_timeout(config.connect_timeout)
            // A broken connection is caught on return (`has_broken`), and
            // one that died idle at `begin`, which tries another
            // (`PostgresStore::begin`); a round trip per checkout would
            // cost more than it saves.
            .test_on_check_out(false)
            .error_handler(Box::new(r2d2::NopErrorHandler))
            .build_unchecked(manager.clone());
        let mut store = Self {
            pool,
            fresh,
            cache: None,
            sql,
            target,
            schema: config.schema,
        };
        store.migrate()?;
        if let Some(ttl) = config.read_cache {
            let cache = Arc::new(cache::Cache::new(ttl, &store.schema));
            cache::listen(&cache, (*store.fresh).clone())
                .map_err(|e| StoreError::new(StoreErrorKind::Other, "read cache", e))?;
            store.cache = Some(cache);
        }
        Ok(store)
    }

    /// The schema the tables live in.
    #[must_use]
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// Forgets every row the read cache keeps, so the next read of each
    /// goes to the database. For a host told of a change on a channel of
    /// its own (another instance's `NOTIFY`), which may arrive before the
    /// changed row's own notification reaches this store's listener.
    pub fn clear_cache(&self) {
        if let Some(cache) = &self.cache {
            cache.clear();
        }
    }

    /// Runs `f` with this thread's reads of this crate's stores held to
    /// memory: a read the cache cannot answer fails at once with
    /// [`StoreErrorKind::Unavailable`] (context `memory only`) rather than
    /// wait on the database, so `f` may run on an async runtime's worker.
    /// `None`, without running `f`, when the cache is off (every read
    /// would fail). A host tries a read-only check this way first and, on
    /// a store error, again on its blocking pool.
    pub fn in_memory<T>(&self, f: impl FnOnce() -> T) -> Option<T> {
        struct Reset(bool);
        impl Drop for Reset {
            fn drop(&mut self) {
                MEMORY_ONLY.set(self.0);
            }
        }
        self.cache.as_ref()?;
        let _reset = Reset(MEMORY_ONLY.replace(true));
        Some(f())
    }

    /// How the read cache has done, `None` when it is off.
    #[must_use]
    pub fn cache_stats(&self) -> Option<CacheStats> {
        self.cache.as_ref().map(|c| c.stats())
    }

    /// Creates or migrates the tables, under a transaction-scoped advisory
    /// lock keyed by the schema name so concurrent opens take turns.
    fn migrate(&self) -> Result<(), StoreError> {
        let mut conn = self.connection()?;
        let schema = &self.schema;
        let version_table = format!("\"{schema}\".schema_version");
        let run = |client: &mut Client| -> Result<(), StoreError> {
            let ctx = "migrate schema";
            client
                .batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED")
                .map_err(|e| error(&e, ctx))?;
            client
                .execute("SELECT pg_advisory_xact_lock($1)", &[&advisory_key(schema)])
                .map_err(|e| error(&e, ctx))?;
            client
                .batch_execute(&format!(
                    "CREATE SCHEMA IF NOT EXISTS \"{schema}\";
                     CREATE TABLE IF NOT EXISTS {version_table} (
                         singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
                         version integer NOT NULL
                     );"
                ))
                .map_err(|e| error(&e, ctx))?;
            let found: Option<i32> = client
                .query_opt(&format!("SELECT version FROM {version_table}"), &[])
                .map_err(|e| error(&e, ctx))?
                .map(|row| row.try_get(0))
                .transpose()
                .map_err(|e| error(&e, ctx))?;
            let from = found.unwrap_or(0);
            if from > SCHEMA_VERSION {
                return Err(StoreError::new(
                    StoreErrorKind::Unavailable,
                    ctx,
                    format!(
                        "schema \"{schema}\" is at version {from}, newer than this build \
                         ({SCHEMA_VERSION})"
                    ),
                ));
            }
            for version in from..SCHEMA_VERSION {
                client
                    .batch_execute(&migration(schema, version))
                    .map_err(|e| error(&e, ctx))?;
            }
            client
                .execute(
                    &format!(
                        "INSERT INTO {version_table} (version) VALUES ($1)
                         ON CONFLICT (singleton) DO UPDATE SET version = EXCLUDED.version"
                    ),
                    &[&SCHEMA_VERSION],
                )
                .map_err(|e| error(&e, ctx))?;
            client.batch_execute("COMMIT").map_err(|e| error(&e, ctx))
        };
        let out = run(&mut conn.client);
        if out.is_err() && conn.client.batch_execute("ROLLBACK").is_err() {
            conn.broken = true;
        }
        out
    }

    fn connection(&self) -> Result<PooledConnection<Manager>, StoreError> {
        self.pool.get().map_err(|e| {
            StoreError::new(
                StoreErrorKind::Unavailable,
                "connect",
                format!("{}: {e}", self.target),
            )
        })
    }

    /// Opens a transaction with `sql` (`BEGIN …`) on a pooled connection.
    ///
    /// A pooled connection may have died while it sat idle (the database
    /// restarted, a proxy cut it): its `BEGIN` fails at the transport, or
    /// with the `FATAL` the server sent as it went (SQLSTATE class `57` or
    /// `08`). Nothing was sent inside a transaction yet, so the connection
    /// is discarded and the `BEGIN` tried on another, up to one more time
    /// than the pool holds connections: after a restart every idle one is
    /// dead, and the last try opens a fresh one (which waits up to the
    /// connect timeout for the database to come back). A request is never
    /// answered with a connection that was dead before it began.
    fn begin(&self, sql: &'static str) -> Result<Txn<'_>, StoreError> {
        let most = self.pool.max_size().saturating_add(1);
        let mut tried = 0;
        loop {
            tried += 1;
            let mut conn = self.connection()?;
            let failed = if conn.client.is_closed() {
                None
            } else {
                match conn.client.batch_execute(sql) {
                    Ok(()) => {
                        return Ok(Txn {
                            conn: RefCell::new(conn),
                            store: self,
                            open: true,
                            aborted: RefCell::new(None),
                            xid: None,
                        });
                    }
                    Err(e) => Some(e),
                }
            };
            conn.broken = true;
            drop(conn);
            let retry = failed.as_ref().is_none_or(connection_lost);
            if !retry || tried >= most {
                return Err(match failed {
                    Some(e) => error(&e, "begin"),
                    None => StoreError::new(
                        StoreErrorKind::Unavailable,
                        "begin",
                        format!("{}: every pooled connection was closed", self.target),
                    ),
                });
            }
        }
    }

    /// Settles a `COMMIT` whose answer never came (the connection failed
    /// under it): PostgreSQL may or may not have committed. `xid` is the
    /// transaction's id, read before the `COMMIT`; `pg_xact_status` on a
    /// fresh connection says what became of it. While it is `in progress`
    /// (the old backend is still finishing) or the database cannot be
    /// reached, this asks again with a growing pause, for at most
    /// [`RESOLVE_WITHIN`]. `Ok(true)`: committed; `Ok(false)`: rolled back
    /// (nothing applied); `Err`: still unknown.
    fn resolve(&self, xid: &str) -> Result<bool, String> {
        let deadline = std::time::Instant::now() + RESOLVE_WITHIN;
        let mut pause = Duration::from_millis(50);
        loop {
            let asked = r2d2::ManageConnection::connect(&*self.fresh).and_then(|mut c| {
                c.client
                    .query_one("SELECT pg_xact_status($1::text::xid8)", &[&xid])
                    .and_then(|row| row.try_get::<_, Option<String>>(0))
            });
            let last = match asked.as_ref().map(Option::as_deref) {
                Ok(Some("committed")) => return Ok(true),
                Ok(Some("aborted")) => return Ok(false),
                Ok(Some(other)) => format!("transaction {xid} is {other}"),
                Ok(None) => return Err(format!("transaction {xid} is too old to look up")),
                Err(e) => describe(e, &self.target),
            };
            let now = std::time::Instant::now();
            if now >= deadline {
                return Err(last);
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }
}

/// The SQL that brings `schema` from `version` to `version + 1`.
fn migration(schema: &str, version: i32) -> String {
    match version {
        0 => {
            let mut sql = String::new();
            for t in Table::ALL {
                let _ = write!(
                    sql,
                    "CREATE TABLE IF NOT EXISTS \"{schema}\".\"{}\" \
                     (key bytea PRIMARY KEY, value bytea NOT NULL);",
                    t.name()
                );
            }
            sql
        }
        1 => {
            let mut sql = format!(
                "CREATE OR REPLACE FUNCTION \"{schema}\".announce_row() RETURNS trigger \
                 LANGUAGE plpgsql AS $$ BEGIN \
                 PERFORM pg_notify('{channel}', TG_TABLE_SCHEMA || ' ' || TG_TABLE_NAME || ' ' \
                 || encode(CASE WHEN TG_OP = 'DELETE' THEN OLD.key ELSE NEW.key END, 'hex')); \
                 RETURN NULL; END $$;",
                channel = cache::CHANNEL
            );
            for t in cache::CACHED {
                let _ = write!(
                    sql,
                    "DROP TRIGGER IF EXISTS announce_row ON \"{schema}\".\"{t}\"; \
                     CREATE TRIGGER announce_row AFTER INSERT OR UPDATE OR DELETE \
                     ON \"{schema}\".\"{t}\" FOR EACH ROW \
                     EXECUTE FUNCTION \"{schema}\".announce_row();",
                    t = t.name()
                );
            }
            sql
        }
        2 => new_table(schema, Table::GrantApps),
        3 => new_table(schema, Table::ClientAssertions) + &new_table(schema, Table::WaitingCalls),
        4 => new_table(schema, Table::Activity),
        5 => new_table(schema, Table::AppViews),
        _ => String::new(),
    }
}

/// The SQL that creates the table of `table` (a table a later version
/// added; version 0 created the first ones).
fn new_table(schema: &str, table: Table) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS \"{schema}\".\"{}\" \
         (key bytea PRIMARY KEY, value bytea NOT NULL);",
        table.name()
    )
}

/// A stable 64-bit key for the schema's advisory lock (FNV-1a).
fn advisory_key(schema: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in b"portcullis:".iter().chain(schema.as_bytes()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    i64::from_ne_bytes(h.to_ne_bytes())
}

impl Store for PostgresStore {
    type Read<'a> = PostgresRead<'a>;
    type Write<'a> = PostgresWrite<'a>;

    /// Opens a `REPEATABLE READ, READ ONLY` transaction; with the read
    /// cache on, at its first read the cache cannot answer.
    fn begin_read(&self) -> Result<PostgresRead<'_>, StoreError> {
        if MEMORY_ONLY.get() && self.cache.is_none() {
            return Err(StoreError::new(
                StoreErrorKind::Unavailable,
                "memory only",
                "no read cache",
            ));
        }
        let (txn, ticket) = match &self.cache {
            None => (Some(self.begin(BEGIN_READ)?), None),
            Some(cache) => (None, cache.ticket()),
        };
        Ok(PostgresRead {
            store: self,
            txn: RefCell::new(txn),
            ticket,
        })
    }

    /// Opens a `SERIALIZABLE` transaction. After this thread's last write
    /// transaction met a conflict, it first sleeps a jittered, doubling
    /// pause (at most 20 ms): the engine re-runs a conflicted operation
    /// at once (the core reads no clock), and racing writers that retry in
    /// lockstep would conflict again.
    fn begin_write(&self) -> Result<PostgresWrite<'_>, StoreError> {
        if MEMORY_ONLY.get() {
            return Err(StoreError::new(
                StoreErrorKind::Unavailable,
                "memory only",
                "a write waits on the database",
            ));
        }
        let conflicts = CONFLICTS.get();
        if conflicts > 0 {
            std::thread::sleep(backoff(conflicts));
        }
        Ok(PostgresWrite {
            txn: self.begin("BEGIN ISOLATION LEVEL SERIALIZABLE")?,
            savepoints: 0,
            conflicts,
            touched: Vec::new(),
        })
    }
}

std::thread_local! {
    /// Inside [`PostgresStore::in_memory`]: no read may wait on the
    /// database.
    static MEMORY_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Conflicts this thread's write transactions met in a row.
    static CONFLICTS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// The pause before a write transaction after `conflicts` conflicts in a
/// row: uniform in `[0, min(100 µs · 2^(conflicts-1), 20 ms)]`.
fn backoff(conflicts: u32) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let cap = (100u64 << conflicts.saturating_sub(1).min(8)).min(20_000);
    // Jitter only, not a secret: a per-call key of the std hasher.
    let draw = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    Duration::from_micros(draw % (cap + 1))
}

/// The statements of every table, as text; each connection prepares the
/// ones it uses once.
struct Sql {
    /// Per table, in [`Op`] order.
    text: Vec<[String; OPS]>,
}

/// A statement kind: get, put, delete, then the nine range shapes.
#[derive(Clone, Copy)]
enum Op {
    Get,
    Put,
    Delete,
    /// `start` and `end` bound kinds: 0 unbounded, 1 included, 2 excluded.
    Range(u8, u8),
}

const OPS: usize = 12;

impl Op {
    fn index(self) -> usize {
        match self {
            Op::Get => 0,
            Op::Put => 1,
            Op::Delete => 2,
            Op::Range(s, e) => 3 + usize::from(s) * 3 + usize::from(e),
        }
    }
}

impl Sql {
    fn new(schema: &str) -> Self {
        let text = Table::ALL
            .iter()
            .map(|t| {
                let name = format!("\"{schema}\".\"{}\"", t.name());
                std::array::from_fn(|i| match i {
                    0 => format!("SELECT value FROM {name} WHERE key = $1"),
                    1 => format!(
                        "INSERT INTO {name} (key, value) VALUES ($1, $2) \
                         ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
                    ),
                    2 => format!("DELETE FROM {name} WHERE key = $1"),
                    _ => {
                        let (s, e) = ((i - 3) / 3, (i - 3) % 3);
                        let mut clauses = Vec::new();
                        let mut n = 0;
                        for (kind, ops) in [(s, [">=", ">"]), (e, ["<=", "<"])] {
                            if kind > 0 {
                                n += 1;
                                clauses.push(format!("key {} ${n}", ops[kind - 1]));
                            }
                        }
                        let filter = if clauses.is_empty() {
                            String::new()
                        } else {
                            format!("WHERE {} ", clauses.join(" AND "))
                        };
                        format!(
                            "SELECT key, value FROM {name} {filter}ORDER BY key LIMIT ${}",
                            n + 1
                        )
                    }
                })
            })
            .collect();
        Self { text }
    }
}

/// The pool's connection manager.
#[derive(Clone)]
struct Manager {
    config: postgres::Config,
    /// The TLS connector, `None` for plain TCP.
    tls: Option<MakeRustlsConnect>,
}

/// A pooled connection and the statements prepared on it.
struct Connection {
    client: Client,
    prepared: Vec<Option<Statement>>,
    /// Left in an unknown state: the pool discards it.
    broken: bool,
}

impl r2d2::ManageConnection for Manager {
    type Connection = Connection;
    type Error = postgres::Error;

    fn connect(&self) -> Result<Connection, postgres::Error> {
        Ok(Connection {
            client: match &self.tls {
                Some(tls) => self.config.connect(tls.clone())?,
                None => self.config.connect(NoTls)?,
            },
            prepared: vec![None; Table::ALL.len() * OPS],
            broken: false,
        })
    }

    fn is_valid(&self, conn: &mut Connection) -> Result<(), postgres::Error> {
        conn.client.simple_query("").map(|_| ())
    }

    fn has_broken(&self, conn: &mut Connection) -> bool {
        conn.broken || conn.client.is_closed()
    }
}

/// One transaction on one pooled connection, shared by reads and writes.
struct Txn<'a> {
    conn: RefCell<PooledConnection<Manager>>,
    store: &'a PostgresStore,
    /// `BEGIN` was sent and neither `COMMIT` nor `ROLLBACK` yet.
    open: bool,
    /// The first failure of a statement since `BEGIN` (or the last
    /// `ROLLBACK TO SAVEPOINT`): PostgreSQL refuses all but a rollback,
    /// and `commit` answers with this failure's kind.
    aborted: RefCell<Option<StoreError>>,
    /// The transaction's id, once asked for (just before `COMMIT`).
    xid: Option<String>,
}

impl Txn<'_> {
    /// Runs `op` on `table` with `params`, preparing its statement on this
    /// connection the first time.
    fn run<T>(
        &self,
        table: Table,
        op: Op,
        context: &'static str,
        f: impl FnOnce(&mut Client, &Statement) -> Result<T, postgres::Error>,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn.borrow_mut();
        let conn = &mut **conn;
        let slot = table.index() * OPS + op.index();
        let out = match conn.prepared[slot].clone() {
            Some(statement) => f(&mut conn.client, &statement),
            None => conn
                .client
                .prepare(&self.store.sql.text[table.index()][op.index()])
                .and_then(|statement| {
                    conn.prepared[slot] = Some(statement.clone());
                    f(&mut conn.client, &statement)
                }),
        };
        out.map_err(|e| self.failed(&mut conn.broken, &e, context))
    }

    /// A statement failed: the transaction is aborted, and a failure that
    /// did not come from the server (I/O, protocol) leaves the connection
    /// in an unknown state, so the pool drops it.
    fn failed(&self, broken: &mut bool, e: &postgres::Error, context: &'static str) -> StoreError {
        if e.as_db_error().is_none() {
            *broken = true;
        }
        let failure = error(e, context);
        self.aborted
            .borrow_mut()
            .get_or_insert_with(|| failure.clone());
        failure
    }

    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.run(table, Op::Get, "get", |client, statement| {
            client
                .query_opt(statement, &[&key])?
                .map(|row| row.try_get::<_, Vec<u8>>(0))
                .transpose()
        })
    }

    /// The row's value is lent from the row buffer the driver read, not
    /// copied into a `Vec` first; `f` runs after the connection is
    /// released, so it may read through this transaction again.
    fn get_with<T>(
        &self,
        table: Table,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> T,
    ) -> Result<Option<T>, StoreError> {
        let row = self.run(table, Op::Get, "get", |client, statement| {
            client.query_opt(statement, &[&key])
        })?;
        let Some(row) = row else {
            return Ok(None);
        };
        match row.try_get::<_, &[u8]>(0) {
            Ok(value) => Ok(Some(f(value))),
            Err(e) => {
                let mut conn = self.conn.borrow_mut();
                Err(self.failed(&mut conn.broken, &e, "get"))
            }
        }
    }

    fn range(
        &self,
        table: Table,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let ((s, start), (e, end)) = (bound(start), bound(end));
        let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(3);
        for key in [&start, &end].into_iter().flatten() {
            params.push(key);
        }
        params.push(&limit);
        self.run(table, Op::Range(s, e), "range", |client, statement| {
            client
                .query(statement, &params)?
                .into_iter()
                .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
                .collect()
        })
    }

    /// Runs `f` with `sql` (no parameters, not prepared) on the connection.
    fn run_sql<T>(
        &self,
        sql: &str,
        context: &'static str,
        f: impl FnOnce(&mut Client, &str) -> Result<T, postgres::Error>,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn.borrow_mut();
        let conn = &mut **conn;
        f(&mut conn.client, sql).map_err(|e| self.failed(&mut conn.broken, &e, context))
    }

    /// Sends a statement without parameters (`SAVEPOINT`, `ROLLBACK TO`).
    fn simple(&self, sql: &str, context: &'static str) -> Result<(), StoreError> {
        let mut conn = self.conn.borrow_mut();
        let conn = &mut **conn;
        conn.client
            .batch_execute(sql)
            .map_err(|e| self.failed(&mut conn.broken, &e, context))
    }
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        if self.open {
            let conn = self.conn.get_mut();
            if conn.client.batch_execute("ROLLBACK").is_err() {
                conn.broken = true;
            }
        }
    }
}

/// A read transaction: one `REPEATABLE READ` snapshot. With the read
/// cache on, it begins on the database only at its first read the cache
/// cannot answer.
pub struct PostgresRead<'a> {
    store: &'a PostgresStore,
    txn: RefCell<Option<Txn<'a>>>,
    /// Taken before the snapshot, for keeping what is read (cache on).
    ticket: Option<cache::Ticket>,
}

/// How a read transaction begins.
const BEGIN_READ: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY";

impl PostgresRead<'_> {
    /// Runs `f` on the transaction, beginning it first if it has not.
    fn on_txn<T>(
        &self,
        f: impl FnOnce(&Txn<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if self.txn.borrow().is_none() {
            if MEMORY_ONLY.get() {
                return Err(StoreError::new(
                    StoreErrorKind::Unavailable,
                    "memory only",
                    "not in the read cache",
                ));
            }
            let txn = self.store.begin(BEGIN_READ)?;
            *self.txn.borrow_mut() = Some(txn);
        }
        let txn = self.txn.borrow();
        match txn.as_ref() {
            Some(t) => f(t),
            None => unreachable!("begun above"),
        }
    }

    /// The cache, when it may answer a read of `table`.
    fn cache_for(&self, table: Table) -> Option<&cache::Cache> {
        self.store
            .cache
            .as_deref()
            .filter(|_| cache::Cache::caches(table))
    }

    /// A cached table's row from memory, or from the database (and kept).
    fn cached(
        &self,
        cache: &cache::Cache,
        table: Table,
        key: &[u8],
    ) -> Result<Option<Arc<[u8]>>, StoreError> {
        if let Some(cache::Kept(row)) = cache.get(table, key) {
            return Ok(row);
        }
        let row = self.on_txn(|t| t.get(table, key))?;
        if let Some(ticket) = self.ticket {
            cache.put(ticket, table, key, row.as_deref());
        }
        Ok(row.map(Arc::from))
    }
}

impl fmt::Debug for PostgresRead<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PostgresRead")
    }
}

impl ReadTransaction for PostgresRead<'_> {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        match self.cache_for(table) {
            Some(cache) => Ok(self.cached(cache, table, key)?.map(|v| v.to_vec())),
            None => self.on_txn(|t| t.get(table, key)),
        }
    }

    fn get_with<T>(
        &self,
        table: Table,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> T,
    ) -> Result<Option<T>, StoreError> {
        match self.cache_for(table) {
            Some(cache) => Ok(self.cached(cache, table, key)?.map(|v| f(&v))),
            None => self.on_txn(|t| t.get_with(table, key, f)),
        }
    }

    fn range(
        &self,
        table: Table,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        self.on_txn(|t| t.range(table, start, end, limit))
    }
}

/// A write transaction at `SERIALIZABLE`, rolled back when dropped.
pub struct PostgresWrite<'a> {
    txn: Txn<'a>,
    /// Savepoints taken so far; the next is named `s<savepoints>`.
    savepoints: usize,
    /// This thread's conflicts in a row when the transaction began.
    conflicts: u32,
    /// Rows of cached tables this transaction wrote (read cache on).
    touched: Vec<(Table, Vec<u8>)>,
}

impl PostgresWrite<'_> {
    /// Notes a write of `key` in `table` for the read cache.
    fn touch(&mut self, table: Table, key: &[u8]) {
        if self.txn.store.cache.is_some() && cache::Cache::caches(table) {
            self.touched.push((table, key.to_vec()));
        }
    }
}

impl Drop for PostgresWrite<'_> {
    fn drop(&mut self) {
        // This store reads its own writes at once: the rows this
        // transaction wrote leave the read cache as it ends (committed or
        // not), before their notification comes back, and no read that
        // began before this can put them back.
        if let Some(cache) = &self.txn.store.cache {
            for (table, key) in self.touched.drain(..) {
                cache.drop_row(table, &key);
            }
        }
        // Ended without a conflict of its own: the streak is over.
        if CONFLICTS.get() == self.conflicts {
            CONFLICTS.set(0);
        }
    }
}

impl fmt::Debug for PostgresWrite<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PostgresWrite")
    }
}

impl ReadTransaction for PostgresWrite<'_> {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.txn.get(table, key)
    }

    fn get_with<T>(
        &self,
        table: Table,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> T,
    ) -> Result<Option<T>, StoreError> {
        self.txn.get_with(table, key, f)
    }

    fn range(
        &self,
        table: Table,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        self.txn.range(table, start, end, limit)
    }
}

impl WriteTransaction for PostgresWrite<'_> {
    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.touch(table, key);
        self.txn.run(table, Op::Put, "put", |client, statement| {
            client.execute(statement, &[&key, &value]).map(|_| ())
        })
    }

    fn delete(&mut self, table: Table, key: &[u8]) -> Result<bool, StoreError> {
        self.touch(table, key);
        self.txn
            .run(table, Op::Delete, "delete", |client, statement| {
                client.execute(statement, &[&key]).map(|n| n > 0)
            })
    }

    fn savepoint(&mut self) -> Result<Savepoint, StoreError> {
        let mark = self.savepoints;
        self.txn
            .simple(&format!("SAVEPOINT s{mark}"), "savepoint")?;
        self.savepoints += 1;
        Ok(Savepoint::new(mark))
    }

    fn rollback_to(&mut self, savepoint: Savepoint) -> Result<(), StoreError> {
        let mark = savepoint.mark();
        if mark >= self.savepoints {
            return Err(StoreError::new(
                StoreErrorKind::Other,
                "rollback to savepoint",
                "no such savepoint in this transaction",
            ));
        }
        self.txn
            .simple(&format!("ROLLBACK TO SAVEPOINT s{mark}"), "rollback")?;
        // Later savepoints are gone; the next one reuses their numbers.
        self.savepoints = mark + 1;
        *self.txn.aborted.borrow_mut() = None;
        Ok(())
    }

    /// After a failed statement (and no `ROLLBACK TO SAVEPOINT` since),
    /// refused without sending `COMMIT`, with the kind of that failure: a
    /// connection lost mid-transaction stays
    /// [`StoreErrorKind::Unavailable`] and a serialization failure stays
    /// [`StoreErrorKind::Conflict`], so the caller answers or retries as
    /// it would have at the statement itself; nothing was applied.
    fn commit(mut self) -> Result<(), StoreError> {
        if let Some(first) = self.txn.aborted.get_mut().take() {
            return Err(StoreError::new(
                first.kind(),
                "commit",
                format!("a statement of this transaction failed; nothing was applied ({first})"),
            ));
        }
        // The id first: if the connection fails under the `COMMIT`, it is
        // what settles whether the commit happened.
        let xid = self.txn.run_sql(
            "SELECT pg_current_xact_id()::text",
            "commit",
            |client, sql| client.query_one(sql, &[])?.try_get::<_, String>(0),
        )?;
        self.txn.xid = Some(xid);
        let out = {
            let mut conn = self.txn.conn.borrow_mut();
            conn.client.batch_execute("COMMIT")
        };
        // Committed, or refused and rolled back by PostgreSQL, or the
        // connection failed under it; it is no longer open either way.
        self.txn.open = false;
        let Err(e) = out else { return Ok(()) };
        self.txn.conn.get_mut().broken |= e.as_db_error().is_none();
        if !outcome_unknown(&e) {
            return Err(error(&e, "commit"));
        }
        let xid = self.txn.xid.take().unwrap_or_default();
        match self.txn.store.resolve(&xid) {
            Ok(true) => Ok(()),
            Ok(false) => Err(StoreError::new(
                StoreErrorKind::Unavailable,
                "commit",
                format!("{e}; the transaction was rolled back, nothing was applied"),
            )),
            Err(why) => Err(StoreError::new(
                StoreErrorKind::Unavailable,
                "commit outcome unknown",
                format!("{e}; whether it committed is unknown ({why})"),
            )),
        }
    }
}

/// The first host of `config` that is neither a Unix socket nor on
/// loopback (`localhost`, `127.0.0.0/8`, `::1`), by name or `hostaddr`:
/// a connection to it crosses a network.
fn remote_host(config: &postgres::Config) -> Option<String> {
    use postgres::config::Host;
    let names = config.get_hosts().iter().filter_map(|h| match h {
        Host::Tcp(name) => {
            let loopback = name.eq_ignore_ascii_case("localhost")
                || name
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback());
            (!loopback).then(|| name.clone())
        }
        Host::Unix(_) => None,
    });
    let addrs = config
        .get_hostaddrs()
        .iter()
        .filter(|ip| !ip.is_loopback())
        .map(ToString::to_string);
    names.chain(addrs).next()
}

/// A connection failure, naming the target but never the password.
fn describe(e: &postgres::Error, target: &str) -> String {
    match e.as_db_error() {
        Some(db) => format!("{target}: SQLSTATE {}: {}", db.code().code(), db.message()),
        None => format!("{target}: {e}"),
    }
}

/// How long a commit whose answer was lost is looked up before the store
/// answers that its outcome is unknown (see [`PostgresWrite::commit`]).
pub const RESOLVE_WITHIN: Duration = Duration::from_secs(15);

/// Whether `e` came from the connection rather than from a statement: it
/// was closed, or a socket call failed. The database could not be reached;
/// another connection may do.
fn transport(e: &postgres::Error) -> bool {
    use std::error::Error as _;
    e.as_db_error().is_none()
        && (e.is_closed()
            || e.source()
                .is_some_and(|s| s.downcast_ref::<std::io::Error>().is_some()))
}

/// Whether `e` says the connection is gone: a transport failure, or the
/// `FATAL` a server sends as it ends a connection (SQLSTATE class `08`,
/// connection exception, or `57`, operator intervention: a shutdown, a
/// terminated backend). Another connection may do.
fn connection_lost(e: &postgres::Error) -> bool {
    match e.as_db_error() {
        Some(db) => matches!(&db.code().code()[..2], "08" | "57"),
        None => transport(e),
    }
}

/// Whether a failed `COMMIT` may still have committed: anything but a
/// definite refusal by the server (class `40`, transaction rollback: a
/// serialization failure or a deadlock; or another error the server sent
/// about the statement) leaves the outcome to be looked up. A connection
/// lost under it, or ended by the server as it went (`57P01` after a
/// shutdown began), may have committed first.
fn outcome_unknown(e: &postgres::Error) -> bool {
    connection_lost(e)
        || e.as_db_error()
            .is_some_and(|db| &db.code().code()[..2] == "XX")
}

/// A bound's kind in [`Op::Range`] and its key.
fn bound(b: Bound<&[u8]>) -> (u8, Option<&[u8]>) {
    match b {
        Bound::Unbounded => (0, None),
        Bound::Included(k) => (1, Some(k)),
        Bound::Excluded(k) => (2, Some(k)),
    }
}

/// Maps a driver error to the store's, keeping the SQLSTATE and message
/// but never the `DETAIL` (which can quote key bytes).
fn error(e: &postgres::Error, context: &'static str) -> StoreError {
    let Some(db) = e.as_db_error() else {
        let kind = if transport(e) {
            StoreErrorKind::Unavailable
        } else {
            StoreErrorKind::Io
        };
        return StoreError::new(kind, context, e);
    };
    let code = db.code();
    let class = &code.code()[..2];
    let kind = if *code == SqlState::T_R_SERIALIZATION_FAILURE
        || *code == SqlState::T_R_DEADLOCK_DETECTED
    {
        CONFLICTS.set(CONFLICTS.get().saturating_add(1));
        StoreErrorKind::Conflict
    } else if class == "08"
        || class == "28"
        || class == "57"
        || class == "53" && *code != SqlState::DISK_FULL
    {
        // Connection exceptions, refused authentication, operator
        // intervention (shutdown), insufficient resources but a full disk.
        StoreErrorKind::Unavailable
    } else if *code == SqlState::DISK_FULL || class == "58" {
        StoreErrorKind::Io
    } else if class == "XX" {
        StoreErrorKind::Corrupt
    } else {
        StoreErrorKind::Other
    };
    StoreError::new(
        kind,
        context,
        format_args!("SQLSTATE {}: {}", code.code(), db.message()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_errors_never_show_the_password() {
        let config =
            PostgresConfig::parse("postgres://alice:hunter2@db.example:6543/app?sslmode=require")
                .unwrap_or_else(|e| panic!("{e}"));
        let shown = format!("{config:?}");
        assert!(shown.contains("alice@db.example:6543/app"), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
        let err = PostgresConfig::parse("postgres://alice:hunter2@[bad").err();
        assert!(err.is_some_and(|e| !e.to_string().contains("hunter2")));
    }

    #[test]
    fn an_unreachable_database_is_unavailable_and_keeps_the_password() {
        // Port 1 on loopback: nothing listens, the connect is refused.
        let err = PostgresStore::open("postgres://alice:hunter2@127.0.0.1:1/app").err();
        let err = err.unwrap_or_else(|| panic!("connected to port 1"));
        assert_eq!(err.kind(), StoreErrorKind::Unavailable);
        let shown = format!("{err} {err:?}");
        assert!(shown.contains("alice@127.0.0.1:1/app"), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn a_host_beyond_loopback_needs_an_sslmode() {
        for remote in [
            "postgres://u:p@db.example:5432/app",
            "postgres://u:p@10.0.0.5/app",
            "postgres://u:p@[2001:db8::1]/app",
            "postgres://u:p@127.0.0.1/app?hostaddr=192.0.2.7",
            "host=db.example user=u dbname=app",
        ] {
            let e = PostgresConfig::parse(remote).err();
            assert!(
                e.as_ref().is_some_and(|e| e.kind() == StoreErrorKind::Other
                    && e.to_string().contains("sslmode=verify-full")
                    && !e.to_string().contains(":p@")),
                "{remote}: {e:?}"
            );
            let sep = if remote.contains("://") {
                if remote.contains('?') { "&" } else { "?" }
            } else {
                " "
            };
            // The key=value form knows the driver's own modes only.
            let modes: &[&str] = if remote.contains("://") {
                &["disable", "require", "verify-full"]
            } else {
                &["disable", "require"]
            };
            for mode in modes {
                let explicit = format!("{remote}{sep}sslmode={mode}");
                assert!(PostgresConfig::parse(&explicit).is_ok(), "{explicit}");
            }
        }
        for local in [
            "postgres://u:p@127.0.0.1:5432/app",
            "postgres://u:p@127.8.9.10/app",
            "postgres://u:p@localhost/app",
            "postgres://u:p@[::1]/app",
            "host=/var/run/postgresql user=u dbname=app",
        ] {
            let config = PostgresConfig::parse(local).unwrap_or_else(|e| panic!("{local}: {e}"));
            assert_eq!(config.tls_mode(), TlsMode::Disable, "{local}");
        }
    }

    #[test]
    fn only_a_real_sslmode_that_encrypts_lets_a_remote_host_through() {
        for plaintext in [
            "postgres://u:p@db.example/app?sslmode=prefer",
            "postgres://u:p@db.example/app?sslmode=allow",
            "postgres://u:p@db.example/app?application_name=sslmode=require",
            "postgres://u:p@db.example/app?options=-c%20sslmode%3Drequire",
            "host=db.example user=u dbname=app sslmode=prefer",
            "host=db.example user=u dbname=app application_name='sslmode=require'",
        ] {
            let e = PostgresConfig::parse(plaintext).err();
            assert!(
                e.as_ref().is_some_and(|e| e.kind() == StoreErrorKind::Other
                    && e.to_string().contains("sslmode=verify-full")),
                "{plaintext}: {e:?}"
            );
        }
        for (tls, mode) in [
            (
                "postgres://u:p@db.example/app?ssl%6Dode=require",
                TlsMode::Require,
            ),
            (
                "postgres://u:p@db.example/app?sslmode=verify-ca",
                TlsMode::VerifyFull,
            ),
            ("host=db.example user=u sslmode=require", TlsMode::Require),
        ] {
            let config = PostgresConfig::parse(tls).unwrap_or_else(|e| panic!("{tls}: {e}"));
            assert_eq!(config.tls_mode(), mode, "{tls}");
        }
        // Plaintext written down as such stays a choice the host may make.
        for disable in [
            "postgres://u:p@db.example/app?sslmode=disable",
            "host=db.example user=u sslmode=disable",
        ] {
            let config =
                PostgresConfig::parse(disable).unwrap_or_else(|e| panic!("{disable}: {e}"));
            assert_eq!(config.tls_mode(), TlsMode::Disable, "{disable}");
        }
    }

    #[test]
    fn schema_names_need_no_quoting() {
        let config = PostgresConfig::parse("host=localhost").unwrap_or_else(|e| panic!("{e}"));
        assert!(config.clone().schema("portcullis_t1").is_ok());
        for bad in ["", "1abc", "Upper", "a\"b", "a-b", &"x".repeat(64)] {
            assert!(config.clone().schema(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        for (conflicts, cap) in [(1, 100), (2, 200), (5, 1_600), (9, 20_000), (40, 20_000)] {
            for _ in 0..50 {
                assert!(
                    backoff(conflicts) <= Duration::from_micros(cap),
                    "{conflicts}"
                );
            }
        }
    }

    #[test]
    fn range_statements_bind_their_bounds_in_order() {
        let sql = Sql::new("s");
        let t = &sql.text[Table::Grants.index()];
        assert_eq!(
            t[Op::Range(0, 0).index()],
            "SELECT key, value FROM \"s\".\"grants\" ORDER BY key LIMIT $1"
        );
        assert_eq!(
            t[Op::Range(1, 2).index()],
            "SELECT key, value FROM \"s\".\"grants\" WHERE key >= $1 AND key < $2 \
             ORDER BY key LIMIT $3"
        );
        assert_eq!(
            t[Op::Range(0, 1).index()],
            "SELECT key, value FROM \"s\".\"grants\" WHERE key <= $1 ORDER BY key LIMIT $2"
        );
        assert_eq!(
            t[Op::Range(2, 0).index()],
            "SELECT key, value FROM \"s\".\"grants\" WHERE key > $1 ORDER BY key LIMIT $2"
        );
    }
}
