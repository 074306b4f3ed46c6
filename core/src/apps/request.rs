//! [`AppRequest`]: one JSON-RPC 2.0 message an App sent the host.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use serde_json::{Map, Value};

use crate::error::{ErrorCode, WireError};
use crate::jwt::json::{ValueFault, parse_value};

use super::context::ContextValue;

/// The largest message read, in bytes: 256 KiB. One more is refused.
pub const MAX_REQUEST_BYTES: usize = 256 * 1024;
/// The longest method name kept in [`AppCall::Unsupported`], and the longest
/// string id, in bytes.
pub const MAX_METHOD_LEN: usize = 128;
/// The longest tool name, in bytes (MCP's bound on tool names).
pub const MAX_TOOL_NAME_LEN: usize = 128;
/// The longest resource URI or link, in bytes.
pub const MAX_URI_LEN: usize = 16 * 1024;

/// A JSON-RPC request id, echoed in the answer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RpcId {
    /// An integer id.
    Number(i64),
    /// A string id (1 to [`MAX_METHOD_LEN`] bytes).
    String(String),
}

impl RpcId {
    /// The id as a JSON value, for the answer's `id`.
    #[must_use]
    pub fn to_json(&self) -> Value {
        match self {
            Self::Number(n) => Value::from(*n),
            Self::String(s) => Value::String(s.clone()),
        }
    }
}

/// Who a `ui/message` speaks as. The extension names only `user`.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MessageRole {
    /// The message is proposed as the user's.
    User,
}

/// What an App asked for, by method.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq)]
pub enum AppCall {
    /// `ui/initialize`: the View's handshake. The host answers with its
    /// capabilities and context.
    Initialize {
        /// The extension revision the View speaks (`protocolVersion`).
        protocol_version: String,
    },
    /// `ui/notifications/initialized`: the handshake finished; the host may
    /// now send to the View.
    Initialized,
    /// `ping`: a liveness check, answered with an empty result.
    Ping,
    /// `tools/call`: run a tool of the View's own source
    /// ([`super::View::admit`]).
    CallTool {
        /// The tool's name, exactly as the source lists it.
        name: String,
        /// The arguments (an object; `{}` when the App sent none).
        arguments: Map<String, Value>,
    },
    /// `resources/read`: read a resource of the View's own source, named by
    /// its gateway URI ([`super::View::admit`]).
    ReadResource {
        /// The URI, as the App sent it.
        uri: String,
    },
    /// `ui/message`: a message the App proposes for the conversation; the
    /// user sends it once or declines ([`super::View::propose_message`]).
    Message {
        /// Who the message speaks as.
        role: MessageRole,
        /// Its text (text blocks joined with a line feed).
        text: String,
    },
    /// `ui/open-link`: a link the App proposes to open
    /// ([`super::View::propose_link`]).
    OpenLink {
        /// The URL, as the App sent it (the guard normalises it).
        url: String,
    },
    /// `ui/update-model-context`: the App's latest context offer, which the
    /// user may select ([`super::View::offer_context`]).
    UpdateContext(ContextValue),
    /// `ui/notifications/size-changed`: the View's content size in CSS
    /// pixels (a fraction rounded up; at most `u32::MAX`).
    SizeChanged {
        /// The width, if given.
        width: Option<u32>,
        /// The height, if given.
        height: Option<u32>,
    },
    /// Any other method: the host does not support it. A request is
    /// answered with JSON-RPC's "method not found" (-32601); a notification
    /// is dropped.
    Unsupported(String),
}

/// One parsed message: its id (`None` for a notification) and its call.
///
/// An App (a "View" in the extension's words) talks to its host over
/// `postMessage` in JSON-RPC 2.0, as an MCP client would (MCP Apps,
/// SEP-1865, "Communication Protocol" and "Transport Layer"). The connected
/// tab forwards each message it receives from the sandbox to the server
/// untouched; the server parses it here and acts only on what this parser
/// returns. A parsed request never carries anything the parser did not
/// read: a `tools/call` is its tool name and arguments, nothing else the App
/// put beside them, so nothing unread can be forwarded to a source.
///
/// What is read (the extension's "Standard MCP Messages" and "MCP Apps
/// Specific Messages"):
///
/// | method | kind | becomes |
/// |---|---|---|
/// | `ui/initialize` | request | [`AppCall::Initialize`] |
/// | `ui/notifications/initialized` | notification | [`AppCall::Initialized`] |
/// | `ping` | request | [`AppCall::Ping`] |
/// | `tools/call` `{name, arguments}` | request | [`AppCall::CallTool`] |
/// | `resources/read` `{uri}` | request | [`AppCall::ReadResource`] |
/// | `ui/message` `{role, content}` | request | [`AppCall::Message`] |
/// | `ui/open-link` `{url}` | request | [`AppCall::OpenLink`] |
/// | `ui/update-model-context` `{content?, structuredContent?}` | request | [`AppCall::UpdateContext`] |
/// | `ui/notifications/size-changed` `{width?, height?}` | notification | [`AppCall::SizeChanged`] |
/// | anything else | either | [`AppCall::Unsupported`] with the method name |
///
/// The host supports text messages and text or structured context only (the
/// host document: no image context, no App-provided tools, no fullscreen), so
/// a content block of another type is refused
/// ([`AppRequestError::UnsupportedContent`]) rather than dropped.
///
/// **Strictness.** A message is at most [`MAX_REQUEST_BYTES`] (256 KiB, the
/// host's per-request bound), checked before parsing. A member name repeated
/// in any object, at any depth, is refused (RFC 8259 §4 leaves duplicates to
/// the parser; two readers must never see two different requests). The
/// envelope may have only `jsonrpc` (exactly `"2.0"`), `id`, `method` and
/// `params`; a response (`result`/`error`) is not a request. An id is a
/// printable string of 1 to 128 bytes or an integer that fits `i64` (MCP
/// forbids `null`). A method the table lists as a
/// request must have an id, a notification must not. Inside `params`, members
/// the table does not name are ignored (MCP lets every `params` carry `_meta`
/// and extensions add members), and never passed on.
#[derive(Clone, Debug, PartialEq)]
pub struct AppRequest {
    /// The request id, `None` for a notification.
    pub id: Option<RpcId>,
    /// What the App asked for.
    pub call: AppCall,
}

/// How a known method must be sent.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Request,
    Notification,
}

impl AppRequest {
    /// Parses one message (the rules are in the [module docs](crate::apps)).
    ///
    /// ```
    /// use portcullis_core::apps::{AppCall, AppRequest, RpcId};
    ///
    /// let r = AppRequest::parse(
    ///     br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"add","arguments":{"n":1}}}"#,
    /// )
    /// .unwrap();
    /// assert_eq!(r.id, Some(RpcId::Number(7)));
    /// assert!(matches!(r.call, AppCall::CallTool { ref name, .. } if name == "add"));
    /// ```
    pub fn parse(bytes: &[u8]) -> Result<Self, AppRequestError> {
        use AppRequestError as E;
        if bytes.len() > MAX_REQUEST_BYTES {
            return Err(E::TooLarge);
        }
        let value = parse_value(bytes, true).map_err(|f| match f {
            ValueFault::Syntax => E::Syntax,
            ValueFault::Duplicate => E::DuplicateMember,
        })?;
        let Value::Object(mut envelope) = value else {
            return Err(E::NotRequest);
        };
        if envelope.contains_key("result") || envelope.contains_key("error") {
            return Err(E::NotRequest);
        }
        if envelope
            .keys()
            .any(|k| !matches!(k.as_str(), "jsonrpc" | "id" | "method" | "params"))
        {
            return Err(E::UnknownMember);
        }
        if envelope.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err(E::Version);
        }
        let id = match envelope.remove("id") {
            None => None,
            Some(id) => Some(rpc_id(id)?),
        };
        let method = match envelope.remove("method") {
            Some(Value::String(m)) if !m.is_empty() => m,
            _ => return Err(E::Method),
        };
        if method.len() > MAX_METHOD_LEN || !printable(&method) {
            return Err(E::Method);
        }
        let params = match envelope.remove("params") {
            None => Map::new(),
            Some(Value::Object(p)) => p,
            Some(_) => return Err(E::Params("params must be an object")),
        };
        let (kind, call) = match method.as_str() {
            "ui/initialize" => (Kind::Request, initialize(&params)?),
            "ui/notifications/initialized" => (Kind::Notification, AppCall::Initialized),
            "ping" => (Kind::Request, AppCall::Ping),
            "tools/call" => (Kind::Request, call_tool(params)?),
            "resources/read" => (Kind::Request, read_resource(params)?),
            "ui/message" => (Kind::Request, message(params)?),
            "ui/open-link" => (Kind::Request, open_link(params)?),
            "ui/update-model-context" => (Kind::Request, update_context(params)?),
            "ui/notifications/size-changed" => (Kind::Notification, size_changed(&params)?),
            _ => {
                return Ok(Self {
                    id,
                    call: AppCall::Unsupported(method),
                });
            }
        };
        match (kind, &id) {
            (Kind::Request, None) => Err(E::MissingId),
            (Kind::Notification, Some(_)) => Err(E::NotificationWithId),
            _ => Ok(Self { id, call }),
        }
    }

    /// The id of a message [`AppRequest::parse`] refused, so that the
    /// refusal answers the request it refuses: JSON-RPC 2.0 ("Response
    /// object") has an error carry the request's id, and `null` only when
    /// the id could not be detected, and an App's request settles only on
    /// an answer with its id. Read leniently: whatever the message's size
    /// (an oversized one included: its members are checked for their
    /// grammar but never built, so the cost is one pass over the bytes the
    /// caller already holds and bounds), the envelope's `id` member when it
    /// is a valid id ([`RpcId`]). `None` for a message that is not one JSON
    /// object, or whose `id` is missing, repeated or not a valid id.
    ///
    /// ```
    /// use portcullis_core::apps::{AppRequest, MAX_REQUEST_BYTES, RpcId};
    ///
    /// let big = "x".repeat(MAX_REQUEST_BYTES);
    /// let message = format!(r#"{{"jsonrpc":"2.0","id":7,"method":"ping","params":{{"a":"{big}"}}}}"#);
    /// assert!(AppRequest::parse(message.as_bytes()).is_err());
    /// assert_eq!(AppRequest::id_of(message.as_bytes()), Some(RpcId::Number(7)));
    /// ```
    #[must_use]
    pub fn id_of(bytes: &[u8]) -> Option<RpcId> {
        match crate::jwt::json::object_member(bytes, "id") {
            Ok(Some(id)) => rpc_id(id).ok(),
            _ => None,
        }
    }

    /// Whether this is a notification (no answer is sent).
    #[must_use]
    pub const fn is_notification(&self) -> bool {
        self.id.is_none()
    }
}

fn printable(s: &str) -> bool {
    !s.chars()
        .any(|c| c.is_control() || crate::redirect::is_invisible(c))
}

fn rpc_id(id: Value) -> Result<RpcId, AppRequestError> {
    match id {
        Value::Number(n) => n.as_i64().map(RpcId::Number),
        Value::String(s) if !s.is_empty() && s.len() <= MAX_METHOD_LEN && printable(&s) => {
            Some(RpcId::String(s))
        }
        _ => None,
    }
    .ok_or(AppRequestError::Id)
}

fn take_string(
    params: &mut Map<String, Value>,
    name: &str,
    max: usize,
    what: &'static str,
) -> Result<String, AppRequestError> {
    match params.remove(name) {
        Some(Value::String(s)) if !s.is_empty() && s.len() <= max => Ok(s),
        _ => Err(AppRequestError::Params(what)),
    }
}

fn initialize(params: &Map<String, Value>) -> Result<AppCall, AppRequestError> {
    match params.get("protocolVersion") {
        Some(Value::String(v)) if !v.is_empty() && v.len() <= 64 && printable(v) => {
            Ok(AppCall::Initialize {
                protocol_version: v.clone(),
            })
        }
        _ => Err(AppRequestError::Params(
            "ui/initialize needs a protocolVersion string",
        )),
    }
}

fn call_tool(mut params: Map<String, Value>) -> Result<AppCall, AppRequestError> {
    let name = take_string(
        &mut params,
        "name",
        MAX_TOOL_NAME_LEN,
        "tools/call needs a tool name of 1 to 128 bytes",
    )?;
    if !printable(&name) {
        return Err(AppRequestError::Params(
            "a tool name has no control characters",
        ));
    }
    let arguments = match params.remove("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(a)) => a,
        Some(_) => {
            return Err(AppRequestError::Params(
                "tools/call arguments must be an object",
            ));
        }
    };
    Ok(AppCall::CallTool { name, arguments })
}

fn read_resource(mut params: Map<String, Value>) -> Result<AppCall, AppRequestError> {
    let uri = take_string(
        &mut params,
        "uri",
        MAX_URI_LEN,
        "resources/read needs a uri of 1 byte to 16 KiB",
    )?;
    Ok(AppCall::ReadResource { uri })
}

fn open_link(mut params: Map<String, Value>) -> Result<AppCall, AppRequestError> {
    let url = take_string(
        &mut params,
        "url",
        MAX_URI_LEN,
        "ui/open-link needs a url of 1 byte to 16 KiB",
    )?;
    Ok(AppCall::OpenLink { url })
}

/// The text of one content block, or of an array of them. Only `text`
/// blocks are supported.
fn text_of(content: Value) -> Result<String, AppRequestError> {
    fn block(b: Value) -> Result<String, AppRequestError> {
        let Value::Object(mut b) = b else {
            return Err(AppRequestError::Params("a content block is an object"));
        };
        match b.get("type").and_then(Value::as_str) {
            Some("text") => {}
            Some(_) => return Err(AppRequestError::UnsupportedContent),
            None => return Err(AppRequestError::Params("a content block needs a type")),
        }
        match b.remove("text") {
            Some(Value::String(t)) => Ok(t),
            _ => Err(AppRequestError::Params("a text block needs its text")),
        }
    }
    match content {
        Value::Array(blocks) => {
            let mut text = String::new();
            for (i, b) in blocks.into_iter().enumerate() {
                if i > 0 {
                    text.push('\n');
                }
                text.push_str(&block(b)?);
            }
            Ok(text)
        }
        b => block(b),
    }
}

fn message(mut params: Map<String, Value>) -> Result<AppCall, AppRequestError> {
    let role = match params.get("role").and_then(Value::as_str) {
        Some("user") => MessageRole::User,
        _ => return Err(AppRequestError::Params("ui/message role must be \"user\"")),
    };
    let content = params
        .remove("content")
        .ok_or(AppRequestError::Params("ui/message needs content"))?;
    let text = text_of(content)?;
    if text.is_empty() {
        return Err(AppRequestError::Params("ui/message text is empty"));
    }
    Ok(AppCall::Message { role, text })
}

fn update_context(mut params: Map<String, Value>) -> Result<AppCall, AppRequestError> {
    let text = match params.remove("content") {
        None | Some(Value::Null) => None,
        Some(c @ Value::Array(_)) => Some(text_of(c)?),
        Some(_) => {
            return Err(AppRequestError::Params(
                "ui/update-model-context content is an array of blocks",
            ));
        }
    };
    let structured = match params.remove("structuredContent") {
        None | Some(Value::Null) => None,
        Some(Value::Object(o)) => Some(o),
        Some(_) => {
            return Err(AppRequestError::Params(
                "ui/update-model-context structuredContent is an object",
            ));
        }
    };
    ContextValue::new(text, structured)
        .map(AppCall::UpdateContext)
        .map_err(|_| AppRequestError::Params("ui/update-model-context offers nothing"))
}

fn size_changed(params: &Map<String, Value>) -> Result<AppCall, AppRequestError> {
    let dim = |name: &str| -> Result<Option<u32>, AppRequestError> {
        match params.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => pixels(n)
                .map(Some)
                .ok_or(AppRequestError::Params("a size is a non-negative number")),
            Some(_) => Err(AppRequestError::Params("a size is a number")),
        }
    };
    Ok(AppCall::SizeChanged {
        width: dim("width")?,
        height: dim("height")?,
    })
}

/// A non-negative number of pixels, rounded up, saturating at `u32::MAX`.
fn pixels(n: &serde_json::Number) -> Option<u32> {
    if let Some(u) = n.as_u64() {
        return Some(u32::try_from(u).unwrap_or(u32::MAX));
    }
    let f = n.as_f64().filter(|f| *f >= 0.0)?;
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "f is non-negative and `as` saturates at u32::MAX"
    )]
    let whole = f as u32;
    Some(if f64::from(whole) < f {
        whole.saturating_add(1)
    } else {
        whole
    })
}

/// Why a message was refused. Nothing of the input is echoed.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AppRequestError {
    /// Over [`MAX_REQUEST_BYTES`].
    TooLarge,
    /// Not one JSON value (RFC 8259), or nested deeper than 127 levels.
    Syntax,
    /// A member name is repeated in one object.
    DuplicateMember,
    /// Not a JSON-RPC request or notification (not an object, or a
    /// response).
    NotRequest,
    /// The envelope has a member other than `jsonrpc`, `id`, `method` and
    /// `params`.
    UnknownMember,
    /// `jsonrpc` is missing or not `"2.0"`.
    Version,
    /// The id is not an integer or a printable string of 1 to 128 bytes.
    Id,
    /// The method is missing, empty, longer than 128 bytes or has control
    /// characters.
    Method,
    /// A request method without an id.
    MissingId,
    /// A notification method with an id.
    NotificationWithId,
    /// The params do not fit the method: what is wrong.
    Params(&'static str),
    /// A content block of a type the host does not support (only `text`).
    UnsupportedContent,
}

impl AppRequestError {
    /// A stable, machine-readable reason (never changes for a variant).
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        match self {
            Self::TooLarge => "app_request_too_large",
            Self::Syntax => "app_request_syntax",
            Self::DuplicateMember => "app_request_duplicate_member",
            Self::NotRequest => "app_request_not_request",
            Self::UnknownMember => "app_request_unknown_member",
            Self::Version => "app_request_version",
            Self::Id => "app_request_id",
            Self::Method => "app_request_method",
            Self::MissingId => "app_request_missing_id",
            Self::NotificationWithId => "app_request_notification_with_id",
            Self::Params(_) => "app_request_params",
            Self::UnsupportedContent => "app_request_unsupported_content",
        }
    }

    /// The JSON-RPC 2.0 error code to answer with (§5.1): parse error
    /// (-32700), invalid request (-32600) or invalid params (-32602).
    #[must_use]
    pub const fn rpc_code(&self) -> i32 {
        match self {
            Self::Syntax | Self::DuplicateMember => -32700,
            Self::Params(_) | Self::UnsupportedContent => -32602,
            Self::TooLarge
            | Self::NotRequest
            | Self::UnknownMember
            | Self::Version
            | Self::Id
            | Self::Method
            | Self::MissingId
            | Self::NotificationWithId => -32600,
        }
    }
}

impl fmt::Display for AppRequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::TooLarge => "the app request is larger than 256 KiB",
            Self::Syntax => "the app request is not valid JSON",
            Self::DuplicateMember => "the app request repeats a member name",
            Self::NotRequest => "the app message is not a JSON-RPC request or notification",
            Self::UnknownMember => "the app request has an unknown envelope member",
            Self::Version => "the app request is not JSON-RPC 2.0",
            Self::Id => "the app request id is not an integer or a short string",
            Self::Method => "the app request method is missing or malformed",
            Self::MissingId => "the app request needs an id",
            Self::NotificationWithId => "the app notification has an id",
            Self::Params(what) => what,
            Self::UnsupportedContent => "only text content is supported",
        })
    }
}

impl WireError for AppRequestError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::Params(_) | Self::UnsupportedContent => ErrorCode::InvalidParams,
            _ => ErrorCode::InvalidRequest,
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for AppRequestError {}

/// Writes the exact JSON text of `value` (members in sorted order), the
/// bytes an approval shows and binds.
pub(super) fn json_text(value: &Value) -> String {
    let mut out = Vec::new();
    crate::jwt::json::write_value(&mut out, value);
    // JSON text written from a `Value` is UTF-8.
    String::from_utf8(out).unwrap_or_default()
}
