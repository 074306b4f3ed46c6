//! [`Engine`]: loads records, runs their pure transitions and writes the
//! results back.
//!
//! # Which transaction: [`Own`] or the caller's
//!
//! Every operation that writes (marked ✎ below) exists once, and its first
//! argument says which transaction it runs in ([`Within`]):
//!
//! ```
//! use portcullis_core::grant::GrantId;
//! use portcullis_core::site::SiteId;
//! use portcullis_core::store::{Store, StoreError, WriteTransaction};
//! use portcullis_core::{Engine, Own, Timestamp};
//!
//! fn revoke<S: Store>(
//!     engine: &Engine<S>,
//!     site: &SiteId,
//!     grant: &GrantId,
//!     now: Timestamp,
//! ) -> Result<(), StoreError> {
//!     // In a write transaction of its own: opened, run again on a store
//!     // `Conflict` (up to `MAX_ATTEMPTS` times in all), committed.
//!     engine.revoke_grant(Own, grant, now)?;
//!
//!     // In a transaction the caller owns and commits (group commit), each
//!     // under a savepoint: a store failure leaves nothing of it in `txn`.
//!     let mut txn = engine.store().begin_write()?;
//!     engine.revoke_grant(&mut txn, grant, now)?;
//!     engine.revoke_user_grants(&mut txn, site, "alice", now)?;
//!     txn.commit()
//! }
//! ```
//!
//! See [operations in a shared
//! transaction](crate::store#operations-in-a-shared-transaction) for what
//! the caller's form promises. [`Engine::introspect`], which only reads,
//! takes [`Own`] or `&txn`, any read or write transaction ([`WithinRead`]).
//! Every other read runs in a read transaction of its own.
//!
//! # The operations
//!
//! **Sites and keys**
//!
//! * ✎ [`Engine::create_site`]: a new site with a fresh random public key.
//! * [`Engine::site`]: a site as stored.
//! * ✎ [`Engine::update_site`]: a new configuration for a site.
//! * ✎ [`Engine::set_site_enabled`]: the site's off switch; grants are kept.
//! * ✎ [`Engine::rotate_site_key`]: the emergency path, a new public key and
//!   every grant revoked at once.
//! * ✎ [`Engine::revoke_site_grants`]: every grant of a site revoked in O(1).
//!
//! **OAuth endpoints** — each takes the raw request parts an adapter has
//! (query, body, `Authorization` header) and answers with a typed value that
//! maps to a complete HTTP response:
//!
//! * [`Engine::register_client`]: dynamic client registration (RFC 7591),
//!   stateless.
//! * [`Engine::authorize`]: the authorization endpoint, the consent to show.
//! * ✎ [`Engine::decide`]: the user's consent decision, a code on Allow.
//! * ✎ [`Engine::token`]: the token endpoint (code exchange and refresh).
//! * ✎ [`Engine::revoke_token`]: token revocation (RFC 7009).
//! * [`Engine::introspect`]: token introspection (RFC 7662), reads only.
//!
//! **Grants**
//!
//! * [`Engine::verify_bearer`]: checks a protected-resource request's
//!   bearer token (RFC 6750).
//! * [`Engine::grant`], [`Engine::list_user_grants`],
//!   [`Engine::list_site_grants`]: a grant, a page of a user's or a site's.
//! * ✎ [`Engine::revoke_grant`]: one grant, by an administrator.
//! * ✎ [`Engine::revoke_own_grant`]: one grant, by the user who holds it.
//! * ✎ [`Engine::revoke_user_grants`]: every grant of a user on a site.
//! * ✎ [`Engine::sweep`]: expired codes and grants deleted, within a budget.
//!
//! **Granted apps**
//!
//! * [`Engine::granted_apps`]: the apps a grant reaches.
//! * ✎ [`Engine::set_granted_apps`]: the user changes them.
//! * ✎ [`Engine::decide_with_apps`]: [`Engine::decide`] with the apps the
//!   consent chose, in the same transaction.
//!
//! **Agent tokens**
//!
//! * ✎ [`Engine::mint_agent_token`]: a token for an agent, shown once.
//! * [`Engine::list_agent_tokens`]: a user's agent tokens.
//! * ✎ [`Engine::revoke_agent_token`]: one agent token, at once.
//! * [`Engine::verify_agent_token`]: checks a presented agent token.
//!
//! **The execution ledger** (see [`crate::ledger`])
//!
//! * ✎ [`Engine::begin`], [`Engine::begin_needing`]: `execute` a call in the
//!   user's tab (the second with the scopes it needs known first).
//! * ✎ [`Engine::begin_driven`]: a tab run driven by a server executor.
//! * ✎ [`Engine::begin_server`]: a call run on the host's server.
//! * ✎ [`Engine::authorize_action`]: the next action of a run, or why not.
//! * ✎ [`Engine::withdraw_action`]: the authorized action did not run.
//! * ✎ [`Engine::record_outcome`]: the outcome of the authorized action.
//! * ✎ [`Engine::complete`]: the run ends with its result.
//! * [`Engine::outcomes`]: a page of a stored result's outcomes.
//! * [`Engine::request_status`]: where a request stands, read only.
//! * [`Engine::execution_request`]: a request as stored.
//! * ✎ [`Engine::sweep_ledger`]: expired results and records deleted.
//! * ✎ [`Engine::abandon_running`], [`Engine::abandon_running_where`]: the
//!   runs a host lost (all, or those it names) ended at start-up.
//!
//! **Approvals** (see [`crate::approval`])
//!
//! * [`Engine::pending_approvals`]: the prompts waiting on one grant.
//! * [`Engine::pending_approvals_of`]: every prompt waiting for a user.
//! * ✎ [`Engine::decide_approval`]: the user's decision on a prompt.
//!
//! **Tabs** (see [`crate::tab`])
//!
//! * ✎ [`Engine::connect_tab`]: a page connects as a grant's executor.
//! * ✎ [`Engine::take_over_tab`]: "Use this tab".
//! * ✎ [`Engine::tab_heartbeat`]: the connected page is alive (and visible).
//! * ✎ [`Engine::disconnect_tab`]: the connected page disconnects.
//! * ✎ [`Engine::reset_session`]: sign-out ends a browser session's tabs.
//! * [`Engine::tab_connection`]: a grant's tab connection.
//! * [`Engine::dispatch`]: where an action would be dispatched now.
//!
//! **Server executors** (see [`crate::executor`])
//!
//! * ✎ [`Engine::start_executor`]: a new executor number and its lease.
//! * ✎ [`Engine::renew_executor`]: the lease's heartbeat.
//! * ✎ [`Engine::stop_executor`]: the lease ends, its runs are cut off.
//! * [`Engine::executor_lease`]: an executor's live lease.
//! * ✎ [`Engine::sweep_executors`]: long-lapsed leases deleted.
//! * ✎ [`Engine::end_lost_runs`]: the server runs of lost executors ended.
//!
//! **Stored App Views** (see [`crate::apps`])
//!
//! * [`Engine::app_view`], [`Engine::app_views`]: a user's stored Views.
//! * ✎ [`Engine::create_app_view`], [`Engine::save_app_view`],
//!   [`Engine::delete_app_view`]: store, update (over the revision read),
//!   delete a View.
//! * ✎ [`Engine::send_context`]: the user's selected context to the agents.
//! * ✎ [`Engine::take_deliveries`]: what waits for an agent, handed once.
//! * [`Engine::has_deliveries`]: whether anything waits.
//!
//! **Activity** (see [`crate::activity`])
//!
//! * [`Engine::user_activity`]: a user's activity, newest first.
//! * [`Engine::activity_export`]: the operator's export of a site's.
//!
//! # Where the operations are written
//!
//! The engine's own modules hold the sites and keys, the OAuth endpoints,
//! the grants and the execution ledger. A concept with a module of its own
//! keeps its types and pure rules there, and that module never imports the
//! engine; its operations are in its child module `ops` (`tab::ops`,
//! `executor::ops`, `ledger::approval::ops`, `agent_token::ops`,
//! `granted_apps::ops`, `activity::ops`; the stored Views' in
//! `apps::stored`), which builds on both. So the engine imports the concepts
//! and no module imports one that imports it back. The key layout the two
//! sides share is the store's (`store::keys`).
//!
//! # Rules every operation keeps
//!
//! Every operation that needs the time takes `now`; every one that needs
//! randomness takes a [`CryptoRng`](rand_core::CryptoRng). Nothing here reads
//! a clock or draws entropy of its own.
//!
//! An operation decides before it writes. A rejection writes nothing —
//! unless the rejection itself must be recorded (a spent refresh token
//! revokes its grant), in which case that write commits with the answer. A
//! transaction that wrote nothing is dropped, not committed, so rejections
//! cost no fsync; one in which the store failed is dropped whole.

pub(crate) mod grants;
pub(crate) mod ledger;
mod oauth;
mod within;

use crate::jwt::Keyring;
use crate::policy::Policy;
use crate::site::{Site, SiteError, SiteId};
use crate::store::{ReadTransaction, Store, StoreError};

pub use crate::agent_token::{AgentPrincipal, AgentTokenRequest, MintError};
pub use crate::approval::{MAX_GRANTS_LISTED, MAX_PROMPTS_LISTED};
pub use crate::bearer::Principal;
pub use crate::granted_apps::GrantAppsError;
pub use grants::{BearerRejection, GrantPage, GrantSummary};
pub use ledger::{AbandonCursor, Abandoned, RequestStatus};
pub use oauth::RevokeError;
pub(crate) use within::Txn;
pub use within::{Own, Within, WithinRead};

/// The policy engine over a store `S`.
///
/// Cheap to construct: to rotate signing keys, build a new engine with the
/// new [`Keyring`] over the same store (`&S` and `Arc<S>` are stores too).
#[derive(Debug)]
pub struct Engine<S> {
    store: S,
    keyring: Keyring,
    policy: Policy,
}

impl<S: Store> Engine<S> {
    /// An engine over `store`, signing with `keyring`, enforcing `policy`.
    pub fn new(store: S, keyring: Keyring, policy: Policy) -> Self {
        Self {
            store,
            keyring,
            policy,
        }
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The keyring.
    pub fn keyring(&self) -> &Keyring {
        &self.keyring
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }
}

/// How many times [`Engine`] runs an operation whose transaction hit a
/// [`StoreErrorKind::Conflict`](crate::store::StoreErrorKind::Conflict)
/// before it answers with that conflict. The core cannot sleep (it reads no
/// clock), so attempts follow each other at once; a store whose conflicts
/// need a pause pauses in `begin_write`.
pub const MAX_ATTEMPTS: u32 = 8;

/// Loads a site or fails with [`SiteError::NotFound`].
pub(crate) fn load_site<R: ReadTransaction>(txn: &R, id: &SiteId) -> Result<Site, SiteOpError> {
    txn.load::<Site>(id.as_str().as_bytes())?
        .ok_or(SiteOpError::Site(SiteError::NotFound))
}

/// A site operation failed.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SiteOpError {
    /// The site refused.
    Site(SiteError),
    /// The store failed; nothing changed.
    Store(StoreError),
}

impl From<StoreError> for SiteOpError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl From<SiteError> for SiteOpError {
    fn from(e: SiteError) -> Self {
        Self::Site(e)
    }
}

impl core::fmt::Display for SiteOpError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Site(e) => write!(f, "{e}"),
            Self::Store(e) => write!(f, "{e}"),
        }
    }
}

impl crate::error::WireError for SiteOpError {
    fn code(&self) -> crate::error::ErrorCode {
        match self {
            Self::Site(e) => e.code(),
            Self::Store(e) => e.code(),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for SiteOpError {}
