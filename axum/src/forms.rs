//! Refusals of a browser form post, as the crate's own forms (consent,
//! approvals) answer them, for a host whose pages check their forms the
//! same way (a sign-in form, say): the same statuses and the same plain
//! pages, with the security headers of [`crate::html`].

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::Response;
use portcullis_core::form::Form;
use serde_json::json;

use crate::{pages, respond};

/// Largest request body on the crate's routes (the token endpoint's limit;
/// registration documents and forms are smaller).
pub(crate) const BODY_LIMIT: usize = portcullis_core::token::MAX_BODY_LEN;

/// A posted form body read as `application/x-www-form-urlencoded` fields:
/// `None` when it is not UTF-8 or not a form within [`BODY_LIMIT`].
pub(crate) fn read_form(body: &Bytes) -> Option<Form<'_>> {
    Form::parse(std::str::from_utf8(body).ok()?, BODY_LIMIT).ok()
}

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

/// A refusal of one of the crate's JSON routes (approvals, connected
/// agents), as JSON like their other answers: `{"ok": false, "error":
/// {"code", "message"}}`.
pub(crate) fn json_refusal(status: StatusCode, code: &str, why: &str) -> Response {
    respond::json(
        status,
        json!({"ok": false, "error": {"code": code, "message": why}}).to_string(),
    )
}
