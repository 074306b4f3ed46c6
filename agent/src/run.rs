//! `portcullis agent run '<code>'`: one intent driven by the core's
//! [`ClientLoop`], every [`Step`] done here and reported back.
//!
//! The host's part of each step:
//! * `Authenticate`: the first time, the token file's session (or a
//!   consent); after the server refused the session, a refresh first and a
//!   new consent if the grant is gone ([`Session::Renewed`] or
//!   [`Session::New`]: the loop decides whether the request may be resumed
//!   under a new grant); for a step-up, a consent with the wider scope.
//! * `Describe`: `search_skills` and `describe_skill` of each skill the code
//!   names. A session replaced while describing (nothing decided yet)
//!   restarts the loop on the new session, so no description outlives it.
//! * `Decide`: the code from the command line; an `INVALID_PARAMS` to
//!   correct stops the agent (only the user can change the code).
//! * `Invoke`: `execute` with the loop's request id and code.
//! * `ShowUrl`: print the page the person approves on (and open it with
//!   `--open`), with its origin when it is not the MCP server's; the agent
//!   never approves.
//! * `Retry` (2026-07-28): `execute` again with the same arguments, the
//!   server's `requestState` and the `inputResponses` the loop built.
//! * `Poll`: `tasks/get` of the request's task.
//! * `Wait`: sleep as told (`retryAfterMs` on `RATE_LIMITED`, backoff
//!   while approval is pending, a task's `pollIntervalMs`), then resume.
//! * `AskHuman`: print what the human must do, wait, resume.
//! * `Done`: print the report; only a returned result exits 0.

use std::time::Duration;

use portcullis_core::agent_loop::{
    Advice, Answer, AnswerError, ClientLoop, HumanAction, Interruption, LoopLimits, Outcome,
    Report, Retry, Session, Step, WaitReason,
};
use portcullis_core::scope::ScopeSet;
use serde_json::{Value, json};

use super::mcp::Reply;
use super::{Agent, AgentError, open_browser, say};

/// Where re-authentication stands in one run.
#[derive(Debug, Default)]
struct Reauth {
    /// The first session was obtained.
    started: bool,
    /// A refresh answered the last refusal: if the server refuses again,
    /// only a new consent helps.
    refreshed: bool,
}

/// What the run said and did so far, for what it says next.
#[derive(Debug, Default)]
struct Progress {
    reauth: Reauth,
    /// The last wait's reason (each is said once in a row).
    last_wait: Option<WaitReason>,
    /// A page was just shown: the next retry says what it waits for.
    just_shown: bool,
    /// The request's task is being polled (said once).
    polling: bool,
}

/// How long the agent waits for a human before resuming.
const HUMAN_WAIT: Duration = Duration::from_secs(3);

/// The capability of a code for the log line: `execute:` and the skill
/// names it calls (`execute:list_notes+create_note`), never its arguments.
pub(crate) fn capability(code: &str) -> String {
    let names: Vec<String> = serde_json::from_str::<Value>(code)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|step| step.get("skill").and_then(Value::as_str))
        .map(|s| {
            s.chars()
                .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
                .take(64)
                .collect()
        })
        .collect();
    if names.is_empty() {
        return "execute".into();
    }
    let mut c = format!("execute:{}", names.join("+"));
    c.truncate(200);
    c
}

/// What a human is told for `advice`.
fn advise(advice: Advice) -> &'static str {
    match advice {
        Advice::Redescribe => "the surface changed: describe it again",
        Advice::CorrectArguments => "correct the arguments from the skill's schema",
        Advice::Reobserve => "look at the page again, then decide",
        Advice::AskHuman => "a human must act; the agent stops here",
        Advice::Reauthenticate => "sign in again or ask for a new delegation",
        Advice::WaitForPrecondition => "do not retry until its precondition changes",
        Advice::NewRequestOnly => "this request id belongs to another request",
        Advice::Report => "no rule for this code",
    }
}

fn may(run: bool) -> &'static str {
    if run {
        "part of it may have run"
    } else {
        "nothing of it ran"
    }
}

impl Agent {
    /// Runs `code` to its report.
    pub(crate) async fn run(&mut self, code: String, max_wait_secs: u64) -> Result<(), AgentError> {
        let limits = LoopLimits {
            max_wait_ms: max_wait_secs.saturating_mul(1000),
            ..LoopLimits::default()
        };
        let mut rng = rand::rng();
        let mut agent = ClientLoop::new(limits);
        let mut progress = Progress::default();
        loop {
            match agent.step() {
                Step::Authenticate { scope } => {
                    let session = self.session_for(scope, &mut progress.reauth).await?;
                    agent.authenticated(session).map_err(usage)?;
                }
                Step::Describe => {
                    if self.describe_for(&code).await? {
                        // Nothing was decided: start over on the new session.
                        agent = ClientLoop::with_session(self.auth.scopes(), limits);
                    }
                    agent.described().map_err(usage)?;
                }
                Step::Decide { correct: None } => {
                    agent.decide(code.clone(), &mut rng).map_err(usage)?;
                }
                Step::Decide {
                    correct: Some(error),
                } => {
                    say(format_args!(
                        "The server refused the code ({}): {}. Correct it from the skill's schema \
                         (`portcullis agent describe`); nothing ran.",
                        error.code, error.message
                    ));
                    return Err(AgentError::Stopped("INVALID_PARAMS"));
                }
                Step::ShowUrl { url, message, .. } => {
                    self.show(&url, &message);
                    progress.just_shown = true;
                    agent.shown().map_err(usage)?;
                }
                call @ (Step::Invoke { .. } | Step::Retry { .. } | Step::Poll { .. }) => {
                    let answer = self.call_for(&agent, call, &mut progress).await?;
                    if !is_transport(&answer) {
                        progress.reauth.refreshed = false;
                    }
                    agent.answered(answer).map_err(usage)?;
                }
                Step::Wait { millis, reason } => {
                    progress.just_shown = false;
                    if progress.last_wait != Some(reason) {
                        say(format_args!("{}", waiting(reason, millis)));
                    }
                    progress.last_wait = Some(reason);
                    tokio::time::sleep(Duration::from_millis(millis)).await;
                    agent.resume().map_err(usage)?;
                }
                Step::AskHuman(action) => {
                    match action {
                        HumanAction::ReconnectTab { url } => say(format_args!(
                            "No browser tab of the app is connected: open {} and keep it open.",
                            url.as_deref().unwrap_or("the app")
                        )),
                        HumanAction::ShowTab => {
                            say(format_args!(
                                "Bring the app's tab to the front to continue."
                            ));
                        }
                    }
                    progress.last_wait = None;
                    tokio::time::sleep(HUMAN_WAIT).await;
                    agent.resume().map_err(usage)?;
                }
                Step::Done(report) => return report_of(&report),
            }
        }
    }

    /// The call of an `Invoke`, `Retry` or `Poll` step, said and made; its
    /// answer as the loop reads it.
    async fn call_for(
        &mut self,
        agent: &ClientLoop,
        call: Step,
        progress: &mut Progress,
    ) -> Result<Answer, AgentError> {
        let code = agent.code().unwrap_or_default().to_owned();
        match call {
            Step::Invoke {
                request_id,
                resumed,
            } => {
                let id = request_id.to_string();
                if resumed {
                    say(format_args!("Resumed request {id}."));
                } else {
                    say(format_args!("Calling execute as request {id}."));
                }
                self.execute(&id, &code, None).await
            }
            Step::Retry { request_id, retry } => {
                let id = request_id.to_string();
                if std::mem::take(&mut progress.just_shown) {
                    say(format_args!(
                        "Waiting for approval: the server answers once the person decides…"
                    ));
                }
                say(format_args!(
                    "Resumed request {id} with the server's state."
                ));
                self.execute(&id, &code, Some(&retry)).await
            }
            Step::Poll {
                request_id,
                task_id,
            } => {
                let id = request_id.to_string();
                if !std::mem::replace(&mut progress.polling, true) {
                    say(format_args!(
                        "Following request {id} as a task (tasks/get)."
                    ));
                }
                self.poll(&id, &task_id).await
            }
            other => Err(AgentError::Usage(format!(
                "client loop: {other:?} is not a call"
            ))),
        }
    }

    /// The session for [`Step::Authenticate`]: a step-up asks the user for
    /// the wider scope; the first time, the token file's session (or a
    /// consent); after a refusal, a refresh, or a consent when a refresh
    /// already failed to help or the grant is gone.
    async fn session_for(
        &mut self,
        wider: Option<ScopeSet>,
        reauth: &mut Reauth,
    ) -> Result<Session, AgentError> {
        if let Some(wider) = wider {
            say(format_args!(
                "The request needs the scope {wider}: asking the user."
            ));
            self.auth.consent(Some(&wider)).await?;
            return Ok(Session::New(self.auth.scopes()));
        }
        if !reauth.started {
            reauth.started = true;
            if self.auth.token().await?.is_none() {
                self.auth.consent(None).await?;
            }
            return Ok(Session::New(self.auth.scopes()));
        }
        if !reauth.refreshed && self.auth.refresh().await? {
            reauth.refreshed = true;
            say(format_args!(
                "The server refused the access token; refreshed it."
            ));
            return Ok(Session::Renewed(self.auth.scopes()));
        }
        reauth.refreshed = false;
        say(format_args!(
            "The server refused the session; signing in again."
        ));
        self.auth.consent(None).await?;
        Ok(Session::New(self.auth.scopes()))
    }

    /// Describes the surface for `code`: the skill list, then each skill it
    /// names. Returns whether the session was replaced meanwhile.
    async fn describe_for(&mut self, code: &str) -> Result<bool, AgentError> {
        let (skills, mut replaced) = self.skills("").await?;
        let named: Vec<String> = capability(code)
            .strip_prefix("execute:")
            .map(|s| s.split('+').map(str::to_owned).collect())
            .unwrap_or_default();
        for name in &named {
            let listed = skills
                .iter()
                .any(|s| s.get("name").and_then(Value::as_str) == Some(name));
            if !listed {
                // The server answers ACTION_NOT_FOUND; the loop handles it.
                continue;
            }
            let (skill, again) = self.describe_one(name).await?;
            replaced |= again;
            let effect = skill.get("effect").and_then(Value::as_str).unwrap_or("-");
            say(format_args!("Skill {name}: {effect}."));
        }
        Ok(replaced)
    }

    /// One `execute` call (a 2026-07-28 retry with `retry`), as the loop
    /// reads it.
    async fn execute(
        &mut self,
        id: &str,
        code: &str,
        retry: Option<&Retry>,
    ) -> Result<Answer, AgentError> {
        // No usable token: nothing was sent, the loop re-authenticates.
        let Some(token) = self.auth.token().await? else {
            return Ok(Answer::Unauthorized);
        };
        let arguments = json!({"requestId": id, "code": code});
        let reply = self
            .mcp
            .call_tool(
                &token,
                "execute",
                arguments,
                &capability(code),
                Some(id),
                retry,
            )
            .await;
        Ok(answer_of(reply, Answer::from_tool_result))
    }

    /// `tasks/get` of the request's task, as the loop reads it.
    async fn poll(&mut self, id: &str, task_id: &str) -> Result<Answer, AgentError> {
        let Some(token) = self.auth.token().await? else {
            return Ok(Answer::Unauthorized);
        };
        let reply = self.mcp.get_task(&token, task_id, Some(id)).await;
        Ok(answer_of(reply, Answer::from_task_result))
    }

    /// Shows the person the page of an approval (or of another input the
    /// server asks for): printed, opened with `--open`, and labelled with
    /// its origin when that is not the MCP server's.
    fn show(&self, url: &str, message: &str) {
        let what = if message.is_empty() {
            "Approval needed".to_owned()
        } else {
            format!("Approval needed ({message})")
        };
        say(format_args!(
            "{what}: open this page to approve or deny it:\n  {url}"
        ));
        if let Some(origin) = foreign_origin(self.mcp.url(), url) {
            say(format_args!(
                "  (this page is on {origin}, not on the MCP server's site)"
            ));
        }
        if self.open {
            open_browser(url);
        }
    }
}

/// Whether `answer` says nothing of the server's view of the request (the
/// session or the connection failed).
fn is_transport(answer: &Answer) -> bool {
    matches!(
        answer,
        Answer::Unauthorized
            | Answer::InsufficientScope { .. }
            | Answer::Unavailable { .. }
            | Answer::Lost
    )
}

/// A call's reply as the loop reads it: a `result` by `read`, a JSON-RPC
/// error by [`Answer::from_rpc_error`] (-32042 among them).
fn answer_of(reply: Result<Reply, AgentError>, read: fn(&Value) -> Answer) -> Answer {
    match reply {
        Ok(Reply::Transport(answer)) => answer,
        Ok(Reply::Result(result)) => read(&result),
        Ok(Reply::RpcError {
            code,
            message,
            data,
        }) => Answer::from_rpc_error(code, &message, data.as_ref()),
        // An answer arrived but could not be read: the call may have run.
        Err(e) => {
            tracing::warn!(target: "portcullis::agent", error = %e, "unreadable answer");
            Answer::Unreadable(AnswerError::Malformed("answer"))
        }
    }
}

/// The origin of `page` when it differs from the MCP server's (`mcp`).
fn foreign_origin(mcp: &str, page: &str) -> Option<String> {
    let page = url::Url::parse(page).ok()?;
    let mcp = url::Url::parse(mcp).ok()?;
    (page.origin() != mcp.origin()).then(|| page.origin().ascii_serialization())
}

fn waiting(reason: WaitReason, millis: u64) -> String {
    match reason {
        WaitReason::ApprovalPending => "Waiting for approval in the app's tab…".into(),
        WaitReason::ExecutionPending => "Approved; waiting for the tab to run it…".into(),
        WaitReason::RateLimited => {
            format!("Rate limited: waiting {millis} ms as the server asks (retryAfterMs).")
        }
        WaitReason::Unavailable => {
            format!("The site is switched off for now: waiting {millis} ms.")
        }
        WaitReason::Retry => format!("No answer: resuming the same request in {millis} ms."),
        WaitReason::Pending => {
            "Still waiting for the decision (or the run): retrying with the server's state…".into()
        }
        WaitReason::Task => format!("The run goes on as a task: polling it every {millis} ms."),
    }
}

fn usage(e: portcullis_core::agent_loop::LoopError) -> AgentError {
    AgentError::Usage(format!("client loop: {e}"))
}

/// Prints `report`; only a returned result is success.
fn report_of(report: &Report) -> Result<(), AgentError> {
    let id = report
        .request_id
        .map_or_else(|| "-".to_owned(), |id| id.to_string());
    match &report.outcome {
        Outcome::Returned {
            result,
            outcomes,
            more_outcomes,
            unknown_tail,
        } => {
            say(format_args!(
                "Done: request {id} returned ({outcomes} outcome(s){}{}, {} call(s)).",
                if *more_outcomes {
                    ", more on further pages"
                } else {
                    ""
                },
                if *unknown_tail {
                    ", effects beyond them may have happened"
                } else {
                    ""
                },
                report.invocations
            ));
            say(format_args!(
                "Result: {}",
                serde_json::to_string(result).unwrap_or_default()
            ));
            Ok(())
        }
        Outcome::BusinessFailure {
            error,
            advice,
            outcomes,
            ..
        } => {
            say(format_args!(
                "Done: request {id} ran and failed: {} ({}); {outcomes} effect(s) happened; {}.",
                error.code,
                error.message,
                advise(*advice)
            ));
            Err(AgentError::Stopped("business_failure"))
        }
        Outcome::Ended {
            error,
            advice,
            outcomes,
            ..
        } => {
            say(format_args!(
                "Stopped: request {id} ended with {} ({}) after {outcomes} effect(s); {}.",
                error.code,
                error.message,
                advise(*advice)
            ));
            Err(AgentError::Stopped("ended"))
        }
        Outcome::Refused {
            error,
            advice,
            may_have_run,
        } => {
            say(format_args!(
                "Stopped: request {id} was refused: {} ({}); {}; {}.",
                error.code,
                error.message,
                may(*may_have_run),
                advise(*advice)
            ));
            Err(AgentError::Stopped(if *advice == Advice::AskHuman {
                "ask_human"
            } else {
                "refused"
            }))
        }
        Outcome::Interrupted {
            reason,
            may_have_run,
        } => {
            let why = match reason {
                Interruption::ResultExpired => "its result expired",
                Interruption::GaveUp => "the agent's limits were reached",
                Interruption::SessionLost => "the session ended and a new grant cannot resume it",
                Interruption::MismatchedAnswer => "the answer named another request",
                Interruption::UnreadableAnswer => "an answer could not be read",
                Interruption::Abandoned => "the agent gave up",
                Interruption::UnsupportedInput => {
                    "the server asked for input this agent cannot give (it shows pages only)"
                }
            };
            say(format_args!(
                "Stopped: request {id} interrupted: {why}; {}.",
                may(*may_have_run)
            ));
            Err(AgentError::Stopped("interrupted"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_capability_names_skills_never_arguments() {
        assert_eq!(
            capability(
                r#"[{"skill":"create_note","args":{"title":"secret"}},{"skill":"list_notes"}]"#
            ),
            "execute:create_note+list_notes"
        );
        assert_eq!(capability("not json"), "execute");
        assert_eq!(capability(r#"[{"skill":"a b\nc"}]"#), "execute:abc");
    }

    #[test]
    fn a_page_elsewhere_is_labelled_with_its_origin() {
        let mcp = "http://127.0.0.1:8787/mcp/key";
        assert_eq!(
            foreign_origin(mcp, "http://127.0.0.1:8787/agents#approval-1"),
            None
        );
        assert_eq!(
            foreign_origin(mcp, "https://source.example/approve?x=1").as_deref(),
            Some("https://source.example")
        );
        assert_eq!(
            foreign_origin(mcp, "http://127.0.0.1:9999/agents").as_deref(),
            Some("http://127.0.0.1:9999")
        );
    }

    #[test]
    fn a_json_rpc_error_is_read_by_the_core() {
        let data = json!({"elicitations": [{"mode": "url", "url": "http://127.0.0.1:1/p"}]});
        let reply = Ok(Reply::RpcError {
            code: -32042,
            message: "approve".into(),
            data: Some(data),
        });
        assert!(matches!(
            answer_of(reply, Answer::from_tool_result),
            Answer::UrlElicitationRequired(_)
        ));
        let reply = Ok(Reply::RpcError {
            code: -32602,
            message: "bad state".into(),
            data: None,
        });
        assert!(matches!(
            answer_of(reply, Answer::from_tool_result),
            Answer::RpcError { code: -32602, .. }
        ));
    }
}
