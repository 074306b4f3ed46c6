//! JSON Web Keys (RFC 7517) and the JWS signature algorithms (RFC 7518 §3,
//! RFC 8037 §3.1) this server accepts from a client: the public key set a
//! `private_key_jwt` client publishes at its `jwks_uri`, parsed strictly.
//!
//! What a key set must be to be read at all:
//!
//! * at most [`MAX_KEY_SET_LEN`] bytes, checked before parsing, and one JSON
//!   object with no member name repeated at any depth, whose `keys` is an
//!   array of at most [`MAX_KEYS`] objects (RFC 7517 §5);
//! * **no private key material anywhere**: a key carrying `d`, `p`, `q`,
//!   `dp`, `dq`, `qi`, `oth` or `k` refuses the whole set. A private key
//!   published at a public URL is no longer private, so no key of that set
//!   can prove who signed anything;
//! * no two usable keys with the same `kid` (the lookup would be ambiguous).
//!
//! Keys that cannot verify a signature are skipped, as RFC 7517 §5 asks of
//! members a reader does not understand: an unknown `kty` or curve, `oct`
//! (a shared secret is never taken from a public set: no HMAC with a public
//! key, RFC 8725 §2.1), `use` other than `sig` (§4.2), `key_ops` without
//! `verify` (§4.3), an `alg` that is not a signature algorithm of the key's
//! type (§4.4). What is kept: RSA keys of 2048 to 8192 bits (RFC 7518
//! §6.3, §3.3 and §3.5 ask for at least 2048), P-256 and P-384 points
//! (§6.2) and Ed25519 keys (RFC 8037 §2).
//!
//! Nothing here checks a signature: see
//! [`client::assertion`](crate::client::assertion).

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde_json::{Map, Value};

use crate::describe::{Describe, display_by_describe};
use crate::error::{ErrorCode, WireError};
use crate::jwt::b64;

/// Largest key set read, in bytes (16 RSA-4096 keys fit with room to spare).
pub const MAX_KEY_SET_LEN: usize = 32 * 1024;
/// Most keys in one set.
pub const MAX_KEYS: usize = 16;
/// Longest `kid`, in bytes.
pub const MAX_KID_LEN: usize = 256;

/// Members that only a private or symmetric key has (RFC 7518 §6.2.2,
/// §6.3.2, §6.4.1; RFC 8037 §2).
const PRIVATE_MEMBERS: [&str; 8] = ["d", "p", "q", "dp", "dq", "qi", "oth", "k"];

/// A JWS signature algorithm accepted on a client assertion: asymmetric
/// only. `none` and the HMAC family are never accepted from a client, so a
/// public key can never be used as an HMAC secret (RFC 8725 §2.1, §3.1).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SignatureAlgorithm {
    /// RSASSA-PKCS1-v1_5 with SHA-256 (RFC 7518 §3.3).
    Rs256,
    /// RSASSA-PKCS1-v1_5 with SHA-384.
    Rs384,
    /// RSASSA-PKCS1-v1_5 with SHA-512.
    Rs512,
    /// RSASSA-PSS with SHA-256 and MGF1 (RFC 7518 §3.5).
    Ps256,
    /// RSASSA-PSS with SHA-384.
    Ps384,
    /// RSASSA-PSS with SHA-512.
    Ps512,
    /// ECDSA on P-256 with SHA-256 (RFC 7518 §3.4).
    Es256,
    /// ECDSA on P-384 with SHA-384.
    Es384,
    /// Ed25519 (RFC 8037 §3.1).
    EdDsa,
}

impl SignatureAlgorithm {
    /// Every accepted algorithm, in the order discovery documents list them.
    pub const ALL: [Self; 9] = [
        Self::Rs256,
        Self::Rs384,
        Self::Rs512,
        Self::Ps256,
        Self::Ps384,
        Self::Ps512,
        Self::Es256,
        Self::Es384,
        Self::EdDsa,
    ];

    /// The registered name (`RS256`, …, `EdDSA`).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Rs256 => "RS256",
            Self::Rs384 => "RS384",
            Self::Rs512 => "RS512",
            Self::Ps256 => "PS256",
            Self::Ps384 => "PS384",
            Self::Ps512 => "PS512",
            Self::Es256 => "ES256",
            Self::Es384 => "ES384",
            Self::EdDsa => "EdDSA",
        }
    }

    /// The algorithm named exactly `name` (case matters, RFC 7515 §4.1.1).
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.as_str() == name)
    }

    /// Whether `key` is of the type and curve this algorithm verifies with.
    #[must_use]
    pub fn fits(self, key: &PublicKey) -> bool {
        matches!(
            (self, key),
            (
                Self::Rs256 | Self::Rs384 | Self::Rs512 | Self::Ps256 | Self::Ps384 | Self::Ps512,
                PublicKey::Rsa { .. }
            ) | (Self::Es256, PublicKey::P256 { .. })
                | (Self::Es384, PublicKey::P384 { .. })
                | (Self::EdDsa, PublicKey::Ed25519(_))
        )
    }
}

impl fmt::Display for SignatureAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A public key, as its JWK members give it.
#[non_exhaustive]
#[derive(Clone, PartialEq, Eq)]
pub enum PublicKey {
    /// `kty: RSA`: the modulus and public exponent, big-endian without
    /// leading zeros (RFC 7518 §6.3.1).
    Rsa {
        /// `n`, 256 to 1024 bytes.
        n: Vec<u8>,
        /// `e`, 1 to 4 bytes.
        e: Vec<u8>,
    },
    /// `kty: EC, crv: P-256`: the point's coordinates (RFC 7518 §6.2.1).
    P256 {
        /// `x`.
        x: [u8; 32],
        /// `y`.
        y: [u8; 32],
    },
    /// `kty: EC, crv: P-384`.
    P384 {
        /// `x`.
        x: [u8; 48],
        /// `y`.
        y: [u8; 48],
    },
    /// `kty: OKP, crv: Ed25519`: the public key (RFC 8037 §2).
    Ed25519([u8; 32]),
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Rsa { n, .. } => write!(f, "Rsa({} bits)", n.len() * 8),
            Self::P256 { .. } => f.write_str("P256"),
            Self::P384 { .. } => f.write_str("P384"),
            Self::Ed25519(_) => f.write_str("Ed25519"),
        }
    }
}

/// One usable verification key of a set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Jwk {
    /// Its `kid`, if it has one.
    pub kid: Option<String>,
    /// The one algorithm its `alg` binds it to, if it names one.
    pub alg: Option<SignatureAlgorithm>,
    /// The key.
    pub key: PublicKey,
}

/// A parsed key set: the usable signature keys of a JWK Set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JwkSet {
    keys: Vec<Jwk>,
}

impl JwkSet {
    /// Parses a JWK Set document under the rules of the [module docs](self).
    pub fn parse(bytes: &[u8]) -> Result<Self, JwkError> {
        if bytes.len() > MAX_KEY_SET_LEN {
            return Err(JwkError::TooLarge);
        }
        let members = crate::client::parse_json_object(bytes).map_err(|_| JwkError::Malformed)?;
        let Some(Value::Array(entries)) = members.get("keys") else {
            return Err(JwkError::Malformed);
        };
        if entries.len() > MAX_KEYS {
            return Err(JwkError::TooManyKeys);
        }
        let mut keys: Vec<Jwk> = Vec::with_capacity(entries.len());
        for entry in entries {
            let Value::Object(jwk) = entry else {
                return Err(JwkError::Malformed);
            };
            if PRIVATE_MEMBERS.iter().any(|m| jwk.contains_key(*m)) {
                return Err(JwkError::PrivateKeyMaterial);
            }
            let Some(key) = read_key(jwk)? else {
                continue;
            };
            if key.kid.is_some() && keys.iter().any(|k| k.kid == key.kid) {
                return Err(JwkError::DuplicateKid);
            }
            keys.push(key);
        }
        Ok(Self { keys })
    }

    /// The usable keys, in the order the set listed them.
    #[must_use]
    pub fn keys(&self) -> &[Jwk] {
        &self.keys
    }

    /// The key that verifies a signature made with `alg` and, if the JWS
    /// header named one, `kid`:
    ///
    /// * with a `kid`, the key of that `kid`, which must fit `alg` and, if
    ///   the key names an `alg`, name this one;
    /// * without, the one key that fits `alg` (and whose own `alg`, if any,
    ///   is this one); two such keys are ambiguous and refused.
    pub fn find(&self, kid: Option<&str>, alg: SignatureAlgorithm) -> Result<&Jwk, KeyLookup> {
        let usable = |k: &&Jwk| alg.fits(&k.key) && k.alg.is_none_or(|a| a == alg);
        if let Some(kid) = kid {
            let key = self
                .keys
                .iter()
                .find(|k| k.kid.as_deref() == Some(kid))
                .ok_or(KeyLookup::UnknownKid)?;
            return if usable(&key) {
                Ok(key)
            } else {
                Err(KeyLookup::WrongKeyType)
            };
        }
        let mut fitting = self.keys.iter().filter(usable);
        match (fitting.next(), fitting.next()) {
            (Some(key), None) => Ok(key),
            (None, _) => Err(KeyLookup::NoKey),
            (Some(_), Some(_)) => Err(KeyLookup::Ambiguous),
        }
    }
}

/// One JWK of a set: `Ok(None)` when it is skipped (module docs).
fn read_key(jwk: &Map<String, Value>) -> Result<Option<Jwk>, JwkError> {
    let text = |name: &str| match jwk.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(_) => Err(JwkError::Malformed),
    };
    let Some(kty) = text("kty")? else {
        return Err(JwkError::Malformed);
    };
    if text("use")?.is_some_and(|u| u != "sig") {
        return Ok(None);
    }
    match jwk.get("key_ops") {
        None | Some(Value::Null) => {}
        Some(Value::Array(ops)) => {
            if !ops.iter().any(|op| op.as_str() == Some("verify")) {
                return Ok(None);
            }
        }
        Some(_) => return Err(JwkError::Malformed),
    }
    let kid = match text("kid")? {
        Some(kid) if kid.is_empty() || kid.len() > MAX_KID_LEN => return Err(JwkError::Malformed),
        kid => kid.map(String::from),
    };
    let key = match (kty, text("crv")?) {
        ("RSA", _) => {
            let n = member_bytes(text("n")?)?;
            let e = member_bytes(text("e")?)?;
            // Minimal big-endian integers (RFC 7518 §6.3.1.1, §6.3.1.2).
            let minimal = |v: &[u8]| v.first().is_some_and(|b| *b != 0);
            if !minimal(&n) || !minimal(&e) || !(256..=1024).contains(&n.len()) || e.len() > 4 {
                return Err(JwkError::WeakOrMalformedKey);
            }
            PublicKey::Rsa { n, e }
        }
        ("EC", Some("P-256")) => PublicKey::P256 {
            x: fixed(text("x")?)?,
            y: fixed(text("y")?)?,
        },
        ("EC", Some("P-384")) => PublicKey::P384 {
            x: fixed(text("x")?)?,
            y: fixed(text("y")?)?,
        },
        ("OKP", Some("Ed25519")) => PublicKey::Ed25519(fixed(text("x")?)?),
        // Other curves, `oct` and unknown types: not a key we verify with.
        _ => return Ok(None),
    };
    let alg = match text("alg")? {
        None => None,
        Some(name) => match SignatureAlgorithm::from_name(name) {
            Some(alg) if alg.fits(&key) => Some(alg),
            // An encryption algorithm, or one of another key type.
            _ => return Ok(None),
        },
    };
    Ok(Some(Jwk { kid, alg, key }))
}

/// A required base64url member's bytes.
fn member_bytes(text: Option<&str>) -> Result<Vec<u8>, JwkError> {
    text.and_then(|t| b64::decode(t.as_bytes()))
        .ok_or(JwkError::WeakOrMalformedKey)
}

/// A required base64url member of exactly `N` bytes.
fn fixed<const N: usize>(text: Option<&str>) -> Result<[u8; N], JwkError> {
    member_bytes(text)?
        .try_into()
        .map_err(|_| JwkError::WeakOrMalformedKey)
}

/// Why a key set was refused as a whole. None of the variants carries key
/// text.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JwkError {
    /// Larger than [`MAX_KEY_SET_LEN`].
    TooLarge,
    /// Not a JSON object with a `keys` array of objects, a member repeated,
    /// or a member of the wrong type.
    Malformed,
    /// More than [`MAX_KEYS`] keys.
    TooManyKeys,
    /// A key carries private or symmetric key material.
    PrivateKeyMaterial,
    /// Two usable keys share a `kid`.
    DuplicateKid,
    /// A key's members are not a valid key of its type, or an RSA key is
    /// shorter than 2048 bits.
    WeakOrMalformedKey,
}

impl Describe for JwkError {
    fn describe<W: fmt::Write>(&self, f: &mut W) -> fmt::Result {
        f.write_str(match self {
            Self::TooLarge => "the key set is larger than 32768 bytes",
            Self::Malformed => "the key set is not a JWK Set",
            Self::TooManyKeys => "the key set has more than 16 keys",
            Self::PrivateKeyMaterial => "the key set publishes private key material",
            Self::DuplicateKid => "the key set has two keys with one kid",
            Self::WeakOrMalformedKey => {
                "the key set has a malformed key or an RSA key under 2048 bits"
            }
        })
    }
}

display_by_describe!(JwkError);

impl WireError for JwkError {
    fn code(&self) -> ErrorCode {
        ErrorCode::InvalidClient
    }
}

#[cfg(feature = "std")]
impl std::error::Error for JwkError {}

/// Why no key of a set verifies a signature.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyLookup {
    /// No key has the `kid` the signature names: the client may have
    /// rotated its keys, so the host may fetch the set again (bounded).
    UnknownKid,
    /// The key of that `kid` is of another type than the algorithm, or
    /// bound to another algorithm.
    WrongKeyType,
    /// No `kid` was named and no key fits the algorithm.
    NoKey,
    /// No `kid` was named and several keys fit the algorithm.
    Ambiguous,
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    const N2048: &str = "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw";

    fn rsa(extra: &str) -> String {
        format!(r#"{{"kty":"RSA","n":"{N2048}","e":"AQAB"{extra}}}"#)
    }

    fn set(keys: &[String]) -> Result<JwkSet, JwkError> {
        JwkSet::parse(format!(r#"{{"keys":[{}]}}"#, keys.join(",")).as_bytes())
    }

    /// RFC 7517 Appendix A.1's public keys: an EC P-256 and an RSA key.
    #[test]
    fn the_rfc_7517_example_set_parses() {
        let doc = format!(
            r#"{{"keys":[{{"kty":"EC","crv":"P-256","x":"MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4","y":"4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM","use":"enc","kid":"1"}},{}]}}"#,
            rsa(r#","alg":"RS256","kid":"2011-04-29""#)
        );
        let keys = JwkSet::parse(doc.as_bytes()).unwrap();
        // The EC key is for encryption (`use: enc`): skipped.
        assert_eq!(keys.keys().len(), 1);
        let k = keys
            .find(Some("2011-04-29"), SignatureAlgorithm::Rs256)
            .unwrap();
        assert!(matches!(&k.key, PublicKey::Rsa { n, e } if n.len() == 256 && e == &[1, 0, 1]));
        assert_eq!(
            keys.find(Some("2011-04-29"), SignatureAlgorithm::Ps256)
                .err(),
            Some(KeyLookup::WrongKeyType),
            "its alg binds it to RS256"
        );
        assert_eq!(
            keys.find(Some("1"), SignatureAlgorithm::Es256).err(),
            Some(KeyLookup::UnknownKid)
        );
        assert!(keys.find(None, SignatureAlgorithm::Rs256).is_ok());
        assert_eq!(
            keys.find(None, SignatureAlgorithm::EdDsa).err(),
            Some(KeyLookup::NoKey)
        );
    }

    /// RFC 8037 Appendix A.2's Ed25519 public key.
    #[test]
    fn okp_ed25519_keys_parse() {
        let keys = set(&[String::from(
            r#"{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#,
        )])
        .unwrap();
        assert!(matches!(keys.keys()[0].key, PublicKey::Ed25519(x) if x[0] == 0xd7));
        assert!(keys.find(None, SignatureAlgorithm::EdDsa).is_ok());
    }

    #[test]
    fn private_material_refuses_the_whole_set() {
        for member in PRIVATE_MEMBERS {
            assert_eq!(
                set(&[rsa(&format!(r#","{member}":"AQAB""#))]),
                Err(JwkError::PrivateKeyMaterial),
                "{member}"
            );
        }
        assert_eq!(
            set(&[String::from(r#"{"kty":"oct","k":"c2VjcmV0"}"#)]),
            Err(JwkError::PrivateKeyMaterial)
        );
    }

    #[test]
    fn keys_that_cannot_verify_are_skipped() {
        for skipped in [
            String::from(r#"{"kty":"oct"}"#),
            String::from(r#"{"kty":"EC","crv":"secp256k1","x":"AA","y":"AA"}"#),
            String::from(r#"{"kty":"OKP","crv":"X25519","x":"AA"}"#),
            String::from(r#"{"kty":"future"}"#),
            rsa(r#","use":"enc""#),
            rsa(r#","key_ops":["encrypt"]"#),
            rsa(r#","alg":"RSA-OAEP""#),
            rsa(r#","alg":"ES256""#),
            rsa(r#","alg":"HS256""#),
            rsa(r#","alg":"none""#),
        ] {
            assert_eq!(
                set(core::slice::from_ref(&skipped)).unwrap().keys().len(),
                0,
                "{skipped}"
            );
        }
        assert_eq!(
            set(&[rsa(r#","key_ops":["verify"]"#)])
                .unwrap()
                .keys()
                .len(),
            1
        );
    }

    #[test]
    fn malformed_weak_oversized_and_ambiguous_sets_are_refused() {
        assert_eq!(JwkSet::parse(b"[]"), Err(JwkError::Malformed));
        assert_eq!(JwkSet::parse(br#"{"keys":{}}"#), Err(JwkError::Malformed));
        assert_eq!(JwkSet::parse(br#"{"keys":[1]}"#), Err(JwkError::Malformed));
        assert_eq!(
            JwkSet::parse(br#"{"keys":[{"n":"x"}]}"#),
            Err(JwkError::Malformed)
        );
        assert_eq!(
            JwkSet::parse(br#"{"keys":[],"keys":[]}"#),
            Err(JwkError::Malformed)
        );
        let short = String::from(r#"{"kty":"RSA","n":"AQAB","e":"AQAB"}"#);
        assert_eq!(set(&[short]), Err(JwkError::WeakOrMalformedKey));
        let leading_zero = format!(r#"{{"kty":"RSA","n":"AA{}","e":"AQAB"}}"#, &N2048[2..]);
        assert_eq!(set(&[leading_zero]), Err(JwkError::WeakOrMalformedKey));
        assert_eq!(
            set(&[String::from(
                r#"{"kty":"EC","crv":"P-256","x":"AAAA","y":"AAAA"}"#
            )]),
            Err(JwkError::WeakOrMalformedKey)
        );
        let same = rsa(r#","kid":"a""#);
        assert_eq!(set(&[same.clone(), same]), Err(JwkError::DuplicateKid));
        let many: Vec<String> = (0..=MAX_KEYS)
            .map(|i| rsa(&format!(r#","kid":"{i}""#)))
            .collect();
        assert_eq!(set(&many), Err(JwkError::TooManyKeys));
        let padding = " ".repeat(MAX_KEY_SET_LEN);
        assert_eq!(
            JwkSet::parse(format!(r#"{{"keys":[]}}{padding}"#).as_bytes()),
            Err(JwkError::TooLarge)
        );
        let two = set(&[rsa(r#","kid":"a""#), rsa(r#","kid":"b""#)]).unwrap();
        assert_eq!(
            two.find(None, SignatureAlgorithm::Rs256).err(),
            Some(KeyLookup::Ambiguous)
        );
        assert!(two.find(Some("b"), SignatureAlgorithm::Rs256).is_ok());
    }

    #[test]
    fn algorithms_are_named_exactly() {
        for alg in SignatureAlgorithm::ALL {
            assert_eq!(SignatureAlgorithm::from_name(alg.as_str()), Some(alg));
        }
        for name in ["none", "HS256", "rs256", "EDDSA", "ES256K", ""] {
            assert_eq!(SignatureAlgorithm::from_name(name), None, "{name}");
        }
    }
}
