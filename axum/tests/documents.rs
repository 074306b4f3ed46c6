//! Client ID metadata documents: a client identified by the URL of its
//! metadata document, which the server fetches (here from loopback, under
//! the development setting) and the core checks.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use axum::response::IntoResponse as _;
use portcullis_store_memory::MemoryStore;
use serde_json::json;

use crate::support::client::{REDIRECT, verifier};
use crate::support::{Effects, OAuthClient, Options, READ, TestApp, keyring};

/// A server of one client metadata document at `/client.json` (and a
/// redirect at `/moved.json`), counting its fetches.
struct DocumentServer {
    origin: String,
    body: Arc<Mutex<String>>,
    fetches: Arc<AtomicU32>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for DocumentServer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl DocumentServer {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        let body = Arc::new(Mutex::new(String::new()));
        let fetches = Arc::new(AtomicU32::new(0));
        let (b, f) = (Arc::clone(&body), Arc::clone(&fetches));
        let router = axum::Router::new()
            .route(
                "/client.json",
                axum::routing::get(move || {
                    let (b, f) = (Arc::clone(&b), Arc::clone(&f));
                    async move {
                        f.fetch_add(1, Ordering::SeqCst);
                        let body = b.lock().unwrap().clone();
                        (
                            [
                                ("content-type", "application/json"),
                                ("cache-control", "max-age=60"),
                            ],
                            body,
                        )
                            .into_response()
                    }
                }),
            )
            .route(
                "/moved.json",
                axum::routing::get(|| async {
                    (StatusCode::FOUND, [("location", "/client.json")]).into_response()
                }),
            );
        let server = tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        Self {
            origin,
            body,
            fetches,
            server,
        }
    }

    fn url(&self) -> String {
        format!("{}/client.json", self.origin)
    }

    /// Serves a document for `client_id`.
    fn serve(&self, client_id: &str) {
        *self.body.lock().unwrap() = json!({
            "client_id": client_id,
            "client_name": "Doc Agent",
            "redirect_uris": [REDIRECT],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
        })
        .to_string();
    }

    fn fetches(&self) -> u32 {
        self.fetches.load(Ordering::SeqCst)
    }
}

/// The app, with loopback documents allowed or not, and a client (its
/// endpoints discovered) whose id is `client_id`.
async fn app_and_client(loopback: bool, client_id: &str) -> (TestApp<MemoryStore>, OAuthClient) {
    let options = Options {
        dev_loopback_documents: loopback,
        ..Options::default()
    };
    let app =
        TestApp::start_with(MemoryStore::new(), keyring(), Effects::default(), &options).await;
    let client = OAuthClient {
        client_id: client_id.to_owned(),
        ..app.client().await
    };
    (app, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_identified_by_its_metadata_document_connects() {
    let docs = DocumentServer::start().await;
    docs.serve(&docs.url());
    let (app, client) = app_and_client(true, &docs.url()).await;
    let verifier = verifier();
    let query = client.authorization_query(READ, &verifier);
    let consent = client.consent(&query, "alice").await;
    assert!(consent.html.contains("Doc Agent"), "{}", consent.html);
    assert!(
        consent.html.contains("metadata document is served by"),
        "the document's host is shown: {}",
        consent.html
    );
    assert_eq!(docs.fetches(), 1);
    let allowed = client
        .post_consent(
            &consent.action,
            "alice",
            &[("csrf", &consent.csrf), ("intent", "allow")],
            &[],
        )
        .await;
    assert_eq!(allowed.status, StatusCode::FOUND, "{}", allowed.body);
    let code = crate::support::client::query_param(allowed.location(), "code").unwrap();
    let tokens = OAuthClient::tokens(&client.exchange(&code, &verifier).await);
    let who = client
        .call_ok(&tokens.access, &json!({"tool": "whoami"}))
        .await;
    assert_eq!(who["subject"], "alice");
    // The accepted document is cached for its max-age.
    assert_eq!(docs.fetches(), 1, "the decision used the cached document");
    client.consent(&query, "alice").await;
    assert_eq!(docs.fetches(), 1);
    drop(app);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_that_cannot_be_fetched_or_is_refused_is_shown_never_redirected_nor_cached() {
    let docs = DocumentServer::start().await;
    // A document naming another client.
    docs.serve("https://someone.else/client.json");
    let (_app, client) = app_and_client(true, &docs.url()).await;
    let query = client.authorization_query(READ, &verifier());
    let refused = client.get_authorize(&query, Some("alice")).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.body);
    assert!(refused.header("location").is_none());
    assert_eq!(docs.fetches(), 1);
    // Not cached: once the document is right, it is fetched again and used.
    docs.serve(&docs.url());
    let consent = client.consent(&query, "alice").await;
    assert!(consent.html.contains("Doc Agent"));
    assert_eq!(docs.fetches(), 2);

    // A redirect is not followed; a missing document is not used.
    for path in ["/moved.json", "/missing.json"] {
        let url = format!("{}{path}", docs.origin);
        let client = OAuthClient {
            client_id: url.clone(),
            ..client.clone()
        };
        let query = client.authorization_query(READ, &verifier());
        let page = client.get_authorize(&query, Some("alice")).await;
        assert_eq!(page.status, StatusCode::BAD_REQUEST, "{url}");
        assert!(page.header("location").is_none(), "{url}");
        assert!(
            page.body.contains("could not be fetched"),
            "{url}: {}",
            page.body
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_http_document_is_refused_without_the_development_setting() {
    let docs = DocumentServer::start().await;
    docs.serve(&docs.url());
    let (_app, client) = app_and_client(false, &docs.url()).await;
    let query = client.authorization_query(READ, &verifier());
    let page = client.get_authorize(&query, Some("alice")).await;
    assert_eq!(page.status, StatusCode::BAD_REQUEST, "{}", page.body);
    assert!(page.header("location").is_none());
    assert_eq!(docs.fetches(), 0, "nothing was fetched");
}
