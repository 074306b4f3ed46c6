//! The protected resource at `/mcp/{key}`.
//!
//! **Phase 1:** the endpoint only verifies the bearer token through the core
//! (an OAuth access token, or a minted agent token) and answers `200` with
//! `{"subject", "scopes", "client_id"|"jti"}`; refusals copy the core's
//! challenge (`401`/`403` with `WWW-Authenticate`) or `503` with
//! `Retry-After`. Phase 2 replaces the success path with the MCP server
//! (rmcp, Streamable HTTP).

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use portcullis_core::bearer;
use portcullis_core::engine::BearerRejection;
use portcullis_core::error::{ErrorCode, WireError as _};
use portcullis_core::http::HttpResponse;
use portcullis_core::scope::{SKILLS_READ, ScopeSet};
use serde_json::json;

use super::{Shared, respond};
use crate::clock;

/// The scope every phase-1 request needs.
fn required() -> ScopeSet {
    ScopeSet::parse(SKILLS_READ).unwrap_or_default()
}

/// `ANY /mcp`: a `307` to the current MCP URL (the path carries the site's
/// public key, which rotation changes).
pub(crate) async fn current(State(app): State<Shared>) -> Response {
    match app.blocking(|app| app.engine.site(&app.site)).await {
        Ok(Ok(site)) => {
            let mut r = StatusCode::TEMPORARY_REDIRECT.into_response();
            if let Ok(v) = format!("/mcp/{}", site.public_key).parse() {
                r.headers_mut().insert(header::LOCATION, v);
            }
            r
        }
        Ok(Err(e)) => respond::internal(&e.to_string()),
        Err(r) => r,
    }
}

/// What the endpoint decided.
enum Verdict {
    NoSuchKey,
    Rejected(BearerRejection),
    Accepted(serde_json::Value),
}

/// `ANY /mcp/{key}`.
pub(crate) async fn endpoint(
    State(app): State<Shared>,
    Path(key): Path<String>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    if let Err(e) = bearer::refuse_query_token(query.as_deref()) {
        return respond::core(HttpResponse::oauth_error(e.code(), &e.to_string()));
    }
    // A header that is not visible ASCII is passed on as a malformed one.
    let authorization = respond::header_text(&headers, header::AUTHORIZATION)
        .unwrap_or_else(|()| Some(String::from("\u{fffd}")));
    let verdict = app
        .blocking(move |app| {
            let site = match app.engine.site(&app.site) {
                Ok(site) => site,
                Err(e) => return Err(e.to_string()),
            };
            if key != site.public_key {
                return Ok(Verdict::NoSuchKey);
            }
            let now = clock::now();
            let auth = authorization.as_deref();
            let first = match app.engine.verify_bearer(&app.site, auth, &required(), now) {
                Ok(p) => {
                    return Ok(Verdict::Accepted(json!({
                        "subject": p.subject,
                        "scopes": p.scopes.to_string(),
                        "client_id": p.client_id,
                    })));
                }
                Err(r) => r,
            };
            // Not an access token: it may be a minted agent token.
            if let BearerRejection::Challenge(c) = &first
                && c.error == Some(ErrorCode::InvalidToken)
            {
                match app
                    .engine
                    .verify_agent_token(&app.site, auth, &required(), now)
                {
                    Ok(p) => {
                        return Ok(Verdict::Accepted(json!({
                            "subject": p.subject,
                            "scopes": p.scopes.to_string(),
                            "jti": p.jti,
                        })));
                    }
                    Err(BearerRejection::Challenge(c2))
                        if c2.error == Some(ErrorCode::InsufficientScope) =>
                    {
                        return Ok(Verdict::Rejected(BearerRejection::Challenge(c2)));
                    }
                    Err(_) => {}
                }
            }
            Ok(Verdict::Rejected(first))
        })
        .await;
    let verdict = match verdict {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => return respond::internal(&e),
        Err(r) => return r,
    };
    match verdict {
        Verdict::NoSuchKey => (StatusCode::NOT_FOUND, "no such MCP endpoint\n").into_response(),
        Verdict::Accepted(body) => {
            tracing::info!("bearer accepted");
            respond::core(HttpResponse::json(200, &body))
        }
        Verdict::Rejected(rejection) => {
            let error = match &rejection {
                BearerRejection::Challenge(c) => c.error.map_or("none", ErrorCode::as_str),
                other => other.code().as_str(),
            };
            tracing::info!(status = rejection.http_status(), error, "bearer refused");
            match rejection {
                BearerRejection::Challenge(c) => respond::core(HttpResponse {
                    status: c.status,
                    headers: vec![("www-authenticate", c.www_authenticate)],
                    body: String::new(),
                }),
                BearerRejection::Unavailable { retry_after_secs } => respond::core(
                    HttpResponse::oauth_error(
                        ErrorCode::TemporarilyUnavailable,
                        &rejection.to_string(),
                    )
                    .with_header("retry-after", retry_after_secs.to_string()),
                ),
                BearerRejection::UnknownSite => {
                    (StatusCode::NOT_FOUND, "no such site\n").into_response()
                }
                other => respond::internal(&other.to_string()),
            }
        }
    }
}
