//! Reading a server's `WWW-Authenticate` header from the client's side: the
//! `Bearer` challenge's `error`, `scope` and `resource_metadata` parameters
//! (RFC 6750 §3, RFC 9728 §5.1), which is how an MCP server asks a client to
//! step up to a wider scope (MCP authorization, "Scope challenge handling").
//!
//! The grammar is RFC 9110 §11.6.1: one header may carry several
//! challenges, separated by commas like their parameters; a challenge is a
//! scheme followed by a `token68` or by `name=value` parameters, where a
//! value is a token or a quoted string with backslash escapes (§5.6.4). A
//! parameter named twice in one challenge is refused (§11.2 allows each name
//! once), so two readers can never disagree about which scope was asked for.

use alloc::string::String;
use core::fmt;

/// Longest header read.
pub const MAX_CHALLENGE_LEN: usize = 8 * 1024;

/// The parameters of the `Bearer` challenge an agent acts on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BearerChallenge {
    /// `error`: `invalid_token`, `insufficient_scope`, … (RFC 6750 §3.1).
    pub error: Option<String>,
    /// `scope`: the scopes the resource needs, space-separated.
    pub scope: Option<String>,
    /// `resource_metadata`: where the protected-resource metadata is (RFC 9728 §5.1).
    pub resource_metadata: Option<String>,
}

/// Why a `WWW-Authenticate` header could not be read.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChallengeError {
    /// Longer than [`MAX_CHALLENGE_LEN`].
    TooLong,
    /// Not the RFC 9110 §11.6.1 grammar.
    Malformed,
    /// No `Bearer` challenge in the header.
    NoBearer,
    /// A parameter appears twice in the `Bearer` challenge.
    Repeated,
}

impl fmt::Display for ChallengeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::TooLong => "WWW-Authenticate is too long",
            Self::Malformed => "WWW-Authenticate is malformed",
            Self::NoBearer => "WWW-Authenticate has no Bearer challenge",
            Self::Repeated => "a Bearer challenge parameter is repeated",
        })
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ChallengeError {}

impl BearerChallenge {
    /// Reads the first `Bearer` challenge of a `WWW-Authenticate` value.
    /// Parameters other than the three above are skipped.
    pub fn parse(header: &str) -> Result<Self, ChallengeError> {
        if header.len() > MAX_CHALLENGE_LEN {
            return Err(ChallengeError::TooLong);
        }
        let mut lexer = Lexer {
            rest: header.as_bytes(),
            seen_scheme: false,
        };
        let mut found: Option<Self> = None;
        let mut in_bearer = false;
        loop {
            lexer.skip_list_separators();
            if lexer.rest.is_empty() {
                break;
            }
            let name = lexer.token().ok_or(ChallengeError::Malformed)?;
            lexer.skip_spaces();
            if lexer.peek() == Some(b'=') && !lexer.is_token68_tail() {
                // `name = value`: a parameter of the current challenge.
                lexer.rest = &lexer.rest[1..];
                lexer.skip_spaces();
                let value = lexer.value()?;
                if found.is_some() && in_bearer {
                    let bearer = found.as_mut().ok_or(ChallengeError::Malformed)?;
                    bearer.set(name, value)?;
                } else if found.is_none() && !in_bearer && !lexer.seen_scheme {
                    return Err(ChallengeError::Malformed);
                }
            } else {
                // A new challenge: `scheme [token68]`.
                if found.is_some() {
                    // The Bearer challenge is complete; later ones are not read.
                    break;
                }
                lexer.seen_scheme = true;
                in_bearer = name.eq_ignore_ascii_case("bearer");
                if in_bearer {
                    found = Some(Self::default());
                }
                if lexer.at_parameter() {
                    // The first parameter follows the scheme after a space.
                    continue;
                }
                if lexer.peek().is_some_and(|b| b != b',') {
                    lexer.token68().ok_or(ChallengeError::Malformed)?;
                }
            }
            lexer.skip_spaces();
            match lexer.peek() {
                None | Some(b',') => {}
                Some(_) => return Err(ChallengeError::Malformed),
            }
        }
        found.ok_or(ChallengeError::NoBearer)
    }

    fn set(&mut self, name: &str, value: String) -> Result<(), ChallengeError> {
        let slot = match name.to_ascii_lowercase().as_str() {
            "error" => &mut self.error,
            "scope" => &mut self.scope,
            "resource_metadata" => &mut self.resource_metadata,
            _ => return Ok(()),
        };
        if slot.is_some() {
            return Err(ChallengeError::Repeated);
        }
        *slot = Some(value);
        Ok(())
    }
}

/// `tchar` of RFC 9110 §5.6.2.
const fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'!' | b'#'
                | b'$'
                | b'%'
                | b'&'
                | b'\''
                | b'*'
                | b'+'
                | b'-'
                | b'.'
                | b'^'
                | b'_'
                | b'`'
                | b'|'
                | b'~'
        )
}

/// The `token68` alphabet of RFC 9110 §11.2, before its trailing `=`s.
const fn is_token68_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/')
}

struct Lexer<'a> {
    rest: &'a [u8],
    seen_scheme: bool,
}

impl<'a> Lexer<'a> {
    fn peek(&self) -> Option<u8> {
        self.rest.first().copied()
    }

    fn skip_spaces(&mut self) {
        while let Some(b' ' | b'\t') = self.peek() {
            self.rest = &self.rest[1..];
        }
    }

    /// Commas and whitespace between list elements (RFC 9110 §5.6.1 allows
    /// empty elements).
    fn skip_list_separators(&mut self) {
        while let Some(b' ' | b'\t' | b',') = self.peek() {
            self.rest = &self.rest[1..];
        }
    }

    fn token(&mut self) -> Option<&'a str> {
        let n = self.rest.iter().take_while(|&&b| is_tchar(b)).count();
        if n == 0 {
            return None;
        }
        let (token, rest) = self.rest.split_at(n);
        self.rest = rest;
        core::str::from_utf8(token).ok()
    }

    /// Whether a `name=value` parameter starts here (rather than a `token68`).
    fn at_parameter(&self) -> bool {
        let mut ahead = Lexer {
            rest: self.rest,
            seen_scheme: self.seen_scheme,
        };
        if ahead.token().is_none() {
            return false;
        }
        ahead.skip_spaces();
        ahead.peek() == Some(b'=') && !ahead.is_token68_tail()
    }

    /// At `=`: whether it is the padding of a `token68` (only `=`s, then the
    /// end or a comma) rather than a parameter's `=`.
    fn is_token68_tail(&self) -> bool {
        let pad = self.rest.iter().take_while(|&&b| b == b'=').count();
        let after = &self.rest[pad..];
        let after = after
            .iter()
            .position(|&b| b != b' ' && b != b'\t')
            .map_or(&[][..], |i| &after[i..]);
        after.is_empty() || after[0] == b','
    }

    fn token68(&mut self) -> Option<()> {
        let n = self
            .rest
            .iter()
            .take_while(|&&b| is_token68_char(b))
            .count();
        if n == 0 {
            return None;
        }
        let pad = self.rest[n..].iter().take_while(|&&b| b == b'=').count();
        self.rest = &self.rest[n + pad..];
        Some(())
    }

    fn value(&mut self) -> Result<String, ChallengeError> {
        if self.peek() != Some(b'"') {
            return self
                .token()
                .map(String::from)
                .ok_or(ChallengeError::Malformed);
        }
        self.rest = &self.rest[1..];
        let mut out = alloc::vec::Vec::new();
        loop {
            match self.peek() {
                Some(b'"') => {
                    self.rest = &self.rest[1..];
                    break;
                }
                Some(b'\\') => {
                    let Some(&escaped) = self.rest.get(1) else {
                        return Err(ChallengeError::Malformed);
                    };
                    if !is_qd_text(escaped) && escaped != b'"' && escaped != b'\\' {
                        return Err(ChallengeError::Malformed);
                    }
                    out.push(escaped);
                    self.rest = &self.rest[2..];
                }
                Some(b) if is_qd_text(b) => {
                    out.push(b);
                    self.rest = &self.rest[1..];
                }
                // The end before the closing quote, or a control character.
                _ => return Err(ChallengeError::Malformed),
            }
        }
        String::from_utf8(out).map_err(|_| ChallengeError::Malformed)
    }
}

/// `qdtext` of RFC 9110 §5.6.4 (HTAB, SP and visible characters other than
/// `"` and `\`, plus `obs-text`).
const fn is_qd_text(b: u8) -> bool {
    matches!(b, b'\t' | b' ' | 0x21 | 0x23..=0x5B | 0x5D..=0x7E | 0x80..=0xFF)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bearer::Challenge;
    use crate::scope::ScopeSet;

    #[test]
    fn reads_what_the_server_writes() {
        let scope = ScopeSet::parse("skills:read skills:write").unwrap();
        let ours = Challenge::insufficient_scope("https://a.example/.well-known/x", &scope);
        let read = BearerChallenge::parse(&ours.www_authenticate).unwrap();
        assert_eq!(read.error.as_deref(), Some("insufficient_scope"));
        assert_eq!(read.scope.as_deref(), Some("skills:read skills:write"));
        assert_eq!(
            read.resource_metadata.as_deref(),
            Some("https://a.example/.well-known/x")
        );
    }

    #[test]
    fn several_challenges_token68_and_escapes() {
        let h = r#"Basic realm="x", Newauth abc123==, Bearer realm = "a \"b\"" , error=invalid_token, scope="a b", Other x=y"#;
        let c = BearerChallenge::parse(h).unwrap();
        assert_eq!(c.error.as_deref(), Some("invalid_token"));
        assert_eq!(c.scope.as_deref(), Some("a b"));
        assert_eq!(c.resource_metadata, None);
        // Parameters of a later challenge are not the Bearer challenge's.
        let c = BearerChallenge::parse("Bearer, Other scope=x").unwrap();
        assert_eq!(c.scope, None);
        assert_eq!(
            BearerChallenge::parse("bearer error=\"insufficient_scope\"")
                .unwrap()
                .error
                .as_deref(),
            Some("insufficient_scope")
        );
    }

    #[test]
    fn refusals() {
        assert_eq!(
            BearerChallenge::parse("Basic realm=x"),
            Err(ChallengeError::NoBearer)
        );
        assert_eq!(BearerChallenge::parse(""), Err(ChallengeError::NoBearer));
        assert_eq!(
            BearerChallenge::parse("Bearer scope=a, scope=b"),
            Err(ChallengeError::Repeated)
        );
        assert_eq!(
            BearerChallenge::parse("Bearer SCOPE=a, scope=b"),
            Err(ChallengeError::Repeated)
        );
        for bad in [
            "Bearer scope=\"open",
            "Bearer scope=\"a\\",
            "Bearer scope=\"a\"b",
            "Bearer =x",
            "Bearer scope==\"a\"",
            "scope=a",
            "Bearer scope=\"a\u{1}\"",
            "Bearer @",
        ] {
            assert_eq!(
                BearerChallenge::parse(bad),
                Err(ChallengeError::Malformed),
                "{bad}"
            );
        }
        let long = alloc::format!("Bearer scope=\"{}\"", "a".repeat(MAX_CHALLENGE_LEN));
        assert_eq!(BearerChallenge::parse(&long), Err(ChallengeError::TooLong));
    }
}
