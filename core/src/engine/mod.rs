//! [`Engine`]: loads records, runs their pure transitions and writes the
//! results back, **one store transaction per operation**.
//!
//! Operations come in three kinds:
//!
//! * **site administration** — [`Engine::create_site`],
//!   [`Engine::set_site_enabled`], [`Engine::rotate_site_key`], …;
//! * **endpoints** — [`Engine::authorize`], [`Engine::decide`],
//!   [`Engine::token`], [`Engine::revoke_token`], [`Engine::verify_bearer`]:
//!   each takes the raw request parts an adapter has (query, body, every
//!   `Authorization` value as a [`HeaderField`](crate::header::HeaderField),
//!   so a repeated one is refused, never guessed at) and answers with a
//!   typed value that maps to a complete HTTP response;
//! * **grant management** — listing, revoking and sweeping.
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
mod grants;
mod keys;
mod ledger;
mod oauth;

use alloc::vec::Vec;
use core::cell::Cell;
use core::ops::Bound;

use crate::jwt::Keyring;
use crate::policy::Policy;
use crate::site::{Site, SiteError, SiteId};
use crate::store::{Entry, ReadTransaction, Record, Store, StoreError, Table, WriteTransaction};

pub use agent::{AgentPrincipal, AgentTokenRequest, MintError};
pub use grants::{BearerRejection, GrantPage, GrantSummary, Principal};
pub use ledger::{AbandonCursor, Abandoned};
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
    /// in which case the transaction is discarded whole.
    pub(crate) fn transact<T, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&mut Txn<S::Write<'_>>) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut txn = Txn {
            inner: self.store.begin_write()?,
            dirty: false,
            failed: Cell::new(false),
        };
        let out = f(&mut txn);
        if txn.dirty && !txn.failed.get() {
            txn.inner.commit()?;
        }
        out
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

/// A write transaction that remembers whether it wrote and whether the
/// store failed.
pub(crate) struct Txn<W> {
    inner: W,
    dirty: bool,
    failed: Cell<bool>,
}

impl<W> Txn<W> {
    fn note<T>(&self, r: Result<T, StoreError>) -> Result<T, StoreError> {
        if r.is_err() {
            self.failed.set(true);
        }
        r
    }
}

impl<W: WriteTransaction> ReadTransaction for Txn<W> {
    fn get(&self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.note(self.inner.get(table, key))
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

impl<W: WriteTransaction> Txn<W> {
    pub(crate) fn save<R: Record>(&mut self, key: &[u8], record: &R) -> Result<(), StoreError> {
        self.dirty = true;
        let r = self.inner.save(key, record);
        self.note(r)
    }

    pub(crate) fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.dirty = true;
        let r = self.inner.put(table, key, value);
        self.note(r)
    }

    pub(crate) fn delete(&mut self, table: Table, key: &[u8]) -> Result<bool, StoreError> {
        self.dirty = true;
        let r = self.inner.delete(table, key);
        self.note(r)
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
