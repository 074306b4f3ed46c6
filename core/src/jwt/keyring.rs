//! Signing keys and the [`Keyring`] that rotates them.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

#[cfg(any(feature = "eddsa", feature = "es256"))]
use super::TokenKey;
use super::claims::{Claims, ClaimsRef, Expect, TokenType, Validation};
use super::compact::{self, Compact, SIGNATURE_64_B64_LEN, SIGNATURE_B64_LEN};
use super::{Algorithm, KeyringError, MAX_TOKEN_LEN, Segment, SignError, VerifyError, b64, json};
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
        if compact::parse_header(compact.header, typ)?.0 != Algorithm::Hs256 {
            return Err(VerifyError::AlgorithmNotAllowed);
        }
        self.check_signature(&compact)?;
        compact::with_decoded(compact.payload, Segment::Payload, Claims::parse)
    }

    /// Checks the MAC over the signing input, in constant time, before any
    /// claim byte is decoded (RFC 7515 §5.2 step 8).
    fn check_signature(&self, compact: &Compact<'_>) -> Result<(), VerifyError> {
        let signature = compact.signature_bytes::<32>()?;
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

/// What an entry signs and verifies with.
#[allow(
    clippy::large_enum_variant,
    reason = "a keyring holds a handful of keys, built once; boxing would add a hop to every verify"
)]
#[derive(Clone, Debug)]
enum Material {
    /// An HS256 key: tokens and every MAC the core derives.
    Hmac(SigningKey),
    /// An asymmetric access-token key.
    #[cfg(any(feature = "eddsa", feature = "es256"))]
    Token(TokenKey),
}

impl Material {
    /// The HS256 key, if this is one (always, in a build without
    /// asymmetric access tokens).
    #[cfg_attr(
        not(any(feature = "eddsa", feature = "es256")),
        expect(
            clippy::unnecessary_wraps,
            reason = "the same signature with and without the asymmetric features"
        )
    )]
    fn hmac(&self) -> Option<&SigningKey> {
        match self {
            Self::Hmac(key) => Some(key),
            #[cfg(any(feature = "eddsa", feature = "es256"))]
            Self::Token(_) => None,
        }
    }

    fn algorithm(&self) -> Algorithm {
        match self {
            Self::Hmac(_) => Algorithm::Hs256,
            #[cfg(any(feature = "eddsa", feature = "es256"))]
            Self::Token(key) => key.algorithm(),
        }
    }

    /// Checks the signature over the signing input (RFC 7515 §5.2 step 8),
    /// before any claim byte is decoded.
    fn check_signature(&self, compact: &Compact<'_>) -> Result<(), VerifyError> {
        match self {
            Self::Hmac(key) => key.check_signature(compact),
            #[cfg(any(feature = "eddsa", feature = "es256"))]
            Self::Token(key) => {
                let signature = compact.signature_bytes::<64>()?;
                if key.verify(compact.signing_input.as_bytes(), &signature) {
                    Ok(())
                } else {
                    Err(VerifyError::BadSignature)
                }
            }
        }
    }
}

#[derive(Clone, Debug)]
struct Entry {
    kid: KeyId,
    material: Material,
    state: KeyState,
    /// From when an access-token key signs, if it was scheduled
    /// ([`Keyring::schedule`]).
    active_from: Option<Timestamp>,
    /// From when an access-token key no longer verifies, if scheduled.
    retire_at: Option<Timestamp>,
    /// The encoded header this key writes, per [`TokenType`]: signing copies
    /// it, and verification recognises it byte for byte without decoding.
    headers: [String; TokenType::COUNT],
}

impl Entry {
    fn new(kid: KeyId, material: Material) -> Self {
        let alg = material.algorithm();
        let headers = TokenType::ALL.map(|typ| encoded_header(alg, typ, kid.as_str()));
        Self {
            kid,
            material,
            state: KeyState::Verifying,
            active_from: None,
            retire_at: None,
            headers,
        }
    }

    /// Whether it still verifies at `now`.
    fn verifies_at(&self, now: Timestamp) -> bool {
        self.state == KeyState::Verifying && self.retire_at.is_none_or(|at| now < at)
    }
}

/// Length of the base64url signature `alg` writes.
fn signature_b64_len(alg: Algorithm) -> usize {
    match alg.signature_len() {
        32 => SIGNATURE_B64_LEN,
        _ => SIGNATURE_64_B64_LEN,
    }
}

/// `base64url({"alg":…,"typ":…,"kid":…})`.
fn encoded_header(alg: Algorithm, typ: TokenType, kid: &str) -> String {
    let mut json = String::with_capacity(48 + kid.len());
    json.push_str(r#"{"alg":""#);
    json.push_str(alg.as_str());
    json.push_str(r#"","typ":""#);
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
/// Two kinds of key live here. **HS256 keys** ([`SigningKey`]) sign HS256
/// tokens and every MAC the core derives (authorization codes, refresh-token
/// tags, stateless client ids); one is active. **Access-token keys**
/// ([`TokenKey`](crate::jwt::TokenKey), features `eddsa` and `es256`) sign
/// the access tokens of a site that chose [`Algorithm::EdDsa`] or
/// [`Algorithm::Es256`], so that services holding only the published key
/// set ([`Keyring::public_key_set`]) can check them; one per algorithm is
/// active. A resource server's keyring holds only public keys
/// ([`Keyring::from_key_set`]) and verifies.
///
/// Rotation without logging anyone out: `insert` the new key (an
/// access-token key is then published, and verifies), `set_active` it
/// (new tokens use it; old tokens still verify), and `retire` the old key
/// once every token it signed has expired (or at once, to revoke them all).
/// An access-token key can instead carry its schedule
/// ([`Keyring::schedule`]): published from the moment it is in the keyring,
/// signing from its `active_from`, verifying until its `retire_at`. The
/// core reads the clock it is given, so every instance of a fleet holding
/// the same keys switches at the same instant, with no coordination. The
/// keyring lives in the host's secret storage, never in the [`Store`].
///
/// [`Store`]: crate::store::Store
#[derive(Clone, Debug, Default)]
pub struct Keyring {
    entries: Vec<Entry>,
    /// The active HS256 key.
    active: Option<usize>,
    /// The active access-token key of each asymmetric algorithm
    /// (`EdDSA`, `ES256`).
    signers: [Option<usize>; 2],
}

/// The slot of an asymmetric algorithm in [`Keyring::signers`].
fn signer_slot(alg: Algorithm) -> Option<usize> {
    match alg {
        Algorithm::Hs256 => None,
        Algorithm::EdDsa => Some(0),
        Algorithm::Es256 => Some(1),
    }
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

    /// Adds a verifying HS256 key.
    pub fn insert(&mut self, kid: &str, key: SigningKey) -> Result<(), KeyringError> {
        self.insert_material(kid, Material::Hmac(key))
    }

    /// Adds an access-token key: it verifies, and is published in
    /// [`Keyring::public_key_set`], from now on; `set_active` makes it the
    /// one new tokens of its algorithm are signed with.
    #[cfg(any(feature = "eddsa", feature = "es256"))]
    pub fn insert_token_key(&mut self, kid: &str, key: TokenKey) -> Result<(), KeyringError> {
        self.insert_material(kid, Material::Token(key))
    }

    fn insert_material(&mut self, kid: &str, material: Material) -> Result<(), KeyringError> {
        let kid = KeyId::parse(kid)?;
        if self.position(kid.as_str()).is_some() {
            return Err(KeyringError::DuplicateKeyId);
        }
        self.entries.push(Entry::new(kid, material));
        Ok(())
    }

    /// A keyring of the public keys of `set` this build verifies with
    /// (Ed25519 with `eddsa`, P-256 with `es256`; every other key is left
    /// out): what a resource server in another process checks a site's
    /// tokens with. Keys without a `kid` are left out too, since a token
    /// names the key that signed it.
    #[cfg(any(feature = "eddsa", feature = "es256"))]
    #[must_use]
    pub fn from_key_set(set: &crate::jwk::JwkSet) -> Self {
        let mut keyring = Self::new();
        for jwk in set.keys() {
            if let (Some(kid), Some(key)) = (jwk.kid.as_deref(), TokenKey::from_jwk(&jwk.key)) {
                let _ = keyring.insert_token_key(kid, key);
            }
        }
        keyring
    }

    /// Makes `kid` the key new tokens are signed with: the HS256 key (of
    /// HS256 tokens and every MAC) for an HS256 key, the access-token key of
    /// its algorithm for another.
    pub fn set_active(&mut self, kid: &str) -> Result<(), KeyringError> {
        let i = self.position(kid).ok_or(KeyringError::UnknownKeyId)?;
        let entry = &self.entries[i];
        if entry.state == KeyState::Retired {
            return Err(KeyringError::KeyRetired);
        }
        match &entry.material {
            Material::Hmac(_) => self.active = Some(i),
            #[cfg(any(feature = "eddsa", feature = "es256"))]
            Material::Token(key) => {
                if !key.can_sign() {
                    return Err(KeyringError::CannotSign);
                }
                if let Some(slot) = signer_slot(key.algorithm()) {
                    self.signers[slot] = Some(i);
                }
            }
        }
        Ok(())
    }

    /// Schedules the access-token key `kid`: it signs the tokens of its
    /// algorithm from `active_from` (the scheduled key whose `active_from`
    /// is the latest not after `now` signs; when none has begun, the key
    /// [`Keyring::set_active`] chose), and verifies until `retire_at`, when
    /// it also leaves the published key set. Meant for routine rotation: a
    /// new key is published at once and signs only once resource servers
    /// have had time to fetch it; the old one retires once every token it
    /// signed has expired. An HS256 key is [`KeyringError::CannotSign`]
    /// here: HS256 keys are made active by hand.
    pub fn schedule(
        &mut self,
        kid: &str,
        active_from: Timestamp,
        retire_at: Option<Timestamp>,
    ) -> Result<(), KeyringError> {
        let i = self.position(kid).ok_or(KeyringError::UnknownKeyId)?;
        let entry = &mut self.entries[i];
        // Without an access-token key kind, only HMAC keys exist.
        #[cfg(not(any(feature = "eddsa", feature = "es256")))]
        let _ = (active_from, retire_at);
        match &entry.material {
            Material::Hmac(_) => Err(KeyringError::CannotSign),
            #[cfg(any(feature = "eddsa", feature = "es256"))]
            Material::Token(key) => {
                if !key.can_sign() {
                    return Err(KeyringError::CannotSign);
                }
                entry.active_from = Some(active_from);
                entry.retire_at = retire_at;
                Ok(())
            }
        }
    }

    /// Retires `kid`: tokens it signed stop verifying at once, and an
    /// access-token key leaves the published key set.
    pub fn retire(&mut self, kid: &str) -> Result<(), KeyringError> {
        let i = self.position(kid).ok_or(KeyringError::UnknownKeyId)?;
        if self.active == Some(i) || self.signers.contains(&Some(i)) {
            return Err(KeyringError::RetiringActiveKey);
        }
        self.entries[i].state = KeyState::Retired;
        Ok(())
    }

    /// The `kid` of the active HS256 key.
    #[must_use]
    pub fn active_kid(&self) -> Option<&str> {
        self.active.map(|i| self.entries[i].kid.as_str())
    }

    /// The `kid` of the key new tokens of `alg` are signed with at `now`.
    #[must_use]
    pub fn active_kid_for(&self, alg: Algorithm, now: Timestamp) -> Option<&str> {
        self.active_index(alg, now)
            .map(|i| self.entries[i].kid.as_str())
    }

    /// The entry that signs `alg` at `now`: the scheduled key of `alg`
    /// whose `active_from` is the latest not after `now` (the later entry
    /// on a tie), still verifying; else the one `set_active` chose.
    fn active_index(&self, alg: Algorithm, now: Timestamp) -> Option<usize> {
        let Some(slot) = signer_slot(alg) else {
            return self.active;
        };
        let scheduled = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.material.algorithm() == alg && e.verifies_at(now))
            .filter_map(|(i, e)| {
                e.active_from
                    .filter(|from| *from <= now)
                    .map(|from| (from, i))
            })
            .max()
            .map(|(_, i)| i);
        scheduled.or(self.signers[slot].filter(|i| self.entries[*i].verifies_at(now)))
    }

    /// The active HS256 key, for deriving MACs other than token signatures.
    #[must_use]
    pub fn active_key(&self) -> Option<(&str, &SigningKey)> {
        self.active.and_then(|i| {
            let entry = &self.entries[i];
            entry.material.hmac().map(|key| (entry.kid.as_str(), key))
        })
    }

    /// An HS256 key that still verifies, by `kid` (the MACs' key: an
    /// access-token key is [`VerifyError::UnknownKey`] here).
    pub fn verifying_key(&self, kid: &str) -> Result<&SigningKey, VerifyError> {
        let entry = self
            .position(kid)
            .map(|i| &self.entries[i])
            .ok_or(VerifyError::UnknownKey)?;
        let key = entry.material.hmac().ok_or(VerifyError::UnknownKey)?;
        match entry.state {
            KeyState::Retired => Err(VerifyError::RetiredKey),
            KeyState::Verifying => Ok(key),
        }
    }

    /// The published key set at `now` (RFC 7517 §5): the public half of
    /// every access-token key that still verifies (scheduled ones from the
    /// moment they are in the keyring, before they sign), each with its
    /// `kid`, `use: sig` and `alg`; never an HS256 key. What a site serves
    /// at its `jwks_uri`.
    #[must_use]
    pub fn public_key_set(&self, now: Timestamp) -> String {
        #[cfg(any(feature = "eddsa", feature = "es256"))]
        let keys: Vec<serde_json::Value> = self
            .entries
            .iter()
            .filter(|e| e.verifies_at(now))
            .filter_map(|e| match &e.material {
                Material::Token(key) => Some(key.public_jwk(e.kid.as_str())),
                Material::Hmac(_) => None,
            })
            .collect();
        #[cfg(not(any(feature = "eddsa", feature = "es256")))]
        let keys: Vec<serde_json::Value> = {
            let _ = now;
            Vec::new()
        };
        let mut set = serde_json::Map::new();
        set.insert("keys".into(), serde_json::Value::Array(keys));
        let mut out = Vec::new();
        json::write_value(&mut out, &serde_json::Value::Object(set));
        // The writer writes UTF-8 JSON.
        String::from_utf8(out).unwrap_or_default()
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

    /// [`Keyring::sign_ref`] with the key of `alg` that signs at `now`
    /// (see [`Keyring::schedule`]): how a site signs its access tokens.
    pub fn sign_ref_with(
        &self,
        alg: Algorithm,
        typ: TokenType,
        claims: &ClaimsRef<'_>,
        now: Timestamp,
    ) -> Result<SecretString, SignError> {
        let entry = self
            .active_index(alg, now)
            .map(|i| &self.entries[i])
            .ok_or(SignError::NoActiveKey)?;
        Self::sign_entry(entry, typ, |out| claims.write_json(out))
    }

    /// The HS256 signer: `write_json` writes the payload JSON.
    fn sign_json(
        &self,
        typ: TokenType,
        write_json: impl FnOnce(&mut json::Spill),
    ) -> Result<SecretString, SignError> {
        let entry = self
            .active
            .map(|i| &self.entries[i])
            .ok_or(SignError::NoActiveKey)?;
        Self::sign_entry(entry, typ, write_json)
    }

    /// Signs with `entry`.
    fn sign_entry(
        entry: &Entry,
        typ: TokenType,
        write_json: impl FnOnce(&mut json::Spill),
    ) -> Result<SecretString, SignError> {
        let alg = entry.material.algorithm();
        let header = entry.headers[typ.index()].as_str();
        let mut json = json::Spill::new();
        write_json(&mut json);
        let json = json.as_bytes();
        let payload_at = header.len() + 1;
        let signed_len = payload_at + b64::encoded_len(json.len());
        let total = signed_len + 1 + signature_b64_len(alg);
        if total > MAX_TOKEN_LEN {
            return Err(SignError::TooLong);
        }
        let mut token = String::with_capacity(total);
        token.push_str(header);
        token.push('.');
        b64::encode_string(json, &mut token);
        match &entry.material {
            Material::Hmac(key) => {
                let signature = key.mac(token.as_bytes());
                token.push('.');
                b64::encode_string(&signature, &mut token);
            }
            #[cfg(any(feature = "eddsa", feature = "es256"))]
            Material::Token(key) => {
                let signature = key.sign(token.as_bytes()).ok_or(SignError::NoActiveKey)?;
                token.push('.');
                b64::encode_string(&signature, &mut token);
            }
        }
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
            now,
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
            now,
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
        now: Timestamp,
        check: impl FnOnce(&ClaimsRef<'_>) -> Result<(), VerifyError>,
        f: impl FnOnce(VerifiedRef<'_>) -> R,
    ) -> Result<R, VerifyError> {
        let (entry, compact) = self.signed_by(token, typ, now)?;
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
        now: Timestamp,
    ) -> Result<(&Entry, Compact<'t>), VerifyError> {
        // A header this keyring writes is recognised byte for byte, and
        // then the dots are where they must be; anything else is split in
        // full and goes through the strict header parser.
        let known = self.entries.iter().find_map(|e| {
            let header = &e.headers[typ.index()];
            let signature_len = signature_b64_len(e.material.algorithm());
            token
                .starts_with(header.as_str())
                .then(|| Compact::with_known_header(token, header.len(), signature_len))
                .flatten()
                .map(|compact| (e, compact))
        });
        let (entry, compact) = if let Some(known) = known {
            known
        } else {
            let compact = Compact::split(token)?;
            let (alg, kid) = compact::parse_header(compact.header, typ)?;
            let kid = kid.ok_or(VerifyError::MissingKeyId)?;
            let entry = self
                .position(&kid)
                .map(|i| &self.entries[i])
                .ok_or(VerifyError::UnknownKey)?;
            // The algorithm is the key's, whatever the header says
            // (RFC 8725 §3.1): an HS256 header never reaches a public key.
            if entry.material.algorithm() != alg {
                return Err(VerifyError::AlgorithmNotAllowed);
            }
            (entry, compact)
        };
        if !entry.verifies_at(now) {
            return Err(VerifyError::RetiredKey);
        }
        entry.material.check_signature(&compact)?;
        Ok((entry, compact))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jwt::Audience;
    #[cfg(any(feature = "eddsa", feature = "es256"))]
    use crate::jwt::TokenKey;
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

    /// An EdDSA and an ES256 key beside the HS256 one: each signs the access
    /// tokens of its algorithm, every one verifies with its own key only,
    /// and a keyring of the published set (a resource server's) verifies
    /// the asymmetric ones and signs nothing.
    #[cfg(all(feature = "eddsa", feature = "es256"))]
    #[test]
    fn asymmetric_keys_sign_verify_and_publish() {
        let mut k = keyring();
        k.insert_token_key("ed1", TokenKey::ed25519(&[3; 32]))
            .unwrap();
        k.insert_token_key("ec1", TokenKey::es256(&[4; 32]).unwrap())
            .unwrap();
        let c = claims();
        let v = Validation::new(TokenType::AccessToken, "r");
        let now = Timestamp::from_secs(10);
        assert_eq!(
            k.sign_ref_with(Algorithm::EdDsa, TokenType::AccessToken, &c.as_ref(), now)
                .err(),
            Some(SignError::NoActiveKey),
            "published, not yet active"
        );
        k.set_active("ed1").unwrap();
        k.set_active("ec1").unwrap();
        assert_eq!(k.active_kid(), Some("k1"), "the HS256 key stays active");
        assert_eq!(k.active_kid_for(Algorithm::EdDsa, now), Some("ed1"));
        let set = crate::jwk::JwkSet::parse(k.public_key_set(now).as_bytes()).unwrap();
        assert_eq!(
            set.keys().len(),
            2,
            "the two public keys, never the HS256 key"
        );
        let mut remote = Keyring::from_key_set(&set);
        for (alg, kid) in [(Algorithm::EdDsa, "ed1"), (Algorithm::Es256, "ec1")] {
            let token = k
                .sign_ref_with(alg, TokenType::AccessToken, &c.as_ref(), now)
                .unwrap();
            let text = token.expose_secret();
            assert_eq!(text.rsplit('.').next().unwrap().len(), 86);
            assert_eq!(k.verify(text, &v, now).unwrap().kid, kid);
            let verified = remote.verify(text, &v, now).unwrap();
            assert_eq!((verified.kid.as_str(), verified.claims), (kid, c.clone()));
            let mut tampered = String::from(text);
            tampered.pop();
            tampered.push(if text.ends_with('A') { 'B' } else { 'A' });
            assert!(remote.verify(&tampered, &v, now).is_err());
        }
        // HS256 tokens verify only where the secret is.
        let hs = k.sign(TokenType::AccessToken, &c).unwrap();
        assert_eq!(
            remote.verify(hs.expose_secret(), &v, now),
            Err(VerifyError::UnknownKey)
        );
        assert_eq!(remote.set_active("ed1"), Err(KeyringError::CannotSign));
        assert!(
            remote
                .sign_ref_with(Algorithm::EdDsa, TokenType::AccessToken, &c.as_ref(), now)
                .is_err()
        );
        assert!(k.verifying_key("ed1").is_err(), "no MAC under a token key");
        // Retired: out of the published set, and its tokens stop verifying.
        k.insert_token_key("ed2", TokenKey::ed25519(&[5; 32]))
            .unwrap();
        let old = k
            .sign_ref_with(Algorithm::EdDsa, TokenType::AccessToken, &c.as_ref(), now)
            .unwrap();
        k.set_active("ed2").unwrap();
        k.retire("ed1").unwrap();
        assert_eq!(
            k.verify(old.expose_secret(), &v, now),
            Err(VerifyError::RetiredKey)
        );
        let published = k.public_key_set(now);
        assert!(published.contains("\"ed2\"") && !published.contains("\"ed1\""));
        assert_eq!(k.retire("ed2"), Err(KeyringError::RetiringActiveKey));
    }

    /// Routine rotation on a schedule: the new key is published at once,
    /// signs from its `active_from`, and the old one verifies until its
    /// `retire_at`; a resource server's keyring built from the set published
    /// before the switch verifies the new tokens.
    #[cfg(feature = "eddsa")]
    #[test]
    fn scheduled_rotation_publishes_first_then_signs_then_retires() {
        let mut ring = Keyring::new();
        let at = Timestamp::from_secs;
        ring.insert_token_key("old", TokenKey::ed25519(&[3; 32]))
            .unwrap();
        ring.schedule("old", at(0), None).unwrap();
        let signed_claims = claims();
        let sign = |ring: &Keyring, now| {
            ring.sign_ref_with(
                Algorithm::EdDsa,
                TokenType::AccessToken,
                &signed_claims.as_ref(),
                now,
            )
            .unwrap()
        };
        let old_token = sign(&ring, at(100));
        // The rotation: published at 100, signing from 1 100, the old key
        // retiring 300 s (an access token's life) after that.
        ring.insert_token_key("new", TokenKey::ed25519(&[4; 32]))
            .unwrap();
        ring.schedule("new", at(1_100), None).unwrap();
        ring.schedule("old", at(0), Some(at(1_400))).unwrap();
        let published_early = ring.public_key_set(at(100));
        assert!(published_early.contains("\"new\"") && published_early.contains("\"old\""));
        assert_eq!(
            ring.active_kid_for(Algorithm::EdDsa, at(1_099)),
            Some("old")
        );
        assert_eq!(
            ring.active_kid_for(Algorithm::EdDsa, at(1_100)),
            Some("new")
        );
        let remote =
            Keyring::from_key_set(&crate::jwk::JwkSet::parse(published_early.as_bytes()).unwrap());
        let validation = Validation::new(TokenType::AccessToken, "r");
        let new_token = sign(&ring, at(1_200));
        assert_eq!(
            remote
                .verify(new_token.expose_secret(), &validation, at(900))
                .unwrap()
                .kid,
            "new"
        );
        assert_eq!(
            ring.verify(old_token.expose_secret(), &validation, at(999))
                .unwrap()
                .kid,
            "old"
        );
        assert_eq!(
            ring.verify(old_token.expose_secret(), &validation, at(1_400)),
            Err(VerifyError::RetiredKey)
        );
        assert!(!ring.public_key_set(at(1_400)).contains("\"old\""));
        assert_eq!(ring.schedule("old", at(0), None), Ok(()));
        let mut hmac = keyring();
        assert_eq!(
            hmac.schedule("k1", at(0), None),
            Err(KeyringError::CannotSign)
        );
    }

    /// The algorithm is the key's (RFC 8725 §3.1): a token whose header
    /// names another `alg` for a key's `kid` is refused before any
    /// signature check, so an HS256 "signature" keyed with a public key is
    /// never tried.
    #[cfg(feature = "eddsa")]
    #[test]
    fn a_header_algorithm_other_than_the_keys_is_refused() {
        let mut k = Keyring::new();
        k.insert_token_key("ed1", TokenKey::ed25519(&[3; 32]))
            .unwrap();
        let public = k.public_key_set(Timestamp::EPOCH);
        let x = serde_json::from_str::<serde_json::Value>(&public).unwrap()["keys"][0]["x"]
            .as_str()
            .map(String::from)
            .unwrap();
        let header = b64::encode(br#"{"alg":"HS256","typ":"at+jwt","kid":"ed1"}"#);
        let payload = b64::encode(br#"{"aud":"r","exp":1000}"#);
        let input = format!("{header}.{payload}");
        let forged_key = SigningKey::from_bytes(x.as_bytes()).unwrap();
        let token = format!("{input}.{}", b64::encode(&forged_key.mac(input.as_bytes())));
        assert_eq!(
            k.verify(
                &token,
                &Validation::new(TokenType::AccessToken, "r"),
                Timestamp::from_secs(10)
            ),
            Err(VerifyError::AlgorithmNotAllowed)
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
