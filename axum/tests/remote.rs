//! A resource server in another process ([`RemoteResource`]): the
//! authorization server is a real process (this test binary run again as
//! the crash test's child, signing EdDSA access tokens for an MCP URL on
//! another origin), and the resource server here holds nothing but what
//! it fetched: the site's metadata and key set. An MCP client's whole
//! flow (discovery from the resource server's challenge, registration,
//! consent, tokens, calls, step-up, refresh) works against it; tokens of
//! another site, audience or issuer, of another type or key, and expired
//! ones are refused; a routine rotation reaches it through the key set.

use std::path::Path;
use std::time::{Duration, Instant};

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse as _, Response};
use portcullis_axum::keys::{self, LoosePermissions};
use portcullis_axum::remote::RemoteResource;
use portcullis_axum::{Agent, Identity};
use portcullis_core::jwt::{Algorithm, Audience, Claims, Keyring, TokenKey, TokenType};
use serde_json::{Value, json};

use crate::support::child::{self, ChildServer};
use crate::support::client::{Answer, challenge_param, get_json, http};
use crate::support::{OAuthClient, READ, READ_WRITE, WRITE};

/// The MCP service behind the remote check: `whoami` answers what the
/// agent is; `write` needs the write scope first.
async fn tool(parts: Parts, body: Bytes) -> Response {
    let agent = Agent::of(&parts).expect("the guard's agent");
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    if request["tool"] == "write"
        && let Err(missing) = agent.require(WRITE)
    {
        return Json(json!({"error": missing.to_string()})).into_response();
    }
    let Identity::Remote(grant) = agent.identity() else {
        panic!("a remote agent: {agent:?}");
    };
    assert!(agent.principal().is_none(), "no ledger principal remotely");
    Json(json!({
        "subject": agent.subject(),
        "client_id": grant.client_id,
        "scopes": agent.scopes().as_param(),
        "token_id": grant.token_id,
    }))
    .into_response()
}

/// The time now.
fn now() -> portcullis_core::Timestamp {
    portcullis_core::Timestamp::from_secs(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs(),
    )
}

/// The `kid` in a token's header.
fn kid_of(token: &str) -> String {
    use base64::Engine as _;
    let header = token.split('.').next().expect("a header");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header)
        .expect("base64url");
    let header: Value = serde_json::from_slice(&bytes).expect("JSON");
    header["kid"].as_str().expect("a kid").to_owned()
}

/// The kids of the key set at `url`.
async fn published_kids(url: &str) -> Vec<String> {
    get_json(&http(), url).await["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| k["kid"].as_str().expect("kid").to_owned())
        .collect()
}

/// The resource server on `port` for `mcp_url`, served until the test ends.
async fn serve_resource(issuer: &str, mcp_url: &str, port: u16) -> RemoteResource {
    let resource = RemoteResource::builder(issuer, mcp_url)
        .endpoint_scope(READ)
        .build()
        .await
        .expect("the remote resource");
    let mcp = axum::routing::any(tool);
    let router = Router::new()
        .route_service(resource.route(), resource.protect(mcp))
        .merge(resource.routes());
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("bind the resource server's port");
    tokio::spawn(async move { axum::serve(listener, router).await.expect("serve") });
    resource
}

/// The authorization server's process on `dir`: EdDSA access tokens for
/// MCP URLs on `http://127.0.0.1:<rs_port>`.
fn start_authorization_server(dir: &Path, rs_port: u16) -> (ChildServer, String) {
    let port = child::free_port();
    std::fs::write(dir.join("port"), port.to_string()).unwrap();
    std::fs::write(dir.join("alg"), "EdDSA").unwrap();
    std::fs::write(
        dir.join("mcp_origin"),
        format!("http://127.0.0.1:{rs_port}"),
    )
    .unwrap();
    (ChildServer::start(dir), format!("http://127.0.0.1:{port}"))
}

/// An access token signed with the site's own keys, as the site would
/// sign one for `alice`, with `change` applied to its claims and type.
fn forged(
    keyring: &Keyring,
    alg: Algorithm,
    mcp_url: &str,
    issuer: &str,
    change: impl FnOnce(&mut Claims, &mut TokenType),
) -> String {
    let at = now().as_secs().cast_signed();
    let mut claims = Claims {
        iss: Some(issuer.into()),
        sub: Some("alice".into()),
        aud: Some(Audience::One(mcp_url.into())),
        exp: Some(at + 300),
        iat: Some(at),
        jti: Some("forged".into()),
        client_id: Some("someone".into()),
        scope: Some(READ.into()),
        gid: Some("AAAAAAAAAAAAAAAAAAAAAA".into()),
        ..Claims::default()
    };
    let mut typ = TokenType::AccessToken;
    change(&mut claims, &mut typ);
    keyring
        .sign_ref_with(alg, typ, &claims.as_ref(), now())
        .expect("sign")
        .expose_secret()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_server_in_another_process_checks_tokens_with_the_key_set_alone() {
    let dir = tempfile::tempdir().unwrap();
    let rs_port = child::free_port();
    let (server, issuer) = start_authorization_server(dir.path(), rs_port);
    let mcp_url = server.mcp_url.clone();
    assert!(
        mcp_url.starts_with(&format!("http://127.0.0.1:{rs_port}/mcp/")),
        "{mcp_url}"
    );
    let metadata = get_json(
        &http(),
        &format!("{issuer}/.well-known/oauth-authorization-server"),
    )
    .await;
    let jwks_uri = metadata["jwks_uri"].as_str().expect("jwks_uri").to_owned();
    assert_eq!(jwks_uri, format!("{issuer}/.well-known/jwks.json"));
    let _resource = serve_resource(&issuer, &mcp_url, rs_port).await;

    // The client's whole flow, discovering from the resource server.
    let client = OAuthClient::discover(&issuer, &mcp_url).await;
    assert_eq!(client.challenge_scope, READ);
    let tokens = client.connect("alice", READ).await;
    assert!(
        published_kids(&jwks_uri)
            .await
            .contains(&kid_of(&tokens.access)),
        "the token names a published key"
    );
    let me = client
        .call_ok(&tokens.access, &json!({"tool": "whoami"}))
        .await;
    assert_eq!(me["subject"], "alice", "{me}");
    assert_eq!(me["client_id"], client.client_id.as_str(), "{me}");
    assert_eq!(me["scopes"], READ, "{me}");

    // Step-up: the write scope is asked for by the resource server's own
    // challenge, naming its RFC 9728 document; after consent it passes.
    let refused = client.call(&tokens.access, &json!({"tool": "write"})).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{refused:?}");
    let challenge = refused.challenge();
    assert_eq!(
        challenge_param(challenge, "error").as_deref(),
        Some("insufficient_scope")
    );
    assert_eq!(
        challenge_param(challenge, "scope").as_deref(),
        Some(READ_WRITE)
    );
    let document_url = challenge_param(challenge, "resource_metadata").expect("resource_metadata");
    assert!(document_url.starts_with(&format!("http://127.0.0.1:{rs_port}/")));
    let stepped = client.connect("alice", READ_WRITE).await;
    let me = client
        .call_ok(&stepped.access, &json!({"tool": "write"}))
        .await;
    assert_eq!(me["scopes"], READ_WRITE, "{me}");

    // Refresh: the new token is accepted too.
    let refreshed = OAuthClient::tokens(&client.refresh(&stepped.refresh).await);
    assert_ne!(refreshed.access, stepped.access);
    client
        .call_ok(&refreshed.access, &json!({"tool": "whoami"}))
        .await;

    // A routine rotation: the new key signs at once here (published for
    // no time), so the resource server meets its kid before its scheduled
    // refresh and fetches the set again; the old key's tokens still pass.
    let rotation = keys::rotate(
        &dir.path().join("keys.json"),
        Algorithm::EdDsa,
        now(),
        Duration::ZERO,
        Duration::from_mins(10),
    )
    .expect("rotate");
    let new_kid = rotation.added.kid.clone();
    let started = Instant::now();
    while !published_kids(&jwks_uri).await.contains(&new_kid) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the server reloads the key file"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let after = OAuthClient::tokens(&client.refresh(&refreshed.refresh).await);
    assert_eq!(
        kid_of(&after.access),
        new_kid,
        "new tokens carry the new kid"
    );
    client
        .call_ok(&after.access, &json!({"tool": "whoami"}))
        .await;
    client
        .call_ok(&refreshed.access, &json!({"tool": "whoami"}))
        .await;
    // Tokens the site's own keys signed, each wrong in one way, are
    // refused; the same token right in every way passes (the refusals are
    // the claims', not the forging's).
    let keys = keys::load(&dir.path().join("keys.json"), false, LoosePermissions::Warn)
        .expect("the key file");
    let ring = &keys.keyring;
    let right = forged(ring, Algorithm::EdDsa, &mcp_url, &issuer, |_, _| {});
    client.call_ok(&right, &json!({"tool": "whoami"})).await;
    let other_site = format!("http://127.0.0.1:{rs_port}/mcp/another-site-key");
    let expired_at = now().as_secs().cast_signed() - 3600;
    let wrong: Vec<(&str, String)> = vec![
        (
            "another site's audience",
            forged(ring, Algorithm::EdDsa, &mcp_url, &issuer, |c, _| {
                c.aud = Some(Audience::One(other_site.clone()));
            }),
        ),
        (
            "another issuer",
            forged(ring, Algorithm::EdDsa, &mcp_url, &issuer, |c, _| {
                c.iss = Some("http://127.0.0.1:1".into());
            }),
        ),
        (
            "expired",
            forged(ring, Algorithm::EdDsa, &mcp_url, &issuer, |c, _| {
                c.exp = Some(expired_at);
                c.iat = Some(expired_at - 300);
            }),
        ),
        (
            "an agent token's type",
            forged(ring, Algorithm::EdDsa, &mcp_url, &issuer, |_, t| {
                *t = TokenType::AgentToken;
            }),
        ),
        (
            "HS256, which no key set can check",
            forged(ring, Algorithm::Hs256, &mcp_url, &issuer, |_, _| {}),
        ),
        ("a foreign key under the site's kid", {
            let mut foreign = Keyring::new();
            foreign
                .insert_token_key(&kid_of(&right), TokenKey::ed25519(&[7; 32]))
                .unwrap();
            foreign.set_active(&kid_of(&right)).unwrap();
            forged(&foreign, Algorithm::EdDsa, &mcp_url, &issuer, |_, _| {})
        }),
    ];
    for (what, token) in &wrong {
        let answer = client.call(token, &json!({"tool": "whoami"})).await;
        assert_eq!(
            answer.status,
            StatusCode::UNAUTHORIZED,
            "{what}: {answer:?}"
        );
        assert_eq!(
            challenge_param(answer.challenge(), "error").as_deref(),
            Some("invalid_token"),
            "{what}"
        );
    }
    // No token at all: the challenge a client discovers from, naming the
    // endpoint scope.
    let bare = Answer::of(http().post(&mcp_url).body("{}").send().await.expect("POST")).await;
    assert_eq!(bare.status, StatusCode::UNAUTHORIZED);
    assert_eq!(challenge_param(bare.challenge(), "error"), None);
}
