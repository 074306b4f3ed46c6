//! `POST /introspect` (RFC 7662): a resource server asks over HTTP.

use axum::http::StatusCode;
use portcullis_axum::HostStore;
use portcullis_core::introspect::{INACTIVE_JSON, ResourceServerCredential};
use serde_json::json;

use crate::on_every_store;
use crate::support::client::{Answer, form, get_json, http};
use crate::support::{READ, TestApp};

/// `POST /introspect` of `token` with `authorization`, if any.
async fn introspect<S: HostStore>(
    app: &TestApp<S>,
    authorization: Option<&str>,
    token: &str,
) -> Answer {
    let mut request = http()
        .post(format!("{}/introspect", app.origin))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[("token", token)]));
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    Answer::of(request.send().await.expect("POST /introspect")).await
}

async fn a_resource_server_asks_over_http<S: HostStore>(store: S) {
    let app = TestApp::start(store).await;
    let metadata = get_json(
        &http(),
        &format!("{}/.well-known/oauth-authorization-server", app.origin),
    )
    .await;
    assert_eq!(
        metadata["introspection_endpoint"],
        format!("{}/introspect", app.origin)
    );
    assert_eq!(
        metadata["introspection_endpoint_auth_methods_supported"],
        json!(["client_secret_basic"])
    );

    let (client, tokens) = app.connect("alice", READ).await;
    let p = &app.portcullis;
    let credential =
        ResourceServerCredential::mint(p.engine().keyring(), p.site_id(), "notes-api").unwrap();
    let basic = credential.basic_authorization();
    let basic = Some(basic.expose_secret());

    // Active: 200, the token described, never cached.
    let active = introspect(&app, basic, &tokens.access).await;
    assert_eq!(active.status, StatusCode::OK, "{}", active.body);
    assert_eq!(active.header("cache-control"), Some("no-store"));
    assert_eq!(active.header("content-type"), Some("application/json"));
    let body = active.json();
    assert_eq!(body["active"], true, "{body}");
    assert_eq!(body["sub"], "alice");
    assert_eq!(body["scope"], READ);
    assert_eq!(body["client_id"], client.client_id.as_str());
    assert_eq!(body["aud"], app.mcp_url().as_str());
    assert_eq!(body["iss"], app.origin.as_str());
    assert_eq!(body["token_type"], "Bearer");
    assert!(body["exp"].as_u64().unwrap() > body["iat"].as_u64().unwrap());

    // Inactive: 200 and exactly `{"active":false}`, whatever the token.
    for token in [tokens.refresh.as_str(), "garbage", ""] {
        let inactive = introspect(&app, basic, token).await;
        assert_eq!(inactive.status, StatusCode::OK, "{token}");
        assert_eq!(inactive.body, INACTIVE_JSON, "{token}");
        assert_eq!(inactive.header("cache-control"), Some("no-store"));
    }

    // No credentials, or the wrong ones: 401 invalid_client, a Basic
    // challenge when Basic was tried, and nothing about the token.
    let anonymous = introspect(&app, None, &tokens.access).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    assert_eq!(anonymous.json()["error"], "invalid_client");
    assert!(anonymous.header("www-authenticate").is_none());
    assert!(!anonymous.body.contains("active"), "{}", anonymous.body);
    let mut wrong = credential.secret().expose_secret().to_owned();
    let last = wrong.pop().unwrap();
    wrong.push(if last == 'A' { 'B' } else { 'A' });
    let wrong = format!(
        "Basic {}",
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            format!("notes-api:{wrong}")
        )
    );
    let refused = introspect(&app, Some(&wrong), &tokens.access).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert_eq!(refused.json()["error"], "invalid_client");
    assert_eq!(
        refused.header("www-authenticate"),
        Some("Basic realm=\"introspection\"")
    );
    let bearer = format!("Bearer {}", tokens.access);
    let refused = introspect(&app, Some(&bearer), &tokens.access).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);

    // A revocation is seen by the next question.
    let revoked = client.revoke(&tokens.access).await;
    assert_eq!(revoked.status, StatusCode::OK, "{}", revoked.body);
    let after = introspect(&app, basic, &tokens.access).await;
    assert_eq!(
        (after.status, after.body.as_str()),
        (StatusCode::OK, INACTIVE_JSON)
    );

    // Switched off: 503 with Retry-After, as the token endpoint.
    let tokens = client.connect("alice", READ).await;
    assert_eq!(
        introspect(&app, basic, &tokens.access).await.json()["active"],
        true
    );
    app.set_site_enabled(false).await;
    let off = introspect(&app, basic, &tokens.access).await;
    assert_eq!(off.status, StatusCode::SERVICE_UNAVAILABLE, "{}", off.body);
    assert!(off.header("retry-after").is_some());
    assert_eq!(off.json()["error"], "temporarily_unavailable");
    app.set_site_enabled(true).await;
    assert_eq!(
        introspect(&app, basic, &tokens.access).await.json()["active"],
        true
    );
}

on_every_store!(a_resource_server_asks_over_http);
