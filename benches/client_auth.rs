//! What `private_key_jwt` costs a token request: a refresh of a public
//! client beside the same refresh of a client that authenticates with a
//! signed assertion (RS256, ES256, EdDSA), the client's metadata document
//! and key set already cached (parsed once, as the host keeps them). Each
//! measured request is the host's whole work: reading the assertion from the
//! form, checking it (signature and claims), and the token operation
//! (accepting its `jti`, rotating the grant, signing the access token) on
//! the memory store. Assertions are signed outside the timed loop.
//!
//! `cargo bench --bench client_auth`; the figures are in docs/figures.md.

#![allow(missing_docs, reason = "a benchmark binary")]
#![allow(clippy::unwrap_used, reason = "a benchmark fails loudly")]

use std::cell::RefCell;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use portcullis::authorize::AuthorizeAnswer;
use portcullis::client::assertion::PresentedAssertion;
use portcullis::client::{self, Client};
use portcullis::engine::Engine;
use portcullis::form::{Form, encode_pairs};
use portcullis::header::HeaderField;
use portcullis::jwk::JwkSet;
use portcullis::jwt::{Keyring, SigningKey};
use portcullis::pkce::{CodeChallenge, CodeVerifier};
use portcullis::site::{SiteConfig, SiteId};
use portcullis::store::MemoryStore;
use portcullis::token::ClientAuthentication;
use portcullis::{Own, Policy, Timestamp};
use serde_json::json;

#[path = "../tests/client_keys.rs"]
mod client_keys;
use client_keys::ClientKey;

const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const ISSUER: &str = "https://app.example.com";
const REDIRECT: &str = "https://client.example/cb";
const DOC: &str = "https://client.example/oauth/client.json";
const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

struct Bench {
    engine: Engine<MemoryStore>,
    site: SiteId,
    now: Timestamp,
    resource: String,
}

fn bench_engine() -> Bench {
    let mut keyring = Keyring::new();
    keyring
        .insert("k1", SigningKey::from_bytes(&[0x11; 32]).unwrap())
        .unwrap();
    keyring.set_active("k1").unwrap();
    let engine = Engine::new(MemoryStore::new(), keyring, Policy::default());
    let site = SiteId::parse("demo").unwrap();
    let now = Timestamp::from_secs(1_800_000_000);
    engine
        .create_site(
            Own,
            SiteConfig::new(site.clone(), "Demo", ISSUER, "https://app.example.com/mcp/"),
            &mut rand::rng(),
            now,
        )
        .unwrap();
    let resource = engine.site(&site).unwrap().resource();
    Bench {
        engine,
        site,
        now,
        resource,
    }
}

/// A code for `client_id` (its metadata document `document` when given).
fn code(b: &Bench, client_id: &str, document: Option<&[u8]>) -> String {
    let challenge =
        CodeChallenge::from_verifier(CodeVerifier::parse(VERIFIER).unwrap()).to_base64url();
    let query = encode_pairs([
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", REDIRECT),
        ("state", "s"),
        ("code_challenge", challenge.as_str()),
        ("code_challenge_method", "S256"),
        ("resource", b.resource.as_str()),
        ("scope", "skills:read"),
    ]);
    let AuthorizeAnswer::Redirect(url) = b
        .engine
        .decide(
            Own,
            &b.site,
            &query,
            document,
            "u",
            true,
            &mut rand::rng(),
            b.now,
        )
        .unwrap()
    else {
        panic!("no code")
    };
    let form = Form::parse(url.split_once('?').unwrap().1, 4096).unwrap();
    form.get("code").unwrap().to_owned()
}

/// The host's work for one token request with an assertion.
fn with_assertion(b: &Bench, client: &Client, keys: &JwkSet, body: &str) -> String {
    let form = Form::parse(body, 16 * 1024).unwrap();
    let presented = PresentedAssertion::read(&form).unwrap().unwrap();
    let verified = presented
        .verify(
            client,
            keys,
            &[ISSUER, "https://app.example.com/token"],
            b.now,
            Duration::from_secs(5),
        )
        .unwrap();
    let tokens = b
        .engine
        .token(
            Own,
            &b.site,
            body,
            ClientAuthentication::assertion(HeaderField::ABSENT, &verified),
            &mut rand::rng(),
            b.now,
        )
        .unwrap();
    tokens.refresh_token.expose_secret().to_owned()
}

type Group<'a> = criterion::BenchmarkGroup<'a, criterion::measurement::WallTime>;

fn refreshes(c: &mut Criterion) {
    let mut group = c.benchmark_group("token_request");
    public_client(&mut group);
    assertion_clients(&mut group);
    group.finish();
}

/// A public client (registered, no secret): the floor.
fn public_client(group: &mut Group<'_>) {
    {
        let b = bench_engine();
        let registered = b
            .engine
            .register_client(
                format!(r#"{{"redirect_uris":["{REDIRECT}"],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"]}}"#).as_bytes(),
                &mut rand::rng(),
                b.now,
            )
            .unwrap();
        let id = registered.client_id;
        let code = code(&b, &id, None);
        let first = b
            .engine
            .token(
                Own,
                &b.site,
                &encode_pairs([
                    ("grant_type", "authorization_code"),
                    ("code", code.as_str()),
                    ("redirect_uri", REDIRECT),
                    ("client_id", id.as_str()),
                    ("code_verifier", VERIFIER),
                ]),
                HeaderField::ABSENT,
                &mut rand::rng(),
                b.now,
            )
            .unwrap();
        let current = RefCell::new(first.refresh_token.expose_secret().to_owned());
        group.bench_function("refresh, public client", |bench| {
            bench.iter_batched(
                || {
                    encode_pairs([
                        ("grant_type", "refresh_token"),
                        ("refresh_token", current.borrow().as_str()),
                        ("client_id", id.as_str()),
                    ])
                },
                |body| {
                    let t = b
                        .engine
                        .token(
                            Own,
                            &b.site,
                            &body,
                            HeaderField::ABSENT,
                            &mut rand::rng(),
                            b.now,
                        )
                        .unwrap();
                    t.refresh_token
                        .expose_secret()
                        .clone_into(&mut current.borrow_mut());
                },
                BatchSize::SmallInput,
            );
        });
    }
}

/// A `private_key_jwt` client of each algorithm.
fn assertion_clients(group: &mut Group<'_>) {
    for key in [
        ClientKey::rs256("r"),
        ClientKey::es256("e"),
        ClientKey::eddsa("d"),
    ] {
        let b = bench_engine();
        let document = json!({
            "client_id": DOC,
            "redirect_uris": [REDIRECT],
            "grant_types": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_method": "private_key_jwt",
            "jwks_uri": "https://client.example/oauth/jwks.json",
        })
        .to_string();
        let url = client::parse_client_id_url(DOC).unwrap();
        let client = client::validate_document(&url, document.as_bytes()).unwrap();
        let keys = JwkSet::parse(ClientKey::jwks(&[&key]).as_bytes()).unwrap();
        let code = code(&b, DOC, Some(document.as_bytes()));
        let now = b.now.as_secs();
        let assertion = key.assertion(DOC, ISSUER, now);
        let first = with_assertion(
            &b,
            &client,
            &keys,
            &encode_pairs([
                ("grant_type", "authorization_code"),
                ("code", code.as_str()),
                ("redirect_uri", REDIRECT),
                ("code_verifier", VERIFIER),
                ("client_assertion_type", JWT_BEARER),
                ("client_assertion", assertion.as_str()),
            ]),
        );
        let current = RefCell::new(first);
        let name = format!(
            "refresh, private_key_jwt {}",
            key.jwk()["alg"].as_str().unwrap()
        );
        group.bench_function(name, |bench| {
            bench.iter_batched(
                || {
                    let assertion = key.assertion(DOC, ISSUER, now);
                    encode_pairs([
                        ("grant_type", "refresh_token"),
                        ("refresh_token", current.borrow().as_str()),
                        ("client_assertion_type", JWT_BEARER),
                        ("client_assertion", assertion.as_str()),
                    ])
                },
                |body| *current.borrow_mut() = with_assertion(&b, &client, &keys, &body),
                BatchSize::SmallInput,
            );
        });
    }
}

criterion_group!(benches, refreshes);
criterion_main!(benches);
