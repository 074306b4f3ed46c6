//! The command line: `portcullis serve` and the admin subcommands, parsed
//! with clap.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::db::Location;

/// Reference server and admin CLI for Portcullis.
#[derive(Debug, Parser)]
#[command(name = "portcullis", version, about)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
    /// How log lines are written to stderr: `text` (one line per event) or
    /// `json` (one JSON object per line). The level comes from `RUST_LOG`
    /// (default `info`: one line per request).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
}

/// The format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// Plain text, one line per event.
    Text,
    /// JSON lines.
    Json,
}

/// The database every command works on, and its key file.
#[derive(Clone, Debug, Args)]
pub(crate) struct DbArgs {
    /// The database: a redb file path, or a PostgreSQL URL
    /// (`postgres://user:password@host:port/db`, for several server
    /// instances on one database; the password is never logged).
    #[arg(long, global = true, default_value = "portcullis.redb", value_parser = Location::parse)]
    pub(crate) db: Location,
    /// The key file (signing keys and the session secret, mode 0600).
    /// Default `<db>.keys` beside a redb file; required with PostgreSQL,
    /// where keys never enter the database: give every instance a copy of
    /// the same file (`serve` creates it on first run if missing).
    #[arg(long, global = true)]
    pub(crate) key_file: Option<PathBuf>,
    /// The PostgreSQL schema the tables live in (default `portcullis`).
    #[arg(long, global = true)]
    pub(crate) db_schema: Option<String>,
    /// A file holding the PostgreSQL password (its first line), so that it
    /// is neither on the command line nor in the process list; it replaces
    /// any password in the `--db` URL, and is never logged.
    #[arg(long, global = true)]
    pub(crate) db_password_file: Option<PathBuf>,
    /// A PEM file of the certificate authorities PostgreSQL's certificate
    /// must chain to (the URL's `sslrootcert`; implies
    /// `sslmode=verify-full` when the URL names no `sslmode`). TLS follows
    /// the URL's `sslmode`: `disable` (plain TCP; the default on loopback
    /// only: a URL for another host must name an `sslmode`), `require`
    /// (encrypted, certificate not checked) or `verify-full` (checked
    /// against this file, else Mozilla's roots, and the host name).
    #[arg(long, global = true)]
    pub(crate) db_ca_file: Option<PathBuf>,
}

impl DbArgs {
    /// These arguments with `--db-password-file` read into the PostgreSQL
    /// URL (in memory only). An error names the file, never its content.
    /// `--db-ca-file` goes into the URL as `sslrootcert` (with
    /// `sslmode=verify-full` unless the URL names a mode).
    pub(crate) fn resolved(mut self) -> Result<Self, String> {
        let (password_file, ca_file) = (self.db_password_file.take(), self.db_ca_file.take());
        if password_file.is_none() && ca_file.is_none() {
            return Ok(self);
        }
        let Location::Postgres(url) = &self.db else {
            return Err("--db-password-file and --db-ca-file need a postgres:// --db".into());
        };
        let mut parsed =
            url::Url::parse(url).map_err(|_| "the --db URL does not parse".to_owned())?;
        if let Some(path) = password_file {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("reading {}: {e}", path.display()))?;
            let password = text.lines().next().unwrap_or_default();
            if password.is_empty() {
                return Err(format!("{} holds no password", path.display()));
            }
            parsed
                .set_password(Some(password))
                .map_err(|()| "the --db URL cannot carry a password".to_owned())?;
        }
        if let Some(path) = ca_file {
            let has_mode = parsed.query_pairs().any(|(k, _)| k == "sslmode");
            let path = path.to_str().ok_or("--db-ca-file must be a UTF-8 path")?;
            let mut query = parsed.query_pairs_mut();
            if !has_mode {
                query.append_pair("sslmode", "verify-full");
            }
            query.append_pair("sslrootcert", path);
        }
        self.db = Location::Postgres(parsed.to_string());
        Ok(self)
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the HTTP server (OAuth endpoints, metadata, /mcp, consent and
    /// Agents pages, the open route).
    Serve(Box<ServeArgs>),
    /// List or revoke grants (on a redb file, needs the server stopped:
    /// redb allows one process at a time; PostgreSQL works while servers
    /// run).
    Grants {
        /// The database.
        #[command(flatten)]
        db: DbArgs,
        /// The action.
        #[command(subcommand)]
        action: GrantsAction,
    },
    /// Turn the demo site's off switch, or rotate its public key.
    Site {
        /// The database.
        #[command(flatten)]
        db: DbArgs,
        /// The action.
        #[command(subcommand)]
        action: SiteAction,
    },
    /// The signing keys of the key file: list them, rotate one
    /// algorithm's key on a schedule that logs nobody out, or retire one at
    /// once. Works while servers run: each reloads the file within seconds.
    Keys {
        /// The database (only to find its key file: `--key-file` or
        /// `<db>.keys`).
        #[command(flatten)]
        db: DbArgs,
        /// The action.
        #[command(subcommand)]
        action: KeysAction,
    },
    /// The activity record: what every agent and App call did, who
    /// approved or denied it, and how it ended.
    Activity {
        /// The database.
        #[command(flatten)]
        db: DbArgs,
        /// The action.
        #[command(subcommand)]
        action: ActivityAction,
    },
    /// Mint, list and revoke agent tokens.
    Tokens {
        /// The database.
        #[command(flatten)]
        db: DbArgs,
        /// The action.
        #[command(subcommand)]
        action: TokensAction,
    },
    /// Inspect one token.
    Token {
        /// The action.
        #[command(subcommand)]
        action: TokenAction,
    },
    /// Run a guard of the core on inputs read from stdin, one JSON string per
    /// line; writes one JSON verdict per line.
    Check {
        /// The guard.
        #[command(subcommand)]
        guard: CheckGuard,
    },
    /// An MCP agent: signs in to a Portcullis MCP URL (discovery, dynamic
    /// registration, browser consent on a loopback redirect), then lists
    /// skills or runs one `execute` through approval to its result.
    Agent(portcullis_agent::AgentArgs),
}

/// `portcullis serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The database.
    #[command(flatten)]
    pub(crate) db: DbArgs,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8787")]
    pub(crate) addr: SocketAddr,
    /// On PostgreSQL, how long (milliseconds) a site or grant row read for
    /// a bearer check may be served from memory: each row changed by any
    /// writer is dropped at its `NOTIFY`, and nothing is served while the
    /// listener is not connected; this is the bound if a notification is
    /// lost unnoticed. `0` reads the database for every check.
    #[arg(long, default_value_t = 1_000)]
    pub(crate) db_read_cache_ms: u64,
    /// The public origin clients reach this server at (e.g. behind a TLS
    /// proxy), without a path. Default `http://<addr>`.
    #[arg(long)]
    pub(crate) public_url: Option<String>,
    /// Access-token lifetime in seconds (default 300).
    #[arg(long)]
    pub(crate) access_token_ttl_secs: Option<u64>,
    /// Authorization-code lifetime in seconds (default 60).
    #[arg(long)]
    pub(crate) code_ttl_secs: Option<u64>,
    /// A grant lapses after this many seconds without a refresh (default 30 days).
    #[arg(long)]
    pub(crate) grant_idle_ttl_secs: Option<u64>,
    /// How long after a refresh token was spent presenting it again still
    /// counts as the client's own process and gets the current token, in
    /// seconds (default 600; 0: strict rotation, every spent token revokes
    /// its grant). See docs/clients.md.
    #[arg(long)]
    pub(crate) refresh_reuse_grace_secs: Option<u64>,
    /// Clock-skew leeway of JWT checks in seconds (default 5).
    #[arg(long)]
    pub(crate) jwt_leeway_secs: Option<u64>,
    /// Browser session lifetime in seconds.
    #[arg(long, default_value_t = 12 * 3600)]
    pub(crate) session_ttl_secs: u64,
    /// How the site's access tokens are signed: `hs256` (only this server
    /// checks them), or `eddsa`/`es256` (any service holding the key set
    /// published at `/.well-known/jwks.json` checks them).
    #[arg(long, value_enum, default_value_t = TokenAlg::Hs256)]
    pub(crate) access_token_alg: TokenAlg,
    /// Start even when the key file (`<db>.keys`) is readable or writable
    /// by its group or other users (otherwise `serve` refuses: `chmod 600`
    /// it).
    #[arg(long)]
    pub(crate) allow_insecure_key_file: bool,
    /// DEVELOPMENT ONLY, for tests: also accept client ID metadata documents
    /// served over plain http from a loopback address (`127.0.0.1`, `::1` or
    /// `localhost`, any port). Never use it in production: it lets anything
    /// on this machine act as a client's document host.
    #[arg(long)]
    pub(crate) dev_loopback_client_documents: bool,
    /// `execute` rate limit per grant: milliseconds between calls at the
    /// sustained rate (default 100; 0 switches the limit off). A refused
    /// call answers `RATE_LIMITED` with `retryAfterMs`.
    #[arg(long)]
    pub(crate) execute_rate_interval_ms: Option<u64>,
    /// `execute` calls a grant may make back to back from rest (default 32).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) execute_rate_burst: Option<u32>,
    /// Connection limits and timeouts.
    #[command(flatten)]
    pub(crate) limits: ConnLimits,
    /// Downstream MCP servers exposed through this one (the gateway).
    #[command(flatten)]
    pub(crate) gateway: GatewayArgs,
    /// The MCP Apps host: the sandbox origin App Views run in.
    #[command(flatten)]
    pub(crate) apps: AppsArgs,
}

/// The MCP Apps host's sandbox: a listener of its own, on an origin that is
/// not the server's, serving only the proxy page App Views are nested in
/// (no cookie, no credential, no API). See docs/server.md, "MCP Apps".
#[derive(Clone, Debug, Args)]
pub(crate) struct AppsArgs {
    /// Address the sandbox listens on (default `127.0.0.1:0`: loopback, a
    /// free port). A non-loopback address needs `--sandbox-public-url`.
    /// The sandbox runs only with `--source`s (Apps come from sources);
    /// without either flag, a server whose configuration leaves no safe
    /// default (a public URL off loopback) runs without Apps and says so.
    #[arg(long)]
    pub(crate) sandbox_addr: Option<SocketAddr>,
    /// The origin browsers reach the sandbox at (scheme, host and port, no
    /// path): another origin than `--public-url`, best another host name
    /// (browsers share cookies across the ports of one host), https unless
    /// both are on loopback. Default, for a loopback listener and server
    /// only: `http://localhost:<port>` (the bound port), or
    /// `http://<addr>:<port>` when the server is on `localhost`: another
    /// host name than the server's, so its cookies never reach the sandbox.
    /// The start is refused when the two would be one origin.
    #[arg(long)]
    pub(crate) sandbox_public_url: Option<String>,
}

/// The resource gateway: downstream MCP servers ("sources") whose tools and
/// resources the MCP endpoint exposes under Portcullis's authorization.
#[derive(Clone, Debug, Default, Args)]
pub(crate) struct GatewayArgs {
    /// A downstream MCP server, repeatable: `NAME=URL` (Streamable HTTP,
    /// e.g. `docs=http://127.0.0.1:3001/mcp`) or `NAME=cmd:PROGRAM ARGS…`
    /// (a local command speaking MCP over stdio, arguments split on
    /// spaces). NAME is `[a-z0-9-]`, at most 63 characters. Tool names are
    /// never changed: two sources (or a source and a built-in tool) with
    /// the same tool name are refused at start, and a name a source claims
    /// later (connecting late, or listing anew) that another owner has is
    /// refused and logged; a name never moves to another source.
    #[arg(long = "source", value_name = "NAME=URL|NAME=cmd:COMMAND")]
    pub(crate) sources: Vec<String>,
    /// A JSON file of more sources: `{"NAME": {"url": "http://…"}}` or
    /// `{"NAME": {"command": ["program", "arg", …], "env": {"K": "V"}}}`.
    #[arg(long = "sources", value_name = "FILE")]
    pub(crate) sources_file: Option<PathBuf>,
    /// Seconds a source has to connect and open its session (`server/discover`
    /// at 2026-07-28, `initialize` for an older source) at its first
    /// attempt; each failed attempt doubles it for the next, up to eight
    /// times this (a slow start gets there in the end).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub(crate) source_connect_timeout_secs: u64,
    /// Seconds one call to a source may take (a tool call, a resource read,
    /// a listing); over it the call fails (a tool call is then recorded as
    /// failed: it may have run).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub(crate) source_call_timeout_secs: u64,
    /// Largest answer a source may send, in bytes (one JSON response, SSE
    /// event or stdio line); a larger one fails the call.
    #[arg(long, default_value_t = 4 * 1024 * 1024, value_parser = clap::value_parser!(u64).range(1024..=256 * 1024 * 1024))]
    pub(crate) source_max_response_bytes: u64,
    /// Calls in flight to one source at once; more wait (within their
    /// timeout) for a free slot.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub(crate) source_max_concurrent: u32,
}

/// How long a client may take and how many may be connected: what keeps
/// slow or idle connections from holding the server's sockets.
#[derive(Clone, Copy, Debug, Args)]
pub(crate) struct ConnLimits {
    /// Seconds a client has to send a whole request head, counted from the
    /// moment the server waits for it: when the connection opens, and after
    /// each response on a kept-alive connection (so it is also the
    /// keep-alive idle timeout). The connection is closed when it runs out.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) header_timeout_secs: u64,
    /// Seconds a request body may go without sending data before the
    /// request fails.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) body_timeout_secs: u64,
    /// Seconds a request may take from its head to its response head, body
    /// read included; over it, `408`. At least 30 (the tab channel's
    /// long-polls last 25 s).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(30..=3600))]
    pub(crate) request_timeout_secs: u64,
    /// Most connections open at once. At the cap a new connection replaces
    /// the oldest idle one (no request in flight: a half-sent head, or
    /// kept alive between requests); when every one is busy, new ones wait
    /// until one closes. Lowered at start to what the process's open-file
    /// limit allows.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_connections: u32,
}

/// `portcullis grants …`.
#[derive(Debug, Subcommand)]
pub(crate) enum GrantsAction {
    /// List the site's grants (or one user's), one JSON object per line.
    List {
        /// Only this user's grants.
        #[arg(long)]
        subject: Option<String>,
    },
    /// Revoke one grant by id, every grant of a user, or every grant of the site.
    Revoke {
        /// The grant id (base64url: it may begin with `-`).
        #[arg(
            required_unless_present_any = ["subject", "all"],
            conflicts_with_all = ["subject", "all"],
            allow_hyphen_values = true
        )]
        id: Option<String>,
        /// Every grant of this user.
        #[arg(long, conflicts_with = "all")]
        subject: Option<String>,
        /// Every grant of the site (O(1), the resource URL stays).
        #[arg(long)]
        all: bool,
    },
}

/// `portcullis site …`.
#[derive(Clone, Copy, Debug, Subcommand)]
pub(crate) enum SiteAction {
    /// Show the site.
    Show,
    /// Switch external agents off: authorization, token and MCP requests
    /// answer 503; grants are kept.
    Disable,
    /// Switch external agents back on; existing grants work again.
    Enable,
    /// The emergency path: a new public key (new MCP URL) and every grant
    /// revoked, so every agent must be connected again. Routine signing-key
    /// rotation, which logs nobody out, is `keys rotate`.
    RotateKey,
}

/// A signing algorithm of access tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TokenAlg {
    /// HMAC-SHA256: only a holder of the secret checks the tokens.
    Hs256,
    /// Ed25519 (RFC 8037): anyone with the published key set checks them.
    Eddsa,
    /// ECDSA P-256: the same, for verifiers without Ed25519.
    Es256,
}

impl TokenAlg {
    /// The core's algorithm.
    pub(crate) fn algorithm(self) -> portcullis_core::jwt::Algorithm {
        use portcullis_core::jwt::Algorithm;
        match self {
            Self::Hs256 => Algorithm::Hs256,
            Self::Eddsa => Algorithm::EdDsa,
            Self::Es256 => Algorithm::Es256,
        }
    }
}

/// `portcullis keys …`.
#[derive(Debug, Subcommand)]
pub(crate) enum KeysAction {
    /// The keys, without their secrets: kid, algorithm, from when each
    /// signs, when it retires.
    List,
    /// Routine rotation, which logs nobody out: a new key of `--alg`,
    /// published in the key set at once and signing after
    /// `--publish-for-secs` (so resource servers have fetched it); the
    /// keys it replaces retire `--retire-after-secs` later, once every
    /// token they signed has expired. A new HS256 key signs at once, and
    /// the old ones keep verifying (they also check refresh tokens).
    Rotate {
        /// The algorithm whose key is replaced.
        #[arg(long, value_enum)]
        alg: TokenAlg,
        /// Seconds the new key is published before it signs (default
        /// 3600; at least twice the key set's cache lifetime, 300).
        #[arg(long, default_value_t = 3600)]
        publish_for_secs: u64,
        /// Seconds after the new key starts signing that the old ones
        /// retire: longer than the access-token lifetime and the leeway
        /// (default 600).
        #[arg(long, default_value_t = 600)]
        retire_after_secs: u64,
    },
    /// Retires one key at once: every token it signed stops verifying
    /// (for an HS256 key also the refresh tokens, codes and registered
    /// clients it authenticated). Not the routine path (`rotate`); the
    /// emergency path that revokes every grant is `site rotate-key`.
    Retire {
        /// The key's `kid` (see `keys list`).
        kid: String,
    },
}

/// `portcullis activity …`.
#[derive(Debug, Subcommand)]
pub(crate) enum ActivityAction {
    /// Every entry of the demo site's record in time order, one JSON
    /// object per line (the stable schema of docs/server.md, "The activity
    /// record").
    Export {
        /// From this time: `2026-12-06` or `2026-12-06T07:30:00Z` (UTC).
        #[arg(long)]
        since: Option<String>,
        /// Before this time, in the same form.
        #[arg(long)]
        until: Option<String>,
        /// Only this user's entries.
        #[arg(long)]
        user: Option<String>,
        /// Only this client's entries (its `client_id`).
        #[arg(long)]
        client: Option<String>,
    },
}

/// `portcullis tokens …`.
#[derive(Debug, Subcommand)]
pub(crate) enum TokensAction {
    /// Mint an agent token; prints it once.
    Mint {
        /// The user it acts for.
        #[arg(long)]
        subject: String,
        /// Space-separated scopes.
        #[arg(long, default_value = "skills:read")]
        scope: String,
        /// Lifetime in seconds (at most 365 days).
        #[arg(long, default_value_t = 30 * 86_400)]
        ttl_secs: u64,
        /// A label for listings.
        #[arg(long)]
        label: Option<String>,
        /// The user's organisation domain.
        #[arg(long)]
        org_domain: Option<String>,
    },
    /// List a user's agent tokens, one JSON object per line.
    List {
        /// The user.
        #[arg(long)]
        subject: String,
    },
    /// Revoke an agent token by its `jti`.
    Revoke {
        /// The token id (base64url: it may begin with `-`).
        #[arg(allow_hyphen_values = true)]
        jti: String,
    },
}

/// `portcullis token …`.
#[derive(Debug, Subcommand)]
pub(crate) enum TokenAction {
    /// Decode a JWT and verify it against the key file beside the database.
    Inspect {
        /// The database: its key file is `--key-file`, or `<db>.keys`
        /// beside a redb file.
        #[command(flatten)]
        db: DbArgs,
        /// Also require this audience.
        #[arg(long)]
        aud: Option<String>,
        /// Also require this issuer.
        #[arg(long)]
        iss: Option<String>,
        /// A file holding the token, or `-` for stdin (the default). Never on
        /// the command line, where `ps` and shell history show it.
        #[arg(long, default_value = "-")]
        token_file: PathBuf,
        /// Refused: a token on the command line (see `--token-file`).
        #[arg(hide = true)]
        jwt: Option<String>,
    },
    /// Print the credential a resource server presents at `POST
    /// /introspect` (RFC 7662, HTTP Basic): `client_id` and
    /// `client_secret`, derived from the key file (nothing is stored, no
    /// database is opened, so it works while the server runs). The same
    /// name gives the same credential until the HS256 key changes;
    /// retiring the key that minted it revokes it.
    IntrospectionCredential {
        /// The database: its key file is `--key-file`, or `<db>.keys`
        /// beside a redb file.
        #[command(flatten)]
        db: DbArgs,
        /// The resource server's name (its `client_id`): 1 to 64
        /// characters of `A-Z a-z 0-9 - _ .`.
        #[arg(long)]
        name: String,
    },
}

/// `portcullis check …`.
#[derive(Debug, Subcommand)]
pub(crate) enum CheckGuard {
    /// The open-redirect guard (`SafePath`): is each input a safe same-origin
    /// redirect target?
    Redirect {
        /// The origin accepted paths are resolved against.
        #[arg(long)]
        origin: String,
    },
    /// The external-link guard (`ExternalLink`).
    Link {
        /// The host application's origin.
        #[arg(long)]
        host_origin: String,
        /// The sandbox origin app frames come from.
        #[arg(long)]
        sandbox_origin: String,
    },
    /// HS256 JWT verification: signature with the key, then the claims.
    Jwt {
        /// A file holding the key, base64url without padding (surrounding
        /// whitespace ignored). `-` reads it from the first line of stdin;
        /// the tokens follow. Never on the command line, where `ps` and
        /// shell history show it.
        #[arg(long)]
        key_file: Option<PathBuf>,
        /// Refused: a key on the command line (see `--key-file`).
        #[arg(long, hide = true)]
        key_b64url: Option<String>,
        /// Require this audience (otherwise the audience is not checked).
        #[arg(long)]
        aud: Option<String>,
        /// Require this issuer.
        #[arg(long)]
        iss: Option<String>,
        /// The time to check against, seconds since the epoch (default now).
        #[arg(long)]
        now: Option<u64>,
        /// The expected `typ`: `at+jwt` (access token) or the agent-token type.
        #[arg(long, default_value = "at+jwt")]
        typ: String,
    },
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::{Cli, Command, GrantsAction, TokenAction, TokensAction};

    /// Ids are base64url, so one in 64 begins with `-`: it is still the id,
    /// not an unknown flag.
    #[test]
    fn an_id_that_begins_with_a_hyphen_is_an_id() {
        let cli = Cli::try_parse_from(["portcullis", "grants", "revoke", "-7qXsM2j7zpz78k1kspcyA"])
            .expect("parsed");
        let Command::Grants {
            action: GrantsAction::Revoke { id, .. },
            ..
        } = cli.command
        else {
            panic!("not grants revoke");
        };
        assert_eq!(id.as_deref(), Some("-7qXsM2j7zpz78k1kspcyA"));
        let cli = Cli::try_parse_from(["portcullis", "tokens", "revoke", "-Ab3"]).expect("parsed");
        let Command::Tokens {
            action: TokensAction::Revoke { jti },
            ..
        } = cli.command
        else {
            panic!("not tokens revoke");
        };
        assert_eq!(jti, "-Ab3");
        // A real flag is still one.
        assert!(Cli::try_parse_from(["portcullis", "grants", "revoke", "--all"]).is_ok());
    }

    #[test]
    fn an_introspection_credential_is_asked_for_by_name() {
        let cli = Cli::try_parse_from([
            "portcullis",
            "token",
            "introspection-credential",
            "--name",
            "billing-api",
        ])
        .expect("parsed");
        let Command::Token {
            action: TokenAction::IntrospectionCredential { name, .. },
        } = cli.command
        else {
            panic!("not token introspection-credential");
        };
        assert_eq!(name, "billing-api");
        assert!(
            Cli::try_parse_from(["portcullis", "token", "introspection-credential"]).is_err(),
            "the name is required"
        );
    }
}
