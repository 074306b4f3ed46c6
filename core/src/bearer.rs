//! Bearer tokens on protected-resource requests: reading the
//! `Authorization` header (RFC 6750 §2.1) and writing the
//! `WWW-Authenticate` challenge (RFC 6750 §3, with RFC 9728 §5.1's
//! `resource_metadata`).
//!
//! Only the header method is accepted: a token in a query string ends up in
//! logs and `Referer` headers, and OAuth 2.1 §5.2 drops it; the form-body
//! method is not offered either.

use alloc::string::String;
use core::fmt;

use crate::error::{ErrorCode, WireError};
use crate::scope::ScopeSet;

/// Longest `Authorization` header read.
pub const MAX_AUTHORIZATION_LEN: usize = 8 * 1024 + 16;

/// Extracts the token from an `Authorization: Bearer …` header value.
/// `Ok(None)` means no credentials were sent (no header).
pub fn parse_authorization(header: Option<&str>) -> Result<Option<&str>, BearerError> {
    let Some(header) = header else {
        return Ok(None);
    };
    if header.len() > MAX_AUTHORIZATION_LEN {
        return Err(BearerError::Malformed);
    }
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
}

impl fmt::Display for BearerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Malformed => "Authorization header is not a bearer token",
            Self::WrongScheme => "Authorization scheme must be Bearer",
            Self::TokenInQuery => "access tokens are accepted only in the Authorization header",
        })
    }
}

impl WireError for BearerError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::TokenInQuery => ErrorCode::InvalidRequest,
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
            param(&mut v, "scope", &alloc::format!("{scope}"));
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
        let mut v = String::from("Bearer ");
        param(&mut v, "error", "invalid_token");
        v.push_str(", ");
        param(&mut v, "error_description", description);
        v.push_str(", ");
        param(&mut v, "resource_metadata", resource_metadata);
        Self {
            status: 401,
            www_authenticate: v,
            error: Some(ErrorCode::InvalidToken),
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
        param(&mut v, "scope", &alloc::format!("{needed}"));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_parsing() {
        assert_eq!(parse_authorization(None), Ok(None));
        assert_eq!(
            parse_authorization(Some("Bearer abc.def")),
            Ok(Some("abc.def"))
        );
        assert_eq!(
            parse_authorization(Some("bEaReR  abc==")),
            Ok(Some("abc=="))
        );
        assert_eq!(
            parse_authorization(Some("Basic abc")),
            Err(BearerError::WrongScheme)
        );
        assert_eq!(
            parse_authorization(Some("Bearer")),
            Err(BearerError::Malformed)
        );
        assert_eq!(
            parse_authorization(Some("Bearer ")),
            Err(BearerError::Malformed)
        );
        assert_eq!(
            parse_authorization(Some("Bearer a b")),
            Err(BearerError::Malformed)
        );
        assert_eq!(
            parse_authorization(Some("Bearer =abc")),
            Err(BearerError::Malformed)
        );
        assert_eq!(
            refuse_query_token(Some("x=1&access_token=abc")),
            Err(BearerError::TokenInQuery)
        );
        assert_eq!(refuse_query_token(Some("x_access_token=1")), Ok(()));
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
