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
//! The rewriters take and return `serde_json::Value`s of MCP messages. They
//! rewrite the MCP Apps and Apps SDK metadata keys (`_meta.ui.resourceUri`,
//! `_meta["ui/resourceUri"]`, `_meta["openai/outputTemplate"]`), resource
//! URIs in listings and contents, and exact downstream URIs inside text
//! resources — only whole URIs at token boundaries, so `ui://app/a.html` is
//! not rewritten inside `ui://app/a.html2`. Tool names are never changed and
//! binary (`blob`) bodies are never touched.

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
    #[must_use]
    pub fn rewrite_tool_result(&self, source: &SourceId, mut result: Value) -> Value {
        if let Some(meta) = result.get_mut("_meta").and_then(Value::as_object_mut) {
            self.rewrite_meta(source, meta);
        }
        if let Some(content) = result.get_mut("content").and_then(Value::as_array_mut) {
            for item in content {
                match item.get("type").and_then(Value::as_str) {
                    Some("resource_link") => self.rewrite_field(source, item, "uri"),
                    Some("resource") => {
                        if let Some(resource) = item.get_mut("resource") {
                            self.rewrite_field(source, resource, "uri");
                        }
                    }
                    _ => {}
                }
            }
        }
        result
    }

    /// Rewrites a `resources/list` or `resources/templates/list` result:
    /// each `uri` and `uriTemplate`.
    #[must_use]
    pub fn rewrite_resources_list(&self, source: &SourceId, mut result: Value) -> Value {
        for (list, field) in [("resources", "uri"), ("resourceTemplates", "uriTemplate")] {
            if let Some(items) = result.get_mut(list).and_then(Value::as_array_mut) {
                for item in items {
                    self.rewrite_field(source, item, field);
                }
            }
        }
        result
    }

    /// Rewrites a `resources/read` result: each content's `uri`, and in text
    /// contents every whole occurrence of one of `known` (the source's
    /// downstream resource URIs, e.g. from `resources/list`) or of the
    /// content's own URI. `blob` contents keep their bytes.
    #[must_use]
    pub fn rewrite_read_result(
        &self,
        source: &SourceId,
        mut result: Value,
        known: &[&str],
    ) -> Value {
        let Some(contents) = result.get_mut("contents").and_then(Value::as_array_mut) else {
            return result;
        };
        for item in contents {
            let own = item.get("uri").and_then(Value::as_str).map(String::from);
            if let Some(Value::String(text)) = item.get_mut("text") {
                let mut uris: Vec<&str> = known.to_vec();
                uris.extend(own.as_deref());
                *text = self.rewrite_text(source, text, &uris);
            }
            self.rewrite_field(source, item, "uri");
        }
        result
    }

    /// Replaces every whole occurrence of a `known` downstream URI in `text`
    /// by its gateway URI.
    ///
    /// An occurrence counts only at token boundaries: it starts the text or
    /// follows whitespace, a control character or one of `"'`` ` ``<>([{=`,
    /// and it ends the text or is followed by whitespace, a control character
    /// or one of `"'`` ` ``<>)]}\`. The longest known URI wins. URIs that
    /// [`Gateway::encode`] refuses are skipped.
    #[must_use]
    pub fn rewrite_text(&self, source: &SourceId, text: &str, known: &[&str]) -> String {
        let mut uris: Vec<(&str, String)> = known
            .iter()
            .filter_map(|&u| self.encode(source, u).ok().map(|g| (u, g)))
            .collect();
        uris.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.0.cmp(b.0)));
        uris.dedup_by(|a, b| a.0 == b.0);
        if uris.is_empty() {
            return text.into();
        }
        let b = text.as_bytes();
        let mut out = String::with_capacity(text.len());
        let (mut i, mut last) = (0, 0);
        while i < b.len() {
            if i == 0 || left_boundary(b[i - 1]) {
                let hit = uris.iter().find(|(u, _)| {
                    b[i..].starts_with(u.as_bytes())
                        && b.get(i + u.len()).is_none_or(|&c| right_boundary(c))
                });
                if let Some((u, g)) = hit {
                    out.push_str(&text[last..i]);
                    out.push_str(g);
                    i += u.len();
                    last = i;
                    continue;
                }
            }
            i += utf8_len(b[i]);
        }
        out.push_str(&text[last..]);
        out
    }

    fn rewrite_meta(&self, source: &SourceId, meta: &mut Map<String, Value>) {
        if let Some(ui) = meta.get_mut("ui") {
            self.rewrite_field(source, ui, "resourceUri");
        }
        for key in ["ui/resourceUri", "openai/outputTemplate"] {
            self.rewrite_key(source, meta, key);
        }
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

const fn utf8_len(lead: u8) -> usize {
    match lead {
        0x00..=0xbf => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        _ => 4,
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
    Ok(())
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
}

impl fmt::Display for GatewayEncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Empty => "empty resource URI",
            Self::TooLong => "resource URI too long",
            Self::Character => "resource URI contains whitespace or control characters",
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
        let result = g.rewrite_tool_result(
            &src("gh"),
            json!({
                "content": [
                    {"type": "text", "text": "ui://app/a.html"},
                    {"type": "resource_link", "uri": "ui://app/a.html", "name": "a"},
                    {"type": "resource", "resource": {"uri": "ui://app/b.html", "text": "x"}}
                ],
                "_meta": {"openai/outputTemplate": "ui://app/a.html"}
            }),
        );
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

        let read = g.rewrite_read_result(
            &src("gh"),
            json!({"contents": [
                {"uri": "ui://app/a.html", "mimeType": "text/html;profile=mcp-app",
                 "text": "<script>read('ui://app/a.html'); read(\"ui://app/b.html\")</script>"},
                {"uri": "ui://app/img.png", "mimeType": "image/png", "blob": "dWk6Ly9hcHAvYS5odG1s"}
            ]}),
            &["ui://app/b.html"],
        );
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
}
