//! The activity record ([`portcullis::activity`]) on every store: an
//! approved write, a denied one, an "always allow" and the write it then
//! lets through, a replay and a failure each leave the entries they should
//! (who decided, what allowed each action, how each ended), in the same
//! transaction as the ledger's change; a user reads their own only, the
//! operator's export filters by time, user and client; argument values are
//! kept only when the host opts in; the sweep deletes expired entries.

use std::time::Duration;

use portcullis::Own;
use portcullis::activity::{ActivityEntry, ActivityEvent, ActivityFilter, Allowance};
use portcullis::approval::ApprovalDecision;
use portcullis::ledger::{
    ActionVerdict, BeginAnswer, BusinessError, Completion, OutcomeStatus, Report,
};
use portcullis::scope::ScopeSet;
use portcullis::store::{ReadTransaction, Store, Table};
use portcullis::time::Timestamp;
use serde_json::Value;

use crate::ledger::{Ledger, action, approval, no_rate_limit, params, result};
use crate::ledger_server::{ADD, ADD_B, LIST, needed, server_with};
use crate::oauth::USER;
use crate::on_every_store;

/// The event names and action kinds of `entries`, oldest first.
fn events(entries: &[ActivityEntry]) -> Vec<(String, Option<u32>)> {
    entries
        .iter()
        .map(|e| (e.event.name().to_owned(), e.action.as_ref().map(|a| a.seq)))
        .collect()
}

/// The user's whole record, oldest first (the page reads newest first).
fn user_record<S: Store>(l: &Ledger<S>, subject: &str) -> Vec<ActivityEntry> {
    let mut all = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page =
            l.w.engine
                .user_activity(&l.w.site, subject, after.as_deref(), 3)
                .unwrap();
        all.extend(page.entries);
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    all.reverse();
    all
}

/// The operator's export with `filter`, in time order.
fn export<S: Store>(l: &Ledger<S>, filter: &ActivityFilter) -> Vec<ActivityEntry> {
    let mut all = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page =
            l.w.engine
                .activity_export(&l.w.site, filter, after.as_deref(), 2)
                .unwrap();
        all.extend(page.entries);
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    all
}

fn every_kind_of_call_is_recorded_with_its_approver_and_outcome<S: Store>(store: &S) {
    let (mut l, x) = server_with(store, no_rate_limit());
    let go = |l: &mut Ledger<&S>, n: u32, code: &str, program: &[crate::ledger::Step]| {
        let answer =
            l.w.engine
                .begin_server(Own, &l.p, &params(n, code), &needed(program), x, l.now_ms());
        l.go_on(answer, program)
    };
    // 1: approved once, runs, ends.
    let prompt = approval(go(&mut l, 1, "add(a)", &[LIST, ADD]));
    l.decide(&prompt, ApprovalDecision::Once);
    result(go(&mut l, 1, "add(a)", &[LIST, ADD]));
    // 2: denied.
    let prompt = approval(go(&mut l, 2, "add(b)", &[ADD_B]));
    l.w.advance(1);
    l.decide(&prompt, ApprovalDecision::Deny);
    // 3: "always allow" notes.add; then 4, another add, runs by that rule.
    l.w.advance(1);
    let prompt = approval(go(&mut l, 3, "add(a) again", &[ADD]));
    l.decide(&prompt, ApprovalDecision::AutoApproveKind);
    result(go(&mut l, 3, "add(a) again", &[ADD]));
    result(go(&mut l, 4, "add(b) too", &[ADD_B]));
    // 1 again: a replay, answered from the stored result.
    l.w.advance(1);
    result(go(&mut l, 1, "add(a)", &[LIST, ADD]));
    // 5: a read whose outcome fails, and the code's business error.
    let ticket = match l.w.engine.begin_server(
        Own,
        &l.p,
        &params(5, "list()"),
        &ScopeSet::new(),
        x,
        l.now_ms(),
    ) {
        Ok(BeginAnswer::Run(t)) => t,
        other => panic!("{other:?}"),
    };
    let now = l.w.now;
    let Ok(ActionVerdict::Run(t)) = l.w.engine.authorize_action(Own, ticket, &action(LIST), now)
    else {
        panic!("the read runs");
    };
    let t =
        l.w.engine
            .record_outcome(Own, t, Report::failed("E_DOWN", "the list is down"), now)
            .unwrap();
    l.w.engine
        .complete(
            Own,
            t,
            &Completion::Error(BusinessError::new("E_DOWN", "no list")),
            now,
        )
        .unwrap();

    let record = user_record(&l, USER);
    let of = |n: u32| -> Vec<&ActivityEntry> {
        record
            .iter()
            .filter(|e| e.request_id == crate::ledger_server::rid(n))
            .collect()
    };
    let named =
        |entries: &[&ActivityEntry]| entries.iter().map(|e| e.event.name()).collect::<Vec<_>>();
    // 1: the read needed no approval; the write ran on the person's
    // approval, once; then the replay.
    let first = of(1);
    let mut seen = named(&first);
    seen.sort_unstable();
    assert_eq!(
        seen,
        [
            "approved", "ended", "outcome", "outcome", "ran", "ran", "replayed"
        ]
    );
    let ran: Vec<Allowance> = first
        .iter()
        .filter_map(|e| match e.event {
            ActivityEvent::Ran { allowed_by } => Some(allowed_by),
            _ => None,
        })
        .collect();
    assert!(
        ran.contains(&Allowance::NotNeeded) && ran.contains(&Allowance::Approval),
        "{ran:?}"
    );
    assert!(first.iter().any(|e| e.event
        == ActivityEvent::Approved {
            by: USER.into(),
            always: false
        }));
    assert!(
        first
            .iter()
            .any(|e| e.event == ActivityEvent::Ended { end: "done".into() })
    );
    assert!(first.iter().any(|e| e.event == ActivityEvent::Replayed));
    // 2: denied by the user; nothing ran.
    assert_eq!(
        of(2).iter().map(|e| e.event.clone()).collect::<Vec<_>>(),
        [ActivityEvent::Denied { by: USER.into() }]
    );
    // 3 and 4: the rule, then the write it let through.
    assert!(of(3).iter().any(|e| e.event
        == ActivityEvent::Approved {
            by: USER.into(),
            always: true
        }));
    assert!(of(4).iter().any(|e| e.event
        == ActivityEvent::Ran {
            allowed_by: Allowance::AutoApproval
        }));
    // 5: the failed outcome and the business error.
    assert!(of(5).iter().any(|e| e.event
        == ActivityEvent::Outcome {
            status: OutcomeStatus::Failed("E_DOWN".into())
        }));
    assert!(of(5).iter().any(|e| e.event
        == ActivityEvent::Ended {
            end: "error:E_DOWN".into()
        }));
    // Every action entry names the digest its approval was bound to, and
    // no argument value (the host did not opt in).
    let add = record
        .iter()
        .find(|e| matches!(e.event, ActivityEvent::Approved { .. }))
        .unwrap();
    let a = add.action.as_ref().unwrap();
    assert_eq!(
        (a.kind.as_str(), a.fingerprint),
        (ADD.0, action(ADD).fingerprint())
    );
    assert!(
        record
            .iter()
            .all(|e| e.action.as_ref().is_none_or(|a| a.arguments.is_none()))
    );
    let json = add.to_json();
    assert_eq!(json["v"], 1);
    assert_eq!(json["event"], "approved");
    assert_eq!(json["by"], USER);
    assert_eq!(json["user"], USER);
    assert!(json["action"]["argumentsDigest"].as_str().unwrap().len() == 64);
    assert_eq!(json["action"].get("arguments"), None);
    assert!(json["at"].as_str().unwrap().ends_with('Z'));

    // The operator's export holds the same entries in time order; filters
    // by user, client and time.
    let all = export(&l, &ActivityFilter::default());
    assert_eq!(all.len(), record.len());
    assert!(all.windows(2).all(|w| w[0].at <= w[1].at));
    let mine = ActivityFilter {
        subject: Some(USER.into()),
        client_id: Some(l.p.client_id.clone()),
        ..ActivityFilter::default()
    };
    assert_eq!(export(&l, &mine).len(), record.len());
    let someone_else = ActivityFilter {
        subject: Some("someone-else".into()),
        ..ActivityFilter::default()
    };
    assert!(export(&l, &someone_else).is_empty());
    let first_second = ActivityFilter {
        until: Some(Timestamp::from_secs(record[0].at.as_secs() + 1)),
        ..ActivityFilter::default()
    };
    assert_eq!(
        events(&export(&l, &first_second)),
        events(
            &record
                .iter()
                .filter(|e| e.at == record[0].at)
                .cloned()
                .collect::<Vec<_>>()
        )
    );
    let last_second = ActivityFilter {
        since: Some(record.last().unwrap().at),
        ..ActivityFilter::default()
    };
    assert!(!export(&l, &last_second).is_empty());
    // Another user sees nothing of it, whatever cursor they hand in: a
    // cursor from another user's record (or the site index) starts over at
    // their own first entry, never inside someone else's.
    assert!(user_record(&l, "someone-else").is_empty());
    let alices_cursor =
        l.w.engine
            .user_activity(&l.w.site, USER, None, 1)
            .unwrap()
            .next
            .unwrap();
    for cursor in [alices_cursor.as_slice(), b"", b"s", &[0xff; 40]] {
        for reader in ["someone-else", "a", "zzz"] {
            let page =
                l.w.engine
                    .user_activity(&l.w.site, reader, Some(cursor), 100)
                    .unwrap();
            assert!(page.entries.is_empty(), "{reader} read another's entries");
        }
    }
}

fn argument_values_are_kept_only_when_the_host_opts_in<S: Store>(store: &S) {
    let mut policy = no_rate_limit();
    policy.activity_arguments = true;
    let (mut l, x) = server_with(store, policy);
    let answer = l.w.engine.begin_server(
        Own,
        &l.p,
        &params(1, "list()"),
        &needed(&[LIST]),
        x,
        l.now_ms(),
    );
    result(l.go_on(answer, &[LIST]));
    let record = user_record(&l, USER);
    let ran = record
        .iter()
        .find(|e| matches!(e.event, ActivityEvent::Ran { .. }))
        .unwrap();
    assert_eq!(
        ran.action.as_ref().unwrap().arguments.as_deref(),
        Some(LIST.3.as_bytes())
    );
    assert_eq!(
        ran.to_json()["action"]["arguments"],
        Value::Object(serde_json::Map::default())
    );
}

fn expired_entries_are_swept<S: Store>(store: &S) {
    let mut policy = no_rate_limit();
    policy.activity_retention = Duration::from_hours(1);
    let (mut l, x) = server_with(store, policy);
    let answer = l.w.engine.begin_server(
        Own,
        &l.p,
        &params(1, "list()"),
        &needed(&[LIST]),
        x,
        l.now_ms(),
    );
    result(l.go_on(answer, &[LIST]));
    assert!(!user_record(&l, USER).is_empty());
    l.w.advance(3_601);
    while l.w.engine.sweep(Own, l.w.now, 64).unwrap() > 0 {}
    assert!(user_record(&l, USER).is_empty());
    assert!(export(&l, &ActivityFilter::default()).is_empty());
    let r = store.begin_read().unwrap();
    assert!(
        r.range(
            Table::Activity,
            std::ops::Bound::Unbounded,
            std::ops::Bound::Unbounded,
            1
        )
        .unwrap()
        .is_empty(),
        "both keys of every entry are gone"
    );
}

fn zero_retention_keeps_no_record<S: Store>(store: &S) {
    let mut none = no_rate_limit();
    none.activity_retention = Duration::ZERO;
    let (mut l, x) = server_with(store, none);
    let answer = l.w.engine.begin_server(
        Own,
        &l.p,
        &params(7, "list()"),
        &needed(&[LIST]),
        x,
        l.now_ms(),
    );
    result(l.go_on(answer, &[LIST]));
    assert!(user_record(&l, USER).is_empty());
    assert!(export(&l, &ActivityFilter::default()).is_empty());
}

on_every_store!(
    every_kind_of_call_is_recorded_with_its_approver_and_outcome,
    argument_values_are_kept_only_when_the_host_opts_in,
    expired_entries_are_swept,
    zero_retention_keeps_no_record,
);
