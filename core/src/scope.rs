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

/// A set of scope tokens, kept sorted so equal sets compare and encode equal.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ScopeSet(Vec<String>);

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
        let valid = !token.is_empty()
            && token.len() <= MAX_SCOPE_LEN
            && token
                .bytes()
                .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b));
        if !valid {
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
    fn subset_and_missing() {
        let granted = ScopeSet::parse("a b").unwrap();
        let wanted = ScopeSet::parse("b c").unwrap();
        assert!(!wanted.is_subset(&granted));
        assert_eq!(wanted.missing_from(&granted).to_string(), "c");
        assert_eq!(granted.union(&wanted).to_string(), "a b c");
    }
}
