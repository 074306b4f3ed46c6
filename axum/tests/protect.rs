//! `Portcullis::protect`: the bearer guard in front of the MCP service.

use axum::http::StatusCode;
use portcullis_core::Own;
use portcullis_store_memory::MemoryStore;
use serde_json::json;

use crate::support::client::{challenge_param, http};
use crate::support::{READ, READ_WRITE, TestApp};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_is_challenged_with_the_resource_metadata_and_the_endpoint_scopes() {
    let app = TestApp::start(MemoryStore::new()).await;
    let answer = http()
        .post(app.mcp_url())
        .header("content-type", "application/json")
        .body(r#"{"tool":"whoami"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 401);
    let challenge = answer.headers()["www-authenticate"].to_str().unwrap();
    assert!(challenge.starts_with("Bearer "), "{challenge}");
    let path = app.mcp_url().strip_prefix(&app.origin).unwrap().to_owned();
    assert_eq!(
        challenge_param(challenge, "resource_metadata").as_deref(),
        Some(format!("{}/.well-known/oauth-protected-resource{path}", app.origin).as_str()),
        "{challenge}"
    );
    assert_eq!(
        challenge_param(challenge, "scope").as_deref(),
        Some(READ),
        "{challenge}"
    );
    assert!(
        !challenge.contains("error="),
        "no credentials, no error: {challenge}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_verified_agent_reaches_the_service_in_the_request_extensions() {
    let app = TestApp::start(MemoryStore::new()).await;
    let (client, tokens) = app.connect("alice", READ).await;
    let who = client
        .call_ok(&tokens.access, &json!({"tool": "whoami"}))
        .await;
    assert_eq!(
        who,
        json!({"subject": "alice", "scopes": READ, "grant": true})
    );
}

/// An `initialize` (a `POST` without `MCP-Protocol-Version`) is read by the
/// guard to note its capabilities and reaches the service unchanged; the
/// requests after it (with the header) are served without that read and
/// see what it declared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_initialize_is_noted_and_reaches_the_service_unchanged() {
    let app = TestApp::start(MemoryStore::new()).await;
    let (client, tokens) = app.connect("alice", READ).await;
    let after = [("mcp-protocol-version", "2025-11-25")];
    let declared = json!({"tool": "declared"});
    let before = client.call_with(&tokens.access, &declared, &after).await;
    assert_eq!(before.status, StatusCode::OK, "{}", before.body);
    assert_eq!(before.json()["url_elicitation"], json!(false));

    let initialize = json!({
        "tool": "declared",
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"capabilities": {"elicitation": {"url": {}}}},
    });
    let first = client.call_ok(&tokens.access, &initialize).await;
    assert_eq!(
        first["call"], initialize,
        "the body reaches the service whole"
    );

    let later = client.call_with(&tokens.access, &declared, &after).await;
    assert_eq!(later.status, StatusCode::OK, "{}", later.body);
    assert_eq!(later.json()["url_elicitation"], json!(true));
    assert_eq!(later.json()["call"], declared);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credentials_are_refused_before_the_service() {
    let app = TestApp::start(MemoryStore::new()).await;
    let (client, tokens) = app.connect("alice", READ).await;
    let body = json!({"tool": "whoami"});

    // RFC 6750 §2.3 is not offered: a token in the query is refused, even
    // beside a valid header.
    let in_query = client
        .http
        .post(format!("{}?access_token={}", app.mcp_url(), tokens.access))
        .header("authorization", format!("Bearer {}", tokens.access))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(in_query.status().as_u16(), 400);
    let text = in_query.text().await.unwrap();
    assert!(text.contains("invalid_request"), "{text}");
    assert!(!text.contains("alice"), "the service did not run: {text}");

    // A forged token, and a repeated Authorization field.
    let forged = client.call(&format!("{}x", tokens.access), &body).await;
    assert_eq!(forged.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        challenge_param(forged.challenge(), "error").as_deref(),
        Some("invalid_token")
    );
    let repeated = client
        .call_with(
            &tokens.access,
            &body,
            &[("authorization", &format!("Bearer {}", tokens.access))],
        )
        .await;
    assert_eq!(
        repeated.status,
        StatusCode::BAD_REQUEST,
        "{}",
        repeated.body
    );

    // Another scheme.
    let basic = client
        .http
        .post(app.mcp_url())
        .header("authorization", "Basic YWxpY2U6c2VjcmV0")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(basic.status().as_u16(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_origin_is_refused_and_the_apps_own_is_not() {
    let app = TestApp::start(MemoryStore::new()).await;
    let (client, tokens) = app.connect("alice", READ).await;
    let body = json!({"tool": "whoami"});
    for origin in ["http://evil.example", "null", "http://127.0.0.1:1"] {
        let refused = client
            .call_with(&tokens.access, &body, &[("origin", origin)])
            .await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{origin}");
        assert!(!refused.body.contains("alice"), "{origin}");
    }
    let own = client
        .call_with(&tokens.access, &body, &[("origin", &app.origin)])
        .await;
    assert_eq!(own.status, StatusCode::OK, "{}", own.body);
    // No Origin at all: not a browser.
    assert_eq!(
        client.call(&tokens.access, &body).await.status,
        StatusCode::OK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_site_key_in_the_path_is_404() {
    let app = TestApp::start(MemoryStore::new()).await;
    let (client, tokens) = app.connect("alice", READ).await;
    let answer = client
        .http
        .post(format!("{}/mcp/not-the-site-key", app.origin))
        .header("authorization", format!("Bearer {}", tokens.access))
        .body(r#"{"tool":"whoami"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 404);
    // Signed out too: a wrong key tells nothing about the site.
    let answer = http()
        .post(format!("{}/mcp/not-the-site-key", app.origin))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 404);
    assert!(answer.headers().get("www-authenticate").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_site_key_moves_the_mcp_url_and_ends_every_grant() {
    let app = TestApp::start(MemoryStore::new()).await;
    let (client, tokens) = app.connect("alice", READ).await;
    let old = app.mcp_url();
    let p = app.portcullis.clone();
    tokio::task::spawn_blocking(move || {
        p.engine()
            .rotate_site_key(Own, p.site_id(), &mut rand::rng())
            .unwrap();
        p.reload_site().unwrap();
    })
    .await
    .unwrap();
    assert_ne!(app.mcp_url(), old);
    let at_old = client
        .call(&tokens.access, &json!({"tool": "whoami"}))
        .await;
    assert_eq!(at_old.status, StatusCode::NOT_FOUND);
    let at_new = client
        .http
        .post(app.mcp_url())
        .header("authorization", format!("Bearer {}", tokens.access))
        .body(r#"{"tool":"whoami"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(at_new.status().as_u16(), 401, "the old grant ended");
    // A client discovers the new URL and connects again.
    let (client, tokens) = app.connect("alice", READ).await;
    assert_eq!(
        client
            .call(&tokens.access, &json!({"tool": "whoami"}))
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tools_missing_scope_turns_the_answer_into_403_insufficient_scope() {
    let app = TestApp::start(MemoryStore::new()).await;
    let (client, read_only) = app.connect("alice", READ).await;
    let refused = client
        .call(&read_only.access, &json!({"tool": "export"}))
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);
    let challenge = refused.challenge();
    assert_eq!(
        challenge_param(challenge, "error").as_deref(),
        Some("insufficient_scope"),
        "{challenge}"
    );
    assert_eq!(
        challenge_param(challenge, "scope").as_deref(),
        Some(READ_WRITE),
        "the scope needed and those held: {challenge}"
    );
    assert!(
        challenge_param(challenge, "resource_metadata").is_some(),
        "{challenge}"
    );
    // The next request of the same token starts clean.
    assert_eq!(
        client
            .call(&read_only.access, &json!({"tool": "whoami"}))
            .await
            .status,
        StatusCode::OK
    );
    // Stepped up, the same tool answers.
    let full = client.connect("alice", READ_WRITE).await;
    let exported = client
        .call_ok(&full.access, &json!({"tool": "export"}))
        .await;
    assert_eq!(exported, json!({"exported": true}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switched_off_site_answers_503_with_retry_after() {
    let app = TestApp::start(MemoryStore::new()).await;
    let (client, tokens) = app.connect("alice", READ).await;
    let body = json!({"tool": "whoami"});
    app.set_site_enabled(false).await;
    let off = client.call(&tokens.access, &body).await;
    assert_eq!(off.status, StatusCode::SERVICE_UNAVAILABLE, "{}", off.body);
    let retry = off.header("retry-after").expect("Retry-After");
    assert!(retry.parse::<u32>().is_ok_and(|s| s > 0), "{retry}");
    // The authorization endpoint says so too, and issues nothing.
    let query = client.authorization_query(READ, &crate::support::client::verifier());
    let page = client.get_authorize(&query, Some("alice")).await;
    assert_eq!(page.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(page.header("retry-after").is_some());

    app.set_site_enabled(true).await;
    assert_eq!(
        client.call(&tokens.access, &body).await.status,
        StatusCode::OK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minted_agent_token_passes_the_guard_but_cannot_run_ledger_actions() {
    let app = TestApp::start(MemoryStore::new()).await;
    let p = app.portcullis.clone();
    let (token, _) = tokio::task::spawn_blocking(move || {
        p.engine()
            .mint_agent_token(
                Own,
                p.site_id(),
                portcullis_core::engine::AgentTokenRequest {
                    subject: "alice".into(),
                    org_domain: None,
                    scopes: portcullis_core::scope::ScopeSet::parse(READ_WRITE).unwrap(),
                    ttl: std::time::Duration::from_hours(1),
                    label: Some("ci".into()),
                },
                &mut rand::rng(),
                crate::support::now(),
            )
            .unwrap()
    })
    .await
    .unwrap();
    let token = token.expose_secret().to_owned();
    let client = app.client().await;
    let who = client.call_ok(&token, &json!({"tool": "whoami"})).await;
    assert_eq!(
        who,
        json!({"subject": "alice", "scopes": READ_WRITE, "grant": false})
    );
    let id = crate::support::request_id();
    let answer = client
        .call_ok(
            &token,
            &crate::support::call_body("add", id, &crate::support::AddArgs::text("x")),
        )
        .await;
    assert_eq!(crate::support::error_code(&answer), "ACTION_UNAVAILABLE");
    assert_eq!(app.effects.runs(), 0);
}

/// The guard as a layer (`route_layer`), and `Agent` as a handler's
/// argument; a route outside the layer that asks for an `Agent` is a
/// wiring mistake answered 500, never served unchecked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_and_the_extractor_serve_a_plain_axum_handler() {
    use axum::routing::post;
    use portcullis_axum::Agent;

    async fn whoami(agent: Agent) -> String {
        agent.subject().to_owned()
    }

    let app = TestApp::start(MemoryStore::new()).await;
    let (_, tokens) = app.connect("alice", READ).await;
    let p = &app.portcullis;
    let router = axum::Router::new()
        .route(&p.mcp_route(), post(whoami))
        .route_layer(p.layer())
        .route("/unguarded", post(whoami));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let path = app.mcp_url().strip_prefix(&app.origin).unwrap().to_owned();
    let call = |url: String, token: Option<&str>| {
        let mut request = http().post(url).body("{}");
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    let ok = call(format!("{origin}{path}"), Some(&tokens.access))
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(ok.text().await.unwrap(), "alice");
    let refused = call(format!("{origin}{path}"), None).await.unwrap();
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    let unguarded = call(format!("{origin}/unguarded"), Some(&tokens.access))
        .await
        .unwrap();
    assert_eq!(unguarded.status(), StatusCode::INTERNAL_SERVER_ERROR);
}
