//! The read cache ([`PostgresConfig::read_cache`]): rows a bearer check
//! reads are served from memory, dropped when any writer changes them
//! (the trigger's `NOTIFY`), never served while the listener is not
//! connected, and never longer than the TTL even when a change's
//! notification is lost.
//!
//! Needs `PORTCULLIS_TEST_POSTGRES_URL`; without it each test says so and
//! passes. Each test uses a schema of its own.
#![allow(
    clippy::unwrap_used,
    reason = "tests: a failed unwrap is a failed test"
)]

use std::time::{Duration, Instant};

use portcullis_core::store::{ReadTransaction as _, Store as _, Table, WriteTransaction as _};
use portcullis_store_postgres::{PostgresConfig, PostgresStore};

/// A store with the cache (`ttl`), one without (another writer, as
/// another instance or the admin CLI is), and a plain connection; the
/// cached store's listener is connected.
struct Setup {
    cached: PostgresStore,
    other: PostgresStore,
    admin: postgres::Client,
    schema: String,
    app: String,
}

impl Setup {
    fn new(test: &str, ttl: Duration) -> Option<Self> {
        let Ok(url) = std::env::var("PORTCULLIS_TEST_POSTGRES_URL") else {
            eprintln!("PORTCULLIS_TEST_POSTGRES_URL not set: {test} skipped");
            return None;
        };
        let schema = format!("cache_{test}_{}", std::process::id());
        let mut admin = PostgresConfig::parse(&url).unwrap().connect().unwrap();
        admin
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .unwrap();
        let app = format!("cache_{test}_{}", std::process::id());
        let open = |url: &str| PostgresConfig::parse(url).unwrap().schema(&schema).unwrap();
        let other = open(&url).open().unwrap();
        let cached = open(&format!("{url}?application_name={app}"))
            .read_cache(ttl)
            .open()
            .unwrap();
        let setup = Self {
            cached,
            other,
            admin,
            schema,
            app,
        };
        setup.until("the listener connects", |s| {
            s.cached.cache_stats().is_some_and(|c| c.listening)
        });
        Some(setup)
    }

    fn until(&self, what: &str, done: impl Fn(&Self) -> bool) -> Duration {
        let began = Instant::now();
        while !done(self) {
            assert!(began.elapsed() < Duration::from_secs(10), "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
        began.elapsed()
    }

    fn write(&self, key: &[u8], value: Option<&[u8]>) {
        let mut w = self.other.begin_write().unwrap();
        match value {
            Some(v) => w.put(Table::Grants, key, v).unwrap(),
            None => drop(w.delete(Table::Grants, key).unwrap()),
        }
        w.commit().unwrap();
    }

    /// [`Setup::write`], then waits until the cached store has handled
    /// its notification (a row read before that is dropped by it).
    fn write_announced(&self, key: &[u8], value: Option<&[u8]>) {
        let dropped = self.cached.cache_stats().unwrap().dropped;
        self.write(key, value);
        self.until("the notification handled", |s| {
            s.cached.cache_stats().unwrap().dropped > dropped
        });
    }

    fn read(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.cached
            .begin_read()
            .unwrap()
            .get(Table::Grants, key)
            .unwrap()
    }

    fn hits(&self) -> u64 {
        self.cached.cache_stats().unwrap().hits
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = self
            .admin
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
    }
}

#[test]
fn a_cached_row_is_served_from_memory_and_dropped_when_any_writer_changes_it() {
    // A TTL far beyond the test: only the notifications can explain a
    // change seen.
    let Some(s) = Setup::new("notify", Duration::from_mins(10)) else {
        return;
    };
    s.write_announced(b"g1", Some(b"v1"));
    assert_eq!(s.read(b"g1").as_deref(), Some(&b"v1"[..]));
    let hits = s.hits();
    assert_eq!(s.read(b"g1").as_deref(), Some(&b"v1"[..]));
    assert_eq!(s.hits(), hits + 1, "the second read came from memory");

    // Changed, deleted, and written again by the other store: each seen
    // within a notification's delay.
    for (what, value) in [
        ("an update", Some(&b"v2"[..])),
        ("a delete", None),
        ("an insert of a row cached as absent", Some(&b"v3"[..])),
    ] {
        let dropped = s.cached.cache_stats().unwrap().dropped;
        s.write(b"g1", value);
        let took = s.until(what, |s| s.read(b"g1").as_deref() == value);
        assert!(took < Duration::from_secs(1), "{what} seen after {took:?}");
        s.until("its notification handled", |s| {
            s.cached.cache_stats().unwrap().dropped > dropped
        });
        let _ = s.read(b"g1");
        let hits = s.hits();
        let _ = s.read(b"g1");
        assert_eq!(s.hits(), hits + 1, "{what}: cached again");
    }
    // Write transactions never read the cache.
    let w = s.cached.begin_write().unwrap();
    assert_eq!(
        w.get(Table::Grants, b"g1").unwrap().as_deref(),
        Some(&b"v3"[..])
    );
}

#[test]
fn with_the_listener_cut_nothing_is_served_from_memory_until_it_listens_again() {
    let Some(mut s) = Setup::new("cut", Duration::from_mins(10)) else {
        return;
    };
    s.write_announced(b"g1", Some(b"v1"));
    let _ = s.read(b"g1");
    let listens = s.cached.cache_stats().unwrap().listens;
    let cut = s
        .admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = $1 AND query = 'LISTEN portcullis_rows'",
            &[&s.app],
        )
        .unwrap()
        .len();
    assert_eq!(cut, 1, "the listener found");
    s.until("the cut is noticed", |s| {
        !s.cached.cache_stats().unwrap().listening
    });
    // A change made now is announced to no one; it is read all the same.
    s.write(b"g1", Some(b"v2"));
    let hits = s.hits();
    assert_eq!(s.read(b"g1").as_deref(), Some(&b"v2"[..]));
    assert_eq!(s.read(b"g1").as_deref(), Some(&b"v2"[..]));
    assert_eq!(s.hits(), hits, "nothing from memory while not listening");
    // Listening again, it keeps rows again (all from after the cut).
    s.until("the listener reconnects", |s| {
        s.cached
            .cache_stats()
            .is_some_and(|c| c.listening && c.listens > listens)
    });
    let _ = s.read(b"g1");
    let hits = s.hits();
    assert_eq!(s.read(b"g1").as_deref(), Some(&b"v2"[..]));
    assert_eq!(s.hits(), hits + 1);
}

#[test]
fn a_change_whose_notification_is_lost_is_served_no_longer_than_the_ttl() {
    let ttl = Duration::from_millis(400);
    let Some(mut s) = Setup::new("ttl", ttl) else {
        return;
    };
    s.write_announced(b"g1", Some(b"v1"));
    let _ = s.read(b"g1");
    // The announcement is lost without the listener noticing (as on a
    // network that drops packets): the trigger is off for this change.
    s.admin
        .batch_execute(&format!(
            "ALTER TABLE {}.grants DISABLE TRIGGER announce_row",
            s.schema
        ))
        .unwrap();
    let changed = Instant::now();
    s.write(b"g1", Some(b"v2"));
    let took = s.until("the change is read", |s| {
        s.read(b"g1").as_deref() == Some(&b"v2"[..])
    });
    let since = changed.elapsed();
    assert!(
        since <= ttl + Duration::from_millis(100),
        "the old row was served {since:?} after the change (bound {ttl:?}; read loop {took:?})"
    );
}

#[test]
fn a_store_reads_its_own_writes_at_once() {
    let Some(s) = Setup::new("own", Duration::from_mins(10)) else {
        return;
    };
    // Absent, and kept as absent.
    assert_eq!(s.read(b"g2"), None);
    let hits = s.hits();
    assert_eq!(s.read(b"g2"), None);
    assert_eq!(s.hits(), hits + 1);
    // Written through the cached store itself: its next read sees the
    // write at once, not a notification's delay later.
    for value in [&b"a"[..], &b"b"[..]] {
        let mut w = s.cached.begin_write().unwrap();
        w.put(Table::Grants, b"g2", value).unwrap();
        w.commit().unwrap();
        assert_eq!(s.read(b"g2").as_deref(), Some(value));
    }
    let mut w = s.cached.begin_write().unwrap();
    assert!(w.delete(Table::Grants, b"g2").unwrap());
    w.commit().unwrap();
    assert_eq!(s.read(b"g2"), None);
}
