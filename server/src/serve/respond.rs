//! Turning answers into axum responses: the core's [`HttpResponse`] copied
//! verbatim, HTML pages with their security headers, and internal errors;
//! and, the other way, every value of a request header the core reads.

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use portcullis_core::http::HttpResponse;

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

/// An HTML page: no caching, no framing (the consent page must not be
/// clickjacked), no scripts, no referrer to other origins (authorization
/// URLs carry `state`). `same-origin`, not `no-referrer`: under
/// `no-referrer` browsers send `Origin: null` on our own form posts, which
/// the same-origin check must refuse.
pub(crate) fn html(status: StatusCode, page: String) -> Response {
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

/// A `303 See Other` to a path of this server (after a form post).
pub(crate) fn see_other(location: &str) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    match HeaderValue::try_from(location) {
        Ok(v) => {
            response.headers_mut().insert(header::LOCATION, v);
            response
                .headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
        }
        Err(_) => internal("invalid redirect target"),
    }
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
