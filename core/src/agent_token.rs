//! Agent tokens: per-user, scoped, expiring JWTs minted for agents that
//! cannot run the OAuth flow (pasted into a CLI's configuration, say).
//!
//! An agent token is an HS256 JWT with `typ: agent+jwt` carrying `sub`,
//! `org_domain`, `scope` and a `jti`. The record under its `jti` is what
//! makes it revocable: verification checks the record, so revoking by `jti`
//! takes effect at once, and listing a user's tokens reads an index.

use alloc::string::String;

use serde::{Deserialize, Serialize};

use crate::scope::ScopeSet;
use crate::site::SiteId;
use crate::store::{Record, Table};
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
