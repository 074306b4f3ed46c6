//! The request body's idle timeout, a production layer for any host: a
//! body that has sent nothing for its timeout while a handler waits for it
//! fails (the handler's extractor answers `4xx`), so a client cannot hold a
//! request open by stalling its body. (A body dribbled a byte at a time
//! resets it; a whole-request timeout, such as tower-http's
//! `TimeoutLayer`, bounds that.)
//!
//! ```
//! use std::time::Duration;
//! use portcullis_axum::body_timeout::BodyIdleTimeoutLayer;
//!
//! let app: axum::Router = axum::Router::new()
//!     .layer(BodyIdleTimeoutLayer::new(Duration::from_secs(10)));
//! ```
//!
//! The bound is tower-http's `RequestBodyTimeoutLayer`'s; what differs is
//! when the timer exists. That layer arms a timer before every poll of a
//! frame and drops it after (two timer-wheel insertions and removals for a
//! small body: its data, then its end). Here the body is polled first and
//! the timer is armed only when the body has nothing ready, which is the
//! only time a client can stall. A body that arrived with its head, as a
//! small JSON-RPC or form body does, never touches the timer wheel. The
//! timer, once armed, runs until a frame arrives, so the time a body may
//! go without sending anything is the same.

use std::error::Error;
use std::fmt;
use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::BoxError;
use axum::body::HttpBody;
use axum::http::Request;
use http_body::{Frame, SizeHint};
use tokio::time::Sleep;
use tower::{Layer, Service};

/// The layer: wraps every request's body in an [`IdleTimeoutBody`].
#[derive(Clone, Copy, Debug)]
pub struct BodyIdleTimeoutLayer {
    timeout: Duration,
}

impl BodyIdleTimeoutLayer {
    /// Fails a body that sends nothing for `timeout`.
    #[must_use]
    pub fn new(timeout: Duration) -> Self {
        Self { timeout }
    }
}

impl<S> Layer<S> for BodyIdleTimeoutLayer {
    type Service = BodyIdleTimeout<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BodyIdleTimeout {
            inner,
            timeout: self.timeout,
        }
    }
}

/// The service of [`BodyIdleTimeoutLayer`].
#[derive(Clone, Copy, Debug)]
pub struct BodyIdleTimeout<S> {
    inner: S,
    timeout: Duration,
}

impl<S, B> Service<Request<B>> for BodyIdleTimeout<S>
where
    S: Service<Request<IdleTimeoutBody<B>>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let timeout = self.timeout;
        self.inner
            .call(request.map(|body| IdleTimeoutBody::new(timeout, body)))
    }
}

/// A body that fails once it has had nothing ready for its timeout.
pub struct IdleTimeoutBody<B> {
    body: B,
    timeout: Duration,
    /// Armed when a poll found nothing ready; dropped when a frame comes.
    /// Boxed so that the body stays `Unpin` and the common case, a body
    /// that is never waited for, allocates nothing.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<B> IdleTimeoutBody<B> {
    /// `body`, failing once it has had nothing ready for `timeout`.
    #[must_use]
    pub fn new(timeout: Duration, body: B) -> Self {
        Self {
            body,
            timeout,
            stalled: None,
        }
    }
}

impl<B> HttpBody for IdleTimeoutBody<B>
where
    B: HttpBody + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            this.stalled = None;
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let timeout = this.timeout;
        let stalled = this
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimedOut)))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The error of a body that stalled for its whole timeout.
#[derive(Debug)]
pub struct BodyTimedOut;

impl fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the request body sent nothing within the body timeout")
    }
}

impl Error for BodyTimedOut {}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use super::*;
    use axum::body::{Body, Bytes};
    use http_body_util::BodyExt as _;

    /// A body whose one data frame comes after a delay.
    struct Late {
        wait: Pin<Box<Sleep>>,
        sent: bool,
    }

    fn late(delay: Duration) -> Late {
        Late {
            wait: Box::pin(tokio::time::sleep(delay)),
            sent: false,
        }
    }

    impl HttpBody for Late {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            if self.sent {
                return Poll::Ready(None);
            }
            std::task::ready!(self.wait.as_mut().poll(cx));
            self.sent = true;
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"late")))))
        }
    }

    #[tokio::test]
    async fn a_body_that_comes_within_the_timeout_is_read() {
        let body = IdleTimeoutBody::new(Duration::from_secs(5), late(Duration::from_millis(20)));
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"late");
    }

    #[tokio::test]
    async fn a_body_that_stalls_past_the_timeout_fails() {
        let body = IdleTimeoutBody::new(Duration::from_millis(20), late(Duration::from_secs(5)));
        let error = body.collect().await.unwrap_err();
        assert!(error.is::<BodyTimedOut>(), "{error}");
    }

    #[tokio::test]
    async fn a_body_that_is_ready_arms_no_timer() {
        let mut body = IdleTimeoutBody::new(Duration::from_secs(1), Body::from("ready"));
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), "ready");
        assert!(body.stalled.is_none());
        assert!(body.frame().await.is_none());
        assert!(body.stalled.is_none());
    }
}
