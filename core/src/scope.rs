//! OAuth scopes (RFC 6749 §3.3): a set of scope tokens, order-free and
//! without duplicates.

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;
use core::cmp::Ordering;
use core::fmt;

use serde::de::{self, SeqAccess, Unexpected, Visitor};
use serde::ser::SerializeSeq as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{ErrorCode, WireError};
use crate::store::codec::{self, Decode, Encode, Malformed, Reader};

/// Most scopes one set may hold.
pub const MAX_SCOPES: usize = 32;
/// Longest scope token.
pub const MAX_SCOPE_LEN: usize = 64;

/// The default scope that lets an agent read (DESIGN: skills).
pub const SKILLS_READ: &str = "skills:read";
/// The default scope that lets an agent write.
pub const SKILLS_WRITE: &str = "skills:write";

/// Whether `token` is a scope token: 1 to [`MAX_SCOPE_LEN`] bytes of the
/// RFC 6749 §3.3 `scope-token` character set (printable ASCII except space,
/// `"` and `\`).
pub(crate) const fn is_scope_token(token: &str) -> bool {
    let bytes = token.as_bytes();
    if bytes.is_empty() || bytes.len() > MAX_SCOPE_LEN {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if !(b == 0x21 || (b >= 0x23 && b <= 0x5b) || (b >= 0x5d && b <= 0x7e)) {
            return false;
        }
        i += 1;
    }
    true
}

/// A scope token checked when the program is compiled: a constant of this
/// type cannot hold a malformed token, so a set built from constants
/// ([`ScopeSet::known`]) cannot fail, and a security decision built from a
/// literal never falls back to "no scope".
///
/// ```
/// use portcullis_core::scope::{KnownScope, ScopeSet};
/// const NOTES_READ: KnownScope = KnownScope::new("notes:read");
/// let set = ScopeSet::known([KnownScope::SKILLS_READ, NOTES_READ]);
/// assert_eq!(set.to_string(), "notes:read skills:read");
/// ```
///
/// A malformed literal does not compile:
///
/// ```compile_fail
/// use portcullis_core::scope::KnownScope;
/// const BAD: KnownScope = KnownScope::new("two words");
/// assert_eq!(BAD.as_str(), "two words");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KnownScope(&'static str);

impl KnownScope {
    /// [`SKILLS_READ`].
    pub const SKILLS_READ: Self = Self::new(SKILLS_READ);
    /// [`SKILLS_WRITE`].
    pub const SKILLS_WRITE: Self = Self::new(SKILLS_WRITE);

    /// The token `token`.
    ///
    /// # Panics
    ///
    /// If `token` is not an RFC 6749 §3.3 scope token of at most
    /// [`MAX_SCOPE_LEN`] bytes; in a constant that is a compile error.
    #[must_use]
    pub const fn new(token: &'static str) -> Self {
        assert!(is_scope_token(token), "not a scope token");
        Self(token)
    }

    /// The token.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        self.0
    }
}

/// A set of scope tokens, kept sorted so equal sets compare and encode equal.
///
/// Held as its `scope` parameter form, the sorted tokens joined by single
/// spaces, in one string: a set costs one allocation however many tokens
/// it has, and [`ScopeSet::as_param`] is free. It encodes as a sequence of
/// tokens (what a `Vec<String>` of the sorted tokens encodes to), and
/// decoding re-checks every token, so a stored set reads back exactly as
/// it was made.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ScopeSet(String);

impl ScopeSet {
    /// The empty set.
    #[must_use]
    pub const fn new() -> Self {
        Self(String::new())
    }

    /// Parses a space-separated `scope` parameter. Tokens use the RFC 6749
    /// §3.3 character set (printable ASCII except space, `"` and `\`);
    /// repeated tokens collapse; runs of spaces are refused, as the grammar
    /// allows exactly one space between tokens.
    pub fn parse(scope: &str) -> Result<Self, ScopeError> {
        if scope.is_empty() {
            return Ok(Self::new());
        }
        // Already the parameter form (valid tokens, strictly increasing, at
        // most MAX_SCOPES), as every scope the core writes is: taken whole.
        let mut last = "";
        let mut count = 0;
        let canonical = !scope.ends_with(' ')
            && Tokens(scope).all(|t| {
                let next = is_scope_token(t) && last < t && count < MAX_SCOPES;
                (last, count) = (t, count + 1);
                next
            });
        if canonical {
            return Ok(Self(scope.into()));
        }
        Self::from_tokens(scope.split(' '))
    }

    /// The set of `tokens`, which cannot fail: each token is valid by
    /// construction, and a set of more than [`MAX_SCOPES`] tokens does not
    /// compile.
    #[must_use]
    pub fn known<const N: usize>(tokens: [KnownScope; N]) -> Self {
        const { assert!(N <= MAX_SCOPES, "too many scopes") };
        let mut set = Self::new();
        for token in tokens {
            set.put(token.0);
        }
        set
    }

    /// The set of one `token`, which the caller has checked
    /// ([`is_scope_token`]): an action's scope, valid by construction.
    pub(crate) fn single(token: &str) -> Self {
        debug_assert!(is_scope_token(token));
        Self(token.into())
    }

    /// Builds a set from tokens.
    pub fn from_tokens<'a>(tokens: impl IntoIterator<Item = &'a str>) -> Result<Self, ScopeError> {
        let mut set = Self::new();
        for token in tokens {
            set.insert(token)?;
        }
        Ok(set)
    }

    /// Adds one token.
    pub fn insert(&mut self, token: &str) -> Result<(), ScopeError> {
        if !is_scope_token(token) {
            return Err(ScopeError::InvalidToken);
        }
        self.insert_checked(token)
    }

    /// Adds a known token: no parsing, as it is valid by construction. Fails
    /// only with [`ScopeError::TooMany`], when the set already holds
    /// [`MAX_SCOPES`] other tokens.
    pub fn insert_known(&mut self, token: KnownScope) -> Result<(), ScopeError> {
        self.insert_checked(token.0)
    }

    /// Adds `token`, valid by grammar, unless the set is full.
    fn insert_checked(&mut self, token: &str) -> Result<(), ScopeError> {
        if !self.contains(token) && self.len() == MAX_SCOPES {
            return Err(ScopeError::TooMany);
        }
        self.put(token);
        Ok(())
    }

    /// Puts `token` (valid, and with room for it) in its sorted place,
    /// unless it is there already.
    fn put(&mut self, token: &str) {
        let mut at = self.0.len();
        let mut offset = 0;
        for t in self.iter() {
            match t.cmp(token) {
                Ordering::Less => offset += t.len() + 1,
                Ordering::Equal => return,
                Ordering::Greater => {
                    at = offset;
                    break;
                }
            }
        }
        if at == self.0.len() {
            self.append(token);
        } else {
            self.0.insert(at, ' ');
            self.0.insert_str(at, token);
        }
    }

    /// Appends `token`, which sorts after every token held.
    fn append(&mut self, token: &str) {
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        self.0.push_str(token);
    }

    /// How many tokens the set holds.
    fn len(&self) -> usize {
        if self.0.is_empty() {
            0
        } else {
            self.0.bytes().filter(|&b| b == b' ').count() + 1
        }
    }

    /// Adds `token` (valid by grammar) at the end when it sorts after
    /// every token held, which is how decoding meets an encoded set, and
    /// in its place otherwise.
    fn push_token(&mut self, token: &str) {
        let last = self.0.rsplit(' ').next().unwrap_or_default();
        if self.0.is_empty() || last < token {
            self.append(token);
        } else {
            self.put(token);
        }
    }

    /// Whether `token` is in the set.
    #[must_use]
    pub fn contains(&self, token: &str) -> bool {
        self.iter().any(|t| t == token)
    }

    /// Whether every token of `self` is in `other`.
    #[must_use]
    pub fn is_subset(&self, other: &Self) -> bool {
        self.iter().all(|t| other.contains(t))
    }

    /// The tokens of `self` missing from `granted`.
    #[must_use]
    pub fn missing_from(&self, granted: &Self) -> Self {
        let mut out = Self::new();
        for t in self.iter().filter(|t| !granted.contains(t)) {
            // In order and each once: appending keeps the form.
            out.append(t);
        }
        out
    }

    /// Union with `other`.
    #[must_use]
    pub fn union(&self, other: &Self) -> Self {
        let mut out = self.clone();
        for t in other.iter() {
            out.put(t);
        }
        out
    }

    /// Whether the set is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The tokens, sorted.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        Tokens(&self.0)
    }

    /// The `scope` parameter form ([`fmt::Display`]), borrowed: what the
    /// token paths write into every access token.
    #[must_use]
    pub fn as_param(&self) -> &str {
        &self.0
    }

    /// The `scope` parameter form ([`fmt::Display`]) as an owned string.
    #[must_use]
    pub fn to_param(&self) -> String {
        self.0.clone()
    }
}

impl fmt::Display for ScopeSet {
    /// The `scope` parameter form: tokens separated by single spaces.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for ScopeSet {
    /// A sequence of the sorted tokens, as a `Vec<String>` of them encodes.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.len()))?;
        for t in self.iter() {
            seq.serialize_element(t)?;
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for ScopeSet {
    /// A sequence of valid tokens in any order (what [`Serialize`] writes
    /// is sorted, and is appended without a search); repeated tokens
    /// collapse, as in [`ScopeSet::parse`].
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TokenList;
        impl<'de> Visitor<'de> for TokenList {
            type Value = ScopeSet;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of scope tokens")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ScopeSet, A::Error> {
                let mut set = ScopeSet::new();
                while let Some(Token(token)) = seq.next_element()? {
                    if !is_scope_token(&token) {
                        return Err(de::Error::invalid_value(Unexpected::Str(&token), &self));
                    }
                    set.push_token(&token);
                }
                Ok(set)
            }
        }
        deserializer.deserialize_seq(TokenList)
    }
}

impl Encode for ScopeSet {
    /// The sorted tokens as a list of strings: the bytes [`Serialize`]
    /// gives postcard.
    fn encode(&self, out: &mut Vec<u8>) {
        codec::write_varint(out, self.len() as u64);
        for t in self.iter() {
            t.encode(out);
        }
    }
}

impl Decode<'_> for ScopeSet {
    /// A list of valid tokens, as [`Deserialize`] reads it; the set is
    /// allocated once at its size (a first pass over the list measures it).
    fn decode(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        let n = r.len()?;
        let mut measure = r.clone();
        let mut len = 0usize;
        for _ in 0..n {
            let token = measure.str()?;
            if !is_scope_token(token) {
                return Err(Malformed);
            }
            len = len.saturating_add(token.len() + 1);
        }
        let mut set = Self(String::with_capacity(len.saturating_sub(1)));
        for _ in 0..n {
            set.push_token(r.str()?);
        }
        Ok(set)
    }
}

/// The tokens of a set's parameter form, split at its single spaces.
struct Tokens<'a>(&'a str);

impl<'a> Iterator for Tokens<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        if self.0.is_empty() {
            return None;
        }
        // Tokens are a few bytes long: a plain scan beats a memchr call.
        let (token, rest) = match self.0.bytes().position(|b| b == b' ') {
            Some(at) => (&self.0[..at], &self.0[at + 1..]),
            None => (self.0, ""),
        };
        self.0 = rest;
        Some(token)
    }
}

/// One token as a decoder holds it: borrowed from the input where it can
/// be (postcard, JSON without escapes), so decoding a set allocates only
/// the set.
struct Token<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Token<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text;
        impl<'de> Visitor<'de> for Text {
            type Value = Token<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a scope token")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Token<'de>, E> {
                Ok(Token(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Token<'de>, E> {
                Ok(Token(Cow::Owned(v.into())))
            }
        }
        deserializer.deserialize_str(Text)
    }
}

/// Why a scope was refused.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScopeError {
    /// A token is empty, too long or has a character outside RFC 6749 §3.3.
    InvalidToken,
    /// More than [`MAX_SCOPES`] tokens.
    TooMany,
    /// A token the site does not offer, or wider than what was granted.
    NotAllowed,
}

impl fmt::Display for ScopeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::InvalidToken => "scope has a malformed token",
            Self::TooMany => "scope has too many tokens",
            Self::NotAllowed => "scope asks for more than is allowed",
        })
    }
}

impl WireError for ScopeError {
    fn code(&self) -> ErrorCode {
        ErrorCode::InvalidScope
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ScopeError {}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec::Vec;

    #[test]
    fn parses_sorts_and_dedupes() {
        let s = ScopeSet::parse("skills:write skills:read skills:write").unwrap();
        assert_eq!(s.to_string(), "skills:read skills:write");
        assert!(s.contains(SKILLS_READ));
        assert_eq!(ScopeSet::parse("").unwrap(), ScopeSet::new());
    }

    proptest::proptest! {
        /// The whole-string path for a scope already in parameter form
        /// answers exactly as inserting its tokens one by one would.
        #[test]
        fn parsing_takes_the_parameter_form_whole_only_when_it_is_one(
            scope in "[ab c\\\"]{0,12}",
        ) {
            let by_tokens = if scope.is_empty() {
                Ok(ScopeSet::new())
            } else {
                ScopeSet::from_tokens(scope.split(' '))
            };
            proptest::prop_assert_eq!(ScopeSet::parse(&scope), by_tokens);
        }
    }

    #[test]
    fn refuses_bad_tokens() {
        for bad in ["a  b", " a", "a ", "a\"b", "a\\b", "é", "a\tb"] {
            assert_eq!(
                ScopeSet::parse(bad),
                Err(ScopeError::InvalidToken),
                "{bad:?}"
            );
        }
        let many: Vec<String> = (0..33).map(|i| alloc::format!("s{i}")).collect();
        assert_eq!(ScopeSet::parse(&many.join(" ")), Err(ScopeError::TooMany));
    }

    #[test]
    fn known_sets_equal_parsed_sets() {
        let known = ScopeSet::known([
            KnownScope::SKILLS_WRITE,
            KnownScope::SKILLS_READ,
            KnownScope::SKILLS_WRITE,
        ]);
        assert_eq!(known, ScopeSet::parse("skills:read skills:write").unwrap());
        assert_eq!(ScopeSet::known([]), ScopeSet::new());
        assert_eq!(KnownScope::SKILLS_READ.as_str(), SKILLS_READ);
        // The const check agrees with the runtime parser.
        for bad in ["", "a b", "a\"b", "a\\b", "é", "a\tb"] {
            assert!(!is_scope_token(bad), "{bad:?}");
        }
        assert!(is_scope_token(&"x".repeat(MAX_SCOPE_LEN)));
        assert!(!is_scope_token(&"x".repeat(MAX_SCOPE_LEN + 1)));
    }

    #[test]
    fn known_tokens_insert_like_parsed_ones_up_to_the_limit() {
        let mut set = ScopeSet::parse("skills:write").unwrap();
        set.insert_known(KnownScope::SKILLS_READ).unwrap();
        set.insert_known(KnownScope::SKILLS_READ).unwrap();
        assert_eq!(set, ScopeSet::parse("skills:read skills:write").unwrap());
        let mut full = ScopeSet::new();
        for i in 0..MAX_SCOPES {
            full.insert(&alloc::format!("s{i}")).unwrap();
        }
        assert_eq!(
            full.insert_known(KnownScope::SKILLS_READ),
            Err(ScopeError::TooMany)
        );
        assert!(!full.contains(SKILLS_READ));
    }

    #[test]
    fn encodes_as_the_sorted_token_list_and_reads_back() {
        for text in ["", "skills:read", "a b c", "skills:write skills:read x:y"] {
            let set = ScopeSet::parse(text).unwrap();
            let tokens: Vec<String> = set.iter().map(String::from).collect();
            let bytes = postcard::to_allocvec(&set).unwrap();
            assert_eq!(bytes, postcard::to_allocvec(&tokens).unwrap(), "{text:?}");
            assert_eq!(postcard::from_bytes::<ScopeSet>(&bytes).unwrap(), set);
            let json = serde_json::to_string(&set).unwrap();
            assert_eq!(json, serde_json::to_string(&tokens).unwrap(), "{text:?}");
            assert_eq!(serde_json::from_str::<ScopeSet>(&json).unwrap(), set);
        }
    }

    #[test]
    fn decoding_checks_tokens_and_makes_the_set_canonical() {
        let read = |json: &str| serde_json::from_str::<ScopeSet>(json);
        assert_eq!(
            read(r#"["b","a","b"]"#).unwrap(),
            ScopeSet::parse("a b").unwrap()
        );
        assert_eq!(
            read(r#"["a\u0062"]"#).unwrap(),
            ScopeSet::parse("ab").unwrap()
        );
        for bad in [r#"[""]"#, r#"["a b"]"#, r#"["é"]"#, r#"["a\"b"]"#] {
            assert!(read(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_record_codec_writes_what_postcard_writes_and_reads_it_back() {
        for text in ["", "skills:read", "a b c", "skills:write skills:read x:y"] {
            let set = ScopeSet::parse(text).unwrap();
            let mut bytes = Vec::new();
            set.encode(&mut bytes);
            assert_eq!(bytes, postcard::to_allocvec(&set).unwrap(), "{text:?}");
            let mut r = Reader::new(&bytes, 1);
            assert_eq!(ScopeSet::decode(&mut r), Ok(set));
            assert!(r.is_empty());
            for cut in 0..bytes.len() {
                assert_eq!(
                    ScopeSet::decode(&mut Reader::new(&bytes[..cut], 1)),
                    Err(Malformed)
                );
            }
        }
        // Out of order and repeated: read into the canonical set.
        let tokens = ["b", "a", "b"];
        let bytes = postcard::to_allocvec(&tokens[..]).unwrap();
        let read = ScopeSet::decode(&mut Reader::new(&bytes, 1)).unwrap();
        assert_eq!(read, ScopeSet::parse("a b").unwrap());
        let bad = postcard::to_allocvec(&["a", "a b"][..]).unwrap();
        assert_eq!(ScopeSet::decode(&mut Reader::new(&bad, 1)), Err(Malformed));
    }

    #[test]
    fn subset_and_missing() {
        let granted = ScopeSet::parse("a b").unwrap();
        let wanted = ScopeSet::parse("b c").unwrap();
        assert!(!wanted.is_subset(&granted));
        assert_eq!(wanted.missing_from(&granted).to_string(), "c");
        assert_eq!(granted.union(&wanted).to_string(), "a b c");
    }
}
