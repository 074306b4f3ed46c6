//! Request logging: **one INFO line per request** (`served`: request id,
//! method, route, status, latency); everything else a request logs is at
//! DEBUG, inside the request's span so it carries the same id. The route is
//! the matched route pattern (`/mcp/{key}`), not the path, and never the
//! query (authorization requests
//! carry `state` and PKCE challenges, the open route user data), never a
//! header value (`Authorization`, `Cookie`), never a body (`/token` carries
//! codes, refresh tokens and secrets). The id is echoed in `x-request-id`.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument as _;

/// The middleware.
pub(crate) async fn requests(request: Request, next: Next) -> Response {
    let id = portcullis_core::rand::base64url::<6, _>(&mut rand::rng());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("-", MatchedPath::as_str)
        .to_owned();
    let span = tracing::info_span!(
        "request",
        id = %id,
        method = %request.method(),
        route = %route,
    );
    let start = Instant::now();
    let mut response = next.run(request).instrument(span.clone()).await;
    span.in_scope(|| {
        tracing::info!(
            status = response.status().as_u16(),
            micros = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX),
            "served"
        );
    });
    if let Ok(v) = HeaderValue::try_from(id) {
        response.headers_mut().insert("x-request-id", v);
    }
    response
}
