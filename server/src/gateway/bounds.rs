//! The gateway's bounds on its sources: how long a connect and a call may
//! take, how large one answer may be, and how many calls one source may
//! have in flight. A misbehaving source (slow, silent, flooding) costs at
//! most these, and never more than its own share.
//!
//! The size cap is enforced while reading, before anything is parsed: by
//! rmcp's Streamable HTTP client (one JSON body, one SSE event) and by its
//! line codec on stdio (one line). The timeouts wrap every future that waits
//! on a source, and the concurrency cap is a semaphore per source.

use std::future::Future;
use std::time::Duration;

use crate::cli::GatewayArgs;

/// The bounds every source gets (from the `serve` flags).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    /// Connecting and `initialize`.
    pub(crate) connect: Duration,
    /// One call (tool, read, listing page).
    pub(crate) call: Duration,
    /// One answer, in bytes.
    pub(crate) max_response: usize,
    /// Calls in flight per source.
    pub(crate) max_concurrent: usize,
}

impl Bounds {
    /// The bounds the flags ask for.
    pub(crate) fn of(args: &GatewayArgs) -> Self {
        Self {
            connect: Duration::from_secs(args.source_connect_timeout_secs),
            call: Duration::from_secs(args.source_call_timeout_secs),
            max_response: usize::try_from(args.source_max_response_bytes).unwrap_or(usize::MAX),
            max_concurrent: usize::try_from(args.source_max_concurrent).unwrap_or(16),
        }
    }
}

/// Why a bounded wait ended without an answer.
#[derive(Debug)]
pub(crate) enum Exceeded {
    /// The deadline passed.
    Timeout,
}

/// Runs `f` for at most `limit`.
pub(crate) async fn within<T>(limit: Duration, f: impl Future<Output = T>) -> Result<T, Exceeded> {
    tokio::time::timeout(limit, f)
        .await
        .map_err(|_| Exceeded::Timeout)
}

/// The delay before reconnect attempt `attempt` (0-based): 0.5 s doubling
/// to at most 30 s.
pub(crate) fn backoff(attempt: u32) -> Duration {
    let ms = 500u64.saturating_mul(1u64 << attempt.min(6));
    Duration::from_millis(ms.min(30_000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_cap() {
        assert_eq!(backoff(0), Duration::from_millis(500));
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(5), Duration::from_secs(16));
        assert_eq!(backoff(6), Duration::from_secs(30));
        assert_eq!(backoff(40), Duration::from_secs(30));
    }

    #[tokio::test]
    async fn within_times_out() {
        let slow = within(Duration::from_millis(10), std::future::pending::<()>()).await;
        assert!(matches!(slow, Err(Exceeded::Timeout)));
        assert_eq!(
            within(Duration::from_secs(1), async { 7 }).await.unwrap(),
            7
        );
    }
}
