//! The stores the tests serve from: redb in a temporary directory, and a
//! fresh PostgreSQL schema when `PORTCULLIS_TEST_POSTGRES_URL` is set.

use std::path::PathBuf;
use std::sync::Arc;

use portcullis_store_postgres::{PostgresConfig, PostgresStore};
use portcullis_store_redb::RedbStore;

/// A redb file in a temporary directory, deleted when dropped.
pub(crate) struct TempRedb {
    pub(crate) path: PathBuf,
    _dir: tempfile::TempDir,
}

impl TempRedb {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temp dir");
        Self {
            path: dir.path().join("portcullis.redb"),
            _dir: dir,
        }
    }

    /// The store on the file (redb locks it to one handle at a time).
    pub(crate) fn store(&self) -> RedbStore {
        RedbStore::open(&self.path).expect("open redb")
    }

    /// The store on the file once the previous handle is gone (its last
    /// holders, tasks of a stopped app, may take a moment to end).
    pub(crate) async fn store_when_free(&self) -> RedbStore {
        let started = std::time::Instant::now();
        loop {
            match RedbStore::open(&self.path) {
                Ok(store) => return store,
                Err(e) => assert!(
                    started.elapsed() < std::time::Duration::from_secs(10),
                    "the store was never released: {e}"
                ),
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// The variable naming the PostgreSQL cluster the scenarios also run on
/// (`store-postgres/test-cluster.sh start` prints a URL for it).
pub(crate) const POSTGRES_URL: &str = "PORTCULLIS_TEST_POSTGRES_URL";

/// A PostgreSQL store in a schema of its own, so tests run in parallel on
/// one database. [`TempPostgres::drop_schema`] removes it.
pub(crate) struct TempPostgres {
    store: Arc<PostgresStore>,
    config: PostgresConfig,
}

impl TempPostgres {
    /// A fresh schema on the cluster named by [`POSTGRES_URL`], or `None`
    /// (and a note that the test is skipped) when it is not set.
    pub(crate) async fn new() -> Option<Self> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let Ok(url) = std::env::var(POSTGRES_URL) else {
            eprintln!("skipped on PostgreSQL: {POSTGRES_URL} is not set");
            return None;
        };
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let schema = format!("axum_test_{}_{n}", std::process::id());
        // The driver runs a runtime of its own: connect off the async workers.
        tokio::task::spawn_blocking(move || {
            let config = PostgresConfig::parse(&url)
                .and_then(|c| c.schema(&schema))
                .map_or_else(|e| panic!("{POSTGRES_URL}: {e}"), |c| c.pool_size(8));
            let store = config
                .clone()
                .open()
                .unwrap_or_else(|e| panic!("open PostgreSQL ({POSTGRES_URL}): {e}"));
            Some(Self {
                store: Arc::new(store),
                config,
            })
        })
        .await
        .expect("a blocking task")
    }

    /// The schema's name.
    pub(crate) fn schema(&self) -> &str {
        self.store.schema()
    }

    /// The store (shared: an `Arc`).
    pub(crate) fn store(&self) -> Arc<PostgresStore> {
        Arc::clone(&self.store)
    }

    /// Waits until every other handle of the store is gone (the app's
    /// tasks end once their connections close), then drops the store and
    /// the schema on a blocking thread: the driver's connections run a
    /// runtime of their own and must not be dropped on an async worker.
    pub(crate) async fn drop_schema(self) {
        let started = std::time::Instant::now();
        while Arc::strong_count(&self.store) > 1 {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "the app never let go of the store"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        tokio::task::spawn_blocking(move || {
            let schema = self.store.schema().to_owned();
            drop(self.store);
            if let Ok(mut client) = self.config.connect() {
                let _ =
                    client.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"));
            }
        })
        .await
        .expect("a blocking task");
    }
}
