//! The demo server as a [`Host`] of `portcullis-axum`: who is signed in is
//! its own browser session cookie ([`crate::session`]); a signed-out user
//! gets the development sign-in page, whose form posts to `/sign-in` and
//! comes back to the page it was shown for.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::Response;
use portcullis_axum::{Host, SignedIn, url_encode};
use portcullis_core::jwt::SigningKey;

use super::respond;
use crate::session::Sessions;
use crate::{clock, pages};

/// What the crate's pages need of the server's sessions.
pub(crate) struct DemoHost {
    pub(crate) session_key: SigningKey,
    pub(crate) sessions: Arc<Sessions>,
    pub(crate) secure: bool,
}

impl Host for DemoHost {
    async fn signed_in(&self, parts: &Parts) -> Option<SignedIn> {
        let session =
            self.sessions
                .session(&self.session_key, &parts.headers, self.secure, clock::now())?;
        Some(SignedIn::new(session.subject.clone()).in_session(session.browser_session()))
    }

    fn sign_in(&self, return_to: &str) -> Response {
        respond::html(
            StatusCode::OK,
            pages::sign_in(&format!("/sign-in?next={}", url_encode(return_to))),
        )
    }
}
