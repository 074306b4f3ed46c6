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
        if !first
            .iter()
            .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
        {
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

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Repeated => "was sent more than once",
            Self::NotVisibleAscii => "is not visible ASCII",
        })
    }
}

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
