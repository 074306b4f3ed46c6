//! The store contract, written once and run on every store.

use std::ops::Bound::{self, Excluded, Included, Unbounded};

use portcullis::store::{
    ReadTransaction, Store, StoreErrorKind, Table, WriteTransaction, prefix_end,
};

use crate::on_every_store;

fn put<S: Store>(store: &S, table: Table, key: &[u8], value: &[u8]) {
    let mut w = store.begin_write().unwrap();
    w.put(table, key, value).unwrap();
    w.commit().unwrap();
}

fn get<S: Store>(store: &S, table: Table, key: &[u8]) -> Option<Vec<u8>> {
    store.begin_read().unwrap().get(table, key).unwrap()
}

fn keys<S: Store>(
    store: &S,
    table: Table,
    start: Bound<&[u8]>,
    end: Bound<&[u8]>,
    limit: usize,
) -> Vec<Vec<u8>> {
    let r = store.begin_read().unwrap();
    r.range(table, start, end, limit)
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect()
}

fn reads_see_own_writes_before_commit<S: Store>(store: &S) {
    let mut w = store.begin_write().unwrap();
    w.put(Table::Grants, b"g1", b"one").unwrap();
    assert_eq!(
        w.get(Table::Grants, b"g1").unwrap().as_deref(),
        Some(&b"one"[..])
    );
    w.put(Table::Grants, b"g1", b"two").unwrap();
    assert_eq!(
        w.get(Table::Grants, b"g1").unwrap().as_deref(),
        Some(&b"two"[..])
    );
    assert_eq!(
        w.range(Table::Grants, Unbounded, Unbounded, 10)
            .unwrap()
            .len(),
        1
    );
    assert!(w.delete(Table::Grants, b"g1").unwrap());
    assert!(!w.delete(Table::Grants, b"g1").unwrap());
    assert_eq!(w.get(Table::Grants, b"g1").unwrap(), None);
    w.put(Table::Grants, b"g2", b"kept").unwrap();
    w.commit().unwrap();
    assert_eq!(get(store, Table::Grants, b"g1"), None);
    assert_eq!(
        get(store, Table::Grants, b"g2").as_deref(),
        Some(&b"kept"[..])
    );
}

fn dropping_a_write_changes_nothing<S: Store>(store: &S) {
    put(store, Table::Sites, b"s", b"before");
    put(store, Table::Codes, b"c", b"code");
    {
        let mut w = store.begin_write().unwrap();
        w.put(Table::Sites, b"s", b"after").unwrap();
        w.put(Table::Sites, b"new", b"x").unwrap();
        w.delete(Table::Codes, b"c").unwrap();
        w.put(Table::Sites, b"s", b"after again").unwrap();
        // dropped without commit
    }
    assert_eq!(
        get(store, Table::Sites, b"s").as_deref(),
        Some(&b"before"[..])
    );
    assert_eq!(get(store, Table::Sites, b"new"), None);
    assert_eq!(
        get(store, Table::Codes, b"c").as_deref(),
        Some(&b"code"[..])
    );
}

fn a_panic_inside_a_write_changes_nothing<S: Store + Sync>(store: &S) {
    put(store, Table::Meta, b"k", b"v");
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut w = store.begin_write().unwrap();
        w.put(Table::Meta, b"k", b"half").unwrap();
        panic!("operation failed halfway");
    }));
    assert!(result.is_err());
    assert_eq!(get(store, Table::Meta, b"k").as_deref(), Some(&b"v"[..]));
    put(store, Table::Meta, b"k", b"still writable");
    assert_eq!(
        get(store, Table::Meta, b"k").as_deref(),
        Some(&b"still writable"[..])
    );
}

fn tables_are_separate<S: Store>(store: &S) {
    for (i, table) in Table::ALL.iter().enumerate() {
        put(store, *table, b"same key", &[i as u8]);
    }
    for (i, table) in Table::ALL.iter().enumerate() {
        assert_eq!(
            get(store, *table, b"same key"),
            Some(vec![i as u8]),
            "{table:?}"
        );
    }
}

fn ranges_are_ordered_bounded_and_limited<S: Store>(store: &S) {
    let mut w = store.begin_write().unwrap();
    for k in [&b"b"[..], b"a", b"ab", b"b\x00", b"\xff", b"c", b"", b"aa"] {
        w.put(Table::Expiry, k, b"v").unwrap();
    }
    w.commit().unwrap();
    let all = keys(store, Table::Expiry, Unbounded, Unbounded, usize::MAX);
    let expected: Vec<Vec<u8>> = [&b""[..], b"a", b"aa", b"ab", b"b", b"b\x00", b"c", b"\xff"]
        .iter()
        .map(|k| k.to_vec())
        .collect();
    assert_eq!(all, expected);
    assert_eq!(
        keys(store, Table::Expiry, Unbounded, Unbounded, 3),
        expected[..3].to_vec()
    );
    assert_eq!(
        keys(store, Table::Expiry, Included(b"a"), Excluded(b"b"), 10),
        expected[1..4].to_vec()
    );
    assert_eq!(
        keys(store, Table::Expiry, Excluded(b"a"), Included(b"b"), 10),
        expected[2..5].to_vec()
    );
    assert_eq!(
        keys(store, Table::Expiry, Included(b"b"), Unbounded, 2),
        expected[4..6].to_vec()
    );
    let end = prefix_end(b"a").unwrap();
    assert_eq!(
        keys(store, Table::Expiry, Included(b"a"), Excluded(&end), 10),
        expected[1..4].to_vec()
    );
    assert_eq!(
        keys(store, Table::Expiry, Unbounded, Unbounded, 0),
        Vec::<Vec<u8>>::new()
    );
    // Empty and inverted ranges answer nothing rather than panicking.
    assert!(keys(store, Table::Expiry, Included(b"c"), Excluded(b"a"), 10).is_empty());
    assert!(keys(store, Table::Expiry, Excluded(b"b"), Excluded(b"b"), 10).is_empty());
    assert_eq!(
        keys(store, Table::Expiry, Included(b"b"), Included(b"b"), 10),
        vec![b"b".to_vec()]
    );
}

fn holds_a_hundred_thousand_keys<S: Store>(store: &S) {
    const N: u32 = 100_000;
    let mut w = store.begin_write().unwrap();
    for i in 0..N {
        w.put(Table::Grants, &i.to_be_bytes(), &i.to_le_bytes())
            .unwrap();
    }
    w.commit().unwrap();
    let r = store.begin_read().unwrap();
    let (mut seen, mut cursor) = (0u32, None::<Vec<u8>>);
    loop {
        let start = cursor.as_deref().map_or(Unbounded, Excluded);
        let page = r.range(Table::Grants, start, Unbounded, 4_096).unwrap();
        let Some((last, _)) = page.last() else { break };
        for (k, v) in &page {
            assert_eq!(k.as_slice(), seen.to_be_bytes());
            assert_eq!(v.as_slice(), seen.to_le_bytes());
            seen += 1;
        }
        cursor = Some(last.clone());
    }
    assert_eq!(seen, N);
    assert_eq!(
        r.get(Table::Grants, &77_777u32.to_be_bytes()).unwrap(),
        Some(77_777u32.to_le_bytes().to_vec())
    );
}

fn holds_a_one_mebibyte_value<S: Store>(store: &S) {
    let value: Vec<u8> = (0..1024 * 1024u32).map(|i| (i * 31 % 251) as u8).collect();
    put(store, Table::Requests, b"big", &value);
    assert_eq!(get(store, Table::Requests, b"big"), Some(value));
}

/// Writers are serialised, or a writer that lost the race is told so with
/// [`StoreErrorKind::Conflict`] and applies nothing (the contract's two
/// kinds of store): retrying on a conflict, no increment is lost.
fn racing_writers_lose_no_update<S: Store + Sync>(store: &S) {
    const PER_THREAD: u64 = 10_000;
    fn increment<S: Store>(store: &S) -> Result<(), portcullis::store::StoreError> {
        let mut w = store.begin_write()?;
        let n = u64::from_be_bytes(w.get(Table::Meta, b"counter")?.unwrap().try_into().unwrap());
        w.put(Table::Meta, b"counter", &(n + 1).to_be_bytes())?;
        w.commit()
    }
    put(store, Table::Meta, b"counter", &0u64.to_be_bytes());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..PER_THREAD {
                    loop {
                        match increment(store) {
                            Ok(()) => break,
                            Err(e) if e.kind() == StoreErrorKind::Conflict => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            });
        }
    });
    assert_eq!(
        get(store, Table::Meta, b"counter"),
        Some((2 * PER_THREAD).to_be_bytes().to_vec())
    );
}

fn a_read_transaction_is_a_snapshot<S: Store + Sync>(store: &S) {
    put(store, Table::Tabs, b"a", b"1");
    put(store, Table::Tabs, b"b", b"1");
    // A writer on another thread updates both keys in one transaction.
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut w = store.begin_write().unwrap();
            w.put(Table::Tabs, b"a", b"2").unwrap();
            w.put(Table::Tabs, b"b", b"2").unwrap();
            w.commit().unwrap();
        });
    });
    let r = store.begin_read().unwrap();
    assert_eq!(
        r.get(Table::Tabs, b"a").unwrap(),
        r.get(Table::Tabs, b"b").unwrap()
    );
}

/// A read transaction begun after a commit returned sees that commit:
/// a new value, another, and a delete. Sites are a table a store may keep
/// in memory (PostgreSQL's read cache) or share a snapshot of (redb):
/// neither may answer a read begun after a commit from before it. (No read
/// transaction is held across the writes: the memory stores' readers hold
/// off writers.)
fn a_read_begun_after_a_commit_sees_it<S: Store>(store: &S) {
    let read = |store: &S| {
        let r = store.begin_read().unwrap();
        r.get(Table::Sites, b"s").unwrap()
    };
    for value in [&b"1"[..], b"2", b"3"] {
        put(store, Table::Sites, b"s", value);
        assert_eq!(read(store).as_deref(), Some(value));
    }
    let mut w = store.begin_write().unwrap();
    w.delete(Table::Sites, b"s").unwrap();
    w.commit().unwrap();
    assert_eq!(read(store), None);
}

/// A rollback undoes exactly the writes after its savepoint — puts over
/// old values, new keys and deletes — and the transaction goes on.
fn a_rollback_undoes_only_the_writes_after_its_savepoint<S: Store>(store: &S) {
    put(store, Table::Grants, b"a", b"1");
    put(store, Table::Grants, b"c", b"kept");
    let mut w = store.begin_write().unwrap();
    w.put(Table::Grants, b"before", b"x").unwrap();
    let outer = w.savepoint().unwrap();
    w.put(Table::Grants, b"a", b"2").unwrap();
    w.put(Table::Codes, b"b", b"1").unwrap();
    assert!(w.delete(Table::Grants, b"c").unwrap());
    let inner = w.savepoint().unwrap();
    w.put(Table::Grants, b"d", b"1").unwrap();
    w.put(Table::Grants, b"d", b"2").unwrap();
    w.rollback_to(inner).unwrap();
    assert_eq!(w.get(Table::Grants, b"d").unwrap(), None);
    assert_eq!(
        w.get(Table::Grants, b"a").unwrap().as_deref(),
        Some(&b"2"[..])
    );
    w.rollback_to(outer).unwrap();
    assert_eq!(
        w.get(Table::Grants, b"a").unwrap().as_deref(),
        Some(&b"1"[..])
    );
    assert_eq!(w.get(Table::Codes, b"b").unwrap(), None);
    assert_eq!(
        w.get(Table::Grants, b"c").unwrap().as_deref(),
        Some(&b"kept"[..])
    );
    // The savepoint stays usable, and writes after it commit.
    w.put(Table::Grants, b"e", b"1").unwrap();
    w.rollback_to(outer).unwrap();
    w.put(Table::Grants, b"f", b"1").unwrap();
    w.commit().unwrap();
    assert_eq!(
        keys(store, Table::Grants, Unbounded, Unbounded, 10),
        vec![
            b"a".to_vec(),
            b"before".to_vec(),
            b"c".to_vec(),
            b"f".to_vec()
        ]
    );
    assert_eq!(get(store, Table::Grants, b"a").as_deref(), Some(&b"1"[..]));
    assert_eq!(get(store, Table::Codes, b"b"), None);
}

/// One transaction of every kind of call, failing at its `n`-th call for
/// every `n`: the store holds all of it or none of it — none when the
/// failure came before the commit, and either when the commit failed
/// (the commit may have landed; `landing` draws which).
fn a_failure_anywhere_applies_all_or_nothing<S: Store>(store: &S) {
    use crate::failing_store::{FailingStore, dump};
    let failing = FailingStore::new(store);
    put(store, Table::Grants, b"old", b"1");
    put(store, Table::Grants, b"gone", b"1");
    let txn = |s: &FailingStore<&S>| -> Result<(), portcullis::store::StoreError> {
        let mut w = s.begin_write()?;
        w.put(Table::Grants, b"old", b"2")?;
        w.get(Table::Grants, b"old")?;
        w.put(Table::Codes, b"new", b"1")?;
        w.delete(Table::Grants, b"gone")?;
        w.range(Table::Grants, Unbounded, Unbounded, 10)?;
        let mark = w.savepoint()?;
        w.put(Table::Codes, b"undone", b"1")?;
        w.rollback_to(mark)?;
        w.commit()
    };
    let before = dump(store);
    for landing in [None, Some(1), Some(2), Some(3)] {
        if let Some(seed) = landing {
            failing.landing(seed);
        }
        for n in 1.. {
            failing.fail_nth(n);
            let out = txn(&failing);
            let fired = failing.fired() == 1;
            failing.disarm();
            if !fired {
                out.unwrap();
                break;
            }
            assert!(out.is_err());
            let now = dump(store);
            if failing.landed() {
                assert!(now != before, "a landed commit applied nothing");
            } else {
                assert!(now == before, "failure at call {n} applied part");
            }
            // Back to the start for the next failure point.
            put(store, Table::Grants, b"old", b"1");
            put(store, Table::Grants, b"gone", b"1");
            let mut w = store.begin_write().unwrap();
            w.delete(Table::Codes, b"new").unwrap();
            w.commit().unwrap();
            assert!(dump(store) == before);
        }
        let after = dump(store);
        assert_eq!(
            get(store, Table::Grants, b"old").as_deref(),
            Some(&b"2"[..])
        );
        assert_eq!(get(store, Table::Grants, b"gone"), None);
        assert_eq!(get(store, Table::Codes, b"undone"), None);
        assert!(after != before);
        put(store, Table::Grants, b"old", b"1");
        put(store, Table::Grants, b"gone", b"1");
        let mut w = store.begin_write().unwrap();
        w.delete(Table::Codes, b"new").unwrap();
        w.commit().unwrap();
    }
}

on_every_store!(
    a_failure_anywhere_applies_all_or_nothing,
    a_rollback_undoes_only_the_writes_after_its_savepoint,
    reads_see_own_writes_before_commit,
    dropping_a_write_changes_nothing,
    a_panic_inside_a_write_changes_nothing,
    tables_are_separate,
    ranges_are_ordered_bounded_and_limited,
    holds_a_hundred_thousand_keys,
    holds_a_one_mebibyte_value,
    racing_writers_lose_no_update,
    a_read_transaction_is_a_snapshot,
    a_read_begun_after_a_commit_sees_it,
);

mod redb_durability {
    use portcullis::store::{
        Durability, ReadTransaction, RedbStore, Store, Table, WriteTransaction,
    };

    #[test]
    fn a_reopened_file_keeps_every_commit() {
        let db = crate::support::TempRedb::with_durability(Durability::Immediate);
        for i in 0u32..50 {
            let mut w = db.store.begin_write().unwrap();
            w.put(Table::Grants, &i.to_be_bytes(), b"g").unwrap();
            w.commit().unwrap();
        }
        {
            let mut w = db.store.begin_write().unwrap();
            w.put(Table::Grants, b"uncommitted", b"x").unwrap();
        }
        let path = db.path.clone();
        let crate::support::TempRedb { store, dir, .. } = db;
        drop(store);
        let reopened = RedbStore::open(&path).unwrap();
        let r = reopened.begin_read().unwrap();
        let all = r
            .range(
                Table::Grants,
                std::ops::Bound::Unbounded,
                std::ops::Bound::Unbounded,
                100,
            )
            .unwrap();
        assert_eq!(all.len(), 50);
        assert_eq!(r.get(Table::Grants, b"uncommitted").unwrap(), None);
        drop(dir);
    }

    #[test]
    fn a_second_open_of_the_same_file_is_refused_with_context() {
        let db = crate::support::TempRedb::new();
        let err = RedbStore::open(&db.path).unwrap_err();
        assert_eq!(err.kind(), portcullis::store::StoreErrorKind::Unavailable);
        assert_eq!(err.context(), "open database");
    }
}

/// SIGKILL crash torture on redb: a child process commits in a loop and
/// acknowledges each commit on stdout; the parent kills it at random moments
/// and checks the reopened file after every kill.
mod crash {
    use std::io::{BufRead, BufReader};
    use std::ops::Bound::Unbounded;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    use portcullis::store::{
        Durability, ReadTransaction, RedbStore, Store, Table, WriteTransaction,
    };
    use rand::RngExt;

    const CHILD_ENV: &str = "PORTCULLIS_CRASH_CHILD_DB";
    const KILLS: usize = 50;

    /// Each transaction `n` writes `log/n`, then sets both `a` and `b` to `n`:
    /// a partial transaction would show `a != b` or a gap in the log.
    fn commit_one(store: &RedbStore, n: u64) {
        let mut w = store.begin_write().unwrap();
        w.put(Table::Outcomes, &n.to_be_bytes(), &[0xAB; 512])
            .unwrap();
        w.put(Table::Meta, b"a", &n.to_be_bytes()).unwrap();
        w.put(Table::Meta, b"b", &n.to_be_bytes()).unwrap();
        w.commit().unwrap();
    }

    fn read_counter(r: &impl ReadTransaction, key: &[u8]) -> u64 {
        r.get(Table::Meta, key)
            .unwrap()
            .map_or(0, |v| u64::from_be_bytes(v.try_into().unwrap()))
    }

    /// Not a test of its own: the child half of `sigkill_never_loses_an_acknowledged_commit`,
    /// which runs this binary again with the environment variable set. Without
    /// it, it returns at once.
    #[test]
    fn child_process_entry() {
        let Ok(path) = std::env::var(CHILD_ENV) else {
            return;
        };
        let store = RedbStore::open(&path)
            .unwrap()
            .with_durability(Durability::Immediate);
        let mut n = read_counter(&store.begin_read().unwrap(), b"a");
        loop {
            n += 1;
            commit_one(&store, n);
            println!("ack {n}");
        }
    }

    #[test]
    fn sigkill_never_loses_an_acknowledged_commit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("crash.redb");
        drop(RedbStore::open(&path).unwrap());
        let mut rng = crate::support::rng(0xC4A5);
        let exe = std::env::current_exe().unwrap();
        let mut total_acked = 0u64;
        for kill in 0..KILLS {
            let mut child = Command::new(&exe)
                .args([
                    "--exact",
                    "store_contract::crash::child_process_entry",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, &path)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
            // Kill after a random number of acknowledgements, or a random
            // time, whichever the child reaches first.
            let acks_before_kill = rng.random_range(1..40u64);
            let deadline = Instant::now() + Duration::from_millis(rng.random_range(5..200));
            let mut last_ack = None;
            while let Some(Ok(line)) = lines.next() {
                if let Some(n) = line.strip_prefix("ack ") {
                    last_ack = Some(n.parse::<u64>().unwrap());
                    if last_ack.unwrap() % acks_before_kill == 0 || Instant::now() > deadline {
                        break;
                    }
                }
            }
            // Land the kill at a random point inside the next commit.
            std::thread::sleep(Duration::from_micros(rng.random_range(0..3_000)));
            child.kill().unwrap();
            child.wait().unwrap();
            let store = RedbStore::open(&path).unwrap();
            let r = store.begin_read().unwrap();
            let (a, b) = (read_counter(&r, b"a"), read_counter(&r, b"b"));
            assert_eq!(a, b, "kill {kill}: a partial transaction is visible");
            if let Some(acked) = last_ack {
                assert!(
                    a >= acked,
                    "kill {kill}: acknowledged commit {acked} lost (file holds {a})"
                );
                total_acked = total_acked.max(acked);
            }
            let log = r
                .range(Table::Outcomes, Unbounded, Unbounded, usize::MAX)
                .unwrap();
            assert_eq!(
                log.len() as u64,
                a,
                "kill {kill}: the log and the counters disagree"
            );
            assert!(
                log.iter()
                    .enumerate()
                    .all(|(i, (k, _))| k.as_slice() == (i as u64 + 1).to_be_bytes())
            );
        }
        assert!(
            total_acked >= KILLS as u64,
            "the child made too little progress to test anything"
        );
    }

    const GROUP_CHILD_ENV: &str = "PORTCULLIS_GROUP_CRASH_CHILD_DB";
    /// Where each ledger caller's next request id starts, for the child.
    const GROUP_EXEC_ENV: &str = "PORTCULLIS_GROUP_CRASH_EXEC_FROM";
    const CALLERS: u8 = 4;
    /// Callers rotating the refresh token of a grant of their own.
    const ROTATORS: usize = 2;
    /// Callers running executions (begin, one action, its outcome, complete).
    const RUNNERS: usize = 2;
    /// The one action every execution performs.
    const ACTION: (&str, portcullis::ledger::Effect, &str) =
        ("items.list", portcullis::ledger::Effect::Read, "{}");

    /// Caller `t`'s `n`-th operation through the committer: its counter
    /// `c/t` goes to `n` and its log gets `l/t/n`. Applied twice, the
    /// counter would skip or the log would hold `n` for a counter below it.
    fn counter_key(t: u8) -> [u8; 2] {
        [b'c', t]
    }

    fn log_key(t: u8, n: u64) -> Vec<u8> {
        [&[b'l', t][..], &n.to_be_bytes()].concat()
    }

    /// Runner `t`'s `n`-th request id.
    fn exec_id(t: usize, n: u64) -> portcullis::ledger::RequestId {
        portcullis::ledger::RequestId::parse(&format!("{t:08x}-0000-4000-8000-{n:012x}")).unwrap()
    }

    fn exec_params(t: usize, n: u64) -> portcullis::ledger::ExecuteParams {
        portcullis::ledger::ExecuteParams::new(&exec_id(t, n).to_string(), "one read".into(), None)
            .unwrap()
    }

    /// The ledger policy of the crash run: no rate limit (the clock stands
    /// still, so the limiter would refuse everything after the burst).
    fn crash_policy() -> portcullis::Policy {
        let mut p = portcullis::Policy::default();
        p.execute_rate = portcullis::ledger::RateLimit::new(0, 1);
        p
    }

    /// What the parent set up for the child: a site, a client, one grant
    /// with a connected tab for the runners and one grant per rotator, at a
    /// clock that stands still (every operation takes `now`).
    struct Setup {
        now: portcullis::Timestamp,
        site: portcullis::site::SiteId,
        client_id: String,
        access_token: String,
        rotating: Vec<portcullis::grant::GrantId>,
    }

    impl Setup {
        fn file(db: &std::path::Path) -> std::path::PathBuf {
            db.with_extension("setup")
        }

        fn write(&self, db: &std::path::Path) {
            let mut text = format!(
                "{}\n{}\n{}\n{}\n",
                self.now.as_secs(),
                self.site,
                self.client_id,
                self.access_token
            );
            for g in &self.rotating {
                text.push_str(&g.to_string());
                text.push('\n');
            }
            std::fs::write(Self::file(db), text).unwrap();
        }

        fn read(db: &std::path::Path) -> Self {
            let text = std::fs::read_to_string(Self::file(db)).unwrap();
            let mut lines = text.lines();
            let mut next = || lines.next().unwrap().to_owned();
            let now = portcullis::Timestamp::from_secs(next().parse().unwrap());
            let site = portcullis::site::SiteId::parse(&next()).unwrap();
            let (client_id, access_token) = (next(), next());
            let rotating = text
                .lines()
                .skip(4)
                .map(|g| portcullis::grant::GrantId::parse(g).unwrap())
                .collect();
            Self {
                now,
                site,
                client_id,
                access_token,
                rotating,
            }
        }
    }

    /// The refresh token of `grant`'s generation `generation` (the current
    /// one, or an earlier one to show it is spent).
    fn refresh_token_of(grant: &portcullis::grant::Grant, generation: u32) -> String {
        let keyring = crate::oauth::keyring();
        let mut at = grant.clone();
        at.generation = generation;
        at.refresh_token(keyring.verifying_key(&grant.kid).unwrap())
            .expose_secret()
            .to_owned()
    }

    fn refresh_body(client_id: &str, refresh_token: &str) -> String {
        portcullis::form::encode_pairs([
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
            ("client_id", client_id),
        ])
    }

    fn load_grant(
        r: &impl ReadTransaction,
        id: &portcullis::grant::GrantId,
    ) -> portcullis::grant::Grant {
        r.load::<portcullis::grant::Grant>(id.as_bytes())
            .unwrap()
            .expect("the grant exists")
    }

    /// Not a test of its own: the child half of
    /// `sigkill_through_the_group_committer_loses_no_acknowledged_answer`.
    /// Every caller commits through one group committer, as the server's
    /// handlers do, and prints each answer once its commit acknowledged it:
    /// `ack t n` (a counter), `rot t g` (a rotation to generation `g`),
    /// `exec t n ran|stored` (an execution that ran here, or whose stored
    /// result `begin` answered).
    #[test]
    #[allow(
        clippy::too_many_lines,
        reason = "one child process: set-up, then three kinds of callers"
    )]
    fn group_child_process_entry() {
        use std::sync::Arc;

        use portcullis::header::HeaderField;
        use portcullis::ledger::{Action, ActionVerdict, BeginAnswer, Caller, Completion, Report};
        use portcullis::scope::ScopeSet;
        use portcullis::store::GroupCommitter;
        use portcullis::{Engine, Own};

        let Ok(path) = std::env::var(GROUP_CHILD_ENV) else {
            return;
        };
        let exec_from: Vec<u64> = std::env::var(GROUP_EXEC_ENV)
            .unwrap()
            .split(',')
            .map(|n| n.parse().unwrap())
            .collect();
        let setup = Arc::new(Setup::read(std::path::Path::new(&path)));
        let store = Arc::new(
            RedbStore::open(&path)
                .unwrap()
                .with_durability(Durability::Immediate),
        );
        let engine = Arc::new(Engine::new(
            Arc::clone(&store),
            crate::oauth::keyring(),
            crash_policy(),
        ));
        let now = setup.now;
        // What a host does when it starts: the runs the killed process held
        // end (`CONNECTION_LOST`, unknownTail); they never run again.
        let mut from = None;
        loop {
            let done = engine
                .abandon_running(Own, from.as_ref(), now, 256)
                .unwrap();
            match done.next {
                Some(next) => from = Some(next),
                None => break,
            }
        }
        let header = format!("Bearer {}", setup.access_token);
        let principal = Arc::new(
            engine
                .verify_bearer(
                    &setup.site,
                    HeaderField::one(&header),
                    &ScopeSet::new(),
                    now,
                )
                .unwrap(),
        );
        let committer = Arc::new(GroupCommitter::new(Arc::clone(&store)));
        let mut callers: Vec<std::thread::JoinHandle<()>> = (0..CALLERS)
            .map(|t| {
                let c = Arc::clone(&committer);
                std::thread::spawn(move || {
                    loop {
                        let n = c
                            .run(move |txn| {
                                let n = read_counter(&*txn, &counter_key(t)) + 1;
                                txn.put(Table::Meta, &counter_key(t), &n.to_be_bytes())
                                    .unwrap();
                                txn.put(Table::Outcomes, &log_key(t, n), &[0xAB; 256])
                                    .unwrap();
                                n
                            })
                            .unwrap();
                        println!("ack {t} {n}");
                    }
                })
            })
            .collect();
        for (t, grant) in setup.rotating.iter().copied().enumerate() {
            let (c, engine, setup, store) = (
                Arc::clone(&committer),
                Arc::clone(&engine),
                Arc::clone(&setup),
                Arc::clone(&store),
            );
            callers.push(std::thread::spawn(move || {
                let current = load_grant(&store.begin_read().unwrap(), &grant);
                let mut generation = current.generation;
                let mut token = refresh_token_of(&current, generation);
                loop {
                    let body = refresh_body(&setup.client_id, &token);
                    let (e, site) = (Arc::clone(&engine), setup.site.clone());
                    let tokens = c
                        .run(move |txn| {
                            e.token(
                                txn,
                                &site,
                                &body,
                                HeaderField::ABSENT,
                                &mut rand::rng(),
                                now,
                            )
                        })
                        .unwrap()
                        .expect("the current refresh token rotates");
                    generation += 1;
                    token = tokens.refresh_token.expose_secret().to_owned();
                    println!("rot {t} {generation}");
                }
            }));
        }
        for (t, first) in exec_from.iter().copied().enumerate().take(RUNNERS) {
            let (c, engine, principal) = (
                Arc::clone(&committer),
                Arc::clone(&engine),
                Arc::clone(&principal),
            );
            callers.push(std::thread::spawn(move || {
                let action = Arc::new(
                    Action::new(ACTION.0, ACTION.1, "skills:read", ACTION.2.as_bytes()).unwrap(),
                );
                for n in first.. {
                    let (e, p) = (Arc::clone(&engine), Arc::clone(&principal));
                    let begun = c
                        .run(move |txn| {
                            e.begin(txn, &p, &exec_params(t, n), Caller::Client, now.into())
                        })
                        .unwrap();
                    let ticket = match begun {
                        Ok(BeginAnswer::Run(ticket)) => ticket,
                        Ok(BeginAnswer::Stored(_)) => {
                            println!("exec {t} {n} stored");
                            continue;
                        }
                        other => panic!("request {n}: {other:?}"),
                    };
                    let (e, a) = (Arc::clone(&engine), Arc::clone(&action));
                    let verdict = c
                        .run(move |txn| e.authorize_action(txn, ticket, &a, now))
                        .unwrap();
                    let Ok(ActionVerdict::Run(ticket)) = verdict else {
                        panic!("request {n}: {verdict:?}");
                    };
                    let e = Arc::clone(&engine);
                    let ticket = c
                        .run(move |txn| e.record_outcome(txn, ticket, Report::ok("ran"), now))
                        .unwrap()
                        .unwrap();
                    let e = Arc::clone(&engine);
                    c.run(move |txn| {
                        e.complete(txn, ticket, &Completion::Value(serde_json::json!(n)), now)
                    })
                    .unwrap()
                    .unwrap();
                    println!("exec {t} {n} ran");
                }
            }));
        }
        drop(callers);
        loop {
            std::thread::park();
        }
    }

    /// SIGKILL while callers commit through the group committer: plain
    /// counters, refresh rotations and executions of the ledger. After every
    /// reopen no acknowledged answer is lost and nothing happened twice:
    /// every counter's log is exactly `1..=counter` (nothing applied twice or
    /// in part); every grant's generation is at least the last one
    /// acknowledged and never goes back (so no rotated refresh token becomes
    /// valid again), and no grant was revoked (a token used twice would
    /// have been a reuse); every acknowledged execution is stored as
    /// returned with its one outcome, and no request of the runners ever
    /// started a second run (a run a kill cut off ends `CONNECTION_LOST`
    /// when the next host starts, and its id then answers that result). At
    /// the end a spent refresh token is refused and an acknowledged id
    /// answers its stored result. 20 kills here; `PORTCULLIS_CRASH_KILLS`
    /// sets another number.
    #[test]
    #[allow(
        clippy::too_many_lines,
        reason = "one scenario: set-up, the kill loop and its checks, the final checks"
    )]
    fn sigkill_through_the_group_committer_loses_no_acknowledged_answer() {
        use std::sync::Arc;

        use portcullis::header::HeaderField;
        use portcullis::ledger::{BeginAnswer, Caller, End, RequestState};
        use portcullis::token::TokenError;
        use portcullis::{Engine, Own};

        let kills: usize = std::env::var("PORTCULLIS_CRASH_KILLS")
            .ok()
            .and_then(|k| k.parse().ok())
            .unwrap_or(20);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("group-crash.redb");
        let (principal, setup) = {
            let store = Arc::new(RedbStore::open(&path).unwrap());
            let mut l = crate::ledger::Ledger::new(Arc::clone(&store));
            let rotating = (0..ROTATORS)
                .map(|_| {
                    let t = l.w.login();
                    l.w.bearer(&t, "").unwrap().grant
                })
                .collect();
            let setup = Setup {
                now: l.w.now,
                site: l.w.site.clone(),
                client_id: l.w.client_id.clone(),
                access_token: l.tokens.access_token.expose_secret().to_owned(),
                rotating,
            };
            (l.p.clone(), setup)
        };
        setup.write(&path);
        let mut rng = crate::support::rng(0x6C0A);
        let exe = std::env::current_exe().unwrap();
        let mut acked_total = 0u64;
        let mut generations: Vec<u32> = {
            let store = RedbStore::open(&path).unwrap();
            let r = store.begin_read().unwrap();
            setup
                .rotating
                .iter()
                .map(|g| load_grant(&r, g).generation)
                .collect()
        };
        let first_generations = generations.clone();
        // Per runner: the last id acknowledged, and the first not yet known
        // to exist.
        let mut executed = [0u64; RUNNERS];
        let mut unseen = [1u64; RUNNERS];
        let (mut rotations, mut runs) = (0u64, 0u64);
        for kill in 0..kills {
            let from: Vec<String> = executed.iter().map(|n| (n + 1).to_string()).collect();
            let mut child = Command::new(&exe)
                .args([
                    "--exact",
                    "store_contract::crash::group_child_process_entry",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(GROUP_CHILD_ENV, &path)
                .env(GROUP_EXEC_ENV, from.join(","))
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
            let acks_before_kill = rng.random_range(1..60u64);
            let deadline = Instant::now() + Duration::from_millis(rng.random_range(5..200));
            let mut acked = [0u64; CALLERS as usize];
            let mut rotated = generations.clone();
            let mut ran: Vec<(usize, u64)> = Vec::new();
            let mut seen = 0;
            while let Some(Ok(line)) = lines.next() {
                let mut parts = line.split(' ');
                let (kind, t, n) = (parts.next(), parts.next(), parts.next());
                let (Some(kind), Some(t), Some(n)) = (kind, t, n) else {
                    continue;
                };
                let (Ok(t), Ok(n)) = (t.parse::<usize>(), n.parse::<u64>()) else {
                    continue;
                };
                match kind {
                    "ack" => acked[t] = acked[t].max(n),
                    "rot" => {
                        rotated[t] = rotated[t].max(u32::try_from(n).unwrap());
                        rotations += 1;
                    }
                    "exec" => {
                        executed[t] = executed[t].max(n);
                        if parts.next() == Some("ran") {
                            ran.push((t, n));
                            runs += 1;
                        }
                    }
                    _ => continue,
                }
                seen += 1;
                if seen % acks_before_kill == 0 || Instant::now() > deadline {
                    break;
                }
            }
            std::thread::sleep(Duration::from_micros(rng.random_range(0..3_000)));
            child.kill().unwrap();
            child.wait().unwrap();
            let store = Arc::new(RedbStore::open(&path).unwrap());
            let r = store.begin_read().unwrap();
            for t in 0..CALLERS {
                let counter = read_counter(&r, &counter_key(t));
                assert!(
                    counter >= acked[t as usize],
                    "kill {kill}: caller {t}'s acknowledged answer {} lost (file holds {counter})",
                    acked[t as usize]
                );
                let prefix = [b'l', t];
                let end = [b'l', t + 1];
                let mut log = r
                    .range(
                        Table::Outcomes,
                        std::ops::Bound::Included(&prefix[..]),
                        std::ops::Bound::Excluded(&end[..]),
                        usize::MAX,
                    )
                    .unwrap();
                // The ledger's outcomes share the table, under longer keys.
                log.retain(|(k, _)| k.len() == 10);
                assert_eq!(log.len() as u64, counter, "kill {kill}: caller {t}'s log");
                assert!(
                    log.iter()
                        .enumerate()
                        .all(|(i, (k, _))| *k == log_key(t, i as u64 + 1)),
                    "kill {kill}: caller {t}'s log has a gap or a repeat"
                );
            }
            for (t, g) in setup.rotating.iter().enumerate() {
                let grant = load_grant(&r, g);
                assert!(
                    grant.revoked.is_none(),
                    "kill {kill}: rotator {t}'s grant was revoked: a token was used twice"
                );
                assert!(
                    grant.generation >= rotated[t],
                    "kill {kill}: rotator {t}'s acknowledged generation {} lost (file holds {})",
                    rotated[t],
                    grant.generation
                );
                assert!(
                    grant.generation >= generations[t],
                    "kill {kill}: rotator {t}'s generation went back"
                );
                generations[t] = grant.generation;
            }
            drop(r);
            let engine = Engine::new(Arc::clone(&store), crate::oauth::keyring(), crash_policy());
            let record = |t: usize, n: u64| {
                engine
                    .execution_request(&principal, &exec_id(t, n))
                    .unwrap()
            };
            for &(t, n) in &ran {
                let rec = record(t, n).unwrap_or_else(|| {
                    panic!("kill {kill}: runner {t}'s acknowledged request {n} lost")
                });
                assert!(
                    matches!(
                        rec.state(),
                        RequestState::Done {
                            end: End::Returned(_),
                            unknown_tail: false,
                            ..
                        }
                    ) && rec.outcomes() == 1,
                    "kill {kill}: runner {t}'s request {n}: {:?}",
                    rec.state()
                );
            }
            for t in 0..RUNNERS {
                assert!(
                    executed[t] < unseen[t] || record(t, executed[t]).is_some(),
                    "kill {kill}: runner {t}'s acknowledged request {} lost",
                    executed[t]
                );
                // Every request stored since the last look: one run, at
                // most one outcome.
                let mut n = unseen[t].min(executed[t] + 1);
                while let Some(rec) = record(t, n) {
                    assert_eq!(
                        (rec.run(), rec.outcomes() <= 1),
                        (1, true),
                        "kill {kill}: runner {t}'s request {n} ran twice"
                    );
                    n += 1;
                }
                unseen[t] = unseen[t].max(n);
            }
            acked_total += acked.iter().sum::<u64>().min(1);
        }
        assert!(
            acked_total >= kills as u64 / 2,
            "the child made too little progress to test anything"
        );
        assert!(
            rotations > 0 && runs > 0,
            "no rotation ({rotations}) or no execution ({runs}) was acknowledged"
        );
        println!(
            "{kills} kills: {rotations} rotations and {runs} executions acknowledged, \
             final generations {generations:?}, last request ids {executed:?}"
        );
        // A spent refresh token stays spent (judged under strict rotation,
        // since the child's clock stood still inside the reuse grace); an
        // acknowledged id is answered from the ledger, never run again.
        let store = Arc::new(RedbStore::open(&path).unwrap());
        let mut strict = crash_policy();
        strict.refresh_reuse_grace = Duration::ZERO;
        let engine = Engine::new(Arc::clone(&store), crate::oauth::keyring(), strict);
        for (t, g) in setup.rotating.iter().enumerate() {
            if generations[t] == first_generations[t] {
                continue;
            }
            let grant = load_grant(&store.begin_read().unwrap(), g);
            let spent = refresh_token_of(&grant, grant.generation - 1);
            let answer = engine.token(
                Own,
                &setup.site,
                &refresh_body(&setup.client_id, &spent),
                HeaderField::ABSENT,
                &mut rand::rng(),
                setup.now,
            );
            assert_eq!(answer.unwrap_err(), TokenError::InvalidGrant);
        }
        for (t, &last) in executed.iter().enumerate() {
            if last == 0 {
                continue;
            }
            let answer = engine.begin(
                Own,
                &principal,
                &exec_params(t, last),
                Caller::Client,
                setup.now.into(),
            );
            assert!(
                matches!(answer, Ok(BeginAnswer::Stored(_))),
                "runner {t}'s request {last}: {answer:?}"
            );
        }
    }
}

/// What only the PostgreSQL store has: a versioned schema that other
/// instances share, and a connection string that carries a password.
mod postgres_schema {
    use portcullis::store::{ReadTransaction, Store, StoreErrorKind, Table, WriteTransaction};

    use crate::support::TempPostgres;

    fn client(db: &TempPostgres) -> postgres::Client {
        postgres::Client::connect(db.url(), postgres::NoTls).unwrap()
    }

    #[test]
    fn a_second_instance_shares_the_tables_and_the_version_row() {
        let Some(db) = TempPostgres::new() else {
            return;
        };
        let mut w = db.store.begin_write().unwrap();
        w.put(Table::Sites, b"s", b"1").unwrap();
        w.commit().unwrap();
        let other = db.reopen().unwrap();
        assert_eq!(
            other.begin_read().unwrap().get(Table::Sites, b"s").unwrap(),
            Some(b"1".to_vec())
        );
        let schema = db.store.schema();
        let rows = client(&db)
            .query(&format!("SELECT version FROM {schema}.schema_version"), &[])
            .unwrap();
        let versions: Vec<i32> = rows.iter().map(|r| r.get(0)).collect();
        assert_eq!(versions, [portcullis_store_postgres::SCHEMA_VERSION]);
    }

    #[test]
    fn instances_opening_a_fresh_schema_together_all_succeed() {
        let Some(db) = TempPostgres::new() else {
            return;
        };
        let schema = db.store.schema();
        client(&db)
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .unwrap();
        std::thread::scope(|s| {
            let opens: Vec<_> = (0..4).map(|_| s.spawn(|| db.reopen())).collect();
            for open in opens {
                assert!(open.join().unwrap().is_ok());
            }
        });
        let mut w = db.store.begin_write().unwrap();
        w.put(Table::Grants, b"g", b"1").unwrap();
        w.commit().unwrap();
    }

    #[test]
    fn a_schema_newer_than_this_build_is_refused() {
        let Some(db) = TempPostgres::new() else {
            return;
        };
        let schema = db.store.schema();
        client(&db)
            .batch_execute(&format!(
                "UPDATE {schema}.schema_version SET version = version + 1"
            ))
            .unwrap();
        let err = db.reopen().unwrap_err();
        assert_eq!(err.kind(), StoreErrorKind::Unavailable);
        assert!(err.to_string().contains("newer than this build"), "{err}");
    }

    #[test]
    fn the_password_never_shows() {
        let Some(db) = TempPostgres::new() else {
            return;
        };
        let config: postgres::Config = db.url().parse().unwrap();
        let password = String::from_utf8(config.get_password().unwrap().to_vec()).unwrap();
        assert!(!format!("{:?}", db.store).contains(&password));
        let wrong = db.url().replacen(&password, "not-the-password", 1);
        let err = portcullis_store_postgres::PostgresStore::open(&wrong).unwrap_err();
        assert_eq!(err.kind(), StoreErrorKind::Unavailable);
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains("not-the-password"), "{shown}");
        assert!(!shown.contains(&password), "{shown}");
    }
}
