//! The connected-tab operations of [`Engine`]: connect, take over,
//! heartbeat, disconnect, sign-out, and where an action would be dispatched.
//!
//! The connection's state machine ([`TabConnection`]) lives in the parent
//! module, [`crate::tab`].

use super::{Connected, Dispatch, TabConnection, TabError, TabHello};
use crate::engine::ledger::{cut_runs, scan, session_failure};
use crate::engine::{Engine, SiteOpError, Txn, Within, load_site};
use crate::grant::{Grant, GrantId, GrantStatus};
use crate::site::{Site, SiteError, SiteId};
use crate::store::keys;
use crate::store::{ReadTransaction, Store, StoreError, Table, WriteTransaction};
use crate::time::Timestamp;

/// The connected-tab operations: connect, take over, heartbeat, disconnect
/// and sign-out, each in one store transaction of its own or inside the
/// caller's, and where an action would be dispatched.
impl<S: Store> Engine<S> {
    /// Loads the grant a tab operation is for, checking it is `subject`'s on
    /// `site` and live.
    fn tab_grant<R: ReadTransaction>(
        &self,
        txn: &R,
        site_id: &SiteId,
        subject: &str,
        grant: &GrantId,
        now: Timestamp,
    ) -> Result<Site, TabError> {
        let site = load_site(txn, site_id).map_err(|e| match e {
            SiteOpError::Store(e) => TabError::Store(e),
            SiteOpError::Site(_) => TabError::Forbidden,
        })?;
        if let Err(SiteError::Disabled { retry_after_secs }) = site.ensure_enabled() {
            return Err(TabError::Unavailable { retry_after_secs });
        }
        let (g, status) = self.grant_status(txn, &site, grant, now)?;
        if !g.is_some_and(|g| g.site == site.id && g.subject == subject) {
            return Err(TabError::Forbidden);
        }
        if status != Some(GrantStatus::Live) {
            return Err(TabError::Session(session_failure(status)));
        }
        Ok(site)
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "connect and take-over share one body; each argument is one fact the adapter holds"
    )]
    fn move_tab<W: WriteTransaction>(
        &self,
        txn: &mut Txn<'_, W>,
        site_id: &SiteId,
        subject: &str,
        grant: &GrantId,
        hello: &TabHello,
        take_over: bool,
        now: Timestamp,
    ) -> Result<Connected, TabError> {
        hello.validate()?;
        let site = self.tab_grant(&*txn, site_id, subject, grant, now)?;
        let key = keys::tab(grant);
        let (tab, connected) = match txn.load::<TabConnection>(&key)? {
            None => {
                let tab = TabConnection::new(*grant, site.id.clone(), hello, now);
                let c = Connected {
                    connection: tab.connection,
                    ended: None,
                };
                (tab, c)
            }
            Some(mut tab) => {
                if tab.browser_session != hello.browser_session {
                    txn.delete(
                        Table::Tabs,
                        &keys::with_grant(
                            keys::session_tabs(&site.id, &tab.browser_session),
                            grant,
                        ),
                    )?;
                }
                let c = if take_over {
                    tab.take_over(hello, now)
                } else {
                    tab.connect(hello, now, self.policy().tab_heartbeat_timeout)?
                };
                (tab, c)
            }
        };
        if let Some(ended) = connected.ended {
            cut_runs(txn, grant, ended, now)?;
        }
        txn.put(
            Table::Tabs,
            &keys::with_grant(keys::session_tabs(&site.id, &hello.browser_session), grant),
            &[],
        )?;
        txn.save(&key, &tab)?;
        Ok(connected)
    }

    /// A page connects as `grant`'s executor: a first connection, the same
    /// one again, or a reload of the connected tab (which ends the old page's
    /// connection: its runs are cut off, its auto-approvals end). Another tab
    /// is refused with [`TabError::Busy`] while the connection is live.
    pub fn connect_tab<X: Within<S>>(
        &self,
        tx: X,
        site: &SiteId,
        subject: &str,
        grant: &GrantId,
        hello: &TabHello,
        now: Timestamp,
    ) -> Result<Connected, TabError> {
        tx.run(self, |txn| {
            self.move_tab(txn, site, subject, grant, hello, false, now)
        })
    }

    /// "Use this tab": moves `grant`'s connection to this page. Calls
    /// dispatched to the old tab are cut off and end with `unknownTail`.
    pub fn take_over_tab<X: Within<S>>(
        &self,
        tx: X,
        site: &SiteId,
        subject: &str,
        grant: &GrantId,
        hello: &TabHello,
        now: Timestamp,
    ) -> Result<Connected, TabError> {
        tx.run(self, |txn| {
            self.move_tab(txn, site, subject, grant, hello, true, now)
        })
    }

    /// A heartbeat (with visibility) from the connected page.
    #[allow(
        clippy::too_many_arguments,
        reason = "each argument is one fact the adapter holds; bundling them would only rename them"
    )]
    pub fn tab_heartbeat<X: Within<S>>(
        &self,
        tx: X,
        site: &SiteId,
        subject: &str,
        grant: &GrantId,
        tab_id: &str,
        page_instance: &str,
        visible: bool,
        now: Timestamp,
    ) -> Result<(), TabError> {
        tx.run(self, |txn| {
            self.tab_grant(&*txn, site, subject, grant, now)?;
            let key = keys::tab(grant);
            let mut tab: TabConnection = txn.load(&key)?.ok_or(TabError::NotConnected)?;
            tab.heartbeat(
                tab_id,
                page_instance,
                visible,
                now,
                self.policy().tab_heartbeat_timeout,
            )?;
            txn.save(&key, &tab)?;
            Ok(())
        })
    }

    /// The connected page disconnects: the connection ends (its runs are cut
    /// off, its auto-approvals end); the grant stays.
    #[allow(
        clippy::too_many_arguments,
        reason = "each argument is one fact the adapter holds; bundling them would only rename them"
    )]
    pub fn disconnect_tab<X: Within<S>>(
        &self,
        tx: X,
        site: &SiteId,
        subject: &str,
        grant: &GrantId,
        tab_id: &str,
        page_instance: &str,
        now: Timestamp,
    ) -> Result<(), TabError> {
        tx.run(self, |txn| {
            let key = keys::tab(grant);
            let mut tab: TabConnection = txn.load(&key)?.ok_or(TabError::NotConnected)?;
            if tab.site != *site {
                return Err(TabError::Forbidden);
            }
            let g: Option<Grant> = txn.load(grant.as_bytes())?;
            if g.is_none_or(|g| g.subject != subject) {
                return Err(TabError::Forbidden);
            }
            let ended = tab.disconnect(tab_id, page_instance)?;
            cut_runs(txn, grant, ended, now)?;
            txn.save(&key, &tab)?;
            Ok(())
        })
    }

    /// Sign-out: ends every tab connection of `browser_session` on `site`
    /// at once, with their auto-approvals. Returns how many ended.
    pub fn reset_session<X: Within<S>>(
        &self,
        tx: X,
        site: &SiteId,
        browser_session: &str,
        now: Timestamp,
    ) -> Result<usize, StoreError> {
        tx.run(self, |txn| {
            let prefix = keys::session_tabs(site, browser_session);
            let mut ended = 0;
            for (index, _) in scan(&*txn, Table::Tabs, &prefix, usize::MAX)? {
                txn.delete(Table::Tabs, &index)?;
                let Some(grant) = keys::grant_suffix(&index) else {
                    continue;
                };
                let key = keys::tab(&grant);
                if let Some(mut tab) = txn.load::<TabConnection>(&key)?
                    && tab.browser_session == browser_session
                    && let Some(connection) = tab.end()
                {
                    cut_runs(txn, &grant, connection, now)?;
                    txn.save(&key, &tab)?;
                    ended += 1;
                }
            }
            Ok(ended)
        })
    }

    /// `grant`'s tab connection, if it ever connected.
    pub fn tab_connection(&self, grant: &GrantId) -> Result<Option<TabConnection>, StoreError> {
        self.read(|txn| txn.load(&keys::tab(grant)))
    }

    /// Where an action of `grant` would be dispatched now: the live
    /// connection, `no_live_tab` or `tab_not_visible`.
    pub fn dispatch(
        &self,
        grant: &GrantId,
        drives_page: bool,
        now: Timestamp,
    ) -> Result<Dispatch, StoreError> {
        Ok(match self.tab_connection(grant)? {
            Some(tab) => tab.dispatch(drives_page, now, self.policy().tab_heartbeat_timeout),
            None => Dispatch::NoLiveTab,
        })
    }
}
