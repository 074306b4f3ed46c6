//! Hexadecimal: the workspace's one helper, for fingerprints shown to users,
//! request ids and the `%XX` escapes of URLs and forms.
//!
//! Hand-written rather than a crate: it is three small functions, and a new
//! dependency of the core would move every firmware lock file.

use alloc::string::String;

/// The value of one hex digit, either case.
#[must_use]
pub const fn digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Lower-case hex of `bytes`, two digits a byte.
#[must_use]
pub fn encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

/// Exactly `N` bytes from `2 * N` hex digits (either case); `None` for any
/// other length or a non-digit.
#[must_use]
pub fn decode<const N: usize>(text: &str) -> Option<[u8; N]> {
    let text = text.as_bytes();
    if text.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (o, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        *o = (digit(pair[0])? << 4) | digit(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_bad_input() {
        let bytes = [0x00, 0x7f, 0x80, 0xff, 0x12];
        assert_eq!(encode(&bytes), "007f80ff12");
        assert_eq!(decode::<5>("007F80ff12"), Some(bytes));
        assert_eq!(decode::<5>("007f80ff1"), None);
        assert_eq!(decode::<5>("007f80ff1g"), None);
        assert_eq!(decode::<2>("éé"), None);
        assert_eq!(digit(b'G'), None);
    }
}
