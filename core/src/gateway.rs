//! The resource gateway: one MCP server in front of several downstream MCP
//! servers ("sources"), exposing their resources — notably MCP Apps UI
//! resources (`ui://…`, MIME `text/html;profile=mcp-app`) — under URIs that
//! are unique across sources and map back exactly to `(source, uri)`.
//!
//! URI forms (RFC 3986 syntax; `ui://` is the MCP Apps scheme):
//!
//! | downstream | gateway |
//! |---|---|
//! | `ui://<rest>` | `ui://<authority>/<source>/<rest>` (hosts that only know `ui://` keep working) |
//! | anything else | `<scheme>://<source>/<downstream>` (default `portcullis+mcp`) |
//!
//! A source id never contains `/`, so the first `/` after it ends it and the
//! mapping is injective; the two forms have distinct prefixes, and a
//! downstream `ui://` URI only ever takes the first form, so every gateway
//! URI has exactly one preimage.
//!
//! **No dot segments.** A gateway URI is a hierarchical URI, and a WHATWG URL
//! parser (what a browser host runs) removes `.` and `..` path segments
//! (`%2e` spellings included): `ui://portcullis/evil/../good/main.html`
//! would become another source's page. So a downstream URI whose gateway
//! form would have such a segment in its path is refused by
//! [`Gateway::encode`], and a gateway URI with one by [`Gateway::decode`].
//!
//! The rewriters take and return `serde_json::Value`s of MCP messages. They
//! rewrite the MCP Apps and Apps SDK metadata keys (`_meta.ui.resourceUri`,
//! `_meta["ui/resourceUri"]`, `_meta["openai/outputTemplate"]`), resource
//! URIs in listings and contents, and exact downstream URIs inside text
//! resources — only whole URIs at token boundaries, so `ui://app/a.html` is
//! not rewritten inside `ui://app/a.html2`. Tool names are never changed and
//! binary (`blob`) bodies are never touched. A URI that cannot be mapped is
//! never passed on unmapped: a listing leaves its entry out, and a tool or
//! read result that names one is refused ([`GatewayEncodeError`]).
//!
//! **Cost.** Rewriting a text is linear in its length, whatever the number
//! of known URIs ([`KnownUris`]: one pass forward, and from the end of each
//! token at most one walk back over that token through the sorted, reversed
//! URIs).

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde_json::{Map, Value};

use crate::error::{ErrorCode, WireError};
use crate::redirect::is_invisible;

/// The id of a downstream source: 1–63 characters of `[a-z0-9-]`, starting
/// with a letter or digit (a DNS label, so no URI parser changes it).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceId(heapless::String<63>);

impl SourceId {
    /// Checks and wraps a source id.
    pub fn new(id: &str) -> Result<Self, SourceIdError> {
        let bytes = id.as_bytes();
        let Some(&first) = bytes.first() else {
            return Err(SourceIdError::Empty);
        };
        let valid = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-';
        if !bytes.iter().all(|&c| valid(c)) || first == b'-' {
            return Err(SourceIdError::Character);
        }
        heapless::String::try_from(id)
            .map(Self)
            .map_err(|_| SourceIdError::TooLong)
    }

    /// The id.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SourceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A source id was refused.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SourceIdError {
    /// The id is empty.
    Empty,
    /// The id is longer than 63 bytes.
    TooLong,
    /// The id has a character outside `[a-z0-9-]` or starts with `-`.
    Character,
}

impl fmt::Display for SourceIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Empty => "empty source id",
            Self::TooLong => "source id longer than 63 bytes",
            Self::Character => "source id must be [a-z0-9-] and not start with `-`",
        })
    }
}

impl WireError for SourceIdError {
    fn code(&self) -> ErrorCode {
        ErrorCode::InvalidLink
    }
}

#[cfg(feature = "std")]
impl std::error::Error for SourceIdError {}

/// The gateway's URI mapping and rewriters.
///
/// ```
/// use portcullis_core::gateway::{Gateway, SourceId};
///
/// let gateway = Gateway::default();
/// let github = SourceId::new("github").unwrap();
/// let uri = gateway.encode(&github, "ui://app/show_issue.html").unwrap();
/// assert_eq!(uri, "ui://portcullis/github/app/show_issue.html");
/// assert_eq!(gateway.decode(&uri).unwrap(), (github.clone(), "ui://app/show_issue.html".into()));
///
/// let other = gateway.encode(&github, "file:///notes.md").unwrap();
/// assert_eq!(other, "portcullis+mcp://github/file:///notes.md");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gateway {
    ui_prefix: String,
    other_prefix: String,
}

impl Default for Gateway {
    fn default() -> Self {
        Self {
            ui_prefix: alloc::format!("ui://{}/", Self::DEFAULT_UI_AUTHORITY),
            other_prefix: alloc::format!("{}://", Self::DEFAULT_SCHEME),
        }
    }
}

impl Gateway {
    /// The authority of gateway `ui://` URIs by default.
    pub const DEFAULT_UI_AUTHORITY: &'static str = "portcullis";
    /// The scheme of gateway URIs for non-`ui://` resources by default.
    pub const DEFAULT_SCHEME: &'static str = "portcullis+mcp";
    /// The longest downstream URI, in bytes.
    pub const MAX_URI_LEN: usize = 8 * 1024;

    /// A gateway with its own `ui://` authority (`[a-z0-9-]+`) and scheme
    /// for other resources (a lower-case RFC 3986 scheme other than `ui`).
    pub fn with_names(ui_authority: &str, scheme: &str) -> Result<Self, GatewayConfigError> {
        let label = |s: &str| {
            !s.is_empty()
                && s.len() <= 63
                && s.bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        };
        if !label(ui_authority) {
            return Err(GatewayConfigError::UiAuthority);
        }
        let scheme_ok = scheme
            .as_bytes()
            .first()
            .is_some_and(u8::is_ascii_lowercase)
            && scheme.len() <= 32
            && scheme.bytes().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'+' | b'-' | b'.')
            })
            && scheme != "ui";
        if !scheme_ok {
            return Err(GatewayConfigError::Scheme);
        }
        Ok(Self {
            ui_prefix: alloc::format!("ui://{ui_authority}/"),
            other_prefix: alloc::format!("{scheme}://"),
        })
    }

    /// The gateway URI of `uri` on `source`.
    pub fn encode(&self, source: &SourceId, uri: &str) -> Result<String, GatewayEncodeError> {
        check_uri(uri)?;
        let mut out = String::with_capacity(self.ui_prefix.len() + source.0.len() + uri.len() + 1);
        if let Some(rest) = uri.strip_prefix("ui://") {
            out.push_str(&self.ui_prefix);
            out.push_str(&source.0);
            out.push('/');
            out.push_str(rest);
        } else {
            out.push_str(&self.other_prefix);
            out.push_str(&source.0);
            out.push('/');
            out.push_str(uri);
        }
        Ok(out)
    }

    /// The `(source, downstream uri)` a gateway URI stands for. Only URIs
    /// [`Gateway::encode`] produces are accepted.
    pub fn decode(&self, gateway_uri: &str) -> Result<(SourceId, String), GatewayDecodeError> {
        let (ui, rest) = if let Some(rest) = gateway_uri.strip_prefix(self.ui_prefix.as_str()) {
            (true, rest)
        } else if let Some(rest) = gateway_uri.strip_prefix(self.other_prefix.as_str()) {
            (false, rest)
        } else {
            return Err(GatewayDecodeError::NotGateway);
        };
        let (source, rest) = rest
            .split_once('/')
            .ok_or(GatewayDecodeError::MissingPath)?;
        let source = SourceId::new(source).map_err(GatewayDecodeError::SourceId)?;
        let uri = if ui {
            let mut uri = String::with_capacity(rest.len() + 5);
            uri.push_str("ui://");
            uri.push_str(rest);
            uri
        } else if rest.starts_with("ui://") {
            // `encode` writes downstream `ui://` URIs in the `ui://` form.
            return Err(GatewayDecodeError::NotCanonical);
        } else {
            String::from(rest)
        };
        check_uri(&uri).map_err(GatewayDecodeError::Uri)?;
        Ok((source, uri))
    }

    /// Rewrites the UI metadata of one tool descriptor (`tools/list` entry).
    /// The tool's name and every other field are left alone.
    #[must_use]
    pub fn rewrite_tool(&self, source: &SourceId, mut tool: Value) -> Value {
        if let Some(meta) = tool.get_mut("_meta").and_then(Value::as_object_mut) {
            self.rewrite_meta(source, meta);
        }
        tool
    }

    /// Rewrites every tool of a `tools/list` result.
    #[must_use]
    pub fn rewrite_tools_list(&self, source: &SourceId, mut result: Value) -> Value {
        if let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) {
            for tool in tools {
                let taken = core::mem::take(tool);
                *tool = self.rewrite_tool(source, taken);
            }
        }
        result
    }

    /// Rewrites a `tools/call` result: its UI metadata and the URIs of
    /// embedded resources and resource links in its content (their text is
    /// left alone: rewrite it with [`Gateway::rewrite_text`] if needed).
    ///
    /// A URI there that [`Gateway::encode`] refuses is an error: the result
    /// cannot be passed on without it, nor with it unmapped (it could name
    /// another source's resource).
    pub fn rewrite_tool_result(
        &self,
        source: &SourceId,
        mut result: Value,
    ) -> Result<Value, GatewayEncodeError> {
        if let Some(meta) = result.get_mut("_meta").and_then(Value::as_object_mut) {
            self.map_meta(source, meta)?;
        }
        if let Some(content) = result.get_mut("content").and_then(Value::as_array_mut) {
            for item in content {
                match item.get("type").and_then(Value::as_str) {
                    Some("resource_link") => self.map_field(source, item, "uri")?,
                    Some("resource") => {
                        if let Some(resource) = item.get_mut("resource") {
                            self.map_field(source, resource, "uri")?;
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(result)
    }

    /// Rewrites a `resources/list` or `resources/templates/list` result:
    /// each `uri` and `uriTemplate`. An entry whose URI [`Gateway::encode`]
    /// refuses (or that has none) is left out, so one bad entry never
    /// spoils the listing.
    #[must_use]
    pub fn rewrite_resources_list(&self, source: &SourceId, mut result: Value) -> Value {
        for (list, field) in [("resources", "uri"), ("resourceTemplates", "uriTemplate")] {
            if let Some(items) = result.get_mut(list).and_then(Value::as_array_mut) {
                items.retain_mut(|item| self.map_field(source, item, field).is_ok());
            }
        }
        result
    }

    /// Rewrites a `resources/read` result: each content's `uri`, and in text
    /// contents every whole occurrence of one of `known` (the source's
    /// downstream resource URIs, e.g. from `resources/list`) or of one of
    /// the contents' own URIs. `blob` contents keep their bytes. A content
    /// URI that [`Gateway::encode`] refuses is an error.
    pub fn rewrite_read_result(
        &self,
        source: &SourceId,
        mut result: Value,
        known: &[&str],
    ) -> Result<Value, GatewayEncodeError> {
        let Some(contents) = result.get_mut("contents").and_then(Value::as_array_mut) else {
            return Ok(result);
        };
        let own = contents
            .iter()
            .filter_map(|item| item.get("uri").and_then(Value::as_str))
            .map(String::from)
            .collect::<Vec<_>>();
        let uris = self.known_uris(
            source,
            known.iter().copied().chain(own.iter().map(String::as_str)),
        );
        for item in contents {
            if let Some(Value::String(text)) = item.get_mut("text") {
                *text = uris.rewrite(text);
            }
            self.map_field(source, item, "uri")?;
        }
        Ok(result)
    }

    /// Replaces every whole occurrence of a `known` downstream URI in `text`
    /// by its gateway URI (see [`KnownUris::rewrite`] for what counts as an
    /// occurrence). To rewrite several texts with the same URIs, prepare
    /// them once with [`Gateway::known_uris`].
    #[must_use]
    pub fn rewrite_text(&self, source: &SourceId, text: &str, known: &[&str]) -> String {
        self.known_uris(source, known.iter().copied()).rewrite(text)
    }

    /// `source`'s downstream URIs `known`, with their gateway URIs, prepared
    /// for rewriting texts ([`KnownUris::rewrite`]). URIs that
    /// [`Gateway::encode`] refuses are left out, and so are URIs with a
    /// character that ends a token (see [`KnownUris::rewrite`]): such a URI
    /// could never be told apart from its surroundings.
    pub fn known_uris<'a>(
        &self,
        source: &SourceId,
        known: impl IntoIterator<Item = &'a str>,
    ) -> KnownUris {
        let mut entries: Vec<(Vec<u8>, String)> = known
            .into_iter()
            .filter(|u| !u.bytes().any(right_boundary))
            .filter_map(|u| {
                let gateway = self.encode(source, u).ok()?;
                Some((u.bytes().rev().collect(), gateway))
            })
            .collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        entries.dedup_by(|a, b| a.0 == b.0);
        let longest = entries.iter().map(|(r, _)| r.len()).max().unwrap_or(0);
        KnownUris { entries, longest }
    }

    fn rewrite_meta(&self, source: &SourceId, meta: &mut Map<String, Value>) {
        if let Some(ui) = meta.get_mut("ui") {
            self.rewrite_field(source, ui, "resourceUri");
        }
        for key in ["ui/resourceUri", "openai/outputTemplate"] {
            self.rewrite_key(source, meta, key);
        }
    }

    /// [`Gateway::rewrite_meta`], failing on a URI it cannot map.
    fn map_meta(
        &self,
        source: &SourceId,
        meta: &mut Map<String, Value>,
    ) -> Result<(), GatewayEncodeError> {
        if let Some(ui) = meta.get_mut("ui").and_then(Value::as_object_mut) {
            self.map_key(source, ui, "resourceUri")?;
        }
        for key in ["ui/resourceUri", "openai/outputTemplate"] {
            self.map_key(source, meta, key)?;
        }
        Ok(())
    }

    /// Maps `object[key]` if it is a string, failing on a URI that
    /// [`Gateway::encode`] refuses; an object without a string there is an
    /// error too ([`GatewayEncodeError::Empty`]).
    fn map_field(
        &self,
        source: &SourceId,
        object: &mut Value,
        key: &str,
    ) -> Result<(), GatewayEncodeError> {
        let Some(Value::String(uri)) = object.get_mut(key) else {
            return Err(GatewayEncodeError::Empty);
        };
        *uri = self.encode(source, uri)?;
        Ok(())
    }

    /// Maps `map[key]` if it is a string (anything else is left alone),
    /// failing on a URI that [`Gateway::encode`] refuses.
    fn map_key(
        &self,
        source: &SourceId,
        map: &mut Map<String, Value>,
        key: &str,
    ) -> Result<(), GatewayEncodeError> {
        if let Some(Value::String(uri)) = map.get_mut(key) {
            *uri = self.encode(source, uri)?;
        }
        Ok(())
    }

    fn rewrite_field(&self, source: &SourceId, object: &mut Value, key: &str) {
        if let Some(map) = object.as_object_mut() {
            self.rewrite_key(source, map, key);
        }
    }

    /// Rewrites a string entry; one the gateway cannot encode is removed, so
    /// a downstream URI is never exposed unmapped (where it could name a
    /// resource of another source).
    fn rewrite_key(&self, source: &SourceId, map: &mut Map<String, Value>, key: &str) {
        let Some(Value::String(uri)) = map.get(key) else {
            return;
        };
        match self.encode(source, uri) {
            Ok(gateway_uri) => {
                map.insert(key.into(), Value::String(gateway_uri));
            }
            Err(_) => {
                map.remove(key);
            }
        }
    }
}

/// A source's known downstream URIs with their gateway URIs, prepared by
/// [`Gateway::known_uris`] for rewriting texts in time linear in the text.
#[derive(Clone, Debug, Default)]
pub struct KnownUris {
    /// Each URI's bytes reversed, sorted and deduplicated, with its
    /// gateway URI.
    entries: Vec<(Vec<u8>, String)>,
    /// The longest URI's length.
    longest: usize,
}

impl KnownUris {
    /// How many URIs there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Replaces every whole occurrence of a known URI in `text` by its
    /// gateway URI.
    ///
    /// An occurrence counts only at token boundaries: it starts the text or
    /// follows whitespace, a control character or one of `"'`` ` ``<>([{=`,
    /// and it ends the text or is followed by whitespace, a control character
    /// or one of `"'`` ` ``<>)]}\`. Where several known URIs end at the same
    /// place, the longest wins.
    ///
    /// As no known URI holds a character that ends a token, an occurrence
    /// ends where the token does: so one pass forward finds each token's
    /// end, and one walk back from it through the reversed URIs (narrowing a
    /// range of them by binary search, and stopping where none is left)
    /// finds the longest that ends there. Each walk stays inside its token,
    /// so the whole costs time linear in the text, however many URIs there
    /// are.
    #[must_use]
    pub fn rewrite(&self, text: &str) -> String {
        self.rewrite_counting(text).0
    }

    /// [`KnownUris::rewrite`], and how many bytes its walks back read.
    fn rewrite_counting(&self, text: &str) -> (String, usize) {
        let mut steps = 0;
        if self.entries.is_empty() {
            return (text.into(), steps);
        }
        let b = text.as_bytes();
        let mut out = String::new();
        let mut last = 0;
        for end in (0..=b.len()).filter(|&e| e == b.len() || right_boundary(b[e])) {
            if let Some((start, gateway)) = self.ending_at(b, end, &mut steps) {
                if out.is_empty() {
                    out.reserve(text.len() + 64);
                }
                out.push_str(&text[last..start]);
                out.push_str(gateway);
                last = end;
            }
        }
        if last == 0 {
            return (text.into(), steps);
        }
        out.push_str(&text[last..]);
        (out, steps)
    }

    /// The longest known URI that is `b[start..end]` for some `start` at a
    /// left boundary, and its gateway URI; `steps` counts the bytes read.
    fn ending_at(&self, b: &[u8], end: usize, steps: &mut usize) -> Option<(usize, &str)> {
        let (mut lo, mut hi) = (0, self.entries.len());
        let mut found = None;
        let mut depth = 0;
        while depth < self.longest && depth < end {
            let c = b[end - depth - 1];
            *steps += 1;
            // Within `lo..hi` every entry starts with the `depth` bytes seen
            // so far; one of exactly that length sorts first, the others by
            // their next byte.
            let range = &self.entries[lo..hi];
            let from = range.partition_point(|(r, _)| r.len() <= depth || r[depth] < c);
            let to = from + range[from..].partition_point(|(r, _)| r[depth] == c);
            if from == to {
                break;
            }
            (lo, hi) = (lo + from, lo + to);
            depth += 1;
            let start = end - depth;
            if self.entries[lo].0.len() == depth && (start == 0 || left_boundary(b[start - 1])) {
                found = Some((start, self.entries[lo].1.as_str()));
            }
        }
        found
    }
}

const fn left_boundary(c: u8) -> bool {
    c <= b' '
        || c == 0x7f
        || matches!(
            c,
            b'"' | b'\'' | b'`' | b'<' | b'>' | b'(' | b'[' | b'{' | b'='
        )
}

const fn right_boundary(c: u8) -> bool {
    c <= b' '
        || c == 0x7f
        || matches!(
            c,
            b'"' | b'\'' | b'`' | b'<' | b'>' | b')' | b']' | b'}' | b'\\'
        )
}

fn check_uri(uri: &str) -> Result<(), GatewayEncodeError> {
    if uri.is_empty() {
        return Err(GatewayEncodeError::Empty);
    }
    if uri.len() > Gateway::MAX_URI_LEN {
        return Err(GatewayEncodeError::TooLong);
    }
    if uri
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || is_invisible(c))
    {
        return Err(GatewayEncodeError::Character);
    }
    // The path of the gateway URI: for a `ui://` URI its authority becomes
    // a path segment (`ui://app/x` is `ui://portcullis/<source>/app/x`); any
    // other URI is the gateway path whole. A query or fragment ends it.
    let path = uri.strip_prefix("ui://").unwrap_or(uri);
    let path = path.split(['?', '#']).next().unwrap_or(path);
    if path.split('/').any(is_dot_segment) {
        return Err(GatewayEncodeError::DotSegment);
    }
    Ok(())
}

/// Whether a path segment is one a WHATWG URL parser removes or climbs with
/// (URL Standard, "single-dot" and "double-dot URL path segment"): `.` or
/// `..`, each dot possibly spelled `%2e` in either case.
fn is_dot_segment(segment: &str) -> bool {
    let b = segment.as_bytes();
    let dot = |x: &[u8]| x == b"." || x.eq_ignore_ascii_case(b"%2e");
    match b.len() {
        1 | 3 => dot(b),
        2 => dot(&b[..1]) && dot(&b[1..]),
        4 => dot(&b[..1]) && dot(&b[1..]) || dot(&b[..3]) && dot(&b[3..]),
        6 => dot(&b[..3]) && dot(&b[3..]),
        _ => false,
    }
}

/// A gateway name was refused.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GatewayConfigError {
    /// The `ui://` authority is not a lower-case DNS label.
    UiAuthority,
    /// The scheme is not a lower-case RFC 3986 scheme, or is `ui`.
    Scheme,
}

impl fmt::Display for GatewayConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::UiAuthority => "gateway ui:// authority must be [a-z0-9-]+",
            Self::Scheme => "gateway scheme must be a lower-case URI scheme other than `ui`",
        })
    }
}

impl WireError for GatewayConfigError {
    fn code(&self) -> ErrorCode {
        ErrorCode::InvalidLink
    }
}

#[cfg(feature = "std")]
impl std::error::Error for GatewayConfigError {}

/// A downstream URI cannot be mapped.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GatewayEncodeError {
    /// The URI is empty.
    Empty,
    /// The URI is longer than [`Gateway::MAX_URI_LEN`].
    TooLong,
    /// The URI contains whitespace, a control or an invisible character.
    Character,
    /// The gateway URI would have a `.` or `..` path segment, which a URL
    /// parser would resolve into another URI (possibly another source's).
    DotSegment,
}

impl fmt::Display for GatewayEncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Empty => "empty resource URI",
            Self::TooLong => "resource URI too long",
            Self::Character => "resource URI contains whitespace or control characters",
            Self::DotSegment => "resource URI has a `.` or `..` path segment",
        })
    }
}

impl WireError for GatewayEncodeError {
    fn code(&self) -> ErrorCode {
        ErrorCode::InvalidLink
    }
}

#[cfg(feature = "std")]
impl std::error::Error for GatewayEncodeError {}

/// A URI is not one the gateway issued.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GatewayDecodeError {
    /// The URI has neither gateway prefix.
    NotGateway,
    /// No `/` ends the source id.
    MissingPath,
    /// The source id is invalid.
    SourceId(SourceIdError),
    /// The downstream URI is one `encode` refuses.
    Uri(GatewayEncodeError),
    /// A downstream `ui://` URI in the non-`ui://` form, which `encode`
    /// never writes.
    NotCanonical,
}

impl fmt::Display for GatewayDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotGateway => f.write_str("not a gateway resource URI"),
            Self::MissingPath => f.write_str("gateway resource URI has no path after the source"),
            Self::SourceId(e) => write!(f, "gateway resource URI: {e}"),
            Self::Uri(e) => write!(f, "gateway resource URI: {e}"),
            Self::NotCanonical => f.write_str("gateway resource URI is not in canonical form"),
        }
    }
}

impl WireError for GatewayDecodeError {
    fn code(&self) -> ErrorCode {
        ErrorCode::InvalidLink
    }
}

#[cfg(feature = "std")]
impl std::error::Error for GatewayDecodeError {}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn src(id: &str) -> SourceId {
        SourceId::new(id).unwrap()
    }

    #[test]
    fn encodes_and_decodes_exactly() {
        let g = Gateway::default();
        for (uri, expect) in [
            ("ui://app/a.html", "ui://portcullis/gh/app/a.html"),
            ("ui://", "ui://portcullis/gh/"),
            ("ui://widget/x?v=1#f", "ui://portcullis/gh/widget/x?v=1#f"),
            ("UI://app/a.html", "portcullis+mcp://gh/UI://app/a.html"),
            ("https://x.com/a", "portcullis+mcp://gh/https://x.com/a"),
            (
                "ui://portcullis/other/a",
                "ui://portcullis/gh/portcullis/other/a",
            ),
            ("x", "portcullis+mcp://gh/x"),
        ] {
            let encoded = g.encode(&src("gh"), uri).unwrap();
            assert_eq!(encoded, expect);
            assert_eq!(g.decode(&encoded).unwrap(), (src("gh"), uri.into()));
        }
        let custom = Gateway::with_names("gw", "exec+mcp").unwrap();
        let encoded = custom.encode(&src("a-1"), "ui://app/a.html").unwrap();
        assert_eq!(encoded, "ui://gw/a-1/app/a.html");
        assert_eq!(g.decode(&encoded), Err(GatewayDecodeError::NotGateway));
    }

    #[test]
    fn refuses_what_it_did_not_issue() {
        let g = Gateway::default();
        assert_eq!(
            g.decode("ui://app/a.html"),
            Err(GatewayDecodeError::NotGateway)
        );
        assert_eq!(
            g.decode("ui://portcullis/gh"),
            Err(GatewayDecodeError::MissingPath)
        );
        assert_eq!(
            g.decode("ui://portcullis/G H/x"),
            Err(GatewayDecodeError::SourceId(SourceIdError::Character))
        );
        assert_eq!(
            g.decode("ui://portcullis//x"),
            Err(GatewayDecodeError::SourceId(SourceIdError::Empty))
        );
        assert_eq!(
            g.decode("portcullis+mcp://gh/"),
            Err(GatewayDecodeError::Uri(GatewayEncodeError::Empty))
        );
        assert_eq!(
            g.decode("portcullis+mcp://gh/ui://x"),
            Err(GatewayDecodeError::NotCanonical)
        );
        assert_eq!(
            g.decode("portcullis+mcp://gh/a b"),
            Err(GatewayDecodeError::Uri(GatewayEncodeError::Character))
        );
        assert_eq!(g.encode(&src("gh"), ""), Err(GatewayEncodeError::Empty));
        assert_eq!(SourceId::new("-a"), Err(SourceIdError::Character));
        assert_eq!(SourceId::new(&"a".repeat(64)), Err(SourceIdError::TooLong));
        assert_eq!(
            Gateway::with_names("gw", "ui"),
            Err(GatewayConfigError::Scheme)
        );
        assert_eq!(
            Gateway::with_names("G", "x"),
            Err(GatewayConfigError::UiAuthority)
        );
    }

    #[test]
    fn rewrites_tool_metadata_but_never_the_name() {
        let g = Gateway::default();
        let tool = json!({
            "name": "show_github_issue",
            "description": "ui://app/a.html",
            "_meta": {
                "ui": {"resourceUri": "ui://app/a.html", "csp": {"connectDomains": []}},
                "ui/resourceUri": "ui://app/a.html",
                "openai/outputTemplate": "ui://widget/a.html",
                "other": "ui://app/a.html"
            }
        });
        let list = g.rewrite_tools_list(&src("gh"), json!({"tools": [tool]}));
        assert_eq!(
            list,
            json!({"tools": [{
                "name": "show_github_issue",
                "description": "ui://app/a.html",
                "_meta": {
                    "ui": {"resourceUri": "ui://portcullis/gh/app/a.html", "csp": {"connectDomains": []}},
                    "ui/resourceUri": "ui://portcullis/gh/app/a.html",
                    "openai/outputTemplate": "ui://portcullis/gh/widget/a.html",
                    "other": "ui://app/a.html"
                }
            }]})
        );
        let bad = g.rewrite_tool(
            &src("gh"),
            json!({"name": "t", "_meta": {"ui/resourceUri": "ui://a b"}}),
        );
        assert_eq!(bad, json!({"name": "t", "_meta": {}}));
    }

    #[test]
    fn rewrites_tool_results_and_resources() {
        let g = Gateway::default();
        let result = g
            .rewrite_tool_result(
                &src("gh"),
                json!({
                    "content": [
                        {"type": "text", "text": "ui://app/a.html"},
                        {"type": "resource_link", "uri": "ui://app/a.html", "name": "a"},
                        {"type": "resource", "resource": {"uri": "ui://app/b.html", "text": "x"}}
                    ],
                    "_meta": {"openai/outputTemplate": "ui://app/a.html"}
                }),
            )
            .unwrap();
        assert_eq!(result["content"][0]["text"], "ui://app/a.html");
        assert_eq!(result["content"][1]["uri"], "ui://portcullis/gh/app/a.html");
        assert_eq!(
            result["content"][2]["resource"]["uri"],
            "ui://portcullis/gh/app/b.html"
        );
        assert_eq!(
            result["_meta"]["openai/outputTemplate"],
            "ui://portcullis/gh/app/a.html"
        );

        let list = g.rewrite_resources_list(
            &src("gh"),
            json!({"resources": [{"uri": "ui://app/a.html"}], "resourceTemplates": [{"uriTemplate": "ui://app/{id}.html"}]}),
        );
        assert_eq!(list["resources"][0]["uri"], "ui://portcullis/gh/app/a.html");
        assert_eq!(
            list["resourceTemplates"][0]["uriTemplate"],
            "ui://portcullis/gh/app/{id}.html"
        );

        let read = g
            .rewrite_read_result(
                &src("gh"),
                json!({"contents": [
                    {"uri": "ui://app/a.html", "mimeType": "text/html;profile=mcp-app",
                     "text": "<script>read('ui://app/a.html'); read(\"ui://app/b.html\")</script>"},
                    {"uri": "ui://app/img.png", "mimeType": "image/png", "blob": "dWk6Ly9hcHAvYS5odG1s"}
                ]}),
                &["ui://app/b.html"],
            )
            .unwrap();
        assert_eq!(
            read["contents"][0]["text"],
            "<script>read('ui://portcullis/gh/app/a.html'); read(\"ui://portcullis/gh/app/b.html\")</script>"
        );
        assert_eq!(read["contents"][0]["uri"], "ui://portcullis/gh/app/a.html");
        assert_eq!(read["contents"][1]["blob"], "dWk6Ly9hcHAvYS5odG1s");
        assert_eq!(read["contents"][1]["uri"], "ui://portcullis/gh/app/img.png");
    }

    #[test]
    fn text_rewrite_only_at_token_boundaries() {
        let g = Gateway::default();
        let known = ["ui://app/a.html", "ui://app/a.html/x"];
        let rw = |t: &str| g.rewrite_text(&src("s"), t, &known);
        assert_eq!(rw("ui://app/a.html2"), "ui://app/a.html2");
        assert_eq!(rw("xui://app/a.html"), "xui://app/a.html");
        assert_eq!(rw("ui://app/a.html?v=1"), "ui://app/a.html?v=1");
        assert_eq!(rw("ui://app/a.htmlé"), "ui://app/a.htmlé");
        assert_eq!(rw("ui://app/a.html"), "ui://portcullis/s/app/a.html");
        assert_eq!(
            rw("é ui://app/a.html/x)"),
            "é ui://portcullis/s/app/a.html/x)"
        );
        assert_eq!(
            rw("src=ui://app/a.html>"),
            "src=ui://portcullis/s/app/a.html>"
        );
        assert_eq!(
            rw("[\"ui://app/a.html\",\"ui://app/a.html\"]"),
            "[\"ui://portcullis/s/app/a.html\",\"ui://portcullis/s/app/a.html\"]"
        );
        assert_eq!(
            g.rewrite_text(&src("s"), "ui://app/a.html", &[]),
            "ui://app/a.html"
        );
    }

    #[test]
    fn unmappable_uris_never_pass_unmapped() {
        let g = Gateway::default();
        let long = alloc::format!("ui://app/{}", "a".repeat(Gateway::MAX_URI_LEN));
        // A listing leaves out the entry, and only it.
        let list = g.rewrite_resources_list(
            &src("gh"),
            json!({"resources": [{"uri": long, "name": "big"}, {"name": "no uri"}, {"uri": "ui://app/a.html", "name": "a"}]}),
        );
        assert_eq!(
            list,
            json!({"resources": [{"uri": "ui://portcullis/gh/app/a.html", "name": "a"}]})
        );
        // A tool result or a read that names one is refused.
        for result in [
            json!({"content": [{"type": "resource_link", "uri": long, "name": "x"}]}),
            json!({"content": [{"type": "resource", "resource": {"uri": "ui://a/../b", "text": ""}}]}),
            json!({"content": [], "_meta": {"ui/resourceUri": "ui://a b"}}),
            json!({"content": [], "_meta": {"ui": {"resourceUri": ""}}}),
        ] {
            assert!(
                g.rewrite_tool_result(&src("gh"), result.clone()).is_err(),
                "{result}"
            );
        }
        assert_eq!(
            g.rewrite_read_result(
                &src("gh"),
                json!({"contents": [{"uri": "ui://./x", "text": ""}]}),
                &[]
            ),
            Err(GatewayEncodeError::DotSegment)
        );
        assert_eq!(
            g.rewrite_read_result(&src("gh"), json!({"contents": [{"text": ""}]}), &[]),
            Err(GatewayEncodeError::Empty)
        );
    }

    #[test]
    fn dot_segments_are_refused_both_ways() {
        let g = Gateway::default();
        for uri in [
            "ui://../good/board/main.html",
            "ui://app/./a.html",
            "ui://app/x/..",
            "ui://app/%2e%2E/x",
            "ui://app/.%2e/x",
            "ui://app/%2E./x",
            "ui://app/%2e/x",
            "ui://.",
            "https://x.com/a/../b",
            "file:///a/./b",
            "..",
            "a/%2e%2e",
        ] {
            assert_eq!(
                g.encode(&src("gh"), uri),
                Err(GatewayEncodeError::DotSegment),
                "{uri}"
            );
        }
        for gateway_uri in [
            "ui://portcullis/evil/../good/board/main.html",
            "ui://portcullis/evil/app/%2e%2e/x",
            "portcullis+mcp://evil/https://x.com/a/../b",
            "portcullis+mcp://evil/./x",
        ] {
            assert_eq!(
                g.decode(gateway_uri),
                Err(GatewayDecodeError::Uri(GatewayEncodeError::DotSegment)),
                "{gateway_uri}"
            );
        }
        // Dots that are not whole segments, or past the path, are fine.
        for uri in [
            "ui://app/a..html",
            "ui://app/.well-known/x",
            "ui://app/...",
            "ui://app/x?p=../y",
            "ui://app/x#/../y",
            "ui://app/%2e%2e%2e",
            "https://x.com/a/.b",
            "ui://app/é./x",
        ] {
            let encoded = g.encode(&src("gh"), uri).unwrap();
            assert_eq!(g.decode(&encoded).unwrap().1, uri);
        }
    }

    /// What [`KnownUris::rewrite`] must do, the slow way (every URI tried
    /// at every boundary): the definition it is checked against.
    fn rewrite_by_definition(g: &Gateway, source: &SourceId, text: &str, known: &[&str]) -> String {
        let mut uris: Vec<(&str, String)> = known
            .iter()
            .filter(|u| !u.bytes().any(right_boundary))
            .filter_map(|&u| g.encode(source, u).ok().map(|e| (u, e)))
            .collect();
        uris.sort_by_key(|u| core::cmp::Reverse(u.0.len()));
        let b = text.as_bytes();
        let (mut out, mut i, mut last) = (String::new(), 0, 0);
        while i < b.len() {
            if text.is_char_boundary(i) && (i == 0 || left_boundary(b[i - 1])) {
                let hit = uris.iter().find(|(u, _)| {
                    b[i..].starts_with(u.as_bytes())
                        && b.get(i + u.len()).is_none_or(|&c| right_boundary(c))
                });
                if let Some((u, e)) = hit {
                    out.push_str(&text[last..i]);
                    out.push_str(e);
                    i += u.len();
                    last = i;
                    continue;
                }
            }
            i += 1;
        }
        out.push_str(&text[last..]);
        out
    }

    #[test]
    fn the_linear_rewrite_meets_its_definition() {
        let g = Gateway::default();
        let s = src("s");
        let known = [
            "ui://a",
            "ui://a/b",
            "ui://a/b=c",
            "b=c",
            "c",
            "ui://a/(x)",
            "x(y",
            "ui://é/x",
            "=ui://a",
        ];
        let pieces = [
            "ui://a",
            "/b",
            "=c",
            "b",
            "c",
            " ",
            "=",
            "(",
            ")",
            "\"",
            "'",
            "x",
            "y",
            "é",
            "ui://é/x",
            "\\",
            ">",
        ];
        // Every text of up to four pieces.
        let mut texts = alloc::vec![String::new()];
        for _ in 0..4 {
            let mut next = Vec::new();
            for t in &texts {
                for p in pieces {
                    next.push(alloc::format!("{t}{p}"));
                }
            }
            texts.extend(next);
            texts.sort();
            texts.dedup();
        }
        for t in &texts {
            assert_eq!(
                g.rewrite_text(&s, t, &known),
                rewrite_by_definition(&g, &s, t, &known),
                "{t:?}"
            );
        }
    }

    /// A text built to make a scan of every URI at every boundary slow
    /// (long tokens full of left boundaries, thousands of URIs that share
    /// their tails) is rewritten with a number of steps bounded by its
    /// length: the walks back are counted.
    #[test]
    fn the_rewrite_is_linear_in_the_text() {
        let g = Gateway::default();
        let s = src("s");
        let known: Vec<String> = (0..4096)
            .map(|i| alloc::format!("ui://a/{}{i}", "=a".repeat(64)))
            .collect();
        let known: Vec<&str> = known.iter().map(String::as_str).collect();
        let uris = g.known_uris(&s, known.iter().copied());
        assert_eq!(uris.len(), 4096);
        // Tokens that end like the URIs (each walk back goes far), one
        // that starts like them, and one that is one.
        let tail = alloc::format!("{}409", "=a".repeat(64));
        let text = alloc::format!(
            "{}{} ui://a/{tail}5 ",
            alloc::format!("x{tail}) ").repeat(2_000),
            "=a".repeat(100_000)
        );
        let (out, steps) = uris.rewrite_counting(&text);
        assert!(out.ends_with(&alloc::format!(" ui://portcullis/s/a/{tail}5 ")));
        assert_eq!(out.len(), text.len() + "portcullis/s/".len());
        assert!(
            steps <= text.len(),
            "{steps} steps for {} bytes",
            text.len()
        );
        assert!(
            steps > 2_000 * tail.len(),
            "the walks back were taken: {steps}"
        );
    }
}
