//! Fuzz entry points for client registration and metadata documents.

use super::keyring;
use crate::client::{
    self, Client, ClientIdUrl, RedirectKind, RedirectUri, TokenEndpointAuthMethod,
    is_browser_scheme, parse_client_id_url,
};
use crate::time::Timestamp;

const DOCUMENT_URL: &str = "https://client.example.com/oauth/metadata.json";

/// Invariants every resolved client holds, however it was obtained.
fn check_client(client: &Client) {
    let metadata = client.metadata();
    assert!((1..=client::MAX_REDIRECT_URIS).contains(&metadata.redirect_uris.len()));
    assert_eq!(metadata.validate(), Ok(()));
    for uri in &metadata.redirect_uris {
        assert_eq!(RedirectUri::parse(uri.as_str()).as_ref(), Ok(uri));
        assert!(uri.matches(uri.as_str()));
        assert_eq!(
            client.redirect_uri(uri.as_str()).map(RedirectUri::as_str),
            Some(uri.as_str())
        );
        assert!(!uri.as_str().contains(['#', ' ', '\\']));
        let scheme = uri.scheme();
        match uri.kind() {
            RedirectKind::Web => assert!(uri.as_str().starts_with("https://")),
            // `http` to a loopback host (RFC 8252 §7.3), or `https` to one:
            // either way any port matches.
            RedirectKind::Loopback => assert!(matches!(scheme, "http" | "https")),
            RedirectKind::PrivateUse => {
                assert!(!matches!(scheme, "http" | "https"));
                assert!(!is_browser_scheme(&scheme.to_ascii_lowercase()));
                assert_eq!(scheme, scheme.to_ascii_lowercase());
            }
        }
    }
}

/// Parses arbitrary bytes as a registration request. Whatever is accepted
/// must register, resolve to the same metadata, authenticate exactly with
/// its derived secret, and produce a JSON response; arbitrary text must
/// never resolve as a client id.
pub fn registration_json(data: &[u8]) {
    let keyring = keyring();
    if let Ok(text) = core::str::from_utf8(data) {
        assert!(client::resolve_stateless(text, &keyring).is_err());
        let _ = RedirectUri::parse(text);
    }
    let Ok(metadata) = client::parse_registration(data) else {
        return;
    };
    assert!(data.len() <= client::MAX_REGISTRATION_LEN);
    let now = Timestamp::from_secs(1_700_000_000);
    let mut rng = super::ReplayRng::new();
    let registered = match client::register(metadata.clone(), &keyring, &mut rng, now) {
        Ok(registered) => registered,
        Err(client::RegistrationError::TooLargeForClientId) => return,
        Err(e) => panic!("valid metadata failed to register: {e}"),
    };
    assert!(registered.client_id.len() <= client::MAX_CLIENT_ID_LEN);
    let resolved =
        client::resolve_stateless(&registered.client_id, &keyring).expect("a fresh id resolves");
    assert_eq!(resolved.metadata(), &metadata);
    assert_eq!(resolved.issued_at(), Some(now));
    check_client(&resolved);
    let confidential = matches!(
        metadata.token_endpoint_auth_method,
        TokenEndpointAuthMethod::ClientSecretBasic | TokenEndpointAuthMethod::ClientSecretPost
    );
    assert_eq!(resolved.is_confidential(), confidential);
    assert_eq!(registered.client_secret.is_some(), confidential);
    let secret = registered
        .client_secret
        .as_ref()
        .map(crate::secret::SecretString::expose_secret);
    // Exactly the derived secret authenticates a confidential client, and
    // exactly no secret a public one.
    assert!(client::authenticate(&resolved, &keyring, secret).is_ok());
    assert!(client::authenticate(&resolved, &keyring, Some("")).is_err());
    if secret.is_some() {
        assert!(client::authenticate(&resolved, &keyring, None).is_err());
    }
    // The same metadata at the same instant registers as another client,
    // with another secret that does not authenticate the first (RFC 7591
    // §3.2.1).
    let twin = client::register(metadata.clone(), &keyring, &mut rng, now)
        .expect("the same metadata registers again");
    assert_ne!(twin.client_id, registered.client_id);
    if let (Some(a), Some(b)) = (&registered.client_secret, &twin.client_secret) {
        assert_ne!(a.expose_secret(), b.expose_secret());
        assert!(client::authenticate(&resolved, &keyring, Some(b.expose_secret())).is_err());
    }
    let body: serde_json::Value =
        serde_json::from_str(&client::registration_response(&registered)).expect("JSON body");
    assert_eq!(
        body["client_id"].as_str(),
        Some(registered.client_id.as_str())
    );
    // The echoed metadata registers to the same client again.
    let mut echoed = body;
    let object = echoed.as_object_mut().expect("an object");
    for assigned in [
        "client_id",
        "client_secret",
        "client_secret_expires_at",
        "client_id_issued_at",
    ] {
        object.remove(assigned);
    }
    let again = serde_json::to_vec(&echoed).expect("serializes");
    if again.len() <= client::MAX_REGISTRATION_LEN {
        assert_eq!(client::parse_registration(&again), Ok(metadata));
    }
}

/// Parses arbitrary bytes as a metadata document for a fixed URL, and as a
/// client-ID URL. Accepted documents yield public clients whose id is the
/// URL; accepted URLs are `https` with a path and no query or fragment.
pub fn client_metadata_document(data: &[u8]) {
    let url: ClientIdUrl = parse_client_id_url(DOCUMENT_URL).expect("valid URL");
    if let Ok(client) = client::validate_document(&url, data) {
        assert!(data.len() <= client::MAX_DOCUMENT_LEN);
        assert_eq!(client.id(), DOCUMENT_URL);
        assert!(client.is_document());
        assert!(!client.is_confidential());
        let pkj =
            client.metadata().token_endpoint_auth_method == TokenEndpointAuthMethod::PrivateKeyJwt;
        // A document client is public, or authenticates with assertions
        // against the key set at its (checked) `jwks_uri`.
        assert_eq!(
            client::authenticate(&client, &keyring(), None).is_ok(),
            !pkj
        );
        assert_eq!(client.metadata().jwks_uri.is_some(), pkj);
        if let Some(jwks) = &client.metadata().jwks_uri {
            assert!(parse_client_id_url(jwks).is_ok());
        }
        check_client(&client);
    }
    let Ok(text) = core::str::from_utf8(data) else {
        return;
    };
    if let Ok(parsed) = parse_client_id_url(text) {
        assert_eq!(parsed.as_str(), text);
        assert!(client::is_document_client_id(text));
        assert!(text.len() <= client::MAX_CLIENT_ID_URL_LEN);
        assert!(!text.contains(['?', '#']));
        let after = &text["https://".len()..];
        let (authority, path) = after.split_at(after.find('/').expect("a path"));
        assert!(!authority.contains('@'));
        assert!(path.len() > 1);
        assert!(!path.split('/').any(|s| s == "." || s == ".."));
        assert!(text.contains(parsed.host()));
        let fetch = parsed.fetch_request();
        assert_eq!(fetch.url, text);
        assert_eq!(fetch.max_bytes, client::MAX_DOCUMENT_LEN);
    }
}

/// Parses arbitrary bytes as a JWK Set: an accepted set holds at most
/// [`MAX_KEYS`](crate::jwk::MAX_KEYS) keys with distinct `kid`s, no private
/// material ever passes, and every lookup answers without panicking; a
/// key found for an algorithm fits it.
pub fn jwk_set(data: &[u8]) {
    use crate::jwk::{JwkSet, SignatureAlgorithm};
    let Ok(set) = JwkSet::parse(data) else {
        return;
    };
    assert!(data.len() <= crate::jwk::MAX_KEY_SET_LEN);
    assert!(set.keys().len() <= crate::jwk::MAX_KEYS);
    // No key object of an accepted set carries private material.
    let value: serde_json::Value = serde_json::from_slice(data).expect("a parsed set is JSON");
    for key in value["keys"].as_array().expect("a keys array") {
        for private in ["d", "p", "q", "dp", "dq", "qi", "oth", "k"] {
            assert!(key.get(private).is_none(), "{private} in {key}");
        }
    }
    for (i, key) in set.keys().iter().enumerate() {
        if key.kid.is_some() {
            assert!(set.keys()[..i].iter().all(|k| k.kid != key.kid));
        }
        for alg in SignatureAlgorithm::ALL {
            if let Ok(found) = set.find(key.kid.as_deref(), alg) {
                assert!(alg.fits(&found.key));
            }
            let _ = set.find(None, alg);
        }
    }
}

/// Reads arbitrary bytes as a token request form carrying a client
/// assertion and checks it against a fixed client and key set: nothing
/// panics, and nothing that was not signed by the client's key verifies.
#[cfg(feature = "client-assertions")]
pub fn client_assertion(data: &[u8]) {
    use crate::client::assertion::PresentedAssertion;
    use crate::form::Form;
    use crate::jwk::JwkSet;
    let Ok(text) = core::str::from_utf8(data) else {
        return;
    };
    let Ok(form) = Form::parse(text, 16 * 1024) else {
        return;
    };
    let Ok(Some(presented)) = PresentedAssertion::read(&form) else {
        return;
    };
    let url = parse_client_id_url(DOCUMENT_URL).expect("valid URL");
    let document = alloc::format!(
        r#"{{"client_id":"{DOCUMENT_URL}","redirect_uris":["https://c.example/cb"],"token_endpoint_auth_method":"private_key_jwt","jwks_uri":"https://client.example.com/jwks.json"}}"#
    );
    let client = client::validate_document(&url, document.as_bytes()).expect("a valid document");
    // RFC 8037 Appendix A.2's public key: its private half is not here.
    let keys = JwkSet::parse(
        br#"{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}"#,
    )
    .expect("a key set");
    let verdict = presented.verify(
        &client,
        &keys,
        &["https://as.example"],
        Timestamp::from_secs(1_700_000_000),
        core::time::Duration::from_secs(5),
    );
    // RFC 8037 A.4's signed message is not a client assertion for this
    // client, so nothing a fuzzer writes verifies.
    assert!(verdict.is_err(), "{verdict:?}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_and_edge_cases_hold_the_invariants() {
        for input in [
            &br#"{"redirect_uris":["http://localhost:33418/callback"],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"]}"#[..],
            br#"{"redirect_uris":["https://a.example/cb"],"client_name":"A","scope":"x y","logo_uri":"https://a.example/l"}"#,
            br#"{"redirect_uris":["https://a.example"],"client_uri":null}"#,
            br#"{"redirect_uris":["http://127.1/cb"],"client_id":"x","redirect_uris":[]}"#,
            br#"{"client_id":"https://client.example.com/oauth/metadata.json","redirect_uris":["http://[::1]/cb"]}"#,
            b"https://client.example.com/oauth/metadata.json",
            b"https://c.example/a/%2e%2e",
            b"pc1.k1.AA.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            b"",
            b"\xff{",
        ] {
            registration_json(input);
            client_metadata_document(input);
            jwk_set(input);
            #[cfg(feature = "client-assertions")]
            client_assertion(input);
        }
    }
}
