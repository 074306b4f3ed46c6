//! Sites: one protected application (a tenant) and its switches.
//!
//! A site owns its issuer (RFC 8414 §2), its protected resource URL (the MCP
//! endpoint, RFC 8707 §2 and RFC 9728 §2), its scopes, an off switch and a
//! key epoch. Transitions are pure methods; the engine stores the result.
//!
//! * **Off switch** ([`Site::set_enabled`]): while off, authorization, token
//!   and protected-resource requests answer 503 `temporarily_unavailable`
//!   with `Retry-After`; grants are untouched and work again when it is on.
//! * **Site key rotation** ([`Site::rotate_key`]): the public key in the
//!   resource URL changes and the epoch goes up by one; every grant carries
//!   the epoch it was issued under, so all older grants die in O(1).
//! * **Revoke all** ([`Site::revoke_all_grants`]): the epoch goes up without
//!   changing the URL.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde::{Deserialize, Serialize};
use url::Url;

use crate::error::{ErrorCode, WireError};
use crate::jwt::Algorithm;
use crate::scope::{KnownScope, ScopeSet};
use crate::store::codec::SkippedStrings;
use crate::store::{Record, Table, Viewed};
use crate::time::Timestamp;

/// Longest site id.
pub const MAX_SITE_ID_LEN: usize = 64;

/// A site identifier: 1–64 characters of `A-Z a-z 0-9 - _`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SiteId(String);

crate::store::codec::fields!(SiteId(newtype));

impl SiteId {
    /// Checks the grammar.
    pub fn parse(id: &str) -> Result<Self, SiteError> {
        let ok = (1..=MAX_SITE_ID_LEN).contains(&id.len())
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if ok {
            Ok(Self(id.into()))
        } else {
            Err(SiteError::InvalidId)
        }
    }

    /// The id.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SiteId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a host chooses when creating or updating a site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteConfig {
    /// The site id.
    pub id: SiteId,
    /// A display name for consent screens.
    pub name: String,
    /// The authorization server issuer: `https` (or `http` on loopback), no
    /// query or fragment (RFC 8414 §2). Endpoints are `{issuer}/authorize`,
    /// `/token`, `/register` and `/revoke`.
    pub issuer: String,
    /// The resource URL is this prefix followed by the site's public key,
    /// e.g. `https://app.example.com/mcp/`.
    pub resource_prefix: String,
    /// The scopes clients may ask for. Default `skills:read skills:write`.
    pub scopes: ScopeSet,
    /// Origins the app's pages (the connected tab, the reconnect page)
    /// live on.
    pub allowed_origins: Vec<String>,
    /// Where an agent sends its user when no connected tab is live: the
    /// `reconnectUrl` of a `no_live_tab` answer (the page that opens the
    /// app's connected tab). It must be on one of `allowed_origins`; `None`
    /// answers the first allowed origin's root.
    pub reconnect_url: Option<String>,
    /// Whether users may auto-approve an action kind for a tab session.
    pub auto_approval_allowed: bool,
    /// Seconds clients are told to wait while the site is off.
    pub retry_after_secs: u32,
    /// Whether clients may identify themselves by the HTTPS URL of a
    /// client-ID metadata document. Only a host that fetches those documents
    /// (see [`crate::client::FetchRequest`]) should turn this on; the
    /// discovery document advertises it.
    pub client_metadata_documents: bool,
    /// How the site's access tokens are signed. Default
    /// [`Algorithm::Hs256`]: only a holder of the secret checks them (the
    /// host itself, firmware). [`Algorithm::EdDsa`] or
    /// [`Algorithm::Es256`] lets any service holding the published key set
    /// check them; the keyring then needs an active key of that algorithm.
    pub access_token_alg: Algorithm,
}

impl SiteConfig {
    /// A configuration with the default scopes, no reconnect URL, auto-approval
    /// allowed and a 60 s `Retry-After`.
    #[must_use]
    pub fn new(id: SiteId, name: &str, issuer: &str, resource_prefix: &str) -> Self {
        Self {
            id,
            name: name.into(),
            issuer: issuer.into(),
            resource_prefix: resource_prefix.into(),
            scopes: default_scopes(),
            allowed_origins: Vec::new(),
            reconnect_url: None,
            auto_approval_allowed: true,
            retry_after_secs: 60,
            client_metadata_documents: true,
            access_token_alg: Algorithm::Hs256,
        }
    }

    fn validate(&self) -> Result<(), SiteError> {
        if !is_server_url(&self.issuer) {
            return Err(SiteError::InvalidIssuer);
        }
        let prefix = Url::parse(&self.resource_prefix).map_err(|_| SiteError::InvalidResource)?;
        if !is_secure_or_loopback(&prefix)
            || prefix.query().is_some()
            || prefix.fragment().is_some()
        {
            return Err(SiteError::InvalidResource);
        }
        if self.scopes.is_empty() {
            return Err(SiteError::NoScopes);
        }
        if !self.access_token_alg.supported() {
            return Err(SiteError::UnsupportedAlgorithm);
        }
        if let Some(reconnect) = &self.reconnect_url {
            let url = Url::parse(reconnect).map_err(|_| SiteError::ReconnectUrlNotAllowed)?;
            let origin = url.origin().ascii_serialization();
            if !self
                .allowed_origins
                .iter()
                .any(|o| o.trim_end_matches('/') == origin)
            {
                return Err(SiteError::ReconnectUrlNotAllowed);
            }
        }
        Ok(())
    }
}

/// `skills:read skills:write`.
#[must_use]
pub fn default_scopes() -> ScopeSet {
    ScopeSet::known([KnownScope::SKILLS_READ, KnownScope::SKILLS_WRITE])
}

/// Whether `url` names a server as an issuer or a resource must (RFC 8414
/// §2, RFC 8707 §2): absolute, `https` (or `http` to loopback), no
/// userinfo, query or fragment, no trailing slash.
pub(crate) fn is_server_url(url: &str) -> bool {
    Url::parse(url).is_ok_and(|parsed| {
        is_secure_or_loopback(&parsed)
            && parsed.query().is_none()
            && parsed.fragment().is_none()
            && parsed.username().is_empty()
            && parsed.password().is_none()
            && !url.ends_with('/')
    })
}

fn is_secure_or_loopback(url: &Url) -> bool {
    match url.scheme() {
        "https" => url.host().is_some(),
        "http" => matches!(url.host_str(), Some("localhost" | "127.0.0.1" | "[::1]")),
        _ => false,
    }
}

/// A stored site.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Site {
    /// The id.
    pub id: SiteId,
    /// The display name.
    pub name: String,
    /// The issuer URL.
    pub issuer: String,
    /// The prefix of the resource URL.
    pub resource_prefix: String,
    /// The public key in the resource URL; changes on key rotation.
    pub public_key: String,
    /// Offered scopes.
    pub scopes: ScopeSet,
    /// Origins the app's pages (the connected tab, the reconnect page) live on.
    pub allowed_origins: Vec<String>,
    /// The `reconnectUrl` of `no_live_tab` answers (see
    /// [`SiteConfig::reconnect_url`]).
    pub reconnect_url: Option<String>,
    /// Whether auto-approval may be offered.
    pub auto_approval_allowed: bool,
    /// `Retry-After` seconds while off.
    pub retry_after_secs: u32,
    /// Whether client-ID metadata documents are accepted.
    pub client_metadata_documents: bool,
    /// The off switch.
    pub enabled: bool,
    /// Grants from another epoch are revoked.
    pub epoch: u32,
    /// Bumped whenever approval-relevant policy changes (scopes,
    /// auto-approval), voiding pending approvals given under the old policy.
    pub policy_version: u32,
    /// When the site was created.
    pub created: Timestamp,
    /// How its access tokens are signed (schema version 2; older sites
    /// read as [`Algorithm::Hs256`]).
    pub access_token_alg: Algorithm,
}

/// Version 2 appends [`Site::access_token_alg`]; version 1 sites are read
/// in place, as HS256 sites.
impl Record for Site {
    const TABLE: Table = Table::Sites;
    const VERSION: u8 = 2;
    const READ_SINCE: u8 = 1;
}

impl Viewed for Site {
    type View<'a> = SiteView<'a>;
}

/// A stored [`Site`] read in place: the fields a bearer check needs,
/// borrowed from the stored bytes, the lists skipped without allocating.
/// Its fields mirror [`Site`]'s in order (postcard is positional; a test
/// holds the two together).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteView<'a> {
    /// The id.
    pub id: &'a str,
    /// The display name.
    pub name: &'a str,
    /// The issuer URL.
    pub issuer: &'a str,
    /// The prefix of the resource URL.
    pub resource_prefix: &'a str,
    /// The public key in the resource URL.
    pub public_key: &'a str,
    /// Offered scopes (skipped).
    pub scopes: SkippedStrings,
    /// Allowed origins (skipped).
    pub allowed_origins: SkippedStrings,
    /// The `reconnectUrl` of `no_live_tab` answers.
    pub reconnect_url: Option<&'a str>,
    /// Whether auto-approval may be offered.
    pub auto_approval_allowed: bool,
    /// `Retry-After` seconds while off.
    pub retry_after_secs: u32,
    /// Whether client-ID metadata documents are accepted.
    pub client_metadata_documents: bool,
    /// The off switch.
    pub enabled: bool,
    /// Grants from another epoch are revoked.
    pub epoch: u32,
    /// The approval policy version.
    pub policy_version: u32,
    /// When the site was created.
    pub created: Timestamp,
    /// How its access tokens are signed.
    pub access_token_alg: Algorithm,
}

crate::store::codec::fields!(Site, view SiteView {
    id,
    name,
    issuer,
    resource_prefix,
    public_key,
    scopes,
    allowed_origins,
    reconnect_url,
    auto_approval_allowed,
    retry_after_secs,
    client_metadata_documents,
    enabled,
    epoch,
    policy_version,
    created,
    access_token_alg @ 2,
});

impl SiteView<'_> {
    /// [`Site::ensure_enabled`] on the view.
    pub fn ensure_enabled(&self) -> Result<(), SiteError> {
        if self.enabled {
            Ok(())
        } else {
            Err(SiteError::Disabled {
                retry_after_secs: self.retry_after_secs,
            })
        }
    }

    /// Whether `aud` is this site's resource URL (the prefix followed by
    /// the public key), compared without building the URL.
    #[must_use]
    pub fn is_resource(&self, aud: &str) -> bool {
        aud.len() == self.resource_prefix.len() + self.public_key.len()
            && aud.starts_with(self.resource_prefix)
            && aud.ends_with(self.public_key)
    }
}

impl Site {
    /// A new, enabled site at epoch 0 with public key `public_key`.
    pub fn create(
        config: SiteConfig,
        public_key: String,
        now: Timestamp,
    ) -> Result<Self, SiteError> {
        config.validate()?;
        Ok(Self {
            id: config.id,
            name: config.name,
            issuer: config.issuer,
            resource_prefix: config.resource_prefix,
            public_key,
            scopes: config.scopes,
            allowed_origins: config.allowed_origins,
            reconnect_url: config.reconnect_url,
            auto_approval_allowed: config.auto_approval_allowed,
            retry_after_secs: config.retry_after_secs,
            client_metadata_documents: config.client_metadata_documents,
            enabled: true,
            epoch: 0,
            policy_version: 0,
            created: now,
            access_token_alg: config.access_token_alg,
        })
    }

    /// Applies a new configuration. The id, key, epoch and switch stay; a
    /// change of scopes or auto-approval bumps the policy version.
    pub fn update(&mut self, config: SiteConfig) -> Result<(), SiteError> {
        config.validate()?;
        if config.id != self.id {
            return Err(SiteError::InvalidId);
        }
        if config.scopes != self.scopes
            || config.auto_approval_allowed != self.auto_approval_allowed
        {
            self.policy_version += 1;
        }
        self.name = config.name;
        self.issuer = config.issuer;
        self.resource_prefix = config.resource_prefix;
        self.scopes = config.scopes;
        self.allowed_origins = config.allowed_origins;
        self.reconnect_url = config.reconnect_url;
        self.auto_approval_allowed = config.auto_approval_allowed;
        self.retry_after_secs = config.retry_after_secs;
        self.client_metadata_documents = config.client_metadata_documents;
        self.access_token_alg = config.access_token_alg;
        Ok(())
    }

    /// The protected resource URL (the MCP endpoint).
    #[must_use]
    pub fn resource(&self) -> String {
        let mut r = self.resource_prefix.clone();
        r.push_str(&self.public_key);
        r
    }

    /// An endpoint URL under the issuer, e.g. `endpoint("/token")`.
    #[must_use]
    pub fn endpoint(&self, path: &str) -> String {
        let mut e = self.issuer.clone();
        e.push_str(path);
        e
    }

    /// Turns the off switch. Grants are untouched either way.
    pub fn set_enabled(&mut self, enabled: bool) {
        self.enabled = enabled;
    }

    /// Fails with [`SiteError::Disabled`] while the site is off.
    pub fn ensure_enabled(&self) -> Result<(), SiteError> {
        if self.enabled {
            Ok(())
        } else {
            Err(SiteError::Disabled {
                retry_after_secs: self.retry_after_secs,
            })
        }
    }

    /// The emergency path: a new public key (so a new resource URL) and a new
    /// epoch, which revokes every grant issued before.
    pub fn rotate_key(&mut self, public_key: String) {
        self.public_key = public_key;
        self.epoch += 1;
        self.policy_version += 1;
    }

    /// Revokes every grant of the site in O(1), keeping the resource URL.
    pub fn revoke_all_grants(&mut self) {
        self.epoch += 1;
        self.policy_version += 1;
    }

    /// Whether `presented` names this site's resource (RFC 8707 §2): scheme
    /// and host compare case-insensitively (the WHATWG parser lower-cases
    /// them), default ports are normalised, one trailing `/` on the path is
    /// no difference, and a fragment never matches.
    #[must_use]
    pub fn resource_matches(&self, presented: &str) -> bool {
        resource_matches(&self.resource(), presented)
    }
}

/// See [`Site::resource_matches`].
#[must_use]
pub fn resource_matches(expected: &str, presented: &str) -> bool {
    if presented.contains('#') {
        return false;
    }
    let (Ok(a), Ok(b)) = (Url::parse(expected), Url::parse(presented)) else {
        return false;
    };
    a.scheme() == b.scheme()
        && a.host() == b.host()
        && a.port_or_known_default() == b.port_or_known_default()
        && b.username().is_empty()
        && b.password().is_none()
        && a.query() == b.query()
        && without_trailing_slash(a.path()) == without_trailing_slash(b.path())
}

/// `path` without one trailing `/` (only one: `/mcp//` stays different).
fn without_trailing_slash(path: &str) -> &str {
    path.strip_suffix('/').unwrap_or(path)
}

/// Why a site operation was refused.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SiteError {
    /// The site id breaks the grammar.
    InvalidId,
    /// No site with this id.
    NotFound,
    /// A site with this id exists already.
    AlreadyExists,
    /// The issuer is not an https (or loopback http) URL without query,
    /// fragment or trailing slash.
    InvalidIssuer,
    /// The resource prefix is not an https (or loopback http) URL without
    /// query or fragment.
    InvalidResource,
    /// The site offers no scope.
    NoScopes,
    /// The reconnect URL is not on an allowed origin.
    ReconnectUrlNotAllowed,
    /// The access-token algorithm is not in this build (EdDSA needs the
    /// `eddsa` feature, ES256 `es256`).
    UnsupportedAlgorithm,
    /// The site is switched off.
    Disabled {
        /// Seconds to send in `Retry-After`.
        retry_after_secs: u32,
    },
}

impl fmt::Display for SiteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidId => f.write_str("site id must be 1-64 characters of A-Z a-z 0-9 - _"),
            Self::NotFound => f.write_str("no such site"),
            Self::AlreadyExists => f.write_str("a site with this id exists"),
            Self::InvalidIssuer => {
                f.write_str("issuer must be an https URL without query, fragment or trailing slash")
            }
            Self::InvalidResource => {
                f.write_str("resource prefix must be an https URL without query or fragment")
            }
            Self::NoScopes => f.write_str("a site must offer at least one scope"),
            Self::ReconnectUrlNotAllowed => {
                f.write_str("reconnect URL is not on an allowed origin")
            }
            Self::UnsupportedAlgorithm => {
                f.write_str("the access-token algorithm is not in this build")
            }
            Self::Disabled { retry_after_secs } => {
                write!(
                    f,
                    "external agents are switched off for this site; retry after {retry_after_secs} s"
                )
            }
        }
    }
}

impl WireError for SiteError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::Disabled { .. } => ErrorCode::TemporarilyUnavailable,
            _ => ErrorCode::InvalidRequest,
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for SiteError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn site() -> Site {
        let id = SiteId::parse("demo").unwrap();
        Site::create(
            SiteConfig::new(
                id,
                "Demo",
                "https://app.example.com",
                "https://app.example.com/mcp/",
            ),
            "k0".into(),
            Timestamp::EPOCH,
        )
        .unwrap()
    }

    /// The view reads every field of a stored site in its place: a field
    /// added to `Site` without its mirror in `SiteView` fails here.
    #[test]
    fn view_mirrors_the_stored_site() {
        let mut s = site();
        s.allowed_origins =
            alloc::vec!["https://app.example.com".into(), "https://b.example".into()];
        s.reconnect_url = Some("https://app.example.com/reconnect".into());
        s.retry_after_secs = 77;
        s.set_enabled(false);
        s.rotate_key("k1".into());
        s.policy_version = 5;
        let bytes = crate::store::codec::encode(&s).unwrap();
        let v = crate::store::codec::decode_view::<Site>(&bytes).unwrap();
        assert_eq!(v.id, s.id.as_str());
        assert_eq!((v.name, v.issuer), (s.name.as_str(), s.issuer.as_str()));
        assert_eq!(v.resource_prefix, s.resource_prefix);
        assert_eq!(v.public_key, "k1");
        assert_eq!(v.scopes.len, 2);
        assert_eq!(v.allowed_origins.len, 2);
        assert_eq!(v.reconnect_url, s.reconnect_url.as_deref());
        assert_eq!(v.ensure_enabled(), s.ensure_enabled());
        assert_eq!(
            (v.epoch, v.policy_version, v.created),
            (s.epoch, 5, s.created)
        );
        assert_eq!(v.auto_approval_allowed, s.auto_approval_allowed);
        assert_eq!(v.client_metadata_documents, s.client_metadata_documents);
        assert!(v.is_resource(&s.resource()));
        assert!(!v.is_resource("https://app.example.com/mcp/k0"));
        assert!(!v.is_resource("https://app.example.com/mcp/k1/"));
        // A view reads the current version only.
        let mut old = bytes.clone();
        old[0] = 0;
        assert!(crate::store::codec::decode_view::<Site>(&old).is_err());
    }

    #[test]
    fn resource_comparison_tolerates_case_and_trailing_slash_only() {
        let s = site();
        assert_eq!(s.resource(), "https://app.example.com/mcp/k0");
        assert!(s.resource_matches("https://app.example.com/mcp/k0"));
        assert!(s.resource_matches("HTTPS://APP.example.COM/mcp/k0/"));
        assert!(s.resource_matches("https://app.example.com:443/mcp/k0"));
        assert!(!s.resource_matches("https://app.example.com/mcp/K0"));
        assert!(!s.resource_matches("https://app.example.com/mcp/k0#x"));
        assert!(!s.resource_matches("https://app.example.com/mcp/k0#"));
        assert!(!s.resource_matches("https://app.example.com:8443/mcp/k0"));
        assert!(!s.resource_matches("https://u@app.example.com/mcp/k0"));
        assert!(!s.resource_matches("https://app.example.com/mcp/k0?x"));
        assert!(!s.resource_matches("https://app.example.com/mcp/k0//"));
    }

    #[test]
    fn rotation_and_revoke_all_bump_the_epoch() {
        let mut s = site();
        s.rotate_key("k1".into());
        assert_eq!(
            (s.epoch, s.resource().as_str()),
            (1, "https://app.example.com/mcp/k1")
        );
        s.revoke_all_grants();
        assert_eq!(s.epoch, 2);
        assert_eq!(s.resource(), "https://app.example.com/mcp/k1");
    }

    #[test]
    fn the_off_switch_answers_503_with_retry_after() {
        let mut s = site();
        s.set_enabled(false);
        let err = s.ensure_enabled().unwrap_err();
        assert_eq!(err.http_status(), 503);
        assert_eq!(err.code().as_str(), "temporarily_unavailable");
        s.set_enabled(true);
        assert!(s.ensure_enabled().is_ok());
    }

    #[test]
    fn configuration_is_validated() {
        let id = SiteId::parse("demo").unwrap();
        for issuer in [
            "http://app.example.com",
            "https://app.example.com/",
            "https://a.example?x",
            "ftp://a",
        ] {
            let c = SiteConfig::new(id.clone(), "D", issuer, "https://a.example/mcp/");
            assert_eq!(
                Site::create(c, "k".into(), Timestamp::EPOCH),
                Err(SiteError::InvalidIssuer),
                "{issuer}"
            );
        }
        assert!(
            Site::create(
                SiteConfig::new(
                    id.clone(),
                    "D",
                    "http://127.0.0.1:8787",
                    "http://127.0.0.1:8787/mcp/"
                ),
                "k".into(),
                Timestamp::EPOCH
            )
            .is_ok()
        );
        let mut c = SiteConfig::new(id, "D", "https://a.example", "https://a.example/mcp/");
        c.reconnect_url = Some("https://evil.example/reconnect".into());
        c.allowed_origins = alloc::vec!["https://a.example".into()];
        assert_eq!(
            Site::create(c, "k".into(), Timestamp::EPOCH),
            Err(SiteError::ReconnectUrlNotAllowed)
        );
        assert_eq!(SiteId::parse("a b"), Err(SiteError::InvalidId));
    }

    /// The record's encoding and reading are postcard's over its derives.
    #[test]
    fn the_record_encoding_is_postcards() {
        let mut s = site();
        crate::store::codec::assert_postcard_agrees(&s);
        s.allowed_origins = alloc::vec!["https://a.example".into(), String::new()];
        s.reconnect_url = Some("https://a.example/reconnect".into());
        s.enabled = false;
        s.auto_approval_allowed = false;
        s.retry_after_secs = 300;
        s.epoch = u32::MAX;
        s.policy_version = 127;
        s.scopes = ScopeSet::new();
        crate::store::codec::assert_postcard_agrees(&s);
    }
}
