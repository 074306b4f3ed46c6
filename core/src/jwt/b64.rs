//! Unpadded base64url (RFC 4648 §5), the only encoding a compact JWS uses
//! (RFC 7515 §2).
//!
//! The decoder validates the alphabet while it decodes, in one pass: a byte
//! outside `A–Z a–z 0–9 - _`, padding, a dangling single character or
//! non-canonical trailing bits (bits that the last character carries beyond
//! the decoded bytes, RFC 4648 §3.5) all refuse the segment. The encoder can
//! work in place, so a token is built in one buffer. Both run on the
//! `base64` crate's engine, which works eight bytes at a time.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Length of `n` bytes once encoded, unpadded.
pub(super) const fn encoded_len(n: usize) -> usize {
    n / 3 * 4 + [0, 2, 3][n % 3]
}

/// Length of an encoded segment of `n` characters once decoded, or `None`
/// when no byte string encodes to that length (`n % 4 == 1`).
pub(super) const fn decoded_len(n: usize) -> Option<usize> {
    match n % 4 {
        1 => None,
        r => Some(n / 4 * 3 + [0, 0, 1, 2][r]),
    }
}

/// Decodes `src` into the front of `dst`, which holds at least
/// [`decoded_len`] bytes; the decoded length, or `None` for anything but
/// canonical unpadded base64url. The `base64` crate's engine validates each
/// byte as it decodes, eight at a time.
pub(super) fn decode_into(src: &[u8], dst: &mut [u8]) -> Option<usize> {
    URL_SAFE_NO_PAD.decode_slice(src, dst).ok()
}

/// Encodes `src` into the front of `dst` ([`encoded_len`] bytes).
pub(super) fn encode_into(src: &[u8], dst: &mut [u8]) {
    let written = URL_SAFE_NO_PAD.encode_slice(src, dst).unwrap_or(0);
    debug_assert_eq!(written, encoded_len(src.len()));
}

/// Encodes, in place, the `n` bytes that start `from` bytes into `buf`,
/// writing [`encoded_len`]`(n)` characters from the start of `buf`.
/// Requires `from >= n.div_ceil(3)`: each block of input is copied out
/// before its characters are written, and the output (4 bytes per 3) then
/// never reaches the bytes still to be read.
pub(super) fn encode_in_place(buf: &mut [u8], from: usize, n: usize) {
    const IN: usize = 192;
    const OUT: usize = IN / 3 * 4;
    debug_assert!(from >= n.div_ceil(3));
    let (mut read, mut write, end) = (from, 0, from + n);
    let mut block = [0u8; IN];
    while end - read >= IN {
        block.copy_from_slice(&buf[read..read + IN]);
        encode_into(&block, &mut buf[write..write + OUT]);
        read += IN;
        write += OUT;
    }
    let rest = end - read;
    block[..rest].copy_from_slice(&buf[read..end]);
    encode_into(&block[..rest], &mut buf[write..write + encoded_len(rest)]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;
    use proptest::prelude::*;

    fn decode(s: &str) -> Option<Vec<u8>> {
        let mut out = vec![0; decoded_len(s.len())?];
        decode_into(s.as_bytes(), &mut out).map(|n| out[..n].to_vec())
    }

    #[test]
    fn refuses_everything_but_canonical_base64url() {
        assert_eq!(decode("e30"), Some(b"{}".to_vec()));
        for bad in ["e30=", "e3+", "e3/", "e31", "e", "e30.", "ab c", "\u{e9}a"] {
            assert_eq!(decode(bad), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn agrees_with_the_base64_crate(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let reference = URL_SAFE_NO_PAD.encode(&bytes);
            let mut out = vec![0; encoded_len(bytes.len())];
            encode_into(&bytes, &mut out);
            prop_assert_eq!(&out, reference.as_bytes());
            let from = bytes.len().div_ceil(3);
            let mut buf = vec![0; from + bytes.len()];
            buf[from..].copy_from_slice(&bytes);
            encode_in_place(&mut buf, from, bytes.len());
            prop_assert_eq!(&buf[..reference.len()], reference.as_bytes());
            prop_assert_eq!(decode(&reference), Some(bytes));
        }

        #[test]
        fn decodes_exactly_what_the_base64_crate_decodes(s in "[A-Za-z0-9_=+/.-]{0,12}") {
            prop_assert_eq!(decode(&s), URL_SAFE_NO_PAD.decode(&s).ok());
        }
    }
}
