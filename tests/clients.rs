//! Clients through the facade: stateless registration end to end, client
//! authentication, the redirect-URI policy with every known look-alike, and
//! client-ID metadata documents.

use portcullis::Timestamp;
use portcullis::WireError;
use portcullis::client::{
    self, ClientError, DocumentError, RedirectUri, RedirectUriError, RegistrationError,
    TokenEndpointAuthMethod,
};
use portcullis::error::ErrorCode;
use portcullis::jwt::{Keyring, SigningKey};
use proptest::prelude::*;

const NOW: Timestamp = Timestamp::from_secs(1_700_000_000);
const DOC_URL: &str = "https://agent.example.com/.well-known/oauth-client.json";

fn keyring() -> Keyring {
    let mut keyring = Keyring::new();
    keyring
        .insert(
            "2025-01",
            SigningKey::from_bytes(&[9; 32]).expect("32-byte key"),
        )
        .expect("valid kid");
    keyring.set_active("2025-01").expect("known kid");
    keyring
}

fn register(json: &str) -> client::RegisteredClient {
    let metadata = client::parse_registration(json.as_bytes()).expect("valid request");
    client::register(metadata, &keyring(), &mut rand::rng(), NOW).expect("registers")
}

#[test]
fn public_registration_round_trips_without_storage() {
    let keyring = keyring();
    let registered = register(
        r#"{"client_name":"CLI agent","redirect_uris":["http://127.0.0.1/callback"],
            "grant_types":["authorization_code","refresh_token"],"response_types":["code"],
            "token_endpoint_auth_method":"none"}"#,
    );
    assert!(registered.client_secret.is_none());

    let body: serde_json::Value =
        serde_json::from_str(&client::registration_response(&registered)).unwrap();
    assert_eq!(body["client_id"], registered.client_id.as_str());
    assert_eq!(body["client_id_issued_at"], 1_700_000_000_u64);
    assert_eq!(body["token_endpoint_auth_method"], "none");
    assert!(body.get("client_secret").is_none());

    let client = client::resolve_stateless(&registered.client_id, &keyring).unwrap();
    assert_eq!(client.id(), registered.client_id);
    assert_eq!(client.metadata(), &registered.metadata);
    assert_eq!(client.metadata().client_name.as_deref(), Some("CLI agent"));
    assert!(!client.is_confidential());
    assert!(client.all_redirects_loopback());
    assert_eq!(
        client
            .redirect_uri("http://127.0.0.1:60123/callback")
            .map(RedirectUri::host),
        Some("127.0.0.1")
    );
    client::authenticate(&client, &keyring, None).unwrap();
}

#[test]
fn confidential_secret_is_derived_and_checked() {
    let keyring = keyring();
    // No token_endpoint_auth_method: RFC 7591 §2 defaults to client_secret_basic.
    let registered = register(r#"{"redirect_uris":["https://app.example.com/cb"]}"#);
    assert_eq!(
        registered.metadata.token_endpoint_auth_method,
        TokenEndpointAuthMethod::ClientSecretBasic
    );
    let secret = registered.client_secret.clone().unwrap();
    assert!(!format!("{registered:?}").contains(secret.expose_secret()));
    let body: serde_json::Value =
        serde_json::from_str(&client::registration_response(&registered)).unwrap();
    assert_eq!(body["client_secret"], secret.expose_secret());
    assert_eq!(body["client_secret_expires_at"], 0);

    let client = client::resolve_stateless(&registered.client_id, &keyring).unwrap();
    assert!(client.is_confidential());
    assert!(!client.all_redirects_loopback());
    client::authenticate(&client, &keyring, Some(secret.expose_secret())).unwrap();
    let err = client::authenticate(&client, &keyring, None).unwrap_err();
    assert_eq!(err, ClientError::SecretRequired);
    assert_eq!(err.code(), ErrorCode::InvalidClient);
    assert_eq!(err.http_status(), 401);
    let mut wrong = secret.expose_secret().to_owned();
    let last = wrong.pop().unwrap();
    wrong.push(if last == 'A' { 'B' } else { 'A' });
    assert_eq!(
        client::authenticate(&client, &keyring, Some(&wrong)),
        Err(ClientError::SecretMismatch)
    );
    assert_eq!(
        client::authenticate(&client, &keyring, Some("")),
        Err(ClientError::SecretMismatch)
    );

    // Another client's secret never authenticates this one.
    let other = register(r#"{"redirect_uris":["https://app.example.com/other"]}"#);
    assert_eq!(
        client::authenticate(
            &client,
            &keyring,
            Some(other.client_secret.unwrap().expose_secret())
        ),
        Err(ClientError::SecretMismatch)
    );
}

#[test]
fn tampered_or_foreign_client_ids_are_unknown() {
    let keyring = keyring();
    let registered = register(
        r#"{"redirect_uris":["https://app.example.com/cb"],"token_endpoint_auth_method":"none"}"#,
    );
    let id = registered.client_id.as_str();
    let (head, tag) = id.rsplit_once('.').unwrap();
    let (prefix, payload) = head.rsplit_once('.').unwrap();

    // Re-encode the payload with a different redirect URI, keeping the tag.
    let forged = register(
        r#"{"redirect_uris":["https://evil.example/cb"],"token_endpoint_auth_method":"none"}"#,
    );
    let forged_payload = forged.client_id.rsplit('.').nth(1).unwrap();
    let swapped = format!("{prefix}.{forged_payload}.{tag}");
    let truncated_tag = format!("{prefix}.{payload}.{}", &tag[..tag.len() - 1]);

    for bad in [
        swapped.as_str(),
        truncated_tag.as_str(),
        &id.replacen("2025-01", "2025-02", 1),
        &id.to_uppercase(),
        "pc1.2025-01.AAAA.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "client-123",
    ] {
        let err = client::resolve_stateless(bad, &keyring).unwrap_err();
        assert_eq!(err, ClientError::UnknownClient, "{bad}");
        assert_eq!(err.code(), ErrorCode::InvalidClient);
    }

    let mut other = Keyring::new();
    other
        .insert("2025-01", SigningKey::from_bytes(&[8; 32]).unwrap())
        .unwrap();
    assert_eq!(
        client::resolve_stateless(id, &other),
        Err(ClientError::UnknownClient)
    );
}

#[test]
fn rotation_keeps_clients_and_retirement_drops_them() {
    let mut keyring = keyring();
    let registered = register(r#"{"redirect_uris":["https://app.example.com/cb"]}"#);
    keyring
        .insert("2025-02", SigningKey::from_bytes(&[10; 32]).unwrap())
        .unwrap();
    keyring.set_active("2025-02").unwrap();
    let client = client::resolve_stateless(&registered.client_id, &keyring).unwrap();
    let secret = registered.client_secret.as_ref().unwrap().expose_secret();
    client::authenticate(&client, &keyring, Some(secret)).unwrap();

    keyring.retire("2025-01").unwrap();
    assert_eq!(
        client::resolve_stateless(&registered.client_id, &keyring),
        Err(ClientError::UnknownClient)
    );
}

#[test]
fn public_client_presenting_a_secret_is_refused() {
    let keyring = keyring();
    let registered = register(
        r#"{"redirect_uris":["http://localhost/cb"],"token_endpoint_auth_method":"none"}"#,
    );
    let client = client::resolve_stateless(&registered.client_id, &keyring).unwrap();
    for presented in ["", "anything"] {
        assert_eq!(
            client::authenticate(&client, &keyring, Some(presented)),
            Err(ClientError::UnexpectedSecret)
        );
    }
}

#[test]
fn loopback_ignores_the_port_but_nothing_else() {
    let uri = RedirectUri::parse("http://localhost/oauth/callback?flow=1").unwrap();
    assert!(uri.is_loopback());
    for port in ["", ":1", ":8080", ":65535"] {
        assert!(uri.matches(&format!("http://localhost{port}/oauth/callback?flow=1")));
    }
    for presented in [
        "http://localhost:8080/oauth/callback?flow=2",
        "http://localhost:8080/oauth/callback",
        "http://localhost:8080/oauth/callback/?flow=1",
        "http://localhost:8080/oauth/Callback?flow=1",
        "http://127.0.0.1:8080/oauth/callback?flow=1",
        "http://localhost.evil.com:8080/oauth/callback?flow=1",
        "http://localhost:8080@evil.com/oauth/callback?flow=1",
        "https://localhost:8080/oauth/callback?flow=1",
        "http://localhost:99999/oauth/callback?flow=1",
    ] {
        assert!(!uri.matches(presented), "{presented}");
    }
    let https = RedirectUri::parse("https://app.example.com:8443/cb").unwrap();
    assert!(!https.matches("https://app.example.com:9443/cb"));
    assert_eq!(https.host(), "app.example.com");
}

#[test]
fn look_alikes_custom_schemes_userinfo_and_fragments_are_refused() {
    let cases: &[(&str, RedirectUriError)] = &[
        (
            "http://127.0.0.1.evil.com/cb",
            RedirectUriError::NotLoopback,
        ),
        (
            "http://localhost.evil.com/cb",
            RedirectUriError::NotLoopback,
        ),
        ("http://127.1/cb", RedirectUriError::NotLoopback),
        ("http://0x7f.1/cb", RedirectUriError::NotLoopback),
        ("http://2130706433/cb", RedirectUriError::NotLoopback),
        (
            "http://[::ffff:127.0.0.1]/cb",
            RedirectUriError::NotLoopback,
        ),
        ("http://LOCALHOST/cb", RedirectUriError::NotLoopback),
        ("http://app.example.com/cb", RedirectUriError::NotLoopback),
        ("https://127.1/cb", RedirectUriError::NotCanonical),
        (
            "javascript://callback/%0aalert(1)",
            RedirectUriError::Scheme,
        ),
        ("data:text/html,callback", RedirectUriError::Scheme),
        ("file:///callback", RedirectUriError::Scheme),
        (
            "https://user@app.example.com/cb",
            RedirectUriError::Userinfo,
        ),
        ("https://@app.example.com/cb", RedirectUriError::Userinfo),
        ("http://evil.com@127.0.0.1/cb", RedirectUriError::Userinfo),
        ("https://app.example.com/cb#", RedirectUriError::Fragment),
        (
            "https://app.example.com/cb#frag",
            RedirectUriError::Fragment,
        ),
        ("https://app.example.com/c b", RedirectUriError::Character),
        (
            "https://app.example.com/cb\r\n",
            RedirectUriError::Character,
        ),
    ];
    for (uri, reason) in cases {
        let err = RedirectUri::parse(uri).unwrap_err();
        assert_eq!(err, *reason, "{uri}");
        assert_eq!(err.code(), ErrorCode::InvalidRedirectUri);
        // At registration, the same URI is an invalid_redirect_uri error.
        let json = serde_json::json!({ "redirect_uris": [uri] }).to_string();
        let err = client::parse_registration(json.as_bytes()).unwrap_err();
        assert_eq!(
            err,
            RegistrationError::RedirectUri {
                index: 0,
                reason: *reason
            }
        );
        assert_eq!(err.code(), ErrorCode::InvalidRedirectUri);
        assert_eq!(err.http_status(), 400);
    }
}

#[test]
fn registration_refuses_what_it_cannot_honour() {
    for (json, code) in [
        (
            r#"{"redirect_uris":["https://a.example/cb"],"client_secret":"x"}"#,
            ErrorCode::InvalidClientMetadata,
        ),
        (
            r#"{"redirect_uris":["https://a.example/cb"],"grant_types":["client_credentials"]}"#,
            ErrorCode::InvalidClientMetadata,
        ),
        (
            r#"{"redirect_uris":["https://a.example/cb"],"response_types":["token"]}"#,
            ErrorCode::InvalidClientMetadata,
        ),
        (
            r#"{"redirect_uris":["https://a.example/cb"],"token_endpoint_auth_method":"client_secret_jwt"}"#,
            ErrorCode::InvalidClientMetadata,
        ),
        (
            r#"{"redirect_uris":["https://a.example/cb"],"logo_uri":"http://a.example/l.png"}"#,
            ErrorCode::InvalidClientMetadata,
        ),
        (
            r#"{"redirect_uris":["https://a.example/cb"],"redirect_uris":["https://a.example/cb"]}"#,
            ErrorCode::InvalidClientMetadata,
        ),
        (r#"{"redirect_uris":[]}"#, ErrorCode::InvalidRedirectUri),
    ] {
        let err = client::parse_registration(json.as_bytes()).unwrap_err();
        assert_eq!(err.code(), code, "{json}: {err}");
    }
}

fn document(members: &str) -> String {
    format!(r#"{{"client_id":"{DOC_URL}","redirect_uris":["http://127.0.0.1/callback"]{members}}}"#)
}

#[test]
fn metadata_document_flow() {
    assert!(client::is_document_client_id(DOC_URL));
    let url = client::parse_client_id_url(DOC_URL).unwrap();
    let fetch = url.fetch_request();
    assert_eq!(fetch.url, DOC_URL);
    assert_eq!(fetch.max_bytes, 5 * 1024);
    assert_eq!(url.host(), "agent.example.com");

    let body = document(r#","client_name":"Agent","token_endpoint_auth_method":"none""#);
    let client = client::validate_document(&url, body.as_bytes()).unwrap();
    assert_eq!(client.id(), DOC_URL);
    assert!(client.is_document());
    assert!(!client.is_confidential());
    assert!(client.all_redirects_loopback());
    assert!(
        client
            .redirect_uri("http://127.0.0.1:1234/callback")
            .is_some()
    );
    client::authenticate(&client, &keyring(), None).unwrap();
    assert_eq!(
        client::authenticate(&client, &keyring(), Some("x")),
        Err(ClientError::UnexpectedSecret)
    );
}

#[test]
fn invalid_metadata_documents_are_refused() {
    let url = client::parse_client_id_url(DOC_URL).unwrap();
    let mismatch =
        format!(r#"{{"client_id":"{DOC_URL}?x","redirect_uris":["http://127.0.0.1/callback"]}}"#);
    let trailing_slash =
        format!(r#"{{"client_id":"{DOC_URL}/","redirect_uris":["http://127.0.0.1/callback"]}}"#);
    let bad_redirect =
        format!(r#"{{"client_id":"{DOC_URL}","redirect_uris":["http://0x7f.1/callback"]}}"#);
    let cases = [
        (mismatch, DocumentError::ClientIdMismatch),
        (trailing_slash, DocumentError::ClientIdMismatch),
        (
            document(r#","token_endpoint_auth_method":"client_secret_basic""#),
            DocumentError::SharedSecretMethod,
        ),
        (
            document(r#","client_secret":"hunter2""#),
            DocumentError::ClientSecretPresent,
        ),
        (
            bad_redirect,
            DocumentError::Metadata(RegistrationError::RedirectUri {
                index: 0,
                reason: RedirectUriError::NotLoopback,
            }),
        ),
    ];
    for (body, expected) in cases {
        let err = client::validate_document(&url, body.as_bytes()).unwrap_err();
        assert_eq!(err, expected, "{body}");
        assert!(!err.to_string().contains("hunter2"));
    }
    for bad_url in [
        "https://agent.example.com",
        "https://agent.example.com/",
        "https://agent.example.com/a/../b",
        "https://agent.example.com/a/%2E%2E/b",
        "https://agent.example.com/a#b",
        "https://u@agent.example.com/a",
        "https://agent.example.com/a?b",
        "http://agent.example.com/a",
        "https://127.0.0.1/a",
    ] {
        let err = client::parse_client_id_url(bad_url).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidClient, "{bad_url}");
    }
}

/// Accepted redirect URIs from a grammar that covers both kinds, plus
/// look-alike hosts that must be refused.
fn redirect_text() -> impl Strategy<Value = String> {
    let host = prop_oneof![
        Just("https://app.example.com".to_owned()),
        Just("https://a-1.example.org:8443".to_owned()),
        Just("http://localhost".to_owned()),
        Just("http://127.0.0.1".to_owned()),
        Just("http://[::1]".to_owned()),
        (1u16..).prop_map(|p| format!("http://127.0.0.1:{p}")),
        Just("http://127.1".to_owned()),
        Just("http://localhost.example".to_owned()),
    ];
    let path = proptest::collection::vec("[a-zA-Z0-9._~-]{0,6}", 0..4).prop_map(|segments| {
        segments.iter().fold(String::new(), |mut path, s| {
            path.push('/');
            path.push_str(s);
            path
        })
    });
    let query = proptest::option::of("[a-z0-9=&%]{0,8}");
    (host, path, query).prop_map(|(h, p, q)| match q {
        Some(q) => format!("{h}{p}?{q}"),
        None => format!("{h}{p}"),
    })
}

proptest! {
    #[test]
    fn matches_is_reflexive_for_accepted_uris(text in redirect_text()) {
        if let Ok(uri) = RedirectUri::parse(&text) {
            prop_assert!(uri.matches(uri.as_str()));
            prop_assert_eq!(uri.as_str(), text.as_str());
            prop_assert!(uri.as_str().starts_with("https://") || uri.is_loopback());
            let url = url::Url::parse(&text).unwrap();
            prop_assert_eq!(url.host_str(), Some(uri.host()));
        }
    }

    #[test]
    fn loopback_matches_any_port_but_no_other_path(
        host in prop_oneof![Just("localhost"), Just("127.0.0.1"), Just("[::1]")],
        registered_port in proptest::option::of(1u16..),
        port in 1u16..,
        path in "(/[a-z0-9]{0,5}){0,3}",
        other in "(/[a-z0-9]{0,5}){0,3}",
    ) {
        let registered = match registered_port {
            Some(p) => format!("http://{host}:{p}{path}"),
            None => format!("http://{host}{path}"),
        };
        let uri = RedirectUri::parse(&registered).unwrap();
        prop_assert!(uri.is_loopback());
        let any_port = format!("http://{host}:{port}{path}");
        let no_port = format!("http://{host}{path}");
        let other_path = format!("http://{host}:{port}{other}");
        let fragment = format!("{any_port}#f");
        let https = format!("https://{host}:{port}{path}");
        prop_assert!(uri.matches(&any_port));
        prop_assert!(uri.matches(&no_port));
        prop_assert_eq!(uri.matches(&other_path), other == path);
        prop_assert!(!uri.matches(&fragment));
        prop_assert!(!uri.matches(&https));
    }
}
