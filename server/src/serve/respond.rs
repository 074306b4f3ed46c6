//! Turning answers into axum responses: the core's [`HttpResponse`] copied
//! verbatim, pages with this server's scripts, cookies and internal errors.
//! Plain HTML pages and redirects are `portcullis-axum`'s ([`html`],
//! [`see_other`]), so every page has the same security headers.

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
pub(crate) use portcullis_axum::{html, see_other};
use portcullis_core::http::HttpResponse;
use portcullis_core::store::{StoreError, StoreErrorKind};

/// The core's answer, status, headers and body copied as they are.
pub(crate) fn core(answer: HttpResponse) -> Response {
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

/// An HTML page that runs this server's own scripts (the Agents page, the
/// connected tab): [`html`] with `script-src 'self'` and `connect-src 'self'`
/// added, still no inline script.
pub(crate) fn html_with_script(status: StatusCode, page: String) -> Response {
    let mut response = html(status, page);
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; \
             frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
        ),
    );
    response
}

/// Adds a `Set-Cookie` header.
pub(crate) fn with_cookie(mut response: Response, cookie: &str) -> Response {
    if let Ok(v) = HeaderValue::try_from(cookie) {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}

/// A 500 whose cause is logged (causes never hold secrets: store errors and
/// fixed texts) but not shown.
pub(crate) fn internal(cause: &str) -> Response {
    tracing::error!(cause, "internal error");
    (StatusCode::INTERNAL_SERVER_ERROR, "internal server error\n").into_response()
}

/// A store failure as an answer: `503` with `Retry-After` when the store
/// cannot be reached now ([`StoreErrorKind::Unavailable`]: the database is
/// down or restarting, or a commit's outcome could not be settled) or the
/// operation kept losing races past the writer's budget
/// ([`StoreErrorKind::Conflict`]), else `500`; the cause is logged either
/// way.
pub(crate) fn store(e: &StoreError) -> Response {
    if matches!(
        e.kind(),
        StoreErrorKind::Unavailable | StoreErrorKind::Conflict
    ) {
        database(&e.to_string())
    } else {
        internal(&e.to_string())
    }
}

/// `503` with `Retry-After` for a failure of the shared database whose kind
/// was not kept (the job table's connection, an engine read whose error
/// became text): on a server whose state is all in that database, the
/// cause is the database, and a client may try again; nothing was changed.
/// The cause is logged at WARN, inside the request's span (with its id).
pub(crate) fn database(cause: &str) -> Response {
    tracing::warn!(cause, "database unavailable");
    let mut r = (StatusCode::SERVICE_UNAVAILABLE, "temporarily unavailable\n").into_response();
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}
