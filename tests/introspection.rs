//! Token introspection (RFC 7662) through the public API, on every store:
//! who may ask, what an active token is, and one answer for everything
//! else.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use portcullis::engine::AgentTokenRequest;
use portcullis::form::encode_pairs;
use portcullis::header::{HeaderError, HeaderField};
use portcullis::http::HttpResponse;
use portcullis::introspect::{
    INACTIVE_JSON, IntrospectError, Introspection, ResourceServerCredential,
};
use portcullis::jwt::{Audience, Claims, Keyring, SigningKey, TokenType};
use portcullis::scope::ScopeSet;
use portcullis::site::{SiteConfig, SiteId};
use portcullis::store::{Store, StoreErrorKind};
use portcullis::token::TokenResponse;
use portcullis::{Engine, ErrorCode, Own, Policy, WireError as _};

use crate::failing_store::{FailingStore, dump, under_faults};
use crate::oauth::{USER, World, keyring};
use crate::on_every_store;

/// The resource server every scenario asks as.
const RS: &str = "billing-api";

/// `RS`'s credential for the world's site.
fn credential<S: Store>(w: &World<S>) -> ResourceServerCredential {
    ResourceServerCredential::mint(w.engine.keyring(), &w.site, RS).unwrap()
}

/// Introspects `token` with the `authorization` header.
fn ask<S: Store>(
    w: &World<S>,
    authorization: HeaderField<'_>,
    token: &str,
) -> Result<Introspection, IntrospectError> {
    let body = encode_pairs([("token", token)]);
    w.engine
        .introspect(Own, &w.site, &body, authorization, w.now)
}

/// Introspects `token` as `RS`.
fn introspect<S: Store>(w: &World<S>, token: &str) -> Result<Introspection, IntrospectError> {
    let header = credential(w).basic_authorization();
    ask(w, HeaderField::one(header.expose_secret()), token)
}

/// The HTTP answer to introspecting `token` as `RS`.
fn answer<S: Store>(w: &World<S>, token: &str) -> HttpResponse {
    match introspect(w, token) {
        Ok(i) => i.to_response(),
        Err(e) => e.to_response(),
    }
}

/// Asserts `token` is inactive, byte for byte the one inactive answer.
#[track_caller]
fn assert_inactive<S: Store>(w: &World<S>, token: &str, why: &str) {
    assert_eq!(introspect(w, token), Ok(Introspection::Inactive), "{why}");
    assert_eq!(
        answer(w, token),
        Introspection::Inactive.to_response(),
        "{why}"
    );
    assert_eq!(answer(w, token).body, INACTIVE_JSON, "{why}");
}

fn basic(id: &str, secret: &str) -> String {
    format!("Basic {}", STANDARD.encode(format!("{id}:{secret}")))
}

/// A second site on the same engine, with its own issuer and resource.
fn other_site<S: Store>(w: &mut World<S>) -> SiteId {
    let id = SiteId::parse("other").unwrap();
    let config = SiteConfig::new(
        id.clone(),
        "Other",
        "https://other.example.com",
        "https://other.example.com/mcp/",
    );
    w.engine
        .create_site(Own, config, &mut w.rng, w.now)
        .unwrap();
    id
}

/// A login on `site` instead of the world's own.
fn login_on<S: Store>(w: &mut World<S>, site: &SiteId) -> TokenResponse {
    let own = std::mem::replace(&mut w.site, site.clone());
    let t = w.login();
    w.site = own;
    t
}

fn an_access_token_of_a_live_grant_is_active<S: Store>(store: &S) {
    let mut w = World::new(store);
    let t = w.login();
    let access = t.access_token.expose_secret();
    let principal = w.bearer(&t, "skills:read").unwrap();
    let before = dump(store);
    let Introspection::Active(active) = introspect(&w, access).unwrap() else {
        panic!("a fresh access token is active");
    };
    assert_eq!(active.grant, principal.grant);
    let r = answer(&w, access);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    let now = w.now.as_secs();
    assert_eq!(
        body,
        serde_json::json!({
            "active": true,
            "scope": "skills:read skills:write",
            "client_id": w.client_id,
            "sub": USER,
            "exp": now + 300,
            "iat": now,
            "iss": "https://app.example.com",
            "aud": w.resource(),
            "jti": principal.token_id,
            "token_type": "Bearer",
        })
    );
    let members: Vec<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(members.len(), 10, "{members:?}");

    // A hint is only a hint (RFC 7662 §2.1): every kind is looked at.
    let header = credential(&w).basic_authorization();
    for hint in ["access_token", "refresh_token", "something_else"] {
        let body = encode_pairs([("token", access), ("token_type_hint", hint)]);
        let i = w
            .engine
            .introspect(
                Own,
                &w.site,
                &body,
                HeaderField::one(header.expose_secret()),
                w.now,
            )
            .unwrap();
        assert!(i.is_active(), "{hint}");
    }
    // Over a caller's transaction, read or write, the same answer.
    let read = store.begin_read().unwrap();
    let body = encode_pairs([("token", access)]);
    let field = HeaderField::one(header.expose_secret());
    let in_read = w
        .engine
        .introspect(&read, &w.site, &body, field, w.now)
        .unwrap();
    drop(read);
    assert_eq!(in_read, Introspection::Active(active.clone()));
    let write = store.begin_write().unwrap();
    let in_write = w
        .engine
        .introspect(&write, &w.site, &body, field, w.now)
        .unwrap();
    drop(write);
    assert_eq!(in_write, Introspection::Active(active));
    // Still active within the leeway after `exp`; nothing was written.
    w.advance(300 + 4);
    assert!(introspect(&w, access).unwrap().is_active());
    assert!(dump(store) == before, "introspection wrote something");
}

/// Every token that is not an access token of this site, valid now, of a
/// live grant gets the one inactive answer.
fn everything_else_is_the_one_inactive_answer<S: Store>(store: &S) {
    let mut w = World::new(store);
    let other = other_site(&mut w);
    let t = w.login();
    let access = t.access_token.expose_secret().to_owned();
    let grant = w.bearer(&t, "skills:read").unwrap().grant;
    assert!(introspect(&w, &access).unwrap().is_active());

    // Garbage and near-misses.
    for garbage in [
        "",
        "garbage",
        "a.b.c",
        "..",
        &"A".repeat(9000),
        "eyJhbGciOiJub25lIn0.e30.",
    ] {
        assert_inactive(&w, garbage, "garbage");
    }
    // Tampered: the signature, the payload, the header.
    let (head, rest) = access.split_once('.').unwrap();
    let (payload, signature) = rest.split_once('.').unwrap();
    let flip = |s: &str, at: usize| {
        let mut b = s.as_bytes().to_vec();
        b[at] = if b[at] == b'A' { b'B' } else { b'A' };
        String::from_utf8(b).unwrap()
    };
    for tampered in [
        format!("{head}.{payload}.{}", flip(signature, 3)),
        format!("{head}.{}.{signature}", flip(payload, 10)),
        format!("{}.{payload}.{signature}", flip(head, 5)),
        format!("{head}.{payload}."),
        format!("{access}A"),
    ] {
        assert_inactive(&w, &tampered, "tampered");
    }
    // A refresh token of the live grant.
    assert_inactive(&w, t.refresh_token.expose_secret(), "refresh token");
    // A minted agent token of the site.
    let request = AgentTokenRequest {
        subject: USER.into(),
        org_domain: None,
        scopes: ScopeSet::parse("skills:read").unwrap(),
        ttl: Duration::from_hours(1),
        label: None,
    };
    let (agent, _) = w
        .engine
        .mint_agent_token(Own, &w.site, request, &mut w.rng, w.now)
        .unwrap();
    assert_inactive(&w, agent.expose_secret(), "agent token");
    // Another site's token (same keys, its own audience and issuer).
    let foreign = login_on(&mut w, &other);
    assert_inactive(&w, foreign.access_token.expose_secret(), "another site's");
    // Hand-signed with the site's own key for the live grant, but for
    // another resource, for another issuer, or without a grant.
    let claims = |aud: &str, iss: &str, gid: Option<String>| Claims {
        iss: Some(iss.into()),
        sub: Some(USER.into()),
        aud: Some(Audience::One(aud.into())),
        iat: Some(w.now.as_jwt_secs()),
        exp: Some(w.now.as_jwt_secs() + 300),
        jti: Some("j".into()),
        client_id: Some(w.client_id.clone()),
        scope: Some("skills:read".into()),
        gid,
        ..Claims::default()
    };
    let resource = w.resource();
    let gid = Some(grant.to_string());
    let ours = claims(&resource, "https://app.example.com", gid.clone());
    let sign = |c: &Claims| {
        w.engine
            .keyring()
            .sign(TokenType::AccessToken, c)
            .unwrap()
            .expose_secret()
            .to_owned()
    };
    assert!(
        introspect(&w, &sign(&ours)).unwrap().is_active(),
        "the control: the same claims for this site's resource are active"
    );
    for (why, c) in [
        (
            "another resource",
            claims(
                "https://app.example.com/mcp/other-key",
                "https://app.example.com",
                gid.clone(),
            ),
        ),
        (
            "another issuer",
            claims(&resource, "https://other.example.com", gid.clone()),
        ),
        (
            "no grant",
            claims(&resource, "https://app.example.com", None),
        ),
        (
            "an unknown grant",
            claims(
                &resource,
                "https://app.example.com",
                Some("AAAAAAAAAAAAAAAAAAAAAA".into()),
            ),
        ),
    ] {
        assert_inactive(&w, &sign(&c), why);
    }
    // The right claims under another type or another key.
    let agent_typed = w
        .engine
        .keyring()
        .sign(TokenType::AgentToken, &ours)
        .unwrap();
    assert_inactive(&w, agent_typed.expose_secret(), "typ agent+jwt");
    let mut forger = Keyring::new();
    forger
        .insert("k1", SigningKey::from_bytes(&[0x22; 32]).unwrap())
        .unwrap();
    forger.set_active("k1").unwrap();
    let counterfeit = forger.sign(TokenType::AccessToken, &ours).unwrap();
    assert_inactive(&w, counterfeit.expose_secret(), "forged with another key");

    // Not yet valid (issued in the future, past the leeway).
    let mut early = claims(&resource, "https://app.example.com", gid);
    early.iat = Some(w.now.as_jwt_secs() + 60);
    assert_inactive(&w, &sign(&early), "issued in the future");

    // Revoked: seen at once, by the next question.
    assert!(w.engine.revoke_grant(Own, &grant, w.now).unwrap());
    assert_inactive(&w, &access, "revoked grant");
    // Revoked by the site's emergency path too.
    let fresh = w.login();
    assert!(
        introspect(&w, fresh.access_token.expose_secret())
            .unwrap()
            .is_active()
    );
    w.engine.revoke_site_grants(Own, &w.site).unwrap();
    assert_inactive(
        &w,
        fresh.access_token.expose_secret(),
        "site grants revoked",
    );

    // Expired: past `exp` and the leeway, its grant still live.
    let last = w.login();
    let access = last.access_token.expose_secret();
    w.advance(300 + 6);
    assert!(w.bearer(&last, "skills:read").is_err());
    assert_inactive(&w, access, "expired");
    let again = w.login();
    assert!(
        introspect(&w, again.access_token.expose_secret())
            .unwrap()
            .is_active()
    );
}

/// A token signed with a key the keyring retired is inactive; one signed
/// with a key rotated out but not retired still verifies.
fn retired_keys_verify_nothing<S: Store>(store: &S) {
    let mut w = World::new(store);
    let t = w.login();
    let access = t.access_token.expose_secret().to_owned();
    let mut rotated = keyring();
    rotated
        .insert("k2", SigningKey::from_bytes(&[0x33; 32]).unwrap())
        .unwrap();
    rotated.set_active("k2").unwrap();
    let policy = Policy::default();
    let after_rotation = Engine::new(store, rotated.clone(), policy.clone());
    let rs = ResourceServerCredential::mint(&rotated, &w.site, RS).unwrap();
    let body = encode_pairs([("token", access.as_str())]);
    let ask = |e: &Engine<&S>, header: &str| {
        e.introspect(Own, &w.site, &body, HeaderField::one(header), w.now)
    };
    assert!(
        ask(&after_rotation, rs.basic_authorization().expose_secret())
            .unwrap()
            .is_active()
    );
    // The credential minted under k1 still authenticates after rotation.
    let old = credential(&w);
    assert_eq!(old.kid(), "k1");
    assert!(
        ask(&after_rotation, old.basic_authorization().expose_secret())
            .unwrap()
            .is_active()
    );
    rotated.retire("k1").unwrap();
    let after_retirement = Engine::new(store, rotated, policy);
    assert_eq!(
        ask(&after_retirement, rs.basic_authorization().expose_secret()),
        Ok(Introspection::Inactive)
    );
    // Retiring the key that minted a credential revoked the credential.
    assert_eq!(
        ask(&after_retirement, old.basic_authorization().expose_secret()),
        Err(IntrospectError::InvalidClient { basic: true })
    );
}

fn callers_must_authenticate_as_a_resource_server_of_the_site<S: Store>(store: &S) {
    let mut w = World::new(store);
    let other = other_site(&mut w);
    let t = w.login();
    let access = t.access_token.expose_secret();
    let rs = credential(&w);
    let secret = rs.secret().expose_secret();
    let foreign = ResourceServerCredential::mint(w.engine.keyring(), &other, RS).unwrap();
    let client = w
        .engine
        .register_client(
            br#"{"redirect_uris":["https://c.example/cb"],"token_endpoint_auth_method":"client_secret_basic"}"#,
            &mut w.rng,
            w.now,
        )
        .unwrap();
    let client_secret = client.client_secret.as_ref().unwrap().expose_secret();
    let mut wrong = secret.to_owned();
    let last = wrong.pop().unwrap();
    wrong.push(if last == 'A' { 'B' } else { 'A' });

    // No credentials: 401, no challenge (no Basic was tried).
    let refused = ask(&w, HeaderField::ABSENT, access).unwrap_err();
    assert_eq!(refused, IntrospectError::InvalidClient { basic: false });
    let r = refused.to_response();
    assert_eq!((r.status, r.header("www-authenticate")), (401, None));
    assert!(r.body.contains("\"invalid_client\""), "{}", r.body);
    assert_eq!(refused.code(), ErrorCode::InvalidClient);

    // Basic tried and failed: 401 with a Basic challenge, whatever failed.
    for (why, header) in [
        ("a wrong secret", basic(RS, &wrong)),
        ("another name", basic("billing-apj", secret)),
        (
            "another site's credential",
            foreign.basic_authorization().expose_secret().to_owned(),
        ),
        (
            "a client's own secret",
            basic(&client.client_id, client_secret),
        ),
        ("a client id and secret", basic(RS, client_secret)),
        ("no secret", basic(RS, "")),
        ("not base64", "Basic %%%".to_owned()),
    ] {
        let e = ask(&w, HeaderField::one(&header), access).unwrap_err();
        assert_eq!(e, IntrospectError::InvalidClient { basic: true }, "{why}");
        let r = e.to_response();
        assert_eq!(r.status, 401, "{why}");
        assert_eq!(
            r.header("www-authenticate"),
            Some("Basic realm=\"introspection\""),
            "{why}"
        );
        assert!(
            !r.body.contains(access) && !r.body.contains(secret),
            "{why}"
        );
    }
    // Another scheme: the token itself as a bearer credential.
    let bearer = format!("Bearer {access}");
    assert_eq!(
        ask(&w, HeaderField::one(&bearer), access).unwrap_err(),
        IntrospectError::InvalidClient { basic: false }
    );
    // Credentials in the body beside Basic: two methods (RFC 6749 §2.3).
    let header = rs.basic_authorization();
    for extra in [("client_secret", secret), ("client_id", "someone-else")] {
        let body = encode_pairs([("token", access), extra]);
        assert_eq!(
            w.engine.introspect(
                Own,
                &w.site,
                &body,
                HeaderField::one(header.expose_secret()),
                w.now
            ),
            Err(IntrospectError::InvalidClient { basic: true }),
            "{extra:?}"
        );
    }
    let body = encode_pairs([("token", access), ("client_id", RS)]);
    assert!(
        w.engine
            .introspect(
                Own,
                &w.site,
                &body,
                HeaderField::one(header.expose_secret()),
                w.now
            )
            .unwrap()
            .is_active()
    );
    // A repeated Authorization field is ambiguous: 400, not a guess.
    let twice = HeaderField::new([header.expose_secret().as_bytes(); 2]);
    let e = ask(&w, twice, access).unwrap_err();
    assert_eq!(e, IntrospectError::authorization(HeaderError::Repeated));
    assert_eq!(e.to_response().status, 400);
    // And the right credential is answered.
    assert!(introspect(&w, access).unwrap().is_active());
}

fn malformed_requests_are_refused<S: Store>(store: &S) {
    let mut w = World::new(store);
    let t = w.login();
    let access = t.access_token.expose_secret();
    let header = credential(&w).basic_authorization();
    let field = HeaderField::one(header.expose_secret());
    let long = "a".repeat(portcullis::introspect::MAX_BODY_LEN + 1);
    for (body, expected) in [
        (String::new(), IntrospectError::MissingToken),
        (
            "token_type_hint=access_token".to_owned(),
            IntrospectError::MissingToken,
        ),
        (
            format!("token={access}&token={access}"),
            IntrospectError::Malformed(portcullis::form::FormError::Repeated),
        ),
        (
            format!("token={access}&token_type_hint=a&token_type_hint=b"),
            IntrospectError::Malformed(portcullis::form::FormError::Repeated),
        ),
        (
            format!("token={long}"),
            IntrospectError::Malformed(portcullis::form::FormError::TooLong),
        ),
        (
            "token=%zz".to_owned(),
            IntrospectError::Malformed(portcullis::form::FormError::BadEscape),
        ),
    ] {
        let e = w
            .engine
            .introspect(Own, &w.site, &body, field, w.now)
            .unwrap_err();
        assert_eq!(e, expected);
        let r = e.to_response();
        assert_eq!(r.status, 400);
        assert!(r.body.contains("\"invalid_request\""), "{}", r.body);
    }
    // An unknown site is the host's misconfiguration, not an answer.
    let nowhere = SiteId::parse("nowhere").unwrap();
    let rs = ResourceServerCredential::mint(w.engine.keyring(), &nowhere, RS).unwrap();
    let body = encode_pairs([("token", access)]);
    assert_eq!(
        w.engine.introspect(
            Own,
            &nowhere,
            &body,
            HeaderField::one(rs.basic_authorization().expose_secret()),
            w.now
        ),
        Err(IntrospectError::UnknownSite)
    );
}

fn a_site_switched_off_answers_503<S: Store>(store: &S) {
    let mut w = World::new(store);
    let t = w.login();
    let access = t.access_token.expose_secret();
    w.engine.set_site_enabled(Own, &w.site, false).unwrap();
    let e = introspect(&w, access).unwrap_err();
    let IntrospectError::Unavailable { retry_after_secs } = e else {
        panic!("expected 503, got {e:?}");
    };
    let r = e.to_response();
    assert_eq!(r.status, 503);
    assert_eq!(
        r.header("retry-after"),
        Some(retry_after_secs.to_string().as_str())
    );
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert!(r.body.contains("\"temporarily_unavailable\""), "{}", r.body);
    // Whatever the token: the switch is the answer, not the token.
    assert_eq!(introspect(&w, "garbage"), Err(e));
    // An unauthenticated caller still hears 401 first.
    assert_eq!(
        ask(&w, HeaderField::ABSENT, access),
        Err(IntrospectError::InvalidClient { basic: false })
    );
    // Back on: the grant was kept.
    w.engine.set_site_enabled(Own, &w.site, true).unwrap();
    assert!(introspect(&w, access).unwrap().is_active());
}

/// A store failure at any read answers the store's error: never an active
/// token, never an inactive one, and nothing written.
fn a_store_failure_is_an_error_never_an_answer<S: Store>(store: &S) {
    let failing = FailingStore::new(store);
    let mut w = World::new(&failing);
    let t = w.login();
    let access = t.access_token.expose_secret().to_owned();
    let (clean, points) = under_faults(&failing, || {
        let out = introspect(&w, &access);
        if let Err(e) = &out {
            assert!(matches!(e, IntrospectError::Store(_)), "{e:?}");
            assert_eq!(e.to_response().status, 500);
        }
        out
    });
    assert!(clean.unwrap().is_active());
    assert_eq!(points, 2, "two reads: the site and the grant");
    // An unavailable store: the error's kind is kept for the adapter (503).
    failing.set(1, None, false, StoreErrorKind::Unavailable);
    let Err(IntrospectError::Store(e)) = introspect(&w, &access) else {
        panic!("expected the store's error");
    };
    failing.disarm();
    assert_eq!(e.kind(), StoreErrorKind::Unavailable);
    // Under a caller's transaction too.
    let read = failing.begin_read().unwrap();
    let header = credential(&w).basic_authorization();
    let body = encode_pairs([("token", access.as_str())]);
    failing.fail_nth(2);
    let out = w.engine.introspect(
        &read,
        &w.site,
        &body,
        HeaderField::one(header.expose_secret()),
        w.now,
    );
    failing.disarm();
    assert!(matches!(out, Err(IntrospectError::Store(_))), "{out:?}");
}

on_every_store!(
    an_access_token_of_a_live_grant_is_active,
    everything_else_is_the_one_inactive_answer,
    retired_keys_verify_nothing,
    callers_must_authenticate_as_a_resource_server_of_the_site,
    malformed_requests_are_refused,
    a_site_switched_off_answers_503,
    a_store_failure_is_an_error_never_an_answer,
);
