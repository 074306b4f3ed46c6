//! Unpadded base64url (RFC 4648 §5), the only encoding a compact JWS uses
//! (RFC 7515 §2).
//!
//! The decoder validates the alphabet while it decodes, in one pass: a byte
//! outside `A–Z a–z 0–9 - _`, padding, a dangling single character or
//! non-canonical trailing bits (bits that the last character carries beyond
//! the decoded bytes, RFC 4648 §3.5) all refuse the segment.
//!
//! Two codecs, held byte for byte to the `base64` crate's `URL_SAFE_NO_PAD`
//! by the tests below:
//! * the scalar one here, in safe Rust, which the whole crate uses for
//!   short values (grant and code tokens, PKCE challenges, outcome cursors,
//!   the signature segment) and firmware uses for everything. It encodes
//!   six bytes to eight characters through a 12-bit pair table and decodes
//!   four characters as four independent lookups in per-position tables
//!   (12 KiB of tables on hosts; firmware looks the 64-character alphabet
//!   and a 256-byte value table up instead, which keeps them out of flash);
//! * on hosts (`std`), the `base64-simd` crate for the token path (the JWT
//!   payload both ways, [`encode_string`] and [`decode_segment`]): it picks
//!   AVX2, SSSE3 or NEON at run time and writes straight into the token's
//!   `String`. On a 338-byte payload it took the signer from 1.80× to
//!   1.6× its HMAC floor here (docs/figures.md). It is `no_std` itself,
//!   and its `unsafe` stays behind its safe API: the core adds none.

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// The base64url alphabet (RFC 4648 §5, Table 2).
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Marks a byte outside the alphabet in [`VALUES`].
const INVALID: u8 = 0xFF;

/// The six-bit value of each byte, [`INVALID`] for every byte outside the
/// alphabet (including `=` padding and the `+` and `/` of standard base64):
/// one table lookup per character on the verify path.
const VALUES: [u8; 256] = {
    let mut t = [INVALID; 256];
    let mut i = 0;
    while i < 64 {
        t[ALPHABET[i] as usize] = i as u8;
        i += 1;
    }
    t
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

/// Flags a group that holds a byte outside the alphabet: the top byte of a
/// decoded 24-bit group, which no valid character reaches.
const GROUP_BAD: u32 = 0xFF00_0000;

/// The value of byte `c` at position `k` (0 to 3) of a group of four
/// characters, shifted to its place in the group's 24 bits, or
/// [`GROUP_BAD`] for a byte outside the alphabet.
const fn lane(k: usize, c: u8) -> u32 {
    match VALUES[c as usize] {
        INVALID => GROUP_BAD,
        v => (v as u32) << (18 - 6 * k),
    }
}

/// [`lane`] of every byte at each position: the decoder's tables on hosts
/// (4 KiB of rodata). A group is then four independent lookups or-ed
/// together, with no chain of shifts from one character to the next and
/// its validity in the same word.
#[cfg(feature = "std")]
const LANES: [[u32; 256]; 4] = {
    let mut t = [[0u32; 256]; 4];
    let mut k = 0;
    while k < 4 {
        let mut c = 0;
        while c < 256 {
            t[k][c] = lane(k, c as u8);
            c += 1;
        }
        k += 1;
    }
    t
};

/// The 24 bits of the group `chars` (up to four characters, missing ones
/// counting as zero bits), with [`GROUP_BAD`] bits set when one of them
/// is outside the alphabet. Firmware (no `std`) looks each character up in
/// the 256-byte [`VALUES`] table and shifts it instead of carrying 4 KiB
/// of tables in flash.
#[inline]
fn group(chars: &[u8]) -> u32 {
    let mut g = 0;
    for (k, &c) in chars.iter().enumerate().take(4) {
        #[cfg(feature = "std")]
        let v = LANES[k][usize::from(c)];
        #[cfg(not(feature = "std"))]
        let v = lane(k, c);
        g |= v;
    }
    g
}

/// Decodes `src` into the front of `dst`, which holds at least
/// [`decoded_len`] bytes; the decoded length, or `None` for anything but
/// canonical unpadded base64url, or when `dst` is too short. Each character
/// is validated as it is decoded; on `None`, `dst` holds garbage.
pub(crate) fn decode_into(src: &[u8], dst: &mut [u8]) -> Option<usize> {
    let len = decoded_len(src.len())?;
    let dst = dst.get_mut(..len)?;
    let whole = src.len() / 4;
    let (quads, tail) = src.split_at(whole * 4);
    let (triples, rest) = dst.split_at_mut(whole * 3);
    // OR of every group: one branch for the whole segment.
    let mut bad = 0u32;
    // Two groups (eight characters, six bytes) at a time: each group is
    // four independent lookups, the pair one 48-bit number stored whole.
    let mut octets = quads.chunks_exact(8);
    let mut sextets = triples.chunks_exact_mut(6);
    for (q, t) in octets.by_ref().zip(sextets.by_ref()) {
        let (hi, lo) = (group(&q[..4]), group(&q[4..]));
        bad |= hi | lo;
        let word = u64::from(hi) << 24 | u64::from(lo);
        t.copy_from_slice(&word.to_be_bytes()[2..]);
    }
    let (q, t) = (octets.remainder(), sextets.into_remainder());
    if !q.is_empty() {
        let g = group(q);
        bad |= g;
        t.copy_from_slice(&g.to_be_bytes()[1..]);
    }
    // A final group of 3 or 2 characters carries 2 or 1 bytes and 2 or 4
    // bits beyond them, which must be zero (RFC 4648 §3.5).
    let g = group(tail);
    let spare = (3 - rest.len()) * 8;
    if (bad | g) & GROUP_BAD != 0 || (!tail.is_empty() && g & ((1 << spare) - 1) != 0) {
        return None;
    }
    let bytes = g.to_be_bytes();
    rest.copy_from_slice(&bytes[1..=rest.len()]);
    Some(len)
}

/// Decodes a token segment (the JWT payload) into the front of `dst`;
/// `None` as for [`decode_into`], which it equals byte for byte. On hosts
/// (`std`) through the `base64-simd` crate, which picks the widest vector
/// instructions the CPU has at run time (AVX2 here: a 451-character
/// payload in about half the time of [`decode_into`]) and refuses exactly
/// what it refuses; firmware uses [`decode_into`].
pub(crate) fn decode_segment(src: &[u8], dst: &mut [u8]) -> Option<usize> {
    #[cfg(feature = "std")]
    {
        let dst = dst.get_mut(..decoded_len(src.len())?)?;
        base64_simd::URL_SAFE_NO_PAD
            .decode(src, base64_simd::Out::from_slice(dst))
            .ok()
            .map(|out| out.len())
    }
    #[cfg(not(feature = "std"))]
    decode_into(src, dst)
}

/// Decodes `src` into a new vector; `None` as for [`decode_into`].
pub(crate) fn decode(src: &[u8]) -> Option<Vec<u8>> {
    let mut out = vec![0; decoded_len(src.len())?];
    decode_into(src, &mut out)?;
    Some(out)
}

/// Decodes padded standard base64 (RFC 4648 §4, the `+` and `/` alphabet),
/// as HTTP Basic credentials carry it (RFC 7617 §2): the length a multiple
/// of four, exactly the `=` padding the data needs, canonical trailing
/// bits. `None` for anything else.
pub(crate) fn decode_standard(src: &[u8]) -> Option<Vec<u8>> {
    if !src.len().is_multiple_of(4) {
        return None;
    }
    let pad = src.iter().rev().take(2).take_while(|&&c| c == b'=').count();
    let body = &src[..src.len() - pad];
    // One `=` pads a final group of three characters, two a group of two.
    if pad != 0 && body.len() % 4 != 4 - pad {
        return None;
    }
    // Map the standard alphabet onto base64url's; `-` and `_` are not in
    // it, so they are mapped to a byte both alphabets refuse.
    let url: Vec<u8> = body
        .iter()
        .map(|&c| match c {
            b'+' => b'-',
            b'/' => b'_',
            b'-' | b'_' => b'=',
            c => c,
        })
        .collect();
    decode(&url)
}

/// The two characters of the 12-bit value `i`, the first in the low byte.
const fn alphabet_pair(i: usize) -> u16 {
    ALPHABET[(i >> 6) & 63] as u16 | (ALPHABET[i & 63] as u16) << 8
}

/// [`alphabet_pair`] of every 12-bit value: the encoder's table on hosts
/// (8 KiB of rodata), one lookup per two characters.
#[cfg(feature = "std")]
const PAIRS: [u16; 4096] = {
    let mut t = [0u16; 4096];
    let mut i = 0;
    while i < 4096 {
        t[i] = alphabet_pair(i);
        i += 1;
    }
    t
};

/// The two characters of the 12-bit value `v & 0xFFF`, the first in the
/// low byte. Firmware (no `std`) computes them from the 64-entry alphabet,
/// two lookups, rather than carry an 8 KiB table in flash.
#[inline]
fn pair(v: u64) -> u64 {
    let i = (v & 0xFFF) as usize;
    #[cfg(feature = "std")]
    let p = PAIRS[i];
    #[cfg(not(feature = "std"))]
    let p = alphabet_pair(i);
    u64::from(p)
}

/// The eight characters of the six bytes in the top 48 bits of `x`, the
/// first in the low byte: four two-character lookups.
#[inline]
fn eight(x: u64) -> [u8; 8] {
    (pair(x >> 52) | pair(x >> 40) << 16 | pair(x >> 28) << 32 | pair(x >> 16) << 48).to_le_bytes()
}

/// Encodes `src` into the front of `dst` ([`encoded_len`] bytes). On hosts
/// twelve bytes become sixteen characters at a time (two big-endian `u64`
/// reads, six bytes apart, with two bytes of the second to spare, so it
/// runs while fourteen remain); then six bytes to eight characters while
/// eight remain (once at most on hosts, the whole input on firmware,
/// which keeps one loop body); then whole groups of three bytes, four
/// characters each; then the tail.
pub(crate) fn encode_into(src: &[u8], dst: &mut [u8]) {
    let dst = &mut dst[..encoded_len(src.len())];
    // Firmware keeps one loop body: it steps six bytes at a time below.
    #[cfg(feature = "std")]
    let steps = src.len().saturating_sub(2) / 12;
    #[cfg(not(feature = "std"))]
    let steps = 0;
    let (wide, _) = dst.split_at_mut(steps * 16);
    for (i, out) in wide.chunks_exact_mut(16).enumerate() {
        let Some(word) = src.get(i * 12..).and_then(<[u8]>::first_chunk::<14>) else {
            break;
        };
        let (Some(a), Some(b)) = (word.first_chunk::<8>(), word[6..].first_chunk::<8>()) else {
            break;
        };
        let (hi, lo) = (u64::from_be_bytes(*a), u64::from_be_bytes(*b));
        out[..8].copy_from_slice(&eight(hi));
        out[8..].copy_from_slice(&eight(lo));
    }
    let (mut read, mut write) = (steps * 12, steps * 16);
    while let (Some(word), Some(out)) = (
        src.get(read..).and_then(<[u8]>::first_chunk::<8>),
        dst.get_mut(write..).and_then(<[u8]>::first_chunk_mut::<8>),
    ) {
        *out = eight(u64::from_be_bytes(*word));
        read += 6;
        write += 8;
    }
    let src = &src[read..];
    let dst = &mut dst[write..];
    let whole = src.len() / 3;
    let (triples, tail) = src.split_at(whole * 3);
    let (quads, rest) = dst.split_at_mut(whole * 4);
    for (t, q) in triples.chunks_exact(3).zip(quads.chunks_exact_mut(4)) {
        let acc = u64::from(t[0]) << 16 | u64::from(t[1]) << 8 | u64::from(t[2]);
        let chars = pair(acc >> 12) | pair(acc) << 16;
        q.copy_from_slice(&(chars as u32).to_le_bytes());
    }
    let mut acc = 0u32;
    for (i, &b) in tail.iter().enumerate() {
        acc |= u32::from(b) << (16 - 8 * i);
    }
    for (i, c) in rest.iter_mut().enumerate() {
        *c = ALPHABET[(acc >> (18 - 6 * i)) as usize & 63];
    }
}

/// A 16-byte id (a grant id, a token id) in base64url, 22 characters
/// written into `buf`: the text of an id without allocating.
pub(crate) fn encode_16<'b>(bytes: &[u8; 16], buf: &'b mut [u8; 22]) -> &'b str {
    encode_into(bytes, buf);
    // Only alphabet characters (ASCII) were written.
    core::str::from_utf8(buf).unwrap_or_default()
}

/// Appends the encoding of `src` to `out`. On hosts (`std`) through the
/// `base64-simd` crate, which writes straight into the string's spare
/// capacity (vector instructions picked at run time; no UTF-8 check of
/// what it wrote, as it writes only the alphabet): the signer builds its
/// token this way, with no copy and no check of the whole token. Firmware
/// appends block by block in safe Rust (`encode_string_blocks`, built only
/// without `std` and in tests).
pub(crate) fn encode_string(src: &[u8], out: &mut String) {
    #[cfg(feature = "std")]
    base64_simd::URL_SAFE_NO_PAD.encode_append(src, out);
    #[cfg(not(feature = "std"))]
    encode_string_blocks(src, out);
}

/// [`encode_string`] in safe Rust: block by block through a stack buffer,
/// so only the appended characters are checked as UTF-8, never what `out`
/// already held.
#[cfg(any(test, not(feature = "std")))]
fn encode_string_blocks(src: &[u8], out: &mut String) {
    const IN: usize = 48;
    let mut buf = [0u8; IN / 3 * 4];
    out.reserve(encoded_len(src.len()));
    for block in src.chunks(IN) {
        let n = encoded_len(block.len());
        encode_into(block, &mut buf[..n]);
        // Only alphabet characters (ASCII) were written.
        out.push_str(core::str::from_utf8(&buf[..n]).unwrap_or_default());
    }
}

/// The encoding of `src`.
pub(crate) fn encode(src: &[u8]) -> String {
    let mut out = String::new();
    encode_string(src, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use proptest::prelude::*;

    fn decode(s: &str) -> Option<Vec<u8>> {
        let out = super::decode(s.as_bytes())?;
        assert_eq!(out.len(), decoded_len(s.len())?);
        Some(out)
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
        fn agrees_with_the_base64_crate(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let reference = URL_SAFE_NO_PAD.encode(&bytes);
            let mut out = vec![0; encoded_len(bytes.len())];
            encode_into(&bytes, &mut out);
            prop_assert_eq!(&out, reference.as_bytes());
            prop_assert_eq!(encode(&bytes), reference.clone());
            for append in [encode_string, encode_string_blocks] {
                let mut appended = String::from("x.");
                append(&bytes, &mut appended);
                prop_assert_eq!(&appended[2..], reference.as_str());
            }
            let mut segment = vec![0; bytes.len()];
            prop_assert_eq!(decode_segment(reference.as_bytes(), &mut segment), Some(bytes.len()));
            prop_assert_eq!(&segment, &bytes);
            prop_assert_eq!(decode(&reference), Some(bytes));
        }

        #[test]
        fn decodes_exactly_what_the_base64_crate_decodes(
            s in "[A-Za-z0-9_=+/.-]{0,12}|[A-Za-z0-9_-]{0,90}[A-Za-z0-9_=+/. \\n-]{0,3}[A-Za-z0-9_-]{0,90}",
        ) {
            let reference = URL_SAFE_NO_PAD.decode(&s).ok();
            prop_assert_eq!(decode(&s), reference.clone());
            let mut segment = vec![0; s.len()];
            let n = decode_segment(s.as_bytes(), &mut segment);
            prop_assert_eq!(n.map(|n| segment[..n].to_vec()), reference);
        }

        #[test]
        fn decodes_standard_base64_exactly_like_the_base64_crate(
            s in "[A-Za-z0-9+/=_-]{0,16}|([A-Za-z0-9+/]{4}){0,3}[A-Za-z0-9+/]{2,3}={0,3}",
        ) {
            use base64::engine::general_purpose::STANDARD;
            prop_assert_eq!(decode_standard(s.as_bytes()), STANDARD.decode(&s).ok());
        }

        #[test]
        fn round_trips_standard_base64(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            use base64::engine::general_purpose::STANDARD;
            prop_assert_eq!(decode_standard(STANDARD.encode(&bytes).as_bytes()), Some(bytes));
        }

        /// The callers decode into fixed buffers (16, 20 or 32 bytes) and
        /// accept only an exact fill: a buffer too short refuses, like the
        /// `base64` crate's `decode_slice`, and what it writes agrees.
        #[test]
        fn fills_a_buffer_exactly_like_decode_slice(
            s in "[A-Za-z0-9_-]{0,48}|[A-Za-z0-9_=+/.-]{0,48}",
            len in 0usize..40,
        ) {
            let (mut ours, mut theirs) = (vec![0u8; len], vec![0u8; len]);
            let a = decode_into(s.as_bytes(), &mut ours);
            let b = URL_SAFE_NO_PAD.decode_slice(&s, &mut theirs).ok();
            prop_assert_eq!(a, b);
            if let Some(n) = a {
                prop_assert_eq!(&ours[..n], &theirs[..n]);
            }
        }
    }
}
