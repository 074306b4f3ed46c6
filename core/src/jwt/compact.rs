//! The compact serialization of RFC 7515 §7.1: splitting, base64url and the
//! header.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};

use super::claims::{KeyName, TokenType};
use super::{MAX_TOKEN_LEN, Segment, VerifyError};

/// Length of an HS256 signature in unpadded base64url.
const SIGNATURE_B64_LEN: usize = 43;

/// A token split into its segments; nothing is trusted yet.
pub(super) struct Compact<'a> {
    /// `header.payload`, the bytes the signature covers.
    pub(super) signing_input: &'a str,
    pub(super) header: &'a str,
    pub(super) payload: &'a str,
    pub(super) signature: &'a str,
}

impl<'a> Compact<'a> {
    /// Checks size, segment count, non-empty segments and the signature
    /// length, without decoding anything. The alphabet is enforced by the
    /// decoders, which refuse padding, the standard alphabet and
    /// non-canonical trailing bits (RFC 4648 §5, RFC 7515 §2); every decode
    /// failure is reported as [`VerifyError::Base64`] of its segment.
    pub(super) fn split(token: &'a str) -> Result<Self, VerifyError> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(VerifyError::TooLong);
        }
        let bytes = token.as_bytes();
        let dot = |from: usize| {
            bytes[from..]
                .iter()
                .position(|&b| b == b'.')
                .map(|i| from + i)
        };
        let (Some(first), Some(second)) = (dot(0), dot(0).and_then(|f| dot(f + 1))) else {
            return Err(VerifyError::SegmentCount);
        };
        if dot(second + 1).is_some() {
            return Err(VerifyError::SegmentCount);
        }
        let (header, payload, signature) = (
            &token[..first],
            &token[first + 1..second],
            &token[second + 1..],
        );
        for (segment, text) in [(Segment::Header, header), (Segment::Payload, payload)] {
            if text.is_empty() {
                return Err(VerifyError::Base64(segment));
            }
        }
        if signature.len() != SIGNATURE_B64_LEN {
            return Err(VerifyError::Base64(Segment::Signature));
        }
        Ok(Self {
            signing_input: &token[..second],
            header,
            payload,
            signature,
        })
    }

    /// The 32 signature bytes.
    pub(super) fn signature_bytes(&self) -> Result<[u8; 32], VerifyError> {
        let mut out = [0u8; 32];
        match URL_SAFE_NO_PAD.decode_slice(self.signature, &mut out) {
            Ok(32) => Ok(out),
            _ => Err(VerifyError::Base64(Segment::Signature)),
        }
    }
}

/// Decodes a segment; non-canonical trailing bits are refused by the engine.
pub(super) fn decode(segment: &str, which: Segment) -> Result<Vec<u8>, VerifyError> {
    URL_SAFE_NO_PAD
        .decode(segment)
        .map_err(|_| VerifyError::Base64(which))
}

/// Appends `bytes` to `out` as unpadded base64url.
pub(super) fn encode_into(bytes: &[u8], out: &mut String) {
    URL_SAFE_NO_PAD.encode_string(bytes, out);
}

/// The header members we act on. Unknown members are ignored (RFC 7515
/// §4: unless listed in `crit`, which we refuse).
pub(super) struct Header {
    pub(super) kid: Option<String>,
}

/// Parses and checks the header: JSON object, no duplicates, `alg` exactly
/// `HS256`, `typ` as expected, no `crit`.
pub(super) fn parse_header(segment: &str, typ: TokenType) -> Result<Header, VerifyError> {
    let bytes = decode(segment, Segment::Header)?;
    let mut fault = None;
    let mut de = serde_json::Deserializer::from_slice(&bytes);
    let raw = HeaderSeed { fault: &mut fault }
        .deserialize(&mut de)
        .and_then(|raw| de.end().map(|()| raw));
    let Ok(raw) = raw else {
        return Err(fault.unwrap_or(VerifyError::HeaderMalformed));
    };
    if raw.crit {
        return Err(VerifyError::CriticalHeader);
    }
    match raw.alg.as_deref() {
        None => return Err(VerifyError::MissingAlgorithm),
        Some("HS256") => {}
        Some(_) => return Err(VerifyError::AlgorithmNotAllowed),
    }
    if !raw.typ.as_deref().is_some_and(|t| typ.matches(t)) {
        return Err(VerifyError::TypeMismatch);
    }
    Ok(Header { kid: raw.kid })
}

#[derive(Default)]
struct RawHeader {
    alg: Option<String>,
    typ: Option<String>,
    kid: Option<String>,
    crit: bool,
}

struct HeaderSeed<'f> {
    fault: &'f mut Option<VerifyError>,
}

impl<'de> DeserializeSeed<'de> for HeaderSeed<'_> {
    type Value = RawHeader;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<RawHeader, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for HeaderSeed<'_> {
    type Value = RawHeader;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JOSE header object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawHeader, A::Error> {
        let mut header = RawHeader::default();
        let mut seen = super::claims::SeenNames::default();
        while let Some(KeyName(name)) = map.next_key()? {
            if !seen.insert(name.clone()) {
                *self.fault = Some(VerifyError::DuplicateHeaderMember);
                return Err(de::Error::custom("duplicate member"));
            }
            match &*name {
                "alg" => header.alg = Some(map.next_value()?),
                "typ" => header.typ = Some(map.next_value()?),
                "kid" => header.kid = Some(map.next_value()?),
                "crit" => {
                    map.next_value::<IgnoredAny>()?;
                    header.crit = true;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_counts_segments_before_decoding() {
        let sig = "A".repeat(43);
        assert!(Compact::split(&alloc::format!("e30.e30.{sig}")).is_ok());
        for bad in [
            alloc::format!("e30.{sig}"),
            alloc::format!("e30.e30.e30.{sig}"),
            alloc::format!("e30.e30.{sig}."),
        ] {
            assert_eq!(Compact::split(&bad).err(), Some(VerifyError::SegmentCount));
        }
        assert_eq!(
            decode("e30=", Segment::Header).err(),
            Some(VerifyError::Base64(Segment::Header))
        );
        assert_eq!(
            Compact::split(&alloc::format!(".e30.{sig}")).err(),
            Some(VerifyError::Base64(Segment::Header))
        );
        assert_eq!(
            decode("e3+", Segment::Payload).err(),
            Some(VerifyError::Base64(Segment::Payload))
        );
        assert_eq!(
            decode("e3/", Segment::Payload).err(),
            Some(VerifyError::Base64(Segment::Payload))
        );
        assert_eq!(
            decode("e31", Segment::Payload).err(),
            Some(VerifyError::Base64(Segment::Payload)),
            "non-canonical trailing bits"
        );
        assert_eq!(
            Compact::split("e30.e30.abc").err(),
            Some(VerifyError::Base64(Segment::Signature))
        );
    }

    #[test]
    fn size_is_checked_first() {
        let huge = "!".repeat(MAX_TOKEN_LEN + 1);
        assert_eq!(Compact::split(&huge).err(), Some(VerifyError::TooLong));
    }
}
