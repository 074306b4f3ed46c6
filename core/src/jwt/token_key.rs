//! Asymmetric access-token keys: what a site signs with when services
//! other than the one holding the secret must check its tokens
//! ([`Algorithm::EdDsa`], feature `eddsa`; [`Algorithm::Es256`], feature
//! `es256`), and the public half a resource server verifies with.
//!
//! Signing is deterministic for both (Ed25519 by its definition, RFC 8032
//! §5.1.6; ECDSA with RFC 6979 nonces), so the core signs without drawing
//! randomness. Verification allocates nothing: the signature is decoded
//! into 64 bytes on the stack and checked over the signing input in place.
//! Ed25519 signatures are checked strictly (RFC 8032 §5.1.7, no small-order
//! keys, canonical `S`); ECDSA signatures must be the fixed-width `r || s`
//! of RFC 7518 §3.4 with a low `s` accepted as well as a high one.

use alloc::string::String;
use core::fmt;

use super::{Algorithm, KeyringError};

/// An asymmetric access-token key: a private key that signs and verifies,
/// or (a resource server's) a public key that only verifies. Prints as
/// elided.
#[derive(Clone)]
pub struct TokenKey(Inner);

#[allow(
    clippy::large_enum_variant,
    reason = "a keyring holds a handful of keys, built once; boxing would add a hop to every verify"
)]
#[derive(Clone)]
enum Inner {
    #[cfg(feature = "eddsa")]
    Ed25519 {
        signing: Option<ed25519_dalek::SigningKey>,
        verifying: ed25519_dalek::VerifyingKey,
    },
    #[cfg(feature = "es256")]
    P256 {
        signing: Option<p256::ecdsa::SigningKey>,
        verifying: p256::ecdsa::VerifyingKey,
    },
}

impl fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TokenKey({}, {})",
            self.algorithm(),
            if self.can_sign() { "private" } else { "public" }
        )
    }
}

impl TokenKey {
    /// An Ed25519 key from its 32-byte seed (RFC 8032 §5.1.5).
    #[cfg(feature = "eddsa")]
    #[must_use]
    pub fn ed25519(seed: &[u8; 32]) -> Self {
        let signing = ed25519_dalek::SigningKey::from_bytes(seed);
        let verifying = signing.verifying_key();
        Self(Inner::Ed25519 {
            signing: Some(signing),
            verifying,
        })
    }

    /// An Ed25519 public key (the JWK's `x`, RFC 8037 §2), which only
    /// verifies. A point that is not a valid public key is refused.
    #[cfg(feature = "eddsa")]
    pub fn ed25519_public(x: &[u8; 32]) -> Result<Self, KeyringError> {
        let verifying =
            ed25519_dalek::VerifyingKey::from_bytes(x).map_err(|_| KeyringError::InvalidKey)?;
        Ok(Self(Inner::Ed25519 {
            signing: None,
            verifying,
        }))
    }

    /// A P-256 key from its 32-byte secret scalar (the JWK's `d`, RFC 7518
    /// §6.2.2.1); zero or a scalar past the group order is refused.
    #[cfg(feature = "es256")]
    pub fn es256(scalar: &[u8; 32]) -> Result<Self, KeyringError> {
        let signing =
            p256::ecdsa::SigningKey::from_slice(scalar).map_err(|_| KeyringError::InvalidKey)?;
        let verifying = *signing.verifying_key();
        Ok(Self(Inner::P256 {
            signing: Some(signing),
            verifying,
        }))
    }

    /// A P-256 public key (the JWK's `x` and `y`), which only verifies. A
    /// point off the curve is refused.
    #[cfg(feature = "es256")]
    pub fn es256_public(x: &[u8; 32], y: &[u8; 32]) -> Result<Self, KeyringError> {
        let mut point = [0u8; 65];
        point[0] = 4;
        point[1..33].copy_from_slice(x);
        point[33..].copy_from_slice(y);
        let verifying = p256::ecdsa::VerifyingKey::from_sec1_bytes(&point)
            .map_err(|_| KeyringError::InvalidKey)?;
        Ok(Self(Inner::P256 {
            signing: None,
            verifying,
        }))
    }

    /// The public key of a JWK this build can verify with (Ed25519 with
    /// `eddsa`, P-256 with `es256`); `None` for any other.
    #[must_use]
    pub fn from_jwk(key: &crate::jwk::PublicKey) -> Option<Self> {
        match key {
            #[cfg(feature = "eddsa")]
            crate::jwk::PublicKey::Ed25519(x) => Self::ed25519_public(x).ok(),
            #[cfg(feature = "es256")]
            crate::jwk::PublicKey::P256 { x, y } => Self::es256_public(x, y).ok(),
            _ => None,
        }
    }

    /// The algorithm it signs and verifies with.
    #[must_use]
    pub fn algorithm(&self) -> Algorithm {
        match &self.0 {
            #[cfg(feature = "eddsa")]
            Inner::Ed25519 { .. } => Algorithm::EdDsa,
            #[cfg(feature = "es256")]
            Inner::P256 { .. } => Algorithm::Es256,
        }
    }

    /// Whether it holds the private key.
    #[must_use]
    pub fn can_sign(&self) -> bool {
        match &self.0 {
            #[cfg(feature = "eddsa")]
            Inner::Ed25519 { signing, .. } => signing.is_some(),
            #[cfg(feature = "es256")]
            Inner::P256 { signing, .. } => signing.is_some(),
        }
    }

    /// The signature of `message`; `None` for a public key.
    pub(crate) fn sign(&self, message: &[u8]) -> Option<[u8; 64]> {
        match &self.0 {
            #[cfg(feature = "eddsa")]
            Inner::Ed25519 { signing, .. } => {
                use ed25519_dalek::Signer as _;
                Some(signing.as_ref()?.sign(message).to_bytes())
            }
            #[cfg(feature = "es256")]
            Inner::P256 { signing, .. } => {
                use p256::ecdsa::signature::Signer as _;
                let signature: p256::ecdsa::Signature = signing.as_ref()?.sign(message);
                Some(signature.to_bytes().into())
            }
        }
    }

    /// Whether `signature` is this key's signature of `message`.
    pub(crate) fn verify(&self, message: &[u8], signature: &[u8; 64]) -> bool {
        match &self.0 {
            #[cfg(feature = "eddsa")]
            Inner::Ed25519 { verifying, .. } => {
                let signature = ed25519_dalek::Signature::from_bytes(signature);
                verifying.verify_strict(message, &signature).is_ok()
            }
            #[cfg(feature = "es256")]
            Inner::P256 { verifying, .. } => {
                use p256::ecdsa::signature::Verifier as _;
                p256::ecdsa::Signature::from_slice(signature)
                    .is_ok_and(|s| verifying.verify(message, &s).is_ok())
            }
        }
    }

    /// The public key as a JWK (RFC 7517 §4, RFC 8037 §2, RFC 7518 §6.2.1)
    /// with `kid`, `use: sig` and `alg`: an entry of a published key set.
    #[must_use]
    pub fn public_jwk(&self, kid: &str) -> serde_json::Value {
        let b64 = |bytes: &[u8]| super::b64::encode(bytes);
        let mut jwk = serde_json::Map::new();
        match &self.0 {
            #[cfg(feature = "eddsa")]
            Inner::Ed25519 { verifying, .. } => {
                jwk.insert("kty".into(), "OKP".into());
                jwk.insert("crv".into(), "Ed25519".into());
                jwk.insert("x".into(), b64(&verifying.to_bytes()).into());
            }
            #[cfg(feature = "es256")]
            Inner::P256 { verifying, .. } => {
                let point = verifying.to_sec1_point(false);
                let bytes = point.as_bytes();
                jwk.insert("kty".into(), "EC".into());
                jwk.insert("crv".into(), "P-256".into());
                jwk.insert("x".into(), b64(&bytes[1..33]).into());
                jwk.insert("y".into(), b64(&bytes[33..65]).into());
            }
        }
        jwk.insert("kid".into(), String::from(kid).into());
        jwk.insert("use".into(), "sig".into());
        jwk.insert("alg".into(), self.algorithm().as_str().into());
        serde_json::Value::Object(jwk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jwt::b64;

    /// RFC 8037 Appendix A.1's private key signs A.4's message to A.4's
    /// signature, byte for byte (Ed25519 is deterministic), and the public
    /// key of A.2 verifies it.
    #[cfg(feature = "eddsa")]
    #[test]
    fn rfc_8037_ed25519_vector() {
        let seed: [u8; 32] = b64::decode(b"nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A")
            .unwrap()
            .try_into()
            .unwrap();
        let key = TokenKey::ed25519(&seed);
        let message = b"eyJhbGciOiJFZERTQSJ9.RXhhbXBsZSBvZiBFZDI1NTE5IHNpZ25pbmc";
        let expected = b64::decode(
            b"hgyY0il_MGCjP0JzlnLWG1PPOt7-09PGcvMg3AIbQR6dWbhijcNR4ki4iylGjg5BhVsPt9g7sVvpAr_MuM0KAg",
        )
        .unwrap();
        let signature = key.sign(message).unwrap();
        assert_eq!(&signature[..], &expected[..]);
        let jwk = key.public_jwk("a");
        assert_eq!(jwk["x"], "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo");
        assert_eq!(
            (jwk["kty"].as_str(), jwk["alg"].as_str()),
            (Some("OKP"), Some("EdDSA"))
        );
        let public: [u8; 32] = b64::decode(b"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")
            .unwrap()
            .try_into()
            .unwrap();
        let public = TokenKey::ed25519_public(&public).unwrap();
        assert!(!public.can_sign() && public.sign(message).is_none());
        assert!(public.verify(message, &signature));
        let mut tampered = signature;
        tampered[0] ^= 1;
        assert!(!public.verify(message, &tampered));
        assert!(!public.verify(b"another message", &signature));
    }

    /// RFC 7515 Appendix A.3: the ES256 example's public key verifies its
    /// signature; a key of ours signs what it then verifies, and nothing
    /// else.
    #[cfg(feature = "es256")]
    #[test]
    fn rfc_7515_es256_vector_and_round_trip() {
        let x: [u8; 32] = b64::decode(b"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU")
            .unwrap()
            .try_into()
            .unwrap();
        let y: [u8; 32] = b64::decode(b"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0")
            .unwrap()
            .try_into()
            .unwrap();
        let public = TokenKey::es256_public(&x, &y).unwrap();
        let message = b"eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ";
        let signature: [u8; 64] = b64::decode(
            b"DtEhU3ljbEg8L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSApmWQxfKTUJqPP3-Kg6NU1Q",
        )
        .unwrap()
        .try_into()
        .unwrap();
        assert!(public.verify(message, &signature));
        assert!(!public.verify(&message[1..], &signature));
        // RFC 7515 A.3's private scalar signs to what its public key verifies.
        let d: [u8; 32] = b64::decode(b"jpsQnnGQmL-YBIffH1136cspYG6-0iY7X1fCE9-E9LI")
            .unwrap()
            .try_into()
            .unwrap();
        let key = TokenKey::es256(&d).unwrap();
        let ours = key.sign(b"a.b").unwrap();
        assert_eq!(key.sign(b"a.b").unwrap(), ours, "RFC 6979: deterministic");
        assert!(public.verify(b"a.b", &ours));
        assert_eq!(
            key.public_jwk("k")["x"],
            "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU"
        );
        assert_eq!(
            TokenKey::es256(&[0; 32]).err(),
            Some(KeyringError::InvalidKey)
        );
        assert_eq!(
            TokenKey::es256_public(&[1; 32], &[2; 32]).err(),
            Some(KeyringError::InvalidKey),
            "a point off the curve"
        );
    }
}
