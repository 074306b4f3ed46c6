//! A `private_key_jwt` client's side, for tests: key pairs of each accepted
//! algorithm, the JWK Set a client publishes, and client assertions signed
//! as RFC 7523 §2.2 has a client make them. Built on `ring` (the RSA key is
//! a committed fixture, `tests/fixtures/client-rsa-2048.pk8`: ring makes no
//! RSA keys). Shared with `axum/tests` through `#[path]`.

#![allow(dead_code, reason = "each test binary uses part of it")]

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, Ed25519KeyPair, KeyPair as _, RsaKeyPair};
use serde_json::{Value, json};

/// The RSA key pair every RS256/PS256 test client uses (PKCS#8, 2048 bits).
const RSA_PKCS8: &[u8] = include_bytes!("fixtures/client-rsa-2048.pk8");

enum Signer {
    Rsa(RsaKeyPair, &'static dyn signature::RsaEncoding),
    Ec(EcdsaKeyPair),
    Ed(Ed25519KeyPair),
}

/// One signing key of a test client, with its `kid` and algorithm.
pub(crate) struct ClientKey {
    alg: &'static str,
    kid: String,
    signer: Signer,
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

impl ClientKey {
    /// An RS256 key (the algorithm ChatGPT's documents pin).
    pub(crate) fn rs256(kid: &str) -> Self {
        Self::rsa("RS256", kid, &signature::RSA_PKCS1_SHA256)
    }

    /// A PS256 key.
    pub(crate) fn ps256(kid: &str) -> Self {
        Self::rsa("PS256", kid, &signature::RSA_PSS_SHA256)
    }

    fn rsa(alg: &'static str, kid: &str, encoding: &'static dyn signature::RsaEncoding) -> Self {
        let pair = RsaKeyPair::from_pkcs8(RSA_PKCS8).expect("the fixture is an RSA key");
        Self {
            alg,
            kid: kid.into(),
            signer: Signer::Rsa(pair, encoding),
        }
    }

    /// A fresh ES256 key.
    pub(crate) fn es256(kid: &str) -> Self {
        let rng = SystemRandom::new();
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
        Self {
            alg: "ES256",
            kid: kid.into(),
            signer: Signer::Ec(EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap()),
        }
    }

    /// A fresh Ed25519 key.
    pub(crate) fn eddsa(kid: &str) -> Self {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        Self {
            alg: "EdDSA",
            kid: kid.into(),
            signer: Signer::Ed(Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap()),
        }
    }

    /// The key's `kid`.
    pub(crate) fn kid(&self) -> &str {
        &self.kid
    }

    /// The key's public JWK (RFC 7517 §4, RFC 7518 §6, RFC 8037 §2).
    pub(crate) fn jwk(&self) -> Value {
        let mut jwk = match &self.signer {
            Signer::Rsa(pair, _) => {
                let public: signature::RsaPublicKeyComponents<Vec<u8>> = pair.public().into();
                json!({ "kty": "RSA", "n": b64(&public.n), "e": b64(&public.e) })
            }
            Signer::Ec(pair) => {
                let point = pair.public_key().as_ref();
                json!({
                    "kty": "EC", "crv": "P-256",
                    "x": b64(&point[1..33]), "y": b64(&point[33..65]),
                })
            }
            Signer::Ed(pair) => {
                json!({ "kty": "OKP", "crv": "Ed25519", "x": b64(pair.public_key().as_ref()) })
            }
        };
        jwk["kid"] = json!(self.kid);
        jwk["use"] = json!("sig");
        jwk["alg"] = json!(self.alg);
        jwk
    }

    /// A JWK Set of `keys` (RFC 7517 §5).
    pub(crate) fn jwks(keys: &[&Self]) -> String {
        json!({ "keys": keys.iter().map(|k| k.jwk()).collect::<Vec<_>>() }).to_string()
    }

    /// A compact JWS of `claims` under this key, with `header` as given
    /// (tests make wrong headers on purpose).
    pub(crate) fn sign_with_header(&self, header: &Value, claims: &Value) -> String {
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let rng = SystemRandom::new();
        let sig = match &self.signer {
            Signer::Rsa(pair, encoding) => {
                let mut sig = vec![0; pair.public().modulus_len()];
                pair.sign(*encoding, &rng, input.as_bytes(), &mut sig)
                    .unwrap();
                sig
            }
            Signer::Ec(pair) => pair.sign(&rng, input.as_bytes()).unwrap().as_ref().to_vec(),
            Signer::Ed(pair) => pair.sign(input.as_bytes()).as_ref().to_vec(),
        };
        format!("{input}.{}", b64(&sig))
    }

    /// A client assertion with this key's own `alg` and `kid`.
    pub(crate) fn sign(&self, claims: &Value) -> String {
        self.sign_with_header(
            &json!({ "alg": self.alg, "kid": self.kid, "typ": "JWT" }),
            claims,
        )
    }

    /// The assertion a `private_key_jwt` client makes (RFC 7523 §3): `iss`
    /// and `sub` the client, `aud` the server, a fresh `jti`, valid from
    /// `now` for 60 s.
    pub(crate) fn assertion(&self, client_id: &str, aud: &str, now: u64) -> String {
        self.sign(&claims(client_id, aud, now))
    }
}

/// RFC 7523 §3 claims of a client assertion made at `now`, with a random
/// `jti`.
pub(crate) fn claims(client_id: &str, aud: &str, now: u64) -> Value {
    let mut jti = [0u8; 16];
    ring::rand::SecureRandom::fill(&SystemRandom::new(), &mut jti).unwrap();
    json!({
        "iss": client_id,
        "sub": client_id,
        "aud": aud,
        "iat": now,
        "exp": now + 60,
        "jti": b64(&jti),
    })
}
