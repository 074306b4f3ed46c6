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

pub(crate) fn memory() -> MemoryStore {
    MemoryStore::new()
}

/// The memory store on its `no_std` spin lock, as firmware runs it.
pub(crate) fn spin_memory() -> portcullis_store_memory::SpinMemoryStore {
    portcullis_store_memory::SpinMemoryStore::new()
}

/// Runs a generic scenario `fn name<S: Store>(store: &S)` on every store, as
/// one test per store: `on_every_store!(scenario_a, scenario_b);`.
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
            }
        )+
    };
}
