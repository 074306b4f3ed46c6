//! The `execute` tool: the ledger's `begin`, and a driver that runs the
//! admitted code step by step in the connected tab.
//!
//! ```text
//! execute ─ parse envelope + program ─ Engine::begin ─┬─ Run(ticket) ─▶ spawn driver, wait ≤ WAIT
//!                                                     ├─ ExecutionPending ─▶ wait on its driver ≤ WAIT
//!                                                     └─ approval_pending / stored result / failure
//! driver, per step: Engine::authorize_action ─┬─ Run    ─▶ job to the tab, its report ─▶ record_outcome
//!                                             ├─ Replay ─▶ the recorded summary (never runs again)
//!                                             └─ approval / scope / hidden tab: the run stops
//!                   then Engine::complete ─▶ the stored result
//! ```
//!
//! The driver owns the [`ExecutionTicket`] between HTTP requests; a call that
//! outlasts [`WAIT`] answers `execution_pending` and the client calls again
//! with the same id. Every answer's JSON is the core's: its answers, its
//! errors' JSON, and for the server's own refusals (a malformed program, a
//! fault) the core's `ledger::failure_json`.

use std::sync::Arc;
use std::time::Duration;

use portcullis_core::engine::Principal;
use portcullis_core::error::ErrorCode;
use portcullis_core::grant::GrantId;
use portcullis_core::ledger::{
    Action, ActionVerdict, BeginAnswer, BeginError, BusinessError, Caller, Completion,
    ExecuteParams, ExecutionTicket, OutcomeStatus, Report, RequestId, StoredResult, TicketError,
};
use portcullis_core::scope::ScopeSet;
use portcullis_core::tab::Dispatch;
use serde_json::{Value, json};

use super::AppWrite;
use super::Shared;
pub(crate) use super::answer::{Answer, failure};
use super::jobs::Claim;
use super::relay::DriverEnd;
use super::skills::{self, Step};
use super::work::{Job, TabReport};
use crate::clock;

/// How long an `execute` call waits for its run before answering
/// `execution_pending`.
pub(crate) const WAIT: Duration = Duration::from_secs(15);
/// How often an `execute` whose run another instance holds tries to
/// claim it again.
const CLAIM_RETRY: Duration = Duration::from_millis(200);
/// How often a driver waiting for the tab checks that its connection is
/// still the live one.
const CHECK: Duration = Duration::from_secs(2);

fn internal(id: Option<RequestId>) -> Answer {
    failure(ErrorCode::ServerError, "temporary server error", id)
}

fn ticket_failure(e: &TicketError, id: RequestId) -> Answer {
    Answer::ok(e.to_json(id))
}

/// `execute` for a verified principal with the tool's `arguments`,
/// waiting at most `wait` for a run it starts or finds in progress before
/// it answers `execution_pending` ([`WAIT`] for a client that calls again;
/// less for one that polls a task).
pub(crate) async fn execute(
    app: &Shared,
    principal: Principal,
    arguments: &Value,
    wait: Duration,
) -> Answer {
    let Ok(bytes) = serde_json::to_vec(arguments) else {
        return internal(None);
    };
    let params = match ExecuteParams::parse_json(&bytes) {
        Ok(p) => p,
        Err(e) => return Answer::begin_error(&BeginError::Invalid(e), None),
    };
    let id = params.request_id;
    let steps = match skills::parse_program(&params.code) {
        Ok(s) => s,
        Err(e) => return failure(e.code, &e.message, Some(id)),
    };
    // The scopes the program's steps need, checked before the tab (see
    // `Engine::begin_needing`).
    let mut needed = ScopeSet::default();
    for step in &steps {
        if needed.insert(step.skill.scope).is_err() {
            return internal(Some(id));
        }
    }
    // A task of its own, so a client that goes away between the claim and
    // its release does not leave the claim held (the driver releases it
    // when it ends, if one was started).
    let app = Arc::clone(app);
    tokio::spawn(async move {
        let grant = principal.grant;
        if let Err(answer) = claim(&app, grant, id).await {
            return answer;
        }
        let answer = admit(&app, principal, params, needed, steps, wait).await;
        if app.relay.driver(grant, id).is_none() {
            app.release_run(grant, id).await;
        }
        answer
    })
    .await
    .unwrap_or_else(|_| internal(Some(id)))
}

/// On a shared database, no claim, no run (see `super::jobs`): claims the
/// run `(grant, id)` for this instance, waiting (at most [`WAIT`]) while
/// another live instance holds it as it begins or drives the run. The
/// answer to give instead when the claim is not had: `execution_pending`
/// after the wait, a server error if the database fails. Whoever claims
/// releases with [`super::App::release_run`] once no driver of the run is
/// left here.
///
/// A claim held by an instance whose lease lapsed is not taken over: that
/// instance died with the run's ticket, so this one ends its lost runs
/// (the sweep's [`super::end_runs_of_dead_instances`]) and claims again;
/// the run then answers with its end (`unknownTail`) rather than
/// `execution_pending` for a run no one drives.
pub(crate) async fn claim(app: &Shared, grant: GrantId, id: RequestId) -> Result<(), Answer> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match app.claim_run(grant, id).await {
            Ok(Claim::Held) => return Ok(()),
            Ok(Claim::Lapsed) => match app.blocking(super::end_runs_of_dead_instances).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "ending the runs of a lapsed instance failed");
                    return Err(internal(Some(id)));
                }
                Err(_) => return Err(internal(Some(id))),
            },
            Ok(Claim::Busy) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(CLAIM_RETRY).await;
            }
            Ok(Claim::Busy) => return Err(pending(id)),
            Err(()) => return Err(internal(Some(id))),
        }
    }
}

/// `execute` once its program parsed (and, on a shared database, its run
/// is claimed): begin, then wait on the run's driver.
async fn admit(
    app: &Shared,
    principal: Principal,
    params: ExecuteParams,
    needed: ScopeSet,
    steps: Vec<Step>,
    wait_at_most: Duration,
) -> Answer {
    let id = params.request_id;
    let needed = Arc::new(needed);
    let principal = Arc::new(principal);
    let params = Arc::new(params);
    // Twice at most: once more when a lost run leaves its answer to the ledger.
    for _ in 0..2 {
        let (p, q, n) = (
            Arc::clone(&principal),
            Arc::clone(&params),
            Arc::clone(&needed),
        );
        let begun = app
            .write(move |app, txn| {
                app.engine()
                    .begin_needing_in(txn, &p, &q, &n, Caller::Client, clock::now_ms())
            })
            .await;
        let rx = match begun {
            Err(_) => return internal(Some(id)),
            Ok(Err(e)) => return Answer::begin_error(&e, Some(id)),
            Ok(Ok(BeginAnswer::Run(ticket))) => {
                tracing::debug!(run = ticket.run(), "execute: run admitted");
                spawn_driver(app, &principal, ticket, steps.clone())
            }
            Ok(Ok(BeginAnswer::ExecutionPending(_))) => {
                match app.relay.driver(principal.grant, id) {
                    Some(rx) => rx,
                    None => return pending(id),
                }
            }
            Ok(Ok(other)) => return Answer::ok(other.to_json().unwrap_or(Value::Null)),
        };
        match wait(rx, wait_at_most).await {
            Some(Some(answer)) => return answer,
            Some(None) => {}
            None => return pending(id),
        }
    }
    pending(id)
}

impl super::App {
    /// On a shared database, claims the run `(grant, id)` for this
    /// instance before it may begin it ([`super::jobs::JobTable::claim_run`]).
    /// Always held on redb (one process).
    async fn claim_run(self: &Arc<Self>, grant: GrantId, id: RequestId) -> Result<Claim, ()> {
        let Some(table) = self.jobs else {
            return Ok(Claim::Held);
        };
        let claimed = self
            .blocking(move |app| {
                table.claim_run(&grant.to_string(), &id.to_string(), app.fanout.instance())
            })
            .await;
        match claimed {
            Ok(Ok(claimed)) => Ok(claimed),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "claiming a run failed");
                Err(())
            }
            Err(_) => Err(()),
        }
    }

    /// Lets go of this instance's claim on the run `(grant, id)`.
    pub(crate) async fn release_run(self: &Arc<Self>, grant: GrantId, id: RequestId) {
        let Some(table) = self.jobs else { return };
        let released = self
            .blocking(move |app| {
                table.release_run(&grant.to_string(), &id.to_string(), app.fanout.instance())
            })
            .await;
        if let Ok(Err(e)) = released {
            tracing::warn!(error = %e, "releasing a run failed");
        }
    }
}

fn pending(id: RequestId) -> Answer {
    Answer::ok(
        BeginAnswer::ExecutionPending(id)
            .to_json()
            .unwrap_or(Value::Null),
    )
}

/// The driver's end, or `None` if it is still running after `at_most`.
async fn wait(
    mut rx: tokio::sync::watch::Receiver<Option<DriverEnd>>,
    at_most: Duration,
) -> Option<Option<Answer>> {
    match tokio::time::timeout(at_most, rx.wait_for(Option::is_some)).await {
        Ok(Ok(end)) => end.clone(),
        // The driver vanished without an answer: ask the ledger.
        Ok(Err(_)) => Some(None),
        Err(_) => None,
    }
}

fn spawn_driver(
    app: &Shared,
    principal: &Principal,
    ticket: ExecutionTicket,
    steps: Vec<Step>,
) -> tokio::sync::watch::Receiver<Option<DriverEnd>> {
    let grant = principal.grant;
    let id = ticket.request_id();
    let subject = principal.subject.clone();
    let (tx, rx) = app.relay.start_driver(grant, id);
    let app = Arc::clone(app);
    tokio::spawn(async move {
        let driver = Driver {
            app: &app,
            subject: &subject,
            grant,
            id,
        };
        let end = driver.drive(ticket, steps).await;
        let _ = tx.send(Some(end));
        app.relay.end_driver(grant, id);
        app.release_run(grant, id).await;
    });
    rx
}

/// One run in progress.
struct Driver<'a> {
    app: &'a Shared,
    subject: &'a str,
    grant: GrantId,
    id: RequestId,
}

impl Driver<'_> {
    async fn drive(&self, mut ticket: ExecutionTicket, steps: Vec<Step>) -> DriverEnd {
        let mut results = Vec::with_capacity(steps.len());
        for step in steps {
            let Ok(action) = step.action() else {
                return Some(internal(Some(self.id)));
            };
            let seq = ticket.next_seq();
            let verdict = match authorize(self.app, ticket, action).await {
                Ok(v) => v,
                Err(answer) => return Some(answer),
            };
            let (t, status, summary) = match verdict {
                ActionVerdict::Run(t) => {
                    let job = Job {
                        id: portcullis_core::rand::base64url::<12, _>(&mut rand::rng()),
                        grant: self.grant,
                        connection: t.connection(),
                        request_id: self.id,
                        seq,
                        skill: step.skill.name,
                        args: step.args.clone(),
                    };
                    // No report: the tab went away. The ticket is dropped and
                    // the ledger ends the run (`unknownTail`) with the
                    // connection.
                    let report = self.perform(job).await?;
                    match self.record(t, report).await {
                        Ok(done) => done,
                        Err(answer) => return Some(answer),
                    }
                }
                ActionVerdict::Replay(t, outcome) => (t, outcome.status, outcome.summary),
                ActionVerdict::ApprovalPending(prompt) => {
                    self.app.bump(self.subject);
                    tracing::debug!(seq, "execute: approval asked");
                    let answer = BeginAnswer::ApprovalPending(prompt).to_json();
                    return Some(Answer::ok(answer.unwrap_or(Value::Null)));
                }
                ActionVerdict::InsufficientScope(c) => {
                    return Some(Answer::begin_error(
                        &BeginError::InsufficientScope(c),
                        Some(self.id),
                    ));
                }
                ActionVerdict::TabNotVisible => {
                    return Some(failure(
                        ErrorCode::TabNotVisible,
                        "this action drives the page: ask the user to show the connected tab, \
                         then call again with the same requestId",
                        Some(self.id),
                    ));
                }
            };
            ticket = t;
            if let OutcomeStatus::Failed(code) = status {
                let error = BusinessError::new(code, summary);
                return Some(self.complete(ticket, Completion::Error(error)).await);
            }
            let result = serde_json::from_str(&summary).unwrap_or(Value::String(summary));
            results.push(json!({"skill": step.skill.name, "result": result}));
        }
        Some(
            self.complete(ticket, Completion::Value(Value::Array(results)))
                .await,
        )
    }

    /// Hands `job` to the tab and waits for its report while the connection
    /// it was dispatched to stays live.
    async fn perform(&self, job: Job) -> Option<TabReport> {
        let (grant, connection, job_id) = (job.grant, job.connection, job.id.clone());
        let mut rx = match self.app.jobs {
            None => self.app.relay.dispatch(self.subject, job),
            Some(jobs) => {
                // A row any instance's poll can claim (see `super::jobs`).
                let rx = self.app.relay.expect(self.subject, &job_id);
                let subject = self.subject.to_owned();
                let origin = self.app.fanout.instance().to_owned();
                let queued = self
                    .app
                    .blocking(move |_| jobs.insert(&subject, &origin, &job))
                    .await;
                if !matches!(queued, Ok(Ok(()))) {
                    self.app.relay.withdraw(self.subject, &job_id);
                    tracing::warn!("execute: the job could not be queued");
                    return None;
                }
                self.app.bump(self.subject);
                rx
            }
        };
        loop {
            tokio::select! {
                r = &mut rx => return r.ok(),
                () = tokio::time::sleep(CHECK) => {
                    if let Some(report) = self.collect(&job_id).await {
                        return Some(report);
                    }
                    let live = self
                        .app
                        .blocking(move |app| app.engine().dispatch(&grant, false, clock::now()))
                        .await;
                    if !matches!(live, Ok(Ok(Dispatch::To(c))) if c == connection) {
                        self.withdraw(&job_id).await;
                        tracing::debug!("execute: the tab went away mid-run");
                        return None;
                    }
                }
            }
        }
    }

    /// On a shared database, the report on `job_id` if it arrived without
    /// its notification reaching this instance (the listener was down).
    async fn collect(&self, job_id: &str) -> Option<TabReport> {
        let jobs = self.app.jobs?;
        let id = job_id.to_owned();
        let report = self.app.blocking(move |_| jobs.collect(&id)).await;
        let report = report.ok()?.ok()??;
        self.app.relay.withdraw(self.subject, job_id);
        Some(report)
    }

    /// Gives up on job `job_id`: here, and its row on a shared database.
    async fn withdraw(&self, job_id: &str) {
        self.app.relay.withdraw(self.subject, job_id);
        if let Some(jobs) = self.app.jobs {
            let id = job_id.to_owned();
            if let Ok(Err(e)) = self.app.blocking(move |_| jobs.delete(&[&id])).await {
                tracing::warn!(error = %e, "withdrawing a tab job failed");
            }
        }
    }

    /// Records the tab's report; an oversized or malformed one is recorded
    /// as a failure (the action did run).
    async fn record(
        &self,
        ticket: ExecutionTicket,
        report: TabReport,
    ) -> Result<(ExecutionTicket, OutcomeStatus, String), Answer> {
        let core = match report.failed {
            None => Report::ok(report.summary),
            Some(code) => Report::failed(code, report.summary),
        };
        let (status, summary) = (core.status.clone(), core.summary.clone());
        let recorded = ticket_write(self.app, self.id, move |app, mut txn| {
            let mut record = |ticket, report| match txn.as_deref_mut() {
                Some(txn) => app
                    .engine()
                    .record_outcome_in(txn, ticket, report, clock::now()),
                None => app.engine().record_outcome(ticket, report, clock::now()),
            };
            match record(ticket, core) {
                Err(TicketError::Invalid(ticket, _)) => {
                    let fallback = Report::failed("BAD_REPORT", "the tab's report was invalid");
                    record(*ticket, fallback).map(|t| (t, false))
                }
                other => other.map(|t| (t, true)),
            }
        })
        .await;
        match recorded? {
            (t, true) => Ok((t, status, summary)),
            (t, false) => Ok((
                t,
                OutcomeStatus::Failed("BAD_REPORT".into()),
                "the tab's report was invalid".into(),
            )),
        }
    }

    async fn complete(&self, ticket: ExecutionTicket, completion: Completion) -> Answer {
        match complete(self.app, ticket, completion).await {
            Ok(stored) => {
                tracing::debug!("execute: run complete");
                Answer::ok(stored.to_json())
            }
            Err(answer) => answer,
        }
    }
}

/// A ticket operation through the writer ([`super::App::write_ticket`]):
/// its value, or the answer for its failure (the core's ticket error, or a
/// server error).
pub(super) async fn ticket_write<T, F>(app: &Shared, id: RequestId, f: F) -> Result<T, Answer>
where
    T: Send + 'static,
    F: for<'t, 'b, 'w> FnOnce(
            &super::App,
            Option<&mut AppWrite<'t, 'b, 'w>>,
        ) -> Result<T, TicketError>
        + Send
        + 'static,
{
    match app.write_ticket(f).await {
        Err(_) => Err(internal(Some(id))),
        Ok(Err(e)) => Err(ticket_failure(&e, id)),
        Ok(Ok(v)) => Ok(v),
    }
}

/// Authorizes a run's next action (a driver's step, the gateway's call):
/// the core's verdict, or the failure to answer.
pub(super) async fn authorize(
    app: &Shared,
    ticket: ExecutionTicket,
    action: Action,
) -> Result<ActionVerdict, Answer> {
    ticket_write(app, ticket.request_id(), move |app, txn| match txn {
        Some(txn) => app
            .engine()
            .authorize_action_in(txn, ticket, &action, clock::now()),
        None => app.engine().authorize_action(ticket, &action, clock::now()),
    })
    .await
}

/// Ends a run with `completion` (a driver's last step, and the gateway's):
/// its stored result, or the failure to answer.
pub(super) async fn complete(
    app: &Shared,
    ticket: ExecutionTicket,
    completion: Completion,
) -> Result<StoredResult, Answer> {
    ticket_write(app, ticket.request_id(), move |app, txn| match txn {
        Some(txn) => app
            .engine()
            .complete_in(txn, ticket, &completion, clock::now()),
        None => app.engine().complete(ticket, &completion, clock::now()),
    })
    .await
}
