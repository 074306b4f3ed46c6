//! Signing keys and the [`Keyring`] that rotates them.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::claims::{Claims, ClaimsRef, Expect, TokenType, Validation};
use super::compact::{self, Compact, SIGNATURE_B64_LEN};
use super::{KeyringError, MAX_TOKEN_LEN, Segment, SignError, VerifyError, b64, json};
use crate::secret::SecretString;
use crate::time::Timestamp;

/// Smallest HS256 key: the hash output size (RFC 7518 §3.2).
pub const MIN_KEY_LEN: usize = 32;
/// Longest accepted `kid`.
pub const MAX_KID_LEN: usize = 64;

/// An HS256 key. Holds the HMAC state with the key already absorbed, so each
/// signature costs two compressions fewer; prints as elided.
#[derive(Clone)]
pub struct SigningKey {
    mac: Hmac<Sha256>,
}

impl SigningKey {
    /// A key from raw bytes; at least 32 of them (RFC 7518 §3.2).
    pub fn from_bytes(key: &[u8]) -> Result<Self, KeyringError> {
        if key.len() < MIN_KEY_LEN {
            return Err(KeyringError::KeyTooShort);
        }
        let mac = Hmac::<Sha256>::new_from_slice(key).map_err(|_| KeyringError::KeyTooShort)?;
        Ok(Self { mac })
    }

    /// HMAC-SHA256 of `data` under this key.
    #[must_use]
    pub fn mac(&self, data: &[u8]) -> [u8; 32] {
        let mut mac = self.mac.clone();
        mac.update(data);
        mac.finalize().into_bytes().into()
    }

    /// HMAC-SHA256 under this key of `label` and `parts`, each part
    /// length-prefixed so that no two different part lists share an input.
    /// The label separates uses of one key (refresh-token tags, client ids,
    /// code tags), so a MAC made for one purpose never validates another.
    #[must_use]
    pub fn mac_labeled(&self, label: &str, parts: &[&[u8]]) -> [u8; 32] {
        let mut mac = self.mac.clone();
        mac.update(&(label.len() as u64).to_be_bytes());
        mac.update(label.as_bytes());
        for part in parts {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac.finalize().into_bytes().into()
    }

    /// Verifies the structure, header and signature of `token` with this key
    /// alone, and returns its claims unvalidated: the caller must still run
    /// [`Validation::check_claims`]. A `kid` in the header is ignored.
    pub fn verify_signature(&self, token: &str, typ: TokenType) -> Result<Claims, VerifyError> {
        let compact = Compact::split(token)?;
        compact::parse_header(compact.header, typ)?;
        self.check_signature(&compact)?;
        compact::with_decoded(compact.payload, Segment::Payload, Claims::parse)
    }

    /// Checks the MAC over the signing input, in constant time, before any
    /// claim byte is decoded (RFC 7515 §5.2 step 8).
    fn check_signature(&self, compact: &Compact<'_>) -> Result<(), VerifyError> {
        let signature = compact.signature_bytes()?;
        let mut mac = self.mac.clone();
        mac.update(compact.signing_input.as_bytes());
        mac.verify_slice(&signature)
            .map_err(|_| VerifyError::BadSignature)
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningKey(..)")
    }
}

/// A key identifier (`kid`, RFC 7515 §4.1.4): 1–64 characters of
/// `A-Z a-z 0-9 - _ .`, so it can be written into a header unescaped.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeyId(String);

impl KeyId {
    /// Checks the `kid` grammar.
    pub fn parse(kid: &str) -> Result<Self, KeyringError> {
        let ok = (1..=MAX_KID_LEN).contains(&kid.len())
            && kid
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if ok {
            Ok(Self(kid.into()))
        } else {
            Err(KeyringError::InvalidKeyId)
        }
    }

    /// The identifier.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyState {
    /// Verifies; may become active.
    Verifying,
    /// Verifies nothing, forever.
    Retired,
}

#[derive(Clone, Debug)]
struct Entry {
    kid: KeyId,
    key: SigningKey,
    state: KeyState,
    /// The encoded header this key writes, per [`TokenType`]: signing copies
    /// it, and verification recognises it byte for byte without decoding.
    headers: [String; TokenType::COUNT],
}

/// `base64url({"alg":"HS256","typ":…,"kid":…})`.
fn encoded_header(typ: TokenType, kid: &str) -> String {
    let mut json = String::with_capacity(48 + kid.len());
    json.push_str(r#"{"alg":"HS256","typ":""#);
    json.push_str(typ.as_str());
    json.push_str(r#"","kid":""#);
    json.push_str(kid);
    json.push_str(r#""}"#);
    let mut out = alloc::vec![0; b64::encoded_len(json.len())];
    b64::encode_into(json.as_bytes(), &mut out);
    // Base64url is ASCII.
    String::from_utf8(out).unwrap_or_default()
}

/// The host's signing keys, by `kid`.
///
/// Rotation without logging anyone out: `insert` the new key, `set_active`
/// it (new tokens use it; old tokens still verify), and `retire` the old key
/// once every token it signed has expired (or at once, to revoke them all).
/// The keyring lives in the host's secret storage, never in the [`Store`].
///
/// [`Store`]: crate::store::Store
#[derive(Clone, Debug, Default)]
pub struct Keyring {
    entries: Vec<Entry>,
    active: Option<usize>,
}

/// A token that passed every check, its claims borrowed from the decoded
/// payload; see [`Keyring::verify_with`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedRef<'a> {
    /// The validated claims.
    pub claims: ClaimsRef<'a>,
    /// The `kid` of the key that verified it.
    pub kid: &'a str,
}

/// A token that passed every check, with its claims and the key that signed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// The validated claims.
    pub claims: Claims,
    /// The `kid` of the key that verified it.
    pub kid: String,
}

impl Keyring {
    /// An empty keyring.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a verifying key.
    pub fn insert(&mut self, kid: &str, key: SigningKey) -> Result<(), KeyringError> {
        let kid = KeyId::parse(kid)?;
        if self.position(kid.as_str()).is_some() {
            return Err(KeyringError::DuplicateKeyId);
        }
        let headers = TokenType::ALL.map(|typ| encoded_header(typ, kid.as_str()));
        self.entries.push(Entry {
            kid,
            key,
            state: KeyState::Verifying,
            headers,
        });
        Ok(())
    }

    /// Makes `kid` the key new tokens are signed with.
    pub fn set_active(&mut self, kid: &str) -> Result<(), KeyringError> {
        let i = self.position(kid).ok_or(KeyringError::UnknownKeyId)?;
        if self.entries[i].state == KeyState::Retired {
            return Err(KeyringError::KeyRetired);
        }
        self.active = Some(i);
        Ok(())
    }

    /// Retires `kid`: tokens it signed stop verifying at once.
    pub fn retire(&mut self, kid: &str) -> Result<(), KeyringError> {
        let i = self.position(kid).ok_or(KeyringError::UnknownKeyId)?;
        if self.active == Some(i) {
            return Err(KeyringError::RetiringActiveKey);
        }
        self.entries[i].state = KeyState::Retired;
        Ok(())
    }

    /// The `kid` of the active key.
    #[must_use]
    pub fn active_kid(&self) -> Option<&str> {
        self.active.map(|i| self.entries[i].kid.as_str())
    }

    /// The active key, for deriving MACs other than token signatures.
    #[must_use]
    pub fn active_key(&self) -> Option<(&str, &SigningKey)> {
        self.active
            .map(|i| (self.entries[i].kid.as_str(), &self.entries[i].key))
    }

    /// A key that still verifies, by `kid`.
    pub fn verifying_key(&self, kid: &str) -> Result<&SigningKey, VerifyError> {
        let entry = self
            .position(kid)
            .map(|i| &self.entries[i])
            .ok_or(VerifyError::UnknownKey)?;
        match entry.state {
            KeyState::Retired => Err(VerifyError::RetiredKey),
            KeyState::Verifying => Ok(&entry.key),
        }
    }

    fn position(&self, kid: &str) -> Option<usize> {
        self.entries.iter().position(|e| e.kid.as_str() == kid)
    }

    /// Signs `claims` as a compact JWS with the active key:
    /// `{"alg":"HS256","typ":…,"kid":…}` (RFC 7515 §7.1).
    ///
    /// The payload JSON is written by hand into a stack buffer (each value
    /// copied a word at a time and escaped only where it must be), which
    /// measures it; the token is then allocated once at its exact size and
    /// filled in one pass: the key's precomputed header segment, the
    /// payload encoded straight from the stack onto the token's end, the
    /// MAC from the key's pre-keyed state over what was just written, and
    /// its encoding. The only allocation is the token (claims over 1 KiB of
    /// JSON spill to the heap first).
    pub fn sign(&self, typ: TokenType, claims: &Claims) -> Result<SecretString, SignError> {
        self.sign_json(typ, |out| claims.write_json(out))
    }

    /// [`Keyring::sign`] for borrowed claims: what a caller holding the
    /// claims' parts elsewhere (a stored grant) signs without copying them
    /// into owned strings. The same bytes as [`Keyring::sign`] of the owned
    /// copy.
    pub fn sign_ref(
        &self,
        typ: TokenType,
        claims: &ClaimsRef<'_>,
    ) -> Result<SecretString, SignError> {
        self.sign_json(typ, |out| claims.write_json(out))
    }

    /// The signer: `write_json` writes the payload JSON.
    fn sign_json(
        &self,
        typ: TokenType,
        write_json: impl FnOnce(&mut json::Spill),
    ) -> Result<SecretString, SignError> {
        let entry = self
            .active
            .map(|i| &self.entries[i])
            .ok_or(SignError::NoActiveKey)?;
        let header = entry.headers[typ.index()].as_str();
        let mut json = json::Spill::new();
        write_json(&mut json);
        let json = json.as_bytes();
        let payload_at = header.len() + 1;
        let signed_len = payload_at + b64::encoded_len(json.len());
        let total = signed_len + 1 + SIGNATURE_B64_LEN;
        if total > MAX_TOKEN_LEN {
            return Err(SignError::TooLong);
        }
        let mut token = String::with_capacity(total);
        token.push_str(header);
        token.push('.');
        b64::encode_string(json, &mut token);
        let signature = entry.key.mac(token.as_bytes());
        token.push('.');
        b64::encode_string(&signature, &mut token);
        debug_assert_eq!(token.len(), total);
        Ok(SecretString::new(token))
    }

    /// Verifies `token` fully: structure, header, `kid`, signature, then
    /// `expect`'s claim checks at `now`; returns owned claims.
    pub fn verify(
        &self,
        token: &str,
        expect: &Validation,
        now: Timestamp,
    ) -> Result<Verified, VerifyError> {
        self.verify_with(token, expect, now, |v| Verified {
            claims: v.claims.into_owned(),
            kid: v.kid.into(),
        })
    }

    /// Verifies `token` like [`Keyring::verify`] and hands `f` the claims
    /// borrowed from the decoded payload, which lives on the stack for
    /// tokens up to 1 KiB of claims: the hot path of a bearer check then
    /// allocates nothing for the token.
    ///
    /// One pass over the token finds both dots; the header this keyring
    /// writes is recognised byte for byte (any other goes through the
    /// strict header parser); the MAC is checked in constant time before
    /// the payload is decoded; the alphabet is validated while decoding;
    /// the claims are read by a strict hand-written parser.
    pub fn verify_with<R>(
        &self,
        token: &str,
        expect: &Validation,
        now: Timestamp,
        f: impl FnOnce(VerifiedRef<'_>) -> R,
    ) -> Result<R, VerifyError> {
        self.verify_checked(
            token,
            expect.token_type(),
            |claims| expect.check_claims_ref(claims, now),
            f,
        )
    }

    /// [`Keyring::verify_with`] against borrowed expectations (a stored
    /// site's parts): the bearer check's path, which builds no string.
    pub(crate) fn verify_expect<R>(
        &self,
        token: &str,
        expect: &Expect<'_>,
        now: Timestamp,
        f: impl FnOnce(VerifiedRef<'_>) -> R,
    ) -> Result<R, VerifyError> {
        self.verify_checked(
            token,
            expect.typ,
            |claims| expect.check_claims_ref(claims, now),
            f,
        )
    }

    /// The verification both forms share: structure, header, `kid`,
    /// signature, then `check` on the claims, then `f`.
    fn verify_checked<R>(
        &self,
        token: &str,
        typ: TokenType,
        check: impl FnOnce(&ClaimsRef<'_>) -> Result<(), VerifyError>,
        f: impl FnOnce(VerifiedRef<'_>) -> R,
    ) -> Result<R, VerifyError> {
        let (entry, compact) = self.signed_by(token, typ)?;
        compact::with_decoded(compact.payload, Segment::Payload, |json| {
            let claims = ClaimsRef::parse(json)?;
            check(&claims)?;
            Ok(f(VerifiedRef {
                claims,
                kid: entry.kid.as_str(),
            }))
        })
    }

    /// The steps of [`Keyring::verify_checked`] before any claim byte is
    /// read: structure, header and `kid` find the entry, which must still
    /// verify and whose MAC must match. Not generic, so every form of
    /// verification shares one copy.
    fn signed_by<'t>(
        &self,
        token: &'t str,
        typ: TokenType,
    ) -> Result<(&Entry, Compact<'t>), VerifyError> {
        // A header this keyring writes is recognised byte for byte, and
        // then the dots are where they must be; anything else is split in
        // full and goes through the strict header parser.
        let known = self.entries.iter().find_map(|e| {
            let header = &e.headers[typ.index()];
            token
                .starts_with(header.as_str())
                .then(|| Compact::with_known_header(token, header.len()))
                .flatten()
                .map(|compact| (e, compact))
        });
        let (entry, compact) = if let Some(known) = known {
            known
        } else {
            let compact = Compact::split(token)?;
            let kid =
                compact::parse_header(compact.header, typ)?.ok_or(VerifyError::MissingKeyId)?;
            let entry = self
                .position(&kid)
                .map(|i| &self.entries[i])
                .ok_or(VerifyError::UnknownKey)?;
            (entry, compact)
        };
        if entry.state == KeyState::Retired {
            return Err(VerifyError::RetiredKey);
        }
        entry.key.check_signature(&compact)?;
        Ok((entry, compact))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jwt::Audience;
    use alloc::format;

    fn keyring() -> Keyring {
        let mut k = Keyring::new();
        k.insert("k1", SigningKey::from_bytes(&[1; 32]).unwrap())
            .unwrap();
        k.set_active("k1").unwrap();
        k
    }

    fn claims() -> Claims {
        Claims {
            aud: Some("r".into()),
            exp: Some(1_000),
            sub: Some("u".into()),
            ..Claims::default()
        }
    }

    /// Borrowed claims sign to the very bytes of their owned copy, with
    /// one audience or several, every member or none.
    #[test]
    fn sign_ref_writes_the_bytes_sign_does() {
        let k = keyring();
        let full = Claims {
            iss: Some("https://i.example".into()),
            aud: Some(Audience::Many(alloc::vec!["a".into(), "b\"c".into()])),
            nbf: Some(5),
            iat: Some(7),
            jti: Some("j".into()),
            client_id: Some("c".into()),
            scope: Some("skills:read".into()),
            gid: Some("g".into()),
            org_domain: Some("o.example".into()),
            ..claims()
        };
        for c in [claims(), full, Claims::default()] {
            for typ in TokenType::ALL {
                assert_eq!(
                    k.sign(typ, &c).unwrap().expose_secret(),
                    k.sign_ref(typ, &c.as_ref()).unwrap().expose_secret()
                );
            }
        }
    }

    #[test]
    fn sign_then_verify_round_trips() {
        let k = keyring();
        let t = k.sign(TokenType::AccessToken, &claims()).unwrap();
        let v = k
            .verify(
                t.expose_secret(),
                &Validation::new(TokenType::AccessToken, "r"),
                Timestamp::from_secs(10),
            )
            .unwrap();
        assert_eq!(v.claims, claims());
        assert_eq!(v.kid, "k1");
    }

    #[test]
    fn a_token_of_one_type_never_verifies_as_another() {
        let k = keyring();
        let t = k.sign(TokenType::AgentToken, &claims()).unwrap();
        let err = k.verify(
            t.expose_secret(),
            &Validation::new(TokenType::AccessToken, "r"),
            Timestamp::from_secs(10),
        );
        assert_eq!(err, Err(VerifyError::TypeMismatch));
    }

    #[test]
    fn rotation_keeps_old_tokens_until_retired() {
        let mut k = keyring();
        let old = k.sign(TokenType::AccessToken, &claims()).unwrap();
        k.insert("k2", SigningKey::from_bytes(&[2; 32]).unwrap())
            .unwrap();
        k.set_active("k2").unwrap();
        let v = Validation::new(TokenType::AccessToken, "r");
        let now = Timestamp::from_secs(10);
        assert!(k.verify(old.expose_secret(), &v, now).is_ok());
        let new = k.sign(TokenType::AccessToken, &claims()).unwrap();
        assert_eq!(k.verify(new.expose_secret(), &v, now).unwrap().kid, "k2");
        assert_eq!(k.retire("k2"), Err(KeyringError::RetiringActiveKey));
        k.retire("k1").unwrap();
        assert_eq!(
            k.verify(old.expose_secret(), &v, now),
            Err(VerifyError::RetiredKey)
        );
        assert_eq!(k.set_active("k1"), Err(KeyringError::KeyRetired));
    }

    #[test]
    fn keys_and_kids_are_validated() {
        assert_eq!(
            SigningKey::from_bytes(&[0; 31]).err(),
            Some(KeyringError::KeyTooShort)
        );
        let mut k = Keyring::new();
        for kid in ["", "a b", "\"", &"x".repeat(65)] {
            assert_eq!(
                k.insert(kid, SigningKey::from_bytes(&[0; 32]).unwrap()),
                Err(KeyringError::InvalidKeyId)
            );
        }
        k.insert("a", SigningKey::from_bytes(&[0; 32]).unwrap())
            .unwrap();
        assert_eq!(
            k.insert("a", SigningKey::from_bytes(&[0; 32]).unwrap()),
            Err(KeyringError::DuplicateKeyId)
        );
        assert_eq!(
            k.sign(TokenType::Jwt, &Claims::default()).err(),
            Some(SignError::NoActiveKey)
        );
    }

    #[test]
    fn debug_elides_key_material() {
        let k = keyring();
        let dbg = format!("{k:?}");
        assert!(dbg.contains("SigningKey(..)"));
        assert!(!dbg.contains("[1, 1"));
    }
}
