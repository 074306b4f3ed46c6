//! Refusals of a browser form post, as the crate's own forms (consent,
//! approvals) answer them, for a host whose pages check their forms the
//! same way (a sign-in form, say): the same statuses and the same plain
//! pages, with the security headers of [`crate::html`].

use axum::http::StatusCode;
use axum::response::Response;

use crate::{pages, respond};

/// 400 for a malformed form.
#[must_use]
pub fn bad_form() -> Response {
    respond::html(
        StatusCode::BAD_REQUEST,
        pages::error("Bad request", "The form could not be read."),
    )
}

/// 403 for a cross-site form post.
#[must_use]
pub fn cross_site() -> Response {
    respond::html(
        StatusCode::FORBIDDEN,
        pages::error("Forbidden", "Cross-site form posts are refused."),
    )
}

/// 403 for a missing or wrong CSRF token.
#[must_use]
pub fn bad_csrf() -> Response {
    respond::html(
        StatusCode::FORBIDDEN,
        pages::error(
            "Forbidden",
            "The form has expired or did not come from this site. Reload the page and try again.",
        ),
    )
}
