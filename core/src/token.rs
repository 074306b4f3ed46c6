//! The token endpoint's wire side (RFC 6749 §3.2, §4.1.3, §5 and §6):
//! parsing the form body and client credentials, the success body, and the
//! errors with their exact statuses and headers. The flows themselves are
//! [`Engine::token`](crate::engine::Engine::token).

use alloc::borrow::Cow;
use alloc::string::String;
use core::fmt;

use serde::Serialize;

use crate::client::assertion::{AssertionError, VerifiedAssertion};
use crate::error::{ErrorCode, WireError};
use crate::form::{self, Form, FormError};
use crate::header::{HeaderError, HeaderField};
use crate::http::HttpResponse;
use crate::pkce::PkceError;
use crate::scope::ScopeSet;
use crate::secret::SecretString;
use crate::store::StoreError;

/// Longest token request body accepted.
pub const MAX_BODY_LEN: usize = 16 * 1024;

/// Longest `Authorization: Basic` value read: the scheme, then the base64 of
/// the longest registered client id, `:` and its derived secret (both
/// base64url and `.`, which need no form-encoding), with room for stray
/// whitespace. A shorter bound would lock out clients whose ids registration
/// accepted.
const MAX_BASIC_LEN: usize = "Basic ".len()
    + (crate::client::MAX_CLIENT_ID_LEN + 1 + crate::client::CLIENT_SECRET_LEN).div_ceil(3) * 4
    + 16;

/// How a client authenticates at the token and revocation endpoints, as
/// the adapter hands it over: every `Authorization` value the request
/// carried and, for a `private_key_jwt` client, the assertion the host
/// verified ([`client::assertion`](crate::client::assertion)). A bare
/// [`HeaderField`] converts into it, for every request without an
/// assertion.
#[derive(Clone, Copy, Debug)]
pub struct ClientAuthentication<'a> {
    authorization: HeaderField<'a>,
    assertion: Option<&'a VerifiedAssertion>,
}

impl<'a> ClientAuthentication<'a> {
    /// A request whose client assertion the host verified: the form's
    /// `client_assertion` must be exactly the one `verified` was made from.
    #[must_use]
    pub fn assertion(authorization: HeaderField<'a>, verified: &'a VerifiedAssertion) -> Self {
        Self {
            authorization,
            assertion: Some(verified),
        }
    }

    /// The `Authorization` values.
    #[must_use]
    pub fn authorization(&self) -> HeaderField<'a> {
        self.authorization
    }

    /// The verified assertion, if the host passed one.
    pub(crate) fn assertion_used(&self) -> Option<&'a VerifiedAssertion> {
        self.assertion
    }
}

impl<'a> From<HeaderField<'a>> for ClientAuthentication<'a> {
    fn from(authorization: HeaderField<'a>) -> Self {
        Self {
            authorization,
            assertion: None,
        }
    }
}

/// How a client authenticated in one request (RFC 6749 §2.3: exactly one
/// way).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presented {
    /// Nothing: a public client naming itself with `client_id`.
    Nothing,
    /// A secret in `Authorization: Basic` (RFC 6749 §2.3.1).
    Basic,
    /// A secret in the `client_secret` form parameter (RFC 6749 §2.3.1).
    Post,
    /// A verified `private_key_jwt` assertion (RFC 7523 §2.2).
    Assertion,
}

/// The client's identity as presented: `Authorization: Basic` (RFC 6749
/// §2.3.1), a `client_secret` form parameter, a verified client assertion
/// (RFC 7523 §2.2), or a bare `client_id` parameter for public clients
/// (§2.3).
#[derive(Clone)]
pub struct ClientCredentials<'a> {
    /// The client id.
    pub client_id: Cow<'a, str>,
    /// The secret, when Basic authentication or `client_secret` was used.
    pub secret: Option<Cow<'a, str>>,
    /// How the client authenticated.
    pub presented: Presented,
}

impl fmt::Debug for ClientCredentials<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("client_id", &self.client_id)
            .field("presented", &self.presented)
            .finish_non_exhaustive()
    }
}

impl<'a> ClientCredentials<'a> {
    /// Reads the credentials from every `Authorization` value the request
    /// carried, the host's verified assertion and the form. A repeated field
    /// is ambiguous and refused ([`TokenError::Header`], `invalid_request`)
    /// whichever of its values would authenticate. Exactly one method may
    /// be used (RFC 6749 §2.3): a Basic header, a `client_secret`, or a
    /// `client_assertion` (which must be the very one the host verified);
    /// a body `client_id` beside any of them must name the same client.
    pub fn read(
        form: &Form<'a>,
        authentication: impl Into<ClientAuthentication<'a>>,
    ) -> Result<Self, TokenError> {
        let ClientAuthentication {
            authorization,
            assertion,
        } = authentication.into();
        let authorization = authorization.value().map_err(TokenError::authorization)?;
        let basic = authorization.is_some_and(is_basic_scheme);
        let refused = || TokenError::InvalidClient { basic };
        let body_id = form.get_cow("client_id");
        let body_secret = form.get_cow("client_secret");
        let body_assertion = form.get("client_assertion");
        if let Some(header) = authorization {
            if body_secret.is_some() || body_assertion.is_some() || assertion.is_some() {
                return Err(refused());
            }
            let (id, secret) = parse_basic(header).ok_or_else(refused)?;
            if body_id.is_some_and(|b| *b != *id) {
                return Err(refused());
            }
            return Ok(Self {
                client_id: Cow::Owned(id),
                secret: Some(Cow::Owned(secret)),
                presented: Presented::Basic,
            });
        }
        #[cfg(feature = "client-assertions")]
        match (body_assertion, assertion) {
            (None, None) => {}
            (Some(text), Some(verified)) if body_secret.is_none() && verified.is_of(text) => {
                if body_id
                    .as_deref()
                    .is_some_and(|b| b != verified.client_id())
                {
                    return Err(refused());
                }
                return Ok(Self {
                    client_id: Cow::Owned(verified.client_id().into()),
                    secret: None,
                    presented: Presented::Assertion,
                });
            }
            // An assertion nobody verified, or a verification of another
            // request's assertion.
            _ => return Err(refused()),
        }
        // Without the feature no assertion can have been verified.
        #[cfg(not(feature = "client-assertions"))]
        if body_assertion.is_some() || assertion.is_some() {
            return Err(refused());
        }
        let client_id = body_id.ok_or_else(refused)?;
        Ok(match body_secret {
            Some(secret) => Self {
                client_id,
                secret: Some(secret),
                presented: Presented::Post,
            },
            None => Self {
                client_id,
                secret: None,
                presented: Presented::Nothing,
            },
        })
    }

    /// The refusal of these credentials: `invalid_client`, with a `Basic`
    /// challenge when they came in a Basic header.
    #[must_use]
    pub fn refused(&self) -> TokenError {
        TokenError::InvalidClient {
            basic: self.presented == Presented::Basic,
        }
    }
}

/// Whether an `Authorization` value uses the Basic scheme
/// (case-insensitive, RFC 7617 §2).
pub(crate) fn is_basic_scheme(header: &str) -> bool {
    header
        .get(..6)
        .is_some_and(|s| s.eq_ignore_ascii_case("basic "))
}

/// `Basic base64(urlencode(id) ":" urlencode(secret))` (RFC 6749 §2.3.1,
/// RFC 7617 §2); the scheme is case-insensitive.
pub(crate) fn parse_basic(header: &str) -> Option<(String, String)> {
    if header.len() > MAX_BASIC_LEN {
        return None;
    }
    let (scheme, encoded) = header.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = crate::jwt::b64::decode_standard(encoded.trim().as_bytes())?;
    let decoded = core::str::from_utf8(&decoded).ok()?;
    let (id, secret) = decoded.split_once(':')?;
    let id = form::decode(id).ok()?;
    let secret = form::decode(secret).ok()?;
    if id.is_empty() {
        return None;
    }
    Some((id.into_owned(), secret.into_owned()))
}

/// A successful token response (RFC 6749 §5.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenResponse {
    /// The access token (a JWT).
    pub access_token: SecretString,
    /// Seconds until the access token expires.
    pub expires_in: u64,
    /// The refresh token.
    pub refresh_token: SecretString,
    /// The access token's scope.
    pub scope: ScopeSet,
}

impl TokenResponse {
    /// The JSON body.
    #[must_use]
    pub fn to_json(&self) -> String {
        #[derive(Serialize)]
        struct Body<'a> {
            access_token: &'a str,
            token_type: &'static str,
            expires_in: u64,
            refresh_token: &'a str,
            scope: String,
        }
        serde_json::to_string(&Body {
            access_token: self.access_token.expose_secret(),
            token_type: "Bearer",
            expires_in: self.expires_in,
            refresh_token: self.refresh_token.expose_secret(),
            scope: self.scope.to_param(),
        })
        .unwrap_or_default()
    }

    /// 200 with the JSON body and `Cache-Control: no-store`.
    #[must_use]
    pub fn to_response(&self) -> HttpResponse {
        HttpResponse {
            status: 200,
            headers: alloc::vec![("content-type", "application/json".into())],
            body: self.to_json(),
        }
        .no_store()
    }
}

/// Why a token request failed.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenError {
    /// The site is switched off: 503 with `Retry-After`, never
    /// `invalid_grant` (clients discard credentials on that).
    Unavailable {
        /// Seconds for `Retry-After`.
        retry_after_secs: u32,
    },
    /// The body is too long, repeats a parameter or is malformed.
    Malformed(FormError),
    /// A required parameter is missing.
    MissingParameter(&'static str),
    /// `grant_type` is not `authorization_code` or `refresh_token`.
    UnsupportedGrantType,
    /// A header field the endpoint reads came more than once (an ambiguous
    /// request, RFC 9110 §5.3) or is not text: `invalid_request`.
    Header {
        /// The field's name.
        field: &'static str,
        /// What is wrong with it.
        error: HeaderError,
    },
    /// Client authentication failed (RFC 6749 §5.2 `invalid_client`).
    InvalidClient {
        /// The client tried the Basic scheme (RFC 6749 §2.3.1), so the
        /// answer challenges it (`WWW-Authenticate: Basic`): the core knows
        /// how the client authenticated, and the answer follows from it.
        basic: bool,
    },
    /// A client assertion was refused (`invalid_client`); the variant says
    /// which rule failed, for the log.
    ClientAssertion(AssertionError),
    /// The client did not register this grant type.
    UnauthorizedClient,
    /// The code or refresh token is invalid, expired, spent, revoked, or was
    /// issued to another client or redirect URI. One answer for all, so it is
    /// no oracle.
    InvalidGrant,
    /// The PKCE verifier is missing, malformed or wrong.
    Pkce(PkceError),
    /// The requested scope is wider than granted or malformed.
    InvalidScope,
    /// The `resource` is not the one the grant is bound to.
    InvalidTarget,
    /// The store failed; nothing was changed.
    Store(StoreError),
    /// The access token could not be signed: the keyring has no active key
    /// of the site's algorithm (a server misconfiguration, `server_error`).
    Signing(crate::jwt::SignError),
}

impl fmt::Display for TokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unavailable { .. } => {
                f.write_str("external agents are switched off for this site; retry later")
            }
            Self::Malformed(e) => write!(f, "{e}"),
            Self::MissingParameter(p) => write!(f, "{p} is required"),
            Self::Header { field, error } => write!(f, "the {field} header {error}"),
            Self::UnsupportedGrantType => {
                f.write_str("grant_type must be authorization_code or refresh_token")
            }
            Self::InvalidClient { .. } | Self::ClientAssertion(_) => {
                f.write_str("client authentication failed")
            }
            Self::UnauthorizedClient => f.write_str("the client did not register this grant type"),
            Self::InvalidGrant | Self::Pkce(_) => {
                f.write_str("the grant is invalid, expired or revoked")
            }
            Self::InvalidScope => f.write_str("scope is wider than granted"),
            Self::InvalidTarget => f.write_str("resource does not match the grant"),
            Self::Store(_) => f.write_str("temporary server error"),
            Self::Signing(_) => f.write_str("the server cannot sign tokens"),
        }
    }
}

impl WireError for TokenError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::Unavailable { .. } => ErrorCode::TemporarilyUnavailable,
            Self::Malformed(_) | Self::MissingParameter(_) | Self::Header { .. } => {
                ErrorCode::InvalidRequest
            }
            Self::UnsupportedGrantType => ErrorCode::UnsupportedGrantType,
            Self::InvalidClient { .. } | Self::ClientAssertion(_) => ErrorCode::InvalidClient,
            Self::UnauthorizedClient => ErrorCode::UnauthorizedClient,
            Self::InvalidGrant | Self::Pkce(_) => ErrorCode::InvalidGrant,
            Self::InvalidScope => ErrorCode::InvalidScope,
            Self::InvalidTarget => ErrorCode::InvalidTarget,
            Self::Store(_) | Self::Signing(_) => ErrorCode::ServerError,
        }
    }
}

impl TokenError {
    /// The `Authorization` field is repeated or not text.
    #[must_use]
    pub fn authorization(error: HeaderError) -> Self {
        Self::Header {
            field: "Authorization",
            error,
        }
    }
}

impl From<StoreError> for TokenError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

#[cfg(feature = "std")]
impl std::error::Error for TokenError {}

impl TokenError {
    /// The full HTTP answer: RFC 6749 §5.2 body, `no-store`, `Retry-After`
    /// while off, and a `Basic` challenge when Basic authentication failed
    /// (RFC 6749 §5.2: `401` with `WWW-Authenticate` for the scheme used).
    #[must_use]
    pub fn to_response(&self) -> HttpResponse {
        let mut r = HttpResponse::oauth_error(self.code(), &alloc::format!("{self}"));
        if let Self::Unavailable { retry_after_secs } = self {
            r = r.with_header("retry-after", alloc::format!("{retry_after_secs}"));
        }
        if matches!(self, Self::InvalidClient { basic: true }) {
            r = r.with_header("www-authenticate", String::from("Basic realm=\"token\""));
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;

    #[test]
    fn basic_credentials_are_form_decoded() {
        let header = alloc::format!("basic {}", STANDARD.encode("my%20client:s%3Acret"));
        let form = Form::parse("grant_type=x", 100).unwrap();
        let c = ClientCredentials::read(&form, HeaderField::one(&header)).unwrap();
        assert_eq!(c.client_id, "my client");
        assert_eq!(c.secret.as_deref(), Some("s:cret"));
        let other = Form::parse("client_id=else", 100).unwrap();
        assert_eq!(
            ClientCredentials::read(&other, HeaderField::one(&header)).unwrap_err(),
            TokenError::InvalidClient { basic: true }
        );
        let post = Form::parse("client_id=a&client_secret=b", 100).unwrap();
        let c = ClientCredentials::read(&post, HeaderField::ABSENT).unwrap();
        assert_eq!(
            (&*c.client_id, c.secret.as_deref(), c.presented),
            ("a", Some("b"), Presented::Post)
        );
        let unverified = Form::parse(
            "client_assertion_type=urn%3Aietf%3Aparams%3Aoauth%3Aclient-assertion-type%3Ajwt-bearer&client_assertion=a.b.c",
            500,
        )
        .unwrap();
        assert_eq!(
            ClientCredentials::read(&unverified, HeaderField::ABSENT).unwrap_err(),
            TokenError::InvalidClient { basic: false },
            "an assertion the host did not verify"
        );
        // A secret in the body next to a Basic header, or a malformed Basic
        // header: refused, challenging Basic.
        let malformed = "Basic !!";
        for (form, header) in [(&post, header.as_str()), (&other, malformed)] {
            let e = ClientCredentials::read(form, HeaderField::one(header)).unwrap_err();
            assert_eq!(e, TokenError::InvalidClient { basic: true });
            assert!(e.to_response().header("www-authenticate").is_some());
        }
        let bearer = ClientCredentials::read(&other, HeaderField::one("Bearer x")).unwrap_err();
        assert_eq!(bearer, TokenError::InvalidClient { basic: false });
        assert_eq!(
            ClientCredentials::read(&Form::default(), HeaderField::ABSENT).unwrap_err(),
            TokenError::InvalidClient { basic: false }
        );
    }

    #[test]
    fn repeated_basic_credentials_are_refused_in_either_order() {
        let right = alloc::format!("Basic {}", STANDARD.encode("c:right"));
        let wrong = alloc::format!("Basic {}", STANDARD.encode("c:wrong"));
        let form = Form::parse("grant_type=x", 100).unwrap();
        for pair in [[&right, &wrong], [&wrong, &right], [&right, &right]] {
            let field = HeaderField::new(pair.map(String::as_bytes));
            let e = ClientCredentials::read(&form, field).unwrap_err();
            assert_eq!(e, TokenError::authorization(HeaderError::Repeated));
            let r = e.to_response();
            assert_eq!(r.status, 400);
            assert!(r.body.contains("\"invalid_request\""), "{}", r.body);
            assert!(r.header("www-authenticate").is_none());
        }
    }

    #[test]
    fn errors_carry_their_statuses_and_headers() {
        let r = TokenError::Unavailable {
            retry_after_secs: 30,
        }
        .to_response();
        assert_eq!((r.status, r.header("retry-after")), (503, Some("30")));
        assert_eq!(r.header("cache-control"), Some("no-store"));
        let r = TokenError::InvalidClient { basic: true }.to_response();
        assert_eq!(r.status, 401);
        assert!(r.header("www-authenticate").is_some());
        let r = TokenError::InvalidClient { basic: false }.to_response();
        assert_eq!(r.status, 401);
        assert!(r.header("www-authenticate").is_none());
        let r = TokenError::InvalidGrant.to_response();
        assert!(r.body.contains("\"invalid_grant\""));
    }
}
