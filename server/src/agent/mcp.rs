//! The agent's MCP calls: JSON-RPC over rmcp's Streamable HTTP client
//! transport (one POST per call, `reqwest` underneath), and the one log
//! line per call the external-agent client document asks for.
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

use axum::http::{HeaderName, HeaderValue};
use portcullis_core::agent_loop::Answer;
use rmcp::model::{ClientJsonRpcMessage, ProtocolVersion};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient as _, StreamableHttpError, StreamableHttpPostResponse,
};
use serde_json::{Value, json};

use super::{AgentError, Secret};

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
    /// A JSON-RPC `error` (the server refused the call itself).
    RpcError {
        /// Its code.
        code: i64,
        /// Its message.
        message: String,
    },
}

/// An MCP client of one URL.
#[derive(Debug)]
pub(crate) struct Mcp {
    http: reqwest::Client,
    url: Arc<str>,
    protocol: Option<String>,
    next_id: u64,
}

impl Mcp {
    /// A client of `url` (no redirects: a bearer is never forwarded).
    pub(crate) fn new(url: &str) -> Result<Self, AgentError> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(CALL_TIMEOUT)
            .build()
            .map_err(|e| AgentError::Transport(format!("building the HTTP client: {e}")))?;
        Ok(Self {
            http,
            url: Arc::from(url),
            protocol: None,
            next_id: 1,
        })
    }

    /// The negotiated protocol version, once initialized.
    pub(crate) fn protocol(&self) -> &str {
        self.protocol.as_deref().unwrap_or("-")
    }

    /// `initialize` then `notifications/initialized` (MCP lifecycle): learns
    /// the server's protocol version, sent on every later call.
    pub(crate) async fn initialize(&mut self, token: &Secret) -> Result<Reply, AgentError> {
        let params = json!({
            "protocolVersion": ProtocolVersion::LATEST,
            "capabilities": {},
            "clientInfo": {"name": "portcullis-agent", "version": env!("CARGO_PKG_VERSION")},
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
                    self.headers(),
                )
                .await;
        }
        Ok(reply)
    }

    /// `tools/call` of `name`. `request_id` (the ledger's id, for
    /// `execute`) and `capability` go into the log line.
    pub(crate) async fn call_tool(
        &mut self,
        token: &Secret,
        name: &str,
        arguments: Value,
        capability: &str,
        request_id: Option<&str>,
    ) -> Result<Reply, AgentError> {
        let params = json!({"name": name, "arguments": arguments});
        self.request(token, "tools/call", params, capability, request_id)
            .await
    }

    fn headers(&self) -> HashMap<HeaderName, HeaderValue> {
        let mut h = HashMap::new();
        if let Some(v) = self
            .protocol
            .as_deref()
            .and_then(|p| HeaderValue::from_str(p).ok())
        {
            h.insert(HeaderName::from_static("mcp-protocol-version"), v);
        }
        h
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
                self.headers(),
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

/// The outcome word of the log line: a status or a stable code, never the
/// content.
pub(crate) fn outcome(reply: &Result<Reply, AgentError>) -> String {
    match reply {
        Ok(Reply::Result(r)) => {
            let body = r.get("structuredContent").unwrap_or(r);
            let ok = body.get("ok").and_then(Value::as_bool);
            let code = body
                .pointer("/error/code")
                .or_else(|| body.pointer("/result/error/code"))
                .and_then(Value::as_str);
            let status = body.get("status").and_then(Value::as_str);
            match (ok, status, code) {
                (_, Some(s), Some(c)) => format!("{s}:{c}"),
                (_, Some(s), None) => s.to_owned(),
                (_, None, Some(c)) => c.to_owned(),
                _ if r.get("isError").and_then(Value::as_bool) == Some(true) => "error".to_owned(),
                _ => "ok".to_owned(),
            }
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '-'))
            .take(80)
            .collect()
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
            Ok(Reply::RpcError { code, message })
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
    }
}
