//! What the server answered, as the client loop reads it: the `execute`
//! envelope (`{"ok": …, "requestId": …, "status": …}`, the shapes written by
//! [`crate::ledger::StoredResult::to_json`], [`crate::ledger::BeginAnswer::to_json`]
//! and [`crate::ledger::BeginError::to_json`]), the forms a call that waits
//! for the person takes in newer protocol revisions (see [`super::input`]),
//! and the transport-level answers that never reach a tool result (401, 403
//! `insufficient_scope`, 503, a lost connection).
//!
//! Parsing is strict about the fields the loop acts on (a wrong type is
//! [`AnswerError`], never a guess) and ignores fields it does not know, so a
//! newer server stays readable.

use alloc::string::String;
use core::fmt;

use serde_json::{Map, Value};

use super::challenge::{BearerChallenge, ChallengeError};
use super::input::{InputRequired, Task, UrlElicitationRequired, tool_envelope};
use crate::ledger::RequestId;
use crate::scope::ScopeSet;

/// Longest error code kept; longer codes are refused as malformed.
pub const MAX_CODE_LEN: usize = 64;
/// Longest error message kept; a longer one is cut at a character boundary.
pub const MAX_MESSAGE_LEN: usize = 1024;

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

/// Where a request stands in the server's ledger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// It ended; the envelope holds its result or its failure.
    Done,
    /// It waits for the user to approve an action.
    ApprovalPending,
    /// A run of it is in progress.
    ExecutionPending,
}

/// A protocol failure or a business error: a stable code and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorBody {
    /// The stable code (`RATE_LIMITED`, `no_live_tab`, a business code, …).
    pub code: String,
    /// A message for a human, at most [`MAX_MESSAGE_LEN`] bytes.
    pub message: String,
    /// `retryAfterMs`, on `RATE_LIMITED`.
    pub retry_after_ms: Option<u64>,
    /// `reconnectUrl`, on `no_live_tab`.
    pub reconnect_url: Option<String>,
}

impl ErrorBody {
    /// A body with `code` and `message` and nothing else.
    #[must_use]
    pub fn new(code: &str, message: &str) -> Self {
        Self {
            code: code.into(),
            message: truncated(message, MAX_MESSAGE_LEN).into(),
            retry_after_ms: None,
            reconnect_url: None,
        }
    }
}

/// The `execute` envelope.
#[derive(Clone, Debug, PartialEq)]
pub struct Envelope {
    /// `ok`: false is a protocol failure, never a business result.
    pub ok: bool,
    /// `requestId`, when the server names one.
    pub request_id: Option<RequestId>,
    /// `status`; absent on a refusal that recorded nothing.
    pub status: Option<Status>,
    /// `result` of a finished request (`ok: true`).
    pub result: Option<Value>,
    /// `error` of a protocol failure (`ok: false`).
    pub error: Option<ErrorBody>,
    /// `result.error` of a business failure.
    pub business_error: Option<ErrorBody>,
    /// `unknownTail`: effects may have happened beyond the outcomes.
    pub unknown_tail: bool,
    /// How many outcomes this page lists.
    pub outcomes: usize,
    /// `outcomeCursor`: more outcomes are on further pages.
    pub more_outcomes: bool,
    /// `approvalUrl` of an `approval_pending` answer: the page the person
    /// approves on (kept only if it can be shown, see [`super::input`]).
    pub approval_url: Option<String>,
}

/// Why an answer could not be read.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AnswerError {
    /// Not JSON.
    NotJson,
    /// A field the loop acts on is missing or has the wrong type.
    Malformed(&'static str),
    /// An HTTP status the loop has no rule for.
    UnexpectedStatus(u16),
    /// A `WWW-Authenticate` value that could not be read.
    Challenge(ChallengeError),
}

impl fmt::Display for AnswerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotJson => f.write_str("the answer is not JSON"),
            Self::Malformed(field) => write!(f, "the answer's `{field}` is malformed"),
            Self::UnexpectedStatus(status) => write!(f, "unexpected HTTP status {status}"),
            Self::Challenge(e) => write!(f, "{e}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for AnswerError {}

impl Envelope {
    /// Reads an envelope from the tool result's text.
    pub fn parse_text(text: &str) -> Result<Self, AnswerError> {
        let value: Value = serde_json::from_str(text).map_err(|_| AnswerError::NotJson)?;
        Self::parse(&value)
    }

    /// Reads an envelope from the tool result's structured content.
    pub fn parse(value: &Value) -> Result<Self, AnswerError> {
        let object = value
            .as_object()
            .ok_or(AnswerError::Malformed("envelope"))?;
        let ok = object
            .get("ok")
            .and_then(Value::as_bool)
            .ok_or(AnswerError::Malformed("ok"))?;
        let request_id = match object.get("requestId") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) => {
                Some(RequestId::parse(id).map_err(|_| AnswerError::Malformed("requestId"))?)
            }
            Some(_) => return Err(AnswerError::Malformed("requestId")),
        };
        let status = match object.get("status") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(match s.as_str() {
                "done" => Status::Done,
                "approval_pending" => Status::ApprovalPending,
                "execution_pending" => Status::ExecutionPending,
                _ => return Err(AnswerError::Malformed("status")),
            }),
            Some(_) => return Err(AnswerError::Malformed("status")),
        };
        let error = match object.get("error") {
            None | Some(Value::Null) => None,
            Some(e) => Some(error_body(e)?),
        };
        if ok == error.is_some() {
            // `ok: false` always names its error, and `ok: true` never has one.
            return Err(AnswerError::Malformed("error"));
        }
        let result = object.get("result").cloned();
        let business_error = match result.as_ref().and_then(|r| r.get("error")) {
            Some(e) if ok && status == Some(Status::Done) => Some(error_body(e)?),
            _ => None,
        };
        let unknown_tail = match object.get("unknownTail") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(AnswerError::Malformed("unknownTail")),
        };
        let outcomes = match object.get("outcomes") {
            None | Some(Value::Null) => 0,
            Some(Value::Array(a)) => a.len(),
            Some(_) => return Err(AnswerError::Malformed("outcomes")),
        };
        let more_outcomes = match object.get("outcomeCursor") {
            None | Some(Value::Null) => false,
            Some(Value::String(_)) => true,
            Some(_) => return Err(AnswerError::Malformed("outcomeCursor")),
        };
        let approval_url = match object.get("approvalUrl") {
            Some(Value::String(url)) if status == Some(Status::ApprovalPending) => {
                super::input::showable_url(url)
            }
            _ => None,
        };
        Ok(Self {
            ok,
            request_id,
            status,
            result,
            error,
            business_error,
            unknown_tail,
            outcomes,
            more_outcomes,
            approval_url,
        })
    }
}

fn error_body(value: &Value) -> Result<ErrorBody, AnswerError> {
    let object: &Map<String, Value> = value.as_object().ok_or(AnswerError::Malformed("error"))?;
    let code = object
        .get("code")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty() && c.len() <= MAX_CODE_LEN && c.bytes().all(is_code_byte))
        .ok_or(AnswerError::Malformed("error.code"))?;
    let message = match object.get("message") {
        None | Some(Value::Null) => "",
        Some(Value::String(m)) => m.as_str(),
        Some(_) => return Err(AnswerError::Malformed("error.message")),
    };
    let retry_after_ms = match object.get("retryAfterMs") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .ok_or(AnswerError::Malformed("error.retryAfterMs"))?,
        ),
    };
    let reconnect_url = match object.get("reconnectUrl") {
        None | Some(Value::Null) => None,
        Some(Value::String(u)) => Some(u.clone()),
        Some(_) => return Err(AnswerError::Malformed("error.reconnectUrl")),
    };
    Ok(ErrorBody {
        code: code.into(),
        message: truncated(message, MAX_MESSAGE_LEN).into(),
        retry_after_ms,
        reconnect_url,
    })
}

/// Codes are identifiers: ASCII letters, digits, `_`, `-`, `.` and `:`.
const fn is_code_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':')
}

fn truncated(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
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
