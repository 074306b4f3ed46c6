//! The user's connected tab as a run's executor: [`Portcullis::run_in_tab`]
//! runs a [`Program`] (one or more actions) through the execution ledger,
//! each action performed by the page through the host's [`TabChannel`].
//!
//! ```text
//! run_in_tab ─ begin (tab) ─┬─ Run ─ per step: authorize_action ─┬─ Run ─ TabChannel::perform ─ record_outcome
//!                           │                                    ├─ Replay (done at an earlier run) ─ its recorded outcome
//!                           │                                    └─ ApprovalPending ─▶ wait for the person ─▶ begin again
//!                           │        then complete ─▶ the stored result
//!                           ├─ ApprovalPending / ExecutionPending ─▶ wait (bounded) ─▶ begin again, or pending
//!                           └─ Stored ─▶ the stored result (never runs again)
//! ```
//!
//! The rules are [`Portcullis::run_once`]'s (at most once per request id,
//! the approval bound to the exact action and used once, the run going on
//! on its own task when its caller goes away), with the tab's own: the
//! ledger dispatches the run to the grant's live tab connection (no live
//! tab: `no_live_tab`), an action that drives the page needs the tab
//! visible (`tab_not_visible`), and a run whose tab connection ends or
//! moves is cut off: its result says `unknownTail`, and nothing runs
//! again. A program resumed after an approval replays the steps it already
//! performed from their recorded outcomes.
//!
//! **Fleets.** The run is driven by this process (its task holds the run's
//! ticket), and the ledger records it as the run's driver under this
//! process's executor lease
//! ([`portcullis_core::Engine::begin_driven`]): a repeat reaching
//! another instance is `execution_pending` while this process lives, and
//! once its lease lapses the run ends with `unknownTail` (at that repeat,
//! or by any instance's sweep of lost runs). The host keeps nothing of its
//! own for it.
//!
//! The crate does not know how the page is reached: the host's
//! [`TabChannel`] hands each authorized action to the page (a long-poll
//! mailbox, a job table shared by a fleet) and returns its report.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use portcullis_core::engine::Principal;
use portcullis_core::error::ErrorCode;
use portcullis_core::grant::GrantId;
use portcullis_core::ledger::{
    Action, ActionVerdict, Completion, ExecuteParams, ExecutionTicket, OutcomeStatus, Report,
    RequestId,
};
use portcullis_core::scope::ScopeSet;
use serde_json::{Value, json};

use crate::guard::Agent;
use crate::run::{Ran, Step, Waits, Work, replayed};
use crate::{HostStore, Portcullis};

/// One authorized action for the page to perform.
#[derive(Clone, Debug)]
pub struct TabJob {
    /// The signed-in user whose tab performs it.
    pub subject: String,
    /// The grant the run belongs to.
    pub grant: GrantId,
    /// The tab connection the ledger dispatched the run to: a page on
    /// another connection must not perform it.
    pub connection: u32,
    /// The request.
    pub request_id: RequestId,
    /// The action's position in the request's outcomes.
    pub seq: u32,
    /// The action, with its exact arguments.
    pub action: Action,
}

/// A future a [`TabChannel`] answers with.
pub type TabFuture = Pin<Box<dyn Future<Output = Option<Report>> + Send + 'static>>;

/// How the host reaches the user's connected tab: it hands a [`TabJob`] to
/// the page and returns the page's report.
pub trait TabChannel: Send + Sync + 'static {
    /// Hands `job` to the page on `job.connection` and waits for its
    /// report. `None` when the page can no longer report (the connection
    /// ended or moved, the job could not be queued): the ledger then ends
    /// the run with `unknownTail`, since the page may have acted. The
    /// future may be dropped (the run's task ending early): withdraw the
    /// job then.
    fn perform(&self, job: TabJob) -> TabFuture;

    /// Where the person approves request `id` (the page the tab shows its
    /// approvals on). It carries no credential: the page needs the user's
    /// own session.
    fn approval_url(&self, id: RequestId) -> String;

    /// An approval for `subject` was just asked: their tab should show it
    /// now. Does nothing by default.
    fn approval_asked(&self, subject: &str) {
        let _ = subject;
    }
}

/// What a run in the tab performs: the request (its id, bound to `code`)
/// and its actions in order.
#[derive(Clone, Debug)]
pub struct Program {
    params: ExecuteParams,
    steps: Vec<Action>,
    needed: ScopeSet,
    label: &'static str,
}

/// Why a [`Program`] was refused: the ledger's error for it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProgramError {
    /// It has no step.
    Empty,
    /// Its steps need more scopes than a scope set holds.
    TooManyScopes,
}

impl std::fmt::Display for ProgramError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Empty => "a program needs at least one step",
            Self::TooManyScopes => "the program's steps need too many scopes",
        })
    }
}

impl std::error::Error for ProgramError {}

impl Program {
    /// The request `params` (its id, the code it is bound to, the outcome
    /// page to read: [`ExecuteParams::parse_json`] reads an `execute`
    /// envelope) performing `steps` in order. The ledger checks the scopes
    /// of every step before the tab ([`portcullis_core::Engine::begin_needing`]).
    pub fn new(params: ExecuteParams, steps: Vec<Action>) -> Result<Self, ProgramError> {
        if steps.is_empty() {
            return Err(ProgramError::Empty);
        }
        let mut needed = ScopeSet::new();
        for step in &steps {
            needed
                .insert(step.scope())
                .map_err(|_| ProgramError::TooManyScopes)?;
        }
        Ok(Self {
            params,
            steps,
            needed,
            label: "kind",
        })
    }

    /// The key that names each step's kind in the result (`"kind"` by
    /// default): the result is `[{<key>: kind, "result": …}, …]`.
    #[must_use]
    pub fn label_steps(mut self, key: &'static str) -> Self {
        self.label = key;
        self
    }

    /// The request.
    #[must_use]
    pub fn request_id(&self) -> RequestId {
        self.params.request_id
    }
}

/// How long [`Portcullis::run_in_tab`] waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TabWaits {
    /// For a person's decision before answering `approval_pending` (zero:
    /// answer at once).
    pub approval: Duration,
    /// For the run (its own, or one in progress for the request) before
    /// answering `execution_pending`; the run goes on.
    pub running: Duration,
}

impl<S: HostStore> Portcullis<S> {
    /// Runs `program` for `agent` in the user's connected tab, reached
    /// through `tab`, at most once per request id (see the [module
    /// docs](crate::tab)). Each step is authorized by the ledger (its
    /// scope, the tab's visibility for an action that drives the page, a
    /// person's approval of a write); the page performs it and its report
    /// is recorded before the next. The answer's value is the steps'
    /// results, `[{"kind": …, "result": …}, …]` (see
    /// [`Program::label_steps`]); a step that fails ends the run with its
    /// business error.
    ///
    /// A missing scope answers `403 insufficient_scope` through the guard
    /// (the same id resumes after the client steps up); no live tab answers
    /// `no_live_tab`; a hidden tab `tab_not_visible` (the same id resumes
    /// once it shows).
    pub async fn run_in_tab(
        &self,
        agent: &Agent,
        program: Program,
        tab: Arc<dyn TabChannel>,
        waits: TabWaits,
    ) -> Ran<Value> {
        let Program {
            params,
            steps,
            needed,
            label,
        } = program;
        let work = InTab { steps, label, tab };
        let waits = Waits {
            approval: waits.approval,
            running: waits.running,
            answer_within: Some(waits.running),
        };
        let ran = self
            .run_work(agent.principal(), params, needed, work, waits)
            .await;
        if let Some(c) = ran.challenge() {
            agent.raise(c.clone());
        }
        ran
    }
}

/// A program's steps, performed in the tab.
struct InTab {
    steps: Vec<Action>,
    label: &'static str,
    tab: Arc<dyn TabChannel>,
}

/// How a step ended.
struct Performed {
    ticket: ExecutionTicket,
    report: Report,
}

impl InTab {
    /// One step: authorized, then performed (or replayed); `Err` with what
    /// stops the run.
    async fn step<S: HostStore>(
        &self,
        p: &Portcullis<S>,
        principal: &Principal,
        ticket: ExecutionTicket,
        action: &Action,
    ) -> Result<Performed, Step<Value>> {
        let id = ticket.request_id();
        let seq = ticket.next_seq();
        let verdict = match p.verdict(ticket, action, self.tab.approval_url(id)).await {
            Ok(v) => v,
            Err(step) => {
                if matches!(step, Step::Wait(_)) {
                    self.tab.approval_asked(&principal.subject);
                }
                return Err(step);
            }
        };
        match verdict {
            ActionVerdict::Run(t) => {
                let job = TabJob {
                    subject: principal.subject.clone(),
                    grant: principal.grant,
                    connection: t.connection(),
                    request_id: id,
                    seq,
                    action: action.clone(),
                };
                // No report: the tab went away. The ticket is dropped; the
                // ledger ends the run (`unknownTail`) with the connection,
                // which the next begin answers.
                let Some(report) = self.tab.perform(job).await else {
                    tracing::debug!(request = %id, "run_in_tab: the tab went away mid-run");
                    return Err(Step::Again);
                };
                let fallback = Report::failed("BAD_REPORT", "the tab's report was invalid");
                match p.record(t, report, fallback).await {
                    Ok((ticket, report)) => Ok(Performed { ticket, report }),
                    Err(ran) => Err(Step::Answer(ran.retyped_unknown())),
                }
            }
            ActionVerdict::Replay(ticket, outcome) => Ok(Performed {
                ticket,
                report: Report {
                    status: outcome.status,
                    summary: outcome.summary,
                },
            }),
            ActionVerdict::TabNotVisible => Err(Step::Answer(Ran::refused(
                ErrorCode::TabNotVisible,
                "this action drives the page: ask the user to show the connected tab, then \
                 call again with the same requestId",
                id,
            ))),
            _ => Err(Step::Answer(Ran::internal(id))),
        }
    }
}

impl Work<Value> for InTab {
    fn on_tab(&self) -> bool {
        true
    }

    fn approval_url<S: HostStore>(&self, _: &Portcullis<S>, id: RequestId) -> String {
        self.tab.approval_url(id)
    }

    async fn perform<'a, S: HostStore>(
        &'a mut self,
        p: &'a Portcullis<S>,
        principal: &'a Principal,
        mut ticket: ExecutionTicket,
    ) -> Step<Value> {
        let id = ticket.request_id();
        let mut results = Vec::with_capacity(self.steps.len());
        for action in &self.steps {
            let done = match self.step(p, principal, ticket, action).await {
                Ok(done) => done,
                Err(step) => return step,
            };
            ticket = done.ticket;
            if let OutcomeStatus::Failed(_) = &done.report.status {
                let failed = replayed(&done.report.status, &done.report.summary);
                let ran = p.complete_with(ticket, failed).await;
                p.ended(principal.grant, id);
                return Step::Answer(ran);
            }
            let result = serde_json::from_str(&done.report.summary)
                .unwrap_or(Value::String(done.report.summary));
            results.push(json!({self.label: action.kind(), "result": result}));
        }
        let ran = p
            .complete_with(ticket, Completion::Value(Value::Array(results)))
            .await;
        p.ended(principal.grant, id);
        Step::Answer(ran)
    }
}
