//! Protected-resource checks and grant management: bearer verification,
//! token introspection (RFC 7662) on the same read path, listing,
//! revocation and the expiry sweep.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::ops::Bound;

use super::{Engine, SiteOpError, Txn, Within, WithinRead, load_site};
use crate::bearer::{self, BearerError, Challenge, Principal};
use crate::describe::Describe as _;
use crate::error::{ErrorCode, WireError};
use crate::form::Form;
use crate::grant::{Grant, GrantId, GrantStatus, GrantView, RevocationReason};
use crate::header::HeaderField;
use crate::http::HttpResponse;
use crate::introspect::{self, ActiveToken, IntrospectError, Introspection};
use crate::jwt::{ClaimsRef, Expect, TokenType, VerifyError};
use crate::metadata;
use crate::scope::ScopeSet;
use crate::site::{Site, SiteError, SiteId, SiteView};
use crate::store::keys;
use crate::store::{ReadTransaction, Store, StoreError, Table, WriteTransaction, prefix_end};
use crate::time::Timestamp;

/// Why a protected-resource request was refused.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BearerRejection {
    /// Answer with this challenge (401 or 403).
    Challenge(Challenge),
    /// The site is off: 503 with `Retry-After`.
    Unavailable {
        /// Seconds for `Retry-After`.
        retry_after_secs: u32,
    },
    /// The site does not exist.
    UnknownSite,
    /// The store failed.
    Store(StoreError),
}

impl From<StoreError> for BearerRejection {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl fmt::Display for BearerRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Challenge(c) => match c.error {
                Some(code) => write!(f, "bearer token refused: {code}"),
                None => f.write_str("bearer token required"),
            },
            Self::Unavailable { .. } => {
                f.write_str("external agents are switched off for this site")
            }
            Self::UnknownSite => f.write_str("no such site"),
            Self::Store(_) => f.write_str("temporary server error"),
        }
    }
}

impl WireError for BearerRejection {
    fn code(&self) -> ErrorCode {
        match self {
            Self::Challenge(c) => c.error.unwrap_or(ErrorCode::InvalidToken),
            Self::Unavailable { .. } => ErrorCode::TemporarilyUnavailable,
            Self::UnknownSite => ErrorCode::InvalidRequest,
            Self::Store(_) => ErrorCode::ServerError,
        }
    }

    fn http_status(&self) -> u16 {
        match self {
            Self::Challenge(c) => c.status,
            _ => self.code().http_status(),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for BearerRejection {}

impl BearerRejection {
    /// The complete answer: the challenge's status and `WWW-Authenticate`
    /// (RFC 6750 §3), or 503 with `Retry-After` while the site is off.
    #[must_use]
    pub fn to_response(&self) -> HttpResponse {
        match self {
            Self::Challenge(c) => c.to_response(),
            Self::Unavailable { retry_after_secs } => {
                HttpResponse::error(self, Some(*retry_after_secs))
            }
            _ => HttpResponse::error(self, None),
        }
    }
}

/// One grant, as a user or an admin sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantSummary {
    /// The grant id.
    pub id: GrantId,
    /// The user.
    pub subject: String,
    /// The client.
    pub client_id: String,
    /// The client's unverified name.
    pub client_name: Option<String>,
    /// Granted scopes.
    pub scopes: ScopeSet,
    /// Created.
    pub created: Timestamp,
    /// Last successful refresh (or creation).
    pub last_used: Timestamp,
    /// When it lapses unless refreshed.
    pub expires: Timestamp,
    /// Live, revoked or expired.
    pub status: GrantStatus,
}

/// A page of grants and the cursor of the next page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantPage {
    /// The grants, ordered by id.
    pub grants: Vec<GrantSummary>,
    /// Pass as `after` to read the next page; `None` at the end.
    pub next: Option<GrantId>,
}

/// 401 `invalid_token` for `site`, saying `why`. The metadata URL is built
/// only here, on refusal, never on the accept path.
pub(crate) fn invalid_token(site: &SiteView<'_>, why: &str) -> BearerRejection {
    let md = metadata::resource_metadata_url(site.resource_prefix, site.public_key);
    BearerRejection::Challenge(Challenge::invalid_token(&md, why))
}

/// 403 `insufficient_scope`, listing every scope the request needs next to
/// those the token holds (RFC 6750 §3.1), when `held` lacks some of
/// `required`.
pub(crate) fn require_scopes(
    site: &SiteView<'_>,
    required: &ScopeSet,
    held: &ScopeSet,
) -> Result<(), BearerRejection> {
    if required.is_subset(held) {
        return Ok(());
    }
    let md = metadata::resource_metadata_url(site.resource_prefix, site.public_key);
    Err(BearerRejection::Challenge(Challenge::insufficient_scope(
        &md,
        &required.union(held),
    )))
}

impl<S: Store> Engine<S> {
    /// The checks every bearer credential passes first: the site exists and
    /// is on, the header is a bearer token, and the JWT verifies as `typ`
    /// for the site's resource and issuer at `now`; then `then` runs on the
    /// site and what `take` read of the claims. The header is read once and
    /// its token slice handed to the verifier, whose decoder validates the
    /// characters; `take` reads the claims borrowed from the decoded
    /// payload. The site is a [`SiteView`] borrowed from the stored bytes
    /// (read in this transaction, so an off switch or key rotation made by
    /// any process is seen at once: nothing is cached across requests), and
    /// the audience is compared against its two stored parts, so the accept
    /// path builds no string for the site.
    #[expect(
        clippy::too_many_arguments,
        reason = "the request's parts, the caller's claim reader and its continuation"
    )]
    pub(crate) fn check_bearer<R: ReadTransaction, T, U>(
        &self,
        txn: &R,
        site_id: &SiteId,
        authorization: HeaderField<'_>,
        required: &ScopeSet,
        typ: TokenType,
        now: Timestamp,
        take: impl FnOnce(&ClaimsRef<'_>) -> T,
        then: impl FnOnce(&SiteView<'_>, T) -> Result<U, BearerRejection>,
    ) -> Result<U, BearerRejection> {
        txn.view::<Site, _>(site_id.as_str().as_bytes(), |site| {
            if let Err(SiteError::Disabled { retry_after_secs }) = site.ensure_enabled() {
                return Err(BearerRejection::Unavailable { retry_after_secs });
            }
            let invalid = |why: &str| invalid_token(&site, why);
            let token = match bearer::bearer_token(authorization) {
                Ok(Some(token)) => token,
                Ok(None) => {
                    let md = metadata::resource_metadata_url(site.resource_prefix, site.public_key);
                    return Err(BearerRejection::Challenge(Challenge::unauthenticated(
                        &md, required,
                    )));
                }
                Err(e @ BearerError::Repeated) => {
                    let md = metadata::resource_metadata_url(site.resource_prefix, site.public_key);
                    return Err(BearerRejection::Challenge(Challenge::invalid_request(
                        &md,
                        &e.description(),
                    )));
                }
                Err(e) => return Err(invalid(&e.description())),
            };
            let claims = self
                .verify_for_site(&site, token, typ, now, take)
                .map_err(|e| match bearer::parse_authorization(authorization) {
                    // The characters were left to the decoder: name a header
                    // fault as the header's.
                    Err(header) => invalid(&header.description()),
                    Ok(_) => invalid(&e.description()),
                })?;
            then(&site, claims)
        })?
        .unwrap_or(Err(BearerRejection::UnknownSite))
    }

    /// The token checks of the bearer path against a site read in place:
    /// the JWT verifies as `typ` (signature by a key not retired, `typ`,
    /// `kid`) for the site's resource (`aud`) and issuer (`iss`) at `now`,
    /// `exp` and `nbf` with the policy's leeway; then `take` reads the
    /// claims borrowed from the decoded payload. What a bearer check and
    /// an introspection both verify, so the two cannot drift apart.
    fn verify_for_site<T>(
        &self,
        site: &SiteView<'_>,
        token: &str,
        typ: TokenType,
        now: Timestamp,
        take: impl FnOnce(&ClaimsRef<'_>) -> T,
    ) -> Result<T, VerifyError> {
        let expect = Expect {
            typ,
            audience: (site.resource_prefix, site.public_key),
            issuer: site.issuer,
            leeway: self.policy.jwt_leeway,
        };
        self.keyring
            .verify_expect(token, &expect, now, |v| take(&v.claims))
    }

    /// Whether `grant`, read in place, is live for `site` at `now`: not
    /// revoked (by itself or by the site's epoch), of this site, and within
    /// its lifetimes. The grant check of the bearer path.
    fn grant_is_live(&self, grant: &GrantView<'_>, site: &SiteView<'_>, now: Timestamp) -> bool {
        grant.status(site.id, site.epoch, now, &self.policy) == GrantStatus::Live
    }

    /// Checks a protected-resource request: every `Authorization` value the
    /// request carried, the `scope` the request needs, at `now`. No field is
    /// a 401 challenge without `error`; a repeated field is ambiguous and
    /// answered 400 `invalid_request` (RFC 6750 §3.1), whatever the values.
    /// Verifies the JWT (algorithm, type, key, signature, expiry, audience =
    /// the site's resource, issuer), then that its grant is live and the site
    /// enabled, so revocation takes effect at once, then the scopes.
    ///
    /// One read transaction; the site and the grant are read in place
    /// ([`SiteView`], [`GrantView`]) and only the answer's fields are
    /// copied out.
    pub fn verify_bearer(
        &self,
        site_id: &SiteId,
        authorization: HeaderField<'_>,
        required: &ScopeSet,
        now: Timestamp,
    ) -> Result<Principal, BearerRejection> {
        self.read(|txn| {
            self.check_bearer(
                txn,
                site_id,
                authorization,
                required,
                TokenType::AccessToken,
                now,
                |c| {
                    (
                        c.gid.as_deref().and_then(GrantId::parse),
                        c.scope.as_deref().map(ScopeSet::parse),
                        c.jti.as_deref().map(String::from),
                        c.exp,
                    )
                },
                |site, (grant_id, scopes, jti, exp)| {
                    let invalid = |why: &str| invalid_token(site, why);
                    let grant_id = grant_id.ok_or_else(|| invalid("token names no grant"))?;
                    txn.view::<Grant, _>(grant_id.as_bytes(), |grant| {
                        if !self.grant_is_live(&grant, site, now) {
                            return Err(invalid("the grant is revoked or expired"));
                        }
                        let scopes = scopes
                            .unwrap_or_else(|| ScopeSet::parse(""))
                            .map_err(|_| invalid("token scope is malformed"))?;
                        require_scopes(site, required, &scopes)?;
                        Ok(Principal {
                            site: site_id.clone(),
                            grant: grant.id,
                            subject: grant.subject.into(),
                            client_id: grant.client_id.into(),
                            client_name: grant.client_name.map(String::from),
                            scopes,
                            token_id: jti.unwrap_or_default(),
                            expires: Timestamp::from_secs(
                                exp.and_then(|e| u64::try_from(e).ok()).unwrap_or(0),
                            ),
                        })
                    })?
                    .unwrap_or_else(|| Err(invalid("the grant is revoked")))
                },
            )
        })
    }

    /// Token introspection (RFC 7662 §2): `body` is the raw
    /// `application/x-www-form-urlencoded` request body (`token`, and an
    /// optional `token_type_hint`, which §2.1 lets the server ignore and
    /// this one does: every kind of token is looked at), `authorization`
    /// every `Authorization` value the request carried.
    ///
    /// In order: a repeated or non-text `Authorization` field is
    /// [`IntrospectError::Header`]; a body over
    /// [`MAX_BODY_LEN`](introspect::MAX_BODY_LEN), with a repeated or
    /// malformed parameter, is [`IntrospectError::Malformed`]; a caller
    /// that is not a resource server of the site
    /// ([`introspect::authenticate`], RFC 7662 §2.1), or that also sends
    /// credentials in the body (RFC 6749 §2.3: one method per request), is
    /// [`IntrospectError::InvalidClient`]; a body without `token` is
    /// [`IntrospectError::MissingToken`]. None of these reads the store.
    ///
    /// Then, in one read transaction: a site switched off is
    /// [`IntrospectError::Unavailable`]; an access token of the site that
    /// passes every check of [`Engine::verify_bearer`] (the same code:
    /// signature by a key not retired, `typ`, issuer, audience = the site's
    /// resource, `exp`/`nbf` with the policy's leeway, then its grant read
    /// in place and live) is [`Introspection::Active`]; every other token
    /// is [`Introspection::Inactive`], one answer whatever failed (§2.2).
    /// A store failure is [`IntrospectError::Store`], never an answer about
    /// the token. Nothing is written: in the caller's transaction (`&txn`,
    /// read or write) there is nothing to roll back and `txn` is left as it
    /// was.
    pub fn introspect<X: WithinRead<S>>(
        &self,
        tx: X,
        site_id: &SiteId,
        body: &str,
        authorization: HeaderField<'_>,
        now: Timestamp,
    ) -> Result<Introspection, IntrospectError> {
        let form = self.introspection_request(site_id, body, authorization)?;
        let token = form.get("token").unwrap_or_default();
        tx.read(self, |txn| self.introspect_token(txn, site_id, token, now))
    }

    /// The checks of an introspection request that need no store: the
    /// header, the body, the caller (see [`Engine::introspect`]). The form,
    /// which has a `token`, when they pass.
    fn introspection_request<'b>(
        &self,
        site_id: &SiteId,
        body: &'b str,
        authorization: HeaderField<'_>,
    ) -> Result<Form<'b>, IntrospectError> {
        authorization
            .value()
            .map_err(IntrospectError::authorization)?;
        let form =
            Form::parse(body, introspect::MAX_BODY_LEN).map_err(IntrospectError::Malformed)?;
        let caller = introspect::authenticate(&self.keyring, site_id, authorization)?;
        let other_method = form.get("client_secret").is_some()
            || form.get("client_assertion").is_some()
            || form.get("client_id").is_some_and(|id| id != caller.name);
        if other_method {
            return Err(IntrospectError::InvalidClient { basic: true });
        }
        if form.get("token").is_none() {
            return Err(IntrospectError::MissingToken);
        }
        Ok(form)
    }

    /// The store side of [`Engine::introspect`]: the site and then the
    /// token's grant read in place in `txn`, as [`Engine::verify_bearer`]
    /// reads them.
    fn introspect_token<R: ReadTransaction>(
        &self,
        txn: &R,
        site_id: &SiteId,
        token: &str,
        now: Timestamp,
    ) -> Result<Introspection, IntrospectError> {
        txn.view::<Site, _>(site_id.as_str().as_bytes(), |site| {
            if let Err(SiteError::Disabled { retry_after_secs }) = site.ensure_enabled() {
                return Err(IntrospectError::Unavailable { retry_after_secs });
            }
            let verified = self.verify_for_site(&site, token, TokenType::AccessToken, now, |c| {
                (
                    c.gid.as_deref().and_then(GrantId::parse),
                    c.scope
                        .as_deref()
                        .map_or(Ok(ScopeSet::new()), ScopeSet::parse),
                    c.jti.as_deref().map(String::from),
                    c.exp.and_then(|e| u64::try_from(e).ok()),
                    c.iat.and_then(|i| u64::try_from(i).ok()),
                )
            });
            // Every refusal is the same answer: which check failed is
            // nobody's business but the log's, and no log is written.
            let Ok((Some(grant_id), Ok(scope), jti, Some(exp), iat)) = verified else {
                return Ok(Introspection::Inactive);
            };
            let answer = txn.view::<Grant, _>(grant_id.as_bytes(), |grant| {
                if !self.grant_is_live(&grant, &site, now) {
                    return Introspection::Inactive;
                }
                let mut audience =
                    String::with_capacity(site.resource_prefix.len() + site.public_key.len());
                audience.push_str(site.resource_prefix);
                audience.push_str(site.public_key);
                Introspection::Active(ActiveToken {
                    scope,
                    client_id: grant.client_id.into(),
                    subject: grant.subject.into(),
                    expires: Timestamp::from_secs(exp),
                    issued_at: iat.map(Timestamp::from_secs),
                    issuer: site.issuer.into(),
                    audience,
                    token_id: jti,
                    grant: grant.id,
                })
            })?;
            Ok(answer.unwrap_or(Introspection::Inactive))
        })?
        .unwrap_or(Err(IntrospectError::UnknownSite))
    }

    /// A grant by id.
    pub fn grant(&self, id: &GrantId) -> Result<Option<Grant>, StoreError> {
        self.read(|txn| txn.load(id.as_bytes()))
    }

    /// A user's grants on a site, a page at a time, after `after`.
    pub fn list_user_grants(
        &self,
        site: &SiteId,
        subject: &str,
        after: Option<GrantId>,
        limit: usize,
        now: Timestamp,
    ) -> Result<GrantPage, SiteOpError> {
        self.list_grants(site, &keys::user_grants(site, subject), after, limit, now)
    }

    /// Every grant of a site, a page at a time, after `after`.
    pub fn list_site_grants(
        &self,
        site: &SiteId,
        after: Option<GrantId>,
        limit: usize,
        now: Timestamp,
    ) -> Result<GrantPage, SiteOpError> {
        self.list_grants(site, &keys::site_grants(site), after, limit, now)
    }

    fn list_grants(
        &self,
        site_id: &SiteId,
        prefix: &[u8],
        after: Option<GrantId>,
        limit: usize,
        now: Timestamp,
    ) -> Result<GrantPage, SiteOpError> {
        self.read(|txn| {
            let site = load_site(txn, site_id)?;
            let end = prefix_end(prefix);
            let start = after.map(|a| keys::with_grant(prefix.to_vec(), &a));
            let start = start
                .as_deref()
                .map_or(Bound::Included(prefix), Bound::Excluded);
            let end = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            let entries = txn.range(Table::GrantIndex, start, end, limit.saturating_add(1))?;
            let mut grants = Vec::with_capacity(entries.len().min(limit));
            let mut next = None;
            for (i, (key, _)) in entries.iter().enumerate() {
                let Some(id) = keys::grant_suffix(key) else {
                    continue;
                };
                if i == limit {
                    next = grants.last().map(|g: &GrantSummary| g.id);
                    break;
                }
                if let Some(g) = txn.load::<Grant>(id.as_bytes())? {
                    grants.push(GrantSummary {
                        id: g.id,
                        status: g.status(&site, now, &self.policy),
                        expires: g.expires_at(&self.policy),
                        subject: g.subject,
                        client_id: g.client_id,
                        client_name: g.client_name,
                        scopes: g.scopes,
                        created: g.created,
                        last_used: g.last_refreshed,
                    });
                }
            }
            Ok(GrantPage { grants, next })
        })
    }

    /// Revokes one grant; its tokens stop working at once. Returns whether a
    /// live grant was revoked.
    pub fn revoke_grant<X: Within<S>>(
        &self,
        tx: X,
        id: &GrantId,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        tx.run(self, |txn| {
            Self::revoke_grant_if(txn, id, now, |_| true).map(|r| r == Some(true))
        })
    }

    /// Revokes one grant for the user who holds it: `Ok(None)` when `subject`
    /// holds no such grant on `site` (the id alone is no authority),
    /// `Ok(Some(revoked))` otherwise. Ownership is checked in the same
    /// transaction as the revocation.
    pub fn revoke_own_grant<X: Within<S>>(
        &self,
        tx: X,
        site: &SiteId,
        subject: &str,
        id: &GrantId,
        now: Timestamp,
    ) -> Result<Option<bool>, StoreError> {
        tx.run(self, |txn| {
            Self::revoke_grant_if(txn, id, now, |g| g.site == *site && g.subject == subject)
        })
    }

    /// `None` when the grant is missing or `owned` refuses it; otherwise
    /// whether a live grant was revoked.
    fn revoke_grant_if<W: WriteTransaction>(
        txn: &mut Txn<'_, W>,
        id: &GrantId,
        now: Timestamp,
        owned: impl Fn(&Grant) -> bool,
    ) -> Result<Option<bool>, StoreError> {
        let Some(mut grant) = txn.load::<Grant>(id.as_bytes())?.filter(|g| owned(g)) else {
            return Ok(None);
        };
        if grant.revoked.is_some() {
            return Ok(Some(false));
        }
        grant.revoke(RevocationReason::Revoked, now);
        txn.save(id.as_bytes(), &grant)?;
        super::ledger::cancel_grant_requests(txn, id, now)?;
        Ok(Some(true))
    }

    /// Revokes every grant a user holds on a site, in one transaction.
    /// Returns how many were revoked.
    pub fn revoke_user_grants<X: Within<S>>(
        &self,
        tx: X,
        site: &SiteId,
        subject: &str,
        now: Timestamp,
    ) -> Result<usize, StoreError> {
        tx.run(self, |txn| {
            let prefix = keys::user_grants(site, subject);
            let end = prefix_end(&prefix);
            let end = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            let entries =
                txn.range(Table::GrantIndex, Bound::Included(&prefix), end, usize::MAX)?;
            let mut revoked = 0;
            for (key, _) in entries {
                let Some(id) = keys::grant_suffix(&key) else {
                    continue;
                };
                let id = id.as_bytes();
                if let Some(mut grant) = txn.load::<Grant>(id)?
                    && grant.revoked.is_none()
                {
                    grant.revoke(RevocationReason::Revoked, now);
                    txn.save(id, &grant)?;
                    super::ledger::cancel_grant_requests(txn, &grant.id, now)?;
                    revoked += 1;
                }
            }
            Ok(revoked)
        })
    }

    /// Deletes expired codes and grants (with the auto-approvals of a
    /// grant's server runs) through the expiry index, touching at most
    /// `budget` index entries. Returns how many entries it handled;
    /// call again while it returns `budget`.
    ///
    /// A grant refreshed since it was indexed is re-indexed at its new
    /// deadline instead of deleted (refreshes do not pay for index upkeep).
    pub fn sweep<X: Within<S>>(
        &self,
        tx: X,
        now: Timestamp,
        budget: usize,
    ) -> Result<usize, StoreError> {
        tx.run(self, |txn| self.sweep_body(txn, now, budget))
    }

    /// The body of [`Engine::sweep`] in either form, generic over the
    /// transaction alone: both forms share one copy per store.
    fn sweep_body<W: WriteTransaction>(
        &self,
        txn: &mut Txn<'_, W>,
        now: Timestamp,
        budget: usize,
    ) -> Result<usize, StoreError> {
        let end = keys::expiry(now, Table::Meta, &[]);
        let due = txn.range(
            Table::Expiry,
            Bound::Unbounded,
            Bound::Excluded(&end),
            budget,
        )?;
        for (entry, _) in &due {
            txn.delete(Table::Expiry, entry)?;
            let Some((_, table, key)) = keys::split_expiry(entry) else {
                continue;
            };
            if table == Table::Codes.index() as u8 {
                txn.delete(Table::Codes, key)?;
                // A consent's apps whose code was never exchanged.
                if let Ok(id) = <&[u8; 16]>::try_from(key) {
                    txn.delete(Table::GrantApps, &keys::code_apps(id))?;
                }
            } else if table == Table::Grants.index() as u8 {
                let Some(grant) = txn.load::<Grant>(key)? else {
                    continue;
                };
                let deadline = grant.expires_at(&self.policy);
                if deadline > now {
                    txn.put(
                        Table::Expiry,
                        &keys::expiry(deadline, Table::Grants, key),
                        &[],
                    )?;
                    continue;
                }
                txn.delete(Table::Grants, key)?;
                txn.delete(
                    Table::GrantIndex,
                    &keys::with_grant(keys::user_grants(&grant.site, &grant.subject), &grant.id),
                )?;
                txn.delete(
                    Table::GrantIndex,
                    &keys::with_grant(keys::site_grants(&grant.site), &grant.id),
                )?;
                // The auto-approvals of its server runs end with it.
                txn.delete(Table::Approvals, &keys::grant_auto_approval(&grant.id))?;
                // And the apps it reached.
                txn.delete(Table::GrantApps, &keys::grant_apps(&grant.id))?;
            } else if table == Table::ClientAssertions.index() as u8 {
                txn.delete(Table::ClientAssertions, key)?;
            } else if table == Table::Activity.index() as u8 {
                crate::activity::forget(txn, key)?;
            }
        }
        Ok(due.len())
    }
}
