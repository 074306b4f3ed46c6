//! How a request ends, and the JSON a client receives.
//!
//! Two kinds of failure never mix (see the [module docs](super)):
//!
//! * a **protocol failure** ([`Failure`], and every [`super::BeginError`])
//!   means the business operation did not (or may not have) run to its end:
//!   `{"ok": false, "error": {"code": "PERMISSION_DENIED", "message": …}}`;
//! * a **business failure** ([`BusinessError`]) is a result the code itself
//!   produced: `{"ok": true, "result": {"error": {"code": …, "message": …}}}`.

use alloc::string::String;
use alloc::vec::Vec;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::LedgerError;
use super::action::valid_code;
use crate::error::ErrorCode;
use crate::store::codec::{self, Decode, Encode};

/// Longest business error message, in bytes.
pub const MAX_MESSAGE_LEN: usize = 2 * 1024;

/// A failure the code itself reports (`result.error`): the protocol worked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BusinessError {
    /// A stable code chosen by the application (`A-Z a-z 0-9 _ - .`, 1–64).
    pub code: String,
    /// A human-readable message.
    pub message: String,
}

codec::fields!(BusinessError { code, message });

impl BusinessError {
    /// A business error; the code grammar is checked when the request
    /// completes.
    #[must_use]
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
        }
    }

    /// `{"code": …, "message": …}`.
    #[must_use]
    pub fn to_json(&self) -> Value {
        json!({ "code": self.code, "message": self.message })
    }
}

/// What the host hands to [`crate::Engine::complete`].
#[derive(Clone, Debug, PartialEq)]
pub enum Completion {
    /// The code returned this value (at most `Policy::max_result_bytes`
    /// once serialised).
    Value(Value),
    /// The code failed with a business error.
    Error(BusinessError),
}

/// Why the ledger ended a request on its own: a protocol failure.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Failure {
    /// The user denied an approval: `PERMISSION_DENIED`.
    Denied,
    /// The grant was revoked while the request was undecided: `SESSION_REVOKED`.
    Revoked,
    /// The grant expired while the request was undecided: `SESSION_EXPIRED`.
    Expired,
    /// The connected tab changed (take-over, reload, disconnect, sign-out or
    /// a missed heartbeat) while the call ran there: `ACTION_UNAVAILABLE`.
    ConnectionLost,
    /// A resumed run asked for a different action than the one recorded at
    /// the same position: `EXPECTATION_FAILED`.
    Diverged,
    /// The server instance a server run was dispatched to stopped, or its
    /// executor lease lapsed, while the call ran there:
    /// `ACTION_UNAVAILABLE`, like [`Failure::ConnectionLost`].
    ExecutorLost,
}

codec::unit_enum!(Failure {
    Denied,
    Revoked,
    Expired,
    ConnectionLost,
    Diverged,
    ExecutorLost,
});

impl Failure {
    /// The failure a grant that is not live means for its undecided
    /// requests: `SESSION_EXPIRED` if it expired, else `SESSION_REVOKED`
    /// (revoked, or gone).
    #[must_use]
    pub fn of_session(status: Option<crate::grant::GrantStatus>) -> Self {
        match status {
            Some(crate::grant::GrantStatus::Expired) => Self::Expired,
            _ => Self::Revoked,
        }
    }

    /// The wire code.
    #[must_use]
    pub const fn code(self) -> ErrorCode {
        match self {
            Self::Denied => ErrorCode::PermissionDenied,
            Self::Revoked => ErrorCode::SessionRevoked,
            Self::Expired => ErrorCode::SessionExpired,
            Self::ConnectionLost | Self::ExecutorLost => ErrorCode::ActionUnavailable,
            Self::Diverged => ErrorCode::ExpectationFailed,
        }
    }

    /// A message safe to show the client.
    #[must_use]
    pub const fn message(self) -> &'static str {
        match self {
            Self::Denied => "the user denied the action",
            Self::Revoked => "the session was revoked; the call was cancelled",
            Self::Expired => "the session expired; the call was cancelled",
            Self::ConnectionLost => "the connected tab changed while the call ran",
            Self::Diverged => "the resumed code asked for a different action than it did before",
            Self::ExecutorLost => {
                "the server instance that ran the call stopped or lost its lease while the call ran"
            }
        }
    }
}

/// How a request ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum End {
    /// The code returned a value (its JSON text).
    Returned(String),
    /// The code failed with a business error.
    Business(BusinessError),
    /// The ledger ended it: a protocol failure.
    Failed(Failure),
}

impl Encode for End {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Returned(text) => {
                out.push(0);
                text.encode(out);
            }
            Self::Business(e) => {
                out.push(1);
                e.encode(out);
            }
            Self::Failed(f) => {
                out.push(2);
                f.encode(out);
            }
        }
    }
}

impl Decode<'_> for End {
    fn decode(r: &mut codec::Reader<'_>) -> Result<Self, codec::Malformed> {
        match r.variant(3)? {
            0 => String::decode(r).map(Self::Returned),
            1 => BusinessError::decode(r).map(Self::Business),
            _ => Failure::decode(r).map(Self::Failed),
        }
    }
}

impl End {
    /// Validates and encodes a host's completion against `max_bytes`.
    pub(crate) fn from_completion(c: &Completion, max_bytes: u32) -> Result<Self, LedgerError> {
        match c {
            Completion::Value(v) => {
                let mut text = Vec::new();
                crate::jwt::json::write_value(&mut text, v);
                if text.len() > max_bytes as usize {
                    return Err(LedgerError::ResultTooLarge { limit: max_bytes });
                }
                // JSON text written from a `Value` is UTF-8.
                String::from_utf8(text)
                    .map(Self::Returned)
                    .map_err(|_| LedgerError::InvalidResult)
            }
            Completion::Error(e) => {
                if !valid_code(&e.code) || e.message.len() > MAX_MESSAGE_LEN {
                    return Err(LedgerError::InvalidResult);
                }
                Ok(Self::Business(e.clone()))
            }
        }
    }

    /// The JSON members this end contributes: `ok` and `result` or `error`.
    pub(crate) fn write_json(&self, out: &mut Value) {
        match self {
            Self::Returned(text) => {
                out["ok"] = Value::Bool(true);
                out["result"] = serde_json::from_str(text).unwrap_or(Value::Null);
            }
            Self::Business(e) => {
                out["ok"] = Value::Bool(true);
                out["result"] = json!({ "error": e.to_json() });
            }
            Self::Failed(f) => {
                out["ok"] = Value::Bool(false);
                out["error"] = json!({ "code": f.code().as_str(), "message": f.message() });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_bounded_and_validated() {
        let big = Completion::Value(Value::String("x".repeat(100)));
        assert_eq!(
            End::from_completion(&big, 50),
            Err(LedgerError::ResultTooLarge { limit: 50 })
        );
        assert!(End::from_completion(&big, 102).is_ok());
        let bad = Completion::Error(BusinessError::new("has space", "m"));
        assert_eq!(
            End::from_completion(&bad, 50),
            Err(LedgerError::InvalidResult)
        );
    }

    #[test]
    fn protocol_and_business_failures_have_separate_shapes() {
        let mut v = json!({});
        End::Business(BusinessError::new("OUT_OF_STOCK", "none left")).write_json(&mut v);
        assert_eq!(v["ok"], true);
        assert_eq!(v["result"]["error"]["code"], "OUT_OF_STOCK");
        let mut v = json!({});
        End::Failed(Failure::Denied).write_json(&mut v);
        assert_eq!(v["ok"], false);
        assert_eq!(v["error"]["code"], "PERMISSION_DENIED");
        assert!(v.get("result").is_none());
    }
}
