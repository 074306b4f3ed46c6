//! PKCE (RFC 7636) with the `S256` method only, as OAuth 2.1 §4.1.1 asks.
//!
//! * [`CodeVerifier`] enforces the verifier grammar of RFC 7636 §4.1: 43 to
//!   128 characters from the unreserved set `A-Z a-z 0-9 - . _ ~`.
//! * [`CodeChallenge`] is `BASE64URL(SHA256(verifier))` (§4.2), always 43
//!   characters. [`ChallengeMethod::parse`] refuses `plain` and a missing
//!   method: accepting either would let an attacker who sees the
//!   authorization request also redeem its code (the downgrade of §7.2).
//! * [`CodeChallenge::verify`] compares in constant time (§4.6).

use core::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::describe::{Describe, display_by_describe};
use crate::error::{ErrorCode, WireError};
use crate::jwt::b64;

/// Shortest verifier RFC 7636 §4.1 allows.
pub const VERIFIER_MIN_LEN: usize = 43;
/// Longest verifier RFC 7636 §4.1 allows.
pub const VERIFIER_MAX_LEN: usize = 128;
/// Length of an S256 challenge: 32 bytes in unpadded base64url.
pub const CHALLENGE_LEN: usize = 43;

/// A syntactically valid code verifier (RFC 7636 §4.1).
#[derive(Clone, Copy)]
pub struct CodeVerifier<'a>(&'a str);

impl<'a> CodeVerifier<'a> {
    /// Checks the verifier grammar.
    pub fn parse(verifier: &'a str) -> Result<Self, PkceError> {
        let len = verifier.len();
        if len < VERIFIER_MIN_LEN {
            return Err(PkceError::VerifierTooShort);
        }
        if len > VERIFIER_MAX_LEN {
            return Err(PkceError::VerifierTooLong);
        }
        if !verifier.bytes().all(is_unreserved) {
            return Err(PkceError::VerifierCharacter);
        }
        Ok(Self(verifier))
    }

    /// The verifier text. It is a secret until the code is redeemed.
    #[must_use]
    pub fn expose_secret(&self) -> &'a str {
        self.0
    }
}

impl fmt::Debug for CodeVerifier<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CodeVerifier(..)")
    }
}

/// The only accepted transformation, `S256` (RFC 7636 §4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChallengeMethod {
    /// `BASE64URL(SHA256(ASCII(verifier)))`.
    S256,
}

impl ChallengeMethod {
    /// Parses `code_challenge_method`. `None` means the parameter was absent,
    /// which RFC 7636 §4.3 would default to `plain`; we refuse it.
    pub fn parse(method: Option<&str>) -> Result<Self, PkceError> {
        match method {
            Some("S256") => Ok(Self::S256),
            Some("plain") => Err(PkceError::PlainRefused),
            Some(_) => Err(PkceError::UnknownMethod),
            None => Err(PkceError::MissingMethod),
        }
    }

    /// The wire name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        "S256"
    }
}

/// An S256 code challenge: the 32-byte SHA-256 of the verifier.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeChallenge(#[serde(deserialize_with = "crate::store::codec::byte_array")] [u8; 32]);

crate::store::codec::fields!(CodeChallenge(newtype));

impl CodeChallenge {
    /// Parses the `code_challenge` parameter sent with `method`.
    pub fn parse(challenge: &str, method: ChallengeMethod) -> Result<Self, PkceError> {
        let ChallengeMethod::S256 = method;
        if challenge.len() != CHALLENGE_LEN {
            return Err(PkceError::ChallengeMalformed);
        }
        let mut out = [0u8; 32];
        match b64::decode_into(challenge.as_bytes(), &mut out) {
            Some(32) => Ok(Self(out)),
            _ => Err(PkceError::ChallengeMalformed),
        }
    }

    /// The challenge a client derives from `verifier`.
    #[must_use]
    pub fn from_verifier(verifier: CodeVerifier<'_>) -> Self {
        Self(Sha256::digest(verifier.0.as_bytes()).into())
    }

    /// Whether `verifier` hashes to this challenge, compared in constant time.
    #[must_use]
    pub fn verify(&self, verifier: CodeVerifier<'_>) -> bool {
        let derived: [u8; 32] = Sha256::digest(verifier.0.as_bytes()).into();
        self.0.ct_eq(&derived).into()
    }

    /// The challenge in its wire form (43 characters of base64url).
    #[must_use]
    pub fn to_base64url(&self) -> alloc::string::String {
        b64::encode(&self.0)
    }
}

impl fmt::Debug for CodeChallenge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CodeChallenge(S256)")
    }
}

const fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Why a PKCE parameter was refused.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PkceError {
    /// The verifier is shorter than 43 characters.
    VerifierTooShort,
    /// The verifier is longer than 128 characters.
    VerifierTooLong,
    /// The verifier has a character outside `A-Z a-z 0-9 - . _ ~`.
    VerifierCharacter,
    /// `code_challenge_method=plain`: refused, S256 only.
    PlainRefused,
    /// No `code_challenge_method`: refused rather than defaulting to `plain`.
    MissingMethod,
    /// A method other than `S256` or `plain`.
    UnknownMethod,
    /// The challenge is not 43 characters of base64url encoding 32 bytes.
    ChallengeMalformed,
}

impl Describe for PkceError {
    fn describe<W: fmt::Write>(&self, f: &mut W) -> fmt::Result {
        f.write_str(match self {
            Self::VerifierTooShort => "code_verifier is shorter than 43 characters",
            Self::VerifierTooLong => "code_verifier is longer than 128 characters",
            Self::VerifierCharacter => "code_verifier has a character outside the unreserved set",
            Self::PlainRefused => "code_challenge_method plain is not supported; use S256",
            Self::MissingMethod => "code_challenge_method is required and must be S256",
            Self::UnknownMethod => "code_challenge_method must be S256",
            Self::ChallengeMalformed => "code_challenge must be 43 characters of base64url",
        })
    }
}

display_by_describe!(PkceError);

impl WireError for PkceError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::VerifierTooShort | Self::VerifierTooLong | Self::VerifierCharacter => {
                ErrorCode::InvalidGrant
            }
            _ => ErrorCode::InvalidRequest,
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for PkceError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7636 Appendix B.
    const RFC_VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
    const RFC_CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";

    #[test]
    fn rfc7636_appendix_b_vector() {
        let v = CodeVerifier::parse(RFC_VERIFIER).unwrap();
        let c = CodeChallenge::from_verifier(v);
        assert_eq!(c.to_base64url(), RFC_CHALLENGE);
        let parsed = CodeChallenge::parse(RFC_CHALLENGE, ChallengeMethod::S256).unwrap();
        assert!(parsed.verify(v));
        let other = CodeVerifier::parse("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXK").unwrap();
        assert!(!parsed.verify(other));
    }

    #[test]
    fn verifier_bounds_and_alphabet() {
        assert_eq!(
            CodeVerifier::parse(&"a".repeat(42)).unwrap_err(),
            PkceError::VerifierTooShort
        );
        assert!(CodeVerifier::parse(&"a".repeat(43)).is_ok());
        assert!(CodeVerifier::parse(&"~".repeat(128)).is_ok());
        assert_eq!(
            CodeVerifier::parse(&"a".repeat(129)).unwrap_err(),
            PkceError::VerifierTooLong
        );
        let mut bad = "a".repeat(43);
        bad.push('+');
        assert_eq!(
            CodeVerifier::parse(&bad).unwrap_err(),
            PkceError::VerifierCharacter
        );
        assert_eq!(
            CodeVerifier::parse(&"é".repeat(30)).unwrap_err(),
            PkceError::VerifierCharacter
        );
    }

    #[test]
    fn only_s256_is_accepted() {
        assert_eq!(
            ChallengeMethod::parse(Some("S256")),
            Ok(ChallengeMethod::S256)
        );
        assert_eq!(
            ChallengeMethod::parse(Some("plain")),
            Err(PkceError::PlainRefused)
        );
        assert_eq!(
            ChallengeMethod::parse(Some("s256")),
            Err(PkceError::UnknownMethod)
        );
        assert_eq!(ChallengeMethod::parse(None), Err(PkceError::MissingMethod));
    }

    #[test]
    fn malformed_challenges_are_refused() {
        for c in [
            "",
            "abc",
            &RFC_CHALLENGE[..42],
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-c=",
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw+cM",
        ] {
            assert_eq!(
                CodeChallenge::parse(c, ChallengeMethod::S256).unwrap_err(),
                PkceError::ChallengeMalformed,
                "{c}"
            );
        }
    }
}
