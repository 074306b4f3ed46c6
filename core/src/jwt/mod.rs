//! JSON Web Tokens: compact JWS (RFC 7515) carrying JWT claims (RFC 7519),
//! signed with HMAC-SHA256 (RFC 7518 §3.2) or, for tokens that services
//! without the secret check, with Ed25519 (RFC 8037, feature `eddsa`) or
//! ECDSA P-256 (RFC 7518 §3.4, feature `es256`): [`Algorithm`],
//! [`TokenKey`](crate::jwt::Keyring::insert_token_key).
//!
//! * [`Keyring`] maps `kid` to [`SigningKey`]: one active key signs, every
//!   key not yet retired verifies, so rotating the signing key logs nobody
//!   out and retiring a key revokes every token it signed.
//! * The parser is strict on purpose (RFC 8725, JWT best current practice):
//!   the size bound is checked before any decoding; exactly three segments;
//!   unpadded base64url with canonical trailing bits and no other alphabet
//!   (RFC 7515 §2); the header must be a JSON object whose `alg` is the
//!   algorithm of the key its `kid` names (pinning the algorithm to the key,
//!   §3.1 of RFC 8725; never `none`) with the expected
//!   `typ` (§3.11) and no `crit` (RFC 7515 §4.1.11: we understand no
//!   extensions); duplicate member names are rejected (RFC 7515 §5.2 allows a
//!   parser to refuse them, and accepting them invites confusion between
//!   parsers); `exp`, `nbf` and `iat` must be JSON integers in `i64`.
//! * The signature is checked, in constant time, before the claims are
//!   parsed, so unauthenticated claim bytes never reach the JSON parser.
//! * The header and claims are read by a small hand-written strict JSON
//!   reader (no `serde_json`, no float parsing), borrowing from the decoded
//!   payload; [`Keyring::verify_with`] hands out [`ClaimsRef`] without
//!   copying, [`Keyring::verify`] owned [`Claims`]. Signing writes the
//!   token into one buffer.
//! * [`Validation`] then requires `aud` (RFC 7519 §4.1.3), checks `iss`,
//!   `exp` and `nbf` with a leeway of a few seconds.
//!
//! Errors ([`VerifyError`]) name the check that failed and never echo the
//! token.

mod algorithm;
pub(crate) mod b64;
mod claims;
mod compact;
mod error;
pub(crate) mod json;
mod keyring;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod oracle;
#[cfg(any(feature = "eddsa", feature = "es256"))]
mod token_key;

pub use algorithm::Algorithm;
pub(crate) use claims::Expect;
pub use claims::{Audience, AudienceRef, Claims, ClaimsRef, TokenType, Validation};
pub use error::{KeyringError, NumericDateFault, Segment, SignError, VerifyError};
pub use keyring::{KeyId, Keyring, MAX_KID_LEN, MIN_KEY_LEN, SigningKey, Verified, VerifiedRef};
#[cfg(any(feature = "eddsa", feature = "es256"))]
pub use token_key::TokenKey;

/// Largest token accepted, checked before any decoding.
pub const MAX_TOKEN_LEN: usize = 8 * 1024;
