//! Unpadded base64url (RFC 4648 §5), the only encoding a compact JWS uses
//! (RFC 7515 §2).
//!
//! The decoder validates the alphabet while it decodes, in one pass: a byte
//! outside `A–Z a–z 0–9 - _`, padding, a dangling single character or
//! non-canonical trailing bits (bits that the last character carries beyond
//! the decoded bytes, RFC 4648 §3.5) all refuse the segment. The encoder can
//! work in place, so a token is built in one buffer.

/// The base64url alphabet.
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Marks a byte outside the alphabet in [`DECODE`].
const INVALID: u8 = 0xff;

/// The value of each byte, or [`INVALID`].
const DECODE: [u8; 256] = {
    let mut table = [INVALID; 256];
    let mut i = 0;
    while i < 64 {
        table[ALPHABET[i] as usize] = i as u8;
        i += 1;
    }
    table
};

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
/// canonical unpadded base64url.
pub(super) fn decode_into(src: &[u8], dst: &mut [u8]) -> Option<usize> {
    let len = decoded_len(src.len())?;
    let dst = dst.get_mut(..len)?;
    let mut groups = src.chunks_exact(4);
    let mut out = dst.chunks_exact_mut(3);
    for (group, out) in (&mut groups).zip(&mut out) {
        let [a, b, c, d] = [
            DECODE[group[0] as usize],
            DECODE[group[1] as usize],
            DECODE[group[2] as usize],
            DECODE[group[3] as usize],
        ];
        // `INVALID` has the top bits set; every alphabet value is below 64.
        if (a | b | c | d) & 0xc0 != 0 {
            return None;
        }
        let n = u32::from(a) << 18 | u32::from(b) << 12 | u32::from(c) << 6 | u32::from(d);
        out.copy_from_slice(&n.to_be_bytes()[1..]);
    }
    let tail = groups.remainder();
    let rest = out.into_remainder();
    let mut n = 0u32;
    for (i, &ch) in tail.iter().enumerate() {
        let v = DECODE[ch as usize];
        if v == INVALID {
            return None;
        }
        n |= u32::from(v) << (18 - 6 * i);
    }
    let bytes = n.to_be_bytes();
    match tail.len() {
        0 => {}
        // Two characters carry 12 bits for one byte: the low 4 must be 0.
        2 if bytes[2] == 0 => rest[0] = bytes[1],
        // Three carry 18 bits for two bytes: the low 2 must be 0.
        3 if bytes[3] == 0 => rest.copy_from_slice(&bytes[1..3]),
        _ => return None,
    }
    Some(len)
}

/// Encodes `src` into the front of `dst` ([`encoded_len`] bytes).
pub(super) fn encode_into(src: &[u8], dst: &mut [u8]) {
    let mut groups = src.chunks_exact(3);
    let mut out = dst.chunks_exact_mut(4);
    for (group, out) in (&mut groups).zip(&mut out) {
        let n = u32::from(group[0]) << 16 | u32::from(group[1]) << 8 | u32::from(group[2]);
        out.copy_from_slice(&quad(n));
    }
    encode_tail(groups.remainder(), out.into_remainder());
}

/// Encodes, in place, the `n` bytes that start `from` bytes into `buf`,
/// writing [`encoded_len`]`(n)` characters from the start of `buf`.
/// Requires `from >= n.div_ceil(3)`, so that every group is read before
/// the output reaches it.
pub(super) fn encode_in_place(buf: &mut [u8], from: usize, n: usize) {
    debug_assert!(from >= n.div_ceil(3));
    let full = n / 3;
    for g in 0..full {
        let i = from + 3 * g;
        let v = u32::from(buf[i]) << 16 | u32::from(buf[i + 1]) << 8 | u32::from(buf[i + 2]);
        buf[4 * g..4 * g + 4].copy_from_slice(&quad(v));
    }
    let mut tail = [0u8; 2];
    let rest = n % 3;
    tail[..rest].copy_from_slice(&buf[from + 3 * full..from + n]);
    encode_tail(&tail[..rest], &mut buf[4 * full..4 * full + [0, 2, 3][rest]]);
}

/// The four characters of a 24-bit group.
fn quad(n: u32) -> [u8; 4] {
    [
        ALPHABET[(n >> 18) as usize & 63],
        ALPHABET[(n >> 12) as usize & 63],
        ALPHABET[(n >> 6) as usize & 63],
        ALPHABET[n as usize & 63],
    ]
}

/// The last one or two bytes, unpadded.
fn encode_tail(tail: &[u8], out: &mut [u8]) {
    match *tail {
        [a] => out.copy_from_slice(&quad(u32::from(a) << 16)[..2]),
        [a, b] => out.copy_from_slice(&quad(u32::from(a) << 16 | u32::from(b) << 8)[..3]),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
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
