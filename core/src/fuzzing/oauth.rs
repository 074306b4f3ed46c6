//! Fuzz entry points for the authorization server's parsers.

use super::keyring;
use crate::authorize;
use crate::bearer;
use crate::form::Form;
use crate::grant::{Grant, RefreshTokenParts};
use crate::header::{HeaderError, HeaderField};
use crate::jwt::{TokenType, Validation};
use crate::scope::ScopeSet;
use crate::site::{Site, SiteConfig, SiteId};
use crate::time::Timestamp;
use crate::token::{self, ClientCredentials, TokenError};

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
    if let Ok(request) = authorize::validate(&site, &keyring, query, None, false) {
        assert_eq!(request.resource, site.resource());
        assert!(request.scopes.is_subset(&site.scopes));
        assert!((1..=authorize::MAX_STATE_LEN).contains(&request.state.chars().count()));
    }
}

/// Every line of `data` as one value of a header field.
fn field_of_lines(data: &[u8]) -> HeaderField<'_> {
    if data.is_empty() {
        HeaderField::ABSENT
    } else {
        HeaderField::new(data.split(|&b| b == b'\n'))
    }
}

/// An arbitrary token request: the last line is the body, every line before
/// it one `Authorization` value. Parsing must never panic, a repeated field
/// is refused whatever its values, and a code or refresh token we never
/// issued never authenticates.
pub fn token_request(data: &[u8]) {
    let (headers, body) = match data.iter().rposition(|&b| b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (&data[..0], data),
    };
    let Ok(body) = core::str::from_utf8(body) else {
        return;
    };
    let authorization = field_of_lines(headers);
    let Ok(form) = Form::parse(body, token::MAX_BODY_LEN) else {
        return;
    };
    let credentials = ClientCredentials::read(&form, authorization);
    if authorization.value() == Err(HeaderError::Repeated) {
        assert_eq!(
            credentials.err(),
            Some(TokenError::authorization(HeaderError::Repeated))
        );
    }
    let keyring = keyring();
    if let Some(code) = form.get("code") {
        // A code we never issued must not verify.
        assert!(authorize::verify_code(&keyring, code).is_none());
    }
    if let Some(parts) = form.get("refresh_token").and_then(RefreshTokenParts::parse) {
        // A grant of the id the token names: only its tag can authenticate it.
        let grant = Grant::new(
            parts.grant,
            &site(),
            "c".into(),
            None,
            "u".into(),
            ScopeSet::new(),
            [5; 16],
            "k1".into(),
            Timestamp::EPOCH,
        );
        assert!(!parts.authenticates(&keyring, &grant));
    }
}

/// The `Authorization` field of a protected request, one value per line:
/// more than one value is always refused as `Repeated`.
pub fn bearer_header(data: &[u8]) {
    let field = field_of_lines(data);
    let parsed = bearer::parse_authorization(field);
    if field.value() == Err(HeaderError::Repeated) {
        assert_eq!(parsed, Err(bearer::BearerError::Repeated));
    }
    if let Ok(Some(token)) = parsed {
        let expect = Validation::new(TokenType::AccessToken, "https://as.example/mcp/key");
        let _ = keyring().verify(token, &expect, Timestamp::from_secs(1_000));
    }
}
