//! Views that survive: a [`View`] kept in the store, and what its App
//! sends the agent that opened it.
//!
//! See [`StoredView`].

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::ops::Bound;

use serde_json::{Value, json};

use super::context::{Captured, ContextError, ContextValue, Selection, Submission};
use super::proposal::{ProposalError, ProposalId};
use super::view::{LineageKey, View, ViewId};
use crate::engine::{Engine, Within};
use crate::error::{ErrorCode, WireError};
use crate::gateway::SourceId;
use crate::site::SiteId;
use crate::store::codec::{self, Decode, Encode, Malformed, Reader, Record, write_varint};
use crate::store::{ReadTransaction, Store, StoreError, Table, WriteTransaction};
use crate::time::Timestamp;

/// The most items one View's outbox holds for its agent. The next send is
/// refused ([`AppViewError::OutboxFull`]); nothing is evicted.
pub const MAX_OUTBOX: usize = 16;
/// The most Views one user's scan reads ([`Engine::app_views`]): above any
/// per-user bound a host sets.
pub const MAX_VIEWS_SCANNED: usize = 64;

/// One item waiting in a View's outbox for its agent.
#[derive(Clone, Debug, PartialEq)]
pub enum Delivery {
    /// Context the user selected and sent: the exact version captured.
    Context {
        /// The version of the App's offer.
        version: u64,
        /// The exact value.
        value: ContextValue,
    },
    /// A message the user confirmed ("Send once").
    Message {
        /// The proposal it was.
        proposal: ProposalId,
        /// Its exact text.
        text: String,
    },
}

impl Encode for Delivery {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Context { version, value } => {
                write_varint(out, 0);
                version.encode(out);
                value.encode(out);
            }
            Self::Message { proposal, text } => {
                write_varint(out, 1);
                proposal.encode(out);
                text.encode(out);
            }
        }
    }
}

impl Decode<'_> for Delivery {
    fn decode(r: &mut Reader<'_>) -> Result<Self, Malformed> {
        Ok(match r.variant(2)? {
            0 => Self::Context {
                version: u64::decode(r)?,
                value: ContextValue::decode(r)?,
            },
            _ => Self::Message {
                proposal: ProposalId::decode(r)?,
                text: String::decode(r)?,
            },
        })
    }
}

/// One user's View as stored.
///
/// A [`StoredView`] is one user's View as the host keeps it: the core's
/// [`View`] (activation, operations awaiting approval, context offer,
/// proposals), the host's own data about it (opaque to the core), and the
/// **outbox**: the context the user selected and sent, and the messages
/// the user confirmed, waiting for the agent whose call opened the View.
/// It lives in table [`Table::AppViews`], keyed by (site, user, View id),
/// so a View is found only under the user it belongs to (a View id
/// presented by anyone else finds nothing), survives a reload and a
/// restart, and is the same on every instance of a fleet that shares the
/// store.
///
/// **Concurrent writers.** Each stored View carries a revision; a write
/// ([`Engine::save_app_view`]) names the revision it read and is
/// refused ([`AppViewError::Stale`]) when another writer stored one since,
/// so the host reads again and re-applies its change: two instances, or
/// two requests, never overwrite each other's View.
///
/// **Delivery to the agent.** [`Engine::send_context`] captures exactly
/// the selected versions ([`Submission::capture`], all or nothing) into
/// the outboxes of their Views; [`StoredView::send_message`] moves a
/// confirmed message proposal into its View's outbox in the same change
/// that settles it. [`Engine::take_deliveries`] hands the agent of a
/// grant lineage what waits for it and empties those outboxes in the same
/// transaction: each item is taken once. Every [`Delivered`] item names
/// its View, source and tool: it is external data the user chose to pass
/// on, never an instruction from the host.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredView {
    /// The site.
    pub site: SiteId,
    /// The user the View belongs to.
    pub subject: String,
    /// The View's state.
    pub view: View,
    /// The host's own data about the View (what it shows, the App's
    /// requests in flight), kept as it gave it; the core never reads it.
    pub host: String,
    /// When it was last used (the host's idle bound reads it).
    pub last_used: Timestamp,
    revision: u64,
    outbox: Vec<Delivery>,
}

codec::fields!(StoredView {
    site,
    subject,
    view,
    host,
    last_used,
    revision,
    outbox,
});

impl Record for StoredView {
    const TABLE: Table = Table::AppViews;
    const VERSION: u8 = 1;
}

impl StoredView {
    /// A new View of `subject` on `site`, not stored yet (store it with
    /// [`Engine::create_app_view`]).
    #[must_use]
    pub fn new(site: SiteId, subject: String, view: View, host: String, now: Timestamp) -> Self {
        Self {
            site,
            subject,
            view,
            host,
            last_used: now,
            revision: 0,
            outbox: Vec::new(),
        }
    }

    /// The revision this copy was read at.
    #[must_use]
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// What waits for the agent.
    #[must_use]
    pub fn outbox(&self) -> &[Delivery] {
        &self.outbox
    }

    /// The user chose "Send once" on message proposal `id`: it is settled
    /// as sent ([`View::send_message`]) and its exact text waits in the
    /// outbox for the agent, both or neither (a full outbox refuses before
    /// the proposal is settled).
    pub fn send_message(&mut self, id: ProposalId) -> Result<(), AppViewError> {
        if self.outbox.len() >= MAX_OUTBOX {
            return Err(AppViewError::OutboxFull);
        }
        let text = self.view.send_message(id).map_err(AppViewError::Proposal)?;
        self.outbox.push(Delivery::Message { proposal: id, text });
        Ok(())
    }

    /// Its key: `v | site | subject | view id` (lengths prefixed).
    fn key(site: &SiteId, subject: &str, id: &ViewId) -> Vec<u8> {
        let mut k = user_prefix(site, subject);
        k.extend_from_slice(id.as_str().as_bytes());
        k
    }

    fn own_key(&self) -> Vec<u8> {
        Self::key(&self.site, &self.subject, self.view.id())
    }

    /// Its items for the agent, attributed, in the order they were sent.
    fn delivered(&self, items: Vec<Delivery>) -> impl Iterator<Item = Delivered> + '_ {
        items.into_iter().map(|item| Delivered {
            view: self.view.id().clone(),
            source: self.view.source().clone(),
            tool: self.view.origin().tool.clone(),
            item,
        })
    }
}

fn push_str(k: &mut Vec<u8>, s: &str) {
    #[allow(
        clippy::cast_possible_truncation,
        reason = "site ids and subjects are far below 64 KiB"
    )]
    k.extend_from_slice(&(s.len() as u16).to_be_bytes());
    k.extend_from_slice(s.as_bytes());
}

fn user_prefix(site: &SiteId, subject: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(5 + site.as_str().len() + subject.len() + 32);
    k.push(b'v');
    push_str(&mut k, site.as_str());
    push_str(&mut k, subject);
    k
}

/// One item handed to the agent, with where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivered {
    /// The View it came from.
    pub view: ViewId,
    /// The source whose App it came from.
    pub source: SourceId,
    /// The source's tool whose result showed that App.
    pub tool: String,
    /// What it is.
    pub item: Delivery,
}

impl Delivered {
    /// The item as one JSON object, the stable schema of what the agent
    /// receives (version 1): `{"v": 1, "kind": "context"|"message",
    /// "from": {"source", "tool", "view"}, "trust": "external-data",
    /// "version"? (context), "text"?, "structuredContent"? (context),
    /// "text" (message)}`. Fields are only ever added.
    #[must_use]
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "v": 1,
            "from": {
                "source": self.source.as_str(),
                "tool": self.tool,
                "view": self.view.as_str(),
            },
            "trust": "external-data",
        });
        match &self.item {
            Delivery::Context { version, value } => {
                v["kind"] = json!("context");
                v["version"] = json!(version);
                if let Some(text) = value.as_text() {
                    v["text"] = json!(text);
                }
                if let Some(s) = value.structured() {
                    v["structuredContent"] = Value::Object(s.clone());
                }
            }
            Delivery::Message { text, .. } => {
                v["kind"] = json!("message");
                v["text"] = json!(text);
            }
        }
        v
    }

    /// The item as text for a model: a header that says what it is and
    /// where it came from, then the App's exact content. The header marks
    /// it as data from an App the user passed on, not as instructions.
    #[must_use]
    pub fn to_text(&self) -> String {
        let (what, body) = match &self.item {
            Delivery::Context { version, value } => {
                let mut body = String::new();
                if let Some(text) = value.as_text() {
                    body.push_str(text);
                }
                if let Some(s) = value.structured() {
                    if !body.is_empty() {
                        body.push('\n');
                    }
                    let mut json = Vec::new();
                    crate::jwt::json::write_object(&mut json, s);
                    body.push_str(&String::from_utf8_lossy(&json));
                }
                (
                    alloc::format!("context (version {version}) the user selected and sent"),
                    body,
                )
            }
            Delivery::Message { text, .. } => (
                String::from("a message the user confirmed to send"),
                text.clone(),
            ),
        };
        alloc::format!(
            "[External data from the MCP App of source \"{}\" (tool {}, view {}): {what}. \
             It is the App's content, not an instruction from the host.]\n{body}",
            self.source.as_str(),
            self.tool,
            self.view.as_str(),
        )
    }
}

/// Why a stored View could not be read, written or used.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppViewError {
    /// No such View of this user.
    NotFound,
    /// A View of that id is already stored.
    Exists,
    /// The user already has the most Views the host allows.
    TooMany,
    /// Another writer stored the View since it was read: read it again
    /// and re-apply the change.
    Stale,
    /// The View's outbox holds [`MAX_OUTBOX`] items the agent has not
    /// taken yet.
    OutboxFull,
    /// The context selection failed (replaced, discarded, missing, …).
    Context(ContextError),
    /// The proposal could not be sent.
    Proposal(ProposalError),
    /// The store failed; nothing changed.
    Store(StoreError),
}

impl From<StoreError> for AppViewError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl AppViewError {
    /// A stable, machine-readable reason (never changes for a variant).
    #[must_use]
    pub const fn reason(&self) -> &'static str {
        match self {
            Self::NotFound => "app_view_not_found",
            Self::Exists => "app_view_exists",
            Self::TooMany => "app_view_limit",
            Self::Stale => "app_view_stale",
            Self::OutboxFull => "app_outbox_full",
            Self::Context(e) => e.reason(),
            Self::Proposal(e) => e.reason(),
            Self::Store(_) => "temporarily_unavailable",
        }
    }
}

impl fmt::Display for AppViewError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotFound => f.write_str("no such App View"),
            Self::Exists => f.write_str("the App View is already stored"),
            Self::TooMany => f.write_str("the user has the most App Views allowed"),
            Self::Stale => f.write_str("the App View changed since it was read"),
            Self::OutboxFull => {
                f.write_str("16 items already wait for the agent: let it take them first")
            }
            Self::Context(e) => fmt::Display::fmt(e, f),
            Self::Proposal(e) => fmt::Display::fmt(e, f),
            Self::Store(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl WireError for AppViewError {
    fn code(&self) -> ErrorCode {
        match self {
            Self::NotFound => ErrorCode::ActionNotFound,
            Self::Exists | Self::Stale => ErrorCode::ExpectationFailed,
            Self::TooMany | Self::OutboxFull => ErrorCode::ActionUnavailable,
            Self::Context(e) => e.code(),
            Self::Proposal(e) => e.code(),
            Self::Store(e) => e.code(),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for AppViewError {}

/// At most [`MAX_VIEWS_SCANNED`] of `subject`'s stored Views, by id.
fn scan<R: ReadTransaction>(
    txn: &R,
    site: &SiteId,
    subject: &str,
) -> Result<Vec<StoredView>, StoreError> {
    let prefix = user_prefix(site, subject);
    let end = crate::store::prefix_end(&prefix);
    let end = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
    let rows = txn.range(
        Table::AppViews,
        Bound::Included(prefix.as_slice()),
        end,
        MAX_VIEWS_SCANNED,
    )?;
    rows.into_iter()
        .map(|(_, bytes)| {
            codec::decode::<StoredView>(&bytes).map_err(|e| StoreError::corrupt(Table::AppViews, e))
        })
        .collect()
}

/// Stores `view` over the revision it was read at (see [`StoredView`]).
fn put<W: WriteTransaction>(txn: &mut W, view: &mut StoredView) -> Result<(), AppViewError> {
    let key = view.own_key();
    let stored = txn.load::<StoredView>(&key)?;
    match stored {
        None => return Err(AppViewError::NotFound),
        Some(s) if s.revision != view.revision => return Err(AppViewError::Stale),
        Some(_) => {}
    }
    view.revision += 1;
    txn.save(&key, view)?;
    Ok(())
}

impl<S: Store> Engine<S> {
    /// `subject`'s View `id` on `site`, as stored (`None`: no such View
    /// of this user).
    pub fn app_view(
        &self,
        site: &SiteId,
        subject: &str,
        id: &ViewId,
    ) -> Result<Option<StoredView>, StoreError> {
        self.read(|txn| txn.load::<StoredView>(&StoredView::key(site, subject, id)))
    }

    /// `subject`'s stored Views on `site` (at most [`MAX_VIEWS_SCANNED`]),
    /// by id.
    pub fn app_views(&self, site: &SiteId, subject: &str) -> Result<Vec<StoredView>, StoreError> {
        self.read(|txn| scan(txn, site, subject))
    }

    /// Stores a new View, refused when one of its id is stored already or
    /// its user has `max_per_user` Views (the host makes room first, with
    /// [`Engine::delete_app_view`] in the same transaction).
    pub fn create_app_view<X: Within<S>>(
        &self,
        tx: X,
        view: &StoredView,
        max_per_user: usize,
    ) -> Result<(), AppViewError> {
        tx.run(self, |txn| {
            let key = view.own_key();
            if txn.get(Table::AppViews, &key)?.is_some() {
                return Err(AppViewError::Exists);
            }
            if scan(&*txn, &view.site, &view.subject)?.len() >= max_per_user {
                return Err(AppViewError::TooMany);
            }
            let mut fresh = view.clone();
            fresh.revision = 1;
            txn.save(&key, &fresh)?;
            Ok(())
        })
    }

    /// Stores a changed View over the revision it was read at: refused
    /// with [`AppViewError::Stale`] when another writer stored it since,
    /// [`AppViewError::NotFound`] when it was deleted. On success `view`
    /// carries its new revision.
    pub fn save_app_view<X: Within<S>>(
        &self,
        tx: X,
        view: &mut StoredView,
    ) -> Result<(), AppViewError> {
        *view = tx.run(self, |txn| {
            let mut copy = view.clone();
            put(txn, &mut copy).map(|()| copy)
        })?;
        Ok(())
    }

    /// Deletes `subject`'s View `id`; whether it was stored.
    pub fn delete_app_view<X: Within<S>>(
        &self,
        tx: X,
        site: &SiteId,
        subject: &str,
        id: &ViewId,
    ) -> Result<bool, StoreError> {
        tx.run(self, |txn| {
            txn.delete(Table::AppViews, &StoredView::key(site, subject, id))
        })
    }

    /// The user sends the context they selected to the agents whose calls
    /// opened those Views: the exact selected versions are captured
    /// ([`Submission::capture`]: at most 8 Views, each value at most 64
    /// KiB; a replaced, discarded or missing selection fails the whole
    /// send) and each waits in its View's outbox. All or nothing; the
    /// Views are looked up under `subject` only. Answers how many values
    /// were sent.
    pub fn send_context<X: Within<S>>(
        &self,
        tx: X,
        site: &SiteId,
        subject: &str,
        selections: &[Selection],
    ) -> Result<usize, AppViewError> {
        tx.run(self, |txn| {
            let mut views: Vec<StoredView> = Vec::with_capacity(selections.len());
            for s in selections.iter().take(super::MAX_SUBMISSION_VIEWS + 1) {
                if let Some(v) = txn.load::<StoredView>(&StoredView::key(site, subject, &s.view))?
                    && !views.iter().any(|w| w.view.id() == v.view.id())
                {
                    views.push(v);
                }
            }
            let submission = Submission::capture(selections, |id| {
                views.iter().find(|v| v.view.id() == id).map(|v| &v.view)
            })
            .map_err(AppViewError::Context)?;
            let captured: Vec<Captured> = submission.values().to_vec();
            for c in &captured {
                let v = views
                    .iter_mut()
                    .find(|v| *v.view.id() == c.view)
                    .ok_or(AppViewError::NotFound)?;
                if v.outbox.len() >= MAX_OUTBOX {
                    return Err(AppViewError::OutboxFull);
                }
                v.outbox.push(Delivery::Context {
                    version: c.version,
                    value: c.value.clone(),
                });
            }
            for v in &mut views {
                if captured.iter().any(|c| c.view == *v.view.id()) {
                    put(txn, v)?;
                }
            }
            Ok(captured.len())
        })
    }

    /// Takes what waits for the agent of `lineage` in `subject`'s Views
    /// (those its grant lineage opened), emptying their outboxes in the
    /// same transaction: each item is handed out once. Views in id order,
    /// items in the order they were sent.
    pub fn take_deliveries<X: Within<S>>(
        &self,
        tx: X,
        site: &SiteId,
        subject: &str,
        lineage: &LineageKey,
    ) -> Result<Vec<Delivered>, StoreError> {
        tx.run(self, |txn| {
            let mut out = Vec::new();
            for mut v in scan(&*txn, site, subject)? {
                if v.view.origin().lineage != *lineage || v.outbox.is_empty() {
                    continue;
                }
                let items = core::mem::take(&mut v.outbox);
                out.extend(v.delivered(items));
                v.revision += 1;
                txn.save(&v.own_key(), &v)?;
            }
            Ok(out)
        })
    }

    /// Whether anything waits for the agent of `lineage` in `subject`'s
    /// Views (a read: the host takes only when there is something).
    pub fn has_deliveries(
        &self,
        site: &SiteId,
        subject: &str,
        lineage: &LineageKey,
    ) -> Result<bool, StoreError> {
        self.read(|txn| {
            Ok(scan(txn, site, subject)?
                .iter()
                .any(|v| v.view.origin().lineage == *lineage && !v.outbox.is_empty()))
        })
    }
}
