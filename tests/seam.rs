//! The storage seam: conflicts and retries, operations in a caller's
//! transaction, and every operation under injected store failures.

use portcullis::engine::MAX_ATTEMPTS;
use portcullis::ledger::{BeginAnswer, BeginError, Caller};
use portcullis::store::{Store, StoreErrorKind, WriteTransaction};
use portcullis::time::TimestampMs;
use portcullis::token::TokenError;

use crate::failing_store::{Call, FailingStore, dump};
use crate::ledger::{Ledger, params};
use crate::oauth::World;
use crate::on_every_store;

/// A conflict anywhere in an operation's transaction (its first read, its
/// commit) re-runs it on a fresh transaction: the caller sees one rotation.
fn a_conflict_reruns_the_operation<S: Store>(store: &S) {
    let failing = FailingStore::new(store);
    let mut w = World::new(&failing);
    let first = w.login();
    for call in [None, Some(Call::Commit)] {
        let before = w.login();
        failing.set(1, call, false, StoreErrorKind::Conflict);
        let rotated = w.refresh(before.refresh_token.expose_secret()).unwrap();
        assert_eq!(failing.fired(), 1, "the conflict fired ({call:?})");
        failing.disarm();
        // Exactly one rotation happened: the successor works once and the
        // spent token is still inside its retry window.
        let next = w.refresh(rotated.refresh_token.expose_secret()).unwrap();
        w.advance(60);
        assert_eq!(
            w.refresh(before.refresh_token.expose_secret()).unwrap_err(),
            TokenError::InvalidGrant
        );
        assert_eq!(
            w.refresh(next.refresh_token.expose_secret()).unwrap_err(),
            TokenError::InvalidGrant,
            "reuse of the first token revoked the grant"
        );
    }
    assert!(w.refresh(first.refresh_token.expose_secret()).is_ok());
}

/// Conflicts past the budget answer with the conflict and change nothing.
fn endless_conflicts_give_up_and_change_nothing<S: Store>(store: &S) {
    let failing = FailingStore::new(store);
    let mut w = World::new(&failing);
    let t = w.login();
    let before = dump(store);
    failing.set(1, Some(Call::Commit), true, StoreErrorKind::Conflict);
    let err = w.refresh(t.refresh_token.expose_secret()).unwrap_err();
    let TokenError::Store(e) = err else {
        panic!("expected the store's conflict, got {err:?}");
    };
    assert_eq!(e.kind(), StoreErrorKind::Conflict);
    assert_eq!(
        failing.calls(),
        MAX_ATTEMPTS as usize,
        "one commit per attempt"
    );
    failing.disarm();
    assert!(dump(store) == before, "a failed attempt left a trace");
    assert!(w.refresh(t.refresh_token.expose_secret()).is_ok());
}

/// An I/O failure is not retried: the caller hears it at once.
fn other_failures_are_not_retried<S: Store>(store: &S) {
    let failing = FailingStore::new(store);
    let mut w = World::new(&failing);
    let t = w.login();
    failing.set(1, Some(Call::Commit), true, StoreErrorKind::Io);
    assert!(matches!(
        w.refresh(t.refresh_token.expose_secret()),
        Err(TokenError::Store(_))
    ));
    assert_eq!(failing.calls(), 1);
}

on_every_store!(
    a_conflict_reruns_the_operation,
    endless_conflicts_give_up_and_change_nothing,
    other_failures_are_not_retried,
);

/// Three callers' `execute` requests applied to one transaction, the middle
/// one failing at its `n`-th write: the other two commit, and the store
/// holds exactly what the two alone would have written. Returns whether
/// the middle one had an `n`-th write.
fn a_failed_operation_leaves_nothing_in_a_shared_transaction<S: Store>(
    with_failure: &S,
    without: &S,
    n: usize,
) -> bool {
    let run = |store: &S, fail: bool| {
        let failing = FailingStore::new(store);
        let l = Ledger::new(&failing);
        let now = TimestampMs::from(l.w.now);
        let mut txn = failing.begin_write().unwrap();
        let begin = |txn: &mut _, n| {
            l.w.engine
                .begin_in(txn, &l.p, &params(n, "read()"), Caller::Client, now)
        };
        assert!(matches!(begin(&mut txn, 1), Ok(BeginAnswer::Run(_))));
        if fail {
            failing.set(n, Some(Call::Put), false, StoreErrorKind::Io);
            let answer = begin(&mut txn, 2);
            let fired = failing.fired() == 1;
            failing.disarm();
            if !fired {
                return None;
            }
            assert!(matches!(answer, Err(BeginError::Store(_))), "{answer:?}");
        }
        assert!(matches!(begin(&mut txn, 3), Ok(BeginAnswer::Run(_))));
        txn.commit().unwrap();
        Some(dump(failing.inner()))
    };
    let Some(failed) = run(with_failure, true) else {
        return false;
    };
    assert!(
        Some(failed) == run(without, false),
        "the caller that failed at its write {n} left a trace"
    );
    true
}

mod shared_transaction {
    #[test]
    fn memory() {
        for n in 1.. {
            let (a, b) = (crate::support::memory(), crate::support::memory());
            if !super::a_failed_operation_leaves_nothing_in_a_shared_transaction(&a, &b, n) {
                assert!(n > 3, "the request wrote at least three times");
                break;
            }
        }
    }

    #[test]
    fn redb() {
        for n in 1.. {
            let (a, b) = (
                crate::support::TempRedb::new(),
                crate::support::TempRedb::new(),
            );
            if !super::a_failed_operation_leaves_nothing_in_a_shared_transaction(
                &a.store, &b.store, n,
            ) {
                assert!(n > 3, "the request wrote at least three times");
                break;
            }
        }
    }
}
