//! The `execute` tool: its envelope and program read here and run by
//! `portcullis-axum` in the user's connected tab
//! ([`portcullis_axum::Portcullis::run_in_tab`]), which it reaches through
//! [`RelayTab`]: the relay's mailboxes on redb, the job table on
//! PostgreSQL.
//!
//! ```text
//! execute ─ parse envelope + program ─ run_in_tab ─┬─ per step: job ─▶ RelayTab ─▶ the page's report
//!                                                   └─ the ledger's answer (result, pending, refusal)
//! ```
//!
//! Every answer's JSON is the ledger's; the server's own refusals (a
//! malformed program, a fault) are the core's `ledger::failure_json`.

use std::sync::Arc;
use std::time::Duration;

use portcullis_axum::{Agent, Outcome, Program, TabChannel, TabFuture, TabJob, TabWaits};
use portcullis_core::error::ErrorCode;
use portcullis_core::ledger::{BeginError, ExecuteParams, Report, RequestId};
use portcullis_core::tab::Dispatch;
use serde_json::Value;

use super::Shared;
pub(crate) use super::answer::{Answer, failure};
use super::skills::{self, Skill, Step};
use super::work::{Job, TabReport};
use crate::clock;

/// How long an `execute` call waits for its run before answering
/// `execution_pending`.
pub(crate) const WAIT: Duration = Duration::from_secs(15);
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
    if agent.principal().is_none() {
        return Answer::begin_error(&BeginError::AgentToken, None);
    }
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
    let tab = Arc::new(RelayTab {
        app: Arc::clone(app),
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

/// The user's connected tab as `portcullis-axum` reaches it
/// ([`TabChannel`]): a job queued in the relay's mailbox (on redb) or a row
/// of the job table any instance's poll can claim (on PostgreSQL,
/// [`super::jobs`]), and the page's report on it.
pub(crate) struct RelayTab {
    app: Shared,
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
        self.app.channel.relay.withdraw(&self.subject, &self.job_id);
        if let (Some(jobs), Ok(runtime)) =
            (self.app.channel.jobs, tokio::runtime::Handle::try_current())
        {
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
        let mut rx = match self.app.channel.jobs {
            None => self.app.channel.relay.dispatch(&self.subject, job),
            Some(jobs) => {
                // A row any instance's poll can claim (see `super::jobs`).
                let rx = self.app.channel.relay.expect(&self.subject, &self.job_id);
                let subject = self.subject.clone();
                let origin = self.app.channel.fanout.instance().to_owned();
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
        let jobs = self.app.channel.jobs?;
        let id = self.job_id.clone();
        let report = self.app.blocking(move |_| jobs.collect(&id)).await;
        let report = report.ok()?.ok()??;
        self.app.channel.relay.withdraw(&self.subject, &self.job_id);
        Some(report)
    }
}
