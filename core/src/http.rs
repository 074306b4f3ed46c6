//! HTTP-shaped answers: a status, headers and a body the adapter copies
//! into its response and adds nothing to.

use alloc::string::String;
use alloc::vec::Vec;

use serde::Serialize;

use crate::error::{ErrorCode, WireError};

/// A complete HTTP answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// Headers, in order. Names are lower-case.
    pub headers: Vec<(&'static str, String)>,
    /// The body; empty when there is none.
    pub body: String,
}

impl HttpResponse {
    /// A JSON body with `status`.
    #[must_use]
    pub fn json(status: u16, body: &impl Serialize) -> Self {
        let body = serde_json::to_string(body).unwrap_or_else(|_| String::from("{}"));
        Self {
            status,
            headers: alloc::vec![("content-type", "application/json".into())],
            body,
        }
    }

    /// An already serialised JSON body with `status`.
    #[must_use]
    pub fn json_body(status: u16, body: String) -> Self {
        Self {
            status,
            headers: alloc::vec![("content-type", "application/json".into())],
            body,
        }
    }

    /// Adds `Cache-Control: no-store` and `Pragma: no-cache`: token
    /// responses and their errors must not be cached (RFC 6749 §5.1).
    #[must_use]
    pub fn no_store(mut self) -> Self {
        self.headers.push(("cache-control", "no-store".into()));
        self.headers.push(("pragma", "no-cache".into()));
        self
    }

    /// An RFC 6749 §5.2 error body, with the status the code maps to and
    /// `no-store`. `description` is shown to developers: it must be safe to
    /// show (it never holds a secret).
    #[must_use]
    pub fn oauth_error(code: ErrorCode, description: &str) -> Self {
        #[derive(Serialize)]
        struct Body<'a> {
            error: &'a str,
            error_description: &'a str,
        }
        Self::json(
            code.http_status(),
            &Body {
                error: code.as_str(),
                error_description: description,
            },
        )
        .no_store()
    }

    /// A `302 Found` to `location`.
    #[must_use]
    pub fn redirect(location: String) -> Self {
        Self {
            status: 302,
            headers: alloc::vec![("location", location), ("cache-control", "no-store".into())],
            body: String::new(),
        }
    }

    /// The complete answer to an error of any operation: the RFC 6749 §5.2
    /// body with the status its code maps to, and `Retry-After` when the
    /// caller should come back later.
    #[must_use]
    pub fn error(error: &impl WireError, retry_after_secs: Option<u32>) -> Self {
        let r = Self::oauth_error(error.code(), &alloc::format!("{error}"));
        match retry_after_secs {
            Some(secs) => r.with_header("retry-after", alloc::format!("{secs}")),
            None => r,
        }
    }

    /// Adds a header.
    #[must_use]
    pub fn with_header(mut self, name: &'static str, value: String) -> Self {
        self.headers.push((name, value));
        self
    }

    /// The first value of header `name`.
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}
