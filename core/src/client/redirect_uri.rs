//! [`RedirectUri`]: a registered redirect URI and the one way to match it.

use alloc::string::String;
use core::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use url::Url;

use crate::describe::{Describe, display_by_describe};
use crate::error::{ErrorCode, WireError};

/// The hosts that make a URI a loopback URI, written exactly like this.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// A registered redirect URI that passed the redirect policy.
///
/// Accepted, in three kinds ([`RedirectKind`]):
///
/// * **web**: `https://host[:port][/path][?query]` with a non-empty host
///   (RFC 6749 §3.1.2, OAuth 2.1 §2.3.1);
/// * **loopback**: `http://` to one of the literal loopback hosts
///   `localhost`, `127.0.0.1` or `[::1]`, with any port (RFC 8252 §7.3 and
///   §8.3);
/// * **private-use scheme** (RFC 8252 §7.1): a native app's own scheme,
///   such as `cursor://anysphere.cursor-mcp/oauth/callback` or
///   `com.example.app:/oauth2redirect`. The scheme must be a lower-case
///   RFC 3986 §3.1 scheme and not one a browser handles itself
///   ([`is_browser_scheme`]: `javascript`, `data`, `file`, `about`,
///   `blob`, …), so the code can only ever reach an installed app. Any app
///   may claim a scheme, so PKCE is what protects the code (RFC 8252 §8.1).
///
/// Refused for every kind: a fragment, even an empty `#` (RFC 6749
/// §3.1.2); userinfo, even an empty `@`; more than [`RedirectUri::MAX_LEN`]
/// bytes; any byte outside the URI character set of RFC 3986 §2 (so
/// whitespace, controls, non-ASCII text and `\` are refused; international
/// hosts are written in punycode) and malformed `%` escapes; `http` to any
/// host but the three literals.
///
/// The text must also already be in the form a URL Standard parser (what
/// browsers run, here the `url` crate) would serialize it to — the only
/// tolerated difference is an empty path written without its `/`. That
/// refuses everything a parser would silently rewrite: upper-case schemes
/// and hosts (so `LOCALHOST` is refused, not normalized), a spelled-out
/// default port, dot segments, and every other spelling of an address
/// (`127.1`, `0x7f.1`, `2130706433`, `[::ffff:127.0.0.1]`). Because the raw
/// host of an `http` URI must be one of the three literals *before* any
/// parsing, `127.0.0.1.evil.com` and `localhost.evil.com` are refused too.
/// The upshot: the text registered is the text a browser will visit.
///
/// Matching ([`RedirectUri::matches`]) is byte for byte (OAuth 2.1 §2.3.1),
/// except that a loopback URI accepts any port (RFC 8252 §7.3).
///
/// ```
/// use portcullis_core::client::{RedirectKind, RedirectUri, RedirectUriError};
///
/// let uri = RedirectUri::parse("http://127.0.0.1/cb").unwrap();
/// assert!(uri.is_loopback());
/// assert!(uri.matches("http://127.0.0.1:49152/cb"));
/// assert!(!uri.matches("http://127.0.0.1:49152/cb/"));
/// assert_eq!(RedirectUri::parse("http://127.1/cb"), Err(RedirectUriError::NotLoopback));
///
/// let app = RedirectUri::parse("cursor://anysphere.cursor-mcp/oauth/callback").unwrap();
/// assert_eq!(app.kind(), RedirectKind::PrivateUse);
/// assert_eq!(app.scheme(), "cursor");
/// assert!(!app.matches("cursor://anysphere.cursor-mcp/oauth/callback/"));
/// assert_eq!(RedirectUri::parse("javascript://x/%0aalert(1)"), Err(RedirectUriError::Scheme));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RedirectUri {
    uri: String,
    /// `uri[host_start..host_end]` is the host as written (and as parsed).
    host_start: usize,
    host_end: usize,
    /// Where the authority ends: the path, query or end of text.
    rest_start: usize,
    kind: RedirectKind,
}

/// The three kinds of redirect URI the policy accepts (see [`RedirectUri`]).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RedirectKind {
    /// `https` to any host.
    Web,
    /// `http` to a literal loopback host, any port (RFC 8252 §7.3).
    Loopback,
    /// A private-use URI scheme of a native app (RFC 8252 §7.1).
    PrivateUse,
}

/// Schemes a browser handles itself rather than handing to an installed
/// app: the URL Standard's special schemes and local schemes, schemes that
/// run code, and the browsers' own internal schemes (and Android's
/// `intent:`, which launches arbitrary app components). A redirect to any
/// of them could run script on, read from or reveal the code to something
/// other than the client, so none is a private-use scheme.
const BROWSER_SCHEMES: &str = "about blob brave chrome chrome-extension chrome-search \
chrome-untrusted data devtools edge file filesystem ftp intent jar javascript livescript mailto \
moz-extension ms-browser-extension opera resource safari-extension safari-web-extension sms tel \
view-source vbscript vivaldi webkit ws wss";

/// Whether `scheme` (lower case) is one a browser handles itself and so can
/// never be a private-use redirect scheme (see [`RedirectUri`]).
#[must_use]
pub fn is_browser_scheme(scheme: &str) -> bool {
    // One string, not a table of slices: smaller in a firmware image.
    BROWSER_SCHEMES.split(' ').any(|s| s == scheme)
}

impl RedirectUri {
    /// The longest accepted redirect URI, in bytes.
    pub const MAX_LEN: usize = 2048;

    /// Checks `s` against the redirect policy.
    pub fn parse(s: &str) -> Result<Self, RedirectUriError> {
        if s.is_empty() {
            return Err(RedirectUriError::Empty);
        }
        if s.len() > Self::MAX_LEN {
            return Err(RedirectUriError::TooLong);
        }
        check_uri_text(s).map_err(|fault| match fault {
            TextFault::Character => RedirectUriError::Character,
            TextFault::PercentEncoding => RedirectUriError::PercentEncoding,
        })?;
        if s.contains('#') {
            return Err(RedirectUriError::Fragment);
        }
        let (scheme, after_scheme) = split_scheme(s).ok_or(RedirectUriError::Malformed)?;
        let web = match scheme {
            "https" => Some(true),
            "http" => Some(false),
            _ if scheme.eq_ignore_ascii_case("https") || scheme.eq_ignore_ascii_case("http") => {
                return Err(RedirectUriError::NotCanonical);
            }
            _ if is_browser_scheme(&scheme.to_ascii_lowercase()) => {
                return Err(RedirectUriError::Scheme);
            }
            _ => None,
        };
        let Some(https) = web else {
            return Self::parse_private_use(s, scheme, after_scheme);
        };
        let authority = Authority::split(s, after_scheme).ok_or(RedirectUriError::Malformed)?;
        if authority.has_userinfo {
            return Err(RedirectUriError::Userinfo);
        }
        let host = &s[authority.host_start..authority.host_end];
        if host.is_empty() {
            return Err(RedirectUriError::MissingHost);
        }
        let loopback = LOOPBACK_HOSTS.contains(&host);
        if !https && !loopback {
            return Err(RedirectUriError::NotLoopback);
        }
        let url = Url::parse(s).map_err(|_| RedirectUriError::Malformed)?;
        if !is_serialized_form(s, authority.rest_start, url.as_str()) {
            return Err(RedirectUriError::NotCanonical);
        }
        // Port 0 names no listener, and no presented URI could match it.
        if url.port() == Some(0) {
            return Err(RedirectUriError::Port);
        }
        // Implied by the checks above; kept as a guard against parser drift.
        if !url.username().is_empty() || url.password().is_some() || url.fragment().is_some() {
            return Err(RedirectUriError::Malformed);
        }
        Ok(Self {
            uri: s.into(),
            host_start: authority.host_start,
            host_end: authority.host_end,
            rest_start: authority.rest_start,
            kind: if loopback {
                RedirectKind::Loopback
            } else {
                RedirectKind::Web
            },
        })
    }

    /// A private-use scheme URI (RFC 8252 §7.1): `scheme://authority/path`
    /// or `scheme:/path`. The scheme is in lower case (the serialized form
    /// checks it), the authority, if any, carries no userinfo, and the text
    /// is what the URL Standard serializes it to.
    fn parse_private_use(
        s: &str,
        scheme: &str,
        after_scheme: usize,
    ) -> Result<Self, RedirectUriError> {
        let has_authority = s[scheme.len() + 1..].starts_with("//");
        let (host_start, host_end, rest_start) = if has_authority {
            let authority = Authority::split(s, after_scheme).ok_or(RedirectUriError::Malformed)?;
            if authority.has_userinfo {
                return Err(RedirectUriError::Userinfo);
            }
            (
                authority.host_start,
                authority.host_end,
                authority.rest_start,
            )
        } else {
            (after_scheme, after_scheme, after_scheme)
        };
        if rest_start == s.len() && host_start == host_end {
            // `myapp:` or `myapp://`: nothing says where in the app to go.
            return Err(RedirectUriError::Malformed);
        }
        let url = Url::parse(s).map_err(|_| RedirectUriError::Malformed)?;
        // `myapp:callback` has an opaque path: no app documents that form.
        if url.cannot_be_a_base() {
            return Err(RedirectUriError::Malformed);
        }
        if url.as_str() != s {
            return Err(RedirectUriError::NotCanonical);
        }
        if !url.username().is_empty() || url.password().is_some() || url.fragment().is_some() {
            return Err(RedirectUriError::Malformed);
        }
        Ok(Self {
            uri: s.into(),
            host_start,
            host_end,
            rest_start,
            kind: RedirectKind::PrivateUse,
        })
    }

    /// The URI exactly as registered.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.uri
    }

    /// Which kind of redirect URI this is.
    #[must_use]
    pub fn kind(&self) -> RedirectKind {
        self.kind
    }

    /// Whether the host is a literal loopback host (`localhost`, `127.0.0.1`,
    /// `[::1]`). Such a URI matches any port, and a client whose redirect URIs
    /// are all loopback earns a warning on the consent screen: any local
    /// process can listen there.
    #[must_use]
    pub fn is_loopback(&self) -> bool {
        self.kind == RedirectKind::Loopback
    }

    /// Whether this is a native app's private-use scheme URI (RFC 8252
    /// §7.1): the code goes to whichever installed app claimed the scheme,
    /// and the consent screen says so.
    #[must_use]
    pub fn is_private_use(&self) -> bool {
        self.kind == RedirectKind::PrivateUse
    }

    /// The scheme, in lower case (`https`, `http`, or an app's own).
    #[must_use]
    pub fn scheme(&self) -> &str {
        &self.uri[..self.uri.find(':').unwrap_or(0)]
    }

    /// Whether `presented` (the `redirect_uri` of an authorization or token
    /// request) designates this URI.
    ///
    /// Simple string comparison (OAuth 2.1 §2.3.1, RFC 6749 §3.1.2.3), with
    /// one exception: for a loopback URI the port may be anything, or absent
    /// (RFC 8252 §7.3), while scheme, host, path and query still compare
    /// exactly. A presented port must be 1–65535 in canonical decimal. Never
    /// allocates and never parses `presented` as a URL.
    #[must_use]
    pub fn matches(&self, presented: &str) -> bool {
        if self.kind != RedirectKind::Loopback {
            return presented == self.uri;
        }
        let Some(after_host) = presented.strip_prefix(&self.uri[..self.host_end]) else {
            return false;
        };
        let rest = match after_host.strip_prefix(':') {
            Some(port_and_rest) => {
                let digits = port_and_rest.bytes().take_while(u8::is_ascii_digit).count();
                if !is_canonical_port(&port_and_rest[..digits]) {
                    return false;
                }
                &port_and_rest[digits..]
            }
            None => after_host,
        };
        rest == &self.uri[self.rest_start..]
    }

    /// The host as written, which is also how the URL Standard serializes it
    /// (`example.com`, `127.0.0.1`, `[::1]`): the "callback host" shown on the
    /// consent screen. Empty for a private-use URI without an authority
    /// (`com.example.app:/cb`).
    #[must_use]
    pub fn host(&self) -> &str {
        &self.uri[self.host_start..self.host_end]
    }
}

impl fmt::Display for RedirectUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.uri)
    }
}

impl AsRef<str> for RedirectUri {
    fn as_ref(&self) -> &str {
        &self.uri
    }
}

/// Serialized as its text.
impl Serialize for RedirectUri {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.uri)
    }
}

/// Deserialization re-runs [`RedirectUri::parse`], so a stored value can
/// never bypass the policy.
impl<'de> Deserialize<'de> for RedirectUri {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <alloc::borrow::Cow<'de, str>>::deserialize(d)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Why a redirect URI was refused. None of the variants carries the URI.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RedirectUriError {
    /// The URI is empty.
    Empty,
    /// Longer than [`RedirectUri::MAX_LEN`] bytes.
    TooLong,
    /// A byte outside the RFC 3986 §2 URI characters: whitespace, a control
    /// character, non-ASCII text, `\`, `"`, `<`, `>`, …
    Character,
    /// A `%` not followed by two hexadecimal digits.
    PercentEncoding,
    /// The URI has a fragment, even an empty one (RFC 6749 §3.1.2).
    Fragment,
    /// The scheme is one a browser handles itself ([`is_browser_scheme`]),
    /// so it is neither `https`, loopback `http` nor a private-use scheme.
    Scheme,
    /// Not of the form `scheme://authority…` (or, for a private-use scheme,
    /// `scheme:/path`), or not a URL at all.
    Malformed,
    /// The authority carries userinfo, even an empty one.
    Userinfo,
    /// The authority has no host.
    MissingHost,
    /// `http` to a host other than the literal `localhost`, `127.0.0.1` or
    /// `[::1]` (this includes every look-alike of them).
    NotLoopback,
    /// A URL parser would rewrite the text (case, default port, dot segments,
    /// another spelling of an address), so it is not what a browser visits.
    NotCanonical,
    /// Port 0, which no callback listener can use.
    Port,
}

impl Describe for RedirectUriError {
    fn describe<W: fmt::Write>(&self, f: &mut W) -> fmt::Result {
        f.write_str(match self {
            Self::Empty => "redirect URI is empty",
            Self::TooLong => "redirect URI is longer than 2048 bytes",
            Self::Character => {
                "redirect URI has whitespace, control, non-ASCII or other disallowed characters"
            }
            Self::PercentEncoding => "redirect URI has a malformed percent-encoding",
            Self::Fragment => "redirect URI must not have a fragment",
            Self::Scheme => "redirect URI scheme is one a browser handles itself",
            Self::Malformed => "redirect URI is not an absolute URL with an authority",
            Self::Userinfo => "redirect URI must not carry userinfo",
            Self::MissingHost => "redirect URI has no host",
            Self::NotLoopback => {
                "http redirect URIs must use the literal host localhost, 127.0.0.1 or [::1]"
            }
            Self::NotCanonical => "redirect URI is not in canonical form",
            Self::Port => "redirect URI port must be 1-65535",
        })
    }
}

display_by_describe!(RedirectUriError);

impl WireError for RedirectUriError {
    fn code(&self) -> ErrorCode {
        ErrorCode::InvalidRedirectUri
    }
}

#[cfg(feature = "std")]
impl std::error::Error for RedirectUriError {}

/// A fault in the raw text of a URI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TextFault {
    /// A byte outside the RFC 3986 §2 character set.
    Character,
    /// A `%` without two hexadecimal digits.
    PercentEncoding,
}

/// Checks that every byte is one RFC 3986 §2 allows in a URI (unreserved,
/// reserved, or `%` starting a well-formed escape).
pub(super) fn check_uri_text(s: &str) -> Result<(), TextFault> {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = |j: usize| bytes.get(j).is_some_and(u8::is_ascii_hexdigit);
                if !(hex(i + 1) && hex(i + 2)) {
                    return Err(TextFault::PercentEncoding);
                }
                i += 3;
            }
            b if is_uri_byte(b) => i += 1,
            _ => return Err(TextFault::Character),
        }
    }
    Ok(())
}

/// Unreserved, gen-delims and sub-delims of RFC 3986 §2.2–§2.3.
const fn is_uri_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'.'
                | b'_'
                | b'~'
                | b':'
                | b'/'
                | b'?'
                | b'#'
                | b'['
                | b']'
                | b'@'
                | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
        )
}

/// Splits `scheme://` off; returns the scheme and the index after `//`.
pub(super) fn split_scheme(s: &str) -> Option<(&str, usize)> {
    let colon = s.find(':')?;
    let scheme = &s[..colon];
    let valid = scheme
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic())
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    if !valid {
        return None;
    }
    if s[colon + 1..].starts_with("//") {
        Some((scheme, colon + 3))
    } else if scheme.eq_ignore_ascii_case("https") || scheme.eq_ignore_ascii_case("http") {
        // `https:host` and `https:/host` are URLs to a WHATWG parser, but
        // not the text anyone should register.
        None
    } else {
        // `myapp:/cb`, `com.example.app:/cb`: a custom scheme.
        Some((scheme, colon + 1))
    }
}

/// The authority of a URI as written, located in the raw text.
pub(super) struct Authority {
    pub(super) has_userinfo: bool,
    pub(super) host_start: usize,
    pub(super) host_end: usize,
    /// Index of the first byte after the authority.
    pub(super) rest_start: usize,
}

impl Authority {
    /// Locates the authority that starts at `start` (just after `//`); it
    /// ends at the first `/`, `?` or `#`. `None` if a bracketed host is not
    /// closed or is followed by anything but `:port`.
    pub(super) fn split(s: &str, start: usize) -> Option<Self> {
        let rest_start = s[start..]
            .find(['/', '?', '#'])
            .map_or(s.len(), |i| start + i);
        let authority = &s[start..rest_start];
        let has_userinfo = authority.contains('@');
        let host_offset = authority.rfind('@').map_or(0, |i| i + 1);
        let host_port = &authority[host_offset..];
        let host_len = if host_port.starts_with('[') {
            let close = host_port.find(']')?;
            let after = &host_port[close + 1..];
            if !(after.is_empty() || after.starts_with(':')) {
                return None;
            }
            close + 1
        } else {
            host_port.find(':').unwrap_or(host_port.len())
        };
        let host_start = start + host_offset;
        Some(Self {
            has_userinfo,
            host_start,
            host_end: host_start + host_len,
            rest_start,
        })
    }
}

/// Whether `raw` is exactly `serialized`, or would be with a `/` inserted
/// where its authority ends (an empty path written without its slash).
pub(super) fn is_serialized_form(raw: &str, rest_start: usize, serialized: &str) -> bool {
    if raw == serialized {
        return true;
    }
    let (authority, rest) = raw.split_at(rest_start);
    !rest.starts_with('/')
        && serialized.len() == raw.len() + 1
        && serialized.starts_with(authority)
        && serialized[authority.len()..].starts_with('/')
        && &serialized[authority.len() + 1..] == rest
}

/// 1–65535 in decimal without leading zeros.
fn is_canonical_port(digits: &str) -> bool {
    !digits.is_empty()
        && digits.len() <= 5
        && !digits.starts_with('0')
        && digits.parse::<u32>().is_ok_and(|p| p <= 65_535)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    fn refused(s: &str) -> RedirectUriError {
        RedirectUri::parse(s).expect_err(s)
    }

    #[test]
    fn https_and_literal_loopback_are_accepted() {
        for ok in [
            "https://app.example.com/callback",
            "https://app.example.com",
            "https://app.example.com?x=1",
            "https://app.example.com:8443/cb?a=b&c=%2F",
            "https://127.0.0.2/cb",
            "http://localhost/cb",
            "http://127.0.0.1:33418",
            "http://[::1]:8080/oauth/callback?x",
        ] {
            let uri = RedirectUri::parse(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
            assert_eq!(uri.as_str(), ok);
            assert!(uri.matches(ok), "{ok} must match itself");
        }
    }

    #[test]
    fn host_is_the_callback_host() {
        let host = |s: &str| String::from(RedirectUri::parse(s).unwrap().host());
        assert_eq!(host("https://app.example.com:8443/cb"), "app.example.com");
        assert_eq!(host("http://[::1]:8080/cb"), "[::1]");
        assert_eq!(host("http://localhost"), "localhost");
        assert_eq!(host("https://a.example?x"), "a.example");
    }

    #[test]
    fn loopback_look_alikes_are_refused() {
        for s in [
            "http://127.0.0.1.evil.com/cb",
            "http://localhost.evil.com/cb",
            "http://127.1/cb",
            "http://0x7f.1/cb",
            "http://0x7f000001/cb",
            "http://2130706433/cb",
            "http://017700000001/cb",
            "http://[::ffff:127.0.0.1]/cb",
            "http://[0:0:0:0:0:0:0:1]/cb",
            "http://127.0.0.2/cb",
            "http://localhost./cb",
            "http://example.com/cb",
        ] {
            assert_eq!(refused(s), RedirectUriError::NotLoopback, "{s}");
        }
        assert_eq!(
            refused("http://LOCALHOST/cb"),
            RedirectUriError::NotLoopback
        );
        assert_eq!(
            refused("HTTP://localhost/cb"),
            RedirectUriError::NotCanonical
        );
    }

    #[test]
    fn other_spellings_of_https_hosts_are_refused() {
        for s in [
            "https://App.Example.com/cb",
            "https://app.example.com:443/cb",
            "https://127.1/cb",
            "https://[::ffff:127.0.0.1]/cb",
            "https://app.example.com/a/../cb",
            "https://app.example.com/a/%2e%2e/cb",
            "https://ex%61mple.com/cb",
            "https://app.example.com?q='x'",
            "https://app.example.com:/cb",
        ] {
            assert_eq!(refused(s), RedirectUriError::NotCanonical, "{s}");
        }
    }

    /// RFC 8252 §7.1: the schemes native MCP clients register (Cursor,
    /// VS Code extensions, reverse-domain app schemes) are accepted as
    /// written and matched byte for byte.
    #[test]
    fn private_use_schemes_are_accepted_exactly() {
        for (ok, host) in [
            (
                "cursor://anysphere.cursor-mcp/oauth/callback",
                "anysphere.cursor-mcp",
            ),
            (
                "vscode://saoudrizwan.claude-dev/mcp-auth/callback",
                "saoudrizwan.claude-dev",
            ),
            (
                "vscode-insiders://ms-vscode.agent/cb?x=1",
                "ms-vscode.agent",
            ),
            ("com.example.app:/oauth2redirect/example-provider", ""),
            ("myapp:///callback", ""),
            ("my.app+v2://cb", "cb"),
        ] {
            let uri = RedirectUri::parse(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
            assert_eq!(uri.kind(), RedirectKind::PrivateUse, "{ok}");
            assert!(uri.is_private_use() && !uri.is_loopback());
            assert_eq!(uri.host(), host, "{ok}");
            assert_eq!(uri.scheme(), &ok[..ok.find(':').unwrap()]);
            assert!(uri.matches(ok));
            assert!(!uri.matches(&format!("{ok}x")));
            assert!(!uri.matches(&ok.to_uppercase()));
        }
        assert_eq!(
            refused("Cursor://anysphere.cursor-mcp/oauth/callback"),
            RedirectUriError::NotCanonical
        );
        assert_eq!(refused("myapp://a/b/../c"), RedirectUriError::NotCanonical);
        assert_eq!(refused("myapp://u@cb/x"), RedirectUriError::Userinfo);
        assert_eq!(refused("myapp://cb/x#f"), RedirectUriError::Fragment);
        assert_eq!(refused("myapp:callback"), RedirectUriError::Malformed);
        assert_eq!(refused("myapp:"), RedirectUriError::Malformed);
        assert_eq!(refused("myapp://"), RedirectUriError::Malformed);
        assert_eq!(refused("1app://cb"), RedirectUriError::Malformed);
    }

    #[test]
    fn schemes_a_browser_handles_itself_are_refused() {
        for s in [
            "javascript:alert(1)",
            "javascript://x/%0aalert(1)",
            "JavaScript://x/%0aalert(1)",
            "data:text/html,x",
            "data://text/html,x",
            "file:///etc/passwd",
            "vbscript:msgbox",
            "about:blank",
            "blob:https://a.example/1",
            "filesystem:https://a.example/temporary/x",
            "view-source:https://a.example/",
            "intent://scan/cb",
            "chrome://settings",
            "chrome-extension://abc/cb",
            "moz-extension://abc/cb",
            "ftp://example.com/",
            "ws://localhost/cb",
            "wss://a.example/cb",
            "mailto:a@example.com",
        ] {
            assert_eq!(refused(s), RedirectUriError::Scheme, "{s}");
        }
    }

    #[test]
    fn schemes_fragments_userinfo_and_text_are_refused() {
        assert_eq!(refused("https:example.com/cb"), RedirectUriError::Malformed);
        assert_eq!(
            refused("https:/example.com/cb"),
            RedirectUriError::Malformed
        );
        assert_eq!(refused("/relative"), RedirectUriError::Malformed);
        assert_eq!(refused("https://a.example/cb#"), RedirectUriError::Fragment);
        assert_eq!(
            refused("https://a.example/cb#x"),
            RedirectUriError::Fragment
        );
        assert_eq!(refused("https://@a.example/cb"), RedirectUriError::Userinfo);
        assert_eq!(
            refused("https://u:p@a.example/cb"),
            RedirectUriError::Userinfo
        );
        assert_eq!(refused("http://@localhost/cb"), RedirectUriError::Userinfo);
        assert_eq!(
            refused("http://evil.com@localhost/cb"),
            RedirectUriError::Userinfo
        );
        assert_eq!(refused("https:///cb"), RedirectUriError::MissingHost);
        assert_eq!(refused("https://:443/cb"), RedirectUriError::MissingHost);
        assert_eq!(refused("https://[::1/cb"), RedirectUriError::Malformed);
        assert_eq!(refused("https://[::1]x/cb"), RedirectUriError::Malformed);
        for s in [
            " https://a.example/cb",
            "https://a.example/cb ",
            "https://a.example/c\tb",
            "https://a.example/c\nb",
            "https://a.example\\cb",
            "https://a.example/é",
            "https://a.example/\u{202e}",
            "https://a.example/<script>",
        ] {
            assert_eq!(refused(s), RedirectUriError::Character, "{s:?}");
        }
        assert_eq!(
            refused("https://a.example/%zz"),
            RedirectUriError::PercentEncoding
        );
        assert_eq!(
            refused("https://a.example/%2"),
            RedirectUriError::PercentEncoding
        );
        assert_eq!(refused(""), RedirectUriError::Empty);
        let long = format!("https://a.example/{}", "a".repeat(2048));
        assert_eq!(refused(&long), RedirectUriError::TooLong);
        let max = format!("https://a.example/{}", "a".repeat(2048 - 18));
        assert!(RedirectUri::parse(&max).is_ok());
    }

    #[test]
    fn loopback_matches_any_port_but_nothing_else() {
        let uri = RedirectUri::parse("http://127.0.0.1/cb?x=1").unwrap();
        assert!(uri.matches("http://127.0.0.1/cb?x=1"));
        assert!(uri.matches("http://127.0.0.1:1/cb?x=1"));
        assert!(uri.matches("http://127.0.0.1:65535/cb?x=1"));
        for no in [
            "http://127.0.0.1:65536/cb?x=1",
            "http://127.0.0.1:0/cb?x=1",
            "http://127.0.0.1:080/cb?x=1",
            "http://127.0.0.1:/cb?x=1",
            "http://127.0.0.1:8080/cb?x=2",
            "http://127.0.0.1:8080/cb",
            "http://127.0.0.1:8080/CB?x=1",
            "http://127.0.0.1.evil.com/cb?x=1",
            "http://127.0.0.1:8080@evil.com/cb?x=1",
            "http://localhost:8080/cb?x=1",
            "https://127.0.0.1:8080/cb?x=1",
            "http://127.0.0.1:8080/cb?x=1#f",
        ] {
            assert!(!uri.matches(no), "{no}");
        }
        assert_eq!(
            RedirectUri::parse("http://[::1]:0"),
            Err(RedirectUriError::Port)
        );
        assert_eq!(
            RedirectUri::parse("https://a.example:0/cb"),
            Err(RedirectUriError::Port)
        );
        let with_port = RedirectUri::parse("http://[::1]:8080").unwrap();
        assert!(with_port.matches("http://[::1]:9"));
        assert!(with_port.matches("http://[::1]"));
        assert!(!with_port.matches("http://[::1]:9/"));
    }

    #[test]
    fn non_loopback_matches_byte_for_byte() {
        let uri = RedirectUri::parse("https://a.example:8443/cb").unwrap();
        assert!(!uri.is_loopback());
        assert!(uri.matches("https://a.example:8443/cb"));
        assert!(!uri.matches("https://a.example:8444/cb"));
        assert!(!uri.matches("https://a.example/cb"));
        assert!(!uri.matches("https://A.example:8443/cb"));
        assert!(!uri.matches("https://a.example:8443/cb/"));
    }

    #[test]
    fn serde_reparses() {
        let uri = RedirectUri::parse("http://localhost:3000/cb").unwrap();
        let bytes = postcard::to_allocvec(&uri).unwrap();
        assert_eq!(postcard::from_bytes::<RedirectUri>(&bytes).unwrap(), uri);
        let bad = postcard::to_allocvec("http://127.1/cb").unwrap();
        assert!(postcard::from_bytes::<RedirectUri>(&bad).is_err());
    }

    #[test]
    fn errors_map_to_invalid_redirect_uri() {
        assert_eq!(
            RedirectUriError::NotLoopback.code(),
            ErrorCode::InvalidRedirectUri
        );
        assert_eq!(RedirectUriError::Fragment.http_status(), 400);
    }
}
