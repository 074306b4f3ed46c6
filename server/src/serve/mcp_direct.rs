//! The MCP endpoint's HTTP transport: the requests of plain stateless
//! Streamable HTTP (MCP 2025-11-25 "Transports", and the earlier revisions
//! with an `initialize` handshake) are answered here by calling the
//! [`Tools`] handler directly; everything else goes to rmcp's
//! `StreamableHttpService`, unchanged.
//!
//! rmcp's stateless mode builds a whole service for every POST (a peer, a
//! one-shot transport, a serve loop and its tasks) to answer one message.
//! Here one idle rmcp service per protocol version is started once, only to
//! own the [`Peer`] a handler's `RequestContext` needs (its `peer_info` is
//! exactly what rmcp builds per request: that version, default
//! capabilities and client info), and each request runs rmcp's own
//! dispatch (`Service::handle_request` of the `ServerHandler`) on one task.
//!
//! **The direct path takes only what rmcp would accept and answer with one
//! JSON body**, and answers it as rmcp does (`200`, `application/json`, the
//! JSON-RPC response or error with the client's id). A request is direct
//! when all of these hold, else rmcp gets it, whose answer (a refusal
//! included) is then the one the client sees:
//!
//! * `POST`, no `Origin` header (rmcp's Origin check stays rmcp's), and a
//!   `Host` in the allowed list, compared as rmcp compares it (DNS-rebinding
//!   guard);
//! * `Accept` lists both `application/json` and `text/event-stream`, with no
//!   parameters (a `q=0` weight is rmcp's to judge); `Content-Type` is JSON;
//! * the body is one JSON-RPC request (not a notification or a response);
//! * `MCP-Protocol-Version` is absent (rmcp assumes 2025-03-26) or a known
//!   version with an `initialize` handshake, and an `initialize` names the
//!   same version in its params; the request carries no per-request
//!   protocol version in `_meta` (the 2026-07-28 lifecycle, whose status
//!   mapping and header checks are rmcp's).
//!
//! The bearer check ([`super::mcp::guard`]) runs first, then the body limit
//! and the strict JSON check ([`super::jsonrpc`]), whose pass over the body
//! also classifies it, so the direct path decodes it once, as the one
//! type it can be.
//!
//! A handler that does not finish at its first poll continues on a task of
//! its own, as in rmcp: a client that goes away cancels the request's `ct`
//! but never stops a run half-way. Unlike
//! rmcp, a message a handler sends through its peer before answering
//! (progress, logging) is dropped, not turned into an SSE stream: no tool of
//! this server sends one.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::response::Response;
use rmcp::model::{
    ClientCapabilities, ClientJsonRpcMessage, ClientRequest, ErrorData, GetExtensions as _,
    GetMeta as _, Implementation, InitializeRequestParams, JsonRpcRequest, ProtocolVersion,
    RequestId, ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::{RequestContext, RunningService, serve_directly};
use rmcp::transport::Transport;
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::{Peer, RoleServer, ServerHandler, Service as _};
use tokio_util::sync::DropGuard;
use tracing::Instrument as _;

use super::Shared;
use super::jsonrpc::{self, Checked};
use super::mcp::{self, Tools};
use super::mcp_methods::decode_known;

/// The MCP endpoint (the state of the `/mcp/{key}` route).
pub(crate) struct Endpoint {
    app: Shared,
    /// Everything the direct path does not take.
    rmcp: StreamableHttpService<Tools, NeverSessionManager>,
    tools: Tools,
    /// The allowed `Host` authorities, normalized as rmcp normalizes them.
    hosts: Vec<Authority>,
    /// One idle service per protocol version with an `initialize`
    /// handshake, kept for its peer.
    peers: Vec<(ProtocolVersion, RunningService<RoleServer, Idle>)>,
}

/// An allowed `Host` authority: the host lower-cased without IPv6
/// brackets, and the port if one was given; and the text it was parsed
/// from, which a request's `Host` usually repeats.
#[derive(Debug, PartialEq, Eq)]
struct Authority {
    host: String,
    port: Option<u16>,
    text: String,
}

impl Authority {
    fn parse(s: &str) -> Option<Self> {
        let text = s.trim();
        let a = axum::http::uri::Authority::try_from(text).ok()?;
        Some(Self {
            host: unbracketed(a.host()).to_ascii_lowercase(),
            port: a.port_u16(),
            text: text.to_owned(),
        })
    }

    /// Whether `self`, an allowed entry, admits the request's `host` (as
    /// [`unbracketed`] gives it, any case) and `port` (an entry without a
    /// port admits every port). Compared in place: the guard asks on every
    /// request.
    fn admits(&self, host: &str, port: Option<u16>) -> bool {
        self.host.eq_ignore_ascii_case(host) && self.port.is_none_or(|p| port == Some(p))
    }
}

/// `host` without the brackets of an IPv6 literal, as rmcp normalizes it.
fn unbracketed(host: &str) -> &str {
    host.trim_matches(['[', ']'])
}

/// Whether the request's `Host` is one of `allowed` (every host when
/// `allowed` is empty), compared as rmcp compares it. A `Host` that spells
/// an allowed entry's text (in any case) parses as that entry does, so it
/// is admitted without being parsed (which copies it); any other is
/// parsed and compared.
fn host_allowed(allowed: &[Authority], headers: &HeaderMap) -> bool {
    let Some(text) = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
    else {
        return false;
    };
    if allowed.iter().any(|a| a.text.eq_ignore_ascii_case(text)) {
        return true;
    }
    let Ok(host) = axum::http::uri::Authority::try_from(text) else {
        return false;
    };
    let (name, port) = (unbracketed(host.host()), host.port_u16());
    allowed.is_empty() || allowed.iter().any(|a| a.admits(name, port))
}

impl Endpoint {
    /// The endpoint of `app`, accepting the `Host` values `allowed_hosts`.
    /// Must run inside the Tokio runtime (it starts the idle services).
    pub(crate) fn new(app: &Shared, allowed_hosts: Vec<String>) -> Self {
        let hosts = allowed_hosts
            .iter()
            .filter_map(|h| Authority::parse(h))
            .collect();
        let peers = ProtocolVersion::KNOWN_VERSIONS
            .iter()
            .filter(|v| v.has_initialize())
            .map(|v| {
                let info = InitializeRequestParams::new(
                    ClientCapabilities::default(),
                    Implementation::default(),
                )
                .with_protocol_version(v.clone());
                (v.clone(), serve_directly(Idle, Unconnected, Some(info)))
            })
            .collect();
        Self {
            app: Arc::clone(app),
            rmcp: mcp::service(app, allowed_hosts),
            tools: Tools::new(app),
            hosts,
            peers,
        }
    }

    /// The peer for a request of protocol version `v`, if `v` is direct.
    fn peer(&self, v: &str) -> Option<Peer<RoleServer>> {
        self.peers
            .iter()
            .find(|(known, _)| known.as_str() == v)
            .map(|(_, running)| running.peer().clone())
    }

    /// What rmcp answers for `request`. Its future is boxed: rmcp's
    /// handler future is several kilobytes, and unboxed it would size every
    /// request's future (moved into place by axum per request), the direct
    /// path's included.
    async fn by_rmcp(&self, request: Request) -> Response {
        Box::pin(self.rmcp.handle(request)).await.map(Body::new)
    }
}

/// The route's handler: the bearer check ([`mcp::guard`]), the strict JSON
/// check ([`super::jsonrpc`]), then the direct path or rmcp. One handler,
/// not a stack of middleware: each layer would clone the route's service
/// and box a future per request.
pub(crate) async fn endpoint(State(endpoint): State<Arc<Endpoint>>, request: Request) -> Response {
    mcp::guard(&endpoint.app, request, |r| endpoint.serve(r)).await
}

impl Endpoint {
    /// Answers a request the bearer check accepted.
    async fn serve(&self, request: Request) -> Response {
        if request.method() != Method::POST
            || !jsonrpc::is_json(request.headers().get(header::CONTENT_TYPE))
        {
            return self.by_rmcp(request).await;
        }
        let (parts, bytes, checked) = match jsonrpc::strict(request).await {
            Ok(checked) => checked,
            Err(refused) => return refused,
        };
        let headers = &parts.headers;
        let plain = !headers.contains_key(header::ORIGIN)
            && host_allowed(&self.hosts, headers)
            && accepts_json_and_sse(headers);
        match plain
            .then(|| direct(self, headers, checked, &bytes))
            .flatten()
        {
            Some((request, peer)) => answer(self.start(parts, request, peer)).await,
            None => {
                self.by_rmcp(Request::from_parts(parts, Body::from(bytes)))
                    .await
            }
        }
    }
}

/// The request in `body` and the peer to run it with, if the direct path
/// takes it (see the module docs). `checked` is what the strict JSON check
/// learnt of the body.
fn direct(
    endpoint: &Endpoint,
    headers: &HeaderMap,
    checked: Checked,
    body: &Bytes,
) -> Option<(JsonRpcRequest<ClientRequest>, Peer<RoleServer>)> {
    let request = decode(checked, body)?;
    if request.request.get_meta().protocol_version().is_some()
        || matches!(request.request, ClientRequest::DiscoverRequest(_))
    {
        return None;
    }
    let header = match headers.get(HEADER_MCP_PROTOCOL_VERSION) {
        Some(v) => Some(v.to_str().ok()?),
        None => None,
    };
    let version = match &request.request {
        ClientRequest::InitializeRequest(init) => {
            let body = init.params.protocol_version.as_str();
            if header.is_some_and(|h| h != body) {
                return None;
            }
            body
        }
        _ => header.unwrap_or(ProtocolVersion::V_2025_03_26.as_str()),
    };
    let peer = endpoint.peer(version)?;
    Some((request, peer))
}

/// `body` as rmcp decodes it, if it is a request. rmcp decodes every
/// message as an untagged union of four shapes (after a pass over its
/// members to classify it), whose request is an untagged union of every
/// method, each tried in turn on a buffered copy. Where the strict check
/// already saw the shape and a known method ([`super::mcp_methods`]),
/// only that method's type is decoded: the first member of the union that can succeed, so the same
/// value as rmcp's (a body that fails it, or has another method, is decoded
/// as rmcp does it).
fn decode(checked: Checked, body: &[u8]) -> Option<JsonRpcRequest<ClientRequest>> {
    if !checked.request {
        return None;
    }
    if let Some(request) = checked.method.and_then(|m| decode_known(m, body)) {
        return Some(request);
    }
    match serde_json::from_slice(body).ok()? {
        ClientJsonRpcMessage::Request(request) => Some(request),
        _ => None,
    }
}

/// The protocol version header of Streamable HTTP (MCP 2025-06-18 and
/// later, "Protocol Version Header").
const HEADER_MCP_PROTOCOL_VERSION: &str = "mcp-protocol-version";

/// Whether `Accept` lists both media types a Streamable HTTP POST must
/// accept, without parameters (which may carry a `q=0` exclusion).
fn accepts_json_and_sse(headers: &HeaderMap) -> bool {
    let (mut json, mut sse) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        // Visible ASCII only (as `HeaderValue::to_str` has it), then
        // compared as bytes: no UTF-8 or Unicode-whitespace pass.
        let Ok(value) = value.to_str() else {
            return false;
        };
        for range in value.as_bytes().split(|b| *b == b',') {
            let range = range.trim_ascii();
            if range.iter().any(|b| matches!(b, b';' | b'"')) {
                return false;
            }
            json |= range.eq_ignore_ascii_case(b"application/json");
            sse |= range.eq_ignore_ascii_case(b"text/event-stream");
        }
    }
    json && sse
}

/// A request handed to the handler: its id, the guard that cancels its
/// token if the client goes away, and the handler's future (boxed).
struct Handling {
    id: RequestId,
    cancel: DropGuard,
    future: Pin<Box<dyn Future<Output = Result<ServerResult, ErrorData>> + Send>>,
}

impl Endpoint {
    /// Starts `request` as rmcp's serve loop would: the HTTP request's parts
    /// in the context's extensions, the request's `_meta` as the context's.
    /// Not `async`: the handler's future is built and boxed here, so it
    /// takes no room in the request's own future (which axum moves into
    /// place on every request).
    fn start(
        &self,
        parts: Parts,
        request: JsonRpcRequest<ClientRequest>,
        peer: Peer<RoleServer>,
    ) -> Handling {
        let JsonRpcRequest {
            id, mut request, ..
        } = request;
        request.extensions_mut().insert(parts);
        let mut context = RequestContext::new(id.clone(), peer);
        std::mem::swap(&mut context.meta, request.get_meta_mut());
        std::mem::swap(&mut context.extensions, request.extensions_mut());
        tracing::debug!(method = request.method(), "mcp request");
        let cancel = context.ct.clone().drop_guard();
        let tools = self.tools.clone();
        Handling {
            id,
            cancel,
            future: Box::pin(async move { tools.handle_request(request, context).await }),
        }
    }
}

/// Runs a started request to its answer. Polled here first: most requests
/// (ping, lists, reads) finish without waiting, and need no task of their
/// own. One that waits moves to a task, where it runs to its end even if
/// the client goes away; the client's going away cancels its token (as
/// rmcp does).
async fn answer(handling: Handling) -> Response {
    let Handling {
        id,
        cancel,
        mut future,
    } = handling;
    let outcome = match std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await {
        Poll::Ready(result) => Ok(result),
        Poll::Pending => tokio::spawn(future.instrument(tracing::Span::current())).await,
    };
    cancel.disarm();
    let message = match outcome {
        Ok(Ok(result)) => ServerJsonRpcMessage::response(result, id),
        Ok(Err(error)) => {
            tracing::debug!(code = error.code.0, "mcp request failed");
            ServerJsonRpcMessage::error(error, Some(id))
        }
        Err(_) => return super::respond::internal("the MCP handler failed"),
    };
    match serde_json::to_vec(&message) {
        Ok(body) => {
            let mut response = Response::new(Body::from(body));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            response
        }
        Err(_) => super::respond::internal("serializing the MCP response failed"),
    }
}

/// The handler of the idle services: they never receive a message.
pub(crate) struct Idle;

impl ServerHandler for Idle {}

/// The idle services' transport: nothing arrives, and what a handler sends
/// outside its response is dropped (see the module docs).
struct Unconnected;

impl Transport<RoleServer> for Unconnected {
    type Error = Infallible;

    fn send(
        &mut self,
        _item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Infallible>> + Send + 'static {
        tracing::debug!("mcp: a message sent outside a response was dropped");
        std::future::ready(Ok(()))
    }

    fn receive(&mut self) -> impl Future<Output = Option<ClientJsonRpcMessage>> + Send {
        std::future::pending()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Infallible>> + Send {
        std::future::ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(*name, HeaderValue::from_static(value));
        }
        h
    }

    #[test]
    fn accept_must_list_both_types_without_parameters() {
        assert!(accepts_json_and_sse(&headers(&[(
            "accept",
            "application/json, text/event-stream"
        )])));
        assert!(accepts_json_and_sse(&headers(&[
            ("accept", "Application/JSON"),
            ("accept", "text/event-stream")
        ])));
        for refused in [
            "application/json",
            "*/*",
            "application/json, text/event-stream;q=0",
            "application/json;q=1, text/event-stream",
        ] {
            assert!(
                !accepts_json_and_sse(&headers(&[("accept", refused)])),
                "{refused}"
            );
        }
        assert!(!accepts_json_and_sse(&HeaderMap::new()));
    }

    /// What rmcp's own decoding makes of `body`, as JSON.
    fn by_rmcp(body: &str) -> Option<serde_json::Value> {
        match serde_json::from_str(body).ok()? {
            ClientJsonRpcMessage::Request(r) => Some(serde_json::to_value(r).unwrap()),
            _ => None,
        }
    }

    #[test]
    fn a_known_method_decodes_as_rmcp_decodes_it() {
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":"a","method":"ping","params":{"_meta":{"k":1}}}"#,
            r#"{"method":"tools/list","id":2,"jsonrpc":"2.0","params":{"cursor":"c"}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"execute","arguments":{"code":"[]","n":1.5},"_meta":{"progressToken":7}}}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"resources/read","params":{"uri":"ui://x"}}"#,
            // Fits no known type: decoded as rmcp does (a custom request).
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"nameless":true}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"vendor/thing","params":{"a":[1]}}"#,
            r#"{"jsonrpc":"2.0","id":8,"method":"logging/setLevel","params":{"level":"info"}}"#,
            // Not requests.
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":9,"method":"ping","result":{}}"#,
            r#"{"jsonrpc":"1.0","id":10,"method":"ping"}"#,
        ] {
            let checked = jsonrpc::tests::checked(body);
            let ours = decode(checked, body.as_bytes()).map(|r| serde_json::to_value(r).unwrap());
            assert_eq!(ours, by_rmcp(body), "{body}");
        }
    }

    #[test]
    fn hosts_compare_as_rmcp_compares_them() {
        let allowed = |entries: &[&str]| {
            entries
                .iter()
                .filter_map(|h| Authority::parse(h))
                .collect::<Vec<_>>()
        };
        let admitted = |entries: &[Authority], host: &'static str| {
            host_allowed(entries, &headers(&[("host", host)]))
        };
        let one = allowed(&["127.0.0.1:8080"]);
        assert!(admitted(&one, "127.0.0.1:8080"));
        assert!(!admitted(&one, "127.0.0.1:8081"));
        assert!(!admitted(&one, "127.0.0.1"));
        assert!(!host_allowed(&one, &HeaderMap::new()));
        let any_port = allowed(&["Example.COM"]);
        assert!(admitted(&any_port, "EXAMPLE.com:443"));
        assert!(!admitted(&any_port, "example.com.evil"));
        assert!(!admitted(&any_port, "a b"));
        // Spelled as an entry, in another case, or with another spelling
        // of the same authority: the same answers as a parse gives.
        let spelled = allowed(&["LocalHost:8080", "[::1]"]);
        assert!(admitted(&spelled, "localhost:8080"));
        assert!(admitted(&spelled, "LOCALHOST:8080"));
        assert!(!admitted(&spelled, "localhost:8081"));
        assert!(admitted(&spelled, "[::1]"));
        assert!(!admitted(&spelled, "[::2]"));
        assert!(admitted(&spelled, " [::1]:443 "));
        let v6 = allowed(&["[::1]:80"]);
        assert_eq!(v6[0].host, "::1");
        assert!(admitted(&v6, "[::1]:80"));
        assert!(admitted(&[], "anything.example"));
        assert!(Authority::parse("a b").is_none());
    }

    /// The size of the future of one MCP request: axum moves it at every
    /// poll site and tokio allocates one per connection, so it stays small.
    /// rmcp's own future (several KB) is boxed in `Endpoint::by_rmcp`
    /// rather than inlined here; this guard fails if it comes back.
    #[test]
    fn request_future_stays_small() {
        fn future_size<A, B, F>(_: fn(A, B) -> F) -> usize {
            size_of::<F>()
        }
        let size = future_size(endpoint);
        assert!(size < 4096, "endpoint future grew to {size} bytes");
    }
}
