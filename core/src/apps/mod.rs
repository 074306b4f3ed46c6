//! The MCP Apps host's rules, as sans-IO state machines.
//!
//! An MCP App (SEP-1865, the `io.modelcontextprotocol/ui` extension) is an
//! HTML resource (`ui://…`, `text/html;profile=mcp-app`) a source's tool
//! names in `_meta.ui.resourceUri`. The connected tab renders it in an
//! opaque iframe inside a sandbox proxy on its own origin, and forwards the
//! App's JSON-RPC messages to the server, which decides with this module.
//! The semantics are the host document's ("Interactive MCP Apps"); where it
//! is silent, the extension's.
//!
//! This module owns:
//!
//! | item | rule |
//! |---|---|
//! | [`AppRequest::parse`] | one App message, strictly, at most 256 KiB |
//! | [`View`] | a View's lifecycle: open → activate against the **current** [`Authority`] → close |
//! | [`View::admit`] | same-source tools and resources only; ≤ 128 in flight, refused past it, never evicting; writes wait for approval with an [`ApprovalCard`] |
//! | [`View::offer_context`], [`Submission::capture`] | opt-in context: ≤ 64 KiB per value, ≤ 8 Views, exactly what was selected or a visible failure |
//! | [`View::propose_message`], [`View::propose_link`] | proposals the user sends once or declines; links through the external-link guard |
//! | [`reconcile`] | "Check result" from the ledger's receipt; never "run again" |
//! | [`StoredView`], [`Engine::send_context`](crate::Engine::send_context), [`Engine::take_deliveries`](crate::Engine::take_deliveries) | a View kept in the store (a reload, a restart, any instance); selected context and confirmed messages handed to the View's agent once, attributed to their source |
//! | [`SandboxConfig::check`] | the sandbox listener and origin at startup |
//! | [`exact_origins`] | the exact origins of an App's CSP declaration, safe to write into a header |
//!
//! It never reads a clock, draws randomness or touches I/O: ids (the
//! [`ViewId`]) and facts (the [`Authority`], what a source offers) come in
//! as arguments. Nothing here is on the embedded engine's path; a View is
//! kept in the store by the host ([`StoredView`]).
//!
//! # One App request, end to end
//!
//! ```text
//! tab ── App message bytes ──▶ AppRequest::parse ─┬─ tools/call, resources/read ─▶ Operation::from_call
//!                                                 │     └▶ View::admit(op, &authority_now, &gateway, rule)
//!                                                 │          ├─ OpStep::Dispatch      → call the source (under the ledger) → View::finish
//!                                                 │          └─ OpStep::Approve(card) → the trusted card → View::approve → dispatch → finish
//!                                                 ├─ ui/message, ui/open-link ─▶ View::propose_* → card → send once / confirm / decline
//!                                                 ├─ ui/update-model-context  ─▶ View::offer_context
//!                                                 └─ initialize, ping, size, Unsupported(method): answered by the caller
//! ```
//!
//! Every operation passes the authority of **now**: a change of grant,
//! credential, policy or scopes, or the View's source leaving the grant,
//! ends the activation and returns the pending approvals ([`Withdrawn`]) for
//! the caller to withdraw. Errors are typed, each with a stable
//! `reason()` string and a [`crate::WireError`] code, and never echo input.

mod context;
mod id;
mod proposal;
mod receipt;
mod request;
mod sandbox;
mod stored;
mod view;

#[cfg(test)]
mod tests;

pub use context::{
    Captured, ContextError, ContextValue, MAX_CONTEXT_BYTES, MAX_SUBMISSION_VIEWS, Selection,
    Submission,
};
pub use proposal::{MAX_MESSAGE_BYTES, MAX_PENDING_PROPOSALS, Proposal, ProposalError, ProposalId};
pub use receipt::{FailedHow, Receipt, Reconciled, UnknownWhy, reconcile};
pub use request::{
    AppCall, AppRequest, AppRequestError, MAX_METHOD_LEN, MAX_REQUEST_BYTES, MAX_TOOL_NAME_LEN,
    MAX_URI_LEN, MessageRole, RpcId,
};
pub use sandbox::{SandboxConfig, SandboxConfigError, SandboxOrigin, exact_origins};
pub use stored::{AppViewError, Delivered, Delivery, MAX_OUTBOX, MAX_VIEWS_SCANNED, StoredView};
pub use view::{
    ActivateError, ApprovalCard, Authority, Fingerprint, Finished, GrantedSources, LineageKey,
    MAX_IN_FLIGHT, MAX_VIEW_ID_LEN, OpId, OpRefused, OpRule, OpStep, OpTarget, OpTicket, Operation,
    SourceCall, View, ViewError, ViewId, ViewOrigin, Withdrawn,
};
