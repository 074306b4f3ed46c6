//! The agent's client loop driven against the server's ledger (the engine
//! on the memory store), with a world that loses answers, revokes grants,
//! lets tokens expire, disconnects the tab, narrows consents and approves or
//! denies at random, and answers a waiting call in one of the forms a
//! server may use ([`Form`]: the ledger's JSON, a 2026-07-28 multi
//! round-trip request, 2025-11-25's -32042, a task). Whatever happens: no
//! action runs twice, no approval page is shown twice, and the loop's final
//! report is true to what the page saw.

use portcullis::agent_loop::{
    Answer, ClientLoop, Envelope, HumanAction, LoopLimits, Outcome, Report, Session, Status,
    Step as Next, WaitReason,
};
use portcullis::approval::ApprovalDecision;
use portcullis::engine::Principal;
use portcullis::ledger::{BeginError, Caller, Effect, ExecuteParams, RequestId};
use portcullis::scope::{SKILLS_READ, SKILLS_WRITE, ScopeSet};
use portcullis::store::MemoryStore;
use portcullis::token::TokenResponse;
use portcullis::{ErrorCode, Own, WireError};
use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::{Value, json};
use std::collections::BTreeMap;

use crate::ledger::{Exec, Ledger, Step};
use crate::oauth::{USER, VERIFIER};

const FULL: &str = "skills:read skills:write";
const NARROW: &str = "skills:read";
const KINDS: [&str; 4] = ["a.zero", "a.one", "a.two", "a.three"];

/// The agent's one intent: a program of reads and writes.
fn program(writes: &[bool]) -> Vec<Step> {
    writes
        .iter()
        .zip(KINDS)
        .map(|(&write, kind)| {
            let (effect, scope) = if write {
                (Effect::Write, SKILLS_WRITE)
            } else {
                (Effect::Read, SKILLS_READ)
            };
            (kind, effect, scope, "{}")
        })
        .collect()
}

/// How the world's server answers a call that waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// `approval_pending` / `execution_pending` with `approvalUrl`.
    Json,
    /// 2026-07-28: an `InputRequiredResult` (the page once, then the state).
    Mrtr,
    /// 2025-11-25: -32042 while approval is pending.
    UrlElicitation,
    /// 2026-07-28 with tasks: a run in progress is a task.
    Tasks,
}

impl Form {
    fn of(n: u8) -> Self {
        [Self::Json, Self::Mrtr, Self::UrlElicitation, Self::Tasks][usize::from(n % 4)]
    }
}

struct World {
    l: Ledger<MemoryStore>,
    tokens: TokenResponse,
    program: Vec<Step>,
    code: String,
    form: Form,
    /// Requests whose page a first `InputRequiredResult` named.
    prompted: Vec<RequestId>,
    /// How often each page was shown to the person.
    shown: BTreeMap<String, u32>,
    /// Requests answered as a task (their run was still going, as far as
    /// the call could tell).
    tasked: Vec<RequestId>,
    /// The steps the loop asked for, by kind.
    steps: BTreeMap<&'static str, u32>,
}

impl World {
    fn login(&mut self, scope: &str) -> Session {
        let q = self.l.w.query(&[("scope", scope)], &[]);
        let code = self.l.w.code_for(&q);
        self.tokens = self.l.w.exchange(&code, Some(VERIFIER)).unwrap();
        Session::New(ScopeSet::parse(scope).unwrap())
    }

    fn principal(&self) -> Option<Principal> {
        self.l.w.bearer(&self.tokens, "").ok()
    }

    fn needed(&self) -> ScopeSet {
        let mut needed = ScopeSet::new();
        for (_, _, scope, _) in &self.program {
            needed.insert(scope).unwrap();
        }
        needed
    }

    /// The approval page of request `id`.
    fn page(id: RequestId) -> String {
        format!("https://app.example/agents#approval-{id}")
    }

    /// The server's `execute` in the world's [`Form`]; `retry` is the
    /// state a 2026-07-28 retry echoed.
    fn call(&mut self, id: RequestId, retry: Option<&str>) -> Answer {
        if let Some(state) = retry {
            assert_eq!(state, format!("state-{id}"), "the state is echoed verbatim");
        }
        let answer = self.serve(id);
        let Answer::Envelope(e) = &answer else {
            return answer;
        };
        let waiting = match (e.status, e.ok) {
            (Some(Status::ApprovalPending), true) => "approval",
            (Some(Status::ExecutionPending), true) => "run",
            // The run ended, but after the call stopped waiting for it: a
            // task, once per request.
            (Some(Status::Done), _) if self.form == Form::Tasks && !self.tasked.contains(&id) => {
                self.tasked.push(id);
                "run"
            }
            _ => return answer,
        };
        let page = Self::page(id);
        match (self.form, waiting) {
            (Form::Json, "approval") => {
                let body = json!({"ok": true, "requestId": id.to_string(),
                    "status": "approval_pending", "approvalUrl": page});
                Answer::Envelope(Envelope::parse(&body).unwrap())
            }
            (Form::UrlElicitation, "approval") => Answer::from_rpc_error(
                -32042,
                "approve",
                Some(
                    &json!({"elicitations": [{"mode": "url", "url": page, "message": "Approve"}],
                    "requestId": id.to_string()}),
                ),
            ),
            (Form::Tasks, "run") => Answer::from_tool_result(&json!({"resultType": "task",
                "taskId": format!("task-{id}"), "status": "working", "pollIntervalMs": 1000})),
            (Form::Mrtr | Form::Tasks, _) => {
                let mut result =
                    json!({"resultType": "input_required", "requestState": format!("state-{id}")});
                if waiting == "approval" && !self.prompted.contains(&id) {
                    self.prompted.push(id);
                    result["inputRequests"] = json!({"portcullis_approval": {"method": "elicitation/create",
                        "params": {"mode": "url", "message": "Approve", "url": page}}});
                }
                Answer::from_tool_result(&result)
            }
            _ => answer,
        }
    }

    /// `tasks/get` of request `id`'s task: the ledger's state as a task.
    fn poll(&mut self, id: RequestId, task_id: &str) -> Answer {
        assert_eq!(task_id, format!("task-{id}"));
        let answer = self.serve(id);
        let Answer::Envelope(e) = answer else {
            return answer;
        };
        let status = match (e.status, e.ok) {
            (Some(Status::ApprovalPending), true) => {
                return Answer::from_task_result(&json!({"taskId": task_id,
                    "status": "input_required", "pollIntervalMs": 1000,
                    "inputRequests": {"portcullis_approval": {"method": "elicitation/create",
                        "params": {"mode": "url", "message": "Approve", "url": Self::page(id)}}}}));
            }
            (Some(Status::ExecutionPending), true) => "working",
            _ => "completed",
        };
        Answer::from_task_result(&json!({"taskId": task_id, "status": status,
            "pollIntervalMs": 1000, "result": {"content": [], "structuredContent": body_of(id, e)}}))
    }

    /// The person decides every pending approval (or leaves it).
    fn person(&mut self, choice: u8) {
        let pending = self
            .principal()
            .map(|p| {
                self.l
                    .w
                    .engine
                    .pending_approvals(&self.l.w.site, USER, &p.grant)
                    .unwrap()
            })
            .unwrap_or_default();
        for prompt in pending {
            match choice % 3 {
                0 => self.l.decide(&prompt, ApprovalDecision::Once),
                1 => self.l.decide(&prompt, ApprovalDecision::Deny),
                _ => {}
            }
        }
    }

    /// The server's `execute`, answered as the MCP endpoint answers.
    fn serve(&mut self, id: RequestId) -> Answer {
        let Some(p) = self.principal() else {
            return Answer::Unauthorized;
        };
        let params = ExecuteParams::new(&id.to_string(), self.code.clone(), None).unwrap();
        let begun = self.l.w.engine.begin_needing(
            Own,
            &p,
            &params,
            &self.needed(),
            Caller::Client,
            self.l.now_ms(),
        );
        let program = self.program.clone();
        let body = match self.l.go_on(begun, &program) {
            Exec::Result(r) => r.to_json(),
            Exec::Pending => {
                json!({"ok": true, "requestId": id.to_string(), "status": "execution_pending"})
            }
            Exec::Approval(a) => json!({"ok": true, "requestId": id.to_string(),
                "status": "approval_pending", "approval": a.to_json()}),
            Exec::Scope(c) => {
                return Answer::from_http(c.status, Some(&c.www_authenticate), None).unwrap();
            }
            Exec::Hidden => failure(ErrorCode::TabNotVisible, id),
            Exec::Refused(BeginError::Unavailable { retry_after_secs }) => {
                return Answer::Unavailable {
                    retry_after_secs: Some(retry_after_secs),
                };
            }
            Exec::Refused(e) => e.to_json(Some(id)),
            Exec::Cut(e) => failure(e.code(), id),
        };
        Answer::Envelope(Envelope::parse(&body).unwrap())
    }

    fn connect_tab(&mut self, visible: bool) {
        if let Some(p) = self.principal() {
            let mut hello = crate::ledger::hello("tab-1", "page-1");
            hello.visible = visible;
            let _ = self.l.w.engine.connect_tab(
                Own,
                &self.l.w.site,
                USER,
                &p.grant,
                &hello,
                self.l.w.now,
            );
        }
    }

    fn ran(&self) -> Vec<u32> {
        self.program.iter().map(|&s| self.l.page.count(s)).collect()
    }
}

/// An envelope as the JSON it was read from (what the loop reads of it).
fn body_of(id: RequestId, e: Envelope) -> Value {
    let mut body = json!({"ok": e.ok, "requestId": id.to_string()});
    if let Some(s) = e.status {
        body["status"] = json!(match s {
            Status::Done => "done",
            Status::ApprovalPending => "approval_pending",
            Status::ExecutionPending => "execution_pending",
        });
    }
    if let Some(r) = e.result {
        body["result"] = r;
    }
    if let Some(err) = e.error {
        body["error"] = json!({"code": err.code, "message": err.message});
    }
    body["outcomes"] = Value::Array(vec![json!({}); e.outcomes]);
    body["unknownTail"] = json!(e.unknown_tail);
    body
}

fn failure(code: ErrorCode, id: RequestId) -> Value {
    json!({"ok": false, "requestId": id.to_string(), "error": {"code": code.as_str(), "message": "m"}})
}

/// One case: the intent, whether the first consent is read-only, and the
/// world's choices, consumed one per step.
fn run_case(
    writes: &[bool],
    narrow_first: bool,
    form: Form,
    choices: &[u8],
) -> (Report, BTreeMap<&'static str, u32>) {
    let l = Ledger::new(MemoryStore::new());
    let tokens = l.tokens.clone();
    let mut world = World {
        l,
        tokens,
        program: program(writes),
        code: format!("intent({writes:?})"),
        form,
        prompted: Vec::new(),
        shown: BTreeMap::new(),
        tasked: Vec::new(),
        steps: BTreeMap::new(),
    };
    let mut rng = StdRng::seed_from_u64(u64::from(choices.first().copied().unwrap_or(0)));
    let limits = LoopLimits {
        max_invocations: 24,
        ..LoopLimits::default()
    };
    let mut agent = ClientLoop::new(limits);
    let mut choices = choices.iter().copied();
    let mut step = agent.step();
    let mut first_login = true;
    let report = loop {
        let choice = choices.next().unwrap_or(0);
        let kind = match &step {
            Next::Invoke { .. } => "invoke",
            Next::Retry { .. } => "retry",
            Next::Poll { .. } => "poll",
            Next::ShowUrl { .. } => "show",
            _ => "other",
        };
        *world.steps.entry(kind).or_default() += 1;
        step = match step {
            Next::Authenticate { scope } => {
                let session = if first_login {
                    first_login = false;
                    world.login(if narrow_first { NARROW } else { FULL })
                } else if let Some(wider) = scope {
                    // The user grants the step-up, or keeps the narrow scope.
                    let granted = if choice % 4 == 0 { NARROW } else { FULL };
                    let _ = wider;
                    world.login(granted)
                } else if let Ok(fresh) = world
                    .l
                    .w
                    .refresh(world.tokens.refresh_token.expose_secret())
                {
                    let scope = fresh.scope.clone();
                    world.tokens = fresh;
                    Session::Renewed(scope)
                } else {
                    world.login(FULL)
                };
                agent.authenticated(session).unwrap()
            }
            Next::Describe => agent.described().unwrap(),
            Next::Decide { .. } => agent.decide(world.code.clone(), &mut rng).unwrap(),
            Next::ShowUrl {
                request_id, url, ..
            } => {
                assert_eq!(url, World::page(request_id));
                *world.shown.entry(url).or_default() += 1;
                // The person may decide on the page at once.
                world.person(choice);
                agent.shown().unwrap()
            }
            Next::Poll {
                request_id,
                task_id,
            } => {
                let answer = match choice % 16 {
                    6 => Answer::Lost,
                    _ => world.poll(request_id, &task_id),
                };
                agent.answered(answer).unwrap()
            }
            Next::Invoke { request_id, .. } | Next::Retry { request_id, .. } => {
                let retry = match &step {
                    Next::Retry { retry, .. } => retry.state.clone(),
                    _ => None,
                };
                assert_eq!(agent.code(), Some(world.code.as_str()));
                let answer = match choice % 16 {
                    // The call never reaches the server.
                    6 => Answer::Lost,
                    // It runs, and its answer is lost.
                    7 => {
                        let _ = world.serve(request_id);
                        Answer::Lost
                    }
                    8 => {
                        if let Some(p) = world.principal() {
                            let _ = world.l.w.engine.disconnect_tab(
                                Own,
                                &world.l.w.site,
                                USER,
                                &p.grant,
                                "tab-1",
                                "page-1",
                                world.l.w.now,
                            );
                        }
                        world.call(request_id, retry.as_deref())
                    }
                    9 => {
                        if let Some(p) = world.principal() {
                            world
                                .l
                                .w
                                .engine
                                .revoke_grant(Own, &p.grant, world.l.w.now)
                                .unwrap();
                        }
                        world.call(request_id, retry.as_deref())
                    }
                    10 => {
                        // The access token expires; the tab keeps beating.
                        world.l.advance(301, "tab-1", "page-1");
                        world.call(request_id, retry.as_deref())
                    }
                    11 => {
                        world.connect_tab(false);
                        world.call(request_id, retry.as_deref())
                    }
                    _ => world.call(request_id, retry.as_deref()),
                };
                agent.answered(answer).unwrap()
            }
            Next::Wait { reason, .. } => {
                if matches!(reason, WaitReason::ApprovalPending | WaitReason::Pending) {
                    world.person(choice);
                }
                agent.resume().unwrap()
            }
            Next::AskHuman(action) => {
                if choice % 16 == 15 {
                    agent.give_up()
                } else {
                    match action {
                        HumanAction::ReconnectTab { .. } | HumanAction::ShowTab => {
                            world.connect_tab(true);
                        }
                    }
                    agent.resume().unwrap()
                }
            }
            Next::Done(report) => break report,
        };
    };

    assert!(
        world.shown.values().all(|&n| n == 1),
        "a page shown twice: {:?}",
        world.shown
    );
    // Every page a multi round-trip request named was shown.
    for id in &world.prompted {
        assert!(world.shown.contains_key(&World::page(*id)));
    }
    let ran = world.ran();
    assert!(
        ran.iter().all(|&n| n <= 1),
        "an action ran twice: {ran:?}, {report:?}"
    );
    let all = ran.iter().all(|&n| n == 1);
    let none = ran.iter().all(|&n| n == 0);
    let total: u32 = ran.iter().sum();
    match &report.outcome {
        Outcome::Returned { unknown_tail, .. } => {
            assert!(all && !unknown_tail, "returned, but ran {ran:?}");
        }
        Outcome::Ended {
            outcomes,
            unknown_tail: false,
            ..
        } => {
            assert_eq!(*outcomes as u32, total, "the outcomes say what ran");
        }
        Outcome::Refused {
            may_have_run: false,
            ..
        }
        | Outcome::Interrupted {
            may_have_run: false,
            ..
        } => assert!(none, "reported nothing ran, but ran {ran:?}: {report:?}"),
        _ => {}
    }
    (report, world.steps)
}

fn config(cases: u32) -> ProptestConfig {
    crate::support::proptest_config(cases, "proptest-regressions/agent_loop.txt")
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn the_loop_never_runs_an_action_twice_and_reports_honestly(
        writes in prop::collection::vec(any::<bool>(), 1..=4),
        narrow_first in any::<bool>(),
        form in any::<u8>(),
        choices in prop::collection::vec(any::<u8>(), 0..48),
    ) {
        run_case(&writes, narrow_first, Form::of(form), &choices);
    }
}

/// The plain paths, so a regression shows as a named test too.
#[test]
fn a_write_goes_through_approval_and_a_step_up() {
    // Read-only first: the write steps up, waits for approval (approved on
    // the first wait) and returns.
    run_case(&[false, true], true, Form::Json, &[0, 0, 0, 0, 0, 0, 0, 0]);
    // A lost answer after the run, then a revoked grant.
    run_case(&[false], false, Form::Json, &[0, 0, 7, 9]);
}

/// The same write in each form a server may use for the approval: the
/// page shown once, the request resumed as the form says, one result.
#[test]
fn a_write_goes_through_approval_in_every_form() {
    for (form, resumed_by) in [
        (Form::Json, "invoke"),
        (Form::Mrtr, "retry"),
        (Form::UrlElicitation, "invoke"),
        (Form::Tasks, "poll"),
    ] {
        for choices in [&[0; 12][..], &[2, 2, 2, 2, 2, 0, 0, 0, 0, 0]] {
            let (report, steps) = run_case(&[true], false, form, choices);
            assert!(
                matches!(report.outcome, Outcome::Returned { .. }),
                "{form:?}: {report:?}"
            );
            assert_eq!(steps.get("show"), Some(&1), "{form:?}: {steps:?}");
            assert!(steps.get(resumed_by) >= Some(&1), "{form:?}: {steps:?}");
        }
    }
}
