//! The open-redirect guard: [`SafePath`], a same-origin path that is safe to
//! put in a `Location` header.
//!
//! A redirect target that comes from a link (the open route's `to=`) is
//! attacker-controlled. Browsers resolve it with the WHATWG URL Standard's
//! basic URL parser against the current URL: a reference starting with two
//! slashes (or a slash and a backslash, which special schemes treat alike)
//! names another host; tabs and newlines are silently removed before parsing;
//! leading control characters and spaces are trimmed; a scheme makes the
//! reference absolute; and `.`/`..` segments (also spelled with `%2e`) are
//! collapsed, which can turn `/.//evil.com` into the path `//evil.com`.
//!
//! The guard accepts only what RFC 3986 §4.2 calls an absolute-path reference
//! and is strict enough that acceptance *implies* the property we need, so
//! the accept path never runs a URL parser and never allocates:
//!
//! - exactly one leading `/`, bounded length ([`SafePath::MAX_LEN`]);
//! - no `\` anywhere, no control character or whitespace (ASCII or Unicode,
//!   raw or percent-encoded) except the encoded space `%20`, no invisible
//!   format characters;
//! - well-formed percent-encoding of valid UTF-8, no encoded `%` (double
//!   encoding), no encoded `/` or `\` in the path, no `.`/`..` segment;
//! - no look-alike separators in the path (full-width solidus and reverse
//!   solidus, division slash, full-width full stop, …) that a Unicode
//!   normaliser could fold into `/`, `\` or `.`.
//!
//! Two things are safe and therefore accepted, because file names and
//! search queries carry them:
//!
//! - `%20`. Browsers keep it as it is, and even decoded it is an inner space
//!   of a path that starts with `/`: the parser neither strips it (it strips
//!   only tabs and newlines inside the input, and spaces at its ends) nor
//!   reads it as a separator. Raw spaces and every other encoded control
//!   character stay refused.
//! - Look-alike separators in the query or the fragment. Only the text
//!   before the first `?` or `#` can reach the authority; whatever a
//!   normaliser makes of a look-alike after it, the host stays the same.
//!
//! What remains resolves, against any `http`/`https` origin, to a URL with
//! that origin whose path is the input's path (percent-encoded where the
//! parser requires it) and therefore starts with `/` followed by something
//! other than `/`. The property tests and the differential fuzz target check
//! this against the `url` crate.

use core::fmt;

use crate::error::{ErrorCode, WireError};

/// A redirect target accepted by the open-redirect guard: a path (with an
/// optional query and fragment) that stays on the current origin.
///
/// Construct it with [`SafePath::new`]; the accepted text is available
/// unchanged through [`SafePath::as_str`]. Acceptance does not allocate.
///
/// ```
/// use portcullis_core::redirect::{SafePath, UnsafePathReason};
///
/// let ok = SafePath::new("/inbox?label=work#top").unwrap();
/// assert_eq!(ok.as_str(), "/inbox?label=work#top");
///
/// let err = SafePath::new("//evil.com").unwrap_err();
/// assert_eq!(err.reason(), UnsafePathReason::SchemeRelative);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SafePath<'a>(&'a str);

impl<'a> SafePath<'a> {
    /// The longest accepted target, in bytes.
    pub const MAX_LEN: usize = 2048;

    /// Checks `target` and accepts it if it is a safe same-origin path.
    pub fn new(target: &'a str) -> Result<Self, UnsafePathError> {
        check(target)?;
        Ok(Self(target))
    }

    /// The accepted text, exactly as given.
    #[must_use]
    pub const fn as_str(&self) -> &'a str {
        self.0
    }

    /// The path alone: everything before the first `?` or `#`. For
    /// comparing paths only: the target to redirect to is
    /// [`SafePath::as_str`], query included.
    #[must_use]
    pub fn path_without_query(&self) -> &'a str {
        let end = self.0.find(['?', '#']).unwrap_or(self.0.len());
        &self.0[..end]
    }
}

impl AsRef<str> for SafePath<'_> {
    fn as_ref(&self) -> &str {
        self.0
    }
}

impl fmt::Display for SafePath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// Why the guard rejected a redirect target.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnsafePathReason {
    /// The target is empty.
    Empty,
    /// The target is longer than [`SafePath::MAX_LEN`].
    TooLong,
    /// The target does not start with `/` (a relative path or a host).
    NotRooted,
    /// The target starts with a scheme (`https:`, `javascript:`, …).
    Scheme,
    /// The target starts with `//`: a scheme-relative reference to another host.
    SchemeRelative,
    /// The target contains a backslash, which WHATWG parsers treat as `/`.
    Backslash,
    /// A control character or whitespace (ASCII or Unicode, raw or
    /// percent-encoded; `%20` is accepted), or an invisible format character.
    ControlOrSpace,
    /// An encoded `/` or `\` in the path, which a second decoding would turn
    /// into a separator.
    EncodedSeparator,
    /// An encoded `%` (`%25`): double encoding, which hides other encodings.
    DoubleEncoded,
    /// A `%` not followed by two hex digits, or escapes that do not decode to
    /// UTF-8.
    BadPercentEncoding,
    /// A `.` or `..` path segment (also as `%2e`), which resolution collapses
    /// and which can move the path to `//`.
    DotSegment,
    /// A character in the path that Unicode normalisation folds into `/`,
    /// `\` or `.` (full-width solidus U+FF0F, reverse solidus U+FF3C, …).
    /// Accepted in the query and the fragment.
    ConfusableSeparator,
}

impl UnsafePathReason {
    /// A short, stable, human-readable description.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Empty => "empty target",
            Self::TooLong => "target too long",
            Self::NotRooted => "target is not an absolute path",
            Self::Scheme => "target has a scheme",
            Self::SchemeRelative => "scheme-relative target (`//host`)",
            Self::Backslash => "backslash in target",
            Self::ControlOrSpace => "control character or whitespace in target",
            Self::EncodedSeparator => "encoded `/` or `\\` in path",
            Self::DoubleEncoded => "double percent-encoding (`%25`)",
            Self::BadPercentEncoding => "malformed percent-encoding",
            Self::DotSegment => "`.` or `..` path segment",
            Self::ConfusableSeparator => "look-alike separator character",
        }
    }
}

impl fmt::Display for UnsafePathReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The open-redirect guard rejected a target: why, and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UnsafePathError {
    reason: UnsafePathReason,
    offset: usize,
}

impl UnsafePathError {
    const fn new(reason: UnsafePathReason, offset: usize) -> Self {
        Self { reason, offset }
    }

    /// Why the target was rejected.
    #[must_use]
    pub const fn reason(&self) -> UnsafePathReason {
        self.reason
    }

    /// The byte offset in the target where the guard stopped.
    #[must_use]
    pub const fn offset(&self) -> usize {
        self.offset
    }
}

impl fmt::Display for UnsafePathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unsafe redirect target: {} (at byte {})",
            self.reason, self.offset
        )
    }
}

impl WireError for UnsafePathError {
    fn code(&self) -> ErrorCode {
        ErrorCode::InvalidLink
    }
}

#[cfg(feature = "std")]
impl std::error::Error for UnsafePathError {}

type Why = UnsafePathReason;

// Byte classes for the single pass. Everything not listed is an ordinary
// path character the URL parser keeps (or percent-encodes) in place.
const PLAIN: u8 = 0;
const SLASH: u8 = 1;
const PERCENT: u8 = 2;
const QUESTION: u8 = 3;
const HASH: u8 = 4;
const DOT: u8 = 5;
const BACKSLASH: u8 = 6;
const CONTROL: u8 = 7;
const NON_ASCII: u8 = 8;

/// The classes of bytes in the path. Query and fragment tables demote the
/// bytes that only matter in the path (`/`, `.`, and `?` or `#` once past
/// them) to `PLAIN`, so the skip loop runs over them.
const PATH_CLASS: [u8; 256] = class_table(false, false);
const QUERY_CLASS: [u8; 256] = class_table(true, false);
const FRAGMENT_CLASS: [u8; 256] = class_table(true, true);

const fn class_table(query: bool, fragment: bool) -> [u8; 256] {
    let mut table = [PLAIN; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = match i as u8 {
            0x00..=0x20 | 0x7f => CONTROL,
            b'/' if !query => SLASH,
            b'.' if !query => DOT,
            b'?' if !query => QUESTION,
            b'#' if !fragment => HASH,
            b'%' => PERCENT,
            b'\\' => BACKSLASH,
            0x80..=0xff => NON_ASCII,
            _ => PLAIN,
        };
        i += 1;
    }
    table
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Path,
    Query,
    Fragment,
}

/// Segment state for dot-segment detection: how many dots, and whether
/// anything else appeared.
#[derive(Clone, Copy)]
struct Segment {
    dots: u8,
    other: bool,
}

impl Segment {
    const EMPTY: Self = Self {
        dots: 0,
        other: false,
    };

    fn is_dot_segment(self) -> bool {
        !self.other && (self.dots == 1 || self.dots == 2)
    }
}

/// Pending UTF-8 sequence assembled from percent-escapes.
struct Utf8 {
    buf: [u8; 4],
    len: u8,
    need: u8,
}

/// The start of the target: one `/`, then neither `/` nor `\`.
fn check_start(b: &[u8]) -> Result<(), UnsafePathError> {
    let Some(&first) = b.first() else {
        return Err(UnsafePathError::new(Why::Empty, 0));
    };
    if b.len() > SafePath::MAX_LEN {
        return Err(UnsafePathError::new(Why::TooLong, SafePath::MAX_LEN));
    }
    if first != b'/' {
        let reason = match PATH_CLASS[usize::from(first)] {
            BACKSLASH => Why::Backslash,
            CONTROL => Why::ControlOrSpace,
            _ if has_scheme(b) => Why::Scheme,
            _ => Why::NotRooted,
        };
        return Err(UnsafePathError::new(reason, 0));
    }
    match b.get(1) {
        Some(b'/') => Err(UnsafePathError::new(Why::SchemeRelative, 1)),
        Some(b'\\') => Err(UnsafePathError::new(Why::Backslash, 1)),
        _ => Ok(()),
    }
}

fn check(target: &str) -> Result<(), UnsafePathError> {
    let b = target.as_bytes();
    check_start(b)?;
    let mut part = Part::Path;
    let mut seg = Segment::EMPTY;
    let mut utf8 = Utf8 {
        buf: [0; 4],
        len: 0,
        need: 0,
    };
    let mut table = &PATH_CLASS;
    let mut i = 1;
    loop {
        // Hot loop: ordinary bytes need no decision.
        let run = i;
        while i < b.len() && table[usize::from(b[i])] == PLAIN {
            i += 1;
        }
        if i != run {
            if utf8.need != 0 {
                // An escaped lead byte must be followed by escaped continuations.
                return Err(UnsafePathError::new(Why::BadPercentEncoding, run));
            }
            seg.other = true;
        }
        let Some(&byte) = b.get(i) else {
            break;
        };
        let class = table[usize::from(byte)];
        if class != PERCENT && utf8.need != 0 {
            return Err(UnsafePathError::new(Why::BadPercentEncoding, i));
        }
        match class {
            DOT => seg.dots = seg.dots.saturating_add(1),
            SLASH => {
                if seg.is_dot_segment() {
                    return Err(UnsafePathError::new(Why::DotSegment, i));
                }
                seg = Segment::EMPTY;
            }
            QUESTION | HASH => {
                if part == Part::Path && seg.is_dot_segment() {
                    return Err(UnsafePathError::new(Why::DotSegment, i));
                }
                (part, table) = if class == HASH {
                    (Part::Fragment, &FRAGMENT_CLASS)
                } else {
                    (Part::Query, &QUERY_CLASS)
                };
            }
            BACKSLASH => return Err(UnsafePathError::new(Why::Backslash, i)),
            CONTROL => return Err(UnsafePathError::new(Why::ControlOrSpace, i)),
            NON_ASCII => {
                // `target` is a `str`, so a whole char starts here.
                let c = target[i..].chars().next().unwrap_or('\u{fffd}');
                if let Some(reason) = unsafe_char(c, part) {
                    return Err(UnsafePathError::new(reason, i));
                }
                seg.other = true;
                i += c.len_utf8();
                continue;
            }
            _ => {
                let value = match (b.get(i + 1), b.get(i + 2)) {
                    (Some(&hi), Some(&lo)) => {
                        match (crate::hex::digit(hi), crate::hex::digit(lo)) {
                            (Some(hi), Some(lo)) => (hi << 4) | lo,
                            _ => return Err(UnsafePathError::new(Why::BadPercentEncoding, i)),
                        }
                    }
                    _ => return Err(UnsafePathError::new(Why::BadPercentEncoding, i)),
                };
                if let Some(reason) = decoded_byte(value, part, &mut seg, &mut utf8) {
                    return Err(UnsafePathError::new(reason, i));
                }
                i += 3;
                continue;
            }
        }
        i += 1;
    }
    if utf8.need != 0 {
        return Err(UnsafePathError::new(Why::BadPercentEncoding, b.len()));
    }
    if part == Part::Path && seg.is_dot_segment() {
        return Err(UnsafePathError::new(Why::DotSegment, b.len()));
    }
    Ok(())
}

/// Applies the rules to one percent-decoded byte.
fn decoded_byte(v: u8, part: Part, seg: &mut Segment, utf8: &mut Utf8) -> Option<UnsafePathReason> {
    if v < 0x80 {
        if utf8.need != 0 {
            return Some(Why::BadPercentEncoding);
        }
        return match v {
            0x00..=0x1f | 0x7f => Some(Why::ControlOrSpace),
            b'%' => Some(Why::DoubleEncoded),
            b'/' | b'\\' if part == Part::Path => Some(Why::EncodedSeparator),
            b'.' => {
                seg.dots = seg.dots.saturating_add(1);
                None
            }
            _ => {
                seg.other = true;
                None
            }
        };
    }
    if utf8.need == 0 {
        let need = match v {
            0xc2..=0xdf => 1,
            0xe0..=0xef => 2,
            0xf0..=0xf4 => 3,
            _ => return Some(Why::BadPercentEncoding),
        };
        utf8.buf[0] = v;
        utf8.len = 1;
        utf8.need = need;
        return None;
    }
    if !(0x80..=0xbf).contains(&v) {
        return Some(Why::BadPercentEncoding);
    }
    utf8.buf[usize::from(utf8.len)] = v;
    utf8.len += 1;
    utf8.need -= 1;
    if utf8.need != 0 {
        return None;
    }
    let Ok(text) = core::str::from_utf8(&utf8.buf[..usize::from(utf8.len)]) else {
        return Some(Why::BadPercentEncoding);
    };
    seg.other = true;
    text.chars().next().and_then(|c| unsafe_char(c, part))
}

/// The rule for a non-ASCII character, raw or decoded, in `part`.
fn unsafe_char(c: char, part: Part) -> Option<UnsafePathReason> {
    if c.is_whitespace() || c.is_control() || is_invisible(c) {
        Some(UnsafePathReason::ControlOrSpace)
    } else if part == Part::Path && is_confusable_separator(c) {
        Some(UnsafePathReason::ConfusableSeparator)
    } else {
        None
    }
}

/// Invisible format characters: zero-width spaces and joiners, bidi
/// controls, the byte-order mark, variation selectors, tags, fillers.
pub(crate) fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{ad}'
            | '\u{34f}'
            | '\u{61c}'
            | '\u{115f}'
            | '\u{1160}'
            | '\u{17b4}'
            | '\u{17b5}'
            | '\u{180b}'..='\u{180f}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{3164}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{feff}'
            | '\u{ffa0}'
            | '\u{fff0}'..='\u{fffb}'
            | '\u{e0000}'..='\u{e0fff}'
    )
}

/// Characters that compatibility normalisation (NFKC) or IDNA mapping folds
/// into `/`, `\` or `.`, or that render as one.
fn is_confusable_separator(c: char) -> bool {
    matches!(
        c,
        '\u{2024}' // one dot leader
            | '\u{2044}' // fraction slash
            | '\u{2215}' // division slash
            | '\u{2216}' // set minus
            | '\u{29f8}' // big solidus
            | '\u{29f9}' // big reverse solidus
            | '\u{3002}' // ideographic full stop
            | '\u{fe52}' // small full stop
            | '\u{fe68}' // small reverse solidus
            | '\u{ff0e}' // full-width full stop
            | '\u{ff0f}' // full-width solidus
            | '\u{ff3c}' // full-width reverse solidus
            | '\u{ff61}' // half-width ideographic full stop
    )
}

/// RFC 3986 §3.1: `ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) ":"`.
pub(crate) fn has_scheme(b: &[u8]) -> bool {
    let Some((&first, rest)) = b.split_first() else {
        return false;
    };
    if !first.is_ascii_alphabetic() {
        return false;
    }
    for &c in rest {
        match c {
            b':' => return true,
            b'+' | b'-' | b'.' => {}
            _ if c.is_ascii_alphanumeric() => {}
            _ => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(s: &str) -> Why {
        SafePath::new(s).expect_err(s).reason()
    }

    #[test]
    fn accepts_ordinary_paths() {
        for ok in [
            "/",
            "/inbox",
            "/inbox/",
            "/a/b/c?x=1&y=2#frag",
            "/search?q=https://example.com/a//b",
            "/a//b",
            "/caf%C3%A9/%E2%9C%93",
            "/café/ünïcode",
            "/@evil.com",
            "/:evil.com",
            "/...",
            "/.a/a./..b",
            "/?",
            "/#",
            "/x?%2F%2Fevil.com",
            "/x#%5C",
            "/files/My%20Report.pdf",
            "/%20",
            "/a%20/b",
            "/search?q=open%20redirect",
            "/a#see%20below",
            "/search?q=a\u{ff0f}b&r=\u{ff3c}\u{2215}\u{ff0e}",
            "/search?q=%EF%BC%8F%EF%BC%BC",
            "/a#\u{ff0f}evil.com",
            "/a#x?\u{2044}",
        ] {
            assert_eq!(SafePath::new(ok).map(|p| p.as_str()), Ok(ok), "{ok}");
        }
    }

    #[test]
    fn rejects_with_typed_reasons() {
        assert_eq!(reason(""), Why::Empty);
        assert_eq!(reason("//evil.com"), Why::SchemeRelative);
        assert_eq!(reason("/\\evil.com"), Why::Backslash);
        assert_eq!(reason("\\/evil.com"), Why::Backslash);
        assert_eq!(reason("/a\\b"), Why::Backslash);
        assert_eq!(reason("/%2F%2Fevil.com"), Why::EncodedSeparator);
        assert_eq!(reason("/%5c%5cevil.com"), Why::EncodedSeparator);
        assert_eq!(reason("/%252F%252Fevil.com"), Why::DoubleEncoded);
        assert_eq!(reason("/\tevil.com"), Why::ControlOrSpace);
        assert_eq!(reason("/\t/evil.com"), Why::ControlOrSpace);
        assert_eq!(reason(" /x"), Why::ControlOrSpace);
        assert_eq!(reason("/x "), Why::ControlOrSpace);
        assert_eq!(reason("/%0d%0aSet-Cookie:x"), Why::ControlOrSpace);
        assert_eq!(reason("/%09/evil.com"), Why::ControlOrSpace);
        assert_eq!(reason("/a b"), Why::ControlOrSpace);
        assert_eq!(reason("/a?q=a b"), Why::ControlOrSpace);
        assert_eq!(reason("/a?q=%1F"), Why::ControlOrSpace);
        assert_eq!(reason("/a?q=\u{200b}"), Why::ControlOrSpace);
        assert_eq!(reason("/a#%C2%A0"), Why::ControlOrSpace);
        assert_eq!(reason("/a%C2%A0b"), Why::ControlOrSpace);
        assert_eq!(reason("/a\u{a0}b"), Why::ControlOrSpace);
        assert_eq!(reason("/\u{feff}/evil.com"), Why::ControlOrSpace);
        assert_eq!(reason("/%E2%80%8B"), Why::ControlOrSpace);
        assert_eq!(reason("/\u{85}"), Why::ControlOrSpace);
        assert_eq!(reason("https:evil.com"), Why::Scheme);
        assert_eq!(reason("https://evil.com"), Why::Scheme);
        assert_eq!(reason("javascript:alert(1)"), Why::Scheme);
        assert_eq!(reason("evil.com"), Why::NotRooted);
        assert_eq!(reason("./x"), Why::NotRooted);
        assert_eq!(reason("/./x"), Why::DotSegment);
        assert_eq!(reason("/.//evil.com"), Why::DotSegment);
        assert_eq!(reason("/a/..//evil.com"), Why::DotSegment);
        assert_eq!(reason("/%2e%2E/x"), Why::DotSegment);
        assert_eq!(reason("/.%2e"), Why::DotSegment);
        assert_eq!(reason("/a/.?x"), Why::DotSegment);
        assert_eq!(reason("/\u{ff0f}evil.com"), Why::ConfusableSeparator);
        assert_eq!(reason("/\u{ff3c}evil.com"), Why::ConfusableSeparator);
        assert_eq!(reason("/%EF%BC%8Fevil.com"), Why::ConfusableSeparator);
        assert_eq!(reason("/a/b\u{2215}c?x=\u{ff0f}"), Why::ConfusableSeparator);
        assert_eq!(reason("/%"), Why::BadPercentEncoding);
        assert_eq!(reason("/%2"), Why::BadPercentEncoding);
        assert_eq!(reason("/%zz"), Why::BadPercentEncoding);
        assert_eq!(reason("/%FF"), Why::BadPercentEncoding);
        assert_eq!(reason("/%C3"), Why::BadPercentEncoding);
        assert_eq!(reason("/%C3x"), Why::BadPercentEncoding);
        assert_eq!(reason("/%C0%AF"), Why::BadPercentEncoding);
        assert_eq!(reason("/%ED%A0%80"), Why::BadPercentEncoding);
        let long = alloc::format!("/{}", "a".repeat(SafePath::MAX_LEN));
        assert_eq!(reason(&long), Why::TooLong);
    }

    #[test]
    fn reports_offsets_and_codes() {
        let err = SafePath::new("/ok/\\x").unwrap_err();
        assert_eq!(err.offset(), 4);
        assert_eq!(err.code(), ErrorCode::InvalidLink);
        assert_eq!(err.http_status(), 400);
        assert!(alloc::format!("{err}").contains("backslash"));
    }

    #[test]
    fn splits_path() {
        assert_eq!(
            SafePath::new("/a/b?x#y").unwrap().path_without_query(),
            "/a/b"
        );
        assert_eq!(SafePath::new("/a#y?x").unwrap().path_without_query(), "/a");
    }

    #[test]
    fn accepted_paths_keep_origin_under_url() {
        let base = url::Url::parse("https://app.example.com/base/dir/").unwrap();
        for ok in [
            "/",
            "/a//b",
            "/...",
            "/x?//y",
            "/caf%C3%A9",
            "/a/..b/c",
            "/%2e%2ex",
            "/%20/evil.com",
            "/x?%20//evil.com#%20",
            "/x?\u{ff0f}\u{ff0f}evil.com#\u{ff3c}",
        ] {
            SafePath::new(ok).unwrap();
            let joined = base.join(ok).unwrap();
            assert_eq!(joined.origin(), base.origin(), "{ok}");
            assert!(!joined.path().starts_with("//"), "{ok}");
        }
    }
}
