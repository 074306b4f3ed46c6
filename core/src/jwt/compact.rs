//! The compact serialization of RFC 7515 §7.1: splitting, base64url and the
//! header.

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use super::Algorithm;
use super::b64;
use super::claims::TokenType;
use super::json::Reader;
use super::{MAX_TOKEN_LEN, Segment, VerifyError};

/// Length of an HS256 signature in unpadded base64url.
pub(super) const SIGNATURE_B64_LEN: usize = 43;
/// Length of a 64-byte signature (Ed25519, ES256) in unpadded base64url.
pub(super) const SIGNATURE_64_B64_LEN: usize = 86;

/// Decoded segments up to this size are decoded on the stack.
const STACK_SEGMENT: usize = 1024;

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
    /// length, finding each dot once and decoding nothing. The alphabet is
    /// enforced by the decoder as it decodes (RFC 4648 §5, RFC 7515 §2);
    /// every decode failure is [`VerifyError::Base64`] of its segment.
    pub(super) fn split(token: &'a str) -> Result<Self, VerifyError> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(VerifyError::TooLong);
        }
        let bytes = token.as_bytes();
        let first = bytes
            .iter()
            .position(|&b| b == b'.')
            .ok_or(VerifyError::SegmentCount)?;
        let second = bytes[first + 1..]
            .iter()
            .position(|&b| b == b'.')
            .ok_or(VerifyError::SegmentCount)?
            + first
            + 1;
        let signature = &token[second + 1..];
        // A signature is 43 or 86 characters, so this last scan is short; a
        // longer tail is refused without a scan unless it hides a dot.
        let known_len = matches!(signature.len(), SIGNATURE_B64_LEN | SIGNATURE_64_B64_LEN);
        if !known_len || signature.as_bytes().contains(&b'.') {
            return Err(if signature.as_bytes().contains(&b'.') {
                VerifyError::SegmentCount
            } else {
                VerifyError::Base64(Segment::Signature)
            });
        }
        let (header, payload) = (&token[..first], &token[first + 1..second]);
        if header.is_empty() {
            return Err(VerifyError::Base64(Segment::Header));
        }
        if payload.is_empty() {
            return Err(VerifyError::Base64(Segment::Payload));
        }
        Ok(Self {
            signing_input: &token[..second],
            header,
            payload,
            signature,
        })
    }

    /// The segments of a token whose first `header_len` bytes are a header
    /// already recognised (this keyring's own), finding the dots without a
    /// scan: one right after the header, one `signature_len` bytes from the
    /// end. A dot anywhere else lies inside the payload, which the signature
    /// covers and whose decoder refuses it. `None` sends the token to
    /// [`Compact::split`].
    pub(super) fn with_known_header(
        token: &'a str,
        header_len: usize,
        signature_len: usize,
    ) -> Option<Self> {
        let bytes = token.as_bytes();
        let second = bytes.len().checked_sub(signature_len + 1)?;
        let ok = token.len() <= MAX_TOKEN_LEN
            && second > header_len + 1
            && bytes[header_len] == b'.'
            && bytes[second] == b'.';
        ok.then(|| Self {
            signing_input: &token[..second],
            header: &token[..header_len],
            payload: &token[header_len + 1..second],
            signature: &token[second + 1..],
        })
    }

    /// The `N` signature bytes (32 for HS256, 64 for Ed25519 and ES256).
    pub(super) fn signature_bytes<const N: usize>(&self) -> Result<[u8; N], VerifyError> {
        let mut out = [0u8; N];
        match b64::decode_into(self.signature.as_bytes(), &mut out) {
            Some(n) if n == N => Ok(out),
            _ => Err(VerifyError::Base64(Segment::Signature)),
        }
    }
}

/// Decodes `segment` and hands the bytes to `f`: on the stack when they
/// are small, as tokens are, so decoding allocates nothing.
pub(super) fn with_decoded<R>(
    segment: &str,
    which: Segment,
    f: impl FnOnce(&[u8]) -> Result<R, VerifyError>,
) -> Result<R, VerifyError> {
    let len = b64::decoded_len(segment.len()).ok_or(VerifyError::Base64(which))?;
    let mut stack = [0u8; STACK_SEGMENT];
    let mut heap;
    let buf = if len <= STACK_SEGMENT {
        &mut stack[..]
    } else {
        heap = vec![0; len];
        &mut heap[..]
    };
    let n = b64::decode_segment(segment.as_bytes(), buf).ok_or(VerifyError::Base64(which))?;
    f(&buf[..n])
}

/// Decodes a segment into a new vector.
#[cfg(test)]
pub(super) fn decode(segment: &str, which: Segment) -> Result<Vec<u8>, VerifyError> {
    with_decoded(segment, which, |b| Ok(b.to_vec()))
}

/// Parses and checks the header: a JSON object, no member twice, `alg`
/// one this keyring signs with (`HS256`, `EdDSA`, `ES256`; never `none`),
/// which the caller then pins to the key the `kid` names (RFC 8725 §3.1),
/// `typ` as expected (§3.11), no `crit` (RFC 7515 §4.1.11). Unknown members
/// are ignored (RFC 7515 §4). The algorithm and the `kid`, if any.
pub(super) fn parse_header(
    segment: &str,
    typ: TokenType,
) -> Result<(Algorithm, Option<String>), VerifyError> {
    with_decoded(segment, Segment::Header, |bytes| check_header(bytes, typ))
}

fn check_header(bytes: &[u8], typ: TokenType) -> Result<(Algorithm, Option<String>), VerifyError> {
    let malformed = |_| VerifyError::HeaderMalformed;
    let mut r = Reader::new(bytes);
    if !r.begin_object() {
        return Err(VerifyError::HeaderMalformed);
    }
    let (mut alg, mut typ_value, mut kid): (Option<Cow<'_, str>>, Option<Cow<'_, str>>, _) =
        (None, None, None);
    let mut crit = false;
    let mut seen: Vec<Cow<'_, str>> = Vec::new();
    while let Some(name) = r.next_name().map_err(malformed)? {
        if seen.contains(&name) {
            return Err(VerifyError::DuplicateHeaderMember);
        }
        match &*name {
            "alg" => alg = Some(r.string().map_err(malformed)?),
            "typ" => typ_value = Some(r.string().map_err(malformed)?),
            "kid" => kid = Some(r.string().map_err(malformed)?),
            "crit" => {
                r.skip_value().map_err(malformed)?;
                crit = true;
            }
            _ => r.skip_value().map_err(malformed)?,
        }
        seen.push(name);
    }
    r.end().map_err(malformed)?;
    if crit {
        return Err(VerifyError::CriticalHeader);
    }
    let alg = match alg.as_deref() {
        None => return Err(VerifyError::MissingAlgorithm),
        Some(name) => Algorithm::from_name(name).ok_or(VerifyError::AlgorithmNotAllowed)?,
    };
    if !typ_value.as_deref().is_some_and(|t| typ.matches(t)) {
        return Err(VerifyError::TypeMismatch);
    }
    Ok((alg, kid.map(Cow::into_owned)))
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
