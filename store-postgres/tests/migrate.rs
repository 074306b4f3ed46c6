//! Schema migrations: a database written by an earlier build opens under
//! this one and gains what this one needs (version 3: the `grant_apps`
//! table; version 4: the `client_assertions` and `waiting_calls` tables;
//! version 5: the `activity` table; version 6: the `app_views` table),
//! keeping its rows; a database newer than this build is refused.
//!
//! Needs `PORTCULLIS_TEST_POSTGRES_URL`; without it each test says so and
//! passes. Each test uses a schema of its own.
#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed unwrap is a failed test"
)]

use portcullis_core::store::{ReadTransaction as _, Store as _, Table, WriteTransaction as _};
use portcullis_store_postgres::{PostgresConfig, SCHEMA_VERSION};

#[test]
fn a_version_2_database_gains_the_later_tables_and_keeps_its_rows() {
    let Ok(url) = std::env::var("PORTCULLIS_TEST_POSTGRES_URL") else {
        eprintln!("PORTCULLIS_TEST_POSTGRES_URL not set: migration test skipped");
        return;
    };
    let schema = format!("migrate_v2_{}", std::process::id());
    let config = || {
        PostgresConfig::parse(&url)
            .unwrap()
            .schema(&schema)
            .unwrap()
    };
    let mut admin = PostgresConfig::parse(&url).unwrap().connect().unwrap();
    admin
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .unwrap();
    // A database as version 2 left it: every table but grant_apps,
    // client_assertions, waiting_calls, activity and app_views.
    {
        let store = config().open().unwrap();
        let mut w = store.begin_write().unwrap();
        w.put(Table::Grants, b"g", b"kept").unwrap();
        w.commit().unwrap();
    }
    admin
        .batch_execute(&format!(
            "DROP TABLE {schema}.grant_apps; DROP TABLE {schema}.client_assertions; \
             DROP TABLE {schema}.waiting_calls; DROP TABLE {schema}.activity; \
             DROP TABLE {schema}.app_views; \
             UPDATE {schema}.schema_version SET version = 2;"
        ))
        .unwrap();
    // This build migrates it.
    let store = config().open().unwrap();
    let version: i32 = admin
        .query_one(&format!("SELECT version FROM {schema}.schema_version"), &[])
        .unwrap()
        .get(0);
    assert_eq!(version, SCHEMA_VERSION);
    assert_eq!(SCHEMA_VERSION, 6);
    let mut w = store.begin_write().unwrap();
    w.put(Table::GrantApps, b"g1", b"apps").unwrap();
    w.put(Table::ClientAssertions, b"j1", b"").unwrap();
    w.put(Table::WaitingCalls, b"w1", b"request").unwrap();
    w.put(Table::Activity, b"a1", b"entry").unwrap();
    w.put(Table::AppViews, b"v1", b"view").unwrap();
    w.commit().unwrap();
    let r = store.begin_read().unwrap();
    assert_eq!(
        r.get(Table::Grants, b"g").unwrap().as_deref(),
        Some(&b"kept"[..])
    );
    assert_eq!(
        r.get(Table::GrantApps, b"g1").unwrap().as_deref(),
        Some(&b"apps"[..])
    );
    assert_eq!(
        r.get(Table::ClientAssertions, b"j1").unwrap().as_deref(),
        Some(&b""[..])
    );
    assert_eq!(
        r.get(Table::WaitingCalls, b"w1").unwrap().as_deref(),
        Some(&b"request"[..])
    );
    assert_eq!(
        r.get(Table::Activity, b"a1").unwrap().as_deref(),
        Some(&b"entry"[..])
    );
    assert_eq!(
        r.get(Table::AppViews, b"v1").unwrap().as_deref(),
        Some(&b"view"[..])
    );
    drop(r);
    drop(store);
    // A database newer than this build is refused.
    admin
        .batch_execute(&format!(
            "UPDATE {schema}.schema_version SET version = {};",
            SCHEMA_VERSION + 1
        ))
        .unwrap();
    assert!(config().open().is_err());
    admin
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .unwrap();
}
