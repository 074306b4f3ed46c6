//! What a server asks of the person before a call can finish, in the three
//! forms an MCP server may use, as the client loop reads them:
//!
//! * **2026-07-28, multi round-trip requests**: an `InputRequiredResult`
//!   (`resultType: "input_required"`) whose `inputRequests` may hold a
//!   URL-mode `elicitation/create` (an approval page, for instance) and
//!   whose opaque `requestState` the client echoes on its retry
//!   ([`InputRequired`]).
//! * **2025-11-25, URL elicitation**: the JSON-RPC error
//!   `URLElicitationRequiredError` (-32042) with `data.elicitations` and,
//!   from a Portcullis server, `data.requestId` ([`UrlElicitationRequired`]).
//! * **Tasks** (the `io.modelcontextprotocol/tasks` extension): a call that
//!   answers a task (`resultType: "task"`) is followed with `tasks/get` at
//!   the server's `pollIntervalMs` until it completes ([`Task`]).
//!
//! A URL is kept only if it is an absolute `http` or `https` URL of visible
//! ASCII (no space, no control character), and a message loses its control
//! characters: both are shown on a terminal, where an escape sequence
//! from a server must not reach. The loop never answers an elicitation
//! for the person: a URL-mode elicitation is accepted once it was shown,
//! and the person decides on the page.

use alloc::string::String;
use alloc::vec::Vec;

use serde_json::{Map, Value};

use super::envelope::{AnswerError, Envelope, MAX_MESSAGE_LEN, is_showable_url};
use crate::ledger::RequestId;

/// Longest `requestState` kept; a longer one is refused as malformed.
pub const MAX_REQUEST_STATE_LEN: usize = 64 * 1024;
pub use super::envelope::MAX_URL_LEN;
/// Longest key, task id or elicitation id kept.
pub const MAX_ID_LEN: usize = 512;
/// Most input requests read from one answer.
pub const MAX_INPUT_REQUESTS: usize = 16;

/// A URL-mode elicitation: a page the person opens and acts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UrlElicitation {
    /// The page (absolute `http`/`https`, visible ASCII only).
    pub url: String,
    /// What the server says the page is for, without control characters.
    pub message: String,
    /// `elicitationId`, when the server names one.
    pub elicitation_id: Option<String>,
}

/// One entry of `inputRequests`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InputRequest {
    /// A URL-mode `elicitation/create`: shown to the person, then accepted.
    Url(UrlElicitation),
    /// Anything else (a form elicitation, sampling, roots): the agent did
    /// not declare it and cannot answer it.
    Unsupported {
        /// The request's `method` (and `mode`, for an elicitation).
        method: String,
    },
}

/// A 2026-07-28 `InputRequiredResult`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputRequired {
    /// `requestState`, echoed verbatim on the retry.
    pub state: Option<String>,
    /// `inputRequests`, by key.
    pub requests: Vec<(String, InputRequest)>,
}

/// A 2025-11-25 `URLElicitationRequiredError` (-32042).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UrlElicitationRequired {
    /// `data.requestId`: the request to call again with.
    pub request_id: Option<RequestId>,
    /// `data.elicitations` (URL mode only).
    pub elicitations: Vec<UrlElicitation>,
}

/// Where a task stands (`status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskStatus {
    /// `working`: in progress.
    Working,
    /// `input_required`: waiting for the person (see [`Task::requests`]).
    InputRequired,
    /// `completed`: [`Task::result`] holds the call's result.
    Completed,
    /// `failed`: the call ended in an error.
    Failed,
    /// `cancelled`.
    Cancelled,
}

/// A task: the answer of a call the server continues on its own
/// (`resultType: "task"`), or a `tasks/get` result.
#[derive(Clone, Debug, PartialEq)]
pub struct Task {
    /// `taskId`, for `tasks/get`.
    pub task_id: String,
    /// `status`.
    pub status: TaskStatus,
    /// `pollIntervalMs`: how often to poll.
    pub poll_interval_ms: Option<u64>,
    /// `statusMessage`, or a failed task's `error.message`, without control
    /// characters.
    pub message: Option<String>,
    /// `inputRequests` of an `input_required` task.
    pub requests: Vec<(String, InputRequest)>,
    /// The `execute` envelope of a `completed` task's `result`.
    pub result: Option<Envelope>,
}

impl InputRequired {
    /// Reads an `InputRequiredResult` (the JSON-RPC `result`).
    pub fn parse(value: &Value) -> Result<Self, AnswerError> {
        let object = value.as_object().ok_or(AnswerError::Malformed("result"))?;
        let state = match object.get("requestState") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if !s.is_empty() && s.len() <= MAX_REQUEST_STATE_LEN => {
                Some(s.clone())
            }
            Some(_) => return Err(AnswerError::Malformed("requestState")),
        };
        let requests = input_requests(object.get("inputRequests"))?;
        if state.is_none() && requests.is_empty() {
            // The revision requires at least one of the two.
            return Err(AnswerError::Malformed("inputRequests"));
        }
        Ok(Self { state, requests })
    }

    /// The URL elicitations among the requests.
    pub fn urls(&self) -> impl Iterator<Item = &UrlElicitation> {
        urls(&self.requests)
    }
}

impl UrlElicitationRequired {
    /// Reads the `data` of a -32042 error.
    pub fn parse(data: Option<&Value>) -> Result<Self, AnswerError> {
        let object = data
            .and_then(Value::as_object)
            .ok_or(AnswerError::Malformed("data"))?;
        let request_id = match object.get("requestId") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) => {
                Some(RequestId::parse(id).map_err(|_| AnswerError::Malformed("data.requestId"))?)
            }
            Some(_) => return Err(AnswerError::Malformed("data.requestId")),
        };
        let list = object
            .get("elicitations")
            .and_then(Value::as_array)
            .ok_or(AnswerError::Malformed("data.elicitations"))?;
        if list.is_empty() || list.len() > MAX_INPUT_REQUESTS {
            return Err(AnswerError::Malformed("data.elicitations"));
        }
        let elicitations = list
            .iter()
            .map(|e| match url_elicitation(e)? {
                Some(u) => Ok(u),
                // The error is for URL elicitations only.
                None => Err(AnswerError::Malformed("data.elicitations")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            request_id,
            elicitations,
        })
    }
}

impl Task {
    /// Reads a task: a `CreateTaskResult` or a `tasks/get` result (the
    /// JSON-RPC `result`). A completed task's `result` must hold an
    /// `execute` envelope (its structured content, or its text).
    pub fn parse(value: &Value) -> Result<Self, AnswerError> {
        let object = value.as_object().ok_or(AnswerError::Malformed("result"))?;
        let task_id = object
            .get("taskId")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty() && id.len() <= MAX_ID_LEN)
            .ok_or(AnswerError::Malformed("taskId"))?;
        let status = match object.get("status").and_then(Value::as_str) {
            Some("working") => TaskStatus::Working,
            Some("input_required") => TaskStatus::InputRequired,
            Some("completed") => TaskStatus::Completed,
            Some("failed") => TaskStatus::Failed,
            Some("cancelled") => TaskStatus::Cancelled,
            _ => return Err(AnswerError::Malformed("status")),
        };
        let poll_interval_ms = match object.get("pollIntervalMs") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().ok_or(AnswerError::Malformed("pollIntervalMs"))?),
        };
        let message = match (object.get("statusMessage"), object.get("error")) {
            (Some(Value::String(m)), _) => Some(shown_text(m)),
            (_, Some(e)) => e.get("message").and_then(Value::as_str).map(shown_text),
            _ => None,
        };
        let requests = if status == TaskStatus::InputRequired {
            input_requests(object.get("inputRequests"))?
        } else {
            Vec::new()
        };
        let result = if status == TaskStatus::Completed {
            let result = object
                .get("result")
                .ok_or(AnswerError::Malformed("result"))?;
            Some(tool_envelope(result)?)
        } else {
            None
        };
        Ok(Self {
            task_id: task_id.into(),
            status,
            poll_interval_ms,
            message,
            requests,
            result,
        })
    }

    /// The URL elicitations among the requests.
    pub fn urls(&self) -> impl Iterator<Item = &UrlElicitation> {
        urls(&self.requests)
    }
}

fn urls(requests: &[(String, InputRequest)]) -> impl Iterator<Item = &UrlElicitation> {
    requests.iter().filter_map(|(_, r)| match r {
        InputRequest::Url(u) => Some(u),
        InputRequest::Unsupported { .. } => None,
    })
}

/// The `execute` envelope of a `CallToolResult`: its structured content,
/// else the JSON of its first text block.
pub(super) fn tool_envelope(result: &Value) -> Result<Envelope, AnswerError> {
    if let Some(body) = result.get("structuredContent") {
        return Envelope::parse(body);
    }
    let text = result
        .pointer("/content/0/text")
        .and_then(Value::as_str)
        .ok_or(AnswerError::NotJson)?;
    Envelope::parse_text(text)
}

fn input_requests(value: Option<&Value>) -> Result<Vec<(String, InputRequest)>, AnswerError> {
    let map: &Map<String, Value> = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(m)) => m,
        Some(_) => return Err(AnswerError::Malformed("inputRequests")),
    };
    if map.len() > MAX_INPUT_REQUESTS {
        return Err(AnswerError::Malformed("inputRequests"));
    }
    map.iter()
        .map(|(key, request)| {
            if key.is_empty() || key.len() > MAX_ID_LEN {
                return Err(AnswerError::Malformed("inputRequests"));
            }
            let method = request
                .get("method")
                .and_then(Value::as_str)
                .ok_or(AnswerError::Malformed("inputRequests.method"))?;
            let params = request.get("params");
            let parsed = match (method, params) {
                ("elicitation/create", Some(params)) => match url_elicitation(params)? {
                    Some(u) => InputRequest::Url(u),
                    None => InputRequest::Unsupported {
                        method: alloc::format!(
                            "elicitation/create ({})",
                            shown_text(
                                params.get("mode").and_then(Value::as_str).unwrap_or("form")
                            )
                        ),
                    },
                },
                (other, _) => InputRequest::Unsupported {
                    method: shown_text(other),
                },
            };
            Ok((key.clone(), parsed))
        })
        .collect()
}

/// A URL-mode elicitation's parameters; `None` for another mode.
fn url_elicitation(params: &Value) -> Result<Option<UrlElicitation>, AnswerError> {
    if params.get("mode").and_then(Value::as_str) != Some("url") {
        return Ok(None);
    }
    let url = params
        .get("url")
        .and_then(Value::as_str)
        .filter(|u| is_showable_url(u))
        .ok_or(AnswerError::Malformed("elicitation.url"))?;
    let message = params
        .get("message")
        .and_then(Value::as_str)
        .map(shown_text)
        .unwrap_or_default();
    let elicitation_id = match params.get("elicitationId") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) if id.len() <= MAX_ID_LEN => Some(shown_text(id)),
        Some(_) => return Err(AnswerError::Malformed("elicitation.elicitationId")),
    };
    Ok(Some(UrlElicitation {
        url: url.into(),
        message,
        elicitation_id,
    }))
}

/// `text` without control characters, at most [`MAX_MESSAGE_LEN`] bytes.
fn shown_text(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars().filter(|c| !c.is_control()) {
        if out.len() + c.len_utf8() > MAX_MESSAGE_LEN {
            break;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ID: &str = "00000000-0000-4000-8000-000000000001";

    fn approval(url: &str) -> Value {
        json!({"method": "elicitation/create",
            "params": {"mode": "url", "message": "Approve\u{1b}[2J it", "url": url}})
    }

    #[test]
    fn reads_an_input_required_result() {
        let ir = InputRequired::parse(&json!({
            "resultType": "input_required",
            "requestState": "sealed",
            "inputRequests": {"portcullis_approval": approval("https://a.example/agents#approval-1")},
        }))
        .unwrap();
        assert_eq!(ir.state.as_deref(), Some("sealed"));
        let urls: Vec<_> = ir.urls().collect();
        assert_eq!(urls.len(), 1);
        assert_eq!(urls[0].url, "https://a.example/agents#approval-1");
        assert_eq!(
            urls[0].message, "Approve[2J it",
            "no escape reaches a terminal"
        );

        // The state alone (the server still waits), or a form it cannot answer.
        let only = InputRequired::parse(&json!({"requestState": "s"})).unwrap();
        assert!(only.requests.is_empty());
        let form = InputRequired::parse(&json!({"inputRequests": {
            "a": {"method": "elicitation/create", "params": {"mode": "form", "message": "?"}},
            "b": {"method": "sampling/createMessage", "params": {}},
        }}))
        .unwrap();
        assert_eq!(
            form.requests,
            [
                (
                    "a".into(),
                    InputRequest::Unsupported {
                        method: "elicitation/create (form)".into()
                    }
                ),
                (
                    "b".into(),
                    InputRequest::Unsupported {
                        method: "sampling/createMessage".into()
                    }
                )
            ]
        );
    }

    #[test]
    fn refuses_what_it_cannot_show_or_echo() {
        for (bad, field) in [
            (json!({}), "inputRequests"),
            (json!({"requestState": ""}), "requestState"),
            (json!({"requestState": 1}), "requestState"),
            (json!({"inputRequests": []}), "inputRequests"),
            (
                json!({"inputRequests": {"a": approval("javascript:alert(1)")}}),
                "elicitation.url",
            ),
            (
                json!({"inputRequests": {"a": approval("https://a.example/x y")}}),
                "elicitation.url",
            ),
            (
                json!({"inputRequests": {"a": approval("https://a.example/\u{1b}")}}),
                "elicitation.url",
            ),
            (
                json!({"inputRequests": {"a": approval("https:///path")}}),
                "elicitation.url",
            ),
            (
                json!({"inputRequests": {"a": {"params": {}}}}),
                "inputRequests.method",
            ),
        ] {
            assert_eq!(
                InputRequired::parse(&bad),
                Err(AnswerError::Malformed(field)),
                "{bad}"
            );
        }
        let long = alloc::format!("https://a.example/{}", "a".repeat(MAX_URL_LEN));
        assert!(InputRequired::parse(&json!({"inputRequests": {"a": approval(&long)}})).is_err());
        let state = "s".repeat(MAX_REQUEST_STATE_LEN + 1);
        assert!(InputRequired::parse(&json!({ "requestState": state })).is_err());
    }

    #[test]
    fn reads_a_url_elicitation_required_error() {
        let e = UrlElicitationRequired::parse(Some(&json!({
            "elicitations": [{"mode": "url", "message": "Approve", "url": "http://127.0.0.1:8787/agents#approval-x", "elicitationId": ID}],
            "requestId": ID,
        })))
        .unwrap();
        assert_eq!(e.request_id, Some(RequestId::parse(ID).unwrap()));
        assert_eq!(e.elicitations[0].elicitation_id.as_deref(), Some(ID));
        for bad in [
            json!({"elicitations": []}),
            json!({"elicitations": [{"mode": "form", "message": "?"}]}),
            json!({"elicitations": [{"mode": "url", "url": "https://a.example/"}], "requestId": "x"}),
        ] {
            assert!(UrlElicitationRequired::parse(Some(&bad)).is_err(), "{bad}");
        }
        assert!(UrlElicitationRequired::parse(None).is_err());
    }

    #[test]
    fn reads_tasks_in_each_status() {
        let created = Task::parse(&json!({"resultType": "task", "taskId": "t1",
            "status": "working", "pollIntervalMs": 1000, "ttlMs": 5}))
        .unwrap();
        assert_eq!(
            (created.status, created.poll_interval_ms),
            (TaskStatus::Working, Some(1000))
        );
        let waiting = Task::parse(&json!({"taskId": "t1", "status": "input_required",
            "inputRequests": {"portcullis_approval": approval("https://a.example/p")}}))
        .unwrap();
        assert_eq!(waiting.urls().count(), 1);
        let done = Task::parse(&json!({"taskId": "t1", "status": "completed", "result": {
            "content": [], "structuredContent": {"ok": true, "requestId": ID, "status": "done", "result": []}}}))
        .unwrap();
        assert_eq!(
            done.result.unwrap().status,
            Some(super::super::Status::Done)
        );
        let text = Task::parse(&json!({"taskId": "t1", "status": "completed", "result": {
            "content": [{"type": "text", "text": "{\"ok\":true,\"status\":\"done\"}"}]}}))
        .unwrap();
        assert!(text.result.is_some());
        let failed = Task::parse(&json!({"taskId": "t1", "status": "failed",
            "error": {"code": -32603, "message": "boom\n"}}))
        .unwrap();
        assert_eq!(failed.message.as_deref(), Some("boom"));
        for (bad, field) in [
            (json!({"status": "working"}), "taskId"),
            (json!({"taskId": "t", "status": "later"}), "status"),
            (json!({"taskId": "t", "status": "completed"}), "result"),
            (
                json!({"taskId": "t", "status": "working", "pollIntervalMs": -1}),
                "pollIntervalMs",
            ),
        ] {
            assert_eq!(
                Task::parse(&bad),
                Err(AnswerError::Malformed(field)),
                "{bad}"
            );
        }
    }
}
