//! Identifiers and fingerprints of the ledger: [`RequestId`] (the
//! client-chosen UUID), [`CodeFingerprint`] (what a request id is bound to),
//! [`ActionFingerprint`] (what an approval is bound to) and the private
//! lineage key that lets a request survive a scope upgrade.

use core::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::LedgerError;

/// A client-chosen request id: a UUID in its canonical text form
/// (RFC 9562 §4: `8-4-4-4-12` hexadecimal digits). Any version is accepted;
/// upper-case digits are accepted and mean the same id.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RequestId(#[serde(deserialize_with = "crate::store::codec::byte_array")] [u8; 16]);

crate::store::codec::fields!(RequestId(newtype));

impl RequestId {
    /// Parses the canonical text form; anything else is `INVALID_PARAMS`.
    pub fn parse(text: &str) -> Result<Self, LedgerError> {
        let b = text.as_bytes();
        if b.len() != 36 {
            return Err(LedgerError::InvalidRequestId);
        }
        let mut out = [0u8; 16];
        let mut n = 0;
        let mut i = 0;
        while i < 36 {
            if matches!(i, 8 | 13 | 18 | 23) {
                if b[i] != b'-' {
                    return Err(LedgerError::InvalidRequestId);
                }
                i += 1;
                continue;
            }
            let (Some(hi), Some(lo)) = (crate::hex::digit(b[i]), crate::hex::digit(b[i + 1]))
            else {
                return Err(LedgerError::InvalidRequestId);
            };
            out[n] = hi << 4 | lo;
            n += 1;
            i += 2;
        }
        Ok(Self(out))
    }

    /// A fresh random id: a version-4 UUID (RFC 9562 §5.4), with its
    /// version and variant bits set and the other 122 bits from `rng`.
    #[must_use]
    pub fn random<R: rand_core::CryptoRng + ?Sized>(rng: &mut R) -> Self {
        let mut b = crate::rand::bytes::<16, R>(rng);
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        Self(b)
    }

    /// The id from its 16 bytes.
    #[must_use]
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(bytes)
    }

    /// The 16 bytes.
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl fmt::Display for RequestId {
    /// The canonical lower-case form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, byte) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RequestId({self})")
    }
}

/// SHA-256 of the code submitted with a request id. The first accepted call
/// binds it; another code under the same id is `REPLAY_DETECTED`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CodeFingerprint(#[serde(deserialize_with = "crate::store::codec::byte_array")] [u8; 32]);

crate::store::codec::fields!(CodeFingerprint(newtype));

impl CodeFingerprint {
    /// The fingerprint of `code`.
    #[must_use]
    pub fn of(code: &[u8]) -> Self {
        Self(Sha256::digest(code).into())
    }

    /// The digest bytes.
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for CodeFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CodeFingerprint({:02x}{:02x}{:02x}{:02x}…)",
            self.0[0], self.0[1], self.0[2], self.0[3]
        )
    }
}

/// SHA-256 over an action's kind, effect and exact arguments. An approval is
/// bound to it; two actions with the same fingerprint are *identical*.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ActionFingerprint(
    #[serde(deserialize_with = "crate::store::codec::byte_array")] [u8; 32],
);

crate::store::codec::fields!(ActionFingerprint(newtype));

impl ActionFingerprint {
    /// The fingerprint of `(kind, effect, arguments)`, each part
    /// length-prefixed so that no two different triples share an input.
    #[must_use]
    pub fn of(kind: &str, effect: &str, arguments: &[u8]) -> Self {
        let mut h = Sha256::new();
        h.update(b"portcullis/action/v1");
        for part in [kind.as_bytes(), effect.as_bytes(), arguments] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part);
        }
        Self(h.finalize().into())
    }

    /// The digest bytes.
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// A fingerprint from its digest bytes: how an adapter reads back the
    /// one it showed in an approval dialog (an [`crate::approval::ApprovalRef`]
    /// names the exact action the user decided on).
    #[must_use]
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

impl fmt::Debug for ActionFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ActionFingerprint({:02x}{:02x}{:02x}{:02x}…)",
            self.0[0], self.0[1], self.0[2], self.0[3]
        )
    }
}

/// The lineage of a grant: SHA-256 of (site, subject, client). Requests are
/// keyed by (lineage, request id), so a grant issued later to the same client
/// for the same user (a scope upgrade) finds — and resumes — the requests of
/// the grant it replaces.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize)]
pub(crate) struct Lineage(
    #[serde(deserialize_with = "crate::store::codec::byte_array")] pub(crate) [u8; 32],
);

impl Lineage {
    pub(crate) fn of(site: &str, subject: &str, client_id: &str) -> Self {
        let mut h = Sha256::new();
        h.update(b"portcullis/lineage/v1");
        for part in [site, subject, client_id] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
        Self(h.finalize().into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn request_ids_are_canonical_uuids() {
        let id = RequestId::parse("0190B2A4-7c3e-7def-8abc-0123456789ab").unwrap();
        assert_eq!(id.to_string(), "0190b2a4-7c3e-7def-8abc-0123456789ab");
        assert_eq!(RequestId::parse(&id.to_string()), Ok(id));
        for bad in [
            "",
            "0190b2a47c3e7def8abc0123456789ab",
            "{0190b2a4-7c3e-7def-8abc-0123456789ab}",
            "0190b2a4-7c3e-7def-8abc-0123456789a",
            "0190b2a4-7c3e-7def-8abc-0123456789abc",
            "0190b2a4_7c3e-7def-8abc-0123456789ab",
            "0190b2a4-7c3e-7def-8abc-0123456789ag",
            "0190b2a4-7c3e-7def-8abc-01234567é9a",
            "+190b2a4-7c3e-7def-8abc-0123456789ab",
        ] {
            assert_eq!(
                RequestId::parse(bad),
                Err(LedgerError::InvalidRequestId),
                "{bad}"
            );
        }
    }

    #[test]
    fn fingerprints_separate_their_parts() {
        assert_ne!(
            ActionFingerprint::of("a", "write", b"bc"),
            ActionFingerprint::of("ab", "write", b"c")
        );
        assert_eq!(
            ActionFingerprint::of("a", "write", b"{}"),
            ActionFingerprint::of("a", "write", b"{}")
        );
        assert_ne!(CodeFingerprint::of(b"x"), CodeFingerprint::of(b"y"));
        assert_ne!(Lineage::of("s", "ab", "c"), Lineage::of("s", "a", "bc"));
    }
}
