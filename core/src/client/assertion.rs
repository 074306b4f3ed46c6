//! Client authentication with a signed JWT: `private_key_jwt` (RFC 7523
//! §2.2 and §3, with the parameters of RFC 7521 §4.2), for clients
//! identified by a metadata document that publishes a key set.
//!
//! The flow is sans-IO in two steps, so the costly signature check never
//! runs inside a store transaction:
//!
//! 1. [`PresentedAssertion::read`] takes `client_assertion_type` and
//!    `client_assertion` from the token (or revocation) form and reads the
//!    JWT without trusting it: [`PresentedAssertion::client_id`] says whose
//!    metadata document and key set the host must fetch.
//! 2. [`PresentedAssertion::verify`] (feature `client-assertions`) checks
//!    it against the client and its keys and hands out a
//!    [`VerifiedAssertion`], which the host passes to the token endpoint
//!    ([`ClientAuthentication::assertion`](crate::token::ClientAuthentication::assertion)).
//!    That operation accepts each assertion's `jti` once, in its own
//!    transaction.
//!
//! The rules, each from the RFC section named:
//!
//! * `client_assertion_type` is exactly
//!   [`CLIENT_ASSERTION_TYPE`] (RFC 7523 §2.2), and a request uses no other
//!   client authentication beside it (RFC 6749 §2.3); a `client_id`
//!   parameter, optional (RFC 7521 §4.2), must name the same client;
//! * the JWS is compact, at most [`MAX_ASSERTION_LEN`] bytes, its header a
//!   JSON object with an `alg` from [`SignatureAlgorithm`] (asymmetric only:
//!   never `none`, never HMAC, RFC 8725 §3.1), no `crit` (RFC 7515
//!   §4.1.11), and the `alg` the client's metadata pins, if it pins one
//!   (`token_endpoint_auth_signing_alg`, RFC 7591 §2);
//! * `iss` and `sub` are both the client id (RFC 7523 §3 items 1 and 2.B);
//! * `aud` names this authorization server: its issuer or its token
//!   endpoint (§3 item 3). An array is accepted only when every member
//!   names this server, so an assertion made for another server never
//!   counts here;
//! * `exp` is present and in the future (§3 item 4), and at most
//!   [`MAX_ASSERTION_LIFETIME`] ahead: a long-lived assertion is a
//!   long-lived credential, and the `jti` memory is bounded by it; `nbf`
//!   and `iat`, when present, are not in the future (§3 items 5 and 6); all
//!   within the policy's JWT leeway;
//! * `jti` is present (at most [`MAX_JTI_LEN`] bytes) and accepted once
//!   until the assertion expires (§3 item 7).
//!
//! Every refusal is `invalid_client` (RFC 6749 §5.2); the
//! [`AssertionError`] variant says which rule failed, for the log only.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::Client;
use super::metadata::TokenEndpointAuthMethod;
use crate::describe::{Describe, display_by_describe};
use crate::error::{ErrorCode, WireError};
use crate::form::Form;
use crate::jwk::{JwkSet, KeyLookup, SignatureAlgorithm};
use crate::jwt::b64;
use crate::time::Timestamp;

/// The one `client_assertion_type` accepted (RFC 7523 §2.2).
pub const CLIENT_ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
/// Longest client assertion read, in bytes.
pub const MAX_ASSERTION_LEN: usize = 8 * 1024;
/// Longest `jti`, in bytes.
pub const MAX_JTI_LEN: usize = 256;
/// The furthest in the future an assertion's `exp` may lie.
pub const MAX_ASSERTION_LIFETIME: Duration = Duration::from_mins(10);

/// A client assertion as presented, read but not trusted.
pub struct PresentedAssertion<'a> {
    text: &'a str,
    signing_input: &'a str,
    signature: Vec<u8>,
    alg: SignatureAlgorithm,
    kid: Option<String>,
    claims: Map<String, Value>,
    iss: String,
}

impl fmt::Debug for PresentedAssertion<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PresentedAssertion")
            .field("iss", &self.iss)
            .field("alg", &self.alg)
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

impl<'a> PresentedAssertion<'a> {
    /// The client assertion of a token or revocation `form`: `Ok(None)`
    /// when the form carries neither parameter. Only the shape is checked
    /// here; nothing is trusted before [`PresentedAssertion::verify`].
    pub fn read(form: &Form<'a>) -> Result<Option<Self>, AssertionError> {
        let (kind, text) = match (
            form.get("client_assertion_type"),
            form.get_cow("client_assertion"),
        ) {
            (None, None) => return Ok(None),
            (Some(kind), Some(text)) => (kind, text),
            _ => return Err(AssertionError::Malformed),
        };
        if kind != CLIENT_ASSERTION_TYPE {
            return Err(AssertionError::UnsupportedType);
        }
        // A JWS in compact form has only URL-safe characters, so the form
        // decoder borrowed it: anything it had to unescape is not one.
        let alloc::borrow::Cow::Borrowed(text) = text else {
            return Err(AssertionError::Malformed);
        };
        let assertion = Self::parse(text)?;
        if form.get("client_id").is_some_and(|id| id != assertion.iss) {
            return Err(AssertionError::WrongIssuer);
        }
        Ok(Some(assertion))
    }

    /// Splits and decodes the compact JWS (RFC 7515 §7.1).
    fn parse(text: &'a str) -> Result<Self, AssertionError> {
        if text.len() > MAX_ASSERTION_LEN {
            return Err(AssertionError::Malformed);
        }
        let mut segments = text.split('.');
        let (Some(header), Some(payload), Some(signature), None) = (
            segments.next(),
            segments.next(),
            segments.next(),
            segments.next(),
        ) else {
            return Err(AssertionError::Malformed);
        };
        let json = |segment: &str| {
            b64::decode(segment.as_bytes())
                .and_then(|bytes| super::parse_json_object(&bytes).ok())
                .ok_or(AssertionError::Malformed)
        };
        let header_members = json(header)?;
        let claims = json(payload)?;
        let signature = b64::decode(signature.as_bytes()).ok_or(AssertionError::Malformed)?;
        if header_members.contains_key("crit") {
            return Err(AssertionError::Malformed);
        }
        let alg = match header_members.get("alg") {
            Some(Value::String(name)) => {
                SignatureAlgorithm::from_name(name).ok_or(AssertionError::UnsupportedAlgorithm)?
            }
            _ => return Err(AssertionError::Malformed),
        };
        let kid = match header_members.get("kid") {
            None => None,
            Some(Value::String(kid)) if !kid.is_empty() => Some(kid.clone()),
            Some(_) => return Err(AssertionError::Malformed),
        };
        let Some(Value::String(iss)) = claims.get("iss") else {
            return Err(AssertionError::WrongIssuer);
        };
        let iss = iss.clone();
        Ok(Self {
            text,
            signing_input: &text[..header.len() + 1 + payload.len()],
            signature,
            alg,
            kid,
            claims,
            iss,
        })
    }

    /// The client the assertion says it comes from (its `iss`, unverified):
    /// the client whose metadata document and key set the host fetches.
    #[must_use]
    pub fn client_id(&self) -> &str {
        &self.iss
    }

    /// The `kid` of the JWS header, if any.
    #[must_use]
    pub fn kid(&self) -> Option<&str> {
        self.kid.as_deref()
    }

    /// The JWS `alg`.
    #[must_use]
    pub fn algorithm(&self) -> SignatureAlgorithm {
        self.alg
    }

    /// Checks the assertion against `client` (its metadata document,
    /// validated) and `keys` (the key set at its `jwks_uri`), for an
    /// authorization server known by `audiences` (its issuer and token
    /// endpoint), at `now` with `leeway` for clock skew. Every rule of the
    /// [module docs](self) but the single use of `jti`, which the token
    /// endpoint's transaction enforces.
    ///
    /// [`AssertionError::UnknownKid`] means the key set has no key of the
    /// `kid` the assertion names: the client may have rotated its keys
    /// since the set was cached, so the host may fetch it again (once, and
    /// not more often than its refetch interval) and verify again.
    #[cfg(feature = "client-assertions")]
    pub fn verify(
        &self,
        client: &Client,
        keys: &JwkSet,
        audiences: &[&str],
        now: Timestamp,
        leeway: Duration,
    ) -> Result<VerifiedAssertion, AssertionError> {
        let metadata = client.metadata();
        if metadata.token_endpoint_auth_method != TokenEndpointAuthMethod::PrivateKeyJwt {
            return Err(AssertionError::NotAnAssertionClient);
        }
        if client.id() != self.iss {
            return Err(AssertionError::WrongIssuer);
        }
        if metadata
            .token_endpoint_auth_signing_alg
            .is_some_and(|pinned| pinned != self.alg)
        {
            return Err(AssertionError::UnsupportedAlgorithm);
        }
        let key = keys
            .find(self.kid.as_deref(), self.alg)
            .map_err(|lookup| match lookup {
                KeyLookup::UnknownKid => AssertionError::UnknownKid,
                _ => AssertionError::NoKey,
            })?;
        // The signature first: no claim counts before it verifies.
        if !super::signature::verify(
            self.alg,
            &key.key,
            self.signing_input.as_bytes(),
            &self.signature,
        ) {
            return Err(AssertionError::BadSignature);
        }
        self.check_claims(audiences, now, leeway)
    }

    /// The claim rules of RFC 7523 §3 (items 1 to 7), on a verified JWS.
    #[cfg_attr(not(feature = "client-assertions"), allow(dead_code))]
    fn check_claims(
        &self,
        audiences: &[&str],
        now: Timestamp,
        leeway: Duration,
    ) -> Result<VerifiedAssertion, AssertionError> {
        let claims = &self.claims;
        if claims.get("sub").and_then(Value::as_str) != Some(self.iss.as_str()) {
            return Err(AssertionError::WrongSubject);
        }
        let ours = |v: &Value| v.as_str().is_some_and(|a| audiences.contains(&a));
        let audience_ok = match claims.get("aud") {
            Some(Value::Array(list)) => !list.is_empty() && list.iter().all(ours),
            Some(one) => ours(one),
            None => false,
        };
        if !audience_ok {
            return Err(AssertionError::WrongAudience);
        }
        let time = |name: &str| -> Result<Option<u64>, AssertionError> {
            match claims.get(name) {
                None => Ok(None),
                Some(v) => v.as_u64().map(Some).ok_or(AssertionError::Malformed),
            }
        };
        let now_secs = now.as_secs();
        let skew = leeway.as_secs();
        let exp = time("exp")?.ok_or(AssertionError::Expired)?;
        if exp.saturating_add(skew) <= now_secs {
            return Err(AssertionError::Expired);
        }
        if exp > now_secs.saturating_add(MAX_ASSERTION_LIFETIME.as_secs() + skew) {
            return Err(AssertionError::LifetimeTooLong);
        }
        for name in ["nbf", "iat"] {
            if time(name)?.is_some_and(|t| t > now_secs.saturating_add(skew)) {
                return Err(AssertionError::NotYetValid);
            }
        }
        let jti = match claims.get("jti") {
            Some(Value::String(jti)) if !jti.is_empty() && jti.len() <= MAX_JTI_LEN => jti,
            _ => return Err(AssertionError::MissingJti),
        };
        Ok(VerifiedAssertion {
            client_id: self.iss.clone(),
            jti_key: jti_key(&self.iss, jti),
            expires: Timestamp::from_secs(exp.saturating_add(skew)),
            text_digest: Sha256::digest(self.text.as_bytes()).into(),
        })
    }
}

/// The store key of a used `jti`: SHA-256 over the client id and the `jti`,
/// so a key is 32 bytes whatever their lengths, and one client's `jti`
/// never collides with another's.
fn jti_key(client_id: &str, jti: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(client_id.as_bytes());
    h.update([0]);
    h.update(jti.as_bytes());
    h.finalize().into()
}

/// A client assertion whose signature and claims have been checked: the
/// only way to present `private_key_jwt` to the token endpoint. It is bound
/// to the exact assertion text it was made from, which the token endpoint
/// finds again in the request's form.
#[derive(Clone, PartialEq, Eq)]
pub struct VerifiedAssertion {
    client_id: String,
    jti_key: [u8; 32],
    expires: Timestamp,
    text_digest: [u8; 32],
}

impl fmt::Debug for VerifiedAssertion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VerifiedAssertion")
            .field("client_id", &self.client_id)
            .field("expires", &self.expires)
            .finish_non_exhaustive()
    }
}

impl VerifiedAssertion {
    /// The authenticated client.
    #[must_use]
    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    /// Until when its `jti` must be remembered (its `exp` plus the leeway).
    #[must_use]
    pub fn expires(&self) -> Timestamp {
        self.expires
    }

    /// The key its `jti` is remembered under.
    pub(crate) fn jti_key(&self) -> &[u8; 32] {
        &self.jti_key
    }

    /// Whether `text` is the assertion this was verified from.
    pub(crate) fn is_of(&self, text: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(text.as_bytes()).into();
        digest == self.text_digest
    }
}

/// Why a client assertion was refused: always `invalid_client` on the wire,
/// the variant is for the log.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AssertionError {
    /// The parameters or the JWS are malformed (one parameter without the
    /// other, not three base64url segments of JSON objects, `crit`, a time
    /// claim that is not a non-negative integer).
    Malformed,
    /// `client_assertion_type` is not the JWT bearer type.
    UnsupportedType,
    /// The `alg` is not an accepted asymmetric algorithm, or not the one the
    /// client's metadata pins.
    UnsupportedAlgorithm,
    /// The client does not authenticate with `private_key_jwt`.
    NotAnAssertionClient,
    /// `iss` is missing or is not the client (or the `client_id`
    /// parameter).
    WrongIssuer,
    /// `sub` is not the client.
    WrongSubject,
    /// No key of the set has the `kid` the assertion names (see
    /// [`PresentedAssertion::verify`] on fetching the set again).
    UnknownKid,
    /// No usable key of the set fits the assertion's `alg` (and `kid`).
    NoKey,
    /// The signature does not verify.
    BadSignature,
    /// `aud` does not name this authorization server.
    WrongAudience,
    /// `exp` is missing or past.
    Expired,
    /// `exp` lies further ahead than [`MAX_ASSERTION_LIFETIME`].
    LifetimeTooLong,
    /// `nbf` or `iat` lies in the future.
    NotYetValid,
    /// `jti` is missing, empty or too long.
    MissingJti,
    /// This `jti` was accepted before.
    Replayed,
}

impl Describe for AssertionError {
    fn describe<W: fmt::Write>(&self, f: &mut W) -> fmt::Result {
        f.write_str(match self {
            Self::Malformed => "the client assertion is malformed",
            Self::UnsupportedType => "client_assertion_type must be the JWT bearer type",
            Self::UnsupportedAlgorithm => "the client assertion's alg is not accepted",
            Self::NotAnAssertionClient => "the client does not authenticate with private_key_jwt",
            Self::WrongIssuer => "the client assertion's iss is not the client",
            Self::WrongSubject => "the client assertion's sub is not the client",
            Self::UnknownKid => "no key of the client's key set has the assertion's kid",
            Self::NoKey => "no key of the client's key set fits the assertion",
            Self::BadSignature => "the client assertion's signature does not verify",
            Self::WrongAudience => "the client assertion's aud does not name this server",
            Self::Expired => "the client assertion has expired",
            Self::LifetimeTooLong => "the client assertion expires too far in the future",
            Self::NotYetValid => "the client assertion is not valid yet",
            Self::MissingJti => "the client assertion has no usable jti",
            Self::Replayed => "the client assertion was used before",
        })
    }
}

display_by_describe!(AssertionError);

impl WireError for AssertionError {
    fn code(&self) -> ErrorCode {
        ErrorCode::InvalidClient
    }
}

#[cfg(feature = "std")]
impl std::error::Error for AssertionError {}
