//! The `execute` tool: its envelope and program read here and run by
//! `portcullis-axum` in the user's connected tab
//! ([`portcullis_axum::Portcullis::run_in_tab`]), which it reaches through
//! [`RelayTab`]: the relay's mailboxes on redb, the job table on
//! PostgreSQL.
//!
//! ```text
//! execute ─ parse envelope + program ─ claim (PostgreSQL) ─ run_in_tab ─┬─ per step: job ─▶ RelayTab ─▶ the page's report
//!                                                                       └─ the ledger's answer (result, pending, refusal)
//! ```
//!
//! Every answer's JSON is the ledger's; the server's own refusals (a
//! malformed program, a fault) are the core's `ledger::failure_json`.

use std::sync::Arc;
use std::time::Duration;

use portcullis_axum::{Agent, Outcome, Program, TabChannel, TabFuture, TabJob, TabWaits};
use portcullis_core::error::ErrorCode;
use portcullis_core::grant::GrantId;
use portcullis_core::ledger::{BeginAnswer, BeginError, ExecuteParams, Report, RequestId};
use portcullis_core::tab::Dispatch;
use serde_json::Value;

use super::Shared;
pub(crate) use super::answer::{Answer, failure};
use super::jobs::Claim;
use super::skills::{self, Skill, Step};
use super::work::{Job, TabReport};
use crate::clock;

/// How long an `execute` call waits for its run before answering
/// `execution_pending`.
pub(crate) const WAIT: Duration = Duration::from_secs(15);
/// How often an `execute` whose run another instance holds tries to
/// claim it again.
const CLAIM_RETRY: Duration = Duration::from_millis(200);
/// How often a job waiting for the tab checks that its connection is
/// still the live one.
const CHECK: Duration = Duration::from_secs(2);

fn internal(id: Option<RequestId>) -> Answer {
    failure(ErrorCode::ServerError, "temporary server error", id)
}

/// `execute` for `agent` with the tool's `arguments`: the envelope and
/// the program read here, the run by `portcullis-axum`'s
/// [`portcullis_axum::Portcullis::run_in_tab`] through [`RelayTab`],
/// waiting as `waits` says before it answers pending (the run goes on).
pub(crate) async fn execute(
    app: &Shared,
    agent: &Agent,
    arguments: &Value,
    waits: TabWaits,
) -> Answer {
    let Some(grant) = agent.principal().map(|p| p.grant) else {
        return Answer::begin_error(&BeginError::AgentToken, None);
    };
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
    let Ok(actions) = steps
        .iter()
        .map(Step::action)
        .collect::<Result<Vec<_>, _>>()
    else {
        return internal(Some(id));
    };
    let Ok(program) = Program::new(params, actions) else {
        return internal(Some(id));
    };
    // On a shared database, no claim, no run: the claim is let go when
    // the run's channel goes, at the end of the run's task.
    if let Err(answer) = claim(app, grant, id).await {
        return answer;
    }
    let tab = Arc::new(RelayTab {
        app: Arc::clone(app),
        claim: (grant, id),
    });
    let ran = app
        .portcullis
        .run_in_tab(agent, program.label_steps("skill"), tab, waits)
        .await;
    if matches!(ran.outcome(), Outcome::Done(_) | Outcome::Failed(_)) {
        tracing::debug!("execute: run complete");
    }
    Answer::ok(ran.answer().clone())
}

/// On a shared database, no claim, no run (see `super::jobs`): claims the
/// run `(grant, id)` for this instance, waiting (at most [`WAIT`]) while
/// another live instance holds it as it begins or drives the run. The
/// answer to give instead when the claim is not had: `execution_pending`
/// after the wait, a server error if the database fails. Whoever claims
/// releases with [`super::App::release_run`] ([`RelayTab`] does, when the
/// run's task lets it go); the claim goes when the instance's last call on
/// the run did.
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

/// The user's connected tab as `portcullis-axum` reaches it
/// ([`TabChannel`]): a job queued in the relay's mailbox (on redb) or a row
/// of the job table any instance's poll can claim (on PostgreSQL,
/// [`super::jobs`]), and the page's report on it. One per run: on a
/// shared database it holds the run's claim, let go when the run's task
/// drops it.
pub(crate) struct RelayTab {
    app: Shared,
    /// The run claimed (on PostgreSQL).
    claim: (GrantId, RequestId),
}

impl Drop for RelayTab {
    fn drop(&mut self) {
        let (app, (grant, id)) = (Arc::clone(&self.app), self.claim);
        if app.jobs.is_some()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move { app.release_run(grant, id).await });
        }
    }
}

impl TabChannel for RelayTab {
    fn perform(&self, job: TabJob) -> TabFuture {
        let app = Arc::clone(&self.app);
        Box::pin(async move {
            let subject = job.subject.clone();
            let skill = Skill::named(job.action.kind())?;
            let args = serde_json::from_slice(job.action.arguments().unwrap_or(b"{}")).ok()?;
            let job = Job {
                id: portcullis_core::rand::base64url::<12, _>(&mut rand::rng()),
                grant: job.grant,
                connection: job.connection,
                request_id: job.request_id,
                seq: job.seq,
                skill: skill.name,
                args,
            };
            let mut queued = Queued::new(app, subject, job.id.clone());
            let report = queued.perform(job).await?;
            Some(match report.failed {
                None => Report::ok(report.summary),
                Some(code) => Report::failed(code, report.summary),
            })
        })
    }

    fn approval_url(&self, id: RequestId) -> String {
        self.app.approval_url(id)
    }

    fn approval_asked(&self, subject: &str) {
        self.app.bump(subject);
    }
}

/// A job handed to the tab: withdrawn (here, and its row on a shared
/// database) if it is dropped before the page reported.
struct Queued {
    app: Shared,
    subject: String,
    job_id: String,
    reported: bool,
}

impl Drop for Queued {
    fn drop(&mut self) {
        if self.reported {
            return;
        }
        self.app.relay.withdraw(&self.subject, &self.job_id);
        if let (Some(jobs), Ok(runtime)) = (self.app.jobs, tokio::runtime::Handle::try_current()) {
            let id = self.job_id.clone();
            runtime.spawn_blocking(move || {
                if let Err(e) = jobs.delete(&[&id]) {
                    tracing::warn!(error = %e, "withdrawing a tab job failed");
                }
            });
        }
    }
}

impl Queued {
    fn new(app: Shared, subject: String, job_id: String) -> Self {
        Self {
            app,
            subject,
            job_id,
            reported: false,
        }
    }

    /// Hands `job` to the tab and waits for its report while the
    /// connection it was dispatched to stays live.
    async fn perform(&mut self, job: Job) -> Option<TabReport> {
        let (grant, connection) = (job.grant, job.connection);
        let mut rx = match self.app.jobs {
            None => self.app.relay.dispatch(&self.subject, job),
            Some(jobs) => {
                // A row any instance's poll can claim (see `super::jobs`).
                let rx = self.app.relay.expect(&self.subject, &self.job_id);
                let subject = self.subject.clone();
                let origin = self.app.fanout.instance().to_owned();
                let queued = self
                    .app
                    .blocking(move |_| jobs.insert(&subject, &origin, &job))
                    .await;
                if !matches!(queued, Ok(Ok(()))) {
                    tracing::warn!("execute: the job could not be queued");
                    return None;
                }
                self.app.bump(&self.subject);
                rx
            }
        };
        loop {
            tokio::select! {
                r = &mut rx => {
                    self.reported = r.is_ok();
                    return r.ok();
                }
                () = tokio::time::sleep(CHECK) => {
                    if let Some(report) = self.collect().await {
                        self.reported = true;
                        return Some(report);
                    }
                    let live = self
                        .app
                        .blocking(move |app| app.engine().dispatch(&grant, false, clock::now()))
                        .await;
                    if !matches!(live, Ok(Ok(Dispatch::To(c))) if c == connection) {
                        tracing::debug!("execute: the tab went away mid-run");
                        return None;
                    }
                }
            }
        }
    }

    /// On a shared database, the report on the job if it arrived without
    /// its notification reaching this instance (the listener was down).
    async fn collect(&self) -> Option<TabReport> {
        let jobs = self.app.jobs?;
        let id = self.job_id.clone();
        let report = self.app.blocking(move |_| jobs.collect(&id)).await;
        let report = report.ok()?.ok()??;
        self.app.relay.withdraw(&self.subject, &self.job_id);
        Some(report)
    }
}
