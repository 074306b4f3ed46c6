//! The authorization server's routes: metadata documents, registration, the
//! authorization endpoint (sign-in, consent, decision), token and revocation.

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use portcullis_core::authorize::AuthorizeAnswer;
use portcullis_core::engine::SiteOpError;
use portcullis_core::error::{ErrorCode, WireError as _};
use portcullis_core::form::Form;
use portcullis_core::http::HttpResponse;
use portcullis_core::metadata::{AuthorizationServerMetadata, ProtectedResourceMetadata};

use super::browser::{self, FormBody};
use super::respond::{self, HeaderValues};
use super::{BODY_LIMIT, Shared};
use crate::{clock, pages};

/// RFC 8414 §3.
pub(crate) async fn authorization_server_metadata(State(app): State<Shared>) -> Response {
    match app.read(|app| app.engine.site(&app.site)).await {
        Ok(Ok(site)) => json_document(AuthorizationServerMetadata::for_site(&site).to_json()),
        Ok(Err(e)) => respond::internal(&e.to_string()),
        Err(r) => r,
    }
}

/// RFC 9728 §3.1, at the resource's own path-suffixed URL
/// (`/.well-known/oauth-protected-resource/mcp/{key}`) only: §3.3 has the
/// client check that `resource` equals the URL it used, so no other URL
/// serves this document.
pub(crate) async fn protected_resource_metadata(
    State(app): State<Shared>,
    Path(key): Path<String>,
) -> Response {
    match app.read(|app| app.engine.site(&app.site)).await {
        Ok(Ok(site)) if key == site.public_key => {
            json_document(ProtectedResourceMetadata::for_site(&site).to_json())
        }
        Ok(Ok(_)) => (StatusCode::NOT_FOUND, "no such resource\n").into_response(),
        Ok(Err(e)) => respond::internal(&e.to_string()),
        Err(r) => r,
    }
}

fn json_document(body: String) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    r
}

/// RFC 7591 §3: 201 with the §3.2.1 body, or 400 with the §3.2.2 error.
pub(crate) async fn register(State(app): State<Shared>, body: Bytes) -> Response {
    let answer = app
        .blocking(move |app| {
            app.engine
                .register_client(&body, &mut rand::rng(), clock::now())
        })
        .await;
    match answer {
        Ok(Ok(registered)) => respond::core(registered.to_response()),
        Ok(Err(e)) => {
            tracing::debug!(error = e.code().as_str(), "registration refused");
            respond::core(HttpResponse::error(&e, None))
        }
        Err(r) => r,
    }
}

/// The authorization URL a form on the page posts back to: this path and
/// the query exactly as received, so the decision re-submits it.
fn self_url(query: &str) -> String {
    format!("/authorize?{query}")
}

/// `GET /authorize`: the core validates the request; a valid one shows the
/// consent page, or the sign-in page at this same URL when there is no
/// session.
pub(crate) async fn authorize(
    State(app): State<Shared>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let query = query.unwrap_or_default();
    let q = query.clone();
    let answer = match with_document(&app, move |app, document| {
        app.engine.authorize(&app.site, &q, document)
    })
    .await
    {
        Ok(a) => a,
        Err(r) => return r,
    };
    match answer {
        AuthorizeAnswer::Consent(screen) => match app.session(&headers) {
            None => respond::html(StatusCode::OK, pages::sign_in(&self_url(&query))),
            Some(session) => respond::html(
                StatusCode::OK,
                pages::consent(
                    &screen,
                    &session.subject,
                    &self_url(&query),
                    &session.csrf_token(&app.session_key),
                ),
            ),
        },
        other => answer_page(other),
    }
}

/// Every answer but the consent screen.
fn answer_page(answer: AuthorizeAnswer) -> Response {
    match answer {
        AuthorizeAnswer::Redirect(url) => respond::core(HttpResponse::redirect(url)),
        AuthorizeAnswer::ShowError(e) => {
            tracing::debug!(
                error = e.code().as_str(),
                "authorization request shown an error"
            );
            respond::html(
                StatusCode::BAD_REQUEST,
                pages::error("This connection request cannot be used", &e.to_string()),
            )
        }
        AuthorizeAnswer::FetchClientDocument(_) => {
            respond::internal("the client's metadata document was asked for twice")
        }
        AuthorizeAnswer::Unavailable { retry_after_secs } => {
            let mut r = respond::html(
                StatusCode::SERVICE_UNAVAILABLE,
                pages::error(
                    "Agents are switched off",
                    "External agents are temporarily switched off for this site. Try again later.",
                ),
            );
            if let Ok(v) = retry_after_secs.to_string().parse() {
                r.headers_mut().insert(header::RETRY_AFTER, v);
            }
            r
        }
        AuthorizeAnswer::Consent(_) => respond::internal("unexpected consent answer"),
    }
}

/// `POST /authorize`: the sign-in form (`intent=signin`) or the consent
/// decision (`intent=allow|deny`, with the session's CSRF token). The query
/// of the URL is the original authorization request, validated again by the
/// core.
pub(crate) async fn decide(
    State(app): State<Shared>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: FormBody,
) -> Response {
    let query = query.unwrap_or_default();
    let Ok(form) = Form::parse(&body.0, BODY_LIMIT) else {
        return browser::bad_form();
    };
    if !app.same_origin(&headers) {
        return browser::cross_site();
    }
    let allow = match form.get("intent") {
        Some("signin") => return app.sign_in(&headers, &form, &self_url(&query)),
        Some("allow") => true,
        Some("deny") => false,
        _ => return browser::bad_form(),
    };
    let Some(session) = app.session(&headers) else {
        return respond::html(StatusCode::UNAUTHORIZED, pages::sign_in(&self_url(&query)));
    };
    if !session.csrf_matches(&app.session_key, form.get("csrf").unwrap_or_default()) {
        return browser::bad_csrf();
    }
    let subject = session.subject.clone();
    let answer = with_document(&app, move |app, document| {
        app.engine.decide(
            &app.site,
            &query,
            document,
            &subject,
            allow,
            &mut rand::rng(),
            clock::now(),
        )
    })
    .await;
    match answer {
        Ok(a) => {
            tracing::debug!(allow, "consent decided");
            answer_page(a)
        }
        Err(r) => r,
    }
}

/// Runs `op` (the core's `authorize` or `decide`) and, when the core asks
/// for the client's metadata document, fetches it ([`super::documents`])
/// and runs `op` again with it. The document is cached only once the core
/// accepted it; a refused one is dropped from the cache. A failed fetch is
/// shown to the user (never redirected) and nothing is cached.
async fn with_document<F>(app: &Shared, op: F) -> Result<AuthorizeAnswer, Response>
where
    F: Fn(&super::App, Option<&[u8]>) -> Result<AuthorizeAnswer, SiteOpError>
        + Send
        + Sync
        + 'static,
{
    let op = std::sync::Arc::new(op);
    let first = std::sync::Arc::clone(&op);
    let answer = match app.blocking(move |app| first(app, None)).await? {
        Ok(a) => a,
        Err(e) => return Err(respond::internal(&e.to_string())),
    };
    let AuthorizeAnswer::FetchClientDocument(request) = answer else {
        return Ok(answer);
    };
    let fetched = match app.documents.get(&request).await {
        Ok(f) => f,
        Err(e) => {
            tracing::debug!(error = e.code(), "client metadata document not fetched");
            return Err(respond::html(
                StatusCode::BAD_REQUEST,
                pages::error("This client cannot be used", &e.to_string()),
            ));
        }
    };
    let body = std::sync::Arc::clone(&fetched.body);
    let answer = match app.blocking(move |app| op(app, Some(&body))).await? {
        Ok(a) => a,
        Err(e) => return Err(respond::internal(&e.to_string())),
    };
    match &answer {
        AuthorizeAnswer::ShowError(_) | AuthorizeAnswer::FetchClientDocument(_) => {
            app.documents.forget(&request.url);
        }
        _ => app.documents.keep(&request.url, &fetched),
    }
    tracing::debug!(
        cached = app.documents.len(),
        "client metadata document used"
    );
    Ok(answer)
}

/// The parts of a form POST the core reads: every `Authorization` value
/// (the core refuses a repeated or non-text one) and the body as text. A
/// body that is not UTF-8 is answered `invalid_request` here, before the
/// core sees it.
#[expect(
    clippy::result_large_err,
    reason = "the refusal is the response itself, sent at once; boxing it buys nothing"
)]
fn form_request(headers: &HeaderMap, body: &Bytes) -> Result<(HeaderValues, String), Response> {
    let refuse = |why| respond::core(HttpResponse::oauth_error(ErrorCode::InvalidRequest, why));
    let authorization = HeaderValues::of(headers, header::AUTHORIZATION);
    let body =
        String::from_utf8(body.to_vec()).map_err(|_| refuse("the request body is not UTF-8"))?;
    Ok((authorization, body))
}

/// `POST /token`: the core's answer, copied.
pub(crate) async fn token(State(app): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let (authorization, body) = match form_request(&headers, &body) {
        Ok(parts) => parts,
        Err(r) => return r,
    };
    let answer = app
        .write(move |app, txn| {
            app.engine.token_in(
                txn,
                &app.site,
                &body,
                authorization.field(),
                &mut rand::rng(),
                clock::now(),
            )
        })
        .await;
    match answer {
        Ok(Ok(tokens)) => {
            tracing::debug!("tokens issued");
            respond::core(tokens.to_response())
        }
        Ok(Err(e)) => {
            tracing::debug!(error = e.code().as_str(), "token request refused");
            respond::core(e.to_response())
        }
        Err(r) => r,
    }
}

/// `POST /revoke` (RFC 7009): 200 with an empty body on success, also for
/// unknown tokens (§2.2).
pub(crate) async fn revoke(State(app): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let (authorization, body) = match form_request(&headers, &body) {
        Ok(parts) => parts,
        Err(r) => return r,
    };
    let answer = app
        .write(move |app, txn| {
            app.engine
                .revoke_token_in(txn, &app.site, &body, authorization.field(), clock::now())
        })
        .await;
    match answer {
        Ok(Ok(())) => {
            tracing::debug!("revocation accepted");
            StatusCode::OK.into_response()
        }
        Ok(Err(e)) => {
            tracing::debug!(error = e.code().as_str(), "revocation refused");
            respond::core(e.to_response())
        }
        Err(r) => r,
    }
}
