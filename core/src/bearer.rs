//! Bearer tokens on protected-resource requests: reading the
//! `Authorization` header (RFC 6750 §2.1) and writing the
//! `WWW-Authenticate` challenge (RFC 6750 §3, with RFC 9728 §5.1's
//! `resource_metadata`), and [`Principal`], who a verified bearer token
//! speaks for.
//!
//! Only the header method is accepted: a token in a query string ends up in
//! logs and `Referer` headers, and OAuth 2.1 §5.2 drops it; the form-body
//! method is not offered either. The header is read from a [`HeaderField`]
//! holding every value the request carried: two `Authorization` fields are
//! an ambiguous request, refused with `400 invalid_request` (RFC 6750 §3.1)
//! rather than guessed at.

use alloc::string::String;
use core::fmt;

use crate::describe::{Describe, display_by_describe};
use crate::error::{ErrorCode, WireError};
use crate::grant::GrantId;
use crate::header::{HeaderError, HeaderField};
use crate::scope::ScopeSet;
use crate::site::SiteId;
use crate::time::Timestamp;

/// Longest `Authorization` header read.
pub const MAX_AUTHORIZATION_LEN: usize = 8 * 1024 + 16;

/// Extracts the token from the `Authorization: Bearer …` field.
/// `Ok(None)` means no credentials were sent (no field); a repeated field is
/// [`BearerError::Repeated`].
pub fn parse_authorization(header: HeaderField<'_>) -> Result<Option<&str>, BearerError> {
    let Some(header) = single_field(header)? else {
        return Ok(None);
    };
    // The scheme is case-insensitive (RFC 9110 §11.1).
    let (scheme, rest) = header.split_once(' ').ok_or(BearerError::Malformed)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(BearerError::WrongScheme);
    }
    let token = rest.trim_start_matches(' ');
    // b68token grammar of RFC 6750 §2.1.
    let body = token.trim_end_matches('=');
    let ok = !body.is_empty()
        && body.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/')
        });
    if ok {
        Ok(Some(token))
    } else {
        Err(BearerError::Malformed)
    }
}

/// The token slice of `Authorization: Bearer <token>`, for a caller that
/// hands it straight to a strict token parser: the scheme and the field are
/// checked as in [`parse_authorization`], but the token's characters are
/// not scanned, since the JWT decoder validates every byte as it decodes
/// (and refuses everything outside base64url and the two dots). A caller
/// that refuses the token calls [`parse_authorization`] to name the fault.
pub(crate) fn bearer_token(header: HeaderField<'_>) -> Result<Option<&str>, BearerError> {
    let Some(header) = single_field(header)? else {
        return Ok(None);
    };
    match header.get(..7) {
        // The scheme is case-insensitive (RFC 9110 §11.1).
        Some(scheme) if scheme.eq_ignore_ascii_case("bearer ") => {
            Ok(Some(header[7..].trim_start_matches(' ')))
        }
        _ => parse_authorization(HeaderField::one(header)),
    }
}

/// The one `Authorization` value, at most [`MAX_AUTHORIZATION_LEN`] bytes;
/// `None` when the request carried none.
fn single_field(header: HeaderField<'_>) -> Result<Option<&str>, BearerError> {
    match header.value() {
        Ok(Some(header)) if header.len() > MAX_AUTHORIZATION_LEN => Err(BearerError::Malformed),
        Ok(value) => Ok(value),
        Err(HeaderError::Repeated) => Err(BearerError::Repeated),
        Err(_) => Err(BearerError::Malformed),
    }
}

/// Refuses a request whose query string carries `access_token` (RFC 6750
/// §2.3): the adapter passes the raw query.
pub fn refuse_query_token(query: Option<&str>) -> Result<(), BearerError> {
    let found = query.is_some_and(|q| {
        q.split('&')
            .any(|p| p == "access_token" || p.starts_with("access_token="))
    });
    if found {
        Err(BearerError::TokenInQuery)
    } else {
        Ok(())
    }
}

/// Why the `Authorization` header was refused.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BearerError {
    /// Not `Bearer <token>` with a token of the RFC 6750 grammar.
    Malformed,
    /// Another scheme (`Basic`, …).
    WrongScheme,
    /// The token was sent in the query string.
    TokenInQuery,
    /// The `Authorization` field came more than once: an ambiguous request
    /// (RFC 9110 §5.3), `invalid_request`.
    Repeated,
}

impl Describe for BearerError {
    fn describe<W: fmt::Write>(&self, f: &mut W) -> fmt::Result {
        f.write_str(match self {
            Self::Malformed => "Authorization header is not a bearer token",
            Self::WrongScheme => "Authorization scheme must be Bearer",
            Self::TokenInQuery => "access tokens are accepted only in the Authorization header",
            Self::Repeated => "the Authorization header was sent more than once",
        })
    }
}

display_by_describe!(BearerError);

impl WireError for BearerError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::TokenInQuery | Self::Repeated => ErrorCode::InvalidRequest,
            _ => ErrorCode::InvalidToken,
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for BearerError {}

/// A `WWW-Authenticate: Bearer` challenge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    /// 401 or 403.
    pub status: u16,
    /// The full header value.
    pub www_authenticate: String,
    /// The error code, absent when no credentials came (RFC 6750 §3.1).
    pub error: Option<ErrorCode>,
}

impl Challenge {
    /// No credentials were sent: 401 with `resource_metadata` and the scope
    /// that would be needed, but no `error` (RFC 6750 §3.1).
    #[must_use]
    pub fn unauthenticated(resource_metadata: &str, scope: &ScopeSet) -> Self {
        let mut v = String::from("Bearer ");
        param(&mut v, "resource_metadata", resource_metadata);
        if !scope.is_empty() {
            v.push_str(", ");
            param(&mut v, "scope", &scope.to_param());
        }
        Self {
            status: 401,
            www_authenticate: v,
            error: None,
        }
    }

    /// Credentials were sent but are invalid, expired or revoked: 401
    /// `invalid_token`.
    #[must_use]
    pub fn invalid_token(resource_metadata: &str, description: &str) -> Self {
        Self::error(401, ErrorCode::InvalidToken, resource_metadata, description)
    }

    /// The request is malformed — a repeated `Authorization` field: 400
    /// `invalid_request` (RFC 6750 §3.1).
    #[must_use]
    pub fn invalid_request(resource_metadata: &str, description: &str) -> Self {
        Self::error(
            400,
            ErrorCode::InvalidRequest,
            resource_metadata,
            description,
        )
    }

    /// The answer: the status with `WWW-Authenticate` and no body.
    #[must_use]
    pub fn to_response(&self) -> crate::http::HttpResponse {
        crate::http::HttpResponse {
            status: self.status,
            headers: alloc::vec![("www-authenticate", self.www_authenticate.clone())],
            body: String::new(),
        }
    }

    fn error(status: u16, code: ErrorCode, resource_metadata: &str, description: &str) -> Self {
        let mut v = String::from("Bearer ");
        param(&mut v, "error", code.as_str());
        v.push_str(", ");
        param(&mut v, "error_description", description);
        v.push_str(", ");
        param(&mut v, "resource_metadata", resource_metadata);
        Self {
            status,
            www_authenticate: v,
            error: Some(code),
        }
    }

    /// The token is valid but lacks scope: 403 `insufficient_scope`, with
    /// `scope` listing every scope the request needs (RFC 6750 §3.1; the
    /// MCP authorization spec's step-up flow reads it).
    #[must_use]
    pub fn insufficient_scope(resource_metadata: &str, needed: &ScopeSet) -> Self {
        let mut v = String::from("Bearer ");
        param(&mut v, "error", "insufficient_scope");
        v.push_str(", ");
        param(&mut v, "scope", needed.as_param());
        v.push_str(", ");
        param(&mut v, "resource_metadata", resource_metadata);
        Self {
            status: 403,
            www_authenticate: v,
            error: Some(ErrorCode::InsufficientScope),
        }
    }
}

/// Appends `name="value"` as an RFC 9110 §5.6.4 quoted string.
fn param(out: &mut String, name: &str, value: &str) {
    out.push_str(name);
    out.push_str("=\"");
    for c in value.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        if !c.is_control() {
            out.push(c);
        }
    }
    out.push('"');
}

/// Who is calling a protected resource: the verified outcome of
/// [`Engine::verify_bearer`](crate::Engine::verify_bearer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// The site.
    pub site: SiteId,
    /// The grant the token belongs to.
    pub grant: GrantId,
    /// The user.
    pub subject: String,
    /// The client.
    pub client_id: String,
    /// The client's unverified name, for approval prompts.
    pub client_name: Option<String>,
    /// The token's scopes.
    pub scopes: ScopeSet,
    /// The token id (`jti`).
    pub token_id: String,
    /// When the token expires.
    pub expires: Timestamp,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_parsing() {
        let one = |v| parse_authorization(HeaderField::one(v));
        assert_eq!(parse_authorization(HeaderField::ABSENT), Ok(None));
        assert_eq!(one("Bearer abc.def"), Ok(Some("abc.def")));
        assert_eq!(one("bEaReR  abc=="), Ok(Some("abc==")));
        assert_eq!(one("Basic abc"), Err(BearerError::WrongScheme));
        assert_eq!(one("Bearer"), Err(BearerError::Malformed));
        assert_eq!(one("Bearer "), Err(BearerError::Malformed));
        assert_eq!(one("Bearer a b"), Err(BearerError::Malformed));
        assert_eq!(one("Bearer =abc"), Err(BearerError::Malformed));
        assert_eq!(
            parse_authorization(HeaderField::new([&b"Bearer \xff"[..]])),
            Err(BearerError::Malformed)
        );
        assert_eq!(
            refuse_query_token(Some("x=1&access_token=abc")),
            Err(BearerError::TokenInQuery)
        );
        assert_eq!(refuse_query_token(Some("x_access_token=1")), Ok(()));
    }

    #[test]
    fn the_fast_token_slice_agrees_with_the_full_parse() {
        for v in [
            "Bearer abc.def",
            "bEaReR  abc==",
            "Basic abc",
            "Bearer",
            "Bearer ",
            "Bearer a b",
            "Bearer =abc",
            "Bearerx abc",
            "",
        ] {
            let full = parse_authorization(HeaderField::one(v));
            let fast = bearer_token(HeaderField::one(v));
            // Wherever the full parse accepts, the fast one hands on the
            // same slice; where the fast one accepts more, the token
            // parser refuses the slice.
            if full.is_ok() || fast.is_err() {
                assert_eq!(fast, full, "{v}");
            }
        }
        assert_eq!(bearer_token(HeaderField::ABSENT), Ok(None));
    }

    #[test]
    fn a_repeated_field_is_refused_whichever_value_is_valid() {
        for values in [
            [&b"Bearer abc"[..], b"Bearer abc"],
            [b"Bearer abc", b"garbage"],
            [b"garbage", b"Bearer abc"],
        ] {
            let e = parse_authorization(HeaderField::new(values)).unwrap_err();
            assert_eq!(e, BearerError::Repeated);
            assert_eq!(e.code(), ErrorCode::InvalidRequest);
        }
        let c = Challenge::invalid_request("https://a.example/md", "twice");
        assert_eq!((c.status, c.error), (400, Some(ErrorCode::InvalidRequest)));
        assert!(
            c.www_authenticate
                .starts_with(r#"Bearer error="invalid_request", error_description="twice""#),
            "{}",
            c.www_authenticate
        );
    }

    #[test]
    fn challenges() {
        let md = "https://a.example/.well-known/oauth-protected-resource/mcp";
        let scopes = ScopeSet::parse("skills:read skills:write").unwrap();
        let c = Challenge::unauthenticated(md, &scopes);
        assert_eq!(
            c.www_authenticate,
            format!(r#"Bearer resource_metadata="{md}", scope="skills:read skills:write""#)
        );
        assert!(!c.www_authenticate.contains("error"));
        let c = Challenge::insufficient_scope(md, &scopes);
        assert_eq!(c.status, 403);
        assert!(
            c.www_authenticate.starts_with(
                r#"Bearer error="insufficient_scope", scope="skills:read skills:write""#
            )
        );
        let c = Challenge::invalid_token(md, "say \"hi\"");
        assert!(
            c.www_authenticate
                .contains(r#"error_description="say \"hi\"""#)
        );
    }
    use alloc::format;
}
