//! The `execute` request envelope: the JSON arguments of one call.
//!
//! ```json
//! {"requestId": "0190b2a4-7c3e-7def-8abc-0123456789ab", "code": "…", "outcomeCursor": "…"}
//! ```
//!
//! `requestId` (a canonical UUID) and `code` (1 byte to 96 KiB) are
//! required; `outcomeCursor` asks for a later page of a stored result's
//! outcomes. Unknown members, duplicate members and anything over 128 KiB
//! are `INVALID_PARAMS`: a typo must not be silently ignored.

use alloc::string::String;

use serde::Deserialize;

use super::LedgerError;
use super::id::{CodeFingerprint, RequestId};

/// Largest envelope read, checked before parsing.
pub const MAX_ENVELOPE_LEN: usize = 128 * 1024;
/// Largest `code`.
pub const MAX_CODE_LEN: usize = 96 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Wire {
    request_id: String,
    code: String,
    #[serde(default)]
    outcome_cursor: Option<String>,
}

/// A parsed `execute` call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecuteParams {
    /// The request id.
    pub request_id: RequestId,
    /// The code to run.
    pub code: String,
    /// A later page of outcomes, for a stored result.
    pub outcome_cursor: Option<String>,
    /// The client named no request id: `request_id` is a fresh one the
    /// adapter drew, and the call **joins** an unfinished identical
    /// request (same lineage, executor, caller and code) if there is one,
    /// answering as if it had named that request's id. `false` (the
    /// default, and always for a parsed envelope, which names its id): the
    /// call is exactly the request it names. See [`ExecuteParams::joining`]
    /// and [`crate::ledger`], "Calls that name no request id".
    pub join: bool,
}

impl ExecuteParams {
    /// Parses the JSON envelope.
    pub fn parse_json(bytes: &[u8]) -> Result<Self, LedgerError> {
        if bytes.len() > MAX_ENVELOPE_LEN {
            return Err(LedgerError::MalformedEnvelope("the envelope is too large"));
        }
        let wire: Wire = serde_json::from_slice(bytes)
            .map_err(|_| LedgerError::MalformedEnvelope("not a valid execute envelope"))?;
        Self::new(&wire.request_id, wire.code, wire.outcome_cursor)
    }

    /// Builds params from their parts, with the same checks.
    pub fn new(
        request_id: &str,
        code: String,
        outcome_cursor: Option<String>,
    ) -> Result<Self, LedgerError> {
        let request_id = RequestId::parse(request_id)?;
        if code.is_empty() || code.len() > MAX_CODE_LEN {
            return Err(LedgerError::MalformedEnvelope(
                "code must be 1 byte to 96 KiB",
            ));
        }
        if outcome_cursor
            .as_deref()
            .is_some_and(|c| super::cursor::split(c).is_none())
        {
            return Err(LedgerError::InvalidCursor);
        }
        Ok(Self {
            request_id,
            code,
            outcome_cursor,
            join: false,
        })
    }

    /// These params as a call whose client named no request id (`request_id`
    /// is a fresh one drawn for it, [`RequestId::random`]): it joins an
    /// unfinished identical request instead of opening another, so a
    /// client that cannot carry an id and simply calls again gets one
    /// approval per write and the result once it is approved; once that
    /// request has ended, an identical call is new work and asks again.
    #[must_use]
    pub fn joining(mut self) -> Self {
        self.join = true;
        self
    }

    /// The fingerprint the request id is bound to.
    #[must_use]
    pub fn fingerprint(&self) -> CodeFingerprint {
        CodeFingerprint::of(self.code.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    const ID: &str = "0190b2a4-7c3e-7def-8abc-0123456789ab";

    #[test]
    fn parses_the_envelope_strictly() {
        let p = ExecuteParams::parse_json(
            alloc::format!(r#"{{"requestId":"{ID}","code":"return 1"}}"#).as_bytes(),
        )
        .unwrap();
        assert_eq!(p.request_id.to_string(), ID);
        assert_eq!(p.fingerprint(), CodeFingerprint::of(b"return 1"));
        for bad in [
            alloc::format!(r#"{{"requestId":"{ID}"}}"#),
            alloc::format!(r#"{{"requestId":"{ID}","code":""}}"#),
            alloc::format!(r#"{{"requestId":"{ID}","code":"a","code":"b"}}"#),
            alloc::format!(r#"{{"requestId":"{ID}","code":"a","extra":1}}"#),
            alloc::format!(r#"{{"requestId":"{ID}","code":"a","outcomeCursor":"x"}}"#),
            r#"{"requestId":"nope","code":"a"}"#.into(),
            "[1]".into(),
        ] {
            let e = ExecuteParams::parse_json(bad.as_bytes()).unwrap_err();
            assert_eq!(
                crate::WireError::code(&e).as_str(),
                "INVALID_PARAMS",
                "{bad}"
            );
        }
        let huge = alloc::vec![b' '; MAX_ENVELOPE_LEN + 1];
        assert!(ExecuteParams::parse_json(&huge).is_err());
    }
}
