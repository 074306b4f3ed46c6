//! The connected tab: the user's browser tab that runs a grant's calls, as
//! a pure state machine ([`TabConnection`]) with one record per grant.
//!
//! * **Connect** with a tab id (kept by the page across reloads, e.g. in
//!   `sessionStorage`) and a page-instance id (new on every page load).
//! * **Liveness** by heartbeat: a connection with no heartbeat for
//!   `Policy::tab_heartbeat_timeout` is not live, and the page must connect
//!   again (a new connection).
//! * **Reload** — same tab id, new page instance — reconnects the same tab.
//! * **A duplicated tab cannot take over** a live connection: another tab id
//!   is refused with [`TabError::Busy`]. Browsers copy `sessionStorage` into
//!   a duplicated tab, so the adapter must give a duplicate a fresh tab id
//!   (the page detects its twin with a `BroadcastChannel` probe).
//! * **Take-over** ("use this tab") moves the connection explicitly.
//! * **Disconnect** ends the connection, not the grant; **sign-out**
//!   (`reset_session`) ends every connection of that browser session.
//!
//! Every (re)connection gets a new connection number. A run is dispatched to
//! one number, so when the connection moves, the runs dispatched to the old
//! page are cut off (they end with `unknownTail`), and auto-approvals, which
//! live in the connection, end with it.
//!
//! The tab is one of two executors (see [`crate::ledger::Executor`]): a host
//! that performs an action on its own server runs it with no tab at all
//! ([`crate::executor`]).
//!
//! This module owns the connection's records and state machine, and imports
//! nothing from [`crate::engine`]. The engine's operations on them
//! ([`Engine::connect_tab`](crate::Engine::connect_tab) and the rest, listed in
//! [`crate::engine`]) are in its child module `tab::ops`, which builds on both:
//! the engine builds on this module, never the other way.

mod ops;

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use serde::{Deserialize, Serialize};

use crate::approval;
use crate::error::{ErrorCode, WireError};
use crate::grant::GrantId;
use crate::ledger::ActionFingerprint;
use crate::site::SiteId;
use crate::store::{Record, StoreError, Table};
use crate::time::Timestamp;

pub use crate::approval::{MAX_AUTO_KINDS, MAX_AUTO_WRITES};

/// Longest tab id, page-instance id or browser-session id.
pub const MAX_TAB_ID_LEN: usize = 128;

/// What a page says when it connects or takes over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TabHello {
    /// The browser session (the host's sign-in session) the page runs in.
    pub browser_session: String,
    /// The tab id, stable across reloads.
    pub tab_id: String,
    /// The page instance, new on every load.
    pub page_instance: String,
    /// Whether the page is visible.
    pub visible: bool,
}

impl TabHello {
    /// Checks every id: 1–128 printable ASCII characters.
    pub fn validate(&self) -> Result<(), TabError> {
        let ok = |s: &str| {
            (1..=MAX_TAB_ID_LEN).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_graphic())
        };
        if ok(&self.browser_session) && ok(&self.tab_id) && ok(&self.page_instance) {
            Ok(())
        } else {
            Err(TabError::InvalidId)
        }
    }
}

/// The connection of one grant to a tab.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TabConnection {
    /// The grant.
    pub grant: GrantId,
    /// The site.
    pub site: SiteId,
    /// The browser session the tab runs in.
    pub browser_session: String,
    /// The tab.
    pub tab_id: String,
    /// The page instance.
    pub page_instance: String,
    /// The connection number; grows on every (re)connection.
    pub connection: u32,
    /// Connected (until disconnect, sign-out or revocation).
    pub connected: bool,
    /// The last connect or heartbeat.
    pub last_seen: Timestamp,
    /// Whether the page is visible.
    pub visible: bool,
    /// Action kinds auto-approved on this connection.
    pub auto_kinds: Vec<String>,
    /// Writes already run under auto-approval: identical repeats ask again.
    pub auto_writes: Vec<ActionFingerprint>,
}

crate::store::codec::fields!(TabConnection {
    grant,
    site,
    browser_session,
    tab_id,
    page_instance,
    connection,
    connected,
    last_seen,
    visible,
    auto_kinds,
    auto_writes,
});

impl Record for TabConnection {
    const TABLE: Table = Table::Tabs;
    const VERSION: u8 = 1;
}

/// The result of a (re)connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connected {
    /// The live connection number.
    pub connection: u32,
    /// A connection that just ended (its runs are cut off), if any.
    pub ended: Option<u32>,
}

/// Where to dispatch a run, or why not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dispatch {
    /// To this connection.
    To(u32),
    /// No live tab.
    NoLiveTab,
    /// The action drives page controls and the tab is hidden.
    TabNotVisible,
}

impl TabConnection {
    /// A first connection.
    #[must_use]
    pub fn new(grant: GrantId, site: SiteId, hello: &TabHello, now: Timestamp) -> Self {
        Self {
            grant,
            site,
            browser_session: hello.browser_session.clone(),
            tab_id: hello.tab_id.clone(),
            page_instance: hello.page_instance.clone(),
            connection: 1,
            connected: true,
            last_seen: now,
            visible: hello.visible,
            auto_kinds: Vec::new(),
            auto_writes: Vec::new(),
        }
    }

    /// Connected and heard from within `timeout`.
    #[must_use]
    pub fn is_live(&self, now: Timestamp, timeout: Duration) -> bool {
        self.connected && now < self.last_seen.saturating_add(timeout)
    }

    /// Whether `hello` is the current page of the live connection.
    fn is_current(&self, tab_id: &str, page_instance: &str) -> bool {
        self.tab_id == tab_id && self.page_instance == page_instance
    }

    /// A page connects: a new connection if none is live, the same one for
    /// the current page, a reload for the same tab; another tab is refused.
    pub fn connect(
        &mut self,
        hello: &TabHello,
        now: Timestamp,
        timeout: Duration,
    ) -> Result<Connected, TabError> {
        if self.is_live(now, timeout) {
            if self.is_current(&hello.tab_id, &hello.page_instance) {
                self.last_seen = now;
                self.visible = hello.visible;
                return Ok(Connected {
                    connection: self.connection,
                    ended: None,
                });
            }
            if self.tab_id != hello.tab_id {
                return Err(TabError::Busy);
            }
        }
        Ok(self.move_to(hello, now))
    }

    /// "Use this tab": moves the connection here unconditionally.
    pub fn take_over(&mut self, hello: &TabHello, now: Timestamp) -> Connected {
        if self.connected && self.is_current(&hello.tab_id, &hello.page_instance) {
            self.last_seen = now;
            self.visible = hello.visible;
            return Connected {
                connection: self.connection,
                ended: None,
            };
        }
        self.move_to(hello, now)
    }

    fn move_to(&mut self, hello: &TabHello, now: Timestamp) -> Connected {
        let ended = self.connected.then_some(self.connection);
        self.connection += 1;
        self.connected = true;
        self.browser_session.clone_from(&hello.browser_session);
        self.tab_id.clone_from(&hello.tab_id);
        self.page_instance.clone_from(&hello.page_instance);
        self.last_seen = now;
        self.visible = hello.visible;
        self.auto_kinds.clear();
        self.auto_writes.clear();
        Connected {
            connection: self.connection,
            ended,
        }
    }

    /// A heartbeat from the current page, with its visibility.
    pub fn heartbeat(
        &mut self,
        tab_id: &str,
        page_instance: &str,
        visible: bool,
        now: Timestamp,
        timeout: Duration,
    ) -> Result<(), TabError> {
        if !self.is_live(now, timeout) || !self.is_current(tab_id, page_instance) {
            return Err(TabError::NotConnected);
        }
        self.last_seen = now;
        self.visible = visible;
        Ok(())
    }

    /// The current page disconnects. Returns the ended connection.
    pub fn disconnect(&mut self, tab_id: &str, page_instance: &str) -> Result<u32, TabError> {
        if !self.connected || !self.is_current(tab_id, page_instance) {
            return Err(TabError::NotConnected);
        }
        Ok(self.end().unwrap_or(self.connection))
    }

    /// Ends the connection (sign-out, revocation). Returns it if it was
    /// connected.
    pub fn end(&mut self) -> Option<u32> {
        let ended = self.connected.then_some(self.connection);
        self.connected = false;
        self.auto_kinds.clear();
        self.auto_writes.clear();
        ended
    }

    /// Where to dispatch an action (or a run, with `drives_page = false`).
    #[must_use]
    pub fn dispatch(&self, drives_page: bool, now: Timestamp, timeout: Duration) -> Dispatch {
        if !self.is_live(now, timeout) {
            Dispatch::NoLiveTab
        } else if drives_page && !self.visible {
            Dispatch::TabNotVisible
        } else {
            Dispatch::To(self.connection)
        }
    }

    /// Whether a write of `kind` with `fingerprint` runs without asking: its
    /// kind is auto-approved and no identical write ran under it.
    #[must_use]
    pub fn auto_approves(&self, kind: &str, fingerprint: &ActionFingerprint) -> bool {
        approval::auto_approves(&self.auto_kinds, &self.auto_writes, kind, fingerprint)
    }

    /// Remembers a write that ran (or was approved) under auto-approval.
    pub fn remember_write(&mut self, fingerprint: ActionFingerprint) {
        approval::remember_write(&mut self.auto_writes, fingerprint);
    }

    /// Auto-approves `kind` on this connection; the approved write itself
    /// counts as run, so an identical one asks again.
    pub fn allow_kind(&mut self, kind: &str, fingerprint: ActionFingerprint) {
        approval::allow_kind(
            &mut self.auto_kinds,
            &mut self.auto_writes,
            kind,
            fingerprint,
        );
    }
}

/// Why a tab operation was refused.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TabError {
    /// An id is empty, too long or not printable ASCII.
    InvalidId,
    /// Another tab holds the live connection; use take-over.
    Busy,
    /// This page does not hold the live connection (connect again).
    NotConnected,
    /// The grant is not this user's, or not live.
    Session(crate::ledger::Failure),
    /// The grant does not exist or belongs to someone else.
    Forbidden,
    /// The site is off.
    Unavailable {
        /// Seconds for `Retry-After`.
        retry_after_secs: u32,
    },
    /// The store failed; nothing changed.
    Store(StoreError),
}

impl From<StoreError> for TabError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl fmt::Display for TabError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidId => f.write_str("tab ids must be 1-128 printable characters"),
            Self::Busy => {
                f.write_str("another tab is connected; choose \"use this tab\" to move it")
            }
            Self::NotConnected => f.write_str("this tab is not connected"),
            Self::Session(why) => f.write_str(why.message()),
            Self::Forbidden => f.write_str("no such connection for this user"),
            Self::Unavailable { .. } => {
                f.write_str("external agents are switched off for this site")
            }
            Self::Store(_) => f.write_str("temporary server error"),
        }
    }
}

impl WireError for TabError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::InvalidId => ErrorCode::InvalidParams,
            Self::Busy => ErrorCode::ActionUnavailable,
            Self::NotConnected => ErrorCode::NoLiveTab,
            Self::Session(why) => why.code(),
            Self::Forbidden => ErrorCode::PermissionDenied,
            Self::Unavailable { .. } => ErrorCode::TemporarilyUnavailable,
            Self::Store(_) => ErrorCode::ServerError,
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for TabError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Action;

    const T: Duration = Duration::from_secs(45);

    fn hello(tab: &str, page: &str) -> TabHello {
        TabHello {
            browser_session: "b1".into(),
            tab_id: tab.into(),
            page_instance: page.into(),
            visible: true,
        }
    }

    fn at(s: u64) -> Timestamp {
        Timestamp::from_secs(s)
    }

    fn conn() -> TabConnection {
        TabConnection::new(
            GrantId::from_bytes([1; 16]),
            SiteId::parse("s").unwrap(),
            &hello("t1", "p1"),
            at(0),
        )
    }

    #[test]
    fn reload_reconnects_and_a_duplicate_cannot_take_over() {
        let mut c = conn();
        assert_eq!(
            c.connect(&hello("t1", "p1"), at(1), T),
            Ok(Connected {
                connection: 1,
                ended: None
            })
        );
        assert_eq!(c.connect(&hello("t2", "p9"), at(2), T), Err(TabError::Busy));
        assert_eq!(
            c.connect(&hello("t1", "p2"), at(3), T),
            Ok(Connected {
                connection: 2,
                ended: Some(1)
            }),
            "reload"
        );
        assert_eq!(
            c.take_over(&hello("t2", "p9"), at(4)),
            Connected {
                connection: 3,
                ended: Some(2)
            }
        );
        assert_eq!(
            c.heartbeat("t1", "p2", true, at(5), T),
            Err(TabError::NotConnected)
        );
        assert_eq!(c.heartbeat("t2", "p9", false, at(5), T), Ok(()));
        assert_eq!(c.dispatch(true, at(6), T), Dispatch::TabNotVisible);
        assert_eq!(c.dispatch(false, at(6), T), Dispatch::To(3));
    }

    #[test]
    fn liveness_times_out_and_disconnect_ends_the_connection() {
        let mut c = conn();
        assert_eq!(c.dispatch(false, at(45), T), Dispatch::NoLiveTab);
        assert_eq!(
            c.heartbeat("t1", "p1", true, at(45), T),
            Err(TabError::NotConnected)
        );
        // A lapsed connection is replaced by whoever connects.
        assert_eq!(
            c.connect(&hello("t2", "p1"), at(46), T),
            Ok(Connected {
                connection: 2,
                ended: Some(1)
            })
        );
        assert_eq!(c.disconnect("t1", "p1"), Err(TabError::NotConnected));
        assert_eq!(c.disconnect("t2", "p1"), Ok(2));
        assert_eq!(c.dispatch(false, at(47), T), Dispatch::NoLiveTab);
        assert_eq!(c.end(), None);
        assert_eq!(
            c.connect(&hello("t3", "p1"), at(48), T),
            Ok(Connected {
                connection: 3,
                ended: None
            })
        );
    }

    #[test]
    fn auto_approval_skips_identical_writes_and_ends_with_the_connection() {
        let mut c = conn();
        let a = Action::write("cart.add", "cart:write", b"1")
            .unwrap()
            .fingerprint();
        let b = Action::write("cart.add", "cart:write", b"2")
            .unwrap()
            .fingerprint();
        assert!(!c.auto_approves("cart.add", &b));
        c.allow_kind("cart.add", a);
        assert!(!c.auto_approves("cart.add", &a), "identical repeat asks");
        assert!(c.auto_approves("cart.add", &b));
        c.remember_write(b);
        assert!(!c.auto_approves("cart.add", &b));
        c.connect(&hello("t1", "p2"), at(1), T).unwrap();
        assert!(
            c.auto_kinds.is_empty() && c.auto_writes.is_empty(),
            "reload ends it"
        );
        let mut ids = hello("t", "p");
        assert_eq!(ids.validate(), Ok(()));
        ids.tab_id = String::new();
        assert_eq!(ids.validate(), Err(TabError::InvalidId));
    }

    /// The record's encoding and reading are postcard's over its derives.
    #[test]
    fn the_record_encoding_is_postcards() {
        let mut c = conn();
        crate::store::codec::assert_postcard_agrees(&c);
        c.connected = false;
        c.visible = false;
        c.connection = 200;
        c.auto_kinds = alloc::vec!["items.list".into(), "items.add".into()];
        c.auto_writes = alloc::vec![
            Action::write("items.add", "items:write", b"{}")
                .unwrap()
                .fingerprint()
        ];
        crate::store::codec::assert_postcard_agrees(&c);
    }
}
