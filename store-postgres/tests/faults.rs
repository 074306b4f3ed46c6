//! The store when connections fail under it, through a proxy that cuts
//! them (`proxy/`): pooled connections that died while idle are never
//! handed to a transaction, and a `COMMIT` whose answer was lost is looked
//! up before the store answers, so `commit` says `Ok` exactly when the
//! transaction committed.
//!
//! Needs `PORTCULLIS_TEST_POSTGRES_URL`; without it each test says so and
//! passes. Each test uses a schema of its own.
#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed unwrap is a failed test"
)]

mod proxy;

use portcullis_core::store::{
    ReadTransaction as _, Store as _, StoreErrorKind, Table, WriteTransaction as _,
};
use portcullis_store_postgres::{PostgresConfig, PostgresStore};
use proxy::{AtCommit, Proxy};
use std::time::Duration;

/// The store's own default wait for a connection.
const WAIT: Duration = portcullis_store_postgres::DEFAULT_CONNECT_TIMEOUT;

/// The store on a schema of `test`'s own, through a fresh proxy.
fn through_proxy(test: &str, timeout: Duration) -> Option<(PostgresStore, Proxy)> {
    let Ok(url) = std::env::var("PORTCULLIS_TEST_POSTGRES_URL") else {
        eprintln!("PORTCULLIS_TEST_POSTGRES_URL not set: {test} skipped");
        return None;
    };
    let proxy = Proxy::start(&url);
    let schema = format!("faults_{test}_{}", std::process::id());
    let mut c = PostgresConfig::parse(&url).unwrap().connect().unwrap();
    c.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .unwrap();
    let store = PostgresConfig::parse(&proxy.url(&url))
        .unwrap()
        .schema(&schema)
        .unwrap()
        .pool_size(4)
        .connect_timeout(timeout)
        .open()
        .unwrap();
    Some((store, proxy))
}

fn put(store: &PostgresStore, key: &[u8]) -> Result<(), portcullis_core::store::StoreError> {
    let mut w = store.begin_write()?;
    w.put(Table::Grants, key, b"v")?;
    w.commit()
}

fn has(store: &PostgresStore, key: &[u8]) -> bool {
    store
        .begin_read()
        .unwrap()
        .get(Table::Grants, key)
        .unwrap()
        .is_some()
}

#[test]
fn connections_that_died_idle_in_the_pool_are_never_handed_out() {
    let Some((store, proxy)) = through_proxy("idle", WAIT) else {
        return;
    };
    // Four connections in the pool, all idle.
    std::thread::scope(|s| {
        for i in 0..4u8 {
            let store = &store;
            s.spawn(move || put(store, &[i]).unwrap());
        }
    });
    proxy.cut_all();
    // Every pooled connection is dead now; each transaction still works.
    for i in 0..8u8 {
        assert!(has(&store, &[i % 4]), "read {i}");
        put(&store, &[10 + i]).unwrap_or_else(|e| panic!("write {i}: {e}"));
    }
}

#[test]
fn a_database_that_cannot_be_reached_is_unavailable() {
    let Some((store, proxy)) = through_proxy("down", Duration::from_millis(500)) else {
        return;
    };
    put(&store, b"k").unwrap();
    proxy.refuse(true);
    proxy.cut_all();
    let e = put(&store, b"k").expect_err("no database, no write");
    assert_eq!(e.kind(), StoreErrorKind::Unavailable, "{e}");
    let e = store.begin_read().expect_err("no database, no read");
    assert_eq!(e.kind(), StoreErrorKind::Unavailable, "{e}");
    proxy.refuse(false);
    put(&store, b"k").unwrap();
}

#[test]
fn a_commit_whose_answer_was_lost_is_ok_exactly_when_it_committed() {
    let Some((store, proxy)) = through_proxy("commit", WAIT) else {
        return;
    };
    put(&store, b"warm").unwrap();

    // The server has the COMMIT; its answer never comes back.
    proxy.at_next_commit(AtCommit::CutAfter);
    let out = put(&store, b"committed");
    assert_eq!(proxy.cuts(), 1, "the commit was cut");
    assert_eq!(out, Ok(()), "it committed, so commit says so");
    assert!(has(&store, b"committed"));

    // The connection fails before the server has the COMMIT.
    proxy.at_next_commit(AtCommit::CutBefore);
    let out = put(&store, b"rolled back");
    assert_eq!(proxy.cuts(), 2, "the commit was cut");
    let e = out.expect_err("it did not commit, so commit fails");
    assert_eq!(e.kind(), StoreErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains("nothing was applied"), "{e}");
    assert!(!has(&store, b"rolled back"));

    // And the store goes on.
    put(&store, b"after").unwrap();
    assert!(has(&store, b"after"));
}

#[test]
fn a_commit_after_a_statement_lost_its_connection_is_unavailable() {
    let Some((store, proxy)) = through_proxy("aborted", WAIT) else {
        return;
    };
    put(&store, b"warm").unwrap();
    let mut w = store.begin_write().unwrap();
    w.put(Table::Grants, b"first", b"v").unwrap();
    // The database goes away in the middle of the transaction (a restart).
    proxy.cut_all();
    let e = w
        .put(Table::Grants, b"second", b"v")
        .expect_err("the connection is gone");
    assert_eq!(e.kind(), StoreErrorKind::Unavailable, "{e}");
    // The caller commits what it has (a writer commits whatever the
    // operation answered): the answer is the failure that aborted the
    // transaction, transient, not an internal error.
    let e = w
        .commit()
        .expect_err("an aborted transaction never commits");
    assert_eq!(e.kind(), StoreErrorKind::Unavailable, "{e}");
    assert!(!has(&store, b"first"));
    put(&store, b"after").unwrap();
}
