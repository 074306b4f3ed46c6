//! Model-based property test of the ledger and approvals: random sequences
//! of begin, approve, deny, revoke, reconnect, sweep and clock moves run
//! against the engine and against a plain model; every answer must agree
//! and no action may ever run twice.

use std::collections::HashMap;

use portcullis::Own;
use portcullis::approval::{ApprovalDecision, ApprovalPrompt};
use portcullis::ledger::{BeginError, Caller, Effect, End, Failure};
use portcullis::scope::{SKILLS_READ, SKILLS_WRITE};
use portcullis::store::Store;
use proptest::prelude::*;

use crate::failing_store::{FailingStore, under_faults};
use crate::ledger::{Exec, Ledger, Step, hello, params};
use crate::oauth::USER;

const HOUR: u64 = 3_600;

#[derive(Clone, Debug)]
enum Op {
    /// `execute` request `n` with code variant `code` (0: one read; 1: a read
    /// then a write that needs approval).
    Begin(u32, u8),
    Approve(u32),
    Deny(u32),
    Revoke,
    Reload,
    Sweep,
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..6u32, 0..2u8).prop_map(|(n, c)| Op::Begin(n, c)),
        3 => (0..6u32).prop_map(Op::Approve),
        1 => (0..6u32).prop_map(Op::Deny),
        1 => Just(Op::Revoke),
        1 => Just(Op::Reload),
        1 => Just(Op::Sweep),
        2 => prop_oneof![Just(60u64), Just(HOUR), Just(10 * HOUR)].prop_map(Op::Advance),
    ]
}

/// The steps of request `n`'s code `code`: its actions are unique to it, so
/// the page's counters tell whether any ran twice.
fn program(n: u32, code: u8) -> Vec<Step> {
    let read: &'static str = Box::leak(format!("{{\"r\":{n}}}").into_boxed_str());
    let mut p = vec![("items.get", Effect::Read, SKILLS_READ, read)];
    if code == 1 {
        let write: &'static str = Box::leak(format!("{{\"w\":{n}}}").into_boxed_str());
        p.push(("cart.add", Effect::Write, SKILLS_WRITE, write));
    }
    p
}

fn code_text(code: u8) -> &'static str {
    if code == 0 { "read()" } else { "buy()" }
}

#[derive(Clone, Debug, PartialEq)]
enum State {
    Awaiting,
    Approved,
    Done { at: u64, end: End },
}

struct Req {
    code: u8,
    state: State,
    /// The grant that owned it was revoked: nobody reads it again.
    revoked: bool,
    prompt: Option<ApprovalPrompt>,
    /// How often each of its actions really ran, per the model.
    reads: u32,
    writes: u32,
}

#[allow(
    clippy::too_many_lines,
    reason = "one match over the operations, each arm next to its model rule"
)]
fn run<S: Store>(store: S, ops: &[Op], faults: bool) -> Result<(), TestCaseError> {
    let failing = FailingStore::new(store);
    let mut l = Ledger::new(&failing);
    // One engine call, or under every failure point it has. (The ticket
    // calls of a run are not: a store failure loses the ticket by
    // contract, so they cannot be retried.)
    macro_rules! call {
        ($e:expr) => {
            if faults {
                under_faults(&failing, || $e).0
            } else {
                $e
            }
        };
    }
    let mut model: HashMap<u32, Req> = HashMap::new();
    let mut page = 1;
    for op in ops {
        let now = l.w.now.as_secs();
        match *op {
            Op::Begin(n, code) => {
                let params = params(n, code_text(code));
                let at = l.now_ms();
                let answer = call!(l.w.engine.begin(Own, &l.p, &params, Caller::Client, at));
                let answer = l.go_on(answer, &program(n, code));
                match model.get_mut(&n) {
                    None => {
                        let mut req = Req {
                            code,
                            state: State::Awaiting,
                            revoked: false,
                            prompt: None,
                            reads: 1,
                            writes: 0,
                        };
                        match (code, answer) {
                            (0, Exec::Result(r)) => {
                                prop_assert_eq!(&r.end, &End::Returned(r#"{"steps":1}"#.into()));
                                req.state = State::Done {
                                    at: now,
                                    end: r.end,
                                };
                            }
                            (1, Exec::Approval(p)) => req.prompt = Some(p),
                            (_, other) => prop_assert!(false, "new request answered {:?}", other),
                        }
                        model.insert(n, req);
                    }
                    Some(req) if req.code != code => {
                        prop_assert!(
                            matches!(answer, Exec::Refused(BeginError::ReplayDetected)),
                            "{:?}",
                            answer
                        );
                    }
                    Some(req) if req.revoked => {
                        prop_assert!(
                            matches!(answer, Exec::Refused(BeginError::ResultExpired)),
                            "{:?}",
                            answer
                        );
                    }
                    Some(req) => match (&req.state, answer) {
                        (State::Done { at, .. }, Exec::Refused(BeginError::ResultExpired)) => {
                            prop_assert!(now >= at + 24 * HOUR, "expired early");
                        }
                        (State::Done { at, end }, Exec::Result(r)) => {
                            prop_assert!(now < at + 24 * HOUR, "served after retention");
                            prop_assert_eq!(&r.end, end);
                        }
                        (State::Awaiting, Exec::Approval(p)) => {
                            prop_assert_eq!(Some(&p), req.prompt.as_ref());
                        }
                        (State::Approved, Exec::Result(r)) => {
                            prop_assert_eq!(&r.end, &End::Returned(r#"{"steps":2}"#.into()));
                            prop_assert_eq!(r.outcomes.total, 2);
                            req.writes += 1;
                            req.state = State::Done {
                                at: now,
                                end: r.end,
                            };
                        }
                        (State::Approved, Exec::Approval(p)) => {
                            // Reload or revocation voided nothing here: only a
                            // policy change does, which this model never makes.
                            prop_assert!(false, "approved request asked again: {:?}", p);
                        }
                        (state, answer) => {
                            prop_assert!(false, "{:?} answered {:?}", state, answer);
                        }
                    },
                }
            }
            Op::Approve(n) | Op::Deny(n) => {
                let Some(req) = model.get_mut(&n) else {
                    continue;
                };
                let Some(prompt) = req.prompt.clone() else {
                    continue;
                };
                let decision = if matches!(op, Op::Approve(_)) {
                    ApprovalDecision::Once
                } else {
                    ApprovalDecision::Deny
                };
                let result = call!(l.w.engine.decide_approval(
                    Own,
                    &l.w.site,
                    USER,
                    &prompt.reference(),
                    decision,
                    l.w.now,
                ));
                if req.state == State::Awaiting && !req.revoked {
                    prop_assert!(result.is_ok(), "{:?}", result);
                    req.state = if decision == ApprovalDecision::Deny {
                        State::Done {
                            at: now,
                            end: End::Failed(Failure::Denied),
                        }
                    } else {
                        State::Approved
                    };
                } else {
                    prop_assert!(result.is_err(), "decided a settled approval");
                }
            }
            Op::Revoke => {
                call!(l.w.engine.revoke_grant(Own, &l.p.grant, l.w.now)).unwrap();
                for req in model.values_mut() {
                    req.revoked = true;
                }
                l.tokens = l.w.login();
                l.p = l.w.bearer(&l.tokens, "").unwrap();
                page += 1;
                l.connect("tab-1", &format!("page-{page}"));
            }
            Op::Reload => {
                page += 1;
                let hello = hello("tab-1", &format!("page-{page}"));
                call!(
                    l.w.engine
                        .connect_tab(Own, &l.w.site, USER, &l.p.grant, &hello, l.w.now)
                )
                .unwrap();
            }
            Op::Sweep => {
                call!(l.w.engine.sweep_ledger(Own, l.w.now, 16)).unwrap();
            }
            Op::Advance(secs) => l.advance(secs, "tab-1", &format!("page-{page}")),
        }
        for (n, req) in &model {
            let prog = program(*n, 1);
            prop_assert_eq!(l.page.count(prog[0]), req.reads, "reads of {}", n);
            prop_assert_eq!(l.page.count(prog[1]), req.writes, "writes of {}", n);
            prop_assert!(req.reads <= 1 && req.writes <= 1);
        }
    }
    Ok(())
}

fn config(cases: u32) -> ProptestConfig {
    crate::support::proptest_config(cases, "proptest-regressions/ledger_model.txt")
}

proptest! {
    #![proptest_config(config(64))]

    #[test]
    fn ledger_agrees_with_the_model_on_memory(ops in prop::collection::vec(op(), 1..40)) {
        run(crate::support::memory(), &ops, false)?;
    }

    #[test]
    fn every_store_failure_leaves_nothing_and_a_retry_agrees_on_memory(
        ops in prop::collection::vec(op(), 1..25),
    ) {
        run(crate::support::memory(), &ops, true)?;
    }
}

proptest! {
    #![proptest_config(config(16))]

    #[test]
    fn ledger_agrees_with_the_model_on_redb(ops in prop::collection::vec(op(), 1..30)) {
        let db = crate::support::TempRedb::new();
        run(&db.store, &ops, false)?;
    }
}

proptest! {
    #![proptest_config(config(6))]

    #[test]
    fn every_store_failure_leaves_nothing_and_a_retry_agrees_on_redb(
        ops in prop::collection::vec(op(), 1..15),
    ) {
        let db = crate::support::TempRedb::new();
        run(&db.store, &ops, true)?;
    }
}

proptest! {
    #![proptest_config(config(8))]

    #[test]
    fn ledger_agrees_with_the_model_on_postgres(ops in prop::collection::vec(op(), 1..30)) {
        let Some(db) = crate::support::TempPostgres::new() else { return Ok(()) };
        run(&*db.store, &ops, false)?;
    }

    #[test]
    fn every_store_failure_leaves_nothing_and_a_retry_agrees_on_postgres(
        ops in prop::collection::vec(op(), 1..15),
    ) {
        let Some(db) = crate::support::TempPostgres::new() else { return Ok(()) };
        run(&*db.store, &ops, true)?;
    }
}
