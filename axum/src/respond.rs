//! Turning answers into axum responses: the core's [`HttpResponse`] copied
//! verbatim, HTML pages with their security headers, redirects and internal
//! errors; and, the other way, every value of a request header the core
//! reads.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use portcullis_core::header::HeaderField;
use portcullis_core::http::HttpResponse;
use portcullis_core::store::{StoreError, StoreErrorKind};

/// A handler's answer: its response, or the refusal it stopped at (also a
/// response; `?` on a step that may refuse returns it as is).
pub(crate) type Handled = Result<Response, Response>;

/// The core's answer (an [`HttpResponse`] from an engine HTTP operation):
/// status, headers and body copied as they are.
#[must_use]
pub fn core(answer: HttpResponse) -> Response {
    let mut response = Response::new(Body::from(answer.body));
    *response.status_mut() =
        StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    for (name, value) in answer.headers {
        match HeaderValue::try_from(value) {
            Ok(v) => {
                headers.append(HeaderName::from_static(name), v);
            }
            Err(_) => return internal("the core produced an invalid header value"),
        }
    }
    response
}

/// A JSON document (`application/json`).
pub(crate) fn json(status: StatusCode, body: impl Into<Body>) -> Response {
    let body = body.into();
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// An HTML page: no caching, no framing (a consent or approval page must
/// not be clickjacked), no script, no referrer to other origins
/// (authorization URLs carry `state`). No `form-action`: browsers apply it
/// to the redirect a form post answers with, and the consent form's answer
/// is a redirect to the client's own (other) origin. `same-origin`, not `no-referrer`:
/// under `no-referrer` browsers send `Origin: null` on the page's own form
/// posts, which the same-origin check must refuse.
#[must_use]
pub fn html(status: StatusCode, page: String) -> Response {
    let mut response = (status, page).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    response
}

/// A `303 See Other` to `location` (after a form post, or to a sign-in
/// page).
#[must_use]
pub fn see_other(location: &str) -> Response {
    match HeaderValue::try_from(location) {
        Ok(v) => {
            let mut response = StatusCode::SEE_OTHER.into_response();
            response.headers_mut().insert(header::LOCATION, v);
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
        }
        Err(_) => internal("invalid redirect target"),
    }
}

/// A 500 whose cause is logged (causes never hold secrets: store errors and
/// fixed texts) but not shown.
#[must_use]
pub fn internal(cause: &str) -> Response {
    tracing::error!(cause, "internal error");
    (StatusCode::INTERNAL_SERVER_ERROR, "internal server error\n").into_response()
}

/// A store failure as an answer: `503` with `Retry-After` when the store
/// cannot be reached now ([`StoreErrorKind::Unavailable`]: the database is
/// down or restarting, or a commit's outcome could not be settled) or the
/// operation kept losing races past the writer's budget
/// ([`StoreErrorKind::Conflict`], see [`crate::store`]): nothing was
/// applied and a retry may succeed. Else `500`. Either way the cause is
/// logged (at WARN or ERROR, inside the request's span, so with its id)
/// and not shown. The answer for a failed [`crate::Portcullis::commit`].
#[must_use]
pub fn store(e: &StoreError) -> Response {
    if matches!(
        e.kind(),
        StoreErrorKind::Unavailable | StoreErrorKind::Conflict
    ) {
        unavailable(&e.to_string())
    } else {
        internal(&e.to_string())
    }
}

/// A 503 with `Retry-After` for a store that cannot be reached now: the
/// client may try again; nothing was changed.
pub(crate) fn unavailable(cause: &str) -> Response {
    tracing::warn!(cause, "store unavailable");
    let mut r = (StatusCode::SERVICE_UNAVAILABLE, "temporarily unavailable\n").into_response();
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

/// Every value a request carried for one header field, owned so it can go
/// to the blocking thread the core runs on. The core decides what a
/// repeated field means; nothing here picks a value. One value (the common
/// case) is held without allocating. (`pub` in a private module, for the
/// gatekeepers' sealed trait, which carries it between its two halves.)
pub struct HeaderValues {
    first: Option<HeaderValue>,
    rest: Vec<HeaderValue>,
}

impl HeaderValues {
    /// All values of `name` in `headers`, in order.
    pub(crate) fn of(headers: &HeaderMap, name: HeaderName) -> Self {
        let mut all = headers.get_all(name).iter().cloned();
        Self {
            first: all.next(),
            rest: all.collect(),
        }
    }

    /// The values as the core reads them.
    pub(crate) fn field(&self) -> HeaderField<'_> {
        HeaderField::new(
            self.first
                .iter()
                .chain(&self.rest)
                .map(HeaderValue::as_bytes),
        )
    }
}

/// A store failure as an answer: `503` with `Retry-After` when the store
/// cannot be reached now, else `500`.
pub(crate) fn store_failure(e: &portcullis_core::engine::SiteOpError) -> Response {
    match e {
        portcullis_core::engine::SiteOpError::Store(s) => store(s),
        e => internal(&e.to_string()),
    }
}
