//! `portcullis`: the reference server and admin CLI of Portcullis.
//!
//! A thin adapter: axum and tokio for HTTP, the redb or PostgreSQL store for state, and
//! the policy core for every decision. See `portcullis --help`.
//! `portcullis agent` is the `portcullis-agent` crate, dispatched to as is.

mod admin;
mod check;
mod cli;
mod clock;
mod db;
mod input;
mod keys;
mod notify;
mod pages;
mod serve;
mod session;
mod session_file;
mod setup;

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser as _;
use tracing_subscriber::EnvFilter;

use crate::cli::{Cli, Command};

/// mimalloc, not the C library's allocator: a request allocates and frees
/// dozens of small buffers (headers, body, JSON, the response) from two
/// runtime threads, and glibc's arenas spent about a seventh of the
/// server's CPU on them. Measured with the `ping_throughput` test: the
/// server's CPU per request fell from about 30 to 16 µs on the metadata
/// endpoint and from about 45 to 24 µs on an authorized MCP `ping`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // rmcp logs whole JSON-RPC messages (tool arguments and results: user
    // data) at debug level, and the client's whole `initialize` parameters
    // three times per request at info: it is held at warn whatever
    // `RUST_LOG` says. The one INFO line per request is `serve::trace`'s.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info"))
        .add_directive(
            "rmcp=warn"
                .parse()
                .unwrap_or_else(|_| unreachable!("a valid directive")),
        );
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    match cli.log_format {
        cli::LogFormat::Text => logs.init(),
        cli::LogFormat::Json => logs.json().flatten_event(true).init(),
    }
    let mut out = std::io::stdout().lock();
    let result = match cli.command {
        Command::Serve(mut args) => {
            drop(out);
            match args.db.clone().resolved() {
                Ok(db) => {
                    args.db = db;
                    serve_blocking(*args)
                }
                Err(e) => Err(e),
            }
        }
        Command::Grants { db, action } => db
            .resolved()
            .and_then(|db| admin::grants(&db, action, &mut out)),
        Command::Site { db, action } => db
            .resolved()
            .and_then(|db| admin::site(&db, action, &mut out)),
        Command::Activity { db, action } => db
            .resolved()
            .and_then(|db| admin::activity(&db, action, &mut out)),
        Command::Keys { db, action } => db
            .resolved()
            .and_then(|db| admin::keys(&db, action, &mut out)),
        Command::Tokens { db, action } => db
            .resolved()
            .and_then(|db| admin::tokens(&db, action, &mut out)),
        Command::Token { action } => admin::token(action, std::io::stdin().lock(), &mut out),
        Command::Check { guard } => check::run(guard, std::io::stdin().lock(), &mut out),
        Command::Agent(args) => {
            drop(out);
            portcullis_agent::run_blocking(args).map_err(|e| format!("agent: {e}"))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "portcullis: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve_blocking(args: cli::ServeArgs) -> Result<(), String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))?
        .block_on(serve::run(args))
}
