//! Links into and out of the application: deep links and the open route that
//! serves them, and the guard for external links an app proposes.
//!
//! - [`DeepLink`] builds and parses the app-relative open path
//!   (`/_agent-native/open?app=…&view=…&…`), its absolute web URL and its
//!   desktop URL (`agentnative://open?…`). A link is a pure pointer: it never
//!   carries identity or credentials.
//! - [`OpenRoute`] turns an open request into a `navigate` command the adapter
//!   scopes to the browser session and a redirect target checked by the
//!   open-redirect guard ([`crate::redirect::SafePath`]).
//! - [`ExternalLink`] accepts only absolute `http`/`https` URLs without
//!   credentials that leave the host's and the sandbox's origins.
//!
//! Queries are `application/x-www-form-urlencoded` as the WHATWG URL Standard
//! defines it (what `URLSearchParams` reads): `&`-separated pairs, `+` read as
//! a space, percent-escapes decoded once to UTF-8. The builder percent-encodes
//! every byte outside RFC 3986's unreserved set exactly once, so it never
//! writes a `+` or a raw reserved character. The compose draft is JSON carried
//! as base64url without padding (RFC 4648 §5).

mod deep;
mod external;
mod open;
mod params;

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

pub use deep::{BuildLinkError, ComposeDraft, DeepLink, ParseLinkError};
pub use external::{ExternalLink, ExternalLinkError, ExternalLinkPolicy};
pub use open::{
    ComposeEntry, NavigateCommand, OpenAnswer, OpenError, OpenRedirect, OpenRoute, RedirectSource,
};
pub use params::{LinkParams, LinkParamsIter};

use crate::error::{ErrorCode, WireError};
use crate::redirect::SafePath;

/// Parameter names the open route interprets itself; every other parameter is
/// handed to the app in the `navigate` command.
pub const RESERVED_PARAMS: [&str; 4] = ["app", "view", "to", "compose"];

/// Where deep links point: the open route's path and the desktop URL scheme.
///
/// The defaults are `/_agent-native/open` and `agentnative`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkConfig {
    open_path: String,
    desktop_scheme: String,
}

impl LinkConfig {
    /// The default open-route path.
    pub const DEFAULT_OPEN_PATH: &'static str = "/_agent-native/open";
    /// The default desktop URL scheme.
    pub const DEFAULT_DESKTOP_SCHEME: &'static str = "agentnative";

    /// A configuration with a custom open path and desktop scheme.
    ///
    /// The path must pass the open-redirect guard and have no query or
    /// fragment; the scheme must be an RFC 3986 §3.1 scheme other than
    /// `http`, `https` and the schemes browsers execute or read locally.
    pub fn new(open_path: &str, desktop_scheme: &str) -> Result<Self, LinkConfigError> {
        let path = SafePath::new(open_path).map_err(|_| LinkConfigError::OpenPath)?;
        if path.path_without_query() != open_path {
            return Err(LinkConfigError::OpenPath);
        }
        let scheme = desktop_scheme.as_bytes();
        let valid = scheme.first().is_some_and(u8::is_ascii_lowercase)
            && scheme.len() <= 32
            && scheme.iter().all(|&c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'+' | b'-' | b'.')
            });
        let forbidden = matches!(
            desktop_scheme,
            "http"
                | "https"
                | "javascript"
                | "data"
                | "file"
                | "blob"
                | "about"
                | "vbscript"
                | "ws"
                | "wss"
        );
        if !valid || forbidden {
            return Err(LinkConfigError::DesktopScheme);
        }
        Ok(Self {
            open_path: open_path.into(),
            desktop_scheme: desktop_scheme.into(),
        })
    }

    /// The open route's path, e.g. `/_agent-native/open`.
    #[must_use]
    pub fn open_path(&self) -> &str {
        &self.open_path
    }

    /// The desktop URL scheme, e.g. `agentnative`.
    #[must_use]
    pub fn desktop_scheme(&self) -> &str {
        &self.desktop_scheme
    }
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            open_path: Self::DEFAULT_OPEN_PATH.into(),
            desktop_scheme: Self::DEFAULT_DESKTOP_SCHEME.into(),
        }
    }
}

/// A [`LinkConfig`] was refused.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkConfigError {
    /// The open path is not a safe same-origin path without query or fragment.
    OpenPath,
    /// The desktop scheme is not a lower-case RFC 3986 scheme, or is one of
    /// the web or script schemes.
    DesktopScheme,
    /// An origin is not an absolute URL with a host.
    Origin,
}

impl fmt::Display for LinkConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::OpenPath => "open path must be a safe absolute path without query or fragment",
            Self::DesktopScheme => "desktop scheme must be a custom lower-case URL scheme",
            Self::Origin => "origin must be an absolute URL with a host",
        })
    }
}

impl WireError for LinkConfigError {
    fn code(&self) -> ErrorCode {
        ErrorCode::InvalidLink
    }
}

#[cfg(feature = "std")]
impl std::error::Error for LinkConfigError {}

/// Whether a parameter name would make a link carry identity or credentials.
///
/// The name is compared case-insensitively with `-` and `_` removed, so
/// `Access-Token`, `accessToken` and `access_token` are one name. Names that
/// contain a credential word are refused too (`x_api_key`, `f_token`), and
/// so are names too long to judge (over 128 bytes).
#[must_use]
pub fn is_credential_param(name: &str) -> bool {
    const CONTAINS: [&str; 12] = [
        "token",
        "secret",
        "password",
        "passwd",
        "session",
        "credential",
        "apikey",
        "bearer",
        "cookie",
        "jwt",
        "authorization",
        "privatekey",
    ];
    const EXACT: [&str; 9] = [
        "sid",
        "sub",
        "auth",
        "pwd",
        "pass",
        "otp",
        "orgdomain",
        "assertion",
        "signature",
    ];
    let mut norm = heapless::String::<128>::new();
    for c in name.chars().filter(|c| !matches!(c, '-' | '_')) {
        if norm.push(c.to_ascii_lowercase()).is_err() {
            // Too long to judge: refuse.
            return true;
        }
    }
    // A plain byte-window search: `str::contains` would bring the two-way
    // substring searcher into firmware for these short needles.
    let bytes = norm.as_bytes();
    CONTAINS
        .iter()
        .any(|w| bytes.windows(w.len()).any(|x| x == w.as_bytes()))
        || EXACT.contains(&norm.as_str())
}

/// Whether a value looks like a bearer credential: a JWS/JWE compact
/// serialization (RFC 7515 §7.1), recognised by its base64url `{"` header.
fn looks_like_jwt(value: &str) -> bool {
    value.starts_with("eyJ")
        && value.matches('.').count() >= 2
        && value
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// RFC 3986 §2.3 unreserved characters: the only bytes written unescaped.
const fn is_unreserved(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~')
}

/// Percent-encodes every byte outside the unreserved set (RFC 3986 §2.1),
/// with upper-case hex digits.
fn encode_into(out: &mut String, text: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &c in text.as_bytes() {
        if is_unreserved(c) {
            out.push(char::from(c));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(c >> 4)]));
            out.push(char::from(HEX[usize::from(c & 0xf)]));
        }
    }
}

/// Appends `name=value` to a query under construction.
fn push_pair(out: &mut String, name: &str, value: &str) {
    if !out.is_empty() {
        out.push('&');
    }
    encode_into(out, name);
    out.push('=');
    encode_into(out, value);
}

/// Decodes one form-urlencoded component: `+` is a space, `%XX` a byte; the
/// result must be UTF-8. A `%` without two hex digits is an error, not a
/// literal (the builder never writes one).
fn decode_component(raw: &str) -> Result<String, DecodeError> {
    if !raw.bytes().any(|c| c == b'%' || c == b'+') {
        return Ok(raw.into());
    }
    let b = raw.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let h = b.get(i + 1).copied().and_then(crate::hex::digit);
                let l = b.get(i + 2).copied().and_then(crate::hex::digit);
                let (Some(h), Some(l)) = (h, l) else {
                    return Err(DecodeError::Percent);
                };
                out.push((h << 4) | l);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| DecodeError::Utf8)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DecodeError {
    Percent,
    Utf8,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_names() {
        for bad in [
            "token",
            "access_token",
            "Access-Token",
            "accessToken",
            "refresh_token",
            "secret",
            "client_secret",
            "password",
            "session",
            "sessionId",
            "sid",
            "api_key",
            "f_token",
            "JWT",
            "org_domain",
        ] {
            assert!(is_credential_param(bad), "{bad}");
        }
        for ok in [
            "id",
            "label",
            "search",
            "f_status",
            "threadId",
            "subject",
            "view_mode",
            "tokyo",
        ] {
            assert!(!is_credential_param(ok), "{ok}");
        }
    }

    #[test]
    fn jwt_values() {
        assert!(looks_like_jwt("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.sig"));
        assert!(!looks_like_jwt("eyJ just text. with. dots"));
        assert!(!looks_like_jwt("hello"));
    }

    #[test]
    fn encoding_is_exactly_once() {
        let mut out = String::new();
        encode_into(&mut out, "a b+c%20/é~");
        assert_eq!(out, "a%20b%2Bc%2520%2F%C3%A9~");
        assert_eq!(decode_component(&out).unwrap(), "a b+c%20/é~");
        assert_eq!(decode_component("a+b").unwrap(), "a b");
        assert_eq!(decode_component("%zz"), Err(DecodeError::Percent));
        assert_eq!(decode_component("%FF"), Err(DecodeError::Utf8));
    }

    #[test]
    fn config_validation() {
        assert!(LinkConfig::new("/open", "myapp").is_ok());
        assert_eq!(
            LinkConfig::new("/open?x", "myapp"),
            Err(LinkConfigError::OpenPath)
        );
        assert_eq!(
            LinkConfig::new("//open", "myapp"),
            Err(LinkConfigError::OpenPath)
        );
        assert_eq!(
            LinkConfig::new("/open", "https"),
            Err(LinkConfigError::DesktopScheme)
        );
        assert_eq!(
            LinkConfig::new("/open", "My App"),
            Err(LinkConfigError::DesktopScheme)
        );
        assert_eq!(LinkConfig::default().open_path(), "/_agent-native/open");
    }
}
