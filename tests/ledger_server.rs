//! The execution-ledger suite for the **server executor**: calls the host
//! performs on its own server (`begin_server`), with no tab at all, under
//! the host's own scopes (`notes:read`, `notes:write` on a site that
//! declares them). Every scenario runs on every store, counts how many
//! times each action really ran, and holds the clock; the last one runs
//! every new operation under every store failure it can meet.

use std::fmt::Debug;
use std::ops::Bound;

use portcullis::approval::{ApprovalDecision, ApprovalError};
use portcullis::engine::Principal;
use portcullis::executor::{ExecutorError, ExecutorId};
use portcullis::ledger::{
    ActionVerdict, BeginAnswer, BeginError, Caller, Completion, Effect, End, ExecutionTicket,
    Executor, Failure, LedgerError, Report, RequestId, RequestState, TicketError,
};
use portcullis::scope::ScopeSet;
use portcullis::site::SiteConfig;
use portcullis::store::{ReadTransaction, Store, Table, WriteTransaction};
use portcullis::token::TokenResponse;
use portcullis::{Own, Policy, WireError};
use serde_json::json;

use crate::failing_store::{FailingStore, dump, under_faults};
use crate::ledger::{
    Exec, Ledger, Page, Step, action, approval, hello, id, no_rate_limit, params, refused, result,
};
use crate::oauth::{USER, VERIFIER, World};
use crate::on_every_store;

pub(crate) const LIST: Step = ("notes.list", Effect::Read, "notes:read", "{}");
pub(crate) const ADD: Step = (
    "notes.add",
    Effect::Write,
    "notes:write",
    r#"{"title":"a"}"#,
);
pub(crate) const ADD_B: Step = (
    "notes.add",
    Effect::Write,
    "notes:write",
    r#"{"title":"b"}"#,
);
const ADD_C: Step = (
    "notes.add",
    Effect::Write,
    "notes:write",
    r#"{"title":"c"}"#,
);
const PURGE: Step = ("notes.purge", Effect::Unknown, "notes:write", "{}");
/// The host's scopes: what its site declares and its full login asks for.
pub(crate) const NOTES: &str = "notes:read notes:write";

/// A world whose site declares only the host's scopes, a login with both,
/// and one started server executor. No tab ever connects.
pub(crate) fn server<S: Store>(store: S) -> (Ledger<S>, ExecutorId) {
    server_with(store, no_rate_limit())
}

pub(crate) fn server_with<S: Store>(store: S, policy: Policy) -> (Ledger<S>, ExecutorId) {
    let mut w = World::with_policy(store, policy);
    let site = w.engine.site(&w.site).unwrap();
    let mut config = SiteConfig::new(
        site.id.clone(),
        &site.name,
        &site.issuer,
        &site.resource_prefix,
    );
    config.scopes = ScopeSet::parse(NOTES).unwrap();
    w.engine.update_site(Own, config).unwrap();
    let executor = w.engine.start_executor(Own, &w.site, w.now).unwrap();
    let (tokens, p) = consent(&mut w, NOTES);
    let l = Ledger {
        w,
        tokens,
        p,
        page: Page::default(),
        ms: 0,
    };
    (l, executor)
}

/// A consent for `scope`: a new grant of the same lineage.
fn consent<S: Store>(w: &mut World<S>, scope: &str) -> (TokenResponse, Principal) {
    let q = w.query(&[("scope", scope)], &[]);
    let code = w.code_for(&q);
    let tokens = w.exchange(&code, Some(VERIFIER)).unwrap();
    let p = w.bearer(&tokens, "").unwrap();
    (tokens, p)
}

pub(crate) fn login<S: Store>(l: &mut Ledger<S>, scope: &str) -> (TokenResponse, Principal) {
    consent(&mut l.w, scope)
}

/// The scopes a program's steps name: what the host knows its tool needs.
pub(crate) fn needed(program: &[Step]) -> ScopeSet {
    ScopeSet::from_tokens(program.iter().map(|s| s.2)).unwrap()
}

fn begin_on<S: Store>(
    l: &Ledger<S>,
    p: &Principal,
    on: ExecutorId,
    n: u32,
    code: &str,
    needed: &ScopeSet,
) -> Result<BeginAnswer, BeginError> {
    l.w.engine
        .begin_server(Own, p, &params(n, code), needed, on, l.now_ms())
}

/// `execute` on executor `on` as `p`: begin, and if admitted run `program`.
fn exec_as<S: Store>(
    l: &mut Ledger<S>,
    p: &Principal,
    on: ExecutorId,
    n: u32,
    code: &str,
    program: &[Step],
) -> Exec {
    let answer = begin_on(l, p, on, n, code, &needed(program));
    l.go_on(answer, program)
}

fn exec<S: Store>(l: &mut Ledger<S>, on: ExecutorId, n: u32, code: &str, program: &[Step]) -> Exec {
    let p = l.p.clone();
    exec_as(l, &p, on, n, code, program)
}

/// A run admitted on `on`, its ticket held by the caller.
fn run_on<S: Store>(l: &Ledger<S>, on: ExecutorId, n: u32, code: &str) -> ExecutionTicket {
    match begin_on(l, &l.p, on, n, code, &ScopeSet::new()) {
        Ok(BeginAnswer::Run(t)) => t,
        other => panic!("expected a run, got {other:?}"),
    }
}

/// Moves the clock on, renewing the leases of `alive` as a host would.
pub(crate) fn advance<S: Store>(l: &mut Ledger<S>, secs: u64, alive: &[ExecutorId]) {
    let mut left = secs;
    while left > 0 {
        let step = left.min(20);
        l.w.advance(step);
        left -= step;
        for &x in alive {
            l.w.engine
                .renew_executor(Own, &l.w.site, x, l.w.now)
                .unwrap();
        }
    }
}

pub(crate) fn rid(n: u32) -> RequestId {
    RequestId::parse(&id(n)).unwrap()
}

fn ended_with(l: &Ledger<impl Store>, n: u32) -> (End, bool) {
    match l.state(n) {
        RequestState::Done {
            end, unknown_tail, ..
        } => (end, unknown_tail),
        other => panic!("request {n} is {other:?}"),
    }
}

fn a_server_write_asks_runs_once_after_approval_and_a_repeat_answers_the_result<S: Store>(
    store: &S,
) {
    let (mut l, x) = server(store);
    let prompt = approval(exec(&mut l, x, 1, "add()", &[LIST, ADD]));
    assert_eq!(
        (prompt.kind.as_str(), prompt.scope.as_str()),
        ("notes.add", "notes:write")
    );
    assert_eq!(prompt.to_json()["scope"], "notes:write");
    assert_eq!(prompt.arguments.as_deref(), Some(ADD.3.as_bytes()));
    assert!(prompt.offer_auto_approve && prompt.can_approve());
    // No tab was ever consulted, or needed.
    assert_eq!(l.w.engine.tab_connection(&l.p.grant).unwrap(), None);
    let rec =
        l.w.engine
            .execution_request(&l.p, &rid(1))
            .unwrap()
            .unwrap();
    assert_eq!(
        (rec.executor(), rec.connection()),
        (Executor::Server, x.get())
    );
    // The approvals page finds it: per grant, and across the user's grants.
    assert_eq!(
        l.w.engine
            .pending_approvals(&l.w.site, USER, &l.p.grant)
            .unwrap(),
        vec![prompt.clone()]
    );
    assert_eq!(
        l.w.engine
            .pending_approvals_of(&l.w.site, USER, l.w.now)
            .unwrap(),
        vec![prompt.clone()]
    );
    assert_eq!(
        l.w.engine
            .pending_approvals_of(&l.w.site, "mallory", l.w.now)
            .unwrap(),
        vec![]
    );
    // Asking again shows the same prompt; nothing runs twice.
    assert_eq!(approval(exec(&mut l, x, 1, "add()", &[LIST, ADD])), prompt);
    assert_eq!((l.page.count(LIST), l.page.count(ADD)), (1, 0));
    l.decide(&prompt, ApprovalDecision::Once);
    let r = result(exec(&mut l, x, 1, "add()", &[LIST, ADD]));
    assert_eq!(r.end, End::Returned(r#"{"steps":2}"#.into()));
    assert_eq!((r.outcomes.total, r.unknown_tail), (2, false));
    assert_eq!((l.page.count(LIST), l.page.count(ADD)), (1, 1));
    // A repeat answers the stored result, from any instance of the fleet.
    let y = l.w.engine.start_executor(Own, &l.w.site, l.w.now).unwrap();
    assert_eq!(result(exec(&mut l, y, 1, "add()", &[LIST, ADD])), r);
    assert_eq!((l.page.count(LIST), l.page.count(ADD)), (1, 1));
    assert_eq!(
        l.w.engine
            .pending_approvals_of(&l.w.site, USER, l.w.now)
            .unwrap(),
        vec![]
    );
}

fn a_denied_server_write_ends_with_no_effect<S: Store>(store: &S) {
    let (mut l, x) = server(store);
    let prompt = approval(exec(&mut l, x, 1, "add()", &[ADD]));
    l.decide(&prompt, ApprovalDecision::Deny);
    let r = result(exec(&mut l, x, 1, "add()", &[ADD]));
    assert_eq!(r.end, End::Failed(Failure::Denied));
    assert_eq!(r.to_json()["error"]["code"], "PERMISSION_DENIED");
    assert_eq!(l.page.count(ADD), 0);
}

fn a_replay_with_other_code_or_on_the_other_executor_is_replay_detected<S: Store>(store: &S) {
    let (mut l, x) = server(store);
    result(exec(&mut l, x, 1, "list()", &[LIST]));
    let e = refused(exec(&mut l, x, 1, "other()", &[LIST]));
    assert_eq!(e, BeginError::ReplayDetected);
    assert_eq!(e.code().as_str(), "REPLAY_DETECTED");
    // The same code on the tab is another call too…
    let on_tab =
        l.w.engine
            .begin(Own, &l.p, &params(1, "list()"), Caller::Client, l.now_ms());
    assert_eq!(on_tab, Err(BeginError::ReplayDetected));
    // …and a tab request repeated on the server.
    l.w.engine
        .connect_tab(Own, &l.w.site, USER, &l.p.grant, &hello("t", "p"), l.w.now)
        .unwrap();
    let tab = l.execute(2, "list()", &[LIST]);
    assert_eq!(result(tab).end, End::Returned(r#"{"steps":1}"#.into()));
    let e = refused(exec(&mut l, x, 2, "list()", &[LIST]));
    assert_eq!(e, BeginError::ReplayDetected);
    assert_eq!(l.page.count(LIST), 2, "one run each, never again");
}

fn a_missing_scope_names_the_hosts_scope_and_the_upgraded_grant_resumes<S: Store>(store: &S) {
    let (mut l, x) = server(store);
    let (_, narrow) = login(&mut l, "notes:read");
    // The host says the call needs notes:write: refused before anything.
    let Exec::Scope(c) = exec_as(&mut l, &narrow, x, 7, "add()", &[LIST, ADD]) else {
        panic!("expected insufficient_scope")
    };
    assert_eq!(c.status, 403);
    assert!(
        c.www_authenticate
            .contains(r#"scope="notes:read notes:write""#),
        "{}",
        c.www_authenticate
    );
    assert_eq!(
        l.w.engine.execution_request(&narrow, &rid(7)).unwrap(),
        None
    );
    // Without the hint, the action's own scope parks the run.
    let answer = begin_on(&l, &narrow, x, 7, "add()", &ScopeSet::new());
    let Exec::Scope(c) = l.go_on(answer, &[LIST, ADD]) else {
        panic!("expected insufficient_scope")
    };
    assert!(
        c.www_authenticate
            .contains(r#"scope="notes:read notes:write""#),
        "{}",
        c.www_authenticate
    );
    assert_eq!(l.page.count(LIST), 1);
    // The user grants the wider scope: the parked request resumes, asks,
    // and runs its write once; the read is replayed, not re-run.
    let (_, wide) = login(&mut l, NOTES);
    let prompt = approval(exec_as(&mut l, &wide, x, 7, "add()", &[LIST, ADD]));
    assert_eq!(
        (prompt.grant, prompt.scope.as_str()),
        (wide.grant, "notes:write")
    );
    l.decide(&prompt, ApprovalDecision::Once);
    let r = result(exec_as(&mut l, &wide, x, 7, "add()", &[LIST, ADD]));
    assert_eq!(r.outcomes.total, 2);
    assert_eq!((l.page.count(LIST), l.page.count(ADD)), (1, 1));
}

fn an_undeclared_scope_is_refused_and_changes_nothing<S: Store>(store: &S) {
    let (l, x) = server(store);
    let skills = ScopeSet::parse("notes:read skills:write").unwrap();
    let before = dump(store);
    let e = begin_on(&l, &l.p, x, 1, "x()", &skills).unwrap_err();
    assert_eq!(
        e,
        BeginError::UndeclaredScope(ScopeSet::parse("skills:write").unwrap())
    );
    assert_eq!((e.code().as_str(), e.http_status()), ("server_error", 500));
    // The tab's `begin_needing` refuses it the same way.
    let on_tab = l.w.engine.begin_needing(
        Own,
        &l.p,
        &params(1, "x()"),
        &skills,
        Caller::Client,
        l.now_ms(),
    );
    assert_eq!(on_tab, Err(e));
    assert!(dump(store) == before, "a refusal writes nothing");
    // An action naming an undeclared scope: the ticket comes back, nothing
    // changed, and the run goes on.
    let t = run_on(&l, x, 1, "x()");
    let stray = action(("notes.list", Effect::Read, "skills:read", "{}"));
    let before = dump(store);
    let e =
        l.w.engine
            .authorize_action(Own, t, &stray, l.w.now)
            .unwrap_err();
    assert_eq!((e.code().as_str(), e.http_status()), ("server_error", 500));
    let TicketError::Invalid(t, why) = e else {
        panic!("refused with the ticket handed back")
    };
    assert_eq!(why, LedgerError::UndeclaredScope);
    assert!(dump(store) == before);
    // A server run has no page to drive.
    let click = action(("note.show", Effect::Read, "notes:read", "{}")).driving_page();
    let Err(TicketError::Invalid(t, why)) = l.w.engine.authorize_action(Own, *t, &click, l.w.now)
    else {
        panic!("refused")
    };
    assert_eq!(why, LedgerError::InvalidAction);
    assert!(dump(store) == before);
    let Ok(ActionVerdict::Run(t)) = l.w.engine.authorize_action(Own, *t, &action(LIST), l.w.now)
    else {
        panic!("the handed-back ticket still runs")
    };
    let t =
        l.w.engine
            .record_outcome(Own, t, Report::ok("listed"), l.w.now)
            .unwrap();
    let r =
        l.w.engine
            .complete(Own, t, &Completion::Value(json!(1)), l.w.now)
            .unwrap();
    assert_eq!((r.outcomes.total, r.unknown_tail), (1, false));
}

fn a_run_whose_executor_lost_its_lease_is_cut_off_on_a_repeat_and_by_end_lost_runs<S: Store>(
    store: &S,
) {
    let (mut l, a) = server(store);
    let b = l.w.engine.start_executor(Own, &l.w.site, l.w.now).unwrap();
    assert!(b > a, "a new number");
    // Instance A runs two calls: one mid-action, one between actions.
    let t1 = run_on(&l, a, 1, "list()");
    let Ok(ActionVerdict::Run(t1)) = l.w.engine.authorize_action(Own, t1, &action(LIST), l.w.now)
    else {
        panic!("to run")
    };
    let t2 = run_on(&l, a, 2, "list()");
    assert_eq!(t2.connection(), a.get());
    // A tab run of the same grant, which no lease governs.
    l.w.engine
        .connect_tab(Own, &l.w.site, USER, &l.p.grant, &hello("t", "p"), l.w.now)
        .unwrap();
    let Ok(BeginAnswer::Run(_on_tab)) =
        l.w.engine
            .begin(Own, &l.p, &params(3, "list()"), Caller::Client, l.now_ms())
    else {
        panic!("a tab run")
    };
    // While A holds its lease, a repeat reaching instance B is pending.
    assert!(matches!(
        begin_on(&l, &l.p, b, 1, "list()", &ScopeSet::new()),
        Ok(BeginAnswer::ExecutionPending(_))
    ));
    assert_eq!(end_lost(&l, 1), 0, "A is live: nothing is lost");
    // A stops renewing (B and the tab go on).
    advance(&mut l, 31, &[b]);
    l.w.engine
        .tab_heartbeat(Own, &l.w.site, USER, &l.p.grant, "t", "p", true, l.w.now)
        .unwrap();
    assert_eq!(
        l.w.engine
            .executor_lease(&l.w.site, a)
            .unwrap()
            .map(|x| x.id),
        Some(a)
    );
    // The repeat cuts the run off and answers its result.
    let r = result(exec(&mut l, b, 1, "list()", &[LIST]));
    assert_eq!(r.end, End::Failed(Failure::ExecutorLost));
    assert!(r.unknown_tail, "its action may have run");
    let v = r.to_json();
    assert_eq!(v["error"]["code"], "ACTION_UNAVAILABLE");
    assert_eq!(v["unknownTail"], true);
    assert_eq!(
        l.w.engine
            .record_outcome(Own, t1, Report::ok("late"), l.w.now),
        Err(TicketError::Stale)
    );
    // The other lost run ends by the sweep of lost runs, a page at a time;
    // the tab run is left alone.
    assert_eq!(end_lost(&l, 1), 1);
    assert_eq!(
        ended_with(&l, 2),
        (End::Failed(Failure::ExecutorLost), true)
    );
    assert_eq!(l.state(3), RequestState::Running);
    assert_eq!(
        l.w.engine
            .complete(Own, t2, &Completion::Value(json!(2)), l.w.now),
        Err(TicketError::Stale)
    );
    assert_eq!(end_lost(&l, 16), 0);
    // A calls again once it renewed: new work runs on it.
    assert_eq!(
        begin_on(&l, &l.p, a, 4, "list()", &ScopeSet::new()),
        Err(BeginError::ExecutorNotLive)
    );
    assert_eq!(
        BeginError::ExecutorNotLive.code().as_str(),
        "ACTION_UNAVAILABLE"
    );
    assert_eq!(l.w.engine.execution_request(&l.p, &rid(4)).unwrap(), None);
    l.w.engine
        .renew_executor(Own, &l.w.site, a, l.w.now)
        .unwrap();
    result(exec(&mut l, a, 4, "list()", &[LIST]));
    assert_eq!(
        l.page.count(LIST),
        1,
        "run 4; the lost runs never ran again"
    );
}

/// `begin_driven_in` of request `n` (code `list()`) driven by `driver`, in
/// a transaction of its own.
fn begin_driven<S: Store>(
    l: &Ledger<S>,
    driver: ExecutorId,
    n: u32,
) -> Result<BeginAnswer, BeginError> {
    let mut txn = l.w.engine.store().begin_write().unwrap();
    let answer = l.w.engine.begin_driven(
        &mut txn,
        &l.p,
        &params(n, "list()"),
        &ScopeSet::new(),
        Caller::Client,
        driver,
        l.now_ms(),
    );
    txn.commit().unwrap();
    answer
}

fn a_tab_run_whose_driver_lost_its_lease_is_cut_off_on_a_repeat_and_by_end_lost_runs<S: Store>(
    store: &S,
) {
    let (mut l, a) = server(store);
    let b = l.w.engine.start_executor(Own, &l.w.site, l.w.now).unwrap();
    l.w.engine
        .connect_tab(Own, &l.w.site, USER, &l.p.grant, &hello("t", "p"), l.w.now)
        .unwrap();
    // Instance A drives two tab runs, instance B one.
    for (driver, n) in [(a, 1), (a, 2), (b, 3)] {
        assert!(
            matches!(begin_driven(&l, driver, n), Ok(BeginAnswer::Run(_))),
            "run {n}"
        );
    }
    // While A holds its lease and the tab is live, a repeat reaching B is
    // pending.
    assert!(matches!(
        begin_driven(&l, b, 1),
        Ok(BeginAnswer::ExecutionPending(_))
    ));
    assert_eq!(end_lost(&l, 16), 0, "A is live: nothing is lost");
    // A stops renewing (B and the tab go on).
    advance(&mut l, 31, &[b]);
    l.w.engine
        .tab_heartbeat(Own, &l.w.site, USER, &l.p.grant, "t", "p", true, l.w.now)
        .unwrap();
    // The repeat reaching B cuts run 1 off: its action may have run.
    match begin_driven(&l, b, 1) {
        Ok(BeginAnswer::Stored(r)) => assert!(r.unknown_tail, "{r:?}"),
        other => panic!("expected the cut-off result, got {other:?}"),
    }
    assert_eq!(
        ended_with(&l, 1),
        (End::Failed(Failure::ExecutorLost), true),
        "lost with its driver, not with the tab"
    );
    // Run 2 ends by the sweep of lost runs; B's run goes on.
    assert_eq!(end_lost(&l, 1), 1);
    assert_eq!(
        ended_with(&l, 2),
        (End::Failed(Failure::ExecutorLost), true)
    );
    assert_eq!(l.state(3), RequestState::Running);
    assert_eq!(end_lost(&l, 16), 0);
    // A driver whose lease lapsed begins nothing, and nothing is stored.
    assert_eq!(begin_driven(&l, a, 4), Err(BeginError::ExecutorNotLive));
    assert_eq!(l.w.engine.execution_request(&l.p, &rid(4)).unwrap(), None);
}

/// Runs [`portcullis::Engine::end_lost_runs`] to the end, `budget` at a
/// time; returns how many runs it ended.
fn end_lost<S: Store>(l: &Ledger<S>, budget: usize) -> usize {
    let mut from = None;
    let mut ended = 0;
    loop {
        let done =
            l.w.engine
                .end_lost_runs(Own, from.as_ref(), l.w.now, budget)
                .unwrap();
        ended += done.ended;
        match done.next {
            Some(next) => from = Some(next),
            None => return ended,
        }
    }
}

fn stopping_an_executor_ends_its_runs_and_no_other<S: Store>(store: &S) {
    let (mut l, a) = server(store);
    let b = l.w.engine.start_executor(Own, &l.w.site, l.w.now).unwrap();
    let t1 = run_on(&l, a, 1, "list()");
    let Ok(ActionVerdict::Run(_t1)) = l.w.engine.authorize_action(Own, t1, &action(LIST), l.w.now)
    else {
        panic!("to run")
    };
    let t2 = run_on(&l, b, 2, "list()");
    // A parked request is not running anywhere: stopping leaves it be.
    let prompt = approval(exec(&mut l, a, 3, "add()", &[ADD]));
    assert_eq!(l.w.engine.stop_executor(Own, &l.w.site, a, l.w.now), Ok(1));
    assert_eq!(
        ended_with(&l, 1),
        (End::Failed(Failure::ExecutorLost), true)
    );
    assert_eq!(l.w.engine.executor_lease(&l.w.site, a).unwrap(), None);
    assert!(matches!(l.state(3), RequestState::AwaitingApproval(_)));
    // B's run goes on with its ticket.
    let r =
        l.w.engine
            .complete(Own, t2, &Completion::Value(json!(2)), l.w.now)
            .unwrap();
    assert_eq!(r.end, End::Returned("2".into()));
    // Stopping again ends nothing more; the stopped number takes no work…
    assert_eq!(l.w.engine.stop_executor(Own, &l.w.site, a, l.w.now), Ok(0));
    assert_eq!(
        begin_on(&l, &l.p, a, 4, "list()", &ScopeSet::new()),
        Err(BeginError::ExecutorNotLive)
    );
    // …and the approved request resumes on whichever executor calls.
    l.decide(&prompt, ApprovalDecision::Once);
    let Ok(BeginAnswer::Run(t3)) = begin_on(&l, &l.p, b, 3, "add()", &needed(&[ADD])) else {
        panic!("resumes on B")
    };
    assert_eq!((t3.connection(), t3.run()), (b.get(), 2));
    let answer = Ok(BeginAnswer::Run(t3));
    result(l.go_on(answer, &[ADD]));
    assert_eq!(l.page.count(ADD), 1);
    // Numbers are never reused; unknown numbers and sites are refused.
    let c = l.w.engine.start_executor(Own, &l.w.site, l.w.now).unwrap();
    assert!(c > b);
    let never = ExecutorId::new(c.get() + 1);
    assert_eq!(
        l.w.engine.renew_executor(Own, &l.w.site, never, l.w.now),
        Err(ExecutorError::Unknown)
    );
    assert_eq!(
        l.w.engine.stop_executor(Own, &l.w.site, never, l.w.now),
        Err(ExecutorError::Unknown)
    );
    assert_eq!(
        l.w.engine
            .stop_executor(Own, &l.w.site, ExecutorId::new(0), l.w.now),
        Err(ExecutorError::Unknown)
    );
    let nowhere = portcullis::site::SiteId::parse("nowhere").unwrap();
    assert_eq!(
        l.w.engine.start_executor(Own, &nowhere, l.w.now),
        Err(ExecutorError::UnknownSite)
    );
    // A stopped executor that renews gets a lease again.
    l.w.engine
        .renew_executor(Own, &l.w.site, a, l.w.now)
        .unwrap();
    result(exec(&mut l, a, 5, "list()", &[LIST]));
}

fn auto_approval_of_a_kind_lives_per_grant_and_identical_writes_ask_again<S: Store>(store: &S) {
    let (mut l, x) = server(store);
    let prompt = approval(exec(&mut l, x, 1, "a()", &[ADD]));
    assert!(prompt.offer_auto_approve);
    l.decide(&prompt, ApprovalDecision::AutoApproveKind);
    result(exec(&mut l, x, 1, "a()", &[ADD]));
    // Another write of the kind runs without asking…
    result(exec(&mut l, x, 2, "b()", &[ADD_B]));
    // …but identical repeats ask again…
    let again = approval(exec(&mut l, x, 3, "c()", &[ADD]));
    assert_eq!(again.kind, "notes.add");
    approval(exec(&mut l, x, 4, "d()", &[ADD_B]));
    // …and unknown effects are never auto-approved.
    let unknown = approval(exec(&mut l, x, 5, "e()", &[PURGE]));
    assert!(!unknown.offer_auto_approve);
    assert_eq!(
        l.w.engine.decide_approval(
            Own,
            &l.w.site,
            USER,
            &unknown.reference(),
            ApprovalDecision::AutoApproveKind,
            l.w.now
        ),
        Err(ApprovalError::AutoApprovalNotOffered)
    );
    assert_eq!((l.page.count(ADD), l.page.count(ADD_B)), (1, 1));
    // It is the grant's: another grant of the same user asks.
    let (_, other) = login(&mut l, NOTES);
    approval(exec_as(&mut l, &other, x, 6, "f()", &[ADD_C]));
    // It never reached a tab.
    assert_eq!(l.w.engine.tab_connection(&l.p.grant).unwrap(), None);
    // Revoking the grant deletes it.
    assert_eq!(auto_records(store), 1);
    l.w.engine.revoke_grant(Own, &l.p.grant, l.w.now).unwrap();
    assert_eq!(auto_records(store), 0);
}

/// How many grants keep auto-approvals of server runs.
fn auto_records<S: Store>(store: &S) -> usize {
    store
        .begin_read()
        .unwrap()
        .range(
            Table::Approvals,
            Bound::Unbounded,
            Bound::Unbounded,
            usize::MAX,
        )
        .unwrap()
        .len()
}

fn revocation_ends_server_requests<S: Store>(store: &S) {
    let (mut l, x) = server(store);
    let t = run_on(&l, x, 1, "list()");
    let Ok(ActionVerdict::Run(t)) = l.w.engine.authorize_action(Own, t, &action(LIST), l.w.now)
    else {
        panic!("to run")
    };
    let prompt = approval(exec(&mut l, x, 2, "add()", &[ADD]));
    l.w.engine.revoke_grant(Own, &l.p.grant, l.w.now).unwrap();
    assert_eq!(ended_with(&l, 1), (End::Failed(Failure::Revoked), true));
    assert_eq!(ended_with(&l, 2), (End::Failed(Failure::Revoked), false));
    assert_eq!(
        l.w.engine
            .record_outcome(Own, t, Report::ok("late"), l.w.now),
        Err(TicketError::Stale)
    );
    assert_eq!(
        l.w.engine.decide_approval(
            Own,
            &l.w.site,
            USER,
            &prompt.reference(),
            ApprovalDecision::Once,
            l.w.now
        ),
        Err(ApprovalError::NotPending)
    );
    assert_eq!(
        refused(exec(&mut l, x, 3, "list()", &[LIST])),
        BeginError::SessionRevoked
    );
    // Nothing is left running on the executor.
    assert_eq!(l.w.engine.stop_executor(Own, &l.w.site, x, l.w.now), Ok(0));
    assert_eq!(l.page.count(ADD), 0);
}

fn a_revoked_grant_ends_the_server_run_at_its_next_ticket_operation<S: Store>(store: &S) {
    let (l, x) = server(store);
    let t = run_on(&l, x, 1, "list()");
    // A site-wide revocation (a key rotation) cannot enumerate: the run
    // ends when it is next touched.
    l.w.engine
        .rotate_site_key(Own, &l.w.site, &mut crate::support::rng(3))
        .unwrap();
    assert_eq!(
        l.w.engine.authorize_action(Own, t, &action(LIST), l.w.now),
        Err(TicketError::Ended(Failure::Revoked))
    );
    assert_eq!(ended_with(&l, 1), (End::Failed(Failure::Revoked), true));
}

fn start_up_recovery_ends_server_runs_too<S: Store>(store: &S) {
    let (mut l, x) = server(store);
    let _lost = run_on(&l, x, 1, "list()");
    let prompt = approval(exec(&mut l, x, 2, "add()", &[ADD]));
    let mut from = None;
    let mut ended = 0;
    loop {
        let done =
            l.w.engine
                .abandon_running(Own, from.as_ref(), l.w.now, 1)
                .unwrap();
        ended += done.ended;
        match done.next {
            Some(next) => from = Some(next),
            None => break,
        }
    }
    assert_eq!(ended, 1);
    assert_eq!(
        ended_with(&l, 1),
        (End::Failed(Failure::ExecutorLost), true)
    );
    assert_eq!(
        l.w.engine
            .pending_approvals_of(&l.w.site, USER, l.w.now)
            .unwrap(),
        vec![prompt]
    );
    assert_eq!(end_lost(&l, 8), 0, "nothing left running");
}

fn long_lapsed_leases_are_swept_and_their_numbers_stay_taken<S: Store>(store: &S) {
    let (mut l, a) = server(store);
    let b = l.w.engine.start_executor(Own, &l.w.site, l.w.now).unwrap();
    advance(&mut l, 299, &[a]);
    assert_eq!(l.w.engine.sweep_executors(Own, l.w.now, 16).unwrap(), 0);
    advance(&mut l, 1, &[a]);
    assert_eq!(l.w.engine.sweep_executors(Own, l.w.now, 16).unwrap(), 1);
    assert_eq!(l.w.engine.executor_lease(&l.w.site, b).unwrap(), None);
    assert!(l.w.engine.executor_lease(&l.w.site, a).unwrap().is_some());
    assert_eq!(l.w.engine.sweep_executors(Own, l.w.now, 16).unwrap(), 0);
    // B was only late: renewing re-creates its lease under its number.
    l.w.engine
        .renew_executor(Own, &l.w.site, b, l.w.now)
        .unwrap();
    result(exec(&mut l, b, 1, "list()", &[LIST]));
    assert!(l.w.engine.start_executor(Own, &l.w.site, l.w.now).unwrap() > b);
}

/// `n` as a request number of its own for each fault-injection round.
fn fresh(n: &mut u32) -> u32 {
    *n += 1;
    *n
}

/// Runs `op` on a fresh set-up (`setup`, not failing) once per store call
/// it makes, failing that call: each failed run answers an error and leaves
/// the store exactly as it was after `setup`. The ticket operations cannot
/// simply be retried (a failure loses the ticket by contract), so each
/// round sets up a new run. Returns the answer of the round that met no
/// failure, and how many failure points there were.
fn every_fault<S: Store, X, T: Debug, E: Debug>(
    failing: &FailingStore<&S>,
    l: &mut Ledger<&FailingStore<&S>>,
    mut setup: impl FnMut(&mut Ledger<&FailingStore<&S>>) -> X,
    mut op: impl FnMut(&mut Ledger<&FailingStore<&S>>, X) -> Result<T, E>,
) -> (Result<T, E>, usize) {
    for n in 1.. {
        let x = setup(l);
        let before = dump(failing.inner());
        failing.fail_nth(n);
        let out = op(l, x);
        let fired = failing.fired();
        failing.disarm();
        if fired == 0 {
            return (out, n - 1);
        }
        assert!(out.is_err(), "store call {n} failed but {out:?}");
        assert!(
            dump(failing.inner()) == before,
            "a failure at store call {n} left a trace ({out:?})"
        );
    }
    unreachable!("1.. does not end")
}

fn every_store_failure_in_a_server_operation_leaves_nothing<S: Store>(store: &S) {
    let failing = FailingStore::new(store);
    // Room for the runs whose tickets the failed rounds lose.
    let mut policy = no_rate_limit();
    policy.max_undecided_requests = 1_024;
    let (mut l, a) = server_with(&failing, policy);
    let site = l.w.site.clone();
    let now = l.w.now;
    // Executors: start, renew, stop, sweep.
    let (b, points) = under_faults(&failing, || l.w.engine.start_executor(Own, &site, now));
    let b = b.unwrap();
    assert!(points > 0);
    under_faults(&failing, || l.w.engine.renew_executor(Own, &site, b, now))
        .0
        .unwrap();
    // begin_server: a new run, a pending repeat, a resumed one.
    let t1 = match under_faults(&failing, || {
        l.w.engine.begin_server(
            Own,
            &l.p,
            &params(1, "list()"),
            &needed(&[LIST]),
            a,
            l.now_ms(),
        )
    })
    .0
    {
        Ok(BeginAnswer::Run(t)) => t,
        other => panic!("a run: {other:?}"),
    };
    let pending = under_faults(&failing, || {
        l.w.engine.begin_server(
            Own,
            &l.p,
            &params(1, "list()"),
            &ScopeSet::new(),
            b,
            l.now_ms(),
        )
    });
    assert!(matches!(pending.0, Ok(BeginAnswer::ExecutionPending(_))));
    // The ticket operations, each on a fresh run: authorize, record, complete.
    let mut n = 100;
    let (verdict, _) = every_fault(
        &failing,
        &mut l,
        |l| run_on(l, a, fresh(&mut n), "list()"),
        |l, t| l.w.engine.authorize_action(Own, t, &action(LIST), l.w.now),
    );
    assert!(matches!(verdict, Ok(ActionVerdict::Run(_))));
    let (recorded, _) = every_fault(
        &failing,
        &mut l,
        |l| {
            let t = run_on(l, a, fresh(&mut n), "list()");
            match l.w.engine.authorize_action(Own, t, &action(LIST), l.w.now) {
                Ok(ActionVerdict::Run(t)) => t,
                other => panic!("to run: {other:?}"),
            }
        },
        |l, t| {
            l.w.engine
                .record_outcome(Own, t, Report::ok("listed"), l.w.now)
        },
    );
    let t = recorded.unwrap();
    l.w.engine
        .complete(Own, t, &Completion::Value(json!(1)), l.w.now)
        .unwrap();
    let (completed, points) = every_fault(
        &failing,
        &mut l,
        |l| {
            let t = run_on(l, a, fresh(&mut n), "list()");
            let Ok(ActionVerdict::Run(t)) =
                l.w.engine.authorize_action(Own, t, &action(LIST), l.w.now)
            else {
                panic!("to run")
            };
            l.w.engine
                .record_outcome(Own, t, Report::ok("listed"), l.w.now)
                .unwrap()
        },
        |l, t| {
            l.w.engine
                .complete(Own, t, &Completion::Value(json!(1)), l.w.now)
        },
    );
    assert!(points > 0);
    assert_eq!(completed.unwrap().outcomes.total, 1);
    // A write that asks, then one auto-approved (it writes the grant's
    // auto-approvals), and an undeclared scope (refused, nothing written).
    let (asked, _) = every_fault(
        &failing,
        &mut l,
        |l| run_on(l, a, fresh(&mut n), "add()"),
        |l, t| l.w.engine.authorize_action(Own, t, &action(ADD), l.w.now),
    );
    let Ok(ActionVerdict::ApprovalPending(prompt)) = asked else {
        panic!("a write asks")
    };
    under_faults(&failing, || {
        l.w.engine.decide_approval(
            Own,
            &site,
            USER,
            &prompt.reference(),
            ApprovalDecision::AutoApproveKind,
            now,
        )
    })
    .0
    .unwrap();
    let mut k = 0;
    let (auto, _) = every_fault(
        &failing,
        &mut l,
        |l| {
            k += 1;
            let step: Step = (
                "notes.add",
                Effect::Write,
                "notes:write",
                Box::leak(format!(r#"{{"k":{k}}}"#).into_boxed_str()),
            );
            (run_on(l, a, fresh(&mut n), "add()"), step)
        },
        |l, (t, step)| l.w.engine.authorize_action(Own, t, &action(step), l.w.now),
    );
    assert!(matches!(auto, Ok(ActionVerdict::Run(_))), "{auto:?}");
    let stray = action(("notes.list", Effect::Read, "skills:read", "{}"));
    let (refusal, _) = every_fault(
        &failing,
        &mut l,
        |l| run_on(l, a, fresh(&mut n), "x()"),
        |l, t| l.w.engine.authorize_action(Own, t, &stray, l.w.now),
    );
    assert!(matches!(
        refusal,
        Err(TicketError::Invalid(_, LedgerError::UndeclaredScope))
    ));
    // The lease lapses: a repeat cuts the run off, end_lost_runs the rest,
    // stop ends B's runs.
    drop(t1);
    let _on_b = run_on(&l, b, fresh(&mut n), "list()");
    l.w.advance(31);
    let now = l.w.now;
    under_faults(&failing, || l.w.engine.renew_executor(Own, &site, b, now))
        .0
        .unwrap();
    let cut = under_faults(&failing, || {
        l.w.engine.begin_server(
            Own,
            &l.p,
            &params(1, "list()"),
            &ScopeSet::new(),
            b,
            l.now_ms(),
        )
    });
    assert!(
        matches!(cut.0, Ok(BeginAnswer::Stored(ref r)) if r.end == End::Failed(Failure::ExecutorLost))
    );
    let (lost, _) = under_faults(&failing, || l.w.engine.end_lost_runs(Own, None, now, 1_000));
    assert!(lost.unwrap().ended > 0);
    let (stopped, _) = under_faults(&failing, || l.w.engine.stop_executor(Own, &site, b, now));
    assert_eq!(stopped, Ok(1));
    // A swept lease, and a revocation (the grant's auto-approvals go).
    l.w.advance(300);
    let now = l.w.now;
    assert_eq!(
        under_faults(&failing, || l.w.engine.sweep_executors(Own, now, 16)).0,
        Ok(1)
    );
    under_faults(&failing, || l.w.engine.revoke_grant(Own, &l.p.grant, now))
        .0
        .unwrap();
    assert_eq!(auto_records(store), 0);
}

on_every_store!(
    a_server_write_asks_runs_once_after_approval_and_a_repeat_answers_the_result,
    a_denied_server_write_ends_with_no_effect,
    a_replay_with_other_code_or_on_the_other_executor_is_replay_detected,
    a_missing_scope_names_the_hosts_scope_and_the_upgraded_grant_resumes,
    an_undeclared_scope_is_refused_and_changes_nothing,
    a_run_whose_executor_lost_its_lease_is_cut_off_on_a_repeat_and_by_end_lost_runs,
    a_tab_run_whose_driver_lost_its_lease_is_cut_off_on_a_repeat_and_by_end_lost_runs,
    stopping_an_executor_ends_its_runs_and_no_other,
    auto_approval_of_a_kind_lives_per_grant_and_identical_writes_ask_again,
    revocation_ends_server_requests,
    a_revoked_grant_ends_the_server_run_at_its_next_ticket_operation,
    start_up_recovery_ends_server_runs_too,
    long_lapsed_leases_are_swept_and_their_numbers_stay_taken,
    every_store_failure_in_a_server_operation_leaves_nothing,
);
