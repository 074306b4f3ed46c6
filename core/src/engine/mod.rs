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

use alloc::vec::Vec;
use core::cell::Cell;
use core::ops::Bound;

use crate::jwt::Keyring;
use crate::policy::Policy;
use crate::site::{Site, SiteError, SiteId};
use crate::store::{
    Entry, ReadTransaction, Savepoint, Store, StoreError, StoreErrorKind, Table, WriteTransaction,
};

pub use agent::{AgentPrincipal, AgentTokenRequest, MintError};
pub use approvals::{MAX_GRANTS_LISTED, MAX_PROMPTS_LISTED};
pub use granted_apps::GrantAppsError;
pub use grants::{BearerRejection, GrantPage, GrantSummary, Principal};
pub use ledger::{AbandonCursor, Abandoned, RequestStatus};
pub use oauth::RevokeError;

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

    /// Runs `f` in one write transaction and commits what it wrote — also
    /// when `f` answers with an error, since a decided rejection may have
    /// recorded something (a revocation) — unless the store itself failed,
    /// in which case the transaction is discarded whole and the store's
    /// error is the answer.
    ///
    /// When the store reports a [`StoreErrorKind::Conflict`] (an optimistic
    /// store lost a race, at any read, write or the commit), the
    /// transaction is discarded and `f` runs again on a fresh one, up to
    /// [`MAX_ATTEMPTS`] times in all. `f` must therefore be re-runnable: it
    /// takes its inputs by reference or clones them per attempt, and every
    /// effect it has goes through the transaction, so a discarded attempt
    /// leaves nothing behind (random draws are spent, which is harmless).
    pub(crate) fn run_write<T, E: From<StoreError>>(
        &self,
        mut f: impl FnMut(&mut Txn<'_, S::Write<'_>>) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut out = None;
        match self.attempt_writes(&mut |txn| out = Some(f(txn))) {
            Some(failure) => Err(failure.into()),
            None => out.expect("an attempt that did not fail ran the operation"),
        }
    }

    /// The attempts of [`Engine::run_write`], compiled once per store
    /// rather than once per operation: `f` keeps its own answer, and this
    /// answers with the store's failure of the last attempt, if it failed
    /// (then `f` may not have run).
    fn attempt_writes<'s>(
        &'s self,
        f: &mut dyn FnMut(&mut Txn<'_, S::Write<'s>>),
    ) -> Option<StoreError> {
        let mut attempt = 1;
        loop {
            let mut write = match self.store.begin_write() {
                Ok(w) => w,
                Err(e) if e.kind() == StoreErrorKind::Conflict && attempt < MAX_ATTEMPTS => {
                    attempt += 1;
                    continue;
                }
                Err(e) => return Some(e),
            };
            let (failure, dirty) = {
                let mut txn = Txn::new(&mut write);
                f(&mut txn);
                (txn.failure.take(), txn.dirty)
            };
            if let Some(e) = failure {
                // The store failed under `f`: its error is the answer (the
                // operation answered with it too), and nothing commits.
                if e.kind() == StoreErrorKind::Conflict && attempt < MAX_ATTEMPTS {
                    attempt += 1;
                    continue;
                }
                return Some(e);
            }
            if dirty {
                match write.commit() {
                    Ok(()) => {}
                    Err(e) if e.kind() == StoreErrorKind::Conflict && attempt < MAX_ATTEMPTS => {
                        attempt += 1;
                        continue;
                    }
                    Err(e) => return Some(e),
                }
            }
            return None;
        }
    }

    /// Applies one operation body to `txn`, a transaction someone else
    /// owns, atomically: a savepoint first, and if the store fails under
    /// `f` a rollback to it, so the failed operation leaves nothing in
    /// `txn`; the answer is then the store's error, even where `f` went on
    /// or swallowed it. A decided answer (success or refusal) keeps what
    /// `f` wrote. If the rollback itself fails, that failure is the answer
    /// and `txn` is lost: its owner must drop it, not commit it.
    pub(crate) fn within<W: WriteTransaction, T, E: From<StoreError>>(
        txn: &mut W,
        f: impl FnOnce(&mut Txn<'_, W>) -> Result<T, E>,
    ) -> Result<T, E> {
        let mark = txn.savepoint()?;
        let (out, failure) = {
            let mut t = Txn::new(txn);
            let out = f(&mut t);
            (out, t.failure.take())
        };
        match failure {
            None => out,
            Some(e) => {
                txn.rollback_to(mark)?;
                Err(e.into())
            }
        }
    }

    /// Runs `f` in one read transaction.
    pub(crate) fn read<T, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&S::Read<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let txn = self.store.begin_read()?;
        f(&txn)
    }
}

/// How many times [`Engine`] runs an operation whose transaction hit a
/// [`StoreErrorKind::Conflict`] before it answers with that conflict. The
/// core cannot sleep (it reads no clock), so attempts follow each other at
/// once; a store whose conflicts need a pause pauses in `begin_write`.
pub const MAX_ATTEMPTS: u32 = 8;

/// A write transaction as one operation body sees it, whoever owns it:
/// [`Engine::run_write`] wraps the transaction it opened, [`Engine::within`]
/// the caller's. The two never nest: `op` hands its body the `Txn` of
/// `run_write` directly and `op_in` the `Txn` of `within`, so over a store
/// whose own write transaction is what callers pass to `op_in`, each body
/// is compiled once (`Txn<'_, S::Write>`), not once more for a `Txn` around
/// a `Txn`, and `op` takes no savepoint it would never roll back to (a
/// failed `run_write` attempt is discarded whole). It remembers the first failure the
/// store reported through it, so the operation's answer is that failure
/// even where the body went on or swallowed it, and whether anything was
/// written, so a transaction that wrote nothing is not committed.
pub(crate) struct Txn<'a, W> {
    inner: &'a mut W,
    dirty: bool,
    failure: Cell<Option<StoreError>>,
}

impl<'a, W> Txn<'a, W> {
    fn new(inner: &'a mut W) -> Self {
        Self {
            inner,
            dirty: false,
            failure: Cell::new(None),
        }
    }

    /// Keeps the first failure.
    fn note<T>(&self, r: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(e) = &r {
            let first = self.failure.take().unwrap_or_else(|| e.clone());
            self.failure.set(Some(first));
        }
        r
    }
}

impl<W: WriteTransaction> ReadTransaction for Txn<'_, W> {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.note(self.inner.get(table, key))
    }

    fn get_with<T>(
        &self,
        table: Table,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> T,
    ) -> Result<Option<T>, StoreError> {
        self.note(self.inner.get_with(table, key, f))
    }

    fn range(
        &self,
        table: Table,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<Entry>, StoreError> {
        self.note(self.inner.range(table, start, end, limit))
    }
}

impl<W: WriteTransaction> WriteTransaction for Txn<'_, W> {
    fn savepoint(&mut self) -> Result<Savepoint, StoreError> {
        let r = self.inner.savepoint();
        self.note(r)
    }

    fn rollback_to(&mut self, savepoint: Savepoint) -> Result<(), StoreError> {
        let r = self.inner.rollback_to(savepoint);
        self.note(r)
    }

    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.dirty = true;
        let r = self.inner.put(table, key, value);
        self.note(r)
    }

    fn delete(&mut self, table: Table, key: &[u8]) -> Result<bool, StoreError> {
        self.dirty = true;
        let r = self.inner.delete(table, key);
        self.note(r)
    }

    /// Refused: an operation never commits the transaction it runs in; the
    /// transaction's owner does.
    fn commit(self) -> Result<(), StoreError> {
        Err(StoreError::described(
            StoreErrorKind::Other,
            "commit",
            "an operation cannot commit the transaction it runs in; its owner does".into(),
        ))
    }
}

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
