//! Calls that name no request id ([`ExecuteParams::joining`]): an identical
//! call joins the unfinished request it repeats — one card per write, one
//! run, the result for whoever calls once it is approved — and once that
//! request has ended an identical call is new work that asks again. Every
//! scenario runs on every store and counts how many times each action
//! really ran; the last one fails every store call a joining `begin` and
//! the sweep of its index make.
//!
//! [`ExecuteParams::joining`]: portcullis::ledger::ExecuteParams::joining

use std::ops::Bound;
use std::time::Duration;

use portcullis::Own;
use portcullis::approval::{ApprovalDecision, ApprovalPrompt};
use portcullis::engine::Principal;
use portcullis::executor::ExecutorId;
use portcullis::ledger::{BeginAnswer, BeginError, Caller, End, Failure, RequestId, RequestState};
use portcullis::store::{ReadTransaction, Store, Table};

use crate::failing_store::{FailingStore, under_faults};
use crate::ledger::{Exec, Ledger, Step, approval, hello, id, no_rate_limit, params, result};
use crate::ledger_server::{
    ADD, ADD_B, LIST, NOTES, advance, login, needed, rid, server, server_with,
};
use crate::oauth::USER;
use crate::on_every_store;

const HOUR: u64 = 3_600;

/// `begin_server` for a call that names no request id, as `p`: `n` is the
/// fresh id the adapter drew for it.
fn join_as<S: Store>(
    l: &Ledger<S>,
    p: &Principal,
    on: ExecutorId,
    n: u32,
    code: &str,
    program: &[Step],
) -> Result<BeginAnswer, BeginError> {
    l.w.engine.begin_server(
        Own,
        p,
        &params(n, code).joining(),
        &needed(program),
        on,
        l.now_ms(),
    )
}

fn join_on<S: Store>(
    l: &Ledger<S>,
    on: ExecutorId,
    n: u32,
    code: &str,
    program: &[Step],
) -> Result<BeginAnswer, BeginError> {
    join_as(l, &l.p, on, n, code, program)
}

/// A call that names no request id, run to its end if admitted.
fn join<S: Store>(l: &mut Ledger<S>, on: ExecutorId, n: u32, code: &str, program: &[Step]) -> Exec {
    let answer = join_on(l, on, n, code, program);
    l.go_on(answer, program)
}

/// A call that names request `n`, run to its end if admitted.
fn named<S: Store>(
    l: &mut Ledger<S>,
    on: ExecutorId,
    n: u32,
    code: &str,
    program: &[Step],
) -> Exec {
    let answer = l.w.engine.begin_server(
        Own,
        &l.p,
        &params(n, code),
        &needed(program),
        on,
        l.now_ms(),
    );
    l.go_on(answer, program)
}

/// The approval cards the user's approvals page shows.
fn cards<S: Store>(l: &Ledger<S>) -> Vec<ApprovalPrompt> {
    l.w.engine
        .pending_approvals_of(&l.w.site, USER, l.w.now)
        .unwrap()
}

/// The request ids the `WaitingCalls` index names, in key order.
fn waiting<S: Store>(store: &S) -> Vec<RequestId> {
    store
        .begin_read()
        .unwrap()
        .range(
            Table::WaitingCalls,
            Bound::Unbounded,
            Bound::Unbounded,
            usize::MAX,
        )
        .unwrap()
        .into_iter()
        .map(|(_, v)| RequestId::from_bytes(v.try_into().unwrap()))
        .collect()
}

fn sorted(mut ids: Vec<RequestId>) -> Vec<RequestId> {
    ids.sort();
    ids
}

fn identical_calls_without_a_request_id_share_one_card_and_one_run<S: Store>(store: &S) {
    let (mut l, x) = server(store);
    // The first call opens request 1; its run holds the ticket.
    let Ok(BeginAnswer::Run(t)) = join_on(&l, x, 1, "add()", &[ADD]) else {
        panic!("the first call runs")
    };
    assert_eq!(t.request_id(), rid(1));
    // An identical call meanwhile is told where request 1 stands.
    assert_eq!(
        join_on(&l, x, 2, "add()", &[ADD]),
        Ok(BeginAnswer::ExecutionPending(rid(1)))
    );
    let prompt = approval(l.go_on(Ok(BeginAnswer::Run(t)), &[ADD]));
    assert_eq!(prompt.request_id, rid(1));
    // The model calls again, with no way to name request 1: the same card,
    // under request 1's id, and nothing new opened.
    let again = join_on(&l, x, 3, "add()", &[ADD]).unwrap();
    assert_eq!(again, BeginAnswer::ApprovalPending(prompt.clone()));
    let json = again.to_json().unwrap();
    assert_eq!(
        (&json["requestId"], &json["status"]),
        (
            &serde_json::json!(id(1)),
            &serde_json::json!("approval_pending")
        )
    );
    assert_eq!(cards(&l), vec![prompt.clone()], "one card per write");
    for n in [2, 3] {
        assert_eq!(l.w.engine.execution_request(&l.p, &rid(n)).unwrap(), None);
    }
    assert_eq!(l.page.count(ADD), 0);
    // Approved: the next identical call runs request 1, once, and gets
    // its result.
    l.decide(&prompt, ApprovalDecision::Once);
    let r = result(join(&mut l, x, 4, "add()", &[ADD]));
    assert_eq!(r.request_id, rid(1));
    assert_eq!(r.end, End::Returned(r#"{"steps":1}"#.into()));
    assert_eq!(l.page.count(ADD), 1);
    assert!(cards(&l).is_empty());
    // Request 1 answers its result by its own id, as ever.
    assert_eq!(result(named(&mut l, x, 1, "add()", &[ADD])), r);
    // It ended: an identical call is another write, and asks again.
    let asked = approval(join(&mut l, x, 5, "add()", &[ADD]));
    assert_eq!(asked.request_id, rid(5));
    assert_eq!(cards(&l), vec![asked.clone()]);
    // Other arguments never join it…
    let other = approval(join(&mut l, x, 6, "add_b()", &[ADD_B]));
    assert_eq!(other.request_id, rid(6));
    // …nor does a call that names its own id, whose request no joining
    // call joins either.
    let own = approval(named(&mut l, x, 7, "add()", &[ADD]));
    assert_eq!(own.request_id, rid(7));
    assert_eq!(
        join_on(&l, x, 8, "add()", &[ADD]),
        Ok(BeginAnswer::ApprovalPending(asked.clone()))
    );
    assert_eq!(cards(&l).len(), 3);
    assert_eq!(l.w.engine.execution_request(&l.p, &rid(8)).unwrap(), None);
    // A denied request has ended too: the next identical call asks again.
    l.decide(&asked, ApprovalDecision::Deny);
    let after = approval(join(&mut l, x, 9, "add()", &[ADD]));
    assert_eq!(after.request_id, rid(9));
    assert_eq!(
        result(named(&mut l, x, 5, "add()", &[ADD])).end,
        End::Failed(Failure::Denied)
    );
    assert_eq!(
        sorted(cards(&l).iter().map(|c| c.request_id).collect()),
        vec![rid(6), rid(7), rid(9)]
    );
    assert_eq!((l.page.count(ADD), l.page.count(ADD_B)), (1, 0));
}

fn only_a_call_on_the_same_executor_by_the_same_caller_joins<S: Store>(store: &S) {
    let (mut l, x) = server(store);
    l.w.engine
        .connect_tab(Own, &l.w.site, USER, &l.p.grant, &hello("t", "p"), l.w.now)
        .unwrap();
    let on_server = approval(join(&mut l, x, 1, "add()", &[ADD]));
    let on_tab = |l: &Ledger<&S>, n: u32, caller: Caller| {
        l.w.engine.begin_needing(
            Own,
            &l.p,
            &params(n, "add()").joining(),
            &needed(&[ADD]),
            caller,
            l.now_ms(),
        )
    };
    // The same code on the tab is another call: it opens request 2…
    let answer = on_tab(&l, 2, Caller::Client);
    let tab_prompt = approval(l.go_on(answer, &[ADD]));
    assert_eq!(tab_prompt.request_id, rid(2));
    // …which the client's identical tab calls join…
    assert_eq!(
        on_tab(&l, 3, Caller::Client),
        Ok(BeginAnswer::ApprovalPending(tab_prompt.clone()))
    );
    // …but an in-page caller's never do (it is never auto-approved)…
    let Ok(BeginAnswer::Run(t)) = on_tab(&l, 4, Caller::InPage) else {
        panic!("an in-page call opens its own request")
    };
    assert_eq!(t.request_id(), rid(4));
    // …and the server's calls still join request 1.
    assert_eq!(
        join_on(&l, x, 5, "add()", &[ADD]),
        Ok(BeginAnswer::ApprovalPending(on_server))
    );
    assert_eq!(l.page.count(ADD), 0);
}

fn a_joining_call_passes_over_a_request_whose_grant_is_not_live<S: Store>(store: &S) {
    let (mut l, x) = server(store);
    approval(join(&mut l, x, 1, "add()", &[ADD]));
    // A site-wide revocation ends every grant without touching request 1.
    l.w.engine
        .rotate_site_key(Own, &l.w.site, &mut crate::support::rng(3))
        .unwrap();
    let (_, p2) = login(&mut l, NOTES);
    // The new grant's identical call does not join the revoked grant's
    // request (which only a call naming it ends): it asks afresh.
    let answer = join_as(&l, &p2, x, 2, "add()", &[ADD]);
    let fresh = approval(l.go_on(answer, &[ADD]));
    assert_eq!((fresh.request_id, fresh.grant), (rid(2), p2.grant));
    assert!(matches!(l.state(1), RequestState::AwaitingApproval(_)));
    // Another live grant of the lineage joins request 2, as a retry
    // naming it would: it takes the request over, and its card with it.
    let (_, p3) = login(&mut l, NOTES);
    let answer = join_as(&l, &p3, x, 3, "add()", &[ADD]);
    let moved = approval(l.go_on(answer, &[ADD]));
    assert_eq!((moved.request_id, moved.grant), (rid(2), p3.grant));
    assert_eq!(cards(&l), vec![moved]);
    assert_eq!(l.w.engine.execution_request(&p3, &rid(3)).unwrap(), None);
    assert_eq!(l.page.count(ADD), 0);
}

fn the_sweep_deletes_an_index_entry_with_the_request_it_names<S: Store>(store: &S) {
    let mut policy = no_rate_limit();
    policy.grant_absolute_ttl = Duration::from_secs(HOUR);
    let (mut l, x) = server_with(store, policy);
    assert_eq!(
        result(join(&mut l, x, 1, "list()", &[LIST])).request_id,
        rid(1)
    );
    assert_eq!(waiting(store), vec![rid(1)]);
    advance(&mut l, HOUR / 2, &[x]);
    let (_, p2) = login(&mut l, NOTES);
    // Request 1 ended: a new one, which the entry now names.
    let answer = join_as(&l, &p2, x, 2, "list()", &[LIST]);
    assert_eq!(result(l.go_on(answer, &[LIST])).request_id, rid(2));
    assert_eq!(waiting(store), vec![rid(2)]);
    let answer = join_as(&l, &p2, x, 3, "add()", &[ADD]);
    approval(l.go_on(answer, &[ADD]));
    assert_eq!(sorted(waiting(store)), vec![rid(2), rid(3)]);
    // The first grant's end: request 1 goes, the entry naming 2 stays.
    advance(&mut l, HOUR / 2 + 1, &[x]);
    while l.w.engine.sweep_ledger(Own, l.w.now, 4).unwrap() == 4 {}
    assert_eq!(l.w.engine.execution_request(&p2, &rid(1)).unwrap(), None);
    assert!(
        l.w.engine
            .execution_request(&p2, &rid(2))
            .unwrap()
            .is_some()
    );
    assert_eq!(sorted(waiting(store)), vec![rid(2), rid(3)]);
    // The second's: its requests go, and their entries with them.
    advance(&mut l, HOUR / 2, &[x]);
    while l.w.engine.sweep_ledger(Own, l.w.now, 4).unwrap() == 4 {}
    for n in [2, 3] {
        assert_eq!(l.w.engine.execution_request(&p2, &rid(n)).unwrap(), None);
    }
    assert_eq!(waiting(store), vec![]);
    assert_eq!(l.page.count(LIST), 2);
}

fn every_store_failure_in_a_joining_begin_leaves_nothing<S: Store>(store: &S) {
    let failing = FailingStore::new(store);
    let mut policy = no_rate_limit();
    policy.grant_absolute_ttl = Duration::from_secs(HOUR);
    let (mut l, x) = server_with(&failing, policy);
    // Opening a request: the request and its entry, or neither.
    let (opened, points) = under_faults(&failing, || join_on(&l, x, 1, "add()", &[ADD]));
    assert!(points > 0);
    let prompt = approval(l.go_on(opened, &[ADD]));
    assert_eq!(prompt.request_id, rid(1));
    // Joining it while it waits.
    let (joined, _) = under_faults(&failing, || join_on(&l, x, 2, "add()", &[ADD]));
    assert_eq!(joined, Ok(BeginAnswer::ApprovalPending(prompt.clone())));
    // Joining it once approved: its run starts.
    l.decide(&prompt, ApprovalDecision::Once);
    let (resumed, _) = under_faults(&failing, || join_on(&l, x, 3, "add()", &[ADD]));
    let r = result(l.go_on(resumed, &[ADD]));
    assert_eq!(r.request_id, rid(1));
    // Replacing the entry of the request that ended.
    let (replaced, _) = under_faults(&failing, || join_on(&l, x, 4, "add()", &[ADD]));
    assert_eq!(approval(l.go_on(replaced, &[ADD])).request_id, rid(4));
    assert_eq!(waiting(&failing), vec![rid(4)]);
    // The sweep that deletes the requests and their entry.
    advance(&mut l, HOUR + 1, &[x]);
    let now = l.w.now;
    let (swept, _) = under_faults(&failing, || l.w.engine.sweep_ledger(Own, now, 1_000));
    assert!(swept.unwrap() > 0);
    assert_eq!(waiting(&failing), vec![]);
    assert_eq!(l.page.count(ADD), 1);
}

on_every_store!(
    identical_calls_without_a_request_id_share_one_card_and_one_run,
    only_a_call_on_the_same_executor_by_the_same_caller_joins,
    a_joining_call_passes_over_a_request_whose_grant_is_not_live,
    the_sweep_deletes_an_index_entry_with_the_request_it_names,
    every_store_failure_in_a_joining_begin_leaves_nothing,
);
