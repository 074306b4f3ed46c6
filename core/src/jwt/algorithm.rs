//! [`Algorithm`]: how an access token is signed.

use core::fmt;

/// How an access token is signed (RFC 7518 §3.1, RFC 8037 §3.1).
#[non_exhaustive]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Algorithm {
    /// HMAC-SHA256 under a secret the verifier shares: for a host that
    /// checks its own tokens, and for firmware. The default.
    #[default]
    Hs256,
    /// Ed25519 (RFC 8037): anyone with the published key set can verify.
    EdDsa,
    /// ECDSA on P-256 with SHA-256.
    Es256,
}

impl Algorithm {
    /// The `alg` header value.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Hs256 => "HS256",
            Self::EdDsa => "EdDSA",
            Self::Es256 => "ES256",
        }
    }

    /// The algorithm of `alg` exactly, if it is one this keyring signs with.
    #[must_use]
    pub fn from_name(alg: &str) -> Option<Self> {
        match alg {
            "HS256" => Some(Self::Hs256),
            "EdDSA" => Some(Self::EdDsa),
            "ES256" => Some(Self::Es256),
            _ => None,
        }
    }

    /// Length of a signature, in bytes.
    #[must_use]
    pub const fn signature_len(self) -> usize {
        match self {
            Self::Hs256 => 32,
            Self::EdDsa | Self::Es256 => 64,
        }
    }

    /// Whether this build signs and verifies with it (HS256 always; EdDSA
    /// and ES256 with their features).
    #[must_use]
    pub const fn supported(self) -> bool {
        match self {
            Self::Hs256 => true,
            Self::EdDsa => cfg!(feature = "eddsa"),
            Self::Es256 => cfg!(feature = "es256"),
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

crate::store::codec::unit_enum!(Algorithm {
    Hs256,
    EdDsa,
    Es256
});
