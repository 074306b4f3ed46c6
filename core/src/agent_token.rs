//! Agent tokens: per-user, scoped, expiring JWTs minted for agents that
//! cannot run the OAuth flow (pasted into a CLI's configuration, say).
//!
//! An agent token is an HS256 JWT with `typ: agent+jwt` carrying `sub`,
//! `org_domain`, `scope` and a `jti`. The record under its `jti` is what
//! makes it revocable: verification checks the record, so revoking by `jti`
//! takes effect at once, and listing a user's tokens reads an index.

use alloc::string::String;
use alloc::vec::Vec;
use core::ops::Bound;
use core::time::Duration;

use rand_core::CryptoRng;
use serde::{Deserialize, Serialize};

use crate::engine::grants::{invalid_token, require_scopes};
use crate::engine::{BearerRejection, Engine, SiteOpError, Txn, Within, keys, load_site};
use crate::error::{ErrorCode, WireError};
use crate::header::HeaderField;
use crate::jwt::{Claims, TokenType};
use crate::rand;
use crate::scope::ScopeSet;
use crate::secret::SecretString;
use crate::site::{SiteError, SiteId};
use crate::store::{
    ReadTransaction, Record, Store, StoreError, Table, WriteTransaction, prefix_end,
};
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

/// Agent-token operations: mint, list, revoke, verify.
impl<S: Store> Engine<S> {
    /// Mints an agent token for `request.subject` on `site`. Returns the
    /// token text (show it once) and its record.
    #[allow(
        clippy::needless_pass_by_value,
        reason = "by value as before; an attempt that may re-run on a conflict clones what it keeps"
    )]
    pub fn mint_agent_token<X: Within<S>, R: CryptoRng + ?Sized>(
        &self,
        tx: X,
        site_id: &SiteId,
        request: AgentTokenRequest,
        rng: &mut R,
        now: Timestamp,
    ) -> Result<(SecretString, AgentToken), MintError> {
        tx.run(self, |txn| {
            self.mint_agent_token_body(txn, site_id, request.clone(), rng, now)
        })
    }

    /// The body of [`Engine::mint_agent_token`] in either form, generic over the
    /// transaction alone: both forms share one copy per store.
    #[allow(
        clippy::needless_pass_by_value,
        reason = "by value as before; an attempt that may re-run on a conflict clones what it keeps"
    )]
    fn mint_agent_token_body<W: WriteTransaction, R: CryptoRng + ?Sized>(
        &self,
        txn: &mut Txn<'_, W>,
        site_id: &SiteId,
        request: AgentTokenRequest,
        rng: &mut R,
        now: Timestamp,
    ) -> Result<(SecretString, AgentToken), MintError> {
        let site = load_site(&*txn, site_id).map_err(|e| match e {
            SiteOpError::Site(e) => MintError::Site(e),
            SiteOpError::Store(e) => MintError::Store(e),
        })?;
        if request.scopes.is_empty() || !request.scopes.is_subset(&site.scopes) {
            return Err(MintError::InvalidScope);
        }
        if request.ttl.as_secs() == 0 || request.ttl.as_secs() > MAX_AGENT_TOKEN_TTL_SECS {
            return Err(MintError::InvalidLifetime);
        }
        let record = AgentToken {
            jti: rand::base64url::<16, _>(rng),
            site: site.id.clone(),
            subject: request.subject.clone(),
            org_domain: request.org_domain.clone(),
            scopes: request.scopes.clone(),
            label: request.label.clone(),
            created: now,
            expires: now.saturating_add(request.ttl),
            revoked: None,
        };
        let claims = Claims {
            iss: Some(site.issuer.clone()),
            sub: Some(record.subject.clone()),
            aud: Some(site.resource().into()),
            iat: Some(now.as_jwt_secs()),
            exp: Some(record.expires.as_jwt_secs()),
            jti: Some(record.jti.clone()),
            scope: Some(record.scopes.to_param()),
            org_domain: record.org_domain.clone(),
            ..Claims::default()
        };
        let token = self
            .keyring()
            .sign(TokenType::AgentToken, &claims)
            .map_err(|_| MintError::NoSigningKey)?;
        txn.save(&keys::agent_token(&record.jti), &record)?;
        txn.put(
            Table::AgentTokens,
            &keys::agent_token_of_user(&site.id, &record.subject, &record.jti),
            &[],
        )?;
        Ok((token, record))
    }

    /// A user's agent tokens on a site, live or not, oldest id first.
    pub fn list_agent_tokens(
        &self,
        site: &SiteId,
        subject: &str,
    ) -> Result<Vec<AgentToken>, StoreError> {
        self.read(|txn| {
            let prefix = keys::agent_token_of_user(site, subject, "");
            let end = prefix_end(&prefix);
            let end = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            let mut out = Vec::new();
            for (key, _) in txn.range(
                Table::AgentTokens,
                Bound::Included(&prefix),
                end,
                usize::MAX,
            )? {
                let jti = core::str::from_utf8(&key[prefix.len()..]).unwrap_or_default();
                if let Some(t) = txn.load::<AgentToken>(&keys::agent_token(jti))? {
                    out.push(t);
                }
            }
            Ok(out)
        })
    }

    /// Revokes an agent token by `jti`; it fails verification at once.
    /// Returns whether a live token was revoked.
    pub fn revoke_agent_token<X: Within<S>>(
        &self,
        tx: X,
        site: &SiteId,
        jti: &str,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        tx.run(self, |txn| {
            let key = keys::agent_token(jti);
            let Some(mut token) = txn.load::<AgentToken>(&key)? else {
                return Ok(false);
            };
            if token.site != *site || token.revoked.is_some() {
                return Ok(false);
            }
            token.revoked = Some(now);
            txn.save(&key, &token)?;
            Ok(true)
        })
    }

    /// Verifies an agent token presented as `Authorization: Bearer`, like
    /// [`Engine::verify_bearer`] does for access tokens: signature, type,
    /// audience, issuer, expiry, then the record (not revoked), the site
    /// (enabled) and the scopes. A repeated `Authorization` field is 400
    /// `invalid_request`, as there.
    pub fn verify_agent_token(
        &self,
        site_id: &SiteId,
        authorization: HeaderField<'_>,
        required: &ScopeSet,
        now: Timestamp,
    ) -> Result<AgentPrincipal, BearerRejection> {
        self.read(|txn| {
            self.check_bearer(
                txn,
                site_id,
                authorization,
                required,
                TokenType::AgentToken,
                now,
                |c| c.jti.as_deref().map(String::from),
                |site, jti| {
                    let invalid = |why: &str| invalid_token(site, why);
                    let jti = jti.ok_or_else(|| invalid("token has no jti"))?;
                    let record: AgentToken = txn
                        .load(&keys::agent_token(&jti))?
                        .ok_or_else(|| invalid("the token is revoked"))?;
                    if !record.is_live(now) || record.site.as_str() != site.id {
                        return Err(invalid("the token is revoked or expired"));
                    }
                    require_scopes(site, required, &record.scopes)?;
                    Ok(AgentPrincipal {
                        site: record.site,
                        jti,
                        subject: record.subject,
                        org_domain: record.org_domain,
                        scopes: record.scopes,
                    })
                },
            )
        })
    }
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
