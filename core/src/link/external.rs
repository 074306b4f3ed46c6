//! [`ExternalLink`]: a link an app proposes to open outside the host.

use alloc::string::String;
use core::fmt;

use url::{Host, Url};

use super::LinkConfigError;
use crate::error::{ErrorCode, WireError};
use crate::redirect::is_invisible;

/// The origins an external link may never point at: the host's own origin
/// (the workbench) and the sandbox origin that serves app frames.
///
/// Origins are compared as WHATWG origins (scheme, host, port with the
/// scheme's default filled in), after the URL parser's host normalisation
/// (case, IDNA, IPv4 forms) and with trailing dots of a domain removed, so
/// `https://Chat.Example.com.:443` is the origin `https://chat.example.com`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternalLinkPolicy {
    host: OriginKey,
    sandbox: OriginKey,
}

impl ExternalLinkPolicy {
    /// A policy for a host served at `host_origin` whose app frames come
    /// from `sandbox_origin` (absolute URLs; any path is ignored).
    pub fn new(host_origin: &str, sandbox_origin: &str) -> Result<Self, LinkConfigError> {
        let key = |s: &str| {
            Url::parse(s)
                .ok()
                .as_ref()
                .and_then(OriginKey::of)
                .ok_or(LinkConfigError::Origin)
        };
        Ok(Self {
            host: key(host_origin)?,
            sandbox: key(sandbox_origin)?,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct OriginKey {
    scheme: String,
    host: String,
    port: Option<u16>,
}

impl OriginKey {
    fn of(url: &Url) -> Option<Self> {
        let host = match url.host()? {
            Host::Domain(d) => String::from(d.trim_end_matches('.')),
            Host::Ipv4(_) | Host::Ipv6(_) => String::from(url.host_str()?),
        };
        Some(Self {
            scheme: url.scheme().into(),
            host,
            port: url.port_or_known_default(),
        })
    }
}

/// An external link accepted for display: an absolute `http`/`https` URL in
/// WHATWG-normalised form, without credentials, that leaves the host's and
/// the sandbox's origins.
///
/// The host shows [`ExternalLink::as_str`] to the user and opens it only on a
/// separate click, in a new tab without an opener.
///
/// ```
/// use portcullis_core::link::{ExternalLink, ExternalLinkError, ExternalLinkPolicy};
///
/// let policy = ExternalLinkPolicy::new("https://chat.example.com", "https://apps.example.net").unwrap();
/// let link = ExternalLink::parse("HTTPS://Docs.Example.org:443/a/../b?q#f", &policy).unwrap();
/// assert_eq!(link.as_str(), "https://docs.example.org/b?q#f");
/// assert_eq!(
///     ExternalLink::parse("https://chat.example.com./x", &policy),
///     Err(ExternalLinkError::HostOrigin)
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ExternalLink {
    url: String,
}

impl ExternalLink {
    /// The longest accepted input, in bytes.
    pub const MAX_LEN: usize = 4096;

    /// Checks `input` against the rules and `policy`.
    pub fn parse(input: &str, policy: &ExternalLinkPolicy) -> Result<Self, ExternalLinkError> {
        if input.is_empty() {
            return Err(ExternalLinkError::Empty);
        }
        if input.len() > Self::MAX_LEN {
            return Err(ExternalLinkError::TooLong);
        }
        // The WHATWG parser trims leading and trailing C0 controls and spaces
        // and drops tabs and newlines anywhere: refuse instead of guessing.
        let edge = |c: Option<char>| c.is_some_and(char::is_whitespace);
        if edge(input.chars().next())
            || edge(input.chars().next_back())
            || input.chars().any(|c| c.is_control() || is_invisible(c))
        {
            return Err(ExternalLinkError::ControlOrWhitespace);
        }
        let url = Url::parse(input).map_err(|_| ExternalLinkError::Malformed)?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ExternalLinkError::Scheme);
        }
        // `https://@host` parses to an empty username and no password, so
        // the raw authority is checked too.
        if !url.username().is_empty() || url.password().is_some() || raw_authority_has_at(input) {
            return Err(ExternalLinkError::Credentials);
        }
        let key = OriginKey::of(&url).ok_or(ExternalLinkError::Malformed)?;
        if key == policy.host {
            return Err(ExternalLinkError::HostOrigin);
        }
        if key == policy.sandbox {
            return Err(ExternalLinkError::SandboxOrigin);
        }
        Ok(Self { url: url.into() })
    }

    /// The normalised URL to display and open.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.url
    }

    /// The normalised URL, owned.
    #[must_use]
    pub fn into_string(self) -> String {
        self.url
    }

    /// A link read back from the store, where only a link that passed
    /// [`ExternalLink::parse`] was ever written (a stored App View's
    /// proposal, `crate::apps::StoredView`).
    pub(crate) fn stored(url: String) -> Self {
        Self { url }
    }
}

impl fmt::Display for ExternalLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.url)
    }
}

/// Whether the authority of a special-scheme URL, as the WHATWG parser finds
/// it (after any run of `/` and `\`, up to the next `/`, `\`, `?` or `#`),
/// contains `@`.
fn raw_authority_has_at(input: &str) -> bool {
    let Some((_, rest)) = input.split_once(':') else {
        return false;
    };
    let rest = rest.trim_start_matches(['/', '\\']);
    let end = rest.find(['/', '\\', '?', '#']).unwrap_or(rest.len());
    rest[..end].contains('@')
}

/// Why an external link was refused.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExternalLinkError {
    /// The link is empty.
    Empty,
    /// The link is longer than [`ExternalLink::MAX_LEN`].
    TooLong,
    /// Leading or trailing whitespace, or a control or invisible character.
    ControlOrWhitespace,
    /// Not an absolute URL by the WHATWG URL Standard.
    Malformed,
    /// The scheme is not `http` or `https`.
    Scheme,
    /// The link carries userinfo (even empty).
    Credentials,
    /// The link points at the host's own origin.
    HostOrigin,
    /// The link points at the sandbox origin.
    SandboxOrigin,
}

impl fmt::Display for ExternalLinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Empty => "empty external link",
            Self::TooLong => "external link too long",
            Self::ControlOrWhitespace => "external link has whitespace or control characters",
            Self::Malformed => "external link is not an absolute URL",
            Self::Scheme => "external link must be http or https",
            Self::Credentials => "external link carries credentials",
            Self::HostOrigin => "external link points at the host",
            Self::SandboxOrigin => "external link points at the sandbox",
        })
    }
}

impl WireError for ExternalLinkError {
    fn code(&self) -> ErrorCode {
        ErrorCode::InvalidLink
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ExternalLinkError {}

#[cfg(test)]
mod tests {
    use super::*;
    use ExternalLinkError as E;

    fn policy() -> ExternalLinkPolicy {
        ExternalLinkPolicy::new(
            "https://chat.example.com",
            "https://apps.example.net/sandbox.html",
        )
        .unwrap()
    }

    fn check(input: &str) -> Result<String, ExternalLinkError> {
        ExternalLink::parse(input, &policy()).map(ExternalLink::into_string)
    }

    #[test]
    fn accepts_and_normalises() {
        assert_eq!(
            check("https://example.org"),
            Ok("https://example.org/".into())
        );
        assert_eq!(
            check("http://EXAMPLE.org:80/a/./b/../c"),
            Ok("http://example.org/a/c".into())
        );
        assert_eq!(
            check("https://example.org/a b"),
            Ok("https://example.org/a%20b".into())
        );
        assert_eq!(
            check("https:\\\\example.org\\x"),
            Ok("https://example.org/x".into())
        );
        assert_eq!(
            check("https://chat.example.com:8443/"),
            Ok("https://chat.example.com:8443/".into())
        );
        assert_eq!(
            check("http://chat.example.com/"),
            Ok("http://chat.example.com/".into())
        );
        assert_eq!(
            check("https://\u{ff45}xample.org/"),
            Ok("https://example.org/".into())
        );
    }

    #[test]
    fn refuses_with_typed_reasons() {
        assert_eq!(check(""), Err(E::Empty));
        assert_eq!(check(&"a".repeat(5000)), Err(E::TooLong));
        assert_eq!(check(" https://example.org"), Err(E::ControlOrWhitespace));
        assert_eq!(
            check("https://example.org\u{3000}"),
            Err(E::ControlOrWhitespace)
        );
        assert_eq!(check("https://exa\tmple.org"), Err(E::ControlOrWhitespace));
        assert_eq!(
            check("https://example.org/\u{200b}"),
            Err(E::ControlOrWhitespace)
        );
        assert_eq!(check("/relative"), Err(E::Malformed));
        assert_eq!(check("https://"), Err(E::Malformed));
        assert_eq!(check("javascript:alert(1)"), Err(E::Scheme));
        assert_eq!(check("ftp://example.org"), Err(E::Scheme));
        assert_eq!(check("data:text/html,x"), Err(E::Scheme));
        assert_eq!(check("https://user@good.com"), Err(E::Credentials));
        assert_eq!(check("https://user:pw@good.com"), Err(E::Credentials));
        assert_eq!(check("https://:@good.com"), Err(E::Credentials));
        assert_eq!(check("https://@good.com"), Err(E::Credentials));
        assert_eq!(check("https:@good.com"), Err(E::Credentials));
        assert_eq!(check("https:\\\\@good.com"), Err(E::Credentials));
        assert_eq!(check("https://chat.example.com:443/x"), Err(E::HostOrigin));
        assert_eq!(check("HTTPS://CHAT.example.COM/x"), Err(E::HostOrigin));
        assert_eq!(check("https://chat.example.com./x"), Err(E::HostOrigin));
        assert_eq!(check("https://chat.example.com../x"), Err(E::HostOrigin));
        assert_eq!(
            check("https://chat.\u{ff45}xample.com/x"),
            Err(E::HostOrigin)
        );
        assert_eq!(
            check("https://apps.example.net/other"),
            Err(E::SandboxOrigin)
        );
        assert_eq!(E::Credentials.code(), ErrorCode::InvalidLink);
    }

    #[test]
    fn policy_needs_origins() {
        assert_eq!(
            ExternalLinkPolicy::new("not a url", "https://a.b"),
            Err(LinkConfigError::Origin)
        );
        assert_eq!(
            ExternalLinkPolicy::new("https://a.b", "mailto:x@y"),
            Err(LinkConfigError::Origin)
        );
    }
}
