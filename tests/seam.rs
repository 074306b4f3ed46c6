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
    let mut w = World::with_policy(&failing, crate::oauth::strict_rotation());
    let first = w.login();
    for call in [None, Some(Call::Commit)] {
        let before = w.login();
        failing.set(1, call, false, StoreErrorKind::Conflict);
        let rotated = w.refresh(before.refresh_token.expose_secret()).unwrap();
        assert_eq!(failing.fired(), 1, "the conflict fired ({call:?})");
        failing.disarm();
        // Exactly one rotation happened: the successor works once and the
        // spent token, presented again, is reuse.
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
                .begin(txn, &l.p, &params(n, "read()"), Caller::Client, now)
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

    #[test]
    fn postgres() {
        for n in 1.. {
            let (Some(a), Some(b)) = (
                crate::support::TempPostgres::new(),
                crate::support::TempPostgres::new(),
            ) else {
                return;
            };
            if !super::a_failed_operation_leaves_nothing_in_a_shared_transaction(
                &*a.store, &*b.store, n,
            ) {
                assert!(n > 3, "the request wrote at least three times");
                break;
            }
        }
    }
}

/// The group committer: batches, answers after the commit, failures.
mod group {
    use std::sync::{Arc, Barrier};
    use std::thread;
    use std::time::Duration;

    use portcullis::store::{
        Durability, GroupCommitter, MemoryStore, ReadTransaction, Store, StoreErrorKind, Table,
        WriteTransaction,
    };

    use crate::failing_store::{Call, FailingStore, dump};

    fn count<R: ReadTransaction>(txn: &R, key: &[u8]) -> u64 {
        txn.get(Table::Meta, key)
            .unwrap()
            .map_or(0, |b| u64::from_be_bytes(b.try_into().unwrap()))
    }

    fn increment<W: WriteTransaction>(txn: &mut W, key: &[u8]) -> u64 {
        let n = count(&*txn, key) + 1;
        txn.put(Table::Meta, key, &n.to_be_bytes()).unwrap();
        n
    }

    /// Concurrent read-modify-writes through the committer lose no update,
    /// every caller sees a distinct value, and commits are shared.
    #[test]
    fn concurrent_callers_lose_no_update_and_share_commits() {
        let db = crate::support::TempRedb::with_durability(Durability::Immediate);
        let crate::support::TempRedb { store, dir, .. } = db;
        let committer = Arc::new(GroupCommitter::new(Arc::new(store)));
        let (threads, each) = (8, 25);
        let start = Arc::new(Barrier::new(threads));
        let seen: Vec<Vec<u64>> = (0..threads)
            .map(|_| {
                let (c, start) = (Arc::clone(&committer), Arc::clone(&start));
                thread::spawn(move || {
                    start.wait();
                    (0..each)
                        .map(|_| c.run(|txn| increment(txn, b"n")).unwrap())
                        .collect::<Vec<u64>>()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        let mut all: Vec<u64> = seen.into_iter().flatten().collect();
        all.sort_unstable();
        let total = (threads * each) as u64;
        assert_eq!(all, (1..=total).collect::<Vec<_>>(), "each answer once");
        let r = committer.store().begin_read().unwrap();
        assert_eq!(count(&r, b"n"), total);
        drop(r);
        assert_eq!(committer.operations(), total);
        assert!(
            committer.commits() < total,
            "{} commits for {total} operations",
            committer.commits()
        );
        drop(committer);
        drop(dir);
    }

    /// Holds the committer's leader until `callers` more operations are
    /// queued, so that they land in one batch; `go` starts them.
    fn hold_leader<S>(c: &Arc<GroupCommitter<S>>, callers: usize) -> thread::JoinHandle<()>
    where
        S: Store + Send + Sync + 'static,
    {
        let (c, inner) = (Arc::clone(c), Arc::clone(c));
        let started = Arc::new(Barrier::new(2));
        let h = {
            let started = Arc::clone(&started);
            thread::spawn(move || {
                c.run(move |_| {
                    started.wait();
                    for _ in 0..2_000 {
                        if inner.waiting() >= callers {
                            return;
                        }
                        thread::sleep(Duration::from_millis(1));
                    }
                    panic!("the callers never queued");
                })
                .unwrap();
            })
        };
        started.wait();
        h
    }

    /// A failed commit fails every operation of its batch, none of them is
    /// applied, and each caller's retry succeeds.
    #[test]
    fn a_failed_commit_fails_the_whole_batch() {
        let committer = Arc::new(GroupCommitter::new(Arc::new(FailingStore::new(
            MemoryStore::new(),
        ))));
        let store = Arc::clone(committer.store());
        // The holder's batch writes nothing (no commit); the next one fails.
        store.set(1, Some(Call::Commit), false, StoreErrorKind::Io);
        let before = dump(store.inner());
        let holder = hold_leader(&committer, 3);
        let callers: Vec<_> = (0..3u8)
            .map(|i| {
                let c = Arc::clone(&committer);
                thread::spawn(move || c.run(move |txn| txn.put(Table::Meta, &[i], b"x")))
            })
            .collect();
        holder.join().unwrap();
        for h in callers {
            let answer = h.join().unwrap();
            assert!(
                answer.is_err(),
                "an operation of a failed batch answered {answer:?}"
            );
        }
        assert_eq!(store.fired(), 1);
        assert!(
            dump(store.inner()) == before,
            "a failed batch applied something"
        );
        assert_eq!(committer.commits(), 1, "the three shared one commit");
        store.disarm();
        for i in 0..3u8 {
            committer
                .run(move |txn| txn.put(Table::Meta, &[i], b"x"))
                .unwrap()
                .unwrap();
        }
        assert_eq!(dump(store.inner())[0].len(), 3);
    }

    /// An operation that panics is rolled back and its caller gets the
    /// panic; the others of its batch commit.
    #[test]
    fn a_panicking_operation_leaves_nothing_and_the_batch_commits() {
        let committer = Arc::new(GroupCommitter::new(Arc::new(MemoryStore::new())));
        let holder = hold_leader(&committer, 3);
        let callers: Vec<_> = (0..3u8)
            .map(|i| {
                let c = Arc::clone(&committer);
                thread::spawn(move || {
                    c.run(move |txn| {
                        txn.put(Table::Meta, &[i], b"x").unwrap();
                        assert!(i != 1, "operation 1 fails");
                    })
                })
            })
            .collect();
        holder.join().unwrap();
        let answers: Vec<_> = callers.into_iter().map(|h| h.join().is_ok()).collect();
        assert_eq!(answers, [true, false, true]);
        let r = committer.store().begin_read().unwrap();
        assert!(r.get(Table::Meta, &[0]).unwrap().is_some());
        assert_eq!(r.get(Table::Meta, &[1]).unwrap(), None);
        assert!(r.get(Table::Meta, &[2]).unwrap().is_some());
    }

    /// Two refreshes of one token in one batch: exactly one rotation, and
    /// the other is judged a reuse (no retry window by default), which
    /// revokes the grant — the answers of one commit each.
    #[test]
    fn two_refreshes_of_one_token_in_one_batch_rotate_once() {
        use portcullis::Engine;
        use portcullis::header::HeaderField;
        use portcullis::token::TokenError;

        let db = crate::support::TempRedb::new();
        let crate::support::TempRedb { store, dir, .. } = db;
        let store = Arc::new(store);
        let mut w =
            crate::oauth::World::with_policy(Arc::clone(&store), crate::oauth::strict_rotation());
        let t = w.login();
        let engine = Arc::new(Engine::new(
            Arc::clone(&store),
            crate::oauth::keyring(),
            crate::oauth::strict_rotation(),
        ));
        let committer = Arc::new(GroupCommitter::new(Arc::clone(&store)));
        let holder = hold_leader(&committer, 2);
        let body = portcullis::form::encode_pairs([
            ("grant_type", "refresh_token"),
            ("refresh_token", t.refresh_token.expose_secret()),
            ("client_id", w.client_id.as_str()),
        ]);
        let callers: Vec<_> = (0..2)
            .map(|_| {
                let (c, engine, site, body, now) = (
                    Arc::clone(&committer),
                    Arc::clone(&engine),
                    w.site.clone(),
                    body.clone(),
                    w.now,
                );
                thread::spawn(move || {
                    c.run(move |txn| {
                        engine.token(
                            txn,
                            &site,
                            &body,
                            HeaderField::ABSENT,
                            &mut rand::rng(),
                            now,
                        )
                    })
                    .unwrap()
                })
            })
            .collect();
        holder.join().unwrap();
        let answers: Vec<_> = callers.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(committer.commits(), 1, "both in one batch");
        let rotated: Vec<_> = answers.iter().filter_map(|a| a.as_ref().ok()).collect();
        assert_eq!(rotated.len(), 1, "exactly one rotation: {answers:?}");
        assert!(
            answers
                .iter()
                .any(|a| a.as_ref().err() == Some(&TokenError::InvalidGrant)),
            "the other is a reuse"
        );
        // The reuse revoked the grant, successor included.
        assert_eq!(
            w.refresh(rotated[0].refresh_token.expose_secret())
                .unwrap_err(),
            TokenError::InvalidGrant
        );
        drop(dir);
    }

    /// An idle committer hands its writer to one caller at once
    /// (`GroupCommitter::alone`): that caller's operation commits alone on
    /// its own thread; nobody else leads meanwhile; an operation that wrote
    /// nothing is not committed.
    #[test]
    fn an_idle_committer_lets_one_caller_commit_alone() {
        let committer = GroupCommitter::new(Arc::new(MemoryStore::new()));
        let alone = committer.alone().expect("idle");
        assert!(committer.alone().is_none(), "one leader at a time");
        assert_eq!(alone.run(|txn| increment(txn, b"n")).unwrap(), 1);
        assert_eq!((committer.commits(), committer.operations()), (1, 1));
        let alone = committer.alone().expect("idle again once used");
        assert_eq!(alone.run(|txn| count(&*txn, b"n")).unwrap(), 1);
        assert_eq!(committer.commits(), 1, "a read is not committed");
        let r = committer.store().begin_read().unwrap();
        assert_eq!(count(&r, b"n"), 1);
    }

    /// While one caller commits alone, another that arrives queues (it does
    /// not get `alone`) and leads the next batch once the first is done;
    /// a caller is never offered `alone` while someone is queued.
    #[test]
    fn a_caller_that_arrives_meanwhile_queues_and_leads_next() {
        let committer = Arc::new(GroupCommitter::new(Arc::new(MemoryStore::new())));
        let alone = committer.alone().expect("idle");
        let queued = {
            let c = Arc::clone(&committer);
            thread::spawn(move || c.run(|txn| increment(txn, b"n")).unwrap())
        };
        for _ in 0..2_000 {
            if committer.waiting() == 1 {
                break;
            }
            thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(committer.waiting(), 1, "the second caller queued");
        assert!(committer.alone().is_none(), "not while one is committing");
        assert_eq!(alone.run(|txn| increment(txn, b"n")).unwrap(), 1);
        assert_eq!(queued.join().unwrap(), 2, "the queued caller went next");
        assert_eq!(committer.commits(), 2);
        assert!(committer.alone().is_some(), "idle again");
    }

    /// Leadership taken and dropped unused, or lost to a panic in the
    /// operation, is given back, and the panicking operation applies
    /// nothing.
    #[test]
    fn leadership_dropped_or_lost_to_a_panic_is_given_back() {
        let committer = GroupCommitter::new(Arc::new(MemoryStore::new()));
        drop(committer.alone().expect("idle"));
        let alone = committer.alone().expect("given back on drop");
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            alone.run(|txn| {
                increment(txn, b"n");
                panic!("the operation fails midway");
            })
        }));
        assert!(panicked.is_err());
        assert!(committer.alone().is_some(), "given back after the panic");
        let r = committer.store().begin_read().unwrap();
        assert_eq!(count(&r, b"n"), 0, "nothing of it applied");
        assert_eq!(committer.commits(), 0);
    }

    /// A store that fails to commit: the caller gets the store's error and
    /// nothing is applied; leadership is given back.
    #[test]
    fn a_failed_commit_alone_applies_nothing() {
        let store = Arc::new(FailingStore::new(MemoryStore::new()));
        store.set(1, Some(Call::Commit), false, StoreErrorKind::Io);
        let committer = GroupCommitter::new(Arc::clone(&store));
        let alone = committer.alone().expect("idle");
        assert!(alone.run(|txn| increment(txn, b"n")).is_err());
        assert!(committer.alone().is_some());
        assert!(
            dump(store.inner()).iter().all(Vec::is_empty),
            "nothing applied"
        );
    }
}
