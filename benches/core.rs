//! Criterion benchmarks, side by side with their floors and peers:
//!
//! * HS256 sign and verify against a bare HMAC-SHA256 over the same bytes
//!   and against `jsonwebtoken`;
//! * EdDSA and ES256 sign and verify against the bare signature operation
//!   of the crate the core signs with (`ed25519-dalek`, `p256`) over the
//!   same signing input, and against `jsonwebtoken` with the same key;
//! * bearer verification with the grant check against bare verification,
//!   on the memory store and on redb, and for an EdDSA token beside the
//!   check a resource server holding only the published key set makes;
//! * refresh rotation on the memory store;
//! * the open-redirect guard against `url` parse + join.
//!
//! Every input (claims, tokens, forms, headers) is built before the timed
//! loop; the HMAC floor clones a pre-keyed state, as `SigningKey` does; the
//! asymmetric floors sign with a key made once and verify a signature
//! parsed once, as `TokenKey` does with its keys.
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
use portcullis::jwk::JwkSet;
use portcullis::jwt::{Algorithm, Claims, Keyring, SigningKey, TokenKey, TokenType, Validation};
use portcullis::pkce::{CodeChallenge, CodeVerifier};
use portcullis::redirect::SafePath;
use portcullis::scope::ScopeSet;
use portcullis::site::{SiteConfig, SiteId};
use portcullis::store::{MemoryStore, RedbStore, Store};
use portcullis::{Engine, Own, Policy, Timestamp};
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

/// The Ed25519 seed and the P-256 scalar of the asymmetric figures.
const ED_SEED: [u8; 32] = [0x21; 32];
const EC_SCALAR: [u8; 32] = [0x22; 32];

/// [`keyring`] (its HS256 key still signs every MAC) with an Ed25519 and a
/// P-256 access-token key, each active for its algorithm.
fn asymmetric_keyring() -> Keyring {
    let mut k = keyring();
    k.insert_token_key("ed-1", TokenKey::ed25519(&ED_SEED))
        .unwrap();
    k.insert_token_key("ec-1", TokenKey::es256(&EC_SCALAR).unwrap())
        .unwrap();
    k.set_active("ed-1").unwrap();
    k.set_active("ec-1").unwrap();
    k
}

/// An Ed25519 seed as PKCS#8 (RFC 5958 version 1, RFC 8410 §7), the form
/// `jsonwebtoken::EncodingKey::from_ed_der` reads.
fn ed25519_pkcs8(seed: &[u8; 32]) -> Vec<u8> {
    let mut der = vec![
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    der.extend_from_slice(seed);
    der
}

/// A P-256 scalar as PKCS#8 (RFC 5958) holding an RFC 5915 `ECPrivateKey`
/// without its optional members, under `id-ecPublicKey` and `prime256v1`
/// (RFC 5480): the form `jsonwebtoken::EncodingKey::from_ec_der` reads.
fn p256_pkcs8(scalar: &[u8; 32]) -> Vec<u8> {
    let mut der = vec![
        0x30, 0x41, 0x02, 0x01, 0x00, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02,
        0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x04, 0x27, 0x30, 0x25,
        0x02, 0x01, 0x01, 0x04, 0x20,
    ];
    der.extend_from_slice(scalar);
    der
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

/// One asymmetric algorithm's figures: everything its group needs, built
/// before any timed loop.
struct Asymmetric {
    alg: Algorithm,
    kid: &'static str,
    keyring: Keyring,
    /// Our token and its signing input (`header.payload`) and signature.
    token: String,
    signing_input: String,
    signature: [u8; 64],
    /// `jsonwebtoken`'s keys and validation for the same key pair, and its
    /// token for the same claims.
    peer_alg: jsonwebtoken::Algorithm,
    enc: jsonwebtoken::EncodingKey,
    dec: jsonwebtoken::DecodingKey,
    peer_token: String,
}

impl Asymmetric {
    fn new(
        alg: Algorithm,
        kid: &'static str,
        peer_alg: jsonwebtoken::Algorithm,
        enc: jsonwebtoken::EncodingKey,
        dec: impl FnOnce(&serde_json::Value) -> jsonwebtoken::DecodingKey,
    ) -> Self {
        let keyring = asymmetric_keyring();
        let now = Timestamp::from_secs(NOW.unsigned_abs());
        let claims = claims();
        let token = keyring
            .sign_ref_with(alg, TokenType::AccessToken, &claims.as_ref(), now)
            .unwrap();
        let token = token.expose_secret().to_string();
        let (signing_input, signature) = token.rsplit_once('.').unwrap();
        let signature: [u8; 64] =
            base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, signature)
                .unwrap()
                .try_into()
                .unwrap();
        // The published JWK of the key: `jsonwebtoken` verifies with its
        // components, as a resource server would.
        let set: serde_json::Value = serde_json::from_str(&keyring.public_key_set(now)).unwrap();
        let jwk = set["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["kid"] == kid)
            .unwrap();
        let dec = dec(jwk);
        let peer_token =
            jsonwebtoken::encode(&peer_header(peer_alg, kid), &peer_claims(), &enc).unwrap();
        let this = Self {
            alg,
            kid,
            keyring,
            signing_input: signing_input.to_string(),
            signature,
            token,
            peer_alg,
            enc,
            dec,
            peer_token,
        };
        // Same key pair, same claims: each side accepts the other's token.
        let expect = Validation::new(TokenType::AccessToken, AUD).issuer(ISS);
        assert_eq!(
            this.keyring
                .verify(&this.peer_token, &expect, now)
                .unwrap()
                .kid,
            kid
        );
        jsonwebtoken::decode::<PeerClaims>(&this.token, &this.dec, &this.peer_validation())
            .unwrap();
        this
    }

    fn peer_validation(&self) -> jsonwebtoken::Validation {
        let mut validation = jsonwebtoken::Validation::new(self.peer_alg);
        validation.set_audience(&[AUD]);
        validation.set_issuer(&[ISS]);
        validation.validate_exp = false;
        validation
    }

    /// `Keyring::sign_ref_with` and `verify_with` (borrowed claims) and
    /// `jsonwebtoken`'s encode and decode of the same claims, in `g`.
    fn bench(&self, g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>) {
        let now = Timestamp::from_secs(NOW.unsigned_abs());
        let claims = claims();
        let claims_ref = claims.as_ref();
        let expect = Validation::new(TokenType::AccessToken, AUD).issuer(ISS);
        let header = peer_header(self.peer_alg, self.kid);
        let validation = self.peer_validation();
        let peer = peer_claims();
        g.bench_function("portcullis_sign", |b| {
            b.iter(|| {
                self.keyring
                    .sign_ref_with(
                        self.alg,
                        TokenType::AccessToken,
                        black_box(&claims_ref),
                        now,
                    )
                    .unwrap()
            });
        });
        g.bench_function("jsonwebtoken_encode", |b| {
            b.iter(|| jsonwebtoken::encode(&header, black_box(&peer), &self.enc).unwrap());
        });
        g.bench_function("portcullis_verify_borrowed", |b| {
            b.iter(|| {
                self.keyring
                    .verify_with(black_box(&self.token), &expect, now, |v| v.claims.exp)
                    .unwrap()
            });
        });
        g.bench_function("jsonwebtoken_decode", |b| {
            b.iter(|| {
                jsonwebtoken::decode::<PeerClaims>(
                    black_box(&self.peer_token),
                    &self.dec,
                    &validation,
                )
                .unwrap()
            });
        });
    }
}

/// `jsonwebtoken`'s header for our tokens: `alg`, `kid`, `typ: at+jwt`.
fn peer_header(alg: jsonwebtoken::Algorithm, kid: &str) -> jsonwebtoken::Header {
    let mut header = jsonwebtoken::Header::new(alg);
    header.kid = Some(kid.into());
    header.typ = Some("at+jwt".into());
    header
}

/// Ed25519: the floor is `ed25519-dalek`'s `SigningKey::sign` and
/// `VerifyingKey::verify_strict` (what `TokenKey` calls) over the signing
/// input; `jsonwebtoken` gets the seed as PKCS#8 and the JWK's `x`.
fn eddsa(c: &mut Criterion) {
    use ed25519_dalek::Signer as _;
    let a = Asymmetric::new(
        Algorithm::EdDsa,
        "ed-1",
        jsonwebtoken::Algorithm::EdDSA,
        jsonwebtoken::EncodingKey::from_ed_der(&ed25519_pkcs8(&ED_SEED)),
        |jwk| jsonwebtoken::DecodingKey::from_ed_components(jwk["x"].as_str().unwrap()).unwrap(),
    );
    let signing = ed25519_dalek::SigningKey::from_bytes(&ED_SEED);
    let verifying = signing.verifying_key();
    let signature = ed25519_dalek::Signature::from_bytes(&a.signature);
    let input = a.signing_input.as_bytes();
    assert_eq!(signing.sign(input), signature, "Ed25519 is deterministic");
    assert!(verifying.verify_strict(input, &signature).is_ok());
    let mut g = c.benchmark_group("eddsa");
    g.bench_function("floor_ed25519_dalek_sign", |b| {
        b.iter(|| signing.sign(black_box(input)));
    });
    g.bench_function("floor_ed25519_dalek_verify_strict", |b| {
        b.iter(|| {
            verifying
                .verify_strict(black_box(input), &signature)
                .is_ok()
        });
    });
    a.bench(&mut g);
    g.finish();
}

/// ECDSA P-256: the floor is `p256`'s `SigningKey::sign` (RFC 6979, what
/// `TokenKey` calls) and `VerifyingKey::verify` of a signature parsed before
/// the loop; `jsonwebtoken` gets the scalar as PKCS#8 and the JWK's `x`
/// and `y`.
fn es256(c: &mut Criterion) {
    use p256::ecdsa::signature::{Signer as _, Verifier as _};
    let a = Asymmetric::new(
        Algorithm::Es256,
        "ec-1",
        jsonwebtoken::Algorithm::ES256,
        jsonwebtoken::EncodingKey::from_ec_der(&p256_pkcs8(&EC_SCALAR)),
        |jwk| {
            jsonwebtoken::DecodingKey::from_ec_components(
                jwk["x"].as_str().unwrap(),
                jwk["y"].as_str().unwrap(),
            )
            .unwrap()
        },
    );
    let signing = p256::ecdsa::SigningKey::from_slice(&EC_SCALAR).unwrap();
    let verifying = *signing.verifying_key();
    let signature = p256::ecdsa::Signature::from_slice(&a.signature).unwrap();
    let input = a.signing_input.as_bytes();
    let ours: p256::ecdsa::Signature = signing.sign(input);
    assert_eq!(ours, signature, "RFC 6979 nonces: deterministic");
    assert!(verifying.verify(input, &signature).is_ok());
    let mut g = c.benchmark_group("es256");
    g.bench_function("floor_p256_sign", |b| {
        b.iter(|| -> p256::ecdsa::Signature { signing.sign(black_box(input)) });
    });
    g.bench_function("floor_p256_verify", |b| {
        b.iter(|| verifying.verify(black_box(input), &signature).is_ok());
    });
    a.bench(&mut g);
    g.finish();
}

const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";

/// An engine on `store` with `keyring`, one site whose access tokens are
/// signed with `alg`, one client and one grant.
fn engine_with_grant<S: Store>(
    store: S,
    keyring: Keyring,
    alg: Algorithm,
) -> (Engine<S>, SiteId, String, String, String) {
    let mut rng = StdRng::seed_from_u64(1);
    let now = Timestamp::from_secs(NOW.unsigned_abs());
    let engine = Engine::new(store, keyring, Policy::default());
    let site = SiteId::parse("bench").unwrap();
    let mut config = SiteConfig::new(site.clone(), "Bench", ISS, "https://app.example.com/mcp/");
    config.access_token_alg = alg;
    engine.create_site(Own, config, &mut rng, now).unwrap();
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
        .decide(Own, &site, &query, None, "user-42", true, &mut rng, now)
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
        .token(Own, &site, &body, HeaderField::ABSENT, &mut rng, now)
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
    let (engine, site, client_id, access, refresh) =
        engine_with_grant(MemoryStore::new(), keyring(), Algorithm::Hs256);
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
                    .token(
                        Own,
                        &site,
                        black_box(&body),
                        HeaderField::ABSENT,
                        &mut rng,
                        now,
                    )
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
    let (engine, site, _, access, _) = engine_with_grant(store, keyring(), Algorithm::Hs256);
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

/// The bearer check of an EdDSA access token in the process that holds the
/// store (`Engine::verify_bearer` on the memory store: signature, claims,
/// site and grant) beside a resource server in another process, which holds
/// only the published key set: a keyring made by `Keyring::from_key_set`,
/// the same `Authorization` header, signature and claim checks, the token's
/// scopes against the required one, no grant to read.
fn engine_eddsa(c: &mut Criterion) {
    let (engine, site, _, access, _) =
        engine_with_grant(MemoryStore::new(), asymmetric_keyring(), Algorithm::EdDsa);
    assert!(access.starts_with("eyJhbGciOiJFZERTQSIs"), "an EdDSA token");
    let now = Timestamp::from_secs(NOW.unsigned_abs());
    let set = JwkSet::parse(engine.keyring().public_key_set(now).as_bytes()).unwrap();
    let remote = Keyring::from_key_set(&set);
    let header = format!("Bearer {access}");
    let required = ScopeSet::parse("skills:read").unwrap();
    let resource = engine.site(&site).unwrap().resource();
    let expect = Validation::new(TokenType::AccessToken, resource).issuer(ISS);
    let (subject, _) =
        resource_server_check(&remote, HeaderField::one(&header), &expect, &required, now).unwrap();
    assert_eq!(subject, "user-42");
    let mut g = c.benchmark_group("eddsa_bearer");
    bearer_beside_bare_verify(&mut g, &engine, &site, &access);
    g.bench_function("resource_server_key_set_check", |b| {
        b.iter(|| {
            resource_server_check(
                &remote,
                HeaderField::one(black_box(&header)),
                &expect,
                &required,
                now,
            )
            .unwrap()
        });
    });
    g.finish();
}

/// What a resource server without the store checks: the bearer token of
/// `authorization`, its signature under `keys`, `expect`'s claims at `now`,
/// and that its scopes cover `required`. Answers the subject and scopes,
/// the parts of a `Principal` the token itself carries.
fn resource_server_check(
    keys: &Keyring,
    authorization: HeaderField<'_>,
    expect: &Validation,
    required: &ScopeSet,
    now: Timestamp,
) -> Option<(String, ScopeSet)> {
    let token = portcullis::bearer::parse_authorization(authorization).ok()??;
    keys.verify_with(token, expect, now, |v| {
        let scopes = ScopeSet::parse(v.claims.scope.as_deref().unwrap_or_default()).ok()?;
        let subject = v.claims.sub.as_deref()?;
        required
            .is_subset(&scopes)
            .then(|| (subject.to_owned(), scopes))
    })
    .ok()
    .flatten()
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

criterion_group!(
    benches,
    jwt,
    eddsa,
    es256,
    engine,
    engine_redb,
    engine_eddsa,
    redirect
);

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
        name: "eddsa_sign_over_floor",
        numerator: "eddsa/portcullis_sign",
        denominator: "eddsa/floor_ed25519_dalek_sign",
        op: "info",
        target: 1.1,
    },
    Ratio {
        name: "eddsa_sign_speedup_over_jsonwebtoken",
        numerator: "eddsa/jsonwebtoken_encode",
        denominator: "eddsa/portcullis_sign",
        op: "info",
        target: 1.0,
    },
    Ratio {
        name: "eddsa_verify_over_floor",
        numerator: "eddsa/portcullis_verify_borrowed",
        denominator: "eddsa/floor_ed25519_dalek_verify_strict",
        op: "info",
        target: 1.1,
    },
    Ratio {
        name: "eddsa_verify_speedup_over_jsonwebtoken",
        numerator: "eddsa/jsonwebtoken_decode",
        denominator: "eddsa/portcullis_verify_borrowed",
        op: "info",
        target: 1.0,
    },
    Ratio {
        name: "es256_sign_over_floor",
        numerator: "es256/portcullis_sign",
        denominator: "es256/floor_p256_sign",
        op: "info",
        target: 1.1,
    },
    Ratio {
        name: "es256_sign_speedup_over_jsonwebtoken",
        numerator: "es256/jsonwebtoken_encode",
        denominator: "es256/portcullis_sign",
        op: "info",
        target: 1.0,
    },
    Ratio {
        name: "es256_verify_over_floor",
        numerator: "es256/portcullis_verify_borrowed",
        denominator: "es256/floor_p256_verify",
        op: "info",
        target: 1.1,
    },
    Ratio {
        name: "es256_verify_speedup_over_jsonwebtoken",
        numerator: "es256/jsonwebtoken_decode",
        denominator: "es256/portcullis_verify_borrowed",
        op: "info",
        target: 1.0,
    },
    Ratio {
        name: "eddsa_bearer_over_bare_verify_memory",
        numerator: "eddsa_bearer/verify_bearer_with_grant_check",
        denominator: "eddsa_bearer/bare_jwt_verify",
        op: "info",
        target: 1.5,
    },
    Ratio {
        name: "eddsa_resource_server_over_verify_bearer",
        numerator: "eddsa_bearer/resource_server_key_set_check",
        denominator: "eddsa_bearer/verify_bearer_with_grant_check",
        op: "info",
        target: 1.0,
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
        "eddsa/floor_ed25519_dalek_sign",
        "eddsa/floor_ed25519_dalek_verify_strict",
        "eddsa/portcullis_sign",
        "eddsa/jsonwebtoken_encode",
        "eddsa/portcullis_verify_borrowed",
        "eddsa/jsonwebtoken_decode",
        "es256/floor_p256_sign",
        "es256/floor_p256_verify",
        "es256/portcullis_sign",
        "es256/jsonwebtoken_encode",
        "es256/portcullis_verify_borrowed",
        "es256/jsonwebtoken_decode",
        "engine_memory/bare_jwt_verify",
        "engine_memory/verify_bearer_with_grant_check",
        "engine_memory/refresh_rotation",
        "engine_redb/bare_jwt_verify",
        "engine_redb/verify_bearer_with_grant_check",
        "eddsa_bearer/bare_jwt_verify",
        "eddsa_bearer/verify_bearer_with_grant_check",
        "eddsa_bearer/resource_server_key_set_check",
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
