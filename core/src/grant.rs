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
//! * a valid tag for an **older** generation is a spent token. Spent less
//!   than [`Policy::refresh_reuse_grace`] ago (and at most
//!   [`TRACKED_ROTATIONS`] generations back), it is one of the client's
//!   own processes that shared the token and lost the race: it gets the
//!   grant's **current** refresh token again (derived, not stored: nothing
//!   rotates, no deadline moves) and a fresh access token, so every process
//!   ends up on one token. Spent longer ago, it is a replay no honest
//!   client makes: the whole grant is revoked (reuse detection);
//! * an **invalid** tag revokes nothing, so a forger cannot log anyone out.
//!
//! What the grace costs, and why it is there, is written out in
//! `docs/clients.md` ("One refresh token, several processes"): a thief
//! holding a token spent less than the grace ago is answered like the
//! client's own process, and reuse detection catches only a token spent
//! longer ago. `Policy::refresh_reuse_grace = Duration::ZERO` is strict
//! rotation: every spent token revokes.
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
//! [`Policy::refresh_reuse_grace`]: crate::Policy::refresh_reuse_grace

use alloc::string::String;
use core::fmt;
use core::time::Duration;

use serde::{Deserialize, Serialize};

use crate::client::ClientAuth;
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

/// How many generations back a spent refresh token can still be
/// recognised as the client's own (see the [module docs](self)): enough
/// for a process idle through several rotations of its siblings (one per
/// access-token lifetime), few enough to keep the record small.
pub const TRACKED_ROTATIONS: usize = 4;

/// When the grant's most recent rotations happened, newest first: entry
/// `i` is when generation `current - 1 - i` was spent. At most
/// [`TRACKED_ROTATIONS`].
///
/// Stored since schema version 2 of [`Grant`]; a version 1 grant kept only
/// its last rotation (with the scope asked for then, which no rule reads
/// any more), read here as a list of one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rotations {
    at: [Timestamp; TRACKED_ROTATIONS],
    len: u8,
}

impl Rotations {
    /// The rotation times, newest first.
    #[must_use]
    pub fn as_slice(&self) -> &[Timestamp] {
        &self.at[..usize::from(self.len)]
    }

    /// Records a rotation at `at`, forgetting the oldest beyond the bound.
    pub fn push(&mut self, at: Timestamp) {
        self.at.copy_within(..TRACKED_ROTATIONS - 1, 1);
        self.at[0] = at;
        self.len = (self.len + 1).min(TRACKED_ROTATIONS as u8);
    }

    /// When the generation `back` steps before the current one was spent
    /// (`back = 1`: the immediately previous token); `None` when that
    /// rotation is not tracked.
    #[must_use]
    pub fn spent_at(&self, back: u32) -> Option<Timestamp> {
        let index = usize::try_from(back.checked_sub(1)?).ok()?;
        self.as_slice().get(index).copied()
    }

    /// The most recent rotation, if any.
    #[must_use]
    pub fn latest(&self) -> Option<Timestamp> {
        self.as_slice().first().copied()
    }
}

/// Written as a list of times (postcard's sequence).
impl Serialize for Rotations {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.as_slice().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Rotations {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let list = heapless::Vec::<Timestamp, TRACKED_ROTATIONS>::deserialize(d)?;
        let mut rotations = Self::default();
        for at in list.iter().rev() {
            rotations.push(*at);
        }
        Ok(rotations)
    }
}

impl codec::Encode for Rotations {
    fn encode(&self, out: &mut alloc::vec::Vec<u8>) {
        codec::write_varint(out, u64::from(self.len));
        for at in self.as_slice() {
            at.encode(out);
        }
    }
}

/// Reads the rotation times of a grant of the reader's schema version.
/// Version 1 stored `Option<(at, requested scope)>`; version 2 a list of
/// times, newest first.
impl codec::Decode<'_> for Rotations {
    fn decode(r: &mut codec::Reader<'_>) -> Result<Self, codec::Malformed> {
        let mut rotations = Self::default();
        if r.version() < 2 {
            match r.byte()? {
                0 => {}
                1 => {
                    rotations.at[0] = codec::Decode::decode(r)?;
                    rotations.len = 1;
                    let _requested: SkippedStrings = codec::Decode::decode(r)?;
                }
                _ => return Err(codec::Malformed),
            }
        } else {
            let n = r.list_len()?;
            if n > TRACKED_ROTATIONS {
                return Err(codec::Malformed);
            }
            for slot in &mut rotations.at[..n] {
                *slot = codec::Decode::decode(r)?;
            }
            rotations.len = n as u8;
        }
        Ok(rotations)
    }
}

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
    /// When the most recent generations were spent.
    pub rotations: Rotations,
    /// Set once the grant is revoked; never cleared.
    pub revoked: Option<Revocation>,
    /// How the client must authenticate to refresh or revoke it (schema
    /// version 2; older grants read as [`ClientAuth::ById`]).
    pub client_auth: ClientAuth,
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

/// Version 2 keeps the times of the last [`TRACKED_ROTATIONS`] rotations
/// (for the reuse grace) and the client's [`ClientAuth`]; version 1 grants
/// are read in place, by the view too (the bearer check's path), with
/// their one rotation and [`ClientAuth::ById`].
impl Record for Grant {
    const TABLE: Table = Table::Grants;
    const VERSION: u8 = 2;
    const READ_SINCE: u8 = 1;
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
    /// When the most recent generations were spent.
    pub rotations: Rotations,
    /// Set once the grant is revoked.
    pub revoked: Option<Revocation>,
    /// How the client must authenticate to refresh or revoke it.
    pub client_auth: ClientAuth,
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
    rotations,
    revoked,
    client_auth @ 2,
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
    /// A token spent less than the grace ago, by one of the client's own
    /// processes: answer with the current refresh token (already issued;
    /// nothing rotates) and a fresh access token.
    Grace,
    /// A token spent longer ago (or further back than tracked): revoke the
    /// grant.
    Reuse,
}

impl Grant {
    /// A new live grant at generation 1, whose client authenticates as
    /// its id says ([`ClientAuth::ById`]; see [`Grant::client_auth`]).
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
            rotations: Rotations::default(),
            revoked: None,
            client_auth: ClientAuth::ById,
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

    /// Judges a correctly tagged token of `generation` at `now`, under the
    /// reuse `grace` ([`crate::Policy::refresh_reuse_grace`]; zero is strict
    /// rotation). A spent token counts as the client's own process only
    /// while its spending is tracked and less than `grace` ago.
    #[must_use]
    pub fn judge_refresh(
        &self,
        generation: u32,
        now: Timestamp,
        grace: Duration,
    ) -> RefreshVerdict {
        if generation == self.generation {
            return RefreshVerdict::Rotate;
        }
        let spent = self
            .generation
            .checked_sub(generation)
            .and_then(|back| self.rotations.spent_at(back));
        match spent {
            Some(at) if now < at.saturating_add(grace) => RefreshVerdict::Grace,
            _ => RefreshVerdict::Reuse,
        }
    }

    /// Moves to the next generation, tagged by `kid`. The idle lifetime
    /// restarts; the absolute deadline does not move.
    pub fn rotate(&mut self, kid: &str, now: Timestamp) {
        self.generation += 1;
        if self.kid != kid {
            self.kid.clear();
            self.kid.push_str(kid);
        }
        self.last_refreshed = now;
        self.rotations.push(now);
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
        grant.rotate("k1", Timestamp::from_secs(1_400));
        grant.rotate("k1", Timestamp::from_secs(1_500));
        grant.client_auth = ClientAuth::PrivateKeyJwt;
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
            assert_eq!(v.rotations.latest(), grant.rotations.latest());
            assert_eq!(v.revoked, grant.revoked);
            assert_eq!(v.client_auth, grant.client_auth);
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
            grant.rotate("k1", day(d));
        }
        assert_eq!(grant.status(&site, day(89), &p), GrantStatus::Live);
        assert_eq!(grant.status(&site, day(91), &p), GrantStatus::Expired);
    }

    const MINUTE: Duration = Duration::from_mins(1);

    #[test]
    fn strict_rotation_revokes_every_spent_token() {
        let (site, mut grant, _) = fixture();
        let t0 = Timestamp::from_secs(2_000);
        assert_eq!(
            grant.judge_refresh(1, t0, Duration::ZERO),
            RefreshVerdict::Rotate
        );
        grant.rotate("k1", t0);
        assert_eq!(
            grant.judge_refresh(1, t0, Duration::ZERO),
            RefreshVerdict::Reuse
        );
        assert_eq!(
            grant.judge_refresh(2, t0, Duration::ZERO),
            RefreshVerdict::Rotate
        );
        grant.revoke(RevocationReason::RefreshReuse, t0);
        grant.revoke(RevocationReason::Revoked, t0);
        assert_eq!(
            grant.revoked.unwrap().reason,
            RevocationReason::RefreshReuse,
            "the first revocation wins"
        );
        assert_eq!(
            grant.status(&site, t0, &Policy::default()),
            GrantStatus::Revoked
        );
    }

    /// The grace counts from when each token was spent, for the last
    /// [`TRACKED_ROTATIONS`] generations; never for a token of the future.
    #[test]
    fn a_spent_token_is_the_clients_own_within_the_grace_of_its_spending() {
        let (_, mut grant, _) = fixture();
        let grace = 10 * MINUTE;
        let t = |m: u64| Timestamp::from_secs(10_000 + m * 60);
        grant.rotate("k1", t(0)); // 1 spent at 0
        grant.rotate("k1", t(5)); // 2 spent at 5
        assert_eq!(grant.generation, 3);
        assert_eq!(grant.judge_refresh(3, t(7), grace), RefreshVerdict::Rotate);
        assert_eq!(grant.judge_refresh(2, t(7), grace), RefreshVerdict::Grace);
        // Generation 1, two behind, was spent at minute 0.
        assert_eq!(grant.judge_refresh(1, t(9), grace), RefreshVerdict::Grace);
        assert_eq!(grant.judge_refresh(1, t(10), grace), RefreshVerdict::Reuse);
        assert_eq!(grant.judge_refresh(2, t(14), grace), RefreshVerdict::Grace);
        assert_eq!(grant.judge_refresh(2, t(15), grace), RefreshVerdict::Reuse);
        assert_eq!(grant.judge_refresh(4, t(7), grace), RefreshVerdict::Reuse);
        // Beyond the tracked rotations, any age revokes.
        for m in 6..=9 {
            grant.rotate("k1", t(m));
        }
        assert_eq!(grant.generation, 7);
        assert_eq!(grant.judge_refresh(3, t(9), grace), RefreshVerdict::Grace);
        assert_eq!(grant.judge_refresh(2, t(9), grace), RefreshVerdict::Reuse);
        assert_eq!(grant.rotations.spent_at(4), Some(t(6)));
        assert_eq!(grant.rotations.spent_at(5), None);
        assert_eq!(grant.rotations.spent_at(0), None);
    }

    /// A version 1 grant (one rotation with its requested scope, no
    /// client auth) is read by the record and the view alike, and written
    /// back as version 2.
    #[test]
    fn version_1_grants_are_read_in_place() {
        let (site, grant, _) = fixture();
        let scope = ScopeSet::parse("skills:read").unwrap();
        for last in [None, Some(Timestamp::from_secs(1_500))] {
            let mut v1 = alloc::vec![1u8];
            let fields = (
                &grant.id,
                grant.site.as_str(),
                grant.epoch,
                grant.client_id.as_str(),
                &grant.client_name,
                grant.subject.as_str(),
                &grant.scopes,
                grant.resource.as_str(),
                grant.created,
                grant.last_refreshed,
                grant.generation,
                grant.salt,
                grant.kid.as_str(),
            );
            v1.extend(postcard::to_allocvec(&fields).unwrap());
            v1.extend(postcard::to_allocvec(&last.map(|at| (at, &scope))).unwrap());
            v1.extend(postcard::to_allocvec(&grant.revoked).unwrap());
            let read: Grant = codec::decode(&v1).unwrap();
            assert_eq!(read.rotations.latest(), last);
            assert_eq!(read.client_auth, ClientAuth::ById);
            assert_eq!((read.id, read.generation), (grant.id, grant.generation));
            let view = codec::decode_view::<Grant>(&v1).unwrap();
            assert_eq!(view.rotations.latest(), last);
            assert_eq!(
                view.status(
                    site.id.as_str(),
                    site.epoch,
                    Timestamp::from_secs(2_000),
                    &Policy::default()
                ),
                GrantStatus::Live
            );
            assert_eq!(codec::encode(&read).unwrap()[0], 2);
        }
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
        for at in [1, 2, 3, 4, 5] {
            grant.rotate("k2", Timestamp::from_secs(at));
            codec::assert_postcard_agrees(&grant);
        }
        grant.rotations.push(Timestamp::MAX);
        grant.client_auth = ClientAuth::PrivateKeyJwt;
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
