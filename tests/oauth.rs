//! The authorization-server conformance suite: every scenario runs on every
//! store, through the public API, under a clock the test drives.

use std::time::Duration;

use portcullis::authorize::AuthorizeAnswer;
use portcullis::engine::BearerRejection;
use portcullis::engine::RevokeError;
use portcullis::form::{Form, encode_pairs};
use portcullis::grant::GrantStatus;
use portcullis::header::{HeaderError, HeaderField};
use portcullis::jwt::{Keyring, SigningKey};
use portcullis::pkce::{CodeChallenge, CodeVerifier};
use portcullis::scope::ScopeSet;
use portcullis::site::{SiteConfig, SiteId};
use portcullis::store::Store;
use portcullis::token::{TokenError, TokenResponse};
use portcullis::{Engine, ErrorCode, Own, Policy, Timestamp, WireError};
use rand::rngs::StdRng;

use crate::on_every_store;

pub(crate) const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
pub(crate) const REDIRECT: &str = "http://127.0.0.1:4711/callback";
pub(crate) const USER: &str = "user-1";
const DAY: u64 = 86_400;

pub(crate) fn keyring() -> Keyring {
    let mut k = Keyring::new();
    k.insert("k1", SigningKey::from_bytes(&[0x11; 32]).unwrap())
        .unwrap();
    k.set_active("k1").unwrap();
    k
}

/// An engine over a store, one demo site, a registered public client and a
/// clock that only moves forward.
pub(crate) struct World<S: Store> {
    pub(crate) engine: Engine<S>,
    pub(crate) site: SiteId,
    pub(crate) client_id: String,
    pub(crate) rng: StdRng,
    pub(crate) now: Timestamp,
}

impl<S: Store> World<S> {
    /// A world under the default policy (the reuse grace on).
    pub(crate) fn new(store: S) -> Self {
        Self::with_policy(store, Policy::default())
    }

    pub(crate) fn with_policy(store: S, policy: Policy) -> Self {
        Self::with_keyring(store, policy, keyring())
    }

    pub(crate) fn with_keyring(store: S, policy: Policy, keyring: Keyring) -> Self {
        let engine = Engine::new(store, keyring, policy);
        let mut rng = crate::support::rng(7);
        let now = Timestamp::from_secs(1_800_000_000);
        let site = SiteId::parse("demo").unwrap();
        let config = SiteConfig::new(
            site.clone(),
            "Demo",
            "https://app.example.com",
            "https://app.example.com/mcp/",
        );
        engine.create_site(Own, config, &mut rng, now).unwrap();
        let registered = engine
            .register_client(br#"{"redirect_uris":["http://127.0.0.1/callback"],"token_endpoint_auth_method":"none","client_name":"Test Agent","grant_types":["authorization_code","refresh_token"]}"#, &mut rng, now)
            .unwrap();
        Self {
            engine,
            site,
            client_id: registered.client_id,
            rng,
            now,
        }
    }

    pub(crate) fn advance(&mut self, secs: u64) {
        self.now = self.now.saturating_add(Duration::from_secs(secs));
    }

    pub(crate) fn resource(&self) -> String {
        self.engine.site(&self.site).unwrap().resource()
    }

    /// An authorization query with PKCE for `VERIFIER`, plus `extra` pairs
    /// (which replace defaults of the same name; `("x", "")` removals use
    /// `without`).
    pub(crate) fn query(&self, extra: &[(&str, &str)], without: &[&str]) -> String {
        let challenge =
            CodeChallenge::from_verifier(CodeVerifier::parse(VERIFIER).unwrap()).to_base64url();
        let resource = self.resource();
        let defaults = [
            ("response_type", "code"),
            ("client_id", self.client_id.as_str()),
            ("redirect_uri", REDIRECT),
            ("state", "xyz"),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
            ("resource", resource.as_str()),
            ("scope", "skills:read skills:write"),
        ];
        let mut pairs: Vec<(&str, &str)> = defaults
            .iter()
            .copied()
            .filter(|(n, _)| !without.contains(n) && !extra.iter().any(|(e, _)| e == n))
            .collect();
        pairs.extend_from_slice(extra);
        encode_pairs(pairs)
    }

    pub(crate) fn decide(&mut self, query: &str, allow: bool) -> AuthorizeAnswer {
        self.engine
            .decide(
                Own,
                &self.site,
                query,
                None,
                USER,
                allow,
                &mut self.rng,
                self.now,
            )
            .unwrap()
    }

    /// Allows `query` and returns the code from the redirect.
    pub(crate) fn code_for(&mut self, query: &str) -> String {
        match self.decide(query, true) {
            AuthorizeAnswer::Redirect(url) => redirect_param(&url, "code").expect("a code"),
            other => panic!("expected a redirect, got {other:?}"),
        }
    }

    pub(crate) fn token(&mut self, pairs: &[(&str, &str)]) -> Result<TokenResponse, TokenError> {
        let body = encode_pairs(pairs.iter().copied());
        self.engine.token(
            Own,
            &self.site,
            &body,
            HeaderField::ABSENT,
            &mut self.rng,
            self.now,
        )
    }

    pub(crate) fn exchange(
        &mut self,
        code: &str,
        verifier: Option<&str>,
    ) -> Result<TokenResponse, TokenError> {
        let client_id = self.client_id.clone();
        let mut pairs = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", REDIRECT),
            ("client_id", client_id.as_str()),
        ];
        if let Some(v) = verifier {
            pairs.push(("code_verifier", v));
        }
        self.token(&pairs)
    }

    /// A full authorization: consent, code, exchange.
    pub(crate) fn login(&mut self) -> TokenResponse {
        let q = self.query(&[], &[]);
        let code = self.code_for(&q);
        self.exchange(&code, Some(VERIFIER)).unwrap()
    }

    pub(crate) fn refresh(&mut self, refresh_token: &str) -> Result<TokenResponse, TokenError> {
        let client_id = self.client_id.clone();
        self.token(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
            ("client_id", &client_id),
        ])
    }

    pub(crate) fn bearer(
        &self,
        token: &TokenResponse,
        scope: &str,
    ) -> Result<portcullis::engine::Principal, BearerRejection> {
        let header = format!("Bearer {}", token.access_token.expose_secret());
        self.engine.verify_bearer(
            &self.site,
            HeaderField::one(&header),
            &ScopeSet::parse(scope).unwrap(),
            self.now,
        )
    }
}

pub(crate) fn redirect_param(url: &str, name: &str) -> Option<String> {
    let (_, query) = url.split_once('?')?;
    Form::parse(query, 64 * 1024)
        .unwrap()
        .get(name)
        .map(String::from)
}

fn redirect_error(answer: &AuthorizeAnswer) -> Option<String> {
    match answer {
        AuthorizeAnswer::Redirect(url) => {
            assert_eq!(
                redirect_param(url, "iss").as_deref(),
                Some("https://app.example.com")
            );
            redirect_param(url, "error")
        }
        _ => None,
    }
}

fn refresh_of(t: &TokenResponse) -> String {
    t.refresh_token.expose_secret().to_string()
}

// ---------------------------------------------------------------- scenarios

fn full_code_flow_issues_tokens_bound_to_the_resource<S: Store>(store: &S) {
    let mut w = World::new(store);
    let answer = w
        .engine
        .authorize(&w.site, &w.query(&[], &[]), None)
        .unwrap();
    let AuthorizeAnswer::Consent(screen) = answer else {
        panic!("{answer:?}")
    };
    assert_eq!(screen.client_name_unverified.as_deref(), Some("Test Agent"));
    assert_eq!(screen.callback_host, "127.0.0.1");
    assert!(screen.loopback_only);
    let q = w.query(&[], &[]);
    let AuthorizeAnswer::Redirect(url) = w.decide(&q, true) else {
        panic!()
    };
    assert_eq!(redirect_param(&url, "state").as_deref(), Some("xyz"));
    assert_eq!(
        redirect_param(&url, "iss").as_deref(),
        Some("https://app.example.com")
    );
    assert_eq!(url.matches("code=").count(), 1);
    let code = redirect_param(&url, "code").unwrap();
    let tokens = w.exchange(&code, Some(VERIFIER)).unwrap();
    assert_eq!(tokens.expires_in, 300);
    let response = tokens.to_response();
    assert_eq!(response.header("cache-control"), Some("no-store"));
    let principal = w.bearer(&tokens, "skills:read").unwrap();
    assert_eq!(principal.subject, USER);
    assert_eq!(principal.client_id, w.client_id);
    w.advance(300 + 4);
    assert!(
        w.bearer(&tokens, "skills:read").is_ok(),
        "inside the 5 s leeway"
    );
    w.advance(1);
    assert!(
        matches!(w.bearer(&tokens, "skills:read"), Err(BearerRejection::Challenge(c)) if c.status == 401)
    );
}

fn deny_redirects_access_denied<S: Store>(store: &S) {
    let mut w = World::new(store);
    let q = w.query(&[], &[]);
    assert_eq!(
        redirect_error(&w.decide(&q, false)).as_deref(),
        Some("access_denied")
    );
}

fn pkce_rules<S: Store>(store: &S) {
    let mut w = World::new(store);
    let plain = w.query(&[("code_challenge_method", "plain")], &[]);
    assert_eq!(
        redirect_error(&w.decide(&plain, true)).as_deref(),
        Some("invalid_request")
    );
    let no_method = w.query(&[], &["code_challenge_method"]);
    assert_eq!(
        redirect_error(&w.decide(&no_method, true)).as_deref(),
        Some("invalid_request")
    );
    let no_challenge = w.query(&[], &["code_challenge"]);
    assert_eq!(
        redirect_error(&w.decide(&no_challenge, true)).as_deref(),
        Some("invalid_request")
    );

    // Verifier bounds, downgrade and a wrong verifier all fail the exchange,
    // and none of them spends the code.
    let q = w.query(&[], &[]);
    let code = w.code_for(&q);
    let short = &VERIFIER[..42];
    let long = "a".repeat(129);
    assert_eq!(
        w.exchange(&code, Some(short)).unwrap_err().code(),
        ErrorCode::InvalidGrant
    );
    assert_eq!(
        w.exchange(&code, Some(&long)).unwrap_err().code(),
        ErrorCode::InvalidGrant
    );
    assert_eq!(
        w.exchange(&code, None).unwrap_err().code(),
        ErrorCode::InvalidGrant,
        "downgrade"
    );
    let wrong = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXK";
    assert_eq!(
        w.exchange(&code, Some(wrong)).unwrap_err(),
        TokenError::InvalidGrant
    );
    assert!(w.exchange(&code, Some(VERIFIER)).is_ok());
}

fn code_replay<S: Store>(store: &S) {
    let mut w = World::new(store);
    let q = w.query(&[], &[]);
    let code = w.code_for(&q);
    let first = w.exchange(&code, Some(VERIFIER)).unwrap();
    // An invalid replay (wrong verifier) revokes nothing.
    let wrong = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXK";
    assert_eq!(
        w.exchange(&code, Some(wrong)).unwrap_err(),
        TokenError::InvalidGrant
    );
    assert!(w.bearer(&first, "skills:read").is_ok());
    // A valid replay fails and revokes the grant from the first use.
    assert_eq!(
        w.exchange(&code, Some(VERIFIER)).unwrap_err(),
        TokenError::InvalidGrant
    );
    assert!(w.bearer(&first, "skills:read").is_err());
    assert_eq!(
        w.refresh(&refresh_of(&first)).unwrap_err(),
        TokenError::InvalidGrant
    );
    // A third attempt is still caught.
    assert_eq!(
        w.exchange(&code, Some(VERIFIER)).unwrap_err(),
        TokenError::InvalidGrant
    );
    // An expired code fails.
    let code = w.code_for(&q);
    w.advance(60);
    assert_eq!(
        w.exchange(&code, Some(VERIFIER)).unwrap_err(),
        TokenError::InvalidGrant
    );
}

fn loopback_redirects_ignore_only_the_port<S: Store>(store: &S) {
    let mut w = World::new(store);
    for port in ["", ":1", ":4711", ":65535"] {
        let redirect = format!("http://127.0.0.1{port}/callback");
        let q = w.query(&[("redirect_uri", &redirect)], &[]);
        assert!(
            matches!(
                w.engine.authorize(&w.site, &q, None).unwrap(),
                AuthorizeAnswer::Consent(_)
            ),
            "{redirect}"
        );
    }
    for redirect in [
        "http://127.0.0.1:4711/callback/",
        "http://127.0.0.1:4711/Callback",
        "http://127.0.0.1:4711/callback?x=1",
        "http://localhost:4711/callback",
        "https://127.0.0.1/callback",
    ] {
        let q = w.query(&[("redirect_uri", redirect)], &[]);
        let answer = w.engine.authorize(&w.site, &q, None).unwrap();
        assert!(
            matches!(answer, AuthorizeAnswer::ShowError(_)),
            "{redirect}: {answer:?}"
        );
    }
    // The redirect URI of the exchange must be the one of the request.
    let q = w.query(&[("redirect_uri", "http://127.0.0.1:9/callback")], &[]);
    let code = w.code_for(&q);
    assert_eq!(
        w.exchange(&code, Some(VERIFIER)).unwrap_err(),
        TokenError::InvalidGrant
    );
}

fn unsafe_redirect_uris_are_refused_at_registration<S: Store>(store: &S) {
    let mut w = World::new(store);
    for uri in [
        "http://127.0.0.1.evil.com/cb",
        "http://127.1/cb",
        "http://0x7f.1/cb",
        "http://[::ffff:127.0.0.1]/cb",
        "data:text/html,callback",
        "http://example.com/cb",
        "https://user@example.com/cb",
        "https://example.com/cb#frag",
        "javascript:alert(1)",
    ] {
        let json = format!(r#"{{"redirect_uris":["{uri}"],"token_endpoint_auth_method":"none"}}"#);
        let err = w
            .engine
            .register_client(json.as_bytes(), &mut w.rng, w.now)
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidRedirectUri, "{uri}");
    }
}

fn unknown_clients_and_bad_redirects_are_never_redirected<S: Store>(store: &S) {
    let w = World::new(store);
    let answer = w
        .engine
        .authorize(&w.site, &w.query(&[("client_id", "nope")], &[]), None)
        .unwrap();
    assert!(matches!(answer, AuthorizeAnswer::ShowError(_)));
    let answer = w
        .engine
        .authorize(
            &w.site,
            &w.query(&[("redirect_uri", "https://evil.example/cb")], &[]),
            None,
        )
        .unwrap();
    assert!(matches!(answer, AuthorizeAnswer::ShowError(_)));
    let answer = w
        .engine
        .authorize(&w.site, &format!("{}&state=again", w.query(&[], &[])), None)
        .unwrap();
    assert!(
        matches!(answer, AuthorizeAnswer::ShowError(_)),
        "repeated parameter"
    );
    let long_state = "s".repeat(1025);
    let answer = w
        .engine
        .authorize(&w.site, &w.query(&[("state", &long_state)], &[]), None)
        .unwrap();
    assert_eq!(redirect_error(&answer).as_deref(), Some("invalid_request"));
    let answer = w
        .engine
        .authorize(&w.site, &w.query(&[("response_type", "token")], &[]), None)
        .unwrap();
    assert_eq!(
        redirect_error(&answer).as_deref(),
        Some("unsupported_response_type")
    );
    let answer = w
        .engine
        .authorize(
            &w.site,
            &w.query(&[("scope", "skills:read admin")], &[]),
            None,
        )
        .unwrap();
    assert_eq!(redirect_error(&answer).as_deref(), Some("invalid_scope"));
}

fn resource_comparison<S: Store>(store: &S) {
    let w = World::new(store);
    let r = w.resource();
    let upper = r.replace("https://app.example.com", "HTTPS://APP.EXAMPLE.COM");
    for ok in [r.clone(), format!("{r}/"), upper] {
        let answer = w
            .engine
            .authorize(&w.site, &w.query(&[("resource", &ok)], &[]), None)
            .unwrap();
        assert!(matches!(answer, AuthorizeAnswer::Consent(_)), "{ok}");
    }
    for bad in [
        format!("{r}#f"),
        format!("{r}x"),
        "https://app.example.com/mcp/".to_string(),
    ] {
        let answer = w
            .engine
            .authorize(&w.site, &w.query(&[("resource", &bad)], &[]), None)
            .unwrap();
        assert_eq!(
            redirect_error(&answer).as_deref(),
            Some("invalid_target"),
            "{bad}"
        );
    }
    // No resource: the site's own (RFC 8707 §2 leaves the default to the
    // server; Claude Code sends none).
    let answer = w
        .engine
        .authorize(&w.site, &w.query(&[], &["resource"]), None)
        .unwrap();
    assert!(matches!(answer, AuthorizeAnswer::Consent(_)), "{answer:?}");
    let repeated = format!("{}&resource={}", w.query(&[], &[]), r);
    assert!(matches!(
        w.engine.authorize(&w.site, &repeated, None).unwrap(),
        AuthorizeAnswer::ShowError(_)
    ));
}

/// The default policy with strict rotation: every spent refresh token
/// revokes its grant (no reuse grace), for the tests of reuse detection
/// itself.
pub(crate) fn strict_rotation() -> Policy {
    let mut policy = Policy::default();
    policy.refresh_reuse_grace = Duration::ZERO;
    policy
}

fn refresh_rotates_and_reuse_revokes<S: Store>(store: &S) {
    let mut w = World::with_policy(store, strict_rotation());
    let first = w.login();
    let second = w.refresh(&refresh_of(&first)).unwrap();
    assert_ne!(refresh_of(&first), refresh_of(&second));
    let third = w.refresh(&refresh_of(&second)).unwrap();
    assert!(w.bearer(&third, "skills:write").is_ok());
    // Reuse of a spent token revokes the whole grant.
    let reuse = w.refresh(&refresh_of(&first)).unwrap_err();
    assert_eq!(reuse, TokenError::InvalidGrant);
    assert_eq!(
        w.refresh(&refresh_of(&third)).unwrap_err(),
        TokenError::InvalidGrant
    );
    assert!(
        w.bearer(&third, "skills:read").is_err(),
        "revocation takes effect at once"
    );
}

fn forged_tokens_revoke_nothing_and_answer_like_reuse<S: Store>(store: &S) {
    let mut w = World::with_policy(store, strict_rotation());
    let tokens = w.login();
    let real = refresh_of(&tokens);
    // Same grant and generation, wrong tag.
    let mut parts: Vec<&str> = real.split('.').collect();
    let forged_tag = "A".repeat(43);
    parts[3] = &forged_tag;
    let forged = parts.join(".");
    let forged_err = w.refresh(&forged).unwrap_err();
    let unknown_err = w
        .refresh("prt1.AAAAAAAAAAAAAAAAAAAAAA.1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA.k1")
        .unwrap_err();
    let garbage_err = w.refresh("not-a-token").unwrap_err();
    let rotated = w.refresh(&real).unwrap();
    let reuse_err = w.refresh(&real).unwrap_err();
    // One answer for all of them: same error, same status, same body.
    for e in [&unknown_err, &garbage_err, &reuse_err] {
        assert_eq!(e, &forged_err);
        assert_eq!(e.to_response(), forged_err.to_response());
    }
    // The forgery revoked nothing (the real token rotated afterwards); the
    // reuse did.
    assert!(w.bearer(&rotated, "skills:read").is_err());
    let mut w2 = World::new(crate::support::memory());
    let t = w2.login();
    let mut p: Vec<String> = refresh_of(&t).split('.').map(String::from).collect();
    p[3] = "B".repeat(43);
    assert!(w2.refresh(&p.join(".")).is_err());
    assert!(
        w2.bearer(&t, "skills:read").is_ok(),
        "a forged token must not revoke"
    );
    assert!(w2.refresh(&refresh_of(&t)).is_ok());
}

fn refresh_scope_may_narrow_never_widen<S: Store>(store: &S) {
    let mut w = World::new(store);
    let q = w.query(&[("scope", "skills:read")], &[]);
    let code = w.code_for(&q);
    let t = w.exchange(&code, Some(VERIFIER)).unwrap();
    let client_id = w.client_id.clone();
    let wider = w.token(&[
        ("grant_type", "refresh_token"),
        ("refresh_token", &refresh_of(&t)),
        ("client_id", &client_id),
        ("scope", "skills:read skills:write"),
    ]);
    assert_eq!(wider.unwrap_err(), TokenError::InvalidScope);
    let mut w = World::new(crate::support::memory());
    let t = w.login();
    let client_id = w.client_id.clone();
    let narrow = w
        .token(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", &refresh_of(&t)),
            ("client_id", &client_id),
            ("scope", "skills:read"),
        ])
        .unwrap();
    assert_eq!(narrow.scope.to_string(), "skills:read");
    let p = w.bearer(&narrow, "skills:read").unwrap();
    assert!(!p.scopes.contains("skills:write"));
    // The grant keeps its scope: the next refresh may ask for it again.
    let again = w.refresh(&refresh_of(&narrow)).unwrap();
    assert_eq!(again.scope.to_string(), "skills:read skills:write");
}

fn refresh_needs_a_registered_refresh_grant<S: Store>(store: &S) {
    let mut w = World::new(store);
    let t = w.login();
    let code_only = w.engine.register_client(br#"{"redirect_uris":["http://127.0.0.1/callback"],"token_endpoint_auth_method":"none"}"#, &mut w.rng, w.now).unwrap();
    let r = w.token(&[
        ("grant_type", "refresh_token"),
        ("refresh_token", &refresh_of(&t)),
        ("client_id", &code_only.client_id),
    ]);
    assert_eq!(r.unwrap_err(), TokenError::UnauthorizedClient);
    let r = w.token(&[
        ("grant_type", "password"),
        ("client_id", &code_only.client_id),
    ]);
    assert_eq!(r.unwrap_err(), TokenError::UnsupportedGrantType);
}

fn refresh_is_bound_to_client_and_resource<S: Store>(store: &S) {
    let mut w = World::new(store);
    let t = w.login();
    let other = w.engine.register_client(br#"{"redirect_uris":["https://other.example/cb"],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"]}"#, &mut w.rng, w.now).unwrap();
    let r = w.token(&[
        ("grant_type", "refresh_token"),
        ("refresh_token", &refresh_of(&t)),
        ("client_id", &other.client_id),
    ]);
    assert_eq!(r.unwrap_err(), TokenError::InvalidGrant);
    let client_id = w.client_id.clone();
    let r = w.token(&[
        ("grant_type", "refresh_token"),
        ("refresh_token", &refresh_of(&t)),
        ("client_id", &client_id),
        ("resource", "https://other.example/mcp"),
    ]);
    assert_eq!(r.unwrap_err(), TokenError::InvalidTarget);
    // Neither attempt spent or revoked the token.
    assert!(w.refresh(&refresh_of(&t)).is_ok());
}

/// Within the reuse grace, a spent token gets the grant's current refresh
/// token (the very one already issued) and a fresh access token; nothing
/// rotates and no deadline moves. Past it, the spent token revokes.
fn a_spent_token_within_the_grace_gets_the_current_one<S: Store>(store: &S) {
    let mut w = World::new(store);
    let t0 = w.login();
    w.advance(10 * DAY);
    let t1 = w.refresh(&refresh_of(&t0)).unwrap();
    w.advance(20);
    let retry = w.refresh(&refresh_of(&t0)).unwrap();
    assert_eq!(
        refresh_of(&retry),
        refresh_of(&t1),
        "the very same successor"
    );
    assert_ne!(retry.access_token, t1.access_token);
    // Expiry never slides: the grant's idle deadline counts from the real
    // rotation, not the retry.
    let grant = w.bearer(&retry, "skills:read").unwrap().grant;
    let g = w.engine.grant(&grant).unwrap().unwrap();
    assert_eq!(
        g.last_refreshed,
        w.now.saturating_sub(Duration::from_secs(20))
    );
    // Past the grace (10 minutes from the spending), reuse revokes.
    w.advance(600 - 20);
    assert_eq!(
        w.refresh(&refresh_of(&t0)).unwrap_err(),
        TokenError::InvalidGrant
    );
    assert!(w.refresh(&refresh_of(&t1)).is_err());
}

fn idle_and_absolute_lifetimes<S: Store>(store: &S) {
    let mut w = World::new(store);
    let t = w.login();
    w.advance(29 * DAY);
    let t = w.refresh(&refresh_of(&t)).unwrap();
    w.advance(31 * DAY);
    assert_eq!(
        w.refresh(&refresh_of(&t)).unwrap_err(),
        TokenError::InvalidGrant,
        "idle for 31 days"
    );

    let mut w = World::new(crate::support::memory());
    let mut t = w.login();
    for _ in 0..4 {
        w.advance(22 * DAY);
        t = w.refresh(&refresh_of(&t)).unwrap(); // days 22, 44, 66, 88
    }
    w.advance(DAY); // day 89
    t = w.refresh(&refresh_of(&t)).unwrap();
    w.advance(2 * DAY); // day 91
    assert_eq!(
        w.refresh(&refresh_of(&t)).unwrap_err(),
        TokenError::InvalidGrant,
        "absolute 90 days"
    );
}

fn the_off_switch_answers_503_and_changes_nothing<S: Store>(store: &S) {
    let mut w = World::new(store);
    let t = w.login();
    w.engine.set_site_enabled(Own, &w.site, false).unwrap();
    let err = w.refresh(&refresh_of(&t)).unwrap_err();
    let response = err.to_response();
    assert_eq!(
        (response.status, response.header("retry-after")),
        (503, Some("60"))
    );
    assert!(response.body.contains("temporarily_unavailable"));
    assert!(matches!(
        w.bearer(&t, "skills:read"),
        Err(BearerRejection::Unavailable {
            retry_after_secs: 60
        })
    ));
    assert!(matches!(
        w.engine
            .authorize(&w.site, &w.query(&[], &[]), None)
            .unwrap(),
        AuthorizeAnswer::Unavailable { .. }
    ));
    w.engine.set_site_enabled(Own, &w.site, true).unwrap();
    // The refresh attempted while off did not rotate: the same token works.
    let t2 = w.refresh(&refresh_of(&t)).unwrap();
    assert!(w.bearer(&t2, "skills:read").is_ok());
}

fn site_key_rotation_revokes_everything_at_once<S: Store>(store: &S) {
    let mut w = World::new(store);
    let t = w.login();
    let before = w.resource();
    w.engine
        .rotate_site_key(Own, &w.site, &mut crate::support::rng(99))
        .unwrap();
    assert_ne!(w.resource(), before);
    assert!(
        w.bearer(&t, "skills:read").is_err(),
        "old access tokens fail at once"
    );
    assert_eq!(
        w.refresh(&refresh_of(&t)).unwrap_err(),
        TokenError::InvalidGrant
    );
    // New logins work under the new resource.
    let t = w.login();
    assert!(w.bearer(&t, "skills:read").is_ok());
}

fn signing_key_rotation_logs_nobody_out<S: Store + Clone>(store: &S) {
    let mut w = World::new(store.clone());
    let old = w.login();
    let mut rotated = keyring();
    rotated
        .insert("k2", SigningKey::from_bytes(&[0x22; 32]).unwrap())
        .unwrap();
    rotated.set_active("k2").unwrap();
    let mut w2 = World {
        engine: Engine::new(store.clone(), rotated.clone(), Policy::default()),
        ..w
    };
    assert!(
        w2.bearer(&old, "skills:read").is_ok(),
        "old tokens still verify"
    );
    let new = w2.refresh(&refresh_of(&old)).unwrap();
    assert!(w2.bearer(&new, "skills:read").is_ok());
    rotated.retire("k1").unwrap();
    w = World {
        engine: Engine::new(store.clone(), rotated, Policy::default()),
        ..w2
    };
    assert!(
        w.bearer(&old, "skills:read").is_err(),
        "retired key's tokens fail"
    );
    assert!(w.bearer(&new, "skills:read").is_ok());
}

fn bearer_challenges<S: Store>(store: &S) {
    let mut w = World::new(store);
    let t = w.login();
    let md = "https://app.example.com/.well-known/oauth-protected-resource/mcp/";
    let none = w
        .engine
        .verify_bearer(
            &w.site,
            HeaderField::ABSENT,
            &ScopeSet::parse("skills:read").unwrap(),
            w.now,
        )
        .unwrap_err();
    let BearerRejection::Challenge(c) = none else {
        panic!()
    };
    assert_eq!(c.status, 401);
    assert!(
        c.www_authenticate
            .starts_with(&format!("Bearer resource_metadata=\"{md}"))
    );
    assert!(!c.www_authenticate.contains("error="));
    let bad = w
        .engine
        .verify_bearer(
            &w.site,
            HeaderField::one("Bearer abc"),
            &ScopeSet::new(),
            w.now,
        )
        .unwrap_err();
    assert!(
        matches!(bad, BearerRejection::Challenge(ref c) if c.www_authenticate.contains("error=\"invalid_token\""))
    );
    let q = w.query(&[("scope", "skills:read")], &[]);
    let code = w.code_for(&q);
    let read_only = w.exchange(&code, Some(VERIFIER)).unwrap();
    let BearerRejection::Challenge(c) = w.bearer(&read_only, "skills:write").unwrap_err() else {
        panic!()
    };
    assert_eq!(c.status, 403);
    assert!(
        c.www_authenticate
            .contains(r#"error="insufficient_scope", scope="skills:read skills:write""#),
        "{}",
        c.www_authenticate
    );
    assert!(w.bearer(&t, "skills:read skills:write").is_ok());
    let lower = format!("bearer {}", t.access_token.expose_secret());
    assert!(
        w.engine
            .verify_bearer(&w.site, HeaderField::one(&lower), &ScopeSet::new(), w.now)
            .is_ok()
    );
}

/// Two `Authorization` fields make a request ambiguous: every endpoint
/// refuses it with `invalid_request` whichever value is the valid one, and
/// nothing changes.
fn repeated_authorization_fields_are_refused<S: Store>(store: &S) {
    let mut w = World::new(store);
    let t = w.login();
    let good = format!("Bearer {}", t.access_token.expose_secret());
    let read = ScopeSet::parse("skills:read").unwrap();
    let pairs = [
        [good.as_str(), "Bearer garbage"],
        ["Bearer garbage", good.as_str()],
        [good.as_str(), good.as_str()],
    ];
    for pair in pairs {
        let field = HeaderField::new(pair.map(str::as_bytes));
        for rejection in [
            w.engine
                .verify_bearer(&w.site, field, &read, w.now)
                .unwrap_err(),
            w.engine
                .verify_agent_token(&w.site, field, &read, w.now)
                .unwrap_err(),
        ] {
            assert_eq!(rejection.code(), ErrorCode::InvalidRequest);
            let r = rejection.to_response();
            assert_eq!(r.status, 400);
            let challenge = r.header("www-authenticate").unwrap();
            assert!(
                challenge.starts_with(r#"Bearer error="invalid_request""#),
                "{challenge}"
            );
            assert!(challenge.contains("resource_metadata="), "{challenge}");
        }
    }
    assert!(w.bearer(&t, "skills:read").is_ok(), "one field still works");

    let before = crate::forgery::image(w.engine.store());
    let client_id = w.client_id.clone();
    let refresh = refresh_of(&t);
    let body = encode_pairs([
        ("grant_type", "refresh_token"),
        ("refresh_token", refresh.as_str()),
        ("client_id", client_id.as_str()),
    ]);
    let basic = "Basic YzpzZWNyZXQ=";
    for pair in [[basic, ""], ["", basic], [basic, basic]] {
        let field = HeaderField::new(pair.map(str::as_bytes));
        let e = w
            .engine
            .token(Own, &w.site, &body, field, &mut w.rng, w.now)
            .unwrap_err();
        assert_eq!(e, TokenError::authorization(HeaderError::Repeated));
        let r = e.to_response();
        assert_eq!(r.status, 400);
        assert!(
            r.body.contains(r#""error":"invalid_request""#),
            "{}",
            r.body
        );
        let revoke = encode_pairs([("token", refresh.as_str()), ("client_id", &client_id)]);
        let e = w
            .engine
            .revoke_token(Own, &w.site, &revoke, field, w.now)
            .unwrap_err();
        assert_eq!(e, RevokeError::authorization(HeaderError::Repeated));
        assert_eq!(e.to_response().status, 400);
    }
    assert!(
        crate::forgery::image(w.engine.store()) == before,
        "nothing changed"
    );
    assert!(w.refresh(&refresh).is_ok(), "the token was not spent");
}

on_every_store!(repeated_authorization_fields_are_refused);

fn revocation_endpoint_and_grant_management<S: Store>(store: &S) {
    let mut w = World::new(store);
    let a = w.login();
    let b = w.login();
    let page = w
        .engine
        .list_user_grants(&w.site, USER, None, 1, w.now)
        .unwrap();
    assert_eq!(page.grants.len(), 1);
    let rest = w
        .engine
        .list_user_grants(&w.site, USER, page.next, 10, w.now)
        .unwrap();
    assert_eq!(rest.grants.len(), 1);
    assert_eq!(rest.next, None);
    assert_eq!(
        w.engine
            .list_site_grants(&w.site, None, 10, w.now)
            .unwrap()
            .grants
            .len(),
        2
    );
    // RFC 7009: unknown tokens are 200, another client's token is a no-op.
    let client_id = w.client_id.clone();
    let body = encode_pairs([("token", "garbage"), ("client_id", client_id.as_str())]);
    assert!(
        w.engine
            .revoke_token(Own, &w.site, &body, HeaderField::ABSENT, w.now)
            .is_ok()
    );
    let other = w
        .engine
        .register_client(
            br#"{"redirect_uris":["https://o.example/cb"],"token_endpoint_auth_method":"none"}"#,
            &mut w.rng,
            w.now,
        )
        .unwrap();
    let body = encode_pairs([
        ("token", refresh_of(&a).as_str()),
        ("client_id", other.client_id.as_str()),
    ]);
    assert!(
        w.engine
            .revoke_token(Own, &w.site, &body, HeaderField::ABSENT, w.now)
            .is_ok()
    );
    assert!(w.bearer(&a, "skills:read").is_ok());
    let body = encode_pairs([
        ("token", refresh_of(&a).as_str()),
        ("client_id", client_id.as_str()),
    ]);
    w.engine
        .revoke_token(Own, &w.site, &body, HeaderField::ABSENT, w.now)
        .unwrap();
    assert!(w.bearer(&a, "skills:read").is_err());
    // Revoking by access token revokes its grant too.
    let body = encode_pairs([
        ("token", b.access_token.expose_secret()),
        ("client_id", client_id.as_str()),
    ]);
    w.engine
        .revoke_token(Own, &w.site, &body, HeaderField::ABSENT, w.now)
        .unwrap();
    assert!(w.bearer(&b, "skills:read").is_err());
    let statuses: Vec<GrantStatus> = w
        .engine
        .list_user_grants(&w.site, USER, None, 10, w.now)
        .unwrap()
        .grants
        .iter()
        .map(|g| g.status)
        .collect();
    assert_eq!(statuses, [GrantStatus::Revoked, GrantStatus::Revoked]);
    // Revoke all of a user's grants.
    let c = w.login();
    assert_eq!(
        w.engine
            .revoke_user_grants(Own, &w.site, USER, w.now)
            .unwrap(),
        1
    );
    assert!(w.bearer(&c, "skills:read").is_err());
    // Revoke all of a site's grants.
    let d = w.login();
    w.engine.revoke_site_grants(Own, &w.site).unwrap();
    assert!(w.bearer(&d, "skills:read").is_err());
}

fn sweep_deletes_expired_codes_and_grants_in_batches<S: Store>(store: &S) {
    let mut w = World::new(store);
    for _ in 0..5 {
        w.login();
    }
    let q = w.query(&[], &[]);
    let _unused_code = w.code_for(&q);
    let live = w.login();
    w.advance(29 * DAY);
    let live = w.refresh(&refresh_of(&live)).unwrap();
    w.advance(2 * DAY);
    let mut handled = 0;
    loop {
        let n = w.engine.sweep(Own, w.now, 3).unwrap();
        handled += n;
        if n < 3 {
            break;
        }
    }
    assert!(handled >= 12, "codes and grants swept: {handled}");
    let page = w
        .engine
        .list_site_grants(&w.site, None, 100, w.now)
        .unwrap();
    assert_eq!(page.grants.len(), 1, "only the refreshed grant remains");
    assert!(w.refresh(&refresh_of(&live)).is_ok());
}

on_every_store!(
    full_code_flow_issues_tokens_bound_to_the_resource,
    deny_redirects_access_denied,
    pkce_rules,
    code_replay,
    loopback_redirects_ignore_only_the_port,
    unsafe_redirect_uris_are_refused_at_registration,
    unknown_clients_and_bad_redirects_are_never_redirected,
    resource_comparison,
    refresh_rotates_and_reuse_revokes,
    forged_tokens_revoke_nothing_and_answer_like_reuse,
    refresh_scope_may_narrow_never_widen,
    refresh_is_bound_to_client_and_resource,
    refresh_needs_a_registered_refresh_grant,
    a_spent_token_within_the_grace_gets_the_current_one,
    idle_and_absolute_lifetimes,
    the_off_switch_answers_503_and_changes_nothing,
    site_key_rotation_revokes_everything_at_once,
    bearer_challenges,
    revocation_endpoint_and_grant_management,
    sweep_deletes_expired_codes_and_grants_in_batches,
);

mod signing_key_rotation {
    #[test]
    fn memory() {
        let store = std::sync::Arc::new(crate::support::memory());
        super::signing_key_rotation_logs_nobody_out(&store);
    }

    #[test]
    fn redb() {
        let db = crate::support::TempRedb::new();
        let store = std::sync::Arc::new(db.store);
        super::signing_key_rotation_logs_nobody_out(&store);
    }

    #[test]
    fn postgres() {
        if let Some(db) = crate::support::TempPostgres::new() {
            super::signing_key_rotation_logs_nobody_out(&db.store);
        }
    }
}

/// Two threads race one refresh token. Strict policy: exactly one rotation,
/// and the loser's attempt is reuse, which revokes the grant. With a retry
/// window: both get the very same successor.
fn racing_refreshes<S: Store + Sync>(store: &S, window: bool, rounds: u64) {
    let mut policy = Policy::default();
    if !window {
        policy.refresh_reuse_grace = Duration::ZERO;
    }
    let mut w = World::with_policy(store, policy);
    for round in 0..rounds {
        let t = w.login();
        let refresh = refresh_of(&t);
        let body = encode_pairs([
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh.as_str()),
            ("client_id", w.client_id.as_str()),
        ]);
        let barrier = std::sync::Barrier::new(2);
        let (engine, site, now) = (&w.engine, &w.site, w.now);
        let results: Vec<Result<TokenResponse, TokenError>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..2u64)
                .map(|i| {
                    let (barrier, body) = (&barrier, &body);
                    s.spawn(move || {
                        let mut rng = crate::support::rng(round * 2 + i);
                        barrier.wait();
                        engine.token(Own, site, body, HeaderField::ABSENT, &mut rng, now)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let ok: Vec<&TokenResponse> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        if window {
            assert_eq!(ok.len(), 2, "round {round}: both callers are answered");
            assert_eq!(
                refresh_of(ok[0]),
                refresh_of(ok[1]),
                "round {round}: the same successor"
            );
            assert!(w.refresh(&refresh_of(ok[0])).is_ok());
        } else {
            assert_eq!(ok.len(), 1, "round {round}: exactly one rotation");
            assert!(
                results
                    .iter()
                    .any(|r| r.as_ref().err() == Some(&TokenError::InvalidGrant))
            );
            assert!(
                w.refresh(&refresh_of(ok[0])).is_err(),
                "round {round}: the loser's reuse revoked the grant"
            );
        }
    }
}

mod racing_refresh {
    #[test]
    fn strict_memory() {
        super::racing_refreshes(&crate::support::memory(), false, 20);
    }

    #[test]
    fn strict_redb() {
        super::racing_refreshes(&crate::support::TempRedb::new().store, false, 20);
    }

    #[test]
    fn window_memory() {
        super::racing_refreshes(&crate::support::memory(), true, 20);
    }

    #[test]
    fn window_redb() {
        super::racing_refreshes(&crate::support::TempRedb::new().store, true, 20);
    }

    /// On PostgreSQL the two callers really run concurrently (two
    /// connections, `SERIALIZABLE`): the loser meets a serialization
    /// failure, the engine re-runs it, and it is then judged as reuse.
    #[test]
    fn strict_postgres() {
        if let Some(db) = crate::support::TempPostgres::new() {
            super::racing_refreshes(&*db.store, false, 200);
        }
    }

    #[test]
    fn window_postgres() {
        if let Some(db) = crate::support::TempPostgres::new() {
            super::racing_refreshes(&*db.store, true, 200);
        }
    }
}

/// No secret (refresh token, code, client secret, key) appears in any
/// `Debug` output or error text along the whole flow.
fn no_secret_leaks_into_debug_or_errors<S: Store + std::fmt::Debug>(store: &S) {
    let mut w = World::new(store);
    let confidential = w
        .engine
        .register_client(br#"{"redirect_uris":["https://c.example/cb"],"token_endpoint_auth_method":"client_secret_basic"}"#, &mut w.rng, w.now)
        .unwrap();
    let secret = confidential
        .client_secret
        .clone()
        .expect("a confidential client gets a secret");
    let q = w.query(&[], &[]);
    let code = w.code_for(&q);
    let tokens = w.exchange(&code, Some(VERIFIER)).unwrap();
    let principal = w.bearer(&tokens, "skills:read").unwrap();
    let reuse = w.exchange(&code, Some(VERIFIER)).unwrap_err();
    let refresh_err = w.refresh("prt1.garbage").unwrap_err();
    let mut texts = vec![
        format!("{tokens:?}"),
        format!("{confidential:?}"),
        format!("{:?}", w.engine),
        format!("{reuse:?} {reuse}"),
        format!("{refresh_err:?} {refresh_err}"),
        format!(
            "{:?}",
            w.engine.list_site_grants(&w.site, None, 10, w.now).unwrap()
        ),
    ];
    texts.push(format!("{principal:?}"));
    texts.push(format!("{:?}", w.engine.grant(&principal.grant).unwrap()));
    for text in &texts {
        for s in [
            tokens.access_token.expose_secret(),
            tokens.refresh_token.expose_secret(),
            code.as_str(),
            secret.expose_secret(),
            VERIFIER,
        ] {
            assert!(!text.contains(s), "secret in {text}");
        }
        assert!(!text.contains("17, 17, 17"), "key bytes in {text}");
    }
}

on_every_store!(no_secret_leaks_into_debug_or_errors);

fn agent_tokens_are_minted_listed_and_revoked_by_jti<S: Store>(store: &S) {
    use portcullis::engine::{AgentTokenRequest, MintError};
    let mut w = World::new(store);
    let request = AgentTokenRequest {
        subject: USER.into(),
        org_domain: Some("example.com".into()),
        scopes: ScopeSet::parse("skills:read").unwrap(),
        ttl: Duration::from_secs(30 * DAY),
        label: Some("laptop CLI".into()),
    };
    let (token, record) = w
        .engine
        .mint_agent_token(Own, &w.site, request.clone(), &mut w.rng, w.now)
        .unwrap();
    let header = format!("Bearer {}", token.expose_secret());
    let read = ScopeSet::parse("skills:read").unwrap();
    let p = w
        .engine
        .verify_agent_token(&w.site, HeaderField::one(&header), &read, w.now)
        .unwrap();
    assert_eq!(
        (p.subject.as_str(), p.org_domain.as_deref(), p.jti.as_str()),
        (USER, Some("example.com"), record.jti.as_str())
    );
    // Scoped: a write needs a scope the token lacks.
    let write = ScopeSet::parse("skills:write").unwrap();
    assert!(
        matches!(w.engine.verify_agent_token(&w.site, HeaderField::one(&header), &write, w.now), Err(BearerRejection::Challenge(c)) if c.status == 403)
    );
    // An agent token is not an access token, and the reverse.
    assert!(
        w.engine
            .verify_bearer(&w.site, HeaderField::one(&header), &read, w.now)
            .is_err()
    );
    let (second, _) = w
        .engine
        .mint_agent_token(Own, &w.site, request.clone(), &mut w.rng, w.now)
        .unwrap();
    assert_eq!(w.engine.list_agent_tokens(&w.site, USER).unwrap().len(), 2);
    assert!(
        w.engine
            .list_agent_tokens(&w.site, "someone-else")
            .unwrap()
            .is_empty()
    );
    // Revoked by jti: fails at once; the other keeps working.
    assert!(
        w.engine
            .revoke_agent_token(Own, &w.site, &record.jti, w.now)
            .unwrap()
    );
    assert!(
        !w.engine
            .revoke_agent_token(Own, &w.site, &record.jti, w.now)
            .unwrap()
    );
    assert!(
        w.engine
            .verify_agent_token(&w.site, HeaderField::one(&header), &read, w.now)
            .is_err()
    );
    let header2 = format!("Bearer {}", second.expose_secret());
    assert!(
        w.engine
            .verify_agent_token(&w.site, HeaderField::one(&header2), &read, w.now)
            .is_ok()
    );
    // Expiring.
    w.advance(30 * DAY + 10);
    assert!(
        w.engine
            .verify_agent_token(&w.site, HeaderField::one(&header2), &read, w.now)
            .is_err()
    );
    let mut bad = request;
    bad.scopes = ScopeSet::parse("admin").unwrap();
    assert_eq!(
        w.engine
            .mint_agent_token(Own, &w.site, bad, &mut w.rng, w.now)
            .unwrap_err(),
        MintError::InvalidScope
    );
}

on_every_store!(agent_tokens_are_minted_listed_and_revoked_by_jti);

fn metadata_document_clients_follow_the_site_setting<S: Store>(store: &S) {
    use portcullis::metadata::AuthorizationServerMetadata;
    let w = World::new(store);
    let doc_client = "https://agent.example/client.json";
    let q = w.query(
        &[
            ("client_id", doc_client),
            ("redirect_uri", "https://agent.example/cb"),
        ],
        &[],
    );
    let answer = w.engine.authorize(&w.site, &q, None).unwrap();
    let AuthorizeAnswer::FetchClientDocument(fetch) = answer else {
        panic!("{answer:?}")
    };
    assert_eq!(fetch.url, doc_client);
    let body = br#"{"client_id":"https://agent.example/client.json","client_name":"Doc Agent","redirect_uris":["https://agent.example/cb"],"token_endpoint_auth_method":"none"}"#;
    let answer = w.engine.authorize(&w.site, &q, Some(body)).unwrap();
    let AuthorizeAnswer::Consent(screen) = answer else {
        panic!("{answer:?}")
    };
    assert_eq!(screen.client_name_unverified.as_deref(), Some("Doc Agent"));
    assert!(
        AuthorizationServerMetadata::for_site(&w.engine.site(&w.site).unwrap())
            .client_id_metadata_document_supported
    );

    let mut config = SiteConfig::new(
        w.site.clone(),
        "Demo",
        "https://app.example.com",
        "https://app.example.com/mcp/",
    );
    config.client_metadata_documents = false;
    let site = w.engine.update_site(Own, config).unwrap();
    assert!(!AuthorizationServerMetadata::for_site(&site).client_id_metadata_document_supported);
    let answer = w.engine.authorize(&w.site, &q, Some(body)).unwrap();
    assert!(
        matches!(answer, AuthorizeAnswer::ShowError(_)),
        "{answer:?}"
    );
}

on_every_store!(metadata_document_clients_follow_the_site_setting);

fn a_user_revokes_only_their_own_grants<S: Store>(store: &S) {
    let mut w = World::new(store);
    let t = w.login();
    let grant = w.bearer(&t, "skills:read").unwrap().grant;
    assert_eq!(
        w.engine
            .revoke_own_grant(Own, &w.site, "mallory", &grant, w.now)
            .unwrap(),
        None
    );
    assert!(w.bearer(&t, "skills:read").is_ok());
    assert_eq!(
        w.engine
            .revoke_own_grant(Own, &w.site, USER, &grant, w.now)
            .unwrap(),
        Some(true)
    );
    assert!(w.bearer(&t, "skills:read").is_err());
    assert_eq!(
        w.engine
            .revoke_own_grant(Own, &w.site, USER, &grant, w.now)
            .unwrap(),
        Some(false)
    );
}

on_every_store!(a_user_revokes_only_their_own_grants);

/// The bearer check's header step stays off the allocator: reading every
/// value and deciding "exactly one" costs a scan, nothing more.
#[test]
fn reading_the_authorization_field_does_not_allocate() {
    use portcullis::bearer::{BearerError, parse_authorization};

    use crate::alloc_counter::allocations_in;

    let header = format!("Bearer {}", "a".repeat(600));
    let values = [header.as_bytes(), b"Bearer other"];
    let (one, n) = allocations_in(|| parse_authorization(HeaderField::new([values[0]])));
    assert_eq!((one.map(|t| t.map(str::len)), n), (Ok(Some(600)), 0));
    let (two, n) = allocations_in(|| parse_authorization(HeaderField::new(values)));
    assert_eq!((two, n), (Err(BearerError::Repeated), 0));
}

/// `Authorization: Basic` for a registered client (RFC 6749 §2.3.1; derived
/// ids and secrets are base64url and `.`, which need no form-encoding).
fn basic(client_id: &str, secret: &str) -> String {
    use base64::Engine as _;
    let pair = format!("{client_id}:{secret}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

/// RFC 7591 §3.2.1: a client secret belongs to one client. Identical
/// registrations in the same second get distinct ids and secrets, and one
/// client's secret authenticates no other, at the token endpoint or at
/// revocation.
fn identical_registrations_never_share_credentials<S: Store>(store: &S) {
    use portcullis::engine::RevokeError;
    use std::collections::HashSet;
    let mut w = World::new(store);
    let json = br#"{"redirect_uris":["http://127.0.0.1/callback"],"token_endpoint_auth_method":"client_secret_basic","client_name":"Twin","grant_types":["authorization_code","refresh_token"]}"#;
    let mut ids = HashSet::new();
    let mut secrets = HashSet::new();
    let mut first_two = Vec::new();
    for _ in 0..1_000 {
        let registered = w.engine.register_client(json, &mut w.rng, w.now).unwrap();
        assert_eq!(registered.issued_at, w.now);
        let secret = registered.client_secret.clone().unwrap();
        assert!(ids.insert(registered.client_id.clone()));
        assert!(secrets.insert(secret.expose_secret().to_owned()));
        if first_two.len() < 2 {
            first_two.push((registered.client_id, secret));
        }
    }
    assert_eq!((ids.len(), secrets.len()), (1_000, 1_000));
    let [(a_id, a_secret), (b_id, b_secret)] = <[_; 2]>::try_from(first_two).unwrap();

    // Client A signs a user in.
    w.client_id.clone_from(&a_id);
    let code = w.code_for(&w.query(&[], &[]));
    let exchange = encode_pairs([
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("redirect_uri", REDIRECT),
        ("code_verifier", VERIFIER),
    ]);
    let a_id_b_secret = basic(&a_id, b_secret.expose_secret());
    let err = w
        .engine
        .token(
            Own,
            &w.site,
            &exchange,
            HeaderField::one(&a_id_b_secret),
            &mut w.rng,
            w.now,
        )
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidClient);
    // B's own credentials do not redeem A's code either.
    let as_b = basic(&b_id, b_secret.expose_secret());
    assert!(
        w.engine
            .token(
                Own,
                &w.site,
                &exchange,
                HeaderField::one(&as_b),
                &mut w.rng,
                w.now
            )
            .is_err()
    );
    let a_own = basic(&a_id, a_secret.expose_secret());
    let tokens = w
        .engine
        .token(
            Own,
            &w.site,
            &exchange,
            HeaderField::one(&a_own),
            &mut w.rng,
            w.now,
        )
        .unwrap();

    // Revocation with A's id and B's secret is refused and changes nothing.
    let revoke = encode_pairs([("token", refresh_of(&tokens).as_str())]);
    assert_eq!(
        w.engine.revoke_token(
            Own,
            &w.site,
            &revoke,
            HeaderField::one(&a_id_b_secret),
            w.now
        ),
        Err(RevokeError::InvalidClient { basic: true })
    );
    assert!(w.bearer(&tokens, "skills:read").is_ok());
    // Refreshing with A's id and B's secret is refused and rotates nothing.
    let refresh = encode_pairs([
        ("grant_type", "refresh_token"),
        ("refresh_token", refresh_of(&tokens).as_str()),
    ]);
    let err = w
        .engine
        .token(
            Own,
            &w.site,
            &refresh,
            HeaderField::one(&a_id_b_secret),
            &mut w.rng,
            w.now,
        )
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidClient);
    assert!(
        w.engine
            .token(
                Own,
                &w.site,
                &refresh,
                HeaderField::one(&a_own),
                &mut w.rng,
                w.now
            )
            .is_ok()
    );
}

on_every_store!(identical_registrations_never_share_credentials);

/// Registration accepts ids up to `MAX_CLIENT_ID_LEN`; the token and
/// revocation endpoints must then read a Basic header carrying the longest
/// of them with its secret.
fn the_longest_confidential_ids_still_authenticate<S: Store>(store: &S) {
    use portcullis::client::MAX_CLIENT_ID_LEN;
    use portcullis::engine::RevokeError;
    let mut w = World::new(store);
    let registered = (0..=2_000)
        .rev()
        .step_by(10)
        .find_map(|n| {
            let json = format!(
                r#"{{"redirect_uris":["https://c.example/{}","https://c.example/{}"],"token_endpoint_auth_method":"client_secret_basic"}}"#,
                "a".repeat(1_900),
                "b".repeat(n)
            );
            w.engine
                .register_client(json.as_bytes(), &mut w.rng, w.now)
                .ok()
        })
        .unwrap();
    assert!(registered.client_id.len() > MAX_CLIENT_ID_LEN - 40);
    let secret = registered.client_secret.unwrap();
    let body = encode_pairs([("token", "unknown")]);
    let header = basic(&registered.client_id, secret.expose_secret());
    assert_eq!(
        w.engine
            .revoke_token(Own, &w.site, &body, HeaderField::one(&header), w.now),
        Ok(())
    );
    let mut wrong = secret.expose_secret().to_owned();
    wrong.replace_range(..1, if wrong.starts_with('A') { "B" } else { "A" });
    let header = basic(&registered.client_id, &wrong);
    assert_eq!(
        w.engine
            .revoke_token(Own, &w.site, &body, HeaderField::one(&header), w.now),
        Err(RevokeError::InvalidClient { basic: true })
    );
}

on_every_store!(the_longest_confidential_ids_still_authenticate);

/// The bearer check reads the site and the grant in place (issue 12 item
/// 4): its allocations are the answer's own fields — the site id, the
/// subject, the client id and name, the token's scope set (its list and two
/// tokens) and the token id — and nothing for the stored records.
#[test]
fn the_bearer_check_allocates_only_its_answer() {
    use crate::alloc_counter::allocations_in;

    let mut w = World::new(crate::support::memory());
    let tokens = w.login();
    let header = format!("Bearer {}", tokens.access_token.expose_secret());
    let read = ScopeSet::parse("skills:read").unwrap();
    let check = || {
        w.engine
            .verify_bearer(&w.site, HeaderField::one(&header), &read, w.now)
            .unwrap()
    };
    let expected = check();
    let (principal, n) = allocations_in(check);
    assert_eq!(principal, expected);
    assert_eq!(principal.scopes.iter().count(), 2);
    assert!(principal.client_name.is_some());
    assert!(n <= 8, "{n} allocations");
}
