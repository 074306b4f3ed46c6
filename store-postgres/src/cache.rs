//! The read cache: the rows a bearer check reads (a site, a grant), kept
//! in memory so that the check makes no round trip, and dropped the moment
//! any writer anywhere changes them.
//!
//! # Freshness
//!
//! * **Every change is announced.** A trigger on the cached tables (schema
//!   version 2, [`crate::migration`]) sends `NOTIFY` on [`CHANNEL`] with the
//!   schema, table and key of each row inserted, updated or deleted, by any
//!   writer: every instance, the admin CLI, a hand-written `UPDATE`.
//!   PostgreSQL delivers it when (and only if) the writing transaction
//!   commits.
//! * **One listener per store** (a dedicated connection on a thread of its
//!   own) drops each announced row. While it is not connected (before the
//!   first `LISTEN`, after a connection was lost, until it listens again)
//!   the cache serves nothing and keeps nothing: a notification may have
//!   been missed. Each (re)connection starts a new generation, and entries
//!   of an older one are never served.
//! * **A bound in any case.** An entry is served for at most the store's
//!   TTL after it was read, whatever the listener says, so a notification
//!   lost without the connection noticing (a network that drops packets
//!   silently) keeps a revoked grant usable for that long at most.
//! * **Own writes at once.** A write transaction of this store drops the
//!   rows it wrote as it ends, so the store's next read sees them without
//!   waiting for their notification (an instance that creates its site,
//!   or revokes a grant, then checks it).
//! * **No stale fill.** A read that raced a change must not put the old row
//!   back after the change's notification dropped it. Each read transaction
//!   takes a [`Ticket`] (the number of the last drop, and the generation)
//!   *before* its snapshot; its rows are kept only if no drop in their
//!   shard came after the ticket. A change that committed after the
//!   snapshot is announced after it, so its drop is numbered after the
//!   ticket.
//!
//! Only read transactions use the cache, and only for single-row reads of
//! the cached tables; writes, ranges and every other table go to the
//! database. A read transaction whose reads all hit the cache sends
//! nothing at all (its `BEGIN` waits for the first read that misses), so
//! its reads of cached rows may be older than its reads from the database
//! by up to the TTL: the contract's single snapshot holds for each source,
//! not across them. Decisions that write always read the database.

use std::collections::HashMap;
use std::hash::{BuildHasher as _, Hash as _, Hasher as _};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use portcullis_core::store::Table;
use postgres::fallible_iterator::FallibleIterator as _;

use crate::Manager;

/// The channel the trigger announces changed rows on.
pub(crate) const CHANNEL: &str = "portcullis_rows";

/// The tables whose rows are cached.
pub(crate) const CACHED: [Table; 2] = [Table::Sites, Table::Grants];

/// Shards of the map (each its own lock).
const SHARDS: usize = 64;

/// Most rows one shard keeps; a full shard is emptied (the cache is an
/// optimisation: a miss reads the database).
const SHARD_ROWS: usize = 1_024;

/// How long the listener waits before it connects again.
const RECONNECT: Duration = Duration::from_millis(500);

/// How often a waiting listener looks whether its store is gone.
const WAKE: Duration = Duration::from_millis(250);

/// A row as kept: `None` for a row known to be absent.
pub(crate) struct Kept(pub(crate) Option<Arc<[u8]>>);

/// What a read transaction took before its snapshot: rows it reads are
/// kept only if nothing in their shard was dropped after it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ticket {
    seq: u64,
    generation: u64,
}

/// How the cache has done since the store opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Reads served from memory.
    pub hits: u64,
    /// Reads of cached tables that went to the database.
    pub misses: u64,
    /// Rows dropped on a notification.
    pub dropped: u64,
    /// Times the listener (re)connected.
    pub listens: u64,
    /// Whether the listener is connected now (the cache serves only then).
    pub listening: bool,
}

struct Row {
    value: Option<Arc<[u8]>>,
    read_at: Instant,
    generation: u64,
}

#[derive(Default)]
struct Shard {
    rows: HashMap<(u8, Vec<u8>), Row>,
    /// The number of the last drop in this shard.
    dropped_at: u64,
}

/// The cache of one store.
pub(crate) struct Cache {
    ttl: Duration,
    schema: String,
    shards: Box<[Mutex<Shard>]>,
    /// Drops so far (each drop's number).
    seq: AtomicU64,
    /// Listener connections so far; entries of another are never served.
    generation: AtomicU64,
    listening: AtomicBool,
    hits: AtomicU64,
    misses: AtomicU64,
    dropped: AtomicU64,
    listens: AtomicU64,
    hasher: std::collections::hash_map::RandomState,
}

impl Cache {
    pub(crate) fn new(ttl: Duration, schema: &str) -> Self {
        Self {
            ttl,
            schema: schema.to_owned(),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            seq: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            listening: AtomicBool::new(false),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            listens: AtomicU64::new(0),
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }

    pub(crate) fn caches(table: Table) -> bool {
        CACHED.contains(&table)
    }

    fn shard(&self, table: Table, key: &[u8]) -> &Mutex<Shard> {
        let mut h = self.hasher.build_hasher();
        table.index().hash(&mut h);
        key.hash(&mut h);
        let i = usize::try_from(h.finish() % SHARDS as u64).unwrap_or(0);
        &self.shards[i]
    }

    /// A ticket for a read transaction about to take its snapshot, or
    /// `None` while the listener is not connected (nothing is kept then).
    pub(crate) fn ticket(&self) -> Option<Ticket> {
        // The generation first: a reconnection between the two loads makes
        // the ticket's generation old, and its rows are refused.
        let generation = self.generation.load(Ordering::SeqCst);
        let seq = self.seq.load(Ordering::SeqCst);
        self.listening
            .load(Ordering::SeqCst)
            .then_some(Ticket { seq, generation })
    }

    /// The row of `key`, if a fresh enough one is kept.
    pub(crate) fn get(&self, table: Table, key: &[u8]) -> Option<Kept> {
        if !self.listening.load(Ordering::SeqCst) {
            return None;
        }
        let generation = self.generation.load(Ordering::SeqCst);
        let shard = self
            .shard(table, key)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let found = shard
            .rows
            .get(&(tag(table), key.to_vec()))
            .filter(|r| r.generation == generation && r.read_at.elapsed() < self.ttl)
            .map(|r| Kept(r.value.clone()));
        drop(shard);
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Keeps the row `value` of `key` read under `ticket`, unless the row
    /// may have changed since the ticket was taken.
    pub(crate) fn put(&self, ticket: Ticket, table: Table, key: &[u8], value: Option<&[u8]>) {
        if !self.listening.load(Ordering::SeqCst)
            || self.generation.load(Ordering::SeqCst) != ticket.generation
        {
            return;
        }
        let mut shard = self
            .shard(table, key)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if shard.dropped_at > ticket.seq {
            return;
        }
        if shard.rows.len() >= SHARD_ROWS {
            shard.rows.clear();
        }
        shard.rows.insert(
            (tag(table), key.to_vec()),
            Row {
                value: value.map(Arc::from),
                read_at: Instant::now(),
                generation: ticket.generation,
            },
        );
    }

    /// Drops the row of `key` (its change was announced, or made here).
    pub(crate) fn drop_row(&self, table: Table, key: &[u8]) {
        let mut shard = self
            .shard(table, key)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        shard.dropped_at = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        shard.rows.remove(&(tag(table), key.to_vec()));
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// Starts a new generation, listening (`true`: the `LISTEN` took
    /// effect) or not: every row kept so far is gone.
    fn restart(&self, listening: bool) {
        if !listening {
            self.listening.store(false, Ordering::SeqCst);
        }
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.seq.fetch_add(1, Ordering::SeqCst);
        for shard in &self.shards {
            let mut s = shard.lock().unwrap_or_else(PoisonError::into_inner);
            s.rows.clear();
            s.dropped_at = self.seq.load(Ordering::SeqCst);
        }
        if listening {
            self.listens.fetch_add(1, Ordering::Relaxed);
            self.listening.store(true, Ordering::SeqCst);
        }
    }

    /// Forgets every row kept so far (a host that learned of a change on a
    /// channel of its own, which may arrive before the row's notification).
    pub(crate) fn clear(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.seq.fetch_add(1, Ordering::SeqCst);
        for shard in &self.shards {
            let mut s = shard.lock().unwrap_or_else(PoisonError::into_inner);
            s.rows.clear();
            s.dropped_at = self.seq.load(Ordering::SeqCst);
        }
    }

    /// A notification's payload (`schema table hex-key`) applied.
    fn apply(&self, payload: &str) {
        let mut parts = payload.splitn(3, ' ');
        let (Some(schema), Some(table), Some(hex)) = (parts.next(), parts.next(), parts.next())
        else {
            return;
        };
        if schema != self.schema {
            return;
        }
        let Some(table) = CACHED.into_iter().find(|t| t.name() == table) else {
            return;
        };
        match hex_bytes(hex) {
            Some(key) => self.drop_row(table, &key),
            // Not a key this build can read: drop everything.
            None => self.restart(true),
        }
    }

    pub(crate) fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            listens: self.listens.load(Ordering::Relaxed),
            listening: self.listening.load(Ordering::SeqCst),
        }
    }
}

/// Lowercase or uppercase hex as bytes (`encode(key, 'hex')`).
fn hex_bytes(hex: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| (c as char).to_digit(16).and_then(|d| u8::try_from(d).ok());
    let hex = hex.as_bytes();
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    hex.chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

fn tag(table: Table) -> u8 {
    u8::try_from(table.index()).unwrap_or(u8::MAX)
}

/// Starts the listener of `cache` on a connection of its own made by
/// `manager`, on a thread that ends once the cache (its store) is gone.
pub(crate) fn listen(cache: &Arc<Cache>, manager: Manager) -> std::io::Result<()> {
    let weak: Weak<Cache> = Arc::downgrade(cache);
    std::thread::Builder::new()
        .name("portcullis-cache-listen".into())
        .spawn(move || {
            loop {
                let Some(cache) = weak.upgrade() else { return };
                let connected = r2d2::ManageConnection::connect(&manager).and_then(|mut c| {
                    c.client.batch_execute(&format!("LISTEN {CHANNEL}"))?;
                    Ok(c)
                });
                let Ok(mut conn) = connected else {
                    drop(cache);
                    std::thread::sleep(RECONNECT);
                    continue;
                };
                cache.restart(true);
                drop(cache);
                loop {
                    let mut notes = conn.client.notifications();
                    let mut waiting = notes.timeout_iter(WAKE);
                    let next = waiting.next();
                    drop(waiting);
                    drop(notes);
                    let Some(cache) = weak.upgrade() else { return };
                    match next {
                        Ok(Some(n)) if n.channel() == CHANNEL => cache.apply(n.payload()),
                        Ok(Some(_)) => {}
                        Ok(None) if !conn.client.is_closed() => {}
                        Ok(None) | Err(_) => {
                            cache.restart(false);
                            break;
                        }
                    }
                }
                std::thread::sleep(RECONNECT);
            }
        })
        .map(drop)
}
