//! A small strict reader for the JSON objects of a JOSE header and a JWT
//! claims set (RFC 8259), borrowing from the decoded segment.
//!
//! It owns the JSON grammar the JWT code needs and nothing more: one
//! object of members, string values handed out as `&str` into the input
//! (a [`Cow::Owned`] only when an escape forces a copy), integers read
//! without any float parsing, and every other value skipped after its
//! grammar is checked. It follows `serde_json`'s choices wherever the RFC
//! leaves room, so both accept and refuse the same documents (a property
//! test checks it): strings that are returned are checked for UTF-8 and
//! for paired surrogate escapes (RFC 8259 §7, §8.2), strings that are only
//! skipped are checked for their escapes and control characters alone, and
//! nothing but whitespace may follow the object.
//!
//! [`parse_value`] builds a whole `serde_json::Value` on the same reader,
//! for the two other places that read JSON text: client metadata
//! (registration requests and metadata documents, with unique member
//! names) and deep-link drafts. It takes the place of `serde_json`'s
//! deserializer there, which keeps that deserializer (its string reader,
//! escape tables and visitor code) out of firmware images; numbers still go
//! through `serde_json::Number`'s own parser, so each keeps exactly the
//! value `serde_json` gives it. A property test holds it to
//! `serde_json::from_slice` and to the `serde` reader it replaced.
//!
//! ## Numbers with the `arbitrary-precision` feature
//!
//! The crate's `arbitrary-precision` feature (`serde_json`'s
//! `arbitrary_precision`; the probe firmware turns it on) makes a
//! `serde_json::Number` the number's own text, once it has passed RFC 8259
//! §6's grammar: [`parse_value`] computes no `f64` and [`write_value`]
//! writes a number back as it was read (`serde_json` only spells an
//! exponent `e` with a sign, `1E2` as `1e+2`), so a firmware image carries
//! no software float parser or printer. Against the default build:
//!
//! - **Written form.** `1.0e+2`, `-0`, `1.50` and `18446744073709551616`
//!   come back as they were read; the default build writes `100.0`,
//!   `-0.0`, `1.5` and `1.8446744073709552e+19`. Nothing is rounded, so a
//!   decimal never comes back one ULP off (the default build without
//!   `float-roundtrip` may). Integers that fit 64 bits are written the same
//!   either way.
//! - **Range.** RFC 8259 §6 lets a parser limit the range it accepts. The
//!   default build refuses a document with a number beyond `f64`'s range
//!   (`1e400`), as `serde_json` does; with the feature it is accepted and
//!   kept. A result stored as text on such a build and read back by a build
//!   without the feature would read as `null`.
//! - **Equality.** `Value`s compare numbers by their text (`1.0` is not
//!   `1.00`). The core never compares numbers to decide anything; its public
//!   types that hold a `Value` (deep links, completions) derive `PartialEq`.
//! - **`serde`.** `serde_json` hands a number to a `serde` visitor as a
//!   one-member map (`$serde_json::private::Number`), so untagged enums,
//!   `flatten` and hand-written visitors see a map where a number was. The
//!   core's own `serde` reads take no numbers (the `execute` envelope holds
//!   strings only; an `aud` claim that is a number is refused either way),
//!   but Cargo turns the feature on for every crate in the build.
//!
//! `cargo test -p portcullis-core --features arbitrary-precision` runs the
//! crate's tests in that form; the tests that compare against a `serde`
//! visitor (the replaced readers, kept as references) are left out there.

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;

use serde_json::{Map, Value};

/// The document is not the JSON this reader accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Syntax;

/// A JSON number, classified without converting it to a float.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Number {
    /// A non-negative integer that fits `u64`.
    Unsigned(u64),
    /// A negative integer that fits `i64`.
    Negative(i64),
    /// Anything else: a fraction, an exponent, `-0`, or an integer too
    /// large for 64 bits.
    Other,
}

/// A cursor over one JSON document.
pub(super) struct Reader<'a> {
    bytes: &'a [u8],
    /// The whole document when it is UTF-8 (checked once, up front), so
    /// returned strings are sliced from it without a check of their own.
    text: Option<&'a str>,
    at: usize,
    /// No member read yet in the current object.
    first: bool,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Self {
            bytes,
            text: core::str::from_utf8(bytes).ok(),
            at: 0,
            first: true,
        }
    }

    /// The next byte after any whitespace, not consumed.
    pub(super) fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.bytes.get(self.at).copied()
    }

    fn next(&mut self) -> Result<u8, Syntax> {
        let b = *self.bytes.get(self.at).ok_or(Syntax)?;
        self.at += 1;
        Ok(b)
    }

    fn expect(&mut self, b: u8) -> Result<(), Syntax> {
        if self.next()? == b {
            Ok(())
        } else {
            Err(Syntax)
        }
    }

    /// JSON whitespace (RFC 8259 §2).
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    /// Consumes `b` if it comes next, after any whitespace.
    pub(super) fn eat(&mut self, b: u8) -> bool {
        let found = self.peek() == Some(b);
        if found {
            self.at += 1;
        }
        found
    }

    /// Whether the next value is an object; consumes its `{` if so.
    pub(super) fn begin_object(&mut self) -> bool {
        if self.peek() == Some(b'{') {
            self.at += 1;
            self.first = true;
            true
        } else {
            false
        }
    }

    /// The next member's name, with the reader at its value; `None` once
    /// the object is closed.
    pub(super) fn next_name(&mut self) -> Result<Option<Cow<'a, str>>, Syntax> {
        let b = self.peek().ok_or(Syntax)?;
        if self.first {
            self.first = false;
            if b == b'}' {
                self.at += 1;
                return Ok(None);
            }
        } else {
            self.at += 1;
            match b {
                b',' => {}
                b'}' => return Ok(None),
                _ => return Err(Syntax),
            }
        }
        if self.peek() != Some(b'"') {
            return Err(Syntax);
        }
        let name = self.string()?;
        if self.peek() != Some(b':') {
            return Err(Syntax);
        }
        self.at += 1;
        Ok(Some(name))
    }

    /// Nothing but whitespace left.
    pub(super) fn end(&mut self) -> Result<(), Syntax> {
        if self.peek().is_none() {
            Ok(())
        } else {
            Err(Syntax)
        }
    }

    /// A string value, checked for UTF-8 and paired surrogates; borrowed
    /// unless it has escapes. The common case, a run of plain bytes up to
    /// the closing quote, is inline; escapes and errors go through
    /// [`Reader::string_escaped`].
    #[inline]
    pub(super) fn string(&mut self) -> Result<Cow<'a, str>, Syntax> {
        self.ws();
        if self.bytes.get(self.at) != Some(&b'"') {
            return Err(Syntax);
        }
        let start = self.at + 1;
        let end = plain_run(self.bytes, start);
        if self.bytes.get(end) != Some(&b'"') {
            return self.string_escaped(start, end);
        }
        self.at = end + 1;
        // Both ends sit next to an ASCII quote: char boundaries.
        let text = match self.text {
            Some(text) => text.get(start..end).ok_or(Syntax),
            None => core::str::from_utf8(&self.bytes[start..end]).map_err(|_| Syntax),
        };
        text.map(Cow::Borrowed)
    }

    /// The rest of a string whose plain run from `start` stopped at `at`
    /// on something other than its closing quote: an escape (the string
    /// is copied), a control character or the end of the input (refused).
    #[cold]
    #[inline(never)]
    fn string_escaped(&mut self, start: usize, at: usize) -> Result<Cow<'a, str>, Syntax> {
        if self.bytes.get(at) != Some(&b'\\') {
            return Err(Syntax);
        }
        self.at = at;
        let mut buf: Vec<u8> = self.bytes[start..self.at].to_vec();
        loop {
            match self.next()? {
                b'"' => return String::from_utf8(buf).map(Cow::Owned).map_err(|_| Syntax),
                b'\\' => {
                    let c = match self.next()? {
                        b'u' => self.unicode_escape()?,
                        other => char::from(simple_escape(other).ok_or(Syntax)?),
                    };
                    let mut utf8 = [0u8; 4];
                    buf.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
                }
                0x00..=0x1f => return Err(Syntax),
                b => buf.push(b),
            }
        }
    }

    /// Four hex digits of a `\u` escape.
    fn hex4(&mut self) -> Result<u16, Syntax> {
        let mut n = 0u16;
        for _ in 0..4 {
            let digit = crate::hex::digit(self.next()?).ok_or(Syntax)?;
            n = n << 4 | u16::from(digit);
        }
        Ok(n)
    }

    /// The character of a `\u` escape (the `\u` consumed): a surrogate must
    /// be a leading one followed at once by a trailing one (RFC 8259 §7).
    fn unicode_escape(&mut self) -> Result<char, Syntax> {
        let hi = self.hex4()?;
        let code = match hi {
            0xd800..=0xdbff => {
                self.expect(b'\\')?;
                self.expect(b'u')?;
                let lo = self.hex4()?;
                if !(0xdc00..=0xdfff).contains(&lo) {
                    return Err(Syntax);
                }
                0x1_0000 + ((u32::from(hi) - 0xd800) << 10 | (u32::from(lo) - 0xdc00))
            }
            0xdc00..=0xdfff => return Err(Syntax),
            _ => u32::from(hi),
        };
        char::from_u32(code).ok_or(Syntax)
    }

    /// Skips a string whose text is not needed: escapes and control
    /// characters are checked, the bytes are not.
    fn skip_string(&mut self) -> Result<(), Syntax> {
        self.expect(b'"')?;
        loop {
            self.at = plain_run(self.bytes, self.at);
            match self.next()? {
                b'"' => return Ok(()),
                b'\\' => match self.next()? {
                    b'u' => {
                        self.hex4()?;
                    }
                    other => {
                        simple_escape(other).ok_or(Syntax)?;
                    }
                },
                0x00..=0x1f => return Err(Syntax),
                _ => {}
            }
        }
    }

    /// A number (RFC 8259 §6), classified; no float is computed.
    pub(super) fn number(&mut self) -> Result<Number, Syntax> {
        self.ws();
        let negative = self.bytes.get(self.at) == Some(&b'-');
        if negative {
            self.at += 1;
        }
        let start = self.at;
        match self.next()? {
            b'0' => {}
            b'1'..=b'9' => self.digits(),
            _ => return Err(Syntax),
        }
        let int = &self.bytes[start..self.at];
        // `0` followed by a digit is a leading zero.
        if int == b"0" && matches!(self.bytes.get(self.at), Some(b'0'..=b'9')) {
            return Err(Syntax);
        }
        let mut integral = true;
        if self.bytes.get(self.at) == Some(&b'.') {
            self.at += 1;
            self.one_or_more_digits()?;
            integral = false;
        }
        if let Some(b'e' | b'E') = self.bytes.get(self.at) {
            self.at += 1;
            if let Some(b'+' | b'-') = self.bytes.get(self.at) {
                self.at += 1;
            }
            self.one_or_more_digits()?;
            integral = false;
        }
        if !integral {
            return Ok(Number::Other);
        }
        let mut magnitude: u64 = 0;
        for &d in int {
            let Some(m) = magnitude
                .checked_mul(10)
                .and_then(|m| m.checked_add(u64::from(d - b'0')))
            else {
                return Ok(Number::Other);
            };
            magnitude = m;
        }
        Ok(match (negative, magnitude) {
            (false, m) => Number::Unsigned(m),
            (true, 0) => Number::Other,
            (true, m) => match 0i64.checked_sub_unsigned(m) {
                Some(v) => Number::Negative(v),
                None => Number::Other,
            },
        })
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    fn one_or_more_digits(&mut self) -> Result<(), Syntax> {
        let start = self.at;
        self.digits();
        if self.at == start {
            Err(Syntax)
        } else {
            Ok(())
        }
    }

    /// One of `true`, `false`, `null`.
    pub(super) fn literal(&mut self) -> Result<(), Syntax> {
        self.ws();
        let rest = &self.bytes[self.at..];
        for word in [&b"true"[..], b"false", b"null"] {
            if rest.starts_with(word) {
                self.at += word.len();
                return Ok(());
            }
        }
        Err(Syntax)
    }

    /// Skips any value, checking its grammar. Nesting is tracked in a
    /// stack that allocates only once a value nests.
    pub(super) fn skip_value(&mut self) -> Result<(), Syntax> {
        let mut open: Vec<u8> = Vec::new();
        loop {
            match self.peek().ok_or(Syntax)? {
                b'"' => self.skip_string()?,
                b'-' | b'0'..=b'9' => {
                    self.number()?;
                }
                b'[' => {
                    self.at += 1;
                    if self.peek() == Some(b']') {
                        self.at += 1;
                    } else {
                        open.push(b']');
                        continue;
                    }
                }
                b'{' => {
                    self.at += 1;
                    if self.peek() == Some(b'}') {
                        self.at += 1;
                    } else {
                        open.push(b'}');
                        self.skip_member_name()?;
                        continue;
                    }
                }
                _ => self.literal()?,
            }
            // A value is complete: close what it completes.
            loop {
                let Some(&close) = open.last() else {
                    return Ok(());
                };
                let b = self.peek().ok_or(Syntax)?;
                self.at += 1;
                if b == close {
                    open.pop();
                } else if b == b',' {
                    if close == b'}' {
                        self.skip_member_name()?;
                    }
                    break;
                } else {
                    return Err(Syntax);
                }
            }
        }
    }

    /// `"name":` inside a skipped object.
    fn skip_member_name(&mut self) -> Result<(), Syntax> {
        self.ws();
        self.skip_string()?;
        if self.peek() != Some(b':') {
            return Err(Syntax);
        }
        self.at += 1;
        Ok(())
    }
}

/// Why [`parse_value`] refused a document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ValueFault {
    /// Not one JSON value followed by nothing but whitespace, or nested
    /// deeper than [`MAX_DEPTH`].
    Syntax,
    /// A member name appears twice in one object (unique names asked for).
    Duplicate,
}

impl From<Syntax> for ValueFault {
    fn from(Syntax: Syntax) -> Self {
        Self::Syntax
    }
}

/// Deepest nesting of arrays and objects [`parse_value`] accepts: 127, as
/// `serde_json`'s recursion limit of 128 allows.
pub(crate) const MAX_DEPTH: usize = 127;

/// The member `name` of the one JSON object in `bytes`, its other members
/// only checked for their grammar and never built (however large they
/// are): `Ok(None)` when the object has no such member. Refused
/// ([`ValueFault::Syntax`]) when `bytes` is not one object, and
/// ([`ValueFault::Duplicate`]) when `name` is there twice.
pub(crate) fn object_member(bytes: &[u8], name: &str) -> Result<Option<Value>, ValueFault> {
    let mut reader = Reader::new(bytes);
    if !reader.begin_object() {
        return Err(ValueFault::Syntax);
    }
    let mut found = None;
    while let Some(member) = reader.next_name()? {
        if member == name {
            if found.is_some() {
                return Err(ValueFault::Duplicate);
            }
            found = Some(reader.value(true, MAX_DEPTH)?);
        } else {
            reader.skip_value()?;
        }
    }
    reader.end()?;
    Ok(found)
}

/// Parses `bytes` as one JSON value (RFC 8259 §2) followed by nothing but
/// whitespace. With `unique_names`, an object with a repeated member name
/// at any depth is [`ValueFault::Duplicate`] (RFC 8259 §4 leaves duplicates
/// to the parser); without, the last one wins, as in `serde_json`. A name
/// repeated before a syntax error later on is still `Duplicate`, as with
/// the `serde` reader this replaces.
pub(crate) fn parse_value(bytes: &[u8], unique_names: bool) -> Result<Value, ValueFault> {
    let mut reader = Reader::new(bytes);
    let value = reader.value(unique_names, MAX_DEPTH)?;
    reader.end()?;
    Ok(value)
}

impl Reader<'_> {
    /// One value, with `depth` more levels of nesting allowed. Recursive,
    /// so its frame holds only what nesting needs: scalars and member
    /// insertion live in functions of their own, out of line, which keeps
    /// a 127-deep document to a modest stack on firmware.
    fn value(&mut self, unique_names: bool, depth: usize) -> Result<Value, ValueFault> {
        match self.peek().ok_or(Syntax)? {
            b'[' => {
                let depth = depth.checked_sub(1).ok_or(Syntax)?;
                self.at += 1;
                let mut items = Vec::new();
                if !self.eat(b']') {
                    loop {
                        items.push(self.value(unique_names, depth)?);
                        if self.eat(b']') {
                            break;
                        }
                        if !self.eat(b',') {
                            return Err(ValueFault::Syntax);
                        }
                    }
                }
                Ok(Value::Array(items))
            }
            b'{' => {
                let depth = depth.checked_sub(1).ok_or(Syntax)?;
                self.begin_object();
                let mut members = Map::new();
                while let Some(name) = self.next_name()? {
                    let value = self.value(unique_names, depth)?;
                    if insert(&mut members, name, value) && unique_names {
                        return Err(ValueFault::Duplicate);
                    }
                }
                Ok(Value::Object(members))
            }
            _ => Ok(self.scalar()?),
        }
    }

    /// A string, number or literal.
    #[inline(never)]
    fn scalar(&mut self) -> Result<Value, Syntax> {
        Ok(match self.peek().ok_or(Syntax)? {
            b'"' => Value::String(self.string()?.into_owned()),
            b'-' | b'0'..=b'9' => {
                let start = self.at;
                self.number()?;
                // The grammar just checked is ASCII; `serde_json` turns the
                // text into the same number its deserializer would (with
                // `arbitrary-precision`, the text itself; module docs).
                let text = core::str::from_utf8(&self.bytes[start..self.at]).map_err(|_| Syntax)?;
                Value::Number(text.parse().map_err(|_| Syntax)?)
            }
            _ => {
                let rest = &self.bytes[self.at..];
                let (value, len) = if rest.starts_with(b"true") {
                    (Value::Bool(true), 4)
                } else if rest.starts_with(b"false") {
                    (Value::Bool(false), 5)
                } else if rest.starts_with(b"null") {
                    (Value::Null, 4)
                } else {
                    return Err(Syntax);
                };
                self.at += len;
                value
            }
        })
    }
}

/// Adds a member to an object, the last of a repeated name winning;
/// whether the name was there already.
#[inline(never)]
fn insert(members: &mut Map<String, Value>, name: Cow<'_, str>, value: Value) -> bool {
    members.insert(name.into_owned(), value).is_some()
}

/// The document left the compact form [`Compact`] reads: the full parser
/// decides.
#[cfg(feature = "std")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct NotCompact;

/// A cursor over a claims document in the compact form the signer writes
/// (see `ClaimsRef::parse_compact`): members are asked for in the order
/// they may appear, each at most once, and every method answers `None`
/// when the document leaves that form. Hosts only.
#[cfg(feature = "std")]
pub(super) struct Compact<'a> {
    text: &'a str,
    /// Where the next member's name starts (or, once closed, the end).
    at: usize,
    /// The closing `}` has been read.
    closed: bool,
}

#[cfg(feature = "std")]
impl<'a> Compact<'a> {
    /// A cursor after the `{` of `json`; `None` unless it is UTF-8 and
    /// starts with `{`.
    pub(super) fn new(json: &'a [u8]) -> Option<Self> {
        let text = core::str::from_utf8(json).ok()?;
        match json {
            [b'{', b'}', ..] => Some(Self {
                text,
                at: 2,
                closed: true,
            }),
            [b'{', ..] => Some(Self {
                text,
                at: 1,
                closed: false,
            }),
            _ => None,
        }
    }

    /// Whether the next member is `name` (its quotes and colon included);
    /// if so the cursor moves to its value. The name's length is a
    /// constant, so the comparison is a load or two, not a call.
    #[inline]
    fn name<const N: usize>(&mut self, name: &[u8; N]) -> bool {
        let here = !self.closed
            && self
                .text
                .as_bytes()
                .get(self.at..)
                .and_then(<[u8]>::first_chunk::<N>)
                .is_some_and(|next| next == name);
        if here {
            self.at += N;
        }
        here
    }

    /// The `,` or `}` after a value.
    #[inline]
    fn separator(&mut self) -> Option<()> {
        match self.text.as_bytes().get(self.at)? {
            b',' => {}
            b'}' => self.closed = true,
            _ => return None,
        }
        self.at += 1;
        Some(())
    }

    /// The string value of member `name` if it comes next (`Ok(None)` if
    /// another does).
    #[inline]
    pub(super) fn string<const N: usize>(
        &mut self,
        name: &[u8; N],
    ) -> Result<Option<&'a str>, NotCompact> {
        if !self.name(name) {
            return Ok(None);
        }
        let (value, next) = compact_string(self.text, self.at).ok_or(NotCompact)?;
        self.at = next;
        self.separator().ok_or(NotCompact)?;
        Ok(Some(value))
    }

    /// The integer value of member `name` if it comes next.
    #[inline]
    pub(super) fn int<const N: usize>(
        &mut self,
        name: &[u8; N],
    ) -> Result<Option<i64>, NotCompact> {
        if !self.name(name) {
            return Ok(None);
        }
        let (value, next) = compact_int(self.text.as_bytes(), self.at).ok_or(NotCompact)?;
        self.at = next;
        self.separator().ok_or(NotCompact)?;
        Ok(Some(value))
    }

    /// Whether the document closed with its last member and nothing
    /// follows.
    pub(super) fn finished(&self) -> bool {
        self.closed && self.at == self.text.len()
    }
}

/// The string at `at` in a compact document (`"…"` with no escape and no
/// control character) and the index after its closing quote; `None` for
/// anything else. Both ends sit next to an ASCII quote, so the slice is on
/// char boundaries of the UTF-8 `text`.
#[cfg(feature = "std")]
#[inline]
fn compact_string(text: &str, at: usize) -> Option<(&str, usize)> {
    let bytes = text.as_bytes();
    if bytes.get(at) != Some(&b'"') {
        return None;
    }
    let end = plain_run(bytes, at + 1);
    if bytes.get(end) != Some(&b'"') {
        return None;
    }
    Some((text.get(at + 1..end)?, end + 1))
}

/// The integer at `at` in a compact document: digits with no sign and no
/// leading zero (a lone `0` aside), in `i64`, and the index after them;
/// `None` for anything else, including a number that goes on with a
/// fraction or an exponent (the caller then finds no `,` or `}` next).
#[cfg(feature = "std")]
#[inline]
fn compact_int(bytes: &[u8], mut at: usize) -> Option<(i64, usize)> {
    match *bytes.get(at)? {
        b'0' => return Some((0, at + 1)),
        b'1'..=b'9' => {}
        _ => return None,
    }
    let mut v: i64 = 0;
    while let Some(&d) = bytes.get(at) {
        if !d.is_ascii_digit() {
            break;
        }
        v = v.checked_mul(10)?.checked_add(i64::from(d - b'0'))?;
        at += 1;
    }
    Some((v, at))
}

/// The end of the run of string bytes from `at` that need no attention: the
/// index of the first quote, backslash or control character (or the end).
/// Eight bytes at a time: the classic "has a zero byte" test finds any byte
/// equal to `"` or `\` or below 0x20 in a word; its lowest set bit is exact
/// (a borrow only ever flags bytes above a true match), so the first such
/// byte of a word is found without a byte loop.
#[inline]
fn plain_run(bytes: &[u8], mut at: usize) -> usize {
    while let Some(word) = bytes.get(at..).and_then(<[u8]>::first_chunk::<8>) {
        let special = special_bytes(u64::from_le_bytes(*word));
        if special != 0 {
            // Little-endian: byte i of the word is bits 8i..8i+8.
            return at + (special.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    while let Some(&b) = bytes.get(at) {
        if b == b'"' || b == b'\\' || b < 0x20 {
            break;
        }
        at += 1;
    }
    at
}

/// The high bit of each byte of `x` that is a quote, a backslash or a
/// control character, and possibly of bytes above such a one (a borrow
/// only ever flags bytes above a true match): zero exactly when no byte of
/// the word needs attention in a JSON string. The classic "has a zero
/// byte" test, three times.
#[inline]
const fn special_bytes(x: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const fn zero(v: u64) -> u64 {
        v.wrapping_sub(ONES) & !v & HIGH
    }
    zero(x ^ (ONES * b'"' as u64))
        | zero(x ^ (ONES * b'\\' as u64))
        | (x.wrapping_sub(ONES * 0x20) & !x & HIGH)
}

/// The byte a one-character escape stands for (RFC 8259 §7).
fn simple_escape(b: u8) -> Option<u8> {
    Some(match b {
        b'"' => b'"',
        b'\\' => b'\\',
        b'/' => b'/',
        b'b' => 0x08,
        b'f' => 0x0c,
        b'n' => b'\n',
        b'r' => b'\r',
        b't' => b'\t',
        _ => return None,
    })
}

/// Writes `value` as compact JSON: byte for byte what `serde_json`'s
/// serializer writes (`serde_json::to_vec`; a test holds the two together),
/// on the escapes of [`Sink::string_rest`], so a firmware image needs no
/// `serde` serializer for `Value`. Object members come in the map's
/// (sorted) order; a number is written as `serde_json::Number` displays
/// itself, which is what its serializer writes (with `arbitrary-precision`,
/// its text as read; module docs). Like `serde_json`'s, it recurses once
/// per level of nesting.
pub(crate) fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.raw(b"null"),
        Value::Bool(true) => out.raw(b"true"),
        Value::Bool(false) => out.raw(b"false"),
        // With `arbitrary-precision` the number is its own text (module
        // docs), written as it is.
        #[cfg(feature = "arbitrary-precision")]
        Value::Number(n) => out.raw(n.as_str().as_bytes()),
        #[cfg(not(feature = "arbitrary-precision"))]
        Value::Number(n) => {
            use core::fmt::Write as _;
            // Writing to a vector cannot fail.
            let _ = write!(VecWriter(out), "{n}");
        }
        Value::String(text) => {
            out.raw(b"\"");
            out.string_rest(text);
        }
        Value::Array(items) => {
            out.raw(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.raw(b",");
                }
                write_value(out, item);
            }
            out.raw(b"]");
        }
        Value::Object(members) => write_object(out, members),
    }
}

/// [`write_value`] of an object.
pub(crate) fn write_object(out: &mut Vec<u8>, members: &Map<String, Value>) {
    out.raw(b"{");
    for (i, (name, item)) in members.iter().enumerate() {
        if i > 0 {
            out.raw(b",");
        }
        out.raw(b"\"");
        out.string_rest(name);
        out.raw(b":");
        write_value(out, item);
    }
    out.raw(b"}");
}

/// `core::fmt` output appended to a byte vector.
#[cfg(not(feature = "arbitrary-precision"))]
struct VecWriter<'a>(&'a mut Vec<u8>);

#[cfg(not(feature = "arbitrary-precision"))]
impl core::fmt::Write for VecWriter<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// Where JSON is written: the signer's [`Spill`] buffer, or a vector
/// ([`write_value`]).
pub(super) trait Sink {
    /// Appends bytes as they are.
    fn raw(&mut self, bytes: &[u8]);
    /// Appends `s` as a JSON string after its opening quote (which the
    /// claims writer writes with the member name), escaping only `"`, `\\`
    /// and control characters (RFC 8259 §7). A pre-scan finds whether any byte
    /// needs an escape, and most values need none, so they are copied
    /// whole.
    fn string_rest(&mut self, s: &str) {
        write_escaped(self, s);
    }
    /// Appends an integer, without `core::fmt` ([`format_int`]).
    fn int(&mut self, v: i64) {
        let mut digits = [0u8; 20];
        let n = format_int(v, &mut digits);
        self.raw(&digits[..n]);
    }
}

/// Writes `v` in decimal at the front of `out` (20 bytes hold any `i64`)
/// and returns its length: the length first (from the number's base-10
/// logarithm), then two digits at a time from the right.
fn format_int(v: i64, out: &mut [u8; 20]) -> usize {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let sign = usize::from(v < 0);
    out[0] = b'-';
    let mut m = v.unsigned_abs();
    let len = sign + m.checked_ilog10().unwrap_or(0) as usize + 1;
    let mut at = len;
    while m >= 100 {
        let i = (m % 100) as usize * 2;
        m /= 100;
        at -= 2;
        out[at..at + 2].copy_from_slice(&PAIRS[i..i + 2]);
    }
    if m >= 10 {
        let i = m as usize * 2;
        out[at - 2..at].copy_from_slice(&PAIRS[i..i + 2]);
    } else {
        out[at - 1] = b'0' + m as u8;
    }
    len
}

/// Bytes of JSON the signer writes on the stack before spilling to the
/// heap: a token's claims are a few hundred bytes.
const SPILL_AT: usize = 1024;

/// The signer's JSON buffer: on the stack up to [`SPILL_AT`] bytes, so an
/// ordinary token's claims cost no allocation and need no measuring pass
/// first; larger claims move to the heap once.
pub(super) struct Spill {
    stack: [u8; SPILL_AT],
    len: usize,
    heap: Option<Vec<u8>>,
}

impl Spill {
    /// An empty buffer.
    pub(super) const fn new() -> Self {
        Self {
            stack: [0; SPILL_AT],
            len: 0,
            heap: None,
        }
    }

    /// What has been written.
    pub(super) fn as_bytes(&self) -> &[u8] {
        match &self.heap {
            Some(heap) => heap,
            None => &self.stack[..self.len],
        }
    }
}

impl Sink for Spill {
    #[inline]
    fn raw(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        match self.stack.get_mut(self.len..end) {
            Some(room) if self.heap.is_none() => {
                room.copy_from_slice(bytes);
                self.len = end;
            }
            _ => self.spill(bytes),
        }
    }

    /// Copies the value in whole words, testing each word for a byte that
    /// needs an escape as it goes (one pass, no call to `memcpy`): up to
    /// 16 bytes as two overlapping windows (its first and last four or
    /// eight), longer ones sixteen bytes a step and then their last
    /// sixteen. A value that needs an escape, or that would not fit on
    /// the stack, is written again by [`write_escaped`]. Hosts only:
    /// firmware keeps the smaller pre-scan and copy of the default.
    #[cfg(feature = "std")]
    #[inline]
    fn string_rest(&mut self, s: &str) {
        let bytes = s.as_bytes();
        let (start, n) = (self.len, bytes.len());
        // The value and its closing quote.
        let Some(room) = self.stack.get_mut(start..=start + n) else {
            return write_escaped(self, s);
        };
        if self.heap.is_some() {
            return write_escaped(self, s);
        }
        let word = |w: &[u8; 8]| special_bytes(u64::from_le_bytes(*w));
        let pair = |w: &[u8; 16]| {
            let (a, b) = w.split_at(8);
            let (a, b) = (
                a.first_chunk().unwrap_or(&[0; 8]),
                b.first_chunk().unwrap_or(&[0; 8]),
            );
            word(a) | word(b)
        };
        let special = if let Some(last) = bytes.last_chunk::<16>() {
            // Leaving at the first step that needs attention also keeps the
            // loop a loop: with a fixed trip count the compiler turns the
            // copy back into a call to `memcpy`.
            for (w, o) in bytes.chunks_exact(16).zip(room.chunks_exact_mut(16)) {
                let w = w.first_chunk::<16>().unwrap_or(&[0; 16]);
                if pair(w) != 0 {
                    return write_escaped(self, s);
                }
                o.copy_from_slice(w);
            }
            room[n - 16..n].copy_from_slice(last);
            pair(last)
        } else if let (Some(first), Some(last)) =
            (bytes.first_chunk::<8>(), bytes.last_chunk::<8>())
        {
            room[..8].copy_from_slice(first);
            room[n - 8..n].copy_from_slice(last);
            word(first) | word(last)
        } else if let (Some(first), Some(last)) =
            (bytes.first_chunk::<4>(), bytes.last_chunk::<4>())
        {
            // Both four-byte windows tested as one word.
            room[..4].copy_from_slice(first);
            room[n - 4..n].copy_from_slice(last);
            let (a, b) = (u32::from_le_bytes(*first), u32::from_le_bytes(*last));
            special_bytes(u64::from(a) | u64::from(b) << 32)
        } else {
            let mut special = 0;
            for (i, &b) in bytes.iter().enumerate() {
                special |= u64::from(needs_escape(b));
                room[i] = b;
            }
            special
        };
        room[n] = b'"';
        if special == 0 {
            self.len = start + n + 1;
        } else {
            write_escaped(self, s);
        }
    }

    /// Formats the integer straight into the stack buffer when there is
    /// room for any `i64`.
    #[inline]
    fn int(&mut self, v: i64) {
        let room = self.stack.get_mut(self.len..self.len + 20);
        match room.and_then(|r| <&mut [u8; 20]>::try_from(r).ok()) {
            Some(room) if self.heap.is_none() => self.len += format_int(v, room),
            _ => {
                let mut digits = [0u8; 20];
                let n = format_int(v, &mut digits);
                self.raw(&digits[..n]);
            }
        }
    }
}

impl Spill {
    /// [`Sink::raw`] once the stack is full: out of line, so the common
    /// path stays small enough to inline.
    #[cold]
    #[inline(never)]
    fn spill(&mut self, bytes: &[u8]) {
        let stack = &self.stack[..self.len];
        self.heap
            .get_or_insert_with(|| stack.to_vec())
            .extend_from_slice(bytes);
    }
}

impl Sink for Vec<u8> {
    fn raw(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// [`Sink::string_rest`] through [`Sink::raw`]: a pre-scan finds whether
/// any byte needs an escape, and most values need none, so they are copied
/// whole.
fn write_escaped(out: &mut (impl Sink + ?Sized), s: &str) {
    let bytes = s.as_bytes();
    if plain_run(bytes, 0) == bytes.len() {
        out.raw(bytes);
    } else {
        let mut from = 0;
        for (i, &b) in bytes.iter().enumerate() {
            if needs_escape(b) {
                out.raw(&bytes[from..i]);
                escape(b, |e| out.raw(e));
                from = i + 1;
            }
        }
        out.raw(&bytes[from..]);
    }
    out.raw(b"\"");
}

fn needs_escape(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// Hands `out` the escape of `b`, one that [`needs_escape`]: the short
/// form where JSON has one, `\u00XX` otherwise.
fn escape(b: u8, out: impl FnOnce(&[u8])) {
    let short = match b {
        b'"' => b'"',
        b'\\' => b'\\',
        b'\n' => b'n',
        b'\r' => b'r',
        b'\t' => b't',
        0x08 => b'b',
        0x0c => b'f',
        _ => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            let (hi, lo) = (HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]);
            out(&[b'\\', b'u', b'0', b'0', hi, lo]);
            return;
        }
    };
    out(&[b'\\', short]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy as _;

    #[test]
    fn numbers_are_classified_without_floats() {
        let n = |s: &str| Reader::new(s.as_bytes()).number();
        assert_eq!(n("0"), Ok(Number::Unsigned(0)));
        assert_eq!(n("18446744073709551615"), Ok(Number::Unsigned(u64::MAX)));
        assert_eq!(n("18446744073709551616"), Ok(Number::Other));
        assert_eq!(n("-9223372036854775808"), Ok(Number::Negative(i64::MIN)));
        assert_eq!(n("-9223372036854775809"), Ok(Number::Other));
        assert_eq!(n("-0"), Ok(Number::Other));
        assert_eq!(n("1.5"), Ok(Number::Other));
        assert_eq!(n("1E+3"), Ok(Number::Other));
        for bad in ["01", "-", "1.", "1e", ".5", "+1", "-01"] {
            assert_eq!(n(bad), Err(Syntax), "{bad}");
        }
    }

    /// A number read by [`parse_value`] and written by [`write_value`]:
    /// its `f64` value in the default build, its own text with
    /// `arbitrary-precision` (module docs), and an integer that fits 64
    /// bits the same either way.
    #[test]
    fn numbers_are_written_back_as_serde_json_keeps_them() {
        let round_trip = |text: &str| {
            parse_value(text.as_bytes(), false).map(|value| {
                let mut out = Vec::new();
                write_value(&mut out, &value);
                String::from_utf8(out).unwrap()
            })
        };
        let forms = "[1.0E+2,-0,1.50,0.1e1,2e-1,18446744073709551616]";
        #[cfg(not(feature = "arbitrary-precision"))]
        let (written, huge) = (
            Ok("[100.0,-0.0,1.5,1.0,0.2,1.8446744073709552e+19]"),
            Err(&ValueFault::Syntax),
        );
        // The text as read; `serde_json` spells each exponent `e` and a sign.
        #[cfg(feature = "arbitrary-precision")]
        let (written, huge) = (
            Ok("[1.0e+2,-0,1.50,0.1e+1,2e-1,18446744073709551616]"),
            Ok("[1e+400,-1e+400]"),
        );
        assert_eq!(round_trip(forms).as_deref(), written);
        assert_eq!(round_trip("[1e400,-1E400]").as_deref(), huge);
        let ints = "[0,-1,18446744073709551615,-9223372036854775808]";
        assert_eq!(round_trip(ints).as_deref(), Ok(ints));
        // `1.0` and `1.00`: one `f64` by default, two texts with the feature.
        let one = parse_value(b"1.0", false);
        let same = parse_value(b"1.00", false);
        assert_eq!(one == same, cfg!(not(feature = "arbitrary-precision")));
    }

    #[test]
    fn strings_borrow_unless_escaped() {
        fn s(t: &str) -> Result<Cow<'_, str>, Syntax> {
            Reader::new(t.as_bytes()).string()
        }
        assert!(matches!(s(r#""abc""#), Ok(Cow::Borrowed("abc"))));
        assert_eq!(
            s(r#""a\"b\u00e9\ud83d\ude00""#).as_deref(),
            Ok("a\"b\u{e9}\u{1f600}")
        );
        for bad in [
            r#""\ud83d""#,
            r#""\ude00""#,
            r#""\x""#,
            "\"a\u{1}\"",
            r#""abc"#,
        ] {
            assert_eq!(s(bad), Err(Syntax), "{bad}");
        }
    }

    proptest::proptest! {
        /// The word-at-a-time scan stops exactly where a byte loop would,
        /// whatever bytes (UTF-8 or not) sit around the first special one.
        #[test]
        fn plain_run_stops_at_the_first_special_byte(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::prelude::any::<u8>(),
                    proptest::strategy::Just(b'"'),
                    proptest::strategy::Just(b'\\'),
                    0x20u8..0x7f,
                ],
                0..40,
            ),
            at in 0usize..40,
        ) {
            let at = at.min(bytes.len());
            let expected = bytes[at..]
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                .map_or(bytes.len(), |i| at + i);
            proptest::prop_assert_eq!(plain_run(&bytes, at), expected);
        }

        /// [`write_value`] writes what `serde_json::to_vec` writes, for any
        /// value: every number form, strings with control characters,
        /// quotes and non-ASCII text, nested arrays and objects.
        #[test]
        fn values_are_written_as_serde_json_writes_them(value in any_value()) {
            let mut ours = Vec::new();
            write_value(&mut ours, &value);
            proptest::prop_assert_eq!(ours, serde_json::to_vec(&value).unwrap());
        }
    }

    fn any_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let text = || proptest::string::string_regex("(.|[\\x00-\\x1f\"\\\\\\x7f])*").unwrap();
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<u64>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            text().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                proptest::collection::btree_map(text(), inner, 0..8)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    #[test]
    fn escaping_round_trips_through_serde_json() {
        for s in ["plain", "q\"b\\s", "\u{1}\n\t\u{7f}é", "\"", "a\u{1f}"] {
            let mut out = b"\"".to_vec();
            out.string_rest(s);
            assert_eq!(out, serde_json::to_vec(s).unwrap_or_default());
        }
    }

    #[test]
    fn integers_are_written_as_core_fmt_writes_them() {
        let mut edges = alloc::vec![0, 1, -1, i64::MIN, i64::MAX, i64::MIN + 1];
        let mut p = 1i64;
        while let Some(next) = p.checked_mul(10) {
            edges.extend([p - 1, p, p + 1, -p, -p + 1, -p - 1]);
            p = next;
        }
        edges.extend([p - 1, p, -p]);
        for v in edges {
            let mut digits = [0u8; 20];
            let n = format_int(v, &mut digits);
            assert_eq!(&digits[..n], alloc::format!("{v}").as_bytes(), "{v}");
        }
    }

    proptest::proptest! {
        /// The stack buffer's word-at-a-time string copy (its tail, its
        /// fallback to escaping, its edge at the end of the stack) and its
        /// integers write exactly what the plain `Vec` writer does.
        #[test]
        fn spill_writes_what_a_vector_writes(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    "[a-z0-9:/._~-]{0,40}".prop_map(Ok),
                    "[\\x00-\\x7f]{0,20}".prop_map(Ok),
                    "\\PC{0,12}".prop_map(Ok),
                    proptest::prelude::any::<i64>().prop_map(Err),
                ],
                0..80,
            ),
        ) {
            let mut spill = Spill::new();
            let mut reference = Vec::new();
            for part in &parts {
                match part {
                    Ok(s) => {
                        spill.raw(b"\"");
                        spill.string_rest(s);
                        reference.raw(b"\"");
                        reference.string_rest(s);
                    }
                    Err(v) => {
                        spill.int(*v);
                        reference.int(*v);
                    }
                }
                proptest::prop_assert_eq!(spill.as_bytes(), &reference[..]);
            }
        }
    }

    #[test]
    fn spill_moves_to_the_heap_past_its_stack() {
        let mut spill = Spill::new();
        let mut reference = Vec::new();
        for i in 0..300u16 {
            let piece = [b'a' + (i % 26) as u8; 7];
            spill.raw(&piece[..usize::from(i % 8)]);
            reference.raw(&piece[..usize::from(i % 8)]);
            assert_eq!(spill.as_bytes(), &reference[..]);
        }
        assert!(spill.heap.is_some());
    }
}
