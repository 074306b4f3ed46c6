//! The command line: `portcullis serve` and the admin subcommands, parsed
//! with clap.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

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

/// The database every command works on. Its signing keys live beside it in
/// `<db>.keys`, never in the store.
#[derive(Debug, Args)]
pub(crate) struct DbArgs {
    /// The redb database file.
    #[arg(long, global = true, default_value = "portcullis.redb")]
    pub(crate) db: PathBuf,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the HTTP server (OAuth endpoints, metadata, /mcp, consent and
    /// Agents pages, the open route).
    Serve(ServeArgs),
    /// List or revoke grants (needs the server stopped: redb allows one
    /// process at a time).
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
    /// Refresh-token retry window in seconds (default: off, a spent token
    /// revokes its grant).
    #[arg(long)]
    pub(crate) refresh_retry_window_secs: Option<u64>,
    /// Clock-skew leeway of JWT checks in seconds (default 5).
    #[arg(long)]
    pub(crate) jwt_leeway_secs: Option<u64>,
    /// Browser session lifetime in seconds.
    #[arg(long, default_value_t = 12 * 3600)]
    pub(crate) session_ttl_secs: u64,
    /// DEVELOPMENT ONLY, for tests: also accept client ID metadata documents
    /// served over plain http from a loopback address (`127.0.0.1`, `::1` or
    /// `localhost`, any port). Never use it in production: it lets anything
    /// on this machine act as a client's document host.
    #[arg(long)]
    pub(crate) dev_loopback_client_documents: bool,
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
        /// The grant id.
        #[arg(required_unless_present_any = ["subject", "all"], conflicts_with_all = ["subject", "all"])]
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
    /// The emergency path: a new public key (new MCP URL) and every grant revoked.
    RotateKey,
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
        /// The token id.
        jti: String,
    },
}

/// `portcullis token …`.
#[derive(Debug, Subcommand)]
pub(crate) enum TokenAction {
    /// Decode a JWT and verify it against the key file beside the database.
    Inspect {
        /// The database (its key file is `<db>.keys`).
        #[command(flatten)]
        db: DbArgs,
        /// Also require this audience.
        #[arg(long)]
        aud: Option<String>,
        /// Also require this issuer.
        #[arg(long)]
        iss: Option<String>,
        /// The token.
        jwt: String,
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
        /// The key, base64url without padding.
        #[arg(long)]
        key_b64url: String,
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
