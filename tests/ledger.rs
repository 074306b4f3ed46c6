//! The execution-ledger conformance suite: every scenario runs on every
//! store, drives a simulated page that counts how many times each action
//! really ran, and holds the clock.

use std::collections::HashMap;

use std::ops::Bound;

use portcullis::approval::{ApprovalDecision, ApprovalError, ApprovalPrompt};
use portcullis::bearer::Challenge;
use portcullis::engine::Principal;
use portcullis::grant::GrantId;
use portcullis::ledger::{
    Action, ActionVerdict, BeginAnswer, BeginError, Caller, Completion, Effect, End, ExecuteParams,
    Failure, OutcomesError, Park, RateLimit, Report, RequestId, RequestState, StoredResult,
    TicketError,
};
use portcullis::scope::{SKILLS_READ, SKILLS_WRITE};
use portcullis::store::{ReadTransaction, Store, Table, WriteTransaction};
use portcullis::tab::{Dispatch, TabError, TabHello};
use portcullis::token::TokenResponse;
use portcullis::{Own, Policy, TimestampMs, WireError};
use serde_json::json;

use crate::oauth::{USER, VERIFIER, World};
use crate::on_every_store;

const HOUR: u64 = 3_600;

/// One step of a program: `(kind, effect, scope, arguments)`.
pub(crate) type Step = (&'static str, Effect, &'static str, &'static str);

const READ: Step = ("items.list", Effect::Read, SKILLS_READ, "{}");
const WRITE: Step = ("cart.add", Effect::Write, SKILLS_WRITE, r#"{"sku":1}"#);

/// The simulated page (or server): counts real executions per
/// `kind:arguments`.
#[derive(Default)]
pub(crate) struct Page {
    pub(crate) ran: HashMap<String, u32>,
}

impl Page {
    pub(crate) fn count(&self, (kind, _, _, args): Step) -> u32 {
        self.ran
            .get(&format!("{kind}:{args}"))
            .copied()
            .unwrap_or(0)
    }
}

/// How one `execute` call ended, from the client's side.
#[derive(Debug)]
pub(crate) enum Exec {
    Result(StoredResult),
    Pending,
    Approval(ApprovalPrompt),
    Scope(Challenge),
    Hidden,
    Refused(BeginError),
    Cut(TicketError),
}

pub(crate) fn id(n: u32) -> String {
    format!("00000000-0000-4000-8000-{n:012x}")
}

pub(crate) fn params(n: u32, code: &str) -> ExecuteParams {
    ExecuteParams::new(&id(n), code.into(), None).unwrap()
}

pub(crate) fn action((kind, effect, scope, args): Step) -> Action {
    Action::new(kind, effect, scope, args.as_bytes()).unwrap()
}

pub(crate) fn hello(tab: &str, page: &str) -> TabHello {
    TabHello {
        browser_session: "browser-1".into(),
        tab_id: tab.into(),
        page_instance: page.into(),
        visible: true,
    }
}

pub(crate) fn no_rate_limit() -> Policy {
    let mut p = Policy::default();
    p.execute_rate = RateLimit::new(0, 1);
    p
}

/// A world with one full-scope login whose grant has a connected tab.
pub(crate) struct Ledger<S: Store> {
    pub(crate) w: World<S>,
    pub(crate) tokens: TokenResponse,
    pub(crate) p: Principal,
    pub(crate) page: Page,
    pub(crate) ms: u64,
}

impl<S: Store> Ledger<S> {
    pub(crate) fn new(store: S) -> Self {
        Self::with_policy(store, no_rate_limit())
    }

    fn with_policy(store: S, policy: Policy) -> Self {
        let mut w = World::with_policy(store, policy);
        let tokens = w.login();
        let p = w.bearer(&tokens, "").unwrap();
        let mut l = Self {
            w,
            tokens,
            p,
            page: Page::default(),
            ms: 0,
        };
        l.connect("tab-1", "page-1");
        l
    }

    pub(crate) fn now_ms(&self) -> TimestampMs {
        TimestampMs::from_millis(TimestampMs::from(self.w.now).as_millis() + self.ms)
    }

    pub(crate) fn connect(&mut self, tab: &str, page: &str) {
        self.w
            .engine
            .connect_tab(
                Own,
                &self.w.site,
                USER,
                &self.p.grant,
                &hello(tab, page),
                self.w.now,
            )
            .unwrap();
    }

    /// Advances the clock, keeping the tab's heartbeat alive.
    pub(crate) fn advance(&mut self, secs: u64, tab: &str, page: &str) {
        let mut left = secs;
        while left > 0 {
            let step = left.min(30);
            self.w.advance(step);
            left -= step;
            let _ = self.w.engine.tab_heartbeat(
                Own,
                &self.w.site,
                USER,
                &self.p.grant,
                tab,
                page,
                true,
                self.w.now,
            );
        }
    }

    fn begin(&mut self, n: u32, code: &str) -> Result<BeginAnswer, BeginError> {
        self.begin_as(&self.p.clone(), n, code)
    }

    fn begin_as(&mut self, p: &Principal, n: u32, code: &str) -> Result<BeginAnswer, BeginError> {
        self.w
            .engine
            .begin(Own, p, &params(n, code), Caller::Client, self.now_ms())
    }

    /// `execute`: begin, and if admitted run `program` to the end.
    pub(crate) fn execute(&mut self, n: u32, code: &str, program: &[Step]) -> Exec {
        let p = self.p.clone();
        self.execute_as(&p, n, code, program)
    }

    pub(crate) fn execute_as(
        &mut self,
        p: &Principal,
        n: u32,
        code: &str,
        program: &[Step],
    ) -> Exec {
        let answer = self.begin_as(p, n, code);
        self.go_on(answer, program)
    }

    /// What `execute` answers after `begin` answered `answer`: an admitted
    /// run runs `program` to the end.
    pub(crate) fn go_on(
        &mut self,
        answer: Result<BeginAnswer, BeginError>,
        program: &[Step],
    ) -> Exec {
        match answer {
            Ok(BeginAnswer::Run(ticket)) => self.run(ticket, program),
            Ok(BeginAnswer::ExecutionPending(_)) => Exec::Pending,
            Ok(BeginAnswer::ApprovalPending(a)) => Exec::Approval(a),
            Ok(BeginAnswer::Stored(r)) => Exec::Result(r),
            Err(BeginError::InsufficientScope(c)) => Exec::Scope(c),
            Err(e) => Exec::Refused(e),
        }
    }

    fn run(&mut self, mut ticket: portcullis::ledger::ExecutionTicket, program: &[Step]) -> Exec {
        let now = self.w.now;
        for &step in program {
            match self
                .w
                .engine
                .authorize_action(Own, ticket, &action(step), now)
            {
                Ok(ActionVerdict::Run(t)) => {
                    let key = format!("{}:{}", step.0, step.3);
                    *self.page.ran.entry(key.clone()).or_default() += 1;
                    ticket = match self.w.engine.record_outcome(Own, t, Report::ok(key), now) {
                        Ok(t) => t,
                        Err(e) => return Exec::Cut(e),
                    };
                }
                Ok(ActionVerdict::Replay(t, _)) => ticket = t,
                Ok(ActionVerdict::ApprovalPending(a)) => return Exec::Approval(a),
                Ok(ActionVerdict::InsufficientScope(c)) => return Exec::Scope(c),
                Ok(ActionVerdict::TabNotVisible) => return Exec::Hidden,
                Err(e) => return Exec::Cut(e),
            }
        }
        let value = Completion::Value(json!({ "steps": program.len() }));
        match self.w.engine.complete(Own, ticket, &value, now) {
            Ok(r) => Exec::Result(r),
            Err(e) => Exec::Cut(e),
        }
    }

    pub(crate) fn decide(&mut self, prompt: &ApprovalPrompt, decision: ApprovalDecision) {
        self.w
            .engine
            .decide_approval(
                Own,
                &self.w.site,
                USER,
                &prompt.reference(),
                decision,
                self.w.now,
            )
            .unwrap();
    }

    pub(crate) fn state(&self, n: u32) -> RequestState {
        self.w
            .engine
            .execution_request(&self.p, &RequestId::parse(&id(n)).unwrap())
            .unwrap()
            .unwrap()
            .state()
            .clone()
    }
}

pub(crate) fn result(e: Exec) -> StoredResult {
    match e {
        Exec::Result(r) => r,
        other => panic!("expected a result, got {other:?}"),
    }
}

pub(crate) fn approval(e: Exec) -> ApprovalPrompt {
    match e {
        Exec::Approval(a) => a,
        other => panic!("expected approval_pending, got {other:?}"),
    }
}

pub(crate) fn refused(e: Exec) -> BeginError {
    match e {
        Exec::Refused(e) => e,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn same_id_and_code_returns_the_stored_result_and_runs_once<S: Store>(store: &S) {
    let mut l = Ledger::new(store);
    let first = result(l.execute(1, "read()", &[READ, READ]));
    assert_eq!(first.end, End::Returned(r#"{"steps":2}"#.into()));
    assert_eq!(first.outcomes.total, 2);
    let again = result(l.execute(1, "read()", &[READ, READ]));
    assert_eq!(again, first);
    assert_eq!(l.page.count(READ), 2, "two reads in one run, never re-run");
    let v = again.to_json();
    assert_eq!(v["ok"], true);
    assert_eq!(v["status"], "done");
    assert_eq!(v["unknownTail"], false);
    assert_eq!(v["outcomes"][1]["seq"], 1);
}

fn a_different_code_under_the_same_id_is_replay_detected<S: Store>(store: &S) {
    let mut l = Ledger::new(store);
    result(l.execute(1, "read()", &[READ]));
    let e = refused(l.execute(1, "write()", &[WRITE]));
    assert_eq!(e, BeginError::ReplayDetected);
    assert_eq!(e.code().as_str(), "REPLAY_DETECTED");
    assert_eq!(l.page.count(WRITE), 0);
    // Bad ids never reach the ledger.
    let bad = ExecuteParams::new("not-a-uuid", "x".into(), None).unwrap_err();
    assert_eq!(bad.code().as_str(), "INVALID_PARAMS");
}

fn a_duplicate_while_running_is_execution_pending<S: Store>(store: &S) {
    let mut l = Ledger::new(store);
    let Ok(BeginAnswer::Run(ticket)) = l.begin(1, "read()") else {
        panic!("expected a run")
    };
    assert!(matches!(
        l.begin(1, "read()"),
        Ok(BeginAnswer::ExecutionPending(_))
    ));
    let Ok(BeginAnswer::ExecutionPending(_)) = l.begin(1, "read()") else {
        panic!("still pending")
    };
    let r = result(l.run(ticket, &[READ]));
    assert_eq!(result(l.execute(1, "read()", &[READ])), r);
    assert_eq!(l.page.count(READ), 1);
}

fn an_approved_write_resumes_under_the_same_id<S: Store>(store: &S) {
    let mut l = Ledger::new(store);
    let prompt = approval(l.execute(1, "buy()", &[READ, WRITE]));
    assert_eq!(prompt.client_name.as_deref(), Some("Test Agent"));
    assert_eq!(prompt.client_id, l.p.client_id);
    assert_eq!(prompt.kind, "cart.add");
    assert_eq!(
        l.w.engine
            .pending_approvals(&l.w.site, USER, &l.p.grant)
            .unwrap(),
        vec![prompt.clone()]
    );
    // Asking again shows the same prompt; nothing runs.
    assert_eq!(approval(l.execute(1, "buy()", &[READ, WRITE])), prompt);
    l.decide(&prompt, ApprovalDecision::Once);
    let r = result(l.execute(1, "buy()", &[READ, WRITE]));
    assert_eq!(r.outcomes.total, 2);
    assert_eq!(result(l.execute(1, "buy()", &[READ, WRITE])), r);
    assert_eq!((l.page.count(READ), l.page.count(WRITE)), (1, 1));
    // The approval was used once: deciding again is refused.
    let again = l.w.engine.decide_approval(
        Own,
        &l.w.site,
        USER,
        &prompt.reference(),
        ApprovalDecision::Once,
        l.w.now,
    );
    assert_eq!(again, Err(ApprovalError::NotPending));
}

fn a_denied_write_is_permission_denied<S: Store>(store: &S) {
    let mut l = Ledger::new(store);
    let prompt = approval(l.execute(1, "buy()", &[READ, WRITE]));
    l.decide(&prompt, ApprovalDecision::Deny);
    let r = result(l.execute(1, "buy()", &[READ, WRITE]));
    assert_eq!(r.end, End::Failed(Failure::Denied));
    let v = r.to_json();
    assert_eq!(v["ok"], false);
    assert_eq!(v["error"]["code"], "PERMISSION_DENIED");
    assert_eq!(v["outcomes"].as_array().unwrap().len(), 1, "the read ran");
    assert_eq!((l.page.count(READ), l.page.count(WRITE)), (1, 0));
}

fn a_missing_scope_parks_and_the_upgraded_grant_resumes<S: Store>(store: &S) {
    const AFTER: Step = ("items.count", Effect::Read, SKILLS_READ, "{}");
    let mut l = Ledger::new(store);
    // A read-only login, with its own connected tab.
    let q = l.w.query(&[("scope", "skills:read")], &[]);
    let code = l.w.code_for(&q);
    let narrow = l.w.exchange(&code, Some(VERIFIER)).unwrap();
    let p1 = l.w.bearer(&narrow, "").unwrap();
    l.w.engine
        .connect_tab(
            Own,
            &l.w.site,
            USER,
            &p1.grant,
            &hello("tab-1", "page-1"),
            l.w.now,
        )
        .unwrap();
    let program = [READ, WRITE, AFTER];
    let Exec::Scope(challenge) = l.execute_as(&p1, 7, "mixed()", &program) else {
        panic!("expected insufficient_scope")
    };
    assert_eq!(challenge.status, 403);
    assert!(
        challenge
            .www_authenticate
            .contains(r#"scope="skills:read skills:write""#),
        "{}",
        challenge.www_authenticate
    );
    // Retrying with the same narrow token is refused before anything runs.
    assert!(matches!(
        l.begin_as(&p1, 7, "mixed()"),
        Err(BeginError::InsufficientScope(_))
    ));
    assert_eq!(l.page.count(READ), 1);
    // The user grants the wider scope: a new grant of the same lineage.
    let wide = l.w.login();
    let p2 = l.w.bearer(&wide, "").unwrap();
    assert_ne!(p1.grant, p2.grant);
    l.w.engine
        .connect_tab(
            Own,
            &l.w.site,
            USER,
            &p2.grant,
            &hello("tab-1", "page-1"),
            l.w.now,
        )
        .unwrap();
    let prompt = approval(l.execute_as(&p2, 7, "mixed()", &program));
    assert_eq!(prompt.grant, p2.grant);
    l.decide(&prompt, ApprovalDecision::Once);
    let r = result(l.execute_as(&p2, 7, "mixed()", &program));
    assert_eq!(r.outcomes.total, 3);
    assert_eq!(result(l.execute_as(&p2, 7, "mixed()", &program)), r);
    assert_eq!(
        l.page.count(READ),
        1,
        "the first read was replayed, not re-run"
    );
    assert_eq!((l.page.count(WRITE), l.page.count(AFTER)), (1, 1));
}

fn a_new_grant_joins_the_users_live_tab_and_scope_comes_before_the_tab<S: Store>(store: &S) {
    let mut l = Ledger::new(store);
    // A second consent of the same user (a read-only step-down here; any
    // consent works the same): served by the open tab from its creation.
    let q = l.w.query(&[("scope", "skills:read")], &[]);
    let code = l.w.code_for(&q);
    let narrow = l.w.exchange(&code, Some(VERIFIER)).unwrap();
    let p1 = l.w.bearer(&narrow, "").unwrap();
    let joined = l.w.engine.tab_connection(&p1.grant).unwrap().unwrap();
    assert_eq!(
        (joined.tab_id.as_str(), joined.page_instance.as_str()),
        ("tab-1", "page-1")
    );
    assert!(matches!(
        l.w.engine.dispatch(&p1.grant, false, l.w.now).unwrap(),
        Dispatch::To(_)
    ));
    // The page's heartbeats keep it live like the first grant's.
    l.w.advance(30);
    l.w.engine
        .tab_heartbeat(
            Own, &l.w.site, USER, &p1.grant, "tab-1", "page-1", true, l.w.now,
        )
        .unwrap();

    // Another user's consent never joins alice's tab.
    let q = l.w.query(&[], &[]);
    let other = match l
        .w
        .engine
        .decide(
            Own,
            &l.w.site,
            &q,
            None,
            "mallory",
            true,
            &mut l.w.rng,
            l.w.now,
        )
        .unwrap()
    {
        portcullis::authorize::AuthorizeAnswer::Redirect(url) => {
            crate::oauth::redirect_param(&url, "code").unwrap()
        }
        other => panic!("expected a redirect, got {other:?}"),
    };
    let theirs = l.w.exchange(&other, Some(VERIFIER)).unwrap();
    let p3 = l.w.bearer(&theirs, "").unwrap();
    assert_eq!(l.w.engine.tab_connection(&p3.grant).unwrap(), None);

    // With no tab at all, a call that needs a scope the token lacks is
    // refused for the scope, not the tab, and nothing is stored.
    assert_eq!(
        l.w.engine
            .reset_session(Own, &l.w.site, "browser-1", l.w.now)
            .unwrap(),
        2
    );
    let write = portcullis::scope::ScopeSet::parse("skills:write").unwrap();
    let e =
        l.w.engine
            .begin_needing(
                Own,
                &p1,
                &params(9, "buy()"),
                &write,
                Caller::Client,
                l.now_ms(),
            )
            .unwrap_err();
    let BeginError::InsufficientScope(c) = &e else {
        panic!("expected insufficient_scope, got {e:?}")
    };
    assert_eq!(c.status, 403);
    assert!(
        c.www_authenticate
            .contains(r#"scope="skills:read skills:write""#),
        "{}",
        c.www_authenticate
    );
    let id9 = RequestId::parse(&id(9)).unwrap();
    assert_eq!(l.w.engine.execution_request(&p1, &id9).unwrap(), None);
    // Without the scope hint the tab is what is missing.
    assert!(matches!(
        l.begin_as(&p1, 9, "buy()"),
        Err(BeginError::NoLiveTab(_))
    ));
    // A token that holds the scope meets the tab check.
    let p = l.p.clone();
    assert!(matches!(
        l.w.engine.begin_needing(
            Own,
            &p,
            &params(9, "buy()"),
            &write,
            Caller::Client,
            l.now_ms()
        ),
        Err(BeginError::NoLiveTab(_))
    ));
}

fn an_auto_approved_kind_still_asks_for_an_identical_write<S: Store>(store: &S) {
    const W1: Step = ("cart.add", Effect::Write, SKILLS_WRITE, r#"{"sku":1}"#);
    const W2: Step = ("cart.add", Effect::Write, SKILLS_WRITE, r#"{"sku":2}"#);
    const UNKNOWN: Step = ("cart.add", Effect::Unknown, SKILLS_WRITE, r#"{"sku":3}"#);
    let mut l = Ledger::new(store);
    let prompt = approval(l.execute(1, "a()", &[W1]));
    assert!(prompt.offer_auto_approve);
    l.decide(&prompt, ApprovalDecision::AutoApproveKind);
    result(l.execute(1, "a()", &[W1]));
    // Another write of the kind runs without asking…
    result(l.execute(2, "b()", &[W2]));
    // …but an identical repeat asks again, even auto-approved…
    let again = approval(l.execute(3, "c()", &[W1]));
    assert_eq!(again.kind, "cart.add");
    let again2 = approval(l.execute(4, "d()", &[W2]));
    assert_eq!(again2.seq, 0);
    // …and unknown effects are never auto-approved.
    let unknown = approval(l.execute(5, "e()", &[UNKNOWN]));
    assert!(!unknown.offer_auto_approve);
    assert_eq!((l.page.count(W1), l.page.count(W2)), (1, 1));
}

fn in_page_callers_are_never_auto_approved<S: Store>(store: &S) {
    const W1: Step = ("cart.add", Effect::Write, SKILLS_WRITE, r#"{"sku":1}"#);
    const W2: Step = ("cart.add", Effect::Write, SKILLS_WRITE, r#"{"sku":2}"#);
    let mut l = Ledger::new(store);
    let prompt = approval(l.execute(1, "a()", &[W1]));
    l.decide(&prompt, ApprovalDecision::AutoApproveKind);
    let Ok(BeginAnswer::Run(t)) =
        l.w.engine
            .begin(Own, &l.p, &params(2, "b()"), Caller::InPage, l.now_ms())
    else {
        panic!("expected a run")
    };
    let prompt = approval(l.run(t, &[W2]));
    assert!(!prompt.offer_auto_approve);
}

/// Auto-approves `cart.add` and checks the next distinct write runs unasked.
fn arm_auto_approval<S: Store>(l: &mut Ledger<S>, n: u32) {
    let args: &'static str = Box::leak(format!(r#"{{"sku":{n}}}"#).into_boxed_str());
    let step: Step = ("cart.add", Effect::Write, SKILLS_WRITE, args);
    let prompt = approval(l.execute(n, &format!("arm{n}"), &[step]));
    l.decide(&prompt, ApprovalDecision::AutoApproveKind);
    result(l.execute(n, &format!("arm{n}"), &[step]));
}

fn asks(l: &mut Ledger<impl Store>, n: u32) -> bool {
    let args: &'static str = Box::leak(format!(r#"{{"sku":{n}}}"#).into_boxed_str());
    matches!(
        l.execute(
            n,
            &format!("probe{n}"),
            &[("cart.add", Effect::Write, SKILLS_WRITE, args)]
        ),
        Exec::Approval(_)
    )
}

fn reload_sign_out_and_revocation_end_auto_approval<S: Store>(store: &S) {
    let mut l = Ledger::new(store);
    arm_auto_approval(&mut l, 100);
    assert!(!asks(&mut l, 101), "armed");
    // Reload: same tab, new page instance.
    l.connect("tab-1", "page-2");
    assert!(asks(&mut l, 102), "reload ended it");

    arm_auto_approval(&mut l, 103);
    assert_eq!(
        l.w.engine
            .reset_session(Own, &l.w.site, "browser-1", l.w.now)
            .unwrap(),
        1
    );
    assert_eq!(
        l.w.engine.dispatch(&l.p.grant, false, l.w.now).unwrap(),
        Dispatch::NoLiveTab
    );
    assert!(matches!(
        refused(l.execute(104, "x", &[READ])),
        BeginError::NoLiveTab(_)
    ));
    l.connect("tab-1", "page-3");
    assert!(asks(&mut l, 105), "sign-out ended it");

    arm_auto_approval(&mut l, 106);
    l.w.engine.revoke_grant(Own, &l.p.grant, l.w.now).unwrap();
    let tab = l.w.engine.tab_connection(&l.p.grant).unwrap().unwrap();
    assert!(
        !tab.connected && tab.auto_kinds.is_empty(),
        "revocation ended it"
    );
    assert_eq!(
        refused(l.execute(107, "x", &[READ])),
        BeginError::SessionRevoked
    );
}

fn results_expire_after_24_hours_and_never_run_again<S: Store>(store: &S) {
    let mut l = Ledger::new(store);
    result(l.execute(1, "read()", &[READ]));
    l.advance(24 * HOUR - 1, "tab-1", "page-1");
    result(l.execute(1, "read()", &[READ]));
    l.advance(1, "tab-1", "page-1");
    assert_eq!(
        refused(l.execute(1, "read()", &[READ])),
        BeginError::ResultExpired
    );
    while l.w.engine.sweep_ledger(Own, l.w.now, 4).unwrap() == 4 {}
    assert_eq!(l.state(1), RequestState::Expired, "a tombstone remains");
    assert_eq!(
        refused(l.execute(1, "read()", &[READ])),
        BeginError::ResultExpired
    );
    assert_eq!(
        refused(l.execute(1, "other()", &[READ])),
        BeginError::ReplayDetected
    );
    assert_eq!(l.page.count(READ), 1);
    assert_eq!(BeginError::ResultExpired.http_status(), 410);
}

fn pending_work_survives_past_24_hours<S: Store>(store: &S) {
    let mut l = Ledger::new(store);
    let prompt = approval(l.execute(1, "buy()", &[WRITE]));
    l.advance(25 * HOUR, "tab-1", "page-1");
    while l.w.engine.sweep_ledger(Own, l.w.now, 8).unwrap() == 8 {}
    assert_eq!(approval(l.execute(1, "buy()", &[WRITE])), prompt);
    l.decide(&prompt, ApprovalDecision::Once);
    result(l.execute(1, "buy()", &[WRITE]));
    assert_eq!(l.page.count(WRITE), 1);
}

fn revocation_cancels_a_running_request<S: Store>(store: &S) {
    let mut l = Ledger::new(store);
    let Ok(BeginAnswer::Run(t)) = l.begin(1, "read()") else {
        panic!("expected a run")
    };
    let Ok(ActionVerdict::Run(t)) = l.w.engine.authorize_action(Own, t, &action(READ), l.w.now)
    else {
        panic!("expected to run the read")
    };
    l.w.engine.revoke_grant(Own, &l.p.grant, l.w.now).unwrap();
    let Err(TicketError::Stale) =
        l.w.engine
            .record_outcome(Own, t, Report::ok("late"), l.w.now)
    else {
        panic!("the run must stop")
    };
    let RequestState::Done {
        end, unknown_tail, ..
    } = l.state(1)
    else {
        panic!("cancelled")
    };
    assert_eq!((end, unknown_tail), (End::Failed(Failure::Revoked), true));
    assert_eq!(
        refused(l.execute(1, "read()", &[READ])),
        BeginError::SessionRevoked
    );
}

fn refresh_reuse_cancels_running_requests<S: Store>(store: &S) {
    let mut policy = no_rate_limit();
    policy.refresh_reuse_grace = std::time::Duration::ZERO;
    let mut l = Ledger::with_policy(store, policy);
    let Ok(BeginAnswer::Run(t)) = l.begin(1, "read()") else {
        panic!("expected a run")
    };
    let spent = l.tokens.refresh_token.expose_secret().to_string();
    l.w.refresh(&spent).unwrap();
    l.w.refresh(&spent).unwrap_err();
    assert!(matches!(
        l.w.engine.authorize_action(Own, t, &action(READ), l.w.now),
        Err(TicketError::Stale)
    ));
    assert!(matches!(
        l.state(1),
        RequestState::Done {
            end: End::Failed(Failure::Revoked),
            ..
        }
    ));
}

fn site_wide_revocation_ends_requests_when_touched<S: Store>(store: &S) {
    let mut l = Ledger::new(store);
    let Ok(BeginAnswer::Run(t)) = l.begin(1, "read()") else {
        panic!("expected a run")
    };
    l.w.engine.revoke_site_grants(Own, &l.w.site).unwrap();
    assert_eq!(
        l.w.engine.authorize_action(Own, t, &action(READ), l.w.now),
        Err(TicketError::Ended(Failure::Revoked))
    );
    assert!(matches!(
        l.state(1),
        RequestState::Done {
            end: End::Failed(Failure::Revoked),
            unknown_tail: true,
            ..
        }
    ));
}

fn the_129th_undecided_request_is_refused<S: Store>(store: &S) {
    let mut l = Ledger::new(store);
    let mut tickets = Vec::new();
    for n in 0..128 {
        let Ok(BeginAnswer::Run(t)) = l.begin(n, "read()") else {
            panic!("request {n} admitted")
        };
        tickets.push(t);
    }
    let e = l.begin(128, "read()").unwrap_err();
    assert_eq!(e, BeginError::TooManyUndecided { limit: 128 });
    assert_eq!(e.code().as_str(), "ACTION_UNAVAILABLE");
    // Nothing was evicted: every undecided request is still pending.
    assert!(matches!(
        l.begin(0, "read()"),
        Ok(BeginAnswer::ExecutionPending(_))
    ));
    // Deciding one makes room.
    let t = tickets.pop().unwrap();
    result(l.run(t, &[READ]));
    assert!(matches!(l.begin(128, "read()"), Ok(BeginAnswer::Run(_))));
}

fn rate_limiting_answers_an_exact_retry_after<S: Store>(store: &S) {
    let mut policy = Policy::default();
    policy.execute_rate = RateLimit::new(1_000, 2);
    let mut l = Ledger::with_policy(store, policy);
    result(l.execute(1, "a", &[READ]));
    result(l.execute(2, "b", &[READ]));
    l.ms = 250;
    let e = refused(l.execute(3, "c", &[READ]));
    assert_eq!(
        e,
        BeginError::RateLimited {
            retry_after_ms: 750
        }
    );
    assert_eq!(e.to_json(None)["error"]["retryAfterMs"], 750);
    assert_eq!(e.http_status(), 429);
    l.ms = 999;
    assert_eq!(
        refused(l.execute(3, "c", &[READ])),
        BeginError::RateLimited { retry_after_ms: 1 }
    );
    l.ms = 1_000;
    result(l.execute(3, "c", &[READ]));
    assert_eq!(l.page.count(READ), 3);
}

fn a_thousand_outcomes_page_with_a_stable_unforgeable_cursor<S: Store>(store: &S) {
    let mut l = Ledger::new(store);
    let program: Vec<Step> = (0..1_000)
        .map(|i| {
            let args: &'static str = Box::leak(format!("{{\"i\":{i}}}").into_boxed_str());
            ("items.get", Effect::Read, SKILLS_READ, args)
        })
        .collect();
    let first = result(l.execute(1, "many()", &program));
    assert_eq!(first.outcomes.total, 1_000);
    assert_eq!(first.outcomes.outcomes.len(), 100);
    let again = result(l.execute(1, "many()", &program));
    assert_eq!(again.outcomes.next, first.outcomes.next, "stable");
    let rid = RequestId::parse(&id(1)).unwrap();
    let mut seen = first.outcomes.outcomes.len();
    let mut cursor = first.outcomes.next.clone();
    let mut pages = 1;
    while let Some(c) = cursor {
        let page = l.w.engine.outcomes(&l.p, &rid, &c, l.w.now).unwrap();
        assert_eq!(page.outcomes[0].seq as usize, seen);
        seen += page.outcomes.len();
        cursor = page.next;
        pages += 1;
    }
    assert_eq!((seen, pages), (1_000, 10));
    // The cursor also works through `execute`.
    let c = first.outcomes.next.clone().unwrap();
    let via_execute =
        l.w.engine
            .begin(
                Own,
                &l.p,
                &ExecuteParams::new(&id(1), "many()".into(), Some(c.clone())).unwrap(),
                Caller::Client,
                l.now_ms(),
            )
            .unwrap();
    let BeginAnswer::Stored(second) = via_execute else {
        panic!("stored")
    };
    assert_eq!(second.outcomes.outcomes[0].seq, 100);
    // Tampered and foreign cursors are refused.
    let mut tampered = c.clone().into_bytes();
    tampered[3] = if tampered[3] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    assert!(matches!(
        l.w.engine.outcomes(&l.p, &rid, &tampered, l.w.now),
        Err(OutcomesError::Invalid(_))
    ));
    assert_eq!(l.page.count(program[0]), 1);
    assert_eq!(l.page.count(program[999]), 1);
    let other = result(l.execute(2, "other()", &program[..150]));
    let foreign = other.outcomes.next.unwrap();
    let e =
        l.w.engine
            .outcomes(&l.p, &rid, &foreign, l.w.now)
            .unwrap_err();
    assert_eq!(e.code().as_str(), "INVALID_PARAMS");
}

fn take_over_marks_the_old_tabs_call_unknown_tail<S: Store>(store: &S) {
    let mut l = Ledger::new(store);
    // A duplicated tab cannot take over…
    let dup = l.w.engine.connect_tab(
        Own,
        &l.w.site,
        USER,
        &l.p.grant,
        &hello("tab-2", "page-9"),
        l.w.now,
    );
    assert_eq!(dup, Err(TabError::Busy));
    let Ok(BeginAnswer::Run(t)) = l.begin(1, "buy()") else {
        panic!("expected a run")
    };
    let Ok(ActionVerdict::Run(t)) = l.w.engine.authorize_action(Own, t, &action(READ), l.w.now)
    else {
        panic!("expected to run")
    };
    // …but "use this tab" moves the connection.
    let moved =
        l.w.engine
            .take_over_tab(
                Own,
                &l.p.site,
                USER,
                &l.p.grant,
                &hello("tab-2", "page-9"),
                l.w.now,
            )
            .unwrap();
    assert_eq!(moved.ended, Some(1));
    assert_eq!(
        l.w.engine
            .record_outcome(Own, t, Report::ok("late"), l.w.now),
        Err(TicketError::Stale)
    );
    let r = result(l.execute(1, "buy()", &[READ]));
    assert!(r.unknown_tail);
    assert_eq!(r.to_json()["unknownTail"], true);
    assert_eq!(r.end, End::Failed(Failure::ConnectionLost));
    // The old tab's heartbeat learns it lost the connection.
    assert_eq!(
        l.w.engine.tab_heartbeat(
            Own, &l.w.site, USER, &l.p.grant, "tab-1", "page-1", true, l.w.now
        ),
        Err(TabError::NotConnected)
    );
    // The new tab runs new work.
    result(l.execute(2, "read()", &[READ]));
}

fn no_live_tab_and_hidden_tabs<S: Store>(store: &S) {
    const CLICK: Step = ("button.click", Effect::Read, SKILLS_READ, "{}");
    let mut l = Ledger::new(store);
    l.w.engine
        .tab_heartbeat(
            Own, &l.w.site, USER, &l.p.grant, "tab-1", "page-1", false, l.w.now,
        )
        .unwrap();
    let Ok(BeginAnswer::Run(t)) = l.begin(1, "click()") else {
        panic!("expected a run")
    };
    let v =
        l.w.engine
            .authorize_action(Own, t, &action(CLICK).driving_page(), l.w.now)
            .unwrap();
    assert_eq!(v, ActionVerdict::TabNotVisible);
    l.w.engine
        .tab_heartbeat(
            Own, &l.w.site, USER, &l.p.grant, "tab-1", "page-1", true, l.w.now,
        )
        .unwrap();
    let Ok(BeginAnswer::Run(t)) = l.begin(1, "click()") else {
        panic!("the same id resumes")
    };
    assert!(matches!(
        l.w.engine
            .authorize_action(Own, t, &action(CLICK).driving_page(), l.w.now),
        Ok(ActionVerdict::Run(_))
    ));
    // Silence past the heartbeat timeout: no live tab, with the link data.
    l.w.advance(46);
    let e = refused(l.execute(2, "x", &[READ]));
    let BeginError::NoLiveTab(link) = &e else {
        panic!("no_live_tab")
    };
    assert_eq!(link.site, l.w.site);
    assert_eq!(e.code().as_str(), "no_live_tab");
    // Disconnect ends the connection, not the grant.
    l.connect("tab-1", "page-2");
    l.w.engine
        .disconnect_tab(Own, &l.w.site, USER, &l.p.grant, "tab-1", "page-2", l.w.now)
        .unwrap();
    assert!(l.w.bearer(&l.tokens, "skills:read").is_ok());
    assert!(matches!(
        refused(l.execute(3, "x", &[READ])),
        BeginError::NoLiveTab(_)
    ));
}

fn a_resumed_run_that_diverges_is_expectation_failed<S: Store>(store: &S) {
    const OTHER: Step = ("items.list", Effect::Read, SKILLS_READ, r#"{"page":2}"#);
    let mut l = Ledger::new(store);
    let prompt = approval(l.execute(1, "buy()", &[READ, WRITE]));
    l.decide(&prompt, ApprovalDecision::Once);
    let Exec::Cut(e) = l.execute(1, "buy()", &[OTHER, WRITE]) else {
        panic!("diverged")
    };
    assert_eq!(e, TicketError::Ended(Failure::Diverged));
    assert_eq!(e.code().as_str(), "EXPECTATION_FAILED");
    assert_eq!(l.page.count(WRITE), 0);
}

fn a_changed_policy_voids_a_pending_approval<S: Store>(store: &S) {
    let mut l = Ledger::new(store);
    let prompt = approval(l.execute(1, "buy()", &[WRITE]));
    let site = l.w.engine.site(&l.w.site).unwrap();
    let mut config = portcullis::site::SiteConfig::new(
        site.id.clone(),
        &site.name,
        &site.issuer,
        &site.resource_prefix,
    );
    config.auto_approval_allowed = false;
    l.w.engine.update_site(Own, config).unwrap();
    let e = l.w.engine.decide_approval(
        Own,
        &l.w.site,
        USER,
        &prompt.reference(),
        ApprovalDecision::Once,
        l.w.now,
    );
    assert_eq!(e, Err(ApprovalError::Void));
    // The run asks again, under the new policy (no auto-approval offered).
    let fresh = approval(l.execute(1, "buy()", &[WRITE]));
    assert!(!fresh.offer_auto_approve);
    assert_eq!(l.page.count(WRITE), 0);
}

fn another_users_grant_cannot_approve<S: Store>(store: &S) {
    let mut l = Ledger::new(store);
    let prompt = approval(l.execute(1, "buy()", &[WRITE]));
    let e = l.w.engine.decide_approval(
        Own,
        &l.w.site,
        "mallory",
        &prompt.reference(),
        ApprovalDecision::Once,
        l.w.now,
    );
    assert_eq!(e, Err(ApprovalError::Forbidden));
    let forged = portcullis::approval::ApprovalRef {
        grant: GrantId::from_bytes([0; 16]),
        ..prompt.reference()
    };
    assert!(
        l.w.engine
            .decide_approval(
                Own,
                &l.w.site,
                USER,
                &forged,
                ApprovalDecision::Once,
                l.w.now
            )
            .is_err()
    );
}

fn a_business_error_is_a_result_not_a_protocol_failure<S: Store>(store: &S) {
    let mut l = Ledger::new(store);
    let Ok(BeginAnswer::Run(t)) = l.begin(1, "x") else {
        panic!("run")
    };
    let stored =
        l.w.engine
            .complete(
                Own,
                t,
                &Completion::Error(portcullis::ledger::BusinessError::new(
                    "OUT_OF_STOCK",
                    "none",
                )),
                l.w.now,
            )
            .unwrap();
    let json = stored.to_json();
    assert_eq!(
        (json["ok"].clone(), json["result"]["error"]["code"].clone()),
        (json!(true), json!("OUT_OF_STOCK"))
    );
    // An oversized result is refused and the ticket handed back.
    let Ok(BeginAnswer::Run(t)) = l.begin(2, "y") else {
        panic!("run")
    };
    let big = Completion::Value(json!("x".repeat(256 * 1024)));
    let Err(TicketError::Invalid(back, why)) = l.w.engine.complete(Own, t, &big, l.w.now) else {
        panic!("too large")
    };
    assert_eq!(why.code().as_str(), "INVALID_PARAMS");
    l.w.engine
        .complete(Own, *back, &Completion::Value(json!(1)), l.w.now)
        .unwrap();
}

/// Runs [`portcullis::Engine::abandon_running`] to the end, `budget` at a
/// time; returns how many runs it ended.
fn abandon_all<S: Store>(l: &Ledger<S>, budget: usize) -> usize {
    let mut from = None;
    let mut ended = 0;
    loop {
        let done =
            l.w.engine
                .abandon_running(Own, from.as_ref(), l.w.now, budget)
                .unwrap();
        ended += done.ended;
        match done.next {
            Some(next) => from = Some(next),
            None => return ended,
        }
    }
}

fn a_restart_keeps_what_an_approval_shows_and_ends_the_lost_runs<S: Store>(store: &S) {
    let mut l = Ledger::new(store);
    // A write waits for the user; the prompt carries its exact arguments.
    let asked = approval(l.execute(1, "buy()", &[WRITE]));
    assert_eq!(asked.arguments.as_deref(), Some(WRITE.3.as_bytes()));
    assert!(asked.can_approve());
    // Two runs are in flight when the host dies: one mid-action, one
    // between actions. Their tickets are lost with it.
    let Ok(BeginAnswer::Run(t)) = l.begin(3, "read()") else {
        panic!("a run")
    };
    let Ok(ActionVerdict::Run(_lost)) = l.w.engine.authorize_action(Own, t, &action(READ), l.w.now)
    else {
        panic!("to run")
    };
    let Ok(BeginAnswer::Run(_lost_too)) = l.begin(4, "read()") else {
        panic!("a run")
    };

    // The host starts again: one call ends both lost runs, a page at a time.
    assert_eq!(abandon_all(&l, 1), 2);
    for n in [3, 4] {
        let r = result(l.execute(n, "read()", &[READ]));
        assert!(r.unknown_tail, "effects may have happened");
        assert_eq!(
            r.end,
            End::Failed(Failure::ExecutorLost),
            "the host that held it went away, not the tab"
        );
    }
    assert_eq!(l.page.count(READ), 0, "never run again");
    // Nothing else changed: the approval shows what it did, and a second
    // start finds nothing to end.
    let pending =
        l.w.engine
            .pending_approvals(&l.w.site, USER, &l.p.grant)
            .unwrap();
    assert_eq!(pending, vec![asked.clone()]);
    assert_eq!(abandon_all(&l, 512), 0);
    l.decide(&asked, ApprovalDecision::Once);
    result(l.execute(1, "buy()", &[WRITE]));
    assert_eq!(l.page.count(WRITE), 1);
}

fn a_host_sharing_the_store_ends_only_the_runs_it_names_lost<S: Store>(store: &S) {
    let mut l = Ledger::new(store);
    let Ok(BeginAnswer::Run(_lost)) = l.begin(3, "read()") else {
        panic!("a run")
    };
    let Ok(BeginAnswer::Run(live)) = l.begin(4, "read()") else {
        panic!("a run")
    };
    // Run 3's host is gone; run 4 is another live host's.
    let gone = RequestId::parse(&id(3)).unwrap();
    let grant = l.p.grant;
    let done =
        l.w.engine
            .abandon_running_where(Own, None, l.w.now, 512, |g, r| *g == grant && *r == gone)
            .unwrap();
    assert_eq!((done.ended, done.next.is_none()), (1, true));
    let r = result(l.execute(3, "read()", &[READ]));
    assert_eq!(r.end, End::Failed(Failure::ExecutorLost));
    assert!(r.unknown_tail);
    // The live run goes on with its ticket.
    l.w.engine
        .complete(Own, live, &Completion::Value(json!(4)), l.w.now)
        .unwrap();
    assert_eq!(abandon_all(&l, 512), 0, "nothing left running");
}

fn an_approval_whose_stored_arguments_were_altered_can_only_be_denied<S: Store>(store: &S) {
    let mut l = Ledger::new(store);
    let asked = approval(l.execute(1, "buy()", &[WRITE]));
    // Someone with access to the database changes what the user would see.
    let records = {
        let r = store.begin_read().unwrap();
        r.range(
            Table::Requests,
            Bound::Unbounded,
            Bound::Unbounded,
            usize::MAX,
        )
        .unwrap()
    };
    let shown = WRITE.3.as_bytes();
    let (key, mut value) = records
        .into_iter()
        .find(|(_, v)| v.windows(shown.len()).any(|w| w == shown))
        .expect("the arguments are stored with the approval");
    let at = value.windows(shown.len()).position(|w| w == shown).unwrap();
    value[at + shown.len() - 2] = b'2';
    let mut w = store.begin_write().unwrap();
    w.put(Table::Requests, &key, &value).unwrap();
    w.commit().unwrap();

    let prompt =
        l.w.engine
            .pending_approvals(&l.w.site, USER, &l.p.grant)
            .unwrap()
            .remove(0);
    assert_eq!(prompt.fingerprint, asked.fingerprint);
    assert_eq!(prompt.arguments, None, "never shown once they do not match");
    assert!(!prompt.can_approve() && !prompt.offer_auto_approve);
    for approve in [ApprovalDecision::Once, ApprovalDecision::AutoApproveKind] {
        assert_eq!(
            l.w.engine
                .decide_approval(Own, &l.w.site, USER, &prompt.reference(), approve, l.w.now),
            Err(ApprovalError::NotShown)
        );
    }
    l.decide(&prompt, ApprovalDecision::Deny);
    let r = result(l.execute(1, "buy()", &[WRITE]));
    assert_eq!(r.end, End::Failed(Failure::Denied));
    assert_eq!(l.page.count(WRITE), 0);
}

/// A gateway's source asked for input before its effect: the action is
/// withdrawn (no outcome recorded), the request parked, and the same id
/// resumes it with the person's approval given back, so the effect runs
/// once and the person is asked once. A withdrawn read needs no approval;
/// a ticket whose action is already recorded cannot withdraw it.
fn a_withdrawn_action_resumes_with_its_approval_and_runs_once<S: Store>(store: &S) {
    let mut l = Ledger::new(store);
    let now = l.w.now;
    let prompt = approval(l.execute(1, "buy()", &[WRITE]));
    l.decide(&prompt, ApprovalDecision::Once);
    let Ok(BeginAnswer::Run(t)) = l.begin(1, "buy()") else {
        panic!("the approved request resumes")
    };
    let Ok(ActionVerdict::Run(t)) = l.w.engine.authorize_action(Own, t, &action(WRITE), now) else {
        panic!("the approved write may run")
    };
    l.w.engine.withdraw_action(Own, t, now).unwrap();
    assert_eq!(l.state(1), RequestState::Parked(Park::Resume));
    assert!(
        l.w.engine
            .pending_approvals(&l.w.site, USER, &l.p.grant)
            .unwrap()
            .is_empty(),
        "nothing to decide: the approval was given back"
    );
    assert_eq!(l.page.count(WRITE), 0);
    let r = result(l.execute(1, "buy()", &[WRITE]));
    assert_eq!((r.outcomes.total, l.page.count(WRITE)), (1, 1));
    assert_eq!(result(l.execute(1, "buy()", &[WRITE])), r);
    assert_eq!(l.page.count(WRITE), 1, "run once");

    let Ok(BeginAnswer::Run(t)) = l.begin(2, "read()") else {
        panic!("a run")
    };
    let Ok(ActionVerdict::Run(t)) = l.w.engine.authorize_action(Own, t, &action(READ), now) else {
        panic!("a read runs")
    };
    l.w.engine.withdraw_action(Own, t, now).unwrap();
    let Ok(BeginAnswer::Run(t)) = l.begin(2, "read()") else {
        panic!("the parked read resumes")
    };
    let Ok(ActionVerdict::Run(t)) = l.w.engine.authorize_action(Own, t, &action(READ), now) else {
        panic!("without an approval")
    };
    let t =
        l.w.engine
            .record_outcome(Own, t, Report::ok("read"), now)
            .unwrap();
    let Err(TicketError::OutOfOrder(t)) = l.w.engine.withdraw_action(Own, t, now) else {
        panic!("a recorded action is not withdrawn")
    };
    let done =
        l.w.engine
            .complete(Own, *t, &Completion::Value(json!(1)), now)
            .unwrap();
    assert_eq!(done.outcomes.total, 1);
}

on_every_store!(
    a_restart_keeps_what_an_approval_shows_and_ends_the_lost_runs,
    a_withdrawn_action_resumes_with_its_approval_and_runs_once,
    a_host_sharing_the_store_ends_only_the_runs_it_names_lost,
    an_approval_whose_stored_arguments_were_altered_can_only_be_denied,
    same_id_and_code_returns_the_stored_result_and_runs_once,
    a_different_code_under_the_same_id_is_replay_detected,
    a_duplicate_while_running_is_execution_pending,
    an_approved_write_resumes_under_the_same_id,
    a_denied_write_is_permission_denied,
    a_missing_scope_parks_and_the_upgraded_grant_resumes,
    a_new_grant_joins_the_users_live_tab_and_scope_comes_before_the_tab,
    an_auto_approved_kind_still_asks_for_an_identical_write,
    in_page_callers_are_never_auto_approved,
    reload_sign_out_and_revocation_end_auto_approval,
    results_expire_after_24_hours_and_never_run_again,
    pending_work_survives_past_24_hours,
    revocation_cancels_a_running_request,
    refresh_reuse_cancels_running_requests,
    site_wide_revocation_ends_requests_when_touched,
    the_129th_undecided_request_is_refused,
    rate_limiting_answers_an_exact_retry_after,
    a_thousand_outcomes_page_with_a_stable_unforgeable_cursor,
    take_over_marks_the_old_tabs_call_unknown_tail,
    no_live_tab_and_hidden_tabs,
    a_resumed_run_that_diverges_is_expectation_failed,
    a_changed_policy_voids_a_pending_approval,
    another_users_grant_cannot_approve,
    a_business_error_is_a_result_not_a_protocol_failure,
);
