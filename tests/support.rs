//! Shared test support: deterministic randomness and store factories.

use portcullis::store::{Durability, MemoryStore, RedbStore};
use rand::SeedableRng;
use rand::rngs::StdRng;

/// A deterministic CSPRNG for a test.
pub(crate) fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// A redb store in a temporary directory, deleted when dropped.
pub(crate) struct TempRedb {
    pub(crate) store: RedbStore,
    pub(crate) path: std::path::PathBuf,
    /// Kept alive so the file outlives the store.
    pub(crate) dir: tempfile::TempDir,
}

impl TempRedb {
    /// A fresh database. Commits skip the fsync: these tests are about
    /// transaction semantics; the crash and reopen tests use `Immediate`.
    pub(crate) fn new() -> Self {
        Self::with_durability(Durability::None)
    }

    pub(crate) fn with_durability(durability: Durability) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("portcullis.redb");
        let store = RedbStore::open(&path)
            .expect("open redb")
            .with_durability(durability);
        Self { store, path, dir }
    }
}

/// The variable naming the PostgreSQL cluster the suites also run on
/// (`store-postgres/test-cluster.sh start` prints a URL for it).
pub(crate) const POSTGRES_URL: &str = "PORTCULLIS_TEST_POSTGRES_URL";

/// A PostgreSQL store in a schema of its own, dropped with it, so tests
/// run in parallel on one database.
pub(crate) struct TempPostgres {
    pub(crate) store: std::sync::Arc<portcullis_store_postgres::PostgresStore>,
    url: String,
}

impl TempPostgres {
    /// A fresh schema on the cluster named by [`POSTGRES_URL`], or `None`
    /// (and a note that the test is skipped) when it is not set.
    pub(crate) fn new() -> Option<Self> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let Ok(url) = std::env::var(POSTGRES_URL) else {
            eprintln!("skipped on PostgreSQL: {POSTGRES_URL} is not set");
            return None;
        };
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let schema = format!("test_{}_{n}", std::process::id());
        let store = portcullis_store_postgres::PostgresConfig::parse(&url)
            .and_then(|c| c.schema(&schema))
            .map(|c| c.pool_size(8))
            .and_then(portcullis_store_postgres::PostgresConfig::open)
            .unwrap_or_else(|e| panic!("open PostgreSQL ({POSTGRES_URL}): {e}"));
        Some(Self {
            store: std::sync::Arc::new(store),
            url,
        })
    }
}

impl TempPostgres {
    /// The cluster's connection string (it carries the password).
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// A second store on this one's schema, as another server instance
    /// would open it.
    pub(crate) fn reopen(
        &self,
    ) -> Result<portcullis_store_postgres::PostgresStore, portcullis::store::StoreError> {
        portcullis_store_postgres::PostgresConfig::parse(&self.url)?
            .schema(self.store.schema())?
            .pool_size(2)
            .open()
    }
}

impl Drop for TempPostgres {
    fn drop(&mut self) {
        let schema = self.store.schema().to_owned();
        if let Ok(mut client) = postgres::Client::connect(&self.url, postgres::NoTls) {
            let _ = client.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"));
        }
    }
}

pub(crate) fn memory() -> MemoryStore {
    MemoryStore::new()
}

/// The memory store on its `no_std` spin lock, as firmware runs it.
pub(crate) fn spin_memory() -> portcullis_store_memory::SpinMemoryStore {
    portcullis_store_memory::SpinMemoryStore::new()
}

/// Runs a generic scenario `fn name<S: Store>(store: &S)` on every store, as
/// one test per store (PostgreSQL when [`POSTGRES_URL`] is set):
/// `on_every_store!(scenario_a, scenario_b);`.
#[macro_export]
macro_rules! on_every_store {
    ($($scenario:ident),+ $(,)?) => {
        $(
            mod $scenario {
                #[test]
                fn memory() {
                    super::$scenario(&$crate::support::memory());
                }

                #[test]
                fn spin_memory() {
                    super::$scenario(&$crate::support::spin_memory());
                }

                #[test]
                fn redb() {
                    let db = $crate::support::TempRedb::new();
                    super::$scenario(&db.store);
                }

                #[test]
                fn postgres() {
                    if let Some(db) = $crate::support::TempPostgres::new() {
                        super::$scenario(&*db.store);
                    }
                }
            }
        )+
    };
}

/// A proptest configuration with `cases` cases whose failures are saved in
/// `file` (under `proptest-regressions/`, committed), so every later run
/// replays them first.
pub(crate) fn proptest_config(cases: u32, file: &'static str) -> proptest::prelude::ProptestConfig {
    proptest::prelude::ProptestConfig {
        cases,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::Direct(file),
        )),
        ..proptest::prelude::ProptestConfig::default()
    }
}
