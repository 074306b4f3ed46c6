//! [`Answer`]: what a tool call answers, as `execute` ([`super::run`])
//! hands it to the MCP handler. Every body is the core's JSON.

use portcullis_core::error::ErrorCode;
use portcullis_core::ledger::{self, BeginError, RequestId};
use serde_json::Value;

/// A tool answer: the JSON body.
#[derive(Clone, Debug)]
pub(crate) struct Answer {
    /// The structured result.
    pub(crate) body: Value,
}

impl Answer {
    /// An answer with `body` and no challenge.
    pub(crate) fn ok(body: Value) -> Self {
        Self { body }
    }

    /// Whether this is a protocol failure (`"ok": false`).
    pub(crate) fn is_error(&self) -> bool {
        self.body["ok"] == Value::Bool(false)
    }

    /// The answer to a refused `begin`: the core's JSON.
    pub(crate) fn begin_error(e: &BeginError, id: Option<RequestId>) -> Self {
        Self {
            body: e.to_json(id),
        }
    }
}

/// A protocol failure with `code`, in the core's shape
/// ([`ledger::failure_json`]).
pub(crate) fn failure(code: ErrorCode, message: &str, id: Option<RequestId>) -> Answer {
    Answer::ok(ledger::failure_json(code, message, id))
}
