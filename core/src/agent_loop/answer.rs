//! What the server answered, as the client loop reads it: a tool result
//! holding the `execute` envelope (read by [`super::envelope`]), the forms
//! a call that waits for the person takes in newer protocol revisions (see
//! [`super::input`]), and the transport-level answers that never reach a
//! tool result (401, 403 `insufficient_scope`, 503, a lost connection).
//!
//! Parsing is strict about the fields the loop acts on (a wrong type is
//! [`AnswerError`], never a guess) and ignores fields it does not know, so a
//! newer server stays readable.

use alloc::string::String;

use serde_json::Value;

use super::challenge::BearerChallenge;
use super::envelope::{AnswerError, Envelope, MAX_MESSAGE_LEN, truncated};
use super::input::{InputRequired, Task, UrlElicitationRequired, tool_envelope};
use crate::scope::ScopeSet;

/// The JSON-RPC error code of `URLElicitationRequiredError` (MCP
/// 2025-11-25, "Elicitation", URL mode).
pub const URL_ELICITATION_REQUIRED: i64 = -32042;

/// One answer to an `execute` call (or to `tasks/get` of its task), as the
/// host saw it.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// The tool result's JSON envelope.
    Envelope(Envelope),
    /// 2026-07-28: an `InputRequiredResult` (a multi round-trip request):
    /// show its URL elicitations, then call again with its state.
    InputRequired(InputRequired),
    /// 2025-11-25: the error -32042: show its URLs, then call again with
    /// the same request id.
    UrlElicitationRequired(UrlElicitationRequired),
    /// A task (`resultType: "task"`, or a `tasks/get` result): poll it.
    Task(Task),
    /// Another JSON-RPC error: the server refused the call itself.
    RpcError {
        /// Its code.
        code: i64,
        /// Its message, at most [`MAX_MESSAGE_LEN`] bytes.
        message: String,
    },
    /// `401`: the access token was refused. The host refreshes or signs in
    /// again, then reports [`super::Session`].
    Unauthorized,
    /// `403 insufficient_scope`: the call needs these scopes (RFC 6750 §3.1,
    /// MCP authorization "Scope challenge handling").
    InsufficientScope {
        /// The scope the challenge names (may be the full set needed).
        scope: ScopeSet,
    },
    /// `503`: the site is switched off for now.
    Unavailable {
        /// `Retry-After` in seconds, when the server sent one.
        retry_after_secs: Option<u32>,
    },
    /// No answer: the connection failed or timed out. The call may or may not
    /// have reached the server.
    Lost,
    /// An answer arrived that could not be read.
    Unreadable(AnswerError),
}

impl Answer {
    /// The answer to an HTTP error status with its `WWW-Authenticate` value
    /// (401 and 403), or `Retry-After` seconds (503). Other statuses are
    /// [`AnswerError::UnexpectedStatus`].
    pub fn from_http(
        status: u16,
        www_authenticate: Option<&str>,
        retry_after_secs: Option<u32>,
    ) -> Result<Self, AnswerError> {
        match status {
            401 => Ok(Self::Unauthorized),
            403 => {
                let challenge = BearerChallenge::parse(www_authenticate.unwrap_or_default())
                    .map_err(AnswerError::Challenge)?;
                if challenge.error.as_deref() != Some("insufficient_scope") {
                    return Err(AnswerError::UnexpectedStatus(status));
                }
                let scope = ScopeSet::parse(challenge.scope.as_deref().unwrap_or_default())
                    .map_err(|_| AnswerError::Malformed("scope"))?;
                if scope.is_empty() {
                    return Err(AnswerError::Malformed("scope"));
                }
                Ok(Self::InsufficientScope { scope })
            }
            503 => Ok(Self::Unavailable { retry_after_secs }),
            other => Err(AnswerError::UnexpectedStatus(other)),
        }
    }

    /// The answer a `tools/call` `result` holds: an `InputRequiredResult`,
    /// a task, or the call's result (its `execute` envelope). One that
    /// cannot be read is [`Answer::Unreadable`].
    #[must_use]
    pub fn from_tool_result(result: &Value) -> Self {
        let read = match result.get("resultType").and_then(Value::as_str) {
            Some("input_required") => InputRequired::parse(result).map(Self::InputRequired),
            Some("task") => Task::parse(result).map(Self::Task),
            None | Some("complete") => tool_envelope(result).map(Self::Envelope),
            Some(_) => Err(AnswerError::Malformed("resultType")),
        };
        read.unwrap_or_else(Self::Unreadable)
    }

    /// The answer a `tasks/get` `result` holds.
    #[must_use]
    pub fn from_task_result(result: &Value) -> Self {
        Task::parse(result).map_or_else(Self::Unreadable, Self::Task)
    }

    /// The answer a JSON-RPC error holds: -32042 with its URLs, or a
    /// refusal of the call.
    #[must_use]
    pub fn from_rpc_error(code: i64, message: &str, data: Option<&Value>) -> Self {
        if code == URL_ELICITATION_REQUIRED {
            return UrlElicitationRequired::parse(data)
                .map_or_else(Self::Unreadable, Self::UrlElicitationRequired);
        }
        Self::RpcError {
            code,
            message: truncated(message, MAX_MESSAGE_LEN).into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent_loop::Status;
    use crate::ledger::RequestId;
    use serde_json::json;

    const ID: &str = "00000000-0000-4000-8000-000000000001";

    #[test]
    fn reads_each_shape() {
        let done = Envelope::parse(&json!({
            "ok": true, "requestId": ID, "status": "done", "result": {"n": 1},
            "outcomes": [{"seq": 0}], "outcomeCursor": null, "unknownTail": false,
        }))
        .unwrap();
        assert!(done.ok && done.business_error.is_none());
        assert_eq!(done.status, Some(Status::Done));
        assert_eq!(done.outcomes, 1);
        assert_eq!(done.request_id, Some(RequestId::parse(ID).unwrap()));

        let business = Envelope::parse(&json!({
            "ok": true, "requestId": ID, "status": "done",
            "result": {"error": {"code": "OUT_OF_STOCK", "message": "none"}},
        }))
        .unwrap();
        assert_eq!(business.business_error.unwrap().code, "OUT_OF_STOCK");

        let limited = Envelope::parse(&json!({
            "ok": false, "requestId": ID,
            "error": {"code": "RATE_LIMITED", "message": "slow", "retryAfterMs": 250},
        }))
        .unwrap();
        assert_eq!(limited.status, None);
        assert_eq!(limited.error.unwrap().retry_after_ms, Some(250));

        let pending = Envelope::parse_text(&alloc::format!(
            r#"{{"ok":true,"requestId":"{ID}","status":"approval_pending","approval":{{}}}}"#
        ))
        .unwrap();
        assert_eq!(pending.status, Some(Status::ApprovalPending));
    }

    #[test]
    fn refuses_what_it_would_have_to_guess() {
        for (bad, field) in [
            (json!([]), "envelope"),
            (json!({"ok": "yes"}), "ok"),
            (json!({"ok": true, "requestId": "x"}), "requestId"),
            (json!({"ok": true, "status": "later"}), "status"),
            (json!({"ok": false}), "error"),
            (json!({"ok": true, "error": {"code": "X"}}), "error"),
            (
                json!({"ok": false, "error": {"code": "has space"}}),
                "error.code",
            ),
            (
                json!({"ok": false, "error": {"code": "X", "retryAfterMs": -1}}),
                "error.retryAfterMs",
            ),
            (json!({"ok": true, "unknownTail": 1}), "unknownTail"),
        ] {
            assert_eq!(
                Envelope::parse(&bad),
                Err(AnswerError::Malformed(field)),
                "{bad}"
            );
        }
        assert_eq!(Envelope::parse_text("{"), Err(AnswerError::NotJson));
    }

    #[test]
    fn long_messages_are_cut_at_a_character_boundary() {
        let message = "é".repeat(MAX_MESSAGE_LEN);
        let e = Envelope::parse(&json!({"ok": false, "error": {"code": "X", "message": message}}))
            .unwrap();
        let kept = e.error.unwrap().message;
        assert!(kept.len() <= MAX_MESSAGE_LEN && kept.chars().all(|c| c == 'é'));
    }

    #[test]
    fn tool_results_in_each_form() {
        let env = json!({"ok": true, "requestId": ID, "status": "approval_pending",
            "approvalUrl": "http://127.0.0.1:8787/agents#approval-x"});
        let Answer::Envelope(e) = Answer::from_tool_result(&json!({"structuredContent": env}))
        else {
            panic!()
        };
        assert_eq!(
            e.approval_url.as_deref(),
            Some("http://127.0.0.1:8787/agents#approval-x")
        );
        // As text (a typed tool's pending answer), with `resultType: complete`.
        let text = json!({"resultType": "complete", "isError": true,
            "content": [{"type": "text", "text": alloc::string::ToString::to_string(&env)}]});
        assert!(matches!(
            Answer::from_tool_result(&text),
            Answer::Envelope(_)
        ));
        assert!(matches!(
            Answer::from_tool_result(&json!({"resultType": "input_required", "requestState": "s"})),
            Answer::InputRequired(_)
        ));
        assert!(matches!(
            Answer::from_tool_result(
                &json!({"resultType": "task", "taskId": "t", "status": "working"})
            ),
            Answer::Task(_)
        ));
        for bad in [
            json!({"resultType": "later"}),
            json!({"content": [{"type": "text", "text": "not json"}]}),
            json!({"resultType": "input_required"}),
        ] {
            assert!(
                matches!(Answer::from_tool_result(&bad), Answer::Unreadable(_)),
                "{bad}"
            );
        }
        // Only an approval's URL is kept, and only a showable one.
        let done = Envelope::parse(&json!({"ok": true, "status": "done",
            "approvalUrl": "https://a.example/"}))
        .unwrap();
        assert_eq!(done.approval_url, None);
    }

    #[test]
    fn rpc_errors() {
        let data = json!({"elicitations": [{"mode": "url", "url": "https://a.example/p", "message": "m"}],
            "requestId": ID});
        assert!(matches!(
            Answer::from_rpc_error(URL_ELICITATION_REQUIRED, "m", Some(&data)),
            Answer::UrlElicitationRequired(_)
        ));
        assert!(matches!(
            Answer::from_rpc_error(URL_ELICITATION_REQUIRED, "m", None),
            Answer::Unreadable(AnswerError::Malformed("data"))
        ));
        let long = "x".repeat(MAX_MESSAGE_LEN + 5);
        let Answer::RpcError { code, message } = Answer::from_rpc_error(-32602, &long, None) else {
            panic!()
        };
        assert_eq!((code, message.len()), (-32602, MAX_MESSAGE_LEN));
    }

    #[test]
    fn http_answers() {
        assert_eq!(Answer::from_http(401, None, None), Ok(Answer::Unauthorized));
        assert_eq!(
            Answer::from_http(
                403,
                Some(r#"Bearer error="insufficient_scope", scope="skills:read skills:write""#),
                None
            ),
            Ok(Answer::InsufficientScope {
                scope: ScopeSet::parse("skills:read skills:write").unwrap()
            })
        );
        assert_eq!(
            Answer::from_http(403, Some(r#"Bearer error="invalid_token""#), None),
            Err(AnswerError::UnexpectedStatus(403))
        );
        assert_eq!(
            Answer::from_http(403, Some(r#"Bearer error="insufficient_scope""#), None),
            Err(AnswerError::Malformed("scope"))
        );
        assert_eq!(
            Answer::from_http(503, None, Some(3)),
            Ok(Answer::Unavailable {
                retry_after_secs: Some(3)
            })
        );
        assert_eq!(
            Answer::from_http(500, None, None),
            Err(AnswerError::UnexpectedStatus(500))
        );
    }
}
