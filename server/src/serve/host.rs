//! The demo server as a [`Host`] of `portcullis-axum`: who is signed in is
//! its own browser session cookie ([`crate::session`]); a signed-out user
//! gets the development sign-in page, whose form posts to `/sign-in` and
//! comes back to the page it was shown for.

use std::sync::{Arc, OnceLock};

use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::Response;
use portcullis_axum::{Host, SignedIn, url_encode};
use portcullis_core::authorize::ConsentScreen;
use portcullis_core::form::Form;
use portcullis_core::gateway::SourceId;
use portcullis_core::granted_apps::AppSelection;
use portcullis_core::jwt::SigningKey;

use super::{granted, respond};
use crate::session::Sessions;
use crate::{clock, pages};

/// What the crate's pages need of the server's sessions, and the gateway's
/// sources for the consent screen's choice of apps ([`granted`]).
pub(crate) struct DemoHost {
    pub(crate) session_key: SigningKey,
    pub(crate) sessions: Arc<Sessions>,
    pub(crate) secure: bool,
    /// The gateway's sources, set once the gateway started (the crate is
    /// built first); no choice is offered without sources.
    pub(crate) sources: Arc<OnceLock<Vec<SourceId>>>,
}

impl DemoHost {
    /// The host for a server at `public`, and the handle that gives it the
    /// gateway's sources once they are known.
    pub(crate) fn new(
        session_key: &SigningKey,
        sessions: &Arc<Sessions>,
        public: &str,
    ) -> (Self, Arc<OnceLock<Vec<SourceId>>>) {
        let sources = Arc::new(OnceLock::new());
        let host = Self {
            session_key: session_key.clone(),
            sessions: Arc::clone(sessions),
            secure: public.starts_with("https://"),
            sources: Arc::clone(&sources),
        };
        (host, sources)
    }

    fn sources(&self) -> &[SourceId] {
        self.sources.get().map_or(&[], Vec::as_slice)
    }
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

    /// The choice of apps: every app (checked), or only the checked ones.
    fn consent_fields(&self, _screen: &ConsentScreen, _user: &SignedIn) -> String {
        if self.sources().is_empty() {
            return String::new();
        }
        granted::fields(self.sources(), &AppSelection::All)
    }

    fn consent_apps(&self, _user: &SignedIn, form: &Form<'_>) -> Result<AppSelection, Response> {
        granted::parse(self.sources(), form).map_err(|why| {
            tracing::debug!(why, "consent's apps refused");
            portcullis_axum::forms::bad_form()
        })
    }
}
