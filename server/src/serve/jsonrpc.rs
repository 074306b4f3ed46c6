//! The strict JSON check in front of the MCP endpoint: a JSON body that is
//! not one well-formed JSON text is refused here, before rmcp sees it, with
//! the JSON-RPC 2.0 error object (§5.1) and `400`.
//!
//! * Not JSON: an empty body, trailing data after the value, an object with
//!   the same member name twice (RFC 8259 §4 leaves duplicate names to the
//!   parser; parsers disagree on which one wins, so an ambiguous message is
//!   refused, not guessed) or nesting deeper than `serde_json`'s limit:
//!   `-32700 Parse error`.
//! * JSON, but neither an object nor an array (`null`, a number, a
//!   string): `-32600 Invalid Request`, as JSON-RPC 2.0 §5.1 asks for JSON
//!   that is not a request object.
//!
//! Only `POST`s with a JSON `Content-Type` are checked; anything else goes
//! on to rmcp, which answers `405`/`415` as the transport spec says. The body
//! limit is the MCP endpoint's ([`super::mcp::MAX_MCP_BODY`], set by the
//! router's `DefaultBodyLimit`): a larger body is `413`.

use std::collections::HashSet;
use std::fmt;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest as _, Request};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::json;

/// JSON-RPC 2.0 §5.1: invalid JSON was received.
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC 2.0 §5.1: the JSON sent is not a valid request object.
const INVALID_REQUEST: i64 = -32600;

/// The middleware (a route layer of `/mcp/{key}`, inside the bearer check).
pub(crate) async fn strict(request: Request, next: Next) -> Response {
    if request.method() != Method::POST || !is_json(request.headers().get(header::CONTENT_TYPE)) {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes = match Bytes::from_request(Request::from_parts(parts.clone(), body), &()).await {
        Ok(b) => b,
        Err(rejection) => return rejection.into_response(),
    };
    if let Err((code, message)) = check(&bytes) {
        tracing::info!(code, "mcp: malformed JSON refused");
        return refused(code, message);
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Whether `content_type` is `application/json`, parameters allowed.
pub(crate) fn is_json(content_type: Option<&HeaderValue>) -> bool {
    content_type
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// What `body` is, or the JSON-RPC error code and message refusing it.
fn check(body: &[u8]) -> Result<(), (i64, &'static str)> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let top = Strict::deserialize(&mut de)
        .and_then(|top| de.end().map(|()| top))
        .map_err(|_| {
            (
                PARSE_ERROR,
                "Parse error: the body is not one well-formed JSON text with unique member names",
            )
        })?;
    match top {
        Strict::Container => Ok(()),
        Strict::Scalar => Err((
            INVALID_REQUEST,
            "Invalid Request: a JSON-RPC message is an object (or an array of them)",
        )),
    }
}

fn refused(code: i64, message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
    let mut response = (StatusCode::BAD_REQUEST, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A JSON value walked without keeping it, refusing duplicate member names
/// at every level; it records only whether the value was an object or an
/// array.
enum Strict {
    Container,
    Scalar,
}

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Strict;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Strict, E> {
        Ok(Strict::Scalar)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Strict, E> {
        Ok(Strict::Scalar)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Strict, E> {
        Ok(Strict::Scalar)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Strict, E> {
        Ok(Strict::Scalar)
    }
    fn visit_str<E>(self, _: &str) -> Result<Strict, E> {
        Ok(Strict::Scalar)
    }
    fn visit_unit<E>(self) -> Result<Strict, E> {
        Ok(Strict::Scalar)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Strict, A::Error> {
        while seq.next_element::<Strict>()?.is_some() {}
        Ok(Strict::Container)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Strict, A::Error> {
        let mut seen = HashSet::new();
        while let Some(name) = map.next_key::<String>()? {
            if !seen.insert(name) {
                return Err(de::Error::custom("duplicate member name"));
            }
            map.next_value::<Strict>()?;
        }
        Ok(Strict::Container)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_is_not_one_json_text_with_unique_names() {
        for bad in [
            &b""[..],
            b"  ",
            br#"{"jsonrpc":"2.0","id":1,"method":"ping"} x"#,
            br#"{"a":1}{"a":1}"#,
            br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#,
            br#"{"params":{"a":1,"\u0061":2}}"#,
            br#"[{"a":1,"a":1}]"#,
            b"{",
        ] {
            assert_eq!(check(bad).map_err(|e| e.0), Err(PARSE_ERROR), "{bad:?}");
        }
        for scalar in [&b"null"[..], b"1", b"\"x\"", b"true"] {
            assert_eq!(check(scalar).map_err(|e| e.0), Err(INVALID_REQUEST));
        }
        for good in [
            &br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":{"a":1}}}"#[..],
            b" [] \n",
        ] {
            assert_eq!(check(good), Ok(()));
        }
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(check(deep.as_bytes()).is_err());
    }

    #[test]
    fn only_json_content_types_are_checked() {
        let v = |s: &'static str| HeaderValue::from_static(s);
        assert!(is_json(Some(&v("application/json"))));
        assert!(is_json(Some(&v("Application/JSON; charset=utf-8"))));
        assert!(!is_json(Some(&v("text/plain"))));
        assert!(!is_json(Some(&v("application/jsonx"))));
        assert!(!is_json(None));
    }
}
