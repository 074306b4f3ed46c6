//! The agent-token operations of [`Engine`]: mint, list, revoke, verify.
//!
//! The token record and the request and principal types live in the parent
//! module, [`crate::agent_token`].

use alloc::string::String;
use alloc::vec::Vec;
use core::ops::Bound;

use rand_core::CryptoRng;

use super::{AgentPrincipal, AgentToken, AgentTokenRequest, MAX_AGENT_TOKEN_TTL_SECS, MintError};
use crate::engine::grants::{invalid_token, require_scopes};
use crate::engine::{BearerRejection, Engine, SiteOpError, Txn, Within, load_site};
use crate::header::HeaderField;
use crate::jwt::{Claims, TokenType};
use crate::rand;
use crate::scope::ScopeSet;
use crate::secret::SecretString;
use crate::site::SiteId;
use crate::store::keys;
use crate::store::{ReadTransaction, Store, StoreError, Table, WriteTransaction, prefix_end};
use crate::time::Timestamp;

/// Agent-token operations: mint, list, revoke, verify.
impl<S: Store> Engine<S> {
    /// Mints an agent token for `request.subject` on `site`. Returns the
    /// token text (show it once) and its record.
    #[allow(
        clippy::needless_pass_by_value,
        reason = "the request by value, as callers hand it over; every attempt reads it in place"
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
            self.mint_agent_token_body(txn, site_id, &request, rng, now)
        })
    }

    /// The body of [`Engine::mint_agent_token`] in either form, generic over the
    /// transaction alone: both forms share one copy per store.
    fn mint_agent_token_body<W: WriteTransaction, R: CryptoRng + ?Sized>(
        &self,
        txn: &mut Txn<'_, W>,
        site_id: &SiteId,
        request: &AgentTokenRequest,
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
