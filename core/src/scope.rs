//! OAuth scopes (RFC 6749 §3.3): a set of scope tokens, order-free and
//! without duplicates.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{ErrorCode, WireError};

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
const fn is_scope_token(token: &str) -> bool {
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
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ScopeSet(Vec<String>);

crate::store::codec::fields!(ScopeSet(newtype));

impl ScopeSet {
    /// The empty set.
    #[must_use]
    pub const fn new() -> Self {
        Self(Vec::new())
    }

    /// Parses a space-separated `scope` parameter. Tokens use the RFC 6749
    /// §3.3 character set (printable ASCII except space, `"` and `\`);
    /// repeated tokens collapse; runs of spaces are refused, as the grammar
    /// allows exactly one space between tokens.
    pub fn parse(scope: &str) -> Result<Self, ScopeError> {
        let mut set = Self::new();
        if scope.is_empty() {
            return Ok(set);
        }
        for token in scope.split(' ') {
            set.insert(token)?;
        }
        Ok(set)
    }

    /// The set of `tokens`, which cannot fail: each token is valid by
    /// construction, and a set of more than [`MAX_SCOPES`] tokens does not
    /// compile.
    #[must_use]
    pub fn known<const N: usize>(tokens: [KnownScope; N]) -> Self {
        const { assert!(N <= MAX_SCOPES, "too many scopes") };
        let mut v: Vec<String> = tokens.iter().map(|t| String::from(t.0)).collect();
        v.sort_unstable();
        v.dedup();
        Self(v)
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
        if let Err(at) = self.0.binary_search_by(|t| t.as_str().cmp(token)) {
            if self.0.len() == MAX_SCOPES {
                return Err(ScopeError::TooMany);
            }
            self.0.insert(at, token.into());
        }
        Ok(())
    }

    /// Adds a known token: no parsing, as it is valid by construction. Fails
    /// only with [`ScopeError::TooMany`], when the set already holds
    /// [`MAX_SCOPES`] other tokens.
    pub fn insert_known(&mut self, token: KnownScope) -> Result<(), ScopeError> {
        if let Err(at) = self.0.binary_search_by(|t| t.as_str().cmp(token.0)) {
            if self.0.len() == MAX_SCOPES {
                return Err(ScopeError::TooMany);
            }
            self.0.insert(at, token.0.into());
        }
        Ok(())
    }

    /// Whether `token` is in the set.
    #[must_use]
    pub fn contains(&self, token: &str) -> bool {
        self.0.binary_search_by(|t| t.as_str().cmp(token)).is_ok()
    }

    /// Whether every token of `self` is in `other`.
    #[must_use]
    pub fn is_subset(&self, other: &Self) -> bool {
        self.0.iter().all(|t| other.contains(t))
    }

    /// The tokens of `self` missing from `granted`.
    #[must_use]
    pub fn missing_from(&self, granted: &Self) -> Self {
        Self(
            self.0
                .iter()
                .filter(|t| !granted.contains(t))
                .cloned()
                .collect(),
        )
    }

    /// Union with `other`.
    #[must_use]
    pub fn union(&self, other: &Self) -> Self {
        let mut out = self.clone();
        for t in &other.0 {
            if let Err(at) = out.0.binary_search(t) {
                out.0.insert(at, t.clone());
            }
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
        self.0.iter().map(String::as_str)
    }
}

impl ScopeSet {
    /// The `scope` parameter form ([`fmt::Display`]) in a string sized
    /// once: the token paths write it into every access token.
    #[must_use]
    pub fn to_param(&self) -> String {
        let len = self.0.iter().map(String::len).sum::<usize>() + self.0.len().saturating_sub(1);
        let mut out = String::with_capacity(len);
        for (i, t) in self.0.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            out.push_str(t);
        }
        out
    }
}

impl fmt::Display for ScopeSet {
    /// The `scope` parameter form: tokens separated by single spaces.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            f.write_str(t)?;
        }
        Ok(())
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

    #[test]
    fn parses_sorts_and_dedupes() {
        let s = ScopeSet::parse("skills:write skills:read skills:write").unwrap();
        assert_eq!(s.to_string(), "skills:read skills:write");
        assert!(s.contains(SKILLS_READ));
        assert_eq!(ScopeSet::parse("").unwrap(), ScopeSet::new());
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
    fn subset_and_missing() {
        let granted = ScopeSet::parse("a b").unwrap();
        let wanted = ScopeSet::parse("b c").unwrap();
        assert!(!wanted.is_subset(&granted));
        assert_eq!(wanted.missing_from(&granted).to_string(), "c");
        assert_eq!(granted.union(&wanted).to_string(), "a b c");
    }
}
