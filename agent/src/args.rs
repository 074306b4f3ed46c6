//! The arguments of `portcullis agent` ([`AgentArgs`]), parsed with clap:
//! the server's command line embeds them as its `agent` subcommand, and
//! another binary can do the same (`#[command(flatten)]` or a subcommand
//! variant) or build them directly.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// The arguments of `portcullis agent`: the MCP URL, where the session is
/// kept, what the agent declares, and what to do ([`AgentAction`]). Each
/// field's documentation is its `--help` text.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The MCP URL (as `portcullis serve` prints it).
    #[arg(long)]
    pub url: String,
    /// Where the agent keeps its client registration and tokens: created
    /// with mode 0600; refused when its group or other users can read it.
    /// Default `$XDG_CONFIG_HOME/portcullis/agent.json` (or
    /// `~/.config/portcullis/agent.json`).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Also open the consent URL and each approval page in the default
    /// browser (`xdg-open`); they are always printed.
    #[arg(long)]
    pub open: bool,
    /// The newest MCP revision the agent speaks. `2026-07-28`: discovered
    /// with `server/discover`, declaring URL elicitation and the tasks
    /// extension on every request (a wait for approval is a multi
    /// round-trip request, a run in progress a task); an older server is
    /// spoken to with `initialize` instead. `2025-11-25`: URL elicitation
    /// declared at `initialize` (a wait for approval is the error -32042).
    /// `2025-06-18`: neither (the `approval_pending` JSON).
    #[arg(long, value_enum, default_value_t = Revision::V2026_07_28)]
    pub protocol_version: Revision,
    /// Do not declare the tasks extension (a run still in progress is then
    /// resumed by calling again rather than followed as a task).
    #[arg(long)]
    pub no_tasks: bool,
    /// Seconds to wait for the browser's redirect after printing the
    /// consent URL.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub consent_timeout_secs: u64,
    /// The scopes to ask for, space-separated.
    #[arg(long, default_value = "skills:read skills:write")]
    pub scope: String,
    /// What to do.
    #[command(subcommand)]
    pub action: AgentAction,
}

/// An MCP protocol revision the agent can speak, oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Revision {
    /// 2025-06-18: `initialize`, no URL elicitation.
    #[value(name = "2025-06-18")]
    V2025_06_18,
    /// 2025-11-25: `initialize` with URL elicitation.
    #[value(name = "2025-11-25")]
    V2025_11_25,
    /// 2026-07-28: per-request metadata, multi round-trip requests, tasks.
    #[value(name = "2026-07-28")]
    V2026_07_28,
}

impl Revision {
    /// Its date, as the protocol names it (`2026-07-28`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V2025_06_18 => "2025-06-18",
            Self::V2025_11_25 => "2025-11-25",
            Self::V2026_07_28 => "2026-07-28",
        }
    }
}

/// What `portcullis agent` does once signed in: `describe`, `search` or
/// `run`.
#[derive(Debug, Subcommand)]
pub enum AgentAction {
    /// Describe every skill (name, effect, input schema), or one.
    Describe {
        /// Only this skill.
        name: Option<String>,
    },
    /// Search the skills (name, effect, description); empty: all.
    Search {
        /// The query.
        #[arg(default_value = "")]
        query: String,
    },
    /// Run one `execute` through approval to its result. `code` is the
    /// server's program, e.g. `[{"skill":"create_note","args":{...}}]`.
    Run {
        /// The code to run.
        code: String,
        /// Give up after waiting this many seconds in total (approval,
        /// rate limits, retries).
        #[arg(long, default_value_t = 900, value_parser = clap::value_parser!(u64).range(1..=86_400))]
        max_wait_secs: u64,
    },
}
