//! An ASCII-only stand-in for the `url` crate, patched into the probe
//! firmware's build (`embedded/Cargo.toml`, `[patch.crates-io]`) and nowhere
//! else: the host build and its lock file keep the real `url`.
//!
//! It owns what the core asks of `url`: [`Url::parse`] of an absolute URL,
//! the accessors the core reads (serialization, scheme, userinfo, [`Host`],
//! port, path, query, fragment) and the ASCII serialization of its
//! [`Origin`]. It parses only the plain shape of an absolute URL with a
//! special scheme that has a tuple origin (`http`, `https`, `ws`, `wss`,
//! `ftp`), where the WHATWG URL Standard's basic URL parser has nothing to
//! repair or encode:
//!
//! - the scheme, in any case, then exactly `//` and a non-empty authority;
//! - userinfo of unreserved characters, sub-delimiters other than `;` and
//!   `=`, and `%` (nothing the userinfo percent-encode set would encode);
//! - a host that is either an IPv6 address in brackets, written with hex
//!   pieces and at most one `::` (no embedded IPv4 form), or a domain of
//!   ASCII letters, digits, `-`, `_` and single dots (a trailing dot
//!   allowed) with no `xn--` label; a domain whose last label starts with a
//!   digit must be an IPv4 address in dotted decimal, four numbers without
//!   leading zeros and no trailing dot;
//! - a port of one to five digits, at most 65535;
//! - a path, query and fragment of RFC 3986 characters that the path, the
//!   special-query and the fragment percent-encode sets leave alone (no `'`
//!   in the query, no `#` after the fragment's start), with `.` and `..`
//!   segments resolved as the standard's path state does, no `%2e` in the
//!   path, and no `..` in a path with a Windows drive letter segment (`C:`,
//!   which `url` keeps where the standard would remove it).
//!
//! On such input the standard's steps (scheme and host lowercased, *host
//! parsing* to a domain or an IPv4 or IPv6 address, the scheme's default
//! port dropped, an empty path made `/`, dot segments removed) give a URL
//! whose *URL serializing* this crate reproduces, and every accessor answers
//! what `url` 2.5.8 answers. **Everything else is refused**: percent-encoded
//! or internationalised hosts (in Unicode or `xn--` form), IPv4 addresses in
//! any other form (`0x7f.1`, `127.1`), backslashes, tabs, newlines, spaces
//! and controls (which `url` strips, trims or rewrites), characters the
//! percent-encode sets would encode, `%2e` dot segments, `..` next to a
//! drive letter, empty ports, any
//! other scheme (`file`, `mailto`, `javascript`, custom schemes) and
//! relative references. The rule is the one of the `idna` stand-in: **it
//! may refuse more than `url`, never answer differently**, so a guard
//! built on it can only say no more often.
//!
//! `tests/differential.rs` runs this crate against the real `url` on the
//! host.

#![no_std]

extern crate alloc;

use alloc::string::String;
use core::fmt;
use core::net::{Ipv4Addr, Ipv6Addr};

/// Why [`Url::parse`] refused its input: `url` would refuse it too, or it is
/// outside what this stand-in parses (the module documentation lists both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ParseError {}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("URL refused (firmware parses plain ASCII URLs only)")
    }
}

impl core::error::Error for ParseError {}

/// The host of a URL, as the URL Standard's *host parsing* names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Host<S = String> {
    /// A domain, lowercased ASCII.
    Domain(S),
    /// An IPv4 address.
    Ipv4(Ipv4Addr),
    /// An IPv6 address (written in brackets in the URL).
    Ipv6(Ipv6Addr),
}

/// The origin of a URL with a special scheme (the URL Standard's tuple
/// origin: scheme, host, port).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Origin {
    /// `scheme://host[:port]`, the port only when it is not the default.
    serialization: String,
}

impl Origin {
    /// The origin's ASCII serialization (HTML's *serialization of an
    /// origin*): `scheme://host`, then `:port` unless it is the scheme's
    /// default.
    #[must_use]
    pub fn ascii_serialization(&self) -> String {
        self.serialization.clone()
    }
}

/// An absolute URL, kept as its serialization with the offsets of its parts.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Url {
    /// The URL Standard's *URL serializing* of the parsed URL.
    serialization: String,
    /// Where the scheme's `:` is.
    scheme_end: usize,
    /// Where the username ends.
    username_end: usize,
    /// The password's range, when there is a non-empty one.
    password: Option<(usize, usize)>,
    /// Where the host starts.
    host_start: usize,
    /// Where the host ends.
    host_end: usize,
    /// What kind of host it is (the domain text is the range above).
    host: Host<()>,
    /// The port, unless absent or the scheme's default.
    port: Option<u16>,
    /// The scheme's default port.
    default_port: u16,
    /// Where the path starts (its `/`).
    path_start: usize,
    /// Where the query's `?` is, if there is a query.
    query_start: Option<usize>,
    /// Where the fragment's `#` is, if there is a fragment.
    fragment_start: Option<usize>,
}

/// The special schemes with a tuple origin, and their default ports.
const SCHEMES: [(&str, u16); 5] = [
    ("http", 80),
    ("https", 443),
    ("ws", 80),
    ("wss", 443),
    ("ftp", 21),
];

/// The bytes `from..=to`, as a set.
const fn range(from: u8, to: u8) -> u128 {
    ((1u128 << to) << 1) - (1u128 << from)
}

/// The bytes of `list`, as a set.
const fn set(list: &[u8]) -> u128 {
    let mut bits = 0;
    let mut i = 0;
    while i < list.len() {
        bits |= 1 << list[i];
        i += 1;
    }
    bits
}

/// ASCII letters and digits.
const ALNUM: u128 = range(b'0', b'9') | range(b'A', b'Z') | range(b'a', b'z');
/// What a domain may hold (upper case is lowercased).
const HOST: u128 = ALNUM | set(b"-._");
/// What a username or password may hold: nothing the userinfo
/// percent-encode set names.
const USERINFO: u128 = ALNUM | set(b"-._~!$&'()*+,%");
/// What a path segment may hold: RFC 3986 `pchar`, which the path
/// percent-encode set leaves alone.
const PATH: u128 = USERINFO | set(b";=:@");
/// What a query may hold: RFC 3986 `query` without `'`, which the special-
/// query percent-encode set encodes.
const QUERY: u128 = (PATH | set(b"/?")) & !set(b"'");
/// What a fragment may hold: RFC 3986 `fragment`.
const FRAGMENT: u128 = PATH | set(b"/?");

/// Whether every byte of `s` is in `set` (so is ASCII).
fn all_in(s: &str, set: u128) -> bool {
    s.bytes().all(|b| b < 0x80 && set & (1 << b) != 0)
}

impl Url {
    /// Parses an absolute URL, as the URL Standard's *basic URL parser*
    /// without a base does, or refuses it (see the module documentation for
    /// what this stand-in refuses beyond what the standard refuses).
    ///
    /// # Errors
    ///
    /// [`ParseError`] when the input is refused.
    pub fn parse(input: &str) -> Result<Self, ParseError> {
        let err = ParseError {};
        let (scheme_in, rest) = input.split_once(':').ok_or(err)?;
        let &(scheme, default_port) = SCHEMES
            .iter()
            .find(|(s, _)| s.eq_ignore_ascii_case(scheme_in))
            .ok_or(err)?;
        // Special schemes skip any number of slashes (and backslashes) here;
        // only the plain `//` is kept.
        let rest = rest.strip_prefix("//").ok_or(err)?;
        let (authority, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
        let (userinfo, host_port) = authority.rsplit_once('@').unwrap_or(("", authority));
        let (username, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
        if !all_in(username, USERINFO) || !all_in(password, USERINFO) {
            return Err(err);
        }
        let (host_in, port_in) = match host_port.strip_prefix('[') {
            Some(v6) => {
                let (addr, after) = v6.split_once(']').ok_or(err)?;
                let port = match after {
                    "" => None,
                    _ => Some(after.strip_prefix(':').ok_or(err)?),
                };
                (HostIn::V6(parse_ipv6(addr).ok_or(err)?), port)
            }
            None => match host_port.split_once(':') {
                Some((h, p)) => (domain_or_ipv4(h).ok_or(err)?, Some(p)),
                None => (domain_or_ipv4(host_port).ok_or(err)?, None),
            },
        };
        let port = match port_in {
            None => None,
            Some(p) => Some(parse_port(p).ok_or(err)?).filter(|&p| p != default_port),
        };
        let (before_fragment, fragment) = match tail.split_once('#') {
            Some((b, f)) => (b, Some(f)),
            None => (tail, None),
        };
        let (path, query) = match before_fragment.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (before_fragment, None),
        };
        if !all_in(path, PATH | set(b"/"))
            || has_encoded_dot(path)
            || has_drive_letter_and_double_dot(path)
            || !query.is_none_or(|q| all_in(q, QUERY))
            || !fragment.is_none_or(|f| all_in(f, FRAGMENT))
        {
            return Err(err);
        }

        // URL serializing: scheme, "//", userinfo, host, port, path, query
        // and fragment.
        let mut s = String::with_capacity(input.len() + 1);
        s.push_str(scheme);
        let scheme_end = s.len();
        s.push_str("://");
        s.push_str(username);
        let username_end = s.len();
        let mut password_range = None;
        if !password.is_empty() {
            s.push(':');
            password_range = Some((s.len(), s.len() + password.len()));
            s.push_str(password);
        }
        if !username.is_empty() || !password.is_empty() {
            s.push('@');
        }
        let host_start = s.len();
        let host = match host_in {
            HostIn::Domain(d) => {
                s.extend(d.bytes().map(|b| char::from(b.to_ascii_lowercase())));
                Host::Domain(())
            }
            HostIn::V4(a, text) => {
                // Only dotted decimal without leading zeros is accepted,
                // which is already the IPv4 serializer's form.
                s.push_str(text);
                Host::Ipv4(a)
            }
            HostIn::V6(a) => {
                s.push('[');
                write_ipv6(&mut s, a);
                s.push(']');
                Host::Ipv6(a)
            }
        };
        let host_end = s.len();
        if let Some(p) = port {
            s.push(':');
            write_decimal(&mut s, p);
        }
        let path_start = s.len();
        push_path(&mut s, path);
        let query_start = query.map(|q| {
            let at = s.len();
            s.push('?');
            s.push_str(q);
            at
        });
        let fragment_start = fragment.map(|f| {
            let at = s.len();
            s.push('#');
            s.push_str(f);
            at
        });
        Ok(Self {
            serialization: s,
            scheme_end,
            username_end,
            password: password_range,
            host_start,
            host_end,
            host,
            port,
            default_port,
            path_start,
            query_start,
            fragment_start,
        })
    }

    /// The serialization of this URL.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.serialization
    }

    /// The scheme, lowercase, without its `:`.
    #[must_use]
    pub fn scheme(&self) -> &str {
        &self.serialization[..self.scheme_end]
    }

    /// The username (empty when there is none).
    #[must_use]
    pub fn username(&self) -> &str {
        &self.serialization[self.scheme_end + 3..self.username_end]
    }

    /// The password, if there is a non-empty one.
    #[must_use]
    pub fn password(&self) -> Option<&str> {
        self.password
            .map(|(from, to)| &self.serialization[from..to])
    }

    /// The host as serialized (an IPv6 address with its brackets); every
    /// URL this crate accepts has one.
    #[must_use]
    pub fn host_str(&self) -> Option<&str> {
        Some(&self.serialization[self.host_start..self.host_end])
    }

    /// The host, parsed.
    #[must_use]
    pub fn host(&self) -> Option<Host<&str>> {
        Some(match self.host {
            Host::Domain(()) => Host::Domain(&self.serialization[self.host_start..self.host_end]),
            Host::Ipv4(a) => Host::Ipv4(a),
            Host::Ipv6(a) => Host::Ipv6(a),
        })
    }

    /// The port, unless it is absent or the scheme's default.
    #[must_use]
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// The port, or the scheme's default port.
    #[must_use]
    pub fn port_or_known_default(&self) -> Option<u16> {
        Some(self.port.unwrap_or(self.default_port))
    }

    /// The path, starting with `/`.
    #[must_use]
    pub fn path(&self) -> &str {
        let end = self
            .query_start
            .or(self.fragment_start)
            .unwrap_or(self.serialization.len());
        &self.serialization[self.path_start..end]
    }

    /// The query, without its `?`.
    #[must_use]
    pub fn query(&self) -> Option<&str> {
        let end = self.fragment_start.unwrap_or(self.serialization.len());
        self.query_start.map(|at| &self.serialization[at + 1..end])
    }

    /// The fragment, without its `#`.
    #[must_use]
    pub fn fragment(&self) -> Option<&str> {
        self.fragment_start.map(|at| &self.serialization[at + 1..])
    }

    /// Whether this URL has an opaque path: never, for the special schemes
    /// this crate accepts.
    #[must_use]
    pub fn cannot_be_a_base(&self) -> bool {
        false
    }

    /// The origin: scheme, host and port.
    #[must_use]
    pub fn origin(&self) -> Origin {
        let end = self.path_start;
        let mut serialization = String::with_capacity(self.scheme_end + 3 + end - self.host_start);
        serialization.push_str(&self.serialization[..self.scheme_end + 3]);
        serialization.push_str(&self.serialization[self.host_start..end]);
        Origin { serialization }
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.serialization)
    }
}

impl From<Url> for String {
    fn from(url: Url) -> Self {
        url.serialization
    }
}

/// A host as read from the input.
enum HostIn<'a> {
    /// A domain, not yet lowercased.
    Domain(&'a str),
    /// An IPv4 address, and its text: dotted decimal, as serialized.
    V4(Ipv4Addr, &'a str),
    /// An IPv6 address.
    V6(Ipv6Addr),
}

/// A domain, or an IPv4 address when the last label starts with a digit
/// (the standard's *ends in a number* test can only hold then). `None`
/// refuses: empty labels but a trailing one, characters outside [`HOST`],
/// `xn--` labels, and any IPv4 form but four canonical decimal numbers.
fn domain_or_ipv4(host: &str) -> Option<HostIn<'_>> {
    if host.is_empty()
        || host.starts_with('.')
        || host.as_bytes().windows(2).any(|w| w == b"..")
        || !all_in(host, HOST)
    {
        return None;
    }
    let labels = host.strip_suffix('.').unwrap_or(host);
    if labels
        .split('.')
        .any(|l| l.len() >= 4 && l[..4].eq_ignore_ascii_case("xn--"))
    {
        return None;
    }
    let last = labels.rsplit('.').next().unwrap_or(labels);
    if !last.starts_with(|c: char| c.is_ascii_digit()) {
        return Some(HostIn::Domain(host));
    }
    let mut octets = [0u8; 4];
    let mut parts = host.split('.');
    for octet in &mut octets {
        *octet = parse_decimal(parts.next()?, 3)?.try_into().ok()?;
    }
    parts
        .next()
        .is_none()
        .then(|| HostIn::V4(Ipv4Addr::from(octets), host))
}

/// A decimal number of one to `max_len` digits without a leading zero (but
/// `0` itself).
fn parse_decimal(s: &str, max_len: usize) -> Option<u32> {
    if s.is_empty() || s.len() > max_len || (s.len() > 1 && s.starts_with('0')) {
        return None;
    }
    s.bytes().try_fold(0u32, |n, b| {
        b.is_ascii_digit().then(|| n * 10 + u32::from(b - b'0'))
    })
}

/// A port: one to five digits (leading zeros allowed, as the standard's
/// port state allows them), at most 65535.
fn parse_port(s: &str) -> Option<u16> {
    if s.is_empty() || s.len() > 5 {
        return None;
    }
    let n = s.bytes().try_fold(0u32, |n, b| {
        b.is_ascii_digit().then(|| n * 10 + u32::from(b - b'0'))
    })?;
    u16::try_from(n).ok()
}

/// The standard's *IPv6 parser*, restricted to hex pieces of one to four
/// digits separated by `:`, with at most one `::` standing for at least
/// one zero piece. No embedded IPv4 form.
fn parse_ipv6(s: &str) -> Option<Ipv6Addr> {
    let piece = |p: &str| {
        if p.is_empty() || p.len() > 4 {
            return None;
        }
        p.bytes().try_fold(0u16, |n, b| {
            char::from(b)
                .to_digit(16)
                .map(|d| (n << 4) | u16::try_from(d).unwrap_or(0))
        })
    };
    let mut pieces = [0u16; 8];
    let fill = |list: &str, out: &mut [u16]| -> Option<usize> {
        if list.is_empty() {
            return Some(0);
        }
        let mut n = 0;
        for p in list.split(':') {
            *out.get_mut(n)? = piece(p)?;
            n += 1;
        }
        Some(n)
    };
    let double = s.as_bytes().windows(2).position(|w| w == b"::");
    match double.map(|at| (&s[..at], &s[at + 2..])) {
        None => (fill(s, &mut pieces)? == 8).then_some(())?,
        Some((head, tail)) => {
            let mut after = [0u16; 7];
            let h = fill(head, &mut pieces[..7])?;
            let t = fill(tail, &mut after)?;
            if h + t > 7 {
                return None;
            }
            pieces[8 - t..].copy_from_slice(&after[..t]);
        }
    }
    Some(Ipv6Addr::from(pieces))
}

/// The standard's *IPv6 serializer*: lowercase hex pieces without leading
/// zeros, the first longest run of two or more zero pieces written `::`.
fn write_ipv6(s: &mut String, addr: Ipv6Addr) {
    let pieces = addr.segments();
    let (mut best, mut best_len, mut run) = (8, 1, 0);
    for (i, &p) in pieces.iter().enumerate() {
        run = if p == 0 { run + 1 } else { 0 };
        if run > best_len {
            best_len = run;
            best = i + 1 - run;
        }
    }
    let mut i = 0;
    while i < 8 {
        if i == best {
            s.push_str(if i == 0 { "::" } else { ":" });
            i += best_len;
            continue;
        }
        let p = pieces[i];
        let mut started = false;
        for shift in [12, 8, 4, 0] {
            let d = (p >> shift) & 0xf;
            if d != 0 || started || shift == 0 {
                started = true;
                s.push(char::from(b"0123456789abcdef"[usize::from(d)]));
            }
        }
        if i < 7 {
            s.push(':');
        }
        i += 1;
    }
}

/// `n` in decimal.
fn write_decimal(s: &mut String, n: u16) {
    let mut digits = [0u8; 5];
    let mut at = digits.len();
    let mut n = n;
    loop {
        at -= 1;
        digits[at] = b'0' + u8::try_from(n % 10).unwrap_or(0);
        n /= 10;
        if n == 0 {
            break;
        }
    }
    s.extend(digits[at..].iter().copied().map(char::from));
}

/// Whether `path` holds `%2e` in any case: the standard reads it as a dot in
/// dot segments, which this crate leaves to refusal.
fn has_encoded_dot(path: &str) -> bool {
    path.as_bytes()
        .windows(3)
        .any(|w| w[0] == b'%' && w[1] == b'2' && w[2].eq_ignore_ascii_case(&b'e'))
}

/// Whether `path` has both a `..` segment and a segment that is a Windows
/// drive letter (`C:`): `url` never removes such a segment when it resolves
/// `..`, even outside `file` URLs, which this crate leaves to refusal.
fn has_drive_letter_and_double_dot(path: &str) -> bool {
    let mut segments = path.split('/');
    segments.clone().any(|s| s == "..")
        && segments.any(|s| matches!(s.as_bytes(), [a, b':'] if a.is_ascii_alphabetic()))
}

/// Appends the path as the standard's *path state* leaves it for a special
/// URL: an empty path becomes `/`; a `..` segment removes the one before it
/// and a `.` segment goes, and either leaves an empty last segment (a
/// trailing `/`) when it ends the path.
fn push_path(s: &mut String, path: &str) {
    let start = s.len();
    let Some(segments) = path.strip_prefix('/') else {
        // The input's path is empty here (it starts at `/`, `?`, `#` or
        // the end).
        s.push('/');
        return;
    };
    let mut segments = segments.split('/').peekable();
    while let Some(segment) = segments.next() {
        let last = segments.peek().is_none();
        match segment {
            ".." => {
                if let Some(i) = s[start..].rfind('/') {
                    s.truncate(start + i);
                }
                if last {
                    s.push('/');
                }
            }
            "." => {
                if last {
                    s.push('/');
                }
            }
            _ => {
                s.push('/');
                s.push_str(segment);
            }
        }
    }
}
