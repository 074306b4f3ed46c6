//! Criterion benchmarks, side by side with their floors and peers:
//!
//! * HS256 sign and verify against a bare HMAC-SHA256 over the same bytes
//!   and against `jsonwebtoken`;
//! * bearer verification with the grant check against bare verification,
//!   on the memory store and on redb;
//! * refresh rotation on the memory store;
//! * the open-redirect guard against `url` parse + join.
//!
//! Every input (claims, tokens, forms, headers) is built before the timed
//! loop; the HMAC floor clones a pre-keyed state, as `SigningKey` does.
//! After the runs the bench prints one machine-readable line per ratio,
//! `RATIO <name> <value> <le|ge|info> <target>`, read from criterion's
//! median estimates; `benches/figures.py` turns them into docs/figures.md's
//! table and chart, and `benches/guard.sh` fails CI on a missed target.
//!
//! `cargo bench --bench core`; the figures are in docs/figures.md.
#![allow(
    missing_docs,
    reason = "criterion's macros generate undocumented items"
)]
#![allow(clippy::unwrap_used, reason = "a benchmark's setup fails loudly")]

use std::fmt::Write as _;
use std::hint::black_box;

use criterion::{Criterion, criterion_group};
use hmac::{KeyInit, Mac};
use portcullis::form::encode_pairs;
use portcullis::header::HeaderField;
use portcullis::jwt::{Claims, Keyring, SigningKey, TokenType, Validation};
use portcullis::pkce::{CodeChallenge, CodeVerifier};
use portcullis::redirect::SafePath;
use portcullis::scope::ScopeSet;
use portcullis::site::{SiteConfig, SiteId};
use portcullis::store::{MemoryStore, RedbStore, Store};
use portcullis::{Engine, Policy, Timestamp};
use rand::SeedableRng;
use rand::rngs::StdRng;

const KEY: [u8; 32] = [0x42; 32];
const AUD: &str = "https://app.example.com/mcp/5mKq2w9f3Xc7vB1nRtYz0A";
const ISS: &str = "https://app.example.com";
const NOW: i64 = 1_800_000_000;

fn claims() -> Claims {
    Claims {
        iss: Some(ISS.into()),
        sub: Some("user-42".into()),
        aud: Some(AUD.into()),
        exp: Some(NOW + 300),
        iat: Some(NOW),
        jti: Some("q1w2e3r4t5y6u7i8o9p0aa".into()),
        client_id: Some("pc1.k1.client".into()),
        scope: Some("skills:read skills:write".into()),
        gid: Some("AQEBAQEBAQEBAQEBAQEBAQ".into()),
        ..Claims::default()
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct PeerClaims {
    iss: String,
    sub: String,
    aud: String,
    exp: i64,
    iat: i64,
    jti: String,
    client_id: String,
    scope: String,
    gid: String,
}

fn peer_claims() -> PeerClaims {
    let c = claims();
    PeerClaims {
        iss: c.iss.unwrap(),
        sub: c.sub.unwrap(),
        aud: AUD.into(),
        exp: c.exp.unwrap(),
        iat: c.iat.unwrap(),
        jti: c.jti.unwrap(),
        client_id: c.client_id.unwrap(),
        scope: c.scope.unwrap(),
        gid: c.gid.unwrap(),
    }
}

fn keyring() -> Keyring {
    let mut k = Keyring::new();
    k.insert("k1", SigningKey::from_bytes(&KEY).unwrap())
        .unwrap();
    k.set_active("k1").unwrap();
    k
}

/// The floor: HMAC-SHA256 from a state with the key already absorbed.
fn prekeyed_hmac(keyed: &hmac::Hmac<sha2::Sha256>, data: &[u8]) -> [u8; 32] {
    let mut mac = keyed.clone();
    mac.update(data);
    mac.finalize().into_bytes().into()
}

fn jwt(c: &mut Criterion) {
    let keyring = keyring();
    let token = keyring.sign(TokenType::AccessToken, &claims()).unwrap();
    let token = token.expose_secret().to_string();
    let signing_input = &token[..token.rfind('.').unwrap()];
    let expect = Validation::new(TokenType::AccessToken, AUD).issuer(ISS);
    let now = Timestamp::from_secs(NOW.unsigned_abs());

    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    header.kid = Some("k1".into());
    header.typ = Some("at+jwt".into());
    let enc = jsonwebtoken::EncodingKey::from_secret(&KEY).unwrap();
    let dec = jsonwebtoken::DecodingKey::from_secret(&KEY).unwrap();
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
    validation.set_audience(&[AUD]);
    validation.set_issuer(&[ISS]);
    validation.validate_exp = false;
    let peer_token = jsonwebtoken::encode(&header, &peer_claims(), &enc).unwrap();

    let keyed = hmac::Hmac::<sha2::Sha256>::new_from_slice(&KEY).unwrap();
    let claims = claims();
    let peer = peer_claims();

    let mut g = c.benchmark_group("hs256");
    g.bench_function("floor_prekeyed_hmac_sha256", |b| {
        b.iter(|| prekeyed_hmac(&keyed, black_box(signing_input.as_bytes())));
    });
    g.bench_function("portcullis_sign", |b| {
        b.iter(|| {
            keyring
                .sign(TokenType::AccessToken, black_box(&claims))
                .unwrap()
        });
    });
    g.bench_function("jsonwebtoken_encode", |b| {
        b.iter(|| jsonwebtoken::encode(&header, black_box(&peer), &enc).unwrap());
    });
    g.bench_function("portcullis_verify_borrowed", |b| {
        b.iter(|| {
            keyring
                .verify_with(black_box(&token), &expect, now, |v| v.claims.exp)
                .unwrap()
        });
    });
    g.bench_function("portcullis_verify_owned", |b| {
        b.iter(|| keyring.verify(black_box(&token), &expect, now).unwrap());
    });
    g.bench_function("jsonwebtoken_decode", |b| {
        b.iter(|| {
            jsonwebtoken::decode::<PeerClaims>(black_box(&peer_token), &dec, &validation).unwrap()
        });
    });
    g.finish();
}

const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";

/// An engine on `store` with one site, one client and one grant.
fn engine_with_grant<S: Store>(store: S) -> (Engine<S>, SiteId, String, String, String) {
    let mut rng = StdRng::seed_from_u64(1);
    let now = Timestamp::from_secs(NOW.unsigned_abs());
    let engine = Engine::new(store, keyring(), Policy::default());
    let site = SiteId::parse("bench").unwrap();
    engine
        .create_site(
            SiteConfig::new(site.clone(), "Bench", ISS, "https://app.example.com/mcp/"),
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
        .unwrap();
    let challenge =
        CodeChallenge::from_verifier(CodeVerifier::parse(VERIFIER).unwrap()).to_base64url();
    let resource = engine.site(&site).unwrap().resource();
    let query = encode_pairs([
        ("response_type", "code"),
        ("client_id", client.client_id.as_str()),
        ("redirect_uri", "http://127.0.0.1/cb"),
        ("state", "s"),
        ("code_challenge", challenge.as_str()),
        ("code_challenge_method", "S256"),
        ("resource", resource.as_str()),
    ]);
    let portcullis::authorize::AuthorizeAnswer::Redirect(url) = engine
        .decide(&site, &query, None, "user-42", true, &mut rng, now)
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
        ("client_id", client.client_id.as_str()),
    ]);
    let tokens = engine
        .token(&site, &body, HeaderField::ABSENT, &mut rng, now)
        .unwrap();
    (
        engine,
        site,
        client.client_id,
        tokens.access_token.expose_secret().into(),
        tokens.refresh_token.expose_secret().into(),
    )
}

fn engine(c: &mut Criterion) {
    let (engine, site, client_id, access, refresh) = engine_with_grant(MemoryStore::new());
    let now = Timestamp::from_secs(NOW.unsigned_abs());
    let mut g = c.benchmark_group("engine_memory");
    bearer_beside_bare_verify(&mut g, &engine, &site, &access);
    let mut rng = StdRng::seed_from_u64(2);
    let mut current = refresh;
    // The body names the refresh token the previous call returned, so it
    // is built per call; the `iter_custom` loop times only `Engine::token`.
    g.bench_function("refresh_rotation", |b| {
        b.iter_custom(|iters| {
            let mut spent = std::time::Duration::ZERO;
            for _ in 0..iters {
                let body = encode_pairs([
                    ("grant_type", "refresh_token"),
                    ("refresh_token", current.as_str()),
                    ("client_id", client_id.as_str()),
                ]);
                let start = std::time::Instant::now();
                let t = engine
                    .token(&site, black_box(&body), HeaderField::ABSENT, &mut rng, now)
                    .unwrap();
                spent += start.elapsed();
                current = t.refresh_token.expose_secret().to_string();
            }
            spent
        });
    });
    g.finish();
}

/// The bearer check on the durable store: the same token, site and grant on
/// redb (a file in a temporary directory, read through redb's page cache).
fn engine_redb(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open(dir.path().join("bench.redb")).unwrap();
    let (engine, site, _, access, _) = engine_with_grant(store);
    let mut g = c.benchmark_group("engine_redb");
    bearer_beside_bare_verify(&mut g, &engine, &site, &access);
    g.finish();
}

/// The bearer check with its grant read, and beside it the bare verify of
/// the same token (its denominator), in group `g`; header, scope and
/// validation built outside the timed loops.
fn bearer_beside_bare_verify<S: Store>(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    engine: &Engine<S>,
    site: &SiteId,
    access: &str,
) {
    let now = Timestamp::from_secs(NOW.unsigned_abs());
    let header = format!("Bearer {access}");
    let required = ScopeSet::parse("skills:read").unwrap();
    let resource = engine.site(site).unwrap().resource();
    let expect = Validation::new(TokenType::AccessToken, resource).issuer(ISS);
    g.bench_function("bare_jwt_verify", |b| {
        b.iter(|| {
            engine
                .keyring()
                .verify(black_box(access), &expect, now)
                .unwrap()
        });
    });
    g.bench_function("verify_bearer_with_grant_check", |b| {
        b.iter(|| {
            engine
                .verify_bearer(site, HeaderField::one(black_box(&header)), &required, now)
                .unwrap()
        });
    });
}

fn redirect(c: &mut Criterion) {
    let origin = url::Url::parse("https://chat.example.com").unwrap();
    let path = "/inbox/threads/42?f_label=work&sort=recent#latest";
    let mut g = c.benchmark_group("redirect_guard");
    g.bench_function("portcullis_safe_path", |b| {
        b.iter(|| SafePath::new(black_box(path)).unwrap());
    });
    g.bench_function("url_parse_and_join", |b| {
        b.iter(|| {
            let base = url::Url::parse(black_box("https://chat.example.com")).unwrap();
            let joined = base.join(black_box(path)).unwrap();
            joined.origin() == origin.origin()
        });
    });
    g.finish();
}

criterion_group!(benches, jwt, engine, engine_redb, redirect);

/// A ratio the bench reports: `numerator / denominator` of two medians.
struct Ratio {
    name: &'static str,
    numerator: &'static str,
    denominator: &'static str,
    /// `le`: the ratio must stay at or below the target; `ge`: at or
    /// above; `info`: reported only.
    op: &'static str,
    target: f64,
}

const RATIOS: &[Ratio] = &[
    Ratio {
        name: "sign_over_floor",
        numerator: "hs256/portcullis_sign",
        denominator: "hs256/floor_prekeyed_hmac_sha256",
        op: "le",
        target: 1.6,
    },
    Ratio {
        name: "sign_speedup_over_jsonwebtoken",
        numerator: "hs256/jsonwebtoken_encode",
        denominator: "hs256/portcullis_sign",
        op: "ge",
        target: 2.0,
    },
    Ratio {
        name: "verify_over_floor",
        numerator: "hs256/portcullis_verify_borrowed",
        denominator: "hs256/floor_prekeyed_hmac_sha256",
        op: "le",
        target: 2.2,
    },
    Ratio {
        name: "verify_speedup_over_jsonwebtoken",
        numerator: "hs256/jsonwebtoken_decode",
        denominator: "hs256/portcullis_verify_borrowed",
        op: "ge",
        target: 3.0,
    },
    Ratio {
        name: "verify_owned_over_floor",
        numerator: "hs256/portcullis_verify_owned",
        denominator: "hs256/floor_prekeyed_hmac_sha256",
        op: "info",
        target: 2.2,
    },
    Ratio {
        name: "verify_owned_speedup_over_jsonwebtoken",
        numerator: "hs256/jsonwebtoken_decode",
        denominator: "hs256/portcullis_verify_owned",
        op: "info",
        target: 3.0,
    },
    Ratio {
        name: "bearer_over_bare_verify_memory",
        numerator: "engine_memory/verify_bearer_with_grant_check",
        denominator: "engine_memory/bare_jwt_verify",
        op: "info",
        target: 1.5,
    },
    Ratio {
        name: "bearer_over_bare_verify_redb",
        numerator: "engine_redb/verify_bearer_with_grant_check",
        denominator: "engine_redb/bare_jwt_verify",
        op: "le",
        target: 3.0,
    },
    Ratio {
        name: "redirect_speedup_over_url",
        numerator: "redirect_guard/url_parse_and_join",
        denominator: "redirect_guard/portcullis_safe_path",
        op: "info",
        target: 1.0,
    },
];

/// Criterion's median estimate of `id` (`group/function`) in nanoseconds,
/// if this run measured it.
fn median_ns(id: &str, since: std::time::SystemTime) -> Option<f64> {
    let dir = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target"),
        std::path::PathBuf::from,
    );
    let path = dir.join("criterion").join(id).join("new/estimates.json");
    // A file older than this run belongs to an earlier one (a filtered
    // run leaves the others in place).
    if std::fs::metadata(&path).and_then(|m| m.modified()).ok()? < since {
        return None;
    }
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
    json["median"]["point_estimate"].as_f64()
}

fn main() {
    let since = std::time::SystemTime::now();
    benches();
    Criterion::default().configure_from_args().final_summary();
    let mut out = String::new();
    for id in [
        "hs256/floor_prekeyed_hmac_sha256",
        "hs256/portcullis_sign",
        "hs256/jsonwebtoken_encode",
        "hs256/portcullis_verify_borrowed",
        "hs256/portcullis_verify_owned",
        "hs256/jsonwebtoken_decode",
        "engine_memory/bare_jwt_verify",
        "engine_memory/verify_bearer_with_grant_check",
        "engine_memory/refresh_rotation",
        "engine_redb/bare_jwt_verify",
        "engine_redb/verify_bearer_with_grant_check",
        "redirect_guard/portcullis_safe_path",
        "redirect_guard/url_parse_and_join",
    ] {
        if let Some(ns) = median_ns(id, since) {
            let _ = writeln!(out, "TIME {id} {ns:.1}");
        }
    }
    for r in RATIOS {
        if let (Some(n), Some(d)) = (
            median_ns(r.numerator, since),
            median_ns(r.denominator, since),
        ) {
            let _ = writeln!(
                out,
                "RATIO {} {:.3} {} {} {} {}",
                r.name,
                n / d,
                r.op,
                r.target,
                r.numerator,
                r.denominator
            );
        }
    }
    if let Some(ns) = median_ns("engine_memory/refresh_rotation", since) {
        let _ = writeln!(out, "RATE refresh_rotation_per_s {:.0} ge 250000", 1e9 / ns);
    }
    // The lines are the bench's output; stdout is where `cargo bench` shows it.
    #[allow(clippy::print_stdout, reason = "the bench's report")]
    {
        print!("{out}");
    }
}
