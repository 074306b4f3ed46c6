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
use std::pin::Pin;
use std::time::Duration;

use portcullis_core::Own;
use portcullis_core::approval::ApprovalPrompt;
use portcullis_core::bearer::Challenge;
use portcullis_core::engine::Principal;
use portcullis_core::error::ErrorCode;
use portcullis_core::grant::GrantId;
use portcullis_core::ledger::{
    Action, ActionVerdict, BeginAnswer, BeginError, BusinessError, Caller, Completion, End,
    ExecuteParams, ExecutionTicket, LedgerError, OutcomeStatus, Report, RequestId, StoredResult,
    TicketError, failure_json,
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
const LOOK_AGAIN: Duration = Duration::from_secs(2);

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
/// another instance finds the change when its wait ends). `None`: every
/// waiting caller looks again.
pub(crate) struct Events(broadcast::Sender<Option<Event>>);

impl Default for Events {
    fn default() -> Self {
        Self(broadcast::channel(256).0)
    }
}

impl Events {
    pub(crate) fn announce(&self, grant: GrantId, request: RequestId) {
        let _ = self.0.send(Some(Event { grant, request }));
    }

    /// Every waiting caller looks again.
    pub(crate) fn announce_all(&self) {
        let _ = self.0.send(None);
    }
}

/// Changes of requests announced in this process, from the moment of
/// [`Portcullis::request_events`]: a change on another instance of a fleet
/// is not among them, so a waiter reads the ledger again when its wait
/// ends.
#[derive(Debug)]
pub struct RequestEvents(broadcast::Receiver<Option<Event>>);

impl RequestEvents {
    /// Waits at most `within` for a change of request `id` of `grant` (or
    /// one that may concern every request); whether one came.
    pub async fn changed(&mut self, grant: GrantId, id: RequestId, within: Duration) -> bool {
        let wanted = Event { grant, request: id };
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.0.recv()).await {
                Err(_) | Ok(Err(broadcast::error::RecvError::Closed)) => return false,
                Ok(Ok(e)) if e.is_none_or(|e| e == wanted) => return true,
                Ok(Ok(_)) => {}
                // Missed some: one of them may be ours.
                Ok(Err(broadcast::error::RecvError::Lagged(_))) => return true,
            }
        }
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
    /// The action withdrew before acting ([`Act::Withdrew`]): nothing ran,
    /// the request waits to resume under the same id (its approval kept).
    Withdrawn(RequestId),
}

/// What a server action of [`Portcullis::run_for`] did.
#[derive(Debug)]
pub enum Act<T> {
    /// It ran (or may have): its result, or a business error. Recorded,
    /// and answered again on every repeat.
    Did(Result<T, BusinessError>),
    /// It did nothing and needs something first (a downstream server
    /// asked the agent for input before acting): nothing is recorded, the
    /// request stays undecided with its approval, and the same request id
    /// resumes it.
    Withdrew,
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

    /// The scope challenge a refusal for a missing scope carries: the
    /// guard answers with it (`403 insufficient_scope`); a host that ran
    /// the action outside the guard ([`Portcullis::run_for`]) answers with
    /// it itself.
    pub fn challenge(&self) -> Option<&Challenge> {
        match &self.outcome {
            Outcome::Refused(r) => r.challenge.as_ref(),
            _ => None,
        }
    }

    pub(crate) fn refused(code: ErrorCode, message: &str, id: RequestId) -> Self {
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

    pub(crate) fn internal(id: RequestId) -> Self {
        Self::refused(ErrorCode::ServerError, "temporary server error", id)
    }

    pub(crate) fn begin_error(e: &BeginError, id: RequestId) -> Self {
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

    pub(crate) fn pending(
        answer: &BeginAnswer,
        approval_url: Option<String>,
        id: RequestId,
    ) -> Self {
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
    pub(crate) fn stored(result: &StoredResult) -> Self {
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
pub(crate) enum Step<T> {
    /// The answer.
    Answer(Ran<T>),
    /// Wait for the person (or a run in progress), then begin again.
    Wait(Ran<T>),
    /// The run was cut off (its executor went away): begin again, which
    /// answers what the ledger made of it.
    Again,
}

/// How long a run's caller waits.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Waits {
    /// For a person's decision, before answering `approval_pending`.
    pub(crate) approval: Duration,
    /// For a run in progress elsewhere (another call of the request),
    /// before answering `execution_pending`.
    pub(crate) running: Duration,
    /// For its own run, before answering `execution_pending` while the run
    /// goes on; `None`: until it ends.
    pub(crate) answer_within: Option<Duration>,
}

/// What an admitted run performs, and on which executor: one action of
/// this process ([`OnServer`]), or a program's steps in the user's tab
/// ([`crate::tab`]).
pub(crate) trait Work<T>: Send + 'static {
    /// Whether the run's executor is the user's connected tab (else this
    /// process).
    fn on_tab(&self) -> bool;
    /// Where the person approves request `id`.
    fn approval_url<S: HostStore>(&self, p: &Portcullis<S>, id: RequestId) -> String;
    /// Performs the run the ledger admitted on `ticket`.
    fn perform<'a, S: HostStore>(
        &'a mut self,
        p: &'a Portcullis<S>,
        principal: &'a Principal,
        ticket: ExecutionTicket,
    ) -> impl Future<Output = Step<T>> + Send + 'a;
}

/// A server action's body as the ledger's machinery carries it: boxed once
/// where a caller hands it over ([`Portcullis::run_once`],
/// [`Portcullis::run_joining`], [`Portcullis::run_for`], the rmcp glue's
/// `Call::run`), so that the machinery is compiled once per result type,
/// not once per closure.
pub(crate) type ActionBody<T> =
    Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = Act<T>> + Send>> + Send>;

/// `run` as an [`ActionBody`].
pub(crate) fn action_body<T, F, Fut>(run: F) -> ActionBody<T>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Act<T>> + Send + 'static,
{
    Box::new(move || Box::pin(run()))
}

/// `run`, an action that always acts (its business result), as an
/// [`ActionBody`].
pub(crate) fn acting<T, F, Fut>(run: F) -> ActionBody<T>
where
    T: 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, BusinessError>> + Send + 'static,
{
    action_body(move || async move { Act::Did(run().await) })
}

/// One action this process performs: `run_once`'s closure.
struct OnServer<T> {
    action: Action,
    /// Taken when the action runs: it runs at most once per call.
    run: Option<ActionBody<T>>,
}

impl<T> Work<T> for OnServer<T>
where
    T: Serialize + DeserializeOwned + Send + 'static,
{
    fn on_tab(&self) -> bool {
        false
    }

    fn approval_url<S: HostStore>(&self, p: &Portcullis<S>, id: RequestId) -> String {
        p.approval_url(id)
    }

    /// Authorizes the action and, if it may run now, runs it and records
    /// its outcome and the request's result.
    async fn perform<'a, S: HostStore>(
        &'a mut self,
        p: &'a Portcullis<S>,
        principal: &'a Principal,
        ticket: ExecutionTicket,
    ) -> Step<T> {
        let (id, grant) = (ticket.request_id(), principal.grant);
        let verdict = match p.verdict(ticket, &self.action, p.approval_url(id)).await {
            Ok(v) => v,
            Err(step) => return step,
        };
        let ran = match verdict {
            ActionVerdict::Run(ticket) => {
                let Some(run) = self.run.take() else {
                    return Step::Answer(Ran::internal(id));
                };
                p.run_and_record(ticket, run).await
            }
            ActionVerdict::Replay(ticket, outcome) => {
                // It ran before the last stop, which came before the
                // request completed: complete it from the recorded
                // outcome.
                p.complete_with(ticket, replayed(&outcome.status, &outcome.summary))
                    .await
            }
            // A server action never drives the page (the ledger refuses
            // such an action on the server).
            _ => return Step::Answer(Ran::internal(id)),
        };
        p.ended(grant, id);
        Step::Answer(ran)
    }
}

/// The completion a recorded outcome (`status`, `summary`) stands for: a
/// run that recorded it and stopped before the request completed, or a
/// failed step that ends its run.
pub(crate) fn replayed(status: &OutcomeStatus, summary: &str) -> Completion {
    match status {
        OutcomeStatus::Ok => {
            Completion::Value(serde_json::from_str(summary).unwrap_or(Value::Null))
        }
        OutcomeStatus::Failed(code) => Completion::Error(BusinessError::new(code.clone(), summary)),
    }
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
        self.run_once_waiting(agent, request_id, false, action, wait, acting(run))
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
        self.run_once_waiting(agent, fresh, true, action, wait, acting(run))
            .await
    }

    /// [`Portcullis::run_once`] waiting at most `wait` for a person's
    /// decision (or a run in progress) before it answers pending; with
    /// `join`, for a call that names no request id (`request_id` is a fresh
    /// one), as [`Portcullis::run_joining`].
    pub(crate) async fn run_once_waiting<T>(
        &self,
        agent: &Agent,
        request_id: RequestId,
        join: bool,
        action: Action,
        wait: Duration,
        run: ActionBody<T>,
    ) -> Ran<T>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
    {
        let ran = self
            .run_server(agent.principal(), request_id, join, action, wait, run)
            .await;
        if let Some(c) = ran.challenge() {
            agent.raise(c.clone());
        }
        ran
    }

    /// [`Portcullis::run_once`] for a caller the host verified itself
    /// rather than through the guard (a signed-in user's own page acting
    /// under one of their grants, whose session and ownership the host
    /// checked: never a grant named by an unauthenticated request), waiting
    /// at most `wait` for a person's decision, with an action that may
    /// [withdraw](Act::Withdrew) before acting. A missing scope is a
    /// refusal whose [`Ran::challenge`] the host answers with.
    pub async fn run_for<T, F, Fut>(
        &self,
        principal: &Principal,
        request_id: RequestId,
        action: Action,
        wait: Duration,
        run: F,
    ) -> Ran<T>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Act<T>> + Send + 'static,
    {
        let run = action_body(run);
        self.run_server(Some(principal), request_id, false, action, wait, run)
            .await
    }

    /// A server action's run for `principal` (`None`: a minted agent
    /// token, which has no grant to run under).
    async fn run_server<T>(
        &self,
        principal: Option<&Principal>,
        request_id: RequestId,
        join: bool,
        action: Action,
        wait: Duration,
        run: ActionBody<T>,
    ) -> Ran<T>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
    {
        let params = match request_params(request_id, &action) {
            Ok(p) if join => p.joining(),
            Ok(p) => p,
            Err(e) => return Ran::begin_error(&BeginError::Invalid(e), request_id),
        };
        let mut needed = ScopeSet::new();
        if needed.insert(action.scope()).is_err() {
            return Ran::begin_error(&BeginError::Invalid(LedgerError::InvalidAction), request_id);
        }
        let work = OnServer {
            action,
            run: Some(run),
        };
        let waits = Waits {
            approval: wait,
            running: wait,
            answer_within: None,
        };
        self.run_work(principal, params, needed, work, waits).await
    }

    /// Runs `work` for `principal` under `params` (the request, bound to
    /// its code) on its own task: a caller that goes away never leaves a
    /// ticket dropped between an effect and its record. Answers once the
    /// run ends, or pending once the waits say so (the run goes on).
    pub(crate) async fn run_work<T, W>(
        &self,
        principal: Option<&Principal>,
        params: ExecuteParams,
        needed: ScopeSet,
        work: W,
        waits: Waits,
    ) -> Ran<T>
    where
        T: DeserializeOwned + Send + 'static,
        W: Work<T>,
    {
        let request_id = params.request_id;
        let Some(principal) = principal.cloned() else {
            return Ran::begin_error(&BeginError::AgentToken, request_id);
        };
        let me = self.clone();
        let task =
            tokio::spawn(async move { me.drive(&principal, params, &needed, work, waits).await });
        match waits.answer_within {
            None => task.await.unwrap_or_else(|_| Ran::internal(request_id)),
            // Still running when the caller's time is up: it answers
            // pending and the run goes on to its end on its task.
            Some(within) => match tokio::time::timeout(within, task).await {
                Ok(done) => done.unwrap_or_else(|_| Ran::internal(request_id)),
                Err(_) => {
                    Ran::pending(&BeginAnswer::ExecutionPending(request_id), None, request_id)
                }
            },
        }
    }

    /// The loop of every run: begin; perform, or wait (bounded) and begin
    /// again.
    async fn drive<T, W>(
        &self,
        principal: &Principal,
        mut params: ExecuteParams,
        needed: &ScopeSet,
        mut work: W,
        waits: Waits,
    ) -> Ran<T>
    where
        T: DeserializeOwned + Send + 'static,
        W: Work<T>,
    {
        let mut events = self.inner.events.0.subscribe();
        let start = tokio::time::Instant::now();
        let (approval_deadline, running_deadline) = (start + waits.approval, start + waits.running);
        // A run cut off mid-way (its executor lost) is begun once more, to
        // answer what the ledger made of it.
        let mut again = 1;
        loop {
            let step = self.step(principal, &params, needed, &mut work).await;
            match step {
                Step::Answer(ran) => return ran,
                Step::Again if again > 0 => again -= 1,
                Step::Again => return Ran::internal(params.request_id),
                Step::Wait(pending) => {
                    // From here on the call is the request it waits for:
                    // the one it opened, or the unfinished identical one it
                    // joined (whose end it must not mistake for a reason to
                    // open another).
                    params.request_id = pending.request_id;
                    params.join = false;
                    let id = params.request_id;
                    let deadline = match &pending.outcome {
                        Outcome::Pending(Pending {
                            approval: Some(_), ..
                        }) => approval_deadline,
                        _ => running_deadline,
                    };
                    if !self.wait(&mut events, principal.grant, id, deadline).await {
                        return pending;
                    }
                }
            }
        }
    }

    /// One pass: begin, and what the answer says (about the request it
    /// names: a call that names no request id may have joined another).
    async fn step<T, W>(
        &self,
        principal: &Principal,
        params: &ExecuteParams,
        needed: &ScopeSet,
        work: &mut W,
    ) -> Step<T>
    where
        T: DeserializeOwned + Send + 'static,
        W: Work<T>,
    {
        let id = params.request_id;
        let (p, q, n) = (principal.clone(), params.clone(), needed.clone());
        let executor = self.inner.executor;
        let on_tab = work.on_tab();
        let begun = self
            .write(move |me, txn| {
                let engine = me.inner.engine();
                if on_tab {
                    // This process drives the tab run: its lease tells
                    // every instance of a fleet whether the run is lost.
                    engine.begin_driven(txn, &p, &q, &n, Caller::Client, executor, now_ms())
                } else {
                    engine.begin_server(txn, &p, &q, &n, executor, now_ms())
                }
            })
            .await;
        match begun {
            Err(_) => Step::Answer(Ran::internal(id)),
            Ok(Err(e)) => Step::Answer(Ran::begin_error(&e, id)),
            Ok(Ok(BeginAnswer::Run(ticket))) => work.perform(self, principal, ticket).await,
            Ok(Ok(BeginAnswer::Stored(result))) => Step::Answer(Ran::stored(&result)),
            Ok(Ok(pending)) => {
                let id = match &pending {
                    BeginAnswer::ApprovalPending(prompt) => prompt.request_id,
                    BeginAnswer::ExecutionPending(joined) => *joined,
                    _ => id,
                };
                let url = work.approval_url(self, id);
                Step::Wait(Ran::pending(&pending, Some(url), id))
            }
        }
    }

    /// Where the person approves request `id` on the approvals page.
    pub(crate) fn approval_url(&self, id: RequestId) -> String {
        format!("{}#r-{id}", self.approvals_url())
    }

    /// Waits for an event on `(grant, id)` until `deadline`: true when one
    /// came or [`LOOK_AGAIN`] passed (look again), false when the time is
    /// up. The events are this process's: a decision or a run's end on
    /// another instance of a fleet (or a lapsed lease of one that died) is
    /// found by looking again.
    async fn wait(
        &self,
        events: &mut broadcast::Receiver<Option<Event>>,
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
                Ok(Ok(e)) if e.is_none_or(|e| e == wanted) => return true,
                Ok(Ok(_)) => {}
                // Missed some: one of them may be ours.
                Ok(Err(broadcast::error::RecvError::Lagged(_))) => return true,
            }
        }
    }

    /// Authorizes the next action of the run on `ticket`: the verdict to
    /// act on, or (for a verdict that stops the run) its answer.
    pub(crate) async fn verdict<T>(
        &self,
        ticket: ExecutionTicket,
        action: &Action,
        approval_url: String,
    ) -> Result<ActionVerdict, Step<T>> {
        let id = ticket.request_id();
        match self.authorize(ticket, action.clone()).await {
            Err(ran) => Err(Step::Answer(ran)),
            Ok(ActionVerdict::ApprovalPending(prompt)) => {
                tracing::debug!(request = %id, "run: approval asked");
                Err(Step::Wait(Ran::pending(
                    &BeginAnswer::ApprovalPending(prompt),
                    Some(approval_url),
                    id,
                )))
            }
            Ok(ActionVerdict::InsufficientScope(c)) => Err(Step::Answer(Ran::begin_error(
                &BeginError::InsufficientScope(c),
                id,
            ))),
            Ok(v) => Ok(v),
        }
    }

    /// Records `report` on `ticket` (a report the ledger refuses, a
    /// malformed business code, is recorded as `fallback`: the action did
    /// run); what was recorded.
    pub(crate) async fn record(
        &self,
        ticket: ExecutionTicket,
        report: Report,
        fallback: Report,
    ) -> Result<(ExecutionTicket, Report), Ran<()>> {
        let id = ticket.request_id();
        self.ticket_op(id, move |me, mut txn| {
            let engine = &me.inner.engine();
            let mut record = |ticket, report: &Report| match txn.as_deref_mut() {
                Some(txn) => engine.record_outcome(txn, ticket, report.clone(), now()),
                None => engine.record_outcome(Own, ticket, report.clone(), now()),
            };
            match record(ticket, &report) {
                Err(TicketError::Invalid(ticket, _)) => {
                    record(*ticket, &fallback).map(|t| (t, fallback))
                }
                other => other.map(|t| (t, report)),
            }
        })
        .await
    }

    /// A request changed outside the crate's own routes (the host's page
    /// decided its approval): the runs of this process waiting on
    /// `(grant, request)` look again now rather than at their next look.
    pub fn announce(&self, grant: GrantId, request: RequestId) {
        self.inner.events.announce(grant, request);
    }

    /// Something may have ended many requests at once (a grant revoked
    /// where its id is not known, such as a token at the revocation
    /// endpoint): every waiting run of this process looks again now.
    pub fn announce_all(&self) {
        self.inner.events.announce_all();
    }

    /// Withdraws the action authorized on `ticket`: nothing ran.
    async fn withdraw<T>(&self, ticket: ExecutionTicket) -> Ran<T> {
        let id = ticket.request_id();
        let withdrawn = self
            .ticket_op(id, move |me, txn| {
                let engine = &me.inner.engine();
                match txn {
                    Some(txn) => engine.withdraw_action(txn, ticket, now()),
                    None => engine.withdraw_action(Own, ticket, now()),
                }
            })
            .await;
        match withdrawn {
            Ok(()) => Ran {
                request_id: id,
                answer: json!({"ok": true, "requestId": id.to_string(), "status": "withdrawn"}),
                outcome: Outcome::Withdrawn(id),
            },
            Err(ran) => ran.retyped(),
        }
    }

    /// A subscription to the changes of requests announced in this process
    /// (a decision, a run's end, [`Portcullis::announce`]), for a host that
    /// waits on a request itself.
    #[must_use]
    pub fn request_events(&self) -> RequestEvents {
        RequestEvents(self.inner.events.0.subscribe())
    }

    /// Announces the end of a run: callers waiting on it look again.
    pub(crate) fn ended(&self, grant: GrantId, id: RequestId) {
        self.inner.events.announce(grant, id);
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
        // Here, when no other write is in flight; else on the blocking pool.
        let inner = self.clone();
        let answer = match self
            .inner
            .writer
            .commit_once_alone(move |txn| op(&inner, txn))
        {
            Ok(done) => Ok(done),
            Err(op) => {
                let me = self.clone();
                tokio::task::spawn_blocking(move || me.inner.writer.commit_once(op)).await
            }
        };
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
                Some(txn) => engine.authorize_action(txn, ticket, &action, now()),
                None => engine.authorize_action(Own, ticket, &action, now()),
            }
        })
        .await
        .map_err(Ran::retyped)
    }

    /// Runs the authorized action on a task of its own, records its
    /// outcome, and completes the request with its result.
    pub(crate) async fn run_and_record<T>(
        &self,
        ticket: ExecutionTicket,
        run: ActionBody<T>,
    ) -> Ran<T>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
    {
        let id = ticket.request_id();
        let result = match tokio::spawn(async move { run().await }).await {
            Ok(Act::Did(r)) => r,
            Ok(Act::Withdrew) => return self.withdraw(ticket).await,
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
                    Some(txn) => engine.record_outcome(txn, ticket, report, now()),
                    None => engine.record_outcome(Own, ticket, report, now()),
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
    pub(crate) async fn complete_with<T: DeserializeOwned>(
        &self,
        ticket: ExecutionTicket,
        completion: Completion,
    ) -> Ran<T> {
        let id = ticket.request_id();
        let stored = self
            .ticket_op(id, move |me, mut txn| {
                let engine = &me.inner.engine();
                let mut complete = |ticket, completion: &Completion| match txn.as_deref_mut() {
                    Some(txn) => engine.complete(txn, ticket, completion, now()),
                    None => engine.complete(Own, ticket, completion, now()),
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
    pub(crate) fn retyped<U>(self) -> Ran<U> {
        let outcome = match self.outcome {
            Outcome::Refused(r) => Outcome::Refused(r),
            Outcome::Pending(p) => Outcome::Pending(p),
            Outcome::Failed(e) => Outcome::Failed(e),
            Outcome::Withdrawn(id) => Outcome::Withdrawn(id),
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
    pub(crate) fn retyped_unknown<U>(self) -> Ran<U> {
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
