//! The request header fields the core reads, as the adapter received them.
//!
//! A field whose definition is not a list (`Authorization`, RFC 9110
//! §11.6.2) may appear in a request at most once (RFC 9110 §5.3: a sender
//! must not repeat it, and combining two values would change its meaning).
//! A request that repeats one is ambiguous: intermediaries and the server
//! may each pick a different value, so whichever the core picked it would
//! be guessing. The adapter therefore hands over **every** value it
//! received as a [`HeaderField`], and the core decides: the only way to
//! read "the value" fails on more than one ([`HeaderError::Repeated`]),
//! which the endpoints answer with `400 invalid_request`.
//!
//! ```
//! use portcullis_core::header::{HeaderError, HeaderField};
//!
//! // What an adapter on the `http` crate passes:
//! // HeaderField::new(headers.get_all(AUTHORIZATION).iter().map(HeaderValue::as_bytes))
//! let one = HeaderField::new([&b"Bearer abc"[..]]);
//! assert_eq!(one.value(), Ok(Some("Bearer abc")));
//! let two = HeaderField::new([&b"Bearer abc"[..], b"Bearer xyz"]);
//! assert_eq!(two.value(), Err(HeaderError::Repeated));
//! assert_eq!(HeaderField::ABSENT.value(), Ok(None));
//! ```

use core::fmt;

use crate::describe::{Describe, display_by_describe};
use crate::error::{ErrorCode, WireError};

/// Every value one request carried for a single-valued header field.
///
/// Built once per request by the adapter; reading it is free. `Debug`
/// shows only how many values came, never a value (an `Authorization`
/// header holds credentials).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct HeaderField<'a>(State<'a>);

#[derive(Clone, Copy, PartialEq, Eq)]
enum State<'a> {
    Absent,
    One(&'a str),
    NotVisibleAscii,
    Repeated,
}

impl<'a> HeaderField<'a> {
    /// The field was not sent.
    pub const ABSENT: Self = Self(State::Absent);

    /// Every value of the field, in the order received — all of them: an
    /// adapter must not pick one. Decides at once whether there was none,
    /// one or more (it stops reading at the second), and whether a single
    /// value is visible ASCII text (RFC 9110 §5.5: anything else is not a
    /// value the core reads). Does not allocate.
    #[must_use]
    pub fn new<I>(values: I) -> Self
    where
        I: IntoIterator<Item = &'a [u8]>,
    {
        let mut values = values.into_iter();
        let Some(first) = values.next() else {
            return Self::ABSENT;
        };
        if values.next().is_some() {
            return Self(State::Repeated);
        }
        if !visible_ascii(first) {
            return Self(State::NotVisibleAscii);
        }
        match core::str::from_utf8(first) {
            Ok(text) => Self(State::One(text)),
            Err(_) => Self(State::NotVisibleAscii),
        }
    }

    /// A field sent exactly once with `value`: for callers that are not
    /// HTTP adapters (tests, a command line, a non-HTTP transport).
    #[must_use]
    pub fn one(value: &'a str) -> Self {
        Self::new([value.as_bytes()])
    }

    /// The value: `Ok(None)` when the field was not sent, `Ok(Some(_))`
    /// when it was sent once as visible ASCII, and an error when it was sent
    /// more than once or is not text.
    pub fn value(&self) -> Result<Option<&'a str>, HeaderError> {
        match self.0 {
            State::Absent => Ok(None),
            State::One(v) => Ok(Some(v)),
            State::NotVisibleAscii => Err(HeaderError::NotVisibleAscii),
            State::Repeated => Err(HeaderError::Repeated),
        }
    }

    /// Whether the field was not sent at all.
    #[must_use]
    pub fn is_absent(&self) -> bool {
        self.0 == State::Absent
    }
}

/// Whether every byte is visible ASCII, a space or a tab (RFC 9110 §5.5).
/// Eight bytes at a time: a word with no byte below 0x20 and none above
/// 0x7e passes at once (the two tests below never miss such a byte; they
/// may flag a word that is fine, which is then checked byte by byte, as a
/// tab is).
fn visible_ascii(bytes: &[u8]) -> bool {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGH: u64 = ONES * 0x80;
    let byte_ok = |b: &u8| *b == b'\t' || (0x20..0x7f).contains(b);
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let mut w = [0; 8];
        w.copy_from_slice(word);
        let x = u64::from_le_bytes(w);
        // A byte below 0x20, or one of 0x7f and above.
        let below = x.wrapping_sub(ONES * 0x20) & !x & HIGH;
        let above = (x.wrapping_add(ONES) | x) & HIGH;
        if below | above != 0 && !word.iter().all(byte_ok) {
            return false;
        }
    }
    words.remainder().iter().all(byte_ok)
}

impl Default for HeaderField<'_> {
    fn default() -> Self {
        Self::ABSENT
    }
}

impl fmt::Debug for HeaderField<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            State::Absent => "HeaderField(absent)",
            State::One(_) => "HeaderField(one value)",
            State::NotVisibleAscii => "HeaderField(one value, not text)",
            State::Repeated => "HeaderField(repeated)",
        })
    }
}

/// Why a header field has no usable value.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// The field came more than once: the request is ambiguous.
    Repeated,
    /// The value is not visible ASCII.
    NotVisibleAscii,
}

impl Describe for HeaderError {
    fn describe<W: fmt::Write>(&self, f: &mut W) -> fmt::Result {
        f.write_str(match self {
            Self::Repeated => "was sent more than once",
            Self::NotVisibleAscii => "is not visible ASCII",
        })
    }
}

display_by_describe!(HeaderError);

impl WireError for HeaderError {
    fn code(&self) -> ErrorCode {
        ErrorCode::InvalidRequest
    }
}

#[cfg(feature = "std")]
impl std::error::Error for HeaderError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word-at-a-time test agrees with the byte rule for every byte
    /// value at every position of a word and of the tail.
    #[test]
    fn visible_ascii_agrees_with_the_byte_rule() {
        let ok = |b: u8| b == b'\t' || (0x20..0x7f).contains(&b);
        for len in [1usize, 7, 8, 9, 16, 23] {
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut v = alloc::vec![b'a'; len];
                    v[at] = b;
                    assert_eq!(visible_ascii(&v), ok(b), "len {len} at {at} byte {b:#x}");
                }
            }
        }
        assert!(visible_ascii(b"Bearer eyJ0eXAiOiJhdCtqd3QifQ.\t~ !"));
        assert!(visible_ascii(b""));
    }

    #[test]
    fn none_one_or_more_values() {
        assert_eq!(HeaderField::new(core::iter::empty()).value(), Ok(None));
        assert!(HeaderField::default().is_absent());
        assert_eq!(HeaderField::one("Basic x").value(), Ok(Some("Basic x")));
        assert_eq!(HeaderField::one("").value(), Ok(Some("")));
        assert!(!HeaderField::one("").is_absent());
        for values in [
            &[&b"a"[..], b"b"][..],
            &[b"a", b"a"],
            &[b"", b""],
            &[b"a", b"\xff"],
            &[b"a", b"b", b"c"],
        ] {
            let field = HeaderField::new(values.iter().copied());
            assert_eq!(field.value(), Err(HeaderError::Repeated), "{values:?}");
            assert!(!field.is_absent());
        }
        for bad in [&b"Bearer \xc3\xa9"[..], b"a\nb", b"a\x7f", b"\x00"] {
            assert_eq!(
                HeaderField::new([bad]).value(),
                Err(HeaderError::NotVisibleAscii)
            );
        }
        assert_eq!(HeaderField::new([&b"a\tb"[..]]).value(), Ok(Some("a\tb")));
    }

    #[test]
    fn debug_never_shows_a_value() {
        let shown = alloc::format!("{:?}", HeaderField::one("Bearer secret"));
        assert!(!shown.contains("secret"), "{shown}");
        assert_eq!(HeaderError::Repeated.code(), ErrorCode::InvalidRequest);
    }
}
