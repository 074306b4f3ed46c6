//! What a host configures: its sources ([`SourceSpec`], parsed from the
//! `NAME=URL` / `NAME=cmd:COMMAND` syntax or a sources file) and the bounds
//! every source gets ([`Config`]). Command-line parsing is the host's; this
//! module only reads the texts it hands over.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use portcullis_core::gateway::{SourceId, SourceIdError};
use serde::Deserialize;

/// Where a source is.
#[derive(Clone, PartialEq, Eq)]
pub enum Target {
    /// A Streamable HTTP endpoint (`http` or `https`).
    Http(String),
    /// A local command speaking MCP over stdio.
    Command {
        /// Program and arguments.
        argv: Vec<String>,
        /// Extra environment variables (their values are never printed:
        /// they often carry the source's own credentials).
        env: BTreeMap<String, String>,
    },
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // A URL may carry a password or a token in its user info.
            Self::Http(url) => {
                let shown = url::Url::parse(url).map_or_else(
                    |_| "<unparsable>".to_owned(),
                    |mut u| {
                        if u.password().is_some() {
                            let _ = u.set_password(Some("<redacted>"));
                        }
                        u.to_string()
                    },
                );
                f.debug_tuple("Http").field(&shown).finish()
            }
            Self::Command { argv, env } => f
                .debug_struct("Command")
                .field("argv", argv)
                .field("env", &env.keys().collect::<Vec<_>>())
                .finish(),
        }
    }
}

/// One configured source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceSpec {
    /// Its id (the name in gateway URIs and messages).
    pub id: SourceId,
    /// Where it is.
    pub target: Target,
}

/// Why a source's configuration was refused. [`ConfigError::code`] is
/// stable; the message ([`fmt::Display`]) is for people.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// `NAME=URL` or `NAME=cmd:COMMAND` was expected (the text given).
    Syntax(String),
    /// The source's name is not a source id (`[a-z0-9-]`, at most 63).
    Name {
        /// The name given.
        name: String,
        /// Why it is not one.
        error: SourceIdError,
    },
    /// The URL does not parse.
    Url {
        /// The source.
        name: String,
        /// The URL given.
        url: String,
        /// The parser's reason.
        error: url::ParseError,
    },
    /// The URL is not `http` or `https`.
    NotHttp(String),
    /// `cmd:` with no program (the source named).
    EmptyCommand(String),
    /// The sources file is not the JSON it should be (the parser's
    /// message).
    File(String),
    /// A file entry gives neither or both of `url` and `command`, an empty
    /// `command`, or `env` with a `url` (the source named).
    Entry(String),
    /// Two sources have one name.
    Twice(SourceId),
    /// [`Config::public_url`] is not an `http` or `https` URL (the text
    /// given): without the host's origin, a source's URL elicitation that
    /// sends a person to a page of the host could not be refused.
    PublicUrl(String),
}

impl ConfigError {
    /// A stable code for the refusal.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::Syntax(_) => "syntax",
            Self::Name { .. } => "source_name",
            Self::Url { .. } => "url",
            Self::NotHttp(_) => "not_http",
            Self::EmptyCommand(_) => "empty_command",
            Self::File(_) => "sources_file",
            Self::Entry(_) => "sources_file_entry",
            Self::Twice(_) => "source_twice",
            Self::PublicUrl(_) => "public_url",
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Syntax(text) => {
                write!(
                    f,
                    "--source {text:?}: expected NAME=URL or NAME=cmd:COMMAND"
                )
            }
            Self::Name { name, error } => write!(f, "source name {name:?}: {error}"),
            Self::Url { name, url, error } => write!(f, "source {name}: {url:?}: {error}"),
            Self::NotHttp(name) => write!(f, "source {name}: the URL must be http or https"),
            Self::EmptyCommand(name) => write!(f, "source {name}: empty command"),
            Self::File(e) => write!(f, "sources file: {e}"),
            Self::Entry(name) => write!(
                f,
                "source {name}: give either \"url\" or a non-empty \"command\" (with an optional \"env\")"
            ),
            Self::Twice(id) => write!(f, "source {id} is configured twice"),
            Self::PublicUrl(url) => write!(
                f,
                "the gateway's public URL {url:?} is not an http or https URL"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// One entry of a sources file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    url: Option<String>,
    command: Option<Vec<String>>,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

fn source_id(name: &str) -> Result<SourceId, ConfigError> {
    SourceId::new(name).map_err(|error| ConfigError::Name {
        name: name.to_owned(),
        error,
    })
}

fn http_target(name: &str, url: &str) -> Result<Target, ConfigError> {
    let parsed = url::Url::parse(url).map_err(|error| ConfigError::Url {
        name: name.to_owned(),
        url: url.to_owned(),
        error,
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(ConfigError::NotHttp(name.to_owned()));
    }
    Ok(Target::Http(url.to_owned()))
}

impl SourceSpec {
    /// Parses one `NAME=URL` (Streamable HTTP) or `NAME=cmd:PROGRAM ARGS…`
    /// (a command over stdio, its arguments split on spaces).
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let (name, rest) = text
            .split_once('=')
            .ok_or_else(|| ConfigError::Syntax(text.to_owned()))?;
        let id = source_id(name)?;
        let target = match rest.strip_prefix("cmd:") {
            Some(cmd) => {
                let argv: Vec<String> = cmd.split_whitespace().map(str::to_owned).collect();
                if argv.is_empty() {
                    return Err(ConfigError::EmptyCommand(name.to_owned()));
                }
                Target::Command {
                    argv,
                    env: BTreeMap::new(),
                }
            }
            None => http_target(name, rest)?,
        };
        Ok(Self { id, target })
    }

    /// Parses a sources file's text, `{"NAME": {"url": "http://…"}}` or
    /// `{"NAME": {"command": ["program", "arg", …], "env": {"K": "V"}}}`:
    /// its sources in name order.
    pub fn parse_file(text: &str) -> Result<Vec<Self>, ConfigError> {
        let entries: BTreeMap<String, FileEntry> =
            serde_json::from_str(text).map_err(|e| ConfigError::File(e.to_string()))?;
        entries
            .into_iter()
            .map(|(name, e)| {
                let id = source_id(&name)?;
                let target = match (e.url, e.command) {
                    (Some(url), None) if e.env.is_empty() => http_target(&name, &url)?,
                    (None, Some(argv)) if !argv.is_empty() => Target::Command { argv, env: e.env },
                    _ => return Err(ConfigError::Entry(name)),
                };
                Ok(Self { id, target })
            })
            .collect()
    }
}

/// The gateway's configuration: its sources, in order, and the bounds
/// every source gets. [`Config::default`] has no sources and the reference
/// server's default bounds.
#[derive(Clone, Debug)]
pub struct Config {
    /// The sources, in configuration order (which decides who owns a tool
    /// name two sources list at the start: neither, the start is refused).
    pub sources: Vec<SourceSpec>,
    /// How long a source has to connect and open its session at its first
    /// attempt; each failed attempt doubles it for the next, up to eight
    /// times this. At least one second is used.
    pub connect_timeout: Duration,
    /// How long one call to a source may take (a tool call, a read, a
    /// listing page). At least one second is used.
    pub call_timeout: Duration,
    /// The largest answer a source may send, in bytes (one JSON body, SSE
    /// event or stdio line). At least 1024 is used.
    pub max_response_bytes: usize,
    /// Calls in flight to one source at once. At least one is used.
    pub max_concurrent: usize,
    /// The host's public origin: a source may never send a person to a
    /// page there (a URL elicitation passed on to an agent). Required:
    /// [`Gateway::start`](crate::Gateway::start) refuses a configuration
    /// whose public URL is not `http` or `https` ([`ConfigError::PublicUrl`]).
    pub public_url: String,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            sources: Vec::new(),
            connect_timeout: Duration::from_secs(10),
            call_timeout: Duration::from_secs(30),
            max_response_bytes: 4 * 1024 * 1024,
            max_concurrent: 16,
            public_url: String::new(),
        }
    }
}

impl Config {
    /// The host's origin, from [`Config::public_url`]: refused unless it
    /// is an `http` or `https` URL with a host.
    pub(crate) fn host_origin(&self) -> Result<url::Origin, ConfigError> {
        url::Url::parse(&self.public_url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .map(|u| u.origin())
            .ok_or_else(|| ConfigError::PublicUrl(self.public_url.clone()))
    }

    /// The sources, checked: a name used twice is refused.
    pub(crate) fn checked_sources(&self) -> Result<Vec<SourceSpec>, ConfigError> {
        let mut seen = BTreeSet::new();
        for s in &self.sources {
            if !seen.insert(s.id.as_str()) {
                return Err(ConfigError::Twice(s.id.clone()));
            }
        }
        Ok(self.sources.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_without_the_hosts_origin_is_refused() {
        for url in ["", "notes.example", "ftp://notes.example", "file:///tmp"] {
            let config = Config {
                public_url: url.into(),
                ..Config::default()
            };
            let refused = config.host_origin().unwrap_err();
            assert_eq!(refused.code(), "public_url", "{url:?}");
        }
        let config = Config {
            public_url: "https://notes.example".into(),
            ..Config::default()
        };
        assert!(config.host_origin().is_ok());
    }

    #[test]
    fn parses_sources() {
        let s = SourceSpec::parse("docs=http://127.0.0.1:3001/mcp").unwrap();
        assert_eq!(s.id.as_str(), "docs");
        assert_eq!(s.target, Target::Http("http://127.0.0.1:3001/mcp".into()));
        let s = SourceSpec::parse("fs=cmd:npx -y server-fs /tmp").unwrap();
        assert!(
            matches!(&s.target, Target::Command { argv, .. } if argv == &["npx", "-y", "server-fs", "/tmp"])
        );
        for bad in [
            "docs",
            "Docs=http://x",
            "d=ftp://x",
            "d=cmd:  ",
            "=http://x",
        ] {
            assert!(SourceSpec::parse(bad).is_err(), "{bad}");
        }
        let file = r#"{"a": {"url": "https://a.example/mcp"}, "b": {"command": ["node", "s.mjs"], "env": {"K": "V"}}}"#;
        let specs = SourceSpec::parse_file(file).unwrap();
        assert_eq!(specs.len(), 2);
        assert!(matches!(&specs[1].target, Target::Command { env, .. } if env["K"] == "V"));
        assert!(SourceSpec::parse_file(r#"{"a": {"url": "http://x", "command": ["y"]}}"#).is_err());
        assert!(SourceSpec::parse_file(r#"{"a": {"uri": "http://x"}}"#).is_err());
    }

    #[test]
    fn a_name_twice_is_refused() {
        let config = Config {
            sources: vec![
                SourceSpec::parse("a=http://x/mcp").unwrap(),
                SourceSpec::parse("a=cmd:y").unwrap(),
            ],
            public_url: "https://notes.example".into(),
            ..Config::default()
        };
        let e = config.checked_sources().unwrap_err();
        assert_eq!(e.code(), "source_twice");
        assert!(e.to_string().contains("twice"));
    }

    #[test]
    fn debug_keeps_secrets_out() {
        let mut env = BTreeMap::new();
        env.insert("API_KEY".to_owned(), "sk-secret".to_owned());
        let cmd = Target::Command {
            argv: vec!["node".into()],
            env,
        };
        let shown = format!("{cmd:?}");
        assert!(
            shown.contains("API_KEY") && !shown.contains("sk-secret"),
            "{shown}"
        );
        let http = Target::Http("https://u:hunter2@a.example/mcp".into());
        let shown = format!("{http:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}
