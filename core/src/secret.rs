//! Secret values: tokens, codes and digests that must never leak.
//!
//! Every type here prints as elided in `Debug`, has no `Display`, and compares
//! in constant time (`subtle`), so neither a log line nor a timing side
//! channel reveals it. Reading the value takes a call named for what it is
//! ([`SecretString::expose_secret`]), so every use reads as handling a secret.

use alloc::string::String;
use core::fmt;

use subtle::ConstantTimeEq;

/// A secret text value: an access or refresh token, an authorization code, a
/// client secret.
#[derive(Clone)]
pub struct SecretString(String);

impl SecretString {
    /// Wraps a secret.
    #[must_use]
    pub fn new(secret: String) -> Self {
        Self(secret)
    }

    /// The secret text. Send it to its owner; never log it.
    #[must_use]
    pub fn expose_secret(&self) -> &str {
        &self.0
    }

    /// Unwraps the secret text.
    #[must_use]
    pub fn into_exposed_secret(self) -> String {
        self.0
    }
}

impl From<String> for SecretString {
    fn from(secret: String) -> Self {
        Self(secret)
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretString(..)")
    }
}

impl PartialEq for SecretString {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_bytes().ct_eq(other.0.as_bytes()).into()
    }
}

impl Eq for SecretString {}

/// A 32-byte secret digest or MAC tag (SHA-256 / HMAC-SHA256 output).
#[derive(Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct Digest32([u8; 32]);

impl Digest32 {
    /// Wraps 32 bytes.
    #[must_use]
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The digest bytes.
    #[must_use]
    pub const fn expose_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Constant-time comparison with a candidate of any length.
    #[must_use]
    pub fn ct_matches(&self, candidate: &[u8]) -> bool {
        self.0.as_slice().ct_eq(candidate).into()
    }
}

impl fmt::Debug for Digest32 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Digest32(..)")
    }
}

impl PartialEq for Digest32 {
    fn eq(&self, other: &Self) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl Eq for Digest32 {}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    #[test]
    fn debug_never_shows_the_secret() {
        let s = SecretString::new(String::from("hunter2-refresh"));
        assert_eq!(format!("{s:?}"), "SecretString(..)");
        let d = Digest32::from_bytes([0xAB; 32]);
        assert!(!format!("{d:?}").contains("ab"));
        assert!(!format!("{d:?}").contains("171"));
    }

    #[test]
    fn equality_compares_content() {
        let a = SecretString::new(String::from("abc"));
        assert_eq!(a, SecretString::new(String::from("abc")));
        assert_ne!(a, SecretString::new(String::from("abd")));
        assert_ne!(a, SecretString::new(String::from("ab")));
        assert!(Digest32::from_bytes([1; 32]).ct_matches(&[1; 32]));
        assert!(!Digest32::from_bytes([1; 32]).ct_matches(&[1; 31]));
    }
}
