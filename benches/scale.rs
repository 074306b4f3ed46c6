//! Scale: the engine's operations on the memory store over 10 000 and
//! 1 000 000 grants (issue 12 item 5), each population built by the real
//! flow (consent, code, exchange: every record a grant brings) before any
//! timed loop.
//!
//! Measured at each size, on a sample of up to 16 384 grants spread
//! evenly over the population (all of them at 10 000), cycled in order:
//!
//! * `bare_jwt_verify`: the sample's access tokens, verified alone;
//! * `bearer`: `Engine::verify_bearer` on them (site and grant read);
//! * `refresh`: `Engine::token` rotating their refresh tokens, one commit
//!   each (the body naming the previous answer's token is built untimed);
//! * `decide`: `Engine::decide` issuing a code for a sample user, and
//! * `exchange`: `Engine::token` redeeming a code issued untimed just
//!   before, each in a write transaction that is then dropped (rolled
//!   back, untimed) so the population stays at its size however many
//!   iterations criterion runs.
//!
//! Both populations are built first; each phase of measurements (reads,
//! rotation, consent and exchange) then runs at both sizes back to back,
//! so a shared machine's changing load moves both sides of a ratio alike.
//!
//! After the runs the bench prints `TIME` lines and one `RATIO` line per
//! operation, `scale_<op>_1m_over_10k` (target ≤ 1.5), and the bearer
//! check over bare verification at 1 000 000 grants (target ≤ 1.5).
//!
//! `cargo bench --bench scale` (about 3 minutes and 4 GB at 1 000 000
//! grants; `PORTCULLIS_SCALE_LARGE=200000` measures a smaller large size).
//! Not part of the CI guard, which runs `--bench core` only.
#![allow(
    missing_docs,
    reason = "criterion's macros generate undocumented items"
)]
#![allow(clippy::unwrap_used, reason = "a benchmark's setup fails loudly")]

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;
use portcullis::authorize::AuthorizeAnswer;
use portcullis::form::{Form, encode_pairs};
use portcullis::header::HeaderField;
use portcullis::jwt::{Keyring, SigningKey, TokenType, Validation};
use portcullis::pkce::{CodeChallenge, CodeVerifier};
use portcullis::scope::ScopeSet;
use portcullis::site::{SiteConfig, SiteId};
use portcullis::store::{MemoryStore, Store, WriteTransaction};
use portcullis::{Engine, Own, Policy, Timestamp};
use rand::SeedableRng;
use rand::rngs::StdRng;

const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const ISS: &str = "https://app.example.com";
const NOW: u64 = 1_800_000_000;
const REDIRECT: &str = "http://127.0.0.1/cb";
/// The most grants a size's operations cycle over.
const SAMPLE: usize = 16_384;

fn keyring() -> Keyring {
    let mut k = Keyring::new();
    k.insert("k1", SigningKey::from_bytes(&[0x42; 32]).unwrap())
        .unwrap();
    k.set_active("k1").unwrap();
    k
}

/// A population of grants and the sample the timed loops use.
struct Population {
    engine: Engine<MemoryStore>,
    site: SiteId,
    client_id: String,
    challenge: String,
    resource: String,
    /// `Authorization` values of the sample's access tokens.
    headers: Vec<String>,
    /// The sample's current refresh tokens.
    refresh: Vec<String>,
    /// The sample's users.
    subjects: Vec<String>,
    rng: StdRng,
}

impl Population {
    fn query(&self) -> String {
        encode_pairs([
            ("response_type", "code"),
            ("client_id", self.client_id.as_str()),
            ("redirect_uri", REDIRECT),
            ("state", "s"),
            ("code_challenge", self.challenge.as_str()),
            ("code_challenge_method", "S256"),
            ("resource", self.resource.as_str()),
        ])
    }

    fn exchange_body(&self, url: &str) -> String {
        let code = Form::parse(url.split_once('?').unwrap().1, 4096)
            .unwrap()
            .get("code")
            .unwrap()
            .to_string();
        encode_pairs([
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", REDIRECT),
            ("code_verifier", VERIFIER),
            ("client_id", self.client_id.as_str()),
        ])
    }
}

fn now() -> Timestamp {
    Timestamp::from_secs(NOW)
}

/// `grants` grants of distinct users, built in write transactions of 1 000
/// operations each (the population is setup, not measured).
fn populate(grants: usize) -> Population {
    let mut rng = StdRng::seed_from_u64(7);
    let engine = Engine::new(MemoryStore::new(), keyring(), Policy::default());
    let site = SiteId::parse("scale").unwrap();
    engine
        .create_site(
            Own,
            SiteConfig::new(site.clone(), "Scale", ISS, "https://app.example.com/mcp/"),
            &mut rng,
            now(),
        )
        .unwrap();
    let client = engine
        .register_client(
            br#"{"redirect_uris":["http://127.0.0.1/cb"],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"]}"#,
            &mut rng,
            now(),
        )
        .unwrap();
    let challenge =
        CodeChallenge::from_verifier(CodeVerifier::parse(VERIFIER).unwrap()).to_base64url();
    let resource = engine.site(&site).unwrap().resource();
    let mut p = Population {
        engine,
        site,
        client_id: client.client_id,
        challenge,
        resource,
        headers: Vec::new(),
        refresh: Vec::new(),
        subjects: Vec::new(),
        rng,
    };
    let query = p.query();
    let every = (grants / SAMPLE).max(1);
    let mut made = 0;
    while made < grants {
        let mut txn = p.engine.store().begin_write().unwrap();
        for _ in 0..1_000.min(grants - made) {
            let subject = format!("user-{made:07}");
            let AuthorizeAnswer::Redirect(url) = p
                .engine
                .decide(
                    &mut txn,
                    &p.site,
                    &query,
                    None,
                    &subject,
                    true,
                    &mut p.rng,
                    now(),
                )
                .unwrap()
            else {
                panic!("no redirect")
            };
            let body = p.exchange_body(&url);
            let tokens = p
                .engine
                .token(
                    &mut txn,
                    &p.site,
                    &body,
                    HeaderField::ABSENT,
                    &mut p.rng,
                    now(),
                )
                .unwrap();
            if made % every == 0 && p.headers.len() < SAMPLE {
                p.headers
                    .push(format!("Bearer {}", tokens.access_token.expose_secret()));
                p.refresh
                    .push(tokens.refresh_token.expose_secret().to_string());
                p.subjects.push(subject);
            }
            made += 1;
        }
        txn.commit().unwrap();
    }
    p
}

/// One phase of the measurements at one size: 0 the reads, 1 the
/// rotation, 2 consent and exchange. `main` runs each phase at both sizes
/// back to back, so a change in the machine's load between phases moves
/// both sides of a 1 000 000 / 10 000 ratio alike.
fn measure(crit: &mut Criterion, label: &str, pop: &mut Population, phase: u8) {
    let mut group = crit.benchmark_group(label);
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    let mut at = 0;
    if phase == 1 {
        refresh(&mut group, pop, &mut at);
    }
    if phase == 2 {
        writes(&mut group, pop, &mut at);
    }
    if phase != 0 {
        group.finish();
        return;
    }
    let now = now();
    let required = ScopeSet::parse("skills:read").unwrap();
    let expect = Validation::new(TokenType::AccessToken, pop.resource.as_str()).issuer(ISS);
    let tokens: Vec<&str> = pop
        .headers
        .iter()
        .map(|h| h.strip_prefix("Bearer ").unwrap())
        .collect();
    let count = pop.headers.len();
    group.bench_function("bare_jwt_verify", |bencher| {
        bencher.iter(|| {
            at = (at + 1) % count;
            pop.engine
                .keyring()
                .verify(black_box(tokens[at]), &expect, now)
                .unwrap()
        });
    });
    group.bench_function("bearer", |bencher| {
        bencher.iter(|| {
            at = (at + 1) % count;
            pop.engine
                .verify_bearer(
                    &pop.site,
                    HeaderField::one(black_box(&pop.headers[at])),
                    &required,
                    now,
                )
                .unwrap()
        });
    });
    group.finish();
}

/// The rotation of the sample's refresh tokens, one commit each.
fn refresh(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    pop: &mut Population,
    at: &mut usize,
) {
    let now = now();
    let count = pop.headers.len();
    group.bench_function("refresh", |bencher| {
        bencher.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                *at = (*at + 1) % count;
                let body = encode_pairs([
                    ("grant_type", "refresh_token"),
                    ("refresh_token", pop.refresh[*at].as_str()),
                    ("client_id", pop.client_id.as_str()),
                ]);
                let start = Instant::now();
                let answer = pop
                    .engine
                    .token(
                        Own,
                        &pop.site,
                        black_box(&body),
                        HeaderField::ABSENT,
                        &mut pop.rng,
                        now,
                    )
                    .unwrap();
                spent += start.elapsed();
                pop.refresh[*at] = answer.refresh_token.expose_secret().to_string();
            }
            spent
        });
    });
}

/// Consent and code exchange, each in a write transaction that is rolled
/// back untimed.
fn writes(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    pop: &mut Population,
    at: &mut usize,
) {
    let now = now();
    let count = pop.headers.len();
    let query = pop.query();
    group.bench_function("decide", |bencher| {
        bencher.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                *at = (*at + 1) % count;
                let mut txn = pop.engine.store().begin_write().unwrap();
                let start = Instant::now();
                let answer = pop
                    .engine
                    .decide(
                        &mut txn,
                        &pop.site,
                        black_box(&query),
                        None,
                        &pop.subjects[*at],
                        true,
                        &mut pop.rng,
                        now,
                    )
                    .unwrap();
                spent += start.elapsed();
                black_box(answer);
                drop(txn);
            }
            spent
        });
    });
    group.bench_function("exchange", |bencher| {
        bencher.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                *at = (*at + 1) % count;
                let mut txn = pop.engine.store().begin_write().unwrap();
                let AuthorizeAnswer::Redirect(url) = pop
                    .engine
                    .decide(
                        &mut txn,
                        &pop.site,
                        &query,
                        None,
                        &pop.subjects[*at],
                        true,
                        &mut pop.rng,
                        now,
                    )
                    .unwrap()
                else {
                    panic!("no redirect")
                };
                let body = pop.exchange_body(&url);
                let start = Instant::now();
                let answer = pop
                    .engine
                    .token(
                        &mut txn,
                        &pop.site,
                        black_box(&body),
                        HeaderField::ABSENT,
                        &mut pop.rng,
                        now,
                    )
                    .unwrap();
                spent += start.elapsed();
                black_box(answer);
                drop(txn);
            }
            spent
        });
    });
}

const OPS: [&str; 5] = ["bare_jwt_verify", "bearer", "refresh", "decide", "exchange"];

/// Criterion's median estimate of `id` in nanoseconds, if this run
/// measured it.
fn median_ns(id: &str, since: std::time::SystemTime) -> Option<f64> {
    let dir = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target"),
        std::path::PathBuf::from,
    );
    let path = dir.join("criterion").join(id).join("new/estimates.json");
    if std::fs::metadata(&path).and_then(|m| m.modified()).ok()? < since {
        return None;
    }
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
    json["median"]["point_estimate"].as_f64()
}

fn main() {
    let since = std::time::SystemTime::now();
    let large: usize = std::env::var("PORTCULLIS_SCALE_LARGE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let mut c = Criterion::default().configure_from_args();
    let mut report = String::new();
    let mut pops = Vec::new();
    for (label, grants) in [("scale_10k", 10_000), ("scale_1m", large)] {
        let start = Instant::now();
        let p = populate(grants);
        let _ = writeln!(
            report,
            "POPULATION {label} {grants} grants {} records, built in {:.1} s",
            format!("{:?}", p.engine.store())
                .split(|ch: char| !ch.is_ascii_digit())
                .find(|s| !s.is_empty())
                .unwrap_or("?"),
            start.elapsed().as_secs_f64()
        );
        pops.push((label, p));
    }
    for phase in 0..3 {
        for (label, p) in &mut pops {
            measure(&mut c, label, p, phase);
        }
    }
    c.final_summary();
    for label in ["scale_10k", "scale_1m"] {
        for op in OPS {
            let id = format!("{label}/{op}");
            if let Some(ns) = median_ns(&id, since) {
                let _ = writeln!(report, "TIME {id} {ns:.1}");
            }
        }
    }
    for op in OPS {
        let (small, big) = (format!("scale_10k/{op}"), format!("scale_1m/{op}"));
        if let (Some(s), Some(b)) = (median_ns(&small, since), median_ns(&big, since)) {
            let _ = writeln!(
                report,
                "RATIO scale_{op}_1m_over_10k {:.3} le 1.5 {big} {small}",
                b / s
            );
        }
    }
    if let (Some(b), Some(v)) = (
        median_ns("scale_1m/bearer", since),
        median_ns("scale_1m/bare_jwt_verify", since),
    ) {
        let _ = writeln!(
            report,
            "RATIO bearer_over_bare_verify_memory_1m {:.3} le 1.5 scale_1m/bearer scale_1m/bare_jwt_verify",
            b / v
        );
    }
    #[allow(clippy::print_stdout, reason = "the bench's report")]
    {
        print!("{report}");
    }
}
