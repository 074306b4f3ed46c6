//! Fuzz entry points for the authorization server's parsers.

use crate::authorize;
use crate::bearer;
use crate::form::Form;
use crate::grant::RefreshTokenParts;
use crate::jwt::{Keyring, SigningKey, TokenType, Validation};
use crate::site::{Site, SiteConfig, SiteId};
use crate::time::Timestamp;
use crate::token::{self, ClientCredentials};

fn keyring() -> Keyring {
    let mut k = Keyring::new();
    k.insert("k1", SigningKey::from_bytes(&[7; 32]).expect("32-byte key"))
        .expect("valid kid");
    k.set_active("k1").expect("known kid");
    k
}

fn site() -> Site {
    let config = SiteConfig::new(
        SiteId::parse("fuzz").expect("valid id"),
        "Fuzz",
        "https://as.example",
        "https://as.example/mcp/",
    );
    Site::create(config, "key".into(), Timestamp::EPOCH).expect("valid site")
}

/// An arbitrary authorization query: validation must never panic, and an
/// accepted request must name the site's resource and a subset of its scopes.
pub fn authorize_query(data: &[u8]) {
    let Ok(query) = core::str::from_utf8(data) else {
        return;
    };
    let (site, keyring) = (site(), keyring());
    if let Ok(request) = authorize::validate(&site, &keyring, query, None) {
        assert_eq!(request.resource, site.resource());
        assert!(request.scopes.is_subset(&site.scopes));
        assert!((1..=authorize::MAX_STATE_LEN).contains(&request.state.chars().count()));
    }
}

/// An arbitrary token request body (and, split at the first newline, an
/// `Authorization` header): parsing must never panic.
pub fn token_request(data: &[u8]) {
    let Ok(text) = core::str::from_utf8(data) else {
        return;
    };
    let (header, body) = text
        .split_once('\n')
        .map_or((None, text), |(h, b)| (Some(h), b));
    let Ok(form) = Form::parse(body, token::MAX_BODY_LEN) else {
        return;
    };
    let _ = ClientCredentials::read(&form, header);
    let keyring = keyring();
    if let Some(code) = form.get("code") {
        // A code we never issued must not verify.
        assert!(authorize::verify_code(&keyring, code).is_none());
    }
    if let Some(parts) = form.get("refresh_token").and_then(RefreshTokenParts::parse) {
        let _ = parts.key(&keyring);
    }
}

/// An arbitrary `Authorization` header on a protected request.
pub fn bearer_header(data: &[u8]) {
    let Ok(header) = core::str::from_utf8(data) else {
        return;
    };
    if let Ok(Some(token)) = bearer::parse_authorization(Some(header)) {
        let expect = Validation::new(TokenType::AccessToken, "https://as.example/mcp/key");
        let _ = keyring().verify(token, &expect, Timestamp::from_secs(1_000));
    }
}
