//! Glue for rmcp servers (feature `rmcp`): a tool takes the verified
//! [`Agent`] and the call's [`CallId`] as arguments, and returns a
//! [`Ran`] as its `CallToolResult`.
//!
//! ```ignore
//! #[tool(description = "Add a note (asks you first)")]
//! async fn add_note(&self, agent: Agent, id: CallId, Parameters(note): Parameters<NewNote>) -> CallToolResult {
//!     let action = portcullis_axum::rmcp::action(Effect::Write, "add_note", "notes:write", &note)?;
//!     let notes = self.notes.clone();
//!     self.portcullis.run_once(&agent, id.0, action, move || async move { Ok(notes.add(note)) }).await.into()
//! }
//! ```

use rmcp::ErrorData;
use rmcp::handler::server::common::{AsRequestContext, FromContextPart};
use rmcp::model::CallToolResult;

use portcullis_core::ledger::{Action, Effect, RequestId};
use serde::Serialize;

use crate::guard::{Agent, ScopeRequired};
use crate::run::Ran;

/// The `_meta` key of a call's request id (a UUID): the same id on a
/// retry never runs the action twice.
pub const REQUEST_ID_META: &str = "portcullis/requestId";

impl<C: AsRequestContext> FromContextPart<C> for Agent {
    fn from_context_part(context: &mut C) -> Result<Self, ErrorData> {
        context
            .as_request_context()
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Agent>())
            .cloned()
            .ok_or_else(|| {
                ErrorData::internal_error(
                    "no verified agent: serve this tool behind Portcullis::protect",
                    None,
                )
            })
    }
}

/// The request id of a tool call, from `_meta["portcullis/requestId"]`. A
/// call without one gets a fresh id, which every answer names
/// (`requestId`): an agent that must call again (after an approval)
/// sends it back there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallId(pub RequestId);

impl<C: AsRequestContext> FromContextPart<C> for CallId {
    fn from_context_part(context: &mut C) -> Result<Self, ErrorData> {
        match context.as_request_context().meta.get(REQUEST_ID_META) {
            None => Ok(Self(RequestId::random(&mut rand::rng()))),
            Some(value) => value
                .as_str()
                .and_then(|s| RequestId::parse(s).ok())
                .map(Self)
                .ok_or_else(|| {
                    ErrorData::invalid_params(
                        format!("_meta[\"{REQUEST_ID_META}\"] must be a UUID in canonical form"),
                        None,
                    )
                }),
        }
    }
}

/// An action of `kind` with `effect` that needs `scope`, whose arguments
/// (what the person approves) are `arguments` as JSON: the tool's own
/// parameters, usually. A kind, scope or argument size the ledger refuses
/// is an `invalid_params` error.
pub fn action(
    effect: Effect,
    kind: &str,
    scope: &str,
    arguments: &impl Serialize,
) -> Result<Action, ErrorData> {
    let arguments = serde_json::to_vec(arguments)
        .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
    Action::new(kind, effect, scope, &arguments)
        .map_err(|e| ErrorData::invalid_params(e.to_string(), None))
}

/// The ledger's answer as the tool's result: structured content, an error
/// result (`isError`) for a protocol failure.
impl<T> From<Ran<T>> for CallToolResult {
    fn from(ran: Ran<T>) -> Self {
        if ran.is_error() {
            Self::structured_error(ran.answer().clone())
        } else {
            Self::structured(ran.answer().clone())
        }
    }
}

/// A missing scope as the tool's error; the guard has already turned the
/// HTTP response into `403 insufficient_scope`.
impl From<ScopeRequired> for ErrorData {
    fn from(e: ScopeRequired) -> Self {
        Self::invalid_request(e.to_string(), None)
    }
}
