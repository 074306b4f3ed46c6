//! Agent tokens: per-user, scoped, expiring JWTs minted for agents that
//! cannot run the OAuth flow (pasted into a CLI's configuration, say).
//!
//! An agent token is an HS256 JWT with `typ: agent+jwt` carrying `sub`,
//! `org_domain`, `scope` and a `jti`. The record under its `jti` is what
//! makes it revocable: verification checks the record, so revoking by `jti`
//! takes effect at once, and listing a user's tokens reads an index.
//!
//! This module owns the token record and the request and principal types, and
//! imports nothing from [`crate::engine`]. The engine's operations on them
//! ([`Engine::mint_agent_token`](crate::Engine::mint_agent_token) and the rest,
//! listed in [`crate::engine`]) are in its child module `agent_token::ops`,
//! which builds on both: the engine builds on this module, never the other way.

mod ops;

use alloc::string::String;
use core::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{ErrorCode, WireError};
use crate::scope::ScopeSet;
use crate::site::{SiteError, SiteId};
use crate::store::{Record, StoreError, Table};
use crate::time::Timestamp;

/// Longest accepted lifetime of an agent token: 365 days.
pub const MAX_AGENT_TOKEN_TTL_SECS: u64 = 365 * 86_400;

/// A stored agent token (never the token text).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentToken {
    /// The token id (`jti`), 22 characters of base64url.
    pub jti: String,
    /// The site.
    pub site: SiteId,
    /// The user it acts for.
    pub subject: String,
    /// The user's organisation domain, if any.
    pub org_domain: Option<String>,
    /// Its scopes.
    pub scopes: ScopeSet,
    /// A label the user chose ("laptop CLI").
    pub label: Option<String>,
    /// When it was minted.
    pub created: Timestamp,
    /// When it expires.
    pub expires: Timestamp,
    /// When it was revoked, if it was.
    pub revoked: Option<Timestamp>,
}

crate::store::codec::fields!(AgentToken {
    jti,
    site,
    subject,
    org_domain,
    scopes,
    label,
    created,
    expires,
    revoked,
});

impl Record for AgentToken {
    const TABLE: Table = Table::AgentTokens;
    const VERSION: u8 = 1;
}

impl AgentToken {
    /// Whether the token is usable at `now`.
    #[must_use]
    pub fn is_live(&self, now: Timestamp) -> bool {
        self.revoked.is_none() && now < self.expires
    }
}

/// What to mint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentTokenRequest {
    /// The user it acts for.
    pub subject: String,
    /// The user's organisation domain.
    pub org_domain: Option<String>,
    /// Scopes, a subset of the site's.
    pub scopes: ScopeSet,
    /// Lifetime, at most 365 days.
    pub ttl: Duration,
    /// A label for listings.
    pub label: Option<String>,
}

/// A verified agent token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentPrincipal {
    /// The site.
    pub site: SiteId,
    /// The token id.
    pub jti: String,
    /// The user.
    pub subject: String,
    /// The user's organisation domain.
    pub org_domain: Option<String>,
    /// The token's scopes.
    pub scopes: ScopeSet,
}

/// Why an agent token could not be minted.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MintError {
    /// No scope, or a scope the site does not offer.
    InvalidScope,
    /// A lifetime of zero or more than 365 days.
    InvalidLifetime,
    /// The keyring has no active key.
    NoSigningKey,
    /// The site refused (unknown site).
    Site(SiteError),
    /// The store failed; nothing changed.
    Store(StoreError),
}

impl From<StoreError> for MintError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl core::fmt::Display for MintError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::InvalidScope => {
                f.write_str("agent token scopes must be a non-empty subset of the site's")
            }
            Self::InvalidLifetime => f.write_str("agent token lifetime must be 1 s to 365 days"),
            Self::NoSigningKey => f.write_str("keyring has no active signing key"),
            Self::Site(e) => write!(f, "{e}"),
            Self::Store(e) => write!(f, "{e}"),
        }
    }
}

impl WireError for MintError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::InvalidScope => ErrorCode::InvalidScope,
            Self::InvalidLifetime => ErrorCode::InvalidRequest,
            Self::Site(e) => e.code(),
            Self::NoSigningKey | Self::Store(_) => ErrorCode::ServerError,
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for MintError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record's encoding and reading are postcard's over its derives.
    #[test]
    fn the_record_encoding_is_postcards() {
        let mut token = AgentToken {
            jti: "AAAAAAAAAAAAAAAAAAAAAA".into(),
            site: SiteId::parse("s").unwrap(),
            subject: "u".into(),
            org_domain: None,
            scopes: ScopeSet::parse("skills:read").unwrap(),
            label: None,
            created: Timestamp::from_secs(100),
            expires: Timestamp::from_secs(200),
            revoked: None,
        };
        crate::store::codec::assert_postcard_agrees(&token);
        token.org_domain = Some("example.com".into());
        token.label = Some("laptop CLI".into());
        token.revoked = Some(Timestamp::from_secs(150));
        crate::store::codec::assert_postcard_agrees(&token);
    }
}
