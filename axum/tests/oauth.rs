//! `Portcullis::routes`: the authorization server as an MCP client and a
//! browser meet it over HTTP.

use axum::http::StatusCode;
use portcullis_axum::HostStore;
use portcullis_store_memory::MemoryStore;
use serde_json::{Value, json};

use crate::support::client::{REDIRECT, attribute, get_json, http, query_param, verifier};
use crate::support::{OAuthClient, READ, READ_WRITE, TestApp, call_body, request_id};

/// The grants `user` holds on the app's site that are live.
async fn live_grants<S: HostStore>(app: &TestApp<S>, user: &str) -> usize {
    let p = app.portcullis.clone();
    let user = user.to_owned();
    tokio::task::spawn_blocking(move || {
        p.engine()
            .list_user_grants(p.site_id(), &user, None, 100, crate::support::now())
            .unwrap()
            .grants
            .iter()
            .filter(|g| g.status == portcullis_core::grant::GrantStatus::Live)
            .count()
    })
    .await
    .unwrap()
}

/// Form fields or headers.
type Pairs<'a> = Vec<(&'a str, &'a str)>;

/// The `whoami` tool with `access`: its HTTP status.
async fn whoami(client: &OAuthClient, access: &str) -> StatusCode {
    client.call(access, &json!({"tool": "whoami"})).await.status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_documents_are_served_at_their_path_suffixed_urls_only() {
    let app = TestApp::start(MemoryStore::new()).await;
    let http = http();
    let server = get_json(
        &http,
        &format!("{}/.well-known/oauth-authorization-server", app.origin),
    )
    .await;
    assert_eq!(server["issuer"], app.origin.as_str());
    for (field, path) in [
        ("authorization_endpoint", "/authorize"),
        ("token_endpoint", "/token"),
        ("registration_endpoint", "/register"),
        ("revocation_endpoint", "/revoke"),
    ] {
        assert_eq!(server[field], format!("{}{path}", app.origin), "{field}");
    }
    assert_eq!(server["code_challenge_methods_supported"], json!(["S256"]));
    assert_eq!(server["scopes_supported"], json!([READ, "notes:write"]));

    // RFC 9728 §3.1: the resource's path after the well-known prefix.
    let mcp = app.mcp_url();
    let path = mcp.strip_prefix(&app.origin).unwrap();
    assert!(path.starts_with("/mcp/"), "{path}");
    let url = format!("{}/.well-known/oauth-protected-resource{path}", app.origin);
    let resource = get_json(&http, &url).await;
    assert_eq!(resource["resource"], mcp.as_str());
    assert_eq!(resource["authorization_servers"], json!([app.origin]));
    let answer = http.get(&url).send().await.unwrap();
    assert_eq!(answer.headers()["x-content-type-options"], "nosniff");

    for other in [
        format!(
            "{}/.well-known/oauth-protected-resource/mcp/not-the-key",
            app.origin
        ),
        format!("{}/.well-known/oauth-protected-resource", app.origin),
        format!("{}/.well-known/oauth-protected-resource/mcp", app.origin),
    ] {
        let answer = http.get(&other).send().await.unwrap();
        assert_eq!(answer.status().as_u16(), 404, "{other}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_refusals_are_rfc7591_error_json() {
    let app = TestApp::start(MemoryStore::new()).await;
    let http = http();
    let register = |body: &'static str| {
        let http = http.clone();
        let url = format!("{}/register", app.origin);
        async move {
            let r = http
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let content_type = r.headers()["content-type"].to_str().unwrap().to_owned();
            let json: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
            (status, content_type, json)
        }
    };
    for (body, code) in [
        (
            r#"{"redirect_uris":["http://evil.example/cb"],"token_endpoint_auth_method":"none"}"#,
            "invalid_redirect_uri",
        ),
        (
            r#"{"redirect_uris":["javascript:alert(1)"],"token_endpoint_auth_method":"none"}"#,
            "invalid_redirect_uri",
        ),
        (
            r#"{"redirect_uris":[],"token_endpoint_auth_method":"none"}"#,
            "invalid_redirect_uri",
        ),
        ("not json", "invalid_client_metadata"),
        (
            r#"{"redirect_uris":["http://127.0.0.1/cb"],"token_endpoint_auth_method":"private_key_jwt"}"#,
            "invalid_client_metadata",
        ),
    ] {
        let (status, content_type, json) = register(body).await;
        assert_eq!(status, 400, "{body}: {json}");
        assert!(content_type.starts_with("application/json"), "{body}");
        assert_eq!(json["error"], code, "{body}: {json}");
        assert!(json["error_description"].is_string(), "{body}: {json}");
        assert!(json.get("client_id").is_none(), "{body}: {json}");
    }
    let (status, _, json) = register(
        r#"{"redirect_uris":["http://127.0.0.1/cb"],"token_endpoint_auth_method":"none"}"#,
    )
    .await;
    assert_eq!(status, 201, "{json}");
    assert!(json["client_id"].is_string(), "{json}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consent_needs_the_users_own_csrf_token_and_a_same_origin_post() {
    let app = TestApp::start(MemoryStore::new()).await;
    let client = app.client().await;
    let verifier = verifier();
    let query = client.authorization_query(READ, &verifier);
    let alice = client.consent(&query, "alice").await;
    assert!(alice.html.contains("Test Agent"), "{}", alice.html);
    assert!(alice.html.contains("unverified"), "{}", alice.html);
    assert!(alice.html.contains("read your notes"), "{}", alice.html);
    assert_eq!(alice.action, format!("/authorize?{query}"));
    let bob = client.consent(&query, "bob").await;
    assert_ne!(alice.csrf, bob.csrf);
    let same_origin = [("origin", app.origin.as_str())];

    let refusals: [(&str, Pairs<'_>, Pairs<'_>); 6] = [
        ("no csrf", vec![("intent", "allow")], same_origin.to_vec()),
        (
            "an empty csrf",
            vec![("csrf", ""), ("intent", "allow")],
            same_origin.to_vec(),
        ),
        (
            "another user's csrf",
            vec![("csrf", &bob.csrf), ("intent", "allow")],
            same_origin.to_vec(),
        ),
        (
            "a foreign origin",
            vec![("csrf", &alice.csrf), ("intent", "allow")],
            vec![("origin", "http://evil.example")],
        ),
        (
            "an opaque origin",
            vec![("csrf", &alice.csrf), ("intent", "allow")],
            vec![("origin", "null")],
        ),
        (
            "a cross-site fetch",
            vec![("csrf", &alice.csrf), ("intent", "allow")],
            vec![("sec-fetch-site", "cross-site")],
        ),
    ];
    for (why, fields, headers) in &refusals {
        let answer = client
            .post_consent(&alice.action, "alice", fields, headers)
            .await;
        assert_eq!(
            answer.status,
            StatusCode::FORBIDDEN,
            "{why}: {}",
            answer.body
        );
        assert!(answer.header("location").is_none(), "{why}");
        assert!(!answer.body.contains("code="), "{why}");
    }
    // A csrf token of another session of the same user is refused too.
    let in_session = |session: &'static str| {
        let client = client.clone();
        let url = format!("{}?{query}", client.authorization_endpoint);
        async move {
            let page = client
                .http
                .get(url)
                .header("cookie", format!("user=alice; session={session}"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            attribute(&page, "name=\"csrf\"", "value").unwrap()
        }
    };
    let s1 = in_session("s1").await;
    let answer = client
        .http
        .post(format!("{}{}", app.origin, alice.action))
        .header("cookie", "user=alice; session=s2")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={s1}&intent=allow"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 403, "another session's csrf");
    assert!(answer.headers().get("location").is_none());

    // Alice's token of this consent form cannot approve another
    // authorization request (here: asking for the write scope too).
    let other_query = client.authorization_query(READ_WRITE, &verifier);
    let other = client
        .post_consent(
            &format!("/authorize?{other_query}"),
            "alice",
            &[("csrf", &alice.csrf), ("intent", "allow")],
            &same_origin,
        )
        .await;
    assert_eq!(
        other.status,
        StatusCode::FORBIDDEN,
        "another request's csrf: {}",
        other.body
    );
    assert!(other.header("location").is_none());

    // The same form with the user's own token, from the app's own page,
    // goes through (so the refusals above were for their reasons alone).
    let allowed = client
        .post_consent(
            &alice.action,
            "alice",
            &[("csrf", &alice.csrf), ("intent", "allow")],
            &same_origin,
        )
        .await;
    assert_eq!(allowed.status, StatusCode::FOUND, "{}", allowed.body);
    let code = query_param(allowed.location(), "code").unwrap();
    OAuthClient::tokens(&client.exchange(&code, &verifier).await);
    assert_eq!(live_grants(&app, "alice").await, 1);
    assert_eq!(live_grants(&app, "bob").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denying_consent_redirects_with_access_denied_and_issues_nothing() {
    let app = TestApp::start(MemoryStore::new()).await;
    let client = app.client().await;
    let query = client.authorization_query(READ, &verifier());
    let consent = client.consent(&query, "alice").await;
    let denied = client
        .post_consent(
            &consent.action,
            "alice",
            &[("csrf", &consent.csrf), ("intent", "deny")],
            &[],
        )
        .await;
    assert_eq!(denied.status, StatusCode::FOUND, "{}", denied.body);
    let location = denied.location();
    assert!(location.starts_with(REDIRECT), "{location}");
    assert_eq!(
        query_param(location, "error").as_deref(),
        Some("access_denied")
    );
    assert_eq!(query_param(location, "state").as_deref(), Some("st4te"));
    assert_eq!(query_param(location, "code"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_authorization_request_is_shown_an_error_never_redirected() {
    let app = TestApp::start(MemoryStore::new()).await;
    let client = app.client().await;
    let good = client.authorization_query(READ, &verifier());
    let bad_redirect = good.replace(
        &url::form_urlencoded::byte_serialize(REDIRECT.as_bytes()).collect::<String>(),
        "https%3A%2F%2Fevil.example%2Fcb",
    );
    assert_ne!(bad_redirect, good);
    for query in [bad_redirect.as_str(), "response_type=code&client_id=nobody"] {
        for user in [None, Some("alice")] {
            let answer = client.get_authorize(query, user).await;
            assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{query} {user:?}");
            assert!(answer.header("location").is_none(), "{query} {user:?}");
            assert_eq!(answer.header("x-frame-options"), Some("DENY"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codes_exchange_once_with_their_verifier_and_refresh_tokens_rotate() {
    let app = TestApp::start(MemoryStore::new()).await;
    let client = app.client().await;
    assert_eq!(
        client.challenge_scope, READ,
        "the endpoint scope is asked for"
    );
    let verifier = verifier();
    let code = client.authorize("alice", READ_WRITE, &verifier).await;

    let wrong = client
        .exchange(&code, &crate::support::client::verifier())
        .await;
    assert_eq!(wrong.status, StatusCode::BAD_REQUEST);
    assert_eq!(wrong.json()["error"], "invalid_grant");
    let first = OAuthClient::tokens(&client.exchange(&code, &verifier).await);
    assert_eq!(first.scope, READ_WRITE);
    assert_eq!(whoami(&client, &first.access).await, StatusCode::OK);
    let who = client
        .call_ok(&first.access, &json!({"tool": "whoami"}))
        .await;
    assert_eq!(who["subject"], "alice");
    assert_eq!(who["scopes"], READ_WRITE);
    assert_eq!(who["grant"], true);

    let second = OAuthClient::tokens(&client.refresh(&first.refresh).await);
    assert_ne!(second.refresh, first.refresh);
    assert_ne!(second.access, first.access);
    assert_eq!(whoami(&client, &second.access).await, StatusCode::OK);
    let third = OAuthClient::tokens(&client.refresh(&second.refresh).await);
    assert_eq!(whoami(&client, &third.access).await, StatusCode::OK);

    // A spent code is refused, and (RFC 6749 §4.1.2) what it issued goes.
    let replay = client.exchange(&code, &verifier).await;
    assert_eq!(replay.status, StatusCode::BAD_REQUEST);
    assert_eq!(replay.json()["error"], "invalid_grant");
    assert_eq!(
        whoami(&client, &third.access).await,
        StatusCode::UNAUTHORIZED
    );
}

/// Under strict rotation (no reuse grace); the default grace is
/// `tests/clients.rs` and the core's `tests/shared_refresh.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reusing_a_spent_refresh_token_revokes_the_grant() {
    let mut options = crate::support::Options::default();
    options.policy.refresh_reuse_grace = std::time::Duration::ZERO;
    let app = TestApp::start_with(
        MemoryStore::new(),
        crate::support::keyring(),
        crate::support::Effects::default(),
        &options,
    )
    .await;
    let (client, first) = app.connect("alice", READ).await;
    let second = OAuthClient::tokens(&client.refresh(&first.refresh).await);
    assert_eq!(whoami(&client, &second.access).await, StatusCode::OK);

    let reuse = client.refresh(&first.refresh).await;
    assert_eq!(reuse.status, StatusCode::BAD_REQUEST, "{}", reuse.body);
    assert_eq!(reuse.json()["error"], "invalid_grant");
    // The successor is dead too, and so is its access token.
    let next = client.refresh(&second.refresh).await;
    assert_eq!(next.status, StatusCode::BAD_REQUEST, "{}", next.body);
    assert_eq!(next.json()["error"], "invalid_grant");
    let refused = client
        .call(&second.access, &json!({"tool": "whoami"}))
        .await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert!(
        refused.challenge().contains("error=\"invalid_token\""),
        "{}",
        refused.challenge()
    );
    assert_eq!(live_grants(&app, "alice").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocation_makes_the_access_token_answer_401_at_the_guard() {
    let app = TestApp::start(MemoryStore::new()).await;
    // Revoking the refresh token.
    let (client, tokens) = app.connect("alice", READ_WRITE).await;
    assert_eq!(whoami(&client, &tokens.access).await, StatusCode::OK);
    let revoked = client.revoke(&tokens.refresh).await;
    assert_eq!(revoked.status, StatusCode::OK, "{}", revoked.body);
    assert_eq!(
        whoami(&client, &tokens.access).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        client.refresh(&tokens.refresh).await.status,
        StatusCode::BAD_REQUEST
    );
    // Revoking the access token itself.
    let other = client.connect("alice", READ).await;
    assert_eq!(whoami(&client, &other.access).await, StatusCode::OK);
    assert_eq!(client.revoke(&other.access).await.status, StatusCode::OK);
    let refused = client.call(&other.access, &json!({"tool": "whoami"})).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert!(refused.challenge().contains("invalid_token"));
    // A revoked grant's agent cannot reach run_once either.
    let ran = client
        .call(
            &tokens.access,
            &call_body("add", request_id(), &crate::support::AddArgs::text("x")),
        )
        .await;
    assert_eq!(ran.status, StatusCode::UNAUTHORIZED);
    assert_eq!(app.effects.runs(), 0);
    // RFC 7009 §2.2: an unknown token is no error.
    assert_eq!(client.revoke("garbage").await.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_out_users_are_sent_to_the_hosts_sign_in() {
    let app = TestApp::start(MemoryStore::new()).await;
    let http = http();
    // The approvals page.
    let page = http
        .get(format!("{}/agent-approvals", app.origin))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status().as_u16(), 303);
    let location = page.headers()["location"].to_str().unwrap();
    assert_eq!(
        query_param(location, "next").as_deref(),
        Some("/agent-approvals")
    );
    // Its JSON: 401, no redirect.
    let pending = http
        .get(format!("{}/agent-approvals/pending", app.origin))
        .send()
        .await
        .unwrap();
    assert_eq!(pending.status().as_u16(), 401);
    // A consent post from a signed-out browser: back to sign-in, nothing
    // issued.
    let client = app.client().await;
    let query = client.authorization_query(READ, &verifier());
    let consent = client.consent(&query, "alice").await;
    let answer = client
        .http
        .post(format!("{}{}", app.origin, consent.action))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={}&intent=allow", consent.csrf))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 303);
    let location = answer.headers()["location"].to_str().unwrap();
    assert!(location.starts_with("/login?"), "{location}");
    assert!(!location.contains("code="), "{location}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_access_token_is_refused_and_a_refreshed_one_works() {
    let mut policy = portcullis_axum::Policy::default();
    policy.access_token_ttl = std::time::Duration::from_secs(1);
    policy.jwt_leeway = std::time::Duration::ZERO;
    let options = crate::support::Options {
        policy,
        ..crate::support::Options::default()
    };
    let app = TestApp::start_with(
        MemoryStore::new(),
        crate::support::keyring(),
        crate::support::Effects::default(),
        &options,
    )
    .await;
    let (client, tokens) = app.connect("alice", READ).await;
    assert_eq!(whoami(&client, &tokens.access).await, StatusCode::OK);
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let expired = client
        .call(&tokens.access, &json!({"tool": "whoami"}))
        .await;
    assert_eq!(expired.status, StatusCode::UNAUTHORIZED);
    assert!(
        expired.challenge().contains("error=\"invalid_token\""),
        "{}",
        expired.challenge()
    );
    let fresh = OAuthClient::tokens(&client.refresh(&tokens.refresh).await);
    assert_eq!(whoami(&client, &fresh.access).await, StatusCode::OK);
}

/// A host with its own consent screen: a plain form with the crate's two
/// fields, naming the scopes in its own words.
struct OwnConsent;

impl portcullis_axum::Host for OwnConsent {
    async fn signed_in(
        &self,
        parts: &axum::http::request::Parts,
    ) -> Option<portcullis_axum::SignedIn> {
        crate::support::CookieHost.signed_in(parts).await
    }

    fn sign_in(&self, return_to: &str) -> axum::response::Response {
        crate::support::CookieHost.sign_in(return_to)
    }

    fn consent(&self, page: &portcullis_axum::ConsentPage<'_>) -> axum::response::Response {
        let scopes: Vec<String> = page
            .screen
            .scopes
            .iter()
            .map(|s| format!("{s}={}", page.describe_scope(s)))
            .collect();
        portcullis_axum::html(
            StatusCode::OK,
            format!(
                "<h1>Our own consent for {user}</h1><p id=\"scopes\">{scopes}</p>\
                 <form method=\"post\" action=\"{action}\">\
                 <input name=\"csrf\" value=\"{csrf}\"></form>",
                user = page.user.subject,
                scopes = scopes.join(";"),
                action = portcullis_axum::pages::escape(page.action),
                csrf = page.csrf,
            ),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosts_own_consent_screen_is_shown_and_its_form_decides() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let portcullis =
        portcullis_axum::Portcullis::builder(MemoryStore::new(), crate::support::keyring())
            .public_url(&origin)
            .scope(READ, "see your notes")
            .scope("notes:write", "write notes")
            .endpoint_scope(READ)
            .build(OwnConsent)
            .await
            .unwrap();
    let router = axum::Router::new()
        .merge(portcullis.routes())
        .route_service(
            &portcullis.mcp_route(),
            portcullis.protect(axum::routing::any(|| async { "served" })),
        );
    let server = tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let client = OAuthClient::discover(&origin, &portcullis.mcp_url()).await;
    let verifier = verifier();
    let query = client.authorization_query(READ, &verifier);
    let consent = client.consent(&query, "alice").await;
    assert!(
        consent.html.contains("Our own consent for alice"),
        "{}",
        consent.html
    );
    assert!(
        consent.html.contains("notes:read=see your notes"),
        "{}",
        consent.html
    );
    let allowed = client
        .post_consent(
            &consent.action,
            "alice",
            &[("csrf", &consent.csrf), ("intent", "allow")],
            &[("origin", &origin)],
        )
        .await;
    assert_eq!(allowed.status, StatusCode::FOUND, "{}", allowed.body);
    let code = query_param(allowed.location(), "code").unwrap();
    let tokens = OAuthClient::tokens(&client.exchange(&code, &verifier).await);
    let answer = client.call(&tokens.access, &json!({})).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.body, "served");
    server.abort();
}

/// A host that lets the user choose which of its apps a grant reaches:
/// its own fields on the crate's consent page, read back on Allow.
struct ChoosesApps;

impl portcullis_axum::Host for ChoosesApps {
    async fn signed_in(
        &self,
        parts: &axum::http::request::Parts,
    ) -> Option<portcullis_axum::SignedIn> {
        crate::support::CookieHost.signed_in(parts).await
    }

    fn sign_in(&self, return_to: &str) -> axum::response::Response {
        crate::support::CookieHost.sign_in(return_to)
    }

    fn consent_fields(
        &self,
        _screen: &portcullis_core::authorize::ConsentScreen,
        user: &portcullis_axum::SignedIn,
    ) -> String {
        format!(
            "<label><input type=\"checkbox\" name=\"only-notes\"> only notes, {}</label>",
            user.subject
        )
    }

    fn consent_apps(
        &self,
        _user: &portcullis_axum::SignedIn,
        form: &portcullis_core::form::Form<'_>,
    ) -> Result<portcullis_core::granted_apps::AppSelection, axum::response::Response> {
        use portcullis_core::granted_apps::AppSelection;
        match form.get("only-notes") {
            None => Ok(AppSelection::All),
            Some("on") => Ok(AppSelection::selected(["notes"]).unwrap()),
            Some(_) => Err(portcullis_axum::forms::bad_form()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosts_consent_fields_choose_the_apps_its_grant_reaches() {
    use portcullis_core::granted_apps::AppSelection;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let portcullis =
        portcullis_axum::Portcullis::builder(MemoryStore::new(), crate::support::keyring())
            .public_url(&origin)
            .scope(READ, "see your notes")
            .endpoint_scope(READ)
            .build(ChoosesApps)
            .await
            .unwrap();
    let router = axum::Router::new()
        .merge(portcullis.routes())
        .route_service(
            &portcullis.mcp_route(),
            portcullis.protect(axum::routing::any(|| async { "served" })),
        );
    let server = tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let client = OAuthClient::discover(&origin, &portcullis.mcp_url()).await;
    let grants = |p: &portcullis_axum::Portcullis<MemoryStore>| {
        let now = portcullis_core::Timestamp::from_secs(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs(),
        );
        let page = p
            .engine()
            .list_user_grants(p.site_id(), "alice", None, 10, now)
            .unwrap();
        page.grants
            .iter()
            .map(|g| {
                p.engine()
                    .granted_apps(p.site_id(), "alice", &g.id, now)
                    .unwrap()
                    .unwrap()
            })
            .collect::<Vec<_>>()
    };
    // The fields are on the crate's page, inside its form, with the user's
    // name the host put there.
    let consent_with = |fields: Vec<(&'static str, &'static str)>| {
        let client = client.clone();
        let origin = origin.clone();
        async move {
            let verifier = verifier();
            let query = client.authorization_query(READ, &verifier);
            let consent = client.consent(&query, "alice").await;
            assert!(
                consent
                    .html
                    .contains("name=\"only-notes\"> only notes, alice"),
                "{}",
                consent.html
            );
            let mut posted = vec![("csrf", consent.csrf.as_str()), ("intent", "allow")];
            posted.extend(fields);
            let answer = client
                .post_consent(&consent.action, "alice", &posted, &[("origin", &origin)])
                .await;
            (answer, client, verifier)
        }
    };
    // A value the host refuses: its answer, and no code.
    let (refused, _, _) = consent_with(vec![("only-notes", "maybe")]).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    // Checked: the grant reaches only notes; unchecked: every app.
    for (fields, expected) in [
        (
            vec![("only-notes", "on")],
            AppSelection::selected(["notes"]).unwrap(),
        ),
        (vec![], AppSelection::All),
    ] {
        let (allowed, client, verifier) = consent_with(fields).await;
        assert_eq!(allowed.status, StatusCode::FOUND, "{}", allowed.body);
        let code = query_param(allowed.location(), "code").unwrap();
        OAuthClient::tokens(&client.exchange(&code, &verifier).await);
        let p = portcullis.clone();
        let found = tokio::task::spawn_blocking(move || grants(&p))
            .await
            .unwrap();
        assert!(found.contains(&expected), "{found:?}");
    }
    assert_eq!(
        tokio::task::spawn_blocking({
            let p = portcullis.clone();
            move || grants(&p).len()
        })
        .await
        .unwrap(),
        2,
        "the refused consent made no grant"
    );
    server.abort();
}
