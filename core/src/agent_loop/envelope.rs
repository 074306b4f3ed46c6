//! The `execute` envelope as the client loop reads it
//! (`{"ok": …, "requestId": …, "status": …}`, the shapes written by
//! [`crate::ledger::StoredResult::to_json`],
//! [`crate::ledger::BeginAnswer::to_json`] and
//! [`crate::ledger::BeginError::to_json`]), its error bodies, and the rule
//! for a URL the loop may show the person. Strict about the fields the loop
//! acts on, silent about the rest.

use alloc::string::String;
use core::fmt;

use serde_json::{Map, Value};

use super::challenge::ChallengeError;
use crate::ledger::RequestId;

/// Longest error code kept; longer codes are refused as malformed.
pub const MAX_CODE_LEN: usize = 64;
/// Longest error message kept; a longer one is cut at a character boundary.
pub const MAX_MESSAGE_LEN: usize = 1024;

/// Longest URL kept; a longer one is refused as malformed.
pub const MAX_URL_LEN: usize = 8 * 1024;

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
                showable_url(url)
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

pub(super) fn truncated(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `url` if it can be shown (see [`is_showable_url`]).
pub(super) fn showable_url(url: &str) -> Option<String> {
    is_showable_url(url).then(|| url.into())
}

/// An absolute `http`/`https` URL with a host, of visible ASCII only.
pub(super) fn is_showable_url(url: &str) -> bool {
    let lower_starts = |prefix: &str| {
        url.len() > prefix.len()
            && url.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
    };
    let rest = if lower_starts("https://") {
        &url[8..]
    } else if lower_starts("http://") {
        &url[7..]
    } else {
        return false;
    };
    url.len() <= MAX_URL_LEN
        && url.bytes().all(|b| b.is_ascii_graphic())
        && !rest.starts_with(['/', '?', '#'])
}
