//! Client authentication with a signed JWT: `private_key_jwt` (RFC 7523
//! §2.2 and §3, with the parameters of RFC 7521 §4.2), for clients
//! identified by a metadata document that publishes a key set.
//!
//! The flow is sans-IO in two steps, so the costly signature check never
//! runs inside a store transaction:
//!
//! Reading and checking an assertion needs the `client-assertions` feature
//! (its signature check is `ring`'s); without it no assertion is accepted,
//! and documents are never given `private_key_jwt`.
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
//!   JSON object with an `alg` from [`SignatureAlgorithm`](crate::jwk::SignatureAlgorithm) (asymmetric only:
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
use core::fmt;
use core::time::Duration;

#[cfg(feature = "client-assertions")]
use sha2::{Digest, Sha256};

use crate::describe::{Describe, display_by_describe};
use crate::error::{ErrorCode, WireError};
use crate::time::Timestamp;

#[cfg(feature = "client-assertions")]
mod presented;
#[cfg(feature = "client-assertions")]
pub use presented::PresentedAssertion;

/// The one `client_assertion_type` accepted (RFC 7523 §2.2).
pub const CLIENT_ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
/// Longest client assertion read, in bytes.
pub const MAX_ASSERTION_LEN: usize = 8 * 1024;
/// Longest `jti`, in bytes.
pub const MAX_JTI_LEN: usize = 256;
/// The furthest in the future an assertion's `exp` may lie: an hour, as
/// Cloudflare's provider allows (docs/clients.md); RFC 7523 §3 item 4 lets
/// the server refuse one "unreasonably far in the future", and the `jti`s
/// remembered are bounded by it.
pub const MAX_ASSERTION_LIFETIME: Duration = Duration::from_hours(1);

/// A client assertion whose signature and claims have been checked: the
/// only way to present `private_key_jwt` to the token endpoint. It is bound
/// to the exact assertion text it was made from, which the token endpoint
/// finds again in the request's form.
#[derive(Clone, PartialEq, Eq)]
pub struct VerifiedAssertion {
    pub(super) client_id: String,
    pub(super) jti_key: [u8; 32],
    pub(super) expires: Timestamp,
    pub(super) text_digest: [u8; 32],
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
    #[cfg(feature = "client-assertions")]
    pub(crate) fn jti_key(&self) -> &[u8; 32] {
        &self.jti_key
    }

    /// Whether `text` is the assertion this was verified from.
    #[cfg(feature = "client-assertions")]
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
