//! Turning answers into axum responses: the core's
//! [`HttpResponse`](portcullis_core::http::HttpResponse) copied
//! verbatim, pages with this server's scripts, cookies and internal errors.
//! Plain HTML pages, redirects, the core's answers and store failures are
//! `portcullis-axum`'s ([`html`], [`see_other`], [`core`], [`store`]), so
//! every page has the same security headers and every failure the same
//! status rules.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
pub(crate) use portcullis_axum::{
    core_response as core, html, internal_error as internal, see_other, store_error as store,
};

/// A handler's answer: its response, or the refusal it stopped at (also a
/// response; `?` on a step that may refuse returns it as is).
pub(crate) type Handled = Result<Response, Response>;

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
