//! The execution ledger: request-id replay protection, pending work,
//! per-action authorization, outcomes, results and their retention.
//!
//! This module owns the records and answers; [`crate::Engine`] runs them
//! against a store (`begin`, `begin_server`, `authorize_action`,
//! `record_outcome`, `complete`, `outcomes`, `sweep_ledger`). Approvals of
//! its actions live in [`approval`] (also reachable as `crate::approval`):
//! a pending approval is part of a request's record, and the approval types
//! use the ledger's ids, so they sit inside it rather than beside it. The
//! two executors are the connected tab ([`crate::tab`]) and the host's
//! server ([`crate::executor`]).
//!
//! # One call, end to end
//!
//! ```text
//! client ── execute {requestId, code} ──▶ Engine::begin ─┬─ Run(ticket) ──▶ run the code in the tab
//!                              (or Engine::begin_server) │                  (or on the server)
//!                                                        ├─ execution_pending / approval_pending
//!                                                        └─ the stored result, or a protocol failure
//! for each action the code asks for:
//!   Engine::authorize_action(ticket, action) ─┬─ Run(ticket)      → perform it, then record_outcome
//!                                             │                     (or, if it did not run because it
//!                                             │                     needs input first, withdraw_action:
//!                                             │                     parked, no outcome, approval kept)
//!                                             ├─ Replay(ticket, o) → it ran before: use `o`, do not run
//!                                             └─ approval / scope / hidden tab: the run stops (parked)
//! Engine::complete(ticket, value or business error) → the stored result
//! ```
//!
//! An [`ExecutionTicket`] is owned by the caller, like quinn's `Incoming`:
//! it must be handed back to authorize each action, record each outcome and
//! complete the run. Only the ticket of a request's latest run is valid.
//!
//! # Replay rules
//!
//! * Requests are keyed by the grant's **lineage** (site, user, client) and
//!   the client-chosen [`RequestId`]. The first accepted call binds the id
//!   to the [`CodeFingerprint`] (SHA-256 of the code); another code is
//!   `REPLAY_DETECTED`, for as long as the id is remembered.
//! * The same id and code never run twice: a later call returns the current
//!   state — `execution_pending` while a run holds the ticket,
//!   `approval_pending` while the user decides — or the stored result.
//!   **This deliberately differs from the IETF idempotency-key draft**,
//!   which answers a duplicate of an in-flight request with 409: like
//!   durable-execution engines, we tell the client where its request stands,
//!   which is what it needs to poll and resume.
//! * **Resuming re-runs the code from the start.** Actions whose outcome is
//!   recorded are answered from the journal ([`ActionVerdict::Replay`]), so no
//!   action runs twice; a resumed run that asks for a different action at a
//!   recorded position ends with `EXPECTATION_FAILED`.
//! * A rejection before any effect (bad input, rate limit, missing scope, no
//!   live tab, too many undecided requests) is not a final result: the same
//!   id is judged afresh next time. Effects are never re-run by the core: an
//!   action authorized but never confirmed leaves `unknownTail`.
//!
//! # Calls that name no request id
//!
//! Many clients cannot carry a request id from one call to the next (their
//! model sees the `approval_pending` JSON but has no way to send
//! `requestId` back), so their retry of a write would open another request
//! and show the person another card each time. An adapter marks such a
//! call ([`ExecuteParams::joining`], under a fresh random id), and the
//! ledger makes an **identical** call — the same lineage, executor and
//! caller (a tab call's client or in-page caller), and the same code
//! (for a host's tool: its kind, effect, scope and exact arguments) —
//! **join** the unfinished request it repeats:
//!
//! * while that request is unfinished (running, awaiting approval or
//!   parked) and its grant is live, the call is answered exactly as if it
//!   had named that request's id: the same card, `approval_pending` or
//!   `execution_pending` under the joined `requestId`, and once approved a
//!   run of that request (so the action runs once, whichever call runs it);
//! * once that request has ended (completed, failed, denied, cancelled,
//!   expired), an identical call is new work under its own id and asks the
//!   person again: **identical repeated writes always ask again**, one
//!   card per write, never one per retry;
//! * a call that names its id (in its envelope, `_meta`, a sealed state)
//!   keeps the rules above exactly: it never joins anything, and only a
//!   request a joining call opened is ever joined.
//!
//! The index behind it (table `WaitingCalls`) maps (lineage, caller, code)
//! to the latest request a joining call opened; an entry naming an ended
//! request is stale and replaced by the next one, and the ledger sweep
//! deletes an entry with the request it names, so the index never outgrows
//! the requests table.
//!
//! # Scopes and executors are the host's
//!
//! Every [`Action`] names the scope it needs ([`Action::scope`]), whatever
//! its effect: the site declares its scopes
//! ([`crate::site::SiteConfig::scopes`]; `skills:read` and `skills:write`
//! are only the demo's, [`crate::site::default_scopes`]), and the host
//! names, per tool, which one it takes. A scope the site does not declare
//! can never be granted, so an action or a `needed` set naming one is the
//! host's mistake: refused before anything is written
//! ([`LedgerError::UndeclaredScope`], [`BeginError::UndeclaredScope`],
//! `server_error`). A scope the token lacks is the client's to fix:
//! `insufficient_scope` naming it (RFC 6750 §3.1), as below.
//!
//! The host also chooses, **per call**, where the call runs — its own code
//! knows which of its tools act in the user's page and which it performs on
//! its server ([`Executor`]):
//!
//! * [`crate::Engine::begin`] / [`crate::Engine::begin_needing`]: the user's
//!   connected tab, with heartbeats; no live tab is `no_live_tab`, and a run
//!   is cut off (`ConnectionLost`) when the connection moves;
//! * [`crate::Engine::begin_server`]: a server executor, a numbered lease
//!   ([`crate::executor`]); no tab is consulted. A run is cut off
//!   ([`Failure::ExecutorLost`], the same wire code) when the lease of the
//!   executor it was dispatched to lapses or that executor stops, and a
//!   server run may not drive page controls.
//!
//! Replay, results, approvals bound to the exact arguments and used once,
//! and the limits are the same for both. A request keeps the executor of
//! its first call: the same id on the other executor is `REPLAY_DETECTED`.
//! "Always allow this kind" lives in the tab connection for tab runs and
//! per grant for server runs ([`approval::GrantAutoApproval`]).
//!
//! # Scope upgrades
//!
//! A missing scope parks the request (403 `insufficient_scope` with the
//! challenge). The client re-authorizes with the wider scope, which issues a
//! **new grant** for the same site, user and client — the same lineage — and
//! retries the same request id with the new token: the parked request is
//! **adopted** by the new grant and resumes where it stopped. Adoption voids
//! approvals given under the old grant. A running request is never adopted
//! (`execution_pending`); a stored result is readable by any grant of the
//! lineage unless the grant that produced it was revoked.
//!
//! # Retention
//!
//! A result is kept for `Policy::result_retention` (24 h) from the terminal
//! state, then answers `result_expired`. Undecided work never expires by
//! retention. After the result is deleted a tombstone (id and code
//! fingerprint) stays until the owning grant's absolute deadline, so an
//! expired id answers `result_expired` and never runs again. Nothing
//! outlives that deadline. [`crate::Engine::sweep_ledger`] deletes through
//! the ledger's own expiry index with a work budget.
//!
//! # Revocation
//!
//! Revoking a grant (per grant, per user, refresh-token reuse, code replay,
//! RFC 7009) cancels its undecided requests and ends its tab connection in
//! the same transaction (and the auto-approvals of its server runs): running
//! calls end `SESSION_REVOKED` with `unknownTail`. A site-wide revocation
//! (epoch bump) is O(1) and cannot
//! enumerate: every ledger operation re-checks the grant, and the undecided
//! requests of a grant that is no longer live end (`SESSION_REVOKED` or
//! `SESSION_EXPIRED`) when they are next touched. A revoked grant reads no
//! stored result.
//!
//! # Error taxonomy (what a client does)
//!
//! | code | HTTP | client behaviour |
//! |---|---|---|
//! | `ACTION_NOT_FOUND` | 404 | re-describe; the page may have changed |
//! | `ACTION_UNAVAILABLE` | 503 | report the reason; do not retry until the precondition changes (also: the tab changed mid-call, the server instance running it stopped or lost its lease, no live server executor, or 128 undecided requests) |
//! | `INVALID_PARAMS` | 400 | correct the argument from the schema (bad `requestId`, envelope, cursor, oversized result) |
//! | `EXPECTATION_FAILED` | 417 | re-observe the page, then decide (a resumed run diverged) |
//! | `PERMISSION_DENIED` | 403 | stop; ask a human to act, not the agent |
//! | `SESSION_EXPIRED` / `SESSION_REVOKED` | 401 | re-authenticate or request a new delegation |
//! | `RATE_LIMITED` | 429 | honour `retryAfterMs`; do not spin |
//! | `REPLAY_DETECTED` | 409 | use a new id only for a logically new request; otherwise inspect the prior outcome |
//! | `no_live_tab` | 503 | show the user the reconnect link; retry the same id once a tab is connected |
//! | `tab_not_visible` | 400 | ask the user to focus the connected tab; retry the same id |
//! | `result_expired` | 410 | the result is gone; intentional new work uses a new id — never replay writes blindly |
//! | `insufficient_scope` | 403 | re-authorize with the `scope` of the challenge; retry the same id |
//! | `server_error` | 500 | the server named a scope its site does not declare: report it; retrying will not help until the server is fixed |

mod action;
pub mod approval;
mod cursor;
mod envelope;
mod id;
mod request;
mod result;
pub mod resume;

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde_json::{Value, json};

pub use crate::policy::RateLimit;
pub use action::{
    Action, Effect, MAX_ARGUMENTS_LEN, MAX_CODE_LEN as MAX_OUTCOME_CODE_LEN, MAX_KIND_LEN,
    MAX_SUMMARY_LEN, Outcome, OutcomeStatus, Report,
};
pub use cursor::MAX_CURSOR_LEN;
pub use envelope::{ExecuteParams, MAX_CODE_LEN, MAX_ENVELOPE_LEN};
pub(crate) use id::Lineage;
pub use id::{ActionFingerprint, CodeFingerprint, RequestId};
pub use request::{
    ActionStep, BeginStep, Begun, ExecutionRequest, Executor, InFlight, NextAction, Owner, Park,
    Repeat, RequestState,
};
pub use result::{BusinessError, Completion, End, Failure, MAX_MESSAGE_LEN};

pub(crate) use cursor::{issue as issue_cursor, open as open_cursor};

use crate::bearer::Challenge;
use crate::error::{ErrorCode, WireError};
use crate::grant::GrantId;
use crate::scope::ScopeSet;
use crate::site::SiteId;
use crate::store::StoreError;
use crate::time::Timestamp;
use approval::ApprovalPrompt;

/// Outcomes per page.
pub const OUTCOME_PAGE: usize = 100;

/// Invalid input to the ledger: every variant is `INVALID_PARAMS`, except
/// [`LedgerError::UndeclaredScope`], the host's own mistake
/// (`server_error`).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LedgerError {
    /// The request id is not a canonical UUID.
    InvalidRequestId,
    /// The `execute` envelope is malformed.
    MalformedEnvelope(&'static str),
    /// An action's kind or scope is malformed, or its arguments are too
    /// long; or a server run asked for an action that drives page controls
    /// (a server has no page).
    InvalidAction,
    /// An action names a scope its site does not declare
    /// ([`crate::site::SiteConfig::scopes`]): no token can ever carry it, so
    /// the host named it by mistake. `server_error` (500): the caller cannot
    /// fix it.
    UndeclaredScope,
    /// An outcome report is malformed or too large.
    InvalidReport,
    /// A result is not valid JSON, or a business error code is malformed.
    InvalidResult,
    /// A result is larger than the limit.
    ResultTooLarge {
        /// The limit in bytes.
        limit: u32,
    },
    /// An `outcomeCursor` was not issued for this request.
    InvalidCursor,
}

impl fmt::Display for LedgerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidRequestId => f.write_str("requestId must be a UUID in canonical form"),
            Self::MalformedEnvelope(why) => f.write_str(why),
            Self::InvalidAction => f.write_str(
                "action kind must be 1-128 printable characters, its scope a scope token and \
                 its arguments at most 96 KiB; a server run cannot drive page controls",
            ),
            Self::UndeclaredScope => {
                f.write_str("the action needs a scope this site does not declare")
            }
            Self::InvalidReport => f.write_str("outcome report is malformed or too large"),
            Self::InvalidResult => f.write_str("result is malformed"),
            Self::ResultTooLarge { limit } => write!(f, "result is larger than {limit} bytes"),
            Self::InvalidCursor => f.write_str("outcomeCursor is not valid for this request"),
        }
    }
}

impl WireError for LedgerError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::UndeclaredScope => ErrorCode::ServerError,
            _ => ErrorCode::InvalidParams,
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for LedgerError {}

/// Who submitted a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    /// An external client with a grant (MCP).
    Client,
    /// An in-page caller (`WebMCP`): never offered auto-approval.
    InPage,
}

/// The right to run one request's code, owned by the caller: hand it back to
/// [`crate::Engine::authorize_action`], [`crate::Engine::record_outcome`] (or
/// [`crate::Engine::withdraw_action`], for an action that did not run) and
/// finally [`crate::Engine::complete`]. Only the latest run's ticket is
/// valid; dropping it leaves the request `execution_pending` until its tab
/// connection ends (a tab run) or its executor's lease does (a server run).
#[must_use = "a ticket must be handed back to authorize actions and complete the request"]
#[derive(Debug, PartialEq, Eq)]
pub struct ExecutionTicket {
    pub(crate) lineage: Lineage,
    pub(crate) request_id: RequestId,
    pub(crate) site: SiteId,
    pub(crate) grant: GrantId,
    pub(crate) run: u32,
    pub(crate) next_action: u32,
    pub(crate) connection: u32,
    pub(crate) scopes: ScopeSet,
    pub(crate) client_id: String,
    pub(crate) client_name: Option<String>,
    /// The person's approval that let the action last authorized run, if
    /// one did: given back when that action is withdrawn
    /// ([`crate::Engine::withdraw_action`]).
    pub(crate) approved: Option<approval::Approved>,
}

impl ExecutionTicket {
    /// A copy for one attempt of an operation that may run again (a store
    /// conflict): the caller's ticket stays untouched until an attempt
    /// commits. Not `Clone`, so that callers cannot hold two.
    pub(crate) fn duplicate(&self) -> Self {
        Self {
            lineage: self.lineage,
            request_id: self.request_id,
            site: self.site.clone(),
            grant: self.grant,
            run: self.run,
            next_action: self.next_action,
            connection: self.connection,
            scopes: self.scopes.clone(),
            client_id: self.client_id.clone(),
            client_name: self.client_name.clone(),
            approved: self.approved,
        }
    }

    /// The request.
    #[must_use]
    pub fn request_id(&self) -> RequestId {
        self.request_id
    }

    /// The position of the next action the run will ask for.
    #[must_use]
    pub fn next_seq(&self) -> u32 {
        self.next_action
    }

    /// The tab connection to dispatch the run's actions to; for a server
    /// run, the number of the executor it was dispatched to
    /// ([`crate::executor::ExecutorId::get`]).
    #[must_use]
    pub fn connection(&self) -> u32 {
        self.connection
    }

    /// The run number (1 for the first run, then one more per resume).
    #[must_use]
    pub fn run(&self) -> u32 {
        self.run
    }
}

/// A page of outcomes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutcomePage {
    /// The outcomes, by position.
    pub outcomes: Vec<Outcome>,
    /// The `outcomeCursor` of the next page; `None` at the end.
    pub next: Option<String>,
    /// How many outcomes the request has.
    pub total: u32,
}

/// A terminal request as a client reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredResult {
    /// The request.
    pub request_id: RequestId,
    /// How it ended.
    pub end: End,
    /// Effects may have happened beyond the confirmed outcomes.
    pub unknown_tail: bool,
    /// When it ended.
    pub finished: Timestamp,
    /// A page of its outcomes.
    pub outcomes: OutcomePage,
}

impl StoredResult {
    /// The JSON a client receives:
    ///
    /// ```json
    /// {"ok": true, "requestId": "…", "status": "done", "result": …,
    ///  "outcomes": [{"seq": 0, "kind": "…", "effect": "write", "ok": true, "summary": "…"}],
    ///  "outcomeCursor": "…" | null, "unknownTail": false}
    /// ```
    ///
    /// A business failure is `"ok": true, "result": {"error": {"code", "message"}}`;
    /// a protocol failure is `"ok": false, "error": {"code", "message"}`.
    #[must_use]
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "requestId": alloc::format!("{}", self.request_id),
            "status": "done",
            "outcomes": self.outcomes.outcomes.iter().map(Outcome::to_json).collect::<Vec<_>>(),
            "outcomeCursor": self.outcomes.next,
            "unknownTail": self.unknown_tail,
        });
        self.end.write_json(&mut v);
        v
    }
}

/// What [`crate::Engine::begin`] answers when the call is accepted.
#[must_use]
#[derive(Debug, PartialEq, Eq)]
pub enum BeginAnswer {
    /// Run the code now; the ticket authorizes its actions.
    Run(ExecutionTicket),
    /// A run of this request is in progress.
    ExecutionPending(RequestId),
    /// The request waits for the user.
    ApprovalPending(ApprovalPrompt),
    /// The request ended; here is its result.
    Stored(StoredResult),
}

impl BeginAnswer {
    /// The JSON for the pending answers and stored results (`None` for
    /// [`BeginAnswer::Run`], which the caller answers after the run):
    /// `{"ok": true, "requestId": …, "status": "execution_pending"}` or
    /// `{"ok": true, "requestId": …, "status": "approval_pending", "approval": {…}}`.
    #[must_use]
    pub fn to_json(&self) -> Option<Value> {
        match self {
            Self::Run(_) => None,
            Self::ExecutionPending(id) => Some(json!({
                "ok": true,
                "requestId": alloc::format!("{id}"),
                "status": "execution_pending",
            })),
            Self::ApprovalPending(p) => Some(json!({
                "ok": true,
                "requestId": alloc::format!("{}", p.request_id),
                "status": "approval_pending",
                "approval": p.to_json(),
            })),
            Self::Stored(s) => Some(s.to_json()),
        }
    }
}

/// Where the user reconnects a tab: the data of the link in `no_live_tab`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconnectLink {
    /// The site.
    pub site: SiteId,
    /// The consent page or, without one, the first allowed origin's root.
    pub url: Option<String>,
}

/// Why [`crate::Engine::begin`] refused a call: a protocol failure that is
/// not recorded (the same id is judged afresh), except where noted.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BeginError {
    /// The call's parameters are malformed: `INVALID_PARAMS`.
    Invalid(LedgerError),
    /// The id is bound to other code: `REPLAY_DETECTED`.
    ReplayDetected,
    /// The id's result was deleted (or its grant revoked): `result_expired`.
    ResultExpired,
    /// The request needs scopes the token lacks: 403 with this challenge.
    InsufficientScope(Challenge),
    /// The grant was revoked: `SESSION_REVOKED`.
    SessionRevoked,
    /// The grant expired: `SESSION_EXPIRED`.
    SessionExpired,
    /// Too many calls: `RATE_LIMITED`; retry in exactly this many ms.
    RateLimited {
        /// Milliseconds until a retry is allowed.
        retry_after_ms: u64,
    },
    /// The connection has this many undecided requests already:
    /// `ACTION_UNAVAILABLE`. Nothing was evicted.
    TooManyUndecided {
        /// The limit.
        limit: u32,
    },
    /// No connected tab: `no_live_tab`, with the reconnect link.
    NoLiveTab(ReconnectLink),
    /// [`crate::Engine::begin_server`] on behalf of an executor whose lease
    /// is not live (it lapsed, was swept or stopped): renew it
    /// ([`crate::Engine::renew_executor`]) before running calls on it.
    /// `ACTION_UNAVAILABLE` (503); nothing was stored, and the same id is
    /// judged afresh.
    ExecutorNotLive,
    /// The host said the call needs scopes its site does not declare (these):
    /// no token can ever carry them, so it is the server's mistake, not the
    /// client's. `server_error` (500), checked before anything is written.
    UndeclaredScope(ScopeSet),
    /// The site is switched off: 503 `temporarily_unavailable`.
    Unavailable {
        /// Seconds for `Retry-After`.
        retry_after_secs: u32,
    },
    /// The caller holds an agent token, not a grant: `ACTION_UNAVAILABLE`.
    /// A call runs in the user's connected tab, and only an OAuth grant has
    /// one (a tab connects to a grant); an agent token may search and
    /// describe skills only. The rule is the ledger's: an adapter that
    /// verified an agent token answers `execute` with this.
    AgentToken,
    /// The store failed; nothing changed.
    Store(StoreError),
}

impl From<StoreError> for BeginError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl From<LedgerError> for BeginError {
    fn from(e: LedgerError) -> Self {
        Self::Invalid(e)
    }
}

impl fmt::Display for BeginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Invalid(e) => write!(f, "{e}"),
            Self::ReplayDetected => f.write_str("requestId was already used with different code"),
            Self::ResultExpired => f.write_str("the result of this requestId has expired"),
            Self::InsufficientScope(_) => f.write_str("the token lacks a scope this call needs"),
            Self::SessionRevoked => f.write_str("the session was revoked"),
            Self::SessionExpired => f.write_str("the session expired"),
            Self::RateLimited { retry_after_ms } => {
                write!(f, "too many calls; retry after {retry_after_ms} ms")
            }
            Self::TooManyUndecided { limit } => {
                write!(f, "{limit} requests are still undecided; finish some first")
            }
            Self::NoLiveTab(_) => f.write_str("no connected tab; reconnect one"),
            Self::ExecutorNotLive => {
                f.write_str("this server instance cannot run calls now; retry later")
            }
            Self::UndeclaredScope(_) => {
                f.write_str("the call needs a scope this site does not declare")
            }
            Self::Unavailable { .. } => {
                f.write_str("external agents are switched off for this site")
            }
            Self::AgentToken => f.write_str(
                "execute runs in a connected tab, which needs an OAuth connection; \
                 agent tokens can search and describe skills only",
            ),
            Self::Store(_) => f.write_str("temporary server error"),
        }
    }
}

impl WireError for BeginError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::Invalid(e) => e.code(),
            Self::ReplayDetected => ErrorCode::ReplayDetected,
            Self::ResultExpired => ErrorCode::ResultExpired,
            Self::InsufficientScope(_) => ErrorCode::InsufficientScope,
            Self::SessionRevoked => ErrorCode::SessionRevoked,
            Self::SessionExpired => ErrorCode::SessionExpired,
            Self::RateLimited { .. } => ErrorCode::RateLimited,
            Self::TooManyUndecided { .. } | Self::AgentToken | Self::ExecutorNotLive => {
                ErrorCode::ActionUnavailable
            }
            Self::NoLiveTab(_) => ErrorCode::NoLiveTab,
            Self::Unavailable { .. } => ErrorCode::TemporarilyUnavailable,
            Self::UndeclaredScope(_) | Self::Store(_) => ErrorCode::ServerError,
        }
    }

    fn http_status(&self) -> u16 {
        match self {
            Self::InsufficientScope(c) => c.status,
            _ => self.code().http_status(),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for BeginError {}

impl BeginError {
    /// The protocol-failure JSON:
    /// `{"ok": false, "requestId": …, "error": {"code", "message", "retryAfterMs"?, "reconnectUrl"?}}`.
    /// An adapter also sends `WWW-Authenticate` for
    /// [`BeginError::InsufficientScope`].
    #[must_use]
    pub fn to_json(&self, request_id: Option<RequestId>) -> Value {
        let mut body = failure_json(self.code(), &alloc::format!("{self}"), request_id);
        let error = &mut body["error"];
        match self {
            Self::RateLimited { retry_after_ms } => error["retryAfterMs"] = json!(retry_after_ms),
            Self::NoLiveTab(link) => error["reconnectUrl"] = json!(link.url),
            _ => {}
        }
        body
    }
}

/// The protocol-failure JSON of an `execute` call with wire code `code`:
/// `{"ok": false, "requestId": …, "error": {"code", "message"}}`. The one
/// place this shape is built: [`BeginError::to_json`] and
/// [`TicketError::to_json`] start from it, and an adapter that refuses a
/// call for a reason of its own (a malformed program, a server fault) uses
/// it, so every failure reads the same.
#[must_use]
pub fn failure_json(code: ErrorCode, message: &str, request_id: Option<RequestId>) -> Value {
    json!({
        "ok": false,
        "requestId": request_id.map(|id| alloc::format!("{id}")),
        "error": {"code": code.as_str(), "message": message},
    })
}

/// What [`crate::Engine::authorize_action`] answers.
#[must_use]
#[derive(Debug, PartialEq, Eq)]
pub enum ActionVerdict {
    /// Perform the action now, then [`crate::Engine::record_outcome`].
    Run(ExecutionTicket),
    /// The action ran in an earlier run: use this outcome, do not run it.
    Replay(ExecutionTicket, Outcome),
    /// The run stops: the user must approve (`approval_pending`).
    ApprovalPending(ApprovalPrompt),
    /// The run stops: the token lacks a scope (403 with this challenge).
    /// Not a final result: the same id resumes once the scope is granted.
    InsufficientScope(Challenge),
    /// The run stops: the action drives page controls and the tab is hidden
    /// (`tab_not_visible`). The same id resumes.
    TabNotVisible,
}

/// Why a ticket operation ([`crate::Engine::authorize_action`],
/// [`crate::Engine::record_outcome`], [`crate::Engine::complete`]) failed.
/// The three share it because they fail the same ways.
#[non_exhaustive]
#[derive(Debug, PartialEq, Eq)]
pub enum TicketError {
    /// The ticket is not the request's current run (the request was
    /// resumed, parked or ended meanwhile). The run must stop.
    Stale,
    /// The ledger ended the request just now; the run must stop.
    Ended(Failure),
    /// Out of order (an outcome with no action authorized, an action while
    /// another awaits its outcome): the ticket is handed back unchanged.
    OutOfOrder(Box<ExecutionTicket>),
    /// Invalid input; the ticket is handed back unchanged.
    Invalid(Box<ExecutionTicket>, LedgerError),
    /// The store failed; nothing changed, and the ticket is lost: the
    /// request ends when its tab connection does (a tab run), or when its
    /// executor stops or its lease lapses (a server run).
    Store(StoreError),
}

impl From<StoreError> for TicketError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl fmt::Display for TicketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stale => f.write_str("the run is no longer current"),
            Self::Ended(why) => f.write_str(why.message()),
            Self::OutOfOrder(_) => f.write_str("ticket operations out of order"),
            Self::Invalid(_, e) => write!(f, "{e}"),
            Self::Store(_) => f.write_str("temporary server error"),
        }
    }
}

impl WireError for TicketError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::Stale | Self::OutOfOrder(_) => ErrorCode::ExpectationFailed,
            Self::Ended(why) => why.code(),
            Self::Invalid(_, e) => e.code(),
            Self::Store(_) => ErrorCode::ServerError,
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for TicketError {}

impl TicketError {
    /// The protocol-failure JSON a run that stopped with this answers, for
    /// the request `request_id` (see [`failure_json`]).
    #[must_use]
    pub fn to_json(&self, request_id: RequestId) -> Value {
        failure_json(self.code(), &alloc::format!("{self}"), Some(request_id))
    }
}

/// Why [`crate::Engine::outcomes`] refused a page.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutcomesError {
    /// Bad cursor: `INVALID_PARAMS`.
    Invalid(LedgerError),
    /// No such request for this lineage.
    NotFound,
    /// The result is gone: `result_expired`.
    ResultExpired,
    /// The request is still undecided: outcomes are read from its result.
    Pending,
    /// The grant is not live.
    Session(Failure),
    /// The store failed.
    Store(StoreError),
}

impl From<StoreError> for OutcomesError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl fmt::Display for OutcomesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Invalid(e) => write!(f, "{e}"),
            Self::NotFound => f.write_str("no such request"),
            Self::ResultExpired => f.write_str("the result of this requestId has expired"),
            Self::Pending => f.write_str("the request has no result yet"),
            Self::Session(why) => f.write_str(why.message()),
            Self::Store(_) => f.write_str("temporary server error"),
        }
    }
}

impl WireError for OutcomesError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::Invalid(e) => e.code(),
            Self::NotFound => ErrorCode::InvalidParams,
            Self::ResultExpired => ErrorCode::ResultExpired,
            Self::Pending => ErrorCode::ExpectationFailed,
            Self::Session(f) => f.code(),
            Self::Store(_) => ErrorCode::ServerError,
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for OutcomesError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_protocol_failure_has_one_shape() {
        let id = RequestId::from_bytes([7; 16]);
        let plain = failure_json(ErrorCode::ActionNotFound, "no such skill", Some(id));
        assert_eq!(
            plain,
            json!({
                "ok": false,
                "requestId": alloc::format!("{id}"),
                "error": {"code": "ACTION_NOT_FOUND", "message": "no such skill"},
            })
        );
        let agent = BeginError::AgentToken.to_json(None);
        assert_eq!(agent["ok"], json!(false));
        assert_eq!(agent["requestId"], Value::Null);
        assert_eq!(agent["error"]["code"], json!("ACTION_UNAVAILABLE"));
        let stale = TicketError::Stale.to_json(id);
        assert_eq!(
            stale,
            failure_json(
                TicketError::Stale.code(),
                &alloc::format!("{}", TicketError::Stale),
                Some(id)
            )
        );
    }

    #[test]
    fn protocol_failures_carry_their_client_data() {
        let e = BeginError::RateLimited { retry_after_ms: 42 };
        let v = e.to_json(Some(RequestId::from_bytes([0; 16])));
        assert_eq!(v["ok"], false);
        assert_eq!(v["error"]["code"], "RATE_LIMITED");
        assert_eq!(v["error"]["retryAfterMs"], 42);
        assert_eq!(e.http_status(), 429);
        assert_eq!(BeginError::ReplayDetected.http_status(), 409);
        assert_eq!(BeginError::ResultExpired.code().as_str(), "result_expired");
        let link = ReconnectLink {
            site: SiteId::parse("s").unwrap(),
            url: Some("https://a.example/".into()),
        };
        let v = BeginError::NoLiveTab(link).to_json(None);
        assert_eq!(v["error"]["code"], "no_live_tab");
        assert_eq!(v["error"]["reconnectUrl"], "https://a.example/");
    }
}
