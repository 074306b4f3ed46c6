//! Refresh rotations per second on the memory store and on redb with
//! durable commits, at 1, 8 and 64 concurrent callers (each rotating its own grant in a loop): one
//! commit per rotation (`Engine::token`) against the group committer
//! (`GroupCommitter::run` of `Engine::token`). With
//! `PORTCULLIS_BENCH_POSTGRES_URL` set (a cluster with durable commits:
//! `store-postgres/test-cluster.sh start --durable`), the same on
//! PostgreSQL.
//!
//! Also bearer verification (`Engine::verify_bearer`: the JWT check and
//! the grant read) on the memory store, redb and, with the variable set,
//! PostgreSQL: a read transaction per call, one round trip on PostgreSQL,
//! none with the store's read cache (`postgres_read_cache`).
//!
//! `cargo bench --bench group_commit`; criterion reports the time per
//! rotation and rotations per second (throughput).
#![allow(
    missing_docs,
    reason = "criterion's macros generate undocumented items"
)]
#![allow(clippy::unwrap_used, reason = "a benchmark's setup fails loudly")]

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};
use portcullis::form::encode_pairs;
use portcullis::header::HeaderField;
use portcullis::jwt::{Keyring, SigningKey};
use portcullis::pkce::{CodeChallenge, CodeVerifier};
use portcullis::scope::ScopeSet;
use portcullis::site::{SiteConfig, SiteId};
use portcullis::store::{Durability, GroupCommitter, MemoryStore, RedbStore, Store};
use portcullis::{Engine, Own, Policy, Timestamp};
use portcullis_store_postgres::{PostgresConfig, PostgresStore};
use rand::SeedableRng;
use rand::rngs::StdRng;

const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const NOW: u64 = 1_800_000_000;

/// The variable naming the PostgreSQL cluster to measure too.
const POSTGRES_URL: &str = "PORTCULLIS_BENCH_POSTGRES_URL";

fn keyring() -> Keyring {
    let mut k = Keyring::new();
    k.insert("k1", SigningKey::from_bytes(&[0x42; 32]).unwrap())
        .unwrap();
    k.set_active("k1").unwrap();
    k
}

/// A durable redb store (on disk, not tmpfs) and the directory it lives in.
fn redb() -> (RedbStore, tempfile::TempDir) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let store = RedbStore::open(dir.path().join("bench.redb"))
        .unwrap()
        .with_durability(Durability::Immediate);
    (store, dir)
}

/// A PostgreSQL store in a fresh schema `name` (dropped first if a previous
/// run left it), with a connection for each of `callers`.
fn postgres(url: &str, name: &str, callers: usize) -> (PostgresStore, ()) {
    let mut client = postgres::Client::connect(url, postgres::NoTls).unwrap();
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
        .unwrap();
    let store = PostgresConfig::parse(url)
        .unwrap()
        .schema(name)
        .unwrap()
        .pool_size(u32::try_from(callers).unwrap().clamp(1, 64))
        .open()
        .unwrap();
    (store, ())
}

/// An engine on `store` with one site, one client and `grants` grants;
/// their refresh tokens.
fn setup<S: Store>(store: S, grants: usize) -> (Arc<Engine<Arc<S>>>, SiteId, String, Vec<String>) {
    let engine = Engine::new(Arc::new(store), keyring(), Policy::default());
    let mut rng = StdRng::seed_from_u64(1);
    let now = Timestamp::from_secs(NOW);
    let site = SiteId::parse("bench").unwrap();
    engine
        .create_site(
            Own,
            SiteConfig::new(
                site.clone(),
                "Bench",
                "https://app.example.com",
                "https://app.example.com/mcp/",
            ),
            &mut rng,
            now,
        )
        .unwrap();
    let client = engine
        .register_client(
            br#"{"redirect_uris":["http://127.0.0.1/cb"],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"]}"#,
            &mut rng,
            now,
        )
        .unwrap()
        .client_id;
    let challenge =
        CodeChallenge::from_verifier(CodeVerifier::parse(VERIFIER).unwrap()).to_base64url();
    let resource = engine.site(&site).unwrap().resource();
    let query = encode_pairs([
        ("response_type", "code"),
        ("client_id", client.as_str()),
        ("redirect_uri", "http://127.0.0.1/cb"),
        ("state", "s"),
        ("code_challenge", challenge.as_str()),
        ("code_challenge_method", "S256"),
        ("resource", resource.as_str()),
    ]);
    let tokens = (0..grants)
        .map(|i| {
            let portcullis::authorize::AuthorizeAnswer::Redirect(url) = engine
                .decide(
                    Own,
                    &site,
                    &query,
                    None,
                    &format!("user-{i}"),
                    true,
                    &mut rng,
                    now,
                )
                .unwrap()
            else {
                panic!("no redirect")
            };
            let code = portcullis::form::Form::parse(url.split_once('?').unwrap().1, 4096)
                .unwrap()
                .get("code")
                .unwrap()
                .to_string();
            let body = encode_pairs([
                ("grant_type", "authorization_code"),
                ("code", code.as_str()),
                ("redirect_uri", "http://127.0.0.1/cb"),
                ("code_verifier", VERIFIER),
                ("client_id", client.as_str()),
            ]);
            engine
                .token(Own, &site, &body, HeaderField::ABSENT, &mut rng, now)
                .unwrap()
                .refresh_token
                .expose_secret()
                .to_string()
        })
        .collect();
    (Arc::new(engine), site, client, tokens)
}

fn refresh_body(refresh: &str, client: &str) -> String {
    encode_pairs([
        ("grant_type", "refresh_token"),
        ("refresh_token", refresh),
        ("client_id", client),
    ])
}

/// `callers` threads each rotating its own grant `rounds` times, through
/// `rotate`; the wall time.
fn drive(tokens: &mut [String], rounds: u64, rotate: &(dyn Fn(&str) -> String + Sync)) -> Duration {
    let start = Barrier::new(tokens.len() + 1);
    std::thread::scope(|s| {
        for token in tokens.iter_mut() {
            let start = &start;
            s.spawn(move || {
                start.wait();
                for _ in 0..rounds {
                    *token = rotate(token);
                }
            });
        }
        start.wait();
        let began = Instant::now();
        // The scope joins every caller before it returns.
        began
    })
    .elapsed()
}

fn rotations(c: &mut Criterion) {
    rotations_on(c, "memory_refresh_rotation", |_| (MemoryStore::new(), ()));
    rotations_on(c, "redb_refresh_rotation", |_| redb());
    if let Ok(url) = std::env::var(POSTGRES_URL) {
        rotations_on(c, "postgres_refresh_rotation", |callers| {
            postgres(&url, &format!("bench_rotation_{callers}"), callers)
        });
    } else {
        eprintln!("postgres_refresh_rotation: skipped ({POSTGRES_URL} is not set)");
    }
}

/// The two ways of committing at 1, 8 and 64 callers, on stores made by
/// `open(callers)` (a store and what must outlive it).
fn rotations_on<S, G>(c: &mut Criterion, name: &str, open: impl Fn(usize) -> (S, G))
where
    S: Store + Send + Sync + 'static,
{
    let mut g = c.benchmark_group(name);
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .throughput(Throughput::Elements(1));
    for callers in [1usize, 8, 64] {
        let (store, _keep) = open(callers);
        let (engine, site, client, mut tokens) = setup(store, callers);
        let now = Timestamp::from_secs(NOW);
        g.bench_function(format!("one_commit_each/{callers}"), |b| {
            b.iter_custom(|iters| {
                let rounds = iters.div_ceil(callers as u64);
                let rotate = |t: &str| {
                    engine
                        .token(
                            Own,
                            &site,
                            &refresh_body(t, &client),
                            HeaderField::ABSENT,
                            &mut rand::rng(),
                            now,
                        )
                        .unwrap()
                        .refresh_token
                        .expose_secret()
                        .to_string()
                };
                drive(&mut tokens, rounds, &rotate) * iters as u32
                    / (rounds * callers as u64) as u32
            });
        });
        let committer = Arc::new(GroupCommitter::new(Arc::clone(engine.store())));
        g.bench_function(format!("group_commit/{callers}"), |b| {
            b.iter_custom(|iters| {
                let rounds = iters.div_ceil(callers as u64);
                let rotate = |t: &str| {
                    let (engine, site, body) =
                        (Arc::clone(&engine), site.clone(), refresh_body(t, &client));
                    committer
                        .run(move |txn| {
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
                        .unwrap()
                        .refresh_token
                        .expose_secret()
                        .to_string()
                };
                drive(&mut tokens, rounds, &rotate) * iters as u32
                    / (rounds * callers as u64) as u32
            });
        });
        let (ops, commits) = (committer.operations(), committer.commits().max(1));
        eprintln!(
            "{name}/group_commit/{callers}: {ops} operations in {commits} commits ({}.{} per commit)",
            ops / commits,
            ops * 10 / commits % 10
        );
    }
    g.finish();
}

/// `Engine::verify_bearer` on each store, one caller.
fn bearer(c: &mut Criterion) {
    let mut g = c.benchmark_group("verify_bearer");
    g.sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(1));
    bearer_on(&mut g, "memory", MemoryStore::new());
    let (store, _dir) = redb();
    bearer_on(&mut g, "redb", store);
    if let Ok(url) = std::env::var(POSTGRES_URL) {
        let (store, ()) = postgres(&url, "bench_bearer", 1);
        bearer_on(&mut g, "postgres", store);
        // With the read cache a server turns on (`serve
        // --db-read-cache-ms`): the site and the grant from memory, kept
        // fresh by the tables' NOTIFY trigger.
        let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        client
            .batch_execute("DROP SCHEMA IF EXISTS bench_bearer_cached CASCADE")
            .unwrap();
        let store = PostgresConfig::parse(&url)
            .unwrap()
            .schema("bench_bearer_cached")
            .unwrap()
            .read_cache(portcullis_store_postgres::DEFAULT_CACHE_TTL)
            .open()
            .unwrap();
        while !store.cache_stats().is_some_and(|c| c.listening) {
            std::thread::sleep(Duration::from_millis(10));
        }
        bearer_on(&mut g, "postgres_read_cache", store);
    } else {
        eprintln!("verify_bearer/postgres: skipped ({POSTGRES_URL} is not set)");
    }
    g.finish();
}

fn bearer_on<S: Store + Send + Sync + 'static>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    store: S,
) {
    let (engine, site, client, tokens) = setup(store, 1);
    let now = Timestamp::from_secs(NOW);
    let issued = engine
        .token(
            Own,
            &site,
            &refresh_body(&tokens[0], &client),
            HeaderField::ABSENT,
            &mut rand::rng(),
            now,
        )
        .unwrap();
    let header = format!("Bearer {}", issued.access_token.expose_secret());
    let required = ScopeSet::default();
    g.bench_function(name, |b| {
        b.iter(|| {
            engine
                .verify_bearer(
                    &site,
                    HeaderField::one(std::hint::black_box(&header)),
                    &required,
                    now,
                )
                .unwrap()
        });
    });
}

criterion_group!(benches, rotations, bearer);
criterion_main!(benches);
