//! The granted-apps operations of [`Engine`]: read and change the apps a
//! grant reaches, and consent with a choice of apps.
//!
//! The selection, its record and the step that hands a code's apps to its
//! grant live in the parent module, [`crate::granted_apps`].

use rand_core::CryptoRng;

use super::{AppSelection, GrantAppsError, GrantedApps};
use crate::authorize::AuthorizeAnswer;
use crate::engine::{Engine, SiteOpError, Txn, Within};
use crate::grant::{Grant, GrantId, GrantStatus};
use crate::site::{Site, SiteId};
use crate::store::keys;
use crate::store::{ReadTransaction, Store, StoreError, Table, WriteTransaction};
use crate::time::Timestamp;

/// Whether `subject` holds the live grant `grant` on `site` at `now`.
fn holds<S: Store, R: ReadTransaction>(
    engine: &Engine<S>,
    txn: &R,
    site: &SiteId,
    subject: &str,
    grant: &GrantId,
    now: Timestamp,
) -> Result<bool, StoreError> {
    let Some(epoch) = txn.view::<Site, _>(site.as_str().as_bytes(), |s| s.epoch)? else {
        return Ok(false);
    };
    Ok(txn
        .view::<Grant, _>(grant.as_bytes(), |g| {
            g.subject == subject
                && g.status(site.as_str(), epoch, now, engine.policy()) == GrantStatus::Live
        })?
        .unwrap_or(false))
}

/// The selection stored under `key`; every app when none is.
fn stored<R: ReadTransaction>(txn: &R, key: &[u8]) -> Result<AppSelection, StoreError> {
    match txn.load::<GrantedApps>(key)? {
        None => Ok(AppSelection::All),
        Some(record) => record.selection().ok_or_else(|| {
            StoreError::described(
                crate::store::StoreErrorKind::Corrupt,
                Table::GrantApps.name(),
                "a stored app id is refused".into(),
            )
        }),
    }
}

/// Stores `selection` under `key` (every app: no record).
fn store<W: WriteTransaction>(
    txn: &mut Txn<'_, W>,
    key: &[u8],
    selection: &AppSelection,
) -> Result<(), StoreError> {
    match selection.record() {
        Some(record) => txn.save(key, &record),
        None => txn.delete(Table::GrantApps, key).map(|_| ()),
    }
}
/// The apps a grant reaches: chosen at consent, changed by the grant's
/// user, read by the host on each listing and call.
impl<S: Store> Engine<S> {
    /// The apps `subject`'s grant `grant` on `site` reaches at `now`:
    /// [`AppSelection::All`] unless a selection was stored; `None` when
    /// `subject` holds no such live grant (a revoked or expired grant's
    /// selection is never read). One read transaction.
    pub fn granted_apps(
        &self,
        site: &SiteId,
        subject: &str,
        grant: &GrantId,
        now: Timestamp,
    ) -> Result<Option<AppSelection>, StoreError> {
        self.read(|txn| {
            if !holds(self, txn, site, subject, grant, now)? {
                return Ok(None);
            }
            stored(txn, &keys::grant_apps(grant)).map(Some)
        })
    }

    /// Sets the apps `subject`'s live grant `grant` on `site` reaches from
    /// now on: ownership is checked first, in the same transaction, and a
    /// grant the user does not hold changes nothing
    /// ([`GrantAppsError::UnknownGrant`]). [`AppSelection::All`] deletes the
    /// stored selection.
    pub fn set_granted_apps<X: Within<S>>(
        &self,
        tx: X,
        site: &SiteId,
        subject: &str,
        grant: &GrantId,
        selection: &AppSelection,
        now: Timestamp,
    ) -> Result<(), GrantAppsError> {
        tx.run(self, |txn| {
            if !holds(self, &*txn, site, subject, grant, now)? {
                return Err(GrantAppsError::UnknownGrant);
            }
            store(txn, &keys::grant_apps(grant), selection)?;
            Ok(())
        })
    }

    /// [`Engine::decide`], and on Allow the apps the consent chose for the
    /// grant its code will make, in the same transaction: the code's
    /// exchange hands them to the grant, so no grant ever exists with a
    /// wider set than the user chose. [`AppSelection::All`] stores nothing
    /// (the same as [`Engine::decide`]).
    #[allow(
        clippy::too_many_arguments,
        reason = "each argument is one fact the adapter holds; bundling them would only rename them"
    )]
    pub fn decide_with_apps<X: Within<S>, R: CryptoRng + ?Sized>(
        &self,
        tx: X,
        site_id: &SiteId,
        query: &str,
        client_document: Option<&[u8]>,
        subject: &str,
        allow: bool,
        apps: &AppSelection,
        rng: &mut R,
        now: Timestamp,
    ) -> Result<AuthorizeAnswer, SiteOpError> {
        tx.run(self, |txn| {
            let (answer, code) = self.decide_body(
                txn,
                site_id,
                query,
                client_document,
                subject,
                allow,
                rng,
                now,
            )?;
            if let Some(code) = code {
                store(txn, &keys::code_apps(&code), apps)?;
            }
            Ok(answer)
        })
    }
}
