//! The sandbox origin's configuration, checked once at startup.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::net::{IpAddr, SocketAddr};

use url::{Host, Url};

use crate::error::{ErrorCode, WireError};
use crate::link::ExternalLinkPolicy;

/// The longest URL read, in bytes.
const MAX_URL_LEN: usize = 2048;

/// The checks of [`SandboxConfig::check`].
///
/// Apps run in an opaque iframe nested in a sandbox proxy served from an
/// origin other than the host's (SEP-1865 "Sandbox proxy": host and sandbox
/// MUST have different origins). The proxy carries no host credential, so
/// it must never share the host's origin. The host document ("Local, Docker
/// and reverse-proxy origins") fixes the rules checked here:
///
/// - the listener is a literal `IPv4:port` or `[IPv6]:port` (port 0 picks a
///   free port);
/// - a listener that is not loopback needs an explicit public URL (an
///   internal address is never advertised);
/// - a public URL is an origin: `http` or `https`, no credentials, no path
///   but `/`, no query, no fragment;
/// - the sandbox origin differs from the host's (scheme, host, port);
/// - both are `https`, unless both are loopback (`127.0.0.0/8`, `[::1]`,
///   `localhost`), where plain `http` is allowed for development.
#[derive(Clone, Copy, Debug)]
pub struct SandboxConfig;

/// A checked sandbox configuration: where to listen and the origin the
/// browser loads the sandbox from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxOrigin {
    listen: SocketAddr,
    host: Origin,
    public: Option<Origin>,
}

/// An origin: scheme, host (normalised, trailing dots removed) and port
/// (the scheme's default filled in).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Origin {
    https: bool,
    /// The host compared (a domain without its trailing dots).
    host: String,
    /// The host written back, exactly as the URL parser serialised it.
    text: String,
    port: u16,
    loopback: bool,
}

impl Origin {
    fn serialize(&self) -> String {
        let (scheme, default) = if self.https {
            ("https", 443)
        } else {
            ("http", 80)
        };
        if self.port == default {
            alloc::format!("{scheme}://{}", self.text)
        } else {
            alloc::format!("{scheme}://{}:{}", self.text, self.port)
        }
    }
}

/// `localhost` and its subdomains (the URL parser has lower-cased them).
fn loopback_domain(d: &str) -> bool {
    d == "localhost" || d.ends_with(".localhost")
}

/// Parses an absolute `http`/`https` URL without credentials; `strict`
/// also demands it be an origin (no path but `/`, no query or fragment).
fn origin_of(
    input: &str,
    strict: bool,
    bad: SandboxConfigError,
) -> Result<Origin, SandboxConfigError> {
    if input.is_empty()
        || input.len() > MAX_URL_LEN
        || input
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '\\')
    {
        return Err(bad);
    }
    let url = Url::parse(input).map_err(|_| bad)?;
    let https = match url.scheme() {
        "https" => true,
        "http" => false,
        _ => return Err(bad),
    };
    let authority = input.split_once("://").map_or("", |(_, rest)| {
        rest.split(['/', '?', '#']).next().unwrap_or("")
    });
    if !url.username().is_empty() || url.password().is_some() || authority.contains('@') {
        return Err(SandboxConfigError::Credentials);
    }
    if strict
        && (!matches!(url.path(), "" | "/") || url.query().is_some() || url.fragment().is_some())
    {
        return Err(SandboxConfigError::NotOrigin);
    }
    let (host, loopback) = match url.host().ok_or(bad)? {
        Host::Domain(d) => {
            let d = d.trim_end_matches('.');
            (String::from(d), loopback_domain(d))
        }
        Host::Ipv4(ip) => (String::from(url.host_str().ok_or(bad)?), ip.is_loopback()),
        Host::Ipv6(ip) => (String::from(url.host_str().ok_or(bad)?), ip.is_loopback()),
    };
    Ok(Origin {
        https,
        host,
        text: String::from(url.host_str().ok_or(bad)?),
        port: url.port_or_known_default().ok_or(bad)?,
        loopback,
    })
}

impl SandboxConfig {
    /// Checks the sandbox settings against the host's public URL (any path
    /// of it is ignored; its origin counts).
    ///
    /// ```
    /// use portcullis_core::apps::{SandboxConfig, SandboxConfigError};
    ///
    /// let s = SandboxConfig::check("https://chat.example.com", "0.0.0.0:8766",
    ///     Some("https://apps.example.net")).unwrap();
    /// assert_eq!(s.origin(8766).unwrap(), "https://apps.example.net");
    /// let local = SandboxConfig::check("http://127.0.0.1:8080", "127.0.0.1:0", None).unwrap();
    /// assert_eq!(local.origin(40123).unwrap(), "http://localhost:40123");
    /// assert_eq!(
    ///     SandboxConfig::check("https://chat.example.com", "0.0.0.0:8766", None),
    ///     Err(SandboxConfigError::PublicUrlRequired)
    /// );
    /// ```
    pub fn check(
        host_public_url: &str,
        sandbox_listen_addr: &str,
        sandbox_public_url: Option<&str>,
    ) -> Result<SandboxOrigin, SandboxConfigError> {
        // `SocketAddr` also reads an IPv6 scope id (`[fe80::1%2]:80`); a
        // listener is a plain literal.
        if sandbox_listen_addr.contains('%') {
            return Err(SandboxConfigError::ListenAddr);
        }
        let listen: SocketAddr = sandbox_listen_addr
            .parse()
            .map_err(|_| SandboxConfigError::ListenAddr)?;
        Self::check_addr(host_public_url, listen, sandbox_public_url)
    }

    /// [`SandboxConfig::check`] for a listen address the caller already
    /// holds as a [`SocketAddr`] (an IPv6 scope id is refused).
    pub fn check_addr(
        host_public_url: &str,
        listen: SocketAddr,
        sandbox_public_url: Option<&str>,
    ) -> Result<SandboxOrigin, SandboxConfigError> {
        if matches!(listen, SocketAddr::V6(v6) if v6.scope_id() != 0 || v6.flowinfo() != 0) {
            return Err(SandboxConfigError::ListenAddr);
        }
        let host = origin_of(host_public_url, false, SandboxConfigError::HostUrl)?;
        let public = match sandbox_public_url {
            Some(url) => Some(origin_of(url, true, SandboxConfigError::PublicUrl)?),
            None if listen.ip().is_loopback() => None,
            None => return Err(SandboxConfigError::PublicUrlRequired),
        };
        let sandbox = SandboxOrigin {
            listen,
            host,
            public,
        };
        if let Some(p) = &sandbox.public {
            sandbox.compare(p)?;
        } else if !sandbox.host.loopback {
            // A loopback sandbox is unreachable from a browser on another
            // machine.
            return Err(SandboxConfigError::PublicUrlRequired);
        } else if listen.port() != 0 {
            sandbox.compare(&sandbox.listener_origin(listen.port()))?;
        }
        Ok(sandbox)
    }
}

impl SandboxOrigin {
    /// The address to listen on.
    #[must_use]
    pub const fn listen_addr(&self) -> SocketAddr {
        self.listen
    }

    /// Whether an explicit public URL was given.
    #[must_use]
    pub const fn has_public_url(&self) -> bool {
        self.public.is_some()
    }

    /// The sandbox origin the browser loads, once the listener is bound to
    /// `bound_port`. Without a public URL it is the loopback listener's, on
    /// another host name than the server's so that no cookie of the server
    /// reaches it: `http://localhost:<port>`, or the listener's address
    /// (`http://127.0.0.1:<port>`, `http://[::1]:<port>`) for a server on
    /// `localhost`.
    pub fn origin(&self, bound_port: u16) -> Result<String, SandboxConfigError> {
        if let Some(p) = &self.public {
            return Ok(p.serialize());
        }
        let o = self.listener_origin(bound_port);
        self.compare(&o)?;
        Ok(o.serialize())
    }

    /// The external-link policy refusing the host's and this sandbox's
    /// origins, for [`super::View::propose_link`].
    pub fn link_policy(&self, bound_port: u16) -> Result<ExternalLinkPolicy, SandboxConfigError> {
        let sandbox = self.origin(bound_port)?;
        ExternalLinkPolicy::new(&self.host.serialize(), &sandbox)
            .map_err(|_| SandboxConfigError::HostUrl)
    }

    fn listener_origin(&self, port: u16) -> Origin {
        // Another host name than the server's: browsers keep cookies per
        // host, not per port (RFC 6265, section 8.5), so a sandbox on the
        // server's own host name would be sent the server's cookies.
        let host = if self.host.host == "localhost" {
            match self.listen.ip() {
                IpAddr::V4(ip) => alloc::format!("{ip}"),
                IpAddr::V6(ip) => alloc::format!("[{ip}]"),
            }
        } else {
            String::from("localhost")
        };
        Origin {
            https: false,
            text: host.clone(),
            host,
            port,
            loopback: true,
        }
    }

    /// The sandbox origin `o` against the host's.
    fn compare(&self, o: &Origin) -> Result<(), SandboxConfigError> {
        let h = &self.host;
        if h.https == o.https && h.host == o.host && h.port == o.port {
            return Err(SandboxConfigError::SameOrigin);
        }
        if !((h.https && o.https) || (h.loopback && o.loopback)) {
            return Err(SandboxConfigError::InsecureScheme);
        }
        Ok(())
    }
}

/// The exact origins among `declared` — an App resource's CSP domains
/// (`_meta.ui.csp.connectDomains` / `resourceDomains`, SEP-1865 "UI
/// Resource Format") — normalised, deduplicated, in the order first seen,
/// at most `max`; anything else is dropped, never widened.
///
/// Kept: an absolute `https`, `http`, `wss` or `ws` URL that is an origin
/// (no credentials, no path but `/`, no query or fragment), whose host is
/// an IP address or a domain of `[a-z0-9.-]` after the URL parser's
/// normalisation (IDNA), with no empty label. So a wildcard (`https://*.cdn.net`), a bare host,
/// or a host with a character CSP treats as syntax (`;`, `,`, `'`) never
/// reaches a `Content-Security-Policy` header. The host's own origin is the
/// caller's to leave out (Host-origin network access is blocked).
///
/// ```
/// use portcullis_core::apps::exact_origins;
///
/// let kept = exact_origins(
///     ["https://CDN.example.com/", "https://*.example.com", "https://a;sandbox", "wss://rt.example.com:8443",
///      "https://cdn.example.com:443", "cdn.example.com"],
///     8,
/// );
/// assert_eq!(kept, ["https://cdn.example.com", "wss://rt.example.com:8443"]);
/// ```
#[must_use]
pub fn exact_origins<'a>(declared: impl IntoIterator<Item = &'a str>, max: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for d in declared {
        if out.len() >= max {
            break;
        }
        if let Some(o) = exact_origin(d).filter(|o| !out.contains(o)) {
            out.push(o);
        }
    }
    out
}

fn exact_origin(input: &str) -> Option<String> {
    if input.is_empty()
        || input.len() > MAX_URL_LEN
        || input
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '\\' | '*' | '@'))
    {
        return None;
    }
    let url = Url::parse(input).ok()?;
    let default = match url.scheme() {
        "https" | "wss" => 443,
        "http" | "ws" => 80,
        _ => return None,
    };
    if !url.username().is_empty()
        || url.password().is_some()
        || !matches!(url.path(), "" | "/")
        || url.query().is_some()
        || url.fragment().is_some()
    {
        return None;
    }
    let host = match url.host()? {
        Host::Domain(d) => {
            // No empty label (`a..b`, a trailing dot): written back as
            // read, so the origin re-parses to itself.
            let ok = !d.split('.').any(str::is_empty)
                && d.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-')
                });
            if !ok {
                return None;
            }
            String::from(d)
        }
        Host::Ipv4(_) | Host::Ipv6(_) => String::from(url.host_str()?),
    };
    let port = url.port_or_known_default()?;
    Some(if port == default {
        alloc::format!("{}://{host}", url.scheme())
    } else {
        alloc::format!("{}://{host}:{port}", url.scheme())
    })
}

/// Why a sandbox configuration was refused. Nothing of the input is echoed.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SandboxConfigError {
    /// The host's public URL is not an absolute `http`/`https` URL.
    HostUrl,
    /// The listen address is not a literal `IPv4:port` or `[IPv6]:port`.
    ListenAddr,
    /// The sandbox public URL is not an absolute `http`/`https` URL.
    PublicUrl,
    /// A URL carries credentials.
    Credentials,
    /// The sandbox public URL has a path, query or fragment: it must be an
    /// origin.
    NotOrigin,
    /// The listener is not loopback (or the host is not), and no public
    /// URL is set.
    PublicUrlRequired,
    /// The sandbox origin is the host's.
    SameOrigin,
    /// Plain `http` outside loopback: both must be `https` unless both are
    /// loopback.
    InsecureScheme,
}

impl SandboxConfigError {
    /// A stable, machine-readable reason (never changes for a variant).
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        match self {
            Self::HostUrl => "sandbox_host_url",
            Self::ListenAddr => "sandbox_listen_addr",
            Self::PublicUrl => "sandbox_public_url",
            Self::Credentials => "sandbox_credentials",
            Self::NotOrigin => "sandbox_not_origin",
            Self::PublicUrlRequired => "sandbox_public_url_required",
            Self::SameOrigin => "sandbox_same_origin",
            Self::InsecureScheme => "sandbox_insecure_scheme",
        }
    }
}

impl fmt::Display for SandboxConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::HostUrl => "the host public URL is not an absolute http(s) URL",
            Self::ListenAddr => "the sandbox listener must be a literal IPv4:port or [IPv6]:port",
            Self::PublicUrl => "the sandbox public URL is not an absolute http(s) URL",
            Self::Credentials => "a URL must not carry credentials",
            Self::NotOrigin => {
                "the sandbox public URL must be an origin (no path, query or fragment)"
            }
            Self::PublicUrlRequired => {
                "a sandbox public URL is required when the listener or the host is not loopback"
            }
            Self::SameOrigin => "the sandbox origin must differ from the host origin",
            Self::InsecureScheme => "use https for both origins unless both are loopback",
        })
    }
}

impl WireError for SandboxConfigError {
    fn code(&self) -> ErrorCode {
        ErrorCode::InvalidRequest
    }
}

#[cfg(feature = "std")]
impl std::error::Error for SandboxConfigError {}
