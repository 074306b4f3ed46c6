//! Stateless registration (RFC 7591 Appendix A.5.2) and the resolved
//! [`Client`].
//!
//! A registered client id is `pc1.<kid>.<payload>.<tag>`:
//!
//! * `kid` names the [`Keyring`] key that issued it (it may contain `.`;
//!   the id is split from the right, and base64url has no `.`);
//! * `payload` is unpadded base64url of a version byte and the encoding
//!   (postcard's format, by the record codec of [`crate::store::codec`]) of
//!   a 128-bit nonce drawn from the host's `CryptoRng`, the
//!   metadata and the issue time;
//! * `tag` is unpadded base64url of
//!   `mac_labeled("portcullis/client-id/v1", [kid, payload])`.
//!
//! Registration therefore writes nothing: anonymous callers cannot grow the
//! store, and there is nothing to reap. Resolving checks the tag in constant
//! time *before* decoding the payload, then re-validates the metadata with
//! today's rules, so a rule tightened later also applies to old ids at
//! authorization and code exchange. A refresh and a revocation, which
//! redirect nowhere, check the tag and the secret and decode only the
//! payload's head (auth method, grant types): the grant they act on
//! records what its authorization checked.
//!
//! A confidential client's secret is
//! `base64url(mac_labeled("portcullis/client-secret/v1", [client_id]))`
//! under the same key: derived on demand, never stored, and checked in
//! constant time.
//!
//! The nonce makes every registration distinct: two callers that register
//! identical metadata in the same second get different ids, hence different
//! secrets, so one never holds the other's credentials (RFC 7591 §3.2.1: a
//! client secret belongs to one client). Ids of the nonce-less first format
//! (version byte 1) no longer resolve: nothing told two such clients apart,
//! so each must register again.
//!
//! Consequences the host should know:
//!
//! * **Retiring a key invalidates every client registered under it** (and
//!   their secrets): they fail to resolve as unknown and must register
//!   again. Rotation without retirement keeps them working. Grants the host
//!   keeps for such clients are the host's to revoke or keep.
//! * Registrations cannot be deleted or updated (RFC 7592 is not
//!   supported); a client that changes its metadata registers again.
//! * Ids are bounded by [`MAX_CLIENT_ID_LEN`]; metadata that does not fit is
//!   refused at registration with `invalid_client_metadata`.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use rand_core::CryptoRng;
use serde::Serialize;
use subtle::ConstantTimeEq;

use super::metadata::{ClientMetadata, GrantType, RegistrationError, TokenEndpointAuthMethod};
use super::redirect_uri::RedirectUri;
use crate::error::{ErrorCode, WireError};
use crate::jwt::b64;
use crate::jwt::{Keyring, SigningKey};
use crate::rand;
use crate::secret::SecretString;
use crate::store::codec::{self, Decode, Encode, Malformed, Reader};
use crate::time::Timestamp;

/// Every registered (stateless) client id starts with this.
pub const CLIENT_ID_PREFIX: &str = "pc1.";
/// Longest registered client id, in bytes; checked before any decoding.
pub const MAX_CLIENT_ID_LEN: usize = 4096;
/// Length of a confidential client's derived secret: unpadded base64url of
/// 32 bytes.
pub const CLIENT_SECRET_LEN: usize = TAG_LEN;

const ID_LABEL: &str = "portcullis/client-id/v1";
const SECRET_LABEL: &str = "portcullis/client-secret/v1";
/// Version 2 carries [`Payload::nonce`]; version 1 (without it) is refused.
const PAYLOAD_VERSION: u8 = 2;
/// Random bytes drawn into every id.
const NONCE_LEN: usize = 16;
/// Unpadded base64url of 32 bytes.
const TAG_LEN: usize = 43;

/// The result of a registration: what the §3.2.1 response carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisteredClient {
    /// The new client id (a `pc1.` id).
    pub client_id: String,
    /// The derived secret of a `client_secret_basic` client; `None` for a
    /// public one. Send it once, in the registration response.
    pub client_secret: Option<SecretString>,
    /// The registered metadata.
    pub metadata: ClientMetadata,
    /// When the id was issued (`client_id_issued_at`).
    pub issued_at: Timestamp,
}

/// The payload of a client id, after the version byte.
struct Payload<'a> {
    /// Fresh randomness, so identical metadata never yields the same id.
    nonce: [u8; NONCE_LEN],
    issued_at: u64,
    /// 0 = `none`, 1 = `client_secret_basic`, 2 = `client_secret_post`.
    auth: u8,
    /// Bit 0 = `authorization_code`, bit 1 = `refresh_token`.
    grants: u8,
    redirect_uris: Vec<&'a str>,
    client_name: Option<&'a str>,
    scope: Option<&'a str>,
    client_uri: Option<&'a str>,
    logo_uri: Option<&'a str>,
}

codec::fields!(borrowed Payload {
    nonce,
    issued_at,
    auth,
    grants,
    redirect_uris,
    client_name,
    scope,
    client_uri,
    logo_uri,
});

/// Registers a client statelessly: validates `metadata`
/// ([`ClientMetadata::validate`]), issues a `pc1.` id under the keyring's
/// active key with a fresh nonce from `rng` and, for a
/// `client_secret_basic` client, derives its secret from that id. Nothing
/// is stored.
///
/// Every call yields a new id and secret, even for identical metadata at the
/// same `now` (RFC 7591 §3.2.1).
pub fn register<R: CryptoRng + ?Sized>(
    mut metadata: ClientMetadata,
    keyring: &Keyring,
    rng: &mut R,
    now: Timestamp,
) -> Result<RegisteredClient, RegistrationError> {
    metadata.validate()?;
    let auth = match metadata.token_endpoint_auth_method {
        TokenEndpointAuthMethod::None => 0,
        TokenEndpointAuthMethod::ClientSecretBasic => 1,
        TokenEndpointAuthMethod::ClientSecretPost => 2,
        // No key set travels in an id: assertions are for document clients.
        TokenEndpointAuthMethod::PrivateKeyJwt => {
            return Err(RegistrationError::UnsupportedAuthMethod);
        }
    };
    // The id carries grant types as a set; keep the echo equal to what
    // resolving will return.
    metadata.grant_types.sort_unstable();
    let (kid, key) = keyring.active_key().ok_or(RegistrationError::NoActiveKey)?;
    let payload = Payload {
        nonce: rand::bytes::<NONCE_LEN, _>(rng),
        issued_at: now.as_secs(),
        auth,
        grants: metadata.grant_types.iter().fold(0, |bits, g| {
            bits | match g {
                GrantType::AuthorizationCode => 1,
                GrantType::RefreshToken => 2,
            }
        }),
        redirect_uris: metadata
            .redirect_uris
            .iter()
            .map(RedirectUri::as_str)
            .collect(),
        client_name: metadata.client_name.as_deref(),
        scope: metadata.scope.as_deref(),
        client_uri: metadata.client_uri.as_deref(),
        logo_uri: metadata.logo_uri.as_deref(),
    };
    let mut encoded = alloc::vec![PAYLOAD_VERSION];
    payload.encode(&mut encoded);
    let id_len = CLIENT_ID_PREFIX.len() + kid.len() + 2 + encoded.len().div_ceil(3) * 4 + TAG_LEN;
    if id_len > MAX_CLIENT_ID_LEN {
        return Err(RegistrationError::TooLargeForClientId);
    }
    let mut client_id = String::with_capacity(id_len);
    client_id.push_str(CLIENT_ID_PREFIX);
    client_id.push_str(kid);
    client_id.push('.');
    let payload_start = client_id.len();
    b64::encode_string(&encoded, &mut client_id);
    let tag = key.mac_labeled(
        ID_LABEL,
        &[kid.as_bytes(), &client_id.as_bytes()[payload_start..]],
    );
    client_id.push('.');
    b64::encode_string(&tag, &mut client_id);
    let client_secret = (auth != 0).then(|| derive_secret(key, &client_id));
    Ok(RegisteredClient {
        client_id,
        client_secret,
        metadata,
        issued_at: now,
    })
}

/// The RFC 7591 §3.2.1 response body (sent with `201 Created` and
/// `Cache-Control: no-store`): `client_id`, `client_id_issued_at`, for a
/// confidential client `client_secret` and `client_secret_expires_at: 0`
/// (the secret does not expire on its own; it ends with its key), then the
/// registered metadata, with defaults made explicit.
#[must_use]
pub fn registration_response(client: &RegisteredClient) -> String {
    registration_body(client)
}

impl RegisteredClient {
    /// The complete RFC 7591 §3.2.1 answer: 201, the JSON body, `no-store`
    /// (the body may hold a client secret).
    #[must_use]
    pub fn to_response(&self) -> crate::http::HttpResponse {
        crate::http::HttpResponse::json_body(201, registration_body(self)).no_store()
    }
}

fn registration_body(client: &RegisteredClient) -> String {
    #[derive(Serialize)]
    struct Body<'a> {
        client_id: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        client_secret: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        client_secret_expires_at: Option<u64>,
        client_id_issued_at: u64,
        redirect_uris: Vec<&'a str>,
        token_endpoint_auth_method: &'static str,
        grant_types: Vec<&'static str>,
        response_types: [&'static str; 1],
        #[serde(skip_serializing_if = "Option::is_none")]
        client_name: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        scope: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        client_uri: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        logo_uri: Option<&'a str>,
    }
    let m = &client.metadata;
    let secret = client
        .client_secret
        .as_ref()
        .map(SecretString::expose_secret);
    let body = Body {
        client_id: &client.client_id,
        client_secret: secret,
        client_secret_expires_at: secret.map(|_| 0),
        client_id_issued_at: client.issued_at.as_secs(),
        redirect_uris: m.redirect_uris.iter().map(RedirectUri::as_str).collect(),
        token_endpoint_auth_method: m.token_endpoint_auth_method.as_str(),
        grant_types: m.grant_types.iter().map(|g| g.as_str()).collect(),
        response_types: ["code"],
        client_name: m.client_name.as_deref(),
        scope: m.scope.as_deref(),
        client_uri: m.client_uri.as_deref(),
        logo_uri: m.logo_uri.as_deref(),
    };
    // Strings, integers and arrays of them always serialize.
    serde_json::to_string(&body).unwrap_or_default()
}

/// A resolved client: registered (a `pc1.` id) or identified by its
/// metadata document URL. Obtain one from [`resolve_stateless`] or
/// [`validate_document`](super::validate_document).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Client {
    /// Registered dynamically; its id carries its metadata.
    #[non_exhaustive]
    Registered {
        /// The `pc1.` client id.
        client_id: String,
        /// Its metadata, as registered.
        metadata: ClientMetadata,
        /// When it registered.
        issued_at: Timestamp,
    },
    /// Identified by the HTTPS URL of its client-ID metadata document.
    #[non_exhaustive]
    Document {
        /// The document URL, which is the client id.
        client_id: String,
        /// The metadata from the document; always a public client.
        metadata: ClientMetadata,
    },
}

impl Client {
    /// The client id.
    #[must_use]
    pub fn id(&self) -> &str {
        match self {
            Self::Registered { client_id, .. } | Self::Document { client_id, .. } => client_id,
        }
    }

    /// The client's metadata.
    #[must_use]
    pub fn metadata(&self) -> &ClientMetadata {
        match self {
            Self::Registered { metadata, .. } | Self::Document { metadata, .. } => metadata,
        }
    }

    /// Whether the client was identified by a metadata document.
    #[must_use]
    pub fn is_document(&self) -> bool {
        matches!(self, Self::Document { .. })
    }

    /// When a registered client registered; `None` for a document client.
    #[must_use]
    pub fn issued_at(&self) -> Option<Timestamp> {
        match self {
            Self::Registered { issued_at, .. } => Some(*issued_at),
            Self::Document { .. } => None,
        }
    }

    /// Whether the client must authenticate with a secret
    /// (`client_secret_basic` or `client_secret_post`). A `private_key_jwt` client authenticates
    /// with an assertion instead ([`super::assertion`]).
    #[must_use]
    pub fn is_confidential(&self) -> bool {
        self.metadata().uses_secret()
    }

    /// The registered redirect URI that `presented` designates, if any
    /// ([`RedirectUri::matches`]). `None` must be shown to the user and never
    /// redirected to (RFC 6749 §4.1.2.1).
    ///
    /// On a match, redirect to `presented` itself — for a loopback URI it
    /// carries the port the client listens on — and bind the code to it, so
    /// the token request must repeat exactly that text.
    #[must_use]
    pub fn redirect_uri(&self, presented: &str) -> Option<&RedirectUri> {
        self.metadata()
            .redirect_uris
            .iter()
            .find(|uri| uri.matches(presented))
    }

    /// Whether every redirect URI is loopback: the consent screen warns.
    #[must_use]
    pub fn all_redirects_loopback(&self) -> bool {
        self.metadata().all_redirects_loopback()
    }
}

/// The parts of a `pc1.` id.
struct IdParts<'a> {
    kid: &'a str,
    payload: &'a str,
    tag: &'a str,
}

impl<'a> IdParts<'a> {
    fn split(client_id: &'a str) -> Option<Self> {
        if client_id.len() > MAX_CLIENT_ID_LEN {
            return None;
        }
        let rest = client_id.strip_prefix(CLIENT_ID_PREFIX)?;
        let mut from_right = rest.rsplitn(3, '.');
        let tag = from_right.next()?;
        let payload = from_right.next()?;
        let kid = from_right.next()?;
        (!kid.is_empty() && !payload.is_empty() && tag.len() == TAG_LEN).then_some(Self {
            kid,
            payload,
            tag,
        })
    }
}

/// Resolves a registered client id: the key the id names must still verify
/// (not retired), the tag must match (compared in constant time, before the
/// payload is decoded), and the carried metadata must pass today's rules.
/// Every failure is [`ClientError::UnknownClient`], so the answer reveals
/// nothing about which check failed.
pub fn resolve_stateless(client_id: &str, keyring: &Keyring) -> Result<Client, ClientError> {
    resolve_parts(client_id, keyring).ok_or(ClientError::UnknownClient)
}

fn resolve_parts(client_id: &str, keyring: &Keyring) -> Option<Client> {
    let (parts, _) = authentic_parts(client_id, keyring)?;
    let bytes = b64::decode(parts.payload.as_bytes())?;
    let (&PAYLOAD_VERSION, encoded) = bytes.split_first()? else {
        return None;
    };
    let mut reader = Reader::new(encoded, PAYLOAD_VERSION);
    let payload = Payload::decode(&mut reader).ok()?;
    if !reader.is_empty() {
        return None;
    }
    let metadata = ClientMetadata {
        redirect_uris: payload
            .redirect_uris
            .iter()
            .map(|uri| RedirectUri::parse(uri).ok())
            .collect::<Option<Vec<_>>>()?,
        client_name: payload.client_name.map(String::from),
        token_endpoint_auth_method: method_of(payload.auth)?,
        grant_types: match payload.grants {
            1 => alloc::vec![GrantType::AuthorizationCode],
            3 => alloc::vec![GrantType::AuthorizationCode, GrantType::RefreshToken],
            _ => return None,
        },
        scope: payload.scope.map(String::from),
        client_uri: payload.client_uri.map(String::from),
        logo_uri: payload.logo_uri.map(String::from),
        jwks_uri: None,
        token_endpoint_auth_signing_alg: None,
    };
    metadata.validate().ok()?;
    Some(Client::Registered {
        client_id: client_id.into(),
        metadata,
        issued_at: Timestamp::from_secs(payload.issued_at),
    })
}

/// The parts of `client_id` and the key that issued it, when the key still
/// verifies and the tag matches (compared in constant time): nothing of the
/// payload is decoded before this passes.
fn authentic_parts<'a, 'k>(
    client_id: &'a str,
    keyring: &'k Keyring,
) -> Option<(IdParts<'a>, &'k SigningKey)> {
    let parts = IdParts::split(client_id)?;
    let key = keyring.verifying_key(parts.kid).ok()?;
    let mut tag = [0u8; 32];
    if b64::decode_into(parts.tag.as_bytes(), &mut tag)? != 32 {
        return None;
    }
    let expected = key.mac_labeled(ID_LABEL, &[parts.kid.as_bytes(), parts.payload.as_bytes()]);
    bool::from(expected.ct_eq(&tag)).then_some((parts, key))
}

/// The leading fields of [`Payload`], in its order: a struct is written as
/// its fields one after another, so a payload's first bytes decode as this
/// head whatever follows.
struct PayloadHead {
    auth: u8,
    grants: u8,
}

impl Decode<'_> for PayloadHead {
    fn decode(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        r.take(NONCE_LEN)?;
        r.u64()?;
        Ok(Self {
            auth: r.byte()?,
            grants: r.byte()?,
        })
    }
}

/// Characters of the payload that hold its version byte and
/// [`PayloadHead`]: 30 bytes, at least the 1 + 16 + 10 (the longest `u64`
/// varint) + 2 the head can take; whole groups, so no trailing bits.
const HEAD_CHARS: usize = 40;

/// The method of a payload's `auth` byte.
fn method_of(auth: u8) -> Option<TokenEndpointAuthMethod> {
    match auth {
        0 => Some(TokenEndpointAuthMethod::None),
        1 => Some(TokenEndpointAuthMethod::ClientSecretBasic),
        2 => Some(TokenEndpointAuthMethod::ClientSecretPost),
        _ => None,
    }
}

/// What the token endpoint knows of a registered client from
/// [`authenticate_registered`]: its method and the grant types it
/// registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RegisteredGrants {
    grants: u8,
    method: TokenEndpointAuthMethod,
}

impl RegisteredGrants {
    /// How the client registered to authenticate.
    pub(crate) fn method(self) -> TokenEndpointAuthMethod {
        self.method
    }

    /// Whether the client registered `grant` (RFC 7591 §2, `grant_types`).
    pub(crate) fn allows(self, grant: GrantType) -> bool {
        self.grants
            & match grant {
                GrantType::AuthorizationCode => 1,
                GrantType::RefreshToken => 2,
            }
            != 0
    }
}

/// Authenticates a registered client id at the token endpoint where no
/// redirect URI is in play: a refresh (RFC 6749 §6, whose request names no
/// `redirect_uri`; OAuth 2.1 §4.3 binds the refresh token to the client it
/// was issued to, which the caller checks against the grant) and a
/// revocation (RFC 7009 §2.1). The id must resolve as for
/// [`resolve_stateless`] as far as the tag and its key go (a retired key
/// still unregisters its clients), and the secret must be what
/// [`authenticate`] requires; only the head of the payload is decoded (auth
/// method and grant types), not the redirect URIs and names: the grant a
/// refresh acts on records what its authorization checked of those, under
/// the rules of the day, and a refresh redirects nowhere.
pub(crate) fn authenticate_registered(
    client_id: &str,
    keyring: &Keyring,
    presented_secret: Option<&str>,
) -> Result<RegisteredGrants, ClientError> {
    let (parts, key) = authentic_parts(client_id, keyring).ok_or(ClientError::UnknownClient)?;
    let text = parts.payload.as_bytes();
    let text = text.get(..HEAD_CHARS).unwrap_or(text);
    let mut head = [0u8; HEAD_CHARS / 4 * 3];
    let n = b64::decode_into(text, &mut head).ok_or(ClientError::UnknownClient)?;
    let (&PAYLOAD_VERSION, encoded) = head[..n].split_first().ok_or(ClientError::UnknownClient)?
    else {
        return Err(ClientError::UnknownClient);
    };
    let head = PayloadHead::decode(&mut Reader::new(encoded, PAYLOAD_VERSION))
        .map_err(|_| ClientError::UnknownClient)?;
    let method = method_of(head.auth).ok_or(ClientError::UnknownClient)?;
    if !matches!(head.grants, 1 | 3) {
        return Err(ClientError::UnknownClient);
    }
    let confidential = method != TokenEndpointAuthMethod::None;
    check_secret(confidential, client_id, presented_secret, || Some(key))?;
    Ok(RegisteredGrants {
        grants: head.grants,
        method,
    })
}

/// Authenticates `client` at the token endpoint (RFC 6749 §2.3.1).
///
/// A public client must present no secret at all (not even an empty one); a
/// confidential client must present its derived secret, compared in
/// constant time. `presented_secret` is the secret exactly as the adapter
/// decoded it from the `Authorization: Basic` header (form-urlencoding
/// undone; derived secrets are base64url and need none). Every failure is
/// `invalid_client` (401).
pub fn authenticate(
    client: &Client,
    keyring: &Keyring,
    presented_secret: Option<&str>,
) -> Result<(), ClientError> {
    if client.metadata().token_endpoint_auth_method == TokenEndpointAuthMethod::PrivateKeyJwt {
        return Err(ClientError::AssertionRequired);
    }
    let key = || match client {
        Client::Registered { client_id, .. } => {
            keyring.verifying_key(IdParts::split(client_id)?.kid).ok()
        }
        Client::Document { .. } => None,
    };
    check_secret(client.is_confidential(), client.id(), presented_secret, key)
}

/// The secret rule of [`authenticate`]: none from a public client, the
/// derived one (constant-time) from a confidential client, whose issuing
/// key `key` finds (`None`: unknown client).
fn check_secret<'k>(
    confidential: bool,
    client_id: &str,
    presented_secret: Option<&str>,
    key: impl FnOnce() -> Option<&'k SigningKey>,
) -> Result<(), ClientError> {
    match (confidential, presented_secret) {
        (false, None) => Ok(()),
        (false, Some(_)) => Err(ClientError::UnexpectedSecret),
        (true, None) => Err(ClientError::SecretRequired),
        (true, Some(presented)) => {
            let key = key().ok_or(ClientError::UnknownClient)?;
            let expected = derive_secret(key, client_id);
            if bool::from(
                expected
                    .expose_secret()
                    .as_bytes()
                    .ct_eq(presented.as_bytes()),
            ) {
                Ok(())
            } else {
                Err(ClientError::SecretMismatch)
            }
        }
    }
}

fn derive_secret(key: &SigningKey, client_id: &str) -> SecretString {
    let mac = key.mac_labeled(SECRET_LABEL, &[client_id.as_bytes()]);
    SecretString::new(b64::encode(&mac))
}

/// Why a client could not be resolved or authenticated. Never carries the
/// presented secret.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientError {
    /// The client id is malformed, names an unknown or retired key, has a
    /// bad tag, or carries metadata today's rules refuse.
    UnknownClient,
    /// A confidential client presented no secret.
    SecretRequired,
    /// The presented secret is wrong.
    SecretMismatch,
    /// A public client presented a secret.
    UnexpectedSecret,
    /// The client authenticates with a signed assertion (`private_key_jwt`),
    /// which [`assertion`](super::assertion) checks, not a secret.
    AssertionRequired,
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::UnknownClient => "unknown client",
            Self::SecretRequired => "client authentication required",
            Self::SecretMismatch => "client authentication failed",
            Self::UnexpectedSecret => "public client must not present a secret",
            Self::AssertionRequired => "client must authenticate with a signed assertion",
        })
    }
}

impl WireError for ClientError {
    fn code(&self) -> ErrorCode {
        ErrorCode::InvalidClient
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ClientError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::parse_registration;
    use ::rand::SeedableRng;
    use ::rand::rngs::StdRng;
    use alloc::format;

    fn rng() -> StdRng {
        StdRng::seed_from_u64(7)
    }

    fn keyring() -> Keyring {
        let mut k = Keyring::new();
        k.insert("k.1", SigningKey::from_bytes(&[1; 32]).unwrap())
            .unwrap();
        k.set_active("k.1").unwrap();
        k
    }

    fn metadata(auth: &str) -> ClientMetadata {
        parse_registration(
            format!(
                r#"{{"redirect_uris":["https://a.example/cb","http://localhost/cb"],
                   "token_endpoint_auth_method":"{auth}","client_name":"Agent",
                   "grant_types":["authorization_code","refresh_token"],"scope":"skills:read",
                   "logo_uri":"https://a.example/logo.png"}}"#
            )
            .as_bytes(),
        )
        .unwrap()
    }

    const NOW: Timestamp = Timestamp::from_secs(1_700_000_000);

    #[test]
    fn register_then_resolve_round_trips() {
        let k = keyring();
        for auth in ["none", "client_secret_basic"] {
            let reg = register(metadata(auth), &k, &mut rng(), NOW).unwrap();
            assert!(reg.client_id.starts_with("pc1.k.1."));
            let client = resolve_stateless(&reg.client_id, &k).unwrap();
            assert_eq!(client.id(), reg.client_id);
            assert_eq!(client.metadata(), &reg.metadata);
            assert_eq!(client.issued_at(), Some(NOW));
            assert!(!client.is_document());
            assert_eq!(client.is_confidential(), auth != "none");
            assert_eq!(reg.client_secret.is_some(), auth != "none");
        }
    }

    #[test]
    fn hand_built_metadata_round_trips_too() {
        let k = keyring();
        let mut m = ClientMetadata::new(
            alloc::vec![RedirectUri::parse("http://[::1]/cb").unwrap()],
            TokenEndpointAuthMethod::None,
        );
        m.grant_types = alloc::vec![GrantType::RefreshToken, GrantType::AuthorizationCode];
        m.client_name = Some("Ünïcode ✓".into());
        let reg = register(m, &k, &mut rng(), NOW).unwrap();
        let client = resolve_stateless(&reg.client_id, &k).unwrap();
        assert_eq!(client.metadata(), &reg.metadata);
        assert_eq!(
            reg.metadata.grant_types,
            [GrantType::AuthorizationCode, GrantType::RefreshToken]
        );
    }

    #[test]
    fn secrets_are_derived_and_checked() {
        let k = keyring();
        let reg = register(metadata("client_secret_basic"), &k, &mut rng(), NOW).unwrap();
        let client = resolve_stateless(&reg.client_id, &k).unwrap();
        let secret = reg.client_secret.as_ref().unwrap().expose_secret();
        assert_eq!(secret.len(), 43);
        assert_eq!(authenticate(&client, &k, Some(secret)), Ok(()));
        assert_eq!(
            authenticate(&client, &k, None),
            Err(ClientError::SecretRequired)
        );
        let mut wrong = String::from(secret);
        wrong.pop();
        assert_eq!(
            authenticate(&client, &k, Some(&wrong)),
            Err(ClientError::SecretMismatch)
        );
        wrong.push('A');
        if wrong != secret {
            assert_eq!(
                authenticate(&client, &k, Some(&wrong)),
                Err(ClientError::SecretMismatch)
            );
        }
        let public = register(metadata("none"), &k, &mut rng(), NOW).unwrap();
        let public = resolve_stateless(&public.client_id, &k).unwrap();
        assert_eq!(authenticate(&public, &k, None), Ok(()));
        assert_eq!(
            authenticate(&public, &k, Some("")),
            Err(ClientError::UnexpectedSecret)
        );
        assert_eq!(
            authenticate(&public, &k, Some(secret)),
            Err(ClientError::UnexpectedSecret)
        );
    }

    #[test]
    fn identical_metadata_never_shares_an_id_or_secret() {
        let k = keyring();
        let mut rng = rng();
        let a = register(metadata("client_secret_basic"), &k, &mut rng, NOW).unwrap();
        let b = register(metadata("client_secret_basic"), &k, &mut rng, NOW).unwrap();
        assert_ne!(a.client_id, b.client_id);
        let (a_secret, b_secret) = (
            a.client_secret.as_ref().unwrap().expose_secret(),
            b.client_secret.as_ref().unwrap().expose_secret(),
        );
        assert_ne!(a_secret, b_secret);
        let (ca, cb) = (
            resolve_stateless(&a.client_id, &k).unwrap(),
            resolve_stateless(&b.client_id, &k).unwrap(),
        );
        assert_eq!(ca.metadata(), cb.metadata());
        assert_eq!(
            authenticate(&ca, &k, Some(b_secret)),
            Err(ClientError::SecretMismatch)
        );
        assert_eq!(
            authenticate(&cb, &k, Some(a_secret)),
            Err(ClientError::SecretMismatch)
        );
    }

    #[test]
    fn ids_without_a_nonce_no_longer_resolve() {
        // An id of the first format: version 1, no nonce, correctly tagged.
        #[derive(Serialize)]
        struct V1<'a> {
            issued_at: u64,
            auth: u8,
            grants: u8,
            redirect_uris: Vec<&'a str>,
            client_name: Option<&'a str>,
            scope: Option<&'a str>,
            client_uri: Option<&'a str>,
            logo_uri: Option<&'a str>,
        }
        let k = keyring();
        let (kid, key) = k.active_key().unwrap();
        let v1 = V1 {
            issued_at: NOW.as_secs(),
            auth: 0,
            grants: 1,
            redirect_uris: alloc::vec!["https://a.example/cb"],
            client_name: None,
            scope: None,
            client_uri: None,
            logo_uri: None,
        };
        let payload = b64::encode(&postcard::to_extend(&v1, alloc::vec![1]).unwrap());
        let tag = key.mac_labeled(ID_LABEL, &[kid.as_bytes(), payload.as_bytes()]);
        let legacy = format!("pc1.{kid}.{payload}.{}", b64::encode(&tag));
        assert_eq!(
            resolve_stateless(&legacy, &k),
            Err(ClientError::UnknownClient)
        );
    }

    /// Ids issued before the record codec (by postcard over a derived
    /// `Serialize`) hold the same bytes the codec writes and reads.
    #[test]
    fn the_payload_is_postcards_encoding() {
        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
        struct Mirror<'a> {
            nonce: [u8; NONCE_LEN],
            issued_at: u64,
            auth: u8,
            grants: u8,
            #[serde(borrow)]
            redirect_uris: Vec<&'a str>,
            client_name: Option<&'a str>,
            scope: Option<&'a str>,
            client_uri: Option<&'a str>,
            logo_uri: Option<&'a str>,
        }
        for (name, uris) in [
            (None, alloc::vec!["https://a.example/cb"]),
            (
                Some("Ünïcode agent"),
                alloc::vec!["http://127.0.0.1/cb", "https://b.example/x?y=1"],
            ),
        ] {
            let mirror = Mirror {
                nonce: [7; NONCE_LEN],
                issued_at: 1_790_000_000,
                auth: 1,
                grants: 3,
                redirect_uris: uris.clone(),
                client_name: name,
                scope: Some("skills:read"),
                client_uri: None,
                logo_uri: Some("https://a.example/logo.png"),
            };
            let payload = Payload {
                nonce: mirror.nonce,
                issued_at: mirror.issued_at,
                auth: mirror.auth,
                grants: mirror.grants,
                redirect_uris: uris,
                client_name: mirror.client_name,
                scope: mirror.scope,
                client_uri: mirror.client_uri,
                logo_uri: mirror.logo_uri,
            };
            let mut bytes = Vec::new();
            payload.encode(&mut bytes);
            assert_eq!(bytes, postcard::to_allocvec(&mirror).unwrap());
            let read = Payload::decode(&mut Reader::new(&bytes, PAYLOAD_VERSION)).unwrap();
            assert_eq!(read.redirect_uris, mirror.redirect_uris);
            assert_eq!(read.client_name, mirror.client_name);
            assert_eq!(read.logo_uri, mirror.logo_uri);
            let head = PayloadHead::decode(&mut Reader::new(&bytes, PAYLOAD_VERSION)).unwrap();
            assert_eq!((head.auth, head.grants), (1, 3));
            for cut in 0..bytes.len() {
                assert!(Payload::decode(&mut Reader::new(&bytes[..cut], PAYLOAD_VERSION)).is_err());
            }
        }
    }

    #[test]
    fn tampered_ids_are_unknown() {
        let k = keyring();
        let reg = register(metadata("none"), &k, &mut rng(), NOW).unwrap();
        let id = &reg.client_id;
        let payload_at = CLIENT_ID_PREFIX.len() + "k.1.".len();
        let mut flipped = String::from(id.as_str());
        let c = if &id[payload_at..=payload_at] == "A" {
            "B"
        } else {
            "A"
        };
        flipped.replace_range(payload_at..=payload_at, c);
        let mut other_key = Keyring::new();
        other_key
            .insert("k.1", SigningKey::from_bytes(&[2; 32]).unwrap())
            .unwrap();
        for bad in [
            flipped.as_str(),
            &id[..id.len() - 1],
            &format!("{id}A"),
            &id.replacen("pc1.", "pc2.", 1),
            &id.replacen("k.1", "k.2", 1),
            "pc1.",
            "pc1.k.1..",
            "",
            &"pc1.k.1.".repeat(1000),
        ] {
            assert_eq!(
                resolve_stateless(bad, &k),
                Err(ClientError::UnknownClient),
                "{bad}"
            );
        }
        assert_eq!(
            resolve_stateless(id, &other_key),
            Err(ClientError::UnknownClient)
        );
    }

    #[test]
    fn retiring_the_key_unregisters_its_clients() {
        let mut k = keyring();
        let reg = register(metadata("client_secret_basic"), &k, &mut rng(), NOW).unwrap();
        let client = resolve_stateless(&reg.client_id, &k).unwrap();
        k.insert("k2", SigningKey::from_bytes(&[2; 32]).unwrap())
            .unwrap();
        k.set_active("k2").unwrap();
        assert!(resolve_stateless(&reg.client_id, &k).is_ok());
        k.retire("k.1").unwrap();
        assert_eq!(
            resolve_stateless(&reg.client_id, &k),
            Err(ClientError::UnknownClient)
        );
        let secret = reg.client_secret.as_ref().unwrap().expose_secret();
        assert_eq!(
            authenticate(&client, &k, Some(secret)),
            Err(ClientError::UnknownClient)
        );
    }

    #[test]
    fn oversized_metadata_cannot_become_an_id() {
        let uris: Vec<_> = (0..10)
            .map(|i| {
                RedirectUri::parse(&format!("https://a.example/{i}/{}", "x".repeat(500))).unwrap()
            })
            .collect();
        let m = ClientMetadata::new(uris, TokenEndpointAuthMethod::None);
        assert_eq!(
            register(m, &keyring(), &mut rng(), NOW),
            Err(RegistrationError::TooLargeForClientId)
        );
        assert_eq!(
            register(metadata("none"), &Keyring::new(), &mut rng(), NOW),
            Err(RegistrationError::NoActiveKey)
        );
    }

    #[test]
    fn response_body_follows_rfc_7591() {
        let k = keyring();
        let reg = register(metadata("client_secret_basic"), &k, &mut rng(), NOW).unwrap();
        let body: serde_json::Value = serde_json::from_str(&registration_response(&reg)).unwrap();
        assert_eq!(body["client_id"], reg.client_id.as_str());
        assert_eq!(
            body["client_secret"],
            reg.client_secret.as_ref().unwrap().expose_secret()
        );
        assert_eq!(body["client_secret_expires_at"], 0);
        assert_eq!(body["client_id_issued_at"], 1_700_000_000_u64);
        assert_eq!(body["token_endpoint_auth_method"], "client_secret_basic");
        assert_eq!(
            body["grant_types"],
            serde_json::json!(["authorization_code", "refresh_token"])
        );
        assert_eq!(body["response_types"], serde_json::json!(["code"]));
        assert_eq!(body["redirect_uris"][1], "http://localhost/cb");
        assert_eq!(body["client_name"], "Agent");
        assert!(body.get("client_uri").is_none());

        let public = register(metadata("none"), &k, &mut rng(), NOW).unwrap();
        let body: serde_json::Value =
            serde_json::from_str(&registration_response(&public)).unwrap();
        assert!(body.get("client_secret").is_none());
        assert!(body.get("client_secret_expires_at").is_none());
    }

    #[test]
    fn debug_of_a_registration_elides_the_secret() {
        let reg = register(metadata("client_secret_basic"), &keyring(), &mut rng(), NOW).unwrap();
        let secret = reg.client_secret.as_ref().unwrap().expose_secret();
        assert!(!format!("{reg:?}").contains(secret));
        assert_eq!(ClientError::SecretMismatch.http_status(), 401);
    }

    /// The refresh path's check agrees with resolving and authenticating
    /// on every answer: the right secret (or none) passes, a wrong, missing
    /// or unexpected one fails alike, a tampered id or a retired key is
    /// unknown, and the grant types are the registered ones.
    #[test]
    fn authenticating_without_metadata_agrees_with_resolving() {
        let mut k = keyring();
        let code_only = parse_registration(
            br#"{"redirect_uris":["https://a.example/cb"],"token_endpoint_auth_method":"none"}"#,
        )
        .unwrap();
        let long_name = parse_registration(
            br#"{"redirect_uris":["https://a.example/cb"],"token_endpoint_auth_method":"none",
                 "grant_types":["authorization_code","refresh_token"],"client_name":"A very long name"}"#,
        )
        .unwrap();
        let regs = [
            register(metadata("none"), &k, &mut rng(), NOW).unwrap(),
            register(metadata("client_secret_basic"), &k, &mut rng(), NOW).unwrap(),
            register(code_only, &k, &mut rng(), NOW).unwrap(),
            register(long_name, &k, &mut rng(), NOW).unwrap(),
        ];
        let wrong = SecretString::new("x".repeat(CLIENT_SECRET_LEN));
        for reg in &regs {
            let client = resolve_stateless(&reg.client_id, &k).unwrap();
            let right = reg.client_secret.as_ref().map(SecretString::expose_secret);
            for presented in [right, None, Some(""), Some(wrong.expose_secret())] {
                let full = authenticate(&client, &k, presented);
                let light = authenticate_registered(&reg.client_id, &k, presented);
                assert_eq!(light.map(|_| ()), full, "{presented:?}");
            }
            let grants = authenticate_registered(&reg.client_id, &k, right).unwrap();
            for g in [GrantType::AuthorizationCode, GrantType::RefreshToken] {
                assert_eq!(grants.allows(g), client.metadata().allows_grant(g));
            }
            let tampered = reg
                .client_id
                .replacen(".A", ".B", 1)
                .replacen(".Q", ".R", 1);
            if tampered != reg.client_id {
                assert_eq!(
                    authenticate_registered(&tampered, &k, right),
                    Err(ClientError::UnknownClient)
                );
            }
        }
        assert!(
            !authenticate_registered(&regs[2].client_id, &k, None)
                .unwrap()
                .allows(GrantType::RefreshToken)
        );
        k.insert("k2", SigningKey::from_bytes(&[2; 32]).unwrap())
            .unwrap();
        k.set_active("k2").unwrap();
        k.retire("k.1").unwrap();
        for reg in &regs {
            let right = reg.client_secret.as_ref().map(SecretString::expose_secret);
            assert_eq!(
                authenticate_registered(&reg.client_id, &k, right),
                Err(ClientError::UnknownClient)
            );
        }
    }
}
