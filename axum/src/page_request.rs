//! The checks in front of the crate's own pages (the approvals page and the
//! connected-agents page), each once: who the signed-in user is, and that
//! a post comes from the site itself (same origin) and carries the page's
//! CSRF token ([`crate::csrf`]). A page's form is refused as HTML, its JSON
//! routes as JSON (`{"ok": false, "error": {"code", "message"}}`).

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::Response;
use portcullis_core::form::Form;
use serde_json::{Map, Value};

use crate::csrf::{self, Purpose};
use crate::forms::{bad_csrf, bad_form, cross_site, json_refusal};
use crate::store::HostStore;
use crate::user::SignedIn;
use crate::{Portcullis, now};

/// One of the crate's pages: its CSRF purpose and its path (where the
/// host's sign-in sends a signed-out visitor back to).
#[derive(Clone, Copy)]
pub(crate) struct Page<'a> {
    pub(crate) purpose: Purpose,
    pub(crate) path: &'a str,
}

impl<S: HostStore> Portcullis<S> {
    /// The signed-in user of a page's `GET`, or the host's sign-in, back to
    /// the page.
    pub(crate) async fn page_user(
        &self,
        parts: &Parts,
        page: Page<'_>,
    ) -> Result<SignedIn, Response> {
        match self.inner.host.signed_in(parts).await {
            Some(user) => Ok(user),
            None => Err(self.inner.host.sign_in(page.path)),
        }
    }

    /// The signed-in user of a page's JSON route, or `401 login_required`.
    pub(crate) async fn json_user(&self, parts: &Parts) -> Result<SignedIn, Response> {
        self.inner.host.signed_in(parts).await.ok_or_else(|| {
            json_refusal(StatusCode::UNAUTHORIZED, "login_required", "sign in first")
        })
    }

    /// The user and the fields of a post of the page's form: from the site
    /// itself, a form, a signed-in user (or the sign-in), the page's CSRF
    /// token in `csrf`.
    pub(crate) async fn form_post<'b>(
        &self,
        parts: &Parts,
        body: &'b Bytes,
        page: Page<'_>,
    ) -> Result<(SignedIn, Form<'b>), Response> {
        if !self.same_origin(parts) {
            return Err(cross_site());
        }
        let Some(form) = crate::forms::read_form(body) else {
            return Err(bad_form());
        };
        let user = self.page_user(parts, page).await?;
        let token = form.get("csrf").unwrap_or_default();
        if !self.inner.csrf.check(page.purpose, &user, token, now()) {
            return Err(bad_csrf());
        }
        Ok((user, form))
    }

    /// The user and the members of a post to the page's JSON route: from
    /// the site itself, a signed-in user, a JSON object, the page's CSRF
    /// token in `csrf`.
    pub(crate) async fn json_post(
        &self,
        parts: &Parts,
        body: &Bytes,
        purpose: Purpose,
    ) -> Result<(SignedIn, Map<String, Value>), Response> {
        if !self.same_origin(parts) {
            return Err(json_refusal(
                StatusCode::FORBIDDEN,
                "cross_site",
                "cross-site requests are refused",
            ));
        }
        let user = self.json_user(parts).await?;
        let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(body) else {
            return Err(bad_json("the body is not a JSON object"));
        };
        let token = fields
            .get("csrf")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !self.inner.csrf.check(purpose, &user, token, now()) {
            return Err(json_refusal(
                StatusCode::FORBIDDEN,
                "bad_csrf",
                "bad or expired csrf token",
            ));
        }
        Ok((user, fields))
    }

    /// Whether a post comes from the site's own origin (or one it allows).
    fn same_origin(&self, parts: &Parts) -> bool {
        csrf::same_origin(
            &parts.headers,
            &self.inner.origin,
            &self.facts().site.allowed_origins,
        )
    }
}

/// `400 invalid_request` from a JSON route, saying `why`.
pub(crate) fn bad_json(why: &str) -> Response {
    json_refusal(StatusCode::BAD_REQUEST, "invalid_request", why)
}
