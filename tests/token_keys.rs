//! Access tokens other services can check, through the public API on every
//! store: a site that signs with Ed25519 or ECDSA P-256, the key set it
//! publishes, a resource server that holds only that set, and routine
//! rotation on a schedule while agents stay connected (nobody asked to
//! consent again, old tokens verifying until they expire, refreshes going
//! on), beside the emergency path that revokes everything.

use std::time::Duration;

use portcullis::engine::BearerRejection;
use portcullis::jwk::JwkSet;
use portcullis::jwt::{Algorithm, Keyring, SigningKey, TokenKey, TokenType, Validation};
use portcullis::site::SiteConfig;
use portcullis::store::Store;
use portcullis::token::TokenResponse;
use portcullis::{Own, Policy, Timestamp};

use crate::oauth::World;
use crate::on_every_store;

fn keyring() -> Keyring {
    let mut k = crate::oauth::keyring();
    k.insert_token_key("ed-1", TokenKey::ed25519(&[0x21; 32]))
        .unwrap();
    k.insert_token_key("ec-1", TokenKey::es256(&[0x22; 32]).unwrap())
        .unwrap();
    k.set_active("ed-1").unwrap();
    k.set_active("ec-1").unwrap();
    k
}

/// A world whose site signs with `alg`.
fn world<S: Store>(store: S, alg: Algorithm, keyring: Keyring) -> World<S> {
    let w = World::with_keyring(store, Policy::default(), keyring);
    sign_with(&w, alg);
    w
}

/// The site of `w` signs with `alg` from now on.
fn sign_with<S: Store>(w: &World<S>, alg: Algorithm) {
    let mut config = SiteConfig::new(
        w.site.clone(),
        "Demo",
        "https://app.example.com",
        "https://app.example.com/mcp/",
    );
    config.access_token_alg = alg;
    w.engine.update_site(Own, config).unwrap();
}

fn header(token: &TokenResponse) -> serde_json::Value {
    let segment = token
        .access_token
        .expose_secret()
        .split('.')
        .next()
        .unwrap();
    let bytes =
        base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, segment).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// What a resource server in another process does with a token: verify it
/// against the published key set, the site's issuer and its resource.
fn remote_check<S: Store>(
    w: &World<S>,
    set: &str,
    token: &TokenResponse,
) -> Result<String, portcullis::jwt::VerifyError> {
    let keys = Keyring::from_key_set(&JwkSet::parse(set.as_bytes()).unwrap());
    let expect =
        Validation::new(TokenType::AccessToken, w.resource()).issuer("https://app.example.com");
    keys.verify(token.access_token.expose_secret(), &expect, w.now)
        .map(|v| v.kid)
}

/// Each asymmetric algorithm: the token names its key and algorithm, the
/// host's own bearer check and a resource server holding only the
/// published set both accept it; a token for another resource or from
/// another issuer is refused remotely; HS256 sites' tokens verify nowhere
/// but at home.
fn asymmetric_access_tokens_verify_with_the_published_set<S: Store>(store: &S) {
    let mut w = world(store, Algorithm::EdDsa, keyring());
    for (alg, kid) in [(Algorithm::EdDsa, "ed-1"), (Algorithm::Es256, "ec-1")] {
        sign_with(&w, alg);
        let t = w.login();
        let h = header(&t);
        assert_eq!(
            (h["alg"].as_str(), h["kid"].as_str()),
            (Some(alg.as_str()), Some(kid))
        );
        assert_eq!(h["typ"], "at+jwt");
        assert!(w.bearer(&t, "skills:read").is_ok());
        let set = w.engine.keyring().public_key_set(w.now);
        assert_eq!(remote_check(&w, &set, &t).as_deref(), Ok(kid));
        let keys = Keyring::from_key_set(&JwkSet::parse(set.as_bytes()).unwrap());
        let other_resource =
            Validation::new(TokenType::AccessToken, "https://app.example.com/mcp/other")
                .issuer("https://app.example.com");
        assert!(
            keys.verify(t.access_token.expose_secret(), &other_resource, w.now)
                .is_err()
        );
        let other_issuer =
            Validation::new(TokenType::AccessToken, w.resource()).issuer("https://evil.example");
        assert!(
            keys.verify(t.access_token.expose_secret(), &other_issuer, w.now)
                .is_err()
        );
        // A refresh keeps signing with the site's algorithm.
        w.advance(60);
        let next = w.refresh(t.refresh_token.expose_secret()).unwrap();
        assert_eq!(header(&next)["alg"], alg.as_str());
        assert!(w.bearer(&next, "skills:read").is_ok());
        // Back to HS256: the next token verifies only at home.
        sign_with(&w, Algorithm::Hs256);
        w.advance(60);
        let hs = w.refresh(next.refresh_token.expose_secret()).unwrap();
        assert_eq!(header(&hs)["alg"], "HS256");
        assert!(w.bearer(&hs, "skills:read").is_ok());
        assert!(remote_check(&w, &set, &hs).is_err());
    }
}

/// Routine rotation with three agents connected: the new key is published
/// an hour before it signs; tokens signed by the old key verify (at home
/// and remotely) until they expire; new tokens carry the new `kid`;
/// refreshes keep working across the switch and nobody consents again;
/// the old key then retires. The emergency path (a new site key) still
/// revokes every grant at once.
fn routine_rotation_logs_nobody_out<S: Store>(store: &S) {
    let mut k = crate::oauth::keyring();
    k.insert_token_key("ed-1", TokenKey::ed25519(&[0x21; 32]))
        .unwrap();
    k.schedule("ed-1", Timestamp::EPOCH, None).unwrap();
    let mut w = world(store, Algorithm::EdDsa, k.clone());
    let agents: Vec<TokenResponse> = (0..3).map(|_| w.login()).collect();
    let start = w.now;
    // The rotation: published now, signing in an hour, the old key retired
    // an access token's life (plus the leeway) after that.
    let ttl = Policy::default().access_token_ttl + Policy::default().jwt_leeway;
    let switch = start.saturating_add(Duration::from_hours(1));
    k.insert_token_key("ed-2", TokenKey::ed25519(&[0x23; 32]))
        .unwrap();
    k.schedule("ed-2", switch, None).unwrap();
    k.schedule("ed-1", Timestamp::EPOCH, Some(switch.saturating_add(ttl)))
        .unwrap();
    // The host reloads its keys: an engine over the same store.
    w.engine = portcullis::Engine::new(store, k, Policy::default());
    let published = w.engine.keyring().public_key_set(w.now);
    assert!(published.contains("ed-2"), "published before it signs");
    for a in &agents {
        assert!(w.bearer(a, "skills:read").is_ok(), "nothing changed yet");
        assert_eq!(remote_check(&w, &published, a).as_deref(), Ok("ed-1"));
    }
    // Agents 1 and 2 refresh long before the switch (under the old key)...
    let mut current = agents.clone();
    for t in &mut current[1..] {
        w.advance(1);
        *t = w.refresh(t.refresh_token.expose_secret()).unwrap();
        assert_eq!(header(t)["kid"], "ed-1");
    }
    // ...and agent 0 just before it: that token verifies after the switch,
    // until it expires.
    w.now = switch.saturating_sub(Duration::from_secs(10));
    let last_old = w.refresh(current[0].refresh_token.expose_secret()).unwrap();
    assert_eq!(header(&last_old)["kid"], "ed-1");
    w.advance(20);
    assert!(w.bearer(&last_old, "skills:read").is_ok());
    assert_eq!(
        remote_check(&w, &published, &last_old).as_deref(),
        Ok("ed-1")
    );
    current[0] = w.refresh(last_old.refresh_token.expose_secret()).unwrap();
    assert_eq!(header(&current[0])["kid"], "ed-2");
    // Every agent refreshes across the switch (the other two with
    // refresh tokens from an hour ago, as idle agents do).
    while w.now < switch.saturating_add(Duration::from_mins(15)) {
        w.advance(290);
        for t in &mut current {
            *t = w.refresh(t.refresh_token.expose_secret()).unwrap();
            assert!(w.bearer(t, "skills:read").is_ok());
        }
    }
    for t in &current {
        assert_eq!(header(t)["kid"], "ed-2");
        assert_eq!(remote_check(&w, &published, t).as_deref(), Ok("ed-2"));
    }
    // The old key is retired and gone from the set.
    assert!(!w.engine.keyring().public_key_set(w.now).contains("ed-1"));
    // No consent was asked again: the three grants are the three first.
    let page = w
        .engine
        .list_site_grants(&w.site, None, 100, w.now)
        .unwrap();
    assert_eq!(page.grants.len(), 3);
    // The emergency path: a new site key revokes every grant at once.
    w.engine
        .rotate_site_key(Own, &w.site, &mut crate::support::rng(5))
        .unwrap();
    for t in &current {
        assert!(matches!(
            w.bearer(t, "skills:read"),
            Err(BearerRejection::Challenge(_))
        ));
        assert!(w.refresh(t.refresh_token.expose_secret()).is_err());
    }
}

/// A token signed by a retired key, or by a key the set never published,
/// is refused by the resource server; an HS256 key is never in the set.
fn the_published_set_holds_public_keys_only<S: Store>(store: &S) {
    let mut w = world(store, Algorithm::EdDsa, keyring());
    let t = w.login();
    let set = w.engine.keyring().public_key_set(w.now);
    for secret in ["\"d\"", "\"k\"", "k1"] {
        assert!(!set.contains(secret), "{secret} in {set}");
    }
    let parsed = JwkSet::parse(set.as_bytes()).unwrap();
    assert_eq!(parsed.keys().len(), 2);
    let mut stranger = Keyring::new();
    stranger
        .insert("k1", SigningKey::from_bytes(&[0x11; 32]).unwrap())
        .unwrap();
    stranger
        .insert_token_key("ed-1", TokenKey::ed25519(&[0x99; 32]))
        .unwrap();
    stranger.set_active("k1").unwrap();
    stranger.set_active("ed-1").unwrap();
    let forged = world(crate::support::memory(), Algorithm::EdDsa, stranger).login();
    assert!(
        remote_check(&w, &set, &forged).is_err(),
        "same kid, another key"
    );
    assert!(remote_check(&w, &set, &t).is_ok());
}

on_every_store!(
    asymmetric_access_tokens_verify_with_the_published_set,
    routine_rotation_logs_nobody_out,
    the_published_set_holds_public_keys_only,
);
