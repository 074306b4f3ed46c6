//! Token introspection (RFC 7662): the endpoint's wire side and the
//! credentials resource servers call it with. The operation itself is
//! [`Engine::introspect`](crate::engine::Engine::introspect).
//!
//! A resource server that would rather ask than verify JWTs itself posts a
//! token to the introspection endpoint and is told whether it is active and,
//! if it is, what it grants. Unlike a local signature check, the answer is
//! read from the grant's current state, so a revocation is seen at once.
//!
//! **Who may ask.** RFC 7662 §2.1 has the authorization server authenticate
//! every caller, so that the endpoint cannot be used to probe tokens. A
//! resource server authenticates with a [`ResourceServerCredential`]: an id
//! (the resource server's name) and a secret derived, like the secret of a
//! stateless client ([`crate::client`]), from the keyring, so nothing is
//! stored:
//!
//! * the secret is `<kid>.<tag>`, where `kid` names the HS256 key that was
//!   active when the credential was minted and `tag` is unpadded base64url
//!   of `mac_labeled("portcullis/introspection/v1", [site id, name])` under
//!   that key;
//! * it is presented with HTTP Basic (`client_secret_basic`, RFC 6749
//!   §2.3.1: id and secret form-encoded, then base64) and checked in
//!   constant time.
//!
//! Consequences the host should know:
//!
//! * a credential keeps working after the HS256 key rotates (the `kid` it
//!   carries still verifies), and **retiring the key that minted it revokes
//!   it**, with every other credential that key minted; mint new ones under
//!   the new key before retiring the old;
//! * a credential belongs to one site: another site's credential, and any
//!   client's secret, are refused;
//! * a name cannot be revoked alone (nothing is stored): pick names you can
//!   live without, or retire the key.
//!
//! **What it answers** (RFC 7662 §2.2). An access token of the site that
//! passes every check of the bearer path ([`Engine::verify_bearer`]:
//! signature by a key not retired, `typ`, issuer, audience, expiry with the
//! policy's leeway, a live grant, the site on) is described:
//! `{"active":true,"scope","client_id","sub","exp","iat","iss","aud","jti","token_type":"Bearer"}`.
//! Everything else — unknown, malformed, forged, expired, revoked, another
//! site's or another audience's, a refresh token, a minted agent token —
//! is the very same `{"active":false}`, so the answer never tells whether a
//! token ever existed (§2.2: no further information for an inactive token).
//! Both carry `Cache-Control: no-store` (§4: a cached answer would outlive
//! a revocation). While the site is switched off the endpoint answers 503
//! with `Retry-After`, as the token endpoint does.
//!
//! [`Engine::verify_bearer`]: crate::engine::Engine::verify_bearer

use alloc::string::String;
use core::fmt;

use serde::Serialize;
use subtle::ConstantTimeEq;

use crate::error::{ErrorCode, WireError};
use crate::form::FormError;
use crate::grant::GrantId;
use crate::header::{HeaderError, HeaderField};
use crate::http::HttpResponse;
use crate::jwt::{Keyring, SigningKey, b64};
use crate::scope::ScopeSet;
use crate::secret::SecretString;
use crate::site::SiteId;
use crate::store::StoreError;
use crate::time::Timestamp;

/// Longest introspection request body accepted (the token endpoint's
/// bound: a token is at most [`MAX_TOKEN_LEN`](crate::jwt::MAX_TOKEN_LEN)).
pub const MAX_BODY_LEN: usize = crate::token::MAX_BODY_LEN;
/// Longest resource-server name.
pub const MAX_NAME_LEN: usize = 64;

/// The MAC label of introspection secrets: a tag made for this purpose
/// never validates as any other of the keyring's MACs.
const LABEL: &str = "portcullis/introspection/v1";
/// Unpadded base64url of a 32-byte tag.
const TAG_LEN: usize = 43;
/// The `realm` of the Basic challenge.
const CHALLENGE: &str = "Basic realm=\"introspection\"";

/// A resource server's introspection credential: its name (the Basic user
/// id) and derived secret. `Debug` shows the name and key id, never the
/// secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ResourceServerCredential {
    name: String,
    kid: String,
    secret: SecretString,
}

impl ResourceServerCredential {
    /// Mints the credential of resource server `name` (1–64 characters of
    /// `A-Z a-z 0-9 - _ .`) for `site`, under the keyring's active HS256
    /// key. Deterministic: the same key, site and name give the same
    /// credential, so minting again repeats it rather than adding one.
    pub fn mint(keyring: &Keyring, site: &SiteId, name: &str) -> Result<Self, CredentialError> {
        if !valid_name(name) {
            return Err(CredentialError::InvalidName);
        }
        let (kid, key) = keyring.active_key().ok_or(CredentialError::NoActiveKey)?;
        let mut secret = String::with_capacity(kid.len() + 1 + TAG_LEN);
        secret.push_str(kid);
        secret.push('.');
        b64::encode_string(&tag(key, site, name), &mut secret);
        Ok(Self {
            name: name.into(),
            kid: kid.into(),
            secret: SecretString::new(secret),
        })
    }

    /// The resource server's name: its client id at the endpoint.
    #[must_use]
    pub fn id(&self) -> &str {
        &self.name
    }

    /// The `kid` of the HS256 key that minted it: retiring that key
    /// revokes the credential.
    #[must_use]
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The secret. Hand it to the resource server once; never log it.
    #[must_use]
    pub fn secret(&self) -> &SecretString {
        &self.secret
    }

    /// The `Authorization` value that presents this credential:
    /// `Basic base64(id ":" secret)` (RFC 6749 §2.3.1; neither part needs
    /// form-encoding). A secret, like the credential.
    #[must_use]
    pub fn basic_authorization(&self) -> SecretString {
        let mut pair =
            String::with_capacity(self.name.len() + 1 + self.secret.expose_secret().len());
        pair.push_str(&self.name);
        pair.push(':');
        pair.push_str(self.secret.expose_secret());
        let mut header = String::from("Basic ");
        // Standard base64 with padding (RFC 7617 §2), from the base64url
        // encoder: the two alphabets differ in two characters.
        let encoded = b64::encode(pair.as_bytes());
        header.extend(encoded.chars().map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        }));
        while !(header.len() - "Basic ".len()).is_multiple_of(4) {
            header.push('=');
        }
        SecretString::new(header)
    }
}

impl fmt::Debug for ResourceServerCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResourceServerCredential")
            .field("name", &self.name)
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

/// Whether `name` is a resource-server name: 1–[`MAX_NAME_LEN`]
/// characters of `A-Z a-z 0-9 - _ .`.
fn valid_name(name: &str) -> bool {
    (1..=MAX_NAME_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The tag of `name` on `site` under `key`.
fn tag(key: &SigningKey, site: &SiteId, name: &str) -> [u8; 32] {
    key.mac_labeled(LABEL, &[site.as_str().as_bytes(), name.as_bytes()])
}

/// Why a credential could not be minted.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CredentialError {
    /// The name is empty, longer than [`MAX_NAME_LEN`], or has a character
    /// outside `A-Z a-z 0-9 - _ .`.
    InvalidName,
    /// The keyring has no active HS256 key to derive the secret with.
    NoActiveKey,
}

impl fmt::Display for CredentialError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::InvalidName => {
                "a resource-server name is 1 to 64 characters of A-Z a-z 0-9 - _ ."
            }
            Self::NoActiveKey => "the keyring has no active HS256 key",
        })
    }
}

#[cfg(feature = "std")]
impl std::error::Error for CredentialError {}

/// A resource server that authenticated at the introspection endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceServer {
    /// Its name.
    pub name: String,
    /// The key its credential was minted under.
    pub kid: String,
}

/// Authenticates the caller of `site`'s introspection endpoint from every
/// `Authorization` value the request carried (RFC 7662 §2.1): exactly one
/// field, `Basic` (RFC 7617 §2, the scheme case-insensitive), whose id is
/// a resource-server name and whose secret is that name's credential for
/// `site` under a key of `keyring` that still verifies, compared in
/// constant time. A repeated or non-text field is
/// [`IntrospectError::Header`]; every other failure is
/// [`IntrospectError::InvalidClient`], whichever check failed.
pub fn authenticate(
    keyring: &Keyring,
    site: &SiteId,
    authorization: HeaderField<'_>,
) -> Result<ResourceServer, IntrospectError> {
    let header = authorization
        .value()
        .map_err(IntrospectError::authorization)?;
    let basic = header.is_some_and(crate::token::is_basic_scheme);
    let refused = IntrospectError::InvalidClient { basic };
    let (name, secret) = header
        .and_then(crate::token::parse_basic)
        .ok_or(refused.clone())?;
    check_secret(keyring, site, &name, &secret)
        .map(|kid| ResourceServer {
            name,
            kid: kid.into(),
        })
        .ok_or(refused)
}

/// The `kid` of `secret` when it is `name`'s credential for `site` under a
/// key of `keyring` that still verifies. The tag is compared in constant
/// time, as text: the expected tag is encoded rather than the presented
/// one decoded, so no secret-dependent branch precedes the comparison.
fn check_secret<'s>(
    keyring: &Keyring,
    site: &SiteId,
    name: &str,
    secret: &'s str,
) -> Option<&'s str> {
    if !valid_name(name) {
        return None;
    }
    let (kid, presented) = secret.rsplit_once('.')?;
    if presented.len() != TAG_LEN {
        return None;
    }
    let key = keyring.verifying_key(kid).ok()?;
    let mut expected = [0u8; TAG_LEN];
    b64::encode_into(&tag(key, site, name), &mut expected);
    bool::from(expected.ct_eq(presented.as_bytes())).then_some(kid)
}

/// What the endpoint answers an authenticated caller (RFC 7662 §2.2).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Introspection {
    /// An access token of the site, valid now, of a live grant.
    Active(ActiveToken),
    /// Anything else: `{"active":false}` and nothing more.
    Inactive,
}

/// An active access token, as introspection describes it. Its subject and
/// client come from the grant (as [`Principal`](crate::engine::Principal)'s
/// do), its scope, times and id from the verified token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActiveToken {
    /// The token's scopes (`scope`).
    pub scope: ScopeSet,
    /// The client it was issued to (`client_id`).
    pub client_id: String,
    /// The user (`sub`).
    pub subject: String,
    /// When it expires (`exp`).
    pub expires: Timestamp,
    /// When it was issued (`iat`), if it says.
    pub issued_at: Option<Timestamp>,
    /// The site's issuer (`iss`).
    pub issuer: String,
    /// The site's resource URL (`aud`).
    pub audience: String,
    /// The token id (`jti`), if it has one.
    pub token_id: Option<String>,
    /// The grant it belongs to (not part of the answer's JSON).
    pub grant: GrantId,
}

/// The body of an inactive answer, byte for byte.
pub const INACTIVE_JSON: &str = r#"{"active":false}"#;

impl Introspection {
    /// Whether the token is active.
    #[must_use]
    pub fn is_active(&self) -> bool {
        matches!(self, Self::Active(_))
    }

    /// The JSON body (RFC 7662 §2.2): the active token's members in a
    /// fixed order, or exactly [`INACTIVE_JSON`].
    #[must_use]
    pub fn to_json(&self) -> String {
        #[derive(Serialize)]
        struct Body<'a> {
            active: bool,
            scope: &'a str,
            client_id: &'a str,
            sub: &'a str,
            exp: u64,
            #[serde(skip_serializing_if = "Option::is_none")]
            iat: Option<u64>,
            iss: &'a str,
            aud: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            jti: Option<&'a str>,
            token_type: &'static str,
        }
        match self {
            Self::Inactive => INACTIVE_JSON.into(),
            Self::Active(t) => serde_json::to_string(&Body {
                active: true,
                scope: t.scope.as_param(),
                client_id: &t.client_id,
                sub: &t.subject,
                exp: t.expires.as_secs(),
                iat: t.issued_at.map(Timestamp::as_secs),
                iss: &t.issuer,
                aud: &t.audience,
                jti: t.token_id.as_deref(),
                token_type: "Bearer",
            })
            // Strings and integers always serialize.
            .unwrap_or_else(|_| INACTIVE_JSON.into()),
        }
    }

    /// The complete answer: 200, the JSON body, `Cache-Control: no-store`
    /// (RFC 7662 §4: a cached "active" would outlive a revocation).
    #[must_use]
    pub fn to_response(&self) -> HttpResponse {
        HttpResponse::json_body(200, self.to_json()).no_store()
    }
}

/// Why an introspection request was not answered (RFC 7662 §2.3). An
/// inactive token is no error: it is [`Introspection::Inactive`].
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IntrospectError {
    /// The caller did not authenticate as a resource server of the site
    /// (RFC 7662 §2.1; RFC 6749 §5.2 `invalid_client`, 401).
    InvalidClient {
        /// The caller tried the Basic scheme, so the answer challenges it
        /// (`WWW-Authenticate: Basic`, RFC 6749 §5.2).
        basic: bool,
    },
    /// A header field the endpoint reads came more than once (an ambiguous
    /// request, RFC 9110 §5.3) or is not text: `invalid_request`.
    Header {
        /// The field's name.
        field: &'static str,
        /// What is wrong with it.
        error: HeaderError,
    },
    /// The body is too long, repeats a parameter or is malformed
    /// (`invalid_request`).
    Malformed(FormError),
    /// The body has no `token` (RFC 7662 §2.1: required).
    MissingToken,
    /// The site is switched off: 503 with `Retry-After`.
    Unavailable {
        /// Seconds for `Retry-After`.
        retry_after_secs: u32,
    },
    /// The site does not exist (a host misconfiguration).
    UnknownSite,
    /// The store failed. Never an answer about the token.
    Store(StoreError),
}

impl IntrospectError {
    /// The `Authorization` field is repeated or not text.
    #[must_use]
    pub fn authorization(error: HeaderError) -> Self {
        Self::Header {
            field: "Authorization",
            error,
        }
    }

    /// The complete answer: the RFC 6749 §5.2 body with `no-store`,
    /// `Retry-After` while the site is off, and a `Basic` challenge when
    /// Basic authentication failed.
    #[must_use]
    pub fn to_response(&self) -> HttpResponse {
        let retry = match self {
            Self::Unavailable { retry_after_secs } => Some(*retry_after_secs),
            _ => None,
        };
        let r = HttpResponse::error(self, retry);
        if matches!(self, Self::InvalidClient { basic: true }) {
            r.with_header("www-authenticate", CHALLENGE.into())
        } else {
            r
        }
    }
}

impl From<StoreError> for IntrospectError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl fmt::Display for IntrospectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidClient { .. } => f.write_str("resource server authentication failed"),
            Self::Header { field, error } => write!(f, "the {field} header {error}"),
            Self::Malformed(e) => write!(f, "{e}"),
            Self::MissingToken => f.write_str("token is required"),
            Self::Unavailable { .. } => {
                f.write_str("external agents are switched off for this site; retry later")
            }
            Self::UnknownSite => f.write_str("no such site"),
            Self::Store(_) => f.write_str("temporary server error"),
        }
    }
}

impl WireError for IntrospectError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::InvalidClient { .. } => ErrorCode::InvalidClient,
            Self::Header { .. } | Self::Malformed(_) | Self::MissingToken | Self::UnknownSite => {
                ErrorCode::InvalidRequest
            }
            Self::Unavailable { .. } => ErrorCode::TemporarilyUnavailable,
            Self::Store(_) => ErrorCode::ServerError,
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for IntrospectError {}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;

    fn keyring() -> Keyring {
        let mut k = Keyring::new();
        k.insert("k.1", SigningKey::from_bytes(&[1; 32]).unwrap())
            .unwrap();
        k.set_active("k.1").unwrap();
        k
    }

    fn site(id: &str) -> SiteId {
        SiteId::parse(id).unwrap()
    }

    fn basic(id: &str, secret: &str) -> String {
        format!("Basic {}", STANDARD.encode(format!("{id}:{secret}")))
    }

    fn auth(k: &Keyring, s: &SiteId, header: &str) -> Result<ResourceServer, IntrospectError> {
        authenticate(k, s, HeaderField::one(header))
    }

    #[test]
    fn the_secret_is_the_labelled_mac_of_site_and_name_under_the_active_key() {
        let k = keyring();
        let demo = site("demo");
        let c = ResourceServerCredential::mint(&k, &demo, "billing-api").unwrap();
        assert_eq!((c.id(), c.kid()), ("billing-api", "k.1"));
        let (_, key) = k.active_key().unwrap();
        let mac = key.mac_labeled(
            "portcullis/introspection/v1",
            &[b"demo".as_slice(), b"billing-api".as_slice()],
        );
        assert_eq!(
            c.secret().expose_secret(),
            format!("k.1.{}", b64::encode(&mac))
        );
        // Deterministic, and one per site and name.
        assert_eq!(
            ResourceServerCredential::mint(&k, &demo, "billing-api").unwrap(),
            c
        );
        for (s, n) in [("demo", "billing-apj"), ("other", "billing-api")] {
            let o = ResourceServerCredential::mint(&k, &site(s), n).unwrap();
            assert_ne!(o.secret(), c.secret(), "{s} {n}");
        }
        // Another use of the same key (a client secret's label) differs.
        let client = key.mac_labeled("portcullis/client-secret/v1", &[b"billing-api".as_slice()]);
        assert!(!c.secret().expose_secret().contains(&b64::encode(&client)));
    }

    #[test]
    fn names_follow_the_grammar() {
        let k = keyring();
        let s = site("demo");
        for ok in ["a", "A-z_0.9", &"n".repeat(MAX_NAME_LEN)] {
            assert!(ResourceServerCredential::mint(&k, &s, ok).is_ok(), "{ok}");
        }
        for bad in ["", "a b", "a:b", "a/b", "é", &"n".repeat(MAX_NAME_LEN + 1)] {
            assert_eq!(
                ResourceServerCredential::mint(&k, &s, bad),
                Err(CredentialError::InvalidName),
                "{bad}"
            );
        }
        assert_eq!(
            ResourceServerCredential::mint(&Keyring::new(), &s, "a"),
            Err(CredentialError::NoActiveKey)
        );
    }

    #[test]
    fn only_the_exact_secret_authenticates() {
        let k = keyring();
        let s = site("demo");
        let c = ResourceServerCredential::mint(&k, &s, "rs").unwrap();
        let secret = c.secret().expose_secret();
        let ok = auth(&k, &s, c.basic_authorization().expose_secret()).unwrap();
        assert_eq!((ok.name.as_str(), ok.kid.as_str()), ("rs", "k.1"));
        // Form-encoded parts (RFC 6749 §2.3.1) and a lower-case scheme.
        let encoded = format!(
            "basic {}",
            STANDARD.encode(format!("r%73:{}", secret.replace('.', "%2E")))
        );
        assert!(auth(&k, &s, &encoded).is_ok());

        let mut flipped = String::from(secret);
        let last = flipped.pop().unwrap();
        flipped.push(if last == 'A' { 'B' } else { 'A' });
        let other = ResourceServerCredential::mint(&k, &site("other"), "rs").unwrap();
        let refused = [
            basic("rs", &flipped),
            basic("rs", &secret[..secret.len() - 1]),
            basic("rs", &format!("{secret}A")),
            basic("rs", &secret.replacen("k.1", "k.2", 1)),
            basic("rs", &secret.replacen("k.1.", "", 1)),
            basic("rs", ""),
            basic("rt", secret),
            basic("", secret),
            basic("r s", secret),
            basic("rs", other.secret().expose_secret()),
            format!("Basic {}", STANDARD.encode("rs")),
            String::from("Basic !!"),
        ];
        for header in &refused {
            assert_eq!(
                auth(&k, &s, header),
                Err(IntrospectError::InvalidClient { basic: true }),
                "{header}"
            );
        }
        for header in [format!("Bearer {secret}"), String::from("rs")] {
            assert_eq!(
                auth(&k, &s, &header),
                Err(IntrospectError::InvalidClient { basic: false })
            );
        }
        assert_eq!(
            authenticate(&k, &s, HeaderField::ABSENT),
            Err(IntrospectError::InvalidClient { basic: false })
        );
        let header = c.basic_authorization();
        let twice = HeaderField::new([header.expose_secret().as_bytes(); 2]);
        assert_eq!(
            authenticate(&k, &s, twice),
            Err(IntrospectError::authorization(HeaderError::Repeated))
        );
    }

    #[test]
    fn a_credential_lives_until_its_key_is_retired() {
        let mut k = keyring();
        let s = site("demo");
        let old = ResourceServerCredential::mint(&k, &s, "rs").unwrap();
        k.insert("k2", SigningKey::from_bytes(&[2; 32]).unwrap())
            .unwrap();
        k.set_active("k2").unwrap();
        let new = ResourceServerCredential::mint(&k, &s, "rs").unwrap();
        assert_eq!(new.kid(), "k2");
        assert_ne!(new.secret(), old.secret());
        for c in [&old, &new] {
            assert!(auth(&k, &s, c.basic_authorization().expose_secret()).is_ok());
        }
        k.retire("k.1").unwrap();
        assert_eq!(
            auth(&k, &s, old.basic_authorization().expose_secret()),
            Err(IntrospectError::InvalidClient { basic: true })
        );
        assert!(auth(&k, &s, new.basic_authorization().expose_secret()).is_ok());
    }

    #[test]
    fn secrets_stay_out_of_debug_and_errors() {
        let c = ResourceServerCredential::mint(&keyring(), &site("demo"), "rs").unwrap();
        let secret = c.secret().expose_secret();
        let tag = secret.rsplit_once('.').unwrap().1;
        let debug = format!("{c:?}");
        assert!(!debug.contains(tag), "{debug}");
        assert!(debug.contains("rs") && debug.contains("k.1"), "{debug}");
        let r = IntrospectError::InvalidClient { basic: true }.to_response();
        assert!(!r.body.contains(tag));
        assert_eq!(r.status, 401);
        assert_eq!(r.header("www-authenticate"), Some(CHALLENGE));
        assert_eq!(r.header("cache-control"), Some("no-store"));
        let r = IntrospectError::InvalidClient { basic: false }.to_response();
        assert_eq!((r.status, r.header("www-authenticate")), (401, None));
    }

    #[test]
    fn answers_have_their_exact_bodies_and_headers() {
        let r = Introspection::Inactive.to_response();
        assert_eq!((r.status, r.body.as_str()), (200, INACTIVE_JSON));
        assert_eq!(r.header("cache-control"), Some("no-store"));
        assert_eq!(r.header("content-type"), Some("application/json"));
        let active = Introspection::Active(ActiveToken {
            scope: ScopeSet::parse("b a").unwrap(),
            client_id: "c".into(),
            subject: "u".into(),
            expires: Timestamp::from_secs(20),
            issued_at: Some(Timestamp::from_secs(10)),
            issuer: "https://i".into(),
            audience: "https://r/k".into(),
            token_id: Some("j".into()),
            grant: GrantId::from_bytes([0; 16]),
        });
        assert_eq!(
            active.to_json(),
            r#"{"active":true,"scope":"a b","client_id":"c","sub":"u","exp":20,"iat":10,"iss":"https://i","aud":"https://r/k","jti":"j","token_type":"Bearer"}"#
        );
        let r = IntrospectError::Unavailable {
            retry_after_secs: 30,
        }
        .to_response();
        assert_eq!((r.status, r.header("retry-after")), (503, Some("30")));
        assert_eq!(IntrospectError::MissingToken.to_response().status, 400);
    }
}
