//! [`Policy`]: every lifetime and limit the core enforces, in one value.
//!
//! The defaults are the product's promises (DESIGN.md); a host may tighten
//! them, and tests shorten them to drive expiry quickly. The policy's value
//! types ([`RateLimit`]) live here too, so every module that enforces a
//! limit depends on `policy` and `policy` on none of them.

use core::time::Duration;

mod rate;

pub use rate::RateLimit;

const MINUTE: u64 = 60;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;

/// Lifetimes and limits. Build with [`Policy::default`] and adjust fields.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Policy {
    /// Lifetime of an access token (JWT `exp - iat`). Default 300 s.
    pub access_token_ttl: Duration,
    /// Lifetime of an authorization code. Default 60 s (RFC 6749 §4.1.2
    /// recommends at most ten minutes).
    pub authorization_code_ttl: Duration,
    /// A grant lapses this long after its last successful refresh. Default 30 days.
    pub grant_idle_ttl: Duration,
    /// A grant lapses this long after its creation, whatever happens. Default 90 days.
    pub grant_absolute_ttl: Duration,
    /// A terminal execution result is kept this long. Default 24 h.
    pub result_retention: Duration,
    /// Undecided requests allowed per connection before the next is refused. Default 128.
    pub max_undecided_requests: u32,
    /// Largest execution result stored, in bytes. Default 256 KiB.
    pub max_result_bytes: u32,
    /// How long after a refresh token was spent (its grant rotated past
    /// it) presenting it again still counts as one of the client's own
    /// processes, which shared the token and lost the race: it is answered
    /// with the grant's current refresh token, nothing revoked (see
    /// [`crate::grant`]). Presented later, it is a replay and revokes the
    /// grant (RFC 9700 §4.14.2). Default 10 minutes: Codex presented a
    /// stale copy 7 min 45 s after rotation, Claude Code sessions within
    /// minutes (docs/clients.md). `Duration::ZERO` is strict rotation:
    /// every spent token revokes.
    pub refresh_reuse_grace: Duration,
    /// Clock skew tolerated on JWT `exp`/`nbf`/`iat`. Default 5 s.
    pub jwt_leeway: Duration,
    /// Per-grant rate of `execute` calls (GCRA). Default one call per 100 ms
    /// with bursts of 32.
    pub execute_rate: RateLimit,
    /// A connected tab that has sent no heartbeat for this long is no longer
    /// live. Default 45 s.
    pub tab_heartbeat_timeout: Duration,
    /// A server executor whose lease was not renewed for this long is no
    /// longer live: its runs are cut off ([`crate::executor`]). Default
    /// 30 s; a host renews well within it.
    pub executor_lease_timeout: Duration,
    /// How long a sealed `requestState` (a multi round-trip request's
    /// state, [`crate::ledger::resume`]) is accepted back: long enough for a
    /// person to answer an approval, short enough to bound its replay
    /// (MCP 2026-07-28, "Multi Round-Trip Requests", server requirements).
    /// Default 15 minutes.
    pub request_state_ttl: Duration,
    /// How long an entry of the activity record is kept
    /// ([`crate::activity`]). Default 90 days; `Duration::ZERO` keeps no
    /// record at all.
    pub activity_retention: Duration,
    /// Whether the activity record keeps each action's argument values
    /// (they may hold personal data); otherwise only their digest. Default
    /// `false`.
    pub activity_arguments: bool,
    /// **Development only.** Also accept client-ID metadata-document URLs
    /// over plain `http` to a loopback host (see
    /// [`crate::client::parse_client_id_url_with`]), so a test can serve the
    /// document itself. Default `false`; never turn it on in production.
    pub loopback_client_documents: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            access_token_ttl: Duration::from_secs(5 * MINUTE),
            authorization_code_ttl: Duration::from_secs(MINUTE),
            grant_idle_ttl: Duration::from_secs(30 * DAY),
            grant_absolute_ttl: Duration::from_secs(90 * DAY),
            result_retention: Duration::from_secs(24 * HOUR),
            max_undecided_requests: 128,
            max_result_bytes: 256 * 1024,
            refresh_reuse_grace: Duration::from_secs(10 * MINUTE),
            jwt_leeway: Duration::from_secs(5),
            execute_rate: RateLimit::new(100, 32),
            tab_heartbeat_timeout: Duration::from_secs(45),
            executor_lease_timeout: Duration::from_secs(30),
            request_state_ttl: Duration::from_secs(15 * MINUTE),
            activity_retention: Duration::from_secs(90 * DAY),
            activity_arguments: false,
            loopback_client_documents: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_promises() {
        let p = Policy::default();
        assert_eq!(p.access_token_ttl.as_secs(), 300);
        assert_eq!(p.authorization_code_ttl.as_secs(), 60);
        assert_eq!(p.grant_idle_ttl.as_secs(), 30 * 86_400);
        assert_eq!(p.grant_absolute_ttl.as_secs(), 90 * 86_400);
        assert_eq!(p.result_retention.as_secs(), 86_400);
        assert_eq!(p.max_undecided_requests, 128);
        assert_eq!(p.max_result_bytes, 262_144);
        assert_eq!(p.refresh_reuse_grace.as_secs(), 600);
        assert_eq!(p.execute_rate, RateLimit::new(100, 32));
        assert_eq!(p.tab_heartbeat_timeout.as_secs(), 45);
        assert_eq!(p.executor_lease_timeout.as_secs(), 30);
        assert_eq!(p.request_state_ttl.as_secs(), 900);
        assert_eq!(p.activity_retention.as_secs(), 90 * 86_400);
        assert!(!p.activity_arguments);
        assert!(!p.loopback_client_documents);
    }
}
