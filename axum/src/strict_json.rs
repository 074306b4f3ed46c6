//! The strict JSON check in front of an MCP endpoint: a JSON body that is
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
//! rmcp would answer such a body `415` with a plain-text message, or decode
//! a duplicated member as whichever copy its decoder keeps.
//!
//! Only `POST`s with a JSON `Content-Type` are checked; anything else goes
//! on unread, and rmcp answers `405`/`415` as the transport spec says. The
//! body limit is the MCP endpoint's ([`MAX_MCP_BODY`], applied as the body
//! is read): a larger body is `413`, a body that fails to arrive (the
//! client went away, or [`crate::body_timeout`] ran out) `400`. A body that
//! passes goes on as the bytes read, unchanged.
//!
//! Put it behind the bearer check and in front of rmcp, as the reference
//! server does: an anonymous caller's body is never read.
//!
//! ```ignore
//! let rmcp = Arc::new(streamable_http_service);
//! let endpoint = tower::service_fn(move |request: Request| {
//!     let rmcp = Arc::clone(&rmcp);
//!     async move {
//!         Ok::<_, Infallible>(match portcullis_axum::strict_json::strict(request).await {
//!             Ok(request) => rmcp.handle(request).await.map(Body::new),
//!             Err(refused) => refused,
//!         })
//!     }
//! });
//! router.route_service(&portcullis.mcp_route(), portcullis.protect(endpoint))
//! ```

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::json;

/// JSON-RPC 2.0 §5.1: invalid JSON was received.
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC 2.0 §5.1: the JSON sent is not a valid request object.
const INVALID_REQUEST: i64 = -32600;

/// Largest MCP request body (the ledger's envelope limit plus JSON-RPC).
pub const MAX_MCP_BODY: usize = portcullis_core::ledger::MAX_ENVELOPE_LEN + 16 * 1024;

/// `request` as rmcp gets it, or the refusal: a `POST` with a JSON
/// `Content-Type` has its body read within [`MAX_MCP_BODY`] and checked,
/// and goes on with the bytes read; any other request goes on unread.
pub async fn strict(request: Request) -> Result<Request, Response> {
    if request.method() != Method::POST || !is_json(request.headers().get(header::CONTENT_TYPE)) {
        return Ok(request);
    }
    let (parts, body) = request.into_parts();
    let bytes = match Limited::new(body, MAX_MCP_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<LengthLimitError>() => {
            return Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                "the MCP request body is too large\n",
            )
                .into_response());
        }
        Err(e) => {
            tracing::debug!(error = %e, "mcp: the request body failed");
            return Err((
                StatusCode::BAD_REQUEST,
                "the request body could not be read\n",
            )
                .into_response());
        }
    };
    match check(&bytes) {
        Ok(()) => Ok(Request::from_parts(parts, Body::from(bytes))),
        Err((code, message)) => {
            tracing::info!(code, "mcp: malformed JSON refused");
            Err(refused(code, message))
        }
    }
}

/// Whether `content_type` is `application/json`, parameters allowed.
fn is_json(content_type: Option<&HeaderValue>) -> bool {
    content_type
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// Nothing, or the JSON-RPC error code and message refusing `body`.
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
        let mut seen = Names::default();
        while let Some(Name(name)) = map.next_key()? {
            seen.insert(name)?;
            map.next_value::<Strict>()?;
        }
        Ok(Strict::Container)
    }
}

/// A member name, borrowed from the body unless it has escapes.
struct Name<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(s.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// The member names of one object seen so far: a short list searched in
/// place (most objects have a handful of members), a hash set once it
/// grows, so a huge object costs linear time, not quadratic.
#[derive(Default)]
struct Names<'de> {
    few: Vec<Cow<'de, str>>,
    many: HashSet<Cow<'de, str>>,
}

impl<'de> Names<'de> {
    const FEW: usize = 16;

    /// Records `name`; a name seen before is an error.
    fn insert<E: de::Error>(&mut self, name: Cow<'de, str>) -> Result<(), E> {
        let fresh = if self.many.is_empty() && self.few.len() < Self::FEW {
            let fresh = !self.few.contains(&name);
            self.few.push(name);
            fresh
        } else {
            self.many.extend(self.few.drain(..));
            self.many.insert(name)
        };
        if fresh {
            Ok(())
        } else {
            Err(E::custom("duplicate member name"))
        }
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
            br#"{"method":"ping","method":"ping","id":1}"#,
            br#"{"method":{"a":1,"a":2},"id":1}"#,
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
            assert!(check(good).is_ok());
        }
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(check(deep.as_bytes()).is_err());
    }

    #[test]
    fn a_duplicate_is_found_past_the_short_list() {
        let many: Vec<String> = (0..40).map(|i| format!("\"k{i}\":{i}")).collect();
        let body = format!("{{{},\"k3\":0}}", many.join(","));
        assert!(check(body.as_bytes()).is_err());
        let body = format!("{{{}}}", many.join(","));
        assert!(check(body.as_bytes()).is_ok());
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
