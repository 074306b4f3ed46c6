//! Grants: what a user allowed one client to do on one site, and the
//! refresh-token rotation that keeps it alive.
//!
//! A grant is created by a code exchange and lives until it is revoked, its
//! site's epoch moves on, it goes unrefreshed for the idle lifetime (30 days
//! by default), or it reaches its absolute lifetime (90 days), which nothing
//! moves.
//!
//! **Refresh tokens are not stored.** A token names its grant and
//! generation and carries an HMAC tag over (grant id, generation, per-grant
//! salt) under a keyring key: `prt1.<grant>.<generation>.<tag>.<kid>`. That
//! gives three cases with different answers (OAuth 2.1 §4.3.1 and the
//! refresh-token rotation of RFC 9700 §4.14.2):
//!
//! * a valid tag for the **current** generation rotates the grant;
//! * a valid tag for an **older** generation is reuse of a spent token:
//!   someone holds a copy, so the whole grant is revoked (unless it is the
//!   immediately previous token retried inside [`Policy::refresh_retry_window`],
//!   which answers with the very same successor);
//! * an **invalid** tag revokes nothing, so a forger cannot log anyone out.
//!
//! The grant id is no secret (every access token carries it as `gid`), so
//! naming a grant proves nothing: every path that acts on a presented token
//! (the token endpoint, RFC 7009 revocation) first checks
//! [`RefreshTokenParts::authenticates`], and a token that fails it changes
//! nothing anywhere.
//!
//! Reuse and unknown tokens answer with the same `invalid_grant`, so the
//! answer is no oracle for which tokens once existed.
//!
//! [`Policy::refresh_retry_window`]: crate::Policy::refresh_retry_window

use alloc::string::String;
use core::fmt;
use core::time::Duration;

use serde::{Deserialize, Serialize};

use crate::jwt::{Keyring, SigningKey, b64};
use crate::policy::Policy;
use crate::scope::ScopeSet;
use crate::secret::SecretString;
use crate::site::{Site, SiteId};
use crate::store::codec::{self, SkippedStrings};
use crate::store::{Record, Table, Viewed};
use crate::time::Timestamp;

/// A grant identifier: 16 random bytes, shown as 22 characters of base64url.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GrantId(#[serde(deserialize_with = "crate::store::codec::byte_array")] [u8; 16]);

codec::fields!(GrantId(newtype));

impl GrantId {
    /// Wraps raw bytes.
    #[must_use]
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }

    /// The raw bytes (the store key).
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// Parses the base64url form.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        let mut out = [0u8; 16];
        (text.len() == 22 && b64::decode_into(text.as_bytes(), &mut out) == Some(16))
            .then_some(Self(out))
    }
}

impl fmt::Display for GrantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(b64::encode_16(&self.0, &mut [0; 22]))
    }
}

impl fmt::Debug for GrantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GrantId({self})")
    }
}

/// Why a grant stopped.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RevocationReason {
    /// The user or an admin revoked it.
    Revoked,
    /// A spent refresh token was presented.
    RefreshReuse,
    /// A redeemed authorization code was presented again.
    CodeReplay,
    /// The client revoked its own token (RFC 7009).
    ClientRequest,
}

codec::unit_enum!(RevocationReason {
    Revoked,
    RefreshReuse,
    CodeReplay,
    ClientRequest,
});

/// When and why a grant was revoked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revocation {
    /// When.
    pub at: Timestamp,
    /// Why.
    pub reason: RevocationReason,
}

codec::fields!(Revocation { at, reason });

/// The rotation that produced the current generation, kept for the retry
/// window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rotation {
    /// When it happened.
    pub at: Timestamp,
    /// The scope the client asked for in that refresh.
    pub requested: ScopeSet,
}

codec::fields!(Rotation { at, requested });

/// A stored grant.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The id.
    pub id: GrantId,
    /// The site it belongs to.
    pub site: SiteId,
    /// The site epoch it was issued under.
    pub epoch: u32,
    /// The client it was issued to.
    pub client_id: String,
    /// The client's self-declared (unverified) name.
    pub client_name: Option<String>,
    /// The user.
    pub subject: String,
    /// Granted scopes.
    pub scopes: ScopeSet,
    /// The resource the grant is bound to.
    pub resource: String,
    /// Creation time; the absolute lifetime counts from here.
    pub created: Timestamp,
    /// Last successful refresh (or creation); the idle lifetime counts from here.
    pub last_refreshed: Timestamp,
    /// The current refresh-token generation.
    pub generation: u32,
    /// The per-grant salt of refresh-token tags.
    #[serde(deserialize_with = "crate::store::codec::byte_array")]
    salt: [u8; 16],
    /// The key that tags the current generation's token.
    pub kid: String,
    /// The rotation into the current generation, if any.
    pub last_rotation: Option<Rotation>,
    /// Set once the grant is revoked; never cleared.
    pub revoked: Option<Revocation>,
}

impl fmt::Debug for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Grant")
            .field("id", &self.id)
            .field("site", &self.site)
            .field("epoch", &self.epoch)
            .field("client_id", &self.client_id)
            .field("scopes", &self.scopes)
            .field("created", &self.created)
            .field("last_refreshed", &self.last_refreshed)
            .field("generation", &self.generation)
            .field("revoked", &self.revoked)
            .finish_non_exhaustive()
    }
}

impl Record for Grant {
    const TABLE: Table = Table::Grants;
    const VERSION: u8 = 1;
}

impl Viewed for Grant {
    type View<'a> = GrantView<'a>;
}

/// A stored [`Grant`] read in place: strings borrowed from the stored
/// bytes, scope lists skipped without allocating. Its fields mirror
/// [`Grant`]'s in order (postcard is positional; a test holds the two
/// together). The salt is read past, never kept.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct GrantView<'a> {
    /// The id.
    pub id: GrantId,
    /// The site it belongs to.
    pub site: &'a str,
    /// The site epoch it was issued under.
    pub epoch: u32,
    /// The client it was issued to.
    pub client_id: &'a str,
    /// The client's self-declared (unverified) name.
    pub client_name: Option<&'a str>,
    /// The user.
    pub subject: &'a str,
    /// Granted scopes (skipped).
    pub scopes: SkippedStrings,
    /// The resource the grant is bound to.
    pub resource: &'a str,
    /// Creation time.
    pub created: Timestamp,
    /// Last successful refresh (or creation).
    pub last_refreshed: Timestamp,
    /// The current refresh-token generation.
    pub generation: u32,
    /// The salt: read past, never shown.
    salt: [u8; 16],
    /// The key that tags the current generation's token.
    pub kid: &'a str,
    /// The rotation into the current generation, if any (its time).
    pub last_rotation: Option<RotationView>,
    /// Set once the grant is revoked.
    pub revoked: Option<Revocation>,
}

codec::fields!(Grant, view GrantView {
    id,
    site,
    epoch,
    client_id,
    client_name,
    subject,
    scopes,
    resource,
    created,
    last_refreshed,
    generation,
    salt,
    kid,
    last_rotation,
    revoked,
});

impl fmt::Debug for GrantView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrantView")
            .field("id", &self.id)
            .field("site", &self.site)
            .field("epoch", &self.epoch)
            .field("client_id", &self.client_id)
            .field("generation", &self.generation)
            .field("revoked", &self.revoked)
            .finish_non_exhaustive()
    }
}

/// [`Rotation`] read in place: its time, the requested scopes skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RotationView {
    /// When it happened.
    pub at: Timestamp,
    /// The scope asked for (skipped).
    pub requested: SkippedStrings,
}

impl codec::Decode<'_> for RotationView {
    fn decode(r: &mut codec::Reader<'_>) -> Result<Self, codec::Malformed> {
        Ok(Self {
            at: codec::Decode::decode(r)?,
            requested: codec::Decode::decode(r)?,
        })
    }
}

impl GrantView<'_> {
    /// [`Grant::status`] on the view, against the site's id and epoch.
    #[must_use]
    pub fn status(&self, site: &str, epoch: u32, now: Timestamp, policy: &Policy) -> GrantStatus {
        status_of(
            self.revoked.is_some() || self.epoch != epoch || self.site != site,
            self.created,
            self.last_refreshed,
            now,
            policy,
        )
    }
}

/// The status from whether the grant is revoked (directly or by its site)
/// and its two clocks.
fn status_of(
    revoked: bool,
    created: Timestamp,
    last_refreshed: Timestamp,
    now: Timestamp,
    policy: &Policy,
) -> GrantStatus {
    let idle = last_refreshed.saturating_add(policy.grant_idle_ttl);
    let absolute = created.saturating_add(policy.grant_absolute_ttl);
    if revoked {
        GrantStatus::Revoked
    } else if now >= idle.min(absolute) {
        GrantStatus::Expired
    } else {
        GrantStatus::Live
    }
}

/// Whether a grant can still be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrantStatus {
    /// Usable.
    Live,
    /// Revoked, directly or by a site epoch change.
    Revoked,
    /// Past its idle or absolute lifetime.
    Expired,
}

/// What presenting a correctly tagged refresh token means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefreshVerdict {
    /// The current token: rotate to the next generation.
    Rotate,
    /// The previous token retried inside the window by the same client with
    /// the same scope: answer with the current (already issued) successor.
    RetrySameSuccessor,
    /// A spent token: revoke the grant.
    Reuse,
}

impl Grant {
    /// A new live grant at generation 1.
    #[allow(
        clippy::too_many_arguments,
        reason = "a grant is the sum of a code's facts; a builder would only rename them"
    )]
    #[must_use]
    pub fn new(
        id: GrantId,
        site: &Site,
        client_id: String,
        client_name: Option<String>,
        subject: String,
        scopes: ScopeSet,
        salt: [u8; 16],
        kid: String,
        now: Timestamp,
    ) -> Self {
        Self {
            id,
            site: site.id.clone(),
            epoch: site.epoch,
            client_id,
            client_name,
            subject,
            scopes,
            resource: site.resource(),
            created: now,
            last_refreshed: now,
            generation: 1,
            salt,
            kid,
            last_rotation: None,
            revoked: None,
        }
    }

    /// The instant the grant lapses unless refreshed: the earlier of the
    /// idle and the absolute deadline.
    #[must_use]
    pub fn expires_at(&self, policy: &Policy) -> Timestamp {
        let idle = self.last_refreshed.saturating_add(policy.grant_idle_ttl);
        let absolute = self.absolute_deadline(policy);
        idle.min(absolute)
    }

    /// The absolute deadline, which nothing moves.
    #[must_use]
    pub fn absolute_deadline(&self, policy: &Policy) -> Timestamp {
        self.created.saturating_add(policy.grant_absolute_ttl)
    }

    /// The status of the grant at `now` under `site`.
    #[must_use]
    pub fn status(&self, site: &Site, now: Timestamp, policy: &Policy) -> GrantStatus {
        self.status_in(site.id.as_str(), site.epoch, now, policy)
    }

    /// [`Grant::status`] against a site's id and epoch alone.
    #[must_use]
    pub fn status_in(
        &self,
        site: &str,
        epoch: u32,
        now: Timestamp,
        policy: &Policy,
    ) -> GrantStatus {
        status_of(
            self.revoked.is_some() || self.epoch != epoch || self.site.as_str() != site,
            self.created,
            self.last_refreshed,
            now,
            policy,
        )
    }

    /// Revokes the grant; the first revocation wins.
    pub fn revoke(&mut self, reason: RevocationReason, now: Timestamp) {
        if self.revoked.is_none() {
            self.revoked = Some(Revocation { at: now, reason });
        }
    }

    /// Judges a correctly tagged token of `generation`, presented with
    /// `requested` scope, against the retry `window`.
    #[must_use]
    pub fn judge_refresh(
        &self,
        generation: u32,
        requested: &ScopeSet,
        now: Timestamp,
        window: Option<Duration>,
    ) -> RefreshVerdict {
        if generation == self.generation {
            return RefreshVerdict::Rotate;
        }
        let retry = generation.checked_add(1) == Some(self.generation)
            && window.is_some_and(|w| {
                self.last_rotation
                    .as_ref()
                    .is_some_and(|r| now < r.at.saturating_add(w) && r.requested == *requested)
            });
        if retry {
            RefreshVerdict::RetrySameSuccessor
        } else {
            RefreshVerdict::Reuse
        }
    }

    /// Moves to the next generation, tagged by `kid`. The idle lifetime
    /// restarts; the absolute deadline does not move.
    pub fn rotate(&mut self, requested: ScopeSet, kid: &str, now: Timestamp) {
        self.generation += 1;
        if self.kid != kid {
            self.kid.clear();
            self.kid.push_str(kid);
        }
        self.last_refreshed = now;
        self.last_rotation = Some(Rotation { at: now, requested });
    }

    /// The refresh token of the current generation.
    #[must_use]
    pub fn refresh_token(&self, key: &SigningKey) -> SecretString {
        let tag = self.tag(key, self.generation);
        // prt1. + id (22) + . + generation (at most 10 digits) + . + tag
        // (43) + . + kid: one allocation.
        let mut t = String::with_capacity(5 + 22 + 1 + 10 + 1 + 43 + 1 + self.kid.len());
        t.push_str("prt1.");
        t.push_str(b64::encode_16(self.id.as_bytes(), &mut [0; 22]));
        t.push('.');
        t.push_str(itoa::Buffer::new().format(self.generation));
        t.push('.');
        b64::encode_string(&tag, &mut t);
        t.push('.');
        t.push_str(&self.kid);
        SecretString::new(t)
    }

    /// Whether `tag` is this grant's tag for `generation` under `key`
    /// (constant time).
    #[must_use]
    pub fn tag_matches(&self, key: &SigningKey, generation: u32, tag: &[u8; 32]) -> bool {
        crate::secret::Digest32::from_bytes(self.tag(key, generation)).ct_matches(tag)
    }

    fn tag(&self, key: &SigningKey, generation: u32) -> [u8; 32] {
        key.mac_labeled(
            "portcullis/refresh/v1",
            &[self.id.as_bytes(), &generation.to_be_bytes(), &self.salt],
        )
    }
}

/// A refresh token split into its parts; nothing is trusted yet.
#[derive(Clone, Copy)]
pub struct RefreshTokenParts<'a> {
    /// The grant it names.
    pub grant: GrantId,
    /// The generation it claims.
    pub generation: u32,
    /// The claimed tag.
    pub tag: [u8; 32],
    /// The key it claims to be tagged with.
    pub kid: &'a str,
}

impl fmt::Debug for RefreshTokenParts<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RefreshTokenParts")
            .field("grant", &self.grant)
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

impl<'a> RefreshTokenParts<'a> {
    /// Splits `prt1.<grant>.<generation>.<tag>.<kid>`; `None` for anything
    /// else (which the token endpoint answers as `invalid_grant`).
    #[must_use]
    pub fn parse(token: &'a str) -> Option<Self> {
        if token.len() > 256 {
            return None;
        }
        let mut it = token.splitn(5, '.');
        let (Some("prt1"), Some(grant), Some(generation), Some(tag), Some(kid)) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            return None;
        };
        let grant = GrantId::parse(grant)?;
        if generation.is_empty()
            || generation.len() > 10
            || !generation.bytes().all(|b| b.is_ascii_digit())
            || generation.starts_with('0')
        {
            return None;
        }
        let generation = generation.parse().ok()?;
        let mut tag_bytes = [0u8; 32];
        if tag.len() != 43 || b64::decode_into(tag.as_bytes(), &mut tag_bytes) != Some(32) {
            return None;
        }
        Some(Self {
            grant,
            generation,
            tag: tag_bytes,
            kid,
        })
    }

    /// The key named by the token, if it still verifies.
    #[must_use]
    pub fn key<'k>(&self, keyring: &'k Keyring) -> Option<&'k SigningKey> {
        keyring.verifying_key(self.kid).ok()
    }

    /// Whether the token is authentic for `grant`, the record it names: the
    /// grant ids agree, the named key still verifies, the generation is one
    /// the grant has reached, and the tag over (grant id, generation,
    /// per-grant salt) matches in constant time. Only an authentic token may
    /// change anything: a token that names a grant is no proof of holding
    /// it, since the grant id is visible in every access token.
    #[must_use]
    pub fn authenticates(&self, keyring: &Keyring, grant: &Grant) -> bool {
        let Some(key) = self.key(keyring) else {
            return false;
        };
        // The MAC is computed whatever the other checks say, so the time
        // taken does not tell a forger how far the token got.
        let tag = grant.tag_matches(key, self.generation, &self.tag);
        tag && grant.id == self.grant && self.generation <= grant.generation
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::site::SiteConfig;

    fn fixture() -> (Site, Grant, SigningKey) {
        let site = Site::create(
            SiteConfig::new(
                SiteId::parse("s").unwrap(),
                "S",
                "https://a.example",
                "https://a.example/mcp/",
            ),
            "k".into(),
            Timestamp::EPOCH,
        )
        .unwrap();
        let key = SigningKey::from_bytes(&[3; 32]).unwrap();
        let grant = Grant::new(
            GrantId::from_bytes([1; 16]),
            &site,
            "c".into(),
            None,
            "u".into(),
            ScopeSet::parse("skills:read").unwrap(),
            [9; 16],
            "k1".into(),
            Timestamp::from_secs(1_000),
        );
        (site, grant, key)
    }

    /// The view reads every field of a stored grant in its place, and
    /// judges its status as the grant does.
    #[test]
    fn view_mirrors_the_stored_grant() {
        let (mut site, mut grant, _) = fixture();
        grant.client_name = Some("Agent".into());
        grant.last_rotation = Some(Rotation {
            at: Timestamp::from_secs(1_500),
            requested: ScopeSet::parse("skills:read skills:write").unwrap(),
        });
        grant.generation = 3;
        let policy = Policy::default();
        let check = |grant: &Grant, site: &Site, now: Timestamp| {
            let bytes = codec::encode(grant).unwrap();
            let v = codec::decode_view::<Grant>(&bytes).unwrap();
            assert_eq!(
                (v.id, v.site, v.epoch),
                (grant.id, grant.site.as_str(), grant.epoch)
            );
            assert_eq!(v.client_id, grant.client_id);
            assert_eq!(v.client_name, grant.client_name.as_deref());
            assert_eq!(
                (v.subject, v.resource),
                (grant.subject.as_str(), grant.resource.as_str())
            );
            assert_eq!(v.scopes.len, 1);
            assert_eq!(
                (v.created, v.last_refreshed),
                (grant.created, grant.last_refreshed)
            );
            assert_eq!(
                (v.generation, v.kid),
                (grant.generation, grant.kid.as_str())
            );
            assert_eq!(
                v.last_rotation.map(|r| r.at),
                grant.last_rotation.as_ref().map(|r| r.at)
            );
            assert_eq!(v.revoked, grant.revoked);
            assert_eq!(
                v.status(site.id.as_str(), site.epoch, now, &policy),
                grant.status(site, now, &policy)
            );
        };
        let now = Timestamp::from_secs(2_000);
        check(&grant, &site, now);
        check(&grant, &site, Timestamp::MAX);
        site.revoke_all_grants();
        check(&grant, &site, now);
        grant.revoke(RevocationReason::Revoked, now);
        check(&grant, &site, now);
    }

    #[test]
    fn refresh_tokens_round_trip_and_bind_every_part() {
        let (_, grant, key) = fixture();
        let token = grant.refresh_token(&key);
        let parts = RefreshTokenParts::parse(token.expose_secret()).unwrap();
        assert_eq!(
            (parts.grant, parts.generation, parts.kid),
            (grant.id, 1, "k1")
        );
        assert!(grant.tag_matches(&key, 1, &parts.tag));
        assert!(!grant.tag_matches(&key, 2, &parts.tag));
        let mut keyring = Keyring::new();
        keyring.insert("k1", key.clone()).unwrap();
        assert!(parts.authenticates(&keyring, &grant));
        let mut other = grant.clone();
        other.salt = [8; 16];
        assert!(!parts.authenticates(&keyring, &other), "another salt");
        assert!(!parts.authenticates(&Keyring::new(), &grant), "unknown kid");
        let mut ahead = parts;
        (ahead.generation, ahead.tag) = (2, grant.tag(&key, 2));
        assert!(
            !ahead.authenticates(&keyring, &grant),
            "a future generation"
        );
        let mut forged = parts;
        forged.tag[0] ^= 1;
        assert!(!forged.authenticates(&keyring, &grant), "a forged tag");
        assert!(!grant.tag_matches(&SigningKey::from_bytes(&[4; 32]).unwrap(), 1, &parts.tag));
        for bad in [
            "",
            "prt1",
            "prt2.AQEBAQEBAQEBAQEBAQEBAQ.1.x.k",
            "prt1.AQEBAQEBAQEBAQEBAQEBAQ.01.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA.k",
        ] {
            assert!(RefreshTokenParts::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn lifetimes_idle_and_absolute() {
        let (site, mut grant, _) = fixture();
        let p = Policy::default();
        let day = |d: u64| Timestamp::from_secs(1_000 + d * 86_400);
        assert_eq!(grant.status(&site, day(29), &p), GrantStatus::Live);
        assert_eq!(grant.status(&site, day(31), &p), GrantStatus::Expired);
        // Refreshing every 20 days keeps it alive, but never past day 90.
        for d in [20, 40, 60, 80] {
            grant.rotate(grant.scopes.clone(), "k1", day(d));
        }
        assert_eq!(grant.status(&site, day(89), &p), GrantStatus::Live);
        assert_eq!(grant.status(&site, day(91), &p), GrantStatus::Expired);
    }

    #[test]
    fn reuse_and_the_retry_window() {
        let (site, mut grant, _) = fixture();
        let scope = grant.scopes.clone();
        let t0 = Timestamp::from_secs(2_000);
        assert_eq!(
            grant.judge_refresh(1, &scope, t0, None),
            RefreshVerdict::Rotate
        );
        grant.rotate(scope.clone(), "k1", t0);
        assert_eq!(
            grant.judge_refresh(1, &scope, t0, None),
            RefreshVerdict::Reuse
        );
        let w = Some(Duration::from_secs(30));
        assert_eq!(
            grant.judge_refresh(1, &scope, t0.saturating_add(Duration::from_secs(29)), w),
            RefreshVerdict::RetrySameSuccessor
        );
        assert_eq!(
            grant.judge_refresh(1, &scope, t0.saturating_add(Duration::from_secs(30)), w),
            RefreshVerdict::Reuse
        );
        assert_eq!(
            grant.judge_refresh(1, &ScopeSet::new(), t0, w),
            RefreshVerdict::Reuse
        );
        grant.rotate(scope.clone(), "k1", t0);
        assert_eq!(
            grant.judge_refresh(1, &scope, t0, w),
            RefreshVerdict::Reuse,
            "only the immediately previous token"
        );
        grant.revoke(RevocationReason::RefreshReuse, t0);
        grant.revoke(RevocationReason::Revoked, t0);
        assert_eq!(
            grant.revoked.unwrap().reason,
            RevocationReason::RefreshReuse
        );
        assert_eq!(
            grant.status(&site, t0, &Policy::default()),
            GrantStatus::Revoked
        );
    }

    #[test]
    fn a_new_site_epoch_revokes() {
        let (mut site, grant, _) = fixture();
        site.rotate_key("k2".into());
        assert_eq!(
            grant.status(&site, Timestamp::from_secs(1_000), &Policy::default()),
            GrantStatus::Revoked
        );
    }

    /// The record's encoding and reading are postcard's over its derives.
    #[test]
    fn the_record_encoding_is_postcards() {
        let (_, mut grant, _) = fixture();
        codec::assert_postcard_agrees(&grant);
        grant.client_name = Some("Agënt \u{2603}".into());
        grant.last_rotation = Some(Rotation {
            at: Timestamp::MAX,
            requested: ScopeSet::parse("skills:read skills:write").unwrap(),
        });
        grant.generation = u32::MAX;
        grant.epoch = 128;
        for reason in [
            RevocationReason::Revoked,
            RevocationReason::RefreshReuse,
            RevocationReason::CodeReplay,
            RevocationReason::ClientRequest,
        ] {
            grant.revoked = Some(Revocation {
                at: Timestamp::from_secs(16_384),
                reason,
            });
            codec::assert_postcard_agrees(&grant);
        }
    }
}
