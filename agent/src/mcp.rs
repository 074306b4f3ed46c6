//! The agent's MCP calls: JSON-RPC over rmcp's Streamable HTTP client
//! transport (one POST per call, `reqwest` underneath), and the one log
//! line per call the external-agent client document asks for.
//!
//! **Revisions.** At 2026-07-28 (the default ceiling) the agent first asks
//! `server/discover`; a server that lists 2026-07-28 gets every request
//! with its lifecycle in `_meta` (`io.modelcontextprotocol/protocolVersion`,
//! `clientInfo`, `clientCapabilities`: URL elicitation and, unless
//! `--no-tasks`, the tasks extension) and the `MCP-Protocol-Version`,
//! `Mcp-Method` and `Mcp-Name` headers. Any other answer (an older server)
//! falls back to `initialize` at 2025-11-25, which declares URL
//! elicitation; at a 2025-06-18 ceiling nothing is declared. What the agent
//! declares is what it handles: a URL is shown, never acted on.
//!
//! Each call is classified for the core's client loop: a tool result is
//! its JSON; `401`, `403 insufficient_scope` and `503` become the matching
//! [`Answer`]; a connection that failed or a `5xx` is [`Answer::Lost`] (the
//! call may have reached the server, so the loop resumes the same id).
//!
//! **The log line** (`target: portcullis::agent`, INFO): request id,
//! protocol version, capability, outcome and duration. Never a token, an
//! authorization code, tool arguments or results (user data), nor the
//! description of the surface.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use portcullis_core::agent_loop::{Answer, Retry};
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient as _, StreamableHttpError, StreamableHttpPostResponse,
};
use serde_json::{Value, json};

use super::{AgentError, Secret};
use crate::Revision;

/// The tasks extension's identifier (in `clientCapabilities.extensions`).
const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// Longest time one MCP call may take.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(90);

/// What one call returned.
#[expect(
    clippy::large_enum_variant,
    reason = "one per call, moved once into the loop; boxing would add an allocation"
)]
#[derive(Debug)]
pub(crate) enum Reply {
    /// The JSON-RPC `result`.
    Result(Value),
    /// A transport-level answer for the loop (401, 403, 503, lost).
    Transport(Answer),
    /// A JSON-RPC `error` (the server refused the call itself, or -32042).
    RpcError {
        /// Its code.
        code: i64,
        /// Its message.
        message: String,
        /// Its `data`.
        data: Option<Value>,
    },
}

/// An MCP client of one URL.
#[derive(Debug)]
pub(crate) struct Mcp {
    http: reqwest::Client,
    url: Arc<str>,
    protocol: Option<String>,
    /// The newest revision to speak.
    ceiling: Revision,
    /// Declare the tasks extension (2026-07-28).
    tasks: bool,
    /// The 2026-07-28 lifecycle: every request carries it in `_meta`.
    per_request: bool,
    next_id: u64,
}

impl Mcp {
    /// A client of `url` (no redirects: a bearer is never forwarded) that
    /// speaks at most `ceiling`, declaring tasks if `tasks`.
    pub(crate) fn new(url: &str, ceiling: Revision, tasks: bool) -> Result<Self, AgentError> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(CALL_TIMEOUT)
            .build()
            .map_err(|e| AgentError::Transport(format!("building the HTTP client: {e}")))?;
        Ok(Self {
            http,
            url: Arc::from(url),
            protocol: None,
            ceiling,
            tasks,
            per_request: false,
            next_id: 1,
        })
    }

    /// The MCP URL.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Learns the server's revision: `server/discover` at 2026-07-28 (a
    /// server that lists it is spoken to statelessly from then on), else
    /// `initialize`. A refused session is returned for the caller to sign
    /// in again; any other failure of the discovery falls back.
    pub(crate) async fn connect(&mut self, token: &Secret) -> Result<Reply, AgentError> {
        if self.ceiling >= Revision::V2026_07_28 {
            self.protocol = Some(Revision::V2026_07_28.as_str().to_owned());
            self.per_request = true;
            let reply = self
                .request(token, "server/discover", json!({}), "server/discover", None)
                .await;
            match reply {
                Ok(Reply::Result(r)) if lists(&r, Revision::V2026_07_28) => {
                    return Ok(Reply::Result(r));
                }
                Ok(Reply::Transport(
                    a @ (Answer::Unauthorized | Answer::InsufficientScope { .. }),
                )) => {
                    self.protocol = None;
                    self.per_request = false;
                    return Ok(Reply::Transport(a));
                }
                _ => {
                    self.protocol = None;
                    self.per_request = false;
                }
            }
        }
        self.initialize(token).await
    }

    /// The negotiated protocol version, once initialized.
    pub(crate) fn protocol(&self) -> &str {
        self.protocol.as_deref().unwrap_or("-")
    }

    /// `initialize` then `notifications/initialized` (MCP lifecycle): learns
    /// the server's protocol version, sent on every later call. At
    /// 2025-11-25 the agent declares URL elicitation.
    async fn initialize(&mut self, token: &Secret) -> Result<Reply, AgentError> {
        let version = self.ceiling.min(Revision::V2025_11_25);
        let capabilities = if version >= Revision::V2025_11_25 {
            json!({"elicitation": {"url": {}}})
        } else {
            json!({})
        };
        let params = json!({
            "protocolVersion": version.as_str(),
            "capabilities": capabilities,
            "clientInfo": client_info(),
        });
        let reply = self
            .request(token, "initialize", params, "initialize", None)
            .await?;
        if let Reply::Result(r) = &reply {
            self.protocol = r
                .get("protocolVersion")
                .and_then(Value::as_str)
                .map(str::to_owned);
            let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            let note: ClientJsonRpcMessage = serde_json::from_value(note)
                .map_err(|e| AgentError::Transport(format!("encoding a notification: {e}")))?;
            // A stateless server may ignore it; its answer is not needed.
            let _ = self
                .http
                .post_message(
                    Arc::clone(&self.url),
                    note,
                    None,
                    Some(token.expose().to_owned()),
                    self.headers("notifications/initialized", &Value::Null),
                )
                .await;
        }
        Ok(reply)
    }

    /// `tools/call` of `name`; with `retry`, a 2026-07-28 retry (the same
    /// arguments, the server's `requestState` and the `inputResponses`,
    /// under a fresh JSON-RPC id). `request_id` (the ledger's id, for
    /// `execute`) and `capability` go into the log line.
    pub(crate) async fn call_tool(
        &mut self,
        token: &Secret,
        name: &str,
        arguments: Value,
        capability: &str,
        request_id: Option<&str>,
        retry: Option<&Retry>,
    ) -> Result<Reply, AgentError> {
        let mut params = json!({"name": name, "arguments": arguments});
        if let Some(retry) = retry {
            if let Some(state) = &retry.state {
                params["requestState"] = json!(state);
            }
            if !retry.responses.is_empty() {
                params["inputResponses"] = Value::Object(retry.responses.clone());
            }
        }
        self.request(token, "tools/call", params, capability, request_id)
            .await
    }

    /// `tasks/get` of `task_id` (the task of request `request_id`).
    pub(crate) async fn get_task(
        &mut self,
        token: &Secret,
        task_id: &str,
        request_id: Option<&str>,
    ) -> Result<Reply, AgentError> {
        let params = json!({ "taskId": task_id });
        self.request(token, "tasks/get", params, "tasks/get", request_id)
            .await
    }

    /// The headers of a request of `method` with `params`: the revision,
    /// and at 2026-07-28 `Mcp-Method` and `Mcp-Name` (the tool or task it
    /// names).
    fn headers(&self, method: &str, params: &Value) -> HashMap<HeaderName, HeaderValue> {
        let mut h = HashMap::new();
        if let Some(v) = self
            .protocol
            .as_deref()
            .and_then(|p| HeaderValue::from_str(p).ok())
        {
            h.insert(HeaderName::from_static("mcp-protocol-version"), v);
        }
        if self.per_request {
            if let Ok(v) = HeaderValue::from_str(method) {
                h.insert(HeaderName::from_static("mcp-method"), v);
            }
            let name = ["name", "taskId", "uri"]
                .iter()
                .find_map(|k| params.get(k).and_then(Value::as_str));
            if let Some(v) = name.and_then(|n| HeaderValue::from_str(n).ok()) {
                h.insert(HeaderName::from_static("mcp-name"), v);
            }
        }
        h
    }

    /// `params` with the 2026-07-28 lifecycle in its `_meta`.
    fn with_meta(&self, mut params: Value) -> Value {
        if !self.per_request {
            return params;
        }
        let mut capabilities = json!({"elicitation": {"url": {}}});
        if self.tasks {
            capabilities["extensions"] = json!({ TASKS_EXTENSION: {} });
        }
        if let Some(object) = params.as_object_mut() {
            let meta = object
                .entry("_meta")
                .or_insert_with(|| Value::Object(serde_json::Map::new()));
            if let Some(meta) = meta.as_object_mut() {
                meta.insert(
                    "io.modelcontextprotocol/protocolVersion".into(),
                    json!(Revision::V2026_07_28.as_str()),
                );
                meta.insert("io.modelcontextprotocol/clientInfo".into(), client_info());
                meta.insert(
                    "io.modelcontextprotocol/clientCapabilities".into(),
                    capabilities,
                );
            }
        }
        params
    }

    async fn request(
        &mut self,
        token: &Secret,
        method: &str,
        params: Value,
        capability: &str,
        request_id: Option<&str>,
    ) -> Result<Reply, AgentError> {
        let id = self.next_id;
        self.next_id += 1;
        let headers = self.headers(method, &params);
        let params = self.with_meta(params);
        let message: ClientJsonRpcMessage = serde_json::from_value(
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .map_err(|e| AgentError::Transport(format!("encoding {method}: {e}")))?;
        let started = Instant::now();
        let sent = self
            .http
            .post_message(
                Arc::clone(&self.url),
                message,
                None,
                Some(token.expose().to_owned()),
                headers,
            )
            .await;
        let reply = classify(sent, id);
        let elapsed = started.elapsed();
        tracing::info!(
            target: "portcullis::agent",
            request_id = request_id.unwrap_or("-"),
            protocol_version = self.protocol(),
            capability,
            outcome = %outcome(&reply),
            duration_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
            "mcp call"
        );
        reply
    }
}

/// The agent's `clientInfo`.
fn client_info() -> Value {
    json!({"name": "portcullis-agent", "version": env!("CARGO_PKG_VERSION")})
}

/// Whether a `server/discover` result lists `revision`.
fn lists(result: &Value, revision: Revision) -> bool {
    result
        .get("supportedVersions")
        .and_then(Value::as_array)
        .is_some_and(|v| v.iter().any(|x| x.as_str() == Some(revision.as_str())))
}

/// The outcome word of the log line: a status or a stable code, never the
/// content.
pub(crate) fn outcome(reply: &Result<Reply, AgentError>) -> String {
    match reply {
        Ok(Reply::Result(r)) if r.get("taskId").is_some() => {
            let status = r.get("status").and_then(Value::as_str).unwrap_or("-");
            word(&format!("task:{status}"))
        }
        Ok(Reply::Result(r))
            if r.get("resultType").and_then(Value::as_str) == Some("input_required") =>
        {
            "input_required".to_owned()
        }
        Ok(Reply::Result(r)) => {
            let body = r.get("structuredContent").unwrap_or(r);
            let ok = body.get("ok").and_then(Value::as_bool);
            let code = body
                .pointer("/error/code")
                .or_else(|| body.pointer("/result/error/code"))
                .and_then(Value::as_str);
            let status = body.get("status").and_then(Value::as_str);
            let word_of = match (ok, status, code) {
                (_, Some(s), Some(c)) => format!("{s}:{c}"),
                (_, Some(s), None) => s.to_owned(),
                (_, None, Some(c)) => c.to_owned(),
                _ if r.get("isError").and_then(Value::as_bool) == Some(true) => "error".to_owned(),
                _ => "ok".to_owned(),
            };
            word(&word_of)
        }
        Ok(Reply::Transport(a)) => match a {
            Answer::Unauthorized => "http_401".into(),
            Answer::InsufficientScope { .. } => "http_403_insufficient_scope".into(),
            Answer::Unavailable { .. } => "http_503".into(),
            Answer::Lost => "lost".into(),
            _ => "unreadable".into(),
        },
        Ok(Reply::RpcError { code, .. }) => format!("jsonrpc_error:{code}"),
        Err(e) => e.code().to_owned(),
    }
}

/// `text` as a log word: identifier characters only, at most 80.
fn word(text: &str) -> String {
    text.chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '-'))
        .take(80)
        .collect()
}

fn classify(
    sent: Result<StreamableHttpPostResponse, StreamableHttpError<reqwest::Error>>,
    id: u64,
) -> Result<Reply, AgentError> {
    match sent {
        Ok(StreamableHttpPostResponse::Json(message, _)) => {
            let v = serde_json::to_value(&message)
                .map_err(|e| AgentError::Transport(format!("reading the answer: {e}")))?;
            if v.get("id").and_then(Value::as_u64) != Some(id) {
                return Err(AgentError::Transport(
                    "the answer names another JSON-RPC id".into(),
                ));
            }
            if let Some(result) = v.get("result") {
                return Ok(Reply::Result(result.clone()));
            }
            let code = v
                .pointer("/error/code")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let message = v
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .chars()
                .take(300)
                .collect();
            let data = v.pointer("/error/data").cloned();
            Ok(Reply::RpcError {
                code,
                message,
                data,
            })
        }
        Ok(StreamableHttpPostResponse::Sse(..)) => Err(AgentError::Transport(
            "the server answered with an event stream; this agent reads JSON answers".into(),
        )),
        Ok(_) => Err(AgentError::Transport(
            "the server accepted a request without answering it".into(),
        )),
        Err(StreamableHttpError::AuthRequired(_)) => Ok(Reply::Transport(Answer::Unauthorized)),
        Err(StreamableHttpError::InsufficientScope(e)) => Ok(Reply::Transport(
            Answer::from_http(403, Some(&e.www_authenticate_header), None)
                .unwrap_or_else(Answer::Unreadable),
        )),
        Err(StreamableHttpError::HttpStatus(e)) if e.status == 503 => {
            let retry_after_secs = e.retry_after.as_deref().and_then(|s| s.trim().parse().ok());
            Ok(Reply::Transport(Answer::Unavailable { retry_after_secs }))
        }
        // A server failure or a lost connection: the call may have run.
        Err(StreamableHttpError::HttpStatus(e)) if e.status >= 500 => {
            Ok(Reply::Transport(Answer::Lost))
        }
        Err(StreamableHttpError::Client(_) | StreamableHttpError::Io(_)) => {
            Ok(Reply::Transport(Answer::Lost))
        }
        Err(e) => Err(AgentError::Transport(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_2026_07_28_every_request_declares_what_the_agent_handles() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut mcp = Mcp::new("http://127.0.0.1:1/mcp/k", Revision::V2026_07_28, true).unwrap();
        mcp.protocol = Some("2026-07-28".into());
        mcp.per_request = true;
        let params = mcp.with_meta(json!({"name": "execute", "arguments": {}}));
        let meta = &params["_meta"];
        assert_eq!(
            meta["io.modelcontextprotocol/protocolVersion"],
            "2026-07-28"
        );
        assert_eq!(
            meta["io.modelcontextprotocol/clientInfo"]["name"],
            "portcullis-agent"
        );
        assert_eq!(
            meta["io.modelcontextprotocol/clientCapabilities"],
            json!({"elicitation": {"url": {}}, "extensions": {TASKS_EXTENSION: {}}})
        );
        let h = mcp.headers("tools/call", &params);
        assert_eq!(h[&HeaderName::from_static("mcp-method")], "tools/call");
        assert_eq!(h[&HeaderName::from_static("mcp-name")], "execute");
        assert_eq!(
            h[&HeaderName::from_static("mcp-protocol-version")],
            "2026-07-28"
        );
        let poll = mcp.headers("tasks/get", &json!({"taskId": "t-1"}));
        assert_eq!(poll[&HeaderName::from_static("mcp-name")], "t-1");

        // Without tasks: URL elicitation only.
        mcp.tasks = false;
        let params = mcp.with_meta(json!({}));
        assert_eq!(
            params["_meta"]["io.modelcontextprotocol/clientCapabilities"],
            json!({"elicitation": {"url": {}}})
        );
        // An earlier revision: no per-request lifecycle, no routing headers.
        mcp.per_request = false;
        mcp.protocol = Some("2025-11-25".into());
        assert_eq!(mcp.with_meta(json!({"a": 1})), json!({"a": 1}));
        let h = mcp.headers("tools/call", &json!({"name": "execute"}));
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn discovery_is_taken_only_when_it_lists_the_revision() {
        assert!(lists(
            &json!({"supportedVersions": ["2025-11-25", "2026-07-28"]}),
            Revision::V2026_07_28
        ));
        assert!(!lists(
            &json!({"supportedVersions": ["2025-11-25"]}),
            Revision::V2026_07_28
        ));
        assert!(!lists(&json!({}), Revision::V2026_07_28));
    }

    #[test]
    fn the_outcome_is_a_status_or_a_code_never_content() {
        let done = Ok(Reply::Result(json!({"structuredContent":
            {"ok": true, "status": "done", "result": [{"skill": "create_note", "result": {"title": "private"}}]}})));
        assert_eq!(outcome(&done), "done");
        let pending = Ok(Reply::Result(
            json!({"structuredContent": {"ok": true, "status": "approval_pending"}}),
        ));
        assert_eq!(outcome(&pending), "approval_pending");
        let limited = Ok(Reply::Result(json!({"structuredContent":
            {"ok": false, "error": {"code": "RATE_LIMITED", "retryAfterMs": 10}}})));
        assert_eq!(outcome(&limited), "RATE_LIMITED");
        let failed = Ok(Reply::Result(json!({"structuredContent":
            {"ok": true, "status": "done", "result": {"error": {"code": "NOT_FOUND"}}}})));
        assert_eq!(outcome(&failed), "done:NOT_FOUND");
        let listed = Ok(Reply::Result(
            json!({"structuredContent": {"ok": true, "skills": ["private"]}}),
        ));
        assert_eq!(outcome(&listed), "ok");
        let weird = Ok(Reply::Result(
            json!({"structuredContent": {"status": "a b\"c\nd"}}),
        ));
        assert_eq!(outcome(&weird), "abcd");
        assert_eq!(
            outcome(&Ok(Reply::Transport(Answer::Unauthorized))),
            "http_401"
        );
        let input = Ok(Reply::Result(
            json!({"resultType": "input_required", "requestState": "secret-ish"}),
        ));
        assert_eq!(outcome(&input), "input_required");
        let task = Ok(Reply::Result(
            json!({"taskId": "t", "status": "completed", "result": {"structuredContent": {"title": "private"}}}),
        ));
        assert_eq!(outcome(&task), "task:completed");
        let elicit = Ok(Reply::RpcError {
            code: -32042,
            message: "m".into(),
            data: None,
        });
        assert_eq!(outcome(&elicit), "jsonrpc_error:-32042");
    }
}
