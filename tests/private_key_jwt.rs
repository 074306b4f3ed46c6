//! `private_key_jwt` (RFC 7523 §2.2) for clients identified by a metadata
//! document, through the public API on every store: ChatGPT's document in
//! both published forms (docs/clients.md), the code exchange and refreshes
//! with a signed assertion, and everything that must be refused with
//! nothing issued and nothing changed.

use portcullis::Own;
use portcullis::authorize::AuthorizeAnswer;
use portcullis::client::assertion::{AssertionError, PresentedAssertion, VerifiedAssertion};
use portcullis::client::{self, Client, TokenEndpointAuthMethod};
use portcullis::form::{Form, encode_pairs};
use portcullis::header::HeaderField;
use portcullis::jwk::JwkSet;
use portcullis::pkce::{CodeChallenge, CodeVerifier};
use portcullis::store::Store;
use portcullis::token::{ClientAuthentication, TokenError, TokenResponse};
use serde_json::json;

use crate::client_keys::{ClientKey, claims};
use crate::oauth::{USER, VERIFIER, World, redirect_param};
use crate::on_every_store;

/// ChatGPT's per-connector document, as Altinity/altinity-mcp#118 published
/// it (2026-05-15), under a test client id and redirect.
const CLIENT_ID: &str = "https://chatgpt.example/oauth/kDmjx77UnKOM/client.json";
const REDIRECT: &str = "https://chatgpt.example/connector/oauth/kDmjx77UnKOM";
const ISSUER: &str = "https://app.example.com";
const TOKEN_ENDPOINT: &str = "https://app.example.com/token";

fn per_connector_document() -> String {
    json!({
        "client_id": CLIENT_ID,
        "client_uri": "https://chatgpt.example/",
        "redirect_uris": [REDIRECT],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "client_name": "ChatGPT",
        "token_endpoint_auth_method": "private_key_jwt",
        "token_endpoint_auth_signing_alg": "RS256",
        "jwks_uri": "https://chatgpt.example/oauth/jwks.json",
    })
    .to_string()
}

/// The stable-URL form (django-oauth/django-oauth-toolkit#1857), which
/// also lists RP Metadata Choices.
fn stable_document() -> String {
    json!({
        "client_id": CLIENT_ID,
        "redirect_uris": [REDIRECT],
        "token_endpoint_auth_method": "private_key_jwt",
        "token_endpoint_auth_methods_supported": ["none", "private_key_jwt"],
        "client_name": "ChatGPT",
        "logo_uri": "https://persistent.example/sonic/misc/openai-logo.png",
        "token_endpoint_auth_signing_alg": "RS256",
        "jwks_uri": "https://chatgpt.example/oauth/jwks.json",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
    })
    .to_string()
}

/// A document client with its keys, over a [`World`].
struct AssertionClient<'k> {
    document: String,
    keys: String,
    key: &'k ClientKey,
}

impl AssertionClient<'_> {
    fn client(&self) -> Client {
        let url = client::parse_client_id_url(CLIENT_ID).unwrap();
        client::validate_document(&url, self.document.as_bytes()).unwrap()
    }

    /// What the host does with a token request's assertion: read it, check
    /// it against the document and the key set.
    fn verify(&self, body: &str, now: u64) -> Result<VerifiedAssertion, AssertionError> {
        let form = Form::parse(body, 16 * 1024).unwrap();
        let presented = PresentedAssertion::read(&form)?.expect("an assertion");
        assert_eq!(presented.client_id(), CLIENT_ID);
        presented.verify(
            &self.client(),
            &JwkSet::parse(self.keys.as_bytes()).unwrap(),
            &[ISSUER, TOKEN_ENDPOINT],
            portcullis::Timestamp::from_secs(now),
            std::time::Duration::from_secs(5),
        )
    }
}

fn query<S: Store>(w: &World<S>) -> String {
    let challenge =
        CodeChallenge::from_verifier(CodeVerifier::parse(VERIFIER).unwrap()).to_base64url();
    encode_pairs([
        ("response_type", "code"),
        ("client_id", CLIENT_ID),
        ("redirect_uri", REDIRECT),
        ("state", "s"),
        ("code_challenge", challenge.as_str()),
        ("code_challenge_method", "S256"),
        ("resource", w.resource().as_str()),
        ("scope", "skills:read"),
    ])
}

fn code<S: Store>(w: &mut World<S>, document: &str) -> String {
    let answer = w
        .engine
        .decide(
            Own,
            &w.site,
            &query(w),
            Some(document.as_bytes()),
            USER,
            true,
            &mut w.rng,
            w.now,
        )
        .unwrap();
    let AuthorizeAnswer::Redirect(url) = answer else {
        panic!("no code: {answer:?}")
    };
    redirect_param(&url, "code").unwrap()
}

/// A token request with `assertion` (none: without), verified by the host
/// first when there is one.
fn token<S: Store>(
    w: &mut World<S>,
    c: &AssertionClient<'_>,
    pairs: &[(&str, &str)],
    assertion: Option<&str>,
) -> Result<TokenResponse, TokenError> {
    let mut pairs = pairs.to_vec();
    if let Some(a) = assertion {
        pairs.push((
            "client_assertion_type",
            "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
        ));
        pairs.push(("client_assertion", a));
    } else {
        pairs.push(("client_id", CLIENT_ID));
    }
    let body = encode_pairs(pairs);
    if assertion.is_none() {
        return w
            .engine
            .token(Own, &w.site, &body, HeaderField::ABSENT, &mut w.rng, w.now);
    }
    let verified = c
        .verify(&body, w.now.as_secs())
        .map_err(TokenError::ClientAssertion)?;
    w.engine.token(
        Own,
        &w.site,
        &body,
        ClientAuthentication::assertion(HeaderField::ABSENT, &verified),
        &mut w.rng,
        w.now,
    )
}

fn exchange_pairs(code: &str) -> [(&str, &str); 4] {
    [
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", REDIRECT),
        ("code_verifier", VERIFIER),
    ]
}

fn refresh_pairs(refresh: &str) -> [(&str, &str); 2] {
    [("grant_type", "refresh_token"), ("refresh_token", refresh)]
}

/// Both published forms of ChatGPT's document, through the code exchange
/// and two refreshes, each with a fresh RS256 assertion.
fn chatgpt_documents_exchange_and_refresh_with_rs256_assertions<S: Store>(store: &S) {
    let key = ClientKey::rs256("cimd-20260428030119");
    let mut w = World::new(store);
    for document in [per_connector_document(), stable_document()] {
        let c = AssertionClient {
            keys: ClientKey::jwks(&[&key]),
            document,
            key: &key,
        };
        assert_eq!(
            c.client().metadata().token_endpoint_auth_method,
            TokenEndpointAuthMethod::PrivateKeyJwt
        );
        let code = code(&mut w, &c.document);
        let now = w.now.as_secs();
        let t = token(
            &mut w,
            &c,
            &exchange_pairs(&code),
            Some(&c.key.assertion(CLIENT_ID, TOKEN_ENDPOINT, now)),
        )
        .unwrap();
        let mut refresh = t.refresh_token.expose_secret().to_string();
        for aud in [ISSUER, TOKEN_ENDPOINT] {
            w.advance(300);
            let now = w.now.as_secs();
            let next = token(
                &mut w,
                &c,
                &refresh_pairs(&refresh),
                Some(&c.key.assertion(CLIENT_ID, aud, now)),
            )
            .unwrap();
            assert!(w.bearer(&next, "skills:read").is_ok());
            refresh = next.refresh_token.expose_secret().to_string();
        }
    }
}

/// Every algorithm of the allow-list verifies: `PS256`, `ES256`, `EdDSA`.
fn every_accepted_algorithm_authenticates<S: Store>(store: &S) {
    let mut w = World::new(store);
    for key in [
        ClientKey::ps256("p"),
        ClientKey::es256("e"),
        ClientKey::eddsa("d"),
    ] {
        let mut document: serde_json::Value =
            serde_json::from_str(&per_connector_document()).unwrap();
        document
            .as_object_mut()
            .unwrap()
            .remove("token_endpoint_auth_signing_alg");
        let c = AssertionClient {
            document: document.to_string(),
            keys: ClientKey::jwks(&[&key]),
            key: &key,
        };
        let code = code(&mut w, &c.document);
        let now = w.now.as_secs();
        let t = token(
            &mut w,
            &c,
            &exchange_pairs(&code),
            Some(&key.assertion(CLIENT_ID, ISSUER, now)),
        );
        assert!(t.is_ok(), "{}: {t:?}", key.kid());
    }
}

/// What the issue's acceptance lists as refused: forged, expired, replayed
/// (`jti`), wrong-audience and `alg: none` / HS256 assertions; and a code
/// or refresh token of an assertion client presented without one. Each
/// time nothing is issued and nothing changes: the code and the refresh
/// token still work afterwards.
fn bad_assertions_are_refused_and_change_nothing<S: Store>(store: &S) {
    let key = ClientKey::rs256("k1");
    let other = ClientKey::es256("k1");
    let mut w = World::new(store);
    let c = AssertionClient {
        document: per_connector_document(),
        keys: ClientKey::jwks(&[&key]),
        key: &key,
    };
    let code = code(&mut w, &c.document);
    let now = w.now.as_secs();
    let good = |exp_offset: i64, aud: &str, jti: &str| {
        let mut claims = claims(CLIENT_ID, aud, now);
        claims["exp"] = json!(now.checked_add_signed(exp_offset).unwrap());
        claims["jti"] = json!(jti);
        claims
    };
    let hs256 = {
        // An HMAC "signature" keyed with the public key's modulus: the
        // classic confusion, refused by alg before any key is used.
        let header = json!({"alg": "HS256", "kid": "k1"});
        key.sign_with_header(&header, &good(60, ISSUER, "hs"))
    };
    let none = {
        let parts: Vec<String> = [
            json!({"alg": "none"}).to_string(),
            good(60, ISSUER, "none").to_string(),
        ]
        .iter()
        .map(|p| base64_url(p.as_bytes()))
        .collect();
        format!("{}.{}.", parts[0], parts[1])
    };
    let forged = {
        let real = key.sign(&good(60, ISSUER, "forged"));
        let (head, sig) = real.rsplit_once('.').unwrap();
        let mut sig =
            base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, sig).unwrap();
        sig[10] ^= 1;
        format!("{head}.{}", base64_url(&sig))
    };
    let cases: Vec<(&str, String, AssertionError)> = vec![
        ("forged signature", forged, AssertionError::BadSignature),
        (
            "another key under the same kid",
            other.sign_with_header(
                &json!({"alg": "RS256", "kid": "k1"}),
                &good(60, ISSUER, "o"),
            ),
            AssertionError::BadSignature,
        ),
        (
            "expired",
            key.sign(&good(-10, ISSUER, "e")),
            AssertionError::Expired,
        ),
        (
            "wrong audience",
            key.sign(&good(60, "https://other.example/token", "a")),
            AssertionError::WrongAudience,
        ),
        (
            "an audience array naming another server too",
            key.sign(&{
                let mut c = good(60, ISSUER, "arr");
                c["aud"] = json!([ISSUER, "https://other.example"]);
                c
            }),
            AssertionError::WrongAudience,
        ),
        (
            "exp two hours ahead",
            key.sign(&good(7_200, ISSUER, "long")),
            AssertionError::LifetimeTooLong,
        ),
        ("alg none", none, AssertionError::UnsupportedAlgorithm),
        ("alg HS256", hs256, AssertionError::UnsupportedAlgorithm),
        (
            "ES256 where the document pins RS256",
            other.sign_with_header(
                &json!({"alg": "ES256", "kid": "k1"}),
                &good(60, ISSUER, "p"),
            ),
            AssertionError::UnsupportedAlgorithm,
        ),
        (
            "unknown kid",
            key.sign_with_header(
                &json!({"alg": "RS256", "kid": "k2"}),
                &good(60, ISSUER, "k"),
            ),
            AssertionError::UnknownKid,
        ),
        (
            "sub another client",
            key.sign(&{
                let mut c = good(60, ISSUER, "sub");
                c["sub"] = json!("https://other.example/client.json");
                c
            }),
            AssertionError::WrongSubject,
        ),
        (
            "no jti",
            key.sign(&{
                let mut c = good(60, ISSUER, "x");
                c.as_object_mut().unwrap().remove("jti");
                c
            }),
            AssertionError::MissingJti,
        ),
    ];
    for (what, assertion, error) in &cases {
        let answer = token(&mut w, &c, &exchange_pairs(&code), Some(assertion));
        assert_eq!(
            answer.unwrap_err(),
            TokenError::ClientAssertion(*error),
            "{what}"
        );
    }
    // Without an assertion the code is refused, unspent.
    assert_eq!(
        token(&mut w, &c, &exchange_pairs(&code), None).unwrap_err(),
        TokenError::InvalidClient { basic: false }
    );
    // The code still works with a good assertion, and that assertion's
    // jti works once.
    let good = key.assertion(CLIENT_ID, ISSUER, now);
    let t = token(&mut w, &c, &exchange_pairs(&code), Some(&good)).unwrap();
    let refresh = t.refresh_token.expose_secret().to_string();
    assert_eq!(
        token(&mut w, &c, &refresh_pairs(&refresh), Some(&good)).unwrap_err(),
        TokenError::ClientAssertion(AssertionError::Replayed),
        "a replayed jti"
    );
    // A stolen refresh token without the private key: refused, nothing
    // revoked or rotated (the same token then refreshes with an assertion).
    assert_eq!(
        token(&mut w, &c, &refresh_pairs(&refresh), None).unwrap_err(),
        TokenError::InvalidClient { basic: false }
    );
    let next = token(
        &mut w,
        &c,
        &refresh_pairs(&refresh),
        Some(&key.assertion(CLIENT_ID, ISSUER, now)),
    )
    .unwrap();
    assert!(w.bearer(&next, "skills:read").is_ok());
    // A used jti is forgotten once its assertion expired and the sweep ran.
    w.advance(3_600);
    w.engine.sweep(Own, w.now, 1_000).unwrap();
}

/// A key set the client rotated: the host refetches on an unknown `kid`
/// and the new key verifies; a set over the size bound is refused whole.
fn key_sets_are_bounded_and_rotate<S: Store>(store: &S) {
    let old = ClientKey::rs256("2026-01");
    let new = ClientKey::es256("2026-02");
    let mut w = World::new(store);
    let mut document: serde_json::Value = serde_json::from_str(&per_connector_document()).unwrap();
    document
        .as_object_mut()
        .unwrap()
        .remove("token_endpoint_auth_signing_alg");
    let mut c = AssertionClient {
        document: document.to_string(),
        keys: ClientKey::jwks(&[&old]),
        key: &new,
    };
    let code = code(&mut w, &c.document);
    let now = w.now.as_secs();
    let assertion = new.assertion(CLIENT_ID, ISSUER, now);
    assert_eq!(
        token(&mut w, &c, &exchange_pairs(&code), Some(&assertion)).unwrap_err(),
        TokenError::ClientAssertion(AssertionError::UnknownKid),
        "the cached set predates the new key: the host fetches it again"
    );
    c.keys = ClientKey::jwks(&[&old, &new]);
    assert!(token(&mut w, &c, &exchange_pairs(&code), Some(&assertion)).is_ok());
    let huge = format!(
        r#"{{"keys":[{}],"pad":"{}"}}"#,
        old.jwk(),
        "x".repeat(portcullis::jwk::MAX_KEY_SET_LEN)
    );
    assert_eq!(
        JwkSet::parse(huge.as_bytes()),
        Err(portcullis::jwk::JwkError::TooLarge)
    );
}

fn base64_url(bytes: &[u8]) -> String {
    base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, bytes)
}

on_every_store!(
    chatgpt_documents_exchange_and_refresh_with_rs256_assertions,
    every_accepted_algorithm_authenticates,
    bad_assertions_are_refused_and_change_nothing,
    key_sets_are_bounded_and_rotate,
);
