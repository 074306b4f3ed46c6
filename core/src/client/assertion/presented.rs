//! [`PresentedAssertion`]: reading a client assertion from a form and
//! checking it (feature `client-assertions`).

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::{
    AssertionError, CLIENT_ASSERTION_TYPE, MAX_ASSERTION_LEN, MAX_ASSERTION_LIFETIME, MAX_JTI_LEN,
    VerifiedAssertion,
};
use crate::client::metadata::TokenEndpointAuthMethod;
use crate::client::{Client, parse_json_object};
use crate::form::Form;
use crate::jwk::{JwkSet, KeyLookup, SignatureAlgorithm};
use crate::jwt::b64;
use crate::time::Timestamp;

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
                .and_then(|bytes| parse_json_object(&bytes).ok())
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
    /// [module docs](super) but the single use of `jti`, which the token
    /// endpoint's transaction enforces.
    ///
    /// [`AssertionError::UnknownKid`] means the key set has no key of the
    /// `kid` the assertion names: the client may have rotated its keys
    /// since the set was cached, so the host may fetch it again (once, and
    /// not more often than its refetch interval) and verify again.
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
        if !crate::client::signature::verify(
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
