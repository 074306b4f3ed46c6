//! The browser side: the development sign-in, the Agents page and the open
//! route. Every form post is checked for a same-origin `Origin` (when the
//! browser sends one) and, once signed in, for the session's CSRF token.

use axum::body::Bytes;
use axum::extract::{FromRequest, RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
pub(crate) use portcullis_axum::forms::{bad_csrf, bad_form, cross_site};
use portcullis_core::form::Form;
use portcullis_core::grant::GrantId;
use portcullis_core::http::HttpResponse;
use portcullis_core::link::OpenAnswer;

use super::{App, BODY_LIMIT, Shared, respond};
use crate::notify::Event;
use crate::session::{self, Session};
use crate::{clock, pages};

/// A form body as UTF-8 text (bounded by the router's body limit).
pub(crate) struct FormBody(pub(crate) String);

impl<S: Send + Sync> FromRequest<S> for FormBody {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(axum::response::IntoResponse::into_response)?;
        String::from_utf8(bytes.to_vec())
            .map(FormBody)
            .map_err(|_| bad_form())
    }
}

impl App {
    /// The browser's session, if its cookie verifies and it was not signed
    /// out ([`session::Sessions`]): every route that reads the session
    /// (pages, consent, the tab channel, approvals, the notes app) asks here.
    pub(crate) fn session(&self, headers: &HeaderMap) -> Option<Session> {
        self.browser.sessions.session(
            &self.browser.session_key,
            headers,
            self.browser.secure,
            clock::now(),
        )
    }

    /// Whether a form post comes from our own pages: a browser's `Origin`
    /// (and `Sec-Fetch-Site`), when present, must say so. Clients that send
    /// neither are not browsers and carry no ambient cookie risk beyond the
    /// CSRF token.
    pub(crate) fn same_origin(&self, headers: &HeaderMap) -> bool {
        let origin_ok = headers.get(header::ORIGIN).is_none_or(|o| {
            o.as_bytes()
                .eq_ignore_ascii_case(self.browser.public_url.as_bytes())
        });
        let fetch_ok = headers
            .get("sec-fetch-site")
            .is_none_or(|v| matches!(v.as_bytes(), b"same-origin" | b"none"));
        origin_ok && fetch_ok
    }

    /// The development sign-in: any valid user name gets a session; then
    /// back to `return_to` (the page the form was served on, a fixed path of
    /// ours plus the query it was requested with).
    pub(crate) fn sign_in(
        &self,
        headers: &HeaderMap,
        form: &Form<'_>,
        return_to: &str,
    ) -> Response {
        if !self.same_origin(headers) {
            return cross_site();
        }
        let Some(name) = form.get("username").filter(|n| session::valid_subject(n)) else {
            return respond::html(
                StatusCode::BAD_REQUEST,
                pages::error(
                    "Sign-in failed",
                    "A user name is 1-64 letters, digits and . _ @ -.",
                ),
            );
        };
        let expires = clock::now().saturating_add(self.browser.session_ttl);
        let (_, value) =
            self.browser
                .sessions
                .issue(&self.browser.session_key, name, expires, &mut rand::rng());
        tracing::debug!("signed in");
        respond::with_cookie(
            respond::see_other(return_to),
            &session::set_cookie(
                &value,
                self.browser.secure,
                self.browser.session_ttl.as_secs(),
            ),
        )
    }
}

/// Signs `session` out on a shared database: recorded there (so every
/// instance, and this one after a restart, refuses its cookie) and
/// announced; true when that took a new epoch for every instance. Should
/// the database fail, this instance alone refuses the cookie.
async fn sign_out_shared(
    app: &Shared,
    table: &'static super::jobs::JobTable,
    session: &Session,
) -> bool {
    let now = clock::now();
    let (sid, expires) = (session.browser_session().to_owned(), session.expires());
    let recorded = {
        let sid = sid.clone();
        app.blocking(move |_| table.sign_out(&sid, expires, now.as_secs(), session::MAX_REVOKED))
            .await
    };
    match recorded {
        Ok(Ok(Some(epoch))) => {
            app.browser.sessions.reset(epoch, []);
            app.channel.fanout.announce(Event::Epoch);
            true
        }
        Ok(Ok(None)) => {
            app.browser.sessions.remember(&sid, expires, now);
            app.channel.fanout.announce(Event::SignOut(sid, expires));
            false
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "recording a sign-out failed: only this instance knows");
            app.browser.sessions.revoke(session, now)
        }
        Err(_) => app.browser.sessions.revoke(session, now),
    }
}

/// Signs `session` out on redb: in memory, then in the session file
/// before the sign-out is answered, so a restart keeps it out (and keeps a
/// new epoch, should the set have been full); see [`crate::session_file`].
/// True when that took a new epoch.
async fn sign_out_kept(app: &Shared, session: &Session) -> bool {
    let now = clock::now();
    let signed_out = session.clone();
    let renewed = app
        .blocking(move |app| {
            let renewed = app.browser.sessions.revoke(&signed_out, now);
            if let Some(file) = &app.browser.session_file {
                file.keep(&app.browser.sessions);
            }
            renewed
        })
        .await;
    renewed.unwrap_or_else(|_| app.browser.sessions.revoke(session, now))
}

/// Signing out ends the browser session for good: its cookie is refused
/// from now on ([`session::Sessions::revoke`]), here and after a restart
/// (the session file on redb, the database on PostgreSQL), and in the core
/// `reset_session` disconnects every tab connection of this browser session
/// at once, with its auto-approvals (DESIGN "Connected tab"); its pending
/// `navigate` commands are dropped.
async fn reset_browser_session(app: &Shared, session: &Session) {
    let renewed = match app.channel.jobs {
        None => sign_out_kept(app, session).await,
        Some(table) => sign_out_shared(app, table, session).await,
    };
    if renewed {
        tracing::warn!("the signed-out set was full: a new session epoch signed everyone out");
    }
    let browser_session = session.browser_session().to_owned();
    app.clear_navigates(&browser_session).await;
    let ended = app
        .write(move |app, txn| {
            app.engine()
                .reset_session(txn, app.site(), &browser_session, clock::now())
        })
        .await;
    match ended {
        Ok(Ok(n)) => tracing::debug!(ended = n, "browser session reset"),
        Ok(Err(e)) => tracing::error!(cause = %e, "reset_session failed"),
        Err(_) => {}
    }
    app.bump(&session.subject);
}

/// `POST /sign-in?next=<path>`: the development sign-in form of a page
/// that needs a session (the crate's authorization and approval pages show
/// it through [`super::host::DemoHost`]); back to `next` afterwards, if it
/// is a path of this site.
pub(crate) async fn sign_in_form(
    State(app): State<Shared>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: FormBody,
) -> Response {
    let Ok(form) = Form::parse(&body.0, BODY_LIMIT) else {
        return bad_form();
    };
    let query = query.unwrap_or_default();
    let Ok(params) = Form::parse(&query, BODY_LIMIT) else {
        return bad_form();
    };
    let next = params
        .get("next")
        .filter(|n| n.starts_with('/') && portcullis_core::redirect::SafePath::new(n).is_ok())
        .unwrap_or("/agents");
    app.sign_in(&headers, &form, next)
}

/// The connected tab's script (`GET /agents/app.js`).
const SCRIPT: &str = include_str!("agents.js");

/// `GET /agents/app.js`.
pub(crate) async fn script() -> Response {
    let mut r = axum::response::IntoResponse::into_response(SCRIPT);
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("text/javascript; charset=utf-8"),
    );
    h.insert(
        header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-cache"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        axum::http::HeaderValue::from_static("nosniff"),
    );
    r
}

/// `GET /`: the Agents page.
pub(crate) async fn home() -> Response {
    respond::see_other("/agents")
}

/// `GET /_agent-native/open`: the open route. Without a session the
/// sign-in page is served at this same URL, and signing in reloads it.
/// With one, the `navigate` command is queued for this **browser session**
/// (its connected tab takes it from the tab channel, see [`super::navigate`])
/// and the browser is redirected.
pub(crate) async fn open(
    State(app): State<Shared>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let query = query.unwrap_or_default();
    let session = app.session(&headers);
    match app
        .browser
        .open_route
        .handle(&query, session.is_some(), |_| None)
    {
        Ok(OpenAnswer::SignIn) => respond::html(StatusCode::OK, pages::sign_in(&open_url(&query))),
        Ok(OpenAnswer::Redirect(redirect)) => {
            // The command's parameters are the link's: never logged.
            let queued = match &session {
                Some(session) => Some(app.push_navigate(session, &redirect.navigate).await),
                None => None,
            };
            match queued {
                Some(Ok((_, pending))) => tracing::debug!(
                    source = ?redirect.source,
                    rejected_to = redirect.rejected_to.is_some(),
                    pending,
                    "open route: navigate queued for the browser session"
                ),
                Some(Err(e)) => tracing::warn!(
                    source = ?redirect.source,
                    rejected_to = redirect.rejected_to.is_some(),
                    cause = ?e,
                    "open route: navigate dropped"
                ),
                None => {}
            }
            respond::core(HttpResponse::redirect(redirect.location))
        }
        Err(e) => respond::html(
            StatusCode::BAD_REQUEST,
            pages::error("Bad link", &e.to_string()),
        ),
    }
}

fn open_url(query: &str) -> String {
    format!(
        "{}?{query}",
        portcullis_core::link::LinkConfig::DEFAULT_OPEN_PATH
    )
}

/// `POST /_agent-native/open`: the sign-in form of the open route.
pub(crate) async fn open_sign_in(
    State(app): State<Shared>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: FormBody,
) -> Response {
    let query = query.unwrap_or_default();
    match Form::parse(&body.0, BODY_LIMIT) {
        Ok(form) if form.get("intent") == Some("signin") => {
            app.sign_in(&headers, &form, &open_url(&query))
        }
        _ => bad_form(),
    }
}

/// `GET /agents`: the signed-in user's connections.
pub(crate) async fn agents(State(app): State<Shared>, headers: HeaderMap) -> Response {
    let Some(session) = app.session(&headers) else {
        return respond::html(StatusCode::OK, pages::sign_in("/agents"));
    };
    let subject = session.subject.clone();
    let listed = app
        .blocking(move |app| {
            let site = app.engine().site(app.site())?;
            let page =
                app.engine()
                    .list_user_grants(app.site(), &subject, None, 200, clock::now())?;
            Ok::<_, portcullis_core::engine::SiteOpError>((site, page))
        })
        .await;
    match listed {
        Ok(Ok((site, page))) => super::apps::frames_sandbox(
            respond::html_with_script(
                StatusCode::OK,
                pages::agents(
                    &session.subject,
                    &site.resource(),
                    &page.grants,
                    &session.csrf_token(&app.browser.session_key),
                    (!site.enabled).then_some("External agents are switched off for this site."),
                    &app.apps.sandbox,
                ),
            ),
            &app.apps.sandbox,
        ),
        Ok(Err(portcullis_core::engine::SiteOpError::Store(e))) => respond::store(&e),
        Ok(Err(e)) => respond::internal(&e.to_string()),
        Err(r) => r,
    }
}

/// `POST /agents`: sign in, sign out, or disconnect one of your agents.
pub(crate) async fn agents_post(
    State(app): State<Shared>,
    headers: HeaderMap,
    body: FormBody,
) -> Response {
    let Ok(form) = Form::parse(&body.0, BODY_LIMIT) else {
        return bad_form();
    };
    if form.get("intent") == Some("signin") {
        return app.sign_in(&headers, &form, "/agents");
    }
    if !app.same_origin(&headers) {
        return cross_site();
    }
    let Some(session) = app.session(&headers) else {
        return respond::html(StatusCode::UNAUTHORIZED, pages::sign_in("/agents"));
    };
    if !session.csrf_matches(
        &app.browser.session_key,
        form.get("csrf").unwrap_or_default(),
    ) {
        return bad_csrf();
    }
    match form.get("intent") {
        Some("signout") => {
            reset_browser_session(&app, &session).await;
            tracing::debug!("signed out");
            respond::with_cookie(
                respond::see_other("/agents"),
                &session::clear_cookie(app.browser.secure),
            )
        }
        Some("revoke") => {
            let Some(id) = form.get("grant").and_then(GrantId::parse) else {
                return bad_form();
            };
            let subject = session.subject.clone();
            let revoked = app
                .write(move |app, txn| {
                    // Only the user's own grants: the id alone is not authority.
                    app.engine()
                        .revoke_own_grant(txn, app.site(), &subject, &id, clock::now())
                })
                .await;
            match revoked {
                Ok(Ok(Some(_))) => {
                    app.grant_ended(Some(&session.subject));
                    tracing::debug!("grant revoked by its user");
                    respond::see_other("/agents")
                }
                Ok(Ok(None)) => respond::html(
                    StatusCode::NOT_FOUND,
                    pages::error("Not found", "You have no such connection."),
                ),
                Ok(Err(e)) => respond::store(&e),
                Err(r) => r,
            }
        }
        _ => bad_form(),
    }
}
