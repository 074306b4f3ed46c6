//! Request logging: one span per request with a random request id, the
//! method and the **path only** — never the query (authorization requests
//! carry `state` and PKCE challenges, the open route user data), never a
//! header value (`Authorization`, `Cookie`), never a body (`/token` carries
//! codes, refresh tokens and secrets). The id is echoed in `x-request-id`.

use std::time::Instant;

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument as _;

/// The middleware.
pub(crate) async fn requests(request: Request, next: Next) -> Response {
    let id = portcullis_core::rand::base64url::<6, _>(&mut rand::rng());
    let span = tracing::info_span!(
        "request",
        id = %id,
        method = %request.method(),
        path = %request.uri().path(),
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
