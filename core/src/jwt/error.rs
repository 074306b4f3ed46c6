//! Errors of signing, verifying and managing keys.

use core::fmt;

use crate::describe::{Describe, display_by_describe, write_pieces};
use crate::error::{ErrorCode, WireError};

/// Why a numeric date claim was refused.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NumericDateFault {
    /// Not a JSON number (a string, a boolean, …).
    NotANumber,
    /// A number with a fraction or exponent; only integers are accepted.
    NotAnInteger,
    /// An integer outside `i64`.
    OutOfRange,
    /// A negative integer: a `NumericDate` counts seconds since the epoch and
    /// is non-negative (RFC 7519 §2).
    Negative,
}

impl NumericDateFault {
    const fn as_str(self) -> &'static str {
        match self {
            Self::NotANumber => "is not a number",
            Self::NotAnInteger => "is not an integer",
            Self::OutOfRange => "is out of range",
            Self::Negative => "is negative",
        }
    }
}

/// One of the three segments of a compact JWS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Segment {
    /// The protected header.
    Header,
    /// The claims.
    Payload,
    /// The signature.
    Signature,
}

impl Segment {
    const fn as_str(self) -> &'static str {
        match self {
            Self::Header => "header",
            Self::Payload => "payload",
            Self::Signature => "signature",
        }
    }
}

/// Why a token failed verification. Each variant is one check; none carries
/// token material.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VerifyError {
    /// Longer than [`super::MAX_TOKEN_LEN`].
    TooLong,
    /// Not exactly three `.`-separated segments.
    SegmentCount,
    /// A segment is empty, padded, uses another alphabet or is not canonical.
    Base64(Segment),
    /// The header is not a JSON object.
    HeaderMalformed,
    /// A header member appears twice.
    DuplicateHeaderMember,
    /// The header has no `alg`.
    MissingAlgorithm,
    /// `alg` is not the algorithm of the key the `kid` names (`none` never
    /// is).
    AlgorithmNotAllowed,
    /// `typ` is missing or not the expected type.
    TypeMismatch,
    /// The header has a `crit` member.
    CriticalHeader,
    /// The header has no `kid` and the keyring needs one.
    MissingKeyId,
    /// No key with this `kid`.
    UnknownKey,
    /// The key with this `kid` has been retired.
    RetiredKey,
    /// The signature does not match.
    BadSignature,
    /// The claims are not a JSON object of the expected shape.
    ClaimsMalformed,
    /// A claim appears twice.
    DuplicateClaim,
    /// `exp`, `nbf` or `iat` is not a non-negative integer in `i64` (RFC 7519
    /// §2: a `NumericDate` counts seconds since the epoch).
    InvalidNumericDate {
        /// The claim name.
        claim: &'static str,
        /// What was wrong with it.
        fault: NumericDateFault,
    },
    /// `exp` is missing.
    MissingExpiry,
    /// `exp` is in the past (beyond the leeway).
    Expired,
    /// `nbf` is in the future (beyond the leeway).
    NotYetValid,
    /// `iat` is in the future (beyond the leeway).
    IssuedInFuture,
    /// `aud` is missing.
    MissingAudience,
    /// `aud` does not contain the expected audience.
    AudienceMismatch,
    /// `iss` is missing or not the expected issuer.
    IssuerMismatch,
}

impl Describe for VerifyError {
    fn describe<W: fmt::Write>(&self, f: &mut W) -> fmt::Result {
        match self {
            Self::TooLong => f.write_str("token is longer than 8192 bytes"),
            Self::SegmentCount => f.write_str("token does not have exactly three segments"),
            Self::Base64(s) => write_pieces(
                f,
                &["token ", s.as_str(), " is not canonical unpadded base64url"],
            ),
            Self::HeaderMalformed => f.write_str("token header is not a JSON object"),
            Self::DuplicateHeaderMember => f.write_str("token header repeats a member"),
            Self::MissingAlgorithm => f.write_str("token header has no alg"),
            Self::AlgorithmNotAllowed => f.write_str("token alg is not its key's"),
            Self::TypeMismatch => f.write_str("token typ is missing or unexpected"),
            Self::CriticalHeader => f.write_str("token header has crit extensions"),
            Self::MissingKeyId => f.write_str("token header has no kid"),
            Self::UnknownKey => f.write_str("token kid names no known key"),
            Self::RetiredKey => f.write_str("token kid names a retired key"),
            Self::BadSignature => f.write_str("token signature is invalid"),
            Self::ClaimsMalformed => f.write_str("token claims are not a valid JSON object"),
            Self::DuplicateClaim => f.write_str("token claims repeat a member"),
            Self::InvalidNumericDate { claim, fault } => {
                write_pieces(f, &["token claim ", claim, " ", fault.as_str()])
            }
            Self::MissingExpiry => f.write_str("token has no exp"),
            Self::Expired => f.write_str("token has expired"),
            Self::NotYetValid => f.write_str("token is not valid yet (nbf)"),
            Self::IssuedInFuture => f.write_str("token was issued in the future (iat)"),
            Self::MissingAudience => f.write_str("token has no aud"),
            Self::AudienceMismatch => f.write_str("token aud does not match"),
            Self::IssuerMismatch => f.write_str("token iss does not match"),
        }
    }
}

display_by_describe!(VerifyError);

impl WireError for VerifyError {
    fn code(&self) -> ErrorCode {
        ErrorCode::InvalidToken
    }
}

#[cfg(feature = "std")]
impl std::error::Error for VerifyError {}

/// Why a token could not be signed.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignError {
    /// The keyring has no active key.
    NoActiveKey,
    /// The signed token would exceed [`super::MAX_TOKEN_LEN`], so it could
    /// never verify.
    TooLong,
}

impl fmt::Display for SignError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NoActiveKey => "keyring has no active signing key",
            Self::TooLong => "signed token would exceed 8192 bytes",
        })
    }
}

impl WireError for SignError {
    fn code(&self) -> ErrorCode {
        ErrorCode::ServerError
    }
}

#[cfg(feature = "std")]
impl std::error::Error for SignError {}

/// Why a keyring change was refused.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyringError {
    /// HS256 keys must be at least 32 bytes (RFC 7518 §3.2).
    KeyTooShort,
    /// A `kid` must be 1–64 characters of `A-Z a-z 0-9 - _ .`.
    InvalidKeyId,
    /// A key with this `kid` is already present.
    DuplicateKeyId,
    /// No key with this `kid`.
    UnknownKeyId,
    /// A retired key cannot become active again.
    KeyRetired,
    /// The active key cannot be retired; activate another first.
    RetiringActiveKey,
    /// The bytes are not a valid key of their algorithm (a point off the
    /// curve, a zero scalar).
    InvalidKey,
    /// A public key verifies but cannot sign, so it cannot be active.
    CannotSign,
}

impl fmt::Display for KeyringError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::KeyTooShort => "HS256 keys must be at least 32 bytes",
            Self::InvalidKeyId => "kid must be 1-64 characters of A-Z a-z 0-9 - _ .",
            Self::DuplicateKeyId => "a key with this kid already exists",
            Self::UnknownKeyId => "no key with this kid",
            Self::KeyRetired => "a retired key cannot be activated",
            Self::RetiringActiveKey => "the active key cannot be retired",
            Self::InvalidKey => "the bytes are not a valid key of their algorithm",
            Self::CannotSign => "a public key cannot be the active signing key",
        })
    }
}

impl WireError for KeyringError {
    fn code(&self) -> ErrorCode {
        ErrorCode::ServerError
    }
}

#[cfg(feature = "std")]
impl std::error::Error for KeyringError {}
