//! [`Engine`]: loads records, runs their pure transitions and writes the
//! results back.
//!
//! Operations come in three kinds:
//!
//! * **site administration** — [`Engine::create_site`],
//!   [`Engine::set_site_enabled`], [`Engine::rotate_site_key`], …;
//! * **endpoints** — [`Engine::authorize`], [`Engine::decide`],
//!   [`Engine::token`], [`Engine::revoke_token`], [`Engine::verify_bearer`]:
//!   each takes the raw request parts an adapter has (query, body,
//!   `Authorization` header) and answers with a typed value that maps to a
//!   complete HTTP response;
//! * **grant management** — listing, revoking and sweeping, and the apps
//!   a grant reaches ([`Engine::granted_apps`], [`Engine::set_granted_apps`],
//!   [`Engine::decide_with_apps`]);
//! * **the execution ledger** — `begin` on the tab or on the server, the
//!   ticket operations, approvals, tab connections and server executors'
//!   leases (see [`crate::ledger`] and [`crate::executor`]).
//!
//! Every operation that changes state comes in two forms: `op(…)` runs in
//! one write transaction of its own and commits it, retrying on a store
//! [`Conflict`](crate::store::StoreErrorKind::Conflict) up to
//! [`MAX_ATTEMPTS`] times; `op_in(&mut txn, …)` applies the same operation
//! to a transaction the caller owns and commits (group commit), under a
//! savepoint so that a store failure leaves nothing of it there. See
//! [operations in a shared
//! transaction](crate::store#operations-in-a-shared-transaction).
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

mod agent;
mod approvals;
mod executor;
mod granted_apps;
mod grants;
pub(crate) mod keys;
mod ledger;
mod oauth;
mod tab;
mod within;

use crate::jwt::Keyring;
use crate::policy::Policy;
use crate::site::{Site, SiteError, SiteId};
use crate::store::{ReadTransaction, Store, StoreError};

pub use agent::{AgentPrincipal, AgentTokenRequest, MintError};
pub use approvals::{MAX_GRANTS_LISTED, MAX_PROMPTS_LISTED};
pub use granted_apps::GrantAppsError;
pub use grants::{BearerRejection, GrantPage, GrantSummary, Principal};
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
/// [`StoreErrorKind::Conflict`] before it answers with that conflict. The
/// core cannot sleep (it reads no clock), so attempts follow each other at
/// once; a store whose conflicts need a pause pauses in `begin_write`.
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
