//! Strict `application/x-www-form-urlencoded` parsing (WHATWG URL Standard
//! §5.1, as RFC 6749 §3.1 and Appendix B use it for query strings and token
//! request bodies).
//!
//! Stricter than browsers on purpose: the input is size-bounded before any
//! work, a malformed percent escape or invalid UTF-8 is an error rather than
//! a replacement character, and a repeated parameter name is refused
//! (RFC 6749 §3.1 and §3.2: parameters must not be included more than once),
//! so two parsers can never disagree on which value counts.

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::describe::{Describe, display_by_describe};
use crate::error::{ErrorCode, WireError};

/// Decoded `name=value` pairs, in input order, each name at most once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Form<'a> {
    pairs: Vec<(Cow<'a, str>, Cow<'a, str>)>,
}

impl<'a> Form<'a> {
    /// Parses `input` (without a leading `?`), refusing anything longer than
    /// `max_len` bytes.
    pub fn parse(input: &'a str, max_len: usize) -> Result<Self, FormError> {
        if input.len() > max_len {
            return Err(FormError::TooLong);
        }
        let mut pairs: Vec<(Cow<'a, str>, Cow<'a, str>)> = Vec::new();
        for piece in input.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = piece.split_once('=').unwrap_or((piece, ""));
            let name = decode(name)?;
            if pairs.iter().any(|(n, _)| *n == name) {
                return Err(FormError::Repeated);
            }
            pairs.push((name, decode(value)?));
        }
        Ok(Self { pairs })
    }

    /// The value of `name`, if present.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&str> {
        self.value(name).map(|v| &**v)
    }

    /// The value of `name` with the input's lifetime: borrowed from the
    /// input unless percent-decoding changed it (then a copy of the decoded
    /// value).
    #[must_use]
    pub fn get_cow(&self, name: &str) -> Option<Cow<'a, str>> {
        self.value(name).cloned()
    }

    /// The stored value of `name`, if the form has one.
    fn value(&self, name: &str) -> Option<&Cow<'a, str>> {
        self.pairs.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// Every pair, in input order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(n, v)| (&**n, &**v))
    }

    /// The number of parameters.
    #[must_use]
    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// Whether there are no parameters.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }
}

/// Percent-decodes one component, `+` meaning space; borrowed when nothing
/// needs decoding.
pub fn decode(raw: &str) -> Result<Cow<'_, str>, FormError> {
    if !raw.bytes().any(|b| b == b'%' || b == b'+') {
        return Ok(Cow::Borrowed(raw));
    }
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hi = bytes.get(i + 1).and_then(|&b| crate::hex::digit(b));
                let lo = bytes.get(i + 2).and_then(|&b| crate::hex::digit(b));
                let (Some(hi), Some(lo)) = (hi, lo) else {
                    return Err(FormError::BadEscape);
                };
                out.push(hi << 4 | lo);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out)
        .map(Cow::Owned)
        .map_err(|_| FormError::InvalidUtf8)
}

/// Appends `value` to `out` percent-encoded for a form or query component:
/// everything but `A-Z a-z 0-9 - . _ ~` is escaped (RFC 3986 §2.3 unreserved),
/// so the result is safe in any URL context.
pub fn encode_into(value: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in value.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
}

/// Builds `name=value&…` with every component percent-encoded.
#[must_use]
pub fn encode_pairs<'p>(pairs: impl IntoIterator<Item = (&'p str, &'p str)>) -> String {
    let mut out = String::new();
    for (name, value) in pairs {
        if !out.is_empty() {
            out.push('&');
        }
        encode_into(name, &mut out);
        out.push('=');
        encode_into(value, &mut out);
    }
    out
}

/// Why a form could not be parsed.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormError {
    /// Longer than the caller's bound.
    TooLong,
    /// A parameter name appears twice.
    Repeated,
    /// A `%` not followed by two hex digits.
    BadEscape,
    /// Decoded bytes are not UTF-8.
    InvalidUtf8,
}

impl Describe for FormError {
    fn describe<W: fmt::Write>(&self, f: &mut W) -> fmt::Result {
        f.write_str(match self {
            Self::TooLong => "request parameters are too long",
            Self::Repeated => "a request parameter is repeated",
            Self::BadEscape => "a request parameter has a malformed percent escape",
            Self::InvalidUtf8 => "a request parameter is not UTF-8",
        })
    }
}

display_by_describe!(FormError);

impl WireError for FormError {
    fn code(&self) -> ErrorCode {
        ErrorCode::InvalidRequest
    }
}

#[cfg(feature = "std")]
impl std::error::Error for FormError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_plus_and_percent_strictly() {
        let f = Form::parse("a=b+c&d=%41%e2%82%ac&e&=x", 100).unwrap();
        assert_eq!(f.get("a"), Some("b c"));
        assert_eq!(f.get("d"), Some("A€"));
        assert_eq!(f.get("e"), Some(""));
        assert_eq!(f.get(""), Some("x"));
        assert_eq!(Form::parse("a=%4", 100), Err(FormError::BadEscape));
        assert_eq!(Form::parse("a=%zz", 100), Err(FormError::BadEscape));
        assert_eq!(Form::parse("a=%ff", 100), Err(FormError::InvalidUtf8));
    }

    #[test]
    fn repeated_names_are_refused_even_when_encoded_differently() {
        assert_eq!(Form::parse("a=1&a=1", 100), Err(FormError::Repeated));
        assert_eq!(Form::parse("a=1&%61=2", 100), Err(FormError::Repeated));
        assert_eq!(Form::parse("a=1", 2), Err(FormError::TooLong));
    }

    #[test]
    fn encoding_round_trips() {
        let s = encode_pairs([("state", "a b&c=d/é"), ("x", "")]);
        assert_eq!(s, "state=a%20b%26c%3Dd%2F%C3%A9&x=");
        let f = Form::parse(&s, 100).unwrap();
        assert_eq!(f.get("state"), Some("a b&c=d/é"));
    }
}
