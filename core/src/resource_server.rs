//! The bearer check of a resource server in another process: one that
//! holds a site's published key set (RFC 7517, at the `jwks_uri` of its
//! RFC 8414 document) and nothing else, and checks the site's EdDSA or
//! ES256 access tokens by signature alone.
//!
//! [`RemoteSite::verify`] checks what a signature can prove, in the order
//! the in-process check does: the `Authorization` field (RFC 6750 §2.1),
//! the JWT (`typ: at+jwt`, RFC 9068 §2.1; a `kid` the key set names, the
//! algorithm pinned to that key), its expiry, audience (the resource URL
//! this server is known by) and issuer, then the scopes the request needs.
//! Refusals are RFC 6750 §3 challenges naming this resource's RFC 9728
//! document, so a client steps up and re-authorizes the same way as
//! against the site itself.
//!
//! What it cannot know, and the in-process check does: whether the grant
//! was revoked, or the site switched off, since the token was signed. A
//! token keeps working here until it expires (five minutes by default,
//! [`Policy::access_token_ttl`](crate::policy::Policy)). Bound that with a
//! shorter token lifetime, by asking the site (RFC 7662 introspection), or
//! by sharing its database (the PostgreSQL store's read cache). A minted
//! agent token is HS256, and cannot be checked here at all.
//!
//! Sans-IO like the rest of the core: the caller fetches the key set,
//! hands it over ([`RemoteSite::set_keys`]), and refetches when a refusal
//! says a token names a key the set lacks ([`Refusal::unknown_key`]),
//! within a bound of its own.

use alloc::string::String;
use core::time::Duration;

use crate::bearer::{self, BearerError, Challenge};
use crate::describe::Describe as _;
use crate::error::ErrorCode;
use crate::grant::GrantId;
use crate::header::HeaderField;
use crate::jwk::JwkSet;
use crate::jwt::{Expect, Keyring, TokenType, VerifyError};
use crate::scope::ScopeSet;
use crate::time::Timestamp;

/// A site as a resource server in another process knows it: the issuer,
/// the resource URL tokens are issued for, and the site's published keys.
#[derive(Clone)]
pub struct RemoteSite {
    issuer: String,
    resource: String,
    resource_metadata: String,
    keyring: Keyring,
    leeway: Duration,
}

impl core::fmt::Debug for RemoteSite {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RemoteSite")
            .field("issuer", &self.issuer)
            .field("resource", &self.resource)
            .finish_non_exhaustive()
    }
}

/// A token [`RemoteSite::verify`] accepted: what its claims say. The grant
/// was live when the token was signed; whether it still is, only the site
/// knows (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteGrant {
    /// The grant the token belongs to (claim `gid`).
    pub grant: GrantId,
    /// The user (`sub`).
    pub subject: String,
    /// The client (`client_id`, RFC 9068 §2.2).
    pub client_id: String,
    /// The token's scopes (`scope`, RFC 9068 §2.2.3).
    pub scopes: ScopeSet,
    /// The token id (`jti`).
    pub token_id: String,
    /// When the token expires (`exp`).
    pub expires: Timestamp,
}

/// Why [`RemoteSite::verify`] refused a request: the challenge to answer
/// with, and whether fetching the key set again could change the answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The `401`/`403`/`400` answer (RFC 6750 §3.1, RFC 9728 §5.1).
    pub challenge: Challenge,
    /// The token names a key the set lacks: the site may have published a
    /// new one since the set was fetched.
    pub unknown_key: bool,
}

/// Why a [`RemoteSite`] could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RemoteSiteError {
    /// The resource URL is not an absolute `https` (or loopback `http`)
    /// URL with a path, without query or fragment.
    Resource,
    /// The issuer is not such a URL.
    Issuer,
}

impl core::fmt::Display for RemoteSiteError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Resource => "the resource is not an https URL with a path",
            Self::Issuer => "the issuer is not an https URL",
        })
    }
}

#[cfg(feature = "std")]
impl std::error::Error for RemoteSiteError {}

impl RemoteSite {
    /// The site whose authorization server is `issuer` (its RFC 8414
    /// `issuer`, compared byte for byte with each token's `iss`), as the
    /// resource `resource` (the URL tokens name in `aud`: the site's MCP
    /// URL as its clients use it), with no keys yet
    /// ([`RemoteSite::set_keys`]). `leeway` is the clock skew allowed on
    /// `exp`, `nbf` and `iat`
    /// ([`Policy::jwt_leeway`](crate::policy::Policy)).
    pub fn new(issuer: &str, resource: &str, leeway: Duration) -> Result<Self, RemoteSiteError> {
        if !crate::site::is_server_url(issuer) {
            return Err(RemoteSiteError::Issuer);
        }
        if !crate::site::is_server_url(resource) {
            return Err(RemoteSiteError::Resource);
        }
        let resource_metadata = crate::metadata::resource_metadata_url_for(resource)
            .ok_or(RemoteSiteError::Resource)?;
        Ok(Self {
            issuer: issuer.into(),
            resource: resource.into(),
            resource_metadata,
            keyring: Keyring::new(),
            leeway,
        })
    }

    /// Checks with the keys of `set` from now on (the site's key set as
    /// last fetched: keys the site retired are gone from it).
    pub fn set_keys(&mut self, set: &JwkSet) {
        self.keyring = Keyring::from_key_set(set);
    }

    /// The issuer.
    #[must_use]
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The resource URL.
    #[must_use]
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// Where this resource's RFC 9728 document is served (the challenges'
    /// `resource_metadata`).
    #[must_use]
    pub fn resource_metadata_url(&self) -> &str {
        &self.resource_metadata
    }

    /// Checks a request's `Authorization` field(s) for an access token of
    /// the site that holds `required`, at `now` (see the [module
    /// docs](self)). No field is a 401 without `error`; a repeated field is
    /// 400 `invalid_request`; a token that does not verify is 401
    /// `invalid_token`; missing scopes are 403 `insufficient_scope` naming
    /// every scope to ask for (RFC 6750 §3.1).
    pub fn verify(
        &self,
        authorization: HeaderField<'_>,
        required: &ScopeSet,
        now: Timestamp,
    ) -> Result<RemoteGrant, Refusal> {
        let md = self.resource_metadata.as_str();
        let refuse = |challenge| Refusal {
            challenge,
            unknown_key: false,
        };
        let token = match bearer::bearer_token(authorization) {
            Ok(Some(token)) => token,
            Ok(None) => return Err(refuse(Challenge::unauthenticated(md, required))),
            Err(e @ BearerError::Repeated) => {
                return Err(refuse(Challenge::invalid_request(md, &e.description())));
            }
            Err(e) => return Err(refuse(Challenge::invalid_token(md, &e.description()))),
        };
        let expect = Expect {
            typ: TokenType::AccessToken,
            audience: (&self.resource, ""),
            issuer: &self.issuer,
            leeway: self.leeway,
        };
        let invalid = |why: &str| refuse(Challenge::invalid_token(md, why));
        let claims = self
            .keyring
            .verify_expect(token, &expect, now, |v| {
                (
                    v.claims.gid.as_deref().and_then(GrantId::parse),
                    v.claims.sub.as_deref().map(String::from),
                    v.claims.client_id.as_deref().map(String::from),
                    v.claims.scope.as_deref().map(ScopeSet::parse),
                    v.claims.jti.as_deref().map(String::from),
                    v.claims.exp,
                )
            })
            .map_err(|e| match bearer::parse_authorization(authorization) {
                // The characters were left to the decoder: name a header
                // fault as the header's.
                Err(header) => invalid(&header.description()),
                Ok(_) => Refusal {
                    challenge: Challenge::invalid_token(md, &e.description()),
                    unknown_key: e == VerifyError::UnknownKey,
                },
            })?;
        let (Some(grant), Some(subject), Some(client_id), scopes, jti, Some(exp)) = claims else {
            return Err(invalid("the token lacks a claim of an access token"));
        };
        let scopes = scopes
            .unwrap_or_else(|| ScopeSet::parse(""))
            .map_err(|_| invalid("token scope is malformed"))?;
        if !required.is_subset(&scopes) {
            return Err(refuse(Challenge::insufficient_scope(
                md,
                &required.union(&scopes),
            )));
        }
        Ok(RemoteGrant {
            grant,
            subject,
            client_id,
            scopes,
            token_id: jti.unwrap_or_default(),
            expires: Timestamp::from_secs(u64::try_from(exp).unwrap_or(0)),
        })
    }
}

/// The error code of a refusal, for logs.
impl Refusal {
    /// `invalid_token`, `insufficient_scope`, `invalid_request`, or `None`
    /// when no credentials came.
    #[must_use]
    pub fn code(&self) -> Option<ErrorCode> {
        self.challenge.error
    }
}
