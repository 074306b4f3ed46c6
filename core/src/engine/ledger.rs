//! The execution-ledger operations (`begin` on either executor, the ticket
//! operations, the ledger sweep and start-up recovery): each in one store
//! transaction of its own ([`Own`](super::Own)) or inside the caller's. See
//! [`crate::ledger`] for the rules they implement. The approval
//! operations live in `ledger::approval::ops`, the connected tab's in
//! `tab::ops`, the server executors' in `executor::ops` (beside
//! [`crate::approval`], [`crate::tab`] and [`crate::executor`], whose types
//! this module uses); the helpers they share with these are here, and they
//! call them, never the other way.
//!
//! The decision tables of a repeated `begin` and of `authorize_action` are
//! the record's ([`ExecutionRequest::begin`], [`ExecutionRequest::authorize`]):
//! this module loads the facts they read, asks for the step and writes what
//! the step says, so the order of checks is read (and unit-tested) in one
//! place.

use alloc::vec::Vec;
use core::ops::Bound;

use super::{Engine, SiteOpError, Txn, Within, load_site};
use crate::activity::{self, About, ActivityAction, ActivityEvent};
use crate::approval::{ApprovalPrompt, Approved, Binding, GrantAutoApproval};
use crate::bearer::{Challenge, Principal};
use crate::executor::{ExecutorId, ExecutorLease};
use crate::grant::{Grant, GrantId, GrantStatus};
use crate::ledger::{
    self, Action, ActionStep, ActionVerdict, BeginAnswer, BeginError, BeginStep, Caller,
    CodeFingerprint, Completion, Effect, End, ExecuteParams, ExecutionRequest, ExecutionTicket,
    Executor, Failure, Lineage, NextAction, Outcome, OutcomePage, OutcomesError, Owner,
    ReconnectLink, Repeat, Report, RequestId, RequestState, StoredResult, TicketError,
};
use crate::metadata;
use crate::scope::ScopeSet;
use crate::site::{Site, SiteError};
use crate::store::keys;
use crate::store::{
    Entry, ReadTransaction, Store, StoreError, Table, WriteTransaction, prefix_end,
};
use crate::tab::{Dispatch, TabConnection, TabHello};
use crate::time::{Timestamp, TimestampMs};

/// The failure a non-live grant status means.
pub(crate) fn session_failure(status: Option<GrantStatus>) -> Failure {
    Failure::of_session(status)
}

/// The connection `grant`'s tab would dispatch a call to now, if one is
/// live.
fn live_tab<R: ReadTransaction>(
    txn: &R,
    grant: &GrantId,
    now: Timestamp,
    timeout: core::time::Duration,
) -> Result<Option<u32>, StoreError> {
    let tab: Option<TabConnection> = txn.load(&keys::tab(grant))?;
    Ok(match tab.map(|t| t.dispatch(false, now, timeout)) {
        Some(Dispatch::To(connection)) => Some(connection),
        _ => None,
    })
}

/// Whether the lease of executor `id` on `site` is live.
pub(crate) fn lease_live<R: ReadTransaction>(
    txn: &R,
    site: &crate::site::SiteId,
    id: u32,
    now: Timestamp,
    timeout: core::time::Duration,
) -> Result<bool, StoreError> {
    let live = txn.get_with(Table::Tabs, &keys::executor_lease(site, id), |bytes| {
        ExecutorLease::live_stored(bytes, now, timeout)
    })?;
    Ok(live == Some(true))
}

/// The key of a request's entry among the running requests of the server
/// executor that holds its run: a server request's executor, or the
/// driver a tab request names (`None` for a tab request that names none).
pub(super) fn server_run_key(rec: &ExecutionRequest) -> Option<[u8; 37]> {
    let executor = match rec.executor() {
        Executor::Server => rec.connection(),
        Executor::Tab => rec.driver()?,
    };
    Some(keys::server_run(executor, &rec.grant(), &rec.id()))
}

/// Where a `begin` runs its call: on the user's tab (submitted by whom), or
/// on a server executor.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RunOn {
    /// The tab, submitted by the caller, driven by the server executor
    /// named (if one is).
    Tab(Caller, Option<ExecutorId>),
    Server(ExecutorId),
}

impl RunOn {
    /// The caller part of a `WaitingCalls` key ([`keys::waiting_call`]).
    fn waiting_caller(self) -> u8 {
        match self {
            Self::Tab(Caller::Client, _) => keys::WAITING_TAB_CLIENT,
            Self::Tab(Caller::InPage, _) => keys::WAITING_TAB_IN_PAGE,
            Self::Server(_) => keys::WAITING_SERVER,
        }
    }

    /// The server executor that holds a run begun here.
    fn driver(self) -> Option<u32> {
        match self {
            Self::Tab(_, driver) => driver.map(ExecutorId::get),
            Self::Server(_) => None,
        }
    }
}

/// The `WaitingCalls` key an identical call that names no request id would
/// look `rec` up under.
fn waiting_key(lineage: &Lineage, rec: &ExecutionRequest) -> [u8; 65] {
    let caller = match (rec.executor(), rec.submitted_in_page()) {
        (Executor::Server, _) => keys::WAITING_SERVER,
        (Executor::Tab, true) => keys::WAITING_TAB_IN_PAGE,
        (Executor::Tab, false) => keys::WAITING_TAB_CLIENT,
    };
    keys::waiting_call(lineage, caller, rec.fingerprint())
}

fn prefix_bounds(prefix: &[u8]) -> (Bound<&[u8]>, Option<Vec<u8>>) {
    (Bound::Included(prefix), prefix_end(prefix))
}

/// Every entry under `prefix`.
pub(crate) fn scan<R: ReadTransaction>(
    txn: &R,
    table: Table,
    prefix: &[u8],
    limit: usize,
) -> Result<Vec<Entry>, StoreError> {
    let (start, end) = prefix_bounds(prefix);
    let end = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
    txn.range(table, start, end, limit)
}

/// The undecided requests of `grant`, from its index: each entry's index
/// key, the request's lineage and its id. Malformed entries are skipped.
pub(crate) fn undecided_of<R: ReadTransaction>(
    txn: &R,
    grant: &GrantId,
) -> Result<Vec<(Vec<u8>, Lineage, RequestId)>, StoreError> {
    let entries = scan(
        txn,
        Table::Requests,
        &keys::grant_requests(grant),
        usize::MAX,
    )?;
    Ok(entries
        .into_iter()
        .filter_map(|(key, lineage)| {
            let (_, id) = keys::split_grant_request(&key)?;
            let lineage = <[u8; 32]>::try_from(lineage.as_slice()).ok().map(Lineage)?;
            Some((key, lineage, id))
        })
        .collect())
}

/// Saves a request and keeps its indexes: the grant index while undecided,
/// for a server request its executor's index while running, and an expiry
/// entry at `look_at` (a hint: the sweep recomputes the real deadline and
/// re-files the entry if it is later).
pub(crate) fn store_request<W: WriteTransaction>(
    txn: &mut Txn<'_, W>,
    lineage: &Lineage,
    rec: &ExecutionRequest,
    look_at: Timestamp,
) -> Result<(), StoreError> {
    let index = keys::grant_request(&rec.grant(), &rec.id());
    keep_entry(txn, &index, rec.is_undecided().then_some(&lineage.0))?;
    if let Some(run) = server_run_key(rec) {
        // A request leaves `Running` and its dispatch changes only while
        // it is not running: the entry exists exactly while it runs.
        let running = *rec.state() == RequestState::Running;
        keep_entry(txn, &run, running.then_some(&lineage.0))?;
    }
    txn.put(
        Table::Requests,
        &keys::ledger_expiry(look_at, lineage, &rec.id()),
        &[],
    )?;
    txn.save(&keys::request(lineage, &rec.id()), rec)
}

/// Keeps the `Requests` index entry `key`: present (pointing at `lineage`)
/// while its condition holds, absent otherwise. One body for every index a
/// request keeps.
#[inline(never)]
fn keep_entry<W: WriteTransaction>(
    txn: &mut Txn<'_, W>,
    key: &[u8],
    lineage: Option<&[u8; 32]>,
) -> Result<(), StoreError> {
    match lineage {
        Some(lineage) => txn.put(Table::Requests, key, lineage),
        None => txn.delete(Table::Requests, key).map(|_| ()),
    }
}

/// Ends every undecided request of `grant` (`SESSION_REVOKED`; running calls
/// with `unknownTail`), its tab connection and the auto-approvals of its
/// server runs, in the caller's transaction. Every path that revokes a
/// grant calls this in the same transaction.
pub(crate) fn cancel_grant_requests<W: WriteTransaction>(
    txn: &mut Txn<'_, W>,
    grant: &GrantId,
    now: Timestamp,
) -> Result<(), StoreError> {
    for (key, lineage, id) in undecided_of(&*txn, grant)? {
        match txn.load::<ExecutionRequest>(&keys::request(&lineage, &id))? {
            Some(mut rec) if rec.grant() == *grant => {
                rec.cancel(Failure::Revoked, now);
                store_request(txn, &lineage, &rec, now)?;
            }
            _ => {
                txn.delete(Table::Requests, &key)?;
            }
        }
    }
    if let Some(mut tab) = txn.load::<TabConnection>(&keys::tab(grant))?
        && tab.end().is_some()
    {
        txn.save(&keys::tab(grant), &tab)?;
    }
    txn.delete(Table::Requests, &keys::rate(grant))?;
    txn.delete(Table::Approvals, &keys::grant_auto_approval(grant))?;
    Ok(())
}

/// Cuts off the running tab requests of `grant` dispatched to `connection`.
pub(crate) fn cut_runs<W: WriteTransaction>(
    txn: &mut Txn<'_, W>,
    grant: &GrantId,
    connection: u32,
    now: Timestamp,
) -> Result<(), StoreError> {
    for (_, lineage, id) in undecided_of(&*txn, grant)? {
        if let Some(mut rec) = txn.load::<ExecutionRequest>(&keys::request(&lineage, &id))?
            && rec.grant() == *grant
            && *rec.state() == RequestState::Running
            && rec.executor() == Executor::Tab
            && rec.connection() == connection
        {
            rec.cancel(Failure::ConnectionLost, now);
            store_request(txn, &lineage, &rec, now)?;
        }
    }
    Ok(())
}

/// Most of a user's grants looked at when a new grant joins their live tab.
const JOIN_SCAN: usize = 256;

/// Connects a new `grant` to the user's live tab, if one serves another of
/// their grants on the site: the same browser session, tab and page
/// instance (the most recently heard of, if several). Called inside the
/// transaction that creates the grant, so the tab serves it from the moment
/// it exists and a step-up consent never meets `no_live_tab` while the tab
/// is open. The page's own heartbeats then keep it live like the others.
pub(super) fn join_live_tab<W: WriteTransaction>(
    txn: &mut Txn<'_, W>,
    grant: &Grant,
    timeout: core::time::Duration,
    now: Timestamp,
) -> Result<bool, StoreError> {
    let prefix = keys::user_grants(&grant.site, &grant.subject);
    let mut best: Option<TabConnection> = None;
    for (index, _) in scan(&*txn, Table::GrantIndex, &prefix, JOIN_SCAN)? {
        let Some(other) = keys::grant_suffix(&index) else {
            continue;
        };
        if other == grant.id {
            continue;
        }
        if let Some(tab) = txn.load::<TabConnection>(&keys::tab(&other))?
            && tab.site == grant.site
            && tab.is_live(now, timeout)
            && best.as_ref().is_none_or(|b| tab.last_seen > b.last_seen)
        {
            best = Some(tab);
        }
    }
    let Some(live) = best else {
        return Ok(false);
    };
    let hello = TabHello {
        browser_session: live.browser_session,
        tab_id: live.tab_id,
        page_instance: live.page_instance,
        visible: live.visible,
    };
    let tab = TabConnection::new(grant.id, grant.site.clone(), &hello, live.last_seen);
    txn.put(
        Table::Tabs,
        &keys::with_grant(
            keys::session_tabs(&grant.site, &hello.browser_session),
            &grant.id,
        ),
        &[],
    )?;
    txn.save(&keys::tab(&grant.id), &tab)?;
    Ok(true)
}

/// `403 insufficient_scope` naming `ask`, the scopes to request (RFC 6750
/// §3.1).
fn insufficient_scope(site: &Site, ask: &ScopeSet) -> BeginError {
    let md = metadata::protected_resource_metadata_url(site);
    BeginError::InsufficientScope(Challenge::insufficient_scope(&md, ask))
}

/// Why a call has nowhere to run: no live tab (with the reconnect link),
/// or no live lease for the calling server executor.
fn nowhere_to_run(executor: Executor, site: &Site) -> BeginError {
    match executor {
        Executor::Tab => BeginError::NoLiveTab(reconnect_link(site)),
        Executor::Server => BeginError::ExecutorNotLive,
    }
}

fn reconnect_link(site: &Site) -> ReconnectLink {
    ReconnectLink {
        site: site.id.clone(),
        url: site.reconnect_url.clone().or_else(|| {
            site.allowed_origins.first().map(|origin| {
                let mut url = alloc::string::String::from(origin.trim_end_matches('/'));
                url.push('/');
                url
            })
        }),
    }
}

pub(crate) fn binding(site: &Site, grant: &Grant) -> Binding {
    Binding {
        grant: grant.id,
        epoch: grant.epoch,
        policy_version: site.policy_version,
    }
}

/// Where [`Engine::abandon_running`] or [`Engine::end_lost_runs`] stopped:
/// hand it back to the same operation to go on.
#[derive(Clone, PartialEq, Eq)]
pub struct AbandonCursor(pub(crate) Vec<u8>);

impl core::fmt::Debug for AbandonCursor {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("AbandonCursor(…)")
    }
}

/// What one [`Engine::abandon_running`] or [`Engine::end_lost_runs`] call
/// did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct Abandoned {
    /// Running requests it ended.
    pub ended: usize,
    /// Where to go on; `None` when every undecided request was looked at.
    pub next: Option<AbandonCursor>,
}

/// The request a `begin` looks at, as [`Engine::request_for`] finds it.
struct Lookup {
    /// For a call that names no request id, the unfinished identical
    /// request it joins, if there is one; else the request under the
    /// call's own id, if any.
    found: Option<ExecutionRequest>,
    /// For a call that names no request id and joined nothing, the
    /// `WaitingCalls` key a request it opens is filed under.
    waiting: Option<[u8; 65]>,
    /// The fingerprint of the call's code.
    fingerprint: CodeFingerprint,
}

/// What a ticket operation works on, once the ticket is known current.
struct RunContext {
    key: [u8; 49],
    rec: ExecutionRequest,
    site: Site,
    grant: Grant,
    /// The run's tab connection; `None` for a server run.
    tab: Option<TabConnection>,
}

impl<S: Store> Engine<S> {
    pub(crate) fn grant_status<R: ReadTransaction>(
        &self,
        txn: &R,
        site: &Site,
        id: &GrantId,
        now: Timestamp,
    ) -> Result<(Option<Grant>, Option<GrantStatus>), StoreError> {
        let grant: Option<Grant> = txn.load(id.as_bytes())?;
        let status = grant.as_ref().map(|g| g.status(site, now, &self.policy));
        Ok((grant, status))
    }

    /// The live grant `principal` names, its site and its lineage: what a
    /// read of the lineage's requests ([`Engine::outcomes`],
    /// [`Engine::request_status`]) needs, or why it is refused.
    fn live_lineage<R: ReadTransaction>(
        &self,
        txn: &R,
        principal: &Principal,
        now: Timestamp,
    ) -> Result<(Site, Grant, Lineage), OutcomesError> {
        let site = load_site(txn, &principal.site).map_err(|e| match e {
            SiteOpError::Store(e) => OutcomesError::Store(e),
            SiteOpError::Site(_) => OutcomesError::Session(Failure::Revoked),
        })?;
        let (grant, status) = self.grant_status(txn, &site, &principal.grant, now)?;
        let Some(grant) = grant.filter(|_| status == Some(GrantStatus::Live)) else {
            return Err(OutcomesError::Session(session_failure(status)));
        };
        let lineage = Lineage::of(site.id.as_str(), &grant.subject, &grant.client_id);
        Ok((site, grant, lineage))
    }

    /// Request `request_id` of `lineage`, as `grant` may read it: a request
    /// an earlier grant of the lineage made is readable while that grant is
    /// kept and not revoked (its results end with it).
    fn lineage_request<R: ReadTransaction>(
        &self,
        txn: &R,
        site: &Site,
        grant: &Grant,
        lineage: &Lineage,
        request_id: &RequestId,
        now: Timestamp,
    ) -> Result<ExecutionRequest, OutcomesError> {
        let rec: ExecutionRequest = txn
            .load(&keys::request(lineage, request_id))?
            .ok_or(OutcomesError::NotFound)?;
        if rec.grant() != grant.id {
            let (_, owner) = self.grant_status(txn, site, &rec.grant(), now)?;
            if owner == Some(GrantStatus::Revoked) || owner.is_none() {
                return Err(OutcomesError::ResultExpired);
            }
        }
        Ok(rec)
    }

    fn page<R: ReadTransaction>(
        &self,
        txn: &R,
        lineage: &Lineage,
        rec: &ExecutionRequest,
        from: u32,
    ) -> Result<OutcomePage, StoreError> {
        let start = keys::outcome(lineage, &rec.id(), from);
        let prefix = keys::outcomes(lineage, &rec.id());
        let end = prefix_end(&prefix);
        let end = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let entries = txn.range(
            Table::Outcomes,
            Bound::Included(&start),
            end,
            ledger::OUTCOME_PAGE,
        )?;
        let mut outcomes = Vec::with_capacity(entries.len());
        for (_, bytes) in entries {
            outcomes.push(
                crate::store::codec::decode::<Outcome>(&bytes)
                    .map_err(|e| StoreError::corrupt(Table::Outcomes, e))?,
            );
        }
        let reached = from.saturating_add(outcomes.len() as u32);
        let next = if reached < rec.outcomes() && !outcomes.is_empty() {
            ledger::issue_cursor(&self.keyring, lineage, &rec.id(), reached)
        } else {
            None
        };
        Ok(OutcomePage {
            outcomes,
            next,
            total: rec.outcomes(),
        })
    }

    fn stored<R: ReadTransaction>(
        &self,
        txn: &R,
        lineage: &Lineage,
        rec: &ExecutionRequest,
        from: u32,
    ) -> Result<Option<StoredResult>, StoreError> {
        let RequestState::Done {
            at,
            end,
            unknown_tail,
        } = rec.state()
        else {
            return Ok(None);
        };
        Ok(Some(StoredResult {
            request_id: rec.id(),
            end: end.clone(),
            unknown_tail: *unknown_tail,
            finished: *at,
            outcomes: self.page(txn, lineage, rec, from)?,
        }))
    }

    pub(crate) fn save_request<W: WriteTransaction>(
        &self,
        txn: &mut Txn<'_, W>,
        lineage: &Lineage,
        rec: &ExecutionRequest,
    ) -> Result<(), StoreError> {
        store_request(
            txn,
            lineage,
            rec,
            rec.next_deadline(self.policy.result_retention),
        )
    }

    /// `execute`: admits a call with a request id, or tells the caller where
    /// that request stands. The call runs in the user's connected tab
    /// ([`Executor::Tab`]); see [`Engine::begin_server`] for a call the
    /// host performs on its server. `principal` comes from
    /// [`Engine::verify_bearer`]; the grant is checked again here. `now` is
    /// in milliseconds for the rate limiter; everything else uses its whole
    /// second.
    ///
    /// Order of checks: site switch, the scopes the host says the call
    /// needs are ones the site declares (see [`Engine::begin_needing`]),
    /// session, rate limit, then the request id (replay, stored result,
    /// pending state), then — for new or resumed work — the scopes the call
    /// needs, the undecided limit and the live tab. Only an admitted run, a
    /// state change the check itself causes (a cut-off run, an adoption) and
    /// the rate limiter write anything.
    ///
    /// A call whose client named no request id ([`ExecuteParams::joining`],
    /// on every `begin` form) is answered, while an identical request is
    /// unfinished, exactly as if it had named that request's id (the
    /// answer carries the joined id); otherwise it opens a request under
    /// its own id, which later identical joining calls join until it ends
    /// (see [`crate::ledger`], "Calls that name no request id").
    pub fn begin<X: Within<S>>(
        &self,
        tx: X,
        principal: &Principal,
        params: &ExecuteParams,
        caller: Caller,
        now: TimestampMs,
    ) -> Result<BeginAnswer, BeginError> {
        self.begin_needing(tx, principal, params, &ScopeSet::default(), caller, now)
    }

    /// [`Engine::begin`] for a call whose actions the adapter already knows
    /// need `needed` (the union of their scopes, [`Action::scope`]).
    /// The scope check then comes **before** the tab check: a token without
    /// `needed` answers `403 insufficient_scope` (RFC 6750 §3.1; the MCP
    /// authorization spec's step-up) whether or not a tab is connected, and
    /// nothing about the request is stored, so the same `requestId` is
    /// judged afresh with the wider token. An existing request that has not
    /// finished is checked the same way before it resumes; a finished one
    /// answers its stored result as before.
    ///
    /// `needed` must be a subset of the site's scopes
    /// ([`crate::site::SiteConfig::scopes`]): a scope the site does not
    /// declare can never be granted, so asking for it is the host's
    /// mistake, answered [`BeginError::UndeclaredScope`] (`server_error`,
    /// HTTP 500) before anything is written.
    pub fn begin_needing<X: Within<S>>(
        &self,
        tx: X,
        principal: &Principal,
        params: &ExecuteParams,
        needed: &ScopeSet,
        caller: Caller,
        now: TimestampMs,
    ) -> Result<BeginAnswer, BeginError> {
        tx.run(self, |txn| {
            self.begin_body(
                txn,
                principal,
                params,
                needed,
                RunOn::Tab(caller, None),
                now,
            )
        })
    }

    /// [`Engine::begin_needing`] for a tab run **driven** by the server
    /// executor `driver` (the calling instance, [`Engine::start_executor`]):
    /// the instance whose task holds the run's ticket, hands its actions to
    /// the page and records their reports. Its lease must be live, or the
    /// call is refused with [`BeginError::ExecutorNotLive`]. A repeat of a
    /// running request is then `execution_pending` only while both the
    /// run's tab connection and its driver's lease are live, whichever
    /// instance receives it; once the driver's lease lapses (it died with
    /// the ticket) the run is cut off with `unknownTail`, by that repeat or
    /// by [`Engine::end_lost_runs`], as a server run is. A fleet whose
    /// instances drive tab runs begins them here, so that one lease tells
    /// every instance which runs are lost.
    #[allow(
        clippy::too_many_arguments,
        reason = "begin_needing's arguments and the driver; bundling them would only rename them"
    )]
    pub fn begin_driven<X: Within<S>>(
        &self,
        tx: X,
        principal: &Principal,
        params: &ExecuteParams,
        needed: &ScopeSet,
        caller: Caller,
        driver: ExecutorId,
        now: TimestampMs,
    ) -> Result<BeginAnswer, BeginError> {
        let on = RunOn::Tab(caller, Some(driver));
        tx.run(self, |txn| {
            self.begin_body(txn, principal, params, needed, on, now)
        })
    }

    /// [`Engine::begin_needing`] for a call the host performs **on its
    /// server** ([`Executor::Server`]): no tab is consulted at all. The
    /// host's code decides, per call, which of its tools run here and which
    /// in the user's tab (see [`crate::executor`]).
    ///
    /// `executor` is the calling instance's number
    /// ([`Engine::start_executor`]); its lease must be live, or the call is
    /// refused with [`BeginError::ExecutorNotLive`] (renew it first). A new
    /// run is dispatched to it. On a repeat, a running request is
    /// `execution_pending` while the lease of the executor it was dispatched
    /// to is live — whichever instance receives the repeat — and is cut off
    /// otherwise ([`Failure::ExecutorLost`], `unknownTail`; its stored result
    /// answered); a parked or approved request resumes on `executor`. A
    /// request begun on the tab is another call: `REPLAY_DETECTED`. The
    /// caller is an external client ([`Caller::Client`]); everything else
    /// (scopes, the undecided limit, replay, results) is as in
    /// [`Engine::begin_needing`].
    pub fn begin_server<X: Within<S>>(
        &self,
        tx: X,
        principal: &Principal,
        params: &ExecuteParams,
        needed: &ScopeSet,
        executor: ExecutorId,
        now: TimestampMs,
    ) -> Result<BeginAnswer, BeginError> {
        tx.run(self, |txn| {
            self.begin_body(txn, principal, params, needed, RunOn::Server(executor), now)
        })
    }

    /// The body of every `begin` form, on either executor: they all run it
    /// on one [`Txn`], so it is compiled once per store.
    fn begin_body<W: WriteTransaction>(
        &self,
        txn: &mut Txn<'_, W>,
        principal: &Principal,
        params: &ExecuteParams,
        needed: &ScopeSet,
        on: RunOn,
        now: TimestampMs,
    ) -> Result<BeginAnswer, BeginError> {
        let from = params.outcome_cursor.as_deref();
        let now_s = now.timestamp();
        let (site, grant) = self.admit_caller(txn, principal, needed, now)?;
        let lineage = Lineage::of(site.id.as_str(), &grant.subject, &grant.client_id);
        let (executor, dispatch_to) = self.dispatch_to(&*txn, on, &site, &grant.id, now_s)?;
        let lookup = self.request_for(&*txn, &site, &grant, &lineage, params, on, now_s)?;
        let fingerprint = lookup.fingerprint;
        let ticket = |rec: &ExecutionRequest| ExecutionTicket {
            lineage,
            request_id: rec.id(),
            site: site.id.clone(),
            grant: grant.id,
            run: rec.run(),
            next_action: 0,
            connection: rec.connection(),
            scopes: principal.scopes.clone(),
            client_id: grant.client_id.clone(),
            client_name: grant.client_name.clone(),
            approved: None,
        };
        let Some(mut rec) = lookup.found else {
            if !needed.is_subset(&principal.scopes) {
                return Err(insufficient_scope(&site, &needed.union(&principal.scopes)));
            }
            let limit = self.policy.max_undecided_requests;
            let undecided = scan(
                &*txn,
                Table::Requests,
                &keys::grant_requests(&grant.id),
                limit as usize + 1,
            )?;
            if undecided.len() >= limit as usize {
                return Err(BeginError::TooManyUndecided { limit });
            }
            let Some(connection) = dispatch_to else {
                return Err(nowhere_to_run(executor, &site));
            };
            let mut rec = ExecutionRequest::new(
                params.request_id,
                fingerprint,
                grant.id,
                grant.absolute_deadline(&self.policy),
                matches!(on, RunOn::Tab(Caller::InPage, _)),
                executor,
                connection,
                now_s,
            );
            rec.driven_by(on.driver());
            self.save_request(txn, &lineage, &rec)?;
            if let Some(waiting) = &lookup.waiting {
                // Identical calls join this one until it ends; an entry
                // naming an ended request is replaced.
                txn.put(Table::WaitingCalls, waiting, params.request_id.as_bytes())?;
            }
            return Ok(BeginAnswer::Run(ticket(&rec)));
        };
        if !rec.is_for(&fingerprint, executor) {
            return Err(BeginError::ReplayDetected);
        }
        let from = match from {
            Some(c) => ledger::open_cursor(&self.keyring, &lineage, &rec.id(), c)?,
            None => 0,
        };
        let owner = self.owner_of(&*txn, &site, &grant, &rec, now_s)?;
        self.end_if_driver_lost(txn, &site, &lineage, &mut rec, now_s)?;
        let begun = rec.begin(&Repeat {
            grant: grant.id,
            grant_end: grant.absolute_deadline(&self.policy),
            binding: binding(&site, &grant),
            owner,
            run_reachable: self.run_reachable(&*txn, &rec, &site, now_s)?,
            dispatch_to,
            scopes: &principal.scopes,
            needed,
            retention: self.policy.result_retention,
            now: now_s,
        });
        if let Some(old) = begun.left {
            txn.delete(Table::Requests, &keys::grant_request(&old, &rec.id()))?;
        }
        if begun.step == BeginStep::Run {
            rec.driven_by(on.driver()); // the new run's holder
        }
        if begun.changed {
            self.save_request(txn, &lineage, &rec)?;
        }
        match begun.step {
            BeginStep::Stored => {
                let about = About::new(&site.id, &grant, &rec);
                self.answer_stored(txn, &lineage, &about, from, now_s)
            }
            BeginStep::ResultExpired => Err(BeginError::ResultExpired),
            BeginStep::Pending => Ok(BeginAnswer::ExecutionPending(rec.id())),
            BeginStep::ApprovalPending(prompt) => Ok(BeginAnswer::ApprovalPending(prompt)),
            BeginStep::MissingScope(ask) => Err(insufficient_scope(&site, &ask)),
            BeginStep::NoLiveTab | BeginStep::ExecutorNotLive => {
                Err(nowhere_to_run(executor, &site))
            }
            BeginStep::Run => Ok(BeginAnswer::Run(ticket(&rec))),
        }
    }

    /// The stored result of an ended request, from its outcome `from`; the
    /// first page of it (a repeat of the call, not a later page the same
    /// client asks for in turn) is recorded as a replay.
    fn answer_stored<W: WriteTransaction>(
        &self,
        txn: &mut Txn<'_, W>,
        lineage: &Lineage,
        about: &About<'_>,
        from: u32,
        now: Timestamp,
    ) -> Result<BeginAnswer, BeginError> {
        let stored = self
            .stored(&*txn, lineage, about.request, from)?
            .ok_or(BeginError::ResultExpired)?;
        if from == 0 {
            about.record(txn, &self.policy, now, None, ActivityEvent::Replayed)?;
        }
        Ok(BeginAnswer::Stored(stored))
    }

    /// The request a `begin` of `params` on `on` looks at (see [`Lookup`]).
    #[allow(
        clippy::too_many_arguments,
        reason = "the facts begin_body already holds, passed on rather than loaded twice"
    )]
    fn request_for<R: ReadTransaction>(
        &self,
        txn: &R,
        site: &Site,
        grant: &Grant,
        lineage: &Lineage,
        params: &ExecuteParams,
        on: RunOn,
        now: Timestamp,
    ) -> Result<Lookup, StoreError> {
        let fingerprint = params.fingerprint();
        let waiting = params
            .join
            .then(|| keys::waiting_call(lineage, on.waiting_caller(), &fingerprint));
        if let Some(waiting) = &waiting
            && let Some(joined) = self.joinable(txn, site, grant, lineage, waiting, now)?
        {
            return Ok(Lookup {
                found: Some(joined),
                waiting: None,
                fingerprint,
            });
        }
        Ok(Lookup {
            found: txn.load(&keys::request(lineage, &params.request_id))?,
            waiting,
            fingerprint,
        })
    }

    /// The unfinished request a call that names no request id joins: the
    /// one the `WaitingCalls` entry `waiting` names, if it is still
    /// undecided (running, awaiting approval or parked), is for this very
    /// call (code, executor) and belongs to a live grant of the lineage.
    /// `None` otherwise (no entry, a malformed or stale one, a request that
    /// ended, or one whose grant is no longer live, which only its own id
    /// may end): the call is new work under its own id. Reads only.
    fn joinable<R: ReadTransaction>(
        &self,
        txn: &R,
        site: &Site,
        grant: &Grant,
        lineage: &Lineage,
        waiting: &[u8; 65],
        now: Timestamp,
    ) -> Result<Option<ExecutionRequest>, StoreError> {
        let Some(Some(id)) = txn.get_with(Table::WaitingCalls, waiting, |bytes| {
            <[u8; 16]>::try_from(bytes).ok().map(RequestId::from_bytes)
        })?
        else {
            return Ok(None);
        };
        let Some(rec) = txn.load::<ExecutionRequest>(&keys::request(lineage, &id))? else {
            return Ok(None);
        };
        if !rec.is_undecided() || waiting_key(lineage, &rec) != *waiting {
            return Ok(None);
        }
        if rec.grant() != grant.id {
            let (_, owner) = self.grant_status(txn, site, &rec.grant(), now)?;
            if owner != Some(GrantStatus::Live) {
                return Ok(None);
            }
        }
        Ok(Some(rec))
    }

    /// The executor a call on `on` runs on, and where a new run of it would
    /// be dispatched now: the live connection of `grant`'s tab, or the
    /// calling executor while its lease is live. A tab run's driver whose
    /// lease is not live is refused: [`BeginError::ExecutorNotLive`].
    fn dispatch_to<R: ReadTransaction>(
        &self,
        txn: &R,
        on: RunOn,
        site: &Site,
        grant: &GrantId,
        now: Timestamp,
    ) -> Result<(Executor, Option<u32>), BeginError> {
        if let Some(driver) = on.driver()
            && !self.driver_live(txn, site, driver, now)?
        {
            // The driving instance can hold no run now.
            return Err(BeginError::ExecutorNotLive);
        }
        Ok(match on {
            RunOn::Tab(..) => (
                Executor::Tab,
                live_tab(txn, grant, now, self.policy.tab_heartbeat_timeout)?,
            ),
            RunOn::Server(id) => (
                Executor::Server,
                lease_live(
                    txn,
                    &site.id,
                    id.get(),
                    now,
                    self.policy.executor_lease_timeout,
                )?
                .then_some(id.get()),
            ),
        })
    }

    /// The owner of `rec` when it belongs to another grant of the caller's
    /// lineage (a scope upgrade); `None` when the caller's grant owns it.
    fn owner_of<R: ReadTransaction>(
        &self,
        txn: &R,
        site: &Site,
        grant: &Grant,
        rec: &ExecutionRequest,
        now: Timestamp,
    ) -> Result<Option<Owner>, StoreError> {
        if rec.grant() == grant.id {
            return Ok(None);
        }
        let (_, status) = self.grant_status(txn, site, &rec.grant(), now)?;
        Ok(Some(Owner { status }))
    }

    /// Whether the lease of server executor `driver` on `site` is live.
    fn driver_live<R: ReadTransaction>(
        &self,
        txn: &R,
        site: &Site,
        driver: u32,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        lease_live(
            txn,
            &site.id,
            driver,
            now,
            self.policy.executor_lease_timeout,
        )
    }

    /// Ends `rec`'s tab run if the server executor driving it lost its
    /// lease: that instance died with the run's ticket
    /// ([`Failure::ExecutorLost`], `unknownTail`).
    fn end_if_driver_lost<W: WriteTransaction>(
        &self,
        txn: &mut Txn<'_, W>,
        site: &Site,
        lineage: &Lineage,
        rec: &mut ExecutionRequest,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        if let Some(driver) = rec.driver()
            && *rec.state() == RequestState::Running
            && !self.driver_live(&*txn, site, driver, now)?
        {
            rec.cancel(Failure::ExecutorLost, now);
            self.save_request(txn, lineage, rec)?;
        }
        Ok(())
    }

    /// Whether the executor `rec`'s run in progress was dispatched to still
    /// holds it: the owning grant's tab on that very connection (and the
    /// live lease of the server executor driving it, if one is named), or
    /// that executor's live lease. `false` when no run is in progress.
    fn run_reachable<R: ReadTransaction>(
        &self,
        txn: &R,
        rec: &ExecutionRequest,
        site: &Site,
        now: Timestamp,
    ) -> Result<bool, StoreError> {
        if *rec.state() != RequestState::Running {
            return Ok(false);
        }
        Ok(match rec.executor() {
            Executor::Tab => {
                live_tab(txn, &rec.grant(), now, self.policy.tab_heartbeat_timeout)?
                    == Some(rec.connection())
                    && match rec.driver() {
                        Some(driver) => self.driver_live(txn, site, driver, now)?,
                        None => true,
                    }
            }
            Executor::Server => lease_live(
                txn,
                &site.id,
                rec.connection(),
                now,
                self.policy.executor_lease_timeout,
            )?,
        })
    }

    /// The checks of every `begin` before its request is looked at, in
    /// order: the site's switch, that the site declares every scope the
    /// host says the call needs (a host's mistake otherwise, refused
    /// before anything is written), the caller's grant, and the rate
    /// limit, whose state moves on for a call it lets through.
    fn admit_caller<W: WriteTransaction>(
        &self,
        txn: &mut Txn<'_, W>,
        principal: &Principal,
        needed: &ScopeSet,
        now: TimestampMs,
    ) -> Result<(Site, Grant), BeginError> {
        let site = load_site(&*txn, &principal.site).map_err(|e| match e {
            SiteOpError::Store(e) => BeginError::Store(e),
            SiteOpError::Site(_) => BeginError::SessionRevoked,
        })?;
        if let Err(SiteError::Disabled { retry_after_secs }) = site.ensure_enabled() {
            return Err(BeginError::Unavailable { retry_after_secs });
        }
        if !needed.is_subset(&site.scopes) {
            return Err(BeginError::UndeclaredScope(
                needed.missing_from(&site.scopes),
            ));
        }
        let (grant, status) = self.grant_status(&*txn, &site, &principal.grant, now.timestamp())?;
        let grant = match (grant, status) {
            (Some(g), Some(GrantStatus::Live)) => g,
            (_, Some(GrantStatus::Expired)) => return Err(BeginError::SessionExpired),
            _ => return Err(BeginError::SessionRevoked),
        };
        let rate_key = keys::rate(&grant.id);
        let tat = txn
            .get(Table::Requests, &rate_key)?
            .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
            .map(u64::from_be_bytes);
        match self.policy.execute_rate.check(tat, now.as_millis()) {
            Ok(next) => txn.put(Table::Requests, &rate_key, &next.to_be_bytes())?,
            Err(retry_after_ms) => return Err(BeginError::RateLimited { retry_after_ms }),
        }
        Ok((site, grant))
    }

    /// Loads what a ticket operation needs, or ends the request if its
    /// grant is no longer live or, for a tab run, its tab connection moved
    /// (a server run's ticket holder is its executor: no tab is looked at).
    fn run_context<W: WriteTransaction>(
        &self,
        txn: &mut Txn<'_, W>,
        ticket: &ExecutionTicket,
        now: Timestamp,
    ) -> Result<RunContext, TicketError> {
        let key = keys::request(&ticket.lineage, &ticket.request_id);
        let Some(mut rec) = txn.load::<ExecutionRequest>(&key)? else {
            return Err(TicketError::Stale);
        };
        if rec.grant() != ticket.grant
            || rec.run() != ticket.run
            || *rec.state() != RequestState::Running
        {
            return Err(TicketError::Stale);
        }
        let site = load_site(&*txn, &ticket.site).map_err(|e| match e {
            SiteOpError::Store(e) => TicketError::Store(e),
            SiteOpError::Site(_) => TicketError::Stale,
        })?;
        let (grant, status) = self.grant_status(&*txn, &site, &rec.grant(), now)?;
        let grant = match (grant, status) {
            (Some(g), Some(GrantStatus::Live)) => g,
            (_, status) => {
                let why = session_failure(status);
                rec.cancel(why, now);
                self.save_request(txn, &ticket.lineage, &rec)?;
                return Err(TicketError::Ended(why));
            }
        };
        let tab = match rec.executor() {
            Executor::Server => None,
            Executor::Tab => {
                let tab = txn
                    .load::<TabConnection>(&keys::tab(&grant.id))?
                    .filter(|t| {
                        t.dispatch(false, now, self.policy.tab_heartbeat_timeout)
                            == Dispatch::To(rec.connection())
                    });
                if tab.is_none() {
                    rec.cancel(Failure::ConnectionLost, now);
                    self.save_request(txn, &ticket.lineage, &rec)?;
                    return Err(TicketError::Ended(Failure::ConnectionLost));
                }
                tab
            }
        };
        Ok(RunContext {
            key,
            rec,
            site,
            grant,
            tab,
        })
    }
}

/// The operations on a run's ticket ([`ExecutionTicket`]): each consumes
/// the ticket it is handed (its answer hands one back), and each attempt
/// of its transaction works on a duplicate, since a conflict may run it
/// again.
#[allow(
    clippy::needless_pass_by_value,
    reason = "a ticket is consumed by contract; an attempt that may re-run on a conflict duplicates or clones what it keeps"
)]
impl<S: Store> Engine<S> {
    /// Authorizes the next action of a run (see [`ActionVerdict`]): replays
    /// a recorded one, checks the scope it names ([`Action::scope`]), the
    /// tab's visibility for actions that drive page controls, and the
    /// approval of writes and unknown effects.
    ///
    /// An action the run can never perform is the host's mistake, refused
    /// (once the ticket is known current and its grant live) with the
    /// ticket handed back and nothing changed ([`TicketError::Invalid`]): a scope the site does not
    /// declare ([`crate::ledger::LedgerError::UndeclaredScope`],
    /// `server_error`), or, on a server run, an action that drives page
    /// controls ([`crate::ledger::LedgerError::InvalidAction`]).
    pub fn authorize_action<X: Within<S>>(
        &self,
        tx: X,
        ticket: ExecutionTicket,
        action: &Action,
        now: Timestamp,
    ) -> Result<ActionVerdict, TicketError> {
        tx.run(self, |txn| {
            self.authorize_action_body(txn, ticket.duplicate(), action, now)
        })
    }

    /// The body of [`Engine::authorize_action`] in either form, generic over the
    /// transaction alone: both forms share one copy per store.
    fn authorize_action_body<W: WriteTransaction>(
        &self,
        txn: &mut Txn<'_, W>,
        ticket: ExecutionTicket,
        action: &Action,
        now: Timestamp,
    ) -> Result<ActionVerdict, TicketError> {
        let mut ticket = ticket;
        let RunContext {
            key,
            mut rec,
            site,
            grant,
            tab,
        } = self.run_context(txn, &ticket, now)?;
        let lineage = ticket.lineage;
        let seq = ticket.next_action;
        let fingerprint = action.fingerprint();
        let recorded: Option<Outcome> = if seq < rec.outcomes() && rec.in_flight().is_none() {
            txn.load(&keys::outcome(&lineage, &rec.id(), seq))?
        } else {
            None
        };
        // The executor's auto-approvals: the tab connection's, or for a
        // server run the grant's, read only for a write (the one effect
        // they can cover) and in place: when they cover it, the grant's
        // record with the write remembered.
        let auto_key = keys::grant_auto_approval(&grant.id);
        let server_auto = if tab.is_none() && action.effect() == Effect::Write {
            txn.get_with(Table::Approvals, &auto_key, |bytes| {
                GrantAutoApproval::approve_stored(bytes, action.kind(), &fingerprint)
            })?
            .flatten()
        } else {
            None
        };
        let auto_approves = match &tab {
            Some(t) => t.auto_approves(action.kind(), &fingerprint),
            None => server_auto.is_some(),
        };
        let in_force = binding(&site, &grant);
        let step = rec.authorize(
            &NextAction {
                seq,
                action,
                declared: &site.scopes,
                scopes: &ticket.scopes,
                tab_visible: tab.as_ref().is_none_or(|t| t.visible),
                auto_approves,
                site_allows_auto: site.auto_approval_allowed,
                binding: in_force,
                client_id: &ticket.client_id,
                client_name: ticket.client_name.as_deref(),
                now,
            },
            recorded,
        );
        match step {
            ActionStep::Refused(e) => Err(TicketError::Invalid(alloc::boxed::Box::new(ticket), e)),
            ActionStep::OutOfOrder => Err(TicketError::OutOfOrder(alloc::boxed::Box::new(ticket))),
            ActionStep::Replay(outcome) => {
                ticket.next_action += 1;
                Ok(ActionVerdict::Replay(ticket, outcome))
            }
            ActionStep::Diverged => {
                self.save_request(txn, &lineage, &rec)?;
                Err(TicketError::Ended(Failure::Diverged))
            }
            ActionStep::MissingScope(needed) => {
                self.save_request(txn, &lineage, &rec)?;
                let md = metadata::protected_resource_metadata_url(&site);
                Ok(ActionVerdict::InsufficientScope(
                    Challenge::insufficient_scope(&md, &needed.union(&ticket.scopes)),
                ))
            }
            ActionStep::TabHidden => {
                self.save_request(txn, &lineage, &rec)?;
                Ok(ActionVerdict::TabNotVisible)
            }
            ActionStep::ApprovalPending(prompt) => {
                self.save_request(txn, &lineage, &rec)?;
                Ok(ActionVerdict::ApprovalPending(prompt))
            }
            ActionStep::Run { auto_approved } => {
                if auto_approved {
                    if let Some(mut tab) = tab {
                        tab.remember_write(fingerprint);
                        txn.save(&keys::tab(&grant.id), &tab)?;
                    } else if let Some(remembered) = &server_auto {
                        txn.put(Table::Approvals, &auto_key, remembered)?;
                    }
                }
                txn.save(&key, &rec)?;
                let about = About::new(&site.id, &grant, &rec);
                about.ran(txn, &self.policy, now, seq, action, auto_approved)?;
                // What the person approved, should the action be withdrawn.
                ticket.approved =
                    (action.effect().needs_approval() && !auto_approved).then_some(Approved {
                        seq,
                        fingerprint,
                        binding: in_force,
                    });
                ticket.next_action += 1;
                Ok(ActionVerdict::Run(ticket))
            }
        }
    }

    /// The action the run was last authorized to perform did not run: its
    /// executor learned, before any effect, that it needs more input first
    /// (a gateway source answered a multi round-trip request's
    /// `InputRequiredResult`, MCP 2026-07-28). The run ends here without an
    /// outcome and the request is parked to resume
    /// ([`ExecutionRequest::withdraw`]): the same request id's next `begin`
    /// starts a new run, which asks for the action afresh. The approval a
    /// person gave for it, if any, is given back for exactly that action,
    /// so one effect is approved once however many input rounds come
    /// before it; an auto-approval is consulted again, and a binding that
    /// changed meanwhile voids the approval given back (the person is
    /// asked again). The ticket is used up.
    ///
    /// Only a host that knows the action had no effect may call this:
    /// anything that may have run is an outcome ([`Engine::record_outcome`]).
    pub fn withdraw_action<X: Within<S>>(
        &self,
        tx: X,
        ticket: ExecutionTicket,
        now: Timestamp,
    ) -> Result<(), TicketError> {
        tx.run(self, |txn| {
            let ticket = ticket.duplicate();
            let RunContext { mut rec, .. } = self.run_context(txn, &ticket, now)?;
            if !rec.withdraw(ticket.approved) {
                return Err(TicketError::OutOfOrder(alloc::boxed::Box::new(ticket)));
            }
            self.save_request(txn, &ticket.lineage, &rec)?;
            Ok(())
        })
    }

    /// Records the outcome of the action the run was last authorized to
    /// perform; returns the ticket for the next action.
    pub fn record_outcome<X: Within<S>>(
        &self,
        tx: X,
        ticket: ExecutionTicket,
        report: Report,
        now: Timestamp,
    ) -> Result<ExecutionTicket, TicketError> {
        tx.run(self, |txn| {
            self.record_outcome_body(txn, ticket.duplicate(), report.clone(), now)
        })
    }

    /// The body of [`Engine::record_outcome`] in either form, generic over the
    /// transaction alone: both forms share one copy per store.
    fn record_outcome_body<W: WriteTransaction>(
        &self,
        txn: &mut Txn<'_, W>,
        ticket: ExecutionTicket,
        report: Report,
        now: Timestamp,
    ) -> Result<ExecutionTicket, TicketError> {
        if let Err(e) = report.validate() {
            return Err(TicketError::Invalid(alloc::boxed::Box::new(ticket), e));
        }
        {
            let RunContext {
                key,
                mut rec,
                site,
                grant,
                ..
            } = self.run_context(txn, &ticket, now)?;
            let Some(done) = rec.confirm() else {
                return Err(TicketError::OutOfOrder(alloc::boxed::Box::new(
                    ticket.duplicate(),
                )));
            };
            About::new(&site.id, &grant, &rec).record(
                txn,
                &self.policy,
                now,
                Some(ActivityAction::confirmed(&done)),
                ActivityEvent::Outcome {
                    status: report.status.clone(),
                },
            )?;
            let outcome = Outcome {
                seq: done.seq,
                kind: done.kind,
                effect: done.effect,
                fingerprint: done.fingerprint,
                status: report.status.clone(),
                summary: report.summary.clone(),
            };
            txn.save(
                &keys::outcome(&ticket.lineage, &rec.id(), done.seq),
                &outcome,
            )?;
            txn.save(&key, &rec)?;
        }
        Ok(ticket)
    }

    /// Ends the run with the code's result or business error and returns
    /// the stored result. `unknownTail` is set if an authorized action was
    /// never confirmed.
    pub fn complete<X: Within<S>>(
        &self,
        tx: X,
        ticket: ExecutionTicket,
        completion: &Completion,
        now: Timestamp,
    ) -> Result<StoredResult, TicketError> {
        tx.run(self, |txn| {
            self.complete_body(txn, ticket.duplicate(), completion, now)
        })
    }

    /// The body of [`Engine::complete`] in either form, generic over the
    /// transaction alone: both forms share one copy per store.
    fn complete_body<W: WriteTransaction>(
        &self,
        txn: &mut Txn<'_, W>,
        ticket: ExecutionTicket,
        completion: &Completion,
        now: Timestamp,
    ) -> Result<StoredResult, TicketError> {
        let end = match End::from_completion(completion, self.policy.max_result_bytes) {
            Ok(end) => end,
            Err(e) => return Err(TicketError::Invalid(alloc::boxed::Box::new(ticket), e)),
        };
        let RunContext {
            mut rec,
            site,
            grant,
            ..
        } = self.run_context(txn, &ticket, now)?;
        rec.finish(end.clone(), false, now);
        self.save_request(txn, &ticket.lineage, &rec)?;
        About::new(&site.id, &grant, &rec).record(
            txn,
            &self.policy,
            now,
            None,
            ActivityEvent::Ended {
                end: activity::end_name(&end),
            },
        )?;
        self.stored(&*txn, &ticket.lineage, &rec, 0)?
            .ok_or(TicketError::Stale)
    }
}

impl<S: Store> Engine<S> {
    /// A page of a stored result's outcomes, from an `outcomeCursor`.
    pub fn outcomes(
        &self,
        principal: &Principal,
        request_id: &RequestId,
        cursor: &str,
        now: Timestamp,
    ) -> Result<OutcomePage, OutcomesError> {
        self.read(|txn| {
            let (site, grant, lineage) = self.live_lineage(txn, principal, now)?;
            let from = ledger::open_cursor(&self.keyring, &lineage, request_id, cursor)
                .map_err(OutcomesError::Invalid)?;
            let rec = self.lineage_request(txn, &site, &grant, &lineage, request_id, now)?;
            match rec.retained_until(self.policy.result_retention) {
                Some(until) if now < until => Ok(self.page(txn, &lineage, &rec, from)?),
                None if rec.is_undecided() => Err(OutcomesError::Pending),
                _ => Err(OutcomesError::ResultExpired),
            }
        })
    }

    /// Where request `request_id` of `principal`'s lineage stands, read
    /// only (nothing moves: no run starts, no rate is counted): what a
    /// client polling a task of it is told (the MCP tasks extension's
    /// `tasks/get`). Refused, as [`Engine::outcomes`] is, for a grant that
    /// is not live, another lineage's request, or a result no longer kept.
    pub fn request_status(
        &self,
        principal: &Principal,
        request_id: &RequestId,
        now: Timestamp,
    ) -> Result<RequestStatus, OutcomesError> {
        self.read(|txn| {
            let (site, grant, lineage) = self.live_lineage(txn, principal, now)?;
            let rec = self.lineage_request(txn, &site, &grant, &lineage, request_id, now)?;
            match rec.state() {
                RequestState::AwaitingApproval(pending) => {
                    Ok(RequestStatus::AwaitingApproval(pending.prompt(rec.id())))
                }
                RequestState::Running | RequestState::Parked(_) => Ok(RequestStatus::InProgress),
                RequestState::Done { .. } => match rec.retained_until(self.policy.result_retention)
                {
                    Some(until) if now < until => self
                        .stored(txn, &lineage, &rec, 0)?
                        .map(RequestStatus::Done)
                        .ok_or(OutcomesError::ResultExpired),
                    _ => Err(OutcomesError::ResultExpired),
                },
                RequestState::Expired => Err(OutcomesError::ResultExpired),
            }
        })
    }

    /// Deletes expired results (keeping tombstones) and records past their
    /// grant's deadline, through the ledger's expiry index, doing at most
    /// `budget` units of work (index entries and outcomes). Returns the work
    /// done; call again while it returns `budget`.
    pub fn sweep_ledger<X: Within<S>>(
        &self,
        tx: X,
        now: Timestamp,
        budget: usize,
    ) -> Result<usize, StoreError> {
        tx.run(self, |txn| self.sweep_ledger_body(txn, now, budget))
    }

    /// The body of [`Engine::sweep_ledger`] in either form, generic over the
    /// transaction alone: both forms share one copy per store.
    fn sweep_ledger_body<W: WriteTransaction>(
        &self,
        txn: &mut Txn<'_, W>,
        now: Timestamp,
        budget: usize,
    ) -> Result<usize, StoreError> {
        let end = keys::ledger_expiry_after(now);
        let due = txn.range(
            Table::Requests,
            Bound::Included(b"e".as_slice()),
            Bound::Excluded(&end),
            budget,
        )?;
        let mut work = 0;
        for (entry, _) in &due {
            if work >= budget {
                break;
            }
            work += 1;
            txn.delete(Table::Requests, entry)?;
            let Some((at, lineage, id)) = keys::split_ledger_expiry(entry) else {
                continue;
            };
            let key = keys::request(&lineage, &id);
            let Some(mut rec) = txn.load::<ExecutionRequest>(&key)? else {
                continue;
            };
            let deadline = rec.next_deadline(self.policy.result_retention);
            if deadline > now {
                txn.put(
                    Table::Requests,
                    &keys::ledger_expiry(deadline, &lineage, &id),
                    &[],
                )?;
                continue;
            }
            if !matches!(rec.state(), RequestState::Expired) {
                let room = budget.saturating_sub(work);
                let outcomes = scan(
                    &*txn,
                    Table::Outcomes,
                    &keys::outcomes(&lineage, &id),
                    room + 1,
                )?;
                let finished = outcomes.len() <= room;
                for (k, _) in outcomes.iter().take(room) {
                    txn.delete(Table::Outcomes, k)?;
                    work += 1;
                }
                if !finished {
                    // Come back for the rest.
                    txn.put(Table::Requests, entry, &[])?;
                    break;
                }
            }
            if now >= rec.grant_end() {
                txn.delete(Table::Requests, &keys::grant_request(&rec.grant(), &id))?;
                if let Some(run) = server_run_key(&rec) {
                    txn.delete(Table::Requests, &run)?;
                }
                // The entry identical calls would join it by goes with it,
                // unless it names a later request already: the table is
                // never larger than the requests it points at.
                let waiting = waiting_key(&lineage, &rec);
                let names_it = txn.get_with(Table::WaitingCalls, &waiting, |bytes| {
                    bytes == id.as_bytes()
                })?;
                if names_it == Some(true) {
                    txn.delete(Table::WaitingCalls, &waiting)?;
                }
                txn.delete(Table::Requests, &key)?;
            } else {
                rec.expire();
                txn.save(&key, &rec)?;
                txn.put(
                    Table::Requests,
                    &keys::ledger_expiry(rec.grant_end(), &lineage, &id),
                    &[],
                )?;
            }
            let _ = at;
        }
        Ok(work)
    }

    /// Ends the runs a host lost: every request still `Running`, on either
    /// executor (a run holds an [`ExecutionTicket`], which lives only in the
    /// host's memory and cannot be persisted), ends with `ExecutorLost`
    /// ("the server instance that ran the call stopped or lost its lease",
    /// `ACTION_UNAVAILABLE`) on a tab as on the server, since what went
    /// away is the host that drove it, with `unknownTail`, since its effects
    /// may have happened. Pending approvals and parked requests are left
    /// alone.
    ///
    /// Call it when a host starts, before it serves, and only when no other
    /// host holds tickets on this store (a single-process server); a fleet
    /// sharing a store would end each other's live runs (a fleet ends its
    /// lost server runs by their leases instead: [`Engine::end_lost_runs`]).
    ///
    /// Looks at up to `budget` undecided requests per call, all or nothing
    /// in one transaction, from `from` (the cursor the previous call
    /// returned, `None` at first); call again with [`Abandoned::next`] until
    /// it is `None`.
    pub fn abandon_running<X: Within<S>>(
        &self,
        tx: X,
        from: Option<&AbandonCursor>,
        now: Timestamp,
        budget: usize,
    ) -> Result<Abandoned, StoreError> {
        tx.run(self, |txn| {
            self.abandon_running_where_body(txn, from, now, budget, every_run)
        })
    }

    /// [`Engine::abandon_running`] for the runs `lost` names only: a host
    /// sharing its store with others ends the runs whose tickets were held
    /// by a host it knows to be gone, and leaves every other `Running`
    /// request alone (its ticket may be live elsewhere). The cursor and
    /// budget work as there.
    pub fn abandon_running_where<X: Within<S>>(
        &self,
        tx: X,
        from: Option<&AbandonCursor>,
        now: Timestamp,
        budget: usize,
        lost: impl Fn(&GrantId, &RequestId) -> bool,
    ) -> Result<Abandoned, StoreError> {
        tx.run(self, |txn| {
            self.abandon_running_where_body(txn, from, now, budget, &lost)
        })
    }

    /// The body of [`Engine::abandon_running_where`] in either form, generic over the
    /// transaction alone: both forms share one copy per store.
    #[allow(
        clippy::unused_self,
        reason = "a method like every other operation body, called as `self.op_body(…)`"
    )]
    fn abandon_running_where_body<W: WriteTransaction>(
        &self,
        txn: &mut Txn<'_, W>,
        from: Option<&AbandonCursor>,
        now: Timestamp,
        budget: usize,
        lost: impl Fn(&GrantId, &RequestId) -> bool,
    ) -> Result<Abandoned, StoreError> {
        let budget = budget.max(1);
        let start = from.map_or(Bound::Included(keys::ALL_GRANT_REQUESTS), |c| {
            Bound::Excluded(c.0.as_slice())
        });
        let end = prefix_end(keys::ALL_GRANT_REQUESTS);
        let end = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let entries = txn.range(Table::Requests, start, end, budget)?;
        let next = (entries.len() == budget)
            .then(|| entries.last().map(|(k, _)| AbandonCursor(k.clone())))
            .flatten();
        let mut ended = 0;
        for (key, lineage) in entries {
            let (Some((grant, id)), Ok(lineage)) = (
                keys::split_grant_request(&key),
                <[u8; 32]>::try_from(lineage.as_slice()).map(Lineage),
            ) else {
                continue;
            };
            if !lost(&grant, &id) {
                continue;
            }
            if let Some(mut rec) = txn.load::<ExecutionRequest>(&keys::request(&lineage, &id))?
                && rec.grant() == grant
                && rec.abandon(now)
            {
                store_request(txn, &lineage, &rec, now)?;
                ended += 1;
            }
        }
        Ok(Abandoned { ended, next })
    }

    /// A request as stored, for administration and tests.
    pub fn execution_request(
        &self,
        principal: &Principal,
        request_id: &RequestId,
    ) -> Result<Option<ExecutionRequest>, StoreError> {
        let lineage = Lineage::of(
            principal.site.as_str(),
            &principal.subject,
            &principal.client_id,
        );
        self.read(|txn| txn.load(&keys::request(&lineage, request_id)))
    }
}

/// Where a request stands, as [`Engine::request_status`] reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestStatus {
    /// It waits for the person's decision on this prompt.
    AwaitingApproval(ApprovalPrompt),
    /// A run holds it, or it waits to be resumed (a scope, the tab, a
    /// decision already made).
    InProgress,
    /// It ended: its stored result (the first page of outcomes).
    Done(StoredResult),
}

/// What [`Engine::abandon_running`] counts as lost: every run. A function,
/// not a closure, so that it and [`Engine::abandon_running_where`] share
/// one compiled body.
fn every_run(_: &GrantId, _: &RequestId) -> bool {
    true
}
