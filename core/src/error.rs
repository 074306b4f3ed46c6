//! Stable wire codes and the HTTP status each maps to, in one place.
//!
//! Every operation has its own error enum (`VerifyError`, `ParseVerifierError`,
//! …), `#[non_exhaustive]` with a hand-written `Display`. Each implements
//! [`WireError`], naming one [`ErrorCode`]; the code alone decides the string
//! a client sees and the status an adapter sends, so the mapping cannot drift
//! between operations.
//!
//! OAuth codes follow RFC 6749 §4.1.2.1 and §5.2, RFC 6750 §3.1 and RFC 7591
//! §3.2.2; the upper-case execution codes are the client taxonomy of the
//! agent protocol (see the `ledger` documentation for what a client does with
//! each).

use core::fmt;

/// A stable, machine-readable error code.
///
/// The string form ([`ErrorCode::as_str`]) is part of the public contract:
/// it never changes for an existing variant.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorCode {
    /// RFC 6749 §5.2: a malformed or ambiguous request.
    InvalidRequest,
    /// RFC 6749 §5.2: client authentication failed.
    InvalidClient,
    /// RFC 6749 §5.2: the code or refresh token is invalid, expired or spent.
    InvalidGrant,
    /// RFC 6749 §5.2: the client may not use this grant type.
    UnauthorizedClient,
    /// RFC 6749 §5.2: the grant type is not supported.
    UnsupportedGrantType,
    /// RFC 6749 §4.1.2.1: the response type is not supported.
    UnsupportedResponseType,
    /// RFC 6749 §5.2: the requested scope is unknown or wider than granted.
    InvalidScope,
    /// RFC 8707 §2: the `resource` is not one this server protects.
    InvalidTarget,
    /// RFC 6749 §4.1.2.1: the user or server denied the request.
    AccessDenied,
    /// RFC 6749 §4.1.2.1: the service is switched off for now; retry later.
    TemporarilyUnavailable,
    /// RFC 6749 §4.1.2.1: an unexpected internal failure (storage).
    ServerError,
    /// RFC 6750 §3.1: the bearer token is missing, malformed, expired or revoked.
    InvalidToken,
    /// RFC 6750 §3.1: the token lacks a scope the request needs.
    InsufficientScope,
    /// RFC 7591 §3.2.2: a redirect URI breaks the redirect policy.
    InvalidRedirectUri,
    /// RFC 7591 §3.2.2: some client metadata is invalid.
    InvalidClientMetadata,
    /// The requested action does not exist.
    ActionNotFound,
    /// The action exists but cannot run now.
    ActionUnavailable,
    /// The call's parameters are malformed.
    InvalidParams,
    /// A precondition the caller stated did not hold.
    ExpectationFailed,
    /// The user denied the action.
    PermissionDenied,
    /// The session (grant) expired; reconnect.
    SessionExpired,
    /// The session (grant) was revoked; reconnect.
    SessionRevoked,
    /// Too many calls; retry after the stated delay.
    RateLimited,
    /// The request id was reused with different code.
    ReplayDetected,
    /// No connected tab can run the call.
    NoLiveTab,
    /// The action drives page controls and the tab is hidden.
    TabNotVisible,
    /// The stored result of this request id has expired.
    ResultExpired,
    /// A link, path or URI was rejected by a guard.
    InvalidLink,
    /// A gateway's downstream MCP server is not reachable now; its tools
    /// and resources come back when it does.
    SourceUnavailable,
}

impl ErrorCode {
    /// The stable string a client sees.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid_request",
            Self::InvalidClient => "invalid_client",
            Self::InvalidGrant => "invalid_grant",
            Self::UnauthorizedClient => "unauthorized_client",
            Self::UnsupportedGrantType => "unsupported_grant_type",
            Self::UnsupportedResponseType => "unsupported_response_type",
            Self::InvalidScope => "invalid_scope",
            Self::InvalidTarget => "invalid_target",
            Self::AccessDenied => "access_denied",
            Self::TemporarilyUnavailable => "temporarily_unavailable",
            Self::ServerError => "server_error",
            Self::InvalidToken => "invalid_token",
            Self::InsufficientScope => "insufficient_scope",
            Self::InvalidRedirectUri => "invalid_redirect_uri",
            Self::InvalidClientMetadata => "invalid_client_metadata",
            Self::ActionNotFound => "ACTION_NOT_FOUND",
            Self::ActionUnavailable => "ACTION_UNAVAILABLE",
            Self::InvalidParams => "INVALID_PARAMS",
            Self::ExpectationFailed => "EXPECTATION_FAILED",
            Self::PermissionDenied => "PERMISSION_DENIED",
            Self::SessionExpired => "SESSION_EXPIRED",
            Self::SessionRevoked => "SESSION_REVOKED",
            Self::RateLimited => "RATE_LIMITED",
            Self::ReplayDetected => "REPLAY_DETECTED",
            Self::NoLiveTab => "no_live_tab",
            Self::TabNotVisible => "tab_not_visible",
            Self::ResultExpired => "result_expired",
            Self::InvalidLink => "invalid_link",
            Self::SourceUnavailable => "source_unavailable",
        }
    }

    /// The HTTP status an adapter sends with this code.
    ///
    /// OAuth endpoint errors are 400 (RFC 6749 §5.2) except `invalid_client`
    /// (401); bearer errors follow RFC 6750 §3.1; the off switch is 503 so
    /// clients keep their credentials.
    #[must_use]
    pub const fn http_status(self) -> u16 {
        match self {
            Self::InvalidClient
            | Self::InvalidToken
            | Self::SessionExpired
            | Self::SessionRevoked => 401,
            Self::InsufficientScope | Self::PermissionDenied | Self::AccessDenied => 403,
            Self::ActionNotFound => 404,
            Self::ReplayDetected => 409,
            Self::ResultExpired => 410,
            Self::ExpectationFailed => 417,
            Self::RateLimited => 429,
            Self::ServerError => 500,
            Self::TemporarilyUnavailable
            | Self::ActionUnavailable
            | Self::NoLiveTab
            | Self::SourceUnavailable => 503,
            Self::InvalidRequest
            | Self::InvalidGrant
            | Self::UnauthorizedClient
            | Self::UnsupportedGrantType
            | Self::UnsupportedResponseType
            | Self::InvalidScope
            | Self::InvalidTarget
            | Self::InvalidRedirectUri
            | Self::InvalidClientMetadata
            | Self::InvalidParams
            | Self::TabNotVisible
            | Self::InvalidLink => 400,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error that maps to one stable wire code.
///
/// Implemented by every per-operation error enum. The default
/// [`WireError::http_status`] comes from the code; no implementation
/// overrides it, so the table in [`ErrorCode::http_status`] is the only one.
pub trait WireError: fmt::Display {
    /// The stable code of this error.
    fn code(&self) -> ErrorCode;

    /// The HTTP status an adapter sends.
    fn http_status(&self) -> u16 {
        self.code().http_status()
    }
}
