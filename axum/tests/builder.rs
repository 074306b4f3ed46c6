//! `Portcullis::builder` and the key file: what a host gets wrong at start
//! is refused at start, and what it set up survives a restart.

use std::os::unix::fs::PermissionsExt as _;

use axum::http::StatusCode;
use portcullis_axum::{BuildError, Portcullis};
use portcullis_store_memory::MemoryStore;
use serde_json::json;

use crate::support::stores::TempRedb;
use crate::support::{
    AddArgs, CookieHost, Effects, OAuthClient, Options, READ, READ_WRITE, TestApp, WRITE,
    call_body, done, keyring, request_id, spawn_call,
};

/// Builds over a memory store with `configure` applied: the error, if it
/// failed.
async fn build_error(
    configure: impl FnOnce(
        portcullis_axum::Builder<MemoryStore>,
    ) -> portcullis_axum::Builder<MemoryStore>,
) -> Option<BuildError> {
    let builder = Portcullis::builder(MemoryStore::new(), keyring());
    configure(builder).build(CookieHost).await.err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_settings_are_refused_at_build_with_typed_errors() {
    let ok = |b: portcullis_axum::Builder<MemoryStore>| {
        b.public_url("https://notes.example").scope(READ, "read")
    };
    assert!(build_error(ok).await.is_none());
    let refused = [
        (
            "no public url",
            build_error(|b| b.scope(READ, "read")).await,
        ),
        (
            "a public url with a path",
            build_error(|b| ok(b).public_url("https://notes.example/app")).await,
        ),
        (
            "no scheme",
            build_error(|b| ok(b).public_url("notes.example")).await,
        ),
        (
            "no scope",
            build_error(|b| b.public_url("https://notes.example")).await,
        ),
        (
            "a malformed scope",
            build_error(|b| ok(b).scope("two words", "x")).await,
        ),
        (
            "an undeclared endpoint scope",
            build_error(|b| ok(b).endpoint_scope(WRITE)).await,
        ),
        (
            "a malformed site id",
            build_error(|b| ok(b).site("no spaces", "x")).await,
        ),
        (
            "an MCP path with a parameter",
            build_error(|b| ok(b).mcp_path("/mcp/{x}")).await,
        ),
        (
            "an approvals path with a trailing slash",
            build_error(|b| ok(b).approvals_path("/approvals/")).await,
        ),
        (
            "an approvals page at the token endpoint",
            build_error(|b| ok(b).approvals_path("/token")).await,
        ),
        (
            "the OAuth routes under the MCP path",
            build_error(|b| ok(b).oauth_path("/mcp")).await,
        ),
    ];
    let expected = |why: &str, e: &BuildError| match why {
        "no public url" => matches!(e, BuildError::NoPublicUrl),
        "a public url with a path" | "no scheme" => {
            matches!(e, BuildError::NotAnOrigin("public_url"))
        }
        "no scope" => matches!(e, BuildError::NoScopes),
        "a malformed scope" => matches!(e, BuildError::Scope(s) if s == "two words"),
        "an undeclared endpoint scope" => matches!(e, BuildError::EndpointScope(s) if s == WRITE),
        "a malformed site id" => matches!(e, BuildError::SiteId(_)),
        "an MCP path with a parameter" => matches!(e, BuildError::NotARoutePath("mcp_path")),
        "an approvals path with a trailing slash" => {
            matches!(e, BuildError::NotARoutePath("approvals_path"))
        }
        "an approvals page at the token endpoint" => {
            matches!(e, BuildError::RouteClash(p) if p == "/token")
        }
        "the OAuth routes under the MCP path" => {
            matches!(e, BuildError::RouteClash(p) if p == "/mcp/{key}")
        }
        _ => false,
    };
    for (why, error) in refused {
        let error = error.unwrap_or_else(|| panic!("{why} was accepted"));
        assert!(expected(why, &error), "{why}: {error:?}");
        assert!(!error.to_string().is_empty());
    }
}

/// An app with its own `POST /register` and `/token` puts the crate's
/// authorization server under `/oauth`: both routers merge, the issuer
/// and every endpoint move there (the RFC 8414 document at its
/// path-inserted URL), and a client's whole flow works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_authorization_server_lives_under_a_prefix_beside_the_apps_own_routes() {
    use axum::routing::post;

    async fn whoami(agent: portcullis_axum::Agent) -> String {
        agent.subject().to_owned()
    }

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let portcullis = Portcullis::builder(MemoryStore::new(), keyring())
        .public_url(&origin)
        .oauth_path("/oauth")
        .scope(READ, "read")
        .endpoint_scope(READ)
        .build(CookieHost)
        .await
        .expect("build");
    // `route_layer` guards the routes added before it: the MCP route's
    // own router.
    let mcp = axum::Router::new()
        .route(&portcullis.mcp_route(), post(whoami))
        .route_layer(portcullis.layer());
    let router = axum::Router::new()
        .route("/register", post(|| async { "the app's own sign-up" }))
        .route("/token", post(|| async { "the app's own token" }))
        .route("/login", axum::routing::get(|| async { "sign in" }))
        .merge(portcullis.routes())
        .merge(mcp);
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });

    let own = crate::support::client::http()
        .post(format!("{origin}/register"))
        .send()
        .await
        .unwrap();
    assert_eq!(own.text().await.unwrap(), "the app's own sign-up");
    let client = OAuthClient::discover(&origin, &portcullis.mcp_url()).await;
    assert_eq!(client.issuer, format!("{origin}/oauth"));
    assert_eq!(client.token_endpoint, format!("{origin}/oauth/token"));
    let metadata = crate::support::client::get_json(
        &client.http,
        &format!("{origin}/.well-known/oauth-authorization-server/oauth"),
    )
    .await;
    assert_eq!(
        metadata["jwks_uri"],
        format!("{origin}/oauth/.well-known/jwks.json")
    );
    let tokens = client.connect("alice", READ).await;
    let me = client
        .http
        .post(portcullis.mcp_url())
        .bearer_auth(&tokens.access)
        .send()
        .await
        .unwrap();
    assert_eq!(me.text().await.unwrap(), "alice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_paths_move_the_endpoint_and_the_approvals_page() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let portcullis = Portcullis::builder(MemoryStore::new(), keyring())
        .public_url(&origin)
        .scope(READ, "read")
        .mcp_path("/agents/mcp")
        .approvals_path("/me/approvals")
        .build(CookieHost)
        .await
        .unwrap();
    assert!(
        portcullis
            .mcp_url()
            .starts_with(&format!("{origin}/agents/mcp/")),
        "{}",
        portcullis.mcp_url()
    );
    assert_eq!(portcullis.approvals_url(), format!("{origin}/me/approvals"));
    let router = axum::Router::new()
        .merge(portcullis.routes())
        .route_service(
            &portcullis.mcp_route(),
            portcullis.protect(axum::routing::any(|| async { "served" })),
        );
    let server = tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let http = crate::support::client::http();
    let unauthenticated = http.post(portcullis.mcp_url()).send().await.unwrap();
    assert_eq!(unauthenticated.status().as_u16(), 401);
    let path = portcullis
        .mcp_url()
        .strip_prefix(&origin)
        .unwrap()
        .to_owned();
    let metadata = http
        .get(format!(
            "{origin}/.well-known/oauth-protected-resource{path}"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(metadata.status().as_u16(), 200);
    let page = http
        .get(format!("{origin}/me/approvals/pending"))
        .header("cookie", "user=alice")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status().as_u16(), 200);
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_file_is_created_private_and_a_readable_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agents.keys");
    portcullis_axum::keys::load_or_create(&path).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // Loaded again: the same key (a token it signed still verifies; see the
    // restart test), and refused once others may read it.
    portcullis_axum::keys::load_or_create(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let refused = portcullis_axum::keys::load_or_create(&path).unwrap_err();
    assert!(refused.to_string().contains("chmod 600"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_on_the_same_files_keeps_tokens_results_and_pending_approvals() {
    let db = TempRedb::new();
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("agents.keys");
    let port = crate::support::child::free_port();
    let options = Options {
        bind: format!("127.0.0.1:{port}"),
        approval_wait: std::time::Duration::from_millis(300),
        ..Options::default()
    };
    let start = |store| {
        let keyring = portcullis_axum::keys::load_or_create(&keys).unwrap();
        let options = options.clone();
        async move { TestApp::start_with(store, keyring, Effects::default(), &options).await }
    };
    let app = start(db.store()).await;
    let (client, tokens) = app.connect("alice", READ_WRITE).await;
    let done_id = request_id();
    let call = spawn_call(
        &client,
        &tokens.access,
        call_body("add", done_id, &AddArgs::text("kept")),
    );
    app.person("alice")
        .approve(&done_id.to_string(), "once")
        .await;
    let answer = call.await.unwrap().json();
    done(&answer);
    let waiting = request_id();
    let call = spawn_call(
        &client,
        &tokens.access,
        call_body("add", waiting, &AddArgs::text("later")),
    );
    app.person("alice").wait_for(&waiting.to_string()).await;
    // The call answers approval_pending; a graceful stop, and the app's
    // last handle of the store goes.
    assert_eq!(call.await.unwrap().json()["status"], "approval_pending");
    let mcp_url = app.mcp_url();
    app.stop().await;

    let app = start(db.store_when_free().await).await;
    assert_eq!(app.mcp_url(), mcp_url, "the site and its key are kept");
    let client = OAuthClient {
        http: crate::support::client::http(),
        ..client
    };
    let who = client
        .call_ok(&tokens.access, &json!({"tool": "whoami"}))
        .await;
    assert_eq!(who["subject"], "alice", "the access token still verifies");
    let refreshed = client.refresh(&tokens.refresh).await;
    assert_eq!(refreshed.status, StatusCode::OK, "{}", refreshed.body);
    assert_eq!(
        client
            .call_ok(
                &tokens.access,
                &call_body("add", done_id, &AddArgs::text("kept"))
            )
            .await,
        answer
    );
    let call = spawn_call(
        &client,
        &tokens.access,
        call_body("add", waiting, &AddArgs::text("later")),
    );
    app.person("alice")
        .approve(&waiting.to_string(), "once")
        .await;
    assert_eq!(done(&call.await.unwrap().json())["note"], "later");
    assert_eq!(app.effects.runs(), 1, "only the approved one ran here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_a_new_scope_keeps_the_site_key_and_the_grants() {
    let store = std::sync::Arc::new(MemoryStore::new());
    let keyring = keyring();
    let port = crate::support::child::free_port();
    let read_only = Options {
        bind: format!("127.0.0.1:{port}"),
        scopes: vec![(READ, "read your notes")],
        ..Options::default()
    };
    let app = TestApp::start_with(
        std::sync::Arc::clone(&store),
        keyring.clone(),
        Effects::default(),
        &read_only,
    )
    .await;
    let (client, tokens) = app.connect("alice", READ).await;
    let mcp_url = app.mcp_url();
    app.stop().await;

    let both = Options {
        bind: format!("127.0.0.1:{port}"),
        ..Options::default()
    };
    let app = TestApp::start_with(store, keyring, Effects::default(), &both).await;
    assert_eq!(app.mcp_url(), mcp_url, "the site key is kept");
    let client = OAuthClient {
        http: crate::support::client::http(),
        ..client
    };
    let who = client
        .call_ok(&tokens.access, &json!({"tool": "whoami"}))
        .await;
    assert_eq!(who["scopes"], READ, "the grant is kept");
    let metadata = crate::support::client::get_json(
        &client.http,
        &format!("{}/.well-known/oauth-authorization-server", app.origin),
    )
    .await;
    assert_eq!(metadata["scopes_supported"], json!([READ, WRITE]));
    // The new scope can be granted now.
    let full = client.connect("alice", READ_WRITE).await;
    assert_eq!(full.scope, READ_WRITE);
}
