//! The activity reads of [`Engine`]: a user's own activity and the
//! operator's export of a site's, each in a read transaction of its own.
//!
//! The entries, their keys and how the ledger writes them live in the
//! parent module, [`crate::activity`].

use alloc::vec::Vec;
use core::ops::Bound;

use super::{ActivityEntry, ActivityFilter, ActivityPage, MAX_PAGE, site_prefix, user_prefix};
use crate::engine::Engine;
use crate::site::SiteId;
use crate::store::codec;
use crate::store::{ReadTransaction, Store, StoreError, Table};

impl<S: Store> Engine<S> {
    /// `subject`'s activity on `site`, newest first: at most `limit`
    /// entries (at most [`MAX_PAGE`]) after the cursor `after` of the
    /// previous page. Only that user's entries: what a user's own page
    /// shows.
    pub fn user_activity(
        &self,
        site: &SiteId,
        subject: &str,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<ActivityPage, StoreError> {
        let prefix = user_prefix(site, subject);
        // A cursor is only ever one of this user's keys: any other one
        // (forged, or another user's) starts over at the user's first
        // entry, never elsewhere.
        let start = after
            .filter(|a| a.starts_with(&prefix))
            .map_or(Bound::Included(prefix.as_slice()), Bound::Excluded);
        self.read(|txn| scan(txn, &prefix, None, start, limit, |_| true))
    }

    /// The operator's export of `site`'s activity in time order, filtered
    /// by `filter`: at most `limit` entries (at most [`MAX_PAGE`]) after
    /// the cursor `after` of the previous page (a cursor of another site
    /// or before `since` starts over). Entries the filter leaves
    /// out still count toward the page's scan, so a page may hold fewer
    /// than `limit` with more to come (`next` says).
    pub fn activity_export(
        &self,
        site: &SiteId,
        filter: &ActivityFilter,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<ActivityPage, StoreError> {
        let prefix = site_prefix(site);
        let mut from = prefix.clone();
        if let Some(since) = filter.since {
            from.extend_from_slice(&since.as_secs().to_be_bytes());
        }
        let until = filter.until.map(|t| {
            let mut k = prefix.clone();
            k.extend_from_slice(&t.as_secs().to_be_bytes());
            k
        });
        let start = after
            .filter(|a| a.starts_with(&prefix) && *a >= from.as_slice())
            .map_or(Bound::Included(from.as_slice()), Bound::Excluded);
        if until
            .as_deref()
            .is_some_and(|until| until <= from.as_slice())
        {
            return Ok(ActivityPage {
                entries: Vec::new(),
                next: None,
            });
        }
        let keep = |e: &ActivityEntry| {
            filter.subject.as_deref().is_none_or(|s| s == e.subject)
                && filter.client_id.as_deref().is_none_or(|c| c == e.client_id)
        };
        self.read(|txn| scan(txn, &prefix, until.as_deref(), start, limit, keep))
    }
}

/// At most `limit` entries under `prefix` from `start` (before `until`,
/// when given) that `keep` keeps, and the cursor after the last read.
fn scan<R: ReadTransaction>(
    txn: &R,
    prefix: &[u8],
    until: Option<&[u8]>,
    start: Bound<&[u8]>,
    limit: usize,
    keep: impl Fn(&ActivityEntry) -> bool,
) -> Result<ActivityPage, StoreError> {
    let limit = limit.clamp(1, MAX_PAGE);
    let prefix_end = crate::store::prefix_end(prefix);
    let end = match (until, prefix_end.as_deref()) {
        (Some(until), _) => Bound::Excluded(until),
        (None, Some(end)) => Bound::Excluded(end),
        (None, None) => Bound::Unbounded,
    };
    let rows = txn.range(Table::Activity, start, end, limit + 1)?;
    let more = rows.len() > limit;
    let mut entries = Vec::with_capacity(rows.len().min(limit));
    let mut last = None;
    for (key, bytes) in rows.into_iter().take(limit) {
        if let Ok(entry) = codec::decode::<ActivityEntry>(&bytes)
            && keep(&entry)
        {
            entries.push(entry);
        }
        last = Some(key);
    }
    Ok(ActivityPage {
        entries,
        next: if more { last } else { None },
    })
}
