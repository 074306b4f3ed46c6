//! The external agent's side of the protocol: a sans-IO client loop.
//!
//! An agent that calls `execute` must authenticate, describe, decide, invoke
//! with a fresh request id and read both the protocol result (`ok`) and the
//! business result (`result.error`), with one fixed answer to each error
//! code. [`ClientLoop`] owns those rules; the host owns the I/O. The host
//! asks [`ClientLoop::step`] what to do, does it, and reports back
//! ([`ClientLoop::authenticated`], [`ClientLoop::described`],
//! [`ClientLoop::decide`], [`ClientLoop::answered`], [`ClientLoop::resume`]),
//! each of which returns the next [`Step`]. Like the rest of the core it
//! never reads a clock (a wait is a number of milliseconds for the host to
//! sleep) and draws randomness only from the `CryptoRng` it is handed.
//!
//! What it guarantees, whatever the server answers:
//! - **No id is reused for a new request.** Each decision gets a fresh
//!   random id; only the same request (same code) is ever resumed under an
//!   id, which the server's ledger turns into "never runs twice".
//! - **A lost answer is resumed, not re-decided**: the call may have run, and
//!   the same id returns its state instead of running it again.
//! - **It never approves and never invents identity**: approval waits for a
//!   human; authentication is the host's, reported as a [`Session`].
//! - **No description survives a scope change**: after a session with other
//!   scopes the agent describes again before its next decision.
//! - **A request that may have run is never started afresh** (not under a
//!   new id, not under a new grant): where it cannot be resumed the loop
//!   stops and reports [`Outcome::Interrupted`] with `may_have_run`.
//! - **Terminal states are reported as they are**: a business failure is not
//!   a protocol failure, and a refusal says whether anything may have run.
//!
//! **A call that waits for the person** reaches the loop in the form the
//! client negotiated (see [`input`]), and each leads to the same rule:
//! show the person the page (once per URL, [`Step::ShowUrl`]), never
//! decide for them, and resume the same request:
//!
//! | answer | next |
//! |---|---|
//! | `approval_pending` (with `approvalUrl`) | show the URL, wait, call again with the same id |
//! | 2026-07-28 `InputRequiredResult` with a URL elicitation | show it, then [`Step::Retry`] at once with `requestState` and an `accept` for it (the server holds the retry until the person decides) |
//! | `InputRequiredResult` with its state alone | wait ([`WaitReason::Pending`]), then retry with the state |
//! | `InputRequiredResult` asking for a form, sampling or roots | stop: [`Interruption::UnsupportedInput`] |
//! | 2025-11-25 error -32042 | show its URLs, wait, call again with the same id |
//! | a task (`resultType: "task"`), or `tasks/get` answering `working` / `input_required` | (show its URLs,) wait `pollIntervalMs`, then [`Step::Poll`] |
//! | a task `completed` | its result, read as the call's |
//! | a task `failed` / `cancelled` | [`Outcome::Ended`] (`task_failed` / `task_cancelled`), effects unknown |
//! | a JSON-RPC error to a retry with state or to a poll | once per request: call again with the same id (the ledger answers its state) |
//! | another JSON-RPC error | [`Outcome::Refused`] (`jsonrpc:<code>`) |
//!
//! The table of error codes follows the external-agent client document
//! (`../shared/reference/003_*`): re-describe on `ACTION_NOT_FOUND` and
//! `EXPECTATION_FAILED`, correct the arguments on `INVALID_PARAMS`, honour
//! `retryAfterMs` on `RATE_LIMITED`, stop for a human on
//! `PERMISSION_DENIED`, re-authenticate on `SESSION_EXPIRED` and
//! `SESSION_REVOKED`, and treat `REPLAY_DETECTED` as "this id is someone
//! else's": report it, never retry it under the same id.

mod answer;
mod challenge;
mod envelope;
pub mod input;

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use rand_core::CryptoRng;
use serde_json::{Map, Value};

pub use answer::{Answer, URL_ELICITATION_REQUIRED};
pub use challenge::{BearerChallenge, ChallengeError, MAX_CHALLENGE_LEN};
pub use envelope::{AnswerError, Envelope, ErrorBody, MAX_CODE_LEN, MAX_MESSAGE_LEN, Status};
pub use input::{
    InputRequest, InputRequired, Task, TaskStatus, UrlElicitation, UrlElicitationRequired,
};

use crate::ledger::RequestId;
use crate::scope::ScopeSet;

/// Bounds on one request's loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoopLimits {
    /// Most `execute` calls for one intent, resumptions included.
    pub max_invocations: u32,
    /// Most decisions (fresh request ids) for one intent.
    pub max_decisions: u32,
    /// Most milliseconds of waiting, summed, before giving up.
    pub max_wait_ms: u64,
    /// First wait while a request is pending or a call must be retried.
    pub first_backoff_ms: u64,
    /// The wait doubles up to this.
    pub max_backoff_ms: u64,
    /// Most `tasks/get` polls for one intent.
    pub max_polls: u32,
}

/// The shortest wait between two polls of a task, whatever the server's
/// `pollIntervalMs`.
pub const MIN_POLL_INTERVAL_MS: u64 = 100;

impl Default for LoopLimits {
    /// 64 calls, 4 decisions, 15 minutes of waiting, backoff from 500 ms to
    /// 10 s, 10 000 polls.
    fn default() -> Self {
        Self {
            max_invocations: 64,
            max_decisions: 4,
            max_wait_ms: 15 * 60 * 1000,
            first_backoff_ms: 500,
            max_backoff_ms: 10_000,
            max_polls: 10_000,
        }
    }
}

/// A session the host obtained after [`Step::Authenticate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Session {
    /// The same grant, with a refreshed access token.
    Renewed(ScopeSet),
    /// A new grant (a new consent) with these scopes.
    New(ScopeSet),
}

/// Why the loop asks the host to wait before resuming the same id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitReason {
    /// The request waits for the user's approval.
    ApprovalPending,
    /// A run of the request is in progress.
    ExecutionPending,
    /// `RATE_LIMITED`: the server's `retryAfterMs`.
    RateLimited,
    /// The site is switched off for now (`503`).
    Unavailable,
    /// No answer arrived, or the server failed: resume, since the call may
    /// have run.
    Retry,
    /// A multi round-trip request was answered with its state alone: it
    /// still waits (for the person's decision, or its run). Then
    /// [`Step::Retry`] with that state.
    Pending,
    /// A task is in progress: wait the server's `pollIntervalMs`, then
    /// [`Step::Poll`].
    Task,
}

/// What a human must do before the same id can be resumed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HumanAction {
    /// `no_live_tab`: open the application (at this URL) so a tab connects.
    ReconnectTab {
        /// The server's `reconnectUrl`.
        url: Option<String>,
    },
    /// `tab_not_visible`: bring the connected tab to the front.
    ShowTab,
}

/// What the client should do about a failure code, per the client document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// `ACTION_NOT_FOUND`: describe again; the surface may have changed.
    Redescribe,
    /// `INVALID_PARAMS`: correct the arguments from the schema.
    CorrectArguments,
    /// `EXPECTATION_FAILED`: observe again, then decide.
    Reobserve,
    /// `PERMISSION_DENIED`: a human must act, not the agent.
    AskHuman,
    /// `SESSION_EXPIRED`, `SESSION_REVOKED`, `insufficient_scope`: a new
    /// session or delegation is needed.
    Reauthenticate,
    /// `ACTION_UNAVAILABLE`: do not retry until its precondition changes.
    WaitForPrecondition,
    /// `REPLAY_DETECTED`: a new id only for a logically new request;
    /// otherwise inspect the earlier outcome.
    NewRequestOnly,
    /// A code with no rule: report it.
    Report,
}

impl Advice {
    /// The advice for a code.
    #[must_use]
    pub fn for_code(code: &str) -> Self {
        match code {
            "ACTION_NOT_FOUND" => Self::Redescribe,
            "INVALID_PARAMS" => Self::CorrectArguments,
            "EXPECTATION_FAILED" => Self::Reobserve,
            "PERMISSION_DENIED" => Self::AskHuman,
            "SESSION_EXPIRED" | "SESSION_REVOKED" | "insufficient_scope" | "invalid_token" => {
                Self::Reauthenticate
            }
            "ACTION_UNAVAILABLE" => Self::WaitForPrecondition,
            "REPLAY_DETECTED" => Self::NewRequestOnly,
            _ => Self::Report,
        }
    }
}

/// Why a request's fate could not be settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interruption {
    /// `result_expired`: the result was deleted; the request never runs again.
    ResultExpired,
    /// A limit of [`LoopLimits`] was reached.
    GaveUp,
    /// The session ended after the request was admitted, and a new grant
    /// cannot resume it.
    SessionLost,
    /// The answer named another request id.
    MismatchedAnswer,
    /// The answer could not be read.
    UnreadableAnswer,
    /// The host called [`ClientLoop::give_up`].
    Abandoned,
    /// The server asked for input the agent did not declare and cannot
    /// give (a form, sampling, roots).
    UnsupportedInput,
}

/// How an intent ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// The request finished and returned `result`.
    Returned {
        /// The business result.
        result: Value,
        /// Outcomes on the first page.
        outcomes: usize,
        /// More outcomes are on further pages.
        more_outcomes: bool,
        /// Effects may have happened beyond the outcomes.
        unknown_tail: bool,
    },
    /// The request finished with a business error (`result.error`).
    BusinessFailure {
        /// The business error.
        error: ErrorBody,
        /// What to do about it.
        advice: Advice,
        /// Outcomes on the first page: effects that did happen.
        outcomes: usize,
        /// Effects may have happened beyond the outcomes.
        unknown_tail: bool,
    },
    /// The request ended with a protocol failure after it was admitted (a
    /// denied approval, a lost tab, a revoked grant): what ran is in the
    /// outcomes.
    Ended {
        /// The failure.
        error: ErrorBody,
        /// What to do about it.
        advice: Advice,
        /// Outcomes on the first page: effects that did happen.
        outcomes: usize,
        /// Effects may have happened beyond the outcomes.
        unknown_tail: bool,
    },
    /// The server refused the call before running it.
    Refused {
        /// The refusal.
        error: ErrorBody,
        /// What to do about it.
        advice: Advice,
        /// An earlier call under the same id was admitted or lost, so part
        /// of the request may have run even though this call was refused.
        may_have_run: bool,
    },
    /// The loop stopped without a final answer.
    Interrupted {
        /// Why.
        reason: Interruption,
        /// Whether any call of the request may have run.
        may_have_run: bool,
    },
}

/// The final report of one intent.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The last request id used, if a decision was made.
    pub request_id: Option<RequestId>,
    /// How it ended.
    pub outcome: Outcome,
    /// How many `execute` calls were answered.
    pub invocations: u32,
}

/// The next thing the host does.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Obtain a session (refresh, or sign in and consent), then call
    /// [`ClientLoop::authenticated`].
    Authenticate {
        /// Ask for at least these scopes (a step-up), when set.
        scope: Option<ScopeSet>,
    },
    /// Describe the surface (list and describe skills), then call
    /// [`ClientLoop::described`].
    Describe,
    /// Choose the code to run, then call [`ClientLoop::decide`].
    Decide {
        /// The `INVALID_PARAMS` error of the previous decision, to correct.
        correct: Option<ErrorBody>,
    },
    /// Call `execute` with this id and [`ClientLoop::code`], then call
    /// [`ClientLoop::answered`].
    Invoke {
        /// The request id.
        request_id: RequestId,
        /// Whether this resumes an earlier call of the same request.
        resumed: bool,
    },
    /// 2026-07-28: call `execute` again (a fresh JSON-RPC id, the same
    /// arguments) with `retry`'s `requestState` and `inputResponses`, then
    /// call [`ClientLoop::answered`].
    Retry {
        /// The request id (in the arguments, as before).
        request_id: RequestId,
        /// What to add to the call.
        retry: Retry,
    },
    /// Poll the request's task with `tasks/get`, then call
    /// [`ClientLoop::answered`] (with [`Answer::from_task_result`]).
    Poll {
        /// The request id the task runs.
        request_id: RequestId,
        /// `taskId`.
        task_id: String,
    },
    /// Show the person this page (print it, open it if asked), then call
    /// [`ClientLoop::shown`]. The person decides there; the agent never
    /// does. Each URL is shown once per request.
    ShowUrl {
        /// The request it is for.
        request_id: RequestId,
        /// The page: an absolute `http`/`https` URL of visible ASCII.
        url: String,
        /// What the server says it is for (no control characters).
        message: String,
    },
    /// Sleep this long, then call [`ClientLoop::resume`].
    Wait {
        /// Milliseconds.
        millis: u64,
        /// Why.
        reason: WaitReason,
    },
    /// Show this to a human, then call [`ClientLoop::resume`] (or
    /// [`ClientLoop::give_up`]).
    AskHuman(HumanAction),
    /// Finished: report this.
    Done(Report),
}

/// A call out of turn.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoopError {
    /// The method does not answer the current [`Step`].
    OutOfTurn,
    /// The decided code is empty.
    EmptyCode,
}

impl fmt::Display for LoopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::OutOfTurn => "the call does not answer the loop's current step",
            Self::EmptyCode => "the decided code is empty",
        })
    }
}

#[cfg(feature = "std")]
impl std::error::Error for LoopError {}

/// Where an authentication leads.
#[derive(Clone, Debug, PartialEq, Eq)]
enum AfterAuth {
    /// Describe, then decide.
    Start,
    /// A step-up for the current request: resume it (the server's ledger
    /// carries a request across a scope upgrade of the same login).
    StepUp(ScopeSet),
    /// The token or the grant failed: resume on the same grant, or start
    /// over on a new one if nothing may have run.
    Reauthenticate,
}

/// What a 2026-07-28 retry adds to the call ([`Step::Retry`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Retry {
    /// `requestState`, echoed verbatim.
    pub state: Option<String>,
    /// `inputResponses`: `{"action": "accept"}` for each URL elicitation
    /// (shown to the person, who acts on the page).
    pub responses: Map<String, Value>,
}

/// How a call of the current request is made.
#[derive(Clone, Debug, PartialEq)]
enum How {
    Invoke { resumed: bool },
    Retry(Retry),
    Poll(String),
}

/// What follows once every URL was shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AfterShow {
    /// Retry with the state at once: the server holds it for the decision.
    Retry,
    /// Back off, then call again.
    Wait(WaitReason),
    /// Wait the task's interval (or back off), then poll.
    Poll(Option<u64>, WaitReason),
}

#[derive(Clone, Debug, PartialEq)]
enum Phase {
    Authenticate(AfterAuth),
    Describe,
    Decide(Option<ErrorBody>),
    Calling {
        id: RequestId,
        how: How,
    },
    Showing {
        id: RequestId,
        current: UrlElicitation,
        rest: Vec<UrlElicitation>,
        then: AfterShow,
    },
    Waiting {
        millis: u64,
        reason: WaitReason,
    },
    Human(HumanAction),
    Done(Report),
}

/// How the current request is resumed: by calling again, by retrying with
/// the server's state, or by polling its task.
#[derive(Clone, Debug, PartialEq)]
enum Resume {
    Call,
    State(Retry),
    Task(String),
}

/// The request being driven: its id is bound to exactly this code.
#[derive(Clone, Debug)]
struct Request {
    id: RequestId,
    code: String,
    /// A call was admitted (pending) or lost in transit.
    may_have_run: bool,
    /// How the next call resumes it.
    resume: Resume,
    /// The URLs shown to the person for it: each once.
    shown: Vec<String>,
    /// A retry with state or a poll was refused, and the request was
    /// resumed by its id instead (once).
    fell_back: bool,
}

/// One intent's loop: from authentication to a [`Report`].
#[derive(Clone, Debug)]
pub struct ClientLoop {
    limits: LoopLimits,
    phase: Phase,
    scope: Option<ScopeSet>,
    described: bool,
    request: Option<Request>,
    invocations: u32,
    polls: u32,
    decisions: u32,
    waited_ms: u64,
    backoff_ms: u64,
}

impl ClientLoop {
    /// A loop that starts by authenticating.
    #[must_use]
    pub fn new(limits: LoopLimits) -> Self {
        Self {
            limits,
            phase: Phase::Authenticate(AfterAuth::Start),
            scope: None,
            described: false,
            request: None,
            invocations: 0,
            polls: 0,
            decisions: 0,
            waited_ms: 0,
            backoff_ms: limits.first_backoff_ms,
        }
    }

    /// A loop for a host that already holds a session with `scope`: it
    /// starts by describing.
    #[must_use]
    pub fn with_session(scope: ScopeSet, limits: LoopLimits) -> Self {
        let mut l = Self::new(limits);
        l.scope = Some(scope);
        l.phase = Phase::Describe;
        l
    }

    /// What to do now.
    #[must_use]
    pub fn step(&self) -> Step {
        match &self.phase {
            Phase::Authenticate(after) => Step::Authenticate {
                scope: match after {
                    AfterAuth::StepUp(wider) => Some(wider.clone()),
                    _ => None,
                },
            },
            Phase::Describe => Step::Describe,
            Phase::Decide(correct) => Step::Decide {
                correct: correct.clone(),
            },
            Phase::Calling { id, how } => match how {
                How::Invoke { resumed } => Step::Invoke {
                    request_id: *id,
                    resumed: *resumed,
                },
                How::Retry(retry) => Step::Retry {
                    request_id: *id,
                    retry: retry.clone(),
                },
                How::Poll(task_id) => Step::Poll {
                    request_id: *id,
                    task_id: task_id.clone(),
                },
            },
            Phase::Showing { id, current, .. } => Step::ShowUrl {
                request_id: *id,
                url: current.url.clone(),
                message: current.message.clone(),
            },
            Phase::Waiting { millis, reason } => Step::Wait {
                millis: *millis,
                reason: *reason,
            },
            Phase::Human(action) => Step::AskHuman(action.clone()),
            Phase::Done(report) => Step::Done(report.clone()),
        }
    }

    /// The code bound to the current request id.
    #[must_use]
    pub fn code(&self) -> Option<&str> {
        self.request.as_ref().map(|r| r.code.as_str())
    }

    /// The current request id.
    #[must_use]
    pub fn request_id(&self) -> Option<RequestId> {
        self.request.as_ref().map(|r| r.id)
    }

    /// The scopes of the current session.
    #[must_use]
    pub fn scope(&self) -> Option<&ScopeSet> {
        self.scope.as_ref()
    }

    /// The host obtained `session` after [`Step::Authenticate`].
    pub fn authenticated(&mut self, session: Session) -> Result<Step, LoopError> {
        let Phase::Authenticate(after) = &self.phase else {
            return Err(LoopError::OutOfTurn);
        };
        let after = after.clone();
        let (renewed, scope) = match session {
            Session::Renewed(scope) => (true, scope),
            Session::New(scope) => (false, scope),
        };
        if self.scope.as_ref() != Some(&scope) {
            // No description survives a scope change.
            self.described = false;
        }
        let may_have_run = self.may_have_run();
        match after {
            AfterAuth::StepUp(wider) => {
                if wider.is_subset(&scope) {
                    self.resume_call();
                } else {
                    // The user did not grant the wider scope.
                    let error = ErrorBody {
                        code: "insufficient_scope".into(),
                        message: "the session lacks the scope this request needs".into(),
                        retry_after_ms: None,
                        reconnect_url: None,
                    };
                    self.finish(Outcome::Refused {
                        error,
                        advice: Advice::AskHuman,
                        may_have_run,
                    });
                }
            }
            AfterAuth::Reauthenticate if renewed => self.resume_call(),
            AfterAuth::Reauthenticate if may_have_run => self.finish(Outcome::Interrupted {
                reason: Interruption::SessionLost,
                may_have_run,
            }),
            // A first session, or a new grant before anything could run.
            AfterAuth::Start | AfterAuth::Reauthenticate => {
                self.phase = self.describe_or_decide(None);
            }
        }
        self.scope = Some(scope);
        Ok(self.step())
    }

    /// The host described the surface after [`Step::Describe`].
    pub fn described(&mut self) -> Result<Step, LoopError> {
        if self.phase != Phase::Describe {
            return Err(LoopError::OutOfTurn);
        }
        self.described = true;
        self.phase = Phase::Decide(None);
        Ok(self.step())
    }

    /// The agent chose `code` after [`Step::Decide`]: a new request with a
    /// fresh random id (RFC 9562 §5.4, version 4).
    pub fn decide<R: CryptoRng + ?Sized>(
        &mut self,
        code: String,
        rng: &mut R,
    ) -> Result<Step, LoopError> {
        if !matches!(self.phase, Phase::Decide(_)) {
            return Err(LoopError::OutOfTurn);
        }
        if code.is_empty() {
            return Err(LoopError::EmptyCode);
        }
        if self.decisions >= self.limits.max_decisions {
            self.interrupt(Interruption::GaveUp);
            return Ok(self.step());
        }
        self.decisions += 1;
        self.backoff_ms = self.limits.first_backoff_ms;
        self.request = Some(Request {
            id: RequestId::random(rng),
            code,
            may_have_run: false,
            resume: Resume::Call,
            shown: Vec::new(),
            fell_back: false,
        });
        if self.invocations < self.limits.max_invocations {
            self.phase = self.calling(How::Invoke { resumed: false });
        } else {
            self.interrupt(Interruption::GaveUp);
        }
        Ok(self.step())
    }

    /// The host waited or the human acted: resume the same request (call
    /// again with its id, retry with the server's state, or poll its
    /// task).
    pub fn resume(&mut self) -> Result<Step, LoopError> {
        match &self.phase {
            Phase::Waiting { .. } | Phase::Human(_) => {
                self.resume_call();
                Ok(self.step())
            }
            _ => Err(LoopError::OutOfTurn),
        }
    }

    /// The host showed the person the URL of [`Step::ShowUrl`].
    pub fn shown(&mut self) -> Result<Step, LoopError> {
        let Phase::Showing {
            current,
            rest,
            then,
            ..
        } = &mut self.phase
        else {
            return Err(LoopError::OutOfTurn);
        };
        let url = core::mem::take(&mut current.url);
        let then = *then;
        let next = if rest.is_empty() {
            None
        } else {
            Some(rest.remove(0))
        };
        if let Some(r) = &mut self.request {
            r.shown.push(url);
        }
        match next {
            Some(next) => {
                if let Phase::Showing { current, .. } = &mut self.phase {
                    *current = next;
                }
            }
            None => match then {
                AfterShow::Retry => self.resume_call(),
                AfterShow::Wait(reason) => self.back_off(reason),
                AfterShow::Poll(interval, reason) => self.wait_poll(interval, reason),
            },
        }
        Ok(self.step())
    }

    /// The host stops: the report says whether anything may have run.
    pub fn give_up(&mut self) -> Step {
        if !matches!(self.phase, Phase::Done(_)) {
            self.interrupt(Interruption::Abandoned);
        }
        self.step()
    }

    /// The server's answer to [`Step::Invoke`], [`Step::Retry`] or
    /// [`Step::Poll`].
    pub fn answered(&mut self, answer: Answer) -> Result<Step, LoopError> {
        let Phase::Calling { id, how } = &self.phase else {
            return Err(LoopError::OutOfTurn);
        };
        let (id, how) = (*id, how.clone());
        if matches!(how, How::Poll(_)) {
            self.polls += 1;
        } else {
            self.invocations += 1;
        }
        match answer {
            Answer::Lost => {
                self.admitted();
                self.back_off(WaitReason::Retry);
            }
            Answer::Unreadable(_) => self.interrupt(Interruption::UnreadableAnswer),
            Answer::Unauthorized => {
                self.phase = Phase::Authenticate(AfterAuth::Reauthenticate);
            }
            Answer::InsufficientScope { scope } => {
                let held = self.scope.clone().unwrap_or_default();
                if scope.is_subset(&held) {
                    // Asked for what the session already has: stepping up
                    // again would loop.
                    let error = ErrorBody {
                        code: "insufficient_scope".into(),
                        message: "the server asks for scopes the session already has".into(),
                        retry_after_ms: None,
                        reconnect_url: None,
                    };
                    self.finish(Outcome::Refused {
                        error,
                        advice: Advice::AskHuman,
                        may_have_run: self.may_have_run(),
                    });
                } else {
                    self.phase = Phase::Authenticate(AfterAuth::StepUp(held.union(&scope)));
                }
            }
            Answer::Unavailable { retry_after_secs } => match retry_after_secs {
                Some(secs) => self.wait(u64::from(secs).max(1) * 1000, WaitReason::Unavailable),
                None => self.back_off(WaitReason::Unavailable),
            },
            Answer::Envelope(envelope) => self.read_envelope_of(id, envelope),
            Answer::InputRequired(input) => self.input_required(&input),
            Answer::UrlElicitationRequired(e) => {
                self.admitted();
                if e.request_id.is_some_and(|named| named != id) {
                    self.interrupt(Interruption::MismatchedAnswer);
                } else {
                    self.set_resume(Resume::Call);
                    match self.unshown(e.elicitations.iter()) {
                        Some((current, rest)) => {
                            self.show(current, rest, AfterShow::Wait(WaitReason::ApprovalPending));
                        }
                        None => self.back_off(WaitReason::ApprovalPending),
                    }
                }
            }
            Answer::Task(task) => self.task(id, &how, task),
            Answer::RpcError { code, message } => {
                let fell_back = self.request.as_ref().is_some_and(|r| r.fell_back);
                if matches!(how, How::Retry(_) | How::Poll(_)) && !fell_back {
                    // A state or a task the server no longer accepts: the
                    // request itself is the ledger's, resumed by its id.
                    if let Some(r) = &mut self.request {
                        r.fell_back = true;
                        r.resume = Resume::Call;
                    }
                    self.resume_call();
                } else {
                    let error = ErrorBody::new(&alloc::format!("jsonrpc:{code}"), &message);
                    self.finish(Outcome::Refused {
                        error,
                        advice: Advice::Report,
                        may_have_run: self.may_have_run(),
                    });
                }
            }
        }
        Ok(self.step())
    }

    /// An envelope, unless it names another request.
    fn read_envelope_of(&mut self, id: RequestId, envelope: Envelope) {
        if envelope.request_id.is_some_and(|named| named != id) {
            self.admitted();
            self.interrupt(Interruption::MismatchedAnswer);
        } else {
            self.read_envelope(envelope);
        }
    }

    /// A 2026-07-28 `InputRequiredResult`.
    fn input_required(&mut self, input: &InputRequired) {
        self.admitted();
        if input
            .requests
            .iter()
            .any(|(_, r)| matches!(r, InputRequest::Unsupported { .. }))
        {
            self.interrupt(Interruption::UnsupportedInput);
            return;
        }
        // Accepting a URL elicitation says it was shown; the person acts on
        // the page, never the agent.
        let mut responses = Map::new();
        for (key, _) in &input.requests {
            let mut accept = Map::new();
            accept.insert("action".into(), Value::String("accept".into()));
            responses.insert(key.clone(), Value::Object(accept));
        }
        self.set_resume(Resume::State(Retry {
            state: input.state.clone(),
            responses,
        }));
        match self.unshown(input.urls()) {
            Some((current, rest)) => {
                self.show(current, rest, AfterShow::Retry);
            }
            None if input.requests.is_empty() => self.back_off(WaitReason::Pending),
            None => self.back_off(WaitReason::ApprovalPending),
        }
    }

    /// A task, created by the call or read by a poll.
    fn task(&mut self, id: RequestId, how: &How, task: Task) {
        self.admitted();
        if let How::Poll(polled) = how
            && *polled != task.task_id
        {
            self.interrupt(Interruption::MismatchedAnswer);
            return;
        }
        let interval = task.poll_interval_ms.map(|ms| ms.max(MIN_POLL_INTERVAL_MS));
        match task.status {
            TaskStatus::Completed => match task.result {
                Some(envelope) => {
                    self.set_resume(Resume::Call);
                    self.read_envelope_of(id, envelope);
                }
                None => self.interrupt(Interruption::UnreadableAnswer),
            },
            TaskStatus::Failed | TaskStatus::Cancelled => {
                let (code, said) = if task.status == TaskStatus::Failed {
                    ("task_failed", "the task failed")
                } else {
                    ("task_cancelled", "the task was cancelled")
                };
                self.finish(Outcome::Ended {
                    error: ErrorBody::new(code, task.message.as_deref().unwrap_or(said)),
                    advice: Advice::Report,
                    outcomes: 0,
                    unknown_tail: true,
                });
            }
            TaskStatus::Working | TaskStatus::InputRequired => {
                if task
                    .requests
                    .iter()
                    .any(|(_, r)| matches!(r, InputRequest::Unsupported { .. }))
                {
                    self.interrupt(Interruption::UnsupportedInput);
                    return;
                }
                let reason = if task.status == TaskStatus::InputRequired {
                    WaitReason::ApprovalPending
                } else {
                    WaitReason::Task
                };
                self.set_resume(Resume::Task(task.task_id.clone()));
                match self.unshown(task.urls()) {
                    Some((current, rest)) => {
                        self.show(current, rest, AfterShow::Poll(interval, reason));
                    }
                    None => self.wait_poll(interval, reason),
                }
            }
        }
    }

    /// The URLs of `urls` not yet shown for this request (each once), as
    /// the first and the rest.
    fn unshown<'a>(
        &self,
        urls: impl Iterator<Item = &'a UrlElicitation>,
    ) -> Option<(UrlElicitation, Vec<UrlElicitation>)> {
        let shown: &[String] = self.request.as_ref().map_or(&[], |r| &r.shown);
        let mut fresh: Vec<UrlElicitation> = Vec::new();
        for u in urls {
            if !shown.contains(&u.url) && !fresh.iter().any(|f| f.url == u.url) {
                fresh.push(u.clone());
            }
        }
        if fresh.is_empty() {
            return None;
        }
        let first = fresh.remove(0);
        Some((first, fresh))
    }

    /// Shows `current`, then `rest`, then goes on as `then` says.
    fn show(&mut self, current: UrlElicitation, rest: Vec<UrlElicitation>, then: AfterShow) {
        match &self.request {
            Some(r) => {
                self.phase = Phase::Showing {
                    id: r.id,
                    current,
                    rest,
                    then,
                };
            }
            None => self.interrupt(Interruption::GaveUp),
        }
    }

    fn set_resume(&mut self, resume: Resume) {
        if let Some(r) = &mut self.request {
            r.resume = resume;
        }
    }

    fn read_envelope(&mut self, e: Envelope) {
        let may_have_run = self.may_have_run();
        match (e.status, e.ok, e.error) {
            (Some(Status::ApprovalPending), true, _) => {
                self.admitted();
                self.set_resume(Resume::Call);
                match self.unshown(
                    e.approval_url
                        .map(|url| UrlElicitation {
                            url,
                            message: String::new(),
                            elicitation_id: None,
                        })
                        .as_ref()
                        .into_iter(),
                ) {
                    Some((current, rest)) => {
                        self.show(current, rest, AfterShow::Wait(WaitReason::ApprovalPending));
                    }
                    None => self.back_off(WaitReason::ApprovalPending),
                }
            }
            (Some(Status::ExecutionPending), true, _) => {
                self.admitted();
                self.set_resume(Resume::Call);
                self.back_off(WaitReason::ExecutionPending);
            }
            (Some(Status::Done), true, _) => match e.business_error {
                Some(error) => self.finish(Outcome::BusinessFailure {
                    advice: Advice::for_code(&error.code),
                    error,
                    outcomes: e.outcomes,
                    unknown_tail: e.unknown_tail,
                }),
                None => self.finish(Outcome::Returned {
                    result: e.result.unwrap_or(Value::Null),
                    outcomes: e.outcomes,
                    more_outcomes: e.more_outcomes,
                    unknown_tail: e.unknown_tail,
                }),
            },
            (Some(Status::Done), false, Some(error)) => self.finish(Outcome::Ended {
                advice: Advice::for_code(&error.code),
                error,
                outcomes: e.outcomes,
                unknown_tail: e.unknown_tail,
            }),
            (None, false, Some(error)) => self.refused(error, may_have_run),
            // `ok: true` without a status, or a status that contradicts `ok`.
            _ => self.interrupt(Interruption::UnreadableAnswer),
        }
    }

    /// A refusal that recorded nothing for this call.
    fn refused(&mut self, error: ErrorBody, may_have_run: bool) {
        match error.code.as_str() {
            "RATE_LIMITED" => match error.retry_after_ms {
                Some(ms) => self.wait(ms.max(1), WaitReason::RateLimited),
                None => self.back_off(WaitReason::RateLimited),
            },
            "temporarily_unavailable" => self.back_off(WaitReason::Unavailable),
            "server_error" => self.back_off(WaitReason::Retry),
            "no_live_tab" => {
                self.phase = Phase::Human(HumanAction::ReconnectTab {
                    url: error.reconnect_url,
                });
            }
            "tab_not_visible" => self.phase = Phase::Human(HumanAction::ShowTab),
            "SESSION_EXPIRED" | "SESSION_REVOKED" => {
                self.phase = Phase::Authenticate(AfterAuth::Reauthenticate);
            }
            "result_expired" => self.finish(Outcome::Interrupted {
                reason: Interruption::ResultExpired,
                may_have_run: true,
            }),
            // Decide again, under a new id, only if nothing of this request
            // may have run.
            "ACTION_NOT_FOUND" | "EXPECTATION_FAILED" if !may_have_run => {
                self.described = false;
                self.phase = Phase::Describe;
            }
            "INVALID_PARAMS" if !may_have_run => {
                self.phase = self.describe_or_decide(Some(error));
            }
            code => {
                let advice = Advice::for_code(code);
                self.finish(Outcome::Refused {
                    error,
                    advice,
                    may_have_run,
                });
            }
        }
    }

    fn describe_or_decide(&self, correct: Option<ErrorBody>) -> Phase {
        if self.described {
            Phase::Decide(correct)
        } else {
            Phase::Describe
        }
    }

    fn may_have_run(&self) -> bool {
        self.request.as_ref().is_some_and(|r| r.may_have_run)
    }

    fn admitted(&mut self) {
        if let Some(r) = &mut self.request {
            r.may_have_run = true;
        }
    }

    /// The call phase of `how` for the current request.
    fn calling(&self, how: How) -> Phase {
        match &self.request {
            Some(r) => Phase::Calling { id: r.id, how },
            None => Phase::Done(Report {
                request_id: None,
                outcome: Outcome::Interrupted {
                    reason: Interruption::GaveUp,
                    may_have_run: false,
                },
                invocations: self.invocations,
            }),
        }
    }

    /// Resumes the current request as its last answer asks (call again,
    /// retry with the state, poll the task), within the budget.
    fn resume_call(&mut self) {
        let Some(r) = &self.request else {
            self.interrupt(Interruption::GaveUp);
            return;
        };
        let (how, within) = match &r.resume {
            Resume::Call => (
                How::Invoke { resumed: true },
                self.invocations < self.limits.max_invocations,
            ),
            Resume::State(retry) => (
                How::Retry(retry.clone()),
                self.invocations < self.limits.max_invocations,
            ),
            Resume::Task(task_id) => (
                How::Poll(task_id.clone()),
                self.polls < self.limits.max_polls,
            ),
        };
        if within {
            self.phase = self.calling(how);
        } else {
            self.interrupt(Interruption::GaveUp);
        }
    }

    /// Waits a task's interval, or backs off when it named none.
    fn wait_poll(&mut self, interval: Option<u64>, reason: WaitReason) {
        match interval {
            Some(ms) => self.wait(ms, reason),
            None => self.back_off(reason),
        }
    }

    /// Waits the current backoff, then doubles it.
    fn back_off(&mut self, reason: WaitReason) {
        let millis = self.backoff_ms;
        self.backoff_ms = (self.backoff_ms.saturating_mul(2)).min(self.limits.max_backoff_ms);
        self.wait(millis, reason);
    }

    fn wait(&mut self, millis: u64, reason: WaitReason) {
        match self.waited_ms.checked_add(millis) {
            Some(total) if total <= self.limits.max_wait_ms => {
                self.waited_ms = total;
                self.phase = Phase::Waiting { millis, reason };
            }
            _ => self.interrupt(Interruption::GaveUp),
        }
    }

    fn interrupt(&mut self, reason: Interruption) {
        self.finish(Outcome::Interrupted {
            reason,
            may_have_run: self.may_have_run(),
        });
    }

    fn finish(&mut self, outcome: Outcome) {
        self.phase = Phase::Done(Report {
            request_id: self.request.as_ref().map(|r| r.id),
            outcome,
            invocations: self.invocations,
        });
    }
}

#[cfg(test)]
mod tests;
