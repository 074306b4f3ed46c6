//! The gateway's bounds on its sources: how long a connect and a call may
//! take, how large one answer may be, how many calls one source may have in
//! flight, how much one source may list, and how often its lists are read
//! again. A misbehaving source (slow, silent, flooding, listing without
//! end) costs at most these, and never more than its own share.
//!
//! The size cap is enforced while reading, before anything is parsed: by
//! rmcp's Streamable HTTP client (one JSON body, one SSE event) and on stdio
//! by `stdio`'s capped lines (one line). The timeouts wrap every future that waits
//! on a source, and the concurrency cap is a semaphore per source. The
//! listing caps ([`MAX_TOOLS`], [`MAX_RESOURCES`], [`MAX_TEMPLATES`],
//! [`MAX_LIST_BYTES`], [`MAX_PAGES`]) are applied while a source's lists
//! are read, page by page, so a source that lists without end is cut off
//! (with a log line) rather than held in memory.

use std::future::Future;
use std::time::Duration;

use crate::Config;

/// The most tools one source may offer; the rest are left out (logged).
pub(crate) const MAX_TOOLS: usize = 1024;
/// The most tool names one source may own over the life of the process
/// (room to replace a full list of [`MAX_TOOLS`] once): a name stays its
/// owner's when it is no longer listed, so without this a source that
/// keeps listing new names would grow the gateway's table of names without
/// end. New names past it are refused, with a log line.
pub(crate) const MAX_TOOL_NAMES: usize = 2 * MAX_TOOLS;
/// How long after the start the names other sources list for the first
/// time wait for the sources that were not ready at the start (see
/// `Names`): long enough for a late source's first few connection attempts
/// (10, 20, 40 and 80 s by default, with backoff between them).
pub(crate) const RESERVE_NAMES_FOR: Duration = Duration::from_mins(5);
/// The most resources one source may list (also the most URIs kept for
/// rewriting its text bodies).
pub(crate) const MAX_RESOURCES: usize = 4096;
/// The most resource templates one source may list.
pub(crate) const MAX_TEMPLATES: usize = 1024;
/// The most bytes (as JSON, once mapped) of one source's tools, of its
/// resources and of its templates, each.
pub(crate) const MAX_LIST_BYTES: usize = 4 * 1024 * 1024;
/// The most pages read of one listing.
pub(crate) const MAX_PAGES: usize = 256;
/// The least time between two readings of a source's lists: its
/// `list_changed` notifications within it are taken together.
pub(crate) const RELIST_EVERY: Duration = Duration::from_secs(2);
/// How long lists are served from the cache before the supervisor reads
/// them again (for sources that never say that their lists changed).
pub(crate) const RELIST_AFTER: Duration = Duration::from_mins(1);
/// More notifications than this from one source within one second is a
/// flood: the connection is dropped and made again (with backoff).
pub(crate) const MAX_NOTIFICATIONS_PER_SEC: u32 = 256;

/// The bounds every source gets (from the [`Config`]).
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
    /// The bounds `config` asks for (a value below the least usable bound
    /// is raised to it).
    pub(crate) fn of(config: &Config) -> Self {
        Self {
            connect: config.connect_timeout.max(Duration::from_secs(1)),
            call: config.call_timeout.max(Duration::from_secs(1)),
            max_response: config.max_response_bytes.max(1024),
            max_concurrent: config.max_concurrent.max(1),
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

/// Whether a failed call hit the answer size cap. rmcp reports it as a
/// transport error (`ResponseBodyTooLarge` for a JSON body,
/// `EventTooLarge` for an SSE event, the latter in a private type), so the
/// error chain's messages are searched for the phrase both share.
pub(crate) fn too_large(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(e) = next {
        if e.to_string().contains("exceeded the maximum size") {
            return true;
        }
        next = e.source();
    }
    false
}

/// The delay before reconnect attempt `attempt` (0-based): 0.5 s doubling
/// to at most 30 s.
pub(crate) fn backoff(attempt: u32) -> Duration {
    let ms = 500u64.saturating_mul(1u64 << attempt.min(6));
    Duration::from_millis(ms.min(30_000))
}

impl Bounds {
    /// How long connect attempt `attempt` (0-based, counted since the last
    /// success) may take: the connect timeout, doubling with each failed
    /// attempt to at most eight times it. A source that starts slowly (a
    /// cold `npx` cache, a loaded machine) gets there in the end instead of
    /// being cut off at the same point every time.
    pub(crate) fn connect_wait(&self, attempt: u32) -> Duration {
        self.connect.saturating_mul(1 << attempt.min(3))
    }
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

    #[test]
    fn the_connect_wait_grows_to_a_bound() {
        let b = Bounds::of(&Config {
            connect_timeout: Duration::from_secs(10),
            ..Config::default()
        });
        let waits: Vec<u64> = (0..6).map(|a| b.connect_wait(a).as_secs()).collect();
        assert_eq!(waits, [10, 20, 40, 80, 80, 80]);
        assert_eq!(b.connect_wait(u32::MAX), Duration::from_secs(80));
    }

    #[test]
    fn the_size_cap_is_found_in_an_error_chain() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("Transport send error")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let inner = "SSE event exceeded the maximum size of 65536 bytes";
        assert!(too_large(&Outer(std::io::Error::other(inner))));
        assert!(!too_large(&Outer(std::io::Error::other(
            "connection refused"
        ))));
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
