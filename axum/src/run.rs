//! [`Portcullis::run_once`]: the execution ledger around one action the
//! server performs for an agent.
//!
//! ```text
//! run_once ─ begin_server ─┬─ Run ─ authorize_action ─┬─ Run ─ the action ─ record_outcome ─ complete ─▶ Done / Failed
//!                          │                           ├─ Replay (ran before a crash) ─ complete ─▶ its result
//!                          │                           └─ ApprovalPending ─▶ wait for the person ─▶ begin again
//!                          ├─ ApprovalPending / ExecutionPending ─▶ wait (bounded) ─▶ begin again, or Pending
//!                          └─ Stored ─▶ the stored result (never runs again)
//! ```
//!
//! **At most once.** The request id is bound to the action (kind, effect,
//! scope, exact arguments) at the first call; the same id with another
//! action is `REPLAY_DETECTED`. The action runs only with a ticket the
//! ledger issued in a durable commit, and its outcome is recorded before
//! the request completes, so a retry, a racing caller, another instance
//! or a restart finds the run in progress, its recorded outcome, or its
//! result — never a reason to run it again. A process that dies while the
//! action runs leaves the request `Running` under its executor's lease:
//! when the lease lapses (or at the next start on a single-process store)
//! the request ends with `unknownTail`, because the action may have
//! happened; it is not run again.
//!
//! **The action runs to its end** on a task of its own, even if the agent
//! that asked goes away; a panic in it is recorded as the action's failure.
//!
//! **Approvals.** A write (or an action of unknown effect) waits for the
//! signed-in user's decision on the approvals page, bound to the exact
//! arguments and used once. `run_once` waits for it up to
//! [`Builder::approval_wait`](crate::Builder::approval_wait) and then
//! answers `approval_pending` with the page's URL; the agent calls again
//! with the same request id, and the approved action runs then.
//!
//! **Calls that name no request id** ([`Portcullis::run_joining`], an rmcp
//! `Call` without one): most clients cannot carry an id from one call to
//! the next, so the agent just calls again. An identical call (same grant
//! lineage, kind, effect, scope and exact arguments) made while an earlier
//! one is unfinished joins it: the same card, one run, the result for
//! whichever call comes once it is approved. Once that request has ended,
//! an identical call is a new write and asks again.

use std::future::Future;

use portcullis_core::approval::ApprovalPrompt;
use portcullis_core::bearer::Challenge;
use portcullis_core::engine::Principal;
use portcullis_core::error::ErrorCode;
use portcullis_core::grant::GrantId;
use portcullis_core::ledger::{
    Action, ActionVerdict, BeginAnswer, BeginError, BusinessError, Completion, End, ExecuteParams,
    ExecutionTicket, LedgerError, OutcomeStatus, Report, RequestId, StoredResult, TicketError,
    failure_json,
};
use portcullis_core::scope::ScopeSet;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::guard::Agent;
use crate::store::HostStore;
use crate::{Portcullis, now, now_ms};

/// How often a waiting `run_once` looks at the ledger again when nothing
/// in this process told it of a change (another instance of a fleet may
/// have decided, finished, or died).
const LOOK_AGAIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Longest outcome summary the ledger keeps (its contract: outcomes are
/// compact). A result longer than this is still returned and stored whole
/// as the request's result; only the outcome record notes it.
const MAX_SUMMARY: usize = portcullis_core::ledger::MAX_SUMMARY_LEN;

/// A request whose state changed: a decision, a run's end. Waiting callers
/// look again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Event {
    pub(crate) grant: GrantId,
    pub(crate) request: RequestId,
}

/// In-process wake-ups of `run_once` callers (on a fleet, a caller on
/// another instance finds the change when its wait ends).
pub(crate) struct Events(broadcast::Sender<Event>);

impl Default for Events {
    fn default() -> Self {
        Self(broadcast::channel(256).0)
    }
}

impl Events {
    pub(crate) fn announce(&self, grant: GrantId, request: RequestId) {
        let _ = self.0.send(Event { grant, request });
    }
}

/// What [`Portcullis::run_once`] answers: a typed [`Outcome`], and the
/// ledger's JSON answer for the agent ([`Ran::answer`]), the same shape
/// every Portcullis tool answers with.
#[must_use]
#[derive(Debug)]
pub struct Ran<T> {
    outcome: Outcome<T>,
    answer: Value,
    request_id: RequestId,
}

/// How a `run_once` call ended.
#[derive(Debug)]
#[non_exhaustive]
pub enum Outcome<T> {
    /// The action ran, now or at an earlier call with this request id, and
    /// returned this.
    Done(T),
    /// The action ran and failed with this business error (now or earlier).
    Failed(BusinessError),
    /// Not yet: waiting for the person's approval, or a run of this request
    /// is in progress. Call again with the same request id.
    Pending(Pending),
    /// Refused, or ended without a result: see [`Refused::code`].
    Refused(Refused),
}

/// A request that is not finished.
#[derive(Debug, Clone)]
pub struct Pending {
    /// The request.
    pub request_id: RequestId,
    /// The approval it waits for; `None` while a run is in progress.
    pub approval: Option<ApprovalPrompt>,
    /// Where the person approves it.
    pub approval_url: Option<String>,
}

/// A call refused before the action ran, or a request the ledger ended
/// without a result.
#[derive(Debug, Clone)]
pub struct Refused {
    /// The stable code (`PERMISSION_DENIED`, `REPLAY_DETECTED`,
    /// `insufficient_scope`, `SESSION_REVOKED`, `ACTION_UNAVAILABLE`, …).
    pub code: ErrorCode,
    /// What happened, for the agent.
    pub message: String,
    /// Effects may have happened that no outcome confirms (the run was cut
    /// off while the action ran): do not assume it did not run.
    pub unknown_tail: bool,
    challenge: Option<Challenge>,
}

impl<T> Ran<T> {
    /// How it ended.
    pub fn outcome(&self) -> &Outcome<T> {
        &self.outcome
    }

    /// How it ended, by value.
    pub fn into_outcome(self) -> Outcome<T> {
        self.outcome
    }

    /// The ledger's JSON answer for the agent: `{"ok": true, "requestId",
    /// "status": "done", "result": …}`, `{"ok": true, "status":
    /// "approval_pending", "approval": {…}, "approvalUrl": …}`, or `{"ok":
    /// false, "error": {"code", "message"}}`.
    pub fn answer(&self) -> &Value {
        &self.answer
    }

    /// The ledger request this answer is about: the id the call named, or
    /// for a call that named none ([`Portcullis::run_joining`], an rmcp
    /// `Call` without a request id) the unfinished identical request it
    /// joined, else the fresh one it opened. A refusal before the ledger
    /// looked at any request names the id the call was made under.
    pub fn request_id(&self) -> RequestId {
        self.request_id
    }

    /// Whether the answer is a protocol failure (`"ok": false`).
    pub fn is_error(&self) -> bool {
        matches!(self.outcome, Outcome::Refused(_))
    }

    /// The scope challenge a refusal carries, for the guard.
    pub(crate) fn challenge(&self) -> Option<&Challenge> {
        match &self.outcome {
            Outcome::Refused(r) => r.challenge.as_ref(),
            _ => None,
        }
    }

    fn refused(code: ErrorCode, message: &str, id: RequestId) -> Self {
        Self {
            request_id: id,
            answer: failure_json(code, message, Some(id)),
            outcome: Outcome::Refused(Refused {
                code,
                message: message.into(),
                unknown_tail: false,
                challenge: None,
            }),
        }
    }

    fn internal(id: RequestId) -> Self {
        Self::refused(ErrorCode::ServerError, "temporary server error", id)
    }

    fn begin_error(e: &BeginError, id: RequestId) -> Self {
        use portcullis_core::WireError as _;
        let challenge = match e {
            BeginError::InsufficientScope(c) => Some(c.clone()),
            _ => None,
        };
        Self {
            request_id: id,
            answer: e.to_json(Some(id)),
            outcome: Outcome::Refused(Refused {
                code: e.code(),
                message: e.to_string(),
                unknown_tail: false,
                challenge,
            }),
        }
    }

    fn ticket_error(e: &TicketError, id: RequestId) -> Self {
        use portcullis_core::WireError as _;
        Self {
            request_id: id,
            answer: e.to_json(id),
            outcome: Outcome::Refused(Refused {
                code: e.code(),
                message: e.to_string(),
                unknown_tail: matches!(e, TicketError::Ended(_)),
                challenge: None,
            }),
        }
    }

    fn pending(answer: &BeginAnswer, approval_url: Option<String>, id: RequestId) -> Self {
        let mut json = answer.to_json().unwrap_or(Value::Null);
        let approval = match answer {
            BeginAnswer::ApprovalPending(p) => Some(p.clone()),
            _ => None,
        };
        if approval.is_some()
            && let Some(url) = &approval_url
        {
            json["approvalUrl"] = json!(url);
            json["message"] = json!(
                "The user must approve this action at approvalUrl; then call again with the \
                 same requestId."
            );
        }
        Self {
            request_id: id,
            answer: json,
            outcome: Outcome::Pending(Pending {
                request_id: id,
                approval,
                approval_url,
            }),
        }
    }
}

impl<T: DeserializeOwned> Ran<T> {
    /// A stored (finished) request's answer.
    fn stored(result: &StoredResult) -> Self {
        let answer = result.to_json();
        let outcome = match &result.end {
            End::Returned(text) => {
                let Ok(value) = serde_json::from_str(text) else {
                    tracing::error!("a stored result does not read as the action's type");
                    return Self::internal(result.request_id);
                };
                Outcome::Done(value)
            }
            End::Business(e) => Outcome::Failed(e.clone()),
            End::Failed(f) => Outcome::Refused(Refused {
                code: f.code(),
                message: f.message().into(),
                unknown_tail: result.unknown_tail,
                challenge: None,
            }),
        };
        Self {
            outcome,
            answer,
            request_id: result.request_id,
        }
    }
}

/// What one pass of the ledger's loop came to.
enum Step<T> {
    /// The answer.
    Answer(Ran<T>),
    /// Wait for the person (or a run in progress), then begin again.
    Wait(Ran<T>),
}

impl<S: HostStore> Portcullis<S> {
    /// Runs `action` for `agent` at most once per `request_id` (under
    /// retries, races, crashes and restarts: see the [crate docs](crate)):
    /// `run` performs it and returns its result, or
    /// a business error (a failure that is part of the result, stored and
    /// answered again on a repeat).
    ///
    /// The ledger checks first: the token must carry the action's scope (a
    /// missing one answers `403 insufficient_scope` through the guard, and
    /// the same id resumes after the client steps up); a write asks the
    /// person and waits up to the builder's approval wait. `action`'s
    /// arguments are what the person is shown: pass the exact arguments
    /// `run` will act on.
    pub async fn run_once<T, F, Fut>(
        &self,
        agent: &Agent,
        request_id: RequestId,
        action: Action,
        run: F,
    ) -> Ran<T>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, BusinessError>> + Send + 'static,
    {
        let wait = self.inner.approval_wait;
        self.run_once_waiting(agent, request_id, false, action, wait, run)
            .await
    }

    /// Runs `action` for `agent` for a call that names **no request id**
    /// (its client cannot carry one from a call to the next): an identical
    /// call (the same grant lineage, and the same kind, effect, scope and
    /// exact arguments) made while an earlier one is unfinished **joins**
    /// it — the same approval card, one run, and the result for whichever
    /// call comes once it is approved — and once that request has ended an
    /// identical call is a new write that asks again (see
    /// [`ExecuteParams::joining`]). Otherwise as [`Portcullis::run_once`],
    /// under a fresh request id; [`Ran::request_id`] names the request the
    /// call ran under, joined or new.
    pub async fn run_joining<T, F, Fut>(&self, agent: &Agent, action: Action, run: F) -> Ran<T>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, BusinessError>> + Send + 'static,
    {
        let wait = self.inner.approval_wait;
        let fresh = RequestId::random(&mut rand::rng());
        self.run_once_waiting(agent, fresh, true, action, wait, run)
            .await
    }

    /// [`Portcullis::run_once`] waiting at most `wait` for a person's
    /// decision (or a run in progress) before it answers pending; with
    /// `join`, for a call that names no request id (`request_id` is a fresh
    /// one), as [`Portcullis::run_joining`].
    pub(crate) async fn run_once_waiting<T, F, Fut>(
        &self,
        agent: &Agent,
        request_id: RequestId,
        join: bool,
        action: Action,
        wait: std::time::Duration,
        run: F,
    ) -> Ran<T>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, BusinessError>> + Send + 'static,
    {
        let Some(principal) = agent.principal().cloned() else {
            return Ran::begin_error(&BeginError::AgentToken, request_id);
        };
        // A task of its own: a caller that goes away never leaves a ticket
        // dropped between an effect and its record.
        let me = self.clone();
        let ran = tokio::spawn(async move {
            me.drive(&principal, request_id, join, action, wait, run)
                .await
        })
        .await
        .unwrap_or_else(|_| Ran::internal(request_id));
        if let Some(c) = ran.challenge() {
            agent.raise(c.clone());
        }
        ran
    }

    /// The loop of `run_once`: begin; run, or wait (bounded) and begin again.
    async fn drive<T, F, Fut>(
        &self,
        principal: &Principal,
        id: RequestId,
        join: bool,
        action: Action,
        wait: std::time::Duration,
        run: F,
    ) -> Ran<T>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, BusinessError>> + Send + 'static,
    {
        let mut params = match request_params(id, &action) {
            Ok(p) if join => p.joining(),
            Ok(p) => p,
            Err(e) => return Ran::begin_error(&BeginError::Invalid(e), id),
        };
        let mut needed = ScopeSet::new();
        if needed.insert(action.scope()).is_err() {
            return Ran::begin_error(&BeginError::Invalid(LedgerError::InvalidAction), id);
        }
        let mut events = self.inner.events.0.subscribe();
        let deadline = tokio::time::Instant::now() + wait;
        let mut run = Some(run);
        loop {
            let step = self
                .step(principal, &params, &needed, &action, &mut run)
                .await;
            match step {
                Step::Answer(ran) => return ran,
                Step::Wait(pending) => {
                    // From here on the call is the request it waits for:
                    // the one it opened, or the unfinished identical one it
                    // joined (whose end it must not mistake for a reason to
                    // open another).
                    params.request_id = pending.request_id;
                    params.join = false;
                    let id = params.request_id;
                    if !self.wait(&mut events, principal.grant, id, deadline).await {
                        return pending;
                    }
                }
            }
        }
    }

    /// One pass: begin, and what the answer says (about the request it
    /// names: a call that names no request id may have joined another).
    async fn step<T, F, Fut>(
        &self,
        principal: &Principal,
        params: &ExecuteParams,
        needed: &ScopeSet,
        action: &Action,
        run: &mut Option<F>,
    ) -> Step<T>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, BusinessError>> + Send + 'static,
    {
        let id = params.request_id;
        let (p, q, n) = (principal.clone(), params.clone(), needed.clone());
        let executor = self.inner.executor;
        let begun = self
            .write(move |me, txn| {
                me.inner
                    .engine()
                    .begin_server_in(txn, &p, &q, &n, executor, now_ms())
            })
            .await;
        match begun {
            Err(_) => Step::Answer(Ran::internal(id)),
            Ok(Err(e)) => Step::Answer(Ran::begin_error(&e, id)),
            Ok(Ok(BeginAnswer::Run(ticket))) => {
                self.perform(ticket, principal.grant, action, run).await
            }
            Ok(Ok(BeginAnswer::Stored(result))) => Step::Answer(Ran::stored(&result)),
            Ok(Ok(pending)) => {
                let id = match &pending {
                    BeginAnswer::ApprovalPending(prompt) => prompt.request_id,
                    BeginAnswer::ExecutionPending(joined) => *joined,
                    _ => id,
                };
                Step::Wait(Ran::pending(&pending, Some(self.approval_url(id)), id))
            }
        }
    }

    /// Where the person approves request `id`.
    fn approval_url(&self, id: RequestId) -> String {
        format!("{}#r-{id}", self.approvals_url())
    }

    /// Waits for an event on `(grant, id)` until `deadline`: true when one
    /// came or [`LOOK_AGAIN`] passed (look again), false when the time is
    /// up. The events are this process's: a decision or a run's end on
    /// another instance of a fleet (or a lapsed lease of one that died) is
    /// found by looking again.
    async fn wait(
        &self,
        events: &mut broadcast::Receiver<Event>,
        grant: GrantId,
        id: RequestId,
        deadline: tokio::time::Instant,
    ) -> bool {
        let wanted = Event { grant, request: id };
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return false;
        }
        let slice = deadline.min(now + LOOK_AGAIN);
        loop {
            match tokio::time::timeout_at(slice, events.recv()).await {
                Err(_) => return slice < deadline,
                Ok(Err(broadcast::error::RecvError::Closed)) => return false,
                Ok(Ok(e)) if e == wanted => return true,
                Ok(Ok(_)) => {}
                // Missed some: one of them may be ours.
                Ok(Err(broadcast::error::RecvError::Lagged(_))) => return true,
            }
        }
    }

    /// Authorizes the action on `ticket` and, if it may run now, runs it
    /// and records its outcome and the request's result.
    async fn perform<T, F, Fut>(
        &self,
        ticket: ExecutionTicket,
        grant: GrantId,
        action: &Action,
        run: &mut Option<F>,
    ) -> Step<T>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, BusinessError>> + Send + 'static,
    {
        let id = ticket.request_id();
        let verdict = self.authorize(ticket, action.clone()).await;
        let verdict = match verdict {
            Ok(v) => v,
            Err(ran) => return Step::Answer(ran),
        };
        match verdict {
            ActionVerdict::Run(ticket) => {
                // Taken only here: the action runs at most once per call.
                let Some(run) = run.take() else {
                    return Step::Answer(Ran::internal(id));
                };
                let ran = self.run_and_record(ticket, run).await;
                self.inner.events.announce(grant, id);
                Step::Answer(ran)
            }
            ActionVerdict::Replay(ticket, outcome) => {
                // It ran before the last stop, which came before the
                // request completed: complete it from the recorded outcome.
                let completion = match outcome.status {
                    OutcomeStatus::Ok => Completion::Value(
                        serde_json::from_str(&outcome.summary).unwrap_or(Value::Null),
                    ),
                    OutcomeStatus::Failed(code) => {
                        Completion::Error(BusinessError::new(code, outcome.summary))
                    }
                };
                let ran = self.complete_with(ticket, completion).await;
                self.inner.events.announce(grant, id);
                Step::Answer(ran)
            }
            ActionVerdict::ApprovalPending(prompt) => {
                tracing::debug!(request = %id, "run_once: approval asked");
                Step::Wait(Ran::pending(
                    &BeginAnswer::ApprovalPending(prompt),
                    Some(self.approval_url(id)),
                    id,
                ))
            }
            ActionVerdict::InsufficientScope(c) => {
                Step::Answer(Ran::begin_error(&BeginError::InsufficientScope(c), id))
            }
            ActionVerdict::TabNotVisible => Step::Answer(Ran::internal(id)),
        }
    }

    /// A ticket operation through the writer: its value, or the answer for
    /// its failure.
    async fn ticket_op<V, F>(&self, id: RequestId, op: F) -> Result<V, Ran<()>>
    where
        V: Send + 'static,
        F: for<'t, 'b, 'w> FnOnce(
                &Self,
                Option<
                    &mut crate::store::Txn<'t, 'b, <S as portcullis_core::store::Store>::Write<'w>>,
                >,
            ) -> Result<V, TicketError>
            + Send
            + 'static,
    {
        let me = self.clone();
        let answer = tokio::task::spawn_blocking(move || {
            let inner = me.clone();
            me.inner.writer.commit_once(move |txn| op(&inner, txn))
        })
        .await;
        match answer {
            Ok(Ok(Ok(v))) => Ok(v),
            Ok(Ok(Err(e))) => Err(Ran::ticket_error(&e, id)),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "run_once: the store failed");
                Err(Ran::internal(id))
            }
            Err(_) => Err(Ran::internal(id)),
        }
    }

    /// `authorize_action` for the action on `ticket`.
    async fn authorize<T>(
        &self,
        ticket: ExecutionTicket,
        action: Action,
    ) -> Result<ActionVerdict, Ran<T>> {
        let id = ticket.request_id();
        self.ticket_op(id, move |me, txn| {
            let engine = &me.inner.engine();
            match txn {
                Some(txn) => engine.authorize_action_in(txn, ticket, &action, now()),
                None => engine.authorize_action(ticket, &action, now()),
            }
        })
        .await
        .map_err(Ran::retyped)
    }

    /// Runs the authorized action on a task of its own, records its
    /// outcome, and completes the request with its result.
    async fn run_and_record<T, F, Fut>(&self, ticket: ExecutionTicket, run: F) -> Ran<T>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, BusinessError>> + Send + 'static,
    {
        let id = ticket.request_id();
        let result = match tokio::spawn(async move { run().await }).await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(request = %id, panicked = e.is_panic(), "run_once: the action did not finish");
                Err(BusinessError::new(
                    "ACTION_PANICKED",
                    "the action stopped before it finished; it may have had effects",
                ))
            }
        };
        let limit = self.inner.engine().policy().max_result_bytes as usize;
        let completion = match &result {
            Ok(value) => match serde_json::to_value(value) {
                Ok(v) if v.to_string().len() <= limit => Completion::Value(v),
                Ok(_) => Completion::Error(BusinessError::new(
                    "BAD_RESULT",
                    format!("the action's result is larger than {limit} bytes"),
                )),
                Err(_) => Completion::Error(BusinessError::new(
                    "RESULT_NOT_JSON",
                    "the action's result could not be written as JSON",
                )),
            },
            Err(e) => Completion::Error(e.clone()),
        };
        let report = match &completion {
            Completion::Value(v) => {
                let text = v.to_string();
                if text.len() <= MAX_SUMMARY {
                    Report::ok(text)
                } else {
                    Report::ok(json!({"note": "the result is kept with the request"}).to_string())
                }
            }
            Completion::Error(e) => Report::failed(e.code.clone(), truncated(&e.message)),
        };
        let recorded = self
            .ticket_op(id, move |me, mut txn| {
                let engine = &me.inner.engine();
                let mut record = |ticket, report| match txn.as_deref_mut() {
                    Some(txn) => engine.record_outcome_in(txn, ticket, report, now()),
                    None => engine.record_outcome(ticket, report, now()),
                };
                match record(ticket, report) {
                    // A report the ledger refuses (a malformed business
                    // code): the action did run; record that it failed.
                    Err(TicketError::Invalid(ticket, _)) => record(
                        *ticket,
                        Report::failed("BAD_RESULT", "the action's result could not be recorded"),
                    ),
                    other => other,
                }
            })
            .await;
        let ticket = match recorded {
            Ok(t) => t,
            Err(ran) => {
                tracing::error!(request = %id, "run_once: the action ran but its outcome was not recorded");
                return ran.retyped_unknown();
            }
        };
        let ran = self.complete_with(ticket, completion).await;
        match (ran.outcome, result) {
            // The value just returned, not a copy read back.
            (Outcome::Done(_), Ok(value)) => Ran {
                outcome: Outcome::Done(value),
                answer: ran.answer,
                request_id: ran.request_id,
            },
            (outcome, _) => Ran {
                outcome,
                answer: ran.answer,
                request_id: ran.request_id,
            },
        }
    }

    /// Completes the request with `completion` (a result the ledger refuses
    /// — too large, a malformed code — ends it with a business error
    /// saying so).
    async fn complete_with<T: DeserializeOwned>(
        &self,
        ticket: ExecutionTicket,
        completion: Completion,
    ) -> Ran<T> {
        let id = ticket.request_id();
        let stored = self
            .ticket_op(id, move |me, mut txn| {
                let engine = &me.inner.engine();
                let mut complete = |ticket, completion: &Completion| match txn.as_deref_mut() {
                    Some(txn) => engine.complete_in(txn, ticket, completion, now()),
                    None => engine.complete(ticket, completion, now()),
                };
                match complete(ticket, &completion) {
                    Err(TicketError::Invalid(ticket, e)) => complete(
                        *ticket,
                        &Completion::Error(BusinessError::new("BAD_RESULT", e.to_string())),
                    ),
                    other => other,
                }
            })
            .await;
        match stored {
            Ok(result) => Ran::stored(&result),
            Err(ran) => ran.retyped(),
        }
    }
}

impl Ran<()> {
    /// A refusal (which carries no value) as an answer of another type.
    fn retyped<U>(self) -> Ran<U> {
        let outcome = match self.outcome {
            Outcome::Refused(r) => Outcome::Refused(r),
            Outcome::Pending(p) => Outcome::Pending(p),
            Outcome::Failed(e) => Outcome::Failed(e),
            Outcome::Done(()) => Outcome::Refused(Refused {
                code: ErrorCode::ServerError,
                message: "temporary server error".into(),
                unknown_tail: false,
                challenge: None,
            }),
        };
        Ran {
            outcome,
            answer: self.answer,
            request_id: self.request_id,
        }
    }

    /// [`Ran::retyped`] for a failure after the action ran: whatever the
    /// store said, its effects may have happened.
    fn retyped_unknown<U>(self) -> Ran<U> {
        let mut ran = self.retyped::<U>();
        if let Outcome::Refused(r) = &mut ran.outcome {
            r.unknown_tail = true;
            r.message = "the action ran but its result could not be recorded; it will not run \
                         again"
                .into();
            ran.answer = failure_json(r.code, &r.message, None);
        }
        ran
    }
}

/// `message` cut to the longest outcome summary, at a character boundary.
fn truncated(message: &str) -> String {
    let mut end = message.len().min(MAX_SUMMARY);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message[..end].to_owned()
}

/// The ledger's parameters of a `run_once` call: the request id, bound to
/// the action's kind, effect, scope and exact arguments (its "code").
fn request_params(id: RequestId, action: &Action) -> Result<ExecuteParams, LedgerError> {
    let arguments = std::str::from_utf8(action.arguments().unwrap_or_default())
        .map_err(|_| LedgerError::InvalidAction)?;
    let code = json!({
        "kind": action.kind(),
        "effect": action.effect().as_str(),
        "scope": action.scope(),
        "arguments": arguments,
    })
    .to_string();
    ExecuteParams::new(&id.to_string(), code, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_at_a_character_boundary() {
        let m = "é".repeat(MAX_SUMMARY);
        let t = truncated(&m);
        assert!(t.len() <= MAX_SUMMARY && t.len() >= MAX_SUMMARY - 1);
        assert!(m.starts_with(&t));
        assert_eq!(truncated("short"), "short");
    }
}
